"""``searchsmith profile server``: the HTTP server under concurrency, batching on against off.

One run, one machine: two real uvicorn servers on loopback serve ``/v1/embeddings`` (the
default all-MiniLM-L6-v2 ``Embedder``, torch) and ``/v1/rerank`` (a cross-encoder bundle,
see below), one with the dynamic batchers on (``max_batch_size`` 64, ``max_batch_tokens`` 2048,
``max_wait_ms`` 2) and one off (``max_batch_size: 1``, the baseline); every point alternates
between them. Closed-loop clients (raw asyncio HTTP/1.1 over one kept-alive send single-text embedding requests and 4-document rerank requests at concurrency 1, 8, 32
and 128 (``--quick``: 1, 8, 32 with short texts: the demo's questions for embeddings, what
one-text requests carry, and <= 80-character documents for rerank). Reported per point:
requests/s, p50/p99 latency, errors, mean batch size; per endpoint the throughput ratio on/off
at 32 clients (target >= 3x on CPU) beside the **model-only ceiling**: the model's time for
single items against one batch of the size the server formed, on the same texts, with no
HTTP at all, timed interleaved (single and batched alternate) in that point's rounds right
after the server's on / off runs, so that the load of the machine falls on both. No batcher
can gain much more than that (the server can, a little, because batching also shares the
per-request overhead): ``share_of_ceiling`` is reported as measured, and above 1 the summary
says ``"ceiling_held": false`` with a ``ceiling_note``. A PNG of latency against concurrency.

The reranker: the all-MiniLM-L6-v2 cross-encoder with an untrained one-logit head (speed does
not depend on training), exported to an int8 ONNX bundle and loaded with ``load_bundle``.
``SEARCHSMITH_PROFILE_TINY=1`` (the test) runs a tiny random BERT cross-encoder with torch
instead (no export: seconds, not minutes), concurrency 1 and 8 and a few requests per point.

The clients run in a separate process (spawned once per run), so their HTTP and JSON work does
not hold the server's GIL; on a 2-core machine they still take CPU from the server, in both
modes alike. The suite measures the CPU server: ``--device cuda`` is refused, and on a machine
with a GPU the embedder still runs on the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.serving.profiling.common import ProfileContext, free_port, percentiles, save_plot
from searchsmith.serving.profiling.timing import interleave, resolve_device

log = logging.getLogger(__name__)

CONCURRENCY = (1, 8, 32, 128)
TINY_CONCURRENCY = (1, 8)
QUICK_CONCURRENCY = (1, 8, 32)
DOCS_PER_RERANK = 4
CPU_BATCH_TOKENS = 2048
CPU_ONLY = ("the CPU server: the batchers' CPU token budget, the int8 ONNX reranker on ONNX Runtime's CPU "
            "provider, the embedder on the CPU")


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
        from searchsmith.models.tokenizer import tokenizer_lock

        with tokenizer_lock(self.tokenizer):  # the server counts tokens on request threads meanwhile
            enc = self.tokenizer([q for q, _ in pairs], [p for _, p in pairs], truncation=True,
                                 max_length=self.max_length, padding=True, return_tensors="pt")
        with self.torch.inference_mode():
            return self.model(**enc).logits[:, 0].float().numpy()  # (B,)


class LoopbackServer:
    """A uvicorn server for ``app`` in a thread on a free loopback port (``with`` stops it).

    Args:
        app: the ASGI app.
        lifetime_s: stop the server by itself after this long, even if the caller never exits
            the ``with`` (a bounded test server); None = until exit.
        **config: ``uvicorn.Config`` settings over the defaults (``log_level="warning"``,
            ``timeout_keep_alive=120``), e.g. ``log_config=None`` so records reach caplog.
    """

    def __init__(self, app: Any, *, lifetime_s: float | None = None, **config: Any) -> None:
        import uvicorn

        self.port = free_port()
        settings = {"log_level": "warning", "timeout_keep_alive": 120, **config}
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, **settings))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.watchdog = (threading.Timer(lifetime_s, lambda: setattr(self.server, "should_exit", True))
                         if lifetime_s is not None else None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        if self.watchdog is not None:
            self.watchdog.daemon = True
            self.watchdog.start()
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("profile server: uvicorn did not start within 60 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        self.server.should_exit = True
        self.thread.join(timeout=60)


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> int:
    """Send one pre-encoded HTTP/1.1 request on a kept-alive connection; the status code.

    The response is read to its end (``Content-Length``; uvicorn sends it for JSON bodies),
    so the next request on the connection starts clean.
    """
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                   if k.strip().lower() == "content-length"), None)
    if length is None:
        raise RuntimeError(f"profile client: response without Content-Length ({lines[0]})")
    await reader.readexactly(length)
    return status


def _encode(port: int, path: str, body: dict[str, Any]) -> bytes:
    import json

    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def _load(port: int, path: str, bodies: list[dict[str, Any]], concurrency: int
                ) -> tuple[list[float], int, float]:
    """Closed loop: ``concurrency`` clients send ``bodies`` in turn; (latencies s, errors, wall s).

    Each client holds one kept-alive connection and writes pre-encoded requests over plain
    asyncio streams (what wrk or oha do): an HTTP library's per-request CPU (httpx: about a
    millisecond) would be taken from the server on a 2-core machine and hide its speed.
    """
    latencies: list[float] = []
    errors = 0
    queue = [_encode(port, path, b) for b in reversed(bodies)]

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
        try:
            while queue:
                raw = queue.pop()
                t0 = time.perf_counter()
                try:
                    status = await _request(reader, writer, raw)
                except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
                    errors += 1
                    log.warning("profile server: %s failed on the client side: %s: %s", path, type(exc).__name__, exc)
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
                    continue
                latencies.append(time.perf_counter() - t0)
                if status != 200:
                    errors += 1
                    log.warning("profile server: %s answered %s", path, status)
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - start


def load_in_process(port: int, path: str, bodies: list[dict[str, Any]], concurrency: int
                    ) -> tuple[list[float], int, float]:
    """:func:`_load` run to completion (the entry point of the client process), on uvloop
    when it is installed (as the server's uvicorn uses it)."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    if factory is None or not hasattr(asyncio, "Runner"):  # asyncio.Runner: Python 3.11+
        return asyncio.run(_load(port, path, bodies, concurrency))
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_load(port, path, bodies, concurrency))


def _bodies(texts: list[str], endpoint: str, n: int, offset: int,
            queries: list[str] | None = None) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        j = (offset + i) % len(texts)
        if endpoint == "/v1/embeddings":
            pool = queries or texts
            out.append({"input": pool[(offset + i) % len(pool)]})
        else:
            docs = [texts[(j + k + 1) % len(texts)] for k in range(DOCS_PER_RERANK)]
            out.append({"query": texts[j][:200], "documents": docs})
    return out


def query_texts() -> list[str]:
    """The demo's questions (qa.jsonl and routing.jsonl): what single-text embedding requests
    of a search system carry (about 14 WordPiece tokens on average)."""

    from searchsmith.models.demo import qa_path, routing_path
    from searchsmith.models.jsonl import read_jsonl

    out = []
    for path in (qa_path(), routing_path()):
        out += [rec["query"] for rec in read_jsonl(path, ["query"], what="demo questions")]
    return out


def model_ceiling(run: Any, items: list[Any], size: int, reps: int = 3, *, warmup: int = 1) -> dict[str, Any]:
    """What batching can gain at most, with the model alone (no HTTP): the time of ``size``
    single-item calls over one call of ``size`` items, on the same items; the two are timed
    interleaved (``timing.interleave``: ``warmup`` untimed calls each, then ``reps`` rounds)
    and the best of each kept."""
    size = max(1, min(size, len(items)))
    batch = items[:size]
    timed = interleave({"single": lambda: [run([x]) for x in batch], "batched": lambda: run(batch)}, reps,
                       warmup=warmup)
    return _ceiling(size, timed.samples["single"], timed.samples["batched"])


def _ceiling(size: int, single: list[float], batched: list[float]) -> dict[str, Any]:
    """The ceiling's record from the samples (seconds) of single-item passes and of batches."""
    s, b = min(single), min(batched)
    return {"batch": size, "single_ms_per_item": 1e3 * s / size, "batched_ms_per_item": 1e3 * b / size,
            "ceiling_ratio": s / b, "rounds": len(single), "single_s": single, "batched_s": batched}


def share_of_ceiling(ratio: float, ceiling: dict[str, Any]) -> dict[str, Any]:
    """``ratio`` (on / off) as a share of the model-only ceiling, and whether the bound held.

    The share is reported as measured, never clipped; above 1 the row says so: the server
    gained more than the model alone did at that batch size (batching also shares the
    per-request HTTP work the ceiling leaves out, and both figures carry the machine's noise).
    """
    share = ratio / ceiling["ceiling_ratio"]
    out: dict[str, Any] = {"share_of_ceiling": share, "ceiling_held": share <= 1.0}
    if share > 1.0:
        out["ceiling_note"] = (f"the bound did not hold: batching gained {ratio:.2f}x through the server but "
                               f"{ceiling['ceiling_ratio']:.2f}x with the model alone at batch {ceiling['batch']} "
                               "(measured interleaved with the server's rounds); the difference is per-request "
                               "work batching also shares, or noise")
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
    resolve_device("server", ctx.device, cpu_only=CPU_ONLY)  # before any work
    from searchsmith.serving.batcher import BatcherConfig
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from searchsmith.serving.http import create_app
    from searchsmith.serving.limits import ServerLimits
    from searchsmith.serving.profiling.embed import mixed_texts

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    levels = TINY_CONCURRENCY if tiny else QUICK_CONCURRENCY if ctx.quick else CONCURRENCY
    # --quick and tiny: short texts, the demo's questions for /v1/embeddings (what one-text
    # requests carry) and <= 80 characters for rerank documents; else the demo corpus's mixed
    # lengths (whole documents to titles), where the forward pass, not the server, dominates.
    short = tiny or ctx.quick
    texts = [t[:80] for t in mixed_texts(512)] if short else mixed_texts(512)
    embed_texts = query_texts() if short else texts
    embedder = Embedder(EmbedderConfig(device="cpu"))  # the CPU server, whatever GPU the machine has
    reranker, rerank_name = _reranker(tiny)
    from searchsmith.serving.runner import EmbeddingRunner, RerankRunner

    # The model-only ceiling: the model alone, single items against one batch of the size the
    # server formed at the summary's concurrency, on the same texts, timed in that point's
    # rounds right after the server's on / off runs, so that the bound and what it bounds
    # share the machine's load.
    embed_items = embedder.tokenize(embed_texts[:64])
    pair_items = [(b["query"], d) for b in _bodies(texts, "/v1/rerank", 16, 0) for d in b["documents"]]
    runners = {"/v1/embeddings": (EmbeddingRunner(embedder).run, embed_items),
               "/v1/rerank": (RerankRunner(reranker).run, pair_items)}
    summary_at = max(c for c in levels if c <= 32)
    ceiling_samples: dict[str, dict[str, Any]] = {}
    # A CPU-sized token budget (the Embedder's own CPU default): with mixed lengths, a batch
    # bounded only by count pads short texts to the longest and runs slower than singles.
    modes = {"on": BatcherConfig(max_batch_size=64, max_batch_tokens=CPU_BATCH_TOKENS, max_wait_ms=2.0,
                                 max_queue=8192, timeout_s=600.0),
             "off": BatcherConfig(max_batch_size=1, max_wait_ms=0.0, max_queue=8192, timeout_s=600.0)}
    # Both servers run at once and each point alternates on / off for ``rounds`` rounds, so
    # a change in the machine's load (shared cores) hits both modes alike.
    rounds = 1 if (tiny or ctx.quick) else 2
    apps = {mode: create_app(ServerLimits(batcher=b, rerank_batcher=b, request_timeout_s=600.0),
                             embedder=embedder, reranker=reranker) for mode, b in modes.items()}
    servers = {mode: LoopbackServer(app).__enter__() for mode, app in apps.items()}
    # The clients run in a process of their own: in the server's process their HTTP and JSON
    # work would hold the same GIL as the server's and be counted against the server.
    clients = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    results: list[dict[str, Any]] = []
    try:
        for endpoint in ("/v1/embeddings", "/v1/rerank"):
            for srv in servers.values():  # warm-up: connections, first batches
                clients.submit(load_in_process, srv.port, endpoint,
                               _bodies(texts, endpoint, 8, 0, embed_texts), 8).result()
            for c in levels:
                n = 8 if tiny else int(min(256, max(32, 2 * c)))
                acc = {mode: {"lat": [], "errors": 0, "wall": 0.0, "items": 0, "batches": 0} for mode in modes}
                for r in range(rounds):
                    for mode, srv in servers.items():
                        state = apps[mode].state.serving
                        batcher = state.batcher if endpoint == "/v1/embeddings" else state.rerank_batcher
                        before = batcher.stats()
                        lat, errors, wall = clients.submit(
                            load_in_process, srv.port, endpoint,
                            _bodies(texts, endpoint, n, c + r * n, embed_texts), c).result()
                        after = batcher.stats()
                        a = acc[mode]
                        a["lat"] += lat
                        a["errors"] += errors
                        a["wall"] += wall
                        a["items"] += after["items_run"] - before["items_run"]
                        a["batches"] += after["batches_run"] - before["batches_run"]
                    if c == summary_at:  # the ceiling's round, beside this round's on / off runs
                        got = ceiling_samples.setdefault(endpoint, {
                            "size": round(acc["on"]["items"] / max(acc["on"]["batches"], 1)),
                            "single": [], "batched": []})
                        run_fn, items = runners[endpoint]
                        one = model_ceiling(run_fn, items, got["size"], 1 if tiny else 2, warmup=1 if r == 0 else 0)
                        got["size"] = one["batch"]
                        got["single"] += one["single_s"]
                        got["batched"] += one["batched_s"]
                for mode, a in acc.items():
                    rec = {"suite": "server", "endpoint": endpoint, "batching": mode, "concurrency": c, "device": "cpu",
                           "requests": n * rounds, "rounds": rounds, "errors": a["errors"],
                           "throughput_rps": n * rounds / a["wall"],
                           "mean_batch_size": a["items"] / max(a["batches"], 1),
                           "max_batch_size": modes[mode].max_batch_size, **percentiles(a["lat"]),
                           "embed_model": embedder.model_name, "rerank_model": rerank_name,
                           "docs_per_rerank": DOCS_PER_RERANK,
                           "texts": ("demo questions" if endpoint == "/v1/embeddings" else "<= 80 characters")
                           if short else "mixed lengths",
                           "tiny": tiny}
                    results.append(ctx.emit(rec))
    finally:
        clients.shutdown()
        for srv in servers.values():
            srv.__exit__(None, None, None)
    for endpoint in ("/v1/embeddings", "/v1/rerank"):
        at = {r["batching"]: r for r in results if r["endpoint"] == endpoint and r["concurrency"] == summary_at}
        ratio = at["on"]["throughput_rps"] / at["off"]["throughput_rps"]
        got = ceiling_samples[endpoint]
        ceiling = _ceiling(got["size"], got["single"], got["batched"])
        ctx.emit({"suite": "server", "summary": True, "endpoint": endpoint, "concurrency": at["on"]["concurrency"],
                  "device": "cpu", "on_rps": at["on"]["throughput_rps"], "off_rps": at["off"]["throughput_rps"],
                  "ratio_on_vs_off": ratio, "target": ">= 3x throughput at 32 concurrent (CPU)",
                  "model_ceiling": ceiling, **share_of_ceiling(ratio, ceiling),
                  "texts": ("demo questions" if endpoint == "/v1/embeddings" else "<= 80 characters")
                  if short else "mixed lengths",
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
