"""Image relevance evaluation: the recipe's held-out retrieval and placement figures, and
``searchsmith eval images`` on a placement file (the "images" format of ``searchsmith eval --help``;
write one with ``python -m searchsmith.training.images write-eval OUT.jsonl``).

Retrieval: image->text and text->image recall@1/@5 (a hit when a caption of the image, or an
image carrying that caption text, is in the top k), overall and per source, beside chance.
Placement: each image of a document assigned to a paragraph (or none) as the pipeline does,
scored by accuracy / precision / recall and the gold paragraph's recall@1/@5.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from searchsmith.models.config import closest_key
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.image_relevance import (
    ImageRelevanceModel,
    PlacementConfig,
    assign_images,
    combined_scores,
    normalise_pixels,
)
from searchsmith.models.intervals import ratio, with_bootstrap
from searchsmith.models.jsonl import check_input_file, iter_jsonl
from searchsmith.training.data import write_jsonl_atomic
from searchsmith.training.image_data import (
    ImageRecord,
    PlacementDoc,
    load_image,
    placement_docs,
    record_image,
    sampled_placement_docs,
)

RECALL_KS = (1, 5)


# ----------------------------------------------------------------------------- held-out retrieval and placement


def _chance_hit(n: int, g: int, k: int) -> float:
    """P(at least one of g correct items in a random top-k of n) = 1 - C(n-g, k) / C(n, k)."""
    if g <= 0:
        return 0.0
    if n - g < k:
        return 1.0
    return 1.0 - math.comb(n - g, k) / math.comb(n, k)


def retrieval_recall(img_emb: np.ndarray, txt_emb: np.ndarray, rel: np.ndarray,
                     ks: Sequence[int] = RECALL_KS) -> dict[str, float]:
    """Image->text and text->image recall@k, and the chance level of each.

    Args:
        img_emb: (I, D); txt_emb: (T, D); rel: (I, T) bool, True where text t describes image i.
    """
    sims = img_emb @ txt_emb.T  # (I, T)
    n_img, n_txt = rel.shape
    out: dict[str, float] = {}
    for k in ks:
        top_t = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # (I, k)
        top_i = np.argsort(-sims.T, axis=1, kind="stable")[:, :k]  # (T, k)
        out[f"i2t_recall@{k}"] = float(np.mean([rel[i, top_t[i]].any() for i in range(n_img)]))
        out[f"t2i_recall@{k}"] = float(np.mean([rel[top_i[t], t].any() for t in range(n_txt)]))
        out[f"chance/i2t_recall@{k}"] = float(np.mean([_chance_hit(n_txt, int(g), k) for g in rel.sum(1)]))
        out[f"chance/t2i_recall@{k}"] = float(np.mean([_chance_hit(n_img, int(g), k) for g in rel.sum(0)]))
    out["images"], out["texts"] = float(n_img), float(n_txt)
    return out


@dataclass
class EvalSet:
    """Held-out images and their captions, with the pixels and text ids ready."""

    records: list[ImageRecord]
    pixels: torch.Tensor  # (I, 3, S, S) uint8
    texts: list[str]  # unique caption texts
    rel: np.ndarray  # (I, T) bool


def caption_relevance(recs: Sequence[ImageRecord]) -> tuple[list[str], np.ndarray]:
    """The unique caption texts of ``recs`` and (I, T) bool: True where text t describes image i."""
    texts = list(dict.fromkeys(c for r in recs for c in r.captions))
    pos = {t: i for i, t in enumerate(texts)}
    rel = np.zeros((len(recs), len(texts)), dtype=bool)
    for i, r in enumerate(recs):
        for c in r.captions:
            rel[i, pos[c]] = True
    return texts, rel


def make_eval_set(recs: list[ImageRecord], pixels: torch.Tensor) -> EvalSet:
    texts, rel = caption_relevance(recs)
    return EvalSet(recs, pixels, texts, rel)


@torch.no_grad()
def evaluate_model(model: ImageRelevanceModel, es: EvalSet, embed_texts: Callable[[Sequence[str]], torch.Tensor],
                   batch_size: int) -> dict[str, float]:
    """Held-out recall@1/@5 both ways, overall and per source (keys ``coco_captions/...``)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    v = model.config.vision
    img = torch.cat([model.vision_tower(normalise_pixels(es.pixels[s:s + batch_size].to(device), v.mean, v.std))
                     for s in range(0, len(es.pixels), batch_size)]).float().cpu().numpy()
    txt = torch.cat([embed_texts(es.texts[s:s + batch_size]) for s in range(0, len(es.texts), batch_size)]
                    ).float().cpu().numpy()
    model.train(was)
    return recall_per_source(img, txt, es.rel, es.records)


def recall_per_source(img: np.ndarray, txt: np.ndarray, rel: np.ndarray,
                      records: Sequence[ImageRecord]) -> dict[str, float]:
    """:func:`retrieval_recall` overall and, with several sources, per source (``<source>/...``).

    Args:
        img: (I, D) image embeddings; txt: (T, D) text embeddings; rel: (I, T) bool.
    """
    out = retrieval_recall(img, txt, rel)
    sources = sorted({r.source for r in records})
    if len(sources) > 1:
        for src in sources:
            rows = np.array([r.source == src for r in records])
            cols = rel[rows].any(0)
            for key, val in retrieval_recall(img[rows], txt[cols], rel[rows][:, cols]).items():
                out[f"{src}/{key}"] = val
    return out


def retrieval_report(model: Any, recs: Sequence[ImageRecord], render_size: int) -> dict[str, float]:
    """The recipe's held-out figures (:func:`evaluate_model`'s keys) of ``model`` (an ``images``
    bundle or ``ImageRelevanceModel``: ``encode_images`` of the PIL pictures, ``encode_text``
    of their captions), as served: the model does its own resizing and normalisation."""
    texts, rel = caption_relevance(recs)
    img = np.asarray(model.encode_images([record_image(r, render_size) for r in recs]), dtype=np.float32)
    txt = np.asarray(model.encode_text(texts), dtype=np.float32)
    return recall_per_source(img, txt, rel, recs)


@dataclass(frozen=True)
class PlacementOutcomes:
    """What a placement did with each image of a set of documents, in document order: the
    per-image facts every placement figure is pooled from, so that two placements of the same
    documents can be compared document by document (:func:`placement_vs`).

    Attributes:
        right: (N,) bool: the image went where its gold says (its paragraph, or nowhere for a
            distractor).
        placed: (N,) bool: the image was placed next to a paragraph (placed and right: next
            to its gold paragraph).
        has_gold: (N,) bool: the image has a gold paragraph (not a distractor).
        clusters: the image indices of each document (its images go together in a resample).
    """

    right: np.ndarray
    placed: np.ndarray
    has_gold: np.ndarray
    clusters: tuple[tuple[int, ...], ...]

    def figures(self, idx: np.ndarray | None = None) -> dict[str, float]:
        """Placement accuracy / precision / recall / net over the images ``idx`` (default:
        all; an index may repeat, as in a bootstrap resample); 0.0 where a denominator is 0."""
        sel = slice(None) if idx is None else np.asarray(idx, dtype=np.int64)
        right, placed, with_gold = self.right[sel], self.placed[sel], int(self.has_gold[sel].sum())
        total, n_placed, n_right = len(right), int(placed.sum()), int((placed & right).sum())
        return {"placement_accuracy": float(right.sum()) / total if total else 0.0,
                "placement_precision": n_right / n_placed if n_placed else 0.0,
                "placement_recall": n_right / with_gold if with_gold else 0.0,
                # a wrong place costs what a right one earns: placing nothing scores 0
                "placement_net": (2 * n_right - n_placed) / total if total else 0.0}


def _outcomes(preds: Sequence[Sequence[int | None]], docs: Sequence[PlacementDoc]) -> PlacementOutcomes:
    pred = [a for p in preds for a in p]
    gold = [g for d in docs for g in d.gold]
    clusters, start = [], 0
    for d in docs:
        clusters.append(tuple(range(start, start + len(d.gold))))
        start += len(d.gold)
    return PlacementOutcomes(np.array([a == b for a, b in zip(pred, gold, strict=True)], dtype=bool),
                             np.array([a is not None for a in pred], dtype=bool),
                             np.array([g is not None for g in gold], dtype=bool), tuple(clusters))


def placement_outcomes(docs: Sequence[PlacementDoc], embed_text: Callable[[list[str]], np.ndarray],
                       image_emb: np.ndarray | None, placement: PlacementConfig) -> PlacementOutcomes:
    """Each image of ``docs`` placed as the pipeline places it.

    Args:
        embed_text: texts -> (N, d) unit vectors.
        image_emb: (I, d) unit vectors of the held-out records' pictures: the image-paragraph
            and caption-paragraph mix of ``combined_scores`` (an images model); None: the
            caption-paragraph cosine alone, uncaptioned images unscored (the pipeline's
            fallback without an images bundle).
    """
    preds = []
    for doc in docs:
        para = np.asarray(embed_text(doc.paragraphs), dtype=np.float64)  # (P, d)
        missing = [j for j, c in enumerate(doc.captions) if c is None]
        cap = np.zeros((len(doc.captions), para.shape[1]))  # (I, d); rows of uncaptioned images stay 0
        have = [j for j in range(len(doc.captions)) if j not in missing]
        if have:
            cap[have] = np.asarray(embed_text([doc.captions[j] for j in have]), dtype=np.float64)
        cp = para @ cap.T  # (P, I)
        if image_emb is None:
            cp[:, missing] = -1.0
            scores = cp
        else:
            cp[:, missing] = np.nan
            ip = para @ np.asarray(image_emb, dtype=np.float64)[doc.images].T
            scores = combined_scores(ip, cp if len(missing) < len(doc.captions) else None, None, placement)
        preds.append(assign_images(scores, placement.threshold))
    return _outcomes(preds, docs)


def no_placement_outcomes(docs: Sequence[PlacementDoc]) -> PlacementOutcomes:
    """The outcomes of placing nothing (what the pipeline does with an image it cannot score)."""
    return _outcomes([[None] * len(d.gold) for d in docs], docs)


def placement_figures(docs: Sequence[PlacementDoc], embed_text: Callable[[list[str]], np.ndarray],
                      image_emb: np.ndarray | None, placement: PlacementConfig) -> dict[str, float]:
    """Placement accuracy / precision / recall over ``docs``, scored as the pipeline scores
    (:func:`placement_outcomes`, same arguments), and ``placement_net``: (images placed right -
    images placed wrong) / images, 0 for placing nothing, above 0 only when more placements are
    right than wrong."""
    return placement_outcomes(docs, embed_text, image_emb, placement).figures()


def placement_vs(key: str, metric: str, baseline: PlacementOutcomes, model: PlacementOutcomes) -> dict[str, float]:
    """The paired test of two placements of the same documents on one pooled figure
    (``metric``: a key of :meth:`PlacementOutcomes.figures`), as the flat figures a
    ``beyond_noise`` gate reads (``<key>_diff``, ``_lo``, ``_hi``, ``_p``, ``_n``,
    ``_direction``): a bootstrap over documents, whose images are placed together
    (:func:`searchsmith.models.stats.clustered_figures`). {} without documents.

    Raises:
        ValidationError: the two placements are not of the same documents.
    """
    from searchsmith.models.stats import clustered_figures

    if baseline.clusters != model.clusters:
        raise ValidationError(f"paired placement test {key!r}: the two placements are of different documents "
                              f"({len(baseline.clusters)} and {len(model.clusters)}); score the same documents")

    def difference(idx: np.ndarray) -> float:
        return model.figures(idx)[metric] - baseline.figures(idx)[metric]

    return clustered_figures(key, model.clusters, difference)


def placement_report(model: Any, recs: Sequence[ImageRecord], render_size: int, seed: int,
                     placement: PlacementConfig | None = None) -> dict[str, float]:
    """:func:`placement_figures` of a model with ``encode_text`` / ``encode_images`` (an
    ``images`` bundle or ``ImageRelevanceModel``) on placement documents over ``recs``."""
    docs = placement_docs(recs, seed)
    img = np.asarray(model.encode_images([record_image(r, render_size) for r in recs]), dtype=np.float32)
    return placement_figures(docs, lambda t: np.asarray(model.encode_text(t)), img, placement or PlacementConfig())


def ood_docs(recs: Sequence[ImageRecord], source: str, n_docs: int, seed: int) -> list[PlacementDoc]:
    """The placement documents behind the pipeline's images gates: ``n_docs`` documents drawn
    from the held-out records ``recs`` whose ``source`` label is ``source`` (photos no run
    trained on); [] when too few for one document, or ``source`` is ``none``."""
    rows = [i for i, r in enumerate(recs) if r.source == source]
    return sampled_placement_docs(recs, rows, n_docs, seed) if source != "none" else []


def ood_placement_figures(docs: Sequence[PlacementDoc], embed_text: Callable[[list[str]], np.ndarray],
                          image_emb: np.ndarray | None, placement: PlacementConfig,
                          cosine: PlacementOutcomes | None = None) -> dict[str, float]:
    """The figures the pipeline's two images gates read, ``ood/...``, on :func:`ood_docs`.

    With ``image_emb`` (a model's picture vectors): ``ood/placement_*``, the model's
    placement of captioned images (its mix against the caption-cosine fallback), and
    ``ood/vision_placement_*``, the same documents with every caption hidden (the vision
    tower alone, against leaving uncaptioned images out), with the paired test of the latter
    against placing nothing (``ood/vision_placement_net_vs_none_*``) and, given ``cosine``
    (the caption-cosine placement's outcomes on the same documents), of the former against it
    (``ood/placement_accuracy_vs_cosine_*``; :func:`placement_vs`). Without (the fallback
    itself): ``ood/placement_*`` only. ``ood/docs``: the number of documents. {} without
    documents.
    """
    if not docs:
        return {}
    out = {"ood/docs": float(len(docs))}
    mixed = placement_outcomes(docs, embed_text, image_emb, placement)
    out.update({f"ood/{k}": v for k, v in mixed.figures().items()})
    if image_emb is not None:
        bare = [replace(d, captions=[None] * len(d.captions)) for d in docs]
        vision = placement_outcomes(bare, embed_text, image_emb, placement)
        out.update({f"ood/vision_{k}": v for k, v in vision.figures().items()})
        out.update(placement_vs("ood/vision_placement_net_vs_none", "placement_net", no_placement_outcomes(docs),
                                vision))
        if cosine is not None:
            out.update(placement_vs("ood/placement_accuracy_vs_cosine", "placement_accuracy", cosine, mixed))
    return out


def no_placement_figures(docs: Sequence[PlacementDoc]) -> dict[str, float]:
    """The figures of placing nothing (what the pipeline does with an image it cannot score):
    accuracy is the share of distractors (gold None), the net figure 0."""
    figs = no_placement_outcomes(docs).figures()
    return {"placement_accuracy": figs["placement_accuracy"], "placement_net": figs["placement_net"]}


def ood_placement_report(model: Any, recs: Sequence[ImageRecord], render_size: int, source: str, n_docs: int,
                         seed: int, placement: PlacementConfig | None = None,
                         cosine_embed: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, float]:
    """:func:`ood_placement_figures` of a model with ``encode_text`` / ``encode_images`` (a
    bundle or ``ImageRelevanceModel``) on :func:`ood_docs` over ``recs``; ``cosine_embed``
    (the recipe's ``data.baseline_embedder``): the caption-cosine placement it is tested
    against."""
    docs = ood_docs(recs, source, n_docs, seed)
    if not docs:
        return {}
    placement = placement or PlacementConfig()
    rows = sorted({i for d in docs for i in d.images})
    vecs = np.asarray(model.encode_images([record_image(recs[i], render_size) for i in rows]), dtype=np.float32)
    img = np.zeros((len(recs), vecs.shape[1]), dtype=np.float32)
    img[rows] = vecs  # only the documents' pictures are encoded
    cosine = placement_outcomes(docs, cosine_embed, None, placement) if cosine_embed is not None else None
    return ood_placement_figures(docs, lambda t: np.asarray(model.encode_text(t)), img, placement, cosine)


# ----------------------------------------------------------------------------- eval file


ITEM_KEYS = ("paragraphs", "images", "gold", "id", "query")


IMAGE_KEYS = ("id", "path", "caption")


@dataclass
class PlacementItem:
    """One record of the image relevance eval format, validated, images loaded."""

    id: str
    paragraphs: list[str]
    image_ids: list[str]
    images: list[Any]
    captions: list[str | None]
    gold: list[int | None]  # per image
    query: str | None = None


def _unknown(keys: Sequence[str], allowed: Sequence[str], where: str) -> None:
    bad = [k for k in keys if k not in allowed]
    if bad:
        hint = closest_key(bad[0], allowed)
        fix = f"; did you mean {hint!r}?" if hint else ""
        raise ValidationError(f"{where}: unknown key {bad[0]!r}{fix} (allowed: {list(allowed)})")


def read_placement_file(path: str | Path, limit: int = 0) -> list[PlacementItem]:
    """Read and validate an image relevance JSONL (paths relative to the file).

    Raises:
        ConfigError: the file is missing.
        ValidationError: unknown keys, wrong types, missing or unreadable images, gold ids
            not among the images, gold indices out of range, an empty file.
    """
    p = check_input_file(path, "--data", 'a JSONL file: {"paragraphs", "images", "gold"} per line; write one '
                         "with python -m searchsmith.training.images write-eval")
    items = []
    for n, rec in iter_jsonl(p):
        where = f"{p}:{n}"
        _unknown(list(rec), ITEM_KEYS, where)
        for k in ("paragraphs", "images", "gold"):
            if k not in rec:
                raise ValidationError(f"{where}: missing key {k!r}; required: paragraphs, images, gold")
        paras, imgs, gold = rec["paragraphs"], rec["images"], rec["gold"]
        if not isinstance(paras, list) or not paras or not all(isinstance(t, str) and t.strip() for t in paras):
            raise ValidationError(f"{where}: 'paragraphs' must be a non-empty list of non-empty strings")
        if not isinstance(imgs, list) or not imgs:
            raise ValidationError(f"{where}: 'images' must be a non-empty list of {{\"id\", \"path\", \"caption\"?}}")
        if not isinstance(gold, dict):
            raise ValidationError(f"{where}: 'gold' must be an object {{image_id: paragraph_index or null}}")
        ids, pil, caps, gold_list = [], [], [], []
        for j, im in enumerate(imgs):
            if not isinstance(im, dict):
                raise ValidationError(f"{where}: images[{j}] must be an object with 'id' and 'path'")
            _unknown(list(im), IMAGE_KEYS, f"{where}: images[{j}]")
            if not isinstance(im.get("id"), str) or not isinstance(im.get("path"), str):
                raise ValidationError(f"{where}: images[{j}] needs string 'id' and 'path'")
            if im["id"] in ids:
                raise ValidationError(f"{where}: image id {im['id']!r} appears twice")
            cap = im.get("caption")
            if cap is not None and not isinstance(cap, str):
                raise ValidationError(f"{where}: images[{j}].caption must be a string or absent")
            if im["id"] not in gold:
                raise ValidationError(f"{where}: gold has no entry for image {im['id']!r} (use null for "
                                      "an image that belongs to no paragraph)")
            g = gold[im["id"]]
            if g is not None and (isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < len(paras)):
                raise ValidationError(f"{where}: gold[{im['id']!r}] = {g!r} is out of range; expected an "
                                      f"integer in [0, {len(paras) - 1}] (paragraph index) or null")
            ids.append(im["id"])
            pil.append(load_image(p.parent / im["path"], where=f"{where}: images[{j}]"))
            caps.append(cap.strip() if cap and cap.strip() else None)
            gold_list.append(g)
        extra = [k for k in gold if k not in ids]
        if extra:
            raise ValidationError(f"{where}: gold names image id(s) {extra[:3]} that are not in 'images'")
        query = rec.get("query")
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ValidationError(f"{where}: 'query' must be a non-empty string or absent")
        items.append(PlacementItem(str(rec.get("id", n)), paras, ids, pil, caps, gold_list, query))
        if limit and len(items) >= limit:
            break
    if not items:
        raise ValidationError(f"{p}: no records (empty file); expected JSON lines with paragraphs, images, gold")
    return items


#: pooled placement figure -> (numerator, denominator) of the per-item counts it sums
POOLED_FIGURES = {"placement_accuracy": ("correct", "images"), "placement_precision": ("placed_right", "placed"),
                  "placement_recall": ("placed_right", "with_gold"),
                  **{f"recall@{k}": (f"hits@{k}", "with_gold") for k in RECALL_KS},
                  **{f"chance/recall@{k}": (f"chance@{k}", "with_gold") for k in RECALL_KS}}


def _figures(counts: dict[str, float]) -> dict[str, float | None]:
    """One item's placement figures from its counts (None where the denominator is 0)."""
    return {name: counts[num] / counts[den] if counts[den] else None for name, (num, den) in POOLED_FIGURES.items()}


def placement_metrics(scorer: Any, items: Sequence[PlacementItem], placement: PlacementConfig,
                      on_item: Callable[[PlacementItem], None] | None = None
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Placement accuracy / precision / recall at the threshold and paragraph recall@1/@5.

    ``scorer``: an ``images`` bundle or ``ImageRelevanceModel`` (``encode_text`` /
    ``encode_images``); ``on_item`` is called after each item (progress).
    """
    per_item = []
    for it in items:
        para = scorer.encode_text(it.paragraphs)  # (P, D)
        img = scorer.encode_images(it.images)  # (I, D)
        ip = para @ img.T  # (P, I)
        cp = None
        if any(c is not None for c in it.captions):
            cap_emb = scorer.encode_text([c or "" for c in it.captions])  # (I, D)
            cp = para @ cap_emb.T
            cp[:, [j for j, c in enumerate(it.captions) if c is None]] = np.nan
        iq = (scorer.encode_text([it.query]) @ img.T)[0] if it.query else None
        scores = combined_scores(ip, cp, iq, placement)
        pred = assign_images(scores, placement.threshold)
        n_ok = sum(int(a == b) for a, b in zip(pred, it.gold, strict=True))
        ranks = {}
        for j, g in enumerate(it.gold):
            if g is None:
                continue
            order = np.argsort(-scores[:, j], kind="stable")
            ranks[it.image_ids[j]] = int(np.where(order == g)[0][0]) + 1
        # the item's counts (what the pooled figures sum) and its own figures under their names
        counts = {"paragraphs": len(it.paragraphs), "images": len(it.image_ids), "correct": n_ok,
                  "placed": sum(a is not None for a in pred),
                  "placed_right": sum(a is not None and a == b for a, b in zip(pred, it.gold, strict=True)),
                  "with_gold": len(ranks)}
        for k in RECALL_KS:
            counts[f"hits@{k}"] = sum(r <= k for r in ranks.values())
            counts[f"chance@{k}"] = len(ranks) * min(k, len(it.paragraphs)) / len(it.paragraphs)
        per_item.append({"id": it.id, "predicted": dict(zip(it.image_ids, pred, strict=True)),
                         "gold": dict(zip(it.image_ids, it.gold, strict=True)), "gold_rank": ranks,
                         "counts": counts, **_figures(counts)})
        if on_item is not None:
            on_item(it)
    if not per_item:
        raise ValidationError("placement metrics: no items to score")
    totals = {key: sum(r["counts"][key] for r in per_item) for key in per_item[0]["counts"]}
    out: dict[str, Any] = {"task": "images", "items": len(items), "images": totals["images"],
                           "threshold": placement.threshold, "placed": totals["placed"]}
    # pooled over the images (0.0 where the denominator is 0)
    out.update({name: 0.0 if v is None else v for name, v in _figures(totals).items()})
    return out, per_item


def eval_images(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval images --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``.

    ``args``: ``.data``, ``.checkpoint`` or ``.bundle``, ``.limit`` (first N records),
    ``.per_item`` (one JSON line per record), ``.threshold`` (optional; default
    ``PlacementConfig.threshold``). Every figure is pooled over the images; its bootstrap 95 %
    interval (``<name>_ci95``) resamples the records and recomputes it. A per-item line is
    identified by ``id`` (the record's, else its line number) and carries the record's own
    figures under the summary's names (null where undefined) and the ``counts`` they pool.
    """
    from searchsmith.training.evaluate import load_eval_model, progress_bar

    limit = int(getattr(args, "limit", 0) or 0)
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {limit}")
    items = read_placement_file(args.data, limit)
    threshold = getattr(args, "threshold", None)
    placement = PlacementConfig() if threshold is None else PlacementConfig(threshold=float(threshold))
    em = load_eval_model("images", args)  # a run (--checkpoint) or a bundle (--bundle), one API
    with progress_bar("eval images", sum(len(it.image_ids) for it in items), "image") as bar:
        out, per_item = placement_metrics(em.model, items, placement,
                                          on_item=lambda it: bar.update(len(it.image_ids)))
    if getattr(args, "per_item", None):
        write_jsonl_atomic(args.per_item, per_item)
    pooled = {name: ratio([r["counts"][num] for r in per_item], [r["counts"][den] for r in per_item])
              for name, (num, den) in POOLED_FIGURES.items()}
    return with_bootstrap({**out, "model": em.origin}, per_item, pooled=pooled)


__all__ = [
    "RECALL_KS",
    "EvalSet",
    "POOLED_FIGURES",
    "PlacementItem",
    "caption_relevance",
    "eval_images",
    "evaluate_model",
    "make_eval_set",
    "PlacementOutcomes",
    "no_placement_figures",
    "no_placement_outcomes",
    "ood_docs",
    "ood_placement_figures",
    "ood_placement_report",
    "placement_outcomes",
    "placement_vs",
    "placement_figures",
    "placement_metrics",
    "placement_report",
    "read_placement_file",
    "recall_per_source",
    "retrieval_recall",
    "retrieval_report",
]
