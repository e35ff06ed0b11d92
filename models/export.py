"""``searchsmith export``: trained runs (and the base embedder) to verified ONNX bundles.

::

    searchsmith export runs/reranker --out bundles/reranker --dtype int8
    searchsmith export runs/ --out bundles/ --embedder default     # every run in runs/, + embedder
    searchsmith export embedder --out bundles/embedder [--model default]

A bundle is a folder::

    manifest.json        format version, task, base model, opset, dtype, graphs (inputs and
                         outputs with shapes and dtypes), labels, thresholds, max_length,
                         sha256 of every other file (``files``), searchsmith version,
                         allow_drift, parity verdict, and ``manifest_sha256``: the sha256 of
                         the rest of the manifest (:func:`manifest_digest`), which tells an
                         edit of it even where the record below is gone
    parity_report.json   every parity figure measured by the export
    <graph>.onnx         model.onnx | tagger.onnx + scorer.onnx | encoder.onnx + decoder.onnx |
                         text.onnx + vision.onnx
    tokenizer/           the tokenizer files
    torch/               (only with --torch-weights) the original HF/torch model, for backend="torch"
    .searchsmith-written.json   the sha256 of every file the export wrote, manifest.json included:
                         what the next export into the folder may replace (nothing else), and
                         what tells a manifest.json edited since (:func:`edited_manifest`)

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
torch model (:mod:`~searchsmith.models.parity`; thresholds are :class:`ParityThresholds`). A
failed check raises BundleError and writes nothing, unless ``--allow-drift``, which is
recorded in the manifest. A training run is read as an export source by
:mod:`~searchsmith.models.runs` (its folder layout per task is the registry's,
``models/tasks.py``); the command line is ``training/export_cli.py``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models import __version__
from searchsmith.models.config import is_int
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.int8_cpu import int8_cpu_report, int8_isa
from searchsmith.models.io import (
    WRITTEN_RECORD,
    WrittenFiles,
    being_written,
    check_replaceable,
    files_matching,
    files_sha256,
    give_plain_modes,
    json_object_problem,
    process_temp_dir,
    remove_dead_temps,
    replace_dir,
    sha256_file,
    temp_dir_beside,
    write_json_atomic,
)
from searchsmith.models.onnx_quant import (
    INT8_DEFAULTS,
    Int8Scheme,
    check_fp32_blocks,
    quantize_int8,
)
from searchsmith.models.parity import (
    Dtype,
    ParityThresholds,
    calibration_feeds,
    kendall_tau,
    parity_check,
)
from searchsmith.models.parity_inputs import heldout_groups, heldout_texts, parity_inputs
from searchsmith.models.pretrained import check_model_files
from searchsmith.models.runs import (
    ModelSource,
    embedder_source,
    find_runs,
    flat_numbers,
    heldout_metrics,
    run_source,
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
from searchsmith.models.tokenizer import load_run_tokenizer

log = logging.getLogger(__name__)

# (task, run_dir, bundle, limit) -> (held-out figures in the manifest's naming, where they come from)
HeldoutScorer = Callable[[str, Path, Bundle, "int | None"], tuple[dict[str, float], str]]
EXPORT_WORK_PREFIX = "searchsmith-export-pid"  # + PID: the temporary folder an export traces its graphs in
_ORT_TO_NP = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
              "tensor(float16)": "float16"}


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
        force: replace a bundle whose manifest.json was edited since its export wrote it (the
            edit is lost; :func:`edited_manifest`). Files the export did not write are refused
            all the same: ``force`` never deletes them.
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
    force: bool = False

    def __post_init__(self) -> None:
        if self.int8_fuse_attention is not None and not isinstance(self.int8_fuse_attention, bool):
            raise ConfigError(f"export --int8-attention: expected fused or unfused, got {self.int8_fuse_attention!r}")
        replace(Int8Scheme(), **self._int8_overrides())  # the overrides are checked here, whatever the task
        if self.dtype not in ("fp32", "fp16", "int8"):
            raise ConfigError(f"export --dtype: {self.dtype!r} is not one of ['fp32', 'fp16', 'int8']")
        if not 14 <= self.opset <= 23:
            raise ConfigError(f"export --opset: {self.opset} is outside 14..23 (18 is the default)")
        n = self.heldout_limit
        if n is not None and not is_int(n, 0):
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
        """The task's int8 defaults with this export's overrides.

        Raises:
            ConfigError: ``--int8-smooth-alpha`` where the down projections are not smoothed (it
                was taken and did nothing).
        """
        scheme = replace(INT8_DEFAULTS.get(task, Int8Scheme()), **self._int8_overrides())
        if self.int8_smooth_alpha is not None and scheme.down_projections != "smooth":
            raise ConfigError(f"export --int8-smooth-alpha: sets SmoothQuant's strength for --int8-down-projections "
                              f"smooth, and this {task} export's down projections are {scheme.down_projections}"
                              f"{'' if self.int8_down_projections else ' (its default)'}; add "
                              "--int8-down-projections smooth, or drop --int8-smooth-alpha")
        return scheme


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
    cache_dir = process_temp_dir("searchsmith-trace-")  # deleted at exit
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

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the signature only: no fusions
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def rows(xs: Any) -> list[dict[str, Any]]:
        return [{"name": x.name, "dtype": _ORT_TO_NP.get(x.type, x.type),
                 "shape": [d if isinstance(d, int) else str(d) for d in x.shape]} for x in xs]

    return {"inputs": rows(sess.get_inputs()), "outputs": rows(sess.get_outputs())}


# ----------------------------------------------------------------------------- one bundle


# what --torch-weights leaves out of a run's model/ (matched against each name, at every depth)
_TORCH_SKIPPED = ("onnx", "openvino", "*.onnx", ".*", "README.md")


def torch_files(model_dir: Path) -> list[str]:
    """The files ``--torch-weights`` copies of ``model_dir`` into ``torch/`` (paths in it, ``/``)."""
    files = (p.relative_to(model_dir) for p in model_dir.rglob("*") if p.is_file())
    return sorted(f.as_posix() for f in files
                  if not any(fnmatch.fnmatch(part, pat) for part in f.parts for pat in _TORCH_SKIPPED))


def _copy_torch(src: Path, dst: Path) -> None:
    for rel in torch_files(src):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst / rel)


# The graphs an export writes (the keys of models/onnx_graphs.py's *_graphs; a test checks): with
# manifest.json and parity_report.json, the names of a bundle's own files at its top level.
BUNDLE_GRAPHS = ("model", "tagger", "scorer", "encoder", "decoder", "text", "vision")
_BUNDLE_TOP = (MANIFEST, "parity_report.json", *(f"{g}.onnx" for g in BUNDLE_GRAPHS))


def bundle_layout_files(folder: Path, writes: Iterable[str] = ()) -> set[str] | None:
    """The files of ``folder`` that an export writes, when the folder is a bundle by its layout
    alone (an older export's, without :data:`WRITTEN_RECORD`, whose manifest.json is corrupt or
    missing): it holds a graph (``model.onnx``, ...) and a ``tokenizer/`` file or
    ``parity_report.json``. ``writes``: the ``tokenizer/`` and ``torch/`` files this export
    writes (what its tokenizer's save wrote, :func:`torch_files`), by exact path; the names
    that vary by tokenizer and model are never guessed by pattern. None when it is not a bundle;
    files of other names in it are left out of the set, so that
    :func:`~searchsmith.models.io.check_replaceable` refuses to replace them (as
    :func:`searchsmith.serving.index.index_layout_files` does for an index)."""
    names = sorted({*_BUNDLE_TOP, *writes})
    ours = files_matching(folder, re.compile("|".join(re.escape(n) for n in names)))
    graph = any(f.endswith(".onnx") for f in ours)
    if graph and ("parity_report.json" in ours or any(f.startswith(f"{TOKENIZER_DIR}/") for f in ours)):
        return {str(Path(f)) for f in ours}
    return None


def written_files(folder: Path) -> WrittenFiles | None:
    """The record an export keeps in its bundle (:data:`WRITTEN_RECORD`: the sha256 of every
    file it wrote, manifest.json included); None when the bundle has none (an export older than
    the record) or it is unreadable."""
    record = WrittenFiles.read(folder / WRITTEN_RECORD)
    return record if record.hashes else None


def unreadable_record(folder: Path) -> str | None:
    """What keeps ``folder``'s :data:`WRITTEN_RECORD` from telling the files its export wrote,
    to follow its path in a message (``"is not valid JSON (...: line 2 column 1 (char 23))"``,
    ``"names no file"``); None when it tells them, or is absent (an export older than the
    record: :func:`written_files`)."""
    path = folder / WRITTEN_RECORD
    if not path.exists():
        return None
    problem = json_object_problem(path)
    if problem is not None:
        return problem
    if written_files(folder) is not None:
        return None
    return "names no file" if not json.loads(path.read_text(encoding="utf-8")) else "does not map each file to its sha256"


def check_record_readable(out: str | Path) -> None:
    """Refuse an export ``--out`` whose :data:`WRITTEN_RECORD` cannot be read
    (:func:`unreadable_record`): without it nothing tells which files there the export wrote,
    and the record itself would count as a file of someone else's; ``--force`` does not skip
    this (it replaces an edited manifest, never a file the export may not have written).

    Raises:
        ValidationError: naming the record, what is wrong with it (a JSON error with its line
            and column) and the fix; nothing is touched.
    """
    out = Path(out)
    if not out.is_dir() or out.is_symlink():
        return
    problem = unreadable_record(out)
    if problem is not None:
        raise ValidationError(
            f"export --out {out}: {out / WRITTEN_RECORD}, the export's record of the files it wrote there, {problem}: "
            "nothing tells which files in the folder the export wrote, so nothing was replaced. Delete that record "
            "(the bundle's files are then known by its manifest.json, as an older export's) and export again, or "
            "give another --out")


# the manifest's own check, written in it: what tells an edit where WRITTEN_RECORD is gone
MANIFEST_DIGEST = "manifest_sha256"


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """The sha256 a bundle manifest carries as :data:`MANIFEST_DIGEST`: of the manifest without
    that field, as canonical JSON (``json.dumps(..., sort_keys=True, separators=(",", ":"))``,
    ASCII escapes), so it is the same for the dict an export writes and the one read back,
    whatever the file's indentation or key order."""
    rest = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    # through JSON once as write_json_atomic writes it (default=str): tuples, paths and int keys
    # become what a reader of the file gets
    plain = json.loads(json.dumps(rest, default=str))
    return hashlib.sha256(json.dumps(plain, sort_keys=True, separators=(",", ":")).encode("ascii")).hexdigest()


def _manifest_edit(folder: Path) -> str | None:
    """How ``folder``'s manifest.json shows an edit since its export wrote it, for a message;
    None when it shows none (:func:`edited_manifest`)."""
    path = folder / MANIFEST
    record = written_files(folder)
    if record is not None:
        if record.state(path) != "edited":
            return None
        problem = json_object_problem(path)  # an edit gone wrong: where to repair it
        return f"its sha256 is not the one the export recorded in {WRITTEN_RECORD}" + (f"; it {problem}" if problem else "")
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # no content to check against its digest: unreadable_manifest tells it
    if not isinstance(manifest, dict) or MANIFEST_DIGEST not in manifest:
        return None
    if manifest[MANIFEST_DIGEST] == manifest_digest(manifest):
        return None
    return f"its content no longer matches the {MANIFEST_DIGEST} the export wrote in it"


def edited_manifest(folder: Path) -> Path | None:
    """``folder``'s manifest.json when it changed since the export wrote it (thresholds or gates
    tuned by hand, or damaged): its sha256 is not the one in the bundle's :data:`WRITTEN_RECORD`,
    or, the record gone, its content no longer matches its own :data:`MANIFEST_DIGEST`. None
    when it is as written, absent, or shows neither (a bundle older than both: its manifest
    counts as the export's own, as it did before). Without the record, a manifest that cannot
    be read shows neither: :func:`unreadable_manifest` tells it."""
    return folder / MANIFEST if _manifest_edit(folder) is not None else None


def unreadable_manifest(folder: Path) -> str | None:
    """What keeps ``folder``'s manifest.json from being read (``"is not valid JSON (Expecting
    ',' delimiter: line 3 column 5 (char 31))"``) when no :data:`WRITTEN_RECORD` shows that the
    export wrote it so; None when it reads, is absent, or the bundle has the record (which tells
    whether it changed since: :func:`edited_manifest`; the export never writes one that does not
    read).

    Nothing tells such a manifest from a hand edit gone wrong (a comma missing after a tuned
    threshold), so it is not replaced without ``--force`` (:func:`check_manifest_unedited`)."""
    path = folder / MANIFEST
    if written_files(folder) is not None or not path.is_file():
        return None
    return json_object_problem(path)


def check_manifest_unedited(out: str | Path) -> None:
    """Refuse an export ``--out`` whose manifest.json was edited since the export wrote it
    (:func:`edited_manifest`), or cannot be read with nothing to show the export wrote it so
    (:func:`unreadable_manifest`), before any work; ``--force`` skips this check, not the one of
    its :data:`WRITTEN_RECORD` made first (:func:`check_record_readable`).

    Raises:
        ValidationError: naming the file, the edit or the JSON error (line and column), and the
            fix; nothing is touched.
    """
    out = Path(out)
    if not out.is_dir() or out.is_symlink():
        return
    check_record_readable(out)  # here too: the command line checks every bundle before any export
    problem = unreadable_manifest(out)
    if problem is not None:
        raise ValidationError(
            f"export --out {out}: {out / MANIFEST} {problem}, and no {WRITTEN_RECORD} shows that the export wrote it "
            "so: it may be a hand edit gone wrong, which exporting again would replace and lose, so nothing was "
            "exported. Repair the JSON where it says, or add --force to rebuild the bundle (copy what you changed "
            "first), or give another --out")
    how = _manifest_edit(out)
    if how is not None:
        raise ValidationError(
            f"export --out {out}: {out / MANIFEST} was edited since the export wrote it ({how}); exporting again "
            "would replace it and lose the edit, so nothing was exported. Add --force to replace it (copy what you "
            "changed first), or give another --out")


def check_bundle_out(out: str | Path, writes: Iterable[str] = (), force: bool = False) -> None:
    """Refuse an export ``--out`` that is a file, a folder searchsmith did not write, a bundle
    beside files of someone else's, or (without ``force``) a bundle whose manifest.json was
    edited since its export wrote it, or cannot be read while nothing shows the export wrote it
    so (:func:`check_manifest_unedited`: it may be a hand edit gone wrong); an existing bundle
    alone is replaced (that is what exporting again means), also one whose manifest.json is
    missing when the folder holds nothing but files an export writes (else no export could mend
    it in place, and loading it says to re-export), and with ``force`` one whose manifest.json
    cannot be read.

    A bundle's own files are exactly those its export wrote: the ones its
    :data:`WRITTEN_RECORD` names; in an older bundle without one, those its manifest lists, or
    (its manifest unreadable) :func:`bundle_layout_files` with ``writes``, the ``tokenizer/``
    and ``torch/`` files this export writes. Anything else (a user's ``tokenizer/notes.json``)
    is refused, named; so is a bundle whose record cannot be read, with or without ``force``,
    named as that (:func:`check_record_readable`).

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """
    def listed(folder: Path) -> set[str] | None:
        record = written_files(folder)
        if record is not None:
            return {str(Path(rel)) for rel in record.hashes or {}} | {WRITTEN_RECORD}
        try:
            manifest = read_manifest(folder)
        except BundleError:
            # a manifest.json that cannot be read leaves the bundle's files as its only mark: the
            # folder is ours when they are (a file of another name in it is refused all the same)
            return bundle_layout_files(folder, writes)
        return {str(Path(rel)) for rel in manifest.get("files") or {}} | {MANIFEST}

    check_record_readable(out)  # else check_replaceable names the record as a file of someone else's
    check_replaceable(out, label="export --out", kind="bundle", listed=listed, replace=True, replace_hint="")
    if not force:
        check_manifest_unedited(out)


def export_bundle(src: ModelSource, out: Path, opts: ExportOptions,
                  before_swap: Callable[[], None] | None = None) -> dict[str, Any]:
    """Export one model folder to ``out`` (atomic: built beside it, then swapped in).

    Args:
        before_swap: called when the bundle is complete, just before it is moved to ``out``;
            what it raises abandons the bundle (its temporary folder is removed, ``out`` is left
            as it was). :func:`export_run` checks there that the run was not rewritten meanwhile.

    Returns:
        The manifest written.

    Raises:
        BundleError: tracing failed, or parity failed without ``allow_drift``.
    """
    import torch
    from searchsmith.models import onnx_graphs as og

    t0 = time.perf_counter()
    scheme = opts.int8_scheme(src.task)
    if opts.dtype == "int8":  # weight range "auto" -> s8 with VNNI, s7 without (models/int8_cpu.py)
        scheme = scheme.resolved()
        check_fp32_blocks(opts.int8_fp32_blocks, src.model_dir)
    # read (and check) the held-out inputs before any work: a bad --parity-data file fails here
    inputs = parity_inputs(src.task, opts.thresholds.heldout_texts, scheme.calibration_inputs, opts.parity_data)
    tokenizer = load_run_tokenizer(src.tokenizer_dir, src.model_dir, what=f"export {src.task}")
    # the graphs are traced here; a killed export's folder is removed by the next one
    remove_dead_temps(Path(tempfile.gettempdir()), f"{EXPORT_WORK_PREFIX}*", marker=EXPORT_WORK_PREFIX)
    work = Path(tempfile.mkdtemp(prefix=f"{EXPORT_WORK_PREFIX}{os.getpid()}-"))
    tmp: Path | None = None
    try:
        # the tokenizer's files are whatever its save writes: saved first, so that the check of
        # --out knows them by name (an older bundle without a record of its files)
        tokenizer.save_pretrained(str(work / TOKENIZER_DIR))
        writes = {f"{TOKENIZER_DIR}/{p.relative_to(work / TOKENIZER_DIR).as_posix()}"
                  for p in (work / TOKENIZER_DIR).rglob("*") if p.is_file()}
        writes |= {f"{TORCH_DIR}/{rel}" for rel in torch_files(src.model_dir)}
        check_bundle_out(out, writes, opts.force)  # before any work: never replace what searchsmith did not write
        tmp = temp_dir_beside(out)
        shutil.copytree(work / TOKENIZER_DIR, tmp / TOKENIZER_DIR)
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
        elif src.task == "read":
            specs = og.read_graphs(src.model_dir, tokenizer)
        elif src.task == "decompose":
            from searchsmith.models.decomposer import Decomposer

            model, meta = og.load_decomposer_model(src.model_dir)
            specs = og.decompose_graphs(src.model_dir, tokenizer, model)
            gen = manifest["generation"]
            if gen.get("arch") == "tagger":
                from searchsmith.models.decomposer import TAGGER, add_head_json, depth_head_json

                gen["depth_head"] = depth_head_json(model, int(gen["tag_depth"]))
                phrases = list(gen.pop("add_phrases", None) or [])
                if phrases:  # add tags: the head's last labels, with their phrases
                    gen["add_head"] = add_head_json(model, phrases)
                dec = Decomposer(model, tokenizer, TAGGER, max_source_tokens=src.max_length,
                                 max_nodes=int(gen["max_nodes"]), tag_depth=int(gen["tag_depth"]),
                                 tag_drop=bool(gen.get("tag_drop", False)),
                                 switch_penalty=float(gen.get("switch_penalty", 0.0)), add_phrases=phrases,
                                 choice_template=bool(gen.get("choice_template", False)))
            else:
                dec = Decomposer(model, tokenizer, max_source_tokens=src.max_length,
                                 max_target_tokens=gen["max_target_tokens"], num_beams=1)
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
            if opts.dtype == "fp32":  # the same graph: its signature and session are the fp32 ones
                final_graphs[name] = fp32_graphs[name]
                continue
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
        # tokenizer and torch/ files are written by libraries (safetensors: 0600) or copied with a
        # run's modes: a bundle's files get the modes of any file this process writes
        give_plain_modes(tmp)
        # every file but the top-level manifest.json itself (a torch/ or tokenizer/ file of that
        # name is one of the bundle's files like any other)
        manifest["files"] = files_sha256(tmp)
        manifest[MANIFEST_DIGEST] = manifest_digest(manifest)
        write_json_atomic(tmp / MANIFEST, manifest)
        # what this export wrote, manifest.json included: the exact files the next export may
        # replace (check_bundle_out), and what tells a manifest edited since from this one
        WrittenFiles(tmp / WRITTEN_RECORD, {**manifest["files"], MANIFEST: sha256_file(tmp / MANIFEST)}).save()
        check_bundle_out(out, writes, opts.force)  # something may have appeared there meanwhile
        if before_swap is not None:
            before_swap()
        replace_dir(tmp, Path(out))
        log.info("export %s: %s in %.1f s", src.task, out, time.perf_counter() - t0)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if tmp is not None and tmp.exists():
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


def damaged_run_fix(run_dir: Path) -> str:
    """What to do about a run whose model files are damaged (the end of a message)."""
    return (f"the run folder {str(run_dir)!r} is damaged: copy it again, or rerun its recipe into it "
            f"(searchsmith train RECIPE.yaml --output-dir {run_dir}: it resumes from the newest checkpoint in "
            "checkpoints/, if any, else retrains)")


def run_files_state(run_dir: Path) -> dict[str, tuple[int, int, int]]:
    """``{relative path: (size, mtime_ns, inode)}`` of what an export reads of a run and a
    rerun of ``searchsmith train`` rewrites: the files directly in the run folder (run.json,
    metrics.json, split.json, ...) and every file under ``model/`` (replaced whole by a save:
    new inodes). ``cache/`` and ``checkpoints/`` are left out (the held-out scorer writes the
    cache; the export does not read checkpoints)."""
    state = {}
    files = [p for p in run_dir.iterdir() if p.is_file()] if run_dir.is_dir() else []
    if (run_dir / "model").is_dir():
        files += [p for p in (run_dir / "model").rglob("*") if p.is_file()]
    for p in files:
        try:
            st = p.stat()
        except FileNotFoundError:  # removed while listed: a rewrite, seen by the comparison
            continue
        state[str(p.relative_to(run_dir))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return state


def check_run_unchanged(run_dir: Path, before: dict[str, tuple[int, int, int]] | None, out: Path) -> None:
    """Refuse to write ``out`` from a run that a trainer holds now or that changed since
    ``before`` (:func:`run_files_state` when the export began; None: the lock only).

    Checked again just before the bundle is moved into place: ``searchsmith train --force``
    started during an export (minutes) rewrites the run it reads. What remains is the instant
    between this check and the rename.

    Raises:
        BundleError: naming the run, what changed, and the fix (export again after training).
    """
    keep = ""  # at the start: nothing was made yet
    if before is not None:
        keep = f"; no bundle was written ({out} was left as it was)" if out.exists() else "; no bundle was written"
    fix = "rerun the export when training has finished"
    if being_written(run_dir):
        raise BundleError(f"export: {run_dir} is being trained now (searchsmith train holds its lock){keep}; {fix}")
    if before is None:
        return
    now = run_files_state(run_dir)
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise BundleError(f"export: {run_dir} was rewritten while it was exported ({shown} changed){keep}; {fix}")


def export_run(run_dir: str | Path, out: str | Path, opts: ExportOptions | None = None) -> dict[str, Any]:
    """Export one training run to a bundle folder; return its manifest.

    Raises:
        BundleError: not a run, an untrained one, or one whose model/ holds a damaged file
            (named, before any work); a run a trainer holds, at the start or when the bundle is
            done, or one whose files changed meanwhile (the bundle is then not written).
    """
    opts = opts or ExportOptions()
    run_dir = Path(run_dir)
    check_run_unchanged(run_dir, None, Path(out))
    before = run_files_state(run_dir)  # before anything is read
    if (run_dir / "run.json").is_file() and (run_dir / "model").is_dir():
        # before run_source, which reads model/config.json, and before transformers does
        check_model_files(run_dir / "model", "export", damaged_run_fix(run_dir))
    return export_bundle(run_source(run_dir, opts.allow_untrained), Path(out), opts,
                         before_swap=lambda: check_run_unchanged(run_dir, before, Path(out)))


def export_embedder(out: str | Path, model: str = "default", opts: ExportOptions | None = None) -> dict[str, Any]:
    """Export the base embedder (mean pooling and L2 normalisation inside the graph)."""
    return export_bundle(embedder_source(model), Path(out), opts or ExportOptions())


__all__ = ["BUNDLE_GRAPHS", "ExportOptions", "MANIFEST_DIGEST", "ModelSource", "ParityThresholds", "bundle_heldout", "bundle_layout_files", "convert_graph",
           "edited_manifest", "unreadable_manifest", "unreadable_record", "embedder_source", "flat_numbers", "heldout_metrics",
           "calibration_feeds", "check_bundle_out", "check_manifest_unedited", "check_record_readable", "check_run_unchanged", "damaged_run_fix", "export_bundle", "export_embedder", "export_graph", "export_run", "find_runs",
           "graph_signature",
           "heldout_groups", "heldout_texts", "kendall_tau", "manifest_digest", "optimize_graph", "parity_check", "run_files_state",
           "run_source", "torch_files", "written_files"]
