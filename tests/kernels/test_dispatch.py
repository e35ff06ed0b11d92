"""Backend choice and input validation of the kernel entry points (one test per rejected input)."""

from __future__ import annotations

import pytest
import torch
from searchsmith import kernels
from searchsmith.kernels import (
    KernelInputError,
    dedup_mask,
    dispatch,
    pool_normalize,
    route_sources,
    similarity_topk,
)


def _q(b: int = 2, d: int = 8, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(b, d, dtype=dtype)


# --------------------------------------------------------------------------- backend choice


def test_auto_uses_torch_for_cpu_tensors() -> None:
    assert dispatch.resolve_backend("similarity_topk", None, _q()) == "torch"
    assert dispatch.resolve_backend("similarity_topk", "auto", _q()) == "torch"


def test_torch_override_is_honoured() -> None:
    assert dispatch.resolve_backend("dedup_mask", "torch", _q()) == "torch"


def test_env_var_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dispatch.ENV_BACKEND, "torch")
    assert dispatch.resolve_backend("pool_normalize", None, _q()) == "torch"
    monkeypatch.setenv(dispatch.ENV_BACKEND, "bogus")
    with pytest.raises(KernelInputError, match=r"\$SEARCHSMITH_KERNEL_BACKEND: unknown kernel backend 'bogus'"):
        dispatch.resolve_backend("pool_normalize", None, _q())


def test_explicit_backend_beats_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dispatch.ENV_BACKEND, "triton")
    assert dispatch.resolve_backend("pool_normalize", "torch", _q()) == "torch"


def test_unknown_backend_rejected() -> None:
    with pytest.raises(KernelInputError, match="backend: unknown kernel backend 'cuda'; use one of auto, torch, triton"):
        similarity_topk(_q(), _q(5), 2, backend="cuda")


def test_triton_on_cpu_without_interpreter_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET=1"):
        similarity_topk(_q(), _q(5), 2, backend="triton")


def test_triton_missing_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "triton_available", lambda: False)
    with pytest.raises(KernelInputError, match="triton does not import here"):
        dedup_mask(_q(), backend="triton")


def test_dispatch_calls_the_chosen_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(dispatch.reference, "similarity_topk_ref",
                        lambda q, m, k: calls.append(f"torch k={k}") or (None, None))
    similarity_topk(_q(), _q(5), 9)  # CPU + auto -> reference, with k clamped to N = 5
    assert calls == ["torch k=5"]


def test_package_reexports_public_api() -> None:
    for name in ("pool_normalize", "similarity_topk", "route_sources", "dedup_mask", "KernelInputError"):
        assert getattr(kernels, name) is getattr(dispatch, name)
    assert issubclass(KernelInputError, ValueError)
    assert set(kernels.TRITON_BY_DEFAULT) == {"pool_normalize", "similarity_topk", "route_sources", "dedup_mask"}


# --------------------------------------------------------------------------- pool_normalize inputs


def test_pool_rejects_non_tensor() -> None:
    with pytest.raises(KernelInputError, match=r"hidden: expected a torch.Tensor of shape \(B, T, D\), got list"):
        pool_normalize([[1.0]], torch.ones(1, 1))


def test_pool_rejects_2d_hidden() -> None:
    with pytest.raises(KernelInputError, match=r"hidden: expected 3 dims \(B, T, D\), got shape \(2, 8\)"):
        pool_normalize(torch.randn(2, 8), torch.ones(2, 8))


def test_pool_rejects_integer_hidden() -> None:
    with pytest.raises(KernelInputError, match="hidden: dtype int64 is not supported; use one of float32, float16, bfloat16"):
        pool_normalize(torch.ones(2, 3, 4, dtype=torch.int64), torch.ones(2, 3))


def test_pool_rejects_float_mask() -> None:
    with pytest.raises(KernelInputError, match="mask: dtype float32 is not supported"):
        pool_normalize(torch.randn(2, 3, 4), torch.ones(2, 3))


def test_pool_rejects_mask_shape_mismatch() -> None:
    with pytest.raises(KernelInputError, match=r"mask: shape \(2, 4\) does not match hidden's \(B, T\) = \(2, 3\)"):
        pool_normalize(torch.randn(2, 3, 4), torch.ones(2, 4, dtype=torch.int64))


def test_pool_rejects_zero_d() -> None:
    with pytest.raises(KernelInputError, match="hidden: the feature dimension D is 0"):
        pool_normalize(torch.randn(2, 3, 0), torch.ones(2, 3, dtype=torch.int64))


def test_pool_rejects_mixed_devices() -> None:
    with pytest.raises(KernelInputError, match="inputs are on different devices"):
        pool_normalize(torch.randn(1, 2, 3), torch.ones(1, 2, dtype=torch.int64, device="meta"))


# --------------------------------------------------------------------------- similarity_topk inputs


def test_topk_rejects_1d_queries() -> None:
    with pytest.raises(KernelInputError, match=r"queries: expected 2 dims \(B, D\), got shape \(8,\); reshape"):
        similarity_topk(torch.randn(8), _q(5), 2)


def test_topk_rejects_d_mismatch() -> None:
    with pytest.raises(KernelInputError, match="queries: D = 8 does not match matrix D = 6"):
        similarity_topk(_q(), _q(5, 6), 2)


def test_topk_rejects_bf16_matrix() -> None:
    with pytest.raises(KernelInputError, match="matrix: dtype bfloat16 is not supported; use one of float32, float16"):
        similarity_topk(_q(), _q(5, dtype=torch.bfloat16), 2)


def test_topk_rejects_zero_k() -> None:
    with pytest.raises(KernelInputError, match="k: must be >= 1, got 0"):
        similarity_topk(_q(), _q(5), 0)


def test_topk_rejects_float_k() -> None:
    with pytest.raises(KernelInputError, match="k: expected an int >= 1, got float 2.0"):
        similarity_topk(_q(), _q(5), 2.0)


def test_topk_rejects_bool_k() -> None:
    with pytest.raises(KernelInputError, match="k: expected an int >= 1, got bool True"):
        similarity_topk(_q(), _q(5), True)


def test_topk_clamps_k_to_n() -> None:
    scores, idx = similarity_topk(_q(), _q(3), 10, backend="torch")
    assert scores.shape == (2, 3) and sorted(idx[0].tolist()) == [0, 1, 2]


# --------------------------------------------------------------------------- route_sources inputs


def _route_args(**over):
    args = {"queries": _q(), "centroids": _q(4), "centroid_source": torch.tensor([0, 1, 1, 2]),
            "source_scale": torch.ones(3), "k": 2}
    args.update(over)
    return args


def test_route_rejects_source_id_out_of_range() -> None:
    with pytest.raises(KernelInputError, match=r"centroid_source: ids must lie in \[0, S\) = \[0, 3\), got min 0 max 3"):
        route_sources(**_route_args(centroid_source=torch.tensor([0, 1, 3, 2])))


def test_route_rejects_negative_source_id() -> None:
    with pytest.raises(KernelInputError, match="got min -1 max 2"):
        route_sources(**_route_args(centroid_source=torch.tensor([0, -1, 1, 2])))


def test_route_rejects_float_source_ids() -> None:
    with pytest.raises(KernelInputError, match="centroid_source: dtype float32 is not supported"):
        route_sources(**_route_args(centroid_source=torch.tensor([0.0, 1.0, 1.0, 2.0])))


def test_route_rejects_source_length_mismatch() -> None:
    with pytest.raises(KernelInputError, match="centroid_source: 3 entries but centroids has C = 4 rows"):
        route_sources(**_route_args(centroid_source=torch.tensor([0, 1, 2])))


def test_route_rejects_weight_length_mismatch() -> None:
    with pytest.raises(KernelInputError, match="centroid_weight: 5 entries but centroids has C = 4 rows"):
        route_sources(**_route_args(), centroid_weight=torch.ones(5))


def test_route_rejects_2d_scale() -> None:
    with pytest.raises(KernelInputError, match=r"source_scale: expected 1 dims \(S,\)"):
        route_sources(**_route_args(source_scale=torch.ones(3, 1)))


def test_route_rejects_d_mismatch() -> None:
    with pytest.raises(KernelInputError, match="queries: D = 8 does not match centroids D = 5"):
        route_sources(**_route_args(centroids=_q(4, 5)))


def test_route_rejects_zero_k() -> None:
    with pytest.raises(KernelInputError, match="k: must be >= 1, got -1"):
        route_sources(**_route_args(k=-1))


def test_route_negative_scale_keeps_empty_sources_last() -> None:
    scores, ids = route_sources(**_route_args(source_scale=torch.tensor([-1.0, 1.0, 1.0, 1.0])), backend="torch")
    assert scores.shape == (2, 2)
    full, all_ids = route_sources(**_route_args(source_scale=torch.tensor([-1.0, 1.0, 1.0, 1.0]), k=4),
                                  backend="torch")
    assert (all_ids[:, -1] == 3).all() and (full[:, -1] == float("-inf")).all()


# --------------------------------------------------------------------------- dedup_mask inputs


def test_dedup_rejects_threshold_above_one() -> None:
    with pytest.raises(KernelInputError, match=r"threshold: cosine threshold must lie in \(-1, 1\], got 1.5"):
        dedup_mask(_q(), 1.5)


def test_dedup_rejects_threshold_minus_one() -> None:
    with pytest.raises(KernelInputError, match=r"must lie in \(-1, 1\], got -1"):
        dedup_mask(_q(), -1.0)


def test_dedup_rejects_nan_threshold() -> None:
    with pytest.raises(KernelInputError, match="got nan"):
        dedup_mask(_q(), float("nan"))


def test_dedup_rejects_string_threshold() -> None:
    with pytest.raises(KernelInputError, match="threshold: expected a float in \\(-1, 1\\], got str"):
        dedup_mask(_q(), "0.8")


def test_dedup_rejects_3d_embeddings() -> None:
    with pytest.raises(KernelInputError, match=r"embeddings: expected 2 dims \(N, D\)"):
        dedup_mask(torch.randn(2, 3, 4))


def test_dedup_default_threshold_is_the_paper_value() -> None:
    a = torch.tensor([1.0, 0.0])
    b = torch.nn.functional.normalize(torch.tensor([1.0, 0.76]), dim=0)  # cos ~ 0.796 < 0.8
    c = torch.nn.functional.normalize(torch.tensor([1.0, 0.74]), dim=0)  # cos ~ 0.804 >= 0.8
    assert dedup_mask(torch.stack([a, b])).tolist() == [True, True]
    assert dedup_mask(torch.stack([a, c])).tolist() == [True, False]
    assert dispatch.DEFAULT_DEDUP_THRESHOLD == 0.8


@pytest.mark.skipif(not dispatch.triton_available(), reason="the kernel modules import triton")
def test_op_names_stay_functions_after_kernel_modules_load() -> None:
    import importlib

    for op in ("pool_normalize", "similarity_topk", "route_sources", "dedup_mask"):
        module = importlib.import_module(f"searchsmith.kernels.{op}_kernel")
        assert callable(getattr(kernels, op)) and getattr(kernels, op) is getattr(dispatch, op)
        assert hasattr(module, f"_{op}_kernel")
