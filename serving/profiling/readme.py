"""The measured-performance table (``serving/profiling/RESULTS.md``), generated from a results file.

``serving/profiling/performance.jsonl`` holds one row per measured figure: date, machine,
command, workload, the figure, the baseline's figure and their ratio. ``searchsmith
profile SUITE --record DIR`` appends the headline rows of that run to ``DIR/performance.jsonl``
and regenerates the table between the ``<!-- performance:start -->`` and
``<!-- performance:end -->`` markers of ``DIR/RESULTS.md``: the profiler writes only into the
folder it is given (the project's own log is ``--record serving/profiling``, which the README
links to), so every number shown there is one that a run produced. A test checks that the
committed document matches the committed file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchsmith.models.io import exclusive, write_text_atomic
from searchsmith.models.jsonl import read_jsonl

RESULTS = Path(__file__).with_name("performance.jsonl")
RESULTS_DOC = Path(__file__).with_name("RESULTS.md")
START, END = "<!-- performance:start -->", "<!-- performance:end -->"
# The README shows the latest row of each headline workload per machine (--readme README.md).
HEADLINE_START, HEADLINE_END = "<!-- headlines:start -->", "<!-- headlines:end -->"
HEADLINES: tuple[str, ...] = (
    r"embed \d+ mixed-length texts, int8 ONNX \(cpu\)",
    r"rerank \d+ pairs / \d+ queries, int8 ONNX \(cpu\)",
    r"route 1 query, 1000 sources x \d+ centroids \(cpu\)",
    r"server /v1/embeddings, 32 clients, demo questions, batching on vs off",
    r"embed \d+ mixed-length texts \(cuda, fp16\)",
    r"rerank \d+ pairs / \d+ queries, \S+ \(cuda\)",
    r"kernel similarity_topk, \d+ workloads of the GPU grid \(cuda\)",
)


def _machine(rec: dict[str, Any]) -> str:
    gpu = rec.get("gpu")
    if gpu:
        return f"{gpu}"
    isa = f", {rec['cpu_int8']}" if rec.get("cpu_int8") else ""
    return f"{rec.get('cpu', '?')}, {rec.get('cores', '?')} cores{isa}"


def _tokens(r: dict[str, Any], prefix: str) -> str:
    """``", 5120 tokens/s, padding 3.1%"`` from ``r[prefix + "tokens_per_s"]`` and
    ``r[prefix + "padding_fraction"]``; "" for a record from before those fields."""
    rate = r.get(f"{prefix}tokens_per_s")
    if rate is None:
        return ""
    pad = r.get(f"{prefix}padding_fraction")
    return f", {rate:.0f} tokens/s, padding " + ("unknown" if pad is None else f"{pad:.1%}")


def headline_rows(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows worth keeping from one profile run's records."""
    records = list(records)
    machine = next((r for r in records if r.get("suite") == "machine"), {})
    rows = []
    for r in records:
        base = {"date": r.get("date"), "machine": _machine(machine), "command": r.get("command")}
        if r.get("suite") == "embed" and r.get("summary") and r.get("backend") == "onnx":
            rows.append({**base, "what": f"embed {r['texts']} mixed-length texts, int8 ONNX ({r['device']})",
                         "figure": (f"{r['onnx_int8_texts_per_s']:.1f} texts/s{_tokens(r, 'onnx_int8_')}, "
                                    f"min cosine {r['min_cosine']:.3f}"
                                    + (f", top-10 neighbour overlap {r['top10_neighbour_overlap']:.3f}"
                                       if "top10_neighbour_overlap" in r else "")),
                         "baseline": (f"SentenceTransformer.encode fp32: {r['st_texts_per_s']:.1f} texts/s"
                                      f"{_tokens(r, 'st_')} "
                                      f"(fp32 ONNX: {r['onnx_fp32_texts_per_s']:.1f})"),
                         "ratio": round(r["ratio_int8_vs_st"], 2)})
        elif r.get("suite") == "embed" and r.get("summary"):
            rows.append({**base, "what": f"embed {r['texts']} mixed-length texts ({r['device']}, {r['dtype']})",
                         "figure": f"{r['searchsmith_texts_per_s']:.1f} texts/s{_tokens(r, 'searchsmith_')}",
                         "baseline": (f"SentenceTransformer.encode batch 32: {r['st_default_texts_per_s']:.1f} texts/s"
                                      f"{_tokens(r, 'st_default_')} "
                                      f"(its best batch size: {r['st_best_texts_per_s']:.1f} texts/s, "
                                      f"{r['ratio_vs_st_best']:.2f}x)"),
                         "ratio": round(r["ratio_vs_st_default"], 2)})
        elif r.get("suite") == "route" and "sources" in r:
            rows.append({**base, "what": f"route 1 query, {r['sources']} sources x {r['centroids_per_source']} centroids ({r['device']})",
                         "figure": f"p50 {r['searchsmith']['p50_ms']:.3f} ms, p99 {r['searchsmith']['p99_ms']:.3f} ms",
                         "baseline": f"faiss CPU + numpy max: p50 {r['faiss_cpu']['p50_ms']:.3f} ms, p99 {r['faiss_cpu']['p99_ms']:.3f} ms",
                         "ratio": round(r["ratio_p50"], 2)})
        elif r.get("suite") == "kernels" and r.get("verdict") and r.get("plan") == "gpu":
            # the GPU grid is dozens of workloads: one row per op, the per-workload lines stay in results.jsonl
            others = "; ".join(f"{impl} faster than triton in {o['workloads_faster']}/{o['workloads']} "
                               f"(median {o['median_speedup_over_triton']:.2f}x triton's speed"
                               + (f", min recall@k {o['min_recall_at_k']:.3f}" if "min_recall_at_k" in o else "")
                               + ")"
                               for impl, o in sorted(r.get("other_impls", {}).items()))
            rows.append({**base, "what": f"kernel {r['op']}, {r['workloads']} workloads of the GPU grid ({r['device']})",
                         "figure": (f"triton faster than the torch twin in {r['triton_wins']}/{r['workloads']}; "
                                    f"ratio range {r['min_ratio_vs_torch']:.2f}-{r['max_ratio_vs_torch']:.2f}x"),
                         "baseline": "torch twin (kernels/reference.py)" + (f"; {others}" if others else ""),
                         "ratio": round(r["median_ratio_vs_torch"], 2)})
        elif r.get("suite") == "kernels" and r.get("op") and r.get("impl") not in (None, "torch") \
                and r.get("plan") != "gpu":
            shape = ", ".join(f"{k}={r[k]}" for k in ("N", "C", "S", "B", "T", "k", "D") if k in r)
            rows.append({**base, "what": f"kernel {r['op']} ({shape}, {r.get('dtype', '')}, {r['device']})",
                         "figure": f"{r['impl']}: p50 {r['p50_ms']:.3f} ms"
                                   + (f", recall@k {r['recall_at_k']:.3f}" if "recall_at_k" in r else ""),
                         "baseline": f"torch twin: p50 {r['torch_p50_ms']:.3f} ms",
                         "ratio": round(r["ratio_vs_torch"], 2) if r.get("ratio_vs_torch") else None})
        elif r.get("suite") == "rerank" and r.get("summary") and "onnx_int8_pairs_per_s" in r:
            rows.append({**base, "what": f"rerank {r['pairs']} pairs / {r['queries']} queries, int8 ONNX (cpu)",
                         "figure": f"{r['onnx_int8_pairs_per_s']:.1f} pairs/s{_tokens(r, 'onnx_int8_')}, top-10 overlap "
                                   f"{r['top10_overlap']:.3f}, top-10 identical {r['top10_identical']:.2f}, "
                                   f"Kendall tau {r['kendall_tau_mean']:.3f}",
                         "baseline": (f"{r.get('baseline', 'CrossEncoder.predict fp32 torch')}: "
                                      f"{r['st_pairs_per_s']:.1f} pairs/s{_tokens(r, 'st_')}"),
                         "ratio": round(r["ratio_int8_vs_st"], 2)})
        elif r.get("suite") == "rerank" and r.get("summary") and "st_fp16_pairs_per_s" in r:
            rows.append({**base, "what": f"rerank {r['pairs']} pairs / {r['queries']} queries, {r['impl']} ({r['device']})",
                         "figure": f"{r['pairs_per_s']:.0f} pairs/s{_tokens(r, '')}, top-10 identical {r['top10_identical']:.2f}",
                         "baseline": (f"CrossEncoder.predict fp16: {r['st_fp16_pairs_per_s']:.0f} pairs/s"
                                      f"{_tokens(r, 'st_fp16_')} (fp32: {r['st_fp32_pairs_per_s']:.0f})"),
                         "ratio": round(r["ratio_vs_st_fp16"], 2)})
        elif r.get("suite") == "pipeline" and r.get("summary"):
            presets = ", ".join(f"{k} {v:.0f} ms" for k, v in r["p50_ms"].items())
            rows.append({**base, "what": (f"pipeline ask p50 per preset, {r['questions']} demo questions "
                                          f"({r['device']}, {r['generation']}, bundles: {len(r['bundles'])})"),
                         "figure": presets, "baseline": f"preset {r['baseline']} (no rewrite, no decomposition)",
                         "ratio": None})
        elif r.get("suite") == "server" and r.get("summary"):
            texts = f", {r['texts']}" if r.get("texts") else ""
            ceiling = (f"; model alone at batch {r['model_ceiling']['batch']}: "
                       f"{r['model_ceiling']['ceiling_ratio']:.2f}x") if r.get("model_ceiling") else ""
            rows.append({**base, "what": f"server {r['endpoint']}, {r['concurrency']} clients{texts}, batching on vs off",
                         "figure": f"{r['on_rps']:.1f} req/s, {r['errors']} errors{ceiling}",
                         "baseline": f"batching off (max_batch_size 1): {r['off_rps']:.1f} req/s",
                         "ratio": round(r["ratio_on_vs_off"], 2)})
        elif r.get("suite") == "train" and r.get("summary"):
            rows.append({**base, "what": (f"training step, {r['parameters'] / 1e6:.1f} M weights, {r['batch']} x "
                                          f"{r['tokens']} tokens, fused AdamW ({r['device']})"),
                         "figure": (f"{r['fused_train_step_ms']:.0f} ms per step, of which AdamW "
                                    f"{r['fused_optimizer_step_ms']:.1f} ms"),
                         "baseline": (f"AdamW's per-tensor loop (torch's CPU default): {r['loop_train_step_ms']:.0f} ms "
                                      f"per step, of which AdamW {r['loop_optimizer_step_ms']:.1f} ms"),
                         "ratio": round(r["loop_train_step_ms"] / r["fused_train_step_ms"], 2)})
        elif r.get("suite") == "route" and r.get("end_to_end"):
            rows.append({**base, "what": f"router.route end to end ({r['mode']}, embedding included)",
                         "figure": f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms",
                         "baseline": "-", "ratio": None})
    return rows


# The keys of every row this module writes to a performance log: a JSONL file whose rows lack
# them is not one (a user's own performance.jsonl), and is never appended to.
ROW_KEYS: frozenset[str] = frozenset({"what", "figure", "baseline", "ratio", "date", "machine", "command"})


def append_rows(rows: list[dict[str, Any]], path: Path = RESULTS) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def headline_table(path: Path = RESULTS, rows: list[dict[str, Any]] | None = None) -> str:
    """The README's table: for each :data:`HEADLINES` workload and machine, its latest row
    (of ``rows``, default the log at ``path``)."""
    import re

    if rows is None:
        rows = read_jsonl(path, what="performance log", allow_empty=True) if path.is_file() else []
    latest: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:  # the log is in time order: a later row replaces an earlier one
        kind = next((i for i, pat in enumerate(HEADLINES) if re.fullmatch(pat, str(r.get("what", "")))), None)
        if kind is not None:
            latest[(kind, str(r.get("machine")))] = r
    return render_table(rows=[latest[k] for k in sorted(latest)])


def marker_problem(text: str, start: str, end: str) -> str | None:
    """Why ``text`` is not a document whose table sits between ``start`` and ``end`` (each
    marker exactly once, ``start`` first), or None."""
    counts = (text.count(start), text.count(end))
    if 0 in counts:
        missing = " / ".join(m for m, c in ((start, counts[0]), (end, counts[1])) if c == 0)
        return f"no {missing} marker" + ("s" if counts == (0, 0) else "")
    if counts != (1, 1):
        return f"{start} appears {counts[0]} time(s) and {end} {counts[1]} time(s); each must appear once"
    if text.index(end) < text.index(start):
        return f"{end} comes before {start}; put the start marker first"
    return None


def replace_between(text: str, start: str, end: str, table: str, where: Path) -> str:
    """``text`` with the part between the markers replaced by ``table``.

    Raises:
        ConfigError: the markers are missing, repeated or out of order (:func:`marker_problem`).
    """
    from searchsmith.models.errors import ConfigError

    why = marker_problem(text, start, end)
    if why:
        raise ConfigError(f"{where}: {why}; nothing was written (the table goes between {start} and {end})")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{table}\n{end}{tail}"


def update_markers(doc: Path, start: str, end: str, table: str) -> bool:
    """Replace the text between the ``start`` and ``end`` markers of ``doc`` (atomically: an
    interruption leaves the old file or the new one); True when it changed.

    Raises:
        ConfigError: ``doc`` lacks the markers, or has them twice or out of order (it is not a
            document this writes into).
    """
    text = doc.read_text(encoding="utf-8")
    new = replace_between(text, start, end, table, doc)
    if new != text:
        write_text_atomic(doc, new)
    return new != text


def update_headlines(readme: Path, path: Path = RESULTS) -> bool:
    """Regenerate the headline table of ``readme`` (``profile --record DIR --readme README.md``)."""
    return update_markers(Path(readme), HEADLINE_START, HEADLINE_END, headline_table(path))


def render_table(path: Path = RESULTS, rows: list[dict[str, Any]] | None = None) -> str:
    if rows is None:
        rows = read_jsonl(path, what="performance log", allow_empty=True) if path.is_file() else []
    out = ["| what | searchsmith | baseline (same run) | ratio | date | machine | command |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
        out.append(f"| {r['what']} | {r['figure']} | {r['baseline']} | {ratio} | {r['date']} | "
                   f"{r['machine']} | `{r['command']}` |")
    return "\n".join(out)


def update_readme(readme: Path = RESULTS_DOC, path: Path = RESULTS) -> bool:
    """Rewrite the table between the markers of ``readme`` (RESULTS.md); True when it changed."""
    return update_markers(readme, START, END, render_table(path))


def _check_document(path: Path, start: str, end: str, flag: str, fix: str) -> None:
    """``path`` is a UTF-8 file whose table markers are right, in a folder this process may
    replace it in (the new text is swapped in by rename)."""
    from searchsmith.models.errors import ConfigError, ValidationError
    from searchsmith.models.jsonl import read_utf8

    if path.is_dir():
        raise ConfigError(f"{flag}: {path} is a folder, not a document; nothing was written. Move it, or "
                          "choose another path")
    try:
        text = read_utf8(path)
    except ValidationError as exc:
        raise ConfigError(f"{flag}: {exc}; nothing was written") from None
    why = marker_problem(text, start, end)
    if why:
        raise ConfigError(f"{flag}: {path}: {why}, so it is not a document this writes its table into; "
                          f"nothing was written. {fix}")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}: cannot replace {path}: no write permission in {str(path.parent)!r}, or a "
                          "read-only file system; nothing was written")


def _read_log(log: Path, flag: str) -> list[dict[str, Any]]:
    """The rows of the performance log ``log`` (absent: none), each one this module wrote.

    Raises:
        ConfigError: ``log`` is a folder, not JSONL, or holds a row that is not a performance row
            (a user's own file of that name): it is never appended to.
    """
    from searchsmith.models.errors import ConfigError, ValidationError

    if not log.exists() and not log.is_symlink():
        return []
    fix = "Fix or move the log, or choose another --record folder"
    if log.is_dir():
        raise ConfigError(f"{flag}: {log} is a folder, not a performance log; nothing was written. {fix}")
    try:
        rows = read_jsonl(log, what="performance log", allow_empty=True)
    except (ConfigError, ValidationError) as exc:
        raise ConfigError(f"{flag}: {exc}; nothing was written. {fix}") from None
    for n, row in enumerate(rows, start=1):
        missing = sorted(ROW_KEYS - set(row)) if isinstance(row, dict) else sorted(ROW_KEYS)
        if missing:
            raise ConfigError(f"{flag}: {log} row {n} is not a row searchsmith profile writes (it lacks "
                              f"{', '.join(missing)}), so the file is not its performance log; nothing was "
                              f"written. Move {log.name} out of {log.parent}, or choose another --record folder")
    return rows


def check_record_targets(folder: Path, readme: Path | None = None) -> None:
    """What :func:`record_results` will write can be written: ``folder`` is a folder (or can be
    made) this process may write in; its performance.jsonl (if any) is a log this module wrote;
    its RESULTS.md (if any) and ``readme`` are documents with their markers once each, in order.
    ``profile`` checks this before it measures, so a wrong ``--record`` / ``--readme`` does not
    cost the run, and nothing is written when one is wrong.

    Raises:
        ConfigError: naming the file, what is wrong and the fix.
    """
    _record_plan(folder, readme)


def _record_plan(folder: Path, readme: Path | None
                 ) -> tuple[list[dict[str, Any]], str | None, str | None, str | None]:
    """Check the targets (:func:`check_record_targets`) and read them: the log's rows, and the
    current texts of the log, RESULTS.md and ``readme`` (None where absent)."""
    from searchsmith.models.errors import ConfigError
    from searchsmith.models.io import check_parents_are_folders

    folder = Path(folder)
    flag = f"profile --record {folder}"
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{flag}: is a file; give a folder (the project's log: --record serving/profiling)")
    check_parents_are_folders(folder, "profile --record", ConfigError)
    doc, log = folder / RESULTS_DOC.name, folder / RESULTS.name
    if doc.exists() or doc.is_symlink():
        _check_document(doc, START, END, flag, "Choose another folder, or add the markers where the table belongs")
    if readme is not None:
        readme = Path(readme)
        if readme.resolve() in (doc.resolve(), log.resolve()):
            raise ConfigError(f"profile --readme {readme}: is a file --record {folder} writes itself; give the "
                              "README whose headline table to regenerate (e.g. README.md)")
        if not readme.is_file():
            raise ConfigError(f"profile --readme {readme}: no such file (it must exist, with the "
                              f"{HEADLINE_START} / {HEADLINE_END} markers); nothing was written")
        _check_document(readme, HEADLINE_START, HEADLINE_END, f"profile --readme {readme}",
                        "Add the markers where the headline table belongs")
    rows = _read_log(log, flag)
    return (rows, log.read_text(encoding="utf-8") if log.is_file() else None,
            doc.read_text(encoding="utf-8") if doc.is_file() else None,
            readme.read_text(encoding="utf-8") if readme is not None else None)


def record_results(records: Iterable[dict[str, Any]], folder: Path, readme: Path | None = None) -> Path:
    """Append the headline rows of ``records`` to ``folder/performance.jsonl`` and regenerate
    the table of ``folder/RESULTS.md`` (and, given ``readme``, its headline table); only the
    folder and the README the user named are written.

    Every new text is prepared before any file is touched, and each file is replaced whole
    (atomically); should a replacement fail, the files already replaced get their old text back,
    so the log and its tables do not disagree.

    Two runs recording into one folder at once do not lose each other's rows: the log's lock
    (``models.io.exclusive``) is held from reading it to the last write, and the second run is
    refused at once (its results stay in its ``--out``).

    Raises:
        ConfigError: as :func:`check_record_targets` (nothing written), or another process is
            recording into ``folder`` now.
    """
    folder = Path(folder)
    with exclusive(folder / RESULTS.name, "profile --record"):
        return _record_results(records, folder, readme)


def _record_results(records: Iterable[dict[str, Any]], folder: Path, readme: Path | None) -> Path:
    old_rows, log_text, doc_text, readme_text = _record_plan(folder, readme)
    new_rows = headline_rows(records)
    rows = old_rows + new_rows
    doc, log = folder / RESULTS_DOC.name, folder / RESULTS.name
    log_new = (log_text or "")
    if log_new and not log_new.endswith("\n"):
        log_new += "\n"
    log_new += "".join(json.dumps(row, sort_keys=True) + "\n" for row in new_rows)
    doc_new = replace_between(doc_text if doc_text is not None else f"# Measured performance\n\n{START}\n{END}\n",
                              START, END, render_table(rows=rows), doc)
    plan: list[tuple[Path, str | None, str]] = [(log, log_text, log_new), (doc, doc_text, doc_new)]
    if readme is not None:
        plan.append((Path(readme), readme_text,
                     replace_between(readme_text or "", HEADLINE_START, HEADLINE_END, headline_table(rows=rows),
                                     Path(readme))))
    folder.mkdir(parents=True, exist_ok=True)
    done: list[tuple[Path, str | None]] = []
    try:
        for path, old, new in plan:
            if new != old:
                write_text_atomic(path, new)
                done.append((path, old))
    except BaseException:
        for path, old in reversed(done):  # put back what was replaced: all or nothing
            if old is None:
                path.unlink(missing_ok=True)
            else:
                write_text_atomic(path, old)
        raise
    return doc


def update_markers_ok(doc: Path) -> bool:
    """Whether ``doc`` exists and holds the headline markers, once each and in order."""
    if not doc.is_file():
        return False
    return marker_problem(doc.read_text(encoding="utf-8"), HEADLINE_START, HEADLINE_END) is None


def _main(argv: list[str] | None = None) -> int:
    """``python -m searchsmith.serving.profiling.readme [--readme README.md]``: regenerate the
    project's RESULTS.md table (and the README's headline table) from the committed log."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m searchsmith.serving.profiling.readme")
    parser.add_argument("--readme", help="also regenerate the headline table of this README")
    args = parser.parse_args(argv)
    changed = update_readme()
    if args.readme:
        changed = update_headlines(Path(args.readme)) or changed
    print("updated" if changed else "unchanged")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
