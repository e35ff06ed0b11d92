"""The metrics every recipe and ``searchsmith eval`` task shares, plus a small BM25 (answer
metrics such as token F1 are in :mod:`searchsmith.models.text`).

* classification: :func:`binary_prf`, :func:`span_prf` (exact spans), :func:`roc_auc`,
  :func:`attribution_metrics` (P/R/F1 at a threshold and ROC AUC of a probability);
* sets: :func:`set_prf` (found vs gold ids: support and citation recall of an answer);
* ranking: :func:`ndcg_at_k`, :func:`mrr_at_k`, :func:`recall_at_k`, :func:`ranking_metrics`;
* decompositions (Break's metrics over QDMR steps): :func:`qdmr_sari` (:func:`sari`),
  :func:`qdmr_exact_match`, :func:`qdmr_normalized_em`, :func:`qdmr_ged`;
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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


def balanced_accuracy(labels: Sequence[int], predicted: Sequence[int]) -> float | None:
    """Mean of the recall of each class (LLM-AggreFact's measure); None when a class is absent."""
    pairs = list(zip(labels, predicted, strict=True))
    pos = [p for y, p in pairs if y == 1]
    neg = [p for y, p in pairs if y != 1]
    if not pos or not neg:
        return None
    return 0.5 * (sum(1 for p in pos if p == 1) / len(pos) + sum(1 for p in neg if p != 1) / len(neg))


def attribution_metrics(labels: Sequence[int], probs: Sequence[float],
                        threshold: float) -> dict[str, float | None]:
    """``precision, recall, f1`` and ``balanced_accuracy`` at ``threshold``, ``roc_auc`` of P(positive)."""
    pred = [int(p >= threshold) for p in probs]
    return {**binary_prf(labels, pred), "balanced_accuracy": balanced_accuracy(labels, pred),
            "roc_auc": roc_auc(labels, probs)}


def top1_per_group(sizes: Sequence[int], scores: Sequence[float]) -> list[int]:
    """0/1 per score: 1 for the best score of each consecutive group of ``sizes`` (first on ties)."""
    x = np.asarray(scores, dtype=np.float64).reshape(-1)
    if sum(sizes) != len(x) or any(n < 1 for n in sizes):
        raise ValidationError(f"top1_per_group: group sizes {list(sizes)[:8]}... must be >= 1 and sum to "
                              f"the {len(x)} scores")
    out, k = [0] * len(x), 0
    for n in sizes:
        out[k + int(np.argmax(x[k:k + n]))] = 1
        k += n
    return out


def best_f1_threshold(labels: Sequence[int], scores: Sequence[float]) -> tuple[float, float]:
    """``(threshold, f1)``: the cut among the scores that maximises F1 of ``score >= cut``
    (ties: the higher cut, fewer citations).

    Raises:
        ValidationError: no positive label or an empty input.
    """
    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    x = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(y) != len(x) or not len(y) or not y.sum():
        raise ValidationError(f"best_f1_threshold: needs scores with at least one positive label, got "
                              f"{len(x)} scores and {int(y.sum()) if len(y) else 0} positives")
    order = np.argsort(-x, kind="stable")
    xs, ys = x[order], y[order]
    tp = np.cumsum(ys)  # cut after position k: predicted = k + 1
    n_pred = np.arange(1, len(ys) + 1)
    f1 = 2 * tp / (n_pred + ys.sum())
    last = np.r_[xs[1:] != xs[:-1], True]  # a cut keeps every tie of its score
    f1 = np.where(last, f1, -1.0)
    best = float(f1.max())
    k = int(np.flatnonzero(f1 == best)[0])  # the first maximum: the highest cut
    return float(xs[k]), best


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
        self._ceilings: dict[str, float] = {}  # query -> ceiling(query): read once per candidate

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

    def ceiling(self, query: str) -> float:
        """The most ``query`` can score: ``(k1 + 1) x`` the sum of its terms' idf (a term no
        document holds at its highest), since one term adds at most ``idf x (k1 + 1)``."""
        if query not in self._ceilings:
            absent = math.log(1 + (len(self.docs) + 0.5) / 0.5)
            self._ceilings[query] = (self.k1 + 1) * sum(self.idf.get(t, absent)
                                                        for t in dict.fromkeys(bm25_tokens(query)))
        return self._ceilings[query]

    def share(self, query: str, score: float) -> float:
        """``score`` as a share of the query's :meth:`ceiling`, in [0, 1] (0 without terms)."""
        top = self.ceiling(query)
        return min(1.0, score / top) if top > 0 else 0.0

    def top_k(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best ``(index, score)`` pairs, best first (documents scoring 0 excluded)."""
        all_scores = self.scores(query)
        order = sorted(range(len(all_scores)), key=lambda i: -all_scores[i])
        return [(i, all_scores[i]) for i in order[:k] if all_scores[i] > 0]


def fuse_lexical(cosines: Mapping[Any, float], shares: Mapping[Any, float], weight: float,
                 min_cosine: float = 0.0) -> dict[Any, float]:
    """Hybrid search's score of each candidate: ``cosine + weight * share``.

    Args:
        cosines: every candidate's cosine with the query (the dense and the lexical hits).
        shares: the lexical hits' BM25 as a share of the query's ceiling, in [0, 1]
            (``ChunkStore.lexical``, :meth:`BM25.share`); a candidate without one adds nothing.
        weight: the BM25 share's weight (``retrieval.lexical_weight``); 0 leaves the cosines.
        min_cosine: a candidate below this cosine gains nothing from its words
            (``retrieval.lexical_min_cosine``): a rare word shared with a chunk the embedder
            finds unrelated is no evidence ("the boiling point of ethanol" and a tip on
            boiling miso).
    """
    if weight <= 0:
        return dict(cosines)
    return {key: float(c) + (weight * float(shares.get(key, 0.0)) if c >= min_cosine else 0.0)
            for key, c in cosines.items()}


# --------------------------------------------------------------------------- QDMR (Break)
#
# The Break paper's metrics (Wolfson et al., TACL 2020; allenai/Break, evaluation/), so that a
# decomposition figure can be read beside the published ones. A QDMR is a list of step strings
# where ``#k`` is the answer of step k (1-based) plus, optionally, extra 1-based dependencies.
# Differences from the reference scripts are stated in each docstring.

_QDMR_REF_RE = re.compile(r"#\s*(\d+)")
_QDMR_PUNCT_RE = re.compile(r"[^\w\s#@]")
_QDMR_ARTICLES = frozenset({"a", "an", "the"})
#: Break's step separator in the flat decomposition string that SARI reads
QDMR_SEP = "@@SEP@@"
# Wall-clock budget of one exact graph edit distance; past it the best edit path found so far
# is kept (an upper bound), as Break keeps networkx's last approximation when its timer fires.
GED_TIMEOUT_S = 2.0


def qdmr_tokens(steps: Sequence[str]) -> list[str]:
    """The tokens SARI compares: Break's flat string ``step @@SEP@@ step ...`` with ``#k`` written
    ``@@k@@``, lower-cased and split on white space (Break splits on single spaces)."""
    text = f" {QDMR_SEP} ".join(_QDMR_REF_RE.sub(lambda m: f"@@{int(m.group(1))}@@", s) for s in steps)
    return text.lower().split()


def _ngram_set(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    # Break's (tensor2tensor's) SARI counts each distinct n-gram once
    return Counter({g: 1 for g in {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}})


def _fbeta(tp: float, selected: float, relevant: float, beta: float = 1.0) -> float:
    # tensor2tensor's convention: an empty selection has precision 1, an empty reference recall 1
    precision = tp / selected if selected > 0 else 1.0
    if beta == 0:
        return precision
    recall = tp / relevant if relevant > 0 else 1.0
    if precision > 0 and recall > 0:
        b2 = beta * beta
        return (1 + b2) * precision * recall / (b2 * precision + recall)
    return 0.0


def sari(source: Sequence[str], prediction: Sequence[str], target: Sequence[str],
         max_gram: int = 4) -> dict[str, float]:
    """SARI of one prediction against one target (Xu et al. 2016, tensor2tensor's variant, which
    Break's ``sari_hook.get_sari`` copies): the mean over n = 1..``max_gram`` of the keep F1, the
    add F1 and the delete precision of distinct n-grams, relative to the ``source`` tokens.

    Returns:
        ``{"sari", "keep", "add", "delete"}``, each in [0, 1]; an exact copy of the target scores 1.
    """
    keep = add = delete = 0.0
    for n in range(1, max_gram + 1):
        s, p, t = _ngram_set(source, n), _ngram_set(prediction, n), _ngram_set(target, n)
        sp, st = s & p, s & t
        keep += _fbeta(sum((sp & st).values()), sum(sp.values()), sum(st.values()))
        s_p, s_t = s - p, s - t
        delete += _fbeta(sum((s_p & s_t).values()), sum(s_p.values()), sum(s_t.values()), beta=0)
        p_s = p - s
        add += _fbeta(sum((p_s & t).values()), sum(p_s.values()), sum((t - s).values()))
    keep, add, delete = keep / max_gram, add / max_gram, delete / max_gram
    return {"sari": (keep + add + delete) / 3, "keep": keep, "add": add, "delete": delete}


def qdmr_sari(question: str, pred_steps: Sequence[str], gold_steps: Sequence[str]) -> float:
    """Break's SARI of a decomposition: the question is the source, the flat decomposition
    strings (:func:`qdmr_tokens`) are the prediction and the target."""
    return sari(question.lower().split(), qdmr_tokens(pred_steps), qdmr_tokens(gold_steps))["sari"]


def qdmr_exact_match(pred_steps: Sequence[str], gold_steps: Sequence[str]) -> float:
    """Break's ``exact_match``: the flat decomposition strings are equal, ignoring case (and, here,
    white space)."""
    return float(qdmr_tokens(pred_steps) == qdmr_tokens(gold_steps))


def _qdmr_deps(steps: Sequence[str], deps: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """1-based dependencies of each step: its ``#k`` references merged with ``deps``; references
    outside 1..n (or to the step itself or a later one) are dropped, so the graph is a DAG."""
    out = []
    for i, step in enumerate(steps):
        found = [int(k) for k in _QDMR_REF_RE.findall(step)]
        found += [int(k) for k in (deps[i] if deps is not None and i < len(deps) else [])]
        out.append([k for k in dict.fromkeys(found) if 1 <= k <= i])
    return out


def qdmr_normal_step(step: str) -> str:
    """A step as normalized exact match compares it: lower-cased, a leading ``return`` and the
    articles dropped, punctuation removed, references written ``#k``, white space collapsed."""
    text = _QDMR_REF_RE.sub(lambda m: f" #{int(m.group(1))} ", step.lower())
    words = _QDMR_PUNCT_RE.sub(" ", text).split()
    if words and words[0] == "return":
        words = words[1:]
    return " ".join(w for w in words if w not in _QDMR_ARTICLES)


def qdmr_normal_form(steps: Sequence[str], deps: Sequence[Sequence[int]] | None = None) -> tuple[str, tuple[str, ...]]:
    """(the answer step's expansion, the sorted expansions of every step).

    A step's expansion is its :func:`qdmr_normal_step` text with each ``#k`` replaced by the
    bracketed expansion of step k (and extra dependencies appended in brackets), so two QDMRs
    that differ only in the numbering of independent steps have the same normal form.
    """
    if not steps:
        return "", ()
    dep_lists = _qdmr_deps(steps, deps)
    memo: dict[int, str] = {}

    def expand(k: int) -> str:  # 1-based; dependencies point to earlier steps only
        if k not in memo:
            text = qdmr_normal_step(steps[k - 1])
            refs = {int(r) for r in _QDMR_REF_RE.findall(text)}
            text = _QDMR_REF_RE.sub(lambda m: f"( {expand(int(m.group(1)))} )"
                                    if int(m.group(1)) in dep_lists[k - 1] else m.group(0), text)
            extra = [d for d in dep_lists[k - 1] if d not in refs]
            memo[k] = text + "".join(f" [ {expand(d)} ]" for d in extra)
        return memo[k]

    return expand(len(steps)), tuple(sorted(expand(k) for k in range(1, len(steps) + 1)))


def qdmr_normalized_em(pred_steps: Sequence[str], gold_steps: Sequence[str],
                       pred_deps: Sequence[Sequence[int]] | None = None,
                       gold_deps: Sequence[Sequence[int]] | None = None) -> float:
    """1.0 when the two QDMRs have the same :func:`qdmr_normal_form`, else 0.0.

    Break's normalized EM rewrites both QDMRs into a normal form with hand-written rules
    (lemmas, operator-specific rewrites) before comparing; this is a smaller, documented
    version: step text normalized by :func:`qdmr_normal_step` and step order canonicalised by
    dependency (references replaced by what they refer to), so it forgives case, articles,
    punctuation and the order of independent steps, and nothing else.
    """
    return float(qdmr_normal_form(pred_steps, pred_deps) == qdmr_normal_form(gold_steps, gold_deps))


def step_similarity(a: str, b: str) -> float:
    """difflib's ratio of the two steps' :func:`qdmr_normal_step` tokens, references as ``#``
    (Break's ``SequenceMatchScorer.get_match_score``, which GED's node substitution uses)."""
    import difflib

    ta = ["#" if t.startswith("#") else t for t in qdmr_normal_step(a).split()]
    tb = ["#" if t.startswith("#") else t for t in qdmr_normal_step(b).split()]
    if not ta and not tb:
        return 1.0
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def _qdmr_graph(steps: Sequence[str], deps: Sequence[Sequence[int]] | None) -> object:
    import networkx as nx  # a dependency of torch; imported here so the module stays light

    g = nx.DiGraph()
    for i, step in enumerate(steps, start=1):
        g.add_node(i, label=step)
    for i, ds in enumerate(_qdmr_deps(steps, deps), start=1):
        g.add_edges_from((d, i) for d in ds)
    return g


def graph_edit_cost(g1: Any, g2: Any, similarity: Callable[[str, str], float],
                    timeout_s: float) -> tuple[float | None, bool]:
    """networkx's exact graph edit distance between two step graphs (networkx graphs whose nodes
    carry their step's text as ``label``), with Break's ``GraphMatchScorer`` costs: node
    substitution ``1 - similarity(label_a, label_b)`` (memoised per pair), node and edge insertion
    / deletion 1. The search runs for at most ``timeout_s``.

    Returns:
        ``(cost, exact)``: the unnormalized cost, ``None`` when no complete edit path was found
        within the budget; ``exact`` is False when the timeout cut the search (the cost is then
        the best upper bound found).
    """
    import time

    import networkx as nx  # a dependency of torch; imported here so the module stays light

    costs: dict[tuple[str, str], float] = {}

    def subst(a: dict[str, str], b: dict[str, str]) -> float:
        key = (a["label"], b["label"])
        if key not in costs:
            costs[key] = 1.0 - similarity(*key)
        return costs[key]

    start = time.monotonic()
    cost = nx.graph_edit_distance(g1, g2, node_subst_cost=subst, timeout=timeout_s)
    if cost is None:
        return None, False
    return float(cost), time.monotonic() - start < timeout_s


def qdmr_ged(pred_steps: Sequence[str], gold_steps: Sequence[str],
             pred_deps: Sequence[Sequence[int]] | None = None,
             gold_deps: Sequence[Sequence[int]] | None = None,
             timeout_s: float = GED_TIMEOUT_S) -> tuple[float, bool]:
    """Break's normalized graph edit distance (GED) between two QDMR graphs; lower is better.

    Graphs: one node per step (its text), an edge k -> i when step i depends on step k. Costs
    as Break's ``GraphMatchScorer``: node substitution ``1 - step_similarity``, node and edge
    insertion / deletion 1; the distance is divided by ``max(nodes + edges)`` of the two graphs,
    so it lies in [0, 1] (0: identical up to node order). networkx's exact search runs for at
    most ``timeout_s`` (Break: networkx's approximations under a timer).

    Returns:
        ``(distance, exact)``: ``exact`` is False when the timeout cut the search and the
        distance is the best upper bound found.
    """
    g1, g2 = _qdmr_graph(pred_steps, pred_deps), _qdmr_graph(gold_steps, gold_deps)
    norm = max(g1.number_of_nodes() + g1.number_of_edges(), g2.number_of_nodes() + g2.number_of_edges())
    if norm == 0:
        return 0.0, True
    cost, exact = graph_edit_cost(g1, g2, step_similarity, timeout_s)
    if cost is None:  # no complete edit path within the budget: delete all, insert all
        cost = float(norm)
    return min(cost / norm, 1.0), exact


__all__ = [
    "BM25",
    "attribution_metrics",
    "balanced_accuracy",
    "best_f1_threshold",
    "binary_prf",
    "bm25_tokens",
    "dcg",
    "graph_edit_cost",
    "mrr_at_k",
    "ndcg_at_k",
    "qdmr_exact_match",
    "qdmr_ged",
    "qdmr_normal_form",
    "qdmr_normal_step",
    "qdmr_normalized_em",
    "qdmr_sari",
    "qdmr_tokens",
    "rank_by_scores",
    "ranking_metrics",
    "recall_at_k",
    "roc_auc",
    "sari",
    "span_prf",
    "step_similarity",
    "top1_per_group",
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
