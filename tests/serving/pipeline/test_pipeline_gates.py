"""Measured gates: every model bundle is used only when its recorded
held-out figure beats the untrained baseline the pipeline falls back to."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from searchsmith.models.config import from_dict
from searchsmith.serving.pipeline.config import BundlesConfig, PipelineConfig
from searchsmith.serving.pipeline.gates import (
    GATES,
    check_row,
    decide,
    gate_report,
    heldout_figures,
)
from searchsmith.serving.pipeline.pipeline import Pipeline

REPO = Path(__file__).resolve().parents[3]
DEMO_QA = REPO / "models" / "demo" / "qa.jsonl"
DEMO_CORPUS = REPO / "models" / "demo" / "corpus.jsonl"

# Below their baselines: the quick [CLS] reranker of the issue (0.483 vs 0.810), and made-up
# figures of the same kind for the others.
FAILING = {
    "decompose": {"rewrite_retrieval_ndcg@10": 0.225, "baselines/rewrite_retrieval_ndcg@10_heuristic": 0.764,
                  "decompose_node_f1": 0.135, "baselines/decompose_node_f1_question_as_terminal": 0.263},
    "rerank": {"ndcg@10": 0.483, "baselines/bi_encoder_ndcg@10": 0.810, "baselines/bm25_ndcg@10": 0.7},
    "cite": {"attribution/roc_auc": 0.7, "baselines/cosine_attribution_roc_auc": 0.9,
             "attribution/f1": 0.5, "baselines/cosine_attribution_f1": 0.8},
    "images": {"ood/placement_accuracy": 0.4, "baselines/ood_cosine_placement_accuracy": 0.7,
               "ood/vision_placement_net": -0.4, "baselines/ood_no_placement_net": 0.0},
}


class FakeCite:
    """A ``cite`` bundle that cites every passage for every sentence (calls recorded)."""

    task = "cite"
    support_threshold = 0.5

    def __init__(self, figures):
        self.manifest = {"task": "cite", "heldout_metrics": dict(figures)}
        self.calls = 0

    def entities(self, sents):
        self.calls += 1
        return [[] for _ in sents]

    def attribute(self, pairs):
        self.calls += 1
        return np.ones(len(pairs), dtype=np.float32)


class FakeImages:
    """An ``images`` bundle that scores every image as relevant everywhere (calls recorded)."""

    task = "images"

    def __init__(self, figures):
        self.manifest = {"task": "images", "heldout_metrics": dict(figures)}
        self.calls = 0

    def encode_text(self, texts):
        self.calls += 1
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)

    def encode_images(self, images):
        self.calls += 1
        return np.ones((len(images), 2), dtype=np.float32) / np.sqrt(2)


class CountingReranker:
    """A ``rerank`` bundle that reverses the retrieval order (calls recorded)."""

    task = "rerank"

    def __init__(self, figures):
        self.manifest = {"task": "rerank", "heldout_metrics": dict(figures)}
        self.calls = 0

    def score(self, query, passages):
        self.calls += 1
        return np.arange(len(passages), dtype=np.float32)


def _bundles(figures, fakes):
    split = {"type": "split", "nodes": [{"id": "1", "text": "Which planet is the largest?"},
                                        {"id": "2", "text": "How long should bread dough be kneaded?"}]}
    dec = fakes["decomposer"](graph=split, rewrite_to="nonsense rewrite")
    dec.manifest = {"task": "decompose", "heldout_metrics": dict(figures["decompose"])}
    return {"decomposer": dec, "reranker": CountingReranker(figures["rerank"]),
            "citation": FakeCite(figures["cite"]), "images": FakeImages(figures["images"])}


# -- the table ---------------------------------------------------------------------------------
def test_a_model_must_beat_its_baseline_a_tie_is_not_enough():
    row = next(r for r in GATES if r.use == "images")
    beyond = {f"ood/placement_accuracy_vs_cosine_{k}": v for k, v in
              {"diff": 0.01, "lo": 0.005, "hi": 0.02, "p": 0.01, "n": 40, "direction": 1}.items()}
    assert check_row(row, {"ood/placement_accuracy": 0.71, "baselines/ood_cosine_placement_accuracy": 0.7,
                           **beyond})[1] is None
    _, why = check_row(row, {"ood/placement_accuracy": 0.71, "baselines/ood_cosine_placement_accuracy": 0.7})
    assert "records no paired test" in why and "ood/placement_accuracy_vs_cosine_direction" in why
    fig, why = check_row(row, {"ood/placement_accuracy": 0.7, "baselines/ood_cosine_placement_accuracy": 0.7})
    assert "placement accuracy on unseen photos 0.700 only ties with caption-cosine placement (0.700)" in why
    fig, why = check_row(row, {"ood/placement_accuracy": 0.4, "baselines/ood_cosine_placement_accuracy": 0.7})
    assert "0.400 is below caption-cosine placement (0.700)" in why and "bundles.gate_images: false" in why
    assert (fig.value, fig.baseline) == (0.4, 0.7)


def test_the_reranker_must_beat_the_best_recorded_baseline():
    row = next(r for r in GATES if r.use == "rerank")
    figures = {"ndcg@10": 0.85, "baselines/bi_encoder_ndcg@10": 0.81, "baselines/bm25_ndcg@10": 0.9}
    fig, why = check_row(row, figures)
    assert "nDCG@10 0.850 is below BM25 (0.900)" in why
    assert fig.text() == "nDCG@10 0.850 vs BM25 0.900, the bi-encoder order 0.810"
    # BM25 (and its paired test) only count when recorded; the bi-encoder order is required
    assert check_row(row, {"ndcg@10": 0.85, "baselines/bi_encoder_ndcg@10": 0.81,
                           **_paired("ndcg@10_vs_bi_encoder", 0.04, 1)})[1] is None
    _, why = check_row(row, {"ndcg@10": 0.85, "baselines/bm25_ndcg@10": 0.5})
    assert "baselines/bi_encoder_ndcg@10 missing" in why


def test_the_reranker_must_also_beat_the_hybrid_order_when_recorded():
    """The pipeline retrieves by cosine plus a BM25 share: a bundle recording that order's
    figure is judged against it too (bundles from before hybrid search record none)."""
    row = next(r for r in GATES if r.use == "rerank")
    base = {"ndcg@10": 0.85, "baselines/bi_encoder_ndcg@10": 0.81, **_paired("ndcg@10_vs_bi_encoder", 0.04, 1)}
    _, why = check_row(row, {**base, "baselines/hybrid_ndcg@10": 0.87})
    assert "nDCG@10 0.850 is below the hybrid order (0.870)" in why
    _, why = check_row(row, {**base, "baselines/hybrid_ndcg@10": 0.84, **_paired("ndcg@10_vs_hybrid", 0.01, 0)})
    assert why is not None and "the hybrid order" in why
    assert check_row(row, {**base, "baselines/hybrid_ndcg@10": 0.84, **_paired("ndcg@10_vs_hybrid", 0.01, 1)})[1] is None


def _paired(key: str, diff: float, direction: int, n: int = 24) -> dict[str, float]:
    lo, hi = (diff - 0.02, diff + 0.02) if direction else (diff - 0.1, diff + 0.1)
    return {f"{key}_{k}": v for k, v in
            {"diff": diff, "lo": lo, "hi": hi, "p": 0.001 if direction else 0.4, "n": n, "direction": direction}.items()}


def test_the_reranker_must_lead_each_baseline_beyond_the_noise():
    """A lead of 24 held-out queries can be chance: the paired test against each baseline decides."""
    row = next(r for r in GATES if r.use == "rerank")
    points = {"ndcg@10": 0.85, "baselines/bi_encoder_ndcg@10": 0.73, "baselines/bm25_ndcg@10": 0.57}
    # no paired test recorded (a bundle exported before them): not used, and the fix said
    fig, why = check_row(row, points)
    assert "records no paired test of its nDCG@10 against the bi-encoder order" in why and "re-export" in why
    both = {**points, **_paired("ndcg@10_vs_bi_encoder", 0.12, 1), **_paired("ndcg@10_vs_bm25", 0.28, 1)}
    fig, why = check_row(row, both)
    assert why is None
    assert fig.text() == ("nDCG@10 0.850 vs the bi-encoder order 0.730, BM25 0.570 (vs the bi-encoder order: "
                          "paired difference +0.120 [+0.100, +0.140], p 0.00, 24 items; vs BM25: paired "
                          "difference +0.280 [+0.260, +0.300], p 0.00, 24 items)")
    # beyond the noise against the bi-encoder but not against BM25: not used, and which one said
    fig, why = check_row(row, {**both, **_paired("ndcg@10_vs_bm25", 0.28, 0)})
    assert "leads BM25 only inside the noise (paired difference +0.280 [+0.180, +0.380], p 0.40" in why
    assert "the retrieval order is used" in why
    # a test against BM25 missing while BM25 is recorded: not used
    _, why = check_row(row, {k: v for k, v in both.items() if not k.startswith("ndcg@10_vs_bm25")})
    assert "no paired test of its nDCG@10 against BM25" in why
    # left-out datasets: the ood tests are read
    ood = {"ood/ndcg@10": 0.8, "baselines/ood_bi_encoder_ndcg@10": 0.7, "baselines/ood_bm25_ndcg@10": 0.6,
           **_paired("ood/ndcg@10_vs_bi_encoder", 0.1, 1), **_paired("ood/ndcg@10_vs_bm25", 0.2, 0)}
    _, why = check_row(row, {**both, **ood})
    assert "on datasets left out of training leads BM25 only inside the noise" in why
    assert check_row(row, {**both, **ood, **_paired("ood/ndcg@10_vs_bm25", 0.2, 1)})[1] is None


def test_a_bundle_without_figures_is_skipped_and_says_how_to_use_it(fakes):
    decisions = decide({"reranker": fakes["reranker"]("x"), "citation": FakeCite({})}, BundlesConfig())
    assert decisions["rerank"].used  # the conftest fake records passing figures
    assert not decisions["cite"].used
    assert "no held-out figure recorded; set bundles.gate_cite: false to use it" in decisions["cite"].reason
    assert "attribution/roc_auc" in decisions["cite"].reason
    off = decide({"citation": FakeCite({})}, BundlesConfig(gate_cite=False))
    assert off["cite"].used and not off["cite"].gated


def test_figures_are_read_flat_or_nested_from_a_manifest_a_bundle_or_a_folder(tmp_path):
    nested = {"heldout_metrics": {"ndcg@10": 0.9, "baselines": {"bi_encoder_ndcg@10": 0.8, "data": {"n": 3}}}}
    assert heldout_figures(nested) == {"ndcg@10": 0.9, "baselines/bi_encoder_ndcg@10": 0.8,
                                       "baselines/data/n": 3.0, "baselines/data_n": 3.0}
    # an export that keeps the recipe's nested groups: the gate finds the same baseline
    grouped = {"heldout_metrics": {"ndcg@10": 0.9, "baselines/bi_encoder/ndcg@10": 0.8,
                                   **_paired("ndcg@10_vs_bi_encoder", 0.1, 1)}}
    assert heldout_figures(grouped)["baselines/bi_encoder_ndcg@10"] == 0.8
    assert decide({"reranker": grouped}, BundlesConfig())["rerank"].used
    (tmp_path / "manifest.json").write_text(json.dumps(nested))
    assert heldout_figures(tmp_path) == heldout_figures(nested)
    assert heldout_figures(object()) == {} and heldout_figures(tmp_path / "nope") == {}


def test_every_bundle_use_has_a_config_switch_and_a_gate():
    uses = {r.use for r in GATES}
    assert uses == {"rewrite", "decompose", "rerank", "cite", "read", "images", "vision"}
    for r in GATES:
        assert isinstance(getattr(BundlesConfig(), r.setting), bool), r.setting


# -- the pipeline ------------------------------------------------------------------------------
def test_gated_bundles_are_not_called_and_every_trace_says_why(make_pipeline, fakes):
    bundles = _bundles(FAILING, fakes)
    pipe = make_pipeline(bundles=bundles)
    ans = pipe.ask("Which planet is the largest and when was it named?",
                   [{"role": "user", "content": "Tell me about planets."}])
    assert bundles["reranker"].calls == bundles["citation"].calls == bundles["images"].calls == 0
    assert bundles["decomposer"].calls == []
    gates = ans["trace"]["gates"]
    assert {u: g["used"] for u, g in gates.items()} == dict.fromkeys(
        ("rewrite", "decompose", "rerank", "cite", "images", "vision"), False)
    assert "nDCG@10 0.483 is below the bi-encoder order (0.810)" in gates["rerank"]["reason"]
    notes = "\n".join(ans["trace"]["notes"])
    for use in ("rewrite", "decompose", "rerank", "cite", "images", "vision"):
        assert f"{use}: the " in notes
    assert ans["trace"]["stages"]["rerank"]["skipped"]
    lines = gate_report(pipe.gates)
    assert lines[0].startswith("models (held-out figure")
    assert any(line.startswith("reranker") and "0.483 vs the bi-encoder order 0.810" in line
               and "not used: the retrieval order instead" in line for line in lines)


def test_gates_switched_off_use_every_bundle(loaded_index, embedder, fakes):
    bundles = _bundles(FAILING, fakes)
    off = dict.fromkeys(("gate_rewrite", "gate_decompose", "gate_rerank", "gate_cite", "gate_images",
                         "gate_vision"), False)
    pipe = Pipeline(from_dict(PipelineConfig, {"bundles": off}), loaded_index, embedder, bundles)
    ans = pipe.ask("Which planet is the largest?")
    assert bundles["reranker"].calls > 0 and bundles["citation"].calls > 0
    assert all(g["used"] and g["gate"] for g in ans["trace"]["gates"].values())
    assert not any("is below" in n for n in ans["trace"]["notes"])
    assert all("(gate off: bundles.gate_" in line for line in gate_report(pipe.gates)[1:])


def test_passing_bundles_are_used(make_pipeline, fakes):
    bundles = _bundles(fakes["passing"], fakes)
    ans = make_pipeline(bundles=bundles).ask("Which planet is the largest?")
    assert bundles["reranker"].calls > 0 and bundles["citation"].calls > 0
    assert all(g["used"] for g in ans["trace"]["gates"].values())


def test_load_pipeline_does_not_even_load_a_gated_bundle(small_index, embedder, tmp_path, monkeypatch, fakes):
    import searchsmith.models.runtime as runtime
    from searchsmith.serving.pipeline.pipeline import GatedBundle, load_pipeline

    def refuse(path, **kw):
        raise AssertionError(f"loaded {path}")

    monkeypatch.setattr(runtime, "load_bundle", refuse)
    folder = tmp_path / "reranker"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"task": "rerank", "heldout_metrics": FAILING["rerank"]}))
    cfg = from_dict(PipelineConfig, {"bundles": {"reranker": str(folder)}})
    pipe = load_pipeline(cfg, str(small_index), embedder=embedder)
    try:
        assert isinstance(pipe.bundles["reranker"], GatedBundle)
        assert not pipe.gates["rerank"].used
        assert pipe.ask("Which planet is the largest?")["trace"]["gates"]["rerank"]["used"] is False
    finally:
        pipe.close()
    # a passing bundle is loaded (the refusing loader proves it is asked for)
    (folder / "manifest.json").write_text(json.dumps({"task": "rerank", "heldout_metrics": fakes["passing"]["rerank"]}))
    with pytest.raises(AssertionError, match="loaded"):
        load_pipeline(cfg, str(small_index), embedder=embedder)


# -- the demo QA: gated bundles answer exactly as no bundles ------------------------------------
@pytest.fixture(scope="module")
def demo_subset(tmp_path_factory, embedder):
    """The first 8 demo QA items over an index of their supporting documents and every
    twelfth other document of the demo corpus (the whole corpus takes minutes to index)."""
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import IndexConfig, build_index

    qa = [json.loads(x) for x in DEMO_QA.read_text().splitlines() if x.strip()][:8]
    gold = {d for it in qa for d in it["supporting"]}
    records = [r for i, r in enumerate(read_corpus(DEMO_CORPUS)) if r["id"] in gold or i % 12 == 0]
    out = tmp_path_factory.mktemp("demo") / "index"
    build_index(records, out, IndexConfig(), embedder=embedder)
    return out, qa


def test_gated_bundles_give_the_no_bundle_answers_on_the_demo_qa(demo_subset, embedder, fakes):
    from searchsmith.serving.evaluate import pipeline_item_metrics
    from searchsmith.serving.index import Index

    index_dir, qa = demo_subset

    def run(bundles, cfg=None):
        pipe = Pipeline(from_dict(PipelineConfig, cfg or {}), Index.load(index_dir, embedder=embedder),
                        embedder, bundles)
        rows = []
        for it in qa:
            ans = pipe.ask(it["query"], it.get("history"), query_id=it["id"])
            m = pipeline_item_metrics(ans, it)
            m.pop("latency_ms")
            keep = {k: ans[k] for k in ("rewrite", "answer", "references", "sentences", "timeline", "images",
                                        "passages", "nodes")}
            rows.append((keep, m))
        return rows

    plain = run(None)
    assert run(_bundles(FAILING, fakes)) == plain
    # the same bundles with their gates off do change the answers: the comparison can fail
    off = {"bundles": dict.fromkeys(("gate_rewrite", "gate_decompose", "gate_rerank", "gate_cite",
                                     "gate_images", "gate_vision"), False)}
    assert run(_bundles(FAILING, fakes), off) != plain


# -- the real quickstart: its bundles are no worse than none ------------------------------------
QUALITY = ("support_recall", "retrieval_recall", "f1", "contains", "citation_precision", "citation_recall")


@pytest.mark.slow
def test_the_quickstart_config_is_no_worse_than_no_bundles_on_the_demo_qa(tmp_path, capsys):
    """Issue 23, item 1: ``eval pipeline`` on the demo QA with the quickstart's pipeline.yaml is
    at least as good as the index alone on every answer metric (minutes: trains the quick
    recipes, exports, indexes the demo corpus, then answers the 42 questions twice)."""
    from searchsmith.serving.main import main

    work = tmp_path / "work"
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "models (held-out figure vs the untrained baseline it must beat):" in out
    index = str(work / "indexes" / "demo")

    def evaluate(*config: str) -> dict:
        assert main(["eval", "pipeline", "--data", str(DEMO_QA), "--index", index, *config, "--json"]) == 0
        text = capsys.readouterr().out
        return json.loads(text[text.index("{"):])

    with_bundles = evaluate("--config", str(work / "pipeline.yaml"))
    without = evaluate()
    assert with_bundles["n"] == without["n"] == len(DEMO_QA.read_text().splitlines())
    assert with_bundles["gates"] and not without["gates"]
    worse = {k: (with_bundles[k], without[k]) for k in QUALITY if with_bundles[k] < without[k]}
    assert not worse, f"the quickstart's bundles make these worse than none: {worse}"
