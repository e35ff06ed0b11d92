"""What each bundle role offers: one typed Protocol per task of the registry (``models/tasks.py``).

The pipeline, the server and the evaluators take these types, not a concrete class, so an
ONNX bundle (``models/runtime.py``), a torch model from a training run and a test double all
fit as long as they have the methods. ``load_bundle(path, task="rerank")`` returns the
role's type (``Reranker``) after checking the manifest's task.

Every method takes ``return_meta``: with ``True`` it returns ``(value, meta)`` where meta
says which inputs were truncated and how many tokens the model ran (``{"truncated": [indices],
"max_length": n, "tokens": t}``; a generation adds ``tokens_out``, what it generated). The
pipeline's trace counts these tokens, and counts a model without them in whitespace words
(``serving.pipeline.state.counted_call``). The Protocols type the plain call; the meta form is
``tuple[value, Meta]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from searchsmith.models.qdg import QDG
    from searchsmith.models.reader import PassageAnswer

__all__ = ["Citer", "Decomposer", "Embedder", "EntitySpan", "ImageScorer", "Meta", "ModelOfTask", "Reader", "Reranker",
           "Turn", "role_protocol"]

Meta = Mapping[str, object]
EntitySpan = tuple[int, int, str]
Turn = Mapping[str, str] | str  # {"role": "user", "content": "..."} or plain text
CHAT_ROLES = ("user", "assistant", "system")  # the roles a turn may have (OpenAI's chat messages)


@runtime_checkable
class Embedder(Protocol):
    """Task ``embed``: texts to unit vectors."""

    def encode(self, texts: Sequence[str], return_meta: bool = False) -> np.ndarray:
        """(n, D) float32 unit rows in input order."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Task ``rerank``: relevance logits of (query, passage) pairs; higher = more relevant."""

    def score(self, query: str, passages: Sequence[str], return_meta: bool = False) -> np.ndarray:
        """(n,) float32 logits of ``passages`` against ``query``."""
        ...

    def score_pairs(self, pairs: Sequence[tuple[str, str]], return_meta: bool = False) -> np.ndarray:
        """(n,) float32 logits of (query, passage) pairs."""
        ...


@runtime_checkable
class Decomposer(Protocol):
    """Task ``decompose``: a question's sub-question graph, and follow-ups made standalone."""

    def decompose(self, question: str, max_nodes: int | None = None, return_meta: bool = False) -> QDG:
        """The question's graph (one terminal node with the question when unusable)."""
        ...

    def rewrite(self, history: Sequence[Turn], query: str, return_meta: bool = False) -> str:
        """``query`` made standalone given the conversation ``history``."""
        ...


@runtime_checkable
class Citer(Protocol):
    """Task ``cite``: entity spans of sentences and P(supports) of (sentence, source) pairs."""

    support_threshold: float

    def entities(self, sentences: Sequence[str], return_meta: bool = False) -> list[list[EntitySpan]]:
        """Character spans ``(start, end, type)`` per sentence."""
        ...

    def attribute(self, pairs: Sequence[tuple[str, str]], return_meta: bool = False,
                  cosine: Sequence[float] | None = None) -> np.ndarray:
        """(n,) float32 P(supports) of (sentence, source text) pairs (``cosine``: each pair's
        bi-encoder cosine, for a scorer with a ``cosine_residual``)."""
        ...


@runtime_checkable
class ImageScorer(Protocol):
    """Task ``images``: texts and images into one normalised space (relevance = cosine)."""

    def encode_text(self, texts: Sequence[str], return_meta: bool = False) -> np.ndarray:
        """(n, d) float32 unit rows."""
        ...

    def encode_images(self, images: Sequence[object], return_meta: bool = False) -> np.ndarray:
        """(n, d) float32 unit rows of PIL images."""
        ...


@runtime_checkable
class Reader(Protocol):
    """Task ``read``: short answers to questions from their passages (``models/reader.py``).

    ``min_score`` is the trained reader's no-answer threshold: an answer whose score is below
    it is no answer.
    """

    min_score: float

    def read(self, question: str, passages: Sequence[object], return_meta: bool = False) -> PassageAnswer:
        """The answer to ``question`` from ``passages`` (strings, (title, text) pairs or dicts)."""
        ...

    def read_batch(self, questions: Sequence[str], passages: Sequence[Sequence[object]],
                   return_meta: bool = False) -> list[PassageAnswer]:
        """One answer per question from its own passages."""
        ...


ModelOfTask = Embedder | Reranker | Decomposer | Citer | Reader | ImageScorer
_PROTOCOLS: dict[str, type] = {"embed": Embedder, "rerank": Reranker, "decompose": Decomposer, "cite": Citer,
                               "read": Reader, "images": ImageScorer}


def role_protocol(task: str) -> type:
    """The Protocol of ``task`` (a name of ``models.tasks.TASKS``)."""
    from searchsmith.models.tasks import get

    return _PROTOCOLS[get(task).name]
