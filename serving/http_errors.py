"""Errors of the HTTP layer: the one status table and the one error body.

Every error the server answers goes through :func:`error_response`: the status comes from
``ERROR_TABLE`` (validation 422, empty 400, too large 413, unauthorized 401, overloaded 429,
timeout 504, runner 500, not ready 503) and the body is OpenAI's ``{"error": {"message",
"type", "param", "code"}}``, so OpenAI SDKs show the message.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from searchsmith.models.errors import (
    EmptyInputError,
    NotReadyError,
    NotServedError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    RunnerError,
    UnauthorizedError,
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


def _body_loc(err: dict[str, Any]) -> tuple[Any, ...]:
    loc = tuple(err.get("loc", ()))
    return loc[1:] if loc[:1] == ("body",) else loc


def _err_path(err: dict[str, Any]) -> str:
    return json_path(_body_loc(err), sent_key=err.get("type") == "extra_forbidden")


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        parts.append(f"{_err_path(err)}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _utf8_safe(text: str) -> str:
    """``text`` with any lone surrogate written as ``\\udXXX`` (a body must encode as UTF-8)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(message: str, kind: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The one error body: OpenAI's shape, so OpenAI SDKs show ``message`` in their exceptions.

    ``type`` is the kind of ERROR_TABLE (``validation_error``, ``overloaded``, ...), ``param``
    the JSON path of the field at fault (or None), ``code`` a machine-readable reason (or None).
    """
    return {"error": {"message": _utf8_safe(message), "type": kind,
                      "param": _utf8_safe(param) if param is not None else None, "code": code}}


def with_param(exc: E, param: str, code: str | None = None) -> E:
    """Name the field an error is about (``error.param``) and its code, when the message does not."""
    exc.param, exc.code = param, code  # type: ignore[attr-defined]
    return exc


def error_response(exc: BaseException) -> JSONResponse:
    """The HTTP answer to an exception: status from ERROR_TABLE, body :func:`error_body`.

    Unknown exceptions become 500 ``internal_error`` with a generic message (the traceback
    goes to the log, not to the client).
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
                message = _validation_message(exc)
                first = exc.errors()[0] if exc.errors() else {}
                param, code = _err_path(first), first.get("type")
                if code == "json_invalid":  # its location is a character offset, not a field
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
    return JSONResponse(error_body(message, kind, param=param, code=code), status_code=status, headers=headers)
