"""``similarity_topk_candidates`` against the exact torch path (its slow twin) and its input checks.

Pure torch, so everything runs on the CPU in bfloat16 (float16 on CUDA); sizes stay small.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from searchsmith import kernels
from searchsmith.kernels import (
    DEFAULT_OVERSAMPLE,
    KernelInputError,
    candidate_copy,
    dispatch,
    similarity_topk,
    similarity_topk_candidates,
    topk_candidates,
)
from searchsmith.kernels.reference import similarity_topk_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOW = torch.float16 if DEVICE == "cuda" else torch.bfloat16


def _unit(n: int, d: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, device=DEVICE), dim=1).to(dtype)


def _recall(got: torch.Tensor, want: torch.Tensor) -> float:
    hits = sum(len(set(g.tolist()) & set(w.tolist())) for g, w in zip(got, want))
    return hits / want.numel()


# --------------------------------------------------------------------------- agreement with the exact path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("k", [1, 10, 37])
@pytest.mark.parametrize("with_copy", [False, True])
def test_matches_the_exact_reference_on_unit_vectors(dtype: torch.dtype, k: int, with_copy: bool) -> None:
    matrix, queries = _unit(3001, 384, dtype), _unit(7, 384, dtype)
    low = candidate_copy(matrix) if with_copy else None
    scores, idx = similarity_topk_candidates(queries, matrix, k, candidate_matrix=low)
    want_scores, want_idx = similarity_topk_ref(queries, matrix, k)
    assert scores.dtype == torch.float32 and idx.dtype == torch.int64 and idx.shape == (7, k)
    assert _recall(idx, want_idx) == 1.0
    assert torch.equal(idx, want_idx)  # random unit vectors: no near-ties to reorder
    torch.testing.assert_close(scores, want_scores)


def test_scores_are_float32_products_not_the_reduced_precision_ones() -> None:
    matrix, queries = _unit(2000, 384), _unit(5, 384)
    scores, idx = similarity_topk_candidates(queries, matrix, 10)
    exact = torch.einsum("bd,bkd->bk", queries.double(), matrix[idx].double())  # (B, k)
    torch.testing.assert_close(scores.double(), exact, rtol=0, atol=1e-6)
    # What a plain reduced-precision matmul + topk would return for the same rows: off by
    # its rounding (bf16 keeps 8 significant bits), so returning those would fail above.
    naive = (queries.to(LOW) @ matrix.to(LOW).T).gather(1, idx).double()  # (B, k)
    assert (naive - exact).abs().max() > 1e-4


def test_the_candidate_stage_picks_the_rows() -> None:
    # A decoy copy that is zero except one row per query, equal to that query: with
    # oversample 1 only that row reaches the exact stage, so skipping the candidate stage
    # (scoring the matrix directly) would return the true best row instead.
    matrix, queries = _unit(500, 64), _unit(2, 64)
    decoy = torch.zeros(500, 64, device=DEVICE)
    decoy[7], decoy[300] = queries[0], queries[1]
    scores, idx = similarity_topk_candidates(queries, matrix, 1, oversample=1, candidate_matrix=decoy.to(LOW))
    assert idx[:, 0].tolist() == [7, 300]
    assert similarity_topk_ref(queries, matrix, 1)[1][:, 0].tolist() != [7, 300]
    torch.testing.assert_close(scores[:, 0], (queries * matrix[[7, 300]]).sum(dim=1))  # exact, from matrix


def test_calls_the_reduced_precision_scorer_once_with_k_times_oversample(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[torch.dtype, int, bool]] = []
    real = topk_candidates.candidate_rows

    def spy(queries: torch.Tensor, low: torch.Tensor, m: int, *, cast_rows: bool) -> torch.Tensor:
        seen.append((low.dtype, m, cast_rows))
        return real(queries, low, m, cast_rows=cast_rows)

    monkeypatch.setattr(topk_candidates, "candidate_rows", spy)
    matrix, queries = _unit(400, 32), _unit(2, 32)
    similarity_topk_candidates(queries, matrix, 6, candidate_matrix=candidate_copy(matrix))
    similarity_topk_candidates(queries, matrix, 5, oversample=3)
    assert seen == [(LOW, 6 * DEFAULT_OVERSAMPLE, False), (torch.float32, 15, True)]


def test_recall_is_one_at_the_default_oversample() -> None:
    # The profile's question at test size: recall@k of the candidates path against exact search.
    matrix, queries = _unit(20_000, 384), _unit(16, 384)
    low = candidate_copy(matrix)
    for k in (10, 100):
        _, idx = similarity_topk_candidates(queries, matrix, k, candidate_matrix=low)
        assert _recall(idx, similarity_topk_ref(queries, matrix, k)[1]) == 1.0, k


def test_exact_ties_keep_the_lower_index() -> None:
    # Entries in {-1, 0, 1}: every product is a small integer, exact in bfloat16 / float16
    # as well, so many rows tie. oversample covers every row tied with the k-th best, so the
    # exact stage sees them all and must order them like the reference (lower index first).
    matrix = torch.randint(-1, 2, (301, 16), device=DEVICE).float()
    queries = torch.randint(-1, 2, (3, 16), device=DEVICE).float()
    k = 12
    exact = queries @ matrix.T  # (B, N)
    kth = exact.sort(dim=1, descending=True).values[:, k - 1:k]
    tied = int((exact >= kth).sum(dim=1).max())
    oversample = math.ceil(tied / k)
    assert k * oversample < matrix.shape[0]  # the candidate stage really filters
    scores, idx = similarity_topk_candidates(queries, matrix, k, oversample=oversample)
    want_scores, want_idx = similarity_topk_ref(queries, matrix, k)
    assert torch.equal(idx, want_idx) and torch.equal(scores, want_scores)


def test_chunked_candidate_and_exact_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small chunk budgets force several candidate chunks (merged by a second topk) and
    # several query blocks in the exact stage.
    monkeypatch.setattr(topk_candidates, "CANDIDATE_CHUNK_ELEMENTS", 9 * 100)
    monkeypatch.setattr(topk_candidates, "SIMILARITY_CHUNK_ELEMENTS", 2 * 40 * 24)
    matrix, queries = _unit(997, 24), _unit(9, 24)
    scores, idx = similarity_topk_candidates(queries, matrix, 10)
    want_scores, want_idx = similarity_topk_ref(queries, matrix, 10)
    assert torch.equal(idx, want_idx)
    torch.testing.assert_close(scores, want_scores)


# --------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize(("n", "k", "oversample"), [
    (25, 40, 4),  # k > rows: clamped to N, every row is a candidate
    (25, 25, 1),  # k == rows
    (25, 10, 4),  # k * oversample > rows: every row is a candidate
    (25, 6, 4),  # k * oversample = N - 1: the candidate stage drops one row
])
def test_small_matrices_match_the_exact_path(n: int, k: int, oversample: int) -> None:
    matrix, queries = _unit(n, 16), _unit(4, 16)
    scores, idx = similarity_topk_candidates(queries, matrix, k, oversample=oversample)
    want_scores, want_idx = similarity_topk(queries, matrix, k, backend="torch")
    assert idx.shape == (4, min(k, n))
    assert torch.equal(idx, want_idx)
    torch.testing.assert_close(scores, want_scores)


@pytest.mark.parametrize(("b", "n"), [(0, 10), (3, 0)])
def test_empty_queries_or_matrix_give_empty_results_like_the_exact_path(b: int, n: int) -> None:
    scores, idx = similarity_topk_candidates(torch.randn(b, 8), torch.randn(n, 8), 5)
    assert scores.shape == idx.shape == (b, min(5, n))
    assert scores.dtype == torch.float32 and idx.dtype == torch.int64


def test_default_similarity_topk_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topk_candidates, "candidate_rows", lambda *a, **kw: pytest.fail("candidates ran"))
    similarity_topk(_unit(2, 8), _unit(50, 8), 3)


def test_package_reexports_the_candidates_entry() -> None:
    assert kernels.similarity_topk_candidates is dispatch.similarity_topk_candidates
    assert kernels.candidate_copy is dispatch.candidate_copy
    assert kernels.DEFAULT_OVERSAMPLE == DEFAULT_OVERSAMPLE >= 2


def test_candidate_copy_is_the_devices_reduced_precision() -> None:
    matrix = _unit(5, 8)
    assert candidate_copy(matrix).dtype == LOW
    assert candidate_copy(matrix.to(LOW).float()).equal(matrix.to(LOW))


# --------------------------------------------------------------------------- rejected inputs (one each)


def _args(**over):
    args = {"queries": torch.randn(2, 8), "matrix": torch.randn(30, 8), "k": 3}
    args.update(over)
    return args


def test_rejects_zero_oversample() -> None:
    with pytest.raises(KernelInputError, match=r"oversample: must be >= 1, got 0; k \* oversample candidates"):
        similarity_topk_candidates(**_args(), oversample=0)


def test_rejects_float_oversample() -> None:
    with pytest.raises(KernelInputError, match=f"oversample: expected an int >= 1, got float 2.5; .* {DEFAULT_OVERSAMPLE}"):
        similarity_topk_candidates(**_args(), oversample=2.5)


def test_rejects_bool_oversample() -> None:
    with pytest.raises(KernelInputError, match="oversample: expected an int >= 1, got bool True"):
        similarity_topk_candidates(**_args(), oversample=True)


def test_rejects_float32_candidate_matrix() -> None:
    with pytest.raises(KernelInputError, match="candidate_matrix: dtype float32 is not supported; use one of float16, bfloat16"):
        similarity_topk_candidates(**_args(), candidate_matrix=torch.randn(30, 8))


def test_rejects_candidate_matrix_of_another_shape() -> None:
    with pytest.raises(KernelInputError, match=r"candidate_matrix: shape \(29, 8\) does not match matrix's \(30, 8\); "
                                               r"build it .* candidate_copy\(matrix\)"):
        similarity_topk_candidates(**_args(), candidate_matrix=torch.randn(29, 8).bfloat16())


def test_rejects_1d_candidate_matrix() -> None:
    with pytest.raises(KernelInputError, match=r"candidate_matrix: expected 2 dims \(N, D\), got shape \(240,\)"):
        similarity_topk_candidates(**_args(), candidate_matrix=torch.randn(240).bfloat16())


def test_rejects_candidate_matrix_on_another_device() -> None:
    with pytest.raises(KernelInputError, match="inputs are on different devices"):
        similarity_topk_candidates(**_args(), candidate_matrix=torch.empty(30, 8, dtype=torch.bfloat16, device="meta"))


def test_rejects_bf16_matrix() -> None:
    with pytest.raises(KernelInputError, match="matrix: dtype bfloat16 is not supported; use one of float32, float16"):
        similarity_topk_candidates(**_args(matrix=torch.randn(30, 8).bfloat16()))


def test_rejects_1d_queries() -> None:
    with pytest.raises(KernelInputError, match=r"queries: expected 2 dims \(B, D\), got shape \(8,\)"):
        similarity_topk_candidates(**_args(queries=torch.randn(8)))


def test_rejects_d_mismatch() -> None:
    with pytest.raises(KernelInputError, match="queries: D = 8 does not match matrix D = 6"):
        similarity_topk_candidates(**_args(matrix=torch.randn(30, 6)))


def test_rejects_zero_d() -> None:
    with pytest.raises(KernelInputError, match="queries: the feature dimension D is 0"):
        similarity_topk_candidates(**_args(queries=torch.randn(2, 0), matrix=torch.randn(30, 0)))


def test_rejects_zero_k() -> None:
    with pytest.raises(KernelInputError, match="k: must be >= 1, got 0"):
        similarity_topk_candidates(**_args(k=0))


def test_candidate_copy_rejects_an_integer_matrix() -> None:
    with pytest.raises(KernelInputError, match="matrix: dtype int64 is not supported; use one of float32, float16"):
        candidate_copy(torch.ones(3, 4, dtype=torch.int64))
