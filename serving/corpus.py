"""Reading and validating corpus files (JSONL, the format of DESIGN.md).

``{"id", "source", "text", "title"?, "date"?, "url"?, "images"?: [{"id","path","caption"?}]}``

Nothing is dropped silently: a bad line is an error naming the file and line, and all
problems of a file are reported together (up to ``max_errors``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ValidationError

_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_OPTIONAL_STR = ("title", "date", "url")


def _check_record(rec: Any, where: str) -> list[str]:
    if not isinstance(rec, dict):
        return [f"{where}: expected a JSON object, got {type(rec).__name__}"]
    errs = []
    for key in ("id", "source", "text"):
        if key not in rec:
            errs.append(f"{where}: missing required field {key!r}")
    if "id" in rec and not isinstance(rec["id"], (str, int)):
        errs.append(f"{where}: field 'id' must be a string, got {type(rec['id']).__name__}")
    if "source" in rec:
        src = rec["source"]
        if not isinstance(src, str) or not _SOURCE_NAME.match(src):
            errs.append(f"{where}: field 'source' must be 1-64 characters of letters, digits, '_', '-', '.'; got {src!r}")
    if "text" in rec:
        if not isinstance(rec["text"], str):
            errs.append(f"{where}: field 'text' must be a string, got {type(rec['text']).__name__}")
        elif not rec["text"].strip():
            errs.append(f"{where}: field 'text' is empty")
    for key in _OPTIONAL_STR:
        if rec.get(key) is not None and not isinstance(rec[key], str):
            errs.append(f"{where}: field {key!r} must be a string, got {type(rec[key]).__name__}")
    images = rec.get("images")
    if images is not None:
        if not isinstance(images, list):
            errs.append(f"{where}: field 'images' must be a list of {{id, path, caption?}}")
        else:
            for j, im in enumerate(images):
                if not isinstance(im, dict) or not isinstance(im.get("id"), str) or not isinstance(im.get("path"), str):
                    errs.append(f"{where}: images[{j}] needs string fields 'id' and 'path'")
    return errs


def read_corpus(path: str | Path, *, max_errors: int = 20, max_chars: int = 5_000_000) -> list[dict[str, Any]]:
    """Read and validate a corpus JSONL file.

    Args:
        path: the file.
        max_errors: stop collecting problems after this many.
        max_chars: longest accepted ``text`` of one record (characters).

    Returns:
        Records with ``id`` as a string and image paths resolved against the file's folder.

    Raises:
        ValidationError: missing/empty file, bad JSON, missing fields, duplicate ids.
    """
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"corpus {str(p)!r} does not exist (expected a JSONL file)")
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    with open(p, encoding="utf-8", errors="strict") as fh:
        try:
            lines = list(fh)
        except UnicodeDecodeError as exc:
            raise ValidationError(f"{p}: not UTF-8 text ({exc})") from None
    for lineno, line in enumerate(lines, 1):
        if len(errors) >= max_errors:
            errors.append("... (more errors not shown)")
            break
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        problems = _check_record(rec, where)
        if problems:
            errors.extend(problems)
            continue
        rec["id"] = str(rec["id"])
        if len(rec["text"]) > max_chars:
            errors.append(f"{where}: text of {rec['id']!r} has {len(rec['text'])} characters, the limit is {max_chars}; split the document")
            continue
        if rec["id"] in seen:
            errors.append(f"{where}: duplicate id {rec['id']!r} (first on line {seen[rec['id']]}); ids must be unique")
            continue
        seen[rec["id"]] = lineno
        for im in rec.get("images") or []:
            im_path = Path(im["path"])
            im["path"] = str(im_path if im_path.is_absolute() else (p.parent / im_path).resolve())
        records.append(rec)
    if errors:
        raise ValidationError(f"corpus {p}: {len(errors)} problem(s)\n  " + "\n  ".join(errors))
    if not records:
        raise ValidationError(f"corpus {p} is empty: expected at least one JSON line with id, source and text")
    return records
