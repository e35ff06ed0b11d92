"""Loading a saved tokenizer without the cost of ``transformers.AutoTokenizer``.

``AutoTokenizer`` imports the model registry of transformers (about 1.5 s on 2 cores), which is
most of a cold ``searchsmith ask`` once the models run in ONNX Runtime. A folder saved by
``save_pretrained`` holds a ``tokenizer.json``: ``TokenizersBackend`` (transformers' generic
fast tokenizer) loads it with the same special tokens and settings, and only imports
``transformers.utils``. Tokenizer classes whose behaviour is not fully described by
``tokenizer.json`` go through ``AutoTokenizer`` as before.

``tests/models/test_tokenizer.py`` ties the fast path to ``AutoTokenizer`` on the project's
tokenizers (encodings, pairs, offsets, decoding, special ids).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

# Classes whose fast tokenizer is fully described by tokenizer.json (the WordPiece / BPE
# families the recipes' bases use), with the inputs their models take: the class attribute
# ``model_input_names`` is not saved in the folder, and the ONNX graphs are fed by it.
# Other classes (sentencepiece-only, custom code) go through AutoTokenizer.
_WITH_SEGMENTS = ("input_ids", "token_type_ids", "attention_mask")
_WITHOUT_SEGMENTS = ("input_ids", "attention_mask")
FAST_CLASSES: dict[str, tuple[str, ...]] = {
    "BertTokenizer": _WITH_SEGMENTS, "BertTokenizerFast": _WITH_SEGMENTS,
    "ElectraTokenizer": _WITH_SEGMENTS, "ElectraTokenizerFast": _WITH_SEGMENTS,
    "DistilBertTokenizer": _WITHOUT_SEGMENTS, "DistilBertTokenizerFast": _WITHOUT_SEGMENTS,
    "MPNetTokenizer": _WITHOUT_SEGMENTS, "MPNetTokenizerFast": _WITHOUT_SEGMENTS,
    "RobertaTokenizer": _WITHOUT_SEGMENTS, "RobertaTokenizerFast": _WITHOUT_SEGMENTS,
}


def load_tokenizer(folder: str | Path) -> Any:
    """A Hugging Face tokenizer from a saved folder, fast to import where possible.

    Args:
        folder: a folder written by ``tokenizer.save_pretrained``.

    Returns:
        A tokenizer with the usual call API (``tok(texts, pairs, truncation=..., ...)``).

    Raises:
        OSError, ValueError: the folder does not hold a loadable tokenizer (as ``AutoTokenizer``).
    """
    folder = Path(folder)
    config_path = folder / "tokenizer_config.json"
    cls_name = None
    if config_path.is_file() and (folder / "tokenizer.json").is_file():
        try:
            cls_name = json.loads(config_path.read_text(encoding="utf-8")).get("tokenizer_class")
        except (json.JSONDecodeError, UnicodeDecodeError):
            cls_name = None
    if cls_name in FAST_CLASSES:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(str(folder), model_input_names=list(FAST_CLASSES[cls_name]))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def model_vocab_size(model_dir: str | Path) -> int | None:
    """The vocabulary size a saved model's ``config.json`` gives (top level, or its text /
    encoder part); None when it gives none."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for part in (config, config.get("text_config"), config.get("encoder")):
        if isinstance(part, dict) and isinstance(part.get("vocab_size"), int) and part["vocab_size"] > 0:
            return int(part["vocab_size"])
    return None


def load_run_tokenizer(folder: str | Path, model_dir: str | Path | None = None, *, what: str) -> Any:
    """The tokenizer saved beside a trained model (a run's ``model/``), checked against it.

    transformers builds a tokenizer of five special tokens from ``tokenizer_config.json``
    alone when ``tokenizer.json`` / ``vocab.txt`` are gone: every word then reads as
    ``[UNK]``, and an export's parity passes, both sides reading through the same broken
    tokenizer. A tokenizer that knows under half the model's vocabulary is refused.

    Args:
        folder: the tokenizer's folder.
        model_dir: the model's folder (its ``config.json``); ``folder``'s when it gives none.
        what: who asks, for the message (``export rerank``, ``--checkpoint``).

    Raises:
        BundleError: the tokenizer does not load, or is far smaller than the model's vocabulary.
    """
    from searchsmith.models.errors import BundleError
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:  # a damaged tokenizer or config file
        raise BundleError(f"{what}: cannot load the tokenizer in {str(folder)!r} ({exc}); the model folder is "
                          "damaged or incomplete") from None
    vocab = (model_vocab_size(model_dir) if model_dir is not None else None) or model_vocab_size(folder)
    if vocab is not None and len(tokenizer) < vocab // 2:
        raise BundleError(f"{what}: the tokenizer in {str(folder)!r} knows {len(tokenizer)} tokens, the model "
                          f"{vocab}: its vocabulary file (tokenizer.json or vocab.txt) is missing or damaged, so "
                          "every word would read as unknown; the model folder is damaged or incomplete (copy it "
                          "again, or rerun the recipe)")
    return tokenizer


_LOCKS_GUARD = threading.Lock()


def tokenizer_lock(tokenizer: Any) -> threading.RLock:
    """The lock every call of ``tokenizer`` from more than one thread must hold.

    A fast tokenizer stores its truncation and padding settings on one shared Rust object and
    changes them on each call whose settings differ; a call on another thread that is still
    encoding (with the GIL released) then fails with ``RuntimeError: Already borrowed``. The
    server counts tokens (no truncation) on request threads while a batch is encoded
    (truncated) on the batcher's thread, so both go through this lock. One lock per tokenizer
    object, kept on the object.
    """
    lock = getattr(tokenizer, "_searchsmith_lock", None)
    if lock is None:
        with _LOCKS_GUARD:
            lock = getattr(tokenizer, "_searchsmith_lock", None)
            if lock is None:
                lock = threading.RLock()
                tokenizer._searchsmith_lock = lock
    return lock


def encode_pairs(tokenizer: Any, first: Any, second: Any, max_length: int, call: Any = None, **kwargs: Any) -> Any:
    """Tokenize (first, second) text pairs cutting only the second text to ``max_length``
    (``only_second``: the passage, never the query or the claim, as every pair model here
    trains); where a first text alone is over the limit, both are cut (``longest_first``)
    instead of the tokenizer's "Sequence to truncate too short" error.

    Args:
        call: how to call the tokenizer (default: ``tokenizer(first, second, **kw)``).
        kwargs: passed on (``padding``, ``return_tensors``, ...).
    """
    call = call or tokenizer
    try:
        return call(first, second, truncation="only_second", max_length=max_length, **kwargs)
    except Exception:  # noqa: BLE001 - tokenizers raises a bare Exception for a first text over the limit
        return call(first, second, truncation="longest_first", max_length=max_length, **kwargs)


__all__ = ["FAST_CLASSES", "encode_pairs", "load_tokenizer", "tokenizer_lock"]


def input_meta(lengths: list[int], max_length: int) -> dict[str, Any]:
    """A model call's meta (``return_meta=True``, ``models/roles.py``) from the untruncated
    token count of each input: ``truncated`` (the inputs cut to ``max_length``), ``max_length``
    and ``tokens``, the tokens the model ran (each input's, cut, special tokens included):
    what a trace counts as a local model's tokens in."""
    return {"truncated": [i for i, n in enumerate(lengths) if n > max_length], "max_length": max_length,
            "tokens": sum(min(n, max_length) for n in lengths)}
