"""Shared helpers for benchmark scripts: timing, percentiles, machine info, JSON lines, plots.

Every suite measures its baseline in the same run and reports the ratio, because absolute
times on shared machines are noise. Records are plain dicts printed as JSON lines and
appended to ``<out_dir>/results.jsonl``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any


@dataclass
class ProfileContext:
    """What a suite gets: where to write, how hard to try, and where to report."""

    out_dir: Path
    quick: bool = False
    trace: bool = False
    device: str = "auto"
    command: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, record: dict[str, Any]) -> dict[str, Any]:
        """Print one JSON line and keep it (machine info and date attached once per file)."""
        record = {"date": date.today().isoformat(), "command": self.command, **record}
        line = json.dumps(record, sort_keys=True, default=_jsonable)
        print(line, flush=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self.records.append(record)
        return record


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def percentiles(samples_s: list[float]) -> dict[str, float]:
    """p50/p95/p99 and mean of a list of durations in seconds, reported in milliseconds."""
    if not samples_s:
        raise ValueError("percentiles: no samples")
    xs = sorted(samples_s)

    def pick(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {
        "p50_ms": pick(0.50) * 1e3,
        "p95_ms": pick(0.95) * 1e3,
        "p99_ms": pick(0.99) * 1e3,
        "mean_ms": statistics.fmean(xs) * 1e3,
        "n": len(xs),
    }


def time_call(fn: Callable[[], Any], *, warmup: int = 1, repeat: int = 5,
              sync: Callable[[], None] | None = None) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        out.append(time.perf_counter() - start)
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """CPU model and cores, GPU (if any) and library versions, for every results file."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    for mod in ("torch", "transformers", "sentence_transformers", "faiss", "onnxruntime", "triton", "numpy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            info[mod] = None
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        info["gpu"] = None
    return info


def save_plot(path: Path, draw: Callable[[Any, Any], None], title: str) -> Path:
    """Draw with matplotlib (Agg backend) into ``path``; ``draw(fig, ax)`` fills the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    draw(fig, ax)
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
