"""make-routing-set / make-pipeline-set: what they refuse to overwrite, and bad source files."""

from __future__ import annotations

import hashlib
import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.main import main
from searchsmith.serving.routing_sets import (
    SET_MARKER,
    cast_routing,
    expertqa_routing,
    multihop_pipeline,
    write_set,
)
from tiny_shared_data import cast_and_multihop, write_jsonl


@pytest.fixture
def data_dir(tmp_path):
    """A tiny copy of the shared data: two CAsT topics and two multi-hop questions."""
    return cast_and_multihop(tmp_path / "data")


def _routing(data_dir, out, *extra: str) -> int:
    return main(["make-routing-set", "cast", "--data-dir", str(data_dir), "--out", str(out), *extra])


def _pipeline(data_dir, out, *extra: str) -> int:
    return main(["make-pipeline-set", "multihop", "--data-dir", str(data_dir), "--out", str(out), *extra])


# -- finding 1: a set folder's files, edited by the user, are not overwritten ---------------------
def test_the_marker_records_the_sha256_of_each_file_written(data_dir, tmp_path) -> None:
    out = tmp_path / "set"
    assert _routing(data_dir, out) == 0
    marker = json.loads((out / SET_MARKER).read_text())
    assert set(marker["files"]) == {"corpus.jsonl", "routing.jsonl"}
    for name, digest in marker["files"].items():
        assert digest == hashlib.sha256((out / name).read_bytes()).hexdigest()
    assert sorted(p.name for p in out.iterdir()) == [SET_MARKER, "corpus.jsonl", "routing.jsonl"]  # no temp left


@pytest.mark.parametrize("edited", ["corpus.jsonl", "routing.jsonl"])
def test_an_edited_routing_set_file_is_kept_unless_force(data_dir, tmp_path, capsys, edited) -> None:
    out = tmp_path / "set"
    assert _routing(data_dir, out) == 0
    assert _routing(data_dir, out) == 0  # unchanged: the set's own files are replaced without --force
    mine = (out / edited).read_text() + '{"id": "my-own", "source": "notes", "text": "kept"}\n'
    (out / edited).write_text(mine)
    capsys.readouterr()
    assert _routing(data_dir, out) == 1
    err = capsys.readouterr().err
    assert f"{edited} was changed since searchsmith wrote it" in err and "--force" in err
    assert "Traceback" not in err
    assert (out / edited).read_text() == mine  # untouched
    assert _routing(data_dir, out, "--force") == 0
    assert "my-own" not in (out / edited).read_text()
    assert _routing(data_dir, out) == 0  # the new marker records the replaced file


def test_an_edited_pipeline_set_is_kept_unless_force(data_dir, tmp_path, capsys) -> None:
    out = tmp_path / "set"
    assert _pipeline(data_dir, out) == 0
    (out / "qa.jsonl").write_text("my edited questions\n")
    capsys.readouterr()
    assert _pipeline(data_dir, out) == 1
    assert "qa.jsonl was changed since searchsmith wrote it" in capsys.readouterr().err
    assert (out / "qa.jsonl").read_text() == "my edited questions\n"
    assert _pipeline(data_dir, out, "--force") == 0
    assert (out / "qa.jsonl").read_text().startswith("{")


def test_a_file_the_set_did_not_write_is_not_overwritten(data_dir, tmp_path, capsys) -> None:
    """A routing set's folder, then the user's own qa.jsonl in it: a pipeline set must not replace it."""
    out = tmp_path / "set"
    assert _routing(data_dir, out) == 0
    (out / "qa.jsonl").write_text("my own questions\n")
    capsys.readouterr()
    assert _pipeline(data_dir, out) == 1
    err = capsys.readouterr().err
    assert "qa.jsonl already there and not written by searchsmith" in err and "--force" in err
    assert (out / "qa.jsonl").read_text() == "my own questions\n"


def test_a_marker_without_checksums_is_treated_conservatively(data_dir, tmp_path, capsys) -> None:
    """A folder written by an older searchsmith (plain-text marker): its files may have been
    edited since, and nothing can tell, so they are replaced only with --force."""
    out = tmp_path / "old"
    out.mkdir()
    (out / SET_MARKER).write_text("written by searchsmith make-routing-set / make-pipeline-set\n")
    (out / "corpus.jsonl").write_text("maybe edited\n")
    assert _routing(data_dir, out) == 1
    err = capsys.readouterr().err
    assert "records no checksums" in err and "corpus.jsonl" in err and "--force" in err
    assert (out / "corpus.jsonl").read_text() == "maybe edited\n"
    assert _routing(data_dir, out, "--force") == 0
    assert "files" in json.loads((out / SET_MARKER).read_text())
    # an old marker beside none of the files the command writes: nothing to lose
    fresh = tmp_path / "old-empty"
    fresh.mkdir()
    (fresh / SET_MARKER).write_text("written by searchsmith make-routing-set / make-pipeline-set\n")
    assert _routing(data_dir, fresh) == 0


# -- finding 2: --out a file, source lines without the fields, empty sources ----------------------
@pytest.mark.parametrize("command", ["routing", "pipeline"])
def test_out_that_is_a_file_is_refused(data_dir, tmp_path, capsys, command) -> None:
    user = tmp_path / "userfile.txt"
    user.write_text("mine\n")
    run = _routing if command == "routing" else _pipeline
    assert run(data_dir, user) == 1
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "--out" in err
    assert user.read_text() == "mine\n"
    assert run(data_dir, user, "--force") == 1  # --force replaces set files, never a file in the folder's place
    assert user.read_text() == "mine\n"


def test_a_set_file_name_that_is_a_folder_is_refused(data_dir, tmp_path, capsys) -> None:
    out = tmp_path / "set"
    (out / "corpus.jsonl").mkdir(parents=True)
    assert _routing(data_dir, out, "--force") == 1
    assert "corpus.jsonl is a folder" in capsys.readouterr().err


def test_source_lines_without_the_fields_are_named_at_their_line(data_dir, tmp_path) -> None:
    cast = data_dir / "trec_cast" / "cast_2019_2022_turns.jsonl"
    cast.write_text('{"x": 1}\n')
    with pytest.raises(ValidationError, match=r"cast_2019_2022_turns.jsonl:1: field 'id' is missing "
                                              r"\(expected an id \(a string or an integer\)\)"):
        cast_routing(data_dir)
    musique = data_dir / "musique" / "musique_ans_200.jsonl"
    musique.write_text('{"id": "m0", "question": "q?", "answer": "a"}\n')
    with pytest.raises(ValidationError, match=r"musique_ans_200.jsonl:1: field 'paragraphs' is missing "
                                              r"\(expected a non-empty list of paragraph objects\)"):
        multihop_pipeline(data_dir)
    musique.write_text('\n{"id": "m0", "question": "q?", "answer": "a", "paragraphs": [{"title": "T"}]}\n')
    with pytest.raises(ValidationError, match=r"musique_ans_200.jsonl:2: field 'paragraphs\[0\].paragraph_text' is "
                                              r"missing \(expected a string\)"):
        multihop_pipeline(data_dir)
    hotpot = data_dir / "hotpotqa" / "hotpotqa_dev_distractor.jsonl"
    musique.write_text(json.dumps({"id": "m0", "question": "q?", "answer": "a", "paragraphs": [
        {"title": "T", "paragraph_text": "p", "is_supporting": True}]}) + "\n")
    hotpot.write_text(json.dumps({"_id": "h", "question": "q?", "answer": "a", "supporting_titles": [],
                                  "context": [["T1"]]}) + "\n")
    with pytest.raises(ValidationError, match=r"hotpotqa_dev_distractor.jsonl:1: field 'context\[0\]' must be a "
                                              r"\[title, sentences\] pair"):
        multihop_pipeline(data_dir)
    expert = data_dir / "expertqa" / "expertqa_r1_questions_by_field.jsonl"
    write_jsonl(expert, [{"qid": "1", "question": "q?"}])
    with pytest.raises(ValidationError, match=r"expertqa_r1_questions_by_field.jsonl:1: field 'field' is missing "
                                              r"\(expected a string\)"):
        expertqa_routing(data_dir)


def test_a_cast_turn_without_its_history_turn_ids_is_refused_not_stripped_of_its_history(data_dir) -> None:
    """Both history fields were optional: a turn with history_utterances and no history_turn_ids
    was paired by zip with nothing, so its question went out with an empty history."""
    cast = data_dir / "trec_cast" / "cast_2019_2022_turns.jsonl"
    rows = [json.loads(line) for line in cast.read_text().splitlines()]
    del rows[2]["history_turn_ids"]
    write_jsonl(cast, rows)
    with pytest.raises(ValidationError, match=r"cast_2019_2022_turns.jsonl:3: field 'history_turn_ids' is missing"):
        cast_routing(data_dir)
    rows[2]["history_turn_ids"] = ["cast2021_1_1"]  # one id for two utterances: the shape's rule
    write_jsonl(cast, rows)
    with pytest.raises(ValidationError, match=r"cast_2019_2022_turns.jsonl:3: field 'history_turn_ids' of turn "
                                              r"\"cast2021_1_3\" has 1 turn id but field 'history_utterances' has 2 utterances"):
        cast_routing(data_dir)
    rows[2]["history_turn_ids"] = ["cast2021_1_1", "cast2021_1_2"]
    write_jsonl(cast, rows)
    _, queries = cast_routing(data_dir)
    assert queries[2]["history"] == [{"role": "user", "content": "topic 1 question 1?"},
                                     {"role": "assistant", "content": "answer 1.1"},
                                     {"role": "user", "content": "topic 1 question 2?"},
                                     {"role": "assistant", "content": "answer 1.2"}]


def test_an_empty_source_file_is_refused(data_dir, tmp_path, capsys) -> None:
    (data_dir / "trec_cast" / "cast_2019_2022_turns.jsonl").write_text("")
    out = tmp_path / "set"
    assert _routing(data_dir, out) == 1
    err = capsys.readouterr().err
    assert "cast_2019_2022_turns.jsonl is empty: no records" in err
    assert not out.exists()


def test_a_source_that_yields_no_document_is_refused(data_dir, tmp_path, capsys) -> None:
    """Lines with the fields, but too few per source: nothing to write, said so (not an empty set, rc 0)."""
    write_jsonl(data_dir / "expertqa" / "expertqa_r1_questions_by_field.jsonl",
                [{"qid": "1", "question": "q?", "field": "Physics"}])
    out = tmp_path / "set"
    assert main(["make-routing-set", "expertqa", "--data-dir", str(data_dir), "--out", str(out)]) == 1
    assert "no documents" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValidationError, match="no documents"):
        write_set(out, [], [{"query": "q"}], "routing.jsonl")


@pytest.mark.parametrize("flag", ["--out", "--data-dir"])
def test_empty_folder_options_are_refused(data_dir, tmp_path, capsys, monkeypatch, flag) -> None:
    monkeypatch.chdir(tmp_path)  # '' would mean this folder
    args = {"--out": str(tmp_path / "set"), "--data-dir": str(data_dir), flag: ""}
    for command in ("make-routing-set", "make-pipeline-set"):
        name = "cast" if command == "make-routing-set" else "multihop"
        assert main([command, name, *(x for kv in args.items() for x in kv)]) == 1
        assert f"{command} {flag} is empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
