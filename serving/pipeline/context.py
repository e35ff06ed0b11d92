"""Stage ``context``: turn a follow-up into a standalone question (KIMAs context manager).

With a decomposer bundle its ``rewrite(history, query)`` task is used; without one,
:class:`searchsmith.serving.rewrite.HeuristicRewriter` (query + salient history terms).
A single-turn question is kept as it is (no model call), and so is any question under a
preset that switches the rewrite off (``turbo``). A failing rewrite degrades to the query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from searchsmith.models.roles import Decomposer, Meta
from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.pipeline.state import (
    PipelineState,
    counted_call,
    estimate_tokens,
    model_tokens,
)
from searchsmith.serving.rewrite import HeuristicRewriter, Rewriter, Turn

log = logging.getLogger(__name__)


class BundleRewriter:
    """A ``decompose`` bundle seen as a :class:`~searchsmith.serving.rewrite.Rewriter`."""

    def __init__(self, bundle: Decomposer) -> None:
        self.bundle = bundle

    def rewrite(self, history: Sequence[Turn], query: str, return_meta: bool = False) -> str | tuple[str, Meta]:
        """The standalone question (with ``return_meta``: and the bundle's meta, ``tokens`` and
        ``tokens_out`` for the trace, ``{}`` when it reports none)."""
        turns = [{"role": t.role, "content": t.content} for t in history]
        out, _, meta = counted_call(self.bundle.rewrite, turns, query, words=lambda: 0)
        out = out.strip() if isinstance(out, str) and out.strip() else query
        return (out, meta) if return_meta else out


class ContextStage:
    """Reads the query and history; writes the standalone ``rewrite``."""

    name = "context"
    reads = ("query", "history")
    writes = ("rewrite",)

    def __init__(self, rewriter: Rewriter | None = None, uses_model: bool = False,
                 no_answer_text: str | None = None) -> None:
        self.rewriter = rewriter or HeuristicRewriter()
        self.uses_model = uses_model
        # an earlier answer that was this text says nothing of the topic: its words ("No answer
        # found in the sources.") are no context for the follow-up (the question before it is)
        self.no_answer_text = " ".join(no_answer_text.split()) if no_answer_text else None

    def said_something(self, history: Sequence[Turn]) -> list[Turn]:
        """``history`` without the assistant turns that gave the no-answer text."""
        if not self.no_answer_text:
            return list(history)
        return [t for t in history if not (t.role == "assistant" and " ".join(t.content.split()) == self.no_answer_text)]

    def run(self, state: PipelineState, preset: Preset) -> None:
        with state.trace.stage(self.name) as st:
            if not preset.rewrite:
                state.rewrite = state.query
                st.skipped, st.note = True, f"preset {state.preset_name!r} does not rewrite"
                return
            if not state.history:
                state.rewrite = state.query
                return
            history = self.said_something(state.history)
            if len(history) < len(state.history):
                st.note = f"{len(state.history) - len(history)} no-answer turn(s) of the history left out of the rewrite"
            try:
                got, _, meta = counted_call(self.rewriter.rewrite, history, state.query, words=lambda: 0)
                state.rewrite = got or state.query
            except Exception as exc:  # noqa: BLE001 - a failed rewrite must not fail the answer
                log.warning("context: rewrite failed (%s); using the query as it is", exc)
                state.rewrite = state.query
                st.note = f"rewrite failed ({type(exc).__name__}: {exc}); used the query as it is"
                state.trace.note(f"context: {st.note}")
                return
            if self.uses_model:
                words_in = sum(estimate_tokens(t.content) for t in history) + estimate_tokens(state.query)
                state.trace.count(self.name, 1, *model_tokens(meta, words_in, estimate_tokens(state.rewrite)))
