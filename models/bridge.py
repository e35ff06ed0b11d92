"""Bridges: the passage a question's best sentence leads to, for the question it does not answer.

Most multi-hop questions go through a bridge: "Where was the director of film X born?" is
answered by the passage about the director, and only the passage about X says who that is
("X is a 2010 film directed by Mark Steven Johnson"). The sentence closest to the question
names the bridge; its own passage (titled with the name) holds the answer. Without a reader,
the extractive answer reads the bridge like this (``generation.extractive.bridge``):

* :func:`named_title`: the first passage title that a sentence names (whole words, a title's
  trailing "(disambiguator)" cut: "Kiss and Tell (1945 film)" is named by "Kiss and Tell"), and
  that the question does not name itself (that passage is the question's own subject, no
  bridge);
* :func:`asked_type` and :func:`title_answers`: a question whose wh-phrase names a type ("which
  Mexican-American dog behaviorist", "what city") is answered by the bridge itself when the
  bridge's first sentence says it is one ("Cesar Millan ... is a Mexican-American dog
  behaviorist"); otherwise the answer is a span of the bridge passage's sentences, the bridge's
  own name excluded (``models.text.typed_span``).

Pure functions of text; the pipeline's generator (``serving.pipeline.generation``) ranks the
sentences and decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchsmith.models.text import (
    LOCATED_SUFFIXES,
    MAX_PHRASE_WORDS,
    QUERY_STOP_WORDS,
    answer_kind,
    asked_type,
    entity_names,
    fold,
    holds_word,
    other_version,
    sentence_texts,
    singular,
)

_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)\s*$")
_WORDS = re.compile(r"[^\W_]+")
MIN_TITLE_CHARS = 3  # a title shorter than this ("A", "Go") is named by too many sentences


def base_title(title: str) -> str:
    """``title`` without its trailing disambiguator: "Kiss and Tell (1945 film)" -> "Kiss and Tell"."""
    return _DISAMBIGUATOR.sub("", title or "").strip()


def _phrase(text: str) -> str:
    """Lower-cased words of ``text`` joined by single spaces, padded: whole-word search by ``in``."""
    return " " + " ".join(_WORDS.findall(text.lower())) + " "


# a title named only as where something is ("Boston-based bank", "a Paris-born painter") names no bridge
_NOT_PREFIX = rf"(?!(?:{'|'.join(LOCATED_SUFFIXES)}) )"


def named_title(sentence: str, titles: Sequence[str], question: str, own: Sequence[str] = ()) -> int | None:
    """Index in ``titles`` of the first title ``sentence`` names as whole words, that ``question``
    does not name and that is not one of ``own`` (the titles of the passages the sentence came
    from); None when there is none.

    Titles are compared without their disambiguator (:func:`base_title`) and case-insensitively;
    the longest named title wins over one it contains ("Bank of America" over "America"). A title
    named only as where something is ("Boston-based bank") is not named.
    """
    said, asked = _phrase(sentence), _phrase(question)
    skip = {_phrase(base_title(t)) for t in own}
    best: tuple[int, int] | None = None  # (-length, index)
    for i, title in enumerate(titles):
        name = base_title(title)
        key = _phrase(name)
        if len(name) < MIN_TITLE_CHARS or key.strip() == "" or key in skip or key in asked \
                or not re.search(re.escape(key) + _NOT_PREFIX, said):
            continue
        cand = (-len(key), i)
        if best is None or cand < best:
            best = cand
    return None if best is None else best[1]


HEADLINE_WORDS = 2  # a title with this many lower-case content words states something


def headline(title: str) -> bool:
    """Whether ``title`` states something, as a news headline does ("Harbor & Finch names Tomasz
    Wilk chief technology officer"), rather than naming a subject ("Bank of America", "Kestrel
    2.0 released"): it has :data:`HEADLINE_WORDS` or more lower-case words that are not stop
    words. A sentence naming a headline restates its story: the names in it may be what is asked."""
    lower = [w for w in _WORDS.findall(base_title(title)) if w.islower() and w not in QUERY_STOP_WORDS]
    return len(lower) >= HEADLINE_WORDS


# an error code or ticket: letters, a dash, digits ("FRW-118", "KST-502")
_CODE = re.compile(r"\b([A-Z][A-Z0-9]*)-(\d+)\b")


def sibling_of_asked(name: str, question: str) -> str:
    """Whether ``name`` holds a code or version of the same family as one ``question`` names, but
    another: no bridge, its passage is about the sibling, not what is asked of the question's.
    The sibling code ("FRW-402" for a question on "FRW-118"), or the asked version as the
    question writes it ("Ferrow 1.5" when ``name`` is "Ferrow 1.0 released",
    ``models.text.other_version``); "" when it is none."""
    asked = {m.groups() for m in _CODE.finditer(question)}
    for m in _CODE.finditer(name):
        if m.groups() not in asked and any(prefix == m.group(1) for prefix, _ in asked):
            return m.group(0)
    return other_version(question, name)


GENERIC_WORDS = frozenset("name names named called known".split())


def unanswered_words(question: str, sentence: str) -> set[str]:
    """The content words of ``question`` that ``sentence`` lacks (:data:`GENERIC_WORDS` and stop
    words left out): what the sentence leaves unasked for. A sentence naming a bridge that leaves
    none answers the question itself. A word is held in any inflection or derivation
    (:func:`models.text.holds_word`: "discovered" by "discovery", "married" by "marriage", "directed" by
    "director"), a number whole; "country" is not held by "Countess"."""
    words = set(_WORDS.findall(sentence.lower()))
    roots = {fold(h) for h in words if not h.isdigit()}
    return {w for w in _WORDS.findall(question.lower()) if w not in QUERY_STOP_WORDS and w not in GENERIC_WORDS
            and not holds_word(w, words, roots)}


def title_answers(question: str, passage: str) -> bool:
    """Whether the passage's subject is the answer: ``question`` asks for a name
    (``answer_kind`` ENT) of a type whose head, the last word of :func:`asked_type`, the
    passage's first sentence says its subject is (plural or singular: "club" / "clubs"):
    "what Mexican-American dog behaviorist" is answered by a passage that opens "... is a
    Mexican-American dog behaviorist", not by one on a dog breed."""
    kinds = asked_type(question) if answer_kind(question) == "ENT" else ()
    sentences = sentence_texts(passage) if kinds else []
    if not sentences:
        return False
    head = singular(kinds[-1])
    return any(singular(w) == head for w in _WORDS.findall(sentences[0].lower()))


# kin a question asks through ("the place of birth of X's *father*"), and the words by which the
# kin's own passage states it of X ("He was ... the father of Sigmund, Arne, Henrik and Atle Selberg")
KIN_WORDS: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "father": "father", "mother": "mother", "son": "son", "daughter": "daughter",
    "brother": "brother", "sister": "sister", "spouse": "wife husband spouse", "wife": "wife", "husband": "husband",
}.items()}


def states_kin_of(question: str, sentence: str) -> bool:
    """Whether ``sentence`` says its passage's subject is the kin ``question`` asks through, of
    the question's named person ("the father of ... Henrik ... Selberg" for "Henrik Selberg's
    father"): that passage is the bridge, not a name the sentence gives. The kin word, "of", and
    a word of one of the question's names after it in the sentence."""
    asked = {w for w in _WORDS.findall(question.lower())} & KIN_WORDS.keys()
    if not asked:
        return False
    said = {w for k in asked for w in KIN_WORDS[k]}
    names = {w.lower() for n in entity_names(question) for w in _WORDS.findall(n) if w[:1].isupper() and len(w) > 2}
    for m in re.finditer(r"\b(\w+)\s+of\b", sentence):
        if m.group(1).lower() in said and names & {w.lower() for w in _WORDS.findall(sentence[m.end():])}:
            return True
    return False


__all__ = ["GENERIC_WORDS", "KIN_WORDS", "MAX_PHRASE_WORDS", "MIN_TITLE_CHARS", "asked_type", "base_title",
           "headline", "named_title", "states_kin_of", "title_answers", "unanswered_words"]
