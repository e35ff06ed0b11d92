"""pool_normalize_packed: the Triton kernel against its torch twin and against the padded pool.

Runs on CPU under TRITON_INTERPRET=1 (tests/conftest.py sets it), one program per segment, so
B stays small. Segments: odd lengths, a length-1 segment, an empty one; D: 1, primes and
values past a power of two (the kernel pads D to BLOCK_D and masks the rest).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from searchsmith.kernels import KernelInputError, pool_normalize, pool_normalize_packed
from searchsmith.kernels.dispatch import interpreter_enabled, triton_available
from searchsmith.kernels.reference import pool_normalize_packed_ref, pool_normalize_ref

needs_triton = pytest.mark.skipif(
    not triton_available() or not (torch.cuda.is_available() or interpreter_enabled()),
    reason="needs triton and either CUDA or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16]


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def _padded(hidden: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The same sequences as a padded (B, T, D) batch and its (B, T) mask; padding is garbage."""
    width = max(max(lengths), 1)
    padded = torch.randn(len(lengths), width, hidden.shape[1], device=DEVICE).to(hidden.dtype) * 100
    mask = torch.zeros(len(lengths), width, dtype=torch.int64, device=DEVICE)
    start = 0
    for b, n in enumerate(lengths):
        padded[b, :n] = hidden[start:start + n]
        mask[b, :n] = 1
        start += n
    return padded, mask


LENGTHS = [[1], [3, 1, 7], [5, 13, 2, 9, 1], [31, 17]]


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("d", [1, 37, 130])
def test_triton_matches_twin_and_padded_pool(dtype: torch.dtype, lengths: list[int], d: int) -> None:
    hidden = torch.randn(sum(lengths), d, device=DEVICE).to(dtype)
    cu = _cu(lengths)
    got = pool_normalize_packed(hidden, cu, backend="triton")
    assert got.shape == (len(lengths), d) and got.dtype == torch.float32
    torch.testing.assert_close(got, pool_normalize_packed_ref(hidden, cu))
    padded, mask = _padded(hidden, lengths)
    torch.testing.assert_close(got, pool_normalize_ref(padded, mask))
    torch.testing.assert_close(got.norm(dim=1), torch.ones(len(lengths), device=DEVICE))


def test_twin_matches_padded_pool_and_by_hand() -> None:
    lengths = [4, 1, 6]
    hidden = torch.randn(11, 19, device=DEVICE)
    cu = _cu(lengths)
    got = pool_normalize_packed_ref(hidden, cu)
    torch.testing.assert_close(got[0], F.normalize(hidden[0:4].mean(0), dim=0))
    torch.testing.assert_close(got[1], F.normalize(hidden[4], dim=0))  # a length-1 segment is its token
    torch.testing.assert_close(got[2], F.normalize(hidden[5:11].mean(0), dim=0))
    padded, mask = _padded(hidden, lengths)
    torch.testing.assert_close(got, pool_normalize(padded, mask, backend="torch"))


@needs_triton
def test_triton_empty_segment_int64_offsets_and_strided_hidden() -> None:
    hidden = torch.randn(8, 17, device=DEVICE).T  # (17, 8) with strides (1, 17): not contiguous
    assert hidden.stride() == (1, 17)
    cu = torch.tensor([0, 3, 3, 17], dtype=torch.int64, device=DEVICE)  # segment 1 is empty
    got = pool_normalize_packed(hidden, cu, backend="triton")
    assert torch.equal(got[1], torch.zeros(8, device=DEVICE))  # zeros, like an all-zero mask row
    torch.testing.assert_close(got, pool_normalize_packed_ref(hidden, cu))
    torch.testing.assert_close(got[2], F.normalize(hidden[3:].mean(0), dim=0))


@needs_triton
def test_triton_no_segments() -> None:
    got = pool_normalize_packed(torch.zeros(0, 5, device=DEVICE), torch.zeros(1, dtype=torch.int32, device=DEVICE),
                                backend="triton")
    assert got.shape == (0, 5)


@needs_triton
@pytest.mark.gpu
def test_triton_bf16() -> None:
    hidden = torch.randn(12, 33, device=DEVICE, dtype=torch.bfloat16)
    cu = _cu([5, 7])
    torch.testing.assert_close(pool_normalize_packed(hidden, cu, backend="triton"), pool_normalize_packed_ref(hidden, cu))


def test_auto_runs_the_twin_until_measured(monkeypatch) -> None:
    import searchsmith.kernels.dispatch as dispatch

    monkeypatch.delenv(dispatch.ENV_BACKEND, raising=False)
    assert dispatch.PACKED_POOL_TRITON_BY_DEFAULT is False
    calls = []
    monkeypatch.setattr(dispatch.reference, "pool_normalize_packed_ref",
                        lambda h, c: calls.append(1) or pool_normalize_packed_ref(h, c))
    pool_normalize_packed(torch.randn(4, 3), _cu([2, 2]).cpu())
    assert calls == [1]


# --------------------------------------------------------------------------- rejected inputs


@pytest.mark.parametrize(
    ("hidden", "cu", "message"),
    [
        (torch.randn(2, 3, 4), torch.tensor([0, 6], dtype=torch.int32), r"hidden: expected 2 dims \(T, D\)"),
        (torch.randn(6, 4), torch.tensor([[0, 6]], dtype=torch.int32), r"cu_seqlens: expected 1 dims"),
        (torch.randn(6, 4).to(torch.int32), torch.tensor([0, 6], dtype=torch.int32), "hidden: dtype int32"),
        (torch.randn(6, 4), torch.tensor([0.0, 6.0]), "cu_seqlens: dtype float32"),
        (torch.randn(6, 0), torch.tensor([0, 6], dtype=torch.int32), "D is 0"),
        (torch.randn(6, 4), torch.tensor([], dtype=torch.int32), "cu_seqlens: empty"),
        (torch.randn(6, 4), torch.tensor([1, 6], dtype=torch.int32), "must start at 0"),
        (torch.randn(6, 4), torch.tensor([0, 4, 2, 6], dtype=torch.int32), "never decrease"),
        (torch.randn(6, 4), torch.tensor([0, 5], dtype=torch.int32), "end at T = 6"),
    ],
    ids=["hidden-3d", "cu-2d", "hidden-int", "cu-float", "d-zero", "cu-empty", "cu-start", "cu-decreasing",
         "cu-end"],
)
def test_rejects_bad_inputs(hidden: torch.Tensor, cu: torch.Tensor, message: str) -> None:
    with pytest.raises(KernelInputError, match=message):
        pool_normalize_packed(hidden, cu, backend="torch")


@pytest.mark.slow
@pytest.mark.skipif(interpreter_enabled(), reason="under TRITON_INTERPRET=1 @triton.jit functions are not compilable")
@pytest.mark.parametrize("h_ptr,cu_ptr", [("*fp16", "*i32"), ("*fp32", "*i64")])
def test_packed_kernel_compiles_for_sm90(h_ptr: str, cu_ptr: str) -> None:
    """GPU-only compile errors (the interpreter cannot see them), without a GPU; see test_compile_sm90.py."""
    triton = pytest.importorskip("triton")
    from searchsmith.kernels.pool_normalize_kernel import _pool_normalize_packed_kernel
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _pool_normalize_packed_kernel
    signature = dict(h_ptr=h_ptr, cu_ptr=cu_ptr, out_ptr="*fp32", D="i32", stride_ht="i32", stride_hd="i32",
                     stride_ob="i32")
    constexprs = dict(EPS=1e-12, BLOCK_T=8, BLOCK_D=512)
    full = {n: signature.get(n, "constexpr") for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=full, constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    assert triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["cubin"]
