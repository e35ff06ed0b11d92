"""Routing corpora and evaluation sets built from the public data in ``../shared/data``.

``searchsmith make-routing-set expertqa|cast --data-dir ../shared/data --out DIR`` writes
``DIR/corpus.jsonl`` (the corpus format) and ``DIR/routing.jsonl`` (the routing format),
ready for ``searchsmith index`` and ``searchsmith eval route``. The data is read where it
lies and never copied into the repository.

* ``expertqa``: one source per ExpertQA field (fields with at least ``min_per_source``
  questions; "Other" is dropped; "Medicine" and "Healthcare / Medicine" are merged since
  the annotators used both for one domain). Per field, a seeded ``query_ratio`` of the
  questions become routing queries (single turn) and the rest the field's documents.
  Source: chaitanyamalaviya/ExpertQA, MIT.
* ``cast``: one source per TREC CAsT 2021/2022 conversation topic; its documents are the
  canonical response passages of that conversation; every user turn is a routing query
  with its earlier turns (and their canonical responses) as history, so most queries are
  follow-ups ("Is it treatable?"). Source: daltonj/treccastweb, MIT (passages: CAsT
  collections, research-use terms).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ValidationError


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:64]


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ValidationError(f"make-routing-set: {path} not found; pass --data-dir pointing at shared/data")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def expertqa_routing(data_dir: Path, *, min_per_source: int = 20, query_ratio: float = 0.2,
                     max_queries_per_source: int = 10, seed: int = 13) -> tuple[list[dict], list[dict]]:
    rows = _read(data_dir / "expertqa" / "expertqa_r1_questions_by_field.jsonl")
    merge = {"Healthcare / Medicine": "Medicine"}
    by_field: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        field = merge.get(r["field"], r["field"])
        if field and field != "Other":
            by_field[field].append(r)
    rng = random.Random(seed)
    corpus, queries = [], []
    for field in sorted(by_field):
        items = by_field[field]
        if len(items) < min_per_source:
            continue
        items = sorted(items, key=lambda r: r["qid"])
        rng.shuffle(items)
        n_q = min(max_queries_per_source, max(1, int(len(items) * query_ratio)))
        source = _slug(field)
        for r in items[:n_q]:
            queries.append({"history": [], "query": r["question"], "sources": [source]})
        for r in items[n_q:]:
            corpus.append({"id": r["qid"], "source": source, "text": r["question"], "title": r.get("specific_field") or field})
    return corpus, queries


def cast_routing(data_dir: Path, *, min_docs: int = 4) -> tuple[list[dict], list[dict]]:
    rows = _read(data_dir / "trec_cast" / "cast_2019_2022_turns.jsonl")
    by_id = {r["id"]: r for r in rows}
    topics: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("canonical_response"):
            topics[f"cast{r['year']}_{r['topic_id']}"].append(r)
    corpus, queries = [], []
    for topic in sorted(topics):
        turns = topics[topic]
        if len(turns) < min_docs:
            continue
        for r in turns:
            corpus.append({"id": f"{r['id']}_resp", "source": topic, "text": r["canonical_response"]})
        for r in turns:
            history = []
            for hid, utt in zip(r.get("history_turn_ids") or [], r.get("history_utterances") or []):
                history.append({"role": "user", "content": utt})
                resp = (by_id.get(hid) or {}).get("canonical_response")
                if resp:
                    history.append({"role": "assistant", "content": resp})
            queries.append({"history": history, "query": r["raw_utterance"], "sources": [topic]})
    return corpus, queries


BUILDERS = {"expertqa": expertqa_routing, "cast": cast_routing}


def configure_make_routing_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BUILDERS))
    parser.add_argument("--data-dir", default="../shared/data", help="the shared data folder")
    parser.add_argument("--out", required=True, help="folder for corpus.jsonl and routing.jsonl")
    parser.set_defaults(func=run_make_routing_set)


def run_make_routing_set(args: argparse.Namespace) -> int:
    corpus, queries = BUILDERS[args.name](Path(args.data_dir))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus), ("routing.jsonl", queries)):
        tmp = out / (name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(out / name)
    print(json.dumps({"out": str(out), "documents": len(corpus), "queries": len(queries),
                      "followups": sum(1 for q in queries if q["history"]),
                      "sources": len({r["source"] for r in corpus})}))
    return 0
