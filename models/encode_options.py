"""sentence-transformers' ``encode`` keywords, for code written against ``SentenceTransformer``.

``Embedder.encode`` (torch) and ``EmbedBundle.encode`` (ONNX) take the keywords of
``SentenceTransformer.encode`` that mean something for an embedder whose rows are always unit
vectors: ``prompt``, ``batch_size``, ``show_progress_bar``, ``convert_to_numpy``,
``convert_to_tensor``, ``normalize_embeddings`` (True only), ``precision`` (``float32`` only)
and ``truncate_dim``. What they cannot do is refused by name, never ignored: a caller asking for
raw (unnormalised) vectors or int8 ones would otherwise get something else without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np
from searchsmith.models.config import is_int
from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import check_unicode

if TYPE_CHECKING:
    import torch


class EncodeKeywords(TypedDict, total=False):
    """The sentence-transformers keywords ``encode`` takes (``**Unpack[EncodeKeywords]``)."""

    prompt: str | None
    batch_size: int | None
    show_progress_bar: bool | None
    convert_to_numpy: bool
    convert_to_tensor: bool
    normalize_embeddings: bool
    precision: Literal["float32"]
    truncate_dim: int | None


TAKEN = tuple(EncodeKeywords.__annotations__)  # the keywords encode takes, in this order


@dataclass(frozen=True)
class EncodeOptions:
    """Checked ``encode`` keywords (:func:`encode_options`).

    Attributes:
        prompt: prepended to every text ("" = none), as sentence-transformers does.
        batch_size: most texts per model call for this call (None: the embedder's own).
        show_progress: a progress bar (None: the embedder's rule, long runs only).
        tensor: return a torch tensor instead of a NumPy array.
        truncate_dim: keep the first this many dimensions, renormalised (None: all).
    """

    prompt: str = ""
    batch_size: int | None = None
    show_progress: bool | None = None
    tensor: bool = False
    truncate_dim: int | None = None

    def texts(self, texts: list[str]) -> list[str]:
        """``texts`` with the prompt prepended."""
        return [self.prompt + t for t in texts] if self.prompt else texts

    def finish(self, vectors: np.ndarray) -> np.ndarray | torch.Tensor:
        """(n, D) unit rows -> what the caller asked for: cut to ``truncate_dim`` and
        renormalised, as a NumPy array or a torch tensor."""
        if self.truncate_dim is not None and self.truncate_dim < vectors.shape[1]:
            cut = vectors[:, : self.truncate_dim]
            norms = np.linalg.norm(cut, axis=1, keepdims=True)
            vectors = np.ascontiguousarray(cut / np.where(norms > 0, norms, 1.0), dtype=np.float32)
        if self.tensor:
            import torch

            return torch.from_numpy(np.ascontiguousarray(vectors))
        return vectors


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValidationError(f"encode: {name} must be True or False, got {value!r:.40}")
    return bool(value)


def encode_options(*, dim: int, prompt: str | None = None, batch_size: int | None = None,
                   show_progress_bar: bool | None = None, convert_to_numpy: bool = True,
                   convert_to_tensor: bool = False, normalize_embeddings: bool = True,
                   precision: str = "float32", truncate_dim: int | None = None, **unknown: object) -> EncodeOptions:
    """Check sentence-transformers' ``encode`` keywords for an embedder of ``dim`` dimensions.

    Raises:
        ValidationError: a keyword of the wrong type or out of range, or one asking for what this
            embedder cannot give (``normalize_embeddings=False``, a precision other than float32),
            naming the keyword and the fix.
        TypeError: a keyword ``encode`` does not take (as Python answers one).
    """
    if unknown:
        raise TypeError(f"encode() got an unexpected keyword argument {sorted(unknown)[0]!r}; of "
                        f"sentence-transformers' keywords it takes {', '.join(TAKEN)}")
    if prompt is not None and not isinstance(prompt, str):
        raise ValidationError(f"encode: prompt must be a string (prepended to every text), got "
                              f"{type(prompt).__name__}")
    if prompt:
        check_unicode(prompt, "encode: prompt")
    if batch_size is not None and (not is_int(batch_size)
                                   or batch_size < 1):
        raise ValidationError(f"encode: batch_size must be an int >= 1 (texts per model call), got {batch_size!r:.40}")
    if show_progress_bar is not None:
        show_progress_bar = _flag("show_progress_bar", show_progress_bar)
    numpy_out, tensor = _flag("convert_to_numpy", convert_to_numpy), _flag("convert_to_tensor", convert_to_tensor)
    if not numpy_out and not tensor:
        raise ValidationError("encode: convert_to_numpy=False without convert_to_tensor=True asks for a list of "
                              "tensors, which this embedder does not return; pass convert_to_tensor=True for one "
                              "(n, D) tensor, or keep the NumPy array")
    if not _flag("normalize_embeddings", normalize_embeddings):
        raise ValidationError("encode: normalize_embeddings=False is not available: this embedder's vectors are "
                              "always unit rows (pooling and L2 normalisation are part of the model, as in "
                              "all-MiniLM-L6-v2's own Normalize module); drop the keyword")
    if precision != "float32":
        raise ValidationError(f"encode: precision {precision!r:.40} is not available; this embedder returns "
                              "float32; drop the keyword and quantise the vectors yourself")
    if truncate_dim is not None and (not is_int(truncate_dim)
                                     or not 1 <= truncate_dim <= dim):
        raise ValidationError(f"encode: truncate_dim must be an int in [1, {dim}] (this embedder's dimensions) "
                              f"or None, got {truncate_dim!r:.40}")
    return EncodeOptions(prompt or "", None if batch_size is None else int(batch_size), show_progress_bar, tensor,
                         None if truncate_dim is None else int(truncate_dim))


__all__ = ["TAKEN", "EncodeKeywords", "EncodeOptions", "encode_options"]
