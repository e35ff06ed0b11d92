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
