"""``searchsmith profile SUITE``: each suite compares against a baseline in the same run."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

from searchsmith.models.errors import SearchsmithError

# suite -> module with ``run(ctx: ProfileContext, args: argparse.Namespace) -> None``
SUITES: dict[str, str] = {
    "embed": "searchsmith.serving.profiling.embed",
    "route": "searchsmith.serving.profiling.route",
    "kernels": "searchsmith.serving.profiling.kernels",
    "rerank": "searchsmith.serving.profiling.rerank",
    "pipeline": "searchsmith.serving.profiling.pipeline",
    "server": "searchsmith.serving.profiling.server",
}
# ``all`` and ``gpu`` are sequences of the suites above.
GROUPS: dict[str, list[str]] = {
    "all": ["embed", "rerank", "route", "kernels", "pipeline", "server"],
    "gpu": ["kernels", "embed"],
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
    parser.add_argument("--record", action="store_true",
                        help="append the headline figures to serving/profiling/performance.jsonl "
                             "and regenerate the README's Performance table")
    parser.set_defaults(func=run_profile)


def run_profile(args: argparse.Namespace) -> int:
    from searchsmith.serving.profiling.common import ProfileContext, machine_info

    suite = args.suite_opt or args.suite
    if suite is None:
        raise SearchsmithError(f"profile: name a suite, one of {sorted([*SUITES, *GROUPS])}")
    names = GROUPS.get(suite, [suite])
    ctx = ProfileContext(out_dir=Path(args.out), quick=args.quick, trace=args.trace, device=args.device,
                         command="searchsmith profile " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    ctx.emit({"suite": "machine", **machine_info()})
    for name in names:
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            if suite in GROUPS and exc.name == SUITES[name]:
                ctx.emit({"suite": name, "skipped": "not part of this build yet"})
                continue
            raise
        module.run(ctx, args)
    if args.record:
        from searchsmith.serving.profiling.readme import append_rows, headline_rows, update_readme

        append_rows(headline_rows(ctx.records))
        update_readme()
    return 0
