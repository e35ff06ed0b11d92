"""The reader recipe's loader (training/read_data.py) refuses a malformed record at FILE:LINE, naming
the field, what it must be and what it is (models.jsonl.field_check through read_jsonl's check),
never a KeyError / TypeError mid-build, never read as other data (an alias string read letter by
letter, a null paragraph read as the text "None"), and never a support title or index that names
no paragraph dropped without a word."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.training.read_data import ReaderData, load_items

FIX = "; correct the record or remove the line"

HOTPOT_OK = {"_id": "h1", "question": "Which band is Canadian?", "answer": "Rush",
             "context": [["Rush", ["Rush is a band.", "It is Canadian."]], ["Yes", ["Yes is a band."]]],
             "supporting_titles": ["Rush"], "supporting_facts": [["Rush", 1]]}
WIKI_OK = {"_id": "w1", "question": "Where is Rush from?", "answer": "Canada",
           "context": [["Rush", ["Rush is a band.", "It is from Canada."]], ["Yes", ["Yes is a band."]]],
           "supporting_facts": [["Rush", 1]], "evidences": [["Rush", "country", "Canada"]]}
MUSIQUE_OK = {"id": "m1", "question": "Where was the Rush drummer born?", "answer": "Hamilton",
              "answer_aliases": ["Hamilton, Ontario"],
              "paragraphs": [{"idx": 0, "title": "Rush", "paragraph_text": "Neil Peart drummed for Rush.",
                              "is_supporting": True},
                             {"idx": 1, "title": "Neil Peart", "paragraph_text": "Peart was born in Hamilton.",
                              "is_supporting": True},
                             {"idx": 2, "title": "Yes", "paragraph_text": "Yes is a band.", "is_supporting": False}],
              "question_decomposition": [
                  {"id": 1, "question": "Who drummed for Rush?", "answer": "Neil Peart", "paragraph_support_idx": 0},
                  {"id": 2, "question": "Where was #1 born?", "answer": "Hamilton", "paragraph_support_idx": 1}]}
DOCS_OK = [{"id": "d1", "source": "s", "title": "Rush", "text": "Rush is a band from Toronto."},
           {"id": "d2", "source": "s", "title": "Yes", "text": "Yes is a band from London."},
           {"id": "d3", "source": "s", "text": "Untitled notes."}]
QA_OK = {"id": "q1", "query": "Where is Rush from?", "answer": "Toronto", "supporting": ["d1"],
         "history": [{"role": "user", "content": "Tell me about Rush."}, {"role": "assistant", "content": "A band."}]}


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def changed(rec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``rec`` with ``changes``; a change to ``...`` removes the field."""
    out = {**json.loads(json.dumps(rec)), **changes}
    return {k: v for k, v in out.items() if v is not ...}


def hop(**changes: Any) -> dict[str, Any]:
    return changed(MUSIQUE_OK["question_decomposition"][0], **changes)


def para(**changes: Any) -> dict[str, Any]:
    return changed(MUSIQUE_OK["paragraphs"][0], **changes)


def source_data(source: str, path: Path) -> ReaderData:
    setting = {"hotpotqa": "hotpotqa", "2wikimultihopqa": "wikimultihop", "musique": "musique"}[source]
    return ReaderData(sources=(source,), **{setting: str(path)})


def use_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, docs: list[Any], questions: list[Any]) -> ReaderData:
    corpus = write_jsonl(tmp_path / "demo" / "corpus.jsonl", docs)
    qa = write_jsonl(tmp_path / "demo" / "qa.jsonl", questions)
    monkeypatch.setattr("searchsmith.models.demo.corpus_path", lambda: corpus)
    monkeypatch.setattr("searchsmith.models.demo.qa_path", lambda: qa)
    return ReaderData(sources=("demo",), max_distractors=1)


# ----------------------------------------------------------------------------- good records


def test_good_records_of_each_source_load_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hotpot = load_items(source_data("hotpotqa", write_jsonl(tmp_path / "h.jsonl", [HOTPOT_OK])))
    assert [(it.qid, it.question, it.answers, it.support) for it in hotpot] == \
        [("hotpotqa-h1", "Which band is Canadian?", ["Rush"], [0])]
    assert hotpot[0].paragraphs == [("Rush", "Rush is a band. It is Canadian."), ("Yes", "Yes is a band.")]
    # a paragraph given as one string, and gold titles from supporting_facts when supporting_titles is absent
    wiki_rec = changed(WIKI_OK, context=[["Yes", "Yes is a band."], ["Rush", ["Rush is a band.", "From Canada."]]])
    wiki = load_items(source_data("2wikimultihopqa", write_jsonl(tmp_path / "w.jsonl", [wiki_rec])))
    assert wiki[0].paragraphs[0] == ("Yes", "Yes is a band.") and wiki[0].support == [1]
    assert wiki[0].evidences == (("Rush", "country", "Canada"),)
    # a null paragraph_support_idx is a hop without a paragraph: skipped, as before
    mus_rec = changed(MUSIQUE_OK, question_decomposition=[MUSIQUE_OK["question_decomposition"][0],
                                                          hop(question="Where was #1 born?", answer="Hamilton",
                                                              paragraph_support_idx=None)])
    musique = load_items(source_data("musique", write_jsonl(tmp_path / "m.jsonl", [MUSIQUE_OK, changed(mus_rec, id="m2")])))
    assert [(it.uid, it.question, it.answers) for it in musique] == [
        ("musique-m1", MUSIQUE_OK["question"], ["Hamilton", "Hamilton, Ontario"]),
        ("musique-m1-hop1", "Who drummed for Rush?", ["Neil Peart"]),
        ("musique-m1-hop2", "Where was Neil Peart born?", ["Hamilton"]),
        ("musique-m2", MUSIQUE_OK["question"], ["Hamilton", "Hamilton, Ontario"]),
        ("musique-m2-hop1", "Who drummed for Rush?", ["Neil Peart"])]
    demo = load_items(use_demo(monkeypatch, tmp_path, DOCS_OK, [QA_OK, changed(QA_OK, id="q2", supporting=...)]))
    assert [(it.qid, it.question, it.answers) for it in demo] == \
        [("demo-q1", "Tell me about Rush. Where is Rush from?", ["Toronto"])]
    assert ("Rush", "Rush is a band from Toronto.") in demo[0].paragraphs


# ----------------------------------------------------------------------------- bad records

CONTEXT_BAD = [
    ({"_id": None}, "field '_id' must be an id (a string or an integer), got null"),
    ({"question": None}, "field 'question' must be a non-empty string, got null"),
    ({"question": 5}, "field 'question' must be a non-empty string, got 5"),
    ({"answer": ["Rush"]}, "field 'answer' must be a non-empty string, got [\"Rush\"]"),
    ({"context": "abc"}, "field 'context' must be a non-empty list of [title, sentences] pairs, got \"abc\""),
    ({"context": []}, "field 'context' must be a non-empty list of [title, sentences] pairs, got []"),
    ({"context": [["Rush"]]},
     "field 'context[0]' must be a [title, sentences] pair (a string and a list of strings), got [\"Rush\"]"),
    ({"context": [["Rush", None]]},
     "field 'context[0]' must be a [title, sentences] pair (a string and a list of strings), got [\"Rush\", null]"),
    ({"context": [["Rush", ["a", 7]]]},
     "field 'context[0]' must be a [title, sentences] pair (a string and a list of strings), got [\"Rush\", [\"a\", 7]]"),
    ({"supporting_titles": "Rush"}, "field 'supporting_titles' must be a list of strings, got \"Rush\""),
    ({"supporting_titles": ["Rush", "Nope"]},
     "field 'supporting_titles[1]' is \"Nope\", not the title of any of the record's 2 'context' paragraphs"),
    ({"supporting_facts": [["Rush"]]}, "field 'supporting_facts[0]' must be a [title, sentence index] pair, got [\"Rush\"]"),
    ({"supporting_facts": [["Rush", -1]]},
     "field 'supporting_facts[0]' must be a [title, sentence index] pair, got [\"Rush\", -1]"),
    ({"supporting_facts": [["Rush", 0], ["Nope", 0]]},
     "field 'supporting_facts[1]' names \"Nope\", not the title of any of the record's 2 'context' paragraphs"),
    ({"supporting_facts": [["Rush", 2]]}, "field 'supporting_facts[0]' is sentence 2 of \"Rush\", past its 2 sentences"),
    ({"evidences": [["Rush", "country"]]},
     "field 'evidences[0]' must be a [subject, relation, object] triple of strings, got [\"Rush\", \"country\"]"),
    ({"evidences": "Rush"}, "field 'evidences' must be a list of [subject, relation, object] triples, got \"Rush\""),
]


@pytest.mark.parametrize("source,good", [("hotpotqa", HOTPOT_OK), ("2wikimultihopqa", WIKI_OK)])
@pytest.mark.parametrize("change,problem", CONTEXT_BAD, ids=[p for _, p in CONTEXT_BAD])
def test_a_bad_context_record_is_refused_at_its_line(tmp_path: Path, source: str, good: dict[str, Any],
                                                    change: dict[str, Any], problem: str) -> None:
    p = write_jsonl(tmp_path / "bad.jsonl", [good, changed(good, **change)])
    with pytest.raises(ValidationError, match="^" + re.escape(f"{p}:2: {problem}{FIX}") + "$"):
        load_items(source_data(source, p))


MUSIQUE_BAD = [
    ({"id": [1]}, "field 'id' must be an id (a string or an integer), got [1]"),
    ({"question": " "}, "field 'question' must be a non-empty string, got \" \""),
    ({"answer": 1939}, "field 'answer' must be a non-empty string, got 1939"),
    ({"answer_aliases": "Hamilton"}, "field 'answer_aliases' must be a list of strings, got \"Hamilton\""),
    ({"paragraphs": "abc"}, "field 'paragraphs' must be a non-empty list of paragraph objects, got \"abc\""),
    ({"paragraphs": []}, "field 'paragraphs' must be a non-empty list of paragraph objects, got []"),
    ({"paragraphs": [para(paragraph_text=...)]}, "field 'paragraphs[0].paragraph_text' is missing (expected a string)"),
    ({"paragraphs": [para(title=None)]}, "field 'paragraphs[0].title' must be a string, got null"),
    ({"paragraphs": [para(is_supporting="no")]}, "field 'paragraphs[0].is_supporting' must be true or false, got \"no\""),
    ({"question_decomposition": "abc"},
     "field 'question_decomposition' must be a non-empty list of hop objects, got \"abc\""),
    ({"question_decomposition": [hop(question=...)]},
     "field 'question_decomposition[0].question' is missing (expected a non-empty string)"),
    ({"question_decomposition": [hop(answer=5)]}, "field 'question_decomposition[0].answer' must be a string, got 5"),
    ({"question_decomposition": [hop(paragraph_support_idx=3)]},
     "field 'question_decomposition[0].paragraph_support_idx' is 3, past the record's 3 paragraphs"),
    ({"question_decomposition": [hop(paragraph_support_idx=-1)]},
     "field 'question_decomposition[0].paragraph_support_idx' must be an index (an integer >= 0), got -1"),
    ({"question_decomposition": [hop(paragraph_support_idx=True)]},
     "field 'question_decomposition[0].paragraph_support_idx' must be an index (an integer >= 0), got true"),
    ({"question_decomposition": [hop(), hop(question="Where was #2 born?")]},
     "field 'question_decomposition[1].question' refers to #2, not an earlier hop (earlier hops: #1..#1)"),
    ({"question_decomposition": [hop(question="Who is #0?")]},
     "field 'question_decomposition[0].question' refers to #0, not an earlier hop (earlier hops: none)"),
]


@pytest.mark.parametrize("change,problem", MUSIQUE_BAD, ids=[p for _, p in MUSIQUE_BAD])
def test_a_bad_musique_record_is_refused_at_its_line(tmp_path: Path, change: dict[str, Any], problem: str) -> None:
    p = write_jsonl(tmp_path / "bad.jsonl", [MUSIQUE_OK, changed(MUSIQUE_OK, **change)])
    with pytest.raises(ValidationError, match="^" + re.escape(f"{p}:2: {problem}{FIX}") + "$"):
        load_items(source_data("musique", p))


def test_a_bad_musique_hop_is_refused_without_reading_hops_too(tmp_path: Path) -> None:
    """The record is malformed whether or not its hops are read (data.musique_hops=false)."""
    p = write_jsonl(tmp_path / "bad.jsonl", [changed(MUSIQUE_OK, question_decomposition=[hop(paragraph_support_idx=9)])])
    with pytest.raises(ValidationError, match=re.escape(f"{p}:1: field 'question_decomposition[0].paragraph_support_idx'"
                                                        " is 9, past the record's 3 paragraphs")):
        load_items(ReaderData(sources=("musique",), musique=str(p), musique_hops=False))


def test_every_bad_record_is_reported_at_its_file_line(tmp_path: Path) -> None:
    """Line numbers count the file's lines (a blank line included), and all bad records are named at once,
    also past data.max_items."""
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join([json.dumps(HOTPOT_OK), "", json.dumps(changed(HOTPOT_OK, question=None)),
                            json.dumps(changed(HOTPOT_OK, supporting_titles=["Nope"]))]) + "\n", encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        load_items(ReaderData(sources=("hotpotqa",), hotpotqa=str(p), max_items=1))
    assert str(err.value).splitlines() == [
        f"data.hotpotqa {p}: 2 problem(s)",
        f"  {p}:3: field 'question' must be a non-empty string, got null{FIX}",
        f"  {p}:4: field 'supporting_titles[0]' is \"Nope\", not the title of any of the record's 2 'context' "
        f"paragraphs{FIX}"]


DEMO_BAD = [
    ("qa", {"query": None}, "field 'query' must be a non-empty string, got null"),
    ("qa", {"answer": None}, "field 'answer' must be a non-empty string, got null"),
    ("qa", {"supporting": "d1"}, "field 'supporting' must be a list of document ids, got \"d1\""),
    ("qa", {"supporting": ["d1", "d9"]}, "field 'supporting[1]' is \"d9\", not the id of a document of the demo corpus"),
    ("qa", {"history": "Tell me about Rush."}, "field 'history' must be a list of turn objects, got \"Tell me about Rush.\""),
    ("qa", {"history": [{"role": "user"}]}, "field 'history[0].content' is missing (expected a string)"),
    ("corpus", {"text": None}, "field 'text' must be a string, got null"),
    ("corpus", {"title": 5}, "field 'title' must be a string, got 5"),
    ("corpus", {"id": 1.5}, "field 'id' must be an id (a string or an integer), got 1.5"),
]


@pytest.mark.parametrize("which,change,problem", DEMO_BAD, ids=[p for _, _, p in DEMO_BAD])
def test_a_bad_demo_record_is_refused_at_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str,
                                                 change: dict[str, Any], problem: str) -> None:
    docs, questions = list(DOCS_OK), [QA_OK, QA_OK]
    if which == "qa":
        questions[1] = changed(QA_OK, **change)
    else:
        docs[1] = changed(DOCS_OK[1], **change)
    data = use_demo(monkeypatch, tmp_path, docs, questions)
    p = tmp_path / "demo" / ("qa.jsonl" if which == "qa" else "corpus.jsonl")
    with pytest.raises(ValidationError, match="^" + re.escape(f"{p}:2: {problem}{FIX}") + "$"):
        load_items(data)
