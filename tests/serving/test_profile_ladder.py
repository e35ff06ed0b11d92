"""The embedder's throughput ladder (``searchsmith profile ladder``, a step of ``--suite gpu``)."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest
from searchsmith.serving.main import main
from searchsmith.serving.profiling import ladder
from searchsmith.serving.profiling.common import ProfileContext


def _records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_ladder_runs_tiny_on_cpu(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")
    # every point is run: on a loaded machine a tiny point's predicted time passed the budgets
    # (the budgets' own rule is tested apart), and a skipped point failed this test
    monkeypatch.setattr(ladder, "POINT_BUDGET_S", 1e9)
    monkeypatch.setattr(ladder, "REGIME_BUDGET_S", 1e9)
    out = tmp_path / "p"
    assert main(["profile", "ladder", "--device", "cpu", "--out", str(out)]) == 0
    recs = [r for r in _records(out) if r.get("suite") == "ladder"]
    assert not [r for r in recs if r.get("skipped") or r.get("error")]
    rows = [r for r in recs if "texts_per_s" in r]
    # no packed system on a CPU; the padded path is the default there, so it repeats its figures
    systems = ("searchsmith", "searchsmith-padded", "sentence-transformers")
    got = sorted((r["regime"], r["impl"], r["count"]) for r in rows)
    assert got == sorted((g, s, c) for g in ladder.REGIMES for s in systems for c in ladder.COUNTS_TINY)
    points: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        points.setdefault((r["regime"], r["count"]), []).append(r)
        assert r["texts_per_s"] == pytest.approx(r["count"] / r["seconds"])
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"]) and r["tokens"] >= 3 * r["count"]
        assert 0.0 <= r["padding_fraction"] < 1.0
        assert r["flops_per_s"] == pytest.approx(r["useful_flops"] / r["seconds"]) and r["useful_flops"] > 0
        assert r["matrix_rate_fraction"] is None and r["peak_bf16_dense_flops"] is None and r["device_name"] is None
        assert r["max_seq_length"] == ladder.MAX_SEQ_LENGTH
    for (_, count), rs in points.items():
        # every system embeds the same texts cut at the same length: the same real tokens
        assert len({r["tokens"] for r in rs}) == 1, rs
        by = {r["impl"]: r for r in rs}
        assert by["searchsmith-padded"]["same_as"] == "searchsmith"
        assert by["searchsmith-padded"]["seconds"] == by["searchsmith"]["seconds"]
        assert by["sentence-transformers"]["batch_size"] == 32
        assert by["searchsmith"]["ratio_vs_st_best"] == pytest.approx(
            by["sentence-transformers"]["seconds"] / by["searchsmith"]["seconds"])
        assert count > 1 or by["searchsmith"]["padding_fraction"] == 0.0  # one text pads nothing
    p50 = {g: max(r["tokens_p50"] for r in rows if r["regime"] == g) for g in ladder.REGIMES}
    assert p50["short"] < 30 and 256 <= p50["long"] <= 512 and p50["short"] < p50["mixed"] < p50["long"]
    png = out / "ladder.png"
    assert png.stat().st_size > 1000
    (plot,) = [r for r in recs if r.get("plot") == "ladder.png"]
    assert plot["ylabel"] == "tokens / s (real tokens)" and plot["xlabel"] == "texts per call"
    assert sorted(plot["series"]) == sorted(f"{s}, {g}" for g in ladder.REGIMES
                                            for s in ("searchsmith", "sentence-transformers"))
    assert plot["points"] == 2 * 3 * len(ladder.COUNTS_TINY)


def test_encoder_flops_and_matrix_rate_fraction() -> None:
    cfg = SimpleNamespace(num_hidden_layers=6, hidden_size=384, intermediate_size=1536)  # all-MiniLM-L6-v2
    # per layer: (10 + 20) x (8 x 384^2 + 4 x 384 x 1536) + 4 x 384 x (10^2 + 20^2), six layers
    assert ladder.encoder_flops(cfg, [10, 20]) == 6 * (30 * 3_538_944 + 768_000) == 641_617_920
    assert ladder.encoder_flops(SimpleNamespace(hidden_size=8), [3]) is None  # not a BERT-style config
    assert ladder.H200_BF16_DENSE_FLOPS == 989e12
    assert ladder.peak_matrix_flops("NVIDIA H200") == 989e12
    assert ladder.matrix_rate_fraction(989e12, 2.0, "NVIDIA H200") == pytest.approx(0.5)
    assert ladder.matrix_rate_fraction(641_617_920, 1e-3, "NVIDIA H200") == pytest.approx(641_617_920e3 / 989e12)
    for name in (None, "", "cpu", "NVIDIA GeForce RTX 4090"):
        assert ladder.peak_matrix_flops(name) is None and ladder.matrix_rate_fraction(1e12, 1.0, name) is None
    assert ladder.matrix_rate_fraction(None, 1.0, "NVIDIA H200") is None


def test_matmul_term_is_twice_the_encoder_weights_per_token() -> None:
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48)
    weights = sum(m.weight.numel() for m in BertModel(cfg).encoder.modules() if isinstance(m, torch.nn.Linear))
    # one token attending over itself: 2 x weights for the matmuls plus 4 H per layer for attention
    assert ladder.encoder_flops(cfg, [1]) == 2 * weights + 2 * 4 * 32


class _FakeEmbedder:
    """Seconds per text as given; counts tokens as one per word."""

    def __init__(self, per_text_s: float) -> None:
        self.per_text_s, self.packed, self.last_stats = per_text_s, False, {}
        self.model = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=1, hidden_size=4, intermediate_size=8))

    def tokenize(self, texts):
        return [t.split()[:16] for t in texts]

    def encode(self, texts):
        time.sleep(self.per_text_s * len(texts))
        n = sum(len(ids) for ids in self.tokenize(texts))
        self.last_stats = {"tokens": n, "padded_tokens": n}


def test_points_predicted_over_budget_are_skipped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ladder, "POINT_BUDGET_S", 0.05)
    monkeypatch.setattr(ladder, "regime_texts", lambda regime, n, seed=0: ["a b c"] * n)
    ctx = ProfileContext(out_dir=tmp_path)
    emb = _FakeEmbedder(2e-3)  # 1 text 2 ms, 10 texts 20 ms, 100 texts predicted 0.2 s: skipped
    rows = ladder._ladder(ctx, {"searchsmith": emb.encode}, {"searchsmith": emb}, None, (1, 10, 100, 1000), (),
                          {"device_name": "NVIDIA H200"}, same_as_default=False)
    assert sorted({(r["regime"], r["count"]) for r in rows}) == sorted(
        (g, c) for g in ladder.REGIMES for c in (1, 10))
    skipped = [r for r in ctx.records if r.get("skipped")]
    assert [(r["regime"], r["count"]) for r in skipped] == [(g, c) for g in ladder.REGIMES for c in (100, 1000)]
    # predicted from the last point run (10 texts), scaled by the count
    for r in skipped:
        m = re.fullmatch(r"predicted ([0-9.]+) s per call > 0.05 s \(ladder.POINT_BUDGET_S\)", r["skipped"])
        assert m and float(m.group(1)) >= 0.2 * r["count"] / 100, r["skipped"]
    # a known device: the fraction of its matrix rate is filled in
    r = rows[0]
    assert r["matrix_rate_fraction"] == pytest.approx(r["useful_flops"] / r["seconds"] / 989e12)


def test_the_gpu_suite_runs_the_ladder() -> None:
    import importlib

    from searchsmith.serving.profiling import cli

    assert cli.SUITES["ladder"] == "searchsmith.serving.profiling.ladder"
    assert callable(importlib.import_module(cli.SUITES["ladder"]).run)
    steps = cli.GROUPS["gpu"]
    assert "ladder" in steps and steps[-1] == "kernels"  # kernels stays last (a Triton fault poisons CUDA)
    assert "ladder" not in cli.GROUPS["all"]  # a GPU-sized ladder: not part of the CPU group


def test_a_regime_past_its_budget_runs_no_more_points(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ladder, "REGIME_BUDGET_S", 0.0)
    monkeypatch.setattr(ladder, "regime_texts", lambda regime, n, seed=0: ["a b c"] * n)
    ctx = ProfileContext(out_dir=tmp_path)
    emb = _FakeEmbedder(1e-4)
    rows = ladder._ladder(ctx, {"searchsmith": emb.encode}, {"searchsmith": emb}, None, (1, 10), (),
                          {"device_name": None}, same_as_default=False)
    assert rows == []
    assert [(r["regime"], r["count"], r["skipped"]) for r in ctx.records] == [
        (g, c, f"the {g} regime has used its 0 s (ladder.REGIME_BUDGET_S)") for g in ladder.REGIMES for c in (1, 10)]
