"""Data for the decomposer: ``decompose:`` (question -> QDG) and ``rewrite:`` (follow-up -> standalone).

Every loader returns examples (plain dicts)::

    {"task": "decompose" | "rewrite", "source": str, "target": str,
     "graph"?: QDG JSON, "query": str, "history": [str], "reply"?: str, "group": str, "origin": str}

``source`` is the model input with its task prefix (:func:`decompose_source`,
:func:`rewrite_source`); ``target`` is the compact linearised graph
(:func:`searchsmith.models.qdg.linearize`) or the gold rewrite. ``group`` is the unit of the
train / held-out split: the lower-cased question for decomposition (so a HotpotQA question
that also appears in Break lands on one side only), the conversation for rewriting (turns of
one conversation share their history). ``reply`` is the system's answer to the last history
turn where the source has one (CAsT 2021 / 2022); :func:`conversation` gives the history as
chat turns with it.

Real sources (``../shared/data`` layout; each is optional, absent files are reported):
Break QDMR, MuSiQue, StrategyQA, HotpotQA ``qdmr_high_level``, TREC CAsT. The synthetic
generator (invented entities, templates) needs no files, so the recipe also runs on a
user's machine and in the quickstart.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from searchsmith.models.decomposer import (
    decompose_source,
    rewrite_source,
)
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import read_jsonl
from searchsmith.models.qdg import DEFAULT_MAX_NODES, QDG, from_qdmr, linearize, repair, terminal
from searchsmith.training.data import SHARED_DATA, resolve_data_dir
from searchsmith.training.dataset_shapes import (
    BREAK_QDMR,
    HOTPOTQA,
    MUSIQUE,
    STRATEGYQA,
    TREC_CAST,
    RecordShape,
)

# Relative paths under the data directory, as in ../shared/data/README.md.
REAL_SOURCES: dict[str, str] = {
    "break_qdmr": "break_qdmr/dev.jsonl",
    "musique": "musique/musique_ans_200.jsonl",
    "strategyqa": "strategyqa/strategyqa_229.jsonl",
    "hotpotqa": "hotpotqa/hotpotqa_dev_distractor.jsonl",
    "trec_cast": "trec_cast/cast_2019_2022_turns.jsonl",
}


def _decompose_example(question: str, graph: QDG, group: str, origin: str) -> dict[str, Any]:
    return {
        "task": "decompose",
        "source": decompose_source(question),
        "target": linearize(graph),
        "graph": graph.to_json(),
        "query": question,
        "history": [],
        "group": "q:" + " ".join(question.lower().split()),
        "origin": origin,
    }


def _rewrite_example(history: list[str], query: str, rewrite: str, group: str, origin: str,
                     max_history_turns: int) -> dict[str, Any]:
    return {
        "task": "rewrite",
        "source": rewrite_source(history, query, max_history_turns),
        "target": " ".join(rewrite.split()),
        "query": query,
        "history": list(history),
        "group": group,
        "origin": origin,
    }


# --------------------------------------------------------------------------- real sources


# where ../shared/data is absent, a real source's file is missing: the fix
_NO_SHARED_DATA = f"check data.data_dir, or use data.sources: [synthetic] where {SHARED_DATA} is absent"


def _deps_from_refs(texts: Sequence[str]) -> list[list[int]]:
    return [[int(k) for k in re.findall(r"#\s*(\d+)", t)] for t in texts]


# The loaders below read rows their shape has checked (``_RECORDS``, :func:`load_real`): a field
# the loader requires is there and of its type, so it is indexed; ``.get`` is for the optional ones.


def load_break(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Break QDMR rows (``question_text``, ``steps``, ``step_dependencies``) -> examples."""
    out = []
    for r in rows:
        graph = from_qdmr(r["steps"], r.get("step_dependencies"))
        out.append(_decompose_example(r["question_text"], graph, "", f"break:{r.get('source_dataset') or ''}"))
    return out


def load_musique(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """MuSiQue rows (``question``, ``question_decomposition[].question`` with ``#k``) -> examples."""
    out = []
    for r in rows:
        steps = [hop["question"] for hop in r["question_decomposition"]]
        graph = from_qdmr(steps, _deps_from_refs(steps))
        out.append(_decompose_example(r["question"], graph, "", "musique"))
    return out


def load_strategyqa(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """StrategyQA rows (``question``, ``decomposition`` list with ``#k``) -> examples."""
    out = []
    for r in rows:
        steps = r["decomposition"]
        graph = from_qdmr(steps, _deps_from_refs(steps))
        out.append(_decompose_example(r["question"], graph, "", "strategyqa"))
    return out


def load_hotpotqa(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """HotpotQA rows with ``qdmr_high_level`` (others skipped) -> examples."""
    out = []
    for r in rows:
        qdmr = r.get("qdmr_high_level")
        if qdmr is None:
            continue
        graph = from_qdmr(qdmr["steps"], qdmr.get("step_dependencies"))
        out.append(_decompose_example(r["question"], graph, "", "hotpotqa"))
    return out


def load_trec_cast(rows: Iterable[dict[str, Any]], max_history_turns: int = 3) -> list[dict[str, Any]]:
    """TREC CAsT turns: (``history_utterances`` + ``raw_utterance``) -> ``manual_rewritten_utterance``;
    ``canonical_response`` (2021/2022) is kept as ``passage``, the known item ``eval rewrite``
    retrieves with each rewrite, and as the next turn's ``reply`` (the answer to its last
    history turn, looked up through ``history_turn_ids``, which the shape checks pair one to one
    with ``history_utterances``)."""
    rows = list(rows)
    responses = {str(r.get("id")): " ".join(r["canonical_response"].split()) for r in rows
                 if isinstance(r.get("canonical_response"), str) and r["canonical_response"].strip()}
    out = []
    for r in rows:
        query, rewrite = r["raw_utterance"], r["manual_rewritten_utterance"]
        history = list(r.get("history_utterances") or [])
        group = f"cast:{r.get('year', '')}_{r.get('topic_id', '')}"
        ex = _rewrite_example(history, query, rewrite, group, "trec_cast", max_history_turns)
        passage = r.get("canonical_response")
        if isinstance(passage, str) and passage.strip():  # 2021/2022: the turn's answer passage
            ex["passage"] = " ".join(passage.split())
        ids = r.get("history_turn_ids") or []
        reply = responses.get(str(ids[-1])) if history and ids else None
        if reply:  # the answer the user saw to the last turn: what "the last two" refers to
            ex["reply"] = reply
        out.append(ex)
    return out


def conversation(ex: Mapping[str, Any]) -> list[dict[str, str]]:
    """An example's history as chat turns (``{"role", "content"}``): its user turns, then the
    system's answer to the last of them when the example has one (``reply``)."""
    turns = [{"role": "user", "content": h} for h in ex.get("history") or []]
    if turns and ex.get("reply"):
        turns.append({"role": "assistant", "content": ex["reply"]})
    return turns


# What a record of each real source must hold, and which of its fields the loaders read (the
# shapes are training/dataset_shapes.py's): a malformed record is refused at its FILE:LINE, naming
# the field, never dropped without a word. A HotpotQA record without qdmr_high_level is no
# decomposition and is skipped, as its loader says.
_RECORDS: dict[str, tuple[RecordShape, tuple[str, ...], tuple[str, ...]]] = {  # shape, required, optional
    "break_qdmr": (BREAK_QDMR, ("question_text", "steps"), ("step_dependencies", "source_dataset")),
    "musique": (MUSIQUE, ("question", "question_decomposition"), ()),
    "strategyqa": (STRATEGYQA, ("question", "decomposition"), ()),
    "hotpotqa": (HOTPOTQA, ("question",), ("qdmr_high_level",)),
    "trec_cast": (TREC_CAST, ("raw_utterance", "manual_rewritten_utterance"),
                  ("id", "year", "topic_id", "history_utterances", "history_turn_ids", "canonical_response")),
}

_LOADERS = {
    "break_qdmr": load_break,
    "musique": load_musique,
    "strategyqa": load_strategyqa,
    "hotpotqa": load_hotpotqa,
}


def load_real(name: str, data_dir: str | Path, max_history_turns: int = 3) -> list[dict[str, Any]]:
    """Examples of one real source under ``data_dir`` (../shared/data layout)."""
    if name not in REAL_SOURCES:
        raise ConfigError(f"data.sources: unknown source {name!r}; expected one of "
                          f"{sorted([*REAL_SOURCES, 'synthetic'])}")
    path = Path(data_dir) / REAL_SOURCES[name]
    shape, required, optional = _RECORDS[name]
    rows = shape.read(path, f"data.sources {name}", required, optional, missing_hint=_NO_SHARED_DATA)
    out = load_trec_cast(rows, max_history_turns) if name == "trec_cast" else _LOADERS[name](rows)
    if not out:  # only HotpotQA skips records (those without qdmr_high_level): a file of those alone
        raise ValidationError(f"data.sources {name}: none of the {len(rows)} record(s) of {path} gives an example "
                              "(a HotpotQA record needs 'qdmr_high_level'); fix the file or drop the source")
    return out


# --------------------------------------------------------------------------- synthetic

_SYLLABLES = ("lu", "men", "var", "ok", "tes", "ra", "quin", "dor", "sel", "ma", "bri", "zan",
              "kel", "to", "ve", "nor", "ash", "pel", "ri", "gan")
_KINDS = ("company", "band", "university", "museum", "studio", "charity")
_ATTRS = ("founded", "opened", "established")


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _synthetic_decompose(rng: random.Random) -> tuple[str, QDG]:
    a, b, c = _name(rng), _name(rng), _name(rng)
    kind, verb = rng.choice(_KINDS), rng.choice(_ATTRS)
    form = rng.randrange(6)
    if form == 0:
        return f"When was the {kind} {a} {verb}?", terminal(f"When was the {kind} {a} {verb}?")
    if form == 1:
        return f"Who leads {a}?", terminal(f"Who leads {a}?")
    if form == 2:
        q = f"Where was the founder of {a} born?"
        nodes = [{"id": "1", "text": f"who founded {a}", "depends_on": []},
                 {"id": "2", "text": "where was #1 born", "depends_on": ["1"]}]
    elif form == 3:
        q = f"What {kind} did the person who bought {a} start in the city of {b}?"
        nodes = [{"id": "1", "text": f"who bought {a}", "depends_on": []},
                 {"id": "2", "text": f"what {kind} did #1 start in {b}", "depends_on": ["1"]}]
    elif form == 4:
        q = f"Which was {verb} first, {a} or {b}?"
        nodes = [{"id": "1", "text": f"when was {a} {verb}", "depends_on": []},
                 {"id": "2", "text": f"when was {b} {verb}", "depends_on": []},
                 {"id": "3", "text": "which is earlier of #1 and #2", "depends_on": ["1", "2"]}]
    else:
        q = f"Are {a}, {b} and {c} all in the same country?"
        nodes = [{"id": "1", "text": f"what country is {a} in", "depends_on": []},
                 {"id": "2", "text": f"what country is {b} in", "depends_on": []},
                 {"id": "3", "text": f"what country is {c} in", "depends_on": []},
                 {"id": "4", "text": "are #1, #2 and #3 the same", "depends_on": ["1", "2", "3"]}]
    return q, repair({"nodes": nodes}, q)


def _synthetic_rewrite(rng: random.Random) -> tuple[list[str], str, str]:
    a, kind = _name(rng), rng.choice(_KINDS)
    form = rng.randrange(4)
    opener = rng.choice([f"Tell me about the {kind} {a}.", f"What is {a}?", f"I want to learn about {a}."])
    if form == 0:
        return [opener], "Who founded it?", f"Who founded {a}?"
    if form == 1:
        return [opener, f"Where is {a} based?"], "How many people work there?", \
            f"How many people work at {a}?"
    if form == 2:
        return [opener], "What are its main products?", f"What are {a}'s main products?"
    return [], f"What is the history of {a}?", f"What is the history of {a}?"


def synthetic(n_decompose: int, n_rewrite: int, seed: int = 0,
              max_history_turns: int = 3) -> list[dict[str, Any]]:
    """Template examples over invented entities (seeded; no files needed).

    Args:
        n_decompose: decomposition examples (terminal, chain and split forms).
        n_rewrite: rewrite examples (pronoun follow-ups resolved against the first turn).
    """
    rng = random.Random(seed)
    out = []
    for i in range(n_decompose):
        q, graph = _synthetic_decompose(rng)
        ex = _decompose_example(q, graph, "", "synthetic")
        ex["group"] = f"syn:d{i}"
        out.append(ex)
    for i in range(n_rewrite):
        history, query, rewrite = _synthetic_rewrite(rng)
        out.append(_rewrite_example(history, query, rewrite, f"syn:r{i}", "synthetic",
                                    max_history_turns))
    return out


# --------------------------------------------------------------------------- splitting


def is_heldout(group: str, seed: int, heldout_ratio: float) -> bool:
    """Deterministic split by group: the same group is on the same side for a given seed."""
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < heldout_ratio


def left_out(ex: Mapping[str, Any], leave_out: Sequence[str]) -> bool:
    """Whether ``ex`` comes from a set named in ``leave_out``: a source (``break_qdmr``,
    ``hotpotqa`` ...; a Break example's ``origin`` is ``break:<its source dataset>``) or
    ``trec_cast:YEAR``, the CAsT conversations of one year."""
    origin = str(ex["origin"])
    source_of = "break_qdmr" if origin.startswith("break:") else origin
    for name in leave_out:
        source, _, year = name.partition(":")
        if source_of == source and (not year or str(ex["group"]).startswith(f"cast:{year}_")):
            return True
    return False


def split_examples(examples: Sequence[dict[str, Any]], seed: int, heldout_ratio: float,
                   task_ratios: Mapping[str, float] | None = None,
                   leave_out: Sequence[str] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held-out), split by ``group``; exact duplicates (same source and target) dropped.
    ``task_ratios``: another held-out share for the examples of a task (``{"rewrite": 0.3}``).
    ``leave_out``: sets (:func:`left_out`) whose groups are all held out, with every example of
    another source in such a group (a HotpotQA question that Break decomposes too)."""
    ratios = dict(task_ratios or {})
    apart = {ex["group"] for ex in examples if leave_out and left_out(ex, leave_out)}
    seen: set[tuple[str, str]] = set()
    train, heldout = [], []
    for ex in examples:
        key = (ex["source"].lower(), ex["target"].lower())
        if key in seen:
            continue
        seen.add(key)
        ratio = ratios.get(ex["task"], heldout_ratio)
        (heldout if ex["group"] in apart or is_heldout(ex["group"], seed, ratio) else train).append(ex)
    return train, heldout


# --------------------------------------------------------------------------- export


def _write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def to_decomposition_record(ex: dict[str, Any]) -> dict[str, Any]:
    """An example as a record of the "decompose" format of ``searchsmith eval --help``."""
    graph = ex["graph"]
    rec = {"query": ex["query"], "type": graph["type"], "nodes": graph["nodes"]}
    if ex.get("origin"):  # the set it comes from ("break:HOTPOT", "musique" ...): eval decompose's by_origin
        rec["origin"] = ex["origin"]
    return rec


def to_rewrite_record(ex: dict[str, Any]) -> dict[str, Any]:
    """An example as a record of the "rewrite" format of ``searchsmith eval --help``."""
    rec = {"history": conversation(ex),
           "query": ex["query"], "rewrite": ex["target"]}
    if ex.get("passage"):  # CAsT's canonical answer passage: the rewrite's retrieval target
        rec["passage"] = ex["passage"]
    return rec


def export_eval_sets(examples: Sequence[dict[str, Any]], out_dir: str | Path) -> dict[str, int]:
    """Write ``decompose.jsonl`` and ``rewrite.jsonl`` (the "decompose" and "rewrite" formats of ``searchsmith eval --help``) atomically.

    Returns:
        Records written per file.
    """
    out = Path(out_dir)
    return {
        "decompose.jsonl": _write_jsonl_atomic(
            out / "decompose.jsonl", (to_decomposition_record(e) for e in examples
                                      if e["task"] == "decompose")),
        "rewrite.jsonl": _write_jsonl_atomic(
            out / "rewrite.jsonl", (to_rewrite_record(e) for e in examples if e["task"] == "rewrite")),
    }


def read_decomposition_eval(path: str | Path) -> list[dict[str, Any]]:
    """Read a "decompose" eval file; ConfigError naming the line and field when malformed."""
    rows = read_jsonl(path, what="--data", allow_empty=True)
    if not rows:
        raise ConfigError(f"--data {path}: no records (expected the \"decompose\" JSONL of searchsmith eval --help)")
    for i, r in enumerate(rows, 1):
        if not isinstance(r.get("query"), str) or not r["query"].strip():
            raise ConfigError(f"--data {path}:{i}: 'query' must be a non-empty string")
        try:
            QDG.from_json({"type": r.get("type"), "nodes": r.get("nodes")})
        except ValueError as exc:
            raise ConfigError(f"--data {path}:{i}: {exc}") from None
        if "origin" in r and not (isinstance(r["origin"], str) and r["origin"].strip()):
            raise ConfigError(f"--data {path}:{i}: 'origin' must be a non-empty string (the set the question "
                              "comes from, e.g. \"break:HOTPOT\"), or left out")
    return rows


def read_rewrite_eval(path: str | Path) -> list[dict[str, Any]]:
    """Read a "rewrite" eval file; ConfigError naming the line and field when malformed."""
    rows = read_jsonl(path, what="--data", allow_empty=True)
    if not rows:
        raise ConfigError(f"--data {path}: no records (expected the \"rewrite\" JSONL of searchsmith eval --help)")
    for i, r in enumerate(rows, 1):
        for key in ("query", "rewrite"):
            if not isinstance(r.get(key), str) or not r[key].strip():
                raise ConfigError(f"--data {path}:{i}: {key!r} must be a non-empty string")
        history = r.get("history", [])
        if not isinstance(history, list) or not all(
                isinstance(h, dict) and isinstance(h.get("content"), str) for h in history):
            raise ConfigError(f"--data {path}:{i}: 'history' must be a list of "
                              "{\"role\", \"content\"} objects")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Export the held-out split as eval files (decompose.jsonl, rewrite.jsonl), and
    passages.jsonl (every CAsT answer passage: ``searchsmith eval rewrite --corpus``).

    ``python -m searchsmith.training.decompose_data [--data-dir DIR] --out DIR``; the split
    matches the recipe's for the same ``--seed`` / ``--heldout-ratio`` (data.split_seed,
    data.heldout_ratio). ``--data-dir`` defaults to ``../shared/data`` found as the recipes find
    it: in the current folder, else beside the repository (:func:`resolve_data_dir`).
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--data-dir", default=SHARED_DATA, help=f"the real sets, in the {SHARED_DATA} layout "
                        "(default %(default)s, in the current folder, else beside the repository)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout-ratio", type=float, default=0.1)
    parser.add_argument("--split", choices=["heldout", "train"], default="heldout")
    parser.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES,
                        help="drop graphs with more nodes, as the recipe does (model.max_nodes)")
    args = parser.parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir, "--data-dir")
    examples: list[dict[str, Any]] = []
    for name in REAL_SOURCES:
        examples += load_real(name, data_dir)
    examples = [e for e in examples
                if e["task"] != "decompose" or len(e["graph"]["nodes"]) <= args.max_nodes]
    train, heldout = split_examples(examples, args.seed, args.heldout_ratio)
    counts = export_eval_sets(heldout if args.split == "heldout" else train, args.out)
    # every CAsT answer passage of both splits: the retrieval corpus of ``eval rewrite --corpus``
    # (passages are documents, not labels, so the training split's ones are fair distractors)
    passages = dict.fromkeys(e["passage"] for e in examples if e.get("passage"))
    if passages:
        counts["passages.jsonl"] = _write_jsonl_atomic(
            Path(args.out) / "passages.jsonl", ({"id": f"p{i}", "text": p} for i, p in enumerate(passages)))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":  # pragma: no cover
    from searchsmith.models.console import run_module_main

    raise SystemExit(run_module_main(main, "python -m searchsmith.training.decompose_data"))
