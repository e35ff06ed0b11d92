"""Runners: execute one batch of already-tokenized items on one device.

The bottom layer of the server (STYLE.md, "Serving"): ``http.py`` validates and tokenizes a
request, ``batcher.py`` packs items from many requests into a batch, and a runner here turns
that batch into results. A runner knows nothing of requests, queues or HTTP; it is the
batcher's ``run_batch``::

    runner = EmbeddingRunner(embedder)
    batcher = DynamicBatcher(runner.run, config=BatcherConfig(...))
    vector = batcher.submit(token_ids, length=len(token_ids)).result()   # (D,) float32
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from searchsmith.models.errors import RunnerError, ValidationError

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder

__all__ = ["EmbeddingRunner"]


class EmbeddingRunner:
    """Embeds batches of token-id lists with an ``Embedder``'s model, on its device.

    The batch arrives already packed by the batcher (``max_batch_size``,
    ``max_batch_tokens``), so it runs as one padded forward pass; it is not re-split here.

    Args:
        embedder: a loaded ``searchsmith.serving.embedder.Embedder`` (model, tokenizer,
            device, pooling).
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.dim = int(embedder.dim)
        self.max_seq_length = int(embedder.max_seq_length)
        self.model_name = str(embedder.model_name)
        # Counted by run(); read by tests and warm-up checks (a plain int under a lock because
        # several batcher workers may share one runner).
        self._lock = threading.Lock()
        self.batches_run = 0

    def run(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        """Embed one batch.

        Args:
            batch: B token-id lists (special tokens included, as ``Embedder.tokenize``
                returns them), each 1..max_seq_length long.

        Returns:
            (B, D) float32, L2-normalised rows, in batch order (row i is item i).

        Raises:
            ValidationError: an item is empty or longer than the model's max_seq_length (a
                bug in the caller: the HTTP layer truncates or rejects before this).
            RunnerError: the forward pass failed.
        """
        import torch

        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids: list[list[int]] = []
        for i, item in enumerate(batch):
            if not 1 <= len(item) <= self.max_seq_length:
                raise ValidationError(
                    f"runner[{self.model_name}]: item {i} has {len(item)} tokens, expected "
                    f"1..{self.max_seq_length} (max_seq_length); tokenize with "
                    "Embedder.tokenize, which truncates"
                )
            ids.append(list(item))
        try:
            with torch.inference_mode():
                # Embedder.embed_ids is the embedder's own padded forward + pooling; reusing it
                # keeps server vectors identical to Embedder.encode (tests compare them).
                vectors = self.embedder.embed_ids(ids).numpy()  # (B, D)
        except Exception as exc:
            raise RunnerError(
                f"runner[{self.model_name}]: forward pass failed on a batch of {len(ids)} "
                f"items (longest {max(map(len, ids))} tokens): {type(exc).__name__}: {exc}"
            ) from exc
        with self._lock:
            self.batches_run += 1
        return np.ascontiguousarray(vectors, dtype=np.float32)

    __call__ = run
