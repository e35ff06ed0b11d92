"""searchsmith.kernels: Triton kernels with torch twins, and the dispatch that picks between them.

Public entry points (see ``kernels/dispatch.py`` for the backend rules):

* ``pool_normalize(hidden, mask)``: (B, T, D), (B, T) -> (B, D) masked mean, L2-normalised.
* ``pool_normalize_packed(hidden, cu_seqlens)``: (T, D), (B+1,) -> (B, D), the same over packed sequences.
* ``similarity_topk(queries, matrix, k)``: exact top-k inner products, (B, k') scores and ids.
* ``similarity_topk_candidates(queries, matrix, k, oversample=4)``: the same from float16 /
  bfloat16 candidates re-scored exactly in float32 (``candidate_copy(matrix)`` builds their rows).
* ``route_sources(queries, centroids, centroid_source, source_scale, k)``: top-k sources.
* ``dedup_mask(embeddings, threshold)``: greedy near-duplicate keep-mask.

Each but ``similarity_topk_candidates`` (pure torch) takes ``backend=None | "auto" | "torch" |
"triton"``; ``$SEARCHSMITH_KERNEL_BACKEND`` sets the default. Bad inputs raise ``KernelInputError`` (a ``ValueError``). This package
imports nothing else from the project, and ``triton`` only when a Triton path runs.
"""

from __future__ import annotations

if __name__ == "kernels":
    # Imported by its folder's name: the repository root is on sys.path (``python -m pytest``,
    # ``python -c`` or a notebook started there) and someone ran ``import kernels``, which means
    # Hugging Face's ``kernels`` package (transformers >= 5.25 imports it). Hand the name over
    # to that package; this one is only ever imported as ``searchsmith.kernels``.
    from ._shadow import hand_over

    hand_over(__file__)  # the rest of this file then runs on a module nobody holds

# The ops are loaded on first use (PEP 562): importing the package, or its torch-free
# ``host`` module, does not import torch.


def __getattr__(name: str):
    if name in __all__:
        from . import dispatch

        return getattr(dispatch, name)
    raise AttributeError(f"module 'searchsmith.kernels' has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "DEFAULT_DEDUP_THRESHOLD",
    "DEFAULT_OVERSAMPLE",
    "ENV_BACKEND",
    "TRITON_BY_DEFAULT",
    "KernelInputError",
    "candidate_copy",
    "dedup_mask",
    "pool_normalize",
    "pool_normalize_packed",
    "resolve_backend",
    "route_sources",
    "similarity_topk",
    "similarity_topk_candidates",
]

