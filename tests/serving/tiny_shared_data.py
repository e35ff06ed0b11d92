"""A tiny copy of the shared data's CAsT and multi-hop files, for the tests of
``make-routing-set cast`` / ``make-pipeline-set multihop``."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """``rows`` as JSON lines at ``path``, its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def cast_and_multihop(root: Path, topics: int = 2) -> Path:
    """``root`` holding ``topics`` CAsT topics of four turns each, one MuSiQue question and one
    HotpotQA question (turn t of topic n asks ``"topic n question t?"``)."""
    turns = [{"id": f"cast2021_{topic}_{t}", "year": 2021, "topic_id": str(topic),
              "raw_utterance": f"topic {topic} question {t}?", "canonical_response": f"answer {topic}.{t}",
              "history_turn_ids": [f"cast2021_{topic}_{h}" for h in range(1, t)],
              "history_utterances": [f"topic {topic} question {h}?" for h in range(1, t)]}
             for topic in range(1, topics + 1) for t in range(1, 5)]
    write_jsonl(root / "trec_cast" / "cast_2019_2022_turns.jsonl", turns)
    write_jsonl(root / "musique" / "musique_ans_200.jsonl", [
        {"id": "m0", "question": "musique question?", "answer": "a0",
         "paragraphs": [{"title": "Gold", "paragraph_text": "gold text", "is_supporting": True},
                        {"title": "Other", "paragraph_text": "distractor", "is_supporting": False}]}])
    write_jsonl(root / "hotpotqa" / "hotpotqa_dev_distractor.jsonl", [
        {"_id": "h0", "question": "hotpot question?", "answer": "yes", "supporting_titles": ["T1"],
         "context": [["T1", ["First."]], ["T2", ["Noise."]]]}])
    return root
