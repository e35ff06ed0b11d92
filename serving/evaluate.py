"""``searchsmith eval route`` (and the other serving-side evaluations).

Routing data, JSONL: ``{"history": [{"role","content"}], "query", "sources": [gold names]}``.
For each mode (parallel, serial, auto) it reports, over all items and separately over
follow-ups (non-empty history) and single turns:

* ``recall@1``: the top source is gold;
* ``recall@K``: share of the gold sources found in the top K;
* ``mrr``: 1 / rank of the first gold source (0 when none in the top K).

Each figure comes with its bootstrap 95 % interval (``<name>_ci95``; resamples and seed under
``"bootstrap"``). ``--per-item F`` writes one line per (item, mode), identified by ``i`` (the
item's position in the data) and ``mode``, with the metrics under the summary's names.

Latency is compared fairly: an untimed warm-up pass first, then each item is routed in every
mode in turn, the modes in a rotating order (:func:`rotation`), so that cold start and the
machine's drift fall on every mode alike. The quality figures do not depend on the order.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from searchsmith.models.errors import ValidationError
from searchsmith.models.intervals import attach_intervals, bootstrap_info
from searchsmith.models.io import write_jsonl_atomic
from searchsmith.models.jsonl import iter_jsonl, read_jsonl
from searchsmith.models.metrics import mrr_at_k, percentiles, recall_at_k, set_prf
from searchsmith.models.tasks import TASKS
from searchsmith.models.text import answer_tokens, token_f1
from searchsmith.serving.profiling.timing import rotation

if TYPE_CHECKING:
    from searchsmith.models.roles import Embedder
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

MODES = ("parallel", "serial", "auto")
log = logging.getLogger(__name__)


# -- timing variants fairly ---------------------------------------------------------------------
# Variants that do the same work must time the same. Run one after another, the first paid every
# lazy load and first call (eval pipeline --limit 2: routed 2636 ms vs forced_direct 1398 ms with
# the router choosing direct for both questions), and a later one the machine's drift. So every
# comparison here first runs an untimed warm-up pass, then asks each item under every variant in
# turn, starting one variant further on for each item (rotation: the profile suites' order too).


def warm_up_items(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The items a warm-up pass asks: the first, and the first follow-up (a non-empty
    ``history``: the rewrite's path) when that is another one."""
    first_followup = next((it for it in items if it.get("history")), None)
    return [*items[:1], *([first_followup] if first_followup is not None and first_followup is not items[0] else [])]


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v)


# field -> (check, what it must be); optional fields are checked when present
ROUTE_FIELDS = {"query": (_text, "a non-empty string"), "sources": (lambda v: _texts(v) and bool(v),
                                                                    "a non-empty list of source names"),
                "history": (lambda v: isinstance(v, list), "a list of {\"role\", \"content\"} turns")}
PIPELINE_FIELDS = {"query": (_text, "a non-empty string"),
                   "answer": (lambda v: v is None or (isinstance(v, (str, int, float)) and not isinstance(v, bool)),
                              "a string (the gold answer), or null when the sources hold none"),
                   "supporting": (_texts, "a list of corpus document ids"),
                   "history": (lambda v: isinstance(v, list), "a list of {\"role\", \"content\"} turns")}


def read_checked(path: str | Path, fields: dict[str, tuple[Callable[[Any], bool], str]], required: Sequence[str],
                 what: str) -> list[dict[str, Any]]:
    """The records of a JSONL file with ``required`` fields, each present field of ``fields``
    checked for its type; every bad field is reported at once as ``file:line: 'field' must be ...``.

    Raises:
        ConfigError / ValidationError: as :func:`~searchsmith.models.jsonl.read_jsonl`, and for a
            field of the wrong type.
    """
    def problems(rec: dict[str, Any]) -> list[str]:
        return [f"{name!r} must be {want}, got {rec[name]!r:.60}" for name, (ok, want) in fields.items()
                if name in rec and not ok(rec[name])]

    return read_jsonl(path, required, what, check=problems)


def route_metrics(ranked: list[str], gold: list[str], k: int) -> dict[str, float]:
    """recall@1, recall@k and reciprocal rank of one routed query."""
    gold_set = set(gold)
    labels = [1.0 if s in gold_set else 0.0 for s in ranked]
    return {"recall@1": float(mrr_at_k(labels, 1) > 0),  # the top source is gold
            f"recall@{k}": recall_at_k(labels, k, n_relevant=len(gold_set)),
            "mrr": mrr_at_k(labels, k)}


def _mean(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Mean of each per-item metric, with its bootstrap 95 % interval, and ``n``."""

    if not rows:
        return {}
    out = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in rows[0]}
    return {**attach_intervals(out, rows), "n": len(rows)}


class _ModelRewriter:
    """A decomposer (bundle or torch) as the router's rewriter: ``rewrite(turns, query)``."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def rewrite(self, history: Any, query: str) -> str:
        turns = [{"role": t.role, "content": t.content} for t in history]
        out = self.model.rewrite(turns, query)
        return out.strip() if isinstance(out, str) and out.strip() else query


def _router_for_eval(args: argparse.Namespace) -> tuple[Any, str]:
    """The index's router; with --bundle / --checkpoint, an embedder (query vectors) or a
    decomposer (follow-up rewrites) of that model instead of the index's own."""
    import numpy as np
    from searchsmith.serving.cli import load_router
    from searchsmith.training.evaluate import load_eval_model

    em = load_eval_model("route", args, required=False)
    router = load_router(args.index, args.config)
    if em is None:
        return router, "index embedder, heuristic rewrite"
    if em.task == "decompose":
        router.rewriter = _ModelRewriter(em.model)
        return router, f"index embedder, rewrites by {em.origin}"
    dim = int(router.centroids.shape[1])
    got = int(np.asarray(em.model.encode(["dimension probe"])).shape[1])
    if got != dim:
        raise ValidationError(f"eval route: {em.origin} embeds into {got} dimensions, the index {args.index} into "
                              f"{dim}; use the embedder the index was built with (its bundle or folder)")
    router.embedder = em.model
    return router, f"queries embedded by {em.origin}"


def eval_route(args: argparse.Namespace) -> dict[str, Any]:
    """Routing recall@1 / recall@K / MRR per mode, on all items, follow-ups and single turns, and
    each mode's latency until the sources are known (``latency_ms``: p50 / p95 per mode; the
    rewrite's time counts in serial mode, where routing waits for it).

    ``args.bundle`` / ``args.checkpoint`` (optional): an ``embed`` model embeds the queries
    (the index's centroids stay), a ``decompose`` model rewrites the follow-ups.
    """
    from searchsmith.training.evaluate import progress_bar

    if not args.index:
        raise ValidationError("eval route needs --index DIR (built with 'searchsmith index')")
    items = read_checked(args.data, ROUTE_FIELDS, ("query", "sources"), "routing data")
    if args.limit:
        items = items[: args.limit]
    router, model = _router_for_eval(args)
    unknown = sorted({s for it in items for s in it["sources"]} - set(router.sources))
    if unknown:
        raise ValidationError(f"routing data {args.data}: gold source(s) {unknown} are not in the index "
                              f"(index sources: {router.sources})")
    k = max(1, min(args.k, len(router.sources)))
    per_item: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"task": "route", "data": str(args.data), "index": str(args.index),
                               "model": model, "k": k, "n": len(items),
                               "followups": sum(1 for it in items if it.get("history")), "modes": {},
                               "latency_ms": {}}
    # One untimed pass first (the first item and the first follow-up, in every mode): loading and
    # first-call costs would otherwise be charged to whichever mode ran first.
    for it in warm_up_items(items):
        for mode in MODES:
            router.route(it["query"], it.get("history"), mode=mode, top_k=k)
    rows = {mode: {"all": [], "followups": [], "single": []} for mode in MODES}
    decision: dict[str, list[float]] = {mode: [] for mode in MODES}
    lines: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with progress_bar("eval route", len(MODES) * len(items), "query") as bar:
        for i, it in enumerate(items):
            for mode in rotation(i, MODES):  # item by item: load drift falls on every mode alike
                res = router.route(it["query"], it.get("history"), mode=mode, top_k=k)
                m = route_metrics(res.names, list(it["sources"]), k)
                rows[mode]["all"].append(m)
                rows[mode]["followups" if it.get("history") else "single"].append(m)
                # until the sources are known: parallel routes while the rewrite runs, serial after it
                decision[mode].append(res.latency_ms["route"] + res.latency_ms.get("rewrite", 0.0))
                lines[mode].append({"i": i, "mode": mode, "query": it["query"], "gold": it["sources"],
                                    "followup": bool(it.get("history")), "ranked": res.names,
                                    "routed_text": res.routed_text, "latency_ms": round(decision[mode][-1], 3), **m})
                bar.update(1)
    for mode in MODES:  # per mode, in item order, as the summary reads them
        summary["modes"][mode] = {part: _mean(r) for part, r in rows[mode].items() if r}
        summary["latency_ms"][mode] = {q: round(v, 3) for q, v in
                                       percentiles([x / 1e3 for x in decision[mode]]).items() if q.endswith("_ms")}
        per_item += lines[mode]
    if args.per_item:
        write_jsonl_atomic(args.per_item, per_item)
    return {**summary, "bootstrap": bootstrap_info()}


# -- pipeline --------------------------------------------------------------------------------
# The ruler of ``redundancy``: the papers' near-duplicate cosine (Xinyu et al.), fixed here so that
# a sweep of retrieval.dedup_threshold does not move its own yardstick.
REDUNDANT_COSINE = 0.8


def pipeline_items(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``--data`` pipeline items (``{id?, query, history?, answer, supporting}``), the first
    ``--limit`` of them when it is set; every answer-level evaluation reads them so.

    Raises:
        ConfigError / ValidationError: as :func:`read_checked`, and two items with one ``id``
            (``eval compare`` pairs the ``--per-item`` lines by it), naming both lines.
    """
    items = read_checked(args.data, PIPELINE_FIELDS, ("query", "answer", "supporting"), "pipeline data")
    _check_unique_ids(items, Path(args.data))
    limit = getattr(args, "limit", 0)
    return items[:limit] if limit else items


def _check_unique_ids(items: list[dict[str, Any]], path: Path) -> None:
    first: dict[str, int] = {}  # the id as JSON (1 and "1" differ, as they do when pairing) -> item index
    for i, it in enumerate(items):
        if "id" not in it:
            continue
        key = json.dumps(it["id"], sort_keys=True)
        if key in first:
            lines = [n for n, _ in iter_jsonl(path)]  # item index -> line (blank lines skipped); error path only
            raise ValidationError(f"pipeline data {path}:{lines[first[key]]} and {path}:{lines[i]}: both have id "
                                  f"{it['id']!r}; give each question its own id (eval compare pairs the --per-item "
                                  "lines by id)")
        first[key] = i


def missing_supporting(items: Sequence[Mapping[str, object]], doc_ids: Collection[str]) -> tuple[int, list[str]]:
    """(how many distinct gold ``supporting`` documents the items name, those of them not in
    ``doc_ids``, sorted): what :func:`check_supporting` (an index) and ``eval sweep`` of an
    ``index.*`` key (a corpus) judge."""
    gold = {str(d) for it in items for d in it.get("supporting") or () if isinstance(it.get("supporting"), list)}
    return len(gold), sorted(gold - set(doc_ids))


def check_supporting(items: Sequence[Mapping[str, object]], doc_ids: Collection[str], data: str | Path,
                     index: str | Path) -> list[str]:
    """The items' gold ``supporting`` documents against the index's documents, as ``eval sweep``
    checks them against its corpus: none there is the wrong index (refused); some missing is a
    warning (logged and returned), since their questions score 0 on them whatever the pipeline does.

    Raises:
        ValidationError: the index holds none of the supporting documents.
    """
    gold, missing = missing_supporting(items, doc_ids)
    if gold and len(missing) == gold:
        raise ValidationError(f"pipeline data {data}: none of the questions' {gold} supporting documents are in "
                              f"the index {index} (e.g. {missing[:3]}); evaluate on the index of the corpus the data "
                              "was written for (make-pipeline-set writes both: searchsmith index DIR/corpus.jsonl)")
    if not missing:
        return []
    warning = (f"the index {index} lacks {len(missing)} of the {gold} supporting documents of the questions "
               f"(e.g. {missing[:3]}): those questions score 0 on them whatever the pipeline does")
    log.warning("eval: %s", warning)
    return [warning]


def checked_pipeline(cfg: PipelineConfig, args: argparse.Namespace, items: Sequence[Mapping[str, object]],
                     embedder: Embedder | None = None) -> tuple[Pipeline, list[str]]:
    """``load_pipeline(cfg, args.index)`` and :func:`check_supporting`'s warnings; the pipeline
    is closed when the check refuses."""
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    pipe = load_pipeline(cfg, args.index, embedder=embedder)
    try:
        return pipe, check_supporting(items, pipe.index.store.doc_ids(), args.data, args.index or cfg.index)
    except BaseException:
        pipe.close()
        raise


def sibling_pipeline(cfg: PipelineConfig, base: Pipeline, index_dir: str | None) -> Pipeline:
    """A pipeline of ``cfg`` beside the open ``base``, for a comparison that keeps both open
    (every question asked under each in turn).

    ``load_pipeline`` reads only ``index`` and ``bundles`` from a config; when ``cfg`` has the
    same ones as ``base``'s, the new pipeline shares ``base``'s index, embedder and loaded
    bundles (one copy in memory however many pipelines are open, and the same answers as a
    pipeline loaded alone). Otherwise it is loaded alone from ``index_dir``. Close it before
    ``base``: closing either closes a shared index.
    """
    from searchsmith.serving.pipeline.pipeline import Pipeline, load_pipeline

    if cfg.bundles == base.config.bundles and cfg.index == base.config.index:
        return Pipeline(cfg, base.index, base.embedder, base.bundles)
    return load_pipeline(cfg, index_dir)


def pipeline_item_metrics(ans: dict[str, Any], item: dict[str, Any],
                          passages: PassageLookup | None = None) -> dict[str, float]:
    """Metrics of one answer against ``{"answer", "supporting", "events"?, "images"?}``.

    * ``support_recall``: share of the gold supporting documents among those the answer
      used (its cited documents; every passage given to the generator when it cites none);
    * ``retrieval_recall``: share of the gold supporting documents among all passages;
    * ``f1`` / ``contains``: token F1 of the answer (the reader's short answer when there is
      one, else the plain answer text), and whether the plain answer text contains the gold
      answer's normalised tokens in order; ``text_f1``: token F1 of the plain answer text
      (short answer and support together);
    * ``citation_precision`` / ``citation_recall``: cited documents vs ``supporting``
      (precision of an answer with no citation is 0 when it has sentences);
    * ``passages``, ``timeline_events``, ``images_placed``: how many the answer was given,
      lists and places (no gold needed);
    * with ``events`` gold: :func:`timeline_metrics`; with ``images`` gold: :func:`image_metrics`;
    * with a :class:`PassageLookup`: ``context_tokens`` and ``redundancy`` of the passages given.

    A metric whose gold the item lacks is absent from its dict (summaries average each metric
    over the items that have it). ``answered``: whether the pipeline gave an answer (not the
    no-answer text) to a question the sources answer. An item whose ``answer`` is null asks what
    the sources do not hold: its ``no_answer`` is 1 when the pipeline said so, and so are its
    ``f1``, ``text_f1`` and ``contains`` (SQuAD 2.0's rule: no answer is the right answer), 0 for
    any answer; it has no support or citation figures (nothing supports an answer to it).
    """
    found = ans.get("answer_found", True)
    if item["answer"] is None:
        right = float(not found)
        return {"no_answer": right, "f1": right, "text_f1": right, "contains": right,
                "passages": float(len(ans["passages"])), **_cost_metrics(ans, passages)}
    gold = item["supporting"]
    cited = {r["doc_id"] for r in ans["references"]}
    given = {p["doc_id"] for p in ans["passages"]}
    used = cited or given
    citations = set_prf(cited, gold)
    plain = " ".join(answer_tokens(ans["answer_text"], generated=True))
    gold_words = " ".join(answer_tokens(str(item["answer"]), generated=True))
    events = timeline_events(ans)
    out = {
        "answered": float(found),
        "support_recall": set_prf(used, gold)["recall"],
        "retrieval_recall": set_prf(given, gold)["recall"],
        "f1": token_f1(ans.get("short_answer") or ans["answer_text"], str(item["answer"]), generated=True),
        "text_f1": token_f1(ans["answer_text"], str(item["answer"]), generated=True),
        "contains": float(bool(gold_words) and f" {gold_words} " in f" {plain} "),
        "citation_precision": citations["precision"],
        "citation_recall": citations["recall"],
        "passages": float(len(ans["passages"])),
        "timeline_events": float(len(events)),
        "images_placed": float(len(ans["images"])),
    }
    if item.get("events") is not None:
        out.update(timeline_metrics(events, item["events"]))
    if item.get("images") is not None:
        out.update(image_metrics([im["image_id"] for im in ans["images"]], item["images"]))
    return {**out, **_cost_metrics(ans, passages)}


def _cost_metrics(ans: dict[str, Any], passages: PassageLookup | None) -> dict[str, float]:
    """What an answer cost: ``context_tokens`` and ``redundancy`` of its passages (with a
    :class:`PassageLookup`), ``model_calls``, ``tokens`` and ``latency_ms``."""
    return {**(passages.metrics(ans) if passages is not None else {}),
            "model_calls": float(ans["trace"]["model_calls"]),
            "tokens": float(ans["trace"]["tokens_in"] + ans["trace"]["tokens_out"]),
            "latency_ms": float(ans["trace"]["total_ms"])}


def timeline_events(ans: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's timeline as one list of events (``{date, precision, text, sources}``)."""
    return [e for group in ans.get("timeline") or [] for e in group["events"]]


def _same_day(a: str, b: str) -> bool:
    """Compatible ISO dates: one is a prefix of the other (``2024-03`` and ``2024-03-12``)."""
    return a.startswith(b) or b.startswith(a)


def _listed_figures(prefix: str, matched: int, listed: int, gold: int) -> dict[str, float]:
    """F1 of what an answer lists (events, images) against the gold: ``<prefix>f1`` (1.0 when
    nothing is listed and nothing belongs), ``<prefix>precision`` when anything is listed,
    ``<prefix>recall`` when anything belongs (an undefined one is left out, not 0)."""
    out = {f"{prefix}f1": 2 * matched / (listed + gold) if listed or gold else 1.0}
    if listed:
        out[f"{prefix}precision"] = matched / listed
    if gold:
        out[f"{prefix}recall"] = matched / gold
    return out


def timeline_metrics(events: list[dict[str, Any]], gold: list[dict[str, Any]]) -> dict[str, float]:
    """Events listed against the gold dated events ``[{"date", "sources": [doc ids]}]``.

    An event matches a gold event when their dates are compatible and it cites one of the
    documents that report it; each gold event is matched once, in timeline order, and a later
    event that matches an already matched one is a duplicate (what the merge should have joined).

    Returns:
        ``timeline_duplicates`` (count), ``timeline_recall`` (gold events found), ``timeline_f1``
        (2 matched / (events + gold)), and ``timeline_precision`` (matched / events) when the
        answer lists any event.
    """
    matched: set[int] = set()
    duplicates = 0
    for e in events:
        hits = [j for j, g in enumerate(gold)
                if _same_day(str(e["date"]), str(g["date"])) and set(e["sources"]) & set(g["sources"])]
        free = [j for j in hits if j not in matched]
        if free:
            matched.add(free[0])
        elif hits:
            duplicates += 1
    return {"timeline_duplicates": float(duplicates),
            **_listed_figures("timeline_", len(matched), len(events), len(gold))}


def image_metrics(placed: list[str], gold: list[str]) -> dict[str, float]:
    """Images placed next to the answer against the ids that belong there (``[]``: none does).

    Returns:
        ``image_wrong`` (placed images that do not belong, a count), ``image_f1`` (1.0 when
        none belongs and none is placed), ``image_precision`` when any is placed and
        ``image_recall`` when any belongs.
    """
    got, want = set(placed), set(gold)
    return {"image_wrong": float(len(got - want)), **_listed_figures("image_", len(got & want), len(got), len(want))}


class PassageLookup:
    """Text and vector of each chunk an answer was given, read back from the pipeline's index.

    The answer names its passages (``chunk_id``) without their text; ``context_tokens`` (the
    whitespace tokens given to the generator, the keep ratio's cost) and ``redundancy`` (the
    share of passage pairs at cosine >= :data:`REDUNDANT_COSINE`, what dedup removes) need it.
    Texts and vectors are cached by chunk id across :meth:`bind` calls (one per pipeline of a
    sweep or an ablation over the same index). Planning compresses passages; these count the
    chunks as indexed.
    """

    def __init__(self, pipe: Any) -> None:
        self._texts: dict[str, str] = {}
        self._vecs: dict[str, np.ndarray] = {}
        self.bind(pipe)

    def bind(self, pipe: Any) -> None:
        """Read from ``pipe``'s index and embed with its embedder from now on."""
        self.store, self.embedder = pipe.index.store, pipe.embedder

    def texts(self, chunk_ids: list[str], doc_ids: list[str]) -> list[str]:
        for cid, doc in zip(chunk_ids, doc_ids, strict=True):
            if cid not in self._texts:
                self._texts.update({c.chunk_id: c.text for c in self.store.chunks_of_doc(doc)})
        return [self._texts.get(c, "") for c in chunk_ids]

    def metrics(self, ans: dict[str, Any]) -> dict[str, float]:
        from searchsmith.serving.pipeline.state import estimate_tokens

        ids = [p["chunk_id"] for p in ans["passages"]]
        texts = self.texts(ids, [p["doc_id"] for p in ans["passages"]])
        out = {"context_tokens": float(sum(estimate_tokens(t) for t in texts))}
        if len(ids) >= 2:
            todo = [(c, t) for c, t in zip(ids, texts, strict=True) if c not in self._vecs]
            if todo:
                vecs = np.asarray(self.embedder.encode([t for _, t in todo]), dtype=np.float32)
                self._vecs.update(zip([c for c, _ in todo], vecs, strict=True))
            v = np.stack([self._vecs[c] for c in ids])  # (N, D) unit rows
            sims = v @ v.T  # (N, N)
            upper = sims[np.triu_indices(len(ids), k=1)]
            out["redundancy"] = float(np.mean(upper >= REDUNDANT_COSINE))
        return out


def _p50_ms(latency_ms: np.ndarray) -> Callable[[np.ndarray], float]:
    """Median latency (ms) of a resample of item indices."""
    return lambda idx: percentiles((latency_ms[idx.astype(np.int64)] / 1e3).tolist())["p50_ms"]


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Mean of each per-item metric and the median latency, each with its bootstrap interval.

    A metric that only some items have (their gold has it) is averaged over those, with its
    count under ``<metric>_n``."""

    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k != "latency_ms"]
    out: dict[str, Any] = {}
    for k in keys:
        have = [r for r in rows if r.get(k) is not None]
        out[k] = round(sum(r[k] for r in have) / len(have), 4)
        out.update(attach_intervals({k: out[k]}, have, keys=[k]))
        if len(have) < len(rows):
            out[f"{k}_n"] = len(have)
    latency = np.asarray([r["latency_ms"] for r in rows], dtype=np.float64)
    out["latency_ms_p50"] = round(_p50_ms(latency)(np.arange(len(rows))), 1)
    out.update(attach_intervals({"latency_ms_p50": out["latency_ms_p50"]}, rows,
                                pooled={"latency_ms_p50": _p50_ms(latency)}, keys=[], digits=1))
    out["n"] = len(rows)
    return out


def _stage_percentiles(traces: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """p50 / p95 latency (ms) of each stage and of the whole answer, with bootstrap intervals
    over the answers that ran the stage."""

    by_stage: dict[str, list[float]] = {}
    for tr in traces:
        for name, st in tr["stages"].items():
            by_stage.setdefault(name, []).append(st["latency_ms"] / 1e3)
        by_stage.setdefault("total", []).append(tr["total_ms"] / 1e3)
    out = {}
    for name, xs in by_stage.items():
        secs = np.asarray(xs, dtype=np.float64)
        stats = {q: (lambda idx, q=q: percentiles(secs[idx.astype(np.int64)].tolist())[q]) for q in ("p50_ms", "p95_ms")}
        point = {q: round(stat(np.arange(len(xs))), 1) for q, stat in stats.items()}
        out[name] = attach_intervals(point, [{} for _ in xs], pooled=stats, digits=1)
    return out


#: bundle task -> the pipeline config key (``bundles.<key>``) that loads it
# a bundle's task -> its key under the pipeline config's ``bundles`` (the registry's roles)
PIPELINE_BUNDLE_KEYS = {t.name: t.role for t in TASKS if t.in_pipeline}


def write_outputs(args: argparse.Namespace, out: dict[str, Any], per_item: list[dict[str, Any]],
                  plot: Callable[..., Path]) -> dict[str, Any]:
    """What an evaluation command (ablate, sweep, index sweep, bandit) writes beside its summary
    ``out``: ``--per-item F``, one JSON line per item; ``--plot F``, ``plot(F, out, replace=--force)``,
    whose path ``out`` then records as ``plot``. Returns ``out``."""
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, per_item)
    if getattr(args, "plot", None):
        out["plot"] = str(plot(Path(args.plot), out, replace=bool(getattr(args, "force", False))))
    return out


def with_eval_bundles(cfg: Any, args: argparse.Namespace) -> Any:
    """``cfg`` with ``args.bundle`` (one bundle, or a folder of bundles as ``searchsmith export
    RUNS/ --out DIR`` writes) in place of the config's bundles of the same tasks.

    Raises:
        ConfigError: ``--checkpoint`` (the pipeline runs exported bundles), a folder without a
            bundle, two bundles of one task.
        BundleError: a bundle's manifest is missing or corrupt.
    """
    from dataclasses import replace

    from searchsmith.models.errors import ConfigError
    from searchsmith.models.runtime import MANIFEST, read_manifest

    if getattr(args, "checkpoint", None):
        raise ConfigError("eval pipeline: --checkpoint is not supported; the pipeline runs exported bundles. "
                          f"Export the run first (searchsmith export {args.checkpoint} --out DIR) and pass "
                          "--bundle DIR")
    if not getattr(args, "bundle", None):
        return cfg
    root = Path(args.bundle)
    folders = [root] if (root / MANIFEST).is_file() else (
        sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else [])
    if not folders:
        raise ConfigError(f"--bundle {root}: neither a bundle nor a folder of bundles (no {MANIFEST}); export "
                          "them with: searchsmith export RUN_DIR --out DIR")
    chosen: dict[str, str] = {}
    for folder in folders:
        key = PIPELINE_BUNDLE_KEYS.get(read_manifest(folder)["task"])
        if key is None:  # the embedder: the index's own embeds the queries
            continue
        if key in chosen:
            raise ConfigError(f"--bundle {root}: two {key} bundles ({chosen[key]} and {folder}); keep one")
        chosen[key] = str(folder)
    if not chosen:
        raise ConfigError(f"--bundle {root}: no decompose, rerank, cite or images bundle in it")
    return replace(cfg, bundles=replace(cfg.bundles, **chosen))


def eval_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """Answer quality, citations and latency of the pipeline on ``{"id", "query", "history"?,
    "answer", "supporting"}`` items, with the SRSA strategy ablation (routed vs each strategy
    forced) and serial vs parallel routing on the follow-ups, all in the same run.

    Every figure has its bootstrap 95 % interval (``<name>_ci95``, per variant too; the median
    latency and the stage percentiles are recomputed on each resample). ``--per-item F`` writes
    one line per (item, variant), identified by ``id`` (the item's, else its position) and
    ``variant``, with the metrics under the summary's names (``latency_ms`` per item).

    The variants' latencies are comparable: each variant answers once untimed first, then each
    question is asked under every variant in turn, in a rotating order (:func:`rotation`); the
    answers, hence every quality figure, are those of a run variant after variant."""
    from searchsmith.serving.pipeline.config import STRATEGIES, load_pipeline_config
    from searchsmith.training.evaluate import progress_bar

    items = pipeline_items(args)
    cfg = with_eval_bundles(load_pipeline_config(args.config), args)
    if not (args.index or cfg.index):
        raise ValidationError("eval pipeline needs --index DIR (built with 'searchsmith index') or 'index:' "
                              "in the --config file")
    pipe, warnings = checked_pipeline(cfg, args, items)
    lookup = PassageLookup(pipe)
    runs: dict[str, list[dict[str, float]]] = {}
    traces: list[dict[str, Any]] = []
    followups = [it for it in items if it.get("history")]
    # (name, ask's keyword arguments, its items: every item, or the follow-ups alone)
    variants: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [("routed", {}, items)]
    variants += [(f"forced_{s}", {"strategy": s}, items) for s in STRATEGIES]
    variants += [(f"routing_{m}_followups", {"routing_mode": m}, followups) for m in ("serial", "parallel")]
    # An item's id falls back to its position among the variant's items (as the per-item file has it)
    position = [{id(it): j for j, it in enumerate(subset)} for _, _, subset in variants]
    lines: dict[str, list[dict[str, Any]]] = {}
    try:
        # 1. Warm-up, untimed: each variant answers the first of its items once (lazy loads and first calls)
        for _, kwargs, subset in variants:
            if subset:
                pipe.ask(subset[0]["query"], subset[0].get("history"), **kwargs)
        # 2. Item by item, every variant that asks it in turn, in a rotating order
        with progress_bar("eval pipeline", sum(len(s) for _, _, s in variants), "question") as bar:
            for n, it in enumerate(items):
                mine = [(v, kwargs) for v, (_, kwargs, _) in enumerate(variants) if id(it) in position[v]]
                for v, kwargs in rotation(n, mine):
                    name, i = variants[v][0], position[v][id(it)]
                    ans = pipe.ask(it["query"], it.get("history"), **kwargs)
                    m = pipeline_item_metrics(ans, it, lookup)
                    runs.setdefault(name, []).append(m)
                    if name == "routed":
                        traces.append(ans["trace"])
                    lines.setdefault(name, []).append(
                        {"id": it.get("id", i), "variant": name, "query": it["query"], "gold": it["answer"],
                         "answer": ans["answer"], "rewrite": ans["rewrite"], "strategy": ans["trace"]["strategy"],
                         "sources": ans["trace"]["sources"], "cited": [r["doc_id"] for r in ans["references"]], **m})
                    bar.update(1)
    finally:
        pipe.close()
    runs = {name: runs[name] for name, _, _ in variants if name in runs}  # the variants' order, as before
    per_item = [line for name, _, _ in variants for line in lines.get(name, [])]
    routed = _summary(runs["routed"])
    out: dict[str, Any] = {
        "task": "pipeline", "data": str(args.data), "index": str(args.index or cfg.index), "n": len(items),
        "followups": len(followups), "generation": cfg.generation.backend,
        "bundles": {k: v for k, v in vars(cfg.bundles).items() if k in ("decomposer", "reranker", "citation", "images")},
        # which configured bundles the pipeline used, and why not (serving/pipeline/gates.py)
        "gates": {use: d.to_dict() for use, d in pipe.gates.items()},
        **routed,
        "latency_per_stage": _stage_percentiles(traces),
        "strategy_ablation": {name: _summary(rows) for name, rows in runs.items()
                              if name == "routed" or name.startswith("forced_")},
        "routing_followups": {name: _summary(rows) for name, rows in runs.items() if name.startswith("routing_")},
        "bootstrap": bootstrap_info(),
        **({"warnings": warnings} if warnings else {}),
    }
    if args.per_item:
        write_jsonl_atomic(args.per_item, per_item)
    return out
