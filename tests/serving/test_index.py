from __future__ import annotations

import json

import numpy as np
import pytest
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.serving.corpus import read_corpus
from searchsmith.serving.index import Index, IndexConfig, add_documents, build_index, read_manifest


def test_manifest_and_files(small_index) -> None:
    m = read_manifest(small_index)
    assert m["documents"] == 18 and m["chunks"] == 18
    assert set(m["sources"]) == {"cooking", "astronomy", "code"}
    assert m["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2" and m["embedding_dim"] == 384
    assert all(len(d) == 64 for d in m["files"].values())
    assert {"chunks.sqlite", "centroids.npy", "faiss/code.faiss"} <= set(m["files"])
    # chunk_tokens clamped to the model window (256 - 2)
    assert m["chunker"]["chunk_tokens"] == 254
    assert m["sources"]["code"]["centroids"] == 2


def test_search_finds_the_right_chunk(small_index, embedder) -> None:
    idx = Index.load(small_index, embedder=embedder)
    q = embedder.encode(["where is the eviction code of the Lumen cache?"])
    hits = idx.search(q, k=3)[0]
    assert hits[0].chunk.doc_id == "code-0"
    assert hits[0].score >= hits[1].score >= hits[2].score
    only = idx.search(q, sources=["cooking"], k=2)[0]
    assert {h.chunk.source for h in only} == {"cooking"}


def test_kernel_backend_matches_faiss(small_index, embedder) -> None:
    q = embedder.encode(["planets and moons", "bread dough"])
    a = Index.load(small_index, search_backend="faiss").search(q, k=5)
    b = Index.load(small_index, search_backend="kernel").search(q, k=5)
    assert [[h.row for h in hs] for hs in a] == [[h.row for h in hs] for hs in b]
    np.testing.assert_allclose([h.score for h in a[0]], [h.score for h in b[0]], atol=1e-5)


def test_search_rejects_bad_input(small_index) -> None:
    idx = Index.load(small_index)
    with pytest.raises(ValidationError, match=r"expected \(B, 384\)"):
        idx.search(np.zeros((1, 12), dtype=np.float32))
    with pytest.raises(ValidationError, match="unknown source"):
        idx.search(np.zeros((1, 384), dtype=np.float32), sources=["nope"])
    with pytest.raises(ValidationError, match="no source"):
        idx.search(np.zeros((1, 384), dtype=np.float32), sources=[])


def test_add_documents_without_rebuild(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    new = [{"id": "geo-1", "source": "geography", "text": "The Danube flows through ten countries into the Black Sea."}]
    m = add_documents(d, new, embedder=embedder)
    assert m["documents"] == 19 and "geography" in m["sources"]
    idx = Index.load(d, embedder=embedder)
    assert idx.search(embedder.encode(["Which river flows into the Black Sea?"]), k=1)[0][0].chunk.doc_id == "geo-1"
    with pytest.raises(ValidationError, match="already in the index"):
        add_documents(d, new, embedder=embedder)


def test_corrupt_and_missing_files(tmp_path, small_index) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    (d / "faiss" / "code.faiss").write_bytes(b"garbage")
    with pytest.raises(BundleError, match="faiss/code.faiss is corrupt"):
        Index.load(d)
    (d / "faiss" / "code.faiss").unlink()
    with pytest.raises(BundleError, match="faiss/code.faiss is missing"):
        Index.load(d)
    (d / "manifest.json").write_text("{broken")
    with pytest.raises(BundleError, match="manifest.json is corrupt"):
        Index.load(d)
    with pytest.raises(BundleError, match="does not exist"):
        Index.load(tmp_path / "nowhere")


def test_mismatched_model_or_dimension_is_refused(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    m = json.loads((d / "manifest.json").read_text())
    m["embedding_model"], m["embedding_dim"] = "other/model", 768
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="was built with other/model \\(dim 768\\)"):
        Index.load(d, embedder=embedder)


def test_failed_build_leaves_old_index(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    before = (d / "manifest.json").read_text()
    with pytest.raises(ValidationError):
        build_index([], d, IndexConfig(), embedder=embedder)
    assert (d / "manifest.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".index.tmp")]


def test_empty_corpus_file(tmp_path) -> None:
    (tmp_path / "c.jsonl").write_text("\n")
    with pytest.raises(ValidationError, match="empty"):
        read_corpus(tmp_path / "c.jsonl")


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_ann_index_types(tmp_path, embedder, write_corpus, kind) -> None:
    from searchsmith.serving.corpus import read_corpus

    recs = read_corpus(write_corpus(tmp_path / "c.jsonl"))
    m = build_index(recs, tmp_path / "ix", IndexConfig(index_type=kind), embedder=embedder)
    assert {v["index_type"] for v in m["sources"].values()} == {kind}
    idx = Index.load(tmp_path / "ix", embedder=embedder)
    assert idx.search(embedder.encode(["Saturn rings ice"]), k=1)[0][0].chunk.doc_id == "astronomy-4"


def test_auto_switches_to_ivf_above_the_threshold(tmp_path, embedder, write_corpus) -> None:
    from searchsmith.serving.corpus import read_corpus

    recs = read_corpus(write_corpus(tmp_path / "c.jsonl"))
    m = build_index(recs, tmp_path / "ix", IndexConfig(ann_min_vectors=5), embedder=embedder)
    assert {v["index_type"] for v in m["sources"].values()} == {"ivf"}
