"""Each Triton kernel against its torch twin (and an independent brute-force oracle).

Runs on CPU under TRITON_INTERPRET=1 (tests/conftest.py re-execs pytest with it), where each
program instance costs milliseconds, so shapes are small: 1, primes and non-multiples of the
block sizes (R = 16/64 rows, 64 centroids, 32 x 64 dedup tiles).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from searchsmith.kernels import dedup_mask, pool_normalize, route_sources, similarity_topk
from searchsmith.kernels.dispatch import interpreter_enabled, triton_available
from searchsmith.kernels.reference import (
    dedup_mask_ref,
    pack_topk_keys,
    pool_normalize_ref,
    route_sources_ref,
    similarity_topk_ref,
    unpack_topk_keys,
)

pytestmark = pytest.mark.skipif(
    not triton_available() or not (torch.cuda.is_available() or interpreter_enabled()),
    reason="needs triton and either CUDA or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16]


def _topk_oracle(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable descending sort: equal scores keep index order, i.e. the lower index first."""
    values, idx = torch.sort(scores, dim=1, descending=True, stable=True)
    return values[:, :k], idx[:, :k]


def _assert_topk(got: tuple[torch.Tensor, torch.Tensor], exact: torch.Tensor, k: int) -> None:
    """Kernel top-k vs brute force over the float32 score matrix ``exact`` (B, N)."""
    scores, idx = got
    want_scores, want_idx = _topk_oracle(exact, k)
    assert scores.dtype == torch.float32 and idx.dtype == torch.int64
    assert scores.shape == (exact.shape[0], k) == idx.shape
    torch.testing.assert_close(scores.cpu(), want_scores.cpu())
    # Different summation orders may swap near-ties; then each returned index must still
    # carry the returned score.
    torch.testing.assert_close(exact.gather(1, idx).cpu(), scores.cpu())
    agree = (idx == want_idx).float().mean().item()
    assert agree > 0.95, f"only {agree:.0%} of indices match the oracle"


# --------------------------------------------------------------------------- pool_normalize


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 37), (5, 13, 97), (2, 19, 130)])
def test_pool_normalize_matches_reference(dtype: torch.dtype, shape: tuple[int, int, int]) -> None:
    b, t, d = shape
    hidden = torch.randn(b, t, d, device=DEVICE).to(dtype)
    mask = (torch.rand(b, t, device=DEVICE) > 0.3).to(torch.int64)
    mask[:, 0] = 1
    got = pool_normalize(hidden, mask, backend="triton")
    torch.testing.assert_close(got, pool_normalize_ref(hidden, mask))
    torch.testing.assert_close(got.norm(dim=1), torch.ones(b, device=DEVICE))


def test_pool_normalize_zero_mask_row_and_bool_mask() -> None:
    hidden = torch.randn(3, 5, 17, device=DEVICE)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool, device=DEVICE)
    got = pool_normalize(hidden, mask, backend="triton")
    assert torch.equal(got[1], torch.zeros(17, device=DEVICE))
    want = F.normalize(hidden[0, :2].mean(0), dim=0)  # padded tokens must not count
    torch.testing.assert_close(got[0], want)
    torch.testing.assert_close(got, pool_normalize_ref(hidden, mask))


def test_pool_normalize_non_contiguous_input() -> None:
    hidden = torch.randn(4, 23, 11, device=DEVICE).transpose(0, 1)[:, :4]  # (23, 4, 11) strided
    mask = torch.ones(23, 4, dtype=torch.int32, device=DEVICE)
    torch.testing.assert_close(pool_normalize(hidden, mask, backend="triton"), pool_normalize_ref(hidden, mask))


@pytest.mark.parametrize("shape", [(0, 3, 8), (2, 0, 8)])
def test_pool_normalize_empty(shape: tuple[int, int, int]) -> None:
    hidden = torch.randn(*shape, device=DEVICE)
    mask = torch.ones(shape[:2], dtype=torch.int64, device=DEVICE)
    got = pool_normalize(hidden, mask, backend="triton")
    assert got.shape == (shape[0], 8) and got.dtype == torch.float32
    assert torch.equal(got, torch.zeros_like(got))


@pytest.mark.gpu
def test_pool_normalize_bf16() -> None:
    hidden = torch.randn(4, 9, 33, device=DEVICE, dtype=torch.bfloat16)
    mask = torch.ones(4, 9, dtype=torch.int64, device=DEVICE)
    torch.testing.assert_close(pool_normalize(hidden, mask, backend="triton"), pool_normalize_ref(hidden, mask))


# --------------------------------------------------------------------------- similarity_topk


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 8, 1), (3, 67, 37, 10), (2, 131, 19, 3), (17, 41, 33, 100)])
def test_similarity_topk_matches_reference(dtype: torch.dtype, shape: tuple[int, int, int, int]) -> None:
    b, n, d, k = shape  # the last case asks k > N: clamped to N
    queries = torch.randn(b, d, device=DEVICE).to(dtype)
    matrix = torch.randn(n, d, device=DEVICE).to(dtype)
    got = similarity_topk(queries, matrix, k, backend="triton")
    k_eff = min(k, n)
    exact = queries.float() @ matrix.float().T
    _assert_topk(got, exact, k_eff)
    ref = similarity_topk_ref(queries, matrix, k_eff)
    _assert_topk(ref, exact, k_eff)
    torch.testing.assert_close(got[0], ref[0])


def test_similarity_topk_ties_go_to_lower_index() -> None:
    # Entries in {-1, 0, 1}: every inner product is an exact small integer, so ties are exact
    # whatever the summation order, and indices must match the stable-sort oracle exactly.
    matrix = torch.randint(-1, 2, (97, 16), device=DEVICE).half()
    queries = torch.randint(-1, 2, (3, 16), device=DEVICE).half()
    scores, idx = similarity_topk(queries, matrix, 40, backend="triton")
    want_scores, want_idx = _topk_oracle(queries.float() @ matrix.float().T, 40)
    assert torch.equal(idx, want_idx)
    assert torch.equal(scores, want_scores)
    assert torch.equal(similarity_topk(queries, matrix, 40, backend="torch")[1], want_idx)


def test_similarity_topk_increasing_scores_merge_every_tile() -> None:
    # Scores rise with the row: every tile beats the running best (the worst case of the merge).
    matrix = (torch.arange(83, device=DEVICE, dtype=torch.float32)[:, None] / 83).repeat(1, 16)
    queries = torch.ones(2, 16, device=DEVICE)
    _, idx = similarity_topk(queries, matrix, 5, backend="triton")
    assert idx.tolist() == [[82, 81, 80, 79, 78]] * 2


def test_similarity_topk_mixed_dtypes() -> None:
    queries = torch.randn(2, 24, device=DEVICE)
    matrix = torch.randn(50, 24, device=DEVICE).half()
    _assert_topk(similarity_topk(queries, matrix, 7, backend="triton"), queries @ matrix.float().T, 7)


@pytest.mark.parametrize("shape", [(0, 10, 8), (3, 0, 8)])
def test_similarity_topk_empty(shape: tuple[int, int, int]) -> None:
    b, n, d = shape
    scores, idx = similarity_topk(torch.randn(b, d, device=DEVICE), torch.randn(n, d, device=DEVICE), 5,
                                  backend="triton")
    k_eff = min(5, n)
    assert scores.shape == (b, k_eff) and idx.shape == (b, k_eff)
    assert scores.dtype == torch.float32 and idx.dtype == torch.int64


def test_pack_keys_round_trip_and_order() -> None:
    scores = torch.tensor([[1.5, -0.0, 0.0, -2.0, float("-inf"), 3.0e38, -1.0e-30]])
    idx = torch.arange(7)[None, :]
    keys = pack_topk_keys(scores, idx)
    back_scores, back_idx = unpack_topk_keys(keys)
    assert torch.equal(back_idx, idx)
    torch.testing.assert_close(back_scores, scores.abs().where(scores == 0, scores))  # -0.0 -> 0.0
    order = torch.argsort(keys[0], descending=True).tolist()
    assert order == [5, 0, 1, 2, 6, 3, 4]  # 0.0 ties: lower index (1) first


# --------------------------------------------------------------------------- route_sources


def _route_oracle(q, cen, src, scale, weight) -> torch.Tensor:
    sims = q.float() @ cen.float().T * (weight.float() if weight is not None else 1.0)  # (B, C)
    out = torch.full((q.shape[0], scale.shape[0]), float("-inf"), device=q.device)
    for s in range(scale.shape[0]):
        cols = (src == s).nonzero().flatten()
        if len(cols):
            out[:, s] = scale[s].float() * sims[:, cols].max(dim=1).values
    return out  # (B, S)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 8, 1), (3, 67, 5, 37, 3), (17, 131, 11, 19, 20)])
@pytest.mark.parametrize("weighted", [False, True])
def test_route_sources_matches_reference(dtype, shape, weighted) -> None:
    b, c, s, d, k = shape  # the last case asks k > S: clamped to S
    queries = torch.randn(b, d, device=DEVICE).to(dtype)
    centroids = torch.randn(c, d, device=DEVICE).to(dtype)
    src = torch.randint(0, s, (c,), device=DEVICE)
    if s > 3:
        src[src == 2] = 1  # source 2 has no centroid: it must score -inf
    scale = torch.rand(s, device=DEVICE) + 0.5
    weight = torch.rand(c, device=DEVICE) if weighted else None
    got = route_sources(queries, centroids, src, scale, k, centroid_weight=weight, backend="triton")
    k_eff = min(k, s)
    want_scores, want_ids = _topk_oracle(_route_oracle(queries, centroids, src, scale, weight), k_eff)
    torch.testing.assert_close(got[0], want_scores)
    assert torch.equal(got[1], want_ids)
    ref = route_sources_ref(queries, centroids, src, scale, k_eff, centroid_weight=weight)
    torch.testing.assert_close(got[0], ref[0])
    assert torch.equal(got[1], ref[1])
    if s > 3:
        assert (got[0][got[1] == 2] == float("-inf")).all()


def test_route_sources_ties_and_empty_sources() -> None:
    # Two sources with identical centroids tie: the lower id comes first; sources 3, 4 are empty.
    cen = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], device=DEVICE)
    src = torch.tensor([2, 1, 0], device=DEVICE)
    scale = torch.ones(5, device=DEVICE)
    scores, ids = route_sources(torch.tensor([[1.0, 0.0]], device=DEVICE), cen, src, scale, 5, backend="triton")
    assert ids.tolist() == [[1, 2, 0, 3, 4]]
    assert scores[0, 3:].tolist() == [float("-inf")] * 2


@pytest.mark.parametrize("which", ["queries", "centroids", "sources"])
def test_route_sources_empty(which: str) -> None:
    # No sources means no centroids either (every centroid needs a source id in [0, S)).
    b, c, s = (0 if which == "queries" else 2), (4 if which == "queries" else 0), (0 if which == "sources" else 3)
    scores, ids = route_sources(torch.randn(b, 8, device=DEVICE), torch.randn(c, 8, device=DEVICE),
                                torch.zeros(c, dtype=torch.int64, device=DEVICE), torch.ones(s, device=DEVICE),
                                2, backend="triton")
    assert scores.shape == (b, min(2, s)) == ids.shape
    if which == "centroids":
        assert (scores == float("-inf")).all() and ids.tolist() == [[0, 1], [0, 1]]


# --------------------------------------------------------------------------- dedup_mask


def _dedup_oracle(emb: torch.Tensor, threshold: float) -> torch.Tensor:
    sims = emb.float() @ emb.float().T
    kept: list[int] = []
    for i in range(emb.shape[0]):
        if not any(sims[i, j] >= threshold for j in kept):
            kept.append(i)
    keep = torch.zeros(emb.shape[0], dtype=torch.bool)
    keep[kept] = True
    return keep


def _near_duplicates(n: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    base = F.normalize(torch.randn(max(1, n // 3), d), dim=1)
    emb = base[torch.randint(0, base.shape[0], (n,))] + 0.1 * torch.randn(n, d)
    return F.normalize(emb, dim=1).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 8), (67, 19), (131, 37)])
@pytest.mark.parametrize("threshold", [0.8, 0.3])
def test_dedup_mask_matches_reference(dtype, shape, threshold) -> None:
    emb = _near_duplicates(*shape, dtype)
    got = dedup_mask(emb, threshold, backend="triton")
    assert got.dtype == torch.bool and got.shape == (shape[0],)
    want = _dedup_oracle(emb.cpu(), threshold)
    assert torch.equal(got.cpu(), want)
    assert torch.equal(dedup_mask_ref(emb, threshold).cpu(), want)
    assert bool(got[0])


def test_dedup_mask_greedy_is_against_kept_rows_only() -> None:
    # b duplicates a (dropped); c duplicates b but not a: c stays, because b was not kept.
    a = torch.tensor([1.0, 0.0])
    b = F.normalize(torch.tensor([1.0, 0.6]), dim=0)  # cos(a, b) ~ 0.86
    c = F.normalize(torch.tensor([1.0, 1.6]), dim=0)  # cos(b, c) ~ 0.88, cos(a, c) ~ 0.53
    emb = torch.stack([a, b, c, a]).to(DEVICE)
    assert dedup_mask(emb, 0.8, backend="triton").tolist() == [True, False, True, False]
    assert dedup_mask(emb, 0.8, backend="torch").tolist() == [True, False, True, False]


def test_dedup_mask_empty() -> None:
    got = dedup_mask(torch.randn(0, 8, device=DEVICE), backend="triton")
    assert got.shape == (0,) and got.dtype == torch.bool


@pytest.mark.gpu
def test_dedup_mask_bf16() -> None:
    emb = _near_duplicates(70, 32, torch.bfloat16)
    assert torch.equal(dedup_mask(emb, 0.8, backend="triton").cpu(), dedup_mask_ref(emb, 0.8).cpu())
