"""In-process HTTP tests of the model endpoints: rerank, decompose, cite, images, search, feedback,
with fake bundles implementing the runtime contract (models.runtime), and the limits."""

from __future__ import annotations

import base64
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from blocking_runner import BlockingRunner
from fastapi.testclient import TestClient
from openai_error import error_message
from searchsmith.serving.batcher import BatcherConfig
from searchsmith.serving.http import create_app
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.profiling.server import LoopbackServer
from sse_parse import sse_events

# ---- fake bundles (the runtime API of contract.md, no model) --------------------------------


class FakeReranker:
    """Logit = occurrences of the query's first word in the passage (ties: shorter first)."""

    task, max_length, tokenizer, manifest = "rerank", 64, None, {"max_length": 64}

    def __init__(self) -> None:
        self.batches: list[int] = []

    def score_pairs(self, pairs):
        self.batches.append(len(pairs))
        return np.array([p.lower().split().count(q.lower().split()[0]) - len(p) * 1e-3 for q, p in pairs],
                        dtype=np.float32)

    def score(self, query, passages):
        return self.score_pairs([(query, p) for p in passages])


class FakeDecomposer:
    task = "decompose"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def rewrite(self, history, query):
        self.calls.append(("rewrite", query))
        return f"{query} about {history[-1]['content'].split()[-1]}"

    def decompose(self, question, max_nodes=None):
        from searchsmith.models.qdg import QDG

        self.calls.append(("decompose", question, max_nodes))
        return QDG.from_json({"type": "split", "nodes": [{"id": "1", "text": f"first part of {question}"},
                                                         {"id": "2", "text": "second part"}]})


class FakeCiter:
    """Entities: capitalised words; P(supports) 0.9 when the document shares a capitalised word."""

    task, support_threshold = "cite", 0.5

    def entities(self, sentences):
        out = []
        for s in sentences:
            spans, pos = [], 0
            for w in s.split():
                at = s.index(w, pos)
                pos = at + len(w)
                word = w.strip(".,")
                if word[:1].isupper():
                    spans.append((at, at + len(word), "ENT"))
            out.append(spans)
        return out

    def attribute(self, pairs):
        def caps(t):
            return {w.strip(".,") for w in t.split() if w[:1].isupper()}

        return np.array([0.9 if caps(a) & caps(b) else 0.1 for a, b in pairs], dtype=np.float32)


KEYWORDS = ("cat", "dog", "car")
COLOURS = {(255, 0, 0): "cat", (0, 255, 0): "dog", (0, 0, 255): "car"}


def _onehot(word):
    v = np.zeros(3, dtype=np.float32)
    if word in KEYWORDS:
        v[KEYWORDS.index(word)] = 1.0
    return v


class FakeImages:
    """Texts: one-hot of the keyword they mention; images: one-hot of their colour's keyword."""

    task = "images"

    def encode_text(self, texts):
        return np.stack([_onehot(next((k for k in KEYWORDS if k in t.lower()), "")) for t in texts])

    def encode_images(self, images):
        return np.stack([_onehot(COLOURS.get(im.convert("RGB").getpixel((0, 0)), "")) for im in images])


class FakeEmbedBundle:
    task, tokenizer, manifest, max_length = "embed", None, {"embedding_dim": 3, "max_length": 8}, 8

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode(self, texts):
        self.batches.append(len(texts))
        vecs = np.stack([_onehot(next((k for k in KEYWORDS if k in t), "")) + 0.1 for t in texts])
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


class FakeRouter:
    def route(self, query, history=None, mode=None, top_k=None):
        class Result:
            def to_dict(self):
                return {"mode": mode or "auto", "sources": [{"source": "a", "score": 1.0}][: top_k or 1]}

        return Result()

    def close(self):
        pass


class FakeStore:
    def chunks_of_doc(self, doc_id):
        return []  # no document has images: /v1/images/file answers 404


class FakeIndex:
    store = FakeStore()


class FakePipeline:
    """``ask`` echoes the query; ``feedback`` knows the ids it answered (as the LinUCB router)."""

    def __init__(self) -> None:
        self.answered: set[str] = set()
        self.index = FakeIndex()

    def ask(self, query, history=None, *, query_id=None, preset=None, strategy=None, routing_mode=None, on_delta=None):
        from searchsmith.models.errors import ValidationError
        from searchsmith.serving.rewrite import parse_history

        parse_history(history)
        if preset not in (None, "large"):
            raise ValidationError(f"preset: unknown preset {preset!r}")
        qid = query_id or "generated"
        self.answered.add(qid)
        return {"query_id": qid, "query": query, "answer": f"{query} [1]", "answer_text": query,
                "references": [], "sentences": [], "timeline": [], "images": [], "trace": {}}

    def feedback(self, query_id, quality):
        from searchsmith.models.errors import ValidationError

        if query_id not in self.answered:
            raise ValidationError(f"query_id: {query_id!r} is unknown")
        self.answered.discard(query_id)
        return {"query_id": query_id, "reward": quality}

    def close(self):
        pass


def png(colour, size=(40, 40)) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def models(**extra):
    return {"reranker": FakeReranker(), "decomposer": FakeDecomposer(), "citation": FakeCiter(),
            "images": FakeImages(), **extra}


@pytest.fixture(scope="module")
def client():
    cfg = ServerLimits(max_documents_per_request=5, max_texts_per_request=4, max_input_chars=200,
                       max_body_bytes=20000, max_images_per_request=3, max_image_bytes=3000,
                       max_image_pixels=100 * 100, max_pairs_per_request=12,
                       rerank_batcher=BatcherConfig(max_batch_size=16, max_wait_ms=20.0))
    from searchsmith.serving.runner import BundleEmbedder

    with TestClient(create_app(cfg, embedder=BundleEmbedder(FakeEmbedBundle(), "fake-embed"), **models())) as c:
        yield c


# ---- /v1/rerank -----------------------------------------------------------------------------------


def test_rerank_sorted_with_scores_and_documents(client) -> None:
    docs = ["stars and planets", {"text": "bread bread and more bread"}, "bread rolls"]
    body = client.post("/v1/rerank", json={"query": "bread please", "documents": docs,
                                           "return_documents": True}).json()
    assert [r["index"] for r in body["results"]] == [1, 2, 0]
    assert body["results"][0]["document"] == {"text": "bread bread and more bread"}
    logit = 3 - len("bread bread and more bread") * 1e-3
    assert body["results"][0]["relevance_score"] == pytest.approx(1 / (1 + np.exp(-logit)), rel=1e-5)
    assert body["usage"]["total_tokens"] == sum(len("bread please".split()) + len(
        (d if isinstance(d, str) else d["text"]).split()) + 3 for d in docs)
    raw = client.post("/v1/rerank", json={"query": "bread", "documents": docs, "top_n": 1,
                                          "raw_scores": True}).json()["results"]
    assert len(raw) == 1 and "document" not in raw[0]
    assert raw[0]["relevance_score"] == pytest.approx(logit, rel=1e-5)


def test_rerank_pairs_are_batched_across_requests_and_matched(client) -> None:
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    reranker = client.app.state.serving.reranker.bundle
    before = len(reranker.batches)

    def call(w):
        docs = ["nothing here", f"{w} {w}", f"{w}"]
        r = client.post("/v1/rerank", json={"query": w, "documents": docs})
        assert r.status_code == 200, r.text
        return [x["index"] for x in r.json()["results"]]

    with ThreadPoolExecutor(8) as pool:
        orders = list(pool.map(call, words))
    assert orders == [[1, 2, 0]] * len(words)  # each request got its own scores back
    assert max(reranker.batches[before:]) > 3  # pairs of several requests shared a batch


def test_rerank_before_any_model_is_loaded_is_503() -> None:
    with TestClient(create_app(ServerLimits())) as c:
        assert "not loaded yet" in error_message(c.post("/v1/rerank", json={"query": "q", "documents": ["d"]}),
                                                 503, "not_ready")


def test_rerank_on_a_ready_server_without_a_reranker_is_404() -> None:
    """503 told clients to retry (the OpenAI SDK does, twice) what no retry can fix."""
    with TestClient(create_app(ServerLimits(), decomposer=FakeDecomposer())) as c:
        assert c.get("/ready").status_code == 200
        resp = c.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
        assert "bundles.reranker" in error_message(resp, 404, "not_served")
        assert "retry-after" not in resp.headers
        c.app.state.serving.shutting_down = True
        assert "shutting down" in error_message(c.post("/v1/rerank", json={"query": "q", "documents": ["d"]}), 503,
                                                "not_ready")


def test_rerank_empty_documents_is_400(client) -> None:
    assert "documents" in error_message(client.post("/v1/rerank", json={"query": "q", "documents": []}), 400,
                                        "empty_input")


def test_rerank_blank_query_is_400(client) -> None:
    assert "query" in error_message(client.post("/v1/rerank", json={"query": " ", "documents": ["d"]}), 400,
                                    "empty_input")


def test_rerank_too_many_documents_is_413(client) -> None:
    msg = error_message(client.post("/v1/rerank", json={"query": "q", "documents": ["d"] * 6}), 413, "too_large")
    assert "6 documents" in msg and "max_documents_per_request" in msg


def test_rerank_document_of_wrong_type_is_422(client) -> None:
    assert "documents" in error_message(client.post("/v1/rerank", json={"query": "q", "documents": [3]}), 422,
                                        "validation_error")


def test_rerank_top_n_zero_is_422(client) -> None:
    assert "top_n" in error_message(client.post("/v1/rerank", json={"query": "q", "documents": ["d"], "top_n": 0}),
                                    422, "validation_error")


def test_rerank_unknown_model_is_422(client) -> None:
    assert "gpt" in error_message(client.post("/v1/rerank", json={"query": "q", "documents": ["d"], "model": "gpt"}),
                                  422, "validation_error")


def test_rerank_long_document_is_cut_or_413() -> None:
    reranker = FakeReranker()
    with TestClient(create_app(ServerLimits(max_input_chars=20), reranker=reranker)) as c:
        long = "bread " * 10  # 60 characters, cut to 20 (3 "bread"s + "br")
        r = c.post("/v1/rerank", json={"query": "bread", "documents": [long], "raw_scores": True}).json()
        assert r["results"][0]["relevance_score"] == pytest.approx(3 - 20e-3, rel=1e-5)
    with TestClient(create_app(ServerLimits(max_input_chars=20, truncate=False), reranker=reranker)) as c:
        msg = error_message(c.post("/v1/rerank", json={"query": "q", "documents": ["x" * 21]}), 413, "too_large")
        assert "documents[0]" in msg and "max_input_chars" in msg
    with TestClient(create_app(ServerLimits(truncate=False), reranker=reranker)) as c:
        msg = error_message(c.post("/v1/rerank", json={"query": "q", "documents": ["w " * 70]}), 413, "too_large")
        assert "74 tokens" in msg and "max_length" in msg


def _blocking() -> BlockingRunner:
    """A rerank runner that blocks until released, then scores every pair 0."""
    return BlockingRunner(lambda batch: np.zeros(len(batch), dtype=np.float32))  # (B,)


def test_rerank_overload_is_429_with_retry_after() -> None:
    runner = _blocking()
    cfg = ServerLimits(rerank_batcher=BatcherConfig(max_batch_size=1, max_queue=2, max_wait_ms=0))
    with TestClient(create_app(cfg, reranker=FakeReranker(), run_rerank=runner)) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/rerank", json={"query": "q", "documents": ["a", "z"]})
        assert runner.started.wait(5)  # "a" runs, "z" waits: one queue place is left
        resp = c.post("/v1/rerank", json={"query": "q", "documents": ["b", "c"]})
        assert "max_queue" in error_message(resp, 429, "overloaded") and resp.headers["retry-after"] == "1"
        runner.release.set()
        assert first.result(10).status_code == 200


# the requests of every endpoint that works off the event loop (a thread pool or a model's queue)
WORKING = [("POST", "/v1/embeddings", {"input": "kestrel"}),
           ("POST", "/v1/rerank", {"query": "q", "documents": ["a"]}),
           ("POST", "/v1/route", {"query": "kestrel"}),
           ("POST", "/v1/decompose", {"query": "kestrel and lumen"}),
           ("POST", "/v1/cite", {"sentences": ["Kestrel runs."], "documents": [{"id": "d", "text": "Kestrel"}]}),
           ("POST", "/v1/images/place", {"paragraphs": ["a red kestrel"], "images": [{"id": "i", "caption": "red"}]}),
           ("POST", "/v1/search", {"query": "kestrel", "query_id": "q1"}),
           ("POST", "/v1/search", {"query": "kestrel", "query_id": "q1", "stream": True}),
           ("POST", "/v1/feedback", {"query_id": "q1", "quality": 1.0}),
           ("GET", "/v1/images/file?doc_id=d&image_id=i", None)]


def test_every_endpoint_that_works_off_the_event_loop_is_counted_in() -> None:
    """With ``server.max_pending_requests`` taken (set here by hand: the flood tests are in
    test_pending_limit.py), each such endpoint answers 429 at once; the rest answer as ever."""
    from searchsmith.serving.runner import BundleEmbedder

    app = create_app(ServerLimits(max_pending_requests=4), embedder=BundleEmbedder(FakeEmbedBundle(), "fake-embed"),
                     router=FakeRouter(), pipeline=FakePipeline(), **models())
    admission = app.state.serving.admission
    with TestClient(app) as c:
        admission.pending = admission.limit
        for method, path, body in WORKING:
            resp = c.request(method, path, json=body)
            assert "server.max_pending_requests" in error_message(resp, 429, "overloaded"), path
            assert resp.headers["retry-after"] == "1"
        assert c.get("/health").status_code == c.get("/v1/models").status_code == 200
        assert admission.pending == admission.limit  # a refusal counts nothing in
        admission.pending = 0
        for method, path, body in WORKING:
            resp = c.request(method, path, json=body)
            assert resp.status_code == (404 if path.startswith("/v1/images/file") else 200), (path, resp.text)
        assert admission.pending == 0
    assert f'searchsmith_refused_requests_total{{limit="max_pending_requests"}} {len(WORKING)}.0' in \
        app.state.serving.metrics.render().decode()


def test_rerank_timeout_is_504() -> None:
    runner = _blocking()
    with TestClient(create_app(ServerLimits(request_timeout_s=0.3), reranker=FakeReranker(),
                               run_rerank=runner)) as c:
        try:
            assert "request_timeout_s" in error_message(c.post("/v1/rerank", json={"query": "q", "documents": ["a"]}),
                                                        504, "timeout")
        finally:
            runner.release.set()


# ---- /v1/embeddings through an embed bundle ------------------------------------------------------


def test_embeddings_from_an_embed_bundle_are_batched(client) -> None:
    texts = ["a cat", "a dog", "a car", "nothing"]
    body = client.post("/v1/embeddings", json={"input": texts}).json()
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, FakeEmbedBundle().encode(texts), atol=1e-6)
    assert body["model"] == "fake-embed" and body["usage"]["prompt_tokens"] == 3 * (2 + 2) + (1 + 2)  # words + 2


# ---- /v1/decompose --------------------------------------------------------------------------------


def test_decompose_returns_the_graph_and_the_rewrite(client) -> None:
    history = [{"role": "user", "content": "tell me about Kestrel"}, {"role": "assistant", "content": "It is a server"}]
    body = client.post("/v1/decompose", json={"query": "what are its limits?", "history": history,
                                              "max_nodes": 3}).json()
    assert body["rewrite"] == "what are its limits? about server"
    assert body["type"] == "split" and [n["id"] for n in body["nodes"]] == ["1", "2"]
    assert body["nodes"][0]["text"] == "first part of what are its limits? about server"
    assert client.app.state.serving.decomposer.calls[-1] == ("decompose", body["rewrite"], 3)
    plain = client.post("/v1/decompose", json={"query": "why?"}).json()
    assert plain["rewrite"] == "why?"


def test_decompose_bad_history_is_422(client) -> None:
    msg = error_message(client.post("/v1/decompose", json={"query": "q", "history": [{"role": "robot", "content": "x"}]}),
                        422, "validation_error")
    assert "history[0].role" in msg


def test_a_bad_turn_before_the_last_fifty_is_422_not_dropped(client) -> None:
    """parse_history cut the list to its last 50 turns before checking them: a malformed early
    turn in a long history was accepted (200) where a short history got 422."""
    from searchsmith.serving.rewrite import HISTORY_MAX_TURNS

    fine = [{"role": "user", "content": "Tell me about Saturn"}] * HISTORY_MAX_TURNS
    for bad, where in (({"role": "user", "content": 5}, "history[0].content"),
                       ({"role": "bot", "content": "x"}, "history[0].role"), ({"bad": 1}, "history[0]")):
        msg = error_message(client.post("/v1/decompose", json={"query": "and its rings?", "history": [bad, *fine]}),
                            422, "validation_error")
        assert where in msg


def test_decompose_rewrites_with_the_history_cut_as_the_pipeline_reads_it() -> None:
    """/v1/decompose passed the history as sent to the model (a 3.9 M-character turn took 4.4 s);
    it now gets the validated turns, each cut to HISTORY_MAX_CHARS."""
    from searchsmith.serving.rewrite import HISTORY_MAX_CHARS

    bundle = FakeDecomposer()
    seen = []
    real = bundle.rewrite
    bundle.rewrite = lambda history, query: (seen.append(history), real(history, query))[1]
    turns = [{"role": "user", "content": "x" * (HISTORY_MAX_CHARS + 10)}, {"role": "assistant", "content": "ok"}]
    with TestClient(create_app(ServerLimits(), decomposer=bundle)) as c:
        assert c.post("/v1/decompose", json={"query": "and its rings?", "history": turns}).status_code == 200
    assert seen == [[{"role": "user", "content": "x" * HISTORY_MAX_CHARS}, {"role": "assistant", "content": "ok"}]]


def test_decompose_without_bundle_is_404() -> None:
    with TestClient(create_app(ServerLimits(), reranker=FakeReranker())) as c:
        assert "bundles.decomposer" in error_message(c.post("/v1/decompose", json={"query": "q"}), 404, "not_served")


# ---- /v1/cite -------------------------------------------------------------------------------------


DOCS = [{"id": "k", "text": "Kestrel listens on port 8080."}, {"id": "l", "text": "Lumen caches pages."}]


def test_cite_with_bundle_splits_the_answer_and_cites(client) -> None:
    body = client.post("/v1/cite", json={"answer": "Kestrel uses port 8080. Lumen is fast. It rains.",
                                         "documents": DOCS}).json()
    assert body["method"] == "bundle" and body["threshold"] == 0.5
    sents = body["sentences"]
    assert [s["text"] for s in sents] == ["Kestrel uses port 8080.", "Lumen is fast.", "It rains."]
    assert sents[0]["entities"] == [{"start": 0, "end": 7, "label": "ENT", "text": "Kestrel"}]
    assert [[c["id"] for c in s["citations"]] for s in sents] == [["k"], ["l"], []]
    assert sents[0]["citations"][0]["score"] == pytest.approx(0.9)


def test_cite_sentences_and_answer_together_is_422(client) -> None:
    both = client.post("/v1/cite", json={"sentences": ["a"], "answer": "b", "documents": DOCS})
    assert "exactly one" in error_message(both, 422, "validation_error") and both.json()["error"]["param"] == "sentences"
    neither = client.post("/v1/cite", json={"documents": DOCS})
    assert "exactly one" in error_message(neither, 422, "validation_error") and neither.json()["error"]["param"] == "answer"


def test_cite_an_answer_of_too_many_sentences_names_the_answer(client) -> None:
    """The 413 named 'sentences', a field the client never sent (fuzzing, 2026-12-06)."""
    resp = client.post("/v1/cite", json={"answer": "A b. C d. E f. G h. I j.", "documents": DOCS})
    assert resp.status_code == 413 and resp.json()["error"]["param"] == "answer", resp.text
    assert resp.json()["error"]["message"].startswith("answer: 5 sentences once split, the limit is 4")


def test_cite_duplicate_document_ids_is_422(client) -> None:
    assert "used twice" in error_message(client.post("/v1/cite", json={"sentences": ["a"], "documents": [DOCS[0]] * 2}),
                                         422, "validation_error")


def test_cite_blank_document_id_is_422(client) -> None:
    resp = client.post("/v1/cite", json={"sentences": ["a"], "documents": [{"id": " ", "text": "x"}]})
    assert "non-blank id" in error_message(resp, 422, "validation_error") and resp.json()["error"]["param"] == "documents[0].id"


def test_cite_no_documents_is_400(client) -> None:
    error_message(client.post("/v1/cite", json={"sentences": ["a"], "documents": []}), 400, "empty_input")


def test_cite_too_many_pairs_is_413(client) -> None:
    docs = [{"id": str(i), "text": "x"} for i in range(4)]
    resp = client.post("/v1/cite", json={"sentences": ["a", "b", "c", "d"], "documents": docs})
    msg = error_message(resp, 413, "too_large")
    assert "16 pairs" in msg and "max_pairs_per_request" in msg and resp.json()["error"]["param"] == "documents"


def test_cite_fallback_uses_the_embedder_at_the_cosine_threshold(embedder) -> None:
    with TestClient(create_app(ServerLimits(), embedder=embedder)) as c:
        body = c.post("/v1/cite", json={"sentences": ["Knead the bread dough for ten minutes.",
                                                      "Quantum chromodynamics of gluons."],
                                        "documents": [{"id": "bake", "text": "Knead the dough for ten minutes. "
                                                       "Then let it rise."},
                                                      {"id": "space", "text": "Saturn has rings of ice."}]}).json()
    assert body["method"] == "embedding" and body["threshold"] == 0.6
    assert [c["id"] for c in body["sentences"][0]["citations"]] == ["bake"]
    assert body["sentences"][1]["citations"] == []


# ---- /v1/images/place ------------------------------------------------------------------------------


PARAS = ["A cat sleeps on the sofa.", "The dog runs in the park.", "Taxes are due in April."]


def test_images_are_placed_by_the_bundle(client) -> None:
    images = [{"id": "red", "data": png((255, 0, 0)), "url": "https://x/red.png"},
              {"id": "green", "data": png((0, 255, 0))},
              {"id": "blue", "data": png((0, 0, 255))}]
    body = client.post("/v1/images/place", json={"paragraphs": PARAS, "images": images}).json()
    assert body["method"] == "bundle" and body["threshold"] == 0.3
    assert [(p["id"], p["paragraph"]) for p in body["placements"]] == [("red", 0), ("green", 1)]
    assert body["placements"][0]["url"] == "https://x/red.png"
    blank_url = client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "red", "data": png((255, 0, 0)), "url": ""}]}).json()
    assert blank_url["placements"][0]["url"] == ""  # echoed as sent, not dropped
    assert [u["id"] for u in body["unplaced"]] == ["blue"]  # no paragraph mentions a car


def test_caption_only_image_is_placed_by_caption(client) -> None:
    body = client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "c", "caption": "my dog"}]}).json()
    assert body["placements"] == [{"id": "c", "paragraph": 1, "score": 1.0}]


def test_a_blank_images_query_is_no_query(client) -> None:
    """The query is optional: "" and "   " are both answered as without one (one was 400)."""
    def place(**extra):
        return client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
            {"id": "c", "caption": "my dog"}], **extra})

    answers = [place(query=q) for q in ("", "   ")]
    assert all(r.status_code == 200 for r in answers) and answers[0].json() == answers[1].json() == place().json()


def test_images_fallback_uses_captions(embedder) -> None:
    with TestClient(create_app(ServerLimits(), embedder=embedder)) as c:
        body = c.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
            {"id": "a", "caption": "a dog running on grass in a park"},
            {"id": "b", "data": png((255, 0, 0))}]}).json()
    assert body["method"] == "captions"
    assert [(p["id"], p["paragraph"]) for p in body["placements"]] == [("a", 1)]
    # no caption, no images bundle: it says so, instead of a silent -1.0 (fuzzing, 2026-12-06)
    assert body["unplaced"] == [{"id": "b", "best_score": -1.0, "reason": (
        "no caption, and no images bundle to read its pixels (add bundles.images to serve.yaml, or send a caption)")}]


def test_images_are_kept_at_the_models_input_size_and_checked_without_a_bundle(embedder) -> None:
    """/v1/images/place held every image decoded in full (32 of 4096 x 4096: 1.6 GB a request,
    12 GB for four at once, never given back): each is now fitted to the model's input as it
    is decoded, in the model's queue; without a model that reads pixels none is kept, and a
    corrupt one is still refused."""
    class Fitting(FakeImages):
        def __init__(self) -> None:
            self.sizes: list[tuple[int, int]] = []

        def fit_image(self, image):
            return image.convert("RGB").resize((4, 4))

        def encode_images(self, images):
            self.sizes += [im.size for im in images]
            return super().encode_images(images)

    bundle = Fitting()
    with TestClient(create_app(ServerLimits(), images=bundle)) as c:
        body = c.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
            {"id": "red", "data": png((255, 0, 0), size=(300, 200))}]}).json()
    assert body["placements"][0]["id"] == "red" and bundle.sizes == [(4, 4)]
    raw = base64.b64decode(png((255, 0, 0), size=(300, 200)))
    truncated = base64.b64encode(raw[: len(raw) // 2]).decode()
    with TestClient(create_app(ServerLimits(), embedder=embedder)) as c:
        msg = error_message(c.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
            {"id": "x", "data": truncated, "caption": "a cat"}]}), 422, "validation_error")
    assert msg.startswith("images[0].data: not an image")


def test_image_path_field_is_422(client) -> None:
    msg = error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "path": "/etc/passwd"}]}), 422, "validation_error")
    assert "path" in msg


def test_image_without_data_or_caption_is_422(client) -> None:
    msg = error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "url": "https://example.com/a.png"}]}), 422, "validation_error")
    assert "never fetched" in msg


def test_image_bad_base64_is_422(client) -> None:
    msg = error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "data": "not base64!"}]}), 422, "validation_error")
    assert "images[0].data" in msg and "base64" in msg


def test_image_base64_refusals_say_what_to_change(client) -> None:
    good = png("red")
    fixes = {"data:image/png;base64," + good: "without the 'data:...;base64,' prefix",
             good[:40] + "\n" + good[40:]: "without spaces or line breaks",
             good.replace("+", "-").replace("/", "_") + "-_": "not the URL-safe alphabet",
             good.rstrip("=") + "A": "padded with ="}
    for data, fix in fixes.items():
        msg = error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
            {"id": "x", "data": data}]}), 422, "validation_error")
        assert msg.startswith("images[0].data: not valid base64") and fix in msg, (fix, msg)


def test_image_not_an_image_is_422(client) -> None:
    data = base64.b64encode(b"hello, not a png").decode()
    assert "PNG" in error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "data": data}]}), 422, "validation_error")


def test_image_too_many_bytes_is_413(client) -> None:
    data = base64.b64encode(b"\0" * 4000).decode()
    assert "max_image_bytes" in error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "data": data}]}), 413, "too_large")


def test_image_too_many_pixels_is_413(client) -> None:
    big = png((255, 0, 0), size=(200, 60))  # compresses to a few hundred bytes, 12000 pixels
    msg = error_message(client.post("/v1/images/place", json={"paragraphs": PARAS, "images": [
        {"id": "x", "data": big}]}), 413, "too_large")
    assert "200x60" in msg and "max_image_pixels" in msg


def test_too_many_images_is_413(client) -> None:
    ims = [{"id": str(i), "caption": "cat"} for i in range(4)]
    assert "max_images_per_request" in error_message(client.post("/v1/images/place", json={
        "paragraphs": PARAS, "images": ims}), 413, "too_large")


# ---- /v1/search and /v1/feedback --------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_client(small_index, embedder):
    from searchsmith.models.config import from_dict
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    cfg = from_dict(PipelineConfig, {"protocol": {"enabled": True}})
    pipe = Pipeline(cfg, Index.load(small_index, embedder=embedder), embedder)
    with TestClient(create_app(ServerLimits(stream_chunk_chars=16), pipeline=pipe)) as c:
        yield c


def test_search_json_and_stream_carry_the_same_answer(search_client) -> None:
    q = {"query": "How long should I knead bread dough?", "query_id": "q1"}
    ans = search_client.post("/v1/search", json=q).json()
    assert ans["query_id"] == "q1" and ans["answer"] and ans["trace"]["total_ms"] > 0
    assert ans["references"] and ans["references"][0]["source"] == "cooking"
    resp = search_client.post("/v1/search", json={**q, "query_id": "q2", "stream": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.text)
    names = [e for e, _ in events]
    n_text = len([e for e in names if e == "answer"])
    assert n_text >= 2 and names[:n_text] == ["answer"] * n_text
    assert names[n_text:] == ["citations", "timeline", "images", "trace", "message"] and events[-1][1] == "[DONE]"
    assert "".join(d["delta"] for e, d in events if e == "answer") == ans["answer_text"]
    cites = dict(events)["citations"]
    assert cites["answer"] == ans["answer"] and cites["references"] == ans["references"]
    assert dict(events)["trace"]["query_id"] == "q2"


def test_search_blank_query_is_400(search_client) -> None:
    error_message(search_client.post("/v1/search", json={"query": "  "}), 400, "empty_input")


def test_search_bad_strategy_is_422(search_client) -> None:
    assert "strategy" in error_message(search_client.post("/v1/search", json={"query": "q", "strategy": "magic"}), 422,
                                       "validation_error")


def test_search_without_pipeline_is_404(client) -> None:
    assert "index" in error_message(client.post("/v1/search", json={"query": "q"}), 404, "not_served")


def test_feedback_rewards_an_answer_once(search_client) -> None:
    search_client.post("/v1/search", json={"query": "What are the rings of Saturn made of?", "query_id": "fb"})
    body = search_client.post("/v1/feedback", json={"query_id": "fb", "quality": 0.8}).json()
    assert body["query_id"] == "fb" and body["preset"] and body["reward"] <= 0.8
    again = search_client.post("/v1/feedback", json={"query_id": "fb", "quality": 0.8})
    assert "unknown or already rewarded" in error_message(again, 422, "validation_error")


def test_feedback_quality_out_of_range_is_422(search_client) -> None:
    assert "quality" in error_message(search_client.post("/v1/feedback", json={"query_id": "x", "quality": 2}), 422,
                                      "validation_error")


# ---- limits, CORS, auth, readiness ------------------------------------------------------------------


def test_cors_is_off_by_default(client) -> None:
    pre = client.options("/v1/rerank", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in pre.headers
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["d"]}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_cors_allows_configured_origins() -> None:
    app = create_app(ServerLimits(cors_origins=["https://app.example"]), reranker=FakeReranker())
    with TestClient(app) as c:
        ok = c.options("/v1/rerank", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
        other = c.options("/v1/rerank", headers={"Origin": "https://evil.example",
                                                 "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers


def test_api_key_protects_model_endpoints() -> None:
    with TestClient(create_app(ServerLimits(api_keys=["k1"]), **models())) as c:
        for path, body in (("/v1/rerank", {"query": "q", "documents": ["d"]}), ("/v1/decompose", {"query": "q"}),
                           ("/v1/cite", {"sentences": ["A b."], "documents": DOCS})):
            error_message(c.post(path, json=body), 401, "unauthorized")
            assert c.post(path, json=body, headers={"Authorization": "Bearer k1"}).status_code == 200


def test_body_over_limit_is_413_on_model_endpoints(client) -> None:
    resp = client.post("/v1/rerank", json={"query": "q", "documents": ["y" * 150] * 200})
    assert "max_body_bytes" in error_message(resp, 413, "too_large")


def test_ready_waits_for_the_loader_and_reports_its_failure() -> None:
    gate = threading.Event()

    def loader(state):
        gate.wait(10)
        state.attach(reranker=FakeReranker())

    with TestClient(create_app(ServerLimits(), loader=loader)) as c:
        assert c.get("/health").status_code == 200
        assert "loading" in error_message(c.get("/ready"), 503, "not_ready")
        gate.set()
        for _ in range(200):
            if c.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.02)
        assert c.get("/ready").json()["models"]["rerank"] is True

    def broken(state):
        raise FileNotFoundError("bundles/reranker/manifest.json")

    with TestClient(create_app(ServerLimits(), loader=broken)) as c:
        for _ in range(200):
            if "failed" in c.get("/ready").text:
                break
            threading.Event().wait(0.02)
        assert "bundles/reranker/manifest.json" in error_message(c.get("/ready"), 503, "not_ready")


def test_model_queues_are_closed_with_drain_on_shutdown() -> None:
    app = create_app(ServerLimits(), **models())
    with TestClient(app) as c:
        assert c.post("/v1/decompose", json={"query": "q"}).status_code == 200
    state = app.state.serving
    assert state.rerank_batcher.closed and all(g.closed for g in state.gates.values())
    assert state.gates["decompose"].stats()["items_run"] == 1


def test_metrics_cover_the_new_batchers(client) -> None:
    client.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]})
    body = client.get("/metrics").text
    assert 'searchsmith_batch_size_count{model="reranker"}' in body
    assert 'searchsmith_queue_depth{model="decompose"}' in body
    assert 'searchsmith_requests_total{endpoint="/v1/rerank",status="200"}' in body


# ---- the OpenAPI contract: schemathesis ---------------------------------------------------------------


def test_openapi_fuzz_has_no_5xx() -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from searchsmith.serving.runner import BundleEmbedder

    app = create_app(ServerLimits(max_documents_per_request=8, max_texts_per_request=8, max_input_chars=200),
                     embedder=BundleEmbedder(FakeEmbedBundle(), "fake"), router=FakeRouter(),
                     pipeline=FakePipeline(), **models())
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[tuple] = []
    calls = 0

    def fuzz(strategy) -> None:
        @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def check(case) -> None:
            nonlocal calls
            calls += 1
            response = case.call()
            if response.status_code >= 500:
                failures.append((case.method, case.path, case.body, response.status_code, response.text))

        check()

    with TestClient(app):
        operations = [op.ok() for op in schema.get_all_operations()]
        assert {o.path for o in operations} >= {"/v1/rerank", "/v1/cite", "/v1/images/place", "/v1/search"}
        for operation in operations:
            fuzz(operation.as_strategy())
    assert calls >= len(operations) and not failures, failures[:3]


# ---- every endpoint: documented examples, unencodable text, the error shape -------------------------


def _post_routes(app) -> list:
    """Every POST route of the app (found from the app, so a new endpoint is covered at once)."""
    from fastapi.routing import APIRoute

    return [r for r in app.routes if isinstance(r, APIRoute) and "POST" in r.methods]


def _request_examples(app, path: str) -> list[dict]:
    """The request examples /docs shows for ``path`` (from the OpenAPI schema, as Swagger UI reads them)."""
    spec = json.loads(json.dumps(app.openapi()))  # as /openapi.json serves it
    ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return spec["components"]["schemas"][ref.rsplit("/", 1)[-1]].get("examples", [])


@pytest.fixture(scope="module")
def full_app(small_index, embedder):
    """Every endpoint served: fake bundles, and a real pipeline (protocol router on) over the small index."""
    from searchsmith.models.config import from_dict
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline
    from searchsmith.serving.runner import BundleEmbedder

    pipe = Pipeline(from_dict(PipelineConfig, {"protocol": {"enabled": True}}),
                    Index.load(small_index, embedder=embedder), embedder)
    return create_app(ServerLimits(), embedder=BundleEmbedder(FakeEmbedBundle(), "embedder"), router=pipe.router,
                      pipeline=pipe, **models())


@pytest.fixture(scope="module")
def full_client(full_app):
    with TestClient(full_app) as c:
        yield c


def test_every_post_route_has_an_example_that_is_answered_as_documented(full_app, full_client) -> None:
    from searchsmith.serving.schemas import RESPONSE_EXAMPLES, RequestBody

    routes = _post_routes(full_app)
    assert {r.path for r in routes} >= {"/v1/embeddings", "/v1/rerank", "/v1/route", "/v1/decompose", "/v1/cite",
                                        "/v1/images/place", "/v1/search", "/v1/feedback"}
    spec = full_client.get("/openapi.json").json()
    for route in routes:  # in definition order: /v1/search answers q-0001 before /v1/feedback rewards it
        model = route.body_field.field_info.annotation
        assert issubclass(model, RequestBody), f"{route.path}: its body must be a RequestBody (text checks)"
        examples = _request_examples(full_app, route.path)
        assert examples, f"{route.path}: add json_schema_extra examples to {model.__name__}"
        documented = spec["paths"][route.path]["post"]["responses"]["200"]["content"]["application/json"]["example"]
        assert documented == RESPONSE_EXAMPLES[route.path]
        for example in examples:
            model.model_validate_json(json.dumps(example))
            resp = full_client.post(route.path, json=example)
            assert resp.status_code == 200, (route.path, example, resp.text)
            if resp.headers["content-type"].startswith("application/json"):
                assert set(resp.json()) == set(documented), (route.path, sorted(resp.json()), sorted(documented))
            else:
                assert example.get("stream") and resp.text.endswith("data: [DONE]\n\n")
        assert set(spec["paths"][route.path]["post"]["responses"]) >= {"200", "400", "413", "422", "429", "503"}


def _string_leaves(value, loc=()):
    """(location, string) of every string value in a JSON value."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _string_leaves(v, (*loc, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _string_leaves(v, (*loc, i))


def _replace(value, loc, new):
    if not loc:
        return new
    out = json.loads(json.dumps(value))
    node = out
    for part in loc[:-1]:
        node = node[part]
    node[loc[-1]] = new
    return out


def _path(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _surrogate_cases(app):
    """(route, body, expected param): a lone surrogate in each string of each endpoint's examples,
    and in a field name."""
    for route in _post_routes(app):
        for example in _request_examples(app, route.path):
            for loc, text in _string_leaves(example):
                yield route.path, _replace(example, loc, text[:3] + "\ud800" + text[3:]), _path(loc)
        yield route.path, {**_request_examples(app, route.path)[0], "bad\udfffkey": 1}, "body"


def test_lone_surrogates_are_422_naming_the_field_on_every_endpoint(full_app, full_client) -> None:
    calls = 0
    for path, body, param in _surrogate_cases(full_app):
        raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as a "\ud800" escape
        assert b"\\ud800" in raw or b"\\udfff" in raw
        resp = full_client.post(path, content=raw, headers={"content-type": "application/json"})
        assert resp.status_code == 422, (path, param, resp.text)
        err = resp.json()["error"]
        assert err["code"] == "unencodable_text" and err["param"] == param, (path, err)
        assert err["message"].startswith(f"{param}: ") and "surrogate" in err["message"], err
        calls += 1
    assert calls >= 30  # every string of every example, on every endpoint
    # the same text as raw bytes that are not UTF-8 (an encoded surrogate): the field is named too
    resp = full_client.post("/v1/rerank", content=b'{"query": "q", "documents": ["ok", "a\xed\xa0\x80"]}',
                            headers={"content-type": "application/json"})
    assert resp.json()["error"]["param"] == "documents[1]", resp.text
    bad_bytes = full_client.post("/v1/rerank", content=b'{"query": "q\xff", "documents": ["ok"]}',
                                 headers={"content-type": "application/json"})
    assert bad_bytes.status_code == 422 and bad_bytes.json()["error"]["param"] == "query", bad_bytes.text
    assert "not valid UTF-8" in bad_bytes.json()["error"]["message"]


def test_bad_text_keeps_the_connection_and_logs_no_traceback(full_app, caplog) -> None:
    """Over a real socket: every bad request is answered 422 on the same keep-alive connection,
    a good request still works on it afterwards, and nothing is logged as an error."""
    import http.client
    import logging


    caplog.set_level(logging.INFO)
    # log_config=None: uvicorn's records reach caplog (its default config does not propagate them)
    with LoopbackServer(full_app, log_config=None, timeout_keep_alive=60, lifespan="off") as server:
        cases = list(_surrogate_cases(full_app))
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        headers = {"content-type": "application/json"}

        def post(path: str, raw: bytes) -> tuple[int, dict]:
            conn.request("POST", path, body=raw, headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())

        post("/v1/embeddings", b'{"input": "open the connection"}')
        sock = conn.sock
        for path, body, param in cases:
            status, answer = post(path, json.dumps(body).encode())
            assert status == 422 and answer["error"]["param"] == param, (path, answer)
            assert conn.sock is sock, f"{path}: the server closed the connection after a bad request"
        status, answer = post("/v1/rerank", b'{"query": "bread", "documents": ["bread bread", "stars"]}')
        assert status == 200 and answer["results"][0]["index"] == 0
        assert conn.sock is sock
        conn.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]


def test_error_body_is_openai_shaped_with_param_and_code(client) -> None:
    resp = client.post("/v1/rerank", json={"query": "q", "documents": ["ok", " "]})
    assert resp.json() == {"error": {"message": "documents[1]: is empty (nothing but spaces, control or zero-width "
                                             "characters); send non-blank text", "type": "empty_input",
                                     "param": "documents[1]", "code": None}}
    missing = client.post("/v1/cite", json={"sentences": ["a"]}).json()["error"]
    assert missing["type"] == "validation_error" and missing["param"] == "documents" and missing["code"] == "missing"
    nested = client.post("/v1/cite", json={"sentences": ["a"], "documents": [{"id": "x", "text": 3}]}).json()["error"]
    assert nested["param"] == "documents[0].text" and nested["message"].startswith("documents[0].text: ")
    over = client.post("/v1/rerank", json={"query": "q", "documents": ["d"] * 6}).json()["error"]
    assert over["type"] == "too_large" and over["param"] == "documents"
    history = client.post("/v1/decompose", json={"query": "q", "history": [{"role": "robot", "content": "x"}]})
    assert history.json()["error"]["param"] == "history[0].role"
    not_found = client.get("/nope").json()["error"]
    assert not_found["type"] == "http_error" and not_found["param"] is None


def test_feedback_with_the_router_off_is_accepted_and_says_how_to_turn_it_on(small_index, embedder) -> None:
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    pipe = Pipeline(PipelineConfig(), Index.load(small_index, embedder=embedder), embedder)  # protocol off
    with TestClient(create_app(ServerLimits(), pipeline=pipe)) as c:
        qid = c.post("/v1/search", json={"query": "How long should I knead bread dough?"}).json()["query_id"]
        body = c.post("/v1/feedback", json={"query_id": qid, "quality": 0.9}).json()
        assert body["recorded"] is False and body["query_id"] == qid and body["quality"] == 0.9
        assert "pipeline.protocol.enabled: true" in body["message"]
        assert "quality" in error_message(c.post("/v1/feedback", json={"query_id": qid, "quality": 7}), 422,
                                          "validation_error")


def test_feedback_with_the_router_on_says_it_was_recorded(full_client) -> None:
    qid = full_client.post("/v1/search", json={"query": "What are the rings of Saturn made of?"}).json()["query_id"]
    body = full_client.post("/v1/feedback", json={"query_id": qid, "quality": 0.5}).json()
    assert body["recorded"] is True and body["query_id"] == qid and body["preset"]


def test_serve_yaml_thresholds_reach_cite_without_a_pipeline() -> None:
    from searchsmith.models.config import from_dict
    from searchsmith.serving.pipeline.config import PipelineConfig

    cfg = from_dict(PipelineConfig, {"citation": {"support_threshold": 0.95}})
    with TestClient(create_app(ServerLimits(), citation=FakeCiter(), pipeline_config=cfg)) as c:
        body = c.post("/v1/cite", json={"sentences": ["Kestrel uses port 8080."], "documents": DOCS}).json()
    assert body["threshold"] == 0.95 and body["sentences"][0]["citations"] == []  # 0.9 < 0.95


def test_model_names_aliases_and_v1_models() -> None:
    from searchsmith.serving.limits import ServedModel

    cfg = ServerLimits(rerank_model=ServedModel(name="acme-rerank", aliases=["rerank-english-v3.0"]))
    with TestClient(create_app(cfg, reranker=FakeReranker())) as c:
        listed = c.get("/v1/models").json()
        assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["acme-rerank"]
        assert listed["data"][0]["aliases"] == ["rerank-english-v3.0", "reranker"]
        for name in ("acme-rerank", "rerank-english-v3.0", "reranker", None):
            body = {"query": "q", "documents": ["d"], **({"model": name} if name else {})}
            resp = c.post("/v1/rerank", json=body)
            assert resp.status_code == 200 and resp.json()["model"] == "acme-rerank", resp.text
        err = c.post("/v1/rerank", json={"query": "q", "documents": ["d"], "model": "gpt-4"}).json()["error"]
        assert err["param"] == "model" and err["code"] == "model_not_found"
        assert "'acme-rerank'" in err["message"] and "rerank_model.aliases" in err["message"]
        assert c.get("/v1/models/rerank-english-v3.0").json()["id"] == "acme-rerank"
        assert error_message(c.get("/v1/models/gpt-4"), 404, "http_error").startswith("model: 'gpt-4'")


def test_served_model_config_is_checked() -> None:
    from searchsmith.models.errors import ConfigError
    from searchsmith.serving.limits import ServedModel

    with pytest.raises(ConfigError, match="embeddings_model: name must be"):
        ServerLimits(embeddings_model=ServedModel(name="", aliases=[]))
    with pytest.raises(ConfigError, match="rerank_model: name must be"):
        ServerLimits(rerank_model=ServedModel(aliases=[3]))


def test_an_unexpected_error_is_one_500_and_keeps_the_connection(caplog) -> None:
    """A bug in a model (here a router that raises KeyError) is answered 500 on a real socket,
    logged once with its traceback, and the keep-alive connection serves the next request."""
    import http.client
    import logging


    class BrokenRouter(FakeRouter):
        def route(self, *args, **kwargs):
            raise KeyError("boom")

    app = create_app(ServerLimits(), router=BrokenRouter(), reranker=FakeReranker())
    caplog.set_level(logging.INFO)
    with LoopbackServer(app, log_config=None, lifespan="off") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/v1/route", body=b'{"query": "q"}', headers={"content-type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        sock = conn.sock
        assert resp.status == 500 and body["error"]["type"] == "internal_error" and sock is not None
        conn.request("POST", "/v1/rerank", body=b'{"query": "bread", "documents": ["bread"]}',
                     headers={"content-type": "application/json"})
        again = conn.getresponse()
        assert again.status == 200 and json.loads(again.read())["results"][0]["index"] == 0
        assert conn.sock is sock  # the same connection
        conn.close()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "KeyError" in repr(tracebacks[0].exc_info[1]), [r.getMessage() for r in tracebacks]


def _valid(path: str, body) -> None:
    """``body`` is what /openapi.json documents for ``path``: types strict, no key left undocumented."""
    from pydantic import TypeAdapter
    from searchsmith.serving.schemas import RESPONSE_TYPES

    TypeAdapter(RESPONSE_TYPES[path]).validate_python(body, strict=True)


def test_every_json_answer_has_a_schema_that_real_answers_meet(full_app, full_client) -> None:
    """The 200 answers were documented by example only (empty schemas): clients generated from
    /openapi.json had untyped responses. Each answer now has a type, closed to undocumented keys."""
    from searchsmith.serving.schemas import RESPONSE_EXAMPLES

    spec = full_client.get("/openapi.json").json()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            json_200 = op["responses"].get("200", {}).get("content", {}).get("application/json")
            if json_200 is not None and path not in ("/health",):
                assert "$ref" in json_200.get("schema", {}), (method, path, "a JSON answer without a schema")
    for path, example in RESPONSE_EXAMPLES.items():  # the docs' examples are what the types say
        _valid(path, example)
    for route in _post_routes(full_app):
        for example in _request_examples(full_app, route.path):
            resp = full_client.post(route.path, json=example)
            if resp.headers["content-type"].startswith("application/json"):
                _valid(route.path, resp.json())
    # the variants the examples do not reach: base64 vectors, documents returned, an image not placed
    _valid("/v1/embeddings", full_client.post("/v1/embeddings", json={"input": "a", "encoding_format": "base64"}).json())
    _valid("/v1/rerank", full_client.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"],
                                                              "return_documents": True}).json())
    placed = full_client.post("/v1/images/place", json={"paragraphs": ["A dog."], "images": [
        {"id": "x", "caption": "a cat"}], "threshold": 0.99}).json()
    assert placed["unplaced"], placed
    _valid("/v1/images/place", placed)
    models = full_client.get("/v1/models").json()
    _valid("/v1/models", models)
    _valid("/v1/models/{model}", full_client.get(f"/v1/models/{models['data'][0]['id']}").json())
    _valid("/ready", full_client.get("/ready").json())


def test_an_undocumented_key_fails_the_schema() -> None:
    """The check above can fail: a key added to an answer without its type is refused."""
    from pydantic import ValidationError as PydanticError

    good = {"query_id": "q-1", "recorded": False, "quality": 0.5, "message": "off"}
    _valid("/v1/feedback", good)
    with pytest.raises(PydanticError, match="extra"):
        _valid("/v1/feedback", {**good, "new_key": 1})
    with pytest.raises(PydanticError):
        _valid("/v1/feedback", {"query_id": "q-1"})  # recorded missing


def test_feedback_with_the_router_off_meets_its_schema() -> None:
    class Off:
        protocol = None

    app = create_app(ServerLimits(), reranker=FakeReranker())
    with TestClient(app) as c:
        app.state.serving.pipeline = Off()
        _valid("/v1/feedback", c.post("/v1/feedback", json={"query_id": "q", "quality": 1.0}).json())


def test_openapi_states_the_servers_request_limits() -> None:
    """/openapi.json said nothing of server.max_texts_per_request and the like: a client learnt
    them from 413s. The schema now carries this server's limits, and they are the ones enforced."""
    from searchsmith.serving.runner import BundleEmbedder

    limits = ServerLimits(max_texts_per_request=3, max_documents_per_request=2, max_input_chars=40, truncate=False)
    app = create_app(limits, reranker=FakeReranker(), embedder=BundleEmbedder(FakeEmbedBundle(), "embedder"))
    with TestClient(app) as c:
        spec = c.get("/openapi.json").json()
        props = spec["components"]["schemas"]
        input_ = {m.get("type"): m for m in props["EmbeddingsRequest"]["properties"]["input"]["anyOf"]}
        assert (input_["array"]["minItems"], input_["array"]["maxItems"]) == (1, 3)
        assert input_["string"]["maxLength"] == 40 and input_["array"]["items"]["maxLength"] == 40
        assert "server.max_texts_per_request" in props["EmbeddingsRequest"]["properties"]["input"]["description"]
        docs = props["RerankRequest"]["properties"]["documents"]
        assert docs["maxItems"] == 2 and props["RerankDocument"]["properties"]["text"]["maxLength"] == 40
        # what the schema states is what the server does: at the limit 200, past it 413
        assert c.post("/v1/embeddings", json={"input": ["a"] * 3}).status_code == 200
        assert c.post("/v1/embeddings", json={"input": ["a"] * 4}).status_code == 413
        assert c.post("/v1/embeddings", json={"input": "x" * 40}).status_code == 200
        assert c.post("/v1/embeddings", json={"input": "x" * 41}).status_code == 413
        assert c.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]}).status_code == 200
        assert c.post("/v1/rerank", json={"query": "q", "documents": ["a", "b", "c"]}).status_code == 413
    cut = create_app(ServerLimits(max_input_chars=40, truncate=True)).openapi()["components"]["schemas"]
    assert "maxLength" not in json.dumps(cut["EmbeddingsRequest"]["properties"]["input"])  # cut, not refused
    assert "server.truncate" in cut["EmbeddingsRequest"]["properties"]["input"]["description"]


def test_every_request_limit_names_a_field_of_the_schema(monkeypatch) -> None:
    from searchsmith.serving import schemas

    spec = create_app(ServerLimits()).openapi()  # raises KeyError for an entry the schema lacks
    for model, field, _what, setting in schemas.REQUEST_LIMITS:
        assert f"server.{setting}" in spec["components"]["schemas"][model]["properties"][field]["description"]
    monkeypatch.setattr(schemas, "REQUEST_LIMITS", (("Nope", "field", "items", "max_texts_per_request"),))
    with pytest.raises(KeyError, match="Nope.field"):
        schemas.document_limits({"components": {"schemas": {}}}, ServerLimits())
