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

``--data-dir`` defaults to ``../shared/data`` found as the recipes find their data paths: in the
current folder, else beside the repository (``training.data.resolve_data_dir``).

``DIR/.searchsmith-set`` (JSON) records the sha256 of each file a run wrote: a rerun replaces
them only while they still hold what was written; a file it did not write, or one edited
since, is refused unless ``--force`` (:func:`check_set_out`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchsmith.models.errors import ValidationError
from searchsmith.models.io import WrittenFiles, write_text_atomic

if TYPE_CHECKING:  # the shapes are training's; imported where a set is built, so serving starts without them
    from searchsmith.training.dataset_shapes import RecordShape


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:64]


def _read(path: Path, shape: RecordShape, required: Sequence[str], optional: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The records of one source file, each checked against its dataset's shape (the fields
    ``required`` and, where present, ``optional``): a bad line is named as ``FILE:LINE`` with the
    field, what it must be and what it is, never a KeyError; an empty file is refused (it would
    write an empty set)."""
    if not path.is_file():
        from searchsmith.training.data import SHARED_DATA

        raise ValidationError(f"make-routing-set / make-pipeline-set: {path} not found; pass --data-dir "
                              f"pointing at the shared data folder (default {SHARED_DATA})")
    return shape.read(path, "make-routing-set / make-pipeline-set: source", required, optional)


def expertqa_routing(data_dir: Path, *, min_per_source: int = 20, query_ratio: float = 0.2,
                     max_queries_per_source: int = 10, seed: int = 13) -> tuple[list[dict], list[dict]]:
    from searchsmith.training.dataset_shapes import EXPERTQA_QUESTION

    rows = _read(data_dir / "expertqa" / "expertqa_r1_questions_by_field.jsonl", EXPERTQA_QUESTION,
                 ("qid", "question", "field"), ("specific_field",))
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
    from searchsmith.training.dataset_shapes import TREC_CAST

    # every turn of the shared data has both history fields (the first turn's empty); required,
    # so that the shape pairs them one to one (cast_history_lengths_differ) and a turn lacking
    # one is refused at its line instead of losing its history
    rows = _read(data_dir / "trec_cast" / "cast_2019_2022_turns.jsonl", TREC_CAST,
                 ("id", "year", "topic_id", "raw_utterance", "history_turn_ids", "history_utterances"),
                 ("canonical_response",))
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
            for hid, utt in zip(r["history_turn_ids"], r["history_utterances"], strict=True):
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
    from searchsmith.training.dataset_shapes import HOTPOTQA, MUSIQUE

    corpus: dict[str, dict] = {}
    by_set: dict[str, list[dict]] = {"musique": [], "hotpotqa": []}
    candidates: dict[str, list[str]] = {}  # item id -> its candidate paragraphs

    def add(source: str, title: str, text: str) -> str:
        doc_id = _paragraph_id(source, title, text)
        corpus.setdefault(doc_id, {"id": doc_id, "source": source, "title": title, "text": text})
        return doc_id

    for r in _read(data_dir / "musique" / "musique_ans_200.jsonl", MUSIQUE, ("id", "question", "answer", "paragraphs")):
        ids = [(add("musique", p["title"], p["paragraph_text"]), bool(p["is_supporting"])) for p in r["paragraphs"]]
        by_set["musique"].append({"id": f"musique-{r['id']}", "query": r["question"], "answer": r["answer"],
                                  "supporting": [d for d, gold in ids if gold]})
        candidates[f"musique-{r['id']}"] = [d for d, _ in ids]
    for r in _read(data_dir / "hotpotqa" / "hotpotqa_dev_distractor.jsonl", HOTPOTQA,
                   ("_id", "question", "answer", "supporting_titles", "context")):
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
    from searchsmith.training.dataset_shapes import WIKIMULTIHOPQA

    corpus: dict[str, dict] = {}
    items: list[dict] = []
    candidates: dict[str, list[str]] = {}
    for r in _read(data_dir / "2wikimultihopqa" / "2wikimultihopqa_dev.jsonl", WIKIMULTIHOPQA,
                   ("_id", "question", "answer", "context"), ("supporting_facts",)):
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


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    from searchsmith.training.data import SHARED_DATA

    parser.add_argument("--data-dir", default=SHARED_DATA, help="the shared data folder (default "
                        "%(default)s, in the current folder, else beside the repository)")


def configure_make_routing_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BUILDERS))
    _add_data_dir(parser)
    parser.add_argument("--out", required=True, help="folder for corpus.jsonl and routing.jsonl: a new one, or one "
                        "a make-*-set run wrote (its files are replaced unless edited since)")
    parser.add_argument("--force", action="store_true", help="replace files of those names that searchsmith did not "
                        "write or that were edited since")
    parser.set_defaults(func=run_make_routing_set)


SET_MARKER = ".searchsmith-set"  # written beside the files: which of them are ours to replace
MARKER_KIND = "searchsmith make-routing-set / make-pipeline-set"


def _listed(names: list[str]) -> str:
    return ", ".join(names)


def _marker(out: Path) -> WrittenFiles:
    return WrittenFiles.read(out / SET_MARKER, header={"written_by": MARKER_KIND})


def check_set_out(out: Path, names: Sequence[str], force: bool = False) -> WrittenFiles:
    """Refuse to write the set files ``names`` into ``out`` where that would overwrite what
    searchsmith did not write; return the folder's record of what it wrote.

    The marker (:data:`SET_MARKER`, a :class:`~searchsmith.models.io.WrittenFiles` record)
    holds the sha256 of each file a make-*-set run wrote. Without ``force``, a file of those
    names is replaced only when the marker records it and its content is still what was
    recorded; a file the marker does not list (the user's own, or no marker at all) or one
    edited since is refused. A marker of an older searchsmith records no checksums: nothing
    tells whether its files were edited, so they are refused too (conservatively; ``--force``
    once, and the new marker records them). Other files in ``out`` are never touched and do
    not matter.

    Raises:
        ValidationError: naming the files, why, and ``--force``; ``out`` (or one of the names
            in it) is not a folder (resp. a file), which ``force`` does not override.
    """
    if out.exists() and not out.is_dir():
        raise ValidationError(f"--out {out}: is a file, not a folder; give a folder for the set's files "
                              f"({_listed(list(names))}): a new one, or one make-*-set wrote")
    blocked = [n for n in (*names, SET_MARKER) if (out / n).is_dir()]
    if blocked:
        raise ValidationError(f"--out {out}: {_listed(blocked)} is a folder, where the set writes a file; choose "
                              "another --out")
    marker = _marker(out)
    if force:
        return marker
    present = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    fix = "choose another --out, or pass --force to replace them"
    if not marker.record.exists() and present:
        raise ValidationError(f"--out {out}: {_listed(present)} already there and not written by searchsmith; {fix}")
    if marker.hashes is None and present:
        raise ValidationError(f"--out {out}: {_listed(present)} may have been edited: this folder's {SET_MARKER} "
                              "was written by an older searchsmith and records no checksums, so an edit cannot "
                              f"be told apart; {fix} (the new marker records checksums)")
    states = {n: marker.state(out / n) for n in present}
    theirs = [n for n in present if states[n] == "foreign"]
    edited = [n for n in present if states[n] == "edited"]
    problems = []
    if theirs:
        problems.append(f"{_listed(theirs)} already there and not written by searchsmith")
    if edited:
        problems.append(f"{_listed(edited)} {'was' if len(edited) == 1 else 'were'} changed since searchsmith "
                        f"wrote {'it' if len(edited) == 1 else 'them'} (the sha256 {SET_MARKER} records differs)")
    if problems:
        raise ValidationError(f"--out {out}: {'; '.join(problems)}; {fix}")
    return marker


def write_set(out: Path, corpus: list[dict], items: list[dict], items_file: str,
              force: bool = False) -> dict[str, Any]:
    """Write ``corpus.jsonl`` and ``items_file`` into ``out`` (atomically each) and record their
    sha256 in the folder's marker. What may be replaced is :func:`check_set_out`'s rule.

    Raises:
        ValidationError: nothing to write, or :func:`check_set_out`'s refusals.
    """
    if not corpus or not items:
        raise ValidationError(f"--out {out}: the source data yields no documents or no {items_file} items "
                              f"({len(corpus)} documents, {len(items)} items); nothing written. Check --data-dir: "
                              "its files hold too few records for a set")
    names = ["corpus.jsonl", items_file]
    recorded = check_set_out(out, names, force)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a parent folder should be
        raise ValidationError(f"--out {out}: cannot create the folder ({exc.strerror}); give another --out") from None
    # files an earlier run wrote and this one did not (a routing set beside a pipeline set) stay recorded
    recorded.keep_only_present()
    for name, rows in (("corpus.jsonl", corpus), (items_file, items)):
        text = "".join(json.dumps(r) + "\n" for r in rows)
        write_text_atomic(out / name, text)
        recorded.add(out / name, hashlib.sha256(text.encode("utf-8")).hexdigest())
    recorded.save()
    return {"out": str(out), "documents": len(corpus), "sources": len({r["source"] for r in corpus})}


def _check_paths(args: argparse.Namespace, command: str) -> None:
    """--out and --data-dir name a folder: an empty string would mean the current one."""
    from searchsmith.training.data import SHARED_DATA

    for flag, value in (("--out", args.out), ("--data-dir", args.data_dir)):
        if not str(value).strip():
            raise ValidationError(f"{command} {flag} is empty: give a folder path (--out: where the set is "
                                  f"written; --data-dir: the shared data, default {SHARED_DATA})")


def run_make_routing_set(args: argparse.Namespace) -> int:
    from searchsmith.training.data import resolve_data_dir

    _check_paths(args, "make-routing-set")
    folder = resolve_data_dir(args.data_dir, "--data-dir", where="make-routing-set")
    corpus, queries = BUILDERS[args.name](folder)
    summary = write_set(Path(args.out), corpus, queries, "routing.jsonl", args.force)
    print(json.dumps({**summary, "queries": len(queries), "followups": sum(1 for q in queries if q["history"])}))
    return 0


def configure_make_pipeline_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(PIPELINE_BUILDERS))
    _add_data_dir(parser)
    parser.add_argument("--out", required=True, help="folder for corpus.jsonl and qa.jsonl: a new one, or one a "
                        "make-*-set run wrote (its files are replaced unless edited since)")
    parser.add_argument("--force", action="store_true", help="replace files of those names that searchsmith did not "
                        "write or that were edited since")
    parser.add_argument("--questions", type=int, default=0, help="keep the first N questions and only their "
                        "candidate paragraphs; 0 keeps every question and paragraph (default %(default)s)")
    parser.set_defaults(func=run_make_pipeline_set)


def run_make_pipeline_set(args: argparse.Namespace) -> int:
    from searchsmith.training.data import resolve_data_dir

    if args.questions < 0:
        raise ValidationError(f"make-pipeline-set --questions: expected a count >= 0, got {args.questions}")
    _check_paths(args, "make-pipeline-set")
    folder = resolve_data_dir(args.data_dir, "--data-dir", where="make-pipeline-set")
    corpus, items = PIPELINE_BUILDERS[args.name](folder, args.questions)
    summary = write_set(Path(args.out), corpus, items, "qa.jsonl", args.force)
    print(json.dumps({**summary, "questions": len(items)}))
    return 0
