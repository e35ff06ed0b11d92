"""The copy-based decomposition form: word depths <-> graphs of nested question spans."""

from __future__ import annotations

import itertools
import random

import pytest
from searchsmith.models.qdg import QDG, validate
from searchsmith.models.qdg_spans import depths_from_graph, graph_from_depths, question_words

Q_CHAIN = 'Where was the home of the author of "Leviathan (Audio Classics Series)?'


def _texts(g: QDG) -> list[str]:
    return [n.text for n in g.nodes]


def test_question_words_splits_words_and_single_punctuation() -> None:
    q = "Who's older, A or B?"
    assert [q[a:b] for a, b in question_words(q)] == ["Who", "'", "s", "older", ",", "A", "or", "B", "?"]
    assert question_words("  ") == []


def test_nested_depths_read_back_as_a_chain() -> None:
    words = [Q_CHAIN[a:b] for a, b in question_words(Q_CHAIN)]
    assert words[:5] == ["Where", "was", "the", "home", "of"]
    depths = [0, 0, 1, 1, 1] + [2] * (len(words) - 6) + [0]
    g = graph_from_depths(Q_CHAIN, depths)
    assert g.type == "chain"
    assert _texts(g) == ['the author of "Leviathan (Audio Classics Series)', "the home of #1", "Where was #2?"]
    assert [list(n.depends_on) for n in g.nodes] == [[], ["1"], ["2"]]
    assert validate(g) == []


def test_sibling_spans_make_a_split_and_the_last_step_compares_them() -> None:
    q = "Which is farther west, Sheridan County or Chandra Taal?"
    #    Which is farther west ,  Sheridan County or Chandra Taal ?
    g = graph_from_depths(q, [0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0])
    assert g.type == "split"
    assert _texts(g) == ["Sheridan County", "Chandra Taal", "Which is farther west, #1 or #2?"]
    assert [list(n.depends_on) for n in g.nodes] == [[], [], ["1", "2"]]


def test_degenerate_depths() -> None:
    q = "who founded lumen?"
    assert graph_from_depths(q, [0, 0, 0, 0]).type == "terminal"
    # everything one level down is still the question as one step
    assert graph_from_depths(q, [1, 1, 1, 1]).to_json()["nodes"] == [{"id": "1", "text": "who founded lumen?",
                                                                      "depends_on": []}]
    # a child made of punctuation only is no step
    assert graph_from_depths(q, [0, 0, 0, 1]).type == "terminal"
    # a jump of two levels is one nested step, not an empty one
    assert _texts(graph_from_depths("when was the founder of lumen born", [0, 0, 2, 2, 2, 2, 0])) == [
        "the founder of lumen", "when was #1 born"]
    # fewer depths than words: the rest is depth 0; more are ignored
    assert graph_from_depths(q, [0]).type == "terminal"
    assert _texts(graph_from_depths("when was lumen born", [0, 0, 1, 0, 5, 5])) == ["lumen", "when was #1 born"]
    # over max_nodes: the question whole
    assert graph_from_depths(Q_CHAIN, [0, 0, 1, 1, 1] + [2] * 10 + [0], max_nodes=2).type == "terminal"
    assert graph_from_depths("", []).type == "terminal"


def test_a_hash_number_in_the_question_is_text_not_a_reference() -> None:
    g = graph_from_depths("who sang Computer Geek #1 first", [0, 0, 1, 1, 1, 1, 0])
    assert _texts(g) == ["Computer Geek 1", "who sang #1 first"]
    assert validate(g) == []


def test_two_children_without_own_words_are_joined() -> None:
    g = graph_from_depths("Paris Rome", [1, 2])
    assert _texts(g) == ["Paris", "Rome", "#1 and #2"] or _texts(g) == ["Rome", "Paris #1"]


@pytest.mark.parametrize("seed", range(3))
def test_every_depth_sequence_gives_a_valid_graph(seed: int) -> None:
    rng = random.Random(seed)
    q = "what is the birthplace of the director of the film that won the award in 1999 ?"
    n = len(question_words(q))
    for _ in range(300):
        g = graph_from_depths(q, [rng.randrange(4) for _ in range(n)], max_nodes=8)
        assert validate(g, max_nodes=8) == [], g


def test_gold_graph_aligns_to_nested_spans_and_reads_back() -> None:
    gold = QDG.from_json({"type": "chain", "nodes": [
        {"id": "1", "text": "the author of Leviathan (Audio Classics Series)", "depends_on": []},
        {"id": "2", "text": "the home of #1", "depends_on": ["1"]},
        {"id": "3", "text": "where was #2", "depends_on": ["2"]}]})
    depths = depths_from_graph(Q_CHAIN, gold, max_depth=4)
    # Where was the home of the author of " Leviathan ( Audio Classics Series ) ?
    assert depths == [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0]
    assert _texts(graph_from_depths(Q_CHAIN, depths))[:2] == [
        'the author of "Leviathan (Audio Classics Series)', "the home of #1"]
    # max_depth caps the labels
    assert max(depths_from_graph(Q_CHAIN, gold, max_depth=2)) == 1


def test_split_gold_aligns_to_sibling_spans() -> None:
    q = "Which is farther west, Sheridan County or Chandra Taal?"
    gold = {"type": "split", "nodes": [
        {"id": "1", "text": "where is Sheridan County", "depends_on": []},
        {"id": "2", "text": "where is Chandra Taal", "depends_on": []},
        {"id": "3", "text": "which is farther west of #1, #2", "depends_on": ["1", "2"]}]}
    assert depths_from_graph(q, gold, 4) == [0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0]


def test_graphs_that_are_not_nested_spans_are_refused() -> None:
    q = "how many more yards did Smith gain than Gibson"
    used_twice = {"type": "chain", "nodes": [
        {"id": "1", "text": "yards of Smith", "depends_on": []},
        {"id": "2", "text": "the sum of #1", "depends_on": ["1"]},
        {"id": "3", "text": "the count of #1", "depends_on": ["1"]},
        {"id": "4", "text": "difference of #2 and #3", "depends_on": ["2", "3"]}]}
    assert depths_from_graph(q, used_twice, 4) is None
    no_overlap = {"type": "chain", "nodes": [{"id": "1", "text": "zzz qqq", "depends_on": []},
                                             {"id": "2", "text": "return #1", "depends_on": ["1"]}]}
    assert depths_from_graph(q, no_overlap, 4) is None
    assert depths_from_graph("", no_overlap, 4) is None
    assert depths_from_graph(" ".join(["word"] * 80), no_overlap, 4, max_words=64) is None


def test_alignment_roundtrip_on_every_small_nest() -> None:
    """A graph made from depths aligns back to the same depths (exact copies of spans; a
    question without articles, which the alignment's SQuAD-normalised F1 ignores)."""
    q = "when was founder of company making lumen lamps born"
    n = len(question_words(q))
    seen = 0
    for a, b in itertools.combinations(range(1, n), 2):
        depths = [0] * n
        for i in range(a, b):
            depths[i] = 1
        g = graph_from_depths(q, depths)
        if g.type == "terminal":
            continue
        assert depths_from_graph(q, g, 4) == depths
        seen += 1
    assert seen > 20


def test_drops_leave_words_out_of_their_step_and_keep_the_structure() -> None:
    from searchsmith.models.qdg_spans import drops_from_graph

    q = "How many yards did Brady pass to Moss?"
    gold = {"type": "chain", "nodes": [{"id": "1", "text": "yards Brady passed to Moss", "depends_on": []},
                                       {"id": "2", "text": "number of #1", "depends_on": ["1"]}]}
    depths = depths_from_graph(q, gold, 4)
    drops = drops_from_graph(q, gold)
    words = [q[a:b] for a, b in question_words(q)]
    # the last step writes none of "How many ... ?"; the first has no "did" nor "pass" (it says "passed")
    assert [w for w, x in zip(words, drops, strict=True) if x] == ["How", "many", "did", "pass", "?"]
    # the last step would be "#1" alone, so it keeps its words
    assert _texts(graph_from_depths(q, depths, drops=drops)) == ["yards Brady to Moss", "How many #1?"]
    assert _texts(graph_from_depths(q, depths)) == ["yards did Brady pass to Moss", "How many #1?"]
    # a step whose own words are all dropped keeps them: the structure never changes
    assert _texts(graph_from_depths(q, depths, drops=[True] * len(words))) == _texts(graph_from_depths(q, depths))
    assert drops_from_graph(q, {"type": "terminal", "nodes": [{"id": "1", "text": q, "depends_on": []}]}) == [
        False] * len(words)
    assert drops_from_graph("", gold) is None


def test_a_kept_compound_keeps_its_joiners() -> None:
    q = "What is the default value of snapshot.interval_s in Lumen?"
    words = [q[a:b] for a, b in question_words(q)]
    assert words[6:9] == ["snapshot", ".", "interval_s"]
    depths = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0]
    drops = [True, True, True, False, False, False, False, True, False, False, False, True]
    # the tagger dropped the "." alone: the identifier stays whole, the final "?" still goes
    assert _texts(graph_from_depths(q, depths, drops=drops)) == ["snapshot.interval_s in Lumen", "default value of #1"]
    # a possessive whose "s" is dropped loses its apostrophe with it
    q = "Which file contains the code for Lumen's sharding?"
    drops = [True, False, False, False, False, False, False, True, True, False, True]
    assert _texts(graph_from_depths(q, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0], drops=drops)) == [
        "the code for Lumen sharding", "file contains #1"]


def test_edit_labels_round_trip() -> None:
    from searchsmith.models.qdg_spans import edit_labels, graph_from_labels, split_edit_labels

    depths, drops = [0, 1, 3, 5], [False, True, True, False]
    labels = edit_labels(depths, drops, 4)
    assert labels == [0, 5, 7, 3]
    assert split_edit_labels(labels, 4) == ([0, 1, 3, 3], drops)
    q = "when was lumen born"
    assert graph_from_labels(q, [0, 0, 1, 0], drop_levels=0).to_json() == graph_from_depths(q, [0, 0, 1, 0]).to_json()
    assert _texts(graph_from_labels(q, [4, 0, 1, 0], drop_levels=4)) == ["lumen", "was #1 born"]


def test_add_tags_write_the_words_a_step_adds() -> None:
    from searchsmith.models.qdg_spans import (
        adds_from_graph,
        gold_tags,
        graph_from_labels,
        split_edit_labels,
    )

    q = "How many yards did Brady pass to Moss?"
    gold = {"type": "chain", "nodes": [{"id": "1", "text": "yards Brady passed to Moss", "depends_on": []},
                                       {"id": "2", "text": "number of #1", "depends_on": ["1"]}]}
    words = [q[a:b] for a, b in question_words(q)]
    adds = adds_from_graph(q, gold)
    # "number of" goes in place of the dropped "How"; "passed" in place of the dropped "pass"
    assert {w: x for w, x in zip(words, adds, strict=True) if x} == {"How": "number of", "pass": "passed"}
    labels, adds2 = gold_tags(q, gold, 4)
    assert adds2 == adds
    depths, drops = split_edit_labels(labels, 4)
    # with the gold depths, drops and adds the steps are the gold steps
    assert _texts(graph_from_labels(q, labels, drop_levels=4, adds=adds)) == ["yards Brady passed to Moss",
                                                                              "number of #1"]
    assert _texts(graph_from_depths(q, depths, drops=drops, adds=[""] * len(words))) == ["yards Brady to Moss",
                                                                                          "How many #1?"]
    # on a kept word the phrase comes before it; past the last word nothing is added
    assert _texts(graph_from_depths("when was lumen born", [0, 0, 1, 0], adds=["", "", "the", ""])) == [
        "the lumen", "when was #1 born"]
    assert _texts(graph_from_depths("when was lumen born", [0, 0, 1, 0], adds=["", "", "", "", "x"])) == [
        "lumen", "when was #1 born"]
    # a run of added words between two children has no word to carry it: left out
    q2 = "Paris Rome"
    two = {"type": "split", "nodes": [{"id": "1", "text": "Paris", "depends_on": []},
                                      {"id": "2", "text": "Rome", "depends_on": []},
                                      {"id": "3", "text": "#1 is older than #2", "depends_on": ["1", "2"]}]}
    assert adds_from_graph(q2, two) in (None, ["", ""])
    assert adds_from_graph("", gold) is None
