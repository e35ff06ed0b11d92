"""The trace's tokens are the models' own: a local model's call is counted in the tokens it ran
(its meta's ``tokens``, ``return_meta=True``: each input after truncation, special tokens
included) and a generation's in the tokens it generated (``tokens_out``); only a model that
reports none is counted in whitespace words. Before, every local model was counted in
whitespace words (the README's "154 tokens in" of one rerank call was 260 of its tokens)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from searchsmith.serving.pipeline.state import counted_call, model_tokens

QUESTION = "Which port does Lumen listen on?"


class MetaReranker:
    """A reranker that reports its tokens, as a bundle does."""

    task = "rerank"

    def __init__(self, tokens_per_pair: int) -> None:
        from conftest import passing_manifest

        self.per_pair, self.manifest, self.seen = tokens_per_pair, passing_manifest("rerank"), 0

    def score(self, query, passages, return_meta=False):
        scores = np.array([float("port" in p) for p in passages], dtype=np.float32)
        self.seen += len(passages)
        meta = {"truncated": [], "max_length": 64, "tokens": self.per_pair * len(passages)}
        return (scores, meta) if return_meta else scores


def test_counted_call_takes_the_model_s_tokens_and_words_only_without_them() -> None:
    reported = MetaReranker(7)
    got, tokens, meta = counted_call(reported.score, "q", ["a b", "c"], words=lambda: pytest.fail("not asked"))
    assert list(got) == [0.0, 0.0] and tokens == 14 and meta["tokens"] == 14

    class Plain:  # a user's or a test's double: no return_meta
        def score(self, query, passages):
            return np.zeros(len(passages))

    got, tokens, meta = counted_call(Plain().score, "q", ["a b", "c"], words=lambda: 5)
    assert got.shape == (2,) and tokens == 5 and meta == {}

    class NoCount:  # meta without tokens, or a count that is no count
        def score(self, query, passages, return_meta=False):
            return (np.zeros(len(passages)), {"tokens": True}) if return_meta else np.zeros(len(passages))

    assert counted_call(NoCount().score, "q", ["a"], words=lambda: 3)[1] == 3
    assert model_tokens({"tokens": 12, "tokens_out": 4}, 1, 2) == (12, 4)
    assert model_tokens({"tokens": 12}, 1, 2) == (12, 2) and model_tokens({}, 1, 2) == (1, 2)


def test_the_rerank_stage_counts_the_reranker_s_tokens(make_pipeline) -> None:
    rr = MetaReranker(11)
    ans = make_pipeline(bundles={"reranker": rr}).ask(QUESTION)
    stage = ans["trace"]["stages"]["rerank"]
    assert rr.seen >= 2 and stage["model_calls"] >= 1
    assert stage["tokens_in"] == 11 * rr.seen  # not the passages' whitespace words
    assert ans["trace"]["tokens_in"] >= stage["tokens_in"]


def test_a_real_bundle_s_tokens_reach_the_trace(make_pipeline) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
    from export_fixtures import bundle
    from searchsmith.models.runtime import load_bundle

    rr = load_bundle(bundle("rerank"), device="cpu")
    calls = []
    score = rr.score

    def spy(query, passages, return_meta=False):
        got = score(query, passages, return_meta=return_meta)
        calls.append((query, list(passages)))
        return got

    rr.score = spy
    rr.manifest = {**rr.manifest, "heldout_metrics": MetaReranker(1).manifest["heldout_metrics"]}
    ans = make_pipeline(bundles={"reranker": rr}).ask(QUESTION)
    want = sum(min(len(rr.tokenizer(q, p)["input_ids"]), rr.max_length) for q, ps in calls for p in ps)
    words = sum(len(q.split()) + len(p.split()) for q, ps in calls for p in ps)
    assert calls and ans["trace"]["stages"]["rerank"]["tokens_in"] == want != words
