"""Latency comparisons in eval route / pipeline / ablate / sweep / bandit are fair: an untimed
warm-up first, then every item under each variant in turn, in a rotating order.

Run one after another, the first variant paid every lazy load and first call: the report
compared routed vs forced_direct at 1424.7 vs 192.1 ms with the router choosing direct for every
question (the same work), and the full config vs dedup off at 1519 vs 514 ms. The fakes here
report a latency set by how many calls came before (one shared clock), so the figures are exact.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace
from typing import Any

import pytest

COLD_MS, WARM_MS = 1000.0, 100.0


class Clock:
    """Calls so far, shared by every fake: the first call is slow (a cold start)."""

    def __init__(self, drift_ms: float = 0.0) -> None:
        self.calls, self.drift_ms, self.log = 0, drift_ms, []

    def tick(self, what: Any) -> float:
        self.log.append(what)
        self.calls += 1
        return (COLD_MS if self.calls == 1 else WARM_MS) + self.drift_ms * self.calls


class FakePipeline:
    """``ask`` returns an answer with no passage; its ``total_ms`` comes from the clock."""

    def __init__(self, clock: Clock, name: str = "full") -> None:
        self.clock, self.name, self.gates, self.closed = clock, name, {}, False
        self.index = SimpleNamespace(store=None)
        self.embedder = None
        self.config = None
        self.generation = SimpleNamespace(llm=None)  # no LLM to share (eval sweep's shared_generator)

    def ask(self, query: str, history: Any = None, **kwargs: Any) -> dict[str, Any]:
        ms = self.clock.tick((self.name, query, tuple(sorted(kwargs.items()))))
        return {"answer": query, "answer_text": query, "short_answer": None, "rewrite": query, "references": [],
                "passages": [], "images": [], "timeline": [],
                "trace": {"model_calls": 1, "tokens_in": 1, "tokens_out": 1, "total_ms": ms, "strategy": "direct",
                          "sources": [], "stages": {}, "cost": 0.0}}

    def close(self) -> None:
        self.closed = True


def _qa(tmp_path, n: int, followups: int = 0):
    path = tmp_path / "qa.jsonl"
    rows = [{"id": f"q{i}", "query": f"question {i}", "answer": f"question {i}", "supporting": []} for i in range(n)]
    for r in rows[:followups]:
        r["history"] = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _args(data, **kw) -> argparse.Namespace:
    base = {"data": str(data), "index": "IX", "config": None, "bundle": None, "checkpoint": None, "limit": 0,
            "per_item": None, "plot": None, "resamples": 200, "seed": 0, "k": 2}
    return argparse.Namespace(**{**base, **kw})


def _fake_pipelines(monkeypatch, clock: Clock) -> list[FakePipeline]:
    """Every way the evaluations open a pipeline, answered by fakes on ``clock``."""
    import searchsmith.serving.evaluate as evaluate
    import searchsmith.serving.pipeline.pipeline as pipeline

    opened: list[FakePipeline] = []

    def new(name: str) -> FakePipeline:
        opened.append(FakePipeline(clock, name))
        return opened[-1]

    monkeypatch.setattr(evaluate, "checked_pipeline", lambda cfg, args, items, embedder=None: (new("first"), []))
    # sibling_pipeline is the fixed code's; the old code loaded each variant with load_pipeline
    monkeypatch.setattr(evaluate, "sibling_pipeline", lambda cfg, base, index: new(f"v{len(opened)}"), raising=False)
    monkeypatch.setattr(pipeline, "load_pipeline", lambda cfg, index=None, embedder=None: new(f"v{len(opened)}"))
    return opened


def test_rotation_puts_each_variant_once_in_each_position() -> None:
    from searchsmith.serving.evaluate import rotation

    names = ["a", "b", "c"]
    orders = [rotation(i, names) for i in range(6)]
    assert orders[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]] and orders[3:] == orders[:3]
    for pos in range(3):
        assert sorted(o[pos] for o in orders[:3]) == names
    assert rotation(5, []) == []


def test_warm_up_asks_the_first_item_and_the_first_follow_up() -> None:
    from searchsmith.serving.evaluate import warm_up_items

    single, follow = {"query": "a"}, {"query": "b", "history": [{"role": "user", "content": "x"}]}
    assert warm_up_items([single, {"query": "c"}, follow]) == [single, follow]
    assert warm_up_items([follow, single]) == [follow]
    assert warm_up_items([single]) == [single]


def test_eval_pipeline_variants_time_alike_after_a_cold_start(tmp_path, monkeypatch) -> None:
    """Before: routed (run first) had a p50 of (1000 + 100) / 2 ms, every forced strategy 100 ms."""
    from searchsmith.serving.evaluate import eval_pipeline

    clock = Clock()
    _fake_pipelines(monkeypatch, clock)
    out = eval_pipeline(_args(_qa(tmp_path, 2)))
    p50 = {name: s["latency_ms_p50"] for name, s in out["strategy_ablation"].items()}
    assert set(p50) == {"routed", "forced_direct", "forced_parallel", "forced_planning"}
    assert set(p50.values()) == {WARM_MS}, p50
    assert out["latency_per_stage"]["total"]["p50_ms"] == WARM_MS


def test_eval_pipeline_asks_item_by_item_in_a_rotating_order(tmp_path, monkeypatch) -> None:
    from searchsmith.serving.evaluate import eval_pipeline

    clock = Clock()
    _fake_pipelines(monkeypatch, clock)
    per = tmp_path / "per.jsonl"
    out = eval_pipeline(_args(_qa(tmp_path, 3, followups=1), per_item=str(per)))
    timed = clock.log[6:]  # the warm-up: the 4 variants on question 0, the 2 routing modes on the follow-up
    assert {q for _, q, _ in clock.log[:6]} == {"question 0"} and len(timed) == 6 + 4 + 4
    by_item = [[kw for _, q, kw in timed if q == f"question {i}"] for i in range(3)]
    # each question's variants are asked one after another, each question starting one further on
    assert [q for _, q, _ in timed] == ["question 0"] * 6 + ["question 1"] * 4 + ["question 2"] * 4
    assert by_item[1][0] == by_item[0][1] and by_item[2][0] == by_item[0][2]
    assert set(by_item[0]) == set(by_item[1]) | {(("routing_mode", "serial"),), (("routing_mode", "parallel"),)}
    # the per-item file keeps its order: variant by variant, each in item order
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert [(r["variant"], r["id"]) for r in rows][:4] == [("routed", "q0"), ("routed", "q1"), ("routed", "q2"),
                                                           ("forced_direct", "q0")]
    assert [r["variant"] for r in rows][-2:] == ["routing_serial_followups", "routing_parallel_followups"]
    assert out["routing_followups"]["routing_serial_followups"]["n"] == 1


def test_eval_pipeline_spreads_drift_over_the_variants(tmp_path, monkeypatch) -> None:
    """A machine slowing 10 ms per call: run variant after variant, the last had a p50 120 ms above
    the first; interleaved, every variant sees every position and their means are equal."""
    from searchsmith.serving.evaluate import eval_pipeline

    clock = Clock(drift_ms=10.0)
    _fake_pipelines(monkeypatch, clock)
    per = tmp_path / "per.jsonl"
    out = eval_pipeline(_args(_qa(tmp_path, 4), per_item=str(per)))
    p50 = [s["latency_ms_p50"] for s in out["strategy_ablation"].values()]
    assert max(p50) - min(p50) <= 25.0, p50  # 120 ms run variant after variant
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    means = {v: sum(r["latency_ms"] for r in rows if r["variant"] == v) / 4 for v in {r["variant"] for r in rows}}
    assert max(means.values()) - min(means.values()) == pytest.approx(0.0), means


def test_eval_route_modes_time_alike_after_a_cold_start(tmp_path, monkeypatch) -> None:
    import searchsmith.serving.evaluate as evaluate

    clock = Clock()

    class Router:
        sources = ["a", "b"]

        def route(self, query, history=None, mode="auto", top_k=2):
            ms = clock.tick((mode, query))
            return SimpleNamespace(names=["a", "b"], latency_ms={"route": ms}, routed_text=query)

    monkeypatch.setattr(evaluate, "_router_for_eval", lambda args: (Router(), "fake"))
    data = tmp_path / "routing.jsonl"
    data.write_text("".join(json.dumps({"query": f"q{i}", "sources": ["a"],
                                        **({"history": [{"role": "user", "content": "x"}]} if i == 1 else {})}) + "\n"
                            for i in range(2)))
    per = tmp_path / "per.jsonl"
    out = evaluate.eval_route(_args(data, per_item=str(per)))
    # before: parallel ran first, p50 (1000 + 100) / 2 ms
    assert {m: v["p50_ms"] for m, v in out["latency_ms"].items()} == {m: WARM_MS for m in evaluate.MODES}
    assert [q for _, q in clock.log[:6]] == ["q0"] * 3 + ["q1"] * 3  # warm-up: the first item, the first follow-up
    assert [m for m, _ in clock.log[6:]] == ["parallel", "serial", "auto", "serial", "auto", "parallel"]
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert [(r["mode"], r["i"]) for r in rows] == [(m, i) for m in evaluate.MODES for i in range(2)]
    assert out["modes"]["parallel"]["all"]["recall@1"] == 1.0


def test_eval_ablate_times_the_full_config_like_each_stage_off(tmp_path, monkeypatch) -> None:
    """Before: the full config ran first and alone (p50 (1000 + 100) / 2 ms vs 100 ms off)."""
    from searchsmith.serving.ablation import eval_ablate

    clock = Clock()
    opened = _fake_pipelines(monkeypatch, clock)
    per = tmp_path / "per.jsonl"
    out = eval_ablate(_args(_qa(tmp_path, 2), stages="dedup,keep_ratio,rerank", per_item=str(per)))
    assert out["full"]["latency_ms_p50"] == WARM_MS
    assert {n: st["latency_ms_p50"] for n, st in out["stages"].items() if "latency_ms_p50" in st} == {
        "dedup": {"with": WARM_MS, "without": WARM_MS}, "keep_ratio": {"with": WARM_MS, "without": WARM_MS}}
    # no reranker in the full pipeline: inactive, and never opened nor asked
    assert out["stages"]["rerank"]["verdict"] == "inactive" and len(opened) == 3
    assert all(p.closed for p in opened)
    timed = [q for _, q, _ in clock.log[3:]]
    assert timed == ["question 0"] * 3 + ["question 1"] * 3
    assert clock.log[3][0] != clock.log[6][0]  # the second question starts with another variant
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert [r["variant"] for r in rows] == ["full", "full", "dedup_off", "dedup_off", "keep_ratio_off",
                                            "keep_ratio_off"]


def test_eval_sweep_times_every_value_alike_after_a_cold_start(tmp_path, monkeypatch) -> None:
    from searchsmith.serving.sweep import eval_sweep

    clock = Clock()
    opened = _fake_pipelines(monkeypatch, clock)
    out = eval_sweep(_args(_qa(tmp_path, 2), param="retrieval.keep_ratio", values="0.5,0.7,1.0", corpus=None))
    assert [p["metrics"]["latency_ms"] for p in out["points"]] == [WARM_MS] * 3
    assert len(opened) == 3 and all(p.closed for p in opened)
    assert [q for _, q, _ in clock.log] == ["question 0"] * 6 + ["question 1"] * 3
    assert clock.log[3][0] != clock.log[6][0]


def test_eval_bandit_rotates_the_presets_question_by_question() -> None:
    """The presets were asked in one fixed order, the first paying what the others reuse."""
    from searchsmith.serving.bandit_eval import _measure

    clock = Clock()
    pipe = FakePipeline(clock)
    items = [{"id": f"q{i}", "query": f"question {i}", "answer": "x", "supporting": []} for i in range(3)]
    table, rows = _measure(pipe, items, ("fast", "balanced", "deep"), "f1")
    first = [dict(clock.log[3 + 3 * i][2])["preset"] for i in range(3)]  # after one warm-up answer per preset
    assert first == ["fast", "balanced", "deep"]
    assert [r["preset"] for r in rows] == ["fast", "balanced", "deep"] * 3  # the per-item order kept
    assert table.cost.shape == (3, 3)
