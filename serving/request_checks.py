"""Checks of request inputs beyond the schemas: text and list limits, embedding inputs
(tokenized in a worker thread), and base64 images (decoded within byte and pixel limits)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from searchsmith.models.errors import EmptyInputError, PayloadTooLargeError, ValidationError
from searchsmith.models.text import is_blank
from searchsmith.models.tokenizer import tokenizer_lock
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.runner import BundleEmbedder

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder

# The image files a request may send, as PIL names them. PIL opens dozens more, through
# decoders this server has no use for (EPS runs Ghostscript where it is installed; DDS, PPM,
# QOI... raised ValueError on corrupt files): those are refused before any of their code runs.
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")


def check_text(text: str, where: str, config: ServerLimits) -> str:
    """A non-blank text within ``max_input_chars`` (cut, or 413 when truncation is off)."""
    if is_blank(text):  # "\u200b" or "\x00" alone are no text either
        raise EmptyInputError(f"{where}: is empty (nothing but spaces, control or zero-width characters); "
                              "send non-blank text")
    if len(text) > config.max_input_chars:
        if not config.truncate:
            raise PayloadTooLargeError(
                f"{where}: {len(text)} characters, the limit is {config.max_input_chars} "
                "(server.max_input_chars); shorten it or enable server.truncate"
            )
        return text[: config.max_input_chars]
    return text


def check_count(n: int, limit: int, where: str, what: str, setting: str) -> None:
    """A list of 1 to ``limit`` items (400 when empty, 413 naming ``server.<setting>`` past it)."""
    if n == 0:
        raise EmptyInputError(f"{where}: the list is empty; send at least one of the {what}")
    if n > limit:
        raise PayloadTooLargeError(f"{where}: {n} {what}, the limit is {limit} (server.{setting}); "
                                   "split the request")

def tokenize_inputs(embedder: Embedder | BundleEmbedder, texts: list[str], config: ServerLimits
              ) -> tuple[list[Any], list[int]]:
    """Batcher items and their token lengths (worker thread). Truncates to max_input_chars and
    max_seq_length, or raises PayloadTooLargeError when ``config.truncate`` is off.

    Items are token ids for a torch ``Embedder``, texts for a ``BundleEmbedder`` (the bundle
    tokenizes them itself).
    """
    texts = [t[: config.max_input_chars] for t in texts]
    if isinstance(embedder, BundleEmbedder):
        limit = embedder.max_seq_length
        full = embedder.lengths(texts)
        for i, n in enumerate(full):
            if n > limit and not config.truncate:
                raise PayloadTooLargeError(
                    f"input[{i}]: {n} tokens, the model's limit is {limit} "
                    "(max_seq_length); shorten it or enable server.truncate"
                )
        return texts, [min(n, limit) for n in full]
    ids = embedder.tokenize(texts)
    if not config.truncate:
        limit = embedder.max_seq_length
        with tokenizer_lock(embedder.tokenizer):  # other requests tokenize with truncation meanwhile
            full = embedder.tokenizer(texts, truncation=False, return_attention_mask=False,
                                      return_token_type_ids=False)["input_ids"]
        for i, row in enumerate(full):
            if len(row) > limit:
                raise PayloadTooLargeError(
                    f"input[{i}]: {len(row)} tokens, the model's limit is {limit} "
                    "(max_seq_length); shorten it or enable server.truncate"
                )
    return ids, [len(x) for x in ids]

def decode_image(data: str, where: str, config: ServerLimits, *, fit: Callable[[Any], Any] | None = None,
                 keep: bool = True) -> Any:
    """A base64 image -> RGB PIL image, within the byte and pixel limits.

    Args:
        fit: the image as the model reads it (``ImagesBundle.fit_image``: its input size), made
            from the decoded one at once: a request holds its images at that size, not decoded
            in full (32 images of 4096 x 4096 are 1.6 GB of RGB).
        keep: False decodes the image (a corrupt file is still refused) and returns None: for a
            server with no model that reads pixels.

    Raises:
        ValidationError: not base64, or not an image of ``IMAGE_FORMATS`` that PIL decodes (422).
        PayloadTooLargeError: over ``max_image_bytes`` or ``max_image_pixels`` (413).
    """
    import binascii
    import io

    from PIL import Image

    if len(data) * 3 // 4 > config.max_image_bytes + 3:  # decoded size, checked before decoding
        raise PayloadTooLargeError(f"{where}: about {len(data) * 3 // 4} bytes, the limit is "
                                   f"{config.max_image_bytes} (server.max_image_bytes); send a smaller image")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        if re.match(r"\s*data:", data):
            fix = "send the base64 after the comma of the data: URI, without the 'data:...;base64,' prefix"
        elif re.search(r"\s", data):
            fix = "send it on one line, without spaces or line breaks"
        elif re.search(r"[-_]", data):
            fix = "send standard base64 (+ and /), not the URL-safe alphabet (- and _)"
        else:
            fix = "send the image file's bytes base64-encoded, padded with = to a multiple of 4 characters"
        raise ValidationError(f"{where}: not valid base64; {fix}") from None
    if len(raw) > config.max_image_bytes:
        raise PayloadTooLargeError(f"{where}: {len(raw)} bytes, the limit is {config.max_image_bytes} "
                                   "(server.max_image_bytes); send a smaller image")
    try:
        # reads the header only: the size is known before decoding
        img = Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS)
        w, h = img.size
        if w * h > config.max_image_pixels:
            raise PayloadTooLargeError(f"{where}: {w}x{h} pixels, the limit is {config.max_image_pixels} "
                                       "(server.max_image_pixels); send a smaller image")
        img.load()  # decodes: a truncated or corrupt file is found here
    except PayloadTooLargeError:
        raise
    except Image.DecompressionBombError:
        raise PayloadTooLargeError(f"{where}: the image is too large to decode (server.max_image_pixels)") from None
    except Exception as exc:  # noqa: BLE001 - PIL's decoders raise what the bytes lead them to
        # (OSError, SyntaxError, ValueError 'Truncated IHDR chunk', EOFError, ...): the file is at
        # fault either way; an error of fit() or convert() below stays a server error
        raise ValidationError(f"{where}: not an image this server can read ({type(exc).__name__}); send "
                              "PNG, JPEG, GIF, BMP or WebP bytes") from None
    if not keep:
        return None
    return fit(img) if fit is not None else img.convert("RGB")
