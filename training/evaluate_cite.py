"""``searchsmith eval cite``: a citation model's attribution and entity figures on a JSONL file.

Kept beside :mod:`searchsmith.training.evaluate` (which routes ``eval cite`` here) rather than
in it, to keep that file readable; the recipe's held-out evaluation (``heldout_figures``) uses
:func:`cite_report` too, so both report the same keys as the recipe's ``metrics.json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.citation import LABELS
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.intervals import SLOW_RESAMPLES, Pooled, prf, with_bootstrap
from searchsmith.models.jsonl import check_input_file, iter_jsonl
from searchsmith.models.metrics import (
    attribution_metrics,
    balanced_accuracy,
    binary_prf,
    roc_auc,
    set_prf,
    span_prf,
    top1_per_group,
)
from searchsmith.training.data import write_jsonl_atomic


def read_cite_items(path: str | Path, labels: Sequence[str] = LABELS) -> list[dict[str, Any]]:
    """Read and validate a citation JSONL file (the "cite" format of ``searchsmith eval --help``).

    Raises:
        ConfigError: the file is missing.
        ValidationError: a malformed record (``file:line``), unknown cited ids, entity spans
            out of the sentence or with a type the model does not know, or no record.
    """
    types = sorted({lab.split("-", 1)[1] for lab in labels if lab != "O"})
    p = check_input_file(path, "--data", 'expected a citation JSONL file ({"sentence", "documents": '
                         '[{"id","text"}], "cited": [ids]}); write one with python -m '
                         "searchsmith.training.cite_data --write-eval OUT.jsonl")
    items = []
    for n, rec in iter_jsonl(p):
        where = f"{p}:{n}"
        sent = rec.get("sentence")
        if not isinstance(sent, str) or not sent.strip():
            raise ValidationError(f"{where}: 'sentence' must be a non-empty string, got {sent!r}")
        docs = rec.get("documents")
        if not isinstance(docs, list) or not docs:
            raise ValidationError(f"{where}: 'documents' must be a non-empty list of "
                                  '{"id", "text"} objects')
        ids = []
        for d in docs:
            if not isinstance(d, dict) or "id" not in d or not isinstance(d.get("text"), str):
                raise ValidationError(f"{where}: each document needs 'id' and a string 'text', "
                                      f"got {str(d)[:80]}")
            ids.append(str(d["id"]))
        if len(set(ids)) != len(ids):
            raise ValidationError(f"{where}: document ids repeat: {ids}")
        cited = rec.get("cited")
        if not isinstance(cited, list):
            raise ValidationError(f"{where}: 'cited' must be a list of document ids, got {cited!r}")
        unknown = [c for c in cited if str(c) not in ids]
        if unknown:
            raise ValidationError(f"{where}: 'cited' names {unknown} that are not among the "
                                  f"documents' ids {ids}")
        ents = rec.get("entities")
        if ents is not None:
            if not isinstance(ents, list):
                raise ValidationError(f"{where}: 'entities' must be a list of [start, end, label]")
            for e in ents:
                if (not isinstance(e, list) or len(e) != 3 or not all(isinstance(x, int)
                                                                      for x in e[:2])):
                    raise ValidationError(f"{where}: entity {e!r} is not [start, end, label] "
                                          "with integer character offsets")
                if not 0 <= e[0] < e[1] <= len(sent):
                    raise ValidationError(f"{where}: entity span {e!r} is out of range; expected "
                                          f"0 <= start < end <= {len(sent)} (the sentence length)")
                if e[2] not in types:
                    raise ValidationError(f"{where}: entity label {e[2]!r} is out of range; the "
                                          f"model tags {types}")
        items.append({"id": rec.get("id", len(items)), "sentence": sent, "documents": docs, "ids": ids,
                      "source": rec.get("source"),
                      "cited": {str(c) for c in cited},
                      "entities": None if ents is None else [tuple(e) for e in ents]})
    if not items:
        raise ValidationError(f"{p}: no records (empty file); expected citation JSON lines")
    return items


def cite_pairs(items: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (sentence, document text) pairs of :func:`read_cite_items` items, in order."""
    return [(it["sentence"], d["text"]) for it in items for d in it["documents"]]


def residual_cosines(model: Any, items: Sequence[dict[str, Any]]) -> list[float] | None:
    """For a model whose scorer corrects the bi-encoder cosine (``cosine_residual``), the cosine
    of each pair of :func:`cite_pairs` by the embedder it names (as the recipe computed it);
    None for any other model."""
    residual = getattr(model, "cosine_residual", None)
    if residual is None:
        return None
    from searchsmith.training.citation import best_sentence_cosines

    return best_sentence_cosines(residual.embedder, cite_pairs(items), None)


def ood_attribution(labels: Sequence[int], probs: Sequence[float], sources: Sequence[str | None],
                    ood_sources: Sequence[str], threshold: float) -> dict[str, float]:
    """``ood/attribution/{roc_auc,f1,balanced_accuracy}`` over the pairs whose source is one of
    ``ood_sources`` (left out of training); {} when there is none."""
    idx = [j for j, s in enumerate(sources) if s in set(ood_sources)]
    if not idx:
        return {}
    per = attribution_metrics([labels[j] for j in idx], [float(probs[j]) for j in idx], threshold)
    return {f"ood/attribution/{k}": per[k] for k in ("roc_auc", "f1", "balanced_accuracy") if per.get(k) is not None}


#: the paired tests of the citation scorer against cosine attribution (the pipeline's fallback),
#: claim by claim (a bootstrap over claims; ``<key>_diff``, ``_lo``, ``_hi``, ``_p``, ``_n``,
#: ``_direction``, and ``ood/<key>_*`` over the left-out sources' pairs): the cite gate needs
#: each ``_direction`` +1 (serving/pipeline/gates.py)
AUC_VS_COSINE = "attribution/roc_auc_vs_cosine"
F1_VS_COSINE = "attribution/f1_vs_cosine"


def vs_cosine(labels: Sequence[int], probs: Sequence[float], cosines: Sequence[float], claims: Sequence[Any],
              threshold: float, cosine_threshold: float, sources: Sequence[str | None] = (),
              ood_sources: Sequence[str] = ()) -> dict[str, float]:
    """The scorer's ROC AUC and F1 (at ``threshold``) against cosine attribution's (at
    ``cosine_threshold``) on the same pairs, resampling claims (``claims``: each pair's claim
    key; a claim's pairs go together): :data:`AUC_VS_COSINE` and :data:`F1_VS_COSINE` figures
    (:func:`searchsmith.models.stats.clustered_figures`), pooled and, where ``sources`` name
    left-out ones, ``ood/`` over their pairs alone."""
    from searchsmith.models.stats import clustered_figures

    y = np.asarray(labels, dtype=np.int64)
    p, c = np.asarray(probs, dtype=np.float64), np.asarray(cosines, dtype=np.float64)
    if not (len(y) == len(p) == len(c) == len(claims)):
        raise ValueError(f"vs_cosine: {len(y)} labels, {len(p)} scores, {len(c)} cosines, {len(claims)} claims")
    pred, base = (p >= threshold).astype(np.int64), (c >= cosine_threshold).astype(np.int64)

    def f1(yy: np.ndarray, pp: np.ndarray) -> float:
        denom = int(pp.sum() + yy.sum())
        return 2.0 * int((yy & pp).sum()) / denom if denom else 0.0

    def auc_diff(idx: np.ndarray) -> float | None:
        a, b = roc_auc(y[idx], p[idx]), roc_auc(y[idx], c[idx])
        return None if a is None or b is None else a - b

    def f1_diff(idx: np.ndarray) -> float:
        return f1(y[idx], pred[idx]) - f1(y[idx], base[idx])

    def tests(prefix: str, keep: Sequence[bool]) -> dict[str, float]:
        groups: dict[Any, list[int]] = {}
        for j, (claim, k) in enumerate(zip(claims, keep, strict=True)):
            if k:
                groups.setdefault(claim, []).append(j)
        clusters = list(groups.values())
        return {**clustered_figures(prefix + AUC_VS_COSINE, clusters, auc_diff, resamples=SLOW_RESAMPLES),
                **clustered_figures(prefix + F1_VS_COSINE, clusters, f1_diff, resamples=SLOW_RESAMPLES)}

    out = tests("", [True] * len(y))
    left_out = set(ood_sources)
    if left_out and any(s in left_out for s in sources):
        out.update(tests("ood/", [s in left_out for s in sources]))
    return out


def cite_report(model: Any, items: Sequence[dict[str, Any]], threshold: float,
                cosine: Sequence[float] | None = None,
                ood_sources: Sequence[str] = (),
                attribution_cosine: tuple[Sequence[float], float] | None = None
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Attribution and entity figures of ``model`` (a citation bundle or ``CitationModel``: their
    ``attribute`` and ``entities``) on items of :func:`read_cite_items`.

    Args:
        cosine: the bi-encoder cosine of each pair of :func:`cite_pairs`, for a model whose
            scorer has a ``cosine_residual``.
        ood_sources: the sources left out of training (``data.leave_out``); the pairs of
            their items together are also scored as ``ood/attribution/<k>`` (ROC AUC, F1,
            balanced accuracy), the figures the pipeline's gate then reads.
        attribution_cosine: cosine attribution's score of each pair and its threshold (the
            pipeline's fallback): adds the paired tests against it, item by item (:func:`vs_cosine`).

    Returns:
        ``(metrics, rows)``: the keys of the recipe's ``metrics.json`` (``attribution/f1``,
        ``attribution/balanced_accuracy``, ``attribution/top1_f1`` (each item's best document
        predicted), ``attribution/<source>/roc_auc`` for items that name a source,
        ``entity/f1``, ...) and one row per item (its scores, predictions and entities).
    """
    pairs, y, src = cite_pairs(items), [], []
    for it in items:
        y.extend(int(i in it["cited"]) for i in it["ids"])
        src.extend(it.get("source") for _ in it["ids"])
    extra = {} if cosine is None else {"cosine": list(cosine)}
    probs = np.asarray(model.attribute(pairs, **extra), dtype=np.float32)
    out: dict[str, Any] = {"items": len(items), "pairs": len(pairs), "positive_pairs": sum(y),
                           "support_threshold": threshold}
    out.update({f"attribution/{k}": v for k, v in attribution_metrics(y, probs.tolist(), threshold).items()})
    top1 = top1_per_group([len(it["ids"]) for it in items], probs.tolist())
    out.update({f"attribution/top1_{m}": v for m, v in binary_prf(y, top1).items()})
    for name in sorted({s for s in src if s}):
        idx = [j for j, s in enumerate(src) if s == name]
        auc = roc_auc([y[j] for j in idx], [float(probs[j]) for j in idx])
        if auc is not None:
            out[f"attribution/{name}/roc_auc"] = auc
    out.update(ood_attribution(y, probs.tolist(), src, ood_sources, threshold))
    if attribution_cosine is not None:
        claims = [it.get("id", n) for n, it in enumerate(items) for _ in it["ids"]]  # a claim's sentences together
        out.update(vs_cosine(y, probs.tolist(), attribution_cosine[0], claims, threshold, attribution_cosine[1],
                             src, ood_sources))
    with_ents = [i for i, it in enumerate(items) if it["entities"] is not None]
    pred_ents: dict[int, list[tuple[int, int, str]]] = {}
    if with_ents:
        got = model.entities([items[i]["sentence"] for i in with_ents])
        pred_ents = {i: [tuple(s) for s in g] for i, g in zip(with_ents, got, strict=True)}
        ent = span_prf([items[i]["entities"] for i in with_ents], [pred_ents[i] for i in with_ents])
        out.update({f"entity/{k}": v for k, v in ent.items()})
        out["entity_items"] = len(with_ents)
    rows, k = [], 0
    for n, it in enumerate(items):
        scores = {i: float(probs[k + j]) for j, i in enumerate(it["ids"])}
        k += len(it["ids"])
        predicted = [i for i, s in scores.items() if s >= threshold]
        row = {"id": it.get("id", n), "sentence": it["sentence"], "scores": scores, "predicted": predicted,
               "cited": sorted(it["cited"]),
               **{f"attribution/{m}": v for m, v in set_prf(predicted, it["cited"]).items()}}
        if n in pred_ents:
            row["entities"] = [list(s) for s in pred_ents[n]]
            row.update({f"entity/{m}": v for m, v in span_prf([it["entities"]], [pred_ents[n]]).items()})
        rows.append(row)
    return out, rows


def _pooled(items: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], threshold: float) -> dict[str, Pooled]:
    """The statistics of :func:`cite_report`'s pooled figures on a resample of item indices:
    attribution P/R/F1, balanced accuracy (at ``threshold``) and ROC AUC over the pairs, top-1
    P/R/F1 over the items, entity P/R/F1 over the spans."""
    counts = np.asarray([[len(set(r["predicted"]) & it["cited"]), len(r["predicted"]), len(it["cited"])]
                         for it, r in zip(items, rows, strict=True)], dtype=np.float64)  # (items, 3)
    out = prf(counts[:, 0], counts[:, 1], counts[:, 2], "attribution/")
    ents = np.zeros((len(items), 3))
    for n, (it, r) in enumerate(zip(items, rows, strict=True)):
        if "entities" in r:
            gold, pred = {tuple(e) for e in it["entities"]}, {tuple(e) for e in r["entities"]}
            ents[n] = (len(gold & pred), len(pred), len(gold))
    out.update(prf(ents[:, 0], ents[:, 1], ents[:, 2], "entity/"))
    pairs = [[(int(i in it["cited"]), r["scores"][i], it.get("source")) for i in it["ids"]]
             for it, r in zip(items, rows, strict=True)]

    def auc(source: str | None) -> Pooled:
        def stat(idx: np.ndarray) -> float | None:
            picked = [p for n in idx.astype(np.int64) for p in pairs[n] if source is None or p[2] == source]
            return roc_auc([y for y, _, _ in picked], [s for _, s, _ in picked])
        return stat

    # each item's best document predicted (the first on ties, as top1_per_group)
    top = [max(it["ids"], key=lambda i, r=r: (r["scores"][i], -it["ids"].index(i))) for it, r in zip(items, rows, strict=True)]
    tops = np.asarray([[int(t in it["cited"]), 1, len(it["cited"])] for t, it in zip(top, items, strict=True)],
                      dtype=np.float64)
    out.update(prf(tops[:, 0], tops[:, 1], tops[:, 2], "attribution/top1_"))

    def balanced(idx: np.ndarray) -> float | None:
        picked = [p for n in idx.astype(np.int64) for p in pairs[n]]
        return balanced_accuracy([y for y, _, _ in picked], [int(sc >= threshold) for _, sc, _ in picked])

    out["attribution/balanced_accuracy"] = balanced
    out["attribution/roc_auc"] = auc(None)
    for name in sorted({it.get("source") for it in items if it.get("source")}):
        out[f"attribution/{name}/roc_auc"] = auc(name)
    return out


def eval_cite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval cite --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``.

    Scores every (sentence, document) pair of the file; a pair is positive when the document
    is in ``cited``. Reports attribution precision / recall / F1 at the model's
    ``support_threshold`` and ROC AUC (null when one class is absent), and entity
    precision / recall / F1 of exact (start, end, type) spans over the items with
    ``entities``; balanced accuracy at the threshold, and P/R/F1 when each item cites its best
    document only (``attribution/top1_*``: on WiCE's sentence-level file, the cosine top-1
    baseline's form). A scorer with a ``cosine_residual`` is given each pair's cosine by the
    embedder it names. Every figure is pooled over the pairs or spans; its bootstrap 95 % interval
    (``<name>_ci95``, 1,000 resamples of the items) recomputes it on each resample.
    ``--per-item F`` writes one JSON line per item, identified by ``id`` (the record's, else its
    position in the file), with the item's own attribution and entity P/R/F1 under the
    summary's names; ``--limit N`` the first N.
    """
    from searchsmith.training.evaluate import Chunked, load_eval_model, progress_bar

    limit = int(getattr(args, "limit", 0) or 0)
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {limit}")
    em = load_eval_model("cite", args)
    items = read_cite_items(args.data, list(em.model.labels))
    if limit:
        items = items[:limit]
    residual = getattr(em.model, "cosine_residual", None)
    cosine = residual_cosines(em.model, items)
    total = sum(len(it["ids"]) for it in items) + sum(it["entities"] is not None for it in items)
    with progress_bar("eval cite", total, "input") as bar:
        metrics, rows = cite_report(Chunked(em.model, bar), items, float(em.model.support_threshold), cosine)
    if residual is not None:
        metrics["cosine_residual"] = residual.to_json()
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, rows)
    return with_bootstrap({"task": "cite", "model": em.origin, **metrics}, rows, pooled=_pooled(items, rows, float(em.model.support_threshold)),
                          resamples=SLOW_RESAMPLES)


__all__ = ["AUC_VS_COSINE", "F1_VS_COSINE", "cite_pairs", "cite_report", "eval_cite", "ood_attribution",
           "read_cite_items", "residual_cosines", "vs_cosine"]
