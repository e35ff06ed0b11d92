"""The real OpenAI Python SDK against a real uvicorn server on loopback (fake models: fast).

What a user of ``OpenAI(base_url="http://HOST:PORT/v1")`` sees: embeddings as floats and as
base64, error messages in the SDK's exceptions (not just "Error code: 422"), a model alias,
a wrong model name and ``dimensions`` (full, a Matryoshka truncation, refused).
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the OpenAI SDK is a dev dependency: pip install -e '.[dev]'")

DIM = 8
API_KEY = "sk-test-key"
SERVER_LIFETIME_S = 300  # the server stops by itself even if the fixture's teardown never runs


class MatryoshkaEmbedBundle:
    """An ``embed`` bundle whose manifest says it was trained for 4- and 8-dim prefixes.

    A text's vector is a deterministic function of its characters (unit length), so the
    test can compute the expected answer without a model.
    """

    task, tokenizer, max_length = "embed", None, 16
    manifest = {"embedding_dim": DIM, "max_length": 16, "matryoshka_dims": [4, 8]}

    def encode(self, texts):
        rows = []
        for t in texts:
            v = np.array([(sum(map(ord, t)) * (i + 1)) % 97 + 1.0 for i in range(DIM)], dtype=np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)


@pytest.fixture(scope="module")
def base_url():
    from searchsmith.serving.http import create_app
    from searchsmith.serving.limits import ServedModel, ServerLimits
    from searchsmith.serving.profiling.server import LoopbackServer
    from searchsmith.serving.runner import BundleEmbedder

    cfg = ServerLimits(api_keys=[API_KEY], request_timeout_s=30.0,
                       embeddings_model=ServedModel(name="minilm", aliases=["text-embedding-3-small"]))
    app = create_app(cfg, embedder=BundleEmbedder(MatryoshkaEmbedBundle(), "embedder"))
    with LoopbackServer(app, lifetime_s=SERVER_LIFETIME_S) as server:
        yield f"{server.url}/v1"


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=30)


def expected(texts, dims=DIM):
    full = MatryoshkaEmbedBundle().encode(texts)
    if dims == DIM:
        return full
    return full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)


def test_models_list_shows_the_served_name(client) -> None:
    assert [m.id for m in client.models.list()] == ["minilm"]
    assert client.models.retrieve("text-embedding-3-small").id == "minilm"


def test_embeddings_as_floats(client) -> None:
    texts = ["How long should I knead bread dough?", "Saturn has rings of ice."]
    resp = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert resp.model == "minilm" and [d.index for d in resp.data] == [0, 1]
    np.testing.assert_allclose(np.array([d.embedding for d in resp.data]), expected(texts), atol=1e-6)
    assert resp.usage.prompt_tokens > 0


def test_embeddings_as_base64(client) -> None:
    texts = ["one", "two"]
    raw = client.embeddings.create(model="minilm", input=texts, encoding_format="base64")
    got = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    np.testing.assert_array_equal(got, expected(texts).astype("<f4"))  # bit-exact little-endian float32
    # Without encoding_format the SDK itself asks for base64 and decodes it: the same vectors.
    default = client.embeddings.create(model="minilm", input=texts)
    np.testing.assert_allclose(np.array([d.embedding for d in default.data]), expected(texts), atol=1e-6)


def test_an_alias_is_accepted(client) -> None:
    resp = client.embeddings.create(model="text-embedding-3-small", input="hello", encoding_format="float")
    assert resp.model == "minilm"
    np.testing.assert_allclose(resp.data[0].embedding, expected(["hello"])[0], atol=1e-6)


def test_a_bad_request_shows_its_message_in_the_sdk_exception(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="minilm", input=["fine", "   "])
    err = info.value
    assert "input[1]: the text is empty" in str(err)  # not only "Error code: 400"
    assert err.status_code == 400 and err.param == "input[1]" and err.type == "empty_input"


def test_a_wrong_model_name_lists_the_valid_ones(client) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.embeddings.create(model="text-embedding-ada-002", input="x")
    message = str(info.value)
    assert "'text-embedding-ada-002' is not served here" in message
    assert "'minilm'" in message and "'text-embedding-3-small'" in message
    assert info.value.code == "model_not_found" and info.value.param == "model"
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.models.retrieve("gpt-4")


def test_dimensions(client) -> None:
    full = client.embeddings.create(model="minilm", input="a b c", dimensions=DIM, encoding_format="float")
    np.testing.assert_allclose(full.data[0].embedding, expected(["a b c"])[0], atol=1e-6)
    short = client.embeddings.create(model="minilm", input="a b c", dimensions=4, encoding_format="float")
    vec = np.array(short.data[0].embedding)
    assert vec.shape == (4,) and abs(np.linalg.norm(vec) - 1.0) < 1e-5  # a prefix, unit length again
    np.testing.assert_allclose(vec, expected(["a b c"], 4)[0], atol=1e-6)
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.embeddings.create(model="minilm", input="a b c", dimensions=6)
    assert "dimensions: 6 is not served" in str(info.value) and "[4, 8]" in str(info.value)
    assert info.value.param == "dimensions" and info.value.code == "invalid_dimensions"


def test_a_wrong_key_is_refused_with_the_fix(base_url) -> None:
    bad = openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError, match="server.api_keys"):
        bad.embeddings.create(model="minilm", input="x")
