"""Reranker recipe: a cross-encoder (one logit per query-passage pair) trained on groups of
(query, positive, hard negatives).

The query groups (SciFact, HotpotQA, MuSiQue, 2WikiMultihopQA, synthetic) and their negative
pools are in :mod:`searchsmith.training.rerank_data`; this module registers each loader as the
dataset ``data.sources`` names. Queries are split (seeded, by query id) into train and held-out; the held-out queries are
never trained on. Hard negatives for each training query are the non-relevant passages
the untuned bi-encoder (``data.mine_with``) ranks highest. Metrics on the held-out split:
nDCG@10 and MRR@10 of the cross-encoder, beside the bi-encoder (cosine) and BM25 orderings.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import from_settings, model_display_name, resolve_model
from searchsmith.models.metrics import BM25, ranking_metrics
from searchsmith.models.rerank_mix import fused_score_fn, mixed_score_fn
from searchsmith.models.reranker import CosineResidualReranker, SegmentCosineReranker
from searchsmith.models.tokenizer import encode_pairs
from searchsmith.training.config import EncoderRecipeConfig
from searchsmith.training.data import CachedEmbedder, split_by_key, split_leaving_out
from searchsmith.training.registry import (
    get_dataset,
    get_loss,
    register_dataset,
    register_loss,
    register_recipe,
)
from searchsmith.training.rerank_data import (
    CORPORA,
    QueryGroup,
    RerankerData,
    hotpotqa_groups,
    load_groups,
    mine_hard_negatives,
    musique_groups,
    musique_hop_groups,
    random_negatives,
    scifact_groups,
    synthetic_groups,
    wikimultihop_groups,
)
from searchsmith.training.trainer import apply_lora, seed_everything, train, write_json_atomic

# The query-group sources, as the datasets data.sources names.
register_dataset("scifact")(scifact_groups)
register_dataset("hotpotqa")(hotpotqa_groups)
register_dataset("musique")(musique_groups)
register_dataset("2wikimultihopqa")(wikimultihop_groups)
register_dataset("synthetic")(synthetic_groups)


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class RerankerModel:
    """The cross-encoder: pretrained or random-init, its tokenizer and its scoring head.

    Attributes:
        config: a transformers config dict (needs ``model_type``) that builds a random-init
            model (the tiny twin) instead of loading ``base_model``; null loads the
            pretrained ``base_model``.
        tokenizer: ``default``: the pretrained base model's own tokenizer (the bundled
            all-MiniLM-L6-v2 one for ``base_model: default`` or with ``config``); else a
            local folder or hub id. The model's vocabulary must cover it.
        head: ``cls``, ``segment_cosine`` or ``cosine_residual`` (comments below).
        cross_weights: the reranker's shares against the retrieval score tried on the
            calibration queries (``data.calibration_ratio``; models/rerank_mix.py); the best
            nDCG@10 wins, ties the smaller share; each in [0, 1] (0 = the retrieval order).
        mix_lexical_weight: the retrieval score the reranker is mixed with is the cosine plus
            this x the passage's BM25 share, as the pipeline's hybrid search scores it (null:
            the pipeline's ``retrieval.lexical_weight`` default; 0: the cosine alone, for a
            pipeline that searches dense only). The bundle records it.
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    # "cls": linear head on [CLS] (a usual cross-encoder); "segment_cosine": cosine of the
    # query's and passage's mean token states after joint encoding (models/reranker.py),
    # which starts near a mean-pooling bi-encoder's similarity instead of a random head;
    # "cosine_residual": the bi-encoder's own cosine (query and passage encoded apart) plus a
    # zero-initialised cross-encoder residual: at step 0 it ranks exactly as the bi-encoder.
    head: Literal["cls", "segment_cosine", "cosine_residual"] = "cls"
    # The shares of the reranker tried against the retrieval cosine on the calibration queries
    # (data.calibration_ratio; models/rerank_mix.py): the best nDCG@10 wins, ties the smaller
    # share. Without calibration queries the reranker is used alone (share 1).
    cross_weights: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    # The retrieval score of the mix: cosine + this x BM25 share (null: the pipeline's default
    # retrieval.lexical_weight, which the rerank stage receives; 0: the cosine alone).
    mix_lexical_weight: float | None = None

    def __post_init__(self) -> None:
        lw = self.mix_lexical_weight
        if lw is not None and (isinstance(lw, bool) or not isinstance(lw, (int, float)) or not math.isfinite(lw)
                               or lw < 0):
            raise ValueError(f"model.mix_lexical_weight must be null (the pipeline's retrieval.lexical_weight) or "
                             f"a number >= 0, got {lw!r}")
        if not self.cross_weights or not all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                             and 0 <= w <= 1 for w in self.cross_weights):
            raise ValueError(f"model.cross_weights must be a non-empty list of numbers in [0, 1], got "
                             f"{self.cross_weights}")


@dataclass(frozen=True)
class RerankerRecipe(EncoderRecipeConfig):
    """The reranker recipe (YAML key = field name = override path).

    Attributes:
        recipe: the registered recipe name, ``reranker``; it selects this config class.
        output_dir: the run folder (relative to the current folder): ``checkpoints/``,
            ``model/``, ``metrics.json``, ``run.json``, ``split.json``, ``cache/``
            (embeddings). Rerunning with the same config resumes from its newest
            checkpoint. ``--output-dir`` overrides it; it is left out of the config hash.
        base_model: the pretrained encoder the cross-encoder starts from: ``default`` (the
            bundled all-MiniLM-L6-v2, offline), a local model folder or a hub id;
            ignored when ``model.config`` builds a random-init model.
        loss: the registered loss over each group's scores: ``listwise`` (softmax
            cross-entropy of the positive against its negatives) or ``bce`` (binary
            cross-entropy of each pair on its own).
        eval_batch_size: (query, passage) pairs per forward pass when scoring the held-out
            split; speed and memory only.
    """

    eval_batch_size: int = 64
    loss: str = "listwise"
    data: RerankerData = field(default_factory=RerankerData)
    model: RerankerModel = field(default_factory=RerankerModel)

    def __post_init__(self) -> None:
        super().__post_init__()
        get_loss(self.loss, field="loss")  # before the run starts: ConfigError naming the registered ones
        for name in self.data.sources:
            get_dataset(name, field="data.sources")
        if self.data.calibration_ratio and self.data.mine_with == "none":
            raise ValueError("data.calibration_ratio needs the retrieval cosine of data.mine_with, which is none; "
                             "set data.mine_with: default or data.calibration_ratio: 0")


# ----------------------------------------------------------------------------- losses


@register_loss("bce")
def bce_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on each pair's logit. scores, labels: (B, N); labels in {0, 1}."""
    return F.binary_cross_entropy_with_logits(scores.float(), labels.float())


@register_loss("listwise")
def listwise_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy over each group: -log softmax(scores)[positive], averaged.

    scores, labels: (B, N); each row has exactly one positive (label 1).
    """
    target = labels.float().argmax(dim=1)  # (B,)
    return F.cross_entropy(scores.float(), target)


# ----------------------------------------------------------------------------- model


def build_model(cfg: RerankerRecipe) -> tuple[Any, Any]:
    """The cross-encoder (sequence classification, one logit) and its tokenizer."""
    from transformers import (
        AutoModel,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    head = cfg.model.head
    segment = head != "cls"  # both cosine heads wrap a plain encoder
    heads: dict[str, Any] = {"segment_cosine": SegmentCosineReranker, "cosine_residual": CosineResidualReranker}
    if segment and cfg.lora.enabled:
        raise ConfigError("lora.enabled: LoRA is wired for model.head 'cls' only; use "
                          "model.head: cls (hub cross-encoders) or full fine-tuning")
    tok_path = resolve_model(cfg.model.tokenizer, field="model.tokenizer")
    if cfg.model.config is not None:
        # the model is built inside: a setting transformers refuses only then (heads that do not
        # divide hidden_size, a negative size) is a ConfigError too
        model = from_settings(cfg.model.config, "model.config", lambda config: (
            heads[head](AutoModel.from_config(config(num_labels=1))) if segment
            else AutoModelForSequenceClassification.from_config(config(num_labels=1))))
    else:
        path = resolve_model(cfg.base_model)
        model = (heads[head](AutoModel.from_pretrained(path)) if segment
                 else AutoModelForSequenceClassification.from_pretrained(path, num_labels=1))
        if cfg.model.tokenizer == "default" and cfg.base_model != "default":
            tok_path = path  # a hub model brings its own tokenizer
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    if segment and "token_type_ids" not in tokenizer.model_input_names:
        raise ConfigError(f"model.head: {head} needs a tokenizer with token_type_ids "
                          f"({tok_path!r} has {tokenizer.model_input_names}); use model.head: cls")
    if model.config.vocab_size < len(tokenizer):
        raise ConfigError(f"model: vocab_size {model.config.vocab_size} is smaller than the "
                          f"tokenizer's {len(tokenizer)} tokens; raise model.config.vocab_size")
    return model, tokenizer


@torch.no_grad()
def score_pairs(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int,
                batch_size: int = 64) -> list[float]:
    """Cross-encoder logits for (query, passage) pairs, in input order."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[float] = []
    # Sort by length so batches pad little; restore the order at the end.
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    scores = [0.0] * len(pairs)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        enc = encode_pairs(tokenizer, [pairs[i][0] for i in idx], [pairs[i][1] for i in idx], max_length,
                           padding=True, return_tensors="pt")
        logits = model(**enc.to(device)).logits.view(-1).float().cpu().tolist()
        for i, v in zip(idx, logits, strict=True):
            scores[i] = v
    out = scores
    if was_training:
        model.train()
    return out


def evaluate_groups(score_fn: Callable[[list[tuple[str, str]]], list[float]],
                    groups: Sequence[QueryGroup], k: int = 10,
                    ood_sources: Sequence[str] = (),
                    vs: Mapping[str, Sequence[float]] | None = None) -> dict[str, float]:
    """nDCG@k / MRR@k / recall@k overall and per source (keys like ``scifact/ndcg@10``).

    ``ood_sources``: the sources left out of training (``data.leave_out``); their queries
    together are also scored as ``ood/<metric>``, the out-of-domain figures the serving gate
    prefers (serving/pipeline/gates.py). No ``ood/`` key when none of the groups is from one.

    ``vs``: baseline name -> its nDCG@k per group (:func:`group_ndcgs`, in ``groups`` order):
    adds the paired test of this scorer against each, query by query (:func:`paired_tests`).
    """
    per_group = score_groups(score_fn, groups)
    out = ranking_metrics(per_group, k)
    for source in sorted({g.source for g in groups}):
        sub = [pg for pg, g in zip(per_group, groups, strict=True) if g.source == source]
        for key, v in ranking_metrics(sub, k).items():
            out[f"{source}/{key}"] = v
    ood = [pg for pg, g in zip(per_group, groups, strict=True) if g.source in set(ood_sources)]
    if ood:
        for key, v in ranking_metrics(ood, k).items():
            out[f"{OOD_PREFIX}{key}"] = v
    if vs:
        out.update(paired_tests([ranking_metrics([pg], k)[f"ndcg@{k}"] for pg in per_group], vs, groups,
                                ood_sources))
    return out


def score_groups(score_fn: Callable[[list[tuple[str, str]]], list[float]],
                 groups: Sequence[QueryGroup]) -> list[tuple[Sequence[float], Sequence[float]]]:
    """``(scores, labels)`` of each group: every (query, candidate) pair scored in one call."""
    flat = score_fn([(g.query, c) for g in groups for c in g.candidates])
    out, i = [], 0
    for g in groups:
        out.append((flat[i:i + len(g.candidates)], g.labels))
        i += len(g.candidates)
    return out


def group_ndcgs(score_fn: Callable[[list[tuple[str, str]]], list[float]], groups: Sequence[QueryGroup],
                k: int = 10) -> list[float]:
    """nDCG@k of ``score_fn``'s order, one per group (a baseline's side of :func:`paired_tests`)."""
    return [ranking_metrics([pg], k)[f"ndcg@{k}"] for pg in score_groups(score_fn, groups)]


def paired_tests(model: Sequence[float], vs: Mapping[str, Sequence[float]], groups: Sequence[QueryGroup],
                 ood_sources: Sequence[str] = ()) -> dict[str, float]:
    """The model's nDCG@10 against each baseline's, query by query: ``ndcg@10_vs_<name>_*``
    (:func:`searchsmith.models.stats.paired_figures`), and ``ood/ndcg@10_vs_<name>_*`` over the
    left-out sources' queries. The reranker gate needs each ``_direction`` +1: a lead of a
    few held-out queries can be chance."""
    from searchsmith.models.stats import paired_figures

    out: dict[str, float] = {}
    ood = [g.source in set(ood_sources) for g in groups]
    for name, base in vs.items():
        if len(base) != len(model):
            raise ValueError(f"paired_tests: {len(base)} {name} figures for {len(model)} queries")
        out.update(paired_figures(f"{PAIRED_PREFIX}{name}", base, model))
        if any(ood):
            out.update(paired_figures(f"{OOD_PREFIX}{PAIRED_PREFIX}{name}",
                                      [b for b, o in zip(base, ood, strict=True) if o],
                                      [m for m, o in zip(model, ood, strict=True) if o]))
    return out


def bm25_score_fn(groups: Sequence[QueryGroup], share: bool = False) -> Callable[[list[tuple[str, str]]], list[float]]:
    """BM25 scores with per-source corpus statistics (SciFact: its abstract sub-corpus); with
    ``share``, each as the share of the most its query can score (:meth:`BM25.share`, as the
    pipeline's lexical search scores a chunk)."""
    by_source: dict[str, list[str]] = {}
    for g in groups:
        docs = by_source.setdefault(g.source, [])
        docs.extend(CORPORA.get(g.corpus, []) if g.corpus else [])
        docs.extend(g.candidates)
    scorers = {source: text_bm25_fn(docs, share) for source, docs in by_source.items()}
    q_source = {g.query: g.source for g in groups}

    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        out = [0.0] * len(pairs)
        by: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by.setdefault(q_source[q], []).append(i)
        for source, idx in by.items():
            for i, v in zip(idx, scorers[source]([pairs[i] for i in idx]), strict=True):
                out[i] = v
        return out

    return fn


def text_bm25_fn(documents: Sequence[str], share: bool = False) -> Callable[[list[tuple[str, str]]], list[float]]:
    """``pairs -> BM25`` of each passage for its query, the statistics over ``documents`` (every
    passage scored must be one of them); with ``share``, :meth:`BM25.share` of it."""
    uniq = list(dict.fromkeys(documents))
    bm, pos = BM25(uniq), {d: i for i, d in enumerate(uniq)}

    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        out = []
        for q, d in pairs:
            if d not in pos:
                raise ValidationError(f"BM25: a passage ({d[:60]!r}) is not in the {len(uniq)} documents its "
                                      "statistics were built from")
            score = bm.score(q, pos[d])
            out.append(bm.share(q, score) if share else score)
        return out

    return fn


def hybrid_score_fn(groups: Sequence[QueryGroup], cosine: Callable[[list[tuple[str, str]]], list[float]],
                    weight: float | None = None, min_cosine: float | None = None
                    ) -> Callable[[list[tuple[str, str]]], list[float]]:
    """The order the pipeline's hybrid retrieval gives the candidates: ``cosine + weight x``
    the BM25 share (:func:`searchsmith.models.metrics.fuse_lexical`), at the pipeline's
    ``retrieval.lexical_weight`` and ``lexical_min_cosine`` unless given."""
    w, floor = pipeline_lexical(weight, min_cosine)
    return fused_score_fn(cosine, bm25_score_fn(groups, share=True), w, floor)


def pipeline_lexical(weight: float | None = None, min_cosine: float | None = None) -> tuple[float, float]:
    """``(lexical_weight, lexical_min_cosine)``: the given ones, else the pipeline's defaults
    (serving/pipeline/config.py ``RetrievalConfig``)."""
    from searchsmith.serving.pipeline.config import RetrievalConfig

    defaults = RetrievalConfig()
    return (defaults.lexical_weight if weight is None else float(weight),
            defaults.lexical_min_cosine if min_cosine is None else float(min_cosine))


# Orderings whose held-out figures the serving gate compares a reranker with
# (serving/pipeline/gates.py reads "baselines/<name>_<metric>" from the bundle's manifest).
GATE_BASELINES = ("bi_encoder", "bm25", "hybrid")
GATE_METRICS = ("ndcg@10", "mrr@10")
# Figures on the queries of the sources left out of training (data.leave_out).
OOD_PREFIX = "ood/"
# The paired tests against each of GATE_BASELINES: ndcg@10_vs_bi_encoder_{diff,lo,hi,p,n,direction}
PAIRED_PREFIX = "ndcg@10_vs_"


def flat_baselines(baselines: dict[str, Any]) -> dict[str, float]:
    """``{"bi_encoder_ndcg@10": .., "bm25_ndcg@10": .., ...}`` from the nested baseline figures,
    and ``ood_bi_encoder_ndcg@10`` ... from their ``ood/`` figures when a source was left out.

    The export copies only flat numbers of ``metrics.json`` "baselines" into a bundle's
    manifest (``models.export.heldout_metrics``), where the pipeline's gate reads them.
    """
    out: dict[str, float] = {}
    for name in GATE_BASELINES:
        figures = baselines.get(name)
        if isinstance(figures, dict):
            for key in GATE_METRICS:
                if isinstance(figures.get(key), (int, float)):
                    out[f"{name}_{key}"] = float(figures[key])
                if isinstance(figures.get(OOD_PREFIX + key), (int, float)):
                    out[f"ood_{name}_{key}"] = float(figures[OOD_PREFIX + key])
    return out


def cosine_score_fn(encode: Callable[[list[str]], Any]) -> Callable[[list[tuple[str, str]]], list[float]]:
    """A pair scorer giving the bi-encoder cosine of each (query, passage): ``encode`` returns
    unit vectors (n, d) for a list of texts; each distinct text is encoded once per call."""
    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        qs, ds = list(dict.fromkeys(q for q, _ in pairs)), list(dict.fromkeys(d for _, d in pairs))
        qv, dv = encode(qs), encode(ds)
        qi, di = {q: i for i, q in enumerate(qs)}, {d: i for i, d in enumerate(ds)}
        return [float(qv[qi[q]] @ dv[di[d]]) for q, d in pairs]

    return fn


def choose_cross_weight(score_fn: Callable[[list[tuple[str, str]]], list[float]],
                        cosine_fn: Callable[[list[tuple[str, str]]], list[float]],
                        groups: Sequence[QueryGroup], weights: Sequence[float]) -> tuple[float, dict[float, float]]:
    """The share of the reranker (models/rerank_mix.py) with the best nDCG@10 on ``groups``
    (the calibration queries), ties the smaller share; and nDCG@10 per share tried."""
    pairs = [(g.query, c) for g in groups for c in g.candidates]
    logits, cosines = list(score_fn(pairs)), list(cosine_fn(pairs))
    by_weight = {float(w): evaluate_groups(mixed_score_fn(lambda _p: logits, lambda _p: cosines, float(w)),
                                           groups)["ndcg@10"]
                 for w in sorted(set(weights))}
    best = max(by_weight.values())
    return min(w for w, v in by_weight.items() if v >= best - 1e-12), by_weight


# ----------------------------------------------------------------------------- batches


def make_examples(groups: Sequence[QueryGroup]) -> list[tuple[str, str, list[str]]]:
    """One (query, positive, hard-negative pool) example per relevant passage."""
    out = []
    for g in groups:
        if not g.hard_negatives:
            continue
        for c, y in zip(g.candidates, g.labels, strict=True):
            if y > 0:
                out.append((g.query, c, g.hard_negatives))
    return out


def batch_stream(examples: Sequence[tuple[str, str, list[str]]], tokenizer: Any,
                 cfg: RerankerRecipe) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches``: shuffled examples, negatives sampled from each pool.

    Each batch: ``inputs`` (tokenized B*N pairs, N = 1 + negatives_per_group) and
    ``labels`` (B, N) with the positive first.
    """
    n_neg = cfg.data.negatives_per_group
    bs = cfg.optim.batch_size

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        rng = random.Random(cfg.train.seed * 100_003 + epoch)
        order = list(range(len(examples)))
        rng.shuffle(order)
        for s in range(0, len(order) - bs + 1, bs):  # drop the ragged tail: fixed (B, N)
            queries, docs = [], []
            for i in order[s:s + bs]:
                q, pos, pool = examples[i]
                negs = rng.sample(pool, n_neg) if len(pool) >= n_neg else \
                    [pool[j % len(pool)] for j in range(n_neg)]
                for d in [pos, *negs]:
                    queries.append(q)
                    docs.append(d)
            enc = encode_pairs(tokenizer, queries, docs, cfg.data.max_length, padding=True, return_tensors="pt")
            labels = torch.zeros(bs, 1 + n_neg)
            labels[:, 0] = 1.0
            yield {"inputs": dict(enc), "labels": labels}

    return stream


# ----------------------------------------------------------------------------- recipe


@register_recipe("reranker", RerankerRecipe)
def reranker(cfg: RerankerRecipe, run_dir: Path, force: bool = False) -> dict[str, Any]:
    """Train the cross-encoder; return the held-out metrics (also in ``metrics.json``)."""
    run_dir = Path(run_dir)
    loss = get_loss(cfg.loss, field="loss")

    # 1. Model
    seed_everything(cfg.train.seed)  # the new heads' initial weights: the same every run
    model, tokenizer = build_model(cfg)
    model = apply_lora(model, cfg.lora, "SEQ_CLS", modules_to_save=["classifier", "score"])

    # 2. Data: groups, split by query, hard negatives, baselines on the held-out split.
    groups = load_groups(cfg.data)
    train_ids, eval_ids = split_leaving_out([g.qid for g in groups], [g.source for g in groups],
                                            cfg.data.leave_out, cfg.data.eval_ratio, cfg.data.split_seed)
    cal_ids: set[str] = set()
    if cfg.data.calibration_ratio and len(train_ids) >= 2:
        train_ids, cal_ids = split_by_key(sorted(train_ids), cfg.data.calibration_ratio, cfg.data.split_seed + 1)
    train_groups = [g for g in groups if g.qid in train_ids]
    if cfg.data.musique_hops and "musique" in cfg.data.sources:  # the training questions' hops only
        train_groups += musique_hop_groups(cfg.data, {g.qid for g in train_groups if g.source == "musique"})
    eval_groups = [g for g in groups if g.qid in eval_ids]
    cal_groups = [g for g in groups if g.qid in cal_ids]
    if not train_groups or not eval_groups:
        raise ValidationError(f"data: {len(groups)} queries cannot be split into train and "
                              f"held-out (data.eval_ratio={cfg.data.eval_ratio}); add data")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {"seed": cfg.data.split_seed, "train": sorted(train_ids),
                                               "calibration": sorted(cal_ids), "eval": sorted(eval_ids)})
    ood = cfg.data.leave_out
    bm25 = bm25_score_fn(groups)
    baselines: dict[str, Any] = {"bm25": evaluate_groups(bm25, eval_groups, ood_sources=ood)}
    rows = {"bm25": group_ndcgs(bm25, eval_groups)}  # per query, for the model's paired tests
    cosine: Callable[[list[tuple[str, str]]], list[float]] | None = None
    retrieval: Callable[[list[tuple[str, str]]], list[float]] | None = None  # what the mix weighs against
    mix_lexical = pipeline_lexical(cfg.model.mix_lexical_weight)
    if cfg.data.mine_with != "none":
        embedder = CachedEmbedder(cfg.data.mine_with, run_dir / "cache")
        mine_hard_negatives(train_groups, embedder.encode, cfg.data.mine_pool,
                            cfg.data.mine_corpus)

        cosine = cosine_score_fn(embedder.encode)
        baselines["bi_encoder"] = evaluate_groups(cosine, eval_groups, ood_sources=ood)
        rows["bi_encoder"] = group_ndcgs(cosine, eval_groups)
        shares = bm25_score_fn(groups, share=True)  # one BM25 index for the hybrid order and the mix
        hybrid = fused_score_fn(cosine, shares, *pipeline_lexical())  # the pipeline's order, the reranker's rival
        baselines["hybrid"] = evaluate_groups(hybrid, eval_groups, ood_sources=ood)
        rows["hybrid"] = group_ndcgs(hybrid, eval_groups)
        retrieval = fused_score_fn(cosine, shares, *mix_lexical) if mix_lexical[0] > 0 else cosine
    else:
        random_negatives(train_groups, cfg.data.mine_pool, cfg.data.split_seed)
    examples = make_examples(train_groups)
    if len(examples) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(examples)} training examples, fewer than "
                              f"optim.batch_size={cfg.optim.batch_size}; add data or lower it")
    baselines["data"] = {"train_queries": len(train_groups), "eval_queries": len(eval_groups),
                         "calibration_queries": len(cal_groups), "train_examples": len(examples)}
    baselines.update(flat_baselines(baselines))

    # 3. Loss: scores of each group's pairs against its labels.
    group_size = 1 + cfg.data.negatives_per_group

    def loss_fn(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        scores = m(**batch["inputs"]).logits.view(-1, group_size)  # (B, N)
        return loss(scores, batch["labels"])

    def eval_fn(m: Any) -> dict[str, float]:
        def model_scores(pairs: list[tuple[str, str]]) -> list[float]:
            return score_pairs(m, tokenizer, pairs, cfg.data.max_length, cfg.eval_batch_size)

        if not cal_groups or retrieval is None:
            return evaluate_groups(model_scores, eval_groups, ood_sources=ood, vs=rows)
        weight, by_weight = choose_cross_weight(model_scores, retrieval, cal_groups, cfg.model.cross_weights)
        out = evaluate_groups(mixed_score_fn(model_scores, retrieval, weight), eval_groups, ood_sources=ood, vs=rows)
        out["cross_weight"] = weight
        out["mix_lexical_weight"], out["mix_lexical_min_cosine"] = mix_lexical
        out.update({f"calibration/ndcg@10_cross_weight_{w:g}": v for w, v in by_weight.items()})
        return out

    # 4. Train (5. saving of the merged model, metrics and run.json happens inside).
    result = train(
        model, loss_fn, batch_stream(examples, tokenizer, cfg), cfg, run_dir, eval_fn,
        tokenizer=tokenizer, baselines=baselines, force=force,
        run_info={"task": "rerank", "recipe": cfg.recipe,
                  "base_model": "random-init (model.config)" if cfg.model.config is not None
                  else model_display_name(cfg.base_model),
                  "max_length": cfg.data.max_length, "mix_embedder": cfg.data.mine_with},
    )
    return result.final_metrics


__all__ = [
    "GATE_BASELINES",
    "GATE_METRICS",
    "OOD_PREFIX",
    "PAIRED_PREFIX",
    "RerankerModel",
    "RerankerRecipe",
    "bce_loss",
    "bm25_score_fn",
    "build_model",
    "choose_cross_weight",
    "cosine_score_fn",
    "evaluate_groups",
    "flat_baselines",
    "group_ndcgs",
    "hybrid_score_fn",
    "listwise_loss",
    "make_examples",
    "paired_tests",
    "pipeline_lexical",
    "reranker",
    "score_groups",
    "score_pairs",
    "text_bm25_fn",
]
