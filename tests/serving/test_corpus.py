from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.corpus import (
    MAX_SOURCE_CHARS,
    check_records,
    read_corpus,
    source_key,
    source_label_problem,
)


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


def test_alt_text_stands_in_for_a_missing_caption(tmp_path) -> None:
    """Issue 17, item 6: images place by their text; a web page's alt text is that text."""
    p = _write(tmp_path, [json.dumps({"id": 1, "source": "a", "text": "hello", "images": [
        {"id": "i1", "path": "x.png", "alt": "A bar chart of sales"},
        {"id": "i2", "path": "y.png", "caption": "The real caption", "alt": "alt text"},
        {"id": "i3", "path": "z.png", "caption": " ", "alt": "fallback alt"},
        {"id": "i4", "path": "w.png"}]})])
    ims = read_corpus(p)[0]["images"]
    assert [im.get("caption") for im in ims] == ["A bar chart of sales", "The real caption", "fallback alt", None]


@pytest.mark.parametrize("key", ["caption", "alt"])
def test_an_image_text_that_is_not_a_string_names_the_field(tmp_path, key) -> None:
    p = _write(tmp_path, [json.dumps({"id": 1, "source": "a", "text": "hello",
                                      "images": [{"id": "i1", "path": "x.png", key: 42}]})])
    with pytest.raises(ValidationError, match=rf"images\[0\]\.{key} must be a string"):
        read_corpus(p)


def test_a_date_it_cannot_read_names_the_line_and_the_forms_it_reads(tmp_path) -> None:
    """Such a date was indexed and then never used (no timeline event) without a word."""
    good = ["2024-03-12", "2024-03", "2024", "2024-03-12T10:00:00Z", "12 March 2024", "", "  "]
    p = _write(tmp_path, [json.dumps({"id": i, "source": "a", "text": "t", "date": d}) for i, d in enumerate(good)])
    assert [r.get("date") for r in read_corpus(p)] == good  # kept as written
    p = _write(tmp_path, [json.dumps({"id": 1, "source": "a", "text": "t", "date": "2024-03-12"}),
                          json.dumps({"id": 2, "source": "a", "text": "t", "date": "last Tuesday"}),
                          json.dumps({"id": 3, "source": "a", "text": "t", "date": "2024-02-30"})])
    with pytest.raises(ValidationError) as err:
        read_corpus(p)
    msg = str(err.value)
    assert "c.jsonl:2: field 'date' 'last Tuesday' is not a date" in msg and "c.jsonl:3: field 'date' '2024-02-30'" in msg
    assert "ISO 8601" in msg and "leave the field out" in msg and "c.jsonl:1" not in msg


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
    p = _write(tmp_path, ["[1]", json.dumps({"id": "a", "source": "bad\tsource", "text": ""})])
    with pytest.raises(ValidationError) as err:
        read_corpus(p)
    msg = str(err.value)
    assert "3 problem(s)" in msg and "expected a JSON object" in msg and "'source'" in msg and "'text' is empty" in msg


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        read_corpus(tmp_path / "nope.jsonl")


# -- source labels ----------------------------------------------------------
@pytest.mark.parametrize("label", ["Climate Science", "Healthcare / Medicine", "Médecine ☤", "R&D: \"v2\" (draft)",
                                   "東京の天気", "x" * MAX_SOURCE_CHARS, "cooking"])
def test_free_text_source_labels_are_read_as_written(tmp_path, label) -> None:
    p = _write(tmp_path, [json.dumps({"id": "a", "source": label, "text": "hello"}, ensure_ascii=False)])
    assert read_corpus(p)[0]["source"] == label  # the old reader refused all but the last


@pytest.mark.parametrize("line, msg", [
    ('{"id": "a", "source": "a\\ud800b", "text": "x"}', "lone surrogate"),
    ('{"id": "a", "source": "a\\nb", "text": "x"}', "control character U\\+000A"),
    ('{"id": "a", "source": "a\\u202eb", "text": "x"}', "control character U\\+202E"),
    ('{"id": "a", "source": " Climate", "text": "x"}', "starts or ends with whitespace"),
    ('{"id": "a", "source": "   ", "text": "x"}', "is empty"),
    ('{"id": "a", "source": 7, "text": "x"}', "must be a string, got int"),
    (json.dumps({"id": "a", "source": "x" * (MAX_SOURCE_CHARS + 1), "text": "x"}),
     f"has {MAX_SOURCE_CHARS + 1} characters, the limit is {MAX_SOURCE_CHARS}"),
])
def test_bad_source_labels_name_the_line_and_the_fix(tmp_path, line, msg) -> None:
    with pytest.raises(ValidationError, match=r"c\.jsonl:1: field 'source' .*" + msg):
        read_corpus(_write(tmp_path, [line]))


def test_labels_that_read_as_one_source_are_refused(tmp_path) -> None:
    rows = [{"id": "a", "source": "Climate Science", "text": "x"}, {"id": "b", "source": "cooking", "text": "y"},
            {"id": "c", "source": "climate  science", "text": "z"}]
    with pytest.raises(ValidationError) as err:
        read_corpus(_write(tmp_path, [json.dumps(r) for r in rows]))
    msg = str(err.value)
    assert "'Climate Science' (" in msg and "c.jsonl:1)" in msg and "'climate  science' (" in msg and "c.jsonl:3)" in msg
    assert "Spell each source one way" in msg


def test_source_key_folds_case_spacing_and_unicode_form() -> None:
    assert source_key("Climate Science") == source_key("climate\u00a0 SCIENCE") == "climate science"
    assert source_key("Caf\u00e9") == source_key("Cafe\u0301")  # NFC vs NFD
    assert source_key("Climate") != source_key("Climate Science")
    assert source_label_problem("Healthcare / Medicine") is None


@pytest.mark.parametrize("value, problem", [
    (True, "field 'id' must be a string .*got bool"),  # was indexed as "True" (probing, 2026-12-06)
    ("", "field 'id' is empty"),  # was accepted
    ("  ", "field 'id' is empty"),
    (1.5, "field 'id' must be a string .*got float"),
])
def test_an_id_that_names_no_document_is_refused(tmp_path, value, problem) -> None:
    p = _write(tmp_path, [json.dumps({"id": value, "source": "a", "text": "hello"})])
    with pytest.raises(ValidationError, match=rf"c\.jsonl:1: {problem}"):
        read_corpus(p)


def test_a_record_that_writes_a_key_twice_is_refused_at_its_line(tmp_path) -> None:
    """json.loads keeps the last 'id': the first document would be indexed under the wrong id."""
    p = _write(tmp_path, ['{"id": "a", "source": "s", "text": "one", "id": "b"}',
                          json.dumps({"id": "c", "source": "s", "text": "two"})])
    with pytest.raises(ValidationError, match=r"c.jsonl:1: key 'id' is written twice in one object \(at id\)"):
        read_corpus(p)


def test_a_text_of_control_or_zero_width_characters_alone_is_empty(tmp_path) -> None:
    """Audit 2026-12-07: "\\u0000\\u0001" was indexed as a document (empty text was refused)."""
    p = _write(tmp_path, [json.dumps({"id": "a", "source": "s", "text": "\u0000\u0001"}),
                          json.dumps({"id": "b", "source": "s", "text": "\u200b \u200b"})])
    with pytest.raises(ValidationError) as err:
        read_corpus(p)
    assert "c.jsonl:1: field 'text' is empty" in str(err.value) and "c.jsonl:2: field 'text' is empty" in str(err.value)


def test_records_built_in_python_get_the_file_checks_named_by_position(tmp_path) -> None:
    """build_index(list of dicts) once raised KeyError 'text', TypeError, or sqlite's
    IntegrityError for a repeated id, and took a date it could not read."""
    with pytest.raises(ValidationError) as err:
        check_records([{"id": "a", "source": "s"}, {"id": "b", "source": "s", "text": 5},
                       {"id": "c", "source": "s", "text": "t", "date": "soon"}, {"id": "d", "source": "s", "text": "t"},
                       {"id": "d", "source": "s", "text": "u"}, "not a dict", {"id": "e", "source": "s", "text": "\ud800"}])
    msg = str(err.value)
    for part in ("records[0]: missing required field 'text'", "records[1]: field 'text' must be a string, got int",
                 "records[2]: field 'date' 'soon' is not a date", "records[4]: duplicate id 'd' (first at records[3])",
                 "records[5]: expected a JSON object, got str", "records[6]: ", "surrogate"):
        assert part in msg
    for bad in ("corpus.jsonl", {"id": "a"}, tmp_path, 5):
        with pytest.raises(ValidationError, match="records: expected a list of"):
            check_records(bad)
    with pytest.raises(ValidationError, match="records is empty"):
        check_records([])
    mine = [{"id": 7, "source": "s", "text": "t 😀", "images": [{"id": "i", "path": "x.png", "alt": "A chart"}]}]
    got = check_records(mine, base=tmp_path)
    assert got[0]["id"] == "7" and got[0]["images"][0] == {"id": "i", "path": str(tmp_path.resolve() / "x.png"),
                                                           "alt": "A chart", "caption": "A chart"}
    assert mine[0]["id"] == 7 and mine[0]["images"][0] == {"id": "i", "path": "x.png", "alt": "A chart"}  # untouched
    assert check_records(got) == got  # what read_corpus / check_records return passes again unchanged


def test_read_corpus_refuses_a_path_that_is_no_path_and_limits_below_one(tmp_path) -> None:
    """read_corpus(None) was a raw TypeError; max_errors=0 refused a valid file with "(more
    errors not shown)" and nothing else."""
    good = _write(tmp_path, [json.dumps({"id": 1, "source": "a", "text": "hello"})])
    for bad in (None, 5, ["c.jsonl"], ""):
        with pytest.raises(ValidationError, match="corpus: expected the path of a file"):
            read_corpus(bad)
    for kw in ({"max_errors": 0}, {"max_errors": -1}, {"max_chars": "x"}, {"max_chars": True}):
        with pytest.raises(ValidationError, match=r"max_(errors|chars): expected an int >= 1"):
            read_corpus(good, **kw)
    assert read_corpus(good, max_errors=1)[0]["id"] == "1"
