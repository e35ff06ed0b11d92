from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import searchsmith.kernels
import searchsmith.models
import searchsmith.serving
import searchsmith.training
import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_namespace_maps_to_this_repository() -> None:
    assert Path(searchsmith.kernels.__file__).resolve().parent == REPO / "kernels"
    assert Path(searchsmith.models.__file__).resolve().parent == REPO / "models"
    assert Path(searchsmith.serving.__file__).resolve().parent == REPO / "serving"
    assert Path(searchsmith.training.__file__).resolve().parent == REPO / "training"


def test_every_package_folder_is_listed_in_pyproject() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for top in ("models", "training", "serving", "kernels"):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO).parts
            found.add(".".join(("searchsmith", *rel)))
    assert found == listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}; stale: {sorted(listed - found)}"


def test_cli_help_is_fast_and_imports_nothing_heavy() -> None:
    code = (
        "import sys; from searchsmith.serving.main import main; main(['--help']);"
        "heavy = [m for m in ('torch', 'transformers', 'faiss', 'fastapi', 'peft', 'datasets') if m in sys.modules];"
        "print('HEAVY', heavy)"
    )
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    assert "quickstart" in out and "index" in out
    assert time.perf_counter() - start < 20


def test_unknown_command_suggests_closest(capsys) -> None:
    from searchsmith.serving.main import main

    assert main(["indx"]) == 2
    assert "did you mean 'index'" in capsys.readouterr().err
