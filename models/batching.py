"""Length-aware batching shared by the torch embedder (``serving/embedder.py``) and the
bundle runtime (``models/runtime.py``): both pack tokenized inputs under a padded-token budget.
"""

from __future__ import annotations

from collections.abc import Sequence


def pack_batches(lengths: Sequence[int], max_batch_tokens: int, max_batch_size: int,
                 min_padding_efficiency: float = 0.0) -> list[list[int]]:
    """Group item indices into batches, longest first, under a padded-token budget.

    The cost of a batch is ``len(batch) * max(length)``: padding counts, since it is
    computed. A batch is also closed before its real tokens would fall below
    ``min_padding_efficiency`` of its padded tokens. An item longer than the budget goes
    alone (it is never dropped).

    Returns:
        Lists of indices into ``lengths``; every index appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    width = real = 0
    for i in order:
        n = lengths[i]
        if current:
            w = max(width, n)
            padded = (len(current) + 1) * w
            if (padded > max_batch_tokens or len(current) >= max_batch_size
                    or real + n < min_padding_efficiency * padded):
                batches.append(current)
                current, width, real = [], 0, 0
        current.append(i)
        width, real = max(width, n), real + n
    if current:
        batches.append(current)
    return batches


__all__ = ["pack_batches"]
