"""The training loaders refuse a malformed record at FILE:LINE, naming the field, what it must be
and what it is (models.jsonl.field_check through read_jsonl's check hook), never a KeyError or
TypeError mid-build, and never read as other data (a caption string read letter by letter)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import (
    INDEX,
    STRING,
    TEXT,
    field_check,
    list_of,
    object_with,
    read_jsonl,
    shown,
    value_problem,
)
from searchsmith.training.cite_data import CitationData, expertqa_pairs, scifact_pairs, wice_pairs
from searchsmith.training.decompose_data import REAL_SOURCES, load_real
from searchsmith.training.image_data import coco_records
from searchsmith.training.rerank_data import (
    RerankerData,
    hotpotqa_groups,
    musique_groups,
    musique_hop_groups,
    scifact_groups,
    wikimultihop_groups,
)

FIX = "; correct the record or remove the line"


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def at_line(path: Path, line: int, problem: str) -> str:
    """The pattern of ``FILE:LINE: problem`` (the problem matched literally)."""
    return re.escape(f"{path.name}:{line}: {problem}")


# ----------------------------------------------------------------------------- the shared helper


def test_value_problem_names_the_innermost_bad_part() -> None:
    para = object_with("a paragraph object", {"title": STRING, "paragraph_text": STRING})
    want = list_of(para, "a list of paragraph objects")
    assert value_problem([{"title": "t", "paragraph_text": "p"}], want, "paragraphs") is None
    assert value_problem("abc", want, "paragraphs") == \
        "field 'paragraphs' must be a list of paragraph objects, got \"abc\""
    assert value_problem([{"title": "t", "paragraph_text": "p"}, {"title": "t"}], want, "paragraphs") == \
        "field 'paragraphs[1].paragraph_text' is missing (expected a string)"
    assert value_problem([{"title": 5, "paragraph_text": "p"}], want, "paragraphs") == \
        "field 'paragraphs[0].title' must be a string, got 5"


def test_field_check_reports_each_bad_field_with_the_fix() -> None:
    check = field_check({"question": TEXT, "hops": list_of(INDEX, "a list of indices")}, {"note": STRING})
    assert check({"question": "q", "hops": [0, 2]}) == []
    assert check({"question": "q", "hops": [], "note": None}) == []  # null stands for absent
    assert check({"question": None, "hops": [1, True], "note": 3}) == [
        "field 'question' must be a non-empty string, got null" + FIX,
        "field 'hops[1]' must be an index (an integer >= 0), got true" + FIX,
        "field 'note' must be a string, got 3" + FIX]
    assert check({"question": " "}) == ["field 'question' must be a non-empty string, got \" \"" + FIX,
                                        "field 'hops' is missing (expected a list of indices)" + FIX]


def test_field_check_asks_then_only_of_well_typed_records() -> None:
    asked = []
    check = field_check({"n": INDEX}, then=lambda rec: asked.append(rec["n"]) or ["too big"])
    assert check({"n": "x"}) == ["field 'n' must be an index (an integer >= 0), got \"x\"" + FIX]
    assert check({"n": 4}) == ["too big" + FIX]
    assert asked == [4]


def test_shown_writes_json_and_cuts_long_values() -> None:
    assert shown(None) == "null" and shown(True) == "true" and shown("a") == '"a"'
    assert shown("x" * 100) == '"' + "x" * 56 + "..."
    assert len(shown(list(range(100)))) == 60


def test_read_jsonl_reports_every_bad_record_at_its_line(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "q.jsonl", [{"question": "ok"}, {"question": None}, {"question": "ok"},
                                          {"question": 5}])
    with pytest.raises(ValidationError) as err:
        read_jsonl(p, ("question",), "data.q", check=field_check({"question": TEXT}))
    assert str(err.value).splitlines()[1:] == [
        f"  {p}:2: field 'question' must be a non-empty string, got null" + FIX,
        f"  {p}:4: field 'question' must be a non-empty string, got 5" + FIX]


# ----------------------------------------------------------------------------- reranker

MUSIQUE_OK = {"id": "m1", "question": "Who?", "paragraphs": [
    {"idx": 0, "title": "A", "paragraph_text": "Alpha.", "is_supporting": True},
    {"idx": 1, "title": "B", "paragraph_text": "Beta.", "is_supporting": False}],
    "question_decomposition": [{"id": 1, "question": "Who is A?", "answer": "a", "paragraph_support_idx": 0}]}
HOTPOT_OK = {"_id": "h1", "question": "Which?", "context": [["A", ["Alpha."]], ["B", ["Beta."]]],
             "supporting_titles": ["A"]}
WIKI_OK = {"_id": "w1", "question": "Which?", "context": [["A", ["Alpha."]], ["B", ["Beta."]]],
           "supporting_facts": [["A", 0]]}


def _with(rec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(rec)), **changes}


def _musique_para(**changes: Any) -> dict[str, Any]:
    para = {"idx": 0, "title": "A", "is_supporting": True, **changes}
    return {k: v for k, v in para.items() if v is not None}


RERANK_BAD = [
    ("musique", musique_groups, _with(MUSIQUE_OK, question=None),
     "field 'question' must be a non-empty string, got null"),
    ("musique", musique_groups, _with(MUSIQUE_OK, question=5), "field 'question' must be a non-empty string, got 5"),
    ("musique", musique_groups, _with(MUSIQUE_OK, paragraphs=[_musique_para()]),
     "field 'paragraphs[0].paragraph_text' is missing (expected a string)"),
    ("musique", musique_groups, _with(MUSIQUE_OK, paragraphs="abc"),
     "field 'paragraphs' must be a non-empty list of paragraph objects, got \"abc\""),
    ("musique", musique_groups, _with(MUSIQUE_OK, paragraphs=[_musique_para(paragraph_text="p", is_supporting="no")]),
     "field 'paragraphs[0].is_supporting' must be true or false, got \"no\""),
    ("musique", musique_groups, _with(MUSIQUE_OK, question_decomposition="abc"),
     "field 'question_decomposition' must be a non-empty list of hop objects, got \"abc\""),
    ("musique", musique_groups,
     _with(MUSIQUE_OK, question_decomposition=[{"question": "q", "answer": "a", "paragraph_support_idx": 7}]),
     "field 'question_decomposition[0].paragraph_support_idx' is 7, past the record's 2 paragraphs"),
    ("hotpotqa", hotpotqa_groups, _with(HOTPOT_OK, question=None),
     "field 'question' must be a non-empty string, got null"),
    ("hotpotqa", hotpotqa_groups, _with(HOTPOT_OK, context=[["A"]]),
     "field 'context[0]' must be a [title, sentences] pair (a string and a list of strings), got [\"A\"]"),
    ("hotpotqa", hotpotqa_groups, _with(HOTPOT_OK, supporting_titles="A"),
     "field 'supporting_titles' must be a list of strings, got \"A\""),
    ("wikimultihop", wikimultihop_groups, _with(WIKI_OK, question=[]),
     "field 'question' must be a non-empty string, got []"),
    ("wikimultihop", wikimultihop_groups, _with(WIKI_OK, supporting_facts=["A"]),
     "field 'supporting_facts[0]' must be a [title, sentence index] pair, got \"A\""),
]


@pytest.mark.parametrize(("setting", "loader", "bad", "problem"), RERANK_BAD,
                         ids=[f"{s}-{p.split(' must')[0].split(' is ')[0]}" for s, _, _, p in RERANK_BAD])
def test_reranker_refuses_a_malformed_record_at_its_line(tmp_path: Path, setting: str, loader: Any,
                                                         bad: dict[str, Any], problem: str) -> None:
    good = {"musique": MUSIQUE_OK, "hotpotqa": HOTPOT_OK, "wikimultihop": WIKI_OK}[setting]
    path = write_jsonl(tmp_path / f"{setting}.jsonl", [good, bad])
    data = RerankerData(**{setting: str(path)})
    assert loader(RerankerData(**{setting: str(write_jsonl(tmp_path / "ok.jsonl", [good]))}))  # the good one reads
    with pytest.raises(ValidationError, match=at_line(path, 2, problem + FIX)):
        loader(data)


def test_reranker_musique_hops_read_the_same_checked_records(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [MUSIQUE_OK, _with(MUSIQUE_OK, id="m2", paragraphs=[{"title": "A"}])])
    with pytest.raises(ValidationError, match=at_line(path, 2, "field 'paragraphs[0].paragraph_text' is missing")):
        musique_hop_groups(RerankerData(musique=str(path)), {"musique-m1", "musique-m2"})


def test_reranker_scifact_checks_claims_and_corpus(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"doc_id": 1, "title": "T", "abstract": ["S1.", "S2."]}])
    claims = write_jsonl(tmp_path / "claims.jsonl", [{"id": 1, "claim": "c", "qrels": [1], "bm25_top10": [[1, 3.5]]}])
    data = RerankerData(scifact_claims=str(claims), scifact_corpus=str(corpus))
    assert [g.labels for g in scifact_groups(data)] == [[1]]
    write_jsonl(claims, [{"id": 1, "claim": "c", "qrels": 1}])
    with pytest.raises(ValidationError, match=at_line(claims, 1, "field 'qrels' must be a list of doc ids, got 1")):
        scifact_groups(data)
    write_jsonl(corpus, [{"doc_id": 1, "title": "T", "abstract": "S1. S2."}])
    with pytest.raises(ValidationError, match=at_line(corpus, 1, "field 'abstract' must be a list of strings")):
        scifact_groups(data)


# ----------------------------------------------------------------------------- citation

WICE_OK = {"label": "supported", "claim": "x", "evidence": ["One.", "Two.", "Three."], "supporting_sentences": [[0]],
           "meta": {"id": "w1"}}


@pytest.mark.parametrize(("bad", "problem"), [
    ({"label": "supported", "claim": "x", "evidence": "notalist", "supporting_sentences": 5},
     "field 'evidence' must be a list of strings, got \"notalist\""),
    (_with(WICE_OK, supporting_sentences=5), "field 'supporting_sentences' must be a list of sentence-index sets, got 5"),
    (_with(WICE_OK, supporting_sentences=[[0, -1]]),
     "field 'supporting_sentences[0][1]' must be an index (an integer >= 0), got -1"),
    (_with(WICE_OK, supporting_sentences=[[0], [3]]),
     "field 'supporting_sentences[1]' names sentence 3, past the 3 sentences of 'evidence'"),
    (_with(WICE_OK, label="Supported"),
     "field 'label' must be one of ['supported', 'partially_supported', 'not_supported'], got \"Supported\""),
    (_with(WICE_OK, meta="w1"), "field 'meta' must be an object, got \"w1\""),
])
def test_citation_wice_refuses_a_malformed_record(tmp_path: Path, bad: dict[str, Any], problem: str) -> None:
    path = write_jsonl(tmp_path / "wice.jsonl", [WICE_OK, bad])
    with pytest.raises(ValidationError, match=at_line(path, 2, problem + FIX)):
        wice_pairs(CitationData(sources=["wice"], wice=str(path)))


EXPERTQA_OK = {"question": "q", "claims": [
    {"claim_string": "A is B [1].", "evidence": [{"text": "A is B.", "url": "u1"}], "support": "Complete"},
    {"claim_string": "C is D [2].", "evidence": [{"text": "C is E.", "url": "u2"}], "support": "Missing"},
    {"claim_string": "F.", "evidence": [], "support": "N/A"}]}


@pytest.mark.parametrize(("bad", "problem"), [
    (_with(EXPERTQA_OK, claims=5), "field 'claims' must be a list of claim objects, got 5"),
    (_with(EXPERTQA_OK, claims=["A is B."]), "field 'claims[0]' must be a claim object, got \"A is B.\""),
    (_with(EXPERTQA_OK, claims=[{"claim_string": "A.", "evidence": [{"text": 5}]}]),
     "field 'claims[0].evidence[0].text' must be a string, got 5"),
    (_with(EXPERTQA_OK, claims=[{"claim_string": "A.", "evidence": ["A."]}]),
     "field 'claims[0].evidence[0]' must be an evidence object, got \"A.\""),
    (_with(EXPERTQA_OK, claims=[{"claim_string": "A.", "support": "complete"}]),
     "field 'claims[0].support' must be one of ['Complete', 'Partial', 'Incomplete', 'Missing', 'N/A'], "
     "got \"complete\""),
])
def test_citation_expertqa_refuses_a_malformed_record(tmp_path: Path, bad: dict[str, Any], problem: str) -> None:
    path = write_jsonl(tmp_path / "eq.jsonl", [EXPERTQA_OK])
    pairs = expertqa_pairs(CitationData(sources=["expertqa"], expertqa=str(path)))
    assert [(p.sentence, p.passage, p.label) for p in pairs] == [
        ("A is B.", "A is B.", 1), ("A is B.", "C is E.", 0), ("C is D.", "C is E.", 0), ("C is D.", "A is B.", 0)]
    write_jsonl(path, [EXPERTQA_OK, bad])
    with pytest.raises(ValidationError, match=at_line(path, 2, problem + FIX)):
        expertqa_pairs(CitationData(sources=["expertqa"], expertqa=str(path)))


@pytest.mark.parametrize(("evidence", "problem"), [
    ({"1": [{"sentences": [0, 4], "label": "CONTRADICT"}]},
     "field 'evidence.1[0].sentences' names sentence 4, past the 3 sentences of doc 1's abstract"),
    ({"1": [{"sentences": "0", "label": "SUPPORT"}]},
     "field 'evidence.1[0].sentences' must be a list of sentence indices, got \"0\""),
    ({"1": [{"sentences": [0], "label": "support"}]},
     "field 'evidence.1[0].label' must be one of ['SUPPORT', 'CONTRADICT'], got \"support\""),
    ({"2": [{"sentences": [0], "label": "SUPPORT"}]}, "field 'evidence' cites doc 2, which is not in"),
])
def test_citation_scifact_refuses_a_malformed_rationale(tmp_path: Path, evidence: dict[str, Any], problem: str) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"doc_id": 1, "abstract": ["S1.", "S2.", "S3."]}])
    claims = write_jsonl(tmp_path / "claims.jsonl", [{"id": 7, "claim": "c", "evidence": {}},
                                                     {"id": 8, "claim": "c", "evidence": evidence}])
    with pytest.raises(ValidationError, match=at_line(claims, 2, problem)):
        scifact_pairs(CitationData(sources=["scifact"], scifact_claims=str(claims), scifact_corpus=str(corpus),
                                   scifact_contradict="negative"))


# ----------------------------------------------------------------------------- images


def _coco(root: Path, captions: Any) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "images" / "1.jpg").write_bytes(b"")
    return write_jsonl(root / "captions.jsonl", [
        {"image_id": 1, "file_name": "images/1.jpg", "captions": ["a dog", "a brown dog"]},
        {"image_id": 2, "file_name": "images/1.jpg", "captions": captions}])


def test_coco_refuses_captions_that_are_not_a_list(tmp_path: Path) -> None:
    path = _coco(tmp_path / "coco", "a string not list")
    with pytest.raises(ValidationError, match=at_line(
            path, 2, "field 'captions' must be a list of strings, got \"a string not list\"" + FIX)):
        coco_records(tmp_path / "coco")
    write_jsonl(path, [{"image_id": 1, "file_name": "images/1.jpg", "captions": ["a dog", 5]}])
    with pytest.raises(ValidationError, match=at_line(path, 1, "field 'captions[1]' must be a string, got 5")):
        coco_records(tmp_path / "coco")


def test_coco_reads_good_captions(tmp_path: Path) -> None:
    _coco(tmp_path / "coco", ["a cat ", " "])
    assert [r.captions for r in coco_records(tmp_path / "coco")] == [("a dog", "a brown dog"), ("a cat",)]


def test_coco_dir_that_is_a_file_says_so(tmp_path: Path) -> None:
    path = _coco(tmp_path / "coco", ["a cat"])
    with pytest.raises(ConfigError, match=r"data.coco_dir: '.*captions.jsonl' is a file, not a folder; point it at "
                                          r"the folder that holds captions.jsonl and images/"):
        coco_records(path)


# ----------------------------------------------------------------------------- decomposer


def test_decomposer_refuses_an_empty_source_file(tmp_path: Path) -> None:
    path = tmp_path / REAL_SOURCES["musique"]
    path.parent.mkdir(parents=True)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"data.sources musique .*musique_ans_200.jsonl is empty: no records"):
        load_real("musique", tmp_path)


MUSIQUE_HOPS = [{"question": "Who founded A?", "answer": "B"}, {"question": "Where was #1 born?", "answer": "C"}]
DECOMPOSE_BAD = [
    ("musique", {"question": "Where was the founder of A born?", "question_decomposition": MUSIQUE_HOPS},
     {"question": None, "question_decomposition": MUSIQUE_HOPS}, "field 'question' must be a non-empty string, got null"),
    ("musique", {"question": "Q?", "question_decomposition": MUSIQUE_HOPS}, {"question": "Q?", "question_decomposition": [5]},
     "field 'question_decomposition[0]' must be a {question, answer, paragraph_support_idx} object, got 5"),
    ("break_qdmr", {"question_text": "Q?", "steps": ["return a", "return #1"]},
     {"question_text": "Q?", "steps": "return a"}, "field 'steps' must be a non-empty list of step strings, got \"return a\""),
    ("strategyqa", {"question": "Q?", "decomposition": ["a?", "b #1?"]}, {"question": "Q?"},
     "field 'decomposition' is missing (expected a non-empty list of step strings)"),
    ("hotpotqa", {"question": "Q?", "qdmr_high_level": {"steps": ["return a"]}},
     {"question": "Q?", "qdmr_high_level": {"steps": ["return a"], "step_dependencies": [1]}},
     "field 'qdmr_high_level.step_dependencies[0]' must be a list of step numbers, got 1"),
    ("trec_cast", {"id": "1_1", "raw_utterance": "What is A?", "manual_rewritten_utterance": "What is A?"},
     {"id": "1_2", "raw_utterance": "And it?", "manual_rewritten_utterance": None},
     "field 'manual_rewritten_utterance' must be a non-empty string, got null"),
]


@pytest.mark.parametrize(("name", "good", "bad", "problem"), DECOMPOSE_BAD,
                         ids=[f"{n}-{p.split(' must')[0].split(' is ')[0]}" for n, _, _, p in DECOMPOSE_BAD])
def test_decomposer_refuses_a_malformed_record(tmp_path: Path, name: str, good: dict[str, Any], bad: dict[str, Any],
                                               problem: str) -> None:
    path = write_jsonl(tmp_path / REAL_SOURCES[name], [good])
    assert len(load_real(name, tmp_path)) == 1
    write_jsonl(path, [good, bad])
    with pytest.raises(ValidationError, match=at_line(path, 2, problem + FIX)):
        load_real(name, tmp_path)


def test_decomposer_refuses_a_source_that_gives_no_example(tmp_path: Path) -> None:
    write_jsonl(tmp_path / REAL_SOURCES["hotpotqa"], [{"question": "Q?"}, {"question": "R?", "qdmr_high_level": None}])
    with pytest.raises(ValidationError, match=r"data.sources hotpotqa: none of the 2 record\(s\) of .* gives an example"):
        load_real("hotpotqa", tmp_path)


# ----------------------------------------------------------------------------- the real data still reads


@pytest.mark.shared_data
def test_loaders_read_the_shared_data_as_before(shared_data: Path) -> None:
    d = shared_data
    rr = RerankerData(scifact_claims=str(d / "scifact/claims_dev.jsonl"),
                      scifact_corpus=str(d / "scifact/corpus_subset.jsonl"),
                      hotpotqa=str(d / "hotpotqa/hotpotqa_dev_distractor.jsonl"),
                      musique=str(d / "musique/musique_ans_200.jsonl"),
                      wikimultihop=str(d / "2wikimultihopqa/2wikimultihopqa_dev.jsonl"))
    assert [len(f(rr)) for f in (scifact_groups, hotpotqa_groups, musique_groups, wikimultihop_groups)] == \
        [96, 150, 100, 84]
    cd = CitationData(wice=str(d / "wice/wice_claim_dev.jsonl"),
                      expertqa=str(d / "expertqa/expertqa_domain_test_attribution.jsonl"),
                      scifact_claims=str(d / "scifact/claims_dev.jsonl"),
                      scifact_corpus=str(d / "scifact/corpus_subset.jsonl"))
    assert [len(f(cd)) for f in (wice_pairs, expertqa_pairs, scifact_pairs)] == [180, 860, 327]
    assert len(coco_records(d / "coco_captions")) == 100
    assert [len(load_real(n, d)) for n in ("break_qdmr", "musique", "strategyqa", "hotpotqa", "trec_cast")] == \
        [2445, 100, 129, 72, 680]
