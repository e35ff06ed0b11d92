"""``searchsmith profile shards``: what one index shard costs, the inputs of the capacity model.

For N unit vectors (D = 384, the default embedder's width; N = 10^4, 10^5, 10^6, ``--quick``
stops at 10^5), the suite builds the index kinds ``searchsmith index`` writes and measures, in
the same run, against exact flat search (the baseline):

* **flat**: ``IndexFlatIP`` (exact), in RAM;
* **flat, 2 shards**: the same vectors as two shards searched as one ``faiss.IndexShards``
  (threaded), what ``shard_max_vectors`` writes;
* **IVF**: ``IndexIVFFlat`` with nlist = 4 sqrt(N) and nprobe 16 (the index defaults), in RAM;
* **IVF mmap**: the same file memory-mapped read-only (``mmap: true``) by a fresh
  ``faiss.read_index``: its lists are paged in as queries touch them (from the OS page cache
  here, the file having just been written; from a cold disk add its read latency).

Per kind: bytes per vector on disk, p50 / p99 latency of one query, queries/s at batch 32, and
recall@10 against the exact top-10 (1.0 for flat). The kinds are timed against each other as
every suite times its variants (``timing.interleave``): after a warm-up, each query (each batch)
goes to every kind back to back, in an order that rotates by one each round, so that a change in
the machine's load falls on all of them alike. Queries are held-out vectors of the same
distribution (random unit vectors: the worst case for IVF, which clusters real embeddings
better; recall on real text is higher). ``serving/profiling/CAPACITY.md`` turns these into
machine counts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from searchsmith.serving.profiling.common import ProfileContext, percentiles, save_plot
from searchsmith.serving.profiling.timing import interleave, resolve_device

DIM = 384
K = 10
BATCH = 32


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered(rng: np.random.Generator, n: int, clusters: int = 256) -> np.ndarray:
    """Unit vectors around ``clusters`` centres: closer to real embeddings than uniform noise."""
    centres = _unit(rng, clusters)
    x = centres[rng.integers(0, clusters, n)] + 0.35 * _unit(rng, n)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _latency(kinds: dict[str, object], queries: np.ndarray) -> dict[str, dict[str, float]]:
    """Per kind, the percentiles of one query's search: every query under each kind in turn
    (rotating), after the first 5 queries under each, untimed."""
    fns = {name: (lambda q, index=index: index.search(q[None], K)) for name, index in kinds.items()}
    timed = interleave(fns, 0, warmup=5, inputs=[(q,) for q in queries])
    return {name: percentiles(samples) for name, samples in timed.samples.items()}


def _throughput(kinds: dict[str, object], queries: np.ndarray, rounds: int) -> dict[str, float]:
    """Per kind, queries/s of ``rounds`` searches of one batch of ``BATCH`` queries: the kinds
    interleaved round by round (rotating), after one untimed batch each."""
    batch = queries[:BATCH]
    fns = {name: (lambda index=index: index.search(batch, K)) for name, index in kinds.items()}
    timed = interleave(fns, rounds, warmup=1)
    return {name: len(batch) * rounds / sum(samples) for name, samples in timed.samples.items()}


def _recall(ids: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, exact)]))


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    resolve_device("shards", ctx.device, cpu_only="faiss CPU indexes, what searchsmith index writes")
    import faiss

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    sizes = (2_000, 8_000) if tiny else (10_000, 100_000) if ctx.quick else (10_000, 100_000, 1_000_000)
    n_queries = 20 if tiny else 200
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="searchsmith-shards-") as tmp:
        for n in sizes:
            x = _clustered(rng, n + n_queries)
            base, queries = x[:n], x[n:]
            ids = np.arange(n, dtype=np.int64)
            kinds: dict[str, object] = {}
            files: dict[str, Path] = {}

            flat = faiss.IndexIDMap2(faiss.IndexFlatIP(DIM))
            flat.add_with_ids(base, ids)
            kinds["flat"] = flat
            files["flat"] = Path(tmp) / f"flat-{n}.faiss"
            faiss.write_index(flat, str(files["flat"]))

            parts = []
            for half in np.array_split(ids, 2):
                part = faiss.IndexIDMap2(faiss.IndexFlatIP(DIM))
                part.add_with_ids(base[half], half)
                parts.append(part)
            shards = faiss.IndexShards(DIM, True, False)
            for part in parts:
                shards.add_shard(part)
            kinds["flat_2_shards"] = shards

            nlist = max(1, min(int(4 * np.sqrt(n)), n // 39))
            ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
            ivf.train(base[: min(n, 50 * nlist)])
            ivf.nprobe = min(16, nlist)
            ivf_map = faiss.IndexIDMap2(ivf)
            ivf_map.add_with_ids(base, ids)
            kinds["ivf"] = ivf_map
            files["ivf"] = Path(tmp) / f"ivf-{n}.faiss"
            faiss.write_index(ivf_map, str(files["ivf"]))
            mapped = faiss.read_index(str(files["ivf"]), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            kinds["ivf_mmap"] = mapped

            _, exact = flat.search(queries, K)
            rec = {"suite": "shards", "vectors": n, "dim": DIM, "k": K, "nlist": nlist, "nprobe": ivf.nprobe,
                   "queries": len(queries), "kinds": {}}
            latency = _latency(kinds, queries)
            throughput = _throughput(kinds, queries, 5 if tiny else 20)
            for name, index in kinds.items():
                _, got = index.search(queries, K)
                path = files.get(name.replace("_mmap", "")) if name != "flat_2_shards" else files["flat"]
                rec["kinds"][name] = {
                    **latency[name], "queries_per_s_batch32": throughput[name],
                    "recall_at_10": _recall(got, exact),
                    "bytes_per_vector": round(path.stat().st_size / n, 1) if path is not None else None}
            flat_p50 = rec["kinds"]["flat"]["p50_ms"]
            rec["speedup_p50_vs_flat"] = {name: flat_p50 / v["p50_ms"] for name, v in rec["kinds"].items()}
            ctx.emit(rec)
            rows.append(rec)
            del kinds, flat, shards, parts, ivf_map, mapped

    def draw(fig, ax) -> None:
        xs = [r["vectors"] for r in rows]
        for name, marker in (("flat", "o"), ("flat_2_shards", "s"), ("ivf", "^"), ("ivf_mmap", "v")):
            ax.plot(xs, [r["kinds"][name]["p50_ms"] for r in rows], marker=marker, label=f"{name} p50")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("vectors in the shard (D = 384)")
        ax.set_ylabel("ms per query (k = 10)")
        ax.legend()

    save_plot(ctx.out_dir / "shards_latency.png", draw, "One shard: query latency by index kind (CPU)")
