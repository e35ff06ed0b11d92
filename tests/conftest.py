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

import json  # noqa: E402

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


TOPICS = {
    "cooking": [
        "Knead the bread dough for ten minutes until it is smooth and elastic.",
        "Simmer the tomato sauce with garlic, basil and olive oil for half an hour.",
        "Whisk eggs and sugar until pale before folding in the flour for a sponge cake.",
        "Roast the vegetables at 220 degrees with salt, pepper and rosemary.",
        "A sourdough starter needs flour and water fed daily to stay active.",
        "Caramelise onions slowly over low heat for a sweet, deep flavour.",
    ],
    "astronomy": [
        "Jupiter is the largest planet of the solar system and has dozens of moons.",
        "A light-year is the distance light travels in one year, about 9.46 trillion kilometres.",
        "Neutron stars are the collapsed cores of massive stars after a supernova.",
        "The Andromeda galaxy will collide with the Milky Way in about four billion years.",
        "Saturn's rings are made of ice particles and rocky debris.",
        "Telescopes on mountains avoid much of the atmosphere's turbulence.",
    ],
    "code": [
        "The Lumen cache eviction policy is implemented in lumen/evict.py by the Evictor class.",
        "Call quarry.connect(url, timeout_s=5) to open a connection pool to the Quarry database.",
        "The scheduler's retry loop lives in tidewater/retry.py and uses exponential backoff.",
        "def chunk(text: str, size: int) -> list[str] splits text into pieces of size tokens.",
        "Unit tests for the Lumen eviction code are in tests/test_evict.py.",
        "The HTTP handlers of the Quarry server are defined in quarry/http/routes.py.",
    ],
}


def _write_corpus(path: Path, extra: list[dict] | None = None) -> Path:
    rows = []
    for source, texts in TOPICS.items():
        for i, text in enumerate(texts):
            rows.append({"id": f"{source}-{i}", "source": source, "text": text, "title": f"{source} {i}"})
    rows.extend(extra or [])
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path



@pytest.fixture(scope="session")
def write_corpus():
    """``write_corpus(path, extra=None)``: a small 3-source corpus JSONL (cooking, astronomy, code)."""
    return _write_corpus


def _intervals_hold(out: object, where: str = "") -> int:
    """Walk an eval output: each ``<name>_ci95`` is [low, high] around ``<name>`` (up to the
    4-digit rounding of the intervals). Returns how many were checked."""
    if not isinstance(out, dict):
        return 0
    checked = 0
    for key, value in out.items():
        if key.endswith("_ci95") and value is not None:
            point = out[key[: -len("_ci95")]]
            lo, hi = value
            assert lo - 1e-4 <= point <= hi + 1e-4, f"{where}{key}: {point} outside {value}"
            checked += 1
        checked += _intervals_hold(value, f"{where}{key}.")
    return checked


@pytest.fixture(scope="session")
def intervals_hold():
    """``intervals_hold(out)``: every ``*_ci95`` of an eval output contains its figure; the count."""
    return _intervals_hold


# The whole suite once passed every test and then died with SIGSEGV in the interpreter's
# teardown, after pytest had printed its summary (2026-12-02 fresh-check: 1,442 passed, exit
# 139). By then the faulthandler is off, so the crash has no traceback; it is a native library's
# exit path (onnxruntime, torch and Ray threads are all alive at exit). The run's own exit status
# is kept and the process leaves without that teardown: every result is already reported and
# every file flushed.
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


def release_temporary_folders() -> None:
    """What atexit would have deleted and ``os._exit`` skips: the process's temporary folders
    (models/io.py ``process_temp_dir``: traced graphs, shared test bundles)."""
    io = sys.modules.get("searchsmith.models.io")
    if io is not None:
        io.release_process_temp_dirs()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _EXIT_STATUS and os.environ.get("SEARCHSMITH_TEST_HARD_EXIT", "1") != "0" and not hasattr(config, "workerinput"):
        import logging

        release_temporary_folders()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
