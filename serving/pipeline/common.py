"""Helpers shared by the stages: cached embedding, sentences, content words, bundle loading."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from searchsmith.models.roles import Embedder, ModelOfTask
from searchsmith.models.text import QUERY_STOP_WORDS, sentence_texts
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


def _stem(word: str) -> str:
    # crude suffix folding so that "listens" meets "listen" and "releases" meets "released"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix) and word.isalpha():
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, suffix-folded words of ``text`` that are not stop words (identifiers whole)."""
    words = {w.lower().strip(".") for w in _WORD.findall(text)} - QUERY_STOP_WORDS - {""}
    return {_stem(w) for w in words}


def strip_markers(text: str) -> str:
    """``text`` without ``[n]`` citation markers (a generator may invent its own)."""
    return _MARKER.sub("", text)


def load_optional_bundle(path: str | None, task: str, device: str, backend: str,
                         threads: int | None) -> ModelOfTask | None:
    """``models.runtime.load_bundle(path)`` when a path is configured, checking its task."""
    if not path:
        return None
    from searchsmith.models.errors import ConfigError
    from searchsmith.models.runtime import load_bundle

    bundle = load_bundle(path, device=device, backend=backend, threads=threads)
    if getattr(bundle, "task", task) != task:
        raise ConfigError(f"bundles: {path} is a {bundle.task!r} bundle, expected a {task!r} bundle "
                          f"(check which bundle path is under which key)")
    return bundle
