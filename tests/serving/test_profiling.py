from __future__ import annotations

import json

import pytest
from searchsmith.models.cli import main


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
    assert [r["sources"] for r in grid] == [3, 10]
    for r in grid:
        assert r["searchsmith"]["p50_ms"] > 0 and r["faiss_cpu"]["p99_ms"] >= r["faiss_cpu"]["p50_ms"]
        assert r["ratio_p50"] == pytest.approx(r["faiss_cpu"]["p50_ms"] / r["searchsmith"]["p50_ms"])
    assert {r["mode"] for r in recs if r.get("end_to_end")} == {"parallel", "serial"}
    assert (out / "route_latency.png").stat().st_size > 1000


def test_profile_embed_end_to_end(tmp_path, tiny_profile) -> None:
    out = tmp_path / "p"
    assert main(["profile", "embed", "--quick", "--out", str(out)]) == 0
    summary = [r for r in _records(out) if r.get("summary")][0]
    assert summary["texts"] == 24 and summary["min_cosine"] > 0.999
    assert summary["ratio_vs_st_default"] == pytest.approx(
        summary["searchsmith_texts_per_s"] / summary["st_default_texts_per_s"], rel=1e-6)
    assert (out / "embed_throughput.png").stat().st_size > 1000


def test_readme_table_is_generated_from_the_results_file(tmp_path) -> None:
    from searchsmith.serving.profiling import readme

    # the committed README shows exactly the committed results
    text = readme.README.read_text()
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
