"""``searchsmith serve --ray``: serve.yaml's ``ray`` section (fixed replicas or autoscaling bounds);
the gateway in front of the replicas (in-process, with replicas that die on cue: a read is sent
again, a write or a request out of tries is answered 503, a stream cut after its first byte
ends with an ``error`` event); and two replicas on a two-node local Ray cluster (the
``ray_cluster`` fixture): one on each node, answering and streaming, then a loopback load
across a replica kill with no request lost and no 500. The Ray tests need Ray
(``pip install -e '.[ray]'``; CI installs it)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import socket
import threading
import time

import pytest
from searchsmith.models.config import from_dict
from searchsmith.serving.serve_config import RayServeConfig, ServeConfig


def test_fixed_replicas_or_autoscaling_bounds() -> None:
    fixed = RayServeConfig(replicas=3).deployment_options()
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    auto = RayServeConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=3).deployment_options()
    assert auto["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3}
    assert "num_replicas" not in auto and auto["ray_actor_options"] == {"num_cpus": 1.0}
    # --replicas on the command line wins over the bounds
    assert RayServeConfig(max_replicas=4).deployment_options(replicas=2)["num_replicas"] == 2
    cfg = from_dict(ServeConfig, {"ray": {"min_replicas": 2, "max_replicas": 6, "max_queued_requests": 10}})
    assert cfg.ray.deployment_options()["max_queued_requests"] == 10


@pytest.mark.parametrize("bad, match", [({"replicas": 0}, "replicas"), ({"min_replicas": 3, "max_replicas": 2},
                                        "max_replicas"), ({"max_queued_requests": 0}, "max_queued_requests"),
                                        ({"num_cpus": 0}, "num_cpus")])
def test_bad_ray_settings_are_refused(bad, match) -> None:
    with pytest.raises(ValueError, match=match):
        RayServeConfig(**bad)


def _args(*argv: str) -> argparse.Namespace:
    from searchsmith.serving.serve_cli import configure_serve

    parser = argparse.ArgumentParser()
    configure_serve(parser)
    return parser.parse_intermixed_args(list(argv))


def test_gateway_and_retries_are_settings() -> None:
    assert RayServeConfig().gateway is True and RayServeConfig().retries == 2
    cfg = from_dict(ServeConfig, {"ray": {"gateway": False, "retries": 0}})
    assert cfg.ray.gateway is False and cfg.ray.retries == 0
    with pytest.raises(ValueError, match="ray.retries"):
        RayServeConfig(retries=-1)


# ---- the gateway in-process: replicas that die on cue ---------------------------------------


def _tiny_app():
    """A stand-in for the server's app: a JSON route, a route that writes, an SSE stream and a
    plain-text stream (each piece of a stream its own ASGI message)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()

    @app.post("/v1/route")
    async def route(body: dict) -> JSONResponse:
        return JSONResponse({"echo": body})

    @app.post("/v1/feedback")
    async def feedback(body: dict) -> JSONResponse:
        return JSONResponse({"recorded": True})

    async def pieces(fmt: str):
        for i in range(4):
            yield fmt.format(i)
            await asyncio.sleep(0.01)  # the next piece is a later message

    @app.post("/v1/search")
    async def search() -> StreamingResponse:
        return StreamingResponse(pieces('event: answer\ndata: {{"delta": "{}"}}\n\n'), media_type="text/event-stream")

    @app.get("/v1/plain")
    async def plain() -> StreamingResponse:
        return StreamingResponse(pieces("line {}\n"), media_type="text/plain")

    return app


class _Replicas:
    """The model replicas' DeploymentHandle, double: each try runs the app in-process
    (``run_asgi``, what a replica runs) and, per ``deaths`` (one entry per try), the replica
    dies after that many batches of its answer (None: it lives); ``refuse`` is raised at once."""

    def __init__(self, deaths=(), refuse: Exception | None = None) -> None:
        self.app, self.deaths, self.refuse = _tiny_app(), list(deaths), refuse
        self.tries = self.cancelled = 0

    def options(self, *, stream: bool):
        assert stream
        return self

    @property
    def forward(self):
        return self

    def remote(self, request):
        from ray.exceptions import ActorDiedError
        from searchsmith.serving.ray_gateway import run_asgi

        self.tries += 1
        death = self.deaths.pop(0) if self.deaths else None
        replicas = self

        async def batches():
            if replicas.refuse is not None:
                raise replicas.refuse
            n = 0
            async for batch in run_asgi(replicas.app, request):
                if n == death:
                    raise ActorDiedError()
                yield batch
                n += 1
            if n == death:  # after its whole answer, before its stream ended
                raise ActorDiedError()

        class Stream:
            def __aiter__(self):
                return batches()

            def cancel(self) -> None:
                replicas.cancelled += 1

        return Stream()


def _through_gateway(replicas: _Replicas, method: str, path: str, retries: int = 2, **kw):
    pytest.importorskip("ray", reason="needs Ray (pip install -e '.[ray]')")
    import httpx
    from searchsmith.serving.middleware import BodyLimit
    from searchsmith.serving.ray_gateway import Gateway

    async def go():
        app = BodyLimit(Gateway(replicas, retries=retries), max_bytes=10_000)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


def _unavailable(resp) -> dict:
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1", (resp.status_code, resp.text)
    err = resp.json()["error"]
    assert err["type"] == "not_ready" and err["code"] == "replica_unavailable", err
    return err


# The POST routes whose replica's death the gateway may answer by sending them again: they read.
READ_POSTS = {"/v1/embeddings", "/v1/route", "/v1/rerank", "/v1/decompose", "/v1/cite", "/v1/images/place",
              "/v1/search"}


def test_every_write_route_is_one_the_gateway_never_retries() -> None:
    """A new route that changes state must go into ray_gateway.STATEFUL_PATHS (or, if it only
    reads, into READ_POSTS here): a retry after a replica's death would apply it twice."""
    from searchsmith.serving.http import create_app
    from searchsmith.serving.ray_gateway import STATEFUL_PATHS

    posts = {r.path for r in create_app().routes if "POST" in (getattr(r, "methods", None) or set())}
    assert posts == READ_POSTS | STATEFUL_PATHS, sorted(posts ^ (READ_POSTS | STATEFUL_PATHS))


def test_gateway_sends_a_read_again_when_its_replica_dies() -> None:
    replicas = _Replicas(deaths=[0])  # the first replica dies before it answers
    resp = _through_gateway(replicas, "POST", "/v1/route", json={"query": "bread"})
    assert resp.status_code == 200 and resp.json() == {"echo": {"query": "bread"}}
    assert replicas.tries == 2 and resp.headers["x-searchsmith-retries"] == "1"
    # a replica that dies once its whole answer went out: the answer stands, nothing is sent again
    late = _Replicas(deaths=[1])
    resp = _through_gateway(late, "POST", "/v1/route", json={"query": "bread"})
    assert resp.status_code == 200 and resp.json() == {"echo": {"query": "bread"}}
    assert late.tries == 1 and "x-searchsmith-retries" not in resp.headers


def test_gateway_answers_503_to_a_write_or_after_its_retries() -> None:
    replicas = _Replicas(deaths=[0])
    err = _unavailable(_through_gateway(replicas, "POST", "/v1/feedback", json={"query_id": "q", "quality": 1}))
    assert replicas.tries == 1 and "not retried (/v1/feedback changes state" in err["message"]
    replicas = _Replicas(deaths=[0, 0, 0])
    err = _unavailable(_through_gateway(replicas, "POST", "/v1/route", json={"query": "x"}, retries=2))
    assert replicas.tries == 3 and "ActorDiedError), after 3 tries" in err["message"]


def test_gateway_ends_a_stream_cut_after_its_first_byte() -> None:
    # SSE: the pieces sent, then an error event (as routes.py reports a failure mid-stream); no retry
    replicas = _Replicas(deaths=[2])
    resp = _through_gateway(replicas, "POST", "/v1/search", json={})
    assert resp.status_code == 200 and replicas.tries == 1
    events = [block for block in resp.text.split("\n\n") if block]
    assert events[:2] == ['event: answer\ndata: {"delta": "0"}', 'event: answer\ndata: {"delta": "1"}']
    name, data = events[2].split("\n")
    error = json.loads(data.removeprefix("data: "))
    assert name == "event: error" and error["status"] == 503 and error["error"]["code"] == "replica_unavailable"
    assert len(events) == 3
    # any other body: the connection is cut (the client sees an incomplete answer, not a short one)
    with pytest.raises(ConnectionAbortedError, match="stopped mid-answer"):
        _through_gateway(_Replicas(deaths=[1]), "GET", "/v1/plain")
    # a whole stream passes through piece by piece
    resp = _through_gateway(_Replicas(), "GET", "/v1/plain")
    assert resp.text == "line 0\nline 1\nline 2\nline 3\n"


def test_gateway_answers_backpressure_429_and_bodies_over_the_limit_413() -> None:
    pytest.importorskip("ray", reason="Ray's BackPressureError needs the ray extra (pip install -e '.[ray]')")
    from ray.serve.exceptions import BackPressureError

    resp = _through_gateway(_Replicas(refuse=BackPressureError(num_queued_requests=4, max_queued_requests=4)),
                            "POST", "/v1/route", json={"query": "x"})
    assert resp.status_code == 429 and resp.headers["retry-after"] == "1"
    assert resp.json()["error"]["type"] == "overloaded" and "ray.max_queued_requests" in resp.json()["error"]["message"]
    replicas = _Replicas()
    resp = _through_gateway(replicas, "POST", "/v1/route", content=b"x" * 20_000)
    assert resp.status_code == 413 and resp.json()["error"]["type"] == "too_large" and replicas.tries == 0


def test_an_address_that_does_not_answer_is_a_clear_error(tmp_path) -> None:
    pytest.importorskip("ray.serve", reason="needs Ray Serve (pip install -e '.[ray]')")
    from searchsmith.models.errors import ConfigError
    from searchsmith.serving.serve_cli import load_config, start_ray_serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing answers there
    (tmp_path / "serve.yaml").write_text(f"search: false\nray:\n  address: 127.0.0.1:{port}\n")
    args = _args("--config", str(tmp_path / "serve.yaml"), "--ray")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"ray.address '127.0.0.1:{port}' \(serve.yaml\): no Ray head answers"
                                          r".*ray start --head"):
        start_ray_serve(args, load_config(args))
    assert time.monotonic() - start < 10


# ---- two replicas on a two-node local Ray cluster --------------------------------------------


@pytest.fixture(scope="module")
def served(ray_cluster, small_index, tmp_path_factory):
    """``searchsmith serve --ray --replicas 2`` on the ``ray_cluster`` (serve.yaml ``ray.address``),
    with the pipeline (for a stream); one CPU per replica, and one CPU per node: one replica
    on each node. Yields the URL."""
    pytest.importorskip("ray.serve", reason="needs Ray Serve (pip install -e '.[ray]')")
    import ray
    from ray import serve
    from searchsmith.serving.profiling.common import free_port, wait_ready
    from searchsmith.serving.serve_cli import load_config, start_ray_serve

    work = tmp_path_factory.mktemp("ray-serve")
    (work / "serve.yaml").write_text(f"index: {small_index}\nserver:\n  stream_chunk_chars: 16\n"
                                     f"ray:\n  address: {ray_cluster}\n  num_cpus: 1\n")
    port = free_port()
    args = _args("--config", str(work / "serve.yaml"), "--ray", "--replicas", "2", "--port", str(port))
    try:
        line = start_ray_serve(args, load_config(args))
        assert "2 Ray Serve replica(s)" in line
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, 180, "the Ray Serve replicas")
        yield url
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_on_two_nodes_answer_and_stream(served) -> None:
    import httpx
    import ray

    assert httpx.get(f"{served}/health").json() == {"status": "ok"}
    assert "swagger-ui" in httpx.get(f"{served}/docs").text
    # concurrent requests spread over both replicas, one on each node
    seen: collections.Counter = collections.Counter()

    def client() -> None:
        with httpx.Client(timeout=60) as c:
            for _ in range(6):
                r = c.post(f"{served}/v1/route", json={"query": "bread dough"})
                assert r.status_code == 200 and r.json()["sources"], r.text
                seen[r.headers["x-searchsmith-replica"]] += 1

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    nodes = {n["NodeID"][:12]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    where = {tag.split("@")[1] for tag in seen}
    assert len(seen) == 2 and sum(seen.values()) == 24, seen
    assert {name for node in where for name in nodes[node] if name.startswith("node_")} == {"node_a", "node_b"}
    # a Server-Sent Events answer streams through the gateway in several events
    with httpx.stream("POST", f"{served}/v1/search", timeout=60,
                      json={"query": "How long should I knead bread dough?", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    names = [block.split("\n")[0] for block in text.split("\n\n") if block]
    assert names.count("event: answer") >= 2 and names[-1] == "data: [DONE]", names
    assert "event: citations" in names


def test_two_replicas_answer_across_a_replica_kill(served) -> None:
    """Six clients post /v1/embeddings (12 texts each: the replicas, not the hops, take most
    of the time, so the killed one has requests in flight) for 8 s; one model replica is
    killed after 2.5 s. Every request gets an HTTP answer: 200 (the requests in flight on the
    killed replica are sent to the other one by the gateway) or a clear 503 with Retry-After,
    never a 500. Whether a request is in flight on the killed replica at the instant of the kill
    is a matter of timing, so the test does not count on one (the gateway's retry of such a
    request is tested without Ray above); it checks that the kill took a replica that was
    answering, and that every request sent after it is answered by the other one."""
    import httpx
    import ray

    outcomes: collections.Counter = collections.Counter()
    after_kill: collections.Counter = collections.Counter()
    unavailable: list[httpx.Response] = []
    answered_by: list[tuple[bool, str, bool]] = []  # (sent after the kill, the replica that answered, retried)
    killed = threading.Event()
    texts = [f"how long should bread dough rise, take {i}" for i in range(12)]
    stop = time.monotonic() + 8

    def client() -> None:
        with httpx.Client(timeout=60) as c:
            while time.monotonic() < stop:
                after = killed.is_set()
                try:
                    r = c.post(f"{served}/v1/embeddings", json={"input": texts})
                except httpx.HTTPError as exc:  # lost: no HTTP answer at all
                    outcomes[f"lost: {type(exc).__name__}"] += 1
                    continue
                outcomes[r.status_code] += 1
                if r.status_code == 503:
                    unavailable.append(r)
                else:
                    answered_by.append((after, r.headers["x-searchsmith-replica"].split("@")[0],
                                        "x-searchsmith-retries" in r.headers))
                if killed.is_set():
                    after_kill[r.status_code] += 1

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(2.5)
    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("SERVE_REPLICA::searchsmith#searchsmith#")]
    assert len(replicas) == 2, replicas
    victim = replicas[0]["name"].rsplit("#", 1)[1]
    ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
    killed.set()
    for t in threads:
        t.join()
    assert not [k for k in outcomes if isinstance(k, str)], outcomes  # nothing lost
    assert set(outcomes) <= {200, 503}, outcomes  # never Ray's 500
    for r in unavailable:
        _unavailable(r)
    assert outcomes[200] > 20 and after_kill[200] > 5, (outcomes, after_kill)
    before = collections.Counter(tag for after, tag, _ in answered_by if not after)
    after = collections.Counter(tag for after, tag, _ in answered_by if after)
    assert len(before) == 2 and before[victim] > 0, (victim, before)  # the killed replica was answering
    assert after and victim not in after, (victim, after)  # and nothing sent after the kill reached it
    # a request that was in flight on it (if any): answered by the other one, or a 503 (above)
    assert not [tag for _, tag, again in answered_by if again and tag == victim], answered_by


def test_the_gateway_answers_a_websocket_handshake_as_the_server_does() -> None:
    """It closed with a bare 1008; now the 404 error body (or 1008 with the reason)."""
    from searchsmith.serving.ray_gateway import Gateway

    for extensions, first in (({"websocket.http.response": {}}, "websocket.http.response.start"),
                              ({}, "websocket.close")):
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "websocket.connect"}

        async def send(message: dict, sent=sent) -> None:
            sent.append(message)

        scope = {"type": "websocket", "path": "/v1/search", "headers": [], "extensions": extensions}
        asyncio.run(Gateway(None)(scope, receive, send))
        assert sent[0]["type"] == first
        said = sent[1]["body"].decode() if first.endswith("start") else sent[0]["reason"]
        assert "no WebSocket endpoint" in said and (not first.endswith("start") or sent[0]["status"] == 404)
