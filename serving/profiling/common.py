"""Shared helpers for benchmark scripts: timing, percentiles, machine info, JSON lines, plots,
token counts.

Every suite measures its baseline in the same run and reports the ratio, because absolute
times on shared machines are noise. Records are plain dicts printed as JSON lines and
appended to ``<out_dir>/results.jsonl``.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from searchsmith.models.int8_cpu import cpu_int8_isa  # one detector for export, load and profiles
from searchsmith.models.io import WRITTEN_RECORD, WrittenFiles, sha256_file, temp_file_beside
from searchsmith.models.metrics import percentiles  # noqa: F401 - the suites import it from here

if TYPE_CHECKING:
    from searchsmith.models.runtime import Bundle
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from transformers import PreTrainedTokenizerBase

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

    A run's lines in ``results.jsonl`` (which later runs append to) start with its ``machine``
    line, which carries the run's id (``run``), and end with ``{"suite": "end", "run": ID,
    "complete": true}`` only when the run finished (:meth:`finish`); an interrupted or failed run
    ends with ``"complete": false`` instead, or (killed) with no end line at all. The machine
    line is held back (:meth:`start`) until the first record, so a run refused before it
    measured anything writes nothing.
    """

    out_dir: Path
    quick: bool = False
    trace: bool = False
    device: str = "auto"
    command: str = ""
    group: str = ""  # "all" / "gpu" when the suite runs as a step of a group
    records: list[dict[str, Any]] = field(default_factory=list)
    _trace_names: list[str] = field(default_factory=list, repr=False)
    _pending: dict[str, Any] | None = field(default=None, repr=False)
    run_id: str = ""

    def start(self, machine: dict[str, Any]) -> None:
        """Open a run: ``machine`` (the machine line) is written, with a new run id, before the
        first record the run emits (none emitted: nothing written)."""
        import uuid

        self.run_id = uuid.uuid4().hex[:12]
        self._pending = {**machine, "run": self.run_id}

    @property
    def started(self) -> bool:
        """Whether this run has written a line (its machine line) to ``results.jsonl``."""
        return self._pending is None and bool(self.records)

    def finish(self, complete: bool, **extra: Any) -> None:
        """Close the run with its ``end`` line: ``complete`` True only when every step ran to its
        end. A run that wrote nothing and did not complete writes nothing."""
        if complete or self.started:
            self.emit({"suite": "end", "run": self.run_id, "complete": complete, **extra})

    def emit(self, record: dict[str, Any]) -> dict[str, Any]:
        """Print one JSON line and keep it (machine info and date attached once per file)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.emit(pending)
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
        check_trace_path(path)
        with profile(activities=activities) as prof:
            yield
        check_trace_path(path)  # again: the block may have run for minutes
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = temp_file_beside(path, ".json")
        try:
            prof.export_chrome_trace(str(tmp))
            written = WrittenFiles.read(self.out_dir / WRITTEN_RECORD)
            written.add(path, sha256_file(tmp))
            os.replace(tmp, path)  # atomic: a reader never sees half a trace
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        written.save()  # the trace is now one searchsmith wrote: a later --trace may replace it
        self.emit({"suite": name.split("-")[0], "trace": path.name, "trace_of": name,
                   "events": len(prof.events()),
                   "note": "timings measured inside this block include the profiler's overhead"})


def check_trace_path(path: Path) -> None:
    """Refuse a trace path that holds a file searchsmith did not write (or one its user edited
    since): ``--trace`` replaces only its own traces, which the folder's
    ``.searchsmith-written.json`` records by checksum.

    Raises:
        ConfigError: naming the file and the fix.
    """
    from searchsmith.models.errors import ConfigError

    state = WrittenFiles.read(Path(path).parent / WRITTEN_RECORD).state(Path(path))
    if state not in ("absent", "ours"):
        what = "was edited since searchsmith wrote it" if state == "edited" else "is not a trace searchsmith wrote"
        raise ConfigError(f"profile --trace: {str(path)!r} {what}; nothing was replaced. Move it out of "
                          f"{str(Path(path).parent)!r} or choose another --out (a profile replaces only its own "
                          "traces)")


def check_index(index_dir: str) -> None:
    """An ``--index`` a suite will open, checked before anything is measured the way the
    suite opens it: ``read_manifest`` (what ``load_pipeline`` and ``load_router`` call first)
    and the files it lists present (their checksums are the load's to verify).

    Raises:
        BundleError: the message of the load, with the command that fixes it.
    """
    from searchsmith.serving.index import read_manifest, verify_files

    verify_files(read_manifest(index_dir), Path(index_dir), checksums=False)


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it; another process may take it later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout_s: float = 240, what: str = "profile ray") -> None:
    """Poll ``url``'s ``/ready`` every 0.5 s until it answers 200 (a server starting, whose port
    may not be open yet: a connection error is waited out too).

    Raises:
        RuntimeError: not ready within ``timeout_s``, prefixed with ``what`` (the caller).
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what}: {url} was not ready within {timeout_s:.0f} s")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


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


def check_plot_path(path: Path, flag: str = "plot", replace: bool = False) -> None:
    """Refuse a plot path that is a folder, or a file searchsmith did not write (not a
    :func:`save_plot` PNG) unless ``replace``: a user's file is never overwritten.

    Raises:
        ConfigError: naming ``flag`` and the fix.
    """
    from searchsmith.models.errors import ConfigError

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag}: {str(path)!r} is a folder; give the path of a .png file")
    if path.exists() and not replace:
        try:
            plot_info(path)
        except Exception:  # noqa: BLE001 - not a PNG, not ours, unreadable: all the user's
            raise ConfigError(f"{flag}: {str(path)!r} exists and is not a plot searchsmith wrote; move it or "
                              "choose another path (searchsmith replaces only its own plots)") from None


def save_plot(path: Path, draw: Callable[[Any, Any], None], title: str, *, replace: bool = False) -> Path:
    """Draw with matplotlib (Agg backend) into ``path``; ``draw(fig, ax)`` fills the axes.

    What the plot shows (title, axis labels, legend entries, number of drawn bars / lines /
    points) is stored in the PNG's ``searchsmith-plot`` text chunk, read back by
    :func:`plot_info`: ``searchsmith profile`` records it in ``results.jsonl`` and the tests
    check that a plot shows what its title says. The file is written atomically, and replaces
    only a plot searchsmith wrote (:func:`check_plot_path`; any file with ``replace``).
    """
    from searchsmith.models.io import temp_file_beside

    check_plot_path(path, replace=replace)
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
        tmp = temp_file_beside(path, ".png")
        try:
            fig.savefig(tmp, dpi=110, metadata={"Title": title, PLOT_META_KEY: json.dumps(info)})
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
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
    """Each of ``fns`` warmed up once, then timed in ``rounds`` interleaved, rotating rounds
    (:func:`searchsmith.serving.profiling.timing.interleave`, the one timing rule).

    Interleaving matters on a shared machine: the load drifts, and timing one implementation
    after the other would hand the drift to one of them.

    Returns:
        ``(results, best)``: each function's result and its best time in seconds.
    """
    from searchsmith.serving.profiling.timing import interleave

    got = interleave(fns, max(1, rounds))
    return got.results, {k: min(v) for k, v in got.samples.items()}



# -- tokens -------------------------------------------------------------------------------
# Every embed / rerank row reports tokens/s beside texts/s (or pairs/s): texts/s alone hides
# how long the texts were, and the share of padding says how much of the work was thrown away.


class TokenFields(TypedDict):
    """The token figures of one measured row (see :meth:`TokenCount.fields`)."""

    tokens: int
    tokens_per_s: float
    padding_fraction: float | None
    seconds: float


@dataclass(frozen=True)
class TokenCount:
    """What one call of a system fed its model.

    Attributes:
        tokens: real tokens: each input tokenized as the system tokenizes it (special tokens
            included), truncated at its max length as the system truncates.
        positions: positions fed to the model, padding included (sum over batches of batch
            size x longest input of the batch); None where the system's batching is unknown.
    """

    tokens: int
    positions: int | None

    def __add__(self, other: TokenCount) -> TokenCount:
        positions = None if self.positions is None or other.positions is None else self.positions + other.positions
        return TokenCount(self.tokens + other.tokens, positions)

    @property
    def padding_fraction(self) -> float | None:
        """Share of padded positions among all positions fed: ``1 - tokens / positions``."""
        if self.positions is None:
            return None
        return 1.0 - self.tokens / self.positions if self.positions else 0.0

    def fields(self, seconds: float) -> TokenFields:
        """``tokens``, ``tokens_per_s`` (over the row's measured ``seconds``), ``padding_fraction``."""
        return {"tokens": self.tokens, "tokens_per_s": self.tokens / seconds,
                "padding_fraction": self.padding_fraction, "seconds": seconds}


def batched_count(lengths: Sequence[int], batches: Iterable[Sequence[int]]) -> TokenCount:
    """Tokens and positions fed when each batch is padded to its longest input.

    Args:
        lengths: tokens per input (special tokens included, after truncation).
        batches: indices into ``lengths``, one list per model call; every index once.
    """
    tokens = positions = 0
    for batch in batches:
        if len(batch):
            tokens += sum(lengths[i] for i in batch)
            positions += len(batch) * max(lengths[i] for i in batch)
    return TokenCount(tokens, positions)


def padding_fraction(lengths: Sequence[int], batches: Iterable[Sequence[int]]) -> float:
    """``1 - real / padded`` over ``batches``, each padded to its longest input.

    ``lengths [5, 3, 2, 7]`` in batches ``[[3, 0], [1, 2]]``: 12 real of 2 x 7 and 5 real of
    2 x 3, so ``1 - 17 / 20 = 0.15``.
    """
    return batched_count(lengths, batches).padding_fraction or 0.0


def token_lengths(tokenizer: PreTrainedTokenizerBase, first: Sequence[str], second: Sequence[str] | None = None,
                  *, max_length: int, truncation: bool | str = True) -> list[int]:
    """Tokens per input (or per ``(first[i], second[i])`` pair) as the model sees it: special
    tokens included, truncated at ``max_length`` with the ``truncation`` strategy."""
    kwargs = {"truncation": truncation, "max_length": max_length, "padding": False,
              "return_attention_mask": False, "return_token_type_ids": False}
    enc = tokenizer(list(first), **kwargs) if second is None else tokenizer(list(first), list(second), **kwargs)
    return [len(ids) for ids in enc["input_ids"]]


def sentence_transformers_count(model: SentenceTransformer | CrossEncoder, inputs: Sequence[str | tuple[str, str]],
                                batch_size: int) -> TokenCount:
    """What ``SentenceTransformer.encode(inputs)`` / ``CrossEncoder.predict(inputs)`` feed the model.

    Both (sentence-transformers 6, ``_inference``) sort the inputs by character length, longest
    first (``np.argsort`` of ``-model._input_length(x)``; a pair counts both texts), cut them
    every ``batch_size`` and tokenize each batch with ``padding=True`` (to its longest) and
    ``truncation="longest_first"`` at ``model.max_seq_length``. A model that flattens text
    inputs (FlashAttention varlen) pads nothing. A version without ``_input_length`` sorts in a
    way not reproduced here: its positions are None (unknown).
    """
    import numpy as np

    firsts = [x if isinstance(x, str) else x[0] for x in inputs]
    pairs = None if all(isinstance(x, str) for x in inputs) else [x[1] for x in inputs]
    lengths = token_lengths(model.tokenizer, firsts, pairs, max_length=model.max_seq_length,
                            truncation="longest_first")
    flattens = getattr(model, "_can_flatten_inputs", None)
    if flattens is not None and flattens():
        return TokenCount(sum(lengths), sum(lengths))
    input_length = getattr(model, "_input_length", None)
    if input_length is None:
        return TokenCount(sum(lengths), None)
    order = np.argsort([-input_length(x) for x in inputs])  # the same call, so ties break the same way
    return batched_count(lengths, [order[i:i + batch_size] for i in range(0, len(order), batch_size)])


def bundle_count(bundle: Bundle, first: list[str], second: list[str] | None = None) -> TokenCount:
    """What one ``encode(first)`` / ``score_pairs(zip(first, second))`` of ``bundle`` feeds its
    graph: the batches come from the bundle's own tokenization and packing
    (``Bundle._encode_text``), read back from their attention masks."""
    tokens = positions = 0
    for _, feeds in bundle._encode_text(first, second):
        mask = feeds["attention_mask"]  # (b, T)
        tokens += int(mask.sum())
        positions += int(mask.size)
    return TokenCount(tokens, positions)
