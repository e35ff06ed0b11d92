"""``searchsmith serve --ray``: serve.yaml's ``ray`` section (fixed replicas or autoscaling bounds)
and two replicas on a local Ray answering a loopback load across a replica kill, with no
request lost. The Serve test needs Ray (``pip install -e '.[ray]'``; CI installs it)."""

from __future__ import annotations

import argparse
import collections
import socket
import threading
import time

import pytest
from searchsmith.models.config import from_dict
from searchsmith.serving.serve_config import RayServeConfig, ServeConfig


def test_fixed_replicas_or_autoscaling_bounds() -> None:
    fixed = RayServeConfig(replicas=3).deployment_options()
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    auto = RayServeConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=3).deployment_options()
    assert auto["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3}
    assert "num_replicas" not in auto and auto["ray_actor_options"] == {"num_cpus": 1.0}
    # --replicas on the command line wins over the bounds
    assert RayServeConfig(max_replicas=4).deployment_options(replicas=2)["num_replicas"] == 2
    cfg = from_dict(ServeConfig, {"ray": {"min_replicas": 2, "max_replicas": 6, "max_queued_requests": 10}})
    assert cfg.ray.deployment_options()["max_queued_requests"] == 10


@pytest.mark.parametrize("bad, match", [({"replicas": 0}, "replicas"), ({"min_replicas": 3, "max_replicas": 2},
                                        "max_replicas"), ({"max_queued_requests": 0}, "max_queued_requests"),
                                        ({"num_cpus": 0}, "num_cpus")])
def test_bad_ray_settings_are_refused(bad, match) -> None:
    with pytest.raises(ValueError, match=match):
        RayServeConfig(**bad)


def _args(*argv: str) -> argparse.Namespace:
    from searchsmith.serving.serve_cli import configure_serve

    parser = argparse.ArgumentParser()
    configure_serve(parser)
    return parser.parse_intermixed_args(list(argv))


def test_two_replicas_answer_across_a_replica_kill(tmp_path, small_index) -> None:
    """Four clients post /v1/route for 8 s; one replica is killed after 2.5 s. Every request
    gets an HTTP answer (Ray Serve restarts the replica); the one in flight on the killed
    replica may be answered 500 by Ray's proxy."""
    pytest.importorskip("ray.serve", reason="needs Ray Serve (pip install -e '.[ray]')")
    import httpx
    import ray
    from ray import serve
    from searchsmith.serving.serve_cli import load_config, start_ray_serve

    (tmp_path / "serve.yaml").write_text(f"index: {small_index}\nsearch: false\nray:\n  num_cpus: 0.5\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = _args("--config", str(tmp_path / "serve.yaml"), "--ray", "--replicas", "2", "--port", str(port))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        line = start_ray_serve(args, load_config(args))
        assert "2 Ray Serve replica(s)" in line
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        outcomes: collections.Counter = collections.Counter()
        after_kill: collections.Counter = collections.Counter()
        killed = threading.Event()
        stop = time.monotonic() + 8

        def client() -> None:
            with httpx.Client(timeout=60) as c:
                while time.monotonic() < stop:
                    try:
                        r = c.post(f"{url}/v1/route", json={"query": "bread dough"})
                        outcomes[r.status_code] += 1
                        if killed.is_set():
                            after_kill[r.status_code] += 1
                    except httpx.HTTPError as exc:  # lost: no HTTP answer at all
                        outcomes[f"lost: {type(exc).__name__}"] += 1

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(2.5)
        replicas = [a for a in ray.util.list_named_actors(all_namespaces=True) if "SERVE_REPLICA" in a["name"]]
        assert len(replicas) == 2
        ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
        killed.set()
        for t in threads:
            t.join()
        assert not [k for k in outcomes if isinstance(k, str)], outcomes  # nothing lost
        assert set(outcomes) <= {200, 500, 503}, outcomes
        assert outcomes[200] > 20 and after_kill[200] > 5, (outcomes, after_kill)
        assert outcomes[500] + outcomes[503] <= 4, outcomes  # at most the requests in flight on it
    finally:
        serve.shutdown()
        ray.shutdown()
