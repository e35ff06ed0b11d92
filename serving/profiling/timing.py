"""How the ``searchsmith profile`` suites time what they compare, and on which device.

Every suite compares variants (implementations, settings, a baseline) in one run. On a shared
machine the load drifts from one second to the next, so a variant timed after another gets
a different machine (``profile embed`` once reported 160 texts/s in its curve and 25 texts/s
in its summary for the same batches, timed a minute apart). So compared variants are timed one way, :func:`interleave`:

1. warm-up: each variant is called ``warmup`` times, untimed (kernels, allocator, caches,
   an optimizer's state);
2. rounds: each round calls every variant once, back to back, so that drift hits every
   variant alike; the order rotates by one each round, so that no variant always runs first
   (right after the warm-up, or after the same neighbour).

Figures for one configuration come from one such measurement: a summary quotes the rows it
summarises, never a second timing of the same thing.

:func:`resolve_device` is the one ``--device`` check of the suites: ``cuda`` without CUDA is
refused before any work, with the fix, instead of running on the CPU under a CUDA label.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class Interleaved:
    """What :func:`interleave` measured.

    Attributes:
        samples: per variant, the seconds of each timed call, in round order.
        results: per variant, what its last call returned.
        returns: per variant, what each timed call returned (only with ``keep_returns``).
        order: the variants' order in each round.
    """

    samples: dict[str, list[float]]
    results: dict[str, Any]
    returns: dict[str, list[Any]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)

    def best(self) -> dict[str, float]:
        """Each variant's fastest call, in seconds (load only ever adds time)."""
        return {k: min(v) for k, v in self.samples.items()}

    def best_round(self, name: str) -> int:
        """The round of ``name``'s fastest call (to read what that same call returned)."""
        s = self.samples[name]
        return s.index(min(s))

    def median(self) -> dict[str, float]:
        """Each variant's median call, in seconds."""
        return {k: statistics.median(v) for k, v in self.samples.items()}


def rotation(i: int, variants: Sequence[T]) -> list[T]:
    """``variants`` in the order round (or item) ``i`` runs them: rotated left by ``i`` (mod
    their count), so that over any k consecutive rounds each of the k variants runs once in
    each position. The one order of every interleaved comparison: the profile suites' timed
    rounds here, and eval's items under each variant (``serving/evaluate.py``)."""
    if not variants:
        return []
    start = i % len(variants)
    return [*variants[start:], *variants[:start]]


def interleave(fns: Mapping[str, Callable[..., Any]], rounds: int, *, warmup: int = 1,
               inputs: Sequence[tuple[Any, ...]] | None = None, sync: Callable[[], None] | None = None,
               keep_returns: bool = False, rotate: bool = True) -> Interleaved:
    """Time ``fns`` against each other: ``warmup`` untimed calls each, then interleaved rounds.

    Args:
        fns: variant name -> the call to time.
        rounds: timed rounds; each calls every variant once. Ignored when ``inputs`` is given.
        warmup: untimed calls of each variant first (with ``inputs``: on the first inputs).
        inputs: per round, the positional arguments of every variant's call (round ``r`` calls
            ``fn(*inputs[r])``: one query per round, say); None = calls without arguments.
        sync: called after each call, inside its timing (``torch.cuda.synchronize``).
        keep_returns: keep what every timed call returned (``Interleaved.returns``).
        rotate: rotate the order by one each round.

    Returns:
        The samples, each variant's last result and, with ``keep_returns``, every timed result.
    """
    names = list(fns)
    if inputs is not None:
        rounds = len(inputs)
    args = (lambda r: tuple(inputs[r % len(inputs)])) if inputs is not None else (lambda r: ())
    results: dict[str, Any] = {}
    for i in range(warmup):
        for name in names:
            results[name] = fns[name](*args(i))
            if sync:
                sync()
    out = Interleaved({k: [] for k in names}, results, {k: [] for k in names} if keep_returns else {})
    for r in range(rounds):
        order = rotation(r, names) if rotate else list(names)
        out.order.append(order)
        for name in order:
            a = args(r)
            t0 = time.perf_counter()
            value = fns[name](*a)
            if sync:
                sync()
            out.samples[name].append(time.perf_counter() - t0)
            results[name] = value
            if keep_returns:
                out.returns[name].append(value)
    return out


def resolve_device(suite: str, requested: str, *, cpu_only: str | None = None) -> str:
    """The device a suite runs on, checked before it does any work.

    ``auto`` is CUDA when torch sees it, else the CPU; ``cuda`` without CUDA is refused (it
    used to run on the CPU with every row saying ``"device": "cpu"``).

    Args:
        suite: the suite's name, for the message.
        requested: ``--device``: ``auto``, ``cpu`` or ``cuda``.
        cpu_only: why the suite measures the CPU only; then ``auto`` is the CPU and ``cuda``
            is refused with this reason.

    Returns:
        ``"cuda"`` or ``"cpu"``.

    Raises:
        ValidationError: an unknown device, ``cuda`` without CUDA, or ``cuda`` for a CPU-only suite.
    """
    from searchsmith.models.errors import ValidationError

    if requested not in DEVICES:
        raise ValidationError(f"profile {suite}: --device must be auto, cpu or cuda, got {requested!r}")
    if cpu_only is not None:
        if requested == "cuda":
            raise ValidationError(f"profile {suite}: measures the CPU only ({cpu_only}); --device cuda is not "
                                  "supported here; use --device cpu (or auto, which runs it on the CPU too)")
        return "cpu"
    if requested == "cpu":
        return "cpu"
    import torch

    cuda = torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        raise ValidationError(f"profile {suite}: --device cuda but torch sees no CUDA device; use --device cpu")
    return "cuda" if cuda else "cpu"


__all__ = ["DEVICES", "Interleaved", "interleave", "resolve_device", "rotation"]
