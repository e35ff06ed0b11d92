"""The training loop: trains, saves a plain HF model, resumes exactly, refuses changed
configs, stops on NaN keeping the last good checkpoint."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from searchsmith.models.errors import ConfigError, RunnerError, ValidationError
from searchsmith.training.config import OptimConfig, TrainConfig
from searchsmith.training.trainer import latest_checkpoint, make_optimizer, train


@dataclass(frozen=True)
class _Cfg:
    output_dir: str = "unused"
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def _cfg(max_steps: int = 6, lr: float = 1.0e-2) -> _Cfg:
    return _Cfg(optim=OptimConfig(lr=lr, max_steps=max_steps, batch_size=4, warmup_ratio=0.2),
                train=TrainConfig(seed=0, mixed_precision="no", save_every_steps=2,
                                  keep_checkpoints=5, log_every_steps=1, eval_every_steps=3))


def _model() -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    conf = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16, num_labels=1)
    return BertForSequenceClassification(conf)


def _batches(epoch: int):
    # 5 batches per epoch, deterministic per epoch (as train() requires for resuming).
    rng = random.Random(epoch)
    for _ in range(5):
        ids = torch.tensor([[rng.randrange(1, 50) for _ in range(8)] for _ in range(4)])
        yield {"input_ids": ids, "y": torch.tensor([rng.random() for _ in range(4)])}


def _loss(model, batch):
    out = model(input_ids=batch["input_ids"]).logits.view(-1)
    return torch.nn.functional.mse_loss(out, batch["y"])


def _eval(model):
    ids = torch.arange(1, 9).view(1, 8)
    with torch.no_grad():
        return {"score": float(model(input_ids=ids).logits[0, 0])}


class _Interrupt(Exception):
    pass


def _stop_at(n: int):
    def cb(step, model):
        if step == n:
            raise _Interrupt
    return cb


def test_train_saves_plain_model_metrics_and_curve(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    res = train(_model(), _loss, _batches, _cfg(), tmp_path, _eval,
                run_info={"task": "t", "recipe": "r", "base_model": "b"}, baselines={"x": 1})
    assert res.step == 6
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["baselines"] == {"x": 1}
    assert [h["step"] for h in metrics["history"]] == [1, 2, 3, 4, 5, 6]
    assert [e["step"] for e in metrics["eval_history"]] == [3, 6]
    assert (tmp_path / "training_curve.png").stat().st_size > 1000
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["recipe"] == "r" and run["config"]["optim"]["max_steps"] == 6
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model").eval()
    ids = torch.arange(1, 9).view(1, 8)
    with torch.no_grad():
        assert float(reloaded(input_ids=ids).logits[0, 0]) == pytest.approx(
            metrics["final"]["score"], abs=1e-5)
    # Only the newest checkpoints are kept, and leftover temporary folders are absent.
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-2", "step-4", "step-6"]


def test_resume_after_interrupt_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    full = train(_model(), _loss, _batches, _cfg(), tmp_path / "full")
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path / "cut", on_step=_stop_at(4))
    assert latest_checkpoint(tmp_path / "cut").name == "step-4"
    assert not (tmp_path / "cut" / "metrics.json").exists()
    opt4 = torch.load(tmp_path / "cut/checkpoints/step-4/optimizer.pt")
    assert all(int(s["step"]) == 4 for s in opt4["state"].values())

    resumed = train(_model(), _loss, _batches, _cfg(), tmp_path / "cut")
    assert resumed.resumed_from_step == 4 and resumed.step == 6
    assert [h["step"] for h in resumed.history] == [1, 2, 3, 4, 5, 6]
    opt6 = torch.load(tmp_path / "cut/checkpoints/step-6/optimizer.pt")
    assert all(int(s["step"]) == 6 for s in opt6["state"].values())
    # Same weights as the run that was never interrupted: optimizer moments, scheduler,
    # RNG (dropout) and data position were all restored.
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(),
                                 strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_a_damaged_newest_checkpoint_is_passed_over_for_the_one_before(tmp_path: Path, capsys) -> None:
    """A truncated model.pt (a full disk, a copy cut short) ended resuming in a torch traceback."""
    full = train(_model(), _loss, _batches, _cfg(), tmp_path / "full")
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path / "cut", on_step=_stop_at(5))
    step4 = tmp_path / "cut/checkpoints/step-4/model.pt"
    step4.write_bytes(step4.read_bytes()[:100])
    resumed = train(_model(), _loss, _batches, _cfg(), tmp_path / "cut")
    assert "step-4 is damaged (RuntimeError" in capsys.readouterr().out and resumed.resumed_from_step == 2
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)  # the same run, two steps done again
    assert torch.load(step4, map_location="cpu")  # saved whole again at step 4


def test_every_checkpoint_damaged_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(3))
    (tmp_path / "checkpoints/step-2/state.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"every checkpoint is damaged: step-2 \(JSONDecodeError.*Move .*checkpoints away"):
        train(_model(), _loss, _batches, _cfg(), tmp_path)


@pytest.mark.parametrize("step", ['"abc"', "null", "3.5", "-5", "7"])
def test_an_edited_checkpoint_step_counts_as_damaged(tmp_path: Path, step: str) -> None:
    """A state.json edited to "step": "abc" ended resuming in a TypeError; 3.5 was taken and the
    next save was named step-6.5, which no resume reads (found by probing, 2026-12-06)."""
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(3))
    state = tmp_path / "checkpoints/step-2/state.json"
    saved = json.loads(state.read_text())
    state.write_text(json.dumps(saved).replace(f'"step": {saved["step"]}', f'"step": {step}'))
    with pytest.raises(ConfigError, match=r"every checkpoint is damaged: step-2 \(ValueError: state.json's step"):
        train(_model(), _loss, _batches, _cfg(), tmp_path)


def test_a_killed_runs_temporary_checkpoint_is_removed_on_resume(tmp_path: Path) -> None:
    import os

    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(2))
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # above pid_max: no such process
    stale = tmp_path / "checkpoints" / f".step-3.tmp-{gone}"
    live = tmp_path / "checkpoints" / f".step-3.tmp-{os.getpid()}"  # this process: left alone
    stale.mkdir()
    live.mkdir()
    from searchsmith.training.trainer import remove_stale_temp_checkpoints

    assert remove_stale_temp_checkpoints(tmp_path) == [stale] and live.is_dir() and not stale.exists()


def test_resume_with_changed_config_is_refused_unless_forced(tmp_path: Path) -> None:
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(2))
    with pytest.raises(ConfigError, match="different config.*--force"):
        train(_model(), _loss, _batches, _cfg(lr=5.0e-2), tmp_path)
    res = train(_model(), _loss, _batches, _cfg(lr=5.0e-2), tmp_path, force=True)
    assert res.resumed_from_step == 2 and res.step == 6
    # run.json shows the last config, and that the first steps ran under another
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["config"]["optim"]["lr"] == 5.0e-2
    assert [c["at_step"] for c in run["config_changes"]] == [2]
    assert run["config_changes"][0]["to_config_hash"] == run["config_hash"] != run["config_changes"][0]["from_config_hash"]


def test_a_forced_resume_under_a_model_of_another_shape_is_a_config_error(tmp_path: Path) -> None:
    """--force with model.config.hidden_size changed was torch's raw RuntimeError (size mismatch)
    from load_state_dict (helper-43's audit)."""
    from transformers import BertConfig, BertForSequenceClassification

    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(2))
    wider = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32,
                                                     max_position_embeddings=16, num_labels=1))
    with pytest.raises(ConfigError, match=r"step-2 holds a model this config does not build \(size mismatch"):
        train(wider, _loss, _batches, _cfg(lr=5.0e-2), tmp_path, force=True)
    assert train(_model(), _loss, _batches, _cfg(), tmp_path).step == 6  # the run itself is unharmed


def test_a_run_folder_of_another_recipe_is_refused(tmp_path: Path) -> None:
    """train of the citation recipe into a finished reranker run mixed the two runs' files
    (run.json said cite, the mark reranker, model/ held both models; helper-43's audit)."""
    from searchsmith.training.cli import check_run_recipe, claim_run_dir

    run = tmp_path / "run"
    claim_run_dir(run, "reranker")
    check_run_recipe(run, "reranker")
    claim_run_dir(run, "reranker")  # the same recipe: resumed or redone
    with pytest.raises(ConfigError, match=r"holds a run of recipe 'reranker', not 'citation'"):
        claim_run_dir(run, "citation")
    legacy = tmp_path / "legacy"  # a run from before the mark: its run.json says
    legacy.mkdir()
    (legacy / "run.json").write_text(json.dumps({"config": {"recipe": "citation"}}))
    with pytest.raises(ConfigError, match=r"recipe 'citation', not 'reader'"):
        check_run_recipe(legacy, "reader")
    check_run_recipe(tmp_path / "new", "reader")


def test_an_unchanged_resume_records_no_config_change(tmp_path: Path) -> None:
    with pytest.raises(_Interrupt):
        train(_model(), _loss, _batches, _cfg(), tmp_path, on_step=_stop_at(2))
    train(_model(), _loss, _batches, _cfg(), tmp_path)
    assert "config_changes" not in json.loads((tmp_path / "run.json").read_text())


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path: Path) -> None:
    calls = {"n": 0}

    def nan_after_3(model, batch):
        calls["n"] += 1
        loss = _loss(model, batch)
        return loss * float("nan") if calls["n"] == 3 else loss

    with pytest.raises(RunnerError, match=r"step 3: training loss is nan.*step-2"):
        train(_model(), nan_after_3, _batches, _cfg(), tmp_path)
    assert latest_checkpoint(tmp_path).name == "step-2"
    assert not (tmp_path / "model").exists()


def test_empty_training_data_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="training data is empty"):
        train(_model(), _loss, lambda epoch: iter(()), _cfg(), tmp_path)


def test_lora_is_merged_into_a_plain_model_at_save(tmp_path: Path) -> None:
    from searchsmith.training.config import LoraConfig
    from searchsmith.training.trainer import apply_lora
    from transformers import AutoModelForSequenceClassification

    lora = LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0, target_modules=["query", "value"])
    model = apply_lora(_model(), lora, "SEQ_CLS", modules_to_save=["classifier"])
    res = train(model, _loss, _batches, _cfg(max_steps=2), tmp_path, _eval)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model").eval()
    assert not any("lora" in k for k in reloaded.state_dict())
    assert _eval(reloaded)["score"] == pytest.approx(res.final_metrics["score"], abs=1e-5)


def test_adamw_is_fused_where_the_parameters_allow_it_and_updates_as_the_loop() -> None:
    # torch's fused AdamW kernel: one vectorised pass (6x faster on a CPU than the per-tensor
    # loop, searchsmith profile train); float64 parameters keep the loop
    grads = []
    models = [_model(), _model()]
    for m in models:
        torch.manual_seed(1)
        m(input_ids=torch.randint(1, 50, (2, 8))).logits.pow(2).sum().backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    fused = make_optimizer([{"params": list(models[0].parameters()), "weight_decay": 0.01}], 1e-2)
    assert fused.defaults["fused"] is True
    loop = torch.optim.AdamW([{"params": list(models[1].parameters()), "weight_decay": 0.01}], lr=1e-2,
                             foreach=False)
    for _ in range(3):
        fused.step()
        loop.step()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(_model().parameters(), models[0].parameters(), strict=True))
    doubles = make_optimizer([{"params": [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]}], 1e-2)
    assert not doubles.defaults["fused"]


def test_training_curve_draws_a_few_scores_not_every_recorded_figure(tmp_path: Path) -> None:
    """A reranker records dozens of figures per evaluation: the curve draws the main scores and
    says how many it left out, without matplotlib's layout warning."""
    import warnings

    from searchsmith.training.trainer import curve_keys, save_training_curve

    figs = {"ndcg@10": 0.8, "mrr@10": 0.7, "queries": 96.0, "ood/ndcg@10": 0.7,
            **{f"src{i}/ndcg@10": 0.5 for i in range(20)},
            **{f"ndcg@10_vs_bm25_{k}": v for k, v in {"diff": 0.1, "lo": -0.1, "hi": 0.2, "p": 0.3,
                                                      "n": 96.0, "direction": 0.0}.items()}}
    history = [{"step": 10, **figs}, {"step": 20, **figs, "ndcg@10": 0.85}]
    keys, others = curve_keys(history)
    assert keys[:2] == ["mrr@10", "ndcg@10"] and len(keys) == 8  # top-level scores first, then by name
    assert "queries" not in keys and not any("_vs_" in k for k in keys)
    assert others == len(figs) - 8
    assert curve_keys([{"step": 1, "loss_scale": 3.0}]) == ([], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = save_training_curve(tmp_path / "curve.png", [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}],
                                  history, "a long title " * 5)
    assert out.is_file() and out.stat().st_size > 1000


def test_sigterm_stops_a_run_with_the_resume_hint_and_a_second_run_into_it_is_refused(tmp_path: Path) -> None:
    """SIGTERM (a scheduler's stop, `kill`) ended the run silently with -15; two runs into one
    folder wrote the same checkpoints."""
    import os
    import signal
    import subprocess
    import sys
    import time

    recipe = Path(__file__).resolve().parents[2] / "recipes/reranker/tiny/bert-tiny_full.yaml"
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "searchsmith.serving.main", "train", str(recipe), "--output-dir", str(run),
           "optim.max_steps=100000", "train.save_every_steps=1", "train.eval_every_steps=0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while not any((run / "checkpoints").glob("step-*")) and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.5)
        assert any((run / "checkpoints").glob("step-*")), first.communicate(timeout=30)
        second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
        assert second.returncode == 1 and "being written by another searchsmith process" in second.stderr
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err[-2000:]
    assert "stopped; run the same command again to resume" in err and "from step-" in err


def test_a_rerun_keeps_the_users_files_in_the_model_and_rotated_checkpoints(tmp_path: Path, capsys) -> None:
    """Audit 2026-12-07: a rerun replaced model/ whole and rotated checkpoint folders out whole,
    deleting a user's notes put in them. The run's own files are replaced or removed; others stay."""
    from searchsmith.training.trainer import CHECKPOINT_FILES

    cfg = _cfg(max_steps=4)
    cfg = _Cfg(optim=cfg.optim, train=TrainConfig(seed=0, mixed_precision="no", save_every_steps=2,
                                                  keep_checkpoints=1, log_every_steps=1, eval_every_steps=0))
    train(_model(), _loss, _batches, cfg, tmp_path)
    step4 = tmp_path / "checkpoints" / "step-4"
    assert sorted(p.name for p in step4.iterdir()) == sorted(CHECKPOINT_FILES)  # what rotation deletes
    (tmp_path / "model" / "MY_NOTES.md").write_text("mine")
    (step4 / "user_note.txt").write_text("mine too")
    capsys.readouterr()
    longer = _Cfg(optim=OptimConfig(lr=1.0e-2, max_steps=8, batch_size=4, warmup_ratio=0.2), train=cfg.train)
    res = train(_model(), _loss, _batches, longer, tmp_path, force=True)
    assert res.step == 8
    assert (tmp_path / "model" / "MY_NOTES.md").read_text() == "mine"
    assert (tmp_path / "model" / "config.json").is_file()  # the model itself was written again
    assert sorted(p.name for p in step4.iterdir()) == ["user_note.txt"]  # the checkpoint's files are gone
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-4", "step-8"]
    out = capsys.readouterr().out
    assert "kept 1 file(s) this run does not write (MY_NOTES.md)" in out and "kept user_note.txt" in out


def test_replace_dir_keeping_and_remove_written(tmp_path: Path) -> None:
    from searchsmith.models.io import remove_written, replace_dir_keeping

    final, tmp = tmp_path / "model", tmp_path / ".model.tmp"
    (final / "sub").mkdir(parents=True)
    (final / "config.json").write_text("old")
    (final / "sub" / "notes.md").write_text("mine")
    tmp.mkdir()
    (tmp / "config.json").write_text("new")
    assert replace_dir_keeping(tmp, final) == ["sub/notes.md"]
    assert (final / "config.json").read_text() == "new" and (final / "sub" / "notes.md").read_text() == "mine"
    assert not tmp.exists() and not list(tmp_path.glob(".model.old-*"))
    # a path the new folder holds as a file cannot keep a file below it: refused, nothing moved
    tmp.mkdir()
    (tmp / "sub").write_text("a file now")
    with pytest.raises(ConfigError, match="sub/notes.md"):
        replace_dir_keeping(tmp, final)
    assert (final / "sub" / "notes.md").read_text() == "mine" and (final / "config.json").read_text() == "new"
    ckpt = tmp_path / "step-2"
    ckpt.mkdir()
    (ckpt / "model.pt").write_text("x")
    assert remove_written(ckpt, ["model.pt", "state.json"]) == [] and not ckpt.exists()
