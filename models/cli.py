"""The ``searchsmith`` command line.

Subcommands are defined next to the code they drive; this file only knows where they are.
A command's module is imported only when that command runs, so ``searchsmith --help``
stays fast and the server never imports training code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from searchsmith.models import __version__
from searchsmith.models.console import VERBOSE_ENV, install_log_filter, quiet_third_party, verbose
from searchsmith.models.errors import SearchsmithError

# command -> ("module:function that configures its argparse parser", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("searchsmith.training.cli:configure_train", "fine-tune a model from a YAML recipe"),
    "export": ("searchsmith.models.export:configure_export", "export a trained run to an ONNX bundle"),
    "index": ("searchsmith.serving.cli:configure_index", "chunk, embed and index a corpus (JSONL)"),
    "route": ("searchsmith.serving.cli:configure_route", "route a (follow-up) question to sources"),
    "ask": ("searchsmith.serving.pipeline.cli:configure_ask", "answer a question with the pipeline"),
    "serve": ("searchsmith.serving.serve_cli:configure_serve", "run the batched inference server"),
    "profile": ("searchsmith.serving.profiling.cli:configure_profile", "latency/throughput benchmarks"),
    "eval": ("searchsmith.models.cli:configure_eval", "evaluate a task and print JSON metrics"),
    "quickstart": ("searchsmith.serving.quickstart:configure_quickstart", "train, export, index and ask on demo data"),
    "config": ("searchsmith.models.config_docs:configure_config",
               "print every key of a config (pipeline, serve, index, router, recipe-*) with its default"),
    "make-routing-set": ("searchsmith.serving.routing_sets:configure_make_routing_set",
                         "build a routing corpus + eval set from ../shared/data"),
    "make-pipeline-set": ("searchsmith.serving.routing_sets:configure_make_pipeline_set",
                          "build a multi-hop corpus + pipeline eval set from ../shared/data"),
}

# eval task -> "module:function(args) -> dict of metrics"
EVAL_TASKS: dict[str, str] = {
    "route": "searchsmith.serving.evaluate:eval_route",
    "retrieve": "searchsmith.training.evaluate:eval_retrieve",
    "rerank": "searchsmith.training.evaluate:eval_rerank",
    "rewrite": "searchsmith.training.evaluate:eval_rewrite",
    "decompose": "searchsmith.training.evaluate:eval_decompose",
    "cite": "searchsmith.training.evaluate:eval_cite",
    "images": "searchsmith.training.evaluate:eval_images",
    "pipeline": "searchsmith.serving.evaluate:eval_pipeline",
}


def _load(target: str):
    module, _, name = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("searchsmith"):
            raise SearchsmithError(
                f"{target!r} is not part of this searchsmith build yet ({exc.name} is missing)"
            ) from None
        raise
    try:
        return getattr(mod, name)
    except AttributeError:
        raise SearchsmithError(f"{target!r} is not part of this searchsmith build yet") from None


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
  rewrite    JSONL {"history": [{"role","content"}], "query", "rewrite"}; a 'decompose' model
  decompose  JSONL {"query", "type": "terminal|chain|split", "nodes": [{"id","text",
             "depends_on": [ids]}]}; a 'decompose' model
  cite       JSONL {"sentence", "documents": [{"id","text"}], "cited": [ids],
             "entities"?: [[start, end, label]]}; a 'cite' model
  images     JSONL {"paragraphs": [str], "images": [{"id","path","caption"?}], "gold":
             {image_id: paragraph index or null}} (paths relative to the file); 'images'
  pipeline   JSONL {"id", "query", "history"?, "answer", "supporting": [corpus ids]} + --index
             DIR and --config FILE; --bundle DIR (a bundle, or a folder of bundles) replaces
             the config's bundles of the same tasks

Write held-out files with: python -m searchsmith.training.decompose_data --out DIR;
python -m searchsmith.training.cite_data --write-eval F; python -m searchsmith.training.images
write-eval F; python -m searchsmith.training.evaluate scifact-beir DIR.
"""


def configure_eval(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = EVAL_HELP
    parser.add_argument("task", choices=sorted(EVAL_TASKS), help="what to evaluate (see above)")
    parser.add_argument("--data", required=True, help="evaluation data (formats above)")
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
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N items")
    parser.add_argument("--per-item", help="also write one JSON line per item to this file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run_eval)


def _run_eval(args: argparse.Namespace) -> int:
    fn = _load(EVAL_TASKS[args.task])
    metrics = fn(args)
    if args.json:
        print(json.dumps(metrics, sort_keys=True))
    else:
        print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


def _top_help() -> str:
    width = max(len(c) for c in COMMANDS)
    rows = "\n".join(f"  {c:<{width}}  {h}" for c, (_, h) in COMMANDS.items())
    return (
        f"usage: searchsmith COMMAND [options]   (searchsmith {__version__})\n\n"
        f"commands:\n{rows}\n\n"
        "Run 'searchsmith COMMAND --help' for a command's options."
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # No model hub on build/test machines: stay offline unless the user says otherwise.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not argv or argv[0] in ("-h", "--help", "help"):
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
    quiet_third_party()
    logging.basicConfig(level="DEBUG" if verbose() else os.environ.get("SEARCHSMITH_LOG", "WARNING").upper(),
                        format="%(levelname)s %(name)s: %(message)s")
    install_log_filter()
    target, help_text = COMMANDS[command]
    parser = argparse.ArgumentParser(prog=f"searchsmith {command}", description=help_text)
    try:
        _load(target)(parser)
        if not any("--verbose" in a.option_strings for a in parser._actions):
            parser.add_argument("--verbose", action="store_true", help="show third-party progress bars, "
                                "warnings and debug logs (also: SEARCHSMITH_LOG=debug)")
        # intermixed: KEY=VALUE overrides may come after options (index C --out D a.b=1)
        args = parser.parse_intermixed_args(argv[1:])
        return int(args.func(args) or 0)
    except SearchsmithError as exc:
        print(f"searchsmith {command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"searchsmith {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
