"""Image relevance: a dual encoder (text tower + vision tower) and image placement.

The model scores how well a picture fits a piece of text as the cosine of two unit vectors
in one shared space of ``embed_dim`` dimensions:

* text tower: a Hugging Face encoder (all-MiniLM-L6-v2 by default; frozen, LoRA or fully
  trained) -> mean pooling over real tokens -> linear projection -> L2 normalisation;
* vision tower (``vision.kind``): ``cnn``, a small CNN trained from scratch in plain torch
  (stride-2 conv stages on ``image_size`` px RGB, the last feature map flattened so that
  positions survive) -> linear projection; or ``clip``, a CLIP vision transformer
  (transformers' ``CLIPVisionModelWithProjection``, pretrained from ``vision.clip_model`` or
  random-init from ``vision.clip_config``; frozen or trained) -> its own visual projection
  -> an added linear projection to ``embed_dim``; then L2 normalisation;
* a learnable temperature (``logit_scale = log(1 / T)``) used by the contrastive loss.

Saved layout (``ImageRelevanceModel.save``; shared contract, the exporter reads it)::

    model/text/                  HF AutoModel + tokenizer (the text tower's encoder, LoRA merged)
    model/vision.pt              {"vision": the vision tower's state dict (SmallCNN or
                                  ClipVision), "text_projection": Linear state dict,
                                  "logit_scale": tensor}
    model/image_relevance.json   architecture config, image_size, embed_dim, mean/std,
                                  text projection shape, temperature, trained_steps, version;
                                  for kind clip, architecture.vision.clip_config holds the
                                  CLIP vision config, so loading needs no hub

Placement (the Xinyu design): :func:`combined_scores` mixes image-paragraph,
caption-paragraph and image-query relevance into a (P, I) matrix; :func:`assign_images`
solves the assignment with the Hungarian method (each paragraph gets at most one image) and
drops assignments under ``PlacementConfig.threshold`` (0.3 in the paper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.config import closest_key, from_dict
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.io import give_plain_modes, replace_dir, temp_dir_beside, write_json_atomic
from searchsmith.models.placement import (  # torch-free
    PlacementConfig,
    assign_images,
    combined_scores,
)
from searchsmith.models.pretrained import read_model_meta
from torch import nn

META_FILE = "image_relevance.json"
VISION_FILE = "vision.pt"
TEXT_DIR = "text"
FORMAT_VERSION = 1
# logit_scale is clamped here (as in CLIP) so the temperature cannot collapse to 0.
MAX_LOGIT_SCALE = math.log(100.0)


# ----------------------------------------------------------------------------- configs


# The CLIPVisionConfig fields that describe the architecture (transformers 5 declares them as
# dataclass fields of CLIPVisionConfig); ``vision.clip_config`` takes these keys only.
CLIP_CONFIG_KEYS = ("hidden_size", "intermediate_size", "projection_dim", "num_hidden_layers",
                    "num_attention_heads", "num_channels", "image_size", "patch_size", "hidden_act",
                    "layer_norm_eps", "attention_dropout", "initializer_range", "initializer_factor")
CLIP_DEFAULT_IMAGE_SIZE = 224  # CLIPVisionConfig's default image_size


@dataclass(frozen=True)
class VisionConfig:
    """The vision tower: a small CNN trained from scratch (``kind: cnn``) or a CLIP vision
    transformer (``kind: clip``), pretrained (``clip_model``) or random-init (``clip_config``).

    Attributes:
        kind: ``cnn``: the small CNN trained from scratch; ``clip``: transformers'
            ``CLIPVisionModelWithProjection`` (from ``clip_model``, or random-init from
            ``clip_config``) followed by a linear projection from its ``projection_dim`` to
            ``embed_dim`` (always added, so a frozen CLIP still has a trained layer).
        image_size: side in pixels every image is resized to (squashed, bilinear) before the
            tower, in training and serving. ``cnn``: divisible by ``2 ** len(channels)``; a
            step's cost grows with its square. ``clip``: must equal the CLIP config's
            ``image_size`` (224 for openai/clip-vit-base-patch32).
        channels: ``cnn`` only: output channels of each stage (one halving per stage).
        extra_convs: stride-1 conv3x3 -> BN -> ReLU layers added to each stage before its
            halving conv (0 to 4); each roughly doubles that stage's cost. ``cnn`` only.
        mean: per-channel (RGB) offset of the normalisation ``(pixel / 255 - mean) / std``;
            three values (CLIP checkpoints expect CLIP's own, see the clip recipe).
        std: per-channel (RGB) divisor of the normalisation ``(pixel / 255 - mean) / std``;
            three values, each > 0.
        clip_model: ``kind: clip``: the pretrained CLIP to load (a local folder or a hub id,
            which needs ``HF_HUB_OFFLINE=0`` or the model in the local hub cache); a full
            CLIPModel checkpoint works, its vision half is taken. Unused by ``kind: cnn`` and
            when ``clip_config`` is set.
        clip_config: ``kind: clip``: a CLIPVisionConfig as a dict (keys such as
            ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
            ``intermediate_size``, ``patch_size``, ``image_size``, ``projection_dim``) that
            builds a random-init CLIP instead of loading ``clip_model`` (no hub access); the
            tiny twin uses it, and a saved model stores its CLIP's config here.
        freeze: ``kind: clip``: true freezes the CLIP backbone (its visual projection
            included) so only the added projection learns: cheap, and keeps a pretrained
            CLIP's features; false fine-tunes it all (use a GPU and a small ``optim.lr``).
            ``kind: cnn`` trains from scratch and rejects true.
    """

    kind: Literal["cnn", "clip"] = "cnn"
    image_size: int = 64
    # One stage per entry: ``extra_convs`` x (conv3x3 -> BN -> ReLU), then conv3x3 stride 2
    # -> BN -> ReLU. Each stride-1 conv roughly doubles a stage's cost (CPU time matters).
    channels: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    extra_convs: int = 0
    # Per-channel normalisation applied after scaling pixels to [0, 1].
    mean: list[float] = field(default_factory=lambda: [0.5, 0.5, 0.5])
    std: list[float] = field(default_factory=lambda: [0.5, 0.5, 0.5])
    clip_model: str = "openai/clip-vit-base-patch32"
    clip_config: dict[str, Any] | None = None
    freeze: bool = False

    def __post_init__(self) -> None:
        if not 16 <= self.image_size <= 512:
            raise ValueError(f"vision.image_size must be in [16, 512] px, got {self.image_size}")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise ValueError(f"vision.mean/std need 3 values each (RGB), std > 0; got {self.mean} / {self.std}")
        if self.kind == "clip":
            self._check_clip()
            return
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError(f"vision.channels must be a non-empty list of positive ints, got {self.channels}")
        if not 0 <= self.extra_convs <= 4:
            raise ValueError(f"vision.extra_convs must be in [0, 4], got {self.extra_convs}")
        if self.image_size % (2 ** len(self.channels)) != 0:
            raise ValueError(f"vision.image_size ({self.image_size}) must be divisible by "
                             f"2**len(vision.channels) = {2 ** len(self.channels)} (one halving per stage)")
        if self.freeze:
            raise ValueError("vision.freeze: true freezes a pretrained CLIP backbone (vision.kind: clip); "
                             "the CNN of vision.kind: cnn starts from scratch and must train: set "
                             "vision.freeze=false")

    def _check_clip(self) -> None:
        if self.clip_config is None:
            if not self.clip_model or self.clip_model == "default":
                raise ValueError("vision.clip_model: name a CLIP (e.g. openai/clip-vit-base-patch32 or a "
                                 "local folder), or set vision.clip_config for a random-init one")
            return  # the image size is checked against the hub config when the tower is built
        for key in self.clip_config:
            if key not in CLIP_CONFIG_KEYS:
                hint = closest_key(str(key), CLIP_CONFIG_KEYS)
                fix = f"did you mean {hint!r}?" if hint else f"valid keys: {list(CLIP_CONFIG_KEYS)}"
                raise ValueError(f"vision.clip_config.{key}: unknown CLIPVisionConfig key; {fix}")
        check_clip_image_size(self.image_size, self.clip_config.get("image_size", CLIP_DEFAULT_IMAGE_SIZE),
                              "vision.clip_config")


def check_clip_image_size(image_size: int, clip_size: Any, source: str) -> None:
    """Raise ValueError unless ``vision.image_size`` equals the CLIP config's (square) image size."""
    sizes = set(clip_size) if isinstance(clip_size, list | tuple) else {clip_size}
    if sizes != {image_size}:
        want = next(iter(sizes)) if len(sizes) == 1 else clip_size
        raise ValueError(f"vision.image_size ({image_size}) must equal the CLIP config's image_size "
                         f"({clip_size}, from {source}): CLIP's position embeddings are learnt for that "
                         f"size; set model.vision.image_size={want}")


@dataclass(frozen=True)
class ImageRelevanceConfig:
    """Architecture of the dual encoder (stored in ``image_relevance.json``).

    Attributes:
        embed_dim: dimension of the shared space both towers project into; more: more
            capacity, larger projections and image vectors.
        max_length: token limit of a caption or text for the text tower; longer ones are
            truncated.
        init_temperature: starting temperature T of the contrastive softmax; the model
            learns ``log(1 / T)``, clamped so that T stays at or above 0.01.
    """

    embed_dim: int = 256
    max_length: int = 64
    init_temperature: float = 0.07
    vision: VisionConfig = field(default_factory=VisionConfig)

    def __post_init__(self) -> None:
        if not 8 <= self.embed_dim <= 4096:
            raise ValueError(f"model.embed_dim must be in [8, 4096], got {self.embed_dim}")
        if not 8 <= self.max_length <= 512:
            raise ValueError(f"model.max_length must be in [8, 512] tokens, got {self.max_length}")
        if not 0 < self.init_temperature < 1:
            raise ValueError(f"model.init_temperature must be in (0, 1), got {self.init_temperature}")


# ----------------------------------------------------------------------------- towers


class SmallCNN(nn.Module):
    """Conv stages each halving the side, flattened last map (keeps where things are), linear projection.

    Input (M, 3, S, S) normalised pixels; output (M, embed_dim), not normalised.
    """

    def __init__(self, cfg: VisionConfig, embed_dim: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c in cfg.channels:
            for _ in range(cfg.extra_convs):
                layers += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
                c_in = c
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c),
                       nn.ReLU(inplace=True)]
            c_in = c
        self.features = nn.Sequential(*layers)
        side = cfg.image_size // (2 ** len(cfg.channels))
        self.proj = nn.Linear(c_in * side * side, embed_dim)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.features(pixel_values)  # (M, C, s, s)
        return self.proj(x.flatten(1))  # (M, D)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states over real tokens. hidden (N, T, H), mask (N, T) -> (N, H)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (N, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class TextTower(nn.Module):
    """Encoder -> mean pooling -> projection -> L2 norm; ``forward(input_ids, attention_mask)``."""

    def __init__(self, encoder: nn.Module, proj: nn.Linear) -> None:
        super().__init__()
        self.encoder = encoder
        self.proj = proj

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(N, T) ids and mask -> (N, H) mean-pooled encoder states (before the projection)."""
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return mean_pool(out[0], attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.proj(self.pooled(input_ids, attention_mask)), dim=-1)  # (N, D)


class ClipVision(nn.Module):
    """A CLIP vision transformer (its pooled [CLS] state and visual projection), then a linear
    projection to ``embed_dim``.

    Input (M, 3, S, S) normalised pixels, S = the CLIP config's image_size; output
    (M, embed_dim), not normalised. With ``freeze`` the CLIP part gets no gradients and stays
    in eval mode (no attention dropout), so only ``proj`` learns.
    """

    def __init__(self, clip: nn.Module, embed_dim: int, freeze: bool = False) -> None:
        super().__init__()
        self.clip = clip  # transformers.CLIPVisionModelWithProjection
        self.proj = nn.Linear(int(clip.config.projection_dim), embed_dim)
        self.freeze = freeze
        if freeze:
            self.clip.requires_grad_(False)
            self.clip.eval()

    def train(self, mode: bool = True) -> ClipVision:
        super().train(mode)
        if self.freeze:
            self.clip.eval()
        return self

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        feats = self.clip(pixel_values=pixel_values).image_embeds  # (M, projection_dim)
        return self.proj(feats)  # (M, D)


class VisionTower(nn.Module):
    """Vision network (:class:`SmallCNN` or :class:`ClipVision`) -> L2 norm;
    ``forward(pixel_values (M, 3, S, S) float32) -> (M, D)``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        # Trainer checkpoints (model.pt) written before kind clip name the network "cnn".
        self._register_load_state_dict_pre_hook(_rename_cnn_keys)

    @property
    def cnn(self) -> nn.Module:
        """The vision network under its name from before ``kind: clip`` (now ``net``)."""
        return self.net

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(pixel_values), dim=-1)


def _rename_cnn_keys(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix + "cnn.")]:
        state_dict[prefix + "net." + key[len(prefix) + len("cnn."):]] = state_dict.pop(key)


def _resolve_clip(name: str) -> str:
    from searchsmith.models.hub import resolve_model

    try:
        return resolve_model(name, field="model.vision.clip_model")
    except ConfigError as exc:
        raise ConfigError(f"{exc}. For a CLIP without a hub, set model.vision.clip_config (a random-init "
                          "CLIPVisionConfig, as recipes/images/tiny/bert-tiny_clip-tiny.yaml does)") from None


def clip_vision_config(v: VisionConfig) -> Any:
    """The ``CLIPVisionConfig`` of a ``kind: clip`` tower: from ``clip_config``, or read
    (config only, no weights) from ``clip_model``; ``image_size`` checked against it.

    Raises:
        ConfigError: ``clip_model`` cannot be found or holds no CLIP, the config is invalid,
            or ``vision.image_size`` differs from the CLIP's.
    """
    from huggingface_hub.errors import StrictDataclassError  # transformers 5's config checks
    from transformers import CLIPVisionConfig

    if v.clip_config is not None:
        source = "model.vision.clip_config"
        try:
            conf = CLIPVisionConfig(**v.clip_config)
        except (TypeError, ValueError, StrictDataclassError) as exc:  # field types, architecture
            raise ConfigError(f"{source}: {' '.join(str(exc).split())}") from None
    else:
        source = f"model.vision.clip_model {v.clip_model!r}"
        path = _resolve_clip(v.clip_model)
        try:
            conf = CLIPVisionConfig.from_pretrained(path)
        except (OSError, ValueError, TypeError, StrictDataclassError) as exc:
            raise ConfigError(f"model.vision.clip_model: cannot read a CLIP vision config from {v.clip_model!r} "
                              f"({str(exc).splitlines()[0][:300]}); name a CLIP checkpoint "
                              "(e.g. openai/clip-vit-base-patch32)") from None
    try:
        check_clip_image_size(v.image_size, conf.image_size, source)
    except ValueError as exc:
        raise ConfigError(f"model.{exc}") from None
    return conf


def clip_config_dict(conf: Any) -> dict[str, Any]:
    """A CLIPVisionConfig's architecture as a plain dict (``vision.clip_config``, JSON-ready)."""
    out = {k: getattr(conf, k) for k in CLIP_CONFIG_KEYS}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def build_vision(cfg: ImageRelevanceConfig) -> nn.Module:
    """The vision network: a :class:`SmallCNN` (``kind: cnn``) or a :class:`ClipVision`
    (``kind: clip``: random-init from ``clip_config``, else pretrained from ``clip_model``).

    Raises:
        ConfigError: see :func:`clip_vision_config`; ``clip_model``'s weights do not load.
    """
    v = cfg.vision
    if v.kind == "cnn":
        return SmallCNN(v, cfg.embed_dim)
    from transformers import CLIPVisionModelWithProjection

    conf = clip_vision_config(v)
    if v.clip_config is not None:
        clip = CLIPVisionModelWithProjection(conf)
    else:
        try:
            clip = CLIPVisionModelWithProjection.from_pretrained(_resolve_clip(v.clip_model), dtype=torch.float32)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"model.vision.clip_model: cannot load the CLIP vision weights of {v.clip_model!r} "
                              f"({str(exc).splitlines()[0][:300]})") from None
    return ClipVision(clip, cfg.embed_dim, freeze=v.freeze)


# ----------------------------------------------------------------------------- preprocessing


def images_to_uint8(images: Sequence[Any], image_size: int) -> np.ndarray:
    """PIL images -> (M, 3, S, S) uint8: RGB, resized (squashed, bilinear) to S x S.

    Raises:
        ValidationError: an item is not a PIL image, or the list is empty.
    """
    from PIL import Image

    if len(images) == 0:
        raise ValidationError("images: got an empty list; pass at least one PIL image")
    out = np.empty((len(images), 3, image_size, image_size), dtype=np.uint8)
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise ValidationError(f"images[{i}]: expected a PIL.Image.Image, got {type(im).__name__}")
        rgb = im.convert("RGB").resize((image_size, image_size), Image.BILINEAR)
        out[i] = np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)
    return out


def normalise_pixels(pixels: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (M, 3, S, S) -> float32, scaled to [0, 1], then (x - mean) / std per channel."""
    m = torch.tensor(mean, dtype=torch.float32, device=pixels.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=pixels.device).view(1, 3, 1, 1)
    return (pixels.float() / 255.0 - m) / s


# ----------------------------------------------------------------------------- the model


class ImageRelevanceModel(nn.Module):
    """The dual encoder (training and inference).

    Attributes:
        text_tower: :class:`TextTower` (encoder + projection).
        vision_tower: :class:`VisionTower`.
        logit_scale: scalar parameter, ``exp(logit_scale) = 1 / temperature``.
        tokenizer, max_length, image_size, config.
        trained_steps: buffer; the training loop sets it after each optimizer step, and
            :meth:`load` refuses a model whose value is 0.
    """

    def __init__(self, encoder: nn.Module, tokenizer: Any, cfg: ImageRelevanceConfig) -> None:
        """Text tower from ``encoder``; a new vision tower (:func:`build_vision`; a
        ``clip_model`` is loaded here)."""
        super().__init__()
        hidden = int(encoder.config.hidden_size)
        self.config = cfg
        self.tokenizer = tokenizer
        self.max_length = cfg.max_length
        self.image_size = cfg.vision.image_size
        self.text_tower = TextTower(encoder, nn.Linear(hidden, cfg.embed_dim))
        self.vision_tower = VisionTower(build_vision(cfg))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / cfg.init_temperature)))
        self.register_buffer("trained_steps", torch.zeros((), dtype=torch.long))

    # -- building

    @classmethod
    def build(cls, cfg: ImageRelevanceConfig, text_model: str = "default",
              text_config: dict[str, Any] | None = None, tokenizer: str = "default") -> ImageRelevanceModel:
        """A fresh model: pretrained text encoder ``text_model`` (or random-init from the HF
        config dict ``text_config``, which needs ``model_type``), new vision tower (a CNN
        from scratch, or a CLIP from ``vision.clip_model`` / ``vision.clip_config``)."""
        from searchsmith.models.hub import from_settings, resolve_model
        from transformers import AutoModel, AutoTokenizer

        if cfg.vision.kind == "clip":
            clip_vision_config(cfg.vision)  # fail on a bad CLIP before loading the text encoder
        if text_config is not None:
            encoder = from_settings(text_config, "text.config",
                                    lambda config: AutoModel.from_config(config(), add_pooling_layer=False))
            tok_path = resolve_model(tokenizer, field="text.tokenizer")
        else:
            path = resolve_model(text_model, field="base_model")
            encoder = AutoModel.from_pretrained(path, add_pooling_layer=False)
            tok_path = path if tokenizer == "default" else resolve_model(tokenizer, field="text.tokenizer")
        tok = AutoTokenizer.from_pretrained(tok_path)
        if encoder.config.vocab_size < len(tok):
            raise ConfigError(f"text.config: vocab_size {encoder.config.vocab_size} is smaller than "
                              f"the tokenizer's {len(tok)} tokens; raise text.config.vocab_size")
        return cls(encoder, tok, cfg)

    # -- forward pieces (tensors)

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, text_features: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One training step's tensors: (image vectors (B, D), text vectors (B, D), the logit
        scale). The text side is ``input_ids`` + ``attention_mask``, or the frozen encoder's
        cached pooled ``text_features`` (B, H), which go through the projection only.

        Training calls the model (not its towers) so that a DistributedDataParallel wrapper
        sees the forward pass and averages the gradients across processes.
        """
        image_emb = self.vision_tower(pixel_values)
        if text_features is not None:
            text_emb = F.normalize(self.text_tower.proj(text_features), dim=-1)
        elif input_ids is not None and attention_mask is not None:
            text_emb = self.text_tower(input_ids, attention_mask)
        else:
            raise ValueError("ImageRelevanceModel.forward: give input_ids and attention_mask, or text_features")
        return image_emb, text_emb, self.temperature_scale()

    def temperature_scale(self) -> torch.Tensor:
        """exp(logit_scale), clamped to at most 100."""
        return self.logit_scale.clamp(max=MAX_LOGIT_SCALE).exp()

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Padded, truncated ids and mask, (N, T) each."""
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def preprocess(self, images: Sequence[Any]) -> np.ndarray:
        """PIL images -> (M, 3, S, S) float32 normalised pixels (what ``vision_module`` takes)."""
        u8 = torch.from_numpy(images_to_uint8(images, self.image_size))
        v = self.config.vision
        return normalise_pixels(u8, v.mean, v.std).numpy()

    def text_module(self) -> nn.Module:
        """Plain torch module: ``forward(input_ids, attention_mask) -> (N, D)`` unit vectors."""
        return self.text_tower

    def vision_module(self) -> nn.Module:
        """Plain torch module: ``forward(pixel_values (M, 3, S, S) float32) -> (M, D)`` unit vectors."""
        return self.vision_tower

    # -- inference (numpy)

    def _device(self) -> torch.device:
        return next(self.parameters()).device

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Texts -> (N, D) float32 L2-normalised embeddings."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValidationError("encode_text: expected a list of strings")
        if len(texts) == 0:
            raise ValidationError("encode_text: got an empty list; pass at least one text")
        was = self.training
        self.eval()
        out = []
        for s in range(0, len(texts), batch_size):
            enc = {k: v.to(self._device()) for k, v in self.tokenize(texts[s:s + batch_size]).items()}
            out.append(self.text_tower(**enc).float().cpu())
        self.train(was)
        return torch.cat(out).numpy().astype(np.float32)

    @torch.no_grad()
    def encode_images(self, images: Sequence[Any], batch_size: int = 64) -> np.ndarray:
        """PIL images -> (M, D) float32 L2-normalised embeddings."""
        pixels = torch.from_numpy(self.preprocess(images))
        was = self.training
        self.eval()
        out = [self.vision_tower(pixels[s:s + batch_size].to(self._device())).float().cpu()
               for s in range(0, len(pixels), batch_size)]
        self.train(was)
        return torch.cat(out).numpy().astype(np.float32)

    # -- save / load

    def _text_encoder_plain(self) -> nn.Module:
        enc = self.text_tower.encoder
        try:
            from peft import PeftModel
        except ImportError:  # pragma: no cover - peft is a dependency
            return enc
        if isinstance(enc, PeftModel):
            # Merge into a copy so that training (and later checkpoints) keep the adapters.
            import copy

            return copy.deepcopy(enc).merge_and_unload()
        return enc

    def save(self, path: str | Path, trained_steps: int | None = None) -> Path:
        """Write the contract layout to ``path`` atomically (temporary folder, then rename)."""
        final = Path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_dir_beside(final)
        self.save_pretrained(tmp, trained_steps)
        give_plain_modes(tmp)  # safetensors writes its weights 0600 whatever the umask
        replace_dir(tmp, final)
        return final

    def save_pretrained(self, path: str | Path, trained_steps: int | None = None) -> None:
        """Write the layout into an existing or new folder ``path`` (the trainer's
        ``save_model`` calls this, then renames the folder into place)."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        steps = int(self.trained_steps) if trained_steps is None else int(trained_steps)
        self._text_encoder_plain().save_pretrained(p / TEXT_DIR)
        self.tokenizer.save_pretrained(p / TEXT_DIR)
        torch.save({"vision": self.vision_tower.net.state_dict(),
                    "text_projection": self.text_tower.proj.state_dict(),
                    "logit_scale": self.logit_scale.detach().cpu()}, p / VISION_FILE)
        proj = self.text_tower.proj
        meta = {
            "format_version": FORMAT_VERSION,
            "task": "images",
            "architecture": self._architecture(),
            "image_size": self.image_size,
            "embed_dim": self.config.embed_dim,
            "max_length": self.max_length,
            "mean": list(self.config.vision.mean),
            "std": list(self.config.vision.std),
            "text_pooling": "mean",
            "text_projection": {"in_features": proj.in_features, "out_features": proj.out_features,
                                "stored_in": VISION_FILE},
            "temperature": float(1.0 / self.temperature_scale().detach()),
            "trained_steps": steps,
        }
        write_json_atomic(p / META_FILE, meta)

    def _architecture(self) -> dict[str, Any]:
        """``asdict(config)``; for kind clip with the built CLIP's config as ``clip_config``,
        so that :meth:`load` rebuilds the architecture without the hub."""
        arch = asdict(self.config)
        net = self.vision_tower.net
        if isinstance(net, ClipVision):
            arch["vision"]["clip_config"] = clip_config_dict(net.clip.config)
        return arch

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None) -> ImageRelevanceModel:
        """Load a trained model from ``model_dir`` (a run's ``model/`` or the run folder).

        Raises:
            BundleError: missing files, a newer format, an untrained model (trained_steps 0),
                or weights that do not match the stored architecture.
        """
        from transformers import AutoModel, AutoTokenizer

        p, meta = read_model_meta(model_dir, META_FILE, "image relevance", "pass the model/ folder of a run "
                                  "written by 'searchsmith train recipes/images/...'")
        meta_path = p / META_FILE
        if int(meta.get("format_version", 0)) > FORMAT_VERSION:
            raise BundleError(f"image relevance: {meta_path} has format_version {meta['format_version']}, "
                              f"newer than this build reads ({FORMAT_VERSION}); upgrade searchsmith")
        if int(meta.get("trained_steps", 0)) <= 0:
            raise BundleError(f"image relevance: {str(p)!r} was never trained (trained_steps=0 in "
                              f"{META_FILE}); an untrained dual encoder scores at random. Train it first")
        try:
            cfg = from_dict(ImageRelevanceConfig, meta.get("architecture"), source=str(meta_path))
        except ConfigError as exc:
            raise BundleError(f"image relevance: architecture in {meta_path} is invalid: {exc}") from None
        for key, want in (("image_size", cfg.vision.image_size), ("embed_dim", cfg.embed_dim),
                          ("max_length", cfg.max_length)):
            if meta.get(key) != want:
                raise BundleError(f"image relevance: {meta_path} says {key}={meta.get(key)!r} but its "
                                  f"architecture says {want}; the folder was edited or mixed up, re-save it")
        if not (p / TEXT_DIR / "config.json").is_file():
            raise BundleError(f"image relevance: {p / TEXT_DIR} has no config.json (the text encoder)")
        if not (p / VISION_FILE).is_file():
            raise BundleError(f"image relevance: {p / VISION_FILE} is missing (the vision tower)")
        try:
            encoder = AutoModel.from_pretrained(p / TEXT_DIR, add_pooling_layer=False)
            tokenizer = AutoTokenizer.from_pretrained(p / TEXT_DIR)
        except (OSError, ValueError) as exc:
            raise BundleError(f"image relevance: cannot load the text tower from {p / TEXT_DIR}: {exc}") from None
        if cfg.vision.kind == "clip" and cfg.vision.clip_config is None:
            raise BundleError(f"image relevance: {meta_path} has vision.kind clip without vision.clip_config "
                              "(the CLIP architecture, needed to rebuild it offline); re-save the model")
        try:
            model = cls(encoder, tokenizer, cfg)
        except ConfigError as exc:
            raise BundleError(f"image relevance: cannot rebuild the vision tower of {meta_path}: {exc}") from None
        want_in = meta.get("text_projection", {}).get("in_features")
        if want_in is not None and want_in != encoder.config.hidden_size:
            raise BundleError(f"image relevance: text projection expects {want_in} features but "
                              f"{p / TEXT_DIR} has hidden_size {encoder.config.hidden_size}")
        try:
            state = torch.load(p / VISION_FILE, map_location="cpu", weights_only=True)
            model.vision_tower.net.load_state_dict(state["vision"])
            model.text_tower.proj.load_state_dict(state["text_projection"])
            model.logit_scale.data.copy_(state["logit_scale"])
        except (RuntimeError, KeyError, TypeError, EOFError, OSError) as exc:
            raise BundleError(f"image relevance: {p / VISION_FILE} does not match the architecture in "
                              f"{META_FILE} ({str(exc).splitlines()[0][:300]})") from None
        model.trained_steps.fill_(int(meta["trained_steps"]))
        if device is not None:
            model.to(device)
        return model.eval()


__all__ = [
    "ImageRelevanceConfig",
    "ImageRelevanceModel",
    "ClipVision",
    "PlacementConfig",
    "SmallCNN",
    "TextTower",
    "VisionConfig",
    "VisionTower",
    "assign_images",
    "build_vision",
    "clip_vision_config",
    "combined_scores",
    "images_to_uint8",
    "mean_pool",
    "normalise_pixels",
]
