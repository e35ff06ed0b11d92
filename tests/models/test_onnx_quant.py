"""int8 quantisation choices (models/onnx_quant.py): SmoothQuant, per-task schemes, CLI flags."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from export_fixtures import bundle, rerank_run
from searchsmith.models.errors import ConfigError
from searchsmith.models.export import ExportOptions, calibration_feeds
from searchsmith.models.int8_cpu import (
    INT8_ISA_ENV,
    WEIGHT_QMAX,
    exact_u8s8,
    int8_isa,
    max_abs_int8_weight,
    resolve_weight_range,
)
from searchsmith.models.onnx_fusion import fused_max_abs, probe_feeds
from searchsmith.models.onnx_quant import (
    INT8_DEFAULTS,
    Int8Scheme,
    activation_max,
    down_projections,
    quantize_int8,
    smooth_products,
    token_products,
    weight_products,
)
from searchsmith.models.parity_inputs import demo_inputs, heldout_groups, heldout_texts
from searchsmith.models.runtime import OrtGraph, load_bundle


def _ops(path_or_model) -> list[str]:
    model = path_or_model if isinstance(path_or_model, onnx.ModelProto) else onnx.load(str(path_or_model))
    return [n.op_type for n in model.graph.node]


def _calibration(graph_path, n=3):
    model = onnx.load(str(graph_path))
    return [probe_feeds(model, batch=3, seq=7 + 4 * k) for k in range(n)]


def test_smoothing_leaves_the_fp32_product_unchanged(tmp_path) -> None:
    src = bundle("embed", "fp32") / "model.onnx"
    model = onnx.load(str(src))
    downs = down_projections(model.graph)
    assert len(downs) == 1  # the tiny model's one block
    amax = activation_max(model, [downs[0].input[0]], _calibration(src), tmp_path)
    assert amax[downs[0].input[0]].shape == (64,) and (amax[downs[0].input[0]] > 0).all()
    assert not list(tmp_path.iterdir())  # the calibration graph is not left behind
    before = {i.name: onnx.numpy_helper.to_array(i).copy() for i in model.graph.initializer}
    assert smooth_products(model, downs, amax, alpha=0.8) == 1
    weight = downs[0].input[1]
    changed = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == weight))
    assert not np.allclose(changed, before[weight])  # the weight rows were rescaled ...
    assert "Mul" in [n.op_type for n in model.graph.node if n.name.startswith("searchsmith_smooth")]
    onnx.save(model, str(tmp_path / "smoothed.onnx"))
    for seq in (1, 9, 30):  # ... and the function is the same
        assert fused_max_abs(src, tmp_path / "smoothed.onnx", probe_feeds(model, batch=4, seq=seq)) <= 1e-5


def test_quantize_int8_down_projection_modes(tmp_path) -> None:
    src = bundle("embed", "fp32") / "model.onnx"
    cal = _calibration(src)
    counts = {}
    for mode in ("fp32", "smooth", "int8"):
        dst = tmp_path / f"{mode}.onnx"
        done = quantize_int8(src, dst, Int8Scheme(down_projections=mode), cal)
        assert done["down_projections"] == mode and done["fused_attention"] == 1
        assert done["smoothed_products"] == (1 if mode == "smooth" else 0)
        assert done["fp32_products"] == (1 if mode == "fp32" else 0)
        counts[mode] = _ops(dst).count("MatMulInteger")
        assert fused_max_abs(src, dst, probe_feeds(onnx.load(str(src)), batch=3, seq=12)) < 0.1
    assert counts == {"fp32": 2, "smooth": 3, "int8": 3}
    # smooth without calibration inputs (a graph that takes no text) keeps them fp32, and says so
    done = quantize_int8(src, tmp_path / "nocal.onnx", Int8Scheme(down_projections="smooth"), None)
    assert done["down_projections"] == "fp32" and done["smoothed_products"] == 0
    # an unfused scheme leaves the softmax in place
    done = quantize_int8(src, tmp_path / "unfused.onnx", Int8Scheme(fuse_attention=False), None)
    assert done["fused_attention"] == 0 and "Softmax" in _ops(tmp_path / "unfused.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fp32.onnx", "smooth.onnx", "int8.onnx", "nocal.onnx", "unfused.onnx"])  # no work files left


def token_twin(x: np.ndarray, w: np.ndarray, weight_range: str, requantised: bool) -> np.ndarray:
    """Numpy twin of :func:`token_products` (``x @ w``, no bias): symmetric int8 per token (row
    of ``x``), int8 per output column of ``w`` with |w_q| <= 127 (s8) or 64 (s7); ``requantised``:
    s8 weights then halved to 7 bits at load (``round(w_q / 2)``, twice the scale), as
    ``load_bundle`` does on a CPU without VNNI. The products are exact integers (what VNNI
    computes, and what AVX2 computes for 7-bit weights: tests/models/test_int8_cpu.py)."""
    k = w.shape[0]
    rows = x.reshape(-1, k).astype(np.float64)
    s = np.abs(rows).max(1, keepdims=True) / 127
    qmax = WEIGHT_QMAX[weight_range]
    ws = np.abs(w).max(0) / qmax
    wq = np.clip(np.round(w / ws), -qmax, qmax)
    if requantised:
        wq, ws = np.clip(np.round(wq / 2), -64, 64), ws * 2
    return ((np.round(rows / s) @ wq) * ws * s).reshape(*x.shape[:-1], w.shape[1])


@pytest.mark.parametrize("cpu", ["this", "avx2"])
@pytest.mark.parametrize("weight_range", ["s8", "s7"])
@pytest.mark.parametrize(("shape", "opset"), [((1, 1, 16, 8), 18), ((3, 7, 37, 11), 18), ((2, 13, 64, 33), 17)])
def test_token_products_match_their_numpy_twin(shape, opset, weight_range, cpu, tmp_path, monkeypatch) -> None:
    """The per-token graph, loaded as load_bundle loads it (OrtGraph), equals its twin on this CPU
    and with the AVX2 path forced: 8-bit weights are exact with VNNI and re-quantised to 7 bits
    without it (on an AVX2 CPU the 8-bit products saturated, 1486.28 for 1803.07)."""
    from onnx import TensorProto, helper, numpy_helper

    if cpu == "avx2":
        monkeypatch.setenv(INT8_ISA_ENV, "avx2")
    else:
        monkeypatch.delenv(INT8_ISA_ENV, raising=False)
    requantised = weight_range == "s8" and not exact_u8s8(int8_isa())
    b, t, k, n = shape
    rng = np.random.default_rng(0)
    w = rng.normal(size=(k, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y0"], name="mm"), helper.make_node("Add", ["y0", "b"], ["y"]),
         helper.make_node("MatMul", ["x", "w2"], ["y2"], name="mm2")],  # a second product of the same x
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b"), numpy_helper.from_array(-2 * w, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    assert token_products(model, weight_products(model.graph), weight_range) == 2
    assert _ops(model).count("QuantizeLinear") == 1  # x is quantised once for both
    assert "MatMul" not in _ops(model) and "w" not in {i.name for i in model.graph.initializer}
    assert max_abs_int8_weight(model) == WEIGHT_QMAX[weight_range]
    onnx.save(model, str(tmp_path / "tok.onnx"))
    x = (rng.normal(size=(b, t, k)) * 3 + rng.normal(size=k) * 5).astype(np.float32)
    x[0, 0] *= 40  # an outlier token costs the others no precision
    g = OrtGraph(tmp_path / "tok.onnx", ["CPUExecutionProvider"], None, int8_weights=weight_range)
    assert g.requantised == (2 if requantised else 0)
    got, got2 = g.session.run(None, {"x": x})
    want = token_twin(x, w, weight_range, requantised) + bias
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got2, -2 * (want - bias), rtol=1e-4, atol=2e-3)
    exact = x @ w + bias
    err = np.linalg.norm(got[:, 1:] - exact[:, 1:]) / np.linalg.norm(exact[:, 1:]) if t > 1 else 0.0
    assert err < (0.02 if weight_range == "s8" and not requantised else 0.04)  # 7 bits: twice the step


def test_int8_schemes_validate_and_resolve_per_task() -> None:
    for task in ("embed", "rerank"):
        d = INT8_DEFAULTS[task]
        assert (d.activations, d.fuse_attention, d.fp32_blocks, d.down_projections) == ("token", False, 0, "int8")
    assert INT8_DEFAULTS["cite"].activations == "tensor" and INT8_DEFAULTS["cite"].fuse_attention is True
    assert INT8_DEFAULTS["decompose"].fuse_attention is False
    opts = ExportOptions(dtype="int8")
    assert opts.int8_scheme("rerank") == INT8_DEFAULTS["rerank"]
    assert opts.int8_scheme("unknown-task") == Int8Scheme()
    over = ExportOptions(dtype="int8", int8_fuse_attention=False, int8_smooth_alpha=0.5, int8_fp32_blocks=0,
                         int8_down_projections="smooth")
    s = over.int8_scheme("cite")
    assert (s.fuse_attention, s.smooth_alpha, s.fp32_blocks, s.down_projections) == (False, 0.5, 0, "smooth")
    # a strength for products that are not smoothed did nothing: refused, naming the task's mode
    for task, options, mode in (("rerank", {}, "int8 (its default)"),
                                ("cite", {"int8_down_projections": "fp32"}, "fp32;")):
        with pytest.raises(ConfigError, match=rf"--int8-smooth-alpha: .* this {task} export's down projections "
                                              rf"are {re.escape(mode)}"):
            ExportOptions(dtype="int8", int8_smooth_alpha=0.5, **options).int8_scheme(task)
    with pytest.raises(ConfigError, match=r"--int8-smooth-alpha.*\[0, 1\]"):
        ExportOptions(dtype="int8", int8_smooth_alpha=1.5)
    with pytest.raises(ConfigError, match="--int8-down-projections"):
        ExportOptions(dtype="int8", int8_down_projections="int4")
    with pytest.raises(ConfigError, match="--int8-attention"):
        ExportOptions(dtype="int8", int8_fuse_attention="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--int8-fp32-blocks"):
        Int8Scheme(fp32_blocks=True)  # type: ignore[arg-type]
    # per-token activations unfuse the attention unless told otherwise, and refuse fused
    assert ExportOptions(dtype="int8", int8_activations="token").int8_scheme("cite").fuse_attention is False
    with pytest.raises(ConfigError, match="does not go with --int8-attention fused"):
        ExportOptions(dtype="int8", int8_activations="token", int8_fuse_attention=True)
    with pytest.raises(ConfigError, match=r"--int8-activations: 'channel' is not one of \['tensor', 'token'\]"):
        ExportOptions(dtype="int8", int8_activations="channel")
    with pytest.raises(ConfigError, match=r"--int8-weight-range: 's6' is not one of \['auto', 's8', 's7'\]"):
        ExportOptions(dtype="int8", int8_weight_range="s6")
    assert ExportOptions(dtype="int8", int8_weight_range="s7").int8_scheme("embed").weight_range == "s7"
    assert all(d.weight_range == "auto" for d in INT8_DEFAULTS.values())  # made concrete per CPU at export
    tensor = ExportOptions(dtype="int8", int8_activations="tensor", int8_fuse_attention=True).int8_scheme("embed")
    assert (tensor.activations, tensor.fuse_attention) == ("tensor", True)
    # ... and fused attention alone implies one scale per call, for every task
    for task in ("embed", "rerank", "cite"):
        fused = ExportOptions(dtype="int8", int8_fuse_attention=True).int8_scheme(task)
        assert (fused.activations, fused.fuse_attention) == ("tensor", True)


def test_calibration_inputs_are_disjoint_from_the_parity_inputs() -> None:
    th = ExportOptions().thresholds
    inputs = demo_inputs(th.heldout_texts)
    assert inputs.texts == heldout_texts(th.heldout_texts)
    assert inputs.groups == heldout_groups(max(2, th.heldout_texts // 4))
    b = load_bundle(bundle("embed", "fp32"), device="cpu")
    feeds = calibration_feeds("embed", b, "model", 40, inputs)
    assert sum(f["input_ids"].shape[0] for f in feeds) == 40
    tok = b.tokenizer
    parity = {tok.decode(tok(t, truncation=True, max_length=b.max_length)["input_ids"], skip_special_tokens=True)
              for t in heldout_texts(th.heldout_texts)}
    seen = {tok.decode([int(x) for x, m in zip(row, mask, strict=True) if m], skip_special_tokens=True)
            for f in feeds for row, mask in zip(f["input_ids"], f["attention_mask"], strict=True)}
    assert len(seen) > 20 and not seen & parity
    rb = load_bundle(bundle("rerank", "fp32"), device="cpu")
    rfeeds = calibration_feeds("rerank", rb, "model", 16, inputs)
    assert sum(f["input_ids"].shape[0] for f in rfeeds) == 16 and "token_type_ids" in rfeeds[0]
    parity_q = {q for q, _ in heldout_groups(max(2, th.heldout_texts // 4))}
    starts = {tok.decode([int(x) for x, t in zip(row, types, strict=True) if t == 0], skip_special_tokens=True)
              for f in rfeeds for row, types in zip(f["input_ids"], f["token_type_ids"], strict=True)}
    assert not any(s.lower() == q.lower() for s in starts for q in parity_q)
    # graphs that take something other than text get none
    ib = load_bundle(bundle("images", "fp32"), device="cpu")
    assert calibration_feeds("images", ib, "vision", 8, inputs) is None


def test_export_cli_int8_flags_reach_the_manifest(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    out = tmp_path / "rr"
    assert main(["export", str(rerank_run()), "--out", str(out), "--dtype", "int8", "--allow-drift",
                 "--int8-attention", "unfused", "--int8-down-projections", "fp32", "--int8-fp32-blocks", "0"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    isa = int8_isa()  # the weight range "auto" resolves to, and the CPU it was exported on, are recorded
    assert m["int8"] == {"fuse_attention": False, "fp32_blocks": 0, "down_projections": "fp32",
                         "smooth_alpha": 0.8, "calibration_inputs": 128, "activations": "token",
                         "weight_range": resolve_weight_range("auto", isa), "exported_on": isa}
    report = json.loads((out / "parity_report.json").read_text())
    assert report["cpu_int8"]["isa"] == isa and report["cpu_int8"]["weight_range"] == m["int8"]["weight_range"]
    assert m["graphs"]["model"]["int8"]["smoothed_products"] == 0
    assert "Softmax" in _ops(out / "model.onnx") and "QAttention" not in _ops(out / "model.onnx")
    # the defaults for a reranker: per-token activations, every block int8, attention unfused
    assert main(["export", str(rerank_run()), "--out", str(tmp_path / "rr2"), "--dtype", "int8",
                 "--allow-drift"]) == 0
    m2 = json.loads((tmp_path / "rr2" / "manifest.json").read_text())
    assert m2["int8"]["activations"] == "token" and m2["int8"]["fp32_blocks"] == 0
    done = m2["graphs"]["model"]["int8"]
    ops = _ops(tmp_path / "rr2" / "model.onnx")
    assert done["per_token_products"] == ops.count("MatMulIntegerToFloat") >= 6  # q, k, v, out, up, down
    # what is left to ONNX Runtime's dynamic int8: the [CLS] head's two Gemms (pooler, classifier)
    assert "QAttention" not in ops and ops.count("DynamicQuantizeLinear") == 2
    # the tensor scheme by flags: ONNX Runtime's dynamic quantisation, fused attention
    assert main(["export", str(rerank_run()), "--out", str(tmp_path / "rr3"), "--dtype", "int8", "--allow-drift",
                 "--int8-activations", "tensor", "--int8-attention", "fused"]) == 0
    assert "QAttention" in _ops(tmp_path / "rr3" / "model.onnx")
    assert "MatMulIntegerToFloat" not in _ops(tmp_path / "rr3" / "model.onnx")
    capsys.readouterr()


def test_export_refuses_fp32_blocks_covering_every_block(tmp_path, capsys) -> None:
    """`--int8-fp32-blocks N` with N >= the model's blocks once quantised every block (the
    quantiser keeps none when asked for all): the inverse of the request. Refused before any work."""
    from searchsmith.models.onnx_quant import check_fp32_blocks, transformer_blocks
    from searchsmith.serving.main import main

    run = rerank_run()
    assert transformer_blocks(run / "model") == 1  # the tiny test model
    out = tmp_path / "rr"
    assert main(["export", str(run), "--out", str(out), "--dtype", "int8", "--int8-fp32-blocks", "1"]) == 1
    err = capsys.readouterr().err
    assert "--int8-fp32-blocks 1" in err and "1 transformer block" in err and "from 0 to 0" in err
    assert not out.exists()
    check_fp32_blocks(0, run / "model")  # 0 and None are always fine
    check_fp32_blocks(None, run / "model")
    check_fp32_blocks(5, tmp_path)  # no config.json: nothing to check against
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 6}')
    check_fp32_blocks(5, tmp_path)
    with pytest.raises(ConfigError, match="has 6 transformer block.*from 0 to 5"):
        check_fp32_blocks(6, tmp_path)


def _help_defaults(parser, flag: str) -> dict[str, str]:
    """``{task: value}`` from the ``(default: V for t1, t2; W for t3)`` of ``flag``'s help."""
    import re

    action = next(a for a in parser._actions if flag in a.option_strings)
    body = re.search(r"\(default: ([^)]*)\)$", action.help).group(1)
    out = {}
    for part in body.split("; "):
        value, tasks = part.split(" for ", 1)
        for task in (INT8_DEFAULTS if tasks == "every task" else tasks.split(", ")):
            out[task] = value
    return out


def test_export_help_states_the_int8_defaults_the_code_uses(monkeypatch) -> None:
    """`export --help` once said fp32 blocks "2 for rerank", attention "fused", activations
    "tensor" and down-projections "smooth" for the embedder: none was the code's default."""
    import argparse

    from searchsmith.models import onnx_quant
    from searchsmith.training.export_cli import configure_export

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="searchsmith export")
        configure_export(p)
        p.format_help()  # every help string formats
        return p

    shown = {"fuse_attention": lambda v: "fused" if v else "unfused"}
    flags = {"fp32_blocks": "--int8-fp32-blocks", "fuse_attention": "--int8-attention",
             "down_projections": "--int8-down-projections", "smooth_alpha": "--int8-smooth-alpha",
             "activations": "--int8-activations", "weight_range": "--int8-weight-range"}
    p = parser()
    for name, flag in flags.items():
        want = {task: shown.get(name, str)(getattr(s, name)) for task, s in INT8_DEFAULTS.items()}
        assert _help_defaults(p, flag) == want, flag
    # the help is read from the table: change a default and the help follows
    monkeypatch.setitem(onnx_quant.INT8_DEFAULTS, "cite", Int8Scheme(fp32_blocks=3))
    assert _help_defaults(parser(), "--int8-fp32-blocks")["cite"] == "3"
