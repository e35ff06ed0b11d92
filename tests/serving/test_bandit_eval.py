"""searchsmith eval bandit: the LinUCB replay on synthetic tables, its invariants, and the command end to end."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from searchsmith.models.errors import ConfigError
from searchsmith.serving.bandit_eval import (
    PresetTable,
    cumulative_regret,
    eval_bandit,
    oracle_choices,
    parse_lambdas,
    policy_comparison,
    render_markdown,
    replay,
    stream_order,
)
from searchsmith.serving.main import main
from searchsmith.serving.pipeline.config import ProtocolConfig
from searchsmith.serving.pipeline.protocol import DIM

PRESETS = ("turbo", "small", "large")
TEMPORAL = 5  # protocol.FEATURES index of the "temporal" cue


def _features(n: int, seed: int = 0) -> np.ndarray:
    """(n, 7) router features: bias 1, the temporal cue on for about half, the rest uniform noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n, DIM)) * 0.3
    x[:, 0] = 1.0
    x[:, TEMPORAL] = rng.integers(0, 2, size=n)
    return x


def _two_regions(n: int = 400) -> PresetTable:
    """turbo is best without the temporal cue, large with it, small is middling everywhere."""
    x = _features(n)
    t = x[:, TEMPORAL]
    quality = np.stack([0.9 - 0.8 * t, np.full(n, 0.4), 0.1 + 0.8 * t], axis=1)
    return PresetTable(PRESETS, quality, np.zeros((n, 3)), x)


# -- (1) the replay learns ---------------------------------------------------------------------
def test_linucb_learns_which_preset_suits_which_region() -> None:
    table = _two_regions()
    rewards = table.rewards(0.0)
    oracle_total = rewards.max(axis=1).sum()
    for seed in range(3):
        run = replay(rewards, table.features, PRESETS, ProtocolConfig(), seed)
        regret = cumulative_regret(rewards, run.order, run.rewards)
        # sublinear: the second half of the stream adds far less regret than the first
        half = len(regret) // 2
        assert regret[-1] - regret[half - 1] < 0.25 * regret[half - 1], regret[[half - 1, -1]]
        # and ends below every fixed preset's regret (each of which grows linearly)
        for j, p in enumerate(PRESETS):
            assert regret[-1] < 0.5 * (oracle_total - rewards[:, j].sum()), p
    out = policy_comparison(table, 0.0, ProtocolConfig(), [0, 1, 2], resamples=200)
    assert out["vs_best_fixed"]["verdict"] == "better" and out["best_fixed"] in ("turbo", "large")
    assert out["bandit"]["choices_second_half"]["small"] < 0.1  # it left the middling preset


def test_linucb_converges_to_a_preset_that_dominates_everywhere() -> None:
    n = 300
    x = _features(n, seed=1)
    quality = np.stack([np.full(n, 0.3), np.full(n, 0.8), np.full(n, 0.5)], axis=1)
    cost = np.stack([np.full(n, 0.1), np.full(n, 0.2), np.full(n, 0.9)], axis=1)  # small still wins at λ=0.1
    table = PresetTable(PRESETS, quality, cost, x)
    out = policy_comparison(table, 0.1, ProtocolConfig(), [0, 1], resamples=200)
    assert out["best_fixed"] == "small" and out["oracle"]["choices"]["small"] == 1.0
    assert out["bandit"]["choices_second_half"]["small"] > 0.95
    assert out["bandit"]["regret_vs_oracle"] == pytest.approx(out["bandit"]["regret_vs_best_fixed"])


# -- (2) the oracle bounds every policy --------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), p=st.integers(1, 4), lam=st.floats(0, 3), seed=st.integers(0, 2**16))
def test_the_oracle_is_never_beaten(n: int, p: int, lam: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    presets = tuple(f"p{j}" for j in range(p))
    table = PresetTable(presets, rng.uniform(0, 1, (n, p)), rng.exponential(0.5, (n, p)), _features(n, seed))
    rewards = table.rewards(lam)
    order = stream_order(n, seed)
    # an oracle policy has no regret, at any step
    assert np.all(cumulative_regret(rewards, order, rewards[order, oracle_choices(rewards)[order]]) == 0.0)
    out = policy_comparison(table, lam, ProtocolConfig(), [seed, seed + 1], resamples=100)
    best = out["oracle"]["mean_reward"]
    assert all(best >= f["mean_reward"] for f in out["fixed"].values())
    assert all(best >= r for r in out["bandit"]["mean_reward_per_seed"])
    assert min(out["bandit"]["regret_vs_oracle_per_seed"]) >= -1e-9
    assert all(f["regret_vs_oracle"] >= -1e-9 for f in out["fixed"].values())
    assert out["oracle"]["regret_vs_oracle"] == 0.0


# -- (3) seeds ---------------------------------------------------------------------------------
def test_same_seed_same_result_other_seeds_other_orders(tmp_path) -> None:
    table = _two_regions(60)
    a = policy_comparison(table, 0.1, ProtocolConfig(), [0, 1], resamples=200)
    assert policy_comparison(table, 0.1, ProtocolConfig(), [0, 1], resamples=200) == a
    assert not np.array_equal(stream_order(60, 0), stream_order(60, 1))
    assert sorted(stream_order(60, 3).tolist()) == list(range(60))
    r0, r1 = (replay(table.rewards(0.1), table.features, PRESETS, ProtocolConfig(), s) for s in (0, 1))
    assert not np.array_equal(r0.order, r1.order)
    assert a["bandit"]["mean_reward_per_seed"][0] != a["bandit"]["mean_reward_per_seed"][1]
    # each run starts fresh: a configured state file is neither read nor written
    state = tmp_path / "bandit.json"
    again = replay(table.rewards(0.1), table.features, PRESETS, ProtocolConfig(state_path=str(state)), 0)
    assert np.array_equal(again.choices, r0.choices) and not state.exists()


# -- (5) options -------------------------------------------------------------------------------
def _args(**kw) -> argparse.Namespace:
    base = {"data": "missing.jsonl", "index": "missing-index", "config": None, "lambdas": None, "seeds": 5,
            "quality": "f1", "limit": 0, "plot": None, "per_item": None, "resamples": 2000, "seed": 0,
            "bundle": None, "checkpoint": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("kw,option", [
    ({"lambdas": "0,abc"}, "--lambdas"), ({"lambdas": "-0.5"}, "--lambdas"), ({"lambdas": " , "}, "--lambdas"),
    ({"lambdas": "nan"}, "--lambdas"), ({"seeds": 0}, "--seeds"), ({"quality": "latency_ms"}, "--quality"),
    ({"quality": "model_calls"}, "--quality"), ({"resamples": 10}, "--resamples"),
])
def test_bad_options_are_refused_before_anything_runs(kw, option) -> None:
    with pytest.raises(ConfigError, match=option):
        eval_bandit(_args(**kw))


def test_bad_quality_names_the_allowed_metrics(capsys) -> None:
    assert main(["eval", "bandit", "--data", "x.jsonl", "--index", "y", "--quality", "tokens"]) == 1
    err = capsys.readouterr().err
    assert "--quality" in err and "f1" in err and "contains" in err


def test_lambdas_default_and_parse() -> None:
    assert parse_lambdas(None, 0.1) == [0.0, 0.1, 1.0]
    assert parse_lambdas(None, 1.0) == [0.0, 1.0]  # deduplicated
    assert parse_lambdas("1, 0.5,0.5", 0.1) == [0.5, 1.0]


# -- (4) end to end ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_subset(tmp_path_factory, embedder):
    """An index of part of the demo corpus (the first questions' supporting documents and some
    others) and a QA file of three demo questions and one follow-up."""
    from searchsmith.models.demo import corpus_path, qa_path
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import IndexConfig, build_index

    qa = read_jsonl(qa_path())
    items = qa[:3] + [next(it for it in qa if it.get("history"))]
    wanted = {d for it in items for d in it["supporting"]}
    records = read_corpus(corpus_path())
    subset = [r for r in records if r["id"] in wanted] + [r for r in records if r["id"] not in wanted][:20]
    d = tmp_path_factory.mktemp("bandit")
    build_index(subset, d / "index", IndexConfig(), embedder=embedder)
    data = d / "qa.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return d / "index", data


def test_eval_bandit_end_to_end(demo_subset, tmp_path, capsys, intervals_hold) -> None:
    from searchsmith.serving.profiling.common import plot_info

    index, data = demo_subset
    plot, per_item = tmp_path / "bandit.png", tmp_path / "items.jsonl"
    assert main(["eval", "bandit", "--data", str(data), "--index", str(index), "--limit", "4", "--seeds", "2",
                 "--lambdas", "0,0.5", "--resamples", "200", "--plot", str(plot), "--per-item", str(per_item),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "bandit" and out["n"] == 4 and out["seeds"] == [0, 1] and out["lambdas"] == [0.0, 0.5]
    assert out["presets"] == list(PRESETS) and out["quality"] == "f1"
    assert set(out["per_preset"]) == set(PRESETS)
    assert [b["lambda"] for b in out["by_lambda"]] == [0.0, 0.5]
    for block in out["by_lambda"]:
        assert set(block["fixed"]) == set(PRESETS) and block["best_fixed"] in PRESETS
        assert sum(block["bandit"]["choices"].values()) == pytest.approx(1.0, abs=1e-3)
        assert len(block["curves"]["bandit_mean"]) == 4 and block["oracle"]["regret_vs_oracle"] == 0.0
        assert block["vs_best_fixed"]["verdict"] in ("better", "worse", "within the noise")
        assert all(block["oracle"]["mean_reward"] >= f["mean_reward"] for f in block["fixed"].values())
    assert sum(intervals_hold(block) for block in out["by_lambda"]) + intervals_hold(out) > 20
    rows = [json.loads(line) for line in per_item.read_text().splitlines()]
    assert len(rows) == 4 * 3 and {r["preset"] for r in rows} == set(PRESETS)
    for r in rows:
        assert 0.0 <= r["quality"] <= 1.0 and r["model_calls"] >= 0
        # the pipeline's own cost (default CostConfig: 1 per second of latency)
        assert r["cost"] == pytest.approx(r["latency_ms"] / 1e3, abs=1e-5)
    assert plot.stat().st_size > 1000
    info = plot_info(plot)
    assert "LinUCB λ=0.5" in info["series"] and "turbo λ=0" in info["series"]
    md = render_markdown(out)
    assert sum(line.startswith("**λ = ") for line in md) == 2
    assert sum("(best fixed):" in line for line in md) == 2 and any(line.startswith("| oracle |") for line in md)
