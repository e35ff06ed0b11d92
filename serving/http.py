"""HTTP layer of the server: parse, validate, call the batcher or router, map errors.

The top layer (STYLE.md, "Serving"). This module assembles the app; the modules it assembles
(listed below) are, with it, the only ones of searchsmith that import a web framework.
Requests are validated into schema objects, texts are tokenized in a worker thread (never on
the event loop), and each text goes to the one ``DynamicBatcher`` as ``(token ids, length)``.
Batching lives in ``batcher.py``, execution in ``runner.py``.

Endpoints (request and response examples: ``/docs``, from ``schemas.py``):
    POST /v1/embeddings  OpenAI-compatible: ``{"input": str | [str], "model"?, "encoding_format"?
                         ("float" | "base64"), "dimensions"?}``
    GET  /v1/models      the served models (OpenAI's list), each with its accepted aliases
    POST /v1/rerank      TEI / Cohere / Jina: ``{"query", "documents": [str | {"text"}], "top_n"?,
                         "return_documents"?, "raw_scores"?}`` -> ``{"results": [{"index",
                         "relevance_score", "document"?}]}`` best first; pairs batched across requests
    POST /v1/route       ``{"query", "history"?, "mode"?, "top_k"?}`` -> ``RouteResult.to_dict()``
    POST /v1/decompose   ``{"query", "history"?, "max_nodes"?}`` -> ``{"type", "nodes", "rewrite"}``
    POST /v1/cite        ``{"sentences" | "answer", "documents": [{"id", "text"}]}`` -> per sentence
                         its entities and the ids of the documents that support it (the
                         pipeline's citation: ``pipeline.citation.cite_sentences``)
    POST /v1/images/place  ``{"paragraphs", "images": [{"id", "caption"?, "url"?, "data"?}]}`` ->
                         one paragraph per image (Hungarian assignment) or unplaced (the
                         pipeline's placement: ``pipeline.images.place_images``)
    POST /v1/search      the pipeline: JSON, or Server-Sent Events with ``"stream": true``:
                         ``answer`` events (``{"delta"}``: pieces as an LLM backend generates
                         them, or the finished text in chunks; ``{"delta": "", "replace"}`` when
                         the final text differs from the pieces), then ``citations``, ``timeline``,
                         ``images``, ``trace`` and ``data: [DONE]``; an error after the first
                         piece is an ``error`` event (``{"error", "status"}``)
    GET  /v1/images/file ``?doc_id=&image_id=``: an image of the index (what an answer placed)
    POST /v1/feedback    ``{"query_id", "quality"}``: the protocol router's reward (accepted and
                         ``"recorded": false`` while the router is off)
    GET  /               the answer page (``serving/static/ui``; off with ``server.ui: false``)
    GET  /docs           Swagger UI from ``serving/static`` (no CDN: works offline); /openapi.json
    GET  /health         200 while the process serves HTTP (liveness)
    GET  /ready          200 once the models are loaded and warm, else 503 (readiness)
    GET  /metrics        Prometheus

Embeddings and rerank pairs go through a ``DynamicBatcher`` each (batched across requests);
decompose, cite, images and search go through one with batches of one (``server.calls``):
the same bounded queue (429 with Retry-After), queue timeout and metrics, no batching. Before
any of that (and before tokenizing in a thread), a request past ``server.max_pending_requests``
in work is answered 429 at once (``ServingState.admission``, with a Retry-After from the pace
at which requests finish: ``drain``); ``searchsmith serve`` also bounds the open connections
(``server.max_connections``: 503, ``http_protocol``; under ``--ray`` the requests in flight
through the gateway, ``ray_gateway.InFlightLimit``).

Modules: ``limits`` (``ServerLimits``, the ``server`` key of serve.yaml), ``schemas`` (request
bodies and response examples), ``http_errors`` (the status table and error body), ``state``
(``ServingState``: the loaded models and their queues), ``middleware``, ``request_checks``,
``routes`` (the /v1 model endpoints); this one assembles the app.

Every error body is OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (so OpenAI SDKs
show the message): ``type`` is the kind of ``ERROR_TABLE``, which also gives the status code;
``param`` the JSON path of the field at fault (``input[3]``, ``documents[0].text``). The rules a
request must follow, each checked once, before any handler runs:

- a body is JSON in UTF-8: sent with ``Content-Type: application/json`` (or ``application/*+json``);
  another type, or none, is 415 (``middleware.parse_json_once``), as is a ``charset`` other than
  utf-8 (``charset=`` or RFC 2231's ``charset*=``) or UTF-16/UTF-32 bytes; a key written twice
  in one object is 422;
- every string of a body is a ``RequestBody``'s: a lone surrogate, or a control character but
  tab, newline and carriage return (``\\u0000``, ``\\u001b``), is 422 naming the field
  (``schemas.control_character_in``);
- the value of a query or path parameter a route reads follows the same control-character rule
  (``?doc_id=%00``: 422 naming the parameter), and one that takes a single value is sent once.

CORS is off unless ``server.cors_origins`` lists origins, and no request field is ever used
as a file path: images arrive as base64 ``data`` (a ``url`` is echoed back, never fetched).

Usage::

    app = create_app(ServerLimits(), embedder=Embedder(), router=load_router(index_dir))
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from searchsmith.models.errors import (
    ConfigError,
    NotReadyError,
    SearchsmithError,
    UnauthorizedError,
)
from searchsmith.serving.http_errors import error_response, with_param
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from searchsmith.serving.middleware import (
    AnswerErrors,
    BodyLimit,
    HeadAsGet,
    HeaderLimit,
    KeyCheck,
    NoWebSocket,
    RequestMetrics,
    on_error,
)
from searchsmith.serving.routes import add_model_routes
from searchsmith.serving.schemas import RESPONSE_TYPES, ErrorBody, document_limits, route_responses
from searchsmith.serving.state import ServingState, served_models
from starlette.exceptions import HTTPException as StarletteHTTPException

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.router import CentroidRouter
    from searchsmith.serving.runner import BundleEmbedder

__all__ = ["create_app"]

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"


# ---- /docs ---------------------------------------------------------------------------------

API_DESCRIPTION = (
    "searchsmith's models behind one server. Errors are OpenAI-shaped: "
    '`{"error": {"message", "type", "param", "code"}}`; statuses: validation 422, empty 400, too large 413, '
    "not JSON in UTF-8 415 (send `Content-Type: application/json`), overloaded 429 (Retry-After), "
    "timeout 504, runner 500, not ready 503, wrong or missing key 401. "
    "With `server.api_keys` set, send `Authorization: Bearer <key>` (the Authorize button).")
SWAGGER_DIR = STATIC_DIR / "swagger-ui"
DOCS_ASSETS = "/docs/assets"


UI_DIR = STATIC_DIR / "ui"
UI_ASSETS = "/ui"
# The page loads only its own files and talks only to this server.
UI_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
             "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _add_ui(app: FastAPI) -> None:
    """The answer page at ``/`` and its assets under ``/ui`` (``serving/static/ui``, no CDN)."""
    from starlette.staticfiles import StaticFiles

    app.mount(UI_ASSETS, StaticFiles(directory=UI_DIR), name="ui-assets")
    page = (UI_DIR / "index.html").read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": UI_POLICY, "Cache-Control": "no-cache",
                                           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


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


def create_app(config: ServerLimits | None = None, *, embedder: Embedder | BundleEmbedder | None = None,
               router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None,
               loader: Callable[[ServingState], None] | None = None, **models: Any) -> FastAPI:
    """Build the FastAPI application.

    Models given here are attached (and warmed up) at once; otherwise attach them later with
    ``app.state.serving.attach(...)``, or pass ``loader``, which the app runs in a thread at
    start-up (``/health`` answers at once, ``/ready`` 503 until the loader returns). Shutdown
    (the lifespan's exit) closes every batcher with drain, so requests in flight are answered.

    Args:
        config: limits and security; ``ServerLimits()`` when None.
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
    config = config or ServerLimits()
    if not isinstance(config, ServerLimits):
        raise ConfigError(f"create_app: config must be a ServerLimits, got {type(config).__name__}")
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
    # redirect_slashes off: "POST /v1/embeddings/" got a 307 with an empty body, not an error body
    app = FastAPI(title="searchsmith", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=API_DESCRIPTION, redirect_slashes=False)
    app.state.serving = state
    app.router.route_class = AnswerErrors  # before any route is added
    _add_docs(app)
    if config.ui:
        _add_ui(app)

    for exc_type in (RequestValidationError, StarletteHTTPException, SearchsmithError,
                     TimeoutError, Exception):
        app.add_exception_handler(exc_type, on_error)

    # HTTPBearer (without its own errors) declares the scheme in the OpenAPI schema, so /docs
    # has an "Authorize" button; the check and its 401 stay here.
    bearer = Security(HTTPBearer(auto_error=False, description="a key from server.api_keys (when set)"))

    def check_key(token: bytes) -> None:
        if not keys:
            return
        # compare_digest against every key: the time taken does not reveal a matching prefix.
        if not token or not any(hmac.compare_digest(token, k) for k in keys):
            raise UnauthorizedError(
                "Authorization: missing or wrong API key; send 'Authorization: Bearer <key>' "
                "with a key from server.api_keys"
            )

    def check_auth(credentials: HTTPAuthorizationCredentials | None = bearer) -> None:
        check_key(credentials.credentials.strip().encode() if credentials is not None else b"")

    def check_request_key(request: Request) -> None:
        """``check_auth`` read from the header as HTTPBearer reads it, before anything reads the
        body: a client without a key learns nothing of what its body holds (parse errors were
        answered 422 before the 401)."""
        scheme, param = get_authorization_scheme_param(request.headers.get("authorization"))
        check_key(param.strip().encode() if scheme.lower() == "bearer" and param else b"")

    app.state.auth = KeyCheck(check_auth, check_request_key)

    app.add_middleware(RequestMetrics, metrics=state.metrics)

    @app.get("/metrics", response_class=Response,
             responses={200: {"content": {METRICS_CONTENT_TYPE: {"example": "searchsmith_requests_total{...} 3\n"}},
                              "description": "Prometheus text format"}})
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", responses={200: {"model": RESPONSE_TYPES["/ready"]},
                                  503: {"model": ErrorBody, "description": "loading, failed to load or shutting down"}})
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

    @app.get("/v1/models", dependencies=[Depends(check_auth)], responses=route_responses("/v1/models"))
    async def list_models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": served_models(state)})

    # a model id holds "/" (sentence-transformers/all-MiniLM-L6-v2): the rest of the path is the id
    @app.get("/v1/models/{model:path}", dependencies=[Depends(check_auth)],
             responses=route_responses("/v1/models/{model}", 404))
    async def get_model(model: str) -> JSONResponse:
        served = served_models(state)
        for row in served:
            if model == row["id"] or model in row["aliases"]:
                return JSONResponse(row)
        raise with_param(StarletteHTTPException(404, f"model: {model!r} is not served here; served: "
                                                     f"{[row['id'] for row in served]}"), "model", "model_not_found")

    add_model_routes(app, state, check_auth)
    build_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with this server's request limits (built once, then cached)."""
        if app.openapi_schema is None:
            document_limits(build_openapi(), config)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]

    # The body limit runs before routing and parsing. CORS only when origins are configured
    # (added last, so it is outermost and answers preflights before the body limit).
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout_s=config.request_timeout_s)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["authorization", "content-type"])
    # the header limit again for apps served by another HTTP server (Ray Serve's proxy): the
    # server's own protocol refuses such requests before they get here
    app.add_middleware(HeaderLimit, max_bytes=config.max_header_bytes)
    app.add_middleware(HeadAsGet)  # HEAD is GET for every layer, without the body
    app.add_middleware(NoWebSocket)  # outermost: a WebSocket handshake gets an error body, not a bare 403
    return app
