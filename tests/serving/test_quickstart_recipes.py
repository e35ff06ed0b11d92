"""Every recipe the quickstart trains loads, in both profiles, and the full profile's recipes
load with the overrides it uses when ../shared/data is absent (a recipe that leaves a real set
out must drop that with the set)."""

from __future__ import annotations

from pathlib import Path

import pytest
from searchsmith.serving.quickstart import MODELS
from searchsmith.training.config import load_recipe_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("step", MODELS, ids=[m.name for m in MODELS])
def test_quickstart_recipes_load_with_and_without_the_shared_data(step) -> None:
    load_recipe_config(RECIPES / step.quick, [])
    load_recipe_config(RECIPES / step.full, [])
    offline = load_recipe_config(RECIPES / step.full, list(step.offline))
    assert not getattr(offline.data, "leave_out", [])  # nothing real to leave out
