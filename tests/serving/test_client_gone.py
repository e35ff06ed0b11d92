"""A client that disconnects before its answer has its request's work dropped: over a real
socket to a real uvicorn server, a request still waiting in a model's queue when its client
leaves is never run, and it is counted under status 499 (client closed request)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from raw_http import post_raw
from searchsmith.serving.batcher import BatcherConfig
from searchsmith.serving.index import Index
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.profiling.server import LoopbackServer
from searchsmith.serving.router import CentroidRouter, RouterConfig


def _wait(what: str, cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class _Gated:
    """A router whose every call waits for ``gate``; records the queries it answered."""

    def __init__(self, router) -> None:
        self.router, self.gate, self.queries = router, threading.Event(), []

    def route(self, query, *args):
        self.queries.append(query)
        self.gate.wait(10)
        return self.router.route(query, *args)

    def close(self) -> None:
        self.router.close()


@pytest.fixture
def server(embedder, small_index):
    from searchsmith.serving.http import create_app

    gated = _Gated(CentroidRouter(Index.load(small_index), embedder, RouterConfig(top_k=3)))
    cfg = ServerLimits(calls=BatcherConfig(max_batch_size=1, max_queue=4, max_wait_ms=0))
    app = create_app(cfg, embedder=embedder, router=gated)
    try:
        with LoopbackServer(app, lifetime_s=120) as srv:
            yield app, srv.port, gated
    finally:
        gated.gate.set()


def test_a_queued_request_whose_client_left_is_never_run(server) -> None:
    import httpx

    app, port, gated = server
    gate = app.state.serving.gates["route"]
    result: dict = {}

    def first() -> None:
        result["first"] = httpx.post(f"http://127.0.0.1:{port}/v1/route", json={"query": "bread"}, timeout=30)

    worker = threading.Thread(target=first)
    worker.start()
    _wait("the first call to start", lambda: gated.queries == ["bread"])
    gone = post_raw(port, "/v1/route", {"query": "left before its answer"})
    _wait("the second call to be queued", lambda: gate.stats()["queue_depth"] == 1)
    gone.close()  # the client leaves while its request waits in the queue
    # the server sees the disconnect and cancels the request's work: its Future in the queue
    _wait("the left request to be cancelled", lambda: b'status="499"' in app.state.serving.metrics.render())
    kept = post_raw(port, "/v1/route", {"query": "rings"})  # a client that waits, queued after it
    _wait("the third call to be queued", lambda: gate.stats()["queue_depth"] >= 1)
    gated.gate.set()
    worker.join(30)
    assert result["first"].status_code == 200
    kept.settimeout(30)
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += kept.recv(4096)
    kept.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    _wait("the queue to drain", lambda: gate.stats()["queue_depth"] == 0)
    # the request of the client that left was dropped from the queue, never routed
    assert gated.queries == ["bread", "rings"]
    assert gate.stats()["items_cancelled"] >= 1


def test_a_complete_answer_is_not_cancelled_by_the_client_leaving_after_it() -> None:
    """Once the response's last byte is sent, the app runs to its end (its background work)."""
    from searchsmith.serving.middleware import answer_while_connected

    finished = []
    sent: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
        await asyncio.sleep(0.05)  # background work after the answer
        finished.append(True)

    async def receive():
        return {"type": "http.disconnect"}  # the client is gone at once

    async def send(message):
        sent.append(message)

    asyncio.run(answer_while_connected(app, {"type": "http"}, b"", receive, send))
    assert finished == [True] and sent[-1]["body"] == b"ok"


def test_the_app_reads_its_body_then_waits_for_the_disconnect() -> None:
    from searchsmith.serving.middleware import answer_while_connected

    seen: list[dict] = []
    left = asyncio.Event()

    async def app(scope, receive, send):
        seen.append(await receive())
        seen.append(await receive())  # a streaming response listening for the client to leave

    async def receive():
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        raise AssertionError("nothing is sent")

    async def run() -> None:
        task = asyncio.ensure_future(answer_while_connected(app, {"type": "http"}, b'{"a": 1}', receive, send))
        await asyncio.sleep(0.05)
        assert seen == [{"type": "http.request", "body": b'{"a": 1}', "more_body": False}]
        left.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(run())
    # the app's second receive() returned only once the client left (or it was cancelled first)
    assert seen[1:] in ([], [{"type": "http.disconnect"}])


class _SlowLLM:
    """An LLM double giving 100 pieces, 50 ms apart, to its listener; records how it ended."""

    def __init__(self, first_after_s: float = 0.0) -> None:
        self.given, self.outcome, self.started, self.first_after_s = 0, None, False, first_after_s

    def complete(self, messages, on_token=None):
        self.started = True
        time.sleep(self.first_after_s)  # reading the prompt
        try:
            for _ in range(100):
                if on_token is not None:
                    on_token("word ")
                self.given += 1
                time.sleep(0.05)
        except BaseException as exc:
            self.outcome = type(exc).__name__
            raise
        self.outcome = "finished"
        return "word " * 100, 10, 100


def _llm_app(small_index, embedder, first_after_s: float = 0.0):
    from searchsmith.models.config import from_dict
    from searchsmith.serving.http import create_app
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    cfg = from_dict(PipelineConfig, {"generation": {"backend": "openai",
                                                    "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}})
    pipe = Pipeline(cfg, Index.load(small_index, embedder=embedder), embedder)
    llm = _SlowLLM(first_after_s)
    next(s for s in pipe.stages if s.name == "generation").llm = llm
    return create_app(ServerLimits(), pipeline=pipe), llm


def test_a_client_that_leaves_a_json_search_stops_the_llm_generating(small_index, embedder) -> None:
    """A non-streamed /v1/search ran its LLM to the end after its client left (noticed
    2026-12-06): only a streamed request passed the generation a listener to stop it through.
    Every /v1/search now passes one; the cancelled request sets it."""
    app, llm = _llm_app(small_index, embedder)
    with LoopbackServer(app, lifetime_s=120) as srv:
        sock = post_raw(srv.port, "/v1/search", {"query": "How long should I knead bread dough?"})
        _wait("the LLM to start", lambda: llm.given >= 2, 30)
        sock.close()  # gone while its answer is being generated
        _wait("the generation to stop", lambda: llm.outcome is not None, 10)
        assert llm.outcome == "ClientGone" and llm.given < 50
        _wait("the client to be counted gone", lambda: b'status="499"' in app.state.serving.metrics.render())
    app2, llm2 = _llm_app(small_index, embedder)  # a client that stays gets the whole answer
    with LoopbackServer(app2, lifetime_s=120) as srv:
        import httpx

        r = httpx.post(f"http://127.0.0.1:{srv.port}/v1/search", json={"query": "How long should I knead bread?"},
                       timeout=60)
        assert r.status_code == 200 and r.json()["answer_text"].count("word") == 100
        assert llm2.outcome == "finished"


def test_a_streaming_client_that_leaves_stops_the_llm_generating(small_index, embedder) -> None:
    """The LLM's pieces are the expensive part: once the client of a streamed /v1/search is gone,
    the next piece stops the generation (the openai backend then closes its connection to the
    LLM server) and no fallback answer is computed for nobody."""
    app, llm = _llm_app(small_index, embedder)
    with LoopbackServer(app, lifetime_s=120) as srv:
        sock = post_raw(srv.port, "/v1/search", {"query": "How long should I knead bread dough?", "stream": True})
        sock.settimeout(30)
        got = b""
        while b"event: answer" not in got:
            got += sock.recv(4096)
        sock.close()  # gone after the first piece
        _wait("the generation to stop", lambda: llm.outcome is not None, 10)
        assert llm.outcome == "ClientGone" and llm.given < 50
        _wait("the search queue to be free", lambda: app.state.serving.gates["search"].stats()["queue_depth"] == 0)


def test_a_streaming_client_that_leaves_before_the_first_piece_stops_the_llm(small_index, embedder) -> None:
    """A streamed /v1/search whose client left before the LLM's first piece had its request task
    left running (only the handler waiting for it was cancelled): the LLM then ran to its end."""
    app, llm = _llm_app(small_index, embedder, first_after_s=1.0)
    with LoopbackServer(app, lifetime_s=120) as srv:
        sock = post_raw(srv.port, "/v1/search", {"query": "How long should I knead bread dough?", "stream": True})
        _wait("the LLM to start", lambda: llm.started, 30)
        sock.close()  # gone while the LLM reads its prompt
        _wait("the generation to stop", lambda: llm.outcome is not None, 10)
        assert llm.outcome == "ClientGone" and llm.given == 0
