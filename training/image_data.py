"""Image-caption data for the image relevance recipe: a seeded PIL generator and COCO.

The generator draws pictures whose content a caption states exactly, so that a small
vision tower trained from scratch has something learnable beyond 100 photos:

* ``shapes``: one or two shapes (circle, square, triangle, cross, ring, diamond) in one of
  ten colours, small or large, at one of nine positions, on a plain background;
* ``bars``: a bar chart (2-6 bars, one colour) rising, falling or peaking in the middle;
* ``line``: a line chart going up, going down, flat or zigzag;
* ``pie``: a pie chart with 2-5 slices;
* ``text``: a word rendered in one colour on another;
* ``stripes``: horizontal or vertical stripes of two colours.

Each record has two phrasings of its caption. Pictures are described by a small spec dict
and rendered on demand (:func:`render`), so thousands of records cost no memory until used.

Also here: the recipe's split by image id (:func:`split_records`), the held-out placement
documents the recipe scores (:func:`placement_docs`; :func:`sampled_placement_docs` for the
few held-out photos behind the pipeline's images gates) and the eval file of
``searchsmith eval images`` (:func:`write_placement_file`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import check_input_file
from searchsmith.training.data import SHARED_DATA, split_by_key, write_jsonl_atomic
from searchsmith.training.dataset_shapes import COCO_CAPTIONS

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 70, 220), "yellow": (240, 220, 30),
    "orange": (250, 140, 20), "purple": (140, 40, 180), "pink": (250, 120, 190),
    "black": (15, 15, 15), "white": (250, 250, 250), "grey": (128, 128, 128),
}
SHAPES = ["circle", "square", "triangle", "cross", "ring", "diamond"]
POSITIONS = {  # name -> centre as a fraction of the side
    "top left": (0.25, 0.25), "top": (0.5, 0.25), "top right": (0.75, 0.25),
    "left": (0.25, 0.5), "centre": (0.5, 0.5), "right": (0.75, 0.5),
    "bottom left": (0.25, 0.75), "bottom": (0.5, 0.75), "bottom right": (0.75, 0.75),
}
WORDS = ["river", "music", "garden", "rocket", "coffee", "winter", "harbor", "planet", "forest",
         "bridge", "castle", "desert", "island", "market", "school", "tiger"]
KINDS = ["shapes", "bars", "line", "pie", "text", "stripes"]


@dataclass(frozen=True)
class ImageRecord:
    """One picture with its captions. ``spec`` (generated) or ``path`` (a file) says how to
    get the pixels; ``source`` names the data set (per-source metrics)."""

    id: str
    source: str
    captions: tuple[str, ...]
    spec: dict[str, Any] | None = None
    path: str | None = None


# ----------------------------------------------------------------------------- specs


def _position_phrase(pos: str) -> str:
    if pos == "centre":
        return "in the centre"
    if pos in ("left", "right"):
        return f"on the {pos}"
    return f"at the {pos}" if " " not in pos else f"in the {pos}"


def _spec(rng: random.Random, kind: str) -> tuple[dict[str, Any], tuple[str, str]]:
    colours = list(COLOURS)
    if kind == "shapes":
        bg = rng.choice(["white", "black", "grey"])
        fg = [c for c in colours if c != bg]
        n = 1 if rng.random() < 0.6 else 2
        pos = rng.sample(list(POSITIONS), n)
        items = [{"shape": rng.choice(SHAPES), "colour": rng.choice(fg), "pos": p,
                  "size": rng.choice(["small", "large"]) if n == 1 else "small"} for p in pos]
        parts = [f"a {'large ' if it['size'] == 'large' else 'small ' if n == 1 else ''}{it['colour']} "
                 f"{it['shape']} {_position_phrase(it['pos'])}" for it in items]
        cap1 = " and ".join(parts) + f" on a {bg} background"
        cap2 = f"{bg} background with " + ", ".join(f"{it['colour']} {it['shape']} ({it['pos']})"
                                                    for it in items)
        return {"kind": kind, "bg": bg, "items": items}, (cap1, cap2)
    if kind == "bars":
        n = rng.randint(2, 6)
        colour = rng.choice([c for c in colours if c != "white"])
        trend = rng.choice(["rising", "falling", "peaking"])
        cap1 = f"a bar chart with {n} {colour} bars {'rising' if trend == 'rising' else 'falling' if trend == 'falling' else 'peaking in the middle'}"
        cap2 = f"{colour} bar graph, {n} bars, values {'increase' if trend == 'rising' else 'decrease' if trend == 'falling' else 'go up then down'}"
        return {"kind": kind, "n": n, "colour": colour, "trend": trend}, (cap1, cap2)
    if kind == "line":
        colour = rng.choice([c for c in colours if c != "white"])
        trend = rng.choice(["up", "down", "flat", "zigzag"])
        words = {"up": "going up", "down": "going down", "flat": "staying flat", "zigzag": "zigzagging"}
        cap1 = f"a {colour} line chart {words[trend]}"
        cap2 = f"line graph in {colour} with a {'rising' if trend == 'up' else 'falling' if trend == 'down' else trend} trend"
        return {"kind": kind, "colour": colour, "trend": trend}, (cap1, cap2)
    if kind == "pie":
        n = rng.randint(2, 5)
        cap1 = f"a pie chart with {n} slices"
        cap2 = f"circular chart divided into {n} coloured segments"
        return {"kind": kind, "n": n, "start": rng.randrange(len(colours))}, (cap1, cap2)
    if kind == "text":
        word = rng.choice(WORDS)
        bg, fg = rng.sample(["white", "black", "blue", "red", "yellow", "green"], 2)
        cap1 = f"the word {word} written in {fg} on a {bg} background"
        cap2 = f"{fg} text saying {word} on {bg}"
        return {"kind": kind, "word": word, "fg": fg, "bg": bg}, (cap1, cap2)
    if kind == "stripes":
        a, b = rng.sample(colours, 2)
        orient = rng.choice(["horizontal", "vertical"])
        cap1 = f"{orient} {a} and {b} stripes"
        cap2 = f"a pattern of {a} and {b} {orient} bands"
        return {"kind": kind, "a": a, "b": b, "orient": orient}, (cap1, cap2)
    raise ConfigError(f"synthetic image kind {kind!r} is unknown; expected one of {KINDS}")


def synthetic_records(n: int, seed: int, kinds: Sequence[str] = tuple(KINDS),
                      prefix: str = "syn") -> list[ImageRecord]:
    """``n`` generated image records (deterministic in ``seed``), kinds drawn uniformly."""
    if n < 1:
        raise ConfigError(f"data.synthetic_images must be >= 1, got {n}")
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ConfigError(f"data.synthetic_kinds: unknown {bad}; expected a non-empty subset of {KINDS}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        spec, caps = _spec(rng, rng.choice(list(kinds)))
        spec["seed"] = rng.randrange(1 << 30)  # jitter of sizes and values when rendering
        out.append(ImageRecord(f"{prefix}-{seed}-{i:06d}", "synthetic", caps, spec=spec))
    return out


# ----------------------------------------------------------------------------- rendering


def _draw_shape(draw: Any, shape: str, cx: float, cy: float, r: float, colour: tuple[int, int, int],
                bg: tuple[int, int, int]) -> None:
    box = [cx - r, cy - r, cx + r, cy + r]
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=colour)
    elif shape == "cross":
        w = r / 3
        draw.rectangle([cx - w, cy - r, cx + w, cy + r], fill=colour)
        draw.rectangle([cx - r, cy - w, cx + r, cy + w], fill=colour)
    elif shape == "ring":
        draw.ellipse(box, fill=colour)
        q = r * 0.55
        draw.ellipse([cx - q, cy - q, cx + q, cy + q], fill=bg)


def render(spec: dict[str, Any], size: int = 128) -> Any:
    """Draw a generated picture (``size`` x ``size`` RGB PIL image) from its spec."""
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(spec.get("seed", 0))
    kind = spec["kind"]
    s = float(size)
    if kind == "shapes":
        bg = COLOURS[spec["bg"]]
        im = Image.new("RGB", (size, size), bg)
        d = ImageDraw.Draw(im)
        for it in spec["items"]:
            fx, fy = POSITIONS[it["pos"]]
            jit = 0.04 * s
            r = (0.2 if it["size"] == "large" else 0.1) * s * rng.uniform(0.85, 1.15)
            _draw_shape(d, it["shape"], fx * s + rng.uniform(-jit, jit), fy * s + rng.uniform(-jit, jit),
                        r, COLOURS[it["colour"]], bg)
        return im
    im = Image.new("RGB", (size, size), COLOURS["white"])
    d = ImageDraw.Draw(im)
    if kind == "bars":
        n, colour = spec["n"], COLOURS[spec["colour"]]
        base = [rng.uniform(0.3, 0.9) for _ in range(n)]
        vals = sorted(base) if spec["trend"] == "rising" else sorted(base, reverse=True) \
            if spec["trend"] == "falling" else _peak(sorted(base))
        d.line([(0.08 * s, 0.92 * s), (0.95 * s, 0.92 * s)], fill=COLOURS["black"], width=max(1, size // 64))
        w = 0.84 * s / n
        for i, v in enumerate(vals):
            x0 = 0.1 * s + i * w
            d.rectangle([x0 + 0.12 * w, 0.92 * s - v * 0.82 * s, x0 + 0.88 * w, 0.92 * s], fill=colour)
        return im
    if kind == "line":
        colour, trend = COLOURS[spec["colour"]], spec["trend"]
        k = 8
        pts = []
        for i in range(k):
            t = i / (k - 1)
            y = {"up": 0.2 + 0.6 * t, "down": 0.8 - 0.6 * t, "flat": 0.5,
                 "zigzag": 0.3 + 0.4 * (i % 2)}[trend] + rng.uniform(-0.04, 0.04)
            pts.append((0.1 * s + t * 0.8 * s, (1 - y) * s))
        d.line([(0.08 * s, 0.92 * s), (0.95 * s, 0.92 * s)], fill=COLOURS["black"], width=max(1, size // 64))
        d.line([(0.08 * s, 0.05 * s), (0.08 * s, 0.92 * s)], fill=COLOURS["black"], width=max(1, size // 64))
        d.line(pts, fill=colour, width=max(2, size // 24))
        return im
    if kind == "pie":
        n = spec["n"]
        names = list(COLOURS)
        cols = [COLOURS[names[(spec["start"] + j) % len(names)]] for j in range(n)]
        weights = [rng.uniform(0.6, 1.4) for _ in range(n)]
        total, angle = sum(weights), rng.uniform(0, 360)
        for w, c in zip(weights, cols, strict=True):
            sweep = 360 * w / total
            d.pieslice([0.1 * s, 0.1 * s, 0.9 * s, 0.9 * s], angle, angle + sweep, fill=c,
                       outline=COLOURS["black"] if c == COLOURS["white"] else None)
            angle += sweep
        return im
    if kind == "text":
        im = Image.new("RGB", (size, size), COLOURS[spec["bg"]])
        d = ImageDraw.Draw(im)
        font = ImageFont.load_default(size=max(8, int(s * rng.uniform(0.17, 0.22))))
        left, top, right, bottom = d.textbbox((0, 0), spec["word"], font=font)
        x = (s - (right - left)) / 2 + rng.uniform(-0.05, 0.05) * s
        y = (s - (bottom - top)) / 2 + rng.uniform(-0.1, 0.1) * s
        d.text((x - left, y - top), spec["word"], fill=COLOURS[spec["fg"]], font=font)
        return im
    if kind == "stripes":
        n = rng.randint(3, 6)
        band = s / (2 * n)
        for i in range(2 * n):
            c = COLOURS[spec["a"] if i % 2 == 0 else spec["b"]]
            box = [0, i * band, s, (i + 1) * band] if spec["orient"] == "horizontal" else \
                [i * band, 0, (i + 1) * band, s]
            d.rectangle(box, fill=c)
        return im
    raise ValidationError(f"render: unknown synthetic image kind {kind!r}")


def _peak(vals: list[float]) -> list[float]:
    """Ascending values rearranged to rise then fall (largest in the middle)."""
    left, right = vals[0::2], vals[1::2][::-1]
    return left + right


# ----------------------------------------------------------------------------- COCO


def coco_records(coco_dir: str | Path, field: str = "data.coco_dir") -> list[ImageRecord]:
    """The COCO open part: ``captions.jsonl`` + ``images/``; one record per image, 5 captions.

    Raises:
        ConfigError: the folder or its captions file is missing, or the path is a file (names
            ``field`` and the fix).
        ValidationError: a malformed record (``captions.jsonl:LINE: field 'captions' must be ...``),
            one without captions or naming a missing image file.
    """
    root = Path(coco_dir)
    if not root.is_dir():
        from searchsmith.training.data import REPO_ROOT

        alt = REPO_ROOT / coco_dir
        if not Path(coco_dir).is_absolute() and alt.is_dir():
            root = alt
        elif root.is_file() or (not root.is_absolute() and alt.is_file()):
            raise ConfigError(
                f"{field}: {str(coco_dir)!r} is a file, not a folder; point it at the folder that holds "
                f"captions.jsonl and images/ ({SHARED_DATA}/coco_captions)")
        else:
            raise ConfigError(
                f"{field}: COCO folder {str(coco_dir)!r} not found (expected captions.jsonl and images/ "
                f"from {SHARED_DATA}/coco_captions). Point it at that folder, or train on generated "
                "pictures only: data.sources=[synthetic_images]")
    captions = check_input_file(root / "captions.jsonl", field, "the folder must hold captions.jsonl and images/")
    out = []
    for rec in COCO_CAPTIONS.read(captions, field, ("image_id", "file_name", "captions")):
        caps = tuple(c.strip() for c in rec["captions"] if isinstance(c, str) and c.strip())
        if not caps:
            raise ValidationError(f"{captions}: image {rec['image_id']} has no caption")
        path = root / rec["file_name"]
        if not path.is_file():
            raise ValidationError(f"{captions}: image {rec['image_id']} names {path}, which does not exist")
        out.append(ImageRecord(f"coco-{rec['image_id']}", "coco", caps, path=str(path)))
    return out


def load_image(path: str | Path, where: str = "image") -> Any:
    """Open an image file fully (so a truncated or corrupt file fails here, not later).

    Raises:
        ValidationError: missing file, or not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"{where}: image file {str(p)!r} does not exist (paths are relative to "
                              "the JSONL file)")
    try:
        with Image.open(p) as im:
            im.load()
            return im.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ValidationError(f"{where}: {str(p)!r} is not a readable image ({exc}); replace or remove it") from None


def record_image(rec: ImageRecord, render_size: int = 128) -> Any:
    """The PIL image of a record (rendered from its spec or read from its file)."""
    if rec.spec is not None:
        return render(rec.spec, render_size)
    return load_image(rec.path or "", where=f"record {rec.id}")


# ----------------------------------------------------------------------------- split and eval documents


def split_records(by_source: dict[str, list[ImageRecord]], eval_ratio: float, seed: int,
                  leave_out: Sequence[str] = ()) -> tuple[list[ImageRecord], list[ImageRecord]]:
    """Per-source seeded split by image id into (train, held-out); every record of a source
    named in ``leave_out`` is held out (never trained on: its figures are out of domain)."""
    train_recs, eval_recs = [], []
    for name, recs in by_source.items():
        if name in leave_out:
            eval_recs += recs
            continue
        tr, ev = split_by_key([r.id for r in recs], eval_ratio, seed)
        if not tr or not ev:
            raise ValidationError(f"data: source {name!r} has {len(recs)} image(s), too few to split "
                                  f"into train and held-out (data.eval_ratio={eval_ratio}); add images")
        train_recs += [r for r in recs if r.id in tr]
        eval_recs += [r for r in recs if r.id in ev]
    return train_recs, eval_recs


@dataclass
class PlacementDoc:
    """A held-out stand-in document: paragraphs (one caption of each of ``paragraphs_per_doc``
    pictures) and images to place (``images``: rows of the held-out records; ``captions``: the
    image's other caption, or None; ``gold``: its paragraph, None for a distractor)."""

    paragraphs: list[str]
    images: list[int]
    captions: list[str | None]
    gold: list[int | None]


def _placement_doc(recs: Sequence[ImageRecord], group: Sequence[int], rng: random.Random,
                   paragraphs_per_doc: int, images_per_doc: int) -> PlacementDoc:
    """One document over the records ``group`` (rows of ``recs``): the first
    ``paragraphs_per_doc`` give a paragraph each (their first caption), ``images_per_doc`` of
    them are placed (their last caption as the image's caption) and the rest are distractors."""
    paras, extra = list(group[:paragraphs_per_doc]), list(group[paragraphs_per_doc:])
    shown = rng.sample(range(paragraphs_per_doc), images_per_doc)
    images = [paras[j] for j in shown] + extra
    return PlacementDoc([recs[i].captions[0] for i in paras], images,
                        [recs[i].captions[-1] if len(recs[i].captions) > 1 else None for i in images],
                        [*shown, *([None] * len(extra))])


def placement_docs(recs: Sequence[ImageRecord], seed: int, paragraphs_per_doc: int = 10,
                   images_per_doc: int = 4, distractors: int = 1) -> list[PlacementDoc]:
    """Placement documents over held-out records, as :func:`write_placement_file` builds them
    (each picture's first caption is a paragraph, its last caption the image's caption); each
    record is in at most one document."""
    rng = random.Random(seed)
    order = list(range(len(recs)))
    rng.shuffle(order)
    per_doc = paragraphs_per_doc + distractors
    return [_placement_doc(recs, order[d * per_doc:(d + 1) * per_doc], rng, paragraphs_per_doc, images_per_doc)
            for d in range(len(order) // per_doc)]


def sampled_placement_docs(recs: Sequence[ImageRecord], rows: Sequence[int], n_docs: int, seed: int,
                           paragraphs_per_doc: int = 10, images_per_doc: int = 4,
                           distractors: int = 1) -> list[PlacementDoc]:
    """``n_docs`` placement documents, each over a fresh random draw of distinct records among
    ``rows`` (rows of ``recs``): documents overlap, so a few held-out pictures still give a
    figure that does not hang on one grouping. [] when ``rows`` cannot fill one document."""
    per_doc = paragraphs_per_doc + distractors
    if len(rows) < per_doc:
        return []
    rng = random.Random(seed)
    return [_placement_doc(recs, rng.sample(list(rows), per_doc), rng, paragraphs_per_doc, images_per_doc)
            for _ in range(n_docs)]


def write_placement_file(out_path: str | Path, source: str = "synthetic", docs: int = 40,
                         paragraphs_per_doc: int = 10, images_per_doc: int = 4, distractors: int = 1,
                         seed: int = 1009, coco_dir: str = f"{SHARED_DATA}/coco_captions",
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


__all__ = [
    "COLOURS",
    "KINDS",
    "ImageRecord",
    "PlacementDoc",
    "coco_records",
    "load_image",
    "placement_docs",
    "sampled_placement_docs",
    "record_image",
    "render",
    "split_records",
    "synthetic_records",
    "write_placement_file",
]
