"""``searchsmith profile kernels`` end to end at toy sizes (Triton via the interpreter on CPU)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from searchsmith.kernels.dispatch import interpreter_enabled, triton_available
from searchsmith.serving.profiling import kernels as suite
from searchsmith.serving.profiling import readme
from searchsmith.serving.profiling.common import ProfileContext

OPS = {"similarity_topk", "route_sources", "dedup_mask", "pool_normalize"}


@pytest.mark.skipif(not triton_available() or not (torch.cuda.is_available() or interpreter_enabled()),
                    reason="needs triton and either CUDA or TRITON_INTERPRET=1")
def test_profile_kernels_runs_end_to_end(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(suite.TINY_ENV, "1")
    ctx = ProfileContext(out_dir=tmp_path, command="test")
    records = suite.run(ctx, argparse.Namespace())

    timed = [r for r in records if "impl" in r]
    assert {r["op"] for r in timed} == OPS
    for op in OPS:
        impls = {r["impl"] for r in timed if r["op"] == op}
        assert {"torch", "triton"} <= impls, (op, impls)
    assert {r["impl"] for r in timed if r["op"] == "similarity_topk"} >= {"faiss_cpu", "candidates"}
    for r in timed:  # recall@k against the torch twin: the approximate rows and Triton, not the exact baselines
        want = r["op"] == "similarity_topk" and r["impl"] in ("candidates", "triton", "torch_mm_topk")
        assert ("recall_at_k" in r) == want, r
        if want:
            assert r["recall_at_k"] == 1.0, r  # toy sizes, default oversample: every exact id found
    for r in timed:
        assert r["plan"] == "tiny" and r["p50_ms"] > 0 and r["ratio_vs_torch"] > 0
        assert r["gbytes_per_s"] > 0 and r["tflops"] > 0
        if r["impl"] == "torch":
            assert r["ratio_vs_torch"] == pytest.approx(1.0)
        if r["device"] == "cpu":  # no H200 fractions for CPU timings
            assert r["bandwidth_fraction_h200"] is None
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    verdicts = {r["op"]: r for r in lines if "verdict" in r}
    assert set(verdicts) == OPS
    assert all(v["workloads"] >= 1 for v in verdicts.values())
    assert verdicts["similarity_topk"]["other_impls"]["candidates"]["min_recall_at_k"] == 1.0
    figures = [row["figure"] for row in readme.headline_rows(lines)]
    assert any(f.startswith("candidates: p50 ") and f.endswith(", recall@k 1.000") for f in figures), figures
    assert (tmp_path / "kernels.png").stat().st_size > 1000


def test_profile_kernels_rejects_unknown_device(tmp_path) -> None:
    from searchsmith.models.errors import ValidationError

    with pytest.raises(ValidationError, match="--device must be auto, cpu or cuda, got 'tpu'"):
        suite.run(ProfileContext(out_dir=tmp_path, device="tpu"), argparse.Namespace())


def test_plans_cover_the_issue_grid() -> None:
    gpu = suite.PLANS["gpu"]
    assert {(n, b, k) for n, b, k, _ in gpu.search} >= {
        (n, b, k) for n in (100_000, 1_000_000, 4_000_000) for b in (1, 16, 256) for k in (10, 100)}
    assert {c for c, *_ in gpu.route} == {1_000, 100_000}
    assert gpu.dim == 384


def test_recall_at_k_counts_shared_ids_per_query() -> None:
    exact = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert suite.recall_at_k(torch.tensor([[3, 2, 1], [4, 9, 8]]), exact) == pytest.approx(4 / 6)
    assert suite.recall_at_k(exact, exact) == 1.0


def test_gpu_verdict_row_shows_the_worst_recall() -> None:
    verdict = {"suite": "kernels", "op": "similarity_topk", "verdict": "triton faster", "plan": "gpu",
               "device": "cuda", "workloads": 21, "triton_wins": 20, "min_ratio_vs_torch": 0.7,
               "max_ratio_vs_torch": 9.0, "median_ratio_vs_torch": 4.1,
               "other_impls": {"candidates": {"workloads_faster": 15, "workloads": 21,
                                              "median_speedup_over_triton": 1.8, "min_recall_at_k": 0.996},
                               "faiss_cpu": {"workloads_faster": 0, "workloads": 21,
                                             "median_speedup_over_triton": 0.01}}}
    row = readme.headline_rows([{"suite": "machine", "gpu": "H200"}, verdict])[0]
    assert ("candidates faster than triton in 15/21 (median 1.80x triton's speed, min recall@k 0.996); "
            "faiss_cpu faster than triton in 0/21 (median 0.01x triton's speed)") in row["baseline"]
