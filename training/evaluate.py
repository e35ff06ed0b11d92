"""``searchsmith eval`` entries of the training tasks (one flat function per task).

``eval_rerank``: BEIR layout (``corpus.jsonl`` ``_id,title,text``; ``queries.jsonl``
``_id,text``; ``qrels/test.tsv`` ``query-id corpus-id score``), candidates from a TREC run
(``--run``) or the project's first stage (``--first-stage bm25|dense``), scored by a
trained cross-encoder (``--checkpoint RUN_DIR``). Reports nDCG@10 / MRR@10 / recall@K of
the reranked lists and of the first stage's own order.

``python -m searchsmith.training.evaluate scifact-beir OUT_DIR`` writes the SciFact open
part (../shared/data/scifact) as such a folder, with its BM25 top-10 as ``run.bm25.trec``.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.training.data import iter_jsonl, read_jsonl, resolve_data_path, write_jsonl_atomic
from searchsmith.training.metrics import BM25, mrr_at_k, ndcg_at_k, recall_at_k

# How many first-stage candidates the cross-encoder reranks per query (without --run).
RERANK_DEPTH = 20
NDCG_K = 10


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
    with open(p, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
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


def _load_cross_encoder(args: argparse.Namespace) -> tuple[Any, Any, int]:
    if getattr(args, "bundle", None):
        raise ConfigError("--bundle: ONNX bundles are not supported by 'eval rerank' in this "
                          "build yet (they come with 'searchsmith export'); use --checkpoint RUN_DIR")
    ckpt = getattr(args, "checkpoint", None)
    if not ckpt:
        raise ConfigError("eval rerank: give --checkpoint RUN_DIR (a 'searchsmith train' run folder)")
    root = Path(ckpt)
    model_dir = root / "model" if (root / "model" / "config.json").is_file() else root
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"--checkpoint: {str(root)!r} has neither model/config.json nor "
                          "config.json; pass the run folder written by 'searchsmith train'")
    from searchsmith.models.reranker import load_reranker
    from transformers import AutoTokenizer

    model = load_reranker(model_dir)  # either head (models/reranker.py); BundleError if unusable
    tok = AutoTokenizer.from_pretrained(model_dir)
    max_length = 256
    run_json = root / "run.json"
    if run_json.is_file():
        max_length = int(json.loads(run_json.read_text(encoding="utf-8")).get("max_length", 256))
    return model, tok, max_length


def _list_metrics(ranked: list[str], rels: dict[str, int], k: int) -> dict[str, float]:
    labels = [rels.get(d, 0) for d in ranked]
    n_rel = sum(1 for v in rels.values() if v > 0)
    return {f"ndcg@{NDCG_K}": ndcg_at_k(labels, NDCG_K, list(rels.values())),
            f"mrr@{NDCG_K}": mrr_at_k(labels, NDCG_K), f"recall@{k}": recall_at_k(labels, k, n_rel)}


def eval_rerank(args: argparse.Namespace) -> dict[str, Any]:
    """Rerank first-stage candidates with a trained cross-encoder; metrics of both orders.

    ``args``: ``.data`` (BEIR folder), ``.checkpoint`` (run folder), ``.bundle`` (not yet),
    ``.run`` (TREC file) or ``.first_stage`` (bm25|dense), ``.k`` (recall cut-off),
    ``.limit`` (first N queries), ``.per_item`` (JSONL per query).
    """
    from searchsmith.training.reranker import score_pairs

    corpus, queries, qrels = read_beir(args.data)
    qids = [q for q in queries if any(v > 0 for v in qrels.get(q, {}).values())]
    if getattr(args, "limit", 0):
        if args.limit < 0:
            raise ConfigError(f"--limit must be >= 0, got {args.limit}")
        qids = qids[:args.limit]
    k = int(getattr(args, "k", 3) or 3)
    model, tok, max_length = _load_cross_encoder(args)
    if getattr(args, "run", None):
        cands = read_trec_run(args.run, corpus)
        stage = f"run:{Path(args.run).name}"
    else:
        stage = getattr(args, "first_stage", "bm25") or "bm25"
        cands = _first_stage(stage, corpus, queries, qids)
    pairs, spans = [], []
    for q in qids:
        docs = [d for d, _ in cands.get(q, [])]
        spans.append((q, len(pairs), docs))
        pairs.extend((queries[q], corpus[d]) for d in docs)
    scores = score_pairs(model, tok, pairs, max_length) if pairs else []
    items, sums_first, sums_re = [], {}, {}
    for q, start, docs in spans:
        s = scores[start:start + len(docs)]
        reranked = [d for _, d in sorted(zip(s, docs, strict=True), key=lambda t: -t[0])]
        first = _list_metrics(docs, qrels[q], k)
        re = _list_metrics(reranked, qrels[q], k)
        for key, v in first.items():
            sums_first[key] = sums_first.get(key, 0.0) + v
        for key, v in re.items():
            sums_re[key] = sums_re.get(key, 0.0) + v
        items.append({"qid": q, "candidates": len(docs), "top": reranked[:NDCG_K],
                      **re, **{f"first_stage/{key}": v for key, v in first.items()}})
    n = len(qids)
    if n == 0:
        raise ValidationError(f"{args.data}: no query with a relevant document to evaluate")
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, items)
    out: dict[str, Any] = {"task": "rerank", "queries": n, "first_stage": stage,
                           "rerank_depth": RERANK_DEPTH if not getattr(args, "run", None) else None}
    out.update({key: v / n for key, v in sums_re.items()})
    out.update({f"first_stage/{key}": v / n for key, v in sums_first.items()})
    return out


# ----------------------------------------------------------------------------- SciFact -> BEIR


def write_scifact_beir(out_dir: str | Path,
                       claims: str | Path = "../shared/data/scifact/claims_dev.jsonl",
                       corpus: str | Path = "../shared/data/scifact/corpus_subset.jsonl",
                       only_ids: set[str] | None = None) -> Path:
    """Write the SciFact open part as a BEIR folder plus ``run.bm25.trec`` (its BM25 top-10).

    Args:
        only_ids: keep only these claim ids (e.g. a run's held-out split, ``split.json``).
    """
    claims_p = resolve_data_path(claims, "claims")
    corpus_p = resolve_data_path(corpus, "corpus")
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    docs = read_jsonl(corpus_p, required=("doc_id", "title", "abstract"))
    write_jsonl_atomic(out / "corpus.jsonl", [
        {"_id": str(d["doc_id"]), "title": d["title"], "text": " ".join(d["abstract"])} for d in docs])
    rows, qrows, run = [], [], []
    for c in read_jsonl(claims_p, required=("id", "claim", "qrels")):
        cid = str(c["id"])
        if not c["qrels"] or (only_ids is not None and cid not in only_ids):
            continue
        qrows.append({"_id": cid, "text": c["claim"]})
        rows.extend(f"{cid}\t{d}\t1" for d in c["qrels"])
        for rank, (d, s) in enumerate(c.get("bm25_top10") or [], start=1):
            run.append(f"{cid} Q0 {d} {rank} {s} bm25")
    write_jsonl_atomic(out / "queries.jsonl", qrows)
    for name, lines in (("qrels/test.tsv", ["query-id\tcorpus-id\tscore", *rows]),
                        ("run.bm25.trec", run)):
        tmp = out / f"{name}.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(out / name)
    return out


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.evaluate")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scifact-beir", help="write the SciFact open part as a BEIR folder")
    s.add_argument("out_dir")
    s.add_argument("--claims", default="../shared/data/scifact/claims_dev.jsonl")
    s.add_argument("--corpus", default="../shared/data/scifact/corpus_subset.jsonl")
    s.add_argument("--heldout-of", help="a reranker run folder: keep only its held-out claims")
    a = p.parse_args(argv)
    only = None
    if a.heldout_of:
        split = Path(a.heldout_of) / "split.json"
        if not split.is_file():
            raise ConfigError(f"--heldout-of: {split} not found (written by the reranker recipe)")
        only = {q.removeprefix("scifact-") for q in json.loads(split.read_text())["eval"]
                if q.startswith("scifact-")}
    out = write_scifact_beir(a.out_dir, a.claims, a.corpus, only)
    print(f"wrote {out} (corpus.jsonl, queries.jsonl, qrels/test.tsv, run.bm25.trec)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())


# ----------------------------------------------------------------------------- decomposer
# Appended by the decomposer work: the bodies live in searchsmith.training.decomposer, next to
# the recipe whose metrics they share (held-out formats: DESIGN.md "Decomposition, JSONL" and
# "Rewrite eval, JSONL"; export them with python -m searchsmith.training.decompose_data).


def eval_decompose(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval decompose --data D.jsonl --checkpoint RUN_DIR``: graph validity, type,
    node-count accuracy and node-text F1 of a trained decomposer."""
    from searchsmith.training.decomposer import eval_decompose as run

    return run(args)


def eval_rewrite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval rewrite --data D.jsonl --checkpoint RUN_DIR``: rewrite EM / token F1
    beside the copy-the-query baseline."""
    from searchsmith.training.decomposer import eval_rewrite as run

    return run(args)


def eval_cite(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval cite --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: attribution
    precision / recall / F1 / ROC AUC and entity F1 (format: DESIGN.md "Citation, JSONL")."""
    from searchsmith.training.citation import eval_cite as run

    return run(args)


def eval_images(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval images --data D.jsonl (--checkpoint RUN_DIR | --bundle DIR)``: placement
    accuracy and image/text recall@1/@5 (format: DESIGN.md "Image relevance, JSONL")."""
    from searchsmith.training.images import eval_images as run

    return run(args)
