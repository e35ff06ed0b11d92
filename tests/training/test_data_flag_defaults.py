"""The data flags of the ``python -m searchsmith.training...`` helpers find their default as the
recipes find their data: ``../shared/data`` in the current folder, else beside the repository.

``decompose_data --data-dir``, ``images write-eval --coco-dir`` and ``evaluate scifact-beir
--claims/--corpus`` spelled out ``../shared/data`` and read it from the current folder only:
run from outside the clone they failed (or, for the decomposer's sources, said "check
data.data_dir", a recipe setting) although the data sat beside the repository. They now share
``training.data.resolve_data_dir`` with ``make-routing-set``, and a default found nowhere names
the flag and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.training import data as training_data
from searchsmith.training import decompose_data, evaluate, images
from searchsmith.training.data import SHARED_DATA, resolve_data_dir


class _Called(Exception):
    """Raised by a stand-in for the helper's work: what it was called with is in args[0]."""


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository at tmp/clone/repo, run from tmp/away/here: no ../shared/data in the current
    folder; beside the repository is tmp/clone/shared/data (made by the test)."""
    (tmp_path / "clone" / "repo").mkdir(parents=True)
    monkeypatch.setattr(training_data, "REPO_ROOT", tmp_path / "clone" / "repo")
    (tmp_path / "away" / "here").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "away" / "here")
    return tmp_path


def _nowhere(outside: Path) -> str:
    return (f"no ../shared/data in the current folder ({outside / 'away' / 'shared' / 'data'}) nor beside the "
            f"repository ({outside / 'clone' / 'shared' / 'data'}); put the shared data there, or pass")


def test_the_default_is_found_here_then_beside_the_repository(outside: Path) -> None:
    beside = outside / "clone" / "shared" / "data"
    beside.mkdir(parents=True)
    assert resolve_data_dir(SHARED_DATA, "--data-dir") == beside
    assert resolve_data_dir("../shared/./data", "--data-dir") == beside  # the default however spelled
    claims = f"{SHARED_DATA}/scifact/claims_dev.jsonl"
    assert resolve_data_dir(claims, "--claims", default=claims) == beside / "scifact/claims_dev.jsonl"
    here = outside / "away" / "shared" / "data"
    here.mkdir(parents=True)
    assert resolve_data_dir(SHARED_DATA, "--data-dir") == here


def test_a_given_path_is_read_as_given(outside: Path) -> None:
    (outside / "clone" / "shared" / "data").mkdir(parents=True)
    assert resolve_data_dir("mine", "--data-dir") == Path("mine")  # the current folder's, never the repository's
    assert resolve_data_dir(SHARED_DATA, "--coco-dir", default=f"{SHARED_DATA}/coco_captions") == Path(SHARED_DATA)


def test_a_default_found_nowhere_names_both_places_the_flag_and_the_fix(outside: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_data_dir(f"{SHARED_DATA}/x.jsonl", "--claims", default=f"{SHARED_DATA}/x.jsonl", metavar="FILE")
    assert str(err.value) == f"--claims: {_nowhere(outside)} --claims FILE"
    with pytest.raises(ConfigError, match=r"^make-routing-set: no \.\./shared/data .* or pass --data-dir DIR$"):
        resolve_data_dir(SHARED_DATA, "--data-dir", where="make-routing-set")


def test_an_empty_value_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--data-dir is empty: give a path, or leave the option out "
                                          r"\(default \.\./shared/data\)$"):
        resolve_data_dir(" ", "--data-dir")


@dataclass(frozen=True)
class Helper:
    """A helper's data flag, and the function it hands the resolved path to (replaced by a
    stand-in raising :class:`_Called`)."""

    module: ModuleType
    work: str  # the function of ``module`` given the path
    argv: list[str]  # a command line leaving the flag at its default
    flag: str
    metavar: str
    under: str  # the default's path under ../shared/data
    given: Callable[[tuple, dict], Any]  # the path, out of the work's (args, kwargs)


HELPERS = {
    "decompose_data --data-dir": Helper(decompose_data, "load_real", ["--out", "o"], "--data-dir", "DIR", ".",
                                        lambda a, kw: a[1]),
    "images --coco-dir": Helper(images, "write_placement_file", ["write-eval", "e.jsonl", "--source", "coco"],
                                "--coco-dir", "DIR", "coco_captions", lambda a, kw: kw["coco_dir"]),
    "evaluate --claims": Helper(evaluate, "write_scifact_beir", ["scifact-beir", "b"], "--claims", "FILE",
                                "scifact/claims_dev.jsonl", lambda a, kw: a[1]),
    "evaluate --corpus": Helper(evaluate, "write_scifact_beir", ["scifact-beir", "b", "--claims", "c.jsonl"],
                                "--corpus", "FILE", "scifact/corpus_subset.jsonl", lambda a, kw: a[2]),
}


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_a_helper_reads_its_default_beside_the_repository(outside: Path, monkeypatch, name: str) -> None:
    helper = HELPERS[name]

    def work(*args: Any, **kwargs: Any) -> None:
        raise _Called(helper.given(args, kwargs))

    monkeypatch.setattr(helper.module, helper.work, work)
    run = helper.module.main if helper.module is decompose_data else helper.module._main
    with pytest.raises(ConfigError) as err:
        run(helper.argv)
    assert str(err.value) == f"{helper.flag}: {_nowhere(outside)} {helper.flag} {helper.metavar}"
    beside = outside / "clone" / "shared" / "data"
    beside.mkdir(parents=True)
    with pytest.raises(_Called) as called:
        run(helper.argv)
    assert called.value.args[0] == beside / helper.under
    with pytest.raises(_Called) as called:
        run([*helper.argv, helper.flag, "mine"])
    assert called.value.args[0] == Path("mine")  # given: as given, the current folder's


def test_images_synthetic_source_needs_no_data_folder(outside: Path, monkeypatch) -> None:
    def write_placement_file(*args: Any, **kwargs: Any) -> None:
        raise _Called(kwargs["coco_dir"])

    monkeypatch.setattr(images, "write_placement_file", write_placement_file)
    with pytest.raises(_Called) as called:
        images._main(["write-eval", str(outside / "e.jsonl")])
    assert called.value.args[0] == f"{SHARED_DATA}/coco_captions"  # unread, so not looked for


@pytest.mark.parametrize("module", [decompose_data, evaluate, images], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_helpers_name_the_folder_by_the_one_constant(module) -> None:
    assert f'"{SHARED_DATA}' not in inspect.getsource(module)  # no literal copy of the folder's name
