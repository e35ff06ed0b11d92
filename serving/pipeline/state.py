"""The typed state that flows through the stages, and the trace every answer carries.

A stage is an object with ``name``, ``reads`` and ``writes`` (field names of
:class:`PipelineState`) and ``run(state, preset) -> None``. The pipeline checks at assembly
that each stage reads only fields written by the input or an earlier stage, so a
re-ordered config fails at load time, not in the middle of a request.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from searchsmith.models.config import is_int
from searchsmith.models.qdg import QDG
from searchsmith.models.roles import Meta
from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.rewrite import Turn

# Fields set from the request before any stage runs.
INPUT_FIELDS = frozenset({"query", "history", "query_id", "preset_name"})


@dataclass
class Passage:
    """One retrieved chunk as the pipeline uses it.

    Attributes:
        score: retrieval (or rerank, once reranked) score; higher is better.
        node_id: the sub-question it was retrieved for.
    """

    chunk_id: str
    doc_id: str
    source: str
    text: str
    score: float
    node_id: str = "1"
    title: str | None = None
    date: str | None = None
    url: str | None = None
    images: tuple[dict[str, Any], ...] = ()
    row: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_id": self.chunk_id, "doc_id": self.doc_id, "source": self.source,
                "title": self.title, "score": round(float(self.score), 6), "node_id": self.node_id,
                "date": self.date, "url": self.url}


@dataclass
class NodeResult:
    """A sub-question of the graph once searched (and, in planning, answered)."""

    id: str
    text: str
    depends_on: tuple[str, ...] = ()
    passages: list[Passage] = field(default_factory=list)
    answer: str | None = None
    round: int = 0


@dataclass
class StageTrace:
    latency_ms: float = 0.0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    skipped: bool = False
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"latency_ms": round(self.latency_ms, 3), "model_calls": self.model_calls,
               "tokens_in": self.tokens_in, "tokens_out": self.tokens_out}
        if self.skipped:
            out["skipped"] = True
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Trace:
    """Per-stage latency, model calls and tokens, and what was chosen, for one answer."""

    stages: dict[str, StageTrace] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    total_ms: float = 0.0
    cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, stage: str) -> StageTrace:
        with self._lock:
            return self.stages.setdefault(stage, StageTrace())

    @contextmanager
    def stage(self, name: str) -> Iterator[StageTrace]:
        """Time a block into ``stages[name].latency_ms`` (accumulates over repeated blocks)."""
        st = self.get(name)
        t0 = time.perf_counter()
        try:
            yield st
        finally:
            st.latency_ms += (time.perf_counter() - t0) * 1e3

    def count(self, stage: str, calls: int = 1, tokens_in: int = 0, tokens_out: int = 0) -> None:
        """Add model calls and tokens to a stage (thread-safe: parallel nodes count here)."""
        st = self.get(stage)
        with self._lock:
            st.model_calls += calls
            st.tokens_in += tokens_in
            st.tokens_out += tokens_out

    def note(self, message: str) -> None:
        with self._lock:
            self.notes.append(message)

    @property
    def model_calls(self) -> int:
        return sum(s.model_calls for s in self.stages.values())

    @property
    def tokens_in(self) -> int:
        return sum(s.tokens_in for s in self.stages.values())

    @property
    def tokens_out(self) -> int:
        return sum(s.tokens_out for s in self.stages.values())


@dataclass
class PipelineState:
    """Everything one question accumulates on its way through the stages."""

    query: str
    history: list[Turn] = field(default_factory=list)
    # the question as the user typed it, when the pipeline read it otherwise (retrieval.spelling:
    # ``query`` holds the corrected one every stage reads); "" when it is ``query``
    typed: str = ""
    query_id: str = ""
    preset_name: str = "large"
    # context / routing
    rewrite: str = ""
    sources: list[str] = field(default_factory=list)
    route: dict[str, Any] = field(default_factory=dict)
    # decomposition
    graph: QDG | None = None
    strategy: str = "direct"
    # retrieval
    nodes: list[NodeResult] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    # generation
    answer: str = ""
    # the short answer ("Ed Wood", "yes": the reader's, or the extractive answer's typed span)
    # and the passage sentences supporting it; "" and [] when there is none (an LLM's answer,
    # not found, a yes / no question answered extractively, generation.extractive.short_answer off)
    short_answer: str = ""
    support: list[str] = field(default_factory=list)
    node_answers: dict[str, str] = field(default_factory=dict)
    # False when no passage supports an answer (generation.no_answer_threshold): "not found"
    answer_found: bool = True
    # chunk ids the answer drew on (the extractive generator's sentences, then the citations):
    # the timeline keeps only their events
    used_passages: list[str] = field(default_factory=list)
    # citation
    cited_answer: str = ""
    sentences: list[dict[str, Any]] = field(default_factory=list)
    references: list[dict[str, Any]] = field(default_factory=list)
    # timeline / images
    timeline: list[dict[str, Any]] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    # text -> (D,) unit vector; shared by stages so a sentence is embedded once per answer
    embeddings: dict[str, Any] = field(default_factory=dict, repr=False)
    # gets each piece of the final answer as an LLM backend generates it (the server's
    # /v1/search stream); None: nobody is listening
    on_delta: Callable[[str], None] | None = field(default=None, repr=False)

    def question(self) -> str:
        """The standalone question: the rewrite when there is one."""
        return self.rewrite or self.query


STATE_FIELDS = frozenset(f.name for f in dataclasses.fields(PipelineState))


class Stage(Protocol):
    """One step of the pipeline; ``reads``/``writes`` name :class:`PipelineState` fields."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def run(self, state: PipelineState, preset: Preset) -> None: ...


def estimate_tokens(text: str) -> int:
    """Whitespace-token count: the unit of tokens in/out when a backend reports none."""
    return len(text.split())


def _reported(meta: Meta, key: str) -> int | None:
    """The count ``meta[key]`` a model reported (``tokens``, ``tokens_out``); None when it reports none."""
    value = meta.get(key)
    return int(value) if is_int(value, 0) else None


def model_tokens(meta: Meta, words_in: int, words_out: int = 0) -> tuple[int, int]:
    """``(tokens in, tokens out)`` of a model call from its meta (``tokens``, a generation's
    ``tokens_out``); each one it does not report is the whitespace-word count given."""
    t_in, t_out = _reported(meta, "tokens"), _reported(meta, "tokens_out")
    return (words_in if t_in is None else t_in), (words_out if t_out is None else t_out)


@functools.lru_cache(maxsize=256)
def _takes_meta(fn: Callable[..., object]) -> bool:
    try:
        return "return_meta" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def counted_call(fn: Callable[..., object], *args: object, words: Callable[[], int],
                 **kwargs: object) -> tuple[object, int, Meta]:
    """``(result, tokens in, meta)`` of a local model's call ``fn(*args, **kwargs)``.

    The tokens are the model's own (its meta's ``tokens``, ``return_meta=True``: each input's
    tokens after truncation, special tokens included, what ran); a model that reports none
    (a method without ``return_meta``, such as a user's or a test's double) is counted in
    whitespace words, ``words()``. The meta is ``{}`` then.
    """
    target = getattr(fn, "__func__", fn)  # a bound method: its function, cached once per class
    try:
        takes = _takes_meta(target)
    except TypeError:  # an unhashable callable object
        takes = _takes_meta.__wrapped__(target)
    if takes:
        got = fn(*args, return_meta=True, **kwargs)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], Mapping):
            result, meta = got
            tokens = _reported(meta, "tokens")
            return result, (words() if tokens is None else tokens), meta
        return got, words(), {}
    return fn(*args, **kwargs), words(), {}
