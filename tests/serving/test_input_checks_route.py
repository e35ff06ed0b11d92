"""Bad numbers for routing and retrieval are refused naming the field, its value and its range.

``searchsmith route --top-k -1`` printed a KernelInputError traceback, ``--top-k 0`` was taken
as "the config's top_k" without a word and ``--top-k 99999999999999999999`` was accepted;
``ask ... retrieval.min_keep=-3`` said "retrieval.min_keep and retrieval.compress_sentences must
be >= 1" without saying which one, or what it got.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from searchsmith.models.config import load_config
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.index import Index
from searchsmith.serving.pipeline.config import RetrievalConfig, load_pipeline_config
from searchsmith.serving.router import MAX_TOP_K, CentroidRouter, RouterConfig


@pytest.fixture(scope="module")
def router(small_index, embedder):
    return CentroidRouter(Index.load(small_index), embedder, RouterConfig(top_k=2))


# -- 1. the command line -----------------------------------------------------------------------
@pytest.mark.parametrize("top_k", ["-1", "0", "99999999999999999999", str(MAX_TOP_K + 1)])
def test_route_refuses_a_top_k_out_of_range(small_index, capsys, top_k) -> None:
    from searchsmith.serving.main import main

    assert main(["route", "how do I bake bread", "--index", str(small_index), "--top-k", top_k]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"searchsmith route: error: --top-k: sources to return, must be a whole number in [1, {MAX_TOP_K}] "
        f"(leave it out for the config's router.top_k), got {top_k}")
    assert captured.out == ""


def test_route_takes_a_top_k_in_range(small_index, capsys) -> None:
    from searchsmith.serving.main import main

    assert main(["route", "how do I bake bread", "--index", str(small_index), "--top-k", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["sources"]) == 1


# -- 2. the library ------------------------------------------------------------------------------
@pytest.mark.parametrize("top_k", [-1, 0, MAX_TOP_K + 1, 10**20, True, 2.0, "3"])
def test_router_route_refuses_a_bad_top_k_naming_it(router, top_k) -> None:
    with pytest.raises(ValidationError, match=re.escape(
            f"route: top_k must be a whole number in [1, {MAX_TOP_K}] (sources returned; None = router.top_k), "
            f"got {top_k!r}")):
        router.route("how do I bake bread", top_k=top_k)


def test_router_score_refuses_a_k_below_one(router) -> None:
    q = router.embedder.encode(["how do I bake bread"])
    with pytest.raises(ValidationError, match=r"route: top_k must be a whole number >= 1 .*got -1"):
        router.score(q, -1)
    with pytest.raises(ValidationError, match=r"route: top_k must be a whole number >= 1 .*got 0"):
        router.score(q, 0)


def test_router_top_k_none_is_the_config_and_a_numpy_int_is_taken(router) -> None:
    assert len(router.route("how do I bake bread").sources) == 2
    assert len(router.route("how do I bake bread", top_k=np.int64(1)).sources) == 1
    assert len(router.route("how do I bake bread", top_k=MAX_TOP_K).sources) == len(router.sources)


@pytest.mark.parametrize(("value", "ok"), [(0, False), (-2, False), (MAX_TOP_K + 1, False), (1, True),
                                           (MAX_TOP_K, True)])
def test_router_config_top_k_range(value, ok) -> None:
    if ok:
        assert load_config(RouterConfig, None, [f"top_k={value}"]).top_k == value
        return
    with pytest.raises(ConfigError, match=re.escape(f"router.top_k must be a whole number in [1, {MAX_TOP_K}], "
                                                    f"got {value}")):
        load_config(RouterConfig, None, [f"top_k={value}"])


def test_the_cap_is_the_one_of_v1_route() -> None:
    """One maximum for the command line, the config, the library and ``POST /v1/route``."""
    from searchsmith.serving.schemas import RouteRequest

    caps = [m.le for m in RouteRequest.model_fields["top_k"].metadata if getattr(m, "le", None) is not None]
    assert caps == [MAX_TOP_K]


# -- 3. retrieval.min_keep / retrieval.compress_sentences ------------------------------------------
@pytest.mark.parametrize(("override", "message"), [
    ("retrieval.min_keep=-3", "retrieval.min_keep must be a whole number >= 1 (chunks kept at least), got -3"),
    ("retrieval.min_keep=0", "retrieval.min_keep must be a whole number >= 1 (chunks kept at least), got 0"),
    ("retrieval.compress_sentences=0", "retrieval.compress_sentences must be a whole number >= 1 (sentences an "
                                       "accumulated passage is cut to), got 0"),
])
def test_retrieval_counts_name_the_wrong_one(override, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_pipeline_config(None, [override])
    other = "compress_sentences" if "min_keep" in override else "min_keep"
    assert other not in str(err.value)


def test_retrieval_counts_keep_their_defaults_valid() -> None:
    cfg = RetrievalConfig(min_keep=1, compress_sentences=1)
    assert (cfg.min_keep, cfg.compress_sentences) == (1, 1)


def test_router_config_names_every_bad_setting_at_once() -> None:
    """Audit 2026-12-07: a router file with three bad keys reported only the first, and a negative
    mixin_weight (mix-in texts counted against their source) was taken."""
    with pytest.raises(ValueError) as err:
        RouterConfig(mixin_weight=-5, serial_raw_weight=9, max_query_chars=0, scale={"a": -1.0})
    msg = str(err.value)
    for part in ("serial_raw_weight", "max_query_chars", "mixin_weight must be >= 0", "router.scale: multipliers"):
        assert part in msg, msg
    assert RouterConfig(mixin_weight=0, scale={"a": 0.0}).mixin_weight == 0
