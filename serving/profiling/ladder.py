"""``searchsmith profile ladder``: embedder throughput from 1 text to 1e6, by text length.

A throughput ladder (issue 21, item 5): for text counts 1, 10, 100, ... 1e6 (on a CPU:
1 ... 1e3; ``SEARCHSMITH_PROFILE_TINY=1``: 1, 8, 32) and three length regimes

- ``short``: 9 consecutive words of the demo corpus (about 16 tokens with [CLS] / [SEP]),
- ``mixed``: ``embed.mixed_texts`` (documents, sentences and titles of the demo corpus),
- ``long``: 150 to 300 consecutive words of the demo corpus (about 256 to 512 tokens; the
  corpus runs about 1.6 WordPiece tokens a word),

it times, on the same texts and weights, interleaved, best of 1-3 rounds:

- ``searchsmith``: the embedder as configured by default on the device,
- ``searchsmith-packed``: ``EmbedderConfig(packed=True)`` (CUDA only, and only when the model
  can run packed),
- ``searchsmith-padded``: ``EmbedderConfig(packed=False)``; while the default is the padded
  path this is the same configuration, so its rows repeat the ``searchsmith`` figures with
  ``"same_as": "searchsmith"`` instead of being timed twice,
- ``sentence-transformers``: ``SentenceTransformer.encode`` at the best of its batch sizes
  (32 / 128 / 512 on CUDA, 32 on a CPU); the row names the batch size and lists all tried.

Every row has ``texts_per_s``, the token fields of ``common.TokenCount`` (real tokens, not
padding; ``padding_fraction`` from the batches that system forms), ``flops_per_s`` (useful
FLOPs on the real tokens, :func:`encoder_flops`) and ``matrix_rate_fraction``: that over the
device's dense bf16 matrix rate (:data:`PEAK_BF16_DENSE_FLOPS`; null on a CPU or a GPU not in
the table). All systems cut texts at :data:`MAX_SEQ_LENGTH` tokens so the long regime is
embedded whole.

The ladder is capped so the GPU group stays near 5 minutes on an H200: a point whose call is
predicted (the previous count's time scaled by the count) to take over :data:`POINT_BUDGET_S`,
or that would start after :data:`REGIME_BUDGET_S` spent on its regime, is not run; a
``skipped`` row says which and why. So on an H200 the ladder takes about 3 x 30 s plus model
loading, and the top counts (1e6 texts; 1e5 long ones) are reached only if that fast. ``ladder.png``: tokens/s against the count, per regime and system.

Under ``SEARCHSMITH_PROFILE_TINY=1`` the model is a one-layer random BERT (hidden size 32)
with the default model's tokenizer, so the test runs in seconds; tokens are still real.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from searchsmith.serving.profiling.common import (
    ProfileContext,
    save_plot,
    sentence_transformers_count,
)
from searchsmith.serving.profiling.embed import embedder_count, mixed_texts
from searchsmith.serving.profiling.timing import interleave, resolve_device

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# NVIDIA H200 (SXM) datasheet, https://www.nvidia.com/en-us/data-center/h200/: "BF16 Tensor
# Core 1,979 TFLOPS" with sparsity; dense is half of it. FP16 has the same rate.
H200_BF16_DENSE_FLOPS = 989e12
# Dense bf16 tensor-core FLOP/s by a substring of ``torch.cuda.get_device_name()``, checked in
# order (the first match wins, so a more specific name comes first). Devices not listed: null.
PEAK_BF16_DENSE_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", H200_BF16_DENSE_FLOPS),
)

COUNTS_GPU = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
COUNTS_CPU = (1, 10, 100, 1_000)
COUNTS_TINY = (1, 8, 32)
REGIMES = ("short", "mixed", "long")
# The long regime is 256-512 tokens; all-MiniLM-L6-v2's card says 256 but its positions go to
# 512. Every system (both embedders and SentenceTransformer) cuts at this length.
MAX_SEQ_LENGTH = 512
POINT_BUDGET_S = 2.0  # the most one timed call of one system may be predicted to take
REGIME_BUDGET_S = 30.0  # no point of a regime starts after this long on it (token counting included)
ROUNDS_UNDER_S = 0.25  # a call predicted shorter than this is timed 3 times (best kept), else once


# -- FLOPs and the matrix rate --------------------------------------------------------------
def encoder_flops(config: PretrainedConfig, lengths: Sequence[int]) -> float | None:
    """Useful forward FLOPs of a BERT-style encoder over texts of ``lengths`` real tokens.

    Per token and layer (L layers, hidden size H, feed-forward size I, a text of T tokens;
    one multiply-add = 2 FLOPs)::

        2 * (4 H^2 + 2 H I)   the Q, K, V and output projections and the two FFN matmuls
      + 4 T H                 Q K^T and attention x V over the text's own T tokens

    so a text costs ``L * (T * (8 H^2 + 4 H I) + 4 H T^2)``. The first term is 2 x the
    non-embedding parameters per token; embeddings, layer norms, softmax, pooling and padding
    are not counted (padding is work thrown away, not useful work).

    Returns:
        FLOPs, or None when ``config`` lacks ``num_hidden_layers`` / ``hidden_size`` /
        ``intermediate_size`` (not a BERT-style config).
    """
    try:
        layers, h, inter = int(config.num_hidden_layers), int(config.hidden_size), int(config.intermediate_size)
    except (AttributeError, TypeError):
        return None
    t = np.asarray(lengths, dtype=np.float64)
    return float(layers * (t.sum() * (8 * h * h + 4 * h * inter) + 4 * h * np.square(t).sum()))


def peak_matrix_flops(device_name: str | None) -> float | None:
    """Dense bf16 FLOP/s of ``device_name`` from :data:`PEAK_BF16_DENSE_FLOPS`; None if unknown."""
    if not device_name:
        return None
    return next((peak for key, peak in PEAK_BF16_DENSE_FLOPS if key in device_name), None)


def matrix_rate_fraction(flops: float | None, seconds: float, device_name: str | None) -> float | None:
    """``flops / seconds`` as a share of the device's dense bf16 matrix rate (None if unknown)."""
    peak = peak_matrix_flops(device_name)
    if peak is None or flops is None or seconds <= 0:
        return None
    return flops / seconds / peak


# -- texts ---------------------------------------------------------------------------------
def regime_texts(regime: str, n: int, seed: int = 0) -> list[str]:
    """``n`` texts of one length regime (module docstring); the first k of n are those of k."""
    if regime == "mixed":
        return mixed_texts(n, seed)
    from searchsmith.models.demo import corpus_path
    from searchsmith.models.jsonl import read_jsonl

    words = " ".join(d["text"] for d in read_jsonl(corpus_path(), what="demo corpus")).split()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        size = 9 if regime == "short" else rng.randint(150, 300)
        start = rng.randrange(len(words) - size)
        out.append(" ".join(words[start:start + size]))
    return out


# -- the ladder ----------------------------------------------------------------------------
def _tiny_model(folder: Path) -> str:
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoModel, AutoTokenizer, BertConfig

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    AutoModel.from_config(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def _draw(rows: list[dict[str, object]]) -> Callable[[object, object], None]:
    systems = sorted({str(r["impl"]) for r in rows})
    colours = {s: f"C{i}" for i, s in enumerate(systems)}
    styles = {"short": ":", "mixed": "-", "long": "--"}

    def draw(fig, ax) -> None:
        for regime in REGIMES:
            for system in systems:
                pts = sorted((int(r["count"]), float(r["tokens_per_s"])) for r in rows
                             if r["regime"] == regime and r["impl"] == system)
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, marker="o", linestyle=styles[regime], color=colours[system],
                            label=f"{system}, {regime}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("texts per call")
        ax.set_ylabel("tokens / s (real tokens)")
        ax.legend(fontsize=7, ncol=2)

    return draw


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    device = resolve_device("ladder", ctx.device)  # before any model is loaded
    import torch
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from sentence_transformers import SentenceTransformer

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    counts = COUNTS_TINY if tiny else COUNTS_GPU if device == "cuda" else COUNTS_CPU
    batch_sizes = (32, 128, 512) if device == "cuda" and not tiny else (32,)
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else None
    with tempfile.TemporaryDirectory(prefix="searchsmith-ladder-") as work:
        model = _tiny_model(Path(work) / "m") if tiny else "default"
        base = EmbedderConfig(model=model, device=device, max_seq_length=MAX_SEQ_LENGTH)
        ours = Embedder(base)
        # the systems: the default, packed (CUDA, packable models), padded, SentenceTransformer
        embedders = {"searchsmith": ours}
        if device == "cuda":
            packed = Embedder(dataclasses.replace(base, packed=True))
            if packed.packed:
                embedders["searchsmith-packed"] = packed
        padded_cfg = dataclasses.replace(base, packed=False)
        same_as_default = padded_cfg == base
        if not same_as_default:
            embedders["searchsmith-padded"] = Embedder(padded_cfg)
        for emb in embedders.values():  # same weights: only the path differs
            emb.model, emb.tokenizer = ours.model, ours.tokenizer
        st = SentenceTransformer(str(ours.model_path), device=device)
        if device == "cuda":
            st = st.half()
        st.max_seq_length = ours.max_seq_length
        fns: dict[str, Callable[[list[str]], object]] = {k: e.encode for k, e in embedders.items()}
        for bs in batch_sizes:
            fns[f"st-b{bs}"] = lambda t, bs=bs: st.encode(t, batch_size=bs, normalize_embeddings=True)
        workload = {"device": device, "device_name": device_name, "dtype": str(ours.dtype).replace("torch.", ""),
                    "model": "tiny random BERT (SEARCHSMITH_PROFILE_TINY)" if tiny else ours.model_name,
                    "max_seq_length": ours.max_seq_length,
                    "peak_bf16_dense_flops": peak_matrix_flops(device_name)}
        rows = _ladder(ctx, fns, embedders, st, counts, batch_sizes, workload, same_as_default)
    save_plot(ctx.out_dir / "ladder.png", _draw([r for r in rows if not r.get("same_as")]),
              f"Embedding throughput ladder ({device}, {workload['model']})")


def _ladder(ctx: ProfileContext, fns: dict[str, Callable[[list[str]], object]], embedders: dict,
            st: object, counts: Sequence[int], batch_sizes: Sequence[int], workload: dict[str, object],
            same_as_default: bool) -> list[dict[str, object]]:
    """Time every system at every (regime, count) within the budgets; emit and return the rows."""
    config = embedders["searchsmith"].model.config
    rows: list[dict[str, object]] = []
    for regime in REGIMES:
        start = time.perf_counter()
        for fn in fns.values():  # warm-up: kernels, allocator, tokenizer caches
            fn(regime_texts(regime, min(8, max(counts))))
        last: dict[str, tuple[int, float]] = {}  # system -> (count, best seconds) of its last point
        for count in counts:
            active, predicted = [], {}
            for name in fns:
                prev = last.get(name)
                predicted[name] = 0.0 if prev is None else prev[1] * count / prev[0]
                why = None
                if time.perf_counter() - start > REGIME_BUDGET_S:
                    why = f"the {regime} regime has used its {REGIME_BUDGET_S:g} s (ladder.REGIME_BUDGET_S)"
                elif prev is None and count != counts[0]:
                    why = "a smaller count was not run"
                elif predicted[name] > POINT_BUDGET_S:
                    why = (f"predicted {predicted[name]:.2g} s per call > {POINT_BUDGET_S:g} s "
                           "(ladder.POINT_BUDGET_S)")
                if why:
                    impl = "sentence-transformers" if name.startswith("st-b") else name
                    extra = {"batch_size": int(name[4:])} if name.startswith("st-b") else {}
                    ctx.emit({"suite": "ladder", "impl": impl, **extra, "regime": regime, "count": count,
                              "skipped": why})
                else:
                    active.append(name)
            if not active:
                continue
            texts = regime_texts(regime, count)
            rounds = 3 if max(predicted[k] for k in active) < ROUNDS_UNDER_S else 1
            # interleaved: drift on a shared machine hits every system alike (warmed up per regime)
            timed = interleave({name: fns[name] for name in active}, rounds, warmup=0, inputs=[(texts,)] * rounds)
            best = timed.best()
            stats = {name: embedders[name].last_stats for name in active if name in embedders}
            for name in active:
                last[name] = (count, best[name])
            lengths = [len(ids) for ids in embedders["searchsmith"].tokenize(texts)]  # as embedded
            flops = encoder_flops(config, lengths)
            point = {"suite": "ladder", "regime": regime, "count": count, "rounds": rounds,
                     "tokens_p50": int(np.median(lengths)), "tokens_max": int(max(lengths)),
                     "useful_flops": flops, **workload}
            measured = {}
            for name in (k for k in active if k in embedders):
                measured[name] = {"impl": name, "path": "packed" if embedders[name].packed else "padded",
                                  "seconds": best[name], **embedder_count(stats[name]).fields(best[name])}
            st_times = {bs: best[f"st-b{bs}"] for bs in batch_sizes if f"st-b{bs}" in active}
            if st_times:
                bs = min(st_times, key=st_times.get)
                measured["sentence-transformers"] = {
                    "impl": "sentence-transformers", "batch_size": bs,
                    "texts_per_s_by_batch_size": {str(b): count / s for b, s in st_times.items()},
                    **sentence_transformers_count(st, texts, bs).fields(st_times[bs])}
            if same_as_default and "searchsmith" in measured:
                measured["searchsmith-padded"] = {**measured["searchsmith"], "impl": "searchsmith-padded",
                                                  "same_as": "searchsmith"}
            st_s = measured.get("sentence-transformers", {}).get("seconds")
            for m in measured.values():
                s = float(m["seconds"])
                row = {**point, **m, "texts_per_s": count / s,
                       "flops_per_s": None if flops is None else flops / s,
                       "matrix_rate_fraction": matrix_rate_fraction(flops, s, workload["device_name"])}
                if st_s is not None and m["impl"] != "sentence-transformers":
                    row["ratio_vs_st_best"] = st_s / s
                rows.append(ctx.emit(row))
    return rows
