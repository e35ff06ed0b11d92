"""Every YAML under recipes/ (found with rglob) loads and validates against its registered
recipe config; every tiny twin is small enough for the test suite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from searchsmith.models.config import read_yaml
from searchsmith.models.errors import ConfigError
from searchsmith.training.config import load_recipe_config, recipe_name
from searchsmith.training.registry import get_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FILES = sorted(RECIPES.rglob("*.yaml"))


def test_recipes_are_found() -> None:
    assert any(p.parent.name == "tiny" for p in FILES)
    assert (RECIPES / "reranker" / "minilm_full.yaml") in FILES


# recipes/<task>/<base>_<method>.yaml, with tiny/ twins (the suite trains them) and quick/
# budgets (searchsmith quickstart) under the task folder, named the same way.
NAME = re.compile(r"[a-z0-9][a-z0-9.-]*_[a-z0-9][a-z0-9.-]*\.yaml")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RECIPES)))
def test_recipe_path_is_task_budget_base_method(path: Path) -> None:
    parts = path.relative_to(RECIPES).parts
    assert NAME.fullmatch(parts[-1]), f"{path}: name it <base>_<method>.yaml"
    assert len(parts) == 2 or (len(parts) == 3 and parts[1] in ("tiny", "quick")), \
        f"{path}: expected recipes/<task>/[tiny/|quick/]<base>_<method>.yaml"
    assert parts[0] == recipe_name(path), f"{path}: the folder must be the recipe's task"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RECIPES)))
def test_recipe_validates(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{path}: must start with a header comment (what, data, command)"
    assert "searchsmith train" in text.split("\nrecipe:")[0], f"{path}: header must give the command"
    name = recipe_name(path)
    try:
        entry = get_recipe(name)
    except ConfigError as exc:
        pytest.fail(f"{path}: recipe {name!r} is not registered: {exc}")
    cfg = load_recipe_config(path)
    assert isinstance(cfg, entry.config_cls)
    if path.parent.name == "tiny":
        assert cfg.optim.max_steps <= 20, f"{path}: a tiny twin trains a few steps only"
    assert read_yaml(path)["recipe"] == cfg.recipe
