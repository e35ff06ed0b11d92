"""Compile every kernel for an H100/H200 (sm_90) without a GPU: catches GPU-only compile errors
that the interpreter cannot see (it caught two while writing them). Takes about 30 s: slow."""

from __future__ import annotations

import importlib
import os

import pytest
from searchsmith.kernels.reference import INDEX_BASE, INVALID_KEY

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                       reason="under TRITON_INTERPRET=1 @triton.jit functions are not compilable"),
]
I32 = "i32"


def _compile(op: str, kernel: str, signature: dict[str, str], constexprs: dict[str, object]) -> None:
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(f"searchsmith.kernels.{op}_kernel"), kernel)
    names = fn.arg_names
    full = {n: signature.get(n, "constexpr") for n in names}
    src = ASTSource(fn=fn, signature=full, constexprs={(names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"]


def test_pool_normalize_compiles() -> None:
    _compile("pool_normalize", "_pool_normalize_kernel",
             dict(h_ptr="*fp16", m_ptr="*i64", out_ptr="*fp32", T=I32, D=I32, stride_hb=I32, stride_ht=I32,
                  stride_hd=I32, stride_mb=I32, stride_mt=I32, stride_ob=I32),
             dict(EPS=1e-12, BLOCK_T=8, BLOCK_D=512))


@pytest.mark.parametrize("ptr,fp16", [("*fp16", True), ("*fp32", False)])
@pytest.mark.parametrize("r,block_b", [(64, 16), (128, 32)])
def test_similarity_topk_compiles(ptr: str, fp16: bool, r: int, block_b: int) -> None:
    _compile("similarity_topk", "_similarity_topk_kernel",
             dict(q_ptr=ptr, m_ptr=ptr, keys_ptr="*i64", B=I32, N=I32, D=I32, K=I32, rows_per_prog=I32,
                  stride_qb=I32, stride_qd=I32, stride_mn=I32, stride_md=I32, stride_kb=I32),
             dict(INDEX_BASE=INDEX_BASE, INVALID_KEY=INVALID_KEY, R=r, LOG_R=r.bit_length() - 1,
                  BLOCK_B=block_b, BLOCK_D=128, DOT_FP16=fp16))


def test_route_sources_compiles() -> None:
    _compile("route_sources", "_route_sources_kernel",
             dict(q_ptr="*fp32", c_ptr="*fp32", src_ptr="*i64", w_ptr="*fp32", best_ptr="*fp32", B=I32, C=I32,
                  D=I32, S=I32, cols_per_prog=I32, stride_qb=I32, stride_qd=I32, stride_cc=I32, stride_cd=I32),
             dict(HAS_WEIGHT=True, BLOCK_B=32, BLOCK_C=64, BLOCK_D=128, DOT_FP16=False))


def test_dedup_mask_compiles() -> None:
    _compile("dedup_mask", "_dedup_mask_kernel",
             dict(e_ptr="*fp16", bits_ptr="*i64", N=I32, D=I32, threshold="fp32", stride_en=I32, stride_ed=I32,
                  stride_bn=I32),
             dict(BLOCK_I=32, BLOCK_D=128, DOT_FP16=True))
