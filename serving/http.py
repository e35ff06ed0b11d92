"""HTTP layer of the server: parse, validate, call the batcher or router, map errors.

The top layer (STYLE.md, "Serving"); the only module of searchsmith that imports a web
framework. Requests are validated into schema objects here, texts are tokenized here in a
worker thread (never on the event loop), and each text goes to the one ``DynamicBatcher``
as ``(token ids, length)``. Batching lives in ``batcher.py``, execution in ``runner.py``.

Endpoints:
    POST /v1/embeddings  OpenAI-compatible: ``{"input": str | [str], "model"?, "encoding_format"?}``
    POST /v1/rerank      TEI / Cohere / Jina: ``{"query", "documents": [str | {"text"}], "top_n"?,
                         "return_documents"?, "raw_scores"?}`` -> ``{"results": [{"index",
                         "relevance_score", "document"?}]}`` best first; pairs batched across requests
    POST /v1/route       ``{"query", "history"?, "mode"?, "top_k"?}`` -> ``RouteResult.to_dict()``
    POST /v1/decompose   ``{"query", "history"?, "max_nodes"?}`` -> ``{"type", "nodes", "rewrite"}``
    POST /v1/cite        ``{"sentences" | "answer", "documents": [{"id", "text"}]}`` -> per sentence
                         its entities and the ids of the documents that support it
    POST /v1/images/place  ``{"paragraphs", "images": [{"id", "caption"?, "url"?, "data"?}]}`` ->
                         one paragraph per image (Hungarian assignment) or unplaced
    POST /v1/search      the pipeline: JSON, or Server-Sent Events with ``"stream": true``
    POST /v1/feedback    ``{"query_id", "quality"}``: the protocol router's reward
    GET  /health         200 while the process serves HTTP (liveness)
    GET  /ready          200 once the models are loaded and warm, else 503 (readiness)
    GET  /metrics        Prometheus

Embeddings and rerank pairs go through a ``DynamicBatcher`` each (batched across requests);
decompose, cite, images and search go through one with batches of one (``server.calls``):
the same bounded queue (429 with Retry-After), queue timeout and metrics, no batching.

Every error body is ``{"error": str, "type": str}``; status codes come from ``ERROR_TABLE``.
CORS is off unless ``server.cors_origins`` lists origins, and no request field is ever used
as a file path: images arrive as base64 ``data`` (a ``url`` is echoed back, never fetched).

Usage::

    app = create_app(ServerConfig(), embedder=Embedder(), router=load_router(index_dir))
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
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
from fastapi.responses import JSONResponse, Response, StreamingResponse
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
from searchsmith.serving.runner import (
    BundleEmbedder,
    CallOutcome,
    EmbeddingRunner,
    RerankRunner,
    call_each,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.router import CentroidRouter

__all__ = [
    "ERROR_TABLE",
    "cite_sentences",
    "decode_image",
    "place_images",
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
        max_documents_per_request: most documents in one /v1/rerank or /v1/cite request.
        max_pairs_per_request: most (sentence, document) pairs one /v1/cite request scores.
        max_images_per_request: most images in one /v1/images/place request.
        max_image_bytes: largest decoded image (413 past it).
        max_image_pixels: largest image in pixels (width x height; a decompression-bomb guard).
        cors_origins: origins allowed by CORS (``["*"]`` for any); empty turns CORS off.
        rerank_batcher: limits of the rerank batcher (items are (query, document) pairs).
        calls: the queue of each unbatched model (decompose, cite, images, search);
            ``max_batch_size`` is 1 there, ``workers`` calls run at once per model.
        stream_chunk_chars: characters of answer text per Server-Sent Event of /v1/search.
    """

    max_body_bytes: int = 4 * 1024 * 1024
    max_texts_per_request: int = 256
    max_input_chars: int = 20000
    truncate: bool = True
    api_keys: list[str] = field(default_factory=list)
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    request_timeout_s: float = 60.0
    max_documents_per_request: int = 1000
    max_pairs_per_request: int = 4096
    max_images_per_request: int = 32
    max_image_bytes: int = 2 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096
    cors_origins: list[str] = field(default_factory=list)
    rerank_batcher: BatcherConfig = field(default_factory=BatcherConfig)
    calls: BatcherConfig = field(
        default_factory=lambda: BatcherConfig(max_batch_size=1, max_wait_ms=0.0, max_queue=64))
    stream_chunk_chars: int = 64

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("max_body_bytes", "max_texts_per_request", "max_input_chars", "max_documents_per_request",
                     "max_pairs_per_request", "max_images_per_request", "max_image_bytes", "max_image_pixels",
                     "stream_chunk_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.truncate, bool):
            problems.append(f"truncate: expected true or false, got {self.truncate!r}")
        if not isinstance(self.api_keys, (list, tuple)) or not all(
                isinstance(k, str) and k.strip() for k in self.api_keys):
            problems.append("api_keys: expected a list of non-empty strings (empty list = no auth)")
        for name in ("batcher", "rerank_batcher", "calls"):
            if not isinstance(getattr(self, name), BatcherConfig):
                problems.append(f"{name}: expected a BatcherConfig, got {type(getattr(self, name)).__name__}")
        if isinstance(self.calls, BatcherConfig) and self.calls.max_batch_size != 1:
            problems.append(f"calls.max_batch_size: must be 1 (these models do not batch across "
                            f"requests), got {self.calls.max_batch_size}")
        if not isinstance(self.cors_origins, (list, tuple)) or not all(
                isinstance(o, str) and o.strip() for o in self.cors_origins):
            problems.append("cors_origins: expected a list of origins such as https://app.example.com "
                            "(empty list = CORS off)")
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


class RerankDocument(BaseModel):
    """A document as Cohere and Jina send it: ``{"text": ...}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str


class RerankRequest(BaseModel):
    """``POST /v1/rerank`` body (the TEI / Cohere / Jina shape)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    raw_scores: bool = False  # True: logits; False: sigmoid(logit) in (0, 1), the same order
    model: str | None = None


class DecomposeRequest(BaseModel):
    """``POST /v1/decompose`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    history: list[dict[str, Any]] | None = None
    max_nodes: int | None = Field(default=None, ge=1, le=64)


class CiteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    text: str


class CiteRequest(BaseModel):
    """``POST /v1/cite`` body: ``sentences`` or an ``answer`` (split into sentences here)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sentences: list[str] | None = None
    answer: str | None = None
    documents: list[CiteDocument]
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    max_per_sentence: int | None = Field(default=None, ge=1, le=100)


class PlaceImage(BaseModel):
    """An image of ``/v1/images/place``: pixels as base64 ``data`` and/or a caption (no paths)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    caption: str | None = None
    url: str | None = None  # echoed back, never fetched
    data: str | None = None  # base64 PNG / JPEG / ... bytes


class PlaceRequest(BaseModel):
    """``POST /v1/images/place`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    paragraphs: list[str]
    images: list[PlaceImage]
    query: str | None = None
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)


class SearchRequest(BaseModel):
    """``POST /v1/search`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    history: list[dict[str, Any]] | None = None
    preset: str | None = None
    strategy: Literal["direct", "parallel", "planning"] | None = None
    routing_mode: Literal["serial", "parallel", "auto"] | None = None
    query_id: str | None = Field(default=None, min_length=1, max_length=128)
    stream: bool = False


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback`` body: the quality of an answer in [0, 1]."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query_id: str = Field(min_length=1, max_length=128)
    quality: float = Field(ge=0.0, le=1.0)


# ---- state ---------------------------------------------------------------------------------

CALL_MODELS = ("decompose", "cite", "images", "search")


class ServingState:
    """The models of one app and their batcher; ``app.state.serving``.

    Args:
        config: the server's limits.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.embedder: Embedder | BundleEmbedder | None = None
        self.router: CentroidRouter | None = None
        self.batcher: DynamicBatcher | None = None
        self.reranker: RerankRunner | None = None
        self.rerank_batcher: DynamicBatcher | None = None
        self.decomposer: Any = None
        self.citation: Any = None
        self.images: Any = None
        self.pipeline: Any = None
        self.pipeline_config: PipelineConfig | None = None
        self.gates: dict[str, DynamicBatcher] = {}  # CALL_MODELS -> a batcher of batch size 1
        self.loading = False
        self.load_error: str | None = None
        self.shutting_down = False
        self.metrics = ServerMetrics()

    def _batcher(self, run: Callable[[list[Any]], Sequence[Any]], config: BatcherConfig,
                 name: str) -> DynamicBatcher:
        batcher = DynamicBatcher(run, config=config, name=name, on_batch=self.metrics.batch_hook(name))
        self.metrics.track_queue(name, lambda: batcher.stats()["queue_depth"])
        return batcher

    def attach(self, embedder: Embedder | BundleEmbedder | None = None, router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None, *,
               reranker: Any = None, decomposer: Any = None, citation: Any = None, images: Any = None,
               pipeline: Any = None, pipeline_config: PipelineConfig | None = None,
               run_rerank: Callable[[list[tuple[str, str]]], Sequence[float]] | None = None,
               warm: bool = True) -> None:
        """Install loaded models (e.g. from a loader thread); /ready turns 200 once warm.

        Args:
            embedder: serves /v1/embeddings through a new DynamicBatcher: a torch
                ``Embedder`` or a ``BundleEmbedder`` (an ``embed`` bundle).
            router: serves /v1/route.
            run_batch: replaces the embedder's runner (tests, other runtimes).
            reranker: a ``rerank`` bundle (or ``RerankRunner``): /v1/rerank, batched.
            decomposer: a ``decompose`` bundle: /v1/decompose.
            citation: a ``cite`` bundle: /v1/cite (without one: pattern entities and
                embedding cosine, as the pipeline does).
            images: an ``images`` bundle: /v1/images/place (without one: captions only).
            pipeline: a ``serving.pipeline.Pipeline``: /v1/search and /v1/feedback.
            pipeline_config: thresholds of cite and images (the pipeline's when None).
            run_rerank: replaces ``RerankRunner(reranker).run`` (tests).
            warm: run each model once now (the first call allocates; pay it before /ready).
        """
        if embedder is not None:
            if isinstance(embedder, BundleEmbedder):
                run = run_batch or embedder.run
                warm_item: Any = "warm up"
            else:
                run = run_batch or EmbeddingRunner(embedder).run
                warm_item = None if run_batch is not None else embedder.tokenize(["warm up"])[0]
            if warm and warm_item is not None:
                run([warm_item])
            name = str(embedder.model_name)
            self.batcher = self._batcher(run, self.config.batcher, name)
            self.embedder = embedder
        if router is not None:
            self.router = router
        if reranker is not None:
            runner = reranker if isinstance(reranker, RerankRunner) else RerankRunner(reranker)
            run_pairs = run_rerank or runner.run
            if warm and run_rerank is None:
                run_pairs([("warm up", "warm up")])
            self.rerank_batcher = self._batcher(run_pairs, self.config.rerank_batcher, runner.name)
            self.reranker = runner
        for role, bundle, task in (("decomposer", decomposer, "decompose"), ("citation", citation, "cite"),
                                   ("images", images, "images")):
            if bundle is None:
                continue
            if getattr(bundle, "task", task) != task:
                raise ConfigError(f"{role}: got a {bundle.task!r} bundle, expected a {task!r} bundle")
            if warm:
                _warm(task, bundle)
            setattr(self, role, bundle)
        if pipeline is not None:
            self.pipeline = pipeline
        if pipeline_config is not None:
            self.pipeline_config = getattr(pipeline, "config", None)
        elif pipeline is not None:
            self.pipeline_config = getattr(pipeline, "config", None)
        for name in CALL_MODELS:
            if name not in self.gates:
                self.gates[name] = self._batcher(call_each, self.config.calls, name)

    def thresholds(self) -> PipelineConfig:
        """Citation and image-placement settings (the pipeline's, else the defaults)."""
        if self.pipeline_config is None:
            from searchsmith.serving.pipeline.config import PipelineConfig

            self.pipeline_config = PipelineConfig()
        return self.pipeline_config

    def models(self) -> dict[str, Any]:
        """What is loaded, for /ready."""
        return {"embeddings": str(self.embedder.model_name) if self.embedder is not None else None,
                "rerank": self.reranker is not None, "route": self.router is not None,
                "decompose": self.decomposer is not None, "cite": self.citation is not None,
                "images": self.images is not None, "search": self.pipeline is not None}

    @property
    def ready(self) -> bool:
        loaded = any(v not in (None, False) for v in self.models().values())
        return loaded and not self.loading and self.load_error is None and not self.shutting_down

    def close(self) -> None:
        """Stop accepting work and finish what is queued (graceful shutdown)."""
        self.shutting_down = True
        for batcher in (self.batcher, self.rerank_batcher, *self.gates.values()):
            if batcher is not None:
                batcher.close(drain=True, timeout_s=self.config.request_timeout_s)
        if self.pipeline is not None and hasattr(self.pipeline, "close"):
            self.pipeline.close()
        if self.router is not None:
            self.router.close()


def _warm(task: str, bundle: Any) -> None:
    """One call of each method a request will use (first calls allocate arenas, load kernels)."""
    if task == "decompose":
        bundle.decompose("warm up")
    elif task == "cite":
        bundle.entities(["warm up"])
        bundle.attribute([("warm up", "warm up")])
    elif task == "images":
        bundle.encode_text(["warm up"])


def _model_names(embedder: Embedder) -> set[str]:
    name = str(embedder.model_name)
    return {"default", name, name.rsplit("/", 1)[-1]}


# ---- the body limit ------------------------------------------------------------------------


class _RequestMetrics:
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
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(endpoint, status, time.perf_counter() - start)


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


def create_app(config: ServerConfig | None = None, *, embedder: Embedder | BundleEmbedder | None = None,
               router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None,
               loader: Callable[[ServingState], None] | None = None, **models: Any) -> FastAPI:
    """Build the FastAPI application.

    Models given here are attached (and warmed up) at once; otherwise attach them later with
    ``app.state.serving.attach(...)``, or pass ``loader``, which the app runs in a thread at
    start-up (``/health`` answers at once, ``/ready`` 503 until the loader returns). Shutdown
    (the lifespan's exit) closes every batcher with drain, so requests in flight are answered.

    Args:
        config: limits and security; ``ServerConfig()`` when None.
        embedder: the embedding model behind /v1/embeddings.
        router: the centroid router behind /v1/route.
        run_batch: replaces the EmbeddingRunner (tests: a blocking or failing runner).
        loader: ``loader(state)`` loads models and calls ``state.attach(...)``; its error
            keeps /ready at 503 with the message.
        **models: more of ``ServingState.attach``'s arguments: reranker, decomposer,
            citation, images, pipeline, pipeline_config, run_rerank.

    Returns:
        The app; serve it with any ASGI server (uvicorn).
    """
    config = config or ServerConfig()
    if not isinstance(config, ServerConfig):
        raise ConfigError(f"create_app: config must be a ServerConfig, got {type(config).__name__}")
    state = ServingState(config)
    state.attach(embedder=embedder, router=router, run_batch=run_batch, **models)
    keys = [k.encode() for k in config.api_keys]

    def load() -> None:
        try:
            loader(state)
        except Exception as exc:  # the process stays up and says why it is not ready
            log.exception("loading the models failed")
            state.load_error = f"{type(exc).__name__}: {exc}"
        finally:
            state.loading = False

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if loader is not None:
            state.loading = True
            asyncio.get_running_loop().run_in_executor(None, load)
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

    app.add_middleware(_RequestMetrics, metrics=state.metrics)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if not state.ready:
            if state.shutting_down:
                why = "shutting down; retry on another replica"
            elif state.load_error is not None:
                why = f"loading the models failed ({state.load_error}); fix serve.yaml and restart"
            elif state.loading:
                why = "the models are loading and warming up; retry shortly"
            else:
                why = "no model is loaded yet; retry shortly"
            return error_response(NotReadyError(f"not ready: {why}"))
        return JSONResponse({"status": "ready", "models": state.models()})

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
        ids, lengths = await asyncio.to_thread(_tokenize, embedder_, texts, config)
        vectors = await _gather(batcher, ids, lengths, config.request_timeout_s, "/v1/embeddings")
        data = []
        for i, vec in enumerate(vectors):
            if req.encoding_format == "base64":
                emb: Any = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            else:
                emb = np.asarray(vec, dtype=np.float32).tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(lengths)
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

    _add_model_routes(app, state, check_auth)

    # The body limit runs before routing and parsing. CORS only when origins are configured
    # (added last, so it is outermost and answers preflights before the body limit).
    app.add_middleware(_BodyLimit, max_bytes=config.max_body_bytes)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["authorization", "content-type"])
    return app


def _tokenize(embedder: Embedder | BundleEmbedder, texts: list[str], config: ServerConfig
              ) -> tuple[list[Any], list[int]]:
    """Batcher items and their token lengths (worker thread). Truncates to max_input_chars and
    max_seq_length, or raises PayloadTooLargeError when ``config.truncate`` is off.

    Items are token ids for a torch ``Embedder``, texts for a ``BundleEmbedder`` (the bundle
    tokenizes them itself).
    """
    texts = [t[: config.max_input_chars] for t in texts]
    if isinstance(embedder, BundleEmbedder):
        limit = embedder.max_seq_length
        full = embedder.lengths(texts)
        for i, n in enumerate(full):
            if n > limit and not config.truncate:
                raise PayloadTooLargeError(
                    f"input[{i}]: {n} tokens, the model's limit is {limit} "
                    "(max_seq_length); shorten it or enable server.truncate"
                )
        return texts, [min(n, limit) for n in full]
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
    return ids, [len(x) for x in ids]


async def _gather(batcher: DynamicBatcher, items: Sequence[Any], lengths: Sequence[int], timeout_s: float,
                  what: str) -> list[Any]:
    """Submit every item to the batcher and await all results (in input order)."""
    futures: list[Future] = []
    try:
        for item, length in zip(items, lengths, strict=True):
            futures.append(batcher.submit(item, length=length))  # NotReadyError once closed
        waiting = [asyncio.wrap_future(f) for f in futures]
        return list(await asyncio.wait_for(asyncio.gather(*waiting), timeout=timeout_s))
    except TimeoutError as exc:
        if str(exc):
            raise
        raise TimeoutError(
            f"{what}: no answer within {timeout_s} s (server.request_timeout_s); the "
            "server is overloaded, retry later or send fewer items"
        ) from exc
    finally:
        for f in futures:  # on error: queued items are dropped, not run for nobody
            f.cancel()


async def _call(state: ServingState, model: str, fn: Callable[[], Any], what: str) -> Any:
    """Run ``fn()`` through ``model``'s queue (batches of one): 429 when full, 504 past the timeout.

    A timed-out call that already started runs to its end in its worker (a thread cannot be
    stopped); one still queued is dropped.
    """
    gate = state.gates.get(model)
    if gate is None:
        raise NotReadyError(f"{what}: the server is not ready; retry shortly")
    (outcome,) = await _gather(gate, [fn], [1], state.config.request_timeout_s, what)
    if not isinstance(outcome, CallOutcome):
        raise RunnerError(f"{what}: the call returned {type(outcome).__name__}, expected a CallOutcome")
    return outcome.unwrap()


# ---- the model endpoints ---------------------------------------------------------------------


def _check_text(text: str, where: str, config: ServerConfig) -> str:
    """A non-blank text within ``max_input_chars`` (cut, or 413 when truncation is off)."""
    if not text.strip():
        raise EmptyInputError(f"{where}: is empty; send non-blank text")
    if len(text) > config.max_input_chars:
        if not config.truncate:
            raise PayloadTooLargeError(
                f"{where}: {len(text)} characters, the limit is {config.max_input_chars} "
                "(server.max_input_chars); shorten it or enable server.truncate"
            )
        return text[: config.max_input_chars]
    return text


def _check_count(n: int, limit: int, where: str, what: str, setting: str) -> None:
    if n == 0:
        raise EmptyInputError(f"{where}: the list is empty; send at least one of the {what}")
    if n > limit:
        raise PayloadTooLargeError(f"{where}: {n} {what}, the limit is {limit} (server.{setting}); "
                                   "split the request")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow warnings


def _text_encoder(state: ServingState) -> Callable[[list[str]], np.ndarray] | None:
    """The served embedder's ``texts -> (n, D)`` (the fallback of cite and images), or None."""
    embedder = state.embedder
    if embedder is None:
        return None
    if isinstance(embedder, BundleEmbedder):
        return lambda texts: np.asarray(embedder.bundle.encode(texts), dtype=np.float32)
    return lambda texts: np.asarray(embedder.encode(texts), dtype=np.float32)


def cite_sentences(sentences: list[str], documents: list[tuple[str, str]], *, bundle: Any = None,
                   encode: Callable[[list[str]], np.ndarray] | None = None, threshold: float,
                   max_per_sentence: int) -> list[dict[str, Any]]:
    """Entities and supporting documents of each sentence (the look-back citation of one answer).

    With a ``cite`` bundle: its tagger's entity spans and its P(supports) for every
    (sentence, document) pair. Without one (``encode``, the text embedder): entities by pattern
    (as the pipeline's fallback) and the best cosine between the sentence and the document's
    sentences. A document is cited when its score is >= ``threshold``, best first, at most
    ``max_per_sentence`` per sentence.

    Args:
        sentences: S sentences.
        documents: N (id, text) pairs.
        bundle: a ``cite`` bundle, or None.
        encode: texts -> (n, D) unit vectors; used without a bundle.
        threshold: P(supports) (bundle) or cosine (fallback) cut.
        max_per_sentence: most citations per sentence.

    Returns:
        S dicts ``{"text", "entities": [{"start", "end", "label", "text"}], "citations":
        [{"id", "score"}]}``.
    """
    if bundle is not None:
        spans = bundle.entities(sentences)
        pairs = [(s, text) for s in sentences for _, text in documents]
        scores = np.asarray(bundle.attribute(pairs), dtype=np.float64).reshape(len(sentences), len(documents))
    else:
        if encode is None:
            raise NotReadyError("/v1/cite: no citation bundle and no embedder are loaded; add bundles.citation "
                                "or bundles.embedder to serve.yaml")
        from searchsmith.serving.chunker import split_sentences
        from searchsmith.serving.pipeline.citation import pattern_entities

        spans = []
        for s in sentences:
            found: list[tuple[int, int, str]] = []
            for ent in pattern_entities(s):
                at = s.find(ent)
                if at >= 0:
                    found.append((at, at + len(ent), "ENT"))
            spans.append(found)
        doc_sents = [[t[a:b] for a, b in split_sentences(t)] or [t] for _, t in documents]
        flat = [x for group in doc_sents for x in group]
        vecs = encode(list(sentences) + flat)  # (S + sum n_d, D)
        q, rest = vecs[: len(sentences)], vecs[len(sentences):]
        scores = np.zeros((len(sentences), len(documents)))  # (S, N)
        start = 0
        for j, group in enumerate(doc_sents):
            scores[:, j] = (q @ rest[start: start + len(group)].T).max(axis=1)
            start += len(group)
    out = []
    for i, sentence in enumerate(sentences):
        order = sorted(range(len(documents)), key=lambda j: (-scores[i, j], j))
        cited = [{"id": documents[j][0], "score": round(float(scores[i, j]), 6)}
                 for j in order if scores[i, j] >= threshold][:max_per_sentence]
        ents = [{"start": int(a), "end": int(b), "label": str(label), "text": sentence[a:b]}
                for a, b, label in spans[i]]
        out.append({"text": sentence, "entities": ents, "citations": cited})
    return out


def decode_image(data: str, where: str, config: ServerConfig) -> Any:
    """A base64 image -> RGB PIL image, within the byte and pixel limits.

    Raises:
        ValidationError: not base64, or not an image PIL reads (422).
        PayloadTooLargeError: over ``max_image_bytes`` or ``max_image_pixels`` (413).
    """
    import binascii
    import io

    from PIL import Image, UnidentifiedImageError

    if len(data) * 3 // 4 > config.max_image_bytes + 3:  # decoded size, checked before decoding
        raise PayloadTooLargeError(f"{where}: about {len(data) * 3 // 4} bytes, the limit is "
                                   f"{config.max_image_bytes} (server.max_image_bytes); send a smaller image")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{where}: not valid base64; send the image file's bytes base64-encoded") from None
    if len(raw) > config.max_image_bytes:
        raise PayloadTooLargeError(f"{where}: {len(raw)} bytes, the limit is {config.max_image_bytes} "
                                   "(server.max_image_bytes); send a smaller image")
    try:
        img = Image.open(io.BytesIO(raw))  # reads the header only: the size is known before decoding
        w, h = img.size
        if w * h > config.max_image_pixels:
            raise PayloadTooLargeError(f"{where}: {w}x{h} pixels, the limit is {config.max_image_pixels} "
                                       "(server.max_image_pixels); send a smaller image")
        return img.convert("RGB")
    except Image.DecompressionBombError:
        raise PayloadTooLargeError(f"{where}: the image is too large to decode (server.max_image_pixels)") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValidationError(f"{where}: not an image this server can read ({type(exc).__name__}); send "
                              "PNG, JPEG, GIF, BMP or WebP bytes") from None


def place_images(paragraphs: list[str], captions: list[str | None], pixels: list[Any], *, query: str | None,
                 bundle: Any = None, encode: Callable[[list[str]], np.ndarray] | None = None,
                 threshold: float, weights: Any) -> tuple[np.ndarray, list[int | None], str]:
    """Score every image against every paragraph and assign (Hungarian, kept at >= threshold).

    With an ``images`` bundle: for images with pixels, the three-way mix of
    ``models.image_relevance.combined_scores`` (image-paragraph, caption-paragraph,
    image-query); for images with only a caption, the caption-paragraph cosine (text tower).
    Without one: the caption-paragraph cosine of the text embedder; an image without a
    caption then cannot be scored (-1, the lowest cosine).

    Args:
        paragraphs: P texts.
        captions: I captions (None = none).
        pixels: I PIL images (None = no pixels).
        query: the user's question, or None.
        bundle: an ``images`` bundle, or None.
        encode: texts -> (n, D) unit vectors; used without a bundle.
        threshold: the assignment threshold (0.3 by default, ``images.threshold``).
        weights: a ``PlacementConfig`` (the three signal weights).

    Returns:
        (scores (P, I), paragraph index or None per image, method ``bundle`` or ``captions``).
    """
    from searchsmith.models.image_relevance import assign_images, combined_scores

    n_par, n_img = len(paragraphs), len(captions)
    scores = np.full((n_par, n_img), -1.0)  # (P, I)
    with_caption = [i for i, c in enumerate(captions) if c]
    if bundle is not None:
        texts = np.asarray(bundle.encode_text(paragraphs), dtype=np.float64)  # (P, d)
        caption_par = np.full((n_par, n_img), np.nan)
        if with_caption:
            cap = np.asarray(bundle.encode_text([captions[i] for i in with_caption]), dtype=np.float64)
            caption_par[:, with_caption] = texts @ cap.T
        with_px = [i for i, im in enumerate(pixels) if im is not None]
        if with_px:
            imgs = np.asarray(bundle.encode_images([pixels[i] for i in with_px]), dtype=np.float64)  # (k, d)
            image_par = texts @ imgs.T  # (P, k)
            image_query = None
            if query:
                image_query = (np.asarray(bundle.encode_text([query]), dtype=np.float64) @ imgs.T)[0]  # (k,)
            cp = caption_par[:, with_px]
            scores[:, with_px] = combined_scores(image_par, cp if np.isfinite(cp).any() else None,
                                                 image_query, weights)
        caption_only = [i for i in with_caption if pixels[i] is None]
        scores[:, caption_only] = caption_par[:, caption_only]
        method = "bundle"
    else:
        if encode is None:
            raise NotReadyError("/v1/images/place: no images bundle and no embedder are loaded; add "
                                "bundles.images or bundles.embedder to serve.yaml")
        if with_caption:
            vecs = encode(list(paragraphs) + [captions[i] for i in with_caption])
            scores[:, with_caption] = vecs[:n_par] @ vecs[n_par:].T
        method = "captions"
    return scores, assign_images(scores, threshold), method


def _sse(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def _search_events(ans: dict[str, Any], chunk_chars: int):
    """Server-Sent Events of one answer: the text in chunks, then citations (look-back: the
    cited text with [n] markers), timeline, images, trace, and ``[DONE]``."""
    text = ans.get("answer_text") or ""
    for i in range(0, len(text), chunk_chars):
        yield _sse("answer", {"delta": text[i: i + chunk_chars]})
    yield _sse("citations", {"answer": ans.get("answer"), "references": ans.get("references", []),
                             "sentences": ans.get("sentences", [])})
    yield _sse("timeline", {"timeline": ans.get("timeline", [])})
    yield _sse("images", {"images": ans.get("images", [])})
    yield _sse("trace", {k: ans.get(k) for k in ("query_id", "query", "rewrite", "nodes", "passages", "trace")})
    yield "data: [DONE]\n\n"


def _add_model_routes(app: FastAPI, state: ServingState, check_auth: Callable[[Request], None]) -> None:
    """The endpoints beyond embeddings and route: rerank, decompose, cite, images, search, feedback."""
    config = state.config
    auth = [Depends(check_auth)]

    @app.post("/v1/rerank", dependencies=auth)
    async def rerank(req: RerankRequest) -> JSONResponse:
        runner, batcher = state.reranker, state.rerank_batcher
        if runner is None or batcher is None or state.shutting_down:
            raise NotReadyError("/v1/rerank: no reranker is loaded; add bundles.reranker to serve.yaml")
        if req.model is not None and req.model not in ("default", runner.name):
            raise ValidationError(f"model: {req.model!r} is not served here; use {runner.name!r} (or omit model)")
        query = _check_text(req.query, "query", config)
        _check_count(len(req.documents), config.max_documents_per_request, "documents", "documents",
                     "max_documents_per_request")
        originals = [d if isinstance(d, str) else d.text for d in req.documents]
        docs = [_check_text(d, f"documents[{i}]", config) for i, d in enumerate(originals)]
        lengths = await asyncio.to_thread(runner.lengths, query, docs)
        limit = runner.max_length
        if not config.truncate:
            for i, n in enumerate(lengths):
                if n > limit:
                    raise PayloadTooLargeError(
                        f"documents[{i}]: {n} tokens with the query, the model's limit is {limit} "
                        "(max_length); shorten it or enable server.truncate")
        lengths = [min(n, limit) for n in lengths]
        logits = await _gather(batcher, [(query, d) for d in docs], lengths, config.request_timeout_s,
                               "/v1/rerank")
        scores = np.asarray(logits, dtype=np.float64).reshape(-1)  # (N,)
        if not req.raw_scores:
            scores = _sigmoid(scores)
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[: req.top_n or len(docs)]
        results = []
        for i in order:
            row: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
            if req.return_documents:
                row["document"] = {"text": originals[i]}
            results.append(row)
        return JSONResponse({"object": "list", "model": runner.name, "results": results,
                             "usage": {"total_tokens": sum(lengths)}})

    @app.post("/v1/decompose", dependencies=auth)
    async def decompose(req: DecomposeRequest) -> JSONResponse:
        from searchsmith.serving.rewrite import parse_history

        bundle = state.decomposer
        if bundle is None or state.shutting_down:
            raise NotReadyError("/v1/decompose: no decomposer is loaded; add bundles.decomposer to serve.yaml")
        query = _check_text(req.query, "query", config)
        turns = parse_history(req.history)  # validates (422 naming the turn)
        history = req.history or []

        def work() -> tuple[str, Any]:
            rewrite = bundle.rewrite(history, query) if turns else query
            return rewrite, bundle.decompose(rewrite, max_nodes=req.max_nodes)

        rewrite, graph = await _call(state, "decompose", work, "/v1/decompose")
        body = graph.to_json() if hasattr(graph, "to_json") else dict(graph)
        return JSONResponse({"query": query, "rewrite": rewrite, **body})

    @app.post("/v1/cite", dependencies=auth)
    async def cite(req: CiteRequest) -> JSONResponse:
        from searchsmith.serving.chunker import split_sentences

        if (req.sentences is None) == (req.answer is None):
            raise ValidationError("sentences, answer: send exactly one of them (a list of sentences, or an "
                                  "answer text to split into sentences)")
        if req.answer is not None:
            answer = _check_text(req.answer, "answer", config)
            sentences = [answer[a:b] for a, b in split_sentences(answer)] or [answer]
        else:
            sentences = req.sentences or []
        _check_count(len(sentences), config.max_texts_per_request, "sentences", "sentences",
                     "max_texts_per_request")
        sentences = [_check_text(s, f"sentences[{i}]", config) for i, s in enumerate(sentences)]
        _check_count(len(req.documents), config.max_documents_per_request, "documents", "documents",
                     "max_documents_per_request")
        seen: set[str] = set()
        docs = []
        for i, d in enumerate(req.documents):
            if d.id in seen:
                raise ValidationError(f"documents[{i}].id: {d.id!r} is used twice; ids must be unique")
            seen.add(d.id)
            docs.append((d.id, _check_text(d.text, f"documents[{i}].text", config)))
        pairs = len(sentences) * len(docs)
        if pairs > config.max_pairs_per_request:
            raise PayloadTooLargeError(
                f"/v1/cite: {len(sentences)} sentences x {len(docs)} documents = {pairs} pairs, the limit is "
                f"{config.max_pairs_per_request} (server.max_pairs_per_request); send fewer documents")
        bundle = state.citation
        cfg = state.thresholds().citation
        threshold = req.threshold
        if threshold is None and bundle is not None:
            threshold = cfg.support_threshold
            if threshold is None:
                threshold = getattr(bundle, "support_threshold", None)
            if threshold is None:
                raise ConfigError("/v1/cite: the citation bundle has no support_threshold; set "
                                  "pipeline.citation.support_threshold in serve.yaml")
        elif threshold is None:
            threshold = cfg.cosine_threshold
        encode = _text_encoder(state)
        per = req.max_per_sentence or cfg.max_per_sentence
        out = await _call(state, "cite", lambda: cite_sentences(
            sentences, docs, bundle=bundle, encode=encode, threshold=float(threshold), max_per_sentence=per),
            "/v1/cite")
        return JSONResponse({"sentences": out, "method": "bundle" if bundle is not None else "embedding",
                             "threshold": float(threshold)})

    @app.post("/v1/images/place", dependencies=auth)
    async def images_place(req: PlaceRequest) -> JSONResponse:
        from searchsmith.models.image_relevance import PlacementConfig

        _check_count(len(req.paragraphs), config.max_texts_per_request, "paragraphs", "paragraphs",
                     "max_texts_per_request")
        paragraphs = [_check_text(p, f"paragraphs[{i}]", config) for i, p in enumerate(req.paragraphs)]
        _check_count(len(req.images), config.max_images_per_request, "images", "images", "max_images_per_request")
        seen: set[str] = set()
        for i, im in enumerate(req.images):
            if im.id in seen:
                raise ValidationError(f"images[{i}].id: {im.id!r} is used twice; ids must be unique")
            seen.add(im.id)
            if not im.data and not (im.caption and im.caption.strip()):
                raise ValidationError(f"images[{i}]: no data and no caption; send the image as base64 'data' "
                                      "or give a 'caption' (urls are never fetched)")
        captions = [(_check_text(im.caption, f"images[{i}].caption", config) if im.caption and im.caption.strip()
                     else None) for i, im in enumerate(req.images)]
        query = _check_text(req.query, "query", config) if req.query else None

        def decode_all() -> list[Any]:
            return [decode_image(im.data, f"images[{i}].data", config) if im.data else None
                    for i, im in enumerate(req.images)]

        pixels = await asyncio.to_thread(decode_all)
        cfg = state.thresholds().images
        threshold = cfg.threshold if req.threshold is None else req.threshold
        weights = PlacementConfig(threshold=threshold, image_paragraph_weight=cfg.image_paragraph_weight,
                                  caption_paragraph_weight=cfg.caption_paragraph_weight,
                                  image_query_weight=cfg.image_query_weight)
        bundle, encode = state.images, _text_encoder(state)
        scores, where, method = await _call(state, "images", lambda: place_images(
            paragraphs, captions, pixels, query=query, bundle=bundle, encode=encode, threshold=threshold,
            weights=weights), "/v1/images/place")
        placements, unplaced = [], []
        for i, (im, p) in enumerate(zip(req.images, where, strict=True)):
            if p is None:
                best = float(scores[:, i].max()) if len(paragraphs) else None
                unplaced.append({"id": im.id, "best_score": best})
            else:
                row = {"id": im.id, "paragraph": int(p), "score": round(float(scores[p, i]), 6)}
                if im.url:
                    row["url"] = im.url
                placements.append(row)
        placements.sort(key=lambda r: r["paragraph"])
        return JSONResponse({"placements": placements, "unplaced": unplaced, "method": method,
                             "threshold": threshold})

    @app.post("/v1/search", dependencies=auth)
    async def search(req: SearchRequest) -> Response:
        pipe = state.pipeline
        if pipe is None or state.shutting_down:
            raise NotReadyError("/v1/search: no pipeline is loaded; start the server with an index "
                                "(serve.yaml 'index:')")
        if not req.query.strip():
            raise EmptyInputError("query: is empty; send a question")

        def work() -> dict[str, Any]:
            return pipe.ask(req.query, req.history, query_id=req.query_id, preset=req.preset,
                            strategy=req.strategy, routing_mode=req.routing_mode)

        # The answer is complete before the first byte: errors keep their status codes, and the
        # stream then carries the text and the look-back citations after it.
        ans = await _call(state, "search", work, "/v1/search")
        if not req.stream:
            return JSONResponse(ans)
        return StreamingResponse(_search_events(ans, config.stream_chunk_chars), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/feedback", dependencies=auth)
    async def feedback(req: FeedbackRequest) -> JSONResponse:
        pipe = state.pipeline
        if pipe is None or state.shutting_down:
            raise NotReadyError("/v1/feedback: no pipeline is loaded; start the server with an index")
        call = asyncio.to_thread(pipe.feedback, req.query_id, req.quality)
        return JSONResponse(await asyncio.wait_for(call, timeout=config.request_timeout_s))
