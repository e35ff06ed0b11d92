"""Entry points for the search kernels: validate once, then run Triton or the torch twin.

The index, router and pipeline call only these functions. ``similarity_topk_candidates`` (a
reduced-precision candidate pass re-scored exactly, ``topk_candidates.py``) is pure torch
on every device; for the others the backend is chosen per call:

* ``backend=None`` / ``"auto"``: ``$SEARCHSMITH_KERNEL_BACKEND`` if set, else Triton when
  every tensor is on CUDA, ``triton`` imports and the op is in ``TRITON_BY_DEFAULT``;
  otherwise the torch reference (also the CPU path).
* ``"torch"``: always the reference in ``kernels/reference.py``.
* ``"triton"``: always the Triton kernel. On a CPU this only works when ``TRITON_INTERPRET=1``
  was set before Python started (the tests do that); otherwise it raises.

Input checks, limits, ``KernelInputError`` and the backend probes live in ``checks.py``
(shared with the Triton kernels, which therefore never import this module); they are
re-exported here under their old names. This package imports nothing from the rest of the
project; callers above map ``KernelInputError`` to the project's ``ValidationError``.
"""

from __future__ import annotations

import torch

from . import reference, topk_candidates
from .backend import BACKENDS, ENV_BACKEND, backend_problem, env_backend
from .checks import (
    DEFAULT_DEDUP_THRESHOLD,
    DEFAULT_OVERSAMPLE,
    MAX_ROWS,
    MAX_TRITON_K,
    MAX_TRITON_POOL_D,
    KernelInputError,
    check_candidate_copy,
    check_dedup_mask,
    check_pool_normalize,
    check_pool_normalize_packed,
    check_route_sources,
    check_similarity_topk,
    check_similarity_topk_candidates,
    interpreter_enabled,
    triton_available,
)

# Public names of this module, including those defined in ``checks`` and re-exported here
# so that existing imports from ``dispatch`` keep working.
__all__ = [
    "BACKENDS",
    "DEFAULT_DEDUP_THRESHOLD",
    "DEFAULT_OVERSAMPLE",
    "ENV_BACKEND",
    "MAX_ROWS",
    "MAX_TRITON_K",
    "MAX_TRITON_POOL_D",
    "TRITON_BY_DEFAULT",
    "KernelInputError",
    "candidate_copy",
    "check_candidate_copy",
    "check_dedup_mask",
    "check_pool_normalize",
    "check_route_sources",
    "check_similarity_topk",
    "check_similarity_topk_candidates",
    "dedup_mask",
    "interpreter_enabled",
    "pool_normalize",
    "pool_normalize_packed",
    "resolve_backend",
    "route_sources",
    "similarity_topk",
    "similarity_topk_candidates",
    "triton_available",
]

# Ops whose Triton kernel is the "auto" choice on CUDA: a kernel is the default only where it
# beats torch in a measured run of ``searchsmith profile kernels``. On the H200 reference
# machine (``searchsmith profile --suite gpu``, serving/profiling/RESULTS.md; two runs, same
# results within noise), Triton against the torch twin that "auto" would run otherwise:
#   pool_normalize   4/4 workloads faster, median 2.4x
#   dedup_mask       2/2 faster, median 2.2x
#   similarity_topk  20/21 faster, median 4.1x (slower only at float32, B = 256: 0.70x).
#                    A plain fp16 matmul + topk was 2.7x faster still (median), but it
#                    rounds scores to fp16 and does not keep the exact tie order.
#   route_sources    2/6 faster (median 0.87x) in one run, 4/6 (median 1.07x) in the
#                    other: within run-to-run noise of 1x, so it stays on torch.
# ``backend="triton"|"torch"`` or SEARCHSMITH_KERNEL_BACKEND selects one explicitly.
# pool_normalize_packed is not listed: it has not been measured on the GPU yet, so "auto"
# runs its torch twin (one index_add) everywhere; see PACKED_POOL_TRITON_BY_DEFAULT.
TRITON_BY_DEFAULT: dict[str, bool] = {
    "pool_normalize": True,
    "similarity_topk": True,
    "route_sources": False,
    "dedup_mask": True,
}

# The "auto" choice for pool_normalize_packed on CUDA. False until a measured run shows the
# Triton kernel beating ``reference.pool_normalize_packed_ref`` there.
PACKED_POOL_TRITON_BY_DEFAULT = False


# --------------------------------------------------------------------------- backend choice


def resolve_backend(op: str, backend: str | None, *tensors: torch.Tensor) -> str:
    """Return ``"torch"`` or ``"triton"`` for ``op`` on these tensors (see the module docstring)."""
    choice = backend if backend is not None else env_backend()
    problem = backend_problem(choice, "backend" if backend is not None else f"${ENV_BACKEND}")
    if problem is not None:
        raise KernelInputError(problem)
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


def pool_normalize_packed(hidden: torch.Tensor, cu_seqlens: torch.Tensor, *, backend: str | None = None
                          ) -> torch.Tensor:
    """Mean pooling over each packed segment, then L2 normalisation (eps 1e-12).

    The padding-free twin of ``pool_normalize``: B sequences concatenated along the token
    axis, sequence b being ``hidden[cu_seqlens[b]:cu_seqlens[b + 1]]``.

    Args:
        hidden: (T, D) token embeddings of B concatenated sequences, float32 / float16 / bfloat16.
        cu_seqlens: (B+1,) int32 / int64 offsets, starting at 0, non-decreasing, ending at T.
        backend: None / "auto", "torch" or "triton" (see the module docstring; "auto" picks the
            torch twin on every device until the kernel is measured, PACKED_POOL_TRITON_BY_DEFAULT).

    Returns:
        (B, D) float32 unit vectors; an empty segment comes back as zeros.
    """
    check_pool_normalize_packed(hidden, cu_seqlens)
    choice = backend if backend is not None else env_backend()
    if choice == "auto" and not PACKED_POOL_TRITON_BY_DEFAULT:
        choice = "torch"
    if resolve_backend("pool_normalize", choice, hidden, cu_seqlens) == "triton":
        if hidden.shape[1] <= MAX_TRITON_POOL_D or backend == "triton":
            from .pool_normalize_kernel import _pool_normalize_packed_launch

            return _pool_normalize_packed_launch(hidden, cu_seqlens)
    return reference.pool_normalize_packed_ref(hidden, cu_seqlens)


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


def similarity_topk_candidates(
    queries: torch.Tensor,
    matrix: torch.Tensor,
    k: int,
    *,
    oversample: int = DEFAULT_OVERSAMPLE,
    candidate_matrix: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k inner products via reduced-precision candidates re-scored exactly in float32.

    Scores every row in float16 (CUDA) or bfloat16 (CPU), keeps the best
    M = min(k' * oversample, N) per query and returns the exact float32 top k' of those
    (``kernels/topk_candidates.py`` explains the choice of precision). Returned scores are
    float32 products like ``similarity_topk``'s, with the same tie order; a true top-k row
    is missed only if its reduced-precision score ranked below M others. With M >= N it is
    ``similarity_topk``'s torch path. Pure torch on every device: no ``backend`` argument.

    Args:
        queries: (B, D) float32 / float16.
        matrix: (N, D) float32 / float16, same device as ``queries``.
        k: results per query, >= 1, clamped to N: k' = min(k, N).
        oversample: candidates per result, >= 1 (``DEFAULT_OVERSAMPLE``).
        candidate_matrix: optional (N, D) float16 / bfloat16 copy of ``matrix`` from
            ``candidate_copy(matrix)``, built once; without it each call casts the matrix.

    Returns:
        (scores (B, k') float32, indices (B, k') int64), best first; equal scores are
        ordered by the lower index.
    """
    k_eff, m = check_similarity_topk_candidates(queries, matrix, k, oversample, candidate_matrix)
    return topk_candidates.similarity_topk_candidates_torch(queries, matrix, k_eff, m, candidate_matrix)


def candidate_copy(matrix: torch.Tensor) -> torch.Tensor:
    """(N, D) float32 / float16 -> its reduced-precision copy for ``similarity_topk_candidates``."""
    check_candidate_copy(matrix)
    return topk_candidates.candidate_copy(matrix)


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
