"""The reader: extractive question answering (a short answer span, or yes / no / no answer).

A BERT-family encoder reads ``[CLS] question [SEP] context [SEP]`` windows; three heads
sit on its states:

* ``start`` and ``end``: one logit per token (a linear layer on every state): the answer
  span is the (s, e) pair of context tokens, ``s <= e < s + max_answer_tokens``, with the
  largest ``start[s] + end[e]``;
* ``kind``: four logits on the ``[CLS]`` state over :data:`ANSWER_KINDS` (``span``,
  ``yes``, ``no``, ``none``): HotpotQA's comparison questions are answered yes or no, and a
  window without the answer must say so.

A context longer than one window is read in windows of ``max_length`` tokens that overlap
by ``stride`` tokens (:func:`encode_windows`): nothing is cut without being read. A question
longer than ``max_question_tokens`` is cut to it and the cut is reported.

Decoding (:func:`decode`) picks, over all windows of a question, the window most likely to
hold the answer (largest ``1 - P(none)``); its answer is ``yes`` / ``no`` when the kind head
says so, else its best span. The answer's score is that window's ``1 - P(none)``: the
pipeline says it does not know below ``generation.reader.min_score``.

The graph (ONNX or torch) only maps token ids to the three logit tensors; windowing, the
context mask and decoding are here, in numpy, shared by the training evaluation, the runtime
bundle and the exporter's parity check.

Saved form: a plain ``transformers`` encoder folder plus ``reader_head.json`` (the heads'
weights) and ``reader.json`` (lengths and decoding settings). This module imports no torch
(a served ONNX reader needs none); the torch model is :mod:`searchsmith.models.reader_model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from searchsmith.models.errors import ValidationError

HEAD_FILE = "reader_head.json"
META_FILE = "reader.json"
ANSWER_KINDS = ("span", "yes", "no", "none")
NONE = ANSWER_KINDS.index("none")
PASSAGE_SEPARATOR = "\n\n"
SELECT = ("answerable", "span")


@dataclass(frozen=True)
class ReaderSettings:
    """How questions and contexts are windowed and answers decoded (``reader.json``).

    Attributes:
        max_length: tokens per window (question + context + special tokens).
        stride: tokens two consecutive windows of one context share.
        max_question_tokens: a longer question is cut to this many tokens (reported).
        max_answer_tokens: longest answer span, in tokens.
        select: how the answer's window is chosen among a question's windows: ``answerable``
            (the window whose answer-kind head gives the least P(none); for readers trained
            with each window's span scores normalised on its own) or ``span`` (the best
            start + end score over all windows; for readers trained with shared
            normalisation, whose scores compare across windows). Either way the answer's
            score is the question's best 1 - P(none), and a yes / no answer comes from that
            window's kind head.
    """

    max_length: int = 256
    stride: int = 96
    max_question_tokens: int = 64
    max_answer_tokens: int = 24
    select: str = "answerable"

    def __post_init__(self) -> None:
        if self.max_length < 32:
            raise ValueError(f"reader max_length must be >= 32 tokens, got {self.max_length}")
        if not 0 <= self.stride < self.max_length // 2:
            raise ValueError(f"reader stride must be in [0, max_length/2) = [0, {self.max_length // 2}), "
                             f"got {self.stride}")
        if not 4 <= self.max_question_tokens <= self.max_length // 2:
            raise ValueError(f"reader max_question_tokens must be in [4, max_length/2], got {self.max_question_tokens}")
        if self.max_answer_tokens < 1:
            raise ValueError(f"reader max_answer_tokens must be >= 1, got {self.max_answer_tokens}")
        if self.select not in SELECT:
            raise ValueError(f"reader select must be one of {list(SELECT)}, got {self.select!r}")

    def to_json(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "stride": self.stride,
                "max_question_tokens": self.max_question_tokens, "max_answer_tokens": self.max_answer_tokens,
                "select": self.select}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReaderSettings:
        """From ``reader.json`` (a bundle written before ``select`` existed selects ``answerable``)."""
        fields = {k: int(data[k]) for k in ("max_length", "stride", "max_question_tokens", "max_answer_tokens")
                  if k in data}
        return cls(**fields, select=str(data.get("select", "answerable")))


# ----------------------------------------------------------------------------- windows


class Window(NamedTuple):
    """One tokenized window of one question's context.

    ``offsets[t]`` is the (start, end) character range in the context of token t, or None
    for the question's and the special tokens (never an answer).
    """

    item: int
    input_ids: list[int]
    token_type_ids: list[int] | None
    offsets: list[tuple[int, int] | None]


class Windows(NamedTuple):
    """The windows of a batch of (question, context) items and what was cut."""

    windows: list[Window]
    questions_cut: list[int]  # items whose question was cut to max_question_tokens

    @property
    def tokens(self) -> int:
        """The tokens the model reads: every window's (a context token in two windows, twice)."""
        return sum(len(w.input_ids) for w in self.windows)


def encode_windows(tokenizer: Any, questions: Sequence[str], contexts: Sequence[str],
                   settings: ReaderSettings) -> Windows:
    """Overlapping windows of every (question, context) item; every context token is read.

    Args:
        tokenizer: a fast tokenizer (offset mapping and overflow with stride).
        questions, contexts: one per item.
    """
    if len(questions) != len(contexts):
        raise ValueError(f"encode_windows: {len(questions)} questions but {len(contexts)} contexts")
    qs, cut = [], []
    for i, q in enumerate(questions):
        ids = tokenizer(q, add_special_tokens=False)["input_ids"]
        if len(ids) > settings.max_question_tokens:
            q = tokenizer.decode(ids[: settings.max_question_tokens])
            cut.append(i)
        qs.append(q)
    if not qs:
        return Windows([], cut)
    enc = tokenizer(qs, [c if c.strip() else "." for c in contexts], truncation="only_second",
                    max_length=settings.max_length, stride=settings.stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding=False)
    out = []
    types = enc.get("token_type_ids")
    for w, item in enumerate(enc["overflow_to_sample_mapping"]):
        seq = enc.sequence_ids(w)
        offsets = [tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][w], seq, strict=True)]
        out.append(Window(int(item), list(enc["input_ids"][w]), list(types[w]) if types is not None else None,
                          offsets))
    return Windows(out, cut)


def pad_windows(windows: Sequence[Window], pad_id: int) -> dict[str, np.ndarray]:
    """int64 (b, T) ``input_ids``, ``attention_mask`` and ``token_type_ids`` of windows."""
    width = max(len(w.input_ids) for w in windows)
    ids = np.full((len(windows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(windows), width), dtype=np.int64)
    types = np.zeros((len(windows), width), dtype=np.int64)
    for r, w in enumerate(windows):
        n = len(w.input_ids)
        ids[r, :n] = w.input_ids
        mask[r, :n] = 1
        if w.token_type_ids is not None:
            types[r, :n] = w.token_type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# ----------------------------------------------------------------------------- decoding


class ReadAnswer(NamedTuple):
    """The reader's answer to one question.

    Attributes:
        text: the short answer ("yes", "no", a span of the context; "" when none).
        kind: one of :data:`ANSWER_KINDS`.
        score: ``1 - P(none)`` of the window the answer comes from, in [0, 1].
        start, end: the span's character range in the context (-1, -1 for yes / no / none).
        window: the index of the window the answer comes from (-1 when there is none).
    """

    text: str
    kind: str
    score: float
    start: int = -1
    end: int = -1
    window: int = -1


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def best_span(start: np.ndarray, end: np.ndarray, context: np.ndarray, max_tokens: int) -> tuple[int, int, float]:
    """``(s, e, start[s] + end[e])`` over context tokens with ``s <= e < s + max_tokens``.

    Args:
        start, end: (T,) logits of one window.
        context: (T,) bool, the window's context tokens.
    """
    idx = np.flatnonzero(context)
    if idx.size == 0:
        return -1, -1, float("-inf")
    s, e = start[idx], end[idx]
    scores = s[:, None] + e[None, :]  # (C, C)
    offs = np.arange(idx.size)
    gap = offs[None, :] - offs[:, None]
    scores = np.where((gap >= 0) & (gap < max_tokens), scores, -np.inf)
    flat = int(np.argmax(scores))
    i, j = divmod(flat, idx.size)
    return int(idx[i]), int(idx[j]), float(scores[i, j])


def decode(windows: Sequence[Window], contexts: Sequence[str], start: np.ndarray, end: np.ndarray,
           kind: np.ndarray, max_answer_tokens: int, select: str = "answerable") -> list[ReadAnswer]:
    """One :class:`ReadAnswer` per item from the windows' logits.

    Args:
        windows: the windows (:func:`encode_windows`), in the logits' row order.
        contexts: the items' contexts (the answer text is cut from them).
        start, end: (W, T) logits, zero-padded past each window's length.
        kind: (W, 4) logits.
        select: ``answerable`` or ``span`` (:class:`ReaderSettings`).
    """
    if select not in SELECT:
        raise ValueError(f"decode: select must be one of {list(SELECT)}, got {select!r}")
    probs = _softmax(kind.astype(np.float64))
    best: dict[int, tuple[float, int]] = {}  # item -> (1 - P(none), window): its most answerable window
    spans: dict[int, tuple[float, int, int, int]] = {}  # item -> (span score, window, s, e): its best span
    for w, win in enumerate(windows):
        p = 1.0 - float(probs[w, NONE])
        if win.item not in best or p > best[win.item][0]:
            best[win.item] = (p, w)
        if select == "span":
            n = len(win.input_ids)
            mask = np.array([o is not None for o in win.offsets], dtype=bool)
            s, e, score = best_span(start[w, :n], end[w, :n], mask, max_answer_tokens)
            if s >= 0 and (win.item not in spans or score > spans[win.item][0]):
                spans[win.item] = (score, w, s, e)
    out = []
    for item, ctx in enumerate(contexts):
        if item not in best or not ctx.strip():  # a blank context was read as "." (nothing to answer from)
            out.append(ReadAnswer("", "none", 0.0))
            continue
        p, w = best[item]
        k = ANSWER_KINDS[int(np.argmax(probs[w, :NONE]))]
        if k != "span":
            out.append(ReadAnswer(k, k, p, window=w))
            continue
        if select == "span":
            if item not in spans:
                out.append(ReadAnswer("", "none", p, window=w))
                continue
            _, w, s, e = spans[item]
        else:
            win = windows[w]
            n = len(win.input_ids)
            mask = np.array([o is not None for o in win.offsets], dtype=bool)
            s, e, _ = best_span(start[w, :n], end[w, :n], mask, max_answer_tokens)
            if s < 0:
                out.append(ReadAnswer("", "none", p, window=w))
                continue
        win = windows[w]
        cs, ce = win.offsets[s][0], win.offsets[e][1]
        out.append(ReadAnswer(ctx[cs:ce].strip(), "span", p, cs, ce, w))
    return out


LogitsFn = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray, np.ndarray]]


def read(logits_fn: LogitsFn, tokenizer: Any, questions: Sequence[str], contexts: Sequence[str],
         settings: ReaderSettings, batch_size: int = 16) -> tuple[list[ReadAnswer], Windows]:
    """Answer each (question, context) item: window, run ``logits_fn`` per batch, decode.

    Args:
        logits_fn: padded feeds (:func:`pad_windows`) -> (start, end, kind) logits.
    """
    wins = encode_windows(tokenizer, questions, contexts, settings)
    if not wins.windows:
        return [ReadAnswer("", "none", 0.0) for _ in contexts], wins
    pad = tokenizer.pad_token_id or 0
    # sort by length so batches pad little; restore the window order for decoding
    order = sorted(range(len(wins.windows)), key=lambda i: len(wins.windows[i].input_ids))
    width = max(len(w.input_ids) for w in wins.windows)
    start = np.zeros((len(wins.windows), width), np.float32)
    end = np.zeros_like(start)
    kind = np.zeros((len(wins.windows), len(ANSWER_KINDS)), np.float32)
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        s, e, k = logits_fn(pad_windows([wins.windows[i] for i in idx], pad))
        t = s.shape[1]
        start[idx, :t], end[idx, :t], kind[idx] = s, e, k
    return decode(wins.windows, contexts, start, end, kind, settings.max_answer_tokens, settings.select), wins


# ----------------------------------------------------------------------------- passages


def passage_piece(title: str, text: str) -> str:
    """How a passage reads in a context: ``"title. text"`` (whitespace collapsed; the title
    left out when empty or when the text starts with it)."""
    body = " ".join(str(text).split())
    title = " ".join(str(title or "").split())
    return f"{title}. {body}" if title and not body.startswith(title) else body


# A passage as the reader takes it: a string, a ``(title, text)`` pair or ``{"title", "text"}``.
PassageLike = str | tuple[str, str] | Mapping[str, str]


def as_passage(p: object, where: str) -> tuple[str, str]:
    """``(title, text)`` from a string, a ``(title, text)`` pair or a ``{"title", "text"}`` dict."""
    if isinstance(p, str):
        return "", p
    if isinstance(p, dict) and isinstance(p.get("text"), str):
        return str(p.get("title") or ""), p["text"]
    if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p):
        return p[0], p[1]
    raise ValidationError(f"{where}: {p!r:.60} is not a passage; give a string, a (title, text) pair or "
                          "a {'title', 'text'} dict")


def join_passages(passages: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """One context from ``(title, text)`` passages and each passage's character range in it.

    A passage reads as :func:`passage_piece`; passages are separated by a blank line.
    """
    parts, ranges, pos = [], [], 0
    for title, text in passages:
        piece = passage_piece(title, text)
        if parts:
            pos += len(PASSAGE_SEPARATOR)
        parts.append(piece)
        ranges.append((pos, pos + len(piece)))
        pos += len(piece)
    return PASSAGE_SEPARATOR.join(parts), ranges


class PassageAnswer(NamedTuple):
    """The reader's answer over a list of passages.

    Attributes:
        text, kind, score: as :class:`ReadAnswer`.
        passage: index of the passage the span comes from (-1 for yes / no / none: the
            window's passages support it, see ``window_passages``).
        start, end: the span's character range in that passage's :func:`passage_piece`.
        window_passages: indices of the passages the answering window read.
    """

    text: str
    kind: str
    score: float
    passage: int = -1
    start: int = -1
    end: int = -1
    window_passages: tuple[int, ...] = ()


def locate(answer: ReadAnswer, ranges: Sequence[tuple[int, int]], window: Window | None) -> PassageAnswer:
    """``answer`` (over a joined context) located in its passage."""
    seen: tuple[int, ...] = ()
    if window is not None:
        chars = [o for o in window.offsets if o is not None]
        if chars:
            lo, hi = chars[0][0], chars[-1][1]
            seen = tuple(i for i, (a, b) in enumerate(ranges) if a < hi and lo < b)
    if answer.kind != "span" or answer.start < 0:
        return PassageAnswer(answer.text, answer.kind, answer.score, window_passages=seen)
    i = passage_of(ranges, answer.start)
    base = ranges[i][0] if i >= 0 else 0
    return PassageAnswer(answer.text, answer.kind, answer.score, i, answer.start - base, answer.end - base, seen)


def read_passages(logits_fn: LogitsFn, tokenizer: Any, questions: Sequence[str],
                  passages: Sequence[Sequence[tuple[str, str]]], settings: ReaderSettings,
                  batch_size: int = 16) -> tuple[list[PassageAnswer], Windows]:
    """:func:`read` over each question's passages (joined in the given order), located per passage."""
    joined = [join_passages(ps) for ps in passages]
    answers, wins = read(logits_fn, tokenizer, questions, [c for c, _ in joined], settings, batch_size)
    out = []
    for (_, ranges), a in zip(joined, answers, strict=True):
        out.append(locate(a, ranges, wins.windows[a.window] if a.window >= 0 else None))
    return out, wins


def passage_of(ranges: Sequence[tuple[int, int]], char: int) -> int:
    """Index of the passage whose range holds character ``char`` (-1 when none)."""
    for i, (a, b) in enumerate(ranges):
        if a <= char < b:
            return i
    return -1


__all__ = [
    "ANSWER_KINDS",
    "PassageAnswer",
    "PassageLike",
    "as_passage",
    "locate",
    "passage_piece",
    "read_passages",
    "HEAD_FILE",
    "META_FILE",
    "ReadAnswer",
    "ReaderSettings",
    "Window",
    "Windows",
    "best_span",
    "decode",
    "encode_windows",
    "join_passages",
    "pad_windows",
    "passage_of",
    "read",
]
