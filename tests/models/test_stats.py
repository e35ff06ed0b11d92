"""Bootstrap intervals and paired tests (models/stats.py) against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.models.stats import (
    bootstrap_ci,
    compare_rows,
    paired_difference,
    permutation_p,
    with_intervals,
)


def test_bootstrap_interval_of_a_mean_matches_the_normal_theory_width() -> None:
    x = np.random.default_rng(1).normal(0.0, 1.0, 400)
    lo, hi = bootstrap_ci(x, resamples=4000, seed=3)
    # standard error 1/sqrt(400) = 0.05: a 95 % interval is about +-0.098 around the mean
    assert lo < x.mean() < hi
    assert (hi - lo) == pytest.approx(2 * 1.96 * x.std() / 20, rel=0.1)
    assert bootstrap_ci(x, resamples=4000, seed=3) == (lo, hi)  # seeded: the same interval again


def test_bootstrap_edge_cases_and_bad_settings() -> None:
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    with pytest.raises(ValidationError, match="resamples: expected an int >= 100"):
        bootstrap_ci([1.0, 2.0], resamples=10)
    # a pooled statistic recomputed on each resample of item indices (here: a max)
    lo, hi = bootstrap_ci(np.arange(5.0), lambda a: float(a.max()))
    assert 2.0 <= lo <= hi == 4.0


def test_exact_permutation_p_values_by_hand() -> None:
    # three equal positive differences: only the all-plus and all-minus of 8 assignments are as extreme
    assert permutation_p([1.0, 1.0, 1.0]) == pytest.approx(2 / 8)
    # zeros carry no sign information and are dropped
    assert permutation_p([0.0, 1.0, 1.0, 0.0]) == pytest.approx(2 / 4)
    # (1, 2, -1): |sum| = 2; of the 8 sign assignments, those whose |sum| >= 2 count
    d = [1.0, 2.0, -1.0]
    sums = [abs(a * 1 + b * 2 + c * -1) for a in (1, -1) for b in (1, -1) for c in (1, -1)]
    assert permutation_p(d) == pytest.approx(sum(s >= 2 for s in sums) / 8)
    assert permutation_p([]) == 1.0


def test_identical_runs_give_an_interval_around_zero_and_a_shift_is_detected() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 60)
    same = paired_difference(a, a.copy(), "f1")
    assert same.diff == 0.0 and same.ci95 == (0.0, 0.0) and same.p_value == 1.0
    noisy = paired_difference(a, a + rng.normal(0, 0.05, 60), "f1")
    assert noisy.ci95[0] < 0.0 < noisy.ci95[1] and noisy.p_value > 0.05
    shifted = paired_difference(a, a + 0.1 + rng.normal(0, 0.02, 60), "f1")
    assert shifted.ci95[0] > 0.05 and shifted.p_value < 0.001
    assert shifted.to_dict()["significant"] is True
    with pytest.raises(ValidationError, match="pair the same items"):
        paired_difference([1.0], [1.0, 2.0])


def test_with_intervals_only_for_metrics_reported_as_per_item_means() -> None:
    rows = [{"id": i, "ndcg@10": v, "note": "x"} for i, v in enumerate([0.2, 0.4, 0.6, 0.8])]
    got = with_intervals({"ndcg@10": 0.5, "queries": 4}, rows, resamples=500)
    assert set(got) == {"ndcg@10_ci95"} and got["ndcg@10_ci95"][0] < 0.5 < got["ndcg@10_ci95"][1]
    assert with_intervals({"rerank/ndcg@10": 0.5}, rows, prefix="rerank/")["rerank/ndcg@10_ci95"]
    assert with_intervals({"ndcg@10": 0.5}, []) == {}


def test_compare_rows_pairs_by_key_and_refuses_ambiguous_files() -> None:
    a = [{"id": i, "mode": "serial", "recall@1": float(i % 2)} for i in range(20)]
    b = [{"id": i, "mode": "serial", "recall@1": 1.0} for i in range(20)] + [{"id": 99, "mode": "serial",
                                                                              "recall@1": 0.0}]
    out = compare_rows(a, b, ["id", "mode"])
    assert out["paired"] == 20 and out["items_b"] == 21
    (m,) = out["metrics"]
    assert m["metric"] == "recall@1" and m["diff"] == 0.5 and m["p_value"] < 0.01
    with pytest.raises(ValidationError, match="two items with"):
        compare_rows(a + a[:1], b, ["id", "mode"])
    with pytest.raises(ValidationError, match="no item is in both"):
        compare_rows(a, [{"id": "x", "mode": "y", "recall@1": 1.0}], ["id", "mode"])


def test_direction_needs_the_interval_and_the_permutation_test_to_agree() -> None:
    from searchsmith.models.stats import direction, paired_difference

    # 4 of 8 items better by 1, the rest tied: the percentile bootstrap interval excludes 0, but
    # the exact sign-flip p-value is 2/16 = 0.125 (all four up, or all four down): inside the noise
    c = paired_difference([0.0] * 8, [1.0, 1.0, 1.0, 1.0, 0, 0, 0, 0], "m").to_dict()
    assert c["diff_ci95"][0] > 0 and c["p_value"] > 0.05
    assert direction(c["diff_ci95"], c["p_value"]) == 0
    # a clear shift on 40 items, up and down
    up = paired_difference([0.0] * 40, [1.0] * 30 + [0.0] * 10, "m").to_dict()
    assert direction(up["diff_ci95"], up["p_value"]) == 1
    down = paired_difference([1.0] * 40, [0.0] * 30 + [1.0] * 10, "m").to_dict()
    assert direction(down["diff_ci95"], down["p_value"]) == -1
    assert direction([-0.1, 0.2], 0.001) == 0  # an interval holding 0 is never a direction


def test_clustered_figures_resample_whole_clusters() -> None:
    from searchsmith.models.stats import clustered_figures

    values = np.asarray([1.0, 1.0, 0.0, 3.0, 3.0, 3.0])
    clusters = [[0, 1], [2], [3, 4, 5]]
    seen: list[int] = []

    def diff(idx: np.ndarray) -> float:
        seen.append(len(idx))
        return float(values[idx].mean())

    out = clustered_figures("m", clusters, diff, resamples=200)
    assert out["m_diff"] == pytest.approx(11 / 6) and out["m_n"] == 3
    # every resample is a union of whole clusters: sizes are sums of 1, 2 and 3 over 3 draws
    assert all(3 <= n <= 9 for n in seen[1:])
    assert out["m_lo"] <= out["m_diff"] <= out["m_hi"]
    # a constant positive difference is beyond the noise; an undefined one gives nothing
    pos = clustered_figures("m", [[i] for i in range(30)], lambda idx: 0.1, resamples=200)
    assert pos["m_direction"] == 1 and pos["m_p"] < 0.05 and pos["m_lo"] == pos["m_hi"] == pytest.approx(0.1)
    assert clustered_figures("m", [[0], [1]], lambda idx: None, resamples=200) == {}
    assert clustered_figures("m", [], lambda idx: 1.0) == {}
    with pytest.raises(ValidationError, match="resamples"):
        clustered_figures("m", [[0]], lambda idx: 1.0, resamples=5)
