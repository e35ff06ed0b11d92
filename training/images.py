"""Image relevance recipe: a dual encoder trained with a symmetric contrastive loss.

Model (:class:`searchsmith.models.image_relevance.ImageRelevanceModel`): the MiniLM text
tower (frozen by default; ``lora.enabled`` for LoRA, ``text.freeze: false`` to train it
fully) with mean pooling and a linear projection, and a vision tower: a small CNN trained
from scratch, or a CLIP vision tower (``model.vision.kind: clip``, from a hub or a local
folder, or random-init from ``model.vision.clip_config``) with a linear projection; both
L2-normalised into one space, with a learnable temperature.

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

Metrics on the held-out split (:mod:`searchsmith.training.evaluate_images`): image->text and
text->image recall@1/@5, overall and per source, and placement figures on documents made of
held-out captions, beside chance, the untrained model and caption-cosine placement
(``metrics.json`` "baselines").

``python -m searchsmith.training.images write-eval OUT.jsonl`` writes an eval file for
``searchsmith eval images`` (:func:`searchsmith.training.image_data.write_placement_file`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import model_display_name
from searchsmith.models.image_relevance import (
    ImageRelevanceConfig,
    ImageRelevanceModel,
    PlacementConfig,
    images_to_uint8,
    normalise_pixels,
)
from searchsmith.training.config import EncoderRecipeConfig
from searchsmith.training.data import (
    SHARED_DATA,
    check_leave_out,
    resolve_data_dir,
    save_npy_atomic,
)
from searchsmith.training.evaluate_images import (
    evaluate_model,
    make_eval_set,
    no_placement_figures,
    ood_docs,
    ood_placement_figures,
    placement_figures,
    placement_outcomes,
)
from searchsmith.training.image_data import (
    KINDS,
    ImageRecord,
    coco_records,
    placement_docs,
    record_image,
    split_records,
    synthetic_records,
    write_placement_file,
)
from searchsmith.training.registry import (
    get_dataset,
    register_dataset,
    register_loss,
    register_recipe,
)
from searchsmith.training.trainer import apply_lora, train, write_json_atomic

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
        leave_out: sources held out whole: none of their images is trained on, all are
            evaluated (a leave-one-dataset-out run; e.g. ``[coco_captions]`` to judge the
            vision tower on photos of a kind it never saw). At least one source must stay
            in training.
        ood_source: the source whose held-out images give the out-of-domain placement
            figures (``ood/...``) that the pipeline's images gates read: photos, the kind of
            image users' documents carry, not the generated pictures the tower learns from.
            ``none``, or a source not in ``sources``, records none, and the gates then leave
            the model out.
        ood_docs: placement documents drawn (with overlap) from ``ood_source``'s held-out
            images; more: a steadier figure, longer evaluation.
    """

    sources: list[str] = field(default_factory=lambda: ["synthetic_images", "coco_captions"])
    coco_dir: str = f"{SHARED_DATA}/coco_captions"
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
    leave_out: list[str] = field(default_factory=list)
    ood_source: str = "coco_captions"
    ood_docs: int = 40

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic_images]")
        check_leave_out(self.sources, self.leave_out)
        if not 1 <= self.ood_docs <= 10_000:
            raise ValueError(f"data.ood_docs must be in [1, 10000], got {self.ood_docs}")
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
class ImagesRecipe(EncoderRecipeConfig):
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

    eval_batch_size: int = 128
    loss: Literal["infonce"] = "infonce"
    # torch CPU threads for this run (0: torch's default). On a shared, busy CPU one thread
    # per process can be several times faster than fighting over the cores.
    cpu_threads: int = 0
    model: ImageRelevanceConfig = field(default_factory=ImageRelevanceConfig)
    text: TextTowerSettings = field(default_factory=TextTowerSettings)
    data: ImagesData = field(default_factory=ImagesData)

    def __post_init__(self) -> None:
        super().__post_init__()
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


def ood_label(by_source: dict[str, list[ImageRecord]], data: ImagesData) -> str:
    """The records' ``source`` label of ``data.ood_source`` (a data set name, as in
    ``data.sources``), or ``none`` when the run does not read that set."""
    recs = by_source.get(data.ood_source) or []
    return recs[0].source if recs else "none"


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
        save_npy_atomic(path, feats.numpy())
    return feats


# ----------------------------------------------------------------------------- loss


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
    train_recs, eval_recs = split_records(by_source, cfg.data.eval_ratio, cfg.data.split_seed, cfg.data.leave_out)
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

    # Held-out placement documents: all held-out images pooled (in domain), and documents of
    # held-out photos (ood_docs), what the pipeline's images gates compare: this model's
    # placement against caption-cosine placement and, captions hidden, against placing nothing.
    docs = placement_docs(eval_recs, cfg.data.split_seed)
    photo_docs = ood_docs(eval_recs, ood_label(by_source, cfg.data), cfg.data.ood_docs, cfg.data.split_seed)
    placement = PlacementConfig()
    vis = cfg.model.vision
    # The caption-cosine placement (the pipeline's fallback) of the same documents, by the
    # baseline embedder: its figures are the gates' baselines, and its outcomes on the photos
    # are what each evaluation's paired test compares the model with.
    cosine_figs: dict[str, float] = {}
    photo_cosine = None
    if (docs or photo_docs) and cfg.data.baseline_embedder != "none":
        from searchsmith.training.data import CachedEmbedder

        encode = CachedEmbedder(cfg.data.baseline_embedder, run_dir / "cache").encode
        # flat: the export copies flat baselines into the bundle manifest, where the gate reads them
        if docs:
            cosine_figs.update({f"cosine_{k}": v for k, v in placement_figures(docs, encode, None, placement).items()})
        if photo_docs:
            photo_cosine = placement_outcomes(photo_docs, encode, None, placement)
            cosine_figs.update({f"ood_cosine_{k}": v for k, v in photo_cosine.figures().items()})
        del encode  # the embedder's model is not needed while training

    def eval_fn(m: Any) -> dict[str, float]:
        out = evaluate_model(m, eval_set, embed_texts, cfg.eval_batch_size)
        if docs or photo_docs:
            was = m.training
            m.eval()
            device = next(m.parameters()).device
            with torch.no_grad():
                img = torch.cat([m.vision_tower(normalise_pixels(eval_set.pixels[s:s + cfg.eval_batch_size].to(device),
                                                                 vis.mean, vis.std))
                                 for s in range(0, len(eval_set.pixels), cfg.eval_batch_size)]).float().cpu().numpy()

                def text(texts: list[str]) -> np.ndarray:
                    return embed_texts(texts).float().cpu().numpy()

                if docs:
                    out.update(placement_figures(docs, text, img, placement))
                out.update(ood_placement_figures(photo_docs, text, img, placement, photo_cosine))
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
                 "placement_docs": len(docs), "ood_source": cfg.data.ood_source, "ood_docs": len(photo_docs),
                 "leave_out": list(cfg.data.leave_out)},
    }
    if photo_docs:
        baselines.update({f"ood_no_{k}": v for k, v in no_placement_figures(photo_docs).items()})
    baselines.update(cosine_figs)

    # 3. Loss: symmetric InfoNCE over the in-batch pairs.
    v = cfg.model.vision

    def loss_fn(m: Any, batch: dict[str, Any]) -> torch.Tensor:
        # through the model's forward (a DDP wrapper syncs gradients only for what it runs)
        image_emb, text_emb, scale = m(normalise_pixels(batch["pixels"], v.mean, v.std),
                                       input_ids=batch.get("input_ids"), attention_mask=batch.get("attention_mask"),
                                       text_features=batch.get("text_features"))  # (B, D) each
        return infonce_loss(image_emb, text_emb, scale, batch["targets"])

    def on_step(step: int, m: Any) -> None:
        getattr(m, "module", m).trained_steps.fill_(step)

    # 4. Train (5. saving: the trainer calls model.save_pretrained, which writes model/text/,
    # model/vision.pt and model/image_relevance.json).
    result = train(
        model, loss_fn, batch_stream(train_recs, train_pixels, model, cached, cfg), cfg, run_dir,
        eval_fn, tokenizer=None, baselines=baselines, force=force, on_step=on_step,
        run_info={"task": "images", "recipe": cfg.recipe,
                  "base_model": "random-init (text.config)" if cfg.text.config is not None
                  else model_display_name(cfg.base_model),
                  "text_tower": "lora" if cfg.lora.enabled else "frozen" if frozen else "full",
                  "vision_tower": (f"{v.kind} {v.channels} @ {v.image_size}px" if v.kind == "cnn" else
                                   f"clip {'random-init (clip_config)' if v.clip_config is not None else v.clip_model}"
                                   f"{' frozen' if v.freeze else ''} @ {v.image_size}px"),
                  "max_length": cfg.model.max_length, "image_size": v.image_size},
    )
    return result.final_metrics


# ----------------------------------------------------------------------------- eval file


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.images")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-eval", help="write an image relevance eval JSONL (the format of 'searchsmith eval --help')")
    w.add_argument("out")
    w.add_argument("--source", choices=["synthetic", "coco"], default="synthetic")
    w.add_argument("--docs", type=int, default=40)
    w.add_argument("--seed", type=int, default=1009)
    w.add_argument("--coco-dir", default=f"{SHARED_DATA}/coco_captions", help="the COCO captions folder, for "
                   "--source coco (default %(default)s, in the current folder, else beside the repository)")
    w.add_argument("--heldout-of", help="a run folder: keep only its held-out COCO images (split.json)")
    w.add_argument("--with-captions", action="store_true", help="add each image's second caption")
    a = p.parse_args(argv)
    only = None
    if a.heldout_of:
        split = Path(a.heldout_of) / "split.json"
        if not split.is_file():
            raise ConfigError(f"--heldout-of: {split} not found (written by the images recipe)")
        only = set(json.loads(split.read_text(encoding="utf-8"))["eval"])
    coco_dir = a.coco_dir
    if a.source == "coco":  # the synthetic source reads no folder: its default may be absent
        coco_dir = resolve_data_dir(coco_dir, "--coco-dir", default=f"{SHARED_DATA}/coco_captions")
    out = write_placement_file(a.out, a.source, a.docs, seed=a.seed, coco_dir=coco_dir, only_ids=only,
                               with_captions=a.with_captions)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from searchsmith.models.console import run_module_main

    raise SystemExit(run_module_main(_main, "python -m searchsmith.training.images"))


__all__ = [
    "ImagesData",
    "ImagesRecipe",
    "TextTowerSettings",
    "build_model",
    "images",
    "infonce_loss",
    "load_records",
    "pooled_text_features",
    "records_to_pixels",
]
