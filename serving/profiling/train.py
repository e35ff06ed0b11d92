"""``searchsmith profile train``: one training step of the default encoder, by AdamW kernel.

The trainer (``training/trainer.py``) runs AdamW; torch offers three kernels for the same
update rule: the per-tensor loop (torch's default on a CPU), ``foreach`` (one op per kind
over all tensors) and ``fused`` (one vectorised pass, what :func:`~searchsmith.training.
trainer.make_optimizer` picks). This suite times, on all-MiniLM-L6-v2 (every weight
trainable, as in the reader and reranker recipes):

* the optimizer step alone, per kernel (interleaved rounds, best time);
* a whole step (forward and backward of a batch of 8 x 128 tokens, then the optimizer
  step), per kernel, so that the optimizer's share of a training step is visible;
* the largest difference between the weights each kernel leaves after the same steps from
  the same start (the kernels must agree to float rounding).

``--quick``: 3 rounds instead of 10. ``--device cuda`` times it on the GPU.
``SEARCHSMITH_PROFILE_TINY=1`` (the test's run): a batch of 2 x 16 tokens, one round.
"""

from __future__ import annotations

import argparse
import copy
import os
from typing import Any

from searchsmith.serving.profiling.common import ProfileContext, interleaved_best

KERNELS: dict[str, dict[str, bool]] = {
    "loop": {"foreach": False, "fused": False},
    "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True},
}
BATCH, TOKENS = 8, 128


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoModel

    device = "cuda" if ctx.device == "cuda" or (ctx.device == "auto" and torch.cuda.is_available()) else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tiny = os.environ.get("SEARCHSMITH_PROFILE_TINY") == "1"
    rounds = 1 if tiny else 3 if ctx.quick else 10
    batch, tokens = (2, 16) if tiny else (BATCH, TOKENS)
    torch.manual_seed(0)
    base = AutoModel.from_pretrained(resolve_model("default"), add_pooling_layer=False).to(device).train()
    ids = torch.randint(1000, 20000, (batch, tokens), device=device)
    mask = torch.ones_like(ids)

    def backward(model: Any) -> None:
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        out.pow(2).mean().backward()

    models, opts = {}, {}
    for name, kw in KERNELS.items():
        models[name] = copy.deepcopy(base)
        opts[name] = torch.optim.AdamW(models[name].parameters(), lr=1e-4, weight_decay=0.01, **kw)
        torch.manual_seed(1)
        backward(models[name])  # the same gradients for every kernel

    def opt_step(name: str) -> Any:
        def fn() -> None:
            opts[name].step()
            sync()
        return fn

    def train_step(name: str) -> Any:
        def fn() -> None:
            opts[name].zero_grad(set_to_none=True)
            backward(models[name])
            opts[name].step()
            sync()
        return fn

    # the optimizer alone first, on the gradients of the same batch: then compare the weights
    _, best_opt = interleaved_best({name: opt_step(name) for name in KERNELS}, rounds)
    ref = dict(models["loop"].named_parameters())
    max_diff = {name: max(float((p.detach() - ref[k].detach()).abs().max()) for k, p in models[name].named_parameters())
                for name in KERNELS}
    _, best_step = interleaved_best({name: train_step(name) for name in KERNELS}, rounds)
    params = sum(p.numel() for p in base.parameters())
    summary: dict[str, Any] = {"suite": "train", "summary": True, "device": device, "threads": torch.get_num_threads(),
                               "parameters": params, "batch": batch, "tokens": tokens, "rounds": rounds}
    for name in KERNELS:
        row = {"suite": "train", "kernel": name, "device": device,
               "optimizer_step_ms": round(best_opt[name] * 1000, 2),
               "train_step_ms": round(best_step[name] * 1000, 2),
               "optimizer_share": round(best_opt[name] / best_step[name], 3),
               "speedup_vs_loop": round(best_step["loop"] / best_step[name], 3),
               "optimizer_speedup_vs_loop": round(best_opt["loop"] / best_opt[name], 3),
               "max_abs_weight_diff_vs_loop": max_diff[name]}
        ctx.emit(row)
        summary[f"{name}_optimizer_step_ms"] = row["optimizer_step_ms"]
        summary[f"{name}_train_step_ms"] = row["train_step_ms"]
    ctx.emit(summary)


__all__ = ["KERNELS", "run"]
