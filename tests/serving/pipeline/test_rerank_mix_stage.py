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
