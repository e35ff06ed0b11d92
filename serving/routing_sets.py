"""Routing and pipeline evaluation sets built from the public data in ``../shared/data``.

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

``searchsmith make-pipeline-set multihop --data-dir ../shared/data --out DIR`` writes
``DIR/corpus.jsonl`` and ``DIR/qa.jsonl`` (the pipeline evaluation format: ``{id, query,
answer, supporting}``) for ``searchsmith eval pipeline``: the MuSiQue-Ans and HotpotQA
(distractor) open parts, every question with its own candidate paragraphs (20 and 10, gold
and distractors), all pooled into one corpus with one source per dataset, so a question's
supporting paragraphs must be found among every other question's paragraphs too.
Paragraphs that recur are kept once. Sources: StonyBrookNLP/musique (CC BY 4.0), hotpotqa
(CC BY-SA 4.0), as ``../shared/data/README.md`` records.

``searchsmith make-pipeline-set 2wikimultihop ...`` writes the same files from the
2WikiMultihopQA open part (10 candidate paragraphs per question, the gold ones named by
``supporting_facts``; one source): compositional, comparison and inference questions over
film and person pages that no recipe trains the decomposer on, so a set to check a choice
made on ``multihop``. Source: Alab-NII/2wikimultihop (the repository lists Apache-2.0; text
from Wikipedia, CC BY-SA).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import read_jsonl


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:64]


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ValidationError(f"make-routing-set / make-pipeline-set: {path} not found; pass --data-dir "
                              "pointing at shared/data")
    return read_jsonl(path, what="make-routing-set / make-pipeline-set", allow_empty=True)


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


def _paragraph_id(prefix: str, title: str, text: str) -> str:
    digest = hashlib.sha1((title + "\n" + text).encode("utf-8")).hexdigest()[:12]
    return f"{prefix}-{digest}"


def multihop_pipeline(data_dir: Path, questions: int = 0) -> tuple[list[dict], list[dict]]:
    """MuSiQue + HotpotQA: (corpus, qa items); see the module docstring.

    ``questions`` > 0 keeps the first that many items (alternating the two sets) and only the
    candidate paragraphs of those questions: a smaller pool, still shared by every question.
    """
    corpus: dict[str, dict] = {}
    by_set: dict[str, list[dict]] = {"musique": [], "hotpotqa": []}
    candidates: dict[str, list[str]] = {}  # item id -> its candidate paragraphs

    def add(source: str, title: str, text: str) -> str:
        doc_id = _paragraph_id(source, title, text)
        corpus.setdefault(doc_id, {"id": doc_id, "source": source, "title": title, "text": text})
        return doc_id

    for r in _read(data_dir / "musique" / "musique_ans_200.jsonl"):
        ids = [(add("musique", p["title"], p["paragraph_text"]), bool(p["is_supporting"])) for p in r["paragraphs"]]
        by_set["musique"].append({"id": f"musique-{r['id']}", "query": r["question"], "answer": r["answer"],
                                  "supporting": [d for d, gold in ids if gold]})
        candidates[f"musique-{r['id']}"] = [d for d, _ in ids]
    for r in _read(data_dir / "hotpotqa" / "hotpotqa_dev_distractor.jsonl"):
        gold = set(r["supporting_titles"])
        ids = [(add("hotpotqa", t, "".join(s) if not isinstance(s, str) else s), t in gold) for t, s in r["context"]]
        by_set["hotpotqa"].append({"id": f"hotpotqa-{r['_id']}", "query": r["question"], "answer": r["answer"],
                                   "supporting": [d for d, g in ids if g]})
        candidates[f"hotpotqa-{r['_id']}"] = [d for d, _ in ids]
    # Alternate the two sets, so that ``eval pipeline --limit N`` takes some of each.
    mq, hp = by_set["musique"], by_set["hotpotqa"]
    items = [x for pair in zip(mq, hp, strict=False) for x in pair] + mq[len(hp):] + hp[len(mq):]
    return _first_questions(corpus, items, candidates, questions)


def _first_questions(corpus: dict[str, dict], items: list[dict], candidates: dict[str, list[str]],
                     questions: int) -> tuple[list[dict], list[dict]]:
    """(corpus, items), or with ``questions`` > 0 the first that many items and only their
    candidate paragraphs."""
    if questions <= 0:
        return list(corpus.values()), items
    items = items[:questions]
    keep = {d for it in items for d in candidates[it["id"]]}
    return [doc for doc_id, doc in corpus.items() if doc_id in keep], items


def wikimultihop_pipeline(data_dir: Path, questions: int = 0) -> tuple[list[dict], list[dict]]:
    """2WikiMultihopQA: (corpus, qa items); see the module docstring. ``questions`` > 0 keeps
    the first that many items and only their candidate paragraphs."""
    corpus: dict[str, dict] = {}
    items: list[dict] = []
    candidates: dict[str, list[str]] = {}
    for r in _read(data_dir / "2wikimultihopqa" / "2wikimultihopqa_dev.jsonl"):
        gold = {str(t) for t, _ in r.get("supporting_facts") or []}
        ids = []
        for title, sents in r["context"]:
            text = " ".join(" ".join(sents).split()) if not isinstance(sents, str) else sents
            doc_id = _paragraph_id("2wikimultihop", title, text)
            corpus.setdefault(doc_id, {"id": doc_id, "source": "2wikimultihop", "title": title, "text": text})
            ids.append((doc_id, title in gold))
        item_id = f"2wikimultihop-{r['_id']}"
        items.append({"id": item_id, "query": r["question"], "answer": r["answer"],
                      "supporting": list(dict.fromkeys(d for d, g in ids if g))})
        candidates[item_id] = [d for d, _ in ids]
    return _first_questions(corpus, items, candidates, questions)


PIPELINE_BUILDERS = {"multihop": multihop_pipeline, "2wikimultihop": wikimultihop_pipeline}


def configure_make_routing_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BUILDERS))
    parser.add_argument("--data-dir", default="../shared/data", help="the shared data folder")
    parser.add_argument("--out", required=True, help="folder for corpus.jsonl and routing.jsonl")
    parser.add_argument("--force", action="store_true", help="replace files of those names not written by searchsmith")
    parser.set_defaults(func=run_make_routing_set)


SET_MARKER = ".searchsmith-set"  # written beside the files: this folder's sets are ours to replace


def write_set(out: Path, corpus: list[dict], items: list[dict], items_file: str,
              force: bool = False) -> dict[str, Any]:
    """Write ``corpus.jsonl`` and ``items_file`` into ``out`` (atomically each). A file of those
    names that an earlier make-*-set run did not write (no marker in ``out``) is refused
    unless ``force``: it may be the user's own corpus."""
    theirs = [n for n in ("corpus.jsonl", items_file) if (out / n).exists()]
    if theirs and not (out / SET_MARKER).exists() and not force:
        raise ValidationError(f"--out {out}: {', '.join(theirs)} already there and not written by searchsmith; "
                              "choose another --out, or pass --force to replace them")
    out.mkdir(parents=True, exist_ok=True)
    (out / SET_MARKER).write_text("written by searchsmith make-routing-set / make-pipeline-set\n", encoding="utf-8")
    for name, rows in (("corpus.jsonl", corpus), (items_file, items)):
        tmp = out / (name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(out / name)
    return {"out": str(out), "documents": len(corpus), "sources": len({r["source"] for r in corpus})}


def run_make_routing_set(args: argparse.Namespace) -> int:
    corpus, queries = BUILDERS[args.name](Path(args.data_dir))
    summary = write_set(Path(args.out), corpus, queries, "routing.jsonl", args.force)
    print(json.dumps({**summary, "queries": len(queries), "followups": sum(1 for q in queries if q["history"])}))
    return 0


def configure_make_pipeline_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(PIPELINE_BUILDERS))
    parser.add_argument("--data-dir", default="../shared/data", help="the shared data folder")
    parser.add_argument("--out", required=True, help="folder for corpus.jsonl and qa.jsonl")
    parser.add_argument("--force", action="store_true", help="replace files of those names not written by searchsmith")
    parser.add_argument("--questions", type=int, default=0, help="keep the first N questions and only their "
                        "candidate paragraphs; 0 keeps every question and paragraph (default %(default)s)")
    parser.set_defaults(func=run_make_pipeline_set)


def run_make_pipeline_set(args: argparse.Namespace) -> int:
    if args.questions < 0:
        raise ValidationError(f"make-pipeline-set --questions: expected a count >= 0, got {args.questions}")
    corpus, items = PIPELINE_BUILDERS[args.name](Path(args.data_dir), args.questions)
    summary = write_set(Path(args.out), corpus, items, "qa.jsonl", args.force)
    print(json.dumps({**summary, "questions": len(items)}))
    return 0
