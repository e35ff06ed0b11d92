"""``searchsmith eval route`` (and the other serving-side evaluations).

Routing data, JSONL: ``{"history": [{"role","content"}], "query", "sources": [gold names]}``.
For each mode (parallel, serial, auto) it reports, over all items and separately over
follow-ups (non-empty history) and single turns:

* ``recall@1``: the top source is gold;
* ``recall@K``: share of the gold sources found in the top K;
* ``mrr``: 1 / rank of the first gold source (0 when none in the top K).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ValidationError

MODES = ("parallel", "serial", "auto")


def read_jsonl(path: str | Path, required: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    """Read a JSONL evaluation file; every problem names the file and line."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"{what} data {str(p)!r} does not exist")
    out, errors = [], []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{p}:{lineno}: not valid JSON ({exc.msg})")
            continue
        missing = [k for k in required if k not in rec] if isinstance(rec, dict) else list(required)
        if missing:
            errors.append(f"{p}:{lineno}: missing field(s) {missing}")
            continue
        out.append(rec)
    if errors:
        raise ValidationError(f"{what} data {p}: {len(errors)} problem(s)\n  " + "\n  ".join(errors[:20]))
    if not out:
        raise ValidationError(f"{what} data {p} is empty")
    return out


def route_metrics(ranked: list[str], gold: list[str], k: int) -> dict[str, float]:
    """recall@1, recall@k and reciprocal rank of one routed query."""
    top = ranked[:k]
    gold_set = set(gold)
    rr = next((1.0 / (i + 1) for i, s in enumerate(top) if s in gold_set), 0.0)
    return {"recall@1": float(bool(top) and top[0] in gold_set),
            f"recall@{k}": len(gold_set & set(top)) / len(gold_set),
            "mrr": rr}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    keys = rows[0].keys()
    out = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in keys}
    # 95 % normal-approximation interval of recall@1 (a proportion), for honest comparisons
    p = out["recall@1"]
    half = 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / len(rows))
    out["recall@1_ci95"] = [round(max(0.0, p - half), 4), round(min(1.0, p + half), 4)]
    out["n"] = len(rows)
    return out


def eval_route(args: argparse.Namespace) -> dict[str, Any]:
    """Routing recall@1 / recall@K / MRR per mode, on all items, follow-ups and single turns."""
    from searchsmith.serving.cli import load_router

    if not args.index:
        raise ValidationError("eval route needs --index DIR (built with 'searchsmith index')")
    items = read_jsonl(args.data, ("query", "sources"), "routing")
    if args.limit:
        items = items[: args.limit]
    router = load_router(args.index, args.config)
    unknown = sorted({s for it in items for s in it["sources"]} - set(router.sources))
    if unknown:
        raise ValidationError(f"routing data {args.data}: gold source(s) {unknown} are not in the index "
                              f"(index sources: {router.sources})")
    k = max(1, min(args.k, len(router.sources)))
    per_item = []
    summary: dict[str, Any] = {"task": "route", "data": str(args.data), "index": str(args.index),
                               "k": k, "n": len(items),
                               "followups": sum(1 for it in items if it.get("history")), "modes": {}}
    for mode in MODES:
        rows: dict[str, list[dict[str, float]]] = {"all": [], "followups": [], "single": []}
        for i, it in enumerate(items):
            res = router.route(it["query"], it.get("history"), mode=mode, top_k=k)
            m = route_metrics(res.names, list(it["sources"]), k)
            rows["all"].append(m)
            rows["followups" if it.get("history") else "single"].append(m)
            per_item.append({"i": i, "mode": mode, "query": it["query"], "gold": it["sources"],
                             "ranked": res.names, "routed_text": res.routed_text, **m})
        summary["modes"][mode] = {part: _mean(r) for part, r in rows.items() if r}
    if args.per_item:
        with open(args.per_item, "w", encoding="utf-8") as fh:
            for row in per_item:
                fh.write(json.dumps(row) + "\n")
    return summary


# -- pipeline --------------------------------------------------------------------------------
_ARTICLES = {"a", "an", "the"}


def _answer_tokens(text: str) -> list[str]:
    """SQuAD-style normalisation: lower case, punctuation and articles removed, no [n] markers."""
    import re

    text = re.sub(r"\[\d+\]", " ", text.lower())
    text = re.sub(r"[^\w\s]", " ", text)
    return [t for t in text.split() if t not in _ARTICLES]


def token_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of an answer against the gold answer (SQuAD definition)."""
    from collections import Counter

    p, g = _answer_tokens(prediction), _answer_tokens(gold)
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or common == 0:
        return float(p == g)
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


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
    gold = set(item["supporting"])
    cited = {r["doc_id"] for r in ans["references"]}
    passages = {p["doc_id"] for p in ans["passages"]}
    used = cited or passages
    plain = " ".join(_answer_tokens(ans["answer_text"]))
    return {
        "support_recall": len(gold & used) / len(gold) if gold else 0.0,
        "retrieval_recall": len(gold & passages) / len(gold) if gold else 0.0,
        "f1": token_f1(ans["answer_text"], str(item["answer"])),
        "contains": float(bool(_answer_tokens(str(item["answer"])))
                          and f" {' '.join(_answer_tokens(str(item['answer'])))} " in f" {plain} "),
        "citation_precision": len(gold & cited) / len(cited) if cited else 0.0,
        "citation_recall": len(gold & cited) / len(gold) if gold else 0.0,
        "model_calls": float(ans["trace"]["model_calls"]),
        "tokens": float(ans["trace"]["tokens_in"] + ans["trace"]["tokens_out"]),
        "latency_ms": float(ans["trace"]["total_ms"]),
    }


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    keys = [k for k in rows[0] if k != "latency_ms"]
    out: dict[str, Any] = {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in keys}
    lat = sorted(r["latency_ms"] for r in rows)
    out["latency_ms_p50"] = round(lat[len(lat) // 2] if len(lat) % 2 else (lat[len(lat) // 2 - 1] + lat[len(lat) // 2]) / 2, 1)
    out["n"] = len(rows)
    return out


def _stage_percentiles(traces: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    from searchsmith.serving.profiling.common import percentiles

    by_stage: dict[str, list[float]] = {}
    for tr in traces:
        for name, st in tr["stages"].items():
            by_stage.setdefault(name, []).append(st["latency_ms"] / 1e3)
        by_stage.setdefault("total", []).append(tr["total_ms"] / 1e3)
    out = {}
    for name, xs in by_stage.items():
        p = percentiles(xs)
        out[name] = {"p50_ms": round(p["p50_ms"], 1), "p95_ms": round(p["p95_ms"], 1)}
    return out


def eval_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """Answer quality, citations and latency of the pipeline on ``{"id", "query", "history"?,
    "answer", "supporting"}`` items, with the SRSA strategy ablation (routed vs each strategy
    forced) and serial vs parallel routing on the follow-ups, all in the same run."""
    from searchsmith.serving.pipeline.config import STRATEGIES, load_pipeline_config
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    items = read_jsonl(args.data, ("query", "answer", "supporting"), "pipeline")
    if args.limit:
        items = items[: args.limit]
    cfg = load_pipeline_config(args.config)
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
    finally:
        pipe.close()
    routed = _summary(runs["routed"])
    out: dict[str, Any] = {
        "task": "pipeline", "data": str(args.data), "index": str(args.index or cfg.index), "n": len(items),
        "followups": len(followups), "generation": cfg.generation.backend,
        "bundles": {k: v for k, v in vars(cfg.bundles).items() if k in ("decomposer", "reranker", "citation", "images")},
        **routed,
        "latency_per_stage": _stage_percentiles(traces),
        "strategy_ablation": {name: _summary(rows) for name, rows in runs.items()
                              if name == "routed" or name.startswith("forced_")},
        "routing_followups": {name: _summary(rows) for name, rows in runs.items() if name.startswith("routing_")},
    }
    if args.per_item:
        with open(args.per_item, "w", encoding="utf-8") as fh:
            for row in per_item:
                fh.write(json.dumps(row) + "\n")
    return out
