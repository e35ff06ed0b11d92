"""``searchsmith profile train``: one training step of the default encoder, by AdamW kernel.

The trainer (``training/trainer.py``) runs AdamW; torch offers three kernels for the same
update rule: the per-tensor loop (torch's default on a CPU), ``foreach`` (one op per kind
over all tensors) and ``fused`` (one vectorised pass, what :func:`~searchsmith.training.
trainer.make_optimizer` picks). This suite times, on all-MiniLM-L6-v2 (every weight
trainable, as in the reader and reranker recipes), whole training steps (forward and
backward of a batch of 8 x 128 tokens, then the optimizer step) of each kernel, one warm-up
step each, then interleaved rounds (``timing.interleave``). Inside each step the optimizer
step is timed too, so a row's figures come from one and the same step (its fastest):

* ``train_step_ms`` = ``forward_backward_ms`` + ``optimizer_step_ms`` (the optimizer's
  share is in [0, 1] by construction);
* ``speedup_vs_loop`` = ``loop_train_step_ms / train_step_ms`` and
  ``optimizer_speedup_vs_loop`` = ``loop_optimizer_step_ms / optimizer_step_ms``, both
  times in the row (:func:`check_row` enforces these identities before a row is written);
* ``optimizer_bound_speedup_vs_loop``: the step speedup the optimizer alone explains, loop's
  step with its optimizer time replaced by this kernel's. The forward and backward are the
  same work for every kernel; where they took more than ``FB_TOLERANCE`` longer or shorter
  than loop's, ``noise`` says the speedup beyond (or short of) that bound is the machine's.

It also reports the largest difference between the weights each kernel leaves after one step
from the same start on the same gradients (the kernels must agree to float rounding).

(The optimizer timed alone in one measurement and the steps in another, minutes apart, gave
shares above 1 and step speedups its optimizer could not explain on a loaded machine.)

``--quick``: 3 rounds instead of 10. ``--device cuda`` times it on the GPU (refused without
CUDA). ``SEARCHSMITH_PROFILE_TINY=1`` (the test's run): a batch of 2 x 16 tokens, one round.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import time
from typing import Any

from searchsmith.serving.profiling.common import ProfileContext
from searchsmith.serving.profiling.timing import interleave, resolve_device

KERNELS: dict[str, dict[str, bool]] = {
    "loop": {"foreach": False, "fused": False},
    "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True},
}
BATCH, TOKENS = 8, 128
# forward + backward of a kernel's fastest step within this share of loop's: same work, no noise note
FB_TOLERANCE = 0.05


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    device = resolve_device("train", ctx.device)  # before the model is loaded
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoModel

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
    # agreement: one step of each kernel from the same weights on the same gradients (untimed)
    for name in KERNELS:
        opts[name].step()
    ref = dict(models["loop"].named_parameters())
    max_diff = {name: max(float((p.detach() - ref[k].detach()).abs().max()) for k, p in models[name].named_parameters())
                for name in KERNELS}

    def train_step(name: str) -> Any:
        def fn() -> float:
            """One whole step; returns the seconds of its optimizer step (timed inside it)."""
            opts[name].zero_grad(set_to_none=True)
            backward(models[name])
            sync()
            t0 = time.perf_counter()
            opts[name].step()
            sync()
            return time.perf_counter() - t0
        return fn

    timed = interleave({name: train_step(name) for name in KERNELS}, rounds, keep_returns=True)
    steps = {}
    for name in KERNELS:  # each kernel's fastest step, and the optimizer time of that same step
        i = timed.best_round(name)
        steps[name] = (timed.samples[name][i] * 1000, timed.returns[name][i] * 1000)
    params = sum(p.numel() for p in base.parameters())
    summary: dict[str, Any] = {"suite": "train", "summary": True, "device": device, "threads": torch.get_num_threads(),
                               "parameters": params, "batch": batch, "tokens": tokens, "rounds": rounds}
    for name in KERNELS:
        row = step_row(name, steps[name], steps["loop"])
        row.update({"suite": "train", "device": device, "rounds": rounds,
                    "max_abs_weight_diff_vs_loop": max_diff[name]})
        problems = check_row(row)
        if problems:  # a bug in this suite, not the machine: never write such a row
            raise RuntimeError(f"profile train: inconsistent row for {name}: {'; '.join(problems)}")
        ctx.emit(row)
        for key in ("optimizer_step_ms", "train_step_ms", "speedup_vs_loop"):
            summary[f"{name}_{key}"] = row[key]
        if row.get("noise"):
            summary[f"{name}_noise"] = row["noise"]
    ctx.emit(summary)


def step_row(name: str, step: tuple[float, float], loop: tuple[float, float]) -> dict[str, Any]:
    """The figures of ``name``'s step against loop's, every ratio from the times in the row.

    Args:
        name: the kernel.
        step: ``(train_step_ms, optimizer_step_ms)`` of one step of ``name``.
        loop: the same of loop's step.
    """
    total, opt = step
    loop_total, loop_opt = loop
    fb, loop_fb = total - opt, loop_total - loop_opt
    row: dict[str, Any] = {
        "kernel": name, "train_step_ms": total, "optimizer_step_ms": opt, "forward_backward_ms": fb,
        "loop_train_step_ms": loop_total, "loop_optimizer_step_ms": loop_opt,
        "optimizer_share": opt / total,
        "speedup_vs_loop": loop_total / total,
        "optimizer_speedup_vs_loop": loop_opt / opt,
        # loop's step with only its optimizer replaced by this kernel's
        "optimizer_bound_speedup_vs_loop": loop_total / (loop_fb + opt),
        "forward_backward_vs_loop": fb / loop_fb,
    }
    if abs(fb / loop_fb - 1) > FB_TOLERANCE:
        row["noise"] = (f"forward + backward (the same work for every kernel) took {fb:.0f} ms here and "
                        f"{loop_fb:.0f} ms in loop's step: the step speedup {row['speedup_vs_loop']:.2f}x against "
                        f"{row['optimizer_bound_speedup_vs_loop']:.2f}x from the optimizer alone is that much "
                        "the machine's load, not the kernel")
    return row


def check_row(row: dict[str, Any], rel: float = 1e-9) -> list[str]:
    """What is inconsistent in a ``train`` row (empty when nothing): every time positive, the
    step the sum of its parts, the optimizer's share in [0, 1] and every ratio equal to the
    ratio of the times recorded in the same row."""
    problems = []
    for key in ("train_step_ms", "optimizer_step_ms", "loop_train_step_ms", "loop_optimizer_step_ms"):
        if not row[key] > 0:
            problems.append(f"{key} = {row[key]} is not a positive time")
    if problems:
        return problems
    if not 0 <= row["optimizer_share"] <= 1:
        problems.append(f"optimizer_share = {row['optimizer_share']} is outside [0, 1]")
    if not 0 <= row["optimizer_step_ms"] <= row["train_step_ms"]:
        problems.append(f"optimizer_step_ms {row['optimizer_step_ms']} > train_step_ms {row['train_step_ms']}")
    if not 0 <= row["loop_optimizer_step_ms"] <= row["loop_train_step_ms"]:
        problems.append(f"loop_optimizer_step_ms {row['loop_optimizer_step_ms']} > loop_train_step_ms "
                        f"{row['loop_train_step_ms']}")
    identities = {
        "optimizer_share": row["optimizer_step_ms"] / row["train_step_ms"],
        "speedup_vs_loop": row["loop_train_step_ms"] / row["train_step_ms"],
        "optimizer_speedup_vs_loop": row["loop_optimizer_step_ms"] / row["optimizer_step_ms"],
        "forward_backward_ms": row["train_step_ms"] - row["optimizer_step_ms"],
    }
    for key, want in identities.items():
        if not math.isclose(row[key], want, rel_tol=rel, abs_tol=1e-9):
            problems.append(f"{key} = {row[key]} but the times in the row give {want}")
    return problems


__all__ = ["KERNELS", "check_row", "run", "step_row"]
