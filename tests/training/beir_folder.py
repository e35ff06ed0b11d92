"""A small BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) of the reranker's
synthetic queries, for the ``eval rerank`` tests."""

from __future__ import annotations

from pathlib import Path

from searchsmith.training.rerank_data import RerankerData, synthetic_groups


def synthetic_beir(tmp_path: Path) -> Path:
    from searchsmith.training.data import write_jsonl_atomic

    groups = synthetic_groups(RerankerData(synthetic_queries=12))
    corpus, queries, qrels = {}, [], ["query-id\tcorpus-id\tscore"]
    for g in groups:
        for c, y in zip(g.candidates, g.labels, strict=True):
            did = corpus.setdefault(c, f"d{len(corpus)}")
            if y:
                qrels.append(f"{g.qid}\t{did}\t1")
        queries.append({"_id": g.qid, "text": g.query})
    write_jsonl_atomic(tmp_path / "corpus.jsonl", [{"_id": i, "title": "", "text": t}
                                                    for t, i in corpus.items()])
    write_jsonl_atomic(tmp_path / "queries.jsonl", queries)
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return tmp_path
