"""int8 dynamic quantisation of exported encoder graphs, and the per-task choices it makes.

``quantize_dynamic`` (ONNX Runtime) with int8 per-output-channel weights, three choices on top:

- **attention fusion** (:mod:`searchsmith.models.onnx_fusion`): self-attention becomes one
  ``Attention`` node, then ``QAttention`` (one int8 product for Q, K and V);
- **fp32 first blocks**: the weight products of the first ``fp32_blocks`` transformer blocks
  stay fp32 (:func:`first_blocks_matmuls`);
- **feed-forward down-projections** (the products fed by a GELU, where BERT's activation
  outliers live): kept fp32 (``"fp32"``), quantised as they are (``"int8"``) or quantised after
  SmoothQuant (``"smooth"``; Xiao et al. 2023): per input channel ``j`` the activation is divided
  by ``s_j = max|x_j| ** alpha / max|W_j| ** (1 - alpha)`` (a ``Mul`` before the product) and
  the weight row multiplied by it, which leaves the fp32 product unchanged and moves the
  outliers into the weights, which are quantised per channel. ``max|x_j|`` comes from a few
  calibration inputs run through the fp32 graph.

What each task gets by default (:data:`INT8_DEFAULTS`) was measured on 2 CPU cores against the
fp32 graph (export parity and the ``searchsmith profile`` figures are the checks):

- embed (MiniLM, 512 mixed demo texts, batches of 32): fused, down-projections fp32: min
  cosine 0.993, 5.03 s; all down-projections int8 0.988; smoothed with alpha 0.5 / 0.75 / 0.8
  / 0.9 / 1.0: 0.983 / 0.991 / 0.991 / 0.990 / 0.991, 10-20 % faster than fp32 ones.
- rerank (the trained MiniLM reranker, 32 held-out queries x 30 candidates, against fp32):
  unfused, first block fp32, down-projections fp32: top-10 overlap 0.950 (Kendall tau 0.935),
  20.8 s; fused 0.941 (19.8 s); fused and smoothed 0.941 (18.7 s). Dynamic int8 scales each
  activation per call, so the figure moves with how pairs are batched: over 512 / 1024 / 2048
  padded tokens per call the first block fp32 gave 0.931 / 0.941 / 0.941 (tau 0.936 / 0.932 /
  0.935), the first two blocks 0.962 / 0.944 / 0.959 (tau 0.948 / 0.939 / 0.945). With two
  fp32 blocks and 512-token calls, chosen on three other sets of 40 queries x 30 (demo seeds
  2-4; mean top-10 overlap / tau) with speed from 3 interleaved rounds on 960 pairs: unfused
  0.957 / 0.945, 89 pairs/s; fused 0.958 / 0.945, 93; unfused and smoothed 0.957 / 0.941, 99;
  fused and smoothed 0.957 / 0.939, 102; one fp32 block fused 0.956 / 0.935, 98. The top-10
  agreement is the same within 0.002 and the last is the fastest with the first two blocks fp32.
- cite and the image model's text tower: fused (their parity is exact-label agreement, and the
  fused graphs match the unfused ones within 1e-4), down-projections fp32 (not measured
  smoothed). The decomposer's graphs do not match the fusion and have no calibration inputs.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from searchsmith.models.errors import ConfigError

log = logging.getLogger(__name__)

DownProjections = Literal["fp32", "smooth", "int8"]
DOWN_PROJECTION_MODES = ("fp32", "smooth", "int8")
_LAYER_NORMS = ("LayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
#: Nodes whose weights int8 quantises: products, and fused attention (Q, K, V in one weight).
WEIGHT_PRODUCTS = ("MatMul", "Gemm", "Attention")
_GELUS = ("Gelu", "BiasGelu", "FastGelu")


@dataclass(frozen=True)
class Int8Scheme:
    """How one task's graphs are quantised to int8 (recorded in the bundle's manifest).

    Attributes:
        fuse_attention: fuse self-attention (``QAttention``) before quantising.
        fp32_blocks: transformer blocks, from the first, whose weights stay fp32.
        down_projections: the GELU-fed products: ``fp32``, ``smooth`` (SmoothQuant, then
            int8) or ``int8``. ``smooth`` falls back to ``fp32`` for a graph without
            calibration inputs.
        smooth_alpha: SmoothQuant's migration strength (0 = all on the activation side,
            1 = all on the weights).
        calibration_inputs: how many inputs (demo texts or pairs, disjoint from the parity
            inputs) give the activation maxima for ``smooth``.
    """

    fuse_attention: bool = True
    fp32_blocks: int = 1
    down_projections: DownProjections = "fp32"
    smooth_alpha: float = 0.8
    calibration_inputs: int = 128

    def __post_init__(self) -> None:
        if not isinstance(self.fp32_blocks, int) or isinstance(self.fp32_blocks, bool) or self.fp32_blocks < 0:
            raise ConfigError(f"export --int8-fp32-blocks: expected an int >= 0, got {self.fp32_blocks!r}")
        if self.down_projections not in DOWN_PROJECTION_MODES:
            raise ConfigError(f"export --int8-down-projections: {self.down_projections!r} is not one of "
                              f"{list(DOWN_PROJECTION_MODES)}")
        if not isinstance(self.smooth_alpha, (int, float)) or not 0.0 <= self.smooth_alpha <= 1.0:
            raise ConfigError(f"export --int8-smooth-alpha: expected a number in [0, 1], got {self.smooth_alpha!r} "
                              "(0.8 is the default)")
        if not isinstance(self.calibration_inputs, int) or not 1 <= self.calibration_inputs <= 4096:
            raise ConfigError(f"export int8 calibration_inputs: expected an int in 1..4096, got "
                              f"{self.calibration_inputs!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: Per-task defaults (see the module docstring for the measurements behind them).
INT8_DEFAULTS: dict[str, Int8Scheme] = {
    "embed": Int8Scheme(fuse_attention=True, down_projections="smooth"),
    "rerank": Int8Scheme(fuse_attention=True, fp32_blocks=2, down_projections="smooth"),
    "cite": Int8Scheme(fuse_attention=True),
    "images": Int8Scheme(fuse_attention=True),
    "decompose": Int8Scheme(fuse_attention=False),
}


def first_blocks_matmuls(graph: Any, blocks: int) -> list[str]:
    """Names of the weight products (MatMul, Gemm, fused Attention) of the first ``blocks`` blocks.

    BERT layout, in graph (topological) order: the embeddings' layer norm, then two per block,
    so the first ``blocks`` blocks are what comes before layer norm number ``1 + 2 * blocks``.
    A graph without that many layer norms (or ``blocks`` covering all of them) gives ``[]``:
    keeping every block fp32 is not int8.
    """
    total = sum(n.op_type in _LAYER_NORMS for n in graph.node)
    if blocks <= 0 or total < 1 + 2 * (blocks + 1):
        return []
    inits = {i.name for i in graph.initializer}
    names, norms = [], 0
    for node in graph.node:
        if node.op_type in _LAYER_NORMS:
            norms += 1
            if norms == 1 + 2 * blocks:
                return names
        elif node.op_type in WEIGHT_PRODUCTS and any(x in inits for x in node.input[:2]):
            names.append(node.name)
    return []


def down_projections(graph: Any) -> list[Any]:
    """The weight products fed by a GELU (BERT's feed-forward down-projections), graph order."""
    producer = {out: node for node in graph.node for out in node.output}
    inits = {i.name for i in graph.initializer}
    return [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and len(n.input) >= 2
            and n.input[1] in inits and producer.get(n.input[0]) is not None
            and producer[n.input[0]].op_type in _GELUS]


def _session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep the names
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def activation_max(model: Any, names: list[str], feeds: list[dict[str, np.ndarray]], work: Path) -> dict[str, np.ndarray]:
    """Per-channel (last axis) max |value| of the tensors ``names`` over ``feeds`` (fp32 graph).

    Rows of padding count too: their activations go through the same int8 product.
    """
    import onnx

    calib = onnx.ModelProto()
    calib.CopyFrom(model)
    have = {o.name for o in calib.graph.output}
    for name in names:
        if name not in have:
            calib.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    path = work / "calibrate.onnx"
    onnx.save(calib, str(path))
    sess = _session(path)
    out: dict[str, np.ndarray] = {}
    for f in feeds:
        for name, value in zip(names, sess.run(names, f), strict=True):
            cur = np.abs(np.asarray(value, dtype=np.float32)).reshape(-1, value.shape[-1]).max(axis=0)
            out[name] = cur if name not in out else np.maximum(out[name], cur)
    path.unlink(missing_ok=True)
    return out


def smooth_products(model: Any, nodes: list[Any], amax: dict[str, np.ndarray], alpha: float) -> int:
    """SmoothQuant ``nodes`` (``y = x @ W``) in place: ``y = (x / s) @ (s[:, None] * W)``.

    Returns how many products were smoothed (a node whose input has no maximum is skipped).
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    targets = {id(n) for n in nodes}
    new_nodes, done = [], 0
    for node in graph.node:
        if id(node) in targets and node.input[0] in amax and node.input[1] in inits:
            weight = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            xmax = np.maximum(amax[node.input[0]].astype(np.float64), 1e-5)
            wmax = np.maximum(np.abs(weight).max(axis=1).astype(np.float64), 1e-5)
            if xmax.shape != wmax.shape:
                continue
            scale = (xmax ** alpha / wmax ** (1.0 - alpha)).astype(np.float32)
            tag = f"searchsmith_smooth_{done}"
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(weight * scale[:, None], node.input[1]))
            graph.initializer.append(numpy_helper.from_array((1.0 / scale).astype(np.float32), f"{tag}_inv_scale"))
            new_nodes.append(helper.make_node("Mul", [node.input[0], f"{tag}_inv_scale"], [f"{tag}_x"],
                                              name=f"{tag}_mul"))
            node.input[0] = f"{tag}_x"
            done += 1
        new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)
    return done


def quantize_int8(src: Path, dst: Path, scheme: Int8Scheme,
                  calibration: list[dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Quantise the fp32 graph ``src`` to ``dst`` following ``scheme``.

    Returns:
        What was done: fused attention blocks, smoothed and fp32-kept products.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from searchsmith.models.onnx_fusion import fuse_attention_checked

    with tempfile.TemporaryDirectory(prefix=".int8-", dir=dst.parent) as tmp:
        work = Path(tmp)
        fused = fuse_attention_checked(src, work / "fused.onnx") if scheme.fuse_attention else 0
        model = onnx.load(str(work / "fused.onnx" if fused else src))
        graph = model.graph
        first = set(first_blocks_matmuls(graph, scheme.fp32_blocks))
        downs = [n for n in down_projections(graph) if n.name not in first]
        mode = scheme.down_projections
        if mode == "smooth" and not calibration:
            log.info("export int8: %s has no calibration inputs; its down-projections stay fp32", src.name)
            mode = "fp32"
        smoothed = 0
        if mode == "smooth":
            amax = activation_max(model, sorted({n.input[0] for n in downs}), calibration or [], work)
            smoothed = smooth_products(model, downs, amax, scheme.smooth_alpha)
        keep = sorted(first | ({n.name for n in downs} if mode == "fp32" else set()))
        staged = work / "staged.onnx"
        onnx.save(model, str(staged))
        quantize_dynamic(str(staged), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=list(WEIGHT_PRODUCTS), nodes_to_exclude=keep)
    return {"fused_attention": int(fused), "smoothed_products": smoothed, "fp32_products": len(keep),
            "down_projections": mode}


__all__ = ["DOWN_PROJECTION_MODES", "INT8_DEFAULTS", "WEIGHT_PRODUCTS", "Int8Scheme", "activation_max",
           "down_projections", "first_blocks_matmuls", "quantize_int8", "smooth_products"]
