"""``searchsmith index ... --ray``: the embedding of an index build on Ray Data.

The driver reads and validates the corpus and chunks it exactly as the in-process build does
(the same chunks, the same rows); the chunk texts then go through ``map_batches`` to a pool of
embedding actors (``EmbedActor``: one ``Embedder`` each, ``num_cpus`` per actor, ``num_gpus``
one per actor on GPU nodes), and the vectors come back in order to the same writer
(``build_index(..., embed=...)``): FAISS files (or shards), routing centroids, chunk store
and manifest are written by the one code path, atomically.

Recovery: an actor that dies is restarted by Ray and its batches are run again
(``max_restarts`` / ``max_task_retries``). The vectors are saved in parts as they come back
(``index_parts``: ``.<out>.build/``, sha256 per part), so a driver that dies (or a machine)
loses only the parts it had not finished: run the same command again and it resumes.

Usage::

    searchsmith index 'corpus/*.jsonl' --out indexes/big --ray                 # a local Ray
    searchsmith index corpus.jsonl --out indexes/big --ray --address HOST:6379 --workers 8
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from searchsmith.models.errors import ConfigError
from searchsmith.serving.embedder import EmbedderConfig

RAY_MISSING = ("--ray: Ray Data is not installed; install it with pip install 'searchsmith[ray]' "
               "(or pip install 'ray[data]'), or build without --ray")


class EmbedActor:
    """A Ray Data actor: one embedder, batches of ``{"i", "text"}`` -> ``{"i", "vector", "node"}``
    (``node``: the Ray node that embedded the row)."""

    def __init__(self, config: dict[str, Any], threads: int, fail_marker: str | None = None) -> None:
        import torch
        from searchsmith.models.config import from_dict
        from searchsmith.serving.embedder import Embedder

        torch.set_num_threads(max(1, threads))
        self.embedder = Embedder(from_dict(EmbedderConfig, config))
        self.fail_marker = fail_marker

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.fail_marker:  # tests: the first actor to get here dies once (a lost worker)
            import os
            from pathlib import Path

            marker = Path(self.fail_marker)
            if not marker.exists():
                marker.write_text(str(os.getpid()), encoding="utf-8")
                os._exit(1)
        import ray

        vectors = self.embedder.encode([str(t) for t in batch["text"]], show_progress=False)
        node = ray.get_runtime_context().get_node_id()
        return {"i": np.asarray(batch["i"], dtype=np.int64), "vector": vectors.astype(np.float32),
                "node": np.asarray([node] * len(vectors))}


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """A Ray address (``host:port``, ``ray://host:port``) that does not answer is a clear error,
    not a hang in ``ray.init``."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address: expected HOST:PORT (e.g. 10.0.0.5:6379) or ray://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(f"--address {address}: no Ray head answers there within {timeout_s:.0f} s ({exc}); "
                          "start one with 'ray start --head' or drop --address for a local Ray") from None


def ray_embed(config: EmbedderConfig, *, address: str | None = None, workers: int | None = None,
              num_cpus: float = 1.0, num_gpus: float = 0.0, batch_size: int = 64,
              fail_marker: str | None = None, report: Callable[[str], None] | None = None,
              start_timeout_s: float = 600.0) -> Callable[[Sequence[str]], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """``embed(texts)``: ``(positions, vectors)`` pieces as Ray Data actors finish batches (in
    any order; ``build_index`` saves each finished part of the build as they come).

    Args:
        config: the embedder of every actor (the index's ``embedder``).
        address: a running cluster (``ray.init(address=...)``); None: this process starts a
            local one (or joins the one ``RAY_ADDRESS`` names).
        workers: embedding actors; None: one per ``num_cpus`` of the cluster's CPUs.
        num_cpus, num_gpus: resources of one actor.
        batch_size: texts per batch handed to an actor.
        fail_marker: tests only: the first actor call creates this file and dies.
        start_timeout_s: the job waits until every actor is up (its model loaded), so that the
            work is spread over all of them; a cluster without the resources for them fails
            after this long instead of waiting for ever.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    if address:
        check_address(address)
    say = report or (lambda line: None)
    if batch_size < 1 or (workers is not None and workers < 1):
        raise ConfigError(f"--ray: batch_size and --workers must be >= 1, got {batch_size} and {workers}")

    def embed(texts: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False)
        pool = workers or max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-9)))
        say(f"index: embedding {len(texts)} chunks on Ray Data with {pool} actor(s)")
        t0 = time.perf_counter()
        from searchsmith.models.config import to_dict

        ray.data.DataContext.get_current().wait_for_min_actors_s = max(1, int(start_timeout_s))
        ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)],
                                 override_num_blocks=max(pool, -(-len(texts) // batch_size)))
        out = ds.map_batches(
            EmbedActor, fn_constructor_kwargs={"config": to_dict(config), "threads": max(1, int(num_cpus)),
                                               "fail_marker": fail_marker},
            batch_size=batch_size, batch_format="numpy", concurrency=pool, num_cpus=num_cpus,
            num_gpus=num_gpus or None, max_restarts=-1, max_task_retries=-1)
        n, nodes = 0, set()
        try:  # the actors start (wait_for_min_actors_s) when the first batch is asked for
            for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
                vectors = np.stack(batch["vector"]).astype(np.float32)
                n += len(vectors)
                nodes.update(str(x) for x in batch["node"])
                yield np.asarray(batch["i"], dtype=np.int64), vectors
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"--ray: {pool} embedding actor(s) of {num_cpus:g} CPU{f' and {num_gpus:g} GPU' if num_gpus else ''} "
                f"each did not all start within {start_timeout_s:.0f} s (the cluster has "
                f"{ray.cluster_resources().get('CPU', 0):g} CPUs); lower --workers or add nodes") from None
        say(f"index: Ray Data embedded {n} chunks in {time.perf_counter() - t0:.1f} s on {len(nodes)} node(s)")

    return embed


__all__ = ["EmbedActor", "RAY_MISSING", "check_address", "ray_embed"]
