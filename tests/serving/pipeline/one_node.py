"""A pipeline state as generation reads it, for the stage tests that skip retrieval."""

from __future__ import annotations

from collections.abc import Sequence

from searchsmith.serving.pipeline.state import NodeResult, Passage, PipelineState


def one_node_state(query: str, passages: Sequence[Passage], answer: str = "") -> PipelineState:
    """``query`` asked as one node over ``passages`` (the state's and the node's own copies),
    with ``answer`` already written (for the stages after generation)."""
    st = PipelineState(query=query, rewrite=query)
    st.passages = list(passages)
    st.nodes = [NodeResult("1", query, passages=list(passages))]
    st.answer = answer
    return st


def extractively_answered(embedder, query: str, passages: Sequence[Passage], extractive=None,
                          **generation) -> PipelineState:
    """The state after the extractive generation stage (``extractive``: its ExtractiveConfig;
    ``generation``: GenerationConfig fields) answered ``query`` as one node over ``passages``."""
    from searchsmith.serving.pipeline.config import ExtractiveConfig, GenerationConfig, Preset
    from searchsmith.serving.pipeline.generation import ExtractiveGenerator, GenerationStage

    stage = GenerationStage(ExtractiveGenerator(embedder, extractive or ExtractiveConfig()), None,
                            GenerationConfig(**generation))
    st = one_node_state(query, list(passages))
    stage.run(st, Preset())
    return st
