"""Reranker recipe: a cross-encoder (one logit per query-passage pair) trained on groups of
(query, positive, hard negatives).

Data sources (``data.sources``; each a registered dataset builder returning query groups):

* ``scifact``: claims with evidence (``claims_dev.jsonl``) against ``corpus_subset.jsonl``;
  candidates = BM25 top-10 plus the gold abstracts, labels from ``qrels``;
* ``hotpotqa``, ``musique``, ``2wikimultihopqa``: a question's paragraphs, gold
  (supporting) vs distractors;
* ``synthetic``: generated animal fact sheets and questions (runs without ../shared).

Queries are split (seeded, by query id) into train and held-out; the held-out queries are
never trained on. Hard negatives for each training query are the non-relevant passages
the untuned bi-encoder (``data.mine_with``) ranks highest. Metrics on the held-out split:
nDCG@10 and MRR@10 of the cross-encoder, beside the bi-encoder (cosine) and BM25 orderings.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import model_display_name, resolve_model
from searchsmith.models.reranker import CosineResidualReranker, SegmentCosineReranker
from searchsmith.models.text import read_jsonl
from searchsmith.training.config import LoraConfig, OptimConfig, TrainConfig
from searchsmith.training.data import (
    resolve_data_path,
    split_by_key,
    synthetic_facts,
)
from searchsmith.training.metrics import BM25, ranking_metrics
from searchsmith.training.registry import (
    get_dataset,
    get_loss,
    register_dataset,
    register_loss,
    register_recipe,
)
from searchsmith.training.trainer import apply_lora, train, write_json_atomic

SHARED = "../shared/data"


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class RerankerData:
    """Where the query groups come from and how they are split and mined.

    Data paths resolve as given (relative to the current folder), else against the
    repository root; a path is read only when its source is in ``sources``.

    Attributes:
        sources: the registered query-group builders to train and evaluate on: ``scifact``,
            ``hotpotqa``, ``musique``, ``2wikimultihopqa`` (real sets in ../shared/data) and
            ``synthetic`` (generated; needs no files).
        scifact_claims: SciFact claims JSONL (``id``, ``claim``, ``qrels``, optional
            ``bm25_top10``); a claim's candidates are its BM25 top 10 plus its gold abstracts.
        scifact_corpus: SciFact abstracts JSONL (``doc_id``, ``title``, ``abstract``) the
            claims point into; also BM25's corpus statistics and ``mine_corpus``'s pool.
        hotpotqa: HotpotQA distractor JSONL (``_id``, ``question``, ``context``,
            ``supporting_titles``); the supporting paragraphs are the relevant ones.
        musique: MuSiQue JSONL (``id``, ``question``, ``paragraphs`` with ``is_supporting``).
        wikimultihop: 2WikiMultihopQA JSONL (``_id``, ``question``, ``context``,
            ``supporting_facts``), read for the ``2wikimultihopqa`` source.
        synthetic_queries: questions generated for the ``synthetic`` source, each asking two
            facts of one animal sheet among up to 10 candidate sheets; ambiguous ones are
            skipped, so somewhat fewer groups result.
        eval_ratio: share of the queries (all sources together, by query id) held out for
            evaluation and never trained on; at least one query.
        split_seed: seed of the train/held-out split (and of the random negatives when
            ``mine_with`` is ``none``); another value gives another split.
        mine_pool: how many non-relevant passages each training query keeps as its negative
            pool (those the ``mine_with`` bi-encoder ranks highest; random ones with
            ``none``); every epoch samples ``negatives_per_group`` of them. Larger: more
            varied but on average easier negatives. At least ``negatives_per_group``.
        max_length: token limit of a (query, passage) pair in training and held-out scoring;
            the passage is truncated. The cost of a step grows with pairs x tokens.
    """

    sources: list[str] = field(default_factory=lambda: ["scifact", "hotpotqa", "musique",
                                                        "2wikimultihopqa"])
    scifact_claims: str = f"{SHARED}/scifact/claims_dev.jsonl"
    scifact_corpus: str = f"{SHARED}/scifact/corpus_subset.jsonl"
    hotpotqa: str = f"{SHARED}/hotpotqa/hotpotqa_dev_distractor.jsonl"
    musique: str = f"{SHARED}/musique/musique_ans_200.jsonl"
    wikimultihop: str = f"{SHARED}/2wikimultihopqa/2wikimultihopqa_dev.jsonl"
    synthetic_queries: int = 300
    # Share of the synthetic questions' facts named by a paraphrase ("conifer woods" for "pine
    # forests"): 0 asks with the sheets' own words, which BM25 matches perfectly; a share > 0
    # makes the questions need meaning rather than word overlap.
    synthetic_paraphrase: float = 0.0
    eval_ratio: float = 0.2
    split_seed: int = 13
    # Group size = 1 positive + negatives_per_group; sampled each epoch from the mined pool.
    negatives_per_group: int = 7
    mine_pool: int = 20
    # Embedder that mines hard negatives and is the bi-encoder baseline ("none": random negatives, no baseline).
    mine_with: str = "default"
    # Also mine from the shared corpus (SciFact's 1,491 abstracts): harder negatives, but
    # embedding it costs minutes on a 2-core CPU; off = mine among each query's candidates.
    mine_corpus: bool = False
    max_length: int = 256

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic]")
        if self.negatives_per_group < 1:
            raise ValueError(f"data.negatives_per_group must be >= 1, got {self.negatives_per_group}")
        if self.mine_pool < self.negatives_per_group:
            raise ValueError(f"data.mine_pool ({self.mine_pool}) must be >= "
                             f"data.negatives_per_group ({self.negatives_per_group})")
        if not 8 <= self.max_length <= 8192:
            raise ValueError(f"data.max_length must be in [8, 8192], got {self.max_length}")
        if not 0.0 <= self.synthetic_paraphrase <= 1.0:
            raise ValueError(f"data.synthetic_paraphrase must be in [0, 1], got {self.synthetic_paraphrase}")


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
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    # "cls": linear head on [CLS] (a usual cross-encoder); "segment_cosine": cosine of the
    # query's and passage's mean token states after joint encoding (models/reranker.py),
    # which starts near a mean-pooling bi-encoder's similarity instead of a random head;
    # "cosine_residual": the bi-encoder's own cosine (query and passage encoded apart) plus a
    # zero-initialised cross-encoder residual: at step 0 it ranks exactly as the bi-encoder.
    head: Literal["cls", "segment_cosine", "cosine_residual"] = "cls"


@dataclass(frozen=True)
class RerankerRecipe:
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

    recipe: str
    output_dir: str
    base_model: str = "default"
    loss: str = "listwise"
    eval_batch_size: int = 64
    data: RerankerData = field(default_factory=RerankerData)
    model: RerankerModel = field(default_factory=RerankerModel)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")


# ----------------------------------------------------------------------------- data


@dataclass
class QueryGroup:
    """One query with its candidate passages and graded labels (>0 relevant).

    ``corpus`` (optional) names a document collection the hard negatives may also come
    from (SciFact's abstract sub-corpus); it is shared between groups.
    """

    qid: str
    source: str
    query: str
    candidates: list[str]
    labels: list[int]
    corpus: str | None = None
    hard_negatives: list[str] = field(default_factory=list)


def check_group(g: QueryGroup, where: str) -> None:
    """Raise ValidationError for an empty query, mismatched or out-of-range labels."""
    if not g.query.strip():
        raise ValidationError(f"{where}: query {g.qid!r} is empty")
    if len(g.candidates) != len(g.labels):
        raise ValidationError(f"{where}: query {g.qid!r} has {len(g.candidates)} candidates "
                              f"but {len(g.labels)} labels")
    bad = [x for x in g.labels if not isinstance(x, (int, np.integer)) or x < 0 or x > 3]
    if bad:
        raise ValidationError(f"{where}: query {g.qid!r} has labels {bad} out of range; "
                              "expected integers in [0, 3] (0 = not relevant)")


# Shared corpora by name (SciFact abstracts) so that groups need not copy them.
_CORPORA: dict[str, list[str]] = {}


@register_dataset("scifact")
def scifact_groups(data: RerankerData) -> list[QueryGroup]:
    """SciFact claims with evidence: BM25 top-10 plus gold abstracts, labels from qrels."""
    claims_path = resolve_data_path(data.scifact_claims, "data.scifact_claims")
    corpus_path = resolve_data_path(data.scifact_corpus, "data.scifact_corpus")
    docs = {}
    for d in read_jsonl(corpus_path, required=("doc_id", "title", "abstract")):
        docs[str(d["doc_id"])] = f"{d['title']} {' '.join(d['abstract'])}".strip()
    _CORPORA["scifact"] = list(docs.values())
    groups = []
    for c in read_jsonl(claims_path, required=("id", "claim", "qrels")):
        if not c["qrels"]:
            continue  # "not enough info" claims have no relevant abstract
        gold = {str(d) for d in c["qrels"]}
        cand_ids = [str(d) for d, _ in (c.get("bm25_top10") or [])]
        cand_ids += [d for d in sorted(gold) if d not in cand_ids]
        missing = [d for d in cand_ids if d not in docs]
        if missing:
            raise ValidationError(f"{claims_path}: claim {c['id']} names doc ids {missing[:3]} "
                                  f"not in {corpus_path}")
        groups.append(QueryGroup(f"scifact-{c['id']}", "scifact", c["claim"],
                                 [docs[d] for d in cand_ids],
                                 [1 if d in gold else 0 for d in cand_ids], corpus="scifact"))
    return groups


def _paragraph_text(title: str, sentences: Sequence[str] | str) -> str:
    body = sentences if isinstance(sentences, str) else "".join(sentences)
    return f"{title}. {body.strip()}"


@register_dataset("hotpotqa")
def hotpotqa_groups(data: RerankerData) -> list[QueryGroup]:
    """HotpotQA distractor setting: 10 paragraphs, the supporting titles are relevant."""
    path = resolve_data_path(data.hotpotqa, "data.hotpotqa")
    groups = []
    for r in read_jsonl(path, required=("_id", "question", "context", "supporting_titles")):
        gold = set(r["supporting_titles"])
        cands = [(_paragraph_text(t, s), int(t in gold)) for t, s in r["context"]]
        groups.append(QueryGroup(f"hotpotqa-{r['_id']}", "hotpotqa", r["question"],
                                 [c for c, _ in cands], [y for _, y in cands]))
    return groups


@register_dataset("musique")
def musique_groups(data: RerankerData) -> list[QueryGroup]:
    """MuSiQue: 20 paragraphs per question, ``is_supporting`` ones are relevant."""
    path = resolve_data_path(data.musique, "data.musique")
    groups = []
    for r in read_jsonl(path, required=("id", "question", "paragraphs")):
        ps = r["paragraphs"]
        groups.append(QueryGroup(f"musique-{r['id']}", "musique", r["question"],
                                 [_paragraph_text(p["title"], p["paragraph_text"]) for p in ps],
                                 [int(bool(p["is_supporting"])) for p in ps]))
    return groups


@register_dataset("2wikimultihopqa")
def wikimultihop_groups(data: RerankerData) -> list[QueryGroup]:
    """2WikiMultihopQA: 10 paragraphs, titles in ``supporting_facts`` are relevant."""
    path = resolve_data_path(data.wikimultihop, "data.wikimultihop")
    groups = []
    for r in read_jsonl(path, required=("_id", "question", "context", "supporting_facts")):
        gold = {t for t, _ in r["supporting_facts"]}
        cands = [(_paragraph_text(t, s), int(t in gold)) for t, s in r["context"]]
        groups.append(QueryGroup(f"2wiki-{r['_id']}", "2wikimultihopqa", r["question"],
                                 [c for c, _ in cands], [y for _, y in cands]))
    return groups


# Paraphrases of every fact value of training.data.synthetic_facts, sharing no word with it.
PARAPHRASES: dict[str, str] = {
    "river banks": "riversides", "mountain cliffs": "sheer rock faces", "pine forests": "conifer woods",
    "salt marshes": "coastal wetlands", "open grassland": "prairie", "desert dunes": "arid sand seas",
    "arctic ice": "polar floes", "alpine meadows": "high pastures", "rainforest canopy": "tropical treetops",
    "rocky coasts": "stony shorelines",
    "fish": "trout and salmon", "insects": "beetles and flies", "seeds": "grains and kernels",
    "small rodents": "mice and voles", "berries": "soft fruit", "leaves": "foliage", "crabs": "shellfish",
    "worms": "earthworms", "grass": "turf", "eggs": "unhatched clutches",
    "nocturnal": "night-active", "migratory": "seasonally travelling", "solitary": "lone-living",
    "social": "herd-dwelling", "territorial": "range-guarding", "burrowing": "tunnel-digging",
    "diving": "underwater-plunging", "gliding": "soaring",
    "brown": "chestnut-hued", "grey": "ash-toned", "black": "jet-dark", "white": "snowy", "red": "crimson",
    "spotted": "dappled", "striped": "banded", "golden": "amber-hued",
}


@register_dataset("synthetic")
def synthetic_groups(data: RerankerData, seed: int = 7) -> list[QueryGroup]:
    """Generated questions over made-up animal fact sheets; hard negatives share one fact.

    Each query asks for two facts of one animal; its candidates are that animal's sheet
    (relevant) and up to 9 sheets that match at most one of the two facts. With
    ``data.synthetic_paraphrase`` each fact is asked with that probability by its
    :data:`PARAPHRASES` entry instead of the sheet's words.
    """
    n = data.synthetic_queries
    if n < 1:
        raise ConfigError("data.synthetic_queries must be >= 1 when 'synthetic' is a source")
    facts = synthetic_facts(max(48, n // 4), seed)
    sheet = {f["name"]: (f"The {f['name']} is a {f['colour']} {f['trait']} animal. It lives in "
                         f"{f['habitat']} and feeds mainly on {f['food']}.") for f in facts}
    templates = [
        ("habitat", "food", "which animal living in {habitat} eats {food}?"),
        ("trait", "habitat", "name a {trait} animal found in {habitat}"),
        ("colour", "food", "what {colour} animal feeds on {food}?"),
        ("trait", "food", "{trait} creature whose diet is {food}"),
    ]
    rng = random.Random(seed)
    # A separate stream, so that synthetic_paraphrase: 0 gives the same groups as before it existed.
    para_rng = random.Random(seed + 1)
    groups = []
    for i in range(n):
        a, b, tpl = templates[i % len(templates)]
        target = rng.choice(facts)
        match = [f for f in facts if f[a] == target[a] and f[b] == target[b]]
        if len(match) != 1:
            continue  # ambiguous question: another sheet answers it too
        near = [f for f in facts if (f[a] == target[a]) != (f[b] == target[b])]
        far = [f for f in facts if f[a] != target[a] and f[b] != target[b]]
        rng.shuffle(near)
        rng.shuffle(far)
        negs = (near + far)[:9]
        cands = [(sheet[target["name"]], 1)] + [(sheet[f["name"]], 0) for f in negs]
        rng.shuffle(cands)
        asked = {k: (PARAPHRASES.get(v, v) if para_rng.random() < data.synthetic_paraphrase else v)
                 for k, v in target.items()}
        groups.append(QueryGroup(f"synthetic-{i}", "synthetic", tpl.format(**asked),
                                 [c for c, _ in cands], [y for _, y in cands]))
    if not groups:
        raise ValidationError("synthetic: no unambiguous question was generated; raise "
                              "data.synthetic_queries")
    return groups


def load_groups(data: RerankerData) -> list[QueryGroup]:
    """Every group of every source in ``data.sources``, validated."""
    groups: list[QueryGroup] = []
    for name in data.sources:
        got = get_dataset(name, field="data.sources")(data)
        if not got:
            raise ValidationError(f"data.sources: {name!r} gave no query with a relevant "
                                  "passage (empty dataset); check its file")
        for g in got:
            check_group(g, f"data.sources[{name}]")
        groups.extend(got)
    return groups


# ----------------------------------------------------------------------------- embedder


class CachedEmbedder:
    """sentence-transformers ``encode`` with a per-run disk cache keyed by the texts' hash."""

    def __init__(self, name: str, cache_dir: Path | None, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(resolve_model(name, field="data.mine_with"), device="cpu"
                                         if not torch.cuda.is_available() else None)
        self.cache_dir, self.batch_size = cache_dir, batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised embeddings, shape (N, D) float32."""
        key = hashlib.sha256("\x1f".join(texts).encode("utf-8")).hexdigest()[:16]
        path = self.cache_dir / f"emb-{key}.npy" if self.cache_dir else None
        if path is not None and path.is_file():
            return np.load(path)
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        emb = emb.astype(np.float32)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.stem}.tmp.npy")
            np.save(tmp, emb)
            tmp.replace(path)
        return emb


def mine_hard_negatives(groups: list[QueryGroup], embed: Callable[[Sequence[str]], np.ndarray],
                        pool_size: int, use_corpus: bool = False) -> None:
    """Fill ``g.hard_negatives``: the ``pool_size`` non-relevant passages most similar to the
    query under the bi-encoder, from the group's candidates (and its shared corpus when
    ``use_corpus``)."""
    def pool_of(g: QueryGroup) -> list[str]:
        extra = _CORPORA.get(g.corpus, []) if (use_corpus and g.corpus) else []
        return list(dict.fromkeys(g.candidates + extra))

    pools = []
    for g in groups:
        positives = {c for c, y in zip(g.candidates, g.labels, strict=True) if y > 0}
        pools.append([t for t in pool_of(g) if t not in positives])
    # A group with no more negatives than the pool keeps them all: no need to embed it
    # (this skips most of the embedding work on a CPU).
    todo = [i for i, pool in enumerate(pools) if len(pool) > pool_size]
    for i, g in enumerate(groups):
        if len(pools[i]) <= pool_size:
            g.hard_negatives = pools[i]
    if not todo:
        return
    texts: dict[str, int] = {}
    for i in todo:
        for t in pools[i]:
            texts.setdefault(t, len(texts))
    doc_emb = embed(list(texts))  # (P, D)
    q_emb = embed([groups[i].query for i in todo])  # (Q, D)
    for qi, i in enumerate(todo):
        g, pool = groups[i], pools[i]
        idx = np.array([texts[t] for t in pool])
        sims = doc_emb[idx] @ q_emb[qi]  # (len(pool),)
        order = np.argsort(-sims, kind="stable")[:pool_size]
        g.hard_negatives = [pool[j] for j in order]


def random_negatives(groups: list[QueryGroup], pool_size: int, seed: int) -> None:
    """Fallback without an embedder: random non-relevant candidates."""
    rng = random.Random(seed)
    for g in groups:
        pool = [c for c, y in zip(g.candidates, g.labels, strict=True) if y == 0]
        rng.shuffle(pool)
        g.hard_negatives = pool[:pool_size]


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
        AutoConfig,
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
        conf = dict(cfg.model.config)
        model_type = conf.pop("model_type", None)
        if not model_type:
            raise ConfigError("model.config: needs 'model_type' (e.g. bert) to build a model")
        try:
            hf_cfg = AutoConfig.for_model(model_type, num_labels=1, **conf)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"model.config: {exc}") from None
        model = (heads[head](AutoModel.from_config(hf_cfg)) if segment
                 else AutoModelForSequenceClassification.from_config(hf_cfg))
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
        enc = tokenizer([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], padding=True,
                        truncation="only_second", max_length=max_length, return_tensors="pt")
        logits = model(**enc.to(device)).logits.view(-1).float().cpu().tolist()
        for i, v in zip(idx, logits, strict=True):
            scores[i] = v
    out = scores
    if was_training:
        model.train()
    return out


def evaluate_groups(score_fn: Callable[[list[tuple[str, str]]], list[float]],
                    groups: Sequence[QueryGroup], k: int = 10) -> dict[str, float]:
    """nDCG@k / MRR@k / recall@k overall and per source (keys like ``scifact/ndcg@10``)."""
    pairs = [(g.query, c) for g in groups for c in g.candidates]
    flat = score_fn(pairs)
    per_group, i = [], 0
    for g in groups:
        per_group.append((flat[i:i + len(g.candidates)], g.labels))
        i += len(g.candidates)
    out = ranking_metrics(per_group, k)
    for source in sorted({g.source for g in groups}):
        sub = [pg for pg, g in zip(per_group, groups, strict=True) if g.source == source]
        for key, v in ranking_metrics(sub, k).items():
            out[f"{source}/{key}"] = v
    return out


def bm25_score_fn(groups: Sequence[QueryGroup]) -> Callable[[list[tuple[str, str]]], list[float]]:
    """BM25 scores with per-source corpus statistics (SciFact: its abstract sub-corpus)."""
    indexes: dict[str, tuple[BM25, dict[str, int]]] = {}
    doc_source: dict[str, str] = {}
    by_source: dict[str, list[str]] = {}
    for g in groups:
        docs = by_source.setdefault(g.source, [])
        docs.extend(_CORPORA.get(g.corpus, []) if g.corpus else [])
        docs.extend(g.candidates)
    for source, docs in by_source.items():
        uniq = list(dict.fromkeys(docs))
        indexes[source] = (BM25(uniq), {d: i for i, d in enumerate(uniq)})
    q_source = {g.query: g.source for g in groups}
    del doc_source

    def fn(pairs: list[tuple[str, str]]) -> list[float]:
        out = []
        for q, d in pairs:
            bm, pos = indexes[q_source[q]]
            out.append(bm.score(q, pos[d]))
        return out

    return fn


# Orderings whose held-out figures the serving gate compares a reranker with
# (serving/pipeline/gates.py reads "baselines/<name>_<metric>" from the bundle's manifest).
GATE_BASELINES = ("bi_encoder", "bm25")
GATE_METRICS = ("ndcg@10", "mrr@10")


def flat_baselines(baselines: dict[str, Any]) -> dict[str, float]:
    """``{"bi_encoder_ndcg@10": .., "bm25_ndcg@10": .., ...}`` from the nested baseline figures.

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
    return out


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
            enc = tokenizer(queries, docs, padding=True, truncation="only_second",
                            max_length=cfg.data.max_length, return_tensors="pt")
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
    model, tokenizer = build_model(cfg)
    model = apply_lora(model, cfg.lora, "SEQ_CLS", modules_to_save=["classifier", "score"])

    # 2. Data: groups, split by query, hard negatives, baselines on the held-out split.
    groups = load_groups(cfg.data)
    train_ids, eval_ids = split_by_key([g.qid for g in groups], cfg.data.eval_ratio,
                                       cfg.data.split_seed)
    train_groups = [g for g in groups if g.qid in train_ids]
    eval_groups = [g for g in groups if g.qid in eval_ids]
    if not train_groups or not eval_groups:
        raise ValidationError(f"data: {len(groups)} queries cannot be split into train and "
                              f"held-out (data.eval_ratio={cfg.data.eval_ratio}); add data")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {"seed": cfg.data.split_seed,
                                               "train": sorted(train_ids), "eval": sorted(eval_ids)})
    baselines: dict[str, Any] = {"bm25": evaluate_groups(bm25_score_fn(groups), eval_groups)}
    if cfg.data.mine_with != "none":
        embedder = CachedEmbedder(cfg.data.mine_with, run_dir / "cache")
        mine_hard_negatives(train_groups, embedder.encode, cfg.data.mine_pool,
                            cfg.data.mine_corpus)

        def cosine(pairs: list[tuple[str, str]]) -> list[float]:
            qs = embedder.encode(list(dict.fromkeys(q for q, _ in pairs)))
            ds = embedder.encode(list(dict.fromkeys(d for _, d in pairs)))
            qi = {q: i for i, q in enumerate(dict.fromkeys(q for q, _ in pairs))}
            di = {d: i for i, d in enumerate(dict.fromkeys(d for _, d in pairs))}
            return [float(qs[qi[q]] @ ds[di[d]]) for q, d in pairs]

        baselines["bi_encoder"] = evaluate_groups(cosine, eval_groups)
        del embedder
    else:
        random_negatives(train_groups, cfg.data.mine_pool, cfg.data.split_seed)
    examples = make_examples(train_groups)
    if len(examples) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(examples)} training examples, fewer than "
                              f"optim.batch_size={cfg.optim.batch_size}; add data or lower it")
    baselines["data"] = {"train_queries": len(train_groups), "eval_queries": len(eval_groups),
                         "train_examples": len(examples)}
    baselines.update(flat_baselines(baselines))

    # 3. Loss: scores of each group's pairs against its labels.
    group_size = 1 + cfg.data.negatives_per_group

    def loss_fn(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        scores = m(**batch["inputs"]).logits.view(-1, group_size)  # (B, N)
        return loss(scores, batch["labels"])

    def eval_fn(m: Any) -> dict[str, float]:
        return evaluate_groups(
            lambda pairs: score_pairs(m, tokenizer, pairs, cfg.data.max_length,
                                      cfg.eval_batch_size), eval_groups)

    # 4. Train (5. saving of the merged model, metrics and run.json happens inside).
    result = train(
        model, loss_fn, batch_stream(examples, tokenizer, cfg), cfg, run_dir, eval_fn,
        tokenizer=tokenizer, baselines=baselines, force=force,
        run_info={"task": "rerank", "recipe": cfg.recipe,
                  "base_model": "random-init (model.config)" if cfg.model.config is not None
                  else model_display_name(cfg.base_model),
                  "max_length": cfg.data.max_length},
    )
    return result.final_metrics


__all__ = [
    "QueryGroup",
    "RerankerData",
    "RerankerModel",
    "RerankerRecipe",
    "bce_loss",
    "bm25_score_fn",
    "build_model",
    "evaluate_groups",
    "flat_baselines",
    "listwise_loss",
    "load_groups",
    "mine_hard_negatives",
    "reranker",
    "score_pairs",
]
