"""``quickstart --profile full --shared-data DIR`` trains on DIR.

The flag was only checked with ``is_dir()``: the recipes still named ``../shared/data/...``, so a
user whose data lived elsewhere got ``data file '../shared/data/scifact/claims_dev.jsonl' not
found`` after the check passed, and one who also had a ``../shared/data`` trained on it without
a word. No test here trains: the recipe functions are replaced by a recorder of their config.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
from quickstart_recorder import Stop, record_recipes
from searchsmith.models.errors import ConfigError
from searchsmith.serving import quickstart as q
from searchsmith.training.data import SHARED_DATA, shared_data_settings
from shared_data_layout import data_folder


def _str_settings(cfg: Any) -> dict[str, str]:
    return {f.name: getattr(cfg.data, f.name) for f in dataclasses.fields(cfg.data)
            if isinstance(getattr(cfg.data, f.name), str)}


@dataclasses.dataclass(frozen=True)
class _Data:
    claims: str = "../shared/data/scifact/claims_dev.jsonl"
    data_dir: str = "../shared/data"
    mine: str = "/home/me/my_claims.jsonl"
    lookalike: str = "../shared/database/x.jsonl"  # a prefix of the name, not of the path
    corpus: str = "demo"
    count: int = 3


def test_settings_under_the_default_folder_move_and_no_other() -> None:
    moved = shared_data_settings(_Data(), "/data/s")
    assert moved == {"data.claims": "/data/s/scifact/claims_dev.jsonl", "data.data_dir": "/data/s"}


def test_a_relative_folder_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert shared_data_settings(_Data(), "mine")["data.claims"] == str(tmp_path / "mine/scifact/claims_dev.jsonl")


@pytest.mark.parametrize("folder", [SHARED_DATA, SHARED_DATA + "/", "../shared/./data"])
def test_the_default_folder_moves_nothing(folder: str) -> None:
    assert shared_data_settings(_Data(), folder) == {}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every recipe the quickstart calls records its config instead of training; the last
    step (reader) then stops the quickstart before the export."""
    return record_recipes(monkeypatch)


def _args(work: Path, shared: Path | str, profile: str = "full") -> argparse.Namespace:
    return argparse.Namespace(workdir=str(work), profile=profile, shared_data=str(shared), export_workers=None)


def test_every_full_recipe_reads_the_given_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  recorded: dict[str, Any]) -> None:
    # the trap of the bug: a ../shared/data of the current folder that the recipes used to read
    decoy = data_folder(tmp_path / "shared" / "data")
    monkeypatch.chdir(tmp_path / "shared")
    mine = data_folder(tmp_path / "elsewhere")
    with pytest.raises(Stop):
        q.run_quickstart(_args(tmp_path / "work", mine))
    assert sorted(recorded) == sorted(m.name for m in q.MODELS)
    for name, cfg in recorded.items():
        paths = _str_settings(cfg)
        assert not [v for v in paths.values() if v.startswith(SHARED_DATA) or v.startswith(str(decoy))], name
    assert recorded["reranker"].data.scifact_claims == str(mine / "scifact/claims_dev.jsonl")
    assert recorded["reranker"].data.wikimultihop == str(mine / "2wikimultihopqa/2wikimultihopqa_dev.jsonl")
    assert recorded["decomposer"].data.data_dir == str(mine)
    assert recorded["citation"].data.wice == str(mine / "wice/wice_claim_dev.jsonl")
    assert recorded["citation"].data.synthetic_corpus == "demo"
    assert recorded["images"].data.coco_dir == str(mine / "coco_captions")
    assert recorded["reader"].data.musique == str(mine / "musique/musique_ans_200.jsonl")
    # the real sources stay in use (not the synthetic fallback of an absent folder)
    assert "scifact" in recorded["reranker"].data.sources and "coco_captions" in recorded["images"].data.sources


def test_a_missing_file_is_named_before_anything_trains(tmp_path: Path, recorded: dict[str, Any]) -> None:
    mine = data_folder(tmp_path / "elsewhere")
    (mine / "break_qdmr/dev.jsonl").unlink()
    shutil.rmtree(mine / "coco_captions")
    with pytest.raises(ConfigError) as err:
        q.run_quickstart(_args(tmp_path / "work", mine))
    text = str(err.value)
    assert text.startswith(f"--shared-data {mine}: the folder lacks 2 file(s)")
    assert f"decomposer (decomposer/minilm_tagger.yaml): data.sources break_qdmr {mine / 'break_qdmr/dev.jsonl'}" in text
    assert f"images (images/minilm_cnn.yaml): data.coco_dir {mine / 'coco_captions'}" in text
    assert "put them there, laid out as in ../shared/data" in text
    assert recorded == {} and not (tmp_path / "work").exists()


def test_a_folder_that_is_not_there_is_refused(tmp_path: Path, recorded: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"--shared-data .*missing: not found; give the folder of the real sets"):
        q.run_quickstart(_args(tmp_path / "work", tmp_path / "missing"))
    assert recorded == {}


def test_an_empty_folder_name_is_refused(tmp_path: Path, recorded: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="--shared-data is empty"):
        q.run_quickstart(_args(tmp_path / "work", " "))
    assert recorded == {}


def test_the_quick_profile_refuses_the_flag_it_would_ignore(tmp_path: Path, recorded: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="the quick profile trains on synthetic data only .* add --profile full"):
        q.run_quickstart(_args(tmp_path / "work", data_folder(tmp_path / "d"), profile="quick"))
    assert recorded == {}


def test_a_path_the_recipe_sets_elsewhere_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipes = tmp_path / "recipes"
    shutil.copytree(q.recipes_dir() / "reranker", recipes / "reranker")
    yaml_path = recipes / q.MODELS[0].full
    text = yaml_path.read_text()
    assert "  scifact_claims: ../shared/data/scifact/claims_dev.jsonl\n" in text
    yaml_path.write_text(text.replace("  scifact_claims: ../shared/data/scifact/claims_dev.jsonl\n",
                                      "  scifact_claims: /home/me/claims.jsonl\n"))
    monkeypatch.setattr(q, "recipes_dir", lambda: recipes)
    mine = data_folder(tmp_path / "elsewhere")
    cfg, moved = q._recipe_config(q.MODELS[0], "full", tmp_path / "run", mine)
    assert cfg.data.scifact_claims == "/home/me/claims.jsonl" and "data.scifact_claims" not in moved
    assert cfg.data.scifact_corpus == str(mine / "scifact/corpus_subset.jsonl")
    # the preflight checks only what the flag moved: the user's own file is the recipe's to check
    q.check_shared_data("full", str(mine), [(q.MODELS[0], tmp_path / "run")])


def test_the_default_folder_moves_the_recipes_into_the_folder_found(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The default is found as the recipes find their paths (tests/serving/test_quickstart_default_data.py),
    then every setting under it points into that one folder; the rest of the recipe is as written."""
    found = data_folder(tmp_path / "shared" / "data")
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")  # ../shared/data is there
    from searchsmith.training.config import load_recipe_config

    assert q.data_folder("full", SHARED_DATA) == found.resolve()
    for step in q.MODELS:
        run = tmp_path / "runs" / step.name
        cfg, moved = q._recipe_config(step, "full", run, q.data_folder("full", SHARED_DATA))
        written = load_recipe_config(q.recipes_dir() / step.full, [f"output_dir={run}"])
        assert moved == shared_data_settings(written.data, found.resolve()) and moved, step.name
        assert not [v for v in _str_settings(cfg).values() if v.startswith(SHARED_DATA)], step.name
        assert cfg.data.sources == written.data.sources, step.name  # the real sources, not the fallback
        assert dataclasses.replace(cfg, data=written.data) == written, step.name  # only data.* moved
    q.check_shared_data("full", SHARED_DATA, [])  # never refused: absent, the recipes train on synthetic data
