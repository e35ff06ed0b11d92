"""LlamaServer's start-up probe, with stand-in servers (no llama.cpp needed): a server that
answers ``/v1/models`` but dies on its first completion (a native llama.cpp build on an AMX
CPU did exactly that in CI) is reported at start-up with the rebuild command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from searchsmith.serving.profiling.llm import PORTABLE_CMAKE_ARGS, LlamaServer

STANDIN = r'''
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

MODE = sys.argv[2]

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if MODE == "crash":
            print("loaded; computing", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if MODE == "error":
            self._send(500, {"error": "no kv slot"})
            return
        self._send(200, {"choices": [{"text": "!"}]})

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


class _StandIn(LlamaServer):
    def __init__(self, tmp_path: Path, mode: str) -> None:
        super().__init__(tmp_path / "model.gguf", startup_timeout_s=30, log_path=tmp_path / "server.log")
        self.script = tmp_path / "standin.py"
        self.script.write_text(STANDIN)
        self.mode = mode

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.port), self.mode]


def test_a_server_that_dies_on_its_first_completion_is_named_at_start_up(tmp_path) -> None:
    server = _StandIn(tmp_path, "crash")
    with pytest.raises(RuntimeError) as err:
        server.__enter__()
    msg = str(err.value)
    assert "killed by SIGSEGV on its first completion" in msg
    assert PORTABLE_CMAKE_ARGS in msg and "--no-cache-dir" in msg
    assert "loaded; computing" in msg  # the server's log is shown
    assert server.proc.poll() is not None


def test_a_server_that_fails_its_first_completion_alive_is_stopped(tmp_path) -> None:
    server = _StandIn(tmp_path, "error")
    with pytest.raises(RuntimeError, match=r"failed its first completion \(status 500: .*no kv slot"):
        server.__enter__()
    assert server.proc.poll() is not None  # stopped, not left running


def test_a_server_that_completes_starts(tmp_path) -> None:
    with _StandIn(tmp_path, "ok") as server:
        assert server.proc.poll() is None
    assert server.proc.poll() is not None


def test_ci_builds_llama_cpp_portable() -> None:
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in ci
    assert "--no-cache-dir 'llama-cpp-python" in ci
