"""Config pieces every recipe embeds, and loading a recipe YAML into its typed config.

Each recipe's config class is a :class:`RecipeConfig` (its name, run folder and the
``optim`` / ``train`` / ``lora`` sections); those that fine-tune a pretrained encoder
(citation, reranker, images, reader) are an :class:`EncoderRecipeConfig`, which adds
``base_model`` and ``eval_batch_size``.

A recipe YAML names its recipe in the top-level ``recipe:`` key; the registered config
class of that recipe is then built with :func:`searchsmith.models.config.load_config`
(unknown keys rejected with the closest key, types checked, every error at once).
YAML key = argument name = CLI override path::

    searchsmith train recipes/reranker/minilm_full.yaml optim.lr=3.0e-5 train.seed=1
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.config import apply_overrides, from_dict, read_yaml, shown, to_dict
from searchsmith.models.errors import ConfigError

MAX_STEPS = 100_000_000  # optimizer steps of one run: days on a GPU at the recipes' batch sizes


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup then linear decay to zero at ``max_steps``.

    ``batch_size`` counts training examples (groups) per micro-batch; one optimizer step
    sees ``batch_size * grad_accum_steps`` examples.

    Attributes:
        lr: peak learning rate, reached at the end of the warmup and then decayed linearly
            to 0 at ``max_steps``. Too high diverges (a NaN/inf loss stops the run); too low
            learns little in a short run.
        weight_decay: AdamW's decoupled weight decay on weight matrices (2-D and larger
            tensors); biases and LayerNorm weights are never decayed.
        warmup_ratio: share of ``max_steps`` (``int(warmup_ratio * max_steps)`` steps) over
            which the learning rate ramps linearly up to ``lr``; in [0, 1).
        max_steps: optimizer steps of the run (epochs repeat as needed); the learning rate
            reaches 0 here.
        batch_size: training examples per micro-batch; what an example is depends on the
            recipe: a query group (1 positive + negatives) for the reranker, a (sentence,
            passage) pair for the citation scorer, a sentence for its tagger, a (source,
            target) example for the decomposer, an image with one caption for the images
            recipe (whose contrastive loss takes its negatives from the same micro-batch).
            Memory per step grows with it.
        grad_accum_steps: micro-batches whose averaged gradients make one optimizer step:
            the effective batch is ``batch_size * grad_accum_steps`` at the memory of one
            micro-batch, for that many forward/backward passes per step.
        max_grad_norm: the global L2 norm gradients are clipped to before each optimizer
            step; lower damps the updates of outlier batches.
        head_lr_scale: the learning rate of a classification head (parameters under a module
            named ``classifier`` or ``score``, or a cosine head's own ``scale`` and ``bias``) is
            ``lr`` times this: a head that starts at zero (the citation scorer's cosine
            residual) needs to move faster than the encoder under it. 1 treats it like the rest.
    """

    lr: float = 3.0e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_steps: int = 100
    batch_size: int = 8
    grad_accum_steps: int = 1
    max_grad_norm: float = 1.0
    head_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("lr", "head_lr_scale", "weight_decay", "warmup_ratio", "max_grad_norm"):
            if not math.isfinite(getattr(self, name)):  # inf or nan: the run stopped later on "loss is nan"
                raise ValueError(f"optim.{name} must be a finite number, got {getattr(self, name)}")
        if not self.head_lr_scale > 0:
            raise ValueError(f"optim.head_lr_scale must be > 0, got {self.head_lr_scale}")
        if not self.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"optim.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        for name in ("max_steps", "batch_size", "grad_accum_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"optim.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps > MAX_STEPS:  # 10**23 was taken, and trained until killed
            raise ValueError(f"optim.max_steps must be at most {MAX_STEPS:,}, got {self.max_steps}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"optim.max_grad_norm must be > 0, got {self.max_grad_norm}")


@dataclass(frozen=True)
class TrainConfig:
    """Loop settings. ``*_every_steps`` count optimizer steps; 0 turns the action off.

    Attributes:
        seed: seeds Python, NumPy and torch when training starts and the shuffle of the
            training examples in each epoch (the images recipe also seeds its model's
            initialisation with it). The train/held-out split has its own ``data`` seed.
        mixed_precision: autocast precision on CUDA: ``auto`` picks bf16 on a device that
            supports it, else fp16; ``no`` is fp32. Always fp32 on CPU.
        eval_every_steps: evaluate on the held-out split every N optimizer steps (0: only
            the final evaluation, which always runs); each evaluation costs a pass over the
            held-out data.
        save_every_steps: write a resumable checkpoint (model, optimizer, scheduler, RNG
            states, data position) to ``checkpoints/step-N/`` every N steps, and once more at
            the end; 0 writes none, so a killed run starts over.
        keep_checkpoints: how many of the newest checkpoints stay in ``checkpoints/``; older
            ones are deleted after each save.
        log_every_steps: every N steps the mean training loss and the learning rate are added
            to the loss history (``metrics.json`` "history", ``training_curve.png``); 0
            records no history.
    """

    seed: int = 0
    mixed_precision: Literal["no", "fp16", "bf16", "auto"] = "auto"
    eval_every_steps: int = 0
    save_every_steps: int = 50
    keep_checkpoints: int = 2
    log_every_steps: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**32:  # what NumPy's seed takes
            raise ValueError(f"train.seed must be in [0, 2**32 - 1], got {self.seed}")
        for name in ("eval_every_steps", "save_every_steps", "log_every_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0 (0 = off), got {getattr(self, name)}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"train.keep_checkpoints must be >= 1, got {self.keep_checkpoints}")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA through peft; merged into the base at save so the result is a plain HF model.

    ``target_modules: null`` uses peft's default for the architecture (query/value for BERT).

    Attributes:
        enabled: train low-rank adapters instead of all weights: the reranker's and the
            citation models' encoders (their new classifier heads train fully), the
            decomposer's model, the images recipe's text tower. Far fewer trainable weights
            (less optimizer memory) than full fine-tuning, usually at some cost in quality.
        r: rank of each adapter's two update matrices; higher = more capacity and more
            trainable weights.
        alpha: scaling of the adapters' update, applied as ``alpha / r``.
        dropout: dropout on each adapter's input during training; in [0, 1).
        target_modules: names of the modules that get adapters (e.g. ``[query, value]``);
            null: peft's default for the architecture. A name the model lacks is a
            ConfigError.
    """

    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] | None = None

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"lora.r must be >= 1, got {self.r}")
        if self.alpha < 1:  # the update is scaled by alpha / r: 0 trains nothing, < 0 unlearns
            raise ValueError(f"lora.alpha must be >= 1, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class RecipeConfig:
    """The settings every recipe config has; each recipe's config class extends it with its own.

    The base's fields come first (in ``dataclasses.fields``, ``run.json`` and ``searchsmith
    config``). A subclass redeclares a field to give it another default (a redeclared field
    keeps its place and its YAML key) and calls ``super().__post_init__()`` first in its own
    ``__post_init__``. ``serving/config_docs.py`` reads the ``Attributes:`` of the recipe's
    own class only, so each recipe keeps an entry (for what the field means there) for
    ``recipe``, ``output_dir`` and the fields of :class:`EncoderRecipeConfig`.

    Attributes:
        recipe: the registered recipe name (``searchsmith train`` picks the config class by it).
        output_dir: the run folder, relative to the current folder. Rerunning with the same
            config resumes; ``--output-dir`` overrides it, and it is left out of the config
            hash.
        optim: the AdamW settings of the recipe's (main) model.
        train: the loop settings: seed, precision, evaluation, checkpoints, logging.
        lora: train LoRA adapters instead of all weights.
    """

    recipe: str
    output_dir: str
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        """The run folder is named (the sections check themselves); every recipe's
        ``__post_init__`` calls ``super().__post_init__()`` first."""
        if not str(self.output_dir).strip():  # "" trained into the current folder, whatever it held
            raise ValueError("output_dir must name the run's folder (e.g. runs/reranker), got an empty string")


# A second level rather than two more fields of RecipeConfig: the decomposer has neither (its
# base model and evaluation batch live under its ``model:`` section).
@dataclass(frozen=True)
class EncoderRecipeConfig(RecipeConfig):
    """A recipe that fine-tunes a pretrained encoder and evaluates in batches.

    Attributes:
        base_model: the pretrained encoder to start from: ``default`` (the bundled
            all-MiniLM-L6-v2, offline), a local model folder or a hub id.
        eval_batch_size: inputs per forward pass in the held-out evaluation; speed and
            memory only. Each recipe redeclares it with its own default.
    """

    base_model: str = "default"
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        if not str(self.base_model).strip():  # "" trained the default model without a word
            raise ValueError("base_model must name a model: default (all-MiniLM-L6-v2, bundled), a local model "
                             "folder or a hub id; got an empty string")
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")


def recipe_name(path: str | Path, data: dict[str, Any] | None = None) -> str:
    """The ``recipe:`` key of a YAML file (read from ``data`` when given)."""
    raw = read_yaml(path) if data is None else data
    name = raw.get("recipe")
    if "recipe" in raw and not (isinstance(name, str) and name.strip()):
        raise ConfigError(f"{path}: recipe: expected the registered recipe name as a string (e.g. 'recipe: "
                          f"reranker'), got {type(name).__name__} {shown(name)}")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"{path}: missing top-level 'recipe:' key (the registered recipe name, e.g. "
            "'recipe: reranker')"
        )
    return name


def shipped_recipe(path: str | Path) -> Path:
    """``path``, or, when it does not exist here and names one of the repository's recipes
    (``recipes/reader/minilm_full.yaml``, as the defaults and docs do), that recipe: the
    helpers' default recipes work from any folder."""
    p = Path(path)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] != "recipes":
        return p
    import searchsmith.models as pkg

    shipped = Path(pkg.__file__).resolve().parents[1] / p
    return shipped if shipped.is_file() else p


def load_recipe_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Read a recipe YAML, apply ``key=value`` overrides and build its registered config.

    Raises:
        ConfigError: unknown recipe name, unknown keys, wrong types (all listed at once).
    """
    from searchsmith.training.registry import get_recipe

    if not str(path).strip():  # Path("") is "." (the current folder)
        raise ConfigError("the recipe path is empty: give a recipe YAML file, e.g. recipes/reranker/minilm_full.yaml")
    path = shipped_recipe(path)
    raw = dict(read_yaml(path))
    apply_overrides(raw, overrides)
    entry = get_recipe(recipe_name(path, raw))
    return from_dict(entry.config_cls, raw, source=str(path))


def config_hash(cfg: Any, ignore: tuple[str, ...] = ("output_dir",)) -> str:
    """sha256 of the config as canonical JSON, without fields that do not change the result.

    ``output_dir`` is ignored so that ``--output-dir`` does not count as a change.
    """
    data = to_dict(cfg)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in ignore}
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def field_names(cls: type) -> list[str]:
    """Names of a config dataclass's fields (for messages)."""
    return [f.name for f in fields(cls)]


__all__ = [
    "EncoderRecipeConfig",
    "LoraConfig",
    "OptimConfig",
    "RecipeConfig",
    "TrainConfig",
    "config_hash",
    "field_names",
    "load_recipe_config",
    "recipe_name",
]
