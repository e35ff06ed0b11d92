"""Prometheus metrics of one server app (its own registry, so several apps can coexist).

Requests and latency per endpoint and status, the batcher's queue depth, batch sizes,
tokens, padded tokens and padding efficiency, the requests in work and their limit, the
requests a server limit refused, and the ratings of /v1/feedback (recorded or not). Served at
``GET /metrics``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServerMetrics:
    """The counters, gauges and histograms of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("searchsmith_requests", "HTTP requests", ["endpoint", "status"], registry=r)
        self.latency = Histogram("searchsmith_request_seconds", "HTTP request latency", ["endpoint"],
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=r)
        self.batch_size = Histogram("searchsmith_batch_size", "items per executed batch", ["model"],
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.batch_seconds = Histogram("searchsmith_batch_seconds", "runner time per batch", ["model"],
                                       registry=r)
        self.tokens = Counter("searchsmith_tokens", "real tokens run", ["model"], registry=r)
        self.padded_tokens = Counter("searchsmith_padded_tokens", "tokens run including padding", ["model"],
                                     registry=r)
        self.padding_efficiency = Gauge("searchsmith_padding_efficiency",
                                        "real / padded tokens of the last batch", ["model"], registry=r)
        self.queue_depth = Gauge("searchsmith_queue_depth", "items waiting in the batcher", ["model"], registry=r)
        self.pending = Gauge("searchsmith_pending_requests", "requests in work (tokenizing, queued or running)",
                             registry=r)
        self.pending_limit = Gauge("searchsmith_pending_requests_limit",
                                   "most requests in work (server.max_pending_requests)", registry=r)
        self.refused = Counter("searchsmith_refused_requests", "requests refused at once by a server limit",
                               ["limit"], registry=r)
        # recorded="false": accepted with the protocol router off (pipeline.protocol.enabled), so
        # a server dropping its clients' ratings shows here, not only as 200s of /v1/feedback
        self.feedback = Counter("searchsmith_feedback", "ratings accepted at /v1/feedback, by whether the "
                                "protocol router recorded them", ["recorded"], registry=r)
        for recorded in ("true", "false"):  # shown at 0 before the first rating
            self.feedback.labels(recorded)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def batch_hook(self, model: str) -> Callable[[int, int, int, float], None]:
        """The batcher's ``on_batch(size, tokens, padded_tokens, seconds)`` for ``model``."""

        def on_batch(size: int, tokens: int, padded: int, seconds: float) -> None:
            self.batch_size.labels(model).observe(size)
            self.batch_seconds.labels(model).observe(seconds)
            self.tokens.labels(model).inc(tokens)
            self.padded_tokens.labels(model).inc(padded)
            if padded:
                self.padding_efficiency.labels(model).set(tokens / padded)

        return on_batch

    def track_queue(self, model: str, depth: Callable[[], int]) -> None:
        self.queue_depth.labels(model).set_function(depth)

    def track_pending(self, pending: Callable[[], int], limit: int) -> None:
        self.pending.set_function(pending)
        self.pending_limit.set(limit)

    def refusal_hook(self, limit: str) -> Callable[[], None]:
        """The count of requests refused by ``limit``, a setting: ``max_pending_requests`` (the
        app's admission), ``max_connections`` (the server's protocol, outside the app:
        ``searchsmith serve`` passes it this hook)."""
        counter = self.refused.labels(limit)
        return counter.inc

    def render(self) -> bytes:
        return generate_latest(self.registry)
