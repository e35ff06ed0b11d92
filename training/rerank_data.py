"""Data for the reranker: query groups (a query, its candidate passages, graded labels) and
their negative pools.

Sources (``data.sources``; the recipe registers each loader as a dataset of that name):

* ``scifact``: claims with evidence (``claims_dev.jsonl``) against ``corpus_subset.jsonl``;
  candidates = BM25 top-10 plus the gold abstracts, labels from ``qrels``;
* ``hotpotqa``, ``musique``, ``2wikimultihopqa``: a question's paragraphs, gold
  (supporting) vs distractors;
* ``synthetic``: generated animal fact sheets and questions (runs without ../shared).

Negative pools: :func:`mine_hard_negatives` keeps the non-relevant passages a bi-encoder
ranks highest; :func:`random_negatives` is the fallback without an embedder.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.training.data import (
    SHARED_DATA,
    check_leave_out,
    resolve_data_path,
    synthetic_facts,
)
from searchsmith.training.dataset_shapes import (
    HOTPOTQA,
    MUSIQUE,
    SCIFACT_ABSTRACT,
    SCIFACT_CLAIM,
    WIKIMULTIHOPQA,
    scifact_outside_corpus,
)
from searchsmith.training.registry import get_dataset

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
        leave_out: sources whose queries are all held out (never trained on): a
            leave-one-dataset-out evaluation, whose per-source figures
            (``<source>/ndcg@10`` beside BM25's and the bi-encoder's) are out-of-domain;
            together they are ``ood/ndcg@10`` (``baselines/ood_bm25_ndcg@10``, ...), the
            figures the pipeline's gate then reads instead of the pooled split's.
            Each must be in ``sources``; empty: the usual split.
        calibration_ratio: share of the training queries (by id, after the held-out split)
            kept out of training to choose ``model.cross_weights``: the reranker's share
            against the retrieval cosine (models/rerank_mix.py), recorded as the run's
            ``cross_weight`` and served by the pipeline. 0: no calibration, the reranker alone.
            Needs ``mine_with`` (the cosine's embedder).
        mine_pool: how many non-relevant passages each training query keeps as its negative
            pool (those the ``mine_with`` bi-encoder ranks highest; random ones with
            ``none``); every epoch samples ``negatives_per_group`` of them. Larger: more
            varied but on average easier negatives. At least ``negatives_per_group``.
        max_length: token limit of a (query, passage) pair in training and held-out scoring;
            the passage is truncated. The cost of a step grows with pairs x tokens.
        musique_hops: also train on the per-hop sub-questions of the MuSiQue questions in the
            training split (:func:`musique_hop_groups`: ``#k`` filled with hop k's answer, the
            hop's supporting paragraph the one relevant among the question's 20); never
            evaluated on, and none from a held-out question.
    """

    sources: list[str] = field(default_factory=lambda: ["scifact", "hotpotqa", "musique",
                                                        "2wikimultihopqa"])
    scifact_claims: str = f"{SHARED_DATA}/scifact/claims_dev.jsonl"
    scifact_corpus: str = f"{SHARED_DATA}/scifact/corpus_subset.jsonl"
    hotpotqa: str = f"{SHARED_DATA}/hotpotqa/hotpotqa_dev_distractor.jsonl"
    musique: str = f"{SHARED_DATA}/musique/musique_ans_200.jsonl"
    wikimultihop: str = f"{SHARED_DATA}/2wikimultihopqa/2wikimultihopqa_dev.jsonl"
    synthetic_queries: int = 300
    # Share of the synthetic questions' facts named by a paraphrase ("conifer woods" for "pine
    # forests"): 0 asks with the sheets' own words, which BM25 matches perfectly; a share > 0
    # makes the questions need meaning rather than word overlap.
    synthetic_paraphrase: float = 0.0
    eval_ratio: float = 0.2
    split_seed: int = 13
    leave_out: list[str] = field(default_factory=list)
    calibration_ratio: float = 0.0
    # Group size = 1 positive + negatives_per_group; sampled each epoch from the mined pool.
    negatives_per_group: int = 7
    mine_pool: int = 20
    # Embedder that mines hard negatives and is the bi-encoder baseline ("none": random negatives, no baseline).
    mine_with: str = "default"
    # Also mine from the shared corpus (SciFact's 1,491 abstracts): harder negatives, but
    # embedding it costs minutes on a 2-core CPU; off = mine among each query's candidates.
    mine_corpus: bool = False
    max_length: int = 256
    # Also train on MuSiQue's per-hop sub-questions (each with the one paragraph that answers
    # it among its question's 20): single-hop queries that name their entity; training
    # questions' hops only (musique_hop_groups).
    musique_hops: bool = False

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic]")
        check_leave_out(self.sources, self.leave_out)
        if not 0 <= self.calibration_ratio < 0.5:
            raise ValueError(f"data.calibration_ratio must be in [0, 0.5), got {self.calibration_ratio}; "
                             "e.g. 0.15")
        if self.negatives_per_group < 1:
            raise ValueError(f"data.negatives_per_group must be >= 1, got {self.negatives_per_group}")
        if self.mine_pool < self.negatives_per_group:
            raise ValueError(f"data.mine_pool ({self.mine_pool}) must be >= "
                             f"data.negatives_per_group ({self.negatives_per_group})")
        if not 8 <= self.max_length <= 8192:
            raise ValueError(f"data.max_length must be in [8, 8192], got {self.max_length}")
        if not 0.0 <= self.synthetic_paraphrase <= 1.0:
            raise ValueError(f"data.synthetic_paraphrase must be in [0, 1], got {self.synthetic_paraphrase}")
        if not 0.0 < self.eval_ratio < 1.0:
            raise ValueError(f"data.eval_ratio must be in (0, 1), got {self.eval_ratio}; e.g. 0.2")
        if self.synthetic_queries < 0 or (self.synthetic_queries == 0 and "synthetic" in self.sources):
            raise ValueError(f"data.synthetic_queries must be >= 1 when 'synthetic' is a source (>= 0 otherwise), "
                             f"got {self.synthetic_queries}")


# ----------------------------------------------------------------------------- query groups


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
CORPORA: dict[str, list[str]] = {}


def scifact_groups(data: RerankerData) -> list[QueryGroup]:
    """SciFact claims with evidence: BM25 top-10 plus gold abstracts, labels from qrels."""
    claims_path = resolve_data_path(data.scifact_claims, "data.scifact_claims")
    corpus_path = resolve_data_path(data.scifact_corpus, "data.scifact_corpus")
    corpus = SCIFACT_ABSTRACT.read(corpus_path, "data.scifact_corpus", ("doc_id", "title", "abstract"))
    docs = {str(d["doc_id"]): f"{d['title']} {' '.join(d['abstract'])}".strip() for d in corpus}
    CORPORA["scifact"] = list(docs.values())
    # every candidate (qrels, bm25_top10) must be an abstract of the corpus: checked at the claim's line
    outside = scifact_outside_corpus({str(d["doc_id"]): d["abstract"] for d in corpus},
                                     f"{corpus_path} (data.scifact_corpus)")
    groups = []
    for c in SCIFACT_CLAIM.read(claims_path, "data.scifact_claims", ("id", "claim", "qrels"), ("bm25_top10",),
                                then=outside):
        if not c["qrels"]:
            continue  # "not enough info" claims have no relevant abstract
        gold = {str(d) for d in c["qrels"]}
        cand_ids = [str(d) for d, _ in (c.get("bm25_top10") or [])]
        cand_ids += [d for d in sorted(gold) if d not in cand_ids]
        groups.append(QueryGroup(f"scifact-{c['id']}", "scifact", c["claim"],
                                 [docs[d] for d in cand_ids],
                                 [1 if d in gold else 0 for d in cand_ids], corpus="scifact"))
    return groups


def _paragraph_text(title: str, sentences: Sequence[str] | str) -> str:
    body = sentences if isinstance(sentences, str) else "".join(sentences)
    return f"{title}. {body.strip()}"


def hotpotqa_groups(data: RerankerData) -> list[QueryGroup]:
    """HotpotQA distractor setting: 10 paragraphs, the supporting titles are relevant."""
    path = resolve_data_path(data.hotpotqa, "data.hotpotqa")
    groups = []
    for r in HOTPOTQA.read(path, "data.hotpotqa", ("_id", "question", "context", "supporting_titles")):
        gold = set(r["supporting_titles"])
        cands = [(_paragraph_text(t, s), int(t in gold)) for t, s in r["context"]]
        groups.append(QueryGroup(f"hotpotqa-{r['_id']}", "hotpotqa", r["question"],
                                 [c for c, _ in cands], [y for _, y in cands]))
    return groups


def _musique_records(data: RerankerData) -> list[dict[str, Any]]:
    return MUSIQUE.read(resolve_data_path(data.musique, "data.musique"), "data.musique", ("id", "question", "paragraphs"),
                        ("question_decomposition",))


def musique_groups(data: RerankerData) -> list[QueryGroup]:
    """MuSiQue: 20 paragraphs per question, ``is_supporting`` ones are relevant."""
    groups = []
    for r in _musique_records(data):
        ps = r["paragraphs"]
        groups.append(QueryGroup(f"musique-{r['id']}", "musique", r["question"],
                                 [_paragraph_text(p["title"], p["paragraph_text"]) for p in ps],
                                 [int(bool(p["is_supporting"])) for p in ps]))
    return groups


def _hop_query(step: str, answers: Sequence[str]) -> str:
    """A MuSiQue sub-question as a query: ``#k`` replaced by hop k's answer, and a KB-style
    step ``subject >> relation`` written ``relation of subject``."""
    text = re.sub(r"#(\d+)", lambda m: answers[int(m.group(1)) - 1] if 0 < int(m.group(1)) <= len(answers)
                  else m.group(0), step)
    if ">>" in text:
        subject, _, relation = text.partition(">>")
        text = f"{relation.strip()} of {subject.strip()}"
    return text.strip()


def musique_hop_groups(data: RerankerData, parent_ids: set[str]) -> list[QueryGroup]:
    """One group per hop of the MuSiQue questions whose group id is in ``parent_ids`` (the
    training questions): the hop's sub-question (:func:`_hop_query`) against its question's
    paragraphs, the hop's ``paragraph_support_idx`` the one relevant. Hops without a support
    paragraph or a usable query are skipped."""
    groups = []
    for r in _musique_records(data):
        if f"musique-{r['id']}" not in parent_ids:
            continue
        ps = r["paragraphs"]
        steps = r.get("question_decomposition") or []
        answers = [st["answer"] for st in steps]
        for k, st in enumerate(steps):
            idx = st.get("paragraph_support_idx")  # within the paragraphs (the shape's rule)
            query = _hop_query(st["question"], answers)
            if idx is None or not query or "#" in query:
                continue
            groups.append(QueryGroup(f"musique-{r['id']}#hop{k + 1}", "musique", query,
                                     [_paragraph_text(p["title"], p["paragraph_text"]) for p in ps],
                                     [int(i == idx) for i in range(len(ps))]))
    return groups


def wikimultihop_groups(data: RerankerData) -> list[QueryGroup]:
    """2WikiMultihopQA: 10 paragraphs, titles in ``supporting_facts`` are relevant."""
    path = resolve_data_path(data.wikimultihop, "data.wikimultihop")
    groups = []
    for r in WIKIMULTIHOPQA.read(path, "data.wikimultihop", ("_id", "question", "context", "supporting_facts")):
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


# ----------------------------------------------------------------------------- negatives


def mine_hard_negatives(groups: list[QueryGroup], embed: Callable[[Sequence[str]], np.ndarray],
                        pool_size: int, use_corpus: bool = False) -> None:
    """Fill ``g.hard_negatives``: the ``pool_size`` non-relevant passages most similar to the
    query under the bi-encoder, from the group's candidates (and its shared corpus when
    ``use_corpus``)."""
    def pool_of(g: QueryGroup) -> list[str]:
        extra = CORPORA.get(g.corpus, []) if (use_corpus and g.corpus) else []
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


__all__ = [
    "CORPORA",
    "PARAPHRASES",
    "QueryGroup",
    "RerankerData",
    "check_group",
    "hotpotqa_groups",
    "load_groups",
    "mine_hard_negatives",
    "musique_groups",
    "random_negatives",
    "scifact_groups",
    "synthetic_groups",
    "wikimultihop_groups",
]
