"""DynamicBatcher against a fake runner (pure Python: the result of item x is x * 2).

Exact-batch tests hold the worker inside a "gate" batch while they queue items, so the
packing they assert does not depend on thread scheduling. Timing tests assert only bounds
that a loaded 2-core machine cannot break (the worker never runs early; "not never" allows
seconds).
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

import pytest
from searchsmith.models.config import from_dict
from searchsmith.models.errors import (
    ConfigError,
    OverloadedError,
    RunnerError,
    ValidationError,
)
from searchsmith.serving.batcher import BatcherConfig, DynamicBatcher, select_batch

GATE = "gate"
WAIT_S = 10.0  # "not never": how long a test waits for a Future before failing


class FakeRunner:
    """Records every batch; returns item * 2; holds the worker while a batch contains GATE."""

    def __init__(self, fail_on: object = None, short_by: int = 0) -> None:
        self.batches: list[list] = []
        self.calls_s: list[float] = []  # time.monotonic() at each call
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_on = fail_on
        self.short_by = short_by
        self._lock = threading.Lock()

    def __call__(self, items: list) -> list:
        with self._lock:
            self.batches.append(list(items))
            self.calls_s.append(time.monotonic())
        if GATE in items:
            self.entered.set()
            assert self.release.wait(WAIT_S), "test forgot to release the gate"
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"cannot run {self.fail_on!r}")
        out = [x * 2 for x in items]
        return out[: len(out) - self.short_by]

    def non_gate_batches(self) -> list[list]:
        return [b for b in self.batches if GATE not in b]


def make(runner: FakeRunner, start: bool = True, **cfg: object) -> DynamicBatcher:
    cfg.setdefault("max_wait_ms", 1.0)
    return DynamicBatcher(runner, length_of=len, config=BatcherConfig(**cfg), name="test",
                          start=start)


def hold(batcher: DynamicBatcher, runner: FakeRunner) -> list[Future]:
    """Occupy the worker of a not yet started batcher with one full batch of GATE items.

    The gates are queued before the worker starts, so they form exactly one batch (full by
    count, it runs at once) however slowly this thread runs. Returns their Futures.
    """
    futures = [batcher.submit(GATE, length=1) for _ in range(batcher.config.max_batch_size)]
    batcher.start()
    assert runner.entered.wait(WAIT_S), "the gate batch never started"
    return futures


def start_when_overdue(batcher: DynamicBatcher) -> None:
    """Start the worker once every queued item is older than max_wait_ms.

    All queued items then share one fairness tier, so the batches depend only on lengths and
    arrival order, never on how fast this thread submitted.
    """
    time.sleep(batcher.config.max_wait_ms / 1000.0 + 0.05)
    batcher.start()


def results(futures: list[Future]) -> list:
    return [f.result(timeout=WAIT_S) for f in futures]


# ---- packing -------------------------------------------------------------------------------


def test_packs_by_max_batch_size_in_arrival_order_for_equal_lengths() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=3) as b:
        names = ["a", "b", "c", "d", "e", "f", "g"]
        futures = [b.submit(n, length=4) for n in names]
        start_when_overdue(b)
        assert results(futures) == [n * 2 for n in names]
    assert runner.batches == [["a", "b", "c"], ["d", "e", "f"], ["g"]]


def test_packs_by_max_batch_tokens_counting_padding() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=8, max_batch_tokens=100) as b:
        # a, b, c cost 3 * 30 = 90 and a 4th 30 would cost 120. Then d anchors: x and z (10)
        # pad up to d's 30 (3 * 30 = 90), while y would pad the batch to 4 * 50 = 200.
        futures = [b.submit(n, length=n_len) for n, n_len in
                   [("a", 30), ("b", 30), ("c", 30), ("d", 30), ("x", 10), ("y", 50), ("z", 10)]]
        start_when_overdue(b)
        results(futures)
    assert runner.batches == [["a", "b", "c"], ["d", "x", "z"], ["y"]]


def test_item_longer_than_max_batch_tokens_runs_alone() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=8, max_batch_tokens=100) as b:
        futures = [b.submit("s", length=5), b.submit("huge", length=500), b.submit("t", length=5)]
        start_when_overdue(b)
        assert results(futures) == ["ss", "hugehuge", "tt"]
    assert runner.batches == [["s", "t"], ["huge"]]


def test_length_sorted_grouping_puts_similar_lengths_together() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=3) as b:
        lengths = {"s5": 5, "L100": 100, "s6": 6, "L101": 101, "s7": 7, "L102": 102}
        futures = [b.submit(n, length=n_len) for n, n_len in lengths.items()]
        start_when_overdue(b)
        results(futures)
        stats = b.stats()
    # Arrival order would give [s5, L100, s6] and [L101, s7, L102].
    assert runner.batches == [["s5", "s6", "s7"], ["L100", "L101", "L102"]]
    assert stats["tokens"] == 18 + 303
    assert stats["padded_tokens"] == 3 * 7 + 3 * 102
    assert stats["padding_efficiency"] == pytest.approx(321 / 327)


def test_overdue_items_are_taken_before_better_fitting_fresh_ones() -> None:
    runner = FakeRunner()
    # A and B become overdue during the sleep; C and D stay fresh until the worker packs,
    # with 1.5 s of margin for a slow machine.
    with make(runner, start=False, max_batch_size=2, max_wait_ms=1500.0) as b:
        old = [b.submit("A", length=5), b.submit("B", length=100)]
        time.sleep(1.6)
        fresh = [b.submit("C", length=5), b.submit("D", length=5)]
        b.start()
        results(old + fresh)
    # Sorting by length alone would pair A with C and leave B for later.
    assert runner.batches == [["A", "B"], ["C", "D"]]


def test_select_batch_anchors_on_oldest_and_orders_by_distance() -> None:
    lengths = [50, 10, 49, 52, 200, 51]
    chosen, full = select_batch(lengths, [False] * 6, max_batch_size=4, max_batch_tokens=10_000)
    assert chosen == [0, 2, 5, 3] and full
    chosen, full = select_batch(lengths, [False] * 6, max_batch_size=10, max_batch_tokens=10_000)
    assert chosen == [0, 2, 5, 3, 1, 4] and not full
    # The token limit skips 200 (6 * 200) but keeps scanning: nothing shorter is left.
    chosen, full = select_batch(lengths, [False] * 6, max_batch_size=10, max_batch_tokens=300)
    assert chosen == [0, 2, 5, 3, 1] and full
    # Overdue first: index 4 (200 tokens, overdue) beats nearer fresh items.
    chosen, _ = select_batch(lengths, [True, False, False, False, True, False], 2, 10_000)
    assert chosen == [0, 4]
    assert select_batch([], [], 4, 100) == ([], False)
    assert select_batch([500], [False], 4, 100) == ([0], False)


def reference_select(lengths: list[int], overdue: list[bool], max_batch_size: int,
                     max_batch_tokens: int) -> tuple[list[int], bool]:
    """The slow twin of select_batch: sort everything by the policy's key, scan once."""
    order = sorted(range(1, len(lengths)),
                   key=lambda i: (not overdue[i], abs(lengths[i] - lengths[0]), lengths[i], i))
    chosen, longest, full = [0], lengths[0], False
    for i in order:
        if len(chosen) >= max_batch_size:
            break
        if (len(chosen) + 1) * max(longest, lengths[i]) > max_batch_tokens:
            full = True
            continue
        chosen.append(i)
        longest = max(longest, lengths[i])
    return chosen, full or len(chosen) >= max_batch_size


def test_select_batch_matches_its_slow_twin_on_random_queues() -> None:
    rng = random.Random(7)
    for _ in range(400):
        n = rng.randint(1, 40)
        lengths = [rng.choice([rng.randint(1, 8), rng.randint(1, 300)]) for _ in range(n)]
        k = rng.randint(0, n)  # the batcher's overdue items are a prefix; test any set too
        overdue = ([True] * k + [False] * (n - k) if rng.random() < 0.5
                   else [rng.random() < 0.5 for _ in range(n)])
        size, tokens = rng.randint(1, 12), rng.randint(1, 600)
        assert select_batch(lengths, overdue, size, tokens) == reference_select(
            lengths, overdue, size, tokens), (lengths, overdue, size, tokens)


def test_batcher_packs_like_repeated_select_batch() -> None:
    rng = random.Random(3)
    lengths = [rng.randint(1, 64) for _ in range(300)]
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=8, max_batch_tokens=200) as b:
        futures = [b.submit(i, length=n) for i, n in enumerate(lengths)]
        start_when_overdue(b)
        assert results(futures) == [2 * i for i in range(300)]
    expected, queue = [], list(range(300))
    while queue:
        chosen, _ = select_batch([lengths[i] for i in queue], [True] * len(queue), 8, 200)
        expected.append([queue[j] for j in chosen])
        queue = [q for j, q in enumerate(queue) if j not in set(chosen)]
    assert runner.batches == expected


# ---- waiting -------------------------------------------------------------------------------


def test_lone_item_waits_max_wait_ms_then_runs() -> None:
    runner = FakeRunner()
    with make(runner, max_batch_size=8, max_wait_ms=300.0) as b:
        submitted = time.monotonic()
        future = b.submit("solo", length=3)
        assert future.result(timeout=WAIT_S) == "solosolo"
    waited = runner.calls_s[0] - submitted
    assert waited >= 0.3, f"ran after {waited:.3f} s, before max_wait_ms"
    assert runner.batches == [["solo"]]


def test_full_batch_runs_without_waiting_max_wait_ms() -> None:
    runner = FakeRunner()
    with make(runner, max_batch_size=4, max_wait_ms=20_000.0, timeout_s=60.0) as b:
        start = time.monotonic()
        futures = [b.submit(n, length=2) for n in "abcd"]
        assert results(futures) == ["aa", "bb", "cc", "dd"]
        assert time.monotonic() - start < WAIT_S
    assert runner.batches == [["a", "b", "c", "d"]]


def test_batch_full_by_tokens_runs_at_once_and_close_flushes_the_rest() -> None:
    runner = FakeRunner()
    b = make(runner, max_batch_size=8, max_batch_tokens=100, max_wait_ms=20_000.0, timeout_s=60.0)
    start = time.monotonic()
    first, second = b.submit("p", length=60), b.submit("q", length=60)
    assert first.result(timeout=WAIT_S) == "pp"  # 2 * 60 > 100: no point waiting
    assert not second.done()  # alone again, it waits for company
    assert b.close(drain=True, timeout_s=WAIT_S) is True  # drain runs it now
    assert second.result(timeout=0) == "qq"
    assert time.monotonic() - start < WAIT_S
    assert runner.batches == [["p"], ["q"]]


# ---- cancellation, overload, timeouts ---------------------------------------------------------


def test_cancelled_item_never_reaches_the_runner() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=4) as b:
        hold(b, runner)
        a, c_, d = b.submit("a", length=1), b.submit("c", length=1), b.submit("d", length=1)
        assert c_.cancel()
        runner.release.set()
        assert results([a, d]) == ["aa", "dd"]
        assert c_.cancelled()
        assert b.stats()["items_cancelled"] == 1
    assert runner.non_gate_batches() == [["a", "d"]]


def test_overload_raises_with_retry_after_past_max_queue() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=2, max_queue=3) as b:
        hold(b, runner)
        futures = [b.submit(n, length=1) for n in "abc"]
        with pytest.raises(OverloadedError, match=r"the limit is 3 \(max_queue\)") as info:
            b.submit("d", length=1)
        assert math.isfinite(info.value.retry_after_s) and info.value.retry_after_s > 0
        assert b.stats()["items_rejected"] == 1
        assert b.stats()["queue_depth"] == 3
        runner.release.set()
        assert results(futures) == ["aa", "bb", "cc"]
        assert b.submit("e", length=1).result(timeout=WAIT_S) == "ee"
    assert "d" not in [x for batch in runner.batches for x in batch]


def test_retry_after_counts_the_queued_tokens_not_only_the_items() -> None:
    """After many short items, a queue of long ones drains far slower than per item says
    (a 429's Retry-After of 1 s for work of many seconds)."""
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=1, max_queue=4, timeout_s=3600.0) as b:
        held = hold(b, runner)
        c = b._counters
        c.recent_item_s, c.recent_token_s = 0.1, 0.1  # measured: 0.1 s per one-token item
        futures = [b.submit(n, length=50) for n in "abcd"]  # 200 tokens queued
        with pytest.raises(OverloadedError) as info:
            b.submit("e", length=50)
        assert info.value.retry_after_s == pytest.approx(20.0)  # per item it said 0.4 s
        runner.release.set()
        results(held + futures)
        assert b._queue.tokens == 0


def test_an_item_that_would_surely_time_out_is_refused_at_once() -> None:
    """A flood of /v1/search calls was accepted up to max_queue (64 pipeline calls of about a
    second), and a quarter of them failed with 504 after waiting the whole 30 s."""
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=1, max_queue=100, timeout_s=2.5) as b:
        held = hold(b, runner)
        c = b._counters
        assert b._least_wait_s(1) == 0.0  # nothing measured yet: nothing refused on a guess
        c.best_item_s, c.best_token_s = 1.0, 0.01  # the fastest batch ran 1 s per item
        queued = [b.submit(n, length=1) for n in "ab"]  # 2 s of work at the fastest
        with pytest.raises(OverloadedError, match=r"take at least 3\.0 s .* past the 2\.5 s an item may wait "
                                                  r"\(timeout_s\)") as info:
            b.submit("c", length=1)
        assert 0 < info.value.retry_after_s <= 2.5 and b.stats()["items_rejected"] == 1
        c.best_item_s = 0.1  # per token it is still too long: 3 items of 100 tokens at 0.01 s a token
        with pytest.raises(OverloadedError, match="take at least 3.0 s"):
            b.submit("c", length=298)
        runner.release.set()
        results(held)
        assert results(queued) == ["aa", "bb"]
    assert "c" not in [x for batch in runner.batches for x in batch]


def test_retry_after_follows_the_recent_batches_not_the_first_slow_ones() -> None:
    """Retry-After divided all the time spent by all items run: after slow first calls it said
    14-16 s while a flood of /v1/route drained in 3.9 s."""
    from searchsmith.serving.batcher import _moving

    recent = None
    for cost in [2.0] * 3 + [0.01] * 30:  # three slow warm-up calls, then fast ones
        recent = _moving(recent, cost)
    assert recent == pytest.approx(0.01, abs=0.01)  # the lifetime mean is 0.19
    runner = FakeRunner()
    with make(runner, max_batch_size=1) as b:
        assert b._retry_after_s() == 1.0  # nothing measured: one second
        results([b.submit(n, length=1) for n in "abc"])
        c = b._counters
        assert c.recent_item_s is not None and 0 < c.recent_item_s < 1 and c.recent_token_s is not None


def test_the_fastest_batch_is_what_admission_counts() -> None:
    runner = FakeRunner()
    with make(runner, max_batch_size=4) as b:
        assert results([b.submit(n, length=2) for n in "abcd"]) == ["aa", "bb", "cc", "dd"]
        c = b._counters
        assert 0 < c.best_item_s < math.inf and 0 < c.best_token_s <= c.best_item_s


def test_cancelled_items_free_their_place_in_the_queue() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=2, max_queue=2) as b:
        hold(b, runner)
        a, x = b.submit("a", length=1), b.submit("x", length=1)
        assert x.cancel()
        c_ = b.submit("c", length=1)  # would be the third item without the purge
        runner.release.set()
        assert results([a, c_]) == ["aa", "cc"]
    assert runner.non_gate_batches() == [["a", "c"]]


def test_item_waiting_past_timeout_s_fails_with_timeout_error() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=2, timeout_s=1.0) as b:
        hold(b, runner)
        late = b.submit("late", length=1)
        time.sleep(1.2)
        runner.release.set()
        with pytest.raises(TimeoutError, match=r"the limit is 1.0 s \(timeout_s\)"):
            late.result(timeout=WAIT_S)
        assert b.stats()["items_timed_out"] == 1
    assert runner.non_gate_batches() == []


def test_submit_expires_timed_out_items_while_the_worker_is_busy() -> None:
    runner = FakeRunner()
    with make(runner, start=False, max_batch_size=2, timeout_s=1.0) as b:
        hold(b, runner)
        late = b.submit("late", length=1)
        time.sleep(1.2)
        fresh = b.submit("fresh", length=1)
        assert late.done()  # failed by the submit above, the worker is still in the gate
        assert isinstance(late.exception(timeout=0), TimeoutError)
        runner.release.set()
        assert fresh.result(timeout=WAIT_S) == "freshfresh"


# ---- runner faults -------------------------------------------------------------------------


def test_runner_exception_fails_its_batch_only() -> None:
    runner = FakeRunner(fail_on="boom")
    with make(runner, start=False, max_batch_size=2) as b:
        hold(b, runner)
        bad = [b.submit("a", length=1), b.submit("boom", length=1)]
        good = [b.submit("c", length=1), b.submit("d", length=1)]
        runner.release.set()
        for future in bad:
            with pytest.raises(RunnerError, match=r"batch of 2 items: ValueError: cannot run 'boom'"):
                future.result(timeout=WAIT_S)
            assert isinstance(future.exception().__cause__, ValueError)
        assert bad[0].exception() is not bad[1].exception()
        assert results(good) == ["cc", "dd"]
        assert b.submit("e", length=1).result(timeout=WAIT_S) == "ee"  # the worker lives on
        assert b.stats()["items_failed"] == 2
    assert runner.non_gate_batches() == [["a", "boom"], ["c", "d"], ["e"]]


def test_runner_returning_wrong_number_of_results_is_a_runner_error() -> None:
    runner = FakeRunner(short_by=1)
    with make(runner, start=False, max_batch_size=2) as b:
        hold(b, runner)
        futures = [b.submit("a", length=1), b.submit("b", length=1)]
        runner.release.set()
        for future in futures:
            with pytest.raises(RunnerError, match="returned 1 results for 2 items"):
                future.result(timeout=WAIT_S)


def test_runner_returning_no_sequence_is_a_runner_error() -> None:
    with DynamicBatcher(lambda items: None, config=BatcherConfig(max_wait_ms=0.0)) as b:
        with pytest.raises(RunnerError, match="returned NoneType for 1 items"):
            b.submit("a", length=1).result(timeout=WAIT_S)


# ---- concurrency -------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_every_future_gets_its_own_result_under_concurrency(workers: int) -> None:
    sizes_seen: list[tuple[int, int]] = []

    def run(items: list[int]) -> list[int]:
        sizes_seen.append((len(items), max(i % 64 + 1 for i in items)))
        return [i * 2 for i in items]

    config = BatcherConfig(max_batch_size=16, max_batch_tokens=512, max_wait_ms=2.0,
                           max_queue=4096, workers=workers)
    per_thread, threads = 125, 16
    futures: dict[int, Future] = {}
    lock = threading.Lock()
    with DynamicBatcher(run, length_of=lambda i: i % 64 + 1, config=config) as b:

        def client(t: int) -> None:
            rng = random.Random(t)
            for k in range(per_thread):
                item = t * per_thread + k
                f = b.submit(item)
                with lock:
                    futures[item] = f
                if rng.random() < 0.05:
                    time.sleep(0.001)

        pool = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        got = {item: f.result(timeout=WAIT_S) for item, f in futures.items()}
        stats = b.stats()
    assert len(got) == per_thread * threads == 2000
    assert all(result == item * 2 for item, result in got.items())
    assert stats["items_run"] == 2000 and stats["batches_run"] == len(sizes_seen)
    assert sum(size for size, _ in sizes_seen) == 2000
    for size, longest in sizes_seen:
        assert size <= 16
        assert size * longest <= 512 or size == 1
    assert stats["mean_batch_size"] == pytest.approx(2000 / len(sizes_seen))
    assert len(stats["last_batch_sizes"]) == min(256, len(sizes_seen))
    if workers == 1:  # with two workers, runner calls and bookkeeping may interleave
        assert stats["last_batch_sizes"] == [s for s, _ in sizes_seen][-256:]
    assert 0 < stats["padding_efficiency"] <= 1


def test_a_long_queue_drains_in_order_past_the_arrival_list_compaction() -> None:
    # 3,000 queued items take the arrival list past its compaction point (1,024 dead entries).
    runner = FakeRunner()
    with make(runner, start=False, max_queue=4096, max_batch_size=32) as b:
        futures = [b.submit(i, length=1) for i in range(3000)]
        b.start()
        assert results(futures) == [2 * i for i in range(3000)]
    assert [x for batch in runner.batches for x in batch] == list(range(3000))  # equal lengths: FIFO


def test_usable_from_asyncio_with_wrap_future() -> None:
    runner = FakeRunner()

    async def main(b: DynamicBatcher) -> list:
        return await asyncio.gather(*(asyncio.wrap_future(b.submit(i, length=1)) for i in range(50)))

    with make(runner, max_batch_size=8) as b:
        assert asyncio.run(main(b)) == [i * 2 for i in range(50)]
    assert all(len(batch) <= 8 for batch in runner.batches)


def test_length_of_runs_in_the_submitting_thread() -> None:
    threads: list[str] = []

    def length_of(item: str) -> int:
        threads.append(threading.current_thread().name)
        return len(item)

    with DynamicBatcher(FakeRunner(), length_of=length_of) as b:
        assert b.submit("abc").result(timeout=WAIT_S) == "abcabc"
    assert threads == [threading.current_thread().name]


# ---- stats and hooks ---------------------------------------------------------------------


def test_on_batch_hook_and_stats() -> None:
    calls: list[tuple] = []
    runner = FakeRunner()
    b = DynamicBatcher(runner, config=BatcherConfig(max_batch_size=2, max_wait_ms=1.0),
                       start=False,
                       on_batch=lambda *args: calls.append(args))
    hold(b, runner)
    futures = [b.submit("a", length=3), b.submit("b", length=5)]
    runner.release.set()
    results(futures)
    b.close()
    assert [c[:3] for c in calls] == [(2, 2, 2), (2, 8, 10)]
    assert all(c[3] >= 0 for c in calls)
    stats = b.stats()
    assert stats["batches_run"] == 2 and stats["items_run"] == 4
    assert stats["mean_batch_size"] == 2.0
    assert stats["padding_efficiency"] == pytest.approx(10 / 12)
    assert stats["last_batch_sizes"] == [2, 2]
    assert stats["queue_depth"] == 0 and stats["in_flight"] == 0


def test_failing_on_batch_hook_is_ignored() -> None:
    def hook(*args: object) -> None:
        raise RuntimeError("metrics down")

    with DynamicBatcher(FakeRunner(), config=BatcherConfig(max_wait_ms=0.0), on_batch=hook) as b:
        assert b.submit("a", length=1).result(timeout=WAIT_S) == "aa"
        assert b.submit("b", length=1).result(timeout=WAIT_S) == "bb"


# ---- closing -----------------------------------------------------------------------------


def test_close_without_drain_fails_queued_items_and_finishes_in_flight() -> None:
    runner = FakeRunner()
    b = make(runner, start=False, max_batch_size=2)
    in_flight = hold(b, runner)
    queued = [b.submit("a", length=1), b.submit("b", length=1)]
    assert b.close(drain=False, timeout_s=0.05) is False  # the gate batch is still running
    for future in queued:
        with pytest.raises(RuntimeError, match=r"closed before this item ran \(close\(drain=False\)\)"):
            future.result(timeout=0)
    assert not any(f.done() for f in in_flight)
    runner.release.set()
    assert results(in_flight) == [GATE * 2] * 2
    assert b.close(timeout_s=WAIT_S) is True
    assert runner.non_gate_batches() == []


def test_close_with_drain_runs_queued_items() -> None:
    runner = FakeRunner()
    b = make(runner, start=False, max_batch_size=2)
    hold(b, runner)
    queued = [b.submit(n, length=1) for n in "abc"]
    threading.Timer(0.1, runner.release.set).start()
    assert b.close(drain=True, timeout_s=WAIT_S) is True
    assert [f.result(timeout=0) for f in queued] == ["aa", "bb", "cc"]
    assert runner.non_gate_batches() == [["a", "b"], ["c"]]


def test_submit_after_close_raises() -> None:
    b = DynamicBatcher(FakeRunner())
    assert b.close() is True
    assert b.close() is True  # idempotent
    assert b.closed
    with pytest.raises(RuntimeError, match=r"submit\(\) after close\(\)"):
        b.submit("a", length=1)


def test_context_manager_drains_on_exit() -> None:
    with DynamicBatcher(FakeRunner(), config=BatcherConfig(max_wait_ms=20_000.0, timeout_s=60.0)) as b:
        future = b.submit("a", length=1)
    assert future.result(timeout=0) == "aa"
    assert b.closed


def test_close_of_a_never_started_batcher_drains_or_fails_its_queue() -> None:
    runner = FakeRunner()
    b = make(runner, start=False)
    drained = b.submit("a", length=1)
    assert b.close(drain=True, timeout_s=WAIT_S) is True  # starts the workers to drain
    assert drained.result(timeout=0) == "aa"
    with pytest.raises(RuntimeError, match=r"start\(\) after close\(\)"):
        b.start()
    b = make(runner, start=False)
    dropped = b.submit("b", length=1)
    assert b.close(drain=False) is True
    assert isinstance(dropped.exception(timeout=0), RuntimeError)
    assert runner.batches == [["a"]]


def test_close_from_inside_the_runner_does_not_deadlock() -> None:
    holder: list[DynamicBatcher] = []

    def run(items: list) -> list:
        holder[0].close(drain=True, timeout_s=1.0)
        return items

    b = DynamicBatcher(run, config=BatcherConfig(max_wait_ms=0.0))
    holder.append(b)
    assert b.submit("a", length=1).result(timeout=WAIT_S) == "a"
    assert b.close(timeout_s=WAIT_S) is True


# ---- input validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_batch_size", 0, "max_batch_size: must be >= 1, got 0"),
        ("max_batch_size", -4, "max_batch_size: must be >= 1, got -4"),
        ("max_batch_size", 2.5, "max_batch_size: expected an int >= 1, got 2.5"),
        ("max_batch_size", True, "max_batch_size: expected an int >= 1, got True"),
        ("max_batch_tokens", 0, "max_batch_tokens: must be >= 1, got 0"),
        ("max_batch_tokens", "16k", "max_batch_tokens: expected an int >= 1, got '16k'"),
        ("max_wait_ms", -1.0, "max_wait_ms: must be >= 0, got -1.0"),
        ("max_wait_ms", float("nan"), "max_wait_ms: expected a finite number >= 0, got nan"),
        ("max_wait_ms", float("inf"), "max_wait_ms: expected a finite number >= 0, got inf"),
        ("max_wait_ms", "5", "max_wait_ms: expected a finite number >= 0, got '5'"),
        ("max_queue", 0, "max_queue: must be >= 1, got 0"),
        ("timeout_s", 0.0, "timeout_s: must be > 0, got 0.0"),
        ("timeout_s", -1.0, "timeout_s: must be > 0, got -1.0"),
        ("timeout_s", float("inf"), "timeout_s: expected a finite number > 0, got inf"),
        ("timeout_s", 0.004, "timeout_s: must be longer than max_wait_ms (5.0 ms), got 0.004 s"),
        ("workers", 0, "workers: must be >= 1, got 0"),
    ],
)
def test_config_rejects(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BatcherConfig(**{field: value})
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_config_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError, match=r"max_batch_size: must be >= 1, got 0; workers: must"):
        BatcherConfig(max_batch_size=0, workers=0)


def test_config_loads_through_the_project_loader() -> None:
    cfg = from_dict(BatcherConfig, {"max_batch_size": 8, "max_wait_ms": 2})
    assert cfg == BatcherConfig(max_batch_size=8, max_wait_ms=2)
    with pytest.raises(ConfigError, match="max_queue: must be >= 1, got 0"):
        from_dict(BatcherConfig, {"max_queue": 0})
    with pytest.raises(ConfigError, match="did you mean 'max_wait_ms'"):
        from_dict(BatcherConfig, {"max_wait_msec": 2})


@pytest.mark.parametrize(
    ("length", "message"),
    [
        (-1, "length must be an int >= 0 (tokens), got -1"),
        (2.0, "length must be an int >= 0 (tokens), got 2.0"),
        (True, "length must be an int >= 0 (tokens), got True"),
        ("3", "length must be an int >= 0 (tokens), got '3'"),
    ],
)
def test_submit_rejects_bad_length(length: object, message: str) -> None:
    with DynamicBatcher(FakeRunner()) as b:
        with pytest.raises(ValidationError, match=re.escape("batcher[model].submit: " + message)):
            b.submit("a", length=length)  # type: ignore[arg-type]
        assert b.stats()["queue_depth"] == 0


def test_submit_without_length_or_length_of_is_rejected() -> None:
    with DynamicBatcher(FakeRunner()) as b:
        with pytest.raises(ValidationError, match="pass length=<token count> or construct"):
            b.submit("a")


def test_bad_length_of_result_is_rejected() -> None:
    with DynamicBatcher(FakeRunner(), length_of=lambda item: -2) as b:
        with pytest.raises(ValidationError, match="got -2"):
            b.submit("a")


def test_constructor_rejects_non_callable_runner() -> None:
    with pytest.raises(ValidationError, match="run_batch must be callable"):
        DynamicBatcher("not a function")  # type: ignore[arg-type]


def test_constructor_rejects_a_config_mapping() -> None:
    with pytest.raises(ValidationError, match="config must be a BatcherConfig, got dict"):
        DynamicBatcher(FakeRunner(), config={"max_batch_size": 4})  # type: ignore[arg-type]


def test_batcher_imports_neither_torch_nor_a_web_framework() -> None:
    # STYLE.md: the batcher layer stays light so the server can be tested without a model.
    code = ("import sys, searchsmith.serving.batcher; "
            "print(sorted(m for m in ('torch', 'fastapi', 'starlette', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the batchers of the model endpoints (runner.py adapters on a DynamicBatcher) -------------


class _PairBundle:
    """A rerank bundle: logit = len(passage) - len(query); records its batch sizes."""

    task, tokenizer, max_length = "rerank", None, 64

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def score_pairs(self, pairs):
        import numpy as np

        self.sizes.append(len(pairs))
        return np.array([len(p) - len(q) for q, p in pairs], dtype=np.float32)


def test_rerank_pairs_of_many_submitters_share_batches_and_come_back_matched() -> None:
    from searchsmith.serving.runner import RerankRunner

    bundle = _PairBundle()
    runner = RerankRunner(bundle)
    b = DynamicBatcher(runner.run, config=BatcherConfig(max_batch_size=8, max_wait_ms=5.0), start=False)
    pairs = [(f"q{i}", "p" * (i % 5 + 1)) for i in range(24)]
    lengths = runner.lengths("q", [p for _, p in pairs])
    assert lengths == [1 + 1 + 3] * 24  # words + 3 (no tokenizer: the estimate)
    futures = [b.submit(pair, length=n) for pair, n in zip(pairs, lengths)]
    b.start()
    got = [f.result(5) for f in futures]
    b.close()
    assert got == [len(p) - len(q) for q, p in pairs]
    assert bundle.sizes == [8, 8, 8]  # all queued before start: full batches


def test_rerank_runner_failure_reaches_every_future_as_runner_error() -> None:
    from searchsmith.serving.runner import RerankRunner

    class Broken(_PairBundle):
        def score_pairs(self, pairs):
            raise MemoryError("arena exhausted")

    b = DynamicBatcher(RerankRunner(Broken()).run, config=BatcherConfig(max_wait_ms=0.0), start=False)
    futures = [b.submit(("q", "p"), length=3) for _ in range(3)]
    b.start()
    for f in futures:
        with pytest.raises(RunnerError, match="score_pairs failed on a batch of 3 pairs: MemoryError"):
            f.result(5)
    b.close()


def test_call_each_keeps_each_calls_own_error_class() -> None:
    from searchsmith.serving.runner import call_each

    def bad():
        raise ValidationError("query: is empty")

    out = call_each([lambda: 1, bad, lambda: "x"])
    assert out[0].unwrap() == 1 and out[2].unwrap() == "x"
    with pytest.raises(ValidationError, match="query: is empty"):
        out[1].unwrap()


def test_call_queue_is_bounded_and_runs_one_at_a_time() -> None:
    from searchsmith.serving.runner import call_each

    release = threading.Event()
    running = []

    def slow(i):
        def fn():
            running.append(i)
            release.wait(5)
            return i
        return fn

    cfg = BatcherConfig(max_batch_size=1, max_wait_ms=0.0, max_queue=2)
    with DynamicBatcher(call_each, config=cfg) as b:
        first = b.submit(slow(0), length=1)
        deadline = time.monotonic() + 5
        while not running and time.monotonic() < deadline:
            time.sleep(0.005)
        queued = [b.submit(slow(i), length=1) for i in (1, 2)]
        with pytest.raises(OverloadedError, match="max_queue"):
            b.submit(slow(3), length=1)
        release.set()
        assert [f.result(5).unwrap() for f in (first, *queued)] == [0, 1, 2]
    assert b.stats()["last_batch_sizes"] == [1, 1, 1]


def test_bundle_embedder_counts_tokens_with_the_bundles_tokenizer() -> None:
    import numpy as np
    from searchsmith.models.hub import resolve_model
    from searchsmith.serving.runner import BundleEmbedder, count_tokens
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))

    class Bundle:
        task, tokenizer, manifest = "embed", tok, {"embedding_dim": 2, "max_length": 16}

        def encode(self, texts):
            return np.tile(np.array([[0.6, 0.8]], dtype=np.float32), (len(texts), 1))

    emb = BundleEmbedder(Bundle(), "b")
    assert emb.dim == 2 and emb.max_seq_length == 16
    assert emb.lengths(["hello world", "a"]) == [4, 3]  # [CLS] hello world [SEP]
    assert count_tokens(tok, ["q"], ["the passage"]) == [6]  # [CLS] q [SEP] the passage [SEP]
    assert emb.run(["x", "y"]).shape == (2, 2)
    with pytest.raises(ValidationError, match="expected an 'embed' bundle"):
        BundleEmbedder(_PairBundle())
