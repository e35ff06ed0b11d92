"""Quiet by default, everything with --verbose."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from searchsmith.models.console import VERBOSE_ENV, progress, quiet_stdout, verbose


def test_quiet_stdout_holds_back_prints_and_replays_them_on_failure(capsys) -> None:
    with quiet_stdout(True):
        print("failed in shape inference <class 'Exception'>")
    assert capsys.readouterr().out == ""
    with pytest.raises(RuntimeError), quiet_stdout(True):
        print("context a failure needs")
        raise RuntimeError("boom")
    out = capsys.readouterr()
    assert out.out == "" and "context a failure needs" in out.err
    with quiet_stdout(False):
        print("shown")
    assert capsys.readouterr().out == "shown\n"


def test_verbose_switches(monkeypatch) -> None:
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    monkeypatch.setenv("SEARCHSMITH_LOG", "warning")
    assert not verbose()
    monkeypatch.setenv("SEARCHSMITH_LOG", "DEBUG")
    assert verbose()
    monkeypatch.delenv("SEARCHSMITH_LOG")
    monkeypatch.setenv(VERBOSE_ENV, "1")
    assert verbose()


def test_progress_draws_only_on_a_terminal_unless_forced(monkeypatch) -> None:
    monkeypatch.delenv("SEARCHSMITH_PROGRESS", raising=False)
    assert progress(total=3).disable  # pytest's stderr is not a terminal
    monkeypatch.setenv("SEARCHSMITH_PROGRESS", "1")
    bar = progress(total=3)
    assert not bar.disable
    bar.close()


@pytest.mark.parametrize("flag", [[], ["--verbose"]])
def test_index_cli_third_party_noise_only_with_verbose(tmp_path, flag) -> None:
    """A fresh process, as a user runs it: transformers reads its progress-bar switch at import."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "source": "Climate Science", "text": "Ice sheets melt."}) + "\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", VERBOSE_ENV, "SEARCHSMITH_LOG")}
    proc = subprocess.run([sys.executable, "-m", "searchsmith.serving.main", "index", str(corpus), "--out",
                           str(tmp_path / "ix"), *flag], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sources"] == {"Climate Science": 1}
    assert ("Loading weights" in proc.stderr) == bool(flag)
    assert "index: 1 documents -> 1 chunks" in proc.stderr


def test_export_cli_says_each_step_and_holds_back_third_party_noise(tmp_path) -> None:
    """A fresh process exporting a tiny embedder: torch's exporter warnings, ONNX Runtime's
    optimizer prints and Python warnings are hidden; one step line and the JSON summary stay."""
    from export_fixtures import embedder_dir

    env = {k: v for k, v in os.environ.items() if k not in (VERBOSE_ENV, "SEARCHSMITH_LOG")}
    proc = subprocess.run([sys.executable, "-m", "searchsmith.serving.main", "export", "embedder", "--model",
                           str(embedder_dir()), "--out", str(tmp_path / "b")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # stdout is the JSON line alone
    assert summary["task"] == "embed" and summary["parity_passed"] is True
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("[1/1] export embedder ") and lines[1].strip().startswith("parity passed")
    assert len(lines) == 2, proc.stderr  # nothing else: no W... torch lines, no UserWarning
