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
(``"retrieval_mix": {"cross_weight": w, "embedder": ..., "lexical_weight": l,
"lexical_min_cosine": m}``) and the pipeline's rerank stage mixes with the scores its retrieval
returned.

Those scores are what the share is measured against: the cosines plus ``lexical_weight`` x each
passage's BM25 share where the pipeline searches hybrid (``retrieval.lexical_weight``,
models/metrics.py ``fuse_lexical``). The recipe therefore mixes with the same sum at the
pipeline's default weight (``model.mix_lexical_weight``; 0 measures against the cosine alone)
and records it, and ``eval rerank``, ``beir-full`` and the export's re-measure score a bundle
with it. A manifest without ``lexical_weight`` was measured against the cosine alone (0).

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
        lexical_weight: the retrieval score the share was measured against is the cosine plus
            this x the passage's BM25 share (the pipeline's ``retrieval.lexical_weight``); 0:
            the cosine alone.
        lexical_min_cosine: below this cosine a passage's BM25 share added nothing
            (``retrieval.lexical_min_cosine``).
    """

    cross_weight: float
    embedder: str = "default"
    lexical_weight: float = 0.0
    lexical_min_cosine: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RetrievalMix | None:
        """None for a manifest without one; BundleError naming the key when malformed."""
        if data is None:
            return None
        keys = {"cross_weight", "embedder", "lexical_weight", "lexical_min_cosine"}
        if not isinstance(data, Mapping) or set(data) - keys or "cross_weight" not in data:
            raise BundleError(f"retrieval_mix: expected keys among {sorted(keys)} with 'cross_weight', got "
                              f"{data!r}; re-export the bundle")
        w = data["cross_weight"]
        if not _is_number(w) or not 0.0 <= w <= 1.0:
            raise BundleError(f"retrieval_mix.cross_weight must be a number in [0, 1], got {w!r}; re-export the bundle")
        emb = data.get("embedder", "default")
        if not isinstance(emb, str) or not emb:
            raise BundleError(f"retrieval_mix.embedder must be a non-empty string, got {emb!r}")
        lw, floor = data.get("lexical_weight", 0.0), data.get("lexical_min_cosine", 0.0)
        if not _is_number(lw) or lw < 0:
            raise BundleError(f"retrieval_mix.lexical_weight must be a number >= 0, got {lw!r}; re-export the "
                              "bundle")
        if not _is_number(floor):
            raise BundleError(f"retrieval_mix.lexical_min_cosine must be a number, got {floor!r}; re-export the "
                              "bundle")
        return cls(float(w), emb, float(lw), float(floor))

    def to_json(self) -> dict[str, Any]:
        return {"cross_weight": self.cross_weight, "embedder": self.embedder,
                "lexical_weight": self.lexical_weight, "lexical_min_cosine": self.lexical_min_cosine}

    def retrieval_score_fn(self, cosine_fn: Any, lexical_share_fn: Any | None) -> Any:
        """``pairs -> scores`` the share was measured against: ``cosine_fn``'s cosines, plus
        ``lexical_weight`` x ``lexical_share_fn``'s BM25 shares when the weight is above 0.

        Raises:
            ValidationError: the mix needs BM25 shares and ``lexical_share_fn`` is None.
        """
        if self.lexical_weight <= 0:
            return cosine_fn
        if lexical_share_fn is None:
            raise ValidationError(f"retrieval mix: the share was measured against cosine + {self.lexical_weight:g} x "
                                  "BM25 share; pass the passages' BM25 shares (lexical_share_fn)")
        return fused_score_fn(cosine_fn, lexical_share_fn, self.lexical_weight, self.lexical_min_cosine)

    def apply(self, logits: Sequence[float] | np.ndarray, cosines: Sequence[float] | np.ndarray) -> np.ndarray:
        """:func:`mix_scores` at this share."""
        return mix_scores(logits, cosines, self.cross_weight)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fused_score_fn(cosine_fn: Any, lexical_share_fn: Any, weight: float, min_cosine: float) -> Any:
    """``pairs -> cosine + weight x BM25 share`` (hybrid search's score of a candidate,
    models/metrics.py ``fuse_lexical``): ``cosine_fn`` and ``lexical_share_fn`` are flat pair
    scorers."""
    from searchsmith.models.metrics import fuse_lexical

    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        fused = fuse_lexical(dict(enumerate(cosine_fn(pairs))), dict(enumerate(lexical_share_fn(pairs))),
                             weight, min_cosine)
        return [fused[i] for i in range(len(pairs))]

    return fn


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


__all__ = ["RetrievalMix", "fused_score_fn", "mix_scores", "mixed_score_fn", "standardise"]
