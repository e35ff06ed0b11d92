"""The recipes' embedding cache: a hit never loads the model; a bad model name fails at once."""

from __future__ import annotations

import numpy as np
import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.training.data import CachedEmbedder


def test_a_cache_hit_does_not_load_the_model_and_gives_the_same_rows(tmp_path) -> None:
    texts = ["The otter eats fish.", "Lumen's eviction lives in lumen/evict.py."]
    first = CachedEmbedder("default", tmp_path)
    a = first.encode(texts)
    assert first._model is not None and a.shape == (2, 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    again = CachedEmbedder("default", tmp_path)
    assert np.array_equal(again.encode(texts), a) and again._model is None  # read from the cache
    b = again.encode(texts[:1])  # other texts: a miss, so the model loads
    assert again._model is not None and np.allclose(b[0], a[0], atol=1e-5)


def test_a_bad_model_name_fails_when_made_naming_the_field(tmp_path) -> None:
    with pytest.raises(ConfigError, match="data.mine_with"):
        CachedEmbedder(str(tmp_path / "no-such-model"), tmp_path)


def test_save_npy_atomic_makes_the_folder_and_leaves_no_temporary_file(tmp_path) -> None:
    """The embedding cache and the image recipe's caption features write through it."""
    from searchsmith.training.data import save_npy_atomic

    path = tmp_path / "cache" / "emb-0123.npy"
    save_npy_atomic(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    save_npy_atomic(path, np.ones((2, 3), dtype=np.float32))  # replaced whole
    assert np.array_equal(np.load(path), np.ones((2, 3), dtype=np.float32))
    assert sorted(p.name for p in path.parent.iterdir()) == ["emb-0123.npy"]
