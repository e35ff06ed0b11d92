"""What an index folder without its manifest is told: damaged when it holds index files, not an
index at all when it holds none (it was told to "rebuild the index", which the build refuses)."""

from __future__ import annotations

import pytest
from searchsmith.models.errors import BundleError
from searchsmith.serving.index import read_manifest


def test_a_folder_of_other_files_is_not_an_index(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="not a searchsmith index .*into a new folder"):
        read_manifest(tmp_path)


def test_an_index_without_its_manifest_is_damaged(tmp_path) -> None:
    (tmp_path / "chunks.sqlite").write_bytes(b"")
    with pytest.raises(BundleError, match="manifest.json is missing .*rebuild the index"):
        read_manifest(tmp_path)
