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


# Held-out figures of models that beat their baselines (serving/pipeline/gates.py): the
# fakes stand for models the pipeline uses; a test about the gates sets its own figures.
PASSING = {
    "decompose": {"rewrite_retrieval_ndcg@10": 0.9, "baselines/rewrite_retrieval_ndcg@10_heuristic": 0.7,
                  **{f"rewrite_retrieval_ndcg@10_vs_heuristic_{k}": v for k, v in
                     {"diff": 0.2, "lo": 0.1, "hi": 0.3, "p": 0.001, "n": 100, "direction": 1}.items()},
                  "decompose_node_f1": 0.6, "baselines/decompose_node_f1_question_as_terminal": 0.3,
                  **{f"decompose_node_f1_vs_terminal_{k}": v for k, v in
                     {"diff": 0.3, "lo": 0.2, "hi": 0.4, "p": 0.001, "n": 100, "direction": 1}.items()}},
    "rerank": {"ndcg@10": 0.9, "baselines/bi_encoder_ndcg@10": 0.8, "baselines/bm25_ndcg@10": 0.7,
               **{f"ndcg@10_vs_{base}_{k}": v for base in ("bi_encoder", "bm25") for k, v in
                  {"diff": 0.1, "lo": 0.05, "hi": 0.15, "p": 0.001, "n": 100, "direction": 1}.items()}},
    "cite": {"attribution/roc_auc": 0.95, "baselines/cosine_attribution_roc_auc": 0.8,
             "attribution/f1": 0.9, "baselines/cosine_attribution_f1": 0.7,
             **{f"attribution/{m}_vs_cosine_{k}": v for m in ("roc_auc", "f1") for k, v in
                {"diff": 0.15, "lo": 0.1, "hi": 0.2, "p": 0.001, "n": 100, "direction": 1}.items()}},
    "images": {"ood/placement_accuracy": 0.8, "baselines/ood_cosine_placement_accuracy": 0.6,
               "ood/vision_placement_net": 0.5, "baselines/ood_no_placement_net": 0.0,
               **{f"ood/{m}_{k}": v for m in ("placement_accuracy_vs_cosine", "vision_placement_net_vs_none")
                  for k, v in {"diff": 0.2, "lo": 0.1, "hi": 0.3, "p": 0.001, "n": 40, "direction": 1}.items()}},
}


def passing_manifest(task):
    return {"task": task, "heldout_metrics": dict(PASSING[task])}


class FakeDecomposer:
    """A ``decompose`` bundle: fixed graph, rewrite by appending a topic word."""

    task = "decompose"

    def __init__(self, graph=None, rewrite_to=None, fail=False):
        self.graph, self.rewrite_to, self.fail = graph, rewrite_to, fail
        self.calls = []
        self.manifest = passing_manifest("decompose")

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
        self.manifest = passing_manifest("rerank")

    def score(self, query, passages):
        if self.fail:
            raise RuntimeError("reranker exploded")
        return np.array([float(self.word in p) for p in passages], dtype=np.float32)


@pytest.fixture
def fakes():
    return {"decomposer": FakeDecomposer, "reranker": FakeReranker, "passing": PASSING}
