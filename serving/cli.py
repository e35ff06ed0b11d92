"""Serving-side subcommands: ``index`` and ``route`` (``quickstart`` lives in serving/quickstart.py).

Heavy imports (torch, transformers, faiss) happen inside the commands.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import (
    RepeatedKeyError,
    check_input_file,
    check_unicode,
    find_lone_surrogate,
    json_error,
    loads_unique,
    read_utf8,
)


# -- index -----------------------------------------------------------------------------------
def configure_index(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="?", help="corpus JSONL: {id, source, text, title?, date?, url?, images?}; "
                        "several files separated by commas, or a quoted glob ('data/*.jsonl'); not with --repair")
    parser.add_argument("--out", required=True, help="index folder to write: a new or empty folder (an existing "
                        "index only with --force; anything else is refused, never replaced)")
    parser.add_argument("--config", help="index config YAML (embedder, chunker, centroids, index_type)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--add", action="store_true", help="add the documents to the existing index at --out")
    mode.add_argument("--force", action="store_true", help="rebuild the existing index at --out (replaced "
                      "atomically; refused if the folder holds files the index did not write)")
    mode.add_argument("--repair", action="store_true", help="check every file of the index at --out against its "
                      "sha256 and rebuild the damaged ones from the rest (no corpus needed)")
    parser.add_argument("--ray", action="store_true", help="embed on Ray Data actors (pip install "
                        "'searchsmith[ray]'): a local Ray, or the cluster of --address")
    parser.add_argument("--address", help="--ray: a running Ray cluster's HOST:PORT (default: start a local one)")
    parser.add_argument("--workers", type=int, help="--ray: embedding actors (default: one per CPU of the cluster)")
    parser.add_argument("overrides", nargs="*", default=[], help="config overrides KEY=VALUE, e.g. chunker.chunk_tokens=200")
    parser.set_defaults(func=run_index)


def run_index(args: argparse.Namespace) -> int:
    from searchsmith.models.config import load_config
    from searchsmith.serving.corpus import read_corpora
    from searchsmith.serving.embedder import check_device
    from searchsmith.serving.index import IndexConfig, add_documents, build_index, check_out_path

    def say(line: str) -> None:  # step lines on stderr: stdout is the JSON summary
        print(line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    if args.repair:
        return _run_repair(args, say)
    if not args.corpus:
        raise ValidationError("index: give the corpus (CORPUS.jsonl, a comma list or a quoted glob), or --repair "
                              "--out DIR to repair an index")
    if (args.address or args.workers) and not args.ray:
        raise ValidationError("--address and --workers go with --ray")
    if args.add:
        if args.config or args.overrides:
            raise ValidationError("index --add uses the config the index was built with; drop --config/overrides")
        if args.ray:
            raise ValidationError("index --add embeds in this process; drop --ray (or rebuild with --ray --force)")
    else:
        cfg = load_config(IndexConfig, args.config, args.overrides)  # every range checked: nothing written yet
        check_device(cfg.embedder.device)  # a missing GPU, before reading a large corpus
        check_out_path(args.out, overwrite=args.force)  # before reading a large corpus
    embed = None
    if args.ray:
        from searchsmith.serving.index_ray import check_address, ray_embed

        if args.address:
            check_address(args.address)  # before reading a large corpus
        embed = ray_embed(cfg.embedder, address=args.address, workers=args.workers, report=say)
    say(f"index: reading {args.corpus}")
    records = read_corpora(args.corpus)
    if args.add:
        manifest = add_documents(args.out, records, report=say, show_progress=True)
    else:
        manifest = build_index(records, args.out, cfg, overwrite=args.force, report=say, show_progress=True,
                               embed=embed)
    seconds = round(time.perf_counter() - t0, 2)
    say(f"index: wrote {args.out} in {seconds:.1f} s")
    summary = {"index": str(args.out), "documents": manifest["documents"], "chunks": manifest["chunks"],
               "sources": {s: v["chunks"] for s, v in manifest["sources"].items()},
               "chunk_tokens": manifest["chunker"]["chunk_tokens"],
               "embedding_model": manifest["embedding_model"], "seconds": seconds}
    print(json.dumps(summary))
    return 0


def _run_repair(args: argparse.Namespace, say) -> int:
    from searchsmith.serving.index_repair import repair_index

    if args.corpus or args.config or args.overrides or args.ray:
        raise ValidationError("index --repair uses the index's own config and model; drop the corpus, --config, "
                              "--ray and overrides")
    out = repair_index(args.out, report=say)
    print(json.dumps({"index": str(args.out), **out}))
    return 0


# -- route -----------------------------------------------------------------------------------
def read_history_file(path: str | None):
    """A history file: a JSON list of {role, content}, or JSONL with one turn per line.

    Raises:
        ValidationError: a missing file or a folder, bytes that are not UTF-8, a line that is
            not JSON, or a string holding a lone surrogate, each named by ``file:line``.
    """
    if not path:
        return None
    p = check_input_file(path, "--history", "expected a JSON list of {role, content}, or JSONL with one per line",
                         error=ValidationError)
    text = read_utf8(p)
    if not text.strip():
        return []
    try:
        data = loads_unique(text)
        whole = True
    except json.JSONDecodeError:
        whole = False  # JSONL, read line by line below
    except RepeatedKeyError as exc:
        raise ValidationError(f"--history {p}: {exc}") from None
    if whole:
        found = find_lone_surrogate(data)
        if found is not None:
            raise ValidationError(f"--history {p}: {found.problem()}")
        return data["history"] if isinstance(data, dict) and "history" in data else data
    turns = []
    for n, line in enumerate(text.split("\n"), start=1):  # "\n" only: a JSON string may hold U+2028
        if not line.strip():
            continue
        try:
            turn = loads_unique(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"--history {p}:{n}: not JSON or JSONL ({json_error(exc)}); give a JSON list "
                                  "of {role, content}, or one such object per line") from None
        except RepeatedKeyError as exc:
            raise ValidationError(f"--history {p}:{n}: {exc}") from None
        found = find_lone_surrogate(turn)
        if found is not None:
            raise ValidationError(f"--history {p}:{n}: {found.problem()}")
        turns.append(turn)
    return turns


def check_question(query: str, name: str = "question") -> str:
    """``query`` as given on the command line, refused when it holds a lone surrogate (bytes
    that are not UTF-8 in an argument reach ``sys.argv`` as such), which no tokenizer takes.

    Raises:
        ValidationError: ``question: holds a lone surrogate (\\udced) at character N ...``.
    """
    return check_unicode(query, name)


def load_router(index_dir: str, config_path: str | None = None, overrides=()):
    """Embedder + index + router from an index folder and an optional router YAML."""
    from searchsmith.models.config import from_dict, load_config
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from searchsmith.serving.index import Index, read_manifest
    from searchsmith.serving.router import CentroidRouter, RouterConfig

    manifest = read_manifest(index_dir)
    embedder = Embedder(from_dict(EmbedderConfig, manifest["config"]["embedder"]))
    index = Index.load(index_dir, embedder=embedder)
    cfg = load_config(RouterConfig, config_path, overrides)
    return CentroidRouter(index, embedder, cfg)


def configure_route(parser: argparse.ArgumentParser) -> None:
    from searchsmith.serving.router import MAX_TOP_K

    parser.add_argument("query", help="the question (a follow-up needs --history)")
    parser.add_argument("--index", required=True, help="index folder from 'searchsmith index'")
    parser.add_argument("--history", help="JSON file: [{role, content}, ...]")
    parser.add_argument("--mode", choices=["parallel", "serial", "auto"], help="default: the config's (auto)")
    parser.add_argument("--top-k", type=int, help=f"sources to return, 1 to {MAX_TOP_K} (default: the config's "
                        "router.top_k)")
    parser.add_argument("--config", help="router config YAML (top_k, min_score, mixin, scale, ...)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run_route)


def check_top_k(top_k: int | None) -> None:
    """``--top-k``: None (the config's ``router.top_k``) or 1 to ``MAX_TOP_K``, the cap of
    ``POST /v1/route``; checked before the index and the model are loaded.

    Raises:
        ValidationError: ``--top-k: sources to return, must be a whole number in [1, 1000] ...``.
    """
    from searchsmith.serving.router import MAX_TOP_K

    if top_k is not None and not 1 <= top_k <= MAX_TOP_K:
        raise ValidationError(f"--top-k: sources to return, must be a whole number in [1, {MAX_TOP_K}] (leave it "
                              f"out for the config's router.top_k), got {top_k}")


def run_route(args: argparse.Namespace) -> int:
    query, history = check_question(args.query), read_history_file(args.history)
    check_top_k(args.top_k)
    router = load_router(args.index, args.config)
    res = router.route(query, history, mode=args.mode, top_k=args.top_k)
    if args.json:
        print(json.dumps(res.to_dict()))
    else:
        for w in res.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(f"mode: {res.mode}   routed: {res.routed_text!r}")
        for name, score in res.sources:
            print(f"  {score:7.4f}  {name}")
    return 0
