"""Exact top-k inner-product search without writing the (B, N) score matrix to memory.

Math: ``top-k_n <q_b, m_n>`` per query b, ties by the lower n (scores accumulate in float32).
Grid: ``(cdiv(B, BLOCK_B), n_split)``; program (i, j) takes a block of BLOCK_B queries and
a contiguous slice of the matrix rows, streams it in tiles of R rows (R = next power of two
>= k, at least 64 on GPU), scores each tile with ``tl.dot`` and keeps a running top-R per
query as packed int64 keys (score, lower index; see ``reference.pack_topk_keys``). A tile
is merged only if it beats some query's current k-th best: it is bitonic-sorted ascending,
``max(best_desc, tile_asc)`` is a bitonic sequence holding the top R of both, and one
bitonic merge sorts it. Merges get rarer as a slice is streamed; with k close to the rows
per program most tiles merge. Each program writes R keys per query, and ``torch.topk``
over the (B, n_split * R) candidates gives the final k.

Precision: with float16 queries and matrix the dot runs on float16 operands (each product
is exact in float32) with a float32 accumulator; any float32 operand makes both float32 with
``input_precision="ieee"`` (no TF32), so results match ``reference.similarity_topk_ref`` up
to summation order.

Where it wins / loses: on the H200 (``searchsmith profile --suite gpu``) it beat
the torch twin (chunked matmul + topk) in 20 of 21 workloads (median 4.1x; 0.70x at float32,
B = 256), so it is the CUDA default (``dispatch.TRITON_BY_DEFAULT``). A plain fp16 matmul +
topk was faster still (median 2.7x) but rounds scores to fp16 and loses the exact tie order
this kernel keeps; faiss CPU was far slower.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import MAX_TRITON_K, KernelInputError, check_similarity_topk, interpreter_enabled
from .reference import INDEX_BASE, INVALID_KEY, empty_topk, merge_topk_keys
from .tiles import block_d, dot_tile, split_grid, split_program

# Compare-swaps are written inline with builtins only (reshape, permute, split, join,
# minimum, maximum): under TRITON_INTERPRET=1 every call of a @triton.jit function, which
# includes tl.min / tl.max / tl.sort, costs milliseconds of patching, so a sort built from
# them makes the CPU tests crawl.


@triton.jit
def _bitonic_sort(x, M: tl.constexpr, R: tl.constexpr, LOG_R: tl.constexpr, DESCENDING: tl.constexpr):
    """Sort each row of (M, R) int64 keys, R = 2**LOG_R, in LOG_R * (LOG_R + 1) / 2 compare-swaps.

    A compare-swap on bit j views a row as (R / 2**(j+1), 2**j, 2) pairs (after a permute);
    the left partner takes the min and the right the max, swapped where ``flip``
    (descending) is set.
    """
    cols = tl.arange(0, R)
    # Shapes are written out per use: a plain local assigned in a kernel becomes a tensor,
    # and a constexpr local cannot be reassigned in the loop.
    for stage in tl.static_range(1, LOG_R + 1):
        for j in tl.static_range(stage - 1, -1, -1):  # pairs 2**j apart
            if stage < LOG_R:  # alternate directions between blocks of 2**stage
                flip = tl.reshape(((cols >> stage) & 1) == 1, (1, R >> (j + 1), 2, 2**j))
                flip = tl.split(tl.permute(flip, (0, 1, 3, 2)))[0]  # (1, R / 2**(j+1), 2**j)
            else:
                flip = tl.full((1, R >> (j + 1), 2**j), DESCENDING, tl.int1)
            left, right = tl.split(tl.permute(tl.reshape(x, (M, R >> (j + 1), 2, 2**j)), (0, 1, 3, 2)))
            lo = tl.minimum(left, right)
            hi = tl.maximum(left, right)
            h = tl.join(tl.where(flip, hi, lo), tl.where(flip, lo, hi))  # (M, R / 2**(j+1), 2**j, 2)
            x = tl.reshape(tl.permute(h, (0, 1, 3, 2)), (M, R))
    return x


@triton.jit
def _bitonic_merge(x, M: tl.constexpr, R: tl.constexpr, LOG_R: tl.constexpr, DESCENDING: tl.constexpr):
    """Sort rows of (M, R) keys that are already bitonic, in LOG_R compare-swaps."""
    for j in tl.static_range(LOG_R - 1, -1, -1):  # pairs 2**j apart
        left, right = tl.split(tl.permute(tl.reshape(x, (M, R >> (j + 1), 2, 2**j)), (0, 1, 3, 2)))
        lo = tl.minimum(left, right)
        hi = tl.maximum(left, right)
        if DESCENDING:
            h = tl.join(hi, lo)
        else:
            h = tl.join(lo, hi)
        x = tl.reshape(tl.permute(h, (0, 1, 3, 2)), (M, R))
    return x


@triton.jit
def _similarity_topk_kernel(
    q_ptr, m_ptr, keys_ptr,
    B, N, D, K, rows_per_prog,
    stride_qb, stride_qd, stride_mn, stride_md, stride_kb,
    INDEX_BASE: tl.constexpr, INVALID_KEY: tl.constexpr,
    R: tl.constexpr, LOG_R: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_FP16: tl.constexpr,
):
    offs_b, b_ok, row_start, row_stop = split_program(B, N, rows_per_prog, BLOCK_B)
    offs_r = tl.arange(0, R)
    best = tl.full((BLOCK_B, R), INVALID_KEY, dtype=tl.int64)  # sorted descending
    kth = tl.full((BLOCK_B,), INVALID_KEY, dtype=tl.int64)  # best[:, K - 1]
    for n0 in range(row_start, row_stop, R):
        offs_n = n0 + tl.arange(0, R)
        n_ok = offs_n < row_stop
        acc = dot_tile(q_ptr, offs_b, b_ok, stride_qb, stride_qd, m_ptr, offs_n, n_ok, stride_mn, stride_md,
                       D, BLOCK_B, R, BLOCK_D, DOT_FP16)  # (BLOCK_B, R)
        # Pack (score, row) into int64 keys ordered by score desc then row asc, as
        # reference.pack_topk_keys does; padding rows and queries get INVALID_KEY.
        bits = acc.to(tl.int32, bitcast=True)
        bits = tl.where(acc == 0.0, 0, bits)  # -0.0 must tie with +0.0
        ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        keys = (ordered.to(tl.int64) << 32) | (INDEX_BASE - offs_n.to(tl.int64))[None, :]
        keys = tl.where(b_ok[:, None] & n_ok[None, :], keys, INVALID_KEY)  # (BLOCK_B, R)
        # Merge only if the tile beats some query's current k-th best: rows below it can no
        # longer reach this program's top k (columns past k of ``best`` may go stale).
        beats = tl.reshape((keys > kth[:, None]).to(tl.int32), (BLOCK_B * R,))
        if tl.max(beats, axis=0) > 0:
            tile = _bitonic_sort(keys, BLOCK_B, R, LOG_R, False)
            best = _bitonic_merge(tl.maximum(best, tile), BLOCK_B, R, LOG_R, True)
            kth = tl.max(tl.where(offs_r[None, :] == K - 1, best, INVALID_KEY), axis=1)
    tl.store(keys_ptr + offs_b[:, None].to(tl.int64) * stride_kb + tl.program_id(1) * R + offs_r[None, :],
             best, mask=b_ok[:, None])


def _plan(n_b: int, n: int, k: int) -> tuple[int, int, int, int]:
    """Pick (R, BLOCK_B, n_split, rows_per_prog) for B queries, N rows and k results."""
    # R >= 64 keeps the GPU's tl.dot tiles wide; the interpreter pays per compare-swap, so
    # there R only needs tl.dot's minimum of 16.
    r = max(16 if interpreter_enabled() else 64, triton.next_power_of_2(k))
    return (r, *split_grid(n_b, n, r))


def similarity_topk_triton(queries: torch.Tensor, matrix: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton launcher of ``similarity_topk``.

    Args:
        queries: (B, D) float32 / float16 on CUDA (or CPU under TRITON_INTERPRET=1).
        matrix: (N, D) float32 / float16 on the same device.
        k: >= 1; clamped to N.

    Returns:
        (scores (B, k') float32, indices (B, k') int64), k' = min(k, N), best first, ties by lower index.

    Raises:
        KernelInputError: bad shapes, dtypes, devices or k (k' above 1024: use backend='torch').
    """
    return _similarity_topk_launch(queries, matrix, check_similarity_topk(queries, matrix, k))


def _similarity_topk_launch(queries: torch.Tensor, matrix: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The launcher after validation; ``k`` is already clamped to N (dispatch calls this)."""
    n_b, n = queries.shape[0], matrix.shape[0]
    device = queries.device
    if k > MAX_TRITON_K:
        raise KernelInputError(f"k: {k} exceeds the Triton kernel's limit {MAX_TRITON_K}; use backend='torch'")
    if n_b == 0 or k == 0:
        return empty_topk(n_b, k, device)
    r, block_b, n_split, rows_per_prog = _plan(n_b, n, k)
    n_d = queries.shape[1]
    keys = torch.empty(n_b, n_split * r, dtype=torch.int64, device=device)
    grid = (triton.cdiv(n_b, block_b), n_split)
    _similarity_topk_kernel[grid](
        queries, matrix, keys,
        n_b, n, n_d, k, rows_per_prog,
        queries.stride(0), queries.stride(1), matrix.stride(0), matrix.stride(1), keys.stride(0),
        INDEX_BASE=INDEX_BASE, INVALID_KEY=INVALID_KEY,
        R=r, LOG_R=r.bit_length() - 1, BLOCK_B=block_b, BLOCK_D=block_d(n_d),
        DOT_FP16=queries.dtype == torch.float16 and matrix.dtype == torch.float16,
        num_warps=4 if r <= 128 else 8,
    )
    # Every program wrote R keys per query; padding keys are INVALID_KEY and lose to all
    # N >= k real candidates, so the top k below are all real rows.
    return merge_topk_keys(keys, k)
