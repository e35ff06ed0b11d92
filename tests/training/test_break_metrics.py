"""Break's QDMR metrics as the official scorer computes them (training/break_metrics.py), on
hand-worked examples, and their place in ``searchsmith eval decompose`` (issue 17, item 2)."""

from __future__ import annotations

import itertools
import json
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.qdg import QDG
from searchsmith.training import evaluate as ev
from searchsmith.training.break_metrics import (
    break_exact_match,
    break_ged,
    break_normalized_em,
    break_sari,
    break_scores,
    break_string,
    lemma,
    match_ratio,
    parse_break_string,
    step_match_score,
    validate_steps,
)

QUESTION = "What is the most common language in the country where Jamaican English is spoken?"
GOLD = ["the country where Jamaican English is spoken", "what is the most common language in #1"]


# ----------------------------------------------------------------------------- input


def test_break_string_is_format_qdmr_then_to_string() -> None:
    assert break_string(["return the  country", "what is in #1"]) == "the country @@SEP@@ what is in @@1@@"
    assert parse_break_string("return the  country ;return what is in  #1") == ["the country", "what is in #1"]
    # a title's "# 1" (with a space) is text for Break's format_qdmr, not a reference
    assert break_string(["the actor who portrayed Computer Geek # 1"]).endswith("Geek # 1")


@pytest.mark.parametrize(("text", "message"), [
    ("", r"decomposition: empty decomposition \(no steps\)"),
    ("   ", r"decomposition: empty decomposition"),
    ("return a ;;return b", r"decomposition step 2: empty step"),
    ("return a ;return #1 b ;", r"decomposition step 3: empty step"),
    ("return a ;return #3", r"decomposition step 2: reference #3 .* points to a missing step"),
    ("return #1 b", r"decomposition step 1: reference #1 .* points to itself"),
    ("return #2 ;return b", r"decomposition step 1: reference #2 .* points to a later step"),
    ("return a ;return #0", r"decomposition step 2: reference #0 .* points to a missing step"),
])
def test_malformed_break_strings_are_refused_naming_the_field_and_step(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_break_string(text)


def test_bad_step_lists_are_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"gold: empty decomposition"):
        break_sari(QUESTION, GOLD, [])
    with pytest.raises(ValidationError, match=r"pred: empty decomposition"):
        break_ged([], GOLD)
    with pytest.raises(ValidationError, match=r"pred: expected a list of step strings, got str"):
        break_exact_match("return a ;return #1", GOLD)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"gold step 2: expected a string, got int"):
        break_normalized_em(GOLD, ["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match=r"gold: 1 dependency lists for 2 steps"):
        validate_steps(GOLD, "gold", [[]])
    with pytest.raises(ValidationError, match=r"gold step 2: reference #2 .* points to itself"):
        validate_steps(GOLD, "gold", [[], [2]])
    with pytest.raises(ValidationError, match=r"item 7 pred step 1: empty step"):
        break_scores(QUESTION, ["return "], GOLD, field="item 7")


# ----------------------------------------------------------------------------- SARI


def test_sari_of_identical_decompositions_is_1() -> None:
    assert break_sari(QUESTION, GOLD, GOLD) == pytest.approx(1.0)
    # "return", spacing: the same flat string, so the same score
    assert break_sari(QUESTION, ["return the country where  Jamaican English is spoken", GOLD[1]], GOLD) == 1.0


def test_sari_of_fully_different_decompositions() -> None:
    # The gold keeps the whole question, the prediction shares nothing with either: for every n,
    # keep F1 0 (recall 0), delete precision 0 (deletes what the gold keeps), add F1 0 -> 0.
    assert break_sari("a b c d", ["e f g h"], ["a b c d"]) == 0.0
    # The prediction copies the question, the gold shares nothing with it: keep 0, add 0, and
    # delete 1 (nothing deleted: tensor2tensor scores an empty selection's precision 1) -> 1/3.
    assert break_sari("a b c d", ["a b c d"], ["e f g h"]) == pytest.approx(1 / 3)


def test_sari_on_a_hand_worked_qdmr() -> None:
    # Source "Who founded Lumen?" -> [Who, founded, Lumen?] (Break splits on spaces and is
    # case-sensitive, so neither "Who" nor "Lumen?" is in the steps);
    # target [Lumen, @@SEP@@, who, founded, @@1@@], prediction [Lumen, @@SEP@@, who, created, @@1@@].
    # n=1: keep: S&P empty (precision 1), S&T = {founded} not kept (recall 0) -> F1 0;
    #      delete: S-P = {Who, founded, Lumen?}, S-T = {Who, Lumen?} -> precision 2/3;
    #      add: P-S = 5 unigrams, 4 of them in T-S (4) -> P 4/5, R 1 -> F1 8/9.
    # n=2: keep 1 (nothing to keep, nothing kept); delete 2/2 = 1; add: 2 of 4 bigrams right,
    #      of 4 wanted -> F1 1/2.
    # n=3: keep 1; delete 1/1 = 1; add: 1 of 3 trigrams right of 3 -> F1 1/3.
    # n=4: the source has no 4-gram: keep 1, delete 1 (empty selection); add 0 of 2 -> 0.
    # keep (0+1+1+1)/4 = 3/4, delete (2/3+1+1+1)/4 = 11/12, add (8/9+1/2+1/3+0)/4 = 31/72;
    # SARI = (54/72 + 66/72 + 31/72) / 3 = 151/216.
    got = break_sari("Who founded Lumen?", ["Lumen", "who created #1"], ["Lumen", "who founded #1"])
    assert got == pytest.approx(151 / 216)


# ----------------------------------------------------------------------------- exact match


def test_exact_match_ignores_case_return_and_spacing_only() -> None:
    assert break_exact_match(GOLD, GOLD) == 1.0
    assert break_exact_match(["return The country where Jamaican  English is spoken", GOLD[1].upper()], GOLD) == 1.0
    assert break_exact_match(["the country where Jamaican English is spoken.", GOLD[1]], GOLD) == 0.0
    assert break_exact_match(["Jamaica"], GOLD) == 0.0


# ----------------------------------------------------------------------------- normalized EM


def test_normalized_em_identical_and_fully_different() -> None:
    assert break_normalized_em(GOLD, GOLD) == 1.0
    assert break_normalized_em(["who is it"], GOLD) == 0.0


def test_normalized_em_forgives_lemmas_case_articles_punctuation_and_step_numbering() -> None:
    assert break_normalized_em(["return The bands", "Number of #1."], ["band", "number of #1"]) == 1.0
    assert break_normalized_em(
        ["when was Varok founded", "when was Lumen founded", "which is older of #2 and #1"],
        ["when was Lumen founded", "when was Varok founded", "which is older of #1 and #2"]) == 1.0
    # the answer step refers to the other order: a different question
    assert break_normalized_em(
        ["when was Lumen founded", "when was Varok founded", "which is older of #2 and #1"],
        ["when was Lumen founded", "when was Varok founded", "which is older of #1 and #2"]) == 0.0


def test_normalized_em_does_not_split_steps_as_breaks_rules_do() -> None:
    # Break's normal form splits "red cubes" into "cubes ; #1 that are red": equal there, not here
    assert break_normalized_em(["red cubes"], ["cubes", "#1 that are red"]) == 0.0


def test_lemma_rules() -> None:
    assert [lemma(w) for w in ["Countries", "classes", "matches", "flights", "was", "has", "women"]] == \
        ["country", "class", "match", "flight", "be", "have", "woman"]
    assert [lemma(w) for w in ["bus", "status", "this", "always", "news", "its", "founded"]] == \
        ["bus", "status", "this", "always", "news", "its", "founded"]


# ----------------------------------------------------------------------------- GED


def test_match_ratio_is_the_edit_distance_packages_not_difflibs() -> None:
    # lowest-cost alignment, ties resolved toward substitution: "a b" -> "b c" substitutes twice
    # (cost 2, 0 matches) rather than delete a, keep b, insert c (also cost 2): ratio 0, where
    # difflib's longest-block ratio would be 2 * 1 / 4 = 0.5
    assert match_ratio(["a", "b"], ["b", "c"]) == 0.0
    # "a b c d" -> "b c d e": delete a, keep b c d, insert e (cost 2, 3 matches) -> 6 / 8
    assert match_ratio("a b c d".split(), "b c d e".split()) == pytest.approx(0.75)
    assert match_ratio([], []) == 1.0 and match_ratio(["a"], []) == 0.0
    # lemmas and references: "the bands of #1" vs "the band of #1" tokenise to the same lemmas
    assert step_match_score("the bands of #1", "The band of #1") == 1.0


def test_ged_of_identical_and_fully_different_decompositions() -> None:
    assert break_ged(GOLD, GOLD) == (0.0, True)
    # one node each, no word in common: substituting costs 1 (< delete + insert = 2), over 1
    assert break_ged(["alpha"], ["beta gamma"]) == (pytest.approx(1.0), True)


def test_ged_on_hand_worked_edits() -> None:
    # drop step 2 and its edge: 2 edits over max(1 node, 2 nodes + 1 edge) = 3
    assert break_ged(GOLD[:1], GOLD) == (pytest.approx(2 / 3), True)
    # one word changed in step 2: tokens [who, created, @@1@@] vs [who, founded, @@1@@]: the
    # alignment keeps 2 of 3, ratio 2 * 2 / 6, substitution cost 1 - 2/3 = 1/3, over 2 nodes + 1 edge
    got = break_ged(["the band Lumen", "who created #1"], ["the band Lumen", "who founded #1"])
    assert got == (pytest.approx(1 / 9), True)
    # Break's node labels carry the reference numbers: renumbering independent steps costs
    # "#2 and #1" vs "#1 and #2" (tokens [which, be, older, of, @@2@@, and, @@1@@]: 5 of 7 kept)
    two = ["when was Lumen founded", "when was Varok founded", "which is older of #1 and #2"]
    renumbered = [two[1], two[0], "which is older of #2 and #1"]
    assert break_ged(renumbered, two) == (pytest.approx((1 - 10 / 14) / 5), True)


def _brute_force_ged(pred: list[str], gold: list[str]) -> float:
    """Every node mapping (each pred step to a gold step or deleted), edges by reference: the
    slow twin of networkx's search, normalised as Break does."""
    import re

    def edges(steps: list[str]) -> set[tuple[int, int]]:
        return {(i, int(k) - 1) for i, s in enumerate(steps) for k in re.findall(r"#(\d+)", s)}

    e1, e2 = edges(pred), edges(gold)
    best = float("inf")
    targets = [*range(len(gold)), *[None] * len(pred)]
    for mapping in set(itertools.permutations(targets, len(pred))):
        cost = sum(1.0 if m is None else 1 - step_match_score(pred[i], gold[m]) for i, m in enumerate(mapping))
        cost += len(gold) - sum(m is not None for m in mapping)
        kept = {(mapping[u], mapping[v]) for u, v in e1 if mapping[u] is not None and mapping[v] is not None}
        cost += sum((mapping[u], mapping[v]) not in e2 for u, v in e1) + len(e2 - kept)
        best = min(best, cost)
    return best / max(len(pred) + len(e1), len(gold) + len(e2))


@pytest.mark.parametrize(("pred", "gold"), [
    (["people in Cahul", "number of #1", "people in Soroca"], ["people in Cahul", "people in Soroca", "number of #1"]),
    (["the band", "who founded #1", "when was #2 born"], ["the band Lumen", "its founder"]),
    (["x", "y", "z of #1 and #2"], ["z", "x of #1", "y of #2"]),
])
def test_ged_equals_a_brute_force_search(pred: list[str], gold: list[str]) -> None:
    got, exact = break_ged(pred, gold)
    assert exact and got == pytest.approx(_brute_force_ged(pred, gold))


def test_ged_past_its_budget_keeps_an_upper_bound() -> None:
    pred = ["a b", "c of #1", "d of #2", "e of #1 and #3", "f"]
    gold = ["f g", "e of #1", "c of #2", "a of #2 and #3", "b d"]
    exact_value, exact = break_ged(pred, gold)
    assert exact
    bound, finished = break_ged(pred, gold, timeout_s=1e-9)
    assert not finished and bound >= exact_value - 1e-9


def test_break_scores_bundle_the_four() -> None:
    scores = break_scores(QUESTION, GOLD, GOLD)
    assert scores.as_dict("break_") == {"break_sari": 1.0, "break_exact_match": 1.0,
                                        "break_normalized_em": 1.0, "break_ged": 0.0, "break_ged_exact": 1.0}


# ----------------------------------------------------------------------------- eval decompose

CHAIN = {"query": "Who founded the band Lumen?", "type": "chain", "nodes": [
    {"id": "1", "text": "the band Lumen", "depends_on": []},
    {"id": "2", "text": "who founded #1", "depends_on": ["1"]}]}
TITLE = {"query": "In what year was the actor who portrayed Computer Geek #1 drafted?", "type": "chain", "nodes": [
    {"id": "1", "text": "the actor who portrayed Computer Geek 1", "depends_on": []},
    {"id": "2", "text": "year that #1 was drafted", "depends_on": ["1"]}]}


class GoldOrQuestion:
    """Decomposes the questions in ``gold`` exactly and keeps the others as one node."""

    def __init__(self, gold: dict[str, dict[str, Any]]) -> None:
        self.gold = gold

    def decompose_batch(self, questions: list[str], max_nodes: int | None = None) -> list[tuple[QDG, bool, str]]:
        out = []
        for q in questions:
            g = self.gold.get(q) or {"type": "terminal", "nodes": [{"id": "1", "text": q.replace("#", ""),
                                                                      "depends_on": []}]}
            out.append((QDG.from_json({"type": g["type"], "nodes": g["nodes"]}), True, ""))
        return out

    def rewrite_batch(self, items: list[tuple[list[str], str]]) -> list[str]:
        return [q for _, q in items]


def test_eval_decompose_reports_breaks_metrics_for_the_model_and_the_one_node_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [CHAIN, TITLE]), encoding="utf-8")
    model = GoldOrQuestion({CHAIN["query"]: CHAIN})
    monkeypatch.setattr(ev, "load_eval_model", lambda task, args, required=True: ev.EvalModel(model, task, "fake"))
    out = ev.eval_decompose(Namespace(data=str(data), limit=0, per_item=None))
    # item 1 exact; item 2 the question as one node (a "#1" in its title is text, not a reference)
    chain = ["the band Lumen", "who founded #1"]
    title = ["the actor who portrayed Computer Geek 1", "year that #1 was drafted"]
    one_chain = break_sari(CHAIN["query"], [CHAIN["query"]], chain)
    one_title = break_sari(TITLE["query"], [TITLE["query"].replace("#", "")], title)
    assert out["decompose_break_sari"] == pytest.approx((1.0 + one_title) / 2)
    assert out["decompose_break_sari_one_node"] == pytest.approx((one_chain + one_title) / 2)
    assert out["decompose_break_em"] == 0.5 and out["decompose_break_em_one_node"] == 0.0
    assert out["decompose_break_normalized_em"] == 0.5
    ged_title = break_ged([TITLE["query"].replace("#", "")], title)[0]
    assert out["decompose_break_ged"] == pytest.approx(ged_title / 2)
    assert out["decompose_break_ged_one_node"] > out["decompose_break_ged"]
    assert out["decompose_break_ged_exact"] == 1.0
    # beside the recipe's figures and the earlier approximations, with intervals
    for key in ("decompose_node_f1", "decompose_type_acc", "decompose_sari", "decompose_ged",
                "decompose_break_sari", "decompose_break_ged", "decompose_break_normalized_em"):
        assert key in out and f"{key}_ci95" in out
    assert "decompose_break_*" in out["break_metrics"]


def test_eval_decompose_reports_each_origin_and_breaks_own_questions_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17's Break targets are on Break's questions; a held-out split mixes in MuSiQue's."""
    data = tmp_path / "d.jsonl"
    rows = [{**CHAIN, "origin": "break:HOTPOT"}, {**TITLE, "origin": "break:DROP"},
            {**TITLE, "query": TITLE["query"] + " then", "origin": "musique"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    model = GoldOrQuestion({CHAIN["query"]: CHAIN})
    monkeypatch.setattr(ev, "load_eval_model", lambda task, args, required=True: ev.EvalModel(model, task, "fake"))
    per_item = tmp_path / "p.jsonl"
    out = ev.eval_decompose(Namespace(data=str(data), limit=0, per_item=str(per_item)))
    by = out["by_origin"]
    assert set(by) == {"break", "break:HOTPOT", "break:DROP", "musique"}
    assert [by[k]["n"] for k in ("break", "break:HOTPOT", "break:DROP", "musique")] == [2, 1, 1, 1]
    assert by["break:HOTPOT"]["decompose_break_sari"] == 1.0 and by["break:HOTPOT"]["decompose_break_ged"] == 0.0
    items = [json.loads(x) for x in per_item.read_text(encoding="utf-8").splitlines()]
    assert by["break"]["decompose_break_sari"] == pytest.approx(
        round((items[0]["decompose_break_sari"] + items[1]["decompose_break_sari"]) / 2, 4))
    assert [r["origin"] for r in items] == ["break:HOTPOT", "break:DROP", "musique"]
    # without origins the figures are pooled only, as before
    data.write_text("".join(json.dumps(r) + "\n" for r in [CHAIN, TITLE]), encoding="utf-8")
    assert "by_origin" not in ev.eval_decompose(Namespace(data=str(data), limit=0, per_item=None))


def test_a_bad_origin_is_refused_naming_the_line(tmp_path: Path) -> None:
    from searchsmith.training.decompose_data import read_decomposition_eval

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(CHAIN) + "\n" + json.dumps({**CHAIN, "origin": 3}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"d.jsonl:2: 'origin' must be a non-empty string"):
        read_decomposition_eval(data)


SHARED_BREAK = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "break_qdmr" / "dev.jsonl"


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED_BREAK.is_file(), reason="../shared/data is absent")
def test_breaks_own_strings_parse_to_their_steps_and_score_perfectly_against_themselves() -> None:
    rows = [json.loads(x) for x in SHARED_BREAK.read_text(encoding="utf-8").splitlines()]
    for r in rows:  # every gold string of the open part is well formed
        assert parse_break_string(r["decomposition"], r["question_id"]) == [" ".join(s.split()) for s in r["steps"]]
    for r in rows[:30]:
        steps = r["steps"]
        scores = break_scores(r["question_text"], steps, steps, r["step_dependencies"], r["step_dependencies"])
        assert (scores.sari, scores.exact_match, scores.normalized_em, scores.ged) == (1.0, 1.0, 1.0, 0.0)
