"""Name -> function tables for recipes, losses and datasets.

A recipe module registers itself when imported::

    @register_recipe("reranker", RerankerRecipe)
    def reranker(cfg: RerankerRecipe, run_dir: Path, force: bool = False) -> dict: ...

``get_recipe`` imports the recipe modules listed in ``RECIPE_MODULES`` first, so a YAML
file can name any of them without the caller importing anything. A module in that list
that does not exist yet is skipped; every other import error propagates.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from searchsmith.models.config import closest_key
from searchsmith.models.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

# Modules that register recipes, losses and datasets when imported (one per task).
RECIPE_MODULES: tuple[str, ...] = (
    "searchsmith.training.reranker",
    "searchsmith.training.decomposer",
    "searchsmith.training.citation",
    "searchsmith.training.images",
    "searchsmith.training.reader",
)


@dataclass(frozen=True)
class RecipeEntry:
    """A registered recipe: its name, typed config class and the function that runs it."""

    name: str
    config_cls: type
    fn: Callable[..., dict[str, Any]]


_RECIPES: dict[str, RecipeEntry] = {}
_LOSSES: dict[str, Callable[..., Any]] = {}
_DATASETS: dict[str, Callable[..., Any]] = {}


def _register(table: dict[str, Any], kind: str, name: str, value: Any) -> None:
    old = table.get(name)
    if old is not None:
        key = lambda v: (getattr(getattr(v, "fn", v), "__module__", None),  # noqa: E731
                         getattr(getattr(v, "fn", v), "__qualname__", None))
        # The same function again (a module re-imported by a test) is fine; another is a clash.
        if key(old) != key(value):
            raise ConfigError(f"{kind} {name!r} is registered twice ({key(old)} and {key(value)})")
    table[name] = value


def register_recipe(name: str, config_cls: type) -> Callable[[F], F]:
    """Decorator: register ``fn(cfg, run_dir, force=False) -> final metrics`` as recipe ``name``."""

    def wrap(fn: F) -> F:
        _register(_RECIPES, "recipe", name, RecipeEntry(name, config_cls, fn))
        return fn

    return wrap


def register_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a loss function under ``name`` (the YAML ``loss:`` value)."""

    def wrap(fn: F) -> F:
        _register(_LOSSES, "loss", name, fn)
        return fn

    return wrap


def register_dataset(name: str) -> Callable[[F], F]:
    """Decorator: register a dataset builder under ``name`` (a YAML ``data.sources`` entry)."""

    def wrap(fn: F) -> F:
        _register(_DATASETS, "dataset", name, fn)
        return fn

    return wrap


def import_recipe_modules() -> None:
    """Import every module of ``RECIPE_MODULES`` that exists in this build."""
    for module in RECIPE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a real missing dependency inside the module
                raise


def _lookup(table: dict[str, Any], kind: str, name: str, field: str) -> Any:
    if name in table:
        return table[name]
    hint = closest_key(name, table)
    fix = f"; did you mean {hint!r}?" if hint else ""
    raise ConfigError(f"{field}: unknown {kind} {name!r}{fix} (registered: {sorted(table)})")


def get_recipe(name: str) -> RecipeEntry:
    """The registered recipe ``name``; ConfigError with the closest name when unknown."""
    import_recipe_modules()
    return _lookup(_RECIPES, "recipe", name, "recipe")


def get_loss(name: str, field: str = "loss") -> Callable[..., Any]:
    """The registered loss ``name``."""
    import_recipe_modules()
    return _lookup(_LOSSES, "loss", name, field)


def get_dataset(name: str, field: str = "data.sources") -> Callable[..., Any]:
    """The registered dataset builder ``name``."""
    import_recipe_modules()
    return _lookup(_DATASETS, "dataset", name, field)


def recipe_names() -> list[str]:
    import_recipe_modules()
    return sorted(_RECIPES)


def loss_names() -> list[str]:
    import_recipe_modules()
    return sorted(_LOSSES)


def dataset_names() -> list[str]:
    import_recipe_modules()
    return sorted(_DATASETS)


__all__ = [
    "RECIPE_MODULES",
    "RecipeEntry",
    "dataset_names",
    "get_dataset",
    "get_loss",
    "get_recipe",
    "import_recipe_modules",
    "loss_names",
    "recipe_names",
    "register_dataset",
    "register_loss",
    "register_recipe",
]
