"""eval rerank --run: a TREC run file that is empty, not text, or for other queries is refused
before the model loads (an empty run scored nDCG@10 0.0 and exited 0)."""

from __future__ import annotations

import pytest
from beir_folder import synthetic_beir
from searchsmith.serving.main import main


@pytest.mark.parametrize("content, message", [
    (b"", "holds no run lines"),
    (b"\xff\xfe\x00binary", "is not UTF-8 text (byte 0)"),
    (b"other-q Q0 d0 1 1.0 tag\n", "has candidates for none of the"),
])
def test_a_bad_run_file_is_refused(tmp_path, capsys, content, message) -> None:
    data = synthetic_beir(tmp_path / "beir")
    run = tmp_path / "run.txt"
    run.write_bytes(content)
    assert main(["eval", "rerank", "--data", str(data), "--run", str(run), "--bundle", str(tmp_path / "none")]) == 1
    assert message in capsys.readouterr().err


def test_a_first_stage_beside_a_run_is_refused(tmp_path, capsys) -> None:
    data = synthetic_beir(tmp_path / "beir")
    run = tmp_path / "run.txt"
    run.write_text("x Q0 d0 1 1.0 tag\n")
    assert main(["eval", "rerank", "--data", str(data), "--run", str(run), "--first-stage", "dense"]) == 1
    assert "give one of the two" in capsys.readouterr().err
