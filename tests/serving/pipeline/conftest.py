from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def loaded_index(small_index, embedder):
    from searchsmith.serving.index import Index

    return Index.load(small_index, embedder=embedder)


@pytest.fixture
def make_pipeline(loaded_index, embedder):
    """``make_pipeline(bundles=None, generator=None, **config)`` over the 3-source small index."""
    from searchsmith.models.config import from_dict
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    def make(bundles=None, generator=None, **cfg):
        return Pipeline(from_dict(PipelineConfig, cfg), loaded_index, embedder, bundles, generator)

    return make


class FakeDecomposer:
    """A ``decompose`` bundle: fixed graph, rewrite by appending a topic word."""

    task = "decompose"

    def __init__(self, graph=None, rewrite_to=None, fail=False):
        self.graph, self.rewrite_to, self.fail = graph, rewrite_to, fail
        self.calls = []

    def decompose(self, question, max_nodes=None):
        self.calls.append(("decompose", question))
        if self.fail:
            raise RuntimeError("decomposer exploded")
        from searchsmith.models.qdg import QDG

        return QDG.from_json(self.graph)

    def rewrite(self, history, query):
        self.calls.append(("rewrite", query))
        if self.fail:
            raise RuntimeError("rewriter exploded")
        return self.rewrite_to or query


class FakeReranker:
    """A ``rerank`` bundle preferring passages that contain ``word``."""

    task = "rerank"

    def __init__(self, word, fail=False):
        self.word, self.fail = word, fail

    def score(self, query, passages):
        if self.fail:
            raise RuntimeError("reranker exploded")
        return np.array([float(self.word in p) for p in passages], dtype=np.float32)


@pytest.fixture
def fakes():
    return {"decomposer": FakeDecomposer, "reranker": FakeReranker}
