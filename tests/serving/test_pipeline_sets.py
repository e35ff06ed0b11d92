"""``searchsmith make-pipeline-set multihop``: MuSiQue + HotpotQA into a corpus and QA items."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.main import main
from searchsmith.serving.routing_sets import multihop_pipeline
from tiny_shared_data import write_jsonl


@pytest.fixture
def data_dir(tmp_path):
    shared = {"title": "Shared", "paragraph_text": "A paragraph two questions share.", "is_supporting": False}
    write_jsonl(tmp_path / "musique" / "musique_ans_200.jsonl", [
        {"id": f"m{i}", "question": f"musique question {i}?", "answer": f"a{i}",
         "paragraphs": [{"title": f"Gold {i}", "paragraph_text": f"gold text {i}", "is_supporting": True},
                        {"title": f"Other {i}", "paragraph_text": f"distractor {i}", "is_supporting": False},
                        shared]}
        for i in range(3)])
    write_jsonl(tmp_path / "hotpotqa" / "hotpotqa_dev_distractor.jsonl", [
        {"_id": "h0", "question": "hotpot question?", "answer": "yes", "supporting_titles": ["T1", "T2"],
         "context": [["T1", ["First. ", "Second."]], ["T2", ["Third."]], ["T3", ["Noise."]]]}])
    return tmp_path


def test_multihop_set_pools_paragraphs_and_keeps_gold_ids(data_dir) -> None:
    corpus, items = multihop_pipeline(data_dir)
    assert len(corpus) == 3 * 2 + 1 + 3  # the shared paragraph kept once
    assert {d["source"] for d in corpus} == {"musique", "hotpotqa"}
    assert [i["id"] for i in items] == ["musique-m0", "hotpotqa-h0", "musique-m1", "musique-m2"]  # alternating
    by_id = {d["id"]: d for d in corpus}
    m0, h0 = items[0], items[1]
    assert [by_id[d]["title"] for d in m0["supporting"]] == ["Gold 0"] and m0["answer"] == "a0"
    assert [by_id[d]["text"] for d in h0["supporting"]] == ["First. Second.", "Third."]


def test_make_pipeline_set_command_writes_both_files(data_dir, tmp_path, capsys) -> None:
    out = tmp_path / "set"
    assert main(["make-pipeline-set", "multihop", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == {"out": str(out), "documents": 10, "sources": 2, "questions": 4}
    qa = [json.loads(x) for x in (out / "qa.jsonl").read_text().splitlines()]
    assert set(qa[0]) == {"id", "query", "answer", "supporting"}


def test_missing_data_names_the_file(tmp_path) -> None:
    with pytest.raises(ValidationError, match=r"musique_ans_200.jsonl not found; pass --data-dir"):
        multihop_pipeline(tmp_path)


def test_questions_keeps_the_first_items_and_only_their_candidates(data_dir, tmp_path, capsys) -> None:
    corpus, items = multihop_pipeline(data_dir, questions=2)
    assert [i["id"] for i in items] == ["musique-m0", "hotpotqa-h0"]
    # m0's three candidates (the shared one included) and h0's three; m1's and m2's own are gone
    assert sorted(d["title"] for d in corpus) == ["Gold 0", "Other 0", "Shared", "T1", "T2", "T3"]
    assert all(s in {d["id"] for d in corpus} for it in items for s in it["supporting"])
    out = tmp_path / "small"
    assert main(["make-pipeline-set", "multihop", "--data-dir", str(data_dir), "--out", str(out),
                 "--questions", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["documents"] == 3
    assert main(["make-pipeline-set", "multihop", "--data-dir", str(data_dir), "--out", str(out),
                 "--questions", "-1"]) == 1


def test_2wikimultihop_set_names_its_gold_paragraphs(tmp_path, capsys) -> None:
    from searchsmith.serving.routing_sets import wikimultihop_pipeline

    write_jsonl(tmp_path / "2wikimultihopqa" / "2wikimultihopqa_dev.jsonl", [
        {"_id": "w0", "question": "Who directed the film Z?", "answer": "Ann",
         "supporting_facts": [["Z", 0], ["Ann", 0], ["Z", 1]],
         "context": [["Z", ["Z is a film", "directed by Ann."]], ["Ann", ["Ann was born in 1900."]],
                     ["Noise", ["Unrelated."]]]},
        {"_id": "w1", "question": "Where was Ann born?", "answer": "Oslo", "supporting_facts": [["Ann", 0]],
         "context": [["Ann", ["Ann was born in 1900."]], ["Other", ["Other text."]]]}])
    corpus, items = wikimultihop_pipeline(tmp_path)
    by_id = {d["id"]: d for d in corpus}
    assert len(corpus) == 4  # Ann's paragraph kept once
    assert [by_id[d]["title"] for d in items[0]["supporting"]] == ["Z", "Ann"]  # each gold page once
    assert by_id[items[0]["supporting"][0]]["text"] == "Z is a film directed by Ann."
    assert items[1]["supporting"] == [items[0]["supporting"][1]]
    small, first = wikimultihop_pipeline(tmp_path, questions=1)
    assert [i["id"] for i in first] == ["2wikimultihop-w0"] and len(small) == 3
    out = tmp_path / "set"
    assert main(["make-pipeline-set", "2wikimultihop", "--data-dir", str(tmp_path), "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["questions"] == 2
    with pytest.raises(ValidationError, match=r"2wikimultihopqa_dev.jsonl not found"):
        wikimultihop_pipeline(tmp_path / "missing")


def test_a_corpus_the_project_did_not_write_is_not_overwritten(data_dir, tmp_path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "corpus.jsonl").write_text("my own corpus\n")
    args = ["make-pipeline-set", "multihop", "--data-dir", str(data_dir), "--out", str(out)]
    assert main(args) == 1
    assert "corpus.jsonl already there and not written by searchsmith" in capsys.readouterr().err
    assert (out / "corpus.jsonl").read_text() == "my own corpus\n"  # untouched
    assert main([*args, "--force"]) == 0 and "my own corpus" not in (out / "corpus.jsonl").read_text()
    assert main(args) == 0  # a set it wrote is replaced without --force
