"""Stage ``context``: turn a follow-up into a standalone question (KIMAs context manager).

With a decomposer bundle its ``rewrite(history, query)`` task is used; without one,
:class:`searchsmith.serving.rewrite.HeuristicRewriter` (query + salient history terms).
A single-turn question is kept as it is (no model call), and so is any question under a
preset that switches the rewrite off (``turbo``). A failing rewrite degrades to the query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from searchsmith.models.roles import Decomposer
from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.pipeline.state import PipelineState, estimate_tokens
from searchsmith.serving.rewrite import HeuristicRewriter, Rewriter, Turn

log = logging.getLogger(__name__)


class BundleRewriter:
    """A ``decompose`` bundle seen as a :class:`~searchsmith.serving.rewrite.Rewriter`."""

    def __init__(self, bundle: Decomposer) -> None:
        self.bundle = bundle

    def rewrite(self, history: Sequence[Turn], query: str) -> str:
        turns = [{"role": t.role, "content": t.content} for t in history]
        out = self.bundle.rewrite(turns, query)
        return out.strip() if isinstance(out, str) and out.strip() else query


class ContextStage:
    """Reads the query and history; writes the standalone ``rewrite``."""

    name = "context"
    reads = ("query", "history")
    writes = ("rewrite",)

    def __init__(self, rewriter: Rewriter | None = None, uses_model: bool = False) -> None:
        self.rewriter = rewriter or HeuristicRewriter()
        self.uses_model = uses_model

    def run(self, state: PipelineState, preset: Preset) -> None:
        with state.trace.stage(self.name) as st:
            if not preset.rewrite:
                state.rewrite = state.query
                st.skipped, st.note = True, f"preset {state.preset_name!r} does not rewrite"
                return
            if not state.history:
                state.rewrite = state.query
                return
            try:
                state.rewrite = self.rewriter.rewrite(state.history, state.query) or state.query
            except Exception as exc:  # noqa: BLE001 - a failed rewrite must not fail the answer
                log.warning("context: rewrite failed (%s); using the query as it is", exc)
                state.rewrite = state.query
                st.note = f"rewrite failed ({type(exc).__name__}: {exc}); used the query as it is"
                state.trace.note(f"context: {st.note}")
                return
            if self.uses_model:
                tokens_in = sum(estimate_tokens(t.content) for t in state.history) + estimate_tokens(state.query)
                state.trace.count(self.name, 1, tokens_in, estimate_tokens(state.rewrite))
