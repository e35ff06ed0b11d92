from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.main import main


@pytest.fixture
def tiny_profile(monkeypatch):
    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")


def _records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_profile_route_end_to_end(tmp_path, tiny_profile, small_index) -> None:
    out = tmp_path / "p"
    assert main(["profile", "route", "--quick", "--out", str(out), "--index", str(small_index)]) == 0
    recs = _records(out)
    assert recs[0]["suite"] == "machine" and recs[0]["cores"] >= 1
    grid = [r for r in recs if "sources" in r]
    assert [r["sources"] for r in grid] == [3, 10, 40]  # 40: the tiny stand-in for 10,000 sources
    for r in grid:
        assert r["searchsmith"]["p50_ms"] > 0 and r["faiss_cpu"]["p99_ms"] >= r["faiss_cpu"]["p50_ms"]
        assert r["ratio_p50"] == pytest.approx(r["faiss_cpu"]["p50_ms"] / r["searchsmith"]["p50_ms"])
        assert r["searchsmith_backend"] == "torch" and r["searchsmith"] == r["torch"]  # auto on the CPU
        # Triton runs here in its interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without a GPU)
        assert r["triton"]["p99_ms"] >= r["triton"]["p50_ms"] > 0
    scale = grid[-1]
    assert scale["scale"] is True and scale["p99_target_ms_h200"] == 1.0 and scale["queries"] == 8
    assert "meets_target" not in scale  # an H200 target: not judged from a CPU run
    assert not any(r.get("scale") for r in grid[:-1])
    assert {r["mode"] for r in recs if r.get("end_to_end")} == {"parallel", "serial"}
    assert (out / "route_latency.png").stat().st_size > 1000


def test_route_scale_workload_is_the_issues() -> None:
    from searchsmith.serving.profiling import route

    assert (route.SCALE_SOURCES, route.CENTROIDS_PER_SOURCE, route.SCALE_P99_TARGET_MS) == (10_000, 16, 1.0)
    assert route.SOURCES == (10, 100, 1000)


def test_profile_embed_end_to_end(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "embed", "--quick", "--out", str(out)]) == 0
    summary = [r for r in _records(out) if r.get("summary")][0]
    assert summary["texts"] == 24 and summary["min_cosine"] > 0.999
    assert summary["ratio_vs_st_default"] == pytest.approx(
        summary["searchsmith_texts_per_s"] / summary["st_default_texts_per_s"], rel=1e-6)
    assert (out / "embed_throughput.png").stat().st_size > 1000
    # tokenize_workers: prefetch on vs off, same texts in 4 windows (CPU: no async copy)
    rows = {r["impl"]: r for r in _records(out) if r.get("impl") in ("searchsmith-prefetch", "searchsmith-inline")}
    assert {k: r["tokenize_workers"] for k, r in rows.items()} == {"searchsmith-prefetch": 2, "searchsmith-inline": 0}
    for r in rows.values():
        assert r["texts"] == 24 and r["windows"] == 4 and r["tokens"] > 24
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"])
    (cmp,) = [r for r in _records(out) if r.get("comparison") == "prefetch_vs_inline"]
    assert cmp["identical"] is True and cmp["async_copy"] is False
    assert cmp["ratio_prefetch_vs_inline"] == pytest.approx(cmp["prefetch_texts_per_s"] / cmp["inline_texts_per_s"])
    assert cmp["prefetch_tokens_per_s"] == pytest.approx(rows["searchsmith-prefetch"]["tokens_per_s"])


def test_readme_table_is_generated_from_the_results_file(tmp_path) -> None:
    from searchsmith.serving.profiling import readme

    # the committed RESULTS.md shows exactly the committed results
    text = readme.RESULTS_DOC.read_text()
    block = text.split(readme.START)[1].split(readme.END)[0].strip()
    assert block == readme.render_table()
    # and regenerating from new records rewrites the block
    results, doc = tmp_path / "perf.jsonl", tmp_path / "README.md"
    doc.write_text(f"# x\n{readme.START}\nold\n{readme.END}\ntail\n")
    recs = [{"suite": "machine", "cpu": "TestCPU", "cores": 2},
            {"suite": "route", "sources": 10, "centroids_per_source": 16, "device": "cpu", "date": "2026-01-01",
             "command": "searchsmith profile route", "searchsmith": {"p50_ms": 0.1, "p99_ms": 0.2},
             "faiss_cpu": {"p50_ms": 0.3, "p99_ms": 0.4}, "ratio_p50": 3.0}]
    readme.append_rows(readme.headline_rows(recs), results)
    assert readme.update_readme(doc, results)
    new = doc.read_text()
    assert "| route 1 query, 10 sources x 16 centroids (cpu) | p50 0.100 ms, p99 0.200 ms |" in new
    assert "3.00x" in new and "TestCPU, 2 cores" in new and new.endswith("tail\n") and "old" not in new


def test_the_readmes_headline_table_is_generated_from_the_committed_log(tmp_path) -> None:
    from searchsmith.serving.profiling import readme

    repo_readme = Path(__file__).resolve().parents[2] / "README.md"
    text = repo_readme.read_text()
    block = text.split(readme.HEADLINE_START)[1].split(readme.HEADLINE_END)[0].strip()
    assert block == readme.headline_table()  # python -m searchsmith.serving.profiling.readme --readme README.md
    assert block.count("\n") >= 4  # a header, a rule and rows
    # the latest row of a workload on a machine replaces the earlier ones
    log, doc = tmp_path / "perf.jsonl", tmp_path / "R.md"
    row = {"what": "route 1 query, 1000 sources x 16 centroids (cpu)", "figure": "p50 1 ms", "baseline": "b",
           "ratio": 2.0, "date": "2026-01-01", "machine": "M", "command": "c"}
    readme.append_rows([row, {**row, "date": "2026-01-02", "ratio": 3.0},
                        {**row, "what": "route 1 query, 10 sources x 16 centroids (cpu)"}], log)
    doc.write_text(f"# x\n{readme.HEADLINE_START}\nold\n{readme.HEADLINE_END}\n")
    assert readme.update_headlines(doc, log)
    new = doc.read_text()
    assert "2026-01-02" in new and "2026-01-01" not in new and "10 sources" not in new and "3.00x" in new
    # a README without the markers is not written
    plain = tmp_path / "plain.md"
    plain.write_text("# mine\n")
    with pytest.raises(ConfigError, match="markers"):
        readme.update_headlines(plain, log)
    assert plain.read_text() == "# mine\n"
    with pytest.raises(ConfigError, match="--readme"):
        readme.record_results([], tmp_path / "rec", plain)
    assert not (tmp_path / "rec" / "performance.jsonl").exists()
    # a log that cannot be read back is refused before anything is appended or made (audit,
    # 2026-12-07: the run's rows were appended to it and RESULTS.md made, then the command failed)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "performance.jsonl").write_text('{"x": 1}\ngarbage not json\n')
    with pytest.raises(ConfigError, match=r"performance.jsonl:2: not valid JSON.*nothing was written"):
        readme.check_record_targets(bad)
    with pytest.raises(ConfigError, match="nothing was written"):
        readme.record_results([row], bad)
    assert (bad / "performance.jsonl").read_text() == '{"x": 1}\ngarbage not json\n'
    assert sorted(q.name for q in bad.iterdir()) == ["performance.jsonl"]


def test_profile_rerank_int8_onnx_against_cross_encoder(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "rerank", "--out", str(out)]) == 0  # tiny sizes, full plan: both dtypes
    recs = _records(out)
    impls = {r["impl"]: r for r in recs if r.get("impl")}
    assert set(impls) == {"sentence-transformers", "onnx-int8", "onnx-fp32"}
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["suite"] == "rerank" and summary["pairs"] == 24 and summary["trained"] is False
    assert "untrained" in summary["note"]
    assert summary["ratio_int8_vs_st"] == pytest.approx(
        summary["onnx_int8_pairs_per_s"] / summary["st_pairs_per_s"], rel=1e-6)
    # fp32 ONNX ranks exactly as torch does
    assert impls["onnx-fp32"]["top10_identical"] == 1.0 and impls["onnx-fp32"]["kendall_tau_min"] == 1.0
    assert -1.0 <= summary["kendall_tau_mean"] <= 1.0 and 0.0 <= summary["top10_overlap"] <= 1.0


def test_profile_rerank_quick_leaves_out_the_fp32_bundle(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "rerank", "--quick", "--out", str(out)]) == 0
    recs = _records(out)
    assert {r["impl"] for r in recs if r.get("impl")} == {"sentence-transformers", "onnx-int8"}
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["onnx_fp32_pairs_per_s"] is None and summary["ratio_int8_vs_st"] > 0


def test_rerank_gpu_comparison_runs_on_cpu(tmp_path, tiny_profile) -> None:
    """The GPU comparison (fp16 bundle on the torch backend vs CrossEncoder fp32 / fp16) is the
    same code on any device; here on the CPU, where the torch backend stays fp32."""
    from searchsmith.models.export import ModelSource, heldout_groups
    from searchsmith.serving.profiling import readme, rerank
    from searchsmith.serving.profiling.common import ProfileContext

    folder = tmp_path / "ce"
    name = rerank._untrained_cross_encoder(folder, tiny=True)
    src = ModelSource("rerank", folder, folder, name, False, 0, 64)
    ctx = ProfileContext(out_dir=tmp_path / "p", quick=False, trace=False, device="cpu", group="gpu",
                         command="test")
    rerank._run_gpu(ctx, src, heldout_groups(2, 12), tmp_path / "w", name, False, "cpu")
    recs = _records(tmp_path / "p")
    assert [r for r in recs if r.get("skipped")][0]["impl"] == "onnx-cuda-fp16"
    rows = {r["impl"]: r for r in recs if r.get("pairs_per_s") and not r.get("summary")}
    assert set(rows) == {"sentence-transformers", "torch-fp16", "torch-fp16-b128"}
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["impl"] == "torch-fp16" and summary["pairs"] == 24
    # the torch backend runs the exported model's own weights: same ranking as CrossEncoder fp32
    assert summary["top10_identical"] == 1.0
    assert summary["ratio_vs_st_fp32"] == pytest.approx(summary["pairs_per_s"] / summary["st_fp32_pairs_per_s"])
    # every row: the same real tokens (both cut each pair at 64), tokens/s over its own seconds
    measured = [r for r in recs if r.get("pairs_per_s")]
    assert len(measured) == 5 and len({r["tokens"] for r in measured}) == 1 and summary["tokens"] > 24 * 3
    for r in measured:
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"])
        assert r["pairs_per_s"] == pytest.approx(24 / r["seconds"]) and 0.0 <= r["padding_fraction"] < 1.0
    assert summary["st_fp16_tokens_per_s"] == pytest.approx(summary["st_fp16_pairs_per_s"] * summary["tokens"] / 24)
    row = readme.headline_rows([{"suite": "machine", "cpu": "X", "cores": 2}, summary])[0]
    assert "torch-fp16" in row["what"] and "CrossEncoder.predict fp16" in row["baseline"]
    assert f"{summary['tokens_per_s']:.0f} tokens/s, padding" in row["figure"]
    assert f"{summary['st_fp16_tokens_per_s']:.0f} tokens/s, padding" in row["baseline"]
    assert (tmp_path / "p" / "rerank_gpu.png").stat().st_size > 1000


def test_profile_embed_onnx_backend(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "embed", "--backend", "onnx", "--quick", "--out", str(out)]) == 0
    summary = [r for r in _records(out) if r.get("summary")][0]
    assert summary["backend"] == "onnx" and summary["texts"] == 24
    assert summary["ratio_int8_vs_st"] == pytest.approx(
        summary["onnx_int8_texts_per_s"] / summary["st_texts_per_s"], rel=1e-6)
    assert summary["min_cosine"] > 0.99  # int8 vs SentenceTransformer.encode fp32
    fp32 = [r for r in _records(out) if r.get("impl") == "onnx-fp32"][0]
    assert fp32["min_cosine"] > 0.9999 and fp32["top10_neighbour_overlap"] == 1.0
    # the same texts cut at the same length: the same real tokens for the bundles and the baseline
    rows = [r for r in _records(out) if r.get("impl")]
    assert len(rows) == 3 and {r["tokens"] for r in rows} == {summary["tokens"]}
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"]) and 0.0 <= r["padding_fraction"] < 1.0
    assert summary["onnx_int8_tokens_per_s"] == pytest.approx(summary["onnx_int8_texts_per_s"] * summary["tokens"] / 24)
    assert 0.0 <= summary["top10_neighbour_overlap"] <= 1.0
    from searchsmith.serving.profiling import readme

    row = readme.headline_rows(_records(out))[0]
    assert "int8 ONNX" in row["what"] and row["ratio"] == round(summary["ratio_int8_vs_st"], 2)
    assert "top-10 neighbour overlap" in row["figure"] and "tokens/s, padding" in row["baseline"]


def test_machine_column_names_the_cpus_int8_instructions() -> None:
    from searchsmith.serving.profiling import readme
    from searchsmith.serving.profiling.common import cpu_int8_isa, machine_info

    assert cpu_int8_isa("fpu avx avx2 fma") == "AVX2"
    assert cpu_int8_isa("avx2 avx512f avx512bw avx512_vnni avx_vnni") == "AVX-512 VNNI"
    assert cpu_int8_isa("avx2 avx_vnni") == "AVX-VNNI"
    assert cpu_int8_isa("fp asimd asimddp") == "NEON"
    assert cpu_int8_isa("fpu sse sse2") is None
    assert "cpu_int8" in machine_info()
    summary = {"suite": "embed", "summary": True, "backend": "onnx", "texts": 8, "device": "cpu",
               "onnx_int8_texts_per_s": 2.0, "min_cosine": 0.995, "st_texts_per_s": 1.0,
               "onnx_fp32_texts_per_s": 1.5, "ratio_int8_vs_st": 2.0}
    row = readme.headline_rows([{"suite": "machine", "cpu": "X", "cores": 2, "cpu_int8": "AVX2"}, summary])[0]
    assert row["machine"] == "X, 2 cores, AVX2"
    row = readme.headline_rows([{"suite": "machine", "cpu": "X", "cores": 2}, summary])[0]
    assert row["machine"] == "X, 2 cores"  # records from before the field


def test_neighbour_overlap_counts_shared_nearest_texts() -> None:
    from searchsmith.serving.profiling.embed import neighbour_overlap

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(60, 8))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert neighbour_overlap(ref, ref.copy()) == 1.0
    assert neighbour_overlap(np.concatenate([ref, ref[:5]]), np.concatenate([ref, ref[:5]])) == 1.0  # repeats
    noisy = ref + rng.normal(scale=0.3, size=ref.shape)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    assert 0.0 < neighbour_overlap(ref, noisy) < 1.0
    shuffled = ref[rng.permutation(60)]  # unrelated embeddings agree about as often as chance
    assert neighbour_overlap(ref, shuffled) < 0.5


def test_profile_server_batching_on_and_off(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "server", "--quick", "--out", str(out)]) == 0
    recs = [r for r in _records(out) if r["suite"] == "server" and "endpoint" in r]  # not the plot's record
    points = [r for r in recs if not r.get("summary")]
    assert {(r["endpoint"], r["batching"], r["concurrency"]) for r in points} == {
        (e, m, c) for e in ("/v1/embeddings", "/v1/rerank") for m in ("on", "off") for c in (1, 8)}
    for r in points:
        assert r["errors"] == 0 and r["requests"] == 8 and r["throughput_rps"] > 0
        assert r["p99_ms"] >= r["p50_ms"] > 0
    # batching off runs one item per batch; on, 8 clients share batches
    assert all(r["mean_batch_size"] == 1.0 for r in points if r["batching"] == "off")
    on8 = [r for r in points if r["batching"] == "on" and r["concurrency"] == 8]
    assert all(r["mean_batch_size"] > 1.0 for r in on8)
    summaries = {r["endpoint"]: r for r in recs if r.get("summary")}
    assert set(summaries) == {"/v1/embeddings", "/v1/rerank"}
    s = summaries["/v1/rerank"]
    assert s["ratio_on_vs_off"] == pytest.approx(s["on_rps"] / s["off_rps"]) and s["concurrency"] == 8
    # beside each ratio: what the model alone gains at the batch size the server formed
    for s in summaries.values():
        c = s["model_ceiling"]
        assert c["batch"] >= 1 and c["single_ms_per_item"] > 0 and c["batched_ms_per_item"] > 0
        assert c["ceiling_ratio"] == pytest.approx(c["single_ms_per_item"] / c["batched_ms_per_item"])
        assert s["share_of_ceiling"] == pytest.approx(s["ratio_on_vs_off"] / c["ceiling_ratio"])
    assert summaries["/v1/embeddings"]["texts"] == "demo questions"
    assert (out / "server_latency.png").stat().st_size > 1000
    from searchsmith.serving.profiling import readme

    rows = [r for r in readme.headline_rows(recs) if r["what"].startswith("server")]
    assert len(rows) == 2 and "batching off" in rows[0]["baseline"] and "model alone at batch" in rows[0]["figure"]


# -- pipeline, --trace, the gpu group and the plots ---------------------------------
PIPELINE_YAML = """\
retrieval: {retrieve_k: 4}
presets:
  turbo: {rewrite: false, decompose: false, rerank: false, timeline: false, images: false, retrieve_k: 3}
  large: {}
"""


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory, small_index):
    """One tiny ``profile --suite gpu`` under the Triton interpreter, with a pipeline config."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SEARCHSMITH_PROFILE_TINY", "1")
    mp.setenv("TRITON_INTERPRET", "1")
    d = tmp_path_factory.mktemp("gpu")
    (d / "pipe.yaml").write_text(PIPELINE_YAML)
    out = d / "out"
    try:
        rc = main(["profile", "--suite", "gpu", "--out", str(out), "--config", str(d / "pipe.yaml"),
                   "--index", str(small_index)])
    finally:
        mp.undo()
    return rc, out


def test_gpu_group_runs_every_step_under_the_interpreter(gpu_run) -> None:
    rc, out = gpu_run
    recs = _records(out)
    assert rc == 0 and not [r for r in recs if r.get("error")]
    assert recs[0]["suite"] == "machine" and recs[0]["group"] == "gpu"
    steps = [r["step"] for r in recs if "step_wall_s" in r]
    # skipped steps (a ladder point skipped for its time budget, as on a loaded machine, is no step)
    skipped = [r for r in recs if r.get("skipped") and "step" in r]
    # embed:onnx needs onnxruntime's CUDA provider, which this CPU machine lacks
    assert steps == ["embed", "ladder", "rerank", "pipeline", "kernels"] and [r["step"] for r in skipped] == ["embed:onnx"]
    assert "CUDAExecutionProvider" in skipped[0]["skipped"]
    assert all("ladder.POINT_BUDGET_S" in r["skipped"] or "ladder.REGIME_BUDGET_S" in r["skipped"]
               or "smaller count" in r["skipped"] for r in recs if r.get("skipped") and r["suite"] == "ladder")
    assert {r["plan"] for r in recs if r["suite"] == "kernels" and r.get("impl")} == {"tiny"}
    assert {r["impl"] for r in recs if r["suite"] == "kernels" and r.get("impl")} >= {"torch", "triton", "candidates"}
    assert {r["recall_at_k"] for r in recs if r["suite"] == "kernels" and r.get("impl") == "candidates"} == {1.0}
    assert [r for r in recs if r.get("summary") and r["suite"] == "embed"][0]["texts"] == 24
    assert [r for r in recs if r.get("summary") and r["suite"] == "rerank"][0]["pairs"] == 24
    # every embed / rerank row reports real tokens, tokens/s over its seconds, and padding
    measured = [r for r in recs if r["suite"] in ("embed", "rerank") and not r.get("summary")
                and ("texts_per_s" in r or "pairs_per_s" in r)]
    assert {r["suite"] for r in measured} == {"embed", "rerank"}
    for r in measured:
        assert r["tokens"] > 24 and r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"])
        assert 0.0 <= r["padding_fraction"] < 1.0


def test_pipeline_stages_per_preset_with_config(gpu_run, small_index) -> None:
    _, out = gpu_run
    recs = [r for r in _records(out) if r["suite"] == "pipeline"]
    rows = {r["preset"]: r for r in recs if r.get("preset")}
    assert list(rows) == ["turbo", "large"]  # the config's presets, turbo (the baseline) first
    for r in rows.values():
        assert r["index"] == str(small_index) and r["config"].endswith("pipe.yaml") and r["asks"] == 2
        assert r["questions"] == 2 and r["follow_ups"] == 1 and r["baseline"] == "turbo"
        e2e = r["end_to_end"]
        assert e2e["p99_ms"] >= e2e["p95_ms"] >= e2e["p50_ms"] > 0 and e2e["n"] == 2
        assert {"routing", "retrieval", "generation", "citation"} <= set(r["stages"])
        assert r["top_level_stages"][-1] == "images" and "retrieval.search" not in r["top_level_stages"]
        # the stages run inside ask: their p50s cannot exceed the end-to-end maximum
        assert sum(r["stages"][s]["p50_ms"] for s in r["top_level_stages"]) <= e2e["p99_ms"] * 2.5
    assert rows["turbo"]["skipped_share"]["images"] == 1.0 and rows["large"]["skipped_share"]["images"] == 0.0
    assert rows["turbo"]["settings"]["retrieve_k"] == 3 and rows["large"]["settings"]["decompose"] is True
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["ratio_p50_vs_turbo"]["turbo"] == 1.0
    assert summary["ratio_p50_vs_turbo"]["large"] == pytest.approx(
        rows["large"]["end_to_end"]["p50_ms"] / rows["turbo"]["end_to_end"]["p50_ms"])


def test_every_plot_opens_and_shows_its_title(gpu_run) -> None:
    from PIL import Image

    _, out = gpu_run
    plots = {r["plot"]: r for r in _records(out) if r.get("plot")}
    assert set(plots) == {p.name for p in out.glob("*.png")} == {
        "kernels.png", "embed_throughput.png", "ladder.png", "pipeline_stages.png"}
    for name, rec in plots.items():
        with Image.open(out / name) as im:
            im.load()
            assert im.format == "PNG" and im.size[0] > 0 and im.size[1] > 0
            assert im.text["Title"] == rec["title"]  # the title recorded is the one drawn
        assert (rec["width"], rec["height"]) == im.size
    pipe = plots["pipeline_stages.png"]
    assert pipe["title"].startswith("Pipeline per-stage latency p50 by preset")
    assert pipe["ylabel"] == "latency p50 (ms)" and pipe["series"][0] == "end to end p50"
    assert {"routing", "retrieval", "generation", "citation"} <= set(pipe["series"])
    assert pipe["bars"] == 2 * (len(pipe["series"]) - 1) and pipe["points"] == 2  # 2 presets stacked
    emb = plots["embed_throughput.png"]
    assert "throughput" in emb["title"] and emb["ylabel"] == "texts / s" and len(emb["series"]) == 2
    ker = plots["kernels.png"]
    assert ker["title"].startswith("kernels vs torch") and "speed-up" in ker["xlabel"] and ker["bars"] > 0


def test_trace_writes_a_chrome_trace_per_block(tmp_path) -> None:
    import torch
    from searchsmith.serving.profiling.common import ProfileContext

    ctx = ProfileContext(out_dir=tmp_path, trace=True)
    for _ in range(2):
        with ctx.profiled("kernels"):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    names = sorted(p.name for p in tmp_path.glob("trace_*.json"))
    assert names == ["trace_kernels-2.json", "trace_kernels.json"]
    events = json.loads((tmp_path / "trace_kernels.json").read_text())["traceEvents"]
    assert any("aten::mm" in e.get("name", "") for e in events)
    assert [r["trace"] for r in ctx.records] == ["trace_kernels.json", "trace_kernels-2.json"]
    off = ProfileContext(out_dir=tmp_path / "off")
    with off.profiled("kernels"):
        pass
    assert not (tmp_path / "off").exists() and off.records == []


def test_profile_pipeline_rejects_a_missing_config(tmp_path, tiny_profile, capsys) -> None:
    assert main(["profile", "pipeline", "--out", str(tmp_path / "p"), "--config", str(tmp_path / "nope.yaml")]) == 1
    err = capsys.readouterr().err
    assert "profile pipeline --config:" in err and "nope.yaml" in err and "is not a file" in err


def test_profile_pipeline_rejects_an_unknown_device(tmp_path, tiny_profile, capsys) -> None:
    assert main(["profile", "pipeline", "--out", str(tmp_path / "p"), "--device", "tpu"]) == 1
    assert "--device must be auto, cpu or cuda, got 'tpu'" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()  # refused before anything ran (embed ran on the CPU instead)
    assert main(["profile", "embed", "--quick", "--out", str(tmp_path / "e"), "--device", "tpu"]) == 1


def test_gpu_group_records_a_failing_step_and_goes_on(tmp_path, monkeypatch, capsys) -> None:
    import sys
    import types

    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.profiling import cli

    def fails(ctx, args):
        raise ValidationError("profile: it failed")

    monkeypatch.setitem(cli.GROUPS, "gpu", ["pipeline", "kernels"])
    monkeypatch.setitem(sys.modules, "failing_suite", types.SimpleNamespace(run=fails))
    monkeypatch.setitem(cli.SUITES, "pipeline", "failing_suite")
    monkeypatch.setitem(cli.SUITES, "kernels", "failing_suite")
    # pipeline fails; kernels (the next step) fails too, but runs
    assert main(["profile", "--suite", "gpu", "--out", str(tmp_path / "p")]) == 1
    errors = [(r["step"], r["error"]) for r in _records(tmp_path / "p") if r.get("error")]
    assert [s for s, _ in errors] == ["pipeline", "kernels"] and "it failed" in errors[0][1]
    assert "step(s) ['pipeline', 'kernels'] failed" in capsys.readouterr().err


def test_record_writes_only_into_the_folder_it_is_given(tmp_path, tiny_profile) -> None:
    from searchsmith.serving.profiling import readme

    committed = (readme.RESULTS.read_bytes(), readme.RESULTS_DOC.read_bytes())
    log = tmp_path / "log"
    assert main(["profile", "embed", "--quick", "--out", str(tmp_path / "p"), "--record", str(log)]) == 0
    rows = (log / "performance.jsonl").read_text().splitlines()
    assert rows and all(json.loads(r)["what"].startswith("embed") for r in rows)
    doc = (log / "RESULTS.md").read_text()
    assert readme.render_table(log / "performance.jsonl") in doc
    assert (readme.RESULTS.read_bytes(), readme.RESULTS_DOC.read_bytes()) == committed  # the package untouched
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "RESULTS.md").write_text("my notes\n")
    assert main(["profile", "embed", "--quick", "--out", str(tmp_path / "p2"), "--record", str(mine)]) == 1
    assert (mine / "RESULTS.md").read_text() == "my notes\n" and not (mine / "performance.jsonl").exists()


def test_profile_read_compares_torch_onnx_and_int8(tmp_path, capsys) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from export_fixtures import read_run

    out = tmp_path / "p"
    assert main(["profile", "read", "--quick", "--run", str(read_run()), "--out", str(out)]) == 0
    recs = _records(out)
    rows = {r["backend"]: r for r in recs if r.get("suite") == "read" and "backend" in r}
    assert set(rows) == {"torch-fp32", "onnx-fp32", "onnx-int8"}
    assert rows["onnx-fp32"]["answer_agreement_vs_torch_fp32"] == 1.0  # fp32 ONNX answers as torch
    assert rows["torch-fp32"]["speedup_vs_torch_fp32"] == 1.0
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["questions"] == 12 and summary["onnx-int8_speedup"] == rows["onnx-int8"]["speedup_vs_torch_fp32"]
    assert main(["profile", "read", "--quick", "--out", str(tmp_path / "q")]) != 0
    assert "give --run RUN_DIR, a trained reader" in capsys.readouterr().err


def test_profile_shards_measures_every_kind_against_exact_search(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "shards", "--out", str(out)]) == 0
    rows = [r for r in _records(out) if r.get("suite") == "shards" and "vectors" in r]
    assert [r["vectors"] for r in rows] == [2000, 8000]
    for r in rows:
        kinds = r["kinds"]
        assert set(kinds) == {"flat", "flat_2_shards", "ivf", "ivf_mmap"}
        assert kinds["flat"]["recall_at_10"] == 1.0 and kinds["flat_2_shards"]["recall_at_10"] == 1.0
        assert kinds["ivf_mmap"]["recall_at_10"] == kinds["ivf"]["recall_at_10"] > 0.3
        assert kinds["flat"]["bytes_per_vector"] >= 4 * 384  # float32 codes, plus the id map
        assert r["speedup_p50_vs_flat"]["flat"] == pytest.approx(1.0)
    assert (out / "shards_latency.png").stat().st_size > 1000


def test_profile_ray_compares_one_process_with_serve_replicas(tmp_path, tiny_profile, small_index) -> None:
    pytest.importorskip("ray.serve", reason="needs Ray Serve (pip install -e '.[ray]')")
    out = tmp_path / "p"
    assert main(["profile", "ray", "--index", str(small_index), "--out", str(out)]) == 0
    rows = [r for r in _records(out) if r.get("suite") == "ray" and "requests_per_s" in r]
    assert [(r["setup"], r["replicas"]) for r in rows] == [
        ("one process (uvicorn)", 1), ("Ray Serve, 1 replica(s)", 1), ("Ray Serve, 2 replica(s)", 2)]
    assert all(r["errors"] == 0 and r["requests_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] for r in rows)
    summary = [r for r in _records(out) if r.get("summary") and r.get("suite") == "ray"]
    assert [s["ratio_vs_one_process"] for s in summary] == pytest.approx(
        [r["requests_per_s"] / rows[0]["requests_per_s"] for r in rows[1:]])


def test_profile_ray_needs_an_index(tmp_path, tiny_profile, capsys) -> None:
    assert main(["profile", "ray", "--out", str(tmp_path / "p")]) != 0
    assert "needs --index" in capsys.readouterr().err


def test_profile_train_times_each_adamw_kernel_and_they_agree(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "train", "--quick", "--out", str(out)]) == 0
    recs = _records(out)
    rows = {r["kernel"]: r for r in recs if r.get("suite") == "train" and "kernel" in r}
    assert set(rows) == {"loop", "foreach", "fused"}
    assert rows["loop"]["speedup_vs_loop"] == 1.0 and rows["loop"]["max_abs_weight_diff_vs_loop"] == 0.0
    from searchsmith.serving.profiling.train import check_row

    for row in rows.values():  # the same update rule: the weights agree to float rounding
        assert row["max_abs_weight_diff_vs_loop"] < 1e-5
        # the optimizer is timed inside the step it belongs to: a share in [0, 1] whatever the
        # load (timed apart, one round on a shared 2-core machine gave shares of 2.3 and 3.8)
        assert check_row(row) == [] and 0 < row["optimizer_share"] <= 1
        assert row["speedup_vs_loop"] == row["loop_train_step_ms"] / row["train_step_ms"]
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["parameters"] > 20_000_000 and summary["batch"] == 2
    assert summary["fused_optimizer_step_ms"] == rows["fused"]["optimizer_step_ms"]


def test_wait_ready_polls_until_200_and_names_the_url_that_never_answers() -> None:
    from fastapi import FastAPI, Response
    from searchsmith.serving.profiling.common import free_port, wait_ready
    from searchsmith.serving.profiling.server import LoopbackServer

    calls: list[int] = []
    app = FastAPI()

    @app.get("/ready")
    def ready() -> Response:
        calls.append(1)
        return Response(status_code=200 if len(calls) >= 3 else 503)

    with LoopbackServer(app) as srv:
        wait_ready(srv.url, 30)
        assert len(calls) == 3  # two 503s waited out
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection errors until the deadline
    with pytest.raises(RuntimeError, match=rf"^the test server: {url} was not ready within 1 s$"):
        wait_ready(url, 1, "the test server")
