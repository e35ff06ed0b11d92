"""QDG: type inference, validation, repair (never raises), linearisation round trip, Break rows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from searchsmith.models.errors import ValidationError
from searchsmith.models.qdg import (
    QDG,
    QDGNode,
    asks_nothing,
    described,
    fill_references,
    from_qdmr,
    infer_type,
    linearize,
    names_itself,
    parse_linear,
    repair,
    terminal,
    validate,
)

Q = "When was the founder of Lumen born?"
CHAIN = QDG("chain", (QDGNode("1", "who founded Lumen", ()),
                      QDGNode("2", "when was #1 born", ("1",))))


def n(i: str, text: str, *deps: str) -> QDGNode:
    return QDGNode(i, text, tuple(deps))


# ----------------------------------------------------------------------------- types


def test_infer_type_terminal_chain_split() -> None:
    assert infer_type([n("1", "a")]) == "terminal"
    assert infer_type([n("1", "a"), n("2", "b #1", "1"), n("3", "c #2", "2")]) == "chain"
    assert infer_type([n("1", "a"), n("2", "b"), n("3", "#1 vs #2", "1", "2")]) == "split"
    # A single root with two children is still a chain (only one retrieval to start from).
    assert infer_type([n("1", "a"), n("2", "x #1", "1"), n("3", "y #1", "1")]) == "chain"


def test_validate_clean_graph_has_no_problems() -> None:
    assert validate(CHAIN) == []


@pytest.mark.parametrize("graph, expected", [
    (QDG("chain", ()), "graph has no nodes"),
    (QDG("chain", (n("1", "a"), n("1", "b #1", "1"))), "duplicate node ids ['1']"),
    (QDG("chain", (n("1", "a"), n("2", "b", "9"))), "depends on unknown node '9'"),
    (QDG("chain", (n("1", "a", "1"), n("2", "b", "1"))), "depends on itself"),
    (QDG("split", (n("1", "a", "2"), n("2", "b", "1"))), "dependencies form a cycle"),
    (QDG("chain", (n("1", "a"), n("2", "about #1"))), "refers to #1 without depending on it"),
    (QDG("split", CHAIN.nodes), "does not match the structure ('chain')"),
    (QDG("chain", (n("1", "  "),)), "has empty text"),
])
def test_validate_reports_each_problem(graph: QDG, expected: str) -> None:
    assert any(expected in p for p in validate(graph)), validate(graph)


def test_validate_max_nodes() -> None:
    graph = QDG("split", tuple(n(str(i), f"q{i}") for i in range(1, 11)))
    assert "10 nodes, the limit is 8 (max_nodes)" in validate(graph, max_nodes=8)


# ----------------------------------------------------------------------------- JSON


def test_json_round_trip() -> None:
    assert QDG.from_json(CHAIN.to_json()) == CHAIN
    assert QDG.from_json(json.dumps(CHAIN.to_json())) == CHAIN


@pytest.mark.parametrize("obj, message", [
    ("{not json", "not valid JSON"),
    ({"type": "tree", "nodes": []}, "qdg.type: expected one of"),
    ({"type": "chain", "nodes": []}, "qdg.nodes: expected a non-empty list"),
    ({"type": "terminal", "nodes": [{"id": "1", "text": ""}]}, "qdg.nodes[0].text"),
    ({"type": "terminal", "nodes": [{"id": "1", "text": "a", "depends_on": "1"}]},
     "qdg.nodes[0].depends_on"),
    ({"type": "chain", "nodes": [{"id": "1", "text": "a", "depends_on": ["2"]},
                                 {"id": "2", "text": "b", "depends_on": ["1"]}]}, "cycle"),
])
def test_from_json_rejects(obj: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        QDG.from_json(obj)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- repair


def test_repair_breaks_cycle_and_keeps_order() -> None:
    g = repair({"nodes": [{"id": "1", "text": "a #2", "depends_on": ["2"]},
                          {"id": "2", "text": "b #1", "depends_on": ["1"]}]}, Q)
    assert validate(g) == []
    assert [x.depends_on for x in g.nodes] == [(), ("1",)]
    assert g.nodes[0].text == "a 2"  # a forward "#2" is not a reference any more
    assert g.type == "chain"


def test_repair_drops_unknown_and_self_deps_and_renumbers() -> None:
    g = repair({"type": "split", "nodes": [
        {"id": "a", "text": "who founded Lumen", "depends_on": ["a", "zz"]},
        {"id": "b", "text": "when was it born", "depends_on": ["a"]}]}, Q)
    assert g == QDG("chain", (n("1", "who founded Lumen"), n("2", "when was it born", "1")))


def test_repair_renumbers_references_in_text() -> None:
    g = repair({"nodes": [{"id": "7", "text": "x"}, {"id": "9", "text": "y of #7"}]}, Q)
    assert [x.text for x in g.nodes] == ["x", "y of #1"]
    assert g.nodes[1].depends_on == ("1",)


def test_repair_dedups_and_redirects_dependants() -> None:
    g = repair({"nodes": [{"id": "1", "text": "who founded Lumen"},
                          {"id": "2", "text": "Who founded  Lumen"},
                          {"id": "3", "text": "when was #2 born"}]}, Q)
    assert [(x.text, x.depends_on) for x in g.nodes] == [
        ("who founded Lumen", ()), ("when was #1 born", ("1",))]


def test_repair_caps_node_count() -> None:
    nodes = [{"id": str(i), "text": f"step {i}"} for i in range(1, 1001)]
    g = repair({"nodes": nodes}, Q, max_nodes=5)
    assert len(g.nodes) == 5 and g.type == "split" and validate(g, max_nodes=5) == []


@pytest.mark.parametrize("garbage", [
    "", "   ", "!!!!", "{", "[[[[", "null", "42", '{"nodes": 5}', '{"nodes": [1, 2]}',
    "|| || ||", "chain ||", None, 3.5, [], {}, {"nodes": [{"text": ""}]}, b"\xff\xfe",
    "[" * 5000, '{"type": "chain", "nodes": [{"id": {}, "text": []}]}',
])
def test_repair_never_raises_and_falls_back_to_terminal(garbage: object) -> None:
    g = repair(garbage, Q)
    assert g == terminal(Q)


def test_repair_reads_spaced_wordpiece_json() -> None:
    text = ('{ " type " : " chain " , " nodes " : [ { " id " : " 1 " , " text " : " who founded '
            'lumen " , " depends _ on " : [ ] } , { " id " : " 2 " , " text " : " when was # 1 '
            'born " , " depends _ on " : [ " 1 " ] } ] }')
    g = repair(text, Q)
    assert [x.text for x in g.nodes] == ["who founded lumen", "when was #1 born"]
    assert g.type == "chain"


# ----------------------------------------------------------------------------- linear form


def test_linearize_format() -> None:
    assert linearize(CHAIN) == "chain || 1 : who founded Lumen || 2 : when was # 1 born"
    hidden = QDG("chain", (n("1", "a"), n("2", "b", "1")))
    assert linearize(hidden) == "chain || 1 : a || 2 : b [ # 1 ]"
    assert parse_linear(linearize(hidden), Q) == (hidden, True)


def test_parse_linear_reads_wordpiece_decoder_output() -> None:
    text = "chain | | 1 : who founded lumen | | 2 : when was # 1 born?"
    graph, valid = parse_linear(text, Q)
    assert valid
    assert graph == QDG("chain", (n("1", "who founded lumen"), n("2", "when was #1 born?", "1")))


@pytest.mark.parametrize("text", [
    "split || 1 : a || 2 : b # 1",                   # declared type disagrees with structure
    "chain || 2 : a || 1 : b",                       # ids out of order
    "chain || 1 : a # 2 || 2 : b # 1",               # cycle
    "chain || 1 : a || 1 : a # 1",                   # duplicate id and self reference
    "bogus || 1 : a",                                # unknown type word
    "chain || who founded lumen || when was it",     # fields without ids
    "",                                              # nothing at all
])
def test_parse_linear_flags_invalid_but_returns_valid_graph(text: str) -> None:
    graph, valid = parse_linear(text, Q)
    assert valid is False
    assert validate(graph) == []


def test_parse_linear_empty_is_terminal_question() -> None:
    assert parse_linear("[SEP]", Q) == (terminal(Q), False)


_words = st.text(alphabet="abcdefghij klmno", min_size=1, max_size=20).map(lambda s: " ".join(s.split()))


@st.composite
def graphs(draw: st.DrawFn) -> QDG:
    size = draw(st.integers(1, 8))
    nodes = []
    for i in range(1, size + 1):
        text = draw(_words.filter(bool))
        deps = sorted(draw(st.sets(st.integers(1, i - 1), max_size=3)) if i > 1 else set())
        refs = draw(st.sets(st.sampled_from(deps), max_size=len(deps))) if deps else set()
        text = " ".join([text, *[f"#{r}" for r in sorted(refs)]])
        nodes.append(QDGNode(str(i), text, tuple(str(d) for d in deps)))
    # Distinct texts: repair would merge duplicates (tested above).
    seen: set[str] = set()
    unique = []
    for node in nodes:
        text = node.text if node.text.lower() not in seen else f"{node.text} v{node.id}"
        seen.add(text.lower())
        unique.append(QDGNode(node.id, text, node.depends_on))
    return QDG(infer_type(unique), tuple(unique))


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_linearize_parse_round_trip(graph: QDG) -> None:
    # Canonical form: references first in depends_on (repair orders them that way).
    canon = repair(graph, "q")
    parsed, valid = parse_linear(linearize(canon), "q")
    assert valid and parsed == canon
    # Spacing as a WordPiece decoder writes it ("| |", "# 1") parses to the same graph.
    spaced = linearize(canon).replace("||", "| |")
    assert parse_linear(spaced, "q") == (canon, True)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_parse_linear_and_repair_never_raise(text: str) -> None:
    graph, _ = parse_linear(text, Q)
    assert validate(graph) == []
    assert validate(repair(text, Q)) == []


# ----------------------------------------------------------------------------- QDMR


def test_from_qdmr_break_rows() -> None:
    # Real-looking Break QDMR-high-level rows (../shared/data/break_qdmr/dev.jsonl layout).
    g = from_qdmr(["the country where Jamaican English is spoken",
                   "what is the most common language in #1"], [[], [1]])
    assert g.type == "chain" and g.nodes[1].depends_on == ("1",)
    split = from_qdmr(["people in Cahul", "people in Soroca", "number of #1", "number of #2",
                       "which is highest of #3 and #4"], [[], [], [1], [2], [3, 4]])
    assert split.type == "split"
    assert [x.depends_on for x in split.nodes] == [(), (), ("1",), ("2",), ("3", "4")]
    # A literal "#1" in a title is not a self reference.
    title = from_qdmr(["the actor who portrayed Computer Geek # 1", "year that #1 was drafted"],
                      [[], [1]])
    assert validate(title) == [] and title.nodes[0].text.endswith("Computer Geek 1")
    assert from_qdmr(["who is it"]).type == "terminal"
    # step_dependencies missing: the #k references alone give the edges.
    assert from_qdmr(["a", "b of #1"], None).nodes[1].depends_on == ("1",)


@pytest.mark.parametrize("text, names", [
    ("the Lumen Cloud outage", True),
    ("Harbor & Finch", True),
    ("Quarry 3.0", True),
    ("flowering plants", True),
    ("the director of Titanic", False),  # a relation: looked up
    ("Australia's longest-serving leader", False),  # a possessive
    ("the team that plays at Holman Stadium", False),
    ("band released a song called Counterparts", False),  # a regular past tense
    ("won academy awards", False),  # an irregular one
    ("province containing Bandar-e Gaz County", False),  # a participle inside
    ("Quarry 3.0 cut the p99 latency", False),  # an article after the first word
    ("When did #1 happen", False),
    ("Who directed Titanic?", False),
    ("", False),
])
def test_names_itself(text, names) -> None:
    assert names_itself(text) is names


@pytest.mark.parametrize("text, empty", [
    ("of #1", True), ("Which #2", True), ("Who #2?", True), ("#2 and #3", True), ("If both #1 and #2", True),
    ("When did #1 happen", False), ("default #1", False), ("#1 latency", False), ("the default value of #1", False),
    # Break's operator steps compare or count their references
    ("which is first of #1, #2", True), ("which is true of #1, #2", True), ("number of #1", True),
    ("the difference of #1 and #2", True), ("which is larger of #1, #2, #3", True),
    ("#1 that are red", False), ("the director of #1", False), ("first album of #1", False),
])
def test_asks_nothing(text, empty) -> None:
    assert asks_nothing(text) is empty


@pytest.mark.parametrize("text, words", [
    ("the company that makes Beacon", "the company that makes Beacon"),  # a phrase stands as it is
    ("Which class implements Lumen eviction?", "class implements Lumen eviction"),
    ("who directed Titanic", "directed Titanic"),
    ("What?", "What"),
    (" ? ", "?"),  # nothing left: the text as it is
])
def test_described(text, words) -> None:
    assert described(text) == words


def test_fill_references() -> None:
    assert fill_references("when was #1 born", {"1": "Ada Varok"}) == "when was Ada Varok born"
    assert fill_references("compare # 1 and #2", {"1": "x", "2": "y"}) == "compare x and y"
    assert fill_references("when was #3 born", {"1": "x"}) == "when was #3 born"
