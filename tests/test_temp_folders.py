"""The suite leaves no temporary folders behind, though it exits through ``os._exit``.

tests/conftest.py ends the run with ``os._exit`` (a native library once crashed the
interpreter's teardown), which skips atexit: the exports' traced graphs (models/export.py,
megabytes each), the profiles' shared models and the export fixtures' folder piled up in the
temporary folder. They are all ``process_temp_dir`` folders now, released by one function.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from searchsmith.models import export, io

REPO = Path(__file__).resolve().parents[1]


def test_release_deletes_every_process_folder(monkeypatch) -> None:
    monkeypatch.setattr(io, "_PROCESS_DIRS", [])
    a, b = io.process_temp_dir("searchsmith-test-a-"), io.process_temp_dir("searchsmith-test-b-")
    (a / "sub").mkdir()
    (a / "sub" / "g.onnx").write_bytes(b"x")
    assert a.name.startswith("searchsmith-test-a-") and b.is_dir()
    io.release_process_temp_dirs()
    assert not a.exists() and not b.exists() and io._PROCESS_DIRS == []
    io.release_process_temp_dirs()  # twice is harmless


def test_a_traced_graph_lives_in_a_process_folder_and_is_traced_again_once_released(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(io, "_PROCESS_DIRS", [])
    monkeypatch.setattr(export, "_TRACE_CACHE", {})
    traced: list[Path] = []
    monkeypatch.setattr(export, "export_graph", lambda spec, path, opset: traced.append(path) or path)
    monkeypatch.setattr(export, "optimize_graph", lambda src, dst: (dst.write_bytes(b"g"), dst)[1])
    out = export._traced(object(), "model", "key", "rerank", 17, tmp_path)
    assert io._PROCESS_DIRS == [out.parent] and out.parent.name.startswith("searchsmith-trace-")
    assert export._traced(object(), "model", "key", "rerank", 17, tmp_path) == out and len(traced) == 1
    io.release_process_temp_dirs()
    assert not out.parent.exists()
    again = export._traced(object(), "model", "key", "rerank", 17, tmp_path)  # the cache's file is gone
    assert len(traced) == 2 and again.is_file()
    io.release_process_temp_dirs()


def test_the_suites_hard_exit_still_deletes_the_temporary_folders(tmp_path) -> None:
    """The conftest's exit path, in a child process: os._exit after the release."""
    made = tmp_path / "made.txt"
    code = f"""
import sys, types
from pathlib import Path
sys.path.insert(0, {str(REPO / "tests")!r})
sys.path.insert(0, {str(REPO / "tests" / "models")!r})
import conftest
import export_fixtures
from searchsmith.models.io import process_temp_dir
trace = process_temp_dir("searchsmith-trace-")
Path({str(made)!r}).write_text(str(trace) + "\\n" + str(export_fixtures.ROOT))
conftest.pytest_sessionfinish(None, 3)
conftest.pytest_unconfigure(types.SimpleNamespace())
print("not reached")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "not reached" not in proc.stdout
    trace, root = made.read_text().splitlines()
    assert not Path(trace).exists()
    assert not Path(root).exists()
