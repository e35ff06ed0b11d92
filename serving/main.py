"""The ``searchsmith`` command line (the console script ``searchsmith``).

Each subcommand is defined next to the code it drives; :data:`COMMANDS` names, for each,
the function that configures its argparse parser, imported when that command runs (so
``searchsmith --help`` stays fast and ``searchsmith serve`` never loads training code).
The imports are plain ``from ... import`` statements inside small functions, so an import
checker and a reader see every dependency (``tests/test_layers.py``). This module sits on
the top floor: it may reach serving and training, nothing below imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchsmith.models import __version__
from searchsmith.models.console import VERBOSE_ENV, configure_process_logging, quiet_third_party
from searchsmith.models.errors import ConfigError, SearchsmithError
from searchsmith.models.startup import argument_problem, environment_problem, may_ask_for_help

log = logging.getLogger(__name__)

__all__ = ["COMMANDS", "EVAL_TASKS", "Command", "configure_eval", "main"]

Configure = Callable[[argparse.ArgumentParser], None]
Metrics = dict[str, Any]


@dataclass(frozen=True)
class Command:
    """One subcommand: what configures its parser (and sets ``func``), and its one-line help."""

    configure: Configure
    help: str


# --------------------------------------------------------------------------- commands
# One function per command module; each imports it only when the command runs.


def _train(p: argparse.ArgumentParser) -> None:
    from searchsmith.training.cli import configure_train

    configure_train(p)


def _export(p: argparse.ArgumentParser) -> None:
    from searchsmith.training.export_cli import configure_export

    configure_export(p)


def _index(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.cli import configure_index

    configure_index(p)


def _route(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.cli import configure_route

    configure_route(p)


def _ask(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.pipeline.cli import configure_ask

    configure_ask(p)


def _serve(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.serve_cli import configure_serve

    configure_serve(p)


def _profile(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.profiling.cli import configure_profile

    configure_profile(p)


def _quickstart(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.quickstart import configure_quickstart

    configure_quickstart(p)


def _config(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.config_docs import configure_config

    configure_config(p)


def _make_routing_set(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.routing_sets import configure_make_routing_set

    configure_make_routing_set(p)


def _make_pipeline_set(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.routing_sets import configure_make_pipeline_set

    configure_make_pipeline_set(p)


def _report(p: argparse.ArgumentParser) -> None:
    from searchsmith.serving.report import configure_report

    configure_report(p)


def _eval(p: argparse.ArgumentParser) -> None:
    configure_eval(p)  # defined below, with the evaluators


COMMANDS: dict[str, Command] = {
    "train": Command(_train, "fine-tune a model from a YAML recipe"),
    "export": Command(_export, "export a trained run to an ONNX bundle"),
    "index": Command(_index, "chunk, embed and index a corpus (JSONL)"),
    "route": Command(_route, "route a (follow-up) question to sources"),
    "ask": Command(_ask, "answer a question with the pipeline"),
    "serve": Command(_serve, "run the batched inference server"),
    "profile": Command(_profile, "latency/throughput benchmarks"),
    "eval": Command(_eval, "evaluate a task and print JSON metrics"),
    "report": Command(_report, "evaluation report: every design claim with intervals (report.md, report.json, "
                               "plots)"),
    "quickstart": Command(_quickstart, "train, export, index and ask on demo data"),
    "config": Command(_config, "print every key of a config (pipeline, serve, index, router, recipe-*) "
                               "with its default"),
    # the shared data without its folder's name (training.data.SHARED_DATA, each command's --help
    # gives it): importing training.data here would load numpy for every command's --help
    "make-routing-set": Command(_make_routing_set, "build a routing corpus + eval set from the shared data"),
    "make-pipeline-set": Command(_make_pipeline_set, "build a multi-hop corpus + pipeline eval set from the "
                                                     "shared data"),
}


# --------------------------------------------------------------------------- eval
# eval task -> its evaluator. The model evaluations are the registry's (models/tasks.py:
# Task.evaluations); route and pipeline evaluate the index and the whole pipeline.


def _eval_route(args: argparse.Namespace) -> Metrics:
    from searchsmith.serving.evaluate import eval_route

    return eval_route(args)


def _eval_pipeline(args: argparse.Namespace) -> Metrics:
    from searchsmith.serving.evaluate import eval_pipeline

    return eval_pipeline(args)


def _eval_sweep(args: argparse.Namespace) -> Metrics:
    from searchsmith.serving.sweep import eval_sweep

    return eval_sweep(args)


def _eval_bandit(args: argparse.Namespace) -> Metrics:
    from searchsmith.serving.bandit_eval import eval_bandit

    return eval_bandit(args)


def _eval_ablate(args: argparse.Namespace) -> Metrics:
    from searchsmith.serving.ablation import eval_ablate

    return eval_ablate(args)


def _eval_compare(args: argparse.Namespace) -> Metrics:
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.models.stats import compare_rows

    a, b = (read_jsonl(f, what=f"eval compare {name}") for f, name in zip(args.files, "AB", strict=True))
    key = _default_key(a[0]) if args.key is None else [k.strip() for k in args.key.split(",") if k.strip()]
    if not key:
        raise ConfigError(f"eval compare --key: names no field in {args.key!r}; give the comma-separated fields "
                          "that identify an item, e.g. --key id,variant, or leave the option out (default: id / qid "
                          "/ i, plus mode / variant)")
    missing = [k for k in key if k not in a[0] or k not in b[0]]
    if missing:
        raise ConfigError(f"eval compare --key: field(s) {missing} are not in both files' items; their fields "
                          f"are {sorted(set(a[0]) & set(b[0]))}")
    out = compare_rows(a, b, key, metrics=args.metric, resamples=args.resamples, seed=args.seed)
    return {"task": "compare", "a": str(args.files[0]), "b": str(args.files[1]), **out}


def _default_key(row: dict[str, Any]) -> list[str]:
    ident = next((k for k in ("id", "qid", "i") if k in row), None)
    if ident is None:
        raise ConfigError(f"eval compare: the items have none of the fields id, qid, i; name the fields that "
                          f"identify an item with --key (fields: {sorted(row)})")
    return [ident, *(k for k in ("mode", "variant") if k in row)]


def _eval_model(args: argparse.Namespace) -> Metrics:
    from searchsmith.training.evaluate import EVALUATORS

    return EVALUATORS[args.task](args)


EVAL_TASKS: dict[str, Callable[[argparse.Namespace], Metrics]] = {
    "route": _eval_route,
    "retrieve": _eval_model,
    "rerank": _eval_model,
    "rewrite": _eval_model,
    "decompose": _eval_model,
    "cite": _eval_model,
    "read": _eval_model,
    "images": _eval_model,
    "pipeline": _eval_pipeline,
    "sweep": _eval_sweep,
    "ablate": _eval_ablate,
    "bandit": _eval_bandit,
    "compare": _eval_compare,
}


EVAL_HELP = """\
Evaluate one task and print its metrics as JSON. The model is an exported bundle
(--bundle DIR: fp32, fp16 or int8 ONNX, what 'serve' and 'ask' run) or a training run
(--checkpoint RUN_DIR: the torch model); both are scored by the same code.

tasks, their --data and their model:
  route      JSONL {"history": [{"role","content"}], "query", "sources": [gold source names]}
             + --index DIR; optional --bundle (an 'embed' bundle: query vectors, or a
             'decompose' bundle: follow-up rewrites) or --checkpoint (embedder / decomposer)
  retrieve   BEIR folder: corpus.jsonl {"_id","title","text"}, queries.jsonl {"_id","text"},
             qrels/test.tsv "query-id corpus-id score"; optional --bundle ('embed') or
             --checkpoint (a sentence-transformers folder); default: the default embedder
  rerank     BEIR folder (as retrieve); candidates from --run FILE (TREC "qid Q0 docid rank
             score tag") or --first-stage bm25|dense; --bundle ('rerank') or --checkpoint
  rewrite    JSONL {"history": [{"role","content"}], "query", "rewrite", "passage"?}; a
             'decompose' model; turns with a passage also score the retrieval the rewrite
             drives (BM25 over the turns' passages, + --corpus JSONL distractors): nDCG@10
             of the model's rewrite, the raw query and the manual rewrite
  decompose  JSONL {"query", "type": "terminal|chain|split", "nodes": [{"id","text",
             "depends_on": [ids]}], "origin"?: "break:HOTPOT" ...}; a 'decompose' model;
             with origins, by_origin gives each set's figures and "break" Break's together
  cite       JSONL {"sentence", "documents": [{"id","text"}], "cited": [ids],
             "entities"?: [[start, end, label]]}; a 'cite' model
  read       JSONL {"id", "question", "answers": [str], "passages": [{"title","text"} | str],
             "supporting"?: [passage indices]}; a 'read' model: EM / F1 (SQuAD), answered
             rate, no-answer accuracy over the non-supporting passages
  images     JSONL {"paragraphs": [str], "images": [{"id","path","caption"?}], "gold":
             {image_id: paragraph index or null}} (paths relative to the file); 'images'
  pipeline   JSONL {"id", "query", "history"?, "answer", "supporting": [corpus ids]} + --index
             DIR and --config FILE; --bundle DIR (a bundle, or a folder of bundles) replaces
             the config's bundles of the same tasks. Each id once; an index holding none of
             the supporting ids is refused, one lacking some is warned about. "answer": null
             asks what the sources do not hold: no answer scores 1 (no_answer), any answer 0
  sweep      pipeline data (as pipeline) + --index, --param KEY (a pipeline config key) and
             --values V1,V2,...: every answer metric per value with its interval, the best
             value per metric and whether the default is within the noise of it (--plot PNG);
             an index.* key (index.chunker.chunk_tokens, index.chunker.overlap_ratio)
             re-indexes --corpus per value
  ablate     pipeline data (as pipeline) + --index: each stage switched off in turn (--stages
             NAME,...; default all), the metric each stage exists for, with and without it
  bandit     pipeline data (as pipeline) + --index: the LinUCB protocol router vs each fixed
             preset and the per-question oracle, reward = quality - lambda * cost, for each
             --lambdas value over --seeds shuffled streams (cumulative reward, regret, --plot)
  compare    two --per-item files of the same data (A.jsonl B.jsonl as arguments, no --data):
             for each numeric metric, B - A over the paired items with a bootstrap 95 %
             interval and a two-sided paired permutation p-value; items are paired by
             --key (default: id / qid / i, plus mode / variant when present)

Every figure comes with a seeded bootstrap 95 % interval (<metric>_ci95).

Write held-out files with: python -m searchsmith.training.decompose_data --out DIR;
python -m searchsmith.training.cite_data --write-eval F; python
-m searchsmith.training.evaluate_read write-eval F; python -m searchsmith.training.images
write-eval F; python -m searchsmith.training.evaluate scifact-beir DIR. The BEIR-style
SciFact run over the whole corpus (BM25 top-100, the bi-encoder, a reranker on BM25's
top-100): python -m searchsmith.training.evaluate beir-full DIR [--bundle B].
"""


def configure_eval(parser: argparse.ArgumentParser) -> None:
    from searchsmith.models.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
    from searchsmith.serving.bandit_eval import MAX_RESAMPLES, MAX_SEEDS, MIN_RESAMPLES

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = EVAL_HELP
    parser.add_argument("task", choices=sorted(EVAL_TASKS), help="what to evaluate (see above)")
    parser.add_argument("files", nargs="*", default=[], metavar="FILE", help="compare: the two --per-item files A and B")
    parser.add_argument("--data", help="evaluation data (formats above); every task but compare needs it")
    parser.add_argument("--index", help="index directory (route, pipeline)")
    parser.add_argument("--bundle", metavar="DIR",
                        help="an exported bundle ('searchsmith export'; fp32, fp16 or int8) of the task's model")
    parser.add_argument("--checkpoint", metavar="RUN_DIR",
                        help="a training run folder ('searchsmith train'); for the embedder, a model folder")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where a --bundle runs (default %(default)s; auto = CUDA when ONNX Runtime has it)")
    parser.add_argument("--config", help="pipeline or router config YAML")
    parser.add_argument("--run", help="TREC run file of rerank candidates")
    parser.add_argument("--first-stage", choices=["bm25", "dense"], default="bm25",
                        help="rerank candidates without --run (default %(default)s)")
    parser.add_argument("--k", type=int, default=3, help="cut-off K for recall@K (default %(default)s)")
    parser.add_argument("--lexical-weight", type=float, default=None, metavar="W",
                        help="retrieve: the BM25 share of the hybrid row (default: the pipeline's "
                             "retrieval.lexical_weight)")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N items")
    parser.add_argument("--per-item", help="also write one JSON line per item to this file")
    parser.add_argument("--param", metavar="KEY", help="sweep: the pipeline config key to vary")
    parser.add_argument("--values", metavar="V1,V2,...", help="sweep: the values to try (YAML, comma-separated)")
    parser.add_argument("--plot", metavar="PNG", help="sweep, ablate, bandit: draw the result with its "
                        "intervals (PNG)")
    parser.add_argument("--corpus", metavar="JSONL", help="sweep of an index.* key: the corpus to re-index per "
                        "value (required: the index does not record its corpus; give the file the --index was "
                        "built from); rewrite: distractor documents for the retrieval the rewrite drives")
    parser.add_argument("--stages", metavar="NAME,...", help="ablate: the stages to switch off, one at a time "
                        "(default: every stage)")
    parser.add_argument("--lambdas", metavar="L1,L2,...", help="bandit: cost weights lambda "
                        "(default: 0, the config's protocol.cost_lambda, and 1)")
    parser.add_argument("--quality", default="f1", metavar="METRIC", help="bandit: the per-question quality "
                        "in [0, 1] of the reward (an eval pipeline metric; default %(default)s)")
    parser.add_argument("--seeds", type=int, default=5, help="bandit: shuffled question streams, seeds 0..N-1; "
                        f"N from 1 to at most {MAX_SEEDS} (default %(default)s)")
    parser.add_argument("--key", default=None, metavar="FIELDS",
                        help="compare: comma-separated fields that identify an item (default: id, qid or i, "
                             "plus mode / variant when present)")
    parser.add_argument("--metric", action="append", default=None, metavar="NAME",
                        help="compare: only this metric (repeatable; default: every shared numeric field)")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                        help=f"compare, ablate, bandit: bootstrap resamples, from {MIN_RESAMPLES} to at most "
                             f"{MAX_RESAMPLES} (memory and time grow with resamples x items; default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="compare, ablate, bandit: bootstrap seed, "
                        ">= 0 (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--force", action="store_true", help="replace an existing --per-item file, or a --plot "
                        "file searchsmith did not write (its own plots are replaced without it)")
    parser.set_defaults(func=_run_eval)


# eval's text options -> what to give instead of an empty string ('' would otherwise read as
# "not given": the default, or nothing written)
EVAL_TEXT_OPTIONS = {
    "--data": "the evaluation data file",
    "--index": "an index folder",
    "--bundle": "a bundle folder",
    "--checkpoint": "a training run folder",
    "--config": "a config YAML file",
    "--run": "a TREC run file",
    "--per-item": "the file to write",
    "--param": "a pipeline config key",
    "--values": "comma-separated values, e.g. --values 0.1,0.2",
    "--plot": "the PNG file to write",
    "--corpus": "a corpus JSONL file",
    "--stages": "comma-separated stage names",
    "--lambdas": "comma-separated cost weights, e.g. --lambdas 0,0.1,1",
    "--quality": "a quality metric, e.g. --quality f1",
    "--key": "comma-separated fields that identify an item, e.g. --key id,variant",
    "--metric": "a metric name",
}


def check_eval_options(args: argparse.Namespace) -> None:
    """Before any work: no text option is an empty string, and the numbers are in range:
    ``--limit`` >= 0, ``--k`` >= 1, ``--seed`` >= 0, ``--seeds`` and ``--resamples`` between
    1 (resp. the bootstrap's minimum) and their maximum (``--resamples 100000000`` would hold
    gigabytes of resample indices; ``--seeds`` replays the stream once per seed and λ).

    Raises:
        ConfigError: naming the option, the limit and the fix.
    """
    from searchsmith.serving.bandit_eval import MAX_RESAMPLES, MAX_SEEDS, MIN_RESAMPLES

    for flag, what in EVAL_TEXT_OPTIONS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and not str(v).strip():
                raise ConfigError(f"{flag} is empty: give {what}, or leave the option out")
    if args.limit < 0:
        raise ConfigError(f"--limit: must be >= 0 (0: every item), got {args.limit}")
    if args.k < 1:
        raise ConfigError(f"--k: the recall cut-off must be >= 1, got {args.k}")
    if args.seed < 0:
        raise ConfigError(f"--seed: must be >= 0 (the bootstrap's generator takes no negative seed), got {args.seed}")
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds: expected a whole number >= 1 and at most {MAX_SEEDS} (each seed replays the "
                          f"question stream once per lambda), got {args.seeds}")
    if not MIN_RESAMPLES <= args.resamples <= MAX_RESAMPLES:
        raise ConfigError(f"--resamples: expected a whole number >= {MIN_RESAMPLES} and at most {MAX_RESAMPLES} "
                          f"(memory grows with resamples x items), got {args.resamples}")


def check_eval_outputs(args: argparse.Namespace) -> None:
    """Before any work: the options are sane (:func:`check_eval_options`); ``--per-item`` and
    ``--plot`` are new files (or, with ``--force``, files to replace; a plot searchsmith wrote
    is replaced without it), never a folder or one of the command's own inputs.

    Raises:
        ConfigError: naming the flag, the path and the fix.
    """
    from searchsmith.models.io import check_parents_are_folders
    from searchsmith.serving.profiling.common import check_plot_path

    check_eval_options(args)
    inputs = [p for p in (args.data, args.run, args.corpus, args.config, *args.files) if p]
    for flag, out in (("--per-item", args.per_item), ("--plot", args.plot)):
        if not out:
            continue
        path = Path(out)
        if path.is_dir():
            raise ConfigError(f"{flag}: {out!r} is a folder; give a file path")
        same = [p for p in inputs if Path(p).exists() and path.exists() and path.samefile(p)]
        if same:
            raise ConfigError(f"{flag}: {out!r} is this command's input {same[0]!r}; write to another file")
        # a file inside the index, bundle or run the command reads (its manifest.json replaced
        # by per-item lines broke the index), or inside any folder with a searchsmith manifest
        where = path.resolve()
        folders = [d for d in (args.index, args.bundle, args.checkpoint) if d and Path(d).is_dir()]
        holder = next((d for d in folders if where.is_relative_to(Path(d).resolve())), None)
        if holder is None and (where.parent / "manifest.json").is_file():
            holder = str(path.parent)
        if holder is not None:
            raise ConfigError(f"{flag}: {out!r} is inside {holder!r}, an index, bundle or run folder searchsmith "
                              "reads; write the file elsewhere")
        check_parents_are_folders(path, flag, ConfigError)  # a read-only folder: refused before the work
        if flag == "--plot":
            if path.suffix.lower() != ".png":
                raise ConfigError(f"--plot: {out!r} would hold a PNG; give a path ending in .png")
            check_plot_path(path, "--plot", replace=args.force)
        elif path.exists() and not args.force:
            raise ConfigError(f"--per-item: {out!r} exists; pass --force to replace it, or give a new file")


def _run_eval(args: argparse.Namespace) -> int:
    if args.task == "compare":
        if args.data or len(args.files) != 2:
            raise ConfigError(f"eval compare: give two --per-item files, A.jsonl B.jsonl (got {args.files or 'none'}"
                              f"{' and --data' if args.data else ''}); write them with eval TASK --per-item FILE")
    elif args.files:
        raise ConfigError(f"eval {args.task}: unexpected argument(s) {args.files}; the data goes in --data")
    elif args.data is None:
        raise ConfigError(f"eval {args.task}: --data is required (formats: searchsmith eval --help)")
    check_eval_outputs(args)
    metrics = EVAL_TASKS[args.task](args)
    if args.json:
        print(json.dumps(metrics, sort_keys=True))
    else:
        print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


def _top_help() -> str:
    width = max(len(c) for c in COMMANDS)
    rows = "\n".join(f"  {c:<{width}}  {spec.help}" for c, spec in COMMANDS.items())
    return (
        f"usage: searchsmith COMMAND [options]   (searchsmith {__version__})\n\n"
        f"commands:\n{rows}\n\n"
        "Run 'searchsmith COMMAND --help' for a command's options."
    )


class _Parser(argparse.ArgumentParser):
    """argparse's parser, reading an argument that starts with a minus and a digit as a value:
    ``--values -1,0`` or ``--values -1e-3`` (Python 3.11's argparse lets only ``-1`` and ``-0.5``
    through and calls the rest an unknown option, "expected one argument"). Safe while no
    option of ours looks like a negative number, which argparse itself requires for ``-1``."""

    def __init__(self, prog: str, description: str | None = None) -> None:
        super().__init__(prog=prog, description=description)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # No model hub on build/test machines: stay offline unless the user says otherwise.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not argv:  # a usage error, as argparse answers one: the usage on stderr, status 2
        print(_top_help(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"searchsmith {__version__}")
        return 0
    command = argv[0]
    if command not in COMMANDS:
        from searchsmith.models.config import closest_key

        hint = closest_key(command, COMMANDS)
        fix = f" (did you mean {hint!r}?)" if hint else ""
        print(f"searchsmith: unknown command {command!r}{fix}\n\n{_top_help()}", file=sys.stderr)
        return 2
    # --verbose (any command) = SEARCHSMITH_LOG=debug: third-party bars and warnings too.
    # Decided before the command's module is imported: transformers reads it at import.
    if "--verbose" in argv[1:]:
        os.environ[VERBOSE_ENV] = "1"
    # A mistyped SEARCHSMITH_* variable or an argument that is not UTF-8 is a usage error
    # (status 2, as argparse's), reported before anything loads; but never in place of the
    # command's --help, which the parser below prints (and exits) whatever the environment.
    problem = environment_problem()
    if problem is not None and not may_ask_for_help(argv[1:]):
        print(f"searchsmith {command}: error: {problem}", file=sys.stderr)
        return 2
    if problem is None:
        configure_process_logging()
    else:  # for the help only: logging at a bad SEARCHSMITH_LOG would warn of it before the help
        quiet_third_party()
    spec = COMMANDS[command]
    parser = _Parser(prog=f"searchsmith {command}", description=spec.help)
    try:
        spec.configure(parser)
        if not any("--verbose" in a.option_strings for a in parser._actions):
            parser.add_argument("--verbose", action="store_true", help="show third-party progress bars, "
                                "warnings and debug logs (also: SEARCHSMITH_LOG=debug)")
        # intermixed: KEY=VALUE overrides may come after options (index C --out D a.b=1)
        args = parser.parse_intermixed_args(argv[1:])
        if problem is not None:  # the parser printed no help (took the "-h" as a value): refused before any work
            print(f"searchsmith {command}: error: {problem}", file=sys.stderr)
            return 2
        problem = argument_problem(parser, args)
        if problem is not None:
            print(f"searchsmith {command}: error: {problem}", file=sys.stderr)
            return 2
        return int(args.func(args) or 0)
    except SearchsmithError as exc:
        print(f"searchsmith {command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"searchsmith {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout's reader left (``searchsmith ... | head``): stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the exit's flush of stdout would raise again
        return 128 + 13  # SIGPIPE's status in a shell
    except OSError as exc:  # the file system said no (full disk, read-only, permissions): say which file
        log.debug("searchsmith %s: OSError", command, exc_info=True)
        where = f" {exc.filename!r}" if exc.filename else ""
        what = f"{exc.strerror} (errno {exc.errno})" if exc.strerror else str(exc)  # a hub's OSError has no errno
        print(f"searchsmith {command}: error: cannot read or write{where}: {what}; check that the path exists and "
              "is writable, that the disk has room, and for a hub model that the hub can be reached "
              "(--verbose shows where it happened)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
