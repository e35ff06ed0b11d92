"""Give the top-level name ``kernels`` back to the package that owns it.

This folder is installed as ``searchsmith.kernels``, but with the repository root on
``sys.path`` (``python -m pytest`` from the root puts it there, as do ``python -c`` and
notebooks started there) ``import kernels`` finds it first. transformers >= 5.25 requires
Hugging Face's ``kernels`` package and runs ``from kernels import ...`` whenever it is
installed, so without this hand-over every model import fails from the root ("cannot import
name 'CUDAProperties' from 'kernels'", seen 2026-12-03 on a fresh install).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

NAME = "kernels"


def _same_dir(entry: str, folder: Path) -> bool:
    try:
        return Path(entry or ".").resolve() == folder
    except OSError:  # an entry that cannot be resolved is not this folder
        return False


def hand_over(init_file: str) -> bool:
    """Replace ``sys.modules["kernels"]`` (this folder, being imported) with the installed
    package of that name, found on ``sys.path`` without the folder that holds this one; the
    import statement then returns it. False, and nothing replaced, when no such package is
    installed: this folder then imports as it always did (transformers probes ``import kernels``
    for its version and finds none, so it leaves the hub kernels off)."""
    sys.modules.pop(f"{NAME}._shadow", None)  # this module, imported under the borrowed name
    root = Path(init_file).resolve().parent.parent
    path = [entry for entry in sys.path if not _same_dir(entry, root)]
    spec = importlib.machinery.PathFinder.find_spec(NAME, path)
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module  # the import statement returns what sys.modules holds after it ran
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(NAME, None)
        raise
    return True
