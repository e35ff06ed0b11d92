"""How the profile suites measure: interleaved variants, consistent rows, honest devices.

Each test here failed on the code before ``serving/profiling/timing.py``: the embed summary
timed its configuration again a minute after the curve (160 vs 25 texts/s for the same
batches), train timed the optimizer apart from the steps (a share of 2.3), the server's
"upper bound" was timed singles-then-batch after the servers stopped (a share of 1.77, silent),
rerank exported a reader before finding it had no ``score_pairs``, and ``--device cuda``
without CUDA ran on the CPU or crashed.
"""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import pytest
from searchsmith.serving.main import main
from searchsmith.serving.profiling import timing


@pytest.fixture
def tiny_profile(monkeypatch):
    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")


def _records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


class FakeClock:
    """A ``time`` stand-in whose ``perf_counter`` moves only when a test advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- timing.interleave ------------------------------------------------------------------------
def test_interleave_warms_up_untimed_then_rotates_the_order_each_round(monkeypatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    calls: list[str] = []
    cost = {"a": 1.0, "b": 2.0, "c": 3.0}

    def fn(name):
        def call(x=0):
            calls.append(name)
            clock.advance(cost[name] + x)
            return (name, x)
        return call

    got = timing.interleave({k: fn(k) for k in cost}, 3, warmup=1)
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]  # warm-up, then rotated rounds
    assert got.order == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert got.samples == {"a": [1.0] * 3, "b": [2.0] * 3, "c": [3.0] * 3}  # the warm-up is not timed
    assert got.best() == {"a": 1.0, "b": 2.0, "c": 3.0}
    # with inputs: one argument tuple per round, the warm-up on the first ones; every return kept
    calls.clear()
    got = timing.interleave({"a": fn("a"), "b": fn("b")}, 0, warmup=1, inputs=[(10,), (20,)], keep_returns=True)
    assert got.samples == {"a": [11.0, 21.0], "b": [12.0, 22.0]}
    assert got.returns["b"] == [("b", 10), ("b", 20)] and got.results["a"] == ("a", 20)
    assert got.best_round("a") == 0


def test_resolve_device_refuses_cuda_without_it_and_for_cpu_only_suites(monkeypatch) -> None:
    import torch
    from searchsmith.models.errors import ValidationError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert timing.resolve_device("x", "auto") == "cpu" and timing.resolve_device("x", "cpu") == "cpu"
    with pytest.raises(ValidationError, match=r"profile x: --device cuda but torch sees no CUDA device; use --device cpu"):
        timing.resolve_device("x", "cuda")
    with pytest.raises(ValidationError, match="--device must be auto, cpu or cuda, got 'tpu'"):
        timing.resolve_device("x", "tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert timing.resolve_device("x", "auto") == "cuda" and timing.resolve_device("x", "cuda") == "cuda"
    assert timing.resolve_device("x", "auto", cpu_only="faiss CPU") == "cpu"
    with pytest.raises(ValidationError, match=r"profile x: measures the CPU only \(faiss CPU\); --device cuda is not"):
        timing.resolve_device("x", "cuda", cpu_only="faiss CPU")


# -- --device cuda: refused at once by every suite ---------------------------------------------
def _run_suite(suite: str, tmp_path, device: str, **args) -> None:
    """The suite's own ``run`` (not the CLI, which may check --device on its own first)."""
    import argparse
    import importlib

    from searchsmith.serving.profiling.cli import SUITES
    from searchsmith.serving.profiling.common import ProfileContext

    ctx = ProfileContext(out_dir=tmp_path / "p", quick=True, device=device)
    ns = argparse.Namespace(**{"backend": "torch", "index": None, "run": None, "config": None, **args})
    importlib.import_module(SUITES[suite]).run(ctx, ns)


@pytest.mark.parametrize("suite", ["embed", "ladder", "route", "train", "rerank", "pipeline", "kernels"])
def test_device_cuda_without_cuda_is_refused_before_any_work(suite, tmp_path, tiny_profile, monkeypatch) -> None:
    import torch
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving import embedder

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the device was checked")

    monkeypatch.setattr(embedder.Embedder, "__init__", no_model)
    monkeypatch.setattr("transformers.AutoModel.from_pretrained", no_model)
    with pytest.raises(ValidationError) as err:
        _run_suite(suite, tmp_path, "cuda")
    assert str(err.value) == f"profile {suite}: --device cuda but torch sees no CUDA device; use --device cpu"
    assert not (tmp_path / "p").exists()  # not a line written


@pytest.mark.parametrize("suite", ["server", "shards"])
def test_cpu_only_suites_refuse_device_cuda_even_with_a_gpu(suite, tmp_path, tiny_profile, monkeypatch) -> None:
    import torch
    from searchsmith.models.errors import ValidationError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValidationError, match=rf"profile {suite}: measures the CPU only \(.*\); --device cuda is "
                       "not supported here; use --device cpu"):
        _run_suite(suite, tmp_path, "cuda")


def test_rerank_device_cuda_quick_runs_the_gpu_comparison(tmp_path, tiny_profile, monkeypatch) -> None:
    """--device cuda --quick used to take the CPU path silently (rows saying cpu)."""
    import torch
    from searchsmith.serving.profiling import rerank

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = []
    monkeypatch.setattr(rerank, "_run_gpu", lambda ctx, src, groups, work, name, trained, device:
                        seen.append((device, len(groups))))
    assert main(["profile", "rerank", "--quick", "--device", "cuda", "--out", str(tmp_path / "p")]) == 0
    assert seen == [("cuda", 2)]  # the tiny sizes of --quick, on the GPU path


# -- rerank --run of another task ----------------------------------------------------------------
def test_rerank_refuses_a_reader_run_at_once(tmp_path, tiny_profile, monkeypatch, capsys) -> None:
    from searchsmith.models import export

    run = tmp_path / "reader"
    (run / "model").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "read", "steps": 10, "base_model": "x"}))
    monkeypatch.setattr(export, "heldout_groups", lambda *a: pytest.fail("work started before the task check"))
    monkeypatch.setattr(export, "export_bundle", lambda *a, **k: pytest.fail("exported before the task check"))
    assert main(["profile", "rerank", "--quick", "--run", str(run), "--out", str(tmp_path / "p")]) == 1
    err = capsys.readouterr().err
    assert "profile rerank --run:" in err and "is a 'read' run (run.json task 'read'), not a reranker" in err
    assert "recipes/reranker" in err and "searchsmith profile read --run DIR" in err


# -- embed: the summary quotes the interleaved rows ---------------------------------------------
def test_embed_summary_is_the_figures_of_its_default_rows(tmp_path, tiny_profile, monkeypatch) -> None:
    from searchsmith.serving import embedder
    from sentence_transformers import SentenceTransformer

    order: list[str] = []
    real_encode, real_st = embedder.Embedder.encode, SentenceTransformer.encode

    def encode(self, texts, *a, **k):
        order.append(f"ours-{self.config.max_batch_tokens}")
        return real_encode(self, texts, *a, **k)

    def st_encode(self, texts, *a, **k):
        order.append(f"st-{k.get('batch_size')}")
        return real_st(self, texts, *a, **k)

    monkeypatch.setattr(embedder.Embedder, "encode", encode)
    monkeypatch.setattr(SentenceTransformer, "encode", st_encode)
    out = tmp_path / "p"
    assert main(["profile", "embed", "--quick", "--out", str(out)]) == 0
    recs = [r for r in _records(out) if r.get("suite") == "embed"]
    (summary,) = [r for r in recs if r.get("summary")]
    (ours,) = [r for r in recs if r.get("impl") == "searchsmith" and r.get("default")]
    (st,) = [r for r in recs if r.get("impl") == "sentence-transformers" and r.get("default")]
    assert summary["searchsmith_texts_per_s"] == ours["texts_per_s"]  # one measurement, one figure
    assert summary["st_default_texts_per_s"] == st["texts_per_s"] and st["batch_size"] == 32
    assert summary["searchsmith_tokens_per_s"] == ours["tokens_per_s"]
    curve = [r for r in recs if r.get("impl") in ("searchsmith", "sentence-transformers")]
    assert summary["st_best_texts_per_s"] == max(r["texts_per_s"] for r in curve if r["impl"] == "sentence-transformers")
    assert summary["ratio_vs_st_best"] == pytest.approx(summary["searchsmith_texts_per_s"] / summary["st_best_texts_per_s"])
    # every variant warmed up once, then interleaved (the curve, the defaults and ST in one loop)
    variants = ["ours-2048", "ours-None", "st-16", "st-32"]
    assert order[:8] == variants + variants


# -- route: backends and baseline interleaved query by query -------------------------------------
def test_route_times_backends_and_baseline_query_by_query(tmp_path, tiny_profile, monkeypatch) -> None:
    import searchsmith.kernels as kernels

    calls: list[str] = []
    real = kernels.route_sources

    def spy(*a, backend=None, **k):
        calls.append(backend)
        return real(*a, backend=backend, **k)

    monkeypatch.setattr(kernels, "route_sources", spy)
    out = tmp_path / "p"
    assert main(["profile", "route", "--quick", "--out", str(out)]) == 0
    first = calls[: 2 * 13]  # the first size: torch and triton, 5 warm-up + 8 timed queries each
    assert sorted(set(first)) == ["torch", "triton"]
    # back to back, query after query: never a block of one backend's calls (the old code ran
    # 13 torch calls, then 13 triton calls); rotation may put the same backend twice in a row
    assert max(len(list(run)) for _, run in itertools.groupby(first)) <= 2


# -- train: one step, its parts, its ratios ------------------------------------------------------
def _fake_train_clock(monkeypatch, load):
    """Fake time for the train suite: a backward costs 300 ms and an AdamW step 100 (loop),
    80 (foreach) or 40 (fused) ms, each times ``load(n)`` (n = calls so far: drift)."""
    import torch
    from searchsmith.serving.profiling import common, train

    clock = FakeClock()
    for mod in (timing, train, common):
        monkeypatch.setattr(mod, "time", SimpleNamespace(perf_counter=clock.perf_counter), raising=False)
    n = [0]
    real_backward, real_step = torch.Tensor.backward, torch.optim.AdamW.step

    def backward(self, *a, **k):
        n[0] += 1
        clock.advance(0.300 * load(n[0]))
        return real_backward(self, *a, **k)

    def step(self, *a, **k):
        n[0] += 1
        kernel = "fused" if self.defaults.get("fused") else "foreach" if self.defaults.get("foreach") else "loop"
        clock.advance({"loop": 0.100, "foreach": 0.080, "fused": 0.040}[kernel] * load(n[0]))
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "backward", backward)
    monkeypatch.setattr(torch.optim.AdamW, "step", step)


def _train_rows(tmp_path):
    out = tmp_path / "p"
    assert main(["profile", "train", "--quick", "--out", str(out)]) == 0
    recs = _records(out)
    return {r["kernel"]: r for r in recs if r.get("suite") == "train" and "kernel" in r}, \
        [r for r in recs if r.get("summary")][0]


def test_train_step_speedup_is_what_the_optimizer_saves_at_a_steady_load(tmp_path, tiny_profile, monkeypatch) -> None:
    from searchsmith.serving.profiling.train import check_row

    _fake_train_clock(monkeypatch, lambda n: 1.0)
    rows, summary = _train_rows(tmp_path)
    for name, opt in (("loop", 100), ("foreach", 80), ("fused", 40)):
        r = rows[name]
        assert check_row(r) == []
        assert r["train_step_ms"] == pytest.approx(300 + opt) and r["optimizer_step_ms"] == pytest.approx(opt)
        assert r["speedup_vs_loop"] == pytest.approx(400 / (300 + opt))
        assert r["speedup_vs_loop"] == pytest.approx(r["optimizer_bound_speedup_vs_loop"]) and "noise" not in r
    assert summary["fused_train_step_ms"] == rows["fused"]["train_step_ms"]
    assert summary["loop_optimizer_step_ms"] == pytest.approx(100)


def test_train_share_stays_in_0_1_when_the_load_drifts(tmp_path, tiny_profile, monkeypatch) -> None:
    """The load falls 10x after the 20th call: timing the optimizer alone first and the steps
    later gave shares of 2.5; timed inside the step, a share cannot pass 1, and a step speedup the
    optimizer cannot explain is flagged as noise."""
    from searchsmith.serving.profiling.train import check_row

    _fake_train_clock(monkeypatch, lambda n: 10.0 if n <= 20 else 1.0)
    rows, _ = _train_rows(tmp_path)
    for r in rows.values():
        assert check_row(r) == [] and 0 < r["optimizer_share"] <= 1
        assert r["train_step_ms"] == pytest.approx(r["forward_backward_ms"] + r["optimizer_step_ms"])
        assert r["speedup_vs_loop"] == r["loop_train_step_ms"] / r["train_step_ms"]
        drifted = abs(r["forward_backward_vs_loop"] - 1) > 0.05
        assert ("noise" in r) == drifted


def test_train_check_row_catches_inconsistent_rows() -> None:
    from searchsmith.serving.profiling.train import check_row, step_row

    good = step_row("fused", (400.0, 40.0), (460.0, 100.0))
    assert check_row(good) == []
    assert good["optimizer_bound_speedup_vs_loop"] == pytest.approx(460 / 400) and good["speedup_vs_loop"] == 1.15
    # the audit's row: speedup 1.758 from a step that saves 351 of 4718 ms, a share above 1
    assert any("speedup_vs_loop" in p for p in check_row({**good, "speedup_vs_loop": 1.758}))
    assert any("outside [0, 1]" in p for p in check_row({**good, "optimizer_share": 2.3}))
    assert any("> train_step_ms" in p for p in check_row({**good, "optimizer_step_ms": 500.0, "optimizer_share": 1.25}))


# -- server: the ceiling interleaved, a share above 1 said -------------------------------------
def test_model_ceiling_alternates_singles_and_batches() -> None:
    from searchsmith.serving.profiling.server import model_ceiling

    calls = []
    c = model_ceiling(lambda batch: calls.append(len(batch)), list(range(10)), 4, reps=3)
    # warm-up (4 singles, one batch of 4), then rounds alternating: never all singles first
    kinds = ["b" if n == 4 else "s" for n in calls]
    blocks = "".join(kinds).replace("ssss", "S")
    assert blocks == "Sb" + "SbbS" + "Sb"  # rotated rounds: singles, batch / batch, singles / ...
    assert c["batch"] == 4 and c["rounds"] == 3
    assert c["ceiling_ratio"] == pytest.approx(c["single_ms_per_item"] / c["batched_ms_per_item"])


def test_a_share_of_ceiling_above_1_says_the_bound_did_not_hold() -> None:
    from searchsmith.serving.profiling.server import share_of_ceiling

    over = share_of_ceiling(1.2, {"ceiling_ratio": 0.678, "batch": 12})
    assert over["share_of_ceiling"] == pytest.approx(1.2 / 0.678) and over["ceiling_held"] is False
    assert "the bound did not hold" in over["ceiling_note"] and "0.68x with the model alone at batch 12" in over["ceiling_note"]
    under = share_of_ceiling(2.0, {"ceiling_ratio": 4.0, "batch": 12})
    assert under == {"share_of_ceiling": 0.5, "ceiling_held": True}
