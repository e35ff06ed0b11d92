"""Stage ``images``: place the images of the documents used next to answer paragraphs.

Candidates are the ``images`` of the documents the answer cites (of every passage used
when nothing is cited), from the corpus field ``images: [{id, path, caption?}]``; an image
whose file is missing or unreadable, or smaller than ``min_side_px``, is filtered out.
The answer's units are its paragraphs, or its sentences when it has one paragraph.

Scores (P units x I images): with an images bundle, the three-way mix of
``models.image_relevance.combined_scores`` (image-paragraph, caption-paragraph,
image-query); without one, the caption-paragraph cosine of the text embedder alone
(images without a caption cannot be scored and are dropped). The assignment is the
Hungarian method of ``models.image_relevance.assign_images``, kept at >= ``threshold``
(0.3).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.serving.pipeline.common import embed, sentences, strip_markers
from searchsmith.serving.pipeline.config import ImagesConfig, Preset
from searchsmith.serving.pipeline.state import PipelineState

log = logging.getLogger(__name__)


def answer_units(answer: str) -> list[str]:
    """Paragraphs of the answer, or its sentences when it is one paragraph."""
    paras = [" ".join(p.split()) for p in answer.split("\n\n") if p.strip()]
    if len(paras) > 1:
        return paras
    return [" ".join(s.split()) for s in sentences(answer)] or paras


class ImagesStage:
    """Reads the answer, passages and references; writes ``images`` (placements)."""

    name = "images"
    reads = ("query", "answer", "passages", "references")
    writes = ("images",)

    def __init__(self, embedder: Any, config: ImagesConfig, bundle: Any | None = None) -> None:
        self.embedder = embedder
        self.config = config
        self.bundle = bundle

    def candidates(self, state: PipelineState) -> tuple[list[dict[str, Any]], list[Any]]:
        """Usable images of the documents used, and their opened PIL images."""
        from PIL import Image, UnidentifiedImageError

        cited = {r["doc_id"] for r in state.references}
        seen: set[str] = set()
        out, pil = [], []
        for p in state.passages:
            if cited and p.doc_id not in cited:
                continue
            for im in p.images:
                if im["id"] in seen or len(out) >= self.config.max_candidates:
                    continue
                seen.add(im["id"])
                path = Path(im["path"])
                try:
                    with Image.open(path) as raw:
                        img = raw.convert("RGB")
                except (OSError, UnidentifiedImageError):
                    state.trace.note(f"images: {path} is missing or unreadable; skipped")
                    continue
                if min(img.size) < self.config.min_side_px:
                    continue
                out.append({"image_id": im["id"], "path": str(path), "caption": im.get("caption"),
                            "doc_id": p.doc_id})
                pil.append(img)
        return out, pil

    def scores(self, units: list[str], cands: list[dict[str, Any]], pil: list[Any],
               state: PipelineState) -> np.ndarray:
        """(P, I) relevance of each image to each unit."""
        from searchsmith.models.placement import PlacementConfig, combined_scores

        captions = [c["caption"] or "" for c in cands]
        if self.bundle is None:
            cap = embed(state, self.embedder, [c or "-" for c in captions])  # (I, D)
            s = embed(state, self.embedder, units) @ cap.T  # (P, I)
            s[:, [i for i, c in enumerate(captions) if not c]] = -1.0  # cannot be scored
            return s
        cfg = self.config
        texts = self.bundle.encode_text(units)  # (P, d)
        imgs = self.bundle.encode_images(pil)  # (I, d)
        state.trace.count(self.name, 2, sum(len(u.split()) for u in units))
        ip = texts @ imgs.T
        cp = None
        if any(captions):
            cap = self.bundle.encode_text([c or "-" for c in captions])
            cp = texts @ cap.T
            cp[:, [i for i, c in enumerate(captions) if not c]] = np.nan
        iq = (self.bundle.encode_text([state.question()]) @ imgs.T)[0]
        placement = PlacementConfig(threshold=cfg.threshold, image_paragraph_weight=cfg.image_paragraph_weight,
                                    caption_paragraph_weight=cfg.caption_paragraph_weight,
                                    image_query_weight=cfg.image_query_weight)
        return combined_scores(ip, cp, iq, placement)

    def run(self, state: PipelineState, preset: Preset) -> None:
        from searchsmith.models.placement import assign_images

        with state.trace.stage(self.name) as st:
            state.images = []
            if not preset.images:
                st.skipped, st.note = True, f"preset {state.preset_name!r} places no images"
                return
            units = answer_units(strip_markers(state.answer))
            cands, pil = self.candidates(state)
            if not units or not cands:
                return
            s = self.scores(units, cands, pil, state)
            where = assign_images(s, self.config.threshold)
            for i, p in enumerate(where):
                if p is not None:
                    state.images.append({**cands[i], "paragraph": int(p), "after": units[p][:120],
                                         "score": round(float(s[p, i]), 4)})
            state.images.sort(key=lambda im: im["paragraph"])
