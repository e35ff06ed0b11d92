"""``searchsmith profile SUITE``: each suite compares against a baseline in the same run.

Suites: ``embed``, ``ladder``, ``rerank``, ``route``, ``kernels``, ``pipeline``, ``server``, ``llm``, ``read``,
``shards``, ``ray``; groups:
``all`` (every suite but ``llm`` and ``read``; ``--quick``: small sizes on the CPU, a few minutes) and ``gpu``.

The GPU check (the one command of ``../shared/GPU.md``, sized for about 5 minutes on one H200)::

    searchsmith profile --suite gpu --out gpu-results

runs embed (torch fp16 vs sentence-transformers), embed ``--backend onnx`` (only when
onnxruntime has the CUDA provider, else a ``skipped`` line), the embedder's throughput ladder
(1 to 1e6 texts, short / mixed / long, capped in time), rerank (fp16 bundle vs
CrossEncoder fp32/fp16 on the GPU), pipeline and, last, kernels (Triton vs torch vs faiss CPU), and writes ``gpu-results/results.jsonl`` plus one PNG per suite.
Under the Triton interpreter it runs end to end at toy sizes (the test)::

    SEARCHSMITH_PROFILE_TINY=1 TRITON_INTERPRET=1 searchsmith profile --suite gpu --out /tmp/g

Every PNG a suite writes is recorded as a ``{"plot": FILE, "title": ...}`` line (with its
axis labels and legend, read back from the PNG) right after that suite's records.

Later runs append to the same ``results.jsonl``. Each run's lines start with its ``machine``
line, which names the run (``"run": ID``), and end with ``{"suite": "end", "run": ID,
"complete": true}`` when the run got to its end (``failed_steps`` lists a group's failed steps);
an interrupted or failed run ends with ``"complete": false`` and the error, a killed one with no
end line: a reader takes a run's figures as finished only from a complete run. Every option and
every path (``--out``, ``--record``, ``--readme``, a plot or trace the run would replace, and each
step's ``--index``, ``--config`` and ``--run``: its suite's ``check_args``) is checked before
anything is measured or written.

One run writes into an ``--out`` at a time: once its checks pass, a run holds ``--out``'s lock
(``models.io.exclusive``: ``.NAME.lock`` beside the folder, removed when the run ends) to its
last line, and a second run into the same folder meanwhile is refused at once, before it
measures or writes anything, instead of mixing its rows, plots and traces into the first one's.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from searchsmith.models.errors import ConfigError, SearchsmithError

if TYPE_CHECKING:
    from searchsmith.serving.profiling.common import ProfileContext

# suite -> module with ``run(ctx: ProfileContext, args: argparse.Namespace) -> None``
SUITES: dict[str, str] = {
    "embed": "searchsmith.serving.profiling.embed",
    # the embedder's throughput ladder: 1 ... 1e6 texts x short / mixed / long texts vs ST
    "ladder": "searchsmith.serving.profiling.ladder",
    "route": "searchsmith.serving.profiling.route",
    "kernels": "searchsmith.serving.profiling.kernels",
    "rerank": "searchsmith.serving.profiling.rerank",
    "pipeline": "searchsmith.serving.profiling.pipeline",
    "server": "searchsmith.serving.profiling.server",
    # the openai backend on a local llama.cpp server (pip install -e '.[llm]'); in no group
    "llm": "searchsmith.serving.profiling.llm",
    # the reader: torch fp32 vs ONNX fp32 vs int8 (--run READER_RUN); in no group
    "read": "searchsmith.serving.profiling.read",
    # one training step of the default encoder by AdamW kernel (loop, foreach, fused); in no group
    "train": "searchsmith.serving.profiling.train",
    # one index shard by kind (flat, 2 shards, IVF, IVF mmap): the capacity model's inputs
    "shards": "searchsmith.serving.profiling.shards",
    # one process vs Ray Serve with 1 and 2 replicas under the same load (--index; .[ray]); in no group
    "ray": "searchsmith.serving.profiling.ray_serve",
}
# ``all`` and ``gpu`` are sequences of steps: a suite name, or ``suite:backend`` to run a
# suite with ``--backend`` set (``embed:onnx``).
GROUPS: dict[str, list[str]] = {
    "all": ["embed", "rerank", "route", "kernels", "pipeline", "server"],
    # Kernels last: a fault in a Triton kernel can poison the CUDA context for the rest of
    # the process, and the other steps' figures should survive it.
    "gpu": ["embed", "embed:onnx", "ladder", "rerank", "pipeline", "kernels"],
}


def _onnx_cuda_missing() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return ("onnxruntime has no CUDAExecutionProvider (the CPU build); install onnxruntime-gpu "
                "to measure the ONNX embedder on the GPU")
    return None


# suite -> the plots it writes into --out (``save_plot``): checked before anything is measured,
# so a user's file of that name is refused up front, not after the run (a test keeps this in
# step with each suite's source).
PLOTS: dict[str, tuple[str, ...]] = {
    "embed": ("embed_throughput.png",),
    "ladder": ("ladder.png",),
    "route": ("route_latency.png",),
    "kernels": ("kernels.png",),
    "rerank": ("rerank_gpu.png",),
    "pipeline": ("pipeline_stages.png",),
    "server": ("server_latency.png",),
    "shards": ("shards_latency.png",),
    "ray": ("ray_serve.png",),
}


# (group, step) -> a check returning why the step cannot run here, or None to run it.
STEP_REQUIRES: dict[tuple[str, str], Callable[[], str | None]] = {
    ("gpu", "embed:onnx"): _onnx_cuda_missing,
}


def configure_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", choices=sorted([*SUITES, *GROUPS]), help="what to measure")
    parser.add_argument("--suite", dest="suite_opt", choices=sorted([*SUITES, *GROUPS]),
                        help="same as the positional SUITE (``--suite gpu``)")
    parser.add_argument("--out", default="profile-results", help="folder for results.jsonl and plots")
    parser.add_argument("--quick", action="store_true", help="small sizes, CPU, a few minutes at most")
    parser.add_argument("--trace", action="store_true", help="also write a torch profiler trace")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--backend", default="torch", help="embed: torch or onnx")
    parser.add_argument("--index", help="route/pipeline: an index directory to use")
    parser.add_argument("--run", help="rerank: a trained reranker run (default: untrained MiniLM cross-encoder); "
                        "read, llm: a trained reader run")
    parser.add_argument("--config", help="pipeline: a pipeline config YAML (bundles, presets, thresholds)")
    parser.add_argument("--record", metavar="DIR", default=None,
                        help="append the headline figures to DIR/performance.jsonl and regenerate the "
                             "table between the markers of DIR/RESULTS.md (created if absent); the "
                             "project's own log is --record serving/profiling")
    parser.add_argument("--readme", metavar="FILE", default=None,
                        help="with --record: also regenerate the headline table (between the "
                             "<!-- headlines:start/end --> markers) of FILE, e.g. README.md")
    parser.set_defaults(func=run_profile)


def check_profile_out(out: Path, *, plots: tuple[str, ...] = (), trace: bool = False) -> None:
    """``--out`` is a new or empty folder, or one a profile wrote (it holds ``results.jsonl``,
    which later runs append to), that this process can write in and no other run writes now; a
    file, or a folder of other files, is refused. In a profile folder, each of ``plots`` must be
    absent or a plot searchsmith wrote, and (``trace``) each ``trace_*.json`` a trace it wrote: a
    user's file is never replaced.

    Raises:
        ConfigError: naming the path and the fix.
    """
    from searchsmith.models.io import being_written, check_parents_are_folders
    from searchsmith.serving.profiling.common import check_plot_path, check_trace_path

    # first: a run in progress leaves the folder half written (a trace before its results.jsonl),
    # which the checks below would misread as a user's; this reads the lock only, making no file
    if being_written(out):
        raise ConfigError(f"profile --out: {str(out)!r} is being written by another searchsmith profile run; wait "
                          "for it to finish (or stop it), then run again, or choose another --out")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"profile --out: {str(out)!r} is a file; give a folder for results.jsonl and plots")
    if out.is_dir() and any(out.iterdir()) and not _profile_results(out / "results.jsonl"):
        raise ConfigError(f"profile --out: {str(out)!r} holds files but no results.jsonl a profile wrote, so no "
                          "profile wrote it; choose a new or empty folder (a profile folder can be written to again)")
    # a read-only folder, or a path through a file: refused now, not by an OSError after the run
    check_parents_are_folders(out, "profile --out", ConfigError)
    if not out.is_dir():
        return
    for name in plots:
        check_plot_path(out / name, flag="profile --out")
    if trace:
        for path in sorted(out.glob("trace_*.json")):
            check_trace_path(path)


def _profile_results(path: Path) -> bool:
    """``path`` is a results.jsonl a profile wrote: its first line a record with a suite and a date."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and "suite" in first and "date" in first


def check_profile_args(args: argparse.Namespace, suite: str | None) -> list[str]:
    """Every option of ``profile``, checked before anything is measured or written; the steps to run.

    Raises:
        SearchsmithError: no suite named.
        ConfigError: an option is wrong, or a path given cannot be written (or read); the
            message names it and the fix.
    """
    if suite is None:
        raise SearchsmithError(f"profile: name a suite, one of {sorted([*SUITES, *GROUPS])}")
    if args.suite_opt and args.suite and args.suite_opt != args.suite:
        raise ConfigError(f"profile: two suites named, {args.suite!r} and --suite {args.suite_opt!r}; name one")
    from searchsmith.serving.profiling.timing import resolve_device

    resolve_device(suite, args.device)  # the one --device rule; a CPU-only suite refuses cuda itself
    if args.readme and not args.record:
        raise ConfigError("profile --readme: it regenerates the headline table from the --record log; pass "
                          "--record DIR too (the project's own log is --record serving/profiling)")
    if args.run and not Path(args.run).is_dir():
        raise ConfigError(f"profile --run: {args.run!r} is not a folder; give a run folder that "
                          "'searchsmith train' wrote")
    steps = GROUPS.get(suite, [suite])
    plots = tuple(name for step in steps for name in PLOTS.get(step.partition(":")[0], ()))
    check_profile_out(Path(args.out), plots=plots, trace=args.trace)
    if args.record:
        from searchsmith.serving.profiling.readme import check_record_targets

        check_record_targets(Path(args.record), Path(args.readme) if args.readme else None)
    _check_step_inputs(args, suite, steps)
    return steps


def _check_step_inputs(args: argparse.Namespace, suite: str, steps: list[str]) -> None:
    """Each step's own inputs (``--index``, ``--config``, ``--run``): its suite module's
    ``check_args(args)``, where it has one, before any step is measured. A bad ``--index`` was
    found by ``profile route`` after its synthetic benchmark (results.jsonl already written),
    and by a group only when its step came round."""
    for step in steps:
        name, _, backend = step.partition(":")
        if STEP_REQUIRES.get((suite, step), lambda: None)():
            continue  # skipped here; nothing of it runs
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            if suite in GROUPS and exc.name == SUITES[name]:
                continue  # a step not part of this build: _run_steps records it as skipped
            raise
        check = getattr(module, "check_args", None)
        if check is not None:
            check(argparse.Namespace(**{**vars(args), **({"backend": backend} if backend else {})}))


def run_profile(args: argparse.Namespace) -> int:
    from searchsmith.models.io import exclusive

    suite = args.suite_opt or args.suite
    steps = check_profile_args(args, suite)  # before the lock file is made beside --out
    # one run into a folder at a time: one that started since the checks is refused here, at once
    with exclusive(Path(args.out), "profile"):
        return _run_profile(args, suite, steps)


def _run_profile(args: argparse.Namespace, suite: str, steps: list[str]) -> int:
    """Run ``steps`` into ``--out`` (held by :func:`run_profile`) and record the run."""
    from searchsmith.serving.profiling.common import ProfileContext, machine_info

    ctx = ProfileContext(out_dir=Path(args.out), quick=args.quick, trace=args.trace, device=args.device,
                         group=suite if suite in GROUPS else "", command="searchsmith profile " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    # written before the run's first record (:meth:`ProfileContext.start`): a suite that refuses
    # its options before it measures leaves no results.jsonl behind
    ctx.start({"suite": "machine", **machine_info(), **({"group": suite} if suite in GROUPS else {})})
    try:
        failed = _run_steps(ctx, suite, steps, args)
    except BaseException as exc:  # Ctrl-C included: the rows so far are marked as an unfinished run
        ctx.finish(False, error=type(exc).__name__ + (f": {exc}" if str(exc) else ""))
        raise
    ctx.finish(True, **({"failed_steps": failed} if failed else {}))
    if args.record:
        from searchsmith.serving.profiling.readme import record_results

        record_results(ctx.records, Path(args.record), Path(args.readme) if args.readme else None)
    if failed:
        print(f"searchsmith profile {suite}: step(s) {failed} failed; see the 'error' lines in "
              f"{ctx.out_dir / 'results.jsonl'}", file=sys.stderr)
        return 1
    return 0


def _run_steps(ctx: ProfileContext, suite: str, steps: list[str], args: argparse.Namespace) -> list[str]:
    """Run each step of ``suite``; the steps that failed (a group goes on past a failed step)."""
    failed: list[str] = []
    for step in steps:
        name, _, backend = step.partition(":")
        why = STEP_REQUIRES.get((suite, step), lambda: None)()
        if why:
            ctx.emit({"suite": name, "step": step, "skipped": why})
            continue
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            if suite in GROUPS and exc.name == SUITES[name]:
                ctx.emit({"suite": name, "skipped": "not part of this build yet"})
                continue
            raise
        step_args = argparse.Namespace(**{**vars(args), **({"backend": backend} if backend else {})})
        before = _pngs(ctx.out_dir)
        t0 = time.perf_counter()
        if suite not in GROUPS:
            module.run(ctx, step_args)
        else:
            # A group is one scarce run (the GPU machine is lent for minutes): a failing step
            # is recorded and the next one still runs; the exit status says that one failed.
            try:
                module.run(ctx, step_args)
            except Exception as exc:  # noqa: BLE001 - recorded, reported in the exit status
                failed.append(step)
                ctx.emit({"suite": name, "step": step, "error": f"{type(exc).__name__}: {exc}"})
        wall = time.perf_counter() - t0
        _record_plots(ctx, name, before)
        if suite in GROUPS:
            ctx.emit({"suite": name, "step": step, "step_wall_s": wall})
    return failed


def _pngs(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.png")} if folder.is_dir() else {}


def _record_plots(ctx: ProfileContext, suite: str, before: dict[str, int]) -> None:
    """One ``plot`` line per PNG the suite wrote (new or rewritten), with what it shows."""
    from searchsmith.serving.profiling.common import plot_info

    for name, mtime in sorted(_pngs(ctx.out_dir).items()):
        if before.get(name) == mtime:
            continue
        try:
            info = plot_info(ctx.out_dir / name)
        except ValueError as exc:  # a PNG not written by save_plot: say so, do not guess
            ctx.emit({"suite": suite, "plot": name, "title": None, "error": str(exc)})
            continue
        ctx.emit({"suite": suite, "plot": name, **info})
