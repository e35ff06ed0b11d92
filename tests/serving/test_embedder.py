from __future__ import annotations

import numpy as np
import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.embedder import pack_batches


def test_pack_batches_respects_budget_and_covers_every_item() -> None:
    lengths = [5, 100, 7, 50, 3, 3, 99, 8]
    batches = pack_batches(lengths, max_batch_tokens=200, max_batch_size=3)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) * max(lengths[i] for i in b) <= 200
    # longest first, and the two ~100-token items travel together
    assert set(batches[0]) == {1, 6}


def test_pack_batches_closes_a_batch_before_padding_dominates() -> None:
    lengths = [100, 90, 20, 18, 17, 5]
    # without the floor, everything fits the budget in one batch (6 x 100 = 600 padded tokens)
    assert pack_batches(lengths, 1000, 64) == [[0, 1, 2, 3, 4, 5]]
    batches = pack_batches(lengths, 1000, 64, min_padding_efficiency=0.75)
    assert batches == [[0, 1], [2, 3, 4, 5]]  # 60 real of 80 padded tokens: exactly 0.75
    for b in batches:
        assert sum(lengths[i] for i in b) >= 0.75 * len(b) * max(lengths[i] for i in b)


def test_pack_batches_oversized_item_goes_alone() -> None:
    assert pack_batches([500, 2, 2], max_batch_tokens=100, max_batch_size=8) == [[0], [1, 2]]


def test_matches_sentence_transformers(embedder) -> None:
    from sentence_transformers import SentenceTransformer

    texts = ["short", "a somewhat longer sentence about caches and eviction policies",
             "Quarry " * 300, "", "Jupiter has moons."]
    ours = embedder.encode(texts)
    ref = SentenceTransformer(str(embedder.model_path), device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.shape == (5, 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(ours, ref, atol=2e-5)


def test_order_is_input_order_across_windows() -> None:
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    small = Embedder(EmbedderConfig(window_texts=3, max_batch_tokens=64, max_batch_size=2))
    texts = [f"sentence number {i} " * (1 + i % 4) for i in range(8)]
    got = small.encode(texts)
    for i, t in enumerate(texts):
        np.testing.assert_allclose(got[i], small.encode([t])[0], atol=1e-5)
    assert small.last_stats["texts"] == 1  # the last call embedded one text
    assert 0 < small.last_stats["padding_efficiency"] <= 1


def test_encode_to_file_streams_atomically(tmp_path, embedder) -> None:
    texts = [f"text {i}" for i in range(10)]
    out = embedder.encode_to_file(iter(texts), tmp_path / "v.npy", count=10)
    arr = np.load(out)
    assert arr.shape == (10, 384)
    with pytest.raises(ValidationError, match="expected count=11"):
        embedder.encode_to_file(iter(texts), tmp_path / "w.npy", count=11)
    assert not (tmp_path / "w.npy").exists() and not list(tmp_path.glob("*.tmp*"))


def test_encode_to_file_never_replaces_a_file_it_was_not_told_to(tmp_path, embedder) -> None:
    """It wrote over any file at the path (a user's notes became a .npy), and a folder or a bad
    count left its temporary file behind."""
    mine = tmp_path / "mine.txt"
    mine.write_text("precious")
    with pytest.raises(ValidationError, match="already exists; choose a new path, or pass overwrite=True"):
        embedder.encode_to_file(["a"], mine, 1)
    assert mine.read_text() == "precious"
    (tmp_path / "out").mkdir()
    with pytest.raises(ValidationError, match="is a folder"):
        embedder.encode_to_file(["a"], tmp_path / "out", 1)
    for bad in (-1, "1", True, 1.0):
        with pytest.raises(ValidationError, match="count must be an int >= 0"):
            embedder.encode_to_file(["a"], tmp_path / "v.npy", bad)
    def failing():
        yield "a"
        raise RuntimeError("the source broke")
    with pytest.raises(RuntimeError, match="the source broke"):
        embedder.encode_to_file(failing(), tmp_path / "v.npy", 2)
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob("*.tmp*"))
    assert embedder.encode_to_file(["a"], mine, 1, overwrite=True) == mine and np.load(mine).shape == (1, 384)


def test_rejects_bad_input(embedder) -> None:
    with pytest.raises(ValidationError, match="one string"):
        embedder.encode("not a list")
    with pytest.raises(ValidationError, match="text 1 is int"):
        embedder.encode(["ok", 3])
    assert embedder.encode([]).shape == (0, 384)


def test_huge_text_is_cut_not_crashing(embedder) -> None:
    vec = embedder.encode(["word " * 200_000])
    assert vec.shape == (1, 384) and np.isfinite(vec).all()


@pytest.mark.parametrize("kw,message", [
    ({"max_batch_size": "8"}, "max_batch_size must be an int"),
    ({"max_batch_size": 1.5}, "max_batch_size must be an int"),
    ({"window_texts": True}, "window_texts must be an int"),
    ({"tokenize_workers": "2"}, "tokenize_workers must be an int"),
    ({"packed": "yes"}, "packed must be true or false"),
    ({"model": None}, "model must be 'default'"),
    ({"dtype": "fp64"}, r"dtype must be one of \['auto', 'fp32', 'fp16', 'bf16'\]"),
    ({"min_padding_efficiency": "high"}, "min_padding_efficiency must be a number"),
])
def test_embedder_config_made_in_python_is_typed_as_a_yaml_one(kw, message) -> None:
    """EmbedderConfig(max_batch_size="8") was a raw TypeError, and 1.5, packed="yes", model=None
    and dtype="fp64" (loaded in fp32 without a word) were taken (helper-42's audit)."""
    from searchsmith.serving.embedder import EmbedderConfig

    with pytest.raises(ValueError, match=message):
        EmbedderConfig(**kw)
