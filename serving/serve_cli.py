"""``searchsmith serve``: the batched inference server (every model of serve.yaml, one process).

::

    searchsmith serve --config searchsmith-work/serve.yaml        # the quickstart's models
    searchsmith serve --index indexes/demo server.batcher.max_batch_size=64
    searchsmith serve --config serve.yaml --ray --replicas 4      # Ray Serve, N replicas

Without ``--config``, ``./searchsmith-work/serve.yaml`` is used when it exists (the quickstart
writes it); otherwise only what ``--index`` gives (or the default embedder) is served.
The port opens at once: ``/health`` answers 200 while the models load and warm up in the
background, ``/ready`` 503 until they are ready. On SIGTERM / Ctrl-C, uvicorn stops accepting
connections, requests in flight are answered (up to ``server.request_timeout_s``), then the
batchers drain and close.

Heavy imports (torch, fastapi, uvicorn, ray) happen inside the command.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from typing import Any

from searchsmith.models.errors import ConfigError

log = logging.getLogger(__name__)

RAY_MISSING = ("--ray: Ray Serve is not installed; install it with pip install 'searchsmith[ray]' "
               "(or pip install 'ray[serve]'), or serve without --ray")


def serve_epilog() -> str:
    """The end of ``searchsmith serve --help``: authentication, the docs, environment variables."""
    from searchsmith.serving.main import COMMANDS
    from searchsmith.serving.serve_config import ENVIRONMENT

    keys = ("every serve.yaml key with its default: searchsmith config serve" if "config" in COMMANDS
            else "every serve.yaml key: the docstrings of searchsmith.serving.serve_config")
    lines = [
        f"{keys}.",
        "authentication: server.api_keys: [KEY] in serve.yaml; clients send 'Authorization: Bearer KEY'",
        "  (the OpenAI SDK: OpenAI(base_url='http://HOST:PORT/v1', api_key=KEY)); /health, /ready, /metrics",
        "  and /docs need no key.",
        "API docs: http://HOST:PORT/docs (Swagger UI, works offline); models served: GET /v1/models.",
        "environment:",
        *(f"  {name}: {text}" for name, text in ENVIRONMENT.items()),
    ]
    return "\n".join(lines)


def configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = serve_epilog()
    parser.add_argument("--config", help="serve.yaml: index, bundles, server limits, pipeline "
                                         "(default: ./searchsmith-work/serve.yaml when it exists)")
    parser.add_argument("--index", help="index folder (overrides the config's 'index'): /v1/route and /v1/search")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ray", action="store_true", help="serve through Ray Serve (pip install 'searchsmith[ray]')")
    parser.add_argument("--replicas", type=int, default=None, help="--ray: number of replicas (each loads every "
                        "model); default: serve.yaml's ray.replicas, or autoscaling within ray.min/max_replicas")
    parser.add_argument("overrides", nargs="*", default=[],
                        help="config overrides KEY=VALUE, e.g. server.batcher.max_batch_size=64")
    parser.set_defaults(func=run_serve)


def load_config(args: argparse.Namespace):
    """The ServeConfig for these arguments (paths checked, nothing loaded yet)."""
    from searchsmith.serving.serve_config import (
        check_paths,
        default_serve_config,
        load_serve_config,
    )

    # an empty --config is refused by the loader ("config file path is empty"), as ask, route,
    # index and train do, instead of falling back to the defaults
    path = args.config if args.config is not None else default_serve_config()
    if path and args.config is None:
        log.info("serve: using %s", path)
    cfg = load_serve_config(path, args.overrides, index=args.index)
    check_paths(cfg)
    return cfg


def build_app(args: argparse.Namespace, *, background: bool = False):
    """The FastAPI app for these arguments.

    Args:
        args: the parsed ``serve`` arguments.
        background: load the models in a thread started with the app (``searchsmith serve``:
            the port opens at once, /ready says when they are warm); False loads them here.

    Returns:
        (ServeConfig, app).
    """
    from searchsmith.serving.http import create_app
    from searchsmith.serving.serve_config import load_models

    cfg = load_config(args)
    if background:
        return cfg, create_app(cfg.server, loader=functools.partial(load_models, cfg))
    app = create_app(cfg.server)
    load_models(cfg, app.state.serving)
    return cfg, app


def start_ray_serve(args: argparse.Namespace, cfg: Any) -> str:
    """Deploy the app on Ray Serve (``--replicas`` or serve.yaml ``ray``) and return a line
    saying how many replicas serve where; the deployment keeps running (``serve.shutdown()``).

    With ``ray.gateway`` (the default) a thin gateway deployment takes the HTTP requests and
    forwards them to the model replicas: a request whose replica dies is retried on another one
    or answered 503 (``searchsmith.serving.ray_gateway``). One HTTP proxy, on the head node.

    ``server.max_connections`` bounds the requests in flight through the gateway (Ray's proxy
    holds the connections and has no limit of its own: ``ray_gateway.InFlightLimit``).

    Raises:
        ConfigError: Ray Serve is not installed, ``--replicas`` < 1, ``ray.address`` does not
            answer (or does not let this process join: token authentication), or
            ``server.max_connections`` is set with ``ray.gateway: false`` (nothing applies it).
    """
    if args.replicas is not None and args.replicas < 1:
        raise ConfigError(f"--replicas: expected an int >= 1, got {args.replicas}")
    if not cfg.ray.gateway and cfg.server.max_connections is not None:
        raise ConfigError(
            f"server.max_connections: {cfg.server.max_connections} cannot be applied with ray.gateway: false "
            "(Ray Serve's proxy then calls the replicas directly and has no connection limit); set "
            "ray.gateway: true (the default; the gateway bounds the requests in flight), or remove "
            "server.max_connections (each replica still bounds its requests: server.max_pending_requests)")
    try:
        import ray
        from ray import serve
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    from searchsmith.serving.ray_gateway import GatewayDeployment, ModelReplica, gateway_options

    rcfg = cfg.ray
    if rcfg.address:
        from searchsmith.serving.index_ray import check_address

        try:
            check_address(rcfg.address)
        except ConfigError as exc:
            why = f" ({exc.__context__})" if exc.__context__ is not None else ""
            raise ConfigError(f"ray.address {rcfg.address!r} (serve.yaml): no Ray head answers there{why}; start "
                              "one with 'ray start --head --port PORT', or remove ray.address for a local Ray") from None
        try:
            ray.init(address=rcfg.address, ignore_reinit_error=True)
        except ConnectionError as exc:
            causes = f"{exc} {exc.__cause__}"
            fix = ("the cluster uses token authentication (Ray's default for 'ray start --head'): run with "
                   "RAY_AUTH_MODE=token and the head's token (its ~/.ray/auth_token) in ~/.ray/auth_token or "
                   "RAY_AUTH_TOKEN" if "Auth" in causes else
                   "check the address, and that this Ray is the cluster's version")
            raise ConfigError(f"ray.address {rcfg.address!r} (serve.yaml): joining the Ray cluster failed "
                              f"({exc}); {fix}") from exc

    opts = rcfg.deployment_options(args.replicas)
    # Ray waits this long for requests in flight when a replica stops (graceful shutdown).
    grace_s = float(cfg.server.request_timeout_s)
    models = serve.deployment(name="searchsmith", **opts, graceful_shutdown_timeout_s=grace_s)(
        serve.ingress()(ModelReplica))
    app = models.bind(args.config, list(args.overrides), args.index)
    if rcfg.gateway:
        limit = gateway_connection_limit(cfg.server, opts)
        gateway = serve.deployment(name="gateway", **gateway_options(limit),
                                   graceful_shutdown_timeout_s=grace_s)(GatewayDeployment)
        app = gateway.bind(app, rcfg.retries, cfg.server.max_body_bytes, limit)
    # One proxy (on the head): on one machine, a proxy per node would all bind the same port.
    serve.start(proxy_location="HeadOnly", http_options={"host": args.host, "port": args.port})
    serve.run(app, name="searchsmith", route_prefix="/")
    scale = (f"{opts['num_replicas']} Ray Serve replica(s)" if "num_replicas" in opts else
             f"Ray Serve, {rcfg.min_replicas}-{rcfg.max_replicas} replicas (autoscaling)")
    return f"searchsmith: {scale} at http://{args.host}:{args.port}"


def gateway_connection_limit(server: Any, opts: dict[str, Any]) -> int:
    """``server.max_connections`` for the gateway: as set, or when null twice the requests in
    work of every replica (``server.max_pending_requests`` each, over ``num_replicas`` or
    autoscaling's ``max_replicas`` in ``opts``, the model deployment's options): each replica
    bounds its own requests in work, the gateway all of them."""
    if server.max_connections is not None:
        return server.max_connections
    auto = opts.get("autoscaling_config")
    replicas = auto["max_replicas"] if auto else opts["num_replicas"]
    return server.connection_limit * replicas


def run_ray(args: argparse.Namespace, cfg: Any) -> int:
    """Serve the same FastAPI app through Ray Serve until Ctrl-C (:func:`start_ray_serve`)."""
    line = start_ray_serve(args, cfg)
    print(f"{line} (Ctrl-C stops)", flush=True)
    from ray import serve

    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0


def check_port(host: str, port: int) -> None:
    """``--port`` is in 1-65535 and free on ``host``, checked before any model loads (a port
    out of range was taken modulo 65536, or failed after every model had loaded).

    Raises:
        ConfigError: naming ``--port`` and the fix.
    """
    import socket

    if not 1 <= port <= 65535:
        raise ConfigError(f"--port: {port} is not a TCP port; give one in 1-65535 (default 8000)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"--host: {host!r} does not resolve ({exc}); give an address such as 127.0.0.1 "
                          "or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            raise ConfigError(f"--port: {host}:{port} cannot be bound ({exc.strerror}); another process may be "
                              "listening there: stop it, or choose another --port") from None


def run_serve(args: argparse.Namespace) -> int:
    if args.ray:  # Ray's proxy binds the port, on the cluster's head node
        return run_ray(args, load_config(args))
    if args.replicas is not None:
        raise ConfigError("--replicas: only with --ray (one uvicorn process serves one replica)")
    check_port(args.host, args.port)
    import uvicorn
    from searchsmith.serving.http_protocol import guarded_protocol

    cfg, app = build_app(args, background=True)
    # the connection limit is the protocol's, not uvicorn's limit_concurrency (http_protocol says
    # why); its refusals never reach the app, so the protocol counts them in the app's metrics
    refused = app.state.serving.metrics.refusal_hook("max_connections")
    uvicorn.run(app, host=args.host, port=args.port, timeout_graceful_shutdown=int(cfg.server.request_timeout_s),
                http=guarded_protocol(cfg.server.max_header_bytes, cfg.server.header_timeout_s,
                                      cfg.server.connection_limit, on_connection_refused=refused))
    return 0
