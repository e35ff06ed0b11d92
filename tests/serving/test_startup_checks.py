"""The command refuses a mistyped SEARCHSMITH_* variable and a path that is not UTF-8 before
any work: one ``error:`` line, status 2 (a CLI audit found tracebacks, some after the model had
loaded or the training had run, that left a half-written output folder behind)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from searchsmith.models.startup import CHECKED_ENV
from searchsmith.serving.main import main

REPO = Path(__file__).resolve().parents[2]
TINY_RECIPE = REPO / "recipes/reranker/tiny/bert-tiny_full.yaml"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch) -> None:
    for name in CHECKED_ENV:
        monkeypatch.delenv(name, raising=False)


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("value", ["verbose", "bogus", "5"])
def test_a_mistyped_log_level_is_one_error_line(monkeypatch, capsys, value) -> None:
    monkeypatch.setenv("SEARCHSMITH_LOG", value)
    assert main(["config", "router"]) == 2
    assert (f"searchsmith config: error: SEARCHSMITH_LOG={value!r} is not a log level; use debug, info, warning "
            "(the default) or error" in _error(capsys))


def test_a_mistyped_kernel_backend_is_refused_before_anything_loads(monkeypatch, capsys, tmp_path) -> None:
    """Checked first: the missing index would otherwise be the error (status 1)."""
    monkeypatch.setenv("SEARCHSMITH_KERNEL_BACKEND", "cuda_magic")
    assert main(["route", "Lumen port", "--index", str(tmp_path / "missing")]) == 2
    assert ("searchsmith route: error: $SEARCHSMITH_KERNEL_BACKEND: unknown kernel backend 'cuda_magic'; use one "
            "of auto, torch, triton" in _error(capsys))


@pytest.mark.parametrize("value,status", [("verbose", 2), ("", 0)])
def test_the_log_level_in_a_fresh_process(value, status) -> None:
    """As a user runs it (logging is configured in main, before the command's module loads);
    an empty value means unset (it was a traceback too)."""
    env = {**os.environ, "SEARCHSMITH_LOG": value, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "searchsmith.serving.main", "config", "router"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == status, proc.stderr
    if status:
        assert proc.stdout == "" and proc.stderr.startswith(
            "searchsmith config: error: SEARCHSMITH_LOG='verbose' is not a log level")
    else:
        assert "top_k" in proc.stdout and proc.stderr == ""


@pytest.mark.parametrize("argv,option", [
    (["index", "{corpus}", "--out", "o\udcff22"], "--out"),
    (["index", "c\udcff.jsonl", "--out", "o"], "corpus"),
    (["train", str(TINY_RECIPE), "--output-dir", "t\udcffx"], "--output-dir"),
    (["export", "{run}", "--out", "b\udcffx"], "--out"),
    (["route", "Lumen port", "--index", "i\udcff"], "--index"),
    (["serve", "--config", "s\udcff.yaml"], "--config"),
    (["serve", "--index", "i\udcff"], "--index"),
    (["eval", "compare", "{corpus}", "b\udcff.jsonl"], "FILE"),
])
def test_a_path_that_is_not_utf8_is_refused_before_any_work(tmp_path, monkeypatch, capsys, argv, option) -> None:
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "good.jsonl"
    corpus.write_text(json.dumps({"id": "a", "source": "S", "text": "Ice sheets melt."}) + "\n")
    (tmp_path / "run").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [a.format(corpus=corpus, run=tmp_path / "run") for a in argv]
    assert main(argv) == 2
    err = _error(capsys)
    assert f"error: {option}: '" in err and "is not valid UTF-8 (the byte \\x" in err and "use a plain name, e.g." in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no hidden .build folder


def test_the_plain_name_suggested_is_valid(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["index", "c.jsonl", "--out", "o\udcff22"]) == 2
    assert "e.g. --out o_22," in _error(capsys)
