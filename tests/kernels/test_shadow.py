"""``import kernels`` from the repository root: Hugging Face's package of that name, not this folder.

transformers >= 5.25 runs ``from kernels import ...`` whenever a ``kernels`` distribution is
installed; with the root on sys.path (``python -m pytest``, ``python -c`` there) that found
this project's folder and every model import failed (2026-12-03)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_kernels_from_root(extra_path: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    code = ("import sys, kernels; import searchsmith.kernels as ours; "
            "print(kernels.__file__); print(ours.__file__); print(getattr(kernels, 'MARK', None)); "
            "print(sorted(k for k in sys.modules if k.startswith('kernels.')))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_kernels_from_the_root_gets_the_installed_package(tmp_path) -> None:
    other = tmp_path / "site" / "kernels"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("MARK = 'hugging face'\n")
    run = _import_kernels_from_root(tmp_path / "site")
    assert run.returncode == 0, run.stderr
    theirs, ours, mark, submodules = run.stdout.splitlines()
    assert Path(theirs) == other / "__init__.py" and mark == "hugging face"
    assert Path(ours) == ROOT / "kernels" / "__init__.py"  # the project's own stays reachable by its name
    assert submodules == "[]"  # nothing of this folder left under the name 'kernels.'


def test_import_kernels_from_the_root_without_that_package_finds_this_folder_as_before() -> None:
    """transformers imports ``kernels`` to read its version when the name resolves without
    metadata; that must not fail (it found this folder, no version, and left hub kernels off)."""
    from importlib import metadata

    run = _import_kernels_from_root(None)
    assert run.returncode == 0, run.stderr
    try:
        metadata.distribution("kernels")  # installed with transformers >= 5.25
    except metadata.PackageNotFoundError:
        assert Path(run.stdout.splitlines()[0]) == ROOT / "kernels" / "__init__.py"
    else:
        assert Path(run.stdout.splitlines()[0]).parent != ROOT / "kernels"
