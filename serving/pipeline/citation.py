"""Stage ``citation``: look-back, entity-level citation (KIMAs look-back, Xinyu citation).

After the answer is written: split it into sentences; extract each sentence's entities
(the citation bundle's tagger, else names, numbers and identifiers found by pattern);
the candidate passages of a sentence are those that mention every number and name of it
(``entity_veto``: a passage about "Voyager 1" cannot support a sentence about "Voyager 2",
however similar; a sentence without such entities may be supported by any passage); each
candidate is scored with the citation bundle's
``attribute(sentence, passage)`` (P(supports), cut at its support threshold) or, without a
bundle, the best cosine between the sentence and the passage's sentences, cut at
``cosine_threshold`` (0.6). Below the cut a sentence gets no citation rather than a wrong
one. Markers ``[n]`` are numbered by first use and always match the reference list
(markers the generator wrote itself are removed first). An answer that is "not found"
(generation.no_answer_threshold) cites nothing. The cited passages join the answer's
``used_passages`` (the timeline reads them).

:func:`cite_sentences` is the one implementation of this citation: the stage and the
server's ``POST /v1/cite`` both call it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from searchsmith.models.roles import Citer, Embedder
from searchsmith.models.text import (
    entity_spans,
    missing_entities,
    pattern_entities,
    split_sentences,
)
from searchsmith.serving.pipeline.common import embed, sentences, strip_markers
from searchsmith.serving.pipeline.config import CitationConfig, Preset
from searchsmith.serving.pipeline.state import PipelineState, Trace, estimate_tokens

log = logging.getLogger(__name__)


Span = tuple[int, int, str]  # (start, end, label): the characters of one entity in its sentence
STAGE = "citation"


@dataclass(frozen=True)
class SentenceCitations:
    """The entities of one sentence and the passages that support it.

    Attributes:
        text: the sentence.
        entities: its entity spans (the bundle's tagger, else :func:`pattern_spans`).
        citations: (passage index, score), best first: one passage per document key, each
            scoring >= the threshold, at most ``max_per_sentence``.
        vetoed: passages the entity veto removed before scoring.
    """

    text: str
    entities: list[Span]
    citations: list[tuple[int, float]]
    vetoed: int = 0


def support_threshold(bundle: Citer | None, config: CitationConfig) -> float:
    """The score a passage needs to be cited.

    Without a bundle ``config.cosine_threshold``; with one ``config.support_threshold``, else
    the bundle's own (its ``support_threshold``, else its manifest's), else 0.5.
    """
    if bundle is None:
        return config.cosine_threshold
    if config.support_threshold is not None:
        return config.support_threshold
    own = getattr(bundle, "support_threshold", None)
    if own is None:
        own = (getattr(bundle, "manifest", None) or {}).get("support_threshold")
    return float(own) if own is not None else 0.5


def pattern_spans(sentence: str) -> list[Span]:
    """The spans of ``pattern_entities(sentence)``: ``models.text.entity_spans``, each text once."""
    out: list[Span] = []
    for a, b, label in entity_spans(sentence):
        if all(sentence[a:b] != sentence[x:y] for x, y, _ in out):
            out.append((a, b, label))
    return out


def cite_sentences(sentences: Sequence[str], passages: Sequence[tuple[str, str]], *, config: CitationConfig,
                   bundle: Citer | None = None, encode: Callable[[list[str]], np.ndarray] | None = None,
                   threshold: float | None = None, max_per_sentence: int | None = None,
                   trace: Trace | None = None) -> list[SentenceCitations]:
    """Entities and supporting passages of each sentence (the module docstring has the method).

    Args:
        sentences: S sentences of one answer.
        passages: N (document key, text) pairs; a sentence cites a document at most once
            (its best passage).
        config: the thresholds, ``max_per_sentence`` and ``entity_veto``.
        bundle: a ``cite`` bundle (tagger and P(supports)), or None: patterns and cosine.
        encode: texts -> (n, D) unit vectors; needed without a bundle.
        threshold: the cut; :func:`support_threshold` when None.
        max_per_sentence: most citations per sentence; ``config.max_per_sentence`` when None.
        trace: the pipeline's trace: model calls are counted there, and a failing tagger
            (patterns instead) or scorer (the sentence stays uncited) is noted, not raised.
            Without one (the server) such errors propagate.

    Returns:
        S :class:`SentenceCitations`, in order.
    """
    if bundle is None and encode is None:
        raise ValueError("cite_sentences: without a citation bundle an encode function is needed")
    cut = support_threshold(bundle, config) if threshold is None else threshold
    limit = max_per_sentence or config.max_per_sentence
    keys, texts = [k for k, _ in passages], [t for _, t in passages]
    spans = _entity_spans(sentences, bundle, trace)
    score = _support_scorer(sentences, texts, bundle, encode, trace)
    out = []
    for i, (sentence, found) in enumerate(zip(sentences, spans, strict=True)):
        cands, vetoed = _candidates(sentence, [sentence[a:b] for a, b, _ in found], texts, config.entity_veto)
        try:
            scores = score(i, cands) if cands else np.zeros(0)  # (len(cands),)
        except Exception as exc:  # noqa: BLE001 - no citation rather than a wrong one
            if trace is None:
                raise
            trace.note(f"citation: scoring failed ({type(exc).__name__}: {exc}); sentence left uncited")
            scores = np.zeros(0)
        cited: list[tuple[int, float]] = []
        seen: set[str] = set()
        for k in np.argsort(-scores, kind="stable"):
            if not scores[k] >= cut or len(cited) >= limit:  # "not >=": a NaN score cites nothing
                break
            j = cands[int(k)]
            if keys[j] not in seen:
                seen.add(keys[j])
                cited.append((j, float(scores[k])))
        out.append(SentenceCitations(sentence, found, cited, vetoed))
    return out


def _entity_spans(sentences: Sequence[str], bundle: Any | None, trace: Trace | None) -> list[list[Span]]:
    if bundle is not None:
        try:
            spans = bundle.entities(list(sentences))
            if trace is not None:
                trace.count(STAGE, 1, sum(estimate_tokens(s) for s in sentences))
            return [[(int(a), int(b), str(label)) for a, b, label in sp] for sp in spans]
        except Exception as exc:  # noqa: BLE001 - patterns instead
            if trace is None:
                raise
            trace.note(f"citation: entity tagger failed ({type(exc).__name__}: {exc}); patterns used")
    return [pattern_spans(s) for s in sentences]


def _candidates(sentence: str, entities: list[str], texts: list[str], entity_veto: bool) -> tuple[list[int], int]:
    """Indices of the passages that may support ``sentence``, and how many the veto removed."""
    if entity_veto:
        # The veto reads the pattern entities even when a tagger is loaded: it needs the
        # exact numbers and names, and a learned tagger's spans may be partial words.
        must = pattern_entities(sentence)
        keep = [j for j, t in enumerate(texts) if not missing_entities(must, t)]
        return keep, len(texts) - len(keep)
    low = [e.lower() for e in entities]
    keep = [j for j, t in enumerate(texts) if any(e in t.lower() for e in low)]
    return keep or list(range(len(texts))), 0


def _support_scorer(sents: Sequence[str], texts: list[str], bundle: Any | None,
                    encode: Callable[[list[str]], np.ndarray] | None, trace: Trace | None
                    ) -> Callable[[int, list[int]], np.ndarray]:
    """``score(i, cands)``: the support of sentence i by each candidate passage, shape (len(cands),).

    The bundle's P(supports), one call per sentence; else the best cosine between the sentence
    and the passage's sentences, every text embedded in one call on first use.
    """
    if bundle is not None:
        def attribute(i: int, cands: list[int]) -> np.ndarray:
            s = " ".join(sents[i].split())
            out = np.asarray(bundle.attribute([(s, texts[j]) for j in cands]), dtype=np.float64)
            if trace is not None:
                trace.count(STAGE, 1, sum(estimate_tokens(s) + estimate_tokens(texts[j]) for j in cands))
            return out.reshape(-1)

        return attribute
    parts = [[" ".join(x.split()) for x in sentences(t)] or [t] for t in texts]
    vecs: dict[str, np.ndarray] = {}

    def cosine(i: int, cands: list[int]) -> np.ndarray:
        if not vecs:
            flat = list(dict.fromkeys([" ".join(s.split()) for s in sents] + [x for p in parts for x in p]))
            vecs.update(zip(flat, np.asarray(encode(flat), dtype=np.float64), strict=True))
        s = vecs[" ".join(sents[i].split())]  # (D,)
        return np.asarray([float((np.stack([vecs[x] for x in parts[j]]) @ s).max()) for j in cands])

    return cosine


class CitationStage:
    """Reads the answer and passages; writes ``cited_answer``, ``sentences``, ``references``."""

    name = STAGE
    reads = ("answer", "answer_found", "passages", "used_passages")
    writes = ("cited_answer", "sentences", "references", "used_passages")

    def __init__(self, embedder: Embedder, config: CitationConfig, bundle: Citer | None = None) -> None:
        self.embedder = embedder
        self.config = config
        self.bundle = bundle

    def run(self, state: PipelineState, preset: Preset) -> None:
        answer = strip_markers(state.answer).strip()
        state.cited_answer, state.sentences, state.references = answer, [], []
        with state.trace.stage(self.name) as st:
            if not preset.citation:
                st.skipped, st.note = True, f"preset {state.preset_name!r} does not cite"
                return
            if not state.answer_found:
                st.note = "no answer found in the sources: nothing to cite"
                return
            if not answer or not state.passages:
                return
            spans = split_sentences(answer)
            found = cite_sentences([answer[a:b] for a, b in spans], [(p.doc_id, p.text) for p in state.passages],
                                   config=self.config, bundle=self.bundle,
                                   encode=lambda texts: embed(state, self.embedder, texts), trace=state.trace)
            ref_no: dict[str, int] = {}
            refs: list[dict[str, Any]] = []
            cited_per_sentence: list[list[int]] = []
            for sent in found:
                marks: list[tuple[int, float]] = []
                for j, score in sent.citations:
                    p = state.passages[j]
                    if p.doc_id not in ref_no:
                        ref_no[p.doc_id] = len(refs) + 1
                        refs.append({"n": ref_no[p.doc_id], "doc_id": p.doc_id, "chunk_id": p.chunk_id,
                                     "title": p.title, "source": p.source, "url": p.url})
                    marks.append((ref_no[p.doc_id], round(score, 4)))
                    if p.chunk_id not in state.used_passages:
                        state.used_passages.append(p.chunk_id)
                cited_per_sentence.append([m for m, _ in marks])
                state.sentences.append({"text": sent.text, "entities": [sent.text[a:b] for a, b, _ in sent.entities],
                                        "citations": [{"n": m, "score": s} for m, s in marks]})
            # insert markers right after each sentence (end to start keeps offsets valid)
            out = answer
            for (_a, b), ns in reversed(list(zip(spans, cited_per_sentence))):
                if ns:
                    at = b - 1 if out[b - 1] in ".!?" else b  # "... 200 [1]." not "... 200. [1]"
                    out = out[:at] + " " + "".join(f"[{n}]" for n in ns) + out[at:]
            state.cited_answer = out
            state.references = refs
            vetoed = sum(s.vetoed for s in found)
            if vetoed:
                st.note = f"entity_veto: {vetoed} (sentence, passage) pair(s) lacked a number or name of the sentence"
