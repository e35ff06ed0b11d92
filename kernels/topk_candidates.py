"""Candidate-then-exact top-k: score every row at reduced precision, re-score the best few exactly.

Math: ``C_b = top-M_n <q_b, m_n>~`` (reduced precision, M = min(k * oversample, N)), then
``top-k_{n in C_b} <q_b, m_n>`` in float32, ties by the lower n. Pure torch on any device
(there is no Triton kernel for it): the candidate stage is one matmul + ``torch.topk`` per
chunk of rows, the exact stage a gather of (B, M, D) rows and a batched matrix-vector product.

The answer is the exact top-k (same ids, scores and tie order as
``reference.similarity_topk_ref``, up to float32 summation order) whenever every true top-k
row is among the M candidates. It can only miss a row whose reduced-precision score fell
below M others; ``oversample`` buys margin against that, and ``searchsmith profile kernels``
reports the recall@k it achieved. Ties at the candidate cut-off are broken by ``torch.topk``
(no lower-index rule there); the exact stage restores the rule among the candidates.

Reduced precision, chosen per device by ``candidate_dtype``:

* CUDA: float16 (tensor cores; 10 mantissa bits; unit-norm embeddings are far inside its range).
* CPU: bfloat16. torch runs bf16 matmuls through oneDNN, which uses AVX512-BF16 / AMX where
  the CPU has them: on the 2-core AMD EPYC dev machine (avx512_bf16) a B = 16 x 100k x 384
  product took 15 ms in bf16 against 56 ms in float32. float16 matmuls on that CPU were
  slower than float32 (67 ms), and ``torch._int_mm`` (int8 with per-row scales folded in
  afterwards) was no faster than float32 (10 ms vs 12 ms at B = 1) while adding a
  quantisation step and a minimum batch. On a CPU without bf16 instructions oneDNN
  converts, and this path can be slower than the exact one: measure before choosing it.

Where it wins / loses (``searchsmith profile kernels --quick``, 2 shared AMD EPYC cores,
2026-12-02, two runs, recall@k 1.0 in all): 2.5-12x faster than the torch twin at k = 10
(N = 1e4 and 1e5, B = 1 and 16), but 0.71x and 0.23x at N = 1e4, B = 16, k = 100, where the
400 candidates per query are 4 % of the rows and the gather and the bfloat16 top-400 cost
more than they save. Not measured on a GPU yet; nothing calls it by default.

Keep a reduced-precision copy of the matrix (``candidate_copy``) next to the float32 one, as
an index would, and pass it as ``candidate_matrix``; without it each call casts the matrix
chunk by chunk, which costs about as much as the exact product it was meant to avoid.
"""

from __future__ import annotations

import torch

from .reference import (
    SIMILARITY_CHUNK_ELEMENTS,
    empty_topk,
    merge_topk_keys,
    pack_topk_keys,
    similarity_topk_ref,
)

# The candidate stage scores this many (query, row) pairs per matmul at most: the (B, chunk)
# 16-bit scores stay under 128 MB, so B = 1 scans a 4e6-row matrix in a few chunks.
CANDIDATE_CHUNK_ELEMENTS = 1 << 26


def candidate_dtype(device: torch.device) -> torch.dtype:
    """The reduced precision of the candidate stage: float16 on CUDA, bfloat16 elsewhere (see the module docstring)."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def candidate_copy(matrix: torch.Tensor) -> torch.Tensor:
    """(N, D) -> the same rows in ``candidate_dtype(matrix.device)``; ``matrix`` itself if already so.

    Build it once per matrix and pass it to ``similarity_topk_candidates`` as ``candidate_matrix``.
    """
    return matrix.to(candidate_dtype(matrix.device))


def candidate_rows(queries: torch.Tensor, low: torch.Tensor, m: int, *, cast_rows: bool
                     ) -> torch.Tensor:
    """Indices (B, M) int64 of the M best rows of ``low`` (N, D) by reduced-precision score, any order.

    Args:
        queries: (B, D) queries, any float dtype (cast to ``low``'s dtype, or to the
            device's candidate dtype when ``cast_rows``).
        low: (N, D) rows: the reduced-precision copy, or the matrix itself when ``cast_rows``.
        m: candidates per query, 1 <= m <= N.
        cast_rows: cast each chunk of ``low`` to ``candidate_dtype`` first (no copy was given).
    """
    n_b, n = queries.shape[0], low.shape[0]
    dtype = candidate_dtype(low.device) if cast_rows else low.dtype
    q = queries.to(dtype)
    # A given copy needs no per-chunk cast, so only the (B, chunk) scores bound the chunk;
    # casting on the fly also bounds the (chunk, D) cast block.
    chunk = max(m, CANDIDATE_CHUNK_ELEMENTS // max(n_b, low.shape[1] if cast_rows else 1))
    values, indices = [], []
    for start in range(0, n, chunk):
        block = low[start:start + chunk].to(dtype)
        scores = q @ block.T  # (B, chunk), reduced precision
        top = torch.topk(scores, min(m, block.shape[0]), dim=1, sorted=False)
        values.append(top.values)
        indices.append(top.indices + start)
    if len(values) == 1:
        return indices[0]
    best = torch.topk(torch.cat(values, dim=1), m, dim=1, sorted=False).indices  # (B, M)
    return torch.cat(indices, dim=1).gather(1, best)


def exact_rescore(queries: torch.Tensor, matrix: torch.Tensor, candidates: torch.Tensor, k: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 scores of the (B, M) candidate rows, then their top k (scores, indices), ties by lower index."""
    n_b, m = candidates.shape
    q = queries.float()
    # Chunk the queries so the (B, M, D) float32 gather stays under SIMILARITY_CHUNK_ELEMENTS.
    step = max(1, SIMILARITY_CHUNK_ELEMENTS // max(1, m * matrix.shape[1]))
    keys = []
    for start in range(0, n_b, step):
        ids = candidates[start:start + step]  # (b, M)
        rows = matrix[ids.reshape(-1)].float().view(ids.shape[0], m, -1)  # (b, M, D)
        exact = torch.bmm(rows, q[start:start + step, :, None])[..., 0]  # (b, M) float32
        keys.append(pack_topk_keys(exact, ids))
    return merge_topk_keys(torch.cat(keys, dim=0), k)


def similarity_topk_candidates_torch(
    queries: torch.Tensor, matrix: torch.Tensor, k: int, m: int, candidate_matrix: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidates path after validation (``dispatch.similarity_topk_candidates`` calls this).

    Args:
        queries: (B, D) float32 / float16.
        matrix: (N, D) float32 / float16.
        k: k' = min(k, N), already clamped.
        m: candidates per query, min(k' * oversample, N).
        candidate_matrix: optional (N, D) float16 / bfloat16 copy of ``matrix``.

    Returns:
        (scores (B, k') float32, indices (B, k') int64), best first, ties by lower index.
    """
    n_b, n = queries.shape[0], matrix.shape[0]
    if n_b == 0 or k == 0:
        return empty_topk(n_b, k, queries.device)
    if m >= n:  # every row is a candidate: the reduced-precision pass would select nothing
        return similarity_topk_ref(queries, matrix, k)
    if candidate_matrix is None:  # cast chunk by chunk (a no-op for float16 on CUDA)
        low, cast_rows = matrix, matrix.dtype != candidate_dtype(matrix.device)
    else:
        low, cast_rows = candidate_matrix, False
    candidates = candidate_rows(queries, low, m, cast_rows=cast_rows)  # (B, M)
    return exact_rescore(queries, matrix, candidates, k)
