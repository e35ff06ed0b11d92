from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.corpus import read_corpus


def _write(tmp_path, lines):
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_reads_valid_corpus_and_resolves_image_paths(tmp_path) -> None:
    p = _write(tmp_path, [json.dumps({"id": 1, "source": "a", "text": "hello",
                                      "images": [{"id": "i1", "path": "img/x.png"}]})])
    recs = read_corpus(p)
    assert recs[0]["id"] == "1"
    assert recs[0]["images"][0]["path"] == str((tmp_path / "img/x.png").resolve())


def test_empty_corpus(tmp_path) -> None:
    with pytest.raises(ValidationError, match="is empty"):
        read_corpus(_write(tmp_path, [""]))


def test_bad_json_line_names_file_and_line(tmp_path) -> None:
    p = _write(tmp_path, [json.dumps({"id": "a", "source": "s", "text": "x"}), "{not json"])
    with pytest.raises(ValidationError, match=r"c\.jsonl:2: not valid JSON"):
        read_corpus(p)


def test_record_without_text(tmp_path) -> None:
    with pytest.raises(ValidationError, match="missing required field 'text'"):
        read_corpus(_write(tmp_path, [json.dumps({"id": "a", "source": "s"})]))


def test_duplicate_ids(tmp_path) -> None:
    row = json.dumps({"id": "a", "source": "s", "text": "x"})
    with pytest.raises(ValidationError, match="duplicate id 'a' \\(first on line 1\\)"):
        read_corpus(_write(tmp_path, [row, row]))


def test_all_problems_reported_at_once(tmp_path) -> None:
    p = _write(tmp_path, ["[1]", json.dumps({"id": "a", "source": "bad source!", "text": ""})])
    with pytest.raises(ValidationError) as err:
        read_corpus(p)
    msg = str(err.value)
    assert "3 problem(s)" in msg and "expected a JSON object" in msg and "'source'" in msg and "'text' is empty" in msg


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        read_corpus(tmp_path / "nope.jsonl")
