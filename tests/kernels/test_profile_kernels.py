"""``searchsmith profile kernels`` end to end at toy sizes (Triton via the interpreter on CPU)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from searchsmith.kernels.dispatch import interpreter_enabled, triton_available
from searchsmith.serving.profiling import kernels as suite
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
    assert {r["impl"] for r in timed if r["op"] == "similarity_topk"} >= {"faiss_cpu"}
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
