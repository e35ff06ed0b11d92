"""Held-out inputs of the export's parity check and int8 calibration (models/parity_inputs.py):
the demo data by default, the user's file with ``--parity-data``."""

from __future__ import annotations

import json

import pytest
from export_fixtures import embedder_dir, rerank_run
from searchsmith.models import parity_inputs as pi
from searchsmith.models.errors import ConfigError
from searchsmith.models.export import ExportOptions, ParityThresholds


def _jsonl(path, rows) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return str(path)


def test_txt_and_jsonl_files_give_texts_and_groups(tmp_path) -> None:
    txt = tmp_path / "t.txt"
    txt.write_text("first text\n\n  \nsecond text\n", encoding="utf-8")
    assert pi.read_parity_data(txt) == (["first text", "second text"], [])
    path = _jsonl(tmp_path / "d.jsonl", [{"text": "a"}, "", {"query": "q", "passages": ["p1", "p2"]}, {"text": "b"}])
    texts, groups = pi.read_parity_data(path)
    assert texts == ["a", "b"] and groups == [("q", ["p1", "p2"])]


@pytest.mark.parametrize(("content", "match"), [
    ("", "holds no texts"),
    ('{"text": "a"}\n{"text": \n', r"line 2: not JSON"),
    ('{"text": "a"}\n["a"]\n', r"line 2: expected \{\"text\": str\}.*got list"),
    ('{"txt": "a"}\n', r"line 1: expected .*got \['txt'\]"),
    ('{"text": 3}\n', r"line 1 field 'text': expected a string, got int"),
    ('{"text": "   "}\n', r"line 1 field 'text': empty text"),
    ('{"query": "q", "passages": ["only one"]}\n', r"line 1 field 'passages': expected a list of at least 2"),
    ('{"query": "q", "passages": ["p", ""]}\n', r"line 1 field 'passages'\[1\]: empty text"),
])
def test_malformed_files_name_the_line_and_the_fix(tmp_path, content, match) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        pi.read_parity_data(path)


def test_missing_huge_and_binary_files_are_refused(tmp_path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"--parity-data: .*nope.txt' is not a file"):
        pi.read_parity_data(tmp_path / "nope.txt")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"ok\n\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8 text .*re-encode"):
        pi.read_parity_data(binary)
    big = tmp_path / "big.txt"
    big.write_text("x\n" * 100, encoding="utf-8")
    monkeypatch.setattr(pi, "MAX_PARITY_DATA_BYTES", 50)
    with pytest.raises(ConfigError, match=r"200 bytes, the limit is 50 \(MAX_PARITY_DATA_BYTES\)"):
        pi.read_parity_data(big)


def test_file_inputs_split_parity_from_calibration(tmp_path) -> None:
    rows = [{"text": f"text {i}"} for i in range(10)] + [{"query": f"q{i}", "passages": [f"p{i}a", f"p{i}b"]}
                                                       for i in range(5)]
    path = _jsonl(tmp_path / "d.jsonl", rows)
    got = pi.file_inputs(path, "embed", n=8, calibration=4)
    assert got.texts == [f"text {i}" for i in range(8)] and got.questions == got.texts
    assert got.calibration_texts == ["text 8", "text 9", "q0", "p0a"]
    assert got.source.startswith("d.jsonl (sha256 ")
    rr = pi.file_inputs(path, "rerank", n=8, calibration=8)  # 8 // 4 = 2 parity groups, 8 // 4 calibration
    assert [q for q, _ in rr.groups] == ["q0", "q1"] and [q for q, _ in rr.calibration_groups] == ["q2", "q3"]
    with pytest.raises(ConfigError, match=r"reranker's parity needs 8 \(query, passages\) groups, d.jsonl has 5"):
        pi.file_inputs(path, "rerank", n=32)
    texts_only = _jsonl(tmp_path / "t.jsonl", [{"text": "a"}, {"text": "b"}])
    with pytest.raises(ConfigError, match=r"needs 2 \(query, passages\) groups, t.jsonl has 0"):
        pi.file_inputs(texts_only, "rerank", n=8)
    one = _jsonl(tmp_path / "one.jsonl", [{"text": "a"}])
    with pytest.raises(ConfigError, match="at least 2 texts, one.jsonl has 1"):
        pi.file_inputs(one, "embed", n=8)


def test_parity_inputs_count_is_checked() -> None:
    for bad in (1, 0, 10_000, True, "8"):
        with pytest.raises(ConfigError, match=r"--parity-inputs: expected an int in 2..4096"):
            ParityThresholds(heldout_texts=bad)  # type: ignore[arg-type]


def test_export_checks_parity_and_calibrates_on_the_file(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    texts = [f"Domain sentence number {i} about enzymes and proteins." for i in range(40)]
    data = tmp_path / "domain.txt"
    data.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    smooth = ["--int8-down-projections", "smooth"]  # the products that calibrate
    assert main(["export", "embedder", "--model", str(embedder_dir()), "--out", str(out), "--dtype", "int8",
                 "--allow-drift", "--parity-data", str(data), "--parity-inputs", "8", *smooth]) == 0
    m = json.loads((out / "manifest.json").read_text())
    report = json.loads((out / "parity_report.json").read_text())
    assert m["parity"]["inputs"].startswith("domain.txt (sha256 ") and report["heldout"] == m["parity"]["inputs"]
    assert report["thresholds"]["heldout_texts"] == 8
    assert m["graphs"]["model"]["int8"]["down_projections"] == "smooth"  # calibrated on the 32 texts left
    # a file with no texts left after the parity ones: nothing to calibrate on, fp32 down-projections
    data.write_text("\n".join(texts[:8]) + "\n", encoding="utf-8")
    assert main(["export", "embedder", "--model", str(embedder_dir()), "--out", str(tmp_path / "e2"),
                 "--dtype", "int8", "--allow-drift", "--parity-data", str(data), "--parity-inputs", "8", *smooth]) == 0
    m2 = json.loads((tmp_path / "e2" / "manifest.json").read_text())
    assert m2["graphs"]["model"]["int8"]["down_projections"] == "fp32"
    # the default is the demo data
    assert main(["export", "embedder", "--model", str(embedder_dir()), "--out", str(tmp_path / "e3")]) == 0
    m3 = json.loads((tmp_path / "e3" / "manifest.json").read_text())
    assert m3["parity"]["inputs"].startswith("searchsmith.models.demo")
    capsys.readouterr()


def test_a_bad_parity_file_fails_before_anything_is_written(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    data = _jsonl(tmp_path / "d.jsonl", [{"text": "a"}, {"text": "b"}])
    out = tmp_path / "rr"
    assert main(["export", str(rerank_run()), "--out", str(out), "--parity-data", data]) == 1
    err = capsys.readouterr().err
    assert "export --parity-data: the reranker's parity needs 8 (query, passages) groups, d.jsonl has 0" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]
    with pytest.raises(ConfigError, match="--parity-inputs"):
        ExportOptions(thresholds=ParityThresholds(heldout_texts=1))
    capsys.readouterr()
