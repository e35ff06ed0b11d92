"""A quickstart rerun reuses a run only while it was trained on what it would be trained on now.

Reuse asked only whether ``metrics.json`` and ``model/`` were there: a rerun with another
``--shared-data``, with the real data found where the first run fell back to synthetic data,
or with ``--profile full`` after ``quick`` reused the old models and said "reusing". Each run
folder now records what it was trained on (``quickstart.json``: recipe, data folder, data
settings); a run of other data is trained afresh and its line says why. No test here trains:
the recipe functions are replaced by a recorder, and the quickstart stops before the export.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from quickstart_recorder import Stop, record_recipes
from searchsmith.models.errors import ConfigError
from searchsmith.serving import quickstart as q
from searchsmith.training import data as training_data
from searchsmith.training.data import SHARED_DATA
from shared_data_layout import data_folder

NAMES = [m.name for m in q.MODELS]


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every recipe records its config (name -> config of the last training) and writes a
    finished run; the quickstart stops at the export."""
    def stop(*args: Any) -> None:
        raise Stop

    monkeypatch.setattr(q, "_export_reason", stop)
    return record_recipes(monkeypatch, stop_at=None)


@pytest.fixture(autouse=True)
def no_data_beside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own ../shared/data beside the clone stays out of these tests."""
    (tmp_path / "clone" / "repo").mkdir(parents=True)
    monkeypatch.setattr(training_data, "REPO_ROOT", tmp_path / "clone" / "repo")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")


def _run(work: Path, capsys: pytest.CaptureFixture[str], shared: Path | str = SHARED_DATA,
         profile: str = "full") -> dict[str, str]:
    """One quickstart up to the export: each model's train line."""
    with pytest.raises(Stop):
        q.run_quickstart(argparse.Namespace(workdir=str(work), profile=profile, shared_data=str(shared),
                                            export_workers=None))
    lines = [line for line in capsys.readouterr().out.splitlines() if " train " in line]
    return {name: next(line for line in lines if f" train {name}" in line) for name in NAMES}


def test_a_rerun_on_the_same_data_reuses_every_run(tmp_path: Path, trained: dict[str, Any], capsys) -> None:
    a = data_folder(tmp_path / "a")
    _run(tmp_path / "w", capsys, a)
    record = json.loads((tmp_path / "w" / "runs" / "reranker" / q.TRAINED_ON).read_text())
    assert record["recipe"] == "reranker/minilm_full.yaml" and record["data_folder"] == str(a)
    assert record["data"]["scifact_claims"] == str(a / "scifact/claims_dev.jsonl")
    trained.clear()
    lines = _run(tmp_path / "w", capsys, a)
    assert trained == {}
    for name in NAMES:
        assert lines[name].endswith(f"train {name}: reusing {tmp_path / 'w' / 'runs' / name}, trained on the real "
                                    f"sets in {a}"), lines[name]


def test_a_rerun_on_another_folder_trains_every_run_again_on_it(tmp_path: Path, trained: dict[str, Any],
                                                                capsys) -> None:
    a, b = data_folder(tmp_path / "a"), data_folder(tmp_path / "b")
    _run(tmp_path / "w", capsys, a)
    trained.clear()
    lines = _run(tmp_path / "w", capsys, b)
    assert sorted(trained) == sorted(NAMES)
    assert trained["reranker"].data.scifact_claims == str(b / "scifact/claims_dev.jsonl")
    for name in NAMES:
        run = tmp_path / "w" / "runs" / name
        assert lines[name].endswith(f"train {name} (full) -> {run} on the real sets in {b}; training it again: it "
                                    f"was trained on the real sets in {a}"), lines[name]
        assert json.loads((run / q.TRAINED_ON).read_text())["data_folder"] == str(b)


def test_a_run_to_train_again_holding_a_users_file_is_refused_and_kept(tmp_path: Path, trained: dict[str, Any],
                                                                        capsys) -> None:
    # training afresh removes what a run writes, never what the user put beside it
    a, b = data_folder(tmp_path / "a"), data_folder(tmp_path / "b")
    _run(tmp_path / "w", capsys, a)
    run = tmp_path / "w" / "runs" / "reranker"
    (run / "notes.txt").write_text("my notes on the run on a")
    (run / "heldout.cite.jsonl").write_text("{}\n")  # a run's own file
    trained.clear()
    with pytest.raises(ConfigError, match=r"reranker must be trained afresh, but it holds what a training run does "
                                          r"not write \(notes\.txt\); nothing was removed"):
        q.run_quickstart(argparse.Namespace(workdir=str(tmp_path / "w"), profile="full", shared_data=str(b),
                                            export_workers=None))
    assert (run / "notes.txt").read_text() == "my notes on the run on a"
    assert (run / "metrics.json").is_file() and (run / "model").is_dir() and (run / "heldout.cite.jsonl").is_file()
    (run / "notes.txt").unlink()
    _run(tmp_path / "w", capsys, b)
    assert not (run / "heldout.cite.jsonl").exists() and (run / "metrics.json").is_file()


def test_the_old_runs_files_do_not_survive_a_retraining(tmp_path: Path, trained: dict[str, Any], capsys) -> None:
    a, b = data_folder(tmp_path / "a"), data_folder(tmp_path / "b")
    _run(tmp_path / "w", capsys, a)
    leftover = tmp_path / "w" / "runs" / "reranker" / "checkpoints" / "step-10" / "state.json"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("{}")
    _run(tmp_path / "w", capsys, b)
    assert not leftover.exists() and (tmp_path / "w" / "runs" / "reranker" / "metrics.json").is_file()


def test_real_data_found_after_a_synthetic_fallback_trains_again(tmp_path: Path, trained: dict[str, Any],
                                                                 capsys) -> None:
    lines = _run(tmp_path / "w", capsys)
    assert trained["reranker"].data.sources == ["synthetic"]
    assert "on synthetic data: no ../shared/data" in lines["reranker"]
    beside = data_folder(tmp_path / "clone" / "shared" / "data")
    trained.clear()
    lines = _run(tmp_path / "w", capsys)
    assert sorted(trained) == sorted(NAMES) and "scifact" in trained["reranker"].data.sources
    assert lines["reranker"].endswith(f"on the real sets in {beside}; training it again: it was trained on "
                                      "synthetic data (no real data folder found)"), lines["reranker"]
    # and back: the real data gone, the fallback is not taken for what the runs were trained on
    trained.clear()
    for path in sorted(beside.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    beside.rmdir()
    lines = _run(tmp_path / "w", capsys)
    assert sorted(trained) == sorted(NAMES)
    assert "on synthetic data: no ../shared/data in the current folder" in lines["images"]
    assert lines["images"].endswith(f"; training it again: it was trained on the real sets in {beside}")


def test_the_full_profile_after_the_quick_one_trains_again(tmp_path: Path, trained: dict[str, Any], capsys) -> None:
    a = data_folder(tmp_path / "a")
    _run(tmp_path / "w", capsys, profile="quick")
    trained.clear()
    lines = _run(tmp_path / "w", capsys, a)
    assert sorted(trained) == sorted(NAMES)
    assert lines["citation"].endswith("; training it again: it was trained by the quick profile's recipe "
                                      "citation/quick/minilm_full.yaml"), lines["citation"]
    trained.clear()
    lines = _run(tmp_path / "w", capsys, profile="quick")  # and back
    assert sorted(trained) == sorted(NAMES)
    assert lines["citation"].endswith("training it again: it was trained by the full profile's recipe "
                                      "citation/minilm_full.yaml"), lines["citation"]


def test_changed_data_settings_train_again_naming_them(tmp_path: Path, trained: dict[str, Any], capsys,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path / "w", capsys, profile="quick")
    record = tmp_path / "w" / "runs" / "reader" / q.TRAINED_ON
    held = json.loads(record.read_text())
    held["data"]["synthetic_questions"] += 1
    record.write_text(json.dumps(held))
    trained.clear()
    lines = _run(tmp_path / "w", capsys, profile="quick")
    assert list(trained) == ["reader"]
    assert lines["reader"].endswith("; training it again: its data settings changed since "
                                    "(data.synthetic_questions)"), lines["reader"]


@pytest.mark.parametrize("damage", ["missing", "unreadable"])
def test_a_run_that_does_not_say_what_it_was_trained_on_trains_again(tmp_path: Path, trained: dict[str, Any],
                                                                     capsys, damage: str) -> None:
    _run(tmp_path / "w", capsys, profile="quick")
    record = tmp_path / "w" / "runs" / "decomposer" / q.TRAINED_ON
    record.unlink() if damage == "missing" else record.write_text("{bad")
    trained.clear()
    lines = _run(tmp_path / "w", capsys, profile="quick")
    assert list(trained) == ["decomposer"]
    why = ("it holds no record of the data it was trained on (quickstart.json; an earlier quickstart's run)"
           if damage == "missing" else f"its record of the data it was trained on ({record}) is unreadable")
    assert lines["decomposer"].endswith(f"; training it again: {why}"), lines["decomposer"]
    assert json.loads(record.read_text())["recipe"] == "decomposer/quick/minilm_tagger.yaml"


def test_an_unfinished_run_is_resumed_on_the_same_data_and_started_afresh_on_other(
        tmp_path: Path, trained: dict[str, Any], capsys) -> None:
    a, b = data_folder(tmp_path / "a"), data_folder(tmp_path / "b")
    _run(tmp_path / "w", capsys, a)
    run = tmp_path / "w" / "runs" / "images"
    (run / "metrics.json").unlink()  # interrupted before the end: a checkpoint to resume
    (run / "checkpoints").mkdir()
    lines = _run(tmp_path / "w", capsys, a)
    assert lines["images"].endswith(f"-> {run} on the real sets in {a}") and (run / "checkpoints").is_dir()
    (run / "metrics.json").unlink()
    lines = _run(tmp_path / "w", capsys, b)
    assert lines["images"].endswith(f"; starting it afresh: it was trained on the real sets in {a}")
    assert not (run / "checkpoints").exists()


def test_a_folder_of_the_users_is_neither_trained_into_nor_removed(tmp_path: Path, trained: dict[str, Any],
                                                                   capsys) -> None:
    run = tmp_path / "w" / "runs" / "reranker"
    (run / "model").mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds no training run"):
        q.run_quickstart(argparse.Namespace(workdir=str(tmp_path / "w"), profile="quick", shared_data=SHARED_DATA,
                                            export_workers=None))
    assert "training it again: it holds no record" in capsys.readouterr().out
    assert (run / "notes.txt").read_text() == "mine" and (run / "metrics.json").is_file() and trained == {}
