"""The reranker's scores mixed with the retrieval cosine, at a share measured in training.

A cross-encoder fine-tuned on a few hundred queries orders the passages of its own datasets
better than the bi-encoder that retrieved them, and can order those of a dataset it never saw
worse (the default reranker: nDCG@10 0.831 on SciFact left out of training, against 0.840 for
the bi-encoder's order). Mixing its scores with the retrieval cosine keeps what the bi-encoder
knows: within one query's candidates, both score lists are standardised (mean 0, standard
deviation 1; a list with no spread counts as all zeros) and added::

    score = cross_weight * z(reranker logits) + (1 - cross_weight) * z(cosines)

``cross_weight`` 1 is the reranker alone, 0 the retrieval order. The reranker recipe chooses it
among ``model.cross_weights`` on calibration queries it does not train on
(``data.calibration_ratio``) and records it; the export writes it into the bundle's manifest
(``"retrieval_mix": {"cross_weight": w, "embedder": ...}``) and the pipeline's rerank stage
mixes with the scores its retrieval returned (the cosines, plus their BM25 share where the
pipeline searches hybrid: ``retrieval.lexical_weight``).

Standard library and numpy only (serving imports it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from searchsmith.models.errors import BundleError, ValidationError


def standardise(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``(x - mean) / std`` of one list (float64); zeros when the list has no spread."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return x
    std = float(x.std())
    return (x - x.mean()) / std if std > 1e-12 else np.zeros_like(x)


def mix_scores(logits: Sequence[float] | np.ndarray, cosines: Sequence[float] | np.ndarray,
               cross_weight: float) -> np.ndarray:
    """One query's mixed scores (module docstring); float64, in input order.

    Raises:
        ValidationError: lists of different lengths, a non-finite value, a weight outside [0, 1].
    """
    lg = np.asarray(logits, dtype=np.float64).reshape(-1)
    cs = np.asarray(cosines, dtype=np.float64).reshape(-1)
    if lg.shape != cs.shape:
        raise ValidationError(f"retrieval mix: {lg.size} reranker scores for {cs.size} cosines; pass one cosine "
                              "per passage")
    if not (np.isfinite(lg).all() and np.isfinite(cs).all()):
        raise ValidationError("retrieval mix: a reranker score or a cosine is not a finite number")
    if not (isinstance(cross_weight, (int, float)) and 0.0 <= cross_weight <= 1.0):
        raise ValidationError(f"retrieval mix: cross_weight must be in [0, 1], got {cross_weight!r}")
    return cross_weight * standardise(lg) + (1.0 - cross_weight) * standardise(cs)


@dataclass(frozen=True)
class RetrievalMix:
    """A bundle's measured share of the reranker (``manifest["retrieval_mix"]``).

    Attributes:
        cross_weight: share of the reranker's standardised scores, in [0, 1].
        embedder: the bi-encoder whose cosines the share was measured with (``default``:
            all-MiniLM-L6-v2, the pipeline's default embedder).
    """

    cross_weight: float
    embedder: str = "default"

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RetrievalMix | None:
        """None for a manifest without one; BundleError naming the key when malformed."""
        if data is None:
            return None
        if not isinstance(data, Mapping) or set(data) - {"cross_weight", "embedder"} or "cross_weight" not in data:
            raise BundleError(f"retrieval_mix: expected {{'cross_weight', 'embedder'}}, got {data!r}; re-export "
                              "the bundle")
        w = data["cross_weight"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or not 0.0 <= w <= 1.0:
            raise BundleError(f"retrieval_mix.cross_weight must be a number in [0, 1], got {w!r}; re-export the bundle")
        emb = data.get("embedder", "default")
        if not isinstance(emb, str) or not emb:
            raise BundleError(f"retrieval_mix.embedder must be a non-empty string, got {emb!r}")
        return cls(float(w), emb)

    def to_json(self) -> dict[str, Any]:
        return {"cross_weight": self.cross_weight, "embedder": self.embedder}

    def apply(self, logits: Sequence[float] | np.ndarray, cosines: Sequence[float] | np.ndarray) -> np.ndarray:
        """:func:`mix_scores` at this share."""
        return mix_scores(logits, cosines, self.cross_weight)


def mixed_score_fn(score_fn: Any, cosine_fn: Any, cross_weight: float) -> Any:
    """A flat pair scorer (``pairs -> scores``) that mixes ``score_fn``'s scores with
    ``cosine_fn``'s per query (pairs grouped by their query text), as the pipeline does."""
    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        logits = np.asarray(score_fn(pairs), dtype=np.float64).reshape(-1)
        if cross_weight >= 1.0:
            return logits.tolist()
        cosines = np.asarray(cosine_fn(pairs), dtype=np.float64).reshape(-1)
        out = np.zeros(len(pairs))
        by_query: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        for idx in by_query.values():
            out[idx] = mix_scores(logits[idx], cosines[idx], cross_weight)
        return out.tolist()

    return fn


__all__ = ["RetrievalMix", "mix_scores", "mixed_score_fn", "standardise"]
