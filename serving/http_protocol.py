"""uvicorn's httptools HTTP/1.1 protocol with the limits it lacks: the size of a request's
line and headers, the time they may take to arrive, and the connections open at once.

uvicorn bounds the idle time between keep-alive requests, and its h11 parser bounds an
incomplete event's size, but with httptools (the parser this package installs) a client may
send headers of any size (a 100 MB header was accepted and held in memory) and may send them as
slowly as it likes (a connection whose headers never end stayed open for good): a few hundred
such clients hold every file descriptor of the server. :func:`guarded_protocol` returns the
protocol class ``uvicorn.run(..., http=...)`` takes, with ``server.max_header_bytes`` (431
past it), ``server.header_timeout_s`` (408 past it) and ``server.max_connections`` (503 with
Retry-After to a request on a connection opened past it: the measured pace at which connections
close and the clients already refused, ``serving/drain.py``); each answer closes the connection.

The connection limit is uvicorn's ``limit_concurrency`` done here instead: uvicorn's answers a
plain-text 503 without Retry-After, and once the limit is reached it refuses every request, on
connections already open and /health alike (a liveness probe would restart a busy server). Here
only a connection opened past the limit is refused, and the probes (/health, /ready, /metrics)
are answered on it. The app never sees a request refused here, so the protocol counts each in
the app's metrics itself (``on_connection_refused``: ``searchsmith serve`` passes the app's
``searchsmith_refused_requests_total{limit="max_connections"}``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httptools
from searchsmith.serving.drain import DrainRate
from searchsmith.serving.middleware import headers_too_large
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}
# answered on a connection opened past the connection limit (they cost nothing, and a liveness
# probe that failed under load would restart a server that is only busy)
_PROBES = (b"/health", b"/ready", b"/metrics")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` with a header size and a header time limit (module docstring).

    The limits are class attributes; :func:`guarded_protocol` makes a subclass with a server's.
    """

    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 30.0
    max_connections: int | None = None  # None: no limit
    # called once per request refused past max_connections (the app's metrics counter); a
    # staticmethod, so that the class attribute is not bound to the protocol as a method
    on_connection_refused: Callable[[], None] = staticmethod(lambda: None)
    # the pace at which the connections within the limit close (Retry-After); one per server,
    # shared by its connections (:func:`guarded_protocol`); None: Retry-After 1 s
    drain: DrainRate | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # adds it to uvicorn's set of open connections
        self._header_bytes = 0
        self._in_head = False  # between a request's first byte and the end of its headers
        self._refused = False
        self._past_limit = self.max_connections is not None and len(self.connections) > self.max_connections
        if self.drain is not None and not self._past_limit and len(self.connections) == 1:
            self.drain.started()
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()  # a connection that sends nothing is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if self.drain is not None and not self._past_limit:  # a refused one frees no place
            self.drain.finished()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(408, f"headers: the request's line and headers did not all arrive within "
                              f"{self.header_timeout_s:g} s (server.header_timeout_s); send them at once")
        else:
            self.transport.close()  # nothing of a request came: close quietly, like keep-alive

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # else the parser stopped because this protocol refused the request
            # uvicorn's own answer is plain text; every error of the server is the JSON error body
            self._refuse(400, "request: not a valid HTTP/1.1 request (its request line, a header, Content-Length "
                              "or Transfer-Encoding could not be parsed); send a well-formed request", param="request")

    # parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._in_head = True
        if self._header_timer is None:
            self._arm_header_timer()  # the next request on a keep-alive connection

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # "name: value\r\n"
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_header_timer()
        if self._past_limit and self.url.split(b"?", 1)[0] not in _PROBES:
            self.on_connection_refused()
            retry_after_s = self.drain.retry_after_s() if self.drain is not None else 1
            self._refuse(503, f"connections: {len(self.connections)} open, the limit is {self.max_connections} "
                              f"(server.max_connections); retry after {retry_after_s} s, or raise "
                              "server.max_connections / add replicas", param=None, retry_after_s=retry_after_s)
            raise httptools.HttpParserError("a connection past server.max_connections")
        super().on_headers_complete()

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.max_header_bytes:
            self._refuse(431, headers_too_large(self.max_header_bytes))
            raise httptools.HttpParserError("request headers over server.max_header_bytes")

    def _refuse(self, status: int, message: str, param: str | None = "headers",
                retry_after_s: int | None = None) -> None:
        """Answer ``status`` with an OpenAI-shaped error body and close the connection."""
        self._refused = True
        self._disarm_header_timer()
        kind = {431: "too_large", 408: "request_timeout", 503: "overloaded"}.get(status, "http_error")
        body = json.dumps({"error": {"message": message, "type": kind, "param": param, "code": None}}).encode()
        self.logger.warning("%s: %s", status, message)
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        if retry_after_s is not None:
            head.append(b"retry-after: %d\r\n" % retry_after_s)
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                 b"connection: close\r\n\r\n"]
        if not self.transport.is_closing():
            self.transport.write(b"".join(head) + body)
            self.transport.close()


def guarded_protocol(max_header_bytes: int, header_timeout_s: float, max_connections: int | None = None,
                     on_connection_refused: Callable[[], None] | None = None) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for ``uvicorn.run(app, http=...)`` with a server's header limits and
    connection limit (None: no limit); ``on_connection_refused`` is called for each request
    refused past that limit (the app's :meth:`ServerMetrics.refusal_hook`). Each call makes a
    class with its own :class:`DrainRate` (one server's connections)."""
    attrs: dict[str, Any] = {"max_header_bytes": int(max_header_bytes), "header_timeout_s": float(header_timeout_s),
                             "max_connections": None if max_connections is None else int(max_connections),
                             "drain": DrainRate()}
    if on_connection_refused is not None:
        attrs["on_connection_refused"] = staticmethod(on_connection_refused)
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), attrs)


__all__ = ["GuardedHttpToolsProtocol", "guarded_protocol"]
