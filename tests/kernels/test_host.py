"""kernels/host.py (NumPy, for a cold CPU start) against the torch reference (kernels/reference.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from searchsmith.kernels import reference
from searchsmith.kernels.host import dedup_mask_host, host_only, route_sources_host


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("b,c,d,s,k", [(1, 1, 8, 1, 1), (3, 17, 31, 5, 3), (7, 130, 384, 13, 13), (2, 9, 5, 4, 10)])
@pytest.mark.parametrize("weighted", [False, True])
def test_route_sources_matches_the_torch_reference(b, c, d, s, k, weighted):
    rng = np.random.default_rng(b * 1000 + c)
    q, cents = _unit(rng, b, d), _unit(rng, c, d)
    src = rng.integers(0, s, size=c)
    src[0] = 0
    scale = rng.uniform(0.5, 1.5, size=s).astype(np.float32)
    if s > 2:
        scale[-1] = -1.0  # a negative scale on a source that may have no centroid
    weight = rng.uniform(0.2, 1.0, size=c).astype(np.float32) if weighted else None
    got_s, got_i = route_sources_host(q, cents, src, scale, k, centroid_weight=weight)
    want_s, want_i = reference.route_sources_ref(
        torch.from_numpy(q), torch.from_numpy(cents), torch.from_numpy(src), torch.from_numpy(scale), min(k, s),
        centroid_weight=None if weight is None else torch.from_numpy(weight))
    np.testing.assert_array_equal(got_i, want_i.numpy())
    np.testing.assert_allclose(got_s, want_s.numpy(), rtol=1e-5, atol=1e-6)


def test_route_sources_ties_go_to_the_lower_source_and_empty_sources_score_minus_inf():
    q = np.array([[1.0, 0.0]], np.float32)
    cents = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    scores, ids = route_sources_host(q, cents, np.array([2, 1]), np.ones(4, np.float32), 4)
    assert ids.tolist() == [[1, 2, 0, 3]]
    assert scores[0, 2] == -np.inf and scores[0, 3] == -np.inf


@pytest.mark.parametrize("n", [1, 2, 37, 1031])
@pytest.mark.parametrize("threshold", [0.3, 0.8, 1.0])
def test_dedup_mask_matches_the_torch_reference(n, threshold):
    rng = np.random.default_rng(n)
    e = _unit(rng, n, 16)
    if n > 2:
        e[n // 2] = e[0]  # an exact duplicate
    got = dedup_mask_host(e, threshold)
    want = reference.dedup_mask_ref(torch.from_numpy(e), threshold).numpy()
    np.testing.assert_array_equal(got, want)
    assert got[0]


@pytest.mark.parametrize("call,message", [
    (lambda: route_sources_host(np.zeros((1, 3)), np.zeros((2, 4)), np.array([0, 0]), np.ones(1), 1), "share D"),
    (lambda: route_sources_host(np.zeros((1, 3)), np.zeros((2, 3)), np.array([0, 5]), np.ones(2), 1), "ids in"),
    (lambda: route_sources_host(np.zeros((1, 3)), np.zeros((2, 3)), np.array([0, 1]), np.ones(2), 0), "k must"),
    (lambda: dedup_mask_host(np.zeros(3), 0.8), "(N, D)"),
    (lambda: dedup_mask_host(np.zeros((2, 3)), 1.5), "threshold"),
])
def test_bad_inputs_are_refused(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_host_only_is_false_once_torch_is_loaded(monkeypatch):
    assert "torch" in sys.modules and not host_only()


def test_importing_the_package_and_host_does_not_import_torch():
    code = ("import sys, searchsmith.kernels, searchsmith.kernels.host as h; "
            "print('torch' in sys.modules, h.host_only() == (not __import__('glob').glob('/dev/nvidia[0-9]*')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_an_empty_backend_variable_means_auto_as_in_the_dispatcher():
    """SEARCHSMITH_KERNEL_BACKEND= (set, empty) is "auto" for ``dispatch``; ``host_only`` read it
    as a forced backend and took the torch path."""
    code = ("import searchsmith.kernels.host as h, glob; "
            "print(h.host_only() == (not glob.glob('/dev/nvidia[0-9]*')))")
    env = {**os.environ, "SEARCHSMITH_KERNEL_BACKEND": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["True"]
