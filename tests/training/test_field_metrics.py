"""The field's own metrics beside ours (issue 20 part 5): Break's SARI / EM / normalized EM /
GED in ``eval decompose``, the retrieval a rewrite drives in ``eval rewrite``, SciFact's protocol
note and the BEIR-style full-corpus run (``python -m searchsmith.training.evaluate beir-full``)."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from searchsmith.models.qdg import QDG
from searchsmith.training import evaluate as ev

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"

SPLIT = {"query": "Which is older, Lumen or Varok?", "type": "split", "nodes": [
    {"id": "1", "text": "when was Lumen founded", "depends_on": []},
    {"id": "2", "text": "when was Varok founded", "depends_on": []},
    {"id": "3", "text": "which is older of #1 and #2", "depends_on": ["1", "2"]}]}
CHAIN = {"query": "Who founded the band Lumen?", "type": "chain", "nodes": [
    {"id": "1", "text": "the band Lumen", "depends_on": []},
    {"id": "2", "text": "who founded #1", "depends_on": ["1"]}]}


class FakeDecomposer:
    """Returns the gold graph for the questions in ``gold`` and the question as one node otherwise;
    rewrites from ``rewrites`` (query -> text), else the query."""

    def __init__(self, gold: dict[str, dict[str, Any]], rewrites: dict[str, str] | None = None) -> None:
        self.gold, self.rewrites = gold, rewrites or {}

    def decompose_batch(self, questions: list[str], max_nodes: int | None = None) -> list[tuple[QDG, bool, str]]:
        out = []
        for q in questions:
            g = self.gold.get(q) or {"type": "terminal", "nodes": [{"id": "1", "text": q, "depends_on": []}]}
            out.append((QDG.from_json({"type": g["type"], "nodes": g["nodes"]}), True, ""))
        return out

    def rewrite_batch(self, items: list[tuple[list[str], str]]) -> list[str]:
        return [self.rewrites.get(q, q) for _, q in items]


def _fake_model(monkeypatch: pytest.MonkeyPatch, model: Any, task: str) -> None:
    def load(eval_task: str, args: Namespace, *, required: bool = True) -> ev.EvalModel | None:
        if not required and not getattr(args, "bundle", None) and not getattr(args, "checkpoint", None):
            return None
        return ev.EvalModel(model, task, f"fake:{task}")

    monkeypatch.setattr(ev, "load_eval_model", load)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- eval decompose


def test_eval_decompose_reports_break_metrics_beside_the_one_node_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from searchsmith.models.metrics import qdmr_ged, qdmr_sari

    data = _jsonl(tmp_path / "d.jsonl", [SPLIT, CHAIN])
    _fake_model(monkeypatch, FakeDecomposer({SPLIT["query"]: SPLIT}), "decompose")
    per_item = tmp_path / "items.jsonl"
    out = ev.eval_decompose(Namespace(data=str(data), limit=0, per_item=str(per_item)))
    # item 1 exact, item 2 the question as one node (the model equals the baseline there)
    chain_steps = ["the band Lumen", "who founded #1"]
    one_sari = qdmr_sari(CHAIN["query"], [CHAIN["query"]], chain_steps)
    one_ged = qdmr_ged([CHAIN["query"]], chain_steps)[0]
    assert out["decompose_sari"] == pytest.approx((1.0 + one_sari) / 2)
    assert out["decompose_em"] == 0.5 and out["decompose_normalized_em"] == 0.5
    assert out["decompose_ged"] == pytest.approx(one_ged / 2)
    assert out["decompose_em_one_node"] == 0.0
    assert out["decompose_ged_one_node"] > out["decompose_ged"]
    assert out["decompose_sari_one_node"] < out["decompose_sari"]
    assert 0.0 < out["decompose_node_f1_one_node"] < 1.0
    for key in ("decompose_sari", "decompose_em", "decompose_normalized_em", "decompose_ged",
                "decompose_sari_one_node", "decompose_ged_one_node", "decompose_node_f1", "decompose_type_acc"):
        assert isinstance(out[f"{key}_ci95"], list), key
    assert "SARI" in out["break_metrics"] and out["bootstrap"]["resamples"] > 0
    rows = [json.loads(x) for x in per_item.read_text().splitlines()]
    assert rows[0]["decompose_sari"] == pytest.approx(1.0) and rows[0]["decompose_ged"] == 0.0


def test_break_figures_renumber_references_by_position() -> None:
    # ids that are not 1..n still map to Break's positions
    pred = {"type": "chain", "nodes": [{"id": "7", "text": "the band Lumen", "depends_on": []},
                                       {"id": "9", "text": "who founded #7", "depends_on": ["7"]}]}
    figs = ev.break_figures(CHAIN["query"], pred, CHAIN)
    assert figs["decompose_em"] == 1.0 and figs["decompose_ged"] == 0.0 and figs["decompose_sari"] == 1.0


# ----------------------------------------------------------------------------- eval rewrite

TURNS = [
    {"history": [{"role": "user", "content": "Tell me about the Lumen lighthouse."}], "query": "When did they finish it?",
     "rewrite": "When was the Lumen lighthouse built?",
     "passage": "The Lumen lighthouse was built in 1872 on the northern cape."},
    {"history": [{"role": "user", "content": "What is the Varok glacier?"}], "query": "How quickly is that happening?",
     "rewrite": "How fast is the Varok glacier melting?",
     "passage": "The Varok glacier is melting at a rate of ten metres a year."},
    {"history": [], "query": "What do otters eat?", "rewrite": "What do otters eat?",
     "passage": "Sea otters eat urchins, crabs and clams."},
    {"history": [], "query": "Who wrote it?", "rewrite": "Who wrote the Quindor saga?"},  # no passage
]


def test_rewrite_retrieval_copying_the_manual_rewrite_scores_its_upper_bound() -> None:
    metrics, rows = ev.rewrite_retrieval(TURNS, [t["rewrite"] for t in TURNS])
    assert metrics["rewrite_retrieval_turns"] == 3 and len(rows) == 3
    assert metrics["rewrite_retrieval_documents"] == 3
    assert metrics["rewrite_retrieval_ndcg@10"] == metrics["rewrite_retrieval_ndcg@10_manual"] == 1.0
    assert metrics["rewrite_retrieval_agreement@10"] == 1.0
    # the raw follow-ups ("When did they finish it?") share no word with their passages
    assert metrics["rewrite_retrieval_ndcg@10_copy_query"] < 1.0
    assert isinstance(metrics["rewrite_retrieval_ndcg@10_ci95"], list)
    assert ev.rewrite_retrieval(TURNS[3:], ["x"]) == ({}, [])
    with pytest.raises(ValueError, match="heuristic"):
        ev.rewrite_retrieval(TURNS, [t["rewrite"] for t in TURNS], others={"heuristic": ["only one"]})
    got, _ = ev.rewrite_retrieval(TURNS, [t["rewrite"] for t in TURNS], others={"heuristic": [t["query"] for t in TURNS]})
    assert got["rewrite_retrieval_ndcg@10_heuristic"] == got["rewrite_retrieval_ndcg@10_copy_query"]


def test_rewrite_retrieval_on_a_hand_ranked_case() -> None:
    # only the otters turn: its passage is the one of three documents sharing a word with it
    turns = [TURNS[2], {**TURNS[0], "query": "otters", "rewrite": "lighthouse built"}]
    metrics, rows = ev.rewrite_retrieval(turns, ["otters", "otters"], extra_docs=["otters otters otters everywhere"])
    assert metrics["rewrite_retrieval_documents"] == 3
    # turn 2: "otters" ranks the distractor (tf 3) first, then the otters passage; its own passage
    # (the lighthouse) shares no word with "otters": nDCG 0, while the manual rewrite finds it first
    assert rows[1]["rewrite_retrieval_ndcg@10"] == 0.0 and rows[1]["rewrite_retrieval_ndcg@10_manual"] == 1.0
    # turn 1: the otters passage second -> 1 / log2(3)
    assert rows[0]["rewrite_retrieval_ndcg@10"] == pytest.approx(1 / np.log2(3))
    assert rows[0]["rewrite_retrieval_mrr@10"] == 0.5


def test_eval_rewrite_reports_retrieval_for_model_copy_and_manual(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _jsonl(tmp_path / "rw.jsonl", TURNS)
    rewrites = {t["query"]: t["rewrite"] for t in TURNS}
    _fake_model(monkeypatch, FakeDecomposer({}, rewrites), "decompose")
    per_item = tmp_path / "items.jsonl"
    out = ev.eval_rewrite(Namespace(data=str(data), limit=0, per_item=str(per_item), corpus=None))
    assert out["rewrite_em"] == 1.0 and out["rewrite_em_copy_query"] == 0.25
    assert out["rewrite_retrieval_ndcg@10"] == 1.0 == out["rewrite_retrieval_ndcg@10_manual"]
    assert out["rewrite_retrieval_ndcg@10_copy_query"] < 1.0
    assert isinstance(out["rewrite_retrieval_ndcg@10_copy_query_ci95"], list)
    # the heuristic rewrite appends the history's salient terms ("Lumen lighthouse", "Varok glacier"):
    # it finds the passages the raw follow-ups miss
    assert out["rewrite_retrieval_ndcg@10_copy_query"] < out["rewrite_retrieval_ndcg@10_heuristic"] == 1.0
    assert 0.0 < out["rewrite_f1_heuristic"] < 1.0 and "rewrite_f1_heuristic" in out
    assert "_heuristic" in out["rewrite_retrieval_protocol"]
    assert "not CAsT's official NDCG" in out["rewrite_retrieval_protocol"]
    assert list(out)[-1] == "bootstrap"
    rows = [json.loads(x) for x in per_item.read_text().splitlines()]
    assert "rewrite_retrieval_ndcg@10" in rows[0] and "rewrite_retrieval_ndcg@10" not in rows[3]


def test_eval_rewrite_without_passages_has_no_retrieval_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _jsonl(tmp_path / "rw.jsonl", [{k: v for k, v in t.items() if k != "passage"} for t in TURNS])
    _fake_model(monkeypatch, FakeDecomposer({}), "decompose")
    out = ev.eval_rewrite(Namespace(data=str(data), limit=0, per_item=None, corpus=None))
    assert not any(k.startswith("rewrite_retrieval") for k in out)


def test_trec_cast_export_keeps_the_answer_passage(tmp_path: Path) -> None:
    from searchsmith.training.decompose_data import load_trec_cast, to_rewrite_record

    (ex,) = load_trec_cast([{"raw_utterance": "When was it built?", "manual_rewritten_utterance": "When was X built?",
                             "history_utterances": ["Tell me about X"], "year": 2021, "topic_id": 1,
                             "canonical_response": "X was built  in 1872."}])
    assert to_rewrite_record(ex)["passage"] == "X was built in 1872."


# ----------------------------------------------------------------------------- SciFact / BEIR


def _beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = {"d1": "otters eat urchins", "d2": "glaciers melt in summer", "d3": "lighthouses guide ships",
            "d4": "otters and urchins in kelp forests", "d5": "summer glaciers retreat"}
    _jsonl(root / "corpus.jsonl", [{"_id": k, "title": "", "text": v} for k, v in docs.items()])
    _jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "what do otters eat"},
                                    {"_id": "q2", "text": "glaciers summer"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td4\t1\nq2\td5\t1\n")
    return root


class FakeReranker:
    """Scores a passage by whether it holds 'kelp' or 'retreat' (puts the gold doc first)."""

    def score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.asarray([float("kelp" in p or "retreat" in p) for _, p in pairs], dtype=np.float32)


def test_beir_full_run_ranks_the_whole_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from searchsmith.models.metrics import BM25, ndcg_at_k

    data = _beir(tmp_path / "beir")
    _fake_model(monkeypatch, FakeReranker(), "rerank")
    per_item = tmp_path / "items.jsonl"
    out = ev.eval_full_corpus(Namespace(data=str(data), depth=100, no_dense=True, limit=0, per_item=str(per_item),
                                        bundle="x", checkpoint=None, device="cpu"))
    assert out["documents"] == 5 and out["queries"] == 2 and out["depth"] == 100
    # BM25 by hand: rank of the gold doc in the BM25 order of the whole corpus
    docs = [json.loads(x) for x in (data / "corpus.jsonl").read_text().splitlines()]
    bm = BM25([d["text"] for d in docs])
    expected = []
    for q, gold in (("what do otters eat", "d4"), ("glaciers summer", "d5")):
        ranked = [docs[i]["_id"] for i, _ in bm.top_k(q, 100)]
        expected.append(ndcg_at_k([int(d == gold) for d in ranked], 10, [1]))
    assert out["bm25/ndcg@10"] == pytest.approx(sum(expected) / 2)
    assert out["bm25/recall@100"] == 1.0
    assert out["rerank/ndcg@10"] == 1.0 and out["rerank/recall@100"] == out["bm25/recall@100"]
    assert isinstance(out["bm25/ndcg@10_ci95"], list) and isinstance(out["rerank/ndcg@10_ci95"], list)
    assert "bi_encoder" not in out["systems"] and "BEIR-style" in out["protocol"]
    assert len(per_item.read_text().splitlines()) == 2


def test_beir_full_mixes_a_bundle_as_it_was_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle whose share was measured against cosine + BM25 share is served so: at share 0
    with a BM25 share that outweighs every cosine, its order is BM25's over the whole corpus."""
    from searchsmith.models.rerank_mix import RetrievalMix

    reranker = FakeReranker()
    reranker.retrieval_mix = RetrievalMix(0.0, lexical_weight=1e6, lexical_min_cosine=-1.0)
    _fake_model(monkeypatch, reranker, "rerank")
    out = ev.eval_full_corpus(Namespace(data=str(_beir(tmp_path / "beir")), depth=100, no_dense=True, limit=0,
                                        per_item=None, bundle="x", checkpoint=None, device="cpu"))
    assert out["rerank/ndcg@10"] == pytest.approx(out["bm25/ndcg@10"]) and out["rerank/ndcg@10"] < 1.0
    assert "mixed with the cosine + 1e+06 x BM25 share at its share 0" in out["systems"]["rerank"]


def test_beir_full_cli_refuses_a_depth_below_ten(tmp_path: Path) -> None:
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError, match="--depth"):
        ev._main(["beir-full", str(_beir(tmp_path / "beir")), "--no-dense", "--depth", "5"])


def test_scifact_folder_states_its_protocol_in_rerank_and_full_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = _jsonl(tmp_path / "claims.jsonl", [
        {"id": 1, "claim": "otters eat urchins", "qrels": ["10"], "bm25_top10": [["10", 3.0], ["11", 1.0]]},
        {"id": 2, "claim": "no evidence here", "qrels": [], "bm25_top10": None}])
    corpus = _jsonl(tmp_path / "corpus.jsonl", [
        {"doc_id": 10, "title": "Otters", "abstract": ["Otters eat urchins."], "structured": False},
        {"doc_id": 11, "title": "Kelp", "abstract": ["Kelp grows."], "structured": False}])
    out_dir = ev.write_scifact_beir(tmp_path / "beir", claims, corpus)
    assert json.loads((out_dir / "protocol.json").read_text())["documents"] == 2
    _fake_model(monkeypatch, FakeReranker(), "rerank")
    rr = ev.eval_rerank(Namespace(data=str(out_dir), run=str(out_dir / "run.bm25.trec"), first_stage=None, k=3,
                                  limit=0, per_item=None, bundle="x", checkpoint=None))
    assert "not comparable to BEIR" in rr["protocol"] and "run.bm25.trec" in rr["protocol"]
    full = ev.eval_full_corpus(Namespace(data=str(out_dir), depth=100, no_dense=True, limit=0, per_item=None,
                                         bundle=None, checkpoint=None, device="cpu"))
    assert "sub-corpus" in full["protocol"] and "rerank/ndcg@10" not in full


# ----------------------------------------------------------------------------- real data


@pytest.mark.skipif(not (SHARED / "break_qdmr" / "dev.jsonl").is_file(), reason="../shared/data is absent")
def test_break_gold_against_itself_and_the_one_node_baseline_on_real_qdmrs() -> None:
    from searchsmith.models.metrics import qdmr_ged, qdmr_normalized_em, qdmr_sari

    rows = [json.loads(x) for x in (SHARED / "break_qdmr" / "dev.jsonl").read_text().splitlines()[:30]]
    for r in rows:
        steps, deps, q = r["steps"], r["step_dependencies"], r["question_text"]
        assert qdmr_sari(q, steps, steps) == pytest.approx(1.0)
        assert qdmr_normalized_em(steps, steps, deps, deps) == 1.0
        assert qdmr_ged(steps, steps, deps, deps)[0] == pytest.approx(0.0)
        ged, _ = qdmr_ged([q], steps, None, deps)
        assert 0.0 < ged <= 1.0 and 0.0 <= qdmr_sari(q, [q], steps) < 1.0
