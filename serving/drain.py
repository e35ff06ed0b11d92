"""Retry-After for a bound that refuses at once: :class:`DrainRate`.

``server.max_pending_requests`` (429) and ``server.max_connections`` (503) refuse a client at
once and tell it when to come back. A fixed 1 s sent every refused client back together, a
second later, whatever the server's pace: a burst of 200 over a server that frees 20 places a
second came back as the same burst. Here the answer is the refused clients' excess over the
measured drain rate: the time between places freed while the server is busy (a moving
average), and the clients already told to come back, so that they come back spread at the pace
places free up (the k-th refused within a drain interval is told about k intervals).

Used on one event loop (no lock); no import of the project or a web framework.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["MAX_RETRY_AFTER_S", "DrainRate"]

# The longest Retry-After: past it a client would rather hear "overloaded" again with a fresh
# estimate than wait on an old one.
MAX_RETRY_AFTER_S = 30

# weight of the newest interval in the moving average (as the batcher's Retry-After)
_RECENT_WEIGHT = 0.2


class DrainRate:
    """The pace at which places free up, and the Retry-After of a refused client.

    The owner of a count calls :meth:`started` when the count rises from 0 (idle time is not
    drain time), :meth:`finished` each time a place is freed, and :meth:`retry_after_s` for
    each client it refuses.

    Args:
        max_s: the longest Retry-After in seconds.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, max_s: int = MAX_RETRY_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_s = max_s
        self._clock = clock
        self.interval_s: float | None = None  # moving average of the seconds between places freed
        self._since: float | None = None  # start of the interval in progress
        self._next_due = -math.inf  # when the last refused client was told to come back

    def started(self) -> None:
        """The count rose from 0: the interval in progress starts now."""
        self._since = self._clock()

    def finished(self) -> None:
        """A place was freed: the interval since the last one joins the average."""
        now = self._clock()
        if self._since is not None:
            self.interval_s = self._moving(now - self._since)
        self._since = now

    def retry_after_s(self) -> int:
        """Whole seconds (HTTP's Retry-After) until a place should be free for this client, in
        [1, ``max_s``]: one drain interval after the last client told to come back (or after
        now). The interval in progress counts once it is longer than the average, so a server
        that stopped freeing places says so. 1 before any place has been freed (no pace known).
        """
        if self.interval_s is None:
            return 1
        now = self._clock()
        interval = self.interval_s
        if self._since is not None and now - self._since > interval:
            interval = self._moving(now - self._since)
        due = min(max(now, self._next_due) + interval, now + self.max_s)
        self._next_due = due
        return min(max(1, math.ceil(due - now)), self.max_s)

    def _moving(self, value: float) -> float:
        average = self.interval_s
        return value if average is None else average + _RECENT_WEIGHT * (value - average)
