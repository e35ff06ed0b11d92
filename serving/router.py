"""Knowledge routing after KIMAs: pick the sources worth searching for a query.

Each source is summarised by k-means centroids of its chunk embeddings (computed at index
time), optionally joined by *mix-in* centroids: embedded texts that describe the source
("API reference, function signatures, repository paths"), weighted by ``mixin_weight``.
A source's score is its ``scale`` times the best weighted cosine between the query and its
centroids; the top ``top_k`` sources are returned, and below ``min_score`` the configured
``fallback_source`` is used instead.

Modes (KIMAs routed the raw query in parallel with the rewrite, which misroutes
"where is the code for it?"):

* ``parallel``: route the raw query while the rewrite runs concurrently;
* ``serial``: rewrite first, then route the rewritten query. Its source scores are fused
  with the raw query's, ``(1 - serial_raw_weight) * rewrite + serial_raw_weight * raw``:
  the rewrite brings the referent from the history, the raw query keeps the intent words
  ("code", "cost") from being drowned by the added history terms. The default 0.4 was
  tuned on the open routing sets (demo follow-ups and TREC CAsT); 0 routes the rewrite alone;
* ``auto``: ``serial`` when there is history, else ``parallel``.

The scoring runs through ``searchsmith.kernels.route_sources`` (Triton on CUDA).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from searchsmith.models.config import closest_key, is_int
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.embedder import Embedder
from searchsmith.serving.index import Index
from searchsmith.serving.rewrite import HeuristicRewriter, Rewriter, Turn, parse_history

log = logging.getLogger(__name__)

Mode = Literal["parallel", "serial", "auto"]

# Most sources one query may ask for: router.top_k, route(top_k=...), ``route --top-k`` and
# ``POST /v1/route`` (serving/schemas.py, ``le=1000``; tests/serving/test_input_checks_route.py
# ties the two). A k above the index's sources returns them all.
MAX_TOP_K = 1000


@dataclass(frozen=True)
class RouterConfig:
    """Attributes:
        mode: ``parallel`` routes the raw query while the rewrite runs; ``serial`` routes the
            rewrite (fused with the raw query by ``serial_raw_weight``); ``auto`` is serial when
            there is history.
        top_k: sources returned per query, 1 to ``MAX_TOP_K`` (all of them when the index has fewer).
        min_score: below this best score, route to ``fallback_source`` (if set).
        fallback_source: the source used when nothing scores ``min_score``.
        mixin: source -> texts embedded as extra centroids of that source.
        mixin_weight: multiplier of the mix-in centroids' cosine (1 = like a chunk centroid).
        scale: source -> multiplier of its score (default 1).
        max_query_chars: longer queries are truncated (with a warning in the result).
        serial_raw_weight: weight of the raw query's scores in serial mode (see above).
    """

    mode: Mode = "auto"
    top_k: int = 3
    min_score: float = 0.0
    fallback_source: str | None = None
    mixin: dict[str, list[str]] = field(default_factory=dict)
    mixin_weight: float = 1.0
    scale: dict[str, float] = field(default_factory=dict)
    max_query_chars: int = 4000
    serial_raw_weight: float = 0.4

    def __post_init__(self) -> None:
        problems = []  # all at once: a file with three bad keys said only the first
        if not 0.0 <= self.serial_raw_weight <= 1.0:
            problems.append(f"router.serial_raw_weight must be in [0, 1], got {self.serial_raw_weight}")
        if not is_int(self.top_k, 1) or self.top_k > MAX_TOP_K:
            problems.append(f"router.top_k must be a whole number in [1, {MAX_TOP_K}], got {self.top_k!r}")
        if self.max_query_chars < 1:
            problems.append(f"router.max_query_chars must be >= 1, got {self.max_query_chars}")
        if self.mixin_weight < 0:  # a negative weight turns a source's mix-in texts against it
            problems.append(f"router.mixin_weight must be >= 0 (1 = like a chunk centroid, 0 = mix-ins off), "
                            f"got {self.mixin_weight}")
        bad_scale = {k: v for k, v in self.scale.items() if not v >= 0}
        if bad_scale:
            problems.append(f"router.scale: multipliers must be >= 0 (1 = as is, 0 = never preferred), got {bad_scale}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass
class RouteResult:
    """Sources chosen for one query, with what was routed and how long it took."""

    sources: list[tuple[str, float]]
    query: str
    routed_text: str
    rewrite: str
    mode: str
    fallback: bool = False
    warnings: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [s for s, _ in self.sources]

    def to_dict(self) -> dict[str, Any]:
        return {"sources": [{"source": s, "score": round(float(sc), 6)} for s, sc in self.sources],
                "query": self.query, "routed_text": self.routed_text, "rewrite": self.rewrite,
                "mode": self.mode, "fallback": self.fallback, "warnings": self.warnings,
                "latency_ms": {k: round(v, 3) for k, v in self.latency_ms.items()}}


def check_query(query: Any, max_chars: int, field_name: str = "query") -> tuple[str, list[str]]:
    """Validate a query: a non-empty string; over-long ones are truncated with a warning."""
    if not isinstance(query, str):
        raise ValidationError(f"{field_name}: expected a string, got {type(query).__name__}")
    if not query.strip():
        raise ValidationError(f"{field_name}: is empty; send a question")
    warnings = []
    if len(query) > max_chars:
        warnings.append(f"{field_name} truncated from {len(query)} to {max_chars} characters (router.max_query_chars)")
        query = query[:max_chars]
    return query.strip(), warnings


class CentroidRouter:
    """Route queries to the sources of an index by centroid similarity."""

    def __init__(self, index: Index, embedder: Embedder, config: RouterConfig | None = None,
                 rewriter: Rewriter | None = None) -> None:
        self.index = index
        self.embedder = embedder
        self.config = cfg = config or RouterConfig()
        self.rewriter = rewriter or HeuristicRewriter()
        self.sources = list(index.sources)
        for name, where in [*((s, "router.mixin") for s in cfg.mixin), *((s, "router.scale") for s in cfg.scale),
                            *(((cfg.fallback_source, "router.fallback_source"),) if cfg.fallback_source else ())]:
            if name not in self.sources:
                hint = closest_key(name, self.sources)
                fix = f"; did you mean {hint!r}?" if hint else ""
                raise ConfigError(f"{where}: unknown source {name!r}{fix} (index sources: {self.sources})")
        src_id = {s: i for i, s in enumerate(self.sources)}
        cents = [index.centroids]
        owners = [src_id[s] for s in index.centroid_sources]
        weights = [1.0] * len(owners)
        for s, texts in cfg.mixin.items():
            if not texts:
                continue
            cents.append(embedder.encode(list(texts)))
            owners.extend([src_id[s]] * len(texts))
            weights.extend([cfg.mixin_weight] * len(texts))
        # host arrays; torch views of them are made only when the torch path runs (score)
        self.centroids = np.ascontiguousarray(np.concatenate(cents), dtype=np.float32)  # (C, D)
        self.centroid_source = np.asarray(owners, dtype=np.int64)  # (C,)
        self.centroid_weight = np.asarray(weights, dtype=np.float32)  # (C,)
        self.source_scale = np.asarray([cfg.scale.get(s, 1.0) for s in self.sources], dtype=np.float32)  # (S,)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="route")

    def _k(self, top_k: int | None, high: int | None = None) -> int:
        """The sources to return for ``top_k`` (None: ``router.top_k``), at most the index's.

        Raises:
            ValidationError: ``top_k`` is not a whole number in ``[1, high]`` (0 was taken for
                None, -1 reached the kernel as a KernelInputError).
        """
        if top_k is None:
            return min(self.config.top_k, len(self.sources))
        ok = is_int(top_k, 1)
        if not ok or (high is not None and top_k > high):
            where = ">= 1" if high is None else f"in [1, {high}]"
            raise ValidationError(f"route: top_k must be a whole number {where} (sources returned; None = "
                                  f"router.top_k), got {top_k!r}")
        return min(int(top_k), len(self.sources))

    def score(self, query_vectors: np.ndarray, top_k: int | None = None) -> list[list[tuple[str, float]]]:
        """Top sources for each of (B, D) query vectors.

        Raises:
            ValidationError: ``top_k`` below 1 or not a whole number (None: ``router.top_k``).
        """
        from searchsmith.kernels.host import host_only, route_sources_host

        k = self._k(top_k)
        q = np.ascontiguousarray(query_vectors, dtype=np.float32)  # (B, D)
        if host_only():  # a cold CPU process without torch: the NumPy twin, same result
            scores, ids = route_sources_host(q, self.centroids, self.centroid_source, self.source_scale, k,
                                             centroid_weight=self.centroid_weight)
        else:
            import torch
            from searchsmith.kernels import route_sources

            scores, ids = route_sources(torch.from_numpy(q), torch.from_numpy(self.centroids),
                                        torch.from_numpy(self.centroid_source), torch.from_numpy(self.source_scale),
                                        k, centroid_weight=torch.from_numpy(self.centroid_weight))
        return [[(self.sources[int(i)], float(s)) for s, i in zip(srow, irow)]
                for srow, irow in zip(scores.tolist(), ids.tolist())]

    def _score_serial(self, query: str, rewrite: str, top_k: int | None) -> list[tuple[str, float]]:
        w = self.config.serial_raw_weight
        k = self._k(top_k)
        if w == 0.0 or rewrite == query:
            return self.score(self.embedder.encode([rewrite]), k)[0]
        raw, rw = self.score(self.embedder.encode([query, rewrite]), len(self.sources))  # all S
        raw_d = dict(raw)
        fused = {s: (1.0 - w) * sc + w * raw_d[s] for s, sc in rw}
        return sorted(fused.items(), key=lambda t: (-t[1], self.sources.index(t[0])))[:k]

    def _finish(self, ranked: list[tuple[str, float]]) -> tuple[list[tuple[str, float]], bool]:
        cfg = self.config
        if cfg.fallback_source and (not ranked or ranked[0][1] < cfg.min_score):
            return [(cfg.fallback_source, ranked[0][1] if ranked else 0.0)], True
        return ranked, False

    def route(self, query: str, history: Any = None, mode: Mode | None = None,
              top_k: int | None = None) -> RouteResult:
        """Route one (possibly follow-up) question to its ``top_k`` best sources (None:
        ``router.top_k``; 1 to ``MAX_TOP_K``, all of them when the index has fewer).

        Raises:
            ValidationError: an empty or non-string query, a bad history, mode or ``top_k``.
        """
        cfg = self.config
        mode = mode or cfg.mode
        if mode not in ("parallel", "serial", "auto"):
            raise ValidationError(f"route: mode must be parallel, serial or auto, got {mode!r}")
        k = self._k(top_k, MAX_TOP_K)
        query, warnings = check_query(query, cfg.max_query_chars)
        turns: list[Turn] = parse_history(history)
        effective = ("serial" if turns else "parallel") if mode == "auto" else mode
        t0 = time.perf_counter()
        lat: dict[str, float] = {}
        if effective == "serial":
            rewrite = self.rewriter.rewrite(turns, query)
            lat["rewrite"] = (time.perf_counter() - t0) * 1e3
            t1 = time.perf_counter()
            ranked = self._score_serial(query, rewrite, k)
            lat["route"] = (time.perf_counter() - t1) * 1e3
            routed = rewrite
        else:
            fut = self._pool.submit(self.rewriter.rewrite, turns, query)
            ranked = self.score(self.embedder.encode([query]), k)[0]
            lat["route"] = (time.perf_counter() - t0) * 1e3
            rewrite = fut.result()
            routed = query
        lat["total"] = (time.perf_counter() - t0) * 1e3
        ranked, fell_back = self._finish(ranked)
        return RouteResult(sources=ranked, query=query, routed_text=routed, rewrite=rewrite,
                           mode=effective, fallback=fell_back, warnings=warnings, latency_ms=lat)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
