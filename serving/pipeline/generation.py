"""Stage ``generation``: one interface, four backends.

* ``reader`` (the default, ``backend: auto``, when ``bundles.reader`` is configured and passes
  its gate): the reader's short answer per final sub-question and the sentence supporting it
  (``serving/pipeline/reading.py``); below ``generation.reader.min_score`` it says it does not
  know.
* ``extractive`` (the offline default without a reader, no model): per sub-question, the sentences of its
  passages are scored by support = cosine(sentence, sub-question) + ``lexical_weight`` x
  the share of the sub-question's content words the sentence contains; the best one is
  selected, then the next ones only while their support stays within ``min_relative_score``
  of the best (up to ``sentences_per_node``): the answer stops after the sentences that
  answer. Nodes are fused in node order, without repeats. With ``short_answer`` (the
  default) the answer leads with the span of those sentences that the question asks for
  (``models.text.typed_span``: "When ...?" a date, "How many ...?" a number, "Who / Which
  ...?" a name the question lacks), as the reader's does; a question that compares named things
  gets what their passages say (``compare``, ``models.choice``): the option of "Which came out
  first, A or B?", "yes" or "no" for "Were A and B from the same country?", what both are
  described as for "What profession did A and B both hold?"; other yes / no and why / how
  questions keep the sentences alone.
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp
  server, TGI, a hosted API) over httpx, streamed (server-sent events).
* ``hf``: a local transformers causal LM (greedy decoding).

The LLM prompts are files under ``serving/pipeline/prompts/`` (``[system]`` and ``[user]``
sections; ``{context}``, ``{question}``, ``{subanswers}`` are filled in). When an LLM
backend fails the answer falls back to the reader's (with a reader) or the extractive one
(noted in the trace).

Whatever the backend, when the best support of any sentence of the final sub-questions'
passages is below ``no_answer_threshold``, or (``no_answer_missing_names``) the user's
question names something no passage mentions ("Redis", "Pluto"), the answer is
``no_answer_text`` ("No answer found in the sources."): no LLM call, no citation, no
timeline; the trace gives the score and the threshold, or the missing names.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from searchsmith.models.bridge import (
    MIN_TITLE_CHARS,
    base_title,
    headline,
    named_title,
    sibling_of_asked,
    states_kin_of,
    title_answers,
    unanswered_words,
)
from searchsmith.models.choice import Choice, choice_options, compared
from searchsmith.models.dates import parse_dates
from searchsmith.models.errors import ClientGone, ConfigError, RunnerError
from searchsmith.models.roles import Embedder, Reader
from searchsmith.models.text import (
    HOW_MUCH_WORDS,
    MEASURE_WORDS,
    SHORT_FORM,
    SPAN_KINDS,
    answer_kind,
    asked_measure,
    asked_relation,
    asks_bound,
    asks_description,
    asks_typed,
    asks_who,
    demonym,
    entity_names,
    figure_of_another,
    figures,
    fold,
    how_to,
    is_year,
    labelled_with_asked,
    names_asked_version,
    of_asked_type,
    other_version,
    relation_cues,
    setting_asked,
    setting_described,
    spelled_out,
    states_life,
    states_relation,
    subject_is_type,
    typed_span,
    typed_span_at,
)
from searchsmith.serving.pipeline.citation import missing_entities, pattern_entities
from searchsmith.serving.pipeline.common import (
    content_words,
    embed,
    quotable_sentences,
    strip_markers,
)
from searchsmith.serving.pipeline.config import (
    ExtractiveConfig,
    GenerationConfig,
    HFConfig,
    OpenAIConfig,
    Preset,
)
from searchsmith.serving.pipeline.reading import lead_sentence
from searchsmith.serving.pipeline.state import NodeResult, Passage, PipelineState, estimate_tokens

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).parent / "prompts"


# -- prompts ---------------------------------------------------------------------------------
def load_prompt(name: str) -> tuple[str, str]:
    """``(system, user)`` templates from a prompt file (a name under prompts/ or a path)."""
    path = Path(name)
    if not path.is_file():
        path = PROMPTS_DIR / name
    if not path.is_file():
        have = sorted(p.name for p in PROMPTS_DIR.glob("*.txt"))
        raise ConfigError(f"generation.prompt: {name!r} is neither a file nor one of {have}")
    text = path.read_text(encoding="utf-8")
    if "[system]" not in text or "[user]" not in text:
        raise ConfigError(f"generation.prompt {path}: needs a [system] and a [user] section")
    system = text.split("[system]", 1)[1].split("[user]", 1)[0].strip()
    user = text.split("[user]", 1)[1].strip()
    if "{question}" not in user:
        raise ConfigError(f"generation.prompt {path}: the [user] section must contain {{question}}")
    return system, user


def format_context(passages: Sequence[Passage], max_chars: int) -> str:
    """``[1] title: text`` lines in the given (lost-in-the-middle) order, cut at ``max_chars``."""
    lines, used = [], 0
    for i, p in enumerate(passages, 1):
        line = f"[{i}] {p.title + ': ' if p.title else ''}{' '.join(p.text.split())}"
        if used + len(line) > max_chars and lines:
            break
        lines.append(line[:max_chars])
        used += len(line)
    return "\n".join(lines)


def render(template: tuple[str, str], question: str, passages: Sequence[Passage], max_chars: int,
           subanswers: dict[str, str] | None = None, nodes: Sequence[NodeResult] = ()) -> list[dict[str, str]]:
    """Chat messages from a ``(system, user)`` template."""
    system, user = template
    sub = ""
    if subanswers:
        texts = {n.id: n.text for n in nodes}
        sub = "Sub-answers found so far:\n" + "\n".join(
            f"- {texts.get(k, k)}: {v}" for k, v in subanswers.items()) + "\n\n"
    body = (user.replace("{context}", format_context(passages, max_chars))
            .replace("{subanswers}", sub).replace("{question}", question))
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


# -- backends --------------------------------------------------------------------------------
class Support(NamedTuple):
    """One candidate sentence of the extractive generator."""

    score: float
    text: str
    chunk_ids: tuple[str, ...]  # the passages the sentence occurs in, best-scored first
    title: str = ""  # the title of the best-scored of them


# (name, state) -> the passages titled with it in the routed sources (Retriever.titled)
TitleLookup = Callable[[str, PipelineState], list[Passage]]
# (text, k, state) -> the k passages closest to it in the routed sources (Retriever.near)
BridgeSearch = Callable[[str, int, PipelineState], list[Passage]]


class Hop(NamedTuple):
    """A bridge of the extractive answer (``models.bridge``): a sentence of the question's best
    names another passage's title, and that passage answers what the sentence does not."""

    link: Support  # the sentence naming the bridge
    title: str  # the bridge's name (its passages' title, disambiguator cut)
    passages: tuple[Passage, ...]  # the passages with that title (or, searched, mentioning it)
    ranked: list[Support]  # their sentences, best supporting the question first
    titled: bool = True  # False: passages found by searching for the name (bridge_search)
    subject: bool = False  # True: the sentence's subject is a pronoun for its passage's title, the answer


class Generator(Protocol):
    """Answers chat messages: ``(text, tokens in, tokens out)``; ``on_token`` (optional) gets each
    piece of text as it is generated (both LLM backends stream through it)."""

    def complete(self, messages: list[dict[str, str]],
                 on_token: Callable[[str], None] | None = None) -> tuple[str, int, int]: ...


def _states(words: set[str], text: str, folded: bool = False) -> bool:
    """Whether ``text`` holds one of ``words`` (lower-cased; ``folded``: compared by
    ``models.text.fold``, "fix" meets "fixed"): a sentence stating a relation cue or a verb."""
    held = {w.lower() for w in re.findall(r"\w+", text)}
    return bool(words & ({fold(w) for w in held} if folded else held))


# a sentence announcing the ways or steps that follow it ("There are two supported ways to install Lumen.")
_ANNOUNCES = re.compile(r"\b(?:two|three|four|five|six|several|a\s+few|\d+)\s+(?:[\w-]+\s+){0,2}?"
                        r"(?:ways|steps|options|methods|approaches)\b", re.I)

# the words between a name's words ("CTO of Harbor & Finch"): no word of the name itself
_NAME_LINKS = frozenset("of the and &".split())

# a sentence whose subject is a pronoun ("He was a recipient of ...")
_PRONOUN_SUBJECT = re.compile(r"(?:He|She)\s")


class ExtractiveGenerator:
    """Selects and fuses the best-supported sentences per sub-question (no LLM)."""

    def __init__(self, embedder: Embedder, config: ExtractiveConfig | None = None) -> None:
        self.embedder = embedder
        self.config = config or ExtractiveConfig()

    def support(self, question: str, passages: Sequence[Passage], state: PipelineState) -> list[Support]:
        """The passages' sentences with their support for ``question``, best first.

        The lexical share is averaged over the sub-question's words and the user's own
        words: a rewrite appends history terms ("Quarry Northwind Labs") that every
        sentence about the topic contains, and they must not outvote the asked-for words.
        """
        cfg = self.config
        where: dict[str, list[str]] = {}  # quoted sentence -> chunk ids, in first-seen order
        scored_as: dict[str, str] = {}  # quoted sentence -> the text its support is measured on
        titled: dict[str, str] = {}  # quoted sentence -> the title of its best-scored passage

        def read(s: str, quoted: str, p: Passage) -> None:
            scored_as.setdefault(quoted, s)
            titled.setdefault(quoted, p.title or "")
            ids = where.setdefault(quoted, [])
            if p.chunk_id not in ids:
                ids.append(p.chunk_id)

        # past max_sentences, a sentence holding every figure of the question is still read, after the others
        asked = figures(question) if cfg.figure_sentences else set()
        past: list[tuple[str, str, Passage]] = []
        for p in sorted(passages, key=lambda p: -p.score):
            for s, quoted in quotable_sentences(p.text):
                if len(quoted) <= 3:
                    continue
                if quoted in where or len(where) < cfg.max_sentences:
                    read(s, quoted, p)
                elif asked and asked <= figures(s):
                    past.append((s, quoted, p))
        for s, quoted, p in past:
            read(s, quoted, p)
        cands = list(where)
        if not cands:
            return []
        texts = [scored_as[c] for c in cands]
        vecs = embed(state, self.embedder, [question, *texts])  # one encode call: (1 + S, D)
        cos = vecs[1:] @ vecs[0]  # (S,)
        words, own = content_words(question), content_words(state.query)
        # a sentence is read in its passage: with ``title_words`` its title's words count as its own
        # ("Clients saw `KST-502` errors ..." in "Kestrel Cloud outage in global")
        of_title = {t: content_words(t) if cfg.title_words else set() for t in set(titled.values())}  # once per passage
        # a short form of the question is a sentence's word where the sentence spells it out ("CTO":
        # "appointed Tomasz Wilk as chief technology officer")
        shorts = {w for w in re.findall(r"\b[A-Z]{3,6}\b", f"{question} {state.query}") if SHORT_FORM.fullmatch(w)}
        lex = np.array([0.5 * len(words & cw) / max(1, len(words)) + 0.5 * len(own & cw) / max(1, len(own))
                        for cw in (content_words(s) | of_title[titled[c]]
                                   | {fold(w.lower()) for w in shorts if spelled_out(w, s)}
                                   for s, c in zip(texts, cands, strict=True))])
        score = cos + cfg.lexical_weight * lex
        order = np.argsort(-score, kind="stable")
        return [Support(float(score[i]), cands[i], tuple(where[cands[i]]), titled[cands[i]]) for i in order]

    def cut(self, ranked: Sequence[Support], n: int | None = None) -> list[Support]:
        """The best sentence, then the next while each keeps ``min_relative_score`` of its support.

        The first sentence below the margin (or ``min_support``) ends the list: past the
        sentences that answer come ones about something else, and they only dilute the answer.
        """
        cfg = self.config
        n = n or cfg.sentences_per_node
        if not ranked:
            return []
        best = ranked[0].score
        kept = [ranked[0]]
        for cand in ranked[1:n]:
            if cand.score < cfg.min_support or cand.score < cfg.min_relative_score * best:
                break
            kept.append(cand)
        return kept

    def select(self, question: str, passages: Sequence[Passage], state: PipelineState,
               n: int | None = None) -> list[str]:
        """The sentences answering ``question`` (:meth:`cut` of :meth:`support`)."""
        return [c.text for c in self.cut(self.support(question, passages, state), n)]

    def node_answer(self, question: str, passages: Sequence[Passage], state: PipelineState) -> str:
        """A sub-question's answer, the text that fills its children's ``#k``
        (``node_answer``): with ``span``, the span of its best sentence the sub-question asks for
        (``typed_span``; a phrase step asks for what it describes: "the pianist who recorded
        Live at Shelly's Manne-Hole" is "Which pianist ...?", "Les McCann"), else the names of
        that sentence the sub-question lacks ("Compaq" for "Which was the top PC maker in
        1994?"); or the sentence; "" without passages.

        A whole sentence in a child's place ("Where is #1 based?") makes a query about
        everything that sentence says; its new names are what the child asks about, and two
        of them ("Les McCann New Year's Eve 1965") a query about neither.
        """
        picked = self.select(question, passages, state, n=1)
        if not picked:
            return ""
        if self.config.node_answer == "sentence":
            return picked[0]
        if self.config.node_answer == "span":
            asked = question if answer_kind(question) in SPAN_KINDS else \
                "Which " + re.sub(r"^\s*(?:the|a|an)\s+", "", question, flags=re.I)
            span = typed_span(asked, picked[:1], fallback=False)
            if span:
                return span
        names = missing_entities(pattern_entities(picked[0]), question)  # in the sentence's order
        return " ".join(names[: self.config.node_answer_names]) or picked[0]

    def chosen(self, ranked: Sequence[Sequence[Support]], lead: Sequence[Support] = (),
               short: str = "") -> tuple[list[str], list[str]]:
        """(sentences, chunk ids they came from) of each final node's :meth:`cut`, in node order.

        Args:
            lead: sentences quoted first, as they are (a chain's bridges, :meth:`bridge`; the
                sentences a short answer was read through, :meth:`short_answer`).
            short: the short answer ("; "-joined parts); with ``short_support: holding`` only
                the ``lead`` and the selected sentences that hold one of its parts are kept
                (all of them when none does).
        """
        groups = [list(lead), *(self.cut(r) for r in ranked)]
        parts = [x.lower() for x in short.split("; ") if x] if self.config.short_support == "holding" else []
        # a part as whole words (``missing_entities``): "en" is no part of "implemented"
        holds = [c for g in groups for c in g if any(not missing_entities([x], c.text) for x in parts)]
        chosen: list[str] = []
        used: list[str] = []
        for group in groups:
            for c in group:
                if holds and c not in lead and c not in holds:
                    continue  # beside the short answer's own sentences, others only dilute its support
                if c.text not in chosen:
                    chosen.append(c.text)
                    used.extend(i for i in c.chunk_ids if i not in used)
        return chosen, used

    def compose(self, ranked: Sequence[Sequence[Support]],
                lead: Sequence[Support] = ()) -> tuple[str, list[str]]:
        """(answer, chunk ids it drew on): the :meth:`chosen` sentences joined."""
        chosen, used = self.chosen(ranked, lead)
        return " ".join(chosen), used

    def hop(self, question: str, ranked: Sequence[Support], passages: Sequence[Passage],
            state: PipelineState, lookup: TitleLookup | None = None,
            search: BridgeSearch | None = None) -> Hop | None:
        """The bridge ``question``'s best sentences lead to (``bridge``): the first of the
        ``bridge_sentences`` best that names the title of another of ``passages``, not named
        by the question (``models.bridge.named_title``), with that title's passages' sentences
        ranked for the question; or, when the sentence names no passage's title, with
        ``lookup`` (and ``bridge_lookup``), the first of its names (``bridge_names``, not the
        question's; ``models.text.entity_names``) that the index has passages titled with; or,
        when none is, with ``search`` (and ``bridge_search``), the passages other than the
        sentence's own that mention the name the sentence gives the question (its
        ``typed_span``: "Amy Poehler" in "... Leslie Knope (Amy Poehler) ...") among the
        ``bridge_search_k`` closest to that name with the question's words the sentence leaves
        unanswered ("Amy Poehler spouse actress").
        None when the best sentence holds every word of the question
        (``models.bridge.unanswered_words``: "Uranus was discovered by William Herschel" answers
        "Who discovered Uranus?" itself), without a bridge, for a question that asks for no
        date, number or name, or with ``short_answer`` or ``bridge`` off."""
        cfg = self.config
        verb, asked_how = how_to(question)
        if not (cfg.short_answer and cfg.bridge) or not ranked or (
                answer_kind(question) not in SPAN_KINDS and not (verb and cfg.bridge_how)):
            return None
        if asked_measure(question) and typed_span(question, [c.text for c in ranked[: cfg.measure_sentences]],
                                                  typed=True):
            return None  # a figure of the asked dimension in its own best sentences answers it ("1.52
            # astronomical units"), not a passage a sentence names ("... takes Mars 687 Earth days")
        subject = self._subject(question, ranked[0], passages)
        if subject is not None:
            return subject
        if not unanswered_words(question, ranked[0].text):
            return None
        titles = [p.title or "" for p in passages]
        by_id = {p.chunk_id: p for p in passages}
        tried = {base_title(t).lower() for t in titles}  # names no lookup needs to find
        # a sentence stating the asked relation ("developed by Calloway Data" for "the maker of
        # Marlowe") names the bridge wherever the cosine ranks it among the best
        cues = relation_cues(question)
        stating = [c for c in ranked[: cfg.bridge_cued_sentences] if _states(cues, c.text)]
        for cand in dict.fromkeys([*ranked[: cfg.bridge_sentences], *stating[: cfg.bridge_sentences]]):
            own = [by_id[i].title or "" for i in cand.chunk_ids if i in by_id]
            # "... the father of Sigmund, Arne, Henrik and Atle Selberg": its own passage is the bridge
            kin = next((t for t in own if states_kin_of(question, cand.text)
                        and named_title(t, [t], question) is not None), "")  # not the question's own subject
            k = None if kin else named_title(cand.text, titles, question, own)
            titled = True
            if kin:
                name = base_title(kin)
                bridge = tuple(p for p in passages if base_title(p.title or "").lower() == name.lower())
            elif k is not None:
                name = base_title(titles[k])
                bridge = tuple(p for p in passages if base_title(p.title or "").lower() == name.lower())
            else:
                name, bridge = "", ()
                if lookup is not None and cfg.bridge_lookup:
                    names = [n for n in missing_entities(entity_names(cand.text), question)
                             if len(n) >= MIN_TITLE_CHARS and n.lower() not in tried][: cfg.bridge_names]
                    tried.update(n.lower() for n in names)
                    found = ((n, tuple(p for p in self._looked_up(lookup, n, state) if p.chunk_id not in by_id))
                             for n in names)
                    name, bridge = next(((n, b) for n, b in found if b), ("", ()))
                if not bridge and search is not None and cfg.bridge_search:
                    (name, bridge), titled = self._searched(question, cand, search, state), False
            # "How do you fix the error that ...?": the bridge's passages are read for "How do you
            # fix LUM-310?", not for what the question says of the bridge (its other passages say it too)
            bridged = self.support(f"{asked_how} {name}?" if verb else question, bridge, state) if bridge else []
            if kin:  # the sentence names the kin's kin ("father of Sigmund, Arne ..."), not what is asked of it
                bridged = [c for c in bridged if c.text != cand.text]
            if bridged and sibling_of_asked(name, question):
                return None  # the best sentences lead to a sibling ("FRW-402" for "FRW-118"): no bridge
            if bridged:
                return Hop(cand, name, bridge, bridged, titled)
        return self._own_passage(question, ranked[0], passages, state) if cfg.bridge_own and asks_who(question) \
            else None

    def _own_passage(self, question: str, best: Support, passages: Sequence[Passage],
                     state: PipelineState) -> Hop | None:
        """The best sentence's own passage as :meth:`hop`'s bridge, for a "Who ...?" question when
        no other passage is one and the sentence names that passage's subject, which the question
        does not: "One orbit of the Sun takes Neptune 165 Earth years" answers "the planet that
        takes 165 Earth years" of "Who discovered ...?", and its passage on Neptune says who
        discovered it (its other sentences, ranked for the question); None otherwise. Not for
        "What / which ...?": there the passage's subject is often the answer itself ("What
        retailer ... is headquartered in Poole?" is answered by the passage on Lush Ltd.;
        measured: 334 open-part questions 0.468 -> 0.463 when every question took it)."""
        own = next((p for i in best.chunk_ids for p in passages if p.chunk_id == i and p.title), None)
        title = base_title(own.title or "") if own is not None else ""
        if not title or named_title(best.text, [title], question) is None:
            return None
        bridge = tuple(p for p in passages if base_title(p.title or "").lower() == title.lower())
        ranked = [c for c in self.support(question, bridge, state) if c.text != best.text]
        return Hop(best, title, bridge, ranked) if ranked else None

    @staticmethod
    def _subject(question: str, best: Support, passages: Sequence[Passage]) -> Hop | None:
        """"Who ...?" answered by the best sentence's subject, a pronoun for its passage's title:
        "He was a recipient of ... the Bharat Ratna, India's highest civilian honour." in the
        passage titled "A. P. J. Abdul Kalam" answers "Who was given India's highest civilian
        honor ...?" with that title; None for other questions and sentences, when the sentence
        states none of the relation the question asks (``relation_cues``: "Who is the spouse of
        the actor that plays Vision?" is not answered by "He is known for ... the Vision"), and
        when the question names the title itself."""
        cues = relation_cues(question)
        if not (asks_who(question) and _PRONOUN_SUBJECT.match(best.text)) or (
                cues and not _states(cues, best.text)):
            return None  # "Who is the spouse of ...?": a sentence stating no marriage is about the bridge
        own = next((p for i in best.chunk_ids for p in passages if p.chunk_id == i and p.title), None)
        title = base_title(own.title or "") if own is not None else ""
        if own is None or named_title(title, [title], question) is None:
            return None
        return Hop(best, title, (own,), [best], subject=True)

    def _searched(self, question: str, link: Support, search: BridgeSearch,
                  state: PipelineState) -> tuple[str, tuple[Passage, ...]]:
        """``(name, passages)`` of :meth:`hop`'s search: the name ``link`` gives ``question``
        and the passages that mention it among the closest to it with the question's words the
        sentence leaves unanswered, the sentence's own left out; ("", ()) when the sentence
        gives no name (one of its :func:`entity_names`, whole) or nothing found mentions it."""
        verb, asked_how = how_to(question)
        # the name a date question goes through: "John Knox" for "What year did the author of
        # ... die?", not the sentence's "1558" (for a number question too it searched the other
        # settings' pages of "What is the default value of X?": measured and not kept)
        name = typed_span(question, [link.text], fallback=False, stated=False,  # it names the bridge, not the answer
                          kind="ENT" if answer_kind(question) == "DATE" or verb else None)
        # the whole name the span was cut from: "Ernst Mach" for "Ernst" when the question says "Mach"
        name = next((n for n in entity_names(link.text) if name and name != n
                     and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", n)), name)
        left = unanswered_words(question, link.text)
        # a bridge is a named thing of the sentence, whole: not "British", a year or a name's part
        # and not the answer itself: a name of the asked type ("the Socialist Party of America
        # ticket" for "What political party ...?")
        if not name or name not in entity_names(link.text) or len(name) < MIN_TITLE_CHARS or not left \
                or not missing_entities([name], question) or of_asked_type(question, name):
            return "", ()
        # "How do you fix LUM-310": a way of doing something is searched for as asked of the bridge
        query = f"{asked_how} {name}" if verb else " ".join([name, *(w for w in re.findall(r"\w+", question.lower())
                                                                     if w in left)])
        try:
            found = search(query, self.config.bridge_search_k, state)
        except Exception as exc:  # noqa: BLE001 - the answer without the bridge
            state.trace.note(f"generation: bridge search for {name!r} failed ({type(exc).__name__}: {exc}); "
                             "no bridge searched")
            return "", ()
        own = set(link.chunk_ids)
        mention = tuple(p for p in found if p.chunk_id not in own and not missing_entities([name], p.text))
        return (name, mention) if mention else ("", ())

    @staticmethod
    def _looked_up(lookup: TitleLookup, name: str, state: PipelineState) -> list[Passage]:
        """``lookup(name)``; a failing lookup (an unreadable chunk store) is no bridge, noted."""
        try:
            return lookup(name, state)
        except Exception as exc:  # noqa: BLE001 - the answer without the bridge
            state.trace.note(f"generation: title lookup of {name!r} failed ({type(exc).__name__}: {exc}); "
                             "no bridge looked up")
            return []

    def bridged(self, question: str, hop: Hop) -> tuple[str, list[Support]]:
        """``(span, sentences)``: the answer ``hop``'s passages give ``question`` and the sentences
        it rests on, the one naming the bridge first: the bridge itself when the question asks
        for a type its first sentence says it is (``models.bridge.title_answers``), else the
        span of its ``sentences_per_node`` best sentences (``typed_span``, the bridge's own name
        excluded), its sentences stating the asked relation before them
        (``models.text.relation_cues``: "married" for "Who is the spouse of ...?", "born" for
        "place of birth", wherever the cosine ranks them); ("", []) when they hold none."""
        if hop.subject:
            return hop.title, [hop.link]
        verb = how_to(question)[0]
        if verb:
            # no span: the bridge's best sentence stating the asked verb ("To fix it, raise ..."),
            # first in a passage titled with the bridge's name (the page on `LUM-310`, not the news
            # that mentions it)
            about = {p.chunk_id for p in hop.passages if not missing_entities([hop.title], p.title or "")}
            stating = [c for c in hop.ranked if _states({fold(verb)}, c.text, folded=True)]
            how = next((c for c in stating if about & set(c.chunk_ids)), stating[0] if stating else None)
            return "", ([hop.link, how] if how is not None else [])
        if hop.titled and title_answers(question, hop.passages[0].text):
            return hop.title, [hop.link, hop.ranked[0]]
        # the bridge's passage is about its subject: its opening sentence is often closest to the
        # question and holds none of the asked-for facts, so no :meth:`cut` by relative support
        cues = relation_cues(question)
        cued = [c for c in hop.ranked if _states(cues, c.text) or states_life(question, c.text)]
        if hop.titled:
            sentences = [*cued, *(c for c in hop.ranked[: self.config.sentences_per_node] if c not in cued)]
        else:
            # a passage found by searching is about something else: only its sentences that state
            # what the link left unanswered (its words, or their relation words) may answer
            left = unanswered_words(question, hop.link.text)
            sentences = [c for c in hop.ranked  # cued, or holding one of the words left (by their stems)
                         if c in cued or unanswered_words(" ".join(left), c.text) != left]
        # the kind asked for only: "$47" is no answer to "When ...?", whatever the bridge says; not
        # the bridge's name, unless its title is a headline the link restates (its names may answer)
        exclude = [] if hop.titled and headline(hop.title) else [hop.title]
        span, at = typed_span_at(question, [c.text for c in sentences], exclude=exclude, fallback=False)
        return (span, [hop.link, sentences[at]]) if span else ("", [])

    def how_own(self, question: str, ranked: Sequence[Support]) -> list[Support]:
        """The sentences answering a question that asks how to do something to a thing it names
        ("How do I fix FRW-118?") from that thing's own page: the best of the
        ``bridge_cued_sentences`` best stating the asked verb in a passage titled with one of the
        question's names ("To fix it, let the client refresh ..." on "Troubleshooting FRW-118:
        ..."), after that passage's sentence naming it, when the best sentence is not that one
        (the news "Clients saw `FRW-118` errors ..." names the code and ranks first). With
        ``own_description``, a question asking for a description of a thing it names ("What
        does KST-429 mean?") gets the best of those sentences naming it on a passage titled
        with it, when the best sentence's passage is not titled with it. [] for other
        questions, or when no such sentence is among them."""
        verb = how_to(question)[0] if self.config.how_own else ""
        names = entity_names(question)
        if not names or not ranked:
            return []
        if not verb:
            if not (self.config.own_description and asks_description(question)):
                return []
            # "What does KST-429 mean?": the sentence naming it on its own page, not the source
            # notes' "Kestrel's error codes (KST-429 and KST-502) are defined in ..."
            own = next((c for c in ranked[: self.config.bridge_cued_sentences]
                        if c.title and len(missing_entities(names, c.title)) < len(names)
                        and len(missing_entities(names, c.text)) < len(names)), None)
            return [own] if own is not None and own != ranked[0] and not (
                ranked[0].title and len(missing_entities(names, ranked[0].title)) < len(names)) else []
        how = next((c for c in ranked[: self.config.bridge_cued_sentences]
                    if c.title and len(missing_entities(names, c.title)) < len(names)
                    and _states({fold(verb)}, c.text, folded=True)), None)
        if how is None or how == ranked[0]:
            return []
        # the passage's sentence naming the thing, which the answer's "it" refers to
        named = next((c for c in ranked if c != how and set(c.chunk_ids) & set(how.chunk_ids)
                      and len(missing_entities(names, c.text)) < len(names)), None)
        return [named, how] if named is not None else [how]

    def related(self, question: str, chosen: Sequence[str], search: BridgeSearch,
                state: PipelineState) -> tuple[str, Support, list[Passage]] | None:
        """``(span, its sentence, the passages found)`` for a question asking for a date, number or
        name by a relation (``models.text.asked_relation``: "Who makes Ferrow?") that none of its
        ``chosen`` sentences states, retrieval having missed the page that does ("Ferrow is a
        message broker developed by Calloway Data"): the ``bridge_search_k`` passages closest to
        the question's names with the relation's words ("Ferrow make made maker developed ...") in
        every source of the index (routing may have left out the one that states it), and the span of their best sentence stating the relation about one of those names (in it
        or its title) among their ``typed_sentences`` best; None when none holds one."""
        relations = asked_relation(question)
        names = entity_names(question)
        if not relations or not names or answer_kind(question) not in SPAN_KINDS \
                or any(states_relation(relations, x) for x in chosen):
            return None
        words = sorted(min(relations, key=len))
        passages = search(" ".join([*names, *words]), self.config.bridge_search_k, state)
        # a sentence stating the relation about one of the question's names (in it or its title),
        # and every other word of the question: "It is designed to run unattended" says nothing
        # of "Who designed the Kestrel logo?"
        cued = {w for ws in relations for w in ws}
        ranked = [c for c in self.support(question, passages, state) if states_relation(relations, c.text)
                  and len(missing_entities(names, f"{c.text} {c.title}")) < len(names)
                  and not {w for w in unanswered_words(question, f"{c.text} {c.title}") if w not in cued}]
        best = ranked[: self.config.typed_sentences]
        span, at = typed_span_at(question, [c.text for c in best], fallback=False)
        return (span, best[at], passages) if span else None

    def announced(self, question: str, chosen: Sequence[str],
                  passages: Sequence[Passage]) -> tuple[list[str], str] | None:
        """For a question asking how to do something: ``chosen`` with, after the first of them
        announcing ways or steps ("There are two supported ways to install Lumen."), up to
        ``announced_steps`` of the next sentences of its passage ("With a container: `docker run
        ...`", "From a package: `pip install lumen-cache`", ...), and that passage's chunk id;
        None when no sentence announces any, for other questions, or with ``announced_steps`` 0."""
        n = self.config.announced_steps
        if not n or not how_to(question)[0]:
            return None
        for i, text in enumerate(chosen):
            if not _ANNOUNCES.search(text):
                continue
            for p in passages:
                quoted = [q for _, q in quotable_sentences(p.text)]
                if text in quoted:
                    k = quoted.index(text)
                    after: list[str] = []
                    for q in quoted[k + 1:]:
                        if len(after) == n:
                            break
                        if not any(q in x for x in [*chosen, *after]):  # an indented block quoted with its line
                            after.append(q)
                    return ([*chosen[:i + 1], *after, *chosen[i + 1:]], p.chunk_id) if after else None
        return None

    def labelled(self, question: str, ranked: Sequence[Sequence[Support]], used: Sequence[str]) -> Support | None:
        """The first sentence of ``ranked`` labelled with the noun ``question`` asks a description
        by (``models.text.labelled_with_asked``: "Requirements: ..." for "What are the
        requirements for running Tidewater?") in a passage the answer draws on (``used``, chunk
        ids); None when there is none, or with ``labelled_lines`` off."""
        if not self.config.labelled_lines:
            return None
        ids = set(used)
        return next((c for r in ranked for c in r if ids & set(c.chunk_ids) and labelled_with_asked(question, c.text)),
                    None)

    def unsaid(self, question: str, sentences: Sequence[str]) -> str:
        """What of ``question`` its chosen ``sentences`` do not say, when it asks for a date,
        number or name and no span of that kind was read (``no_span_no_answer``): the relation
        it asks about (``models.text.asked_relation``: "founded"), else its content words but
        names when the sentences leave most of them out ("point", "water" of "What is the
        boiling point of water?" for two sentences on boiling miso); "" when they say it (the
        sentences are the answer: "Jupiter is the largest planet ..." for "Which planet is the
        largest?"), for other questions, and with the setting off."""
        if not (self.config.short_answer and self.config.no_span_no_answer and answer_kind(question) in SPAN_KINDS
                and not choice_options(question)[1]):
            return ""
        text = " ".join(sentences)
        versions = [other_version(question, x) for x in sentences]
        if sentences and all(versions):  # each is on another version of what is asked
            return repr(versions[0])
        relations = asked_relation(question)
        if relations and not states_relation(relations, text):
            return " or ".join(repr(w) for w in sorted(min(relations, key=len)))
        verbs = [subject_is_type(question, x) for x in sentences]
        if sentences and all(verbs):  # each says the subject is the asked type: "Quarry is a vector database ..."
            return repr(verbs[0])
        nouns = [figure_of_another(question, x) for x in sentences]
        if sentences and all(nouns):  # each gives the asked figure of another name: "Iceland ... population of ..."
            return f"the {nouns[0]} of {' or '.join(repr(n) for n in entity_names(question))}"
        names = {w for n in entity_names(question) for w in re.findall(r"[\w'’&.-]+", n.lower())}
        asked = {w for w in unanswered_words(question, "") if w not in names and len(w) > 1 and w not in HOW_MUCH_WORDS}
        left = unanswered_words(" ".join(sorted(asked)), text)
        return ", ".join(repr(w) for w in sorted(left)) if 2 * len(left) > len(asked) else ""

    def short_answer(self, question: str, steps: Sequence[str], ranked: Sequence[Sequence[Support]],
                     hops: Sequence[Hop | None] = ()) -> tuple[str, list[Support]]:
        """``(short answer, sentences it came from through a bridge)``: the short answer in each
        final step's :meth:`cut` sentences (``typed_span``: the date, number or name its
        question asks for), "; "-joined; "" when no step has one or ``short_answer`` is off.

        A step asked as a question ("When was #1 founded?") says what it asks for; a step
        that is a phrase ("default index.ef_construction", filled with its parent's answer)
        does not, and the user's ``question`` does, with its own words. A step with a bridge
        (``hops``, one per step, :meth:`hop`) is answered from the bridge's passages when they
        hold an answer (:meth:`bridged`), and those sentences lead the support. A short answer
        not of the type a country or figure question asks for is sought in the step's
        ``typed_sentences`` / ``measure_sentences`` best sentences (``models.text.asks_typed``),
        a month or year for a date question made finer from them (:meth:`finer_date`), and the
        sentence it was read in leads the support. A yes / no or choice question gets none,
        whatever its steps ask: :meth:`compare` answers those it can, and is asked first.
        """
        if not self.config.short_answer or answer_kind(question) in ("CHOICE", "YESNO") \
                or choice_options(question)[1]:  # "Which genus has more species, A and B?"
            return "", []
        shorts: list[str] = []
        lead: list[Support] = []
        for i, (step, r) in enumerate(zip(steps, ranked, strict=True)):
            asked = step if answer_kind(step) in SPAN_KINDS else question
            hop = hops[i] if i < len(hops) else None
            key = (setting_asked(asked, [c.title for c in r[: self.config.measure_sentences]])
                   or setting_described(asked, [c.text for c in r[: self.config.measure_sentences]])) \
                if self.config.named_settings else ""
            if key:  # "lumen snapshot interval": its default, wherever the cosine ranks "Default: `300`."
                asked, hop = f"What is the default value of {key}?", None
                # read on the setting's own page ("Default: `3`." of replication.factor, not the
                # partitions page's "Default: `6`." ranked above it)
                r = [c for c in r if key in (c.title or "") or key in c.text] or r
            span, held = self.bridged(asked, hop) if hop is not None else ("", [])
            if not held and (self.config.how_own or self.config.own_description):
                held = self.how_own(asked, r)
            if held and not span:  # a way of doing something, through its bridge or its page: its sentences lead
                lead.extend(c for c in held if c not in lead)
                continue
            read_from = held if span else self.cut(r)
            read = [c.text for c in read_from]
            at = -1  # the sentence of ``read`` the span was read in
            if not span:
                span, at = typed_span_at(asked, read)
            if not span and not held and any(other_version(asked, x) for x in read):
                # the selected sentences are on another version ("It follows Ferrow 1.0, released in
                # March 2022"): the asked one's may rank lower ("... released Ferrow 1.5 on ...")
                best = [c for c in r[: self.config.typed_sentences] if names_asked_version(asked, c.text)]
                span, k = typed_span_at(asked, [c.text for c in best])
                held = [best[k]] if span else held
            measure = bool(asked_measure(asked)) or asks_bound(asked)  # ("the maximum ...": a bound's figure)
            if (span or measure) and asks_typed(asked) and (
                    not span or typed_span(asked, read, typed=True) != span):
                # not a country for "... in what country?" ("Andre Geim"), nor a county for "Which
                # county ...?": one of the step's best sentences may hold one ("National
                # University of Singapore", "Presque Isle County"), and with it its sentence.
                # Reading them for any span when the selected sentences hold none was measured
                # and not kept: ten of twelve such spans were wrong (serving/profiling/RESULTS.md).
                # A figure of the asked dimension is sought even then ("At what temperature
                # ...?" read "serves 8" or nothing; "Default: `300`." is a short sentence
                # that ranks low): a unit, a port or a stated default is seldom a wrong answer.
                best = r[: self.config.measure_sentences if measure else self.config.typed_sentences]
                typed, k = typed_span_at(asked, [c.text for c in best], typed=True)
                span, held = (typed, [best[k]]) if typed else (span, held)
            if span and answer_kind(asked) == "DATE":
                finer, c = self.finer_date(asked, span, r[: self.config.typed_sentences])
                span, held = (finer, [c]) if c is not None else (span, held)
            if span and not held and at >= 0 and (hop is None or read_from[at] != hop.link):
                # the sentence it was read in leads the support: the support is the final steps'
                # sentences, and a decomposed question's short answer is read over all its passages
                # (not a bridge's link: a link in ``held`` says the answer came through its bridge)
                held = [read_from[at]]
            if span and span.lower() not in (s.lower() for s in shorts):
                shorts.append(span)
                lead.extend(c for c in held if c not in lead)
        return "; ".join(shorts), lead

    @staticmethod
    def finer_date(question: str, span: str, best: Sequence[Support]) -> tuple[str, Support | None]:
        """``(date, its sentence)``: for a date question whose short answer ``span`` is a month
        or a year ("May 2024", read in a year in review's "In May 2024: Lumen 4.0 released"),
        the first of ``best`` sentences whose own short answer (``typed_span``) is a finer date
        within it ("Brightline Systems released Lumen 4.0 on 2024-05-28."); ``(span, None)``
        when none is, or when the question asks for a year or a century."""
        got = [(span, "year")] if is_year(span) else parse_dates(span)
        if len(got) != 1 or got[0][1] == "day" or re.search(r"\b(?:year|century|decade)\b", question, re.I):
            return span, None
        iso, precision = got[0][0], got[0][1]  # a bare year is no timeline date: read here
        for c in best:
            date = typed_span(question, [c.text], kind="DATE", fallback=False)
            finer = parse_dates(date) if date else []
            if len(finer) == 1 and finer[0][0].startswith(iso) and finer[0][1] != precision \
                    and (precision == "year" or finer[0][1] == "day"):
                return date, c
        return span, None

    def compare(self, question: str, passages: Sequence[Passage]) -> tuple[Choice, list[str], list[str]] | None:
        """``(choice, support, chunk ids)`` for a question that compares named things
        (``models.choice.compared``): one that offers its answers ("..., A or B?": the option
        ``passages`` favour), a yes / no question about two of them ("Were A and B from the
        same country?") or one on what two share ("What profession did A and B both hold?"),
        with the sentences each one's value came from, the chosen one's first; None for other
        questions, when the passages do not decide, or with ``compare`` or ``short_answer``
        off."""
        if not (self.config.short_answer and self.config.compare):
            return None
        unique = list({p.chunk_id: p for p in passages}.values())
        picked = compared(question, [(p.title or "", p.text) for p in unique])
        if picked is None:
            return None
        support: list[str] = []
        used: list[str] = []
        for i, sentence in picked.evidence:
            text = " ".join(sentence.split())
            if i >= 0 and text and text not in support:
                support.append(text)
                if unique[i].chunk_id not in used:
                    used.append(unique[i].chunk_id)
        return picked, support, used

    def bridge(self, node: NodeResult, state: PipelineState) -> Support | None:
        """The sentence an answered step's answer came from: the best-supported sentence of its
        passages that contains the answer (a reader's or an LLM's short answer), else its best."""
        ranked = self.support(node.text, node.passages, state)
        if not ranked:
            return None
        answer = (node.answer or "").lower()
        return next((c for c in ranked if answer and answer in c.text.lower()), ranked[0])

    def answer(self, nodes: Sequence[NodeResult], state: PipelineState) -> str:
        """Fused sentences of the nodes that have no answered child (the final sub-questions)."""
        return self.compose([self.support(n.text, n.passages, state) for n in nodes])[0]


class OpenAIGenerator:
    """An OpenAI-compatible chat endpoint, streamed over httpx; a call never hangs.

    Three clocks bound one answer: ``connect_timeout_s`` to open the connection,
    ``first_token_timeout_s`` from the request to the first token, and ``timeout_s`` for the
    whole answer, retries included. The HTTP exchange runs on a worker thread that hands each
    line to the caller through a queue, so the caller's waits are exact whatever the server
    does (a stalled socket, bytes that never end a line, keep-alive comments); a worker left
    behind by a timeout ends at its own read timeout (``timeout_s``).

    A connection error or a 5xx before any token is retried ``retries`` times after
    ``retry_backoff_s`` (doubled each time); every other failure (a 4xx, a malformed chunk,
    an error event, a stream that ends without ``data: [DONE]``, a timeout) raises
    RunnerError at once, and GenerationStage answers extractively with a note in the trace.
    """

    class _Retryable(Exception):
        """A failure before any token that another attempt may not meet (connect error, 5xx)."""

    def __init__(self, config: OpenAIConfig) -> None:
        import httpx

        self.config = config
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        # The read timeout only ends a worker the caller has stopped waiting for.
        timeout = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers, timeout=timeout)

    def complete(self, messages: list[dict[str, str]],
                 on_token: Callable[[str], None] | None = None) -> tuple[str, int, int]:
        """``(answer, tokens in, tokens out)``; ``on_token`` gets each text piece as it arrives.

        The answer is the pieces joined, stripped. Token counts are the server's ``usage``
        when it reports one, else estimates.

        Raises:
            RunnerError: the server failed, misbehaved or was too slow (the message says which).
        """
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": messages, "max_tokens": cfg.max_tokens,
                                "temperature": cfg.temperature, "stream": cfg.stream}
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        deadline = time.monotonic() + cfg.timeout_s
        for attempt in range(cfg.retries + 1):
            try:
                text, usage, pieces = self._attempt(body, deadline, on_token)
                break
            except self._Retryable as exc:
                wait = cfg.retry_backoff_s * 2 ** attempt
                if attempt == cfg.retries or time.monotonic() + wait >= deadline:
                    raise RunnerError(f"generation.openai: {exc} (after {attempt + 1} attempt(s); "
                                      f"generation.openai.retries={cfg.retries})") from None
                log.warning("generation.openai: %s; retrying in %.2f s", exc, wait)
                time.sleep(wait)
        tokens_in = int(usage.get("prompt_tokens") or sum(estimate_tokens(m["content"]) for m in messages))
        # Without usage (llama.cpp does not send it when streaming) each streamed piece is at
        # least one token: the count of pieces is exact for servers that send one per chunk.
        tokens_out = int(usage.get("completion_tokens") or max(pieces, estimate_tokens(text)))
        return text, tokens_in, tokens_out

    def _exchange(self, body: dict[str, Any], items: queue.Queue, stop: threading.Event) -> None:
        """Worker: one HTTP exchange, put on ``items`` as ``(kind, value)`` pairs.

        Kinds: ``status`` (code, body) for an HTTP error, ``line`` per SSE line, ``body`` for a
        non-streamed answer, ``end`` when the response is over, ``error`` for an exception.
        """
        try:
            with self._client.stream("POST", "/chat/completions", json=body) as r:
                if r.status_code >= 400:
                    r.read()
                    items.put(("status", (r.status_code, r.text)))
                    return
                if not body["stream"]:
                    r.read()
                    items.put(("body", r.text))
                    return
                for line in r.iter_lines():
                    if stop.is_set():
                        return
                    items.put(("line", line))
            items.put(("end", None))
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
            items.put(("error", exc))

    def _attempt(self, body: dict[str, Any], deadline: float,
                 on_token: Callable[[str], None] | None) -> tuple[str, dict[str, Any], int]:
        """One request: ``(answer, usage, pieces)``; raises ``_Retryable`` or RunnerError."""
        import httpx

        cfg, url = self.config, self.config.base_url
        items: queue.Queue = queue.Queue()
        stop = threading.Event()
        threading.Thread(target=self._exchange, args=(body, items, stop), name="openai-generation",
                         daemon=True).start()
        first_by = min(deadline, time.monotonic() + cfg.first_token_timeout_s)
        parts: list[str] = []
        usage: dict[str, Any] = {}
        finished = False  # a chunk carried a finish_reason ("stop", "length")
        try:
            while True:
                until = deadline if parts else first_by
                try:
                    kind, value = items.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    if not parts and first_by < deadline:
                        raise RunnerError(f"generation.openai: no token from {url} within "
                                          f"first_token_timeout_s={cfg.first_token_timeout_s} s (a slow or "
                                          "overloaded server; long prompts take longer on a CPU)") from None
                    raise RunnerError(f"generation.openai: the answer from {url} took longer than "
                                      f"timeout_s={cfg.timeout_s} s ({len(parts)} pieces received)") from None
                if kind == "status":
                    code, text = value
                    msg = f"{url} answered {code}: {text[:200]}"
                    if code >= 500:
                        raise self._Retryable(msg)
                    raise RunnerError(f"generation.openai: {msg}")
                if kind == "error":
                    if isinstance(value, (httpx.ConnectError, httpx.ConnectTimeout)):
                        raise self._Retryable(f"cannot connect to {url} ({value}); check "
                                              "generation.openai.base_url and that the server is up")
                    raise RunnerError(f"generation.openai: the connection to {url} broke after {len(parts)} "
                                      f"pieces ({type(value).__name__}: {value})")
                if kind == "end":
                    raise RunnerError(f"generation.openai: {url} ended the stream after {len(parts)} pieces "
                                      "without 'data: [DONE]' (the server stopped mid-answer)")
                if kind == "body":
                    try:
                        event = json.loads(value)
                        text = event["choices"][0]["message"]["content"] or ""
                    except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
                        raise RunnerError(f"generation.openai: {url} sent a malformed response "
                                          f"({type(exc).__name__}: {exc}): {value[:200]!r}") from None
                    if on_token is not None and text:
                        on_token(text)
                    return text.strip(), event.get("usage") or {}, 1
                # an SSE line: "data: {...}", "data: [DONE]", or a comment / field to skip
                if not value.startswith("data:"):
                    continue
                data = value[5:].strip()
                if data == "[DONE]":
                    if not finished:
                        log.warning("generation.openai: %s ended the answer without a finish_reason after %d "
                                    "pieces: it may be cut short (llama.cpp's server interrupts a stream when "
                                    "another request arrives unless started with --interrupt_requests False)",
                                    url, len(parts))
                    return "".join(parts).strip(), usage, len(parts)
                try:
                    event = json.loads(data)
                    if event.get("error"):
                        raise RunnerError(f"generation.openai: {url} sent an error mid-stream: "
                                          f"{str(event['error'])[:200]}")
                    usage = event.get("usage") or usage
                    choices = event.get("choices") or []
                    pieces = [(c.get("delta") or {}).get("content") or "" for c in choices]
                    finished = finished or any(c.get("finish_reason") for c in choices)
                except (json.JSONDecodeError, AttributeError, TypeError) as exc:
                    raise RunnerError(f"generation.openai: {url} sent a malformed stream chunk "
                                      f"({type(exc).__name__}: {exc}): {data[:200]!r}") from None
                for piece in pieces:
                    if piece:
                        parts.append(piece)
                        if on_token is not None:
                            on_token(piece)
        finally:
            stop.set()  # a worker still reading drops the rest of the response

    def close(self) -> None:
        self._client.close()


class HFGenerator:
    """A local transformers causal LM, greedy decoding.

    Generation ends at ``max_new_tokens`` or at the first of ``stop`` (cut from the answer).
    With ``on_token`` the text is streamed (transformers' ``TextIteratorStreamer``, the model
    on a worker thread); the pieces hold back the last ``len(longest stop) - 1`` characters
    until they cannot be the start of a stop string, so no piece ever shows part of one.
    """

    # Decoding without the tokenizer's space clean-up: the streamed pieces and the whole
    # answer then decode alike (clean-up can rewrite text a piece has already shown).
    DECODE = {"skip_special_tokens": True, "clean_up_tokenization_spaces": False}

    def __init__(self, config: HFConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not config.model:
            raise ConfigError("generation.hf.model: empty; set a local folder (or hub id) of a causal LM")
        self.config = config
        dev = config.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(dev)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(config.model)
            self.model = AutoModelForCausalLM.from_pretrained(config.model).to(self.device).eval()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"generation.hf.model {config.model!r} cannot be loaded as a causal LM "
                              f"({exc}); give a folder with config.json, weights and a tokenizer") from None

    def _prompt(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(m["content"] for m in messages)

    def _stop_at(self, text: str) -> int | None:
        """Where the first stop string starts in ``text`` (None: none occurs)."""
        hits = [i for i in (text.find(s) for s in self.config.stop) if i >= 0]
        return min(hits) if hits else None

    def _stopping_criteria(self, prompt_len: int) -> list[Any]:
        """A criterion ending generation once the new text contains a stop string."""
        import torch
        from transformers import StoppingCriteria

        outer = self

        class StopStrings(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                texts = outer.tokenizer.batch_decode(input_ids[:, prompt_len:], **outer.DECODE)  # (B,)
                return torch.tensor([outer._stop_at(t) is not None for t in texts], device=input_ids.device)

        return [StopStrings()] if self.config.stop else []

    def complete(self, messages: list[dict[str, str]],
                 on_token: Callable[[str], None] | None = None) -> tuple[str, int, int]:
        """``(answer, prompt tokens, generated tokens)``; ``on_token`` gets the text piece by piece.

        The answer is the pieces joined, stripped; generated tokens count those of a cut stop
        string too (they were computed).
        """
        import torch
        from transformers import StoppingCriteriaList

        enc = self.tokenizer(self._prompt(messages), return_tensors="pt", truncation=True,
                             max_length=self.config.max_input_tokens, add_special_tokens=False)
        ids = enc["input_ids"].to(self.device)  # (1, T)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        kwargs = {"attention_mask": torch.ones_like(ids), "do_sample": False, "pad_token_id": pad,
                  "max_new_tokens": self.config.max_new_tokens,
                  "stopping_criteria": StoppingCriteriaList(self._stopping_criteria(ids.shape[1]))}
        if on_token is None:
            with torch.inference_mode():
                out = self.model.generate(ids, **kwargs)  # (1, T + new)
            text = self.tokenizer.decode(out[0, ids.shape[1]:], **self.DECODE)
            cut = self._stop_at(text)
            text = text if cut is None else text[:cut]
        else:
            text, out = self._stream(ids, kwargs, on_token)
        return text.strip(), int(ids.shape[1]), int(out.shape[1] - ids.shape[1])

    def _stream(self, ids: Any, kwargs: dict[str, Any], on_token: Callable[[str], None]) -> tuple[str, Any]:
        """Generate on a worker thread, passing text pieces to ``on_token``: ``(text, output ids)``."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, **self.DECODE)
        result: dict[str, Any] = {}
        abort = threading.Event()  # the listener raised (its client left): stop generating

        class Aborted(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.Tensor:
                return torch.full((input_ids.shape[0],), abort.is_set(), dtype=torch.bool, device=input_ids.device)

        kwargs = {**kwargs, "stopping_criteria": StoppingCriteriaList([*kwargs["stopping_criteria"], Aborted()])}

        def work() -> None:
            try:
                with torch.inference_mode():
                    result["out"] = self.model.generate(ids, streamer=streamer, **kwargs)
            except Exception as exc:  # noqa: BLE001 - re-raised on the caller's thread
                result["error"] = exc
                streamer.end()  # the caller's loop over the streamer ends

        worker = threading.Thread(target=work, name="hf-generation", daemon=True)
        worker.start()
        hold = max((len(s) for s in self.config.stop), default=1) - 1
        text, sent, stopped = "", 0, False
        for piece in streamer:
            if stopped:
                continue  # the stopping criterion ends generation at this step
            text += piece
            cut = self._stop_at(text)
            if cut is not None:
                text, stopped = text[:cut], True
            ready = len(text) if stopped else len(text) - hold
            if ready > sent:
                try:
                    on_token(text[sent:ready])
                except BaseException:
                    abort.set()  # the model stops at its next step instead of running to max_new_tokens
                    raise
                sent = ready
        worker.join()
        if "error" in result:
            raise RunnerError(f"generation.hf: {self.config.model} failed while generating "
                              f"({type(result['error']).__name__}: {result['error']})") from result["error"]
        if len(text) > sent:
            on_token(text[sent:])
        return text, result["out"]


def build_generator(config: GenerationConfig) -> Generator | None:
    """The LLM backend of ``config`` (None for ``extractive``)."""
    if config.backend == "openai":
        return OpenAIGenerator(config.openai)
    if config.backend == "hf":
        return HFGenerator(config.hf)
    return None


# -- the stage -------------------------------------------------------------------------------
class GenerationStage:
    """Reads the nodes and passages; writes ``answer``."""

    name = "generation"
    reads = ("query", "rewrite", "nodes", "passages", "node_answers")
    writes = ("answer", "answer_found", "used_passages", "short_answer", "support")

    def __init__(self, extractive: ExtractiveGenerator, llm: Generator | None, config: GenerationConfig,
                 reader: Reader | None = None, lookup: TitleLookup | None = None,
                 search: BridgeSearch | None = None, search_all: BridgeSearch | None = None) -> None:
        from searchsmith.serving.pipeline.reading import ReaderAnswers

        self.extractive = extractive
        self.lookup = lookup  # the index's passages by title, for bridges no passage retrieved is
        self.search = search  # the index's passages closest to a text, for bridges none is titled with
        self.search_all = search_all  # the same in every source, routed or not, for an unstated relation
        self.llm = llm
        self.config = config
        # the reader answers when no LLM does (backend auto / reader), and when an LLM fails
        self.reading = ReaderAnswers(reader, config) if reader is not None and config.backend != "extractive" else None
        self.prompt = load_prompt(config.prompt) if llm is not None else None
        self.node_prompt = load_prompt(config.node_prompt) if llm is not None else None

    @property
    def short_answers(self) -> bool:
        """Whether steps get the generator's short answers (an LLM or the reader, with
        ``step_answers: generator``)."""
        return (self.llm is not None or self.reading is not None) and self.config.step_answers == "generator"

    def answer_node(self, question: str, passages: list[Passage], state: PipelineState) -> str:
        """A step's answer, the text that fills its children's ``#k`` (``step_answers``)."""
        if self.config.step_answers == "names":
            return self.extractive.node_answer(question, passages, state)
        if self.llm is not None:
            try:
                msgs = render(self.node_prompt, question, passages, self.config.max_context_chars)
                text, t_in, t_out = self.llm.complete(msgs)
                state.trace.count("generation.nodes", 1, t_in, t_out)
                if text:
                    return strip_markers(text)
            except Exception as exc:  # noqa: BLE001 - fall back to the offline answer
                state.trace.note(f"generation: node answer failed ({type(exc).__name__}: {exc}); "
                                 f"{'reader' if self.reading is not None else 'extractive'} used")
        if self.reading is not None:
            short = self.reading.node_short(question, passages, state)
            if short:
                return short
        return self.extractive.node_answer(question, passages, state)

    @staticmethod
    def question_names(state: PipelineState) -> list[str]:
        """The names of the user's own question (not the rewrite's added history), once each.

        A name is a pattern entity (a possessive already cut: "Keaton's" -> "Keaton") with a
        capital letter or an identifier's ``. _ /``, its version cut ("Beacon 2.4" -> "Beacon":
        the version is often what is asked for); numbers alone and lower-case hyphenated words
        ("real-time") are not names.
        """
        names: list[str] = []
        # (a possessive inside a run of capitals ends a name: "Calloway Data's CEO" names two)
        for ent in (part for e in pattern_entities(state.query) for part in re.split(r"['’]s\s+", e)):
            name = re.sub(r"(?:\s+\d+(?:\.\d+)*)+$", "", ent)  # "Beacon 2.4" is "Beacon"
            if re.search(r"[A-Z]|[A-Za-z][._/]\w", name) and name not in names:
                names.append(name)
        return names

    @staticmethod
    def mentioned(name: str, text: str) -> bool:
        """Whether ``text`` mentions ``name``: as it is, or, for a name with initials, its other
        words ("Alex P. Keaton": "Alex Keaton"). A short form is mentioned spelled out too
        ("CTO": "chief technology officer", :func:`~searchsmith.models.text.spelled_out`), and
        a short form's "of" name by each of its parts ("CTO of Harbor & Finch": "Harbor & Finch
        appointed ... as chief technology officer")."""
        words = [w for w in name.split() if not re.fullmatch(r"[A-Z]\.", w)]
        if not missing_entities([name], text) or (
                0 < len(words) < len(name.split()) and not missing_entities(words, text)):
            return True
        parts = re.split(r"\s+of\s+(?:the\s+)?", name, maxsplit=1)
        if not SHORT_FORM.fullmatch(parts[0]):
            return False
        return spelled_out(parts[0], text) and (len(parts) == 1 or GenerationStage.mentioned(parts[1], text)) \
            or (len(parts) == 2 and not missing_entities(parts, text))

    @classmethod
    def missing_names(cls, state: PipelineState) -> list[str]:
        """Names of the user's question (:meth:`question_names`) that no passage mentions
        (:meth:`mentioned`, in its title or text)."""
        names = cls.question_names(state)
        if not names:
            return []
        text = "\n".join(f"{p.title or ''}\n{p.text}" for p in state.passages)
        return [n for n in names if not cls.mentioned(n, text)]

    @classmethod
    def off_subject(cls, state: PipelineState, used: Sequence[str]) -> list[str]:
        """The user's question's names (:meth:`question_names`) when none of them is mentioned
        by a passage the answer drew on (``used``, chunk ids) and such a passage's title names
        another thing (a name is mentioned when each of its words but initials is): the sentences
        are about something else ("the 2 hours Quarry Cloud outage", titled "Northwind Labs
        explains Quarry Cloud outage", for "How long did the Atlasgrid Cloud outage last?" when
        no source tells of one). [] when one is mentioned,
        the question names nothing, or the titles name nothing else (a help page "Do you offer
        phone support?" answers "Does Stackyard offer phone support?" without naming Stackyard).
        A short form beside other names does not count ("TLS" of "What is the minimum TLS version
        Lumen accepts?", which Kestrel's page names).
        """
        # a short form beside other names is a technology the question is about, not its subject
        # ("What is the minimum TLS version Lumen accepts?": Kestrel's TLS page names TLS, not Lumen)
        named = cls.question_names(state)
        names = [n for n in named if not SHORT_FORM.fullmatch(n)] or named
        ids = set(used)
        drawn = [p for p in state.passages if p.chunk_id in ids]
        if not names or not drawn:
            return []
        text = "\n".join(f"{p.title or ''}\n{p.text}" for p in drawn)
        # each of a name's words will do, anywhere: a bridge's passage names its subject loosely
        # ("He was the father of Sigmund, Arne, Henrik and Atle Selberg" for "Henrik Selberg")
        # (a short form spelled out: "chief technology officer" for "CTO")
        if any(cls.worded(n, text) for n in names):
            return []
        other = [e for p in drawn for e in entity_names(p.title or "") if missing_entities([e], state.query)]
        return names if other else []

    @classmethod
    def on_subject(cls, state: PipelineState, ranked: Sequence[Support], threshold: float | None,
                   margin: float) -> list[Support] | None:
        """The sentences of ``ranked`` whose passages mention one of the question's names (as
        :meth:`off_subject` reads them), best first, when the best sentence's are off the
        subject (:meth:`off_subject`), the best of those keeps ``threshold`` and ``margin`` of
        the best sentence's score (``extractive.min_relative_score``: below it a sentence is
        about something else), and it or its passages' titles hold a word of the question
        besides its names; None otherwise (a decomposed question: its steps name their own
        things)."""
        if not ranked or len(state.nodes) > 1 or not cls.off_subject(state, ranked[0].chunk_ids):
            return None
        named = cls.question_names(state)
        names = [n for n in named if not SHORT_FORM.fullmatch(n)] or named
        by_id = {p.chunk_id: p for p in state.passages}

        @functools.cache
        def naming(ids: tuple[str, ...]) -> bool:  # a passage of these mentions one of the names (read once)
            text = "\n".join(f"{by_id[i].title or ''}\n{by_id[i].text}" for i in ids if i in by_id)
            return any(cls.worded(n, text) for n in names)

        on = [c for c in ranked if naming(c.chunk_ids)]
        if not on or (threshold is not None and on[0].score < threshold) or on[0].score < margin * ranked[0].score:
            return None
        # on the topic too: a word of the question besides its names in the sentence or its
        # passages' titles ("outage" of "Tidewater Cloud outage in eu-central"; not Atlasgrid
        # Cloud's price for "How long did the Atlasgrid Cloud outage last?")
        own = set().union(*(content_words(n) for n in named))
        asked = content_words(state.question()) - own - {fold(w) for w in HOW_MUCH_WORDS | MEASURE_WORDS}
        ids = set(on[0].chunk_ids)
        titles = [p.title or "" for p in state.passages if p.chunk_id in ids]
        return on if asked & set().union(*(content_words(t) for t in [on[0].text, *titles])) else None

    @classmethod
    def unnamed(cls, state: PipelineState, used: Sequence[str], short: str = "") -> list[str]:
        """The names of a user's question naming two things or more (:meth:`question_names`, short
        forms and nationalities aside) that no passage the answer drew on (``used``, chunk ids, a
        bridge's too) mentions, word by word as :meth:`worded` reads them, and that no retrieved
        passage links to the answer: none mentioning the name also mentions the short answer,
        the title of a passage drawn on, or a name of the question that one mentions.
        Identifiers are not read (``tidewater/retry/backoff.go`` of "the product whose retry
        code lives in ..." describes a bridge). The answer is then about the others only ("flying past
        it in January 1986", on Uranus's page, for "When did Voyager 2 fly past Jupiter?", while
        Jupiter's page names neither Uranus nor that date); a bridge's name is linked ("The Deep
        Blue Sea" names the actor whose page answers). [] when each is mentioned or linked, the
        question names fewer than two, it was decomposed (an earlier step's name is answered by
        that step's passages, which the final answer need not quote) or it offers a choice."""
        names = [n for n in cls.question_names(state)
                 if re.search(r"[A-Z]", n) and not SHORT_FORM.fullmatch(n) and not demonym(n)]
        ids = set(used)
        drawn = [p for p in state.passages if p.chunk_id in ids]
        if len(names) < 2 or not drawn or len(state.nodes) > 1 or choice_options(state.query)[1]:
            # (an option may be named alone: "Which is longer, the Nile or the Amazon?")
            return []
        text = "\n".join(f"{p.title or ''}\n{p.text}" for p in drawn)
        said = [n for n in names if cls.worded(n, text)]
        # (a title without its parenthesis: "Eddie Fisher (singer)" is named "Eddie Fisher")
        links = [x for x in {short, *(re.sub(r"\s*\([^()]*\)$", "", p.title or "") for p in drawn), *said} if x]

        def linked(name: str) -> bool:  # a passage naming it names the answer
            return any(cls.worded(name, t) and any(not missing_entities([x], t) for x in links)
                       for t in (f"{p.title or ''}\n{p.text}" for p in state.passages if p.chunk_id not in ids))

        return [n for n in names if not cls.worded(n, text) and not linked(n)]

    @staticmethod
    def unrelated(state: PipelineState, chosen: Sequence[str], used: Sequence[str]) -> bool:
        """Whether a one-step answer's ``chosen`` sentences, and the titles of the passages they
        came from (``used``, chunk ids), hold no content word of the question (``content_words``:
        folded, stop words aside, and the words of how much or which measure it asks, "long",
        "size"): the sentences are similar to it by the embedding alone ("a day on Jupiter lasts
        about 9 hours and 56 minutes" for "How long do honeybees live?"). False for a
        decomposed question (a step's words are its own) and for one with no such word."""
        asked = content_words(state.question()) - {fold(w) for w in HOW_MUCH_WORDS | MEASURE_WORDS}
        if not asked or not chosen or len(state.nodes) > 1:
            return False
        ids = set(used)
        titles = [p.title or "" for p in state.passages if p.chunk_id in ids]
        return not asked & set().union(*(content_words(t) for t in [*chosen, *titles]))

    @staticmethod
    def worded(name: str, text: str) -> bool:
        """Whether ``text`` holds each word of ``name`` anywhere (its initials, and the "of", "the",
        "and", "&" between its words, aside), a short form also spelled out ("chief technology
        officer" for "CTO"): how loosely :meth:`off_subject` and :meth:`unnamed` read a name, as a
        bridge's passage names its subject ("He was the father of Sigmund, Arne, Henrik and Atle
        Selberg" for "Henrik Selberg")."""
        words = [w for w in name.split() if not re.fullmatch(r"[A-Z]\.", w) and w.lower() not in _NAME_LINKS]
        return all(not missing_entities([w], text) or (SHORT_FORM.fullmatch(w) and spelled_out(w, text))
                   for w in words)

    @staticmethod
    def _join(state: PipelineState, found: Sequence[Passage]) -> list[Passage]:
        """Add to the state's passages those of ``found`` it lacks (to be cited); returns them."""
        known = {p.chunk_id for p in state.passages}
        added = [p for p in dict((p.chunk_id, p) for p in found).values() if p.chunk_id not in known]
        state.passages.extend(added)
        return added

    def _not_found(self, state: PipelineState, note: str) -> None:
        state.answer, state.answer_found, state.used_passages = self.config.no_answer_text, False, []
        state.short_answer, state.support = "", []
        state.trace.get(self.name).note = note
        state.trace.note(f"generation: {note}")

    def run(self, state: PipelineState, preset: Preset) -> None:
        # The final sub-questions: nodes no other searched node refers to (``#k``); a parent
        # was answered (``node_answers``) or, when it only names its referent, filled by its text.
        consumed = {d for n in state.nodes for d in n.depends_on}
        final = [n for n in state.nodes if n.id not in consumed] or state.nodes
        with state.trace.stage(self.name) as st:
            state.answer_found, state.used_passages, state.short_answer, state.support = True, [], "", []
            if not state.passages:
                self._not_found(state, "no passages: nothing to answer from")
                return
            # Every backend answers only what the sources support: the extractive support of the
            # best sentence decides (it is computed anyway by the extractive answer, and costs
            # one embedding batch before an LLM call).
            ranked = [self.extractive.support(n.text, n.passages, state) for n in final]
            threshold = self.config.no_answer_threshold
            moved = self.on_subject(state, ranked[0], threshold, self.extractive.config.min_relative_score) \
                if self.config.on_subject and len(ranked) == 1 else None
            if moved is not None:
                ranked = [moved]
            best = max((r[0].score for r in ranked if r), default=float("-inf"))
            if threshold is not None and best < threshold:
                self._not_found(state, f"no answer: best support {best:.4f} < generation.no_answer_threshold "
                                       f"{threshold}")
                return
            absent = self.missing_names(state) if self.config.no_answer_missing_names else []
            if absent:
                self._not_found(state, f"no answer: no passage mentions {absent} of the question "
                                       f"(generation.no_answer_missing_names; best support {best:.4f})")
                return
            st.note = f"best support {best:.4f}" + ("" if threshold is None else f" >= generation.no_answer_threshold "
                                                                                   f"{threshold}")
            if moved is not None:
                st.note += ("; the best sentence's passage is off the subject: the sentences of passages naming "
                            f"{self.question_names(state)} answer (generation.on_subject)")
            if self.llm is not None:
                try:
                    msgs = render(self.prompt, state.question(), state.passages, self.config.max_context_chars,
                                  state.node_answers, state.nodes)
                    # the final answer streams to the listener (the server's /v1/search events)
                    text, t_in, t_out = (self.llm.complete(msgs) if state.on_delta is None
                                         else self.llm.complete(msgs, on_token=state.on_delta))
                    state.trace.count(self.name, 1, t_in, t_out)
                    if text:
                        # which passages an LLM drew on is unknown: the citations will say
                        state.answer = strip_markers(text).strip()
                        return
                    st.note += "; the LLM returned an empty answer"
                except Exception as exc:  # noqa: BLE001 - degrade to extractive
                    if not self.config.fallback_extractive or isinstance(exc, ClientGone):
                        raise  # nobody is waiting for a fallback answer
                    fallback = "the reader's answer" if self.reading is not None else "extractive answer"
                    failed = f"{self.config.backend} failed ({type(exc).__name__}: {exc}); {fallback}"
                    st.note += f"; {failed}"
                    state.trace.note(f"generation: {failed}")
            # a question comparing named things ("Which came out first, A or B?", "Were A and B
            # from the same country?"): what their passages say, before the reader's answer, which
            # rarely names an option
            picked = self.extractive.compare(state.question(), state.passages)
            if picked is not None:
                choice, state.support, state.used_passages = picked
                state.short_answer = choice.option
                state.answer = " ".join([lead_sentence(choice.option), *state.support])
                st.note += f"; compared: {choice.option!r}, {choice.reason} (generation.extractive.compare)"
                return
            # a chain's earlier steps: the sentences their answers came from lead the support
            steps = [n for n in state.nodes if n.id in consumed and n.answer] if self.config.chain_support else []
            bridges = [b for b in (self.extractive.bridge(n, state) for n in steps) if b is not None]
            if self.reading is not None:
                targets, target_ranked = final, ranked
                if self.config.reader.question == "user" and len(state.nodes) > 1:
                    # the user's question over every step's passages, not the final steps
                    targets = [NodeResult("answer", state.question(), passages=list(state.passages))]
                    target_ranked = [self.extractive.support(state.question(), state.passages, state)]
                read = self.reading.compose(self.reading.readings(targets, state), target_ranked, bridges)
                if read is None:
                    self._not_found(state, f"no answer: the reader's best score is below generation.reader.min_score "
                                           f"{self.reading.min_score} (best support {best:.4f})")
                    return
                state.answer, state.short_answer, state.support, state.used_passages = read
                st.note += f"; reader (min_score {self.reading.min_score})"
                return
            if self.config.backend == "reader":
                st.note += "; generation.backend reader but no usable reader bundle (bundles.reader); extractive"
            targets, target_ranked = final, ranked
            if self.extractive.config.question == "user" and len(state.nodes) > 1:
                # the short answer: the user's question over every step's passages (its bridges
                # too); the support: the final steps' sentences, led by the ones it was read in
                targets = [NodeResult("answer", state.question(), passages=list(state.passages))]
                target_ranked = [self.extractive.support(state.question(), state.passages, state)]
            # a sentence naming another passage's subject: that passage answers (models.bridge)
            hops = [self.extractive.hop(n.text, r, n.passages, state, self.lookup, self.search)
                    for n, r in zip(targets, target_ranked, strict=True)]
            short, held = self.extractive.short_answer(state.question(), [n.text for n in targets], target_ranked,
                                                       hops)
            chosen, state.used_passages = self.extractive.chosen(ranked, [*bridges, *held], short)
            state.answer = " ".join(chosen)
            used = [h for h in hops if h is not None and h.link in held and not h.subject]
            if any(h is not None and h.subject and h.link in held for h in hops):
                st.note += "; the best sentence's subject, its passage's title (generation.extractive.bridge)"
            if used:
                # a bridge looked up by its name joins the passages, to be cited
                added = self._join(state, [p for h in used for p in h.passages])
                how = "found by searching for it" if any(not h.titled for h in used) else "looked up by title"
                st.note += "; through " + ", ".join(repr(h.title) for h in used) + " (generation.extractive.bridge" + \
                    (f"; {len(added)} passage(s) {how})" if added else ")")
            related = self.extractive.related(state.question(), chosen, self.search_all, state) \
                if not short and not held and self.search_all is not None and self.extractive.config.relation_search \
                else None
            if related is not None:
                # the sentences state none of the asked relation: a passage found by searching for it does
                short, c, found = related
                added = self._join(state, found)
                chosen, state.used_passages = [c.text], list(c.chunk_ids)
                st.note += f"; the asked relation stated in a passage found by searching for it " \
                           f"(generation.extractive.relation_search; {len(added)} passage(s) added)"
            off = self.off_subject(state, state.used_passages) if self.config.no_answer_off_subject else []
            if off:
                self._not_found(state, f"no answer: no passage the answer drew on (a bridge's too) mentions {off} of the question "
                                       f"(generation.no_answer_off_subject; best support {best:.4f})")
                return
            if self.config.no_answer_unrelated and self.unrelated(state, chosen, state.used_passages):
                self._not_found(state, "no answer: the sentences that answer it best, and their passages' titles, hold "
                                       "no word of the question (generation.no_answer_unrelated; best support "
                                       f"{best:.4f})")
                return
            unnamed = self.unnamed(state, state.used_passages, short) if self.config.no_answer_unnamed else []
            if unnamed:
                self._not_found(state, f"no answer: no passage the answer drew on (a bridge's too) mentions {unnamed} of "
                                       f"the question's names (generation.no_answer_unnamed; best support {best:.4f})")
                return
            if short:
                # the span of a date, number or name the question asks for, then its sentences
                state.short_answer, state.support = short, chosen
                state.answer = " ".join([lead_sentence(short), *chosen])
                st.note += f"; short answer {short!r} (generation.extractive.short_answer)"
            elif not held and (unsaid := self.extractive.unsaid(state.question(), chosen)):
                kind = {"DATE": "date", "NUM": "number"}.get(answer_kind(state.question()), "name")
                self._not_found(state, f"no answer: the question asks for a {kind}, the sentences that answer it "
                                       f"best hold none, and they do not say {unsaid} "
                                       f"(generation.extractive.no_span_no_answer; best support {best:.4f})")
                return
            if not short and (label := self.extractive.labelled(state.question(), target_ranked,
                                                                 state.used_passages)) is not None:
                chosen = [label.text, *(c for c in chosen if c != label.text)]
                state.answer = " ".join(chosen)
                st.note += "; led by the line labelled with the asked noun (generation.extractive.labelled_lines)"
            if not short and (ways := self.extractive.announced(state.question(), chosen, state.passages)):
                chosen, from_id = ways
                state.answer = " ".join(chosen)
                state.used_passages += [from_id] if from_id not in state.used_passages else []
                st.note += f"; the ways its sentence announces, from its passage " \
                           f"(generation.extractive.announced_steps {self.extractive.config.announced_steps})"
