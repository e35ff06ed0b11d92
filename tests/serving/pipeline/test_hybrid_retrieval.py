"""Hybrid search: the dense top-k and the lexical (BM25) top-k, scored cosine + w x BM25 share."""

from __future__ import annotations

import numpy as np
import pytest
from searchsmith.serving.chunker import Chunk
from searchsmith.serving.index import Hit
from searchsmith.serving.pipeline.config import RetrievalConfig
from searchsmith.serving.pipeline.retrieval import Retriever
from searchsmith.serving.pipeline.state import PipelineState


def _hit(row: int, score: float, text: str) -> Hit:
    return Hit(score, row, Chunk(chunk_id=f"c{row}", doc_id=f"d{row}", source="s", text=text, start=0,
                                 end=len(text), n_tokens=3))


class _Index:
    """Fixed dense and lexical answers; no vectors on disk (the retriever re-embeds)."""

    sources: list[str] = []

    def __init__(self, dense, lexical, has_lexical=True):
        self._dense, self._lexical, self.has_lexical = dense, lexical, has_lexical
        self.lexical_calls = []

    def search(self, q, sources, k):
        return [self._dense[:k]]

    def lexical(self, text, sources, k):
        self.lexical_calls.append((text, k))
        return self._lexical[:k]


class _Embedder:
    """Unit vectors whose dot product with the query's is the cosine named in the text."""

    dim = 2

    def encode(self, texts):
        out = []
        for t in texts:
            c = float(t.split("cos=")[1]) if "cos=" in t else 1.0
            out.append([c, float(np.sqrt(max(0.0, 1 - c * c)))])
        return np.asarray(out, dtype=np.float32)


def _retriever(index, **cfg) -> Retriever:
    return Retriever(index, _Embedder(), RetrievalConfig(**cfg))


def test_a_lexical_match_outside_the_dense_top_k_gets_in_with_the_summed_score() -> None:
    dense = [_hit(0, 0.50, "a"), _hit(1, 0.40, "b")]
    lexical = [_hit(2, 1.0, "Beacon 2.4 cos=0.45"), _hit(1, 0.5, "b")]  # shares of the BM25 ceiling
    index = _Index(dense, lexical)
    state = PipelineState(query="When was Beacon 2.4 released?")
    got = _retriever(index, retrieve_k=2, lexical_weight=0.2).search("When was Beacon 2.4 released?", ["s"], 2,
                                                                      "n1", state)
    # c2: 0.45 + 0.2 * 1 = 0.65; c0: 0.50; c1: 0.40 + 0.2 * 0.5 = 0.50 (a tie: row order)
    assert [p.chunk_id for p in got] == ["c2", "c0"]
    assert got[0].score == pytest.approx(0.65, abs=1e-6) and got[1].score == pytest.approx(0.50)
    assert index.lexical_calls == [("When was Beacon 2.4 released?", 2)]
    lexical = state.trace.get("retrieval.lexical")
    assert lexical.latency_ms > 0 and lexical.model_calls == 0  # a table lookup, not a model call


def test_weight_zero_is_dense_search_and_lexical_k_widens_the_candidates() -> None:
    dense = [_hit(0, 0.50, "a"), _hit(1, 0.40, "b")]
    lexical = [_hit(1, 1.0, "b"), _hit(3, 0.8, "x cos=0.1"), _hit(2, 0.2, "y cos=0.6")]
    index = _Index(dense, lexical)
    got = _retriever(index, lexical_weight=0.0).search("q", ["s"], 2, "n1", PipelineState(query="q"))
    assert [p.chunk_id for p in got] == ["c0", "c1"] and index.lexical_calls == []
    # lexical_k 3 brings c2 in: 0.6 + 0.2 * 0.2 = 0.64 > c1 0.40 + 0.2 = 0.60 > c0 0.50
    got = _retriever(index, lexical_weight=0.2, lexical_k=3).search("q", ["s"], 2, "n1", PipelineState(query="q"))
    assert [p.chunk_id for p in got] == ["c2", "c1"]


def test_a_chunk_the_embedder_finds_unrelated_gains_nothing_from_its_words() -> None:
    """"What is the boiling point of ethanol?" shares "boiling" with a tip on miso (cosine 0.14)."""
    dense = [_hit(0, 0.23, "focaccia"), _hit(1, 0.20, "the Danube")]
    lexical = [_hit(2, 0.9, "Boiling miso dulls its aroma cos=0.14")]
    r = _retriever(_Index(dense, lexical), lexical_weight=0.2, lexical_min_cosine=0.3)
    got = r.search("What is the boiling point of ethanol?", ["s"], 2, "n1", PipelineState(query="q"))
    assert [p.chunk_id for p in got] == ["c0", "c1"] and [p.score for p in got] == pytest.approx([0.23, 0.20])
    # with the floor at 0 its words count: 0.14 + 0.2 * 0.9 = 0.32
    r = _retriever(_Index(dense, lexical), lexical_weight=0.2, lexical_min_cosine=0.0)
    assert r.search("q", ["s"], 2, "n1", PipelineState(query="q"))[0].chunk_id == "c2"


def test_an_index_without_the_full_text_table_searches_dense_with_one_note() -> None:
    dense = [_hit(0, 0.50, "a"), _hit(1, 0.40, "b")]
    index = _Index(dense, [_hit(2, 0.9, "z cos=0.9")], has_lexical=False)
    state = PipelineState(query="q")
    r = _retriever(index)
    for _ in range(2):
        assert [p.chunk_id for p in r.search("q", ["s"], 2, "n1", state)] == ["c0", "c1"]
    notes = [n for n in state.trace.notes if "full-text table" in n]
    assert len(notes) == 1 and "lexical_weight: 0" in notes[0]
    # nothing lexical matched (a question of stop words): the dense hits as they were
    index = _Index(dense, [])
    assert [p.score for p in _retriever(index).search("Is it?", ["s"], 2, "n1", state)] == [0.50, 0.40]


def test_a_failing_lexical_search_leaves_the_dense_hits_with_a_note() -> None:
    import sqlite3

    class Broken(_Index):
        def lexical(self, text, sources, k):
            raise sqlite3.DatabaseError("database disk image is malformed")

    dense = [_hit(0, 0.50, "a"), _hit(1, 0.40, "b")]
    state = PipelineState(query="q")
    got = _retriever(Broken(dense, [])).search("q", ["s"], 2, "n1", state)
    assert [p.chunk_id for p in got] == ["c0", "c1"] and [p.score for p in got] == [0.50, 0.40]
    assert any("lexical search failed (DatabaseError: database disk image is malformed)" in n
               for n in state.trace.notes)


@pytest.mark.parametrize("bad, match", [({"lexical_weight": -0.1}, "lexical_weight"),
                                        ({"lexical_weight": float("nan")}, "lexical_weight"),
                                        ({"lexical_weight": True}, "lexical_weight"),
                                        ({"lexical_k": 0}, "lexical_k"), ({"lexical_k": 2.5}, "lexical_k"),
                                        ({"lexical_min_cosine": 1.5}, "lexical_min_cosine"),
                                        ({"lexical_min_cosine": "0.3"}, "lexical_min_cosine")])
def test_bad_hybrid_settings_are_refused_by_name(bad, match) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalConfig(**bad)


def test_the_pipeline_searches_both_ways_over_a_real_index(make_pipeline, loaded_index, embedder) -> None:
    """Over the small index: the fused order is cosine + w x the chunk's share of the BM25 ceiling."""
    w, floor = RetrievalConfig().lexical_weight, RetrievalConfig().lexical_min_cosine
    q = "Where is the Evictor class of the cache?"
    retr = make_pipeline(retrieval={"retrieve_k": 3}).stages[2].retriever
    got = retr.search(q, loaded_index.sources, 3, "n1", PipelineState(query=q))
    dense = loaded_index.search(embedder.encode([q]), k=3)[0]
    lexical = {h.row: h.score for h in loaded_index.lexical(q, k=3)}
    rows = sorted({h.row for h in dense} | set(lexical))
    chunks = loaded_index.store.get(rows)
    from searchsmith.serving.index import chunk_text

    cos = dict(zip(rows, (embedder.encode([chunk_text(chunks[r]) for r in rows]) @ embedder.encode([q])[0]).tolist()))
    want = {r: cos[r] + (w * lexical.get(r, 0.0) if cos[r] >= floor else 0.0) for r in rows}
    assert [p.row for p in got] == sorted(rows, key=lambda r: -want[r])[:3]
    assert [p.score for p in got] == pytest.approx([want[p.row] for p in got], abs=1e-4)
    assert got[0].text.startswith("The Lumen cache eviction policy")
