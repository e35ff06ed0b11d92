"""The server's bound on requests in work (``server.max_pending_requests``) and on open
connections (``server.max_connections``).

Before it, /v1/embeddings and /v1/rerank tokenized in ``asyncio.to_thread``, whose executor
queues without limit ahead of the models' bounded queues: 40 requests sent at once while
tokenizing was held all waited there (6 tokenizing, 34 queued) and none got a 429. Now a request
past the bound is answered 429 at once, never reaches its work, and the count goes back to 0
however a request ends (answered, or its client gone).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openai_error import error_message
from raw_http import post_raw
from searchsmith.models.errors import ConfigError
from searchsmith.serving import routes
from searchsmith.serving.batcher import BatcherConfig
from searchsmith.serving.http import create_app
from searchsmith.serving.limits import CALL_MODELS, ServerLimits
from searchsmith.serving.profiling.server import LoopbackServer

LIMIT = 3
FLOOD = 8  # requests sent while LIMIT are held: FLOOD - LIMIT are refused
BODIES = {"/v1/embeddings": {"input": "Knead the dough."},
          "/v1/rerank": {"query": "dough", "documents": ["Knead the dough.", "Saturn has rings."]},
          "/v1/route": {"query": "dough"}}


class Held:
    """Wraps ``fn``: each call is counted, then waits for ``release`` (10 s at most)."""

    def __init__(self, fn) -> None:
        self.fn, self.release, self.calls = fn, threading.Event(), 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        self.release.wait(10)
        return self.fn(*args, **kwargs)


class FakeReranker:
    """A ``rerank`` bundle without a model: every pair scores 0."""

    task, max_length, tokenizer, manifest = "rerank", 64, None, {"max_length": 64}

    def score_pairs(self, pairs):
        return np.zeros(len(pairs), dtype=np.float32)  # (N,)


class FakeRouter:
    class Result:
        def to_dict(self) -> dict[str, Any]:
            return {"sources": []}

    def route(self, *args: Any) -> Result:
        return self.Result()

    def close(self) -> None:
        pass


def _app(endpoint: str, embedder, monkeypatch, cfg: ServerLimits):
    """An app serving ``endpoint`` whose work (tokenizing; routing) waits for the returned Held."""
    if endpoint == "/v1/embeddings":
        held = Held(routes.tokenize_inputs)
        monkeypatch.setattr(routes, "tokenize_inputs", held)
        return create_app(cfg, embedder=embedder), held
    if endpoint == "/v1/rerank":
        app = create_app(cfg, reranker=FakeReranker())
        runner = app.state.serving.reranker
        held = Held(runner.lengths)
        monkeypatch.setattr(runner, "lengths", held)
        return app, held
    router = FakeRouter()
    held = Held(router.route)
    monkeypatch.setattr(router, "route", held)
    return create_app(cfg, router=router), held


def _wait(what: str, cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# ---- the bound on requests in work ----------------------------------------------------------


@pytest.mark.parametrize("endpoint", list(BODIES))
def test_a_flood_past_the_bound_is_refused_at_once_and_never_queued(endpoint, embedder, monkeypatch) -> None:
    app, held = _app(endpoint, embedder, monkeypatch, ServerLimits(max_pending_requests=LIMIT))
    state = app.state.serving
    with TestClient(app) as c, ThreadPoolExecutor(LIMIT) as pool:
        admitted = [pool.submit(c.post, endpoint, json=BODIES[endpoint]) for _ in range(LIMIT)]

        def in_work() -> int:  # tokenizing, or routing and queued for it (one router call at a time)
            return held.calls + (state.gates["route"].stats()["queue_depth"] if endpoint == "/v1/route" else 0)

        _wait("the admitted requests to be in work", lambda: in_work() == LIMIT)
        for _ in range(FLOOD - LIMIT):
            started = time.monotonic()
            resp = c.post(endpoint, json=BODIES[endpoint])
            # answered while the admitted ones are held (up to 10 s): it waited for nothing
            assert time.monotonic() - started < 5
            msg = error_message(resp, 429, "overloaded")
            assert msg == (f"{endpoint}: the server has {LIMIT} requests in work, the limit is {LIMIT} "
                           "(server.max_pending_requests); retry after 1 s, or raise server.max_pending_requests "
                           "/ add replicas")
            assert resp.headers["retry-after"] == "1"
        assert state.admission.pending == in_work() == LIMIT  # nothing was let in past the bound
        held.release.set()
        assert [f.result(10).status_code for f in admitted] == [200] * LIMIT
        assert held.calls == LIMIT  # the refused requests never reached their work
        assert state.admission.pending == 0
        metrics = c.get("/metrics").text
    assert f'searchsmith_refused_requests_total{{limit="max_pending_requests"}} {FLOOD - LIMIT}.0' in metrics
    assert "searchsmith_pending_requests 0.0" in metrics
    assert f"searchsmith_pending_requests_limit {LIMIT}.0" in metrics


def test_failed_requests_are_counted_out(embedder, monkeypatch) -> None:
    """A request whose work fails (413 after tokenizing, a runner's 500) frees its place."""
    def broken(batch):
        raise RuntimeError("device lost")

    cfg = ServerLimits(max_pending_requests=1, truncate=False, max_input_chars=100_000)
    with TestClient(create_app(cfg, embedder=embedder, run_batch=broken)) as c:
        for _ in range(3):
            error_message(c.post("/v1/embeddings", json={"input": "a"}), 500, "runner_error")
            error_message(c.post("/v1/embeddings", json={"input": "word " * 1000}), 413, "too_large")
        assert c.app.state.serving.admission.pending == 0


def _reply(sock: socket.socket) -> tuple[bytes, dict]:
    """The status line and JSON body of the one answer on ``sock`` (closed after it)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    sock.close()
    return head, json.loads(body)


def test_the_count_returns_to_zero_when_clients_leave(embedder, monkeypatch) -> None:
    """Over a real socket: clients that leave while their requests are in work free their
    places at once (their work still held in its threads), and new requests are admitted."""
    import httpx

    app, held = _app("/v1/embeddings", embedder, monkeypatch, ServerLimits(max_pending_requests=LIMIT))
    state = app.state.serving
    try:
        with LoopbackServer(app, lifetime_s=120) as srv:
            gone = [post_raw(srv.port, "/v1/embeddings", BODIES["/v1/embeddings"]) for _ in range(LIMIT)]
            _wait("the requests to be in work", lambda: state.admission.pending == LIMIT)
            head, body = _reply(post_raw(srv.port, "/v1/embeddings", BODIES["/v1/embeddings"]))
            assert head.startswith(b"HTTP/1.1 429") and "server.max_pending_requests" in body["error"]["message"]
            for sock in gone:
                sock.close()
            # counted out on the disconnect, while their tokenizing is still held in its threads
            _wait("the places to be freed", lambda: state.admission.pending == 0)
            assert held.calls == LIMIT and not held.release.is_set()
            with ThreadPoolExecutor(1) as pool:
                kept = pool.submit(httpx.post, f"{srv.url}/v1/embeddings", json=BODIES["/v1/embeddings"], timeout=30)
                _wait("a new request to be admitted", lambda: state.admission.pending == 1)
                held.release.set()
                assert kept.result(30).status_code == 200
            assert state.admission.pending == 0
            metrics = httpx.get(f"{srv.url}/metrics").text
            assert f'searchsmith_requests_total{{endpoint="/v1/embeddings",status="499"}} {LIMIT}.0' in metrics
    finally:
        held.release.set()


def test_the_default_is_bounded_by_memory_and_by_the_queues() -> None:
    """null: the fewer of what memory allows (max_pending_bytes over bodies of max_body_bytes)
    and what the queues hold (one item per request in every queue and running batch). It was
    the queues alone, 2502 requests: up to 9.8 GiB of 4 MiB bodies in work at once."""
    default = ServerLimits()
    assert (default.max_pending_requests, default.max_pending_bytes) == (None, 512 * 1024 * 1024)
    assert default.queue_capacity == 2 * (1024 + 32) + len(CALL_MODELS) * (64 + 1) == 2502
    assert default.pending_limit == (512 * 1024 * 1024) // (4 * 1024 * 1024) == 128
    assert default.pending_limit * default.max_body_bytes <= default.max_pending_bytes
    assert default.connection_limit == 2 * 128
    assert create_app(default).state.serving.admission.limit == 128
    # smaller bodies, more requests in work within the same memory
    assert ServerLimits(max_body_bytes=1024 * 1024).pending_limit == 512
    assert ServerLimits(max_pending_bytes=40 * 1024 * 1024).pending_limit == 10
    # the queues bound it when they hold fewer
    small = ServerLimits(batcher=BatcherConfig(max_queue=10, max_batch_size=4, workers=2),
                         rerank_batcher=BatcherConfig(max_queue=5, max_batch_size=2),
                         calls=BatcherConfig(max_batch_size=1, max_queue=3, workers=2))
    assert small.pending_limit == small.queue_capacity == (10 + 8) + (5 + 2) + len(CALL_MODELS) * (3 + 2)
    assert create_app(small).state.serving.admission.limit == small.pending_limit
    # set, it is used as given (max_pending_bytes then unused)
    set_ = ServerLimits(max_pending_requests=7, max_connections=9)
    assert (set_.pending_limit, set_.connection_limit) == (7, 9)
    assert ServerLimits(max_pending_requests=3000, max_pending_bytes=1).pending_limit == 3000


def test_a_memory_budget_below_one_body_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "max_pending_bytes: 1000 holds not one request body of max_body_bytes 4096, so no request could be "
            "in work; raise max_pending_bytes, lower max_body_bytes, or set max_pending_requests")):
        ServerLimits(max_pending_bytes=1000, max_body_bytes=4096)
    assert ServerLimits(max_pending_bytes=4096, max_body_bytes=4096).pending_limit == 1


@pytest.mark.parametrize("value", [0, -1, 2.5, "512MiB", True, None])
def test_bad_memory_budgets_are_refused(value) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"max_pending_bytes: expected an int >= 1, got {value!r}")):
        ServerLimits(max_pending_bytes=value)


@pytest.mark.parametrize("key", ["max_pending_requests", "max_connections"])
@pytest.mark.parametrize("value", [0, -3, 1.5, "10", True])
def test_bad_values_are_refused_naming_the_setting(key, value) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key}: expected an int >= 1 or null (derived from "
                                                    f"max_pending_bytes and the queues), got {value!r}")):
        ServerLimits(**{key: value})


def test_bad_values_in_serve_yaml_are_refused_naming_the_setting() -> None:
    from searchsmith.serving.serve_config import load_serve_config

    with pytest.raises(ConfigError, match=r"server: server config: max_pending_requests: expected an int >= 1"):
        load_serve_config(None, ["server.max_pending_requests=0"])
    cfg = load_serve_config(None, ["server.max_pending_requests=40", "server.max_connections=null"])
    assert (cfg.server.pending_limit, cfg.server.connection_limit) == (40, 80)
    cfg = load_serve_config(None, ["server.max_pending_bytes=8388608", "server.max_body_bytes=1048576"])
    assert (cfg.server.pending_limit, cfg.server.connection_limit) == (8, 16)


# ---- the bound on connections (searchsmith serve) -------------------------------------------


def test_serve_passes_the_connection_limit_to_the_protocol(tmp_path, monkeypatch) -> None:
    import argparse

    import uvicorn
    from searchsmith.serving.profiling.common import free_port
    from searchsmith.serving.serve_cli import configure_serve, run_serve

    monkeypatch.chdir(tmp_path)  # no ./searchsmith-work/serve.yaml
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: runs.append(kwargs))
    parser = argparse.ArgumentParser()
    configure_serve(parser)
    port = str(free_port())
    run_serve(parser.parse_intermixed_args(["--port", port, "server.max_pending_requests=50"]))
    run_serve(parser.parse_intermixed_args(["--port", port, "server.max_connections=7"]))
    assert [kw["http"].max_connections for kw in runs] == [100, 7]
    assert "limit_concurrency" not in runs[0]  # uvicorn's own: a plain-text 503 that refuses /health too
    # the protocol's refusals are counted in the served app's metrics
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: apps.append((app, kwargs["http"])))
    run_serve(parser.parse_intermixed_args(["--port", port]))
    (app, protocol), = apps
    assert f"{_CONNECTIONS_REFUSED} 0.0" in app.state.serving.metrics.render().decode()
    protocol.on_connection_refused()
    assert f"{_CONNECTIONS_REFUSED} 1.0" in app.state.serving.metrics.render().decode()


_CONNECTIONS_REFUSED = 'searchsmith_refused_requests_total{limit="max_connections"}'


@contextmanager
def _held_connections(port: int, n: int):
    """``n`` kept-alive connections, each answered once (so the server has accepted them)."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.settimeout(10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while not reply.endswith(b'{"status":"ok"}'):
                reply += sock.recv(4096)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_a_connection_past_the_limit_gets_503_and_probes_are_answered(embedder) -> None:
    import httpx
    from searchsmith.serving.http_protocol import guarded_protocol

    app = create_app(ServerLimits(), embedder=embedder)
    with LoopbackServer(app, lifetime_s=120, log_level="error", http=guarded_protocol(64 * 1024, 30.0, 2)) as srv:
        with _held_connections(srv.port, 2):
            head, body = _reply(post_raw(srv.port, "/v1/embeddings", BODIES["/v1/embeddings"]))
            assert head.startswith(b"HTTP/1.1 503")
            assert b"retry-after: 1" in head.lower() and b"connection: close" in head.lower()
            assert body["error"]["type"] == "overloaded"
            assert body["error"]["message"].startswith("connections: 3 open, the limit is 2 (server.max_connections)")
            # the probes are answered on it: a busy server is alive
            assert httpx.get(f"{srv.url}/health", timeout=10).status_code == 200
        # the held connections closed: there is room again
        _wait("a connection to be admitted", lambda: httpx.post(
            f"{srv.url}/v1/embeddings", json=BODIES["/v1/embeddings"], timeout=10).status_code == 200)


def test_requests_refused_past_the_connection_limit_are_counted_in_metrics(embedder) -> None:
    """The protocol answers a request on a connection past server.max_connections before the
    app, so /metrics never counted it (searchsmith_refused_requests_total counted only
    max_pending_requests): it is counted under limit="max_connections", once per refused
    request, and a probe answered on such a connection is not."""
    import httpx
    from searchsmith.serving.http_protocol import guarded_protocol

    app = create_app(ServerLimits(), embedder=embedder)
    refused = app.state.serving.metrics.refusal_hook("max_connections")
    protocol = guarded_protocol(64 * 1024, 30.0, 2, on_connection_refused=refused)
    with LoopbackServer(app, lifetime_s=120, log_level="error", http=protocol) as srv:
        assert f"{_CONNECTIONS_REFUSED} 0.0" in httpx.get(f"{srv.url}/metrics", timeout=10).text
        with _held_connections(srv.port, 2):
            for _ in range(2):
                head, body = _reply(post_raw(srv.port, "/v1/embeddings", BODIES["/v1/embeddings"]))
                assert head.startswith(b"HTTP/1.1 503") and body["error"]["type"] == "overloaded"
            for _ in range(2):  # each on a third connection: answered, not refused nor counted
                metrics = httpx.get(f"{srv.url}/metrics", timeout=10)
                assert metrics.status_code == 200 and f"{_CONNECTIONS_REFUSED} 2.0" in metrics.text
        assert 'searchsmith_refused_requests_total{limit="max_pending_requests"} 0.0' in metrics.text


# ---- Retry-After from the measured drain rate -----------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_retry_after_of_the_pending_bound_follows_the_pace_requests_finish(embedder) -> None:
    """The 429's Retry-After was 1 s whatever the pace: requests that finish 2.5 s apart send
    the refused clients back 3, 5 and 8 s later (one drain interval each, in whole seconds)."""
    from searchsmith.serving.drain import DrainRate

    app = create_app(ServerLimits(max_pending_requests=2), embedder=embedder)
    admission = app.state.serving.admission
    clock = _Clock()
    admission.drain = DrainRate(clock=clock)
    with TestClient(app) as c:
        for _ in range(3):  # three requests answered, 2.5 s apart on the clock
            with admission.admit("/v1/embeddings"):
                clock.now += 2.5
        assert admission.drain.interval_s == 2.5
        admission.pending = admission.limit
        said = []
        for _ in range(3):
            resp = c.post("/v1/embeddings", json=BODIES["/v1/embeddings"])
            msg = error_message(resp, 429, "overloaded")
            said.append(resp.headers["retry-after"])
            assert f"(server.max_pending_requests); retry after {said[-1]} s, or raise" in msg
        assert said == ["3", "5", "8"]
        admission.pending = 0
    assert 'searchsmith_refused_requests_total{limit="max_pending_requests"} 3.0' in \
        app.state.serving.metrics.render().decode()


def test_retry_after_of_the_connection_limit_follows_the_pace_connections_close(embedder) -> None:
    from searchsmith.serving.drain import DrainRate
    from searchsmith.serving.http_protocol import guarded_protocol

    clock = _Clock()
    protocol = guarded_protocol(64 * 1024, 30.0, 2)
    assert isinstance(protocol.drain, DrainRate) and protocol.drain is not guarded_protocol(1, 1.0).drain
    protocol.drain = DrainRate(clock=clock)  # connections that closed 3.5 s apart
    protocol.drain.started()
    clock.now += 3.5
    protocol.drain.finished()
    app = create_app(ServerLimits(), embedder=embedder)
    with LoopbackServer(app, lifetime_s=120, log_level="error", http=protocol) as srv:
        with _held_connections(srv.port, 2):
            heads = [_reply(post_raw(srv.port, "/v1/embeddings", BODIES["/v1/embeddings"])) for _ in range(2)]
    assert [h.startswith(b"HTTP/1.1 503") for h, _ in heads] == [True, True]
    assert [re.search(rb"retry-after: (\d+)", h.lower()).group(1) for h, _ in heads] == [b"4", b"7"]
    assert "(server.max_connections); retry after 7 s" in heads[1][1]["error"]["message"]


# ---- /v1/feedback with the protocol router off ----------------------------------------------


class _RatedPipeline:
    """A pipeline whose protocol router is off (``protocol`` None) or on (a stand-in)."""

    def __init__(self, router_on: bool) -> None:
        self.protocol = object() if router_on else None

    def feedback(self, query_id: str, quality: float) -> dict[str, Any]:
        return {"query_id": query_id, "reward": quality}

    def close(self) -> None:
        pass


@pytest.mark.parametrize("router_on", [False, True])
def test_feedback_is_counted_and_refused_past_the_bound_with_the_router_on_or_off(router_on) -> None:
    """With the router off, /v1/feedback answered on the event loop, past the bound on requests
    in work too, and /metrics could not tell a rating dropped from one recorded. Now it is
    refused past the bound as with the router on (429, counted), and each accepted rating is
    counted under recorded="true" or "false"."""
    app = create_app(ServerLimits(max_pending_requests=2), pipeline=_RatedPipeline(router_on))
    admission = app.state.serving.admission
    rating = {"query_id": "q1", "quality": 0.5}
    recorded, dropped = ('searchsmith_feedback_total{recorded="true"}', 'searchsmith_feedback_total{recorded="false"}')
    with TestClient(app) as c:
        metrics = c.get("/metrics").text
        assert f"{recorded} 0.0" in metrics and f"{dropped} 0.0" in metrics
        for _ in range(2):
            assert c.post("/v1/feedback", json=rating).json()["recorded"] is router_on
        admission.pending = admission.limit
        resp = c.post("/v1/feedback", json=rating)
        assert "/v1/feedback: the server has 2 requests in work" in error_message(resp, 429, "overloaded")
        assert resp.headers["retry-after"] == "1"
        assert admission.pending == admission.limit  # the refusal counted nothing in
        admission.pending = 0
        error_message(c.post("/v1/feedback", json={"query_id": "q1", "quality": 3}), 422, "validation_error")
        metrics = c.get("/metrics").text
    assert f"{recorded if router_on else dropped} 2.0" in metrics  # the 429 and the 422 are not ratings
    assert f"{dropped if router_on else recorded} 0.0" in metrics
    assert 'searchsmith_refused_requests_total{limit="max_pending_requests"} 1.0' in metrics
    assert 'searchsmith_requests_total{endpoint="/v1/feedback",status="429"} 1.0' in metrics


# ---- server.max_connections under --ray: the gateway ----------------------------------------


class _HeldReplicas:
    """The model replicas' DeploymentHandle, double: each request runs a small app in-process
    (``run_asgi``, what a replica runs); POST /v1/route waits for ``release``."""

    def __init__(self) -> None:
        from fastapi import FastAPI

        self.release = asyncio.Event()
        self.started = 0
        app = FastAPI()

        @app.post("/v1/route")
        async def route() -> dict[str, str]:
            self.started += 1
            await self.release.wait()
            return {"status": "routed"}

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        self.app = app

    def options(self, *, stream: bool):
        return self

    @property
    def forward(self):
        return self

    def remote(self, request):
        from searchsmith.serving.ray_gateway import run_asgi

        replicas = self

        class Stream:
            def __aiter__(self):
                return run_asgi(replicas.app, request)

            def cancel(self) -> None:
                pass

        return Stream()


def test_the_gateway_applies_max_connections_to_the_requests_in_flight() -> None:
    """Under --ray, server.max_connections was not read: Ray's proxy holds the connections and
    has no limit. The gateway (every request passes it) answers a request past the limit in
    flight 503 overloaded with Retry-After and Connection: close, as the server's protocol does;
    the probes are answered past it."""
    import httpx
    from searchsmith.serving.ray_gateway import GatewayDeployment, InFlightLimit

    replicas = _HeldReplicas()
    deployment = GatewayDeployment(replicas, retries=0, max_body_bytes=10_000, max_connections=2)
    limit = deployment.app
    assert isinstance(limit, InFlightLimit)
    assert not isinstance(GatewayDeployment(replicas, 0, 10_000).app, InFlightLimit)  # None: no limit

    async def go():
        transport = httpx.ASGITransport(app=limit)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=10) as c:
            held = [asyncio.ensure_future(c.post("/v1/route", json={"query": "q"})) for _ in range(2)]
            while replicas.started < 2:
                await asyncio.sleep(0.01)
            refused = await c.post("/v1/route", json={"query": "q"})
            probe = await c.get("/health")
            replicas.release.set()
            answered = await asyncio.gather(*held)
            after = await c.post("/v1/route", json={"query": "q"})
            return refused, probe, answered, after

    refused, probe, answered, after = asyncio.run(go())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close"
    err = refused.json()["error"]
    assert err["type"] == "overloaded" and err["message"] == (
        "connections: 2 requests in flight through the gateway, the limit is 2 (server.max_connections); "
        "retry after 1 s, or raise server.max_connections / add replicas")
    assert probe.status_code == 200 and probe.json() == {"status": "ok"}
    assert [r.status_code for r in answered] == [200, 200] and after.status_code == 200
    assert replicas.started == 3  # the refused request never reached a replica
    assert limit.in_flight == 0 and limit.drain.interval_s is not None  # finished requests set the pace


def test_the_gateway_has_room_for_the_connection_limit() -> None:
    """Ray lets at most max_ongoing_requests into the gateway at once and queues the rest without
    bound: below server.max_connections, that queue (not the limit) would hold the flood."""
    from searchsmith.serving.ray_gateway import GATEWAY_OPTIONS, PROBE_ROOM, gateway_options

    assert gateway_options() == GATEWAY_OPTIONS and gateway_options(256) == GATEWAY_OPTIONS
    big = gateway_options(5000)
    assert big["max_ongoing_requests"] == 5000 + PROBE_ROOM
    assert {k: v for k, v in big.items() if k != "max_ongoing_requests"} == \
        {k: v for k, v in GATEWAY_OPTIONS.items() if k != "max_ongoing_requests"}


def _serve_args(tmp_path, *overrides: str):
    import argparse

    from searchsmith.serving.serve_cli import configure_serve

    (tmp_path / "serve.yaml").write_text("search: false\n")
    parser = argparse.ArgumentParser()
    configure_serve(parser)
    return parser.parse_intermixed_args(["--config", str(tmp_path / "serve.yaml"), "--ray", *overrides])


def test_max_connections_without_the_gateway_is_refused_naming_the_fix(tmp_path) -> None:
    from searchsmith.serving.serve_cli import load_config, start_ray_serve

    args = _serve_args(tmp_path, "ray.gateway=false", "server.max_connections=100")
    with pytest.raises(ConfigError, match=re.escape(
            "server.max_connections: 100 cannot be applied with ray.gateway: false (Ray Serve's proxy then calls "
            "the replicas directly and has no connection limit); set ray.gateway: true")):
        start_ray_serve(args, load_config(args))


class _FakeServe:
    """``ray.serve``, double: records each deployment's options and bind arguments."""

    def __init__(self) -> None:
        self.deployments: dict[str, dict[str, Any]] = {}
        self.binds: dict[str, tuple] = {}

    def deployment(self, name: str, **options: Any):
        self.deployments[name] = options
        serve = self

        class Bound:
            def __init__(self, cls) -> None:
                self.cls = cls

            def bind(self, *args: Any) -> str:
                serve.binds[name] = args
                return name

        return Bound

    def ingress(self):
        return lambda cls: cls

    def start(self, **kwargs: Any) -> None:
        pass

    def run(self, app: Any, **kwargs: Any) -> None:
        self.ran = app


def test_serve_ray_passes_the_connection_limit_to_the_gateway(tmp_path, monkeypatch) -> None:
    """start_ray_serve binds the gateway with server.max_connections (or its default, over every
    replica) and gives it room for as many requests at once (a fake ray.serve: runs without Ray)."""
    import sys
    import types

    from searchsmith.serving.serve_cli import load_config, start_ray_serve

    cases = ((["server.max_connections=5000"], 5000), ([], 2 * 128),
             # null: twice the requests in work of every replica (each bounds its own at 128)
             (["--replicas", "3"], 3 * 2 * 128), (["ray.max_replicas=4"], 4 * 2 * 128),
             (["server.max_connections=300", "--replicas", "3"], 300), (["ray.gateway=false"], None))
    for overrides, limit in cases:
        serve = _FakeServe()
        ray = types.ModuleType("ray")
        ray.serve = serve
        monkeypatch.setitem(sys.modules, "ray", ray)
        monkeypatch.setitem(sys.modules, "ray.serve", serve)
        args = _serve_args(tmp_path, *overrides)
        line = start_ray_serve(args, load_config(args))
        assert "Ray Serve" in line
        if limit is None:  # no gateway: the replicas are the app, nothing to bound
            assert "gateway" not in serve.binds and serve.ran == "searchsmith"
            continue
        assert serve.binds["gateway"][1:] == (2, 4 * 1024 * 1024, limit), overrides
        assert serve.deployments["gateway"]["max_ongoing_requests"] == max(1024, limit + 64)
        assert serve.ran == "gateway"
