"""A stand-in for ``../shared/data`` in the quickstart's tests: the files the five full recipes read
(its README.md's layout), each one empty JSON line."""

from __future__ import annotations

from pathlib import Path

LAYOUT = (
    "scifact/claims_dev.jsonl", "scifact/corpus_subset.jsonl", "hotpotqa/hotpotqa_dev_distractor.jsonl",
    "musique/musique_ans_200.jsonl", "2wikimultihopqa/2wikimultihopqa_dev.jsonl", "break_qdmr/dev.jsonl",
    "strategyqa/strategyqa_229.jsonl", "trec_cast/cast_2019_2022_turns.jsonl", "wice/wice_claim_dev.jsonl",
    "expertqa/expertqa_domain_test_attribution.jsonl", "coco_captions/captions.jsonl",
)


def data_folder(root: Path) -> Path:
    """``root`` laid out as the shared data (:data:`LAYOUT`), resolved."""
    for rel in LAYOUT:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}\n")
    return root.resolve()
