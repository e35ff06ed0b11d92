"""Stage ``decomposition``: the query-decomposition graph and the SRSA strategy.

The decomposer bundle's ``decompose(question, max_nodes)`` gives a QDG (repaired, never
trusted raw); without a bundle, or under a preset that skips decomposition, the question
is one ``terminal`` node. The history terms the heuristic rewrite appends (`` (Lumen
eviction)``) are context, not question: the question is decomposed without them and every
step carries them (:func:`~searchsmith.serving.rewrite.appended_terms`). Strategies after
SRSA map onto the graph's type: ``terminal`` -> ``direct``, ``split`` -> ``parallel``, ``chain`` -> ``planning``; a config
or request may force one (the router ablation of ``searchsmith eval pipeline``).
"""

from __future__ import annotations

import logging

from searchsmith.models.qdg import QDG, QDGNode, repair, terminal
from searchsmith.models.roles import Decomposer
from searchsmith.serving.pipeline.config import DecompositionConfig, Preset
from searchsmith.serving.pipeline.state import PipelineState, estimate_tokens
from searchsmith.serving.rewrite import appended_terms

log = logging.getLogger(__name__)

STRATEGY_OF_TYPE = {"terminal": "direct", "split": "parallel", "chain": "planning"}


class DecompositionStage:
    """Reads the standalone question; writes ``graph`` and ``strategy``."""

    name = "decomposition"
    reads = ("query", "rewrite")
    writes = ("graph", "strategy")

    def __init__(self, bundle: Decomposer | None, config: DecompositionConfig, gated: bool = False) -> None:
        """``gated``: a decomposer is configured but its gate keeps it off (the trace says so)."""
        self.bundle = bundle
        self.config = config
        self.gated = gated

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
                    raw = self.bundle.decompose(base, max_nodes=self.config.max_nodes)
                    graph = repair(raw, base, max_nodes=self.config.max_nodes)
                    if terms:
                        graph = QDG(graph.type, tuple(QDGNode(n.id, f"{n.text}{terms}", n.depends_on)
                                                      for n in graph.nodes))
                        st.note = (f"decomposed the question without the history terms the rewrite appended "
                                   f"({terms.strip()}); every step carries them")
                    state.trace.count(self.name, 1, estimate_tokens(base),
                                      sum(estimate_tokens(n.text) for n in graph.nodes))
                except Exception as exc:  # noqa: BLE001 - degrade to one terminal node
                    log.warning("decomposition failed (%s); searching the question as it is", exc)
                    st.note = f"decomposition failed ({type(exc).__name__}: {exc}); used a terminal graph"
                    state.trace.note(f"decomposition: {st.note}")
            state.graph = graph
            forced = strategy or (self.config.strategy if self.config.strategy != "auto" else None)
            state.strategy = forced or STRATEGY_OF_TYPE[graph.type]
