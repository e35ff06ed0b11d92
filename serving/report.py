"""``searchsmith report --out DIR``: every design claim measured, with intervals, in one folder.

It runs evaluations that already exist (nothing is measured here that ``searchsmith eval``
cannot measure alone) on the demo data shipped with the package, and writes, like a model
card::

    DIR/report.md       tables and verdicts: routing (KIMAs), strategies (SRSA), threshold
                        sweeps (Xinyu), with the header (date, machine, commit, commands, seeds)
    DIR/report.json     every evaluation's raw output, under the same section names
    DIR/*.png           routing and strategy bars with intervals, one curve per sweep
    DIR/index/          the demo index the evaluations used (unless --index names one)
    DIR/manifest.json   the files above: a later report may replace this folder, nothing else may

``--quick`` is the CI size (20 questions, three values per sweep, three sweeps); the full
size asks every demo question and sweeps five thresholds over five values each.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.models.io import (
    check_replaceable,
    read_json_object,
    replace_dir,
    temp_dir_beside,
    write_json_atomic,
    write_text_atomic,
)

__all__ = ["SWEEPS", "configure_report", "run_report", "write_report"]

MANIFEST = "manifest.json"
KIND = "report"

#: pipeline config key -> (its values at the full size, at the quick size); each list holds the
#: default, so that every other value is judged against it on the same questions.
SWEEPS: dict[str, tuple[tuple[float, ...], tuple[float, ...] | None]] = {
    "citation.cosine_threshold": ((0.4, 0.5, 0.6, 0.7, 0.8), (0.4, 0.6, 0.8)),
    "retrieval.dedup_threshold": ((0.7, 0.75, 0.8, 0.9, 0.95), (0.7, 0.8, 0.95)),
    "retrieval.keep_ratio": ((0.5, 0.6, 0.7, 0.85, 1.0), (0.5, 0.7, 1.0)),
    "timeline.merge_threshold": ((0.8, 0.85, 0.9, 0.93, 0.97), None),  # None: full size only
    "images.threshold": ((0.1, 0.2, 0.3, 0.4, 0.5), None),
}
QUICK_QUESTIONS = 20
# The figures of the strategy table: (key in eval pipeline's summary, column heading).
STRATEGY_COLUMNS = (("support_recall", "support recall"), ("f1", "answer F1"),
                    ("latency_ms_p50", "latency p50 (ms)"), ("model_calls", "model calls"))


# -- command line ------------------------------------------------------------------------------
def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument("--out", required=True, help="folder to write: new or empty, or a previous report "
                        "(replaced whole); any other folder is refused")
    parser.add_argument("--quick", action="store_true", help=f"CI size: {QUICK_QUESTIONS} questions, 3 values "
                        f"per sweep, {sum(q is not None for _, q in SWEEPS.values())} sweeps")
    parser.add_argument("--index", metavar="DIR", help="reuse this index of the demo corpus (default: build one "
                        "into OUT/index)")
    parser.add_argument("--limit", type=int, default=0, help="ask only the first N questions and route only the "
                        "first N routing items (0 = the size's own; for tests)")
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    out = write_report(Path(args.out), quick=args.quick, index=args.index, limit=args.limit,
                       say=lambda line: print(line, file=sys.stderr, flush=True))
    print(out / "report.md")
    return 0


# -- the output folder -------------------------------------------------------------------------
def _listed(folder: Path) -> set[str] | None:
    """The files a previous report's manifest lists (the manifest included), or None."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = read_json_object(path, "report manifest", error=BundleError)
    except BundleError:
        return None
    if manifest.get("kind") != KIND or not isinstance(manifest.get("files"), list):
        return None
    return {str(Path(f)) for f in manifest["files"]} | {MANIFEST}


def check_report_out(out: Path) -> None:
    """Refuse ``out`` unless it is absent, empty, or a previous report holding nothing else.

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """
    check_replaceable(out, label="report --out", kind=KIND, listed=_listed, replace=True,
                      replace_hint="")  # replace=True: a previous report is always replaced


# -- the report --------------------------------------------------------------------------------
def _eval_args(**kw: Any) -> argparse.Namespace:
    """The Namespace ``searchsmith eval`` would parse, with ``kw`` set."""
    from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    base = {"data": None, "index": None, "bundle": None, "checkpoint": None, "device": "auto", "config": None,
            "k": 3, "limit": 0, "per_item": None, "param": None, "values": None, "plot": None,
            "resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "json": True}
    return argparse.Namespace(**{**base, **kw})


def _git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def write_report(out: Path, *, quick: bool = False, index: str | Path | None = None, limit: int = 0,
                 say: Any = print) -> Path:
    """Run the evaluations and write the report folder ``out`` (module docstring).

    Args:
        out: the report folder; built beside it and swapped in when complete.
        quick: the CI size (see :data:`SWEEPS` and :data:`QUICK_QUESTIONS`).
        index: an index of the demo corpus to reuse; None builds one into ``out/index``.
        limit: questions and routing items to use (0: all, or ``QUICK_QUESTIONS`` when quick).
        say: where the step lines go.

    Returns:
        ``out``.

    Raises:
        ValidationError: ``out`` is a folder that is not a previous report, or ``index`` is missing.
    """
    from searchsmith.models.demo import corpus_path, qa_path, routing_path
    from searchsmith.models.intervals import bootstrap_info
    from searchsmith.serving.evaluate import eval_pipeline, eval_route
    from searchsmith.serving.profiling.common import machine_info
    from searchsmith.serving.sweep import eval_sweep

    out = Path(out)
    check_report_out(out)
    if index is not None and not (Path(index) / "manifest.json").is_file():
        raise ValidationError(f"report --index {index}: not an index folder (no manifest.json); build one with "
                              f"searchsmith index {corpus_path()} --out DIR, or drop --index")
    questions = limit or (QUICK_QUESTIONS if quick else 0)
    routing_limit = limit  # routing is cheap: every item at both sizes
    sweeps = {k: (q if quick else full) for k, (full, q) in SWEEPS.items() if not quick or q is not None}
    started = time.perf_counter()
    tmp = temp_dir_beside(out)
    try:
        # 1. Index
        if index is None:
            from searchsmith.serving.corpus import read_corpus
            from searchsmith.serving.index import IndexConfig, build_index

            say(f"report: indexing the demo corpus {corpus_path()}")
            build_index(read_corpus(corpus_path()), tmp / "index", IndexConfig())
            index_dir, index_shown = tmp / "index", str(out / "index")
        else:
            index_dir, index_shown = Path(index), str(index)
        lim = f" --limit {questions}" if questions else ""
        rlim = f" --limit {routing_limit}" if routing_limit else ""
        commands: dict[str, str] = {}

        # 2. Routing (KIMAs): the rewrite and the routing modes
        say("report: routing (eval route)")
        routing = eval_route(_eval_args(data=str(routing_path()), index=str(index_dir), limit=routing_limit))
        commands["routing"] = f"searchsmith eval route --data {routing_path()} --index {index_shown}{rlim}"

        # 3. Strategies (SRSA): routed vs each forced strategy
        say("report: strategies (eval pipeline)")
        pipeline = eval_pipeline(_eval_args(data=str(qa_path()), index=str(index_dir), limit=questions))
        commands["pipeline"] = f"searchsmith eval pipeline --data {qa_path()} --index {index_shown}{lim}"

        # 4. Threshold sweeps (Xinyu)
        sweep_out: dict[str, Any] = {}
        for param, values in sweeps.items():
            say(f"report: sweep of {param} over {list(values)}")
            png = tmp / f"sweep_{param.replace('.', '_')}.png"
            csv = ",".join(str(v) for v in values)
            res = eval_sweep(_eval_args(data=str(qa_path()), index=str(index_dir), limit=questions, param=param,
                                        values=csv, plot=str(png)))
            res["plot"] = png.name
            sweep_out[param] = res
            commands[f"sweep {param}"] = (f"searchsmith eval sweep --data {qa_path()} --index {index_shown}{lim} "
                                          f"--param {param} --values {csv} --plot {png.name}")

        # 5. Plots, report.json, report.md, manifest
        plots = {"routing": _plot_routing(tmp / "routing.png", routing).name,
                 "strategies": _plot_strategies(tmp / "strategies.png", pipeline).name}
        report = {
            "kind": KIND, "size": "quick" if quick else "full",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - started, 1), "git_commit": _git_commit(),
            "machine": machine_info(), "bootstrap": bootstrap_info(),
            "data": {"corpus": str(corpus_path()), "routing": str(routing_path()), "qa": str(qa_path()),
                     "index": index_shown, "questions": pipeline["n"], "routing_items": routing["n"]},
            "commands": commands, "plots": plots,
            "routing": routing, "strategies": pipeline, "sweeps": sweep_out,
        }
        write_json_atomic(tmp / "report.json", report)
        write_text_atomic(tmp / "report.md", render_markdown(report))
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        write_json_atomic(tmp / MANIFEST, {"kind": KIND, "files": files})
        replace_dir(tmp, out)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # our own temporary folder, never the user's
        raise
    say(f"report: wrote {out} in {time.perf_counter() - started:.0f} s")
    return out


# -- plots -------------------------------------------------------------------------------------
def _bars(path: Path, groups: list[str], series: dict[str, list[tuple[float, list[float]]]], ylabel: str,
          title: str) -> Path:
    """Grouped bars with their 95 % intervals: ``series[name][i] = (value, [low, high])`` of group i."""
    from searchsmith.serving.profiling.common import save_plot

    def draw(fig: Any, ax: Any) -> None:
        width = 0.8 / max(1, len(series))
        for j, (name, points) in enumerate(series.items()):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
            ys = [v for v, _ in points]
            err = [[v - ci[0] for v, ci in points], [ci[1] - v for v, ci in points]]
            ax.bar(xs, ys, width, yerr=err, capsize=3, label=name)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)

    return save_plot(path, draw, title)


def _plot_routing(path: Path, routing: dict[str, Any]) -> Path:
    modes = list(routing["modes"])
    parts = [p for p in ("followups", "single") if any(p in routing["modes"][m] for m in modes)]
    series = {p: [(routing["modes"][m][p]["recall@1"], routing["modes"][m][p]["recall@1_ci95"])
                  if p in routing["modes"][m] else (0.0, [0.0, 0.0]) for m in modes] for p in parts}
    return _bars(path, modes, series, "recall@1 (95 % bootstrap interval)",
                 f"routing recall@1 per mode ({routing['n']} items)")


def _plot_strategies(path: Path, pipeline: dict[str, Any]) -> Path:
    ablation = pipeline["strategy_ablation"]
    names = list(ablation)
    series = {m: [(ablation[n][m], ablation[n][f"{m}_ci95"]) for n in names] for m in ("support_recall", "f1")}
    return _bars(path, names, series, "mean over questions (95 % bootstrap interval)",
                 f"routed vs forced strategies ({pipeline['n']} questions)")


# -- report.md ---------------------------------------------------------------------------------
def _ci(value: Any, ci: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g} [{ci[0]:g}, {ci[1]:g}]" if ci else f"{value:g}"


def _sweep_line(res: dict[str, Any]) -> str:
    """"default X; values that beat it beyond the noise on <metric>: ..." or "... none"."""
    found = []
    for metric, verdict in res["verdicts"].items():
        for value in verdict.get("beats_default", []):
            c = verdict["vs_default"][value]
            found.append(f"on {metric}: {value} ({c['diff']:+.3f}, [{c['diff_ci95'][0]:+.3f}, "
                         f"{c['diff_ci95'][1]:+.3f}], p={c['p_value']:.3g})")
    return f"default {res['default']}; values that beat it beyond the noise: " + ("; ".join(found) or "none")


def render_markdown(report: dict[str, Any]) -> str:
    """The report's Markdown from its JSON (``report.json`` holds everything shown here)."""
    m, d, boot = report["machine"], report["data"], report["bootstrap"]
    gpu = m.get("gpu") or "none"
    lines = [
        f"# searchsmith evaluation report ({report['size']})", "",
        f"- date: {report['date']} (took {report['seconds']:.0f} s)",
        f"- git commit: {report['git_commit']}",
        f"- machine: {m.get('cpu')}, {m.get('cores')} cores, GPU {gpu}; Python {m.get('python')}, torch "
        f"{m.get('torch')}, onnxruntime {m.get('onnxruntime')}, faiss {m.get('faiss')}",
        f"- data: demo corpus {d['corpus']} (index {d['index']}); routing set {d['routing']} "
        f"({d['routing_items']} items); QA set {d['qa']} ({d['questions']} questions)",
        f"- intervals: bootstrap 95 %, {boot['resamples']} resamples, seed {boot['seed']}; sweep verdicts are "
        "paired differences vs the default on the same questions, with a permutation p-value",
        "- commands (each section can be rerun alone):", "",
        *(f"      {c}" for c in report["commands"].values()), "",
    ]

    # 1. Routing
    routing = report["routing"]
    lines += ["## 1. Routing (KIMAs): rewrite and routing modes", "",
              f"recall@1 with its 95 % interval, {routing['n']} items ({routing['followups']} follow-ups); "
              f"recall@{routing['k']} and MRR are in report.json.", "",
              "| mode | follow-ups | single turns | all |", "|---|---|---|---|"]
    for mode, parts in routing["modes"].items():
        cells = [_ci(parts[p]["recall@1"], parts[p].get("recall@1_ci95")) if p in parts else "-"
                 for p in ("followups", "single", "all")]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += ["", f"![routing]({report['plots']['routing']})", ""]

    # 2. Strategies
    pipe = report["strategies"]
    lines += ["## 2. Strategies (SRSA): routed vs each forced strategy", "",
              f"{pipe['n']} questions, generation backend {pipe['generation']}.", "",
              "| variant | " + " | ".join(h for _, h in STRATEGY_COLUMNS) + " |",
              "|---" * (len(STRATEGY_COLUMNS) + 1) + "|"]
    for name, s in pipe["strategy_ablation"].items():
        lines.append(f"| {name} | " + " | ".join(_ci(s.get(k), s.get(f"{k}_ci95")) for k, _ in STRATEGY_COLUMNS)
                     + " |")
    lines += ["", f"![strategies]({report['plots']['strategies']})", ""]

    # 3. Sweeps
    lines += ["## 3. Threshold sweeps (Xinyu)", "",
              "Each setting varied alone on the same questions; a value beats the default only when the "
              "interval of its paired difference excludes zero (latency is reported, never judged).", ""]
    for param, res in report["sweeps"].items():
        lines += [f"### {param} (values {', '.join(str(v) for v in res['values'])})", "",
                  _sweep_line(res), "", f"![{param}]({res['plot']})", ""]
    return "\n".join(lines)
