"""Stage ``decomposition``: the query-decomposition graph and the SRSA strategy.

The decomposer bundle's ``decompose(question, max_nodes)`` gives a QDG (repaired, never
trusted raw); without a bundle, or under a preset that skips decomposition, the question
is one ``terminal`` node. The history terms the heuristic rewrite appends (`` (Lumen
eviction)``) are context, not question: the question is decomposed without them and every
step carries them (:func:`~searchsmith.serving.rewrite.appended_terms`). Strategies after
SRSA map onto the graph's type: ``terminal`` -> ``direct``, ``split`` -> ``parallel``, ``chain`` ->
``decomposition.chain_strategy``: ``parallel`` by default (measured: planning's filtering lost
retrieval recall), ``planning`` (SRSA's), or ``auto`` (planning when the parents' answers are
short answers from a reader or an LLM, parallel when they are extractive sentences); a config or
request may force one (the router ablation of ``searchsmith eval pipeline``).
"""

from __future__ import annotations

import logging

from searchsmith.models.qdg import QDG, QDGNode, asks_nothing, repair, terminal
from searchsmith.models.roles import Decomposer
from searchsmith.serving.pipeline.config import DecompositionConfig, Preset
from searchsmith.serving.pipeline.state import (
    PipelineState,
    counted_call,
    estimate_tokens,
    model_tokens,
)
from searchsmith.serving.rewrite import appended_terms

log = logging.getLogger(__name__)

STRATEGY_OF_TYPE = {"terminal": "direct", "split": "parallel", "chain": "planning"}


class DecompositionStage:
    """Reads the standalone question; writes ``graph`` and ``strategy``."""

    name = "decomposition"
    reads = ("query", "rewrite")
    writes = ("graph", "strategy")

    def __init__(self, bundle: Decomposer | None, config: DecompositionConfig, gated: bool = False,
                 short_answers: bool = True) -> None:
        """``gated``: a decomposer is configured but its gate keeps it off (the trace says so).
        ``short_answers``: the pipeline answers steps with the generator's short answers (a reader
        or an LLM, ``generation.step_answers: generator``), which ``chain_strategy: auto`` plans with."""
        self.bundle = bundle
        self.config = config
        self.gated = gated
        self.short_answers = short_answers

    def strategy_of(self, graph_type: str) -> tuple[str, str | None]:
        """The strategy ``auto`` gives a graph of ``graph_type``, and a note when a chain is not planned."""
        if graph_type != "chain":
            return STRATEGY_OF_TYPE[graph_type], None
        chain = self.config.chain_strategy
        if chain == "auto":
            chain = "planning" if self.short_answers else "parallel"
            if chain == "parallel":
                return chain, ("chain searched in parallel, not planned: the parents' answers "
                               "would not be a reader's or an LLM's short answers (generation.step_answers, "
                               "decomposition.chain_strategy)")
        return chain, None

    def restate_empty_steps(self, graph: QDG, question: str) -> tuple[QDG, list[str]]:
        """The graph with each final step that asks nothing of its own ("of #1", "Which #2";
        :func:`~searchsmith.models.qdg.asks_nothing`) given the question's text (its edges
        kept: its parents are still searched first, and their sentences lead the answer), and
        the ids of those steps. Off with ``decomposition.restate_empty_steps: false``."""
        if not self.config.restate_empty_steps or len(graph.nodes) < 2:
            return graph, []
        parents = {d for n in graph.nodes for d in n.depends_on}
        empty = [n.id for n in graph.nodes if n.id not in parents and asks_nothing(n.text)]
        if not empty:
            return graph, []
        nodes = tuple(QDGNode(n.id, question, n.depends_on) if n.id in empty else n for n in graph.nodes)
        return QDG(graph.type, nodes), empty

    def run(self, state: PipelineState, preset: Preset, strategy: str | None = None) -> None:
        question = state.question()
        with state.trace.stage(self.name) as st:
            graph: QDG = terminal(question)
            if not preset.decompose:
                st.skipped, st.note = True, f"preset {state.preset_name!r} does not decompose"
            elif self.bundle is None:
                why = ("the decomposer is gated off (its held-out figure does not beat one node; see the "
                       "trace's notes)" if self.gated else "no decomposer bundle")
                st.skipped, st.note = True, f"{why}: the question is one terminal node"
            else:
                try:
                    # the heuristic rewrite's appended history terms are not part of the question
                    base, terms = appended_terms(state.query, question)
                    raw, _, meta = counted_call(self.bundle.decompose, base, max_nodes=self.config.max_nodes,
                                                words=lambda: 0)
                    graph = repair(raw, base, max_nodes=self.config.max_nodes)
                    graph, restated = self.restate_empty_steps(graph, base)
                    if restated:
                        st.note = (f"step(s) {', '.join(restated)} asked nothing of their own besides their #k: "
                                   f"searched as the question (decomposition.restate_empty_steps)")
                    if terms:
                        graph = QDG(graph.type, tuple(QDGNode(n.id, f"{n.text}{terms}", n.depends_on)
                                                      for n in graph.nodes))
                        note = (f"decomposed the question without the history terms the rewrite appended "
                                f"({terms.strip()}); every step carries them")
                        st.note = f"{st.note}; {note}" if st.note else note
                    state.trace.count(self.name, 1, *model_tokens(meta, estimate_tokens(base),
                                                                  sum(estimate_tokens(n.text) for n in graph.nodes)))
                except Exception as exc:  # noqa: BLE001 - degrade to one terminal node
                    log.warning("decomposition failed (%s); searching the question as it is", exc)
                    st.note = f"decomposition failed ({type(exc).__name__}: {exc}); used a terminal graph"
                    state.trace.note(f"decomposition: {st.note}")
            state.graph = graph
            forced = strategy or (self.config.strategy if self.config.strategy != "auto" else None)
            if forced:
                state.strategy = forced
            else:
                state.strategy, why = self.strategy_of(graph.type)
                if why:
                    state.trace.note(f"decomposition: {why}")
