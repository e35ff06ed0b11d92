"""Attention fusion (models/onnx_fusion.py) on the tiny exported graphs, and its guard."""

from __future__ import annotations

import numpy as np
import onnx
from export_fixtures import bundle
from onnx import numpy_helper
from searchsmith.models.onnx_fusion import (
    FUSION_MAX_ABS,
    fuse_attention,
    fuse_attention_checked,
    fused_max_abs,
    probe_feeds,
)


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_fused_encoders_match_the_originals_on_padded_batches(tmp_path) -> None:
    for task, graph in (("embed", "model"), ("rerank", "model"), ("cite", "tagger"), ("cite", "scorer")):
        src = bundle(task, "fp32") / f"{graph}.onnx"
        assert "Softmax" in _ops(src)
        dst = tmp_path / f"{task}-{graph}.onnx"
        assert fuse_attention_checked(src, dst) == 1, (task, graph)  # the tiny models have 1 block
        ops = _ops(dst)
        assert ops.count("Attention") == 1 and "Softmax" not in ops
        model = onnx.load(str(dst))
        (node,) = [n for n in model.graph.node if n.op_type == "Attention"]
        assert onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "num_heads")) == 2
        # rows of different lengths; a wrong mask or scale would move the padded rows
        for seq in (1, 5, 40):
            feeds = probe_feeds(model, batch=4, seq=seq)
            assert fused_max_abs(src, dst, feeds) <= 1e-5, (task, graph, seq)


def test_graphs_other_than_text_encoders_are_left_alone(tmp_path) -> None:
    # The decomposer's encoder is traced with SDPA attention (scale on q and k, a NaN guard
    # after the softmax): not the eager pattern, so it stays as exported.
    enc = bundle("decompose", "fp32") / "encoder.onnx"
    assert probe_feeds(onnx.load(str(enc))) is not None
    assert fuse_attention_checked(enc, tmp_path / "e.onnx") == 0
    dec = bundle("decompose", "fp32") / "decoder.onnx"  # causal self-attention + cross-attention
    assert probe_feeds(onnx.load(str(dec))) is None
    assert fuse_attention_checked(dec, tmp_path / "d.onnx") == 0 and not (tmp_path / "d.onnx").exists()
    vision = bundle("images", "fp32") / "vision.onnx"
    assert fuse_attention_checked(vision, tmp_path / "v.onnx") == 0


def test_a_fusion_that_changes_the_output_is_discarded(tmp_path) -> None:
    """A causal mask in place of the padding mask: the fused graph would ignore it, so the
    probe comparison must catch it and keep the original."""
    src = bundle("embed", "fp32") / "model.onnx"
    model = onnx.load(str(src))
    seq = 11  # probe_feeds' default length
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax"]
    masked = next(n for n in model.graph.node if softmax.input[0] in n.output)
    producers = {o: n for n in model.graph.node for o in n.output}
    mask_side = next(i for i, x in enumerate(masked.input) if producers[x].op_type not in ("Mul", "Div"))
    causal = np.triu(np.full((seq, seq), -1e9, dtype=np.float32), k=1)[None, None]
    model.graph.initializer.append(numpy_helper.from_array(causal, "causal_mask"))
    masked.input[mask_side] = "causal_mask"
    bad = tmp_path / "causal.onnx"
    onnx.save(model, str(bad))
    assert fuse_attention(onnx.load(str(bad))) == 1  # the pattern still matches ...
    assert fuse_attention_checked(bad, tmp_path / "fused.onnx") == 0  # ... the check refuses it
    assert not (tmp_path / "fused.onnx").exists()
    assert FUSION_MAX_ABS <= 1e-4


def test_int8_conversion_quantises_the_fused_attention(tmp_path) -> None:
    from searchsmith.models.export import convert_graph
    from searchsmith.models.onnx_quant import Int8Scheme

    graphs = [("rerank", "model"), ("cite", "scorer"), ("cite", "tagger")]
    for task, graph in graphs:
        done = convert_graph(bundle(task, "fp32") / f"{graph}.onnx", tmp_path / f"{task}-{graph}.onnx", "int8",
                             Int8Scheme(fuse_attention=True, fp32_blocks=0))
        assert done["fused_attention"] == 1 and done["down_projections"] == "fp32"
        dst = tmp_path / f"{task}-{graph}.onnx"
        ops = _ops(dst)
        assert ops.count("QAttention") == 1 and "Softmax" not in ops, (task, graph)
    # the fused fp32 graph made on the way is not left beside the result
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{t}-{g}.onnx" for t, g in graphs)
