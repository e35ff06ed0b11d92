"""One name for the real sets' folder: ``training.data.SHARED_DATA``.

The reranker, citation and image data modules each defined their own ``SHARED =
"../shared/data"``; ``shared_data_settings`` (what ``quickstart --shared-data DIR`` moves)
matches the recipes' paths against ``SHARED_DATA``, so a module whose copy drifted would keep
reading its old folder while the quickstart said it read DIR.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from searchsmith.training import cite_data, images, rerank_data
from searchsmith.training.data import SHARED_DATA, shared_data_settings


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
