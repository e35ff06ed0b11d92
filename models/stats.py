"""Confidence intervals and paired tests for evaluation figures.

Every ``searchsmith eval`` figure is measured on a small set (dozens to hundreds of items),
so it comes with a seeded bootstrap 95 % interval, and two runs over the same items are
compared item by item:

* :func:`bootstrap_ci`: percentile interval of a statistic (default: the mean) over items
  resampled with replacement; for a pooled metric (ROC AUC, F1 over all pairs) pass a
  ``statistic`` that recomputes it from a resample of the item indices;
* :func:`paired_difference`: mean of B − A over the items both runs scored, its bootstrap
  interval and a two-sided paired sign-flip permutation p-value (exact for up to
  :data:`EXACT_MAX_ITEMS` non-zero differences, else sampled);
* :func:`with_intervals`: the ``*_ci95`` entries of a metrics dict from its per-item rows;
* :func:`compare_rows`: every shared numeric metric of two per-item files, paired by key.

Resampling uses ``numpy.random.default_rng(seed)``: the same data and seed give the same
interval on every machine.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from searchsmith.models.config import is_int
from searchsmith.models.errors import ValidationError

__all__ = ["DEFAULT_RESAMPLES", "DEFAULT_SEED", "EXACT_MAX_ITEMS", "Comparison", "bootstrap_ci", "clustered_figures",
           "compare_rows", "direction", "paired_difference", "paired_figures", "permutation_p", "with_intervals"]

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Up to this many non-zero paired differences the sign-flip test enumerates every assignment.
EXACT_MAX_ITEMS = 16
LEVEL = 0.95


def _check(resamples: int, level: float) -> None:
    if not is_int(resamples, 100):
        raise ValidationError(f"bootstrap resamples: expected an int >= 100, got {resamples!r}")
    if not 0.5 <= level < 1.0:
        raise ValidationError(f"bootstrap level: expected a number in [0.5, 1), got {level!r}")


def bootstrap_ci(values: Sequence[float] | np.ndarray, statistic: Callable[[np.ndarray], float] | None = None,
                 *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                 level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values``.

    Args:
        values: one number per item; with a ``statistic`` that takes indices, pass
            ``np.arange(n)`` and let the statistic look the items up.
        statistic: array -> number; None = the mean. A resample where it is undefined
            (returns None or NaN) is skipped.
        resamples: bootstrap resamples (>= 100).
        seed: the generator's seed.
        level: the interval's coverage (0.95 = the 2.5th and 97.5th percentiles).

    Returns:
        ``(low, high)``; ``(v, v)`` for a single item, ``(nan, nan)`` for none.
    """
    _check(resamples, level)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    stat = statistic or (lambda a: float(np.mean(a)))
    if x.size == 1:
        v = stat(x)
        return (float(v), float(v)) if v is not None else (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    if statistic is None:  # vectorised mean
        stats = x[idx].mean(axis=1)
    else:
        raw = [stat(x[row]) for row in idx]
        stats = np.asarray([s for s in raw if s is not None and not math.isnan(float(s))], dtype=np.float64)
        if stats.size == 0:
            return (math.nan, math.nan)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def permutation_p(diffs: Sequence[float] | np.ndarray, *, resamples: int = 10000, seed: int = DEFAULT_SEED) -> float:
    """Two-sided paired sign-flip permutation p-value of mean(diffs) = 0.

    Under the null each item's difference is as likely to have either sign. With at most
    :data:`EXACT_MAX_ITEMS` non-zero differences every sign assignment is enumerated (an
    exact p-value); otherwise ``resamples`` random assignments are drawn and the estimate is
    ``(hits + 1) / (resamples + 1)`` so it is never 0.
    """
    d = np.asarray(diffs, dtype=np.float64)
    d = d[d != 0.0]
    if d.size == 0:
        return 1.0
    observed = abs(float(d.mean()))
    tol = 1e-12 * max(1.0, observed)
    if d.size <= EXACT_MAX_ITEMS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        means = np.abs((signs * d).mean(axis=1))
        return float(np.mean(means >= observed - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(resamples, d.size))
    hits = int(np.sum(np.abs((signs * d).mean(axis=1)) >= observed - tol))
    return (hits + 1) / (resamples + 1)


@dataclass(frozen=True)
class Comparison:
    """B against A on one metric, over the items both runs scored."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean of B - A
    ci95: tuple[float, float]
    p_value: float

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "n": self.n, "a": round(self.mean_a, 6), "b": round(self.mean_b, 6),
                "diff": round(self.diff, 6), "diff_ci95": [round(self.ci95[0], 6), round(self.ci95[1], 6)],
                "p_value": round(self.p_value, 6), "significant": self.p_value < 1.0 - LEVEL}


def paired_difference(a: Sequence[float], b: Sequence[float], metric: str = "value", *,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Comparison:
    """Mean paired difference B − A, its bootstrap interval and the sign-flip p-value.

    Raises:
        ValidationError: the two lists differ in length or are empty.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValidationError(f"paired difference of {metric!r}: {x.size} against {y.size} values; pair the "
                              "same items")
    if x.size == 0:
        raise ValidationError(f"paired difference of {metric!r}: no paired items")
    d = y - x
    return Comparison(metric, int(x.size), float(x.mean()), float(y.mean()), float(d.mean()),
                      bootstrap_ci(d, resamples=resamples, seed=seed), permutation_p(d, seed=seed))


def paired_figures(key: str, baseline: Sequence[float], model: Sequence[float]) -> dict[str, float]:
    """A model against its baseline on the same items, as the flat figures a recipe records
    and a ``beyond_noise`` gate reads (``serving/pipeline/gates.py``): ``<key>_diff`` (mean of
    model - baseline), ``_lo`` / ``_hi`` (its bootstrap 95 % interval), ``_p`` (sign-flip
    p-value), ``_n`` and ``_direction`` (:func:`direction`); {} without items."""
    if not len(baseline):
        return {}
    c = paired_difference(baseline, model, key)
    return {f"{key}_diff": c.diff, f"{key}_lo": c.ci95[0], f"{key}_hi": c.ci95[1], f"{key}_p": c.p_value,
            f"{key}_n": float(c.n), f"{key}_direction": float(direction(c.ci95, c.p_value))}


def clustered_figures(key: str, clusters: Sequence[Sequence[int]],
                      difference: Callable[[np.ndarray], float | None], *, resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> dict[str, float]:
    """:func:`paired_figures` for a figure that is not a mean over items (ROC AUC or F1 pooled
    over pairs): ``difference(indices)`` is the model's figure minus the baseline's on those
    pairs (None where undefined), and the items resampled are ``clusters`` of pair indices
    (a claim's pairs go together). ``_diff`` is the difference on every pair, ``_lo`` / ``_hi``
    its percentile bootstrap interval, ``_p`` the bootstrap's two-sided p-value (twice the
    smaller share of resamples on either side of 0, each share ``(hits + 1) / (resamples + 1)``),
    ``_n`` the number of clusters; {} without clusters or when the figure is undefined."""
    _check(resamples, LEVEL)
    arrays = [np.asarray(c, dtype=np.int64) for c in clusters if len(c)]
    if not arrays:
        return {}
    point = difference(np.concatenate(arrays))
    if point is None or math.isnan(float(point)):
        return {}
    rng = np.random.default_rng(seed)
    diffs = []
    for row in rng.integers(0, len(arrays), size=(resamples, len(arrays))):
        v = difference(np.concatenate([arrays[i] for i in row]))
        if v is not None and not math.isnan(float(v)):
            diffs.append(float(v))
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return {}
    alpha = (1.0 - LEVEL) / 2
    lo, hi = (float(x) for x in np.quantile(d, [alpha, 1.0 - alpha]))
    p = min(1.0, 2 * min((int(np.sum(d <= 0)) + 1) / (d.size + 1), (int(np.sum(d >= 0)) + 1) / (d.size + 1)))
    return {f"{key}_diff": float(point), f"{key}_lo": lo, f"{key}_hi": hi, f"{key}_p": p,
            f"{key}_n": float(len(arrays)), f"{key}_direction": float(direction((lo, hi), p))}


def direction(diff_ci95: Sequence[float], p_value: float, level: float = LEVEL) -> int:
    """+1 / -1 when a paired difference is beyond the noise above / below 0, else 0.

    Both must agree: the bootstrap interval excludes 0 and the permutation p-value is below
    ``1 - level``. On a handful of items the percentile bootstrap is too narrow (a difference
    seen on 3 of 8 items can give an interval that excludes 0 while its exact sign-flip
    p-value is 0.25); the permutation test keeps such a difference inside the noise.
    """
    lo, hi = float(diff_ci95[0]), float(diff_ci95[1])
    if p_value >= 1.0 - level:
        return 0
    return 1 if lo > 0 else -1 if hi < 0 else 0


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def with_intervals(metrics: Mapping[str, object], rows: Sequence[Mapping[str, object]], *,
                   keys: Sequence[str] | None = None, prefix: str = "", resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED) -> dict[str, list[float]]:
    """``{"<prefix><key>_ci95": [low, high]}`` for each metric that is the mean of a per-item value.

    A key gets an interval when every row has a finite number under it and ``metrics``
    reports it (under ``prefix + key``); ``keys`` limits which are considered.
    """
    out: dict[str, list[float]] = {}
    if not rows:
        return out
    candidates = keys if keys is not None else [k for k, v in rows[0].items() if _numeric(v)]
    for key in candidates:
        if prefix + key not in metrics or not all(_numeric(r.get(key)) for r in rows):
            continue
        lo, hi = bootstrap_ci([float(r[key]) for r in rows], resamples=resamples, seed=seed)  # type: ignore[arg-type]
        out[f"{prefix}{key}_ci95"] = [round(lo, 4), round(hi, 4)]
    return out


def _row_key(row: Mapping[str, object], key: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(row.get(k)) for k in key)


def compare_rows(rows_a: Sequence[Mapping[str, object]], rows_b: Sequence[Mapping[str, object]],
                 key: Sequence[str], *, metrics: Sequence[str] | None = None,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, object]:
    """Pair two per-item files by ``key`` and compare every numeric metric both have.

    Raises:
        ValidationError: a key repeats within a file, no item is in both, or a named metric
            is missing.
    """
    def index(rows: Sequence[Mapping[str, object]], which: str) -> dict[tuple[str, ...], Mapping[str, object]]:
        out: dict[tuple[str, ...], Mapping[str, object]] = {}
        for n, row in enumerate(rows, 1):
            k = _row_key(row, key)
            if k in out:
                raise ValidationError(f"eval compare: {which} has two items with {dict(zip(key, k, strict=True))} "
                                      f"(item {n}); pass --key with the fields that identify an item")
            out[k] = row
        return out

    a, b = index(rows_a, "A"), index(rows_b, "B")
    shared = [k for k in a if k in b]
    if not shared:
        raise ValidationError(f"eval compare: no item is in both files (paired by {list(key)}); compare two "
                              "--per-item files of the same data")
    names = list(metrics) if metrics else list(dict.fromkeys(
        m for k in shared for m, v in a[k].items() if m not in key and _numeric(v) and _numeric(b[k].get(m))))
    results, skipped = [], []
    for m in names:
        pairs = [(a[k].get(m), b[k].get(m)) for k in shared]
        bad = [k for k, (x, y) in zip(shared, pairs, strict=True) if not (_numeric(x) and _numeric(y))]
        if bad:
            if metrics:
                raise ValidationError(f"eval compare: metric {m!r} is not a number in every paired item "
                                      f"({len(bad)} of {len(shared)}, first {dict(zip(key, bad[0], strict=True))})")
            # said, not dropped in silence: a metric that is missing or not a number in some items
            skipped.append({"metric": m, "items_not_numeric": len(bad), "first": dict(zip(key, bad[0], strict=True))})
            continue
        results.append(paired_difference([float(x) for x, _ in pairs], [float(y) for _, y in pairs], m,  # type: ignore[arg-type]
                                         resamples=resamples, seed=seed).to_dict())
    return {"paired_by": list(key), "items_a": len(a), "items_b": len(b), "paired": len(shared),
            "resamples": resamples, "seed": seed, "metrics": results, **({"skipped": skipped} if skipped else {})}
