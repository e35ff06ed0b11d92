"""The torch modules behind every exported graph, built from a model folder.

One builder per task returns :class:`GraphSpec` objects: the module with a plain tensor
signature (what ``torch.onnx.export`` traces), its input and output names, example inputs
and the dynamic axes. The exporter exports them; the runtime's torch backend runs the very
same modules, so both backends share one definition of every graph (STYLE: every fast
path has a slow twin).

Graphs per task (file stem -> inputs -> outputs; B batch, T tokens, S source tokens, D hidden,
V vocabulary, L labels):

* embed:     model:   input_ids, attention_mask[, token_type_ids] (B, T) -> embeddings (B, D),
             mean pooling over the mask and L2 normalisation inside the graph;
* rerank:    model:   (B, T) ids -> logits (B, 1);
* cite:      tagger:  (B, T) ids -> logits (B, T, L); scorer: (B, T) ids -> logits (B, 1);
* decompose: encoder: input_ids, attention_mask (B, S) -> encoder_hidden_states (B, S, D);
             decoder: decoder_input_ids (B, t), encoder_hidden_states (B, S, D),
             encoder_attention_mask (B, S) -> logits (B, V) of the last position. The decoder
             recomputes the prefix at each step (no KV cache: see ``decompose_graphs``);
* read:      model:   (B, T) ids -> logits (B, T, 6): start and end logits per token in
             channels 0 and 1, the four answer-kind logits of the [CLS] state repeated
             along T in channels 2..5 (one output, as every graph here has);
* images:    text:    input_ids, attention_mask (B, T) -> embeddings (B, d);
             vision:  pixel_values (B, 3, H, W) -> embeddings (B, d).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from searchsmith.models.errors import BundleError
from searchsmith.models.pretrained import load_complete

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class GraphSpec:
    """One exportable graph.

    Attributes:
        module: ``forward(*inputs)`` in the order of ``inputs``, tensors only.
        inputs: input names (ONNX graph input names, same order as ``forward``).
        outputs: output names.
        example: example tensors for tracing, one per input.
        dynamic: input name -> {axis: axis name} for every dynamic axis.
    """

    module: torch.nn.Module
    inputs: list[str]
    outputs: list[str]
    example: tuple[torch.Tensor, ...]
    dynamic: dict[str, dict[int, str]]


# Attention implementation traced into the encoder-only graphs. transformers' default (sdpa)
# traces to a graph with NaN guards and mask arithmetic around each softmax; the eager one
# to plain MatMul/Softmax/MatMul. Same function (max |difference| 5e-8 on the MiniLM
# cross-encoder), but ONNX Runtime ran the eager graph 17 % faster in fp32 and 27 % faster
# in int8 (160 demo pairs, 2 idle cores).
EXPORT_ATTN_IMPLEMENTATION = "eager"


def load_hf(cls: Any, path: Path, what: str, **kwargs: Any) -> Any:
    """``cls.from_pretrained(path)`` in eval mode, refusing MISSING weights (``load_complete``).

    A head that loads with MISSING weights was never trained (transformers initialises it at
    random); exporting it would give noise dressed as a model.

    Raises:
        BundleError: the folder does not load, or some weights are missing.
    """
    return load_complete(cls, str(path), what, "the model was never fine-tuned or its checkpoint is "
                         "incomplete. Train it first (searchsmith train RECIPE.yaml) and export the run "
                         "folder", **kwargs).eval()


def text_inputs(model: Any, tokenizer: Any) -> list[str]:
    """Inputs a text graph takes: the tokenizer's inputs the model's forward accepts."""
    # inspect.signature follows __wrapped__: transformers 5 decorates forward, so the code
    # object's own argument names are the wrapper's (*args, **kwargs)
    accepted = set(inspect.signature(model.forward).parameters)
    names = [n for n in TEXT_INPUTS if n in tokenizer.model_input_names and n in accepted]
    if "input_ids" not in names:
        names.insert(0, "input_ids")
    if "attention_mask" not in names:
        names.insert(1, "attention_mask")
    return names


def _text_example(names: list[str], vocab: int) -> tuple[tuple[torch.Tensor, ...], dict[str, dict[int, str]]]:
    # Batch 2 and length 7 (not 1, which the tracer would specialise away); row 1 padded.
    ids = torch.randint(5, max(vocab, 6), (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(tensors[n] for n in names), {n: {0: "batch", 1: "seq"} for n in names}


class _Kwargs(torch.nn.Module):
    """Positional tensors -> ``model(**dict(zip(names, tensors)))``, one output picked by ``pick``."""

    def __init__(self, model: torch.nn.Module, names: list[str], pick: str) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.pick = pick

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.names, tensors, strict=True)))
        return getattr(out, self.pick)


class MeanPoolNormalize(torch.nn.Module):
    """Encoder -> masked mean of the last hidden state -> L2 normalised (B, D)."""

    def __init__(self, model: torch.nn.Module, names: list[str], pooling: str = "mean") -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.pooling = pooling

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        feeds = dict(zip(self.names, tensors, strict=True))
        hidden = self.model(**feeds).last_hidden_state  # (B, T, D)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = feeds["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, D)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=-1, eps=1e-12)


def embedder_graphs(model_dir: Path, tokenizer: Any, pooling: str = "mean") -> dict[str, GraphSpec]:
    """The base embedder: one ``model`` graph with pooling and normalisation inside."""
    from transformers import AutoModel

    model = load_hf(AutoModel, model_dir, "export embedder", attn_implementation=EXPORT_ATTN_IMPLEMENTATION)
    names = text_inputs(model, tokenizer)
    example, dynamic = _text_example(names, len(tokenizer))
    return {"model": GraphSpec(MeanPoolNormalize(model, names, pooling).eval(), names, ["embeddings"],
                               example, dynamic)}


def rerank_graphs(model_dir: Path, tokenizer: Any) -> dict[str, GraphSpec]:
    """The cross-encoder: one ``model`` graph, logits (B, 1)."""
    from searchsmith.models.reranker import load_reranker

    # Either head of models/reranker.py: the [CLS] cross-encoder or the segment-cosine one.
    model = load_reranker(model_dir, attn_implementation=EXPORT_ATTN_IMPLEMENTATION)
    names = text_inputs(model, tokenizer)
    example, dynamic = _text_example(names, len(tokenizer))
    return {"model": GraphSpec(_Kwargs(model, names, "logits").eval(), names, ["logits"], example, dynamic)}


def cite_graphs(model_dir: Path, tokenizer: Any) -> dict[str, GraphSpec]:
    """The citation models: ``tagger`` (token classes, (B, T, L)) and ``scorer`` ((B, 1))."""
    from searchsmith.models.reranker import load_reranker
    from transformers import AutoModelForTokenClassification

    attn = EXPORT_ATTN_IMPLEMENTATION
    tagger = load_hf(AutoModelForTokenClassification, model_dir / "tagger", "export cite tagger",
                     attn_implementation=attn)
    # the scorer's head: a [CLS] cross-encoder or the segment-cosine one (models/reranker.py)
    scorer = load_reranker(model_dir / "scorer", "citation scorer", attn_implementation=attn)
    out = {}
    for name, model in (("tagger", tagger), ("scorer", scorer)):
        names = text_inputs(model, tokenizer)
        example, dynamic = _text_example(names, len(tokenizer))
        out[name] = GraphSpec(_Kwargs(model, names, "logits").eval(), names, ["logits"], example, dynamic)
    return out


class _ReaderGraph(torch.nn.Module):
    """A :class:`~searchsmith.models.reader.SpanReader` as one (B, T, 6) output."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        feeds = dict(zip(self.names, tensors, strict=True))
        start, end, kind = self.model(feeds["input_ids"], feeds["attention_mask"], feeds.get("token_type_ids"))
        t = start.shape[1]
        return torch.cat([torch.stack([start, end], -1), kind.unsqueeze(1).expand(-1, t, -1)], -1)


def read_graphs(model_dir: Path, tokenizer: Any) -> dict[str, GraphSpec]:
    """The reader: one ``model`` graph, logits (B, T, 6) (``models/reader.py``)."""
    from searchsmith.models.reader_model import load_reader

    model = load_reader(model_dir, attn_implementation=EXPORT_ATTN_IMPLEMENTATION)
    names = text_inputs(model.encoder, tokenizer)
    example, dynamic = _text_example(names, len(tokenizer))
    return {"model": GraphSpec(_ReaderGraph(model, names).eval(), names, ["logits"], example, dynamic)}


class _Encoder(torch.nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.encoder = model.encoder
        # bert2bert with different hidden sizes projects encoder states for the decoder.
        self.proj = getattr(model, "enc_to_dec_proj", None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.proj(hidden) if self.proj is not None else hidden  # (B, S, D)


class _TaggerEncoder(torch.nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.encoder = model.base_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, S, D)


class _Decoder(torch.nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.decoder = model.decoder

    def forward(self, decoder_input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor) -> torch.Tensor:
        logits = self.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                              encoder_attention_mask=encoder_attention_mask, use_cache=False).logits
        return logits[:, -1]  # (B, V): greedy search only needs the last position


def load_decomposer_model(model_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The model (bert2bert ``EncoderDecoderModel``, or the tagger's token classifier) and
    ``decomposer.json`` of a trained decomposer.

    Raises:
        BundleError: not a trained encoder-decoder or tagger decomposer.
    """
    from searchsmith.models.decomposer import META_FILE
    from transformers import EncoderDecoderModel

    meta_path = model_dir / META_FILE
    if not meta_path.is_file():
        raise BundleError(f"export decompose: {str(model_dir)!r} has no {META_FILE}; it is not a "
                          "trained decomposer (searchsmith train recipes/decomposer/minilm_bert2bert.yaml)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if int(meta.get("trained_steps", 0)) <= 0:
        raise BundleError(f"export decompose: {str(model_dir)!r} was never fine-tuned (trained_steps=0 in "
                          f"{META_FILE}); an untrained model generates noise. Train it first")
    arch = meta.get("arch", "encoder-decoder")
    if arch == "tagger":
        from transformers import AutoModelForTokenClassification

        return load_hf(AutoModelForTokenClassification, model_dir, "export decompose"), meta
    if arch != "encoder-decoder":
        raise BundleError(f"export decompose: arch {arch!r} is not exported yet (only 'tagger' and "
                          "'encoder-decoder'); serve it with the torch Decomposer")
    if int(meta.get("num_beams", 1)) != 1:
        raise BundleError(f"export decompose: num_beams={meta['num_beams']} in {META_FILE}; the ONNX "
                          "loop is greedy. Set num_beams: 1 in the recipe or serve with torch")
    return load_hf(EncoderDecoderModel, model_dir, "export decompose"), meta


def decompose_graphs(model_dir: Path, tokenizer: Any, model: Any = None) -> dict[str, GraphSpec]:
    """The decomposer as ``encoder`` and ``decoder`` graphs (the tagger: ``encoder`` only).

    The decoder recomputes the whole prefix each step instead of taking past key values:
    transformers 5 passes the KV cache as ``EncoderDecoderCache`` objects, which the dynamo
    exporter cannot take as graph inputs without a flattening layer per architecture. At the
    decomposer's sizes (targets of at most 64 tokens, sources of 128) the recomputation costs
    the decoder O(t^2) instead of O(t) work, which on CPU stays below the encoder's cost for
    short targets.
    """
    if model is None:
        model, _ = load_decomposer_model(model_dir)
    vocab = len(tokenizer)
    src = torch.randint(5, vocab, (2, 7))
    src_mask = torch.ones_like(src)
    src_mask[1, 5:] = 0
    if not hasattr(model, "decoder"):  # the tagger: its encoder's states; the depth head is in the manifest
        return {"encoder": GraphSpec(_TaggerEncoder(model).eval(), ["input_ids", "attention_mask"],
                                     ["encoder_hidden_states"], (src, src_mask),
                                     {"input_ids": {0: "batch", 1: "src"}, "attention_mask": {0: "batch", 1: "src"}})}
    d = model.decoder.config.hidden_size
    enc = GraphSpec(_Encoder(model).eval(), ["input_ids", "attention_mask"], ["encoder_hidden_states"],
                    (src, src_mask), {"input_ids": {0: "batch", 1: "src"}, "attention_mask": {0: "batch", 1: "src"}})
    dec_ids = torch.randint(5, vocab, (2, 3))
    dec = GraphSpec(
        _Decoder(model).eval(), ["decoder_input_ids", "encoder_hidden_states", "encoder_attention_mask"],
        ["logits"], (dec_ids, torch.randn(2, 7, d), src_mask),
        {"decoder_input_ids": {0: "batch", 1: "tgt"}, "encoder_hidden_states": {0: "batch", 1: "src"},
         "encoder_attention_mask": {0: "batch", 1: "src"}})
    return {"encoder": enc, "decoder": dec}


def image_graphs(model_dir: Path) -> tuple[dict[str, GraphSpec], Any]:
    """The image-relevance dual encoder as ``text`` and ``vision`` graphs, and the loaded model.

    Built from ``searchsmith.models.image_relevance.ImageRelevanceModel``:
    ``text_module()`` and ``vision_module()`` already return normalised embeddings.
    """
    try:
        from searchsmith.models.image_relevance import ImageRelevanceModel
    except ImportError as exc:
        raise BundleError(f"export images: searchsmith.models.image_relevance is not available ({exc})") from None
    model = ImageRelevanceModel.load(model_dir, device="cpu")
    tok = model.tokenizer
    names = ["input_ids", "attention_mask"]
    example, dynamic = _text_example(names, len(tok))
    size = int(model.image_size)
    text = GraphSpec(model.text_module().eval(), names, ["embeddings"], example, dynamic)
    vision = GraphSpec(model.vision_module().eval(), ["pixel_values"], ["embeddings"],
                       (torch.randn(2, 3, size, size),), {"pixel_values": {0: "batch"}})
    return {"text": text, "vision": vision}, model


__all__ = ["GraphSpec", "MeanPoolNormalize", "cite_graphs", "decompose_graphs", "embedder_graphs",
           "image_graphs", "load_decomposer_model", "load_hf", "rerank_graphs", "text_inputs"]
