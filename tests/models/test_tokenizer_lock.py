"""Tokenizer calls from several threads are serialised per tokenizer (models/tokenizer.tokenizer_lock).

A fast tokenizer keeps its truncation/padding settings on one shared object; the server counts
tokens on request threads while the batcher encodes a batch with other settings, which fails
with "RuntimeError: Already borrowed" when two calls overlap.
"""

from __future__ import annotations

import threading
import time

from searchsmith.models.tokenizer import tokenizer_lock
from searchsmith.serving.runner import count_tokens


class OverlapDetector:
    """A tokenizer stand-in that records whether two calls were ever inside it at once."""

    pad_token_id = 0

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.calls = 0
        self._count = threading.Lock()

    def __call__(self, first, second=None, **kwargs):
        with self._count:
            self.inside += 1
            self.calls += 1
            if self.inside > 1:
                self.overlaps += 1
        time.sleep(0.002)  # long enough for another thread to come in, were it allowed
        with self._count:
            self.inside -= 1
        ids = [[1] * (len(t.split()) + 2) for t in first]
        return {"input_ids": ids, "token_type_ids": [[0] * len(x) for x in ids]}


def test_one_lock_per_tokenizer():
    a, b = OverlapDetector(), OverlapDetector()
    assert tokenizer_lock(a) is tokenizer_lock(a) and tokenizer_lock(a) is not tokenizer_lock(b)


def test_counting_and_batch_encoding_never_overlap():
    from searchsmith.models.runtime import Bundle

    tok = OverlapDetector()
    bundle = Bundle.__new__(Bundle)  # only the tokenizing part of a bundle is exercised
    bundle.tokenizer, bundle.max_length, bundle.batch_size, bundle.max_batch_tokens = tok, 32, 8, None

    def count():
        for _ in range(20):
            count_tokens(tok, ["a question"] * 3, ["a passage of text"] * 3)

    def encode():
        for _ in range(20):
            bundle._encode_text(["a question"] * 3, ["a passage of text"] * 3)

    threads = [threading.Thread(target=f) for f in (count, encode, count, encode)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tok.calls == 80 and tok.overlaps == 0
