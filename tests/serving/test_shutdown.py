"""Graceful shutdown of ``searchsmith serve`` over a real socket: SIGTERM while a request is
in flight answers that request, then the process ends cleanly and stops listening."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from searchsmith.serving.profiling.common import free_port

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_sigterm_finishes_the_request_in_flight_then_exits(tmp_path) -> None:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "searchsmith.serving.main", "serve", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            try:
                if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server not ready in 180 s"
            time.sleep(0.3)
        # Long texts: seconds of CPU work, so the request is still running at SIGTERM.
        texts = [f"passage {i}: " + " ".join(f"word{(i * 7 + j) % 997}" for j in range(220)) for i in range(160)]
        result: dict[str, object] = {}

        def post() -> None:
            try:
                r = httpx.post(f"{base}/v1/embeddings", json={"input": texts}, timeout=300)
                result["status"], result["body"] = r.status_code, r.json()
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                result["error"] = repr(exc)
            result["done_at"] = time.monotonic()

        worker = threading.Thread(target=post)
        worker.start()
        time.sleep(1.0)  # the request is accepted and its batch is running
        signalled_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        worker.join(timeout=300)
        assert result.get("status") == 200, result.get("error") or result.get("body")
        assert result["done_at"] > signalled_at  # it was in flight when the signal came
        vecs = np.asarray([d["embedding"] for d in result["body"]["data"]], dtype=np.float32)
        assert vecs.shape == (160, 384)
        np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
        # uvicorn finishes its graceful shutdown, then re-raises the signal it caught, so
        # the exit status is the conventional "ended by SIGTERM"
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)
        served = (tmp_path / "serve.log").read_text()
        assert "Traceback" not in served and "Finished server process" in served, served[-2000:]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{base}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
