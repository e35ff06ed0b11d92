"""Reranker recipe: losses and metrics on known values, data checks, tiny twin end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from beir_folder import synthetic_beir
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.metrics import (
    BM25,
    mrr_at_k,
    ndcg_at_k,
    rank_by_scores,
    ranking_metrics,
    recall_at_k,
)
from searchsmith.models.text import token_f1
from searchsmith.training.config import load_recipe_config
from searchsmith.training.rerank_data import (
    QueryGroup,
    RerankerData,
    check_group,
    load_groups,
    synthetic_groups,
)
from searchsmith.training.reranker import bce_loss, build_model, listwise_loss

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "reranker" / "tiny" / "bert-tiny_full.yaml"


# ------------------------------------------------------------------ metrics


def test_ndcg_known_values() -> None:
    assert ndcg_at_k([1, 0, 0]) == pytest.approx(1.0)
    # One relevant document at rank 2: DCG = 1/log2(3), ideal DCG = 1.
    assert ndcg_at_k([0, 1, 0]) == pytest.approx(1 / math.log2(3))
    # Two relevant, found at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2(3)).
    assert ndcg_at_k([1, 0, 1]) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # A relevant document outside the ranking still counts in the ideal DCG.
    assert ndcg_at_k([1, 0], all_labels=[1, 0, 1]) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k([0, 0]) == 0.0
    assert ndcg_at_k([0, 1], k=1) == 0.0


def test_mrr_and_recall_known_values() -> None:
    assert mrr_at_k([0, 0, 1, 1]) == pytest.approx(1 / 3)
    assert mrr_at_k([0, 0, 1], k=2) == 0.0
    assert recall_at_k([0, 1, 0, 1], k=2) == pytest.approx(0.5)


def test_rank_by_scores_and_ranking_metrics() -> None:
    assert rank_by_scores([0.1, 0.9, 0.5], [0, 1, 0]) == [1, 0, 0]
    m = ranking_metrics([([0.1, 0.9], [0, 1]), ([0.9, 0.1], [0, 1])], k=10)
    assert m["mrr@10"] == pytest.approx((1 + 0.5) / 2)
    assert m["queries"] == 2


def test_token_f1_known_values() -> None:
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(2 * 1.0 * (2 / 3) / (1 + 2 / 3))
    assert token_f1("dog", "cat") == 0.0


def test_bm25_prefers_matching_document_and_rarer_terms() -> None:
    bm = BM25(["the cat sat on the mat", "dogs chase cats", "a cat and a dog", "birds fly"])
    assert bm.top_k("cat mat", 1)[0][0] == 0
    assert bm.score("birds", 3) > bm.score("cat", 2) > 0
    assert bm.score("zebra", 0) == 0.0


def test_bm25_share_of_the_query_ceiling_and_the_hybrid_score() -> None:
    from searchsmith.models.metrics import fuse_lexical

    bm = BM25(["the cat sat on the mat", "dogs chase cats", "a cat and a dog", "birds fly"])
    n = 4
    # the ceiling is (k1 + 1) x the query terms' idf; a term no document holds weighs the most
    assert bm.ceiling("cat mat") == pytest.approx(1.9 * (bm.idf["cat"] + bm.idf["mat"]))
    assert bm.ceiling("cat zebra") == pytest.approx(1.9 * (bm.idf["cat"] + math.log(1 + (n + 0.5) / 0.5)))
    assert all(bm.share("cat mat", bm.score("cat mat", i)) < 1 for i in range(4))  # no document reaches it
    assert bm.ceiling("the of") == 0.0 and bm.share("the of", 3.0) == 0.0
    assert 0 < bm.share("cat zebra", bm.score("cat zebra", 0)) < bm.share("cat", bm.score("cat", 0)) <= 1.0
    assert bm.share("cat", 100.0) == 1.0  # a score from elsewhere is capped
    # cosine + weight x share; nothing below the cosine floor; weight 0: the cosines
    cos = {"a": 0.5, "b": 0.4, "c": 0.1}
    assert fuse_lexical(cos, {"b": 1.0, "c": 1.0}, 0.2, 0.3) == pytest.approx({"a": 0.5, "b": 0.6, "c": 0.1})
    assert fuse_lexical(cos, {"b": 1.0, "c": 1.0}, 0.2) == pytest.approx({"a": 0.5, "b": 0.6, "c": 0.3})
    assert fuse_lexical(cos, {"b": 1.0}, 0.0) == cos


def test_the_hybrid_baseline_orders_candidates_as_the_pipeline_retrieves() -> None:
    from searchsmith.training.rerank_data import QueryGroup
    from searchsmith.training.reranker import bm25_score_fn, hybrid_score_fn

    docs = ["Beacon 2.4 was released in February.", "Beacon is a metrics agent.", "Bread needs flour."]
    groups = [QueryGroup("q1", "demo", "When was Beacon 2.4 released", docs, [1, 0, 0])]
    cos = {docs[0]: 0.50, docs[1]: 0.55, docs[2]: 0.20}
    cosine = lambda pairs: [cos[d] for _, d in pairs]  # noqa: E731
    pairs = [(groups[0].query, d) for d in docs]
    shares = bm25_score_fn(groups, share=True)(pairs)
    assert all(0 <= x < 1 for x in shares) and shares[0] > shares[1] > 0 and shares[2] == 0
    got = hybrid_score_fn(groups, cosine, weight=0.3, min_cosine=0.3)(pairs)
    assert got == pytest.approx([0.50 + 0.3 * shares[0], 0.55 + 0.3 * shares[1], 0.20])
    assert got[0] > got[1]  # the release note's words lift it above the closer cosine
    assert hybrid_score_fn(groups, cosine, weight=0.0)(pairs) == pytest.approx([0.50, 0.55, 0.20])


# ------------------------------------------------------------------ losses


def test_listwise_loss_known_value() -> None:
    scores = torch.tensor([[2.0, 0.0, 0.0]])
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    expected = -math.log(math.exp(2) / (math.exp(2) + 2))
    assert float(listwise_loss(scores, labels)) == pytest.approx(expected, rel=1e-6)
    # The positive need not be first.
    assert float(listwise_loss(scores.flip(1), labels.flip(1))) == pytest.approx(expected, rel=1e-6)


def test_bce_loss_known_value() -> None:
    scores = torch.tensor([[0.0, 0.0]])
    labels = torch.tensor([[1.0, 0.0]])
    assert float(bce_loss(scores, labels)) == pytest.approx(math.log(2), rel=1e-6)
    assert float(bce_loss(torch.tensor([[10.0, -10.0]]), labels)) < 1e-4


# ------------------------------------------------------------------ data


def test_labels_out_of_range_are_rejected() -> None:
    g = QueryGroup("q1", "x", "query", ["a", "b"], [1, 5])
    with pytest.raises(ValidationError, match=r"labels \[5\] out of range; expected integers in \[0, 3\]"):
        check_group(g, "test")


def test_labels_count_mismatch_is_rejected() -> None:
    g = QueryGroup("q1", "x", "query", ["a", "b"], [1])
    with pytest.raises(ValidationError, match="2 candidates but 1 labels"):
        check_group(g, "test")


def test_missing_data_file_names_field_and_fix(tmp_path: Path) -> None:
    data = RerankerData(sources=["hotpotqa"], hotpotqa=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match=r"data.hotpotqa: data file .*nope.jsonl' not found.*synthetic"):
        load_groups(data)


def test_empty_dataset_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text("\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="no records"):
        load_groups(RerankerData(sources=["musique"], musique=str(p)))


def test_bad_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": "a", "question": "q", "paragraphs": []}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"bad.jsonl:2: not valid JSON"):
        load_groups(RerankerData(sources=["musique"], musique=str(p)))


def test_unknown_source_suggests() -> None:
    with pytest.raises(ConfigError, match=r"unknown dataset 'scifakt'; did you mean 'scifact'"):
        load_groups(RerankerData(sources=["scifakt"]))


def test_synthetic_groups_have_one_positive_each() -> None:
    groups = synthetic_groups(RerankerData(synthetic_queries=40))
    assert len(groups) >= 20
    assert all(sum(g.labels) == 1 and len(g.candidates) >= 2 for g in groups)
    assert synthetic_groups(RerankerData(synthetic_queries=40))[0].query == groups[0].query


def test_nonexistent_base_model_path() -> None:
    cfg = load_recipe_config(TINY, ["model.config=null", "base_model=./no/such/model"])
    with pytest.raises(ConfigError, match=r"base_model: local model path './no/such/model' does not exist"):
        build_model(cfg)


# ------------------------------------------------------------------ tiny twin end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The tiny twin trained 3 steps once for this module."""
    from searchsmith.training.registry import get_recipe

    run = tmp_path_factory.mktemp("tiny_run")
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "optim.max_steps=3"])
    return run, get_recipe("reranker").fn(cfg, run_dir=run)


def test_tiny_recipe_trains_saves_and_reloads(tiny_run: tuple[Path, dict]) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    run, final = tiny_run
    assert 0.0 < final["ndcg@10"] <= 1.0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 3
    assert set(metrics["baselines"]) >= {"bm25", "data"}
    assert metrics["baselines"]["bm25"]["queries"] == final["queries"]
    split = json.loads((run / "split.json").read_text())
    assert split["eval"] and not set(split["eval"]) & set(split["train"])
    info = json.loads((run / "run.json").read_text())
    assert info["task"] == "rerank" and info["recipe"] == "reranker"
    model = AutoModelForSequenceClassification.from_pretrained(run / "model")
    tok = AutoTokenizer.from_pretrained(run / "model")
    assert model.config.num_labels == 1 and model.config.hidden_size == 32
    out = model(**tok(["a question"], ["a passage"], return_tensors="pt")).logits
    assert out.shape == (1, 1)


def test_segment_cosine_head_trains_saves_and_reloads_with_the_same_scores(tmp_path: Path) -> None:
    """model.head=segment_cosine: saved as a plain encoder + reranker_head.json; load_reranker
    rebuilds it with the learnt scale/bias and scores exactly as the trained module did."""
    import torch
    from searchsmith.models.reranker import HEAD_FILE, SegmentCosineReranker, load_reranker
    from searchsmith.training.registry import get_recipe
    from transformers import AutoTokenizer

    run = tmp_path / "seg"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "optim.max_steps=2", "model.head=segment_cosine"])
    final = get_recipe("reranker").fn(cfg, run_dir=run)
    assert 0.0 < final["ndcg@10"] <= 1.0
    head = json.loads((run / "model" / HEAD_FILE).read_text())
    assert head["head"] == "segment_cosine" and head["scale"] != 20.0  # the scale was trained
    model = load_reranker(run / "model")
    assert isinstance(model, SegmentCosineReranker)
    tok = AutoTokenizer.from_pretrained(run / "model")
    enc = tok(["a question", "another one"], ["a passage", "one more passage here"],
              padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (2, 1)
    q_only = tok(["a question"], ["a question"], return_tensors="pt")  # same text both sides
    with torch.no_grad():
        hidden = model.encoder(**q_only).last_hidden_state
    assert hidden.shape[-1] == 32
    with pytest.raises(ValueError, match="token_type_ids"):
        model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    (run / "model" / HEAD_FILE).write_text('{"head": "nope"}')
    with pytest.raises(BundleError, match="^reranker: .*expected one of"):
        load_reranker(run / "model")
    # the citation scorer is loaded by the same code: its errors name it
    with pytest.raises(BundleError, match="^citation scorer: .*expected one of"):
        load_reranker(run / "model", "citation scorer")
    (run / "model" / HEAD_FILE).write_text('{"head": "segment_cosine"}')
    (run / "model" / "model.safetensors").unlink()
    with pytest.raises(BundleError, match="citation scorer"):
        load_reranker(run / "model", "citation scorer")


def test_segment_cosine_with_lora_is_refused() -> None:
    from searchsmith.training.reranker import build_model

    cfg = load_recipe_config(TINY, ["model.head=segment_cosine", "lora.enabled=true"])
    with pytest.raises(ConfigError, match="LoRA is wired for model.head 'cls' only"):
        build_model(cfg)


def test_eval_rerank_on_beir_folder(tiny_run: tuple[Path, dict], tmp_path: Path) -> None:
    from argparse import Namespace

    from searchsmith.training.evaluate import eval_rerank

    data = synthetic_beir(tmp_path / "beir")
    per_item = tmp_path / "items.jsonl"
    out = eval_rerank(Namespace(data=str(data), checkpoint=str(tiny_run[0]), bundle=None, run=None,
                                first_stage="bm25", per_item=str(per_item), limit=5, k=3, json=True))
    assert out["queries"] == 5 and out["first_stage"] == "bm25"
    assert 0.0 <= out["ndcg@10"] <= 1.0 and 0.0 <= out["first_stage/ndcg@10"] <= 1.0
    assert len(per_item.read_text().splitlines()) == 5


def test_eval_rerank_of_a_run_passed_as_bundle_is_a_clear_error(tiny_run: tuple[Path, dict],
                                                                 tmp_path: Path) -> None:
    # bundles are evaluated (tests/training/test_eval_bundles.py); a run given as one is refused
    from argparse import Namespace

    from searchsmith.training.evaluate import eval_rerank

    data = synthetic_beir(tmp_path / "beir")
    with pytest.raises(ConfigError, match="has no manifest.json.*pass it as --checkpoint"):
        eval_rerank(Namespace(data=str(data), checkpoint=None, bundle=str(tiny_run[0]), run=None,
                              first_stage="bm25", per_item=None, limit=0, k=3, json=True))


def test_eval_rerank_missing_qrels(tmp_path: Path) -> None:
    from argparse import Namespace

    from searchsmith.training.evaluate import eval_rerank

    data = synthetic_beir(tmp_path / "beir")
    (data / "qrels" / "test.tsv").unlink()
    with pytest.raises(ConfigError, match=r"qrels/test.tsv is missing"):
        eval_rerank(Namespace(data=str(data), checkpoint="x", bundle=None, run=None,
                              first_stage="bm25", per_item=None, limit=0, k=3, json=True))


@pytest.mark.shared_data
def test_scifact_groups_from_shared_data(shared_data: Path) -> None:
    data = RerankerData(sources=["scifact"],
                        scifact_claims=str(shared_data / "scifact/claims_dev.jsonl"),
                        scifact_corpus=str(shared_data / "scifact/corpus_subset.jsonl"))
    groups = load_groups(data)
    assert len(groups) > 50
    assert all(sum(g.labels) >= 1 and len(g.candidates) >= 10 for g in groups)


def test_mining_keeps_the_negatives_closest_to_the_query() -> None:
    from searchsmith.training.rerank_data import mine_hard_negatives

    vecs = {"q": [1.0, 0.0], "pos": [1.0, 0.0], "near": [0.9, 0.1], "mid": [0.5, 0.5],
            "far": [0.0, 1.0]}

    def embed(texts):
        import numpy as np

        return np.array([vecs[t] for t in texts], dtype=np.float32)

    big = QueryGroup("a", "x", "q", ["far", "pos", "mid", "near"], [0, 1, 0, 0])
    small = QueryGroup("b", "x", "q", ["far", "pos"], [0, 1])
    mine_hard_negatives([big, small], embed, pool_size=2)
    assert big.hard_negatives == ["near", "mid"]
    assert small.hard_negatives == ["far"]


# ------------------------------------------------------------------ cosine-residual head


def _tiny_encoder() -> Any:
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    return AutoModel.from_config(AutoConfig.for_model(
        "bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128))


def test_cosine_residual_head_starts_exactly_at_the_bi_encoder_order() -> None:
    """At step 0 the logit is scale * cos(mean-pooled query alone, mean-pooled passage alone):
    the bi-encoder's similarity, whatever the pair's padding and the passage's offset."""
    from searchsmith.models.hub import resolve_model
    from searchsmith.models.reranker import CosineResidualReranker
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    enc_model = _tiny_encoder().eval()
    model = CosineResidualReranker(enc_model, scale=20.0).eval()
    queries = ["which planet has the great red spot?", "a", "knead dough how long"]
    passages = ["Jupiter's Great Red Spot is a storm.", "Bananas are yellow and sweet fruit.", "x"]
    enc = tok(queries, passages, padding=True, return_tensors="pt")

    def alone(texts: list[str]) -> torch.Tensor:
        e = tok(texts, padding=True, return_tensors="pt")
        h = enc_model(**e).last_hidden_state
        m = e["attention_mask"].unsqueeze(-1).float()
        return (h * m).sum(1) / m.sum(1)

    with torch.no_grad():
        got = model(**enc).logits.view(-1)
        want = 20.0 * torch.nn.functional.cosine_similarity(alone(queries), alone(passages), dim=-1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="token_type_ids are required"):
        model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])


def test_cosine_residual_trains_saves_reloads_and_exports(tmp_path: Path) -> None:
    """model.head=cosine_residual: the residual learns, load_reranker rebuilds the same scores,
    and the ONNX export of the run passes parity (fp32) and scores as torch does."""
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.reranker import HEAD_FILE, CosineResidualReranker, load_reranker
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.registry import get_recipe
    from transformers import AutoTokenizer

    run = tmp_path / "res"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "optim.max_steps=2", "model.head=cosine_residual"])
    final = get_recipe("reranker").fn(cfg, run_dir=run)
    assert 0.0 < final["ndcg@10"] <= 1.0
    head = json.loads((run / "model" / HEAD_FILE).read_text())
    assert head["head"] == "cosine_residual" and any(w != 0.0 for w in head["residual"]["weight"])
    model = load_reranker(run / "model")
    assert isinstance(model, CosineResidualReranker)
    tok = AutoTokenizer.from_pretrained(run / "model")
    q, ps = "which gliding animal eats fish?", ["The otter is a brown diving animal.", "A gliding heron eats fish."]
    with torch.no_grad():
        torch_scores = model(**tok([q] * 2, ps, padding=True, return_tensors="pt")).logits.view(-1).numpy()
    manifest = export_run(run, tmp_path / "bundle", ExportOptions())
    assert manifest["parity"]["passed"]
    bundle = load_bundle(tmp_path / "bundle", device="cpu", backend="onnx")
    assert bundle.score(q, ps) == pytest.approx(torch_scores.tolist(), abs=1e-4)
    head["residual"] = {"bias": 0.0}
    (run / "model" / HEAD_FILE).write_text(json.dumps(head))
    with pytest.raises(BundleError, match="no 'residual' weights"):
        load_reranker(run / "model")


def test_flat_baselines_name_the_orderings_the_serving_gate_compares() -> None:
    from searchsmith.training.reranker import flat_baselines

    nested = {"bi_encoder": {"ndcg@10": 0.81, "mrr@10": 0.7, "queries": 15}, "bm25": {"ndcg@10": 0.6},
              "data": {"eval_queries": 15}}
    assert flat_baselines(nested) == {"bi_encoder_ndcg@10": 0.81, "bi_encoder_mrr@10": 0.7, "bm25_ndcg@10": 0.6}


def test_paraphrased_synthetic_questions_share_no_fact_word_with_the_sheet() -> None:
    import re

    from searchsmith.training.rerank_data import PARAPHRASES

    plain = synthetic_groups(RerankerData(synthetic_queries=40))
    assert [g.query for g in synthetic_groups(RerankerData(synthetic_queries=40, synthetic_paraphrase=0.0))] == \
        [g.query for g in plain]  # the default keeps the old questions
    para = synthetic_groups(RerankerData(synthetic_queries=40, synthetic_paraphrase=1.0))
    assert [g.candidates for g in para] == [g.candidates for g in plain]
    for g in para:
        words = set(re.findall(r"[a-z]+", g.query.lower()))
        assert not words & {w for fact in PARAPHRASES for w in fact.split()}, g.query
    with pytest.raises(ValueError, match="synthetic_paraphrase must be in"):
        RerankerData(synthetic_paraphrase=1.5)
