"""Errors of the HTTP layer: the one status table and the one error body.

Every error the server answers goes through :func:`error_response`: the status comes from
``ERROR_TABLE`` (validation 422, empty 400, too large 413, not JSON in UTF-8 415, unauthorized 401,
overloaded 429, timeout 504, runner 500, not ready 503) and the body is OpenAI's
``{"error": {"message", "type", "param", "code"}}``, so OpenAI SDKs show the message.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from typing import Any, TypeVar, get_args

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from searchsmith.models.config import closest_key, shown
from searchsmith.models.errors import (
    EmptyInputError,
    NotReadyError,
    NotServedError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    RunnerError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)
E = TypeVar("E", bound=BaseException)

# The one table: first match wins (isinstance), so subclasses come before their parents.
# TimeoutError covers asyncio.TimeoutError (the same class since Python 3.11) and the
# batcher's queue timeout.
ERROR_TABLE: tuple[tuple[type[BaseException], int, str], ...] = (
    (EmptyInputError, 400, "empty_input"),
    (PayloadTooLargeError, 413, "too_large"),
    (UnsupportedMediaTypeError, 415, "unsupported_media_type"),
    (RequestValidationError, 422, "validation_error"),
    (ValidationError, 422, "validation_error"),
    (UnauthorizedError, 401, "unauthorized"),
    (OverloadedError, 429, "overloaded"),
    (RequestTimeoutError, 408, "request_timeout"),
    (TimeoutError, 504, "timeout"),
    (RunnerError, 500, "runner_error"),
    (NotReadyError, 503, "not_ready"),
    (NotServedError, 404, "not_served"),
)


# A message starts with the JSON path of the field it is about ("input[3]: ...",
# "documents[0].text: ..."); that path is the error's ``param`` unless the exception sets one.
_PARAM_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\]|\.[a-z_][a-z0-9_]*)*): ")


# What pydantic adds to a location for the member of a union that failed (``input.str``,
# ``documents[0].RerankDocument``); not part of the JSON path.
_UNION_TAG = re.compile(r"^(str|int|float|bool|list|dict|none)$|[\[(]|^[A-Z]")


def json_path(loc: Sequence[Any], *, sent_key: bool = False) -> str:
    """A pydantic error location as a JSON path: ``("documents", 0, "text")`` -> ``documents[0].text``.

    ``sent_key``: the location's last part is a key the client sent (an unknown field), kept
    whatever it looks like ("Model", "str" would otherwise read as a union member's tag)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _UNION_TAG.search(str(part)) or (sent_key and i == len(loc) - 1):
            out += f".{part}" if out else str(part)
    return out or "body"


# Where FastAPI says a request's value was: the first part of each error's location
_REQUEST_PARTS = ("body", "query", "path", "header", "cookie")

# pydantic's type errors, as what the field takes ("expected a string or a list, got an object")
_TAKES = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
          "bool_type": "true or false", "list_type": "a list", "dict_type": "an object",
          "model_type": "an object", "model_attributes_type": "an object"}
# errors whose message says what was sent: "Input should be 'float' or 'base64', got 'int8'"
_SAYS_INPUT = ("literal_error", "greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _json_kind(value: Any) -> str:
    """What a JSON value is, as a message says it: ``null``, ``true``, ``a number``, ``an object``."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    for kind, word in ((str, "a string"), ((int, float), "a number"), (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return word
    return type(value).__name__


def _body_loc(err: dict[str, Any]) -> tuple[Any, ...]:
    loc = tuple(err.get("loc", ()))
    return loc[1:] if loc[:1] and loc[0] in _REQUEST_PARTS else loc


def _err_path(err: dict[str, Any]) -> str:
    return json_path(_body_loc(err), sent_key=err.get("type") == "extra_forbidden")


def _union_site(err: dict[str, Any]) -> tuple[Any, ...] | None:
    """The location of the union an error is about (what comes before its member's tag), or None."""
    loc = tuple(err.get("loc", ()))
    named = loc[:-1] if err.get("type") == "extra_forbidden" else loc  # the last part is a key sent
    return next((loc[:i] for i, part in enumerate(named) if isinstance(part, str) and _UNION_TAG.search(part)),
                None)


def _closest_members(errors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors of the union members that got deepest into the value: for ``["a", {"b": 1}]``
    sent as ``str | list[str]``, "input[1]: expected a string", not also "input: expected a string"."""
    deepest: dict[tuple[Any, ...], int] = {}
    for err in errors:
        site = _union_site(err)
        if site is not None:
            deepest[site] = max(deepest.get(site, 0), len(err["loc"]))
    return [e for e in errors if (site := _union_site(e)) is None or len(e["loc"]) == deepest[site]]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The request object an annotation holds (``list[str | RerankDocument]``: RerankDocument), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


def _fields_at(model: type[BaseModel] | None, loc: Sequence[Any]) -> list[str]:
    """The fields of the object at ``loc`` in a request body of ``model`` ([] when unknown)."""
    for part in loc:
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        if field is not None:
            model = _model_in(field.annotation)
    return list(model.model_fields) if model is not None else []


def _body_fields(model: type[BaseModel] | None) -> str:
    """" with query, documents (and optionally top_n, ...)": what a body of ``model`` holds."""
    if model is None:
        return ""
    required = [name for name, f in model.model_fields.items() if f.is_required()]
    optional = [name for name, f in model.model_fields.items() if not f.is_required()]
    return f" with {', '.join(required)}" + (f" (and optionally {', '.join(optional)})" if optional else "")


def _said(err: dict[str, Any], model: type[BaseModel] | None, listed: set[tuple[Any, ...]]) -> str:
    """What an error that is not a type error says (after "<path>: "): an empty body, an unknown
    key (the fields of its object, once per object in ``listed``), a value out of range."""
    kind, value, msg = err.get("type"), err.get("input"), str(err.get("msg", "invalid"))
    if kind == "missing" and _err_path(err) == "body":
        text = f"empty; send one JSON object{_body_fields(model)}"
    elif kind == "extra_forbidden":
        loc = _body_loc(err)
        fields = _fields_at(model, loc[:-1])
        close = closest_key(str(loc[-1]), fields)
        text = (msg + (f"; did you mean {close!r}?" if close else "")
                + (f" (the fields here: {', '.join(fields)})" if fields and loc[:-1] not in listed else ""))
        listed.add(loc[:-1])
    elif kind in _SAYS_INPUT:
        text = f"{msg}, got {shown(value)}"
    else:
        text = msg
    part = err.get("loc", ("body",))[0]
    return text + (f" (a {part} parameter)" if part in _REQUEST_PARTS[1:] else "")  # not in the body


def _explained(exc: RequestValidationError, model: type[BaseModel] | None) -> list[tuple[str, str, str | None]]:
    """(path, message, code) of each of a request's validation errors, said so that a client
    can act on it: what the field takes and what was sent (the members of a union in one
    message), the fields an unknown key could be, and what a body that is not a JSON object
    should be. ``model``: the body's schema."""
    out: list[tuple[str, str, str | None]] = []
    takes: list[str] = []  # what the field of out[-1] takes, when it is a type error
    listed: set[tuple[Any, ...]] = set()  # the objects whose fields a message lists
    for err in _closest_members(exc.errors()):
        path, kind, value = _err_path(err), err.get("type"), err.get("input")
        if kind not in _TAKES:
            takes = []
            out.append((path, f"{path}: {_said(err, model, listed)}", kind))
            continue
        if out and out[-1][0] == path and takes:  # another member of the same union
            takes.append(_TAKES[kind])
            code = out.pop()[2]
        else:
            takes, code = [_TAKES[kind]], kind
        if path == "body":
            text = f"expected a JSON object, got {_json_kind(value)}; send one JSON object{_body_fields(model)}"
        else:
            text = f"expected {' or '.join(dict.fromkeys(takes))}, got {_json_kind(value)}"
        out.append((path, f"{path}: {text}", code))
    return out


def _utf8_safe(text: str) -> str:
    """``text`` with any lone surrogate written as ``\\udXXX`` (a body must encode as UTF-8)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# A message quotes what a request sent (a model name, an id, a preset), which can be as long
# as the body; past this it is cut in the middle, keeping its start (the field) and its end (the fix).
MAX_MESSAGE_CHARS = 1000


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    head, tail = MAX_MESSAGE_CHARS * 3 // 5, MAX_MESSAGE_CHARS * 3 // 10  # and 100 for the note between
    return f"{message[:head]}...({len(message) - head - tail} characters left out)...{message[-tail:]}"


def error_body(message: str, kind: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The one error body: OpenAI's shape, so OpenAI SDKs show ``message`` in their exceptions.

    ``type`` is the kind of ERROR_TABLE (``validation_error``, ``overloaded``, ...), ``param``
    the JSON path of the field at fault (or None), ``code`` a machine-readable reason (or None).
    A message over ``MAX_MESSAGE_CHARS`` is cut in the middle.
    """
    return {"error": {"message": _utf8_safe(_bounded(message)), "type": kind,
                      "param": _utf8_safe(param) if param is not None else None, "code": code}}


def with_param(exc: E, param: str, code: str | None = None) -> E:
    """Name the field an error is about (``error.param``) and its code, when the message does not."""
    exc.param, exc.code = param, code  # type: ignore[attr-defined]
    return exc


def error_response(exc: BaseException, *, body_model: type[BaseModel] | None = None) -> JSONResponse:
    """The HTTP answer to an exception: status from ERROR_TABLE, body :func:`error_body`.

    Unknown exceptions become 500 ``internal_error`` with a generic message (the traceback
    goes to the log, not to the client). ``body_model``: the schema of the request's body,
    for the messages of a ``RequestValidationError`` (the fields an unknown key could be).
    """
    headers: dict[str, str] = {}
    param: str | None = getattr(exc, "param", None)
    code: str | None = getattr(exc, "code", None)
    if isinstance(exc, StarletteHTTPException):  # 404 / 405 from routing
        status, kind, message = exc.status_code, "http_error", str(exc.detail)
        headers.update(exc.headers or {})
        if status == 405 and "allow" in {k.lower() for k in headers}:  # "Method Not Allowed" alone
            allowed = next(v for k, v in headers.items() if k.lower() == "allow")
            message = f"{message}: this path answers {allowed}"
        elif status == 404 and message == "Not Found":
            message = "Not Found: no such path; the API is under /v1 (GET /openapi.json lists every path)"
    else:
        match = next(((s, k) for cls, s, k in ERROR_TABLE if isinstance(exc, cls)), None)
        if match is not None:
            status, kind = match
            if isinstance(exc, RequestValidationError):
                explained = _explained(exc, body_model) or [("body", "body: invalid", None)]
                message = "; ".join(text for _, text, _ in explained[:5])
                message += f"; and {len(explained) - 5} more" if len(explained) > 5 else ""
                param, code = explained[0][0], explained[0][2]
                first = exc.errors()[0] if exc.errors() else {}
                if first.get("type") == "json_invalid":  # its location is a character offset, not a field
                    at, why = _body_loc(first)[-1:] or ("?",), (first.get("ctx") or {}).get("error", "")
                    message = (f"body: not valid JSON at character {at[0]}" + (f" ({why})" if why else "")
                               + "; send one JSON object")
                    param = "body"
            else:
                message = str(exc) or kind
        else:
            log.error("unhandled error while serving a request", exc_info=exc)
            status, kind, param, code = 500, "internal_error", None, None
            message = f"internal error ({type(exc).__name__}); see the server log"
    if param is None and isinstance(exc, (ValidationError, RequestTimeoutError)):  # "body: ..." names the body
        found = _PARAM_PREFIX.match(message)
        param = found.group(1) if found else None
    if isinstance(exc, OverloadedError):
        # Retry-After is whole seconds (RFC 9110); round up so clients never come back early.
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, UnsupportedMediaTypeError):
        headers["Accept-Post"] = "application/json"  # what to send instead (RFC 9110, 415)
    return JSONResponse(error_body(message, kind, param=param, code=code), status_code=status, headers=headers)
