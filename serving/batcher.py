"""Dynamic batching: many single requests in, few padded batches out.

The middle layer of the server (STYLE.md, "Serving"): ``http.py`` parses a request and calls
``submit``; a worker thread here packs queued items into batches and calls the runner
(``runner.py``), which executes one batch on one device and knows nothing of requests. This
module imports neither torch nor a web framework, so it is tested alone with a fake runner.

Request path::

    submit(item, length) -> Future          # caller's thread: validate, enqueue (or 429)
    worker: wait <= max_wait_ms, select_batch, run_batch(items), set each Future

Cost model: a batch is padded to its longest item, so it costs ``len(batch) * max(length)``
tokens; a batch never costs more than ``max_batch_tokens`` unless it is a single item longer
than that (it runs alone rather than waiting forever).

Packing (``select_batch``): the oldest queued item anchors every batch (nothing starves);
items older than ``max_wait_ms`` come next (fairness), then the items nearest in length to
the anchor (low padding). A worker starts a batch when the oldest item has waited
``max_wait_ms`` or as soon as the batch is full, whichever is first.

Errors reach the caller through the Future: RunnerError (HTTP 500) when the runner fails,
TimeoutError (504) after ``timeout_s`` in the queue; ``submit`` itself raises OverloadedError
(429) when the queue is full and NotReadyError (a RuntimeError) once the batcher is closed (the server answers
503 while shutting down).

Usage from asyncio (tokenize off the event loop, then await the Future)::

    length = await loop.run_in_executor(None, count_tokens, text)
    vector = await asyncio.wrap_future(batcher.submit(text, length=length))
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from searchsmith.models.config import is_int
from searchsmith.models.errors import (
    ConfigError,
    NotReadyError,
    OverloadedError,
    RunnerError,
    ValidationError,
)

__all__ = ["BatcherConfig", "DynamicBatcher", "select_batch"]

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)

# stats()["last_batch_sizes"] keeps this many recent sizes, for people and tests reading a
# snapshot; metrics should use the on_batch hook, which sees every batch.
_LAST_BATCHES = 256

# Retry-After before any batch has been timed; HTTP Retry-After is in whole seconds, so one
# second is the smallest useful answer.
_DEFAULT_RETRY_AFTER_S = 1.0


# weight of the newest batch in the recent per-item and per-token costs (Retry-After)
_RECENT_WEIGHT = 0.2


def _moving(average: float | None, value: float) -> float:
    """The exponential moving average ``average`` with ``value`` added (``value`` when None)."""
    return value if average is None else average + _RECENT_WEIGHT * (value - average)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class BatcherConfig:
    """Limits of one model's batcher (``server.models.<name>.batcher`` in serve.yaml).

    Attributes:
        max_batch_size: most items per batch (B). 1 turns batching off.
        max_batch_tokens: most padded tokens per batch, ``B * max(T)``; an item longer than
            this runs alone.
        max_wait_ms: longest time the oldest queued item waits for the batch to fill; the
            latency paid at low load for throughput at high load.
        max_queue: most items waiting (not yet running); past it ``submit`` raises
            OverloadedError (HTTP 429) instead of growing the queue.
        timeout_s: longest time an item may wait in the queue before its Future fails with
            TimeoutError (HTTP 504).
        workers: worker threads, i.e. batches run concurrently (one per device stream;
            more than 1 only helps when the runner releases the GIL).
    """

    max_batch_size: int = 32
    max_batch_tokens: int = 16384
    max_wait_ms: float = 5.0
    max_queue: int = 1024
    timeout_s: float = 30.0
    workers: int = 1

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("max_batch_size", "max_batch_tokens", "max_queue", "workers"):
            value = getattr(self, name)
            if not is_int(value):
                problems.append(f"{name}: expected an int >= 1, got {value!r}")
            elif value < 1:
                problems.append(f"{name}: must be >= 1, got {value}")
        if not _is_real(self.max_wait_ms) or not math.isfinite(self.max_wait_ms):
            problems.append(f"max_wait_ms: expected a finite number >= 0, got {self.max_wait_ms!r}")
        elif self.max_wait_ms < 0:
            problems.append(f"max_wait_ms: must be >= 0, got {self.max_wait_ms}")
        if not _is_real(self.timeout_s) or not math.isfinite(self.timeout_s):
            problems.append(f"timeout_s: expected a finite number > 0, got {self.timeout_s!r}")
        elif self.timeout_s <= 0:
            problems.append(f"timeout_s: must be > 0, got {self.timeout_s}")
        elif not problems and self.max_wait_ms / 1000.0 >= self.timeout_s:
            # Otherwise a lone item could time out while the batcher is still waiting for company.
            problems.append(
                f"timeout_s: must be longer than max_wait_ms ({self.max_wait_ms} ms), got "
                f"{self.timeout_s} s; raise timeout_s or lower max_wait_ms"
            )
        if problems:
            raise ConfigError("batcher config: " + "; ".join(problems))


def select_batch(
    lengths: Sequence[int],
    overdue: Sequence[bool],
    max_batch_size: int,
    max_batch_tokens: int,
) -> tuple[list[int], bool]:
    """Choose the next batch from a queue in arrival order (pure; the packing policy).

    The oldest item (index 0) always goes in, so no item waits behind an endless stream of
    better-fitting ones. The rest are taken overdue first (older than ``max_wait_ms``:
    fairness), then nearest in length to the oldest item (so similar lengths share a batch and
    padding stays low), shorter first on ties, then oldest first. A candidate that would push
    the cost ``len(batch) * max(length)`` past ``max_batch_tokens`` is skipped and a shorter
    one may still fit. The oldest item alone may exceed ``max_batch_tokens``: it runs alone.

    The batcher runs the same policy (``_pick``) on a queue it keeps sorted by length, so a
    batch costs O(B log N) rather than a sort of the whole queue.

    Args:
        lengths: (N,) token length of each queued item, oldest first; N >= 1.
        overdue: (N,) whether each item has waited longer than max_wait_ms.
        max_batch_size: most items in the batch.
        max_batch_tokens: most padded tokens in the batch.

    Returns:
        (chosen, full): indices into the queue, the oldest first then in selection order; and
        whether the batch is full (a size or token limit stopped it, so waiting for more items
        would not make it bigger).
    """
    if not lengths:
        return [], False
    order = sorted((length, i) for i, length in enumerate(lengths))  # (length, arrival)
    anchor = bisect.bisect_left(order, (lengths[0], 0))
    picked, full = _pick(order, anchor, lambda pos: overdue[order[pos][1]], lambda pos: True,
                         max_batch_size, max_batch_tokens)
    return [order[pos][1] for pos in picked], full


def _pick(
    order: Sequence[tuple],
    anchor: int,
    first_tier: Callable[[int], bool],
    usable: Callable[[int], bool],
    max_batch_size: int,
    max_batch_tokens: int,
) -> tuple[list[int], bool]:
    """The packing policy of ``select_batch`` on a queue sorted by (length, arrival, ...).

    Two passes (first tier, i.e. overdue, then the rest), each walking outwards from the
    anchor's position: the nearer of the next shorter and next longer item first. A side stops
    at its first token-limit rejection: further out, items only get costlier (longer on the
    right; on the left the cost ``(B + 1) * longest`` does not depend on the candidate).

    Args:
        order: queue entries sorted by (length, arrival sequence); ``order[i][0]`` is a length.
        anchor: position of the oldest item in ``order``.
        first_tier: whether the item at a position is taken in the first pass.
        usable: False skips an item (e.g. its Future was cancelled).
        max_batch_size: most items in the batch.
        max_batch_tokens: most padded tokens in the batch.

    Returns:
        (positions in ``order``, the anchor first; full), as in ``select_batch``.
    """
    anchor_len = order[anchor][0]
    chosen = [anchor]
    longest = anchor_len
    full = False
    for want_first in (True, False):
        right, left = anchor + 1, anchor  # order[right:] and order[:left] are unvisited
        group: list[int] = []  # the current run of equal shorter lengths, oldest last
        stop_left = stop_right = False
        while len(chosen) < max_batch_size:
            if not group and left > 0 and not stop_left:
                # Walking left meets equal lengths newest first; take the whole run so that
                # ties go to the oldest.
                start = bisect.bisect_left(order, (order[left - 1][0],), 0, left)
                group = list(range(left - 1, start - 1, -1))
                left = start
            has_left = bool(group) and not stop_left
            has_right = right < len(order) and not stop_right
            if not (has_left or has_right):
                break
            go_left = has_left and (
                not has_right
                or anchor_len - order[group[-1]][0] <= order[right][0] - anchor_len
            )
            if go_left:
                pos = group.pop()
            else:
                pos, right = right, right + 1
            if first_tier(pos) != want_first or not usable(pos):
                continue
            longest_with = max(longest, order[pos][0])
            if (len(chosen) + 1) * longest_with > max_batch_tokens:
                full = True
                if go_left:
                    stop_left = True
                else:
                    stop_right = True
                continue
            chosen.append(pos)
            longest = longest_with
    if len(chosen) >= max_batch_size:
        full = True
    return chosen, full


@dataclass(eq=False)
class _Entry:
    """One queued item: what the caller submitted and when."""

    item: Any
    length: int
    future: Future
    enqueued_s: float  # time.monotonic() at submit
    seq: int  # arrival order
    queued: bool = True


class _Queue:
    """Queued entries, in arrival order (for age) and sorted by length (for packing).

    Not thread-safe: the batcher holds its lock around every call. Removal is eager in the
    sorted list and lazy in the arrival list (entries carry ``queued``).
    """

    def __init__(self) -> None:
        self._sorted: list[tuple[int, int, _Entry]] = []  # (length, seq, entry)
        self._arrivals: list[_Entry] = []  # submit order; [self._head:] may hold live entries
        self._arrival_s: list[float] = []  # their enqueued_s, ascending, for bisect
        self._head = 0
        self._next_seq = 0
        self.tokens = 0  # the queued entries' lengths, summed

    def __len__(self) -> int:
        return len(self._sorted)

    def push(self, item: Any, length: int, future: Future, now: float) -> None:
        entry = _Entry(item, length, future, now, self._next_seq)
        self._next_seq += 1
        bisect.insort(self._sorted, (length, entry.seq, entry))
        self.tokens += length
        self._arrivals.append(entry)
        self._arrival_s.append(now)

    def remove(self, entry: _Entry) -> None:
        pos = bisect.bisect_left(self._sorted, (entry.length, entry.seq))
        del self._sorted[pos]
        self.tokens -= entry.length
        entry.queued = False

    def oldest(self) -> _Entry | None:
        """The oldest queued entry (cancelled or not)."""
        while self._head < len(self._arrivals) and not self._arrivals[self._head].queued:
            self._head += 1
        # Compact once the dead prefix is both long (not every call) and over half the list
        # (each compaction then pays for the removals before it): amortized O(1).
        if self._head > 1024 and self._head * 2 > len(self._arrivals):
            del self._arrivals[: self._head]
            del self._arrival_s[: self._head]
            self._head = 0
        return self._arrivals[self._head] if self._head < len(self._arrivals) else None

    def pop_expired(self, now: float, timeout_s: float) -> list[_Entry]:
        expired: list[_Entry] = []
        while (entry := self.oldest()) is not None and now - entry.enqueued_s > timeout_s:
            self.remove(entry)
            expired.append(entry)
        return expired

    def drop_cancelled(self) -> int:
        """Remove every cancelled entry (O(N); only when the queue is full)."""
        dead = [e for _, _, e in self._sorted if e.future.cancelled()]
        for entry in dead:
            self.remove(entry)
        return len(dead)

    def drain(self) -> list[_Entry]:
        """Remove and return every entry, oldest first."""
        entries = sorted((e for _, _, e in self._sorted), key=lambda e: e.seq)
        for entry in entries:
            entry.queued = False
        self._sorted.clear()
        self.tokens = 0
        return entries

    def select(self, now: float, max_wait_s: float, max_batch_size: int, max_batch_tokens: int,
               take: bool) -> tuple[list[_Entry], bool, int]:
        """Run the packing policy; with ``take``, remove the chosen and cancelled entries.

        Returns:
            (chosen entries, full, number of cancelled entries removed).
        """
        dropped = 0
        while (head := self.oldest()) is not None and take and head.future.cancelled():
            self.remove(head)
            dropped += 1
        if head is None:
            return [], False, dropped
        # Overdue items are a prefix of the arrivals: all with seq below the first fresh one.
        first_fresh = bisect.bisect_right(self._arrival_s, now - max_wait_s, self._head)
        cutoff = (self._arrivals[first_fresh].seq if first_fresh < len(self._arrivals)
                  else self._next_seq)
        order = self._sorted
        cancelled: list[_Entry] = []

        def usable(pos: int) -> bool:
            if not take:
                return True  # a dry run (is the batch full yet?) need not look at Futures
            entry = order[pos][2]
            if entry.future.cancelled():
                cancelled.append(entry)
                return False
            return True

        anchor = bisect.bisect_left(order, (head.length, head.seq))
        picked, full = _pick(order, anchor, lambda pos: order[pos][1] < cutoff, usable,
                             max_batch_size, max_batch_tokens)
        chosen = [order[pos][2] for pos in picked]
        if take:
            for entry in chosen + cancelled:
                self.remove(entry)
        return chosen, full, dropped + len(cancelled)


@dataclass
class _Counters:
    batches_run: int = 0
    items_run: int = 0
    items_failed: int = 0
    items_timed_out: int = 0
    items_cancelled: int = 0
    items_rejected: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    busy_s: float = 0.0
    # the fastest a batch has run, per item and per token: a lower bound on the queue's drain
    best_item_s: float = math.inf
    best_token_s: float = math.inf
    # the recent cost per item and per token (moving averages over batches): what Retry-After
    # reads; a lifetime mean still counted the slow first calls (14 s said, 3.9 s drained)
    recent_item_s: float | None = None
    recent_token_s: float | None = None
    in_flight: int = 0
    last_batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=_LAST_BATCHES))


class DynamicBatcher(Generic[T, R]):
    """Queues single items and runs them through ``run_batch`` in packed batches.

    One batcher per model. Worker threads start at construction and are daemons, so a
    forgotten batcher does not keep the process alive; call ``close`` (or use ``with``) to
    finish queued work.

    Tokenization happens in the submitting thread, never in a worker: ``submit`` takes the
    token length from its ``length`` argument or, when that is None, calls ``length_of(item)``
    right there. An async server therefore calls ``submit`` from an executor thread (or
    tokenizes there and passes ``length``), keeping the event loop free.

    Args:
        run_batch: ``run_batch(items) -> results``; one result per item, same order (a list,
            or anything with ``len()`` and indexing, e.g. a (B, D) array). It may raise; the
            error reaches every Future of that batch as a RunnerError.
        length_of: token length of an item (T); optional when every ``submit`` passes length.
        config: the limits; defaults to ``BatcherConfig()``.
        name: the model name, used in error messages and thread names.
        on_batch: called after each batch as ``on_batch(size, tokens, padded_tokens,
            seconds)`` (real tokens, ``size * max(T)``, runner wall time), e.g. to feed
            Prometheus histograms. Its errors are logged and ignored.
        start: start the workers now. False: items submitted before ``start()`` wait in the
            queue (e.g. until the model is warm; tests use it to queue a known set of items).
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R]],
        length_of: Callable[[T], int] | None = None,
        config: BatcherConfig | None = None,
        *,
        name: str = "model",
        on_batch: Callable[[int, int, int, float], None] | None = None,
        start: bool = True,
    ) -> None:
        if not callable(run_batch):
            raise ValidationError(f"batcher[{name}]: run_batch must be callable, got {run_batch!r}")
        if length_of is not None and not callable(length_of):
            raise ValidationError(f"batcher[{name}]: length_of must be callable or None, got {length_of!r}")
        if config is not None and not isinstance(config, BatcherConfig):
            raise ValidationError(
                f"batcher[{name}]: config must be a BatcherConfig, got {type(config).__name__}"
            )
        self.config = config or BatcherConfig()
        self.name = name
        self._run_batch = run_batch
        self._length_of = length_of
        self._on_batch = on_batch
        self._max_wait_s = self.config.max_wait_ms / 1000.0
        self._cond = threading.Condition(threading.Lock())
        self._queue = _Queue()
        self._closed = False
        self._started = False
        self._counters = _Counters()
        self._threads = [
            threading.Thread(target=self._work, name=f"batcher-{name}-{i}", daemon=True)
            for i in range(self.config.workers)
        ]
        if start:
            self.start()

    def start(self) -> None:
        """Start the worker threads (the constructor does, unless ``start=False``). Idempotent.

        Raises:
            RuntimeError: the batcher is closed.
        """
        with self._cond:
            if self._closed:
                raise NotReadyError(f"batcher[{self.name}]: start() after close()")
            if self._started:
                return
            self._started = True
        for thread in self._threads:
            thread.start()

    # ---- submitting ------------------------------------------------------------------------

    def submit(self, item: T, length: int | None = None) -> Future[R]:
        """Queue one item; its Future resolves to the runner's result for it.

        Thread-safe; from asyncio use ``asyncio.wrap_future(batcher.submit(...))``. Cancelling
        the Future before its batch starts removes the item (the runner never sees it).

        Args:
            item: the input, already validated (and usually tokenized) by the caller.
            length: its token length T (>= 0). None: computed here with ``length_of(item)``,
                in the calling thread.

        Returns:
            A Future that yields the result, or raises RunnerError (the runner failed) or
            TimeoutError (it waited longer than ``timeout_s`` in the queue).

        Raises:
            OverloadedError: the queue holds ``max_queue`` items (HTTP 429); its
                ``retry_after_s`` estimates when there will be room.
            ValidationError: the length is missing or not a non-negative int.
            RuntimeError: the batcher is closed (shutting down).
        """
        if length is None:
            if self._length_of is None:
                raise ValidationError(
                    f"batcher[{self.name}].submit: no length given and no length_of function; "
                    "pass length=<token count> or construct the batcher with length_of"
                )
            length = self._length_of(item)
        if not is_int(length) or length < 0:
            raise ValidationError(
                f"batcher[{self.name}].submit: length must be an int >= 0 (tokens), got "
                f"{length!r}; pass the item's token count"
            )
        future: Future[R] = Future()
        expired: list[_Entry] = []
        try:
            with self._cond:
                if self._closed:
                    raise NotReadyError(
                        f"batcher[{self.name}]: submit() after close(); the model is shutting "
                        "down, send the request to another replica or retry after restart"
                    )
                now = time.monotonic()
                # Expire here too, not only in a worker: a worker busy with a long batch would
                # otherwise leave timed-out items in the queue, holding places in max_queue.
                expired = self._queue.pop_expired(now, self.config.timeout_s)
                if len(self._queue) >= self.config.max_queue:
                    self._counters.items_cancelled += self._queue.drop_cancelled()
                if len(self._queue) >= self.config.max_queue:
                    self._counters.items_rejected += 1
                    retry_after_s = self._retry_after_s()
                    raise OverloadedError(
                        f"batcher[{self.name}]: the queue holds {len(self._queue)} items, the "
                        f"limit is {self.config.max_queue} (max_queue); retry after "
                        f"{retry_after_s:.2f} s, or raise max_queue / add workers or replicas",
                        retry_after_s=retry_after_s,
                    )
                least_s = self._least_wait_s(length)
                if least_s > self.config.timeout_s:
                    # it would wait past timeout_s and fail with 504 after all that time: say so now
                    self._counters.items_rejected += 1
                    retry_after_s = self._retry_after_s()
                    raise OverloadedError(
                        f"batcher[{self.name}]: the {len(self._queue)} items queued take at least "
                        f"{least_s:.1f} s to run at the fastest this model has run, past the "
                        f"{self.config.timeout_s} s an item may wait (timeout_s); retry after "
                        f"{retry_after_s:.2f} s, or add workers or replicas",
                        retry_after_s=retry_after_s,
                    )
                self._queue.push(item, length, future, now)
                self._cond.notify()
        finally:
            self._fail_expired(expired)
        return future

    def _least_wait_s(self, length: int) -> float:
        """The least time (lock held) before an item of ``length`` tokens submitted now has run:
        the queue ahead of it and itself, at the fastest per item and per token any batch has
        run (0 before any has). A lower bound: an item it says will time out surely would."""
        c = self._counters
        if not math.isfinite(c.best_item_s):
            return 0.0
        least = (len(self._queue) + 1) * c.best_item_s
        if math.isfinite(c.best_token_s):
            least = max(least, (self._queue.tokens + length) * c.best_token_s)
        return least / self.config.workers

    def _retry_after_s(self) -> float:
        """Seconds until the queue has drained (lock held): the measured time per item and per
        token, whichever says longer. Per item alone, a queue of long texts after many short
        ones drains several times slower than it says."""
        c = self._counters
        if c.recent_item_s is None:
            return _DEFAULT_RETRY_AFTER_S
        drain_s = len(self._queue) * c.recent_item_s
        if c.recent_token_s is not None:
            drain_s = max(drain_s, self._queue.tokens * c.recent_token_s)
        return min(max(drain_s / self.config.workers, self._max_wait_s, 1e-3), self.config.timeout_s)

    # ---- failing timed-out items ------------------------------------------------------------

    def _fail_expired(self, expired: list[_Entry]) -> None:
        """Fail timed-out items; called without the lock (Future callbacks run here)."""
        if not expired:
            return
        now = time.monotonic()
        # set_running first: a Future cancelled meanwhile is left alone (and counted as such).
        running = [e for e in expired if e.future.set_running_or_notify_cancel()]
        with self._cond:  # count before resolving, as in _run
            self._counters.items_timed_out += len(running)
            self._counters.items_cancelled += len(expired) - len(running)
        for entry in running:
            entry.future.set_exception(TimeoutError(
                f"batcher[{self.name}]: waited {now - entry.enqueued_s:.2f} s in the queue, "
                f"the limit is {self.config.timeout_s} s (timeout_s); the model is "
                "overloaded: retry later, or raise timeout_s / add workers or replicas"
            ))

    # ---- the worker ----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            batch, expired = self._next_batch()
            self._fail_expired(expired)
            if batch is None:
                return
            if batch:
                self._run(batch)

    def _next_batch(self) -> tuple[list[_Entry] | None, list[_Entry]]:
        """Block until a batch is due; return (batch, expired). batch None: closed and drained."""
        with self._cond:
            while True:
                oldest = self._queue.oldest()
                if oldest is None:
                    if self._closed:
                        return None, []
                    self._cond.wait()
                    continue
                now = time.monotonic()
                expired = self._queue.pop_expired(now, self.config.timeout_s)
                if expired:
                    return [], expired  # fail them outside the lock, then come back
                deadline = oldest.enqueued_s + self._max_wait_s
                if now < deadline and not self._closed and not self._is_full(now):
                    self._cond.wait(deadline - now)
                    continue
                batch = self._take(now)
                if len(self._queue):
                    self._cond.notify()  # let an idle worker start on the rest
                return batch, []

    def _is_full(self, now: float) -> bool:
        if len(self._queue) >= self.config.max_batch_size:
            return True  # cheap test first: this runs on every submit while a worker waits
        return self._queue.select(now, self._max_wait_s, self.config.max_batch_size,
                                  self.config.max_batch_tokens, take=False)[1]

    def _take(self, now: float) -> list[_Entry]:
        """Remove the next batch from the queue and mark its Futures running (lock held)."""
        chosen, _, cancelled = self._queue.select(now, self._max_wait_s, self.config.max_batch_size,
                                                  self.config.max_batch_tokens, take=True)
        batch: list[_Entry] = []
        for entry in chosen:
            # False: cancelled since select looked; once running, cancel() can no longer win.
            if entry.future.set_running_or_notify_cancel():
                batch.append(entry)
            else:
                cancelled += 1
        self._counters.items_cancelled += cancelled
        self._counters.in_flight += len(batch)
        return batch

    def _run(self, batch: list[_Entry]) -> None:
        """Run one batch and resolve its Futures (no lock held while the runner works)."""
        items = [e.item for e in batch]
        size = len(batch)
        tokens = sum(e.length for e in batch)
        padded = size * max(e.length for e in batch)
        error: BaseException | None = None
        results: Any = None
        start = time.perf_counter()
        try:
            results = self._run_batch(items)
        except BaseException as exc:  # the worker thread must outlive any runner fault
            error = exc
        seconds = time.perf_counter() - start
        values: list[Any] = []
        if error is None:
            try:
                count = len(results)
            except TypeError:
                count = None
            if count != size:
                got = f"{count} results" if count is not None else type(results).__name__
                error = RunnerError(
                    f"batcher[{self.name}]: run_batch returned {got} for {size} items; "
                    "it must return one result per item, in order"
                )
            else:
                try:
                    values = [results[i] for i in range(size)]
                except Exception as exc:  # a result type with len() but broken indexing
                    error = exc
        # Count first, then resolve: whoever sees a result also sees its batch in stats().
        with self._cond:
            c = self._counters
            c.in_flight -= size
            c.batches_run += 1
            c.items_run += size
            c.items_failed += size if error is not None else 0
            c.tokens += tokens
            c.padded_tokens += padded
            c.busy_s += seconds
            if error is None:
                c.best_item_s = min(c.best_item_s, seconds / size)
                c.recent_item_s = _moving(c.recent_item_s, seconds / size)
                if tokens:
                    c.best_token_s = min(c.best_token_s, seconds / tokens)
                    c.recent_token_s = _moving(c.recent_token_s, seconds / tokens)
            c.last_batch_sizes.append(size)
        for i, entry in enumerate(batch):
            if error is None:
                entry.future.set_result(values[i])
            else:
                entry.future.set_exception(self._runner_error(error, size))
        if self._on_batch is not None:
            try:
                self._on_batch(size, tokens, padded, seconds)
            except Exception:
                log.exception("batcher[%s]: on_batch hook failed (ignored)", self.name)

    def _runner_error(self, exc: BaseException, size: int) -> RunnerError:
        # A fresh exception per Future: one instance raised in many threads would collect all
        # their tracebacks.
        if isinstance(exc, RunnerError):
            err = RunnerError(str(exc))
        else:
            err = RunnerError(
                f"batcher[{self.name}]: run_batch failed on a batch of {size} items: "
                f"{type(exc).__name__}: {exc}"
            )
        err.__cause__ = exc
        return err

    # ---- observing and stopping ----------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """A snapshot of the batcher's counters.

        Returns:
            ``queue_depth`` (items waiting, cancelled ones included until purged),
            ``in_flight`` (items in a running batch), ``batches_run``, ``items_run``,
            ``items_failed`` (runner errors), ``items_timed_out``, ``items_cancelled``,
            ``items_rejected`` (OverloadedError), ``tokens`` and ``padded_tokens`` (sums over
            batches run), ``mean_batch_size``, ``padding_efficiency`` (tokens / padded
            tokens; 1.0 before any padding), ``busy_s`` (runner wall time) and
            ``last_batch_sizes`` (the most recent sizes, oldest first).
        """
        with self._cond:
            c = self._counters
            return {
                "queue_depth": len(self._queue),
                "in_flight": c.in_flight,
                "batches_run": c.batches_run,
                "items_run": c.items_run,
                "items_failed": c.items_failed,
                "items_timed_out": c.items_timed_out,
                "items_cancelled": c.items_cancelled,
                "items_rejected": c.items_rejected,
                "tokens": c.tokens,
                "padded_tokens": c.padded_tokens,
                "mean_batch_size": c.items_run / c.batches_run if c.batches_run else 0.0,
                "padding_efficiency": c.tokens / c.padded_tokens if c.padded_tokens else 1.0,
                "busy_s": c.busy_s,
                "last_batch_sizes": list(c.last_batch_sizes),
            }

    @property
    def closed(self) -> bool:
        """True once ``close`` was called; ``submit`` then raises."""
        return self._closed

    def close(self, drain: bool = True, timeout_s: float | None = None) -> bool:
        """Stop accepting items and stop the workers. Idempotent.

        Batches already running always finish. With ``drain`` the queued items run too, at
        once (no more waiting for batches to fill); without it they fail with RuntimeError.
        A later ``close(drain=False)`` fails what an earlier draining close left queued.

        Args:
            drain: run the queued items (True) or fail them (False).
            timeout_s: longest wait for the workers to stop; None waits as long as it takes.

        Returns:
            True when every worker has stopped; False when ``timeout_s`` ran out first (they
            keep going in the background).
        """
        with self._cond:
            self._closed = True
            dropped: list[_Entry] = []
            if not drain:
                dropped = self._queue.drain()
            # Never started but asked to drain: start the workers so they run what is queued.
            start_now = drain and not self._started and len(self._queue) > 0
            self._started = self._started or start_now
            self._cond.notify_all()
        if start_now:
            for thread in self._threads:
                thread.start()
        cancelled = 0
        for entry in dropped:
            if entry.future.set_running_or_notify_cancel():
                entry.future.set_exception(NotReadyError(
                    f"batcher[{self.name}]: closed before this item ran (close(drain=False)); "
                    "the model is shutting down, retry on another replica"
                ))
            else:
                cancelled += 1
        with self._cond:
            self._counters.items_cancelled += cancelled
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        me = threading.current_thread()
        for thread in self._threads:
            if thread is me or thread.ident is None:  # inside run_batch, or never started
                continue
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads if t is not me)

    def __enter__(self) -> DynamicBatcher[T, R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(drain=True)
