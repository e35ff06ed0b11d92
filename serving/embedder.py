"""Batched sentence embedding over any sentence-transformers model folder.

Why not ``SentenceTransformer.encode``? It batches a fixed number of texts (sorted by
character length), so a batch of one long text and 31 short ones pads all 32 to the long
one. Here texts are tokenized once per window, sorted by *token* length and packed under a
token budget (``max_batch_tokens`` counts padding), so short texts travel in large batches
and long ones in small batches. Output is L2-normalised float32, in input order.

Memory stays bounded for millions of texts: input is consumed in windows of
``window_texts`` and each window's vectors are yielded (or written to a ``.npy`` memmap)
before the next is read.

The pooling layer is read from the model folder's ``modules.json`` (mean or CLS; the
transformer output is pooled and normalised by ``searchsmith.kernels.pool_normalize``,
Triton on CUDA, torch on CPU).

``packed: true`` runs BERT-family models padding-free (``models/packed.py``): each batch's
sequences are concatenated with ``cu_seqlens``, attention runs per sequence (FlashAttention
varlen on CUDA), and ``max_batch_tokens`` then counts real tokens only.

``tokenize_workers`` takes host work off the model's critical path: while window w's batches
run, a small thread pool tokenizes window w+1 (fast tokenizers release the GIL), and while
batch i runs, it assembles batch i+1's tensors; on CUDA it also copies them to the device
from pinned memory with ``non_blocking=True`` on a side stream that the compute stream waits
for. The batches, their order and the vectors are those of the inline loop (0 workers), bit
for bit; an error of window w+1 is raised where the inline loop would raise it, after window
w is yielded. Batches are formed from a whole window's token lengths, so a window's own
tokenization cannot overlap its batches: a call of up to ``window_texts`` texts (each slice of
an index build) gains the per-batch assembly and copy only; a longer stream (``encode_iter``,
``encode_to_file``) also tokenizes each next window in the background. The server's
``EmbeddingRunner`` calls ``embed_ids`` batch by batch and is not affected.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar, Unpack, get_args

import numpy as np
from searchsmith.models.batching import pack_batches
from searchsmith.models.config import is_int, is_number
from searchsmith.models.encode_options import EncodeKeywords, encode_options
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import model_display_name, read_st_layout, resolve_model
from searchsmith.models.jsonl import check_unicode

if TYPE_CHECKING:
    import torch
    from searchsmith.models.packed import PackedBatch

log = logging.getLogger(__name__)

# Threads of the tokenize / prefetch pool are named with this prefix (tests look for leftovers).
PREFETCH_THREAD_PREFIX = "searchsmith-tokenize"

_T = TypeVar("_T")
_R = TypeVar("_R")

# The devices the embedder runs on (EmbedderConfig.device): torch names more device types, but
# the embedder sets its dtype and batch budget for CUDA and otherwise uses the CPU's, which suit
# mps (Apple silicon) and were never tried on the others.
DEVICES = "auto, cpu, cuda, cuda:N (N: a GPU index, from 0) or mps"
_DEVICE_RE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


EmbedDtype = Literal["auto", "fp32", "fp16", "bf16"]


@dataclass(frozen=True)
class EmbedderConfig:
    """Settings of the embedder (YAML key = argument name).

    Attributes:
        model: ``default`` (bundled all-MiniLM-L6-v2), a local folder or a hub id.
        max_batch_tokens: padded tokens per batch (batch size x longest sequence); None =
            2048 on a CPU (``searchsmith profile embed`` on 2 cores: 96 texts/s at 2048 vs 66
            at 16384, smaller batches stay in cache) and 16384 on CUDA.
        max_batch_size: texts per batch, whatever their length.
        max_seq_length: tokens per text before truncation; None = the model's own limit.
        window_texts: texts tokenized and length-sorted together; bounds host memory.
        dtype: ``auto`` = fp16 on CUDA, fp32 on CPU.
        device: ``auto`` = CUDA when available, else the CPU; or ``cpu``, ``cuda`` (the current
            GPU), ``cuda:N`` (GPU N) or ``mps`` (Apple silicon). One this machine's torch cannot
            use (no GPU, no GPU N) is refused before any work.
        max_text_chars: texts longer than this are cut before tokenization (a 10 MB
            string would otherwise cost seconds of tokenizer time for nothing: only the
            first ``max_seq_length`` tokens are embedded anyway).
        min_padding_efficiency: a batch is closed before its real tokens fall below this
            share of its padded tokens (padding is computed, then thrown away).
        packed: run BERT / RoBERTa models padding-free (sequences concatenated, per-sequence
            attention: FlashAttention varlen on CUDA fp16/bf16, a loop over sequences on the
            CPU; other models fall back to the padded path with a log line); batches are then
            filled up to ``max_batch_tokens`` real tokens. Vectors match the padded path to
            cosine >= 0.99999 in fp32 (tests/models/test_packed_encoder.py). CPU (2 shared
            cores, 256 mixed demo texts, fp32, ``profiling.embed.packed_vs_padded``, two
            runs): 1.18x the padded path's texts/s. Off by default until the CUDA path is
            measured on the H200 (``searchsmith profile embed`` reports it there).
        tokenize_workers: threads that prepare work ahead of the model (module docstring):
            tokenize the next window, assemble the next batch's tensors and, on CUDA, copy
            them to the device (pinned memory, ``non_blocking``, side stream) while the
            current batch runs. 0 = all inline, as before; vectors are identical either way.
            None = 2 on CUDA (one thread tokenizes the next window while the other stages the
            next batch; more gain nothing, as calls of one tokenizer are serialised by its lock
            and a fast tokenizer already spreads a window over the cores) and 0 on a CPU, where
            the threads would compete with the model for the same cores for little: 256 mixed
            demo texts took 25 ms to tokenize and 2 ms to stage against seconds of model time
            on 2 cores, and prefetch ran 0.87x and 1.02x the inline loop's texts/s there (two
            runs on a loaded machine; serving/profiling/RESULTS.md).
    """

    model: str = "default"
    max_batch_tokens: int | None = None
    max_batch_size: int = 256
    max_seq_length: int | None = None
    window_texts: int = 8192
    dtype: EmbedDtype = "auto"
    device: str = "auto"
    max_text_chars: int = 20000
    min_padding_efficiency: float = 0.75
    packed: bool = False
    tokenize_workers: int | None = None

    def __post_init__(self) -> None:
        # types first: EmbedderConfig(max_batch_size="8") was a raw TypeError from "<", and
        # 1.5, packed="yes" or model=None were taken (a YAML config is typed by from_dict)
        for name in ("max_batch_tokens", "max_batch_size", "max_seq_length", "window_texts", "max_text_chars",
                     "tokenize_workers"):
            value = getattr(self, name)
            if value is not None and not is_int(value):
                raise ValueError(f"embedder.{name} must be an int, got {value!r:.40}")
        if not is_number(self.min_padding_efficiency):
            raise ValueError(f"embedder.min_padding_efficiency must be a number in [0, 1], got "
                             f"{self.min_padding_efficiency!r:.40}")
        if not isinstance(self.packed, bool):
            raise ValueError(f"embedder.packed must be true or false, got {self.packed!r:.40}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"embedder.model must be 'default', a local folder or a hub id, got {self.model!r:.60}")
        if self.dtype not in get_args(EmbedDtype):  # "fp64" loaded silently in fp32
            raise ValueError(f"embedder.dtype must be one of {list(get_args(EmbedDtype))}, got {self.dtype!r:.40}")
        if not 0.0 <= self.min_padding_efficiency <= 1.0:
            raise ValueError(f"embedder.min_padding_efficiency must be in [0, 1], got {self.min_padding_efficiency}")
        if self.tokenize_workers is not None and not 0 <= self.tokenize_workers <= 16:
            raise ValueError(f"embedder.tokenize_workers must be in 0..16 (0 = tokenize inline, None = auto), "
                             f"got {self.tokenize_workers}")
        for name in ("max_batch_tokens", "max_batch_size", "window_texts", "max_text_chars"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"embedder.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_seq_length is not None and self.max_seq_length < 2:
            raise ValueError(f"embedder.max_seq_length must be >= 2, got {self.max_seq_length}")
        if not isinstance(self.device, str) or not _DEVICE_RE.fullmatch(self.device):
            raise ValueError(f"embedder.device must be {DEVICES}, got {self.device!r}")


def check_device(device: str, field: str = "embedder.device") -> None:
    """Refuse a ``device`` this torch cannot run on, before a model is loaded: ``cuda`` or
    ``cuda:N`` without that GPU (torch raised ``AssertionError: Torch not compiled with CUDA
    enabled`` from deep inside ``model.to``), ``mps`` without Apple silicon. ``auto`` and
    ``cpu`` always pass. Imports torch.

    Raises:
        ConfigError: naming ``field``, the value, the GPUs torch sees and the fix.
    """
    if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device):
        raise ConfigError(f"{field} must be {DEVICES}, got {device!r}")
    if device in ("auto", "cpu"):
        return
    import torch

    fix = f"set {field} to auto (CUDA when available) or cpu"
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"{field}: 'mps' needs Apple silicon with an MPS-enabled torch, which this machine "
                              f"does not have; {fix}")
        return
    # is_available(), not device_count() alone: a GPU this torch cannot use (its driver too old)
    # is counted, and then fails in model.to
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        build = "" if torch.version.cuda else f" (torch {torch.__version__} is built without CUDA)"
        raise ConfigError(f"{field}: {device!r} needs a CUDA GPU, but torch sees no CUDA device{build}; {fix}")
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= n:
        seen = "1 CUDA device (cuda:0)" if n == 1 else f"{n} CUDA devices (cuda:0 to cuda:{n - 1})"
        raise ConfigError(f"{field}: {device!r} names GPU {index}, but torch sees {seen}; use one of those, "
                          "or auto")


def map_ahead(fn: Callable[[_T], _R], items: Iterable[_T], pool: Executor | None) -> Iterator[_R]:
    """``fn(item)`` for each item, in order; with a pool, ``fn`` of the next item runs there
    while the caller works on the current result (one item ahead).

    An exception of ``fn``, or of reading ``items``, for item i+1 is raised when the caller
    asks for result i+1, as plain ``map`` raises it, never while it still holds result i.
    ``items`` is read on the caller's thread. Without a pool this is plain ``map``.
    """
    if pool is None:
        yield from map(fn, items)
        return
    it = iter(items)

    def submit_next() -> Future[_R] | None:
        try:
            item = next(it)
        except StopIteration:
            return None
        except Exception as exc:  # noqa: BLE001 - kept for the caller, raised in order below
            failed: Future[_R] = Future()
            failed.set_exception(exc)
            return failed
        return pool.submit(fn, item)

    pending = submit_next()
    try:
        while pending is not None:
            result = pending.result()  # re-raises fn's exception, as the inline call would
            pending = submit_next()
            yield result
    finally:  # the caller stopped early: drop the work queued for it
        if pending is not None:
            pending.cancel()


def _windows(texts: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """``(offset, texts)`` windows of up to ``size`` texts; offset = index of the first one."""
    it = iter(texts)
    offset = 0
    while window := list(itertools.islice(it, size)):
        yield offset, window
        offset += len(window)


@dataclass(frozen=True)
class _StagedBatch:
    """One batch's model inputs, assembled (and on CUDA copied) before its forward pass.

    Attributes:
        inputs: padded ``input_ids`` and ``attention_mask`` (b, T) int64, or a ``PackedBatch``.
        ready: CUDA event recorded on ``Embedder.copy_stream`` after the inputs' copy; None
            when they are host tensors (the forward pass copies them, blocking, as inline).
    """

    inputs: dict[str, torch.Tensor] | PackedBatch
    ready: torch.cuda.Event | None = None


class Embedder:
    """Batched, length-sorted sentence embedding.

    Example::

        emb = Embedder()                       # bundled all-MiniLM-L6-v2, CPU or CUDA
        vecs = emb.encode(["a question", "a passage"])   # (2, 384) float32, unit norm
    """

    def __init__(self, config: EmbedderConfig | str | None = None) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if config is None:
            config = EmbedderConfig()
        elif isinstance(config, str):
            config = EmbedderConfig(model=config)
        self.config = config
        check_device(config.device)  # before the model is read: a missing GPU is a ConfigError
        path = Path(resolve_model(config.model, field="embedder.model"))
        if not path.is_dir():  # an online hub id: fetch a local snapshot once
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(str(path)))
        self.model_path = path
        self.model_name = model_display_name(config.model)
        self.pooling, st_max_len = read_st_layout(path)
        if config.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(config.device)
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(config.dtype)
        if dtype is None:  # auto
            dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        if dtype != torch.float32 and self.device.type == "cpu":
            raise ConfigError(f"embedder.dtype {config.dtype!r} needs a CUDA device; use fp32 on CPU")
        self.dtype = dtype
        self.max_batch_tokens = config.max_batch_tokens or (16384 if self.device.type == "cuda" else 2048)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModel.from_pretrained(str(path), dtype=dtype)
        self.model = model.to(self.device).eval()
        model_max = getattr(model.config, "max_position_embeddings", 512)
        self.max_seq_length = min(config.max_seq_length or st_max_len or model_max, model_max)
        self.dim = int(model.config.hidden_size)
        self._accepts_token_types = "token_type_ids" in self.model.forward.__code__.co_varnames
        self.packed = False  # True when batches run padding-free (config.packed and a supported model)
        if config.packed:
            from searchsmith.models.packed import max_packed_length, packing_support

            reason = packing_support(self.model)
            if reason is None:
                self.packed = True
                self.max_seq_length = min(self.max_seq_length, max_packed_length(self.model))
            else:
                log.info("embedder.packed: %s; using the padded path", reason)
        workers = config.tokenize_workers
        self.tokenize_workers = (2 if self.device.type == "cuda" else 0) if workers is None else workers
        # Batches staged ahead are copied to the GPU on this stream (None: no asynchronous copy;
        # host tensors go to the device in the forward pass, blocking, as on the inline path).
        self.copy_stream = (torch.cuda.Stream(device=self.device)
                            if self.device.type == "cuda" and self.tokenize_workers else None)
        self.last_stats: dict[str, float] = {}

    # -- tokens ---------------------------------------------------------------------------
    def _clean(self, texts: Sequence[str], offset: int = 0) -> list[str]:
        out = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValidationError(
                    f"embed: text {offset + i} is {type(t).__name__}, expected a string"
                )
            check_unicode(t, f"embed: text {offset + i}")
            out.append(t[: self.config.max_text_chars])
        return out

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to ``max_seq_length`` (special tokens included)."""
        from searchsmith.models.tokenizer import tokenizer_lock

        with tokenizer_lock(self.tokenizer):  # request threads tokenize with other settings at once
            enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length,
                                 padding=False, return_attention_mask=False,
                                 return_token_type_ids=False)
        return enc["input_ids"]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Untruncated token counts (without special tokens), for chunking decisions."""
        from searchsmith.models.tokenizer import tokenizer_lock

        with tokenizer_lock(self.tokenizer):
            enc = self.tokenizer(list(texts), add_special_tokens=False, truncation=False,
                                 return_attention_mask=False, return_token_type_ids=False)
        return [len(ids) for ids in enc["input_ids"]]

    # -- embedding ------------------------------------------------------------------------
    def embed_ids(self, ids: list[list[int]]) -> torch.Tensor:
        """One batch of token ids -> (b, D) float32 unit vectors (torch, on CPU).

        Padded (one (b, T) batch), or packed when ``self.packed`` (``embed_ids_packed``).
        """
        return self._forward(self._stage(ids, packed=self.packed))

    def embed_ids_packed(self, ids: list[list[int]]) -> torch.Tensor:
        """One batch of token ids, padding-free -> (b, D) float32 unit vectors (torch, on CPU)."""
        return self._forward(self._stage(ids, packed=True))

    def embed_ids_padded(self, ids: list[list[int]]) -> torch.Tensor:
        """One padded batch of token ids -> (b, D) float32 unit vectors (torch, on CPU)."""
        return self._forward(self._stage(ids, packed=False))

    def _stage(self, ids: list[list[int]], *, packed: bool, ahead: bool = False) -> _StagedBatch:
        """Assemble one batch's model inputs on the host; ``ahead`` on CUDA (a prefetch worker):
        also copy them to the device from pinned memory on ``copy_stream``, asynchronously."""
        import torch

        inputs: dict[str, torch.Tensor] | PackedBatch
        if packed:
            from searchsmith.models.packed import (
                check_packable,
                max_packed_length,
                pack_sequences,
                position_offset,
            )

            check_packable(self.model)
            inputs = pack_sequences(ids, max_length=max_packed_length(self.model),
                                    limit_name="max_position_embeddings", position_offset=position_offset(self.model))
        else:
            width = max(len(x) for x in ids)
            pad = self.tokenizer.pad_token_id or 0
            input_ids = torch.full((len(ids), width), pad, dtype=torch.long)  # (b, T)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            for r, row in enumerate(ids):
                input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
                mask[r, : len(row)] = 1
            inputs = {"input_ids": input_ids, "attention_mask": mask}
        if not ahead or self.copy_stream is None:
            return _StagedBatch(inputs)
        # Pinned (page-locked) memory lets the copy run as DMA while the current batch computes;
        # it is issued on a side stream so it does not queue behind that batch's kernels.
        with torch.cuda.stream(self.copy_stream):
            if isinstance(inputs, dict):
                inputs = {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in inputs.items()}
            else:
                inputs = inputs.pin_memory().to(self.device, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self.copy_stream)
        return _StagedBatch(inputs, ready)

    def _forward(self, staged: _StagedBatch) -> torch.Tensor:
        """Run one staged batch -> (b, D) float32 unit vectors (torch, on CPU)."""
        import torch
        from searchsmith.kernels import pool_normalize

        inputs = staged.inputs
        if staged.ready is not None:  # copied ahead on the side stream
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(staged.ready)
            # the copies' memory belongs to the copy stream: keep the allocator from reusing it
            # there before this stream's kernels are done with it
            for t in (inputs.values() if isinstance(inputs, dict) else inputs.tensors):
                t.record_stream(stream)
        if not isinstance(inputs, dict):
            from searchsmith.models.packed import embed_packed_batch

            return embed_packed_batch(self.model, inputs.to(self.device), pooling=self.pooling).float().cpu()  # (b, D)
        input_ids, mask = inputs["input_ids"].to(self.device), inputs["attention_mask"].to(self.device)
        kwargs = {"input_ids": input_ids, "attention_mask": mask}
        if self._accepts_token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        hidden = self.model(**kwargs).last_hidden_state  # (b, T, D)
        if self.pooling == "cls":
            cls_mask = torch.zeros_like(mask)
            cls_mask[:, 0] = 1
            mask = cls_mask
        return pool_normalize(hidden, mask).float().cpu()  # (b, D)

    def _tokenize_window(self, window: tuple[int, list[str]]) -> list[list[int]]:
        """Check, cut and tokenize one window of texts (``offset``, texts); runs in the pool."""
        offset, texts = window
        return self.tokenize(self._clean(texts, offset))

    def _batches(self, lengths: list[int], max_batch_size: int | None = None) -> list[list[int]]:
        """Index batches of one window: real-token budget when packed, padded budget otherwise;
        at most ``max_batch_size`` texts each (default: ``config.max_batch_size``)."""
        cap = max_batch_size or self.config.max_batch_size
        if self.packed:
            from searchsmith.models.packed import token_batches

            return token_batches(lengths, self.max_batch_tokens, cap)
        return pack_batches(lengths, self.max_batch_tokens, cap, self.config.min_padding_efficiency)

    def encode_iter(self, texts: Iterable[str], *, show_progress: bool | None = None,
                    total: int | None = None, batch_size: int | None = None) -> Iterator[np.ndarray]:
        """Embed a stream of texts; yields (w, D) float32 arrays, one per window, in order.

        With ``tokenize_workers``, the next window is read from ``texts`` (and tokenized) before
        this one is yielded: host memory holds two windows of texts and ids, not one.
        ``batch_size`` caps the texts per model call (default: ``config.max_batch_size``).
        """
        import torch
        from searchsmith.models.console import progress

        cfg = self.config
        if show_progress is None:  # long runs only; progress() also hides it off a terminal
            show_progress = bool(total and total > 4 * cfg.window_texts)
        bar = progress(total=total, desc="embed", unit="text", enabled=show_progress)
        stats = {"texts": 0, "batches": 0, "tokens": 0, "padded_tokens": 0, "truncated": 0}
        pool = (ThreadPoolExecutor(self.tokenize_workers, thread_name_prefix=PREFETCH_THREAD_PREFIX)
                if self.tokenize_workers else None)
        try:
            with torch.inference_mode():
                # the next window is tokenized in the pool while this one's batches run
                for ids in map_ahead(self._tokenize_window, _windows(texts, cfg.window_texts), pool):
                    lengths = [len(x) for x in ids]
                    stats["truncated"] += sum(1 for n in lengths if n >= self.max_seq_length)
                    out = np.empty((len(ids), self.dim), dtype=np.float32)
                    batches = self._batches(lengths, batch_size)
                    staged = map_ahead(lambda b, ids=ids: self._stage([ids[i] for i in b], packed=self.packed,
                                                                     ahead=pool is not None), batches, pool)
                    for batch, inputs in zip(batches, staged, strict=True):
                        vecs = self._forward(inputs)
                        out[batch] = vecs.numpy()
                        stats["batches"] += 1
                        stats["tokens"] += sum(lengths[i] for i in batch)
                        # positions fed to the model: a packed batch has no padding
                        stats["padded_tokens"] += (sum(lengths[i] for i in batch) if self.packed
                                                   else len(batch) * max(lengths[i] for i in batch))
                        bar.update(len(batch))
                    stats["texts"] += len(ids)
                    yield out
        finally:  # also on an error or an abandoned stream: no worker outlives the call
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        stats["padding_efficiency"] = stats["tokens"] / max(stats["padded_tokens"], 1)
        self.last_stats = stats

    def encode(self, texts: Sequence[str], *, show_progress: bool | None = None,
               **st_keywords: Unpack[EncodeKeywords]) -> np.ndarray:
        """Embed ``texts`` -> (N, D) float32, L2-normalised rows, in input order.

        Takes sentence-transformers' ``encode`` keywords too (``prompt``, ``batch_size``,
        ``show_progress_bar``, ``convert_to_tensor``, ``convert_to_numpy``,
        ``normalize_embeddings=True``, ``precision="float32"``, ``truncate_dim``;
        :mod:`searchsmith.models.encode_options`).

        Raises:
            ValidationError: ``texts`` is a bare string or holds a non-string; a keyword this
                embedder cannot honour.
        """
        opts = encode_options(dim=self.dim, **st_keywords)
        if isinstance(texts, str):
            raise ValidationError("embed: expected a list of strings, got one string (wrap it in a list)")
        if isinstance(texts, (bytes, dict)) or not isinstance(texts, Iterable):
            raise ValidationError(f"embed: expected a list of strings, got {type(texts).__name__}")
        texts = opts.texts(list(texts))
        if not texts:
            return opts.finish(np.zeros((0, self.dim), dtype=np.float32))
        shown = show_progress if opts.show_progress is None else opts.show_progress
        parts = list(self.encode_iter(texts, show_progress=shown, total=len(texts), batch_size=opts.batch_size))
        return opts.finish(np.concatenate(parts, axis=0))

    def encode_to_file(self, texts: Iterable[str], path: str | os.PathLike, count: int, *,
                       overwrite: bool = False) -> Path:
        """Stream ``count`` texts into a ``.npy`` file of shape (count, D), window by window.

        The file is written under a temporary name and renamed when complete; on any failure the
        temporary file is removed and ``path`` is left as it was.

        Args:
            overwrite: replace a file already at ``path`` (without it, an existing file is refused:
                it may be the user's own).

        Raises:
            ValidationError: ``count`` is not an int >= 0, ``path`` is a folder or an existing file
                without ``overwrite``, or the texts are not ``count``.
        """
        if not is_int(count, 0):
            raise ValidationError(f"encode_to_file: count must be an int >= 0 (the number of texts), got {count!r:.40}")
        path = Path(path)
        if path.is_dir():
            raise ValidationError(f"encode_to_file: {path} is a folder; give the path of a .npy file")
        if (path.exists() or path.is_symlink()) and not overwrite:
            raise ValidationError(f"encode_to_file: {path} already exists; choose a new path, or pass "
                                  "overwrite=True to replace it")
        tmp = path.with_name(path.name + ".tmp.npy")
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(int(count), self.dim))
        try:
            row = 0
            for part in self.encode_iter(texts, total=int(count)):
                if row + len(part) > count:
                    raise ValidationError(f"embed: got more than count={count} texts")
                arr[row: row + len(part)] = part
                row += len(part)
            if row != count:
                raise ValidationError(f"embed: expected count={count} texts, got {row}")
            arr.flush()
        except BaseException:
            del arr
            tmp.unlink(missing_ok=True)
            raise
        del arr
        os.replace(tmp, path)
        return path
