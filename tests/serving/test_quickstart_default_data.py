"""``quickstart --profile full`` finds its default ``../shared/data`` as the recipes find their
paths: in the current folder, else beside the repository.

It looked in the current folder only, while the recipes (``resolve_data_path``) also look
beside the repository: run from outside the clone, the full profile trained every model on
the synthetic fallback without a word although the real sets sat beside the repository. Now
the folder found is the one every recipe reads, and a fallback to synthetic data is said on
each step's line, with the folders looked in and the fix. No test here trains: the recipe
functions are replaced by a recorder of their config.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pytest
from quickstart_recorder import Stop, record_recipes
from searchsmith.models.errors import ConfigError
from searchsmith.serving import quickstart as q
from searchsmith.training import data as training_data
from searchsmith.training.data import SHARED_DATA, find_data_folder
from shared_data_layout import data_folder


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every recipe records its config instead of training; the last step stops the run."""
    return record_recipes(monkeypatch)


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository at tmp/clone/repo, run from tmp/away/here: no ../shared/data in the
    current folder; beside the repository is tmp/clone/shared/data (made by the test)."""
    repo = tmp_path / "clone" / "repo"
    repo.mkdir(parents=True)
    monkeypatch.setattr(training_data, "REPO_ROOT", repo)
    (tmp_path / "away" / "here").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "away" / "here")
    return tmp_path


def _args(work: Path, profile: str = "full") -> argparse.Namespace:
    return argparse.Namespace(workdir=str(work), profile=profile, shared_data=SHARED_DATA, export_workers=None)


def test_the_folder_is_looked_for_here_then_beside_the_repository(outside: Path) -> None:
    assert find_data_folder() is None and q.data_folder("full", SHARED_DATA) is None
    beside = (outside / "clone" / "shared" / "data")
    beside.mkdir(parents=True)
    assert find_data_folder() == beside.resolve() == q.data_folder("full", SHARED_DATA)
    here = outside / "away" / "shared" / "data"
    here.mkdir(parents=True)
    assert q.data_folder("full", SHARED_DATA) == here.resolve()  # the current folder first, as the recipes
    assert q.data_folder("full", "../shared/./data") == here.resolve()  # the default however spelled
    assert q.data_folder("quick", SHARED_DATA) is None  # the quick profile reads no data folder


def test_run_from_outside_the_repository_the_full_profile_reads_the_data_beside_it(
        outside: Path, recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    beside = data_folder(outside / "clone" / "shared" / "data").resolve()
    with pytest.raises(Stop):
        q.run_quickstart(_args(outside / "work"))
    assert sorted(recorded) == sorted(m.name for m in q.MODELS)
    assert recorded["reranker"].data.scifact_claims == str(beside / "scifact/claims_dev.jsonl")
    assert recorded["decomposer"].data.data_dir == str(beside)
    assert recorded["citation"].data.wice == str(beside / "wice/wice_claim_dev.jsonl")
    assert recorded["images"].data.coco_dir == str(beside / "coco_captions")
    assert recorded["reader"].data.musique == str(beside / "musique/musique_ans_200.jsonl")
    assert "scifact" in recorded["reranker"].data.sources and "coco_captions" in recorded["images"].data.sources
    out = capsys.readouterr().out
    for step in q.MODELS:
        run = outside / "work" / "runs" / step.name
        assert f"train {step.name} (full) -> {run} on the real sets in {beside}\n" in out
    assert "synthetic" not in out


def test_a_fallback_to_synthetic_data_is_said_on_every_step_line(
        outside: Path, recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Stop):
        q.run_quickstart(_args(outside / "work"))
    assert recorded["reranker"].data.sources == ["synthetic"]
    assert recorded["images"].data.sources == ["synthetic_images"]
    lines = [line for line in capsys.readouterr().out.splitlines() if " train " in line]
    assert len(lines) == len(q.MODELS)
    here, beside = outside / "away" / "shared" / "data", outside / "clone" / "shared" / "data"
    for line in lines:
        assert line.endswith(f"on synthetic data: no ../shared/data in the current folder ({here}) nor beside the "
                             f"repository ({beside}); put the real sets there, or pass --shared-data DIR"), line


def test_the_quick_profile_line_names_no_data_folder(outside: Path, recorded: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data_folder(outside / "clone" / "shared" / "data")
    with pytest.raises(Stop):
        q.run_quickstart(_args(outside / "work", profile="quick"))
    assert recorded["reranker"].data.sources == ["synthetic"]
    assert f"train reranker (quick) -> {outside / 'work' / 'runs' / 'reranker'}\n" in capsys.readouterr().out


# The default folder, where found, gets the missing-file check --shared-data DIR gets: it was
# not checked at all, so a folder lacking a file trained the models before it (for minutes on
# the full profile) and then failed at the step reading it, a half-trained work folder behind.


@pytest.mark.parametrize("where", ["beside the repository", "in the current folder"])
def test_a_default_folder_lacking_files_is_refused_before_anything_trains(
        outside: Path, recorded: dict[str, Any], where: str) -> None:
    root = outside / ("clone" if where == "beside the repository" else "away") / "shared" / "data"
    found = data_folder(root)
    (found / "wice/wice_claim_dev.jsonl").unlink()
    (found / "strategyqa/strategyqa_229.jsonl").unlink()
    with pytest.raises(ConfigError) as err:
        q.run_quickstart(_args(outside / "work"))
    text = str(err.value)
    assert text.startswith(f"../shared/data (the default data folder, found at {found}): the folder lacks 2 file(s) "
                           "the full recipes read:\n")
    assert (f"  decomposer (decomposer/minilm_tagger.yaml): data.sources strategyqa "
            f"{found / 'strategyqa/strategyqa_229.jsonl'}\n") in text
    assert f"  citation (citation/minilm_full.yaml): data.wice {found / 'wice/wice_claim_dev.jsonl'}\n" in text
    assert text.endswith("\ncomplete the folder (put them there, laid out as in ../shared/data); or pass "
                         "--shared-data DIR, a folder that holds them; or use --profile quick (synthetic data only)")
    assert recorded == {} and not (outside / "work").exists()


def test_the_default_and_a_given_folder_are_checked_by_one_rule(outside: Path) -> None:
    """The same folder lacking the same files: the same list, whether found or given."""
    found = data_folder(outside / "clone" / "shared" / "data")
    shutil.rmtree(found / "coco_captions")
    (found / "break_qdmr/dev.jsonl").unlink()
    steps = [(step, outside / "work" / "runs" / step.name) for step in q.MODELS]
    lists = []
    for shared in (SHARED_DATA, str(found)):
        with pytest.raises(ConfigError) as err:
            q.check_shared_data("full", shared, steps)
        lists.append([line for line in str(err.value).splitlines() if line.startswith("  ")])
    assert lists[0] == lists[1] and len(lists[0]) == 2
    # what is not to be trained again is not checked: a finished run's data may have moved on
    q.check_shared_data("full", SHARED_DATA, [s for s in steps if s[0].name not in ("decomposer", "images")])
    q.check_shared_data("quick", SHARED_DATA, steps)  # the quick profile reads no data folder


def test_a_complete_default_folder_and_an_absent_one_pass(outside: Path) -> None:
    steps = [(step, outside / "work" / "runs" / step.name) for step in q.MODELS]
    q.check_shared_data("full", SHARED_DATA, steps)  # absent: the synthetic fallback, said on each line
    data_folder(outside / "clone" / "shared" / "data")
    q.check_shared_data("full", SHARED_DATA, steps)
