from __future__ import annotations

import numpy as np
import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.dedup import dedup, dedup_keep_mask


def _unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_drops_near_duplicates_of_kept_passages_only() -> None:
    # b ~ a (dropped); c ~ b but b was dropped and c vs a is below the threshold -> kept
    a, b, c, d = [1, 0, 0], [0.9, 0.44, 0], [0.6, 0.8, 0], [0, 0, 1]
    emb = _unit([a, b, c, d])
    assert dedup_keep_mask(emb, 0.8).tolist() == [True, False, True, True]
    assert dedup(["a", "b", "c", "d"], emb, 0.8) == ["a", "c", "d"]
    # a stricter threshold keeps everything
    assert dedup_keep_mask(emb, 0.99).all()


def test_real_embeddings_of_paraphrases(embedder) -> None:
    texts = ["The Lumen cache evicts least recently used keys.",
             "Lumen's cache evicts the least recently used keys.",
             "Jupiter is the largest planet."]
    assert dedup(texts, embedder.encode(texts)) == [texts[0], texts[2]]


def test_bad_inputs() -> None:
    with pytest.raises(ValidationError, match="2 items but 1 embeddings"):
        dedup(["a", "b"], _unit([[1, 0]]))
    with pytest.raises(ValidationError, match=r"\(N, D\)"):
        dedup_keep_mask(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValidationError, match="dedup:"):
        dedup_keep_mask(_unit([[1, 0]]), threshold=2.0)
    assert dedup([], np.zeros((0, 3), dtype=np.float32)) == []
