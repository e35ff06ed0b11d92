"""Centroid routing: query x centroids, max per source, scaled, top-k sources.

Math: ``score[b, s] = scale[s] * max_{c: src(c) = s} w[c] * <q_b, centroid_c>`` (-inf for a
source without centroids), then the top-k sources per query, ties by the lower source id.
Grid: ``(cdiv(B, BLOCK_B), n_split)``; program (i, j) scores a block of queries against a
contiguous slice of the centroids tile by tile with ``tl.dot`` (float32 accumulation) and
folds each tile into a (B, S) float32 buffer with ``tl.atomic_max`` at ``[b, src(c)]``, so
the (B, C) score matrix never reaches memory. The launcher then applies the scales, marks
empty sources -inf and takes the top k of the small (B, S) buffer with ``torch.topk`` on
packed keys (exact ties by lower id).

Where it wins / loses: on the H200 (``searchsmith profile --suite gpu``) it was
0.87x and 1.07x the torch twin (median of 6 workloads, two runs): within noise, so the
dispatcher keeps torch on CUDA (``dispatch.TRITON_BY_DEFAULT``). Atomic contention grows
when many centroids share few sources.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import check_route_sources
from .reference import empty_topk, finish_routing
from .tiles import block_d, dot_tile, split_grid, split_program

_BLOCK_C = 64


@triton.jit
def _route_sources_kernel(
    q_ptr, c_ptr, src_ptr, w_ptr, best_ptr,
    B, C, D, S, cols_per_prog,
    stride_qb, stride_qd, stride_cc, stride_cd,
    HAS_WEIGHT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_FP16: tl.constexpr,
):
    offs_b, b_ok, col_start, col_stop = split_program(B, C, cols_per_prog, BLOCK_B)
    for c0 in range(col_start, col_stop, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        c_ok = offs_c < col_stop
        acc = dot_tile(q_ptr, offs_b, b_ok, stride_qb, stride_qd, c_ptr, offs_c, c_ok, stride_cc, stride_cd,
                       D, BLOCK_B, BLOCK_C, BLOCK_D, DOT_FP16)  # (BLOCK_B, BLOCK_C)
        if HAS_WEIGHT:
            w = tl.load(w_ptr + offs_c, mask=c_ok, other=1.0).to(tl.float32)
            acc = acc * w[None, :]
        src = tl.load(src_ptr + offs_c, mask=c_ok, other=0)
        ptrs = best_ptr + offs_b[:, None].to(tl.int64) * S + src[None, :]
        tl.atomic_max(ptrs, acc, mask=b_ok[:, None] & c_ok[None, :])


def route_sources_triton(
    queries: torch.Tensor,
    centroids: torch.Tensor,
    centroid_source: torch.Tensor,
    source_scale: torch.Tensor,
    k: int,
    *,
    centroid_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton launcher of ``route_sources``.

    Args:
        queries: (B, D) float32 / float16 on CUDA (or CPU under TRITON_INTERPRET=1).
        centroids: (C, D) float32 / float16.
        centroid_source: (C,) integer source ids in [0, S).
        source_scale: (S,) float.
        k: >= 1, clamped to S.
        centroid_weight: optional (C,) float weights (default 1).

    Returns:
        (scores (B, k') float32, source ids (B, k') int64), k' = min(k, S), best first, ties by lower id.

    Raises:
        KernelInputError: bad shapes, dtypes, devices, source ids or k.
    """
    k = check_route_sources(queries, centroids, centroid_source, source_scale, k, centroid_weight)
    return _route_sources_launch(queries, centroids, centroid_source, source_scale, k, centroid_weight)


def _route_sources_launch(
    queries: torch.Tensor,
    centroids: torch.Tensor,
    centroid_source: torch.Tensor,
    source_scale: torch.Tensor,
    k: int,
    centroid_weight: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The launcher after validation; ``k`` is already clamped to S (dispatch calls this)."""
    n_b, n_d = queries.shape
    n_c, n_s = centroids.shape[0], source_scale.shape[0]
    device = queries.device
    if n_b == 0 or k == 0:
        return empty_topk(n_b, k, device)
    src = centroid_source.to(torch.int64).contiguous()
    best = torch.full((n_b, n_s), float("-inf"), dtype=torch.float32, device=device)  # (B, S)
    if n_c > 0:
        block_b, n_split, cols_per_prog = split_grid(n_b, n_c, _BLOCK_C)
        weight = centroid_weight.contiguous() if centroid_weight is not None else src  # src: unused dummy
        _route_sources_kernel[(triton.cdiv(n_b, block_b), n_split)](
            queries, centroids, src, weight, best,
            n_b, n_c, n_d, n_s, cols_per_prog,
            queries.stride(0), queries.stride(1), centroids.stride(0), centroids.stride(1),
            HAS_WEIGHT=centroid_weight is not None, BLOCK_B=block_b, BLOCK_C=_BLOCK_C, BLOCK_D=block_d(n_d),
            DOT_FP16=queries.dtype == torch.float16 and centroids.dtype == torch.float16,
        )
    return finish_routing(best, src, source_scale, k)
