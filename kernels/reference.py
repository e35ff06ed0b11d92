"""Pure-torch twins of the Triton kernels: the tests' oracle and the CPU (or fallback) path.

Inputs are assumed valid here; ``kernels/dispatch.py`` validates them once at the boundary.
Everything is computed in float32 whatever the input dtype.

Exact top-k with ties broken by the lower index uses ``pack_topk_keys``: a float32 score and
its index are packed into one int64 whose integer order is (score descending, index
ascending), so ``torch.topk`` on the keys is deterministic. The Triton kernels emit the same
keys, which makes their candidates and the reference's directly comparable.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .host import greedy_keep

# similarity_topk_ref / route_sources_ref work on chunks of rows so that neither the (B, chunk)
# float32 scores nor the float32 copy of a (chunk, D) fp16 block exceeds this many elements:
# a 4e6-row matrix never becomes a (B, N) tensor (256 x 4e6 x 4 bytes = 4 GB) at once.
SIMILARITY_CHUNK_ELEMENTS = 1 << 24
# Index field of a packed key: 31 bits, stored as INDEX_BASE - index (see pack_topk_keys).
INDEX_BASE = 2**31 - 1
# Smaller than every key packed from a real (even -inf) score: used for padding.
INVALID_KEY = -(2**63)
POOL_EPS = 1e-12


def pack_topk_keys(scores: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Pack float32 scores and int indices (< 2**31) into int64 keys ordered like (score, -index).

    The high 32 bits hold the score's bits made order-preserving as a signed int32
    (negative floats get their magnitude bits flipped); the low 32 bits hold
    ``INDEX_BASE - index`` so the lower index wins a tie. -0.0 is folded into +0.0 so the
    two compare equal as floats do. NaN scores have no defined place.

    Args:
        scores: float32 tensor of any shape.
        indices: integer tensor broadcastable to ``scores``.

    Returns:
        int64 tensor of ``scores``' shape.
    """
    bits = scores.float().contiguous().view(torch.int32)
    bits = torch.where(scores == 0, torch.zeros_like(bits), bits)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    return (ordered << 32) | (INDEX_BASE - indices.to(torch.int64))


def unpack_topk_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of ``pack_topk_keys``: int64 keys -> (float32 scores, int64 indices)."""
    ordered = (keys >> 32).to(torch.int32)
    bits = torch.where(ordered < 0, ordered ^ 0x7FFFFFFF, ordered)
    scores = bits.view(torch.float32)
    indices = INDEX_BASE - (keys & 0xFFFFFFFF)
    return scores, indices


def empty_topk(n_b: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The (scores (B, k) float32, indices (B, k) int64) answer when B or k is 0."""
    return (torch.empty(n_b, k, dtype=torch.float32, device=device),
            torch.empty(n_b, k, dtype=torch.int64, device=device))


def topk_lower_index(scores: torch.Tensor, k: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k along the last dim, ties by lower index: (values float32, indices + offset int64)."""
    idx = torch.arange(offset, offset + scores.shape[-1], device=scores.device)
    keys = pack_topk_keys(scores.float(), idx)
    top = torch.topk(keys, k, dim=-1, sorted=True).values
    return unpack_topk_keys(top)


def merge_topk_keys(keys: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Best k of packed candidate keys (B, M), M >= k: (scores (B, k) float32, indices (B, k) int64)."""
    return unpack_topk_keys(torch.topk(keys, k, dim=-1, sorted=True).values)


def pool_normalize_ref(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): mean of the tokens whose mask is non-zero, then L2-normalised."""
    weights = (mask != 0).to(torch.float32)  # (B, T)
    summed = torch.einsum("btd,bt->bd", hidden.float(), weights)  # (B, D)
    counts = weights.sum(dim=1, keepdim=True).clamp_min(1.0)  # (B, 1): all-zero rows stay 0
    return F.normalize(summed / counts, p=2.0, dim=-1, eps=POOL_EPS)


def similarity_topk_ref(queries: torch.Tensor, matrix: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, D), (N, D), k <= N -> top-k (scores float32, indices int64), chunked over N."""
    n_b, n = queries.shape[0], matrix.shape[0]
    device = queries.device
    if n_b == 0 or k == 0:
        return empty_topk(n_b, k, device)
    q = queries.float()
    chunk = max(k, SIMILARITY_CHUNK_ELEMENTS // max(n_b, matrix.shape[1]))
    candidates = []
    for start in range(0, n, chunk):
        block = matrix[start:start + chunk].float()
        scores = q @ block.T  # (B, chunk)
        kk = min(k, block.shape[0])
        idx = torch.arange(start, start + block.shape[0], device=device)
        candidates.append(torch.topk(pack_topk_keys(scores, idx), kk, dim=-1, sorted=False).values)
    return merge_topk_keys(torch.cat(candidates, dim=1), k)


def route_sources_ref(
    queries: torch.Tensor,
    centroids: torch.Tensor,
    centroid_source: torch.Tensor,
    source_scale: torch.Tensor,
    k: int,
    *,
    centroid_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-source max of weighted centroid scores, times the source scale, then top-k sources."""
    n_b, n_s = queries.shape[0], source_scale.shape[0]
    device = queries.device
    if n_b == 0 or k == 0:
        return empty_topk(n_b, k, device)
    q = queries.float()
    src = centroid_source.to(torch.int64)
    best = torch.full((n_b, n_s), float("-inf"), dtype=torch.float32, device=device)  # (B, S)
    chunk = max(1, SIMILARITY_CHUNK_ELEMENTS // max(n_b, centroids.shape[1]))
    for start in range(0, centroids.shape[0], chunk):
        scores = q @ centroids[start:start + chunk].float().T  # (B, c)
        if centroid_weight is not None:
            scores = scores * centroid_weight[start:start + chunk].float()
        ids = src[start:start + chunk].expand(n_b, -1)
        best = best.scatter_reduce(1, ids, scores, reduce="amax", include_self=True)
    return finish_routing(best, src, source_scale, k)


def finish_routing(best: torch.Tensor, src: torch.Tensor, source_scale: torch.Tensor, k: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) per-source max -> scaled, -inf for sources without centroids, top-k by lower id."""
    scores = best * source_scale.float()  # (B, S)
    empty = torch.bincount(src, minlength=source_scale.shape[0]) == 0  # (S,)
    # Set explicitly: -inf * a negative scale would otherwise become +inf.
    scores = scores.masked_fill(empty, float("-inf"))
    return topk_lower_index(scores, k)


def dedup_mask_ref(embeddings: torch.Tensor, threshold: float) -> torch.Tensor:
    """(N, D) rank-ordered rows -> (N,) keep-mask of greedy removal at ``<e_i, e_j> >= threshold``.

    Blockwise, in ``host.greedy_keep``: each block of rows is compared with every earlier
    row, rows hit by an already-kept earlier row are dropped, then a greedy pass runs inside
    the block.
    """
    e = embeddings.float()

    def hits(start: int, stop: int) -> np.ndarray:
        return (e[start:stop] @ e[:stop].T >= threshold).cpu().numpy()  # (rows, stop)

    keep = greedy_keep(e.shape[0], hits)
    return torch.from_numpy(keep).to(embeddings.device)


def pool_normalize_packed_ref(hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """(T, D), (B+1,) -> (B, D): mean of each segment ``hidden[cu[b]:cu[b+1]]``, then L2-normalised.

    The packed (padding-free) twin of ``pool_normalize_ref``: a segment of length 0 comes back
    as zeros, like an all-zero mask row there.
    """
    n_b = cu_seqlens.shape[0] - 1
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64)  # (B,)
    segment = torch.repeat_interleave(torch.arange(n_b, device=hidden.device), lengths,
                                      output_size=hidden.shape[0])  # (T,) segment of each token
    summed = torch.zeros(n_b, hidden.shape[1], dtype=torch.float32, device=hidden.device)
    summed.index_add_(0, segment, hidden.float())  # (B, D)
    counts = lengths.clamp_min(1).to(torch.float32)[:, None]  # (B, 1)
    return F.normalize(summed / counts, p=2.0, dim=-1, eps=POOL_EPS)
