"""``searchsmith eval route`` (and the other serving-side evaluations).

Routing data, JSONL: ``{"history": [{"role","content"}], "query", "sources": [gold names]}``.
For each mode (parallel, serial, auto) it reports, over all items and separately over
follow-ups (non-empty history) and single turns:

* ``recall@1``: the top source is gold;
* ``recall@K``: share of the gold sources found in the top K;
* ``mrr``: 1 / rank of the first gold source (0 when none in the top K).

Each figure comes with its bootstrap 95 % interval (``<name>_ci95``; resamples and seed under
``"bootstrap"``). ``--per-item F`` writes one line per (item, mode), identified by ``i`` (the
item's position in the data) and ``mode``, with the metrics under the summary's names.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.errors import ValidationError
from searchsmith.models.intervals import attach_intervals, bootstrap_info
from searchsmith.models.io import write_jsonl_atomic
from searchsmith.models.metrics import mrr_at_k, percentiles, recall_at_k, set_prf
from searchsmith.models.tasks import TASKS
from searchsmith.models.text import answer_tokens, read_jsonl, token_f1

MODES = ("parallel", "serial", "auto")


def route_metrics(ranked: list[str], gold: list[str], k: int) -> dict[str, float]:
    """recall@1, recall@k and reciprocal rank of one routed query."""
    gold_set = set(gold)
    labels = [1.0 if s in gold_set else 0.0 for s in ranked]
    return {"recall@1": float(mrr_at_k(labels, 1) > 0),  # the top source is gold
            f"recall@{k}": recall_at_k(labels, k, n_relevant=len(gold_set)),
            "mrr": mrr_at_k(labels, k)}


def _mean(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Mean of each per-item metric, with its bootstrap 95 % interval, and ``n``."""

    if not rows:
        return {}
    out = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in rows[0]}
    return {**attach_intervals(out, rows), "n": len(rows)}


class _ModelRewriter:
    """A decomposer (bundle or torch) as the router's rewriter: ``rewrite(turns, query)``."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def rewrite(self, history: Any, query: str) -> str:
        turns = [{"role": t.role, "content": t.content} for t in history]
        out = self.model.rewrite(turns, query)
        return out.strip() if isinstance(out, str) and out.strip() else query


def _router_for_eval(args: argparse.Namespace) -> tuple[Any, str]:
    """The index's router; with --bundle / --checkpoint, an embedder (query vectors) or a
    decomposer (follow-up rewrites) of that model instead of the index's own."""
    import numpy as np
    from searchsmith.serving.cli import load_router
    from searchsmith.training.evaluate import load_eval_model

    em = load_eval_model("route", args, required=False)
    router = load_router(args.index, args.config)
    if em is None:
        return router, "index embedder, heuristic rewrite"
    if em.task == "decompose":
        router.rewriter = _ModelRewriter(em.model)
        return router, f"index embedder, rewrites by {em.origin}"
    dim = int(router.centroids.shape[1])
    got = int(np.asarray(em.model.encode(["dimension probe"])).shape[1])
    if got != dim:
        raise ValidationError(f"eval route: {em.origin} embeds into {got} dimensions, the index {args.index} into "
                              f"{dim}; use the embedder the index was built with (its bundle or folder)")
    router.embedder = em.model
    return router, f"queries embedded by {em.origin}"


def eval_route(args: argparse.Namespace) -> dict[str, Any]:
    """Routing recall@1 / recall@K / MRR per mode, on all items, follow-ups and single turns.

    ``args.bundle`` / ``args.checkpoint`` (optional): an ``embed`` model embeds the queries
    (the index's centroids stay), a ``decompose`` model rewrites the follow-ups.
    """
    from searchsmith.training.evaluate import progress_bar

    if not args.index:
        raise ValidationError("eval route needs --index DIR (built with 'searchsmith index')")
    items = read_jsonl(args.data, ("query", "sources"), "routing data")
    if args.limit:
        items = items[: args.limit]
    router, model = _router_for_eval(args)
    unknown = sorted({s for it in items for s in it["sources"]} - set(router.sources))
    if unknown:
        raise ValidationError(f"routing data {args.data}: gold source(s) {unknown} are not in the index "
                              f"(index sources: {router.sources})")
    k = max(1, min(args.k, len(router.sources)))
    per_item = []
    summary: dict[str, Any] = {"task": "route", "data": str(args.data), "index": str(args.index),
                               "model": model, "k": k, "n": len(items),
                               "followups": sum(1 for it in items if it.get("history")), "modes": {}}
    with progress_bar("eval route", len(MODES) * len(items), "query") as bar:
        for mode in MODES:
            rows: dict[str, list[dict[str, float]]] = {"all": [], "followups": [], "single": []}
            for i, it in enumerate(items):
                res = router.route(it["query"], it.get("history"), mode=mode, top_k=k)
                m = route_metrics(res.names, list(it["sources"]), k)
                rows["all"].append(m)
                rows["followups" if it.get("history") else "single"].append(m)
                per_item.append({"i": i, "mode": mode, "query": it["query"], "gold": it["sources"],
                                 "ranked": res.names, "routed_text": res.routed_text, **m})
                bar.update(1)
            summary["modes"][mode] = {part: _mean(r) for part, r in rows.items() if r}
    if args.per_item:
        write_jsonl_atomic(args.per_item, per_item)
    return {**summary, "bootstrap": bootstrap_info()}


# -- pipeline --------------------------------------------------------------------------------
def pipeline_item_metrics(ans: dict[str, Any], item: dict[str, Any]) -> dict[str, float]:
    """Metrics of one answer against ``{"answer", "supporting"}``.

    * ``support_recall``: share of the gold supporting documents among those the answer
      used (its cited documents; every passage given to the generator when it cites none);
    * ``retrieval_recall``: share of the gold supporting documents among all passages;
    * ``f1`` / ``contains``: token F1 of the plain answer, and whether it contains the gold
      answer's normalised tokens in order;
    * ``citation_precision`` / ``citation_recall``: cited documents vs ``supporting``
      (precision of an answer with no citation is 0 when it has sentences).
    """
    gold = item["supporting"]
    cited = {r["doc_id"] for r in ans["references"]}
    passages = {p["doc_id"] for p in ans["passages"]}
    used = cited or passages
    citations = set_prf(cited, gold)
    plain = " ".join(answer_tokens(ans["answer_text"], generated=True))
    gold_words = " ".join(answer_tokens(str(item["answer"]), generated=True))
    return {
        "support_recall": set_prf(used, gold)["recall"],
        "retrieval_recall": set_prf(passages, gold)["recall"],
        "f1": token_f1(ans["answer_text"], str(item["answer"]), generated=True),
        "contains": float(bool(gold_words) and f" {gold_words} " in f" {plain} "),
        "citation_precision": citations["precision"],
        "citation_recall": citations["recall"],
        "model_calls": float(ans["trace"]["model_calls"]),
        "tokens": float(ans["trace"]["tokens_in"] + ans["trace"]["tokens_out"]),
        "latency_ms": float(ans["trace"]["total_ms"]),
    }


def _p50_ms(latency_ms: np.ndarray) -> Callable[[np.ndarray], float]:
    """Median latency (ms) of a resample of item indices."""
    return lambda idx: percentiles((latency_ms[idx.astype(np.int64)] / 1e3).tolist())["p50_ms"]


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Mean of each per-item metric and the median latency, each with its bootstrap interval."""

    keys = [k for k in rows[0] if k != "latency_ms"]
    out: dict[str, Any] = {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in keys}
    latency = np.asarray([r["latency_ms"] for r in rows], dtype=np.float64)
    out["latency_ms_p50"] = round(_p50_ms(latency)(np.arange(len(rows))), 1)
    out = attach_intervals(out, rows, keys=keys, pooled={"latency_ms_p50": _p50_ms(latency)}, digits=1)
    out["n"] = len(rows)
    return out


def _stage_percentiles(traces: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """p50 / p95 latency (ms) of each stage and of the whole answer, with bootstrap intervals
    over the answers that ran the stage."""

    by_stage: dict[str, list[float]] = {}
    for tr in traces:
        for name, st in tr["stages"].items():
            by_stage.setdefault(name, []).append(st["latency_ms"] / 1e3)
        by_stage.setdefault("total", []).append(tr["total_ms"] / 1e3)
    out = {}
    for name, xs in by_stage.items():
        secs = np.asarray(xs, dtype=np.float64)
        stats = {q: (lambda idx, q=q: percentiles(secs[idx.astype(np.int64)].tolist())[q]) for q in ("p50_ms", "p95_ms")}
        point = {q: round(stat(np.arange(len(xs))), 1) for q, stat in stats.items()}
        out[name] = attach_intervals(point, [{} for _ in xs], pooled=stats, digits=1)
    return out


#: bundle task -> the pipeline config key (``bundles.<key>``) that loads it
# a bundle's task -> its key under the pipeline config's ``bundles`` (the registry's roles)
PIPELINE_BUNDLE_KEYS = {t.name: t.role for t in TASKS if t.in_pipeline}


def with_eval_bundles(cfg: Any, args: argparse.Namespace) -> Any:
    """``cfg`` with ``args.bundle`` (one bundle, or a folder of bundles as ``searchsmith export
    RUNS/ --out DIR`` writes) in place of the config's bundles of the same tasks.

    Raises:
        ConfigError: ``--checkpoint`` (the pipeline runs exported bundles), a folder without a
            bundle, two bundles of one task.
        BundleError: a bundle's manifest is missing or corrupt.
    """
    from dataclasses import replace

    from searchsmith.models.errors import ConfigError
    from searchsmith.models.runtime import MANIFEST, read_manifest

    if getattr(args, "checkpoint", None):
        raise ConfigError("eval pipeline: --checkpoint is not supported; the pipeline runs exported bundles. "
                          f"Export the run first (searchsmith export {args.checkpoint} --out DIR) and pass "
                          "--bundle DIR")
    if not getattr(args, "bundle", None):
        return cfg
    root = Path(args.bundle)
    folders = [root] if (root / MANIFEST).is_file() else (
        sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else [])
    if not folders:
        raise ConfigError(f"--bundle {root}: neither a bundle nor a folder of bundles (no {MANIFEST}); export "
                          "them with: searchsmith export RUN_DIR --out DIR")
    chosen: dict[str, str] = {}
    for folder in folders:
        key = PIPELINE_BUNDLE_KEYS.get(read_manifest(folder)["task"])
        if key is None:  # the embedder: the index's own embeds the queries
            continue
        if key in chosen:
            raise ConfigError(f"--bundle {root}: two {key} bundles ({chosen[key]} and {folder}); keep one")
        chosen[key] = str(folder)
    if not chosen:
        raise ConfigError(f"--bundle {root}: no decompose, rerank, cite or images bundle in it")
    return replace(cfg, bundles=replace(cfg.bundles, **chosen))


def eval_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """Answer quality, citations and latency of the pipeline on ``{"id", "query", "history"?,
    "answer", "supporting"}`` items, with the SRSA strategy ablation (routed vs each strategy
    forced) and serial vs parallel routing on the follow-ups, all in the same run.

    Every figure has its bootstrap 95 % interval (``<name>_ci95``, per variant too; the median
    latency and the stage percentiles are recomputed on each resample). ``--per-item F`` writes
    one line per (item, variant), identified by ``id`` (the item's, else its position) and
    ``variant``, with the metrics under the summary's names (``latency_ms`` per item)."""
    from searchsmith.serving.pipeline.config import STRATEGIES, load_pipeline_config
    from searchsmith.serving.pipeline.pipeline import load_pipeline
    from searchsmith.training.evaluate import progress_bar

    items = read_jsonl(args.data, ("query", "answer", "supporting"), "pipeline data")
    if args.limit:
        items = items[: args.limit]
    cfg = with_eval_bundles(load_pipeline_config(args.config), args)
    if not (args.index or cfg.index):
        raise ValidationError("eval pipeline needs --index DIR (built with 'searchsmith index') or 'index:' "
                              "in the --config file")
    pipe = load_pipeline(cfg, args.index)
    per_item: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, float]]] = {}
    traces: list[dict[str, Any]] = []
    followups = [it for it in items if it.get("history")]
    variants: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [("routed", {}, items)]
    variants += [(f"forced_{s}", {"strategy": s}, items) for s in STRATEGIES]
    variants += [(f"routing_{m}_followups", {"routing_mode": m}, followups) for m in ("serial", "parallel")]
    try:
        with progress_bar("eval pipeline", sum(len(s) for _, _, s in variants), "question") as bar:
            for name, kwargs, subset in variants:
                for i, it in enumerate(subset):
                    ans = pipe.ask(it["query"], it.get("history"), query_id=str(it.get("id", i)), **kwargs)
                    m = pipeline_item_metrics(ans, it)
                    runs.setdefault(name, []).append(m)
                    if name == "routed":
                        traces.append(ans["trace"])
                    per_item.append({"id": it.get("id", i), "variant": name, "query": it["query"],
                                     "gold": it["answer"], "answer": ans["answer"], "rewrite": ans["rewrite"],
                                     "strategy": ans["trace"]["strategy"], "sources": ans["trace"]["sources"],
                                     "cited": [r["doc_id"] for r in ans["references"]], **m})
                    bar.update(1)
    finally:
        pipe.close()
    routed = _summary(runs["routed"])
    out: dict[str, Any] = {
        "task": "pipeline", "data": str(args.data), "index": str(args.index or cfg.index), "n": len(items),
        "followups": len(followups), "generation": cfg.generation.backend,
        "bundles": {k: v for k, v in vars(cfg.bundles).items() if k in ("decomposer", "reranker", "citation", "images")},
        # which configured bundles the pipeline used, and why not (serving/pipeline/gates.py)
        "gates": {use: d.to_dict() for use, d in pipe.gates.items()},
        **routed,
        "latency_per_stage": _stage_percentiles(traces),
        "strategy_ablation": {name: _summary(rows) for name, rows in runs.items()
                              if name == "routed" or name.startswith("forced_")},
        "routing_followups": {name: _summary(rows) for name, rows in runs.items() if name.startswith("routing_")},
        "bootstrap": bootstrap_info(),
    }
    if args.per_item:
        write_jsonl_atomic(args.per_item, per_item)
    return out
