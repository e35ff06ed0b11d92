"""Retry-After from the measured drain rate (``serving/drain.py``), on a fake clock.

A fixed 1 s sent every refused client back together a second later, whatever the server's
pace; now the k-th client refused within a drain interval is told about k intervals, a stalled
server says so, and idle time is not read as a slow drain.
"""

from __future__ import annotations

from searchsmith.serving.drain import MAX_RETRY_AFTER_S, DrainRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _paced(interval_s: float, finishes: int = 5) -> tuple[DrainRate, Clock]:
    """A DrainRate that saw ``finishes`` places freed ``interval_s`` apart while busy."""
    clock = Clock()
    drain = DrainRate(clock=clock)
    drain.started()
    for _ in range(finishes):
        clock.now += interval_s
        drain.finished()
    return drain, clock


def test_one_second_before_any_place_was_freed() -> None:
    drain = DrainRate(clock=Clock())
    assert [drain.retry_after_s() for _ in range(5)] == [1] * 5
    drain.started()  # busy, nothing finished yet: still no pace
    assert drain.retry_after_s() == 1 and drain.interval_s is None


def test_refused_clients_are_spread_at_the_drain_pace() -> None:
    drain, _ = _paced(2.0)
    assert drain.interval_s == 2.0
    assert [drain.retry_after_s() for _ in range(4)] == [2, 4, 6, 8]
    fast, _ = _paced(0.25)  # four places a second: four clients per second of Retry-After
    assert [fast.retry_after_s() for _ in range(9)] == [1, 1, 1, 1, 2, 2, 2, 2, 3]


def test_the_schedule_empties_as_time_passes() -> None:
    drain, clock = _paced(2.0)
    assert [drain.retry_after_s() for _ in range(3)] == [2, 4, 6]
    for step in (2.0, 2.0, 1.0):  # 5 s on, at the same pace: the third is due in 1 s
        clock.now += step
        if step == 2.0:
            drain.finished()
    assert drain.retry_after_s() == 3  # one interval after the third
    for _ in range(10):  # 20 s on: all came back, the schedule starts again from now
        clock.now += 2.0
        drain.finished()
    assert 2.0 < drain.interval_s < 2.1  # the 3 s interval after the pause, nearly forgotten
    assert drain.retry_after_s() == 3  # one interval from now, not after the old schedule


def test_retry_after_is_clamped_to_the_maximum() -> None:
    drain, _ = _paced(7.0)
    said = [drain.retry_after_s() for _ in range(10)]
    assert said[:4] == [7, 14, 21, 28] and said[4:] == [MAX_RETRY_AFTER_S] * 6
    assert DrainRate(max_s=5, clock=Clock()).max_s == 5
    short, _ = _paced(3.0)
    short.max_s = 5
    assert [short.retry_after_s() for _ in range(3)] == [3, 5, 5]


def test_a_stalled_server_says_so() -> None:
    drain, clock = _paced(0.5)
    assert drain.retry_after_s() == 1
    clock.now += 20.0  # nothing freed for 20 s while busy: the interval in progress counts
    assert drain.retry_after_s() == 5  # 0.5 + 0.2 x (20 - 0.5) = 4.4 s
    assert drain.interval_s == 0.5  # only a finished interval joins the average


def test_idle_time_is_not_read_as_a_slow_drain() -> None:
    drain, clock = _paced(0.5)
    clock.now += 3600.0  # idle for an hour (nothing in work)
    drain.started()  # a burst begins
    clock.now += 0.5
    drain.finished()
    assert drain.interval_s == 0.5
    assert drain.retry_after_s() == 1
