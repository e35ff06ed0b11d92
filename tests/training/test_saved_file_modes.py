"""A run's model/ is readable by whoever may read the run: safetensors writes model.safetensors
0600 whatever the umask, while every other file of a run is 0666 & ~umask (0644 under 022),
so a team sharing a run folder could read all of it but the weights."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
from searchsmith.models.io import give_plain_modes, plain_file_mode
from searchsmith.training.trainer import save_model


@pytest.fixture
def umask():
    """``umask(m)`` sets the process umask for the test; the old one is put back after."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _tiny_model() -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32,
                                                    max_position_embeddings=16, num_labels=1))


@pytest.mark.parametrize(("mask", "want"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_plain_file_mode_is_what_open_gives(umask, tmp_path, mask, want) -> None:
    umask(mask)
    assert plain_file_mode() == want
    (tmp_path / "f").write_text("x")
    assert _mode(tmp_path / "f") == want
    assert os.umask(mask) == mask  # reading it left it as it was


def test_the_saved_weights_are_not_private_under_umask_022(umask, tmp_path) -> None:
    umask(0o022)
    out = save_model(_tiny_model(), None, tmp_path / "run" / "model")
    files = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in files and "config.json" in files
    assert {p.name: _mode(p) for p in out.iterdir()} == {name: 0o644 for name in files}


def test_a_stricter_umask_is_respected(umask, tmp_path) -> None:
    umask(0o077)
    out = save_model(_tiny_model(), None, tmp_path / "model")
    assert _mode(out / "model.safetensors") == 0o600 and _mode(out / "config.json") == 0o600


def test_a_users_file_kept_in_model_keeps_its_mode(umask, tmp_path) -> None:
    umask(0o022)
    out = tmp_path / "model"
    save_model(_tiny_model(), None, out)
    notes = out / "notes.txt"
    notes.write_text("mine")
    notes.chmod(0o600)  # the user's choice, not the project's to widen
    save_model(_tiny_model(), None, out)  # a rerun: carries notes.txt over
    assert notes.read_text() == "mine" and _mode(notes) == 0o600
    assert _mode(out / "model.safetensors") == 0o644


def test_give_plain_modes_changes_files_only(umask, tmp_path) -> None:
    umask(0o022)
    folder = tmp_path / "saved"
    (folder / "sub").mkdir(parents=True)
    private = folder / "sub" / "w.safetensors"
    private.write_bytes(b"x")
    private.chmod(0o600)
    plain = folder / "a.json"
    plain.write_text("{}")
    outside = tmp_path / "elsewhere.txt"  # not the folder's: a link to it is not followed
    outside.write_text("t")
    outside.chmod(0o600)
    (folder / "link").symlink_to(outside)
    assert give_plain_modes(folder) == [private]
    assert _mode(private) == 0o644 and _mode(plain) == 0o644
    assert _mode(outside) == 0o600
    assert _mode(folder / "sub") == 0o755
