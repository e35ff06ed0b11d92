"""NumPy twins of ``route_sources`` and ``dedup_mask`` for CPU callers that have not loaded torch.

A cold ``searchsmith ask`` whose models all run in ONNX Runtime needs torch for nothing but
these two small ops, and importing torch costs about a second on 2 cores. These functions
compute the same maths as :mod:`.reference` with the same tie rules (a source or row with
the lower index wins a tie), on host arrays. ``tests/kernels/test_host.py`` ties them to the
torch reference. :func:`host_only` says when a caller may use them: torch is not loaded and
the machine shows no NVIDIA device, so no CUDA path could be taken anyway.

This module imports neither torch nor anything else of the project.
"""

from __future__ import annotations

import functools
import glob
import sys
from collections.abc import Callable

import numpy as np

from .backend import env_backend

# Rows of the (rows, N) similarity block computed at once by the greedy de-duplication.
DEDUP_BLOCK_ROWS = 1024


def host_only() -> bool:
    """True when torch is not imported and no NVIDIA device node exists (``/dev/nvidia[0-9]*``).

    ``SEARCHSMITH_KERNEL_BACKEND`` set to anything but ``auto`` (or empty, which means unset,
    as for the dispatcher) also returns False: the user asked for a torch or Triton path.
    """
    if "torch" in sys.modules or env_backend() != "auto":
        return False
    return not _nvidia_device()


@functools.cache
def _nvidia_device() -> bool:
    """Whether an NVIDIA device node exists (looked up once: routing calls this per query)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _topk_lower_index(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k along the last axis, ties by lower index -> (values float32, indices int64)."""
    order = np.argsort(-scores, axis=-1, kind="stable")[:, :k]  # stable: equal scores keep index order
    return np.take_along_axis(scores, order, axis=-1).astype(np.float32), order.astype(np.int64)


def route_sources_host(queries: np.ndarray, centroids: np.ndarray, centroid_source: np.ndarray,
                       source_scale: np.ndarray, k: int, *,
                       centroid_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``score[b, s] = source_scale[s] * max_{c: source(c) = s} (weight[c] * <q_b, centroid_c>)``.

    Args:
        queries: (B, D) float. centroids: (C, D) float. centroid_source: (C,) ints in [0, S).
        source_scale: (S,) float. k: sources per query (clamped to S).
        centroid_weight: optional (C,) multiplier per centroid.

    Returns:
        (scores (B, k') float32, source ids (B, k') int64), best first, ties by lower id; a
        source without centroids scores -inf.

    Raises:
        ValueError: shapes that do not agree, or k < 1.
    """
    q = np.asarray(queries, dtype=np.float32)
    c = np.asarray(centroids, dtype=np.float32)
    src = np.asarray(centroid_source, dtype=np.int64)
    scale = np.asarray(source_scale, dtype=np.float32)
    if q.ndim != 2 or c.ndim != 2 or q.shape[1] != c.shape[1]:
        raise ValueError(f"route_sources: queries (B, D) and centroids (C, D) must share D, got {q.shape} "
                         f"and {c.shape}")
    if src.shape != (c.shape[0],) or (src.size and (src.min() < 0 or src.max() >= scale.shape[0])):
        raise ValueError(f"route_sources: centroid_source must be (C,) = ({c.shape[0]},) ids in [0, "
                         f"{scale.shape[0]}), got shape {src.shape}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"route_sources: k must be an int >= 1, got {k!r}")
    n_b, n_s = q.shape[0], scale.shape[0]
    k = min(k, n_s)
    if n_b == 0:
        return np.empty((0, k), np.float32), np.empty((0, k), np.int64)
    scores = q @ c.T  # (B, C)
    if centroid_weight is not None:
        scores = scores * np.asarray(centroid_weight, dtype=np.float32)
    best = np.full((n_b, n_s), -np.inf, dtype=np.float32)  # (B, S)
    np.maximum.at(best, (slice(None), src), scores)
    best = best * scale
    # Set explicitly: -inf * a negative scale would otherwise become +inf.
    best[:, np.bincount(src, minlength=n_s) == 0] = -np.inf
    return _topk_lower_index(best, k)


def dedup_mask_host(embeddings: np.ndarray, threshold: float) -> np.ndarray:
    """(N, D) rank-ordered rows -> (N,) bool keep-mask of greedy removal at ``<e_i, e_j> >= threshold``.

    Raises:
        ValueError: not a 2-D array, or a threshold outside (-1, 1].
    """
    e = np.asarray(embeddings, dtype=np.float32)
    if e.ndim != 2:
        raise ValueError(f"dedup_mask: embeddings must be (N, D), got shape {e.shape}")
    if not -1.0 < float(threshold) <= 1.0:
        raise ValueError(f"dedup_mask: threshold must be in (-1, 1], got {threshold}")
    return greedy_keep(e.shape[0], lambda start, stop: e[start:stop] @ e[:stop].T >= threshold)


def greedy_keep(n: int, hits: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """(N,) bool keep-mask of greedy duplicate removal over N rows in rank order, blockwise.

    ``hits(start, stop)`` gives the (stop - start, stop) bool block ``<e_i, e_j> >= threshold``
    for rows i in [start, stop) against every row j < stop. Each block's rows hit by an
    already-kept earlier row are dropped, then a greedy pass runs inside the block. Both
    ``dedup_mask_host`` and the torch ``reference.dedup_mask_ref`` run this loop.
    """
    keep = np.ones(n, dtype=bool)
    for start in range(0, n, DEDUP_BLOCK_ROWS):
        stop = min(start + DEDUP_BLOCK_ROWS, n)
        hit = hits(start, stop)  # (rows, stop)
        dropped = (hit[:, :start] & keep[:start]).any(axis=1)  # by kept rows of earlier blocks
        for r in range(stop - start):
            if dropped[r]:
                keep[start + r] = False
            else:  # kept: it removes every later row of the block that it duplicates
                dropped[r + 1:] |= hit[r + 1:, start + r]
    return keep


__all__ = ["dedup_mask_host", "greedy_keep", "host_only", "route_sources_host"]
