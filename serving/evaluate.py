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
