"""The shape of what the pipeline returns: an answer and its trace, as JSON-ready dicts.

``Pipeline.ask`` returns an :class:`Answer`; ``/v1/search`` sends the same object, and
``searchsmith ask --json`` prints it. The nested records (references, sentences, timeline
events, images, passages, nodes, per-stage traces) are plain JSON objects whose keys are
documented by the stage that writes them.
"""

from __future__ import annotations

from typing import TypedDict

Json = dict[str, object]


class Feedback(TypedDict):
    """What ``Pipeline.feedback`` returns: the reward the protocol router learned from."""

    query_id: str
    preset: str
    reward: float
    cost: float


class AnswerTrace(TypedDict):
    """How an answer was made: preset, strategy, routing, per-stage time, model calls, gates."""

    preset: str
    strategy: str | None
    graph_type: str | None
    routing: Json | None
    sources: list[str]
    stages: dict[str, Json]
    total_ms: float
    model_calls: int
    tokens_in: int
    tokens_out: int
    cost: float
    features: list[float] | None
    notes: list[str]
    gates: dict[str, Json]


class Answer(TypedDict):
    """One answer: the cited text (``answer``; ``answer_text`` without markers), the short answer
    (the reader's, or the extractive answer's typed span) and the sentences supporting it
    (``short_answer`` "" and ``support`` [] when there is none), its references, timeline, images,
    passages, graph and trace."""

    query_id: str
    query: str
    rewrite: str
    answer: str
    answer_text: str
    short_answer: str
    support: list[str]
    references: list[Json]
    sentences: list[Json]
    timeline: list[Json]
    images: list[Json]
    passages: list[Json]
    nodes: list[Json]
    trace: AnswerTrace


__all__ = ["Answer", "AnswerTrace", "Feedback", "Json"]
