"""Which int8 instructions this CPU has, and int8 weights that are exact on every x86 CPU.

ONNX Runtime's int8 products (MLAS) multiply uint8 activations by int8 weights (u8 x s8):

- with **VNNI** (AVX-512 VNNI, AVX-VNNI; AMX CPUs have AVX-512 VNNI too) ``vpdpbusd``
  multiplies four u8 x s8 pairs and adds them straight into int32: exact;
- **without VNNI** (AVX2, AVX-512 without VNNI, SSE4.1) ``vpmaddubsw`` multiplies adjacent
  pairs and adds each pair into **int16 with saturation**; ``vpmaddwd`` then adds int16 pairs
  into int32 (exact). Activations reach 255 (uint8; the per-token scheme's zero point is 128)
  and full-range weights 127, so a pair reaches 2 x 255 x 127 = 64,770 > 32,767 and is clipped
  without a word: on an AVX2 CPU the per-token embedder's products came out 1486.28 where
  1803.07 was right.

The fix used here: on CPUs without VNNI the weights use 7 bits, ``|w| <= 64``, so a pair is at
most 2 x 255 x 64 = 32,640 <= 32,767 and cannot saturate (the range ONNX Runtime's own
``reduce_range`` uses, and the one its ``Avx2WeightS8ToU8Transformer`` leaves alone). u8 x u8
products would also be exact (MLAS widens them to int16 before multiplying) but take a slower
kernel; 7-bit weights keep the fast one at the cost of one bit of weight precision, which is
why CPUs with VNNI keep full-range weights (the defaults were measured there).

- At **export** (:func:`resolve_weight_range`): ``auto`` is ``s8`` on a CPU with VNNI, ``s7``
  otherwise; the manifest records the range and the instruction set (``int8.weight_range``,
  ``int8.exported_on``).
- At **load** (``load_bundle``): a bundle with ``s8`` weights on a CPU without VNNI has its
  weights re-quantised to 7 bits in memory (:func:`requantize_s7`: ``w7 = round(w8 / 2)``,
  scale x 2) before ONNX Runtime sees it, and the session also asks ONNX Runtime for its exact
  u8 x u8 kernel (``session.x64quantprecision``) for any int8 weight beyond 7 bits left over
  (it converts only those, so this costs nothing when every weight fits).

``SEARCHSMITH_CPU_INT8`` overrides the detected instruction set (``avx2``, ``avx512_vnni``,
``avx_vnni``, ``avx512``, ``amx``, ``neon`` or ``other``), for tests and for exporting a
bundle meant for another kind of CPU.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
from searchsmith.models.errors import ConfigError

log = logging.getLogger(__name__)

#: Environment variable that overrides the detected int8 instruction set.
INT8_ISA_ENV = "SEARCHSMITH_CPU_INT8"

#: The widest int8 dot-product instructions a CPU flag names, best first: int8 ONNX speed
#: depends on them (VNNI multiplies and adds u8 x s8 in one instruction; AVX2 needs three).
_INT8_ISAS = (("amx_int8", "AMX"), ("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"),
              ("avx512bw", "AVX-512"), ("avx2", "AVX2"), ("neon", "NEON"), ("asimd", "NEON"))

#: Instruction sets whose u8 x s8 products add into int32 without an int16 step. Arm's
#: kernels (NEON) widen before adding; only x86 without VNNI goes through ``vpmaddubsw``.
#: An unknown CPU counts as saturating: 7-bit weights are correct everywhere.
EXACT_U8S8_ISAS = frozenset({"AMX", "AVX-512 VNNI", "AVX-VNNI", "NEON"})

WeightRange = Literal["auto", "s8", "s7"]
WEIGHT_RANGES = ("auto", "s8", "s7")
#: Largest |weight| of each range: s8 = symmetric int8, s7 = 7 bits (2 x 255 x 64 <= 32,767).
WEIGHT_QMAX = {"s8": 127, "s7": 64}

#: int8 ops whose weight input meets a uint8 activation in MLAS, with the input positions of
#: (weight, weight scale, weight zero point); ``None``: the scale is applied after the op.
WEIGHT_INPUTS: dict[str, tuple[int, int | None, int]] = {
    "MatMulIntegerToFloat": (1, 3, 5),
    "DynamicQuantizeMatMul": (1, 2, 3),
    "QAttention": (1, 4, 7),
    "MatMulInteger": (1, None, 3),
    "QGemm": (3, 4, 5),
    "QLinearMatMul": (3, 4, 5),
    "QLinearConv": (3, 4, 5),
}


def _flag_key(value: str) -> str:
    return re.sub(r"[^a-z0-9]", "", value.lower())


#: What ``SEARCHSMITH_CPU_INT8`` accepts (any case, with or without ``_``/``-``/spaces): the
#: instruction set names and their cpuinfo flags; ``other`` is a CPU with none of them.
ISA_NAMES: dict[str, str | None] = {
    **{_flag_key(flag): name for flag, name in _INT8_ISAS},
    **{_flag_key(name): name for _, name in _INT8_ISAS},
    "avx512": "AVX-512", "other": None, "none": None,
}


def cpu_int8_isa(flags: str | None = None) -> str | None:
    """The CPU's best int8 instruction set (``"AVX-512 VNNI"``, ``"AVX2"``, ...), from the
    ``flags`` (x86) or ``Features`` (Arm) line of ``/proc/cpuinfo``; ``None`` when unknown.

    This is what the CPU has; :func:`int8_isa` is what int8 export and loading assume.
    """
    if flags is None:
        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
        except OSError:
            return None
        flags = next((ln.split(":", 1)[1] for ln in lines if ln.split(":", 1)[0].strip() in ("flags", "Features")), "")
    have = set(flags.split())
    return next((name for flag, name in _INT8_ISAS if flag in have), None)


def int8_isa() -> str | None:
    """The instruction set int8 export and loading plan for: ``SEARCHSMITH_CPU_INT8`` when set,
    else the CPU's (:func:`cpu_int8_isa`).

    Raises:
        ConfigError: ``SEARCHSMITH_CPU_INT8`` names no known instruction set.
    """
    forced = os.environ.get(INT8_ISA_ENV, "").strip()
    if not forced:
        return cpu_int8_isa()
    key = _flag_key(forced)
    if key not in ISA_NAMES:
        choices = sorted({"amx", "avx512_vnni", "avx_vnni", "avx512", "avx2", "neon", "other"})
        raise ConfigError(f"{INT8_ISA_ENV}={forced!r} is not an int8 instruction set; use one of {choices} "
                          "or unset it to detect the CPU's")
    return ISA_NAMES[key]


def exact_u8s8(isa: str | None) -> bool:
    """Whether ``isa``'s u8 x s8 products are exact for full-range (8-bit) weights."""
    return isa in EXACT_U8S8_ISAS


def resolve_weight_range(weight_range: str, isa: str | None) -> Literal["s8", "s7"]:
    """``auto`` -> ``s8`` on a CPU whose u8 x s8 products are exact, ``s7`` otherwise."""
    if weight_range not in WEIGHT_RANGES:
        raise ConfigError(f"export --int8-weight-range: {weight_range!r} is not one of {list(WEIGHT_RANGES)}")
    if weight_range == "auto":
        return "s8" if exact_u8s8(isa) else "s7"
    return weight_range  # type: ignore[return-value]


def int8_cpu_report() -> dict[str, Any]:
    """What int8 ran on, for parity reports and bundle load info: the instruction set assumed,
    the CPU's own, whether ``SEARCHSMITH_CPU_INT8`` forced it, and whether full-range weights
    are exact there."""
    isa, cpu = int8_isa(), cpu_int8_isa()
    return {"isa": isa, "cpu": cpu, "forced": os.environ.get(INT8_ISA_ENV, "").strip() or None,
            "exact_u8s8": exact_u8s8(isa)}


def weight_inputs(graph: Any) -> list[tuple[Any, int, int | None, int]]:
    """The int8 weight products of ``graph``: ``(node, weight, scale, zero point)`` input positions,
    for nodes in :data:`WEIGHT_INPUTS` whose weight is an int8 initializer."""
    from onnx import TensorProto

    inits = {i.name: i for i in graph.initializer}
    out = []
    for node in graph.node:
        spec = WEIGHT_INPUTS.get(node.op_type)
        if spec is None or len(node.input) <= spec[0]:
            continue
        w = inits.get(node.input[spec[0]])
        if w is not None and w.data_type == TensorProto.INT8:
            out.append((node, *spec))
    return out


def max_abs_int8_weight(model: Any) -> int:
    """Largest |int8 weight| of the graph's weight products (0 without any): > 64 means the
    graph's u8 x s8 products can saturate on a CPU without VNNI."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    worst = 0
    for node, wi, _, _ in weight_inputs(model.graph):
        w = numpy_helper.to_array(inits[node.input[wi]]).astype(np.int32)
        worst = max(worst, int(np.abs(w).max()) if w.size else 0)
    return worst


def _matmulinteger_scale(node: Any, consumers: dict[str, list[Any]], producer: dict[str, Any],
                         inits: dict[str, Any]) -> tuple[Any, int] | None:
    """Where a ``MatMulInteger``'s weight scale enters (ONNX Runtime's dynamic quantisation:
    ``MatMulInteger -> Cast -> Mul(., a_scale * w_scale)``, the scales multiplied by a ``Mul``
    of an activation scale and the weight scale initializer): ``(node, input index)``, or
    ``None`` for another layout."""
    cast = consumers.get(node.output[0], [])
    if len(cast) != 1 or cast[0].op_type != "Cast":
        return None
    mul = consumers.get(cast[0].output[0], [])
    if len(mul) != 1 or mul[0].op_type != "Mul":
        return None
    other = next((i for i in mul[0].input if i != cast[0].output[0]), None)
    if other in inits:
        return mul[0], list(mul[0].input).index(other)
    scales = producer.get(other)
    if scales is None or scales.op_type != "Mul" or len(consumers.get(other, [])) != 1:
        return None
    at = [k for k, i in enumerate(scales.input) if i in inits]
    return (scales, at[0]) if len(at) == 1 else None


def requantize_s7(model: Any) -> int:
    """Re-quantise, in place, the int8 weights beyond 7 bits to ``w7 = round(w8 / 2)`` with twice
    the scale, so that no u8 x s8 product can saturate on a CPU without VNNI.

    The weights and scales are new initializers (``<name>_s7``, ``<name>_x2``) wired into the
    nodes that use them, so an initializer shared with another node is never changed under it.
    A weight with a non-zero zero point (asymmetric) or a scale that is not an initializer is
    left alone and logged: ONNX Runtime's exact kernel (``session.x64quantprecision``) covers it.

    Returns:
        How many products were re-quantised.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    producer = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
        for o in n.output:
            producer[o] = n
    new_weights: dict[str, str] = {}
    new_scales: dict[str, str] = {}
    done = 0

    def doubled(name: str) -> str:
        if name not in new_scales:
            scale = numpy_helper.to_array(inits[name])
            new_scales[name] = f"{name}_x2"
            graph.initializer.append(numpy_helper.from_array((scale * 2).astype(scale.dtype), new_scales[name]))
        return new_scales[name]

    for node, wi, si, zi in weight_inputs(graph):
        name = node.input[wi]
        w = numpy_helper.to_array(inits[name])
        if w.size == 0 or int(np.abs(w.astype(np.int32)).max()) <= WEIGHT_QMAX["s7"]:
            continue
        zp = node.input[zi] if len(node.input) > zi else ""
        if zp and (zp not in inits or numpy_helper.to_array(inits[zp]).any()):
            log.info("int8: %s %s has an asymmetric weight; left to ONNX Runtime's exact kernel",
                     node.op_type, node.name)
            continue
        if si is None:
            where = _matmulinteger_scale(node, consumers, producer, inits)
        else:
            where = (node, si) if len(node.input) > si and node.input[si] in inits else None
        if where is None:
            log.info("int8: %s %s has no weight scale initializer; left to ONNX Runtime's exact kernel",
                     node.op_type, node.name)
            continue
        if name not in new_weights:
            w7 = np.clip(np.round(w.astype(np.float32) / 2), -WEIGHT_QMAX["s7"], WEIGHT_QMAX["s7"]).astype(np.int8)
            new_weights[name] = f"{name}_s7"
            graph.initializer.append(numpy_helper.from_array(w7, new_weights[name]))
        node.input[wi] = new_weights[name]
        scale_node, at = where
        scale_node.input[at] = doubled(scale_node.input[at])
        done += 1
    if done:
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        keep = [i for i in graph.initializer if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    return done


__all__ = ["EXACT_U8S8_ISAS", "INT8_ISA_ENV", "ISA_NAMES", "WEIGHT_INPUTS", "WEIGHT_QMAX", "WEIGHT_RANGES",
           "cpu_int8_isa", "exact_u8s8", "int8_cpu_report", "int8_isa", "max_abs_int8_weight", "requantize_s7",
           "resolve_weight_range", "weight_inputs"]
