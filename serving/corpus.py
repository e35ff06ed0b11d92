"""Reading and validating corpus files: JSONL, one document per line:

``{"id", "source", "text", "title"?, "date"?, "url"?, "images"?: [{"id","path","caption"?,"alt"?}]}``

A ``date`` is ISO 8601 (``2024-03-12``, ``2024-03``, ``2024``, ``2024-03-12T10:00:00Z``) or a
written date (``12 March 2024``); an empty one is no date
(:func:`searchsmith.models.dates.document_date`).

An image's ``alt`` (a web page's alt text) stands in for its ``caption`` when it has none:
the pipeline places images by their text (caption-paragraph cosine) by default.

Nothing is dropped silently: a bad line is an error naming the file and line, and all
problems of a file are reported together (up to ``max_errors``).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchsmith.models.dates import document_date
from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import (
    RepeatedKeyError,
    check_input_file,
    json_error,
    loads_unique,
    lone_surrogate_of_line,
    utf8_lines,
)
from searchsmith.models.text import is_blank

MAX_SOURCE_CHARS = 200
_OPTIONAL_STR = ("title", "date", "url")
# Direction marks and overrides: a label holding them can print as another label.
_BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def source_label_problem(label: Any, max_chars: int = MAX_SOURCE_CHARS) -> str | None:
    """Why ``label`` cannot name a source, or None when it can.

    A source label is any text a person would write ("Climate Science", "Healthcare /
    Medicine", "Médecine"): up to ``max_chars`` characters, not blank, without control
    characters, line breaks, direction overrides or lone surrogates (not UTF-8 encodable).
    It is never used as a file name as such (see ``searchsmith.serving.index.source_stem``).
    """
    if not isinstance(label, str):
        return f"must be a string, got {type(label).__name__}"
    if not label.strip():
        return "is empty; name the source, e.g. \"Climate Science\""
    if len(label) > max_chars:
        return f"has {len(label)} characters, the limit is {max_chars}; shorten it"
    if label != label.strip():
        return f"{label!r} starts or ends with whitespace; remove it"
    for i, ch in enumerate(label):
        cat = unicodedata.category(ch)
        if cat == "Cs":
            return f"{label!r} holds a lone surrogate at character {i} (not encodable as UTF-8); fix the text"
        if cat == "Cc" or cat in ("Zl", "Zp") or ch in _BIDI_CONTROLS:
            return (f"{label!r} holds the control character U+{ord(ch):04X} at character {i}; "
                    "use printable text")
    return None


def source_key(label: str) -> str:
    """What two labels must not share: NFKC form, case-folded, whitespace collapsed.

    "Climate Science", "climate  science" and "Climate\u00a0Science" have one key: people
    read them as one source, and file systems that ignore case would store them as one.
    """
    return " ".join(unicodedata.normalize("NFKC", label).casefold().split())


def check_source_labels(labels: dict[str, str]) -> None:
    """Refuse distinct labels that share a :func:`source_key`.

    Args:
        labels: label -> where it was first seen (``file:line``), for the message.
    """
    seen: dict[str, str] = {}
    clashes = []
    for label in labels:
        other = seen.setdefault(source_key(label), label)
        if other != label:
            clashes.append(f"{other!r} ({labels[other]}) and {label!r} ({labels[label]})")
    if clashes:
        raise ValidationError(
            "source labels that differ only in case, spacing or Unicode form name one source: "
            + "; ".join(clashes) + ". Spell each source one way in the corpus")


def _check_record(rec: Any, where: str, line: str) -> list[str]:
    if not isinstance(rec, dict):
        return [f"{where}: expected a JSON object, got {type(rec).__name__}"]
    found = lone_surrogate_of_line(line, rec)  # no tokenizer, chunk store or label check takes one
    if found is not None:
        return [f"{where}: {found.problem()}"]
    errs = []
    for key in ("id", "source", "text"):
        if key not in rec:
            errs.append(f"{where}: missing required field {key!r}")
    if "id" in rec:
        if isinstance(rec["id"], bool) or not isinstance(rec["id"], (str, int)):  # true was indexed as "True"
            errs.append(f"{where}: field 'id' must be a string (or a whole number), got "
                        f"{type(rec['id']).__name__}")
        elif isinstance(rec["id"], str) and not rec["id"].strip():
            errs.append(f"{where}: field 'id' is empty; give each document an id of its own (it names the "
                        "document in citations and in --add)")
    if "source" in rec:
        problem = source_label_problem(rec["source"])
        if problem:
            errs.append(f"{where}: field 'source' {problem}")
    if "text" in rec:
        if not isinstance(rec["text"], str):
            errs.append(f"{where}: field 'text' must be a string, got {type(rec['text']).__name__}")
        elif is_blank(rec["text"]):  # "\u0000\u0001" or zero-width characters alone are no text either
            errs.append(f"{where}: field 'text' is empty (nothing but spaces, control or zero-width characters)")
    for key in _OPTIONAL_STR:
        if rec.get(key) is not None and not isinstance(rec[key], str):
            errs.append(f"{where}: field {key!r} must be a string, got {type(rec[key]).__name__}")
    date = rec.get("date")
    if isinstance(date, str) and date.strip() and document_date(date) is None:  # was indexed, then never used
        errs.append(f"{where}: field 'date' {date[:60]!r} is not a date searchsmith reads; write ISO 8601 "
                    "(2024-03-12, 2024-03, 2024 or 2024-03-12T10:00:00Z) or a written date (12 March 2024, "
                    "March 2024), or leave the field out")
    images = rec.get("images")
    if images is not None:
        if not isinstance(images, list):
            errs.append(f"{where}: field 'images' must be a list of {{id, path, caption?}}")
        else:
            for j, im in enumerate(images):
                if not isinstance(im, dict) or not isinstance(im.get("id"), str) or not isinstance(im.get("path"), str):
                    errs.append(f"{where}: images[{j}] needs string fields 'id' and 'path'")
                    continue
                for key in ("caption", "alt"):
                    if im.get(key) is not None and not isinstance(im[key], str):
                        errs.append(f"{where}: images[{j}].{key} must be a string (the image's text), got "
                                    f"{type(im[key]).__name__}")
    return errs


class _Records:
    """What a corpus file's lines and in-memory records share once parsed: each record's
    checks, ids made strings and unique, image paths resolved against ``base``, alt text
    standing in for a missing caption; every problem collected (up to ``max_errors``)."""

    def __init__(self, base: Path, max_errors: int, max_chars: int) -> None:
        for name, value in (("max_errors", max_errors), ("max_chars", max_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name}: expected an int >= 1, got {value!r:.40}")
        self.base, self.max_errors, self.max_chars = base, max_errors, max_chars
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.seen: dict[str, str] = {}  # id -> where it stands ("on line 3")
        self.labels: dict[str, str] = {}

    def full(self) -> bool:
        if len(self.errors) >= self.max_errors:
            self.errors.append("... (more errors not shown)")
            return True
        return False

    def add(self, rec: Any, where: str, line: str, at: str) -> None:
        """Check ``rec`` (``line``: its JSON text); ``where`` prefixes its problems, ``at`` says
        where it stands when a later record repeats its id."""
        problems = _check_record(rec, where, line)
        if problems:
            self.errors.extend(problems)
            return
        rec["id"] = str(rec["id"])
        if len(rec["text"]) > self.max_chars:
            self.errors.append(f"{where}: text of {rec['id']!r} has {len(rec['text'])} characters, the limit is "
                               f"{self.max_chars}; split the document")
            return
        if rec["id"] in self.seen:
            self.errors.append(f"{where}: duplicate id {rec['id']!r} (first {self.seen[rec['id']]}); ids must "
                               "be unique")
            return
        self.seen[rec["id"]] = at
        self.labels.setdefault(rec["source"], where)
        for im in rec.get("images") or []:
            im_path = Path(im["path"])
            im["path"] = str(im_path if im_path.is_absolute() else (self.base / im_path).resolve())
            if not (im.get("caption") or "").strip() and (im.get("alt") or "").strip():
                im["caption"] = im["alt"]  # alt text: the image's text when it has no caption
        self.records.append(rec)

    def result(self, what: str, empty: str) -> list[dict[str, Any]]:
        if self.errors:
            raise ValidationError(f"{what}: {len(self.errors)} problem(s)\n  " + "\n  ".join(self.errors))
        check_source_labels(self.labels)
        if not self.records:
            raise ValidationError(f"{what} is empty: {empty}")
        return self.records


def read_corpus(path: str | Path, *, max_errors: int = 20, max_chars: int = 5_000_000) -> list[dict[str, Any]]:
    """Read and validate a corpus JSONL file.

    Args:
        path: the file.
        max_errors: stop collecting problems after this many.
        max_chars: longest accepted ``text`` of one record (characters).

    Returns:
        Records with ``id`` as a string and image paths resolved against the file's folder.

    Raises:
        ValidationError: missing/empty file, a folder, bytes that are not UTF-8, bad JSON, a
            lone surrogate, missing fields, duplicate ids.
    """
    p = check_input_file(path, "corpus", "expected a JSONL file", error=ValidationError)
    found = _Records(p.parent, max_errors, max_chars)
    lines = list(utf8_lines(p))  # the whole file decodes before any line is judged
    for lineno, line in lines:
        if not line.strip():
            continue
        if found.full():
            break
        where = f"{p}:{lineno}"
        try:
            rec = loads_unique(line)
        except json.JSONDecodeError as exc:
            found.errors.append(f"{where}: not valid JSON ({json_error(exc)})")
            continue
        except RepeatedKeyError as exc:
            found.errors.append(f"{where}: {exc}")
            continue
        found.add(rec, where, line, f"on line {lineno}")
    return found.result(f"corpus {p}", "expected at least one JSON line with id, source and text")


def check_records(records: Iterable[Any], *, max_errors: int = 20, max_chars: int = 5_000_000,
                  base: str | Path | None = None) -> list[dict[str, Any]]:
    """Validate corpus records built in Python as :func:`read_corpus` validates a file's lines.

    ``build_index`` and ``add_documents`` call it, so a list of dicts gets the same checks
    (and the same messages, ``records[i]`` for ``file:line``) as a corpus file.

    Args:
        records: ``{"id", "source", "text", ...}`` dicts.
        base: the folder relative image paths are resolved against (None: the current one).

    Returns:
        Copies of the records (the caller's dicts are left as they are), as :func:`read_corpus`
        returns them.

    Raises:
        ValidationError: ``records`` is not a list of dicts, or :func:`read_corpus`'s record
            problems, each named ``records[i]``.
    """
    if isinstance(records, (str, bytes, Path, dict)) or not isinstance(records, Iterable):
        raise ValidationError(f"records: expected a list of {{id, source, text}} dicts, got {type(records).__name__}"
                              "; read a corpus file with searchsmith.serving.corpus.read_corpus(PATH)")
    found = _Records(Path(base) if base is not None else Path.cwd(), max_errors, max_chars)
    for i, rec in enumerate(records):
        if found.full():
            break
        if isinstance(rec, dict):
            rec = {**rec, **({"images": [dict(im) if isinstance(im, dict) else im for im in rec["images"]]}
                             if isinstance(rec.get("images"), list) else {})}
            try:
                line = json.dumps(rec, ensure_ascii=True)  # a lone surrogate shows as its escape
            except (TypeError, ValueError):
                line = ""  # a value JSON cannot hold: the field checks name it
        else:
            line = ""
        found.add(rec, f"records[{i}]", line, f"at records[{i}]")
    return found.result("records", "expected at least one {id, source, text} dict")


def corpus_files(spec: str) -> list[Path]:
    """The files a corpus argument names: a path, a glob (``'data/*.jsonl'``), or several of
    them separated by commas; sorted, each once.

    Raises:
        ValidationError: a pattern matching nothing, or a named file that does not exist.
    """
    import glob as globlib

    files: list[Path] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        if any(ch in part for ch in "*?["):
            found = sorted(Path(f) for f in globlib.glob(part, recursive=True) if Path(f).is_file())
            if not found:
                raise ValidationError(f"corpus: the pattern {part!r} matches no file; check the path "
                                      "(quote it so the shell does not expand it)")
            files.extend(found)
        else:
            files.append(Path(part))
    if not files:
        raise ValidationError("corpus: no file given; name a JSONL file, several separated by commas, or a glob")
    return list(dict.fromkeys(files))


def read_corpora(spec: str, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`read_corpus` of every file :func:`corpus_files` names; ids must be unique across them."""
    records: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for path in corpus_files(spec):
        for rec in read_corpus(path, **kwargs):
            if rec["id"] in seen:
                raise ValidationError(f"corpus: id {rec['id']!r} is in both {seen[rec['id']]} and {path}; "
                                      "ids must be unique across the files")
            seen[rec["id"]] = path
            records.append(rec)
    return records

