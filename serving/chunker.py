"""Token-based, sentence-aware chunking with overlap.

A document is split into sentences (keeping character offsets); sentences are packed into
chunks of at most ``chunk_tokens`` tokens, and each chunk starts with the trailing
sentences of the previous one up to ``overlap_ratio * chunk_tokens`` tokens. A sentence
longer than a chunk is cut into token windows with the same overlap, using the
tokenizer's offset mapping, so every chunk's ``text`` is exactly ``doc.text[start:end]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from searchsmith.models.text import split_sentences

# Xinyu et al. chunk at 350 tokens; a model with a shorter window gets its window instead
# (all-MiniLM-L6-v2 embeds 256 tokens, [CLS] and [SEP] included: 254 of text).
DEFAULT_CHUNK_TOKENS = 350

@dataclass(frozen=True)
class ChunkerConfig:
    """Attributes:
        chunk_tokens: tokens per chunk; None = ``DEFAULT_CHUNK_TOKENS`` (350, as Xinyu et
            al.) or the embedding model's window when that is shorter (:meth:`fitted`).
        overlap_ratio: share of a chunk repeated at the start of the next (0.25 in the paper).
    """

    chunk_tokens: int | None = None
    overlap_ratio: float = 0.25

    def __post_init__(self) -> None:
        if self.chunk_tokens is not None and self.chunk_tokens < 8:
            raise ValueError(f"chunker.chunk_tokens must be >= 8, got {self.chunk_tokens}")
        if not 0.0 <= self.overlap_ratio < 0.9:
            raise ValueError(f"chunker.overlap_ratio must be in [0, 0.9), got {self.overlap_ratio}")

    def fitted(self, window: int | None) -> ChunkerConfig:
        """This config with ``chunk_tokens`` decided: as set, or the default capped at
        ``window`` (text tokens the embedding model sees; None = no known limit)."""
        if self.chunk_tokens is not None:
            return self
        tokens = DEFAULT_CHUNK_TOKENS if window is None else max(8, min(DEFAULT_CHUNK_TOKENS, window))
        return replace(self, chunk_tokens=tokens)


@dataclass(frozen=True)
class Chunk:
    """A piece of one document; ``text == document_text[start:end]``."""

    chunk_id: str
    doc_id: str
    source: str
    text: str
    start: int
    end: int
    n_tokens: int
    title: str | None = None
    date: str | None = None
    url: str | None = None
    images: tuple[dict[str, Any], ...] = field(default_factory=tuple)


class Chunker:
    """Split documents into overlapping token-bounded chunks.

    Args:
        tokenizer: a Hugging Face *fast* tokenizer (offset mapping needed).
        config: sizes.
    """

    def __init__(self, tokenizer: Any, config: ChunkerConfig | None = None) -> None:
        self.tokenizer = tokenizer
        window = getattr(tokenizer, "model_max_length", None)
        # tokenizers without a limit report a huge sentinel (int(1e30))
        window = window - 2 if isinstance(window, int) and 8 < window < 1_000_000 else None
        self.config = (config or ChunkerConfig()).fitted(window)
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("Chunker needs a fast tokenizer (offset mapping); load it with use_fast=True")

    def _offsets(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        enc = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True,
                             return_attention_mask=False, return_token_type_ids=False)
        return [[tuple(o) for o in offs] for offs in enc["offset_mapping"]]

    def spans(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, n_tokens) of each chunk of ``text``."""
        cfg = self.config
        limit = cfg.chunk_tokens
        overlap = int(cfg.overlap_ratio * limit)
        sentences = split_sentences(text)
        if not sentences:
            return []
        offsets = self._offsets([text[s:e] for s, e in sentences])
        # Units: sentences, with over-long sentences cut into token windows.
        units: list[tuple[int, int, int]] = []
        for (s, e), offs in zip(sentences, offsets):
            if len(offs) <= limit:
                units.append((s, e, max(len(offs), 1)))
                continue
            step = max(limit - overlap, 1)
            for w in range(0, len(offs), step):
                window = offs[w: w + limit]
                units.append((s + window[0][0], s + window[-1][1], len(window)))
                if w + limit >= len(offs):
                    break
        chunks: list[tuple[int, int, int]] = []
        i = 0
        while i < len(units):
            j, total = i, 0
            while j < len(units) and (total + units[j][2] <= limit or j == i):
                total += units[j][2]
                j += 1
            chunks.append((units[i][0], units[j - 1][1], total))
            if j >= len(units):
                break
            # next chunk starts with trailing units of this one, up to `overlap` tokens
            k, back = j, 0
            while k - 1 > i and back + units[k - 1][2] <= overlap:
                k -= 1
                back += units[k][2]
            i = k
        return chunks

    def chunk(self, doc: dict[str, Any]) -> list[Chunk]:
        """Chunks of one corpus record (``id``, ``source``, ``text`` and optional metadata)."""
        text = doc["text"]
        out = []
        for n, (s, e, n_tok) in enumerate(self.spans(text)):
            out.append(Chunk(
                chunk_id=f"{doc['id']}#{n}", doc_id=str(doc["id"]), source=str(doc["source"]),
                text=text[s:e], start=s, end=e, n_tokens=n_tok, title=doc.get("title"),
                date=doc.get("date"), url=doc.get("url"),
                images=tuple(doc.get("images") or ()),
            ))
        return out

    def chunk_all(self, docs: Sequence[dict[str, Any]],
                  progress: Callable[[int], None] | None = None) -> Iterator[Chunk]:
        for i, doc in enumerate(docs):
            yield from self.chunk(doc)
            if progress:
                progress(i)
