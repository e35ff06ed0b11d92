"""``searchsmith index`` refuses out-of-range settings up front, naming the setting, the value
and the valid range, before anything is written or any model is loaded.

Each case here once reached faiss or torch: ``hnsw_m=0`` aborted the process inside faiss
(SIGABRT, exit 134) and left ``.OUT.build/`` and ``.OUT.tmp-*/`` behind, ``ivf_nlist=-1`` was a
SWIG TypeError traceback, ``embedder.device=cuda`` on a CPU-only torch an AssertionError; others
(``ivf_nprobe=0``, ``hnsw_ef_search=-1``, ``centroids.kmeans_iters=-3``) built an index silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from searchsmith.models.config import load_config
from searchsmith.models.errors import ConfigError
from searchsmith.serving.embedder import Embedder, EmbedderConfig, check_device
from searchsmith.serving.index import CentroidConfig, IndexConfig


# -- 1. index and centroid settings ----------------------------------------------------------
@pytest.mark.parametrize(("override", "message"), [
    ("hnsw_m=0", r"hnsw_m: expected an int in [2, 1024] (HNSW links per vector; faiss needs at least 2"),
    ("hnsw_m=1", r"hnsw_m: expected an int in [2, 1024]"),
    ("hnsw_m=2147483648", r"hnsw_m: expected an int in [2, 1024]"),
    ("ivf_nlist=-1", r"ivf_nlist: expected an int >= 1 or null (4 x sqrt(vectors)), got -1"),
    ("ivf_nlist=0", r"ivf_nlist: expected an int >= 1 or null"),
    ("ivf_nprobe=0", r"ivf_nprobe: expected an int >= 1 (IVF lists searched per query"),
    ("hnsw_ef_search=-1", r"hnsw_ef_search: expected an int in [1, 100000]"),
    ("hnsw_ef_search=0", r"hnsw_ef_search: expected an int in [1, 100000]"),
    ("hnsw_ef_search=2147483648", r"hnsw_ef_search: expected an int in [1, 100000]"),
    ("ann_min_vectors=-1", r"ann_min_vectors: expected an int >= 0 (0 = IVF for every source under "
                           r"index_type auto), got -1"),
    ("max_documents=0", r"max_documents: expected an int >= 1 (a guard against the wrong file), got 0"),
    ("max_documents=-1", r"max_documents: expected an int >= 1"),
    ("centroids.kmeans_iters=-3", r"centroids.kmeans_iters: expected an int in [1, 10000]"),
    ("centroids.kmeans_iters=0", r"centroids.kmeans_iters: expected an int in [1, 10000]"),
    ("centroids.kmeans_iters=2147483648", r"centroids.kmeans_iters: expected an int in [1, 10000]"),
    ("centroids.seed=-1", r"centroids.seed: expected an int in [0, 2147483647]"),
    ("centroids.seed=1099511627776", r"centroids.seed: expected an int in [0, 2147483647]"),
])
def test_out_of_range_index_setting_is_refused_naming_it(override, message) -> None:
    value = override.split("=", 1)[1]
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_config(IndexConfig, None, [override])
    assert f"got {value}" in str(err.value)


@pytest.mark.parametrize("override", [
    "hnsw_m=2", "hnsw_m=1024", "ivf_nlist=1", "ivf_nlist=null", "ivf_nprobe=1", "hnsw_ef_search=1",
    "hnsw_ef_search=100000", "ann_min_vectors=0", "max_documents=1", "centroids.kmeans_iters=1",
    "centroids.seed=0",
])
def test_the_edges_of_each_range_stay_valid(override) -> None:
    key, value = override.split("=", 1)
    cfg = load_config(IndexConfig, None, [override])
    got = cfg.centroids if key.startswith("centroids.") else cfg
    assert getattr(got, key.split(".")[-1]) == (None if value == "null" else int(value))


def test_a_bool_is_not_a_count() -> None:
    with pytest.raises(ValueError, match=r"hnsw_m: expected an int in \[2, 1024\].*got True"):
        IndexConfig(hnsw_m=True)


# -- 2. the centroid counts, each named with its value ----------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"chunks_per_centroid": 0}, "centroids.chunks_per_centroid: expected an int >= 1 (one centroid per this "
                                 "many chunks of a source), got 0"),
    ({"min_centroids": 0}, "centroids.min_centroids: expected an int >= 1, got 0"),
    ({"min_centroids": 5, "max_centroids": 2},
     "centroids.max_centroids: expected an int >= centroids.min_centroids (5), got 2"),
])
def test_centroid_counts_name_the_wrong_one(kwargs, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CentroidConfig(**kwargs)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(IndexConfig, None, [f"centroids.{k}={v}" for k, v in kwargs.items()])


# -- 3. embedder.device ----------------------------------------------------------------------
@pytest.mark.parametrize("device", ["bogus", "CUDA", "cuda:", "cuda:-1", "cuda:x", "gpu", ""])
def test_an_unknown_device_is_refused_by_the_config(device) -> None:
    want = "embedder.device must be auto, cpu, cuda, cuda:N (N: a GPU index, from 0) or mps, got"
    with pytest.raises(ValueError, match=re.escape(f"{want} {device!r}")):
        EmbedderConfig(device=device)
    with pytest.raises(ConfigError, match=re.escape(want)):
        load_config(IndexConfig, None, [f"embedder.device={device!r}"])


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_the_device_forms_the_embedder_takes_are_accepted(device) -> None:
    assert EmbedderConfig(device=device).device == device


def _gpus(monkeypatch, n: int) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:99"])
def test_cuda_without_a_gpu_is_a_config_error(monkeypatch, device) -> None:
    _gpus(monkeypatch, 0)
    with pytest.raises(ConfigError, match=re.escape(f"embedder.device: {device!r} needs a CUDA GPU, but torch "
                                                    "sees no CUDA device")) as err:
        check_device(device)
    assert "set embedder.device to auto (CUDA when available) or cpu" in str(err.value)


def test_a_gpu_index_past_the_last_gpu_is_a_config_error(monkeypatch) -> None:
    _gpus(monkeypatch, 2)
    with pytest.raises(ConfigError, match=re.escape("embedder.device: 'cuda:99' names GPU 99, but torch sees 2 "
                                                    "CUDA devices (cuda:0 to cuda:1)")):
        check_device("cuda:99")
    check_device("cuda:1")
    check_device("cuda")
    _gpus(monkeypatch, 0)
    check_device("cpu")
    check_device("auto")


def test_the_embedder_checks_its_device_before_loading_anything(monkeypatch) -> None:
    """It was ``AssertionError: Torch not compiled with CUDA enabled`` from ``model.to``."""
    import searchsmith.serving.embedder as embedder_module

    _gpus(monkeypatch, 0)
    monkeypatch.setattr(embedder_module, "resolve_model", lambda *a, **k: pytest.fail("loaded the model"))
    with pytest.raises(ConfigError, match=r"embedder.device: 'cuda' needs a CUDA GPU"):
        Embedder(EmbedderConfig(device="cuda"))


def test_index_with_cuda_and_no_gpu_stops_before_reading_the_corpus(monkeypatch, tmp_path, capsys,
                                                                    write_corpus) -> None:
    from searchsmith.serving.main import main

    _gpus(monkeypatch, 0)
    corpus = write_corpus(tmp_path / "c.jsonl")
    assert main(["index", str(corpus), "--out", str(tmp_path / "ix"), "embedder.device=cuda"]) == 1
    err = capsys.readouterr().err
    assert "searchsmith index: error: embedder.device: 'cuda' needs a CUDA GPU" in err
    assert "reading" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


# -- 4. the command line: refused before faiss, nothing written ---------------------------------
def test_hnsw_m_zero_is_an_error_not_an_abort(tmp_path, write_corpus) -> None:
    """faiss asserted ``i < end`` and aborted the process (exit 134); a subprocess, so that the
    old abort could not take the test run with it."""
    corpus = write_corpus(tmp_path / "c.jsonl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "searchsmith.serving.main", "index", str(corpus), "--out", "o_1",
                          "index_type=hnsw", "hnsw_m=0"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "searchsmith index: error: IndexConfig: 1 error(s)" in out.stderr
    assert "hnsw_m: expected an int in [2, 1024]" in out.stderr and "got 0" in out.stderr
    assert "Traceback" not in out.stderr and "loading the embedding model" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]  # no .o_1.build/, .o_1.tmp-*/
