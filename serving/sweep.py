"""``searchsmith eval sweep``: one pipeline setting varied, every answer metric with its interval.

The papers' thresholds (dedup 0.8, keep 70 %, citation 0.6, timeline merge 0.9, images 0.3)
are config defaults that were never varied. A sweep answers the same questions once per
value of one pipeline config key (any dotted key, ``citation.cosine_threshold``), with the
rest of the config as given, and reports each metric's mean with its seeded bootstrap 95 %
interval, the value that scored best on each metric and, question by question, each value
against the default (paired difference, its interval and a permutation p-value): a value
"beats the default" only when that interval excludes zero in its favour. ``--plot FILE`` draws metric vs value with the intervals and the
default marked; ``--per-item FILE`` writes one line per (question, value) for
``searchsmith eval compare`` (filter two values into two files).

Besides the answer metrics, each answer's passages (how many, their tokens, their
redundancy), timeline (duplicate events, precision and recall against gold dated events) and
placed images (wrong placements, precision, recall against gold image ids) are measured
(``serving.evaluate.pipeline_item_metrics``); the last two need gold that
``models/demo/stages.jsonl`` has and ``qa.jsonl`` lacks, and are averaged over the questions
that have it::

    searchsmith eval sweep --data models/demo/stages.jsonl --index indexes/demo \\
        --param timeline.merge_threshold --values 0.8,0.9,0.97

::

    searchsmith eval sweep --data models/demo/qa.jsonl --index indexes/demo \\
        --param citation.cosine_threshold --values 0.4,0.5,0.6,0.7,0.8 --plot sweep.png
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchsmith.models.errors import ConfigError
from searchsmith.models.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_ci,
    direction,
    paired_difference,
)

if TYPE_CHECKING:
    from searchsmith.serving.pipeline.config import GenerationConfig, PipelineConfig
    from searchsmith.serving.pipeline.generation import Generator
    from searchsmith.serving.pipeline.pipeline import Pipeline

__all__ = ["SWEEP_METRICS", "eval_sweep", "parse_values", "sharing_pipeline"]

# The answer metrics a sweep reports (serving.evaluate.pipeline_item_metrics), best = highest
# except the costs and errors below. The passage, timeline and image metrics are what the
# dedup / keep-ratio, timeline.merge_threshold and images.threshold sweeps move; a metric whose
# gold no item has (events, images: models/demo/stages.jsonl has both) is left out of the output.
SWEEP_METRICS = ("support_recall", "retrieval_recall", "citation_precision", "citation_recall", "f1", "contains",
                 "passages", "context_tokens", "redundancy",
                 "timeline_events", "timeline_duplicates", "timeline_precision", "timeline_recall",
                 "images_placed", "image_wrong", "image_precision", "image_recall", "image_f1",
                 "latency_ms")
LOWER_IS_BETTER = frozenset({"latency_ms", "passages", "context_tokens", "redundancy", "timeline_duplicates",
                             "image_wrong"})
# Counts, neither better high nor low: reported, never judged.
NEUTRAL = frozenset({"timeline_events", "images_placed"})
# Plotted against the value (the rates in [0, 1]; counts and latency are in the JSON).
PLOTTED = ("support_recall", "retrieval_recall", "citation_precision", "citation_recall", "f1", "contains",
           "redundancy", "timeline_precision", "timeline_recall", "image_precision", "image_recall", "image_f1")
# Reported, never judged: the values are interleaved question by question after a warm-up, but a
# shared machine's load still moves them.
TIMING = frozenset({"latency_ms"})


def parse_values(text: str, param: str) -> list[object]:
    """``"0.4,0.5,0.6"`` -> ``[0.4, 0.5, 0.6]`` (each value parsed as YAML, as overrides are).

    Raises:
        ConfigError: no value, or the same value twice.
    """
    import yaml
    from searchsmith.models.config import load_yaml

    raw = [v.strip() for v in str(text).split(",") if v.strip()]
    if len(raw) < 2:
        raise ConfigError(f"eval sweep --values: give at least two comma-separated values of {param} "
                          f"(got {text!r}), e.g. --values 0.4,0.6,0.8")
    values = []
    for v in raw:
        try:
            values.append(load_yaml(v))
        except yaml.YAMLError as exc:
            raise ConfigError(f"eval sweep --values: {v!r} is not a YAML value ({exc}); give plain values such "
                              "as 0.4,0.6 (a list or mapping cannot hold the comma that separates values)") from None
    if len({repr(v) for v in values}) != len(values):
        raise ConfigError(f"eval sweep --values: a value of {param} is listed twice in {text!r}")
    return values


def _setting(cfg: object, dotted: str) -> object:
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _summary(rows: list[dict[str, float]], resamples: int, seed: int) -> dict[str, object]:
    """Each metric's mean over the items that have it (``<metric>_n`` when not all do)."""
    out: dict[str, object] = {}
    for m in SWEEP_METRICS:
        xs = [r[m] for r in rows if r.get(m) is not None]
        if not xs:
            continue
        out[m] = round(sum(xs) / len(xs), 4)
        lo, hi = bootstrap_ci(xs, resamples=resamples, seed=seed)
        out[f"{m}_ci95"] = [round(lo, 4), round(hi, 4)]
        if len(xs) < len(rows):
            out[f"{m}_n"] = len(xs)
    return out


def paired(a: list[dict[str, float]], b: list[dict[str, float]], metric: str) -> tuple[list[float], list[float]]:
    """The metric's values in two runs over the same items, on the items both have it for."""
    pairs = [(x[metric], y[metric]) for x, y in zip(a, b, strict=True)
             if x.get(metric) is not None and y.get(metric) is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _verdicts(points: list[dict[str, Any]], default: object, rows: dict[str, list[dict[str, float]]],
              resamples: int, seed: int) -> dict[str, dict[str, object]]:
    """Per metric: the best value and, when the default is among the values, each other value
    against the default on the same questions (paired difference, interval, p-value) and
    whether any of them beats the default beyond the noise."""
    out: dict[str, dict[str, object]] = {}
    key = repr(default)
    for m in SWEEP_METRICS:
        scored = [p for p in points if m in p["metrics"]]
        if not scored:  # no item has the gold this metric needs
            continue
        sign = -1.0 if m in LOWER_IS_BETTER else 1.0
        verdict: dict[str, object] = {}
        if m not in NEUTRAL:  # a count of events or images is not better high or low
            best = max(scored, key=lambda p: sign * float(p["metrics"][m]))
            verdict.update({"best_value": best["value"], "best": best["metrics"][m]})
        if key in rows:
            against = {}
            for p in points:
                if repr(p["value"]) == key:
                    continue
                base, other = paired(rows[key], rows[repr(p["value"])], m)
                if not base:
                    continue
                c = paired_difference(base, other, m, resamples=resamples, seed=seed).to_dict()
                against[str(p["value"])] = {k: c[k] for k in ("diff", "diff_ci95", "p_value")}
            verdict.update({"default": next((p["metrics"].get(m) for p in points if repr(p["value"]) == key), None),
                            "vs_default": against})
            # beyond the noise: the interval excludes 0 and the permutation p-value is below 0.05
            if m in LOWER_IS_BETTER and m not in TIMING:
                verdict["beats_default"] = [v for v, c in against.items()
                                            if direction(c["diff_ci95"], c["p_value"]) < 0]
            elif m not in TIMING | NEUTRAL:  # quality only: a shared machine's load moves the time
                verdict["beats_default"] = [v for v, c in against.items()
                                            if direction(c["diff_ci95"], c["p_value"]) > 0]
        out[m] = verdict
    return out


def shared_generator(gen: GenerationConfig, first: Pipeline) -> Generator | None:
    """The ``first`` value's LLM for a value whose own would hold the same model, else None.

    ``hf``: the same ``generation.hf`` settings share the first value's generator; the same
    ``model`` and ``device`` with other decoding settings (``max_new_tokens``,
    ``max_input_tokens``, ``stop``: read from its config at each call) share its loaded weights
    and tokenizer under the value's settings. ``openai``: the same settings share its client.
    None (the value builds its own, as ``load_pipeline`` does) for another backend, model or
    device, or no LLM (``extractive``, ``reader``, ``auto``).
    """
    from searchsmith.serving.pipeline.generation import HFGenerator

    llm = first.generation.llm
    if llm is None:
        return None
    base = first.config.generation
    if gen.backend != base.backend:
        return None
    if gen.backend != "hf":
        return llm if getattr(gen, gen.backend) == getattr(base, base.backend) else None
    if gen.hf == base.hf:
        return llm
    if isinstance(llm, HFGenerator) and (gen.hf.model, gen.hf.device) == (base.hf.model, base.hf.device):
        decoding = copy.copy(llm)  # the same model and tokenizer objects, not a copy of the weights
        decoding.config = gen.hf
        return decoding
    return None


def sharing_pipeline(cfg: PipelineConfig, first: Pipeline, index_dir: str | None) -> Pipeline:
    """The pipeline of one swept value beside the ``first`` value's, its LLM shared when the
    value's would load the same model (:func:`shared_generator`): with ``generation.backend:
    hf`` each value used to load the model again (minutes and one copy of the weights per
    value, all open at once for the interleaved timing).

    The index, embedder and bundles are shared as ``sibling_pipeline`` shares them (the same
    ``index`` and ``bundles`` settings), else loaded for this value. ``load_pipeline`` takes no
    generator, so a value of other bundles is loaded under an ``extractive`` copy of its config
    (which loads no LLM; nothing else it loads depends on ``generation``) and its pipeline built
    over what that loaded, with the shared LLM; the extractive pipeline is dropped unclosed (its
    index is the value's, closed with it; its stages' thread pools never ran a task, so hold no
    thread).
    """
    from searchsmith.serving.evaluate import sibling_pipeline
    from searchsmith.serving.pipeline.pipeline import Pipeline, load_pipeline

    llm = shared_generator(cfg.generation, first)
    if llm is None:
        return sibling_pipeline(cfg, first, index_dir)
    if cfg.bundles == first.config.bundles and cfg.index == first.config.index:
        return Pipeline(cfg, first.index, first.embedder, first.bundles, generator=llm)
    bare = load_pipeline(replace(cfg, generation=replace(cfg.generation, backend="extractive")), index_dir)
    return Pipeline(cfg, bare.index, bare.embedder, bare.bundles, generator=llm)


def eval_sweep(args: argparse.Namespace) -> dict[str, object]:
    """Run the sweep of ``args.param`` over ``args.values`` (see the module docstring).

    Raises:
        ConfigError: no --param / --values, an unknown key, a value the config refuses.
    """
    from searchsmith.serving.evaluate import (
        PassageLookup,
        checked_pipeline,
        pipeline_item_metrics,
        pipeline_items,
        rotation,
        with_eval_bundles,
        write_outputs,
    )
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.training.evaluate import progress_bar

    if not getattr(args, "param", None):
        raise ConfigError("eval sweep: --param KEY is required (a pipeline config key, e.g. "
                          "citation.cosine_threshold; searchsmith config pipeline lists them)")
    if args.param.startswith("index."):  # the index's own settings: one index per value
        from searchsmith.serving.index_sweep import eval_index_sweep

        return eval_index_sweep(args)
    values = parse_values(getattr(args, "values", None) or "", args.param)
    # every config first: an unknown key (with the closest one suggested) or a value the config
    # refuses fails before any question is asked
    configs = [with_eval_bundles(load_pipeline_config(args.config, [f"{args.param}={v}"]), args) for v in values]
    base = load_pipeline_config(args.config)
    try:
        default = _setting(base, args.param)
    except AttributeError:  # a section, not a setting (e.g. --param citation)
        raise ConfigError(f"eval sweep --param: {args.param!r} is not a single pipeline setting (searchsmith "
                          "config pipeline lists them)") from None
    items = pipeline_items(args)
    resamples = int(getattr(args, "resamples", DEFAULT_RESAMPLES))
    seed = int(getattr(args, "seed", DEFAULT_SEED))
    # Every value's pipeline open at once: after one untimed answer each, every question is asked
    # under each value in turn, in a rotating order, so that cold start and the machine's drift
    # do not land on the first or the last value (only the quality metrics are judged anyway).
    first, warnings = checked_pipeline(configs[0], args, items)  # the gold documents against its index
    pipes = [first]
    by_value: dict[str, list[dict[str, float]]] = {repr(v): [] for v in values}
    lines: dict[str, list[dict[str, object]]] = {repr(v): [] for v in values}
    try:
        pipes += [sharing_pipeline(cfg, first, args.index) for cfg in configs[1:]]
        # the ruler of context_tokens and redundancy: the first value's index and embedder, for every value
        lookup = PassageLookup(first)
        for pipe in pipes:
            pipe.ask(items[0]["query"], items[0].get("history"))
        with progress_bar("eval sweep", len(values) * len(items), "question") as bar:
            for i, it in enumerate(items):
                for j in rotation(i, range(len(values))):
                    value = values[j]
                    m = pipeline_item_metrics(pipes[j].ask(it["query"], it.get("history")), it, lookup)
                    by_value[repr(value)].append(m)
                    lines[repr(value)].append({"id": it.get("id", i), "value": value, **m})
                    bar.update(1)
    finally:
        for pipe in reversed(pipes):  # the first last: the others may share its index
            pipe.close()
    points = [{"value": v, "metrics": _summary(by_value[repr(v)], resamples, seed)} for v in values]
    per_item = [line for v in values for line in lines[repr(v)]]
    out: dict[str, Any] = {
        "task": "sweep", "data": str(args.data), "index": str(args.index or base.index), "n": len(items),
        "param": args.param, "default": default, "values": values, "points": points,
        "verdicts": _verdicts(points, default, by_value, resamples, seed),
        "bootstrap": {"resamples": resamples, "seed": seed}, **({"warnings": warnings} if warnings else {}),
    }
    return write_outputs(args, out, per_item, plot_sweep)


def plot_sweep(path: Path, result: dict[str, Any], replace: bool = False) -> Path:
    """Each quality metric against the swept value, with its interval; the default dashed."""
    from searchsmith.serving.profiling.common import save_plot

    points = result["points"]
    param, default = result["param"], result["default"]
    numeric = all(isinstance(p["value"], (int, float)) and not isinstance(p["value"], bool) for p in points)
    xs = [p["value"] if numeric else i for i, p in enumerate(points)]

    def draw(fig: Any, ax: Any) -> None:
        for m in PLOTTED:
            if not all(m in p["metrics"] for p in points):
                continue
            ys = [p["metrics"][m] for p in points]
            lo = [y - p["metrics"][f"{m}_ci95"][0] for y, p in zip(ys, points, strict=True)]
            hi = [p["metrics"][f"{m}_ci95"][1] - y for y, p in zip(ys, points, strict=True)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=m)
        if numeric and isinstance(default, (int, float)):
            ax.axvline(float(default), linestyle="--", color="grey", label=f"default {default}")
        if not numeric:
            ax.set_xticks(xs, [str(p["value"]) for p in points])
        ax.set_xlabel(str(param))
        ax.set_ylabel("mean over questions (95 % bootstrap interval)")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)

    return save_plot(path, draw, f"sweep of {param} ({result['n']} questions)", replace=replace)
