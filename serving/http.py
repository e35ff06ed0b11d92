"""HTTP layer of the server: parse, validate, call the batcher or router, map errors.

The top layer (STYLE.md, "Serving"); the only module of searchsmith that imports a web
framework. Requests are validated into schema objects here, texts are tokenized here in a
worker thread (never on the event loop), and each text goes to the one ``DynamicBatcher``
as ``(token ids, length)``. Batching lives in ``batcher.py``, execution in ``runner.py``.

Endpoints (request and response examples: ``/docs``, from the schemas below):
    POST /v1/embeddings  OpenAI-compatible: ``{"input": str | [str], "model"?, "encoding_format"?
                         ("float" | "base64"), "dimensions"?}``
    GET  /v1/models      the served models (OpenAI's list), each with its accepted aliases
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
    POST /v1/feedback    ``{"query_id", "quality"}``: the protocol router's reward (accepted and
                         ``"recorded": false`` while the router is off)
    GET  /docs           Swagger UI from ``serving/static`` (no CDN: works offline); /openapi.json
    GET  /health         200 while the process serves HTTP (liveness)
    GET  /ready          200 once the models are loaded and warm, else 503 (readiness)
    GET  /metrics        Prometheus

Embeddings and rerank pairs go through a ``DynamicBatcher`` each (batched across requests);
decompose, cite, images and search go through one with batches of one (``server.calls``):
the same bounded queue (429 with Retry-After), queue timeout and metrics, no batching.

Every error body is OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (so OpenAI SDKs
show the message): ``type`` is the kind of ``ERROR_TABLE``, which also gives the status code;
``param`` the JSON path of the field at fault (``input[3]``, ``documents[0].text``). Every request
body is a ``RequestBody``: text that is not Unicode (a lone surrogate) is refused there, once.
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
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core import ValidationError as PydanticValidationError
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
from searchsmith.models.tokenizer import tokenizer_lock
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
E = TypeVar("E", bound=BaseException)
STATIC_DIR = Path(__file__).resolve().parent / "static"


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


# A message starts with the JSON path of the field it is about ("input[3]: ...",
# "documents[0].text: ..."); that path is the error's ``param`` unless the exception sets one.
_PARAM_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\]|\.[a-z_][a-z0-9_]*)*): ")


# What pydantic adds to a location for the member of a union that failed (``input.str``,
# ``documents[0].RerankDocument``); not part of the JSON path.
_UNION_TAG = re.compile(r"^(str|int|float|bool|list|dict|none)$|[\[(]|^[A-Z]")


def json_path(loc: Sequence[Any]) -> str:
    """A pydantic error location as a JSON path: ``("documents", 0, "text")`` -> ``documents[0].text``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _UNION_TAG.search(str(part)):
            out += f".{part}" if out else str(part)
    return out or "body"


def _body_loc(err: dict[str, Any]) -> tuple[Any, ...]:
    loc = tuple(err.get("loc", ()))
    return loc[1:] if loc[:1] == ("body",) else loc


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        parts.append(f"{json_path(_body_loc(err))}: {err.get('msg', 'invalid')}")
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
    else:
        match = next(((s, k) for cls, s, k in ERROR_TABLE if isinstance(exc, cls)), None)
        if match is not None:
            status, kind = match
            if isinstance(exc, RequestValidationError):
                message = _validation_message(exc)
                first = exc.errors()[0] if exc.errors() else {}
                param, code = json_path(_body_loc(first)), first.get("type")
            else:
                message = str(exc) or kind
        else:
            log.error("unhandled error while serving a request", exc_info=exc)
            status, kind, param, code = 500, "internal_error", None, None
            message = f"internal error ({type(exc).__name__}); see the server log"
    if param is None and isinstance(exc, ValidationError):
        found = _PARAM_PREFIX.match(message)
        param = found.group(1) if found else None
    if isinstance(exc, OverloadedError):
        # Retry-After is whole seconds (RFC 9110); round up so clients never come back early.
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error_body(message, kind, param=param, code=code), status_code=status, headers=headers)


# ---- config ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedModel:
    """The name a model is served under (``server.embeddings_model`` / ``server.rerank_model``).

    A request's ``model`` must be ``name``, one of ``aliases``, or the model's own name (the
    bundle folder's, e.g. ``embedder``, or the Hugging Face id and its last part); anything
    else is refused with 422 listing the accepted names. ``GET /v1/models`` lists ``name``.

    Attributes:
        name: the served name (None: the model's own name).
        aliases: more names accepted in ``model``, e.g. ``[text-embedding-3-small]`` for
            clients that hard-code an OpenAI model name.
    """

    name: str | None = None
    aliases: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ServerConfig:
    """Limits and security of the server (``server`` in serve.yaml).

    Example (serve.yaml)::

        server:
          api_keys: [change-me]          # clients send 'Authorization: Bearer change-me'
          embeddings_model: {name: minilm, aliases: [text-embedding-3-small]}
          max_texts_per_request: 256
          batcher: {max_batch_size: 64, max_wait_ms: 2.0}

    The log level is the environment variable ``SEARCHSMITH_LOG`` (``debug``, ``info``,
    ``warning`` (the default), ``error``), e.g. ``SEARCHSMITH_LOG=info searchsmith serve``.

    Attributes:
        max_body_bytes: largest request body; larger ones get 413 before they are parsed.
        max_texts_per_request: most texts in one ``/v1/embeddings`` request (413 past it).
        max_input_chars: longest text in characters; longer ones are cut (``truncate``) or
            answered 413. Texts are also cut to the model's max_seq_length tokens when
            ``truncate`` is on (413 when off).
        truncate: cut over-long inputs (True) or reject them with 413 (False).
        api_keys: accepted ``Authorization: Bearer <key>`` keys on every /v1 endpoint (the
            OpenAI SDK sends its ``api_key`` so); empty (the default) turns authentication off.
            /health, /ready, /metrics and /docs never need a key. Keep the file private.
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
        embeddings_model: the name and aliases of the /v1/embeddings model (``model``).
        rerank_model: the name and aliases of the /v1/rerank model.
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
    embeddings_model: ServedModel = field(default_factory=ServedModel)
    rerank_model: ServedModel = field(default_factory=ServedModel)

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
        for name in ("embeddings_model", "rerank_model"):
            served = getattr(self, name)
            if not isinstance(served, ServedModel):
                problems.append(f"{name}: expected a mapping {{name, aliases}}, got {type(served).__name__}")
            elif (served.name is not None and not (isinstance(served.name, str) and served.name.strip())) or (
                    not isinstance(served.aliases, (list, tuple))
                    or not all(isinstance(a, str) and a.strip() for a in served.aliases)):
                problems.append(f"{name}: name must be a non-empty string or null and aliases a list of "
                                f"non-empty strings, got name={served.name!r}, aliases={served.aliases!r}")
        t = self.request_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            problems.append(f"request_timeout_s: expected a finite number > 0, got {t!r}")
        if problems:
            raise ConfigError("server config: " + "; ".join(problems))


# ---- request schemas -----------------------------------------------------------------------
# Every request body is a ``RequestBody``: strict types, unknown fields refused, and every
# string in it (values and keys, at any depth) checked once here, before any handler runs,
# to be encodable as UTF-8. JSON lets a body carry a lone surrogate ("\ud800"), which Python
# decodes into a str that tokenizers and the response encoder then fail on (a 500).


def _unencodable_in(text: str) -> str | None:
    """What is wrong with ``text`` as UTF-8 (its first lone surrogate), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"character {exc.start} is a lone surrogate (U+{ord(text[exc.start]):04X}), which is not "
                "Unicode text; send valid UTF-8 (a \\ud800-\\udbff escape must be followed by a "
                "\\udc00-\\udfff one)")
    return None


def find_unencodable(value: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first string in a JSON value that UTF-8 cannot encode (a lone surrogate), or None.

    Walks with an explicit stack, not recursion: a deeply nested body cannot overflow it.

    Args:
        value: a parsed JSON value (dicts, lists, strings, numbers).

    Returns:
        (location in ``value``, what is wrong) of the first such string or field name, in
        document order; None when every string encodes.
    """
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        loc, item = stack.pop()
        if isinstance(item, str):
            what = _unencodable_in(item)
            if what is not None:
                return loc, what
        elif isinstance(item, dict):
            if any(isinstance(k, str) and _unencodable_in(k) is not None for k in item):
                return loc, "a field name contains a lone surrogate, which is not Unicode text; send valid UTF-8"
            stack.extend(((*loc, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*loc, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def undecodable_body(body: bytes) -> ValidationError | None:
    """A 422 naming the field whose bytes are not UTF-8, or None when ``body`` decodes.

    Only called once parsing failed, so valid requests never pay for it.
    """
    try:
        body.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        at = exc.start
    fix = "send the body as UTF-8 encoded JSON"
    try:  # undecodable bytes become lone surrogates (U+DC80..U+DCFF): find_unencodable locates them
        found = find_unencodable(json.loads(body.decode("utf-8", "surrogateescape")))
    except ValueError:
        found = None
    path = json_path(found[0]) if found is not None else "body"
    return with_param(ValidationError(f"{path}: byte {at} of the body is not valid UTF-8; {fix}"), path,
                      "unencodable_text")


class RequestBody(BaseModel):
    """Base of every request schema: strict, no unknown fields, all text encodable (422 otherwise)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _text_is_unicode(cls, data: Any) -> Any:
        found = find_unencodable(data)
        if found is not None:
            loc, what = found  # the message gets "<path>: " in front from _validation_message
            raise PydanticValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                type=PydanticCustomError("unencodable_text", "{message}", {"message": what}),
                loc=loc, input=None)])
        return data


def _examples(*bodies: dict[str, Any]) -> ConfigDict:
    """A request schema's config with ``examples`` (shown by /docs, checked by the tests)."""
    return ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": list(bodies)})


class EmbeddingsRequest(RequestBody):
    """OpenAI ``POST /v1/embeddings`` body (token-array inputs are not supported).

    ``dimensions`` must be the model's dimension, or one of the truncations the bundle was
    trained for (``matryoshka_dims`` in its manifest); ``encoding_format: base64`` returns
    each vector as base64 of little-endian float32, as OpenAI does.
    """

    model_config = _examples(
        {"input": ["How long should I knead bread dough?", "Saturn's rings are made of ice."],
         "model": "embedder", "encoding_format": "float"},
        {"input": "one text", "encoding_format": "base64"})

    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None  # accepted for OpenAI compatibility, unused


class RouteRequest(RequestBody):
    """``POST /v1/route`` body."""

    model_config = _examples(
        {"query": "Where can I find it?", "mode": "auto", "top_k": 2,
         "history": [{"role": "user", "content": "How do I configure the Lumen cache?"},
                     {"role": "assistant", "content": "Set lumen.eviction.policy in lumen.yaml."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    mode: Literal["parallel", "serial", "auto"] | None = None
    top_k: int | None = Field(default=None, ge=1, le=1000)


class RerankDocument(BaseModel):
    """A document as Cohere and Jina send it: ``{"text": ...}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str


class RerankRequest(RequestBody):
    """``POST /v1/rerank`` body (the TEI / Cohere / Jina shape)."""

    model_config = _examples(
        {"query": "Which planet has the Great Red Spot?",
         "documents": ["Bananas are yellow.", {"text": "Jupiter's Great Red Spot is a giant storm."}],
         "top_n": 1, "return_documents": True})

    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    raw_scores: bool = False  # True: logits; False: sigmoid(logit) in (0, 1), the same order
    model: str | None = None


class DecomposeRequest(RequestBody):
    """``POST /v1/decompose`` body."""

    model_config = _examples(
        {"query": "Compare the populations of Paris and Berlin", "max_nodes": 4},
        {"query": "and what about its rings?", "history": [
            {"role": "user", "content": "Tell me about Saturn"},
            {"role": "assistant", "content": "Saturn is the sixth planet."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    max_nodes: int | None = Field(default=None, ge=1, le=64)


class CiteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    text: str


class CiteRequest(RequestBody):
    """``POST /v1/cite`` body: ``sentences`` or an ``answer`` (split into sentences here)."""

    model_config = _examples(
        {"answer": "Kestrel listens on port 8080. Lumen caches pages.",
         "documents": [{"id": "doc-1", "text": "Kestrel listens on port 8080 by default."},
                       {"id": "doc-2", "text": "Lumen caches rendered pages."}]},
        {"sentences": ["Kestrel listens on port 8080."],
         "documents": [{"id": "doc-1", "text": "Kestrel listens on port 8080 by default."}], "threshold": 0.5})

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


class PlaceRequest(RequestBody):
    """``POST /v1/images/place`` body."""

    model_config = _examples(
        {"paragraphs": ["A cat sleeps on the sofa.", "The dog runs in the park."],
         "images": [{"id": "fig-1", "caption": "a dog running on grass", "url": "https://example.com/dog.png"},
                    {"id": "fig-2", "caption": "a cat asleep on a sofa"}],
         "query": "pets at home"})

    paragraphs: list[str]
    images: list[PlaceImage]
    query: str | None = None
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)


class SearchRequest(RequestBody):
    """``POST /v1/search`` body (``stream: true``: Server-Sent Events)."""

    model_config = _examples(
        {"query": "How long should I knead bread dough?", "query_id": "q-0001"},
        {"query": "And at what temperature do I bake it?", "stream": True, "history": [
            {"role": "user", "content": "How long should I knead bread dough?"},
            {"role": "assistant", "content": "About ten minutes."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    preset: str | None = None
    strategy: Literal["direct", "parallel", "planning"] | None = None
    routing_mode: Literal["serial", "parallel", "auto"] | None = None
    query_id: str | None = Field(default=None, min_length=1, max_length=128)
    stream: bool = False


class FeedbackRequest(RequestBody):
    """``POST /v1/feedback`` body: the quality of an answer in [0, 1] (its ``query_id``)."""

    model_config = _examples({"query_id": "q-0001", "quality": 0.8})

    query_id: str = Field(min_length=1, max_length=128)
    quality: float = Field(ge=0.0, le=1.0)


# ---- what /docs shows beside the request schemas -----------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """Every error: OpenAI's shape; ``type`` is the kind of ERROR_TABLE, ``param`` the field at fault."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"error": {
        "message": "model: 'gpt-4' is not served here; use one of ['embedder'] or omit model (more names: "
                   "server.embeddings_model.aliases in serve.yaml)", "type": "validation_error",
        "param": "model", "code": "model_not_found"}}]})

    error: ErrorDetail


# One answer per endpoint, as the server sends it (shortened lists); tests compare their keys
# with real answers, so the docs cannot drift from the code.
RESPONSE_EXAMPLES: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"object": "list", "model": "embedder",
                       "data": [{"object": "embedding", "index": 0, "embedding": [0.0213, -0.0442, 0.0871]}],
                       "usage": {"prompt_tokens": 12, "total_tokens": 12}},
    "/v1/route": {"sources": [{"source": "code", "score": 0.61}, {"source": "cooking", "score": 0.12}],
                  "query": "Where can I find it?", "routed_text": "Where can I find the Lumen cache?",
                  "rewrite": "Where can I find the Lumen cache?", "mode": "serial", "fallback": False, "warnings": [],
                  "latency_ms": {"embed": 6.1, "search": 0.4}},
    "/v1/rerank": {"object": "list", "model": "reranker",
                   "results": [{"index": 1, "relevance_score": 0.97,
                                "document": {"text": "Jupiter's Great Red Spot is a giant storm."}}],
                   "usage": {"total_tokens": 31}},
    "/v1/decompose": {"query": "Compare the populations of Paris and Berlin",
                      "rewrite": "Compare the populations of Paris and Berlin", "type": "split",
                      "nodes": [{"id": "1", "text": "What is the population of Paris?", "depends_on": []},
                                {"id": "2", "text": "What is the population of Berlin?", "depends_on": []}]},
    "/v1/cite": {"method": "bundle", "threshold": 0.5, "sentences": [
        {"text": "Kestrel listens on port 8080.", "entities": [{"start": 0, "end": 7, "label": "ENT", "text": "Kestrel"}],
         "citations": [{"id": "doc-1", "score": 0.93}]}]},
    "/v1/images/place": {"placements": [{"id": "fig-1", "paragraph": 1, "score": 0.71,
                                         "url": "https://example.com/dog.png"}],
                         "unplaced": [{"id": "fig-2", "best_score": 0.12}], "method": "captions", "threshold": 0.3},
    "/v1/search": {"query_id": "q-0001", "query": "How long should I knead bread dough?",
                   "rewrite": "How long should I knead bread dough?",
                   "answer": "Knead the dough for about ten minutes [1].",
                   "answer_text": "Knead the dough for about ten minutes.",
                   "references": [{"n": 1, "doc_id": "bread-101", "chunk_id": "bread-101#0", "title": "Bread basics",
                                   "source": "cooking", "url": "https://example.com/bread"}],
                   "sentences": [{"text": "Knead the dough for about ten minutes.", "entities": [],
                                  "citations": [{"n": 1, "score": 0.81}]}],
                   "timeline": [{"date": "2024-05-01", "precision": "day", "text": "The recipe was updated on "
                                 "1 May 2024.", "sources": ["bread-101"]}], "images": [],
                   "passages": [{"chunk_id": "bread-101#0", "doc_id": "bread-101", "source": "cooking",
                                 "title": "Bread basics", "score": 0.83, "node_id": "1", "date": "2024-05-01",
                                 "url": "https://example.com/bread"}],
                   "nodes": [], "trace": {"preset": "large", "strategy": "direct", "total_ms": 812.4, "stages": {}}},
    "/v1/feedback": {"query_id": "q-0001", "preset": "large", "reward": 0.71, "cost": 0.9, "recorded": True},
    "/v1/models": {"object": "list", "data": [{"id": "embedder", "object": "model", "created": 0,
                                               "owned_by": "searchsmith", "endpoint": "/v1/embeddings",
                                               "aliases": ["text-embedding-3-small"]}]},
}


def _responses(path: str, *extra: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route for /docs: its 200 example and the error body of each status."""
    out: dict[int | str, dict[str, Any]] = {}
    if path in RESPONSE_EXAMPLES:
        out[200] = {"content": {"application/json": {"example": RESPONSE_EXAMPLES[path]}}}
    if path == "/v1/search":
        out[200]["content"]["text/event-stream"] = {"example": (
            'event: answer\ndata: {"delta": "Knead the dough for about"}\n\n'
            'event: citations\ndata: {"answer": "...", "references": [...], "sentences": [...]}\n\n'
            "event: timeline\n...\nevent: images\n...\nevent: trace\n...\ndata: [DONE]\n\n")}
    for status in (400, 401, 413, 422, 429, 503, 504, *extra):
        out[status] = {"model": ErrorBody}
    return out


# ---- state ---------------------------------------------------------------------------------

CALL_MODELS = ("decompose", "cite", "images", "search")
FEEDBACK_OFF = ("feedback is accepted but not used: the protocol router is off, so every answer uses "
                "pipeline.protocol.default_preset; to learn from feedback set pipeline.protocol.enabled: true "
                "(and pipeline.protocol.state_path to keep what it learns) in serve.yaml and restart")


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
        # use -> the pipeline gate's decision (serving/pipeline/gates.py) for each configured
        # bundle: whether its held-out figure beat the untrained baseline; /ready and
        # /v1/models show them so a client sees what /v1/search uses and why
        self.model_gates: dict[str, dict[str, Any]] = {}
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
        if pipeline_config is not None:  # serve.yaml's, which also holds the cite / images thresholds
            self.pipeline_config = pipeline_config
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


def _served_models(state: ServingState) -> list[dict[str, Any]]:
    """``GET /v1/models`` rows: each served model under its served name, with its aliases."""
    rows = []
    for own, served, endpoint in (
            (str(state.embedder.model_name) if state.embedder is not None else None,
             state.config.embeddings_model, "/v1/embeddings"),
            (state.reranker.name if state.reranker is not None else None, state.config.rerank_model, "/v1/rerank")):
        if own is not None:
            name, accepted = served_names(own, served)
            row = {"id": name, "object": "model", "created": 0, "owned_by": "searchsmith",
                   "endpoint": endpoint, "aliases": accepted[1:]}
            if endpoint == "/v1/rerank" and "rerank" in state.model_gates:
                row["gate"] = state.model_gates["rerank"]  # did it beat the bi-encoder order?
            rows.append(row)
    return rows


def served_names(own_name: str, served: ServedModel) -> tuple[str, list[str]]:
    """(the name a model is served under, every name a request's ``model`` may use, that one first).

    The model's own name (a bundle folder's name, or a Hugging Face id and its last part) stays
    accepted beside the configured name and aliases, so renaming it breaks no client.
    """
    name = served.name or own_name
    accepted = [name, *served.aliases, own_name, own_name.rsplit("/", 1)[-1]]
    return name, list(dict.fromkeys(accepted))


def check_model(requested: str | None, own_name: str, served: ServedModel, setting: str) -> str:
    """The served name, or a 422 naming ``model`` and listing the accepted names.

    Args:
        requested: the request's ``model`` (None: the served one).
        own_name: the model's own name.
        served: its ``ServedModel`` config.
        setting: that config's key (``embeddings_model``), named in the message.
    """
    name, accepted = served_names(own_name, served)
    if requested is not None and requested not in accepted:
        raise with_param(ValidationError(
            f"model: {requested!r} is not served here; use one of {accepted} or omit model (more names: "
            f"server.{setting}.aliases in serve.yaml)"), "model", "model_not_found")
    return name


def matryoshka_dims(embedder: Any) -> list[int]:
    """The truncated dimensions an embed bundle was trained for (``matryoshka_dims`` in its
    manifest, e.g. a MatryoshkaLoss run); empty when none (only the full dimension is served)."""
    manifest = getattr(getattr(embedder, "bundle", None), "manifest", None) or {}
    dims = manifest.get("matryoshka_dims") or []
    return sorted({int(d) for d in dims if isinstance(d, int) and not isinstance(d, bool) and d >= 1})


def check_dimensions(requested: int | None, embedder: Any) -> int | None:
    """None (the full vector) or the truncation to serve; 422 when the model was not trained for it."""
    if requested is None or requested == int(embedder.dim):
        return None
    trained = [d for d in matryoshka_dims(embedder) if d < int(embedder.dim)]
    if requested in trained:
        return requested
    why = (f"it was trained for {trained + [int(embedder.dim)]} (Matryoshka)" if trained else
           "it was not trained for shorter vectors (no matryoshka_dims in its bundle manifest), and a "
           "truncated vector of such a model loses accuracy")
    raise with_param(ValidationError(
        f"dimensions: {requested} is not served by this model; its dimension is {int(embedder.dim)} and {why}; "
        f"send dimensions={int(embedder.dim)} or omit it"), "dimensions", "invalid_dimensions")


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


async def on_error(request: Request, exc: Exception) -> JSONResponse:
    """The answer to any exception of a request (the app's exception handlers and routes)."""
    if isinstance(exc, StarletteHTTPException) and exc.status_code == 400:
        # FastAPI's "error parsing the body": say which field holds bytes that are not UTF-8.
        exc = undecodable_body(await request.body()) or exc
    return error_response(exc)


class _AnswerErrors(APIRoute):
    """A route that answers its own errors, unexpected ones included.

    Starlette hands an exception that is not an HTTP one to its ServerErrorMiddleware, which
    sends the 500 and re-raises it: uvicorn then logs a second traceback and closes the
    keep-alive connection. Answering here logs once (``error_response``) and keeps it open.
    """

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return await on_error(request, exc)

        return answer


# ---- /docs ---------------------------------------------------------------------------------

API_DESCRIPTION = (
    "searchsmith's models behind one server. Errors are OpenAI-shaped: "
    '`{"error": {"message", "type", "param", "code"}}`; statuses: validation 422, empty 400, too large 413, '
    "overloaded 429 (Retry-After), timeout 504, runner 500, not ready 503, wrong or missing key 401. "
    "With `server.api_keys` set, send `Authorization: Bearer <key>` (the Authorize button).")
SWAGGER_DIR = STATIC_DIR / "swagger-ui"
DOCS_ASSETS = "/docs/assets"


def _add_docs(app: FastAPI) -> None:
    """Swagger UI at /docs from the assets shipped in ``serving/static/swagger-ui`` (no CDN)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from starlette.staticfiles import StaticFiles

    app.mount(DOCS_ASSETS, StaticFiles(directory=SWAGGER_DIR), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title="searchsmith - API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png", oauth2_redirect_url=None,
            # validatorUrl: Swagger UI would otherwise send the schema to validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None, "tryItOutEnabled": True})


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

    # /docs is served from the package (serving/static), never from a CDN: it works offline.
    app = FastAPI(title="searchsmith", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=API_DESCRIPTION)
    app.state.serving = state
    app.router.route_class = _AnswerErrors  # before any route is added
    _add_docs(app)

    for exc_type in (RequestValidationError, StarletteHTTPException, SearchsmithError,
                     TimeoutError, Exception):
        app.add_exception_handler(exc_type, on_error)

    # HTTPBearer (without its own errors) declares the scheme in the OpenAPI schema, so /docs
    # has an "Authorize" button; the check and its 401 stay here.
    bearer = Security(HTTPBearer(auto_error=False, description="a key from server.api_keys (when set)"))

    def check_auth(credentials: HTTPAuthorizationCredentials | None = bearer) -> None:
        if not keys:
            return
        token = credentials.credentials.strip().encode() if credentials is not None else b""
        # compare_digest against every key: the time taken does not reveal a matching prefix.
        if not token or not any(hmac.compare_digest(token, k) for k in keys):
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
        return JSONResponse({"status": "ready", "models": state.models(), "gates": state.model_gates})

    @app.get("/v1/models", dependencies=[Depends(check_auth)], responses=_responses("/v1/models"))
    async def list_models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": _served_models(state)})

    @app.get("/v1/models/{model}", dependencies=[Depends(check_auth)], responses=_responses("", 404))
    async def get_model(model: str) -> JSONResponse:
        served = _served_models(state)
        for row in served:
            if model == row["id"] or model in row["aliases"]:
                return JSONResponse(row)
        raise with_param(StarletteHTTPException(404, f"model: {model!r} is not served here; served: "
                                                     f"{[row['id'] for row in served]}"), "model", "model_not_found")

    @app.post("/v1/embeddings", dependencies=[Depends(check_auth)], responses=_responses("/v1/embeddings"))
    async def embeddings(req: EmbeddingsRequest) -> JSONResponse:
        embedder_, batcher = state.embedder, state.batcher
        if embedder_ is None or batcher is None or state.shutting_down:
            raise NotReadyError("/v1/embeddings: the embedding model is not loaded yet; retry shortly")
        served = check_model(req.model, str(embedder_.model_name), config.embeddings_model, "embeddings_model")
        dims = check_dimensions(req.dimensions, embedder_)
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
            if dims is not None:  # a Matryoshka prefix, unit length again (as OpenAI's dimensions)
                vec = np.asarray(vec, dtype=np.float32)[:dims]
                vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
            if req.encoding_format == "base64":
                emb: Any = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            else:
                emb = np.asarray(vec, dtype=np.float32).tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(lengths)
        return JSONResponse({"object": "list", "data": data, "model": served,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/v1/route", dependencies=[Depends(check_auth)], responses=_responses("/v1/route"))
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
        with tokenizer_lock(embedder.tokenizer):  # other requests tokenize with truncation meanwhile
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
        from searchsmith.models.text import sentence_texts
        from searchsmith.serving.pipeline.citation import pattern_entities

        spans = []
        for s in sentences:
            found: list[tuple[int, int, str]] = []
            for ent in pattern_entities(s):
                at = s.find(ent)
                if at >= 0:
                    found.append((at, at + len(ent), "ENT"))
            spans.append(found)
        doc_sents = [sentence_texts(t) or [t] for _, t in documents]
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

    @app.post("/v1/rerank", dependencies=auth, responses=_responses("/v1/rerank", 500))
    async def rerank(req: RerankRequest) -> JSONResponse:
        runner, batcher = state.reranker, state.rerank_batcher
        if runner is None or batcher is None or state.shutting_down:
            raise NotReadyError("/v1/rerank: no reranker is loaded; add bundles.reranker to serve.yaml")
        served = check_model(req.model, runner.name, config.rerank_model, "rerank_model")
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
        return JSONResponse({"object": "list", "model": served, "results": results,
                             "usage": {"total_tokens": sum(lengths)}})

    @app.post("/v1/decompose", dependencies=auth, responses=_responses("/v1/decompose", 500))
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

    @app.post("/v1/cite", dependencies=auth, responses=_responses("/v1/cite", 500))
    async def cite(req: CiteRequest) -> JSONResponse:
        from searchsmith.models.text import sentence_texts

        if (req.sentences is None) == (req.answer is None):
            raise ValidationError("sentences, answer: send exactly one of them (a list of sentences, or an "
                                  "answer text to split into sentences)")
        if req.answer is not None:
            answer = _check_text(req.answer, "answer", config)
            sentences = sentence_texts(answer) or [answer]
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

    @app.post("/v1/images/place", dependencies=auth, responses=_responses("/v1/images/place", 500))
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

    @app.post("/v1/search", dependencies=auth, responses=_responses("/v1/search", 500))
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

    @app.post("/v1/feedback", dependencies=auth, responses=_responses("/v1/feedback", 500))
    async def feedback(req: FeedbackRequest) -> JSONResponse:
        pipe = state.pipeline
        if pipe is None or state.shutting_down:
            raise NotReadyError("/v1/feedback: no pipeline is loaded; start the server with an index")
        if getattr(pipe, "protocol", True) is None:
            # The protocol router is off (the default, and the quickstart's): answers always use
            # protocol.default_preset, so there is nothing to learn. The rating is accepted, not an
            # error a client must handle, and the answer says how to make it count.
            return JSONResponse({"query_id": req.query_id, "quality": req.quality, "recorded": False,
                                 "message": FEEDBACK_OFF})
        call = asyncio.to_thread(pipe.feedback, req.query_id, req.quality)
        result = await asyncio.wait_for(call, timeout=config.request_timeout_s)
        return JSONResponse({**result, "recorded": True})
