"""searchsmith eval compare: two --per-item files of the same data, paired item by item."""

from __future__ import annotations

import json

import pytest
from searchsmith.serving.main import main


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_compare_pairs_items_and_reports_the_difference_interval_and_p(tmp_path, capsys) -> None:
    a = [{"i": i, "mode": m, "recall@1": float(i % 2), "mrr": 0.5} for i in range(30) for m in ("serial", "auto")]
    b = [{**r, "recall@1": 1.0} for r in a]
    rc = main(["eval", "compare", _write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", b), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["paired_by"] == ["i", "mode"] and out["paired"] == 60
    got = {m["metric"]: m for m in out["metrics"]}
    assert got["recall@1"]["diff"] == 0.5 and got["recall@1"]["p_value"] < 0.01 and got["recall@1"]["significant"]
    lo, hi = got["recall@1"]["diff_ci95"]
    assert 0.3 < lo <= 0.5 <= hi < 0.7
    assert got["mrr"]["diff"] == 0.0 and got["mrr"]["p_value"] == 1.0 and got["mrr"]["diff_ci95"] == [0.0, 0.0]
    # one metric, an explicit key
    assert main(["eval", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--metric", "mrr",
                 "--key", "i,mode", "--json"]) == 0
    assert [m["metric"] for m in json.loads(capsys.readouterr().out)["metrics"]] == ["mrr"]


def test_a_metric_that_is_not_a_number_in_some_items_is_said_to_be_skipped(tmp_path, capsys) -> None:
    a = [{"id": str(i), "f1": 0.5, "em": 0.0} for i in range(6)]
    b = [{**r, "f1": "oops" if r["id"] == "0" else 1.0} for r in a]  # the first item: f1 was not even a candidate
    assert main(["eval", "compare", _write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["metric"] for m in out["metrics"]] == ["em"]
    assert out["skipped"] == [{"metric": "f1", "items_not_numeric": 1, "first": {"id": "0"}}]
    assert main(["eval", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--metric", "f1"]) == 1
    assert "'f1' is not a number in every paired item (1 of 6, first {'id': '0'})" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["eval", "compare", "A"], "give two --per-item files"),
    (["eval", "route", "X.jsonl"], "unexpected argument"),
    (["eval", "route"], "--data is required"),
])
def test_compare_and_tasks_refuse_the_wrong_arguments(argv, message, capsys) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_compare_names_the_key_fields_it_can_use(tmp_path, capsys) -> None:
    a = _write(tmp_path / "a.jsonl", [{"name": "q1", "f1": 0.5}])
    assert main(["eval", "compare", a, a]) == 1
    assert "none of the fields id, qid, i" in capsys.readouterr().err
    assert main(["eval", "compare", a, a, "--key", "nope"]) == 1
    assert "field(s) ['nope'] are not in both files" in capsys.readouterr().err
