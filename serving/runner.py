"""Runners: execute one batch of already-tokenized items on one device.

The bottom layer of the server (STYLE.md, "Serving"): ``http.py`` validates and tokenizes a
request, ``batcher.py`` packs items from many requests into a batch, and a runner here turns
that batch into results. A runner knows nothing of requests, queues or HTTP; it is the
batcher's ``run_batch``::

    runner = EmbeddingRunner(embedder)
    batcher = DynamicBatcher(runner.run, config=BatcherConfig(...))
    vector = batcher.submit(token_ids, length=len(token_ids)).result()   # (D,) float32

Runners here:

* ``EmbeddingRunner``: token ids -> vectors with the torch ``Embedder`` (the index's model);
* ``BundleEmbedder``: texts -> vectors with an ``embed`` bundle (``models.runtime``);
* ``RerankRunner``: (query, passage) pairs -> scores with a ``rerank`` bundle;
* ``call_each``: zero-argument calls run one by one (decompose, cite, images, search: models
  that do not batch across requests still get the batcher's bounded queue and timeout).

Bundles tokenize inside ``encode`` / ``score_pairs``; the HTTP layer counts tokens first (in a
worker thread, ``count_tokens``) for the batcher's packing and the length limits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from searchsmith.models.errors import RunnerError, ValidationError

if TYPE_CHECKING:
    from searchsmith.models.runtime import Bundle
    from searchsmith.serving.embedder import Embedder

__all__ = ["BundleEmbedder", "CallOutcome", "EmbeddingRunner", "RerankRunner", "call_each",
           "count_tokens"]


class EmbeddingRunner:
    """Embeds batches of token-id lists with an ``Embedder``'s model, on its device.

    The batch arrives bounded by the batcher (``max_batch_size``, ``max_batch_tokens``); it
    runs as padded forward passes over groups of similar length, closed before their real
    tokens fall below the embedder's ``min_padding_efficiency`` (as ``Embedder.encode``
    packs): a title batched with a whole document would otherwise cost a document. On the
    demo corpus's mixed lengths (2 CPU cores) one padded pass over 13 requests took 47 ms per
    item against 25 ms one at a time.

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
        from searchsmith.models.batching import pack_batches

        efficiency = float(getattr(getattr(self.embedder, "config", None), "min_padding_efficiency", 0.75))
        widest = max(map(len, ids))  # the whole batch padded: a budget no group exceeds
        groups = pack_batches([len(x) for x in ids], widest * len(ids), len(ids), efficiency)
        try:
            vectors = np.zeros((len(ids), self.dim), dtype=np.float32)
            with torch.inference_mode():
                # Embedder.embed_ids is the embedder's own padded forward + pooling; reusing it
                # keeps server vectors identical to Embedder.encode (tests compare them).
                for group in groups:
                    vectors[group] = self.embedder.embed_ids([ids[i] for i in group]).float().numpy()
        except Exception as exc:
            raise RunnerError(
                f"runner[{self.model_name}]: forward pass failed on a batch of {len(ids)} "
                f"items (longest {max(map(len, ids))} tokens): {type(exc).__name__}: {exc}"
            ) from exc
        with self._lock:
            self.batches_run += 1
        return np.ascontiguousarray(vectors, dtype=np.float32)

    __call__ = run


# ---- bundles -------------------------------------------------------------------------------


def count_tokens(tokenizer: Any, first: Sequence[str], second: Sequence[str] | None = None) -> list[int]:
    """Token count of each text (or text pair), special tokens included, without truncation.

    Args:
        tokenizer: a Hugging Face tokenizer (a bundle's ``.tokenizer``), or None: then the
            count is estimated as words + 2 (a bundle without a tokenizer, e.g. a test fake;
            the count only steers packing and the length limit, never the model's input).
        first: N texts.
        second: N second texts of pairs (rerank, attribution), or None.

    Returns:
        N counts.
    """
    if tokenizer is None:
        if second is None:
            return [len(t.split()) + 2 for t in first]
        return [len(a.split()) + len(b.split()) + 3 for a, b in zip(first, second, strict=True)]
    from searchsmith.models.tokenizer import tokenizer_lock

    kwargs = {"truncation": False, "return_attention_mask": False, "return_token_type_ids": False}
    with tokenizer_lock(tokenizer):  # a batch may be encoding with this tokenizer on another thread
        enc = tokenizer(list(first), **kwargs) if second is None else tokenizer(list(first), list(second), **kwargs)
    return [len(ids) for ids in enc["input_ids"]]


def bundle_max_length(bundle: object, default: int = 512) -> int:
    """Tokens per input of a bundle (``max_length``, else the manifest's, else ``default``)."""
    value = getattr(bundle, "max_length", None)
    if value is None:
        value = (getattr(bundle, "manifest", None) or {}).get("max_length", default)
    return int(value)


def _text_bundle(bundle: Any, task: str, who: str) -> tuple[Any, int]:
    """(tokenizer or None, tokens per input) of a text bundle, refusing one exported for another task.

    A bundle without a ``task`` attribute is taken to be for ``task``.
    """
    if getattr(bundle, "task", task) != task:
        article = "an" if task[0] in "aeiou" else "a"
        raise ValidationError(f"{who}: got a {bundle.task!r} bundle, expected {article} {task!r} bundle")
    return getattr(bundle, "tokenizer", None), bundle_max_length(bundle)


class BundleEmbedder:
    """An ``embed`` bundle with what the HTTP layer needs: name, dim, limits, token counts.

    Items are texts (the bundle tokenizes them itself, truncating to ``max_seq_length``).

    Args:
        bundle: a loaded ``embed`` bundle (``encode(texts) -> (n, D)``).
        name: the model name reported by /v1/embeddings.
    """

    def __init__(self, bundle: Bundle, name: str = "embedder") -> None:
        self.tokenizer, self.max_seq_length = _text_bundle(bundle, "embed", "BundleEmbedder")
        self.bundle = bundle
        self.model_name = name
        manifest = getattr(bundle, "manifest", None) or {}
        dim = manifest.get("embedding_dim")
        self.dim = int(dim) if dim is not None else int(np.asarray(bundle.encode(["dimension probe"])).shape[1])

    @property
    def base_model(self) -> str | None:
        """The model the bundle was exported from (``manifest["base_model"]``): an index built
        with that model can be searched with this bundle's query vectors."""
        return (getattr(self.bundle, "manifest", None) or {}).get("base_model")

    def lengths(self, texts: Sequence[str]) -> list[int]:
        """Untruncated token counts of ``texts``."""
        return count_tokens(self.tokenizer, texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` -> (N, D) float32 unit rows (the torch ``Embedder``'s API, so the
        pipeline, the router and the index can use a bundle for their query vectors).

        Raises:
            ValidationError: ``texts`` is one string, not a list.
            RunnerError: the bundle failed.
        """
        if isinstance(texts, str):
            raise ValidationError("embed: expected a list of strings, got one string (wrap it in a list)")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.run(texts)

    def run(self, batch: Sequence[str]) -> np.ndarray:
        """Embed one batch of texts -> (B, D) float32 unit rows, in batch order.

        Raises:
            RunnerError: the bundle failed.
        """
        try:
            vectors = np.asarray(self.bundle.encode(list(batch)), dtype=np.float32)  # (B, D)
        except Exception as exc:
            raise RunnerError(f"runner[{self.model_name}]: encode failed on a batch of {len(batch)} texts: "
                              f"{type(exc).__name__}: {exc}") from exc
        return vectors

    __call__ = run


class RerankRunner:
    """Scores batches of (query, passage) pairs with a ``rerank`` bundle (one logit each).

    Pairs from many requests share one call: the batcher packs them by token length.

    Args:
        bundle: a loaded ``rerank`` bundle (``score_pairs(pairs) -> (n,)``).
        name: used in error messages.
    """

    def __init__(self, bundle: Bundle, name: str = "reranker") -> None:
        self.tokenizer, self.max_length = _text_bundle(bundle, "rerank", "RerankRunner")
        self.bundle = bundle
        self.name = name

    def lengths(self, query: str, documents: Sequence[str]) -> list[int]:
        """Untruncated token counts of the pairs (query, document_i)."""
        return count_tokens(self.tokenizer, [query] * len(documents), documents)

    def run(self, batch: Sequence[tuple[str, str]]) -> np.ndarray:
        """Score one batch -> (B,) float32 logits (higher = more relevant), in batch order.

        Raises:
            RunnerError: the bundle failed.
        """
        try:
            scores = np.asarray(self.bundle.score_pairs(list(batch)), dtype=np.float32).reshape(-1)  # (B,)
        except Exception as exc:
            raise RunnerError(f"runner[{self.name}]: score_pairs failed on a batch of {len(batch)} pairs: "
                              f"{type(exc).__name__}: {exc}") from exc
        return scores

    __call__ = run


# ---- unbatched calls -------------------------------------------------------------------------


class CallOutcome:
    """What one call returned or raised (so one failing request does not fail its batch-mates,
    and a ValidationError keeps its class on the way back to the HTTP layer)."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def call_each(batch: Sequence[Callable[[], Any]]) -> list[CallOutcome]:
    """Run zero-argument calls one after the other; the ``run_batch`` of unbatched models."""
    out = []
    for fn in batch:
        try:
            out.append(CallOutcome(fn()))
        except Exception as exc:  # returned, re-raised in the request that made the call
            out.append(CallOutcome(error=exc))
    return out
