"""Stage ``citation``: look-back, entity-level citation (KIMAs look-back, Xinyu citation).

After the answer is written: split it into sentences; extract each sentence's entities
(the citation bundle's tagger, else names, numbers and identifiers found by pattern);
the candidate passages of a sentence are those that mention every number and name of it
(``entity_veto``: a passage about "Voyager 1" cannot support a sentence about "Voyager 2",
however similar; a sentence without such entities may be supported by any passage); each
candidate is scored with the citation bundle's
``attribute(sentence, passage)`` (P(supports), cut at its support threshold) or, without a
bundle, the best cosine between the sentence and the passage's sentences, cut at
``cosine_threshold`` (0.6). A bundle with a ``cosine_residual`` (a scorer trained as a
correction of that cosine) is given the same cosine, from the pipeline's embedder. Below the cut a sentence gets no citation rather than a wrong
one. Markers ``[n]`` are numbered by first use and always match the reference list
(markers the generator wrote itself are removed first). Each sentence's citation gives its
reference number, score, chunk and ``quote``: the sentence of the passage that supports it
best, which the answer page highlights in the reference's ``text``. A short answer's own sentence
("Mary Eaton.") cites what the first later sentence holding it cites, the sentence it was read
from (:func:`lead_cites_support`): a bare name is close to every passage naming it. An answer that is "not found"
(generation.no_answer_threshold) cites nothing. The cited passages join the answer's
``used_passages`` (the timeline reads them).

:func:`cite_sentences` is the one implementation of this citation: the stage and the
server's ``POST /v1/cite`` both call it.
"""

from __future__ import annotations

import dataclasses
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
from searchsmith.serving.pipeline.common import content_words, embed, strip_markers
from searchsmith.serving.pipeline.common import sentences as split_text
from searchsmith.serving.pipeline.config import CitationConfig, Preset
from searchsmith.serving.pipeline.state import PipelineState, Trace, counted_call, estimate_tokens

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
        quotes: per citation, the sentence of its passage that supports the sentence best
            (closest by cosine, or by shared content words without an encoder): what a
            reader is shown highlighted in the passage.
    """

    text: str
    entities: list[Span]
    citations: list[tuple[int, float]]
    vetoed: int = 0
    quotes: tuple[str, ...] = ()


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
    residual = getattr(bundle, "cosine_residual", None) if bundle is not None else None
    if encode is None and (bundle is None or residual is not None):
        raise ValueError("cite_sentences: without a citation bundle an encode function is needed" if bundle is None
                         else "cite_sentences: the citation bundle's scorer adds the bi-encoder cosine "
                              f"({residual.embedder}); an encode function is needed")
    cut = support_threshold(bundle, config) if threshold is None else threshold
    limit = max_per_sentence or config.max_per_sentence
    keys, texts = [k for k, _ in passages], [t for _, t in passages]
    spans = _entity_spans(sentences, bundle, trace)
    parts = [[" ".join(x.split()) for x in split_text(t)] or [" ".join(t.split())] for t in texts]
    closest = _closest_sentence(sentences, parts, encode)
    score = _support_scorer(sentences, texts, bundle, closest, trace)
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
        quotes = tuple(parts[j][closest(i, j)[1]] for j, _ in cited)
        out.append(SentenceCitations(sentence, found, cited, vetoed, quotes))
    return out


def _entity_spans(sentences: Sequence[str], bundle: Any | None, trace: Trace | None) -> list[list[Span]]:
    if bundle is not None:
        try:
            spans, tokens, _ = counted_call(bundle.entities, list(sentences),
                                            words=lambda: sum(estimate_tokens(s) for s in sentences))
            if trace is not None:
                trace.count(STAGE, 1, tokens)
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


def _closest_sentence(sents: Sequence[str], parts: list[list[str]],
                      encode: Callable[[list[str]], np.ndarray] | None) -> Callable[[int, int], tuple[float, int]]:
    """``closest(i, j)``: (cosine, index) of passage j's sentence closest to sentence i.

    With ``encode`` every text is embedded in one call on first use; without one the
    closeness is the share of sentence i's content words a passage sentence contains.
    """
    vecs: dict[str, np.ndarray] = {}

    def closest(i: int, j: int) -> tuple[float, int]:
        s = " ".join(sents[i].split())
        if encode is None:
            words = content_words(s)
            share = [len(words & content_words(x)) / max(1, len(words)) for x in parts[j]]
            k = int(np.argmax(share))
            return float(share[k]), k
        if not vecs:
            flat = list(dict.fromkeys([" ".join(x.split()) for x in sents] + [x for p in parts for x in p]))
            vecs.update(zip(flat, np.asarray(encode(flat), dtype=np.float64), strict=True))
        cos = np.stack([vecs[x] for x in parts[j]]) @ vecs[s]  # (sentences of passage j,)
        k = int(np.argmax(cos))
        return float(cos[k]), k

    return closest


def _support_scorer(sents: Sequence[str], texts: list[str], bundle: Any | None,
                    closest: Callable[[int, int], tuple[float, int]], trace: Trace | None
                    ) -> Callable[[int, list[int]], np.ndarray]:
    """``score(i, cands)``: the support of sentence i by each candidate passage, shape (len(cands),).

    The bundle's P(supports), one call per sentence (given each pair's best cosine when the
    bundle's scorer is a residual on it); else the best cosine between the sentence and the
    passage's sentences (:func:`_closest_sentence`).
    """
    if bundle is not None:
        residual = getattr(bundle, "cosine_residual", None) is not None

        def attribute(i: int, cands: list[int]) -> np.ndarray:
            s = " ".join(sents[i].split())
            extra = {"cosine": [closest(i, j)[0] for j in cands]} if residual else {}
            got, tokens, _ = counted_call(bundle.attribute, [(s, texts[j]) for j in cands], **extra,
                                          words=lambda: sum(estimate_tokens(s) + estimate_tokens(texts[j]) for j in cands))
            out = np.asarray(got, dtype=np.float64)
            if trace is not None:
                trace.count(STAGE, 1, tokens)
            return out.reshape(-1)

        return attribute

    def cosine(i: int, cands: list[int]) -> np.ndarray:
        return np.asarray([closest(i, j)[0] for j in cands])

    return cosine


def lead_cites_support(found: list[SentenceCitations], short: str) -> list[SentenceCitations]:
    """``found`` with a short answer's own sentence ("Elia Kazan.", the answer's first) citing what
    the first later sentence holding it cites: the sentence it was read from.

    A bare name is close to every passage that mentions it ("Maya Kazan" names Elia Kazan too), so
    looked back alone it cites passages the answer did not come from. Unchanged when there is no
    short answer, when the first sentence is more than it, or when no later cited sentence holds it.
    """
    key = short.strip().rstrip(".!?").lower()
    if not key or not found or found[0].text.strip().rstrip(".!?").lower() != key:
        return found
    held = next((s for s in found[1:] if s.citations and key in s.text.lower()), None)
    if held is None:
        return found
    return [dataclasses.replace(found[0], citations=held.citations, quotes=held.quotes), *found[1:]]


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
            found = lead_cites_support(found, state.short_answer)
            ref_no: dict[str, int] = {}
            refs: list[dict[str, Any]] = []
            cited_per_sentence: list[list[int]] = []
            for sent in found:
                marks: list[dict[str, Any]] = []
                for (j, score), quote in zip(sent.citations, sent.quotes, strict=True):
                    p = state.passages[j]
                    if p.doc_id not in ref_no:
                        ref_no[p.doc_id] = len(refs) + 1
                        refs.append({"n": ref_no[p.doc_id], "doc_id": p.doc_id, "chunk_id": p.chunk_id,
                                     "title": p.title, "source": p.source, "url": p.url,
                                     "score": round(float(p.score), 4), "text": p.text})
                    marks.append({"n": ref_no[p.doc_id], "score": round(score, 4), "chunk_id": p.chunk_id,
                                  "quote": quote})
                    if p.chunk_id not in state.used_passages:
                        state.used_passages.append(p.chunk_id)
                cited_per_sentence.append([m["n"] for m in marks])
                state.sentences.append({"text": sent.text, "entities": [sent.text[a:b] for a, b, _ in sent.entities],
                                        "citations": marks})
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
