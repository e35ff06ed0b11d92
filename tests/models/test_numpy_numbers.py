"""Numpy numbers are numbers: a count from ``argmax`` or array indexing (``np.int64(3)``) and a
weight from an array (``np.float32(0.5)``) are taken wherever an int or a float is, by one
rule (``models.config.is_int`` / ``is_number``); a bool, numpy's included, is still refused.
Before, ``decompose(q, max_nodes=np.int64(3))``, ``bootstrap_ci(..., resamples=np.int64(500))``,
``EmbedderConfig(max_batch_size=np.int64(16))`` and the pipeline's ``retrieval.lexical_k`` refused
them as "not an int" while ``Index.search(k=np.int64(3))`` took them."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml
from export_fixtures import bundle
from searchsmith.models.config import check_count, check_number, from_dict, is_int, is_number, to_dict
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.runtime import load_bundle
from searchsmith.models.stats import bootstrap_ci


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_numpy_integers_are_ints(value) -> None:
    assert is_int(value) and is_int(value, 3) and not is_int(value, 4)
    assert is_number(value)
    check_count("k", value)


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, np.float64(3.0), "3", None])
def test_bools_floats_and_strings_are_not_ints(value) -> None:
    assert not is_int(value)
    with pytest.raises(ValueError, match="k must be a whole number"):
        check_count("k", value)


@pytest.mark.parametrize("value", [0.5, np.float32(0.5), np.float64(0.5), np.int64(0)])
def test_numpy_floats_are_numbers(value) -> None:
    assert is_number(value)
    check_number("w", value, 0.0, 1.0)


@pytest.mark.parametrize("value", [np.bool_(False), False, np.float32("nan"), "0.5"])
def test_bools_and_nan_are_not_numbers(value) -> None:
    with pytest.raises(ValueError, match="w must be a finite number"):
        check_number("w", value, 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class _Section:
    k: int = 1
    w: float = 0.5


def test_from_dict_stores_python_numbers_and_to_dict_writes_numpy_ones() -> None:
    got = from_dict(_Section, {"k": np.int64(7), "w": np.float32(0.25)})
    assert got == _Section(7, 0.25) and type(got.k) is int and type(got.w) is float
    with pytest.raises(ConfigError, match="k: expected an integer"):
        from_dict(_Section, {"k": np.bool_(True)})
    # a section built in Python with numpy values is written as plain numbers (JSON, YAML)
    plain = to_dict(_Section(np.int64(7), np.float32(0.25)))
    assert plain == {"k": 7, "w": 0.25} and type(plain["k"]) is int and type(plain["w"]) is float
    assert json.loads(json.dumps(plain)) == plain and yaml.safe_load(yaml.safe_dump(plain)) == plain
    assert to_dict({"flag": np.bool_(True)}) == {"flag": True} and type(to_dict(np.bool_(True))) is bool


def test_public_calls_take_numpy_counts() -> None:
    from searchsmith.serving.embedder import EmbedderConfig
    from searchsmith.serving.pipeline import load_pipeline_config
    from searchsmith.serving.router import RouterConfig

    dec = load_bundle(bundle("decompose"), device="cpu")
    q = "Who founded Northwind Labs and where is it based?"
    assert dec.decompose(q, max_nodes=np.int64(1)) == dec.decompose(q, max_nodes=1)
    with pytest.raises(ValidationError, match="max_nodes must be an int >= 1"):
        dec.decompose(q, max_nodes=np.bool_(True))
    emb = load_bundle(bundle("embed"), device="cpu", batch_size=np.int64(4))
    assert emb.encode(["a"], batch_size=np.int64(2)).shape[0] == 1
    assert bootstrap_ci(np.arange(10.0), resamples=np.int64(200)) == bootstrap_ci(np.arange(10.0), resamples=200)
    assert EmbedderConfig(max_batch_size=np.int64(16)).max_batch_size == 16
    assert RouterConfig(top_k=np.int64(2)).top_k == 2
    retrieval = dataclasses.replace(load_pipeline_config().retrieval, lexical_k=np.int64(30), titled_k=np.int64(2),
                                    lexical_weight=np.float32(0.5))
    assert to_dict(retrieval)["lexical_k"] == 30
    with pytest.raises(ValueError, match="retrieval.retrieve_k must be"):
        dataclasses.replace(retrieval, retrieve_k=np.bool_(True))
    with pytest.raises(ValueError, match="retrieval.retrieve_k must be"):
        dataclasses.replace(retrieval, retrieve_k="20")  # was a raw TypeError from "<="
