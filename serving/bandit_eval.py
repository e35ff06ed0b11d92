"""``searchsmith eval bandit``: the IMACS protocol router (LinUCB) against fixed presets and an oracle.

Full-information design: every question is answered once with each preset forced (the
presets interleaved question by question, so a change in the machine's load falls on all of
them alike), recording its quality (``--quality``, an eval pipeline metric in [0, 1], scored
against the gold), its measured cost exactly as the pipeline computes it for the router (the
trace's ``cost``: ``CostConfig`` over the latency, tokens and model calls), its latency and its
model calls. That table, ``(Q, P)``, is then replayed without asking again:

* for each ``λ`` (``--lambdas``) the reward of preset ``p`` on question ``q`` is
  ``quality[q, p] - λ * cost[q, p]``, the reward ``LinUCBRouter.feedback`` computes;
* for each seed (``--seeds N``: seeds ``0 .. N-1``) a fresh :class:`LinUCBRouter` (no state
  file: nothing carries over between runs) meets the questions in the seed's shuffled order
  (the same order for every ``λ``), chooses with :func:`task_features` of the question and its
  history, receives the chosen preset's reward and updates;
* each fixed preset and the oracle (per question, the preset with the best reward at that
  ``λ``; ties go to the earlier preset) are scored on the same streams.

The oracle also knows each answer's latency noise (at ``λ > 0`` it takes whichever preset
happened to run fastest on that question), which no policy that chooses before answering
can know: the regret vs the best fixed preset in hindsight is the fairer yardstick, and the
machine's load average before and after measuring is recorded (``load_average``).

Intervals (seeded bootstrap 95 %):

* ``mean_reward_ci95`` resamples the questions; the bandit's reward on a question is its
  mean over the seeds' streams, so every policy's interval says how much the figure depends
  on which questions were asked, and the bandit is compared with the best fixed preset
  *paired over the questions* (``vs_best_fixed``: mean difference, interval, sign-flip
  p-value; ``verdict`` is ``better`` / ``worse`` only when the interval excludes zero);
* the bandit's final cumulative regrets (vs the oracle, vs the best fixed preset in
  hindsight) resample the seeds: they say how much the figure depends on the stream order
  (with few seeds this interval is coarse; ``*_per_seed`` lists every seed's value).

``--plot PNG`` draws the cumulative regret vs the oracle along the stream for each ``λ``: the
bandit's mean over the seeds with the seeds' min-max band, and each fixed preset's line.
``--per-item FILE`` writes one line per (question, preset): quality, cost, latency_ms,
model_calls.

::

    searchsmith eval bandit --data models/demo/qa.jsonl --index indexes/demo --plot bandit.png
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.config import is_int
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_ci,
    direction,
    paired_difference,
)
from searchsmith.serving.pipeline.config import ProtocolConfig
from searchsmith.serving.pipeline.protocol import LinUCBRouter

__all__ = ["MAX_RESAMPLES", "MAX_SEEDS", "MIN_RESAMPLES", "QUALITY_METRICS", "PresetTable", "Replay",
           "cumulative_regret", "eval_bandit", "oracle_choices", "parse_lambdas", "policy_comparison",
           "render_markdown", "replay", "stream_order"]

# The eval pipeline metrics (serving.evaluate.pipeline_item_metrics) that are a quality in
# [0, 1]; model_calls, tokens and latency_ms are costs, not qualities.
QUALITY_METRICS = ("f1", "contains", "support_recall", "retrieval_recall", "citation_precision",
                   "citation_recall")
MIN_RESAMPLES = 100
# The bootstrap draws a (resamples, items) table of indices at once: 100,000 resamples of 1,000
# items are 800 MB and about 5 s per interval on one core, 50x the default's 2,000; more buys no
# precision a 95 % interval can show and soon exhausts the memory.
MAX_RESAMPLES = 100_000
# Each seed replays the stream once per λ (about 3 ms for 200 questions and 3 presets): 1,000
# seeds are seconds of replay and per-seed lists of 1,000 entries in the output.
MAX_SEEDS = 1000


@dataclass(frozen=True)
class PresetTable:
    """Every question answered with every preset.

    Attributes:
        presets: the arms, in the config's order.
        quality: (Q, P) the quality of preset p's answer to question q, in [0, 1].
        cost: (Q, P) its measured cost (the trace's ``cost``).
        features: (Q, D) :func:`task_features` of each question, what the router sees.
    """

    presets: tuple[str, ...]
    quality: np.ndarray
    cost: np.ndarray
    features: np.ndarray

    def rewards(self, cost_lambda: float) -> np.ndarray:
        """(Q, P) ``quality - cost_lambda * cost``, the router's reward."""
        return self.quality - cost_lambda * self.cost


@dataclass(frozen=True)
class Replay:
    """One bandit run over a stream: ``order`` (Q,) question indices in the order asked,
    ``choices`` (Q,) the preset index chosen at each step, ``rewards`` (Q,) the reward got."""

    order: np.ndarray
    choices: np.ndarray
    rewards: np.ndarray


# -- options -----------------------------------------------------------------------------------
def parse_lambdas(text: str | None, default_lambda: float) -> list[float]:
    """``"0,0.1,1"`` -> ``[0.0, 0.1, 1.0]`` (sorted, duplicates dropped); None -> 0, the config's
    ``protocol.cost_lambda`` and 1.

    Raises:
        ConfigError: no value, a value that is not a finite number >= 0.
    """
    if text is None:
        return sorted({0.0, float(default_lambda), 1.0})
    raw = [v.strip() for v in str(text).split(",") if v.strip()]
    if not raw:
        raise ConfigError(f"eval bandit --lambdas: give at least one cost weight (got {text!r}), e.g. "
                          "--lambdas 0,0.1,1")
    values = []
    for v in raw:
        try:
            lam = float(v)
        except ValueError:
            lam = math.nan
        if not math.isfinite(lam) or lam < 0:
            raise ConfigError(f"eval bandit --lambdas: {v!r} is not a number >= 0; give comma-separated "
                              "cost weights, e.g. --lambdas 0,0.1,1")
        values.append(lam)
    return sorted(set(values))


def _check_options(args: argparse.Namespace) -> tuple[str, list[int], int, int]:
    """--quality, --seeds, --resamples and --seed checked before any question is asked."""
    quality = getattr(args, "quality", None)
    if quality is None:
        quality = "f1"
    if not str(quality).strip():
        raise ConfigError(f"eval bandit --quality is empty: give a quality in [0, 1], one of "
                          f"{', '.join(QUALITY_METRICS)}, or leave the option out (default f1)")
    if quality not in QUALITY_METRICS:
        raise ConfigError(f"eval bandit --quality: {quality!r} is not a quality in [0, 1]; use one of "
                          f"{', '.join(QUALITY_METRICS)}")
    seeds = getattr(args, "seeds", 5)
    if not is_int(seeds, 1) or seeds > MAX_SEEDS:
        raise ConfigError(f"eval bandit --seeds: expected a whole number >= 1 and at most {MAX_SEEDS} of shuffled "
                          f"streams, got {seeds!r} (e.g. --seeds 5)")
    resamples = getattr(args, "resamples", DEFAULT_RESAMPLES)
    if not is_int(resamples, MIN_RESAMPLES) or resamples > MAX_RESAMPLES:
        raise ConfigError(f"eval bandit --resamples: expected a whole number >= {MIN_RESAMPLES} and at most "
                          f"{MAX_RESAMPLES}, got {resamples!r} (default {DEFAULT_RESAMPLES})")
    seed = getattr(args, "seed", DEFAULT_SEED)
    if not is_int(seed, 0):
        raise ConfigError(f"eval bandit --seed: the bootstrap seed must be a whole number >= 0, got {seed!r}")
    return quality, list(range(seeds)), resamples, seed


# -- the replay --------------------------------------------------------------------------------
def stream_order(n: int, seed: int) -> np.ndarray:
    """(n,) the seed's shuffled order of the questions (the same for every λ)."""
    return np.random.default_rng(seed).permutation(n)


def replay(rewards: np.ndarray, features: np.ndarray, presets: Sequence[str], protocol: ProtocolConfig,
           seed: int) -> Replay:
    """A fresh LinUCB router meets the questions in the seed's order and learns from each reward.

    Args:
        rewards: (Q, P) the reward of each preset on each question.
        features: (Q, D) the router's features of each question.
        presets: the P arms, in the order of ``rewards``' columns.
        protocol: the router's settings (alpha, ridge); its state file is ignored.
        seed: the stream's seed (:func:`stream_order`).
    """
    router = LinUCBRouter(list(presets), replace(protocol, state_path=None))  # reset: no state carried over
    order = stream_order(rewards.shape[0], seed)
    choices = np.empty(len(order), dtype=np.int64)
    got = np.empty(len(order), dtype=np.float64)
    for t, q in enumerate(order):
        x = features[q]
        arm = router.choose(x)
        j = router.arms.index(arm)
        choices[t], got[t] = j, rewards[q, j]
        router.update(arm, x, float(got[t]))
    return Replay(order, choices, got)


def oracle_choices(rewards: np.ndarray) -> np.ndarray:
    """(Q,) the best preset of each question (ties: the earlier preset)."""
    return np.argmax(rewards, axis=1)


def cumulative_regret(rewards: np.ndarray, order: np.ndarray, got: np.ndarray) -> np.ndarray:
    """(Q,) regret vs the oracle after each step: ``sum_t max_p rewards[q_t, p] - got_t``."""
    return np.cumsum(rewards[order].max(axis=1) - got)


def _ci(values: Sequence[float] | np.ndarray, resamples: int, seed: int) -> list[float]:
    lo, hi = bootstrap_ci(values, resamples=resamples, seed=seed)
    return [round(lo, 4), round(hi, 4)]


def _shares(choices: np.ndarray, presets: Sequence[str]) -> dict[str, float]:
    counts = np.bincount(choices.ravel(), minlength=len(presets))
    return {p: round(float(c) / max(1, choices.size), 4) for p, c in zip(presets, counts)}


def policy_comparison(table: PresetTable, cost_lambda: float, protocol: ProtocolConfig, seeds: Sequence[int], *,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """One λ: the bandit over each seed's stream vs each fixed preset and the oracle.

    Returns:
        ``{"lambda", "bandit", "fixed", "oracle", "best_fixed", "vs_best_fixed", "curves"}``
        (see the module docstring for the intervals).
    """
    presets = table.presets
    rewards = table.rewards(cost_lambda)  # (Q, P)
    n = rewards.shape[0]
    oracle = rewards.max(axis=1)  # (Q,)
    runs = [replay(rewards, table.features, presets, protocol, s) for s in seeds]
    per_question = np.zeros(n)  # the bandit's reward on each question, averaged over the seeds
    for r in runs:
        per_question[r.order] += r.rewards / len(runs)
    fixed_means = rewards.mean(axis=0)  # (P,)
    best = int(np.argmax(fixed_means))
    regret_oracle = np.array([float(oracle.sum() - r.rewards.sum()) for r in runs])
    regret_best = np.array([float(rewards[:, best].sum() - r.rewards.sum()) for r in runs])
    curves = np.stack([cumulative_regret(rewards, r.order, r.rewards) for r in runs])  # (S, Q)
    fixed_curves = {p: np.mean([cumulative_regret(rewards, r.order, rewards[r.order, j]) for r in runs], axis=0)
                    for j, p in enumerate(presets)}
    vs = paired_difference(rewards[:, best], per_question, "reward", resamples=resamples, seed=seed).to_dict()
    d = direction(vs["diff_ci95"], vs["p_value"])  # interval and permutation test must agree
    verdict = "better" if d > 0 else "worse" if d < 0 else "within the noise"
    return {
        "lambda": cost_lambda,
        "bandit": {
            "mean_reward": round(float(per_question.mean()), 4),
            "mean_reward_ci95": _ci(per_question, resamples, seed),
            "mean_reward_per_seed": [round(float(r.rewards.mean()), 4) for r in runs],
            "regret_vs_oracle": round(float(regret_oracle.mean()), 4),
            "regret_vs_oracle_ci95": _ci(regret_oracle, resamples, seed),
            "regret_vs_oracle_per_seed": [round(float(v), 4) for v in regret_oracle],
            "regret_vs_best_fixed": round(float(regret_best.mean()), 4),
            "regret_vs_best_fixed_ci95": _ci(regret_best, resamples, seed),
            "regret_vs_best_fixed_per_seed": [round(float(v), 4) for v in regret_best],
            "choices": _shares(np.stack([r.choices for r in runs]), presets),
            # the second half of every stream: where it settled
            "choices_second_half": _shares(np.stack([r.choices[n // 2:] for r in runs]), presets),
        },
        "fixed": {p: {"mean_reward": round(float(fixed_means[j]), 4),
                      "mean_reward_ci95": _ci(rewards[:, j], resamples, seed),
                      "regret_vs_oracle": round(float((oracle - rewards[:, j]).sum()), 4)}
                  for j, p in enumerate(presets)},
        "oracle": {"mean_reward": round(float(oracle.mean()), 4), "mean_reward_ci95": _ci(oracle, resamples, seed),
                   "regret_vs_oracle": 0.0, "choices": _shares(oracle_choices(rewards), presets)},
        "best_fixed": presets[best],
        "vs_best_fixed": {k: vs[k] for k in ("diff", "diff_ci95", "p_value")} | {"verdict": verdict},
        "curves": {"bandit_mean": [round(float(v), 4) for v in curves.mean(axis=0)],
                   "bandit_min": [round(float(v), 4) for v in curves.min(axis=0)],
                   "bandit_max": [round(float(v), 4) for v in curves.max(axis=0)],
                   "fixed": {p: [round(float(v), 4) for v in c] for p, c in fixed_curves.items()}},
    }


# -- measuring the table -----------------------------------------------------------------------
def _measure(pipe: Any, items: list[dict[str, Any]], presets: tuple[str, ...], quality: str
             ) -> tuple[PresetTable, list[dict[str, Any]]]:
    """Answer every question with every preset forced; the table and the per-item rows."""
    from searchsmith.serving.evaluate import pipeline_item_metrics, rotation
    from searchsmith.serving.pipeline.protocol import task_features
    from searchsmith.serving.rewrite import parse_history
    from searchsmith.training.evaluate import progress_bar

    # One discarded answer per preset first: lazy loading and first-call warm-up would
    # otherwise be charged to the first question's cost.
    for p in presets:
        pipe.ask(items[0]["query"], items[0].get("history"), query_id="warm-up", preset=p)
    n, k = len(items), len(presets)
    qual, cost = np.zeros((n, k)), np.zeros((n, k))
    feats = np.stack([task_features(it["query"].strip(), parse_history(it.get("history"))) for it in items])
    rows: list[dict[str, Any]] = []
    with progress_bar("eval bandit", n * k, "answer") as bar:
        for i, it in enumerate(items):
            ident = it.get("id", i)
            mine: dict[int, dict[str, Any]] = {}
            # interleaved, in a rotating order: load drift, and the first answer of a question
            # warming what the others reuse (the chunks' pages), fall on every preset alike
            for j in rotation(i, range(k)):
                p = presets[j]
                ans = pipe.ask(it["query"], it.get("history"), query_id=f"{ident}:{p}", preset=p)
                m = pipeline_item_metrics(ans, it)
                if not 0.0 <= m[quality] <= 1.0:
                    raise ValidationError(f"eval bandit: {quality} of {ident} with preset {p} is {m[quality]}, "
                                          "outside [0, 1]")
                qual[i, j], cost[i, j] = m[quality], float(ans["trace"]["cost"])  # the router's cost
                mine[j] = {"id": ident, "i": i, "preset": p, "quality": m[quality], "cost": cost[i, j],
                           "latency_ms": m["latency_ms"], "model_calls": m["model_calls"], "tokens": m["tokens"]}
                bar.update(1)
            rows += [mine[j] for j in range(k)]  # the presets' order, as the per-item file has them
    return PresetTable(presets, qual, cost, feats), rows


def _preset_table(table: PresetTable, rows: list[dict[str, Any]], quality: str, resamples: int,
                  seed: int) -> dict[str, dict[str, Any]]:
    out = {}
    for j, p in enumerate(table.presets):
        mine = [r for r in rows if r["preset"] == p]
        latency = [r["latency_ms"] for r in mine]
        out[p] = {quality: round(float(table.quality[:, j].mean()), 4),
                  f"{quality}_ci95": _ci(table.quality[:, j], resamples, seed),
                  "cost": round(float(table.cost[:, j].mean()), 6),
                  "cost_ci95": [round(v, 6) for v in bootstrap_ci(table.cost[:, j], resamples=resamples, seed=seed)],
                  "latency_ms": round(float(np.mean(latency)), 1),
                  "latency_ms_p50": round(float(np.median(latency)), 1),
                  "model_calls": round(float(np.mean([r["model_calls"] for r in mine])), 3)}
    return out


def eval_bandit(args: argparse.Namespace) -> dict[str, Any]:
    """The LinUCB protocol router vs each fixed preset and the oracle (see the module docstring).

    Raises:
        ConfigError: a bad --lambdas, --seeds, --quality or --resamples (before any question
            is asked), or a bad config.
        ValidationError: no --index.
    """
    from searchsmith.serving.evaluate import (
        checked_pipeline,
        pipeline_items,
        with_eval_bundles,
        write_outputs,
    )
    from searchsmith.serving.pipeline.config import load_pipeline_config

    quality, seeds, resamples, boot_seed = _check_options(args)
    if getattr(args, "lambdas", None) is not None:
        parse_lambdas(args.lambdas, 0.0)  # a bad value fails before the config is read
    cfg = with_eval_bundles(load_pipeline_config(getattr(args, "config", None)), args)
    lambdas = parse_lambdas(getattr(args, "lambdas", None), cfg.protocol.cost_lambda)
    if not (args.index or cfg.index):
        raise ValidationError("eval bandit needs --index DIR (built with 'searchsmith index') or 'index:' in the "
                              "--config file")
    items = pipeline_items(args)
    presets = tuple(cfg.presets)
    # Presets are forced on every answer, so the pipeline's own router is off (and its state
    # file untouched); the replay builds fresh routers with the config's alpha and ridge.
    pipe, warnings = checked_pipeline(replace(cfg, protocol=replace(cfg.protocol, enabled=False, state_path=None)),
                                      args, items)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    try:
        table, rows = _measure(pipe, items, presets, quality)
    finally:
        pipe.close()
    seconds = time.perf_counter() - t0
    c = cfg.cost
    out: dict[str, Any] = {
        "task": "bandit", "data": str(args.data), "index": str(args.index or cfg.index), "n": len(items),
        "presets": list(presets), "quality": quality, "lambdas": lambdas, "seeds": seeds,
        "reward": f"{quality} - lambda * cost",
        "cost": {"per_second": c.per_second, "per_1k_tokens": c.per_1k_tokens, "per_model_call": c.per_model_call},
        "protocol": {"alpha": cfg.protocol.alpha, "ridge": cfg.protocol.ridge,
                     "config_cost_lambda": cfg.protocol.cost_lambda},
        "per_preset": _preset_table(table, rows, quality, resamples, boot_seed),
        "by_lambda": [policy_comparison(table, lam, cfg.protocol, seeds, resamples=resamples, seed=boot_seed)
                      for lam in lambdas],
        "measure_seconds": round(seconds, 1),
        # 1-minute load average: latency, hence cost, is only comparable on a quiet machine
        "load_average": {"before": load_before,
                         "after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
        "bootstrap": {"resamples": resamples, "seed": boot_seed},
        **({"warnings": warnings} if warnings else {}),
    }
    return write_outputs(args, out, rows, plot_bandit)


# -- plot and Markdown -------------------------------------------------------------------------
def plot_bandit(path: Path, result: dict[str, Any], replace: bool = False) -> Path:
    """Cumulative regret vs the oracle along the stream, per λ (one colour each): the bandit's
    mean over the seeds with their min-max band (solid), each fixed preset (dashed / dotted)."""
    from searchsmith.serving.profiling.common import save_plot

    styles = ("--", ":", "-.", (0, (5, 1)), (0, (1, 3)))

    def draw(fig: Any, ax: Any) -> None:
        for k, block in enumerate(result["by_lambda"]):
            colour = f"C{k % 10}"
            cur = block["curves"]
            xs = np.arange(1, len(cur["bandit_mean"]) + 1)
            lam = f"λ={block['lambda']:g}"
            ax.plot(xs, cur["bandit_mean"], color=colour, linewidth=2, label=f"LinUCB {lam}")
            ax.fill_between(xs, cur["bandit_min"], cur["bandit_max"], color=colour, alpha=0.2)
            for j, p in enumerate(result["presets"]):
                ys = cur["fixed"][p]
                ax.plot(xs, ys, color=colour, linewidth=1, linestyle=styles[j % len(styles)], label=f"{p} {lam}")
        ax.set_xlabel("questions answered")
        # λ scales the regret: a symmetric log axis keeps the small-λ curves readable
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylabel("cumulative regret vs the oracle (symlog)")
        ax.legend(fontsize=6, ncol=max(1, len(result["by_lambda"])))

    return save_plot(path, draw, f"LinUCB vs fixed presets ({result['n']} questions, {len(result['seeds'])} "
                                 "seeds; band: seeds' min-max)", replace=replace)


def _fmt(value: float, ci: Sequence[float] | None = None, digits: int = 3) -> str:
    text = f"{value:.{digits}f}"
    return f"{text} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else text


def _share_text(shares: dict[str, float], presets: Sequence[str]) -> str:
    return ", ".join(f"{p} {100 * shares[p]:.0f} %" for p in presets)


def _load_text(result: dict[str, Any]) -> str:
    load = result.get("load_average") or {}
    if load.get("before") is None:
        return ""
    return (f" Measured in {result.get('measure_seconds', 0):g} s at load average {load['before']:.1f} -> "
            f"{load['after']:.1f} (costs are latencies: only comparable on a quiet machine).")


def render_markdown(result: dict[str, Any]) -> list[str]:
    """The Markdown lines of the bandit evaluation: the per-preset table, then per λ a table of
    policy vs mean reward [95 % CI] and final regret, and a one-line verdict."""
    q = result["quality"]
    c = result["cost"]
    lines = [
        f"{result['n']} questions, each answered once with every preset ({', '.join(result['presets'])}); "
        f"reward = {q} - λ · cost, cost = {c['per_second']:g} · latency_s + {c['per_1k_tokens']:g} · tokens/1000 "
        f"+ {c['per_model_call']:g} · model_calls. LinUCB (alpha {result['protocol']['alpha']:g}, ridge "
        f"{result['protocol']['ridge']:g}) replayed from a fresh state over {len(result['seeds'])} shuffled "
        f"streams (seeds {', '.join(str(s) for s in result['seeds'])}). Reward intervals resample the questions; "
        "regret intervals resample the seeds. The oracle also knows each answer's latency noise, so the regret "
        "vs the best fixed preset is the fairer yardstick." + _load_text(result), "",
        f"| preset | {q} | cost | latency ms (p50) | model calls |", "|---|---|---|---|---|",
    ]
    for p in result["presets"]:
        row = result["per_preset"][p]
        lines.append(f"| {p} | {_fmt(row[q], row[f'{q}_ci95'])} | {_fmt(row['cost'], row['cost_ci95'], 4)} | "
                     f"{row['latency_ms_p50']:g} | {row['model_calls']:g} |")
    lines.append("")
    for block in result["by_lambda"]:
        b, vs = block["bandit"], block["vs_best_fixed"]
        best = block["best_fixed"]
        lines += [f"**λ = {block['lambda']:g}**", "",
                  "| policy | mean reward [95 % CI] | final regret vs oracle | chosen |", "|---|---|---|---|",
                  f"| LinUCB | {_fmt(b['mean_reward'], b['mean_reward_ci95'])} | "
                  f"{_fmt(b['regret_vs_oracle'], b['regret_vs_oracle_ci95'], 2)} | {_share_text(b['choices'], result['presets'])} |"]
        for p in result["presets"]:
            f = block["fixed"][p]
            mark = " (best fixed)" if p == best else ""
            lines.append(f"| {p}{mark} | {_fmt(f['mean_reward'], f['mean_reward_ci95'])} | "
                         f"{f['regret_vs_oracle']:.2f} | - |")
        o = block["oracle"]
        lines += [f"| oracle | {_fmt(o['mean_reward'], o['mean_reward_ci95'])} | 0 | {_share_text(o['choices'], result['presets'])} |",
                  "",
                  f"LinUCB vs {best} (best fixed): {vs['diff']:+.3f} [{vs['diff_ci95'][0]:+.3f}, "
                  f"{vs['diff_ci95'][1]:+.3f}] reward per question (p={vs['p_value']:.3g}), {vs['verdict']}; "
                  f"cumulative regret vs {best} {_fmt(b['regret_vs_best_fixed'], b['regret_vs_best_fixed_ci95'], 2)}.",
                  ""]
    return lines
