"""The training loop every recipe shares: small, readable, resumable.

What :func:`train` does, in order:

1. seeds Python, NumPy and torch from ``train.seed``;
2. resumes from the newest complete checkpoint in ``run_dir/checkpoints/`` when there is one
   (model, optimizer, scheduler, RNG states, step and data position), refusing when the
   stored config hash differs from this config unless ``force=True`` (``--force``), in which
   case the checkpoint is continued under the new config;
3. runs AdamW with linear warmup then linear decay, gradient accumulation, autocast mixed
   precision on CUDA (fp32 on CPU), gradient clipping, a tqdm progress bar;
4. every ``train.eval_every_steps`` calls ``eval_fn(model) -> {metric: value}``;
5. every ``train.save_every_steps`` writes ``checkpoints/step-N/`` atomically (a temporary
   folder, then ``os.replace``) and keeps the newest ``train.keep_checkpoints``;
6. stops with :class:`RunnerError` on a NaN/inf loss, naming the last good checkpoint
   (rerunning resumes from it);
7. at the end writes ``metrics.json`` (final metrics, loss and eval history, baselines),
   ``training_curve.png``, the final model in ``model/`` (LoRA merged into the base with
   peft's ``merge_and_unload``, so plain transformers / sentence-transformers load it) with
   its tokenizer, and ``run.json`` (task, recipe, base model, config).

Multi-GPU: the loop runs through ``accelerate.Accelerator``, so
``accelerate launch -m searchsmith.serving.main train R.yaml`` (or ``accelerate launch
$(which searchsmith) train R.yaml``) runs data-parallel unchanged: each process takes every
``num_processes``-th micro-batch, gradients are all-reduced by DDP, and only the main
process writes checkpoints and outputs. Only the single-process path is tested here.

The loss is a function of the model and a batch, so a recipe keeps its forward pass::

    def loss_fn(model, batch):  # batch: dict of tensors, already on the device
        scores = model(**batch["inputs"]).logits.view(-1, batch["group_size"])  # (B, N)
        return listwise_loss(scores, batch["labels"])

    result = train(model, loss_fn, lambda epoch: make_batches(epoch), cfg, run_dir,
                   eval_fn=evaluate, tokenizer=tok, run_info={"task": "rerank", ...})
"""

from __future__ import annotations

import glob
import json
import logging
import math
import os
import pickle
import random
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
from searchsmith.models.config import is_int, shown, to_dict
from searchsmith.models.errors import ConfigError, RunnerError, ValidationError
from searchsmith.models.io import (
    give_plain_modes,
    remove_dead_temps,
    remove_written,
    replace_dir_keeping,
    write_json_atomic,
)
from searchsmith.training.config import LoraConfig, OptimConfig, TrainConfig, config_hash

log = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^step-(\d+)$")
# what a checkpoint folder holds, all written by save_checkpoint (state.json last); rotating a
# checkpoint out deletes these and nothing else
CHECKPOINT_FILES = ("model.pt", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")


@dataclass
class TrainResult:
    """What :func:`train` hands back (the same figures are in ``run_dir/metrics.json``)."""

    run_dir: Path
    model: Any
    step: int
    final_metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    eval_history: list[dict[str, float]] = field(default_factory=list)
    resumed_from_step: int | None = None


# ----------------------------------------------------------------------------- helpers


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_mixed_precision(mode: str) -> str:
    """``no`` on CPU whatever was asked (autocast is a no-op there); ``auto`` picks bf16/fp16."""
    if not torch.cuda.is_available():
        return "no"
    if mode == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return mode


def apply_lora(model: Any, lora: LoraConfig, task_type: str,
               modules_to_save: list[str] | None = None) -> Any:
    """Wrap ``model`` with peft LoRA when ``lora.enabled``; return it unchanged otherwise.

    Args:
        task_type: a ``peft.TaskType`` name, e.g. ``"SEQ_CLS"`` or ``"SEQ_2_SEQ_LM"``.
        modules_to_save: new heads that must train fully (e.g. ``["classifier"]``).
    """
    if not lora.enabled:
        return model
    from peft import LoraConfig as PeftLoraConfig
    from peft import TaskType, get_peft_model

    peft_cfg = PeftLoraConfig(
        task_type=getattr(TaskType, task_type), r=lora.r, lora_alpha=lora.alpha,
        lora_dropout=lora.dropout, target_modules=lora.target_modules,
        modules_to_save=modules_to_save,
    )
    try:
        return get_peft_model(model, peft_cfg)
    except ValueError as exc:  # target modules not in the model
        raise ConfigError(f"lora.target_modules: {exc}") from None


def merged_model(model: Any) -> Any:
    """The plain transformers model: LoRA merged into the base when ``model`` is a PeftModel."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return model
    if isinstance(model, PeftModel):
        return model.merge_and_unload()
    return model


def save_model(model: Any, tokenizer: Any, out_dir: Path) -> Path:
    """Save the merged model (and tokenizer) to ``out_dir`` atomically; return ``out_dir``.

    Files of an older ``out_dir`` that this save does not write again (a user's notes) are
    kept, and said on stdout: a rerun deletes nothing it did not write."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    remove_dead_temps(out_dir.parent, f".{glob.escape(out_dir.name)}.tmp-*")  # a killed save's
    plain = merged_model(model)
    plain.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    give_plain_modes(tmp)  # safetensors writes the weights 0600: readable by whoever may read the run
    say_kept(out_dir, replace_dir_keeping(tmp, out_dir))
    return out_dir


def say_kept(folder: Path, kept: list[str]) -> None:
    """Tell the user which files of theirs a rewrite of ``folder`` kept in it."""
    if kept:
        shown = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
        print(f"{folder}: kept {len(kept)} file(s) this run does not write ({shown})", flush=True)


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The complete ``checkpoints/step-N`` folders (``state.json`` written last), newest first;
    temporary folders are ignored."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and (p / "state.json").is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete ``checkpoints/step-N`` folder (temporary folders are ignored)."""
    found = complete_checkpoints(run_dir)
    return found[0] if found else None


# what a damaged checkpoint file raises when read: a truncated zip (RuntimeError), a cut pickle
# (EOFError, UnpicklingError), bad JSON (ValueError), a missing file (OSError)
_DAMAGED = (OSError, EOFError, RuntimeError, ValueError, KeyError, pickle.UnpicklingError)


def read_checkpoint(ckpt: Path) -> dict[str, Any]:
    """Every part of a checkpoint, read into memory (so a damaged one fails before any is used).

    Raises:
        OSError, EOFError, RuntimeError, ValueError, KeyError, UnpicklingError: a damaged file.
    """
    state = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))
    if not isinstance(state, dict) or not all(k in state for k in ("step", "epoch", "batch_in_epoch")):
        raise ValueError("state.json lacks step / epoch / batch_in_epoch")
    for key in ("step", "epoch", "batch_in_epoch"):  # an edited "abc" or 3.5 failed or misnamed the next save
        if not is_int(state[key], 0):
            raise ValueError(f"state.json's {key} must be a whole number >= 0, got {shown(state[key])}")
    if f"step-{state['step']}" != ckpt.name:
        raise ValueError(f"state.json's step {state['step']} is not the folder's ({ckpt.name})")
    return {"state": state, "model": torch.load(ckpt / "model.pt", map_location="cpu"),
            "optimizer": torch.load(ckpt / "optimizer.pt", map_location="cpu"),
            "scheduler": torch.load(ckpt / "scheduler.pt", map_location="cpu"),
            "rng": torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=False)}


def newest_readable_checkpoint(run_dir: Path, say: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that reads whole, with its parts; a damaged newer one is passed
    over with a line through ``say`` (it is replaced when training saves that step again).

    Raises:
        ConfigError: every checkpoint is damaged (naming them, and the fix).
    """
    damaged = []
    for ckpt in complete_checkpoints(run_dir):
        try:
            return ckpt, read_checkpoint(ckpt)
        except _DAMAGED as exc:
            damaged.append(f"{ckpt.name} ({type(exc).__name__}: {str(exc)[:120]})")
            say(f"checkpoint {ckpt} is damaged ({type(exc).__name__}: {str(exc)[:120]}); trying the one before")
    if damaged:
        raise ConfigError(f"{run_dir}: every checkpoint is damaged: {'; '.join(damaged)}. Move "
                          f"{Path(run_dir) / 'checkpoints'} away to train from the start")
    return None


def remove_stale_temp_checkpoints(run_dir: Path) -> list[Path]:
    """Remove ``checkpoints/.step-N.tmp-PID`` folders whose process is gone (a run killed while
    saving); a live process's are left alone. Returns the removed folders."""
    return remove_dead_temps(Path(run_dir) / "checkpoints", ".step-*.tmp-*")


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _lr_lambda(optim: OptimConfig) -> Callable[[int], float]:
    warmup = int(optim.warmup_ratio * optim.max_steps)

    def fn(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (optim.max_steps - step) / max(1, optim.max_steps - warmup))

    return fn


HEAD_MODULES = frozenset({"classifier", "score"})  # a classification head's module names (optim.head_lr_scale)
FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what AdamW(fused=True) takes
HEAD_PARAMETERS = frozenset({"scale", "bias"})  # a cosine head's own top-level parameters (models/reranker.py)


def _param_groups(model: torch.nn.Module, weight_decay: float, lr: float,
                  head_lr_scale: float = 1.0) -> list[dict[str, Any]]:
    # No decay on biases and LayerNorm weights (1-D tensors), as in BERT fine-tuning; the
    # classification head's own learning rate (optim.head_lr_scale).
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            head = head_lr_scale != 1.0 and (bool(HEAD_MODULES & set(name.split("."))) or name in HEAD_PARAMETERS)
            groups.setdefault((p.ndim >= 2, head), []).append(p)
    return [{"params": ps, "weight_decay": weight_decay if decay else 0.0, "lr": lr * (head_lr_scale if head else 1.0)}
            for (decay, head), ps in sorted(groups.items())]


_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")  # a transformer layer's weights: ...layer.<k>.<name>


def freeze_lower(model: torch.nn.Module, embeddings: bool, layers: int, field: str = "model") -> int:
    """Keep the input embeddings (``embeddings``) and the lowest ``layers`` transformer layers
    of ``model`` fixed (``requires_grad = False``); return how many weights were frozen.

    A weight is an embedding when a part of its dotted name is ``embeddings``, and in layer k
    when its name holds ``layer.k.`` (BERT, MiniLM and RoBERTa: ``encoder.layer.k``;
    DistilBERT: ``transformer.layer.k``), wherever the encoder sits in a recipe's model.
    Backpropagation then stops at the lowest trained layer, so a step costs less (all-MiniLM-L6-v2,
    8 x 128 tokens on 2 cores: 616 ms all trained, 580 ms without the embeddings, 438 ms
    without them and two layers), and on small data the fixed lower layers keep what
    pre-training learnt (the quick reader's held-out answer F1: RESULTS.md).

    Raises:
        ConfigError: ``layers`` is negative or more than the model has (``field`` names the
            recipe key in the message).
    """
    found = {int(m.group(1)) for name, _ in model.named_parameters() if (m := _LAYER.search(name))}
    if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= len(found):
        raise ConfigError(f"{field}.freeze_layers: expected an int in 0..{len(found)} (the model's transformer "
                          f"layers), got {layers!r}; 0 trains them all")
    frozen = 0
    for name, p in model.named_parameters():
        m = _LAYER.search(name)
        if (embeddings and "embeddings" in name.split(".")) or (m is not None and int(m.group(1)) < layers):
            if p.requires_grad:
                p.requires_grad = False
                frozen += p.numel()
    return frozen


def make_optimizer(groups: list[dict[str, Any]], lr: float) -> torch.optim.AdamW:
    """AdamW over ``groups``, with torch's fused kernel where every parameter allows it.

    The fused kernel updates all parameters in one vectorised pass instead of a Python loop
    of small ops per tensor: on 2 CPU cores an AdamW step over all-MiniLM-L6-v2's 22.6 M
    weights takes 11.7 ms instead of 69.0 ms, and a whole step of 8 x 128 tokens 567 ms
    instead of 618 ms (``searchsmith profile train``, serving/profiling/RESULTS.md). The
    update rule is the same (the weights agree to float rounding; a checkpoint's optimizer
    state loads into either). Parameters of a dtype or device the kernel does not take
    (float64, meta) keep the per-tensor loop.
    """
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(p.dtype in FUSED_DTYPES and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, fused=fused or None)


CURVE_MAX_LINES = 8


def curve_keys(eval_history: list[dict[str, float]], limit: int = CURVE_MAX_LINES) -> tuple[list[str], int]:
    """The held-out figures drawn on the training curve, and how many others were left out.

    A recipe records dozens of figures per evaluation (per source, out of domain, the parts of
    each paired test); a line is drawn only for a score, every value of which lies in [-1, 1]
    (counts and p-values' companions are not scores on that axis), and never for a paired
    test's parts (``*_vs_*``). At most ``limit`` lines: the top-level figures first (no ``/``),
    then by name. The rest are in ``metrics.json``."""
    keys = sorted({k for e in eval_history for k in e if k != "step"})
    scores = [k for k in keys if "_vs_" not in k
              and all(-1.0 <= float(e[k]) <= 1.0 for e in eval_history if k in e)]
    scores.sort(key=lambda k: ("/" in k, k))
    return scores[:limit], len(keys) - len(scores[:limit])


def save_training_curve(path: Path, history: list[dict[str, float]],
                        eval_history: list[dict[str, float]], title: str) -> Path:
    """Plot training loss (and the main held-out figures, :func:`curve_keys`) against the step
    into a PNG (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 2 if eval_history else 1
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 3.5), squeeze=False)
    ax = axes[0][0]
    if history:
        ax.plot([h["step"] for h in history], [h["loss"] for h in history], marker=".")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    if eval_history:
        ax2 = axes[0][1]
        keys, others = curve_keys(eval_history)
        for k in keys:
            pts = [(e["step"], e[k]) for e in eval_history if k in e]
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k)
        ax2.set_xlabel("optimizer step")
        ax2.set_ylabel("held-out metric" + (f" ({others} more in metrics.json)" if others else ""), fontsize=8)
        if keys:
            ax2.legend(fontsize=7)
        ax2.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out ``fig`` (matplotlib) and write it to ``path`` as a 100-dpi PNG through a temporary
    file beside it (per process: a reader never sees half a picture), then close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------- the loop


def is_main_process() -> bool:
    """Whether this is the process that writes a run's files: the only one, or rank 0 of an
    ``accelerate launch`` / ``torchrun`` group (the others train, then leave the writing to it)."""
    return os.environ.get("RANK", "0") == "0"


def train(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    train_batches: Callable[[int], Iterable[Any]],
    cfg: Any,
    run_dir: str | Path,
    eval_fn: Callable[[torch.nn.Module], Mapping[str, float]] | None = None,
    *,
    tokenizer: Any = None,
    run_info: Mapping[str, Any] | None = None,
    baselines: Mapping[str, Any] | None = None,
    force: bool = False,
    on_step: Callable[[int, torch.nn.Module], None] | None = None,
) -> TrainResult:
    """Train ``model`` for ``cfg.optim.max_steps`` optimizer steps; resume when possible.

    Args:
        model: a torch module (a peft model when LoRA is on; see :func:`apply_lora`).
        loss_fn: ``(model, batch) -> scalar loss``; the batch is already on the device.
        train_batches: ``epoch -> iterable of micro-batches``; must give the same batches for
            the same epoch (seed your own ``random.Random(seed + epoch)``), so that resuming
            can skip to the stored position.
        cfg: a recipe config with ``.optim`` (:class:`OptimConfig`) and ``.train``
            (:class:`TrainConfig`); its hash guards resuming.
        run_dir: output folder (created).
        eval_fn: ``model -> {metric: float}`` on held-out data, called in eval mode without
            gradients every ``train.eval_every_steps`` and once at the end.
        tokenizer: saved beside the final model.
        run_info: written to ``run.json`` with the config (task, recipe, base_model, ...).
        baselines: untrained reference figures written to ``metrics.json`` under ``baselines``.
        force: resume a checkpoint even though the config changed.
        on_step: called as ``on_step(step, model)`` after each optimizer step (after saving).

    Returns:
        TrainResult with the final metrics and the (merged) model.

    Raises:
        ConfigError: resuming with a changed config without ``force``.
        ValidationError: the training data yields no batch.
        RunnerError: a NaN/inf loss (the last good checkpoint is kept).
    """
    from accelerate import Accelerator
    from accelerate.utils import send_to_device
    from searchsmith.models.console import progress

    optim: OptimConfig = cfg.optim
    tcfg: TrainConfig = cfg.train
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_root = run_dir / "checkpoints"
    cfg_hash = config_hash(cfg)

    # 1. Seeds and devices.
    seed_everything(tcfg.seed)
    # cpu=True without CUDA: processes started by torchrun form a gloo group (MULTI_CPU).
    # find_unused_parameters: a recipe's model may hold parameters a loss does not use (the
    # encoder's pooler, a head of another task), which DDP otherwise refuses on the 2nd step.
    from accelerate.utils import DistributedDataParallelKwargs

    accelerator = Accelerator(mixed_precision=resolve_mixed_precision(tcfg.mixed_precision),
                              cpu=not torch.cuda.is_available(),
                              kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    is_main = accelerator.is_main_process

    optimizer = make_optimizer(_param_groups(model, optim.weight_decay, optim.lr, optim.head_lr_scale), optim.lr)
    model, optimizer = accelerator.prepare(model, optimizer)
    # The scheduler is stepped once per optimizer step in every process (not prepared, so
    # accelerate does not multiply its steps by the number of processes).
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        getattr(optimizer, "optimizer", optimizer), _lr_lambda(optim))

    # 2. Resume.
    step, epoch, pos = 0, 0, 0
    history: list[dict[str, float]] = []
    eval_history: list[dict[str, float]] = []
    resumed_from = None
    # each change of config a --force resume made: {"at_step", "from_config_hash", "to_config_hash"};
    # kept in the checkpoints and written to run.json, which otherwise shows the last config only
    config_changes: list[dict[str, Any]] = []
    rng_to_restore = None
    if is_main:
        remove_stale_temp_checkpoints(run_dir)
    found = newest_readable_checkpoint(run_dir, lambda line: print(line, flush=True) if is_main else None)
    if found is not None:
        ckpt, parts = found
        state = parts["state"]
        if state.get("config_hash") != cfg_hash and not force:
            raise ConfigError(
                f"{run_dir}: a checkpoint ({ckpt.name}) from a different config is here; "
                "refusing to resume. Rerun with the same config, pass --force to continue it "
                "under the new config, or choose another --output-dir"
            )
        unwrapped = accelerator.unwrap_model(model)
        try:
            unwrapped.load_state_dict(parts["model"])
        except RuntimeError as exc:  # --force under a config whose model has another shape or kind
            first = str(exc).strip().splitlines()[1:2] or [str(exc)[:200]]
            raise ConfigError(
                f"{run_dir}: {ckpt.name} holds a model this config does not build ({first[0].strip()}); "
                "--force continues a run under a changed config only while its model keeps the same "
                "layers and sizes. Choose another --output-dir for this one") from None
        optimizer.load_state_dict(parts["optimizer"])
        scheduler.load_state_dict(parts["scheduler"])
        rng_to_restore = parts["rng"]
        step, epoch, pos = state["step"], state["epoch"], state["batch_in_epoch"]
        history, eval_history = state.get("history", []), state.get("eval_history", [])
        config_changes = list(state.get("config_changes", []))
        if state.get("config_hash") != cfg_hash:  # --force: continued under another config
            config_changes.append({"at_step": step, "from_config_hash": state.get("config_hash"),
                                   "to_config_hash": cfg_hash})
            if is_main:
                print(f"{run_dir}: continuing {ckpt.name} under a changed config (--force); "
                      "run.json records the change (config_changes)", flush=True)
        resumed_from = step
        if is_main:
            print(f"resuming {run_dir} from {ckpt.name} (step {step})", flush=True)

    def save_checkpoint() -> Path | None:
        if not is_main:
            return None
        ckpt_root.mkdir(parents=True, exist_ok=True)
        final = ckpt_root / f"step-{step}"
        tmp = ckpt_root / f".step-{step}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, part in (("model.pt", accelerator.unwrap_model(model).state_dict()),
                           ("optimizer.pt", optimizer.state_dict()), ("scheduler.pt", scheduler.state_dict()),
                           ("rng.pt", _rng_state())):
            torch.save(part, tmp / name)
        # state.json last: its presence marks a complete checkpoint.
        write_json_atomic(tmp / "state.json", {
            "step": step, "epoch": epoch, "batch_in_epoch": pos, "config_hash": cfg_hash,
            "history": history, "eval_history": eval_history, "config_changes": config_changes,
        })
        say_kept(final, replace_dir_keeping(tmp, final))
        done = sorted((int(CHECKPOINT_RE.match(p.name).group(1)), p) for p in ckpt_root.iterdir()
                      if CHECKPOINT_RE.match(p.name) and p.is_dir())
        for _, old in done[:-tcfg.keep_checkpoints]:
            left = remove_written(old, CHECKPOINT_FILES)
            if left:  # a user's file: the checkpoint's own files go, the folder stays with it
                print(f"{old}: removed the checkpoint's files; kept {', '.join(left[:5])}, which it did not "
                      "write", flush=True)
        return final

    def run_eval() -> dict[str, float]:
        if eval_fn is None or not is_main:  # the main process evaluates and reports
            return {}
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.eval()
        with torch.no_grad():
            metrics = {k: float(v) for k, v in eval_fn(unwrapped).items()}
        unwrapped.train()
        return metrics

    def micro_batches() -> Iterable[Any]:
        """Endless stream of micro-batches from the stored position; advances epoch/pos."""
        nonlocal epoch, pos, rng_to_restore
        while True:
            it = islice(iter(train_batches(epoch)), pos, None)
            if rng_to_restore is not None:  # after skipping, so skipping cannot disturb it
                _set_rng_state(rng_to_restore)
                rng_to_restore = None
            got = False
            for i, batch in enumerate(it, start=pos):
                got = True
                pos = i + 1
                if i % accelerator.num_processes == accelerator.process_index:
                    yield batch
            if not got and pos == 0:
                raise ValidationError(
                    "training data is empty: the recipe's data yields no batch (check the "
                    "data paths and filters; see the recipe header for the data contract)")
            epoch, pos = epoch + 1, 0

    # 3. Loop.
    model.train()
    start = time.perf_counter()
    stream = iter(micro_batches())
    bar = progress(total=optim.max_steps, initial=step, desc="train", unit="step", enabled=is_main)
    running: list[float] = []
    last_good = found[0] if found is not None else None  # the one resumed from, not a damaged newer one
    while step < optim.max_steps:
        loss_sum = 0.0
        for micro in range(optim.grad_accum_steps):
            batch = send_to_device(next(stream), accelerator.device)
            sync = micro == optim.grad_accum_steps - 1
            ctx = accelerator.no_sync(model) if not sync else nullcontext()
            with ctx, accelerator.autocast():
                loss = loss_fn(model, batch)
            value = float(loss.detach())
            if not math.isfinite(value):
                bar.close()
                where = (f"the last good checkpoint is {last_good} (rerun the same command "
                         "to resume from it)") if last_good else "no checkpoint was written yet"
                raise RunnerError(
                    f"step {step + 1}: training loss is {value}; stopped. {where}. Lower "
                    "optim.lr, set train.mixed_precision=no, or check the data for empty texts")
            accelerator.backward(loss / optim.grad_accum_steps)
            loss_sum += value / optim.grad_accum_steps
        accelerator.clip_grad_norm_(model.parameters(), optim.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        running.append(loss_sum)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum:.4f}")
        if tcfg.log_every_steps and (step % tcfg.log_every_steps == 0 or step == optim.max_steps):
            history.append({"step": step, "loss": sum(running) / len(running),
                            "lr": scheduler.get_last_lr()[0]})
            running = []
        if (eval_fn is not None and tcfg.eval_every_steps and step % tcfg.eval_every_steps == 0
                and step < optim.max_steps):
            eval_history.append({"step": step, **run_eval()})
            if is_main:  # tqdm.write prints even for a disabled bar
                bar.write(f"step {step}: {eval_history[-1]}")
        if tcfg.save_every_steps and step % tcfg.save_every_steps == 0:
            last_good = save_checkpoint() or last_good
        if on_step is not None:
            on_step(step, model)
    bar.close()
    train_time_s = time.perf_counter() - start

    # 4. Final evaluation, outputs.
    final = run_eval()
    if final:
        eval_history.append({"step": step, **final})
    if not is_main:
        # the main process writes the run's files; code after train() may read them on any process
        accelerator.wait_for_everyone()
        return TrainResult(run_dir, model, step, final, history, eval_history, resumed_from)
    if tcfg.save_every_steps and (step % tcfg.save_every_steps != 0):
        save_checkpoint()  # so that a rerun of a finished run is a no-op resume
    metrics = {
        "final": final, "steps": step, "history": history, "eval_history": eval_history,
        "baselines": dict(baselines or {}), "train_time_s_this_invocation": round(train_time_s, 2),
        "resumed_from_step": resumed_from, "processes": accelerator.num_processes,
    }
    write_json_atomic(run_dir / "metrics.json", metrics)
    title = f"{(run_info or {}).get('recipe', 'run')}: {run_dir.name}"
    save_training_curve(run_dir / "training_curve.png", history, eval_history, title)
    plain = merged_model(accelerator.unwrap_model(model))
    save_model(plain, tokenizer, run_dir / "model")
    write_json_atomic(run_dir / "run.json", {**dict(run_info or {}), "config": to_dict(cfg),
                                             "config_hash": cfg_hash, "steps": step,
                                             **({"config_changes": config_changes} if config_changes else {})})
    accelerator.wait_for_everyone()  # the other processes wait for these files (see above)
    return TrainResult(run_dir, plain, step, final, history, eval_history, resumed_from)


__all__ = [
    "TrainResult",
    "apply_lora",
    "is_main_process",
    "complete_checkpoints",
    "latest_checkpoint",
    "newest_readable_checkpoint",
    "read_checkpoint",
    "remove_stale_temp_checkpoints",
    "merged_model",
    "resolve_mixed_precision",
    "save_model",
    "say_kept",
    "curve_keys",
    "save_figure",
    "save_training_curve",
    "seed_everything",
    "train",
    "write_json_atomic",
]
