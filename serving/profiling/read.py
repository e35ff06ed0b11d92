"""``searchsmith profile read --run RUN_DIR``: the reader's latency, torch fp32 vs ONNX fp32 vs int8.

The trained reader of ``--run`` (a ``searchsmith train recipes/reader/...`` folder) is exported
to fp32 and int8 bundles in a temporary folder, then each of the three answers the demo QA
questions over their supporting demo documents and 3 distractors (``--quick``: 12 questions),
one question per call as the pipeline asks it (a warm-up call first, then interleaved rounds
so load drift hits all alike). Per backend: p50/p95 latency per question and the windows it
read; int8 and fp32 ONNX against torch fp32: the speed-up of the summed latency and the share
of questions with the same answer (text and kind). The int8 export uses the CPU's int8 path
(``models/int8_cpu.py``: VNNI or AVX2 with 7-bit weights).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError
from searchsmith.serving.profiling.common import ProfileContext, percentiles


def check_reader_run(run_dir: str, flag: str) -> None:
    """``--run``: a finished training run of a reader (``models.runs.run_source`` reads it as the
    export will), checked before anything is measured; ``profile llm`` times it last.

    Raises:
        BundleError: not a run, or an unfinished one.
        ValidationError: a run of another task; the message names it and what to pass.
    """
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.io import read_json_object
    from searchsmith.models.runs import run_source
    from searchsmith.models.tasks import run_task

    info_path = Path(run_dir) / "run.json"
    if info_path.is_file():  # the task first: another task's model folder is laid out otherwise
        task = read_json_object(info_path, flag, error=ValidationError).get("task")
        spec = run_task(task)
        if spec is None or spec.name != "read":
            what = f"a {spec.name!r} run" if spec else "not a run of a task searchsmith knows"
            raise ValidationError(f"{flag}: {run_dir!r} is {what} (run.json task {task!r}), not a reader; pass a "
                                  "reader run (searchsmith train recipes/reader/minilm_full.yaml)")
    run_source(Path(run_dir))


def check_args(args: argparse.Namespace) -> None:
    """``--run``: given, and a reader run."""
    if not args.run:
        raise ConfigError("profile read: give --run RUN_DIR, a trained reader (searchsmith train "
                          "recipes/reader/minilm_full.yaml)")
    check_reader_run(args.run, "profile read --run")


def demo_questions(n: int) -> list[tuple[str, list[tuple[str, str]]]]:
    """``n`` demo questions with their supporting documents and 3 distractors."""
    from searchsmith.training.read_data import ReaderData, demo_items

    items = demo_items(ReaderData(sources=("demo",), max_distractors=3))
    return [(it.question, it.paragraphs) for it in items[:n]]


def time_reader(reader: Any, questions: list[tuple[str, list[tuple[str, str]]]], rounds: int) -> tuple[list[float], list[Any]]:
    """Seconds per question (every round) and the last round's answers."""
    reader.read(*questions[0])  # warm-up: sessions, allocations
    times, answers = [], []
    for _ in range(rounds):
        answers = []
        for q, ps in questions:
            t0 = time.perf_counter()
            answers.append(reader.read(q, ps))
            times.append(time.perf_counter() - t0)
    return times, answers


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    import torch
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.int8_cpu import int8_isa
    from searchsmith.models.reader_model import TorchReader
    from searchsmith.models.runtime import load_bundle

    check_args(args)  # done by the CLI already; here for a caller of run()
    questions = demo_questions(12 if ctx.quick else 40)
    rounds = 1 if ctx.quick else 2
    threads = torch.get_num_threads()
    readers: dict[str, Any] = {"torch-fp32": TorchReader.load(args.run)}
    with tempfile.TemporaryDirectory(prefix="searchsmith-profile-read-") as tmp:
        for dtype in ("fp32", "int8"):
            out = Path(tmp) / dtype
            # the agreement is measured below on more questions than the export's parity check
            export_run(args.run, out, ExportOptions(dtype=dtype, allow_drift=True))
            readers[f"onnx-{dtype}"] = load_bundle(out, device="cpu", task="read", threads=threads)
        results: dict[str, tuple[list[float], list[Any]]] = {name: ([], []) for name in readers}
        for _ in range(rounds):  # interleaved: each round times every backend once
            for name, reader in readers.items():
                t, a = time_reader(reader, questions, 1)
                results[name][0].extend(t)
                results[name] = (results[name][0], a)
    base_total = sum(results["torch-fp32"][0])
    base_answers = results["torch-fp32"][1]
    summary: dict[str, Any] = {"suite": "read", "summary": True, "questions": len(questions), "rounds": rounds,
                               "threads": threads, "int8_isa": int8_isa()}
    for name, (times, answers) in results.items():
        pct = percentiles(times)
        same = sum((a.text, a.kind) == (b.text, b.kind) for a, b in zip(answers, base_answers, strict=True))
        row = {"suite": "read", "backend": name, "p50_ms": pct["p50_ms"], "p95_ms": pct["p95_ms"],
               "total_s": round(sum(times), 4), "speedup_vs_torch_fp32": round(base_total / sum(times), 3),
               "answer_agreement_vs_torch_fp32": round(same / len(answers), 4)}
        ctx.emit(row)
        summary[f"{name}_p50_ms"] = pct["p50_ms"]
        summary[f"{name}_speedup"] = row["speedup_vs_torch_fp32"]
        summary[f"{name}_agreement"] = row["answer_agreement_vs_torch_fp32"]
    ctx.emit(summary)


__all__ = ["demo_questions", "run", "time_reader"]
