"""``searchsmith eval read``: a reader's short answers on a JSONL file of questions and passages.

Kept beside :mod:`searchsmith.training.evaluate` (which routes ``eval read`` here); the
recipe's held-out evaluation (``heldout_figures``) uses :func:`read_report` too, so both
report the keys of the recipe's ``metrics.json``.

File format, one object per line::

    {"id": str, "question": str, "answers": [str, ...], "source"?: str,
     "passages": [{"title": str, "text": str} | str, ...], "supporting"?: [passage indices]}

Write the reader recipe's held-out split in it with
``python -m searchsmith.training.evaluate_read write-eval OUT.jsonl [--recipe R.yaml]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.intervals import with_bootstrap
from searchsmith.models.jsonl import check_input_file, iter_jsonl
from searchsmith.models.reader import as_passage
from searchsmith.training.data import write_jsonl_atomic
from searchsmith.training.read_data import ReadItem

DEFAULT_RECIPE = "recipes/reader/minilm_full.yaml"


def read_items(path: str | Path) -> list[ReadItem]:
    """Read and validate a reader JSONL file (the format above).

    Raises:
        ConfigError: the file is missing.
        ValidationError: a malformed record (``file:line`` and the field), or no record.
    """
    p = check_input_file(path, "--data", "expected a reader JSONL file ({\"question\", \"answers\": [..], "
                         "\"passages\": [..]}); write one with python -m searchsmith.training.evaluate_read "
                         "write-eval OUT.jsonl")
    items = []
    for n, rec in iter_jsonl(p):
        where = f"{p}:{n}"
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValidationError(f"{where}: 'question' must be a non-empty string, got {q!r:.60}")
        answers = rec.get("answers")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValidationError(f"{where}: 'answers' must be a non-empty list of non-empty strings, got {answers!r:.60}")
        passages = rec.get("passages")
        if not isinstance(passages, list) or not passages:
            raise ValidationError(f"{where}: 'passages' must be a non-empty list of strings or "
                                  '{"title", "text"} objects')
        paras = [as_passage(x, f"{where} 'passages'[{i}]") for i, x in enumerate(passages)]
        support = rec.get("supporting") or []
        if not isinstance(support, list) or not all(isinstance(i, int) and 0 <= i < len(paras) for i in support):
            raise ValidationError(f"{where}: 'supporting' must list passage indices in 0..{len(paras) - 1}, "
                                  f"got {support!r:.60}")
        uid = str(rec.get("id", len(items)))
        items.append(ReadItem(uid, uid, str(rec.get("source") or "data"), q, paras, list(answers), list(support)))
    if not items:
        raise ValidationError(f"--data: {p} holds no records")
    return items


def item_json(it: ReadItem) -> dict[str, Any]:
    """An item in the file format."""
    return {"id": it.uid, "source": it.source, "question": it.question, "answers": it.answers,
            "passages": [{"title": t, "text": x} for t, x in it.paragraphs], "supporting": it.support}


def read_report(model: Any, items: Sequence[ReadItem], threshold: float, ood_sources: Sequence[str] = (),
                baseline_rows: Sequence[Mapping[str, Any]] = ()) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The recipe's held-out figures of ``model`` on ``items`` (``training.reader.score_items``;
    ``ood_sources``: the run's ``data.leave_out``, whose questions also give the ``ood/`` figures;
    ``baseline_rows``: the no-model answers per item (:func:`run_baseline_rows`), for the paired
    tests against the closest sentence and the extractive short answer, whose means are added as
    ``baselines/...``)."""
    from searchsmith.training.reader import score_items, sentence_baseline

    figs, rows = score_items(model, items, threshold, ood_sources, {r["id"]: r["f1"] for r in baseline_rows},
                             {r["id"]: r["short_f1"] for r in baseline_rows if "short_f1" in r})
    if baseline_rows:
        base = sentence_baseline(items, None, ood_sources, [dict(r) for r in baseline_rows])
        figs.update({f"baselines/{k}": v for k, v in base.items()})
    return figs, rows


def run_baseline_rows(run_dir: Path, mine_with: str, items: Sequence[ReadItem]) -> list[dict[str, Any]]:
    """The no-model answers per held-out item (``training.reader.sentence_rows``: the closest
    sentence and the extractive short answer, with their F1), as the reader recipe measured them (its
    ``mine_with`` bi-encoder, its embedding cache in ``run_dir/cache``); [] with ``mine_with: none``."""
    from searchsmith.training.data import CachedEmbedder
    from searchsmith.training.reader import sentence_rows

    if mine_with == "none":
        return []
    return sentence_rows(items, CachedEmbedder(mine_with, Path(run_dir) / "cache").encode)


def eval_read(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval read --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``.

    SQuAD exact match and token F1 (best over each question's answers) overall and per
    ``source``, the share of questions answered (score >= the model's ``min_score``) and the
    no-answer accuracy over each question's non-supporting passages (items with
    ``supporting``); bootstrap 95 % intervals; ``--per-item F`` one line per question.
    """
    from searchsmith.training.evaluate import load_eval_model

    limit = int(getattr(args, "limit", 0) or 0)
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {limit}")
    em = load_eval_model("read", args)
    items = read_items(args.data)
    if limit:
        items = items[:limit]
    metrics, rows = read_report(em.model, items, float(em.model.min_score))
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, rows)
    return with_bootstrap({"task": "read", "model": em.origin, **metrics}, rows)


def heldout_items(run_dir: Path) -> list[ReadItem]:
    """The held-out questions of a reader run (rebuilt from ``run.json`` and ``split.json``)."""
    from searchsmith.training.evaluate import _split_eval_ids, run_recipe_config
    from searchsmith.training.read_data import load_items

    cfg = run_recipe_config(run_dir)
    ids = _split_eval_ids(run_dir)
    if ids is None:
        raise ConfigError(f"{Path(run_dir) / 'split.json'} is missing (the reader recipe writes the split there)")
    return [it for it in load_items(cfg.data) if it.qid in ids and not it.hop]


def write_eval(out: str | Path, recipe: str | Path = DEFAULT_RECIPE, overrides: Sequence[str] = ()) -> int:
    """Write a recipe's held-out questions (its data, its split) to ``out``; returns how many."""
    from searchsmith.training.config import load_recipe_config
    from searchsmith.training.read_data import load_items, split_items

    cfg = load_recipe_config(recipe, list(overrides))
    items = load_items(cfg.data)
    _, eval_ids = split_items(items, cfg.data)
    rows = [item_json(it) for it in items if it.qid in eval_ids and not it.hop]
    write_jsonl_atomic(out, rows)
    return len(rows)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m searchsmith.training.evaluate_read")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-eval", help="write a reader recipe's held-out questions as eval read data")
    w.add_argument("out")
    w.add_argument("--recipe", default=DEFAULT_RECIPE)
    w.add_argument("overrides", nargs="*", default=[], help="recipe overrides key=value (e.g. data.hotpotqa=PATH)")
    args = parser.parse_args(argv)
    n = write_eval(args.out, args.recipe, args.overrides)
    print(f"wrote {n} held-out questions to {args.out}", file=sys.stderr)
    return 0


__all__ = ["eval_read", "heldout_items", "item_json", "read_items", "read_report", "run_baseline_rows",
           "write_eval"]

if __name__ == "__main__":  # pragma: no cover
    from searchsmith.models.console import run_module_main

    raise SystemExit(run_module_main(_main, "python -m searchsmith.training.evaluate_read"))
