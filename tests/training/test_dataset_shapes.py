"""Each public dataset's record shape is written once (training/dataset_shapes.py): every loader
of a set refuses the same malformed record with the same message, ``FILE:LINE: field ...; fix``.

The tests feed one file to every loader that reads the field at fault and compare the whole
messages, so a loader that spelled its own shape again (another type, another wording, a rule
left out) fails here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import STRING, TEXT
from searchsmith.serving.routing_sets import cast_routing, multihop_pipeline
from searchsmith.training.cite_data import CitationData, scifact_pairs
from searchsmith.training.dataset_shapes import MUSIQUE, TREC_CAST, RecordShape
from searchsmith.training.decompose_data import REAL_SOURCES, load_real
from searchsmith.training.evaluate import write_scifact_beir
from searchsmith.training.read_data import ReaderData, load_items
from searchsmith.training.rerank_data import (
    RerankerData,
    hotpotqa_groups,
    musique_groups,
    scifact_groups,
)
from test_read_data_checks import (  # the same records as the reader's
    FIX,
    HOTPOT_OK,
    MUSIQUE_OK,
    changed,
    write_jsonl,
)


def refusal(load: Callable[[], Any]) -> str:
    with pytest.raises(ValidationError) as err:
        load()
    return str(err.value)


# ----------------------------------------------------------------------------- MuSiQue


def hops(**changes: Any) -> list[dict[str, Any]]:
    """MUSIQUE_OK's hops with ``changes`` to the second."""
    first, second = MUSIQUE_OK["question_decomposition"]
    return [first, changed(second, **changes)]


def para(**changes: Any) -> list[dict[str, Any]]:
    """MUSIQUE_OK's paragraphs with ``changes`` to the first."""
    first, *rest = MUSIQUE_OK["paragraphs"]
    return [changed(first, **changes), *rest]


# Every loader of a MuSiQue file: the reranker's, the reader's, the decomposer's, make-pipeline-set's.
MUSIQUE_LOADERS: dict[str, Callable[[Path], Any]] = {
    "rerank": lambda d: musique_groups(RerankerData(musique=str(d / REAL_SOURCES["musique"]))),
    "read": lambda d: load_items(ReaderData(sources=("musique",), musique=str(d / REAL_SOURCES["musique"]))),
    "decompose": lambda d: load_real("musique", d),
    "pipeline": lambda d: multihop_pipeline(d),
}
EVERY = tuple(MUSIQUE_LOADERS)
HOPS = ("rerank", "read", "decompose")  # the loaders that read question_decomposition
PARAGRAPHS = ("rerank", "read", "pipeline")  # ... and those that read paragraphs

MUSIQUE_BAD = [
    ({"question": 5}, EVERY, "field 'question' must be a non-empty string, got 5"),
    ({"question": ...}, EVERY, "field 'question' is missing (expected a non-empty string)"),
    ({"paragraphs": []}, PARAGRAPHS, "field 'paragraphs' must be a non-empty list of paragraph objects, got []"),
    ({"paragraphs": para(is_supporting="no")}, PARAGRAPHS,
     "field 'paragraphs[0].is_supporting' must be true or false, got \"no\""),
    ({"paragraphs": para(paragraph_text=...)}, PARAGRAPHS,
     "field 'paragraphs[0].paragraph_text' is missing (expected a string)"),
    ({"question_decomposition": []}, HOPS,
     "field 'question_decomposition' must be a non-empty list of hop objects, got []"),
    ({"question_decomposition": ["Who drummed for Rush?"]}, HOPS,
     "field 'question_decomposition[0]' must be a {question, answer, paragraph_support_idx} object, "
     "got \"Who drummed for Rush?\""),
    ({"question_decomposition": hops(question=" ")}, HOPS,
     "field 'question_decomposition[1].question' must be a non-empty string, got \" \""),
    ({"question_decomposition": hops(answer=...)}, HOPS,
     "field 'question_decomposition[1].answer' is missing (expected a string)"),
    ({"question_decomposition": hops(paragraph_support_idx=-1)}, HOPS,
     "field 'question_decomposition[1].paragraph_support_idx' must be an index (an integer >= 0), got -1"),
    ({"question_decomposition": hops(question="Where was #2 born?")}, HOPS,
     "field 'question_decomposition[1].question' refers to #2, not an earlier hop (earlier hops: #1..#1)"),
    # a rule across two fields: asked wherever a loader reads both (the decomposer reads no paragraphs)
    ({"question_decomposition": hops(paragraph_support_idx=3)}, ("rerank", "read"),
     "field 'question_decomposition[1].paragraph_support_idx' is 3, past the record's 3 paragraphs"),
]


def test_every_musique_loader_reads_the_good_record(tmp_path: Path) -> None:
    write_jsonl(tmp_path / REAL_SOURCES["musique"], [MUSIQUE_OK])
    write_jsonl(tmp_path / "hotpotqa" / "hotpotqa_dev_distractor.jsonl", [HOTPOT_OK])  # make-pipeline-set's other set
    assert [len(load(tmp_path)) for load in MUSIQUE_LOADERS.values()] == [1, 3, 1, 2]


@pytest.mark.parametrize(("change", "loaders", "problem"), MUSIQUE_BAD, ids=[p for _, _, p in MUSIQUE_BAD])
def test_musique_loaders_refuse_a_record_with_one_message(tmp_path: Path, change: dict[str, Any],
                                                          loaders: tuple[str, ...], problem: str) -> None:
    path = write_jsonl(tmp_path / REAL_SOURCES["musique"], [MUSIQUE_OK, changed(MUSIQUE_OK, **change)])
    refused = {name: refusal(lambda load=MUSIQUE_LOADERS[name]: load(tmp_path)) for name in loaders}
    assert refused == dict.fromkeys(loaders, f"{path}:2: {problem}{FIX}")


def test_a_rule_is_asked_only_of_the_fields_a_loader_reads(tmp_path: Path) -> None:
    """The decomposer reads no paragraphs: a support index past them is not its concern (the
    reranker refuses the same record), and a paragraph it never reads may be anything."""
    write_jsonl(tmp_path / REAL_SOURCES["musique"],
                [changed(MUSIQUE_OK, question_decomposition=hops(paragraph_support_idx=7), paragraphs="not read")])
    assert len(load_real("musique", tmp_path)) == 1
    with pytest.raises(ValueError, match=r"MuSiQue record: no field\(s\) \['paragraph'\]"):
        MUSIQUE.check(("paragraph",))


def test_an_empty_file_names_its_dataset_and_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / REAL_SOURCES["musique"], [])
    assert refusal(lambda: MUSIQUE_LOADERS["rerank"](tmp_path)) == (
        f"data.musique {path} is empty: no records; expected one MuSiQue record per line (a JSON object with "
        "fields ['id', 'question', 'paragraphs'])")
    shape = RecordShape("toy record", {"q": TEXT, "note": STRING})
    assert shape.check(("q",), ("note",))({"q": "a", "note": None}) == []
    assert shape.check(("q",))({"q": "a", "note": 5}) == []  # a field the loader does not read is not checked


# ----------------------------------------------------------------------------- HotpotQA


@pytest.mark.parametrize(("change", "problem"), [
    ({"context": [["Rush"]]},
     "field 'context[0]' must be a [title, sentences] pair (a string and a list of strings), got [\"Rush\"]"),
    ({"supporting_titles": ["Nope"]},
     "field 'supporting_titles[0]' is \"Nope\", not the title of any of the record's 2 'context' paragraphs"),
])
def test_hotpotqa_loaders_refuse_a_record_with_one_message(tmp_path: Path, change: dict[str, Any],
                                                           problem: str) -> None:
    write_jsonl(tmp_path / REAL_SOURCES["musique"], [MUSIQUE_OK])
    path = write_jsonl(tmp_path / "hotpotqa" / "hotpotqa_dev_distractor.jsonl", [HOTPOT_OK, changed(HOTPOT_OK, **change)])
    refused = [refusal(lambda: hotpotqa_groups(RerankerData(hotpotqa=str(path)))),
               refusal(lambda: load_items(ReaderData(sources=("hotpotqa",), hotpotqa=str(path)))),
               refusal(lambda: multihop_pipeline(tmp_path))]
    assert refused == [f"{path}:2: {problem}{FIX}"] * 3


# ----------------------------------------------------------------------------- SciFact

ABSTRACT_OK = {"doc_id": 1, "title": "T", "abstract": ["S1.", "S2.", "S3."]}
CLAIM_OK = {"id": 7, "claim": "c", "qrels": [1], "bm25_top10": [[1, 2.5]],
            "evidence": {"1": [{"sentences": [0], "label": "SUPPORT"}]}}


def scifact_loaders(claims: Path, corpus: Path, out: Path) -> dict[str, Callable[[], Any]]:
    """Every loader of a SciFact claims + corpus pair: the reranker's, the citation recipe's and
    ``eval``'s BEIR export."""
    return {"rerank": lambda: scifact_groups(RerankerData(scifact_claims=str(claims), scifact_corpus=str(corpus))),
            "cite": lambda: scifact_pairs(CitationData(sources=["scifact"], scifact_claims=str(claims),
                                                       scifact_corpus=str(corpus))),
            "beir": lambda: write_scifact_beir(out, claims, corpus)}


CLAIM_BAD = [
    ({"claim": ""}, "field 'claim' must be a non-empty string, got \"\""),
    ({"claim": ...}, "field 'claim' is missing (expected a non-empty string)"),
    ({"id": [7]}, "field 'id' must be an id (a string or an integer), got [7]"),
    ({"id": ...}, "field 'id' is missing (expected an id (a string or an integer))"),
]
ABSTRACT_BAD = [
    ({"abstract": "S1. S2."}, "field 'abstract' must be a list of strings, got \"S1. S2.\""),
    ({"abstract": ["S1.", None]}, "field 'abstract[1]' must be a string, got null"),
    ({"doc_id": None}, "field 'doc_id' must be an id (a string or an integer), got null"),
]


def test_every_scifact_loader_reads_the_good_records(tmp_path: Path) -> None:
    claims = write_jsonl(tmp_path / "claims.jsonl", [CLAIM_OK])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [ABSTRACT_OK])
    loaded = {name: load() for name, load in scifact_loaders(claims, corpus, tmp_path / "beir").items()}
    assert [g.labels for g in loaded["rerank"]] == [[1]]
    pairs = loaded["cite"]  # the rationale, then two sampled sentences outside it
    assert [p.label for p in pairs] == [1, 0, 0] and pairs[0].passage == "S1." and pairs[1].passage != "S1."
    assert (loaded["beir"] / "queries.jsonl").read_text() == '{"_id": "7", "text": "c"}\n'


@pytest.mark.parametrize(("change", "problem"), CLAIM_BAD, ids=[p for _, p in CLAIM_BAD])
def test_scifact_loaders_refuse_a_claim_with_one_message(tmp_path: Path, change: dict[str, Any], problem: str) -> None:
    claims = write_jsonl(tmp_path / "claims.jsonl", [CLAIM_OK, changed(CLAIM_OK, **change)])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [ABSTRACT_OK])
    refused = {name: refusal(load) for name, load in scifact_loaders(claims, corpus, tmp_path / "beir").items()}
    assert refused == dict.fromkeys(refused, f"{claims}:2: {problem}{FIX}")
    assert not (tmp_path / "beir").exists()  # the export checks both files before it writes


@pytest.mark.parametrize(("change", "problem"), ABSTRACT_BAD, ids=[p for _, p in ABSTRACT_BAD])
def test_scifact_loaders_refuse_an_abstract_with_one_message(tmp_path: Path, change: dict[str, Any],
                                                             problem: str) -> None:
    claims = write_jsonl(tmp_path / "claims.jsonl", [CLAIM_OK])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [ABSTRACT_OK, changed(ABSTRACT_OK, **{"doc_id": 2, **change})])
    refused = {name: refusal(load) for name, load in scifact_loaders(claims, corpus, tmp_path / "beir").items()}
    assert refused == dict.fromkeys(refused, f"{corpus}:2: {problem}{FIX}")


def test_a_claim_citing_a_doc_outside_the_corpus_is_refused_at_its_line(tmp_path: Path) -> None:
    """The rule the reranker and the citation recipe share: a cited doc id must be an abstract of
    the corpus, checked against each field the loader reads (qrels and bm25_top10; evidence)."""
    claims = write_jsonl(tmp_path / "claims.jsonl", [CLAIM_OK, changed(CLAIM_OK, id=8, qrels=[1, 2])])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [ABSTRACT_OK])
    loaders = scifact_loaders(claims, corpus, tmp_path / "beir")
    assert refusal(loaders["rerank"]) == \
        f"{claims}:2: field 'qrels' cites doc 2, which is not in {corpus} (data.scifact_corpus){FIX}"
    assert len(loaders["cite"]()) == 6  # it reads no qrels: both claims give their pairs
    write_jsonl(claims, [changed(CLAIM_OK, bm25_top10=[[3, 1.0]], evidence={"2": []})])
    assert refusal(loaders["rerank"]) == \
        f"{claims}:1: field 'bm25_top10' cites doc 3, which is not in {corpus} (data.scifact_corpus){FIX}"
    assert refusal(loaders["cite"]) == \
        f"{claims}:1: field 'evidence' cites doc 2, which is not in {corpus} (data.scifact_corpus){FIX}"


# ----------------------------------------------------------------------------- TREC CAsT


def cast_topic(turns: int = 4) -> list[dict[str, Any]]:
    """One CAsT 2022 conversation: each turn's history is the turns before it, ids and utterances paired."""
    ids = [f"cast2022_7_{t}" for t in range(1, turns + 1)]
    asked = [f"What about rocket engine type {t}?" for t in range(1, turns + 1)]
    return [{"id": ids[t], "year": 2022, "topic_id": "7", "raw_utterance": asked[t],
             "manual_rewritten_utterance": asked[t], "history_utterances": asked[:t], "history_turn_ids": ids[:t],
             "canonical_response": f"Engine type {t + 1} burns fuel."} for t in range(turns)]


# Every loader of the CAsT turns: the decomposer's (rewrite) and make-routing-set's; both read the
# two history lists, which pair one to one.
CAST_LOADERS: dict[str, Callable[[Path], Any]] = {
    "decompose": lambda d: load_real("trec_cast", d),
    "routing": lambda d: cast_routing(d),
}


def test_every_cast_loader_reads_the_good_turns(tmp_path: Path) -> None:
    write_jsonl(tmp_path / REAL_SOURCES["trec_cast"], cast_topic())
    examples = CAST_LOADERS["decompose"](tmp_path)
    assert examples[2]["reply"] == "Engine type 2 burns fuel."  # turn 2's answer, found by the last history id
    corpus, queries = CAST_LOADERS["routing"](tmp_path)
    assert len(corpus) == len(queries) == 4
    assert [m["content"] for m in queries[2]["history"]] == [
        "What about rocket engine type 1?", "Engine type 1 burns fuel.",
        "What about rocket engine type 2?", "Engine type 2 burns fuel."]


def test_cast_loaders_refuse_history_lists_of_different_lengths(tmp_path: Path) -> None:
    """One id too few: the decomposer would take the answer of turn 1 as the reply to turn 2, and
    make-routing-set would drop an utterance from the history (zip stops at the shorter list)."""
    turns = cast_topic()
    turns[2] = changed(turns[2], history_turn_ids=turns[2]["history_turn_ids"][:1])
    path = write_jsonl(tmp_path / REAL_SOURCES["trec_cast"], turns)
    problem = ("field 'history_turn_ids' of turn \"cast2022_7_3\" has 1 turn id but field 'history_utterances' "
               "has 2 utterances; they pair one to one (the k-th id is the turn that asked the k-th utterance), "
               "so give every earlier utterance its turn's id")
    refused = {name: refusal(lambda load=load: load(tmp_path)) for name, load in CAST_LOADERS.items()}
    assert refused == dict.fromkeys(CAST_LOADERS, f"{path}:3: {problem}{FIX}")


def test_the_cast_history_rule_needs_both_lists_and_names_the_turn_only_when_read() -> None:
    rec = changed(cast_topic()[1], history_utterances=[])
    both = TREC_CAST.check(("raw_utterance",), ("history_utterances", "history_turn_ids"))
    assert both(rec) == ["field 'history_turn_ids' has 1 turn id but field 'history_utterances' has 0 utterances; "
                         "they pair one to one (the k-th id is the turn that asked the k-th utterance), so give "
                         f"every earlier utterance its turn's id{FIX}"]  # the loader reads no id: FILE:LINE names it
    assert TREC_CAST.check(("raw_utterance", "history_turn_ids"))(rec) == []  # one list alone pairs with nothing
    assert both(changed(rec, history_utterances=None)) == []  # an absent list is not a shorter one
