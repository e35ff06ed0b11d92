"""Helpers shared by the stages: cached embedding, sentences, content words, bundle loading."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from searchsmith.models.roles import Embedder, ModelOfTask
from searchsmith.models.text import QUERY_STOP_WORDS, fold, sentence_texts, split_sentences
from searchsmith.serving.pipeline.state import PipelineState

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*[A-Za-z0-9]|[A-Za-z0-9]")
_MARKER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def embed(state: PipelineState, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """(N, D) unit vectors of ``texts``; each distinct text is embedded once per answer."""
    missing = [t for t in dict.fromkeys(texts) if t not in state.embeddings]
    if missing:
        vecs = embedder.encode(missing)
        for t, v in zip(missing, vecs):
            state.embeddings[t] = v
    if not texts:
        return np.zeros((0, int(getattr(embedder, "dim", 0))), dtype=np.float32)
    return np.stack([state.embeddings[t] for t in texts]).astype(np.float32)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (the chunker's rule, so they agree with the index)."""
    return sentence_texts(text)


def _indented(text: str, start: int) -> bool:
    """Whether the sentence at ``start`` opens an indented block (four spaces or a tab before
    it on its line: Markdown's code block), as a config page's settings do."""
    line = text.rfind("\n", 0, start) + 1
    indent = text[line:start]
    return line > 0 and not indent.strip() and (indent.startswith("    ") or indent.startswith("\t"))


def introduced(text: str, spans: Sequence[tuple[int, int]], i: int) -> str | None:
    """Sentence ``i`` of ``text`` (``spans``: :func:`split_sentences`) as an answer quotes it,
    whitespace collapsed: a sentence that ends with a colon introduces what follows it ("Set it
    in lumen.yaml:", then an indented block that the sentence rule splits off at the blank
    line), and is quoted with it, colon after colon (a list after it whole, item after item); None when nothing follows the colon in
    ``text`` (quoted alone it promises what the answer does not give).

    An indented block is quoted as code, in backticks ("Set it in lumen.yaml: `eviction:
    policy: lru`"): its literals are what the sentence says, and citation takes a backticked
    span as one entity, so a passage whose block differs ("max_memory_mb: 1024") cannot be
    cited for it."""
    parts: list[str] = []
    code: list[str] = []
    j, last = i, ""
    while True:
        last = " ".join(text[spans[j][0]:spans[j][1]].split())
        if _indented(text, spans[j][0]):
            code.append(last)
        else:
            if code:
                parts.append(f"`{' '.join(code)}`")
                code = []
            parts.append(last)
        if j + 1 >= len(spans):
            break
        # past its colon, a list is quoted whole ("Options: - lru - lfu"), each item a sentence of its own too
        listed = j > i and _BULLET.match(last) and _BULLET.match(text[spans[j + 1][0]:spans[j + 1][1]])
        if not last.endswith(":") and not listed:
            break
        j += 1
    if code:
        parts.append(f"`{' '.join(code)}`")
    return None if last.endswith(":") else " ".join(parts)


def quotable_sentences(text: str) -> list[tuple[str, str]]:
    """The sentences of ``text`` an extractive answer may quote, whitespace collapsed, each as
    ``(sentence, quoted)``: what it is scored by and what the answer quotes (:func:`introduced`).

    A sentence ending with a colon is scored by itself: a block of settings or code repeats the
    topic's words, and the history terms a rewrite appends would rank it first for any
    question on the topic. A question is not quoted: it answers nothing (an FAQ page opens
    with its question, and "When did the Lumen Cloud outage happen?" was answered "... What
    was your uptime in 2024?").
    """
    spans = split_sentences(text)
    out = []
    for i, (a, b) in enumerate(spans):
        quoted = introduced(text, spans, i)
        if quoted is not None and not quoted.rstrip(" \"')]").endswith("?"):
            # a list item without its bullet ("- Maximum message size: 8 MiB")
            out.append((_BULLET.sub("", " ".join(text[a:b].split())), _BULLET.sub("", quoted)))
    return out


_BULLET = re.compile(r"^[-*•]\s+")
_COMPOUND = re.compile(r"\w[./]\w")  # a dotted or slashed identifier: "scrape.interval_s"
_PARTS = re.compile(r"[./]")
_LETTER = re.compile(r"[a-z]")


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` that are not stop words, their inflections folded
    (``models.text.fold``): identifiers whole and, for a dotted or slashed one, its parts too (``scrape.interval_s`` also meets the block
    ``scrape: interval_s: 15`` that sets it, and ``lumen/evict.py`` meets "evict")."""
    words = {w.lower().strip(".") for w in _WORD.findall(text)}
    words |= {part for w in words if _COMPOUND.search(w) and _LETTER.search(w)
              for part in _PARTS.split(w)}  # not a version's digits: "4.0" stays whole
    return {fold(w) for w in words - QUERY_STOP_WORDS - {""}}


def strip_markers(text: str) -> str:
    """``text`` without ``[n]`` citation markers (a generator may invent its own)."""
    return _MARKER.sub("", text)


def load_optional_bundle(path: str | None, task: str, device: str, backend: str,
                         threads: int | None, *, key: str = "bundles") -> ModelOfTask | None:
    """``models.runtime.load_bundle(path)`` when a path is configured, checking its task;
    ``key`` (``bundles.reranker``) is the setting that names it, in every error."""
    if not path:
        return None
    from searchsmith.models.errors import BundleError, ConfigError
    from searchsmith.models.runtime import load_bundle

    try:
        bundle = load_bundle(path, device=device, backend=backend, threads=threads)
    except BundleError as exc:
        raise BundleError(f"{key}: {exc}") from None
    if getattr(bundle, "task", task) != task:
        article = "an" if str(bundle.task)[:1] in "aeiou" else "a"
        raise ConfigError(f"{key}: {path} is {article} {bundle.task!r} bundle, expected a {task!r} bundle "
                          f"(check which bundle path is under which key)")
    return bundle
