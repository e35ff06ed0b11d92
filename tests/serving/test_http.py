from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from blocking_runner import BlockingRunner
from fastapi.testclient import TestClient
from openai_error import error_message
from searchsmith.serving.batcher import BatcherConfig
from searchsmith.serving.http import create_app
from searchsmith.serving.http_errors import ERROR_TABLE
from searchsmith.serving.index import Index
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.router import CentroidRouter, RouterConfig
from searchsmith.serving.runner import EmbeddingRunner

TEXTS = ["Knead the dough for ten minutes.", "Saturn has rings of ice.", "def f(x): return x"]


@pytest.fixture(scope="module")
def router(small_index, embedder):
    return CentroidRouter(Index.load(small_index), embedder, RouterConfig(top_k=3))


@pytest.fixture(scope="module")
def client(embedder, router):
    cfg = ServerLimits(max_texts_per_request=8, max_input_chars=500, max_body_bytes=20000)
    with TestClient(create_app(cfg, embedder=embedder, router=router)) as c:
        yield c


def _blocking() -> BlockingRunner:
    """A runner that blocks until released (to fill the queue), then embeds text i as unit vector i."""
    return BlockingRunner(lambda batch: np.eye(384, dtype=np.float32)[: len(batch)])  # (B, 384)


# ---- runner --------------------------------------------------------------------------------


def test_runner_matches_encode(embedder) -> None:
    runner = EmbeddingRunner(embedder)
    out = runner.run(embedder.tokenize(TEXTS))
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(out, embedder.encode(TEXTS), atol=1e-5)
    with pytest.raises(ValueError, match="max_seq_length"):
        runner.run([list(range(1, embedder.max_seq_length + 5))])


def test_runner_packs_mixed_lengths_by_padding_and_keeps_order(embedder, monkeypatch) -> None:
    texts = ["Saturn.", "rings " * 120, "Knead the dough.", "ice " * 90, "x"]
    ids = embedder.tokenize(texts)
    calls = []
    real = embedder.embed_ids

    def spy(batch):
        calls.append(sorted(len(x) for x in batch))
        return real(batch)

    monkeypatch.setattr(embedder, "embed_ids", spy)
    out = EmbeddingRunner(embedder).run(ids)
    assert len(calls) >= 2  # the long texts are not padded together with the short ones
    assert all(len(c) == 1 or min(c) * 2 >= max(c) for c in calls) and sum(map(len, calls)) == len(texts)
    np.testing.assert_allclose(out, embedder.encode(texts), atol=1e-5)  # row i is text i


# ---- /v1/embeddings -------------------------------------------------------------------------


def test_embeddings_happy_path(client, embedder) -> None:
    resp = client.post("/v1/embeddings", json={"input": TEXTS, "model": embedder.model_name})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "list" and body["model"] == embedder.model_name
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    vecs = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    assert vecs.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vecs, embedder.encode(TEXTS), atol=1e-5)  # order kept
    tokens = sum(len(x) for x in embedder.tokenize(TEXTS))
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_string_input_equals_list_of_one(client) -> None:
    one = client.post("/v1/embeddings", json={"input": TEXTS[1]}).json()
    listed = client.post("/v1/embeddings", json={"input": [TEXTS[1]]}).json()
    assert len(one["data"]) == 1
    assert one["data"][0]["embedding"] == pytest.approx(listed["data"][0]["embedding"], abs=1e-6)


def test_base64_encoding(client) -> None:
    import base64

    f = client.post("/v1/embeddings", json={"input": "hi"}).json()["data"][0]["embedding"]
    b = client.post("/v1/embeddings", json={"input": "hi", "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, f, atol=1e-6)


def test_base64_float16_halves_the_bytes_and_keeps_the_vector(client) -> None:
    import base64

    texts = ["hi", TEXTS[1]]
    f32 = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()["data"]
    r = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64", "embedding_dtype": "float16"})
    assert r.status_code == 200
    for a, b in zip(f32, r.json()["data"], strict=True):
        full = base64.b64decode(a["embedding"])
        half = base64.b64decode(b["embedding"])
        assert len(half) * 2 == len(full)
        np.testing.assert_allclose(np.frombuffer(half, "<f2").astype(np.float32), np.frombuffer(full, "<f4"),
                                   atol=1e-3)
    # float16 is base64 only; anything else is named
    assert "embedding_dtype" in error_message(client.post("/v1/embeddings", json={"input": "hi", "embedding_dtype": "float16"}),
                                              422, "validation_error")
    assert client.post("/v1/embeddings", json={"input": "hi", "embedding_dtype": "int8"}).status_code == 422


def test_empty_list_is_400(client) -> None:
    assert "empty" in error_message(client.post("/v1/embeddings", json={"input": []}), 400, "empty_input")


def test_blank_text_is_400(client) -> None:
    msg = error_message(client.post("/v1/embeddings", json={"input": ["ok", "  "]}), 400, "empty_input")
    assert "input[1]" in msg


def test_too_many_texts_is_413(client) -> None:
    msg = error_message(client.post("/v1/embeddings", json={"input": ["x"] * 9}), 413, "too_large")
    assert "9 texts" in msg and "max_texts_per_request" in msg


def test_wrong_type_is_422(client) -> None:
    msg = error_message(client.post("/v1/embeddings", json={"input": 5}), 422, "validation_error")
    assert "input" in msg


def test_list_of_ints_is_422(client) -> None:
    error_message(client.post("/v1/embeddings", json={"input": [1, 2]}), 422, "validation_error")


def test_unknown_field_is_422(client) -> None:
    msg = error_message(client.post("/v1/embeddings", json={"input": "a", "path": "/etc/passwd"}),
                        422, "validation_error")
    assert "path" in msg


def test_unknown_model_is_422(client) -> None:
    msg = error_message(client.post("/v1/embeddings", json={"input": "a", "model": "gpt-x"}), 422,
                        "validation_error")
    assert "gpt-x" in msg


def test_invalid_json_is_422(client) -> None:
    resp = client.post("/v1/embeddings", content=b"{not json",
                       headers={"content-type": "application/json"})
    error_message(resp, 422, "validation_error")


def test_body_too_large_is_413(client) -> None:
    resp = client.post("/v1/embeddings", json={"input": ["y" * 400] * 60})
    assert "max_body_bytes" in error_message(resp, 413, "too_large")


def test_long_input_is_truncated(client, embedder) -> None:
    text = "the moon " * 60  # 540 chars > max_input_chars=500
    got = client.post("/v1/embeddings", json={"input": text}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(got, embedder.encode([text[:500]])[0], atol=1e-5)


def test_long_input_413_without_truncate(embedder) -> None:
    app = create_app(ServerLimits(max_input_chars=100, truncate=False), embedder=embedder)
    with TestClient(app) as c:
        msg = error_message(c.post("/v1/embeddings", json={"input": "a" * 101}), 413, "too_large")
        assert "max_input_chars" in msg
        too_many_tokens = "word " * 300  # 1500 chars (under 5000) but ~300 tokens
        app2 = create_app(ServerLimits(max_input_chars=5000, truncate=False), embedder=embedder)
        with TestClient(app2) as c2:
            msg = error_message(c2.post("/v1/embeddings", json={"input": too_many_tokens}), 413, "too_large")
            assert "max_seq_length" in msg


def test_auth(embedder) -> None:
    with TestClient(create_app(ServerLimits(api_keys=["s3cret"]), embedder=embedder)) as c:
        assert c.get("/health").status_code == 200  # probes need no key
        resp = c.post("/v1/embeddings", json={"input": "a"})
        assert "Bearer" in error_message(resp, 401, "unauthorized")
        assert resp.headers["www-authenticate"] == "Bearer"
        wrong = c.post("/v1/embeddings", json={"input": "a"}, headers={"Authorization": "Bearer nope"})
        error_message(wrong, 401, "unauthorized")
        ok = c.post("/v1/embeddings", json={"input": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == 384
        assert c.post("/v1/embeddings", json={"input": "a"},
                      headers={"Authorization": "bearer  s3cret "}).status_code == 200  # as HTTPBearer reads it
        # without a key nothing is said of the body: its parse errors came back 422 before the 401
        json_type = {"content-type": "application/json"}
        for body in (b'{"input":', b'{"input": "a", "input": "b"}', b"[" * 5000 + b"]" * 5000, b'{"bogus": 1}'):
            for auth in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic czNjcmV0"}):
                error_message(c.post("/v1/embeddings", content=body, headers={**json_type, **auth}), 401, "unauthorized")
        assert "repeated_key" in c.post("/v1/embeddings", content=b'{"input": "a", "input": "b"}', headers={
            **json_type, "Authorization": "Bearer s3cret"}).text  # with the key, the body's own answer


def test_overload_is_429_with_retry_after(embedder) -> None:
    runner = _blocking()
    cfg = ServerLimits(batcher=BatcherConfig(max_batch_size=1, max_queue=2, max_wait_ms=0))
    with TestClient(create_app(cfg, embedder=embedder, run_batch=runner)) as c:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(c.post, "/v1/embeddings", json={"input": "a"})
            assert runner.started.wait(5)  # "a" is running; the queue is empty
            second = pool.submit(c.post, "/v1/embeddings", json={"input": "x"})
            batcher = c.app.state.serving.batcher
            deadline = time.monotonic() + 5
            while batcher.stats()["queue_depth"] < 1:  # "x" waits in the queue
                assert time.monotonic() < deadline
                time.sleep(0.01)
            # "b" takes the last queue place, "c" overflows.
            resp = c.post("/v1/embeddings", json={"input": ["b", "c"]})
            assert "max_queue" in error_message(resp, 429, "overloaded")
            assert resp.headers["retry-after"] == "1"
            runner.release.set()
            assert first.result(10).status_code == 200 and second.result(10).status_code == 200
        stats = c.app.state.serving.batcher.stats()
        assert stats["items_rejected"] == 1 and stats["items_run"] == 2  # "b" was dropped


def test_a_request_of_more_items_than_the_queue_holds_is_413(embedder) -> None:
    """With max_queue 8, a 20-text request got 429 'retry after 0.02 s' for ever: it could never be
    queued (found by fuzzing, 2026-12-06)."""
    cfg = ServerLimits(batcher=BatcherConfig(max_queue=8))
    with TestClient(create_app(cfg, embedder=embedder)) as c:
        resp = c.post("/v1/embeddings", json={"input": ["t"] * 20})
        assert resp.status_code == 413, resp.text
        assert "20 items, more than the server's queue holds (8" in resp.json()["error"]["message"]
        assert c.post("/v1/embeddings", json={"input": ["t"] * 8}).status_code == 200


def test_timeout_is_504(embedder) -> None:
    runner = _blocking()
    with TestClient(create_app(ServerLimits(request_timeout_s=0.3), embedder=embedder,
                               run_batch=runner)) as c:
        try:
            msg = error_message(c.post("/v1/embeddings", json={"input": "a"}), 504, "timeout")
            assert "request_timeout_s" in msg
        finally:
            runner.release.set()


def test_runner_failure_is_500(embedder) -> None:
    def broken(batch):
        raise RuntimeError("device lost")

    with TestClient(create_app(ServerLimits(), embedder=embedder, run_batch=broken)) as c:
        msg = error_message(c.post("/v1/embeddings", json={"input": "a"}), 500, "runner_error")
        assert "device lost" in msg


# ---- /v1/route ------------------------------------------------------------------------------


def test_route_happy_path(client) -> None:
    body = client.post("/v1/route", json={"query": "how long should I knead bread dough?",
                                          "top_k": 2}).json()
    assert body["sources"][0]["source"] == "cooking" and len(body["sources"]) == 2
    assert body["sources"][0]["score"] >= body["sources"][1]["score"]
    history = [{"role": "user", "content": "How do I configure the Lumen cache eviction policy?"},
               {"role": "assistant", "content": "Set lumen.eviction.policy in lumen.yaml."}]
    serial = client.post("/v1/route", json={"query": "Where can I find it?", "history": history}).json()
    assert serial["mode"] == "serial" and serial["sources"][0]["source"] == "code"


def test_route_empty_query_is_400(client) -> None:
    error_message(client.post("/v1/route", json={"query": "   "}), 400, "empty_input")


def test_route_bad_mode_is_422(client) -> None:
    assert "mode" in error_message(client.post("/v1/route", json={"query": "q", "mode": "x"}), 422,
                                   "validation_error")


def test_route_internal_error_is_500_and_server_survives(embedder) -> None:
    class Broken:
        def route(self, *a):
            raise KeyError("boom")

        def close(self):
            pass

    app = create_app(ServerLimits(), embedder=embedder, router=Broken())
    with TestClient(app, raise_server_exceptions=False) as c:
        error_message(c.post("/v1/route", json={"query": "q"}), 500, "internal_error")
        assert c.get("/health").status_code == 200


# ---- probes, shutdown, misc ----------------------------------------------------------------


def test_health_ready_and_attach(embedder) -> None:
    app = create_app(ServerLimits())
    with TestClient(app) as c:
        assert c.get("/health").json() == {"status": "ok"}
        error_message(c.get("/ready"), 503, "not_ready")
        error_message(c.post("/v1/embeddings", json={"input": "a"}), 503, "not_ready")
        app.state.serving.attach(embedder=embedder)
        assert c.get("/ready").json()["models"]["embeddings"] == embedder.model_name
        error_message(c.post("/v1/route", json={"query": "q"}), 404, "not_served")  # ready, and no router
    assert app.state.serving.batcher.closed and app.state.serving.shutting_down


def test_unknown_path_uses_error_body(client) -> None:
    error_message(client.get("/nope"), 404, "http_error")
    error_message(client.get("/v1/embeddings"), 405, "http_error")
    # a trailing slash was a 307 redirect with an empty body, which POST clients do not follow
    error_message(client.post("/v1/embeddings/", json={"input": "a"}, follow_redirects=False), 404, "http_error")


def test_a_long_unserved_dimensions_is_not_echoed_whole(client) -> None:
    """dimensions of 4,000 digits came back whole in the message (4.3 KB)."""
    big = int("9" * 4000)
    body = json.dumps({"input": "a", "dimensions": big}).encode()
    resp = client.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})
    msg = error_message(resp, 422, "validation_error")
    assert len(msg) < 600 and msg.startswith("dimensions: 99999999999999999999... is not served")


def test_error_table_order() -> None:
    # A subclass listed after its parent would never be reached.
    classes = [cls for cls, _, _ in ERROR_TABLE]
    for i, cls in enumerate(classes):
        assert not any(issubclass(cls, earlier) for earlier in classes[:i]), cls


def test_config_rejects_bad_values() -> None:
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError, match="max_texts_per_request"):
        ServerLimits(max_texts_per_request=0)
    # a CORS origin is scheme://host[:port] (audit 2026-12-07: "notaurl" started a server whose
    # CORS answered no browser)
    for origin in ("notaurl", "https://app.example.com/", "https://app.example.com/path"):
        with pytest.raises(ConfigError, match="cors_origins: .* are not origins"):
            ServerLimits(cors_origins=[origin])
    assert ServerLimits(cors_origins=["*", "http://localhost:3000", "https://app.example.com"]).cors_origins


def test_concurrent_requests_get_their_own_answers(client, embedder) -> None:
    texts = [f"request number {i} about {'bread' if i % 2 else 'stars'} " + "x" * (i % 7)
             for i in range(64)]
    expected = embedder.encode(texts)

    def call(i: int) -> np.ndarray:
        resp = client.post("/v1/embeddings", json={"input": texts[i]})
        assert resp.status_code == 200, resp.text
        return np.array(resp.json()["data"][0]["embedding"], dtype=np.float32)

    with ThreadPoolExecutor(8) as pool:
        got = np.stack(list(pool.map(call, range(64))))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert max(client.app.state.serving.batcher.stats()["last_batch_sizes"]) > 1  # batched


class _FakeEmbedder:
    """Just what the HTTP layer needs from an embedder (no model: fast, deterministic)."""

    model_name, dim, max_seq_length = "fake", 384, 16

    def tokenize(self, texts):
        return [[1] * min(len(t), 16) for t in texts]


def test_chunked_body_over_limit_is_413() -> None:
    app = create_app(ServerLimits(max_body_bytes=100), embedder=_FakeEmbedder(), run_batch=_blocking())

    def chunks():  # no Content-Length: the limit counts the bytes received
        yield b'{"input": "'
        yield b"a" * 200
        yield b'"}'

    with TestClient(app) as c:
        resp = c.post("/v1/embeddings", content=chunks(), headers={"content-type": "application/json"})
        assert "max_body_bytes" in error_message(resp, 413, "too_large")


def test_shutdown_answers_requests_in_flight() -> None:
    # The lifespan's exit calls state.close() (checked in test_health_ready_and_attach); call
    # it directly here so the test client's event loop stays up to deliver the answers (uvicorn
    # also waits for open connections before the lifespan exit).
    runner = _blocking()
    app = create_app(ServerLimits(batcher=BatcherConfig(max_batch_size=1)),
                     embedder=_FakeEmbedder(), run_batch=runner)
    state = app.state.serving
    with TestClient(app) as c, ThreadPoolExecutor(3) as pool:
        pending = [pool.submit(c.post, "/v1/embeddings", json={"input": t}) for t in ("a", "b")]
        assert runner.started.wait(5)
        for _ in range(500):  # until the second item is queued behind the running one
            if state.batcher.stats()["queue_depth"] == 1:
                break
            threading.Event().wait(0.01)
        closing = pool.submit(state.close)
        threading.Event().wait(0.1)
        assert not state.ready and not closing.done()  # draining: waits for the runner
        error_message(c.post("/v1/embeddings", json={"input": "late"}), 503, "not_ready")
        runner.release.set()
        closing.result(5)
        assert [f.result(5).status_code for f in pending] == [200, 200]
    assert state.batcher.stats()["items_run"] == 2


def test_serve_command_builds_an_app_from_yaml_and_overrides(tmp_path, small_index) -> None:
    import argparse

    from fastapi.testclient import TestClient
    from searchsmith.serving.serve_cli import build_app, configure_serve

    cfg_file = tmp_path / "serve.yaml"
    cfg_file.write_text("server:\n  max_texts_per_request: 2\n  batcher:\n    max_batch_size: 4\nsearch: false\n")
    parser = argparse.ArgumentParser()
    configure_serve(parser)
    args = parser.parse_intermixed_args(["--config", str(cfg_file), "--index", str(small_index),
                                         "server.batcher.max_wait_ms=1.0"])
    cfg, app = build_app(args)
    assert cfg.server.batcher.max_batch_size == 4 and cfg.server.batcher.max_wait_ms == 1.0
    with TestClient(app) as client:
        assert client.post("/v1/embeddings", json={"input": ["a", "b", "c"]}).status_code == 413
        r = client.post("/v1/route", json={"query": "bread dough"})
        assert r.status_code == 200 and r.json()["sources"][0]["source"] == "cooking"
        assert client.get("/ready").json()["models"]["search"] is False


def test_metrics_count_requests_batches_and_padding(embedder) -> None:
    from fastapi.testclient import TestClient
    from searchsmith.serving.http import create_app
    from searchsmith.serving.limits import ServerLimits

    with TestClient(create_app(ServerLimits(), embedder=embedder)) as client:
        assert client.post("/v1/embeddings", json={"input": ["one text", "and a second, longer text"]}).status_code == 200
        assert client.post("/v1/embeddings", json={"input": []}).status_code == 400
        body = client.get("/metrics").text
    assert 'searchsmith_requests_total{endpoint="/v1/embeddings",status="200"} 1.0' in body
    assert 'searchsmith_requests_total{endpoint="/v1/embeddings",status="400"} 1.0' in body
    assert 'searchsmith_request_seconds_count{endpoint="/v1/embeddings"} 2.0' in body
    assert "searchsmith_batch_size_count" in body and "searchsmith_queue_depth" in body
    eff = [line for line in body.splitlines() if line.startswith("searchsmith_padding_efficiency{")]
    assert eff and 0.0 < float(eff[0].rsplit(" ", 1)[1]) <= 1.0


# ---- /docs works offline ------------------------------------------------------------------------


def test_docs_load_swagger_ui_from_this_server_only(client) -> None:
    import re

    from searchsmith.serving.http import SWAGGER_DIR

    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(r"url: '([^']+)'", page.text)
    assert len(urls) >= 4 and not re.search(r"https?://", page.text), page.text  # no CDN, nothing remote
    for url in urls:
        assert url.startswith("/"), url
        resp = client.get(url)
        assert resp.status_code == 200 and len(resp.content) > 100, url
    assert client.get("/docs/assets/swagger-ui-bundle.js").content == (SWAGGER_DIR / "swagger-ui-bundle.js").read_bytes()
    for name in ("LICENSE", "NOTICE"):  # the vendored assets carry their licence
        assert (SWAGGER_DIR / name).is_file()
    assert client.get("/redoc").status_code == 404  # not vendored: no page that would stay blank offline
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"  # the Authorize button


def test_docs_need_no_key_but_the_api_does(embedder) -> None:
    with TestClient(create_app(ServerLimits(api_keys=["k"]), embedder=embedder)) as c:
        assert c.get("/docs").status_code == 200 and c.get("/openapi.json").status_code == 200
        assert c.get("/docs/assets/swagger-ui.css").status_code == 200
        error_message(c.get("/v1/models"), 401, "unauthorized")
        listed = c.get("/v1/models", headers={"Authorization": "Bearer k"}).json()
        assert [m["id"] for m in listed["data"]] == [embedder.model_name]


# ---- bad bodies and slow clients (found by probing a running server, 2026-12-06) ------------------


def test_malformed_json_names_the_body_and_the_character(client) -> None:
    resp = client.post("/v1/route", content=b'{"query": "q",}', headers={"content-type": "application/json"})
    msg = error_message(resp, 422, "validation_error")
    assert resp.json()["error"]["param"] == "body" and msg.startswith("body: not valid JSON at character 14")


def test_json_sent_as_text_says_to_send_it_as_json(client) -> None:
    """415, as a charset other than UTF-8 is (it was 422 while the charset was 415), naming the
    type sent and the one to send."""
    # "json" in the name is not enough: FastAPI reads application/json and application/*+json only
    for kind in ("text/plain", "application/x-www-form-urlencoded", "text/json", "application/jsonx",
                 "application/x-ndjson"):
        resp = client.post("/v1/route", content=b'{"query": "q"}', headers={"content-type": kind})
        msg = error_message(resp, 415, "unsupported_media_type")
        assert msg.startswith(f"body: sent as Content-Type {kind!r}, which this endpoint does not read; send the "
                              "JSON object with 'Content-Type: application/json'"), msg
        assert resp.json()["error"]["param"] == "body" and resp.json()["error"]["code"] == "content_type"
        assert resp.headers["accept-post"] == "application/json"
    # none: refused too (this FastAPI does not read it as JSON; older ones guessed), not read one way or another
    msg = error_message(client.post("/v1/route", content=b'{"query": "q"}'), 415, "unsupported_media_type")
    assert msg.startswith("body: sent without a Content-Type; send the JSON object with 'Content-Type: application/json'")
    for kind in ("application/json; charset=utf-8", "application/vnd.api+json", "Application/JSON"):
        assert client.post("/v1/route", content=b'{"query": "q"}', headers={"content-type": kind}).status_code == 200
    # an empty body is missing, whatever its type
    assert "without a Content-Type" not in error_message(client.post("/v1/route", content=b""), 422, "validation_error")


def test_json_nested_past_the_parser_depth_is_a_clear_422(client) -> None:
    deep = b'{"query": "q", "history": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    resp = client.post("/v1/route", content=deep, headers={"content-type": "application/json"})
    msg = error_message(resp, 422, "validation_error")
    assert "nested deeper" in msg and resp.json()["error"]["code"] == "too_deep"


def test_an_integer_past_the_parsers_digits_is_a_clear_422(client) -> None:
    """dimensions with 4,301 digits got a generic 400 'There was an error parsing the body'
    (Python's int_max_str_digits ValueError; found by fuzzing, 2026-12-06)."""
    body = b'{"input": "a", "dimensions": ' + b"9" * 4301 + b"}"
    resp = client.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})
    msg = error_message(resp, 422, "validation_error")
    assert msg.startswith("body: a number has more digits than the parser reads")
    assert resp.json()["error"]["code"] == "number_too_long"


def test_nan_is_not_a_number_a_client_may_send(small_index, embedder) -> None:
    from searchsmith.models.config import from_dict
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    pipe = Pipeline(from_dict(PipelineConfig, {"protocol": {"enabled": True}}), Index.load(small_index, embedder=embedder),
                    embedder)
    with TestClient(create_app(ServerLimits(), pipeline=pipe)) as c:
        for bad in (b"NaN", b"Infinity", b"-Infinity"):
            resp = c.post("/v1/feedback", content=b'{"query_id": "x", "quality": ' + bad + b"}",
                          headers={"content-type": "application/json"})
            assert "finite" in error_message(resp, 422, "validation_error"), bad
            assert resp.json()["error"]["param"] == "quality"


def test_health_answers_head_for_load_balancers(client) -> None:
    assert client.head("/health").status_code == 200 and client.get("/health").json() == {"status": "ok"}


def test_every_get_route_answers_head_without_a_body(client) -> None:
    """HEAD got 405 on every GET route but /health (/ready, /metrics, /v1/models ...): readiness
    probes that use HEAD saw the server failing (found by probing, 2026-12-06)."""
    for path in ("/ready", "/metrics", "/v1/models", "/docs", "/openapi.json"):
        get, head = client.get(path), client.head(path)
        assert head.status_code == get.status_code, path
        assert head.content == b"" and head.headers.get("content-type") == get.headers.get("content-type"), path
    assert client.head("/v1/embeddings").status_code == 405  # a POST route stays POST
    assert "/health" in client.get("/openapi.json").json()["paths"]
    assert not any("head" in ops for ops in client.get("/openapi.json").json()["paths"].values())


def test_a_websocket_handshake_gets_an_error_body(client) -> None:
    """Starlette closed a handshake with a bare 403 and no word of why (helper-41's audit)."""
    import asyncio

    from searchsmith.serving.middleware import NoWebSocket
    from starlette.testclient import WebSocketDenialResponse

    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect("/v1/search"):
            pass
    assert "no WebSocket endpoint" in error_message(denied.value, 404, "http_error")
    assert denied.value.json()["error"]["code"] == "websocket_unsupported"
    assert client.get("/health").status_code == 200  # HTTP passes through
    # a server without the HTTP-answer extension: closed with 1008 and the reason
    sent: list[dict] = []

    async def handshake() -> None:
        async def receive() -> dict:
            return {"type": "websocket.connect"}

        async def send(message: dict) -> None:
            sent.append(message)

        await NoWebSocket(None)({"type": "websocket", "path": "/ws"}, receive, send)

    asyncio.run(handshake())
    assert sent[0]["type"] == "websocket.close" and sent[0]["code"] == 1008 and "/ws: " in sent[0]["reason"]


def test_a_model_id_with_a_slash_is_found(client) -> None:
    """/v1/models lists 'sentence-transformers/all-MiniLM-L6-v2', and /v1/models/{id} answered 404
    for it (the OpenAI SDK's models.retrieve(id))."""
    listed = client.get("/v1/models").json()["data"]
    full = next(row["id"] for row in listed if "/" in row["id"])
    assert client.get(f"/v1/models/{full}").json()["id"] == full
    assert client.get("/v1/models/" + full.replace("/", "%2F")).json()["id"] == full
    assert client.get("/v1/models/no/such-model").status_code == 404


def test_route_goes_through_a_bounded_queue(embedder, router) -> None:
    """/v1/route ran in the unbounded thread pool: a flood queued without limit, starved the
    batched endpoints' tokenizing and never got a 429."""
    gate = threading.Event()
    started = threading.Event()

    class Slow:
        def route(self, *args):
            started.set()
            gate.wait(10)
            return router.route(*args)

        def close(self):
            router.close()

    cfg = ServerLimits(calls=BatcherConfig(max_batch_size=1, max_queue=1, max_wait_ms=0))
    with TestClient(create_app(cfg, embedder=embedder, router=Slow())) as c, ThreadPoolExecutor(2) as pool:
        first = pool.submit(c.post, "/v1/route", json={"query": "bread"})
        assert started.wait(5)
        second = pool.submit(c.post, "/v1/route", json={"query": "rings"})  # takes the one queue place
        deadline = threading.Event()
        while c.app.state.serving.gates["route"].stats()["queue_depth"] < 1 and not deadline.wait(0.01):
            pass
        assert "max_queue" in error_message(c.post("/v1/route", json={"query": "dough"}), 429, "overloaded")
        gate.set()
        assert first.result(10).status_code == 200 and second.result(10).status_code == 200


def test_route_timeout_says_which_limit(embedder, router) -> None:
    gate = threading.Event()

    class Stuck:
        def route(self, *args):
            gate.wait(10)
            return router.route(*args)

        def close(self):
            pass

    with TestClient(create_app(ServerLimits(request_timeout_s=0.3), embedder=embedder, router=Stuck())) as c:
        try:
            msg = error_message(c.post("/v1/route", json={"query": "bread"}), 504, "timeout")
            assert msg.startswith("/v1/route: no answer within 0.3 s (server.request_timeout_s)")
        finally:
            gate.set()


def test_a_body_that_stops_arriving_gets_408() -> None:
    """A client that sends part of its body and stalls holds nothing past the timeout."""
    import asyncio

    from searchsmith.serving.middleware import BodyLimit

    async def app(scope, receive, send):  # never reached
        raise AssertionError("the app must not see a stalled body")

    sent: list[dict] = []
    parts = [{"type": "http.request", "body": b'{"query": ', "more_body": True}]

    async def receive():
        if parts:
            return parts.pop()
        await asyncio.sleep(30)  # the rest never comes
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/route", "headers": [(b"content-length", b"1000")]}
    asyncio.run(asyncio.wait_for(BodyLimit(app, max_bytes=10_000, timeout_s=0.2)(scope, receive, send), 5))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 408
    body = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    assert "10 bytes arrived in 0.2 s" in body and "server.request_timeout_s" in body


@pytest.mark.parametrize("text", ["\u007f", "\u200b\ufeff", " \u200b ", "\u2060"])
def test_text_of_invisible_characters_only_is_empty(client, text) -> None:
    """'\\u0000' or '\\u200b' passed str.strip(): the embedding of nothing, or a search for nothing,
    came back instead of a 400 (found by fuzzing, 2026-12-06). ('\\u0000' is now refused before,
    422 as a control character: test_request_fuzz; DEL is not one of those.)"""
    resp = client.post("/v1/embeddings", json={"input": ["fine", text]})
    assert "input[1]: the text is empty" in error_message(resp, 400, "empty_input")
    assert "query: is empty" in error_message(client.post("/v1/route", json={"query": text}), 400, "empty_input")


def test_route_cuts_a_query_past_max_input_chars(embedder, router) -> None:
    """/v1/route took a 1 MB query whole (the other endpoints hold texts to server.max_input_chars)."""
    with TestClient(create_app(ServerLimits(max_input_chars=100, truncate=False), embedder=embedder,
                               router=router)) as c:
        resp = c.post("/v1/route", json={"query": "bread " * 100})
    assert resp.status_code == 413, resp.text
    msg = resp.json()["error"]["message"]
    assert "query: 600 characters, the limit is 100 (server.max_input_chars)" in msg


def test_bad_requests_name_what_was_wrong(client) -> None:
    """Found by fuzzing (2026-12-06): an unknown field 'Model' was reported as 'body' (a capital
    read as a union tag); 405 and 404 said only 'Method Not Allowed' / 'Not Found'; a gzip body
    was 'byte 1 is not valid UTF-8'; /v1/images/place took an image id ''."""
    import gzip

    resp = client.post("/v1/embeddings", json={"input": "a", "Model": "x"})
    assert error_message(resp, 422, "validation_error").startswith("Model: Extra inputs") and resp.json()["error"]["param"] == "Model"
    assert "this path answers POST" in error_message(client.put("/v1/embeddings"), 405, "http_error")
    assert "the API is under /v1" in error_message(client.get("/v2/embeddings"), 404, "http_error")
    resp = client.post("/v1/embeddings", content=gzip.compress(b'{"input": "a"}'),
                       headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert "compressed bodies are not accepted" in error_message(resp, 422, "validation_error")
    for encoding in ("gzip", "br"):  # a plain body under that header was answered 200, read as plain
        resp = client.post("/v1/embeddings", content=b'{"input": "a"}',
                           headers={"content-type": "application/json", "content-encoding": encoding})
        assert "compressed bodies are not accepted" in error_message(resp, 422, "validation_error")
    resp = client.post("/v1/embeddings", content=b'{"input": "a"}',
                       headers={"content-type": "application/json", "content-encoding": "identity"})
    assert resp.status_code == 200
    resp = client.post("/v1/images/place", json={"paragraphs": ["a"], "images": [{"id": " ", "caption": "c"}]})
    assert error_message(resp, 422, "validation_error").startswith("images[0].id: is empty")


def test_openapi_documents_what_the_non_json_routes_send(client) -> None:
    """/metrics was documented as JSON (it is Prometheus text), /v1/images/file as JSON (it is an
    image), and /ready's 503 not at all (schemathesis, 2026-12-06)."""
    paths = client.get("/openapi.json").json()["paths"]
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == [client.get("/metrics").headers["content-type"]]
    assert "image/png" in paths["/v1/images/file"]["get"]["responses"]["200"]["content"]
    assert "application/json" not in paths["/v1/images/file"]["get"]["responses"]["200"]["content"]
    assert "503" in paths["/ready"]["get"]["responses"]


def test_openapi_lists_415_where_a_body_is_read(client) -> None:
    """A body in another media type or charset is 415; /docs listed 400, 413, 422... but not 415.
    Every operation that takes a body lists it (the error body, what to send), and only those."""
    spec = client.get("/openapi.json").json()
    with_body = 0
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            listed = op["responses"]
            if "requestBody" in op:
                with_body += 1
                assert set(op["requestBody"]["content"]) == {"application/json"}, (path, method)
                assert listed["415"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"}, (path, method)
                assert "Content-Type: application/json" in listed["415"]["description"], (path, method)
            else:
                assert "415" not in listed, (path, method)
            if "422" in listed and path.startswith("/v1/"):
                assert "control character" in listed["422"]["description"], (path, method)
    assert with_body == 8  # the POST endpoints

@pytest.mark.parametrize("tokens", [[1, 2], [[1, 2], [3]]])
def test_token_arrays_are_refused_plainly(client, tokens) -> None:
    """OpenAI takes token ids too; they got the union's noise ('input: Input should be a valid string;
    input[0]: ...') instead of saying they are not supported (fuzzing, 2026-12-06)."""
    resp = client.post("/v1/embeddings", json={"input": tokens})
    assert error_message(resp, 422, "validation_error").startswith("input: token-id arrays are not supported")
    assert resp.json()["error"]["code"] == "token_arrays"


def test_a_key_written_twice_is_422_naming_it(client) -> None:
    """JSON parsers keep the last value: {"input": "a", "input": "b"} would embed "b" silently."""
    resp = client.post("/v1/embeddings", content=b'{"input": "a", "input": "b"}',
                       headers={"content-type": "application/json"})
    msg = error_message(resp, 422, "validation_error")
    assert "input" in msg and "twice" in msg
    assert resp.json()["error"]["param"] == "input" and resp.json()["error"]["code"] == "repeated_key"
    nested = client.post("/v1/route", content=b'{"query": "where", "history": [{"role": "user", "content": "a", '
                                              b'"content": "b"}]}', headers={"content-type": "application/json"})
    error_message(nested, 422, "validation_error")
    assert nested.json()["error"]["param"] == "history[0].content"


def test_a_body_parsed_once_still_answers_as_before(client) -> None:
    """The body is parsed once for the repeated-key check; FastAPI reads that value."""
    ok = client.post("/v1/embeddings", content=json.dumps({"input": ["a", "b"]}).encode(),
                     headers={"content-type": "application/json"})
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2
    no_type = client.post("/v1/embeddings", content=b'{"input": "a", "input": "b"}')
    assert error_message(no_type, 415, "unsupported_media_type").startswith("body: sent without a Content-Type")
