"""Tiny random models laid out as training runs, and their exported bundles, built once per
test session and shared by test_export.py and test_runtime.py (exporting is the slow part:
the dynamo exporter takes a few seconds per graph)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from searchsmith.models.io import process_temp_dir

ROOT = process_temp_dir("searchsmith-test-export-")  # deleted at exit (tests/conftest.py)
LABELS = ["O", "B-ENT", "I-ENT"]


@functools.cache
def tokenizer():
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("default"))


def _bert_config(**kwargs):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(tokenizer()), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128, **kwargs)


def _run_json(run: Path, task: str, steps: int, **extra) -> None:
    (run / "run.json").write_text(json.dumps({"task": task, "recipe": "tiny", "base_model": "tiny-bert",
                                              "steps": steps, **extra}))


@functools.cache
def embedder_dir() -> Path:
    from transformers import AutoModel

    torch.manual_seed(0)
    path = ROOT / "embedder"
    AutoModel.from_config(_bert_config()).save_pretrained(path)
    tokenizer().save_pretrained(path)
    return path


@functools.cache
def rerank_run(steps: int = 3) -> Path:
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(1)
    run = ROOT / f"rerank-{steps}"
    model = AutoModelForSequenceClassification.from_config(_bert_config(num_labels=1))
    model.save_pretrained(run / "model")
    tokenizer().save_pretrained(run / "model")
    _run_json(run, "rerank", steps, max_length=48)
    return run


@functools.cache
def cite_run() -> Path:
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    torch.manual_seed(2)
    run = ROOT / "cite"
    id2label = dict(enumerate(LABELS))
    tagger = AutoModelForTokenClassification.from_config(
        _bert_config(num_labels=3, id2label=id2label, label2id={v: k for k, v in id2label.items()}))
    tagger.save_pretrained(run / "model" / "tagger")
    tokenizer().save_pretrained(run / "model" / "tagger")
    AutoModelForSequenceClassification.from_config(_bert_config(num_labels=1)).save_pretrained(
        run / "model" / "scorer")
    (run / "model" / "citation.json").write_text(json.dumps(
        {"labels": LABELS, "max_length": 40, "tagger_max_length": 24, "support_threshold": 0.5,
         "trained_steps": {"tagger": 2, "scorer": 2}}))
    _run_json(run, "cite", 2)
    return run


@functools.cache
def decompose_run() -> Path:
    from searchsmith.models.decomposer import Decomposer, build_tiny

    torch.manual_seed(3)
    model, tok = build_tiny(hidden=32, layers=1)
    run = ROOT / "decompose"
    # Random weights marked as trained: the tests check that ONNX reproduces torch, not quality.
    # Constrained decoding on (models/constrained.py): the runtime's ONNX loop must apply the
    # same grammar / copy constraint as Decomposer.generate.
    # Rewrites as edits and a fitted type head: the runtime must apply both as torch does.
    vocab = tok.convert_tokens_to_ids(["the", "of", "return"])
    dec = Decomposer(model, tok, max_source_tokens=32, max_target_tokens=10, constrained=True,
                     decompose_vocab=vocab, rewrite_vocab=vocab, rewrite_target="edit")
    dec.fit_type_head(["Who founded Northwind Labs?", "What is Quarry written in and who wrote it?",
                       "When was the founder of Lumen born?", "Which is older, Quarry or Lumen?"],
                      ["terminal", "split", "chain", "split"])
    dec.fit_rewrite_head([(["Tell me about Quarry"], "who wrote it?", "who wrote Quarry?"),
                          (["Tell me about Lumen"], "where is it based?", "where is Lumen based?")])
    dec.save(run / "model", trained_steps=2)
    _run_json(run, "decompose+rewrite", 2)
    return run


@functools.cache
def read_run() -> Path:
    """A tiny random reader with decisive heads (weights x 30): random but far from ties, so an
    int8 export must give the same answers to pass parity."""
    from searchsmith.models.reader import META_FILE, ReaderSettings
    from searchsmith.models.reader_model import SpanReader
    from transformers import AutoModel

    torch.manual_seed(5)
    model = SpanReader(AutoModel.from_config(_bert_config(), add_pooling_layer=False))
    with torch.no_grad():
        for layer in (model.span, model.kind):
            layer.weight.mul_(30.0)
    run = ROOT / "read"
    model.save_pretrained(run / "model")
    tokenizer().save_pretrained(run / "model")
    settings = ReaderSettings(max_length=64, stride=16, max_question_tokens=24, max_answer_tokens=8)
    (run / "model" / META_FILE).write_text(json.dumps({**settings.to_json(), "trained_steps": 2,
                                                       "no_answer_threshold": 0.5}))
    _run_json(run, "read", 2)
    return run


@functools.cache
def images_run() -> Path:
    from searchsmith.models.image_relevance import (
        ImageRelevanceConfig,
        ImageRelevanceModel,
        VisionConfig,
    )

    torch.manual_seed(4)
    cfg = ImageRelevanceConfig(embed_dim=16, max_length=16, vision=VisionConfig(image_size=16, channels=[4, 8]))
    text = {"model_type": "bert", "vocab_size": len(tokenizer()), "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    run = ROOT / "images"
    ImageRelevanceModel.build(cfg, text_config=text).save(run / "model", trained_steps=2)
    _run_json(run, "images", 2)
    return run


@functools.cache
def bundle(task: str, dtype: str = "fp32", torch_weights: bool = False) -> Path:
    """The exported bundle of a tiny model (cached for the session)."""
    from searchsmith.models.export import ExportOptions, export_embedder, export_run
    from searchsmith.training.evaluate import heldout_figures

    opts = ExportOptions(dtype=dtype, torch_weights=torch_weights, heldout_scorer=heldout_figures)
    out = ROOT / "bundles" / f"{task}-{dtype}{'-torch' if torch_weights else ''}"
    if task == "embed":
        export_embedder(out, str(embedder_dir()), opts)
    else:
        export_run({"rerank": rerank_run, "cite": cite_run, "decompose": decompose_run, "read": read_run,
                    "images": images_run}[task](), out, opts)
    return out
