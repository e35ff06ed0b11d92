"""Limits and security of the server (``server`` in serve.yaml): :class:`ServerLimits`.

Not to be confused with ``serve_config.ServeConfig``, the whole serve.yaml, whose ``server``
key this is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from searchsmith.models.config import is_int, is_number
from searchsmith.models.errors import ConfigError
from searchsmith.serving.batcher import BatcherConfig

__all__ = ["CALL_MODELS", "ServedModel", "ServerLimits"]

# The models that do not batch across requests: each gets a queue with batches of one
# (``server.calls``), so they share the bounded queue (429 when full), the timeout and the
# metrics. Routing and feedback are quick, but unqueued they would pile up in the thread pool
# the batched endpoints tokenize in; feedback's one worker also keeps the router's saves in order.
CALL_MODELS = ("decompose", "cite", "images", "search", "route", "feedback")

# Connections over the requests in work that ``max_connections`` leaves room for by default:
# as many again, for clients between requests on a kept-alive connection, bodies still
# arriving and requests being refused (each answered at once).
_CONNECTIONS_PER_PENDING = 2


# a CORS origin as browsers send it: scheme://host[:port]
_ORIGIN = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#]+")


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
class ServerLimits:
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
        calls: the queue of each unbatched call (decompose, cite, images, search, route, feedback);
            ``max_batch_size`` is 1 there, ``workers`` calls run at once per model.
        stream_chunk_chars: characters of answer text per Server-Sent Event of /v1/search.
        embeddings_model: the name and aliases of the /v1/embeddings model (``model``).
        rerank_model: the name and aliases of the /v1/rerank model.
        max_header_bytes: most bytes of a request's line and headers; more get 431 and the
            connection is closed (uvicorn's httptools parser sets no limit of its own).
        header_timeout_s: longest time a request's line and headers may take to arrive from
            its first byte (or from the connection's opening); past it 408 and the connection
            is closed, so clients that trickle headers (slowloris) hold no connection for long.
        ui: serve the answer page at ``/`` (static files of the package: a question box,
            the answer streamed with its citations, timeline, images and trace); false
            turns it off (``/`` is then 404). The page needs no key to load; its requests
            send the key the user types (kept in the page's memory, never in the URL).
        max_pending_requests: most requests in work at once, over every endpoint that works off
            the event loop (tokenizing, waiting in a model's queue, running; /v1/images/file
            reading); one more is answered 429 ``overloaded`` at once, before anything waits in a
            thread pool, with a Retry-After estimated from the measured pace at which requests
            finish and the clients already refused (1 to 30 s). null (the default): what memory
            allows, ``max_pending_bytes // max_body_bytes`` (128 with the defaults), or what the
            queues hold if fewer: one item per request, the sum over ``batcher``,
            ``rerank_batcher`` and the six ``calls`` queues of ``max_queue + max_batch_size x
            workers`` (2502 with the defaults).
        max_pending_bytes: the memory the requests in work may hold, counted at the worst case,
            each request a body of ``max_body_bytes``; it sets the default of
            ``max_pending_requests`` (unused when that is set). A parsed body and its tokens take
            a few times its bytes, so the process can grow several times this. Clients that send
            small bodies get more requests in work from a lower ``max_body_bytes``.
        max_connections: most open connections (kept-alive idle ones count; what uvicorn's
            ``limit_concurrency`` counts, enforced by the server's protocol,
            ``serving/http_protocol.py``); a request on a connection opened past it is answered
            503 ``overloaded`` with a Retry-After estimated from the pace at which connections
            close, and the connection closed (/health, /ready and /metrics are still answered;
            /metrics counts each refusal as
            ``searchsmith_refused_requests_total{limit="max_connections"}``). null (the default):
            twice the requests in work (``max_pending_requests``). Each request in work holds a
            connection, so a limit below ``max_pending_requests`` makes it the bound. Under
            ``--ray`` Ray Serve's proxy holds the connections: the gateway bounds the requests in
            flight through it instead (the same 503 with ``Connection: close``; refusals are in
            the gateway's log, not in a replica's /metrics; null: twice the requests in work of
            every replica, ``ray.replicas`` or ``ray.max_replicas``); with ``ray.gateway: false``
            it is not applied, and setting it is refused.
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
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 30.0
    ui: bool = True
    max_pending_requests: int | None = None
    max_pending_bytes: int = 512 * 1024 * 1024
    max_connections: int | None = None

    @property
    def pending_limit(self) -> int:
        """``max_pending_requests``, or when it is null the fewer of what memory allows
        (``max_pending_bytes`` over bodies of ``max_body_bytes``) and what every queue holds."""
        if self.max_pending_requests is not None:
            return self.max_pending_requests
        return min(self.max_pending_bytes // self.max_body_bytes, self.queue_capacity)

    @property
    def queue_capacity(self) -> int:
        """Requests every queue holds, one item each: ``max_queue + max_batch_size x workers``
        summed over ``batcher``, ``rerank_batcher`` and the ``calls`` queue of each call model."""
        queues = (self.batcher, self.rerank_batcher, *(self.calls for _ in CALL_MODELS))
        return sum(q.max_queue + q.max_batch_size * q.workers for q in queues)

    @property
    def connection_limit(self) -> int:
        """``max_connections``, or twice ``pending_limit`` when it is null."""
        if self.max_connections is not None:
            return self.max_connections
        return _CONNECTIONS_PER_PENDING * self.pending_limit

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("max_body_bytes", "max_texts_per_request", "max_input_chars", "max_documents_per_request",
                     "max_pairs_per_request", "max_images_per_request", "max_image_bytes", "max_image_pixels",
                     "stream_chunk_chars", "max_header_bytes", "max_pending_bytes"):
            value = getattr(self, name)
            if not is_int(value, 1):
                problems.append(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("max_pending_requests", "max_connections"):
            value = getattr(self, name)
            if value is not None and not is_int(value, 1):
                problems.append(f"{name}: expected an int >= 1 or null (derived from max_pending_bytes and the "
                                f"queues), got {value!r}")
        if (self.max_pending_requests is None and is_int(self.max_pending_bytes, 1) and is_int(self.max_body_bytes, 1)
                and self.max_pending_bytes < self.max_body_bytes):
            problems.append(f"max_pending_bytes: {self.max_pending_bytes} holds not one request body of max_body_bytes "
                            f"{self.max_body_bytes}, so no request could be in work; raise max_pending_bytes, lower "
                            "max_body_bytes, or set max_pending_requests")
        for name in ("truncate", "ui"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name}: expected true or false, got {getattr(self, name)!r}")
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
        else:  # an origin is what a browser sends: scheme://host[:port], no path (or "*")
            bad = [o for o in self.cors_origins if o != "*" and not _ORIGIN.fullmatch(o)]
            if bad:
                problems.append(f"cors_origins: {bad[:3]} are not origins; write scheme://host[:port] with no path or "
                                "trailing slash (https://app.example.com, http://localhost:3000), or \"*\" for any")
        for name in ("embeddings_model", "rerank_model"):
            served = getattr(self, name)
            if not isinstance(served, ServedModel):
                problems.append(f"{name}: expected a mapping {{name, aliases}}, got {type(served).__name__}")
            elif (served.name is not None and not (isinstance(served.name, str) and served.name.strip())) or (
                    not isinstance(served.aliases, (list, tuple))
                    or not all(isinstance(a, str) and a.strip() for a in served.aliases)):
                problems.append(f"{name}: name must be a non-empty string or null and aliases a list of "
                                f"non-empty strings, got name={served.name!r}, aliases={served.aliases!r}")
        for name in ("request_timeout_s", "header_timeout_s"):
            t = getattr(self, name)
            if not is_number(t) or not math.isfinite(t) or t <= 0:
                problems.append(f"{name}: expected a finite number > 0, got {t!r}")
        if problems:
            raise ConfigError("server config: " + "; ".join(problems))
