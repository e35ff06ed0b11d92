"""``searchsmith eval`` of the model tasks, and the held-out figures ``searchsmith export``
records for a bundle.

Every task scores a model through the runtime bundle's API (:func:`load_eval_model`): an
exported bundle (``--bundle DIR``: fp32, fp16 or int8 ONNX, what the server and the pipeline
run) or a training run (``--checkpoint RUN_DIR``: torch), with one metric code path per task.

``eval_rerank``: BEIR layout (``corpus.jsonl`` ``_id,title,text``; ``queries.jsonl``
``_id,text``; ``qrels/test.tsv`` ``query-id corpus-id score``), candidates from a TREC run
(``--run``) or the project's first stage (``--first-stage bm25|dense``), scored by a
cross-encoder. Reports nDCG@10 / MRR@10 / recall@K of the reranked lists and of the first
stage's own order. ``eval_retrieve``: the same layout, the whole corpus ranked by an embedder,
beside BM25.

``python -m searchsmith.training.evaluate scifact-beir OUT_DIR`` writes the SciFact open
part (../shared/data/scifact) as such a folder, with its BM25 top-10 as ``run.bm25.trec``.
``python -m searchsmith.training.evaluate beir-full DIR`` is the BEIR-style run on such a
folder: BM25 top-100 over the whole corpus, the bi-encoder over the whole corpus, and the BM25
top-100 reranked by a cross-encoder when one is given (:data:`SCIFACT_PROTOCOL` says why the
reranking figures of ``eval rerank`` are not BEIR's).

``eval decompose`` and ``eval rewrite`` report the field's own metrics beside ours: Break's
SARI, exact match, normalized exact match and GED (:mod:`searchsmith.models.metrics`), and the
retrieval a rewrite drives (:func:`rewrite_retrieval`), each beside its untrained baseline.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models import tasks
from searchsmith.models.errors import ConfigError, SearchsmithError, ValidationError
from searchsmith.models.intervals import attach_intervals, with_bootstrap
from searchsmith.models.io import read_json_object
from searchsmith.models.jsonl import iter_jsonl, read_jsonl
from searchsmith.models.metrics import (
    BM25,
    fuse_lexical,
    mrr_at_k,
    ndcg_at_k,
    qdmr_exact_match,
    qdmr_ged,
    qdmr_normalized_em,
    qdmr_sari,
    recall_at_k,
)
from searchsmith.training.data import (
    SHARED_DATA,
    resolve_data_dir,
    resolve_data_path,
    write_jsonl_atomic,
)
from searchsmith.training.dataset_shapes import (
    SCIFACT_ABSTRACT,
    SCIFACT_CLAIM,
    scifact_outside_corpus,
)

log = logging.getLogger(__name__)

# How many first-stage candidates the cross-encoder reranks per query (without --run).
RERANK_DEPTH = 20
NDCG_K = 10
# Tokens per (query, passage) pair of a cross-encoder run whose run.json records none.
RERANK_MAX_LENGTH = 256
# The BEIR-style full-corpus run: first-stage depth and its recall cut-off (BEIR's recall@100).
FULL_CORPUS_DEPTH = 100

#: Why the SciFact reranking figures are not BEIR's (the ``protocol`` of rerank / retrieve
#: outputs on a folder written by ``scifact-beir``).
SCIFACT_PROTOCOL = (
    "SciFact: 'eval rerank --run run.bm25.trec' reranks a BM25 top-10 (computed over all 5,183 abstracts) "
    "of the evidence-bearing claims only (claims with qrels; open part of the dev split = BEIR's test "
    "queries), and the folder's corpus is a 1,491-abstract subset (every gold, cited and BM25 top-10 "
    "abstract), so its nDCG@10 is not comparable to BEIR's full-corpus SciFact figures (5,183 abstracts, "
    "300 claims). The BEIR-style run on this folder is 'python -m searchsmith.training.evaluate beir-full "
    "DIR' (BM25 top-100 over every abstract here, still the 1,491-abstract subset: easier than BEIR's corpus).")


# ----------------------------------------------------------------------------- BEIR I/O


def read_beir(data_dir: str | Path) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus id -> "title text", query id -> text, qrels query id -> {doc id: relevance}).

    Raises:
        ConfigError: the folder or one of its files is missing.
        ValidationError: malformed lines (file:line), qrels naming unknown ids, no qrels.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise ConfigError(f"--data: {str(root)!r} is not a folder; expected the BEIR layout "
                          "(corpus.jsonl, queries.jsonl, qrels/test.tsv)")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (root / name).is_file():
            raise ConfigError(f"--data: {root / name} is missing; expected the BEIR layout "
                              "(corpus.jsonl, queries.jsonl, qrels/test.tsv)")
    corpus = {}
    for n, rec in iter_jsonl(root / "corpus.jsonl"):
        if "_id" not in rec or "text" not in rec:
            raise ValidationError(f"{root / 'corpus.jsonl'}:{n}: needs '_id' and 'text'")
        corpus[str(rec["_id"])] = f"{rec.get('title') or ''} {rec['text']}".strip()
    queries = {}
    for n, rec in iter_jsonl(root / "queries.jsonl"):
        if "_id" not in rec or "text" not in rec:
            raise ValidationError(f"{root / 'queries.jsonl'}:{n}: needs '_id' and 'text'")
        queries[str(rec["_id"])] = str(rec["text"])
    qrels: dict[str, dict[str, int]] = {}
    with open(root / "qrels" / "test.tsv", encoding="utf-8") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or (n == 1 and row[0] == "query-id"):
                continue
            if len(row) != 3:
                raise ValidationError(f"{root}/qrels/test.tsv:{n}: expected 'query-id corpus-id "
                                      f"score' (tab-separated), got {row}")
            try:
                rel = int(row[2])
            except ValueError:
                raise ValidationError(f"{root}/qrels/test.tsv:{n}: score {row[2]!r} is not an "
                                      "integer") from None
            if row[0] not in queries or row[1] not in corpus:
                raise ValidationError(f"{root}/qrels/test.tsv:{n}: query {row[0]!r} or doc "
                                      f"{row[1]!r} is not in queries.jsonl / corpus.jsonl")
            qrels.setdefault(row[0], {})[row[1]] = rel
    if not any(v > 0 for q in qrels.values() for v in q.values()):
        raise ValidationError(f"{root}/qrels/test.tsv: no relevant (score > 0) pair")
    return corpus, queries, qrels


def read_trec_run(path: str | Path, corpus: dict[str, str]) -> dict[str, list[tuple[str, float]]]:
    """TREC run ``qid Q0 docid rank score tag`` -> qid -> [(doc id, score)] best first."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--run: {str(p)!r} does not exist (a TREC run: qid Q0 docid rank score tag)")
    run: dict[str, list[tuple[int, str, float]]] = {}
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"--run: {p} is not UTF-8 text (byte {exc.start}); a TREC run is text lines "
                              "'qid Q0 docid rank score tag'") from None
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise ValidationError(f"{p}:{n}: expected 6 fields 'qid Q0 docid rank score tag', "
                                  f"got {len(parts)}")
        qid, _, doc, rank, score, _ = parts
        if doc not in corpus:
            raise ValidationError(f"{p}:{n}: doc {doc!r} is not in corpus.jsonl")
        try:
            run.setdefault(qid, []).append((int(rank), doc, float(score)))
        except ValueError:
            raise ValidationError(f"{p}:{n}: rank/score not numeric: {rank!r} {score!r}") from None
    if not run:
        raise ValidationError(f"--run: {p} holds no run lines; write one line per candidate, 'qid Q0 docid rank "
                              "score tag'")
    return {q: [(d, s) for _, d, s in sorted(v)] for q, v in run.items()}


def _first_stage(kind: str, corpus: dict[str, str], queries: dict[str, str],
                 qids: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
    ids = list(corpus)
    if kind == "bm25":
        bm = BM25([corpus[i] for i in ids])
        return {q: [(ids[i], s) for i, s in bm.top_k(queries[q], RERANK_DEPTH)] for q in qids}
    if kind == "dense":
        import numpy as np
        from searchsmith.models.hub import resolve_model
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(resolve_model("default"), device="cpu")
        d = st.encode([corpus[i] for i in ids], normalize_embeddings=True, batch_size=64)
        qe = st.encode([queries[q] for q in qids], normalize_embeddings=True, batch_size=64)
        sims = qe @ d.T  # (Q, P)
        out = {}
        for row, q in enumerate(qids):
            top = np.argsort(-sims[row], kind="stable")[:RERANK_DEPTH]
            out[q] = [(ids[i], float(sims[row, i])) for i in top]
        return out
    raise ConfigError(f"--first-stage: expected bm25 or dense, got {kind!r}")


# ----------------------------------------------------------------------------- models
#
# Every eval task scores a model through one interface: the runtime bundle's
# (models/runtime.py), whether the model is an exported bundle (--bundle, fp32 / fp16 / int8
# ONNX) or a training run (--checkpoint, torch). Checkpoints are wrapped where their API
# differs (TorchReranker); a decompose bundle gets the decomposer's batch methods
# (BundleDecomposer), so that the recipe's own evaluate() scores both. The metrics are then
# computed by one code path per task.

#: eval task -> the model tasks (``manifest["task"]`` of a bundle) it can evaluate
EVAL_MODEL_TASKS: dict[str, tuple[str, ...]] = {
    evaluation: tasks.evaluated_by(evaluation)
    for evaluation in dict.fromkeys(e for t in tasks.TASKS for e in t.evaluations)
}
# A bar appears only when an evaluation is still running after this many seconds.
PROGRESS_DELAY_S = 2.0
# Inputs per model call while a bar is shown (each call is still batched by the model).
PROGRESS_CHUNK = 256
_BATCH_METHODS = frozenset({"score_pairs", "attribute", "entities", "encode", "encode_text",
                            "encode_images", "decompose_batch", "rewrite_batch"})


@dataclass
class EvalModel:
    """A model to evaluate and where it came from.

    Attributes:
        model: the model, with the runtime bundle's methods for its task.
        task: ``embed``, ``rerank``, ``decompose``, ``cite`` or ``images``.
        origin: ``bundle:<dtype>:<path>`` or ``checkpoint:<path>`` (reported with the metrics).
        manifest: the bundle's manifest (None for a checkpoint).
    """

    model: Any
    task: str
    origin: str
    manifest: dict[str, Any] | None = None


class TorchReranker:
    """A trained cross-encoder (torch) with :class:`~searchsmith.models.runtime.RerankBundle`'s
    ``score_pairs``: logits of (query, passage) pairs, cut to ``max_length`` tokens as in training."""

    def __init__(self, model: Any, tokenizer: Any, max_length: int) -> None:
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length

    @classmethod
    def load(cls, path: str | Path) -> TorchReranker:
        """A run folder (``model/`` + ``run.json``) or a model folder with ``config.json``."""
        from searchsmith.models.reranker import load_reranker
        from searchsmith.models.tokenizer import load_run_tokenizer

        root = Path(path)
        model_dir = root / "model" if (root / "model" / "config.json").is_file() else root
        if not (model_dir / "config.json").is_file():
            raise ConfigError(f"--checkpoint: {str(root)!r} has neither model/config.json nor config.json; "
                              "pass the run folder written by 'searchsmith train'")
        max_length = RERANK_MAX_LENGTH
        if (root / "run.json").is_file():
            max_length = int(_read_json(root / "run.json", "--checkpoint").get("max_length") or max_length)
        # either head (models/reranker.py); BundleError when unusable
        return cls(load_reranker(model_dir), load_run_tokenizer(model_dir, what="--checkpoint"), max_length)

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Logits (n,) float32, in input order."""
        from searchsmith.training.reranker import score_pairs

        pairs = list(pairs)
        return np.asarray(score_pairs(self.model, self.tokenizer, pairs, self.max_length) if pairs else [],
                          dtype=np.float32)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Logits (n,) of ``passages`` against ``query``."""
        return self.score_pairs([(query, p) for p in passages])


class BundleDecomposer:
    """A ``decompose`` bundle with :class:`~searchsmith.models.decomposer.Decomposer`'s batch
    methods, so the recipe's ``evaluate`` scores the ONNX loop exactly as the torch model.

    Other attributes (``rewrite``, ``decompose``, ``manifest``, ...) are the bundle's.
    """

    def __init__(self, bundle: Any) -> None:
        self.bundle = bundle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bundle, name)

    def decompose_batch(self, questions: Sequence[str],
                        max_nodes: int | None = None) -> list[tuple[Any, bool, str]]:
        """(graph, well formed as generated, raw generation) per question, as
        ``Decomposer.decompose_batch`` (the bundle's ``decompose`` keeps only the graph)."""
        from searchsmith.models.decomposer import decompose_source
        from searchsmith.models.qdg import parse_linear

        b = self.bundle
        if getattr(b, "tagger", False):  # graphs straight from the depths, as Decomposer does
            from searchsmith.models.qdg import linearize

            return [(g, True, linearize(g)) for g in b.tag_graphs(list(questions), max_nodes)] if questions else []
        texts = b.generate([decompose_source(q) for q in questions], constraint=b.grammar,
                           use_type_head=True) if questions else []
        out = []
        for q, text in zip(questions, texts, strict=True):
            graph, valid = parse_linear(text, q, max_nodes=max_nodes or b.max_nodes)
            out.append((graph, valid, text))
        return out

    def rewrite_batch(self, items: Sequence[tuple[Sequence[Any], str]]) -> list[str]:
        """Standalone rewrites of ``(history, query)`` pairs (the bundle's ``rewrite``)."""
        return [self.bundle.rewrite(list(h), q) for h, q in items]


def as_eval_model(task: str, model: Any) -> Any:
    """``model`` (a runtime bundle or a torch model) with the methods the task's evaluation calls."""
    if task == "decompose" and not hasattr(model, "decompose_batch"):
        return BundleDecomposer(model)
    return model


_PER_ITEM_KWARGS = frozenset({"cosine"})


class Chunked:
    """``model`` whose batch methods are called on slices of inputs, advancing ``bar``.

    The model still batches within a slice; slicing only lets the bar move.
    """

    def __init__(self, model: Any, bar: Any, chunk: int = PROGRESS_CHUNK) -> None:
        self._model, self._bar, self._chunk = model, bar, chunk

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._model, name)
        if name not in _BATCH_METHODS or not callable(attr):
            return attr

        def call(items: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            items = list(items)
            if not items:
                return attr(items, *args, **kwargs)
            parts = []
            for s in range(0, len(items), self._chunk):
                part = items[s:s + self._chunk]
                # keyword arguments with one value per item (a residual scorer's cosine) are sliced alike
                kw = {k: (v[s:s + self._chunk] if k in _PER_ITEM_KWARGS and v is not None else v)
                      for k, v in kwargs.items()}
                parts.append(attr(part, *args, **kw))
                self._bar.update(len(part))
            if isinstance(parts[0], np.ndarray):
                return np.concatenate(parts)
            return [x for p in parts for x in p]

        return call


def progress_bar(desc: str, total: int | None, unit: str = "item") -> Any:
    """A progress bar (:func:`searchsmith.models.console.progress`), shown after ``PROGRESS_DELAY_S``."""
    from searchsmith.models.console import progress

    return progress(total=total, desc=desc, unit=unit, delay=PROGRESS_DELAY_S)


def _read_json(path: Path, flag: str) -> dict[str, Any]:
    return read_json_object(path, flag, fix="the folder is damaged")


def _needs(tasks: Sequence[str], what: str) -> str:
    return " or ".join(f"{'an' if t[0] in 'aeiou' else 'a'} {t!r}" for t in tasks) + f" {what}"


def load_eval_model(eval_task: str, args: argparse.Namespace, *, required: bool = True) -> EvalModel | None:
    """The model ``eval <eval_task>`` scores: ``args.bundle`` or ``args.checkpoint``.

    Args:
        eval_task: a key of :data:`EVAL_MODEL_TASKS`.
        args: ``.bundle`` (an exported bundle folder) or ``.checkpoint`` (a training run
            folder; for the embedder, a sentence-transformers model folder); ``.device``
            (``auto``, ``cpu`` or ``cuda``; bundles only).
        required: False returns None when neither is given (the task has a default model).

    Raises:
        ConfigError: both or neither given, a bundle or run of another task, a folder that is
            neither (with the fix).
        BundleError: a missing, corrupt, newer or untrained bundle (from ``load_bundle``).
    """
    bundle, ckpt = getattr(args, "bundle", None), getattr(args, "checkpoint", None)
    allowed = EVAL_MODEL_TASKS[eval_task]
    if bundle and ckpt:
        raise ConfigError(f"eval {eval_task}: give --bundle DIR or --checkpoint RUN_DIR, not both")
    if not bundle and not ckpt:
        if not required:
            return None
        raise ConfigError(f"eval {eval_task}: give --checkpoint RUN_DIR (a 'searchsmith train' run folder) or "
                          f"--bundle DIR (a 'searchsmith export' bundle folder)")
    if bundle:
        return _load_bundle_model(eval_task, Path(bundle), allowed, getattr(args, "device", None) or "auto")
    return _load_checkpoint_model(eval_task, Path(ckpt), allowed)


def _load_bundle_model(eval_task: str, path: Path, allowed: Sequence[str], device: str) -> EvalModel:
    from searchsmith.models.runtime import MANIFEST, load_bundle, read_manifest

    if path.is_dir() and not (path / MANIFEST).is_file() and any(
            (path / f).is_file() for f in ("run.json", "config.json", "decomposer.json", "model/config.json")):
        raise ConfigError(f"--bundle {path} has no {MANIFEST}: it is a training run or a model folder, not an "
                          f"exported bundle; pass it as --checkpoint {path}, or export it first "
                          f"(searchsmith export {path} --out BUNDLE_DIR)")
    manifest = read_manifest(path)  # BundleError: not a folder, no / bad manifest, newer format
    task = manifest["task"]
    if task not in allowed:
        raise ConfigError(f"--bundle {path} is {_needs([task], 'bundle')}; eval {eval_task} needs "
                          f"{_needs(allowed, 'bundle')}")
    b = load_bundle(path, device=device)  # sha256 of every file, trained, tokenizer
    dtype = manifest.get("dtype", "fp32")
    return EvalModel(as_eval_model(task, b), task, f"bundle:{dtype}:{path}", b.manifest)


def run_task(path: Path) -> str | None:
    """The model task of a training run folder (its ``run.json``), None when it has none."""
    info = path / "run.json"
    if not info.is_file():
        return None
    raw = _read_json(info, "--checkpoint").get("task")
    task = tasks.run_task(raw)
    if task is None:
        raise ConfigError(f"--checkpoint: {info} names task {raw!r}, not one of {tasks.run_names()}")
    return task.name


def _load_checkpoint_model(eval_task: str, path: Path, allowed: Sequence[str]) -> EvalModel:
    if not path.is_dir():
        raise ConfigError(f"--checkpoint: {str(path)!r} is not a folder; pass a training run folder "
                          "(written by 'searchsmith train')")
    if (path / "manifest.json").is_file():
        raise ConfigError(f"--checkpoint {path} is an exported bundle (it has manifest.json); pass it as "
                          f"--bundle {path}")
    task = run_task(path)
    if task is not None and task not in allowed:
        raise ConfigError(f"--checkpoint {path} is {_needs([task], 'run')}; eval {eval_task} needs "
                          f"{_needs(allowed, 'run')}")
    if task is None:  # a model folder: the embedder's, or a bare saved model
        task = "decompose" if "decompose" in allowed and (
            (path / "decomposer.json").is_file() or (path / "model" / "decomposer.json").is_file()) else allowed[0]
    origin = f"checkpoint:{path}"
    if task == "rerank":
        return EvalModel(TorchReranker.load(path), task, origin)
    if task == "decompose":
        from searchsmith.models.decomposer import Decomposer

        return EvalModel(Decomposer.load(path), task, origin)
    if task == "cite":
        from searchsmith.models.citation import CitationModel

        return EvalModel(CitationModel.load(path), task, origin)
    if task == "images":
        from searchsmith.models.image_relevance import ImageRelevanceModel

        return EvalModel(ImageRelevanceModel.load(path), task, origin)
    if task == "read":
        from searchsmith.models.reader_model import TorchReader

        return EvalModel(TorchReader.load(path), task, origin)
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    if not (path / "config.json").is_file():
        raise ConfigError(f"--checkpoint {path}: eval {eval_task} needs an embedder (a sentence-transformers "
                          "model folder with config.json) or an 'embed' bundle (--bundle)")
    return EvalModel(Embedder(EmbedderConfig(model=str(path))), "embed", origin)


def _list_metrics(ranked: list[str], rels: dict[str, int], k: int) -> dict[str, float]:
    labels = [rels.get(d, 0) for d in ranked]
    n_rel = sum(1 for v in rels.values() if v > 0)
    return {f"ndcg@{NDCG_K}": ndcg_at_k(labels, NDCG_K, list(rels.values())),
            f"mrr@{NDCG_K}": mrr_at_k(labels, NDCG_K), f"recall@{k}": recall_at_k(labels, k, n_rel)}


def _eval_qids(queries: dict[str, str], qrels: dict[str, dict[str, int]], args: argparse.Namespace) -> list[str]:
    qids = [q for q in queries if any(v > 0 for v in qrels.get(q, {}).values())]
    limit = int(getattr(args, "limit", 0) or 0)
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {limit}")
    if not qids:
        raise ValidationError(f"{args.data}: no query with a relevant document to evaluate")
    return qids[:limit] if limit else qids


def _protocol(data_dir: str | Path, what: str) -> str:
    """What an evaluation on ``data_dir`` measured, plus the folder's own note (``protocol.json``
    ``"note"``, written by :func:`write_scifact_beir`)."""
    path = Path(data_dir) / "protocol.json"
    note = _read_json(path, "--data").get("note") if path.is_file() else None
    return f"{what}. {note}" if note else f"{what}."


def _mean_rows(rows: list[dict[str, float]], prefix: str = "") -> dict[str, float]:
    return {f"{prefix}{key}": sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def served_rerank_scores(model: Any, bar: Any, lexical_share_fn: Any | None = None) -> Any:
    """``pairs -> scores`` of a rerank model as the pipeline serves it: a bundle with a
    ``retrieval_mix`` (models/rerank_mix.py) mixed at its share with the retrieval score it was
    measured against (its embedder's cosine, plus its ``lexical_weight`` x the passage's BM25
    share from ``lexical_share_fn``, ``pairs -> shares``), any other model's own scores."""
    score = Chunked(model, bar).score_pairs
    mix = getattr(model, "retrieval_mix", None)
    if mix is None or mix.cross_weight >= 1:
        return score
    from searchsmith.models.rerank_mix import mixed_score_fn
    from searchsmith.training.data import CachedEmbedder
    from searchsmith.training.reranker import cosine_score_fn

    cosine = cosine_score_fn(CachedEmbedder(mix.embedder, None).encode)
    return mixed_score_fn(score, mix.retrieval_score_fn(cosine, lexical_share_fn), mix.cross_weight)


def mix_shares_over(model: Any, documents: Any) -> Any:
    """``pairs -> BM25 share`` over ``documents`` (a callable returning the texts) when
    ``model``'s retrieval mix needs it (``lexical_weight`` above 0), else None."""
    mix = getattr(model, "retrieval_mix", None)
    if mix is None or mix.cross_weight >= 1 or mix.lexical_weight <= 0:
        return None
    from searchsmith.training.reranker import text_bm25_fn

    return text_bm25_fn(documents(), share=True)


def _mix_note(mix: Any) -> str:
    """How a bundle's scores were mixed, for a protocol line ("" when used alone)."""
    if mix is None or mix.cross_weight >= 1:
        return ""
    against = "the cosine" + (f" + {mix.lexical_weight:g} x BM25 share" if mix.lexical_weight > 0 else "")
    return f", mixed with {against} at its share {mix.cross_weight:g}"


def eval_rerank(args: argparse.Namespace) -> dict[str, Any]:
    """Rerank first-stage candidates with a cross-encoder; metrics of both orders.

    ``args``: ``.data`` (BEIR folder), ``.checkpoint`` (run folder) or ``.bundle`` (an exported
    ``rerank`` bundle, any dtype), ``.run`` (TREC file) or ``.first_stage`` (bm25|dense),
    ``.k`` (recall cut-off), ``.limit`` (first N queries), ``.per_item`` (JSONL per query).
    Each figure has its bootstrap 95 % interval over the queries (``<name>_ci95``); a per-item
    line is identified by ``qid`` and carries the figures under the summary's names. A bundle
    with a ``retrieval_mix`` is scored as the pipeline serves it: mixed with the cosine of its
    embedder at its share (``cross_weight`` in the output; 1.0 = the reranker alone), plus its
    ``lexical_weight`` x each passage's BM25 share over the folder's documents
    (``mix_lexical_weight``).
    """
    corpus, queries, qrels = read_beir(args.data)
    qids = _eval_qids(queries, qrels, args)
    k = int(getattr(args, "k", 3) or 3)
    if getattr(args, "run", None):
        if (getattr(args, "first_stage", None) or "bm25") != "bm25":
            raise ConfigError(f"--first-stage {args.first_stage}: the candidates come from --run {args.run}; "
                              "give one of the two")
        cands = read_trec_run(args.run, corpus)
        if not any(cands.get(q) for q in qids):
            raise ValidationError(f"--run: {args.run} has candidates for none of the {len(qids)} evaluated "
                                  "queries; check that its qids are the queries.jsonl ids")
        stage = f"run:{Path(args.run).name}"
    else:
        stage = getattr(args, "first_stage", "bm25") or "bm25"
        cands = _first_stage(stage, corpus, queries, qids)
    em = load_eval_model("rerank", args)  # after the candidates: a bad --run is refused before loading
    pairs, spans = [], []
    for q in qids:
        docs = [d for d, _ in cands.get(q, [])]
        spans.append((q, len(pairs), docs))
        pairs.extend((queries[q], corpus[d]) for d in docs)
    mix = getattr(em.model, "retrieval_mix", None)
    with progress_bar("eval rerank", len(pairs), "pair") as bar:
        scores = served_rerank_scores(em.model, bar, mix_shares_over(em.model, lambda: list(corpus.values())))(pairs)
    items, firsts, reranks = [], [], []
    for q, start, docs in spans:
        s = scores[start:start + len(docs)]
        reranked = [d for _, d in sorted(zip(s, docs, strict=True), key=lambda t: -t[0])]
        first = _list_metrics(docs, qrels[q], k)
        re = _list_metrics(reranked, qrels[q], k)
        firsts.append(first)
        reranks.append(re)
        items.append({"qid": q, "candidates": len(docs), "top": reranked[:NDCG_K],
                      **re, **{f"first_stage/{key}": v for key, v in first.items()}})
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, items)
    out: dict[str, Any] = {"task": "rerank", "model": em.origin, "queries": len(qids), "first_stage": stage,
                           "rerank_depth": RERANK_DEPTH if not getattr(args, "run", None) else None,
                           "cross_weight": mix.cross_weight if mix is not None else 1.0,
                           "mix_lexical_weight": mix.lexical_weight if mix is not None else 0.0}
    where = (f"the candidates of the TREC run {Path(args.run).name}" if getattr(args, "run", None)
             else f"the {stage} top {RERANK_DEPTH} over the folder's {len(corpus)} documents")
    out["protocol"] = _protocol(args.data, f"reranks {where}, for the {len(qids)} queries with a relevant "
                                           "document; a relevant document outside the candidates counts as missed")
    out.update(_mean_rows(reranks))
    out.update(_mean_rows(firsts, "first_stage/"))
    return with_bootstrap(out, items)


def _embedder(args: argparse.Namespace, eval_task: str) -> EvalModel:
    """--bundle (an ``embed`` bundle) or --checkpoint (a model folder), else the default embedder."""
    em = load_eval_model(eval_task, args, required=False)
    if em is not None:
        return em
    from searchsmith.serving.embedder import Embedder

    return EvalModel(Embedder(), "embed", "default embedder (torch)")


def eval_retrieve(args: argparse.Namespace) -> dict[str, Any]:
    """Dense retrieval over a BEIR folder: the embedder ranks the whole corpus for each query.

    ``args``: ``.data`` (BEIR folder), ``.bundle`` (an ``embed`` bundle) or ``.checkpoint``
    (a sentence-transformers model folder; neither = the default embedder), ``.k``,
    ``.limit``, ``.per_item``, ``.lexical_weight``. Reports nDCG@10 / MRR@10 / recall@K of the
    embedder and, as the baseline on the same queries, of BM25 (``bm25/...``), and of hybrid
    search (``hybrid/...``: the embedder's and BM25's top candidates scored as the pipeline
    scores them, ``cosine + lexical_weight * share``, the share of the query's BM25 ceiling a
    document reaches, none below the pipeline's ``lexical_min_cosine``, :func:`fuse_lexical`;
    the pipeline's BM25 is SQLite FTS5's (k1 1.2, b 0.75), this one :class:`BM25`'s (k1 0.9,
    b 0.4)), each with its bootstrap 95 % interval over the queries (``<name>_ci95``); a
    per-item line is identified by ``qid``.
    """
    from searchsmith.serving.pipeline.config import RetrievalConfig

    weight = getattr(args, "lexical_weight", None)
    try:  # the pipeline's own rule for the weight
        hybrid = RetrievalConfig() if weight is None else RetrievalConfig(lexical_weight=float(weight))
    except ValueError as exc:
        raise ValidationError(f"eval retrieve: --lexical-weight: {exc}") from None
    weight, min_cosine = hybrid.lexical_weight, hybrid.lexical_min_cosine
    corpus, queries, qrels = read_beir(args.data)
    qids = _eval_qids(queries, qrels, args)
    k = int(getattr(args, "k", 3) or 3)
    depth = max(NDCG_K, k)
    em = _embedder(args, "retrieve")
    ids = list(corpus)
    with progress_bar("eval retrieve", len(ids) + len(qids), "text") as bar:
        model = Chunked(em.model, bar)
        docs = np.asarray(model.encode([corpus[i] for i in ids]), dtype=np.float32)  # (P, D)
        qv = np.asarray(model.encode([queries[q] for q in qids]), dtype=np.float32)  # (Q, D)
    if docs.shape[1] != qv.shape[1]:
        raise ValidationError(f"eval retrieve: query vectors have {qv.shape[1]} dims, documents {docs.shape[1]}")
    sims = qv @ docs.T  # (Q, P)
    bm = BM25(list(corpus.values()))
    rows, bm_rows, hy_rows, items = [], [], [], []
    for r, q in enumerate(qids):
        top = np.argsort(-sims[r], kind="stable")[:depth]
        ranked = [ids[i] for i in top]
        bm_top = bm.top_k(queries[q], depth)
        bm_ranked = [ids[i] for i, _ in bm_top]
        cand = list(dict.fromkeys([*top.tolist(), *(i for i, _ in bm_top)]))
        fused = fuse_lexical({i: float(sims[r, i]) for i in cand},
                             {i: bm.share(queries[q], sc) for i, sc in bm_top}, weight, min_cosine)
        hy_ranked = [ids[i] for i in sorted(cand, key=lambda i: (-fused[i], i))[:depth]]
        m, b, h = (_list_metrics(x, qrels[q], k) for x in (ranked, bm_ranked, hy_ranked))
        rows.append(m)
        bm_rows.append(b)
        hy_rows.append(h)
        items.append({"qid": q, "top": ranked[:NDCG_K], **m, **{f"bm25/{key}": v for key, v in b.items()},
                      **{f"hybrid/{key}": v for key, v in h.items()}})
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, items)
    out: dict[str, Any] = {"task": "retrieve", "model": em.origin, "queries": len(qids), "documents": len(ids)}
    out["protocol"] = _protocol(args.data, f"the embedder and BM25 each rank all {len(ids)} documents of the "
                                           f"folder, for the {len(qids)} queries with a relevant document; hybrid "
                                           f"search reorders their top {depth} together")
    out["lexical_weight"] = weight
    out.update(_mean_rows(rows))
    out.update(_mean_rows(bm_rows, "bm25/"))
    out.update(_mean_rows(hy_rows, "hybrid/"))
    return with_bootstrap(out, items)


# ----------------------------------------------------------------------------- BEIR-style full-corpus run


def _full_corpus_note(data_dir: str | Path, n_docs: int) -> str:
    path = Path(data_dir) / "protocol.json"
    info = _read_json(path, "--data") if path.is_file() else {}
    if info.get("dataset") != "scifact":
        return ""
    return (f" SciFact: the corpus here is the open {n_docs:,}-abstract subset of SciFact's 5,183 (every gold, "
            "cited and BM25 top-10 abstract of the claims) and the queries are the open part's claims with "
            "qrels, so this run is a sub-corpus result, easier than BEIR's SciFact (the BEIR paper reports "
            "BM25 nDCG@10 0.665 over 5,183 abstracts and 300 claims).")


def eval_full_corpus(args: argparse.Namespace) -> dict[str, Any]:
    """The BEIR-style run on a BEIR folder: every system ranks the whole corpus.

    * ``bm25/``: BM25 over every document, its top ``args.depth`` (default 100);
    * ``bi_encoder/``: the default embedder's cosine over every document (unless ``args.no_dense``);
    * ``rerank/``: the BM25 top ``depth`` reranked by ``args.bundle`` / ``args.checkpoint`` (a
      ``rerank`` model; skipped when neither is given). Its recall@depth is BM25's by construction.

    Each reports nDCG@10 and recall@depth (BEIR's pair) with a bootstrap 95 % interval over the
    queries; ``args.limit`` keeps the first N queries, ``args.per_item`` writes one line per query.
    """
    corpus, queries, qrels = read_beir(args.data)
    qids = _eval_qids(queries, qrels, args)
    depth = int(getattr(args, "depth", None) or FULL_CORPUS_DEPTH)
    if depth < NDCG_K:
        raise ConfigError(f"--depth must be >= {NDCG_K} (nDCG@{NDCG_K} reads the top {NDCG_K}), got {depth}")
    ids = list(corpus)
    bm = BM25([corpus[i] for i in ids])
    ranked: dict[str, dict[str, list[str]]] = {
        "bm25": {q: [ids[i] for i, _ in bm.top_k(queries[q], depth)] for q in qids}}
    origins = {"bm25": "BM25 (k1=0.9, b=0.4)"}
    if not getattr(args, "no_dense", False):
        from searchsmith.serving.embedder import Embedder

        with progress_bar("beir-full bi-encoder", len(ids) + len(qids), "text") as bar:
            model = Chunked(Embedder(), bar)
            docs = np.asarray(model.encode([corpus[i] for i in ids]), dtype=np.float32)  # (P, D)
            qv = np.asarray(model.encode([queries[q] for q in qids]), dtype=np.float32)  # (Q, D)
        sims = qv @ docs.T  # (Q, P)
        ranked["bi_encoder"] = {q: [ids[i] for i in np.argsort(-sims[r], kind="stable")[:depth]]
                                for r, q in enumerate(qids)}
        origins["bi_encoder"] = "default embedder (torch), cosine"
    em = load_eval_model("rerank", args, required=False)
    if em is not None:
        pairs = [(queries[q], corpus[d]) for q in qids for d in ranked["bm25"][q]]
        with progress_bar("beir-full rerank", len(pairs), "pair") as bar:
            shares = mix_shares_over(em.model, lambda: [corpus[i] for i in ids])
            scores = served_rerank_scores(em.model, bar, shares)(pairs)
        start, reranked = 0, {}
        for q in qids:
            docs_q = ranked["bm25"][q]
            s = scores[start:start + len(docs_q)]
            start += len(docs_q)
            reranked[q] = [d for _, d in sorted(zip(s, docs_q, strict=True), key=lambda t: -t[0])]
        ranked["rerank"] = reranked
        mix = getattr(em.model, "retrieval_mix", None)
        origins["rerank"] = f"{em.origin} over the BM25 top {depth}" + _mix_note(mix)
    items = []
    for q in qids:
        row: dict[str, Any] = {"qid": q}
        for name, lists in ranked.items():
            row.update({f"{name}/{key}": v for key, v in _list_metrics(lists[q], qrels[q], depth).items()
                        if not key.startswith("mrr")})
        items.append(row)
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, items)
    out: dict[str, Any] = {"task": "beir-full", "queries": len(qids), "documents": len(ids), "depth": depth,
                           "systems": origins}
    out.update(_mean_rows([{k: v for k, v in r.items() if k != "qid"} for r in items]))
    firsts = " and the bi-encoder each rank" if "bi_encoder" in ranked else " ranks"
    rerank = f"; the reranker reorders the BM25 top {depth}" if "rerank" in ranked else ""
    out["protocol"] = (f"BEIR-style: BM25{firsts} all {len(ids):,} documents of the folder for the {len(qids)} "
                       f"queries with a relevant document{rerank}; nDCG@{NDCG_K} and recall@{depth}."
                       + _full_corpus_note(args.data, len(ids)))
    return with_bootstrap(out, items)


# ----------------------------------------------------------------------------- held-out figures
#
# ``searchsmith export`` records the bundle's own held-out figures in its manifest
# (``heldout_metrics``), measured here on the exported model: the serving gates then judge the
# model that is served (an int8 graph can lose what the torch run had), not its training run.


def run_recipe_config(run_dir: Path) -> Any:
    """The recipe config a training run was made with (``run.json`` ``"config"``).

    Raises:
        ConfigError: no run.json or no config in it (an older or hand-made run).
    """
    from searchsmith.models.config import from_dict
    from searchsmith.training.registry import get_recipe

    path = Path(run_dir) / "run.json"
    info = _read_json(path, "held-out split") if path.is_file() else {}
    config = info.get("config")
    if not isinstance(config, dict) or "recipe" not in config:
        raise ConfigError(f"{path} records no recipe config, so the run's held-out split cannot be rebuilt")
    return from_dict(get_recipe(str(config["recipe"])).config_cls, config, source=f"{path} config")


def _split_eval_ids(run_dir: Path) -> set[str] | None:
    path = Path(run_dir) / "split.json"
    return {str(x) for x in _read_json(path, "held-out split").get("eval", [])} if path.is_file() else None


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def run_baselines(run_dir: Path) -> dict[str, float]:
    """The ``baselines/...`` figures of a run's ``metrics.json`` (measured on its held-out split)."""
    from searchsmith.models.export import heldout_metrics

    return {k: v for k, v in heldout_metrics(run_dir).items() if k.startswith("baselines/")}


def heldout_figures(task: str, run_dir: Path, model: Any, limit: int | None = None) -> tuple[dict[str, float], str]:
    """Held-out figures of ``model`` in the flat naming of ``manifest["heldout_metrics"]``.

    The run's held-out split is rebuilt from its ``run.json`` config (and ``split.json`` /
    ``heldout.cite.jsonl``); ``model`` is scored there with the recipe's own metrics (the keys
    of its ``metrics.json`` "final") and the run's baselines, measured on the same split, are
    added as ``baselines/...``. A reranker whose split cannot be rebuilt is scored on the demo
    held-out questions instead, with its BM25 and bi-encoder baselines measured there.

    Args:
        task: ``rerank``, ``decompose``, ``cite`` or ``images``.
        run_dir: the training run.
        model: a runtime bundle of the task (or a torch model with the same methods).
        limit: score only the first N held-out items (queries, decompositions and rewrites
            each, sentences, images); the baselines stay the run's, over all of them.

    Returns:
        ``(figures, where)``: ``where`` says which data the figures come from.

    Raises:
        SearchsmithError, OSError: the split cannot be rebuilt (and the task has no demo set).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"held-out limit: expected an int >= 1 or None (all), got {limit!r}")
    run_dir = Path(run_dir)
    model = as_eval_model(task, model)
    if task == "rerank":
        try:
            figs, where = _rerank_run_split(run_dir, model, limit)
        except (SearchsmithError, OSError) as exc:
            figs, where = _rerank_demo(model, limit)
            return figs, f"{where}, since the run's split could not be rebuilt ({exc})"
    elif task == "decompose":
        figs, where = _decompose_run_split(run_dir, model, limit)
    elif task == "cite":
        figs, where = _cite_run_split(run_dir, model, limit)
    elif task == "images":
        figs, where = _images_run_split(run_dir, model, limit)
    elif task == "read":
        figs, where = _read_run_split(run_dir, model, limit)
    else:
        raise ConfigError(f"held-out figures: task {task!r} has no held-out split (one of rerank, decompose, read, "
                          "cite, images)")
    return {**_numbers(figs), **run_baselines(run_dir)}, where


def _first(items: list[Any], limit: int | None) -> tuple[list[Any], str]:
    if limit and limit < len(items):
        return items[:limit], f"first {limit} of {len(items)}"
    return items, f"all {len(items)}"


def _rerank_run_split(run_dir: Path, model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.data import split_by_key
    from searchsmith.training.rerank_data import load_groups
    from searchsmith.training.reranker import bm25_score_fn, evaluate_groups

    cfg = run_recipe_config(run_dir)
    groups = load_groups(cfg.data)
    ids = _split_eval_ids(run_dir)
    if ids is None:
        ids = split_by_key([g.qid for g in groups], cfg.data.eval_ratio, cfg.data.split_seed)[1]
    held = [g for g in groups if g.qid in ids]
    if len(held) != len(ids):
        raise ValidationError(f"{len(ids) - len(held)} of the {len(ids)} held-out queries of split.json are no "
                              "longer in the recipe's data")
    held, part = _first(held, limit)
    mix = getattr(model, "retrieval_mix", None)  # the bundle's calibrated share (models/rerank_mix.py)
    # the baselines' nDCG@10 per query again (cheap: BM25, and the run's cached embeddings)
    rows = rerank_baseline_rows(held, groups, cfg.data.mine_with, run_dir / "cache")
    with progress_bar("held-out rerank", sum(len(g.candidates) for g in held), "pair") as bar:
        figs = evaluate_groups(served_rerank_scores(model, bar, bm25_score_fn(groups, share=True)), held,
                               ood_sources=cfg.data.leave_out, vs=rows)
    if mix is not None:
        figs["cross_weight"] = mix.cross_weight
        figs["mix_lexical_weight"], figs["mix_lexical_min_cosine"] = mix.lexical_weight, mix.lexical_min_cosine
    return figs, f"the run's held-out split ({part} queries)"


def demo_rerank_groups(depth: int = RERANK_DEPTH) -> list[Any]:
    """The demo questions (models/demo/qa.jsonl) with their BM25 top-``depth`` demo documents,
    labelled by ``supporting``; questions whose top documents hold no supporting one are left
    out (no reranking can find it)."""
    from searchsmith.models.demo import corpus_path, qa_path
    from searchsmith.training.rerank_data import QueryGroup

    docs = [rec for _, rec in iter_jsonl(corpus_path())]
    bm = BM25([d["text"] for d in docs])
    groups = []
    for _, qa in iter_jsonl(qa_path()):
        top = [docs[i] for i, _ in bm.top_k(qa["query"], depth)]
        labels = [int(d["id"] in qa["supporting"]) for d in top]
        if any(labels):
            groups.append(QueryGroup(str(qa["id"]), "demo", qa["query"], [d["text"] for d in top], labels))
    if not groups:
        raise ValidationError("demo held-out data: no question has a supporting document in its BM25 top "
                              f"{depth}")
    return groups


def rerank_baseline_rows(groups: list[Any], bm25_groups: list[Any], embedder: str,
                         cache: Path | None) -> dict[str, list[float]]:
    """BM25's (statistics over ``bm25_groups``), the bi-encoder ``embedder``'s and the hybrid
    order's (``none``: both left out) nDCG@10 on each of ``groups``: the baselines' side of the reranker's paired
    tests (training/reranker.py ``paired_tests``), as the recipe measures them."""
    from searchsmith.training.data import CachedEmbedder
    from searchsmith.training.reranker import (
        bm25_score_fn,
        cosine_score_fn,
        group_ndcgs,
        hybrid_score_fn,
    )

    rows = {"bm25": group_ndcgs(bm25_score_fn(bm25_groups), groups)}
    if embedder != "none":
        cosine = cosine_score_fn(CachedEmbedder(embedder, cache).encode)
        rows["bi_encoder"] = group_ndcgs(cosine, groups)
        rows["hybrid"] = group_ndcgs(hybrid_score_fn(bm25_groups, cosine), groups)
    return rows


@functools.cache
def _demo_rerank_baselines(limit: int | None) -> tuple[dict[str, float], dict[str, list[float]]]:
    """BM25 and bi-encoder (the default embedder's cosine) figures on the demo groups, named as
    the recipe names its baselines, and their nDCG@10 per group; they do not depend on the
    model under test, so they are computed once per process."""
    from searchsmith.models.export import flat_numbers
    from searchsmith.training.data import CachedEmbedder
    from searchsmith.training.reranker import (
        bm25_score_fn,
        cosine_score_fn,
        evaluate_groups,
        flat_baselines,
        group_ndcgs,
        hybrid_score_fn,
    )

    groups, _ = _first(demo_rerank_groups(), limit)
    scorers = {"bm25": bm25_score_fn(groups)}
    try:
        scorers["bi_encoder"] = cosine_score_fn(CachedEmbedder("default", None).encode)
        scorers["hybrid"] = hybrid_score_fn(groups, scorers["bi_encoder"])
    except (SearchsmithError, OSError) as exc:  # no embedder on this machine: BM25 only
        log.warning("held-out figures: no bi-encoder baseline on the demo data (%s)", exc)
    baselines = {name: evaluate_groups(fn, groups) for name, fn in scorers.items()}
    rows = {name: group_ndcgs(fn, groups) for name, fn in scorers.items()}
    return flat_numbers({**baselines, **flat_baselines(baselines)}, "baselines/"), rows


def _rerank_demo(model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.reranker import evaluate_groups

    groups, part = _first(demo_rerank_groups(), limit)
    baselines, rows = _demo_rerank_baselines(limit)
    with progress_bar("held-out rerank (demo)", sum(len(g.candidates) for g in groups), "pair") as bar:
        figs = _numbers(evaluate_groups(Chunked(model, bar).score_pairs, groups, vs=rows))
    return {**figs, **baselines}, (
        f"the demo held-out data ({part} questions of models/demo/qa.jsonl, their BM25 top {RERANK_DEPTH} "
        "demo documents)")


def _decompose_run_split(run_dir: Path, model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.decomposer import evaluate_with_ood, make_splits, rewrite_passages

    cfg = run_recipe_config(run_dir)
    train, heldout, _ = make_splits(cfg)
    # as the recipe scores it: the real held-out items when there are any (recipes/decomposer)
    items = [e for e in heldout if e["origin"] != "synthetic"] or heldout
    n_dec = sum(e["task"] == "decompose" for e in items)
    n_rw = len(items) - n_dec
    total = min(n_dec, limit or n_dec) + min(n_rw, limit or n_rw)
    with progress_bar("held-out decompose", total) as bar:
        figs = evaluate_with_ood(Chunked(model, bar, 16), items, cfg.data.leave_out, limit=limit or 0,
                                 extra_docs=rewrite_passages(train))
    part = f"{int(figs.get('decompose_items', 0))} of {n_dec} decompositions, " \
           f"{int(figs.get('rewrite_items', 0))} of {n_rw} rewrites"
    return figs, f"the run's held-out split ({part})"


def _cite_run_split(run_dir: Path, model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.citation import best_sentence_cosines
    from searchsmith.training.evaluate_cite import (
        cite_pairs,
        cite_report,
        read_cite_items,
        residual_cosines,
    )

    path = run_dir / "heldout.cite.jsonl"  # written by the citation recipe
    if not path.is_file():
        raise ConfigError(f"{path} is missing (the citation recipe writes the held-out split there)")
    items, part = _first(read_cite_items(path, model.labels), limit)
    try:
        data = run_recipe_config(run_dir).data
    except (SearchsmithError, OSError):  # no recipe to read: no out-of-domain figures, no paired tests
        data = None
    ood = data.leave_out if data is not None else []
    # cosine attribution on the same pairs again (the run's embedding cache): the paired tests
    attribution = None
    if data is not None and data.baseline_embedder != "none":
        attribution = (best_sentence_cosines(data.baseline_embedder, cite_pairs(items), run_dir / "cache"),
                       float(data.baseline_cosine_threshold))
    with progress_bar("held-out cite", None, "input") as bar:
        figs, _ = cite_report(Chunked(model, bar), items, float(model.support_threshold),
                              residual_cosines(model, items), ood_sources=ood, attribution_cosine=attribution)
    return figs, f"the run's held-out split ({part} sentences of heldout.cite.jsonl)"


def _read_run_split(run_dir: Path, model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.evaluate_read import heldout_items, read_report, run_baseline_rows

    cfg = run_recipe_config(run_dir)
    items, part = _first(heldout_items(run_dir), limit)
    # the run's own baselines win over these (run_baselines); a run recorded before the typed
    # span's baseline gets it here
    figs, _ = read_report(model, items, float(model.min_score), cfg.data.leave_out,
                          run_baseline_rows(run_dir, cfg.mine_with, items))
    return figs, f"the run's held-out split ({part} questions)"


def _images_run_split(run_dir: Path, model: Any, limit: int | None) -> tuple[dict[str, float], str]:
    from searchsmith.training.evaluate_images import (
        ood_placement_report,
        placement_report,
        retrieval_report,
    )
    from searchsmith.training.image_data import placement_docs, split_records
    from searchsmith.training.images import load_records, ood_label

    cfg = run_recipe_config(run_dir)
    by_source = load_records(cfg.data)
    ids = _split_eval_ids(run_dir)
    if ids is None:  # the recipe's split, rebuilt
        held = split_records(by_source, cfg.data.eval_ratio, cfg.data.split_seed, cfg.data.leave_out)[1]
    else:  # the recipe's order: per source, then per record
        held = [r for recs in by_source.values() for r in recs if r.id in ids]
    if not held:
        raise ValidationError("no held-out image of split.json is in the recipe's data any more")
    held, part = _first(held, limit)
    seed, size = cfg.data.split_seed, cfg.data.render_size
    with progress_bar("held-out images", None, "input") as bar:
        model = Chunked(model, bar)
        figs = retrieval_report(model, held, size)
        if placement_docs(held, seed):  # as the recipe: placement documents over the held-out images
            figs.update(placement_report(model, held, size, seed))
        # and the held-out photos' documents, which the pipeline's images gates read
        cosine_embed = None  # the caption-cosine placement the gate tests the model against
        if cfg.data.baseline_embedder != "none":
            from searchsmith.training.data import CachedEmbedder

            cosine_embed = CachedEmbedder(cfg.data.baseline_embedder, run_dir / "cache").encode
        figs.update(ood_placement_report(model, held, size, ood_label(by_source, cfg.data), cfg.data.ood_docs, seed,
                                         cosine_embed=cosine_embed))
    return figs, f"the run's held-out split ({part} images)"


# ----------------------------------------------------------------------------- SciFact -> BEIR

# The SciFact open part in the shared data (scifact-beir's --claims and --corpus defaults).
SCIFACT_CLAIMS = f"{SHARED_DATA}/scifact/claims_dev.jsonl"
SCIFACT_CORPUS = f"{SHARED_DATA}/scifact/corpus_subset.jsonl"


def write_scifact_beir(out_dir: str | Path,
                       claims: str | Path = SCIFACT_CLAIMS,
                       corpus: str | Path = SCIFACT_CORPUS,
                       only_ids: set[str] | None = None) -> Path:
    """Write the SciFact open part as a BEIR folder plus ``run.bm25.trec`` (its BM25 top-10) and
    ``protocol.json`` (:data:`SCIFACT_PROTOCOL`, repeated in the rerank / retrieve outputs).

    Args:
        only_ids: keep only these claim ids (e.g. a run's held-out split, ``split.json``).
    """
    claims_p = resolve_data_path(claims, "claims")
    corpus_p = resolve_data_path(corpus, "corpus")
    docs = SCIFACT_ABSTRACT.read(corpus_p, "corpus", ("doc_id", "title", "abstract"))
    outside = scifact_outside_corpus({str(d["doc_id"]): d["abstract"] for d in docs}, f"{corpus_p} (corpus)")
    claim_rows = SCIFACT_CLAIM.read(claims_p, "claims", ("id", "claim", "qrels"), ("bm25_top10",), then=outside)
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out / "corpus.jsonl", [
        {"_id": str(d["doc_id"]), "title": d["title"], "text": " ".join(d["abstract"])} for d in docs])
    rows, qrows, run = [], [], []
    for c in claim_rows:
        cid = str(c["id"])
        if not c["qrels"] or (only_ids is not None and cid not in only_ids):
            continue
        qrows.append({"_id": cid, "text": c["claim"]})
        rows.extend(f"{cid}\t{d}\t1" for d in c["qrels"])
        for rank, (d, s) in enumerate(c.get("bm25_top10") or [], start=1):
            run.append(f"{cid} Q0 {d} {rank} {s} bm25")
    write_jsonl_atomic(out / "queries.jsonl", qrows)
    note = {"dataset": "scifact", "documents": len(docs), "queries": len(qrows), "note": SCIFACT_PROTOCOL}
    for name, lines in (("qrels/test.tsv", ["query-id\tcorpus-id\tscore", *rows]),
                        ("run.bm25.trec", run), ("protocol.json", [json.dumps(note, indent=2)])):
        tmp = out / f"{name}.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(out / name)
    return out


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.evaluate")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scifact-beir", help="write the SciFact open part as a BEIR folder")
    s.add_argument("out_dir")
    s.add_argument("--claims", default=SCIFACT_CLAIMS, help="SciFact claims JSONL (default %(default)s, in the "
                   "current folder, else beside the repository)")
    s.add_argument("--corpus", default=SCIFACT_CORPUS, help="SciFact abstracts JSONL (default %(default)s, as "
                   "--claims)")
    s.add_argument("--heldout-of", help="a reranker run folder: keep only its held-out claims")
    f = sub.add_parser("beir-full", help="BEIR-style run on a BEIR folder: BM25 top-100 and the bi-encoder over "
                                         "the whole corpus, and the BM25 top-100 reranked by --bundle/--checkpoint")
    f.add_argument("data", help="a BEIR folder (e.g. written by scifact-beir)")
    f.add_argument("--bundle", metavar="DIR", help="a 'rerank' bundle to rerank the BM25 top --depth")
    f.add_argument("--checkpoint", metavar="RUN_DIR", help="a reranker training run (instead of --bundle)")
    f.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    f.add_argument("--depth", type=int, default=FULL_CORPUS_DEPTH,
                   help="first-stage depth and recall cut-off (default %(default)s, BEIR's recall@100)")
    f.add_argument("--no-dense", action="store_true", help="skip the bi-encoder")
    f.add_argument("--limit", type=int, default=0, help="only the first N queries")
    f.add_argument("--per-item", help="also write one JSON line per query to this file")
    a = p.parse_args(argv)
    if a.cmd == "beir-full":
        print(json.dumps(eval_full_corpus(a), indent=2, sort_keys=True))
        return 0
    only = None
    if a.heldout_of:
        split = Path(a.heldout_of) / "split.json"
        if not split.is_file():
            raise ConfigError(f"--heldout-of: {split} not found (written by the reranker recipe)")
        only = {q.removeprefix("scifact-") for q in json.loads(split.read_text())["eval"]
                if q.startswith("scifact-")}
    claims = resolve_data_dir(a.claims, "--claims", default=SCIFACT_CLAIMS, metavar="FILE")
    corpus = resolve_data_dir(a.corpus, "--corpus", default=SCIFACT_CORPUS, metavar="FILE")
    out = write_scifact_beir(a.out_dir, claims, corpus, only)
    print(f"wrote {out} (corpus.jsonl, queries.jsonl, qrels/test.tsv, run.bm25.trec)")
    return 0



# ----------------------------------------------------------------------------- other tasks
# The bodies live in their own modules (decomposer, evaluate_cite, evaluate_images); each loads its
# model with load_eval_model, so --bundle and --checkpoint go through the same code.


def _qdmr(graph: dict[str, Any]) -> tuple[list[str], list[list[int]]]:
    """(steps, 1-based dependencies) of a graph's JSON, its ``#id`` references renumbered by
    position (Break numbers steps 1..n)."""
    nodes = graph["nodes"]
    pos = {str(n["id"]): i for i, n in enumerate(nodes, start=1)}

    def renumber(m: Any) -> str:
        return f"#{pos.get(str(int(m.group(1))), int(m.group(1)))}"

    steps = [re.sub(r"#\s*(\d+)", renumber, str(n["text"])) for n in nodes]
    deps = [[pos[str(d)] for d in n.get("depends_on", []) if str(d) in pos] for n in nodes]
    return steps, deps


def break_figures(question: str, pred: dict[str, Any], gold: dict[str, Any], suffix: str = "",
                  item: object = "") -> dict[str, float]:
    """Break's metrics of one predicted graph (JSON) against the gold one, each name + ``suffix``.

    * ``decompose_sari``, ``decompose_em``, ``decompose_normalized_em``, ``decompose_ged`` (lower
      is better), ``decompose_ged_exact`` (1 when the edit-distance search finished): the
      approximations of :mod:`searchsmith.models.metrics` (lower-cased SARI; GED with articles,
      punctuation and reference numbers ignored by the node similarity), kept so that figures
      recorded before stay comparable;
    * ``decompose_break_sari``, ``decompose_break_em``, ``decompose_break_normalized_em``,
      ``decompose_break_ged``, ``decompose_break_ged_exact``: as Break's official scorer computes
      them (:mod:`searchsmith.training.break_metrics`, which lists what still differs): the
      figures to set beside the Break leaderboard.

    Raises:
        ValidationError: naming ``item`` and ``pred`` or ``gold`` when a graph has no steps.
    """
    from searchsmith.training.break_metrics import break_scores

    ps, pd = _qdmr(pred)
    gs, gd = _qdmr(gold)
    ged, exact = qdmr_ged(ps, gs, pd, gd)
    scores = break_scores(question, ps, gs, pd, gd, field=f"item {item}" if item != "" else "")
    return {f"decompose_sari{suffix}": qdmr_sari(question, ps, gs),
            f"decompose_em{suffix}": qdmr_exact_match(ps, gs),
            f"decompose_normalized_em{suffix}": qdmr_normalized_em(ps, gs, pd, gd),
            f"decompose_ged{suffix}": ged, f"decompose_ged_exact{suffix}": float(exact),
            f"decompose_break_sari{suffix}": scores.sari,
            f"decompose_break_em{suffix}": scores.exact_match,
            f"decompose_break_normalized_em{suffix}": scores.normalized_em,
            f"decompose_break_ged{suffix}": scores.ged,
            f"decompose_break_ged_exact{suffix}": float(scores.ged_exact)}


def _one_node(question: str) -> dict[str, Any]:
    # A "#1" in a question is text (a title such as "Computer Geek #1"), not a reference: written
    # without the "#", as the QDG's repair writes such literals, so the graph stays valid.
    text = re.sub(r"#\s*(\d+)", r"\1", question)
    return {"type": "terminal", "nodes": [{"id": "1", "text": text, "depends_on": []}]}


def eval_decompose(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval decompose --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: graph
    validity, type, node-count accuracy and node-text F1 (the recipe's figures,
    :func:`searchsmith.training.decomposer.evaluate`), and beside them Break's SARI, exact match,
    normalized exact match and GED (:func:`break_figures`: ``decompose_break_*`` as Break's
    official scorer computes them, ``decompose_sari`` etc. the earlier approximations), each also
    for the untrained baseline that keeps the question as one node (``..._one_node``), with
    bootstrap 95 % intervals over the items. Write a held-out file with
    ``python -m searchsmith.training.decompose_data --out DIR``.
    """
    from searchsmith.models.qdg import QDG
    from searchsmith.training.break_metrics import GED_TIMEOUT_S
    from searchsmith.training.decompose_data import read_decomposition_eval
    from searchsmith.training.decomposer import evaluate, node_f1

    rows = read_decomposition_eval(args.data)
    if getattr(args, "limit", 0):
        rows = rows[: args.limit]
    em = load_eval_model("decompose", args)
    items = [{"id": r.get("id", n), "task": "decompose", "query": r["query"],
              "graph": QDG.from_json({"type": r["type"], "nodes": r["nodes"]}).to_json(),
              **({"origin": r["origin"]} if r.get("origin") else {})}
             for n, r in enumerate(rows)]
    per_item: list[dict[str, Any]] = []
    with progress_bar("eval decompose", len(items)) as bar:
        metrics: dict[str, Any] = {"task": "decompose", "model": em.origin,
                                   **evaluate(Chunked(em.model, bar, 16), items, per_item=per_item)}
    for row in per_item:
        one = _one_node(row["query"])
        row["decompose_node_f1_one_node"] = node_f1(QDG.from_json(one), QDG.from_json(row["gold"]))
        row.update(break_figures(row["query"], row["pred"], row["gold"], item=row["id"]))
        row.update(break_figures(row["query"], one, row["gold"], "_one_node", item=row["id"]))
    if per_item:
        for key in [k for k in per_item[0] if k.startswith(("decompose_sari", "decompose_em", "decompose_normalized",
                                                             "decompose_ged", "decompose_break_",
                                                             "decompose_node_f1_one"))]:
            metrics[key] = sum(r[key] for r in per_item) / len(per_item)
    metrics["break_metrics"] = (
        "Break's metrics (Wolfson et al. 2020). decompose_break_*: as Break's official scorer computes them "
        "(searchsmith.training.break_metrics): SARI (n-grams 1-4, case-sensitive) of the flat step string "
        "('return' dropped, '#k' as '@@k@@', steps joined by ' @@SEP@@ ', split on spaces) with the question "
        "split on spaces as source; exact match of the lower-cased strings; GED normalized by max(nodes + edges), "
        f"lower is better (exact networkx search within {GED_TIMEOUT_S:g} s per item, else the best upper bound: "
        "decompose_break_ged_exact is the share that finished; node substitution 1 - the edit-distance match "
        "ratio of the steps' lemmas, rule-based lemmas instead of spaCy's); normalized exact match with a "
        "smaller normal form than Break's (lemmas, case, articles, punctuation, the order of independent steps). "
        "decompose_sari / _em / _normalized_em / _ged: the earlier approximations (lower-cased SARI; GED node "
        "similarity of difflib over tokens without articles, punctuation or reference numbers), kept for "
        "comparison with recorded runs. *_one_node: the question kept as one node.")
    origins = [it.get("origin") for it in items]
    if per_item and any(origins):
        for row, origin in zip(per_item, origins, strict=True):
            row["origin"] = origin or "unknown"
        metrics["by_origin"] = figures_by_origin(per_item)
    _write_per_item(getattr(args, "per_item", None), per_item)
    return with_bootstrap(metrics, per_item)


# the figures eval decompose reports for each origin of its items (by_origin)
ORIGIN_FIGURES = ("decompose_break_sari", "decompose_break_ged", "decompose_break_normalized_em",
                  "decompose_node_f1", "decompose_break_sari_one_node", "decompose_break_ged_one_node",
                  "decompose_node_f1_one_node")


def figures_by_origin(per_item: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Means of :data:`ORIGIN_FIGURES` per item ``origin`` (``n`` the items), and ``break``: every
    Break question together (origins ``break:<its source dataset>``). Issue 17 sets Break's SARI
    and GED targets on Break's own questions, which a pooled held-out split mixes with MuSiQue's
    and StrategyQA's (written as questions, not as Break's copy-based steps)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in per_item:
        origin = str(row.get("origin") or "unknown")
        groups.setdefault(origin, []).append(row)
        if origin.startswith("break:"):
            groups.setdefault("break", []).append(row)
    out: dict[str, dict[str, float]] = {}
    for origin, rows in sorted(groups.items()):
        out[origin] = {"n": len(rows)}
        for key in ORIGIN_FIGURES:
            have = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
            if have:
                out[origin][key] = round(sum(have) / len(have), 4)
    return out


def _write_per_item(path: str | None, rows: list[dict[str, Any]]) -> None:
    if path:
        write_jsonl_atomic(path, rows)


def rewrite_retrieval(rows: Sequence[dict[str, Any]], preds: Sequence[str],
                      extra_docs: Sequence[str] = (), k: int = NDCG_K,
                      others: Mapping[str, Sequence[str]] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The retrieval each rewrite drives, for the turns that carry their answer ``passage``.

    Protocol (the CAsT qrels and collections are not in ../shared/data): the corpus is every
    distinct ``passage`` of ``rows`` (CAsT's canonical answer passages, so the earlier turns of
    the same topic are hard distractors) plus ``extra_docs``; a turn's own passage is its one
    relevant document (a known-item search). BM25 ranks the corpus with the model's rewrite,
    the raw query (copy baseline) and the manual rewrite (upper bound). Reported: nDCG@k and
    MRR@k of each, and ``agreement@k``: nDCG@k of a ranking against the manual rewrite's top k
    taken as relevant (a proxy; the manual rewrite scores 1 by construction). This is not CAsT's
    official NDCG (graded qrels over the full collections). ``others``: more rewrites to rank
    with, one per row, by name (``heuristic``: the pipeline's no-model rewrite), reported with
    the suffix ``_<name>``.

    Returns:
        ``(metrics, per-turn rows)``; empty when no row has a passage.
    """
    others = dict(others or {})
    for name, texts in others.items():
        if len(texts) != len(rows):
            raise ValueError(f"rewrite_retrieval: others[{name!r}] has {len(texts)} rewrites for {len(rows)} rows")
    turns = [(n, r, p) for n, (r, p) in enumerate(zip(rows, preds, strict=True))
             if isinstance(r.get("passage"), str) and r["passage"]]
    if not turns:
        return {}, []
    passages = list(dict.fromkeys(" ".join(r["passage"].split()) for _, r, _ in turns))
    docs = passages + [d for d in extra_docs if d not in set(passages)]
    gold_of = {p: i for i, p in enumerate(passages)}
    bm = BM25(docs)
    out_rows = []
    for n, r, pred in turns:
        gold = gold_of[" ".join(r["passage"].split())]
        lists = {v: [i for i, _ in bm.top_k(text, k)] for v, text in
                 (("model", pred), ("copy_query", r["query"]), *((name, t[n]) for name, t in others.items()),
                  ("manual", r["rewrite"]))}
        reference = set(lists["manual"])
        row: dict[str, Any] = {"id": r.get("id"), "query": r["query"], "pred": pred}
        for v, ranked in lists.items():
            suffix = "" if v == "model" else f"_{v}"
            labels = [int(i == gold) for i in ranked]
            row[f"rewrite_retrieval_ndcg@{k}{suffix}"] = ndcg_at_k(labels, k, [1])
            row[f"rewrite_retrieval_mrr@{k}{suffix}"] = mrr_at_k(labels, k)
            if v != "manual":
                agree = [int(i in reference) for i in ranked]
                row[f"rewrite_retrieval_agreement@{k}{suffix}"] = ndcg_at_k(agree, k, [1] * len(reference))
        out_rows.append(row)
    keys = [key for key in out_rows[0] if key.startswith("rewrite_retrieval")]
    metrics: dict[str, Any] = {key: sum(r[key] for r in out_rows) / len(out_rows) for key in keys}
    metrics["rewrite_retrieval_turns"] = len(out_rows)
    metrics["rewrite_retrieval_documents"] = len(docs)
    return attach_intervals(metrics, out_rows, keys=keys), out_rows


REWRITE_RETRIEVAL_PROTOCOL = (
    "rewrite_retrieval_*: a known-item proxy, not CAsT's official NDCG (no CAsT qrels or collection here): "
    "BM25 over the turns' canonical answer passages (CAsT 2021/2022 canonical_response, exported as 'passage'; "
    "plus --corpus JSONL 'text' when given), each turn's own passage relevant; the model rewrite, the raw query "
    "(_copy_query), the pipeline's heuristic rewrite without a model (_heuristic: the query plus salient history "
    "terms) and the manual rewrite (_manual, upper bound). agreement@10: nDCG@10 against the manual "
    "rewrite's top 10 taken as relevant.")


def heuristic_rewrites(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The pipeline's no-model rewrite (:class:`~searchsmith.serving.rewrite.HeuristicRewriter`)
    of each ``{"history", "query"}`` row."""
    from searchsmith.serving.rewrite import HeuristicRewriter, parse_history

    rewriter = HeuristicRewriter()
    return [rewriter.rewrite(parse_history(r.get("history") or [], field=f"rows[{n}].history"), r["query"])
            for n, r in enumerate(rows)]


def eval_rewrite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval rewrite --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: rewrite
    EM / token F1 beside the copy-the-query baseline and, for the turns whose record carries its
    answer ``passage`` (the CAsT export does), the NDCG of the retrieval each rewrite drives
    (:func:`rewrite_retrieval`: model, raw query, manual rewrite), each with its bootstrap 95 %
    interval. ``args.corpus`` (JSONL with ``text``) adds distractor documents.
    """
    from searchsmith.training.decompose_data import read_rewrite_eval
    from searchsmith.training.decomposer import evaluate, rewrite_metrics

    rows = read_rewrite_eval(args.data)
    if getattr(args, "limit", 0):
        rows = rows[: args.limit]
    em = load_eval_model("rewrite", args)
    items = [{"id": r.get("id", n), "task": "rewrite", "query": r["query"], "target": r["rewrite"],
              "history": [h["content"] for h in r.get("history", []) if h.get("role", "user") == "user"]}
             for n, r in enumerate(rows)]
    per_item: list[dict[str, Any]] = []
    with progress_bar("eval rewrite", len(items)) as bar:
        metrics: dict[str, Any] = {"task": "rewrite", "model": em.origin,
                                   **evaluate(Chunked(em.model, bar, 16), items, per_item=per_item, retrieval=False)}
    for row, r in zip(per_item, rows, strict=True):  # the copy-the-query baseline, item by item
        copy = rewrite_metrics([r["query"]], [r["rewrite"]])
        row.update(rewrite_em_copy_query=copy["rewrite_em"], rewrite_f1_copy_query=copy["rewrite_f1"])
    copy = rewrite_metrics([r["query"] for r in rows], [r["rewrite"] for r in rows])
    metrics["rewrite_em_copy_query"] = copy["rewrite_em"]
    metrics["rewrite_f1_copy_query"] = copy["rewrite_f1"]
    heuristic = heuristic_rewrites(rows)  # what the pipeline does without a model
    for row, r, h in zip(per_item, rows, heuristic, strict=True):
        row["rewrite_f1_heuristic"] = rewrite_metrics([h], [r["rewrite"]])["rewrite_f1"]
    metrics["rewrite_f1_heuristic"] = rewrite_metrics(heuristic, [r["rewrite"] for r in rows])["rewrite_f1"]
    out = with_bootstrap(metrics, per_item)
    extra: list[str] = []
    if getattr(args, "corpus", None):
        extra = [f"{d.get('title') or ''} {d['text']}".strip() for d in read_jsonl(args.corpus, required=("text",))]
    retrieval, retrieval_rows = rewrite_retrieval(
        [{**r, "id": item["id"]} for r, item in zip(rows, items, strict=True)], [row["pred"] for row in per_item], extra,
        others={"heuristic": heuristic})
    if retrieval:
        from searchsmith.training.decomposer import gain_of_rows

        by_id = {row["id"]: row for row in retrieval_rows}
        for row in per_item:
            row.update({k: v for k, v in by_id.get(row["id"], {}).items() if k.startswith("rewrite_retrieval")})
        bootstrap = out.pop("bootstrap")
        out.update(retrieval)
        out.update(gain_of_rows(retrieval_rows))
        out["rewrite_retrieval_protocol"] = REWRITE_RETRIEVAL_PROTOCOL
        out["bootstrap"] = bootstrap
    _write_per_item(getattr(args, "per_item", None), per_item)
    return out


def eval_cite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval cite --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: attribution
    precision / recall / F1 / ROC AUC and entity F1."""
    from searchsmith.training.evaluate_cite import eval_cite as run

    return run(args)


def eval_read(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval read --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: short-answer
    EM / F1 per source, answered rate and no-answer accuracy."""
    from searchsmith.training.evaluate_read import eval_read as run

    return run(args)


def eval_images(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval images --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: placement
    accuracy and image/text recall@1/@5."""
    from searchsmith.training.evaluate_images import eval_images as run

    return run(args)



#: ``searchsmith eval`` task -> its evaluator; the keys are the registry's evaluations
#: (``models.tasks.Task.evaluations``) except ``route``, which the serving layer evaluates
EVALUATORS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "retrieve": eval_retrieve, "rerank": eval_rerank, "decompose": eval_decompose, "rewrite": eval_rewrite,
    "cite": eval_cite, "read": eval_read, "images": eval_images,
}


if __name__ == "__main__":  # pragma: no cover
    from searchsmith.models.console import run_module_main

    raise SystemExit(run_module_main(_main, "python -m searchsmith.training.evaluate"))
