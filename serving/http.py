"""HTTP layer of the server: parse, validate, call the batcher or router, map errors.

The top layer (STYLE.md, "Serving"); the only module of searchsmith that imports a web
framework. Requests are validated into schema objects here, texts are tokenized here in a
worker thread (never on the event loop), and each text goes to the one ``DynamicBatcher``
as ``(token ids, length)``. Batching lives in ``batcher.py``, execution in ``runner.py``.

Endpoints:
    POST /v1/embeddings  OpenAI-compatible: ``{"input": str | [str], "model"?, "encoding_format"?}``
    POST /v1/route       ``{"query", "history"?, "mode"?, "top_k"?}`` -> ``RouteResult.to_dict()``
    GET  /health         200 while the process serves HTTP (liveness)
    GET  /ready          200 once the models are loaded and warm, else 503 (readiness)

Every error body is ``{"error": str, "type": str}``; status codes come from ``ERROR_TABLE``.
No CORS middleware (browsers from other origins are refused by default), and no request
field is ever used as a file path.

Usage::

    app = create_app(ServerConfig(), embedder=Embedder(), router=load_router(index_dir))
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from searchsmith.models.errors import (
    ConfigError,
    EmptyInputError,
    NotReadyError,
    OverloadedError,
    PayloadTooLargeError,
    RunnerError,
    SearchsmithError,
    UnauthorizedError,
    ValidationError,
)
from searchsmith.serving.batcher import BatcherConfig, DynamicBatcher
from searchsmith.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from searchsmith.serving.metrics import ServerMetrics
from searchsmith.serving.runner import EmbeddingRunner
from starlette.exceptions import HTTPException as StarletteHTTPException

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.router import CentroidRouter

__all__ = [
    "ERROR_TABLE",
    "EmptyInputError",
    "NotReadyError",
    "PayloadTooLargeError",
    "ServerConfig",
    "ServingState",
    "UnauthorizedError",
    "create_app",
    "error_response",
]

log = logging.getLogger(__name__)


# ---- errors ------------------------------------------------------------------------------
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
    (TimeoutError, 504, "timeout"),
    (RunnerError, 500, "runner_error"),
    (NotReadyError, 503, "not_ready"),
)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def error_response(exc: BaseException) -> JSONResponse:
    """The HTTP answer to an exception: status from ERROR_TABLE, body ``{"error", "type"}``.

    Unknown exceptions become 500 ``internal_error`` with a generic message (the traceback
    goes to the log, not to the client).
    """
    headers: dict[str, str] = {}
    if isinstance(exc, StarletteHTTPException):  # 404 / 405 from routing
        status, kind, message = exc.status_code, "http_error", str(exc.detail)
        headers.update(exc.headers or {})
    else:
        match = next(((s, k) for cls, s, k in ERROR_TABLE if isinstance(exc, cls)), None)
        if match is not None:
            status, kind = match
            message = (_validation_message(exc) if isinstance(exc, RequestValidationError)
                       else str(exc) or kind)
        else:
            log.error("unhandled error while serving a request", exc_info=exc)
            status, kind = 500, "internal_error"
            message = f"internal error ({type(exc).__name__}); see the server log"
    if isinstance(exc, OverloadedError):
        # Retry-After is whole seconds (RFC 9110); round up so clients never come back early.
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"error": message, "type": kind}, status_code=status, headers=headers)


# ---- config ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerConfig:
    """Limits and security of the server (``server`` in serve.yaml).

    Attributes:
        max_body_bytes: largest request body; larger ones get 413 before they are parsed.
        max_texts_per_request: most texts in one ``/v1/embeddings`` request (413 past it).
        max_input_chars: longest text in characters; longer ones are cut (``truncate``) or
            answered 413. Texts are also cut to the model's max_seq_length tokens when
            ``truncate`` is on (413 when off).
        truncate: cut over-long inputs (True) or reject them with 413 (False).
        api_keys: accepted ``Authorization: Bearer`` keys; empty turns authentication off.
        batcher: limits of the embedding batcher.
        request_timeout_s: longest time one request may take end to end (504 past it).
    """

    max_body_bytes: int = 4 * 1024 * 1024
    max_texts_per_request: int = 256
    max_input_chars: int = 20000
    truncate: bool = True
    api_keys: list[str] = field(default_factory=list)
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    request_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("max_body_bytes", "max_texts_per_request", "max_input_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.truncate, bool):
            problems.append(f"truncate: expected true or false, got {self.truncate!r}")
        if not isinstance(self.api_keys, (list, tuple)) or not all(
                isinstance(k, str) and k.strip() for k in self.api_keys):
            problems.append("api_keys: expected a list of non-empty strings (empty list = no auth)")
        if not isinstance(self.batcher, BatcherConfig):
            problems.append(f"batcher: expected a BatcherConfig, got {type(self.batcher).__name__}")
        t = self.request_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            problems.append(f"request_timeout_s: expected a finite number > 0, got {t!r}")
        if problems:
            raise ConfigError("server config: " + "; ".join(problems))


# ---- request schemas -----------------------------------------------------------------------


class EmbeddingsRequest(BaseModel):
    """OpenAI ``POST /v1/embeddings`` body (token-array inputs are not supported)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None  # accepted for OpenAI compatibility, unused


class RouteRequest(BaseModel):
    """``POST /v1/route`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    history: list[dict[str, Any]] | None = None
    mode: Literal["parallel", "serial", "auto"] | None = None
    top_k: int | None = Field(default=None, ge=1, le=1000)


# ---- state ---------------------------------------------------------------------------------


class ServingState:
    """The models of one app and their batcher; ``app.state.serving``.

    Args:
        config: the server's limits.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.embedder: Embedder | None = None
        self.router: CentroidRouter | None = None
        self.batcher: DynamicBatcher | None = None
        self.shutting_down = False
        self.metrics = ServerMetrics()

    def attach(self, embedder: Embedder | None = None, router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None) -> None:
        """Install loaded models (e.g. from a loader thread); /ready turns 200 once warm.

        Args:
            embedder: serves /v1/embeddings through a new DynamicBatcher.
            router: serves /v1/route.
            run_batch: replaces ``EmbeddingRunner(embedder).run`` (tests, other runtimes).
        """
        if embedder is not None:
            run = run_batch or EmbeddingRunner(embedder).run
            if run_batch is None:
                run(embedder.tokenize(["warm up"]))  # first forward pass allocates; pay it now
            name = str(embedder.model_name)
            self.batcher = DynamicBatcher(run, config=self.config.batcher, name=name,
                                          on_batch=self.metrics.batch_hook(name))
            batcher = self.batcher
            self.metrics.track_queue(name, lambda: batcher.stats()["queue_depth"])
            self.embedder = embedder
        if router is not None:
            self.router = router

    @property
    def ready(self) -> bool:
        return self.embedder is not None and not self.shutting_down

    def close(self) -> None:
        """Stop accepting work and finish what is queued (graceful shutdown)."""
        self.shutting_down = True
        if self.batcher is not None:
            self.batcher.close(drain=True, timeout_s=self.config.request_timeout_s)
        if self.router is not None:
            self.router.close()


def _model_names(embedder: Embedder) -> set[str]:
    name = str(embedder.model_name)
    return {"default", name, name.rsplit("/", 1)[-1]}


# ---- the body limit ------------------------------------------------------------------------


class _BodyLimit:
    """ASGI wrapper: answer 413 to bodies over ``max_bytes`` before anything parses them.

    Counts the bytes actually received, so a missing or lying Content-Length does not help.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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
            await error_response(self._too_large(length.decode()))(scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # client went away; the app sees an empty body and the send fails
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.max_bytes:
                await error_response(self._too_large(f"over {total}"))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# ---- the app -------------------------------------------------------------------------------


def create_app(config: ServerConfig | None = None, *, embedder: Embedder | None = None,
               router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None) -> FastAPI:
    """Build the FastAPI application.

    Models given here are attached (and warmed up) at once; otherwise attach them later with
    ``app.state.serving.attach(...)`` (``/ready`` answers 503 until then). Shutdown (the
    lifespan's exit) closes the batcher with drain, so requests in flight are answered.

    Args:
        config: limits and security; ``ServerConfig()`` when None.
        embedder: the embedding model behind /v1/embeddings.
        router: the centroid router behind /v1/route.
        run_batch: replaces the EmbeddingRunner (tests: a blocking or failing runner).

    Returns:
        The app; serve it with any ASGI server (uvicorn).
    """
    config = config or ServerConfig()
    if not isinstance(config, ServerConfig):
        raise ConfigError(f"create_app: config must be a ServerConfig, got {type(config).__name__}")
    state = ServingState(config)
    state.attach(embedder=embedder, router=router, run_batch=run_batch)
    keys = [k.encode() for k in config.api_keys]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await asyncio.to_thread(state.close)

    app = FastAPI(title="searchsmith", lifespan=lifespan)
    app.state.serving = state

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    for exc_type in (RequestValidationError, StarletteHTTPException, SearchsmithError,
                     TimeoutError, Exception):
        app.add_exception_handler(exc_type, on_error)

    def check_auth(request: Request) -> None:
        if not keys:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        # compare_digest against every key: the time taken does not reveal a matching prefix.
        if scheme.lower() != "bearer" or not any(
                hmac.compare_digest(token.strip().encode(), k) for k in keys):
            raise UnauthorizedError(
                "Authorization: missing or wrong API key; send 'Authorization: Bearer <key>' "
                "with a key from server.api_keys"
            )

    @app.middleware("http")
    async def count_requests(request: Request, call_next):
        start = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            state.metrics.observe_request(endpoint, status, time.perf_counter() - start)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if not state.ready:
            why = "shutting down" if state.shutting_down else "models are not loaded yet"
            return error_response(NotReadyError(f"not ready: {why}; retry shortly"))
        return JSONResponse({"status": "ready",
                             "models": {"embeddings": str(state.embedder.model_name),
                                        "route": state.router is not None}})

    @app.post("/v1/embeddings", dependencies=[Depends(check_auth)])
    async def embeddings(req: EmbeddingsRequest) -> JSONResponse:
        embedder_, batcher = state.embedder, state.batcher
        if embedder_ is None or batcher is None or state.shutting_down:
            raise NotReadyError("/v1/embeddings: the embedding model is not loaded yet; retry shortly")
        if req.model is not None and req.model not in _model_names(embedder_):
            raise ValidationError(
                f"model: {req.model!r} is not served here; use {embedder_.model_name!r} "
                "(or omit model)"
            )
        texts = [req.input] if isinstance(req.input, str) else req.input
        if not texts:
            raise EmptyInputError("input: the list is empty; send at least one string")
        if len(texts) > config.max_texts_per_request:
            raise PayloadTooLargeError(
                f"input: {len(texts)} texts, the limit is {config.max_texts_per_request} "
                "(server.max_texts_per_request); split the request"
            )
        for i, text in enumerate(texts):
            if not text.strip():
                raise EmptyInputError(f"input[{i}]: the text is empty; send non-blank strings")
            if len(text) > config.max_input_chars and not config.truncate:
                raise PayloadTooLargeError(
                    f"input[{i}]: {len(text)} characters, the limit is {config.max_input_chars} "
                    "(server.max_input_chars); shorten it or enable server.truncate"
                )
        ids = await asyncio.to_thread(_tokenize, embedder_, texts, config)
        vectors = await _embed(batcher, ids, config.request_timeout_s)
        data = []
        for i, vec in enumerate(vectors):
            if req.encoding_format == "base64":
                emb: Any = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            else:
                emb = np.asarray(vec, dtype=np.float32).tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(x) for x in ids)
        return JSONResponse({"object": "list", "data": data, "model": str(embedder_.model_name),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/v1/route", dependencies=[Depends(check_auth)])
    async def route(req: RouteRequest) -> JSONResponse:
        router_ = state.router
        if router_ is None or state.shutting_down:
            raise NotReadyError("/v1/route: no router is loaded; start the server with an index")
        if not req.query.strip():
            raise EmptyInputError("query: is empty; send a question")
        call = asyncio.to_thread(router_.route, req.query, req.history, req.mode, req.top_k)
        result = await asyncio.wait_for(call, timeout=config.request_timeout_s)
        return JSONResponse(result.to_dict())

    # The body limit runs before routing and parsing (not a CORS middleware: none is added).
    app.add_middleware(_BodyLimit, max_bytes=config.max_body_bytes)
    return app


def _tokenize(embedder: Embedder, texts: list[str], config: ServerConfig) -> list[list[int]]:
    """Token ids per text (worker thread). Truncates to max_input_chars and max_seq_length,
    or raises PayloadTooLargeError when ``config.truncate`` is off."""
    texts = [t[: config.max_input_chars] for t in texts]
    ids = embedder.tokenize(texts)
    if not config.truncate:
        limit = embedder.max_seq_length
        full = embedder.tokenizer(texts, truncation=False, return_attention_mask=False,
                                  return_token_type_ids=False)["input_ids"]
        for i, row in enumerate(full):
            if len(row) > limit:
                raise PayloadTooLargeError(
                    f"input[{i}]: {len(row)} tokens, the model's limit is {limit} "
                    "(max_seq_length); shorten it or enable server.truncate"
                )
    return ids


async def _embed(batcher: DynamicBatcher, ids: list[list[int]], timeout_s: float) -> list[Any]:
    """Submit every text to the batcher and await all results (in input order)."""
    futures: list[Future] = []
    try:
        for row in ids:
            futures.append(batcher.submit(row, length=len(row)))  # NotReadyError once closed
        waiting = [asyncio.wrap_future(f) for f in futures]
        return list(await asyncio.wait_for(asyncio.gather(*waiting), timeout=timeout_s))
    except TimeoutError as exc:
        if str(exc):
            raise
        raise TimeoutError(
            f"/v1/embeddings: no answer within {timeout_s} s (server.request_timeout_s); the "
            "server is overloaded, retry later or send fewer texts"
        ) from exc
    finally:
        for f in futures:  # on error: queued items are dropped, not run for nobody
            f.cancel()
