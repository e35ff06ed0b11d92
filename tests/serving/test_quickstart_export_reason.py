"""The quickstart exports a bundle again when its run was trained since the export, judged by the
export's own written-files record: a manifest edited by hand is newer than the run, and hid a
retraining when its time was the one compared (helper-66's note, 2026-12-07)."""

from __future__ import annotations

import json
import os

from searchsmith.models.io import WRITTEN_RECORD
from searchsmith.serving import quickstart as q


def _at(path, t):
    os.utime(path, (t, t))


def test_a_run_trained_after_the_export_is_exported_again_even_with_an_edited_manifest(tmp_path):
    bundle, run = tmp_path / "bundle", tmp_path / "run"
    bundle.mkdir()
    run.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"task": "rerank", "files": {}}))
    (bundle / WRITTEN_RECORD).write_text("{}")
    (run / "metrics.json").write_text("{}")
    _at(run / "metrics.json", 1000)          # trained
    _at(bundle / WRITTEN_RECORD, 2000)       # exported
    _at(run / "metrics.json", 3000)          # trained again
    _at(bundle / "manifest.json", 4000)      # the manifest edited by hand after that
    assert q._export_reason(bundle, run) == "its run was trained again since"
    # an older bundle without the record: its manifest's time, as before
    (bundle / WRITTEN_RECORD).unlink()
    _at(bundle / "manifest.json", 2000)
    assert q._export_reason(bundle, run) == "its run was trained again since"
    _at(bundle / "manifest.json", 5000)
    assert q._export_reason(bundle, run) != "its run was trained again since"
