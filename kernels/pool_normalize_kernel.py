"""Fused masked mean pooling + L2 normalisation of token embeddings.

Math: ``out[b] = m / max(||m||_2, 1e-12)`` with ``m = sum_t [mask[b,t] != 0] * h[b,t] / max(#tokens_b, 1)``.
Grid: one program per batch row ``b``; it streams the row's T tokens in BLOCK_T chunks with
the whole (padded) D in registers, so each hidden element is read once and padded tokens
(mask 0) are never read. Load, cast to float32, accumulate in float32, store float32.

Where it wins / loses: on the H200 (``searchsmith profile --suite gpu``) it beat
``reference.pool_normalize_ref`` in 4 of 4 workloads (median 2.4x), so it is the CUDA
default (``dispatch.TRITON_BY_DEFAULT``).

Packed (padding-free) variant, ``pool_normalize_packed``: the same math over a
``(T_total, D)`` concatenation of B sequences delimited by ``cu_seqlens`` (B+1 offsets):
``out[b] = m / max(||m||_2, 1e-12)`` with ``m = sum_{t in [cu[b], cu[b+1])} h[t] / max(cu[b+1] - cu[b], 1)``.
Grid: one program per segment ``b``, streaming its rows in BLOCK_T chunks (no mask: every
row of a segment is a real token). Not yet measured against its torch twin on the GPU, so
``dispatch`` runs it only when asked for (``backend="triton"``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import (
    MAX_TRITON_POOL_D,
    KernelInputError,
    check_pool_normalize,
    check_pool_normalize_packed,
    interpreter_enabled,
)
from .reference import POOL_EPS

# Elements of the (BLOCK_T, BLOCK_D) tile a program holds at once.
_TILE_ELEMENTS = 4096


@triton.jit
def _pool_normalize_kernel(
    h_ptr, m_ptr, out_ptr,
    T, D,
    stride_hb, stride_ht, stride_hd,
    stride_mb, stride_mt,
    stride_ob,
    EPS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    count = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        t_ok = offs_t < T
        m = tl.load(m_ptr + b * stride_mb + offs_t * stride_mt, mask=t_ok, other=0)
        real = (m != 0) & t_ok
        # Padded tokens are masked out of the load, so they cost no memory traffic.
        h = tl.load(
            h_ptr + b * stride_hb + offs_t[:, None] * stride_ht + offs_d[None, :] * stride_hd,
            mask=real[:, None] & d_ok[None, :], other=0.0,
        ).to(tl.float32)
        acc += tl.sum(h, axis=0)
        count += real.to(tl.float32)
    mean = acc / tl.maximum(tl.sum(count, axis=0), 1.0)
    norm = tl.sqrt(tl.sum(mean * mean, axis=0))
    tl.store(out_ptr + b * stride_ob + offs_d, mean / tl.maximum(norm, EPS), mask=d_ok)


def pool_normalize_triton(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Triton launcher of ``pool_normalize``: (B, T, D), (B, T) -> (B, D) float32.

    Args:
        hidden: (B, T, D) float32 / float16 / bfloat16 on CUDA (or CPU under TRITON_INTERPRET=1).
        mask: (B, T) bool or integer attention mask on the same device.

    Returns:
        (B, D) float32, L2-normalised; all-zero-mask rows are zeros.

    Raises:
        KernelInputError: bad shapes, dtypes or devices, or D above the register budget.
    """
    check_pool_normalize(hidden, mask)
    return _pool_normalize_launch(hidden, mask)


def _pool_normalize_launch(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The launcher after validation (dispatch calls this)."""
    n_b, n_t, n_d = hidden.shape
    if n_d > MAX_TRITON_POOL_D:
        raise KernelInputError(f"hidden: D = {n_d} exceeds the Triton kernel's limit {MAX_TRITON_POOL_D}; use backend='torch'")
    out = torch.empty(n_b, n_d, dtype=torch.float32, device=hidden.device)
    if n_b == 0:
        return out
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)  # same bytes; Triton loads of bool pointers are awkward
    block_d = triton.next_power_of_2(n_d)
    block_t = max(1, min(triton.next_power_of_2(max(n_t, 1)), _TILE_ELEMENTS // block_d))
    if interpreter_enabled():
        # The interpreter's cost is per loop step, not per element: take T in one step.
        block_t = triton.next_power_of_2(max(n_t, 1))
    _pool_normalize_kernel[(n_b,)](
        hidden, mask, out,
        n_t, n_d,
        hidden.stride(0), hidden.stride(1), hidden.stride(2),
        mask.stride(0), mask.stride(1),
        out.stride(0),
        EPS=POOL_EPS, BLOCK_T=block_t, BLOCK_D=block_d,
        num_warps=4 if block_d <= 1024 else 8,
    )
    return out


@triton.jit
def _pool_normalize_packed_kernel(
    h_ptr, cu_ptr, out_ptr,
    D,
    stride_ht, stride_hd,
    stride_ob,
    EPS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    start = tl.load(cu_ptr + b)
    n_t = (tl.load(cu_ptr + b + 1) - start).to(tl.int32)  # this segment's tokens (int32 loop bound)
    seg_ptr = h_ptr + start.to(tl.int64) * stride_ht  # int64: T * stride may pass 2**31
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for t0 in range(0, n_t, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        # Rows past the segment's end belong to the next segment (or lie past T): masked out.
        h = tl.load(
            seg_ptr + offs_t[:, None] * stride_ht + offs_d[None, :] * stride_hd,
            mask=(offs_t < n_t)[:, None] & d_ok[None, :], other=0.0,
        ).to(tl.float32)
        acc += tl.sum(h, axis=0)
    mean = acc / tl.maximum(n_t.to(tl.float32), 1.0)
    norm = tl.sqrt(tl.sum(mean * mean, axis=0))
    tl.store(out_ptr + b * stride_ob + offs_d, mean / tl.maximum(norm, EPS), mask=d_ok)


def pool_normalize_packed_triton(hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Triton launcher of ``pool_normalize_packed``: (T, D), (B+1,) -> (B, D) float32.

    Args:
        hidden: (T, D) float32 / float16 / bfloat16, B sequences concatenated without padding,
            on CUDA (or CPU under TRITON_INTERPRET=1).
        cu_seqlens: (B+1,) int32 / int64 offsets: sequence b is ``hidden[cu[b]:cu[b+1]]``;
            starts at 0, never decreases, ends at T.

    Returns:
        (B, D) float32, L2-normalised segment means; an empty segment is zeros.

    Raises:
        KernelInputError: bad shapes, dtypes, devices or offsets, or D above the register budget.
    """
    check_pool_normalize_packed(hidden, cu_seqlens)
    return _pool_normalize_packed_launch(hidden, cu_seqlens)


def _pool_normalize_packed_launch(hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The launcher after validation (dispatch calls this)."""
    n_d = hidden.shape[1]
    n_b = cu_seqlens.shape[0] - 1
    if n_d > MAX_TRITON_POOL_D:
        raise KernelInputError(f"hidden: D = {n_d} exceeds the Triton kernel's limit {MAX_TRITON_POOL_D}; use backend='torch'")
    out = torch.empty(n_b, n_d, dtype=torch.float32, device=hidden.device)
    if n_b == 0:
        return out
    block_d = triton.next_power_of_2(n_d)
    block_t = max(1, _TILE_ELEMENTS // block_d)
    if interpreter_enabled():
        # The interpreter's cost is per loop step: take the longest segment in one step.
        longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
        block_t = triton.next_power_of_2(max(longest, 1))
    _pool_normalize_packed_kernel[(n_b,)](
        hidden, cu_seqlens, out,
        n_d,
        hidden.stride(0), hidden.stride(1),
        out.stride(0),
        EPS=POOL_EPS, BLOCK_T=block_t, BLOCK_D=block_d,
        num_warps=4 if block_d <= 1024 else 8,
    )
    return out
