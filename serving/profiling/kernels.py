"""``searchsmith profile kernels``: each kernel against its torch twin (and faiss for search).

Three size plans, picked by where it runs:

* ``gpu`` (CUDA present, not ``--quick``): the issue's grid. similarity_topk over
  N in {1e5, 1e6, 4e6} x B in {1, 16, 256} x k in {10, 100}, D = 384, float16 (plus float32
  at N = 1e6); route_sources over C in {1e3, 1e5} x B; dedup_mask over N in {1e3, 4e3};
  pool_normalize over B. Budgeted to about 3 minutes on an H200: the largest matrix is
  4e6 x 384 float16 = 3 GB on the GPU and 6 GB float32 for faiss on the CPU, and the slowest
  faiss calls (B = 256 at N = 4e6) run once.
* ``cpu`` (no CUDA, ``--device cpu`` or ``--quick``): small sizes, torch twin vs the
  candidates path and faiss (Triton runs on a CPU only in its interpreter); well under a minute.
* ``tiny`` (``TRITON_INTERPRET=1`` or ``$SEARCHSMITH_PROFILE_KERNELS_TINY=1``): toy sizes so
  the whole suite, Triton included, runs end to end in the test suite.

The implementations of one workload are timed against each other as every suite times its
variants (``timing.interleave``): the plan's warm-up calls of each, untimed, then ``repeat``
rounds that call each implementation once, in an order that rotates by one each round, so that
a change in the machine's load falls on all of them alike. faiss at the largest GPU sizes is
too slow to repeat: it sits out the warm-up and the rounds and is timed once, unwarmed, in one
more round beside a call of each of the others.

Each workload emits one JSON line per implementation: time (p50 over repeats), ratio
``torch_ms / impl_ms`` (above 1 is faster than the torch twin), achieved bandwidth as a
fraction of the H200's ~4.3 TB/s and the matrix rate in TFLOP/s (as a fraction of ~790
TFLOP/s for 16-bit dot products). One verdict line per op says whether Triton beat torch
in most workloads of this run, which is what ``kernels.dispatch.TRITON_BY_DEFAULT`` should
follow. A PNG of the ratios goes to ``<out>/kernels.png``.

similarity_topk has two more rows per workload beside the Triton kernel and the torch twin:
``torch_mm_topk`` (CUDA only: one matmul in the input dtype, then ``torch.topk``) and
``candidates`` (``similarity_topk_candidates``: float16 / bfloat16 candidates, k * 4 of them,
re-scored exactly in float32, from a reduced-precision copy built once per matrix). Those
two and Triton carry ``recall_at_k``, the share of the torch twin's top-k ids they returned;
the verdict line gives each one's worst recall beside its speed against Triton.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from searchsmith.serving.profiling.common import ProfileContext, percentiles, save_plot
from searchsmith.serving.profiling.timing import interleave, resolve_device

# Reference machine figures from ../shared/GPU.md, used only to express fractions.
H200_BANDWIDTH_BPS = 4.3e12
H200_DOT16_FLOPS = 790e12
TINY_ENV = "SEARCHSMITH_PROFILE_KERNELS_TINY"
D_MODEL = 384


@dataclass(frozen=True)
class Plan:
    """Sizes and repeat counts of one run."""

    name: str
    search: tuple[tuple[int, int, int, torch.dtype], ...]  # (N, B, k, dtype)
    route: tuple[tuple[int, int, int, int], ...]  # (C, S, B, k)
    dedup: tuple[int, ...]  # N
    pool: tuple[tuple[int, int, torch.dtype], ...]  # (B, T, dtype)
    dim: int
    repeat: int
    warmup: int
    faiss_max_flops: float  # time faiss once (no warm-up, one round) above this many FLOPs


def _grid(ns, bs, ks, dtype) -> tuple[tuple[int, int, int, torch.dtype], ...]:
    return tuple((n, b, k, dtype) for n in ns for b in bs for k in ks)


PLANS: dict[str, Plan] = {
    "gpu": Plan(
        name="gpu",
        search=_grid((100_000, 1_000_000, 4_000_000), (1, 16, 256), (10, 100), torch.float16)
        + _grid((1_000_000,), (1, 16, 256), (10,), torch.float32),
        route=tuple((c, max(16, c // 100), b, 10) for c in (1_000, 100_000) for b in (1, 16, 256)),
        dedup=(1_000, 4_000),
        pool=((1, 256, torch.float16), (16, 256, torch.float16), (256, 256, torch.float16),
              (256, 256, torch.float32)),
        dim=D_MODEL, repeat=10, warmup=2, faiss_max_flops=5e10,
    ),
    "cpu": Plan(
        name="cpu",
        search=_grid((10_000, 100_000), (1, 16), (10,), torch.float32) + ((10_000, 16, 100, torch.float32),),
        route=tuple((c, max(16, c // 100), b, 10) for c in (1_000, 10_000) for b in (1, 16)),
        dedup=(1_000,),
        pool=((16, 128, torch.float32),),
        dim=D_MODEL, repeat=3, warmup=1, faiss_max_flops=float("inf"),
    ),
    "tiny": Plan(
        name="tiny",
        search=((150, 2, 5, torch.float32), (150, 2, 5, torch.float16)),
        route=((100, 7, 2, 3),),
        dedup=(70,),
        pool=((2, 9, torch.float32),),
        dim=24, repeat=1, warmup=0, faiss_max_flops=float("inf"),
    ),
}


def _choose(ctx: ProfileContext) -> tuple[Plan, torch.device, bool]:
    """(plan, device, whether Triton runs) from the context and the machine."""
    from searchsmith.kernels.dispatch import interpreter_enabled, triton_available

    cuda = resolve_device("kernels", ctx.device) == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    tiny = interpreter_enabled() or os.environ.get(TINY_ENV) == "1"
    if tiny:
        name = "tiny"
    elif cuda and not ctx.quick:
        name = "gpu"
    else:
        name = "cpu"
    use_triton = triton_available() and (cuda or interpreter_enabled())
    return PLANS[name], device, use_triton


def _sync_for(device: torch.device) -> Callable[[], None] | None:
    return torch.cuda.synchronize if device.type == "cuda" else None


def _backends(use_triton: bool) -> tuple[str, ...]:
    """The kernel backends a workload times: the torch twin, and Triton where it runs."""
    return ("torch", "triton") if use_triton else ("torch",)


def _time_impls(fns: dict[str, Callable[[], Any]], plan: Plan, device: torch.device, *,
                once: tuple[str, ...] = ()) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Time one workload's implementations against each other (``timing.interleave``): the
    plan's ``warmup`` untimed calls of each, then ``repeat`` interleaved rounds, rotating.

    Args:
        fns: implementation -> its call; the records follow this order.
        once: implementations too slow to repeat (faiss at the largest sizes): no warm-up and
            no place in the rounds; they are timed in one more round, beside one call of each of
            the others (whose samples it adds to theirs).

    Returns:
        ``(timings, results)``: per implementation, the percentiles of its timed calls and what
        its last call returned (the recall@k rows read the ids from it).
    """
    sync = _sync_for(device)
    timed = interleave({k: f for k, f in fns.items() if k not in once}, plan.repeat, warmup=plan.warmup, sync=sync)
    samples, results = timed.samples, dict(timed.results)
    if once:
        last = interleave(fns, 1, warmup=0, sync=sync)
        for impl, xs in last.samples.items():
            samples.setdefault(impl, []).extend(xs)
        results.update(last.results)
    return {impl: percentiles(samples[impl]) for impl in fns}, results


def _emit_impls(ctx: ProfileContext, base: dict[str, Any], timings: dict[str, dict[str, float]],
                bytes_moved: float, flops: float, device: torch.device, dtype_bits: int,
                recall: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One record per implementation, ratios against the torch twin measured in the same run.

    ``recall`` maps an implementation to its recall@k against the torch twin's ids (search only).
    """
    torch_ms = timings["torch"]["p50_ms"]
    out = []
    for impl, stats in timings.items():
        sec = stats["p50_ms"] / 1e3
        rec = {
            **base, "impl": impl, "device": device.type, **stats,
            **({"recall_at_k": recall[impl]} if recall and impl in recall else {}),
            "torch_p50_ms": torch_ms,
            "ratio_vs_torch": torch_ms / stats["p50_ms"] if stats["p50_ms"] > 0 else None,
            "bytes_moved": bytes_moved, "gbytes_per_s": bytes_moved / sec / 1e9 if sec > 0 else None,
            "tflops": flops / sec / 1e12 if sec > 0 else None,
        }
        on_gpu = device.type == "cuda" and impl != "faiss_cpu"
        rec["bandwidth_fraction_h200"] = bytes_moved / sec / H200_BANDWIDTH_BPS if on_gpu and sec > 0 else None
        rec["dot16_rate_fraction_h200"] = (flops / sec / H200_DOT16_FLOPS
                                           if on_gpu and sec > 0 and dtype_bits == 16 else None)
        out.append(ctx.emit(rec))
    return out


def recall_at_k(ids: torch.Tensor, exact_ids: torch.Tensor) -> float:
    """Share of the exact (B, k) ids that ``ids`` (B, k) also returned, over all queries."""
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), exact_ids.tolist()))
    return hits / max(1, exact_ids.numel())


def _bench_search(ctx: ProfileContext, plan: Plan, device: torch.device, use_triton: bool) -> list[dict[str, Any]]:
    from searchsmith.kernels import candidate_copy, similarity_topk, similarity_topk_candidates

    try:
        import faiss
    except ImportError:  # faiss is a core dependency, but keep the suite usable without it
        faiss = None
    records: list[dict[str, Any]] = []
    gen = torch.Generator(device=device).manual_seed(0)
    by_matrix: dict[tuple[int, torch.dtype], list[tuple[int, int]]] = {}
    for n, b, k, dtype in plan.search:
        by_matrix.setdefault((n, dtype), []).append((b, k))
    for (n, dtype), cases in by_matrix.items():
        matrix = torch.randn(n, plan.dim, device=device, generator=gen, dtype=torch.float32).to(dtype)
        # The candidates path's reduced-precision rows, built once as an index would keep them
        # (float16 on CUDA: the float16 matrix itself; bfloat16 on the CPU).
        low = candidate_copy(matrix)
        index = None
        if faiss is not None:
            index = faiss.IndexFlatIP(plan.dim)
            index.add(matrix.float().cpu().numpy())
        for b, k in cases:
            queries = torch.randn(b, plan.dim, device=device, generator=gen).to(dtype)
            def call(backend: str, q=queries, m=matrix, k=k):
                return similarity_topk(q, m, k, backend=backend)

            def mm_topk(q=queries, m=matrix, k=k):
                # What a user would write: one (B, N) matmul in the input dtype, then topk.
                return torch.topk(q @ m.T, k, dim=1)

            def candidates(q=queries, m=matrix, k=k, low=low):
                return similarity_topk_candidates(q, m, k, candidate_matrix=low)

            fns: dict[str, Callable[[], Any]] = {"torch": lambda: call("torch")}
            if device.type == "cuda":
                fns["torch_mm_topk"] = mm_topk
            fns["candidates"] = candidates
            if use_triton:
                fns["triton"] = lambda: call("triton")
            flops = 2.0 * b * n * plan.dim
            once: tuple[str, ...] = ()
            if index is not None:
                q_np = queries.float().cpu().numpy()
                fns["faiss_cpu"] = lambda q_np=q_np, ix=index, k=k: ix.search(q_np, k)
                once = ("faiss_cpu",) if flops > plan.faiss_max_flops else ()
            timings, results = _time_impls(fns, plan, device, once=once)
            # recall@k of the approximate rows (and Triton): the ids of their last timed call
            exact_ids = results["torch"][1]
            recall = {impl: recall_at_k(results[impl][1], exact_ids) for impl in fns
                      if impl in ("torch_mm_topk", "candidates", "triton")}
            elem = torch.finfo(dtype).bits // 8
            base = {"suite": "kernels", "op": "similarity_topk", "N": n, "B": b, "k": k, "D": plan.dim,
                    "dtype": str(dtype).replace("torch.", ""), "plan": plan.name}
            records += _emit_impls(ctx, base, timings, float(n * plan.dim * elem + b * plan.dim * elem),
                                   flops, device, torch.finfo(dtype).bits, recall)
        matrix = low = index = None  # free the 3 GB (GPU) / 6 GB (faiss) before the next size
    return records


def _bench_route(ctx: ProfileContext, plan: Plan, device: torch.device, use_triton: bool) -> list[dict[str, Any]]:
    from searchsmith.kernels import route_sources

    records: list[dict[str, Any]] = []
    gen = torch.Generator(device=device).manual_seed(1)
    for c, s, b, k in plan.route:
        centroids = torch.randn(c, plan.dim, device=device, generator=gen)
        src = torch.randint(0, s, (c,), device=device, generator=gen)
        scale = torch.rand(s, device=device, generator=gen) + 0.5
        weight = torch.rand(c, device=device, generator=gen)
        queries = torch.randn(b, plan.dim, device=device, generator=gen)

        def call(backend: str, q=queries, cen=centroids, src=src, scale=scale, w=weight, k=k):
            return route_sources(q, cen, src, scale, k, centroid_weight=w, backend=backend)

        fns = {backend: (lambda backend=backend: call(backend)) for backend in _backends(use_triton)}
        timings, _ = _time_impls(fns, plan, device)
        base = {"suite": "kernels", "op": "route_sources", "C": c, "S": s, "B": b, "k": k, "D": plan.dim,
                "dtype": "float32", "plan": plan.name}
        records += _emit_impls(ctx, base, timings, float((c + b) * plan.dim * 4 + c * 12),
                               2.0 * b * c * plan.dim, device, 32)
    return records


def _bench_dedup(ctx: ProfileContext, plan: Plan, device: torch.device, use_triton: bool) -> list[dict[str, Any]]:
    from searchsmith.kernels import dedup_mask

    records: list[dict[str, Any]] = []
    gen = torch.Generator(device=device).manual_seed(2)
    for n in plan.dedup:
        # Passages around n / 4 topics: a realistic share of near-duplicates to remove.
        topics = torch.nn.functional.normalize(torch.randn(max(1, n // 4), plan.dim, device=device, generator=gen), dim=1)
        pick = torch.randint(0, topics.shape[0], (n,), device=device, generator=gen)
        emb = topics[pick] + 0.05 * torch.randn(n, plan.dim, device=device, generator=gen)
        emb = torch.nn.functional.normalize(emb, dim=1)
        fns = {backend: (lambda e=emb, backend=backend: dedup_mask(e, backend=backend))
               for backend in _backends(use_triton)}
        timings, _ = _time_impls(fns, plan, device)
        base = {"suite": "kernels", "op": "dedup_mask", "N": n, "D": plan.dim, "dtype": "float32",
                "plan": plan.name}
        records += _emit_impls(ctx, base, timings, float(n * plan.dim * 4 + n * n / 8),
                               1.0 * n * n * plan.dim, device, 32)
    return records


def _bench_pool(ctx: ProfileContext, plan: Plan, device: torch.device, use_triton: bool) -> list[dict[str, Any]]:
    from searchsmith.kernels import pool_normalize

    records: list[dict[str, Any]] = []
    gen = torch.Generator(device=device).manual_seed(3)
    for b, t, dtype in plan.pool:
        hidden = torch.randn(b, t, plan.dim, device=device, generator=gen).to(dtype)
        lengths = torch.randint(1, t + 1, (b,), device=device, generator=gen)
        mask = (torch.arange(t, device=device)[None, :] < lengths[:, None]).to(torch.int64)  # right padding
        fns = {backend: (lambda h=hidden, m=mask, backend=backend: pool_normalize(h, m, backend=backend))
               for backend in _backends(use_triton)}
        timings, _ = _time_impls(fns, plan, device)
        elem = torch.finfo(dtype).bits // 8
        real_tokens = float(lengths.sum())
        base = {"suite": "kernels", "op": "pool_normalize", "B": b, "T": t, "D": plan.dim,
                "dtype": str(dtype).replace("torch.", ""), "plan": plan.name}
        # Bytes the fused kernel must move: real tokens only, plus the mask and the output.
        records += _emit_impls(ctx, base, timings, real_tokens * plan.dim * elem + b * t * 8 + b * plan.dim * 4,
                               2.0 * real_tokens * plan.dim, device, torch.finfo(dtype).bits)
    return records


def _verdicts(ctx: ProfileContext, records: list[dict[str, Any]], use_triton: bool) -> None:
    """One line per op: does Triton beat the torch twin (what ``auto`` runs otherwise) in most
    workloads? Also says when another implementation of the same run (a plain matmul + topk,
    faiss) beat both, so the table never hides a faster option."""
    for op in ("similarity_topk", "route_sources", "dedup_mask", "pool_normalize"):
        mine = [r for r in records if r["op"] == op and r["impl"] == "triton"]
        if not use_triton or not mine:
            ctx.emit({"suite": "kernels", "op": op, "verdict": "triton not measured (needs CUDA or TRITON_INTERPRET=1)"})
            continue
        ratios = [r["ratio_vs_torch"] or 0.0 for r in mine]
        wins = sum(1 for x in ratios if x > 1.0)
        others: dict[str, list[float]] = {}  # impl -> its time / triton's time, per workload
        for r in mine:
            same = [o for o in records if o["op"] == op and o["impl"] not in ("triton", "torch")
                    and all(o.get(key) == r.get(key) for key in ("N", "C", "S", "B", "T", "k", "dtype"))]
            for o in same:
                others.setdefault(o["impl"], []).append(o["p50_ms"] / r["p50_ms"])
        faster_than_triton = {impl: {"workloads_faster": sum(1 for x in xs if x < 1.0), "workloads": len(xs),
                                     "median_speedup_over_triton": float(1.0 / np.median(xs))}
                              for impl, xs in others.items() if xs}
        for impl, summary in faster_than_triton.items():  # approximate impls: their worst recall@k
            recalls = [o["recall_at_k"] for o in records if o["op"] == op and o["impl"] == impl and "recall_at_k" in o]
            if recalls:
                summary["min_recall_at_k"] = float(min(recalls))
        on_cuda = mine[0]["device"] == "cuda"
        ctx.emit({"suite": "kernels", "op": op, "verdict": "triton faster" if wins * 2 > len(mine) else "torch faster",
                  "triton_wins": wins, "workloads": len(mine), "device": mine[0]["device"], "plan": mine[0]["plan"],
                  "median_ratio_vs_torch": float(np.median(ratios)), "min_ratio_vs_torch": float(min(ratios)),
                  "max_ratio_vs_torch": float(max(ratios)), "other_impls": faster_than_triton,
                  "note": "interpreter timings say nothing about GPU speed" if not on_cuda else "",
                  "recommend_triton_default": wins * 2 > len(mine) and on_cuda})


def _plot(ctx: ProfileContext, records: list[dict[str, Any]]) -> None:
    rows = [r for r in records if r["impl"] != "torch" and r.get("ratio_vs_torch")]
    if not rows:
        return

    def label(r: dict[str, Any]) -> str:
        keys = [f"{key}={r[key]}" for key in ("N", "C", "B", "T", "k") if key in r]
        return f"{r['op']} {' '.join(keys)} {r['dtype']} [{r['impl']}]"

    def draw(fig, ax) -> None:
        ys = range(len(rows))
        ax.barh(list(ys), [r["ratio_vs_torch"] for r in rows],
                color=["tab:green" if r["ratio_vs_torch"] > 1 else "tab:red" for r in rows])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(list(ys), [label(r) for r in rows], fontsize=5)
        ax.set_xscale("log")
        ax.set_xlabel("speed-up over the torch twin (p50; > 1 is faster)")
        fig.set_size_inches(9, max(4.5, 0.14 * len(rows)))

    save_plot(ctx.out_dir / "kernels.png", draw, f"kernels vs torch ({rows[0]['device']}, plan {rows[0]['plan']})")


def run(ctx: ProfileContext, args: argparse.Namespace | None = None) -> list[dict[str, Any]]:
    """Run the kernel suite; returns the records it emitted (also written by ``ctx.emit``)."""
    plan, device, use_triton = _choose(ctx)
    ctx.emit({"suite": "kernels", "plan": plan.name, "device": device.type, "triton": use_triton,
              "torch_threads": torch.get_num_threads()})
    records: list[dict[str, Any]] = []
    with ctx.profiled("kernels"):
        records += _bench_search(ctx, plan, device, use_triton)
        records += _bench_route(ctx, plan, device, use_triton)
        records += _bench_dedup(ctx, plan, device, use_triton)
        records += _bench_pool(ctx, plan, device, use_triton)
    _verdicts(ctx, records, use_triton)
    _plot(ctx, records)
    return records
