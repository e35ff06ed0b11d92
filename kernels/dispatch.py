"""Entry points for the four search kernels: validate once, then run Triton or the torch twin.

The index, router and pipeline call only these functions. The backend is chosen per call:

* ``backend=None`` / ``"auto"``: ``$SEARCHSMITH_KERNEL_BACKEND`` if set, else Triton when
  every tensor is on CUDA, ``triton`` imports and the op is in ``TRITON_BY_DEFAULT``;
  otherwise the torch reference (also the CPU path).
* ``"torch"``: always the reference in ``kernels/reference.py``.
* ``"triton"``: always the Triton kernel. On a CPU this only works when ``TRITON_INTERPRET=1``
  was set before Python started (the tests do that); otherwise it raises.

This module imports nothing from the rest of the project, so it defines its own
``KernelInputError``; callers above map it to the project's ``ValidationError``.
"""

from __future__ import annotations

import functools
import os

import torch

from . import reference

BACKENDS = ("auto", "torch", "triton")
ENV_BACKEND = "SEARCHSMITH_KERNEL_BACKEND"

# Ops whose Triton kernel is the "auto" choice on CUDA. STYLE.md: a kernel is the default
# only where it beats torch in a measured run of ``searchsmith profile kernels``. Measured on
# the H200 reference machine on 2026-11-30 (``searchsmith profile --suite gpu``; README,
# Performance; two runs, same results within noise), Triton against the torch twin that
# "auto" would run otherwise:
#   pool_normalize   4/4 workloads faster, median 2.4x
#   dedup_mask       2/2 faster, median 2.2x
#   similarity_topk  20/21 faster, median 4.1x (slower only at float32, B = 256: 0.70x).
#                    A plain fp16 matmul + topk was 2.7x faster still (median), but it
#                    rounds scores to fp16 and does not keep the exact tie order; see README.
#   route_sources    2/6 faster, median 0.87x in the first run; 4/6, median 1.07x in the
#                    second: within run-to-run noise of 1x, so it stays on torch.
# ``backend="triton"|"torch"`` or SEARCHSMITH_KERNEL_BACKEND selects one explicitly.
TRITON_BY_DEFAULT: dict[str, bool] = {
    "pool_normalize": True,
    "similarity_topk": True,
    "route_sources": False,
    "dedup_mask": True,
}

# Greedy near-duplicate threshold from the Xinyu paper (cosine 0.8). This is only the
# function default; the pipeline passes its own config value.
DEFAULT_DEDUP_THRESHOLD = 0.8

# Keys used for exact top-k pack the index into 31 bits (see reference.pack_topk_keys).
MAX_ROWS = 2**31 - 1
# Register budget of the Triton top-k: the per-tile buffer holds next_pow2(k) keys per row.
MAX_TRITON_K = 1024
# pool_normalize keeps one whole (padded) hidden row in registers.
MAX_TRITON_POOL_D = 8192

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SEARCH_DTYPES = (torch.float32, torch.float16)
_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


class KernelInputError(ValueError):
    """A kernel entry point got an input it cannot handle; the message says which and why."""


# --------------------------------------------------------------------------- checks


def _check_tensor(name: str, x: object, ndim: int, shape_doc: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise KernelInputError(f"{name}: expected a torch.Tensor of shape {shape_doc}, got {type(x).__name__}")
    if x.dim() != ndim:
        raise KernelInputError(
            f"{name}: expected {ndim} dims {shape_doc}, got shape {tuple(x.shape)}; "
            f"reshape it (e.g. unsqueeze(0) for a single row)"
        )
    return x


def _check_dtype(name: str, x: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if x.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise KernelInputError(f"{name}: dtype {str(x.dtype).replace('torch.', '')} is not supported; use one of {names}")


def _check_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        desc = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise KernelInputError(f"inputs are on different devices ({desc}); move them to one device with .to(device)")


def _check_dim_d(name: str, d: int) -> None:
    if d < 1:
        raise KernelInputError(f"{name}: the feature dimension D is 0; D must be >= 1")


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise KernelInputError(f"k: expected an int >= 1, got {type(k).__name__} {k!r}")
    if k < 1:
        raise KernelInputError(f"k: must be >= 1, got {k}; ask for at least one result")
    return k


def check_pool_normalize(hidden: torch.Tensor, mask: torch.Tensor) -> None:
    """Raise KernelInputError unless hidden is (B, T, D) float and mask is (B, T) int/bool."""
    _check_tensor("hidden", hidden, 3, "(B, T, D)")
    _check_tensor("mask", mask, 2, "(B, T)")
    _check_dtype("hidden", hidden, _FLOAT_DTYPES)
    _check_dtype("mask", mask, (torch.bool, *_INT_DTYPES))
    if tuple(mask.shape) != tuple(hidden.shape[:2]):
        raise KernelInputError(
            f"mask: shape {tuple(mask.shape)} does not match hidden's (B, T) = {tuple(hidden.shape[:2])}; "
            f"pass the attention mask of the same batch"
        )
    _check_dim_d("hidden", hidden.shape[2])
    _check_same_device(hidden=hidden, mask=mask)


def check_similarity_topk(queries: torch.Tensor, matrix: torch.Tensor, k: object) -> int:
    """Validate similarity_topk inputs; return k' = min(k, N)."""
    _check_tensor("queries", queries, 2, "(B, D)")
    _check_tensor("matrix", matrix, 2, "(N, D)")
    _check_dtype("queries", queries, _SEARCH_DTYPES)
    _check_dtype("matrix", matrix, _SEARCH_DTYPES)
    if queries.shape[1] != matrix.shape[1]:
        raise KernelInputError(
            f"queries: D = {queries.shape[1]} does not match matrix D = {matrix.shape[1]}; "
            f"embed queries with the model that built the matrix"
        )
    _check_dim_d("queries", queries.shape[1])
    if matrix.shape[0] > MAX_ROWS:
        raise KernelInputError(f"matrix: N = {matrix.shape[0]} rows exceeds the limit {MAX_ROWS}; shard the matrix")
    _check_same_device(queries=queries, matrix=matrix)
    return min(_check_k(k), matrix.shape[0])


def check_route_sources(
    queries: torch.Tensor,
    centroids: torch.Tensor,
    centroid_source: torch.Tensor,
    source_scale: torch.Tensor,
    k: object,
    centroid_weight: torch.Tensor | None,
) -> int:
    """Validate route_sources inputs (including source ids in [0, S)); return k' = min(k, S)."""
    _check_tensor("queries", queries, 2, "(B, D)")
    _check_tensor("centroids", centroids, 2, "(C, D)")
    _check_tensor("centroid_source", centroid_source, 1, "(C,)")
    _check_tensor("source_scale", source_scale, 1, "(S,)")
    _check_dtype("queries", queries, _SEARCH_DTYPES)
    _check_dtype("centroids", centroids, _SEARCH_DTYPES)
    _check_dtype("centroid_source", centroid_source, _INT_DTYPES)
    _check_dtype("source_scale", source_scale, _SEARCH_DTYPES)
    if queries.shape[1] != centroids.shape[1]:
        raise KernelInputError(
            f"queries: D = {queries.shape[1]} does not match centroids D = {centroids.shape[1]}; "
            f"embed queries with the model that built the centroids"
        )
    _check_dim_d("queries", queries.shape[1])
    n_c, n_s = centroids.shape[0], source_scale.shape[0]
    if centroid_source.shape[0] != n_c:
        raise KernelInputError(
            f"centroid_source: {centroid_source.shape[0]} entries but centroids has C = {n_c} rows; "
            f"give one source id per centroid"
        )
    tensors = {"queries": queries, "centroids": centroids, "centroid_source": centroid_source,
               "source_scale": source_scale}
    if centroid_weight is not None:
        _check_tensor("centroid_weight", centroid_weight, 1, "(C,)")
        _check_dtype("centroid_weight", centroid_weight, _SEARCH_DTYPES)
        if centroid_weight.shape[0] != n_c:
            raise KernelInputError(
                f"centroid_weight: {centroid_weight.shape[0]} entries but centroids has C = {n_c} rows; "
                f"give one weight per centroid or None"
            )
        tensors["centroid_weight"] = centroid_weight
    _check_same_device(**tensors)
    if n_c > 0:
        lo, hi = int(centroid_source.min()), int(centroid_source.max())
        if lo < 0 or hi >= n_s:
            raise KernelInputError(
                f"centroid_source: ids must lie in [0, S) = [0, {n_s}), got min {lo} max {hi}; "
                f"source_scale needs one entry per source"
            )
    return min(_check_k(k), n_s)


def check_dedup_mask(embeddings: torch.Tensor, threshold: object) -> float:
    """Validate dedup_mask inputs; return the threshold as a float."""
    _check_tensor("embeddings", embeddings, 2, "(N, D)")
    _check_dtype("embeddings", embeddings, _FLOAT_DTYPES)
    _check_dim_d("embeddings", embeddings.shape[1])
    if embeddings.shape[0] > MAX_ROWS:
        raise KernelInputError(f"embeddings: N = {embeddings.shape[0]} exceeds the limit {MAX_ROWS}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise KernelInputError(f"threshold: expected a float in (-1, 1], got {type(threshold).__name__}")
    t = float(threshold)
    if not (-1.0 < t <= 1.0):  # also rejects NaN
        raise KernelInputError(
            f"threshold: cosine threshold must lie in (-1, 1], got {threshold}; "
            f"{DEFAULT_DEDUP_THRESHOLD} is the paper's default"
        )
    return t


# --------------------------------------------------------------------------- backend choice


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when ``import triton`` works (it is optional on CPU-only installs)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def interpreter_enabled() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1 before start)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def resolve_backend(op: str, backend: str | None, *tensors: torch.Tensor) -> str:
    """Return ``"torch"`` or ``"triton"`` for ``op`` on these tensors (see the module docstring)."""
    choice = backend if backend is not None else os.environ.get(ENV_BACKEND) or "auto"
    if choice not in BACKENDS:
        source = "backend" if backend is not None else f"${ENV_BACKEND}"
        raise KernelInputError(f"{source}: unknown kernel backend {choice!r}; use one of {', '.join(BACKENDS)}")
    on_cuda = all(t.is_cuda for t in tensors)
    if choice == "auto":
        return "triton" if on_cuda and TRITON_BY_DEFAULT[op] and triton_available() else "torch"
    if choice == "triton":
        if not triton_available():
            raise KernelInputError("backend='triton': triton does not import here; use backend='torch'")
        if not on_cuda and not interpreter_enabled():
            raise KernelInputError(
                "backend='triton': tensors are on the CPU; move them to CUDA, or start Python with "
                "TRITON_INTERPRET=1 (slow, for tests), or use backend='torch'"
            )
    return choice


# --------------------------------------------------------------------------- entry points


def pool_normalize(hidden: torch.Tensor, mask: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """Masked mean pooling over tokens, then L2 normalisation (eps 1e-12).

    Args:
        hidden: (B, T, D) token embeddings, float32 / float16 / bfloat16.
        mask: (B, T) attention mask, bool or integer; a non-zero entry marks a real token.
        backend: None / "auto", "torch" or "triton" (see the module docstring).

    Returns:
        (B, D) float32 unit vectors; a row whose mask is all zero comes back as zeros.
    """
    check_pool_normalize(hidden, mask)
    if resolve_backend("pool_normalize", backend, hidden, mask) == "triton":
        if hidden.shape[2] <= MAX_TRITON_POOL_D or backend == "triton":
            from .pool_normalize_kernel import _pool_normalize_launch

            return _pool_normalize_launch(hidden, mask)
    return reference.pool_normalize_ref(hidden, mask)


def similarity_topk(
    queries: torch.Tensor, matrix: torch.Tensor, k: int, *, backend: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k inner products of each query against every matrix row.

    Args:
        queries: (B, D) float32 / float16.
        matrix: (N, D) float32 / float16, same device as ``queries``.
        k: results per query, >= 1. It is clamped to N: k' = min(k, N).
        backend: None / "auto", "torch" or "triton".

    Returns:
        (scores (B, k') float32, indices (B, k') int64), best first; equal scores are
        ordered by the lower index. Products accumulate in float32.
    """
    k_eff = check_similarity_topk(queries, matrix, k)
    if resolve_backend("similarity_topk", backend, queries, matrix) == "triton":
        if k_eff <= MAX_TRITON_K or backend == "triton":
            from .similarity_topk_kernel import _similarity_topk_launch

            return _similarity_topk_launch(queries, matrix, k_eff)
    return reference.similarity_topk_ref(queries, matrix, k_eff)


def route_sources(
    queries: torch.Tensor,
    centroids: torch.Tensor,
    centroid_source: torch.Tensor,
    source_scale: torch.Tensor,
    k: int,
    *,
    centroid_weight: torch.Tensor | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Score sources by their best centroid and return the top-k sources per query.

    ``score[b, s] = source_scale[s] * max_{c: source(c) = s} (weight[c] * <q_b, centroid_c>)``;
    a source without centroids scores -inf.

    Args:
        queries: (B, D) float32 / float16.
        centroids: (C, D) float32 / float16.
        centroid_source: (C,) integer source id of each centroid, in [0, S).
        source_scale: (S,) float multiplier per source.
        k: sources per query, >= 1, clamped to S: k' = min(k, S).
        centroid_weight: optional (C,) float multiplier per centroid (default 1), used to
            down-weight "mix-in" centroids.
        backend: None / "auto", "torch" or "triton".

    Returns:
        (scores (B, k') float32, source ids (B, k') int64), best first, ties by lower id.
    """
    k_eff = check_route_sources(queries, centroids, centroid_source, source_scale, k, centroid_weight)
    extra = (centroid_weight,) if centroid_weight is not None else ()
    if resolve_backend("route_sources", backend, queries, centroids, centroid_source, source_scale, *extra) == "triton":
        from .route_sources_kernel import _route_sources_launch

        return _route_sources_launch(queries, centroids, centroid_source, source_scale, k_eff, centroid_weight)
    return reference.route_sources_ref(queries, centroids, centroid_source, source_scale, k_eff,
                                       centroid_weight=centroid_weight)


def dedup_mask(
    embeddings: torch.Tensor, threshold: float = DEFAULT_DEDUP_THRESHOLD, *, backend: str | None = None
) -> torch.Tensor:
    """Greedy near-duplicate removal over passages in rank order.

    Passage i is dropped when ``<e_i, e_j> >= threshold`` for some *kept* j < i. The inner
    product is the cosine only if the rows are L2-normalised: the caller must normalise
    (the embedder's output already is); this function does not.

    Args:
        embeddings: (N, D) float32 / float16 / bfloat16, best-ranked first.
        threshold: cosine threshold in (-1, 1]; the paper's 0.8 by default.
        backend: None / "auto", "torch" or "triton".

    Returns:
        (N,) bool keep-mask on the embeddings' device; the first passage is always kept.
    """
    t = check_dedup_mask(embeddings, threshold)
    if resolve_backend("dedup_mask", backend, embeddings) == "triton":
        from .dedup_mask_kernel import _dedup_mask_launch

        return _dedup_mask_launch(embeddings, t)
    return reference.dedup_mask_ref(embeddings, t)
