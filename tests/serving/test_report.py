"""searchsmith report: the evaluations run, report.md / report.json / plots written, user folders refused."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.main import main
from searchsmith.serving.report import check_report_out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A quick report on the demo data, at three questions and three routing items (index built inside)."""
    out = tmp_path_factory.mktemp("report") / "r"
    assert main(["report", "--out", str(out), "--quick", "--limit", "3"]) == 0
    return out


def test_report_writes_every_section_with_its_plots(report) -> None:
    md = (report / "report.md").read_text()
    for heading in ("# searchsmith evaluation report (quick)", "## 1. Routing (KIMAs)", "## 2. Strategies (SRSA)",
                    "## 3. Threshold sweeps (Xinyu)", "### citation.cosine_threshold", "### retrieval.dedup_threshold",
                    "### retrieval.keep_ratio"):
        assert heading in md, heading
    assert "- git commit: " in md and "- machine: " in md and "searchsmith eval route --data" in md
    assert md.count("values that beat it beyond the noise: ") == 3
    data = json.loads((report / "report.json").read_text())
    assert data["size"] == "quick" and data["bootstrap"]["resamples"] > 0
    assert set(data["routing"]["modes"]) == {"parallel", "serial", "auto"}
    assert "forced_direct" in data["strategies"]["strategy_ablation"] and data["strategies"]["n"] == 3
    assert set(data["sweeps"]) == {"citation.cosine_threshold", "retrieval.dedup_threshold", "retrieval.keep_ratio"}
    for res in data["sweeps"].values():
        assert res["default"] in res["values"] and "vs_default" in res["verdicts"]["f1"]
    pngs = sorted(report.glob("*.png"))
    assert len(pngs) == 5 and all(p.stat().st_size > 1000 for p in pngs)
    listed = json.loads((report / "manifest.json").read_text())["files"]
    assert {p.name for p in pngs} | {"report.md", "report.json"} <= set(listed)
    assert any(f.startswith("index/") for f in listed)  # the index it built is part of the report
    check_report_out(report)  # a previous report may be replaced


def test_report_refuses_a_folder_it_did_not_write(tmp_path, report, capsys) -> None:
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    assert main(["report", "--out", str(user), "--quick", "--limit", "1"]) == 1
    assert "not a searchsmith report" in capsys.readouterr().err
    assert (user / "notes.txt").read_text() == "keep me" and sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    # a previous report with a user file added is refused too: replacing it would delete the file
    (report / "mine.txt").write_text("x")
    try:
        with pytest.raises(ValidationError, match="did not write"):
            check_report_out(report)
    finally:
        (report / "mine.txt").unlink()
