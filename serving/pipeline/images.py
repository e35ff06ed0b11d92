"""Stage ``images``: place the images of the documents used next to answer paragraphs.

Candidates are the ``images`` of the documents the answer cites (of every passage used
when nothing is cited), from the corpus field ``images: [{id, path, caption?}]``; an image
whose file is missing or unreadable, or smaller than ``min_side_px``, is filtered out.
The answer's units are its paragraphs, or its sentences when it has one paragraph.

Scores (P units x I images): an image that carries a caption is scored by the
caption-paragraph cosine of the text embedder (Xinyu's second signal), unless the images
bundle's gate (``images``) opened: then by its three-way mix of
``models.placement.combined_scores`` (image-paragraph, caption-paragraph, image-query). An
image without a caption is scored by the bundle's vision tower when its gate (``vision``)
opened, else it cannot be placed and is dropped. The gates read the bundle's figures on
held-out photos (``pipeline.gates``): a vision tower trained on generated pictures does not
reach users' photos, so caption-cosine placement is the default. The assignment is the
Hungarian method of ``models.placement.assign_images``, kept at >= ``threshold`` (0.3).

:func:`place_images` is the one implementation of these scores and the assignment: the
stage and the server's ``POST /v1/images/place`` both call it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from searchsmith.models.roles import Embedder, ImageScorer
from searchsmith.serving.pipeline.answer import Json
from searchsmith.serving.pipeline.common import embed, sentences, strip_markers
from searchsmith.serving.pipeline.config import ImagesConfig, Preset
from searchsmith.serving.pipeline.state import PipelineState

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

log = logging.getLogger(__name__)


def answer_units(answer: str) -> list[str]:
    """Paragraphs of the answer, or its sentences when it is one paragraph."""
    paras = [" ".join(p.split()) for p in answer.split("\n\n") if p.strip()]
    if len(paras) > 1:
        return paras
    return [" ".join(s.split()) for s in sentences(answer)] or paras


def place_images(units: Sequence[str], captions: Sequence[str | None], pixels: Sequence[PILImage | None], *,
                 config: ImagesConfig, query: str | None = None, bundle: ImageScorer | None = None,
                 encode: Callable[[list[str]], np.ndarray] | None = None, threshold: float | None = None,
                 mix: bool = True, vision: bool = True) -> tuple[np.ndarray, list[int | None], str]:
    """Score every image against every unit and assign them (Hungarian, kept at >= threshold).

    Per image: with a caption, the bundle's three-way mix of
    ``models.placement.combined_scores`` (image-unit, caption-unit, image-query) when it has
    pixels and ``mix``, the bundle's caption-unit cosine (text tower) when it has none and
    ``mix``, else the caption-unit cosine of ``encode`` (the text embedder); without a
    caption, the bundle's image-unit (and image-query) relevance when ``vision``, else it
    cannot be scored (-1, the lowest cosine).

    Args:
        units: P paragraphs (or sentences) of the answer.
        captions: I captions (None or empty: none).
        pixels: I RGB PIL images (None: no pixels).
        config: the signal weights and the default threshold.
        query: the user's question (image-query signal), or None.
        bundle: an ``images`` bundle, or None.
        encode: texts -> (n, D) unit vectors; needed for captions the bundle does not score.
        threshold: the assignment cut; ``config.threshold`` when None.
        mix: the bundle scores captioned images (the pipeline: its ``images`` gate opened).
        vision: the bundle scores uncaptioned images (its ``vision`` gate opened).

    Returns:
        (scores (P, I), the unit index or None per image, method: ``bundle`` when the bundle
        scored every image, ``captions`` when it scored none, ``captions+vision`` when it
        scored only the uncaptioned ones).
    """
    from searchsmith.models.placement import PlacementConfig, assign_images, combined_scores

    cut = config.threshold if threshold is None else threshold
    n_par, n_img = len(units), len(captions)
    scores = np.full((n_par, n_img), -1.0)  # (P, I)
    with_caption = [i for i, c in enumerate(captions) if c]
    by_bundle = [i for i in range(n_img) if bundle is not None and (mix if captions[i] else vision)]
    by_caption = [i for i in with_caption if i not in by_bundle]
    if by_bundle:
        assert bundle is not None
        texts = np.asarray(bundle.encode_text(list(units)), dtype=np.float64)  # (P, d)
        caption_par = np.full((n_par, n_img), np.nan)  # NaN: no caption (out of the mix)
        capped = [i for i in by_bundle if captions[i]]
        if capped:
            cap = np.asarray(bundle.encode_text([captions[i] for i in capped]), dtype=np.float64)
            caption_par[:, capped] = texts @ cap.T
        with_px = [i for i in by_bundle if pixels[i] is not None]
        if with_px:
            imgs = np.asarray(bundle.encode_images([pixels[i] for i in with_px]), dtype=np.float64)  # (k, d)
            image_query = None
            if query:
                image_query = (np.asarray(bundle.encode_text([query]), dtype=np.float64) @ imgs.T)[0]  # (k,)
            cp = caption_par[:, with_px]
            weights = PlacementConfig(threshold=cut, image_paragraph_weight=config.image_paragraph_weight,
                                      caption_paragraph_weight=config.caption_paragraph_weight,
                                      image_query_weight=config.image_query_weight)
            scores[:, with_px] = combined_scores(texts @ imgs.T, cp if np.isfinite(cp).any() else None,
                                                 image_query, weights)
        caption_only = [i for i in capped if pixels[i] is None]
        scores[:, caption_only] = caption_par[:, caption_only]
    if by_caption:
        if encode is None:
            raise ValueError("place_images: an encode function is needed for the captions the images bundle "
                             "does not score")
        vecs = np.asarray(encode(list(units) + [captions[i] for i in by_caption]), dtype=np.float64)
        scores[:, by_caption] = vecs[:n_par] @ vecs[n_par:].T
    method = ("bundle" if bundle is not None and mix and vision else
              "captions+vision" if bundle is not None and vision else "captions")
    return scores, assign_images(scores, cut), method


class ImagesStage:
    """Reads the answer, passages and references; writes ``images`` (placements)."""

    name = "images"
    reads = ("query", "answer", "passages", "references")
    writes = ("images",)

    def __init__(self, embedder: Embedder, config: ImagesConfig, bundle: ImageScorer | None = None, *,
                 mix: bool = True, vision: bool = True) -> None:
        """``bundle`` scores captioned images when ``mix`` and uncaptioned ones when ``vision``
        (the pipeline passes its two gates' decisions); captions are compared by ``embedder``
        otherwise."""
        self.embedder = embedder
        self.config = config
        self.bundle = bundle
        self.mix = mix and bundle is not None
        self.vision = vision and bundle is not None

    def candidates(self, state: PipelineState) -> tuple[list[Json], list[PILImage | None]]:
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

    def run(self, state: PipelineState, preset: Preset) -> None:
        with state.trace.stage(self.name) as st:
            state.images = []
            if not preset.images:
                st.skipped, st.note = True, f"preset {state.preset_name!r} places no images"
                return
            units = answer_units(strip_markers(state.answer))
            cands, pil = self.candidates(state)
            if not units or not cands:
                return
            captions = [c["caption"] for c in cands]
            s, where, _ = place_images(units, captions, pil, config=self.config,
                                       query=state.question(), bundle=self.bundle,
                                       encode=lambda texts: embed(state, self.embedder, texts),
                                       mix=self.mix, vision=self.vision)
            if self.mix or (self.vision and not all(captions)):
                state.trace.count(self.name, 2, sum(len(u.split()) for u in units))
            bare = sum(not c for c in captions)
            if bare and not self.vision:
                st.note = (f"{bare} image(s) without a caption left out: no image model is used for them "
                           "(the gates' 'vision' decision says why)")
            for i, p in enumerate(where):
                if p is not None:
                    by = "model" if (self.mix if captions[i] else self.vision) else "caption"
                    state.images.append({**cands[i], "paragraph": int(p), "after": units[p][:120],
                                         "score": round(float(s[p, i]), 4), "placed_by": by})
            state.images.sort(key=lambda im: im["paragraph"])
