"""int8 dynamic quantisation of exported encoder graphs, and the per-task choices it makes.

Weights are int8 per output column; four choices on top:

- **activations**: ``tensor`` = ONNX Runtime's ``quantize_dynamic`` (one uint8 scale for all
  the tokens of a call) or ``token`` = one symmetric scale per token (:func:`token_products`:
  ``QuantizeLinear`` per axis + ``MatMulIntegerToFloat``), which halves the error of each
  product (1.6 % against 3.0 % relative error of ``x @ W`` over the embedder's 36 products)
  for 3-15 % of the speed;

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

Weights are 8-bit (``s8``) on CPUs with VNNI and 7-bit (``s7``, |w| <= 64) on CPUs without it,
whose u8 x s8 products add pairs in int16 and saturate with 8-bit weights
(:mod:`searchsmith.models.int8_cpu`; ``weight_range``, resolved at export, recorded in the
manifest, and re-checked at load).

What each task gets by default (:data:`INT8_DEFAULTS`) was measured on 2 CPU cores against the
fp32 graph (export parity and the ``searchsmith profile`` figures are the checks).

Since 2026-12-01 the embedder and the reranker are ``token``, every block int8, attention
unfused, down-projections int8. Chosen on data the profiles do not use, on a 2-core AVX-512
VNNI CPU: the embedder on three SciFact samples of 1,024 titles, sentences and abstracts
(``../shared/data``; mean top-10 neighbour overlap with SentenceTransformer.encode, min
cosine, texts/s): tensor scheme below 0.932, 0.986, 276; token, no fp32 block 0.942, 0.990,
238 (with smoothed down-projections the same); token, one fp32 block 0.950, 0.989, 222;
tensor with two fp32 blocks and fp32 down-projections 0.942, 0.988, 222. The reranker on demo
seeds 2-4 (40 queries x 30; top-10 overlap / Kendall tau / pairs/s): tensor scheme below
0.958 / 0.940 / 235; token, no fp32 block 0.963 / 0.952 / 228; one block 0.964 / 0.955 / 215;
two 0.971 / 0.960 / 202. Weights as u8 (``QUInt8``) or 7-bit (``reduce_range``) lost 0.01 of
reranker overlap; one call per text instead of 512-token calls gained the embedder 0.003.

The measurements behind the earlier ``tensor`` defaults (AVX2 CPU):

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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from searchsmith.models.config import is_int
from searchsmith.models.errors import ConfigError
from searchsmith.models.int8_cpu import (
    WEIGHT_QMAX,
    WEIGHT_RANGES,
    WeightRange,
    int8_isa,
    resolve_weight_range,
)

log = logging.getLogger(__name__)

DownProjections = Literal["fp32", "smooth", "int8"]
DOWN_PROJECTION_MODES = ("fp32", "smooth", "int8")
Activations = Literal["tensor", "token"]
ACTIVATION_MODES = ("tensor", "token")
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
        activations: how a weight product's input is quantised: ``tensor`` = ONNX Runtime's
            dynamic quantisation (one scale per call, ``DynamicQuantizeMatMul``); ``token`` =
            one symmetric scale per token (:func:`token_products`; attention unfused).
        weight_range: ``s8`` (|w| <= 127), ``s7`` (|w| <= 64: u8 x s8 products cannot saturate
            on CPUs without VNNI, :mod:`searchsmith.models.int8_cpu`) or ``auto`` (``s8`` on a
            CPU with VNNI, ``s7`` otherwise; resolved at export and recorded in the manifest).
    """

    fuse_attention: bool = True
    fp32_blocks: int = 1
    down_projections: DownProjections = "fp32"
    smooth_alpha: float = 0.8
    calibration_inputs: int = 128
    activations: Activations = "tensor"
    weight_range: WeightRange = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.fp32_blocks, int) or isinstance(self.fp32_blocks, bool) or self.fp32_blocks < 0:
            raise ConfigError(f"export --int8-fp32-blocks: expected an int >= 0, got {self.fp32_blocks!r}")
        if self.down_projections not in DOWN_PROJECTION_MODES:
            raise ConfigError(f"export --int8-down-projections: {self.down_projections!r} is not one of "
                              f"{list(DOWN_PROJECTION_MODES)}")
        if not isinstance(self.smooth_alpha, (int, float)) or not 0.0 <= self.smooth_alpha <= 1.0:
            raise ConfigError(f"export --int8-smooth-alpha: expected a number in [0, 1], got {self.smooth_alpha!r} "
                              "(0.8 is the default)")
        if self.activations not in ACTIVATION_MODES:
            raise ConfigError(f"export --int8-activations: {self.activations!r} is not one of {list(ACTIVATION_MODES)}")
        if self.activations == "token" and self.fuse_attention:
            raise ConfigError("export --int8-activations token quantises the attention projections one by one: "
                              "it does not go with --int8-attention fused (use unfused, or --int8-activations "
                              "tensor)")
        if self.weight_range not in WEIGHT_RANGES:
            raise ConfigError(f"export --int8-weight-range: {self.weight_range!r} is not one of "
                              f"{list(WEIGHT_RANGES)}")
        if not isinstance(self.calibration_inputs, int) or not 1 <= self.calibration_inputs <= 4096:
            raise ConfigError(f"export int8 calibration_inputs: expected an int in 1..4096, got "
                              f"{self.calibration_inputs!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def resolved(self) -> Int8Scheme:
        """This scheme with ``weight_range`` ``auto`` made concrete for the instruction set of
        :func:`~searchsmith.models.int8_cpu.int8_isa` (the CPU's, or ``SEARCHSMITH_CPU_INT8``)."""
        if self.weight_range != "auto":
            return self
        return replace(self, weight_range=resolve_weight_range("auto", int8_isa()))


#: Per-task defaults (see the module docstring for the measurements behind them).
INT8_DEFAULTS: dict[str, Int8Scheme] = {
    "embed": Int8Scheme(fuse_attention=False, fp32_blocks=0, down_projections="int8", activations="token"),
    "rerank": Int8Scheme(fuse_attention=False, fp32_blocks=0, down_projections="int8", activations="token"),
    # the reader: its answer hangs on an argmax over windows and spans, so it keeps its first
    # block and its down-projections in fp32. The CPU default reader, 40 demo questions
    # (searchsmith profile read): every block int8 gave 2.24x torch fp32 at answer agreement
    # 0.80; first block fp32 0.925; fp32 down-projections 0.90; both 2.05x at 0.95 (VNNI),
    # 2.00x at 0.975 (AVX2).
    "read": Int8Scheme(fuse_attention=False, fp32_blocks=1, down_projections="fp32", activations="token"),
    "cite": Int8Scheme(fuse_attention=True),
    "images": Int8Scheme(fuse_attention=True),
    "decompose": Int8Scheme(fuse_attention=False),
}


def _shown(name: str, value: Any) -> str:
    if name == "fuse_attention":  # the CLI says --int8-attention fused|unfused
        return "fused" if value else "unfused"
    return str(value)


def int8_default_text(name: str, defaults: dict[str, Int8Scheme] | None = None) -> str:
    """The per-task defaults of the :class:`Int8Scheme` field ``name`` as the CLI help states
    them, from :data:`INT8_DEFAULTS` (so the help cannot contradict the code):
    ``"token for embed, rerank; tensor for cite, images, decompose"``, or one value for all."""
    if name not in {f.name for f in fields(Int8Scheme)}:
        raise KeyError(f"Int8Scheme has no field {name!r}")
    defaults = INT8_DEFAULTS if defaults is None else defaults
    by_value: dict[str, list[str]] = {}
    for task, scheme in defaults.items():
        by_value.setdefault(_shown(name, getattr(scheme, name)), []).append(task)
    if len(by_value) == 1:
        return f"{next(iter(by_value))} for every task"
    return "; ".join(f"{value} for {', '.join(tasks)}" for value, tasks in by_value.items())


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


def transformer_blocks(model_dir: Path) -> int | None:
    """How many transformer blocks the model in ``model_dir`` has (its ``config.json``'s
    ``num_hidden_layers``); None when the folder has no such config (the caller then cannot check)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    n = config.get("num_hidden_layers") if isinstance(config, dict) else None
    return n if is_int(n, 1) else None


def check_fp32_blocks(asked: int | None, model_dir: Path) -> None:
    """Refuse ``--int8-fp32-blocks N`` that covers every block of the model: the quantiser keeps
    no block fp32 then (every block int8), the opposite of what was asked.

    Raises:
        ConfigError: ``asked`` >= the model's block count (named, with the largest N that works).
    """
    blocks = transformer_blocks(model_dir) if asked else None
    if blocks is not None and asked is not None and asked >= blocks:
        raise ConfigError(f"export --int8-fp32-blocks {asked}: the model has {blocks} transformer block(s), and "
                          f"keeping all of them fp32 is not an int8 export; use a value from 0 to {blocks - 1}, "
                          "or --dtype fp32")


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
    """Per-channel (last axis) max |value| of the tensors ``names`` over ``feeds`` (fp32 graph)."""
    return {k: np.maximum(-lo, hi) for k, (lo, hi) in activation_range(model, names, feeds, work).items()}


def activation_range(model: Any, names: list[str], feeds: list[dict[str, np.ndarray]],
                     work: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel (last axis) min and max of the tensors ``names`` over ``feeds`` (fp32 graph).

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
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for f in feeds:
        for name, value in zip(names, sess.run(names, f), strict=True):
            rows = np.asarray(value, dtype=np.float32).reshape(-1, value.shape[-1])
            lo, hi = rows.min(axis=0), rows.max(axis=0)
            out[name] = (lo, hi) if name not in out else (np.minimum(out[name][0], lo), np.maximum(out[name][1], hi))
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


def weight_products(graph: Any) -> list[Any]:
    """The ``MatMul`` nodes whose second input is a 2-D fp32 weight initializer, graph order."""
    from onnx import TensorProto

    inits = {i.name: i for i in graph.initializer}
    return [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in inits
            and len(inits[n.input[1]].dims) == 2 and inits[n.input[1]].data_type == TensorProto.FLOAT]


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)


def token_products(model: Any, nodes: list[Any], weight_range: Literal["s8", "s7"] = "s8") -> int:
    """Per-token int8 for the products ``nodes`` (``y = x @ W``), in place.

    Each token's row of ``x`` (..., K) gets its own scale ``s = max|x| / 127`` and is stored as
    uint8 with zero point 128 (symmetric); ``W`` (K, N) is int8 per output column (scales
    ``w_s = max|W| / q``, ``q`` = 127 for ``s8`` weights, 64 for ``s7`` ones, which CPUs without
    VNNI need: :mod:`searchsmith.models.int8_cpu`). Then ``x @ W = s * ((q - 128) @ W_q) * w_s``: one ``QuantizeLinear`` (per axis),
    one ``MatMulIntegerToFloat`` (com.microsoft) and a ``Mul`` by ``s``; products that share
    an input (Q, K and V) share its quantisation. ONNX Runtime's
    dynamic quantisation gives every token of a call one scale, so a token with large
    activations ([SEP], punctuation, outlier channels) costs the others precision: on the
    MiniLM embedder's 36 products (demo texts, int8 weights both ways) the relative error of
    ``x @ W`` is 1.6 % this way against 3.0 % with one scale per call. (Asymmetric per-token
    ranges, 1.3 %, would need a zero point per row, which ``MatMulInteger`` does not take.)

    Returns:
        How many products were rewritten.
    """
    from onnx import helper, numpy_helper

    if weight_range not in WEIGHT_QMAX:
        raise ConfigError(f"token_products: weight_range {weight_range!r} is not one of {sorted(WEIGHT_QMAX)}")
    qmax = WEIGHT_QMAX[weight_range]
    graph = model.graph
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    opset = _opset(model)
    inits = {i.name: i for i in graph.initializer}
    targets = {id(n) for n in nodes if n.input[1] in inits}

    def const(name: str, value: np.ndarray) -> str:
        graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def axes_node(op: str, inputs: list[str], output: str, name: str, axes: list[int], **attrs: Any) -> Any:
        # ReduceMax takes its axes as an input from opset 18, Unsqueeze from opset 13
        since = 18 if op.startswith("Reduce") else 13
        if opset >= since:
            return helper.make_node(op, [*inputs, const(f"{name}_axes", np.array(axes, np.int64))], [output],
                                    name=name, **attrs)
        return helper.make_node(op, inputs, [output], name=name, axes=axes, **attrs)

    zero = const("searchsmith_tok_zp", np.array(128, np.uint8))
    one = const("searchsmith_tok_one", np.array(1.0, np.float32))
    quantised: dict[str, str] = {}  # product input -> prefix of its quantisation nodes
    new_nodes, done = [], 0
    for node in graph.node:
        if id(node) not in targets:
            new_nodes.append(node)
            continue
        tag = f"searchsmith_tok_{done}"
        weight = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)  # (K, N)
        k, n = weight.shape
        w_scale = np.abs(weight).max(axis=0) / qmax
        w_scale = np.where(w_scale > 0, w_scale, 1.0).astype(np.float32)
        w_q = np.clip(np.round(weight / w_scale), -qmax, qmax).astype(np.int8)
        x, out = node.input[0], node.output[0]
        if x not in quantised:  # products that share an input (Q, K, V) share its quantisation
            qt = f"searchsmith_tokq_{len(quantised)}"
            new_nodes += [
                helper.make_node("Reshape", [x, const(f"{qt}_rows", np.array([-1, k], np.int64))], [f"{qt}_x2"],
                                 name=f"{qt}_rows"),  # (M, K), M = tokens of the call
                helper.make_node("Abs", [f"{qt}_x2"], [f"{qt}_abs"], name=f"{qt}_abs"),
                axes_node("ReduceMax", [f"{qt}_abs"], f"{qt}_max", f"{qt}_max", [1], keepdims=0),  # (M,)
                helper.make_node("Mul", [f"{qt}_max", const(f"{qt}_inv127", np.array(1.0 / 127.0, np.float32))],
                                 [f"{qt}_s0"], name=f"{qt}_s0"),
                helper.make_node("Max", [f"{qt}_s0", const(f"{qt}_eps", np.array(1e-12, np.float32))], [f"{qt}_s"],
                                 name=f"{qt}_s"),
                helper.make_node("Shape", [f"{qt}_s"], [f"{qt}_m"], name=f"{qt}_m"),
                helper.make_node("Expand", [zero, f"{qt}_m"], [f"{qt}_zps"], name=f"{qt}_zps"),
                helper.make_node("QuantizeLinear", [f"{qt}_x2", f"{qt}_s", f"{qt}_zps"], [f"{qt}_q"],
                                 name=f"{qt}_q", axis=0),
                axes_node("Unsqueeze", [f"{qt}_s"], f"{qt}_s1", f"{qt}_s1", [1]),  # (M, 1)
                helper.make_node("Shape", [x], [f"{qt}_xshape"], name=f"{qt}_xshape"),
                helper.make_node("Slice", [f"{qt}_xshape", const(f"{qt}_b0", np.array([0], np.int64)),
                                           const(f"{qt}_b1", np.array([-1], np.int64))], [f"{qt}_lead"],
                                 name=f"{qt}_lead"),
            ]
            quantised[x] = qt
        qt = quantised[x]
        new_nodes += [
            helper.make_node("MatMulIntegerToFloat",
                             [f"{qt}_q", const(f"{tag}_wq", w_q), one, const(f"{tag}_ws", w_scale), zero],
                             [f"{tag}_y0"], name=f"{tag}_matmul", domain="com.microsoft"),  # (M, N)
            helper.make_node("Mul", [f"{tag}_y0", f"{qt}_s1"], [f"{tag}_y1"], name=f"{tag}_scale"),
            helper.make_node("Concat", [f"{qt}_lead", const(f"{tag}_n", np.array([n], np.int64))], [f"{tag}_oshape"],
                             name=f"{tag}_oshape", axis=0),
            helper.make_node("Reshape", [f"{tag}_y1", f"{tag}_oshape"], [out], name=f"{tag}_out"),
        ]
        done += 1
    del graph.node[:]
    graph.node.extend(new_nodes)
    used = {i for nd in graph.node for i in nd.input}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return done


def quantize_int8(src: Path, dst: Path, scheme: Int8Scheme,
                  calibration: list[dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Quantise the fp32 graph ``src`` to ``dst`` following ``scheme`` (a ``weight_range`` of
    ``auto`` is resolved for this CPU: :meth:`Int8Scheme.resolved`).

    Returns:
        What was done: fused attention blocks, smoothed and fp32-kept products (the weight range
        is the manifest's ``int8.weight_range``).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from searchsmith.models.onnx_fusion import fuse_attention_checked

    scheme = scheme.resolved()
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
        per_token = 0
        if scheme.activations == "token":
            per_token = token_products(model, [n for n in weight_products(graph) if n.name not in keep],
                                       scheme.weight_range)
        staged = work / "staged.onnx"
        onnx.save(model, str(staged))
        # what token_products left (attention's activation products, Gemm) gets dynamic int8;
        # reduce_range = weights in [-64, 64], ONNX Runtime's name for the s7 range
        quantize_dynamic(str(staged), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=scheme.weight_range == "s7",
                         op_types_to_quantize=list(WEIGHT_PRODUCTS), nodes_to_exclude=keep)
    return {"fused_attention": int(fused), "smoothed_products": smoothed, "fp32_products": len(keep),
            "fp32_block_products": len(first),
            "down_projections": mode, "activations": scheme.activations, "per_token_products": per_token}


__all__ = ["ACTIVATION_MODES", "DOWN_PROJECTION_MODES", "INT8_DEFAULTS", "WEIGHT_PRODUCTS", "Int8Scheme",
           "activation_max", "activation_range", "int8_default_text", "token_products", "weight_products",
           "check_fp32_blocks", "down_projections", "first_blocks_matmuls", "quantize_int8", "smooth_products",
           "transformer_blocks"]
