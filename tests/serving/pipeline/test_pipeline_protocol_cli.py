"""The LinUCB protocol router, the ask CLI and eval pipeline."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.serving.pipeline.config import ProtocolConfig
from searchsmith.serving.pipeline.protocol import DIM, LinUCBRouter, sherman_morrison, task_features


def test_task_features():
    x = task_features("When was the company that makes it acquired?", [{"role": "user", "content": "x"}] * 2)
    assert x.shape == (DIM,) == (7,)
    assert x[0] == 1 and x[2] == 0.5 and x[3] == 1 and x[5] == 1 and x[4] > 0
    y = task_features("default of index.ef_construction in quarry 3.0")
    assert y[3] == 0 and y[5] == 0 and y[6] == pytest.approx(2 / 6)


def test_sherman_morrison_matches_a_direct_inverse():
    rng = np.random.default_rng(0)
    router = LinUCBRouter(["turbo", "large"], ProtocolConfig(ridge=2.0))
    xs, rewards = rng.random((12, DIM)), rng.random(12)
    for x, r in zip(xs, rewards):
        router.update("large", x, float(r))
    direct = np.linalg.inv(2.0 * np.eye(DIM) + xs.T @ xs)
    np.testing.assert_allclose(router.a_inv["large"], direct, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(router.b["large"], (rewards[:, None] * xs).sum(0))
    np.testing.assert_allclose(router.a_inv["turbo"], np.eye(DIM) / 2.0)
    a = np.eye(3)
    np.testing.assert_allclose(sherman_morrison(a, np.ones(3)), np.linalg.inv(a + np.ones((3, 3))))


def test_linucb_learns_the_better_arm():
    router = LinUCBRouter(["turbo", "small", "large"], ProtocolConfig(alpha=0.1, cost_lambda=0.0))
    x = task_features("Which planet is the largest?")
    for i in range(30):
        arm = router.choose(x)
        router.remember(str(i), arm, x, cost=0.0)
        out = router.feedback(str(i), 1.0 if arm == "small" else 0.0)
        assert out["preset"] == arm
    assert router.choose(x) == "small"
    assert router.n["small"] > router.n["turbo"]


def test_feedback_reward_is_quality_minus_lambda_cost():
    router = LinUCBRouter(["a"], ProtocolConfig(cost_lambda=0.5))
    x = np.ones(DIM)
    router.remember("q", "a", x, cost=0.4)
    assert router.feedback("q", 0.9)["reward"] == pytest.approx(0.7)
    np.testing.assert_allclose(router.b["a"], 0.7 * x)


def test_feedback_errors():
    router = LinUCBRouter(["a"], ProtocolConfig())
    with pytest.raises(ValidationError, match="'nope' is unknown or already rewarded"):
        router.feedback("nope", 0.5)
    router.remember("q", "a", np.ones(DIM), 0.0)
    with pytest.raises(ValidationError, match=r"quality: expected a number in \[0, 1\], got 2"):
        router.feedback("q", 2)


def test_pending_is_bounded():
    router = LinUCBRouter(["a"], ProtocolConfig(max_pending=2))
    for q in ("q1", "q2", "q3"):
        router.remember(q, "a", np.ones(DIM), 0.0)
    with pytest.raises(ValidationError, match="q1"):
        router.feedback("q1", 0.5)


def test_state_saved_atomically_and_reloaded(tmp_path):
    path = tmp_path / "bandit.json"
    cfg = ProtocolConfig(state_path=str(path))
    router = LinUCBRouter(["turbo", "large"], cfg)
    router.remember("q", "large", np.arange(DIM) / DIM, 0.1)
    router.feedback("q", 1.0)
    assert path.is_file() and [p.name for p in tmp_path.iterdir()] == ["bandit.json"]
    again = LinUCBRouter(["turbo", "large", "new"], cfg)
    np.testing.assert_allclose(again.a_inv["large"], router.a_inv["large"])
    np.testing.assert_allclose(again.b["large"], router.b["large"])
    assert again.n == {"turbo": 0, "large": 1, "new": 0}


def test_concurrent_feedback_saves_every_update(tmp_path):
    """Feedback from many threads at once: each save had the same temporary file name (per
    process), so a rename failed (a 500 on /v1/feedback) and the file could keep an older state."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "bandit.json"
    router = LinUCBRouter(["turbo", "large"], ProtocolConfig(state_path=str(path)))
    for i in range(64):
        router.remember(f"q{i}", ("turbo", "large")[i % 2], np.ones(DIM) / DIM, 0.0)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: router.feedback(f"q{i}", 0.5), range(64)))  # raises on a failed save
    again = LinUCBRouter(["turbo", "large"], ProtocolConfig(state_path=str(path)))
    assert again.n == {"turbo": 32, "large": 32} and [p.name for p in tmp_path.iterdir()] == ["bandit.json"]


def test_corrupt_state_is_a_clear_error(tmp_path):
    path = tmp_path / "bandit.json"
    path.write_text("{not json")
    with pytest.raises(BundleError, match="bandit.json: unreadable .*point protocol.state_path at a new file"):
        LinUCBRouter(["a"], ProtocolConfig(state_path=str(path)))


def test_pipeline_protocol_chooses_and_learns(make_pipeline, tmp_path):
    pipe = make_pipeline(protocol={"enabled": True, "state_path": str(tmp_path / "b.json")})
    ans = pipe.ask("Which planet is the largest?", query_id="q7")
    assert ans["trace"]["preset"] in ("turbo", "small", "large")
    out = pipe.feedback("q7", 0.8)
    assert out["preset"] == ans["trace"]["preset"] and out["cost"] == pytest.approx(ans["trace"]["cost"], abs=1e-6)
    assert (tmp_path / "b.json").is_file()


def test_a_query_id_waiting_for_feedback_is_not_taken_by_another_answer(make_pipeline):
    """A second answer with the same query_id replaced the first one's pending choice, so the
    feedback meant for the first answer rewarded the second's preset and features."""
    pipe = make_pipeline(protocol={"enabled": True, "default_preset": "large"})
    first = pipe.ask("Which planet is the largest?", query_id="q1", preset="turbo")
    with pytest.raises(ValidationError, match="query_id: 'q1' is still waiting for the feedback"):
        pipe.ask("How long should I knead bread dough?", query_id="q1", preset="large")
    assert pipe.feedback("q1", 0.8)["preset"] == first["trace"]["preset"] == "turbo"
    again = pipe.ask("How long should I knead bread dough?", query_id="q1", preset="large")  # rewarded: free
    assert pipe.feedback("q1", 0.5)["preset"] == again["trace"]["preset"] == "large"


def test_a_query_id_of_control_characters_alone_is_refused(make_pipeline):
    """" " was refused and "\u0000" answered and echoed."""
    pipe = make_pipeline()
    for blank in (" ", "\u0000", "\u200b\t"):
        with pytest.raises(ValidationError, match="query_id: expected a non-empty string"):
            pipe.ask("Which planet is the largest?", query_id=blank)


def test_two_answers_given_one_id_at_once_keep_the_first_choice():
    router = LinUCBRouter(["a", "b"], ProtocolConfig())
    assert router.remember("q", "a", np.ones(DIM), 0.0) is True
    assert router.remember("q", "b", np.ones(DIM), 0.0) is False
    assert router.feedback("q", 1.0)["preset"] == "a"


def test_protocol_switched_off(make_pipeline):
    pipe = make_pipeline()
    ans = pipe.ask("Which planet is the largest?", query_id="q")
    assert ans["trace"]["preset"] == "large"
    with pytest.raises(ValidationError, match="protocol router is switched off"):
        pipe.feedback("q", 0.5)


# -- CLI and eval -----------------------------------------------------------------------------
def test_ask_cli_json(small_index, tmp_path, capsys):
    from searchsmith.serving.main import main

    hist = tmp_path / "h.json"
    hist.write_text(json.dumps([{"role": "user", "content": "Tell me about the Lumen cache eviction."}]))
    rc = main(["ask", "Where are the tests for it?", "--index", str(small_index), "--history", str(hist),
               "--json", "timeline.merge_threshold=0.95"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and "Lumen" in out["rewrite"]
    assert out["trace"]["sources"][0] == "code"
    assert "tests/test_evict.py" in out["answer"]
    assert sorted(set(int(n) for n in __import__("re").findall(r"\[(\d+)\]", out["answer"]))) == \
        [r["n"] for r in out["references"]]


def test_ask_cli_text_and_errors(small_index, capsys):
    from searchsmith.serving.main import main

    assert main(["ask", "Which planet is the largest?", "--index", str(small_index)]) == 0
    text = capsys.readouterr().out
    assert "Jupiter" in text and "References:" in text and "[preset large, strategy direct" in text
    assert main(["ask", "q?", "--index", str(small_index), "retrieval.keep_ratoi=1"]) == 1
    assert "did you mean 'keep_ratio'" in capsys.readouterr().err


def test_eval_pipeline(small_index, tmp_path, intervals_hold):
    from searchsmith.models.text import token_f1
    from searchsmith.serving.evaluate import eval_pipeline

    data = tmp_path / "qa.jsonl"
    rows = [{"id": "a", "query": "Which planet is the largest?", "answer": "Jupiter", "supporting": ["astronomy-0"]},
            {"id": "b", "query": "Where are they?", "answer": "tests/test_evict.py", "supporting": ["code-4"],
             "history": [{"role": "user", "content": "Are there unit tests for the Lumen eviction code?"}]}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    per = tmp_path / "per.jsonl"
    args = argparse.Namespace(data=str(data), index=str(small_index), config=None, limit=0, per_item=str(per))
    out = eval_pipeline(args)
    assert out["n"] == 2 and out["followups"] == 1
    assert out["retrieval_recall"] == 1.0 and 0 < out["f1"] <= 1 and out["contains"] == 1.0
    assert 0 < out["citation_precision"] <= 1 and out["citation_recall"] == 1.0
    assert set(out["strategy_ablation"]) == {"routed", "forced_direct", "forced_parallel", "forced_planning"}
    assert set(out["routing_followups"]) == {"routing_serial_followups", "routing_parallel_followups"}
    assert out["latency_per_stage"]["total"]["p95_ms"] >= out["latency_per_stage"]["total"]["p50_ms"] > 0
    lines = per.read_text().splitlines()
    assert len(lines) == 2 * 4 + 2 and json.loads(lines[0])["variant"] == "routed"
    # bootstrap intervals beside every figure, per variant and per stage; per-item lines keyed by (id, variant)
    assert out["bootstrap"] == {"resamples": 2000, "seed": 0}
    figures = ["support_recall", "retrieval_recall", "f1", "contains", "citation_precision", "citation_recall",
               "model_calls", "tokens", "latency_ms_p50"]
    assert all(f"{m}_ci95" in out for m in figures)
    assert all(f"{m}_ci95" in part for part in out["strategy_ablation"].values() for m in figures)
    assert all("p95_ms_ci95" in stage for stage in out["latency_per_stage"].values())
    assert intervals_hold(out) > len(figures) * 7
    rows = [json.loads(x) for x in lines]
    assert len({(r["id"], r["variant"]) for r in rows}) == len(rows)
    assert all(isinstance(r[m], float) for r in rows for m in figures[:-1] + ["latency_ms"])
    # with the protocol router on, every variant asks each question again: no answer takes over
    # another's query_id (they are the pipeline's own, not the items' ids)
    config = tmp_path / "pipeline.yaml"
    config.write_text("protocol:\n  enabled: true\n")
    args = argparse.Namespace(data=str(data), index=str(small_index), config=str(config), limit=0, per_item=None)
    assert eval_pipeline(args)["n"] == 2
    # "the" is an article (dropped): 1 of 3 tokens right, recall 1 -> F1 = 2 * (1/3) / (4/3)
    assert token_f1("The answer is Jupiter [1].", "Jupiter", generated=True) == pytest.approx(0.5)


def test_eval_pipeline_bad_data(small_index, tmp_path):
    from searchsmith.serving.evaluate import eval_pipeline

    data = tmp_path / "qa.jsonl"
    data.write_text('{"query": "q"}\n')
    args = argparse.Namespace(data=str(data), index=str(small_index), config=None, limit=0, per_item=None)
    with pytest.raises(ValidationError, match=r"missing field\(s\) \['answer', 'supporting'\]"):
        eval_pipeline(args)


def test_the_python_api_refuses_bad_arguments_by_name(make_pipeline, embedder):
    """From Python (not the server, whose JSON checks come first) a lone surrogate reached the
    tokenizer (TypeError) and a list preset or query_id a dict lookup (unhashable TypeError);
    probed 2026-12-06."""
    pipe = make_pipeline(protocol={"enabled": True})
    with pytest.raises(ValidationError, match=r"query: holds a lone surrogate \(\\ud800\) at character 9"):
        pipe.ask("When did \ud800 Kestrel ship?")
    with pytest.raises(ValidationError, match=r"history\[0\].content: holds a lone surrogate"):
        pipe.ask("When did it ship?", [{"role": "user", "content": "Kestrel \udcff"}])
    for name in ("preset", "query_id", "strategy", "routing_mode"):
        with pytest.raises(ValidationError, match=f"{name}: expected a non-empty string or None"):
            pipe.ask("Which planet is the largest?", **{name: ["a"]})
    with pytest.raises(ValidationError, match="query_id: expected a non-empty string or None"):
        pipe.ask("Which planet is the largest?", query_id=7)
    with pytest.raises(ValidationError, match="query_id: expected the query_id string of an answer"):
        pipe.feedback(["a"], 0.5)
    with pytest.raises(ValidationError, match=r"embed: text 1: holds a lone surrogate"):
        embedder.encode(["fine", "a \ud800 b"])
    for bad in (None, 5, {"a": 1}, b"bytes"):
        with pytest.raises(ValidationError, match="embed: expected a list of strings"):
            embedder.encode(bad)


def test_what_is_cut_of_a_long_history_is_in_the_trace(make_pipeline):
    pipe = make_pipeline()
    turns = [{"role": "user", "content": f"turn {i} about the Lumen cache"} for i in range(60)]
    turns[-1]["content"] = "long " * 5000  # 25,000 characters
    notes = pipe.ask("Where is its code?", turns)["trace"]["notes"]
    assert "history: its first 10 of 60 turns were left out (the last 50 are read)" in notes
    assert "history: 1 turn(s) cut to their first 20000 characters" in notes
    # an error names the turn's place in what was sent, not in what was kept
    turns[55] = {"role": "user"}
    with pytest.raises(ValidationError, match=r"history\[55\]: expected an object with 'role' and 'content'"):
        pipe.ask("Where is its code?", turns)
