"""``searchsmith ask "question" [--history FILE] [--config FILE] [--index DIR] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from searchsmith.serving.pipeline.answer import Answer


def configure_ask(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="the question (a follow-up needs --history)")
    parser.add_argument("--history", help="JSON file: [{role, content}, ...] (or JSONL, one turn a line)")
    parser.add_argument("--config", help="pipeline config YAML (bundles, generation, thresholds, presets)")
    parser.add_argument("--index", help="index folder from 'searchsmith index' (else the config's 'index')")
    parser.add_argument("--preset", help="force a preset (turbo, small, large, ...)")
    parser.add_argument("--strategy", choices=["direct", "parallel", "planning"], help="force an SRSA strategy")
    parser.add_argument("--mode", choices=["serial", "parallel", "auto"], help="routing mode")
    parser.add_argument("--json", action="store_true", help="print the whole answer and trace as one JSON object")
    parser.add_argument("overrides", nargs="*", default=[], help="config overrides KEY=VALUE, e.g. retrieval.retrieve_k=5")
    parser.set_defaults(func=run_ask)


def format_answer(ans: Answer) -> str:
    """The answer for a terminal: the short answer first (a reader's), then the text with [n]
    markers (the support), references, timeline, images, trace."""
    lines = [ans["answer"] or "(no answer found)", ""]
    if ans.get("short_answer"):
        support = [s for s in ans.get("sentences", []) if s["text"] in ans.get("support", [])]
        cited = [s["text"].rstrip(".") + (" " + "".join(f"[{c['n']}]" for c in s["citations"]) if s["citations"]
                                          else "") + "." for s in support]
        lines = [f"Answer: {ans['short_answer']}", "", "Support: " + (" ".join(cited) or " ".join(ans["support"])), ""]
    if ans["rewrite"] != ans["query"]:
        lines.insert(0, f"(understood as: {ans['rewrite']})\n")
    if ans["references"]:
        lines.append("References:")
        lines += [f"  [{r['n']}] {r['title'] or r['doc_id']} ({r['source']}: {r['doc_id']})"
                  + (f" {r['url']}" if r.get("url") else "") for r in ans["references"]]
    if ans["timeline"]:
        lines.append("Timeline:")
        for group in ans["timeline"]:
            for ev in group["events"]:
                lines.append(f"  {ev['date']:<10}  {ev['text']}  ({', '.join(ev['sources'])})")
    if ans["images"]:
        lines.append("Images:")
        lines += [f"  {im['image_id']} after paragraph {im['paragraph'] + 1} ({im['score']:.2f}): {im['path']}"
                  for im in ans["images"]]
    tr = ans["trace"]
    stages = ", ".join(f"{k} {v['latency_ms']:.0f} ms" for k, v in tr["stages"].items()
                       if "." not in k and not v.get("skipped"))
    lines.append(f"[preset {tr['preset']}, strategy {tr['strategy']}, sources {', '.join(tr['sources'])}; "
                 f"{tr['total_ms']:.0f} ms ({stages}); {tr['model_calls']} model calls, "
                 f"{tr['tokens_in']} tokens in, {tr['tokens_out']} out; cost {tr['cost']:.3f}]")
    lines += [f"note: {n}" for n in tr["notes"]]
    return "\n".join(lines)


def run_ask(args: argparse.Namespace) -> int:
    from searchsmith.serving.cli import check_question, read_history_file
    from searchsmith.serving.pipeline.config import load_pipeline_config
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    cfg = load_pipeline_config(args.config, args.overrides)
    query, history = check_question(args.query), read_history_file(args.history)
    pipe = load_pipeline(cfg, args.index)
    try:
        ans = pipe.ask(query, history, preset=args.preset, strategy=args.strategy, routing_mode=args.mode)
    finally:
        pipe.close()
    if args.json:
        print(json.dumps(ans))
    else:
        sys.stdout.write(format_answer(ans) + "\n")
    return 0
