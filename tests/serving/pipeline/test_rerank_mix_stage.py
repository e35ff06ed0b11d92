"""The pipeline's rerank stage with a bundle that records a calibrated ``retrieval_mix``."""

from __future__ import annotations

from searchsmith.models.rerank_mix import RetrievalMix
from searchsmith.serving.pipeline.state import Passage, PipelineState


def _p(i: int, text: str, score: float) -> Passage:
    return Passage(chunk_id=f"c{i}", doc_id=f"d{i}", source="s", text=text, score=score)


def test_the_mix_weighs_the_reranker_against_the_retrieval_cosine(make_pipeline, fakes):
    reranker = fakes["reranker"]("dough")  # prefers the passage with "dough"
    retr = make_pipeline(bundles={"reranker": reranker}).stages[2].retriever
    # c0: retrieval's clear favourite; c1: the reranker's; c2: last for both
    ps = [_p(0, "planets", 0.9), _p(1, "dough", 0.5), _p(2, "moons", 0.45)]
    assert [p.chunk_id for p in retr.rerank("q", ps, PipelineState(query="q"))] == ["c1", "c0", "c2"]
    reranker.retrieval_mix = RetrievalMix(1.0)  # the reranker alone: the same
    assert [p.chunk_id for p in retr.rerank("q", ps, PipelineState(query="q"))] == ["c1", "c0", "c2"]
    reranker.retrieval_mix = RetrievalMix(0.0)  # share 0: the retrieval order
    assert [p.chunk_id for p in retr.rerank("q", ps, PipelineState(query="q"))] == ["c0", "c1", "c2"]
    reranker.retrieval_mix = RetrievalMix(0.25)  # mostly the cosine, which puts c0 far ahead
    out = retr.rerank("q", ps, PipelineState(query="q"))
    assert [p.chunk_id for p in out] == ["c0", "c1", "c2"]
    assert out[0].score > out[1].score > out[2].score
    reranker.retrieval_mix = RetrievalMix(0.75)
    assert [p.chunk_id for p in retr.rerank("q", ps, PipelineState(query="q"))] == ["c1", "c0", "c2"]


def test_a_share_measured_at_another_lexical_weight_is_noted_once(make_pipeline, fakes):
    reranker = fakes["reranker"]("dough")
    retr = make_pipeline(bundles={"reranker": reranker}).stages[2].retriever
    ps = [_p(0, "planets", 0.9), _p(1, "dough", 0.5), _p(2, "moons", 0.45)]
    weight = retr.config.lexical_weight
    reranker.retrieval_mix = RetrievalMix(0.5, lexical_weight=weight)  # measured as this pipeline scores
    state = PipelineState(query="q")
    retr.rerank("q", ps, state)
    assert not [n for n in state.trace.notes if n.startswith("rerank:")]
    reranker.retrieval_mix = RetrievalMix(0.5, lexical_weight=weight + 0.2)
    for _ in range(2):  # two nodes, one note
        retr.rerank("q", ps, state)
    notes = [n for n in state.trace.notes if n.startswith("rerank:")]
    assert len(notes) == 1 and f"cosine + {weight + 0.2:g} x BM25 share" in notes[0]
    assert f"retrieval.lexical_weight {weight:g}" in notes[0]
    reranker.retrieval_mix = RetrievalMix(1.0, lexical_weight=weight + 0.2)  # the reranker alone: no mix
    state = PipelineState(query="q")
    retr.rerank("q", ps, state)
    assert not state.trace.notes
