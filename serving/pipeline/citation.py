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
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from searchsmith.models.text import missing_entities, pattern_entities, split_sentences
from searchsmith.serving.pipeline.common import embed, sentences, strip_markers
from searchsmith.serving.pipeline.config import CitationConfig, Preset
from searchsmith.serving.pipeline.state import Passage, PipelineState, estimate_tokens

log = logging.getLogger(__name__)


class CitationStage:
    """Reads the answer and passages; writes ``cited_answer``, ``sentences``, ``references``."""

    name = "citation"
    reads = ("answer", "answer_found", "passages", "used_passages")
    writes = ("cited_answer", "sentences", "references", "used_passages")

    def __init__(self, embedder: Any, config: CitationConfig, bundle: Any | None = None) -> None:
        self.embedder = embedder
        self.config = config
        self.bundle = bundle

    def _threshold(self) -> float:
        if self.bundle is None:
            return self.config.cosine_threshold
        if self.config.support_threshold is not None:
            return self.config.support_threshold
        own = getattr(self.bundle, "support_threshold", None)
        if own is None:
            own = (getattr(self.bundle, "manifest", None) or {}).get("support_threshold")
        return float(own) if own is not None else 0.5

    def entities(self, sents: list[str], state: PipelineState) -> list[list[str]]:
        if self.bundle is not None:
            try:
                spans = self.bundle.entities(sents)
                state.trace.count(self.name, 1, sum(estimate_tokens(s) for s in sents))
                return [[s[a:b] for a, b, _ in sp] for s, sp in zip(sents, spans)]
            except Exception as exc:  # noqa: BLE001 - patterns instead
                state.trace.note(f"citation: entity tagger failed ({type(exc).__name__}: {exc}); patterns used")
        return [pattern_entities(s) for s in sents]

    def scores(self, sentence: str, cands: list[Passage], state: PipelineState) -> np.ndarray:
        """(N,) support of ``sentence`` by each candidate passage."""
        if self.bundle is not None:
            out = np.asarray(self.bundle.attribute([(sentence, p.text) for p in cands]), dtype=np.float32)
            state.trace.count(self.name, 1, sum(estimate_tokens(sentence) + estimate_tokens(p.text) for p in cands))
            return out
        s = embed(state, self.embedder, [sentence])[0]
        best = []
        for p in cands:
            ps = [" ".join(x.split()) for x in sentences(p.text)] or [p.text]
            best.append(float((embed(state, self.embedder, ps) @ s).max()))
        return np.asarray(best, dtype=np.float32)

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
            sents = [answer[a:b] for a, b in spans]
            ents = self.entities(sents, state)
            threshold = self._threshold()
            ref_no: dict[str, int] = {}
            refs: list[dict[str, Any]] = []
            cited_per_sentence: list[list[int]] = []
            vetoed = 0
            for sent, ent in zip(sents, ents):
                if self.config.entity_veto:
                    # The veto reads the pattern entities even when a tagger is loaded: it needs the
                    # exact numbers and names, and a learned tagger's spans may be partial words.
                    must = pattern_entities(sent)
                    cands = [p for p in state.passages if not missing_entities(must, p.text)]
                    vetoed += len(state.passages) - len(cands)
                else:
                    low = [e.lower() for e in ent]
                    cands = ([p for p in state.passages if any(e in p.text.lower() for e in low)]
                             or list(state.passages))
                marks: list[tuple[int, float]] = []
                try:
                    sc = (self.scores(" ".join(sent.split()), cands, state) if cands
                          else np.zeros(0, dtype=np.float32))
                except Exception as exc:  # noqa: BLE001 - no citation rather than a wrong one
                    state.trace.note(f"citation: scoring failed ({type(exc).__name__}: {exc}); sentence left uncited")
                    sc = np.zeros(0, dtype=np.float32)
                seen_docs: set[str] = set()
                for i in np.argsort(-sc, kind="stable"):
                    if sc[i] < threshold or len(marks) >= self.config.max_per_sentence:
                        break
                    p = cands[int(i)]
                    if p.doc_id in seen_docs:
                        continue
                    seen_docs.add(p.doc_id)
                    if p.doc_id not in ref_no:
                        ref_no[p.doc_id] = len(refs) + 1
                        refs.append({"n": ref_no[p.doc_id], "doc_id": p.doc_id, "chunk_id": p.chunk_id,
                                     "title": p.title, "source": p.source, "url": p.url})
                    marks.append((ref_no[p.doc_id], round(float(sc[i]), 4)))
                    if p.chunk_id not in state.used_passages:
                        state.used_passages.append(p.chunk_id)
                cited_per_sentence.append([m for m, _ in marks])
                state.sentences.append({"text": sent, "entities": ent,
                                        "citations": [{"n": m, "score": s} for m, s in marks]})
            # insert markers right after each sentence (end to start keeps offsets valid)
            out = answer
            for (_a, b), ns in reversed(list(zip(spans, cited_per_sentence))):
                if ns:
                    at = b - 1 if out[b - 1] in ".!?" else b  # "... 200 [1]." not "... 200. [1]"
                    out = out[:at] + " " + "".join(f"[{n}]" for n in ns) + out[at:]
            state.cited_answer = out
            state.references = refs
            if vetoed:
                st.note = f"entity_veto: {vetoed} (sentence, passage) pair(s) lacked a number or name of the sentence"
