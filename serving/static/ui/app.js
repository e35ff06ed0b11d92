// searchsmith's answer page: asks /v1/search (Server-Sent Events) and shows the answer as it
// streams, then its citations, timeline, images and trace. Plain JavaScript, no library, no
// network access beyond this server. Text from the server is only ever inserted as text
// (textContent / createTextNode), never as HTML.
"use strict";

(function () {
  const state = {
    apiKey: null,      // kept in memory only: never in the URL or in storage
    history: [],       // [{role, content}], oldest first: what /v1/search calls history
    busy: false,
    turns: 0,
    pinned: null,      // the [n] button whose passage stays open after a click
  };

  const $ = (id) => document.getElementById(id);

  // ---- small DOM helpers ---------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k === "style") node.style.cssText = v;  // CSSOM: allowed by the page's CSP
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  // ``text`` with every occurrence of ``needles`` wrapped in <mark class=cls> (longest first,
  // no overlaps, case-sensitive as the server found them).
  function markText(text, needles, cls, title) {
    const frag = document.createDocumentFragment();
    const hits = [];
    const sorted = [...new Set((needles || []).filter((n) => n && n.trim()))].sort((a, b) => b.length - a.length);
    for (const n of sorted) {
      let from = 0;
      for (;;) {
        const at = text.indexOf(n, from);
        if (at < 0) break;
        const end = at + n.length;
        if (!hits.some(([a, b]) => at < b && end > a)) hits.push([at, end]);
        from = end;
      }
    }
    hits.sort((x, y) => x[0] - y[0]);
    let pos = 0;
    for (const [a, b] of hits) {
      if (a > pos) frag.append(text.slice(pos, a));
      frag.append(el("mark", { class: cls, title: title }, text.slice(a, b)));
      pos = b;
    }
    if (pos < text.length) frag.append(text.slice(pos));
    return frag;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "–";
    return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
  }

  function fmtScore(x) {
    return typeof x === "number" && isFinite(x) ? x.toFixed(3) : "–";
  }

  // ---- requests ------------------------------------------------------------------------
  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    if (state.apiKey) h["Authorization"] = `Bearer ${state.apiKey}`;
    return h;
  }

  // A failed request as one sentence a person can act on.
  async function describeFailure(res) {
    let message = "";
    try {
      const body = await res.json();
      message = (body && body.error && body.error.message) || "";
    } catch (_) {
      message = "";
    }
    message = message.trim();
    if (message && !/[.!?]$/.test(message)) message += ".";
    const status = res.status;
    if (status === 429) {
      const after = res.headers.get("Retry-After");
      return `The server is busy (429): ${message || "too many requests."}` +
        (after ? ` Retry in ${after} s.` : " Retry in a moment.");
    }
    if (status === 504) return `The answer took too long (504): ${message || "timeout."} Try again, or a shorter question.`;
    if (status === 503) return `The server is not ready (503): ${message || "the models are loading."}`;
    if (status === 404) return `This server does not serve that (404): ${message || "not configured."}`;
    if (status === 401) return `The server needs an API key (401): ${message || "missing or wrong key."}`;
    return `The server answered ${status}: ${message || res.statusText || "error"}`;
  }

  function unreachable(err) {
    return `The server cannot be reached (${err && err.message ? err.message : "network error"}). ` +
      "Is searchsmith serve still running?";
  }

  // ---- server status and API key -------------------------------------------------------
  async function checkServer() {
    const status = $("server-status");
    try {
      const res = await fetch("/v1/models", { headers: headers(false) });
      if (res.status === 401) {
        showKeyPanel(state.apiKey ? "That key was refused; check it against server.api_keys." : "");
        status.textContent = "This server needs an API key.";
        return false;
      }
      if (!res.ok) {
        status.textContent = await describeFailure(res);
        return false;
      }
      const body = await res.json();
      const names = (body.data || []).map((m) => m.id).join(", ");
      status.textContent = `Connected${names ? `: ${names}` : ""}.`;
      $("key-panel").hidden = true;
      return true;
    } catch (err) {
      status.textContent = unreachable(err);
      return false;
    }
  }

  function showKeyPanel(note) {
    $("key-panel").hidden = false;
    $("key-status").textContent = note || "";
    $("api-key").focus();
  }

  // ---- the conversation ----------------------------------------------------------------
  function newConversation() {
    state.history = [];
    hidePop(true);
    const conv = $("conversation");
    conv.replaceChildren(el("p", { id: "empty-hint", class: "hint" },
      "New conversation. Ask a question about the indexed sources."));
    $("trace").replaceChildren(el("p", { class: "hint" }, "What each stage did appears here once an answer is complete."));
    $("question").value = "";
    $("question").focus();
  }

  function makeTurn(question) {
    state.turns += 1;
    const id = `turn-${state.turns}`;
    const hint = $("empty-hint");
    if (hint) hint.remove();
    const answer = el("div", { class: "answer", "aria-live": "polite", "aria-busy": "true" },
      el("p", { class: "answer-text" }));
    const turn = el("article", { class: "turn", id: id, "data-state": "waiting", "aria-labelledby": `${id}-q` },
      el("h3", { class: "question", id: `${id}-q` }, question),
      el("p", { class: "progress", role: "status" }, "Searching…"),
      answer);
    $("conversation").append(turn);
    turn.scrollIntoView({ block: "nearest" });
    return turn;
  }

  function turnError(turn, message) {
    turn.dataset.state = "error";
    turn.querySelector(".answer").setAttribute("aria-busy", "false");
    const progress = turn.querySelector(".progress");
    if (progress) progress.remove();
    turn.append(el("p", { class: "error", role: "alert" }, message));
  }

  async function ask(question) {
    if (state.busy) return;
    state.busy = true;
    $("ask").disabled = true;
    hidePop(true);
    const turn = makeTurn(question);
    const body = { query: question, stream: true };
    if (state.history.length) body.history = state.history.slice();
    let res;
    try {
      res = await fetch("/v1/search", { method: "POST", headers: headers(true), body: JSON.stringify(body) });
    } catch (err) {
      turnError(turn, unreachable(err));
      return finish();
    }
    if (!res.ok) {
      const message = await describeFailure(res);
      turnError(turn, message);
      if (res.status === 401) showKeyPanel("Type a key from server.api_keys, then ask again.");
      return finish();
    }
    let result;
    try {
      result = await readStream(res, turn);
    } catch (err) {
      turnError(turn, `The answer stream broke off (${err && err.message ? err.message : err}).`);
      return finish();
    }
    conclude(turn, question, result);
    return finish();

    function finish() {
      state.busy = false;
      $("ask").disabled = false;
    }
  }

  // A finished stream: the turn is done and joins the history, or says what went wrong.
  function conclude(turn, question, result) {
    if (result.error) {
      turnError(turn, result.error);
    } else if (!result.done) {
      turnError(turn, "The answer stream ended before the server finished; ask again.");
    } else {
      turn.dataset.state = "done";
      state.history.push({ role: "user", content: question }, { role: "assistant", content: result.text });
    }
  }

  // Reads the event stream: text pieces as they come, then the rest of the answer.
  async function readStream(res, turn) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const acc = { done: false, error: null, text: "", deltas: 0, buffer: "" };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      feed(turn, acc, decoder.decode(value, { stream: true }));
    }
    return settle(turn, acc);
  }

  // Splits what has arrived into events (blank-line separated) and applies the complete ones.
  function feed(turn, acc, chunk) {
    acc.buffer += chunk.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = acc.buffer.indexOf("\n\n")) >= 0) {
      const block = acc.buffer.slice(0, cut);
      acc.buffer = acc.buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      const payload = data.join("\n");
      if (payload === "[DONE]") acc.done = true;
      else if (payload) applyEvent(turn, acc, name, JSON.parse(payload));
    }
  }

  function applyEvent(turn, acc, name, data) {
    if (name === "answer") {
      if (typeof data.replace === "string") acc.text = data.replace;
      else acc.text += data.delta || "";
      acc.deltas += 1;
      turn.dataset.state = "streaming";
      turn.dataset.deltas = String(acc.deltas);
      turn.querySelector(".answer-text").textContent = acc.text;
      const progress = turn.querySelector(".progress");
      if (progress) progress.textContent = "Writing the answer…";
    } else if (name === "citations") {
      renderAnswer(turn, data);
    } else if (name === "timeline") {
      renderTimeline(turn, data.timeline || []);
    } else if (name === "images") {
      renderImages(turn, data.images || []);
    } else if (name === "trace") {
      turn.dataset.queryId = data.query_id || "";
      if (turn.dataset.answerFound === "false") renderSearched(turn, data.passages || []);
      renderTrace(data);
      addTurnTools(turn, data);
    } else if (name === "error") {
      const e = (data && data.error) || {};
      acc.error = `The server failed while answering (${data.status || "error"}): ${e.message || "unknown error"}`;
    }
  }

  function settle(turn, acc) {
    turn.querySelector(".answer").setAttribute("aria-busy", "false");
    const progress = turn.querySelector(".progress");
    if (progress) progress.remove();
    return { done: acc.done, error: acc.error, text: acc.text };
  }

  // ---- the answer: sentences, entities, [n] markers, references ---------------------------
  function renderAnswer(turn, cit) {
    const box = turn.querySelector(".answer");
    // a server without the field answered: only an explicit false is "no answer"
    const found = cit.answer_found !== false;
    turn.dataset.answerFound = found ? "true" : "false";
    if (!found) return renderNoAnswer(box, cit);
    const refs = new Map((cit.references || []).map((r) => [r.n, r]));
    turn._refs = refs;
    const parts = [];
    const units = [];
    let sentences = cit.sentences || [];
    if (cit.short_answer) {
      // the reader's short answer leads the answer as its own sentence: shown once, as the
      // answer, with that sentence's citations (and still the first unit images count)
      const lead = el("p", { class: "short-answer" }, el("span", { class: "label" }, "Answer: "),
        el("strong", {}, cit.short_answer));
      const bare = (t) => t.replace(/[.!?]+$/, "").trim().toLowerCase();
      if (sentences.length && bare(sentences[0].text) === bare(cit.short_answer)) {
        for (const c of sentences[0].citations || []) lead.append(citeButton(c, refs, turn));
        sentences = sentences.slice(1);
        units.push(el("div", { class: "unit lead" }, lead));
      } else {
        parts.push(lead);
      }
    }
    if (sentences.length) {
      // one block per paragraph of the answer, or per sentence when it is one paragraph (the
      // units images are placed beside, as the server's images stage counts them)
      const paras = (cit.answer || "").split(/\n\s*\n/).filter((p) => p.trim());
      const groups = paras.length > 1 ? paras.map(() => []) : sentences.map(() => []);
      let p = 0;
      sentences.forEach((s, i) => {
        if (paras.length > 1) {
          while (p < paras.length - 1 && !paras[p].includes(s.text.slice(0, 20))) p += 1;
          groups[p].push(s);
        } else {
          groups[i].push(s);
        }
      });
      for (const group of groups) {
        if (!group.length) continue;
        const para = el("p", { class: "unit-text" });
        for (const s of group) para.append(renderSentence(s, refs, turn), " ");
        units.push(el("div", { class: "unit" }, para));
      }
    } else if (cit.answer) {
      units.push(el("div", { class: "unit" }, el("p", { class: "unit-text" }, cit.answer)));
    }
    box.replaceChildren(...parts, ...units);
    box.setAttribute("aria-busy", "false");
    if (refs.size) {
      const list = el("ol", { class: "reference-list" });
      for (const r of refs.values()) {
        list.append(el("li", { id: `${turn.id}-ref-${r.n}`, value: r.n, "data-n": r.n },
          docHead(r), " ", el("span", { class: "badge" }, r.source || ""),
          el("span", { class: "ref-score" }, ` score ${fmtScore(r.score)}`)));
      }
      turn.append(el("section", { class: "references", "aria-label": "References" },
        el("h4", {}, "References"), list));
    }
  }

  // A document's title, as a link only when its url is a web address: a corpus may carry any
  // string as a document's url ("javascript:...", "file:///..."), shown then as text after it.
  function docHead(r) {
    const title = r.title || r.doc_id;
    const web = typeof r.url === "string" && /^https?:\/\//i.test(r.url);
    return web
      ? el("a", { href: r.url, target: "_blank", rel: "noopener noreferrer" }, title)
      : el("span", { class: "ref-title", title: r.url || "" }, r.url ? `${title} (${r.url})` : title);
  }

  // The sources do not support an answer (answer_found: false): the server's no-answer text in
  // a muted panel that says so in words, not by colour alone; no short answer, nothing cited.
  // The passages searched are listed when the trace event brings them (renderSearched).
  function renderNoAnswer(box, cit) {
    box.classList.add("no-answer");
    box.replaceChildren(el("div", { class: "no-answer-panel" },
      el("p", { class: "no-answer-label" }, "No answer"),
      el("p", { class: "no-answer-text" }, cit.answer || "No answer found in the sources."),
      el("p", { class: "no-answer-help" },
        "The sources searched below do not support an answer, so nothing is cited. " +
        "Rephrasing, or asking about something the indexed sources cover, may help.")));
    box.setAttribute("aria-busy", "false");
  }

  // What a no-answer turn searched: each document once, in retrieval order, not numbered as
  // citations are.
  function renderSearched(turn, passages) {
    const seen = new Set();
    const list = el("ul", { class: "searched-list" });
    for (const p of passages) {
      if (seen.has(p.doc_id)) continue;
      seen.add(p.doc_id);
      list.append(el("li", { "data-doc-id": p.doc_id }, docHead(p), " ", el("span", { class: "badge" }, p.source || ""),
        el("span", { class: "ref-score" }, ` score ${fmtScore(p.score)}`)));
    }
    turn.append(el("section", { class: "searched", "aria-label": "Sources searched" },
      el("h4", {}, seen.size ? "Sources searched (none cited)" : "Sources searched: none found"),
      seen.size ? list : null));
  }

  function renderSentence(s, refs, turn) {
    const span = el("span", { class: "sentence" });
    span.append(markText(s.text, s.entities || [], "entity", "cited entity"));
    for (const c of s.citations || []) span.append(citeButton(c, refs, turn));
    return span;
  }

  // An [n] marker: shows its passage on hover and on keyboard focus; a click keeps it open.
  function citeButton(c, refs, turn) {
    const r = refs.get(c.n);
    const label = `Source ${c.n}${r && r.title ? `: ${r.title}` : ""}`;
    const btn = el("button", {
      type: "button", class: "cite", "data-n": c.n, "aria-label": label, "aria-expanded": "false",
      "aria-controls": "cite-pop",
    }, `[${c.n}]`);
    btn._citation = c;
    btn._turn = turn;
    btn.addEventListener("mouseenter", () => showPop(btn));
    btn.addEventListener("mouseleave", () => hidePop(false));
    btn.addEventListener("focus", () => showPop(btn));
    btn.addEventListener("blur", () => hidePop(false));
    btn.addEventListener("click", () => {
      state.pinned = state.pinned === btn ? null : btn;
      if (state.pinned) showPop(btn);
      else hidePop(true);
    });
    return btn;
  }

  // The cited passage: title, source, score, and its text around the supporting sentence,
  // which is highlighted.
  function showPop(btn) {
    const pop = $("cite-pop");
    const c = btn._citation;
    const r = btn._turn._refs.get(c.n);
    if (!r) return;
    const text = (r.text || "").replace(/\s+/g, " ").trim();
    const quote = (c.quote || "").replace(/\s+/g, " ").trim();
    const snippet = el("blockquote", { class: "snippet" });
    const at = quote ? text.indexOf(quote) : -1;
    if (at >= 0) {
      const from = Math.max(0, at - 240);
      const to = Math.min(text.length, at + quote.length + 240);
      if (from > 0) snippet.append("… ");
      snippet.append(text.slice(from, at), el("mark", { class: "support" }, quote), text.slice(at + quote.length, to));
      if (to < text.length) snippet.append(" …");
    } else if (quote) {
      snippet.append(el("mark", { class: "support" }, quote));
    } else {
      snippet.append(text.slice(0, 480) + (text.length > 480 ? " …" : ""));
    }
    pop.replaceChildren(
      el("p", { class: "pop-title" }, `[${c.n}] ${r.title || r.doc_id}`),
      el("p", { class: "pop-meta" }, `${r.source || ""} · ${r.doc_id} · support ${fmtScore(c.score)}` +
        (typeof r.score === "number" ? ` · retrieval ${fmtScore(r.score)}` : "")),
      snippet);
    pop.dataset.n = String(c.n);
    pop.dataset.turn = btn._turn.id;
    pop.hidden = false;
    for (const b of document.querySelectorAll(".cite[aria-expanded=true]")) b.setAttribute("aria-expanded", "false");
    btn.setAttribute("aria-expanded", "true");
    btn.setAttribute("aria-describedby", "cite-pop");
    const box = btn.getBoundingClientRect();
    const width = Math.min(420, window.innerWidth - 16);
    pop.style.width = `${width}px`;
    pop.style.left = `${Math.max(8, Math.min(box.left + window.scrollX, window.scrollX + window.innerWidth - width - 8))}px`;
    pop.style.top = `${box.bottom + window.scrollY + 6}px`;
  }

  function hidePop(force) {
    if (state.pinned && !force) {
      showPop(state.pinned);
      return;
    }
    if (force) state.pinned = null;
    const pop = $("cite-pop");
    pop.hidden = true;
    for (const b of document.querySelectorAll(".cite[aria-expanded=true]")) {
      b.setAttribute("aria-expanded", "false");
      b.removeAttribute("aria-describedby");
    }
  }

  // ---- timeline and images -------------------------------------------------------------
  function renderTimeline(turn, groups) {
    if (!groups.length) return;
    const list = el("ol", { class: "timeline-list" });
    for (const g of groups) {
      const events = el("ol", { class: "events" });
      for (const e of g.events || []) {
        events.append(el("li", { class: "event" },
          el("time", { datetime: e.date }, e.date), " ",
          el("span", { class: "event-text" }, e.text),
          (e.sources || []).length ? el("span", { class: "event-sources" }, ` (${e.sources.join(", ")})`) : null));
      }
      list.append(el("li", { class: "year" }, el("span", { class: "year-label" }, g.year), events));
    }
    turn.append(el("section", { class: "timeline", "aria-label": "Timeline" }, el("h4", {}, "Timeline"), list));
  }

  function renderImages(turn, images) {
    const units = turn.querySelectorAll(".answer .unit");
    for (const im of images) {
      const unit = pickUnit(units, im);
      const caption = im.caption || "";
      const img = el("img", { alt: caption || `An image of ${im.doc_id}`, loading: "lazy" });
      const fig = el("figure", { class: "placed-image", "data-image-id": im.image_id },
        img, el("figcaption", {}, `${caption ? caption + " · " : ""}placement score ${fmtScore(im.score)}`));
      // first in its unit, floated right: the paragraph's text runs beside it
      (unit || turn.querySelector(".answer")).prepend(fig);
      loadImage(img, fig, im);
    }
  }

  // The unit the server placed the image beside: its index, checked against its first words.
  function pickUnit(units, im) {
    const start = (im.after || "").slice(0, 40);
    const byIndex = units[im.paragraph];
    if (byIndex && (!start || byIndex.textContent.includes(start.slice(0, 20)))) return byIndex;
    for (const u of units) if (start && u.textContent.includes(start.slice(0, 20))) return u;
    return byIndex || units[units.length - 1] || null;
  }

  async function loadImage(img, fig, im) {
    const url = `/v1/images/file?doc_id=${encodeURIComponent(im.doc_id)}&image_id=${encodeURIComponent(im.image_id)}`;
    try {
      const res = await fetch(url, { headers: headers(false) });
      if (!res.ok) throw new Error(`${res.status}`);
      img.src = URL.createObjectURL(await res.blob());
      img.addEventListener("load", () => { fig.dataset.loaded = "true"; }, { once: true });
    } catch (err) {
      img.remove();
      fig.prepend(el("p", { class: "image-missing" }, `Image unavailable (${err.message}).`));
    }
  }

  // ---- feedback and per-turn tools ------------------------------------------------------
  function addTurnTools(turn, traceData) {
    const status = el("span", { class: "feedback-status", role: "status" });
    const send = async (quality, btn) => {
      for (const b of turn.querySelectorAll(".feedback button")) {
        b.disabled = true;
        b.setAttribute("aria-pressed", b === btn ? "true" : "false");
      }
      status.textContent = "Sending…";
      try {
        const res = await fetch("/v1/feedback", {
          method: "POST", headers: headers(true),
          body: JSON.stringify({ query_id: turn.dataset.queryId, quality: quality }),
        });
        if (!res.ok) {
          status.textContent = await describeFailure(res);
          for (const b of turn.querySelectorAll(".feedback button")) b.disabled = false;
          return;
        }
        const body = await res.json();
        turn.dataset.feedback = body.recorded ? "recorded" : "accepted";
        status.textContent = body.recorded
          ? `Thanks: recorded for preset ${body.preset} (reward ${fmtScore(body.reward)}).`
          : "Thanks: received, not learned from (the protocol router is off on this server).";
        if (!body.recorded && body.message) status.title = body.message;
      } catch (err) {
        status.textContent = unreachable(err);
        for (const b of turn.querySelectorAll(".feedback button")) b.disabled = false;
      }
    };
    const up = el("button", { type: "button", class: "thumb up", "aria-label": "Good answer", "aria-pressed": "false" }, "✓ Helpful");
    const down = el("button", { type: "button", class: "thumb down", "aria-label": "Bad answer", "aria-pressed": "false" }, "✗ Not helpful");
    up.addEventListener("click", () => send(1.0, up));
    down.addEventListener("click", () => send(0.0, down));
    const showTrace = el("button", { type: "button", class: "show-trace" }, "Show this answer's trace");
    showTrace.addEventListener("click", () => {
      renderTrace(traceData);
      $("trace-title").scrollIntoView({ block: "nearest" });
    });
    turn.append(el("div", { class: "feedback", role: "group", "aria-label": "Rate this answer" },
      el("span", {}, "Was this answer useful?"), up, down, status, showTrace));
  }

  // ---- the trace panel -----------------------------------------------------------------
  function renderTrace(data) {
    const t = data.trace || {};
    const box = $("trace");
    const routing = t.routing || {};
    const facts = el("dl", { class: "facts" });
    const fact = (k, v) => facts.append(el("dt", {}, k), el("dd", {}, v === null || v === undefined || v === "" ? "–" : String(v)));
    fact("Question", data.query);
    fact("Rewritten query", data.rewrite && data.rewrite !== data.query ? data.rewrite : "(unchanged)");
    fact("Preset (protocol router)", t.preset);
    fact("Strategy", t.strategy);
    fact("Graph type", t.graph_type);
    fact("Routing", routing.mode ? `${routing.mode}${routing.fallback ? " (fallback: every source)" : ""}` : "–");
    fact("Total", `${fmtMs(t.total_ms)}, ${t.model_calls || 0} model calls, ${t.tokens_in || 0} tokens in, ${t.tokens_out || 0} out`);

    const sources = el("ul", { class: "bars sources" });
    const routed = routing.sources || [];
    const top = Math.max(1e-9, ...routed.map((s) => Math.abs(s.score || 0)));
    for (const s of routed) {
      sources.append(barRow(s.source, s.score, Math.abs(s.score || 0) / top, fmtScore(s.score), "source"));
    }
    if (!routed.length) sources.append(el("li", {}, (t.sources || []).join(", ") || "–"));

    const stages = el("ul", { class: "bars stages" });
    const entries = Object.entries(t.stages || {});
    const longest = Math.max(1e-9, ...entries.map(([, v]) => v.latency_ms || 0));
    for (const [name, v] of entries) {
      const label = v.skipped ? `${fmtMs(v.latency_ms)} (skipped)` : fmtMs(v.latency_ms);
      const row = barRow(name, v.latency_ms, (v.latency_ms || 0) / longest, label, "stage");
      if (name.includes(".")) row.classList.add("sub");
      const extra = [];
      if (v.model_calls) extra.push(`${v.model_calls} calls, ${v.tokens_in} in / ${v.tokens_out} out tokens`);
      if (v.note) extra.push(v.note);
      if (extra.length) row.append(el("span", { class: "row-note" }, extra.join("; ")));
      stages.append(row);
    }

    const notes = el("ul", { class: "notes" });
    for (const n of t.notes || []) notes.append(el("li", {}, n));
    const gates = el("ul", { class: "gates" });
    for (const [use, g] of Object.entries(t.gates || {})) {
      gates.append(el("li", { class: g.used ? "gate used" : "gate off" },
        el("strong", {}, `${use} (${g.role}): `), g.used ? "used" : `not used: ${g.reason || ""}`));
    }

    // replaceChildren writes a null as the text "null": the absent boxes are left out first
    box.replaceChildren(...[
      facts,
      el("h3", {}, "Routed sources"), sources,
      el("h3", {}, "Decomposition graph"), graph(data.nodes || []),
      el("h3", {}, "Time per stage"), stages,
      (t.notes || []).length ? el("details", { class: "notes-box" }, el("summary", {}, `Notes (${t.notes.length})`), notes) : null,
      Object.keys(t.gates || {}).length ? el("details", { class: "gates-box" }, el("summary", {}, "Models and their gates"), gates) : null,
    ].filter(Boolean));
    box.dataset.queryId = data.query_id || "";
  }

  function barRow(name, value, frac, label, kind) {
    const pct = Math.max(0, Math.min(1, frac || 0)) * 100;
    return el("li", { class: `bar-row ${kind}`, "data-name": name },
      el("span", { class: "bar-name" }, name),
      el("span", { class: "bar", "aria-hidden": "true" }, el("span", { class: "bar-fill", style: `width:${pct.toFixed(1)}%` })),
      el("span", { class: "bar-value" }, label));
  }

  // The decomposition graph as SVG: columns by depth (a node sits right of what it depends
  // on), edges as arrows; and the same as a list for screen readers.
  function graph(nodes) {
    const wrap = el("div", { class: "graph" });
    if (!nodes.length) {
      wrap.append(el("p", { class: "hint" }, "No sub-questions (nothing was searched)."));
      return wrap;
    }
    const byId = new Map(nodes.map((n) => [n.id, n]));
    const depth = new Map();
    const depthOf = (n, seen) => {
      if (depth.has(n.id)) return depth.get(n.id);
      if (seen.has(n.id)) return 0;
      seen.add(n.id);
      const ds = (n.depends_on || []).map((d) => byId.get(d)).filter(Boolean).map((d) => depthOf(d, seen) + 1);
      const v = ds.length ? Math.max(...ds) : 0;
      depth.set(n.id, v);
      return v;
    };
    nodes.forEach((n) => depthOf(n, new Set()));
    const cols = new Map();
    for (const n of nodes) {
      const d = depth.get(n.id);
      if (!cols.has(d)) cols.set(d, []);
      cols.get(d).push(n);
    }
    const W = 150, H = 46, GX = 40, GY = 14, PAD = 6;
    const ncol = Math.max(...cols.keys()) + 1;
    const nrow = Math.max(...[...cols.values()].map((c) => c.length));
    const width = PAD * 2 + ncol * W + (ncol - 1) * GX;
    const height = PAD * 2 + nrow * H + (nrow - 1) * GY;
    const pos = new Map();
    for (const [d, col] of cols) col.forEach((n, i) => pos.set(n.id, [PAD + d * (W + GX), PAD + i * (H + GY)]));
    const edges = nodes.reduce((k, n) => k + (n.depends_on || []).filter((d) => byId.has(d)).length, 0);
    const root = svg("svg", {
      viewBox: `0 0 ${width} ${height}`, width: width, height: height, role: "img",
      "aria-label": `Decomposition graph: ${nodes.length} node${nodes.length === 1 ? "" : "s"}, ${edges} edge${edges === 1 ? "" : "s"}`,
      class: "graph-svg",
    });
    const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" })));
    root.append(defs);
    for (const n of nodes) {
      for (const d of n.depends_on || []) {
        if (!pos.has(d)) continue;
        const [x1, y1] = pos.get(d);
        const [x2, y2] = pos.get(n.id);
        root.append(svg("line", { class: "edge", "data-from": d, "data-to": n.id, x1: x1 + W, y1: y1 + H / 2, x2: x2, y2: y2 + H / 2, "marker-end": "url(#arrow)" }));
      }
    }
    for (const n of nodes) {
      const [x, y] = pos.get(n.id);
      const label = n.text.length > 42 ? `${n.text.slice(0, 40)}…` : n.text;
      const g = svg("g", { class: "node", "data-id": n.id });
      g.append(svg("title", {}, `#${n.id}: ${n.text}${n.answer ? ` → ${n.answer}` : ""}`),
        svg("rect", { x: x, y: y, width: W, height: H, rx: 6 }),
        svg("text", { x: x + 6, y: y + 16, class: "node-id" }, `#${n.id}${n.answer ? ` → ${n.answer.slice(0, 16)}` : ""}`),
        svg("text", { x: x + 6, y: y + 34, class: "node-text" }, label.length > 24 ? `${label.slice(0, 23)}…` : label));
      root.append(g);
    }
    const list = el("ol", { class: "visually-hidden" });
    for (const n of nodes) {
      const deps = (n.depends_on || []).length ? ` (uses ${n.depends_on.map((d) => `#${d}`).join(", ")})` : "";
      list.append(el("li", {}, `#${n.id}: ${n.text}${deps}`));
    }
    wrap.append(root, list);
    return wrap;
  }

  // ---- wiring --------------------------------------------------------------------------
  function init() {
    $("ask-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const q = $("question").value.trim();
      if (!q || state.busy) return;
      $("question").value = "";
      ask(q);
    });
    $("question").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $("ask-form").requestSubmit();
      }
    });
    $("new-conversation").addEventListener("click", newConversation);
    $("key-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const key = $("api-key").value.trim();
      if (!key) return;
      state.apiKey = key;
      $("api-key").value = "";
      $("key-status").textContent = "Checking the key…";
      if (await checkServer()) $("question").focus();
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") hidePop(true);
    });
    window.addEventListener("resize", () => hidePop(true));
    checkServer();
  }

  // For the browser tests: draw a trace, or replay a recorded /v1/search event stream as a
  // turn (the same parsing and rendering as a live answer), without asking the server.
  function replay(question, transcript) {
    const turn = makeTurn(question);
    const acc = { done: false, error: null, text: "", deltas: 0, buffer: "" };
    feed(turn, acc, transcript);
    conclude(turn, question, settle(turn, acc));
    return turn.id;
  }
  window.searchsmithPage = Object.freeze({ renderTrace: renderTrace, replay: replay });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
