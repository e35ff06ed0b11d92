"""The server's header limits over a real socket (uvicorn with the guarded httptools protocol):
headers over ``server.max_header_bytes`` get 431, headers that do not all arrive within
``server.header_timeout_s`` get 408, an idle connection is closed; normal requests, keep-alive
and pipelining are unchanged. Without these, a 100 MB header was accepted and a connection whose
headers never ended stayed open for good (probed 2026-12-06)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.limits import ServerLimits


@pytest.fixture(scope="module")
def port():
    from searchsmith.serving.http import create_app
    from searchsmith.serving.http_protocol import guarded_protocol
    from searchsmith.serving.profiling.server import LoopbackServer

    app = create_app(ServerLimits())
    with LoopbackServer(app, lifetime_s=300, log_level="error", http=guarded_protocol(4096, 1.0)) as srv:
        yield srv.port


def _read_all(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    sock.settimeout(timeout_s)
    out = b""
    while True:
        try:
            part = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open; read so far: {out[:200]!r}") from None
        if not part:
            return out
        out += part


def _error(reply: bytes, status: int) -> dict:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), reply[:300]
    assert b"connection: close" in head.lower()
    return json.loads(body)["error"]


def test_headers_over_the_limit_get_431_and_the_connection_closes(port) -> None:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        err = _error(_read_all(c), 431)
    assert "server.max_header_bytes" in err["message"] and "4096" in err["message"] and err["param"] == "headers"


def test_a_long_url_counts_too(port) -> None:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"GET /health?" + b"q" * 8000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        _error(_read_all(c), 431)


def test_headers_that_trickle_past_the_timeout_get_408(port) -> None:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and the blank line never comes
        started = time.monotonic()
        err = _error(_read_all(c), 408)
        assert time.monotonic() - started < 5
    assert "server.header_timeout_s" in err["message"]


def test_a_connection_that_sends_nothing_is_closed(port) -> None:
    with socket.create_connection(("127.0.0.1", port)) as c:
        assert _read_all(c) == b""  # closed quietly after the timeout


def test_normal_keep_alive_and_pipelined_requests_are_unchanged(port) -> None:
    one = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.settimeout(10)
        c.sendall(one)
        assert c.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(1.5)  # longer than the header timeout, between requests: keep-alive's business
        c.sendall(one + one)  # two pipelined requests
        got = b""
        while got.count(b"HTTP/1.1 200") < 2:
            part = c.recv(65536)
            assert part, got
            got += part


def test_the_limits_are_checked() -> None:
    with pytest.raises(ConfigError, match="max_header_bytes: expected an int >= 1"):
        ServerLimits(max_header_bytes=0)
    with pytest.raises(ConfigError, match="header_timeout_s: expected a finite number > 0"):
        ServerLimits(header_timeout_s=float("inf"))


@pytest.fixture(scope="module")
def small_body_port():
    from searchsmith.serving.http import create_app
    from searchsmith.serving.http_protocol import guarded_protocol
    from searchsmith.serving.profiling.server import LoopbackServer

    app = create_app(ServerLimits(max_body_bytes=10_000, request_timeout_s=1.0))
    with LoopbackServer(app, lifetime_s=300, log_level="error", http=guarded_protocol(4096, 1.0)) as srv:
        yield srv.port


@pytest.mark.parametrize("chunked", [False, True])
def test_a_refused_body_closes_the_connection_though_the_client_goes_on_sending(small_body_port, chunked) -> None:
    """A 413 sent before the body was read left the connection open for good while the client kept
    sending (uvicorn's keep-alive timer is cancelled by data and not re-armed after a response):
    120 bytes pinned a connection (found by probing, 2026-12-06)."""
    with socket.create_connection(("127.0.0.1", small_body_port)) as c:
        length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 5000000"
        c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + length + b"\r\n\r\n")
        if chunked:
            c.sendall(b"4e20\r\n" + b"x" * 20_000 + b"\r\n")  # past the limit: refused while it streams
        time.sleep(0.3)
        try:
            for _ in range(5):
                c.sendall(b"x" * 10)  # the client goes on sending
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            return  # closed already
        err = _error(_read_all(c), 413)
    assert "server.max_body_bytes" in err["message"]


def test_a_stalled_body_gets_408_and_the_connection_closes(small_body_port) -> None:
    with socket.create_connection(("127.0.0.1", small_body_port)) as c:
        c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"input\":")
        err = _error(_read_all(c, 15), 408)
    assert "server.request_timeout_s" in err["message"] and err["param"] == "body"


@pytest.mark.parametrize("request_bytes", [
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",  # a Content-Length that is no number
    b"POST /v1/route HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # an HTTP/2 preface
])
def test_a_request_the_parser_refuses_gets_the_json_error_body(port, request_bytes) -> None:
    """uvicorn answered these with plain text 'Invalid HTTP request received.' (fuzzing, 2026-12-06)."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(request_bytes)
        err = _error(_read_all(c), 400)
    assert err["message"].startswith("request: not a valid HTTP/1.1 request") and err["type"] == "http_error"


def test_the_app_keeps_the_header_limit_behind_another_http_server() -> None:
    """Under --ray, Ray Serve's proxy parses the headers (any size) and hands the app the request:
    the app itself answers 431 over server.max_header_bytes, the same body as the protocol's."""
    from fastapi.testclient import TestClient
    from searchsmith.serving.http import create_app
    from searchsmith.serving.middleware import head_bytes

    with TestClient(create_app(ServerLimits(max_header_bytes=2048))) as c:
        assert c.get("/health", headers={"x-small": "a" * 1000}).status_code == 200
        resp = c.get("/health", headers={"x-big": "a" * 3000})
        assert resp.status_code == 431 and resp.headers["connection"] == "close"
        err = resp.json()["error"]
        assert (err["type"], err["param"]) == ("too_large", "headers") and "2048" in err["message"]
        assert c.get("/health?" + "q" * 3000).status_code == 431  # the URL counts too
        assert c.post("/v1/embeddings", json={"input": "a"}, headers={"x-big": "a" * 3000}).status_code == 431
    scope = {"raw_path": b"/v1/x", "query_string": b"a=1", "headers": [(b"host", b"x")]}
    assert head_bytes(scope) == len(b"/v1/x") + len(b"a=1") + len(b"host") + len(b"x") + 4
