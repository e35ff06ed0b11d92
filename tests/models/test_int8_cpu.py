"""int8 on every x86 CPU (models/int8_cpu.py): the CPU's int8 instructions, a numpy
twin of the AVX2 u8 x s8 kernel (which saturates), 7-bit weights that cannot saturate, and
bundles exported on one kind of CPU loaded on the other.

This file's machine may have VNNI (exact products): the AVX2 path is forced with
``SEARCHSMITH_CPU_INT8=avx2``, and its arithmetic is checked on the twin below.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import onnx
import pytest
from export_fixtures import bundle, embedder_dir
from searchsmith.models.errors import ConfigError
from searchsmith.models.int8_cpu import (
    INT8_ISA_ENV,
    cpu_int8_isa,
    exact_u8s8,
    int8_cpu_report,
    int8_isa,
    max_abs_int8_weight,
    requantize_s7,
    resolve_weight_range,
)
from searchsmith.models.onnx_quant import Int8Scheme, quantize_int8
from searchsmith.models.runtime import load_bundle

TEXTS = ["The Great Red Spot is a storm on Jupiter.", "Bananas are yellow.", "a", "Voyager 2 visited Neptune " * 6]


def avx2_u8s8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Twin of ONNX Runtime's (MLAS) u8 x s8 product on an x86 CPU without VNNI: ``vpmaddubsw``
    multiplies adjacent pairs along K (uint8 activation x int8 weight) and adds each pair into
    int16 **with saturation**; ``vpmaddwd`` then adds the int16s into int32 (exact).

    Args:
        a: (M, K) uint8 values; b: (K, N) int8 values. K is padded with a zero to pairs.

    Returns:
        (M, N) int32, what the kernel returns before the zero-point correction.
    """
    a, b = a.astype(np.int32), b.astype(np.int32)
    if a.shape[1] % 2:
        a, b = np.pad(a, ((0, 0), (0, 1))), np.pad(b, ((0, 1), (0, 0)))
    pairs = a[:, 0::2, None] * b[None, 0::2, :] + a[:, 1::2, None] * b[None, 1::2, :]  # (M, K/2, N)
    return np.clip(pairs, -32768, 32767).sum(axis=1)


def vnni_u8s8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Twin of the VNNI kernel (``vpdpbusd`` adds into int32): the exact integer product."""
    return a.astype(np.int64) @ b.astype(np.int64)


def test_the_avx2_twin_saturates_with_8_bit_weights_and_not_with_7() -> None:
    a = np.array([[255, 255]], np.uint8)
    assert vnni_u8s8(a, np.array([[127], [127]]))[0, 0] == 64770
    assert avx2_u8s8(a, np.array([[127], [127]]))[0, 0] == 32767  # clipped: the emulation is real
    assert avx2_u8s8(a, np.array([[-127], [-127]]))[0, 0] == -32768
    assert avx2_u8s8(a, np.array([[64], [64]]))[0, 0] == 32640 == vnni_u8s8(a, np.array([[64], [64]]))[0, 0]
    assert avx2_u8s8(a, np.array([[-64], [-64]]))[0, 0] == -32640
    # 7-bit weights (|w| <= 64) never saturate: the worst cases and random ones
    rng = np.random.default_rng(0)
    for m, k, n in [(4, 1, 3), (5, 37, 11), (8, 64, 33), (3, 129, 7)]:
        for a in (np.full((m, k), 255), rng.integers(0, 256, size=(m, k))):
            for b in (np.full((k, n), 64), np.full((k, n), -64), rng.integers(-64, 65, size=(k, n))):
                np.testing.assert_array_equal(avx2_u8s8(a, b), vnni_u8s8(a, b))
    # ... while 8-bit ones do on ordinary inputs
    a, b = rng.integers(128, 256, size=(8, 64)), rng.integers(100, 128, size=(64, 5))
    assert (avx2_u8s8(a, b) != vnni_u8s8(a, b)).any()


def _per_token(shape: tuple[int, int, int, int], qmax: int) -> tuple[np.ndarray, ...]:
    """The data of test_onnx_quant.py's per-token twin test, quantised as token_products does:
    (uint8 activations with zero point 128, int8 weights, token scales, weight scales, bias)."""
    b, t, k, n = shape
    rng = np.random.default_rng(0)
    w = rng.normal(size=(k, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    x = (rng.normal(size=(b, t, k)) * 3 + rng.normal(size=k) * 5).astype(np.float32)
    x[0, 0] *= 40
    rows = x.reshape(-1, k)
    s = (np.abs(rows).max(1, keepdims=True) / 127).astype(np.float32)
    ws = (np.abs(w).max(0) / qmax).astype(np.float32)
    return ((np.round(rows / s) + 128).astype(np.int32), np.clip(np.round(w / ws), -qmax, qmax).astype(np.int32),
            s, ws, bias)


def test_the_avx2_twin_gives_issue_23s_wrong_value_and_7_bit_weights_fix_it() -> None:
    """On an AVX2 CPU the per-token test read 1486.28 where 1803.07 was right; the
    twin gives exactly that value for 8-bit weights, and the exact product for 7-bit ones."""
    q, wq, s, ws, bias = _per_token((3, 7, 37, 11), 127)
    exact = (vnni_u8s8(q, wq) - 128 * wq.sum(0)) * ws * s + bias
    avx2 = (avx2_u8s8(q, wq) - 128 * wq.sum(0)) * ws * s + bias
    worst = np.unravel_index(np.abs(avx2 - exact).argmax(), exact.shape)
    assert round(float(avx2[worst]), 2) == 1486.28 and round(float(exact[worst]), 2) == 1803.07
    for shape in [(3, 7, 37, 11), (2, 13, 64, 33)]:
        q, w7, *_ = _per_token(shape, 64)
        np.testing.assert_array_equal(avx2_u8s8(q, w7), vnni_u8s8(q, w7))
        q, w8, *_ = _per_token(shape, 127)
        w8to7 = np.clip(np.round(w8 / 2), -64, 64)  # what loading does to an 8-bit bundle on AVX2
        np.testing.assert_array_equal(avx2_u8s8(q, w8to7), vnni_u8s8(q, w8to7))


def test_the_cpus_int8_instructions_and_the_override(monkeypatch) -> None:
    from searchsmith.serving.profiling import common

    assert common.cpu_int8_isa is cpu_int8_isa  # the profiler's machine column uses the same detector
    assert cpu_int8_isa("fpu avx avx2 fma") == "AVX2"
    assert cpu_int8_isa("avx2 avx512f avx512bw") == "AVX-512"
    assert cpu_int8_isa("avx2 avx512bw avx512_vnni amx_int8") == "AMX"
    assert [exact_u8s8(i) for i in ("AVX2", "AVX-512", None, "AVX-512 VNNI", "AVX-VNNI", "AMX", "NEON")] == \
        [False, False, False, True, True, True, True]
    assert [resolve_weight_range("auto", i) for i in ("AVX2", None, "AVX-512 VNNI")] == ["s7", "s7", "s8"]
    assert resolve_weight_range("s8", "AVX2") == "s8"  # forcing full range is the user's call
    with pytest.raises(ConfigError, match="--int8-weight-range"):
        resolve_weight_range("s4", "AVX2")
    monkeypatch.delenv(INT8_ISA_ENV, raising=False)
    assert int8_isa() == cpu_int8_isa()
    for value, want in [("avx2", "AVX2"), ("AVX-512 VNNI", "AVX-512 VNNI"), ("avx512_vnni", "AVX-512 VNNI"),
                        ("avx_vnni", "AVX-VNNI"), ("Other", None), ("amx", "AMX")]:
        monkeypatch.setenv(INT8_ISA_ENV, value)
        assert int8_isa() == want
    monkeypatch.setenv(INT8_ISA_ENV, "avx2")
    assert int8_cpu_report() == {"isa": "AVX2", "cpu": cpu_int8_isa(), "forced": "avx2", "exact_u8s8": False}
    monkeypatch.setenv(INT8_ISA_ENV, "sse9")
    with pytest.raises(ConfigError, match=r"SEARCHSMITH_CPU_INT8='sse9' is not an int8 instruction set.*avx2"):
        int8_isa()


def test_requantize_s7_rewires_copies_and_leaves_7_bit_weights_alone(tmp_path) -> None:
    """Two products share an 8-bit weight and its scale; a third shares the scale with a 7-bit
    weight: the first two get new 7-bit weights and a doubled scale, the third keeps both."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    k, n = 10, 4
    w8 = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    w8[0] = 127
    small = rng.integers(-64, 65, size=(k, n)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, size=n).astype(np.float32)
    inits = [numpy_helper.from_array(w8, "w8"), numpy_helper.from_array(small, "small"),
             numpy_helper.from_array(scale, "ws"), numpy_helper.from_array(np.array(0.5, np.float32), "as"),
             numpy_helper.from_array(np.array(128, np.uint8), "azp")]
    nodes = [helper.make_node("MatMulIntegerToFloat", ["a", w, "as", "ws", "azp"], [y], domain="com.microsoft",
                              name=y) for w, y in (("w8", "y1"), ("w8", "y2"), ("small", "y3"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, k])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None) for y in ("y1", "y2", "y3")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    assert max_abs_int8_weight(model) == 127
    assert requantize_s7(model) == 2
    assert max_abs_int8_weight(model) == 64
    assert [list(nd.input)[1:4] for nd in model.graph.node] == [["w8_s7", "as", "ws_x2"], ["w8_s7", "as", "ws_x2"],
                                                                  ["small", "as", "ws"]]
    assert "w8" not in {i.name for i in model.graph.initializer}  # the 8-bit copy is not kept in memory
    a = rng.integers(0, 256, size=(6, k)).astype(np.uint8)
    y1, y2, y3 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})
    centred = a.astype(np.int64) - 128
    w7 = np.clip(np.round(w8 / 2), -64, 64)
    np.testing.assert_allclose(y1, centred @ w7 * 0.5 * scale * 2, rtol=1e-5)
    np.testing.assert_allclose(y2, y1)
    np.testing.assert_allclose(y3, centred @ small * 0.5 * scale, rtol=1e-5)
    assert requantize_s7(model) == 0  # nothing beyond 7 bits is left


def test_requantize_s7_on_onnx_runtimes_dynamic_int8_and_reduce_range_export(tmp_path) -> None:
    """The tensor scheme (QAttention + MatMulInteger from quantize_dynamic) is re-quantised
    too, and exports with s7 weights come out within 7 bits (reduce_range and per token)."""
    import onnxruntime as ort
    from searchsmith.models.onnx_fusion import probe_feeds

    src = bundle("embed", "fp32") / "model.onnx"
    feeds = probe_feeds(onnx.load(str(src)), batch=3, seq=12)

    def run(model_or_path) -> np.ndarray:
        data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]

    fp32 = run(src)
    s8 = tmp_path / "s8.onnx"
    quantize_int8(src, s8, Int8Scheme(weight_range="s8"))
    model = onnx.load(str(s8))
    ops = [nd.op_type for nd in model.graph.node]
    assert ops.count("QAttention") == 1 and ops.count("MatMulInteger") == 2 and max_abs_int8_weight(model) == 127
    assert requantize_s7(model) == 3
    assert max_abs_int8_weight(model) <= 64
    requant = run(model)
    cos = np.sum(requant * fp32, axis=-1) / np.linalg.norm(requant, axis=-1) / np.linalg.norm(fp32, axis=-1)
    assert cos.min() > 0.99 and not np.allclose(requant, run(s8))  # the scales went with the weights
    for scheme in (Int8Scheme(weight_range="s7"), Int8Scheme(fuse_attention=False, activations="token",
                                                             weight_range="s7")):
        dst = tmp_path / f"{scheme.activations}-s7.onnx"
        quantize_int8(src, dst, scheme)
        assert max_abs_int8_weight(onnx.load(str(dst))) <= 64


def _export(out, isa: str, monkeypatch) -> dict:
    from searchsmith.models.export import ExportOptions, export_embedder

    monkeypatch.setenv(INT8_ISA_ENV, isa)
    return export_embedder(out, str(embedder_dir()), ExportOptions(dtype="int8"))


def _load(path, isa: str, monkeypatch):
    monkeypatch.setenv(INT8_ISA_ENV, isa)
    return load_bundle(path, device="cpu", threads=1)


def test_a_bundle_exported_with_vnni_is_requantised_on_avx2_and_one_exported_on_avx2_is_not(
        tmp_path, monkeypatch, caplog) -> None:
    import onnxruntime as ort

    vnni = tmp_path / "vnni"
    m = _export(vnni, "avx512_vnni", monkeypatch)
    assert (m["int8"]["weight_range"], m["int8"]["exported_on"]) == ("s8", "AVX-512 VNNI")
    report = json.loads((vnni / "parity_report.json").read_text())
    assert report["cpu_int8"] == {"isa": "AVX-512 VNNI", "cpu": cpu_int8_isa(), "forced": "avx512_vnni",
                                  "exact_u8s8": True, "weight_range": "s8", "requantised_at_load": 0}
    assert max_abs_int8_weight(onnx.load(str(vnni / "model.onnx"))) == 127
    on_vnni = _load(vnni, "avx512_vnni", monkeypatch)
    assert on_vnni.graphs["model"].requantised == 0
    caplog.set_level(logging.INFO, logger="searchsmith.models.runtime")
    on_avx2 = _load(vnni, "avx2", monkeypatch)
    graph = on_avx2.graphs["model"]
    products = m["graphs"]["model"]["int8"]["per_token_products"]
    assert graph.requantised == products >= 6  # every per-token product got 7-bit weights ...
    assert "re-quantised to 7 bits" in caplog.text and "AVX-512 VNNI" in caplog.text and "AVX2" in caplog.text
    assert graph.session.get_session_options().get_session_config_entry("session.x64quantprecision") == "1"
    # ... the session runs exactly the re-quantised graph ...
    feeds = {k: v for k, v in on_avx2._encode_text(TEXTS)[0][1].items() if k in graph.input_names}
    model = onnx.load(str(vnni / "model.onnx"))
    requantize_s7(model)
    twin = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(graph(feeds), twin, rtol=1e-5, atol=1e-6)
    # ... which is close to the 8-bit one, and not the same
    a, b = on_vnni.encode(TEXTS), on_avx2.encode(TEXTS)
    assert not np.allclose(a, b) and float(np.sum(a * b, axis=1).min()) > 0.99
    # a bundle from before the weight range was recorded counts as 8-bit
    old = tmp_path / "old"
    shutil.copytree(vnni, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["int8"]["weight_range"], manifest["int8"]["exported_on"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert _load(old, "avx2", monkeypatch).graphs["model"].requantised == products

    avx2 = tmp_path / "avx2"
    m = _export(avx2, "avx2", monkeypatch)
    assert (m["int8"]["weight_range"], m["int8"]["exported_on"]) == ("s7", "AVX2")
    report = json.loads((avx2 / "parity_report.json").read_text())
    assert report["cpu_int8"]["isa"] == "AVX2" and report["cpu_int8"]["weight_range"] == "s7"
    assert report["passed"]
    assert max_abs_int8_weight(onnx.load(str(avx2 / "model.onnx"))) == 64
    for isa in ("avx2", "avx512_vnni"):
        assert _load(avx2, isa, monkeypatch).graphs["model"].requantised == 0
