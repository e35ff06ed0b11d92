"""``searchsmith profile --out DIR``: one run into a folder at a time.

Each test here failed on the code before it: two runs into one --out appended to one
results.jsonl (their rows mixed) and could replace each other's plots and traces.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from profile_files import file_tree, result_lines
from searchsmith.models.errors import ConfigError
from searchsmith.serving.main import main
from searchsmith.serving.profiling import cli

ROW = {"suite": "route", "sources": 1000, "centroids_per_source": 16, "device": "cpu",
       "searchsmith": {"p50_ms": 0.1, "p99_ms": 0.2}, "faiss_cpu": {"p50_ms": 0.3, "p99_ms": 0.4}, "ratio_p50": 3.0}


@pytest.fixture
def fake_route(monkeypatch):
    """``profile route`` runs a fake suite: ``fake.during(ctx)`` runs between its two rows."""
    fake = types.SimpleNamespace(runs=0, during=lambda ctx: None)

    def run(ctx, args):
        fake.runs += 1
        ctx.emit({**ROW, "row": 1})
        if fake.runs == 1:  # the first run only: a second one it starts runs straight through
            fake.during(ctx)
        ctx.emit({**ROW, "row": 2})

    fake.run = run
    monkeypatch.setitem(sys.modules, "fake_route_suite", fake)
    monkeypatch.setitem(cli.SUITES, "route", "fake_route_suite")
    return fake


def test_a_second_profile_into_a_folder_being_written_is_refused_at_once(tmp_path, fake_route, capsys) -> None:
    """Audit: two runs into one --out appended to one results.jsonl, their rows interleaved."""
    out = tmp_path / "p"
    seen = {}

    def second_run(ctx):  # a second profile into the same folder while the first is between its rows
        seen["before"] = file_tree(out)
        seen["status"] = main(["profile", "route", "--out", str(out)])
        seen["err"] = capsys.readouterr().err
        seen["after"] = file_tree(out)

    fake_route.during = second_run
    assert main(["profile", "route", "--out", str(out)]) == 0
    assert seen["status"] == 1 and fake_route.runs == 1  # refused before its suite ran
    assert "profile --out:" in seen["err"] and "being written by another searchsmith profile run" in seen["err"]
    assert seen["after"] == seen["before"]  # not a byte of the first run's files touched
    lines = result_lines(out)  # one run's lines, whole: machine, its two rows, its end
    assert [r["suite"] for r in lines] == ["machine", "route", "route", "end"]
    assert [r.get("row") for r in lines[1:3]] == [1, 2] and lines[-1]["complete"] is True
    assert len({r["run"] for r in (lines[0], lines[-1])}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # the lock file is gone


def test_a_run_that_starts_after_the_checks_is_refused_by_the_lock(tmp_path, fake_route, monkeypatch,
                                                                 capsys) -> None:
    """The checks read the lock without taking it; between them and the run, the lock itself refuses."""
    import searchsmith.models.io as io

    out = tmp_path / "p"
    assert main(["profile", "route", "--out", str(out)]) == 0
    before = file_tree(out)
    monkeypatch.setattr(io, "being_written", lambda target: False)  # as if the other run started just after
    with io.exclusive(out, "another profile"):  # held here as another process's run holds it
        assert main(["profile", "route", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "profile: " in err and "is being written by another searchsmith process" in err
    assert fake_route.runs == 1 and file_tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_the_out_checks_run_before_the_lock_is_taken(tmp_path, fake_route, monkeypatch, capsys) -> None:
    """A user's folder is refused as before, without a lock file ever made beside it."""
    import searchsmith.models.io as io

    taken = []
    real = io.exclusive
    monkeypatch.setattr(io, "exclusive", lambda target, what: (taken.append(Path(target)), real(target, what))[1])
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert main(["profile", "route", "--out", str(theirs)]) == 1
    assert "holds files but no results.jsonl" in capsys.readouterr().err
    assert taken == [] and fake_route.runs == 0 and file_tree(theirs) == {"notes.txt": b"mine"}
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert main(["profile", "route", "--out", str(a_file)]) == 1
    assert "is a file" in capsys.readouterr().err and taken == [] and a_file.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "theirs"]
    assert main(["profile", "route", "--out", str(tmp_path / "p")]) == 0  # a good run takes it
    assert taken == [tmp_path / "p"] and fake_route.runs == 1


def test_check_profile_out_refuses_a_folder_another_process_writes(tmp_path) -> None:
    import subprocess

    out = tmp_path / "p"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom searchsmith.models.io import exclusive\n"
         f"with exclusive({str(out)!r}, 'profile'):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="being written by another searchsmith profile run"):
            cli.check_profile_out(out)
    finally:
        holder.communicate("", timeout=60)
    cli.check_profile_out(out)  # released: free again
    assert list(tmp_path.iterdir()) == []
