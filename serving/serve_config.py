"""serve.yaml: every model of one server, from one file, and how they are loaded.

One file lists the index, the model bundles (each loaded with
``searchsmith.models.runtime.load_bundle``), the server's limits and the pipeline::

    # searchsmith serve --config searchsmith-work/serve.yaml
    index: indexes/demo            # /v1/route and /v1/search (the pipeline) over it
    bundles:                       # any may be null: the endpoint answers 503 (or falls back)
      embedder: bundles/embedder   # /v1/embeddings (null: the index's own embedder)
      reranker: bundles/reranker   # /v1/rerank, and the pipeline's rerank stage
      decomposer: bundles/decomposer
      citation: bundles/citation
      images: bundles/images
    server:                        # ServerLimits: limits, api_keys, cors_origins, batchers
      max_texts_per_request: 256
    pipeline: {}                   # PipelineConfig (its 'bundles' are the ones above)

Every key with its default and meaning is in the docstrings below (``ServeBundles``,
``searchsmith.serving.limits.ServerLimits``, ``PipelineConfig``). Authentication:
``server.api_keys: [KEY, ...]``, then clients send ``Authorization: Bearer KEY`` (the OpenAI
SDK: ``api_key=KEY``). The log level is the environment variable ``SEARCHSMITH_LOG``
(``debug``, ``info``, ``warning`` (default), ``error``). ``/v1/feedback`` teaches the protocol
router only with ``pipeline.protocol.enabled: true``; while it is off (the default) feedback is
accepted and answered ``"recorded": false``.

Relative paths are relative to the folder of the YAML file, so the quickstart's
``searchsmith-work/serve.yaml`` works from anywhere. The quickstart's layout is
``WORKDIR/bundles/<role>/`` (roles: ``BUNDLE_ROLES``) and ``WORKDIR/indexes/demo/``;
:func:`write_serve_config` writes the matching serve.yaml (the bundles that exist).
Overrides use the YAML paths: ``server.batcher.max_batch_size=64``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from searchsmith.models.config import apply_overrides, check_number, from_dict, read_yaml, to_dict
from searchsmith.models.errors import ConfigError
from searchsmith.models.tasks import TASKS
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.pipeline.config import BundlesConfig, PipelineConfig

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from searchsmith.serving.state import ServingState

__all__ = ["BUNDLE_ROLES", "DEFAULT_WORKDIR", "ServeBundles", "ServeConfig", "check_paths", "default_serve_config",
           "load_models", "load_serve_config", "serve_config_text", "write_serve_config"]

# role in serve.yaml -> the bundle's task (manifest "task")
BUNDLE_ROLES: dict[str, str] = {t.role: t.name for t in TASKS}  # models/tasks.py
DEFAULT_WORKDIR = "searchsmith-work"
QUICKSTART_INDEX = "indexes/demo"


@dataclass(frozen=True)
class ServeBundles(BundlesConfig):
    """The bundle folders of the server (``searchsmith export ... --out``); null = not served.

    Attributes:
        embedder: ``embed`` bundle behind /v1/embeddings (null: the index's torch embedder,
            or the default all-MiniLM-L6-v2 without an index).
        reranker: ``rerank`` bundle: /v1/rerank (batched) and the pipeline's rerank stage.
        decomposer: ``decompose`` bundle: /v1/decompose and the pipeline's rewrite + QDG.
        citation: ``cite`` bundle: /v1/cite and the pipeline's citation (fallback: cosine).
        images: ``images`` bundle: /v1/images/place and the pipeline's placement.
        reader: ``read`` bundle: the pipeline's short answers (``generation.backend: auto``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        backend: ``auto`` (ONNX Runtime), ``onnx`` or ``torch``.
        threads: intra-op threads per bundle (None: the runtime's default), 1 to 4 x the CPUs.
        gate_rewrite: the pipeline's rewrite gate (``pipeline.bundles.gate_rewrite``: the
            decomposer's rewrites only when the retrieval they drive beats the heuristic
            rewrite's).
        gate_decompose: likewise its graphs, against the question as one node.
        gate_rerank: /v1/search reranks only with a reranker whose held-out nDCG@10 beats the
            bi-encoder order (and BM25 when recorded).
        gate_cite: /v1/search cites with the model only when it beats cosine attribution.
        gate_images: /v1/search places captioned images with the model only when, on held-out
            photos, it beats caption cosine.
        gate_vision: /v1/search places uncaptioned images by the model's vision tower only
            when, on held-out photos, that beats leaving them out.
        gate_read: /v1/search answers with the reader only when its held-out answer F1 beats
            the best-cosine sentence.
            The gates apply to /v1/search; each model's own endpoint serves it regardless, and
            ``/ready`` and ``/v1/models`` show every decision.
    """

    # the fields are the pipeline's (pipeline.yaml ``bundles``), one definition for both files


class DeploymentOptions(TypedDict, total=False):
    """Keyword arguments of ``ray.serve.deployment`` (:meth:`RayServeConfig.deployment_options`)."""

    num_replicas: int
    autoscaling_config: dict[str, float]
    max_ongoing_requests: int
    max_queued_requests: int
    ray_actor_options: dict[str, float]


@dataclass(frozen=True)
class RayServeConfig:
    """Ray Serve replicas (``searchsmith serve --ray``; serve.yaml ``ray``).

    Example (serve.yaml)::

        ray:
          min_replicas: 1          # autoscaling between these bounds
          max_replicas: 4
          target_ongoing_requests: 4
          num_cpus: 1

    Attributes:
        replicas: fixed number of replicas (``--replicas`` overrides it); ignored when
            ``max_replicas`` is set.
        min_replicas: autoscaling's lower bound (with ``max_replicas``).
        max_replicas: autoscaling's upper bound; set, it turns autoscaling on (Ray Serve adds
            replicas while each has more than ``target_ongoing_requests`` in flight, and
            removes idle ones).
        target_ongoing_requests: the in-flight requests per replica autoscaling aims at (> 0).
        max_ongoing_requests: requests one replica takes at once; more wait in Serve's queue.
        max_queued_requests: requests waiting for a replica; past it the answer is 429
            ``overloaded`` with Retry-After (without the gateway: Ray Serve's plain 503)
            (-1: no limit).
        num_cpus: CPUs reserved per replica (each loads every model; > 0, fractions allowed).
        address: a running Ray cluster's ``HOST:PORT`` (None: a local Ray in this process),
            e.g. one started with ``ray start --head --port 6379`` plus ``ray start --address
            HEAD:6379`` on each other node.
        gateway: put a thin gateway deployment (no models, 0 CPUs) in front of the replicas:
            a request whose replica dies is sent to another one (``retries``) or answered 503
            with Retry-After in the server's error shape, and the requests in flight are bounded
            by ``server.max_connections``; False: Ray Serve's HTTP proxy calls the replicas
            directly (one hop less, but such a request gets Ray's plain 500, and setting
            ``server.max_connections`` is refused: nothing would apply it).
        retries: with ``gateway``, how many times a request whose replica died before any byte
            of its answer was sent goes to another replica; requests that change state
            (POST /v1/feedback) are never sent again (503 at once).
    """

    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int | None = None
    target_ongoing_requests: float = 2.0
    max_ongoing_requests: int = 8
    max_queued_requests: int = 256
    num_cpus: float = 1.0
    address: str | None = None
    gateway: bool = True
    retries: int = 2

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.min_replicas < 1:
            raise ValueError(f"ray.replicas and ray.min_replicas must be >= 1, got {self.replicas}, {self.min_replicas}")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(f"ray.max_replicas ({self.max_replicas}) must be >= ray.min_replicas ({self.min_replicas})")
        for key in ("target_ongoing_requests", "num_cpus"):
            # NaN fails too (Ray Serve would take it and never scale / never place a replica)
            check_number(f"ray.{key}", getattr(self, key), 0.0, low_open=True)
        if self.max_ongoing_requests < 1:
            raise ValueError(f"ray.max_ongoing_requests must be >= 1, got {self.max_ongoing_requests}")
        if self.max_queued_requests < -1 or self.max_queued_requests == 0:
            raise ValueError(f"ray.max_queued_requests must be >= 1 or -1 (no limit), got {self.max_queued_requests}")
        if self.retries < 0:
            raise ValueError(f"ray.retries must be >= 0 (0: answer 503 at once), got {self.retries}")

    def deployment_options(self, replicas: int | None = None) -> DeploymentOptions:
        """Keyword arguments of ``serve.deployment`` (``replicas``: the ``--replicas`` override)."""
        opts: DeploymentOptions = {"max_ongoing_requests": self.max_ongoing_requests,
                                   "max_queued_requests": self.max_queued_requests,
                                   "ray_actor_options": {"num_cpus": self.num_cpus}}
        if self.max_replicas is not None and replicas is None:
            opts["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                          "target_ongoing_requests": self.target_ongoing_requests}
        else:
            opts["num_replicas"] = replicas or self.replicas
        return opts


@dataclass(frozen=True)
class ServeConfig:
    """The whole server (serve.yaml top level).

    Attributes:
        index: index folder (``searchsmith index``): /v1/route, and /v1/search when ``search``;
            null = ``pipeline.index``, else no index (an empty string is refused).
        search: serve the pipeline (/v1/search, /v1/feedback) over the index.
        bundles: the model bundles.
        server: limits, security and batchers.
        pipeline: the pipeline's stages and thresholds (also the cite / images thresholds).
        ray: replicas and autoscaling under ``searchsmith serve --ray``.
    """

    index: str | None = None
    search: bool = True
    bundles: ServeBundles = field(default_factory=ServeBundles)
    server: ServerLimits = field(default_factory=ServerLimits)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ray: RayServeConfig = field(default_factory=RayServeConfig)

    def __post_init__(self) -> None:
        # '' used to fall through to pipeline.index and serve no index, silently
        if self.index is not None and not self.index.strip():
            raise ValueError("index must be an index folder (searchsmith index CORPUS.jsonl --out DIR) or null "
                             f"(no index), got {self.index!r}")


# The bundles the pipeline (/v1/search) uses; the embedder is the index's.
PIPELINE_ROLES = ("reranker", "decomposer", "citation", "images", "reader")

# The environment variables ``searchsmith serve`` reads (listed by its --help).
ENVIRONMENT: dict[str, str] = {
    "SEARCHSMITH_LOG": "log level: debug, info, warning (default) or error; e.g. SEARCHSMITH_LOG=info",
    "HF_HUB_OFFLINE": "1 (set by searchsmith unless already set): models load from local files only",
}


def _resolve(path: str | None, base: Path) -> str | None:
    if path is None:
        return None
    p = Path(os.path.expanduser(path))
    return str(p if p.is_absolute() else base / p)


def load_serve_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = (),
                      *, index: str | None = None) -> ServeConfig:
    """Strictly load serve.yaml (unknown keys fail, naming the closest) and resolve its paths.

    Args:
        path: the YAML file; None = all defaults.
        overrides: ``a.b=value`` strings (value parsed as YAML).
        index: overrides ``index`` (``--index``; relative to the working directory).

    Returns:
        The config, with bundle and index paths made absolute (relative to the YAML's folder).

    Raises:
        ConfigError: unknown keys, wrong types, a server key at the top level, or bundles
            set under ``pipeline.bundles``.
    """
    raw: dict[str, Any] = dict(read_yaml(path)) if path is not None else {}
    server_keys = {f.name for f in dataclasses.fields(ServerLimits)}
    misplaced = sorted(k for k in raw if k in server_keys and k not in {f.name for f in dataclasses.fields(ServeConfig)})
    if misplaced:
        raise ConfigError(f"{path}: {', '.join(misplaced)} belong under 'server:' (serve.yaml lists index, "
                          f"bundles, server and pipeline); move them there")
    apply_overrides(raw, list(overrides))
    cfg = from_dict(ServeConfig, raw, source=str(path) if path is not None else "serve config")
    if to_dict(cfg.pipeline.bundles) != to_dict(BundlesConfig()):
        raise ConfigError(f"{path}: pipeline.bundles is not read by the server; list the bundles once under the "
                          "top-level 'bundles:' (the endpoints and the pipeline share them)")
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    b = cfg.bundles
    bundles = dataclasses.replace(b, **{role: _resolve(getattr(b, role), base) for role in BUNDLE_ROLES})
    if index is not None and not index.strip():
        raise ConfigError("--index: an empty path serves no index; give an index folder (searchsmith index "
                          "CORPUS.jsonl --out DIR), or leave --index out to use serve.yaml's 'index'")
    idx = (str(Path(index).resolve()) if index is not None
           else _resolve(cfg.pipeline.index if cfg.index is None else cfg.index, base))
    # the gate switches live beside the bundles; the pipeline reads them from its own config
    gates = {f.name: getattr(b, f.name) for f in dataclasses.fields(b) if f.name.startswith("gate_")}
    pipeline = dataclasses.replace(cfg.pipeline, bundles=dataclasses.replace(cfg.pipeline.bundles, **gates))
    return dataclasses.replace(cfg, bundles=bundles, index=idx, pipeline=pipeline)


def check_paths(cfg: ServeConfig) -> None:
    """Fail before anything loads when a configured folder is missing (names the key and the fix)."""
    problems = []
    for role in BUNDLE_ROLES:
        path = getattr(cfg.bundles, role)
        if path is not None and not (Path(path) / "manifest.json").is_file():
            problems.append(f"bundles.{role}: {path} is not a bundle folder (no manifest.json); export one with "
                            f"'searchsmith export RUN_DIR --out {path}' or set bundles.{role}: null")
    if cfg.index is not None and not (Path(cfg.index) / "manifest.json").is_file():
        problems.append(f"index: {cfg.index} is not an index folder (no manifest.json); build one with "
                        "'searchsmith index CORPUS.jsonl --out DIR' or set index: null")
    if problems:
        raise ConfigError("serve config: " + "; ".join(problems))


def serve_config_text(workdir: str | os.PathLike, *, only_existing: bool = True) -> str:
    """The text of ``WORKDIR/serve.yaml`` for the quickstart layout.

    Args:
        workdir: the quickstart's folder (``bundles/<role>/``, ``indexes/demo/``).
        only_existing: list only the bundles and index that exist (the others are null).
    """
    import yaml

    work = Path(workdir)
    bundles = {}
    for role in BUNDLE_ROLES:
        rel = f"bundles/{role}"
        bundles[role] = rel if not only_existing or (work / rel / "manifest.json").is_file() else None
    index = QUICKSTART_INDEX if not only_existing or (work / QUICKSTART_INDEX / "manifest.json").is_file() else None
    body = {"index": index, "search": True, "bundles": bundles, "server": {}, "pipeline": {}}
    return ("# The quickstart's models behind one server: searchsmith serve --config "
            f"{work / 'serve.yaml'}\n# Paths are relative to this file's folder; see searchsmith.serving.serve_config.\n"
            + yaml.safe_dump(body, sort_keys=False))


def write_serve_config(workdir: str | os.PathLike, *, only_existing: bool = True) -> Path:
    """Write ``WORKDIR/serve.yaml`` for the quickstart layout (atomic: temp file, then rename).

    A serve.yaml its user edited (``server.api_keys``...) is never overwritten: the new
    text then goes to ``serve.yaml.new`` (:func:`searchsmith.models.io.write_text_if_ours`).

    Returns:
        The file written.
    """
    from searchsmith.models.io import write_text_if_ours

    work = Path(workdir)
    return write_text_if_ours(work / "serve.yaml", serve_config_text(work, only_existing=only_existing)).path


def default_serve_config(cwd: str | os.PathLike = ".") -> str | None:
    """The serve.yaml ``searchsmith serve`` uses without --config: the quickstart's, if any."""
    path = Path(cwd) / DEFAULT_WORKDIR / "serve.yaml"
    return str(path) if path.is_file() else None


def load_models(cfg: ServeConfig, state: ServingState, *, warm: bool = True) -> None:
    """Load every configured model and attach it to ``state`` (the server's loader).

    Bundles are loaded once and shared by the endpoints and the pipeline.

    Raises:
        BundleError: a missing, corrupt or untrained bundle (from ``load_bundle``).
        ConfigError: a bundle of the wrong task under a role.
    """
    from searchsmith.serving.pipeline.common import load_optional_bundle
    from searchsmith.serving.runner import BundleEmbedder

    b = cfg.bundles
    loaded = {role: load_optional_bundle(getattr(b, role), task, b.device, b.backend, b.threads,
                                         key=f"bundles.{role}")
              for role, task in BUNDLE_ROLES.items()}
    embedder: Any = None
    router = pipeline = None
    if cfg.index is not None:
        from searchsmith.serving.embedder import Embedder, EmbedderConfig
        from searchsmith.serving.index import Index, read_manifest
        from searchsmith.serving.pipeline.pipeline import Pipeline
        from searchsmith.serving.router import CentroidRouter

        manifest = read_manifest(cfg.index)
        index_embedder = Embedder(from_dict(EmbedderConfig, manifest["config"]["embedder"]))
        index = Index.load(cfg.index, embedder=index_embedder)
        if cfg.search:
            pipeline = Pipeline(cfg.pipeline, index, index_embedder,
                                {role: loaded[role] for role in PIPELINE_ROLES})
        router = (pipeline.router if pipeline is not None and pipeline.router is not None
                  else CentroidRouter(index, index_embedder, cfg.pipeline.routing.router))
        embedder = index_embedder
    if loaded["embedder"] is not None:
        embedder = BundleEmbedder(loaded["embedder"], name=Path(b.embedder).name)
    elif embedder is None:
        from searchsmith.serving.embedder import Embedder

        embedder = Embedder()
    # The pipeline's gates, reported once: /v1/search leaves a model out unless its held-out
    # figure beat its untrained baseline; the model endpoints still serve what was asked for,
    # and say so
    from searchsmith.serving.pipeline.gates import decide, gate_report

    decisions = decide({role: loaded[role] for role in PIPELINE_ROLES},
                       cfg.pipeline.bundles)
    state.model_gates = {use: d.to_dict() for use, d in decisions.items()}
    for line in gate_report(decisions):
        log.info("%s", line)
    for use, d in decisions.items():
        if not d.used:
            log.warning("%s: %s; /v1/search leaves it out, its own endpoint still serves it", use, d.reason)
    state.attach(embedder=embedder, router=router, reranker=loaded["reranker"], decomposer=loaded["decomposer"],
                 citation=loaded["citation"], images=loaded["images"], pipeline=pipeline,
                 pipeline_config=cfg.pipeline, warm=warm)
