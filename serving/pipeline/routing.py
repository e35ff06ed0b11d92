"""Stage ``routing``: pick the sources worth searching (KIMAs knowledge routing).

Scoring is :class:`searchsmith.serving.router.CentroidRouter`'s (centroids, mix-in,
scaling, fallback source). Modes:

* ``parallel``: the raw query is routed while the ``context`` stage rewrites it, really
  concurrently (two threads; :class:`ContextRoutingStage`);
* ``serial``: the rewrite first, then the router's serial fusion of rewrite and raw query;
* ``auto``: serial when there is history, else parallel.

With ``routing.enabled: false``, or when routing fails, every source of the index is
searched (noted in the trace).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from searchsmith.serving.pipeline.common import embed
from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.pipeline.context import ContextStage
from searchsmith.serving.pipeline.state import PipelineState
from searchsmith.serving.router import CentroidRouter

log = logging.getLogger(__name__)


class RoutingStage:
    """Reads the query (and, in serial mode, the rewrite); writes ``sources`` and ``route``."""

    name = "routing"
    reads = ("query", "history", "rewrite")
    writes = ("sources", "route")

    def __init__(self, router: CentroidRouter | None, all_sources: list[str], enabled: bool = True,
                 mode: str | None = None) -> None:
        self.router = router
        self.all_sources = list(all_sources)
        self.enabled = enabled and router is not None
        self.mode = mode or (router.config.mode if router is not None else "auto")

    def effective_mode(self, state: PipelineState, mode: str | None = None) -> str:
        mode = mode or self.mode
        if mode == "auto":
            return "serial" if state.history else "parallel"
        return mode

    def run(self, state: PipelineState, preset: Preset, mode: str | None = None) -> None:
        with state.trace.stage(self.name) as st:
            if not self.enabled:
                state.sources = list(self.all_sources)
                state.route = {"mode": "off", "sources": [{"source": s, "score": None} for s in state.sources]}
                st.skipped, st.note = True, "routing disabled: every source is searched"
                return
            effective = self.effective_mode(state, mode)
            t0 = time.perf_counter()
            try:
                if effective == "serial" and state.rewrite and state.rewrite != state.query:
                    # The router's own serial fusion of rewrite and raw query, so that the
                    # pipeline routes exactly like 'searchsmith route --mode serial'.
                    ranked = self.router._score_serial(state.query, state.rewrite, None)
                    routed = state.rewrite
                else:
                    # cached in the state: retrieval reuses it when the query is not rewritten
                    ranked = self.router.score(embed(state, self.router.embedder, [state.query]))[0]
                    routed = state.query
                ranked, fell_back = self.router._finish(ranked)
            except Exception as exc:  # noqa: BLE001 - degrade to every source
                log.warning("routing failed (%s); searching every source", exc)
                state.sources = list(self.all_sources)
                state.route = {"mode": effective, "error": str(exc)}
                st.note = f"routing failed ({type(exc).__name__}: {exc}); searched every source"
                state.trace.note(f"routing: {st.note}")
                return
            state.sources = [s for s, _ in ranked]
            state.route = {"mode": effective, "routed_text": routed, "fallback": fell_back,
                           "sources": [{"source": s, "score": round(float(sc), 6)} for s, sc in ranked],
                           "route_ms": round((time.perf_counter() - t0) * 1e3, 3)}


class ContextRoutingStage:
    """``context`` then ``routing`` (serial), or both at once (parallel): one step of the list."""

    name = "context+routing"
    reads = ("query", "history")
    writes = ("rewrite", "sources", "route")

    def __init__(self, context: ContextStage, routing: RoutingStage) -> None:
        self.context = context
        self.routing = routing
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="context")

    def run(self, state: PipelineState, preset: Preset, mode: str | None = None) -> None:
        effective = self.routing.effective_mode(state, mode)
        if effective == "serial":
            self.context.run(state, preset)
            self.routing.run(state, preset, mode="serial")
            return
        fut = self._pool.submit(self.context.run, state, preset)
        try:
            self.routing.run(state, preset, mode="parallel")
        finally:
            fut.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False)
