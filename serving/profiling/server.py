"""``searchsmith profile server``: the HTTP server under concurrency, batching on against off.

One run, one machine: two real uvicorn servers on loopback serve ``/v1/embeddings`` (the
default all-MiniLM-L6-v2 ``Embedder``, torch) and ``/v1/rerank`` (a cross-encoder bundle,
see below), one with the dynamic batchers on (``max_batch_size`` 64, ``max_batch_tokens`` 2048,
``max_wait_ms`` 2) and one off (``max_batch_size: 1``, the baseline); every point alternates between them. Closed-loop clients (httpx, one
connection each) send single-text embedding requests and 4-document rerank requests at
concurrency 1, 8, 32 and 128 (``--quick``: 1, 8, 32 with short, query-like texts). Reported per point: requests/s, p50/p99 latency, errors, mean
batch size; per endpoint the throughput ratio on/off at 32 clients (target >= 3x on CPU);
a PNG of latency against concurrency.

The reranker: the all-MiniLM-L6-v2 cross-encoder with an untrained one-logit head (speed does
not depend on training), exported to an int8 ONNX bundle and loaded with ``load_bundle``.
``SEARCHSMITH_PROFILE_TINY=1`` (the test) runs a tiny random BERT cross-encoder with torch
instead (no export: seconds, not minutes), concurrency 1 and 8 and a few requests per point.

The clients run in a separate process (spawned once per run), so their HTTP and JSON work does
not hold the server's GIL; on a 2-core machine they still take CPU from the server, in both
modes alike.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.serving.profiling.common import ProfileContext, percentiles, save_plot

CONCURRENCY = (1, 8, 32, 128)
TINY_CONCURRENCY = (1, 8)
QUICK_CONCURRENCY = (1, 8, 32)
DOCS_PER_RERANK = 4
CPU_BATCH_TOKENS = 2048


class TorchReranker:
    """A cross-encoder run with torch, with the rerank bundle's API (``score_pairs``).

    Used by the tiny profile only; the full profile serves an exported ONNX bundle.
    """

    task = "rerank"

    def __init__(self, folder: Path, max_length: int = 64) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        self.max_length = max_length
        self.manifest = {"max_length": max_length}

    def score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        enc = self.tokenizer([q for q, _ in pairs], [p for _, p in pairs], truncation=True,
                             max_length=self.max_length, padding=True, return_tensors="pt")
        with self.torch.inference_mode():
            return self.model(**enc).logits[:, 0].float().numpy()  # (B,)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    """A uvicorn server for ``app`` in a thread on a free loopback port (``with`` stops it)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    timeout_keep_alive=120))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("profile server: uvicorn did not start within 60 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


async def _load(port: int, path: str, bodies: list[dict[str, Any]], concurrency: int
                ) -> tuple[list[float], int, float]:
    """Closed loop: ``concurrency`` clients send ``bodies`` in turn; (latencies s, errors, wall s)."""
    import httpx

    latencies: list[float] = []
    errors = 0
    queue = list(reversed(bodies))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120) as client:
        async def worker() -> None:
            nonlocal errors
            while queue:
                body = queue.pop()
                t0 = time.perf_counter()
                r = await client.post(path, json=body)
                latencies.append(time.perf_counter() - t0)
                errors += r.status_code != 200
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return latencies, errors, wall


def load_in_process(port: int, path: str, bodies: list[dict[str, Any]], concurrency: int
                    ) -> tuple[list[float], int, float]:
    """:func:`_load` run to completion (the entry point of the client process)."""
    return asyncio.run(_load(port, path, bodies, concurrency))


def _bodies(texts: list[str], endpoint: str, n: int, offset: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        j = (offset + i) % len(texts)
        if endpoint == "/v1/embeddings":
            out.append({"input": texts[j]})
        else:
            docs = [texts[(j + k + 1) % len(texts)] for k in range(DOCS_PER_RERANK)]
            out.append({"query": texts[j][:200], "documents": docs})
    return out


def _reranker(tiny: bool) -> tuple[Any, str]:
    """The rerank model served: (bundle-like object, description). The int8 bundle is the
    one ``profile rerank`` exported earlier in the same process, when it ran."""
    from searchsmith.serving.profiling.rerank import exported, untrained_source

    src = untrained_source(tiny)
    if tiny:
        return TorchReranker(src.model_dir), f"{src.base_model}, torch"
    from searchsmith.models.runtime import load_bundle

    bundle = load_bundle(exported(src, "int8", False), device="cpu", allow_untrained=True)
    return bundle, f"{src.base_model}, ONNX int8 bundle"


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    from searchsmith.serving.batcher import BatcherConfig
    from searchsmith.serving.embedder import Embedder
    from searchsmith.serving.http import ServerConfig, create_app
    from searchsmith.serving.profiling.embed import mixed_texts

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    levels = TINY_CONCURRENCY if tiny else QUICK_CONCURRENCY if ctx.quick else CONCURRENCY
    # --quick and tiny: short texts (query-like, <= 80 characters); else the demo corpus's mixed
    # lengths (whole documents to titles), where the forward pass, not the server, dominates.
    short = tiny or ctx.quick
    texts = [t[:80] for t in mixed_texts(512)] if short else mixed_texts(512)
    embedder = Embedder()
    reranker, rerank_name = _reranker(tiny)
    # A CPU-sized token budget (the Embedder's own CPU default): with mixed lengths, a batch
    # bounded only by count pads short texts to the longest and runs slower than singles.
    modes = {"on": BatcherConfig(max_batch_size=64, max_batch_tokens=CPU_BATCH_TOKENS, max_wait_ms=2.0,
                                 max_queue=8192, timeout_s=600.0),
             "off": BatcherConfig(max_batch_size=1, max_wait_ms=0.0, max_queue=8192, timeout_s=600.0)}
    # Both servers run at once and each point alternates on / off for ``rounds`` rounds, so
    # a change in the machine's load (shared cores) hits both modes alike.
    rounds = 1 if (tiny or ctx.quick) else 2
    apps = {mode: create_app(ServerConfig(batcher=b, rerank_batcher=b, request_timeout_s=600.0),
                             embedder=embedder, reranker=reranker) for mode, b in modes.items()}
    servers = {mode: LoopbackServer(app).__enter__() for mode, app in apps.items()}
    # The clients run in a process of their own: in the server's process their HTTP and JSON
    # work would hold the same GIL as the server's and be counted against the server.
    clients = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    results: list[dict[str, Any]] = []
    try:
        for endpoint in ("/v1/embeddings", "/v1/rerank"):
            for srv in servers.values():  # warm-up: connections, first batches
                clients.submit(load_in_process, srv.port, endpoint, _bodies(texts, endpoint, 8, 0), 8).result()
            for c in levels:
                n = 8 if tiny else int(min(256, max(32, 2 * c)))
                acc = {mode: {"lat": [], "errors": 0, "wall": 0.0, "items": 0, "batches": 0} for mode in modes}
                for r in range(rounds):
                    for mode, srv in servers.items():
                        state = apps[mode].state.serving
                        batcher = state.batcher if endpoint == "/v1/embeddings" else state.rerank_batcher
                        before = batcher.stats()
                        lat, errors, wall = clients.submit(
                            load_in_process, srv.port, endpoint, _bodies(texts, endpoint, n, c + r * n), c).result()
                        after = batcher.stats()
                        a = acc[mode]
                        a["lat"] += lat
                        a["errors"] += errors
                        a["wall"] += wall
                        a["items"] += after["items_run"] - before["items_run"]
                        a["batches"] += after["batches_run"] - before["batches_run"]
                for mode, a in acc.items():
                    rec = {"suite": "server", "endpoint": endpoint, "batching": mode, "concurrency": c,
                           "requests": n * rounds, "rounds": rounds, "errors": a["errors"],
                           "throughput_rps": n * rounds / a["wall"],
                           "mean_batch_size": a["items"] / max(a["batches"], 1),
                           "max_batch_size": modes[mode].max_batch_size, **percentiles(a["lat"]),
                           "embed_model": embedder.model_name, "rerank_model": rerank_name,
                           "docs_per_rerank": DOCS_PER_RERANK, "texts": "short" if short else "mixed",
                           "tiny": tiny}
                    results.append(ctx.emit(rec))
    finally:
        clients.shutdown()
        for srv in servers.values():
            srv.__exit__(None, None, None)
    for endpoint in ("/v1/embeddings", "/v1/rerank"):
        at = {r["batching"]: r for r in results if r["endpoint"] == endpoint and r["concurrency"] == max(
            c for c in levels if c <= 32)}
        ratio = at["on"]["throughput_rps"] / at["off"]["throughput_rps"]
        ctx.emit({"suite": "server", "summary": True, "endpoint": endpoint, "concurrency": at["on"]["concurrency"],
                  "on_rps": at["on"]["throughput_rps"], "off_rps": at["off"]["throughput_rps"],
                  "ratio_on_vs_off": ratio, "target": ">= 3x throughput at 32 concurrent (CPU)",
                  "errors": sum(r["errors"] for r in results if r["endpoint"] == endpoint),
                  "note": "clients (one separate process) and server share the machine", "tiny": tiny})

    def draw(fig: Any, ax: Any) -> None:
        for endpoint, colour in (("/v1/embeddings", "tab:blue"), ("/v1/rerank", "tab:orange")):
            for mode, style in (("on", "-"), ("off", ":")):
                pts = sorted((r["concurrency"], r["p50_ms"], r["p99_ms"]) for r in results
                             if r["endpoint"] == endpoint and r["batching"] == mode)
                xs = [p[0] for p in pts]
                ax.plot(xs, [p[1] for p in pts], style, color=colour, marker="o",
                        label=f"{endpoint} batching {mode} p50")
                ax.plot(xs, [p[2] for p in pts], style, color=colour, marker="x", alpha=0.5,
                        label=f"{endpoint} batching {mode} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("latency (ms)")
        ax.legend(fontsize=7)

    save_plot(ctx.out_dir / "server_latency.png", draw, "searchsmith serve: latency vs concurrency (CPU)")
