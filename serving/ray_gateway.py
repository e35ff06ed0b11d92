"""``searchsmith serve --ray``: a thin gateway in front of the model replicas, so that a request
whose replica dies is answered by another replica or with a clear 503, never lost or a 500.

Two Ray Serve deployments (deployed by ``serve_cli.start_ray_serve``)::

    HTTP proxy -> gateway (ingress, 0 CPUs, no models)  -- DeploymentHandle -->  searchsmith (N replicas)
                  Gateway: reads the request, forwards it,                        ModelReplica: the server's
                  streams the replica's answer back; on a                         FastAPI app in-process;
                  replica's death retries or answers 503                          forward() runs it on one request

Why: Ray Serve's HTTP proxy answers 500 (plain text) to a request in flight on a replica that
dies (``ray/serve/_private/http_util.get_http_response_status``), this Ray has no proxy hook,
and Ray's router retries only requests that never reached a replica. The gateway sees the
replica's death (``RayActorError``) as an exception of the handle's stream and decides:

- nothing of the answer sent to the client yet, and the request reads only (every route but
  those in :data:`STATEFUL_PATHS`): sent again to another replica, up to ``ray.retries`` times;
- otherwise, before the first byte: 503 in the server's error shape (``{"error": {"message",
  "type": "not_ready", "param", "code": "replica_unavailable"}}``) with ``Retry-After``;
- after the first byte (a stream): a Server-Sent Events ``error`` event (``{"error", "status":
  503}``, as ``routes.py`` sends a failure after the first piece), or, for any other body, the
  connection is cut: the client sees an incomplete answer, never a silently short one.

Ray Serve's own backpressure (``ray.max_queued_requests`` of the replicas' queue) becomes the
server's 429 ``overloaded`` with ``Retry-After``. ``server.max_connections`` bounds the requests
in flight through the gateway (:class:`InFlightLimit`): Ray's proxy holds the connections and
has no limit of its own, but every request reaches this one gateway, and each in flight holds a
connection; past the limit the answer is the server's 503 ``overloaded`` with ``Retry-After`` and
``Connection: close`` (the probes are still answered). Idle kept-alive connections are Ray's proxy's
(closed after its keep-alive timeout), and refusals are in the gateway's log, not in /metrics
(a replica's). Responses stream through (``/v1/search`` with
``"stream": true``): the replica yields the ASGI messages as the app sends them. Each answer
carries ``X-Searchsmith-Replica: <replica id>@<node id>`` (which replica, on which Ray node),
and one that a retry answered ``X-Searchsmith-Retries: <n>``.

The lifespan of the app (loading, then draining at shutdown) runs on each replica: Ray Serve's
ASGI wrapper runs it for ``ModelReplica`` (``serve.ingress``, late-bound app). The gateway is a
plain deployment (Ray Serve allows one ``serve.ingress`` class per application).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Protocol, TypedDict

log = logging.getLogger(__name__)

# Routes that change a replica's state: a retry could apply them twice, so a request to one
# whose replica dies is answered 503 instead. A new route that writes must be listed here.
STATEFUL_PATHS = frozenset({"/v1/feedback"})
# Methods that never change state (besides POST to a path not in STATEFUL_PATHS).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRY_AFTER_S = 1  # Ray Serve starts a replacement replica within seconds; others answer at once
RETRY_PAUSE_S = 0.05  # lets the handle's router drop the dead replica before the next try
REPLICA_HEADER = b"x-searchsmith-replica"
RETRIES_HEADER = b"x-searchsmith-retries"  # on an answer that came from a retry: how many
# answered past server.max_connections, as the server's protocol answers them (http_protocol)
PROBES = frozenset({"/health", "/ready", "/metrics"})
# requests Ray lets into the gateway at once beyond server.max_connections: the probes answered
# past it (below the limit Ray would queue requests ahead of InFlightLimit, unbounded)
PROBE_ROOM = 64

Message = MutableMapping[str, object]  # an ASGI message
Scope = MutableMapping[str, object]  # an ASGI scope
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ForwardedRequest(TypedDict):
    """One HTTP request as the gateway hands it to a replica (the ASGI scope's fields + body)."""

    method: str
    path: str
    raw_path: bytes | None
    root_path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    scheme: str
    http_version: str
    client: tuple[str, int] | None
    server: tuple[str, int | None] | None
    body: bytes


class GatewayOptions(TypedDict):
    """Keyword arguments of ``serve.deployment`` for the gateway."""

    num_replicas: int
    max_ongoing_requests: int
    max_queued_requests: int
    ray_actor_options: dict[str, float]


# One async replica that only waits on handles: it takes no CPU reservation, and enough
# requests at once that the replicas' own queue (ray.max_queued_requests) is the one that fills.
GATEWAY_OPTIONS: GatewayOptions = {"num_replicas": 1, "max_ongoing_requests": 1024, "max_queued_requests": -1,
                                   "ray_actor_options": {"num_cpus": 0.0}}


def gateway_options(max_connections: int | None = None) -> GatewayOptions:
    """:data:`GATEWAY_OPTIONS` with room for ``max_connections`` requests at once and the probes."""
    ongoing = GATEWAY_OPTIONS["max_ongoing_requests"]
    if max_connections is not None:
        ongoing = max(ongoing, max_connections + PROBE_ROOM)
    return GatewayOptions(**{**GATEWAY_OPTIONS, "max_ongoing_requests": ongoing})  # type: ignore[typeddict-item]


class ReplicaStream(Protocol):
    """What ``handle.options(stream=True).forward.remote(request)`` returns."""

    def __aiter__(self) -> AsyncIterator[list[Message]]: ...

    def cancel(self) -> None: ...


class ForwardMethod(Protocol):
    def remote(self, request: ForwardedRequest) -> ReplicaStream: ...


class StreamingHandle(Protocol):
    forward: ForwardMethod


class ModelHandle(Protocol):
    """The part of Ray Serve's ``DeploymentHandle`` of the model replicas the gateway uses."""

    def options(self, *, stream: bool) -> StreamingHandle: ...


def forwarded_request(scope: Scope, body: bytes) -> ForwardedRequest:
    """The fields of an HTTP scope a replica needs to answer it (picklable; no ``app``/``state``)."""
    return ForwardedRequest(
        method=str(scope["method"]), path=str(scope["path"]), raw_path=scope.get("raw_path"),  # type: ignore[typeddict-item]
        root_path=str(scope.get("root_path", "")), query_string=bytes(scope.get("query_string", b"")),  # type: ignore[arg-type]
        headers=[(bytes(k), bytes(v)) for k, v in scope.get("headers", ())],  # type: ignore[attr-defined]
        scheme=str(scope.get("scheme", "http")), http_version=str(scope.get("http_version", "1.1")),
        client=scope.get("client"), server=scope.get("server"), body=body)  # type: ignore[typeddict-item]


def is_retryable(method: str, path: str) -> bool:
    """Whether a request may be sent again after its replica died (it changes no state)."""
    return method in READ_METHODS or (method == "POST" and path not in STATEFUL_PATHS)


async def run_asgi(app: ASGIApp, request: ForwardedRequest) -> AsyncIterator[list[Message]]:
    """Run ``app`` on one forwarded request in this process; yield its ASGI messages in batches
    (what is sent by the time the consumer asks: one batch for a plain JSON answer, one per
    piece for a stream).

    An exception of the app after its answer is complete is only logged (the app's error handler
    answered it); one before is raised.
    """
    scope: Scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                    **{k: v for k, v in request.items() if k != "body"}, "state": {}}
    queue: asyncio.Queue[Message | None] = asyncio.Queue()
    answered = asyncio.Event()
    body_given = False

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await answered.wait()  # the client "leaves" once the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()
        queue.put_nowait(message)

    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        done = False
        while not done:
            batch: list[Message] = []
            item = await queue.get()
            while True:
                if item is None:
                    done = True
                    break
                batch.append(item)
                if queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                yield batch
        if task.exception() is not None:
            if not answered.is_set():
                raise task.exception()  # type: ignore[misc]
            log.debug("the app raised after its answer was sent", exc_info=task.exception())
    finally:
        if not task.done():  # the gateway went away (client disconnected): stop the app
            task.cancel()


class ModelReplica:
    """One model replica: the server's FastAPI app, built here (the models load on the replica).

    Wrapped with ``serve.ingress()``: Ray Serve calls ``__serve_build_asgi_app__`` once the
    replica starts and runs the app's lifespan (start-up, then draining at shutdown). Behind
    the gateway the app is reached through :meth:`forward`; without it (``ray.gateway: false``)
    Ray's proxy calls it directly.
    """

    def __init__(self, config: str | None, overrides: list[str], index: str | None) -> None:
        self._args = (config, list(overrides), index)
        self._tag = b"local"
        self.app: ASGIApp  # set by Ray Serve's ASGI wrapper from __serve_build_asgi_app__

    def __serve_build_asgi_app__(self) -> ASGIApp:
        import argparse

        import ray
        from ray import serve
        from searchsmith.serving.serve_cli import build_app

        replica = serve.get_replica_context().replica_id.unique_id
        self._tag = f"{replica}@{ray.get_runtime_context().get_node_id()[:12]}".encode()
        config, overrides, index = self._args
        return build_app(argparse.Namespace(config=config, overrides=overrides, index=index), background=False)[1]

    async def forward(self, request: ForwardedRequest) -> AsyncIterator[list[Message]]:
        """Answer one request the gateway forwarded: the app's ASGI messages, in batches."""
        async for batch in run_asgi(self.app, request):
            for message in batch:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", ()), (REPLICA_HEADER, self._tag)]  # type: ignore[misc]
            yield batch


def _replica_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the replica serving a request died or became unreachable."""
    from ray.exceptions import RayActorError
    from ray.serve.exceptions import ReplicaUnavailableError

    gone = (RayActorError, ReplicaUnavailableError)
    return isinstance(exc, gone) or isinstance(getattr(exc, "cause", None), gone)


def _error_answer(exc: BaseException, code: str | None = None, retry_after_s: int | None = None) -> ASGIApp:
    """The server's error response for ``exc`` (``http_errors.error_response``: one table, one body)."""
    from searchsmith.serving.http_errors import error_response

    if code is not None:
        exc.code = code  # type: ignore[attr-defined]
    resp = error_response(exc)
    if retry_after_s is not None:
        resp.headers["Retry-After"] = str(retry_after_s)
    return resp


def _event_stream(start: Message) -> bool:
    headers = dict(start.get("headers", ()))  # type: ignore[arg-type]
    return headers.get(b"content-type", b"").startswith(b"text/event-stream")


class Gateway:
    """The gateway's ASGI app: forward each request to a model replica, retry or answer 503
    when that replica dies (module docstring). Wrapped in ``BodyLimit`` (the same 413)."""

    def __init__(self, handle: ModelHandle, retries: int = 2) -> None:
        self.handle = handle
        self.retries = retries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the server speaks no WebSocket: the same answer as without Ray
            from searchsmith.serving.middleware import NoWebSocket

            await NoWebSocket(self)(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        message = await receive()  # BodyLimit hands over the whole body at once
        request = forwarded_request(scope, bytes(message.get("body", b"")))  # type: ignore[arg-type]
        retryable = is_retryable(request["method"], request["path"])
        tries = 1 + (self.retries if retryable else 0)
        for attempt in range(1, tries + 1):
            failure = await self._forward_once(request, scope, receive, send, attempt - 1)
            if failure is None:
                return
            log.warning("%s %s: replica gone (%s), try %d of %d", request["method"], request["path"],
                        type(failure).__name__, attempt, tries)
            if attempt < tries:
                await asyncio.sleep(RETRY_PAUSE_S)
        from searchsmith.models.errors import NotReadyError

        why = (f"after {tries} tries" if retryable else
               f"not retried ({request['path']} changes state; check whether it took effect)")
        err = NotReadyError(f"{request['method']} {request['path']}: the replica serving it stopped "
                            f"({type(failure).__name__}), {why}; retry shortly (Ray Serve replaces the replica)")
        await _error_answer(err, "replica_unavailable", RETRY_AFTER_S)(scope, receive, send)

    def _refused(self, exc: Exception) -> ASGIApp:
        """The answer when the replicas refuse a request before it starts."""
        from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
        from searchsmith.models.errors import NotReadyError, OverloadedError

        if isinstance(exc, BackPressureError):
            return _error_answer(OverloadedError(
                f"{exc.message} The replicas' queue is full (serve.yaml ray.max_queued_requests); retry later",
                retry_after_s=exc.retry_after_s or RETRY_AFTER_S))
        if isinstance(exc, DeploymentUnavailableError):
            return _error_answer(NotReadyError(f"{exc.message} See 'serve status' and the replica logs"),
                                 "deployment_unavailable", RETRY_AFTER_S)
        return _error_answer(exc)  # 500 internal_error, the traceback in the gateway's log

    async def _forward_once(self, request: ForwardedRequest, scope: Scope, receive: Receive, send: Send,
                            retried: int) -> BaseException | None:
        """Stream one replica's answer to ``send``. Returns the replica's death when nothing was
        sent yet (the caller may try again), else None: the request is answered, or its answer
        ended as the module docstring says."""
        stream = self.handle.options(stream=True).forward.remote(request)
        start: Message | None = None  # held until the first body message: until then a retry is possible
        sent = answered = finished = False
        try:
            async for batch in stream:
                for message in batch:
                    if message["type"] == "http.response.start":
                        start = message
                        continue
                    if not sent and start is not None:
                        if retried:
                            start["headers"] = [*start.get("headers", ()), (RETRIES_HEADER, str(retried).encode())]  # type: ignore[misc]
                        await send(start)
                        sent = True
                    await send(message)
                    answered = message["type"] == "http.response.body" and not message.get("more_body", False)
            finished = True
        except Exception as exc:  # noqa: BLE001 - every failure gets an answer (or a cut connection)
            if answered:  # the replica died after the whole answer went out: nothing is missing
                log.info("%s %s: the replica stopped after answering (%s)", request["method"], request["path"],
                         type(exc).__name__)
            elif sent:
                await _broken_answer(request, start, send, exc)
            elif _replica_gone(exc):
                return exc
            else:
                await self._refused(exc)(scope, receive, send)
        finally:
            if not finished:
                stream.cancel()
        return None


async def _broken_answer(request: ForwardedRequest, start: Message | None, send: Send, exc: BaseException) -> None:
    """End an answer that failed after its first byte: an ``error`` event for a stream whose
    replica died, else a cut connection (an exception: Ray's proxy drops the connection)."""
    import json

    from searchsmith.models.errors import NotReadyError

    message = (f"{request['method']} {request['path']}: the replica serving it stopped mid-answer "
               f"({type(exc).__name__}); retry the request")
    if _replica_gone(exc) and start is not None and _event_stream(start):
        resp = _error_answer(NotReadyError(message), "replica_unavailable")
        event = {**json.loads(bytes(resp.body)), "status": resp.status_code}  # type: ignore[attr-defined]
        data = f"event: error\ndata: {json.dumps(event)}\n\n".encode()
        await send({"type": "http.response.body", "body": data, "more_body": False})
        return
    raise ConnectionAbortedError(message) from exc


class InFlightLimit:
    """ASGI wrapper: ``server.max_connections`` under ``--ray`` (module docstring). A request
    past ``max_connections`` in flight is answered 503 ``overloaded`` with a Retry-After from the
    pace at which requests finish (``serving/drain.py``) and ``Connection: close``, before its
    body is read; /health, /ready and /metrics are answered past it (and counted in flight).
    One event loop (the gateway replica's): no lock."""

    def __init__(self, app: ASGIApp, max_connections: int) -> None:
        from searchsmith.serving.drain import DrainRate

        self.app = app
        self.max_connections = max_connections
        self.in_flight = 0
        self.drain = DrainRate()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_connections and scope["path"] not in PROBES:
            await self._refusal()(scope, receive, send)
            return
        if self.in_flight == 0:
            self.drain.started()
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.drain.finished()

    def _refusal(self) -> ASGIApp:
        from searchsmith.serving.http_errors import error_body
        from starlette.responses import JSONResponse

        retry_after_s = self.drain.retry_after_s()
        message = (f"connections: {self.in_flight} requests in flight through the gateway, the limit is "
                   f"{self.max_connections} (server.max_connections); retry after {retry_after_s} s, or raise "
                   "server.max_connections / add replicas")
        log.warning("503: %s", message)
        return JSONResponse(error_body(message, "overloaded"), status_code=503,
                            headers={"Retry-After": str(retry_after_s), "Connection": "close"})


class GatewayDeployment:
    """The gateway as a Ray Serve deployment: Ray's HTTP proxy calls it with each request (a
    Starlette ``Request``) and sends the ``Response`` it returns by calling it with the
    request's ASGI ``scope, receive, send``; that response runs :class:`Gateway` (behind the
    server's ``BodyLimit``, inside :class:`InFlightLimit` when ``max_connections`` is given).
    Not an ``@serve.ingress`` class: Ray Serve allows one per application, and the model
    replicas are that one (Ray runs their app's lifespan)."""

    def __init__(self, models: ModelHandle, retries: int, max_body_bytes: int,
                 max_connections: int | None = None) -> None:
        from searchsmith.serving.middleware import BodyLimit
        from starlette.responses import Response

        app: ASGIApp = BodyLimit(Gateway(models, retries), max_bytes=max_body_bytes)
        if max_connections is not None:
            app = InFlightLimit(app, max_connections)
        self.app = app

        class Forwarded(Response):  # Ray sends it as ``await response(scope, receive, send)``
            def __init__(self) -> None:  # no body of its own: the gateway sends the answer
                self.background = None

            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                await app(scope, receive, send)

        self._forwarded = Forwarded

    async def __call__(self, request: object) -> object:
        """The answer to one request (``request``: Ray's Starlette ``Request``; its ASGI
        ``receive`` is read by the returned response)."""
        return self._forwarded()
