"""Input checks, limits and backend probes shared by the kernel entry points and the Triton kernels.

``dispatch.py`` validates every call with these functions before it picks a backend, and
each ``*_kernel.py`` validates again in its public wrapper and reads its register limits
from here. Keeping them in their own module means the kernels never import the dispatcher
that loads them (no import loop). This module imports only torch and the standard library,
so it defines its own ``KernelInputError``; callers above map it to the project's
``ValidationError``.
"""

from __future__ import annotations

import functools
import os

import torch

# Greedy near-duplicate threshold from the Xinyu paper (cosine 0.8). This is only the
# function default; the pipeline passes its own config value.
DEFAULT_DEDUP_THRESHOLD = 0.8

# Keys used for exact top-k pack the index into 31 bits (see reference.pack_topk_keys).
MAX_ROWS = 2**31 - 1
# Register budget of the Triton top-k: the per-tile buffer holds next_pow2(k) keys per row.
MAX_TRITON_K = 1024
# pool_normalize keeps one whole (padded) hidden row in registers.
MAX_TRITON_POOL_D = 8192
# similarity_topk_candidates re-scores k * oversample reduced-precision candidates exactly.
# On 16 random unit queries against 1e5 unit rows (D = 384, bfloat16 candidates, CPU),
# oversample 1 found 95.6% of the exact top 10 and 2 and 4 found all of the top 10 and top
# 100; 4 leaves a margin for real embeddings, which have more near-ties than random ones.
DEFAULT_OVERSAMPLE = 4

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SEARCH_DTYPES = (torch.float32, torch.float16)
_CANDIDATE_DTYPES = (torch.float16, torch.bfloat16)
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


def _check_query_dim(queries: torch.Tensor, name: str, rows: torch.Tensor) -> None:
    """Queries (B, D) must share a D >= 1 with the (N, D) rows ``name`` they are scored against."""
    if queries.shape[1] != rows.shape[1]:
        raise KernelInputError(
            f"queries: D = {queries.shape[1]} does not match {name} D = {rows.shape[1]}; "
            f"embed queries with the model that built the {name}"
        )
    _check_dim_d("queries", queries.shape[1])


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



def check_pool_normalize_packed(hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    """Raise KernelInputError unless hidden is (T, D) float and cu_seqlens a valid (B+1,) offset list.

    ``dispatch.pool_normalize_packed`` and the Triton launcher both call it.
    ``cu_seqlens`` must start at 0, never decrease and end at T: the launcher trusts it for
    its loads, so a bad offset list would read out of bounds. Checking the values costs one
    device-to-host copy of a bool.
    """
    _check_tensor("hidden", hidden, 2, "(T, D)")
    _check_tensor("cu_seqlens", cu_seqlens, 1, "(B+1,)")
    _check_dtype("hidden", hidden, (torch.float32, torch.float16, torch.bfloat16))
    _check_dtype("cu_seqlens", cu_seqlens, (torch.int32, torch.int64))
    _check_dim_d("hidden", hidden.shape[1])
    _check_same_device(hidden=hidden, cu_seqlens=cu_seqlens)
    if cu_seqlens.shape[0] == 0:
        raise KernelInputError("cu_seqlens: empty; it needs B+1 >= 1 entries, starting with 0 (use [0] for B = 0)")
    n_t = hidden.shape[0]
    bad = (cu_seqlens[0] != 0) | (cu_seqlens[-1] != n_t) | (cu_seqlens[1:] < cu_seqlens[:-1]).any()
    if bool(bad):
        head = cu_seqlens[:8].tolist()
        raise KernelInputError(
            f"cu_seqlens: must start at 0, never decrease and end at T = {n_t} (hidden's rows), got "
            f"{head}{' ...' if cu_seqlens.shape[0] > 8 else ''} ending at {int(cu_seqlens[-1])}; "
            f"build it as [0, *cumsum(lengths)]"
        )

def check_similarity_topk(queries: torch.Tensor, matrix: torch.Tensor, k: object) -> int:
    """Validate similarity_topk inputs; return k' = min(k, N)."""
    _check_tensor("queries", queries, 2, "(B, D)")
    _check_tensor("matrix", matrix, 2, "(N, D)")
    _check_dtype("queries", queries, _SEARCH_DTYPES)
    _check_dtype("matrix", matrix, _SEARCH_DTYPES)
    _check_query_dim(queries, "matrix", matrix)
    if matrix.shape[0] > MAX_ROWS:
        raise KernelInputError(f"matrix: N = {matrix.shape[0]} rows exceeds the limit {MAX_ROWS}; shard the matrix")
    _check_same_device(queries=queries, matrix=matrix)
    return min(_check_k(k), matrix.shape[0])


def check_candidate_copy(matrix: torch.Tensor) -> None:
    """Raise KernelInputError unless matrix is a (N, D) float32 / float16 search matrix."""
    _check_tensor("matrix", matrix, 2, "(N, D)")
    _check_dtype("matrix", matrix, _SEARCH_DTYPES)
    _check_dim_d("matrix", matrix.shape[1])


def check_similarity_topk_candidates(
    queries: torch.Tensor, matrix: torch.Tensor, k: object, oversample: object,
    candidate_matrix: torch.Tensor | None,
) -> tuple[int, int]:
    """Validate similarity_topk_candidates inputs; return (k' = min(k, N), M = min(k' * oversample, N))."""
    k_eff = check_similarity_topk(queries, matrix, k)
    if isinstance(oversample, bool) or not isinstance(oversample, int):
        raise KernelInputError(
            f"oversample: expected an int >= 1, got {type(oversample).__name__} {oversample!r}; "
            f"pass a whole number such as the default {DEFAULT_OVERSAMPLE}"
        )
    if oversample < 1:
        raise KernelInputError(
            f"oversample: must be >= 1, got {oversample}; k * oversample candidates are re-scored exactly "
            f"(default {DEFAULT_OVERSAMPLE}, 1 keeps only the reduced-precision top k)"
        )
    if candidate_matrix is not None:
        _check_tensor("candidate_matrix", candidate_matrix, 2, "(N, D)")
        _check_dtype("candidate_matrix", candidate_matrix, _CANDIDATE_DTYPES)
        if tuple(candidate_matrix.shape) != tuple(matrix.shape):
            raise KernelInputError(
                f"candidate_matrix: shape {tuple(candidate_matrix.shape)} does not match matrix's "
                f"{tuple(matrix.shape)}; build it from the same matrix with candidate_copy(matrix), or pass None"
            )
        _check_same_device(matrix=matrix, candidate_matrix=candidate_matrix)
    return k_eff, min(k_eff * oversample, matrix.shape[0])


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
    _check_query_dim(queries, "centroids", centroids)
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


# --------------------------------------------------------------------------- backend probes


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

