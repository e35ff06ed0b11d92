from __future__ import annotations

import pytest
from searchsmith.serving.chunker import Chunker, ChunkerConfig, split_sentences


def test_split_sentences_spans() -> None:
    text = "First one. Second one!  Third?\n\nNew paragraph without stop"
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == ["First one.", "Second one!", "Third?", "New paragraph without stop"]


def test_chunks_respect_size_overlap_and_offsets(embedder) -> None:
    # ~11 tokens a sentence: an overlap of 20 tokens carries one sentence into the next chunk
    chunker = Chunker(embedder.tokenizer, ChunkerConfig(chunk_tokens=40, overlap_ratio=0.5))
    sentences = [f"Sentence {i} talks about topic {i} in a few words." for i in range(30)]
    text = " ".join(sentences)
    chunks = chunker.chunk({"id": "d1", "source": "s", "text": text, "title": "T"})
    assert len(chunks) > 3
    for c in chunks:
        assert c.text == text[c.start:c.end]
        assert c.n_tokens <= 40
        assert c.doc_id == "d1" and c.source == "s" and c.title == "T"
    # consecutive chunks overlap (the next starts before the previous ends) and cover the text
    for a, b in zip(chunks, chunks[1:]):
        assert b.start < a.end and b.start > a.start
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert [c.chunk_id for c in chunks[:2]] == ["d1#0", "d1#1"]


def test_overlong_sentence_is_windowed(embedder) -> None:
    chunker = Chunker(embedder.tokenizer, ChunkerConfig(chunk_tokens=20, overlap_ratio=0.25))
    text = " ".join(f"w{i}" for i in range(200))  # one "sentence", ~400 tokens
    chunks = chunker.chunk({"id": "d", "source": "s", "text": text})
    assert len(chunks) >= 10
    assert all(c.n_tokens <= 20 for c in chunks)
    assert chunks[-1].end == len(text)


def test_empty_text_gives_no_chunks(embedder) -> None:
    assert Chunker(embedder.tokenizer).chunk({"id": "d", "source": "s", "text": "   "}) == []


@pytest.mark.parametrize("kwargs, msg", [({"chunk_tokens": 2}, "chunk_tokens"), ({"overlap_ratio": 0.95}, "overlap_ratio")])
def test_config_rejects_bad_values(kwargs, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        ChunkerConfig(**kwargs)
