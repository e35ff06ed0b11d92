"""``searchsmith serve``: the batched inference server (embeddings, routing, health).

Heavy imports (torch, fastapi, uvicorn) happen inside the command.
"""

from __future__ import annotations

import argparse


def configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="server config YAML (limits, api_keys, batcher)")
    parser.add_argument("--index", help="index folder: also serve /v1/route over it")
    parser.add_argument("--router-config", help="router config YAML")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("overrides", nargs="*", help="server config overrides KEY=VALUE, e.g. batcher.max_batch_size=64")
    parser.set_defaults(func=run_serve)


def build_app(args: argparse.Namespace):
    """The FastAPI app for these arguments (models loaded and warmed up)."""
    from searchsmith.models.config import load_config
    from searchsmith.serving.http import ServerConfig, create_app

    cfg = load_config(ServerConfig, args.config, args.overrides)
    if args.index:
        from searchsmith.serving.cli import load_router

        router = load_router(args.index, args.router_config)
        return cfg, create_app(cfg, embedder=router.embedder, router=router)
    from searchsmith.serving.embedder import Embedder

    return cfg, create_app(cfg, embedder=Embedder())


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    cfg, app = build_app(args)
    uvicorn.run(app, host=args.host, port=args.port, timeout_graceful_shutdown=int(cfg.request_timeout_s))
    return 0
