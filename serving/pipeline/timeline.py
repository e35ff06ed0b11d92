"""Stage ``timeline``: dated events from the passages the answer used (Xinyu et al.).

Only the passages the answer drew on count (``used_passages_only``): the extractive
generator's sentences' passages and the cited ones, not every retrieved passage (a
question about one release would otherwise list every dated news item retrieved with it).
An answer that is "not found" has no timeline.

Dates are read in several formats: ``2024-03-12``, ``2024/03/12``, ``12 March 2024``,
``March 12, 2024``, ``Mar. 12 2024``, ``March 2024`` and a year after a preposition
(``in 1970``, ``since 2019``). Each event is the sentence carrying the date; a dated
document whose text has no date gives one event (its title) at the document's date.
A passage gives the dated sentences close to the question: those whose cosine with it is at
least ``relevance_ratio`` (0.8) of the passage's best dated sentence's, so a digest page of
nineteen dated lines gives the line about what was asked. Events whose dates are compatible (one is a prefix of the other: ``2024-03`` and
``2024-03-12``) and whose texts have cosine >= ``merge_threshold`` (0.9) are merged
(their sources joined): outlets reporting the same outage become one event. Events are
sorted by date and grouped by year.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from searchsmith.models.dates import document_date, parse_dates
from searchsmith.models.roles import Embedder
from searchsmith.serving.pipeline.answer import Json
from searchsmith.serving.pipeline.common import embed, sentences
from searchsmith.serving.pipeline.config import Preset, TimelineConfig
from searchsmith.serving.pipeline.state import Passage, PipelineState


def _compatible(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


class TimelineStage:
    """Reads the passages; writes ``timeline`` (``[{year, events: [{date, precision, text, sources}]}]``)."""

    name = "timeline"
    reads = ("passages", "answer_found", "used_passages")
    writes = ("timeline",)

    def __init__(self, embedder: Embedder, config: TimelineConfig) -> None:
        self.embedder = embedder
        self.config = config

    def used(self, state: PipelineState) -> list[Passage]:
        """The passages whose events count (all of them when the answer's are unknown)."""
        if not self.config.used_passages_only:
            return list(state.passages)
        if not state.answer_found:
            return []
        if not state.used_passages:
            if state.passages:  # an LLM answer that nothing cited: which passages it used is unknown
                state.trace.get(self.name).note = "the answer's passages are unknown (nothing cited): all passages"
            return list(state.passages)
        used = set(state.used_passages)
        return [p for p in state.passages if p.chunk_id in used]

    def events(self, state: PipelineState) -> list[Json]:
        """Raw events, one per (dated sentence, date) of the used passages, in passage order,
        each with the position of its passage (``passage``)."""
        out = []
        for k, p in enumerate(self.used(state)):
            found = False
            for sent in sentences(p.text):
                sent = " ".join(sent.split())
                for iso, prec, _, _ in parse_dates(sent):
                    out.append({"date": iso, "precision": prec, "text": sent, "sources": [p.doc_id], "passage": k})
                    found = True
            if not found and p.date and self.config.use_document_dates:
                dated = document_date(p.date)
                if dated:
                    out.append({"date": dated[0], "precision": dated[1], "passage": k,
                                "text": p.title or (sentences(p.text) or [p.text])[0], "sources": [p.doc_id]})
        return out

    def relevant(self, events: list[Json], vecs: np.ndarray, state: PipelineState) -> tuple[list[Json], np.ndarray]:
        """The events whose cosine with the question is at least ``relevance_ratio`` of the best
        one's of the same passage (a passage's best event always stays)."""
        ratio = self.config.relevance_ratio
        if not events or ratio <= 0.0:
            return events, vecs
        rel = vecs @ embed(state, self.embedder, [state.question()])[0]  # (E,)
        best: dict[int, float] = {}
        for e, r in zip(events, rel):
            best[e["passage"]] = max(best.get(e["passage"], float("-inf")), float(r))
        keep = [i for i, (e, r) in enumerate(zip(events, rel))
                if float(r) >= best[e["passage"]] or float(r) >= ratio * max(best[e["passage"]], 0.0)]
        return [events[i] for i in keep], vecs[keep]

    def merge(self, events: list[Json], vecs: np.ndarray) -> list[Json]:
        """Near-duplicates (compatible dates, cosine >= ``merge_threshold``) become one event;
        ``vecs`` are the events' unit vectors."""
        if not events:
            return []
        merged: list[tuple[dict[str, Any], np.ndarray]] = []
        for ev, v in zip(events, vecs):
            for kept, kv in merged:
                if _compatible(kept["date"], ev["date"]) and float(kv @ v) >= self.config.merge_threshold:
                    if len(ev["date"]) > len(kept["date"]):  # keep the more precise date
                        kept["date"], kept["precision"] = ev["date"], ev["precision"]
                    kept["sources"] = list(dict.fromkeys(kept["sources"] + ev["sources"]))
                    break
            else:
                merged.append((dict(ev), v))
        return [e for e, _ in merged]

    def run(self, state: PipelineState, preset: Preset) -> None:
        with state.trace.stage(self.name) as st:
            state.timeline = []
            if not preset.timeline:
                st.skipped, st.note = True, f"preset {state.preset_name!r} has no timeline"
                return
            raw = self.events(state)
            vecs = embed(state, self.embedder, [e["text"] for e in raw])  # (E, D)
            kept, vecs = self.relevant(raw, vecs, state)
            if len(kept) < len(raw):
                st.note = (f"{len(raw) - len(kept)} of {len(raw)} dated sentences left out: further from the "
                           f"question than timeline.relevance_ratio {self.config.relevance_ratio} of their "
                           f"passage's closest")
            events = [{k: v for k, v in e.items() if k != "passage"} for e in self.merge(kept, vecs)]
            events.sort(key=lambda e: (e["date"], e["text"]))
            events = events[: self.config.max_events]
            groups: dict[str, list[dict[str, Any]]] = {}
            for e in events:
                groups.setdefault(e["date"][:4], []).append(e)
            state.timeline = [{"year": y, "events": evs} for y, evs in sorted(groups.items())]
