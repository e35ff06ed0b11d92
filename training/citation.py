"""Citation recipe: an entity tagger and an attribution scorer, trained in one run.

Two models, both from the base model (default: the bundled all-MiniLM-L6-v2):

1. **Entity tagger**: BIO token classification with the labels of :data:`LABELS`::

       O, B-ENT, I-ENT, B-NUM, I-NUM, B-DATE, I-DATE

   ``ENT`` is a named thing (a run of capitalised words: people, places, products,
   organisations, titles), ``NUM`` a number or amount (``60``, ``10,000``, ``3.5 %``,
   ``$10``), ``DATE`` a date or year (``12 March 2024``, ``March 12, 2024``, ``2024-03-12``,
   ``March 2024``, ``1986``, ``1960s``). None of the open sets labels entities, so the
   training labels are **weak labels** from :func:`weak_entities` (regular expressions:
   dates first, then numbers, then capitalised spans; a sentence-initial function word such
   as "The" or "In" is not an entity). The held-out entity F1 therefore measures agreement
   with that labeller on unseen sentences; ``searchsmith eval cite`` scores real labels
   when the eval file has ``entities``.
2. **Attribution scorer**: a cross-encoder, ``(sentence, passage) -> 1 logit``;
   ``sigmoid(logit)`` is P(the passage supports the sentence), trained with binary
   cross-entropy. ``support_threshold`` turns it into a decision.

Data sources (``data.sources``; each a registered dataset ``citation/<name>``, giving
(sentence, passage, supports) pairs keyed by claim/question id):

* ``wice``: WiCE claims vs their cited page. Positive: a supporting-sentence set joined;
  negatives: as many page sentences outside every supporting set. ``supported`` claims
  only by default (``data.wice_partial``: a partially supported claim's set supports part).
* ``expertqa``: answer sentences (``[n]`` markers removed) vs their evidence passages,
  label from the expert's ``support`` (Complete = 1; Partial, Incomplete, Missing = 0;
  N/A skipped), plus ``data.expertqa_cross_negatives`` passages cited by another sentence
  of the same answer (different URL) as negatives.
* ``scifact``: SciFact claims vs their evidence abstracts: a SUPPORT rationale set joined
  (positive) vs as many non-rationale sentences of the same abstract (negative).
* ``synthetic``: from the demo corpus shipped in ``models/demo`` (no ../shared needed):
  a sentence vs a window of its own document containing it (positive), a window of
  another document of the same source and one of another source (negatives).

The split is seeded and by claim/question id (``split_by_key``), never by pair, so no
sentence of a held-out claim is trained on. Metrics on the held-out split: attribution
precision / recall / F1 at ``support_threshold``, ROC AUC (overall and per source) and
entity F1, beside untrained baselines: the untuned bi-encoder's cosine (ROC AUC), the
untrained scorer and tagger, and "always supports".

Layout of the run folder (contract.md)::

    RUN_DIR/stages/tagger/  trainer.train run of the tagger (checkpoints/, model/, metrics.json)
    RUN_DIR/stages/scorer/  trainer.train run of the scorer
    RUN_DIR/model/tagger/   RUN_DIR/model/scorer/   RUN_DIR/model/citation.json
    RUN_DIR/metrics.json    RUN_DIR/run.json   RUN_DIR/split.json   RUN_DIR/heldout.cite.jsonl

Each stage resumes on its own: kill the run while the scorer trains and rerun the same
command; the finished tagger is reused and the scorer continues from its last checkpoint.

``python -m searchsmith.training.cite_data --write-eval OUT.jsonl [--recipe R.yaml] [k=v ...]``
writes a recipe's held-out split in the "Citation, JSONL" format of DESIGN.md, for
``searchsmith eval cite --data OUT.jsonl --checkpoint RUN_DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import time
from collections import defaultdict
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
    decode_spans,
    score_pairs,
    tag_sentences,
)
from searchsmith.models.config import to_dict
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import model_display_name, resolve_model
from searchsmith.models.io import replace_dir
from searchsmith.models.text import BM25_STOP_WORDS, iter_jsonl, read_jsonl, sentence_texts
from searchsmith.training.config import LoraConfig, OptimConfig, TrainConfig, config_hash
from searchsmith.training.data import (
    resolve_data_path,
    split_by_key,
    write_jsonl_atomic,
)
from searchsmith.training.registry import get_dataset, register_dataset, register_recipe
from searchsmith.training.trainer import apply_lora, train, write_json_atomic

SHARED = "../shared/data"
DATASET_PREFIX = "citation/"


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class CitationData:
    """Where the (sentence, passage, supports) pairs come from and how they are split.

    Data paths resolve as given (relative to the current folder), else against the
    repository root; a path is read only when its source is in ``sources``.

    Attributes:
        sources: the pair builders (registered as ``citation/<name>``) to train and evaluate
            on: ``wice``, ``expertqa``, ``scifact`` (real sets in ../shared/data) and
            ``synthetic`` (windows of ``synthetic_corpus``; needs no ../shared).
        wice: WiCE claims JSONL (``label``, ``claim``, ``evidence`` sentences,
            ``supporting_sentences`` index sets).
        expertqa: ExpertQA attribution JSONL (``question``, ``claims`` with
            ``claim_string``, ``evidence`` passages and the expert's ``support``).
        scifact_claims: SciFact claims JSONL (``id``, ``claim``, ``evidence``: abstract id ->
            rationale sentence sets labelled SUPPORT or CONTRADICT).
        scifact_corpus: SciFact abstracts JSONL (``doc_id``, ``abstract`` sentences) the
            claims' evidence points into.
        synthetic_claims: sentences drawn from ``synthetic_corpus`` (documents taken in a
            shuffled round), each giving one supporting window and up to two
            non-supporting ones; at least 1 when ``synthetic`` is a source.
        synthetic_window: sentences per synthetic passage (a window of consecutive
            sentences; the positive one contains the claim sentence). Larger: longer
            passages in which the claim is a smaller part, more tokens per pair.
        expertqa_cross_negatives: per ExpertQA answer sentence, how many passages cited by
            other sentences of the same answer (other URLs) are added as negatives: on-topic
            passages that do not support it; 0 adds none.
        eval_ratio: share of the claims/questions (all sources together, by id) held out
            for evaluation and never trained on; a synthetic claim's id is its document, so
            one document's claims stay on one side. Both sides need both labels.
        split_seed: seed of the train/held-out split and of the random choices in building
            the pairs (sampled negatives, caps, synthetic windows).
    """

    sources: list[str] = field(default_factory=lambda: ["wice", "expertqa", "scifact", "synthetic"])
    wice: str = f"{SHARED}/wice/wice_claim_dev.jsonl"
    expertqa: str = f"{SHARED}/expertqa/expertqa_domain_test_attribution.jsonl"
    scifact_claims: str = f"{SHARED}/scifact/claims_dev.jsonl"
    scifact_corpus: str = f"{SHARED}/scifact/corpus_subset.jsonl"
    # The synthetic source's corpus (DESIGN.md corpus JSONL); "demo" = models/demo/corpus.jsonl.
    synthetic_corpus: str = "demo"
    synthetic_claims: int = 300
    synthetic_window: int = 3
    # A "negative" window holding this share of the claim's content words or more is dropped:
    # the demo reports some events twice, so another document may well support the claim.
    synthetic_max_negative_overlap: float = 0.8
    # WiCE partially_supported claims: their sets support only part of the claim.
    wice_partial: Literal["skip", "positive", "negative"] = "skip"
    # SciFact CONTRADICT rationales: on topic but refuting (an NLI problem, not attribution).
    scifact_contradict: Literal["skip", "negative"] = "skip"
    expertqa_cross_negatives: int = 1
    # Negatives drawn per positive passage (WiCE, SciFact).
    negatives_per_positive: int = 2
    # Caps per source, to keep a CPU run in minutes (0 = no cap); counted in claims.
    max_claims_per_source: int = 0
    eval_ratio: float = 0.2
    split_seed: int = 13
    # Embedder whose cosine(sentence, passage) is the untuned baseline ("none": skip it).
    baseline_embedder: str = "default"
    # Cosine attribution as the pipeline runs it without a citation model (best cosine of the
    # sentence with a passage sentence, cut here; serving citation.cosine_threshold): the
    # baseline the pipeline's gate compares the scorer with (F1 at this cut, and ROC AUC).
    baseline_cosine_threshold: float = 0.6

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic]")
        for name in ("synthetic_claims", "expertqa_cross_negatives", "max_claims_per_source"):
            if getattr(self, name) < 0:
                raise ValueError(f"data.{name} must be >= 0, got {getattr(self, name)}")
        if self.synthetic_window < 1:
            raise ValueError(f"data.synthetic_window must be >= 1, got {self.synthetic_window}")
        if self.negatives_per_positive < 1:
            raise ValueError(f"data.negatives_per_positive must be >= 1, got {self.negatives_per_positive}")
        if not 0 < self.synthetic_max_negative_overlap <= 1:
            raise ValueError("data.synthetic_max_negative_overlap must be in (0, 1], got "
                             f"{self.synthetic_max_negative_overlap}")


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
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    # Keep the token/position embeddings fixed in both models: on MiniLM they are half of
    # the 22.7 M weights, so freezing them halves AdamW's work and each checkpoint.
    freeze_embeddings: bool = False


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
class CitationRecipe:
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
        optim: the attribution scorer's AdamW settings.
    """

    recipe: str
    output_dir: str
    base_model: str = "default"
    max_length: int = 128
    support_threshold: float = 0.5
    eval_batch_size: int = 64
    data: CitationData = field(default_factory=CitationData)
    model: CitationModelSpec = field(default_factory=CitationModelSpec)
    optim: OptimConfig = field(default_factory=OptimConfig)
    tagger: TaggerStage = field(default_factory=TaggerStage)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        if not 8 <= self.max_length <= 8192:
            raise ValueError(f"max_length must be in [8, 8192], got {self.max_length}")
        if not 0 < self.support_threshold < 1:
            raise ValueError(f"support_threshold must be in (0, 1), got {self.support_threshold}")
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")


@dataclass(frozen=True)
class StageConfig:
    """What one trainer.train call sees: the stage's optimizer, the shared loop settings and
    the whole recipe (so that any change of the recipe guards resuming)."""

    stage: str
    optim: OptimConfig
    train: TrainConfig
    recipe: dict[str, Any]


# ----------------------------------------------------------------------------- weak entity labels

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December")
_DATE_RES = [
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    re.compile(rf"\b\d{{1,2}}\s+(?:{_MONTHS})(?:,?\s+\d{{4}})?\b"),
    re.compile(rf"\b(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,\s*\d{{4}})?\b"),
    re.compile(rf"\b(?:{_MONTHS})\s+\d{{4}}\b"),
    re.compile(r"\b(?:1[5-9]|20)\d0s\b"),
    re.compile(r"(?<![\d.,$£€])\b(?:1[5-9]\d{2}|20\d{2})\b(?![.,]\d|\s?%)"),
]
_NUM_RE = re.compile(r"[$£€]?\b\d+(?:[.,]\d+)*(?:\s?%)?")
_CAP_RE = re.compile(r"\b[A-Z][\w'’&-]*(?:\s+[A-Z][\w'’&-]*)*")
# Capitalised only because they start the sentence: not entities on their own.
_INITIAL_WORDS = frozenset(
    "a an and as at after before but by during each every for from he her his however i if in "
    "it its many most no not of on one or our she since some that the their there these they "
    "this those to under we when while with you yes also all both over".split())


def weak_entities(sentence: str) -> list[tuple[int, int, str]]:
    """Weak BIO entity spans of one sentence: ``[(start, end, type)]`` in character offsets.

    Dates are claimed first, then numbers, then runs of capitalised words that do not overlap
    them; a sentence-initial function word ("The", "In") is dropped from a run.
    """
    taken: list[tuple[int, int, str]] = []

    def free(s: int, e: int) -> bool:
        return all(e <= a or s >= b for a, b, _ in taken)

    for rx in _DATE_RES:
        for m in rx.finditer(sentence):
            if free(m.start(), m.end()):
                taken.append((m.start(), m.end(), "DATE"))
    for m in _NUM_RE.finditer(sentence):
        s, e = m.start(), m.end()
        if e > s and free(s, e):
            taken.append((s, e, "NUM"))
    first_word = re.match(r"\s*", sentence).end()
    for m in _CAP_RE.finditer(sentence):
        s, e = m.start(), m.end()
        if s == first_word:
            word = re.match(r"[\w'’&-]+", sentence[s:]).group(0)
            if word.lower() in _INITIAL_WORDS:
                nxt = re.match(r"[\w'’&-]+\s+", sentence[s:e])
                if nxt is None:
                    continue
                s += nxt.end()
        if e > s and free(s, e):
            taken.append((s, e, "ENT"))
    return sorted(taken)


def token_labels(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]],
                 special: Sequence[bool]) -> list[int]:
    """BIO label ids for one tokenized sentence from character spans.

    Args:
        offsets: (T,) character ``(start, end)`` of each token.
        spans: ``(start, end, type)`` entity spans.
        special: (T,) True for special / padding tokens (label -100: ignored by the loss).
    """
    out = []
    for (a, b), sp in zip(offsets, special, strict=True):
        if sp or b <= a:
            out.append(-100)
            continue
        lab = 0
        for s, e, t in spans:
            if a >= s and b <= e:
                lab = LABELS.index(("B-" if a == s else "I-") + t)
                break
        out.append(lab)
    return out


# ----------------------------------------------------------------------------- metrics


def roc_auc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties);
    None when only one class is present."""
    y = np.asarray(labels, dtype=np.int64)
    s = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average rank over each run of equal scores
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def binary_prf(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, float]:
    """Precision, recall and F1 of the positive class (0.0 where undefined)."""
    tp = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 1 and p == 1)
    fp = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 0 and p == 1)
    fn = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 1 and p == 0)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def span_prf(gold: Sequence[Sequence[tuple[int, int, str]]],
             pred: Sequence[Sequence[tuple[int, int, str]]]) -> dict[str, float]:
    """Micro precision / recall / F1 of exact (start, end, type) spans over sentences."""
    tp = n_pred = n_gold = 0
    for g, p in zip(gold, pred, strict=True):
        gs, ps = {tuple(x) for x in g}, {tuple(x) for x in p}
        tp += len(gs & ps)
        n_pred += len(ps)
        n_gold += len(gs)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def attribution_metrics(labels: Sequence[int], probs: Sequence[float],
                        threshold: float) -> dict[str, float | None]:
    """``precision, recall, f1`` at ``threshold`` and ``roc_auc`` of P(supports)."""
    pred = [int(p >= threshold) for p in probs]
    return {**binary_prf(labels, pred), "roc_auc": roc_auc(labels, probs)}


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Pair:
    """One (sentence, passage) pair; ``key`` is the claim/question id the split uses."""

    key: str
    source: str
    sentence: str
    passage: str
    label: int


def _cap(items: list[Any], data: CitationData, seed: int) -> list[Any]:
    if data.max_claims_per_source and len(items) > data.max_claims_per_source:
        items = list(items)
        random.Random(seed).shuffle(items)
        return items[:data.max_claims_per_source]
    return items


def _set_vs_rest(key: str, source: str, claim: str, sentences: Sequence[str],
                 positive_sets: Sequence[Sequence[int]], n_neg: int,
                 rng: random.Random) -> list[Pair]:
    """Each supporting set joined (positive) and ``n_neg`` same-size samples of sentences
    outside every set (negatives), so that length does not give the label away."""
    used = {i for s in positive_sets for i in s}
    rest = [i for i in range(len(sentences)) if i not in used and sentences[i].strip()]
    out = []
    for sset in positive_sets:
        idx = sorted(i for i in sset if 0 <= i < len(sentences))
        if not idx:
            continue
        out.append(Pair(key, source, claim, " ".join(sentences[i] for i in idx), 1))
        for _ in range(n_neg):
            if len(rest) < len(idx):
                break
            neg = sorted(rng.sample(rest, len(idx)))
            out.append(Pair(key, source, claim, " ".join(sentences[i] for i in neg), 0))
    return out


@register_dataset("citation/wice")
def wice_pairs(data: CitationData) -> list[Pair]:
    """WiCE: claim vs its cited page's supporting-sentence sets and other sentences."""
    path = resolve_data_path(data.wice, "data.wice")
    rng = random.Random(data.split_seed)
    recs = _cap(read_jsonl(path, required=("label", "claim", "evidence", "supporting_sentences")),
                data, data.split_seed)
    out: list[Pair] = []
    for n, r in enumerate(recs):
        key = f"wice-{(r.get('meta') or {}).get('id', n)}"
        sets = [s for s in r["supporting_sentences"] if s]
        label = r["label"]
        if label == "partially_supported" and data.wice_partial == "skip":
            continue
        if label == "not_supported" or (label == "partially_supported"
                                        and data.wice_partial == "negative"):
            # No set supports the claim: its first set (or a random sentence) is a negative.
            if not sets and r["evidence"]:
                sets = [[rng.randrange(len(r["evidence"]))]]
            out.extend(Pair(key, "wice", r["claim"], " ".join(r["evidence"][i] for i in s
                                                             if 0 <= i < len(r["evidence"])), 0)
                       for s in sets[:1])
            continue
        out.extend(_set_vs_rest(key, "wice", r["claim"], r["evidence"], sets[:1],
                                data.negatives_per_positive, rng))
    return [p for p in out if p.passage.strip()]


_MARKER_RE = re.compile(r"\s*\[\d+\]")
EXPERTQA_LABELS = {"Complete": 1, "Partial": 0, "Incomplete": 0, "Missing": 0}


@register_dataset("citation/expertqa")
def expertqa_pairs(data: CitationData) -> list[Pair]:
    """ExpertQA: answer sentence vs its evidence passages, labelled by the expert; plus
    passages cited by other sentences of the same answer as negatives."""
    path = resolve_data_path(data.expertqa, "data.expertqa")
    rng = random.Random(data.split_seed)
    recs = _cap(read_jsonl(path, required=("question", "claims")), data, data.split_seed)
    out: list[Pair] = []
    for n, r in enumerate(recs):
        key = f"expertqa-{n}"
        claims = []
        for c in r["claims"] or []:
            ev = [e for e in (c.get("evidence") or []) if isinstance(e, dict) and e.get("text")]
            if ev:
                claims.append((_MARKER_RE.sub("", c.get("claim_string") or "").strip(), ev,
                               c.get("support")))
        for i, (sent, ev, support) in enumerate(claims):
            if not sent:
                continue
            if support in EXPERTQA_LABELS:
                out.append(Pair(key, "expertqa", sent, " ".join(e["text"] for e in ev),
                                EXPERTQA_LABELS[support]))
            urls = {e.get("url") for e in ev}
            others = [e for j, (_, ev2, _) in enumerate(claims) if j != i for e in ev2
                      if e.get("url") not in urls]
            rng.shuffle(others)
            out.extend(Pair(key, "expertqa", sent, e["text"], 0)
                       for e in others[:data.expertqa_cross_negatives])
    return out


@register_dataset("citation/scifact")
def scifact_pairs(data: CitationData) -> list[Pair]:
    """SciFact: a claim vs a rationale set of its evidence abstract (joined) and as many
    other sentences of that abstract."""
    claims_path = resolve_data_path(data.scifact_claims, "data.scifact_claims")
    corpus_path = resolve_data_path(data.scifact_corpus, "data.scifact_corpus")
    docs = {str(d["doc_id"]): d["abstract"]
            for d in read_jsonl(corpus_path, required=("doc_id", "abstract"))}
    rng = random.Random(data.split_seed)
    claims = [c for c in read_jsonl(claims_path, required=("id", "claim", "evidence")) if c["evidence"]]
    out: list[Pair] = []
    for c in _cap(claims, data, data.split_seed):
        key = f"scifact-{c['id']}"
        for doc_id, sets in sorted(c["evidence"].items()):
            if doc_id not in docs:
                raise ValidationError(f"{claims_path}: claim {c['id']} cites doc {doc_id} "
                                      f"that is not in {corpus_path}")
            sents = docs[doc_id]
            support = [s["sentences"] for s in sets if s.get("label") == "SUPPORT"]
            contra = [s["sentences"] for s in sets if s.get("label") == "CONTRADICT"]
            out.extend(_set_vs_rest(key, "scifact", c["claim"], sents, support,
                                    data.negatives_per_positive, rng))
            if data.scifact_contradict == "negative":
                out.extend(Pair(key, "scifact", c["claim"], " ".join(sents[i] for i in s), 0)
                           for s in contra if s)
    return out


_WORD_RE = re.compile(r"[a-z0-9]+")


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in BM25_STOP_WORDS}


@register_dataset("citation/synthetic")
def synthetic_pairs(data: CitationData) -> list[Pair]:
    """A sentence of a demo document vs a window of that document containing it (supports),
    a window of another document of the same source and one of another source (not)."""
    if data.synthetic_claims < 1:
        raise ConfigError("data.synthetic_claims must be >= 1 when 'synthetic' is a source")
    if data.synthetic_corpus == "demo":
        from searchsmith.models.demo import corpus_path

        path = corpus_path()
    else:
        path = resolve_data_path(data.synthetic_corpus, "data.synthetic_corpus")
    docs = []
    for d in read_jsonl(path, required=("id", "text")):
        sents = [s for s in sentence_texts(d["text"], "lines") if len(s.split()) >= 5]
        if len(sents) >= 2:
            docs.append((str(d["id"]), str(d.get("source", "")), sents))
    if len(docs) < 3:
        raise ValidationError(f"{path}: {len(docs)} documents with two or more sentences; the "
                              "synthetic source needs at least 3")
    rng = random.Random(data.split_seed)
    w = data.synthetic_window
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, (_, src, _) in enumerate(docs):
        by_source[src].append(i)

    def window(sents: list[str], around: int | None = None) -> str:
        if len(sents) <= w:
            return " ".join(sents)
        lo = rng.randint(max(0, around - w + 1), min(around, len(sents) - w)) if around is not None \
            else rng.randint(0, len(sents) - w)
        return " ".join(sents[lo:lo + w])

    out: list[Pair] = []
    order = list(range(len(docs)))
    for n in range(data.synthetic_claims):
        di = order[n % len(order)]
        if n % len(order) == 0:
            rng.shuffle(order)
            di = order[0]
        doc_id, src, sents = docs[di]
        si = rng.randrange(len(sents))
        claim = sents[si]
        key = f"synthetic-{doc_id}"
        out.append(Pair(key, "synthetic", claim, window(sents, si), 1))
        words = _content_words(claim)
        same = [j for j in by_source[src] if j != di] or [j for j in range(len(docs)) if j != di]
        other = [j for j in range(len(docs)) if docs[j][1] != src] or same
        for pool in (same, other):
            neg = window(docs[rng.choice(pool)][2])
            if words and len(words & _content_words(neg)) / len(words) >= \
                    data.synthetic_max_negative_overlap:
                continue
            out.append(Pair(key, "synthetic", claim, neg, 0))
    return out


def load_pairs(data: CitationData) -> list[Pair]:
    """Every pair of every source in ``data.sources``, validated."""
    pairs: list[Pair] = []
    for name in data.sources:
        got = get_dataset(DATASET_PREFIX + name, field="data.sources")(data)
        if not got:
            raise ValidationError(f"data.sources: {name!r} gave no (sentence, passage) pair "
                                  "(empty dataset); check its file")
        for p in got:
            if p.label not in (0, 1):
                raise ValidationError(f"data.sources[{name}]: pair of {p.key!r} has label "
                                      f"{p.label!r} out of range; expected 0 or 1")
            if not p.sentence.strip() or not p.passage.strip():
                raise ValidationError(f"data.sources[{name}]: pair of {p.key!r} has an empty "
                                      "sentence or passage")
        pairs.extend(got)
    return pairs


def eval_items(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Pairs grouped per sentence in the "Citation, JSONL" format of DESIGN.md (entities: weak)."""
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        groups.setdefault((p.key, p.sentence), []).append(p)
    items = []
    for (key, sentence), ps in groups.items():
        docs = [{"id": f"{key}:{i}", "text": p.passage} for i, p in enumerate(ps)]
        items.append({"id": key, "source": ps[0].source, "sentence": sentence, "documents": docs,
                      "cited": [d["id"] for d, p in zip(docs, ps, strict=True) if p.label == 1],
                      "entities": [list(s) for s in weak_entities(sentence)]})
    return items


def split_pairs(pairs: Sequence[Pair], data: CitationData) -> tuple[list[Pair], list[Pair]]:
    """Train and held-out pairs, split by claim/question key; both classes held out."""
    train_keys, eval_keys = split_by_key([p.key for p in pairs], data.eval_ratio, data.split_seed)
    train_p = [p for p in pairs if p.key in train_keys]
    eval_p = [p for p in pairs if p.key in eval_keys]
    if not train_p or not eval_p or len({p.label for p in eval_p}) < 2 \
            or len({p.label for p in train_p}) < 2:
        raise ValidationError(f"data: {len(pairs)} pairs of {len({p.key for p in pairs})} claims "
                              "cannot be split into train and held-out sets that both hold "
                              f"supporting and non-supporting pairs (data.eval_ratio="
                              f"{data.eval_ratio}); add data (e.g. raise data.synthetic_claims)")
    return train_p, eval_p


# ----------------------------------------------------------------------------- models


def build_models(cfg: CitationRecipe) -> tuple[Any, Any, Any]:
    """(tagger, scorer, tokenizer): token classification over :data:`LABELS` and
    sequence classification with one logit, both from the base model (or ``model.config``)."""
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    id2label = dict(enumerate(LABELS))
    label2id = {v: k for k, v in id2label.items()}
    tok_path = resolve_model(cfg.model.tokenizer, field="model.tokenizer")
    if cfg.model.config is not None:
        conf = dict(cfg.model.config)
        model_type = conf.pop("model_type", None)
        if not model_type:
            raise ConfigError("model.config: needs 'model_type' (e.g. bert) to build a model")
        try:
            t_cfg = AutoConfig.for_model(model_type, num_labels=len(LABELS), id2label=id2label,
                                         label2id=label2id, **conf)
            s_cfg = AutoConfig.for_model(model_type, num_labels=1, **conf)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"model.config: {exc}") from None
        tagger = AutoModelForTokenClassification.from_config(t_cfg)
        scorer = AutoModelForSequenceClassification.from_config(s_cfg)
    else:
        path = resolve_model(cfg.base_model)
        tagger = AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(LABELS), id2label=id2label, label2id=label2id)
        scorer = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        if cfg.model.tokenizer == "default" and cfg.base_model != "default":
            tok_path = path  # a hub model brings its own tokenizer
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"model.tokenizer: {tok_path} has no fast tokenizer; the tagger needs "
                          "character offsets (return_offsets_mapping)")
    if cfg.model.freeze_embeddings:
        for m in (tagger, scorer):
            for name, p in m.named_parameters():
                if ".embeddings." in f".{name}":
                    p.requires_grad = False
    if tagger.config.vocab_size < len(tokenizer):
        raise ConfigError(f"model: vocab_size {tagger.config.vocab_size} is smaller than the "
                          f"tokenizer's {len(tokenizer)} tokens; raise model.config.vocab_size")
    return tagger, scorer, tokenizer


# ----------------------------------------------------------------------------- batches


def scorer_batches(pairs: Sequence[Pair], tokenizer: Any, cfg: CitationRecipe
                   ) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches`` of tokenized pairs with their 0/1 labels (B,)."""
    bs = cfg.optim.batch_size

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        order = list(range(len(pairs)))
        random.Random(cfg.train.seed * 100_003 + epoch).shuffle(order)
        for s in range(0, len(order) - bs + 1, bs):  # drop the ragged tail
            idx = order[s:s + bs]
            enc = tokenizer([pairs[i].sentence for i in idx], [pairs[i].passage for i in idx],
                            padding=True, truncation="only_second", max_length=cfg.max_length,
                            return_tensors="pt")
            yield {"inputs": dict(enc),
                   "labels": torch.tensor([float(pairs[i].label) for i in idx])}

    return stream


def tagger_batches(sentences: Sequence[str], tokenizer: Any, cfg: CitationRecipe
                   ) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches`` of tokenized sentences with BIO label ids (B, T)."""
    bs = cfg.tagger.optim.batch_size
    spans = [weak_entities(s) for s in sentences]

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
    from searchsmith.training.reranker import CachedEmbedder

    emb = CachedEmbedder(name, cache)
    sents = list(dict.fromkeys(p.sentence for p in pairs))
    docs = list(dict.fromkeys(p.passage for p in pairs))
    se, de = emb.encode(sents), emb.encode(docs)  # (S, D), (P, D)
    si = {s: i for i, s in enumerate(sents)}
    di = {d: i for i, d in enumerate(docs)}
    return [float(se[si[p.sentence]] @ de[di[p.passage]]) for p in pairs]


def cosine_attribution_scores(name: str, pairs: Sequence[Pair], cache: Path) -> list[float]:
    """The pipeline's fallback attribution: for each pair the best cosine between the sentence
    and one sentence of the passage (serving/pipeline/citation.py without a bundle)."""
    from searchsmith.training.reranker import CachedEmbedder

    def parts(text: str) -> list[str]:
        return [" ".join(s.split()) for s in sentence_texts(text)] or [text]

    emb = CachedEmbedder(name, cache)
    texts = list(dict.fromkeys([" ".join(p.sentence.split()) for p in pairs]
                               + [t for p in pairs for t in parts(p.passage)]))
    vecs = emb.encode(texts)  # (N, D) unit rows
    row = {t: i for i, t in enumerate(texts)}
    out = []
    for p in pairs:
        s = vecs[row[" ".join(p.sentence.split())]]
        out.append(float(max(vecs[row[t]] @ s for t in parts(p.passage))))
    return out


def cosine_attribution_baseline(y: Sequence[int], scores: Sequence[float], threshold: float
                                ) -> dict[str, float]:
    """Flat baseline figures the serving gate reads (``baselines/cosine_attribution_*``)."""
    prf = binary_prf(y, [int(c >= threshold) for c in scores])
    auc = roc_auc(y, scores)
    out = {f"cosine_attribution_{k}": v for k, v in prf.items()}
    if auc is not None:
        out["cosine_attribution_roc_auc"] = auc
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
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


@register_recipe("citation", CitationRecipe)
def citation(cfg: CitationRecipe, run_dir: Path, force: bool = False) -> dict[str, Any]:
    """Train the entity tagger, then the attribution scorer; return the held-out metrics."""
    run_dir = Path(run_dir)
    wall_start = time.perf_counter()

    # 1. Models (both from the base; LoRA when enabled, merged at save).
    tagger, scorer, tokenizer = build_models(cfg)
    tagger = apply_lora(tagger, cfg.lora, "TOKEN_CLS", modules_to_save=["classifier"])
    scorer = apply_lora(scorer, cfg.lora, "SEQ_CLS", modules_to_save=["classifier", "score"])

    # 2. Data: pairs split by claim; sentences for the tagger; baselines on the held-out split.
    pairs = load_pairs(cfg.data)
    train_p, eval_p = split_pairs(pairs, cfg.data)
    if len(train_p) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(train_p)} training pairs, fewer than "
                              f"optim.batch_size={cfg.optim.batch_size}; add data or lower it")
    train_sents = list(dict.fromkeys(p.sentence for p in train_p))
    eval_sents = list(dict.fromkeys(p.sentence for p in eval_p))
    if len(train_sents) < cfg.tagger.optim.batch_size:
        raise ValidationError(f"data: {len(train_sents)} training sentences, fewer than "
                              f"tagger.optim.batch_size={cfg.tagger.optim.batch_size}")
    eval_gold = [weak_entities(s) for s in eval_sents]
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {
        "seed": cfg.data.split_seed, "train": sorted({p.key for p in train_p}),
        "eval": sorted({p.key for p in eval_p})})
    write_jsonl_atomic(run_dir / "heldout.cite.jsonl", eval_items(eval_p))
    y_eval = [p.label for p in eval_p]
    eval_pairs = [(p.sentence, p.passage) for p in eval_p]
    sources = sorted({p.source for p in eval_p})

    def scorer_eval(m: Any) -> dict[str, float]:
        probs = score_pairs(m, tokenizer, eval_pairs, cfg.max_length, cfg.eval_batch_size)
        out = {f"attribution/{k}": v for k, v in
               attribution_metrics(y_eval, probs.tolist(), cfg.support_threshold).items()}
        for src in sources:
            idx = [i for i, p in enumerate(eval_p) if p.source == src]
            auc = roc_auc([y_eval[i] for i in idx], [float(probs[i]) for i in idx])
            if auc is not None:
                out[f"attribution/{src}/roc_auc"] = auc
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
                            "lora": cfg.lora, "baselines": 2})
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
            baselines.update(cosine_attribution_baseline(
                y_eval, cosine_attribution_scores(cfg.data.baseline_embedder, eval_p, run_dir / "cache"),
                cfg.data.baseline_cosine_threshold))
        write_json_atomic(baselines_path, {"key": base_key, "baselines": baselines})

    # 3. Losses.
    def tagger_loss(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        logits = m(**batch["inputs"]).logits  # (B, T, L)
        return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(),
                               ignore_index=-100)

    def scorer_loss(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        logits = m(**batch["inputs"]).logits.view(-1)  # (B,)
        return F.binary_cross_entropy_with_logits(logits.float(), batch["labels"].float())

    # 4. Train: each stage in its own folder, so that each resumes on its own.
    stages = {
        "tagger": _run_stage("tagger", cfg, run_dir, tagger, tagger_loss,
                             tagger_batches(train_sents, tokenizer, cfg), tagger_eval, tokenizer,
                             {"untrained_tagger": baselines["untrained_tagger"]}, force),
        "scorer": _run_stage("scorer", cfg, run_dir, scorer, scorer_loss,
                             scorer_batches(train_p, tokenizer, cfg), scorer_eval, tokenizer,
                             {"untrained_scorer": baselines["untrained_scorer"]}, force),
    }

    # 5. Save: RUN_DIR/model/{tagger,scorer,citation.json}, metrics.json, run.json, curve.
    tmp = run_dir / f".model.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("tagger", "scorer"):
        shutil.copytree(run_dir / "stages" / name / "model", tmp / name)
    write_json_atomic(tmp / "citation.json", {
        "labels": list(LABELS), "max_length": cfg.max_length,
        "tagger_max_length": cfg.tagger.max_length, "support_threshold": cfg.support_threshold,
        "trained_steps": {n: int(m["steps"]) for n, m in stages.items()},
        "base_model": model_display_name(cfg.base_model) if cfg.model.config is None
        else "random-init (model.config)", "recipe": cfg.recipe,
    })
    replace_dir(tmp, run_dir / "model")
    final = {**stages["scorer"]["final"], **stages["tagger"]["final"]}
    metrics = {
        "final": final, "baselines": baselines, "support_threshold": cfg.support_threshold,
        "stages": {n: {"steps": m["steps"], "reused": m["reused"],
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


# ----------------------------------------------------------------------------- eval


def read_cite_items(path: str | Path, labels: Sequence[str] = LABELS) -> list[dict[str, Any]]:
    """Read and validate a "Citation, JSONL" file (DESIGN.md).

    Raises:
        ConfigError: the file is missing.
        ValidationError: a malformed record (``file:line``), unknown cited ids, entity spans
            out of the sentence or with a type the model does not know, or no record.
    """
    types = sorted({lab.split("-", 1)[1] for lab in labels if lab != "O"})
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--data: {str(p)!r} not found; expected a citation JSONL file "
                          '({"sentence", "documents": [{"id","text"}], "cited": [ids]}); write '
                          "one with python -m searchsmith.training.cite_data --write-eval OUT.jsonl")
    items = []
    for n, rec in iter_jsonl(p):
        where = f"{p}:{n}"
        sent = rec.get("sentence")
        if not isinstance(sent, str) or not sent.strip():
            raise ValidationError(f"{where}: 'sentence' must be a non-empty string, got {sent!r}")
        docs = rec.get("documents")
        if not isinstance(docs, list) or not docs:
            raise ValidationError(f"{where}: 'documents' must be a non-empty list of "
                                  '{"id", "text"} objects')
        ids = []
        for d in docs:
            if not isinstance(d, dict) or "id" not in d or not isinstance(d.get("text"), str):
                raise ValidationError(f"{where}: each document needs 'id' and a string 'text', "
                                      f"got {str(d)[:80]}")
            ids.append(str(d["id"]))
        if len(set(ids)) != len(ids):
            raise ValidationError(f"{where}: document ids repeat: {ids}")
        cited = rec.get("cited")
        if not isinstance(cited, list):
            raise ValidationError(f"{where}: 'cited' must be a list of document ids, got {cited!r}")
        unknown = [c for c in cited if str(c) not in ids]
        if unknown:
            raise ValidationError(f"{where}: 'cited' names {unknown} that are not among the "
                                  f"documents' ids {ids}")
        ents = rec.get("entities")
        if ents is not None:
            if not isinstance(ents, list):
                raise ValidationError(f"{where}: 'entities' must be a list of [start, end, label]")
            for e in ents:
                if (not isinstance(e, list) or len(e) != 3 or not all(isinstance(x, int)
                                                                      for x in e[:2])):
                    raise ValidationError(f"{where}: entity {e!r} is not [start, end, label] "
                                          "with integer character offsets")
                if not 0 <= e[0] < e[1] <= len(sent):
                    raise ValidationError(f"{where}: entity span {e!r} is out of range; expected "
                                          f"0 <= start < end <= {len(sent)} (the sentence length)")
                if e[2] not in types:
                    raise ValidationError(f"{where}: entity label {e[2]!r} is out of range; the "
                                          f"model tags {types}")
        items.append({"sentence": sent, "documents": docs, "ids": ids, "source": rec.get("source"),
                      "cited": {str(c) for c in cited},
                      "entities": None if ents is None else [tuple(e) for e in ents]})
    if not items:
        raise ValidationError(f"{p}: no records (empty file); expected citation JSON lines")
    return items


def cite_report(model: Any, items: Sequence[dict[str, Any]], threshold: float
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Attribution and entity figures of ``model`` (a citation bundle or ``CitationModel``: their
    ``attribute`` and ``entities``) on items of :func:`read_cite_items`.

    Returns:
        ``(metrics, rows)``: the keys of the recipe's ``metrics.json`` (``attribution/f1``,
        ``attribution/<source>/roc_auc`` for items that name a source, ``entity/f1``, ...) and
        one row per item (its scores, predictions and entities).
    """
    pairs, y, src = [], [], []
    for it in items:
        for d, i in zip(it["documents"], it["ids"], strict=True):
            pairs.append((it["sentence"], d["text"]))
            y.append(int(i in it["cited"]))
            src.append(it.get("source"))
    probs = np.asarray(model.attribute(pairs), dtype=np.float32)
    out: dict[str, Any] = {"items": len(items), "pairs": len(pairs), "positive_pairs": sum(y),
                           "support_threshold": threshold}
    out.update({f"attribution/{k}": v for k, v in attribution_metrics(y, probs.tolist(), threshold).items()})
    for name in sorted({s for s in src if s}):
        idx = [j for j, s in enumerate(src) if s == name]
        auc = roc_auc([y[j] for j in idx], [float(probs[j]) for j in idx])
        if auc is not None:
            out[f"attribution/{name}/roc_auc"] = auc
    with_ents = [i for i, it in enumerate(items) if it["entities"] is not None]
    pred_ents: dict[int, list[tuple[int, int, str]]] = {}
    if with_ents:
        got = model.entities([items[i]["sentence"] for i in with_ents])
        pred_ents = {i: [tuple(s) for s in g] for i, g in zip(with_ents, got, strict=True)}
        ent = span_prf([items[i]["entities"] for i in with_ents], [pred_ents[i] for i in with_ents])
        out.update({f"entity/{k}": v for k, v in ent.items()})
        out["entity_items"] = len(with_ents)
    rows, k = [], 0
    for n, it in enumerate(items):
        scores = {i: float(probs[k + j]) for j, i in enumerate(it["ids"])}
        k += len(it["ids"])
        row = {"index": n, "sentence": it["sentence"], "scores": scores,
               "predicted": [i for i, s in scores.items() if s >= threshold], "cited": sorted(it["cited"])}
        if n in pred_ents:
            row["entities"] = [list(s) for s in pred_ents[n]]
            row["entity_f1"] = span_prf([it["entities"]], [pred_ents[n]])["f1"]
        rows.append(row)
    return out, rows


def eval_cite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval cite --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``.

    Scores every (sentence, document) pair of the file; a pair is positive when the document
    is in ``cited``. Reports attribution precision / recall / F1 at the model's
    ``support_threshold`` and ROC AUC (null when one class is absent), and entity
    precision / recall / F1 of exact (start, end, type) spans over the items with
    ``entities``. ``--per-item F`` writes one JSON line per item; ``--limit N`` the first N.
    """
    from searchsmith.training.evaluate import Chunked, load_eval_model, progress_bar

    limit = int(getattr(args, "limit", 0) or 0)
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {limit}")
    em = load_eval_model("cite", args)
    items = read_cite_items(args.data, list(em.model.labels))
    if limit:
        items = items[:limit]
    total = sum(len(it["ids"]) for it in items) + sum(it["entities"] is not None for it in items)
    with progress_bar("eval cite", total, "input") as bar:
        metrics, rows = cite_report(Chunked(em.model, bar), items, float(em.model.support_threshold))
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, rows)
    return {"task": "cite", "model": em.origin, **metrics}


def write_eval_file(out: str | Path, recipe: str | Path = "recipes/citation/minilm_full.yaml",
                    overrides: Sequence[str] = ()) -> Path:
    """Write the held-out split of ``recipe`` (same sources, seed, ratio) as citation JSONL."""
    from searchsmith.training.config import load_recipe_config

    cfg = load_recipe_config(recipe, list(overrides))
    if not isinstance(cfg, CitationRecipe):
        raise ConfigError(f"--recipe: {recipe} is a {cfg.recipe!r} recipe, not 'citation'")
    _, eval_p = split_pairs(load_pairs(cfg.data), cfg.data)
    return write_jsonl_atomic(out, eval_items(eval_p))


__all__ = [
    "ENTITY_TYPES",
    "LABELS",
    "CitationData",
    "CitationModelSpec",
    "CitationRecipe",
    "Pair",
    "TaggerStage",
    "attribution_metrics",
    "binary_prf",
    "build_models",
    "citation",
    "cite_report",
    "decode_spans",
    "eval_cite",
    "eval_items",
    "expertqa_pairs",
    "load_pairs",
    "read_cite_items",
    "roc_auc",
    "score_pairs",
    "scifact_pairs",
    "span_prf",
    "split_pairs",
    "synthetic_pairs",
    "tag_sentences",
    "token_labels",
    "weak_entities",
    "wice_pairs",
    "write_eval_file",
]
