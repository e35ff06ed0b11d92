"""``searchsmith profile pipeline``: per-stage latency of ``Pipeline.ask`` for each preset.

The demo questions (``models/demo/qa.jsonl``, follow-ups with their history) are asked of a
pipeline over an index built from the demo corpus (or ``--index DIR``, or the config's
``index:``), with ``--config FILE`` (else the default config: no bundles, every stage on its
offline fallback). Each question is asked under every preset of the config (``turbo``,
``small``, ``large`` by default), interleaved so that a change in the machine's load hits
every preset alike. The presets are each other's baselines in the same run: ``turbo`` runs
no rewrite, decomposition, rerank, timeline or images, so ``ratio_p50_vs_turbo`` is what the
extra stages cost end to end.

Reported per preset: p50/p95/p99 of the end-to-end wall time of ``ask`` and of every stage
in the answer's ``trace`` (top-level stages and the sub-stages timed inside ``retrieval``),
the share of answers in which a stage was skipped, model calls; then a summary line; and
``pipeline_stages.png``, a stacked bar of the per-stage p50 per preset with each preset's
end-to-end p50 marked.

Sizes: full = every question, 3 rounds, the whole corpus; ``--quick`` = 6 questions (2
follow-ups), 1 round, about 50 documents; ``SEARCHSMITH_PROFILE_TINY=1`` (the tests) = 2
questions, 1 round, their supporting documents only, at most 8 sentences per answer node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.profiling.common import ProfileContext, check_index, percentiles, save_plot
from searchsmith.serving.profiling.timing import resolve_device

# Stages timed inside another one (``retrieval``): reported, not stacked (they would count twice).
NESTED_PREFIXES = ("retrieval.", "rerank")
BASELINE_PRESET = "turbo"
PRESET_ORDER = ("turbo", "small", "large")
TINY_OVERRIDES = ("generation.extractive.max_sentences=8",)


def demo_questions(n: int | None, follow_ups: int) -> list[dict[str, Any]]:
    """``n`` demo questions (all when None), the last ``follow_ups`` of them with history.

    Returns:
        ``[{"id", "query", "history"?, "supporting"}, ...]`` from ``models/demo/qa.jsonl``.
    """
    from searchsmith.models.demo import qa_path
    from searchsmith.models.jsonl import read_jsonl

    qa = read_jsonl(qa_path(), ["query"], what="demo QA")
    if n is None:
        return qa
    plain = [q for q in qa if not q.get("history")]
    with_history = [q for q in qa if q.get("history")]
    return plain[: n - follow_ups] + with_history[:follow_ups]


def demo_documents(questions: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """Corpus records for the index: the questions' supporting documents first, then others.

    Args:
        questions: the questions to be asked (their ``supporting`` ids are always included).
        limit: total documents (None = the whole demo corpus); other documents are taken
            round-robin over the sources so that routing has every source to choose from.
    """
    from searchsmith.models.demo import corpus_path
    from searchsmith.serving.corpus import read_corpus

    records = read_corpus(corpus_path())
    if limit is None:
        return records
    wanted = {d for q in questions for d in q.get("supporting", [])}
    chosen = [r for r in records if r["id"] in wanted]
    by_source: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["id"] not in wanted:
            by_source.setdefault(r["source"], []).append(r)
    queues = list(by_source.values())
    i = 0
    while len(chosen) < limit and any(queues):
        q = queues[i % len(queues)]
        if q:
            chosen.append(q.pop(0))
        i += 1
    return chosen


def _ordered_presets(names: list[str]) -> list[str]:
    return [p for p in PRESET_ORDER if p in names] + [p for p in names if p not in PRESET_ORDER]


def _is_nested(stage: str) -> bool:
    return stage.startswith(NESTED_PREFIXES)


def _read_config(args: argparse.Namespace) -> tuple[str | None, list[str], Any]:
    """``--config`` (else the default config) with the tiny run's overrides: (path, overrides, config).

    Raises:
        ConfigError: faiss is missing, or the config is invalid.
        ValidationError: ``--config`` is not a file.
    """
    from searchsmith.serving.pipeline import load_pipeline_config

    try:
        import faiss  # noqa: F401 - every index is a faiss index
    except ImportError:
        raise ConfigError("profile pipeline: faiss is not installed; the index needs it "
                              "(pip install faiss-cpu)") from None
    config_path = getattr(args, "config", None)
    if config_path and not Path(config_path).is_file():
        raise ValidationError(f"profile pipeline --config: {config_path!r} is not a file; pass a pipeline "
                              "config YAML (see 'searchsmith ask --config')")
    overrides = list(TINY_OVERRIDES) if os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1" else []
    return config_path, overrides, load_pipeline_config(config_path, overrides)


def check_args(args: argparse.Namespace) -> None:
    """``--config`` and the index (``--index``, else the config's ``index:``), checked before any
    step of the run is measured (in a group, the steps before this one included)."""
    _, _, cfg = _read_config(args)
    index_dir = getattr(args, "index", None) or cfg.index
    if index_dir:
        check_index(index_dir)


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    from searchsmith.serving.pipeline import load_pipeline
    from searchsmith.serving.pipeline.pipeline import STAGE_NAMES

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"  # the tests' end-to-end run
    device = resolve_device("pipeline", ctx.device)
    config_path, overrides, cfg = _read_config(args)
    # The GPU group runs one round (126 asks): its whole command must fit in about 5 minutes.
    n_questions, follow_ups, rounds, doc_limit = ((2, 1, 1, 0) if tiny else (6, 2, 1, 48) if ctx.quick
                                                  else (None, 0, 1 if ctx.group == "gpu" else 3, None))
    questions = demo_questions(n_questions, follow_ups)
    presets = _ordered_presets(list(cfg.presets))
    baseline = BASELINE_PRESET if BASELINE_PRESET in presets else presets[0]

    work = Path(tempfile.mkdtemp(prefix="searchsmith-profile-pipeline-"))
    try:
        index_dir = getattr(args, "index", None) or cfg.index
        embedder = None
        if not index_dir:
            from searchsmith.serving.embedder import Embedder, EmbedderConfig
            from searchsmith.serving.index import build_index

            docs = demo_documents(questions, doc_limit)
            embedder = Embedder(EmbedderConfig(device=device))
            t0 = time.perf_counter()
            manifest = build_index(docs, work / "index", embedder=embedder)
            index_dir = str(work / "index")
            index_label = f"demo corpus, {len(docs)} documents (built in this run)"
            ctx.emit({"suite": "pipeline", "index_build_s": time.perf_counter() - t0, "documents": len(docs),
                      "chunks": manifest.get("chunks"), "device": device})
        else:
            index_label = str(index_dir)
        pipe = load_pipeline(cfg, index_dir, embedder=embedder)
        try:
            samples = _measure(ctx, pipe, questions, presets, rounds, warmup_all=not tiny)
        finally:
            pipe.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    workload = {"questions": len(questions), "follow_ups": sum(1 for q in questions if q.get("history")),
                "rounds": rounds, "device": device, "index": index_label, "config": config_path,
                "overrides": overrides, "bundles": sorted(pipe.bundles), "generation": cfg.generation.backend,
                "baseline": baseline}
    rows: dict[str, dict[str, Any]] = {}
    for name in presets:
        s = samples[name]
        stage_names = sorted({k for t in s["stages"] for k in t})
        stages = {k: percentiles([t.get(k, {}).get("latency_ms", 0.0) / 1e3 for t in s["stages"]])
                  for k in stage_names}
        skipped = {k: float(np.mean([bool(t.get(k, {}).get("skipped")) for t in s["stages"]])) for k in stage_names}
        rows[name] = ctx.emit({
            "suite": "pipeline", "preset": name, "settings": asdict(cfg.presets[name]), "asks": len(s["wall"]),
            "end_to_end": percentiles(s["wall"]), "trace_total": percentiles([x / 1e3 for x in s["total_ms"]]),
            "stages": stages, "top_level_stages": [k for k in STAGE_NAMES if k in stages],
            "skipped_share": skipped, "model_calls_mean": float(np.mean(s["model_calls"])),
            "strategies": {k: s["strategies"].count(k) for k in sorted(set(s["strategies"]), key=str)},
            **workload})
    base = rows[baseline]["end_to_end"]
    ctx.emit({"suite": "pipeline", "summary": True,
              "p50_ms": {p: r["end_to_end"]["p50_ms"] for p, r in rows.items()},
              "p95_ms": {p: r["end_to_end"]["p95_ms"] for p, r in rows.items()},
              "p99_ms": {p: r["end_to_end"]["p99_ms"] for p, r in rows.items()},
              f"ratio_p50_vs_{baseline}": {p: r["end_to_end"]["p50_ms"] / base["p50_ms"] for p, r in rows.items()},
              **workload})
    _plot(ctx, rows, presets, [k for k in STAGE_NAMES if any(k in r["stages"] for r in rows.values())],
          device, len(questions))


def _measure(ctx: ProfileContext, pipe: Any, questions: list[dict[str, Any]], presets: list[str],
             rounds: int, warmup_all: bool) -> dict[str, dict[str, list[Any]]]:
    """Ask every question under every preset, ``rounds`` times; the traces and wall times."""
    # Warm-up (untimed): model loads, first-call allocations, tokenizer caches.
    for name in presets if warmup_all else presets[:1]:
        q = questions[0]
        pipe.ask(q["query"], q.get("history"), preset=name)
    samples: dict[str, dict[str, list[Any]]] = {
        p: {"wall": [], "total_ms": [], "stages": [], "model_calls": [], "strategies": []} for p in presets}
    with ctx.profiled("pipeline"):
        for r in range(rounds):
            for i, q in enumerate(questions):
                # rotate the preset order so that none always runs first (cold caches) or last
                shift = (i + r) % len(presets)
                for name in presets[shift:] + presets[:shift]:
                    t0 = time.perf_counter()
                    ans = pipe.ask(q["query"], q.get("history"), preset=name)
                    wall = time.perf_counter() - t0
                    tr = ans["trace"]
                    s = samples[name]
                    s["wall"].append(wall)
                    s["total_ms"].append(tr["total_ms"])
                    s["stages"].append(tr["stages"])
                    s["model_calls"].append(tr["model_calls"])
                    s["strategies"].append(tr["strategy"])
    return samples


def _plot(ctx: ProfileContext, rows: dict[str, dict[str, Any]], presets: list[str], stacked: list[str],
          device: str, n_questions: int) -> None:
    def draw(fig: Any, ax: Any) -> None:
        xs = np.arange(len(presets))
        bottom = np.zeros(len(presets))
        for stage in stacked:
            heights = np.array([rows[p]["stages"].get(stage, {}).get("p50_ms", 0.0) for p in presets])
            ax.bar(xs, heights, 0.6, bottom=bottom, label=stage)
            bottom += heights
        ax.plot(xs, [rows[p]["end_to_end"]["p50_ms"] for p in presets], "k_", markersize=30, mew=2,
                label="end to end p50")
        ax.set_xticks(xs, presets)
        ax.set_xlabel("preset (context and routing overlap in parallel routing mode)")
        ax.set_ylabel("latency p50 (ms)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    save_plot(ctx.out_dir / "pipeline_stages.png", draw,
              f"Pipeline per-stage latency p50 by preset ({device}, {n_questions} questions)")
