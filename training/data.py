"""Data utilities shared by the recipes: path resolution, seeded splits, JSONL writing,
synthetic text, and a disk-cached sentence embedder (the untuned bi-encoder the recipes mine
negatives with and compare against). JSONL reading is :func:`searchsmith.models.jsonl.read_jsonl`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import resolve_model
from searchsmith.models.io import write_jsonl_atomic  # noqa: F401 - the recipes import it from here
from searchsmith.models.jsonl import find_lone_surrogate, lone_surrogate_at

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]

# The real sets' folder as the recipes name it (``data.*`` paths, resolved by resolve_data_path).
SHARED_DATA = "../shared/data"


def resolve_data_path(path: str | Path, field: str, *, must_exist: bool = True, folder: bool = False) -> Path:
    """Resolve a recipe data path: as given (relative to the current folder), else relative
    to the repository root (so ``../shared/data/...`` works from the repo and from elsewhere).

    Raises:
        ConfigError: the path does not exist (``must_exist``), or is a folder where a file is
            expected (or a file where a ``folder``), naming the field and the fix.
    """
    candidates = data_path_candidates(path)
    for c in candidates:
        if c.exists():
            if c.is_dir() != folder:
                want, got = ("a folder", "a file") if folder else ("a file", "a folder")
                raise ConfigError(f"{field}: {str(c)!r} is {got}; expected {want} (set {field} to its path)")
            return c.resolve()
    if not must_exist:
        return candidates[-1]
    tried = " or ".join(repr(str(c)) for c in candidates)
    raise ConfigError(
        f"{field}: data file {str(path)!r} not found (tried {tried}). The real sets live in "
        f"{SHARED_DATA} beside the repository; without them, set data.sources to the "
        "synthetic set only (e.g. data.sources=[synthetic])"
    )


def data_path_candidates(path: str | Path) -> list[Path]:
    """Where a recipe data path is looked for, in order (:func:`resolve_data_path`): as given
    (relative to the current folder), then relative to the repository root; an absolute path
    as given only."""
    p = Path(path).expanduser()
    return [p] if p.is_absolute() else [p, REPO_ROOT / p]


def find_data_folder(folder: str | Path = SHARED_DATA) -> Path | None:
    """The folder ``folder`` names, found as the recipes find their data paths
    (:func:`data_path_candidates`: the current folder, else beside the repository for the
    default ``../shared/data``), resolved; None when no candidate is a folder.

    A command whose data-folder flag defaults to :data:`SHARED_DATA` resolves the default with
    this, so that it reads what the recipes read from wherever it is run.
    """
    for c in data_path_candidates(folder):
        if c.is_dir():
            return c.resolve()
    return None


def resolve_data_dir(value: str | Path, flag: str, *, default: str = SHARED_DATA, metavar: str = "DIR",
                     where: str | None = None) -> Path:
    """The path a command's data flag names (``--data-dir``, ``--coco-dir``, ``--claims``):
    given (anything but ``default``), as given, relative to the current folder; left at its
    ``default`` (:data:`SHARED_DATA` or a path under it), found as the recipes find their data
    paths: under the one ``../shared/data`` :func:`find_data_folder` finds, in the current
    folder, else beside the repository, so the command reads what they read from anywhere.

    Args:
        value: the flag's value.
        flag: the flag, for the message (``--data-dir``).
        default: the flag's default, :data:`SHARED_DATA` or a path under it.
        metavar: what the flag takes, for the fix (``DIR``, ``FILE``).
        where: the message's prefix (a command's name); default ``flag``.

    Raises:
        ConfigError: an empty value, or the default's folder found in neither place, naming
            both places, the flag and the fix.
    """
    rest = os.path.relpath(os.path.normpath(default), os.path.normpath(SHARED_DATA))
    if rest.startswith(".."):
        raise ValueError(f"resolve_data_dir: default {default!r} is not under {SHARED_DATA}")
    if not str(value).strip():  # Path("") is the current folder
        raise ConfigError(f"{flag} is empty: give a path, or leave the option out (default {default})")
    if os.path.normpath(str(value)) != os.path.normpath(default):
        return Path(value)
    found = find_data_folder(SHARED_DATA)
    if found is None:
        here, beside = (os.path.normpath(os.path.abspath(p)) for p in data_path_candidates(SHARED_DATA))
        raise ConfigError(f"{where or flag}: no {SHARED_DATA} in the current folder ({here}) nor beside the "
                          f"repository ({beside}); put the shared data there, or pass {flag} {metavar}")
    return found if rest == "." else found / rest


def shared_data_settings(data: Any, folder: str | Path, *, default: str = SHARED_DATA) -> dict[str, str]:
    """The ``data.*`` settings of a recipe config that name ``default`` or a path under it,
    pointed into ``folder`` instead (absolute): what a command's data-folder flag
    (``quickstart --shared-data DIR``) means for a recipe. Pass them as overrides of
    :func:`searchsmith.training.config.load_recipe_config`.

    A setting naming any other path (the user's own file) is left as it is, and so is every
    setting when ``folder`` is ``default`` itself (resolved as before: the current folder,
    then the repository root).

    Args:
        data: a recipe config's ``data`` section (a config dataclass, its defaults included).
        folder: the folder laid out like ``default`` (``scifact/claims_dev.jsonl``, ...).

    Returns:
        ``{"data.scifact_claims": "/data/x/scifact/claims_dev.jsonl", ...}``; empty when nothing moves.
    """
    if os.path.normpath(str(folder)) == os.path.normpath(default):
        return {}
    root = Path(folder).expanduser().resolve()
    moved = {}
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        if isinstance(value, str) and (value == default or value.startswith(default + "/")):
            moved[f"data.{f.name}"] = str(root / value[len(default):].lstrip("/"))
    return moved


def split_by_key(keys: Sequence[T], eval_ratio: float, seed: int) -> tuple[set[T], set[T]]:
    """Seeded split of distinct ``keys`` (query ids) into (train, held-out) sets.

    The held-out set has ``round(eval_ratio * n)`` keys, at least one when ``n >= 2``.
    """
    if not 0 < eval_ratio < 1:
        raise ConfigError(f"data.eval_ratio must be in (0, 1), got {eval_ratio}")
    uniq = sorted(set(keys), key=str)
    rng = random.Random(seed)
    rng.shuffle(uniq)
    n_eval = max(1, round(eval_ratio * len(uniq))) if len(uniq) >= 2 else 0
    return set(uniq[n_eval:]), set(uniq[:n_eval])


def check_leave_out(sources: Sequence[str], leave_out: Sequence[str]) -> None:
    """The recipes' ``data.leave_out`` rule, checked when the config loads (before any data is
    read): every left-out source is one of ``data.sources``, and one is left to train on.
    :func:`split_leaving_out` checks the same of the sources the data gave.

    Raises:
        ValueError: a left-out source not in ``sources``, or none left to train on.
    """
    unknown = [s for s in leave_out if s not in sources]
    if unknown:
        raise ValueError(f"data.leave_out: {unknown} not in data.sources {list(sources)}; name sources to hold out")
    if set(sources) <= set(leave_out):
        raise ValueError(f"data.leave_out: {list(leave_out)} leaves no source to train on; keep at least one of "
                         "data.sources in training")


def split_leaving_out(keys: Sequence[T], sources: Sequence[str], leave_out: Sequence[str], eval_ratio: float,
                      seed: int, field: str = "data.leave_out") -> tuple[set[T], set[T]]:
    """:func:`split_by_key`, except that every key of a source in ``leave_out`` is held out:
    a leave-one-dataset-out evaluation (train without SciFact, test on SciFact) beside the
    usual held-out split of the other sources. ``sources[i]`` is the source of ``keys[i]``.

    Raises:
        ConfigError: a left-out source that gave no key, or no source left to train on.
    """
    out = set(leave_out)
    present = set(sources)
    missing = sorted(out - present)
    if missing:
        raise ConfigError(f"{field}: {missing} gave no data; name sources of data.sources "
                          f"({sorted(present)})")
    if present <= out:
        raise ConfigError(f"{field}: {sorted(out)} leaves no source to train on; keep at least one of "
                          f"{sorted(present)}")
    kept = [k for k, s in zip(keys, sources, strict=True) if s not in out]
    train, held = split_by_key(kept, eval_ratio, seed)
    return train - {k for k, s in zip(keys, sources, strict=True) if s in out}, \
        held | {k for k, s in zip(keys, sources, strict=True) if s in out}


# ------------------------------------------------------------------ synthetic text helpers

ANIMALS = ["otter", "falcon", "lynx", "heron", "badger", "gecko", "walrus", "marmot", "ibis",
           "tapir", "osprey", "newt", "bison", "mink", "wren", "yak", "salamander", "jackal",
           "puffin", "okapi", "ferret", "condor", "beaver", "stoat"]
HABITATS = ["river banks", "mountain cliffs", "pine forests", "salt marshes", "open grassland",
            "desert dunes", "arctic ice", "alpine meadows", "rainforest canopy", "rocky coasts"]
FOODS = ["fish", "insects", "seeds", "small rodents", "berries", "leaves", "crabs", "worms",
         "grass", "eggs"]
TRAITS = ["nocturnal", "migratory", "solitary", "social", "territorial", "burrowing",
          "diving", "gliding"]
COLOURS = ["brown", "grey", "black", "white", "red", "spotted", "striped", "golden"]


def synthetic_facts(n_entities: int, seed: int) -> list[dict[str, str]]:
    """Made-up animal fact sheets: ``{name, habitat, food, trait, colour}``; deterministic.

    Names beyond the base list get a numbered suffix ("otter 2") so there can be many.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n_entities):
        base = ANIMALS[i % len(ANIMALS)]
        name = base if i < len(ANIMALS) else f"{rng.choice(COLOURS)} {base} {i // len(ANIMALS) + 1}"
        out.append({"name": name, "habitat": rng.choice(HABITATS), "food": rng.choice(FOODS),
                    "trait": rng.choice(TRAITS), "colour": rng.choice(COLOURS)})
    return out


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    """Write a cache array to ``path`` (``.npy``, its folder made) through a temporary file
    beside it, per process: several processes may write the same cache at once, and a reader
    never loads half an array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.npy")
    np.save(tmp, array)
    tmp.replace(path)


@functools.lru_cache(maxsize=2)
def _sentence_transformer(path: str) -> Any:
    """One loaded model per path and process (a recipe measures several baselines with it)."""
    import torch
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu" if not torch.cuda.is_available() else None)


class CachedEmbedder:
    """sentence-transformers ``encode`` with a per-run disk cache keyed by the texts' hash.

    The model is loaded at the first texts the cache does not hold (an export re-measuring
    a baseline from the run's cache never loads it)."""

    def __init__(self, name: str, cache_dir: Path | None, batch_size: int = 64) -> None:
        self.path = resolve_model(name, field="data.mine_with")  # a bad name fails here, not at the first miss
        self.cache_dir, self.batch_size = cache_dir, batch_size
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = _sentence_transformer(self.path)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised embeddings, shape (N, D) float32."""
        joined = "\x1f".join(texts)
        found = find_lone_surrogate(list(texts)) if lone_surrogate_at(joined) is not None else None
        if found is not None:  # no tokenizer (nor the cache key) takes one: say which text
            i = found.loc[0]
            raise ValidationError(f"embed: text {i} ({texts[i][:60]!r}) holds a lone surrogate "
                                  f"({ascii(found.char)[1:-1]}) at character {found.index}, which is not Unicode "
                                  "text; fix the data's encoding")
        key = hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]
        path = self.cache_dir / f"emb-{key}.npy" if self.cache_dir else None
        if path is not None and path.is_file():
            return np.load(path)
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        emb = emb.astype(np.float32)
        if path is not None:
            save_npy_atomic(path, emb)
        return emb


__all__ = [
    "CachedEmbedder",
    "REPO_ROOT",
    "SHARED_DATA",
    "check_leave_out",
    "data_path_candidates",
    "find_data_folder",
    "resolve_data_dir",
    "resolve_data_path",
    "save_npy_atomic",
    "shared_data_settings",
    "split_by_key",
    "split_leaving_out",
    "synthetic_facts",
    "write_jsonl_atomic",
]
