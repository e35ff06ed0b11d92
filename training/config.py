"""Config pieces every recipe embeds, and loading a recipe YAML into its typed config.

A recipe YAML names its recipe in the top-level ``recipe:`` key; the registered config
class of that recipe is then built with :func:`searchsmith.models.config.load_config`
(unknown keys rejected with the closest key, types checked, every error at once).
YAML key = argument name = CLI override path::

    searchsmith train recipes/reranker/minilm_full.yaml optim.lr=3.0e-5 train.seed=1
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.config import apply_overrides, from_dict, read_yaml, to_dict
from searchsmith.models.errors import ConfigError


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup then linear decay to zero at ``max_steps``.

    ``batch_size`` counts training examples (groups) per micro-batch; one optimizer step
    sees ``batch_size * grad_accum_steps`` examples.
    """

    lr: float = 3.0e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_steps: int = 100
    batch_size: int = 8
    grad_accum_steps: int = 1
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"optim.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        for name in ("max_steps", "batch_size", "grad_accum_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"optim.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"optim.max_grad_norm must be > 0, got {self.max_grad_norm}")


@dataclass(frozen=True)
class TrainConfig:
    """Loop settings. ``*_every_steps`` count optimizer steps; 0 turns the action off."""

    seed: int = 0
    # "auto": bf16 on a CUDA device that supports it, else fp16 on CUDA; always fp32 on CPU.
    mixed_precision: Literal["no", "fp16", "bf16", "auto"] = "auto"
    eval_every_steps: int = 0
    save_every_steps: int = 50
    keep_checkpoints: int = 2
    log_every_steps: int = 10

    def __post_init__(self) -> None:
        for name in ("eval_every_steps", "save_every_steps", "log_every_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0 (0 = off), got {getattr(self, name)}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"train.keep_checkpoints must be >= 1, got {self.keep_checkpoints}")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA through peft; merged into the base at save so the result is a plain HF model.

    ``target_modules: null`` uses peft's default for the architecture (query/value for BERT).
    """

    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] | None = None

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"lora.r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")


def recipe_name(path: str | Path, data: dict[str, Any] | None = None) -> str:
    """The ``recipe:`` key of a YAML file (read from ``data`` when given)."""
    raw = read_yaml(path) if data is None else data
    name = raw.get("recipe")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"{path}: missing top-level 'recipe:' key (the registered recipe name, e.g. "
            "'recipe: reranker')"
        )
    return name


def load_recipe_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Read a recipe YAML, apply ``key=value`` overrides and build its registered config.

    Raises:
        ConfigError: unknown recipe name, unknown keys, wrong types (all listed at once).
    """
    from searchsmith.training.registry import get_recipe

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
    "LoraConfig",
    "OptimConfig",
    "TrainConfig",
    "config_hash",
    "field_names",
    "load_recipe_config",
    "recipe_name",
]
