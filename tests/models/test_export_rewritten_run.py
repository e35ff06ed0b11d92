"""export checked train's lock of a run only when it started: a ``train --force`` starting
during the export (minutes) rewrote the run while it was read, and the bundle went out mixing
the two. The run is checked again just before the bundle is moved into place; a run being
trained then, or whose files changed since the export began, leaves no bundle (an older one
stays as it was) and no temporary folder.

The run's rewrite happens inside the export through its held-out scorer
(``ExportOptions.heldout_scorer``: called after parity, before the bundle is finished), so
there is no race to time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

import pytest
from export_fixtures import rerank_run
from searchsmith.models.errors import BundleError
from searchsmith.models.export import ExportOptions, export_run
from searchsmith.models.io import exclusive, sha256_file


def _run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    return run


def _scorer(during):
    """A held-out scorer that calls ``during(run_dir)`` and measures nothing."""
    def score(task, run_dir, bundle, limit):
        during(run_dir)
        return {}, "test"
    return score


def _old_bundle(tmp_path, run):
    out = tmp_path / "bundle"
    export_run(run, out, ExportOptions())
    return out, {p.name: sha256_file(p) for p in out.iterdir() if p.is_file()}


def _left_beside(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}"))


def test_a_run_whose_files_change_during_the_export_leaves_the_old_bundle(tmp_path) -> None:
    run = _run(tmp_path)
    out, before = _old_bundle(tmp_path, run)

    def rewrite(run_dir):  # what train --force does when it finishes: run.json written again
        info = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**info, "steps": 99}))

    with pytest.raises(BundleError) as exc_info:
        export_run(run, out, ExportOptions(heldout_scorer=_scorer(rewrite)))
    text = str(exc_info.value)
    assert text == (f"export: {run} was rewritten while it was exported (run.json changed); no bundle was "
                    f"written ({out} was left as it was); rerun the export when training has finished")
    assert {p.name: sha256_file(p) for p in out.iterdir() if p.is_file()} == before
    assert _left_beside(out) == []  # the temporary bundle folder was removed


def test_a_model_file_replaced_during_the_export_is_seen(tmp_path) -> None:
    run = _run(tmp_path)
    out = tmp_path / "bundle"

    def resave(run_dir):  # the same bytes saved again: a new file, the same size
        weights = run_dir / "model" / "model.safetensors"
        data = weights.read_bytes()
        weights.unlink()
        weights.write_bytes(data)

    with pytest.raises(BundleError, match=r"was rewritten while it was exported \(model/model.safetensors changed\)"):
        export_run(run, out, ExportOptions(heldout_scorer=_scorer(resave)))
    assert not out.exists() and _left_beside(out) == []


def test_a_trainer_taking_the_run_during_the_export_stops_it(tmp_path) -> None:
    run = _run(tmp_path)
    out, before = _old_bundle(tmp_path, run)
    with contextlib.ExitStack() as trainer:  # holds train's lock of the run from mid-export to the end
        with pytest.raises(BundleError) as exc_info:
            export_run(run, out, ExportOptions(heldout_scorer=_scorer(
                lambda run_dir: trainer.enter_context(exclusive(run_dir, "train")))))
    assert str(exc_info.value) == (
        f"export: {run} is being trained now (searchsmith train holds its lock); no bundle was written "
        f"({out} was left as it was); rerun the export when training has finished")
    assert {p.name: sha256_file(p) for p in out.iterdir() if p.is_file()} == before
    assert _left_beside(out) == []


def test_the_cli_says_it_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    from searchsmith.serving.main import main
    from searchsmith.training import export_cli

    run = _run(tmp_path)
    monkeypatch.setattr(export_cli, "heldout_figures", _scorer(lambda run_dir: os.utime(run_dir / "run.json",
                                                                                         ns=(0, 0))))
    assert main(["export", str(run), "--out", str(tmp_path / "b")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "rewritten" in line]
    assert err == [f"searchsmith export: error: export: {run} was rewritten while it was exported (run.json changed); "
                   "no bundle was written; rerun the export when training has finished"]
    assert not (tmp_path / "b").exists()


def test_an_export_that_reads_an_unchanged_run_writes_its_bundle(tmp_path) -> None:
    # the held-out scorer writes the run's cache/: not a rewrite of the run
    run = _run(tmp_path)

    def cache(run_dir):
        (run_dir / "cache").mkdir(exist_ok=True)
        (run_dir / "cache" / "bm25.json").write_text("{}")

    m = export_run(run, tmp_path / "b", ExportOptions(heldout_scorer=_scorer(cache)))
    assert json.loads((tmp_path / "b" / "manifest.json").read_text()) == m
