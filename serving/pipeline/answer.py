"""The shape of what the pipeline returns: an answer and its trace, as JSON-ready dicts.

``Pipeline.ask`` returns an :class:`Answer`; ``/v1/search`` sends the same object, and
``searchsmith ask --json`` prints it. The nested records (references, sentences, timeline
events, images, passages, nodes) are typed here, once: ``/openapi.json`` documents the answer
from these types, and the server tests validate real answers against them, keys closed
(``extra: forbid``), so a key a stage adds or renames without them fails a test. The trace's
stages and routing stay open objects (``Json``): what they hold is for people, not programs.

These are ``typing_extensions.TypedDict`` (pydantic reads those on Python 3.11).
"""

from __future__ import annotations

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

Json = dict[str, object]
# the documented keys are all there are: a key a stage adds without its type here fails the tests
CLOSED = ConfigDict(extra="forbid")


@with_config(CLOSED)
class Reference(TypedDict):
    """A passage the answer cites, numbered as its markers ``[n]`` (first cited first)."""

    n: int
    doc_id: str
    chunk_id: str
    title: str | None
    source: str
    url: str | None
    score: float
    text: str


@with_config(CLOSED)
class SentenceCitation(TypedDict):
    """One citation of a sentence: its reference number, support score and the passage's
    sentence that supports it."""

    n: int
    score: float
    chunk_id: str
    quote: str


@with_config(CLOSED)
class AnswerSentence(TypedDict):
    """A sentence of the answer, its entities (their texts; /v1/cite gives their spans) and
    citations."""

    text: str
    entities: list[str]
    citations: list[SentenceCitation]


@with_config(CLOSED)
class TimelineEvent(TypedDict):
    """A dated event: an ISO date (``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``, as ``precision``
    says), the sentence and the documents that state it."""

    date: str
    precision: str
    text: str
    sources: list[str]


@with_config(CLOSED)
class TimelineYear(TypedDict):
    """The events of one year, in date order."""

    year: str
    events: list[TimelineEvent]


@with_config(CLOSED)
class PlacedImage(TypedDict):
    """An image of a cited document placed after a paragraph of the answer (``after`` is that
    paragraph's start); ``placed_by`` ``model`` or ``caption``."""

    image_id: str
    path: str
    caption: str | None
    doc_id: str
    paragraph: int
    after: str
    score: float
    placed_by: str


@with_config(CLOSED)
class AnswerPassage(TypedDict):
    """A passage retrieved for a sub-question (``node_id``), with its retrieval (or rerank) score."""

    chunk_id: str
    doc_id: str
    source: str
    title: str | None
    score: float
    node_id: str
    date: str | None
    url: str | None


@with_config(CLOSED)
class AnswerNode(TypedDict):
    """A sub-question of the graph as searched: its round, its answer (planning) and passages."""

    id: str
    text: str
    depends_on: list[str]
    round: int
    answer: str | None
    passages: list[str]


@with_config(CLOSED)
class Feedback(TypedDict):
    """What ``Pipeline.feedback`` returns: the reward the protocol router learned from."""

    query_id: str
    preset: str
    reward: float
    cost: float


@with_config(CLOSED)
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


@with_config(CLOSED)
class Answer(TypedDict):
    """One answer: the cited text (``answer``; ``answer_text`` without markers; ``answer_found``
    false when it is the no-answer text: the sources hold no answer), the short answer
    (the reader's, or the extractive answer's typed span) and the sentences supporting it
    (``short_answer`` "" and ``support`` [] when there is none), its references, timeline, images,
    passages, graph and trace."""

    query_id: str
    query: str
    rewrite: str
    answer: str
    answer_text: str
    answer_found: bool
    short_answer: str
    support: list[str]
    references: list[Reference]
    sentences: list[AnswerSentence]
    timeline: list[TimelineYear]
    images: list[PlacedImage]
    passages: list[AnswerPassage]
    nodes: list[AnswerNode]
    trace: AnswerTrace


__all__ = [
    "CLOSED",
    "Answer",
    "AnswerNode",
    "AnswerPassage",
    "AnswerSentence",
    "AnswerTrace",
    "Feedback",
    "Json",
    "PlacedImage",
    "Reference",
    "SentenceCitation",
    "TimelineEvent",
    "TimelineYear",
]
