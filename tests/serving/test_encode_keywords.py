"""sentence-transformers' ``encode`` keywords on both embedders (models/encode_options.py):
the torch ``Embedder`` and the ONNX ``EmbedBundle`` take what they can honour and refuse, by
name, what they cannot."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from searchsmith.models.encode_options import encode_options
from searchsmith.models.errors import ValidationError
from searchsmith.models.runtime import load_bundle

TEXTS = ["a question about rivers", "the Nile is long", "Kestrel 2 shipped in 2021", "bread"]


@pytest.fixture(scope="module", params=["torch", "onnx"])
def encode(request, embedder):
    if request.param == "torch":
        return embedder.encode
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from export_fixtures import bundle

    return load_bundle(bundle("embed"), device="cpu", task="embed").encode


def test_sentence_transformers_keywords_do_what_they_do_there(encode) -> None:
    plain = encode(TEXTS)
    same = encode(TEXTS, batch_size=1, show_progress_bar=False, convert_to_numpy=True, normalize_embeddings=True,
                  precision="float32")
    assert np.allclose(same, plain, atol=1e-5)  # one text per call: the same vectors
    t = encode(TEXTS, convert_to_tensor=True)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and torch.allclose(t, torch.from_numpy(plain))
    prompted = encode(TEXTS, prompt="query: ")
    assert np.allclose(prompted, encode(["query: " + x for x in TEXTS]), atol=1e-6)
    assert not np.allclose(prompted, plain, atol=1e-3)
    cut = encode(TEXTS, truncate_dim=8)
    assert cut.shape == (len(TEXTS), 8) and np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-5)
    head = plain[:, :8] / np.linalg.norm(plain[:, :8], axis=1, keepdims=True)
    assert np.allclose(cut, head, atol=1e-5)
    assert encode([], convert_to_tensor=True).shape == (0, plain.shape[1])


@pytest.mark.parametrize(("keywords", "message"), [
    ({"normalize_embeddings": False}, "normalize_embeddings=False is not available"),
    ({"precision": "int8"}, "precision 'int8' is not available"),
    ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ({"batch_size": True}, "batch_size must be an int >= 1"),
    ({"truncate_dim": 0}, r"truncate_dim must be an int in \[1, "),
    ({"truncate_dim": 10**6}, r"truncate_dim must be an int in \[1, "),
    ({"convert_to_numpy": False}, "convert_to_numpy=False without convert_to_tensor=True"),
    ({"convert_to_tensor": "yes"}, "convert_to_tensor must be True or False"),
    ({"prompt": 3}, "prompt must be a string"),
    ({"prompt": "\ud800"}, "prompt.*lone surrogate"),
])
def test_what_cannot_be_honoured_is_refused_by_name(encode, keywords, message) -> None:
    with pytest.raises(ValidationError, match=f"encode: {message}"):
        encode(TEXTS, **keywords)


def test_an_unknown_keyword_is_a_type_error_listing_those_taken(encode) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'device'.*truncate_dim"):
        encode(TEXTS, device="cpu")


def test_options_alone() -> None:
    opts = encode_options(dim=4, batch_size=np.int64(2), truncate_dim=4)
    assert opts.batch_size == 2 and type(opts.batch_size) is int
    v = np.eye(4, dtype=np.float32)
    assert opts.finish(v) is v  # all dimensions kept: the array as it was
    assert encode_options(dim=4, truncate_dim=2).finish(np.zeros((1, 4), np.float32)).tolist() == [[0.0, 0.0]]
