"""Rewrites as edits: the decomposer's ``rewrite:`` task writes only what changes.

A human rewrite of a conversational follow-up keeps most of the query and swaps a reference
for what it refers to ("Is **it** treatable?" -> "Is **throat cancer** treatable?"). Asking a
small seq2seq model to write the whole standalone question makes it re-generate every word it
should have kept, and a model trained for minutes on a CPU does that badly (token F1 0.23
against 0.76 for copying the query, measured on TREC CAsT). So the target is the edit::

    it => throat cancer
    the => the first toilet ; ...         (ops joined with " ; ")

Each op is ``old => new``: ``old`` is a run of the query's words, found left to right, and
``new`` replaces it (an insertion is written with its left-hand neighbour as ``old``). An
empty generation is "no change": the query is kept, so a model that has learnt nothing
scores the copy-the-query baseline instead of far below it. :func:`edit_target` derives the
target from a (query, rewrite) pair; :func:`apply_edits` turns a generated edit back into a
rewrite, restoring the conversation's casing for words the (uncased) model wrote; ops whose
``old`` is not in the query are skipped, so no generation can raise.

Pure Python; used by training, ``Decomposer.rewrite`` and the exported bundle alike.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Sequence
from typing import Any

from searchsmith.models.text import QUERY_STOP_WORDS, REFERENCE_WORDS

ARROW = "=>"
OP_SEP = ";"
REWRITE_TARGETS = ("edit", "full")

_WORD = re.compile(r"\w+|[^\w\s]")
_ARROW_RE = re.compile(r"\s*=\s*>\s*")


def _words(text: str) -> list[re.Match[str]]:
    return list(_WORD.finditer(text))


def _low(ms: Sequence[re.Match[str]]) -> list[str]:
    return [m.group(0).lower() for m in ms]


def _find(hay: Sequence[str], needle: Sequence[str], start: int) -> int:
    """First index >= start where ``needle`` occurs in ``hay`` (-1 when absent)."""
    n = len(needle)
    for i in range(start, len(hay) - n + 1):
        if list(hay[i:i + n]) == list(needle):
            return i
    return -1


def edit_target(query: str, rewrite: str) -> str:
    """The edit text that turns ``query`` into ``rewrite`` under :func:`apply_edits`.

    Words are compared lower-cased (the model's tokenizer is uncased); ``""`` when nothing
    changes. Each op's ``old`` grows by neighbouring words until its first occurrence after
    the previous op is the place that changes (ops that come to overlap merge), so applying
    the ops left to right is exact.
    """
    q, r = _low(_words(query)), _low(_words(rewrite))
    codes = difflib.SequenceMatcher(None, q, r, autojunk=False).get_opcodes()
    # query word boundary -> rewrite word boundary, as a span's start (before anything
    # inserted there) and as a span's end (after it)
    start_at = [len(r)] * (len(q) + 1)
    end_at = [0] * (len(q) + 1)
    spans: list[tuple[int, int]] = []  # query spans that change, insertions anchored
    for tag, i1, i2, j1, j2 in codes:
        for i, j in ((i1, j1), (i2, j2)) if tag != "equal" else \
                ((i1 + k, j1 + k) for k in range(i2 - i1 + 1)):
            start_at[i], end_at[i] = min(start_at[i], j), max(end_at[i], j)
        if tag == "equal":
            continue
        if i1 < i2:
            spans.append((i1, i2))
        elif i1 > 0:  # insertion: anchor on the word to its left ...
            spans.append((i1 - 1, i1))
        elif q:  # ... or, at the start, to its right
            spans.append((0, 1))
    ops: list[str] = []
    pos, used = 0, 0  # next op's search start (query words); rewrite words already written
    k = 0
    while k < len(spans):
        lo, hi = spans[k]
        k += 1
        lo = max(lo, pos)
        while True:
            while k < len(spans) and spans[k][0] < hi:  # overlapping spans merge
                hi = max(hi, spans[k][1])
                k += 1
            if _find(q, q[lo:hi], pos) == lo or (lo == pos and hi == len(q)):
                break
            if lo > pos:  # widen left, else right
                lo -= 1
            else:
                hi += 1
        old, new = q[lo:hi], r[max(start_at[lo], used):end_at[hi]]
        ops.append(f"{' '.join(old)} {ARROW} {' '.join(new)}".strip())
        pos, used = hi, max(end_at[hi], used)
    return f" {OP_SEP} ".join(ops)


def parse_edits(text: str) -> list[tuple[list[str], str]]:
    """``[(old words, new text)]`` from a generated edit; malformed ops are dropped."""
    out = []
    for op in text.split(OP_SEP):
        parts = _ARROW_RE.split(op, maxsplit=1)  # WordPiece decodes "=>" as "= >"
        if len(parts) != 2:
            continue
        old, new = parts
        old_words = [w.lower() for w in _WORD.findall(old)]
        if old_words:
            out.append((old_words, " ".join(new.split())))
    return out


def _cased(new: str, sources: Sequence[str]) -> str:
    """``new`` as the conversation spells it: the phrase's surface form when ``sources`` hold
    it (any spacing between its tokens, any case), else each word in its first-seen casing."""
    toks = _WORD.findall(new)
    if toks:
        phrase = re.compile(r"\s*".join(re.escape(t) for t in toks), re.IGNORECASE)
        for text in sources:
            m = phrase.search(text)
            if m:
                return m.group(0)
    surface: dict[str, str] = {}
    for text in sources:
        for m in _WORD.finditer(text):
            surface.setdefault(m.group(0).lower(), m.group(0))
    out, last = [], 0
    for m in _WORD.finditer(new):
        out.append(new[last:m.start()])
        out.append(surface.get(m.group(0).lower(), m.group(0)))
        last = m.end()
    out.append(new[last:])
    return _detok("".join(out))


def _detok(text: str) -> str:
    """Undo WordPiece decoding's spaces: around apostrophes, hyphens, slashes and brackets,
    and before punctuation ("netflix ' s" -> "netflix's", "dna - based" -> "dna-based")."""
    text = re.sub(r"\s*(['’])\s*s\b", r"\1s", text)
    text = re.sub(r"(\w)\s*([-/])\s*(?=\w)", r"\1\2", text)
    text = re.sub(r"([(\[])\s+", r"\1", text)
    text = re.sub(r"\s+([)\]?.!,;:])", r"\1", text)
    return " ".join(text.split())


def apply_edits(query: str, edits: str, history: Sequence[str] = ()) -> str:
    """``query`` with the ops of ``edits`` applied left to right (unknown ``old`` skipped).

    Args:
        query: the follow-up as the user wrote it.
        edits: a generated edit (``old => new ; ...``); empty keeps the query.
        history: the conversation's texts, whose casing new words take.
    """
    text, pos = query, 0
    for old, new in parse_edits(edits):
        ms = _words(text)
        i = _find(_low(ms), old, pos)
        if i < 0:
            continue
        start, end = ms[i].start(), ms[i + len(old) - 1].end()
        rep = _cased(new, [*history, query])
        left, right = text[:start], text[end:]
        # a space where a word would otherwise run into its neighbour ("method" + "of ...")
        gap_l = " " if left[-1:].isalnum() and rep[:1].isalnum() else ""
        gap_r = " " if right[:1].isalnum() and rep[-1:].isalnum() else ""
        if rep:
            text = f"{left}{gap_l}{rep}{gap_r}{right}"
        else:  # a deletion: one space between the neighbours, none before punctuation
            right = right.lstrip()
            text = left.rstrip() + (" " if right[:1].isalnum() else "") + right
        pos = i + len(_words(rep))
    return " ".join(text.split()) or query




# --------------------------------------------------------------------------- the rewrite tagger
#
# The decoder of a small decomposer trained for minutes learns WHERE a follow-up needs an edit
# ("it", "its", "them") but not to copy the referent out of the history. A token tagger over
# the encoder's states does that part: each source token gets REF (a word of the referent, in
# the history) or TGT (a query word the referent replaces) or O, by a softmax-regression head
# fit after training (Decomposer.fit_rewrite_head). tag_rewrite turns the tags into a rewrite.

TAGS = ("O", "REF", "TGT")


def query_start(source: str) -> int:
    """Character offset of the query in a ``rewrite:`` source (after the last `` || ``)."""
    cut = source.rfind(" || ")
    return cut + 4 if cut >= 0 else source.find(":") + 1


def tag_labels(source: str, offsets: Sequence[tuple[int, int]], query: str, rewrite: str) -> list[int]:
    """Per source token: 1 (REF) for history words the gold rewrite brings in, 2 (TGT) for
    query words it drops, else 0; from the ops of :func:`edit_target`. A token is judged by
    the whole word it is part of, so every word piece of a word split by the tokenizer
    (``Var`` ``##ok`` ``##pel``) takes the word's tag: names, the referents that matter most,
    are the words a WordPiece vocabulary splits."""
    start = query_start(source)
    out = [0] * len(offsets)
    words = _words(source)
    ends = [m.end() for m in words]

    def word_of(a: int, b: int) -> str:  # the word holding the token's first character
        k = bisect.bisect_right(ends, a)
        return words[k].group(0).lower() if k < len(words) and words[k].start() <= a else source[a:b].lower()

    token_words = [word_of(a, b) if a != b else "" for a, b in offsets]
    for old, new in parse_edits(edit_target(query, rewrite)):
        old_w = set(old)
        new_w = {w.lower() for w in _WORD.findall(new)}
        for i, ((a, b), w) in enumerate(zip(offsets, token_words, strict=True)):
            if a == b:
                continue
            if a < start and w in new_w and w not in old_w:
                out[i] = 1
            elif a >= start and w in old_w and w not in new_w:
                out[i] = 2
    return out


_JOINERS = {"-", "/", ".", "_", "&", "+"}  # characters that join a compound's parts


def _run(scores: Sequence[float], seed: int, ok: Sequence[bool], low: float,
         alnum: Sequence[bool]) -> tuple[int, int]:
    """The run around ``seed`` over neighbours scoring ``low`` or more, without punctuation
    at its ends."""
    lo = hi = seed
    while lo - 1 >= 0 and ok[lo - 1] and scores[lo - 1] >= low:
        lo -= 1
    while hi + 1 < len(scores) and ok[hi + 1] and scores[hi + 1] >= low:
        hi += 1
    while lo < seed and not alnum[lo]:
        lo += 1
    while hi > seed and not alnum[hi]:
        hi -= 1
    return lo, hi


def tag_rewrite(query: str, history: Sequence[str], source: str, offsets: Sequence[tuple[int, int]],
                probs: Sequence[Sequence[float]], threshold: float, extend: float, max_drop: float = 1.0,
                references_only: bool = False) -> str:
    """The rewrite that a tagging says: the best REF run of the history replaces the best TGT
    run of the query (or, without one, is added at the query's end); the query when no
    history token reaches ``threshold``. Runs grow over neighbours at ``extend`` or more.

    Two checks keep the query when the tagging says something a rewrite cannot mean: a
    rewrite that brings in no word the query lacks ("downtown Chattanooga" + "Chattanooga")
    is no rewrite, and an edit replaces a reference, not the question: one that drops more
    than ``max_drop`` of the query's words (at least one may always go) is refused ("What
    happened next?" -> "the Watergate scandal?"). With ``references_only`` the query run an
    edit replaces must hold a word that refers back (:data:`~searchsmith.models.text.REFERENCE_WORDS`:
    "it", "their", "the second"): an edit of other words ("knowing multiple languages" ->
    "knowing multiple Norse") is refused too.

    Args:
        query, history: the follow-up and the conversation's texts (for casing).
        source: the ``rewrite:`` model input the tagging is of.
        offsets: (start, end) characters of each source token ((0, 0) for special tokens).
        probs: (tokens, 3) probabilities of O, REF, TGT.
        threshold: least REF (TGT) probability of a run's best token.
        extend: least probability of the tokens a run grows over.
        max_drop: the largest share of the query's words an edit may drop, in (0, 1].
        references_only: replace only a run that holds a reference word (else keep the query).
    """
    start = query_start(source)
    words = [a != b and source[a:b].strip() not in ("|", "") for a, b in offsets]
    in_hist = [w and a < start for w, (a, _) in zip(words, offsets, strict=True)]
    in_query = [w and a >= start for w, (a, _) in zip(words, offsets, strict=True)]
    alnum = [any(ch.isalnum() for ch in source[a:b]) for a, b in offsets]
    ref = [float(p[1]) if h and w else 0.0 for p, h, w in zip(probs, in_hist, alnum, strict=True)]
    tgt = [float(p[2]) if q and w else 0.0 for p, q, w in zip(probs, in_query, alnum, strict=True)]
    if not ref or max(ref) < threshold:
        return query
    lo, hi = _run(ref, max(range(len(ref)), key=ref.__getitem__), in_hist, extend, alnum)
    # whole words: a run may not start or end inside one, nor inside a compound joined without
    # spaces ("Spider-Man", "lumen/evict.py")
    def joined(a: int, b: int) -> bool:  # tokens a < b touch, both in the history
        return in_hist[a] and in_hist[b] and offsets[a][1] == offsets[b][0]

    def glue(k: int, step: int) -> int:  # tokens to take beyond k in direction step (0: none)
        n = k + step
        if not 0 <= n < len(offsets) or not joined(min(k, n), max(k, n)):
            return 0
        if alnum[n]:
            return 1
        m = n + step
        ok = source[offsets[n][0]:offsets[n][1]] in _JOINERS and 0 <= m < len(offsets) and alnum[m]
        return 2 if ok and joined(min(n, m), max(n, m)) else 0

    while (g := glue(lo, -1)):
        lo -= g
    while (g := glue(hi, 1)):
        hi += g
    new = source[offsets[lo][0]:offsets[hi][1]]
    if tgt and max(tgt) >= threshold:
        tlo, thi = _run(tgt, max(range(len(tgt)), key=tgt.__getitem__), in_query, extend, alnum)
        old = source[offsets[tlo][0]:offsets[thi][1]]
        if references_only and not _refers(old):
            return query
        out = apply_edits(query, f"{old} {ARROW} {new}", history)
        if out != query:
            return out if _adds(query, out) and _dropped(query, out) <= _drop_limit(query, max_drop) else query
    body = query.rstrip()
    end = body[-1] if body and body[-1] in "?.!" else ""
    out = apply_edits(f"{body[:len(body) - len(end)]} {new}{end}", "", [*history, query])
    return out if _adds(query, out) else query


def _refers(text: str) -> bool:
    """Whether ``text`` holds a word that refers back to the conversation."""
    return any(w in REFERENCE_WORDS for w in _alnum_words(text))


def _alnum_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.isalnum()]


def _adds(query: str, rewrite: str) -> bool:
    """Whether ``rewrite`` holds a word that ``query`` does not."""
    have = set(_alnum_words(query))
    return any(w not in have for w in _alnum_words(rewrite))


def _dropped(query: str, rewrite: str) -> int:
    """How many of the query's words the rewrite no longer has, in order."""
    q, r = _alnum_words(query), _alnum_words(rewrite)
    kept = sum(b.size for b in difflib.SequenceMatcher(None, q, r, autojunk=False).get_matching_blocks())
    return len(q) - kept


def _drop_limit(query: str, max_drop: float) -> float:
    return max(1.0, max_drop * len(_alnum_words(query)))


# What a tagged rewrite appends (QuReTeC's term selection, Voskarides et al. 2020, with the REF
# probabilities of the same head): ``none``, the edit alone; ``terms``, the query with the
# history words the head scores REF at ``term_threshold`` or more appended in parentheses (the
# heuristic rewrite's form, so the decomposition stage splits them off); ``fused``, the edit
# rewrite with those of them it does not already hold appended.
REWRITE_EXPANSIONS = ("none", "terms", "fused")


def _history_words(source: str, offsets: Sequence[tuple[int, int]], start: int) -> list[tuple[str, list[int]]]:
    """The history's words of a ``rewrite:`` source: runs of tokens with no space between them
    (``lumen/evict.py`` is one), trimmed of punctuation at their ends, with their token
    indices; the task prefix and the turn separators are not words."""
    first = source.find(":") + 1 if source.startswith("rewrite:") else 0
    out: list[tuple[str, list[int]]] = []
    run: list[int] = []

    def close() -> None:
        if run:
            a, b = offsets[run[0]][0], offsets[run[-1]][1]
            text = source[a:b]
            core = text.strip("|.,;:!?\"'()[]{}")
            if core and any(ch.isalnum() for ch in core):
                out.append((core, list(run)))
            run.clear()

    for k, (a, b) in enumerate(offsets):
        if a == b or a >= start or a < first:
            close()
            continue
        if run and offsets[run[-1]][1] != a:
            close()
        run.append(k)
    close()
    return out


def tag_terms(source: str, offsets: Sequence[tuple[int, int]], probs: Sequence[Sequence[float]],
              threshold: float, exclude: Sequence[str] = (), max_terms: int = 8) -> list[str]:
    """The history words a tagging marks as the rewrite's (QuReTeC-style term selection): each
    word's score is the best REF probability of its tokens; the words at ``threshold`` or
    more, best first (ties: the earlier), at most ``max_terms``, leaving out function words,
    one-letter words and the words of ``exclude`` (compared lower-cased)."""
    skip = {w.lower() for text in exclude for w in _WORD.findall(text)}
    best: dict[str, tuple[float, int, str]] = {}
    for pos, (word, toks) in enumerate(_history_words(source, offsets, query_start(source))):
        low = word.lower()
        if len(word) < 2 or low in QUERY_STOP_WORDS or low in skip:
            continue
        score = max(float(probs[k][1]) for k in toks)
        if score >= threshold and (low not in best or score > best[low][0]):
            best[low] = (score, best.get(low, (0.0, pos, word))[1], word)
    ranked = sorted(best.values(), key=lambda t: (-t[0], t[1]))
    return [word for _, _, word in ranked[:max_terms]]


def with_terms(text: str, terms: Sequence[str]) -> str:
    """``text`` with ``terms`` appended in parentheses (``text`` itself when there are none)."""
    return f"{text} ({' '.join(terms)})" if terms else text


def head_rewrite(query: str, history: Sequence[str], source: str, offsets: Sequence[tuple[int, int]],
                 probs: Sequence[Sequence[float]], head: dict[str, Any]) -> str:
    """The rewrite a checked rewrite head gives (``Decomposer.check_rewrite_head``): the edit of
    :func:`tag_rewrite` and, by the head's ``expand`` (:data:`REWRITE_EXPANSIONS`), the terms
    of :func:`tag_terms` appended to the query or to the edit."""
    edit = tag_rewrite(query, history, source, offsets, probs, head["threshold"], head["extend"],
                       head.get("max_drop", 1.0), head.get("references_only", False))
    expand = head.get("expand", "none")
    if expand == "none":
        return edit
    base = query if expand == "terms" else edit
    return with_terms(base, tag_terms(source, offsets, probs, head["term_threshold"], [base], head["max_terms"]))


__all__ = ["ARROW", "OP_SEP", "REWRITE_EXPANSIONS", "REWRITE_TARGETS", "TAGS", "apply_edits", "edit_target",
           "head_rewrite", "parse_edits", "query_start", "tag_labels", "tag_rewrite", "tag_terms", "with_terms"]
