"""Tiling shared by the search kernels: the tile product and the query-block x row-slice grid.

* ``dot_tile`` (``@triton.jit``, inlined into each kernel when compiled), used by
  ``similarity_topk``, ``route_sources`` and ``dedup_mask``: it streams D in BLOCK_D steps,
  loads both blocks of rows masked to their valid rows and columns and accumulates ``tl.dot``
  in float32. With float16 on both sides the dot runs on float16 operands (each product is
  exact in float32); otherwise both are cast to float32 with ``input_precision="ieee"`` (no
  TF32).
* ``split_grid`` (host) and ``split_program`` (``@triton.jit``): ``similarity_topk`` and
  ``route_sources`` run on a ``(cdiv(B, BLOCK_B), n_split)`` grid where program (i, j) takes
  query block i against the j-th contiguous slice of the rows; the host side picks the sizes,
  the kernel side reads its share.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .checks import interpreter_enabled

# Programs to launch in total (query blocks x row slices) on a GPU: a few waves of the
# H200's 132 SMs, so every SM stays busy while each program still streams many tiles.
GPU_TARGET_PROGRAMS = 1024
# Under TRITON_INTERPRET=1 each program instance costs about 1 ms of Python: keep grids tiny.
INTERPRET_TARGET_PROGRAMS = 2


def block_d(n_d: int) -> int:
    """BLOCK_D of ``dot_tile`` for feature dimension D: a power of two in [16, 128]."""
    return min(128, max(16, triton.next_power_of_2(n_d)))


def split_grid(n_b: int, n_rows: int, tile_rows: int) -> tuple[int, int, int]:
    """Sizes of the ``(cdiv(B, BLOCK_B), n_split)`` grid for B queries against N >= 1 rows.

    Args:
        n_b: queries B (>= 1).
        n_rows: rows N (>= 1), streamed in tiles of ``tile_rows``.
        tile_rows: rows per tile.

    Returns:
        (BLOCK_B, n_split, rows_per_prog): each program streams ``rows_per_prog`` rows, a whole
        number of tiles, so that about ``*_TARGET_PROGRAMS`` programs run in all.
    """
    block_b = 16 if n_b <= 16 else 32
    n_btiles = triton.cdiv(n_b, block_b)
    target = INTERPRET_TARGET_PROGRAMS if interpreter_enabled() else GPU_TARGET_PROGRAMS
    n_tiles = triton.cdiv(n_rows, tile_rows)
    tiles_per_prog = triton.cdiv(n_tiles, max(1, min(n_tiles, target // n_btiles)))
    return block_b, triton.cdiv(n_tiles, tiles_per_prog), tiles_per_prog * tile_rows


@triton.jit
def split_program(B, N, rows_per_prog, BLOCK_B: tl.constexpr):
    """This program's share of the ``split_grid`` grid: (offs_b, b_ok, row_start, row_stop)."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_start = tl.program_id(1) * rows_per_prog
    return offs_b, offs_b < B, row_start, tl.minimum(row_start + rows_per_prog, N)


@triton.jit
def dot_tile(
    a_ptr, offs_a, a_ok, stride_an, stride_ad,
    b_ptr, offs_b, b_ok, stride_bn, stride_bd,
    D,
    BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, DOT_FP16: tl.constexpr,
):
    """(BLOCK_A, BLOCK_B) float32 ``<a_i, b_j>`` over D for rows ``offs_a`` of A and ``offs_b`` of B.

    Rows outside ``a_ok`` / ``b_ok`` load as zeros, so their products are 0.
    """
    acc = tl.zeros((BLOCK_A, BLOCK_B), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        a = tl.load(a_ptr + offs_a[:, None].to(tl.int64) * stride_an + offs_d[None, :] * stride_ad,
                    mask=a_ok[:, None] & d_ok[None, :], other=0.0)
        b = tl.load(b_ptr + offs_b[:, None].to(tl.int64) * stride_bn + offs_d[None, :] * stride_bd,
                    mask=b_ok[:, None] & d_ok[None, :], other=0.0)
        if DOT_FP16:
            acc = tl.dot(a, tl.trans(b), acc)
        else:
            acc = tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), acc, input_precision="ieee")
    return acc
