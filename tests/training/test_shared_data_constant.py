"""One name for the real sets' folder: ``training.data.SHARED_DATA``.

The reranker, citation and image data modules each defined their own ``SHARED =
"../shared/data"``; ``shared_data_settings`` (what ``quickstart --shared-data DIR`` moves)
matches the recipes' paths against ``SHARED_DATA``, so a module whose copy drifted would keep
reading its old folder while the quickstart said it read DIR.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from searchsmith.training import cite_data, images, rerank_data
from searchsmith.training.data import REPO_ROOT, SHARED_DATA, shared_data_settings


@pytest.mark.parametrize("module", [rerank_data, cite_data, images], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_data_modules_name_the_folder_by_the_one_constant(module) -> None:
    assert not hasattr(module, "SHARED")
    assert f'"{SHARED_DATA}' not in inspect.getsource(module)  # no literal copy of the folder's name


@pytest.mark.parametrize(("data", "paths"), [
    (rerank_data.RerankerData, {"scifact_claims", "scifact_corpus", "hotpotqa", "musique", "wikimultihop"}),
    (cite_data.CitationData, {"wice", "expertqa", "scifact_claims", "scifact_corpus"}),
    (images.ImagesData, {"coco_dir"}),
], ids=["reranker", "citation", "images"])
def test_every_real_set_default_moves_with_the_folder(data, paths: set[str]) -> None:
    moved = shared_data_settings(data(), "/data/s")
    assert set(moved) == {f"data.{name}" for name in paths}
    for name in paths:
        default = next(f.default for f in dataclasses.fields(data) if f.name == name)
        assert moved[f"data.{name}"] == "/data/s" + default[len(SHARED_DATA):]


def test_the_commands_help_names_the_folder_by_the_one_constant(monkeypatch) -> None:
    """make-routing-set, make-pipeline-set and quickstart spelled ``../shared/data`` in their own
    argparse defaults and help: their help follows SHARED_DATA (here moved elsewhere)."""
    import argparse

    from searchsmith.serving.quickstart import configure_quickstart
    from searchsmith.serving.routing_sets import (
        configure_make_pipeline_set,
        configure_make_routing_set,
    )
    from searchsmith.training import data

    monkeypatch.setattr(data, "SHARED_DATA", "../elsewhere/sets")
    for configure, dest in ((configure_make_routing_set, "data_dir"), (configure_make_pipeline_set, "data_dir"),
                            (configure_quickstart, "shared_data")):
        parser = argparse.ArgumentParser()
        configure(parser)
        text = parser.format_help()
        assert parser.get_default(dest) == "../elsewhere/sets"
        assert "../elsewhere/sets" in text and "shared/data" not in text, configure.__name__


def test_the_messages_name_the_folder_by_the_one_constant(monkeypatch, tmp_path) -> None:
    """resolve_data_path's and make-routing-set's not-found messages spelled the folder
    (``../shared/data``, ``shared/data``): they follow SHARED_DATA (here moved elsewhere)."""
    from searchsmith.models.errors import ConfigError, ValidationError
    from searchsmith.serving.routing_sets import _read
    from searchsmith.training import data
    from searchsmith.training.dataset_shapes import EXPERTQA_QUESTION

    monkeypatch.setattr(data, "SHARED_DATA", "../elsewhere/sets")
    with pytest.raises(ConfigError, match=r"The real sets live in \.\./elsewhere/sets beside the repository"):
        data.resolve_data_path(tmp_path / "absent.jsonl", "data.scifact_claims")
    with pytest.raises(ValidationError, match=r"pass --data-dir pointing at the shared data folder "
                                              r"\(default \.\./elsewhere/sets\)"):
        _read(tmp_path / "absent.jsonl", EXPERTQA_QUESTION, ["question"])


# the folders pyproject maps to searchsmith.* (tests, recipes and docs may spell the folder)
PACKAGES = ("models", "kernels", "training", "serving")
# the folder's name as the project has spelled it (SHARED_DATA's value since it exists): hunted
# beside SHARED_DATA's value itself, so that copies of it are still found once the constant moves
FOLDER = "shared/data"


def _strings(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, text, is a docstring) of every string constant of the module ``path``, the parts
    of f-strings included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and ast.get_docstring(node, clean=False) is not None}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value, id(node) in docs


def _sources() -> list[Path]:
    sources = sorted(p for package in PACKAGES for p in (REPO_ROOT / package).rglob("*.py"))
    assert len(sources) > 100, "the walk missed the package's modules"
    return sources


def test_no_code_spells_the_folder_but_the_constant() -> None:
    """Defaults, help and messages spelled ``../shared/data`` in a dozen places after SHARED_DATA
    existed (the read recipe's data paths, the decomposer's data_dir, report's and
    make-routing-set's messages), and would have been left behind by a move of the folder. No
    string in the package's code names the folder but SHARED_DATA's own definition; docstrings
    may (the next test)."""
    data_py = REPO_ROOT / "training" / "data.py"
    definition = [i for i, text in enumerate(data_py.read_text(encoding="utf-8").splitlines(), 1)
                  if text.startswith("SHARED_DATA = ")]
    assert len(definition) == 1
    spelled = [f"{path.relative_to(REPO_ROOT)}:{line}: {text[:80]!r}" for path in _sources()
               for line, text, doc in _strings(path)
               if not doc and (FOLDER in text or SHARED_DATA in text) and (path, line) != (data_py, definition[0])]
    assert not spelled, "name the folder by training.data.SHARED_DATA (an f-string), not again:\n" + "\n".join(spelled)


def test_docstrings_spell_the_folder_as_the_constant() -> None:
    """A docstring is static text, so it may write the folder out, as SHARED_DATA is: moving the
    folder fails here, naming each docstring to change."""
    stale = [f"{path.relative_to(REPO_ROOT)}:{line}: {m.group()!r}" for path in _sources()
             for line, text, doc in _strings(path) if doc
             for m in re.finditer(r"[\w./~-]*" + re.escape(FOLDER), text) if m.group() != SHARED_DATA]
    assert not stale, f"docstrings naming the folder otherwise than {SHARED_DATA!r}:\n" + "\n".join(stale)
