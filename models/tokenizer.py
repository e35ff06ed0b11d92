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
