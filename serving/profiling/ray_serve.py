"""``searchsmith profile ray --index DIR``: the server under load, one process against Ray Serve
with 1 and 2 replicas.

The same app (``serve.yaml``: the index, no pipeline) and the same closed-loop load on
``/v1/route`` (``concurrency`` raw asyncio clients in a separate process, pre-encoded requests,
``server.py``'s client) against: uvicorn in one process (the baseline), then Ray Serve with
one and two replicas (a local Ray with the machine's CPUs) as ``searchsmith serve --ray``
runs it: proxy -> gateway -> replica (``ray.gateway``: a replica's death is retried or
answered 503), then without the gateway (proxy -> replica, ``ray.gateway: false``: one hop
less), to see what the gateway costs. Reported per setup: requests/s, p50 / p99 latency and
errors. Needs Ray (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from searchsmith.models.errors import ConfigError
from searchsmith.serving.profiling.common import (
    ProfileContext,
    check_index,
    free_port,
    percentiles,
    save_plot,
    wait_ready,
)
from searchsmith.serving.profiling.server import LoopbackServer, load_in_process

QUERIES = ["How do I configure the Lumen cache?", "When did Kestrel 2 ship?", "bread dough kneading",
           "Which port does Lumen listen on?", "What is the largest planet?", "How do I fix a merge conflict?"]


def check_args(args: argparse.Namespace) -> None:
    """``--index``: given, and an index (unless Ray is missing: then :func:`run` says so, or skips
    the step in a group, and no index is opened), checked before anything is measured or written
    (``run`` writes ``serve.yaml`` into ``--out``)."""
    if not getattr(args, "index", None):
        raise ConfigError("profile ray: needs --index DIR (an index from 'searchsmith index')")
    try:
        import ray  # noqa: F401
    except ImportError:
        return
    check_index(args.index)


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    check_args(args)  # done by the CLI already; here for a caller of run()
    try:
        import ray
        from ray import serve
    except ImportError:
        if ctx.group:  # a step of a group: a skipped row, as for any optional extra; the group goes on
            ctx.emit({"suite": "ray", "skipped": "Ray Serve is not installed; pip install -e '.[ray]'"})
            return
        raise ConfigError("profile ray: needs the ray extra (Ray Serve is not installed); "
                          "pip install -e '.[ray]'") from None
    from searchsmith.serving.serve_cli import (
        build_app,
        configure_serve,
        load_config,
        start_ray_serve,
    )

    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    n, concurrency = (40, 4) if tiny else (300, 8) if ctx.quick else (1500, 16)
    bodies = [{"query": f"{QUERIES[i % len(QUERIES)]} {i}"} for i in range(n)]
    work = Path(ctx.out_dir) / "ray-serve"
    work.mkdir(parents=True, exist_ok=True)
    (work / "serve.yaml").write_text(f"index: {Path(args.index).resolve()}\nsearch: false\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    configure_serve(parser)

    def measure(port: int, setup: str, replicas: int) -> dict:
        with ProcessPoolExecutor(max_workers=1) as pool:
            pool.submit(load_in_process, port, "/v1/route", bodies[:concurrency * 2], concurrency).result()  # warm
            latencies, errors, wall = pool.submit(load_in_process, port, "/v1/route", bodies, concurrency).result()
        rec = {"suite": "ray", "setup": setup, "replicas": replicas, "requests": n, "concurrency": concurrency,
               "requests_per_s": len(latencies) / wall, "errors": errors, **percentiles(latencies)}
        ctx.emit(rec)
        return rec

    rows = []
    base_args = parser.parse_intermixed_args(["--config", str(work / "serve.yaml")])
    _, app = build_app(base_args)
    with LoopbackServer(app) as srv:
        rows.append(measure(srv.port, "one process (uvicorn)", 1))
    app.state.serving.close()

    ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        # The test's tiny run deploys only what serve --ray runs (each deployment costs it ~30 s).
        for gateway in (True,) if tiny else (True, False):
            for replicas in (1, 2):
                port = free_port()
                argv = ["--config", str(work / "serve.yaml"), "--ray", "--replicas", str(replicas),
                        "--port", str(port), f"ray.gateway={str(gateway).lower()}"]
                ray_args = parser.parse_intermixed_args(argv)
                start_ray_serve(ray_args, load_config(ray_args))
                wait_ready(f"http://127.0.0.1:{port}")
                via = "" if gateway else ", no gateway"
                rows.append(measure(port, f"Ray Serve, {replicas} replica(s){via}", replicas))
                serve.shutdown()
    finally:
        ray.shutdown()
    base = rows[0]["requests_per_s"]
    for r in rows[1:]:
        ctx.emit({"suite": "ray", "summary": True, "setup": r["setup"], "ratio_vs_one_process": r["requests_per_s"] / base})

    def draw(fig, ax) -> None:
        names = [r["setup"].replace(", ", "\n") for r in rows]  # short lines: five labels fit side by side
        ax.bar(names, [r["requests_per_s"] for r in rows])
        ax.set_ylabel("requests/s (/v1/route)")
        ax.set_xlabel(f"setup ({concurrency} clients, {n} requests)")

    save_plot(ctx.out_dir / "ray_serve.png", draw, "One process vs Ray Serve replicas")
