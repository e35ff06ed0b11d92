"""``make-routing-set`` / ``make-pipeline-set`` find their default ``--data-dir
../shared/data`` as the recipes find their data paths: in the current folder, else beside the
repository.

They looked in the current folder only: run from outside the clone, the default failed with
"not found" although the data sat beside the repository, where the recipes read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from searchsmith.serving.main import main
from searchsmith.training import data as training_data
from tiny_shared_data import cast_and_multihop


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository at tmp/clone/repo, run from tmp/away/here (no ../shared/data there)."""
    (tmp_path / "clone" / "repo").mkdir(parents=True)
    monkeypatch.setattr(training_data, "REPO_ROOT", tmp_path / "clone" / "repo")
    (tmp_path / "away" / "here").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "away" / "here")
    return tmp_path


def test_the_default_is_read_beside_the_repository_from_outside_it(outside: Path, capsys) -> None:
    cast_and_multihop(outside / "clone" / "shared" / "data", topics=2)
    assert main(["make-routing-set", "cast", "--out", str(outside / "r")]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == 2
    assert main(["make-pipeline-set", "multihop", "--out", str(outside / "p")]) == 0
    assert json.loads(capsys.readouterr().out)["questions"] == 2


def test_the_current_folder_comes_first(outside: Path, capsys) -> None:
    cast_and_multihop(outside / "clone" / "shared" / "data", topics=2)
    cast_and_multihop(outside / "away" / "shared" / "data", topics=3)
    assert main(["make-routing-set", "cast", "--out", str(outside / "r")]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == 3


@pytest.mark.parametrize("command", ["make-routing-set cast", "make-pipeline-set multihop"])
def test_a_default_found_nowhere_names_both_places_and_the_fix(outside: Path, capsys, command: str) -> None:
    assert main([*command.split(), "--out", str(outside / "o")]) == 1
    err = capsys.readouterr().err
    assert (f"{command.split()[0]}: no ../shared/data in the current folder ({outside / 'away' / 'shared' / 'data'}) "
            f"nor beside the repository ({outside / 'clone' / 'shared' / 'data'}); put the shared data there, or "
            "pass --data-dir DIR") in err
    assert not (outside / "o").exists()


def test_a_given_data_dir_is_read_as_given(outside: Path, capsys) -> None:
    cast_and_multihop(outside / "clone" / "shared" / "data", topics=2)
    mine = cast_and_multihop(outside / "mine", topics=3)
    assert main(["make-routing-set", "cast", "--data-dir", str(mine), "--out", str(outside / "r")]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == 3
    # a relative one is the current folder's, as before: not looked for beside the repository
    assert main(["make-routing-set", "cast", "--data-dir", "../../clone/nope", "--out", str(outside / "s")]) == 1
    assert "not found; pass --data-dir" in capsys.readouterr().err
