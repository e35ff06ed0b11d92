"""``searchsmith profile rerank``: the int8 ONNX reranker against ``CrossEncoder.predict``.

Same model, same (query, candidates) groups from the demo data, same CPU, one run:

* ``onnx-int8``: the bundle exported with ``--dtype int8`` and loaded by ``load_bundle``
  (ONNX Runtime, CPU provider), one ``score_pairs(pairs)`` call over every pair, as
  ``CrossEncoder.predict(pairs)`` gets them (it sorts them by length and pads per batch);
* ``onnx-fp32``: the fp32 bundle, for the share of the gain that is quantisation;
* ``sentence-transformers``: ``CrossEncoder.predict`` on the torch fp32 model (batch 32).

Reported: pairs/s of each, the ratio int8 / CrossEncoder, and agreement of the int8 ranking
with the torch ranking per query (Kendall tau, top-10 identical, top-10 overlap). Every row
also has ``tokens`` (real tokens of the (query, passage) pairs as that system tokenizes and
truncates them, [CLS]/[SEP] included), ``tokens_per_s`` (over the row's ``seconds``) and
``padding_fraction`` (padded share of the positions fed, from the batches that system forms).

The model: ``--run DIR`` (a trained reranker run) or, without one, a cross-encoder built from
the default all-MiniLM-L6-v2 with a fresh (untrained) one-logit head: speed does not depend
on training, and the output says ``"trained": false``. ``SEARCHSMITH_PROFILE_TINY=1`` (the
test) uses a tiny random BERT instead.

On a CUDA device (``--device auto`` with a GPU and not ``--quick``, the ``gpu`` group; or
``--device cuda``, at the quick sizes with ``--quick``) the comparison is the GPU one of the export issue instead: the fp16 bundle (exported with its
torch weights) loaded by ``load_bundle(..., device="cuda", backend="torch")``, and the fp16
ONNX bundle on ONNX Runtime's CUDA provider where onnxruntime-gpu is installed (a
``skipped`` line where not), against ``CrossEncoder.predict`` on the same GPU in fp32 and
in fp16 (``.half()``), on a larger workload (64 queries x 100 candidates).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.io import process_temp_dir
from searchsmith.serving.profiling.common import (
    ProfileContext,
    TokenCount,
    batched_count,
    bundle_count,
    interleaved_best,
    save_plot,
    sentence_transformers_count,
    token_lengths,
)
from searchsmith.serving.profiling.timing import resolve_device

# One untrained cross-encoder and its exported bundles per process: ``profile all`` runs the
# rerank and server suites, which would otherwise each build and export the same model.
_SHARED: dict[str, Any] = {}


def _shared_dir() -> Path:
    """The process's folder for the shared models (removed at exit)."""
    if "dir" not in _SHARED:
        _SHARED["dir"] = process_temp_dir("searchsmith-profile-models-")
    return _SHARED["dir"]


def untrained_source(tiny: bool) -> Any:
    """The untrained MiniLM cross-encoder (tiny: a random tiny BERT) as a ModelSource, built once."""
    from searchsmith.models.export import ModelSource

    key = f"src-{tiny}"
    if key not in _SHARED:
        folder = _shared_dir() / f"cross-encoder-{'tiny' if tiny else 'minilm'}"
        name = _untrained_cross_encoder(folder, tiny)
        _SHARED[key] = ModelSource("rerank", folder, folder, name, False, 0, 64 if tiny else 256)
    return _SHARED[key]


def exported(src: Any, dtype: str, trained: bool) -> Path:
    """``src`` exported to a ``dtype`` bundle (once per process; drift allowed: the profiles
    measure agreement themselves)."""
    from searchsmith.models.export import ExportOptions, export_bundle

    key = f"bundle-{src.model_dir}-{dtype}"
    if key not in _SHARED:
        out = _shared_dir() / f"bundle-{len(_SHARED)}-{dtype}"
        export_bundle(src, out, ExportOptions(dtype=dtype, allow_drift=True, allow_untrained=not trained))
        _SHARED[key] = out
    return _SHARED[key]


def _untrained_cross_encoder(folder: Path, tiny: bool) -> str:
    """Save a cross-encoder (random one-logit head) to ``folder``; return its description."""
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig

    torch.manual_seed(0)
    base = resolve_model("default")
    tok = AutoTokenizer.from_pretrained(base)
    if tiny:
        cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, num_labels=1)
        model = AutoModelForSequenceClassification.from_config(cfg)
        name = "tiny random BERT (hidden 32, 1 layer)"
    else:
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
        name = "sentence-transformers/all-MiniLM-L6-v2 + untrained 1-logit head"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return name


def agreement(ref: list[np.ndarray], got: list[np.ndarray]) -> dict[str, float]:
    """Ranking agreement of ``got`` with ``ref``, one score vector per query."""
    from searchsmith.models.export import kendall_tau

    taus, same, overlap = [], [], []
    for a, b in zip(ref, got, strict=True):
        ta, tb = np.argsort(-a, kind="stable")[:10], np.argsort(-b, kind="stable")[:10]
        taus.append(kendall_tau(a, b))
        same.append(list(ta) == list(tb))
        overlap.append(len(set(ta) & set(tb)) / len(ta))
    return {"kendall_tau_mean": float(np.mean(taus)), "kendall_tau_min": float(np.min(taus)),
            "top10_identical": float(np.mean(same)), "top10_overlap": float(np.mean(overlap))}


def reranker_run(run_dir: Path) -> Any:
    """The ``ModelSource`` of ``--run``, refused at once unless the run trained a reranker.

    The run's task is read from its ``run.json`` as ``models.runs.run_source`` reads it,
    before anything is loaded, exported or timed (a reader run used to be exported and its
    baseline run for a minute before ``score_pairs`` was found missing).

    Raises:
        ValidationError: ``run.json`` names another task (a reader, say) or none we know;
            the message names it and what to pass.
        BundleError: not a run (no ``run.json``) or an unfinished one (``run_source``).
    """
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import run_source
    from searchsmith.models.io import read_json_object
    from searchsmith.models.tasks import run_task

    info_path = run_dir / "run.json"
    if info_path.is_file():
        task = read_json_object(info_path, "profile rerank --run", error=ValidationError).get("task")
        spec = run_task(task)
        if spec is None or spec.name != "rerank":
            what = f"a {spec.name!r} run" if spec else "not a run of a task searchsmith knows"
            other = {"read": "; a reader is profiled by 'searchsmith profile read --run DIR'"}.get(
                spec.name if spec else "", "")
            raise ValidationError(f"profile rerank --run: {str(run_dir)!r} is {what} (run.json task {task!r}), not "
                                  "a reranker; pass a reranker run (searchsmith train recipes/reranker/...) or leave "
                                  f"out --run to profile the untrained MiniLM cross-encoder{other}")
    return run_source(run_dir)


def check_args(args: argparse.Namespace) -> None:
    """``--run`` (optional): a reranker run, checked before any step of the run is measured."""
    if getattr(args, "run", None):
        reranker_run(Path(args.run))


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    from searchsmith.models.export import heldout_groups
    from searchsmith.models.runtime import load_bundle

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    device = resolve_device("rerank", ctx.device)
    run_dir = getattr(args, "run", None)
    src = reranker_run(Path(run_dir)) if run_dir else None  # before any export or baseline
    # the GPU comparison: on CUDA unless --quick with --device auto (the CPU group's quick
    # run); an explicit --device cuda runs it, at the quick sizes with --quick
    gpu = device == "cuda" and (ctx.device == "cuda" or not ctx.quick)
    n_queries, per_query = (2, 12) if tiny else (6, 16) if ctx.quick else (64, 100) if gpu else (32, 30)
    groups = heldout_groups(n_queries, per_query)
    work = Path(tempfile.mkdtemp(prefix="searchsmith-profile-rerank-"))
    try:
        if src is not None:
            model_name, trained = f"{src.base_model} ({run_dir})", True
        else:
            src = untrained_source(tiny)
            model_name, trained = src.base_model, False
        if gpu:
            _run_gpu(ctx, src, groups, work, model_name, trained, "cuda")
            return
        bundles: dict[str, Any] = {}
        # --quick leaves out the fp32 bundle (the share of the gain that is quantisation): one
        # export fewer, which is most of the quick run's time
        for dtype in ("int8",) if ctx.quick else ("int8", "fp32"):
            bundles[dtype] = load_bundle(exported(src, dtype, trained), device="cpu", allow_untrained=not trained)
        pairs = [(q, p) for q, ps in groups for p in ps]
        n_pairs = len(pairs)
        baseline, st_scores, st_count = _torch_baseline(src, pairs, groups)

        # Interleaved rounds, best of each: on a shared machine the load drifts, and timing
        # one implementation after the other would hand the drift to one of them.
        # Both sides get every pair in one call (CrossEncoder.predict(pairs) and
        # score_pairs(pairs)): same inputs, same call pattern.
        fns = {"st": st_scores, **{d: (lambda b=b: _split(b.score_pairs(pairs), groups))
                                   for d, b in bundles.items()}}
        results, best = interleaved_best(fns, 2 if (ctx.quick or tiny) else 3)  # warm-up + timed
        st_s, ref = best["st"], results["st"]
        workload = {"queries": len(groups), "pairs": n_pairs, "device": "cpu", "model": model_name,
                    "trained": trained, "max_length": src.max_length}
        st_tok = st_count.fields(st_s)
        ctx.emit({"suite": "rerank", "impl": "sentence-transformers", "dtype": "fp32", "baseline": baseline,
                  "pairs_per_s": n_pairs / st_s, **st_tok, **workload})
        qs, ps = [q for q, _ in pairs], [p for _, p in pairs]
        figures = {}
        for dtype in bundles:
            s = best[dtype]
            figures[dtype] = (s, agreement(ref, results[dtype]), bundle_count(bundles[dtype], qs, ps).fields(s))
            ctx.emit({"suite": "rerank", "impl": f"onnx-{dtype}", "dtype": dtype, "pairs_per_s": n_pairs / s,
                      "ratio_vs_st": st_s / s, **figures[dtype][1], **figures[dtype][2], **workload})
        s8, agree8, tok8 = figures["int8"]
        s32 = figures["fp32"][0] if "fp32" in figures else None
        ctx.emit({"suite": "rerank", "summary": True, "baseline": baseline, "onnx_int8_pairs_per_s": n_pairs / s8,
                  "onnx_fp32_pairs_per_s": n_pairs / s32 if s32 else None, "st_pairs_per_s": n_pairs / st_s,
                  "tokens": tok8["tokens"], "onnx_int8_tokens_per_s": tok8["tokens_per_s"],
                  "onnx_int8_padding_fraction": tok8["padding_fraction"],
                  "onnx_fp32_tokens_per_s": figures["fp32"][2]["tokens_per_s"] if "fp32" in figures else None,
                  "st_tokens_per_s": st_tok["tokens_per_s"], "st_padding_fraction": st_tok["padding_fraction"],
                  "ratio_int8_vs_st": st_s / s8, "ratio_fp32_vs_st": st_s / s32 if s32 else None,
                  "target": ">= 2x with top-10 agreement >= 0.95", **agree8,
                  "note": None if trained else "untrained head: speed is what is measured; agreement "
                  "of an untrained head understates a trained model's", **workload})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _torch_baseline(src: Any, pairs: list[tuple[str, str]], groups: list[tuple[str, list[str]]]
                    ) -> tuple[str, Any, TokenCount]:
    """The fp32 torch baseline on the CPU: ``CrossEncoder.predict`` for a [CLS] cross-encoder;
    for a segment-cosine reranker (which CrossEncoder would load with a random [CLS] head) the
    model's own torch forward, batched 32 pairs at a time in input order.

    Returns:
        ``(description, scores_fn, tokens)``: ``tokens`` is what one call feeds the model.
    """
    import torch
    from searchsmith.models.reranker import load_reranker, read_head
    from sentence_transformers import CrossEncoder

    if read_head(src.model_dir).get("head") != "segment_cosine":
        st = CrossEncoder(str(src.model_dir), device="cpu", max_length=src.max_length)
        return "CrossEncoder.predict (fp32 torch, batch 32)", lambda: _split(
            np.asarray(st.predict(pairs, batch_size=32, show_progress_bar=False), dtype=np.float32),
            groups), sentence_transformers_count(st, pairs, 32)
    from transformers import AutoTokenizer

    model = load_reranker(src.model_dir)
    tok = AutoTokenizer.from_pretrained(str(src.tokenizer_dir))

    def scores() -> list[np.ndarray]:
        out = []
        with torch.inference_mode():
            for i in range(0, len(pairs), 32):
                chunk = pairs[i:i + 32]
                enc = tok([q for q, _ in chunk], [p for _, p in chunk], truncation="only_second",
                          max_length=src.max_length, padding=True, return_tensors="pt")
                out.append(model(**enc).logits.reshape(-1).float().numpy())
        return _split(np.concatenate(out), groups)

    lengths = token_lengths(tok, [q for q, _ in pairs], [p for _, p in pairs], max_length=src.max_length,
                            truncation="only_second")
    count = batched_count(lengths, [range(i, min(i + 32, len(pairs))) for i in range(0, len(pairs), 32)])
    return ("torch fp32 forward of the segment-cosine reranker (batch 32; CrossEncoder cannot load its head)",
            scores, count)


def _split(flat: np.ndarray, groups: list[tuple[str, list[str]]]) -> list[np.ndarray]:
    out, i = [], 0
    for _, ps in groups:
        out.append(flat[i:i + len(ps)])
        i += len(ps)
    return out


def _run_gpu(ctx: ProfileContext, src: Any, groups: list[tuple[str, list[str]]], work: Path,
             model_name: str, trained: bool, device: str) -> None:
    """fp16 bundle (torch backend; ONNX CUDA provider where present) vs CrossEncoder on CUDA.

    ``device`` is ``cuda`` in a real run; the test runs the same code with ``cpu`` (where
    the torch backend stays fp32 and there is no CUDA provider).
    """
    import torch
    from searchsmith.models.export import ExportOptions, export_bundle
    from searchsmith.models.runtime import load_bundle
    from searchsmith.serving.profiling.cli import _onnx_cuda_missing
    from sentence_transformers import CrossEncoder

    opts = ExportOptions(dtype="fp16", allow_drift=True, torch_weights=True, allow_untrained=not trained)
    export_bundle(src, work / "fp16", opts)
    # batch 32 is CrossEncoder.predict's default too (the headline compares those); batch 128
    # shows what a larger GPU batch buys
    bundles = {f"torch-fp16{suffix}": load_bundle(work / "fp16", device=device, backend="torch",
                                                  allow_untrained=not trained, batch_size=bs)
               for suffix, bs in (("", 32), ("-b128", 128))}
    why = _onnx_cuda_missing() if device == "cuda" else "not a CUDA run"
    if why is None:
        bundles["onnx-cuda-fp16"] = load_bundle(work / "fp16", device="cuda", backend="onnx",
                                                allow_untrained=not trained)
    else:
        ctx.emit({"suite": "rerank", "impl": "onnx-cuda-fp16", "skipped": why})
    st32 = CrossEncoder(str(src.model_dir), device=device, max_length=src.max_length)
    st16 = CrossEncoder(str(src.model_dir), device=device, max_length=src.max_length)
    st16.model.half()
    pairs = [(q, p) for q, ps in groups for p in ps]
    n_pairs = len(pairs)

    def synced(fn: Any) -> Any:
        def call() -> Any:
            out = fn()
            if device == "cuda":
                torch.cuda.synchronize()
            return out
        return call

    fns = {
        "st-fp32": synced(lambda: _split(np.asarray(st32.predict(pairs, batch_size=32, show_progress_bar=False),
                                                    dtype=np.float32), groups)),
        "st-fp16": synced(lambda: _split(np.asarray(st16.predict(pairs, batch_size=32, show_progress_bar=False),
                                                    dtype=np.float32), groups)),
        **{k: synced(lambda b=b: [b.score(q, ps) for q, ps in groups]) for k, b in bundles.items()},
    }
    with ctx.profiled("rerank"):
        results, best = interleaved_best(fns, 3)
    ref = results["st-fp32"]
    # what one call of each feeds the model: CrossEncoder sorts every pair and cuts every 32;
    # a bundle's score(q, ps) packs each query's passages on their own
    st_count = sentence_transformers_count(st32, pairs, 32)
    counts = {"st-fp32": st_count, "st-fp16": st_count,
              **{k: sum((bundle_count(b, [q] * len(ps), ps) for q, ps in groups), TokenCount(0, 0))
                 for k, b in bundles.items()}}
    workload = {"queries": len(groups), "pairs": n_pairs, "device": device, "model": model_name,
                "trained": trained, "max_length": src.max_length,
                "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None}
    for k, s in best.items():
        ctx.emit({"suite": "rerank", "impl": "sentence-transformers" if k.startswith("st-") else k,
                  "dtype": "fp16" if "16" in k else "fp32", "pairs_per_s": n_pairs / s,
                  "ratio_vs_st_fp32": best["st-fp32"] / s, "ratio_vs_st_fp16": best["st-fp16"] / s,
                  **agreement(ref, results[k]), **counts[k].fields(s), **workload})
    ours = "onnx-cuda-fp16" if "onnx-cuda-fp16" in best else "torch-fp16"
    ctx.emit({"suite": "rerank", "summary": True, "impl": ours, "pairs_per_s": n_pairs / best[ours],
              "st_fp32_pairs_per_s": n_pairs / best["st-fp32"], "st_fp16_pairs_per_s": n_pairs / best["st-fp16"],
              **counts[ours].fields(best[ours]),
              "st_fp32_tokens_per_s": st_count.tokens / best["st-fp32"],
              "st_fp16_tokens_per_s": st_count.tokens / best["st-fp16"],
              "st_fp32_padding_fraction": st_count.padding_fraction,
              "st_fp16_padding_fraction": st_count.padding_fraction,
              "ratio_vs_st_fp32": best["st-fp32"] / best[ours], "ratio_vs_st_fp16": best["st-fp16"] / best[ours],
              **agreement(ref, results[ours]), **workload})

    def draw(fig: Any, ax: Any) -> None:
        names = list(best)
        ax.bar(names, [n_pairs / best[k] for k in names])
        ax.set_xlabel("implementation")
        ax.set_ylabel("pairs / s")

    save_plot(ctx.out_dir / "rerank_gpu.png", draw,
              f"Reranker throughput on {workload['gpu'] or device} ({n_pairs} pairs, {len(groups)} queries)")
