from __future__ import annotations

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.index import Index
from searchsmith.serving.rewrite import HeuristicRewriter, parse_history
from searchsmith.serving.router import CentroidRouter, RouterConfig

HISTORY = [
    {"role": "user", "content": "How do I configure the Lumen cache eviction policy?"},
    {"role": "assistant", "content": "Set lumen.eviction.policy in lumen.yaml."},
]


@pytest.fixture(scope="module")
def router(small_index, embedder):
    return CentroidRouter(Index.load(small_index), embedder, RouterConfig(top_k=3))


def test_single_turn_routes_by_topic(router) -> None:
    assert router.route("how long should I knead bread dough?").names[0] == "cooking"
    assert router.route("how far away is the Andromeda galaxy").names[0] == "astronomy"


def test_serial_uses_history_parallel_does_not(router) -> None:
    q = "Where can I find it?"
    serial = router.route(q, HISTORY, mode="serial")
    parallel = router.route(q, HISTORY, mode="parallel")
    assert "Lumen" in serial.routed_text and serial.routed_text.startswith(q)
    assert parallel.routed_text == q and "Lumen" in parallel.rewrite
    assert serial.names[0] == "code"
    assert router.route(q, HISTORY, mode="auto").mode == "serial"
    assert router.route(q, None, mode="auto").mode == "parallel"
    assert set(serial.latency_ms) >= {"rewrite", "route", "total"}


def test_scores_sorted_and_top_k(router) -> None:
    res = router.route("Saturn rings", top_k=2)
    assert len(res.sources) == 2
    assert res.sources[0][1] >= res.sources[1][1]


def test_scale_and_mixin_change_the_ranking(small_index, embedder) -> None:
    idx = Index.load(small_index)
    base = CentroidRouter(idx, embedder, RouterConfig()).route("a recipe for dinner")
    assert base.names[0] == "cooking"
    scaled = CentroidRouter(idx, embedder, RouterConfig(scale={"cooking": 0.1})).route("a recipe for dinner")
    assert scaled.names[0] != "cooking"
    mixed = CentroidRouter(idx, embedder, RouterConfig(mixin={"code": ["a recipe for dinner"]}, mixin_weight=1.0))
    assert mixed.route("a recipe for dinner").names[0] == "code"


def test_fallback_below_min_score(small_index, embedder) -> None:
    r = CentroidRouter(Index.load(small_index), embedder, RouterConfig(min_score=0.99, fallback_source="code"))
    res = r.route("bread dough")
    assert res.fallback and res.names == ["code"]


def test_bad_inputs(router, small_index, embedder) -> None:
    with pytest.raises(ValidationError, match="empty"):
        router.route("   ")
    with pytest.raises(ValidationError, match="expected a string"):
        router.route(42)  # type: ignore[arg-type]
    long = router.route("bread " * 20_000)
    assert long.warnings and "truncated from 120000 to 4000" in long.warnings[0]
    with pytest.raises(ConfigError, match="router.mixin: unknown source 'cookng'; did you mean 'cooking'"):
        CentroidRouter(Index.load(small_index), embedder, RouterConfig(mixin={"cookng": ["x"]}))
    with pytest.raises(ValidationError, match=r"history\[0\].role"):
        router.route("q", [{"role": "robot", "content": "x"}])
    with pytest.raises(ValidationError, match="expected a list"):
        router.route("q", "not a list")


def test_heuristic_rewriter_keeps_query_without_history() -> None:
    rw = HeuristicRewriter()
    assert rw.rewrite([], "what is it?") == "what is it?"
    out = rw.rewrite(parse_history(HISTORY), "Where can I find the code for it?")
    assert out.startswith("Where can I find the code for it? (") and "Lumen" in out


# -- free-text source labels ------------------------------------------------
def test_labels_in_route_output_and_router_config(labelled_index, embedder, tmp_path) -> None:
    import yaml
    from searchsmith.serving.cli import load_router

    idx = Index.load(labelled_index)
    base = CentroidRouter(idx, embedder, RouterConfig())
    res = base.route("how long should I knead bread dough?")
    assert res.names[0] == "Cooking & Baking" and res.to_dict()["sources"][0]["source"] == "Cooking & Baking"
    # scale / mixin / fallback keys are the labels, from YAML as a user writes them
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump({"scale": {"Cooking & Baking": 0.1},
                                   "mixin": {"Code / Repos": ["a recipe for dinner"]},
                                   "fallback_source": "Astronomie · Espace"}, allow_unicode=True), encoding="utf-8")
    r = load_router(str(labelled_index), str(cfg))
    assert r.route("a recipe for dinner").names[0] == "Code / Repos"
    with pytest.raises(ConfigError, match="router.scale: unknown source 'Cooking and Baking'; did you mean "
                                          "'Cooking & Baking'"):
        CentroidRouter(idx, embedder, RouterConfig(scale={"Cooking and Baking": 2.0}))


def test_eval_route_with_gold_labels(labelled_index, tmp_path, intervals_hold) -> None:
    import argparse
    import json

    from searchsmith.serving.evaluate import eval_route

    data = tmp_path / "routing.jsonl"
    rows = [{"query": "knead the dough", "sources": ["Cooking & Baking"]},
            {"query": "the rings of Saturn", "sources": ["Astronomie · Espace"]},
            {"query": "where is the eviction code?", "sources": ["Code / Repos"]}]
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    per = tmp_path / "per.jsonl"
    args = argparse.Namespace(index=str(labelled_index), data=str(data), config=None, limit=0, k=1, per_item=str(per))
    out = eval_route(args)
    assert out["n"] == 3 and out["modes"]["parallel"]["all"]["recall@1"] == 1.0
    # a bootstrap interval beside each figure of each mode and part; per-item lines keyed by (i, mode)
    assert out["bootstrap"] == {"resamples": 2000, "seed": 0}
    assert out["modes"]["parallel"]["all"]["recall@1_ci95"] == [1.0, 1.0]
    assert all(f"{m}_ci95" in part for mode in out["modes"].values() for part in mode.values()
               for m in ("recall@1", "mrr"))
    assert intervals_hold(out) == 3 * 2 * 2  # modes x parts (all, single) x (recall@1 = recall@k, mrr)
    lines = [json.loads(x) for x in per.read_text().splitlines()]
    assert len({(r["i"], r["mode"]) for r in lines}) == len(lines) == 9
    assert all(isinstance(r["recall@1"], float) and isinstance(r["mrr"], float) for r in lines)
    # each mode's latency until the sources are known, per item and as percentiles
    assert set(out["latency_ms"]) == {"parallel", "serial", "auto"}
    assert all(0 < v["p50_ms"] <= v["p95_ms"] for v in out["latency_ms"].values())
    assert all(r["latency_ms"] > 0 and r["followup"] is False for r in lines)


def test_pipeline_trace_names_labels(labelled_index, embedder) -> None:
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    pipe = load_pipeline(load_pipeline_config(None), str(labelled_index), embedder=embedder)
    try:
        ans = pipe.ask("How far does light travel in a year?")
    finally:
        pipe.close()
    assert "Astronomie · Espace" in ans["trace"]["sources"]
    assert {r["source"] for r in ans["references"]} <= set(read_labels(labelled_index))
    # dedup reads chunk vectors back through the derived file names (else it re-embeds)
    from searchsmith.serving.pipeline.retrieval import VectorLookup

    assert VectorLookup(pipe.index).get([0, 17]).shape == (2, 384)


def read_labels(index_dir) -> list[str]:
    from searchsmith.serving.index import read_manifest

    return list(read_manifest(index_dir)["sources"])
