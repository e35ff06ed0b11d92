"""The reranker mixed with the retrieval cosine at a calibrated share (models/rerank_mix.py):
the mix itself, its choice on calibration queries, the recipe settings, the export and the
pipeline's rerank stage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.models.rerank_mix import RetrievalMix, mix_scores, mixed_score_fn, standardise
from searchsmith.training.config import load_recipe_config
from searchsmith.training.rerank_data import QueryGroup
from searchsmith.training.reranker import choose_cross_weight

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "reranker" / "tiny" / "bert-tiny_full.yaml"


def test_standardise_and_the_two_ends_of_the_mix() -> None:
    assert standardise([1.0, 3.0]).tolist() == [-1.0, 1.0]
    assert standardise([2.0, 2.0, 2.0]).tolist() == [0.0, 0.0, 0.0]  # no spread: no say
    assert standardise([]).size == 0
    logits, cos = [5.0, 1.0, 3.0], [0.1, 0.9, 0.5]
    assert np.argsort(-mix_scores(logits, cos, 1.0)).tolist() == [0, 2, 1]  # the reranker alone
    assert np.argsort(-mix_scores(logits, cos, 0.0)).tolist() == [1, 2, 0]  # the retrieval order
    # the scale of the logits does not matter, only their order and spread within the query
    assert mix_scores([50.0, 10.0, 30.0], cos, 0.5) == pytest.approx(mix_scores(logits, cos, 0.5))


@pytest.mark.parametrize(("logits", "cos", "w", "match"), [
    ([1.0, 2.0], [0.5], 0.5, "2 reranker scores for 1 cosines"),
    ([1.0, float("nan")], [0.5, 0.4], 0.5, "not a finite number"),
    ([1.0, 2.0], [0.5, 0.4], 1.5, "cross_weight must be in"),
])
def test_bad_mix_inputs_are_errors(logits, cos, w, match) -> None:
    with pytest.raises(ValidationError, match=match):
        mix_scores(logits, cos, w)


def test_a_manifest_mix_is_read_and_checked() -> None:
    assert RetrievalMix.from_json(None) is None
    mix = RetrievalMix.from_json({"cross_weight": 0.25, "embedder": "default"})
    assert mix == RetrievalMix(0.25) and RetrievalMix.from_json(mix.to_json()) == mix
    assert mix.lexical_weight == 0.0  # a manifest from before the weight was recorded: the cosine alone
    hybrid = RetrievalMix.from_json({"cross_weight": 0.5, "embedder": "default", "lexical_weight": 0.3,
                                     "lexical_min_cosine": 0.3})
    assert hybrid == RetrievalMix(0.5, "default", 0.3, 0.3) and RetrievalMix.from_json(hybrid.to_json()) == hybrid
    for bad in ({"cross_weight": 2}, {"cross_weight": True}, {"weight": 0.5}, {"cross_weight": 0.5, "x": 1},
                {"cross_weight": 0.5, "embedder": ""}, [0.5], {"cross_weight": 0.5, "lexical_weight": -0.1},
                {"cross_weight": 0.5, "lexical_weight": "0.3"}, {"cross_weight": 0.5, "lexical_min_cosine": None},
                {"cross_weight": 0.5, "lexical_weight": float("nan")}):
        with pytest.raises(BundleError, match="retrieval_mix"):
            RetrievalMix.from_json(bad)


def test_the_retrieval_score_of_a_mix_is_the_cosine_plus_its_bm25_share() -> None:
    pairs = [("q", "a"), ("q", "b"), ("q", "c")]
    cos = dict(zip(pairs, [0.5, 0.6, 0.2], strict=True))
    share = dict(zip(pairs, [1.0, 0.0, 1.0], strict=True))
    cosine_fn, share_fn = (lambda ps: [cos[p] for p in ps]), (lambda ps: [share[p] for p in ps])
    assert RetrievalMix(0.5).retrieval_score_fn(cosine_fn, None) is cosine_fn
    fn = RetrievalMix(0.5, lexical_weight=0.3, lexical_min_cosine=0.3).retrieval_score_fn(cosine_fn, share_fn)
    # "c" is below the floor: its words add nothing (models/metrics.py fuse_lexical)
    assert fn(pairs) == pytest.approx([0.8, 0.6, 0.2])
    with pytest.raises(ValidationError, match="BM25 shares"):
        RetrievalMix(0.5, lexical_weight=0.3).retrieval_score_fn(cosine_fn, None)


def test_mixed_score_fn_standardises_within_each_query() -> None:
    pairs = [("q1", "a"), ("q1", "b"), ("q2", "a"), ("q2", "b")]
    logits = {("q1", "a"): 10.0, ("q1", "b"): 0.0, ("q2", "a"): 0.1, ("q2", "b"): 0.2}
    cos = {("q1", "a"): 0.2, ("q1", "b"): 0.3, ("q2", "a"): 0.9, ("q2", "b"): 0.1}
    fn = mixed_score_fn(lambda ps: [logits[p] for p in ps], lambda ps: [cos[p] for p in ps], 0.5)
    out = fn(pairs)
    # q1: +1 (reranker) -1 (cosine) for a -> 0; q2: a -1 +1 -> 0: each query on its own scale
    assert out == pytest.approx([0.0, 0.0, 0.0, 0.0])
    assert mixed_score_fn(lambda ps: [logits[p] for p in ps], None, 1.0)(pairs) == [10.0, 0.0, 0.1, 0.2]


def test_the_calibration_picks_the_best_share_and_ties_go_to_the_retrieval_order() -> None:
    groups = [QueryGroup("1", "s", "q1", ["a", "b", "c"], [0, 0, 1]),
              QueryGroup("2", "s", "q2", ["a", "b", "c"], [1, 0, 0])]
    # the reranker is right on q1, the cosine on q2; with both the mix finds both
    logit = {("q1", "a"): 0.0, ("q1", "b"): 0.1, ("q1", "c"): 3.0, ("q2", "a"): 1.0, ("q2", "b"): 0.9, ("q2", "c"): 1.1}
    cos = {("q1", "a"): 0.5, ("q1", "b"): 0.2, ("q1", "c"): 0.45, ("q2", "a"): 0.9, ("q2", "b"): 0.1, ("q2", "c"): 0.1}
    w, by = choose_cross_weight(lambda ps: [logit[p] for p in ps], lambda ps: [cos[p] for p in ps], groups,
                                [0.0, 0.5, 1.0])
    assert set(by) == {0.0, 0.5, 1.0} and by[0.5] == 1.0 > by[0.0] and by[0.5] > by[1.0]
    assert w == 0.5
    same = {p: 1.0 for p in logit}  # a reranker that says nothing: every share ties, share 0 wins
    w, by = choose_cross_weight(lambda ps: [same[p] for p in ps], lambda ps: [cos[p] for p in ps], groups,
                                [1.0, 0.5, 0.0])
    assert w == 0.0


@pytest.mark.parametrize(("override", "match"), [
    (["data.calibration_ratio=0.2"], "needs the retrieval cosine of data.mine_with"),  # the tiny twin mines with none
    (["data.calibration_ratio=0.6", "data.mine_with=default"], "calibration_ratio must be in"),
    (["model.cross_weights=[]"], "model.cross_weights"),
    (["model.cross_weights=[0.5,2]"], "model.cross_weights"),
    (["model.mix_lexical_weight=-1"], "model.mix_lexical_weight"),
    (["model.mix_lexical_weight=true"], "model.mix_lexical_weight"),
])
def test_bad_mix_settings_are_config_errors(override, match) -> None:
    with pytest.raises((ValueError, Exception), match=match):
        load_recipe_config(TINY, override)


def test_a_calibrated_tiny_run_exports_its_share_and_the_bundle_scores_as_the_run(tmp_path: Path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.registry import get_recipe

    run = tmp_path / "run"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "optim.max_steps=2", "data.mine_with=default",
                                    "data.calibration_ratio=0.25", "model.cross_weights=[0,0.5]"])
    final = get_recipe("reranker").fn(cfg, run_dir=run)
    assert final["cross_weight"] in (0.0, 0.5)
    assert {"calibration/ndcg@10_cross_weight_0", "calibration/ndcg@10_cross_weight_0.5"} <= set(final)
    split = json.loads((run / "split.json").read_text())
    assert split["calibration"] and not set(split["calibration"]) & (set(split["train"]) | set(split["eval"]))
    manifest = export_run(run, tmp_path / "bundle", ExportOptions())
    assert manifest["parity"]["passed"]
    bundle = load_bundle(tmp_path / "bundle", device="cpu", backend="onnx")
    # measured against the retrieval score the pipeline's rerank stage receives by default:
    # cosine + retrieval.lexical_weight x BM25 share
    from searchsmith.serving.pipeline.config import RetrievalConfig

    rc = RetrievalConfig()
    assert (final["mix_lexical_weight"], final["mix_lexical_min_cosine"]) == (rc.lexical_weight, rc.lexical_min_cosine)
    assert bundle.retrieval_mix == RetrievalMix(final["cross_weight"], "default", rc.lexical_weight,
                                                rc.lexical_min_cosine)
    # the export re-scores the held-out split with the same mix: the run's figure comes back
    assert bundle.manifest["heldout_metrics"]["ndcg@10"] == pytest.approx(final["ndcg@10"], abs=1e-6)
    assert bundle.manifest["heldout_metrics"]["cross_weight"] == final["cross_weight"]
    # eval rerank scores the bundle as the pipeline serves it: share 0 is the first-stage order
    from argparse import Namespace

    from beir_folder import synthetic_beir
    from searchsmith.training.evaluate import eval_rerank

    data = synthetic_beir(tmp_path / "beir")
    manifest_path = tmp_path / "bundle" / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["retrieval_mix"].update(cross_weight=0.0, lexical_weight=0.0)  # the cosine alone
    manifest_path.write_text(json.dumps(m))
    out = eval_rerank(Namespace(data=str(data), checkpoint=None, bundle=str(tmp_path / "bundle"), run=None,
                                first_stage="dense", per_item=None, limit=6, k=3, json=True))
    assert out["cross_weight"] == 0.0 and out["mix_lexical_weight"] == 0.0
    assert out["ndcg@10"] == pytest.approx(out["first_stage/ndcg@10"], abs=1e-9)
    # a BM25 share that outweighs every cosine: share 0 is then BM25's order over the folder
    m["retrieval_mix"].update(lexical_weight=1e6, lexical_min_cosine=-1.0)
    manifest_path.write_text(json.dumps(m))
    out = eval_rerank(Namespace(data=str(data), checkpoint=None, bundle=str(tmp_path / "bundle"), run=None,
                                first_stage="bm25", per_item=None, limit=6, k=3, json=True))
    assert out["mix_lexical_weight"] == 1e6
    assert out["ndcg@10"] == pytest.approx(out["first_stage/ndcg@10"], abs=1e-9)


def test_text_bm25_shares_are_over_the_given_documents_and_refuse_a_stranger() -> None:
    from searchsmith.models.metrics import BM25
    from searchsmith.training.reranker import text_bm25_fn

    docs = ["otters eat urchins in kelp forests", "glaciers retreat in summer", "kelp grows fast"]
    shares = text_bm25_fn(docs + docs[:1], share=True)  # a repeated document counts once
    bm = BM25(docs)
    got = shares([("kelp otters", d) for d in docs])
    assert got == pytest.approx([bm.share("kelp otters", bm.score("kelp otters", i)) for i in range(3)])
    assert got[0] > got[2] > got[1] == 0.0 and all(0.0 <= x < 1.0 for x in got)
    with pytest.raises(ValidationError, match="not in the 3 documents"):
        shares([("kelp", "a passage nobody indexed")])
