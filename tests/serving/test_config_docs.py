"""Every config key and environment variable is documented (serving/config_docs.py, README)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from searchsmith.serving.config_docs import ROOTS, describe, load_root, render
from searchsmith.serving.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(ROOTS))
def test_every_config_key_has_a_description(name: str):
    undocumented = [k.path for k in describe(load_root(name)) if not k.doc.strip()]
    assert undocumented == [], (f"config {name!r}: document these keys (an 'Attributes:' entry in the "
                                f"class docstring or a comment above the field): {undocumented}")


def test_the_reference_shows_the_code_defaults(capsys):
    from searchsmith.serving.pipeline.config import PipelineConfig

    cfg = PipelineConfig()
    assert main(["config", "pipeline"]) == 0
    out = capsys.readouterr().out
    assert f"retrieval.dedup_threshold: float = {cfg.retrieval.dedup_threshold!r}\n" in out
    assert f"retrieval.keep_ratio: float = {cfg.retrieval.keep_ratio!r}\n" in out
    assert "(undocumented)" not in out
    for key in describe(PipelineConfig):
        assert f"\n{key.path}: " in out


@dataclasses.dataclass(frozen=True)
class _Inner:
    """Attributes:
        alpha: first line
            continued.
    """

    alpha: int = 1
    # a comment above the field
    beta: float = 0.5
    gamma: str = "x"


@dataclasses.dataclass(frozen=True)
class _Outer:
    """The outer config.

    Attributes:
        inner: the inner part.
        n: a count.
    """

    inner: _Inner = dataclasses.field(default_factory=lambda: _Inner(alpha=7))
    n: int = 3


def test_both_docstring_layouts_and_comments_are_read():
    keys = {k.path: k for k in describe(_Outer)}
    assert keys["inner"].doc == "the inner part."
    assert keys["inner.alpha"].doc == "first line continued."
    assert keys["inner.beta"].doc == "a comment above the field"
    assert keys["inner.gamma"].doc == ""  # the test above would name it
    assert keys["n"].doc == "a count." and keys["n"].default == "3"


def test_a_nested_section_is_its_classs_summary_not_its_attribute_list():
    from searchsmith.serving.pipeline.config import PipelineConfig

    keys = {k.path: k for k in describe(PipelineConfig)}
    # ExtractiveConfig's docstring opens with its Attributes: list, each key has its own entry
    assert keys["generation.extractive"].doc == "ExtractiveConfig: the keys below"
    assert keys["generation.extractive.short_answer"].doc
    assert "  " not in keys["generation"].doc  # a summary on one line, no docstring indentation


def test_nested_defaults_are_the_parents_not_the_classes():
    keys = {k.path: k for k in describe(_Outer)}
    assert keys["inner.alpha"].default == "7"  # what _Outer's factory sets, not _Inner's 1
    from searchsmith.training.citation import CitationRecipe, TaggerStage
    from searchsmith.training.config import OptimConfig

    keys = {k.path: k for k in describe(CitationRecipe)}  # a root with required fields
    assert TaggerStage().optim.lr != OptimConfig().lr  # the case this test is about
    assert keys["tagger.optim.lr"].default == repr(TaggerStage().optim.lr)


def test_render_names_every_root():
    for name in ROOTS:
        assert render(name).startswith(f"# {name}: ")


def test_every_environment_variable_is_in_the_readme():
    read = set()
    for folder in ("models", "serving", "training", "kernels"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"[\"'](SEARCHSMITH_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    assert "SEARCHSMITH_LOG" in read  # the scan works
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = sorted(v for v in read | {"HF_HUB_OFFLINE", "TRITON_INTERPRET"} if f"`{v}`" not in readme)
    assert missing == [], f"document these environment variables in README.md: {missing}"


def test_every_registered_recipe_has_its_config_reference():
    """``searchsmith config recipe-<name>`` exists for every recipe the registry trains (the
    reader recipe was missing from the list when it was written by hand)."""
    from searchsmith.training.registry import recipe_names

    assert sorted(n.removeprefix("recipe-") for n in ROOTS if n.startswith("recipe-")) == recipe_names()
    for name in recipe_names():
        assert load_root(f"recipe-{name}").__name__.endswith("Recipe")
