"""Shared fixtures. Also makes Triton kernels testable on a CPU.

TRITON_INTERPRET=1 must be set before Python starts (setting it after ``import triton`` is
too late), so when it is missing on a machine without an NVIDIA GPU this conftest re-runs
pytest with it set. CI sets it in .ci/run anyway.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

if (
    "TRITON_INTERPRET" not in os.environ
    and not Path("/dev/nvidia0").exists()
    and "triton" not in sys.modules
    and os.environ.get("SEARCHSMITH_NO_REEXEC") != "1"
):
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["SEARCHSMITH_NO_REEXEC"] = "1"
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SEARCHSMITH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:  # pragma: no cover
        pass


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip the test when it is absent (a user's machine)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
