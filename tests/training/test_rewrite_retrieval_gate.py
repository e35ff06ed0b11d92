"""Issue 17, item 3: the decomposer recipe judges rewrites by the retrieval they drive, beside
the heuristic rewrite (the pipeline's fallback), and the rewrite gate reads that figure."""

from __future__ import annotations

import pytest
from searchsmith.serving.pipeline.config import BundlesConfig
from searchsmith.serving.pipeline.gates import decide
from searchsmith.training.decomposer import (
    baselines,
    evaluate,
    heuristic_rewrite_figures,
    retrieval_of_rewrites,
    rewrite_passages,
)

TURNS = [  # the same follow-up in every topic: only its history says which passage it wants
    ("Tell me about the Eiffel Tower in Paris.", "What is the history of it?", "What is the history of the Eiffel Tower?",
     "The Eiffel Tower in Paris was finished in 1889 for the world's fair; its history is told here."),
    ("What is the Colosseum in Rome?", "What is the history of it?", "What is the history of the Colosseum?",
     "The Colosseum in Rome was built between 70 and 80 AD; its history spans two thousand years."),
    ("Tell me about the Louvre pyramid.", "What is the history of it?", "What is the history of the Louvre pyramid?",
     "The Louvre pyramid was designed by I. M. Pei and opened in 1989; its history is short."),
    ("What is the Golden Gate Bridge?", "What is the history of it?", "What is the history of the Golden Gate Bridge?",
     "The Golden Gate Bridge opened in 1937 at San Francisco; its history includes a long strike."),
]


def _items(with_passage: bool = True) -> list[dict]:
    return [{"id": f"t{n}", "task": "rewrite", "history": [h], "query": q, "target": t,
             **({"passage": p} if with_passage else {})} for n, (h, q, t, p) in enumerate(TURNS)]


class FixedRewrites:
    """A decomposer stand-in whose rewrites are given."""

    def __init__(self, rewrites):
        self.rewrites = rewrites

    def decompose_batch(self, queries):
        return []

    def rewrite_batch(self, pairs):  # the history comes as chat turns, as a model is given it
        return [self.rewrites[(history[-1]["content"], q)] for history, q in pairs]


def test_the_baselines_hold_the_heuristic_and_the_raw_query_retrieval():
    out = baselines([], _items())
    for key in ("rewrite_f1_heuristic", "rewrite_retrieval_ndcg@10_heuristic", "rewrite_retrieval_ndcg@10_copy_query",
                "rewrite_retrieval_ndcg@10_manual", "rewrite_f1_copy_query"):
        assert key in out, key
    assert out["rewrite_retrieval_ndcg@10_manual"] == pytest.approx(1.0)  # the human rewrite finds every passage
    assert out["rewrite_retrieval_ndcg@10_copy_query"] < 1.0  # the bare follow-up cannot
    assert out["rewrite_retrieval_turns"] == 4
    assert heuristic_rewrite_figures(_items())["rewrite_f1_heuristic"] == out["rewrite_f1_heuristic"]


def test_the_model_figures_are_the_retrieval_of_its_own_rewrites():
    perfect = FixedRewrites({(h, q): t for h, q, t, _ in TURNS})
    blind = FixedRewrites({(h, q): q for h, q, _, _ in TURNS})
    good, bad = evaluate(perfect, _items()), evaluate(blind, _items())
    assert good["rewrite_retrieval_ndcg@10"] == pytest.approx(1.0) and good["rewrite_f1"] == pytest.approx(1.0)
    base = baselines([], _items())
    assert bad["rewrite_retrieval_ndcg@10"] == pytest.approx(base["rewrite_retrieval_ndcg@10_copy_query"])
    assert not any(k.endswith(("_copy_query", "_manual")) for k in good)  # those are the baselines'
    # turns without an answer passage: no retrieval figure at all (the gate then says how to get one)
    assert "rewrite_retrieval_ndcg@10" not in evaluate(perfect, _items(with_passage=False))
    assert retrieval_of_rewrites(_items(with_passage=False), [t for _, _, t, _ in TURNS]) == {}


def test_the_rewrite_gate_reads_retrieval_against_the_heuristic():
    base = {f"baselines/{k}": v for k, v in baselines([], _items()).items()}
    # here the heuristic (history terms appended) already finds every passage
    assert base["baselines/rewrite_retrieval_ndcg@10_heuristic"] == pytest.approx(1.0)

    def decision(rewrites, baseline):
        figs = {**evaluate(FixedRewrites(rewrites), _items()), **baseline}
        return decide({"decomposer": {"heldout_metrics": figs}}, BundlesConfig())["rewrite"]

    perfect = {(h, q): t for h, q, t, _ in TURNS}
    blind = {(h, q): q for h, q, _, _ in TURNS}
    assert "only ties with the heuristic rewrite's" in decision(perfect, base).reason  # a tie is not a win
    assert "is below the heuristic rewrite's" in decision(blind, base).reason
    weaker = {**base, "baselines/rewrite_retrieval_ndcg@10_heuristic": 0.5}
    # the point figure leads a weaker heuristic, but the paired test was measured against the
    # real one (as good as the perfect rewrites here): inside the noise
    assert "only inside the noise (paired difference +0.000" in decision(perfect, weaker).reason
    beyond = {"rewrite_retrieval_ndcg@10_vs_heuristic_direction": 1}
    assert decision(perfect, {**weaker, **beyond}).used
    assert "the raw query's" in decision(blind, weaker).reason  # the best baseline is named


def test_the_paired_test_compares_each_turn_with_the_heuristic():
    """evaluate records the rewrites against the heuristic turn by turn: the mean difference,
    its interval, the sign-flip p-value and the direction the gate reads."""
    from searchsmith.training.decomposer import GAIN_KEY, rewrite_gain

    perfect = {(h, q): t for h, q, t, _ in TURNS}
    blind = {(h, q): q for h, q, _, _ in TURNS}
    same = evaluate(FixedRewrites(perfect), _items())
    assert same[f"{GAIN_KEY}_diff"] == pytest.approx(0.0) and same[f"{GAIN_KEY}_direction"] == 0
    assert same[f"{GAIN_KEY}_n"] == 4
    worse = rewrite_gain(_items(), [blind[(h, q)] for h, q, _, _ in TURNS])
    assert worse[f"{GAIN_KEY}_diff"] < 0 and worse[f"{GAIN_KEY}_lo"] <= worse[f"{GAIN_KEY}_diff"]
    assert worse[f"{GAIN_KEY}_p"] > 0.05 and worse[f"{GAIN_KEY}_direction"] == 0  # 4 turns: inside the noise
    assert rewrite_gain(_items(with_passage=False), [t for _, _, t, _ in TURNS]) == {}


def test_the_training_passages_join_the_corpus_as_distractors():
    """The recipe passes the training split's passages as more documents (never as labels)."""
    train = [{"task": "rewrite", "passage": "What is the history of it? The history of the Eiffel Tower."},
             {"task": "rewrite", "passage": "What is the history of it? The history of the Eiffel Tower."},
             {"task": "decompose", "passage": "not a rewrite"}, {"task": "rewrite"}]
    extra = rewrite_passages(train)
    assert extra == ["What is the history of it? The history of the Eiffel Tower."]
    alone = heuristic_rewrite_figures(_items())
    more = heuristic_rewrite_figures(_items(), extra)
    assert alone["rewrite_retrieval_documents"] == 4 and more["rewrite_retrieval_documents"] == 5
    assert "rewrite_retrieval_documents_heuristic" not in more  # a count, not a figure of the heuristic
    raw = {(h, q): q for h, q, _, _ in TURNS}
    # the distractor matches the bare follow-up word for word: the raw query now retrieves it first
    assert more["rewrite_retrieval_ndcg@10_copy_query"] < alone["rewrite_retrieval_ndcg@10_copy_query"]
    assert evaluate(FixedRewrites(raw), _items(), extra_docs=extra)["rewrite_retrieval_ndcg@10"] == pytest.approx(
        more["rewrite_retrieval_ndcg@10_copy_query"])


def _decompositions(n: int) -> list[dict]:
    return [{"id": f"d{k}", "task": "decompose", "query": f"Who founded company {k} and where was its founder born?",
             "graph": {"type": "chain", "nodes": [
                 {"id": "1", "text": f"Who founded company {k}?", "depends_on": []},
                 {"id": "2", "text": "Where was #1 born?", "depends_on": ["1"]}]}} for k in range(n)]


class FixedGraphs:
    """A decomposer stand-in that splits the question at ' and ' (right) or keeps it whole."""

    def __init__(self, split: bool):
        self.split = split

    def decompose_batch(self, queries):
        from searchsmith.models.qdg import QDG, QDGNode

        out = []
        for q in queries:
            if self.split:
                a, b = q.rstrip("?").split(" and ")
                g = QDG("chain", (QDGNode("1", a + "?", ()), QDGNode("2", "Where was #1 born?", ("1",))))
            else:
                g = QDG("terminal", (QDGNode("1", q, ()),))
            out.append((g, True, ""))
        return out

    def rewrite_batch(self, pairs):
        return []


def test_the_decompose_gate_needs_a_lead_beyond_the_noise_over_one_node():
    """The decompose gate reads the recipe's paired test of node-text F1 against keeping the
    question whole (a lead of 0.007 on 22 quickstart templates opened it before)."""
    from searchsmith.training.decomposer import NODE_GAIN_KEY

    many, few = _decompositions(30), _decompositions(2)
    right = evaluate(FixedGraphs(True), many)
    assert right[f"{NODE_GAIN_KEY}_direction"] == 1 and right[f"{NODE_GAIN_KEY}_n"] == 30
    assert right[f"{NODE_GAIN_KEY}_diff"] == pytest.approx(
        right["decompose_node_f1"] - baselines(many, many)["decompose_node_f1_question_as_terminal"])
    whole = evaluate(FixedGraphs(False), many)
    assert whole[f"{NODE_GAIN_KEY}_diff"] == pytest.approx(0.0) and whole[f"{NODE_GAIN_KEY}_direction"] == 0
    assert evaluate(FixedGraphs(True), few)[f"{NODE_GAIN_KEY}_direction"] == 0  # 2 questions: inside the noise

    def gate(figures):
        base = {"decompose_node_f1": figures["decompose_node_f1"],
                "baselines/decompose_node_f1_question_as_terminal":
                    baselines(many, many)["decompose_node_f1_question_as_terminal"]}
        manifest = {"task": "decompose", "heldout_metrics": {**base, **{k: v for k, v in figures.items()
                                                                        if k.startswith(NODE_GAIN_KEY)}}}
        return decide({"decomposer": manifest}, BundlesConfig())["decompose"]

    assert gate(right).used
    small = evaluate(FixedGraphs(True), few)
    assert not gate(small).used and "only inside the noise" in gate(small).reason
    no_test = {"decompose_node_f1": right["decompose_node_f1"]}
    assert not gate(no_test).used and "records no paired test" in gate(no_test).reason
