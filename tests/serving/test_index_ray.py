"""``searchsmith index --ray``: the embedding on Ray Data actors (a local Ray with 2 CPUs) gives
the in-process build's index; a worker that dies is replaced; bad corpora and addresses are
clear errors. Skipped without Ray (``pip install -e '.[ray]'``; CI installs it)."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.corpus import corpus_files, read_corpora, read_corpus
from searchsmith.serving.index import CentroidConfig, Index, IndexConfig, build_index

ray = pytest.importorskip("ray", reason="needs Ray Data (pip install -e '.[ray]')")
pytest.importorskip("ray.data", reason="needs Ray Data (pip install -e '.[ray]')")

QUERIES = ["How long should I knead bread dough?", "What is the largest planet?", "How do I fix a merge conflict?"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _topk(path, embedder):
    index = Index.load(path, embedder=embedder)
    try:
        hits = index.search(np.asarray(embedder.encode(QUERIES), np.float32), k=5)
        return [[h.chunk.chunk_id for h in row] for row in hits], [[h.score for h in row] for row in hits]
    finally:
        index.close()


def test_a_ray_build_gives_the_in_process_index(tmp_path, embedder, write_corpus, local_ray) -> None:
    from searchsmith.serving.index_ray import ray_embed

    records = read_corpus(write_corpus(tmp_path / "corpus.jsonl"))
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(records, tmp_path / "local", cfg, embedder=embedder)
    marker = tmp_path / "died"
    embed = ray_embed(cfg.embedder, workers=2, batch_size=4, fail_marker=str(marker))
    build_index(records, tmp_path / "ray", cfg, embedder=embedder, embed=embed)
    assert marker.exists()  # an actor died on its first batch; Ray restarted it and ran the batch again
    a, b = json.loads((tmp_path / "local" / "manifest.json").read_text()), json.loads(
        (tmp_path / "ray" / "manifest.json").read_text())
    assert a["chunks"] == b["chunks"] and a["sources"].keys() == b["sources"].keys()
    ids_a, scores_a = _topk(tmp_path / "local", embedder)
    ids_b, scores_b = _topk(tmp_path / "ray", embedder)
    assert ids_a == ids_b
    assert np.allclose(scores_a, scores_b, atol=1e-5)


def test_the_cli_builds_from_a_glob_with_ray(tmp_path, write_corpus, local_ray, capsys) -> None:
    from searchsmith.serving.main import main

    recs = [json.loads(line) for line in write_corpus(tmp_path / "all.jsonl").read_text().splitlines()]
    half = len(recs) // 2
    (tmp_path / "parts").mkdir()
    for name, part in (("a", recs[:half]), ("b", recs[half:])):
        (tmp_path / "parts" / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in part), encoding="utf-8")
    assert main(["index", str(tmp_path / "parts" / "*.jsonl"), "--out", str(tmp_path / "idx"), "--ray",
                 "--workers", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["documents"] == len(recs)


def test_corpus_globs_and_lists(tmp_path, write_corpus) -> None:
    write_corpus(tmp_path / "one.jsonl")
    assert corpus_files(str(tmp_path / "*.jsonl")) == [tmp_path / "one.jsonl"]
    with pytest.raises(ValidationError, match=r"matches no file"):
        corpus_files(str(tmp_path / "nothing-*.jsonl"))
    (tmp_path / "two.jsonl").write_text((tmp_path / "one.jsonl").read_text(), encoding="utf-8")
    with pytest.raises(ValidationError, match=r"is in both .*one.jsonl and .*two.jsonl"):
        read_corpora(f"{tmp_path / 'one.jsonl'},{tmp_path / 'two.jsonl'}")


def test_an_address_that_does_not_answer_is_a_clear_error_not_a_hang() -> None:
    from searchsmith.serving.index_ray import check_address

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"no Ray head answers there"):
        check_address(f"127.0.0.1:{port}", timeout_s=2)
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ConfigError, match="HOST:PORT"):
        check_address("not-an-address")


def test_a_build_on_a_two_node_cluster_uses_both_nodes(tmp_path, embedder, write_corpus, ray_cluster) -> None:
    """``--address`` of a cluster started with ``ray start --head`` + ``ray start --address``
    (two nodes of 1 CPU each on this machine, the ``ray_cluster`` fixture): one actor per node,
    the same index as the in-process build."""
    from searchsmith.serving.index_ray import ray_embed

    if ray.is_initialized():
        ray.shutdown()  # the module's local Ray: this test is a driver of the cluster
    records = read_corpus(write_corpus(tmp_path / "corpus.jsonl"))
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(records, tmp_path / "local", cfg, embedder=embedder)
    lines: list[str] = []
    try:
        embed = ray_embed(cfg.embedder, address=ray_cluster, workers=2, batch_size=2, report=lines.append)
        build_index(records, tmp_path / "cluster", cfg, embedder=embedder, embed=embed, report=lines.append)
    finally:
        ray.shutdown()
    assert any("Ray Data with 2 actor(s)" in line for line in lines), lines
    assert any(line.endswith("on 2 node(s)") for line in lines), lines
    ids_a, scores_a = _topk(tmp_path / "local", embedder)
    ids_b, scores_b = _topk(tmp_path / "cluster", embedder)
    assert ids_a == ids_b and np.allclose(scores_a, scores_b, atol=1e-5)


def test_more_workers_than_the_cluster_holds_is_a_clear_error(tmp_path, embedder, write_corpus, local_ray) -> None:
    from searchsmith.serving.index_ray import ray_embed

    records = read_corpus(write_corpus(tmp_path / "corpus.jsonl"))
    embed = ray_embed(IndexConfig().embedder, workers=3, start_timeout_s=5)  # 3 actors of 1 CPU on 2 CPUs
    with pytest.raises(ConfigError, match=r"3 embedding actor\(s\) of 1 CPU each did not all start within 5 s"):
        build_index(records, tmp_path / "idx", IndexConfig(), embedder=embedder, embed=embed)
    assert not (tmp_path / "idx").exists()
