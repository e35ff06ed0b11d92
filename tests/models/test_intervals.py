"""The ``*_ci95`` entries every ``searchsmith eval`` task attaches (models/intervals.py)."""

from __future__ import annotations

import numpy as np
import pytest
from searchsmith.models.intervals import attach_intervals, prf, ratio, with_bootstrap
from searchsmith.models.stats import bootstrap_ci


def test_means_get_the_bootstrap_of_the_mean_next_to_them() -> None:
    rows = [{"id": i, "hit": float(i % 2), "f1": 0.5, "count": 3} for i in range(20)]
    metrics = {"task": "x", "hit": 0.5, "f1": 0.5, "n": 20}
    out = attach_intervals(metrics, rows)
    assert list(out) == ["task", "hit", "hit_ci95", "f1", "f1_ci95", "n"]  # "count" is not reported
    assert out["f1_ci95"] == [0.5, 0.5]
    lo, hi = bootstrap_ci([r["hit"] for r in rows])
    assert out["hit_ci95"] == [round(lo, 4), round(hi, 4)] and lo < 0.5 < hi
    assert with_bootstrap(metrics, rows)["bootstrap"] == {"resamples": 2000, "seed": 0}


def test_pooled_figures_are_recomputed_on_each_resample_of_the_items() -> None:
    # items of very different sizes: the pooled ratio (3 / 12) is not the mean of the items' ratios
    num, den = [1, 0, 2], [1, 1, 10]
    rows = [{"acc": n / d} for n, d in zip(num, den, strict=True)]
    out = attach_intervals({"acc": 0.25}, rows, pooled={"acc": ratio(num, den)})
    expected = bootstrap_ci(np.arange(3), statistic=lambda idx: float(
        np.take(num, idx.astype(int)).sum() / np.take(den, idx.astype(int)).sum()))
    assert out["acc_ci95"] == [round(expected[0], 4), round(expected[1], 4)]
    assert ratio([0, 0], [0, 0])(np.arange(2)) == 0.0  # undefined -> 0.0, as set_prf reports it


def test_prf_from_counts_matches_micro_precision_recall_f1() -> None:
    stats = prf(tp=[1, 2], n_pred=[2, 2], n_gold=[1, 5])
    everything = np.arange(2)
    assert stats["precision"](everything) == pytest.approx(3 / 4)
    assert stats["recall"](everything) == pytest.approx(3 / 6)
    assert stats["f1"](everything) == pytest.approx(2 * 0.75 * 0.5 / 1.25)


def test_an_undefined_or_missing_figure_gets_no_interval() -> None:
    rows = [{"x": 1.0}, {"x": 0.0}]
    out = attach_intervals({"auc": None, "y": 1.0}, rows, pooled={"auc": lambda idx: None, "y": lambda idx: None})
    assert out == {"auc": None, "y": 1.0, "y_ci95": None}
    assert attach_intervals({"x": 0.5}, []) == {"x": 0.5}
