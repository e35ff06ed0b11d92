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


# --------------------------------------------------------------------------- Break's QDMR metrics

GOLD = ["the country where Jamaican English is spoken", "what is the most common language in #1"]
QUESTION = "What is the most common language in the country where Jamaican English is spoken?"


def test_identical_qdmr_scores_sari_1_em_1_ged_0() -> None:
    from searchsmith.models.metrics import qdmr_exact_match, qdmr_ged, qdmr_normalized_em, qdmr_sari

    assert qdmr_sari(QUESTION, GOLD, GOLD) == pytest.approx(1.0)
    assert qdmr_exact_match(GOLD, GOLD) == 1.0 and qdmr_normalized_em(GOLD, GOLD) == 1.0
    assert qdmr_ged(GOLD, GOLD) == (0.0, True)


def test_sari_on_a_hand_computed_unigram_case() -> None:
    from searchsmith.models.metrics import sari

    # source {a, b}, prediction {a, c}, target {a, d}: keep a (F1 1), delete b (precision 1),
    # add c where d was wanted (F1 0) -> (1 + 0 + 1) / 3
    got = sari(["a", "b"], ["a", "c"], ["a", "d"], max_gram=1)
    assert got == pytest.approx({"sari": 2 / 3, "keep": 1.0, "add": 0.0, "delete": 1.0})
    # bigrams too: (a b) is deleted by both, (a c) added where (a d) was wanted
    got = sari(["a", "b"], ["a", "c"], ["a", "d"], max_gram=2)
    assert got["sari"] == pytest.approx(2 / 3)
    # a prediction that copies the source keeps everything and adds nothing: keep 1, delete 1
    # (nothing deleted: precision of an empty selection is 1), add 0 (d was wanted)
    assert sari(["a", "b"], ["a", "b"], ["a", "d"], max_gram=1)["add"] == 0.0


def test_qdmr_tokens_write_references_and_separators_as_break_does() -> None:
    from searchsmith.models.metrics import qdmr_tokens

    assert qdmr_tokens(["Lumen", "when was #1 founded"]) == ["lumen", "@@sep@@", "when", "was", "@@1@@", "founded"]


def test_normalized_em_forgives_case_articles_punctuation_and_independent_step_order() -> None:
    from searchsmith.models.metrics import qdmr_exact_match, qdmr_normalized_em

    pred = ["return when was Varok founded?", "When was the Lumen founded", "which is older of #2 and #1"]
    gold = ["when was Lumen founded", "when was Varok founded", "which is older of #1 and #2"]
    assert qdmr_exact_match(pred, gold) == 0.0
    assert qdmr_normalized_em(pred, gold) == 1.0
    # the answer step differs (#1 and #2 swapped in meaning): not equal
    assert qdmr_normalized_em(pred[:2] + ["which is older of #1 and #2"], gold) == 0.0
    # a dependency given only in deps (not in the text) is part of the normal form
    assert qdmr_normalized_em(["x", "y"], ["x", "y"], [[], [1]], [[], []]) == 0.0


def test_ged_of_a_known_edit() -> None:
    from searchsmith.models.metrics import qdmr_ged, step_similarity

    # deleting step 2 and its edge: 2 edits over max(1 node, 2 nodes + 1 edge) = 3
    assert qdmr_ged(GOLD[:1], GOLD) == (pytest.approx(2 / 3), True)
    # the question as one node: substitute it for step 1, insert step 2 and the edge
    sub = 1 - step_similarity(QUESTION, GOLD[0])
    assert qdmr_ged([QUESTION], GOLD)[0] == pytest.approx((sub + 2) / 3)
    # renumbering independent steps costs nothing
    two = ["when was Lumen founded", "when was Varok founded", "which is older of #1 and #2"]
    assert qdmr_ged([two[1], two[0], "which is older of #2 and #1"], two)[0] == pytest.approx(0.0)
    assert step_similarity("the band #1", "The band #2.") == 1.0
