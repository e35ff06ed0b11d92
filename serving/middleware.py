"""ASGI wrappers of the server: request metrics, the body limit (and the work of a client that
leaves, dropped), and routes that answer their own errors (:func:`on_error`, the app's one
exception handler)."""

from __future__ import annotations

import asyncio
import contextlib
import email.message
import email.utils
import json
import time
import typing
from collections.abc import Callable
from typing import Any, NamedTuple

from fastapi import Request, params
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from searchsmith.models.config import shown
from searchsmith.models.errors import (
    PayloadTooLargeError,
    RequestTimeoutError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from searchsmith.models.jsonl import RepeatedKeyError, loads_unique
from searchsmith.serving.http_errors import error_body, error_response, with_param
from searchsmith.serving.schemas import control_character_in, too_deep_body, undecodable_body
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The status a request is counted under when its client left before the answer was sent
#: (nginx's "client closed request"; never sent: there is nobody to send it to)
CLIENT_CLOSED_REQUEST = 499


class RequestMetrics:
    """ASGI wrapper: count each HTTP request and its latency per endpoint (route template).

    A plain ASGI middleware, not ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware
    runs every request in an extra task with memory streams, which cost more CPU per request
    than the rest of the server on the 2-core machine (py-spy, ``profile server``).
    """

    def __init__(self, app: Any, metrics: Any) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an exception before the response starts

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except asyncio.CancelledError:
            status = CLIENT_CLOSED_REQUEST  # BodyLimit cancels the work of a client that left
            raise
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(endpoint, status, time.perf_counter() - start)


class HeadAsGet:
    """ASGI wrapper: HEAD wherever GET works (RFC 9110; readiness probes use it): the GET route
    answers with its status and headers, and no body is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_head(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, send_head)


NO_WEBSOCKET = ("{path}: this server has no WebSocket endpoint; it speaks HTTP (POST /v1/search with "
                "\"stream\": true streams an answer as server-sent events; GET /openapi.json lists every path)")


class NoWebSocket:
    """ASGI wrapper: a WebSocket handshake is answered with a 404 error body, as an unknown
    HTTP path is (Starlette closed it with a bare 403 and no word of why), where the server
    can send an HTTP answer to a handshake (the ``websocket.http.response`` extension); else it
    is closed with code 1008 and the same reason."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        await receive()  # websocket.connect
        message = NO_WEBSOCKET.format(path=scope.get("path", "/"))
        if "websocket.http.response" in (scope.get("extensions") or {}):
            await JSONResponse(error_body(message, "http_error", code="websocket_unsupported"),
                               status_code=404)(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


def headers_too_large(limit: int) -> str:
    """The 431 message, one text for the HTTP protocol's check and :class:`HeaderLimit`'s."""
    return (f"headers: over {limit} bytes of request line and headers, the limit (server.max_header_bytes); "
            "send shorter headers or a shorter URL")


def head_bytes(scope: Scope) -> int:
    """The bytes of a request's target and headers as the HTTP protocol counts them: the URL,
    and ``name: value\r\n`` for each header."""
    target = len(scope.get("raw_path") or scope.get("path", "").encode()) + len(scope.get("query_string") or b"")
    return target + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))


class HeaderLimit:
    """ASGI wrapper: 431 to a request whose line and headers are over ``max_bytes``.

    ``searchsmith serve`` refuses them while parsing (``http_protocol``, which also bounds the
    time they take); behind another HTTP server, which has parsed them already (Ray Serve's
    proxy under ``--ray``), this keeps the same limit before anything else reads them.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and head_bytes(scope) > self.max_bytes:
            resp = JSONResponse(error_body(headers_too_large(self.max_bytes), "too_large", param="headers"),
                                status_code=431, headers={"connection": "close"})
            await resp(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI wrapper: answer 413 to bodies over ``max_bytes`` before anything parses them, and
    408 to a body that has not all arrived within ``timeout_s`` (a stalled client holds no
    connection and no worker for longer).

    Counts the bytes actually received, so a missing or lying Content-Length does not help.

    Once the body is in, it listens for the client to leave: a client that disconnects before
    its answer is sent has the request's work cancelled (:func:`answer_while_connected`), so a
    request still waiting in a model's queue is dropped there instead of run for nobody.
    """

    def __init__(self, app: Any, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    @staticmethod
    async def _refuse(exc: Exception, scope: dict, receive: Callable, send: Callable) -> None:
        """The error's answer with ``Connection: close``: the body was not read, so the
        connection cannot carry another request, and a client that goes on sending would
        otherwise hold it open for good (uvicorn's keep-alive timer is not re-armed by data
        arriving after a response)."""
        resp = error_response(exc)
        resp.headers["connection"] = "close"
        await resp(scope, receive, send)

    def _too_large(self, size: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"body: {size} bytes, the limit is {self.max_bytes} (server.max_body_bytes); "
            "send fewer or shorter texts per request"
        )

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(self._too_large(length.decode()), scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(
                    receive(), timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                await self._refuse(RequestTimeoutError(
                    f"body: {total} bytes arrived in {self.timeout_s} s and the rest did not "
                    "(server.request_timeout_s); send the whole body at once"), scope, receive, send)
                return
            if message["type"] != "http.request":
                return  # the client went away before its body was in: nothing to answer
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.max_bytes:
                await self._refuse(self._too_large(f"over {total}"), scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await answer_while_connected(self.app, scope, b"".join(chunks), receive, send)


async def answer_while_connected(app: ASGIApp, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
    """Run ``app`` on a request whose whole ``body`` has been read, cancelling it if the client
    disconnects before the response's last byte is sent.

    One task reads ``receive`` from here on; the app's own later ``receive()`` calls (a
    streaming response listening for the disconnect) wait for what it sees. Cancelling the
    app's task cancels the endpoint's awaits: the Futures of items still queued in a batcher
    are cancelled and the batcher drops them (``serving/routes.py: _gather``); a batch already
    running finishes in its worker, as a thread cannot be stopped. Once the response is
    complete the app runs to its end (background tasks included) whatever the client does.
    """
    gone = asyncio.Event()
    replayed = False
    complete = False

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass  # nothing else comes after a complete body
        gone.set()

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send_tracked(message: Message) -> None:
        nonlocal complete
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            complete = True  # before sending: the server may report the disconnect at once
        await send(message)

    work = asyncio.ensure_future(app(scope, replay, send_tracked))
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done() and not complete:  # the client left first: stop its work
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            return
        await work
    finally:
        watcher.cancel()
        if not work.done():  # this task itself was cancelled (shutdown)
            work.cancel()


def _compressed(request: Request) -> ValidationError | None:
    """A 422 for a body sent compressed (``Content-Encoding: gzip``): it was read as JSON text
    and refused as "byte 1 of the body is not valid UTF-8"."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    return with_param(ValidationError(
        f"body: sent with Content-Encoding {encoding!r}; compressed bodies are not accepted, send the JSON "
        "uncompressed (server.max_body_bytes bounds its size)"), "body", "content_encoding")


def reads_as_json(content_type: str) -> bool:
    """Whether FastAPI reads a body sent with ``content_type`` as JSON: ``application/json`` or
    ``application/*+json``, parameters aside (``text/json`` and ``application/jsonx`` are not)."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return bool(content_type) and message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


async def on_error(request: Request, exc: Exception) -> JSONResponse:
    """The answer to any exception of a request (the app's exception handlers and routes)."""
    if isinstance(exc, StarletteHTTPException) and exc.status_code == 400:
        # FastAPI's "error parsing the body": say which field holds bytes that are not UTF-8, or
        # that the JSON is nested past the parser's depth
        body = await request.body()
        exc = _compressed(request) or undecodable_body(body) or too_deep_body(body) or exc
    return error_response(exc, body_model=body_model(request))


def body_model(request: Request) -> type[BaseModel] | None:
    """The schema of the body of the request's route (a ``RequestBody``), or None."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


class KeyCheck(NamedTuple):
    """The server's API-key check: ``dependency`` is the one routes declare
    (``dependencies=[Depends(dependency)]``); ``before_body`` runs the same check on the raw
    request, which :class:`AnswerErrors` does first for those routes."""

    dependency: Callable[..., None]
    before_body: Callable[[Request], None]


class AnswerErrors(APIRoute):
    """A route that answers its own errors, unexpected ones included.

    Starlette hands an exception that is not an HTTP one to its ServerErrorMiddleware, which
    sends the 500 and re-raises it: uvicorn then logs a second traceback and closes the
    keep-alive connection. Answering here logs once (``error_response``) and keeps it open.
    """

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        keyed = [d.dependency for d in self.dependencies]
        single = single_value_params(self.dependant)
        texts = url_params(self.dependant)
        # a form or file body (none here yet) is read by FastAPI in the types it takes
        json_body = self.body_field is not None and not isinstance(self.body_field.field_info, params.Form)

        async def answer(request: Request) -> Response:
            try:
                check = getattr(request.app.state, "auth", None)
                if isinstance(check, KeyCheck) and check.dependency in keyed:
                    check.before_body(request)  # 401 before the body is read
                refuse_repeated_params(request, single)
                refuse_control_characters(request, texts)
                await parse_json_once(request, json_body)
                return await handler(request)
            except Exception as exc:
                return await on_error(request, exc)

        return answer


_SEQUENCES = (list, tuple, set, frozenset, typing.Sequence, typing.AbstractSet)


def _takes_several(annotation: Any) -> bool:
    """Whether a parameter of this type takes several values (``list[str]``, ``list[str] | None``)."""
    origin = typing.get_origin(annotation)
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        return True
    return any(_takes_several(a) for a in typing.get_args(annotation)) if origin is not None else False


def single_value_params(dependant: Dependant) -> set[str]:
    """The query parameters of a route (FastAPI's ``Dependant``, its dependencies' included) that
    take one value each: as sent in the URL (their alias)."""
    names: set[str] = set()
    stack = [dependant]
    while stack:
        current = stack.pop()
        names.update(p.alias for p in current.query_params if not _takes_several(p.field_info.annotation))
        stack.extend(current.dependencies)
    return names


def url_params(dependant: Dependant) -> tuple[set[str], set[str]]:
    """The query parameters and the path parameters of a route (its dependencies' included),
    as sent in the URL (their alias)."""
    query: set[str] = set()
    path: set[str] = set()
    stack = [dependant]
    while stack:
        current = stack.pop()
        query.update(p.alias for p in current.query_params)
        path.update(p.alias for p in current.path_params)
        stack.extend(current.dependencies)
    return query, path


def refuse_control_characters(request: Request, names: tuple[set[str], set[str]]) -> None:
    """Refuse a control character in the value of a query or path parameter the route reads
    (``?doc_id=%00``, ``/v1/models/a%1b``): the rule of the strings of a body
    (:func:`searchsmith.serving.schemas.control_character_in`: tab, newline and carriage return
    are text, DEL and the C1 controls too). Before, such a value was looked up and ended in a 404
    that did not say why. Parameters the route does not declare are ignored, as FastAPI ignores them.

    Args:
        names: (query, path) parameter names, from :func:`url_params`.

    Raises:
        ValidationError: 422 ``control_character``, ``param`` the parameter's name.
    """
    query, path = names
    sent = [(k, v) for k, v in request.query_params.multi_items() if k in query] if query and request.url.query else []
    sent += [(k, v) for k, v in request.path_params.items() if k in path and isinstance(v, str)]
    for name, value in sent:
        what = control_character_in(value, escape="url")
        if what is not None:
            raise with_param(ValidationError(f"{name}: {what}"), name, "control_character")


def refuse_repeated_params(request: Request, single: set[str]) -> None:
    """Refuse a query parameter that takes one value and is sent more than once (``?k=3&k=5``):
    FastAPI reads the last and drops the others without a word.

    Raises:
        ValidationError: 422 ``repeated_parameter``, ``param`` the parameter's name.
    """
    if not single or not request.url.query:
        return
    items = request.query_params.multi_items()
    for name in dict.fromkeys(k for k, _ in items if k in single):
        values = [v for k, v in items if k == name]
        if len(values) > 1:
            sent = ", ".join(shown(v) for v in values[:3]) + (", ..." if len(values) > 3 else "")
            raise with_param(ValidationError(
                f"{name}: sent {len(values)} times in the query string ({sent}); it takes one value, and only "
                f"the last would be read: send {name} once (a query parameter)"), name, "repeated_parameter")


# A charset the JSON of a body may be sent in: UTF-8 by its names (RFC 8259: JSON exchanged
# between systems is UTF-8)
_UTF8 = ("utf-8", "utf8")


def _charsets(content_type: str) -> list[str]:
    """Every charset a Content-Type names: ``charset=latin-1``, and the RFC 2231 forms
    (``charset*=utf-8''latin-1``, continued ``charset*0*=...; charset*1=...``) decoded to their
    value. All of them, where a header names one more than once."""
    message = email.message.Message()
    message["content-type"] = content_type
    return [email.utils.collapse_rfc2231_value(value) for name, value in message.get_params(failobj=[])[1:]
            if name == "charset"]


def _not_utf8(request: Request, body: bytes) -> UnsupportedMediaTypeError | None:
    """A 415 for a JSON body sent with a charset other than UTF-8 (``Content-Type:
    application/json; charset=latin-1``, or ``charset*=utf-8''latin-1``: :func:`_charsets`) or
    in UTF-16 or UTF-32 (which Python's JSON parser would read, guessing from the bytes; other
    parsers do not), or None."""
    content_type = request.headers.get("content-type", "")
    charset = next((c for c in _charsets(content_type) if c.strip().lower() not in _UTF8), None)
    if charset is not None:
        sent = f"with charset {charset!r} (Content-Type {content_type!r})"
    elif body and json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):
        sent = f"in {json.detect_encoding(body).upper()} (from its first bytes)"
    else:
        return None
    return with_param(UnsupportedMediaTypeError(
        f"body: sent {sent}; JSON bodies are read as UTF-8 only (RFC 8259): encode the body as UTF-8 and send "
        "'Content-Type: application/json' (or charset=utf-8)"), "body", "unsupported_charset")


def _not_json(content_type: str) -> UnsupportedMediaTypeError:
    """The 415 for a body sent with a Content-Type that is not JSON's (:func:`reads_as_json`:
    ``text/plain``, or a form, which ``curl -d`` sends) or with none.

    FastAPI does not read such a body as JSON and answered "body: Input should be a valid
    dictionary", which does not say why. A body without a Content-Type is refused as well: the
    FastAPI of this server does not read it (``strict_content_type``, on by default), older ones
    did, guessing; refused here, a body is read one way whatever the version.
    """
    how = f"as Content-Type {content_type!r}, which this endpoint does not read" if content_type.strip() else \
        "without a Content-Type"
    return with_param(UnsupportedMediaTypeError(
        f"body: sent {how}; send the JSON object with 'Content-Type: application/json' (curl: "
        "-H 'Content-Type: application/json' --data-binary @body.json)"), "body", "content_type")


async def parse_json_once(request: Request, json_body: bool = True) -> None:
    """Parse a JSON request body once, refusing an object that writes a key twice (JSON parsers
    keep the last value: ``{"input": "a", "input": "b"}`` would embed "b" without a word), a
    body sent as another media type or without one (:func:`_not_json`), and a body that is not
    UTF-8 by its charset or its bytes (:func:`_not_utf8`). A UTF-8 byte order mark is accepted
    and dropped (RFC 8259 lets parsers ignore it; Python's does).

    Starlette keeps the parsed body (``request._json``), so FastAPI reads this value and does
    not parse again. JSON that does not parse is left to FastAPI, which answers it as ever.

    Args:
        json_body: the route reads a JSON body (a route without a body, or with a form one,
            is left as it is).

    Raises:
        ValidationError: 422 ``repeated_key``, ``param`` the key's path (``documents[0].id``);
            422 ``content_encoding`` for a compressed body.
        UnsupportedMediaTypeError: 415 ``content_type`` or ``unsupported_charset``, ``param`` "body".
    """
    if not json_body:
        return
    refused = _compressed(request)  # a gzip header on a plain body was read as plain: refused either way
    if refused is not None:
        raise refused
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    if not reads_as_json(content_type):
        if body:
            raise _not_json(content_type)
        return  # empty: the schema's 422 names the fields to send, whatever the type
    refused = _not_utf8(request, body)
    if refused is not None:
        raise refused
    if not body:
        return
    try:
        value = loads_unique(body)  # json.loads drops a UTF-8 byte order mark from bytes
    except RepeatedKeyError as exc:
        raise with_param(ValidationError(
            f"{exc.field}: the key {exc.key!r} is written twice in one object; JSON readers keep only the last "
            "value, so the first would be lost: send each key once"), exc.field, "repeated_key") from None
    except (ValueError, RecursionError):
        return  # not JSON (or nested past the parser's depth): FastAPI's own answer, as before
    request._json = value
