"""The one way project files of records are read: JSONL (eval and training data, corpora,
``--history``), each bad line answered at ``FILE:LINE`` with the fix.

A path that is a folder or missing, bytes that are not UTF-8, a line that is not JSON and a
string holding a lone surrogate (JSON's "\\ud800" escape, which Python decodes into a str that no
tokenizer, database or encoder accepts) are each refused here, never deep inside a model. The
HTTP server runs the same surrogate walk over request bodies (``serving/schemas.py``).

This module sits on the ground floor: it imports nothing from ``serving`` or ``training``.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchsmith.models.config import is_int
from searchsmith.models.errors import ConfigError, ValidationError

MAX_SHOWN_ERRORS = 20


def check_input_file(path: str | Path, what: str, hint: str | None = None, *,
                     error: type[Exception] = ConfigError) -> Path:
    """``path`` as a Path, refused when it is a folder or does not exist.

    Args:
        what: the flag or setting that named it, first in the message (``"--data"``).
        hint: the fix for a missing file (default "check the path").
        error: the class raised (``ValidationError`` where the file is a request's input).
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise error(f"{what}: expected the path of a file (a str or pathlib.Path), got {path!r:.60}")
    p = Path(path)
    if p.is_dir():
        raise error(f"{what}: {str(p)!r} is a folder, not a file; give the path of a file in it")
    if not p.is_file():
        raise error(f"{what}: file {str(p)!r} does not exist ({hint or 'check the path'})")
    return p


def _not_utf8(p: Path, lineno: int, offset: int, byte: int) -> ValidationError:
    return ValidationError(f"{p}:{lineno}: not UTF-8 text (byte 0x{byte:02X} at offset {offset} of the file); "
                           "save the file as UTF-8")


def utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` of each line of a UTF-8 file, read and decoded one line at a time.

    Lines end at "\\n" only (a JSON string may hold U+2028, which ``str.splitlines`` would cut
    at); a UTF-8 sequence never holds the byte 0x0A, so decoding line by line is exact. A byte
    order mark at the start of the file (Windows editors write one) is not part of the text.

    Raises:
        ValidationError: ``FILE:LINE: not UTF-8 text (byte .. at offset N of the file)``.
    """
    offset = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if n == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, offset = raw[len(codecs.BOM_UTF8):], len(codecs.BOM_UTF8)
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, n, offset + exc.start, raw[exc.start]) from None
            offset += len(raw)


def read_utf8(path: Path) -> str:
    """The whole text of a UTF-8 file (a byte order mark at its start is not text).

    Raises:
        ValidationError: as :func:`utf8_lines`, naming the line of the first bad byte.
    """
    raw = path.read_bytes()
    skip = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start = skip + exc.start
        raise _not_utf8(path, raw.count(b"\n", 0, start) + 1, start, raw[start]) from None


def json_error(exc: json.JSONDecodeError) -> str:
    """``"<what> at column N"`` of a JSON error (some messages already end in "at")."""
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"


def lone_surrogate_at(text: str) -> int | None:
    """Index of the first lone surrogate of ``text`` (what UTF-8 cannot encode), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


@dataclass(frozen=True)
class LoneSurrogate:
    """Where :func:`find_lone_surrogate` found one: the string at ``loc`` (keys and list indices
    from the top; for ``in_name``, the object one of whose field names holds it)."""

    loc: tuple[Any, ...]
    index: int  # character index in the string
    char: str
    in_name: bool

    @property
    def field(self) -> str:
        """``loc`` as a path: ``documents[0].text``."""
        return _path(self.loc)

    def problem(self, name: str | None = None) -> str:
        """``field 'text' holds a lone surrogate (\\ud800) at character 3, ...; fix the text's
        encoding`` (``name`` stands in for the field path)."""
        where = name or self.field
        what = (f"a field name{f' in {where!r}' if where else ''}" if self.in_name
                else f"field {where!r}" if where else "the text")
        return (f"{what} holds a lone surrogate ({ascii(self.char)[1:-1]}) at character {self.index}, "
                "which is not Unicode text; fix the text's encoding")


def find_lone_surrogate(value: Any) -> LoneSurrogate | None:
    """The first string (value or field name, in document order) of a parsed JSON value that
    UTF-8 cannot encode, or None.

    Walks with an explicit stack, not recursion: a deeply nested value cannot overflow it.
    """
    for loc, item in _nodes(value):
        if isinstance(item, str):
            at = lone_surrogate_at(item)
            if at is not None:
                return LoneSurrogate(loc, at, item[at], in_name=False)
        elif isinstance(item, dict):
            for k in item:
                at = lone_surrogate_at(k) if isinstance(k, str) else None
                if at is not None:
                    return LoneSurrogate(loc, at, k[at], in_name=True)
    return None


# the JSON escape of a surrogate code point (\ud800-\udfff): the only way a line decoded as
# strict UTF-8 yields one, so a line without it is not walked
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_unicode(value: Any, field: str) -> Any:
    """``value`` (a string, or a parsed JSON value: every string and field name in it), refused
    when it holds a lone surrogate, which no tokenizer and no UTF-8 file takes (a Python string
    made from bytes that are not UTF-8, with ``surrogateescape``).

    Raises:
        ValidationError: ``FIELD[path]: holds a lone surrogate (\\udced) at character N ...``.
    """
    if isinstance(value, str):
        at = lone_surrogate_at(value)
        found = None if at is None else LoneSurrogate((), at, value[at], in_name=False)
    else:
        found = find_lone_surrogate(value)
    if found is not None:
        where = found.field if not found.field or found.field.startswith("[") else "." + found.field
        raise ValidationError(f"{field}{where}: holds a lone surrogate ({ascii(found.char)[1:-1]}) at character "
                              f"{found.index}, which is not Unicode text (bytes that are not UTF-8?); pass UTF-8 text")
    return value


class RepeatedKeyError(ValueError):
    """A JSON object that names one key twice (``{"id": "a", "id": "b"}``): JSON parsers keep
    the last value and lose the first without a word, so the project refuses it.

    Attributes:
        loc: the object holding it, from the top (keys and list indices; ``()`` the top object).
        key: the key written twice.
    """

    def __init__(self, loc: tuple[Any, ...], key: str) -> None:
        self.loc, self.key = loc, key
        super().__init__(self.problem())

    @property
    def field(self) -> str:
        """Where the key stands as a path: ``documents[0].text`` (``text`` for a top-level key)."""
        return _path((*self.loc, self.key))

    def problem(self) -> str:
        """``key 'id' is written twice in one object (at documents[0].id); ...``."""
        return (f"key {self.key!r} is written twice in one object (at {self.field}); JSON readers keep only "
                "the last value, so the first would be lost: write each key once")


class _Repeated(dict):  # an object that named ``repeated`` twice: marked for the walk
    repeated: str = ""


def loads_unique(text: str | bytes) -> Any:
    """``json.loads(text)``, refusing an object that names one key twice.

    The C parser reads as it always does; the check costs one Python call per object, and the
    walk to the repeated key runs only when there is one.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON (as ``json.loads``).
        RepeatedKeyError: an object writes a key twice; ``loc``/``field`` say where (the first
            such object in document order).
    """
    found = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        out = dict(items)
        if len(out) == len(items):
            return out
        found = True
        marked, seen = _Repeated(out), set()
        for key, _ in items:
            if key in seen:
                marked.repeated = key
                break
            seen.add(key)
        return marked

    value = json.loads(text, object_pairs_hook=pairs)
    if found:
        loc, item = next((loc, item) for loc, item in _nodes(value) if isinstance(item, _Repeated))
        raise RepeatedKeyError(loc, item.repeated)
    return value


def _nodes(value: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """``(location, node)`` of every node of a parsed JSON value, in document order; an explicit
    stack, not recursion, so a deeply nested value cannot overflow it."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        loc, item = stack.pop()
        yield loc, item
        if isinstance(item, dict):
            stack.extend(((*loc, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*loc, i), v) for i, v in reversed(list(enumerate(item))))


def _path(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")


def lone_surrogate_of_line(line: str, record: Any) -> LoneSurrogate | None:
    """:func:`find_lone_surrogate` of ``record``, parsed from the JSON text ``line`` (which
    must have been decoded strictly); None at once for a line holding no surrogate escape."""
    return find_lone_surrogate(record) if _SURROGATE_ESCAPE.search(line) else None


def _parse_line(p: Path, n: int, line: str, required: Sequence[str]) -> tuple[dict[str, Any] | None, str]:
    """(record, "") for a good line, (None, "file:line: problem; fix") for a bad one."""
    try:
        rec = loads_unique(line)
    except json.JSONDecodeError as exc:
        return None, f"{p}:{n}: not valid JSON ({json_error(exc)}); each line must be one JSON object"
    except RepeatedKeyError as exc:
        return None, f"{p}:{n}: {exc}"
    if not isinstance(rec, dict):
        return None, f"{p}:{n}: expected a JSON object, got {type(rec).__name__}"
    found = lone_surrogate_of_line(line, rec)
    if found is not None:
        return None, f"{p}:{n}: {found.problem()}"
    missing = [k for k in required if k not in rec]
    if missing:
        return None, f"{p}:{n}: missing field(s) {missing}; required: {list(required)}"
    return rec, ""


def _lines(path: str | Path, required: Sequence[str], what: str,
           missing_hint: str | None) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """``(line_number, record or None, problem)`` for each non-blank line of a JSONL file."""
    p = check_input_file(path, what, missing_hint)
    for n, line in utf8_lines(p):
        if line.strip():
            yield (n, *_parse_line(p, n, line, required))


def iter_jsonl(path: str | Path, required: Sequence[str] = (), what: str = "data", *,
               missing_hint: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line, stopping at the first bad one.

    Raises:
        ConfigError: the file does not exist or is a folder (``what`` and ``missing_hint`` say
            where it was set and how to fix it).
        ValidationError: a line is not UTF-8, not JSON, not an object, holds a lone surrogate
            or lacks a ``required`` field (``file:line: ...``).
    """
    for n, rec, error in _lines(path, required, what, missing_hint):
        if rec is None:
            raise ValidationError(error)
        yield n, rec


def read_jsonl(path: str | Path, required: Sequence[str] = (), what: str = "data", *,
               missing_hint: str | None = None, allow_empty: bool = False,
               check: Callable[[dict[str, Any]], list[str]] | None = None) -> list[dict[str, Any]]:
    """Every record of a JSONL file, each checked to be an object with the ``required`` fields.

    Every bad line is reported at once (the first :data:`MAX_SHOWN_ERRORS` shown), each as
    ``file:line: problem``.

    Args:
        what: what the file is, for the messages (``"routing data"``, ``"--data"``).
        missing_hint: the fix named when the file does not exist.
        allow_empty: return ``[]`` for a file without records instead of raising.
        check: a record's further problems (``"'sources' must be a list ..."``), each reported
            at its ``file:line`` with the others.

    Raises:
        ConfigError: the file does not exist or is a folder.
        ValidationError: bad lines (as :func:`iter_jsonl`'s), or no record (unless ``allow_empty``).
    """
    p = Path(path)
    out, errors = [], []
    for n, rec, error in _lines(p, required, what, missing_hint):
        if rec is None:
            errors.append(error)
        else:
            errors.extend(f"{p}:{n}: {problem}" for problem in (check(rec) if check is not None else ()))
            out.append(rec)
    if len(errors) == 1:
        raise ValidationError(errors[0])
    if errors:
        more = f"\n  ... and {len(errors) - MAX_SHOWN_ERRORS} more" if len(errors) > MAX_SHOWN_ERRORS else ""
        raise ValidationError(f"{what} {p}: {len(errors)} problem(s)\n  "
                              + "\n  ".join(errors[:MAX_SHOWN_ERRORS]) + more)
    if not out and not allow_empty:
        fields = f" with fields {list(required)}" if required else ""
        raise ValidationError(f"{what} {p} is empty: no records; expected one JSON object per line{fields}")
    return out


# ----------------------------------------------------------------------------- record fields

RecordCheck = Callable[[dict[str, Any]], list[str]]  # read_jsonl's ``check``: a record's problems


def shown(value: Any, limit: int = 60) -> str:
    """``value`` as the file writes it (``null``, ``5``, ``"abc"``, ``[1, 2]``), cut at ``limit``
    characters: what a message says was received."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class Want:
    """What a field of a record must be, for :func:`field_check`.

    ``ok`` judges the value itself; where it holds, ``items`` judges each element of a list,
    ``values`` each value of an object, ``fields`` each field an object must have and
    ``optional`` each field it has that is not null (JSON writers put null for absent), each at
    its own path (``paragraphs[3].paragraph_text``), so that the message points at the bad part.
    """

    what: str  # the message's "must be <what>": "a non-empty string"
    ok: Callable[[Any], bool]
    items: Want | None = None
    values: Want | None = None
    fields: Mapping[str, Want] = field(default_factory=dict)
    optional: Mapping[str, Want] = field(default_factory=dict)


STRING = Want("a string", lambda v: isinstance(v, str))
TEXT = Want("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))
STRINGS = Want("a list of strings", lambda v: isinstance(v, list), items=STRING)
BOOLEAN = Want("true or false", lambda v: isinstance(v, bool))
INTEGER = Want("an integer", is_int)  # JSON true is not the index 1
INDEX = Want("an index (an integer >= 0)", lambda v: is_int(v, 0))
ID = Want("an id (a string or an integer)", lambda v: isinstance(v, str) or is_int(v))


def list_of(item: Want, what: str) -> Want:
    """A list whose every element is ``item``; ``what`` names the whole ("a list of paragraph objects")."""
    return Want(what, lambda v: isinstance(v, list), items=item)


def object_with(what: str, fields: Mapping[str, Want] | None = None, optional: Mapping[str, Want] | None = None,
                *, values: Want | None = None) -> Want:
    """An object with the ``fields`` it must have and the ``optional`` ones it may have; with
    ``values``, what each of its values must be (an object keyed by ids)."""
    return Want(what, lambda v: isinstance(v, dict), values=values, fields=fields or {}, optional=optional or {})


def one_of(*names: str) -> Want:
    """One of the strings ``names`` (a label)."""
    return Want(f"one of {list(names)}", lambda v: isinstance(v, str) and v in names)


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def value_problem(value: Any, want: Want, path: str) -> str | None:
    """The first problem of ``value`` (found at ``path``, ``"paragraphs"``) against ``want``,
    ``field 'paragraphs[3].title' must be a string, got 5``; None when it has none."""
    if not want.ok(value):
        return f"field {path!r} must be {want.what}, got {shown(value)}"
    inner = [(f"{path}[{i}]", v, want.items) for i, v in enumerate(value)] if want.items else []
    inner += [(_at(path, str(k)), v, want.values) for k, v in value.items()] if want.values else []
    for name, w in want.fields.items():
        if name not in value:
            return f"field {_at(path, name)!r} is missing (expected {w.what})"
        inner.append((_at(path, name), value[name], w))
    inner += [(_at(path, name), value[name], w) for name, w in want.optional.items() if value.get(name) is not None]
    for where, v, w in inner:
        problem = value_problem(v, w, where)
        if problem is not None:
            return problem
    return None


def field_check(fields: Mapping[str, Want], optional: Mapping[str, Want] | None = None,
                then: RecordCheck | None = None) -> RecordCheck:
    """A ``check`` for :func:`read_jsonl`: one problem per bad field of a record, ``fields``
    (each must be present) and ``optional`` (each checked where present and not null), each
    naming the field, what it must be, what it is and the fix:
    ``field 'question' must be a non-empty string, got null; correct the record or remove the line``.

    Args:
        then: the record's further problems (an index past a list's end), asked only of a
            record whose fields are all as wanted, so it may rely on their types.
    """
    def check(rec: dict[str, Any]) -> list[str]:
        found = [value_problem(rec[name], want, name) if name in rec
                 else f"field {name!r} is missing (expected {want.what})" for name, want in fields.items()]
        found += [value_problem(rec[name], want, name) for name, want in (optional or {}).items()
                  if rec.get(name) is not None]
        problems = [p for p in found if p is not None]
        if not problems and then is not None:
            problems = then(rec)
        return [f"{p}; correct the record or remove the line" for p in problems]

    return check


__all__ = [
    "BOOLEAN",
    "ID",
    "INDEX",
    "INTEGER",
    "MAX_SHOWN_ERRORS",
    "STRING",
    "STRINGS",
    "TEXT",
    "LoneSurrogate",
    "RecordCheck",
    "RepeatedKeyError",
    "Want",
    "check_input_file",
    "check_unicode",
    "field_check",
    "find_lone_surrogate",
    "iter_jsonl",
    "json_error",
    "list_of",
    "loads_unique",
    "lone_surrogate_at",
    "lone_surrogate_of_line",
    "object_with",
    "one_of",
    "read_jsonl",
    "read_utf8",
    "shown",
    "utf8_lines",
    "value_problem",
]
