"""The ``*_ci95`` entries of every ``searchsmith eval`` task, from its per-item rows.

One helper for all tasks (:func:`attach_intervals`): a metric that is the mean of a per-item
value gets the bootstrap interval of that mean (:func:`searchsmith.models.stats.with_intervals`);
a pooled metric (precision / recall / F1 over all pairs or spans, accuracy over all
placements, ROC AUC, a latency percentile) gets a bootstrap over the items that recomputes it
on each resample of item indices (:func:`searchsmith.models.stats.bootstrap_ci`). Each task
states the resamples and seed as ``"bootstrap": {"resamples": N, "seed": S}``
(:func:`bootstrap_info`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_ci, with_intervals

#: statistic of a resample of item indices (None where undefined on that resample)
Pooled = Callable[[np.ndarray], "float | None"]

# Statistics recomputed in Python per resample over thousands of pairs (ROC AUC) use fewer
# resamples: 1,000 keep the 2.5 / 97.5 percentiles stable to about 0.01 and the eval fast.
SLOW_RESAMPLES = 1000


def bootstrap_info(resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, int]:
    """The ``"bootstrap"`` entry of an eval output: how its intervals were drawn."""
    return {"resamples": resamples, "seed": seed}


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def ratio(num: Sequence[float], den: Sequence[float]) -> Pooled:
    """Pooled ``sum(num) / sum(den)`` over a resample of items (0.0 when the denominator is 0,
    as :func:`searchsmith.models.metrics.set_prf` reports an undefined precision or recall)."""
    n, d = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)

    def stat(idx: np.ndarray) -> float:
        total = d[idx.astype(np.int64)].sum()
        return float(n[idx.astype(np.int64)].sum() / total) if total else 0.0

    return stat


def prf(tp: Sequence[float], n_pred: Sequence[float], n_gold: Sequence[float], prefix: str = "") -> dict[str, Pooled]:
    """Pooled micro precision / recall / F1 from per-item counts (F1 = 2 tp / (pred + gold))."""
    both = np.asarray(n_pred, dtype=np.float64) + np.asarray(n_gold, dtype=np.float64)
    return {f"{prefix}precision": ratio(tp, n_pred), f"{prefix}recall": ratio(tp, n_gold),
            f"{prefix}f1": ratio(2 * np.asarray(tp, dtype=np.float64), both)}


def attach_intervals(metrics: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
                     pooled: Mapping[str, Pooled] | None = None, keys: Sequence[str] | None = None,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                     digits: int = 4) -> dict[str, Any]:
    """``metrics`` with a ``<name>_ci95: [low, high]`` entry after each metric it can interval.

    Args:
        metrics: the task's figures (a flat dict; nested parts are attached one by one).
        rows: one dict per item; a metric reported under the name of a per-item value is the
            mean of that value (unless ``pooled`` names it).
        pooled: metric name -> statistic of a resample of item indices (``np.arange(len(rows))``
            resampled), for metrics that are not a mean of per-item values.
        keys: limit the per-item means considered (default: every numeric field of the rows).
        digits: rounding of the pooled intervals (the means are rounded to 4 digits).

    Returns:
        A new dict, the metrics in their order, each interval right after its metric.
    """
    pooled = dict(pooled or {})
    candidates = keys if keys is not None else (list(rows[0]) if rows else [])
    means = [k for k in candidates if k not in pooled]
    ci: dict[str, list[float] | None] = dict(
        with_intervals(metrics, rows, keys=means, resamples=resamples, seed=seed)) if means else {}
    index = np.arange(len(rows))
    for name, stat in pooled.items():
        if not _numeric(metrics.get(name)) or not rows:
            continue
        lo, hi = bootstrap_ci(index, statistic=stat, resamples=resamples, seed=seed)
        ci[f"{name}_ci95"] = None if math.isnan(lo) else [round(lo, digits), round(hi, digits)]
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        out[key] = value
        if f"{key}_ci95" in ci:
            out[f"{key}_ci95"] = ci[f"{key}_ci95"]
    return out


def with_bootstrap(metrics: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
                   pooled: Mapping[str, Pooled] | None = None, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """A task's output: :func:`attach_intervals` of its flat figures and the ``"bootstrap"`` entry."""
    return {**attach_intervals(metrics, rows, pooled=pooled, resamples=resamples, seed=seed),
            "bootstrap": bootstrap_info(resamples, seed)}


__all__ = ["SLOW_RESAMPLES", "Pooled", "attach_intervals", "bootstrap_info", "prf", "ratio", "with_bootstrap"]
