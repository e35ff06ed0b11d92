"""``searchsmith quickstart``: train the four models, export them, index the demo data, ask.

::

    searchsmith quickstart [--workdir DIR] [--profile quick|full]

Everything goes under the work folder (default ``./searchsmith-work``)::

    runs/<model>/        training runs (model/, metrics.json, training_curve.png, quickstart.json: what
                         the run was trained on)
    bundles/<model>/     ONNX bundles (manifest.json with sha256, parity_report.json)
    bundles/embedder/    the base embedder as a bundle
    indexes/demo/        the demo knowledge base, indexed
    pipeline.yaml        the pipeline config the sample question was answered with
    serve.yaml           a server config serving the same models (searchsmith serve --config)

``--profile quick`` (default) trains the ``recipes/<task>/quick/`` recipes: small budgets on the
project's own synthetic data, about 4 minutes on 2 cores (234 s on 2026-12-04), and weaker models than the CPU
defaults. ``--profile full`` trains the CPU default recipes (``recipes/<task>/...``) on the
real data of ``../shared/data`` where present (found as the recipes find their paths: in the
current folder, else beside the repository), falling back to their synthetic sources where it
is not, which each step's line says; ``--shared-data DIR`` reads that data from DIR instead
(every recipe data path under ``../shared/data`` points into the folder the run reads:
``training.data.shared_data_settings``). A data folder lacking a file a recipe reads, DIR or the
default where found, is refused before anything trains, naming the file. The bundles are
exported several at a time in worker processes (one per 2 cores, at most 4; ``--export-workers``). Re-running reuses every step whose output is already
there and intact: a run only while its ``quickstart.json`` says it was trained on what it would
be now (the profile's recipe, the data folder, the data settings), else it is trained again and
its line says why; a bundle or the index that fails its sha256 (the check their loaders make) is
exported again, or repaired (rebuilt from the demo corpus when its manifest is missing or its
chunk store is the damage). A bundle whose manifest.json its user edited (thresholds, gates) is
reused as edited; one that must be exported again stops the quickstart before it trains or
exports, naming the file, as does a bundle's manifest.json that is not valid JSON with nothing to
show searchsmith wrote it so (a hand edit gone wrong looks the same as damage). The index is
rebuilt over its manifest.json only when that is missing or still the one the quickstart wrote
(its sha256 is kept in the work folder's ``.searchsmith-written.json``); one that is not valid
JSON, or fails the index checks, stops the quickstart before it trains, and a chunk store to
rebuild beneath it stops the index step, each naming the file and the fix.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError
from searchsmith.models.io import Written

# Two-turn samples: the follow-up's referent is only in the history.
SAMPLES = [
    ([{"role": "user", "content": "How do I configure the eviction policy of the Lumen cache?"},
      {"role": "assistant", "content": "Set lumen.eviction.policy to lru or lfu in lumen.yaml."}],
     "Where can I find the code for it?"),
    ([{"role": "user", "content": "What are the limits of Kestrel?"},
      {"role": "assistant", "content": "There are a few, on request size and rate."}],
     "Can you give me more details on that?"),
]


@dataclass(frozen=True)
class ModelStep:
    """One model of the quickstart: its pipeline role and its recipe per profile."""

    name: str                 # run / bundle folder name and pipeline bundle role
    quick: str                # recipe path under recipes/ (profile quick)
    full: str                 # recipe path under recipes/ (profile full)
    offline: tuple[str, ...]  # overrides for the full recipe when no real data folder is found


MODELS: tuple[ModelStep, ...] = (
    ModelStep("reranker", "reranker/quick/minilm_full.yaml", "reranker/minilm_full.yaml",
              ("data.sources=[synthetic]", "data.leave_out=[]")),
    ModelStep("decomposer", "decomposer/quick/minilm_tagger.yaml", "decomposer/minilm_tagger.yaml",
              ("data.sources=[synthetic]", "data.leave_out=[]")),
    ModelStep("citation", "citation/quick/minilm_full.yaml", "citation/minilm_full.yaml",
              ("data.sources=[synthetic]",)),
    ModelStep("images", "images/quick/minilm_cnn.yaml", "images/minilm_cnn.yaml",
              ("data.sources=[synthetic_images]",)),
    ModelStep("reader", "reader/quick/minilm_full.yaml", "reader/minilm_full.yaml",
              ("data.sources=[synthetic,demo]", "data.leave_out=[]")),
)


def demo_corpus() -> Path:
    """The bundled demo corpus the quickstart indexes."""
    from searchsmith.models.demo import corpus_path

    return Path(corpus_path())


def recipes_dir() -> Path:
    """The repository's ``recipes/`` folder (the project is installed editable)."""
    import searchsmith.models as pkg

    root = Path(pkg.__file__).resolve().parents[1] / "recipes"
    if not root.is_dir():
        raise ConfigError(f"quickstart: no recipes folder at {root}; run it from a clone of the "
                          "repository installed with pip install -e .")
    return root


def data_folder(profile: str, shared_data: str) -> Path | None:
    """The folder the full recipes read the real sets from, resolved: ``--shared-data DIR`` as
    given (:func:`check_shared_data` refuses one that is no folder); the default
    ``../shared/data`` found as the recipes find their paths, in the current folder, else beside
    the repository (``training.data.find_data_folder``).

    Returns:
        None for the quick profile (synthetic data only), or where the default is found nowhere
        (the full recipes then train on their synthetic sources, ``ModelStep.offline``).
    """
    from searchsmith.training.data import SHARED_DATA, find_data_folder

    if profile != "full":
        return None
    if os.path.normpath(shared_data) == os.path.normpath(SHARED_DATA):
        return find_data_folder(SHARED_DATA)
    folder = Path(shared_data).expanduser()
    return folder.resolve() if folder.is_dir() else None


def synthetic_fallback_note() -> str:
    """What a step's line says when the full profile trains on synthetic data: the folders
    looked in, and how to point it at the real sets."""
    from searchsmith.training.data import SHARED_DATA, data_path_candidates

    here, beside = (os.path.normpath(os.path.abspath(p)) for p in data_path_candidates(SHARED_DATA))
    return (f"on synthetic data: no {SHARED_DATA} in the current folder ({here}) nor beside the repository "
            f"({beside}); put the real sets there, or pass --shared-data DIR")


def _data_phrase(folder: Path | None) -> str:
    return f"on the real sets in {folder}" if folder is not None else synthetic_fallback_note()


def _recipe_config(step: ModelStep, profile: str, run_dir: Path, folder: Path | None) -> tuple[Any, dict[str, str]]:
    """The step's recipe config as the quickstart trains it, and the ``data.*`` settings moved
    out of ``../shared/data`` into ``folder`` (:func:`shared_data_settings`; ``folder`` is
    :func:`data_folder`'s: None trains the full recipe on its synthetic sources)."""
    from searchsmith.training.config import load_recipe_config
    from searchsmith.training.data import shared_data_settings

    recipe = recipes_dir() / (step.quick if profile == "quick" else step.full)
    overrides = [f"output_dir={json.dumps(str(run_dir))}"]
    moved: dict[str, str] = {}
    if profile == "full" and (folder is None or not folder.is_dir()):
        overrides += list(step.offline)
    elif profile == "full":
        # every path under ../shared/data points into the one folder found, as absolute paths:
        # what the run reads is what its line names, from wherever the quickstart is run
        moved = shared_data_settings(load_recipe_config(recipe, overrides).data, folder.resolve())
        overrides += [f"{key}={json.dumps(path)}" for key, path in moved.items()]
    return load_recipe_config(recipe, overrides), moved


def _shared_files(cfg: Any, moved: dict[str, str]) -> list[tuple[str, Path]]:
    """``(setting, path)`` of every file or folder under ``--shared-data`` the recipe reads."""
    out = [(key, Path(path)) for key, path in moved.items()]
    if "data.data_dir" in moved:  # the decomposer names the folder; its layout is written in decompose_data
        from searchsmith.training.decompose_data import REAL_SOURCES

        out += [(f"data.sources {s}", Path(moved["data.data_dir"]) / REAL_SOURCES[s])
                for s in cfg.data.sources if s in REAL_SOURCES]
    return out


def check_shared_data(profile: str, shared_data: str, steps: list[tuple[ModelStep, Path]]) -> None:
    """Refuse a data folder the run would not honour, before anything trains: ``--shared-data``
    given with the quick profile (which reads no real data) or naming no folder; and the folder
    the full profile reads (``--shared-data DIR``, or the default ``../shared/data`` where
    :func:`data_folder` finds it) lacking a file one of the full recipes still to train reads
    (every one named at once, with the fix), so that no model is trained on half the data.

    The default found neither in the current folder nor beside the repository is no error: the
    full recipes then train on their synthetic sources (``ModelStep.offline``), as documented,
    and each step's line says so.

    Raises:
        ConfigError: as above.
    """
    from searchsmith.training.data import SHARED_DATA

    if os.path.normpath(shared_data) == os.path.normpath(SHARED_DATA):
        folder = data_folder(profile, shared_data)
        if folder is None:
            return
        where = f"{SHARED_DATA} (the default data folder, found at {folder})"
        fix = (f"complete the folder (put them there, laid out as in {SHARED_DATA}); or pass --shared-data DIR, a "
               "folder that holds them; or use --profile quick (synthetic data only)")
    else:
        if not shared_data.strip():  # Path("") is the current folder
            raise ConfigError(f"--shared-data is empty: give the real data folder, or drop --shared-data "
                              f"({SHARED_DATA})")
        where = f"--shared-data {shared_data}"  # the CLI prefixes "searchsmith quickstart: error: "
        if profile != "full":
            raise ConfigError(f"{where}: the quick profile trains on synthetic data only and reads no data "
                              "folder; add --profile full to train on it, or drop --shared-data")
        folder = Path(shared_data)
        if not folder.is_dir():
            raise ConfigError(f"{where}: {'a file' if folder.exists() else 'not found'}; give the folder of the "
                              f"real sets, laid out like {SHARED_DATA} (scifact/claims_dev.jsonl, ...), or drop "
                              f"--shared-data ({SHARED_DATA}; synthetic data where it is absent)")
        fix = (f"put them there, laid out as in {SHARED_DATA}; or point --shared-data at the folder that holds "
               f"them; or drop --shared-data ({SHARED_DATA}; synthetic data where it is absent)")
    missing = []
    for step, run_dir in steps:
        cfg, moved = _recipe_config(step, profile, run_dir, folder)
        missing += [f"  {step.name} ({step.full}): {key} {path}" for key, path in _shared_files(cfg, moved)
                    if not path.exists()]
    if missing:
        raise ConfigError(f"{where}: the folder lacks {len(missing)} file(s) the full recipes read:\n"
                          + "\n".join(missing) + f"\n{fix}")


# What a run folder of the quickstart's was trained on, written into it before training
# starts: a rerun reuses (or resumes) the run only while it matches what it would train now.
TRAINED_ON = "quickstart.json"


def trained_on_record(step: ModelStep, profile: str, cfg: Any, folder: Path | None) -> dict[str, Any]:
    """What the quickstart trains ``step``'s run on: the profile's recipe, the real data folder
    (None: synthetic data) and the recipe's resolved ``data`` settings (:func:`_recipe_config`)."""
    from searchsmith.training.config import to_dict

    record = {"written_by": "searchsmith quickstart", "profile": profile,
              "recipe": step.quick if profile == "quick" else step.full,
              "data_folder": None if folder is None else str(folder), "data": to_dict(cfg.data)}
    return json.loads(json.dumps(record, default=str))  # as it reads back from the file


def _describe_data(record: dict[str, Any]) -> str:
    if record.get("data_folder"):
        return f"the real sets in {record['data_folder']}"
    return "synthetic data" + (" (no real data folder found)" if record.get("profile") == "full" else "")


def _train_again_reason(run_dir: Path, record: dict[str, Any]) -> str | None:
    """Why the run in ``run_dir`` is trained afresh instead of reused (finished) or resumed
    (unfinished): it was trained on other data than ``record`` (:func:`trained_on_record`)
    says it would be now, or it does not say what it was trained on. None: reuse or resume it."""
    path = run_dir / TRAINED_ON
    if not path.is_file():
        if _trained(run_dir):
            return f"it holds no record of the data it was trained on ({TRAINED_ON}; an earlier quickstart's run)"
        return None  # nothing yet, or an earlier quickstart's unfinished run: resumed as before
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        held = None
    if not isinstance(held, dict) or not isinstance(held.get("data"), dict):
        return f"its record of the data it was trained on ({path}) is unreadable"
    if held == record:
        return None
    if held.get("recipe") != record["recipe"]:
        return f"it was trained by the {held.get('profile')} profile's recipe {held.get('recipe')}"
    if held.get("data_folder") != record["data_folder"]:
        return f"it was trained on {_describe_data(held)}"
    changed = sorted(k for k in held["data"].keys() | record["data"].keys()
                     if held["data"].get(k) != record["data"].get(k))
    return f"its data settings changed since ({', '.join(f'data.{k}' for k in changed)})"


# what a training run writes into its folder: a run trained afresh loses these, and nothing else
_RUN_WRITES = frozenset({"model", "checkpoints", "cache", "stages", "metrics.json", "run.json", "split.json",
                         "baselines.json", "training_curve.png", TRAINED_ON})
_RUN_WRITES_LIKE = re.compile(r"heldout\.[\w.-]+\.jsonl|\.model\.tmp-\d+|\.searchsmith-run")


def _clear_run(run_dir: Path) -> None:
    """Remove what a training run wrote into ``run_dir`` (:data:`_RUN_WRITES`), so that it is
    trained afresh; a link is removed, never followed.

    Raises:
        ConfigError: the folder also holds something a run does not write (a user's notes, a
            copy of a model); nothing is removed.
    """
    entries = sorted(run_dir.iterdir())
    others = [p.name for p in entries if p.name not in _RUN_WRITES and not _RUN_WRITES_LIKE.fullmatch(p.name)]
    if others:
        raise ConfigError(f"quickstart: {run_dir} must be trained afresh, but it holds what a training run does not "
                          f"write ({', '.join(others[:5])}{' and more' if len(others) > 5 else ''}); nothing was "
                          "removed. Move those out of it and run the quickstart again, or use another --workdir")
    for p in entries:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _train(run_dir: Path, cfg: Any, record: dict[str, Any], afresh: bool) -> dict[str, Any]:
    from searchsmith.models.io import exclusive, write_json_atomic
    from searchsmith.training.cli import check_run_dir, claim_run_dir
    from searchsmith.training.registry import get_recipe

    check_run_dir(run_dir)  # as searchsmith train: a folder of the user's is never trained into (nor removed)
    with exclusive(run_dir, "quickstart"):
        if afresh and run_dir.is_dir():
            # a run of this project's (check_run_dir) on other data: resuming it would mix the two
            _clear_run(run_dir)
        claim_run_dir(run_dir, cfg.recipe)
        write_json_atomic(run_dir / TRAINED_ON, record)
        return get_recipe(cfg.recipe).fn(cfg, run_dir=run_dir, force=False)


def export_workers(bundles: int, asked: int | None = None) -> int:
    """How many processes export at once: ``asked`` (``--export-workers``), else one per 2
    cores this process may use, at most 4 and one per bundle (1: in this process).

    Tracing a model (``torch.onnx.export``) is single-threaded Python, about half of an
    export, so one export leaves a core idle; on 2 cores two processes of one torch thread
    each export the quick profile's six bundles in 72-78 s instead of 97-109 s one after the
    other (serving/profiling/RESULTS.md).
    """
    if asked is not None:
        return max(1, min(asked, bundles))
    cores = _cores()
    return max(1, min(bundles, 4, cores if cores <= 2 else cores // 2))


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _export_one(name: str, run_dir: Path | None, out: Path) -> str:
    """Export one quickstart bundle (the base embedder when ``run_dir`` is None)."""
    import torch  # noqa: F401 - loaded before quiet_block, which filters the log handler torch adds
    from searchsmith.models.console import quiet_block
    from searchsmith.models.export import ExportOptions, export_embedder, export_run
    from searchsmith.training.evaluate import heldout_figures

    opts = ExportOptions(heldout_scorer=heldout_figures)  # each bundle's own held-out figures (the gates read them)
    with quiet_block():
        if run_dir is None:
            export_embedder(out, "default", opts)
        else:
            export_run(run_dir, out, opts)
    return name


def _export_worker_init(threads: int) -> None:
    from searchsmith.models.console import configure_process_logging

    configure_process_logging()
    import torch

    torch.set_num_threads(threads)


def export_all(jobs: list[tuple[str, Path | None, Path]], workers: int = 1) -> None:
    """Export ``(name, run folder or None for the embedder, bundle folder)`` jobs, ``workers``
    at a time in fresh processes (``spawn``: torch's threads do not survive a fork), each with
    its share of the cores; 1 = one after the other in this process. The first failure stops
    the jobs not yet started and is raised; a bundle is written whole or not at all.
    """
    from searchsmith.models.console import progress

    bar = progress(total=len(jobs), desc="export", unit="bundle")
    try:
        if workers <= 1:
            for name, run_dir, out in jobs:
                bar.set_postfix_str(name)
                _export_one(name, run_dir, out)
                bar.update(1)
            return
        import multiprocessing
        from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_export_worker_init,
                                 initargs=(max(1, _cores() // workers),)) as pool:
            pending = {pool.submit(_export_one, *job) for job in jobs}
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    if fut.exception() is not None:
                        for other in pending:
                            other.cancel()
                        raise fut.exception()
                    bar.set_postfix_str(fut.result())
                    bar.update(1)
    finally:
        bar.close()


def _trained(run_dir: Path) -> bool:
    return (run_dir / "metrics.json").is_file() and (run_dir / "model").is_dir()


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def _export_reason(bundle: Path, source: Path | None) -> str | None:
    """Why ``bundle`` is exported (again): not there yet, older than its run, or damaged (the
    check ``load_bundle`` makes: every file against the manifest's sha256, about 2 s for the
    quick profile's six bundles, 614 MB, on 2 cores); None to reuse it."""
    from searchsmith.models.errors import BundleError
    from searchsmith.models.io import WRITTEN_RECORD
    from searchsmith.models.runtime import read_manifest, verify_files

    manifest = bundle / "manifest.json"
    if not manifest.is_file():
        # the export replaces a folder of only its own files, manifest or none (bundle_layout_files)
        return "its manifest.json is missing" if _holds_files(bundle) else "not exported yet"
    # when it was exported: its written-files record, which no one edits (a hand-edited manifest
    # is newer than the run it was exported from); an older bundle has only its manifest's time
    record = bundle / WRITTEN_RECORD
    exported = (record if record.is_file() else manifest).stat().st_mtime
    if source is not None and exported < (source / "metrics.json").stat().st_mtime:
        return "its run was trained again since"
    try:
        verify_files(bundle, read_manifest(bundle))
    except BundleError as exc:
        return str(exc)
    return None


def _check_edited_manifests(bundles: dict[str, Path], why_again: Callable[[str], str | None], before: str) -> None:
    """Refuse to export again a bundle whose manifest.json its user edited since the export wrote
    it (hand-tuned thresholds or gates: :func:`~searchsmith.models.export.edited_manifest`), or
    that cannot be read while nothing shows the export wrote it so (a hand edit gone wrong, or
    damage: :func:`~searchsmith.models.export.unreadable_manifest`; such a bundle is always
    exported again), as :func:`_clear_run` refuses to remove a user's files; ``why_again(name)``
    says why the bundle ``name`` would be exported again, None when it is reused (with the
    user's manifest).

    Raises:
        ConfigError: naming each such manifest, why it would be replaced (or its JSON error,
            with line and column), and the fix.
    """
    from searchsmith.models.export import edited_manifest, unreadable_manifest
    from searchsmith.models.io import WRITTEN_RECORD

    found, unreadable = [], False
    for name, folder in bundles.items():
        if (problem := unreadable_manifest(folder)) is not None:
            unreadable = True
            found.append(f"{folder / 'manifest.json'} {problem}, and no {WRITTEN_RECORD} shows that the export "
                         "wrote it so (a hand edit gone wrong, or damage)")
        elif (manifest := edited_manifest(folder)) is not None and (why := why_again(name)) is not None:
            found.append(f"{manifest} was edited since the export wrote it, and its bundle must be exported again "
                         f"({why})")
    if found:
        fix = ("Repair the JSON where it says, or move that manifest.json out of its bundle folder" if unreadable
               else "Move that manifest.json out of its bundle folder")
        raise ConfigError("quickstart: " + "; ".join(found) + "; exporting would replace it and lose the edit, so "
                          f"the quickstart stopped before {before}. {fix} (the export then writes a new one; carry "
                          "your edits into it), or use another --workdir")


def _index_manifest_is_ours(index_dir: Path, record: Path) -> bool:
    """Whether the index's manifest.json is still the one the quickstart wrote: its sha256 is
    the one kept in the work folder's ``record`` (:class:`~searchsmith.models.io.WrittenFiles`).
    An index keeps no record of its own (its folder holds only files a build writes), and a
    manifest that reads as JSON but fails the index checks may be a hand edit."""
    from searchsmith.models.io import WrittenFiles

    return WrittenFiles.read(record).state(index_dir / "manifest.json") == "ours"


def _keep_index_manifest(index_dir: Path, record: Path) -> None:
    """Record the sha256 of the index manifest.json the quickstart just wrote."""
    from searchsmith.models.io import WrittenFiles, sha256_file

    files = WrittenFiles.read(record)
    files.add(index_dir / "manifest.json", sha256_file(index_dir / "manifest.json"))
    files.save()


def _not_ours(record: Path) -> str:
    return (f"nothing shows that searchsmith wrote it so (the quickstart keeps the sha256 of the index manifest it "
            f"writes in {record})")


def _rebuild_fix(index_dir: Path, first: bool = False) -> str:
    return (f"{'R' if first else 'r'}ebuild the index over it: searchsmith index {demo_corpus()} --out {index_dir} "
            "--force (copy what you changed first), or use another --workdir")


def _check_index_manifest(index_dir: Path, record: Path, before: str) -> None:
    """Refuse to rebuild the quickstart's index over a manifest.json that does not read as an
    index's (not valid JSON, another ``format``, fields edited or damaged:
    :func:`~searchsmith.serving.index.manifest_fault`) unless it is still the one the quickstart
    wrote (:func:`_index_manifest_is_ours`; an older searchsmith's, say): else nothing tells
    damage from a hand edit, and the quickstart has no ``--force`` (``searchsmith index --force``
    has). A missing manifest (nothing of the user's to lose) is rebuilt by :func:`_mend_index`.

    Raises:
        ConfigError: naming the file, what is wrong with it (a JSON error with its line and
            column) and the fix.
    """
    from searchsmith.models.io import json_object_problem
    from searchsmith.serving.index import manifest_fault

    manifest = index_dir / "manifest.json"
    if not manifest.is_file():
        return
    problem = manifest_fault(index_dir)
    if problem is None or _index_manifest_is_ours(index_dir, record):
        return
    repair = ("Repair the JSON where it says" if json_object_problem(manifest) is not None
              else "Restore what you changed")
    raise ConfigError(f"quickstart: {manifest} {problem}; {_not_ours(record)}: it may be an edit of yours, or damage, "
                      f"and rebuilding the index would replace it, so the quickstart stopped before {before}. "
                      f"{repair}, or {_rebuild_fix(index_dir)}")


def _index_problem(index_dir: Path) -> str | None:
    """What is wrong with the quickstart's index (the check ``Index.load`` makes: the manifest,
    then every file against its sha256); None when it can be reused."""
    from searchsmith.models.errors import BundleError
    from searchsmith.serving.index import read_manifest, verify_files

    try:
        verify_files(read_manifest(index_dir), index_dir)
    except BundleError as exc:
        return str(exc)
    return None


def _build_index(index_dir: Path, record: Path, say: Any, overwrite: bool = False) -> None:
    """Index the demo corpus into ``index_dir``, and record the manifest written."""
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import IndexConfig, build_index

    build_index(read_corpus(demo_corpus()), index_dir, IndexConfig(), overwrite=overwrite, show_progress=True,
                report=say)
    _keep_index_manifest(index_dir, record)


def _mend_index(index_dir: Path, record: Path, say: Any) -> None:
    """Repair the quickstart's damaged index (``index --repair``: from its own vectors and chunk
    store); what the repair cannot mend (its manifest, its chunk store) is rebuilt from the demo
    corpus over it, as ``--force`` does (a file of the user's in the folder is refused), when
    its manifest.json is missing or still the one the quickstart wrote.

    Raises:
        ConfigError: the index must be rebuilt over a manifest.json the quickstart cannot show
            it wrote (it may hold the user's edits: tuned search settings), naming it and the fix.
    """
    from searchsmith.models.errors import BundleError
    from searchsmith.serving.index_repair import repair_index

    manifest = index_dir / "manifest.json"
    ours = _index_manifest_is_ours(index_dir, record)
    try:
        repair_index(index_dir, report=say)
    except BundleError as exc:
        if manifest.is_file() and not ours:
            raise ConfigError(f"quickstart: {index_dir} must be rebuilt from the demo corpus ({exc}), which would "
                              f"replace {manifest}, and {_not_ours(record)}: it may hold an edit of yours, so nothing "
                              f"was rebuilt. {_rebuild_fix(index_dir, first=True)}") from None
        say(f"{exc}\n      rebuilding {index_dir} from the demo corpus {demo_corpus()}")
        _build_index(index_dir, record, say, overwrite=True)
        return
    if ours:  # the repair rewrote the quickstart's own manifest (its files' sha256)
        _keep_index_manifest(index_dir, record)


def write_configs(work: Path, index_dir: Path, bundles: dict[str, Path]) -> list[Written]:
    """Write ``pipeline.yaml`` (absolute paths) and ``serve.yaml`` (the server's quickstart
    layout, :func:`searchsmith.serving.serve_config.serve_config_text`) into ``work``.

    A config its user edited since the quickstart wrote it (an added ``server.api_keys``)
    is kept: the fresh one is written beside it as ``*.new``
    (:func:`searchsmith.models.io.write_text_if_ours`; hashes in ``work/WRITTEN_RECORD``).

    Returns:
        pipeline.yaml's and serve.yaml's :class:`Written`, in that order.
    """
    import yaml
    from searchsmith.models.io import write_text_if_ours
    from searchsmith.serving.serve_config import serve_config_text

    # every bundle, the embedder included: the fp32 embed bundle gives the index's own vectors
    # without torch, which makes a cold ``searchsmith ask`` seconds faster
    pipeline = {"index": str(index_dir.resolve()),
                "bundles": {name: str(path.resolve()) for name, path in bundles.items()}}
    pipe_path = work / "pipeline.yaml"
    pipe_text = ("# written by searchsmith quickstart; run: searchsmith ask \"...\" "
                 f"--config {pipe_path}\n" + yaml.safe_dump(pipeline, sort_keys=False))
    return [write_text_if_ours(pipe_path, pipe_text), write_text_if_ours(work / "serve.yaml", serve_config_text(work))]


def own_or_new(w: Written) -> Path:
    """The config to name in the hints: the user's edit of ours (its api_keys, its settings),
    else the file just written (a file of someone else's in the work folder is not a config of
    this quickstart's)."""
    return w.kept if w.kept is not None and w.edited else w.path


def describe_written(w: Written) -> str:
    """One line for the user: which file holds the new config, and which edit was kept."""
    if w.kept is None:
        return str(w.path)
    return (f"{w.path} ({w.kept.name} was edited since the quickstart wrote it, or not written by it: "
            f"kept as it is; compare with: diff {w.kept} {w.path})")


def configure_quickstart(parser: argparse.ArgumentParser) -> None:
    from searchsmith.training.data import SHARED_DATA

    parser.add_argument("--workdir", default="searchsmith-work", help="where everything is written "
                        "(default %(default)s, in the current folder)")
    parser.add_argument("--profile", choices=["quick", "full"], default="quick",
                        help="quick: small budgets on synthetic data (~4 min on 2 cores, weaker models); full: the "
                        "CPU default recipes")
    parser.add_argument("--shared-data", default=SHARED_DATA, metavar="DIR",
                        help=f"real data folder for --profile full, laid out like {SHARED_DATA} (scifact/"
                        f"claims_dev.jsonl, ...): every recipe data path under {SHARED_DATA} is read from DIR "
                        "instead (paths a recipe sets elsewhere are kept); a folder lacking a file, DIR or the "
                        "default, is refused before training, naming it (default %(default)s, in the current "
                        "folder, else beside the repository: synthetic data where absent, and each step says so)")
    parser.add_argument("--export-workers", type=_positive_int, default=None, metavar="N",
                        help="processes exporting bundles at once (default: one per 2 cores, at most 4; "
                        "on 2 cores, 2 with one thread each; 1: one after the other in this process)")
    parser.set_defaults(func=run_quickstart)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def run_quickstart(args: argparse.Namespace) -> int:
    from searchsmith.models.export import edited_manifest
    from searchsmith.models.io import WRITTEN_RECORD, check_parents_are_folders
    from searchsmith.serving.index import read_manifest
    from searchsmith.serving.pipeline.cli import format_answer
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.serving.pipeline.gates import gate_report
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    if not str(args.workdir).strip():
        raise ConfigError("--workdir is empty: give a folder for the quickstart's runs, bundles and index "
                          "(default ./searchsmith-work)")
    work = Path(args.workdir)
    check_parents_are_folders(work, "--workdir", ConfigError)
    if work.exists() and not work.is_dir():
        raise ConfigError(f"--workdir: {str(work)!r} is a file; give a folder (a new one, e.g. {work}.d)")
    # What each run would be trained on now, and why a run there is not reused as it is
    folder = data_folder(args.profile, str(args.shared_data))
    plans: dict[str, tuple[Any, dict[str, Any], str | None]] = {}
    for step in MODELS:
        run_dir = work / "runs" / step.name
        cfg, _ = _recipe_config(step, args.profile, run_dir, folder)
        record = trained_on_record(step, args.profile, cfg, folder)
        plans[step.name] = (cfg, record, _train_again_reason(run_dir, record))
    check_shared_data(args.profile, str(args.shared_data),  # before anything is written or trained
                      [(step, work / "runs" / step.name) for step in MODELS
                       if not _trained(work / "runs" / step.name) or plans[step.name][2] is not None])
    bundles: dict[str, Path] = {step.name: work / "bundles" / step.name for step in MODELS}
    bundles["embedder"] = work / "bundles" / "embedder"
    index_dir = work / "indexes" / "demo"
    # a bundle that this run exports again must not hold a manifest.json its user edited: refused
    # before anything trains (the bundle of a run trained now is exported again)
    training = {step.name for step in MODELS
                if not _trained(work / "runs" / step.name) or plans[step.name][2] is not None}

    def why_again(name: str) -> str | None:
        if name in training:
            return "its run is trained now"
        return _export_reason(bundles[name], work / "runs" / name if name in plans else None)

    _check_edited_manifests(bundles, why_again, "training or exporting anything")
    index_record = work / WRITTEN_RECORD  # where the sha256 of the index manifest it writes is kept
    _check_index_manifest(index_dir, index_record, "training or exporting anything")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    n = len(MODELS) + 4
    if args.profile == "quick":
        print("quickstart (profile quick): small training budgets on synthetic data; these models are "
              "weaker than the CPU default recipes (use --profile full for those)", flush=True)

    # 1. Train
    runs: dict[str, Path] = {}
    for i, step in enumerate(MODELS, 1):
        run_dir = work / "runs" / step.name
        runs[step.name] = run_dir
        cfg, record, again = plans[step.name]
        on = f" {_data_phrase(folder)}" if args.profile == "full" else ""
        if _trained(run_dir) and again is None:
            print(f"[{i}/{n}] train {step.name}: reusing {run_dir}" + (f", trained{on}" if on else ""), flush=True)
            continue
        t = time.perf_counter()
        print(f"[{i}/{n}] train {step.name} ({args.profile}) -> {run_dir}{on}"
              + (f"; {'training it again' if _trained(run_dir) else 'starting it afresh'}: {again}" if again else ""),
              flush=True)
        _train(run_dir, cfg, record, afresh=again is not None)
        print(f"      {step.name} trained in {time.perf_counter() - t:.0f} s", flush=True)

    # 2. Export (torch's exporter and ONNX Runtime's optimizer chatter: held back unless --verbose)
    i = len(MODELS) + 1
    # a bundle of ours that fails its sha256 is exported again, not reused until the ask fails
    reasons = {name: _export_reason(bundles[name], runs.get(name)) for name in bundles}
    todo = [name for name, why in reasons.items() if why is not None]
    _check_edited_manifests(bundles, reasons.get, "exporting")  # edited during the training
    t = time.perf_counter()
    if todo:
        workers = export_workers(len(todo), args.export_workers)
        print(f"[{i}/{n}] export: {', '.join(todo)} -> {work / 'bundles'}"
              + (f" ({workers} processes at once)" if workers > 1 else ""), flush=True)
        for name in todo:
            if _holds_files(bundles[name]):  # there, but not reusable: say why
                print(f"      {name}: exporting again: {reasons[name]}", flush=True)
        export_all([(name, runs.get(name), bundles[name]) for name in todo], workers)
        print(f"      {len(todo)} bundle(s) exported in {time.perf_counter() - t:.0f} s", flush=True)
    else:
        print(f"[{i}/{n}] export: reusing {len(bundles)} bundles in {work / 'bundles'}", flush=True)
    for name in bundles:
        if edited_manifest(bundles[name]) is not None:  # reused: the user's edit is what the pipeline reads
            print(f"      {name}: reusing its manifest.json as you edited it", flush=True)

    # 3. Index
    present = index_dir.is_dir() and any(index_dir.iterdir())
    problem = _index_problem(index_dir) if present else None
    if present and problem is None:
        print(f"[{i + 1}/{n}] index: reusing {index_dir}", flush=True)
    elif present:
        _check_index_manifest(index_dir, index_record, "mending the index")  # edited during the training
        print(f"[{i + 1}/{n}] index: {index_dir} is damaged, mending it: {problem}", flush=True)
        _mend_index(index_dir, index_record, lambda line: print(f"      {line}", flush=True))
    else:
        print(f"[{i + 1}/{n}] index: the demo corpus {demo_corpus()} -> {index_dir}", flush=True)
        _build_index(index_dir, index_record, lambda line: print(f"      {line}", flush=True))
    m = read_manifest(index_dir)
    print(f"      {m['documents']} documents, {m['chunks']} chunks, sources: {', '.join(sorted(m['sources']))}")

    # 4. Configs
    pipe_w, serve_w = write_configs(work, index_dir, bundles)
    print(f"[{i + 2}/{n}] configs:", flush=True)
    for w in (pipe_w, serve_w):
        print(f"      {describe_written(w)}", flush=True)
    # The sample question uses the config just written (a kept one may point elsewhere);
    # the hints at the end name the user's own files, so that 'serve' keeps their api_keys.
    pipe_path = pipe_w.path

    # 5. Ask a two-turn question
    pipeline = load_pipeline(load_pipeline_config(pipe_path))
    print("\n".join(f"      {line}" for line in gate_report(pipeline.gates)), flush=True)
    history, query = SAMPLES[0]
    print(f"[{i + 3}/{n}] ask (two turns):")
    for turn in history:
        print(f"      {turn['role']}: {turn['content']}")
    print(f"      user: {query}\n")
    try:
        print(format_answer(pipeline.ask(query, history)))
    finally:
        pipeline.close()
    print(f"\ndone in {time.perf_counter() - t0:.0f} s. Work folder: {work}\n"
          f"  ask again:  searchsmith ask \"...\" --config {own_or_new(pipe_w)}\n"
          f"  serve:      searchsmith serve --config {own_or_new(serve_w)}\n"
          f"  answer page: http://127.0.0.1:8000/ once it serves (ask the two questions above)\n"
          f"  metrics:    {work / 'runs' / '<model>' / 'metrics.json'}")
    return 0
