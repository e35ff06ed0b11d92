"""``searchsmith export``: trained runs (and the base embedder) to verified ONNX bundles.

::

    searchsmith export runs/reranker --out bundles/reranker --dtype int8
    searchsmith export runs/ --out bundles/ --embedder default     # every run in runs/, + embedder
    searchsmith export embedder --out bundles/embedder [--model default]

A bundle is a folder::

    manifest.json        format version, task, base model, opset, dtype, graphs (inputs and
                         outputs with shapes and dtypes), labels, thresholds, max_length,
                         sha256 of every file, searchsmith version, allow_drift, parity verdict
    parity_report.json   every parity figure measured by the export
    <graph>.onnx         model.onnx | tagger.onnx + scorer.onnx | encoder.onnx + decoder.onnx |
                         text.onnx + vision.onnx
    tokenizer/           the tokenizer files
    torch/               (only with --torch-weights) the original HF/torch model, for backend="torch"

How a graph is made: ``torch.onnx.export(..., dynamo=True)`` (the default exporter of
torch 2.9+: ``torch.export`` traces the module and onnxscript translates it) with dynamic
batch and sequence axes. The TorchScript exporter (``dynamo=False``) is ~10x faster to run
but traced transformers 5's attention-mask construction with the example's shapes baked in:
a tiny BERT cross-encoder differed from torch by up to 8e-3 on other shapes, failing parity,
while the dynamo graph stayed within 1e-8. The graph is then optimised (ONNX Runtime's
transformer fusions, :func:`optimize_graph`; machine-specific fusions are left to load time)
and converted: ``int8`` = dynamic int8 quantisation of the weights
(``onnxruntime.quantization.quantize_dynamic``, for CPUs), ``fp16`` = float16 weights and
activations with fp32 inputs and outputs (for GPUs).

Parity is checked on held-out inputs from the demo data (never seen in training) against the
torch model; thresholds are :class:`ParityThresholds`. A failed check raises BundleError and
writes nothing, unless ``--allow-drift``, which is recorded in the manifest.
"""

from __future__ import annotations

import atexit
import hashlib
import inspect
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from searchsmith.models import __version__
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.int8_cpu import int8_cpu_report, int8_isa
from searchsmith.models.io import (
    check_replaceable,
    read_json_object,
    replace_dir,
    sha256_file,
    temp_dir_beside,
    write_json_atomic,
)
from searchsmith.models.onnx_quant import (
    INT8_DEFAULTS,
    Int8Scheme,
    quantize_int8,
)
from searchsmith.models.parity_inputs import (
    ParityInputs,
    heldout_groups,
    heldout_texts,
    parity_inputs,
)
from searchsmith.models.runtime import (
    BUNDLE_CLASSES,
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER_DIR,
    TORCH_DIR,
    Bundle,
    OrtGraph,
    TorchGraph,
    read_manifest,
)
from searchsmith.models.tasks import run_names, run_task

log = logging.getLogger(__name__)

Dtype = Literal["fp32", "fp16", "int8"]
# (task, run_dir, bundle, limit) -> (held-out figures in the manifest's naming, where they come from)
HeldoutScorer = Callable[[str, Path, Bundle, "int | None"], tuple[dict[str, float], str]]
_ORT_TO_NP = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
              "tensor(float16)": "float16"}


@dataclass(frozen=True)
class ParityThresholds:
    """What the export accepts as "the same model".

    Attributes:
        fp32_max_abs: max |torch - ONNX| on logits and embeddings of the fp32 graphs.
        fp16_min_cosine: min per-row cosine of fp16 embeddings against torch fp32.
        int8_min_cosine: the same for int8.
        rerank_min_kendall_tau: a query's ranking passes when its top-10 is identical or its
            Kendall tau against torch is at least this.
        decompose_min_identical: share of held-out inputs whose generated text is identical.
        cite_min_agreement: share of tagger labels and of scorer decisions (at the support
            threshold) that agree with torch (fp16/int8).
        heldout_texts: held-out texts (and decomposer inputs; rerank groups: a quarter as
            many) that parity runs on (``--parity-inputs``, 2..4096).
    """

    fp32_max_abs: float = 1e-4
    fp16_min_cosine: float = 0.999
    int8_min_cosine: float = 0.99
    rerank_min_kendall_tau: float = 0.95
    decompose_min_identical: float = 0.98
    cite_min_agreement: float = 0.98
    heldout_texts: int = 32

    def __post_init__(self) -> None:
        n = self.heldout_texts
        if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= 4096:
            raise ConfigError(f"export --parity-inputs: expected an int in 2..4096, got {n!r} (32 is the default)")


@dataclass(frozen=True)
class ExportOptions:
    """Settings of one export (the CLI flags).

    Attributes:
        dtype: ``fp32``, ``fp16`` (GPU) or ``int8`` (dynamic quantisation, CPU).
        opset: ONNX opset (the dynamo exporter's default is 18).
        allow_drift: keep a bundle that fails parity (recorded in the manifest).
        torch_weights: also copy the original HF/torch model into ``torch/``.
        allow_untrained: export a model that was never fine-tuned (benchmarks only; the
            manifest says ``"trained": false`` and ``load_bundle`` refuses it by default).
        int8_fp32_blocks, int8_fuse_attention, int8_down_projections, int8_smooth_alpha,
            int8_activations, int8_weight_range: int8
            only: override the task's :data:`~searchsmith.models.onnx_quant.INT8_DEFAULTS`
            (``None`` keeps the default; see :class:`~searchsmith.models.onnx_quant.Int8Scheme`).
        thresholds: parity thresholds (and how many held-out inputs).
        parity_data: a ``.txt`` / ``.jsonl`` file whose inputs parity and int8 calibration run
            on instead of the demo data (:mod:`~searchsmith.models.parity_inputs`).
        heldout_limit: the exported model is scored on the run's held-out split and the figures
            recorded in the manifest (``heldout_metrics``); this scores only the first N items
            (queries, decompositions and rewrites each, sentences, images) of a large split.
            None = all; 0 = skip it and record the run's own (torch) figures.
        heldout_scorer: ``(task, run_dir, bundle, limit) -> (figures, where)``, the function that
            scores the bundle on the run's held-out split (``searchsmith export`` and the
            quickstart pass :func:`searchsmith.training.evaluate.heldout_figures`: evaluation
            belongs to the training layer). None = record the run's own (torch) figures.
    """

    dtype: Dtype = "fp32"
    opset: int = 18
    allow_drift: bool = False
    torch_weights: bool = False
    allow_untrained: bool = False
    int8_fp32_blocks: int | None = None
    int8_fuse_attention: bool | None = None
    int8_down_projections: str | None = None
    int8_smooth_alpha: float | None = None
    int8_activations: str | None = None
    int8_weight_range: str | None = None
    thresholds: ParityThresholds = field(default_factory=ParityThresholds)
    parity_data: str | None = None
    heldout_limit: int | None = None
    heldout_scorer: HeldoutScorer | None = None

    def __post_init__(self) -> None:
        if self.int8_fuse_attention is not None and not isinstance(self.int8_fuse_attention, bool):
            raise ConfigError(f"export --int8-attention: expected fused or unfused, got {self.int8_fuse_attention!r}")
        replace(Int8Scheme(), **self._int8_overrides())  # the overrides are checked here, whatever the task
        if self.dtype not in ("fp32", "fp16", "int8"):
            raise ConfigError(f"export --dtype: {self.dtype!r} is not one of ['fp32', 'fp16', 'int8']")
        if not 14 <= self.opset <= 23:
            raise ConfigError(f"export --opset: {self.opset} is outside 14..23 (18 is the default)")
        n = self.heldout_limit
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ConfigError(f"export --heldout-limit: expected an int >= 0 (0 skips the bundle's held-out "
                              f"evaluation; leave it out for all items), got {n!r}")

    def _int8_overrides(self) -> dict[str, Any]:
        overrides = {"fp32_blocks": self.int8_fp32_blocks, "fuse_attention": self.int8_fuse_attention,
                     "down_projections": self.int8_down_projections, "smooth_alpha": self.int8_smooth_alpha,
                     "activations": self.int8_activations, "weight_range": self.int8_weight_range}
        # per-token products need the attention unfused, and a fused one takes one scale per call:
        # asking for one without naming the other implies it
        if self.int8_activations == "token" and self.int8_fuse_attention is None:
            overrides["fuse_attention"] = False
        if self.int8_fuse_attention is True and self.int8_activations is None:
            overrides["activations"] = "tensor"
        return {k: v for k, v in overrides.items() if v is not None}

    def int8_scheme(self, task: str) -> Int8Scheme:
        """The task's int8 defaults with this export's overrides."""
        return replace(INT8_DEFAULTS.get(task, Int8Scheme()), **self._int8_overrides())


# ----------------------------------------------------------------------------- held-out inputs


def calibration_feeds(task: str, bundle: Bundle, graph: str, n: int,
                      inputs: ParityInputs) -> list[dict[str, np.ndarray]] | None:
    """Feeds of ``graph`` for int8 calibration: ``n`` held-out inputs none of which parity uses
    (``inputs.calibration_texts`` / ``calibration_groups``: the demo data or ``--parity-data``).

    Texts for the embedder, the image model's text tower and the citation tagger; (question,
    passage) pairs for the reranker and (text, text) pairs for the citation scorer. ``None``
    for graphs that take no text (vision, the decomposer's) or when there are no inputs left.
    """
    names = {i["name"] for i in bundle.manifest["graphs"][graph]["inputs"]}
    if not names <= {"input_ids", "attention_mask", "token_type_ids"}:
        return None
    if task == "rerank":
        pairs = [(q, p) for q, ps in inputs.calibration_groups for p in ps][:n]
        return _raw_feeds(bundle, graph, [q for q, _ in pairs], [p for _, p in pairs]) if pairs else None
    texts = inputs.calibration_texts[:n]
    if not texts:
        return None
    if task == "cite" and graph == "scorer":
        return _raw_feeds(bundle, graph, texts, texts[1:] + texts[:1])
    if task == "cite":
        return _raw_feeds(bundle, graph, texts, max_length=getattr(bundle, "tagger_max_length", None))
    return _raw_feeds(bundle, graph, texts)


# ----------------------------------------------------------------------------- graph files


def export_graph(spec: Any, path: Path, opset: int) -> Path:
    """Trace ``spec.module`` with the dynamo exporter into one self-contained ``.onnx`` file."""
    import torch

    dims: dict[str, Any] = {}
    shapes = {}
    for name, axes in spec.dynamic.items():
        shapes[name] = {}
        for axis, dim_name in axes.items():
            dims.setdefault(dim_name, torch.export.Dim(dim_name))
            shapes[name][axis] = dims[dim_name]
    # A forward(*tensors) (the HF wrappers) takes its shapes under the varargs name; named
    # forwards (encoder, decoder, the image towers) take them by argument name.
    varargs = bool(spec.module.forward.__code__.co_flags & inspect.CO_VARARGS)
    dynamic_shapes: Any = {"tensors": tuple(shapes.get(n) for n in spec.inputs)} if varargs else shapes
    try:
        with torch.no_grad():
            torch.onnx.export(spec.module, spec.example, str(path), input_names=spec.inputs,
                              output_names=spec.outputs, opset_version=opset, dynamo=True,
                              dynamic_shapes=dynamic_shapes, external_data=False, verbose=False)
    except Exception as exc:  # noqa: BLE001 - the exporter raises many kinds; say which graph
        raise BundleError(f"export: tracing graph {path.stem!r} failed: {type(exc).__name__}: {exc}") from exc
    return path


_TRACE_CACHE: dict[tuple[str, ...], Path] = {}


def _folder_digest(folder: Path) -> str:
    """sha256 over the names and contents of a model folder (the trace cache key)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(sha256_file(p).encode())
    return h.hexdigest()


def _traced(spec: Any, name: str, model_key: str, task: str, opset: int, work: Path) -> Path:
    """The optimised fp32 graph of ``spec``, traced once per process for the same weights.

    Tracing is the slow step of an export (seconds per graph even for a tiny model); exporting
    the same run to several dtypes (fp32 for GPUs, int8 for CPUs) reuses the trace.
    """
    key = (task, name, model_key, str(opset))
    cached = _TRACE_CACHE.get(key)
    if cached is not None and cached.is_file():
        return cached
    raw = export_graph(spec, work / f"{name}.raw.onnx", opset)
    cache_dir = Path(tempfile.mkdtemp(prefix="searchsmith-trace-"))
    atexit.register(shutil.rmtree, cache_dir, True)
    opt = optimize_graph(raw, cache_dir / f"{name}.fp32.onnx")
    _TRACE_CACHE[key] = opt
    return opt


def optimize_graph(src: Path, dst: Path) -> Path:
    """Fuse the transformer blocks (ONNX Runtime's transformer optimizer), else basic passes.

    The transformer optimizer rewrites Add + LayerNormalization into SkipLayerNormalization
    and MatMul + Add + Gelu into BiasGelu (contrib ops of both the CPU and CUDA providers);
    on the MiniLM cross-encoder (2 cores, batch 32 x 138 tokens) that took ONNX Runtime fp32
    from 10.4 s to 7.5 s and int8 from 6.3 s to 3.4 s per batch, against 15.1 s in torch
    (a heavily shared machine: compare the ratios, not the times). A graph it cannot handle
    gets ONNX Runtime's portable basic level (constant folding, redundant nodes removed);
    either way the parity check runs on the result.
    """
    import onnxruntime as ort

    try:
        from onnxruntime.transformers.optimizer import optimize_model

        optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0).save_model_to_file(str(dst))
        return dst
    except Exception as exc:  # noqa: BLE001 - the optimizer raises anything on unknown graphs
        log.info("export: transformer optimizer skipped %s (%s); basic optimisation only", src.name, exc)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(dst)
    opts.log_severity_level = 3
    ort.InferenceSession(str(src), sess_options=opts, providers=["CPUExecutionProvider"])
    return dst


def convert_graph(src: Path, dst: Path, dtype: Dtype, int8: Int8Scheme | None = None,
                  calibration: list[dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """fp32 graph -> ``dtype`` (int8 dynamic quantisation or fp16 with fp32 I/O).

    ``int8``: how to quantise (:mod:`searchsmith.models.onnx_quant`; default
    :class:`Int8Scheme`'s defaults); ``calibration``: feeds of the fp32 graph for SmoothQuant.

    Returns:
        What the conversion did (for int8: fused attention blocks, smoothed and fp32 products).
    """
    if dtype == "fp32":
        shutil.copyfile(src, dst)
        return {}
    if dtype == "int8":
        return quantize_int8(src, dst, int8 or Int8Scheme(), calibration)
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
    return {}


def graph_signature(path: Path) -> dict[str, Any]:
    """Inputs and outputs (name, dtype, shape with axis names) as ONNX Runtime sees them."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def rows(xs: Any) -> list[dict[str, Any]]:
        return [{"name": x.name, "dtype": _ORT_TO_NP.get(x.type, x.type),
                 "shape": [d if isinstance(d, int) else str(d) for d in x.shape]} for x in xs]

    return {"inputs": rows(sess.get_inputs()), "outputs": rows(sess.get_outputs())}


# ----------------------------------------------------------------------------- parity


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall tau-b of two score vectors (1 = same order)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif da == db:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else 1.0


def _raw_feeds(bundle: Bundle, graph: str, texts: list[str], second: list[str] | None = None,
               max_length: int | None = None) -> list[dict[str, np.ndarray]]:
    names = {i["name"] for i in bundle.manifest["graphs"][graph]["inputs"]}
    return [{k: v for k, v in feeds.items() if k in names}
            for _, feeds in bundle._encode_text(texts, second, max_length)]


def _max_abs(ref: Callable, got: Callable, feeds: list[dict[str, np.ndarray]]) -> float:
    worst = 0.0
    for f in feeds:
        worst = max(worst, float(np.abs(ref(f) - got(f)).max()))
    return worst


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def parity_check(task: str, ref: Bundle, fp32: Bundle, final: Bundle, dtype: Dtype, th: ParityThresholds,
                 reference_generate: Callable[[list[str]], list[str]] | None = None,
                 images: list[Any] | None = None, inputs: ParityInputs | None = None) -> dict[str, Any]:
    """Compare the ONNX bundles (fp32 and the final dtype) with the torch reference on the
    held-out ``inputs`` (default: the demo inputs, :func:`~searchsmith.models.parity_inputs.demo_inputs`).

    Returns:
        The parity report: figures, thresholds and ``passed`` (all checks) per check.
    """
    n = th.heldout_texts
    inputs = inputs or parity_inputs(task, n)
    texts = inputs.texts
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, value: float, limit: float, higher_is_better: bool) -> None:
        ok = value >= limit if higher_is_better else value <= limit
        checks[name] = {"value": float(value), "limit": float(limit), "passed": bool(ok)}

    if task == "embed" or task == "images":
        graph = "model" if task == "embed" else "text"
        check(f"{graph}_fp32_max_abs", _max_abs(ref.graphs[graph], fp32.graphs[graph],
                                                _raw_feeds(ref, graph, texts)), th.fp32_max_abs, False)
        encode = "encode" if task == "embed" else "encode_text"
        a, b = getattr(ref, encode)(texts), getattr(final, encode)(texts)
        if task == "images" and images:
            pix = ref.preprocess(images)
            check("vision_fp32_max_abs", float(np.abs(ref.graphs["vision"]({"pixel_values": pix})
                                                      - fp32.graphs["vision"]({"pixel_values": pix})).max()),
                  th.fp32_max_abs, False)
            a = np.concatenate([a, ref.encode_images(images)])
            b = np.concatenate([b, final.encode_images(images)])
        if dtype != "fp32":
            limit = th.fp16_min_cosine if dtype == "fp16" else th.int8_min_cosine
            check(f"{dtype}_min_cosine", float(_cosines(a, b).min()), limit, True)
    elif task == "rerank":
        groups = inputs.groups
        qs = [q for q, ps in groups for _ in ps]
        ps = [p for _, group in groups for p in group]
        check("logits_fp32_max_abs", _max_abs(ref.graphs["model"], fp32.graphs["model"],
                                              _raw_feeds(ref, "model", qs, ps)), th.fp32_max_abs, False)
        if dtype != "fp32":
            taus, top_same, passed = [], [], []
            for q, group in groups:
                a, b = ref.score(q, group), final.score(q, group)
                tau = kendall_tau(a, b)
                same = list(np.argsort(-a, kind="stable")[:10]) == list(np.argsort(-b, kind="stable")[:10])
                taus.append(tau)
                top_same.append(same)
                passed.append(same or tau >= th.rerank_min_kendall_tau)
            check(f"{dtype}_queries_passing", float(np.mean(passed)), 1.0, True)
            checks[f"{dtype}_queries_passing"].update(
                {"min_kendall_tau": float(min(taus)), "mean_kendall_tau": float(np.mean(taus)),
                 "top10_identical": float(np.mean(top_same)), "queries": len(groups)})
    elif task == "cite":
        pairs_a = [t for t in texts]
        pairs_b = [texts[(i + 1) % len(texts)] for i in range(len(texts))]
        tag_feeds = _raw_feeds(ref, "tagger", texts, max_length=ref.tagger_max_length)
        check("tagger_fp32_max_abs", _max_abs(ref.graphs["tagger"], fp32.graphs["tagger"], tag_feeds),
              th.fp32_max_abs, False)
        check("scorer_fp32_max_abs", _max_abs(ref.graphs["scorer"], fp32.graphs["scorer"],
                                              _raw_feeds(ref, "scorer", pairs_a, pairs_b)), th.fp32_max_abs, False)
        if dtype != "fp32":
            agree, total = 0, 0
            for fa in tag_feeds:
                la, lb = ref.graphs["tagger"](fa).argmax(-1), final.graphs["tagger"](fa).argmax(-1)
                mask = fa["attention_mask"] == 1
                agree += int((la == lb)[mask].sum())
                total += int(mask.sum())
            check(f"{dtype}_tagger_label_agreement", agree / max(total, 1), th.cite_min_agreement, True)
            thr = ref.support_threshold
            pa = ref.attribute(list(zip(pairs_a, pairs_b, strict=True)))
            pb = final.attribute(list(zip(pairs_a, pairs_b, strict=True)))
            check(f"{dtype}_scorer_decision_agreement", float(np.mean((pa >= thr) == (pb >= thr))),
                  th.cite_min_agreement, True)
    elif task == "decompose":
        from searchsmith.models.decomposer import decompose_source, rewrite_source

        qs = inputs.questions
        sources = [decompose_source(q) for q in qs]
        # a quarter also as conversation rewrites, the previous question as the history
        sources += [rewrite_source([qs[i - 1]], q) for i, q in enumerate(qs[: max(1, n // 4)])]
        feeds = _raw_feeds(ref, "encoder", sources)
        check("encoder_fp32_max_abs", _max_abs(ref.graphs["encoder"], fp32.graphs["encoder"], feeds),
              th.fp32_max_abs, False)
        worst = 0.0
        for f in feeds:
            hidden = ref.graphs["encoder"](f)
            b = len(hidden)
            dec = {"decoder_input_ids": np.full((b, 3), fp32.start_id, dtype=np.int64),
                   "encoder_hidden_states": hidden, "encoder_attention_mask": f["attention_mask"]}
            worst = max(worst, float(np.abs(ref.graphs["decoder"](dec) - fp32.graphs["decoder"](dec)).max()))
        check("decoder_fp32_max_abs", worst, th.fp32_max_abs, False)
        want = reference_generate(sources) if reference_generate else ref.generate(sources)
        got = final.generate(sources)
        same = [a == b for a, b in zip(want, got, strict=True)]
        check(f"{dtype}_identical_generations", float(np.mean(same)), th.decompose_min_identical, True)
        checks[f"{dtype}_identical_generations"]["differing"] = [
            {"source": s, "torch": a, "onnx": b} for s, a, b, ok in zip(sources, want, got, same, strict=True)
            if not ok][:5]
    passed = all(c["passed"] for c in checks.values())
    return {"task": task, "dtype": dtype, "passed": passed, "checks": checks,
            "thresholds": asdict(th), "heldout": inputs.source}


# ----------------------------------------------------------------------------- one bundle


@dataclass
class ModelSource:
    """What a task export needs from its model folder."""

    task: str
    model_dir: Path
    tokenizer_dir: Path
    base_model: str
    trained: bool
    trained_steps: int
    max_length: int
    extra: dict[str, Any] = field(default_factory=dict)


def _model_max(model_dir: Path) -> int:
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if "max_position_embeddings" not in cfg and "encoder" in cfg:
        cfg = cfg["encoder"]
    return int(cfg.get("max_position_embeddings", 512))


def _copy_torch(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("onnx", "openvino", "*.onnx", ".*", "README.md"))


def check_bundle_out(out: str | Path) -> None:
    """Refuse an export ``--out`` that is a file, a folder searchsmith did not write, or a bundle
    beside files of someone else's; an existing bundle alone is replaced (that is what
    exporting again means).

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """
    def listed(folder: Path) -> set[str] | None:
        try:
            manifest = read_manifest(folder)
        except BundleError:
            return None
        return {str(Path(rel)) for rel in manifest.get("files") or {}} | {MANIFEST}

    check_replaceable(out, label="export --out", kind="bundle", listed=listed, replace=True, replace_hint="")


def export_bundle(src: ModelSource, out: Path, opts: ExportOptions) -> dict[str, Any]:
    """Export one model folder to ``out`` (atomic: built beside it, then swapped in).

    Returns:
        The manifest written.

    Raises:
        BundleError: tracing failed, or parity failed without ``allow_drift``.
    """
    import torch
    from searchsmith.models import onnx_graphs as og
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    scheme = opts.int8_scheme(src.task)
    if opts.dtype == "int8":  # weight range "auto" -> s8 with VNNI, s7 without (models/int8_cpu.py)
        scheme = scheme.resolved()
    # read (and check) the held-out inputs before any work: a bad --parity-data file fails here
    inputs = parity_inputs(src.task, opts.thresholds.heldout_texts, scheme.calibration_inputs, opts.parity_data)
    check_bundle_out(out)  # before any work: never replace what searchsmith did not write
    tmp = temp_dir_beside(out)
    work = Path(tempfile.mkdtemp(prefix="searchsmith-export-"))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.tokenizer_dir))
        tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        manifest: dict[str, Any] = {
            "format_version": FORMAT_VERSION, "searchsmith_version": __version__, "task": src.task,
            "base_model": src.base_model, "opset": opts.opset, "dtype": opts.dtype,
            **({"int8": {**scheme.to_json(), "exported_on": int8_isa()}} if opts.dtype == "int8" else {}),
            "exporter": "torch.onnx.export(dynamo=True) + onnxruntime basic optimisation",
            "trained": src.trained, "trained_steps": src.trained_steps, "max_length": src.max_length,
            "allow_drift": opts.allow_drift, "labels": None, "thresholds": {}, **src.extra,
        }
        reference_generate = None
        images = None
        if src.task == "embed":
            specs = og.embedder_graphs(src.model_dir, tokenizer, manifest.get("pooling", "mean"))
        elif src.task == "rerank":
            specs = og.rerank_graphs(src.model_dir, tokenizer)
        elif src.task == "cite":
            specs = og.cite_graphs(src.model_dir, tokenizer)
        elif src.task == "decompose":
            from searchsmith.models.decomposer import Decomposer

            model, meta = og.load_decomposer_model(src.model_dir)
            specs = og.decompose_graphs(src.model_dir, tokenizer, model)
            dec = Decomposer(model, tokenizer, max_source_tokens=src.max_length,
                             max_target_tokens=manifest["generation"]["max_target_tokens"], num_beams=1)
            reference_generate = dec.generate
        else:
            specs, img_model = og.image_graphs(src.model_dir)
            manifest["preprocess"] = _probe_preprocess(img_model)
            images = _demo_images(4)
        emb = next((s for s in specs.values() if s.outputs == ["embeddings"]), None)
        if emb is not None:
            with torch.no_grad():
                manifest["embedding_dim"] = int(emb.module(*emb.example).shape[-1])
        graphs_meta: dict[str, Any] = {}
        fp32_graphs, final_graphs = {}, {}
        model_key = _folder_digest(src.model_dir)
        traced = {name: _traced(spec, name, model_key, src.task, opts.opset, work) for name, spec in specs.items()}
        for name, opt in traced.items():
            fp32_graphs[name] = OrtGraph(opt, ["CPUExecutionProvider"], None)
            graphs_meta[name] = {"file": f"{name}.onnx", **graph_signature(opt)}
        cls = BUNDLE_CLASSES[src.task]
        b32 = cls(tmp, {**manifest, "graphs": graphs_meta, "files": {}}, tokenizer, fp32_graphs, "onnx-cpu")
        for name, opt in traced.items():
            final = tmp / f"{name}.onnx"
            calibration = (calibration_feeds(src.task, b32, name, scheme.calibration_inputs, inputs)
                           if opts.dtype == "int8" and scheme.down_projections == "smooth" else None)
            done = convert_graph(opt, final, opts.dtype, scheme, calibration)
            graphs_meta[name] = {"file": f"{name}.onnx", **graph_signature(final), **({"int8": done} if done else {})}
            # loaded as load_bundle will (7-bit weights on a CPU without VNNI), so parity checks that
            final_graphs[name] = OrtGraph(final, ["CPUExecutionProvider"], None,
                                          int8_weights=scheme.weight_range if opts.dtype == "int8" else None)
        manifest["graphs"] = graphs_meta
        ref = cls(tmp, {**manifest, "files": {}}, tokenizer,
                  {n: TorchGraph(s.module, s.inputs) for n, s in specs.items()}, "torch")
        bfinal = cls(tmp, {**manifest, "files": {}}, tokenizer, final_graphs, "onnx-cpu")
        report = parity_check(src.task, ref, b32, bfinal, opts.dtype, opts.thresholds,
                              reference_generate=reference_generate, images=images, inputs=inputs)
        report["export_time_s"] = round(time.perf_counter() - t0, 2)
        if opts.dtype == "int8":  # which int8 instructions parity ran on, and with which weights
            report["cpu_int8"] = {**int8_cpu_report(), "weight_range": scheme.weight_range,
                                  "requantised_at_load": sum(g.requantised for g in final_graphs.values())}
        if not report["passed"] and not opts.allow_drift:
            failed = {k: v for k, v in report["checks"].items() if not v["passed"]}
            raise BundleError(
                f"export {src.task}: parity failed on held-out inputs ({opts.dtype}, {inputs.source}): "
                + "; ".join(f"{k} = {v['value']:.6g} (limit {v['limit']})" for k, v in failed.items())
                + ". Nothing was written. Try another --dtype, or keep it with --allow-drift "
                "(recorded in the manifest)")
        write_json_atomic(tmp / "parity_report.json", report)
        manifest["parity"] = {"passed": report["passed"], "report": "parity_report.json", "inputs": inputs.source,
                              "checks": {k: v["value"] for k, v in report["checks"].items()}}
        # the figures the serving gates read: this bundle's own (its dtype), not the torch run's
        manifest["heldout_metrics"], manifest["heldout_source"] = bundle_heldout(src, bfinal, opts)
        if opts.torch_weights:
            _copy_torch(src.model_dir, tmp / TORCH_DIR)
            manifest["torch_weights"] = TORCH_DIR + "/"
        manifest["files"] = {str(p.relative_to(tmp)): sha256_file(p)
                             for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != MANIFEST}
        write_json_atomic(tmp / MANIFEST, manifest)
        check_bundle_out(out)  # something may have appeared there meanwhile
        replace_dir(tmp, Path(out))
        log.info("export %s: %s in %.1f s", src.task, out, time.perf_counter() - t0)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _demo_images(n: int) -> list[Any]:
    from PIL import Image
    from searchsmith.models.demo import demo_dir

    paths = sorted((demo_dir() / "images").glob("*.png"))[:n]
    return [Image.open(p).convert("RGB") for p in paths]


def _probe_preprocess(model: Any) -> dict[str, Any]:
    """Recover ``model.preprocess``'s resize and normalisation, so the runtime needs no torch.

    A black and a white image give ``(0 - mean) / std`` and ``(1 - mean) / std`` per channel;
    the resampling filter is the PIL filter whose output matches ``preprocess`` on demo images.

    Raises:
        BundleError: ``preprocess`` is not resize + scale to [0, 1] + per-channel normalisation.
    """
    from PIL import Image

    size = int(model.image_size)
    black = np.asarray(model.preprocess([Image.new("RGB", (8, 8), (0, 0, 0))]), dtype=np.float64)[0]
    white = np.asarray(model.preprocess([Image.new("RGB", (8, 8), (255, 255, 255))]), dtype=np.float64)[0]
    std = 1.0 / (white - black).reshape(3, -1).mean(1)
    mean = -black.reshape(3, -1).mean(1) * std
    images = _demo_images(2)
    want = np.asarray(model.preprocess(images), dtype=np.float32)
    for resample in ("BILINEAR", "BICUBIC", "LANCZOS", "NEAREST", "BOX", "HAMMING"):
        filt = getattr(Image.Resampling, resample)
        got = np.stack([((np.asarray(im.resize((size, size), filt), dtype=np.float32) / 255.0).transpose(2, 0, 1)
                         - mean.reshape(3, 1, 1).astype(np.float32)) / std.reshape(3, 1, 1).astype(np.float32)
                        for im in images])
        if got.shape == want.shape and float(np.abs(got - want).max()) <= 1e-3:
            return {"image_size": size, "mean": mean.tolist(), "std": std.tolist(), "resample": resample}
    raise BundleError("export images: ImageRelevanceModel.preprocess is not a PIL resize + [0, 1] scaling + "
                      "per-channel normalisation that the runtime can reproduce; extend _probe_preprocess")


# ----------------------------------------------------------------------------- runs


def embedder_source(model: str = "default") -> ModelSource:
    """The base sentence-transformers embedder (pretrained: no fine-tuning needed)."""
    from searchsmith.models.hub import model_display_name, read_st_layout, resolve_model

    path = Path(resolve_model(model, field="--model"))
    if not path.is_dir():
        raise ConfigError(f"export embedder --model: {model!r} is not a local folder; download it first")
    pooling, st_max = read_st_layout(path)
    max_len = min(st_max or _model_max(path), _model_max(path))
    return ModelSource("embed", path, path, model_display_name(model), True, 0, max_len, {"pooling": pooling})


def run_source(run_dir: Path, allow_untrained: bool = False) -> ModelSource:
    """Read ``run.json`` (and the task's model metadata) of a training run.

    Raises:
        BundleError: not a run, unknown task, untrained model.
    """
    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not info_path.is_file():
        raise BundleError(f"export: {str(run_dir)!r} has no run.json; pass a training run folder "
                          "(searchsmith train RECIPE.yaml writes one) or a folder of runs")
    info = read_json_object(info_path, "export", error=BundleError)
    spec = run_task(info.get("task"))
    if spec is None:
        raise BundleError(f"export: run.json task {info.get('task')!r} in {str(run_dir)!r} is not one of "
                          f"{run_names()}")
    task = spec.name
    model_dir = run_dir / "model"
    if not model_dir.is_dir():
        raise BundleError(f"export: {str(run_dir)!r} has no model/ folder; the run did not finish "
                          "(rerun searchsmith train to resume it)")
    raw_steps = info.get("steps", 0) or 0
    # a multi-model run (citation: {"tagger": n, "scorer": m}) counts as trained when all are
    steps = (min(int(v or 0) for v in raw_steps.values()) if isinstance(raw_steps, dict) and raw_steps
             else int(raw_steps) if not isinstance(raw_steps, dict) else 0)
    base = str(info.get("base_model", "unknown"))
    extra: dict[str, Any] = {"run": {"recipe": info.get("recipe"), "path": str(run_dir.resolve())}}
    tok_dir = model_dir / spec.tokenizer_subdir
    meta: dict[str, Any] = {}
    if spec.run_meta:  # the model's settings (models/tasks.py: the run-folder layout)
        meta_path = model_dir / spec.run_meta
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        elif task != "decompose":  # a decomposer saved before it wrote one has the defaults
            raise BundleError(f"export {task}: {str(model_dir)!r} has no {spec.run_meta} (the model's labels, "
                              "lengths and thresholds); rerun the recipe")
    if task == "rerank":
        max_len = int(info.get("max_length") or min(_model_max(model_dir), 512))
    elif task == "decompose":
        steps = int(meta.get("trained_steps", steps))
        max_len = int(meta.get("max_source_tokens", 128))
        extra["generation"] = _generation(model_dir, meta)
    elif task == "cite":
        max_len = int(meta.get("max_length") or 128)
        extra["tagger_max_length"] = int(meta.get("tagger_max_length") or max_len)
        per_model = meta.get("trained_steps")
        if isinstance(per_model, dict):  # {"tagger": n, "scorer": m}: both must be trained
            steps = min(int(per_model.get("tagger", 0) or 0), int(per_model.get("scorer", 0) or 0))
        extra["labels"] = list(meta["labels"])
        extra["thresholds"] = {k: v for k, v in meta.items() if "threshold" in k}
        extra["thresholds"].setdefault("support_threshold", 0.5)
    else:
        max_len = int(meta.get("max_length") or 64)
        steps = int(meta.get("trained_steps", steps) or 0)
        extra["thresholds"] = {k: v for k, v in meta.items() if "threshold" in k or k == "temperature"}
    extra["heldout_metrics"] = heldout_metrics(run_dir)
    if steps <= 0 and not allow_untrained:
        raise BundleError(f"export: the run {str(run_dir)!r} records {steps} training steps; an untrained "
                          "model would serve noise. Train it (searchsmith train RECIPE.yaml) first")
    return ModelSource(task, model_dir, tok_dir, base, steps > 0, steps, max_len, extra)


def heldout_metrics(run_dir: Path) -> dict[str, float]:
    """The run's final held-out figures and its untrained baselines (``metrics.json``), flat:
    ``{"ndcg@10": .., "baselines/rewrite_f1_copy_query": .., "baselines/bi_encoder/ndcg@10": ..}``
    (a nested baseline group joins its name and key with "/"; the ``data`` group of counts is
    left out); {} when absent. The serving gates read these names to decide whether a model beat
    its baseline (e.g. the pipeline's rewrite gate)."""
    path = Path(run_dir) / "metrics.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    out = flat_numbers(data.get("final") or {}, "")
    baselines = {k: v for k, v in (data.get("baselines") or {}).items() if k != "data"}
    out.update(flat_numbers(baselines, "baselines/"))
    return out


def flat_numbers(values: Any, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a nested dict, keys joined with "/" after ``prefix``."""
    out: dict[str, float] = {}
    if not isinstance(values, dict):
        return out
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat_numbers(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"{prefix}{key}"] = float(value)
    return out


def bundle_heldout(src: ModelSource, bundle: Bundle, opts: ExportOptions) -> tuple[dict[str, float], str]:
    """``(manifest["heldout_metrics"], manifest["heldout_source"])`` of an export.

    The exported model (``bundle``: its dtype, loaded as ``load_bundle`` will) is scored on the
    run's held-out split by ``opts.heldout_scorer`` (the training layer's evaluator; the
    reranker's falls back to the demo held-out data). Where that cannot be done, the run's own
    ``metrics.json`` figures (its torch model) are recorded, and the source says why.
    """
    run = src.extra.get("run") or {}
    if not run.get("path"):
        return {}, "none: a pretrained model has no held-out split"
    run_dir = Path(run["path"])
    fallback = heldout_metrics(run_dir)
    if opts.heldout_limit == 0:
        return fallback, "run metrics.json (the torch run's figures; export --heldout-limit 0 skipped the bundle's own)"
    if opts.heldout_scorer is None:
        return fallback, "run metrics.json (the torch run's figures; no held-out scorer was given to the export)"
    from searchsmith.models.errors import SearchsmithError

    t0 = time.perf_counter()
    try:
        figures, where = opts.heldout_scorer(src.task, run_dir, bundle, opts.heldout_limit)
    except (SearchsmithError, OSError) as exc:
        log.warning("export %s: the bundle's held-out figures could not be measured (%s); recording the run's",
                    src.task, exc)
        return fallback, f"run metrics.json (the torch run's figures; the bundle's could not be measured: {exc})"
    log.info("export %s: held-out figures of the %s bundle in %.1f s", src.task, opts.dtype, time.perf_counter() - t0)
    return figures, f"bundle:{opts.dtype} on {where}"


def _generation(model_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    gen_path = model_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text(encoding="utf-8")) if gen_path.is_file() else {}

    def pick(key: str) -> int:
        value = gen.get(key, cfg.get(key))
        if value is None:
            raise BundleError(f"export decompose: {key} is not set in {model_dir}/config.json; re-save the model")
        return int(value[0] if isinstance(value, list) else value)

    return {"decoder_start_token_id": pick("decoder_start_token_id"), "eos_token_id": pick("eos_token_id"),
            "pad_token_id": pick("pad_token_id"), "max_target_tokens": int(meta.get("max_target_tokens", 64)),
            "max_nodes": int(meta.get("max_nodes", 8)), "max_history_turns": int(meta.get("max_history_turns", 3)),
            "search": "greedy",
            # constrained decoding (models/constrained.py): the runtime's loop applies the same
            # token-level grammar / copy constraint as Decomposer.generate
            "constrained": bool(meta.get("constrained", False)),
            "decompose_vocab": [int(t) for t in meta.get("decompose_vocab", [])],
            "rewrite_vocab": [int(t) for t in meta.get("rewrite_vocab", [])],
            # rewrites as edits (models/rewrite_edit.py) and the graph-type head, as in
            # decomposer.json; older runs have neither (full rewrites, no head)
            "rewrite_target": str(meta.get("rewrite_target", "full")),
            "type_head": meta.get("type_head"), "rewrite_head": meta.get("rewrite_head")}


def export_run(run_dir: str | Path, out: str | Path, opts: ExportOptions | None = None) -> dict[str, Any]:
    """Export one training run to a bundle folder; return its manifest."""
    opts = opts or ExportOptions()
    return export_bundle(run_source(Path(run_dir), opts.allow_untrained), Path(out), opts)


def export_embedder(out: str | Path, model: str = "default", opts: ExportOptions | None = None) -> dict[str, Any]:
    """Export the base embedder (mean pooling and L2 normalisation inside the graph)."""
    return export_bundle(embedder_source(model), Path(out), opts or ExportOptions())


def find_runs(folder: Path) -> list[Path]:
    """The run folders (holding ``run.json``) directly inside ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "run.json").is_file())


__all__ = ["ExportOptions", "ModelSource", "ParityThresholds", "bundle_heldout", "convert_graph",
           "embedder_source", "flat_numbers", "heldout_metrics",
           "calibration_feeds", "export_bundle", "export_embedder", "export_graph", "export_run", "find_runs",
           "graph_signature",
           "heldout_groups", "heldout_texts", "kendall_tau", "optimize_graph", "parity_check", "run_source"]
