from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedder():
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    return Embedder(EmbedderConfig(max_batch_tokens=2048))


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, embedder, write_corpus):
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("idx")
    corpus = write_corpus(d / "corpus.jsonl")
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(read_corpus(corpus), d / "index", cfg, embedder=embedder)
    return d / "index"


@pytest.fixture(scope="session")
def minilm_embed_bundle(tmp_path_factory):
    """The default embedder (all-MiniLM-L6-v2) exported as an fp32 ``embed`` bundle, once."""
    from searchsmith.models.export import ExportOptions, export_embedder

    out = tmp_path_factory.mktemp("embed-bundle") / "embedder"
    export_embedder(out, "default", ExportOptions())
    return out


# The small corpus's sources under free-text labels.
LABELS = {"cooking": "Cooking & Baking", "astronomy": "Astronomie · Espace", "code": "Code / Repos"}


@pytest.fixture(scope="session")
def labelled_index(tmp_path_factory, embedder, write_corpus):
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("labelled")
    records = read_corpus(write_corpus(d / "corpus.jsonl"))
    for r in records:
        r["source"] = LABELS[r["source"]]
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(records, d / "index", cfg, embedder=embedder)
    return d / "index"
