"""The reader's torch model (:class:`SpanReader`) and its torch runner (:class:`TorchReader`).

Windowing, decoding and passages are in :mod:`searchsmith.models.reader` (no torch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from searchsmith.models.errors import BundleError
from searchsmith.models.pretrained import load_complete, read_json
from searchsmith.models.reader import (
    ANSWER_KINDS,
    HEAD_FILE,
    META_FILE,
    LogitsFn,
    ReaderSettings,
    as_passage,
    read_passages,
)


class SpanReader(torch.nn.Module):
    """Encoder + start/end token heads + answer-kind head on ``[CLS]``.

    Args:
        encoder: a ``transformers`` encoder (``AutoModel``).
        head: ``{"span": {"weight", "bias"}, "kind": {"weight", "bias"}}`` of a saved model;
            None: fresh heads (small random weights, kind bias 0).
    """

    def __init__(self, encoder: Any, head: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        self.span = torch.nn.Linear(hidden, 2)
        self.kind = torch.nn.Linear(hidden, len(ANSWER_KINDS))
        if head is not None:
            for name, layer in (("span", self.span), ("kind", self.kind)):
                w = torch.tensor(head[name]["weight"], dtype=torch.float32)
                if tuple(w.shape) != tuple(layer.weight.shape):
                    raise BundleError(f"reader: {HEAD_FILE} {name} weights have shape {tuple(w.shape)}, the "
                                      f"encoder needs {tuple(layer.weight.shape)}; re-save it from a training run")
                with torch.no_grad():
                    layer.weight.copy_(w)
                    layer.bias.copy_(torch.tensor(head[name]["bias"], dtype=torch.float32))

    @property
    def config(self) -> Any:
        return self.encoder.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start (B, T), end (B, T), kind (B, 4))`` logits for a batch of windows."""
        kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        se = self.span(hidden)  # (B, T, 2)
        return se[..., 0], se[..., 1], self.kind(hidden[:, 0])

    def save_pretrained(self, path: str | os.PathLike, **kwargs: Any) -> None:
        """The encoder as a plain ``transformers`` folder plus ``reader_head.json``."""
        path = Path(path)
        self.encoder.save_pretrained(path, **kwargs)
        head = {name: {"weight": layer.weight.detach().cpu().tolist(), "bias": layer.bias.detach().cpu().tolist()}
                for name, layer in (("span", self.span), ("kind", self.kind))}
        (path / HEAD_FILE).write_text(json.dumps({"kinds": list(ANSWER_KINDS), **head}), encoding="utf-8")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> SpanReader:
        """Load a saved reader; ``kwargs`` go to ``AutoModel.from_pretrained``."""
        from transformers import AutoModel

        path = Path(path)
        f = path / HEAD_FILE
        if not f.is_file():
            raise BundleError(f"reader: {str(path)!r} has no {HEAD_FILE}; it is not a reader saved by "
                              "the reader recipe (searchsmith train recipes/reader/...)")
        head = read_json(f, "reader")
        if not isinstance(head, dict) or head.get("kinds") != list(ANSWER_KINDS):
            raise BundleError(f"reader: {f} names answer kinds {head.get('kinds') if isinstance(head, dict) else head!r}; "
                              f"expected {list(ANSWER_KINDS)}")
        encoder = load_complete(AutoModel, path, "reader", "re-save it from a training run",
                                ignore=("pooler",), **kwargs)
        return cls(encoder, head)


def load_reader(path: str | os.PathLike, **kwargs: Any) -> SpanReader:
    """The reader saved in ``path``, in eval mode."""
    return SpanReader.from_pretrained(path, **kwargs).eval()


def torch_logits_fn(model: SpanReader) -> LogitsFn:
    """A :data:`LogitsFn` over a torch :class:`SpanReader` (on its own device)."""

    @torch.no_grad()
    def fn(feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        device = next(model.parameters()).device
        t = {k: torch.from_numpy(v).to(device) for k, v in feeds.items()}
        s, e, k = model(t["input_ids"], t["attention_mask"], t.get("token_type_ids"))
        return s.float().cpu().numpy(), e.float().cpu().numpy(), k.float().cpu().numpy()

    return fn


class TorchReader:
    """A torch :class:`SpanReader` with :class:`~searchsmith.models.runtime.ReadBundle`'s
    ``read`` / ``read_batch`` (the training evaluation and ``eval read --checkpoint``)."""

    def __init__(self, model: SpanReader, tokenizer: Any, settings: ReaderSettings, min_score: float = 0.5,
                 batch_size: int = 32) -> None:
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.min_score, self.batch_size = float(min_score), batch_size

    @classmethod
    def load(cls, path: str | os.PathLike) -> TorchReader:
        """A run folder (``model/``) or a model folder saved by the reader recipe."""
        from searchsmith.models.tokenizer import load_run_tokenizer

        root = Path(path)
        model_dir = root / "model" if (root / "model" / HEAD_FILE).is_file() else root
        meta = read_json(model_dir / META_FILE, "reader") if (model_dir / META_FILE).is_file() else {}
        return cls(load_reader(model_dir), load_run_tokenizer(model_dir, what=f"reader {str(root)!r}"),
                   ReaderSettings.from_json(meta), float(meta.get("no_answer_threshold", 0.5)))

    def read_batch(self, questions: Sequence[str], passages: Sequence[Sequence[Any]],
                   return_meta: bool = False) -> Any:
        items = [[as_passage(p, f"read_batch passages[{i}][{j}]") for j, p in enumerate(ps)]
                 for i, ps in enumerate(passages)]
        out, wins = read_passages(torch_logits_fn(self.model), self.tokenizer, list(questions), items,
                                  self.settings, self.batch_size)
        meta = {"truncated": wins.questions_cut, "max_length": self.settings.max_length, "tokens": wins.tokens,
                "windows": len(wins.windows)}
        return (out, meta) if return_meta else out

    def read(self, question: str, passages: Sequence[Any], return_meta: bool = False) -> Any:
        got = self.read_batch([question], [passages], return_meta=return_meta)
        return (got[0][0], got[1]) if return_meta else got[0]


__all__ = ["SpanReader", "TorchReader", "load_reader", "torch_logits_fn"]
