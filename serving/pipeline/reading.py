"""The reader as the generator: short answers with the sentences that support them.

Per final sub-question the ``read`` bundle (``models/reader.py``) reads the node's best
``generation.reader.max_passages`` passages and gives a short answer (a span, ``yes`` or
``no``) with a score: by default each passage alone, the first in the ranking's order whose
answer reaches ``generation.reader.min_score`` answering (``generation.reader.read``); below
that score the node has no answer. The
pipeline's answer is then the short answer(s) followed by the supporting sentence(s): the
passage sentence that holds the span (for yes / no, the best extractive sentence of the
passages the reader read); the citation stage gives each its ``[n]``. When no final node has
an answer above the threshold, the answer is "not found": the reader says it does not know
instead of guessing. In ``planning`` a parent's short answer fills its children's ``#n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from searchsmith.models.reader import PassageAnswer, passage_piece
from searchsmith.models.roles import Reader
from searchsmith.models.text import split_sentences
from searchsmith.serving.pipeline.common import introduced
from searchsmith.serving.pipeline.config import GenerationConfig
from searchsmith.serving.pipeline.state import NodeResult, Passage, PipelineState, model_tokens

if TYPE_CHECKING:
    from searchsmith.serving.pipeline.generation import Support


class NodeReading(NamedTuple):
    """The reader's answer to one node, located in the passage it read it from."""

    node: NodeResult
    text: str
    kind: str
    score: float
    passage: Passage | None  # the span's passage (None for yes / no / no answer)
    sentence: str  # the passage sentence holding the span ("" when none)
    window: tuple[Passage, ...]  # the passages the answering window read


def lead_sentence(short: str) -> str:
    """A short answer as the answer's first sentence: "Yes." / "No.", else ending in a stop."""
    lead = short.capitalize() if short.lower() in ("yes", "no") else short
    return lead if lead[-1:] in ".!?" else f"{lead}."


class ReaderAnswer(NamedTuple):
    """What :meth:`ReaderAnswers.compose` gives the generation stage."""

    answer: str
    short: str
    support: list[str]
    used: list[str]  # chunk ids of the supporting passages


def span_sentence(title: str, text: str, start: int, end: int) -> str:
    """The sentence of a passage holding the span ``[start, end)`` of its :func:`passage_piece`,
    with the piece's title prefix removed (the piece has no blank lines, so a sentence ending
    in a colon runs on into what it introduces)."""
    piece = passage_piece(title, text)
    for a, b in split_sentences(piece):
        if a <= start < b:
            sent = piece[a:max(b, min(end, len(piece)))].strip()
            head = f"{' '.join(str(title or '').split())}. "
            if title and sent.startswith(head) and len(sent) > len(head):
                sent = sent[len(head):]
            return sent
    return ""


def body_sentence(text: str, answer: str) -> str:
    """The first sentence of ``text`` that contains ``answer`` (case-insensitive; one that ends
    with a colon, with what it introduces: :func:`~searchsmith.serving.pipeline.common.introduced`),
    or ""."""
    low = answer.lower()
    spans = split_sentences(text)
    for i, (a, b) in enumerate(spans):
        if low and low in text[a:b].lower():
            return introduced(text, spans, i) or " ".join(text[a:b].split())
    return ""


class ReaderAnswers:
    """Reads nodes with a ``read`` bundle and composes the answer.

    Args:
        reader: a ``read`` bundle (``models.roles.Reader``).
        config: the generation config (``generation.reader``).
    """

    def __init__(self, reader: Reader, config: GenerationConfig) -> None:
        self.reader = reader
        self.config = config
        cfg = config.reader.min_score
        self.min_score = float(cfg) if cfg is not None else float(getattr(reader, "min_score", 0.5))

    def read(self, questions: Sequence[str], passages: Sequence[Sequence[Passage]],
             state: PipelineState) -> list[tuple[PassageAnswer | None, list[Passage]]]:
        """``(PassageAnswer, the passages read)`` per question (None without passages); one
        model call for all."""
        k = self.config.reader.max_passages
        chosen = [sorted(ps, key=lambda p: -p.score)[:k] for ps in passages]
        todo = [i for i, ps in enumerate(chosen) if ps]
        out: list[tuple[PassageAnswer | None, list[Passage]]] = [(None, ps) for ps in chosen]
        if not todo:
            return out
        in_order = self.config.reader.read == "in_order"
        # in_order: one reading per (question, passage); together: one per question
        asks = [(i, [p]) for i in todo for p in chosen[i]] if in_order else [(i, chosen[i]) for i in todo]
        got, meta = self.reader.read_batch([questions[i] for i, _ in asks],
                                           [[(p.title or "", p.text) for p in ps] for _, ps in asks],
                                           return_meta=True)
        state.trace.count("generation.reader", 1, *model_tokens(meta, 0))  # its windows' tokens
        if meta.get("truncated"):
            cut = {asks[j][0] for j in meta["truncated"] if 0 <= j < len(asks)}
            state.trace.note(f"generation: reader: {len(cut)} question(s) over "
                             f"{meta.get('max_question_tokens')} tokens were cut to that length")
        if not in_order:
            for i, a in zip(todo, got, strict=True):
                out[i] = (a, chosen[i])
            return out
        per_question: dict[int, list[PassageAnswer]] = {}
        for (i, _), a in zip(asks, got, strict=True):
            per_question.setdefault(i, []).append(a)
        for i, answers in per_question.items():
            out[i] = (self.first_answer(answers), chosen[i])
        return out

    def first_answer(self, answers: Sequence[PassageAnswer]) -> PassageAnswer:
        """Of one question's readings of its passages alone (the ranking's order), the first that
        answers at ``min_score`` or above, else the best scored; re-indexed to that passage."""
        j = next((j for j, a in enumerate(answers) if a.kind != "none" and a.text and a.score >= self.min_score),
                 None)
        if j is None:
            j = max(range(len(answers)), key=lambda x: (answers[x].kind != "none", answers[x].score))
        a = answers[j]
        return a._replace(passage=j if a.passage >= 0 else -1, window_passages=(j,))

    def node_short(self, question: str, passages: Sequence[Passage], state: PipelineState) -> str | None:
        """A sub-question's short answer (planning fills its children with it); None below min_score."""
        a, _ = self.read([question], [passages], state)[0]
        if a is None or a.score < self.min_score or not a.text:
            return None
        return a.text

    def readings(self, nodes: Sequence[NodeResult], state: PipelineState) -> list[NodeReading]:
        """Each node's reading (score 0 and no text when it has no passage)."""
        out = []
        for node, (a, read) in zip(nodes, self.read([n.text for n in nodes], [n.passages for n in nodes], state),
                                   strict=True):
            if a is None:
                out.append(NodeReading(node, "", "none", 0.0, None, "", ()))
                continue
            window = tuple(read[i] for i in a.window_passages if 0 <= i < len(read)) or tuple(read)
            p = read[a.passage] if a.kind == "span" and 0 <= a.passage < len(read) else None
            sent = span_sentence(p.title or "", p.text, a.start, a.end) if p is not None else ""
            title = " ".join((p.title or "").split()) if p is not None else ""
            if p is not None and (not sent or sent.rstrip(".") == title or a.start < len(title)):
                sent = body_sentence(p.text, a.text) or sent  # the span was in the title: quote the text
            out.append(NodeReading(node, a.text, a.kind, float(a.score), p, sent, window))
        return out

    def compose(self, readings: Sequence[NodeReading], ranked: Sequence[Sequence[Support]],
                bridges: Sequence[Support] = ()) -> ReaderAnswer | None:
        """The answer from the final nodes' readings; None when none reaches ``min_score``.

        Args:
            ranked: per node, the extractive generator's ranked supports (``Support``), the
                supporting sentence of a yes / no answer.
            bridges: sentences that lead the support (a chain's earlier steps, whose answers
                filled the final ones).
        """
        shorts: list[str] = []
        support: list[str] = []
        used: list[str] = []
        for b in bridges:
            if b.text not in support:
                support.append(b.text)
                used.extend(i for i in b.chunk_ids if i not in used)
        n_support = self.config.reader.support_sentences
        for r, node_ranked in zip(readings, ranked, strict=True):
            if r.score < self.min_score or not r.text:
                continue
            if r.text.lower() not in (s.lower() for s in shorts):
                shorts.append(r.text)
            picked: list[tuple[str, tuple[str, ...]]] = []
            if r.sentence and r.passage is not None:
                picked.append((r.sentence, (r.passage.chunk_id,)))
            window_ids = {p.chunk_id for p in r.window}
            for c in node_ranked:  # the best extractive sentences of the passages it read
                if len(picked) >= n_support:
                    break
                if c.text not in (t for t, _ in picked) and (not window_ids or set(c.chunk_ids) & window_ids):
                    picked.append((c.text, tuple(i for i in c.chunk_ids if not window_ids or i in window_ids)))
            for text, ids in picked[:n_support]:
                if text not in support:
                    support.append(text)
                    used.extend(i for i in ids if i not in used)
        if not shorts:
            return None
        short = "; ".join(shorts)
        return ReaderAnswer(" ".join([lead_sentence(short), *support]), short, support, used)


__all__ = ["NodeReading", "ReaderAnswer", "ReaderAnswers", "body_sentence", "lead_sentence", "span_sentence"]
