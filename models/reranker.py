"""Reranker models: the plain cross-encoder head, the segment-cosine head and the
cosine-residual head.

All read a (query, passage) pair encoded as one sequence (``token_type_ids`` 0 for the
query and 1 for the passage) and give one logit.

* ``cls`` (``AutoModelForSequenceClassification``, ``num_labels=1``): a linear layer on the
  pooled ``[CLS]`` state: the usual cross-encoder, right for models trained as such
  (BAAI/bge-reranker-base, ms-marco cross-encoders).
* ``segment_cosine`` (:class:`SegmentCosineReranker`): ``scale * cos(mean(query tokens),
  mean(passage tokens)) + bias`` over the joint encoding. all-MiniLM-L6-v2 was trained with
  mean pooling and cosine similarity, so this head starts where the bi-encoder is (held-out
  nDCG@10 0.761 before any step on the reranker recipe's data, against 0.720 for a ``cls``
  head after a full CPU run) and fine-tuning then adds the cross-attention's evidence. Its
  saved form is a plain ``transformers`` encoder folder plus ``reranker_head.json``.
* ``cosine_residual`` (:class:`CosineResidualReranker`): ``scale * cos(q, d) + bias +
  w . h[CLS]``, where ``q`` and ``d`` are the query and the passage encoded *apart* (each
  attends only to itself, from position 0, as the bi-encoder encodes them) and ``h[CLS]`` is
  the joint encoding's first state. ``w`` starts at zero, so at step 0 the model orders
  passages exactly as the bi-encoder does (the pipeline's retrieval order): fine-tuning
  starts from the baseline the pipeline's gate compares it with instead of below it (the
  quick ``cls`` reranker ended at nDCG@10 0.483 against the bi-encoder's 0.810). Saved as
  the encoder folder plus ``reranker_head.json`` (scale, bias, residual weights).

:func:`load_reranker` loads either from a folder; export, runtime and evaluation use it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from searchsmith.models.errors import BundleError
from searchsmith.models.pretrained import load_complete, read_json

HEAD_FILE = "reranker_head.json"
HEADS = ("cls", "segment_cosine", "cosine_residual")


def _require_token_type_ids(head: str, token_type_ids: torch.Tensor | None) -> torch.Tensor:
    """Both cosine heads split the pair by ``token_type_ids``; refuse a tokenizer without them."""
    if token_type_ids is None:
        raise ValueError(f"{head} reranker: token_type_ids are required (tokenize "
                         "(query, passage) pairs with a BERT-style tokenizer)")
    return token_type_ids


def _pair_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` (B, T, H) over the tokens where ``mask`` (B, T) is true -> (B, H)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def _scaled_cosine(scale: torch.Tensor, bias: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``scale * cos(q, d) + bias`` for (B, H) query and passage states -> (B,)."""
    return scale * torch.nn.functional.cosine_similarity(q, d, dim=-1, eps=1e-6) + bias


def _save_with_head(model: Any, path: str | os.PathLike, head: dict[str, Any], indent: int | None,
                    **kwargs: Any) -> None:
    """``model.encoder`` as a plain ``transformers`` folder plus ``head`` in ``reranker_head.json``."""
    path = Path(path)
    model.encoder.save_pretrained(path, **kwargs)
    (path / HEAD_FILE).write_text(json.dumps(head, indent=indent), encoding="utf-8")


class SegmentCosineReranker(torch.nn.Module):
    """Cosine of the query's and the passage's mean token states after joint encoding.

    Args:
        encoder: a ``transformers`` encoder (``AutoModel``) whose tokenizer emits
            ``token_type_ids``.
        scale: initial logit scale (learnt), as a contrastive temperature's inverse.
        bias: initial logit bias (learnt).
    """

    head = "segment_cosine"

    def __init__(self, encoder: Any, scale: float = 20.0, bias: float = 0.0) -> None:
        super().__init__()
        self.encoder = encoder
        self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
        self.bias = torch.nn.Parameter(torch.tensor(float(bias)))

    @property
    def config(self) -> Any:
        return self.encoder.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, **_: Any) -> Any:
        """Logits for a batch of joint pairs.

        Args:
            input_ids, attention_mask, token_type_ids: (B, T) from the tokenizer's pair mode.

        Returns:
            ``SequenceClassifierOutput`` with ``logits`` (B, 1), as a cross-encoder's.
        """
        from transformers.modeling_outputs import SequenceClassifierOutput

        token_type_ids = _require_token_type_ids(self.head, token_type_ids)
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state  # (B, T, H)
        live = attention_mask.bool()
        # [CLS] and the first [SEP] belong to segment 0, the last [SEP] to segment 1: the
        # same tokens sentence-transformers' mean pooling counts for each text alone.
        q = _pair_mean(hidden, live & (token_type_ids == 0))  # (B, H)
        d = _pair_mean(hidden, live & (token_type_ids == 1))  # (B, H)
        return SequenceClassifierOutput(logits=_scaled_cosine(self.scale, self.bias, q, d).unsqueeze(-1))

    def save_pretrained(self, path: str | os.PathLike, **kwargs: Any) -> None:
        """The encoder as a plain ``transformers`` folder plus ``reranker_head.json``."""
        _save_with_head(self, path, {"head": self.head, "scale": float(self.scale.detach()),
                                     "bias": float(self.bias.detach())}, 2, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, what: str = "reranker", **kwargs: Any) -> SegmentCosineReranker:
        """Load a saved segment-cosine reranker; ``what`` names it in errors, ``kwargs`` go to
        ``AutoModel.from_pretrained``."""
        head = read_head(path, what)
        return cls(_load_encoder(Path(path), what, **kwargs), head.get("scale", 20.0), head.get("bias", 0.0))

class CosineResidualReranker(torch.nn.Module):
    """The bi-encoder's cosine plus a learnt cross-encoder residual (zero at the start).

    From the tokenizer's pair encoding ``[CLS] q [SEP] d [SEP]`` one encoder call over
    (3B, T) rows computes: the query alone (``[CLS] q [SEP]``, keys limited to segment 0),
    the passage alone (``[CLS] d [SEP]`` gathered to start at position 0, type ids 0) and the
    joint pair. Mean pooling of the first two is sentence-transformers' bi-encoder embedding,
    so ``cos`` is the retrieval similarity of a mean-pooling embedder such as
    all-MiniLM-L6-v2; the residual ``w . h[CLS]`` of the joint row adds what cross-attention
    sees. ``w`` and its bias start at zero: the untrained model ranks as the bi-encoder does.

    Args:
        encoder: a ``transformers`` encoder (``AutoModel``) whose tokenizer emits
            ``token_type_ids``.
        scale: initial logit scale (learnt), a contrastive temperature's inverse.
        bias: initial logit bias (learnt).
        residual: ``{"weight": [H], "bias": b}`` of a saved model; None = zeros.
    """

    head = "cosine_residual"

    def __init__(self, encoder: Any, scale: float = 20.0, bias: float = 0.0,
                 residual: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
        self.bias = torch.nn.Parameter(torch.tensor(float(bias)))
        hidden = int(encoder.config.hidden_size)
        self.residual = torch.nn.Linear(hidden, 1)
        with torch.no_grad():
            if residual is None:
                self.residual.weight.zero_()
                self.residual.bias.zero_()
            else:
                w = torch.tensor(residual["weight"], dtype=torch.float32).view(1, -1)
                if w.shape[1] != hidden:
                    raise BundleError(f"reranker: {HEAD_FILE} residual has {w.shape[1]} weights, the "
                                      f"encoder's hidden size is {hidden}; re-save it from a training run")
                self.residual.weight.copy_(w)
                self.residual.bias.fill_(float(residual.get("bias", 0.0)))

    @property
    def config(self) -> Any:
        return self.encoder.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, **_: Any) -> Any:
        """Logits (B, 1) for a batch of pairs: inputs and output as :meth:`SegmentCosineReranker.forward`."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        token_type_ids = _require_token_type_ids(self.head, token_type_ids)
        live = attention_mask.bool()
        q_mask = live & (token_type_ids == 0)  # [CLS] q [SEP]          (B, T)
        d_live = live & (token_type_ids == 1)  # d [SEP]
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)  # (1, T)
        # The passage row: [CLS] (column 0) then d [SEP], shifted left by the query's length.
        start = q_mask.sum(1, keepdim=True)  # (B, 1): tokens of [CLS] q [SEP]
        src = start + pos - 1  # (B, T)
        valid = src < t
        src = torch.where(pos == 0, torch.zeros_like(src), src.clamp(max=t - 1))
        d_ids = torch.gather(input_ids, 1, src)
        d_mask = (pos == 0) | (torch.gather(d_live, 1, src) & valid)  # (B, T)
        ids = torch.cat([input_ids, d_ids, input_ids])  # (3B, T)
        masks = torch.cat([q_mask, d_mask, live]).to(attention_mask.dtype)
        types = torch.cat([torch.zeros_like(token_type_ids), torch.zeros_like(token_type_ids),
                           token_type_ids])
        hidden = self.encoder(input_ids=ids, attention_mask=masks,
                              token_type_ids=types).last_hidden_state  # (3B, T, H)
        b = input_ids.shape[0]
        q = _pair_mean(hidden[:b], q_mask)  # (B, H)
        d = _pair_mean(hidden[b:2 * b], d_mask)  # (B, H)
        res = self.residual(hidden[2 * b:, 0]).squeeze(-1)  # (B,)
        return SequenceClassifierOutput(logits=(_scaled_cosine(self.scale, self.bias, q, d) + res).unsqueeze(-1))

    def save_pretrained(self, path: str | os.PathLike, **kwargs: Any) -> None:
        """The encoder as a plain ``transformers`` folder plus ``reranker_head.json``."""
        _save_with_head(self, path, {
            "head": self.head, "scale": float(self.scale.detach()), "bias": float(self.bias.detach()),
            "residual": {"weight": [float(x) for x in self.residual.weight.detach().view(-1)],
                         "bias": float(self.residual.bias.detach())}}, None, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, what: str = "reranker", **kwargs: Any) -> CosineResidualReranker:
        """Load a saved cosine-residual reranker; ``what`` names it in errors, ``kwargs`` go to
        ``AutoModel.from_pretrained``."""
        head = read_head(path, what)
        encoder = _load_encoder(Path(path), what, **kwargs)
        if not isinstance(head.get("residual"), dict) or "weight" not in head["residual"]:
            raise BundleError(f"{what}: {Path(path) / HEAD_FILE} has no 'residual' weights; re-save "
                              "it from a training run")
        return cls(encoder, head.get("scale", 20.0), head.get("bias", 0.0), head["residual"])


def _load_encoder(path: Path, what: str = "reranker", **kwargs: Any) -> Any:
    from transformers import AutoModel

    # The pooler is never used by either head, so a checkpoint saved without it is complete.
    return load_complete(AutoModel, path, what, "re-save it from a training run",
                         ignore=("pooler",), **kwargs)


def read_head(path: str | os.PathLike, what: str = "reranker") -> dict[str, Any]:
    """``reranker_head.json`` of a folder ({} when absent: a plain ``cls`` cross-encoder);
    ``what`` names the model in errors (the citation scorer is a reranker too)."""
    f = Path(path) / HEAD_FILE
    if not f.is_file():
        return {}
    head = read_json(f, what)
    if not isinstance(head, dict) or head.get("head") not in HEADS:
        raise BundleError(f"{what}: {f} names head {head.get('head') if isinstance(head, dict) else head!r}; "
                          f"expected one of {list(HEADS)}")
    return head


def load_reranker(path: str | os.PathLike, what: str = "reranker", **kwargs: Any) -> Any:
    """The reranker saved in ``path`` (either head), in eval mode.

    ``what`` names the model in errors ("citation scorer" for the citation recipe's scorer);
    ``kwargs`` go to ``from_pretrained`` (the export passes ``attn_implementation``).

    Raises:
        BundleError: unreadable head file, missing weights, or a ``cls`` model without exactly
            one logit.
    """
    head = read_head(path, what)
    if head.get("head") == "segment_cosine":
        return SegmentCosineReranker.from_pretrained(path, what, **kwargs).eval()
    if head.get("head") == "cosine_residual":
        return CosineResidualReranker.from_pretrained(path, what, **kwargs).eval()
    from transformers import AutoModelForSequenceClassification

    model = load_complete(AutoModelForSequenceClassification, path, what,
                          "the classification head was never trained", **kwargs)
    if model.config.num_labels != 1:
        raise BundleError(f"{what}: {str(path)!r} has num_labels={model.config.num_labels}; a "
                          f"{what} has 1 logit (train it with its recipe)")
    return model.eval()


__all__ = ["HEADS", "HEAD_FILE", "CosineResidualReranker", "SegmentCosineReranker", "load_reranker", "read_head"]
