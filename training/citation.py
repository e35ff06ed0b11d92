"""Citation recipe: an entity tagger and an attribution scorer, trained in one run.

Two models, both from the base model (default: the bundled all-MiniLM-L6-v2):

1. **Entity tagger**: BIO token classification with the labels of :data:`LABELS`::

       O, B-ENT, I-ENT, B-NUM, I-NUM, B-DATE, I-DATE

   ``ENT`` is a named thing (a run of capitalised words, an identifier, a quoted title),
   ``NUM`` a number or amount (``60``, ``10,000``, ``3.5 %``, ``$10``, ``20 ms``), ``DATE`` a
   date or year (``12 March 2024``, ``2024-03-12``, ``March 2024``, ``1986``, ``1960s``). The
   training labels are weak labels: the spans of the shared entity rule
   (:func:`searchsmith.models.text.entity_spans`, also the serving fallback). The held-out
   entity F1 therefore measures agreement with that rule on unseen sentences;
   ``searchsmith eval cite`` scores real labels when the eval file has ``entities``.
2. **Attribution scorer**: a cross-encoder, ``(sentence, passage) -> 1 logit``;
   ``sigmoid(logit)`` is P(the passage supports the sentence), trained with binary
   cross-entropy. ``support_threshold`` turns it into a decision. With
   ``model.cosine_residual`` the logit is a correction of the untrained baseline: a logistic
   fit of the pipeline's cosine attribution (the best cosine between the sentence and one
   passage sentence) on the training pairs is added to it, its head starts at zero (so the
   untrained model *is* the cosine baseline), and on the calibration claims
   (``data.calibration_ratio``, never trained on) the share of the correction kept,
   ``cross_weight`` in ``model.cross_weights``, is the one with the best ROC AUC (0 serves
   the cosine alone); ``calibrate_threshold`` sets the support threshold there too, where
   F1 is best.

The pairs, their sources and the split are in :mod:`searchsmith.training.cite_data`; the
metrics in :mod:`searchsmith.models.metrics`; ``searchsmith eval cite`` in
:mod:`searchsmith.training.evaluate_cite`. Metrics on the held-out split: attribution
precision / recall / F1 and balanced accuracy at ``support_threshold``, ROC AUC (overall and
per source) and entity F1, beside untrained baselines: the untuned bi-encoder's cosine (ROC
AUC), the pipeline's cosine attribution, the untrained scorer and tagger, and "always
supports"; with ``wice`` among the sources, WiCE's sentence-level task (``wice_sentence/*``,
each sentence of the cited page scored on its own against the union of the supporting sets,
on the WiCE claims never trained on) beside cosine top-1 and cosine at its threshold.

Layout of the run folder::

    RUN_DIR/stages/tagger/  trainer.train run of the tagger (checkpoints/, model/, metrics.json)
    RUN_DIR/stages/scorer/  trainer.train run of the scorer
    RUN_DIR/model/tagger/   RUN_DIR/model/scorer/   RUN_DIR/model/citation.json
    RUN_DIR/metrics.json    RUN_DIR/run.json   RUN_DIR/split.json   RUN_DIR/heldout.cite.jsonl
    RUN_DIR/heldout.wice_sentences.cite.jsonl   (WiCE's sentence-level task, with ``wice``)

Each stage resumes on its own: kill the run while the scorer trains and rerun the same
command; the finished tagger is reused and the scorer continues from its last checkpoint.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.citation import (
    ENTITY_TYPES,
    LABELS,
    CosineResidual,
    fit_cosine_logistic,
    score_pairs,
    sigmoid,
    tag_sentences,
)
from searchsmith.models.config import to_dict
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import from_settings, model_display_name, resolve_model
from searchsmith.models.io import replace_dir_keeping
from searchsmith.models.metrics import (
    attribution_metrics,
    balanced_accuracy,
    best_f1_threshold,
    binary_prf,
    roc_auc,
    span_prf,
    top1_per_group,
)
from searchsmith.models.text import entity_spans, sentence_texts
from searchsmith.models.tokenizer import encode_pairs
from searchsmith.training.cite_data import (
    DATASET_PREFIX,
    CitationData,
    Pair,
    calibration_split,
    eval_items,
    expertqa_pairs,
    load_pairs,
    scifact_pairs,
    split_pairs,
    synthetic_pairs,
    token_labels,
    wice_pairs,
    wice_sentence_items,
)
from searchsmith.training.config import EncoderRecipeConfig, OptimConfig, TrainConfig, config_hash
from searchsmith.training.data import write_jsonl_atomic
from searchsmith.training.evaluate_cite import ood_attribution, vs_cosine
from searchsmith.training.registry import register_dataset, register_recipe
from searchsmith.training.trainer import (
    apply_lora,
    freeze_lower,
    is_main_process,
    save_figure,
    say_kept,
    seed_everything,
    train,
    write_json_atomic,
)

# The pair sources, as the datasets ``citation/<name>`` that ``data.sources`` names. Registered
# here, not in cite_data, so that ``python -m searchsmith.training.cite_data`` (which runs that
# file as __main__ and imports it again under its name) does not register them twice.
register_dataset(DATASET_PREFIX + "wice")(wice_pairs)
register_dataset(DATASET_PREFIX + "expertqa")(expertqa_pairs)
register_dataset(DATASET_PREFIX + "scifact")(scifact_pairs)
register_dataset(DATASET_PREFIX + "synthetic")(synthetic_pairs)


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class CitationModelSpec:
    """The tagger's and the scorer's architecture and their shared tokenizer.

    Attributes:
        config: a transformers config dict (needs ``model_type``) that builds random-init
            models (the tiny twin) instead of loading ``base_model``; null loads the
            pretrained ``base_model`` for both models.
        tokenizer: ``default``: the pretrained base model's own tokenizer (the bundled
            all-MiniLM-L6-v2 one for ``base_model: default`` or with ``config``); else a
            local folder or hub id. It must be a fast tokenizer (the tagger needs character
            offsets) that the models' vocabulary covers.
        freeze_embeddings: keep the token/position embeddings fixed in both models (on
            MiniLM half of the 22.7 M weights: halves AdamW's work and each checkpoint).
        freeze_layers: keep the lowest N transformer layers of both models fixed too (0:
            train them all; :func:`~searchsmith.training.trainer.freeze_lower`).
        cosine_residual: train the scorer as a correction of the pipeline's cosine
            attribution (module docstring); needs ``data.baseline_embedder``, whose cosine
            the served model is then given with each pair.
        cross_weights: the shares of the trained correction tried on the calibration claims
            (the best ROC AUC wins, ties the smaller share); each in [0, 1]. Without
            calibration claims the correction is kept whole.
        scorer_head: ``cls``: a linear layer on the pooled ``[CLS]`` state (a usual
            cross-encoder; zeroed at the start with ``cosine_residual``); ``segment_cosine``:
            ``scale * cos(mean sentence tokens, mean passage tokens)`` over the joint
            encoding (models/reranker.py), a second, cross-attended view of the cosine
            that is informative from the first step, so the encoder learns at once.
        segment_scale: the ``segment_cosine`` head's initial scale (learnt).
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    freeze_embeddings: bool = False
    freeze_layers: int = 0
    cosine_residual: bool = False
    cross_weights: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    scorer_head: Literal["cls", "segment_cosine"] = "cls"
    segment_scale: float = 5.0

    def __post_init__(self) -> None:
        if not self.cross_weights or not all(isinstance(w, (int, float)) and 0 <= w <= 1
                                             for w in self.cross_weights):
            raise ValueError(f"model.cross_weights must be a non-empty list of numbers in [0, 1], got "
                             f"{self.cross_weights}")


@dataclass(frozen=True)
class TaggerStage:
    """The entity tagger's own optimizer and sentence length (tokens).

    Attributes:
        optim: the tagger's AdamW settings (the keys of ``optim``, with their own defaults:
            lr 1e-4, max_steps 60, batch_size 16 sentences, the rest as ``optim``).
        max_length: token limit of a sentence for the tagger, in training, evaluation and
            the saved model (``citation.json`` ``tagger_max_length``); tokens past it get
            no entity.
    """

    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1.0e-4, max_steps=60,
                                                                   batch_size=16))
    max_length: int = 64

    def __post_init__(self) -> None:
        if not 8 <= self.max_length <= 8192:
            raise ValueError(f"tagger.max_length must be in [8, 8192], got {self.max_length}")


@dataclass(frozen=True)
class CitationRecipe(EncoderRecipeConfig):
    """The citation recipe. ``optim`` drives the attribution scorer (the main model);
    ``tagger.optim`` the entity tagger. ``max_length`` caps a (sentence, passage) pair.

    Attributes:
        recipe: the registered recipe name, ``citation``; it selects this config class.
        output_dir: the run folder (relative to the current folder; layout in the module
            docstring). Rerunning with the same config resumes each stage on its own.
            ``--output-dir`` overrides it; it is left out of the config hash.
        base_model: the pretrained encoder both the tagger and the scorer start from:
            ``default`` (the bundled all-MiniLM-L6-v2, offline), a local model folder or a
            hub id; ignored when ``model.config`` builds random-init models.
        max_length: token limit of a (sentence, passage) pair for the scorer, in training,
            evaluation and the saved model (``citation.json``); the passage is truncated.
            Longer: more of each passage is read, at more cost per pair.
        support_threshold: P(supports) at or above which a passage counts as supporting
            the sentence: the cut of the held-out precision / recall / F1, saved in
            ``citation.json`` as the served model's default cut (the pipeline's
            ``citation.support_threshold`` overrides it). Higher: fewer, more precise
            citations. In (0, 1).
        eval_batch_size: pairs (scorer) or sentences (tagger) per forward pass in the
            held-out evaluation; speed and memory only.
        calibrate_threshold: replace ``support_threshold`` by the cut with the best F1 on
            the calibration claims (``data.calibration_ratio`` must be > 0); the saved
            model and the held-out figures use it. When the calibration keeps none of a
            ``cosine_residual``'s correction (share 0), the cut is the cosine baseline's
            (``data.baseline_cosine_threshold``) instead: the scorer is that baseline.
        optim: the attribution scorer's AdamW settings.
    """

    eval_batch_size: int = 64
    max_length: int = 128
    support_threshold: float = 0.5
    calibrate_threshold: bool = False
    data: CitationData = field(default_factory=CitationData)
    model: CitationModelSpec = field(default_factory=CitationModelSpec)
    tagger: TaggerStage = field(default_factory=TaggerStage)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 8 <= self.max_length <= 8192:
            raise ValueError(f"max_length must be in [8, 8192], got {self.max_length}")
        if not 0 < self.support_threshold < 1:
            raise ValueError(f"support_threshold must be in (0, 1), got {self.support_threshold}")
        if self.calibrate_threshold and not self.data.calibration_ratio:
            raise ValueError("calibrate_threshold needs calibration claims: set data.calibration_ratio "
                             "(e.g. 0.15) or calibrate_threshold: false")
        if self.model.cosine_residual and self.data.baseline_embedder == "none":
            raise ValueError("model.cosine_residual needs the bi-encoder it corrects: set "
                             "data.baseline_embedder (e.g. default) or model.cosine_residual: false")


@dataclass(frozen=True)
class StageConfig:
    """What one trainer.train call sees: the stage's optimizer, the shared loop settings and
    the whole recipe (so that any change of the recipe guards resuming)."""

    stage: str
    optim: OptimConfig
    train: TrainConfig
    recipe: dict[str, Any]


# ----------------------------------------------------------------------------- models


def build_models(cfg: CitationRecipe) -> tuple[Any, Any, Any]:
    """(tagger, scorer, tokenizer): token classification over :data:`LABELS` and
    sequence classification with one logit, both from the base model (or ``model.config``)."""
    from searchsmith.models.reranker import SegmentCosineReranker
    from transformers import (
        AutoModel,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    segment = cfg.model.scorer_head == "segment_cosine"
    if segment and cfg.lora.enabled:
        raise ConfigError("lora.enabled: LoRA is wired for model.scorer_head 'cls' only; use full fine-tuning")
    id2label = dict(enumerate(LABELS))
    label2id = {v: k for k, v in id2label.items()}
    tok_path = resolve_model(cfg.model.tokenizer, field="model.tokenizer")
    if cfg.model.config is not None:
        def build(config: Callable[..., Any]) -> tuple[Any, Any]:  # inside from_settings: its errors named
            s_cfg = config(num_labels=1)
            return (AutoModelForTokenClassification.from_config(
                        config(num_labels=len(LABELS), id2label=id2label, label2id=label2id)),
                    SegmentCosineReranker(AutoModel.from_config(s_cfg), cfg.model.segment_scale) if segment
                    else AutoModelForSequenceClassification.from_config(s_cfg))

        tagger, scorer = from_settings(cfg.model.config, "model.config", build)
    else:
        path = resolve_model(cfg.base_model)
        tagger = AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(LABELS), id2label=id2label, label2id=label2id)
        scorer = (SegmentCosineReranker(AutoModel.from_pretrained(path), cfg.model.segment_scale) if segment
                  else AutoModelForSequenceClassification.from_pretrained(path, num_labels=1))
        if cfg.model.tokenizer == "default" and cfg.base_model != "default":
            tok_path = path  # a hub model brings its own tokenizer
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"model.tokenizer: {tok_path} has no fast tokenizer; the tagger needs "
                          "character offsets (return_offsets_mapping)")
    for m in (tagger, scorer):
        freeze_lower(m, cfg.model.freeze_embeddings, cfg.model.freeze_layers)
    if tagger.config.vocab_size < len(tokenizer):
        raise ConfigError(f"model: vocab_size {tagger.config.vocab_size} is smaller than the "
                          f"tokenizer's {len(tokenizer)} tokens; raise model.config.vocab_size")
    if segment and "token_type_ids" not in tokenizer.model_input_names:
        raise ConfigError("model.scorer_head: segment_cosine splits the pair by token_type_ids, which "
                          f"the tokenizer {tok_path} does not emit; use scorer_head: cls")
    if cfg.model.cosine_residual and not segment:
        zero_score_head(scorer)
    return tagger, scorer, tokenizer


def zero_score_head(scorer: Any) -> None:
    """Zero the last projection to the single logit, so that the untrained correction is 0
    and the residual scorer starts as the cosine baseline (the weights get gradients at once;
    the encoder from the first step on).

    Raises:
        ConfigError: no final ``Linear(..., 1)`` in the model.
    """
    last = None
    for _, mod in scorer.named_modules():
        if isinstance(mod, torch.nn.Linear) and mod.out_features == 1:
            last = mod
    if last is None:
        raise ConfigError(f"model.cosine_residual: {type(scorer).__name__} has no Linear(..., 1) head to "
                          "start at zero; use a sequence-classification model with one logit")
    with torch.no_grad():
        last.weight.zero_()
        if last.bias is not None:
            last.bias.zero_()


# ----------------------------------------------------------------------------- batches


def scorer_batches(pairs: Sequence[Pair], tokenizer: Any, cfg: CitationRecipe,
                   offsets: Sequence[float] | None = None) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches`` of tokenized pairs with their 0/1 labels (B,) and, given
    ``offsets`` (one logit per pair: the residual's cosine term), ``offset`` (B,)."""
    bs = cfg.optim.batch_size

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        order = list(range(len(pairs)))
        random.Random(cfg.train.seed * 100_003 + epoch).shuffle(order)
        for s in range(0, len(order) - bs + 1, bs):  # drop the ragged tail
            idx = order[s:s + bs]
            enc = encode_pairs(tokenizer, [pairs[i].sentence for i in idx], [pairs[i].passage for i in idx],
                               cfg.max_length, padding=True, return_tensors="pt")
            batch = {"inputs": dict(enc), "labels": torch.tensor([float(pairs[i].label) for i in idx])}
            if offsets is not None:
                batch["offset"] = torch.tensor([float(offsets[i]) for i in idx])
            yield batch

    return stream


def tagger_batches(sentences: Sequence[str], tokenizer: Any, cfg: CitationRecipe
                   ) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches`` of tokenized sentences with BIO label ids (B, T)."""
    bs = cfg.tagger.optim.batch_size
    spans = [entity_spans(s) for s in sentences]

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        order = list(range(len(sentences)))
        random.Random(cfg.train.seed * 100_003 + epoch).shuffle(order)
        for s in range(0, len(order) - bs + 1, bs):
            idx = order[s:s + bs]
            enc = tokenizer([sentences[i] for i in idx], padding=True, truncation=True,
                            max_length=cfg.tagger.max_length, return_offsets_mapping=True,
                            return_special_tokens_mask=True, return_tensors="pt")
            offsets = enc.pop("offset_mapping").tolist()
            special = enc.pop("special_tokens_mask").tolist()
            labels = [token_labels([tuple(o) for o in off], spans[i], [bool(m) for m in sp])
                      for off, sp, i in zip(offsets, special, idx, strict=True)]
            yield {"inputs": dict(enc), "labels": torch.tensor(labels)}

    return stream


# ----------------------------------------------------------------------------- recipe


def _stage_config(cfg: CitationRecipe, stage: str) -> StageConfig:
    # The other stage's optimizer is left out, so that changing the scorer's lr after the
    # tagger finished neither retrains nor refuses the tagger.
    recipe = {k: v for k, v in to_dict(cfg).items() if k not in ("output_dir", "optim")}
    if stage == "scorer":
        recipe["tagger"] = {k: v for k, v in recipe["tagger"].items() if k != "optim"}
    optim = cfg.tagger.optim if stage == "tagger" else cfg.optim
    return StageConfig(stage=stage, optim=optim, train=cfg.train, recipe=recipe)


def _finished_stage(stage_dir: Path, stage_cfg: StageConfig) -> dict[str, Any] | None:
    """The metrics of a stage that already finished under this config, else None."""
    run_json, metrics = stage_dir / "run.json", stage_dir / "metrics.json"
    if not (run_json.is_file() and metrics.is_file() and (stage_dir / "model" / "config.json").is_file()):
        return None
    info = json.loads(run_json.read_text(encoding="utf-8"))
    if info.get("config_hash") != config_hash(stage_cfg):
        return None
    return json.loads(metrics.read_text(encoding="utf-8"))


def _run_stage(name: str, cfg: CitationRecipe, run_dir: Path, model: Any, loss_fn: Callable,
               batches: Callable, eval_fn: Callable, tokenizer: Any, baselines: dict[str, Any],
               force: bool) -> dict[str, Any]:
    """Train one stage in ``run_dir/stages/<name>`` through trainer.train (or reuse it)."""
    stage_dir = run_dir / "stages" / name
    stage_cfg = _stage_config(cfg, name)
    done = _finished_stage(stage_dir, stage_cfg)
    if done is not None:
        print(f"citation: stage {name!r} already finished in {stage_dir}; reusing it", flush=True)
        return {**done, "reused": True}
    print(f"citation: training stage {name!r} ({stage_cfg.optim.max_steps} steps) in {stage_dir}",
          flush=True)
    start = time.perf_counter()
    result = train(model, loss_fn, batches, stage_cfg, stage_dir, eval_fn, tokenizer=tokenizer,
                   baselines=baselines, force=force,
                   run_info={"task": "cite", "stage": name, "recipe": cfg.recipe})
    metrics = json.loads((stage_dir / "metrics.json").read_text(encoding="utf-8"))
    metrics["wall_s_this_invocation"] = round(time.perf_counter() - start, 2)
    metrics["resumed_from_step"] = result.resumed_from_step
    return {**metrics, "reused": False}


def _cosine_scores(name: str, pairs: Sequence[Pair], cache: Path) -> list[float]:
    from searchsmith.training.data import CachedEmbedder

    emb = CachedEmbedder(name, cache)
    sents = list(dict.fromkeys(p.sentence for p in pairs))
    docs = list(dict.fromkeys(p.passage for p in pairs))
    se, de = emb.encode(sents), emb.encode(docs)  # (S, D), (P, D)
    si = {s: i for i, s in enumerate(sents)}
    di = {d: i for i, d in enumerate(docs)}
    return [float(se[si[p.sentence]] @ de[di[p.passage]]) for p in pairs]


def cosine_attribution_scores(name: str, pairs: Sequence[Pair], cache: Path | None) -> list[float]:
    """The pipeline's fallback attribution: for each pair the best cosine between the sentence
    and one sentence of the passage (serving/pipeline/citation.py without a bundle)."""
    return best_sentence_cosines(name, [(p.sentence, p.passage) for p in pairs], cache)


def best_sentence_cosines(name: str, pairs: Sequence[tuple[str, str]], cache: Path | None) -> list[float]:
    """For each ``(sentence, passage)`` the best cosine between the sentence and one sentence of
    the passage, by the embedder ``name`` (the feature a residual scorer is given)."""
    from searchsmith.training.data import CachedEmbedder

    def parts(text: str) -> list[str]:
        return [" ".join(s.split()) for s in sentence_texts(text)] or [" ".join(text.split())]

    emb = CachedEmbedder(name, cache)
    texts = list(dict.fromkeys([" ".join(a.split()) for a, _ in pairs] + [t for _, b in pairs for t in parts(b)]))
    vecs = emb.encode(texts)  # (N, D) unit rows
    row = {t: i for i, t in enumerate(texts)}
    out = []
    for a, b in pairs:
        s = vecs[row[" ".join(a.split())]]
        out.append(float(max(vecs[row[t]] @ s for t in parts(b))))
    return out


def cosine_attribution_baseline(y: Sequence[int], scores: Sequence[float], threshold: float
                                ) -> dict[str, float]:
    """Flat baseline figures the serving gate reads (``baselines/cosine_attribution_*``)."""
    pred = [int(c >= threshold) for c in scores]
    prf = {**binary_prf(y, pred), "balanced_accuracy": balanced_accuracy(y, pred), "roc_auc": roc_auc(y, scores)}
    return {f"cosine_attribution_{k}": v for k, v in prf.items() if v is not None}


def sentence_level_figures(items: Sequence[dict[str, Any]], scores: Sequence[float], threshold: float,
                           prefix: str) -> dict[str, float]:
    """P/R/F1 (pooled over the pairs) at ``threshold`` and of each item's top document, and ROC
    AUC, of ``scores`` on the pairs of cite-format ``items`` (``prefix``: the keys' start)."""
    y = [int(d["id"] in it["cited"]) for it in items for d in it["documents"]]
    out = {f"{prefix}{k}": v for k, v in attribution_metrics(y, scores, threshold).items() if v is not None}
    top1 = top1_per_group([len(it["documents"]) for it in items], scores)
    out.update({f"{prefix}top1_{k}": v for k, v in binary_prf(y, top1).items()})
    return out


def _save_curve(path: Path, stages: dict[str, dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, m in stages.items():
        hist = m.get("history") or []
        ax.plot([h["step"] for h in hist], [h["loss"] for h in hist], marker=".", label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(title)
    save_figure(fig, path)


def _calibrate(cfg: CitationRecipe, labels: Sequence[int], logits: np.ndarray, cosine: Sequence[float],
               residual: CosineResidual | None) -> tuple[CosineResidual | None, float, dict[str, Any]]:
    """On the calibration pairs (``labels``, the scorer's raw ``logits`` and, for a residual,
    their ``cosine``): the residual's ``cross_weight`` (best ROC AUC, ties the smaller) and
    the support threshold (best F1 when ``calibrate_threshold``). Returns (residual,
    threshold, the report)."""
    from dataclasses import replace

    report: dict[str, Any] = {"pairs": len(labels)}
    if residual is not None:
        aucs = {w: roc_auc(labels, replace(residual, cross_weight=w).probs(logits, cosine).tolist()) or 0.0
                for w in sorted(set(cfg.model.cross_weights))}
        best = min(aucs, key=lambda w: (-aucs[w], w))
        residual = replace(residual, cross_weight=best)
        report["roc_auc_by_cross_weight"] = {str(w): a for w, a in aucs.items()}
        report["cross_weight"] = best
    probs = (residual.probs(logits, cosine) if residual is not None else sigmoid(logits)).tolist()
    threshold = best_f1_threshold(labels, probs)[0] if cfg.calibrate_threshold else cfg.support_threshold
    if cfg.calibrate_threshold and residual is not None and residual.cross_weight == 0 and residual.scale > 0:
        # No correction kept: the scorer is the cosine, so it cuts where the cosine baseline
        # does (data.baseline_cosine_threshold). A cut fitted on the calibration claims' sets
        # did not carry to a set left out (WiCE: F1 0.605 against the cosine's 0.729).
        threshold = float(sigmoid(np.array([residual.scale * cfg.data.baseline_cosine_threshold + residual.bias]))[0])
        report["support_threshold_rule"] = "cosine alone: the baseline's cut (data.baseline_cosine_threshold)"
    report["support_threshold"] = threshold
    report.update({f"attribution/{k}": v for k, v in attribution_metrics(labels, probs, threshold).items()})
    return residual, threshold, report


@register_recipe("citation", CitationRecipe)
def citation(cfg: CitationRecipe, run_dir: Path, force: bool = False) -> dict[str, Any]:
    """Train the entity tagger, then the attribution scorer; return the held-out metrics."""
    run_dir = Path(run_dir)
    wall_start = time.perf_counter()

    # 1. Models (both from the base; LoRA when enabled, merged at save).
    seed_everything(cfg.train.seed)  # the new heads' initial weights: the same every run
    tagger, scorer, tokenizer = build_models(cfg)
    tagger = apply_lora(tagger, cfg.lora, "TOKEN_CLS", modules_to_save=["classifier"])
    scorer = apply_lora(scorer, cfg.lora, "SEQ_CLS", modules_to_save=["classifier", "score"])

    # 2. Data: pairs split by claim; sentences for the tagger; baselines on the held-out split.
    pairs = load_pairs(cfg.data)
    train_p, eval_p = split_pairs(pairs, cfg.data)
    fit_p, cal_p = calibration_split(train_p, cfg.data)  # the scorer trains on fit_p only
    if len(fit_p) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(fit_p)} training pairs, fewer than "
                              f"optim.batch_size={cfg.optim.batch_size}; add data or lower it")
    train_sents = list(dict.fromkeys(p.sentence for p in train_p))
    eval_sents = list(dict.fromkeys(p.sentence for p in eval_p))
    if len(train_sents) < cfg.tagger.optim.batch_size:
        raise ValidationError(f"data: {len(train_sents)} training sentences, fewer than "
                              f"tagger.optim.batch_size={cfg.tagger.optim.batch_size}")
    eval_gold = [entity_spans(s) for s in eval_sents]
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {
        "seed": cfg.data.split_seed, "train": sorted({p.key for p in fit_p}),
        "calibration": sorted({p.key for p in cal_p}), "eval": sorted({p.key for p in eval_p})})
    write_jsonl_atomic(run_dir / "heldout.cite.jsonl", eval_items(eval_p))
    # WiCE's sentence-level task on the WiCE claims neither trained nor calibrated on
    wice_items = wice_sentence_items(cfg.data, {p.key for p in train_p}) if "wice" in cfg.data.sources else []
    if wice_items:
        write_jsonl_atomic(run_dir / "heldout.wice_sentences.cite.jsonl", wice_items)
    wice_pairs_ = [(it["sentence"], d["text"]) for it in wice_items for d in it["documents"]]

    @functools.cache
    def wice_cosines() -> list[float]:  # the baseline's and the residual's feature: computed once
        return best_sentence_cosines(cfg.data.baseline_embedder, wice_pairs_, cache)
    y_eval = [p.label for p in eval_p]
    eval_pairs = [(p.sentence, p.passage) for p in eval_p]
    sources = sorted({p.source for p in eval_p})
    eval_sources = [p.source for p in eval_p]
    cache = run_dir / "cache"

    # The residual's cosine term: a logistic fit of the pipeline's cosine attribution on the
    # training pairs; each pair's term is an offset of the scorer's logit.
    residual: CosineResidual | None = None
    cos_eval: list[float] = []
    if cfg.model.cosine_residual:
        cos_fit = cosine_attribution_scores(cfg.data.baseline_embedder, fit_p, cache)
        scale, bias = fit_cosine_logistic(cos_fit, [p.label for p in fit_p])
        residual = CosineResidual(scale, bias, 1.0, model_display_name(cfg.data.baseline_embedder))
        cos_eval = cosine_attribution_scores(cfg.data.baseline_embedder, eval_p, cache)
        fit_offsets = [scale * c + bias for c in cos_fit]

    def probs_of(m: Any, pairs_: Sequence[tuple[str, str]], cos: Sequence[float],
                 res: CosineResidual | None) -> np.ndarray:
        """(N,) P(supports) of the scorer ``m`` (with its residual's cosine term)."""
        if res is None:  # P(supports) as CitationModel.attribute computes it (torch's float32 sigmoid)
            return score_pairs(m, tokenizer, pairs_, cfg.max_length, cfg.eval_batch_size)
        return res.probs(score_pairs(m, tokenizer, pairs_, cfg.max_length, cfg.eval_batch_size,
                                     return_logits=True), cos)

    @functools.cache
    def attribution_cosines() -> list[float]:  # cosine attribution on the eval pairs: computed once
        return cos_eval or cosine_attribution_scores(cfg.data.baseline_embedder, eval_p, cache)

    def scorer_eval(m: Any, res: CosineResidual | None = None, threshold: float | None = None,
                    tests: bool = False) -> dict[str, float]:
        """Held-out figures of the scorer ``m``; ``tests``: with the paired tests against cosine
        attribution, claim by claim (the final model's; a bootstrap, too slow for every eval)."""
        probs = probs_of(m, eval_pairs, cos_eval, res or residual)
        cut = cfg.support_threshold if threshold is None else threshold
        out = {f"attribution/{k}": v for k, v in attribution_metrics(y_eval, probs.tolist(), cut).items()}
        for src in sources:
            idx = [i for i, p in enumerate(eval_p) if p.source == src]
            per = attribution_metrics([y_eval[i] for i in idx], [float(probs[i]) for i in idx], cut)
            out.update({f"attribution/{src}/{k}": per[k] for k in ("roc_auc", "balanced_accuracy", "f1")})
        out.update(ood_attribution(y_eval, probs.tolist(), eval_sources, cfg.data.leave_out, cut))
        if tests and cfg.data.baseline_embedder != "none":
            out.update(vs_cosine(y_eval, probs.tolist(), attribution_cosines(), [p.key for p in eval_p], cut,
                                 cfg.data.baseline_cosine_threshold, eval_sources, cfg.data.leave_out))
        return {k: v for k, v in out.items() if v is not None}

    def tagger_eval(m: Any) -> dict[str, float]:
        pred = tag_sentences(m, tokenizer, eval_sents, cfg.tagger.max_length, LABELS,
                             cfg.eval_batch_size)
        return {f"entity/{k}": v for k, v in span_prf(eval_gold, pred).items()}

    # The baselines depend on the data, the models' start and the seed, not on the optimizer:
    # cached under that key, so a rerun with other steps or lr does not recompute them.
    baselines_path = run_dir / "baselines.json"
    cfg_hash = config_hash(cfg)
    base_key = config_hash({"data": cfg.data, "model": cfg.model, "base_model": cfg.base_model,
                            "max_length": cfg.max_length, "tagger_max_length": cfg.tagger.max_length,
                            "support_threshold": cfg.support_threshold, "seed": cfg.train.seed,
                            "lora": cfg.lora, "baselines": 3})
    cached = json.loads(baselines_path.read_text("utf-8")) if baselines_path.is_file() else {}
    if cached.get("key") == base_key:
        baselines = cached["baselines"]
    else:
        always = binary_prf(y_eval, [1] * len(y_eval))
        baselines = {
            "always_support": {f"attribution/{k}": v for k, v in always.items()},
            "untrained_scorer": scorer_eval(scorer),
            "untrained_tagger": tagger_eval(tagger),
            "data": {"pairs": len(pairs), "train_pairs": len(train_p), "eval_pairs": len(eval_p),
                     "eval_positive_share": sum(y_eval) / len(y_eval),
                     "train_claims": len({p.key for p in train_p}),
                     "eval_claims": len({p.key for p in eval_p}),
                     "train_sentences": len(train_sents), "eval_sentences": len(eval_sents),
                     "eval_pairs_per_source": {s: sum(p.source == s for p in eval_p)
                                               for s in sources}},
        }
        if cfg.data.baseline_embedder != "none":
            cos = _cosine_scores(cfg.data.baseline_embedder, eval_p, run_dir / "cache")
            baselines["bi_encoder_cosine"] = {"attribution/roc_auc": roc_auc(y_eval, cos), **{
                f"attribution/{s}/roc_auc": roc_auc(
                    [y for y, p in zip(y_eval, eval_p, strict=True) if p.source == s],
                    [c for c, p in zip(cos, eval_p, strict=True) if p.source == s])
                for s in sources}}
            cos_attr = attribution_cosines()
            baselines.update(cosine_attribution_baseline(y_eval, cos_attr, cfg.data.baseline_cosine_threshold))
            for src in sources:  # per source: the out-of-domain comparison of a data.leave_out run
                idx = [i for i, p in enumerate(eval_p) if p.source == src]
                per = cosine_attribution_baseline([y_eval[i] for i in idx], [cos_attr[i] for i in idx],
                                                  cfg.data.baseline_cosine_threshold)
                baselines.update({k.replace("cosine_attribution_", f"cosine_attribution_{src}_"): v
                                  for k, v in per.items()})
            ood = [i for i, p in enumerate(eval_p) if p.source in set(cfg.data.leave_out)]
            if ood:  # the left-out sources together: what the gate reads (serving/pipeline/gates.py)
                per = cosine_attribution_baseline([y_eval[i] for i in ood], [cos_attr[i] for i in ood],
                                                  cfg.data.baseline_cosine_threshold)
                baselines.update({f"ood_{k}": v for k, v in per.items()})
            if wice_items:  # cosine at the pipeline's threshold and cosine top-1 (the best sentence)
                baselines.update(sentence_level_figures(
                    wice_items, wice_cosines(),
                    cfg.data.baseline_cosine_threshold, "wice_sentence_cosine_"))
        write_json_atomic(baselines_path, {"key": base_key, "baselines": baselines})

    # 3. Losses.
    def tagger_loss(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        logits = m(**batch["inputs"]).logits  # (B, T, L)
        return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(),
                               ignore_index=-100)

    def scorer_loss(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        logits = m(**batch["inputs"]).logits.view(-1).float()  # (B,)
        if "offset" in batch:  # the residual: the scorer learns a correction of the cosine's logit
            logits = logits + batch["offset"].to(logits.device)
        return F.binary_cross_entropy_with_logits(logits, batch["labels"].float())

    # 4. Train: each stage in its own folder, so that each resumes on its own.
    stages = {
        "tagger": _run_stage("tagger", cfg, run_dir, tagger, tagger_loss,
                             tagger_batches(train_sents, tokenizer, cfg), tagger_eval, tokenizer,
                             {"untrained_tagger": baselines["untrained_tagger"]}, force),
        "scorer": _run_stage("scorer", cfg, run_dir, scorer, scorer_loss,
                             scorer_batches(fit_p, tokenizer, cfg, fit_offsets if residual else None),
                             scorer_eval, tokenizer,
                             {"untrained_scorer": baselines["untrained_scorer"]}, force),
    }

    # 5. Save: RUN_DIR/model/{tagger,scorer,citation.json}, metrics.json, run.json, curve
    # (by the main process only: the others of an accelerate launch stop here).
    if not is_main_process():
        return {**stages["scorer"]["final"], **stages["tagger"]["final"]}
    threshold, calibration = cfg.support_threshold, {}
    paired = cfg.data.baseline_embedder != "none"
    if cal_p or wice_items or paired:
        from searchsmith.models.reranker import load_reranker

        trained = load_reranker(run_dir / "stages" / "scorer" / "model", "citation scorer")  # either head
    if not cal_p and paired:  # the paired tests of the final scorer (at the recipe's threshold)
        stages["scorer"]["final"].update({k: v for k, v in scorer_eval(trained, tests=True).items()
                                          if "_vs_cosine_" in k})
    if cal_p:
        cal_logits = score_pairs(trained, tokenizer, [(p.sentence, p.passage) for p in cal_p], cfg.max_length,
                                 cfg.eval_batch_size, return_logits=True)
        cal_cos = cosine_attribution_scores(cfg.data.baseline_embedder, cal_p, cache) if residual else []
        residual, threshold, calibration = _calibrate(cfg, [p.label for p in cal_p], cal_logits, cal_cos, residual)
        calibration["claims"] = len({p.key for p in cal_p})
        scorer_final = scorer_eval(trained, residual, threshold, tests=paired)
        stages["scorer"]["final"] = {**{k: v for k, v in stages["scorer"]["final"].items()
                                        if not k.startswith("attribution/")}, **scorer_final}
    if wice_items:
        wice_cos = wice_cosines() if residual else []
        stages["scorer"]["final"].update(sentence_level_figures(
            wice_items, probs_of(trained, wice_pairs_, wice_cos, residual).tolist(), threshold, "wice_sentence/"))
    tmp = run_dir / f".model.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("tagger", "scorer"):
        shutil.copytree(run_dir / "stages" / name / "model", tmp / name)
    write_json_atomic(tmp / "citation.json", {
        "labels": list(LABELS), "max_length": cfg.max_length,
        "tagger_max_length": cfg.tagger.max_length, "support_threshold": threshold,
        "trained_steps": {n: int(m["steps"]) for n, m in stages.items()},
        **({"cosine_residual": residual.to_json()} if residual is not None else {}),
        "base_model": model_display_name(cfg.base_model) if cfg.model.config is None
        else "random-init (model.config)", "recipe": cfg.recipe,
    })
    say_kept(run_dir / "model", replace_dir_keeping(tmp, run_dir / "model"))
    final = {**stages["scorer"]["final"], **stages["tagger"]["final"]}
    metrics = {
        "final": final, "baselines": baselines, "support_threshold": threshold, "calibration": calibration,
        "cosine_residual": residual.to_json() if residual is not None else None,
        "leave_out": list(cfg.data.leave_out),
        "stages": {n: {"steps": m["steps"], "reused": m["reused"], "processes": m.get("processes"),
                       "resumed_from_step": m.get("resumed_from_step"),
                       "train_time_s_this_invocation": m.get("train_time_s_this_invocation"),
                       "history": m.get("history", [])} for n, m in stages.items()},
        "wall_s_this_invocation": round(time.perf_counter() - wall_start, 2),
    }
    write_json_atomic(run_dir / "metrics.json", metrics)
    _save_curve(run_dir / "training_curve.png", stages, f"{cfg.recipe}: {run_dir.name}")
    write_json_atomic(run_dir / "run.json", {
        "task": "cite", "recipe": cfg.recipe, "max_length": cfg.max_length,
        "base_model": "random-init (model.config)" if cfg.model.config is not None
        else model_display_name(cfg.base_model), "config": to_dict(cfg), "config_hash": cfg_hash,
        "steps": {n: m["steps"] for n, m in stages.items()}})
    return final


__all__ = [
    "ENTITY_TYPES",
    "LABELS",
    "CitationData",
    "CitationModelSpec",
    "CitationRecipe",
    "TaggerStage",
    "build_models",
    "citation",
    "cosine_attribution_baseline",
    "cosine_attribution_scores",
    "scorer_batches",
    "tagger_batches",
]
