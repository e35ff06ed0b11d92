"""Out-of-domain figures of the reranker recipe (``data.leave_out``) and the gate that reads
them instead of the pooled held-out split's (issue 17, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from searchsmith.serving.pipeline.config import BundlesConfig
from searchsmith.serving.pipeline.gates import GATES, check_row, decide
from searchsmith.training.config import load_recipe_config
from searchsmith.training.rerank_data import QueryGroup
from searchsmith.training.reranker import evaluate_groups, flat_baselines

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "reranker" / "tiny" / "bert-tiny_full.yaml"


def _groups() -> list[QueryGroup]:
    # "a" queries: the relevant passage is the one with the query's word; "b": the reverse
    return [QueryGroup("a1", "a", "red", ["red x", "blue y", "green z"], [1, 0, 0]),
            QueryGroup("a2", "a", "blue", ["red x", "blue y", "green z"], [0, 1, 0]),
            QueryGroup("b1", "b", "red", ["red x", "blue y", "green z"], [0, 0, 1]),
            QueryGroup("b2", "b", "blue", ["red x", "blue y", "green z"], [0, 0, 1])]


def _word_match(pairs: list[tuple[str, str]]) -> list[float]:
    return [float(q in d) for q, d in pairs]


def test_left_out_sources_are_scored_together_as_ood() -> None:
    groups = _groups()
    out = evaluate_groups(_word_match, groups, ood_sources=["b"])
    assert out["a/ndcg@10"] == 1.0 and out["b/ndcg@10"] < 1.0
    assert out["ood/ndcg@10"] == out["b/ndcg@10"] and out["ood/mrr@10"] == out["b/mrr@10"]
    assert out["ndcg@10"] == pytest.approx((out["a/ndcg@10"] + out["b/ndcg@10"]) / 2)
    both = evaluate_groups(_word_match, groups, ood_sources=["a", "b"])
    assert both["ood/ndcg@10"] == pytest.approx(both["ndcg@10"])
    # no left-out source among the groups: no ood figure (the gate then reads the pooled one)
    assert not any(k.startswith("ood/") for k in evaluate_groups(_word_match, groups))
    assert not any(k.startswith("ood/") for k in evaluate_groups(_word_match, groups, ood_sources=["c"]))


def test_flat_baselines_carry_the_ood_figures_under_the_names_the_gate_reads() -> None:
    nested = {"bi_encoder": {"ndcg@10": 0.81, "ood/ndcg@10": 0.84, "ood/mrr@10": 0.8},
              "bm25": {"ndcg@10": 0.6, "ood/ndcg@10": 0.837}}
    assert flat_baselines(nested) == {"bi_encoder_ndcg@10": 0.81, "ood_bi_encoder_ndcg@10": 0.84,
                                      "ood_bi_encoder_mrr@10": 0.8, "bm25_ndcg@10": 0.6,
                                      "ood_bm25_ndcg@10": 0.837}


# The figures of the SciFact-left-out run of RESULTS.md: above both baselines pooled, below both
# on SciFact.
LOO = {"ndcg@10": 0.849, "baselines/bi_encoder_ndcg@10": 0.838, "baselines/bm25_ndcg@10": 0.775,
       "ood/ndcg@10": 0.831, "baselines/ood_bi_encoder_ndcg@10": 0.840, "baselines/ood_bm25_ndcg@10": 0.837}


def test_the_reranker_gate_reads_the_out_of_domain_figures_when_recorded() -> None:
    row = next(r for r in GATES if r.use == "rerank")
    fig, why = check_row(row, LOO)
    assert "nDCG@10 on datasets left out of training 0.831 is below the bi-encoder order (0.840)" in why
    assert fig.text() == "nDCG@10 on datasets left out of training 0.831 vs the bi-encoder order 0.840, BM25 0.837"
    assert not decide({"reranker": {"heldout_metrics": LOO}}, BundlesConfig())["rerank"].used
    beyond = {f"ood/ndcg@10_vs_{base}_{k}": v for base in ("bi_encoder", "bm25") for k, v in
              {"diff": 0.01, "lo": 0.005, "hi": 0.015, "p": 0.01, "n": 300, "direction": 1}.items()}
    better = {**LOO, "ood/ndcg@10": 0.85, **beyond}
    assert check_row(row, better)[1] is None
    assert decide({"reranker": {"heldout_metrics": better}}, BundlesConfig())["rerank"].used
    # no dataset left out: the pooled figures, as before
    pooled = {k: v for k, v in LOO.items() if "ood" not in k}
    pooled_tests = {k[len("ood/"):]: v for k, v in beyond.items()}
    fig, why = check_row(row, {**pooled, **pooled_tests})
    assert why is None and fig.what == "nDCG@10"
    # an ood figure without the baselines there is not judged against the pooled ones
    _, why = check_row(row, {**pooled, **pooled_tests, "ood/ndcg@10": 0.99})
    assert "baselines/ood_bi_encoder_ndcg@10 missing" in why


def test_gates_without_ood_figures_are_unchanged() -> None:
    row = next(r for r in GATES if not r.ood)  # the image rows: their figures are out of domain already
    baseline = row.baselines[0][0]
    test = {f"{row.beyond_noise[0]}_{k}": v for k, v in
            {"diff": 0.1, "lo": 0.05, "hi": 0.15, "p": 0.01, "n": 50, "direction": 1}.items()}
    figures = {row.metric: 0.9, baseline: 0.8, f"ood/{row.metric}": 0.1, **test}
    assert check_row(row, figures)[1] is None


def test_a_tiny_run_leaving_a_source_out_records_ood_figures_and_baselines(tmp_path: Path, shared_data: Path) -> None:
    from searchsmith.training.registry import get_recipe

    cfg = load_recipe_config(TINY, [f"output_dir={tmp_path}", "optim.max_steps=2", "data.sources=[synthetic,musique]",
                                    f"data.musique={shared_data / 'musique' / 'musique_ans_200.jsonl'}",
                                    "data.leave_out=[musique]", "data.synthetic_queries=24"])
    final = get_recipe("reranker").fn(cfg, run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert final["ood/ndcg@10"] == final["musique/ndcg@10"]
    assert metrics["baselines"]["bm25"]["ood/ndcg@10"] == metrics["baselines"]["bm25"]["musique/ndcg@10"]
    assert metrics["baselines"]["ood_bm25_ndcg@10"] == metrics["baselines"]["bm25"]["ood/ndcg@10"]
    # the paired tests of the gate, pooled and on the left-out source's queries
    assert final["ndcg@10_vs_bm25_n"] == final["queries"] and final["ood/ndcg@10_vs_bm25_n"] == final["ood/queries"]
    assert final["ood/ndcg@10_vs_bm25_diff"] == pytest.approx(
        final["ood/ndcg@10"] - metrics["baselines"]["bm25"]["ood/ndcg@10"], abs=1e-9)
    split = json.loads((tmp_path / "split.json").read_text())
    assert not any(q.startswith("musique") for q in split["train"])


def test_paired_tests_against_each_baseline_query_by_query() -> None:
    from searchsmith.training.reranker import group_ndcgs

    groups = _groups()
    reverse = lambda pairs: [-s for s in _word_match(pairs)]  # noqa: E731 - right on the "b" queries
    rows = {"match": group_ndcgs(_word_match, groups), "reverse": group_ndcgs(reverse, groups)}
    assert rows["match"][:2] == [1.0, 1.0] and rows["match"][2] < 1.0
    out = evaluate_groups(_word_match, groups, ood_sources=["b"], vs=rows)
    # against itself: no difference, inside the noise
    assert out["ndcg@10_vs_match_diff"] == 0.0 and out["ndcg@10_vs_match_direction"] == 0.0
    assert out["ndcg@10_vs_match_n"] == 4.0
    d = [m - r for m, r in zip(rows["match"], rows["reverse"], strict=True)]
    assert out["ndcg@10_vs_reverse_diff"] == pytest.approx(sum(d) / 4)
    # the left-out source's queries alone: the word match loses there
    assert out["ood/ndcg@10_vs_reverse_n"] == 2.0 and out["ood/ndcg@10_vs_reverse_diff"] == pytest.approx(sum(d[2:]) / 2)
    assert out["ood/ndcg@10_vs_reverse_diff"] < 0
    with pytest.raises(ValueError, match="3 short figures for 4 queries"):
        evaluate_groups(_word_match, groups, vs={"short": [1.0, 1.0, 1.0]})


def _musique_file(path: Path, n: int = 10) -> Path:
    """n made-up MuSiQue records: 4 paragraphs, two hops (the second a KB-style step on #1)."""
    rows = []
    for i in range(n):
        paras = [{"idx": j, "title": f"Place {i}-{j}", "paragraph_text": f"Place {i}-{j} lies by lake {j} and "
                  f"was founded by person {i}{j}.", "is_supporting": j in (1, 2)} for j in range(4)]
        rows.append({"id": f"2hop__{i}", "question": f"Who founded the town by lake 1 of region {i}?",
                     "paragraphs": paras, "question_decomposition": [
                         {"id": 1, "question": f"Which town lies by lake 1 in region {i}?", "answer": f"Place {i}-1",
                          "paragraph_support_idx": 1},
                         {"id": 2, "question": "#1 >> founded by", "answer": f"person {i}1",
                          "paragraph_support_idx": 2},
                         {"id": 3, "question": "#2 >> spouse", "answer": "x", "paragraph_support_idx": None}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_musique_hops_are_single_hop_queries_of_the_training_questions_only(tmp_path: Path) -> None:
    from searchsmith.training.rerank_data import RerankerData, _hop_query, musique_hop_groups

    assert _hop_query("#1 >> founded by", ["Place 3-1"]) == "founded by of Place 3-1"
    assert _hop_query("Who married #2?", ["a", "Bob"]) == "Who married Bob?"
    assert _hop_query("Who married #3?", ["a"]) == "Who married #3?"  # no such hop: kept, then skipped
    data = RerankerData(sources=["musique"], musique=str(_musique_file(tmp_path / "m.jsonl")))
    hops = musique_hop_groups(data, {"musique-2hop__0", "musique-2hop__3"})
    assert [h.qid for h in hops] == ["musique-2hop__0#hop1", "musique-2hop__0#hop2",
                                     "musique-2hop__3#hop1", "musique-2hop__3#hop2"]  # hop 3 has no paragraph
    assert hops[1].query == "founded by of Place 0-1" and hops[1].labels == [0, 0, 1, 0]
    assert hops[0].labels == [0, 1, 0, 0] and hops[0].source == "musique"


def test_a_run_with_musique_hops_trains_on_them_and_holds_out_the_same_questions(tmp_path: Path) -> None:
    from searchsmith.training.registry import get_recipe

    path = _musique_file(tmp_path / "m.jsonl")
    runs = {}
    for hops in (False, True):
        run = tmp_path / f"run-{hops}"
        cfg = load_recipe_config(TINY, [f"output_dir={run}", "optim.max_steps=2", "data.sources=[synthetic,musique]",
                                        f"data.musique={path}", "data.synthetic_queries=24",
                                        f"data.musique_hops={str(hops).lower()}"])
        get_recipe("reranker").fn(cfg, run_dir=run)
        runs[hops] = (json.loads((run / "metrics.json").read_text())["baselines"]["data"],
                      json.loads((run / "split.json").read_text()))
    (plain, split), (with_hops, split_hops) = runs[False], runs[True]
    assert split == split_hops  # the same questions trained on and held out
    trained_musique = [q for q in split["train"] if q.startswith("musique-")]
    assert trained_musique
    assert with_hops["train_queries"] == plain["train_queries"] + 2 * len(trained_musique)
    assert with_hops["eval_queries"] == plain["eval_queries"]
