"""Stage ``context``: turn a follow-up into a standalone question (KIMAs context manager).

With a decomposer bundle its ``rewrite(history, query)`` task is used; without one,
:class:`searchsmith.serving.rewrite.HeuristicRewriter` (query + salient history terms).
A single-turn question is kept as it is (no model call), and so is any question under a
preset that switches the rewrite off (``turbo``). A failing rewrite degrades to the query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.pipeline.state import PipelineState, estimate_tokens
from searchsmith.serving.rewrite import HeuristicRewriter, Rewriter, Turn

log = logging.getLogger(__name__)


class BundleRewriter:
    """A ``decompose`` bundle seen as a :class:`~searchsmith.serving.rewrite.Rewriter`."""

    def __init__(self, bundle: Any) -> None:
        self.bundle = bundle

    def rewrite(self, history: Sequence[Turn], query: str) -> str:
        turns = [{"role": t.role, "content": t.content} for t in history]
        out = self.bundle.rewrite(turns, query)
        return out.strip() if isinstance(out, str) and out.strip() else query


def measured_gate(bundle: Any, metric: str, baseline: str, what: str, instead: str, setting: str) -> str | None:
    """Why a bundle's ``what`` should not be used, or None when it may be.

    The export records the run's held-out figures (``manifest["heldout_metrics"]``). A model
    whose ``metric`` does not beat its trivial ``baseline`` of the same run does no better
    than the fallback the pipeline has anyway, so that fallback (``instead``) is used: a
    rewriter that ties with copying the query (one that has learnt to keep it) would only
    displace the heuristic rewrite, which does resolve references. A bundle without the
    figures passes (nothing was measured against it).
    """
    metrics = (getattr(bundle, "manifest", None) or {}).get("heldout_metrics") or {}
    got, base = metrics.get(metric), metrics.get(baseline)
    if isinstance(got, (int, float)) and isinstance(base, (int, float)) and got <= base:
        relation = "is below" if got < base else "only ties with"
        return (f"the decomposer's held-out {what} {got:.3f} {relation} {instead[0]} ({base:.3f}); "
                f"{instead[1]} is used (bundles.{setting}: false to use the model anyway)")
    return None


def rewrite_gate(bundle: Any) -> str | None:
    """The rewrite gate: rewrite token F1 against copying the query (the heuristic rewrite is
    used instead)."""
    return measured_gate(bundle, "rewrite_f1", "baselines/rewrite_f1_copy_query", "rewrite F1",
                         ("copying the query", "the heuristic rewrite"), "gate_rewrite")


def decompose_gate(bundle: Any) -> str | None:
    """The decomposition gate: node-text token F1 against answering the question as one
    terminal node (its graphs would replace a good query by worse sub-questions; the
    question is retrieved as it is instead)."""
    return measured_gate(bundle, "decompose_node_f1", "baselines/decompose_node_f1_question_as_terminal",
                         "node-text F1", ("keeping the question as one node", "the question as one node"),
                         "gate_decompose")


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
