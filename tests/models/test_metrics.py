"""The one metrics module (models/metrics.py) that every evaluation uses."""

from __future__ import annotations

import pytest
from searchsmith.models.metrics import mrr_at_k, percentiles, recall_at_k, roc_auc, set_prf


def test_set_prf_counts_ids_once_and_is_zero_where_undefined() -> None:
    assert set_prf(["a", "b", "b"], ["b", "c"]) == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    assert set_prf([], ["a"]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert set_prf(["a"], []) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_ranking_metrics_on_a_known_ranking() -> None:
    labels = [0.0, 1.0, 0.0, 1.0]
    assert mrr_at_k(labels, 10) == 0.5 and mrr_at_k(labels, 1) == 0.0
    assert recall_at_k(labels, 2) == 0.5 and recall_at_k(labels, 4) == 1.0
    assert recall_at_k(labels, 4, n_relevant=4) == 0.5  # gold items the ranking never saw still count
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)


def test_percentiles_interpolate_and_refuse_no_samples() -> None:
    got = percentiles([0.001, 0.002, 0.003, 0.004])
    assert got["p50_ms"] == pytest.approx(2.5) and got["n"] == 4 and got["mean_ms"] == pytest.approx(2.5)
    assert percentiles([0.003, 0.001, 0.002])["p50_ms"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no samples"):
        percentiles([])


def test_route_metrics_read_the_shared_ranking_metrics() -> None:
    from searchsmith.serving.evaluate import route_metrics

    assert route_metrics(["news", "faq", "code"], ["faq", "wiki"], 2) == {"recall@1": 0.0, "recall@2": 0.5,
                                                                         "mrr": 0.5}
    assert route_metrics(["faq"], ["faq"], 3) == {"recall@1": 1.0, "recall@3": 1.0, "mrr": 1.0}
