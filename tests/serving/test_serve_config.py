"""serve.yaml: loading, path resolution, the quickstart layout, `searchsmith serve` options."""

from __future__ import annotations

import argparse
import json

import pytest
from fastapi.testclient import TestClient
from searchsmith.models.errors import ConfigError
from searchsmith.serving.serve_config import (
    BUNDLE_ROLES,
    ServeConfig,
    check_paths,
    default_serve_config,
    load_serve_config,
    write_serve_config,
)


def _fake_bundle(folder, task="rerank"):
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"task": task}))
    return folder


def test_paths_are_relative_to_the_yaml_folder(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "serve.yaml").write_text("index: indexes/demo\nbundles:\n  reranker: bundles/reranker\n"
                                     "server:\n  max_documents_per_request: 7\npipeline:\n  retrieval:\n"
                                     "    retrieve_k: 3\n")
    cfg = load_serve_config(work / "serve.yaml", ["server.cors_origins=[https://a.example]"])
    assert isinstance(cfg, ServeConfig)
    assert cfg.index == str(work / "indexes/demo") and cfg.bundles.reranker == str(work / "bundles/reranker")
    assert cfg.bundles.embedder is None and cfg.server.max_documents_per_request == 7
    assert cfg.pipeline.retrieval.retrieve_k == 3 and cfg.server.cors_origins == ["https://a.example"]
    from pathlib import Path

    assert load_serve_config(work / "serve.yaml", index="elsewhere").index == str(Path.cwd() / "elsewhere")


def test_unknown_key_names_the_closest(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("bundles:\n  rerankr: x\n")
    with pytest.raises(ConfigError, match="reranker"):
        load_serve_config(tmp_path / "s.yaml")


def test_server_key_at_top_level_is_refused_with_the_fix(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("max_texts_per_request: 2\n")
    with pytest.raises(ConfigError, match="max_texts_per_request belong under 'server:'"):
        load_serve_config(tmp_path / "s.yaml")


def test_pipeline_bundles_are_refused(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("pipeline:\n  bundles:\n    reranker: x\n")
    with pytest.raises(ConfigError, match="top-level 'bundles:'"):
        load_serve_config(tmp_path / "s.yaml")


def test_calls_must_not_batch(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("server:\n  calls:\n    max_batch_size: 4\n")
    with pytest.raises(ConfigError, match="calls.max_batch_size: must be 1"):
        load_serve_config(tmp_path / "s.yaml")


def test_missing_bundle_folder_names_the_key(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("bundles:\n  citation: bundles/citation\n")
    with pytest.raises(ConfigError, match=r"bundles.citation: .*bundles/citation is not a bundle folder"):
        check_paths(load_serve_config(tmp_path / "s.yaml"))


def test_quickstart_layout_round_trip(tmp_path, monkeypatch) -> None:
    work = tmp_path / "searchsmith-work"
    _fake_bundle(work / "bundles" / "reranker")
    _fake_bundle(work / "indexes" / "demo")
    path = write_serve_config(work)
    assert path == work / "serve.yaml" and not list(work.glob(".serve.yaml.*"))  # atomic, no temp left
    cfg = load_serve_config(path)
    check_paths(cfg)  # only what exists is listed
    assert cfg.bundles.reranker == str(work / "bundles/reranker") and cfg.bundles.images is None
    assert cfg.index == str(work / "indexes/demo")
    full = load_serve_config(write_serve_config(work, only_existing=False))
    assert {r: getattr(full.bundles, r) for r in BUNDLE_ROLES} == {r: str(work / "bundles" / r) for r in BUNDLE_ROLES}
    monkeypatch.chdir(tmp_path)
    assert default_serve_config() == "searchsmith-work/serve.yaml"
    monkeypatch.chdir(work)
    assert default_serve_config() is None


def _args(*argv):
    from searchsmith.serving.serve_cli import configure_serve

    parser = argparse.ArgumentParser()
    configure_serve(parser)
    return parser.parse_intermixed_args(list(argv))


def test_ray_missing_is_a_clear_error(tmp_path, monkeypatch) -> None:
    import sys

    from searchsmith.serving.serve_cli import run_serve

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed, even where it is
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"pip install 'searchsmith\[ray\]'"):
        run_serve(_args("--ray", "--replicas", "2"))


def test_replicas_without_ray_is_refused(tmp_path, monkeypatch) -> None:
    from searchsmith.serving.serve_cli import run_serve

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="only with --ray"):
        run_serve(_args("--replicas", "3"))


def test_a_bad_or_busy_port_is_refused_before_any_model_loads(tmp_path, monkeypatch) -> None:
    """--port 99999 listened on 34463 (taken modulo 65536); a busy port failed after every model
    had loaded."""
    import socket

    from searchsmith.serving.serve_cli import run_serve

    monkeypatch.chdir(tmp_path)
    for port in ("99999", "-1", "0"):
        with pytest.raises(ConfigError, match=r"--port: -?\d+ is not a TCP port; give one in 1-65535"):
            run_serve(_args("--port", port))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port: 127.0.0.1:{port} cannot be bound .*choose another --port"):
            run_serve(_args("--port", str(port)))


def test_zero_replicas_is_refused(tmp_path, monkeypatch) -> None:
    pytest.importorskip("ray")
    from searchsmith.serving.serve_cli import run_serve

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--replicas"):
        run_serve(_args("--ray", "--replicas", "0"))


def test_background_loading_serves_the_index_after_ready(tmp_path, small_index) -> None:
    import time

    from searchsmith.serving.serve_cli import build_app

    (tmp_path / "serve.yaml").write_text(f"index: {small_index}\n")
    cfg, app = build_app(_args("--config", str(tmp_path / "serve.yaml")), background=True)
    with TestClient(app) as c:
        deadline = time.monotonic() + 60
        while c.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        models = c.get("/ready").json()["models"]
        assert models["search"] is True and models["route"] is True and models["rerank"] is False
        ans = c.post("/v1/search", json={"query": "How long should I knead bread dough?"}).json()
        assert ans["references"][0]["source"] == "cooking"
        # the pipeline's router serves /v1/route too (one router per index)
        assert app.state.serving.router is app.state.serving.pipeline.router


@pytest.mark.slow
def test_ray_serve_replicas_answer(tmp_path, small_index) -> None:
    """Ray Serve with 2 replicas on loopback (run once and reported: needs `pip install 'ray[serve]'`)."""
    pytest.importorskip("ray.serve")
    import threading

    import httpx
    from searchsmith.serving.profiling.common import free_port, wait_ready
    from searchsmith.serving.serve_cli import run_serve

    (tmp_path / "serve.yaml").write_text(f"index: {small_index}\nsearch: false\n")
    port = free_port()
    args = _args("--config", str(tmp_path / "serve.yaml"), "--ray", "--replicas", "2", "--port", str(port))
    threading.Thread(target=run_serve, args=(args,), daemon=True).start()
    wait_ready(f"http://127.0.0.1:{port}", 240, "the Ray Serve replicas")
    r = httpx.post(f"http://127.0.0.1:{port}/v1/route", json={"query": "bread dough"}, timeout=60)
    assert r.status_code == 200 and r.json()["sources"][0]["source"] == "cooking"
    from ray import serve

    serve.shutdown()


def test_feedback_works_with_the_quickstart_serve_yaml(tmp_path, small_index) -> None:
    """The serve.yaml the quickstart writes (protocol router off) accepts feedback and says how
    to make it count (it answered 422 before)."""
    import shutil

    from searchsmith.serving.serve_cli import build_app

    work = tmp_path / "searchsmith-work"
    shutil.copytree(small_index, work / "indexes" / "demo")
    path = write_serve_config(work)
    cfg, app = build_app(_args("--config", str(path)))
    assert cfg.pipeline.protocol.enabled is False
    with TestClient(app) as c:
        qid = c.post("/v1/search", json={"query": "How long should I knead bread dough?"}).json()["query_id"]
        resp = c.post("/v1/feedback", json={"query_id": qid, "quality": 1.0})
        assert resp.status_code == 200, resp.text
        assert resp.json()["recorded"] is False and "pipeline.protocol.enabled" in resp.json()["message"]


def test_serve_help_documents_keys_auth_and_the_log_variable(capsys) -> None:
    from searchsmith.serving.main import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "server.api_keys" in out and "Authorization: Bearer" in out and "SEARCHSMITH_LOG" in out
    assert "/docs" in out


def test_model_names_load_from_serve_yaml(tmp_path) -> None:
    (tmp_path / "s.yaml").write_text("server:\n  embeddings_model:\n    name: minilm\n"
                                     "    aliases: [text-embedding-3-small]\n")
    cfg = load_serve_config(tmp_path / "s.yaml", ["server.rerank_model.name=acme"])
    assert cfg.server.embeddings_model.name == "minilm"
    assert cfg.server.embeddings_model.aliases == ["text-embedding-3-small"]
    assert cfg.server.rerank_model.name == "acme" and cfg.server.rerank_model.aliases == []
    (tmp_path / "bad.yaml").write_text("server:\n  embeddings_model:\n    nmae: x\n")
    with pytest.raises(ConfigError, match="name"):
        load_serve_config(tmp_path / "bad.yaml")


def test_the_server_reports_the_pipelines_gates_and_serves_gate_switches(tmp_path, small_index) -> None:
    """A reranker below its baselines (a tiny random model) is left out of /v1/search, /ready and
    /v1/models say why, /v1/rerank still serves it; bundles.gate_rerank: false in serve.yaml
    turns the gate off for the pipeline."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from export_fixtures import bundle
    from searchsmith.serving.serve_cli import build_app

    rerank = bundle("rerank")
    for gate, used in (("", False), ("  gate_rerank: false\n", True)):
        (tmp_path / "serve.yaml").write_text(f"index: {small_index}\nbundles:\n  reranker: {rerank}\n{gate}")
        cfg, app = build_app(_args("--config", str(tmp_path / "serve.yaml")))
        assert cfg.pipeline.bundles.gate_rerank is (not used)
        with TestClient(app) as c:
            ready = c.get("/ready").json()
            assert ready["gates"]["rerank"]["used"] is used
            if not used:
                assert "bundles.gate_rerank: false to use" in ready["gates"]["rerank"]["reason"]
            else:
                assert ready["gates"]["rerank"]["gate"] == "off (bundles.gate_rerank: false)"
            row = next(r for r in c.get("/v1/models").json()["data"] if r["endpoint"] == "/v1/rerank")
            assert row["gate"]["used"] is used
            assert c.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]}).status_code == 200
            ans = c.post("/v1/search", json={"query": "How long should I knead bread dough?"}).json()
            assert ans["trace"]["model_calls"] == (1 if used else 0)  # the reranker is the only model


@pytest.mark.parametrize("key", ["target_ongoing_requests", "num_cpus"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -1.0])
def test_ray_floats_must_be_finite_and_positive(key, value) -> None:
    """NaN and inf passed ``value <= 0``: Ray Serve then never scaled or never placed a replica."""
    from searchsmith.serving.serve_config import RayServeConfig

    with pytest.raises(ValueError, match=rf"ray\.{key} must be a finite number > 0"):
        RayServeConfig(**{key: value})
    assert RayServeConfig(**{key: 0.5}).deployment_options()  # a fraction of a CPU is fine


def test_empty_index_is_refused_naming_the_key(tmp_path) -> None:
    """``index: ''`` used to serve no index, silently; null still means none."""
    (tmp_path / "s.yaml").write_text("index: ''\n")
    with pytest.raises(ConfigError, match=r"index must be an index folder .* or null \(no index\), got ''"):
        load_serve_config(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text("index: null\n")
    assert load_serve_config(tmp_path / "s.yaml").index is None
    with pytest.raises(ConfigError, match="--index: an empty path serves no index"):
        load_serve_config(tmp_path / "s.yaml", index="")


@pytest.mark.parametrize("threads", [0, 1_000_000])
def test_serve_bundles_threads_is_checked_at_load(tmp_path, threads) -> None:
    """``threads: 0`` was refused only by load_bundle, after the port opened; a huge count hung."""
    (tmp_path / "s.yaml").write_text(f"bundles:\n  threads: {threads}\n")
    with pytest.raises(ConfigError, match=r"bundles\.threads must be"):
        load_serve_config(tmp_path / "s.yaml")


def test_a_partial_calls_section_keeps_its_own_defaults() -> None:
    """server.calls: {max_queue: 8} was built on BatcherConfig's class defaults and refused for
    'calls.max_batch_size: must be 1, got 32' though the user never set it."""
    from searchsmith.models.config import from_dict
    from searchsmith.serving.limits import ServerLimits

    calls = from_dict(ServerLimits, {"calls": {"max_queue": 8}}).calls
    assert (calls.max_queue, calls.max_batch_size, calls.max_wait_ms) == (8, 1, 0.0)
