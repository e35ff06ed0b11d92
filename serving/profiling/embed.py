"""``searchsmith profile embed``: the embedder against ``SentenceTransformer.encode``.

Same texts (mixed lengths: the demo corpus's documents and short queries, shuffled), same
model, same device, one run. Reports texts/s of both, their ratio, the cosine agreement of
the vectors, and throughput against batch size for both (PNG).

Every row also has ``tokens`` (real tokens: each text as the system tokenizes and truncates
it, [CLS]/[SEP] included), ``tokens_per_s`` (over the row's ``seconds``) and
``padding_fraction`` (the share of the positions fed to the model that are padding, from the
batches that system forms: searchsmith's own count of its length-packed batches,
sentence-transformers' sort-by-length-then-cut-every-batch_size, the bundles' packing).

On CUDA, ``packed_vs_padded`` adds the padding-free embedder (``embedder.packed``: sequences
concatenated with cu_seqlens, varlen attention) against the padded fp16 one on the same
texts and weights: a row for each (``searchsmith-padded`` / ``searchsmith-packed``, with the
token fields) and a ``comparison: packed_vs_padded`` row with both texts/s and tokens/s, their
ratio and the min cosine between the two (and against ``SentenceTransformer.encode``).

``prefetch_vs_inline`` (every device) runs the embedder with ``tokenize_workers`` (the next
window tokenized and the next batch staged, on CUDA copied from pinned memory, while the current
one runs) against the inline loop on the same texts and weights, in windows of a quarter of the
texts so that three of the four windows' tokenization can overlap: a row for each
(``searchsmith-prefetch`` / ``searchsmith-inline``, with the token fields) and a ``comparison:
prefetch_vs_inline`` row with both texts/s and tokens/s, their ratio and whether the vectors are
identical.

``--backend onnx``: the exported embedder bundles (int8 and fp32, ONNX Runtime on the CPU,
pooling and normalisation inside the graph) against ``SentenceTransformer.encode`` (torch
fp32) on the same texts: texts/s, ratio, and cosine agreement per text.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from typing import TYPE_CHECKING

import numpy as np
from searchsmith.serving.profiling.common import (
    ProfileContext,
    TokenCount,
    bundle_count,
    interleaved_best,
    save_plot,
    sentence_transformers_count,
)
from searchsmith.serving.profiling.timing import interleave, resolve_device

if TYPE_CHECKING:
    from searchsmith.serving.embedder import Embedder

ST_DEFAULT_BATCH = 32  # SentenceTransformer.encode's default batch_size: the summary's baseline
CURVE_MAX_BATCH = 1024  # the curve's embedders: only the token budget bounds a batch
DEFAULT = "searchsmith-default"  # the embedder as configured by default (the summary's)
ONNX_CPU_ONLY = "the ONNX bundles run on ONNX Runtime's CPU provider"


def mixed_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of mixed length from the demo corpus: whole documents, sentences, titles."""
    from searchsmith.models.demo import corpus_path
    from searchsmith.models.jsonl import read_jsonl

    docs = read_jsonl(corpus_path(), what="demo corpus")
    pool: list[str] = []
    for d in docs:
        pool.append(d["text"])
        pool.extend(s.strip() + "." for s in d["text"].split(". ")[:3] if s.strip())
        if d.get("title"):
            pool.append(d["title"])
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(n)]


def neighbour_overlap(ref: np.ndarray, got: np.ndarray, k: int = 10, queries: int = 256) -> float:
    """Mean share of each query's ``k`` nearest texts (cosine, itself excluded) that ``got``
    finds as ``ref`` does, the first ``queries`` texts as queries; duplicates of a query's text
    count once. Embeddings are L2-normalised rows.
    """
    # texts may repeat (mixed_texts samples with replacement): neighbours are distinct texts
    _, first = np.unique(ref.round(5), axis=0, return_index=True)
    keep = np.sort(first)
    ref, got = ref[keep], got[keep]
    q = min(queries, len(ref))
    k = min(k, len(ref) - 1)
    if k < 1:
        return 1.0
    sa, sb = ref[:q] @ ref.T, got[:q] @ got.T
    sa[np.arange(q), np.arange(q)] = -np.inf
    sb[np.arange(q), np.arange(q)] = -np.inf
    ta = np.argpartition(-sa, k, axis=1)[:, :k]
    tb = np.argpartition(-sb, k, axis=1)[:, :k]
    return float(np.mean([len(set(x.tolist()) & set(y.tolist())) / k for x, y in zip(ta, tb, strict=True)]))


def embedder_count(stats: dict[str, float]) -> TokenCount:
    """Tokens and padded positions of the embedder's last ``encode``, as it counted them while
    packing its batches (``Embedder.last_stats``)."""
    return TokenCount(int(stats["tokens"]), int(stats["padded_tokens"]))


def packed_vs_padded(padded: Embedder, texts: list[str], rounds: int, *,
                     reference: np.ndarray | None = None) -> list[dict[str, object]]:
    """The packed (padding-free) embedder against ``padded`` on the same texts, weights and dtype.

    Interleaved rounds, best of each (``interleaved_best``); the packed embedder shares
    ``padded``'s model and tokenizer and keeps its settings, so its ``max_batch_tokens`` counts
    real tokens where the padded one counts padded positions.

    Args:
        padded: an embedder on the padded path (``config.packed`` off).
        texts: the texts both embed.
        rounds: timed rounds after one warm-up.
        reference: optional (N, D) vectors of ``SentenceTransformer.encode`` on ``texts``.

    Returns:
        Three rows: ``searchsmith-padded`` and ``searchsmith-packed`` (texts/s and the token
        fields) and the ``comparison: packed_vs_padded`` row.
    """
    from searchsmith.models.packed import resolve_attention
    from searchsmith.serving.embedder import Embedder

    packed = Embedder(dataclasses.replace(padded.config, packed=True))
    packed.model, packed.tokenizer = padded.model, padded.tokenizer  # same weights: only the layout differs
    n = len(texts)
    results, best = interleaved_best({"padded": lambda: padded.encode(texts),
                                      "packed": lambda: packed.encode(texts)}, rounds)
    attention = "none (model not packable)"
    if packed.packed:
        probe = next(padded.model.parameters())
        attention = resolve_attention("auto", probe.new_empty(0))
    fields = {name: embedder_count(emb.last_stats).fields(best[name])
              for name, emb in (("padded", padded), ("packed", packed))}
    workload = {"texts": n, "device": padded.device.type, "dtype": str(padded.dtype).replace("torch.", ""),
                "model": padded.model_name, "max_batch_tokens": padded.max_batch_tokens}
    rows: list[dict[str, object]] = [
        {"suite": "embed", "impl": f"searchsmith-{name}", "texts_per_s": n / best[name], **fields[name], **workload}
        for name in ("padded", "packed")
    ]
    cos = np.sum(results["packed"] * results["padded"], axis=1)
    row: dict[str, object] = {
        "suite": "embed", "comparison": "packed_vs_padded", "packed": packed.packed, "attention": attention,
        "packed_texts_per_s": n / best["packed"], "padded_texts_per_s": n / best["padded"],
        "ratio_packed_vs_padded": best["padded"] / best["packed"],
        "tokens": fields["packed"]["tokens"],
        "packed_tokens_per_s": fields["packed"]["tokens_per_s"],
        "padded_tokens_per_s": fields["padded"]["tokens_per_s"],
        "packed_padding_fraction": fields["packed"]["padding_fraction"],
        "padded_padding_fraction": fields["padded"]["padding_fraction"],
        "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
        "target": "packed min cosine >= 0.999 vs SentenceTransformer.encode; packed texts/s >= padded",
        **workload,
    }
    if reference is not None:
        row["packed_min_cosine_vs_st"] = float(np.sum(results["packed"] * reference, axis=1).min())
        row["padded_min_cosine_vs_st"] = float(np.sum(results["padded"] * reference, axis=1).min())
    rows.append(row)
    return rows


def prefetch_vs_inline(base: Embedder, texts: list[str], rounds: int, *, workers: int = 2,
                       window_texts: int | None = None) -> list[dict[str, object]]:
    """The embedder with ``workers`` prefetch threads against the inline loop (0 workers).

    Both share ``base``'s model and tokenizer and keep its settings but ``window_texts``
    (default: a quarter of the texts, at least 1, so that the next window's tokenization has
    something to overlap); interleaved rounds, best of each (``interleaved_best``).

    Args:
        base: a loaded embedder (its own ``tokenize_workers`` is not used).
        texts: the texts both embed.
        rounds: timed rounds after one warm-up.
        workers: ``tokenize_workers`` of the prefetching embedder (>= 1).
        window_texts: texts per window of both; None = ``max(1, len(texts) // 4)``.

    Returns:
        Three rows: ``searchsmith-prefetch`` and ``searchsmith-inline`` (texts/s and the token
        fields) and the ``comparison: prefetch_vs_inline`` row.
    """
    from searchsmith.serving.embedder import Embedder

    window = window_texts or max(1, len(texts) // 4)
    embedders = {}
    for name, w in (("prefetch", workers), ("inline", 0)):
        emb = Embedder(dataclasses.replace(base.config, tokenize_workers=w, window_texts=window))
        emb.model, emb.tokenizer = base.model, base.tokenizer  # same weights: only the loop differs
        embedders[name] = emb
    n = len(texts)
    results, best = interleaved_best({k: (lambda e=e: e.encode(texts)) for k, e in embedders.items()}, rounds)
    fields = {k: embedder_count(e.last_stats).fields(best[k]) for k, e in embedders.items()}
    workload = {"texts": n, "device": base.device.type, "dtype": str(base.dtype).replace("torch.", ""),
                "model": base.model_name, "max_batch_tokens": base.max_batch_tokens, "window_texts": window,
                "windows": -(-n // window)}
    rows: list[dict[str, object]] = [
        {"suite": "embed", "impl": f"searchsmith-{k}", "tokenize_workers": e.tokenize_workers,
         "texts_per_s": n / best[k], **fields[k], **workload}
        for k, e in embedders.items()
    ]
    rows.append({
        "suite": "embed", "comparison": "prefetch_vs_inline", "tokenize_workers": workers,
        "async_copy": embedders["prefetch"].copy_stream is not None,
        "prefetch_texts_per_s": n / best["prefetch"], "inline_texts_per_s": n / best["inline"],
        "ratio_prefetch_vs_inline": best["inline"] / best["prefetch"],
        "tokens": fields["prefetch"]["tokens"],
        "prefetch_tokens_per_s": fields["prefetch"]["tokens_per_s"],
        "inline_tokens_per_s": fields["inline"]["tokens_per_s"],
        "identical": bool(np.array_equal(results["prefetch"], results["inline"])),
        "target": "prefetch texts/s >= inline; vectors identical", **workload,
    })
    return rows


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    import torch
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from sentence_transformers import SentenceTransformer

    backend = getattr(args, "backend", "torch") or "torch"
    device = resolve_device("embed", ctx.device, cpu_only=ONNX_CPU_ONLY if backend == "onnx" else None)
    if backend == "onnx":
        run_onnx(ctx, args)
        return
    if backend != "torch":
        from searchsmith.models.errors import ConfigError

        raise ConfigError(f"profile embed --backend: {backend!r} is not one of ['torch', 'onnx']")
    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"  # the test's end-to-end run
    n = 24 if tiny else 128 if ctx.quick else (4096 if device == "cuda" else 1024)
    texts = mixed_texts(n)
    dtype = "fp16" if device == "cuda" else "fp32"
    ours = Embedder(EmbedderConfig(device=device, dtype=dtype))
    st = SentenceTransformer(str(ours.model_path), device=device)
    if device == "cuda":
        st = st.half()
    lengths = ours.count_tokens(texts)
    workload = {"texts": n, "device": device, "dtype": dtype, "model": ours.model_name,
                "tokens_p50": int(np.median(lengths)), "tokens_max": int(max(lengths)),
                "max_seq_length": ours.max_seq_length}
    sync = torch.cuda.synchronize if device == "cuda" else None

    # The curve (token budgets; ST batch sizes) and the summary (each at its default settings)
    # are one interleaved measurement after a warm-up on every text: the summary quotes the
    # rows of that measurement instead of timing the same configuration again at another moment.
    budgets = [2048] if tiny else [4096, 16384] if ctx.quick else [2048, 4096, 8192, 16384, 32768]
    sizes = sorted({*([16] if tiny else [32, 128] if ctx.quick else [16, 32, 64, 128, 256]), ST_DEFAULT_BATCH})
    embedders: dict[str, Embedder] = {}
    for b in budgets:
        emb = Embedder(EmbedderConfig(device=device, dtype=dtype, max_batch_tokens=b, max_batch_size=CURVE_MAX_BATCH))
        emb.model, emb.tokenizer = ours.model, ours.tokenizer  # share weights: only packing differs
        embedders[f"searchsmith-b{b}"] = emb
    embedders[DEFAULT] = ours  # its own settings (max_batch_size too): a row of its own, not a curve point
    fns = {k: e.encode for k, e in embedders.items()}
    for bs in sizes:
        fns[f"st-b{bs}"] = lambda t, bs=bs: st.encode(t, batch_size=bs, normalize_embeddings=True)
    rounds = 1 if ctx.quick else 3
    with ctx.profiled("embed"):
        timed = interleave(fns, rounds, inputs=[(texts,)] * rounds, sync=sync)
    best = timed.best()  # every embedder's last call encoded every text: last_stats counts them

    curve: dict[str, list[tuple[int, float]]] = {"searchsmith": [], "sentence-transformers": []}
    for k, emb in embedders.items():
        s = best[k]
        if k != DEFAULT:
            curve["searchsmith"].append((emb.max_batch_tokens, n / s))
        ctx.emit({"suite": "embed", "impl": "searchsmith", "max_batch_tokens": emb.max_batch_tokens,
                  "max_batch_size": emb.config.max_batch_size, "default": k == DEFAULT, "texts_per_s": n / s,
                  "padding_efficiency": emb.last_stats.get("padding_efficiency"),
                  **embedder_count(emb.last_stats).fields(s), **workload})
    st_counts = {bs: sentence_transformers_count(st, texts, bs) for bs in sizes}
    for bs in sizes:
        s = best[f"st-b{bs}"]
        curve["sentence-transformers"].append((bs, n / s))
        ctx.emit({"suite": "embed", "impl": "sentence-transformers", "batch_size": bs, "texts_per_s": n / s,
                  "default": bs == ST_DEFAULT_BATCH, **st_counts[bs].fields(s), **workload})
    # headline: each at its default settings (the figures of its rows above), and agreement of the vectors
    st_default = f"st-b{ST_DEFAULT_BATCH}"
    ours_s, st_s = best[DEFAULT], best[st_default]
    ours_tok = embedder_count(ours.last_stats).fields(ours_s)
    st_tok = st_counts[ST_DEFAULT_BATCH].fields(st_s)
    st_vecs = timed.results[st_default]
    cos = np.sum(timed.results[DEFAULT] * st_vecs, axis=1)
    best_st = max(v for _, v in curve["sentence-transformers"])
    ctx.emit({"suite": "embed", "summary": True, "searchsmith_texts_per_s": n / ours_s,
              "searchsmith_max_batch_tokens": ours.max_batch_tokens,
              "st_default_texts_per_s": n / st_s, "ratio_vs_st_default": st_s / ours_s,
              "tokens": ours_tok["tokens"], "searchsmith_tokens_per_s": ours_tok["tokens_per_s"],
              "searchsmith_padding_fraction": ours_tok["padding_fraction"],
              "st_default_tokens_per_s": st_tok["tokens_per_s"],
              "st_default_padding_fraction": st_tok["padding_fraction"],
              "st_best_texts_per_s": best_st, "ratio_vs_st_best": (n / ours_s) / best_st,
              "min_cosine": float(cos.min()), "padding_efficiency": ours.last_stats.get("padding_efficiency"),
              "rounds": rounds, "timing": "warm-up, then interleaved rounds with the rows above; best of each",
              **workload})
    if device == "cuda":  # padding-free (varlen attention) against the padded fp16 path, same texts
        for row in packed_vs_padded(ours, texts, rounds, reference=st_vecs):
            ctx.emit({**row, **workload})
    # tokenization / staging / copy ahead of the model against inline; --quick on a CPU: 32 texts
    some = texts[:32] if (ctx.quick and device == "cpu") else texts
    for row in prefetch_vs_inline(ours, some, 1 if ctx.quick else 3):
        ctx.emit({**workload, **row})

    def draw(fig, ax) -> None:
        xs, ys = zip(*curve["searchsmith"])
        ax.plot([x / 128 for x in xs], ys, marker="o", label="searchsmith (max_batch_tokens / 128)")
        xs, ys = zip(*curve["sentence-transformers"])
        ax.plot(xs, ys, marker="s", label="SentenceTransformer.encode (batch_size)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (texts; searchsmith: token budget / 128)")
        ax.set_ylabel("texts / s")
        ax.legend()

    save_plot(ctx.out_dir / "embed_throughput.png", draw,
              f"Embedding throughput vs batch size ({device}, {n} mixed-length texts)")


def run_onnx(ctx: ProfileContext, args: argparse.Namespace) -> None:
    """int8 / fp32 ONNX bundles of the embedder against ``SentenceTransformer.encode`` (CPU)."""
    import shutil
    import tempfile
    from pathlib import Path

    from searchsmith.models.export import ExportOptions, embedder_source, export_bundle
    from searchsmith.models.runtime import load_bundle
    from sentence_transformers import SentenceTransformer

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    n = 24 if tiny else 256 if ctx.quick else 1024
    texts = mixed_texts(n)
    work = Path(tempfile.mkdtemp(prefix="searchsmith-profile-embed-"))
    try:
        if tiny:  # a tiny random BERT keeps the test's export to seconds
            import torch
            from searchsmith.models.hub import resolve_model
            from transformers import AutoModel, AutoTokenizer, BertConfig

            torch.manual_seed(0)
            tok = AutoTokenizer.from_pretrained(resolve_model("default"))
            AutoModel.from_config(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64)).save_pretrained(work / "m")
            tok.save_pretrained(work / "m")
            src = embedder_source(str(work / "m"))
        else:
            src = embedder_source("default")
        bundles = {}
        for dtype in ("int8", "fp32"):
            export_bundle(src, work / dtype, ExportOptions(dtype=dtype, allow_drift=True))
            bundles[dtype] = load_bundle(work / dtype, device="cpu")
        st = SentenceTransformer(str(src.model_dir), device="cpu")
        st.max_seq_length = src.max_length
        lengths = [len(x) for x in bundles["fp32"].tokenizer(texts, truncation=True, max_length=src.max_length)["input_ids"]]
        workload = {"texts": n, "device": "cpu", "model": src.base_model, "backend": "onnx",
                    "tokens_p50": int(np.median(lengths)), "tokens_max": int(max(lengths)),
                    "max_seq_length": src.max_length}

        # Interleaved rounds, best of each (the load of a shared machine drifts).
        fns = {"st": lambda: st.encode(texts, batch_size=32, normalize_embeddings=True),
               **{d: (lambda b=b: b.encode(texts)) for d, b in bundles.items()}}
        results, best = interleaved_best(fns, 2 if (ctx.quick or tiny) else 3)  # warm-up + timed
        st_s, ref = best["st"], results["st"]
        st_tok = sentence_transformers_count(st, texts, 32).fields(st_s)
        ctx.emit({"suite": "embed", "impl": "sentence-transformers", "dtype": "fp32", "texts_per_s": n / st_s,
                  **st_tok, **workload})
        figures = {}
        for dtype in bundles:
            s = best[dtype]
            cos = np.sum(results[dtype] * ref, axis=1)
            figures[dtype] = {"texts_per_s": n / s, "ratio_vs_st": st_s / s, "min_cosine": float(cos.min()),
                              "mean_cosine": float(cos.mean()),
                              "top10_neighbour_overlap": neighbour_overlap(ref, results[dtype]),
                              **bundle_count(bundles[dtype], texts).fields(s)}
            ctx.emit({"suite": "embed", "impl": f"onnx-{dtype}", "dtype": dtype, **figures[dtype], **workload})
        ctx.emit({"suite": "embed", "summary": True, "onnx_int8_texts_per_s": figures["int8"]["texts_per_s"],
                  "onnx_fp32_texts_per_s": figures["fp32"]["texts_per_s"], "st_texts_per_s": n / st_s,
                  "tokens": figures["int8"]["tokens"], "onnx_int8_tokens_per_s": figures["int8"]["tokens_per_s"],
                  "onnx_int8_padding_fraction": figures["int8"]["padding_fraction"],
                  "onnx_fp32_tokens_per_s": figures["fp32"]["tokens_per_s"],
                  "st_tokens_per_s": st_tok["tokens_per_s"], "st_padding_fraction": st_tok["padding_fraction"],
                  "ratio_int8_vs_st": figures["int8"]["ratio_vs_st"],
                  "ratio_fp32_vs_st": figures["fp32"]["ratio_vs_st"],
                  "min_cosine": figures["int8"]["min_cosine"], "mean_cosine": figures["int8"]["mean_cosine"],
                  "top10_neighbour_overlap": figures["int8"]["top10_neighbour_overlap"],
                  "target": ">= 2x; export parity asks int8 min cosine >= 0.99", **workload})
    finally:
        shutil.rmtree(work, ignore_errors=True)
