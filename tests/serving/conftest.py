from __future__ import annotations

import pytest
from searchsmith.serving.profiling.common import free_port


@pytest.fixture(scope="session")
def embedder():
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    return Embedder(EmbedderConfig(max_batch_tokens=2048))


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, embedder, write_corpus):
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("idx")
    corpus = write_corpus(d / "corpus.jsonl")
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(read_corpus(corpus), d / "index", cfg, embedder=embedder)
    return d / "index"


@pytest.fixture(scope="session")
def minilm_embed_bundle(tmp_path_factory):
    """The default embedder (all-MiniLM-L6-v2) exported as an fp32 ``embed`` bundle, once."""
    from searchsmith.models.export import ExportOptions, export_embedder

    out = tmp_path_factory.mktemp("embed-bundle") / "embedder"
    export_embedder(out, "default", ExportOptions())
    return out


# The small corpus's sources under free-text labels.
LABELS = {"cooking": "Cooking & Baking", "astronomy": "Astronomie · Espace", "code": "Code / Repos"}


@pytest.fixture(scope="session")
def labelled_index(tmp_path_factory, embedder, write_corpus):
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("labelled")
    records = read_corpus(write_corpus(d / "corpus.jsonl"))
    for r in records:
        r["source"] = LABELS[r["source"]]
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(records, d / "index", cfg, embedder=embedder)
    return d / "index"


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster of two nodes on this machine: ``ray start --head`` (1 CPU, custom
    resource ``node_a``) plus ``ray start --address`` (1 CPU, ``node_b``), each in its own
    process group; yields the address ``127.0.0.1:PORT`` for ``ray.init(address=...)``.

    Its own ``--temp-dir``, so a plain ``ray.init()`` elsewhere in the session still starts a
    local Ray instead of joining this one. Token authentication as ``ray start --head`` sets it
    up by default (the token in ``~/.ray/auth_token``): the second node and every driver need
    ``RAY_AUTH_MODE=token``, so the fixture sets it in ``os.environ`` while it lasts. Teardown signals only the process groups started here (never ``ray stop``, which stops
    every Ray of the machine). Skips without Ray; fails with the nodes' output when they are
    not up within 90 s.
    """
    import json
    import os
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    pytest.importorskip("ray", reason="needs Ray (pip install -e '.[ray]')")
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.is_file():
        pytest.skip(f"no 'ray' command next to {sys.executable}")
    # Short: Ray's Unix socket paths under it must fit in 107 bytes.
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")
    port = free_port()
    address = f"127.0.0.1:{port}"
    logs: list[Path] = []
    started: list[subprocess.Popen] = []
    from ray._raylet import Config

    auth_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "token"  # the nodes, the check below and the tests' drivers
    Config.initialize("")  # this process read RAY_AUTH_MODE when Ray loaded: read it again

    def start(name: str, *argv: str) -> subprocess.Popen:
        logs.append(Path(temp) / f"{name}.log")
        argv = (str(ray_bin), "start", *argv, "--block", "--num-cpus", "1", "--num-gpus", "0",
                "--object-store-memory", str(200 * 2**20), "--temp-dir", temp, "--disable-usage-stats",
                "--min-worker-port", "0", "--max-worker-port", "0",
                "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--resources", json.dumps({name: 1}))
        with open(logs[-1], "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc

    def fail(why: str) -> None:
        tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.is_file())
        pytest.fail(f"ray_cluster: {why}\n{tails}")

    def gcs_answers() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    check = ("import sys, time, ray\n"
             "ray.init(address=sys.argv[1], log_to_driver=False)\n"
             "alive = lambda: sum(n['Alive'] for n in ray.nodes())\n"
             "deadline = time.monotonic() + 60\n"
             "while alive() < 2 and time.monotonic() < deadline:\n"
             "    time.sleep(0.5)\n"
             "sys.exit(0 if alive() >= 2 else 3)\n")
    try:
        head = start("node_a", "--head", "--port", str(port), "--include-dashboard=false",
                     "--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port()))
        deadline = time.monotonic() + 60
        while not gcs_answers():  # the second node reads the head's token: start it after the head
            if head.poll() is not None or time.monotonic() > deadline:
                fail("the head node did not come up")
            time.sleep(0.5)
        start("node_b", "--address", address)
        try:
            up = subprocess.run([sys.executable, "-c", check, address], timeout=90, capture_output=True)
        except subprocess.TimeoutExpired:
            fail("the two nodes were not up within 90 s")
        if up.returncode != 0:
            fail(f"the two nodes were not up: {up.stderr.decode(errors='replace')[-2000:]}")
        yield address
    finally:
        # ray start does not always stop its children on SIGTERM: SIGKILL what is left after 5 s
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            for proc in started:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            for proc in started:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(temp, ignore_errors=True)
        if auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_mode
        Config.initialize("")
