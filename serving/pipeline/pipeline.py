"""The inference pipeline, assembled from a config: question (+ history) -> answer + trace.

::

    pipe = load_pipeline(load_pipeline_config("pipeline.yaml"), index_dir="indexes/demo")
    ans = pipe.ask("Which port does it listen on?", history=[...])
    ans["answer"], ans["references"], ans["timeline"], ans["images"], ans["trace"]
    pipe.feedback(ans["query_id"], quality=0.8)   # the protocol router learns (when enabled)

Stages run in the configured order; each declares the state fields it reads and writes,
and assembly fails when a stage reads a field that neither the request nor an earlier stage
writes. ``context`` directly followed by ``routing`` run as one step so that, in parallel
mode, the rewrite and the routing really run at once. A failing optional stage is skipped
with a note in the trace; retrieval from no source at all is an error.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchsmith.models.config import closest_key
from searchsmith.models.errors import (
    ConfigError,
    NotReadyError,
    PayloadTooLargeError,
    ValidationError,
)
from searchsmith.models.jsonl import check_unicode
from searchsmith.models.roles import Embedder, ModelOfTask, Turn
from searchsmith.models.runtime import Manifest
from searchsmith.models.tasks import TASKS
from searchsmith.models.text import is_blank
from searchsmith.serving.pipeline.answer import Answer, Feedback
from searchsmith.serving.pipeline.citation import CitationStage
from searchsmith.serving.pipeline.common import load_optional_bundle
from searchsmith.serving.pipeline.config import STRATEGIES, PipelineConfig, Preset
from searchsmith.serving.pipeline.context import BundleRewriter, ContextStage
from searchsmith.serving.pipeline.decomposition import DecompositionStage
from searchsmith.serving.pipeline.gates import GateDecision, decide, read_bundle_manifest
from searchsmith.serving.pipeline.generation import (
    ExtractiveGenerator,
    GenerationStage,
    Generator,
    build_generator,
)
from searchsmith.serving.pipeline.images import ImagesStage
from searchsmith.serving.pipeline.protocol import LinUCBRouter, task_features
from searchsmith.serving.pipeline.retrieval import RetrievalStage, Retriever
from searchsmith.serving.pipeline.routing import ContextRoutingStage, RoutingStage
from searchsmith.serving.pipeline.state import INPUT_FIELDS, STATE_FIELDS, PipelineState, Stage
from searchsmith.serving.pipeline.timeline import TimelineStage
from searchsmith.serving.rewrite import parse_history
from searchsmith.serving.router import CentroidRouter

if TYPE_CHECKING:
    from searchsmith.serving.index import Index

log = logging.getLogger(__name__)

STAGE_NAMES = ("context", "routing", "decomposition", "retrieval", "generation", "citation",
               "timeline", "images")
REQUIRED_STAGES = ("retrieval", "generation")
# A failure here fails the answer; any other stage degrades (skipped, noted in the trace).
CRITICAL_STAGES = ("retrieval", "generation")
# bundle role (``bundles.<role>``) -> its task, for the stages' bundles (models/tasks.py)
BUNDLE_TASKS: dict[str, str] = {t.role: t.name for t in TASKS if t.in_pipeline}


def check_stage_order(stages: Sequence[Stage]) -> None:
    """Every stage reads only fields written by the request or an earlier stage."""
    available = set(INPUT_FIELDS)
    for st in stages:
        for f in (*st.reads, *st.writes):
            if f not in STATE_FIELDS:
                raise ConfigError(f"stage {st.name!r} declares unknown state field {f!r}")
        missing = [f for f in st.reads if f not in available]
        if missing:
            raise ConfigError(f"stages: {st.name!r} reads {missing}, which no earlier stage writes; "
                              "reorder 'stages' (default order: " + ", ".join(STAGE_NAMES) + ")")
        available.update(st.writes)


class Pipeline:
    """Rewrite, route, decompose, retrieve, generate, cite, timeline, images: one call.

    Args:
        config: the pipeline config.
        index: a loaded :class:`searchsmith.serving.index.Index`.
        embedder: the index's embedder (queries, sentences, captions).
        bundles: ``{"decomposer"|"reranker"|"citation"|"images": bundle}`` objects with the
            runtime API of ``models.runtime`` (None or missing = the offline fallback).
        generator: an LLM backend overriding ``generation.backend`` (tests, servers).
    """

    def __init__(self, config: PipelineConfig, index: Index, embedder: Embedder,
                 bundles: Mapping[str, ModelOfTask | None] | None = None, generator: Generator | None = None) -> None:
        self.config = cfg = config
        self.index = index
        self.embedder = embedder
        self.bundles = {k: v for k, v in (bundles or {}).items() if v is not None}
        unknown = set(self.bundles) - set(BUNDLE_TASKS)
        if unknown:
            raise ConfigError(f"bundles: unknown bundle role(s) {sorted(unknown)}; roles are {sorted(BUNDLE_TASKS)}")
        for name in cfg.stages:
            if name not in STAGE_NAMES:
                hint = closest_key(name, STAGE_NAMES)
                raise ConfigError(f"stages: unknown stage {name!r}" + (f"; did you mean {hint!r}?" if hint else
                                                                      f"; stages are {list(STAGE_NAMES)}"))
        if len(set(cfg.stages)) != len(cfg.stages):
            raise ConfigError(f"stages: a stage is listed twice in {list(cfg.stages)}")
        for name in REQUIRED_STAGES:
            if name not in cfg.stages:
                raise ConfigError(f"stages: {name!r} is required (got {list(cfg.stages)})")
        dec = self.bundles.get("decomposer")
        self.router = (CentroidRouter(index, embedder, cfg.routing.router)
                       if cfg.routing.enabled and "routing" in cfg.stages else None)
        llm = generator if generator is not None else build_generator(cfg.generation)
        # Each bundle is used only where its recorded held-out figure beats the fallback the
        # pipeline has anyway (gates.py); the others are left out and every answer says why.
        self.gates: dict[str, GateDecision] = decide(self.bundles, cfg.bundles)
        for d in self.gates.values():
            if not d.used:
                log.info("%s: %s", d.use, d.reason)  # every answer's trace notes it too

        def use(what: str) -> bool:
            return what in self.gates and self.gates[what].used

        retriever = Retriever(index, embedder, cfg.retrieval, self.bundles.get("reranker") if use("rerank") else None)
        self.generation = GenerationStage(ExtractiveGenerator(embedder, cfg.generation.extractive), llm,
                                          cfg.generation, self.bundles.get("reader") if use("read") else None,
                                          lookup=retriever.titled, search=retriever.near,
                                          search_all=retriever.everywhere)

        self.rewrite_note = self.gates["rewrite"].reason if "rewrite" in self.gates else None
        self.decompose_note = self.gates["decompose"].reason if "decompose" in self.gates else None
        self.context = ContextStage(BundleRewriter(dec) if use("rewrite") else None, uses_model=use("rewrite"),
                                    no_answer_text=cfg.generation.no_answer_text)
        self.routing = RoutingStage(self.router, list(index.sources), enabled=cfg.routing.enabled)
        built: dict[str, Any] = {
            "context": self.context,
            "routing": self.routing,
            "decomposition": DecompositionStage(dec if use("decompose") else None, cfg.decomposition,
                                                gated=dec is not None and not use("decompose"),
                                                short_answers=self.generation.short_answers),
            "retrieval": RetrievalStage(retriever, cfg.decomposition, self.generation.answer_node),
            "generation": self.generation,
            "citation": CitationStage(embedder, cfg.citation, self.bundles.get("citation") if use("cite") else None),
            "timeline": TimelineStage(embedder, cfg.timeline),
            "images": ImagesStage(embedder, cfg.images,
                                  self.bundles.get("images") if use("images") or use("vision") else None,
                                  mix=use("images"), vision=use("vision")),
        }
        stages: list[Stage] = []
        names = list(cfg.stages)
        i = 0
        while i < len(names):
            if names[i] == "context" and i + 1 < len(names) and names[i + 1] == "routing":
                stages.append(ContextRoutingStage(self.context, self.routing))
                i += 2
                continue
            stages.append(built[names[i]])
            i += 1
        check_stage_order(stages)
        self.stages = stages
        self.protocol = (LinUCBRouter(list(cfg.presets), cfg.protocol) if cfg.protocol.enabled else None)

    # -- one question ------------------------------------------------------------------------
    def _check(self, query: Any, history: Any, cuts: list[str] | None = None) -> tuple[str, list]:
        if not isinstance(query, str):
            raise ValidationError(f"query: expected a string, got {type(query).__name__}")
        if is_blank(query):
            raise ValidationError("query: is empty; send a question")
        if len(query) > self.config.max_query_chars:
            raise PayloadTooLargeError(f"query: {len(query)} characters, the limit is "
                                       f"{self.config.max_query_chars} (the pipeline's max_query_chars); ask a "
                                       "shorter question, or raise max_query_chars in pipeline.yaml")
        check_unicode(query, "query")
        check_unicode(history, "history")
        return query.strip(), parse_history(history, cuts=cuts)

    def _preset(self, name: str | None, features: Any) -> tuple[str, Preset]:
        presets = self.config.presets
        if name is None:
            name = self.protocol.choose(features) if self.protocol else self.config.protocol.default_preset
        if name not in presets:
            raise ValidationError(f"preset: unknown preset {name!r}; presets are {sorted(presets)}")
        return name, presets[name]

    def ask(self, query: str, history: Sequence[Turn] | None = None, *, query_id: str | None = None,
            preset: str | None = None, strategy: str | None = None,
            routing_mode: str | None = None, on_delta: Callable[[str], None] | None = None) -> Answer:
        """Answer one (possibly follow-up) question.

        Args:
            query: the question.
            history: ``[{"role", "content"}, ...]`` earlier turns, oldest first.
            query_id: an id for ``feedback`` (a fresh one when None).
            preset: force a preset (else the protocol router's choice, or the default).
            strategy: force ``direct``/``parallel``/``planning`` (the SRSA ablation).
            routing_mode: force ``serial``/``parallel``/``auto``.
            on_delta: gets each piece of the final answer's text as an LLM backend
                (``openai``, ``hf``) generates it, on the calling thread; the offline backends
                write the answer at once and call nothing. The returned ``answer_text`` is the
                final word (an LLM's own ``[n]`` markers removed, or another backend's answer
                when the LLM failed part-way).

        Returns:
            The answer as a JSON-ready dict (:meth:`answer_dict`).
        """
        t0 = time.perf_counter()
        if getattr(self.index, "closed", False):  # a stand-in index in tests has no such flag
            raise NotReadyError("ask: the pipeline was closed (its with block ended, or close() was called); "
                                "load it again with load_pipeline")
        cuts: list[str] = []
        query, turns = self._check(query, history, cuts)
        for name, value in (("query_id", query_id), ("preset", preset), ("strategy", strategy),
                            ("routing_mode", routing_mode)):
            if value is not None and not (isinstance(value, str) and not is_blank(value)):  # "\u0000" passed
                raise ValidationError(f"{name}: expected a non-empty string or None (not spaces, control or "
                                      f"zero-width characters alone), got {value!r:.60}")
        if strategy is not None and strategy not in STRATEGIES:
            raise ValidationError(f"strategy: expected one of {list(STRATEGIES)}, got {strategy!r}")
        if routing_mode is not None and routing_mode not in ("serial", "parallel", "auto"):
            raise ValidationError(f"routing_mode: expected serial, parallel or auto, got {routing_mode!r}")
        if query_id is not None and self.protocol is not None and self.protocol.is_pending(query_id):
            raise ValidationError(
                f"query_id: {query_id!r} is still waiting for the feedback on an earlier answer, which a "
                "second answer would take over; send a new query_id with each question, or send that "
                "answer's feedback first (POST /v1/feedback)")
        typed, fixes = query, {}
        spelled = getattr(self.index, "spelled", None)  # (a stand-in index in tests may have none)
        if self.config.retrieval.spelling and spelled is not None:
            query, fixes = spelled(query, self.config.retrieval.spelling_min_chars)
        features = task_features(query, turns)
        name, chosen = self._preset(preset, features)
        state = PipelineState(query=query, history=turns, query_id=query_id or uuid.uuid4().hex, preset_name=name,
                              on_delta=on_delta, typed=typed if query != typed else "")
        if fixes:
            state.trace.note("spelling: " + ", ".join(f"{a!r} read as {b!r}" for a, b in fixes.items())
                             + " (retrieval.spelling)")
        for line in cuts:
            state.trace.note(line)
        for d in self.gates.values():
            if not d.used:
                state.trace.note(f"{d.use}: {d.reason}")
        for stage in self.stages:
            try:
                if isinstance(stage, (ContextRoutingStage, RoutingStage)):
                    stage.run(state, chosen, mode=routing_mode)
                elif isinstance(stage, DecompositionStage):
                    stage.run(state, chosen, strategy=strategy)
                else:
                    stage.run(state, chosen)
            except Exception as exc:
                if stage.name in CRITICAL_STAGES:
                    raise
                log.warning("stage %s failed (%s); skipped", stage.name, exc)
                st = state.trace.get(stage.name)
                st.skipped, st.note = True, f"failed ({type(exc).__name__}: {exc}); skipped"
                state.trace.note(f"{stage.name}: {st.note}")
                if "sources" in stage.writes and not state.sources:
                    state.sources = list(self.index.sources)  # routing lost: search everything
        if not state.rewrite:
            state.rewrite = state.query
        if not state.cited_answer:
            state.cited_answer = state.answer
        tr = state.trace
        tr.total_ms = (time.perf_counter() - t0) * 1e3
        c = self.config.cost
        tr.cost = (c.per_second * tr.total_ms / 1e3 + c.per_1k_tokens * (tr.tokens_in + tr.tokens_out) / 1e3
                   + c.per_model_call * tr.model_calls)
        if self.protocol is not None and not self.protocol.remember(state.query_id, name, features, tr.cost):
            tr.note(f"protocol: query_id {state.query_id!r} was given to another answer meanwhile; "
                    "feedback with it rewards that one")
        return self.answer_dict(state, features, self.gates)

    def feedback(self, query_id: str, quality: float) -> Feedback:
        """Reward the protocol router for an answer (``quality`` in [0, 1])."""
        if self.protocol is None:
            raise ValidationError("feedback: the protocol router is switched off (protocol.enabled: false)")
        return self.protocol.feedback(query_id, quality)

    @staticmethod
    def answer_dict(state: PipelineState, features: Sequence[float] | None = None,
                    gates: dict[str, GateDecision] | None = None) -> Answer:
        """The answer as JSON; ``trace.gates`` says, per configured bundle use, whether the model
        was used and why not (:mod:`~searchsmith.serving.pipeline.gates`)."""
        tr = state.trace
        return {
            "query_id": state.query_id,
            "query": state.typed or state.query,
            "rewrite": state.rewrite,
            "answer": state.cited_answer,
            "answer_text": state.answer,
            "answer_found": state.answer_found,
            "short_answer": state.short_answer,
            "support": list(state.support),
            "references": state.references,
            "sentences": state.sentences,
            "timeline": state.timeline,
            "images": state.images,
            "passages": [p.to_dict() for p in state.passages],
            "nodes": [{"id": n.id, "text": n.text, "depends_on": list(n.depends_on), "round": n.round,
                       "answer": n.answer, "passages": [p.chunk_id for p in n.passages]} for n in state.nodes],
            "trace": {
                "preset": state.preset_name,
                "strategy": state.strategy,
                "graph_type": state.graph.type if state.graph is not None else None,
                "routing": state.route,
                "sources": state.sources,
                "stages": {k: v.to_dict() for k, v in tr.stages.items()},
                "total_ms": round(tr.total_ms, 3),
                "model_calls": tr.model_calls,
                "tokens_in": tr.tokens_in,
                "tokens_out": tr.tokens_out,
                "cost": round(tr.cost, 6),
                "features": [round(float(v), 4) for v in features] if features is not None else None,
                "notes": list(tr.notes),
                "gates": {use: d.to_dict() for use, d in (gates or {}).items()},
            },
        }

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the stages, the router and the index (their threads and the chunk store)."""
        for st in self.stages:
            if hasattr(st, "close"):
                st.close()
        if self.router is not None:
            self.router.close()
        self.index.close()


def load_pipeline(config: PipelineConfig, index_dir: str | None = None, *, embedder: Embedder | None = None,
                  verify: bool = True) -> Pipeline:
    """Open the index (and its embedder) and the configured bundles; build the pipeline.

    Raises:
        ConfigError: no index given, or a bundle of the wrong task.
        BundleError: a missing or corrupt index or bundle.
    """
    from searchsmith.models.config import from_dict
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from searchsmith.serving.index import Index, read_manifest

    index_dir = index_dir or config.index
    if not index_dir:
        raise ConfigError("index: no index folder; pass --index DIR or set 'index:' in the pipeline config "
                          "(build one with 'searchsmith index CORPUS.jsonl --out DIR')")
    manifest = read_manifest(index_dir)
    b = config.bundles
    if embedder is None and b.embedder:
        embedder = bundle_embedder(b.embedder, manifest, config)
    if embedder is None:
        embedder = Embedder(from_dict(EmbedderConfig, manifest["config"]["embedder"]))
    index = Index.load(index_dir, embedder=embedder, verify=verify)
    bundles = {role: (unloaded_if_gated(role, task, getattr(b, role), config)
                      or load_optional_bundle(getattr(b, role), task, b.device, b.backend, b.threads,
                                              key=f"bundles.{role}"))
               for role, task in BUNDLE_TASKS.items()}
    return Pipeline(config, index, embedder, bundles)


def bundle_embedder(path: str, index_manifest: Manifest, config: PipelineConfig) -> Embedder:
    """The ``bundles.embedder`` bundle as the pipeline's embedder, checked against the index.

    Raises:
        ConfigError: not an ``embed`` bundle, or exported from another model or dimension
            than the index was built with.
    """
    from searchsmith.serving.runner import BundleEmbedder

    b = config.bundles
    bundle = load_optional_bundle(path, "embed", b.device, b.backend, b.threads, key="bundles.embedder")
    base, dim = bundle.manifest.get("base_model"), bundle.manifest.get("embedding_dim")
    want, want_dim = index_manifest["embedding_model"], index_manifest["embedding_dim"]
    if base != want or dim != want_dim:
        raise ConfigError(f"bundles.embedder: {path} was exported from {base} (dim {dim}) but the index was "
                          f"built with {want} (dim {want_dim}); export that model (searchsmith export "
                          f"embedder --model {want} --out DIR) or remove bundles.embedder")
    return BundleEmbedder(bundle, name=str(base))


class GatedBundle:
    """A configured bundle whose every use its gate leaves out: the manifest, no model.

    Loading a bundle costs seconds (ONNX sessions, tokenizer); one the pipeline will not call
    is represented by its manifest, so that the gate still reports it in every trace.
    """

    def __init__(self, path: str, manifest: Manifest) -> None:
        self.path, self.manifest, self.task = path, manifest, manifest.get("task")


def unloaded_if_gated(role: str, task: str, path: str | None, config: PipelineConfig) -> GatedBundle | None:
    """A :class:`GatedBundle` when the gates will leave out every use of the bundle at
    ``path`` (read from its manifest alone), else None: the bundle is to be loaded (loading
    also reports a missing, corrupt or wrong-task bundle)."""
    if not path:
        return None
    manifest = read_bundle_manifest(Path(path))
    if manifest is None or manifest.get("task") != task:
        return None
    decisions = decide({role: manifest}, config.bundles)
    if decisions and not any(d.used for d in decisions.values()):
        return GatedBundle(path, manifest)
    return None
