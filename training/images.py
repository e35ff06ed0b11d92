"""Image relevance recipe: a dual encoder trained with a symmetric contrastive loss.

Model (:class:`searchsmith.models.image_relevance.ImageRelevanceModel`): the MiniLM text
tower (frozen by default; ``lora.enabled`` for LoRA, ``text.freeze: false`` to train it
fully) with mean pooling and a linear projection, and a small CNN vision tower trained
from scratch; both L2-normalised into one space, with a learnable temperature.

Data sources (``data.sources``; registered dataset builders returning image records):

* ``synthetic_images``: generated pictures with exact captions (shapes, colours,
  positions, bar/line/pie charts, rendered words, stripes; :mod:`.image_data`), so the
  recipe runs without ../shared and sees thousands of varied pictures;
* ``coco_captions``: the COCO open part (``data.coco_dir``: ``captions.jsonl`` + ``images/``,
  100 photos, 5 captions each).

Each source is split (seeded, by image id) into train and held-out images; a held-out
image and its captions are never trained on. With a frozen text tower every caption is
encoded once (mean-pooled encoder states, cached in ``RUN_DIR/cache``); training then
only runs the vision tower and the two projections.

Metrics on the held-out split: image->text and text->image recall@1/@5 (a hit when a
caption of the image, or an image carrying that caption text, is in the top k), overall
and per source, beside chance and the untrained model (``metrics.json`` "baselines").

``eval_images`` is ``searchsmith eval images`` (the "images" format of ``searchsmith eval --help``);
``python -m searchsmith.training.images write-eval OUT.jsonl`` writes such a file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.config import closest_key
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import model_display_name
from searchsmith.models.image_relevance import (
    ImageRelevanceConfig,
    ImageRelevanceModel,
    PlacementConfig,
    assign_images,
    combined_scores,
    images_to_uint8,
    normalise_pixels,
)
from searchsmith.training.config import LoraConfig, OptimConfig, TrainConfig
from searchsmith.training.data import split_by_key, write_jsonl_atomic
from searchsmith.training.image_data import (
    KINDS,
    ImageRecord,
    coco_records,
    load_image,
    record_image,
    synthetic_records,
)
from searchsmith.training.registry import (
    get_dataset,
    register_dataset,
    register_loss,
    register_recipe,
)
from searchsmith.training.trainer import apply_lora, train, write_json_atomic

SHARED = "../shared/data"
RECALL_KS = (1, 5)


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ImagesData:
    """Where the image-caption pairs come from and how they are split.

    Attributes:
        sources: the image sets to train and evaluate on: ``synthetic_images`` (generated
            pictures with exact captions; needs no files) and/or ``coco_captions`` (the
            photos in ``coco_dir``).
        coco_dir: folder with ``captions.jsonl`` (``image_id``, ``file_name``, ``captions``)
            and ``images/``; as given, else against the repository root; read only when
            ``coco_captions`` is a source.
        synthetic_images: pictures generated for ``synthetic_images``, each with its
            captions. More: more varied training data, more rendering time and memory (the
            pixels of every picture are held in memory).
        synthetic_seed: seed of the generated pictures (kinds, contents, jitter); the
            records' ids carry it.
        synthetic_kinds: the kinds of generated pictures, drawn uniformly: a non-empty
            subset of shapes, bars, line, pie, text, stripes.
        eval_ratio: share of each source's images held out for evaluation (split by image
            id); a held-out image and its captions are never trained on.
        split_seed: seed of the train/held-out split and of the held-out placement
            documents built from it.
    """

    sources: list[str] = field(default_factory=lambda: ["synthetic_images", "coco_captions"])
    coco_dir: str = f"{SHARED}/coco_captions"
    synthetic_images: int = 4000
    synthetic_seed: int = 11
    synthetic_kinds: list[str] = field(default_factory=lambda: list(KINDS))
    # Generated pictures are drawn at this size, then resized like any input image.
    render_size: int = 128
    eval_ratio: float = 0.15
    split_seed: int = 13
    # Text embedder of the caption-cosine placement baseline (the pipeline's placement without
    # an images bundle), measured on the held-out placement documents; "none" skips it.
    baseline_embedder: str = "default"

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic_images]")
        if not 16 <= self.render_size <= 1024:
            raise ValueError(f"data.render_size must be in [16, 1024] px, got {self.render_size}")


@dataclass(frozen=True)
class TextTowerSettings:
    """The text tower: pretrained or random-init encoder, its tokenizer, frozen or trained.

    Attributes:
        config: a transformers config dict (needs ``model_type``) that builds a random-init
            encoder (the tiny twin) instead of loading ``base_model``; null loads the
            pretrained ``base_model``.
        tokenizer: ``default``: the pretrained base model's own tokenizer (the bundled
            all-MiniLM-L6-v2 one with ``config``); else a local folder or hub id. The
            encoder's vocabulary must cover it.
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    # Frozen: captions are encoded once and cached; only the projection learns on that side.
    freeze: bool = True


@dataclass(frozen=True)
class ImagesRecipe:
    """The image relevance recipe (YAML key = field name = override path).

    Attributes:
        recipe: the registered recipe name, ``images``; it selects this config class.
        output_dir: the run folder (relative to the current folder): ``checkpoints/``,
            ``model/``, ``metrics.json``, ``run.json``, ``split.json``, ``cache/`` (caption
            features). Rerunning with the same config resumes from its newest checkpoint.
            ``--output-dir`` overrides it; it is left out of the config hash.
        base_model: the pretrained text encoder of the text tower: ``default`` (the bundled
            all-MiniLM-L6-v2, offline), a local model folder or a hub id; ignored when
            ``text.config`` builds a random-init one. The vision tower always starts from
            scratch.
        loss: the contrastive loss; ``infonce`` (symmetric CLIP-style InfoNCE over the
            in-batch image-caption pairs) is the only one.
        eval_batch_size: images or captions per forward pass in the held-out evaluation;
            speed and memory only.
    """

    recipe: str
    output_dir: str
    base_model: str = "default"
    loss: Literal["infonce"] = "infonce"
    eval_batch_size: int = 128
    # torch CPU threads for this run (0: torch's default). On a shared, busy CPU one thread
    # per process can be several times faster than fighting over the cores.
    cpu_threads: int = 0
    model: ImageRelevanceConfig = field(default_factory=ImageRelevanceConfig)
    text: TextTowerSettings = field(default_factory=TextTowerSettings)
    data: ImagesData = field(default_factory=ImagesData)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if self.cpu_threads < 0:
            raise ValueError(f"cpu_threads must be >= 0 (0 = torch's default), got {self.cpu_threads}")
        if self.lora.enabled and not self.text.freeze:
            raise ValueError("lora.enabled with text.freeze: false is ambiguous: LoRA trains adapters on "
                             "a frozen encoder; keep text.freeze: true for LoRA, or disable LoRA to "
                             "train the whole text tower")
        if self.optim.batch_size < 2:
            raise ValueError("optim.batch_size must be >= 2: the contrastive loss needs in-batch negatives")


# ----------------------------------------------------------------------------- data


@register_dataset("synthetic_images")
def synthetic_image_records(data: ImagesData) -> list[ImageRecord]:
    """Generated pictures with captions (deterministic in ``data.synthetic_seed``)."""
    return synthetic_records(data.synthetic_images, data.synthetic_seed, data.synthetic_kinds)


@register_dataset("coco_captions")
def coco_caption_records(data: ImagesData) -> list[ImageRecord]:
    """The COCO open part from ``data.coco_dir``."""
    return coco_records(data.coco_dir, field="data.coco_dir")


def load_records(data: ImagesData) -> dict[str, list[ImageRecord]]:
    """Records of every source in ``data.sources`` (by source name), each non-empty."""
    out: dict[str, list[ImageRecord]] = {}
    for name in data.sources:
        got = get_dataset(name, field="data.sources")(data)
        if not isinstance(got, list) or not all(isinstance(r, ImageRecord) for r in got):
            raise ConfigError(f"data.sources: {name!r} is not an image dataset; use synthetic_images "
                              "or coco_captions")
        if not got:
            raise ValidationError(f"data.sources: {name!r} gave no image (empty dataset); check its files")
        out[name] = got
    return out


def split_records(by_source: dict[str, list[ImageRecord]], eval_ratio: float,
                  seed: int) -> tuple[list[ImageRecord], list[ImageRecord]]:
    """Per-source seeded split by image id into (train, held-out)."""
    train_recs, eval_recs = [], []
    for name, recs in by_source.items():
        tr, ev = split_by_key([r.id for r in recs], eval_ratio, seed)
        if not tr or not ev:
            raise ValidationError(f"data: source {name!r} has {len(recs)} image(s), too few to split "
                                  f"into train and held-out (data.eval_ratio={eval_ratio}); add images")
        train_recs += [r for r in recs if r.id in tr]
        eval_recs += [r for r in recs if r.id in ev]
    return train_recs, eval_recs


def records_to_pixels(recs: Sequence[ImageRecord], image_size: int, render_size: int) -> torch.Tensor:
    """(M, 3, S, S) uint8, through the same resize as inference (``images_to_uint8``)."""
    chunks = []
    for s in range(0, len(recs), 256):  # bounded memory for the PIL images
        chunks.append(images_to_uint8([record_image(r, render_size) for r in recs[s:s + 256]], image_size))
    return torch.from_numpy(np.concatenate(chunks))


@torch.no_grad()
def pooled_text_features(model: ImageRelevanceModel, texts: Sequence[str], cache_dir: Path | None,
                         key_extra: str, batch_size: int = 256) -> torch.Tensor:
    """Mean-pooled encoder states of ``texts``, (N, H) float32, cached on disk by content."""
    key = hashlib.sha256(("\x1f".join(texts) + "\x1e" + key_extra).encode("utf-8")).hexdigest()[:16]
    path = cache_dir / f"text-{key}.npy" if cache_dir is not None else None
    if path is not None and path.is_file():
        return torch.from_numpy(np.load(path))
    tower = model.text_tower
    was = tower.training
    tower.eval()
    device = next(tower.parameters()).device
    out = []
    # Sorted by length so each batch pads little; the order is restored below.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        enc = {k: v.to(device) for k, v in model.tokenize([texts[i] for i in idx]).items()}
        out.append(tower.pooled(**enc).float().cpu())
    tower.train(was)
    feats = torch.empty(len(texts), out[0].shape[1])
    feats[torch.tensor(order)] = torch.cat(out)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.tmp.npy")
        np.save(tmp, feats.numpy())
        tmp.replace(path)
    return feats


# ----------------------------------------------------------------------------- loss and metrics


@register_loss("infonce")
def infonce_loss(image_emb: torch.Tensor, text_emb: torch.Tensor, scale: torch.Tensor,
                 targets: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric InfoNCE (CLIP): mean of image->text and text->image cross-entropy.

    Args:
        image_emb, text_emb: (B, D) unit vectors; row i of each is a matching pair.
        scale: scalar, 1 / temperature.
        targets: (B, B) 0/1, 1 where image i matches text j (several when two images carry
            the same caption text); the identity when None. Rows are normalised into
            target distributions, so a duplicate caption is not punished as a negative.
    """
    logits = scale * image_emb.float() @ text_emb.float().T  # (B, B)
    t = torch.eye(len(logits), device=logits.device) if targets is None else targets.float()
    i2t = -(t / t.sum(1, keepdim=True) * F.log_softmax(logits, dim=1)).sum(1).mean()
    tt = t.T
    t2i = -(tt / tt.sum(1, keepdim=True) * F.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (i2t + t2i) / 2


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


# ----------------------------------------------------------------------------- recipe


def _text_embed_fn(model: ImageRelevanceModel, cached: dict[str, torch.Tensor] | None
                   ) -> Callable[[Sequence[str]], torch.Tensor]:
    """texts -> (N, D) unit vectors: projection of cached features, or the whole text tower."""
    def fn(texts: Sequence[str]) -> torch.Tensor:
        device = next(model.parameters()).device
        if cached is not None:
            feats = torch.stack([cached[t] for t in texts]).to(device)
            return F.normalize(model.text_tower.proj(feats), dim=-1)
        return torch.from_numpy(model.encode_text(list(texts))).to(device)
    return fn


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


@dataclass
class PlacementDoc:
    """A held-out stand-in document: paragraphs (one caption of each of ``paragraphs_per_doc``
    pictures) and images to place (``images``: rows of the held-out records; ``captions``: the
    image's other caption, or None; ``gold``: its paragraph, None for a distractor)."""

    paragraphs: list[str]
    images: list[int]
    captions: list[str | None]
    gold: list[int | None]


def placement_docs(recs: Sequence[ImageRecord], seed: int, paragraphs_per_doc: int = 10,
                   images_per_doc: int = 4, distractors: int = 1) -> list[PlacementDoc]:
    """Placement documents over held-out records, as :func:`write_placement_file` builds them
    (each picture's first caption is a paragraph, its last caption the image's caption)."""
    rng = random.Random(seed)
    order = list(range(len(recs)))
    rng.shuffle(order)
    per_doc = paragraphs_per_doc + distractors
    docs = []
    for d in range(len(order) // per_doc):
        group = order[d * per_doc:(d + 1) * per_doc]
        paras, extra = group[:paragraphs_per_doc], group[paragraphs_per_doc:]
        shown = rng.sample(range(paragraphs_per_doc), images_per_doc)
        images = [paras[j] for j in shown] + extra
        docs.append(PlacementDoc([recs[i].captions[0] for i in paras], images,
                                 [recs[i].captions[-1] if len(recs[i].captions) > 1 else None for i in images],
                                 [*shown, *([None] * len(extra))]))
    return docs


def placement_figures(docs: Sequence[PlacementDoc], embed_text: Callable[[list[str]], np.ndarray],
                      image_emb: np.ndarray | None, placement: PlacementConfig) -> dict[str, float]:
    """Placement accuracy / precision / recall over ``docs``, scored as the pipeline scores.

    Args:
        embed_text: texts -> (N, d) unit vectors.
        image_emb: (I, d) unit vectors of the held-out records' pictures: the image-paragraph
            and caption-paragraph mix of ``combined_scores`` (an images model); None: the
            caption-paragraph cosine alone, uncaptioned images unscored (the pipeline's
            fallback without an images bundle).
    """
    correct = placed = placed_right = with_gold = total = 0
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
        pred = assign_images(scores, placement.threshold)
        total += len(pred)
        correct += sum(int(a == b) for a, b in zip(pred, doc.gold, strict=True))
        placed += sum(a is not None for a in pred)
        placed_right += sum(a is not None and a == b for a, b in zip(pred, doc.gold, strict=True))
        with_gold += sum(g is not None for g in doc.gold)
    return {"placement_accuracy": correct / total if total else 0.0,
            "placement_precision": placed_right / placed if placed else 0.0,
            "placement_recall": placed_right / with_gold if with_gold else 0.0}


def placement_report(model: Any, recs: Sequence[ImageRecord], render_size: int, seed: int,
                     placement: PlacementConfig | None = None) -> dict[str, float]:
    """:func:`placement_figures` of a model with ``encode_text`` / ``encode_images`` (an
    ``images`` bundle or ``ImageRelevanceModel``) on placement documents over ``recs``."""
    docs = placement_docs(recs, seed)
    img = np.asarray(model.encode_images([record_image(r, render_size) for r in recs]), dtype=np.float32)
    return placement_figures(docs, lambda t: np.asarray(model.encode_text(t)), img, placement or PlacementConfig())


def batch_stream(train_recs: list[ImageRecord], pixels: torch.Tensor, model: ImageRelevanceModel,
                 cached: dict[str, torch.Tensor] | None, cfg: ImagesRecipe) -> Callable[[int], Iterator[dict[str, Any]]]:
    """``epoch -> micro-batches`` of B distinct images, one of each image's captions.

    Each batch: ``pixels`` (B, 3, S, S) uint8; ``text_features`` (B, H) cached pooled states
    (frozen tower) or ``input_ids``/``attention_mask`` (B, T); ``targets`` (B, B) 0/1, 1 where
    the caption texts are equal.
    """
    bs = cfg.optim.batch_size

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        rng = random.Random(cfg.train.seed * 100_003 + epoch)
        order = list(range(len(train_recs)))
        rng.shuffle(order)
        for s in range(0, len(order) - bs + 1, bs):  # drop the ragged tail: fixed (B, B)
            idx = order[s:s + bs]
            caps = [rng.choice(train_recs[i].captions) for i in idx]
            targets = torch.tensor([[float(a == b) for b in caps] for a in caps])
            batch: dict[str, Any] = {"pixels": pixels[idx], "targets": targets}
            if cached is not None:
                batch["text_features"] = torch.stack([cached[c] for c in caps])
            else:
                batch.update(model.tokenize(caps))
            yield batch

    return stream


def build_model(cfg: ImagesRecipe) -> ImageRelevanceModel:
    """The dual encoder with its text tower frozen, LoRA-wrapped or fully trainable."""
    model = ImageRelevanceModel.build(cfg.model, cfg.base_model, cfg.text.config, cfg.text.tokenizer)
    if cfg.lora.enabled:
        model.text_tower.encoder = apply_lora(model.text_tower.encoder, cfg.lora, "FEATURE_EXTRACTION")
    elif cfg.text.freeze:
        model.text_tower.encoder.requires_grad_(False)
    return model


@register_recipe("images", ImagesRecipe)
def images(cfg: ImagesRecipe, run_dir: Path, force: bool = False) -> dict[str, Any]:
    """Train the dual encoder; return the held-out metrics (also in ``metrics.json``)."""
    threads = torch.get_num_threads()
    if cfg.cpu_threads and not torch.cuda.is_available():
        torch.set_num_threads(cfg.cpu_threads)
    try:
        return _run(cfg, Path(run_dir), force)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: ImagesRecipe, run_dir: Path, force: bool) -> dict[str, Any]:

    # 1. Model (seeded here: the untrained baseline below must be the same on every rerun).
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg)
    frozen = cfg.text.freeze and not cfg.lora.enabled

    # 2. Data: records, per-source split by image id, pixels, cached caption features.
    by_source = load_records(cfg.data)
    train_recs, eval_recs = split_records(by_source, cfg.data.eval_ratio, cfg.data.split_seed)
    if len(train_recs) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(train_recs)} training images, fewer than optim.batch_size="
                              f"{cfg.optim.batch_size}; add images (data.synthetic_images) or lower it")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {"seed": cfg.data.split_seed,
                                               "train": sorted(r.id for r in train_recs),
                                               "eval": sorted(r.id for r in eval_recs)})
    size, render = cfg.model.vision.image_size, cfg.data.render_size
    train_pixels = records_to_pixels(train_recs, size, render)
    eval_set = make_eval_set(eval_recs, records_to_pixels(eval_recs, size, render))
    cached = None
    if frozen:
        texts = list(dict.fromkeys([c for r in train_recs for c in r.captions] + eval_set.texts))
        key = f"{cfg.base_model}|{cfg.text.config}|{cfg.model.max_length}"
        feats = pooled_text_features(model, texts, run_dir / "cache", key)
        cached = dict(zip(texts, feats, strict=True))
    embed_texts = _text_embed_fn(model, cached)

    # Held-out placement documents: what the pipeline's images gate compares (placement by
    # this model against caption-cosine placement, the pipeline's fallback).
    docs = placement_docs(eval_recs, cfg.data.split_seed)
    placement = PlacementConfig()
    vis = cfg.model.vision

    def eval_fn(m: Any) -> dict[str, float]:
        out = evaluate_model(m, eval_set, embed_texts, cfg.eval_batch_size)
        if docs:
            was = m.training
            m.eval()
            device = next(m.parameters()).device
            with torch.no_grad():
                img = torch.cat([m.vision_tower(normalise_pixels(eval_set.pixels[s:s + cfg.eval_batch_size].to(device),
                                                                 vis.mean, vis.std))
                                 for s in range(0, len(eval_set.pixels), cfg.eval_batch_size)]).float().cpu().numpy()

                def text(texts: list[str]) -> np.ndarray:
                    return embed_texts(texts).float().cpu().numpy()

                out.update(placement_figures(docs, text, img, placement))
            m.train(was)
        return out

    untrained = eval_fn(model)
    baselines: dict[str, Any] = {
        "chance": {k.removeprefix("chance/"): v for k, v in untrained.items() if k.startswith("chance/")},
        "untrained": {k: v for k, v in untrained.items() if "chance/" not in k},
        "data": {"train_images": len(train_recs), "eval_images": len(eval_recs),
                 "eval_texts": len(eval_set.texts),
                 "train_images_per_source": {s: sum(r.source == s for r in train_recs)
                                             for s in sorted({r.source for r in train_recs})},
                 "placement_docs": len(docs)},
    }
    if docs and cfg.data.baseline_embedder != "none":
        from searchsmith.training.reranker import CachedEmbedder

        emb = CachedEmbedder(cfg.data.baseline_embedder, run_dir / "cache")
        cosine = placement_figures(docs, lambda t: emb.encode(list(t)), None, placement)
        # flat: the export copies flat baselines into the bundle manifest, where the gate reads them
        baselines.update({f"cosine_{k}": v for k, v in cosine.items()})
        del emb

    # 3. Loss: symmetric InfoNCE over the in-batch pairs.
    v = cfg.model.vision

    def loss_fn(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        image_emb = m.vision_tower(normalise_pixels(batch["pixels"], v.mean, v.std))  # (B, D)
        if "text_features" in batch:
            text_emb = F.normalize(m.text_tower.proj(batch["text_features"]), dim=-1)  # (B, D)
        else:
            text_emb = m.text_tower(batch["input_ids"], batch["attention_mask"])
        return infonce_loss(image_emb, text_emb, m.temperature_scale(), batch["targets"])

    def on_step(step: int, m: Any) -> None:
        getattr(m, "module", m).trained_steps.fill_(step)

    # 4. Train (5. saving: the trainer calls model.save_pretrained -> the contract layout).
    result = train(
        model, loss_fn, batch_stream(train_recs, train_pixels, model, cached, cfg), cfg, run_dir,
        eval_fn, tokenizer=None, baselines=baselines, force=force, on_step=on_step,
        run_info={"task": "images", "recipe": cfg.recipe,
                  "base_model": "random-init (text.config)" if cfg.text.config is not None
                  else model_display_name(cfg.base_model),
                  "text_tower": "lora" if cfg.lora.enabled else "frozen" if frozen else "full",
                  "vision_tower": f"{v.kind} {v.channels} @ {v.image_size}px",
                  "max_length": cfg.model.max_length, "image_size": v.image_size},
    )
    return result.final_metrics


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
    from searchsmith.models.text import iter_jsonl

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--data: {str(p)!r} does not exist (a JSONL file: {{\"paragraphs\", \"images\", "
                          "\"gold\"}} per line; write one with python -m searchsmith.training.images write-eval)")
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


def placement_metrics(scorer: Any, items: Sequence[PlacementItem], placement: PlacementConfig,
                      on_item: Callable[[PlacementItem], None] | None = None
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Placement accuracy / precision / recall at the threshold and paragraph recall@1/@5.

    ``scorer``: an ``images`` bundle or ``ImageRelevanceModel`` (``encode_text`` /
    ``encode_images``); ``on_item`` is called after each item (progress).
    """
    correct = placed = placed_right = with_gold = 0
    hits = {k: 0 for k in RECALL_KS}
    chance = {k: 0.0 for k in RECALL_KS}
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
        correct += n_ok
        placed += sum(a is not None for a in pred)
        placed_right += sum(a is not None and a == b for a, b in zip(pred, it.gold, strict=True))
        ranks = {}
        for j, g in enumerate(it.gold):
            if g is None:
                continue
            with_gold += 1
            order = np.argsort(-scores[:, j], kind="stable")
            rank = int(np.where(order == g)[0][0]) + 1
            ranks[it.image_ids[j]] = rank
            for k in RECALL_KS:
                hits[k] += int(rank <= k)
                chance[k] += min(k, len(it.paragraphs)) / len(it.paragraphs)
        per_item.append({"id": it.id, "paragraphs": len(it.paragraphs), "images": len(it.image_ids),
                         "predicted": dict(zip(it.image_ids, pred, strict=True)),
                         "gold": dict(zip(it.image_ids, it.gold, strict=True)),
                         "correct": n_ok, "gold_rank": ranks})
        if on_item is not None:
            on_item(it)
    n_img = sum(len(it.image_ids) for it in items)
    out: dict[str, Any] = {
        "task": "images", "items": len(items), "images": n_img, "threshold": placement.threshold,
        "placement_accuracy": correct / n_img,
        "placement_precision": placed_right / placed if placed else 0.0,
        "placement_recall": placed_right / with_gold if with_gold else 0.0,
        "placed": placed,
    }
    for k in RECALL_KS:
        out[f"recall@{k}"] = hits[k] / with_gold if with_gold else 0.0
        out[f"chance/recall@{k}"] = chance[k] / with_gold if with_gold else 0.0
    return out, per_item


def eval_images(args: argparse.Namespace) -> dict[str, Any]:
    """``searchsmith eval images --data F.jsonl (--checkpoint RUN_DIR | --bundle DIR)``.

    ``args``: ``.data``, ``.checkpoint`` or ``.bundle``, ``.limit`` (first N records),
    ``.per_item`` (one JSON line per record), ``.threshold`` (optional; default
    ``PlacementConfig.threshold``).
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
    return {**out, "model": em.origin}


def write_placement_file(out_path: str | Path, source: str = "synthetic", docs: int = 40,
                         paragraphs_per_doc: int = 10, images_per_doc: int = 4, distractors: int = 1,
                         seed: int = 1009, coco_dir: str = f"{SHARED}/coco_captions",
                         only_ids: set[str] | None = None, with_captions: bool = False) -> Path:
    """Write an image relevance eval file (the "images" format of ``searchsmith eval --help``).

    Each record is a made-up document: the paragraphs are one caption each of
    ``paragraphs_per_doc`` pictures (stand-in paragraphs), ``images_per_doc`` of those
    pictures are to be placed (gold: their paragraph), and ``distractors`` other pictures
    belong to no paragraph (gold null). Synthetic pictures are saved as PNG under
    ``images/`` beside the file (a fresh ``seed``, so not the training pictures); COCO
    images are referenced by relative path (never copied). ``only_ids`` limits COCO to
    those image ids (e.g. a run's held-out split); ``with_captions`` adds each image's
    second caption as its ``caption``.
    """
    import os

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    per_doc = paragraphs_per_doc + distractors
    if images_per_doc > paragraphs_per_doc:
        raise ConfigError(f"images_per_doc ({images_per_doc}) must be <= paragraphs_per_doc ({paragraphs_per_doc})")
    if source == "synthetic":
        recs = synthetic_records(docs * per_doc, seed, prefix="evalsyn")
    elif source == "coco":
        recs = [r for r in coco_records(coco_dir, field="--coco-dir") if only_ids is None or r.id in only_ids]
    else:
        raise ConfigError(f"--source: expected synthetic or coco, got {source!r}")
    rng = random.Random(seed)
    rng.shuffle(recs)
    if len(recs) < per_doc:
        raise ValidationError(f"{source}: {len(recs)} images, fewer than one document needs ({per_doc})")
    img_dir = out.parent / "images"
    rows = []
    for d in range(min(docs, len(recs) // per_doc)):
        group = recs[d * per_doc:(d + 1) * per_doc]
        para_recs, extra = group[:paragraphs_per_doc], group[paragraphs_per_doc:]
        shown = rng.sample(range(paragraphs_per_doc), images_per_doc)
        images, gold = [], {}
        for j, r in [(j, para_recs[j]) for j in shown] + [(None, r) for r in extra]:
            if r.spec is not None:
                img_dir.mkdir(parents=True, exist_ok=True)
                path = img_dir / f"{r.id}.png"
                record_image(r).save(path)
            else:
                path = Path(r.path or "")
            entry = {"id": r.id, "path": os.path.relpath(Path(path).resolve(), out.parent.resolve())}
            if with_captions and len(r.captions) > 1:
                entry["caption"] = r.captions[1]
            images.append(entry)
            gold[r.id] = j
        rng.shuffle(images)
        rows.append({"id": f"{source}-doc-{d}", "paragraphs": [r.captions[0] for r in para_recs],
                     "images": images, "gold": gold})
    return write_jsonl_atomic(out, rows)


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.images")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-eval", help="write an image relevance eval JSONL (the format of 'searchsmith eval --help')")
    w.add_argument("out")
    w.add_argument("--source", choices=["synthetic", "coco"], default="synthetic")
    w.add_argument("--docs", type=int, default=40)
    w.add_argument("--seed", type=int, default=1009)
    w.add_argument("--coco-dir", default=f"{SHARED}/coco_captions")
    w.add_argument("--heldout-of", help="a run folder: keep only its held-out COCO images (split.json)")
    w.add_argument("--with-captions", action="store_true", help="add each image's second caption")
    a = p.parse_args(argv)
    only = None
    if a.heldout_of:
        split = Path(a.heldout_of) / "split.json"
        if not split.is_file():
            raise ConfigError(f"--heldout-of: {split} not found (written by the images recipe)")
        only = set(json.loads(split.read_text(encoding="utf-8"))["eval"])
    out = write_placement_file(a.out, a.source, a.docs, seed=a.seed, coco_dir=a.coco_dir, only_ids=only,
                               with_captions=a.with_captions)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())


__all__ = [
    "EvalSet",
    "ImagesData",
    "ImagesRecipe",
    "PlacementDoc",
    "PlacementItem",
    "TextTowerSettings",
    "build_model",
    "eval_images",
    "evaluate_model",
    "images",
    "infonce_loss",
    "load_records",
    "placement_docs",
    "placement_figures",
    "placement_metrics",
    "placement_report",
    "read_placement_file",
    "retrieval_recall",
    "split_records",
    "write_placement_file",
]
