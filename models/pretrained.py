"""Loading saved models: their metadata files and ``transformers`` checkpoints that must be complete.

* :func:`read_model_meta` finds a model folder (a training run's ``model/`` folder, or the
  folder itself) and reads its metadata JSON; :func:`read_json` reads any such file.
* :func:`check_model_files` refuses a folder with a truncated or overwritten file, naming it.
* :func:`load_complete`: a model that loads with MISSING weights has them initialised at
  random by ``transformers``: a head that was never trained, or a checkpoint saved
  incompletely. Serving, exporting or fine-tuning further from it would give noise dressed
  as a model, so every loader of a saved model (reranker, decomposer, export graphs) refuses
  it here, with the same two messages.

Every error is a :class:`BundleError` whose message starts with the caller's name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchsmith.models.errors import BundleError


def read_json(path: Path, what: str, fix: str = "") -> Any:
    """The JSON value in ``path``, read as UTF-8; ``fix`` ends the message of a damaged file.

    Raises:
        BundleError: the file is not UTF-8 or not valid JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{what}: {path} is not valid JSON ({exc}){f'; {fix}' if fix else ''}") from None


def check_model_files(folder: str | os.PathLike, what: str, fix: str) -> None:
    """Refuse a model folder holding a damaged file (truncated by a full disk or a copy cut
    short, overwritten): every ``*.json`` must parse and every ``*.safetensors`` must hold all
    the bytes its header describes. Cheap (headers and small files only), so it runs before
    ``transformers`` meets the file and fails inside its loader.

    Args:
        what: the caller, first in the message (``"export"``).
        fix: what to do about it, ending the message (retrain the run, copy the folder again).

    Raises:
        BundleError: naming the damaged file.
    """
    from safetensors import SafetensorError, safe_open

    root = Path(folder)
    for f in sorted(root.rglob("*.json")):
        read_json(f, what, fix)
    for f in sorted(root.rglob("*.safetensors")):
        try:
            with safe_open(str(f), framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            raise BundleError(f"{what}: {f} is damaged ({exc}); {fix}") from None


def read_model_meta(path: str | os.PathLike, meta_file: str, what: str, missing_hint: str
                    ) -> tuple[Path, Any]:
    """(model folder, parsed ``meta_file``) of a saved model.

    Args:
        path: the model folder, or a training run folder whose final model is in ``model/``.
        meta_file: the model's metadata file name (``decomposer.json``, ...).
        what: the caller, first in every message.
        missing_hint: what to do when there is no ``meta_file``, ending that message.

    Raises:
        BundleError: no ``meta_file`` in either place, or one that is not valid JSON.
    """
    p = Path(path)
    if not (p / meta_file).is_file() and (p / "model" / meta_file).is_file():
        p = p / "model"  # a training run folder: its final model is in model/
    if not (p / meta_file).is_file():
        raise BundleError(f"{what}: {str(p)!r} has no {meta_file}; {missing_hint}")
    return p, read_json(p / meta_file, what)


def load_complete(cls: Any, path: str | os.PathLike, what: str, fix: str, *,
                  ignore: Iterable[str] = (), **kwargs: Any) -> Any:
    """``cls.from_pretrained(path, **kwargs)``, refusing a folder that does not load or lacks weights.

    Args:
        cls: a ``transformers`` class with ``from_pretrained`` (``AutoModel``, ...).
        path: the model folder.
        what: the caller, first in every message (``"reranker"``, ``"export embedder"``).
        fix: what the user should do about missing weights, ending the message.
        ignore: missing keys containing any of these strings are tolerated (e.g. ``"pooler"``
            for an encoder whose pooler is never used).
        **kwargs: passed to ``from_pretrained``.

    Returns:
        The model, in whatever mode ``from_pretrained`` leaves it.

    Raises:
        BundleError: the folder does not load (a damaged file is named), or some weights are
            missing.
    """
    from safetensors import SafetensorError

    damaged = "the folder is damaged: copy it again, or retrain the model"
    try:
        model, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    except SafetensorError as exc:  # a truncated weights file: name it
        check_model_files(path, what, damaged)
        raise BundleError(f"{what}: cannot load the weights in {str(path)!r} ({exc}); {damaged}") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"{what}: cannot load a model from {str(path)!r}: {exc}") from None
    skip = tuple(ignore)
    missing = [k for k in info.get("missing_keys", []) if not any(s in k for s in skip)]
    if missing:
        raise BundleError(f"{what}: {str(path)!r} loads with MISSING weights ({len(missing)}, e.g. "
                          f"{missing[0]!r}): {fix}")
    return model


__all__ = ["check_model_files", "load_complete", "read_json", "read_model_meta"]
