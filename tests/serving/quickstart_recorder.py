"""The quickstart's tests train nothing: every recipe is replaced by a recorder of the config it
is called with (three quickstart test files each kept a copy of it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from searchsmith.serving import quickstart as q
from searchsmith.training import registry


class Stop(Exception):
    """Raised by the recorder at the step it stops at: the quickstart goes no further."""


def record_recipes(monkeypatch: pytest.MonkeyPatch, stop_at: str | None = q.MODELS[-1].name) -> dict[str, Any]:
    """Replace every registered recipe with a recorder, for the test's duration.

    Args:
        stop_at: the step whose recipe raises :class:`Stop` once recorded (default the last,
            so the quickstart stops before the export); None: none stops.

    Returns:
        run folder name -> the config its recipe was last called with; each run recorded and
        not stopped is left finished (``model/``, ``metrics.json``), as a training leaves it.
    """
    seen: dict[str, Any] = {}

    def record(cfg: Any, run_dir: Path, force: bool = False) -> dict:
        seen[run_dir.name] = cfg
        if run_dir.name == stop_at:
            raise Stop
        (run_dir / "model").mkdir(parents=True, exist_ok=True)
        (run_dir / "metrics.json").write_text("{}")
        return {}

    registry.import_recipe_modules()  # registered now, so not again over the recorder below
    for name, entry in list(registry._RECIPES.items()):
        monkeypatch.setitem(registry._RECIPES, name, dataclasses.replace(entry, fn=record))
    return seen
