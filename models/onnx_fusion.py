"""Attention fusion for dynamo-exported BERT graphs (what ONNX Runtime's optimizer misses).

ONNX Runtime's transformer optimizer (``onnxruntime.transformers.optimizer``) fuses BERT
self-attention into one ``com.microsoft.Attention`` node only when the padding mask is built
the way the TorchScript exporter used to build it. transformers 5 traced by
``torch.onnx.export(dynamo=True)`` builds it with Range / GatherND / Where, so on our graphs
the optimizer fuses the GELUs and nothing else. :func:`fuse_attention` matches each block by
the attention itself and ignores how the mask was made::

    x -> MatMul(Wq) + bq -> Reshape -> Transpose(0,2,1,3) ---------------\
    x -> MatMul(Wk) + bk -> Reshape -> Transpose(0,2,3,1) -> MatMul(q, k^T) -> Mul(scale)
                                                               -> Add(mask) -> Softmax --\
    x -> MatMul(Wv) + bv -> Reshape -> Transpose(0,2,1,3) ----------------------> MatMul(p, v)
         -> Transpose(0,2,1,3) -> Reshape (B, S, hidden)

becomes ``Attention(x, [Wq|Wk|Wv], [bq|bk|bv], attention_mask as int32)`` with the heads
read from the Reshape and the scale from the Mul (or Div). The additive mask of the original
graph is *not* checked to be a padding mask, so a caller must compare the fused graph with
the original on padded inputs (:func:`fused_max_abs`) and keep the original on a mismatch
(a causal or otherwise unusual mask): :func:`fuse_attention_checked` does both.

Why: ``quantize_dynamic`` turns ``Attention`` into ``QAttention`` (one int8 product for Q, K
and V, and ONNX Runtime's own attention kernel). On the MiniLM embedder (2 cores, 512 mixed
demo texts, batches of 32) int8 went from 6.26 s to 5.03 s at the same agreement (min cosine
0.993 against fp32); fp32 alone did not get faster (6.79 s vs 6.95 s), so only the int8
conversion fuses.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Inputs a text encoder graph may take; a graph with any other input is not probed or fused.
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: The most a fused graph may differ from the original on the padded probe batch.
FUSION_MAX_ABS = 1e-4
_MASK_INT32 = "searchsmith_attention_mask_int32"


def _perm(node: Any) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


class _Graph:
    """Producer / consumer maps and constant values of one ONNX graph."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.values: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.values[node.output[0]] = numpy_helper.to_array(attr.t)
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)

    def made_by(self, name: str, op: str) -> Any:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op else None

    def only_consumer(self, name: str, op: str) -> Any:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op else None

    def projection(self, name: str, perm: list[int]) -> dict[str, Any] | None:
        """``Transpose(perm) <- Reshape <- Add(bias) <- MatMul(x, W)`` ending at ``name``."""
        tr = self.made_by(name, "Transpose")
        if tr is None or _perm(tr) != perm:
            return None
        rs = self.made_by(tr.input[0], "Reshape")
        add = self.made_by(rs.input[0], "Add") if rs is not None else None
        if add is None:
            return None
        for a, b in ((0, 1), (1, 0)):
            mm = self.made_by(add.input[a], "MatMul")
            if mm is not None and add.input[b] in self.values and mm.input[1] in self.values:
                w, bias = self.values[mm.input[1]], self.values[add.input[b]]
                if w.ndim == 2 and bias.ndim == 1 and bias.shape[0] == w.shape[1]:
                    return {"x": mm.input[0], "w": w, "b": bias, "reshape": rs}
        return None

    def heads(self, reshape: Any, hidden: int) -> int | None:
        """Number of heads from the (B, S, heads, head_size) target of a projection's Reshape."""
        shape = self.values.get(reshape.input[1])
        dims: list[np.ndarray | None]
        if shape is not None and shape.size == 4:
            dims = [np.array(d) for d in shape.reshape(-1)]
        else:
            cat = self.made_by(reshape.input[1], "Concat")
            if cat is None or len(cat.input) != 4:
                return None
            dims = [self.values.get(x) for x in cat.input]
        n, d = dims[2], dims[3]
        heads = int(n.reshape(-1)[0]) if n is not None else -1
        if heads <= 0 and d is not None and int(d.reshape(-1)[0]) > 0:
            heads = hidden // int(d.reshape(-1)[0])
        return heads if heads > 0 and hidden % heads == 0 else None


def fuse_attention(model: Any) -> int:
    """Replace each matched self-attention block of ``model`` (in place) by ``Attention``.

    Only graphs with an ``attention_mask`` input are touched. Returns the number of blocks
    fused (0: the model is unchanged).
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if "attention_mask" not in {i.name for i in graph.input}:
        return 0
    g = _Graph(graph)
    replace: dict[str, Any] = {}  # output Reshape's name -> Attention node
    weights: list[Any] = []
    for sm in [n for n in graph.node if n.op_type == "Softmax"]:
        masked = g.made_by(sm.input[0], "Add")
        if masked is None:
            continue
        # The scores are the side of the Add made by MatMul -> Mul/Div(scalar); the other is the mask.
        qk, scale = None, 1.0
        for x in masked.input:
            scaled = g.producer.get(x)
            if scaled is None or scaled.op_type not in ("Mul", "Div") or scaled.input[1] not in g.values:
                continue
            s = g.values[scaled.input[1]]
            if s.size == 1 and g.made_by(scaled.input[0], "MatMul") is not None:
                qk = g.made_by(scaled.input[0], "MatMul")
                scale = float(s.reshape(())) if scaled.op_type == "Mul" else 1.0 / float(s.reshape(()))
                break
        av = g.only_consumer(sm.output[0], "MatMul")
        if qk is None or av is None:
            continue
        q = g.projection(qk.input[0], [0, 2, 1, 3])
        k = g.projection(qk.input[1], [0, 2, 3, 1])
        v = g.projection(av.input[1], [0, 2, 1, 3])
        if q is None or k is None or v is None or not q["x"] == k["x"] == v["x"]:
            continue
        back = g.only_consumer(av.output[0], "Transpose")
        out = g.only_consumer(back.output[0], "Reshape") if back is not None and _perm(back) == [0, 2, 1, 3] else None
        hidden = q["w"].shape[1]
        heads = g.heads(q["reshape"], hidden)
        if out is None or heads is None or not (q["w"].shape == k["w"].shape == v["w"].shape):
            continue
        i = len(replace)
        w = np.concatenate([q["w"], k["w"], v["w"]], axis=1).astype(np.float32)  # (hidden_in, 3 * hidden)
        b = np.concatenate([q["b"], k["b"], v["b"]]).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"searchsmith_attention_{i}_qkv_weight"),
                    numpy_helper.from_array(b, f"searchsmith_attention_{i}_qkv_bias")]
        replace[out.name] = helper.make_node(
            "Attention", [q["x"], weights[-2].name, weights[-1].name, _MASK_INT32], [out.output[0]],
            name=f"searchsmith_attention_{i}", domain="com.microsoft", num_heads=heads, scale=scale)
    if not replace:
        return 0
    nodes = [helper.make_node("Cast", ["attention_mask"], [_MASK_INT32], to=TensorProto.INT32,
                              name="searchsmith_attention_mask_cast")]
    nodes += [replace.get(n.name, n) for n in graph.node]
    graph.initializer.extend(weights)
    _drop_dead(graph, nodes)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(replace)


def _drop_dead(graph: Any, nodes: list[Any]) -> None:
    """Set ``graph``'s nodes to ``nodes`` less those whose outputs nobody reads; same for weights."""
    outputs = {o.name for o in graph.output}
    while True:
        used = {x for n in nodes for x in n.input} | outputs
        live = [n for n in nodes if any(o in used for o in n.output)]
        if len(live) == len(nodes):
            break
        nodes = live
    del graph.node[:]
    graph.node.extend(nodes)
    used = {x for n in nodes for x in n.input}
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def probe_feeds(model: Any, batch: int = 3, seq: int = 11) -> dict[str, np.ndarray] | None:
    """A padded batch for a text encoder graph (rows 1.. shorter), or None for other graphs."""
    names = [i.name for i in model.graph.input]
    if not names or not set(names) <= set(TEXT_INPUTS):
        return None
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), dtype=np.int64)
    for row in range(1, batch):
        mask[row, seq - 3 * row:] = 0
    feeds = {"input_ids": rng.integers(5, 100, (batch, seq)).astype(np.int64) * mask,
             "attention_mask": mask, "token_type_ids": np.zeros((batch, seq), dtype=np.int64)}
    return {n: feeds[n] for n in names}


def fused_max_abs(original: Path, fused: Path, feeds: dict[str, np.ndarray]) -> float:
    """Largest |difference| of any output of the two graphs on ``feeds`` (ONNX Runtime, CPU)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    outs = []
    for path in (original, fused):
        sess = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, feeds))
    return max(float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())
               for a, b in zip(*outs, strict=True))


def fuse_attention_checked(src: Path, dst: Path) -> int:
    """Write ``src`` with fused attention to ``dst`` when the fusion matched and checks out.

    Returns the number of fused blocks; 0 means nothing was written (no match, not a text
    encoder, or the fused graph differed from ``src`` by more than :data:`FUSION_MAX_ABS` on a
    padded probe batch).
    """
    import onnx

    model = onnx.load(str(src))
    feeds = probe_feeds(model)
    if feeds is None:
        return 0
    fused = fuse_attention(model)
    if not fused:
        return 0
    onnx.save(model, str(dst))
    diff = fused_max_abs(src, dst, feeds)
    if not diff <= FUSION_MAX_ABS:
        log.warning("export: fused attention of %s differs by %.2e (> %.0e) on a padded probe; "
                    "keeping the unfused graph", src.name, diff, FUSION_MAX_ABS)
        dst.unlink()
        return 0
    return fused
