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
