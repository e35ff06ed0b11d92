"""The metrics every recipe and ``searchsmith eval`` task shares, plus a small BM25 (answer
metrics such as token F1 are in :mod:`searchsmith.models.text`).

* classification: :func:`binary_prf`, :func:`span_prf` (exact spans), :func:`roc_auc`,
  :func:`attribution_metrics` (P/R/F1 at a threshold and ROC AUC of a probability);
* sets: :func:`set_prf` (found vs gold ids: support and citation recall of an answer);
* ranking: :func:`ndcg_at_k`, :func:`mrr_at_k`, :func:`recall_at_k`, :func:`ranking_metrics`;
* latency: :func:`percentiles`.

Ranking metrics take the relevance labels in the order the system ranked the documents
(``ranked_labels[0]`` is the top document) and, for nDCG, all relevance labels of the query
so that relevant documents missing from the ranking still count in the ideal DCG.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from searchsmith.models.errors import ValidationError
from searchsmith.models.text import BM25_STOP_WORDS

_TOKEN_RE = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- classification


def _prf(tp: int, n_pred: int, n_gold: int) -> dict[str, float]:
    """Precision, recall and F1 from counts (0.0 where undefined)."""
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def set_prf(found: Iterable[object], gold: Iterable[object]) -> dict[str, float]:
    """Precision, recall and F1 of the ids ``found`` against the ``gold`` ids (0.0 where undefined)."""
    found_set, gold_set = set(found), set(gold)
    return _prf(len(found_set & gold_set), len(found_set), len(gold_set))


def binary_prf(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, float]:
    """Precision, recall and F1 of the positive class (0.0 where undefined)."""
    pairs = list(zip(labels, predicted, strict=True))
    tp = sum(1 for y, p in pairs if y == 1 and p == 1)
    return _prf(tp, sum(1 for _, p in pairs if p == 1), sum(1 for y, _ in pairs if y == 1))


def span_prf(gold: Sequence[Sequence[tuple[int, int, str]]],
             pred: Sequence[Sequence[tuple[int, int, str]]]) -> dict[str, float]:
    """Micro precision / recall / F1 of exact (start, end, type) spans over sentences."""
    tp = n_pred = n_gold = 0
    for g, p in zip(gold, pred, strict=True):
        gs, ps = {tuple(x) for x in g}, {tuple(x) for x in p}
        tp += len(gs & ps)
        n_pred += len(ps)
        n_gold += len(gs)
    return _prf(tp, n_pred, n_gold)


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


def attribution_metrics(labels: Sequence[int], probs: Sequence[float],
                        threshold: float) -> dict[str, float | None]:
    """``precision, recall, f1`` at ``threshold`` and ``roc_auc`` of P(positive)."""
    pred = [int(p >= threshold) for p in probs]
    return {**binary_prf(labels, pred), "roc_auc": roc_auc(labels, probs)}


# --------------------------------------------------------------------------- ranking


def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain: sum_i (2^g_i - 1) / log2(i + 2)."""
    return sum((2.0 ** g - 1.0) / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranked_labels: Sequence[float], k: int = 10,
              all_labels: Sequence[float] | None = None) -> float:
    """nDCG@k of one ranking; 0.0 when the query has no relevant document.

    Args:
        ranked_labels: relevance of the documents in ranked order.
        all_labels: every relevance label of the query (defaults to ``ranked_labels``).
    """
    if k < 1:
        raise ValidationError(f"ndcg_at_k: k must be >= 1, got {k}")
    pool = list(all_labels if all_labels is not None else ranked_labels)
    ideal = dcg(sorted(pool, reverse=True)[:k])
    if ideal <= 0:
        return 0.0
    return dcg(list(ranked_labels)[:k]) / ideal


def mrr_at_k(ranked_labels: Sequence[float], k: int = 10) -> float:
    """Reciprocal rank of the first relevant (label > 0) document within the top k, else 0."""
    for i, g in enumerate(list(ranked_labels)[:k]):
        if g > 0:
            return 1.0 / (i + 1)
    return 0.0


def recall_at_k(ranked_labels: Sequence[float], k: int, n_relevant: int | None = None) -> float:
    """Share of the relevant documents found in the top k (0 when none is relevant)."""
    total = n_relevant if n_relevant is not None else sum(1 for g in ranked_labels if g > 0)
    if total <= 0:
        return 0.0
    return sum(1 for g in list(ranked_labels)[:k] if g > 0) / total


def rank_by_scores(scores: Sequence[float], labels: Sequence[float]) -> list[float]:
    """Labels sorted by descending score (ties keep the input order: a stable sort)."""
    if len(scores) != len(labels):
        raise ValidationError(f"rank_by_scores: {len(scores)} scores for {len(labels)} labels")
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [labels[i] for i in order]


def ranking_metrics(groups: Iterable[tuple[Sequence[float], Sequence[float]]],
                    k: int = 10) -> dict[str, float]:
    """Mean nDCG@k, MRR@k and recall@k over ``(scores, labels)`` groups."""
    nd, mr, rc, n = 0.0, 0.0, 0.0, 0
    for scores, labels in groups:
        ranked = rank_by_scores(scores, labels)
        nd += ndcg_at_k(ranked, k, labels)
        mr += mrr_at_k(ranked, k)
        rc += recall_at_k(ranked, k)
        n += 1
    if n == 0:
        raise ValidationError("ranking_metrics: no query to evaluate")
    return {f"ndcg@{k}": nd / n, f"mrr@{k}": mr / n, f"recall@{k}": rc / n, "queries": n}


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens without stop words (BM25's analyser)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in BM25_STOP_WORDS]


class BM25:
    """Okapi BM25 over a fixed list of documents (k1=0.9, b=0.4 as in Anserini/BEIR).

    Args:
        documents: the texts (title + text joined by the caller).
    """

    def __init__(self, documents: Sequence[str], k1: float = 0.9, b: float = 0.4) -> None:
        if not documents:
            raise ValidationError("BM25: no documents to index")
        self.k1, self.b = k1, b
        self.docs = [Counter(bm25_tokens(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg_len = sum(self.lengths) / len(self.lengths) or 1.0
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(self, query: str, index: int) -> float:
        """BM25 score of document ``index`` for ``query``."""
        c, length = self.docs[index], self.lengths[index]
        norm = self.k1 * (1 - self.b + self.b * length / self.avg_len)
        s = 0.0
        for t in bm25_tokens(query):
            tf = c.get(t, 0)
            if tf:
                s += self.idf[t] * tf * (self.k1 + 1) / (tf + norm)
        return s

    def scores(self, query: str, indices: Iterable[int] | None = None) -> list[float]:
        """Scores of the given documents (all by default) for ``query``."""
        idx = range(len(self.docs)) if indices is None else indices
        return [self.score(query, i) for i in idx]

    def top_k(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best ``(index, score)`` pairs, best first (documents scoring 0 excluded)."""
        all_scores = self.scores(query)
        order = sorted(range(len(all_scores)), key=lambda i: -all_scores[i])
        return [(i, all_scores[i]) for i in order[:k] if all_scores[i] > 0]


__all__ = [
    "BM25",
    "attribution_metrics",
    "binary_prf",
    "bm25_tokens",
    "dcg",
    "mrr_at_k",
    "ndcg_at_k",
    "rank_by_scores",
    "ranking_metrics",
    "recall_at_k",
    "roc_auc",
    "span_prf",
]


# --------------------------------------------------------------------------- latency


def percentiles(samples_s: list[float]) -> dict[str, float]:
    """p50/p95/p99 and mean of a list of durations in seconds, reported in milliseconds."""
    if not samples_s:
        raise ValueError("percentiles: no samples")
    xs = sorted(samples_s)

    def pick(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {
        "p50_ms": pick(0.50) * 1e3,
        "p95_ms": pick(0.95) * 1e3,
        "p99_ms": pick(0.99) * 1e3,
        "mean_ms": statistics.fmean(xs) * 1e3,
        "n": len(xs),
    }
