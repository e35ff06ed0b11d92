"""A batch runner that holds its batch until the test releases it: to fill a batcher's queue,
outlast ``request_timeout_s`` or keep a request in flight (the HTTP tests' stand-in runner)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np


class BlockingRunner:
    """``started`` is set when a batch arrives; the batch then waits for ``release`` (10 s at
    most) and gets ``result(batch)``."""

    def __init__(self, result: Callable[[Sequence], np.ndarray]) -> None:
        self.result = result
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, batch: Sequence) -> np.ndarray:
        self.started.set()
        self.release.wait(10)
        return self.result(batch)
