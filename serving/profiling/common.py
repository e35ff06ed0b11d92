"""Shared helpers for benchmark scripts: timing, percentiles, machine info, JSON lines, plots.

Every suite measures its baseline in the same run and reports the ratio, because absolute
times on shared machines are noise. Records are plain dicts printed as JSON lines and
appended to ``<out_dir>/results.jsonl``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from searchsmith.models.int8_cpu import cpu_int8_isa  # one detector for export, load and profiles
from searchsmith.models.metrics import percentiles  # noqa: F401 - the suites import it from here

# PNG text chunk that carries what a plot shows (see save_plot and plot_info).
PLOT_META_KEY = "searchsmith-plot"


@dataclass
class ProfileContext:
    """What a suite gets: where to write, how hard to try, and where to report.

    Attributes:
        out_dir: folder for ``results.jsonl``, plots and traces.
        quick: small sizes on the CPU (``--quick``).
        trace: wrap measured loops in ``torch.profiler`` (``--trace``; see :meth:`profiled`).
        device: ``auto``, ``cpu`` or ``cuda`` (``--device``).
        command: the command line, recorded in every line.
        group: the group this run belongs to (``all``, ``gpu``), "" for a single suite.
        records: every record emitted so far.
    """

    out_dir: Path
    quick: bool = False
    trace: bool = False
    device: str = "auto"
    command: str = ""
    group: str = ""  # "all" / "gpu" when the suite runs as a step of a group
    records: list[dict[str, Any]] = field(default_factory=list)
    _trace_names: list[str] = field(default_factory=list, repr=False)

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

    @contextmanager
    def profiled(self, name: str) -> Iterator[None]:
        """Wrap a suite's measured loop in ``torch.profiler`` when ``--trace`` is on.

        Writes ``<out_dir>/trace_<name>.json`` (Chrome trace format: open it in
        ``chrome://tracing`` or https://ui.perfetto.dev) and emits one record naming it.
        Without ``--trace`` it does nothing, so suites wrap their loop unconditionally::

            with ctx.profiled("rerank"):
                for _ in range(rounds): ...

        A name used twice in one run gets a ``-2``, ``-3`` ... suffix. Timings taken inside
        the block include the profiler's overhead; the record says so.
        """
        if not self.trace:
            yield
            return
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        n = sum(1 for t in self._trace_names if t == stem)
        self._trace_names.append(stem)
        path = self.out_dir / (f"trace_{stem}.json" if n == 0 else f"trace_{stem}-{n + 1}.json")
        with profile(activities=activities) as prof:
            yield
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)  # atomic: a reader never sees half a trace
        self.emit({"suite": name.split("-")[0], "trace": path.name, "trace_of": name,
                   "events": len(prof.events()),
                   "note": "timings measured inside this block include the profiler's overhead"})


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


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
        "cpu_int8": cpu_int8_isa(),
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
    """Draw with matplotlib (Agg backend) into ``path``; ``draw(fig, ax)`` fills the axes.

    What the plot shows (title, axis labels, legend entries, number of drawn bars / lines /
    points) is stored in the PNG's ``searchsmith-plot`` text chunk, read back by
    :func:`plot_info`: ``searchsmith profile`` records it in ``results.jsonl`` and the tests
    check that a plot shows what its title says. The file is written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        draw(fig, ax)
        ax.set_title(title)
        fig.tight_layout()
        _, labels = ax.get_legend_handles_labels()
        info = {"title": title, "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                "series": [lb for lb in labels if not lb.startswith("_")],
                "bars": len(ax.patches), "lines": len(ax.lines),
                "points": sum(len(line.get_xdata()) for line in ax.lines)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + ".tmp.png")
        fig.savefig(tmp, dpi=110, metadata={"Title": title, PLOT_META_KEY: json.dumps(info)})
        os.replace(tmp, path)
    finally:
        plt.close(fig)
    return path


def plot_info(path: Path) -> dict[str, Any]:
    """What a PNG written by :func:`save_plot` shows: title, labels, series, size in pixels.

    Raises:
        ValueError: the file is not a PNG, or was not written by :func:`save_plot`.
    """
    from PIL import Image

    with Image.open(path) as im:
        im.load()
        if im.format != "PNG":
            raise ValueError(f"{path}: not a PNG (format {im.format})")
        meta = getattr(im, "text", {}).get(PLOT_META_KEY)
        size = im.size
    if meta is None:
        raise ValueError(f"{path}: no {PLOT_META_KEY!r} text chunk; write plots with save_plot")
    return {**json.loads(meta), "width": size[0], "height": size[1]}


def interleaved_best(fns: dict[str, Any], rounds: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Run each of ``fns`` once (warm-up; its result is kept), then ``rounds`` interleaved rounds.

    Interleaving matters on a shared machine: the load drifts, and timing one implementation
    after the other would hand the drift to one of them.

    Returns:
        ``(results, best)``: each function's warm-up result and its best time in seconds.
    """
    results = {k: fn() for k, fn in fns.items()}
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return results, best

