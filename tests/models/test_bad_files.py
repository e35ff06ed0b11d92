"""Bad input files are refused at FILE:LINE with the field and the fix, never as a traceback
from deep inside a reader, a tokenizer or ``transformers``: bytes that are not UTF-8, a folder
given for a file, lone surrogates ("\\ud800" in JSON), broken lines of a --history file, and
damaged run folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.jsonl import iter_jsonl, json_error, read_jsonl

# "caf\xe9" in Latin-1: byte 0xE9 is not UTF-8 here
_LATIN1_LINE = b'{"query": "caf\xe9"}\n'


def _lines_file(tmp_path, *lines: bytes, name: str = "d.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"".join(lines))
    return p


# -- not UTF-8 ---------------------------------------------------------------------------------
def test_read_jsonl_names_the_line_and_offset_of_a_byte_that_is_not_utf8(tmp_path) -> None:
    good = b'{"query": "a"}\n'
    p = _lines_file(tmp_path, good, b"\n", _LATIN1_LINE)
    offset = len(good) + 1 + _LATIN1_LINE.index(b"\xe9")
    with pytest.raises(ValidationError) as err:
        read_jsonl(p, ("query",), "--data")
    assert str(err.value) == (f"{p}:3: not UTF-8 text (byte 0xE9 at offset {offset} of the file); "
                              "save the file as UTF-8")
    it = iter_jsonl(p, ("query",))
    assert next(it) == (1, {"query": "a"})  # lines before the bad one are read
    with pytest.raises(ValidationError, match=r"d\.jsonl:3: not UTF-8 text"):
        next(it)


def test_a_corpus_that_is_not_utf8_names_the_line(tmp_path) -> None:
    from searchsmith.serving.corpus import read_corpus

    p = _lines_file(tmp_path, b'{"id": "a", "source": "s", "text": "x"}\n', b'{"id": "b", "source": "s", "text": "\xff"}\n')
    with pytest.raises(ValidationError, match=r"d\.jsonl:2: not UTF-8 text \(byte 0xFF at offset 76 of the file\); "
                       r"save the file as UTF-8"):
        read_corpus(p)


def test_a_history_file_that_is_not_utf8_names_the_line(tmp_path) -> None:
    from searchsmith.serving.cli import read_history_file

    p = _lines_file(tmp_path, b'{"role": "user", "content": "a"}\n', _LATIN1_LINE, name="h.jsonl")
    with pytest.raises(ValidationError, match=r"h\.jsonl:2: not UTF-8 text \(byte 0xE9 at offset 47 of the file\)"):
        read_history_file(str(p))


# -- a folder for a file -----------------------------------------------------------------------
def test_a_folder_given_for_a_file_is_named_a_folder(tmp_path) -> None:
    from searchsmith.serving.cli import read_history_file
    from searchsmith.serving.corpus import read_corpus

    folder = tmp_path / "adir"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"^--data: '.*adir' is a folder, not a file; give the path of a file"):
        read_jsonl(folder, what="--data")
    with pytest.raises(ValidationError, match=r"^corpus: '.*adir' is a folder, not a file"):
        read_corpus(folder)
    with pytest.raises(ValidationError, match=r"^--history: '.*adir' is a folder, not a file"):
        read_history_file(str(folder))


# -- lone surrogates ---------------------------------------------------------------------------
def test_read_jsonl_refuses_a_lone_surrogate_naming_line_field_and_character(tmp_path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text('{"sentence": "ok", "documents": [{"id": "d", "text": "ok"}]}\n'
                 '{"sentence": "ok", "documents": [{"id": "d", "text": "ab\\ud800c"}]}\n', encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        read_jsonl(p, ("sentence",), "--data")
    assert str(err.value) == (f"{p}:2: field 'documents[0].text' holds a lone surrogate (\\ud800) at character 2, "
                              "which is not Unicode text; fix the text's encoding")
    p.write_text('{"q": "a", "b\\uDC00": 1}\n', encoding="utf-8")  # in a field name; hex in capitals
    with pytest.raises(ValidationError, match=r"c\.jsonl:1: a field name holds a lone surrogate \(\\udc00\) at "
                       "character 1"):
        read_jsonl(p)
    p.write_text('{"q": "\\ud83d\\ude00 a pair is one character"}\n', encoding="utf-8")
    assert read_jsonl(p) == [{"q": "\U0001F600 a pair is one character"}]


@pytest.mark.parametrize("field", ["id", "title", "text"])
def test_a_corpus_refuses_a_lone_surrogate_before_any_tokenizer_or_database(tmp_path, field) -> None:
    from searchsmith.serving.corpus import read_corpus

    rec = {"id": "a", "source": "news", "title": "t", "text": "some text"}
    rec[field] += "\ud800"
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": "z", "source": "news", "text": "fine"}) + "\n" + json.dumps(rec) + "\n",
                 encoding="utf-8")
    at = len(rec[field]) - 1
    with pytest.raises(ValidationError, match=rf"c\.jsonl:2: field '{field}' holds a lone surrogate \(\\ud800\) at "
                       rf"character {at}, which is not Unicode text; fix the text's encoding"):
        read_corpus(p)


def test_a_history_file_with_a_lone_surrogate_is_refused(tmp_path) -> None:
    from searchsmith.serving.cli import read_history_file

    h = tmp_path / "h.json"
    h.write_text('[{"role": "user", "content": "Kestrel \\ud800 lone"}]', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"--history .*h\.json: field '\[0\]\.content' holds a lone surrogate "
                       r"\(\\ud800\) at character 8"):
        read_history_file(str(h))
    h.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "\\udfff"}\n', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"h\.json:2: field 'content' holds a lone surrogate \(\\udfff\)"):
        read_history_file(str(h))


def test_a_question_holding_bytes_that_are_not_utf8_is_refused() -> None:
    import os

    from searchsmith.serving.cli import check_question

    arg = os.fsdecode(b"is q\xed\xa0\x80?")  # how sys.argv holds such an argument
    with pytest.raises(ValidationError, match=r"^question: holds a lone surrogate \(\\udced\) at character 4"):
        check_question(arg)
    assert check_question("Médecine ☤?") == "Médecine ☤?"


def test_the_route_command_refuses_a_lone_surrogate_before_loading_anything(tmp_path, capsys) -> None:
    import os

    from searchsmith.serving.main import main

    # the index folder does not exist: the question is refused first
    assert main(["route", os.fsdecode(b"q\xed\xa0\x80"), "--index", str(tmp_path / "none")]) != 0
    err = capsys.readouterr().err
    assert "question: holds a lone surrogate" in err and "Traceback" not in err


def test_cached_embedder_names_the_text_with_a_lone_surrogate() -> None:
    from searchsmith.training.data import CachedEmbedder

    emb = CachedEmbedder("default", None)
    with pytest.raises(ValidationError, match=r"embed: text 1 \('b\\ud800'\) holds a lone surrogate \(\\ud800\) at "
                       "character 1"):
        emb.encode(["a", "b\ud800"])
    assert emb._model is None  # refused before the model loads


# -- --history line numbers --------------------------------------------------------------------
def test_a_broken_history_line_is_named_by_its_line_in_the_file(tmp_path) -> None:
    from searchsmith.serving.cli import read_history_file

    h = tmp_path / "h.jsonl"
    h.write_text('\n{"role": "user", "content": "a"}\n\n{"role": "assistant", "content": \n', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"--history .*h\.jsonl:4: not JSON or JSONL \(Expecting value at "
                       r"column 34\)"):
        read_history_file(str(h))
    h.write_text('\n{"role": "user", "content": "a\u2028b"}\n{"role": "assistant", "content": "c"}\n',
                 encoding="utf-8")  # U+2028 inside a string ends no line
    assert read_history_file(str(h)) == [{"role": "user", "content": "a\u2028b"},
                                         {"role": "assistant", "content": "c"}]


# -- JSON error wording ------------------------------------------------------------------------
def test_a_control_character_is_reported_without_a_doubled_at(tmp_path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"q": "a\tb"}\n', encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        read_jsonl(p)
    assert "(Invalid control character at column 9)" in str(err.value) and "at at" not in str(err.value)
    try:
        json.loads('"x\ty"')
    except json.JSONDecodeError as exc:
        assert json_error(exc) == "Invalid control character at column 3"


# -- damaged run folders -----------------------------------------------------------------------
def _damaged_run(tmp_path, name: str, content: bytes | None = None):
    from export_fixtures import rerank_run

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    f = run / "model" / name
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2] if content is None else content)
    return run, f


def test_export_names_a_truncated_weights_file_and_the_damaged_run(tmp_path) -> None:
    from searchsmith.models.export import export_run

    run, f = _damaged_run(tmp_path, "model.safetensors")
    with pytest.raises(BundleError) as err:
        export_run(run, tmp_path / "out")
    msg = str(err.value)
    assert msg.startswith(f"export: {f} is damaged (")
    assert f"the run folder {str(run)!r} is damaged" in msg and "searchsmith train RECIPE.yaml" in msg
    assert not (tmp_path / "out").exists()


def test_export_names_an_invalid_config_json_and_the_damaged_run(tmp_path) -> None:
    from searchsmith.models.export import export_run

    run, f = _damaged_run(tmp_path, "config.json", b"{\n  ")
    with pytest.raises(BundleError, match=rf"^export: {f} is not valid JSON \(.*\); the run folder .* is damaged"):
        export_run(run, tmp_path / "out")


@pytest.mark.parametrize("content, problem", [(b"[1]", "expected a JSON object of metrics, got list"),
                                              (b"{not json", "not valid JSON")])
def test_export_refuses_a_runs_damaged_metrics(tmp_path, content, problem) -> None:
    """A metrics.json holding [1] ended export in an AttributeError; one that was not JSON let the
    bundle go out without its held-out figures, silently (found by probing, 2026-12-06)."""
    from export_fixtures import rerank_run
    from searchsmith.models.export import export_run

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    (run / "metrics.json").write_bytes(content)
    with pytest.raises(BundleError, match=rf"metrics\.json: {problem}.*train the run again"):
        export_run(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_loading_a_truncated_model_names_the_file(tmp_path) -> None:
    from searchsmith.models.reranker import load_reranker

    run, f = _damaged_run(tmp_path, "model.safetensors")
    with pytest.raises(BundleError, match=rf"^reranker: {f} is damaged \(.*\); the folder is damaged: copy it again"):
        load_reranker(run / "model")


def test_eval_data_that_is_a_folder_is_called_a_folder(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main
    from searchsmith.training.evaluate_cite import read_cite_items
    from searchsmith.training.evaluate_read import read_items

    for read in (read_cite_items, read_items):
        with pytest.raises(ConfigError, match="is a folder, not a file"):
            read(tmp_path)
    assert main(["eval", "images", "--data", str(tmp_path), "--bundle", str(tmp_path / "none")]) == 1
    assert "is a folder, not a file" in capsys.readouterr().err


def test_ask_refuses_a_question_with_a_lone_surrogate_before_loading(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    assert main(["ask", "which port\udced?", "--index", str(tmp_path / "none")]) == 1
    assert "question: holds a lone surrogate (\\udced) at character 10" in capsys.readouterr().err


def test_the_module_helpers_answer_errors_in_one_line_from_any_folder(tmp_path) -> None:
    """`python -m searchsmith.training.evaluate_read write-eval` from outside the repository ended
    in a ConfigError traceback (its default recipe path is relative)."""
    import subprocess
    import sys

    from searchsmith.training.config import shipped_recipe

    assert shipped_recipe("recipes/reader/minilm_full.yaml").is_file()  # found from any folder
    assert shipped_recipe("recipes/none.yaml") == Path("recipes/none.yaml")  # not one of ours: as given
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe: reader\nnot_a_key: 1\n")
    for module, argv in (("searchsmith.training.evaluate_read", ["write-eval", "o.jsonl", "--recipe", str(bad)]),
                         ("searchsmith.training.cite_data", ["--write-eval", "o.jsonl", "--recipe", str(bad)])):
        done = subprocess.run([sys.executable, "-m", module, *argv], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.startswith(f"python -m {module}: error: "), done.stderr[-500:]


def test_a_byte_order_mark_at_the_start_is_not_text(tmp_path) -> None:
    """A file saved by a Windows editor starts with a UTF-8 byte order mark: it was refused as
    'not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) ...)'. Now it is read, and
    a bad byte after it is still named at its offset in the file."""
    from searchsmith.models.jsonl import read_utf8
    from searchsmith.serving.corpus import read_corpus

    bom = b"\xef\xbb\xbf"
    p = _lines_file(tmp_path, bom + b'{"id": "a", "source": "s", "text": "x"}\n')
    assert read_corpus(p) == [{"id": "a", "source": "s", "text": "x"}]
    assert read_jsonl(p, ("id",), "--data") == [{"id": "a", "source": "s", "text": "x"}]
    assert read_utf8(p).startswith('{"id"')
    bad = _lines_file(tmp_path, bom + b'{"query": "caf\xe9"}\n', name="bad.jsonl")
    for read in (lambda: read_jsonl(bad, ("query",), "--data"), lambda: read_utf8(bad)):
        with pytest.raises(ValidationError, match=r"bad\.jsonl:1: not UTF-8 text \(byte 0xE9 at offset 17 "):
            read()
