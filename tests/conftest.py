"""Shared fixtures. Also makes Triton kernels testable on a CPU.

Triton reads TRITON_INTERPRET when kernels are decorated, so it must be set before
anything imports triton. Without an NVIDIA GPU this conftest sets it (nothing has imported
triton when pytest loads it; a check below makes sure). CI sets it in .ci/run anyway.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

if "TRITON_INTERPRET" not in os.environ and not Path("/dev/nvidia0").exists():
    if "triton" in sys.modules:  # pragma: no cover - a plugin imported triton first
        raise RuntimeError("set TRITON_INTERPRET=1 before running pytest on a machine without a GPU")
    os.environ["TRITON_INTERPRET"] = "1"

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
