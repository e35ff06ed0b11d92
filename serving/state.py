"""What one app serves: :class:`ServingState` (the loaded models and their queues), and the
checks of a request's ``model`` and ``dimensions`` against them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from searchsmith.models.config import is_int
from searchsmith.models.errors import (
    ConfigError,
    NotReadyError,
    NotServedError,
    OverloadedError,
    SearchsmithError,
    ValidationError,
)
from searchsmith.models.roles import Citer, Decomposer, ImageScorer, Reranker
from searchsmith.models.tasks import by_role
from searchsmith.serving.batcher import BatcherConfig, DynamicBatcher
from searchsmith.serving.drain import DrainRate
from searchsmith.serving.http_errors import with_param
from searchsmith.serving.limits import CALL_MODELS, ServedModel, ServerLimits
from searchsmith.serving.metrics import ServerMetrics
from searchsmith.serving.runner import BundleEmbedder, EmbeddingRunner, RerankRunner, call_each

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline
    from searchsmith.serving.router import CentroidRouter


class Admission:
    """The bound on requests in work (``server.max_pending_requests``): :meth:`admit` counts a
    request in, or refuses it at once with 429 when ``limit`` are in. It never waits: a request
    that waited here would be the unbounded queue this exists to prevent (``asyncio.to_thread``'s
    executor queues without limit, ahead of the models' bounded queues).

    Used on the event loop only (one thread), so the count needs no lock. A request is counted
    out however its work ends: answered, failed, or cancelled because its client left; its work
    still queued is then dropped, and work a thread has started runs to its end (one per worker
    thread at most: bounded by the threads, not by this count). Each refusal's Retry-After is
    ``drain``'s estimate: the pace at which requests are counted out, and the clients already
    refused (``serving/drain.py``).

    Args:
        limit: most requests in work (``ServerLimits.pending_limit``).
        on_refuse: called on each refusal (the metrics' counter).
        drain: measures the pace at which requests are counted out (a new one when None).
    """

    def __init__(self, limit: int, on_refuse: Callable[[], None] = lambda: None,
                 drain: DrainRate | None = None) -> None:
        self.limit = limit
        self.pending = 0
        self._on_refuse = on_refuse
        self.drain = drain if drain is not None else DrainRate()

    def check(self, what: str) -> None:
        """Refuse at once when ``limit`` requests are in work; count nothing in (for a request
        answered on the event loop, which holds no place, but is refused as every other is).

        Raises:
            OverloadedError: HTTP 429, with Retry-After (``drain``'s estimate, 1 to 30 s).
        """
        if self.pending >= self.limit:
            self._on_refuse()
            retry_after_s = self.drain.retry_after_s()
            raise OverloadedError(
                f"{what}: the server has {self.pending} requests in work, the limit is {self.limit} "
                f"(server.max_pending_requests); retry after {retry_after_s} s, or raise "
                "server.max_pending_requests / add replicas", retry_after_s=float(retry_after_s))

    @contextmanager
    def admit(self, what: str) -> Iterator[None]:
        """Count one request in for the ``with`` block, or raise at once.

        Args:
            what: the endpoint, first in the message (``"/v1/embeddings"``).

        Raises:
            OverloadedError: ``limit`` requests are in work (:meth:`check`).
        """
        self.check(what)
        if self.pending == 0:
            self.drain.started()
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1
            self.drain.finished()


class ServingState:
    """The models of one app and their batcher; ``app.state.serving``.

    Args:
        config: the server's limits.
    """

    def __init__(self, config: ServerLimits) -> None:
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
        self.admission = Admission(config.pending_limit, self.metrics.refusal_hook("max_pending_requests"))
        self.metrics.track_pending(lambda: self.admission.pending, self.admission.limit)

    def _batcher(self, run: Callable[[list[Any]], Sequence[Any]], config: BatcherConfig,
                 name: str) -> DynamicBatcher:
        batcher = DynamicBatcher(run, config=config, name=name, on_batch=self.metrics.batch_hook(name))
        self.metrics.track_queue(name, lambda: batcher.stats()["queue_depth"])
        return batcher

    def attach(self, embedder: Embedder | BundleEmbedder | None = None, router: CentroidRouter | None = None,
               run_batch: Callable[[list[list[int]]], Sequence[Any]] | None = None, *,
               reranker: Reranker | RerankRunner | None = None, decomposer: Decomposer | None = None,
               citation: Citer | None = None, images: ImageScorer | None = None,
               pipeline: Pipeline | None = None, pipeline_config: PipelineConfig | None = None,
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
        for role, bundle in (("decomposer", decomposer), ("citation", citation), ("images", images)):
            if bundle is None:
                continue
            task = by_role(role).name
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

    def models(self) -> dict[str, object]:
        """What is loaded, for /ready."""
        return {"embeddings": str(self.embedder.model_name) if self.embedder is not None else None,
                "rerank": self.reranker is not None, "route": self.router is not None,
                "decompose": self.decomposer is not None, "cite": self.citation is not None,
                "images": self.images is not None, "search": self.pipeline is not None}

    @property
    def ready(self) -> bool:
        loaded = any(v not in (None, False) for v in self.models().values())
        return loaded and not self.loading and self.load_error is None and not self.shutting_down

    def unavailable(self, endpoint: str, missing: str, fix: str) -> SearchsmithError:
        """The error of a request whose model is absent: 503 while the server loads, failed to
        load or shuts down (a retry, or a restart, may find it), 404 once it is up without that
        model (configured so: a retry never helps, ``fix`` does).

        Args:
            endpoint: the path, first in the message (``"/v1/rerank"``).
            missing: what is absent (``"no reranker is loaded"``).
            fix: how to serve it (``"add bundles.reranker to serve.yaml and restart"``).
        """
        if self.shutting_down:
            return NotReadyError(f"{endpoint}: the server is shutting down; retry on another replica")
        if self.load_error is not None:
            return NotReadyError(f"{endpoint}: loading the models failed ({self.load_error}); fix serve.yaml "
                                 "and restart")
        if not self.ready:
            return NotReadyError(f"{endpoint}: the models are not loaded yet; retry shortly")
        return NotServedError(f"{endpoint}: {missing} on this server; {fix}")

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
        bundle.attribute([("warm up", "warm up")],
                         **({"cosine": [1.0]} if getattr(bundle, "cosine_residual", None) is not None else {}))
    elif task == "images":
        bundle.encode_text(["warm up"])


def served_models(state: ServingState) -> list[dict[str, object]]:
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


def matryoshka_dims(embedder: Embedder | BundleEmbedder) -> list[int]:
    """The truncated dimensions an embed bundle was trained for (``matryoshka_dims`` in its
    manifest, e.g. a MatryoshkaLoss run); empty when none (only the full dimension is served)."""
    manifest = getattr(getattr(embedder, "bundle", None), "manifest", None) or {}
    dims = manifest.get("matryoshka_dims") or []
    return sorted({int(d) for d in dims if is_int(d, 1)})


def check_dimensions(requested: int | None, embedder: Embedder | BundleEmbedder) -> int | None:
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
        f"dimensions: {str(requested)[:20] + '...' if len(str(requested)) > 20 else requested} is not served by this model; its dimension is {int(embedder.dim)} and {why}; "
        f"send dimensions={int(embedder.dim)} or omit it"), "dimensions", "invalid_dimensions")
