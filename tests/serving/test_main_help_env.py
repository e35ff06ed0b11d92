"""``searchsmith COMMAND --help`` works whatever the ``SEARCHSMITH_*`` environment.

The environment was checked before the command's parser was built, so a bad value
(``SEARCHSMITH_LOG=bogus``) answered ``searchsmith index --help`` with the error instead of the
help that says how to run the command. Now the parser prints the help (status 0) and the bad
value is refused, as before, when the command runs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from searchsmith.models.startup import CHECKED_ENV
from searchsmith.serving import main as cli
from searchsmith.serving.main import COMMANDS, main

BAD = {"SEARCHSMITH_LOG": ("bogus", "SEARCHSMITH_LOG='bogus' is not a log level; use debug, info, warning "
                                    "(the default) or error, or unset it"),
       "SEARCHSMITH_KERNEL_BACKEND": ("cuda_magic", "$SEARCHSMITH_KERNEL_BACKEND: unknown kernel backend "
                                                    "'cuda_magic'; use one of auto, torch, triton"),
       "SEARCHSMITH_PROGRESS": ("yes", "SEARCHSMITH_PROGRESS='yes' is not a switch; use 1"),
       "SEARCHSMITH_PROFILE_TINY": ("2", "SEARCHSMITH_PROFILE_TINY='2' is not a switch; use 1")}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CHECKED_ENV:
        monkeypatch.delenv(name, raising=False)


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 0 and err == "", err
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_help_with_a_bad_value_set(monkeypatch, capsys, command: str) -> None:
    monkeypatch.setenv("SEARCHSMITH_LOG", "bogus")
    monkeypatch.setenv("SEARCHSMITH_KERNEL_BACKEND", "cuda_magic")
    assert _help([command, "--help"], capsys).startswith(f"usage: searchsmith {command} ")


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("asked", [["-h"], ["--help"], ["--he"], ["router", "-h"]], ids=" ".join)
def test_each_spelling_of_help_is_answered_and_the_command_still_refused(monkeypatch, capsys, name: str,
                                                                         asked: list[str]) -> None:
    value, said = BAD[name]
    monkeypatch.setenv(name, value)
    assert _help(["config", *asked], capsys).startswith("usage: searchsmith config ")
    assert main(["config", "router"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"searchsmith config: error: {said}") and len(err.splitlines()) == 1, err


def test_the_top_level_help_too(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SEARCHSMITH_LOG", "bogus")
    assert main(["--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: searchsmith COMMAND") and err == ""


def test_a_help_flag_that_was_no_help_request_is_still_refused(monkeypatch, capsys, tmp_path) -> None:
    """Where the parser reads the arguments without printing help, the value is refused before
    the command runs (nothing written)."""
    monkeypatch.setenv("SEARCHSMITH_LOG", "bogus")
    monkeypatch.setattr(cli, "may_ask_for_help", lambda args: True)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "source": "S", "text": "Ice sheets melt."}\n')
    assert main(["index", str(corpus), "--out", str(tmp_path / "idx")]) == 2
    assert capsys.readouterr().err.startswith("searchsmith index: error: SEARCHSMITH_LOG='bogus' is not a log level")
    assert not (tmp_path / "idx").exists()


def test_in_a_fresh_process_the_help_comes_alone() -> None:
    """As a user runs it: no warning of the bad value before the help, status 0."""
    env = {**os.environ, "SEARCHSMITH_LOG": "bogus", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "searchsmith.serving.main", "config", "--help"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("usage: searchsmith config ")
