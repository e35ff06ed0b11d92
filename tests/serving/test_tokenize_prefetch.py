"""``embedder.tokenize_workers``: tokenization and batch staging ahead of the model.

The prefetching loop must be the inline loop, only earlier: the same vectors bit for bit (padded
and packed), the same errors at the same point of a stream, no thread left behind, and real
overlap (the next window tokenized and the next batch staged while the current batch runs: a
recording tokenizer / model wrapper would see no overlap if the prefetch were removed). The
pinned-memory, non-blocking copy is CUDA-only: on the CPU it must not be taken.
"""

from __future__ import annotations

import copy
import dataclasses
import threading

import numpy as np
import pytest
import torch
from searchsmith.models.errors import ValidationError
from searchsmith.serving.embedder import PREFETCH_THREAD_PREFIX, Embedder, EmbedderConfig, map_ahead

# Mixed lengths (an empty text, a truncated one): windows of 7, 7 and 6 texts, and
# several batches per window under a 256-token budget.
TEXTS = [
    f"{w} " * (1 + (i * 7) % 23) + f"item {i}"
    for i, w in enumerate(["cache", "eviction", "moon", "orbit", "bread", "yeast", "kernel", "thread"] * 2)
] + ["", "Quarry " * 300, "short", "Jupiter has moons."]
SMALL = {"window_texts": 7, "max_batch_tokens": 256, "max_batch_size": 4}
OVERLAP_WAIT_S = 5.0  # how long a recorder waits for the overlapping call before recording "no overlap"


def _leftover_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(PREFETCH_THREAD_PREFIX)]


def _variant(base: Embedder, workers: int, **config: int) -> Embedder:
    """``base`` (same model and tokenizer objects) with other loop settings, without a reload."""
    emb = copy.copy(base)
    emb.config = dataclasses.replace(base.config, tokenize_workers=workers, **config)
    emb.tokenize_workers = workers
    emb.max_batch_tokens = emb.config.max_batch_tokens or base.max_batch_tokens
    return emb


class _Tokenizer:
    """The real tokenizer, recording each call's thread; ``on_call(n)`` runs before call n."""

    def __init__(self, inner, on_call=None) -> None:
        self.inner, self.on_call, self.threads = inner, on_call, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, texts, **kwargs):
        self.threads.append(threading.current_thread().name)
        if self.on_call is not None:
            self.on_call(len(self.threads) - 1)
        return self.inner(texts, **kwargs)


class _Model:
    """The real model; ``on_forward(n)`` runs before forward pass n (counted from 0)."""

    def __init__(self, inner, on_forward) -> None:
        self.inner, self.on_forward, self.calls = inner, on_forward, 0

    def __call__(self, **kwargs):
        self.on_forward(self.calls)
        self.calls += 1
        return self.inner(**kwargs)


@pytest.fixture(autouse=True)
def _no_leftover_threads():
    yield
    assert _leftover_threads() == []


@pytest.fixture(scope="module")
def packed_embedder() -> Embedder:
    return Embedder(EmbedderConfig(packed=True, tokenize_workers=2, **SMALL))


# -- same results -----------------------------------------------------------------------------


def test_config_default_and_validation() -> None:
    assert EmbedderConfig().tokenize_workers is None
    with pytest.raises(ValueError, match="tokenize_workers must be in 0..16"):
        EmbedderConfig(tokenize_workers=-1)


def test_vectors_are_identical_with_workers_on_and_off(embedder) -> None:
    on, off = _variant(embedder, 2, **SMALL), _variant(embedder, 0, **SMALL)
    got, want = on.encode(TEXTS), off.encode(TEXTS)
    assert got.shape == (len(TEXTS), 384)
    assert np.array_equal(got, want)  # bit for bit: same batches, same order
    assert on.last_stats == off.last_stats and on.last_stats["batches"] > 6  # several windows and batches
    # and 1 worker (window tokenization and batch staging queue behind each other)
    assert np.array_equal(_variant(embedder, 1, **SMALL).encode(TEXTS), want)


def test_packed_vectors_are_identical_with_workers_on_and_off(packed_embedder) -> None:
    assert packed_embedder.packed
    got = packed_embedder.encode(TEXTS)
    assert np.array_equal(got, _variant(packed_embedder, 0).encode(TEXTS))
    assert packed_embedder.last_stats["padded_tokens"] == packed_embedder.last_stats["tokens"]


def test_streamed_windows_are_identical(embedder, tmp_path) -> None:
    on, off = _variant(embedder, 2, **SMALL), _variant(embedder, 0, **SMALL)
    parts_on, parts_off = list(on.encode_iter(iter(TEXTS))), list(off.encode_iter(iter(TEXTS)))
    assert [len(p) for p in parts_on] == [len(p) for p in parts_off] == [7, 7, 6]
    assert all(np.array_equal(a, b) for a, b in zip(parts_on, parts_off, strict=True))
    path = on.encode_to_file(iter(TEXTS), tmp_path / "v.npy", count=len(TEXTS))
    assert np.array_equal(np.load(path), np.concatenate(parts_off))


def test_map_ahead_is_map() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        assert list(map_ahead(lambda x: x * x, range(7), pool)) == [x * x for x in range(7)]
        assert list(map_ahead(lambda x: x, [], pool)) == []
    assert list(map_ahead(lambda x: -x, iter([3, 1]), None)) == [-3, -1]


# -- real overlap ------------------------------------------------------------------------------


def test_next_window_is_tokenized_while_the_current_one_runs(embedder) -> None:
    """Window 1's tokenization starts while window 0's first forward pass is under way; inline,
    the forward pass would wait OVERLAP_WAIT_S for it in vain."""
    emb = _variant(embedder, 2, **SMALL)
    forward_started, window1_tokenizing = threading.Event(), threading.Event()
    seen: list[bool] = []

    def on_call(n: int) -> None:
        if n == 1:
            window1_tokenizing.set()
            forward_started.wait(OVERLAP_WAIT_S)

    def on_forward(n: int) -> None:
        if n == 0:
            forward_started.set()
            seen.append(window1_tokenizing.wait(OVERLAP_WAIT_S))

    emb.tokenizer = _Tokenizer(embedder.tokenizer, on_call)
    emb.model = _Model(embedder.model, on_forward)
    got = emb.encode(TEXTS)
    assert seen == [True]
    assert emb.tokenizer.threads and all(t.startswith(PREFETCH_THREAD_PREFIX) for t in emb.tokenizer.threads)
    assert np.array_equal(got, _variant(embedder, 0, **SMALL).encode(TEXTS))


def test_next_batch_is_staged_while_the_current_one_runs(embedder) -> None:
    """Batch n+1's tensors are assembled (in the pool) while batch n's forward pass runs."""
    emb = _variant(embedder, 2, window_texts=64, max_batch_tokens=256, max_batch_size=4)
    n_batches = len(emb._batches([len(x) for x in emb.tokenize(TEXTS)]))  # one window
    started = [threading.Event() for _ in range(n_batches)]
    threads: list[str] = []
    seen: list[bool] = []
    real_stage = emb._stage

    def stage(ids, **kwargs):
        threads.append(threading.current_thread().name)
        started[len(threads) - 1].set()
        return real_stage(ids, **kwargs)

    def on_forward(n: int) -> None:
        if n + 1 < n_batches:
            seen.append(started[n + 1].wait(OVERLAP_WAIT_S))

    emb._stage = stage
    emb.model = _Model(embedder.model, on_forward)
    emb.encode(TEXTS)
    assert n_batches > 4 and seen == [True] * (n_batches - 1)
    assert len(threads) == n_batches and all(t.startswith(PREFETCH_THREAD_PREFIX) for t in threads)


def test_inline_loop_uses_no_thread(embedder) -> None:
    emb = _variant(embedder, 0, **SMALL)
    emb.tokenizer = _Tokenizer(embedder.tokenizer)
    emb.encode(TEXTS)
    assert set(emb.tokenizer.threads) == {threading.current_thread().name}


# -- errors and clean-up -------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_text_in_a_later_window_fails_after_the_earlier_windows(embedder, workers) -> None:
    emb = _variant(embedder, workers, window_texts=3)
    with pytest.raises(ValidationError, match="embed: text 5 is int, expected a string"):
        emb.encode(["a", "b", "c", "d", "e", 3])
    stream = emb.encode_iter(["a", "b", "c", "d", "e", 3])
    assert next(stream).shape == (3, 384)  # window 1's error waits for window 1
    with pytest.raises(ValidationError, match="text 5 is int"):
        next(stream)
    assert _leftover_threads() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_tokenizer_raises_its_own_error(embedder, workers) -> None:
    def on_call(n: int) -> None:
        if n == 1:
            raise RuntimeError("Already borrowed")

    emb = _variant(embedder, workers, **SMALL)
    emb.tokenizer = _Tokenizer(embedder.tokenizer, on_call)
    stream = emb.encode_iter(TEXTS)
    assert next(stream).shape == (7, 384)
    with pytest.raises(RuntimeError, match="^Already borrowed$"):
        next(stream)
    assert _leftover_threads() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_input_stream_fails_where_it_did(embedder, workers) -> None:
    def texts():
        yield from TEXTS[:9]
        raise KeyError("corpus file vanished")

    stream = _variant(embedder, workers, **SMALL).encode_iter(texts())
    assert next(stream).shape == (7, 384)  # read ahead, window 1's error is kept until asked for
    with pytest.raises(KeyError, match="corpus file vanished"):
        next(stream)
    assert _leftover_threads() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_forward_pass_raises_its_own_error(embedder, workers) -> None:
    def on_forward(n: int) -> None:
        if n == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (test)")

    emb = _variant(embedder, workers, **SMALL)
    emb.model = _Model(embedder.model, on_forward)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="out of memory"):
        emb.encode(TEXTS)
    assert _leftover_threads() == []


def test_a_failing_stage_raises_its_own_error(embedder) -> None:
    emb = _variant(embedder, 2, **SMALL)
    real_stage, calls = emb._stage, []

    def stage(ids, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise ValidationError("pack_sequences: sequences[0] is empty (test)")
        return real_stage(ids, **kwargs)

    emb._stage = stage
    with pytest.raises(ValidationError, match="sequences\\[0\\] is empty"):
        emb.encode(TEXTS)
    assert _leftover_threads() == []


def test_an_abandoned_stream_leaves_no_thread(embedder) -> None:
    started, release = threading.Event(), threading.Event()

    def on_call(n: int) -> None:
        if n == 1:  # window 1 is still being tokenized when the consumer gives up
            started.set()
            release.wait(OVERLAP_WAIT_S)

    emb = _variant(embedder, 2, **SMALL)
    emb.tokenizer = _Tokenizer(embedder.tokenizer, on_call)
    stream = emb.encode_iter(TEXTS)
    assert next(stream).shape == (7, 384)
    assert started.wait(OVERLAP_WAIT_S) and _leftover_threads()
    release.set()
    stream.close()
    assert _leftover_threads() == []
    assert len(emb.tokenizer.threads) == 2  # windows 2.. were never tokenized


# -- the CUDA copy ------------------------------------------------------------------------------


def test_no_pinned_memory_or_async_copy_on_a_cpu(embedder, monkeypatch) -> None:
    emb = _variant(embedder, 2, **SMALL)
    assert embedder.device.type == "cpu" and embedder.tokenize_workers == 0  # None = 0 on a CPU
    loaded = Embedder(EmbedderConfig(tokenize_workers=2))  # the config key, through the constructor
    assert loaded.tokenize_workers == 2 and loaded.copy_stream is None and emb.copy_stream is None

    def no_pin(self, *args, **kwargs):
        raise AssertionError("pin_memory called on a CPU")

    monkeypatch.setattr(torch.Tensor, "pin_memory", no_pin)
    real_stage, ready = emb._stage, []

    def stage(ids, **kwargs):
        out = real_stage(ids, **kwargs)
        ready.append((kwargs.get("ahead"), out.ready, out.inputs["input_ids"].device.type))
        return out

    emb._stage = stage
    emb.encode(TEXTS)
    assert ready and all(r == (True, None, "cpu") for r in ready)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory, side stream)")
@pytest.mark.parametrize("packed", [False, True])
def test_cuda_copies_ahead_from_pinned_memory_and_matches_inline(packed) -> None:
    on = Embedder(EmbedderConfig(device="cuda", dtype="fp16", packed=packed, **SMALL))
    assert on.tokenize_workers == 2 and on.copy_stream is not None  # None = 2 on CUDA
    real_stage, staged = on._stage, []

    def stage(ids, **kwargs):
        out = real_stage(ids, **kwargs)
        tensors = out.inputs.values() if isinstance(out.inputs, dict) else out.inputs.tensors
        staged.append((out.ready is not None, {t.device.type for t in tensors}))
        return out

    on._stage = stage
    got = on.encode(TEXTS)
    assert staged and all(s == (True, {"cuda"}) for s in staged)
    off = _variant(on, 0)
    off.copy_stream = None
    assert np.array_equal(got, off.encode(TEXTS))
