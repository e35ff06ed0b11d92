"""models/startup.py: the SEARCHSMITH_* environment and arguments that are not UTF-8, checked
before a command runs (the CLI end to end: tests/serving/test_startup_checks.py)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from searchsmith.models import console, startup

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch) -> None:
    for name in startup.CHECKED_ENV:
        monkeypatch.delenv(name, raising=False)


def test_every_searchsmith_variable_the_project_reads_is_checked() -> None:
    read = {m for folder in ("kernels", "models", "serving", "training") for f in (REPO / folder).rglob("*.py")
            for m in re.findall(r"SEARCHSMITH_[A-Z0-9_]*[A-Z0-9]", f.read_text())}
    assert read >= {"SEARCHSMITH_LOG", "SEARCHSMITH_KERNEL_BACKEND"}  # the scan works
    assert read <= set(startup.CHECKED_ENV), f"not checked at start-up: {sorted(read - set(startup.CHECKED_ENV))}"


@pytest.mark.parametrize("name,value,said", [
    ("SEARCHSMITH_LOG", "verbose", "SEARCHSMITH_LOG='verbose' is not a log level; use debug, info, warning"),
    ("SEARCHSMITH_LOG", "5", "SEARCHSMITH_LOG='5' is not a log level"),
    ("SEARCHSMITH_VERBOSE", "true", "SEARCHSMITH_VERBOSE='true' is not a switch; use 1"),
    ("SEARCHSMITH_PROGRESS", "yes", "SEARCHSMITH_PROGRESS='yes' is not a switch; use 1"),
    ("SEARCHSMITH_KERNEL_BACKEND", "cuda_magic",
     "$SEARCHSMITH_KERNEL_BACKEND: unknown kernel backend 'cuda_magic'; use one of auto, torch, triton"),
    ("SEARCHSMITH_CPU_INT8", "avx9", "SEARCHSMITH_CPU_INT8='avx9' is not an int8 instruction set"),
    ("SEARCHSMITH_PROFILE_TINY", "on", "SEARCHSMITH_PROFILE_TINY='on' is not a switch"),
    ("SEARCHSMITH_PROFILE_KERNELS_TINY", "2", "SEARCHSMITH_PROFILE_KERNELS_TINY='2' is not a switch"),
])
def test_a_bad_value_is_named_with_the_values_it_takes(monkeypatch, name, value, said) -> None:
    monkeypatch.setenv(name, value)
    assert said in startup.environment_problem()


@pytest.mark.parametrize("name,value", [
    ("SEARCHSMITH_LOG", ""), ("SEARCHSMITH_LOG", " Info "), ("SEARCHSMITH_LOG", "DEBUG"), ("SEARCHSMITH_LOG", "warn"),
    ("SEARCHSMITH_VERBOSE", "0"), ("SEARCHSMITH_PROGRESS", ""), ("SEARCHSMITH_KERNEL_BACKEND", ""),
    ("SEARCHSMITH_KERNEL_BACKEND", "torch"), ("SEARCHSMITH_CPU_INT8", "avx2"), ("SEARCHSMITH_PROFILE_TINY", "1"),
])
def test_good_and_empty_values_pass(monkeypatch, name, value) -> None:
    monkeypatch.setenv(name, value)
    assert startup.environment_problem() is None


def test_every_bad_variable_is_reported_at_once(monkeypatch) -> None:
    monkeypatch.setenv("SEARCHSMITH_LOG", "bogus")
    monkeypatch.setenv("SEARCHSMITH_KERNEL_BACKEND", "cuda")
    problem = startup.environment_problem()
    assert "SEARCHSMITH_LOG='bogus'" in problem and "unknown kernel backend 'cuda'" in problem


def test_a_worker_with_a_bad_level_warns_once_and_logs_at_warning(monkeypatch, capsys) -> None:
    """A process the CLI did not start (a worker, a library caller) must not die of it."""
    monkeypatch.setattr(console, "_warned_log_level", False)
    monkeypatch.setenv("SEARCHSMITH_LOG", "verbose")
    assert console.log_level() == "WARNING" and console.log_level() == "WARNING"
    err = capsys.readouterr().err
    assert err.count("SEARCHSMITH_LOG='verbose' is not a log level") == 1
    monkeypatch.setenv("SEARCHSMITH_LOG", "info")
    assert console.log_level() == "INFO"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("query")
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--out")
    parser.add_argument("--metric", action="append")
    parser.add_argument("overrides", nargs="*", default=[])
    return parser


@pytest.mark.parametrize("argv,said", [
    (["q", "--out", "o\udcff22"], "--out: 'o\\xff22' is not valid UTF-8 (the byte \\xff at character 1)"),
    (["q", "c\udce9.jsonl"], "corpus: 'c\\xe9.jsonl' is not valid UTF-8"),
    (["q", "--metric", "f1", "--metric", "x\udcff"], "--metric: 'x\\xff' is not valid UTF-8"),
])
def test_an_argument_that_is_not_utf8_is_named_with_a_plain_name(argv, said) -> None:
    parser = _parser()
    problem = startup.argument_problem(parser, parser.parse_intermixed_args(argv))
    assert said in problem and "use a plain name, e.g." in problem


def test_the_question_and_overrides_are_left_to_their_own_checks() -> None:
    parser = _parser()
    assert startup.argument_problem(parser, parser.parse_intermixed_args(["q\udcff", "c", "k=\udcff"])) is None
    assert startup.argument_problem(parser, parser.parse_intermixed_args(["q", "c.jsonl", "--out", "é"])) is None


def test_the_checks_do_not_import_torch() -> None:
    code = "import sys, searchsmith.models.startup as s; s.environment_problem(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


# the CLI lets its parser print a command's help whatever the environment (tests/serving/test_main_help_env.py)
@pytest.mark.parametrize(("args", "asks"), [
    (["-h"], True), (["--help"], True), (["--hel"], True), (["x", "--out", "o", "-h"], True),
    (["--h"], True), (["-hv"], True),  # argparse's abbreviation, and -h bundled with a short flag
    ([], False), (["router"], False), (["--", "-h"], False), (["--hx"], False), (["--out=-h"], False),
    (["-"], False), (["--"], False),
])
def test_may_ask_for_help(args: list[str], asks: bool) -> None:
    assert startup.may_ask_for_help(args) is asks
