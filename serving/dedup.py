"""Passage de-duplication (Xinyu et al.: drop a passage whose cosine with a kept,
better-ranked passage is at least ``threshold``, 0.8 by default).

The greedy pass runs through ``searchsmith.kernels.dedup_mask`` (Triton on CUDA, the
blockwise torch twin on the CPU); kernel input errors surface as ``ValidationError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
from searchsmith.models.errors import ValidationError

T = TypeVar("T")

DEFAULT_THRESHOLD = 0.8


def dedup_keep_mask(embeddings: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """Keep-mask (N,) bool of greedy near-duplicate removal over (N, D) unit vectors in rank order."""
    from searchsmith.kernels.host import dedup_mask_host, host_only

    emb = np.asarray(embeddings, dtype=np.float32)
    if emb.ndim != 2:
        raise ValidationError(f"dedup: embeddings must be (N, D), got shape {emb.shape}")
    if host_only():  # a cold CPU process that has not loaded torch: the NumPy twin, same result
        try:
            return dedup_mask_host(emb, threshold)
        except ValueError as exc:
            raise ValidationError(f"dedup: {exc}") from None
    import torch
    from searchsmith.kernels import KernelInputError, dedup_mask

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        keep = dedup_mask(torch.from_numpy(np.ascontiguousarray(emb)).to(device), threshold)
    except KernelInputError as exc:
        raise ValidationError(f"dedup: {exc}") from None
    return keep.cpu().numpy().astype(bool)


def dedup(items: Sequence[T], embeddings: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> list[T]:
    """``items`` (ranked best first) without near-duplicates of better-ranked kept items."""
    if len(items) != len(embeddings):
        raise ValidationError(f"dedup: {len(items)} items but {len(embeddings)} embeddings")
    if not items:
        return []
    keep = dedup_keep_mask(embeddings, threshold)
    return [it for it, k in zip(items, keep) if k]
