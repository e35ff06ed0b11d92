"""/v1/search streamed while an LLM backend generates; the answer page's endpoints (/, /ui,
/v1/images/file); citations that carry the supporting quote. In-process (TestClient), no browser:
tests/serving/test_answer_page.py drives the page in Chromium."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient
from searchsmith.models.config import from_dict
from searchsmith.serving.http import create_app
from searchsmith.serving.limits import ServerLimits
from sse_parse import sse_events

QUESTION = "How long should I knead bread dough?"


class PiecewiseLLM:
    """An LLM backend double: hands its pieces to ``on_token`` one by one (optionally failing
    after ``fail_after`` of them), records whether it was asked to stream."""

    def __init__(self, pieces: list[str], *, fail_after: int | None = None, delay_s: float = 0.0) -> None:
        self.pieces, self.fail_after, self.delay_s = pieces, fail_after, delay_s
        self.streamed: list[bool] = []

    def complete(self, messages, on_token=None):
        self.streamed.append(on_token is not None)
        for i, piece in enumerate(self.pieces):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("the LLM server went away")
            if on_token is not None:
                on_token(piece)
            time.sleep(self.delay_s)
        return "".join(self.pieces), 10, len(self.pieces)


def _pipeline(small_index, embedder, llm, **generation):
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    cfg = from_dict(PipelineConfig, {"generation": {"backend": "openai", **generation,
                                                    "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}})
    pipe = Pipeline(cfg, Index.load(small_index, embedder=embedder), embedder)
    stage = next(s for s in pipe.stages if s.name == "generation")
    stage.llm = llm
    return pipe


def _stream(client, **body):
    resp = client.post("/v1/search", json={"query": QUESTION, "stream": True, **body})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream"), resp.text
    return sse_events(resp.text)


def test_the_llm_answer_streams_piece_by_piece_then_the_final_text(small_index, embedder) -> None:
    pieces = ["Knead ", "the dough ", "for about ten minutes ", "[1]."]
    llm = PiecewiseLLM(pieces)
    with TestClient(create_app(ServerLimits(stream_chunk_chars=4096), pipeline=_pipeline(small_index, embedder, llm))) as c:
        events = _stream(c)
        plain = c.post("/v1/search", json={"query": QUESTION}).json()
    # one event per generated piece (not the server's own chunking: stream_chunk_chars is large)
    answer = [d for e, d in events if e == "answer"]
    assert [d["delta"] for d in answer[:4]] == pieces
    # the LLM's own [1] is removed, so the final text differs: one replace event says it
    assert answer[4] == {"delta": "", "replace": "Knead the dough for about ten minutes."}
    assert [e for e, _ in events[5:]] == ["citations", "timeline", "images", "trace", "message"]
    assert events[-1][1] == "[DONE]"
    # the JSON request's generation is given a listener too (a client that leaves stops it),
    # but its answer comes whole
    assert llm.streamed == [True, True]
    assert plain["answer_text"] == answer[4]["replace"] and "answer_text" in plain


def test_an_llm_failing_part_way_is_replaced_by_the_fallback_answer(small_index, embedder) -> None:
    llm = PiecewiseLLM(["Knead ", "the dough"], fail_after=1)
    with TestClient(create_app(ServerLimits(), pipeline=_pipeline(small_index, embedder, llm))) as c:
        events = _stream(c)
    answer = [d for e, d in events if e == "answer"]
    assert answer[0] == {"delta": "Knead "}
    final = answer[-1]["replace"]
    assert final and final != "Knead "  # the extractive answer, which the trace explains
    trace = dict(events)["trace"]["trace"]
    assert any("openai failed (RuntimeError: the LLM server went away)" in n for n in trace["notes"])


def test_a_failure_after_the_first_piece_is_an_error_event(small_index, embedder) -> None:
    llm = PiecewiseLLM(["Knead ", "the dough"], fail_after=1)
    pipe = _pipeline(small_index, embedder, llm, fallback_extractive=False)
    with TestClient(create_app(ServerLimits(), pipeline=pipe)) as c:
        events = _stream(c)
        # before any piece, the same failure keeps its status code
        resp = c.post("/v1/search", json={"query": QUESTION})
    assert [e for e, _ in events] == ["answer", "error"]
    err = events[1][1]
    assert err["status"] == 500 and err["error"]["type"] == "internal_error"
    assert resp.status_code == 500


def test_offline_backends_stream_the_finished_answer_in_chunks(small_index, embedder) -> None:
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    pipe = Pipeline(PipelineConfig(), Index.load(small_index, embedder=embedder), embedder)
    with TestClient(create_app(ServerLimits(stream_chunk_chars=8), pipeline=pipe)) as c:
        events = _stream(c)
    answer = [d for e, d in events if e == "answer"]
    assert len(answer) >= 2 and all("replace" not in d and len(d["delta"]) <= 8 for d in answer)


def test_a_full_queue_is_429_before_the_stream_starts(small_index, embedder) -> None:
    from searchsmith.serving.batcher import BatcherConfig

    llm = PiecewiseLLM(["slow ", "answer"], delay_s=0.6)
    limits = ServerLimits(calls=BatcherConfig(max_batch_size=1, max_wait_ms=0.0, max_queue=1, workers=1))
    with TestClient(create_app(limits, pipeline=_pipeline(small_index, embedder, llm))) as c:
        done: list[int] = []
        threads = [threading.Thread(target=lambda: done.append(c.post("/v1/search", json={"query": QUESTION}).status_code))
                   for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.3)
        resp = c.post("/v1/search", json={"query": QUESTION, "stream": True})
        for t in threads:
            t.join()
    assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1
    assert resp.json()["error"]["type"] == "overloaded"
    assert sorted(done) == [200, 200]


# ---- citations: the supporting quote ---------------------------------------------------------


def test_each_citation_names_the_passage_sentence_that_supports_it(small_index, embedder) -> None:
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    pipe = Pipeline(PipelineConfig(), Index.load(small_index, embedder=embedder), embedder)
    ans = pipe.ask(QUESTION)
    refs = {r["n"]: r for r in ans["references"]}
    cites = [c for s in ans["sentences"] for c in s["citations"]]
    assert cites and refs
    for c in cites:
        ref = refs[c["n"]]
        passage = next(p for p in pipe.index.store.chunks_of_doc(ref["doc_id"]) if p.chunk_id == c["chunk_id"])
        # the quote is one sentence of the cited passage (whitespace normalised)
        assert c["quote"] and c["quote"] in " ".join(passage.text.split())
    assert all(r["text"] and isinstance(r["score"], float) for r in refs.values())


def test_the_quote_without_an_encoder_is_the_sentence_sharing_most_words() -> None:
    from searchsmith.serving.pipeline.citation import cite_sentences
    from searchsmith.serving.pipeline.config import CitationConfig

    class Bundle:  # P(supports) = 1 for every pair; no encoder is given
        support_threshold = 0.5

        def entities(self, sentences):
            return [[] for _ in sentences]

        def attribute(self, pairs):
            return [1.0] * len(pairs)

    passage = "Rye needs a long rest. Knead the dough for ten minutes until smooth. Bake it hot."
    (found,) = cite_sentences(["You knead the dough for ten minutes."], [("d1", passage)],
                              config=CitationConfig(), bundle=Bundle())
    assert found.citations == [(0, 1.0)] and found.quotes == ("Knead the dough for ten minutes until smooth.",)


# ---- the page and its image endpoint -----------------------------------------------------------


def test_the_page_is_served_with_a_strict_policy_and_can_be_turned_off() -> None:
    with TestClient(create_app(ServerLimits())) as c:
        page = c.get("/")
        js = c.get("/ui/app.js")
        css = c.get("/ui/style.css")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "unsafe" not in policy
    assert '<script src="/ui/app.js"' in page.text and "http" not in page.text.split("<body>")[0].replace(
        'name="viewport"', "")  # nothing loaded from elsewhere
    assert js.status_code == 200 and "/v1/search" in js.text and css.status_code == 200
    with TestClient(create_app(ServerLimits(ui=False))) as c:
        assert c.get("/").status_code == 404 and c.get("/ui/app.js").status_code == 404
    with pytest.raises(Exception, match="ui: expected true or false"):
        ServerLimits(ui="yes")


@pytest.fixture(scope="module")
def image_index(tmp_path_factory, embedder):
    """A two-document index whose first document carries a PNG and a non-image file."""
    from PIL import Image
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    root = tmp_path_factory.mktemp("imgcorpus")
    Image.new("RGB", (40, 30), (200, 30, 30)).save(root / "red.png")
    (root / "notes.txt").write_text("not an image", encoding="utf-8")
    docs = [{"id": "d1", "source": "docs", "text": "The red square is the logo.",
             "images": [{"id": "logo", "path": "red.png", "caption": "The logo"},
                        {"id": "notes", "path": "notes.txt"}]},
            {"id": "d2", "source": "news", "text": "Nothing to see here."}]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs), encoding="utf-8")
    out = tmp_path_factory.mktemp("imgindex") / "idx"
    build_index(read_corpus(root / "corpus.jsonl"), out, IndexConfig(centroids=CentroidConfig(min_centroids=1)), embedder)
    return out


def test_images_file_serves_the_index_image_and_nothing_else(image_index, embedder) -> None:
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    def pipe():  # a server's shutdown closes its pipeline
        return Pipeline(PipelineConfig(), Index.load(image_index, embedder=embedder), embedder)

    with TestClient(create_app(ServerLimits(api_keys=["k"]), pipeline=pipe())) as c:
        auth = {"Authorization": "Bearer k"}
        assert c.get("/v1/images/file", params={"doc_id": "d1", "image_id": "logo"}).status_code == 401
        ok = c.get("/v1/images/file", params={"doc_id": "d1", "image_id": "logo"}, headers=auth)
        assert ok.status_code == 200 and ok.headers["content-type"] == "image/png" and ok.content[:4] == b"\x89PNG"
        for params, why in [({"doc_id": "d1", "image_id": "nope"}, "no such image in the index"),
                            ({"doc_id": "d2", "image_id": "logo"}, "no such image in the index"),
                            ({"doc_id": "d1", "image_id": "notes"}, "not an image file"),
                            ({"doc_id": "../../etc", "image_id": "/etc/passwd"}, "no such image in the index")]:
            resp = c.get("/v1/images/file", params=params, headers=auth)
            assert resp.status_code == 404 and why in resp.json()["error"]["message"], resp.text
            assert resp.json()["error"]["param"] == "image_id"
        missing = c.get("/v1/images/file", params={"doc_id": "d1"}, headers=auth)
        assert missing.status_code == 422 and "image_id" in missing.text
    with TestClient(create_app(ServerLimits(max_image_bytes=10), pipeline=pipe())) as c:
        big = c.get("/v1/images/file", params={"doc_id": "d1", "image_id": "logo"})
        assert big.status_code == 413 and "server.max_image_bytes" in big.json()["error"]["message"]
