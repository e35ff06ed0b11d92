"""``searchsmith report --out DIR``: every design claim measured, with intervals, in one folder.

It runs evaluations that already exist (nothing is measured here that ``searchsmith eval``
cannot measure alone) on the demo data shipped with the package and, with ``--data-dir``,
on sets built from the open parts of ``../shared/data`` (TREC CAsT follow-ups for routing,
MuSiQue + HotpotQA for the answer sections), and writes, like a model card::

    DIR/report.md       one section per design claim: routing (KIMAs), strategies (SRSA), the
                        protocol router (IMACS), stage ablations and threshold sweeps (Xinyu),
                        the configured models against their baselines; the header says the
                        date, machine, commit, data, commands and seeds
    DIR/report.json     every evaluation's raw output under its section and data set, and
                        ``claims``: one verdict per design claim (the README's quality table)
    DIR/*.png           bars with intervals, sweep curves, regret curves
    DIR/items/*.jsonl   the per-item files behind the paired verdicts (``eval compare`` reads them)
    DIR/index/, DIR/data/   the indexes and data sets the evaluations used (unless --index)
    DIR/manifest.json   the files above: a later report may replace this folder, nothing else may

``--quick`` is the CI size (demo data only, 20 questions, fewer sweeps and seeds); the full
size asks every demo question and, with ``--data-dir``, ``MULTIHOP_QUESTIONS`` multi-hop
ones. ``--readme FILE`` rewrites the quality table of a Markdown file (between
``<!-- quality:start -->`` and ``<!-- quality:end -->``; the project keeps it in
``serving/profiling/RESULTS.md``, which the README links to) from the report's claims;
``--from DIR`` does that from an existing report without running any evaluation (its claims
and report.md are recomputed from the stored results with the current verdict rules).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.io import (
    check_replaceable,
    read_json_object,
    replace_dir,
    temp_dir_beside,
    write_json_atomic,
    write_text_atomic,
)

__all__ = ["SECTIONS", "SWEEPS", "configure_report", "quality_table", "refresh_report", "run_report",
           "write_report"]

MANIFEST = "manifest.json"
KIND = "report"
QUALITY_START, QUALITY_END = "<!-- quality:start -->", "<!-- quality:end -->"

#: pipeline config key -> (its values at the full size, at the quick size); each list holds the
#: default, so that every other value is judged against it on the same questions. ``index.*``
#: keys build one index per value (serving/index_sweep.py) and run on the multi-hop set when
#: there is one (its paragraphs are long enough for the chunk size to matter).
SWEEPS: dict[str, tuple[tuple[float, ...], tuple[float, ...] | None]] = {
    "citation.cosine_threshold": ((0.4, 0.5, 0.6, 0.7, 0.8), (0.4, 0.6, 0.8)),
    "retrieval.dedup_threshold": ((0.7, 0.75, 0.8, 0.9, 0.95), (0.7, 0.8, 0.95)),
    "retrieval.keep_ratio": ((0.5, 0.6, 0.7, 0.85, 1.0), (0.5, 0.7, 1.0)),
    "timeline.merge_threshold": ((0.6, 0.7, 0.8, 0.9, 0.97), None),  # None: full size only
    "timeline.relevance_ratio": ((0.0, 0.5, 0.7, 0.8, 0.9), None),
    "images.threshold": ((0.1, 0.2, 0.3, 0.4, 0.5), None),
    "index.chunker.chunk_tokens": ((150, 250, 350, 500), None),
    "index.chunker.overlap_ratio": ((0.0, 0.1, 0.25, 0.4), None),
}
QUICK_QUESTIONS = 20
MULTIHOP_QUESTIONS = 80  # the multi-hop set's questions (of 250) and only their candidate paragraphs
QUICK_SEEDS, FULL_SEEDS = 3, 10  # bandit streams
# The figures of the strategy table: (key in eval pipeline's summary, column heading).
STRATEGY_COLUMNS = (("support_recall", "support recall"), ("f1", "answer F1"),
                    ("latency_ms_p50", "latency p50 (ms)"), ("model_calls", "model calls"))


# -- what a report is built from --------------------------------------------------------------
@dataclass(frozen=True)
class Dataset:
    """One evaluation set and the index of its corpus.

    Attributes:
        name: its key in report.json (``demo``, ``cast``, ``multihop``).
        about: where it comes from and its licence, for the header.
        corpus: the corpus JSONL its index was built from.
        index: the index folder the evaluations read.
        shown: ``index`` as the commands in report.md show it (inside the final folder).
        qa: pipeline items (``{id, query, answer, supporting}``), if it has them.
        routing: routing items (``{query, history, sources}``), if it has them.
        stages: pipeline items with timeline and image gold (the stage ablations and the
            timeline / image sweeps), if it has them.
        questions: how many pipeline items the answer sections ask (0: all).
    """

    name: str
    about: str
    corpus: Path
    index: Path
    shown: str
    qa: Path | None = None
    routing: Path | None = None
    stages: Path | None = None
    questions: int = 0


@dataclass
class Build:
    """What the sections share while one report is built (in the temporary folder ``tmp``)."""

    tmp: Path
    quick: bool
    config: str | None
    routing_limit: int
    datasets: dict[str, Dataset]
    say: Callable[[str], None]
    commands: dict[str, str] = field(default_factory=dict)
    data_dir: str | None = None

    def with_qa(self) -> list[Dataset]:
        return [d for d in self.datasets.values() if d.qa is not None]

    def with_routing(self) -> list[Dataset]:
        return [d for d in self.datasets.values() if d.routing is not None]

    def args(self, ds: Dataset, *, data: Path, limit: int = 0, **kw: Any) -> argparse.Namespace:
        """The Namespace ``searchsmith eval`` would parse for ``ds``, with ``kw`` set."""
        from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

        base = {"data": str(data), "index": str(ds.index), "bundle": None, "checkpoint": None, "device": "auto",
                "config": self.config, "k": 3, "limit": limit, "per_item": None, "param": None, "values": None,
                "plot": None, "corpus": None, "stages": None, "lambdas": None, "seeds": 5, "quality": "f1",
                "resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "json": True}
        return argparse.Namespace(**{**base, **kw})

    def command(self, key: str, task: str, ds: Dataset, data: Path, limit: int = 0, extra: str = "",
                config: str | None = None) -> None:
        """Record the ``searchsmith eval`` command that reruns one evaluation alone."""
        cfg = config or self.config
        parts = [f"searchsmith eval {task} --data {self.shown(data)} --index {ds.shown}"]
        parts += [f"--config {self.shown(Path(cfg))}"] if cfg else []
        parts += [f"--limit {limit}"] if limit else []
        parts += [extra] if extra else []
        self.commands[key] = " ".join(parts)

    def shown(self, path: Path) -> str:
        """A path inside the report being built, as it will be once swapped in."""
        try:
            return str(Path("OUT") / Path(path).relative_to(self.tmp))
        except ValueError:
            return str(path)

    def item_file(self, name: str) -> Path:
        (self.tmp / "items").mkdir(exist_ok=True)
        return self.tmp / "items" / f"{name}.jsonl"


@dataclass(frozen=True)
class Section:
    """One part of the report.

    Attributes:
        key: its key in report.json.
        title: its heading in report.md.
        run: runs its evaluations; the result is stored under ``key`` (a dict per data set).
        render: report.md lines from its result and the whole report.
        claims: one row per design claim it settles (the README's quality table).
        quick: whether ``--quick`` runs it.
        uses_sets: whether it reads the indexed evaluation sets (a report of only the sections
            that do not builds no index).
    """

    key: str
    title: str
    run: Callable[[Build], dict[str, Any]]
    render: Callable[[dict[str, Any]], list[str]]
    claims: Callable[[dict[str, Any]], list[dict[str, str]]]
    quick: bool = True
    uses_sets: bool = True


def _claim(claim: str, data: str, measured: str, verdict: str) -> dict[str, str]:
    return {"claim": claim, "data": data, "measured": measured, "verdict": verdict}


def _diff_text(c: dict[str, Any], digits: int = 3) -> str:
    lo, hi = c["diff_ci95"]
    return f"{c['diff']:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}], p={c['p_value']:.2g}"


def _direction(c: dict[str, Any]) -> int:
    """+1 / -1 when a paired difference is above / below 0 beyond the noise (its interval
    excludes 0 and its permutation p-value is below 0.05), else 0."""
    from searchsmith.models.stats import direction

    return direction(c["diff_ci95"], c["p_value"])


def _ci(value: Any, ci: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g} [{ci[0]:g}, {ci[1]:g}]" if ci else f"{value:g}"


DATASET_ORDER = ("demo", "cast", "multihop")


def _sets(section: dict[str, Any]) -> list[tuple[str, Any]]:
    """A section's per-set results in a fixed order (report.json stores its keys sorted)."""
    rank = {n: i for i, n in enumerate(DATASET_ORDER)}
    return sorted(section.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _paired(file: Path, a: dict[str, str], b: dict[str, str], metric: str, key: str = "id") -> dict[str, Any]:
    """B − A on ``metric`` over the items of the per-item ``file`` whose fields match ``a`` / ``b``."""
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.models.stats import paired_difference

    rows = read_jsonl(file, what="report per-item file")

    def pick(sel: dict[str, str]) -> dict[Any, float]:
        return {str(r[key]): float(r[metric]) for r in rows if all(r.get(k) == v for k, v in sel.items())}

    xa, xb = pick(a), pick(b)
    shared = [k for k in xa if k in xb]
    return paired_difference([xa[k] for k in shared], [xb[k] for k in shared], metric).to_dict()


# -- 1. routing (KIMAs) --------------------------------------------------------------------------
# eval route's modes, as the claim names them: parallel routes the raw query, serial the rewrite
# fused with it; the rewrite alone is serial with serial_raw_weight 0 (a router config).
ROUTE_VARIANTS = (("raw query", "parallel", False), ("rewrite + raw fusion", "serial", False),
                  ("rewrite alone", "serial", True), ("auto", "auto", False))


def _run_routing(b: Build) -> dict[str, Any]:
    from searchsmith.serving.evaluate import eval_route

    rewrite_only = b.tmp / "data" / "router_rewrite_only.yaml"
    rewrite_only.parent.mkdir(exist_ok=True)
    write_text_atomic(rewrite_only, "# routing by the rewrite alone: the raw query's weight in serial mode is 0\n"
                                    "serial_raw_weight: 0.0\n")
    out: dict[str, Any] = {}
    for ds in b.with_routing():
        assert ds.routing is not None
        b.say(f"report: routing on {ds.name} (eval route)")
        runs = {}
        for tag, cfg in (("", None), ("_rewrite_only", str(rewrite_only))):
            items = b.item_file(f"route_{ds.name}{tag}")
            runs[tag] = eval_route(b.args(ds, data=ds.routing, limit=b.routing_limit, config=cfg,
                                          per_item=str(items)))
            b.command(f"routing {ds.name}{tag.replace('_', ' ')}", "route", ds, ds.routing, b.routing_limit,
                      f"--per-item {b.shown(items)}", config=cfg)
        res = runs[""]
        res["rewrite_alone"] = runs["_rewrite_only"]["modes"]["serial"]
        # paired on the follow-ups: each variant against the raw query
        followups = _followup_positions(ds.routing, b.routing_limit)
        res["paired_followups"] = {}
        if followups:
            for label, mode, alone in ROUTE_VARIANTS[1:]:
                tag = "_rewrite_only" if alone else ""
                res["paired_followups"][label] = _route_pair(b.item_file(f"route_{ds.name}"),
                                                             b.item_file(f"route_{ds.name}{tag}"), mode, followups)
        png = b.tmp / f"routing_{ds.name}.png"
        _plot_routing(png, res)
        res["plot"] = png.name
        out[ds.name] = res
    return out


def _followup_positions(path: Path, limit: int) -> set[int]:
    """Positions (eval route's ``i``) of the routing items that have a history."""
    from searchsmith.models.jsonl import read_jsonl

    items = read_jsonl(path, ("query", "sources"), "routing data")
    return {i for i, it in enumerate(items[:limit] if limit else items) if it.get("history")}


def _route_pair(raw_file: Path, other_file: Path, mode: str, positions: set[int]) -> dict[str, Any]:
    """recall@1 of ``mode`` (in ``other_file``) − the raw query's, on the items at ``positions``."""
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.models.stats import paired_difference

    raw = {r["i"]: r for r in read_jsonl(raw_file, what="report per-item file") if r["mode"] == "parallel"}
    other = {r["i"]: r for r in read_jsonl(other_file, what="report per-item file") if r["mode"] == mode}
    keys = sorted(i for i in positions if i in raw and i in other)
    return paired_difference([raw[i]["recall@1"] for i in keys], [other[i]["recall@1"] for i in keys],
                             "recall@1").to_dict()


def _render_routing(section: dict[str, Any]) -> list[str]:
    lines = []
    for name, r in _sets(section):
        lines += [f"### {name}: {r['n']} items ({r['followups']} follow-ups)", "",
                  "recall@1 with its 95 % interval; recall@K and MRR are in report.json.", "",
                  "| variant | follow-ups | single turns | all |", "|---|---|---|---|"]
        for label, mode, alone in ROUTE_VARIANTS:
            parts = r["rewrite_alone"] if alone else r["modes"][mode]
            cells = [_ci(parts[p]["recall@1"], parts[p].get("recall@1_ci95")) if p in parts else "-"
                     for p in ("followups", "single", "all")]
            lines.append(f"| {label} (`{mode}`{', serial_raw_weight 0' if alone else ''}) | " + " | ".join(cells) + " |")
        if r.get("paired_followups"):
            lines += ["", "Paired against the raw query on the follow-ups (recall@1, B − A, 95 % interval, "
                      "permutation p): " + "; ".join(f"{k} {_diff_text(c)}" for k, c in r["paired_followups"].items())]
        if r.get("latency_ms"):
            lines += ["", "Latency per query (p50 ms): " + ", ".join(f"{m} {v['p50_ms']:g}"
                                                                    for m, v in r["latency_ms"].items())]
        lines += ["", f"![routing {name}]({r['plot']})", ""]
    return lines


def _claims_routing(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, r in _sets(section):
        c = r.get("paired_followups", {}).get("rewrite + raw fusion")
        if not c:
            continue
        verdict = {1: "holds", 0: "not shown: inside the noise", -1: "refuted: the raw query routes better"}
        out.append(_claim("KIMAs: rewriting a follow-up before routing finds its source more often than the raw "
                          "query", f"{name} follow-ups (n={c['n']})",
                          f"recall@1 raw {c['a']:.3f}, fusion {c['b']:.3f}: {_diff_text(c)}{_route_latency(r)}",
                          verdict[_direction(c)]))
    return out


def _route_latency(r: dict[str, Any]) -> str:
    lat = r.get("latency_ms") or {}
    if "parallel" not in lat or "serial" not in lat:
        return ""
    return f"; routing p50 {lat['parallel']['p50_ms']:.1f} ms raw vs {lat['serial']['p50_ms']:.1f} ms fusion"


def _plot_routing(path: Path, routing: dict[str, Any]) -> Path:
    modes = list(routing["modes"])
    parts = [p for p in ("followups", "single") if any(p in routing["modes"][m] for m in modes)]
    groups = modes + ["rewrite alone"]
    rows = [routing["modes"][m] for m in modes] + [routing["rewrite_alone"]]
    series = {p: [(r[p]["recall@1"], r[p]["recall@1_ci95"]) if p in r else (0.0, [0.0, 0.0]) for r in rows]
              for p in parts}
    return _bars(path, groups, series, "recall@1 (95 % bootstrap interval)",
                 f"routing recall@1 per mode ({routing['n']} items)")


# -- 2. strategies (SRSA) ------------------------------------------------------------------------
def _run_strategies(b: Build) -> dict[str, Any]:
    from searchsmith.serving.evaluate import eval_pipeline

    out = {}
    for ds in b.with_qa():
        assert ds.qa is not None
        b.say(f"report: strategies on {ds.name} (eval pipeline)")
        items = b.item_file(f"pipeline_{ds.name}")
        res = eval_pipeline(b.args(ds, data=ds.qa, limit=ds.questions, per_item=str(items)))
        b.command(f"strategies {ds.name}", "pipeline", ds, ds.qa, ds.questions, f"--per-item {b.shown(items)}")
        forced = {n: s for n, s in res["strategy_ablation"].items() if n.startswith("forced_")}
        best = max(forced, key=lambda n: (forced[n]["f1"], forced[n]["support_recall"]))
        res["best_forced"] = best
        res["routed_strategies"] = routed_strategies(items)
        res["routed_vs_best_forced"] = {m: _paired(items, {"variant": best}, {"variant": "routed"}, m)
                                        for m in ("f1", "support_recall", "model_calls")}
        png = b.tmp / f"strategies_{ds.name}.png"
        _plot_strategies(png, res)
        res["plot"] = png.name
        out[ds.name] = res
    return out


def routed_strategies(items: Path) -> dict[str, int]:
    """How often the routed variant chose each strategy (from eval pipeline's per-item file)."""
    from collections import Counter

    from searchsmith.models.jsonl import read_jsonl

    rows = read_jsonl(items, what="report per-item file")
    return dict(Counter(str(r["strategy"]) for r in rows if r.get("variant") == "routed"))


def _render_strategies(section: dict[str, Any]) -> list[str]:
    lines = []
    for name, pipe in _sets(section):
        lines += [f"### {name}: {pipe['n']} questions, generation backend {pipe['generation']}", "",
                  "| variant | " + " | ".join(h for _, h in STRATEGY_COLUMNS) + " |",
                  "|---" * (len(STRATEGY_COLUMNS) + 1) + "|"]
        for v, s in pipe["strategy_ablation"].items():
            lines.append(f"| {v} | " + " | ".join(_ci(s.get(k), s.get(f"{k}_ci95")) for k, _ in STRATEGY_COLUMNS)
                         + " |")
        lines += ["", f"Routed against the best forced strategy ({pipe['best_forced']}), paired: "
                  + "; ".join(f"{m} {_diff_text(c)}" for m, c in pipe["routed_vs_best_forced"].items()), "",
                  f"![strategies {name}]({pipe['plot']})", ""]
    return lines


def _claims_strategies(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, pipe in _sets(section):
        f1, calls = pipe["routed_vs_best_forced"]["f1"], pipe["routed_vs_best_forced"]["model_calls"]
        d = _direction(f1)
        chosen = pipe.get("routed_strategies") or {}
        # the claim is "as well as": a tie on every question (no resample moves the mean) holds it
        tied = d == 0 and [float(x) for x in f1["diff_ci95"]] == [0.0, 0.0]
        verdict = ("holds: routed answers better" if d > 0 else "refuted: the forced strategy answers better"
                   if d < 0 else "holds: the same answer F1 on every question" if tied
                   else "not shown: inside the noise")
        if len(chosen) == 1:
            verdict = (f"not testable here: the router chose {next(iter(chosen))} for every question (no "
                       "decomposer passes its gate, so every question stays one node)")
        out.append(_claim(f"SRSA: choosing the strategy per question answers as well as the best forced one "
                          f"({pipe['best_forced'].removeprefix('forced_')})", f"{name} (n={f1['n']})",
                          f"answer F1 {f1['a']:.3f} forced vs {f1['b']:.3f} routed: {_diff_text(f1)}; "
                          f"model calls {calls['a']:.2f} vs {calls['b']:.2f}", verdict))
    return out


def _plot_strategies(path: Path, pipeline: dict[str, Any]) -> Path:
    ablation = pipeline["strategy_ablation"]
    names = list(ablation)
    series = {m: [(ablation[n][m], ablation[n][f"{m}_ci95"]) for n in names] for m in ("support_recall", "f1")}
    return _bars(path, names, series, "mean over questions (95 % bootstrap interval)",
                 f"routed vs forced strategies ({pipeline['n']} questions)")


# -- 3. protocol router (IMACS) ------------------------------------------------------------------
def _run_bandit(b: Build) -> dict[str, Any]:
    from searchsmith.serving.bandit_eval import eval_bandit

    seeds = QUICK_SEEDS if b.quick else FULL_SEEDS
    out = {}
    for ds in b.with_qa():
        assert ds.qa is not None
        b.say(f"report: protocol router on {ds.name} (eval bandit)")
        png = b.tmp / f"bandit_{ds.name}.png"
        items = b.item_file(f"bandit_{ds.name}")
        res = eval_bandit(b.args(ds, data=ds.qa, limit=ds.questions, seeds=seeds, plot=str(png),
                                 per_item=str(items)))
        b.command(f"bandit {ds.name}", "bandit", ds, ds.qa, ds.questions,
                  f"--seeds {seeds} --plot {png.name} --per-item {b.shown(items)}")
        res["plot"] = png.name
        out[ds.name] = res
    return out


def _render_per_set(section: dict[str, Any], render: Callable[[dict[str, Any]], list[str]], label: str) -> list[str]:
    """Each set's result as its evaluation renders it, under the set's heading, with its plot."""
    lines = []
    for name, res in _sets(section):
        lines += [f"### {name}", "", *render(res), "", f"![{label} {name}]({res['plot']})", ""]
    return lines


def _render_bandit(section: dict[str, Any]) -> list[str]:
    from searchsmith.serving.bandit_eval import render_markdown

    return _render_per_set(section, render_markdown, "bandit")


def _claims_bandit(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, res in _sets(section):
        for row in res["by_lambda"]:
            bandit, vs = row["bandit"], row["vs_best_fixed"]
            lo, hi = bandit["regret_vs_oracle_ci95"]
            verdict = {1: "holds: better than every fixed preset",
                       -1: f"refuted: the fixed preset {row['best_fixed']} earns more",
                       0: f"not shown: within the noise of the fixed preset {row['best_fixed']}"}[_direction(vs)]
            out.append(_claim(f"IMACS: the LinUCB router earns more reward than any fixed preset (lambda "
                              f"{row['lambda']:g})", f"{name} (n={res['n']}, {len(res['seeds'])} seeds)",
                              f"reward/question {bandit['mean_reward']:.3f} vs {row['best_fixed']} "
                              f"{row['fixed'][row['best_fixed']]['mean_reward']:.3f}: {_diff_text(vs)}; "
                              f"regret vs oracle {bandit['regret_vs_oracle']:.2f} [{lo:.2f}, {hi:.2f}]", verdict))
    return out


# -- 4. stage ablations (Xinyu) ------------------------------------------------------------------
def _stage_data(b: Build, ds: Dataset) -> Path:
    """The set a stage ablation asks: the QA items and, where the set has them, the stage items
    (timeline and image gold), each cut to the set's question count."""
    from searchsmith.models.io import write_jsonl_atomic
    from searchsmith.models.jsonl import read_jsonl

    assert ds.qa is not None
    if ds.stages is None:
        return ds.qa
    rows = []
    for path in (ds.qa, ds.stages):
        items = read_jsonl(path, ("query", "answer", "supporting"), "pipeline data")
        rows += items[: ds.questions] if ds.questions else items
    out = b.tmp / "data" / f"ablation_{ds.name}.jsonl"
    out.parent.mkdir(exist_ok=True)
    write_jsonl_atomic(out, rows)
    return out


def _run_ablation(b: Build) -> dict[str, Any]:
    from searchsmith.serving.ablation import eval_ablate

    out = {}
    for ds in b.with_qa():
        b.say(f"report: stage ablations on {ds.name} (eval ablate)")
        png = b.tmp / f"ablation_{ds.name}.png"
        items = b.item_file(f"ablation_{ds.name}")
        data = _stage_data(b, ds)
        res = eval_ablate(b.args(ds, data=data, plot=str(png), per_item=str(items)))
        b.command(f"ablation {ds.name}", "ablate", ds, data, 0, f"--plot {png.name} --per-item {b.shown(items)}")
        res["plot"] = png.name
        out[ds.name] = res
    return out


def _render_ablation(section: dict[str, Any]) -> list[str]:
    from searchsmith.serving.ablation import render_markdown

    return _render_per_set(section, render_markdown, "ablation")


ABLATION_VERDICTS = {"helps": "holds", "hurts": "refuted: it hurts", "no measurable effect": "not shown: inside the noise"}


def _stage_rank(stage: str) -> tuple[int, str]:
    from searchsmith.serving.ablation import STAGES

    keys = list(STAGES)
    return (keys.index(stage) if stage in keys else len(keys), stage)


def _stage_metric(stage: str, st: dict[str, Any]) -> str:
    """The metric the stage exists for (the first of its ``STAGES`` row; report.json sorts keys)."""
    from searchsmith.serving.ablation import STAGES

    first = STAGES[stage].metrics[0] if stage in STAGES else None
    return first if first in st["metrics"] else next(iter(st["metrics"]))


def _claims_ablation(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, res in _sets(section):
        for stage, st in sorted(res["stages"].items(), key=lambda kv: _stage_rank(kv[0])):
            if st.get("inactive"):
                out.append(_claim(f"{st.get('design', 'Xinyu')}: {stage}: {st['claim']}", f"{name} (n={res['n']})", "-",
                                  f"not measured: {st['inactive']}"))
                continue
            metric = _stage_metric(stage, st)
            m = st["metrics"][metric]
            if not m.get("n"):  # the set has no gold for it (timeline, images on multi-hop): not a claim here
                continue
            d = _direction(m) * (-1 if m.get("lower_is_better") else 1)
            verdict = "helps" if d > 0 else "hurts" if d < 0 else "no measurable effect"
            out.append(_claim(f"{st.get('design', 'Xinyu')}: {stage}: {st['claim']}", f"{name} (n={m['n']})",
                              f"{metric} {m['with']:.3f} with, {m['without']:.3f} without ({st['switch']}): "
                              f"{_diff_text(m)}", ABLATION_VERDICTS[verdict]))
    return out


# -- 5. threshold sweeps (Xinyu) -----------------------------------------------------------------
def _run_sweeps(b: Build) -> dict[str, Any]:
    from searchsmith.serving.sweep import eval_sweep

    out: dict[str, Any] = {}
    for param, (full, quick) in SWEEPS.items():
        values = quick if b.quick else full
        if values is None:
            continue
        for ds, data in _sweep_sets(b, param):
            b.say(f"report: sweep of {param} over {list(values)} on {ds.name}")
            png = b.tmp / f"sweep_{ds.name}_{param.replace('.', '_')}.png"
            csv = ",".join(str(v) for v in values)
            res = eval_sweep(b.args(ds, data=data, limit=ds.questions, param=param, values=csv, plot=str(png),
                                    corpus=str(ds.corpus)))
            res["plot"] = png.name
            res["dataset"] = ds.name
            out.setdefault(ds.name, {})[param] = res
            corpus = f" --corpus {b.shown(ds.corpus)}" if param.startswith("index.") else ""
            b.command(f"sweep {ds.name} {param}", "sweep", ds, data, ds.questions,
                      f"--param {param} --values {csv}{corpus} --plot {png.name}")
    return out


def _sweep_rank(param: str) -> tuple[int, str]:
    keys = list(SWEEPS)
    return (keys.index(param) if param in keys else len(keys), param)


def _sweep_sets(b: Build, param: str) -> list[tuple[Dataset, Path]]:
    """Where a setting is swept: the timeline and image thresholds on the sets with their gold
    (stage items), the index's settings on the set with the longest passages (multi-hop), the
    other pipeline settings on every QA set."""
    if param.startswith(("timeline.", "images.")):
        return [(d, d.stages) for d in b.datasets.values() if d.stages is not None]
    sets = [(d, d.qa) for d in b.with_qa() if d.qa is not None]
    if param.startswith("index."):
        return [(d, d.qa) for d in b.datasets.values() if d.name == "multihop" and d.qa is not None] or sets[:1]
    return sets


#: the metrics a setting exists for (the first is shown per value); a sweep's verdict judges
#: only these: a cheaper context (fewer passages) is a cost, not a quality.
SWEEP_FOCUS: dict[str, tuple[str, ...]] = {
    "citation.": ("citation_precision", "citation_recall"),
    "retrieval.dedup_threshold": ("support_recall", "f1", "redundancy"),
    "retrieval.": ("support_recall", "f1"),
    "timeline.": ("timeline_recall", "timeline_precision", "timeline_duplicates"),
    "images.": ("image_f1", "image_wrong", "image_recall", "image_precision"),
    "index.": ("retrieval_recall", "support_recall", "f1"),
}


def sweep_focus(param: str) -> tuple[str, ...]:
    """The :data:`SWEEP_FOCUS` metrics of ``param`` (the longest matching prefix; default: answer F1)."""
    keys = sorted((k for k in SWEEP_FOCUS if param.startswith(k)), key=len, reverse=True)
    return SWEEP_FOCUS[keys[0]] if keys else ("support_recall", "f1")


def _beats(res: dict[str, Any], metrics: Sequence[str] | None = None) -> list[str]:
    """The values that beat the default beyond the noise, per quality metric (recomputed from
    the stored paired differences, so a report's verdicts follow the current rule)."""
    from searchsmith.serving.sweep import LOWER_IS_BETTER, NEUTRAL, TIMING

    found = []
    for metric, verdict in res["verdicts"].items():
        if (metrics is not None and metric not in metrics) or metric in TIMING | NEUTRAL:
            continue
        want = -1 if metric in LOWER_IS_BETTER else 1
        for value, c in verdict.get("vs_default", {}).items():
            if _direction(c) == want:
                found.append(f"{value} on {metric} ({_diff_text(c)})")
    return found


def _loses(res: dict[str, Any], value: str, metrics: Sequence[str]) -> list[str]:
    """The focus metrics on which ``value`` is worse than the default beyond the noise."""
    from searchsmith.serving.sweep import LOWER_IS_BETTER

    out = []
    for m in metrics:
        c = res["verdicts"].get(m, {}).get("vs_default", {}).get(value)
        if c and _direction(c) == (1 if m in LOWER_IS_BETTER else -1):
            out.append(m)
    return out


def _render_sweeps(section: dict[str, Any]) -> list[str]:
    lines = ["Each setting varied alone on the same questions; a value beats the default only when the "
             "interval of its paired difference excludes zero (latency is reported, never judged). The verdict "
             "judges the metrics the setting exists for; every metric's curve is in the plot and report.json.", ""]
    for name, sweeps in _sets(section):
        for param, res in sorted(sweeps.items(), key=lambda kv: _sweep_rank(kv[0])):
            focus = sweep_focus(param)
            lines += [f"### {name}: {param} (values {', '.join(str(v) for v in res['values'])})", "",
                      "| value | " + " | ".join(focus) + " |", "|---" * (len(focus) + 1) + "|"]
            for pt in res["points"]:
                mark = " (default)" if pt["value"] == res["default"] else ""
                lines.append(f"| {pt['value']}{mark} | " + " | ".join(
                    _ci(pt["metrics"].get(m), pt["metrics"].get(f"{m}_ci95")) for m in focus) + " |")
            lines += ["", f"values that beat the default {res['default']} beyond the noise: "
                      + ("; ".join(_beats(res)) or "none"), ""]
            for w in res.get("warnings", []):
                lines += [f"note: {w}", ""]
            lines += [f"![{param}]({res['plot']})", ""]
    return lines


def _claims_sweeps(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, sweeps in _sets(section):
        for param, res in sorted(sweeps.items(), key=lambda kv: _sweep_rank(kv[0])):
            focus = sweep_focus(param)
            beats = _beats(res, focus)
            winners = {b.split(" on ")[0] for b in beats}
            trade = {v: lost for v in winners if (lost := _loses(res, v, focus))}
            if not beats:
                verdict = "holds: no value beats it beyond the noise"
            elif trade and set(trade) == winners:
                verdict = ("a trade-off: " + "; ".join(beats) + "; but worse on "
                           + "; ".join(f"{v}: {', '.join(m)}" for v, m in trade.items()))
            else:
                verdict = "refuted on our data: " + "; ".join(beats)
            first = focus[0]
            out.append(_claim(f"Xinyu: {param} = {res['default']} is as good as any value in "
                              f"{res['values'][0]}-{res['values'][-1]}", f"{name} (n={res['n']})",
                              f"{first}: " + ", ".join(f"{p['value']}: {_num(p['metrics'].get(first))}"
                                                       for p in res["points"]), verdict))
    return out


# -- 6. models against their baselines -----------------------------------------------------------
def _run_models(b: Build) -> dict[str, Any]:
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.serving.pipeline.gates import GATES, decide

    cfg = load_pipeline_config(b.config)
    bundles = {role: path for role in dict.fromkeys(r.role for r in GATES)  # every gated role, the reader too
               if (path := getattr(cfg.bundles, role, None))}
    decisions = decide(bundles, cfg.bundles)
    return {"config": b.config, "bundles": bundles, "gates": {use: d.to_dict() for use, d in decisions.items()}}


def _render_models(section: dict[str, Any]) -> list[str]:
    if not section["gates"]:
        return ["No trained model is configured (pass `--config` with a pipeline config that names bundles, such "
                "as the quickstart's `searchsmith-work/pipeline.yaml`): every figure above is the pipeline's "
                "untrained stand-ins (bi-encoder order, cosine attribution, caption-cosine placement, the "
                "question as one node, the heuristic rewrite).", ""]
    lines = ["Each model's held-out figure (recorded in its bundle) beside the untrained baseline it must beat; "
             "a model that does not beat it is gated off.", "",
             "| model | use | figure | baseline | used? |", "|---|---|---|---|---|"]
    for use, g in section["gates"].items():
        for f in g["figures"]:
            got = "-" if f["value"] is None else f"{f['value']:.3f}"
            base = "-" if f["baseline_value"] is None else f"{f['baseline_value']:.3f}"
            lines.append(f"| {g['role']} | {use} | {f['metric']} {got} | {f['baseline']} {base} | "
                         f"{'yes' if g['used'] else 'no'} |")
    return [*lines, ""]


MODEL_NAMES = {"citation": "citation scorer", "images": "image model"}


def _claims_models(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    from searchsmith.serving.pipeline.gates import USES

    for use, g in sorted(section["gates"].items(), key=lambda kv: USES.index(kv[0]) if kv[0] in USES else 99):
        figs = "; ".join(f"{f['metric']} {_num(f['value'])} vs {f['baseline']} {_num(f['baseline_value'])}"
                         + (f" ({f['paired_test']})" if f.get("paired_test") else "") for f in g["figures"])
        out.append(_claim(f"the trained {MODEL_NAMES.get(g['role'], g['role'])} ({use}) beats its untrained baseline",
                          "its held-out split (bundle manifest)", figs, model_verdict(g)))
    return out


def model_verdict(gate: dict[str, Any]) -> str:
    """A trained model's verdict from its gate decision (``GateDecision.to_dict``): it holds
    when the gate lets it in; it is refuted only when a figure is below its baseline; a lead
    the paired test leaves inside the noise is "not shown", as for every other claim."""
    figs = gate["figures"]
    off = "gate" in gate  # bundles.gate_<use>: false
    if any(f["value"] is None or f["baseline_value"] is None for f in figs):
        return f"not testable here: the bundle records no such figure ({'used: gate off' if gate['used'] else 'gated off'})"
    if gate["used"] and not off:
        return "holds: used"
    where = "used: gate off" if off else "gated off"
    if any(f["value"] < f["baseline_value"] for f in figs):  # every gated figure is higher-is-better
        return f"refuted: below its baseline ({where})"
    if any(f["value"] == f["baseline_value"] for f in figs):
        return f"not shown: it only ties with its baseline ({where})"
    # a report written before the gates recorded ``beyond_noise`` has the tests' text only: a
    # gate that read a test on every row and still left the leading model out found one inside
    if any(f.get("beyond_noise") is False for f in figs) or (not gate["used"] and all("paired_test" in f for f in figs)):
        return f"not shown: it leads inside the noise ({where})"
    if off:
        return "holds: used (gate off)"
    return "not testable here: the bundle records no paired test of its lead (gated off; re-export it)"


# -- 7. the field's own metrics -------------------------------------------------------------------
#: (claim, evaluation, model key, baseline key, baseline name, lower is better); the keys are the
#: per-item fields of eval decompose / eval rewrite / beir-full.
FIELD_ROWS = (
    ("Break: the trained decomposer's QDMR beats the question as one node (SARI, as Break's scorer computes it)",
     "decompose", "decompose_break_sari", "decompose_break_sari_one_node", "the question as one node", False),
    ("Break: ... (graph edit distance as Break's scorer computes it, lower is better)", "decompose",
     "decompose_break_ged", "decompose_break_ged_one_node", "the question as one node", True),
    ("CAsT: the trained rewrite drives better retrieval than the raw query (nDCG@10, known-item proxy)",
     "rewrite", "rewrite_retrieval_ndcg@10", "rewrite_retrieval_ndcg@10_copy_query", "the raw query", False),
    ("SciFact (BEIR-style, BM25 top-100 over the whole corpus): the trained reranker beats BM25's order "
     "(nDCG@10)", "beir", "rerank/ndcg@10", "bm25/ndcg@10", "BM25", False),
)


FIELD_DATA = {"decompose": "Break QDMR, held-out split of the open part",
              "rewrite": "TREC CAsT turns with an answer passage, held-out split of the open part",
              "beir": "SciFact open part: claims with qrels, 1,491 abstracts"}


def _run_field(b: Build) -> dict[str, Any]:
    """Break, CAsT and SciFact with the field's metrics, for the config's decomposer and reranker
    and their untrained baselines (needs --data-dir)."""
    if b.data_dir is None:
        return {}
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.training import decompose_data
    from searchsmith.training.evaluate import EVALUATORS, eval_full_corpus, write_scifact_beir

    root = Path(b.data_dir)
    bundles = load_pipeline_config(b.config).bundles
    folder = b.tmp / "data" / "field"
    b.say(f"report: field metrics: writing the Break / CAsT held-out files and the SciFact BEIR folder from {root}")
    with contextlib.redirect_stdout(sys.stderr):  # its counts line; the report's stdout is the report's path
        decompose_data.main(["--data-dir", str(root), "--out", str(folder)])
    beir = write_scifact_beir(folder / "scifact", str(root / "scifact" / "claims_dev.jsonl"),
                              str(root / "scifact" / "corpus_subset.jsonl"), None)
    b.commands["data field"] = (f"python -m searchsmith.training.decompose_data --data-dir {root} --out OUT/data/field "
                                f"&& python -m searchsmith.training.evaluate scifact-beir OUT/data/field/scifact")
    out: dict[str, Any] = {"bundles": {"decomposer": bundles.decomposer, "reranker": bundles.reranker}}
    base = {"index": None, "checkpoint": None, "device": "auto", "config": None, "k": 3, "limit": b.routing_limit,
            "json": True}
    if bundles.decomposer:
        for task, data, extra in (("decompose", folder / "decompose.jsonl", {}),
                                  ("rewrite", folder / "rewrite.jsonl", {"corpus": str(folder / "passages.jsonl")})):
            b.say(f"report: field metrics: eval {task}")
            items = b.item_file(f"field_{task}")
            out[task] = EVALUATORS[task](argparse.Namespace(**base, data=str(data), bundle=bundles.decomposer,
                                                            per_item=str(items), **extra))
            corpus = f" --corpus {b.shown(folder / 'passages.jsonl')}" if extra else ""
            b.commands[f"field {task}"] = (f"searchsmith eval {task} --data {b.shown(data)} --bundle "
                                           f"{bundles.decomposer}{corpus} --per-item {b.shown(items)}")
    b.say("report: field metrics: SciFact BEIR-style run over the whole corpus")
    items = b.item_file("field_beir")
    out["beir"] = eval_full_corpus(argparse.Namespace(
        data=str(beir), bundle=bundles.reranker, checkpoint=None, device="auto", depth=100, no_dense=False,
        limit=b.routing_limit,
        per_item=str(items)))
    rr = f" --bundle {bundles.reranker}" if bundles.reranker else ""
    b.commands["field beir"] = (f"python -m searchsmith.training.evaluate beir-full {b.shown(Path(beir))}{rr} "
                                f"--per-item {b.shown(items)}")
    out["paired"] = {}
    for _claim, task, model, baseline, _, _ in FIELD_ROWS:
        path = b.item_file(f"field_{task}")
        if task in out and path.is_file():
            pair = _paired_fields(path, baseline, model)
            if pair is not None:
                out["paired"][f"{task}:{model}"] = pair
    return out


def _paired_fields(path: Path, a: str, b_key: str) -> dict[str, Any] | None:
    """``b_key`` − ``a`` over the per-item rows that have both, or None when none has."""
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.models.stats import paired_difference

    rows = [r for r in read_jsonl(path, what="report per-item file") if r.get(a) is not None
            and r.get(b_key) is not None]
    if not rows:
        return None
    return paired_difference([float(r[a]) for r in rows], [float(r[b_key]) for r in rows], b_key).to_dict()


def _render_field(section: dict[str, Any]) -> list[str]:
    if not section:
        from searchsmith.training.data import SHARED_DATA

        return [f"Not run: the field's benchmarks need `--data-dir` (the open parts of {SHARED_DATA}).", ""]
    lines = ["The field's own metrics on the open data's held-out split (seed 0), each model beside its untrained "
             "baseline, paired item by item.", "",
             "| benchmark | model | baseline | difference (95 % interval) |", "|---|---|---|---|"]
    for _claim, task, model, _baseline, base_name, _ in FIELD_ROWS:
        c = section.get("paired", {}).get(f"{task}:{model}")
        if c:
            lines.append(f"| {task}: {model} | {c['b']:.3f} | {base_name} {c['a']:.3f} | {_diff_text(c)} |")
    beir = section.get("beir", {})
    if beir:
        lines += ["", "SciFact BEIR-style, every system: " + "; ".join(
            f"{name} nDCG@10 {_ci(beir.get(f'{name}/ndcg@10'), beir.get(f'{name}/ndcg@10_ci95'))}, recall@100 "
            f"{_num(beir.get(f'{name}/recall@100'))}" for name in beir.get("systems", {})), "",
            f"Protocol: {beir.get('protocol', '')}"]
    rewrite = section.get("rewrite", {})
    if rewrite.get("rewrite_retrieval_protocol"):
        lines += ["", f"CAsT: {rewrite['rewrite_retrieval_protocol']} The manual rewrite (upper bound) reaches "
                  f"nDCG@10 {_num(rewrite.get('rewrite_retrieval_ndcg@10_manual'))}."]
    return [*lines, ""]


def _claims_field(section: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for claim, task, model, _baseline, base_name, lower in FIELD_ROWS:
        c = section.get("paired", {}).get(f"{task}:{model}")
        if not c:
            continue
        d = _direction(c) * (-1 if lower else 1)
        verdict = "holds" if d > 0 else "refuted: the baseline is better" if d < 0 else "not shown: inside the noise"
        name = claim.replace("...", "the trained decomposer's QDMR is closer to the gold graph than one node")
        out.append(_claim(name, f"{FIELD_DATA[task]} (n={c['n']})",
                          f"{model} {c['b']:.3f} vs {base_name} {c['a']:.3f}: {_diff_text(c)}", verdict))
    return out


SECTIONS: tuple[Section, ...] = (
    Section("routing", "Routing (KIMAs): the raw query, the rewrite and their fusion", _run_routing,
            _render_routing, _claims_routing),
    Section("strategies", "Strategies (SRSA): routed vs each forced strategy", _run_strategies,
            _render_strategies, _claims_strategies),
    Section("bandit", "Protocol router (IMACS): LinUCB vs fixed presets and the oracle, real rewards", _run_bandit,
            _render_bandit, _claims_bandit),
    Section("ablation", "Stage ablations (Xinyu): each stage switched off in turn", _run_ablation,
            _render_ablation, _claims_ablation),
    Section("sweeps", "Threshold sweeps (Xinyu)", _run_sweeps, _render_sweeps, _claims_sweeps),
    Section("models", "Models against their untrained baselines", _run_models, _render_models, _claims_models,
            uses_sets=False),
    Section("field", "The field's metrics: Break, CAsT, SciFact (with --data-dir)", _run_field, _render_field,
            _claims_field, quick=False, uses_sets=False),
)


# -- command line ------------------------------------------------------------------------------
def configure_report(parser: argparse.ArgumentParser) -> None:
    from searchsmith.training.data import SHARED_DATA

    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument("--out", help="folder to write: new or empty, or a previous report (replaced whole); any "
                        "other folder is refused")
    parser.add_argument("--quick", action="store_true", help=f"CI size: demo data, {QUICK_QUESTIONS} questions, "
                        f"{QUICK_SEEDS} bandit seeds, {sum(q is not None for _, q in SWEEPS.values())} sweeps")
    parser.add_argument("--data-dir", metavar="DIR", help="also evaluate on sets built from this copy of the "
                        f"shared data ({SHARED_DATA}): CAsT routing, MuSiQue + HotpotQA answers")
    parser.add_argument("--config", metavar="YAML", help="pipeline config of every evaluation (its bundles are "
                        "the models section; default: no bundles)")
    parser.add_argument("--index", metavar="DIR", help="reuse this index of the demo corpus (default: build one "
                        "into OUT/index)")
    parser.add_argument("--limit", type=int, default=0, help="ask only the first N questions and route only the "
                        "first N routing items on every set (0 = the size's own; for tests)")
    parser.add_argument("--sections", metavar="NAME,...", help="run only these sections (default: all; "
                        f"{', '.join(s.key for s in SECTIONS)})")
    parser.add_argument("--readme", metavar="FILE", help="rewrite the quality table of this README (between "
                        f"{QUALITY_START} and {QUALITY_END}) from the report's claims")
    parser.add_argument("--from", dest="from_dir", metavar="DIR", help="with --readme: take the claims from this "
                        "existing report instead of running one (recomputed from its stored results with this "
                        "version's rules; its report.md is rewritten to match)")
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    # '' would read as "not given" (a default) or as the current folder: refused first
    for flag, value in (("--out", args.out), ("--data-dir", args.data_dir), ("--config", args.config),
                        ("--index", args.index), ("--sections", args.sections), ("--readme", args.readme),
                        ("--from", args.from_dir)):
        if value is not None and not str(value).strip():
            raise ConfigError(f"report {flag} is empty: give a value (see searchsmith report --help), or leave "
                              "the option out")
    if args.from_dir:
        if not args.readme or args.out:
            raise ConfigError("report --from DIR: give --readme FILE (the table to rewrite) and no --out; --from "
                              "reads an existing report and runs nothing")
        check_readme(Path(args.readme))  # before refresh_report rewrites the report's own files
        report = refresh_report(Path(args.from_dir))
        changed = update_readme(Path(args.readme), report)
        print(f"{args.readme}: quality table {'rewritten' if changed else 'already up to date'} from "
              f"{args.from_dir} ({len(report['claims'])} claims)")
        return 0
    if not args.out:
        raise ConfigError("report: --out DIR is required (or --from DIR --readme FILE to only rewrite a README "
                          "table)")
    sections = _pick_sections(args.sections)
    if args.limit < 0:
        raise ConfigError(f"report --limit: must be >= 0 (0: every question), got {args.limit}")
    if args.config:  # read now: a bad config fails before the report's first minutes of work
        from searchsmith.serving.pipeline.config import load_pipeline_config

        load_pipeline_config(args.config)
    if args.readme:  # likewise: it was found missing (or without its markers) only after the whole report
        check_readme(Path(args.readme))
    out = write_report(Path(args.out), quick=args.quick, index=args.index, limit=args.limit,
                       data_dir=args.data_dir, config=args.config, sections=sections,
                       command=" ".join(["searchsmith", "report", *map(shlex.quote, sys.argv[2:])]),
                       say=lambda line: print(line, file=sys.stderr, flush=True))
    if args.readme:
        update_readme(Path(args.readme), read_report(out))
    print(out / "report.md")
    return 0


def _pick_sections(text: str | None) -> list[str] | None:
    """``--sections``: the section keys named; None (the option left out) = every section."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    known = [s.key for s in SECTIONS]
    if not names:
        raise ConfigError(f"report --sections is empty ({text!r}): name some of {', '.join(known)}, or leave the "
                          "option out for every section")
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"report --sections: unknown section(s) {bad}; the sections are "
                          f"{', '.join(known)}")
    return names


# -- the output folder -------------------------------------------------------------------------
def _listed(folder: Path) -> set[str] | None:
    """The files a previous report's manifest lists (the manifest included), or None."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = read_json_object(path, "report manifest", error=BundleError)
    except BundleError:
        return None
    if manifest.get("kind") != KIND or not isinstance(manifest.get("files"), list):
        return None
    return {str(Path(f)) for f in manifest["files"]} | {MANIFEST}


def check_report_out(out: Path) -> None:
    """Refuse ``out`` unless it is absent, empty, or a previous report holding nothing else.

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """
    check_replaceable(out, label="report --out", kind=KIND, listed=_listed, replace=True,
                      replace_hint="")  # replace=True: a previous report is always replaced


def read_report(folder: Path) -> dict[str, Any]:
    """A report folder's report.json.

    Raises:
        ValidationError: the folder holds no report.
    """
    path = Path(folder) / "report.json"
    if _listed(Path(folder)) is None or not path.is_file():
        raise ValidationError(f"report --from {folder}: not a searchsmith report (no manifest.json of kind "
                              f"'report' and report.json); write one with searchsmith report --out {folder}")
    return read_json_object(path, "report.json", error=ValidationError)


def refresh_report(folder: Path) -> dict[str, Any]:
    """Recompute a report's claims (and report.md) from its stored results and per-item files
    with this version's rules; nothing is measured again. Only report.json and report.md,
    files the report lists, are rewritten.

    Raises:
        ValidationError: the folder holds no report.
    """
    folder = Path(folder)
    report = read_report(folder)
    path = folder / "report.json"
    _check_report_json(report, path)
    try:
        for name, pipe in report.get("strategies", {}).items():
            items = folder / "items" / f"pipeline_{name}.jsonl"
            if "routed_strategies" not in pipe and items.is_file():
                pipe["routed_strategies"] = routed_strategies(items)
        by_key = {s.key: s for s in SECTIONS}
        report["claims"] = [c for key in report["sections"] for c in by_key[key].claims(report[key])]
        markdown = render_markdown(report)
    except (ConfigError, ValidationError, BundleError):
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        # a field inside a section: what _check_report_json does not look into
        what = f"no key {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else f"{type(exc).__name__}: {exc}"
        raise ValidationError(f"report --from {folder}: {path} does not hold what this version wrote ({what}); "
                              f"{_rerun_hint(report, folder)}") from None
    write_json_atomic(path, report)  # both computed first: a bad field leaves both files as they were
    write_text_atomic(folder / "report.md", markdown)
    return report


#: report.json's top-level keys besides the sections' results: key -> (type, what it holds)
REPORT_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "size": (str, "'quick' or 'full'"), "command": (str, "the command line"), "date": (str, "an ISO date"),
    "seconds": ((int, float), "a number"), "git_commit": (str, "a commit hash"),
    "machine": (dict, "an object (cpu, cores, gpu, ...)"), "bootstrap": (dict, "an object (resamples, seed)"),
    "data": (dict, "an object per data set"), "commands": (dict, "an object of commands"),
    "sections": (list, "a list of section keys"), "titles": (dict, "an object: section key -> title"),
}


def _rerun_hint(report: dict[str, Any], folder: Path) -> str:
    command = report.get("command")
    again = command if isinstance(command, str) and "--out" in command else f"searchsmith report --out {folder}"
    return (f"it was edited or written by another version of searchsmith. Re-run the report ({again}) rather "
            "than edit report.json")


def _check_report_json(report: dict[str, Any], path: Path) -> None:
    """The top-level keys :func:`render_markdown` and the claims read, every problem at once.

    Raises:
        ValidationError: naming ``path``, each missing or wrong key, and the fix (re-run the report).
    """
    problems = [f"no {key!r} key ({want})" if key not in report else f"{key!r} must be {want}, got "
                f"{type(report[key]).__name__}" for key, (kind, want) in REPORT_KEYS.items()
                if not isinstance(report.get(key), kind) or isinstance(report.get(key), bool)]
    known = [s.key for s in SECTIONS]
    sections = report.get("sections")
    for key in sections if isinstance(sections, list) else []:
        if key not in known:
            problems.append(f"'sections' names {key!r}, not a section (the sections are {', '.join(known)})")
        elif not isinstance(report.get(key), dict):
            problems.append(f"'sections' names {key!r} but there is no {key!r} object holding its results")
        elif isinstance(report.get("titles"), dict) and key not in report["titles"]:
            problems.append(f"'titles' has no {key!r}")
    boot = report.get("bootstrap")
    if isinstance(boot, dict):
        problems += [f"'bootstrap' has no {k!r}" for k in ("resamples", "seed") if k not in boot]
    if problems:
        raise ValidationError(f"report --from {path.parent}: {path} cannot be read back: {'; '.join(problems)}; "
                              f"{_rerun_hint(report, path.parent)}")


# -- the report --------------------------------------------------------------------------------
def _git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def _datasets(b: Build, *, index: str | Path | None, data_dir: str | None, limit: int) -> dict[str, Dataset]:
    """The demo set (always) and, with ``data_dir``, the CAsT routing and multi-hop sets, indexed."""
    from searchsmith.models.demo import corpus_path, qa_path, routing_path, stages_path
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import IndexConfig, build_index

    questions = limit or (QUICK_QUESTIONS if b.quick else 0)
    if index is None:
        b.say(f"report: indexing the demo corpus {corpus_path()}")
        build_index(read_corpus(corpus_path()), b.tmp / "index", IndexConfig())
        demo_index, shown = b.tmp / "index", "OUT/index"
    else:
        demo_index, shown = Path(index), str(index)
    sets = {"demo": Dataset("demo", "the demo knowledge base (models/demo, generated by searchsmith, Apache-2.0)",
                            corpus_path(), demo_index, shown, qa=qa_path(), routing=routing_path(),
                            stages=stages_path(), questions=questions)}
    if data_dir is None:
        return sets
    from searchsmith.serving.routing_sets import BUILDERS, PIPELINE_BUILDERS, write_set

    root = Path(data_dir)
    built = (("cast", BUILDERS["cast"], "routing.jsonl",
              "TREC CAsT 2021/2022 conversations (daltonj/treccastweb, MIT; passages: CAsT research-use terms)"),
             ("multihop", PIPELINE_BUILDERS["multihop"], "qa.jsonl",
              "MuSiQue-Ans (CC BY 4.0) + HotpotQA distractor (CC BY-SA 4.0), open parts"))
    for name, builder, items_file, about in built:
        b.say(f"report: building the {name} set from {root}")
        folder = b.tmp / "data" / name
        # the multi-hop set: the questions asked and only their candidates (a pool they share)
        corpus, items = builder(root, limit or MULTIHOP_QUESTIONS) if items_file == "qa.jsonl" else builder(root)
        write_set(folder, corpus, items, items_file)
        b.say(f"report: indexing the {name} corpus ({len(corpus)} documents)")
        build_index(read_corpus(folder / "corpus.jsonl"), folder / "index", IndexConfig())
        qs = f" --questions {limit or MULTIHOP_QUESTIONS}" if items_file == "qa.jsonl" else ""
        b.commands[f"data {name}"] = (f"searchsmith make-{'routing' if items_file == 'routing.jsonl' else 'pipeline'}"
                                      f"-set {name} --data-dir {data_dir}{qs} --out OUT/data/{name} && searchsmith "
                                      f"index OUT/data/{name}/corpus.jsonl --out OUT/data/{name}/index")
        qa = folder / items_file if items_file == "qa.jsonl" else None
        routing = folder / items_file if items_file == "routing.jsonl" else None
        sets[name] = Dataset(name, about, folder / "corpus.jsonl", folder / "index", f"OUT/data/{name}/index",
                             qa=qa, routing=routing, questions=limit or MULTIHOP_QUESTIONS)
    return sets


def write_report(out: Path, *, quick: bool = False, index: str | Path | None = None, limit: int = 0,
                 data_dir: str | None = None, config: str | None = None, sections: Sequence[str] | None = None,
                 command: str = "", say: Callable[[str], None] = print) -> Path:
    """Run the evaluations and write the report folder ``out`` (module docstring).

    Args:
        out: the report folder; built beside it and swapped in when complete.
        quick: the CI size (see :data:`SWEEPS`, :data:`QUICK_QUESTIONS`; demo data only).
        index: an index of the demo corpus to reuse; None builds one into ``out/index``.
        limit: questions and routing items per set (0: the size's own).
        data_dir: the shared data folder; None evaluates on the demo data only.
        config: the pipeline config of every evaluation (None: defaults, no bundles).
        sections: the :data:`SECTIONS` keys to run (None: all the size runs).
        command: the command line, for the header.
        say: where the step lines go.

    Returns:
        ``out``.

    Raises:
        ValidationError: ``out`` is a folder that is not a previous report, ``index`` or
            ``data_dir`` is missing.
    """
    from searchsmith.models.intervals import bootstrap_info
    from searchsmith.serving.profiling.common import machine_info

    out = Path(out)
    check_report_out(out)
    if index is not None and not (Path(index) / "manifest.json").is_file():
        raise ValidationError(f"report --index {index}: not an index folder (no manifest.json); build one with "
                              "searchsmith index models/demo/corpus.jsonl --out DIR, or drop --index")
    if config is not None and not Path(config).is_file():
        raise ValidationError(f"report --config {config}: no such file; give a pipeline config YAML "
                              "(searchsmith config pipeline prints every key) or drop --config")
    if data_dir is not None and not Path(data_dir).is_dir():
        from searchsmith.training.data import SHARED_DATA

        raise ValidationError(f"report --data-dir {data_dir}: not a folder; give the shared data folder "
                              f"({SHARED_DATA}) or drop --data-dir")
    if quick and data_dir:
        raise ConfigError("report --quick --data-dir: the quick size runs on the demo data only; drop one")
    chosen = [s for s in SECTIONS if (sections is None and (s.quick or not quick)) or (sections and s.key in sections)]
    started = time.perf_counter()
    tmp = temp_dir_beside(out)
    try:
        b = Build(tmp=tmp, quick=quick, config=config, routing_limit=limit, datasets={}, say=say, data_dir=data_dir)
        if any(sec.uses_sets for sec in chosen):
            b.datasets = _datasets(b, index=index, data_dir=data_dir, limit=limit)
        results: dict[str, Any] = {}
        for s in chosen:
            results[s.key] = s.run(b)
        claims = [c for s in chosen for c in s.claims(results[s.key])]
        report = {
            "kind": KIND, "size": "quick" if quick else "full", "command": command or "searchsmith report",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - started, 1), "git_commit": _git_commit(),
            "machine": machine_info(), "bootstrap": bootstrap_info(), "config": config,
            "data": {d.name: {"about": d.about, "corpus": str(d.corpus), "index": d.shown,
                              "qa": str(d.qa) if d.qa else None, "routing": str(d.routing) if d.routing else None,
                              "questions": d.questions or "all"} for d in b.datasets.values()},
            "sections": [s.key for s in chosen], "titles": {s.key: s.title for s in chosen},
            "commands": b.commands, "claims": claims, **results,
        }
        write_json_atomic(tmp / "report.json", report)
        write_text_atomic(tmp / "report.md", render_markdown(report))
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        write_json_atomic(tmp / MANIFEST, {"kind": KIND, "files": files})
        replace_dir(tmp, out)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # our own temporary folder, never the user's
        raise
    say(f"report: wrote {out} in {time.perf_counter() - started:.0f} s")
    return out


# -- plots -------------------------------------------------------------------------------------
def _bars(path: Path, groups: list[str], series: dict[str, list[tuple[float, list[float]]]], ylabel: str,
          title: str) -> Path:
    """Grouped bars with their 95 % intervals: ``series[name][i] = (value, [low, high])`` of group i."""
    from searchsmith.serving.profiling.common import save_plot

    def draw(fig: Any, ax: Any) -> None:
        width = 0.8 / max(1, len(series))
        for j, (name, points) in enumerate(series.items()):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
            ys = [v for v, _ in points]
            err = [[v - ci[0] for v, ci in points], [ci[1] - v for v, ci in points]]
            ax.bar(xs, ys, width, yerr=err, capsize=3, label=name)
        ax.set_xticks(range(len(groups)), groups, fontsize=7)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)

    return save_plot(path, draw, title)


# -- report.md and the README table ---------------------------------------------------------------
def render_markdown(report: dict[str, Any]) -> str:
    """The report's Markdown from its JSON (``report.json`` holds everything shown here)."""
    m, boot = report["machine"], report["bootstrap"]
    gpu = m.get("gpu") or "none"
    lines = [
        f"# searchsmith evaluation report ({report['size']})", "",
        f"- command: `{report['command']}`",
        f"- date: {report['date']} (took {report['seconds']:.0f} s)",
        f"- git commit: {report['git_commit']}",
        f"- machine: {m.get('cpu')}, {m.get('cores')} cores, GPU {gpu}; Python {m.get('python')}, torch "
        f"{m.get('torch')}, onnxruntime {m.get('onnxruntime')}, faiss {m.get('faiss')}",
        f"- pipeline config: {report.get('config') or 'the defaults, no trained models'}",
        "- data (read in place; the held-out parts of the public sets are not used):",
        *(f"  - {name}: {d['about']}; corpus {d['corpus']}, index {d['index']}, questions asked: {d['questions']}"
          for name, d in report["data"].items()),
        f"- intervals: bootstrap 95 %, {boot['resamples']} resamples, seed {boot['seed']}; verdicts are paired "
        "differences on the same items with a permutation p-value",
        "- commands (OUT is this folder; each evaluation can be rerun alone):", "",
        *(f"      {c}" for c in report["commands"].values()), "",
        "## Claims and verdicts", "", *quality_table(report).splitlines(), "",
    ]
    by_key = {s.key: s for s in SECTIONS}
    for n, key in enumerate(report["sections"], 1):
        lines += [f"## {n}. {report['titles'][key]}", "", *by_key[key].render(report[key])]
    return "\n".join(lines)


def quality_table(report: dict[str, Any]) -> str:
    """The claims as a Markdown table (report.md's summary and the README's quality table)."""
    rows = ["| claim | data | measured (95 % interval) | verdict |", "|---|---|---|---|"]
    rows += [f"| {c['claim']} | {c['data']} | {c['measured']} | {c['verdict']} |" for c in report["claims"]]
    m = report["machine"]
    rows += ["", f"From `{report['command']}` ({report['size']} size, {report['date'][:10]}, {m.get('cpu')}, "
             f"{m.get('cores')} cores, commit {report['git_commit'][:10]}); the report's `report.md` has every table "
             "and plot behind these lines."]
    return "\n".join(rows)


def update_readme(readme: Path, report: dict[str, Any]) -> bool:
    """Rewrite ``readme``'s quality table from ``report``; True when it changed.

    Raises:
        ConfigError: the file lacks the markers (nothing is written).
    """
    from searchsmith.serving.profiling.readme import update_markers

    check_readme(readme)
    return update_markers(readme, QUALITY_START, QUALITY_END, quality_table(report))


def check_readme(readme: Path) -> None:
    """Whether ``--readme`` can take the quality table: a file, UTF-8, holding
    :data:`QUALITY_START` and then :data:`QUALITY_END`, once each, and writable (the file and
    its folder: the table may be written through a temporary file beside it). ``report`` checks
    this before any evaluation runs, so that a wrong ``--readme`` does not cost the report.

    Raises:
        ConfigError: naming what is wrong and the fix; nothing is written.
    """
    import os

    where = f"report --readme {readme}"
    markers = f"{QUALITY_START} and {QUALITY_END}"
    if not readme.exists():
        raise ConfigError(f"{where}: no such file; give the README whose quality table to rewrite (it holds "
                          f"{markers} where the table goes), or drop --readme")
    if not readme.is_file():
        raise ConfigError(f"{where}: not a file; give the README file whose quality table to rewrite, or drop "
                          "--readme")
    try:
        text = readme.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text; give the project's README (Markdown), or drop --readme") from None
    starts, ends = text.count(QUALITY_START), text.count(QUALITY_END)
    if starts != 1 or ends != 1 or text.index(QUALITY_START) > text.index(QUALITY_END):
        found = (f"{starts} {QUALITY_START} and {ends} {QUALITY_END}" if starts != 1 or ends != 1
                 else f"{QUALITY_END} before {QUALITY_START}")
        raise ConfigError(f"{where}: it holds {found}; the table is written between {QUALITY_START} and then "
                          f"{QUALITY_END}, each once. Put the two markers where the table belongs (nothing was "
                          "written)")
    folder = readme.parent
    if not os.access(readme, os.W_OK) or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: cannot write it (the file or its folder {folder} is read-only); make both "
                          "writable, or drop --readme")
