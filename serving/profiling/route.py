"""``searchsmith profile route``: centroid-routing latency per query.

For 10, 100 and 1,000 sources with 16 centroids each (D = 384), the latency of scoring one
query through ``searchsmith.kernels.route_sources`` (Triton on CUDA, torch on the CPU)
against a faiss CPU baseline (``IndexFlatIP`` over all centroids, then the per-source
max in numpy), p50/p99 over repeated single-query calls. With ``--index DIR`` it also
times the whole ``CentroidRouter.route`` (embedding included) on that index.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from searchsmith.serving.profiling.common import ProfileContext, percentiles, save_plot


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    import faiss
    import torch
    from searchsmith.kernels import route_sources

    device = "cuda" if (ctx.device in ("auto", "cuda") and torch.cuda.is_available()) else "cpu"
    rng = np.random.default_rng(0)
    d, per_source, k = 384, 16, 3
    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"  # the test's end-to-end run
    repeat = 8 if tiny else 50 if ctx.quick else 300
    rows = []
    for n_sources in ((3, 10) if tiny else (10, 100, 1000)):
        cents = _unit(rng, n_sources * per_source, d)
        owner = np.repeat(np.arange(n_sources), per_source)
        queries = _unit(rng, repeat, d)
        c_t = torch.from_numpy(cents).to(device)
        o_t = torch.from_numpy(owner).to(device)
        s_t = torch.ones(n_sources, device=device)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

        def ours(q: np.ndarray) -> None:
            route_sources(torch.from_numpy(q[None]).to(device), c_t, o_t, s_t, k)
            sync()

        index = faiss.IndexFlatIP(d)
        index.add(cents)
        starts = np.arange(0, n_sources * per_source, per_source)

        def baseline(q: np.ndarray) -> None:
            sims = np.empty(len(cents), dtype=np.float32)
            scores, ids = index.search(q[None], len(cents))
            sims[ids[0]] = scores[0]
            best = np.maximum.reduceat(sims, starts)
            np.argsort(-best)[:k]

        stats = {}
        for name, fn in (("searchsmith", ours), ("faiss_cpu", baseline)):
            for q in queries[:5]:
                fn(q)
            samples = []
            with ctx.profiled(f"route-{n_sources}-sources-{name}"):
                for q in queries:
                    t0 = time.perf_counter()
                    fn(q)
                    samples.append(time.perf_counter() - t0)
            stats[name] = percentiles(samples)
        rec = {"suite": "route", "sources": n_sources, "centroids_per_source": per_source, "dim": d,
               "k": k, "device": device, "searchsmith": stats["searchsmith"], "faiss_cpu": stats["faiss_cpu"],
               "ratio_p50": stats["faiss_cpu"]["p50_ms"] / stats["searchsmith"]["p50_ms"]}
        ctx.emit(rec)
        rows.append(rec)

    if getattr(args, "index", None):
        from searchsmith.serving.cli import load_router

        router = load_router(args.index)
        history = [{"role": "user", "content": "How do I configure the Lumen cache?"}]
        for mode in ("parallel", "serial"):
            samples = []
            for i in range(20 if ctx.quick else 100):
                t0 = time.perf_counter()
                router.route(f"Where can I find the code for it? {i}", history, mode=mode)
                samples.append(time.perf_counter() - t0)
            ctx.emit({"suite": "route", "end_to_end": True, "index": args.index, "mode": mode,
                      **percentiles(samples[3:])})

    def draw(fig, ax) -> None:
        xs = [r["sources"] for r in rows]
        ax.plot(xs, [r["searchsmith"]["p50_ms"] for r in rows], marker="o", label="searchsmith p50")
        ax.plot(xs, [r["searchsmith"]["p99_ms"] for r in rows], marker="o", linestyle="--", label="searchsmith p99")
        ax.plot(xs, [r["faiss_cpu"]["p50_ms"] for r in rows], marker="s", label="faiss CPU p50")
        ax.plot(xs, [r["faiss_cpu"]["p99_ms"] for r in rows], marker="s", linestyle="--", label="faiss CPU p99")
        ax.set_xscale("log")
        ax.set_xlabel("sources (16 centroids each)")
        ax.set_ylabel("ms per query")
        ax.legend()

    save_plot(ctx.out_dir / "route_latency.png", draw, f"Routing latency per query ({device})")
