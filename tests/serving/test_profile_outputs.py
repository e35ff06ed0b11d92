"""``searchsmith profile``'s outputs: ``--out`` (results.jsonl, plots, traces), ``--record`` and
``--readme``, each checked before anything is measured, written whole, and never over a user's file.

The suites here are fakes (a module with ``run(ctx, args)``) so that each test takes well under a
second; the real suites are run end to end in test_profiling.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
from pathlib import Path

import pytest
from profile_files import file_tree, result_lines
from searchsmith.models.errors import ConfigError
from searchsmith.serving.main import main
from searchsmith.serving.profiling import cli, readme

ROUTE_ROW = {"suite": "route", "sources": 1000, "centroids_per_source": 16, "device": "cpu",
             "searchsmith": {"p50_ms": 0.1, "p99_ms": 0.2}, "faiss_cpu": {"p50_ms": 0.3, "p99_ms": 0.4},
             "ratio_p50": 3.0}


@pytest.fixture
def fake_route(monkeypatch):
    """``profile route`` runs a fake suite: it emits one headline row (then, if set, raises
    ``fake.fail``); ``fake.runs`` counts its runs, i.e. whether anything was measured."""
    fake = types.SimpleNamespace(runs=0, fail=None, before=None)

    def run(ctx, args):
        fake.runs += 1
        if fake.before is not None:  # refused its options before measuring anything
            raise fake.before
        ctx.emit(dict(ROUTE_ROW))
        if fake.fail is not None:
            raise fake.fail

    fake.run = run
    monkeypatch.setitem(sys.modules, "fake_route_suite", fake)
    monkeypatch.setitem(cli.SUITES, "route", "fake_route_suite")
    return fake


DOC = f"# R\nintro\n{readme.HEADLINE_START}\nold\n{readme.HEADLINE_END}\ntail\n"


# -- --record / --readme ----------------------------------------------------------------------
def test_record_refuses_a_log_that_is_not_its_own_before_measuring(tmp_path, fake_route, capsys) -> None:
    """Audit: a user's performance.jsonl got three rows appended and a RESULTS.md beside it, then
    ``KeyError: 'what'``."""
    rec = tmp_path / "rec5"
    rec.mkdir()
    (rec / "performance.jsonl").write_text('{"my": "data"}\n')
    assert main(["profile", "route", "--out", str(tmp_path / "rt5"), "--record", str(rec)]) == 1
    err = capsys.readouterr().err
    assert "performance.jsonl row 1 is not a row searchsmith profile writes" in err
    assert "Move performance.jsonl out of" in err and "nothing was written" in err
    assert fake_route.runs == 0 and not (tmp_path / "rt5").exists()
    assert file_tree(rec) == {"performance.jsonl": b'{"my": "data"}\n'}


@pytest.mark.parametrize(("setup", "flag", "match"), [
    ("swapped", "--readme", "headlines:end --> comes before <!-- headlines:start -->"),
    ("twice", "--readme", "appears 2 time"),
    ("no_markers", "--readme", "no <!-- headlines:start --> / <!-- headlines:end --> markers"),
    ("missing", "--readme", "no such file"),
    ("results_folder", "--record", "RESULTS.md is a folder"),
    ("results_swapped", "--record", "performance:end --> comes before"),
    ("log_folder", "--record", "performance.jsonl is a folder"),
    ("record_in_file", "--record", "which is a file"),
])
def test_every_record_target_is_checked_before_measuring(tmp_path, fake_route, capsys, setup, flag, match) -> None:
    """Audit: a README with its markers swapped failed after the run (``not enough values to
    unpack``) with performance.jsonl appended and RESULTS.md rewritten; a RESULTS.md folder or a
    read-only --record folder ended in an OSError after the run."""
    rec, doc = tmp_path / "rec", tmp_path / "README.md"
    rec.mkdir()
    doc.write_text(DOC)
    if setup == "swapped":
        doc.write_text(f"# R\n{readme.HEADLINE_END}\ntext\n{readme.HEADLINE_START}\n")
    elif setup == "twice":
        doc.write_text(DOC + DOC)
    elif setup == "no_markers":
        doc.write_text("# mine\n")
    elif setup == "missing":
        doc.unlink()
    elif setup == "results_folder":
        (rec / "RESULTS.md").mkdir()
    elif setup == "results_swapped":
        (rec / "RESULTS.md").write_text(f"{readme.END}\n{readme.START}\n")
    elif setup == "log_folder":
        (rec / "performance.jsonl").mkdir()
    elif setup == "record_in_file":
        (tmp_path / "notes").write_text("x")
        rec = tmp_path / "notes" / "rec"
    before = file_tree(tmp_path)
    assert main(["profile", "route", "--out", str(tmp_path / "out"), "--record", str(rec),
                 "--readme", str(doc)]) == 1
    err = capsys.readouterr().err
    assert f"profile {flag}" in err and re.search(re.escape(match), err), err
    assert fake_route.runs == 0 and file_tree(tmp_path) == before and not (tmp_path / "out").exists()


def test_record_and_readme_are_written_whole(tmp_path, fake_route, monkeypatch) -> None:
    rec, doc = tmp_path / "rec", tmp_path / "README.md"
    doc.write_text(DOC)
    written = []
    atomic = readme.write_text_atomic
    monkeypatch.setattr(readme, "write_text_atomic", lambda p, t: (written.append(Path(p).name), atomic(p, t)))
    assert main(["profile", "route", "--out", str(tmp_path / "out"), "--record", str(rec), "--readme", str(doc)]) == 0
    # every file through a temporary file and a rename (update_markers wrote README.md in place)
    assert written == ["performance.jsonl", "RESULTS.md", "README.md"]
    assert [r["what"] for r in readme.read_jsonl(rec / "performance.jsonl")] == [
        "route 1 query, 1000 sources x 16 centroids (cpu)"]
    new = doc.read_text()
    assert new.startswith("# R\nintro\n") and new.endswith("tail\n") and "old" not in new and "3.00x" in new
    assert "3.00x" in (rec / "RESULTS.md").read_text()
    assert not [p for p in tmp_path.rglob(".*tmp*")]  # no temporary file left
    written.clear()
    readme.update_headlines(doc, rec / "performance.jsonl")  # unchanged: not rewritten
    (rec / "performance.jsonl").write_text("")
    readme.update_headlines(doc, rec / "performance.jsonl")
    assert written == ["README.md"]


def test_a_failed_replacement_puts_back_the_files_already_replaced(tmp_path, fake_route, monkeypatch) -> None:
    rec, doc = tmp_path / "rec", tmp_path / "README.md"
    doc.write_text(DOC)
    assert main(["profile", "route", "--out", str(tmp_path / "out"), "--record", str(rec)]) == 0
    before = file_tree(tmp_path / "rec"), doc.read_bytes()
    atomic = readme.write_text_atomic

    def full_disk_at_the_readme(path, text):
        if Path(path).name == "README.md":
            raise OSError(28, "No space left on device", str(path))
        atomic(path, text)

    monkeypatch.setattr(readme, "write_text_atomic", full_disk_at_the_readme)
    assert main(["profile", "route", "--out", str(tmp_path / "out"), "--record", str(rec), "--readme", str(doc)]) == 1
    assert (file_tree(tmp_path / "rec"), doc.read_bytes()) == before  # the log and RESULTS.md put back


def test_update_markers_refuses_markers_out_of_order(tmp_path) -> None:
    doc = tmp_path / "R.md"
    doc.write_text(f"{readme.HEADLINE_END}\nx\n{readme.HEADLINE_START}\n")
    with pytest.raises(ConfigError, match="comes before"):  # was: ValueError: not enough values to unpack
        readme.update_headlines(doc, tmp_path / "none.jsonl")
    assert not readme.update_markers_ok(doc)


# -- --out ------------------------------------------------------------------------------------
def test_out_that_cannot_be_written_is_refused_before_measuring(tmp_path, fake_route, monkeypatch, capsys) -> None:
    """Audit: a read-only --out or --record ended in ``OSError: Read-only file system`` after the run."""
    (tmp_path / "notes").write_text("x")
    assert main(["profile", "route", "--out", str(tmp_path / "notes" / "p")]) == 1
    assert "which is a file" in capsys.readouterr().err
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    # a read-only mount: access(2) answers EROFS, even for root
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro else real(p, mode, **kw))
    for argv in (["--out", str(ro / "p")], ["--out", str(tmp_path / "out"), "--record", str(ro / "rec")]):
        assert main(["profile", "route", *argv]) == 1
        err = capsys.readouterr().err
        assert "read-only file system" in err and "nothing was written" in err
    assert fake_route.runs == 0 and not (tmp_path / "out").exists() and list(ro.iterdir()) == []


def test_a_users_plot_is_refused_before_measuring(tmp_path, fake_route, capsys) -> None:
    """Audit: a user's route_latency.png in the profile folder was refused only after the run."""
    out = tmp_path / "p"
    assert main(["profile", "route", "--out", str(out)]) == 0
    (out / "route_latency.png").write_bytes(b"my own picture")
    assert main(["profile", "route", "--out", str(out)]) == 1
    assert "route_latency.png' exists and is not a plot searchsmith wrote" in capsys.readouterr().err
    assert fake_route.runs == 1 and (out / "route_latency.png").read_bytes() == b"my own picture"


def test_plots_lists_the_plots_each_suite_writes() -> None:
    import importlib.util

    for suite, module in cli.SUITES.items():
        source = Path(importlib.util.find_spec(module).origin).read_text()
        assert set(re.findall(r'"(\w+\.png)"', source)) == set(cli.PLOTS.get(suite, ())), suite


def test_trace_replaces_only_its_own_traces(tmp_path, fake_route, capsys) -> None:
    """Audit: ``--trace`` silently replaced a user's trace_route-3-sources-torch.json."""
    import torch
    from searchsmith.serving.profiling.common import ProfileContext

    ctx = ProfileContext(out_dir=tmp_path, trace=True)
    with ctx.profiled("route"):
        torch.ones(2) + 1
    mine = tmp_path / "trace_route.json"
    assert "traceEvents" in json.loads(mine.read_text())
    with ProfileContext(out_dir=tmp_path, trace=True).profiled("route"):  # its own trace: replaced
        torch.ones(2) + 1
    mine.write_text("notes\n")
    with pytest.raises(ConfigError, match="was edited since searchsmith wrote it"):
        with ProfileContext(out_dir=tmp_path, trace=True).profiled("route"):
            pass
    theirs = tmp_path / "trace_rerank.json"
    theirs.write_text("notes\n")
    with pytest.raises(ConfigError, match="is not a trace searchsmith wrote"):
        with ProfileContext(out_dir=tmp_path, trace=True).profiled("rerank"):
            pass
    assert mine.read_text() == theirs.read_text() == "notes\n"
    # through the command: refused before the suite runs
    out = tmp_path / "p"
    assert main(["profile", "route", "--out", str(out)]) == 0
    (out / "trace_route-3-sources-torch.json").write_text("notes\n")
    assert main(["profile", "route", "--out", str(out), "--trace"]) == 1
    assert "trace_route-3-sources-torch.json' is not a trace searchsmith wrote" in capsys.readouterr().err
    assert fake_route.runs == 1 and (out / "trace_route-3-sources-torch.json").read_text() == "notes\n"


# -- results.jsonl: complete, interrupted and refused runs -------------------------------------
def test_each_run_is_marked_complete_or_not(tmp_path, fake_route) -> None:
    out = tmp_path / "p"
    assert main(["profile", "route", "--out", str(out)]) == 0
    fake_route.fail = KeyboardInterrupt()
    assert main(["profile", "route", "--out", str(out)]) == 130  # Ctrl-C after a row
    fake_route.fail = RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):  # not a searchsmith error: main lets it through
        main(["profile", "route", "--out", str(out)])
    lines = result_lines(out)
    assert [r["suite"] for r in lines] == ["machine", "route", "end"] * 3
    runs = [r["run"] for r in lines if r["suite"] == "machine"]
    assert len(set(runs)) == 3 and [r["run"] for r in lines if r["suite"] == "end"] == runs
    ends = [r for r in lines if r["suite"] == "end"]
    assert [r["complete"] for r in ends] == [True, False, False]
    assert ends[1]["error"] == "KeyboardInterrupt" and ends[2]["error"] == "RuntimeError: boom"
    # the readers of results.jsonl pass over the end lines
    cli.check_profile_out(out)
    assert readme.headline_rows(lines[:3]) == readme.headline_rows(lines[:2])


def test_a_run_refused_before_it_measures_writes_nothing(tmp_path, fake_route, monkeypatch, capsys) -> None:
    """Audit: the machine line was written before the options were checked, so a failed --run or
    --device cuda left a results.jsonl holding only that line."""
    import torch

    out = tmp_path / "p"
    fake_route.before = ConfigError("profile route: refused")
    assert main(["profile", "route", "--out", str(out)]) == 1
    assert fake_route.runs == 1 and not out.exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["profile", "route", "--out", str(out), "--device", "cuda"]) == 1
    assert "--device cuda but torch sees no CUDA device" in capsys.readouterr().err
    assert main(["profile", "route", "--out", str(out), "--run", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert "profile --run: " in err and "is not a folder" in err
    assert fake_route.runs == 1 and not out.exists()


# -- optional extras: a suite named alone fails, a step of a group is skipped ---------------------
def test_llm_and_ray_without_their_extra(tmp_path, monkeypatch, capsys) -> None:
    """Audit: ``profile llm`` without the llm extra exited 0 having written only a skipped line,
    while ``profile ray`` without Ray exited 1."""
    from searchsmith.serving.profiling import llm

    monkeypatch.setattr(llm, "missing_llm_packages", lambda: f"llama-cpp-python[server] is not installed; {llm.INSTALL}")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray: ImportError
    assert main(["profile", "llm", "--out", str(tmp_path / "l")]) == 1
    err = capsys.readouterr().err
    assert "profile llm: needs the llm extra" in err and "pip install -e '.[llm]'" in err
    assert main(["profile", "ray", "--index", str(tmp_path), "--out", str(tmp_path / "r")]) == 1
    assert "pip install -e '.[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "l").exists() and not (tmp_path / "r").exists()
    # in a group, a missing optional extra is a skipped step and the group goes on
    monkeypatch.setitem(cli.GROUPS, "all", ["llm", "ray"])
    assert main(["profile", "--suite", "all", "--index", str(tmp_path), "--out", str(tmp_path / "g")]) == 0
    lines = result_lines(tmp_path / "g")
    skipped = {r["suite"]: r["skipped"] for r in lines if r.get("skipped")}
    assert "pip install -e '.[llm]'" in skipped["llm"] and "pip install -e '.[ray]'" in skipped["ray"]
    assert lines[-1]["suite"] == "end" and lines[-1]["complete"] is True


def test_a_second_run_recording_into_the_same_folder_is_refused_not_lost(tmp_path, fake_route, capsys) -> None:
    """Two runs finishing at once read the log, then each wrote it whole: the second's rows
    replaced the first's. The log's lock is held from the read to the last write."""
    import subprocess

    rec = tmp_path / "rec"
    assert main(["profile", "route", "--out", str(tmp_path / "out1"), "--record", str(rec)]) == 0
    before = (rec / "performance.jsonl").read_text()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from searchsmith.models.io import exclusive\n"
        f"with exclusive({str(rec / 'performance.jsonl')!r}, 'test'):\n"
        "    print('held', flush=True); time.sleep(30)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["profile", "route", "--out", str(tmp_path / "out2"), "--record", str(rec)]) == 1
        assert "is being written by another searchsmith process" in capsys.readouterr().err
        assert (rec / "performance.jsonl").read_text() == before  # nothing lost, nothing half-written
        assert (tmp_path / "out2" / "results.jsonl").is_file()  # the run's own results are kept
    finally:
        holder.kill()
        holder.wait()
    assert main(["profile", "route", "--out", str(tmp_path / "out3"), "--record", str(rec)]) == 0
    assert len(readme.read_jsonl(rec / "performance.jsonl")) == 2 and not list(rec.glob(".*.lock"))


# -- each step's inputs (--index, --config, --run): checked before any step is measured -----------
@pytest.fixture
def counted_runs(monkeypatch):
    """Every real suite's ``run`` replaced by one that counts its calls (the suites' own
    ``check_args`` stay real): what was measured."""
    import importlib

    runs: list[str] = []
    for name in ("route", "pipeline", "rerank", "llm", "read"):
        module = importlib.import_module(cli.SUITES[name])
        monkeypatch.setattr(module, "run", lambda ctx, args, name=name: runs.append(name))
    return runs


@pytest.mark.parametrize("argv, match", [
    (["route", "--index", "{tmp}/nope"], "index '{tmp}/nope' does not exist; build it with"),
    (["route", "--index", "{tmp}/user"], "index {tmp}/user: not a searchsmith index"),
    (["pipeline", "--index", "{tmp}/nope"], "index '{tmp}/nope' does not exist"),
    (["pipeline", "--config", "{tmp}/nope.yaml"], "profile pipeline --config: '{tmp}/nope.yaml' is not a file"),
    (["rerank", "--run", "{tmp}/user"], "has no run.json"),
    (["llm", "--run", "{tmp}/user"], "has no run.json"),
    (["read", "--run", "{tmp}/user"], "has no run.json"),
    (["all", "--index", "{tmp}/nope", "--quick"], "index '{tmp}/nope' does not exist"),
])
def test_each_steps_inputs_are_checked_before_anything_is_measured(tmp_path, counted_runs, capsys, argv,
                                                                    match) -> None:
    """Audit: ``profile route --index nonexist_idx --quick`` measured its synthetic rows for 20 s and
    wrote results.jsonl (complete: false) before the index was found missing; a group found a bad
    --index, --config or --run only when its step came round, after the steps before it."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    out = tmp_path / "p"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["profile", *argv, "--out", str(out)]) == 1
    assert match.replace("{tmp}", str(tmp_path)) in capsys.readouterr().err
    assert counted_runs == [] and not out.exists()


def test_a_llm_run_of_another_task_is_refused_before_measuring(tmp_path, counted_runs, capsys) -> None:
    """``profile llm --run`` times the reader last, after the LLM: a reranker run failed there."""
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "rerank", "steps": 3}))
    assert main(["profile", "llm", "--run", str(run), "--out", str(tmp_path / "p")]) == 1
    assert f"profile llm --run: {str(run)!r} is a 'rerank' run (run.json task 'rerank'), not a reader" in capsys.readouterr().err
    assert counted_runs == [] and not (tmp_path / "p").exists()


def test_a_good_index_passes_the_check(tmp_path, counted_runs, small_index) -> None:
    assert main(["profile", "route", "--index", str(small_index), "--out", str(tmp_path / "p")]) == 0
    assert counted_runs == ["route"]
