"""``searchsmith export``: the command line of :mod:`searchsmith.models.export`.

The export itself lives on the models floor; this command wires it to the training layer's
held-out evaluator (:func:`searchsmith.training.evaluate.heldout_figures`), so each bundle's
manifest records its own held-out figures (what the serving gates read).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from searchsmith.models.console import quiet_block
from searchsmith.models.errors import BundleError, ConfigError, SearchsmithError
from searchsmith.models.export import (
    ExportOptions,
    ParityThresholds,
    check_manifest_unedited,
    export_embedder,
    export_run,
    find_runs,
)
from searchsmith.models.int8_cpu import WEIGHT_RANGES
from searchsmith.models.io import being_written
from searchsmith.models.onnx_quant import ACTIVATION_MODES, DOWN_PROJECTION_MODES, int8_default_text
from searchsmith.training.cli import RUN_MARK
from searchsmith.training.evaluate import heldout_figures

__all__ = ["configure_export"]


def configure_export(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Export trained runs to ONNX bundles (manifest.json with sha256, parity_report.json). "
        "RUN_DIR is a training run (run.json names the task: rerank, decompose, cite, images), a "
        "folder of runs (each exported to BUNDLE_DIR/<run name>), or the word 'embedder' for the base "
        "embedder (--model, mean pooling + L2 normalisation inside the graph). With a folder of runs, "
        "--embedder MODEL also writes BUNDLE_DIR/embedder.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="training run, folder of runs, or 'embedder'")
    parser.add_argument("--out", required=True, metavar="BUNDLE_DIR", help="bundle folder to write: a new or empty folder, or a bundle (replaced, also one whose "
                        "manifest.json is missing when it holds only files an export writes); anything else is refused, "
                        "as is a bundle whose manifest.json was edited since the export wrote it, or is not valid JSON "
                        "with no record that the export wrote it so (see --force)")
    parser.add_argument("--force", action="store_true",
                        help="replace a bundle whose manifest.json was edited since the export wrote it (hand-tuned "
                             "thresholds or gates: the edit is lost), or is not valid JSON; files the export did not "
                             "write are refused all the same")
    parser.add_argument("--dtype", choices=["fp32", "fp16", "int8"], default="fp32",
                        help="fp32; int8 = dynamic quantisation for CPU; fp16 for GPU (default %(default)s)")
    parser.add_argument("--allow-drift", action="store_true",
                        help="keep a bundle that fails parity (recorded in the manifest)")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (default %(default)s)")
    parser.add_argument("--torch-weights", action="store_true",
                        help="also copy the torch model into the bundle (for load_bundle(backend='torch'))")
    # every int8 default below is read from INT8_DEFAULTS / Int8Scheme, never restated by hand
    parser.add_argument("--int8-fp32-blocks", type=int, default=None, metavar="N",
                        help="with --dtype int8: keep the first N transformer blocks in fp32, N below the model's "
                             "block count (0 quantises every block: faster, less agreement) (default: "
                             f"{int8_default_text('fp32_blocks')})")
    parser.add_argument("--int8-attention", choices=["fused", "unfused"], default=None,
                        help="with --dtype int8: fuse self-attention into QAttention before quantising; the "
                             "decomposer's graphs do not match it (default: "
                             f"{int8_default_text('fuse_attention')})")
    parser.add_argument("--int8-down-projections", choices=list(DOWN_PROJECTION_MODES), default=None,
                        help="with --dtype int8: the feed-forward down-projections: keep fp32, SmoothQuant "
                             "then int8 (calibrated on demo inputs), or int8 as they are (default: "
                             f"{int8_default_text('down_projections')})")
    parser.add_argument("--int8-smooth-alpha", type=float, default=None, metavar="A",
                        help="with --int8-down-projections smooth: migration strength in [0, 1] (default: "
                             f"{int8_default_text('smooth_alpha')})")
    parser.add_argument("--int8-weight-range", choices=list(WEIGHT_RANGES), default=None,
                        help="with --dtype int8: s8 = 8-bit weights; s7 = 7-bit weights, whose u8 x s8 products "
                             "cannot saturate on CPUs without VNNI (AVX2); auto = s8 on a CPU with VNNI, s7 "
                             "otherwise (SEARCHSMITH_CPU_INT8 overrides the detected CPU). A bundle with s8 "
                             "weights loaded on a CPU without VNNI is re-quantised to 7 bits in memory (default: "
                             f"{int8_default_text('weight_range')})")
    parser.add_argument("--parity-data", default=None, metavar="FILE",
                        help="check parity (and calibrate int8) on your inputs instead of the demo data: a .txt "
                             "file (one text per line) or .jsonl ({\"text\": ...} or {\"query\": ..., "
                             "\"passages\": [...]} per line; the reranker needs the latter)")
    parser.add_argument("--parity-inputs", type=int, default=ParityThresholds.heldout_texts, metavar="N",
                        help="held-out texts parity runs on (rerank: N/4 groups; default %(default)s)")
    parser.add_argument("--int8-activations", choices=list(ACTIVATION_MODES), default=None,
                        help="with --dtype int8: one activation scale per call (tensor: ONNX Runtime's dynamic "
                             "quantisation) or one per token (token: about half the error, slower; attention unfused) "
                             f"(default: {int8_default_text('activations')})")
    parser.add_argument("--heldout-limit", type=int, default=None, metavar="N",
                        help="the manifest records the exported model's own held-out figures (heldout_metrics, read "
                             "by the pipeline's gates), measured on the run's held-out split; score only its first N "
                             "items (faster on a large split; the baselines stay the run's), or 0 to skip and record "
                             "the torch run's figures (default: all)")
    parser.add_argument("--model", default=None, help="with RUN_DIR=embedder: the embedder to export (default: "
                        "the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--embedder", help="with a folder of runs: also export this embedder into BUNDLE_DIR/embedder")
    parser.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    opts = ExportOptions(dtype=args.dtype, opset=args.opset, allow_drift=args.allow_drift,
                         torch_weights=args.torch_weights, int8_fp32_blocks=args.int8_fp32_blocks,
                         int8_fuse_attention=None if args.int8_attention is None else args.int8_attention == "fused",
                         int8_down_projections=args.int8_down_projections, int8_smooth_alpha=args.int8_smooth_alpha,
                         int8_activations=args.int8_activations, int8_weight_range=args.int8_weight_range,
                         thresholds=ParityThresholds(heldout_texts=args.parity_inputs), parity_data=args.parity_data,
                         heldout_limit=args.heldout_limit, heldout_scorer=heldout_figures, force=args.force)
    for name, value in (("RUN_DIR", args.run_dir), ("--out", args.out)):
        if not str(value).strip():  # Path("") is ".": the current folder
            raise ConfigError(f"export {name} is empty: give a folder ('export RUN_DIR --out BUNDLE_DIR', or "
                              "'export embedder --out BUNDLE_DIR')")
    # '' would silently mean the default (--model), nothing (--embedder) or the demo inputs (--parity-data)
    for name, value, what in (("--model", args.model, "an embedder name or folder, or leave the option out for "
                                                      "the default embedder"),
                              ("--embedder", args.embedder, "an embedder name or folder, or leave the option out"),
                              ("--parity-data", args.parity_data, "a .txt or .jsonl file, or leave the option out "
                                                                  "for the demo inputs")):
        if value is not None and not str(value).strip():
            raise ConfigError(f"export {name} is empty: give {what}")
    # an option that does not apply is refused, not ignored: the user meant something by it
    int8_set = [flag for flag, value in (
        ("--int8-fp32-blocks", args.int8_fp32_blocks), ("--int8-attention", args.int8_attention),
        ("--int8-down-projections", args.int8_down_projections), ("--int8-smooth-alpha", args.int8_smooth_alpha),
        ("--int8-activations", args.int8_activations), ("--int8-weight-range", args.int8_weight_range))
        if value is not None]
    if int8_set and args.dtype != "int8":
        raise ConfigError(f"export {', '.join(int8_set)}: set(s) the int8 export, and this export is --dtype "
                          f"{args.dtype}; add --dtype int8, or drop the option(s)")
    if args.model is not None and args.run_dir != "embedder":
        raise ConfigError("export --model: names the embedder of 'export embedder --out DIR'; a run's bundle is "
                          "its trained model (to add an embedder beside a folder of runs: --embedder)")
    model = args.model or "default"
    out = Path(args.out)
    # (bundle folder, what it is, the export to run); checked first, so a bad folder of runs
    # fails before anything is exported
    jobs: list[tuple[Path, str, Callable[[], dict[str, Any]]]] = []
    read_runs: list[Path] = []  # the run folders the jobs read
    if args.run_dir == "embedder":
        jobs.append((out, f"embedder {model}", lambda: export_embedder(out, model, opts)))
    else:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise ConfigError(f"export RUN_DIR: {str(run_dir)!r} is not a folder")
        if (run_dir / "run.json").is_file():
            if args.embedder:
                raise ConfigError("export --embedder: only with a folder of runs; export the embedder on its "
                                  "own with: searchsmith export embedder --out DIR")
            jobs.append((out, f"run {run_dir}", lambda: export_run(run_dir, out, opts)))
            read_runs.append(run_dir)
        else:
            runs = find_runs(run_dir)
            if (run_dir / RUN_MARK).is_file():  # a run that has not finished: no run.json yet
                raise BundleError(f"export: {str(run_dir)!r} is a training run that has not finished (no run.json "
                                  "yet); wait for it to end, or rerun the same searchsmith train command to resume "
                                  "it, then export")
            if not runs and not args.embedder:
                raise BundleError(f"export: {str(run_dir)!r} holds no run.json and no run folders; pass a "
                                  "training run folder")
            for run in runs:
                jobs.append((out / run.name, f"run {run}", lambda run=run: export_run(run, out / run.name, opts)))
            read_runs.extend(runs)
            if args.embedder:
                jobs.append((out / "embedder", f"embedder {args.embedder}",
                             lambda: export_embedder(out / "embedder", args.embedder, opts)))
    if not args.force:  # every bundle of a folder of runs, before any is exported
        for path, _, _ in jobs:
            check_manifest_unedited(path)
    import torch  # noqa: F401 - loaded before quiet_block, which filters the log handlers torch adds

    # a run still being trained (its folder's lock held) would be read half-written
    busy = [str(r) for r in read_runs if being_written(r)]
    if busy:
        raise ConfigError(f"export: {', '.join(busy)} is being trained now (searchsmith train holds its lock); export "
                          "it when the run has finished")
    done: list[tuple[str, dict[str, Any]]] = []
    failed: list[tuple[str, str]] = []
    for i, (path, what, job) in enumerate(jobs, 1):
        # one line per step on stderr (stdout keeps the JSON summary); third-party prints held back
        print(f"[{i}/{len(jobs)}] export {what} -> {path} ({opts.dtype}) ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            with quiet_block():
                manifest = job()
        except SearchsmithError as exc:
            if len(jobs) == 1:
                raise
            # one damaged run of a folder of runs: say so and export the others
            print(f"      failed: {exc}", file=sys.stderr, flush=True)
            failed.append((str(path), str(exc)))
            continue
        print(f"      parity {'passed' if manifest['parity']['passed'] else 'FAILED (allowed by --allow-drift)'}"
              f", {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        done.append((str(path), manifest))
    for path, manifest in done:
        print(json.dumps({"bundle": path, "task": manifest["task"], "dtype": manifest["dtype"],
                          "parity_passed": manifest["parity"]["passed"], "parity": manifest["parity"]["checks"],
                          "allow_drift": manifest["allow_drift"], "heldout_source": manifest.get("heldout_source"),
                          "heldout_metrics": manifest.get("heldout_metrics")}, sort_keys=True))
    if failed:
        raise BundleError(f"export: {len(failed)} of {len(jobs)} bundle(s) failed ({', '.join(p for p, _ in failed)}; "
                          f"each one's reason is above); the other {len(done)} were written")
    return 0
