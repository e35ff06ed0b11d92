"""The answer page in a real browser: headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium) against a real ``searchsmith serve`` on loopback.

The server indexes the demo knowledge base (models/demo) with the offline base embedder and
answers through ``generation.backend: openai`` from an OpenAI-compatible stand-in started here:
it copies the context sentence sharing most words with the question and streams it word by
word, slowly enough that the page's intermediate states can be seen. The server requires an
API key, and its question queue holds one waiting call, so a third concurrent question is 429.

Screenshots of the main states go to a folder printed at the end of the run
(``SEARCHSMITH_UI_SHOTS`` to choose it). Every test fails on any JavaScript error or console
error in the browser; failed requests are allowed only where the test provokes them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from searchsmith.serving.profiling.common import free_port

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:
    pytest.skip("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver; "
                ".ci/run installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO_CORPUS = REPO / "models" / "demo" / "corpus.jsonl"
KEY = "page-test-key"
# The demo's two-turn question as the page is tested with it: the first turn's answer has an
# image placed beside it; the follow-up names no product (the history does) and has a timeline.
FIRST = "Which parts is a Quarry deployment built from?"
FOLLOW_UP = "When did Northwind Labs release it?"
WORD_DELAY_S = 0.12


# ---- an OpenAI-compatible stand-in that streams slowly ---------------------------------------
def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def stand_in_answer(prompt: str) -> str:
    """The context sentence sharing most words with the question's own part (the rewrite's
    added history terms only break ties), with the passage's marker."""
    question = prompt.rsplit("Question:", 1)[-1].split("\nAnswer:", 1)[0].strip()
    own = _words(question.split(" (", 1)[0])
    every = _words(question)
    best, best_score = "I could not find it.", 0.0
    for line in prompt.splitlines():
        m = re.match(r"\[(\d+)\] (?:[^:]*: )?(.*)", line)
        if not m:
            continue
        for sent in re.split(r"(?<=[.!?])\s+", m.group(2)):
            w = _words(sent)
            score = 10 * len(own & w) + len(every & w)
            if score > best_score:
                best, best_score = f"{sent.strip()} [{m.group(1)}]", score
    return best


class StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        StandIn.requests.append(prompt)
        text = stand_in_answer(prompt)
        delay = 0.8 if "slowly" in prompt else WORD_DELAY_S
        if not body.get("stream"):
            data = json.dumps({"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        pieces = re.findall(r"\S+\s*", text)
        try:
            for i, piece in enumerate(pieces):
                chunk = {"choices": [{"delta": {"content": piece},
                                      "finish_reason": "stop" if i == len(pieces) - 1 else None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(delay)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


@pytest.fixture(scope="module")
def llm_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


# ---- the server ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    from searchsmith.serving.main import main

    out = tmp_path_factory.mktemp("page") / "index"
    assert main(["index", str(DEMO_CORPUS), "--out", str(out)]) == 0
    return out


class Server:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_server(config: Path, log: Path) -> Server:
    """``searchsmith serve --config CONFIG`` on a free loopback port, once /ready says so."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SEARCHSMITH_LOG": "warning"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "searchsmith.serving.main", "serve", "--config", str(config),
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env)
    srv = Server(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 240
    while True:
        if proc.poll() is not None:
            pytest.fail(f"searchsmith serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{srv.url}/ready", timeout=2).status_code == 200:
                return srv
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            srv.stop()
            pytest.fail(f"searchsmith serve was not ready within 240 s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def server(demo_index, llm_url, tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    cfg = {
        "index": str(demo_index),
        "server": {"api_keys": [KEY], "calls": {"max_batch_size": 1, "max_wait_ms": 0.0, "max_queue": 1, "workers": 1}},
        "pipeline": {"generation": {"backend": "openai", "openai": {"base_url": llm_url, "model": "stand-in"}}},
    }
    (work / "serve.yaml").write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    srv = start_server(work / "serve.yaml", work / "serve.log")
    yield srv
    srv.stop()


# ---- the browser -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shots(request, tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SEARCHSMITH_UI_SHOTS") or tmp_path_factory.mktemp("answer-page-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nanswer page screenshots: {folder}")


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--lang=en-US"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


class Console:
    """The browser's console since the last check; failed requests only with an allowed status."""

    def __init__(self, driver) -> None:
        self.driver = driver
        self.allowed: set[int] = set()
        self.refused = False  # the server is down: refused connections are expected

    def allow(self, *statuses: int) -> None:
        self.allowed.update(statuses)

    def check(self) -> None:
        bad = []
        for entry in self.driver.get_log("browser"):
            if entry["level"] not in ("SEVERE", "ERROR"):
                continue
            status = re.search(r"status of (\d{3})", entry["message"])
            if entry.get("source") == "network" and status and int(status.group(1)) in self.allowed:
                continue
            if entry.get("source") == "network" and self.refused and "ERR_CONNECTION_REFUSED" in entry["message"]:
                continue
            bad.append(entry["message"])
        assert not bad, f"errors in the browser console: {bad}"


@pytest.fixture
def console(browser):
    con = Console(browser)
    browser.get_log("browser")  # start clean
    yield con
    con.check()


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def last_turn(driver):
    turns = driver.find_elements(By.CSS_SELECTOR, "#conversation .turn")
    return turns[-1] if turns else None


def open_page(driver, server, console) -> None:
    console.allow(401)  # the page's first request finds out that a key is needed
    driver.get(server.url + "/")
    panel = driver.find_element(By.ID, "key-panel")
    wait_for(panel.is_displayed, 20, "the API key panel")
    key = driver.find_element(By.ID, "api-key")
    assert driver.switch_to.active_element == key  # focused for the keyboard
    key.send_keys(KEY, Keys.ENTER)
    wait_for(lambda: driver.find_element(By.ID, "server-status").text.startswith("Connected"), 20, "connected")
    assert not panel.is_displayed()
    assert KEY not in driver.current_url


def ask(driver, question: str):
    """Types the question and presses Enter; returns (turn, the answer text's successive states)."""
    before = len(driver.find_elements(By.CSS_SELECTOR, "#conversation .turn"))
    box = driver.find_element(By.ID, "question")
    box.send_keys(question, Keys.ENTER)
    wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#conversation .turn")) > before, 10, "a new turn")
    turn = last_turn(driver)
    states: list[str] = []
    while True:
        state = turn.get_attribute("data-state")
        if state == "streaming":
            text = driver.execute_script("return arguments[0].querySelector('.answer-text')?.textContent ?? ''", turn)
            if text and (not states or text != states[-1]):
                states.append(text)
        if state in ("done", "error"):
            return turn, states
        time.sleep(0.03)


# ---- the tests -------------------------------------------------------------------------------
def test_a_two_turn_conversation_streams_cites_places_and_traces(browser, server, console, shots) -> None:
    d = browser
    open_page(d, server, console)
    d.save_screenshot(str(shots / "01-connected.png"))

    # Turn 1: the text arrives piece by piece
    turn, states = ask(d, FIRST)
    assert turn.get_attribute("data-state") == "done", turn.text
    assert len(states) >= 3, f"expected the answer to grow in several steps, saw {states}"
    for a, b in zip(states, states[1:]):
        assert b.startswith(a) and len(b) > len(a), (a, b)
    assert int(turn.get_attribute("data-deltas")) >= 4

    # ... then the cited answer replaces it: entities marked, [n] buttons, references
    server_ans = httpx.post(f"{server.url}/v1/search", headers={"Authorization": f"Bearer {KEY}"},
                            json={"query": FIRST}, timeout=60).json()
    sentences = turn.find_elements(By.CSS_SELECTOR, ".answer .sentence")
    assert [s.text.split("[")[0].strip() for s in sentences] == [s["text"] for s in server_ans["sentences"]]
    marks = [m.text for m in turn.find_elements(By.CSS_SELECTOR, "mark.entity")]
    assert marks and set(marks) <= {e for s in server_ans["sentences"] for e in s["entities"]}
    refs = {r["n"]: r for r in server_ans["references"]}
    listed = turn.find_elements(By.CSS_SELECTOR, ".reference-list li")
    assert [int(li.get_attribute("data-n")) for li in listed] == sorted(refs)

    # every [n] opens its passage: hover for one, keyboard focus for each, Tab to the next
    quotes = [c["quote"] for s in server_ans["sentences"] for c in s["citations"]]
    buttons = turn.find_elements(By.CSS_SELECTOR, "button.cite")
    assert len(buttons) == len(quotes) >= 1
    from selenium.webdriver import ActionChains

    ActionChains(d).move_to_element(buttons[0]).perform()
    pop = d.find_element(By.ID, "cite-pop")
    wait_for(pop.is_displayed, 5, "the passage on hover")
    for i, (btn, quote) in enumerate(zip(buttons, quotes)):
        if i == 0:
            d.execute_script("arguments[0].focus()", btn)
        else:
            d.switch_to.active_element.send_keys(Keys.TAB)
            assert d.switch_to.active_element == btn
        n = int(btn.get_attribute("data-n"))
        wait_for(lambda n=n: pop.is_displayed() and pop.get_attribute("data-n") == str(n), 5, f"passage [{n}]")
        assert pop.find_element(By.CSS_SELECTOR, ".pop-title").text == f"[{n}] {refs[n]['title']}"
        assert refs[n]["source"] in pop.find_element(By.CSS_SELECTOR, ".pop-meta").text
        assert pop.find_element(By.CSS_SELECTOR, "mark.support").text == " ".join(quote.split())
        assert btn.get_attribute("aria-expanded") == "true"
    d.save_screenshot(str(shots / "02-citation-open.png"))
    d.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait_for(lambda: not pop.is_displayed(), 5, "Escape to close the passage")

    # the image beside the unit it was assigned to, loaded through /v1/images/file
    assert server_ans["images"], "the demo answer should place an image (caption cosine)"
    fig = wait_for(lambda: turn.find_elements(By.CSS_SELECTOR, ".unit figure.placed-image[data-loaded=true]"),
                   15, "the placed image")[0]
    im = server_ans["images"][0]
    assert fig.get_attribute("data-image-id") == im["image_id"]
    assert d.execute_script("return arguments[0].querySelector('img').naturalWidth", fig) > 0
    assert f"placement score {im['score']:.3f}" in fig.text
    unit = fig.find_element(By.XPATH, "./ancestor::div[contains(@class,'unit')]")
    assert im["after"][:30] in unit.text

    # the trace panel: routed sources with scores, the graph, stage latencies as bars
    trace = d.find_element(By.ID, "trace")
    routed = [r["source"] for r in server_ans["trace"]["routing"]["sources"]]
    assert [li.get_attribute("data-name") for li in trace.find_elements(By.CSS_SELECTOR, "li.bar-row.source")] == routed
    stages = {li.get_attribute("data-name"): li for li in trace.find_elements(By.CSS_SELECTOR, "li.bar-row.stage")}
    assert {"routing", "retrieval", "generation", "citation"} <= set(stages)
    assert re.search(r"\d+(\.\d)? (ms|s)", stages["generation"].text)
    widths = [d.execute_script("return arguments[0].querySelector('.bar-fill').style.width", li) for li in stages.values()]
    assert max(float(w.rstrip("%")) for w in widths) == pytest.approx(100.0)  # the slowest fills its bar
    assert trace.find_elements(By.CSS_SELECTOR, "svg.graph-svg g.node")
    assert "Preset (protocol router)" in trace.text and "model calls" in trace.text

    # Turn 2: a follow-up that only the history makes answerable
    turn2, states2 = ask(d, FOLLOW_UP)
    assert turn2.get_attribute("data-state") == "done", turn2.text
    assert len(states2) >= 2
    facts = dict(zip([e.text for e in trace.find_elements(By.CSS_SELECTOR, ".facts dt")],
                     [e.text for e in trace.find_elements(By.CSS_SELECTOR, ".facts dd")]))
    assert facts["Question"] == FOLLOW_UP and "Quarry" in facts["Rewritten query"]  # the history was sent
    events = turn2.find_elements(By.CSS_SELECTOR, ".timeline .event time")
    assert events and all(re.match(r"\d{4}", e.get_attribute("datetime")) for e in events)
    assert "Quarry" in turn2.find_element(By.CSS_SELECTOR, ".timeline").text

    # feedback: posted and confirmed (the protocol router is off here, as in the quickstart's
    # serve.yaml: the server accepts the rating and says it does not learn from it)
    turn2.find_element(By.CSS_SELECTOR, ".feedback .thumb.up").click()
    wait_for(lambda: turn2.get_attribute("data-feedback") == "accepted", 10, "feedback confirmed")
    status = turn2.find_element(By.CSS_SELECTOR, ".feedback-status")
    assert status.text.startswith("Thanks: received") and "protocol.enabled" in status.get_attribute("title")
    assert turn2.find_element(By.CSS_SELECTOR, ".feedback .thumb.up").get_attribute("aria-pressed") == "true"
    d.execute_script("window.scrollTo(0, 0)")
    d.save_screenshot(str(shots / "03-two-turns.png"))

    # readable at phone width: nothing wider than the window
    d.set_window_size(390, 844)
    time.sleep(0.3)
    assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    d.save_screenshot(str(shots / "04-phone.png"))
    d.set_window_size(1280, 1000)

    # a new conversation forgets the history
    d.find_element(By.ID, "new-conversation").click()
    assert not d.find_elements(By.CSS_SELECTOR, "#conversation .turn")
    assert d.switch_to.active_element == d.find_element(By.ID, "question")


def test_every_control_is_labelled_and_reachable_by_keyboard(browser, server, console) -> None:
    d = browser
    open_page(d, server, console)
    unlabeled = d.execute_script("""
        const out = [];
        for (const c of document.querySelectorAll('input, textarea, select')) {
          if (!c.id || !document.querySelector(`label[for="${c.id}"]`)) out.push(c.outerHTML);
        }
        for (const b of document.querySelectorAll('button, a[href]')) {
          if (!(b.getAttribute('aria-label') || b.textContent.trim())) out.push(b.outerHTML);
        }
        return out;""")
    assert unlabeled == []
    # the skip link is the first stop of Tab, shows itself when focused, and leads to the question box
    first = d.execute_script("return document.querySelector('a[href], button, input, textarea, select')")
    assert first.get_attribute("class") == "skip-link"
    d.execute_script("arguments[0].focus()", first)
    assert d.execute_script("return arguments[0].getBoundingClientRect().left >= 0", first)
    first.send_keys(Keys.ENTER)
    assert d.execute_script("return location.hash") == "#question"
    wait_for(lambda: d.switch_to.active_element == d.find_element(By.ID, "question"), 5, "focus on the question box")
    # the question box and the Ask button follow each other in Tab order
    d.switch_to.active_element.send_keys(Keys.TAB)
    assert d.switch_to.active_element == d.find_element(By.ID, "ask")
    assert d.find_element(By.CSS_SELECTOR, "main[id=main]")
    assert d.find_element(By.ID, "trace-panel").get_attribute("aria-labelledby") == "trace-title"


def test_the_decomposition_graph_draws_every_node_and_edge(browser, server, console) -> None:
    d = browser
    open_page(d, server, console)
    nodes = [{"id": "1", "text": "Who directed Ed Wood?", "depends_on": [], "answer": "Tim Burton"},
             {"id": "2", "text": "When was #1 born?", "depends_on": ["1"], "answer": None},
             {"id": "3", "text": "Where was #1 born?", "depends_on": ["1"], "answer": None},
             {"id": "4", "text": "Compare #2 and #3", "depends_on": ["2", "3"], "answer": None}]
    d.execute_script("window.searchsmithPage.renderTrace(arguments[0])", {
        "query_id": "g", "query": "q", "rewrite": "q", "nodes": nodes,
        "trace": {"preset": "large", "strategy": "planning", "graph_type": "planning", "stages": {}}})
    svg = d.find_element(By.CSS_SELECTOR, "#trace svg.graph-svg")
    assert svg.get_attribute("aria-label") == "Decomposition graph: 4 nodes, 4 edges"
    edges = {(e.get_attribute("data-from"), e.get_attribute("data-to")) for e in svg.find_elements(By.CSS_SELECTOR, "line.edge")}
    assert edges == {("1", "2"), ("1", "3"), ("2", "4"), ("3", "4")}
    x = {g.get_attribute("data-id"): float(g.find_element(By.TAG_NAME, "rect").get_attribute("x"))
         for g in svg.find_elements(By.CSS_SELECTOR, "g.node")}
    assert x["1"] < x["2"] == x["3"] < x["4"]  # a node sits right of what it depends on
    assert "Tim Burton" in svg.find_element(By.CSS_SELECTOR, "g.node[data-id='1'] title").get_attribute("textContent")
    # a trace without notes or gates has neither box, and no stray "null" text where they would be
    trace = d.find_element(By.ID, "trace")
    assert not trace.find_elements(By.CSS_SELECTOR, ".notes-box, .gates-box")
    assert "null" not in trace.text


def _sse(*events) -> str:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def test_a_readers_short_answer_is_shown_once_with_its_citation(browser, server, console) -> None:
    """A recorded reader answer replayed through the page's own parser and renderer."""
    d = browser
    open_page(d, server, console)
    ref = {"n": 1, "doc_id": "film-1", "chunk_id": "film-1#0", "title": "Ed Wood (film)", "source": "films",
           "url": None, "score": 0.9, "text": "Ed Wood is a 1994 film. It was directed by Tim Burton."}
    transcript = _sse(
        ("answer", {"delta": "Tim Burton. It was directed "}), ("answer", {"delta": "by Tim Burton."}),
        ("citations", {"answer": "Tim Burton [1]. It was directed by Tim Burton [1].", "short_answer": "Tim Burton",
                       "support": ["It was directed by Tim Burton."], "references": [ref],
                       "sentences": [{"text": "Tim Burton.", "entities": ["Tim Burton"],
                                      "citations": [{"n": 1, "score": 0.8, "chunk_id": "film-1#0",
                                                     "quote": "It was directed by Tim Burton."}]},
                                     {"text": "It was directed by Tim Burton.", "entities": ["Tim Burton"],
                                      "citations": [{"n": 1, "score": 0.9, "chunk_id": "film-1#0",
                                                     "quote": "It was directed by Tim Burton."}]}]}),
        ("timeline", {"timeline": []}), ("images", {"images": []}),
        ("trace", {"query_id": "r1", "query": "Who directed Ed Wood?", "rewrite": "Who directed Ed Wood?",
                   "nodes": [], "passages": [], "trace": {"stages": {}}})) + "data: [DONE]\n\n"
    turn_id = d.execute_script("return window.searchsmithPage.replay(arguments[0], arguments[1])",
                               "Who directed Ed Wood?", transcript)
    turn = d.find_element(By.ID, turn_id)
    assert turn.get_attribute("data-state") == "done"
    assert turn.get_attribute("data-answer-found") == "true"
    assert not turn.find_elements(By.CSS_SELECTOR, ".no-answer, .searched")
    lead = turn.find_element(By.CSS_SELECTOR, ".unit.lead .short-answer")
    assert lead.text == "Answer: Tim Burton[1]"  # the lead sentence is not repeated below it
    assert [s.text for s in turn.find_elements(By.CSS_SELECTOR, ".sentence")] == ["It was directed by Tim Burton.[1]"]
    d.execute_script("arguments[0].focus()", lead.find_element(By.CSS_SELECTOR, "button.cite"))
    pop = d.find_element(By.ID, "cite-pop")
    assert pop.is_displayed() and pop.find_element(By.CSS_SELECTOR, "mark.support").text == "It was directed by Tim Burton."

    # an error after the first piece, and a stream that stops without [DONE]
    broken = _sse(("answer", {"delta": "Tim "}), ("error", {"status": 500, "error": {"message": "the LLM went away"}}))
    turn = d.find_element(By.ID, d.execute_script("return window.searchsmithPage.replay('q2', arguments[0])", broken))
    assert "The server failed while answering (500): the LLM went away" in turn.find_element(By.CSS_SELECTOR, ".error").text
    cut = _sse(("answer", {"delta": "Tim "}))
    turn = d.find_element(By.ID, d.execute_script("return window.searchsmithPage.replay('q3', arguments[0])", cut))
    assert "ended before the server finished" in turn.find_element(By.CSS_SELECTOR, ".error").text


def test_no_answer_is_shown_as_such_with_the_sources_searched_not_cited(browser, server, console, shots) -> None:
    """``answer_found: false`` as the server sends it (the configured no-answer text, no short
    answer, sentences or references; the passages in the trace event): a muted panel labelled
    "No answer" in words, and the documents searched listed once each, not as citations."""
    d = browser
    open_page(d, server, console)
    no_answer = "No answer found in the sources."
    passages = [{"chunk_id": "a#0", "doc_id": "a", "source": "docs", "title": "Quarry overview", "score": 0.61,
                 "node_id": "1", "date": None, "url": "https://docs.example.com/quarry"},
                {"chunk_id": "a#3", "doc_id": "a", "source": "docs", "title": "Quarry overview", "score": 0.55,
                 "node_id": "1", "date": None, "url": "https://docs.example.com/quarry"},
                {"chunk_id": "b#1", "doc_id": "b", "source": "forum", "title": "Lumen release notes", "score": 0.42,
                 "node_id": "1", "date": None, "url": "javascript:alert(1)"}]
    transcript = _sse(
        ("answer", {"delta": no_answer}),
        ("citations", {"answer": no_answer, "answer_found": False, "short_answer": "", "support": [],
                       "references": [], "sentences": []}),
        ("timeline", {"timeline": []}), ("images", {"images": []}),
        ("trace", {"query_id": "n1", "query": "Who founded Quarry?", "rewrite": "Who founded Quarry?",
                   "nodes": [], "passages": passages, "trace": {"stages": {}}})) + "data: [DONE]\n\n"
    turn = d.find_element(By.ID, d.execute_script("return window.searchsmithPage.replay(arguments[0], arguments[1])",
                                                  "Who founded Quarry?", transcript))
    assert turn.get_attribute("data-state") == "done"
    assert turn.get_attribute("data-answer-found") == "false"
    panel = turn.find_element(By.CSS_SELECTOR, ".answer.no-answer .no-answer-panel")
    assert panel.find_element(By.CSS_SELECTOR, ".no-answer-label").text.lower() == "no answer"  # words, not colour
    assert panel.find_element(By.CSS_SELECTOR, ".no-answer-text").text == no_answer
    assert "nothing is cited" in panel.text
    assert not turn.find_elements(By.CSS_SELECTOR, ".short-answer, .answer strong, .sentence, button.cite, "
                                                   ".references, .reference-list")
    # muted: the page's --muted colour on a grey panel, unlike a found answer's text
    muted = d.execute_script("return getComputedStyle(document.querySelector('.top .server-status')).color")
    assert d.execute_script("return getComputedStyle(arguments[0]).color", panel) == muted
    assert d.execute_script("return getComputedStyle(arguments[0]).borderLeftWidth", panel) == "4px"
    # the sources searched: each document once, in retrieval order, only web addresses as links
    searched = turn.find_element(By.CSS_SELECTOR, "section.searched[aria-label='Sources searched']")
    assert searched.find_element(By.TAG_NAME, "h4").text == "Sources searched (none cited)"
    items = searched.find_elements(By.CSS_SELECTOR, "ul.searched-list li")
    assert [li.get_attribute("data-doc-id") for li in items] == ["a", "b"]
    assert items[0].find_element(By.TAG_NAME, "a").get_attribute("href") == "https://docs.example.com/quarry"
    assert "score 0.610" in items[0].text and "forum" in items[1].text
    assert not items[1].find_elements(By.TAG_NAME, "a") and "javascript:alert(1)" in items[1].text
    d.execute_script("arguments[0].scrollIntoView()", turn)
    d.save_screenshot(str(shots / "07-no-answer.png"))


def test_only_web_addresses_become_links_in_the_references(browser, server, console) -> None:
    """A document's url comes from the user's corpus as any string: a ``javascript:`` one was
    made a link (the page's CSP blocks it from running; the page no longer relies on that)."""
    d = browser
    open_page(d, server, console)
    refs = [{"n": 1, "doc_id": "a", "chunk_id": "a#0", "title": "Evil", "source": "s", "score": 0.9,
             "url": "javascript:alert(document.domain)", "text": "Quarry is a vector database."},
            {"n": 2, "doc_id": "b", "chunk_id": "b#0", "title": "Docs", "source": "s", "score": 0.8,
             "url": "https://docs.example.com/quarry", "text": "Quarry is written in Rust."},
            {"n": 3, "doc_id": "c", "chunk_id": "c#0", "title": "Local", "source": "s", "score": 0.7,
             "url": "file:///etc/passwd", "text": "Quarry listens on port 7420."}]
    cites = [{"text": f"Sentence {r['n']}.", "entities": [],
              "citations": [{"n": r["n"], "score": r["score"], "chunk_id": r["chunk_id"], "quote": r["text"]}]}
             for r in refs]
    transcript = _sse(
        ("answer", {"delta": "Sentence 1. Sentence 2. Sentence 3."}),
        ("citations", {"answer": "Sentence 1 [1]. Sentence 2 [2]. Sentence 3 [3].", "short_answer": "",
                       "support": [], "references": refs, "sentences": cites}),
        ("timeline", {"timeline": []}), ("images", {"images": []}),
        ("trace", {"query_id": "u1", "query": "What is Quarry?", "rewrite": "What is Quarry?",
                   "nodes": [], "passages": [], "trace": {"stages": {}}})) + "data: [DONE]\n\n"
    turn = d.find_element(By.ID, d.execute_script("return window.searchsmithPage.replay('What is Quarry?', arguments[0])",
                                                  transcript))
    items = turn.find_elements(By.CSS_SELECTOR, ".reference-list li")
    assert len(items) == 3
    assert [a.get_attribute("href") for a in turn.find_elements(By.CSS_SELECTOR, ".reference-list a")] == [
        "https://docs.example.com/quarry"]
    assert "Evil (javascript:alert(document.domain))" in items[0].text
    assert "Local (file:///etc/passwd)" in items[2].text


def test_server_errors_are_shown_not_a_blank_page(browser, server, console, shots) -> None:
    d = browser
    open_page(d, server, console)
    # two slow questions hold the one worker and the one queue place: the page's is 429
    console.allow(429)
    headers = {"Authorization": f"Bearer {KEY}"}
    held = [threading.Thread(target=lambda: httpx.post(f"{server.url}/v1/search", headers=headers, timeout=120,
                                                       json={"query": "Which parts is a Lumen deployment built from slowly?"}))
            for _ in range(2)]
    for t in held:
        t.start()
        time.sleep(0.4)
    time.sleep(0.5)
    turn, _ = ask(d, "How does Quarry store segments?")
    err = turn.find_element(By.CSS_SELECTOR, ".error[role=alert]")
    assert re.search(r"busy \(429\).*Retry in \d+ s\.", err.text), err.text
    d.save_screenshot(str(shots / "05-busy-429.png"))
    for t in held:
        t.join()

    # the server goes away: the page says so (Chrome logs the refused connection)
    console.refused = True
    server.stop()
    turn, _ = ask(d, "Is anyone there?")
    err = turn.find_element(By.CSS_SELECTOR, ".error[role=alert]")
    assert "cannot be reached" in err.text and "searchsmith serve" in err.text
    d.save_screenshot(str(shots / "06-server-down.png"))


@pytest.mark.skipif(not os.environ.get("SEARCHSMITH_UI_SERVE_CONFIG"),
                    reason="set SEARCHSMITH_UI_SERVE_CONFIG to a serve.yaml (the quickstart's) to make the README's screenshot")
def test_readme_screenshot_of_the_quickstart_server(browser, console, shots, tmp_path) -> None:
    """The README's picture: the quickstart's models answering the demo's two-turn question."""
    from searchsmith.serving.quickstart import SAMPLES

    history, follow_up = SAMPLES[0]
    srv = start_server(Path(os.environ["SEARCHSMITH_UI_SERVE_CONFIG"]), tmp_path / "serve.log")
    try:
        d = browser
        d.set_window_size(1280, 960)
        d.get(srv.url + "/")
        wait_for(lambda: d.find_element(By.ID, "server-status").text.startswith("Connected"), 20, "connected")
        for question in (history[0]["content"], follow_up):
            turn, _ = ask(d, question)
            assert turn.get_attribute("data-state") == "done", turn.text
            assert turn.find_elements(By.CSS_SELECTOR, "button.cite"), turn.text
        d.execute_script("window.scrollTo(0, 0)")
        d.save_screenshot(str(shots / "readme-answer-page.png"))
    finally:
        srv.stop()
