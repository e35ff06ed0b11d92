"""A bundle's files have the modes of any file the export writes (0666 & ~umask), including
the copy of a run's weights that safetensors saved 0600."""

from __future__ import annotations

import os
import shutil
import stat

from export_fixtures import rerank_run
from searchsmith.models.export import ExportOptions, export_run


def test_bundle_files_get_plain_modes(tmp_path) -> None:
    """The run's weights were saved 0600 (safetensors); their copy in the bundle's torch/ is
    0666 & ~umask like every other file of the bundle."""
    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    (run / "model" / "model.safetensors").chmod(0o600)
    old = os.umask(0o022)
    try:
        export_run(run, tmp_path / "b", ExportOptions(torch_weights=True, heldout_limit=0))
    finally:
        os.umask(old)
    modes = {str(p.relative_to(tmp_path / "b")): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert "torch/model.safetensors" in modes and "model.onnx" in modes
    assert set(modes.values()) == {0o644}


def test_model_saves_give_plain_modes_in_a_fresh_temporary(tmp_path) -> None:
    """Decomposer.save and ImageRelevanceModel.save wrote safetensors' 0600 weights into the
    user's folder; the decomposer's temporary was a fixed ``.NAME.tmp`` two saves shared."""
    from export_fixtures import decompose_run, images_run
    from searchsmith.models.decomposer import Decomposer
    from searchsmith.models.image_relevance import ImageRelevanceModel

    old = os.umask(0o022)
    try:
        Decomposer.load(decompose_run()).save(tmp_path / "dec", trained_steps=3)
        ImageRelevanceModel.load(images_run()).save(tmp_path / "img")
    finally:
        os.umask(old)
    for name in ("dec", "img"):
        modes = {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / name).rglob("*") if p.is_file()}
        assert modes == {0o644}, (name, sorted(oct(m) for m in modes))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dec", "img"]  # no temporary left
    assert Decomposer.load(tmp_path / "dec").decompose("who made x") is not None
