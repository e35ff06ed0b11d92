"""``searchsmith eval ablate``: each stage switched off in turn, the metric it exists for.

The papers' stages (Xinyu et al.; Liu et al. for the context order) each claim something:
dedup removes redundant context, the keep ratio trims it at no loss of support, reranking
and the edge order improve the answer, the cosine fallback cites without a model, the
timeline merge joins one event reported twice, the image threshold keeps wrong images out.
Here the same questions are answered once with the full config and once per stage with that
stage off (:data:`STAGES`: how it is switched off, its metrics, the claim), and each metric
is compared question by question: the paired difference full - off (what the stage adds),
its bootstrap 95 % interval and a permutation p-value. A stage "helps" on a metric when the
interval excludes zero on the metric's better side, "hurts" when on the worse side, else
has "no measurable effect". Median latency with and without is reported, never judged (a
shared machine's load moves it); to keep it comparable, every variant answers once untimed
first, then each question is asked with the full config and with each stage off in turn, in
a rotating order. A stage the full config does not run (rerank without a reranker bundle,
the cosine fallback when a citation model cites) is reported as inactive, not run twice.

Timeline and image metrics need gold that ``models/demo/qa.jsonl`` lacks; ``models/demo/
stages.jsonl`` has both (a metric is paired over the questions that have its gold)::

    searchsmith eval ablate --data models/demo/stages.jsonl --index indexes/demo --plot ablate.png
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.metrics import percentiles
from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, direction, paired_difference
from searchsmith.serving.pipeline.config import PipelineConfig
from searchsmith.serving.sweep import LOWER_IS_BETTER, paired, sharing_pipeline

__all__ = ["STAGES", "StageSwitch", "eval_ablate", "parse_stages", "plot_ablation", "render_markdown"]


def _set(cfg: PipelineConfig, section: str, **values: Any) -> PipelineConfig:
    """``cfg`` with ``section.key = value`` (the dataclasses validate the new values)."""
    return replace(cfg, **{section: replace(getattr(cfg, section), **values)})


def _no_rerank(cfg: PipelineConfig) -> PipelineConfig:
    return replace(cfg, presets={name: replace(p, rerank=False) for name, p in cfg.presets.items()})


RERANK_INACTIVE = ("the full config never reranks (no reranker bundle, its gate leaves it out, or the preset "
                   "skips it): nothing to switch off")


def _rerank_inactive(pipe: Any, answers: list[dict[str, Any]] | None) -> str | None:
    if answers is None:  # before any question: a pipeline with no reranker in use never reranks
        gate = getattr(pipe, "gates", {}).get("rerank")
        return RERANK_INACTIVE if pipe is not None and (gate is None or not gate.used) else None
    if all(a["trace"]["stages"].get("rerank", {}).get("skipped") for a in answers):
        return RERANK_INACTIVE
    return None


def _fallback_inactive(pipe: Any, answers: list[dict[str, Any]] | None) -> str | None:
    cite = getattr(pipe, "gates", {}).get("cite")
    if cite is not None and cite.used:
        return "a citation model cites in the full config: the cosine fallback is not used"
    return None


@dataclass(frozen=True)
class StageSwitch:
    """How one stage is switched off and what it is judged on.

    Attributes:
        name: the ``--stages`` name.
        switch: the off setting as the report shows it (config keys = value).
        off: full config -> the config with the stage off.
        metrics: the metric the stage exists for first, then the ones it must not cost.
        claim: what the paper claims for it.
        inactive: (full pipeline, its answers) -> why switching it off changes nothing, or None;
            called first with ``None`` for the answers (before any question: a stage the
            pipeline cannot run is not run twice), then with the full config's answers.
        design: whose design the stage comes from, named before the claim in the report
            (Xinyu's pipeline for most; hybrid search is searchsmith's own).
    """

    name: str
    switch: str
    off: Callable[[PipelineConfig], PipelineConfig]
    metrics: tuple[str, ...]
    claim: str
    inactive: Callable[[Any, list[dict[str, Any]] | None], str | None] | None = None
    design: str = "Xinyu"


STAGES: dict[str, StageSwitch] = {s.name: s for s in (
    # dedup_threshold is capped at 1 (the dedup kernel's domain): at 1 only identical passages
    # (cosine 1) are still dropped, every near-duplicate survives.
    StageSwitch("dedup", "retrieval.dedup_threshold=1.0", lambda c: _set(c, "retrieval", dedup_threshold=1.0),
                ("redundancy", "support_recall"),
                "dropping passages at cosine >= 0.8 to a better one removes redundant context"),
    StageSwitch("keep_ratio", "retrieval.keep_ratio=1.0", lambda c: _set(c, "retrieval", keep_ratio=1.0),
                ("context_tokens", "support_recall"),
                "keeping the best 70 % of the passages cuts the context without losing support"),
    StageSwitch("lexical", "retrieval.lexical_weight=0", lambda c: _set(c, "retrieval", lexical_weight=0.0),
                ("support_recall", "f1"),
                "hybrid search: adding the BM25 share to the cosine finds more of the supporting passages",
                design="searchsmith"),
    StageSwitch("rerank", "presets.*.rerank=false", _no_rerank, ("f1", "support_recall"),
                "reranking puts the supporting passages first: better answers", _rerank_inactive),
    StageSwitch("edge_order", "retrieval.edge_order=false", lambda c: _set(c, "retrieval", edge_order=False),
                ("f1", "contains"),
                "lost in the middle: the strongest passages at both ends of the context answer better"),
    # No cosine reaches 1.01: nothing is cited.
    StageSwitch("citation_fallback", "citation.cosine_threshold=1.01",
                lambda c: _set(c, "citation", cosine_threshold=1.01), ("citation_recall", "citation_precision"),
                "without a citation model, cosine >= 0.6 attributes sentences to supporting documents",
                _fallback_inactive),
    StageSwitch("timeline_merge", "timeline.merge_threshold=1.01",
                lambda c: _set(c, "timeline", merge_threshold=1.01), ("timeline_duplicates", "timeline_recall"),
                "events at compatible dates and cosine >= 0.9 are one event: no duplicates"),
    # Cosines are >= -1 (an image without a caption scores -1): every assignment is kept.
    StageSwitch("image_threshold", "images.threshold=-1.0", lambda c: _set(c, "images", threshold=-1.0),
                ("image_wrong", "image_recall"),
                "an image is placed only at relevance >= 0.3: wrong images stay out"),
)}


def parse_stages(text: str | None) -> list[str]:
    """``"dedup,rerank"`` -> ``["dedup", "rerank"]``; None (the option left out) = every stage.

    Raises:
        ConfigError: no name (``''``: it would silently mean every stage), an unknown or
            repeated name (the known ones are listed).
    """
    if text is None:
        return list(STAGES)
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise ConfigError(f"eval ablate --stages is empty ({text!r}): name the stages to switch off, some of "
                          f"{', '.join(STAGES)}, or leave the option out for every stage")
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise ConfigError(f"eval ablate --stages: unknown stage(s) {unknown}; the stages are {', '.join(STAGES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"eval ablate --stages: a stage is listed twice in {text!r}")
    return names


def verdict(metric: str, ci95: list[float], p_value: float = 0.0) -> str:
    """``helps`` / ``hurts`` / ``no measurable effect`` of a with - without difference: beyond
    the noise when its interval excludes 0 and its permutation p-value is below 0.05."""
    d = direction(ci95, p_value)
    if d:
        better = (d < 0) if metric in LOWER_IS_BETTER else (d > 0)
        return "helps" if better else "hurts"
    return "no measurable effect"


def _p50_ms(rows: list[dict[str, float]]) -> float:
    return round(percentiles([r["latency_ms"] / 1e3 for r in rows])["p50_ms"], 1)


def compare_stage(stage: StageSwitch, full: list[dict[str, float]], off: list[dict[str, float]],
                  resamples: int, seed: int) -> dict[str, Any]:
    """Each of the stage's metrics with and without it, paired over the items that have it."""
    out: dict[str, Any] = {}
    for m in stage.metrics:
        without, with_ = paired(off, full, m)
        if not without:
            out[m] = {"n": 0, "verdict": "not measured", "note": f"no question has the gold {m} needs"}
            continue
        c = paired_difference(without, with_, m, resamples=resamples, seed=seed).to_dict()
        out[m] = {"n": c["n"], "with": c["b"], "without": c["a"], "diff": c["diff"], "diff_ci95": c["diff_ci95"],
                  "p_value": c["p_value"], "lower_is_better": m in LOWER_IS_BETTER,
                  "verdict": verdict(m, c["diff_ci95"], c["p_value"])}
    return out


def eval_ablate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the ablation (module docstring) and return its JSON.

    Raises:
        ConfigError: an unknown --stages name, no index.
    """
    from searchsmith.serving.evaluate import (
        PassageLookup,
        checked_pipeline,
        pipeline_items,
        with_eval_bundles,
        write_outputs,
    )
    from searchsmith.serving.pipeline.config import load_pipeline_config

    # 1. Configs: every switch applied before any question is asked
    names = parse_stages(getattr(args, "stages", None))
    base = with_eval_bundles(load_pipeline_config(args.config), args)
    if not (args.index or base.index):
        raise ValidationError("eval ablate needs --index DIR (built with 'searchsmith index') or 'index:' in the "
                              "--config file")
    offs = {n: STAGES[n].off(base) for n in names}
    items = pipeline_items(args)
    resamples = int(getattr(args, "resamples", DEFAULT_RESAMPLES))
    seed = int(getattr(args, "seed", DEFAULT_SEED))

    # 2. The full config and each stage off, all open at once: after an untimed warm-up, each
    #    question is asked under every variant in turn (rotating order), so that neither cold
    #    start nor the machine's drift lands on one variant (the full config ran first, alone:
    #    1519 ms against dedup off's 514 ms for the same work). Every variant shares the full
    #    pipeline's index, embedder, bundles and LLM (eval sweep's sharing_pipeline; no switch changes
    #    bundles or the model: with generation.backend hf each variant used to load the model
    #    again, all open at once)
    rows: dict[str, list[dict[str, float]]] = {}
    inactive: dict[str, str] = {}
    pipe, warnings = checked_pipeline(base, args, items)  # refuses an index without the gold documents
    pipes: dict[str, Any] = {"full": pipe}
    try:
        for n in names:  # a stage the full pipeline cannot run (e.g. no reranker) is not run twice
            check = STAGES[n].inactive
            why = check(pipe, None) if check is not None else None
            if why:
                inactive[n] = why
            else:
                pipes[n] = sharing_pipeline(offs[n], pipe, args.index)
        answers, per_item = _answer_interleaved(pipes, items, PassageLookup(pipe), rows)
        for n in names:  # the answer-level checks (the preset never reranks): measured, then set aside
            check = STAGES[n].inactive
            why = check(pipe, answers) if check is not None and n not in inactive else None
            if why:
                inactive[n] = why
                del rows[n]
    finally:
        for p in reversed(pipes.values()):  # the full pipeline last: it owns the shared index
            p.close()
    per_item = [line for line in per_item if line["variant"].removesuffix("_off") not in inactive]

    # 3. With vs without, per stage and metric
    stages: dict[str, Any] = {}
    for n in names:
        st = STAGES[n]
        entry: dict[str, Any] = {"switch": st.switch, "claim": st.claim, "design": st.design, "metrics": {}}
        if n in inactive:
            entry.update({"inactive": inactive[n], "verdict": "inactive"})
        else:
            entry["metrics"] = compare_stage(st, rows["full"], rows[n], resamples, seed)
            entry["verdict"] = entry["metrics"][st.metrics[0]]["verdict"]
            entry["latency_ms_p50"] = {"with": _p50_ms(rows["full"]), "without": _p50_ms(rows[n])}
        stages[n] = entry
    out: dict[str, Any] = {
        "task": "ablate", "data": str(args.data), "index": str(args.index or base.index), "n": len(items),
        "generation": base.generation.backend,
        "full": {"latency_ms_p50": _p50_ms(rows["full"])},
        "stages": stages,
        "bootstrap": {"resamples": resamples, "seed": seed},
        **({"warnings": warnings} if warnings else {}),
    }
    return write_outputs(args, out, per_item, plot_ablation)


def _answer_interleaved(pipes: dict[str, Any], items: list[dict[str, Any]], lookup: Any,
                        rows: dict[str, list[dict[str, float]]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every item under every pipeline (``"full"`` and each stage off), item by item in a rotating
    order after one untimed answer each; the full pipeline's answers and the per-item lines
    (grouped by variant, items in order). ``rows[name]`` gets each pipeline's metric rows."""
    from searchsmith.serving.evaluate import pipeline_item_metrics, rotation
    from searchsmith.training.evaluate import progress_bar

    names = list(pipes)
    if items:
        for p in pipes.values():
            p.ask(items[0]["query"], items[0].get("history"))
    answers: list[dict[str, Any]] = []
    lines: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with progress_bar("eval ablate", len(names) * len(items), "question") as bar:
        for i, it in enumerate(items):
            for n in rotation(i, names):
                ans = pipes[n].ask(it["query"], it.get("history"))
                m = pipeline_item_metrics(ans, it, lookup)
                if n == "full":
                    answers.append(ans)
                rows.setdefault(n, []).append(m)
                lines[n].append({"id": it.get("id", i), "variant": "full" if n == "full" else f"{n}_off", **m})
                bar.update(1)
    return answers, [line for n in names for line in lines[n]]


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def render_markdown(result: dict[str, Any]) -> list[str]:
    """The ablation as Markdown lines: one row per (stage, metric), then the inactive stages."""
    lines = ["| stage (switched off by) | metric | with | without | with - without [95 % CI] | p | verdict |",
             "|---|---|---|---|---|---|---|"]
    for name, st in result["stages"].items():
        if "inactive" in st:
            lines.append(f"| {name} (`{st['switch']}`) | - | - | - | - | - | inactive: {st['inactive']} |")
            continue
        for m, c in st["metrics"].items():
            if not c["n"]:
                lines.append(f"| {name} (`{st['switch']}`) | {m} | - | - | - | - | {c['note']} |")
                continue
            arrow = " (lower is better)" if c["lower_is_better"] else ""
            lo, hi = c["diff_ci95"]
            lines.append(f"| {name} (`{st['switch']}`) | {m}{arrow} | {_fmt(c['with'])} | {_fmt(c['without'])} | "
                         f"{c['diff']:+.3g} [{lo:+.3g}, {hi:+.3g}] | {c['p_value']:.3g} | {c['verdict']} (n={c['n']}) |")
    lat = [f"{n} {st['latency_ms_p50']['with']:g} / {st['latency_ms_p50']['without']:g} ms"
           for n, st in result["stages"].items() if "latency_ms_p50" in st]
    if lat:
        lines += ["", "Median latency with / without (reported, not judged): " + "; ".join(lat) + "."]
    return lines


def plot_ablation(path: Path, result: dict[str, Any], replace: bool = False) -> Path:
    """One panel per stage's first metric: bars with and without the stage; the with - without
    interval is drawn on the "with" bar."""
    from searchsmith.serving.profiling.common import save_plot

    shown = [(n, st, m) for n, st in result["stages"].items()
             for m in list(st["metrics"])[:1] if st["metrics"][m]["n"]]

    def draw(fig: Any, ax: Any) -> None:
        import numpy as np

        if not shown:
            ax.text(0.5, 0.5, "no stage measured", ha="center", va="center")
            return
        x = np.arange(len(shown))
        with_ = [st["metrics"][m]["with"] for _, st, m in shown]
        without = [st["metrics"][m]["without"] for _, st, m in shown]
        scale = [max(abs(a), abs(b), 1e-9) for a, b in zip(with_, without, strict=True)]  # each metric on [0, 1]
        err = [[(st["metrics"][m]["diff"] - st["metrics"][m]["diff_ci95"][0]) / s for (_, st, m), s in
                zip(shown, scale, strict=True)],
               [(st["metrics"][m]["diff_ci95"][1] - st["metrics"][m]["diff"]) / s for (_, st, m), s in
                zip(shown, scale, strict=True)]]
        ax.bar(x - 0.2, [w / s for w, s in zip(with_, scale, strict=True)], 0.4, yerr=err, capsize=3,
               label="with the stage (bar: with - without 95 % CI)")
        ax.bar(x + 0.2, [w / s for w, s in zip(without, scale, strict=True)], 0.4, label="without")
        ax.set_xticks(x, [f"{n}\n{m}\n{_fmt(st['metrics'][m]['with'])} vs {_fmt(st['metrics'][m]['without'])}\n"
                          f"{st['metrics'][m]['verdict']}" for n, st, m in shown], fontsize=6)
        ax.set_ylabel("metric / max(with, without)")
        ax.legend(fontsize=7)

    return save_plot(path, draw, f"ablation: each stage off ({result['n']} questions)", replace=replace)
