"""``searchsmith eval sweep --param index.KEY``: one index setting varied, one index per value.

A pipeline setting changes how the questions are answered; an index setting (chunk size,
overlap, the k-means centroids, ...) changes what there is to find, so each value needs its
own index. For each value the corpus is re-indexed into a temporary folder with the
``--index``'s own config (read from its manifest) and that one key changed. With every
value's pipeline open (each its own index; the models, loaded once, shared by all: see
:func:`_value_pipeline`), the questions are then answered as ``eval sweep`` answers them: one
untimed answer on each index first, then each question under every value in turn, in an order
that rotates by one each question (``profiling.timing.rotation``), so that a change in the
machine's load falls on every value's ``latency_ms`` alike. The result has the format of
:func:`searchsmith.serving.sweep.eval_sweep` (points with metrics and intervals, verdicts
against the default, ``--plot``, ``--per-item``) plus, per point, the setting the build
actually used (``effective``), the chunk count and the build time (``build_s``: each index is
built once, one after another, so it is one figure per value, not an interleaved comparison).
The temporary indexes are removed afterwards; the ``--index`` and the corpus are only read.

``chunker.chunk_tokens`` is clipped to the embedding model's window (all-MiniLM-L6-v2: 254
text tokens), so larger values build the same index: such a point says ``clipped`` and the
result's ``warnings`` say which values coincide; their index is built once.

::

    searchsmith eval sweep --data qa.jsonl --index indexes/mh --corpus corpus.jsonl \\
        --param index.chunker.chunk_tokens --values 150,250,350,500 --limit 40 --plot chunks.png
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchsmith.models.config import apply_overrides, closest_key, from_dict, to_dict
from searchsmith.models.errors import ConfigError
from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from searchsmith.serving.chunker import ChunkerConfig
from searchsmith.serving.index import IndexConfig
from searchsmith.serving.sweep import _summary, _verdicts, parse_values, plot_sweep

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

__all__ = ["eval_index_sweep", "index_setting"]

log = logging.getLogger(__name__)

PREFIX = "index."


def _leaves(cls: type, prefix: str = "") -> list[str]:
    """Every single setting of the dataclass ``cls`` as a dotted path (``chunker.chunk_tokens``)."""
    out = []
    for f in dataclasses.fields(cls):
        sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(sub):
            out += _leaves(type(sub), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def index_setting(param: str) -> str:
    """``"index.chunker.chunk_tokens"`` -> ``"chunker.chunk_tokens"``, checked against :class:`IndexConfig`.

    Raises:
        ConfigError: not an ``index.`` key, a section rather than one setting, or an unknown
            key (the closest one suggested, matched on the whole path, else on its last part,
            so ``index.chunk_size`` suggests ``index.chunker.chunk_tokens``).
    """
    if not param.startswith(PREFIX):
        raise ConfigError(f"eval sweep --param {param!r}: not an index setting (those start with {PREFIX!r})")
    path = param[len(PREFIX):]
    leaves = _leaves(IndexConfig)
    if path in leaves:
        return path
    inside = [leaf for leaf in leaves if leaf.startswith(path + ".")]
    if inside:
        raise ConfigError(f"eval sweep --param {param!r} is a section, not one index setting; sweep one of: "
                          + ", ".join(PREFIX + leaf for leaf in inside))
    hint = closest_key(path, leaves)
    if hint is None:
        by_name = {leaf.rsplit(".", 1)[-1]: leaf for leaf in leaves}
        hint = by_name.get(closest_key(path.rsplit(".", 1)[-1], by_name) or "")
    fix = f"did you mean {PREFIX + hint!r}?" if hint else "index settings: " + ", ".join(PREFIX + x for x in leaves)
    raise ConfigError(f"eval sweep --param {param!r}: unknown index setting; {fix} "
                      "(searchsmith config index lists them)")


def _lookup(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def _effective(manifest: dict[str, Any], path: str) -> Any:
    """The setting an index was built with: the chunker's as fitted to the model (``manifest["chunker"]``)."""
    if path.startswith("chunker."):
        return _lookup(manifest["chunker"], path.split(".", 1)[1])
    # through the dataclass: an index written before a key existed has its default
    return _lookup(to_dict(from_dict(IndexConfig, manifest["config"])), path)


def _fitted_chunker(cfg: IndexConfig, window: int) -> ChunkerConfig:
    """The chunker ``build_index`` will use with a model of ``window`` text tokens (unset: the
    default fitted to it; above it: clipped to it), as ``serving.index._effective_chunker``
    decides; the points' ``effective`` values are read back from the built manifests."""
    fitted = cfg.chunker.fitted(window)
    if fitted.chunk_tokens > window:
        return dataclasses.replace(fitted, chunk_tokens=window)
    return fitted


def _chunk_tokens_mean(folder: Path) -> float:
    """Mean tokens per chunk of a built index (its ``chunks.sqlite``): most documents may be
    shorter than the chunk size, which then changes little."""
    db = sqlite3.connect(f"file:{folder / 'chunks.sqlite'}?mode=ro", uri=True)
    try:
        return round(float(db.execute("SELECT avg(n_tokens) FROM chunks").fetchone()[0]), 1)
    finally:
        db.close()


def _corpus_path(args: argparse.Namespace, index_dir: str) -> Path:
    """``--corpus``: an index's manifest does not record the file it was built from, so there is
    no default to fall back on."""
    given = getattr(args, "corpus", None)
    if not given:
        raise ConfigError(
            f"eval sweep --param {args.param}: every value re-indexes the corpus, and the index {index_dir} "
            "does not record which corpus it was built from (its manifest.json has no corpus path); pass "
            f"--corpus CORPUS.jsonl, the file given to 'searchsmith index CORPUS.jsonl --out {index_dir}'")
    return Path(given)


def _check_gold(items: list[dict[str, Any]], records: list[dict[str, Any]], corpus: Path) -> list[str]:
    """Refuse a corpus that holds none of the questions' supporting documents (the wrong file);
    a warning when it lacks some of them (their questions cannot be answered from it)."""
    from searchsmith.serving.evaluate import missing_supporting

    gold, missing = missing_supporting(items, {r["id"] for r in records})
    if gold and len(missing) == gold:
        raise ConfigError(f"eval sweep: the corpus {corpus} holds none of the questions' supporting documents "
                          f"(e.g. {missing[:3]}); pass the --corpus the --data was written for")
    if missing:
        return [f"the corpus {corpus} lacks {len(missing)} of the {gold} supporting documents of the "
                f"questions (e.g. {missing[:3]}): no value can find them"]
    return []


def _value_pipeline(cfg: PipelineConfig, folder: Path, embedder: Embedder, first: Pipeline | None) -> Pipeline:
    """The pipeline of one value's index, its models shared with the ``first`` value's.

    Every value's pipeline is open at once: each question is asked under every value in turn
    (the timing's fairness), and reopening one per question would time its loading and cold
    start. What must differ per value is only the index (its vectors, chunk store and router);
    the pipeline config is the same for every value, so the first pipeline loads the bundles,
    the LLM and the query embedder (``load_pipeline``) and the others share them: the memory
    is one copy of the models plus one index per value, where each ``load_pipeline`` loaded
    every model again. The answers are those of a pipeline loaded alone (as ``eval sweep``'s
    ``sibling_pipeline``).

    Args:
        embedder: the embedder the value's index was built with, its query embedder when
            ``bundles.embedder`` is not set (one object for every value unless the sweep
            changes ``index.embedder.*``).
    """
    from searchsmith.serving.index import Index, read_manifest
    from searchsmith.serving.pipeline.pipeline import Pipeline, bundle_embedder, load_pipeline

    if first is None:
        return load_pipeline(cfg, str(folder), embedder=None if cfg.bundles.embedder else embedder)
    query_embedder = embedder
    if cfg.bundles.embedder:
        # the bundle was checked against the first index's model; another model is checked (and
        # refused, as load_pipeline refuses it) by loading it for this index
        manifest, seen = read_manifest(folder), first.index.manifest
        same = all(manifest[k] == seen[k] for k in ("embedding_model", "embedding_dim"))
        query_embedder = first.embedder if same else bundle_embedder(cfg.bundles.embedder, manifest, cfg)
    index = Index.load(folder, embedder=query_embedder)
    return Pipeline(cfg, index, query_embedder, first.bundles, generator=first.generation.llm)


def eval_index_sweep(args: argparse.Namespace) -> dict[str, object]:
    """Sweep the index setting ``args.param`` (``index.<IndexConfig key>``) over ``args.values``.

    Args:
        args: ``param``, ``values``, ``data``, ``index`` (or the ``--config``'s ``index:``),
            ``corpus``, and optionally ``config``, ``bundle``, ``limit``, ``plot``,
            ``per_item``, ``resamples``, ``seed``.

    Returns:
        :func:`searchsmith.serving.sweep.eval_sweep`'s result, each point with ``effective``
        (the value the build used), ``clipped``, ``chunks``, ``chunk_tokens_mean`` and ``build_s`` (and
        ``same_index_as`` where an earlier value built the same index), plus ``corpus``,
        ``default_point`` (the value judged as the default) and ``warnings``.

    Raises:
        ConfigError: an unknown key or a value the config refuses (before any work), no
            index or no corpus, a corpus without the questions' documents.
        BundleError: a missing or corrupt index.
    """
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.evaluate import (
        pipeline_item_metrics,
        pipeline_items,
        with_eval_bundles,
        write_outputs,
    )
    from searchsmith.serving.index import build_index, read_manifest
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.serving.profiling.timing import rotation
    from searchsmith.training.evaluate import progress_bar

    # 1. The setting, its values and every index config: all refused before any work
    path = index_setting(args.param)
    values = parse_values(getattr(args, "values", None) or "", args.param)
    pipe_cfg = with_eval_bundles(load_pipeline_config(getattr(args, "config", None)), args)
    index_dir = args.index or pipe_cfg.index
    if not index_dir:
        raise ConfigError(f"eval sweep --param {args.param} needs --index DIR (the index whose config is varied)")
    manifest = read_manifest(index_dir)
    base = manifest["config"]
    configs = [from_dict(IndexConfig, apply_overrides(copy.deepcopy(base), [f"{path}={json.dumps(v)}"]),
                         source=f"eval sweep {args.param}={v}") for v in values]
    # the --index's own setting, as built (an unset chunk size is the model's window)
    default = _effective(manifest, path)

    # 2. Questions and corpus
    items = pipeline_items(args)
    corpus = _corpus_path(args, str(index_dir))
    records = read_corpus(corpus)
    warnings = _check_gold(items, records, corpus)
    if len(records) != manifest["documents"]:
        warnings.append(f"the corpus {corpus} has {len(records)} documents, the index {index_dir} "
                        f"{manifest['documents']}: the points are indexes of the corpus, not of the --index")
    resamples = int(getattr(args, "resamples", DEFAULT_RESAMPLES))
    seed = int(getattr(args, "seed", DEFAULT_SEED))

    # 3. One index per value (an identical one built once) and its pipeline, all open together
    # (the models loaded once and shared: _value_pipeline); then, after one untimed answer on
    # each, every question under each value in turn, in a rotating order (timing.rotation, as
    # eval sweep interleaves its values), so that cold start and the machine's drift do not land
    # on the first or the last value's latency_ms
    shared = None if path.startswith("embedder.") else Embedder(configs[0].embedder)
    points: list[dict[str, Any]] = []
    built: dict[str, tuple[object, Path, dict[str, Any]]] = {}  # effective config -> (value, folder, manifest)
    pipes: dict[Path, Pipeline] = {}  # index folder -> its pipeline (values that built the same index share it)
    pipe_of: list[Pipeline] = []  # per value
    rows: list[list[dict[str, float]]] = [[] for _ in values]  # per value, per question
    lines: list[list[dict[str, object]]] = [[] for _ in values]  # per value, the --per-item lines
    root = Path(tempfile.mkdtemp(prefix="searchsmith-index-sweep-"))
    try:
        try:
            for i, (value, icfg) in enumerate(zip(values, configs, strict=True)):
                embedder = shared or Embedder(icfg.embedder)
                key = repr(dataclasses.replace(icfg, chunker=_fitted_chunker(icfg, embedder.max_seq_length - 2))
                           ) if shared else f"value {i}"
                point: dict[str, Any] = {"value": value}
                if key in built:
                    first, folder, built_manifest = built[key]
                    point.update(build_s=0.0, same_index_as=first)
                else:
                    folder = root / f"value-{i}"
                    log.info("eval sweep: indexing %s with %s=%r", corpus, args.param, value)
                    t0 = time.perf_counter()
                    built_manifest = build_index(records, folder, icfg, embedder=embedder)
                    point["build_s"] = round(time.perf_counter() - t0, 2)
                    built[key] = (value, folder, built_manifest)
                point["chunk_tokens_mean"] = _chunk_tokens_mean(folder)
                effective = _effective(built_manifest, path)
                # None (unset) is fitted to the model, not clipped
                point.update(effective=effective, clipped=value is not None and effective != value,
                             chunks=int(built_manifest["chunks"]))
                points.append(point)
                if folder not in pipes:
                    pipes[folder] = _value_pipeline(pipe_cfg, folder, embedder, next(iter(pipes.values()), None))
                pipe_of.append(pipes[folder])
            for pipe in pipes.values():  # warm-up: untimed, its answer unused
                pipe.ask(items[0]["query"], items[0].get("history"))
            with progress_bar("eval sweep", len(values) * len(items), "question") as bar:
                for j, it in enumerate(items):
                    for v in rotation(j, range(len(values))):
                        m = pipeline_item_metrics(pipe_of[v].ask(it["query"], it.get("history")), it)
                        rows[v].append(m)
                        lines[v].append({"id": it.get("id", j), "value": values[v], **m})
                        bar.update(1)
        finally:
            for pipe in reversed(pipes.values()):
                pipe.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for point, value_rows in zip(points, rows, strict=True):
        point["metrics"] = _summary(value_rows, resamples, seed)
    by_value = {repr(v): value_rows for v, value_rows in zip(values, rows, strict=True)}
    per_item = [line for value_lines in lines for line in value_lines]

    # 4. The default (the first value built as the --index was) and what the builds changed
    default_point = next((p["value"] for p in points if p["effective"] == default), None)
    clipped = [p for p in points if p["clipped"]]
    if clipped:
        warnings.append(
            f"{args.param} = {', '.join(str(p['value']) for p in clipped)}: built as "
            f"{', '.join(str(p['effective']) for p in clipped)} (chunks are clipped to the embedding model "
            f"{built_manifest['embedding_model']}'s window of {built_manifest['max_seq_length'] - 2} text tokens); "
            "values with the same effective setting are the same index and differ only by timing")
    if default_point is None:
        warnings.append(f"the --index's own {args.param} ({default}) is not among the values as built; add it to "
                        "--values to judge the others against it")
    elif default_point != default:
        warnings.append(f"the --index's own {args.param} is {default}; {default_point} builds the same index, so the "
                        f"verdicts judge the other values against {default_point}")
    out: dict[str, Any] = {
        "task": "sweep", "data": str(args.data), "index": str(index_dir), "corpus": str(corpus), "n": len(items),
        "param": args.param, "default": default, "default_point": default_point, "values": values,
        "points": points,
        "verdicts": _verdicts(points, default_point, by_value, resamples, seed),
        "bootstrap": {"resamples": resamples, "seed": seed},
        "warnings": warnings,
    }
    for w in warnings:
        log.warning("eval sweep: %s", w)
    return write_outputs(args, out, per_item, plot_sweep)
