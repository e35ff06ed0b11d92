"""searchsmith report: the evaluations run, report.md / report.json / plots written, the README's
quality table generated from the claims, user folders refused."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.main import main
from searchsmith.serving.report import (
    QUALITY_END,
    QUALITY_START,
    SECTIONS,
    Build,
    _claims_models,
    _run_models,
    check_report_out,
    read_report,
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A quick report on the demo data, at three questions and six routing items (index built inside)."""
    out = tmp_path_factory.mktemp("report") / "r"
    assert main(["report", "--out", str(out), "--quick", "--limit", "6"]) == 0
    return out


def test_report_writes_every_section_with_its_plots(report) -> None:
    md = (report / "report.md").read_text()
    for heading in ("# searchsmith evaluation report (quick)", "## Claims and verdicts", "Routing (KIMAs)",
                    "Strategies (SRSA)", "Protocol router (IMACS)", "Stage ablations (Xinyu)",
                    "Threshold sweeps (Xinyu)", "Models against their untrained baselines",
                    "### demo: citation.cosine_threshold", "### demo: retrieval.dedup_threshold",
                    "### demo: retrieval.keep_ratio"):
        assert heading in md, heading
    assert "- git commit: " in md and "- machine: " in md and "searchsmith eval route --data" in md
    assert "searchsmith eval bandit --data" in md and "searchsmith eval ablate --data" in md
    data = json.loads((report / "report.json").read_text())
    assert data["size"] == "quick" and data["bootstrap"]["resamples"] > 0
    assert data["sections"] == [s.key for s in SECTIONS if s.quick]
    assert set(data["routing"]["demo"]["modes"]) == {"parallel", "serial", "auto"}
    assert "recall@1" in data["routing"]["demo"]["rewrite_alone"]["all"]
    assert "forced_direct" in data["strategies"]["demo"]["strategy_ablation"]
    assert data["strategies"]["demo"]["n"] == 6
    assert data["bandit"]["demo"]["n"] == 6 and len(data["bandit"]["demo"]["seeds"]) == 3
    assert set(data["sweeps"]["demo"]) == {"citation.cosine_threshold", "retrieval.dedup_threshold",
                                           "retrieval.keep_ratio"}
    for res in data["sweeps"]["demo"].values():
        assert res["default"] in res["values"] and "vs_default" in res["verdicts"]["f1"]
    # one claim per design claim measured: SRSA once, IMACS per lambda, each sweep, each ablated stage
    claims = [c["claim"] for c in data["claims"]]
    assert sum(c.startswith("SRSA") for c in claims) == 1
    assert sum(c.startswith("IMACS") for c in claims) == len(data["bandit"]["demo"]["lambdas"])
    assert sum(c.startswith("Xinyu: retrieval.") or c.startswith("Xinyu: citation.") for c in claims) == 3
    assert any(c.startswith("Xinyu") and "." not in c.split(":")[1].split()[0] for c in claims)  # a stage
    # hybrid search is searchsmith's own stage, not a claim of Xinyu's design
    assert any(c.startswith("searchsmith: lexical: hybrid search") for c in claims)
    assert not any(c.startswith("Xinyu: lexical") for c in claims)
    for c in data["claims"]:
        assert set(c) == {"claim", "data", "measured", "verdict"} and all(c.values())
    pngs = sorted(report.glob("*.png"))
    assert len(pngs) == 7 and all(p.stat().st_size > 1000 for p in pngs)
    listed = json.loads((report / "manifest.json").read_text())["files"]
    assert {p.name for p in pngs} | {"report.md", "report.json"} <= set(listed)
    assert any(f.startswith("index/") for f in listed)  # the index it built is part of the report
    assert "items/pipeline_demo.jsonl" in listed and "items/route_demo.jsonl" in listed
    check_report_out(report)  # a previous report may be replaced


def test_routing_verdict_pairs_the_follow_ups(tmp_path) -> None:
    """The KIMAs claim is a paired test on the follow-ups only (the demo set's first follow-ups)."""
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--quick", "--sections", "routing", "--limit", "60"]) == 0
    data = read_report(out)
    paired = data["routing"]["demo"]["paired_followups"]
    assert set(paired) == {"rewrite + raw fusion", "rewrite alone", "auto"}
    assert paired["auto"]["n"] == data["routing"]["demo"]["followups"] > 0
    (claim,) = data["claims"]
    assert claim["claim"].startswith("KIMAs") and f"n={paired['auto']['n']}" in claim["data"]
    assert claim["verdict"].split(":")[0] in ("holds", "not shown", "refuted")


def test_readme_table_comes_from_the_report(tmp_path, report) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{QUALITY_START}\nold table\n{QUALITY_END}\nafter\n")
    assert main(["report", "--from", str(report), "--readme", str(readme)]) == 0
    text = readme.read_text()
    data = read_report(report)
    assert "old table" not in text and text.startswith("# x\n\nbefore\n") and text.endswith("after\n")
    table = text.split(QUALITY_START)[1].split(QUALITY_END)[0]
    assert table.count("\n| ") == len(data["claims"]) + 1  # the header, then one row per claim
    assert data["claims"][0]["verdict"] in table and data["command"] in table
    # a README without the markers is refused and kept as it was
    other = tmp_path / "OTHER.md"
    other.write_text("no markers\n")
    assert main(["report", "--from", str(report), "--readme", str(other)]) == 1
    assert other.read_text() == "no markers\n"


def test_bad_options_are_refused_before_anything_runs(tmp_path, capsys) -> None:
    out = tmp_path / "r"
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval: {top_k: many}\n")  # found only after 22 s of work before
    for argv, words in ((["--out", str(out), "--sections", "routing,nope"], "unknown section"),
                        (["--out", str(out), "--quick", "--data-dir", str(tmp_path)], "demo data only"),
                        (["--from", str(tmp_path)], "give --readme"),
                        (["--quick"], "--out DIR is required"),
                        (["--out", str(out), "--data-dir", str(tmp_path / "none")], "not a folder"),
                        (["--out", str(out), "--config", str(tmp_path / "none.yaml")], "does not exist"),
                        (["--out", str(out), "--quick", "--limit", "-3"], "--limit: must be >= 0"),
                        (["--out", str(out), "--quick", "--config", str(bad)], "retrieval")):
        assert main(["report", *argv]) == 1, argv
        assert words in capsys.readouterr().err, argv
    assert not out.exists()
    with pytest.raises(ValidationError, match="not a searchsmith report"):
        read_report(tmp_path)


def test_models_section_reads_the_configured_bundles_gates(tmp_path) -> None:
    def bundle(name: str, task: str, metrics: dict) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({"task": task, "heldout_metrics": metrics}))
        return str(folder)

    good = bundle("rr", "rerank", {"ndcg@10": 0.9, "baselines": {"bi_encoder_ndcg@10": 0.8},
                                   **{f"ndcg@10_vs_bi_encoder_{k}": v for k, v in
                                      {"diff": 0.1, "lo": 0.05, "hi": 0.15, "p": 0.001, "n": 100,
                                       "direction": 1}.items()}})
    bad = bundle("im", "images", {"ood": {"placement_accuracy": 0.5, "vision_placement_net": -0.2},
                                  "baselines": {"ood_cosine_placement_accuracy": 0.6,
                                                "ood_no_placement_net": 0.0}})
    reader = bundle("rd", "read", {"ood": {"f1": 0.102}, "baselines": {"ood_sentence_f1": 0.148}})
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(f"bundles:\n  reranker: {good}\n  images: {bad}\n  reader: {reader}\n")
    b = Build(tmp=tmp_path, quick=True, config=str(cfg), routing_limit=0, datasets={}, say=print)
    res = _run_models(b)
    assert res["gates"]["rerank"]["used"] is True and res["gates"]["images"]["used"] is False
    claims = {c["claim"]: c for c in _claims_models(res)}
    assert claims["the trained reranker (rerank) beats its untrained baseline"]["verdict"] == "holds: used"
    # every gated model has its row, the reader too (it was left out of the table)
    assert claims["the trained reader (read) beats its untrained baseline"]["verdict"] == (
        "refuted: below its baseline (gated off)")
    assert claims["the trained image model (images) beats its untrained baseline"]["verdict"] == (
        "refuted: below its baseline (gated off)")
    # a bundle that records no figure for a use is not refuted by it: nothing was measured
    assert claims["the trained image model (vision) beats its untrained baseline"]["verdict"] == (
        "refuted: below its baseline (gated off)")
    blank = bundle("im2", "images", {})
    cfg.write_text(f"bundles:\n  images: {blank}\n")
    res = _run_models(Build(tmp=tmp_path, quick=True, config=str(cfg), routing_limit=0, datasets={}, say=print))
    verdicts = {c["claim"]: c["verdict"] for c in _claims_models(res)}
    assert verdicts["the trained image model (images) beats its untrained baseline"] == (
        "not testable here: the bundle records no such figure (gated off)")
    empty = _run_models(Build(tmp=tmp_path, quick=True, config=None, routing_limit=0, datasets={}, say=print))
    assert empty["gates"] == {} and _claims_models(empty) == []


def test_a_model_leading_inside_the_noise_is_not_shown_not_refuted() -> None:
    """The full profile's reranker led both baselines on SciFact by 0.025 and 0.028 with p 0.16
    and 0.39: gated off, but not refuted; its claim carries the paired test."""
    from searchsmith.serving.report import model_verdict

    def gate(value, base, beyond=None, used=False, **extra):
        f = {"metric": "nDCG@10", "value": value, "baseline": "BM25", "baseline_value": base}
        if beyond is not None:
            f.update(beyond_noise=beyond, paired_test="paired difference +0.025 [-0.008, +0.060], p 0.16, 96 items")
        return {"role": "reranker", "used": used, "figures": [f], **extra}

    assert model_verdict(gate(0.9, 0.8, True, used=True)) == "holds: used"
    assert model_verdict(gate(0.865, 0.84, False)) == "not shown: it leads inside the noise (gated off)"
    assert model_verdict(gate(0.8, 0.84, None)) == "refuted: below its baseline (gated off)"
    assert model_verdict(gate(0.84, 0.84, None)) == "not shown: it only ties with its baseline (gated off)"
    assert model_verdict(gate(0.9, 0.84, None)).startswith("not testable here: the bundle records no paired test")
    off = gate(0.8, 0.84, None, used=True, gate="off (bundles.gate_rerank: false)")
    assert model_verdict(off) == "refuted: below its baseline (used: gate off)"
    older = gate(0.865, 0.84, False)  # a stored report from before the flag: the test's text only
    del older["figures"][0]["beyond_noise"]
    assert model_verdict(older) == "not shown: it leads inside the noise (gated off)"
    claim = _claims_models({"gates": {"rerank": gate(0.865, 0.84, False)}})[0]
    assert "(paired difference +0.025 [-0.008, +0.060], p 0.16, 96 items)" in claim["measured"]


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


@pytest.mark.slow
@pytest.mark.shared_data
def test_report_on_the_shared_data_adds_cast_and_multihop(tmp_path, shared_data) -> None:
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--data-dir", str(shared_data), "--limit", "4",
                 "--sections", "routing,strategies"]) == 0
    data = read_report(out)
    assert set(data["data"]) == {"demo", "cast", "multihop"}
    assert set(data["routing"]) == {"demo", "cast"} and set(data["strategies"]) == {"demo", "multihop"}
    assert (out / "data" / "multihop" / "index" / "manifest.json").is_file()


def test_claims_of_unknown_report_sections_fail_loudly() -> None:
    with pytest.raises(ConfigError, match="unknown section"):
        from searchsmith.serving.report import _pick_sections

        _pick_sections("routing,bandits")


def test_field_section_claims_pair_each_model_with_its_baseline(tmp_path) -> None:
    from searchsmith.serving.report import _claims_field, _render_field, _run_field

    assert _run_field(Build(tmp=tmp_path, quick=False, config=None, routing_limit=0, datasets={}, say=print)) == {}
    assert "need `--data-dir`" in "\n".join(_render_field({}))

    def pair(a: float, b: float, lo: float, hi: float, p: float) -> dict:
        return {"n": 50, "a": a, "b": b, "diff": b - a, "diff_ci95": [lo, hi], "p_value": p}

    section = {"paired": {"decompose:decompose_break_sari": pair(0.49, 0.31, -0.2, -0.16, 0.0001),
                          "decompose:decompose_break_ged": pair(0.81, 0.76, -0.07, -0.03, 0.001),  # lower is better
                          "beir:rerank/ndcg@10": pair(0.837, 0.84, -0.02, 0.03, 0.7)},
               "beir": {"systems": {"bm25": "BM25"}, "bm25/ndcg@10": 0.837, "bm25/ndcg@10_ci95": [0.78, 0.89],
                        "bm25/recall@100": 0.98, "protocol": "BEIR-style"}}
    claims = {c["claim"].split(":")[0] + ":" + c["measured"].split()[0]: c["verdict"] for c in _claims_field(section)}
    assert claims == {"Break:decompose_break_sari": "refuted: the baseline is better",
                      "Break:decompose_break_ged": "holds",
                      "SciFact (BEIR-style, BM25 top-100 over the whole corpus):rerank/ndcg@10":
                          "not shown: inside the noise"}
    text = "\n".join(_render_field(section))
    assert "| decompose: decompose_break_sari | 0.310 | the question as one node 0.490 |" in text
    assert "bm25 nDCG@10 0.837 [0.78, 0.89]" in text


@pytest.mark.slow
@pytest.mark.shared_data
def test_field_section_runs_on_the_shared_data(tmp_path, shared_data) -> None:
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--data-dir", str(shared_data), "--sections", "field",
                 "--limit", "2"]) == 0
    data = read_report(out)
    assert "beir" in data["field"] and data["field"]["beir"]["queries"] > 0
    assert any(c["claim"].startswith("SciFact") for c in data["claims"]) is False  # no reranker configured


def test_srsa_claim_holds_on_a_tie_on_every_question_and_not_on_a_tie_inside_the_noise() -> None:
    """The claim is "answers as well as the best forced strategy": routed equal to it on every
    question holds it; a mean difference of zero made of gains and losses is only inside the noise."""
    from searchsmith.models.stats import paired_difference
    from searchsmith.serving.report import _claims_strategies

    def section(forced, routed):
        calls = paired_difference([1.0] * len(forced), [1.0] * len(routed), "model_calls").to_dict()
        f1 = paired_difference(forced, routed, "f1").to_dict()
        return {"demo": {"best_forced": "forced_direct", "routed_strategies": {"direct": 2, "parallel": 2},
                         "routed_vs_best_forced": {"f1": f1, "model_calls": calls}}}

    verdict = {name: _claims_strategies(section(*pair))[0]["verdict"] for name, pair in {
        "tie": ([1.0, 0.5, 0.0, 1.0], [1.0, 0.5, 0.0, 1.0]),
        "mixed": ([1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]),
        "better": ([0.0] * 12, [1.0] * 12),
        "worse": ([1.0] * 12, [0.0] * 12)}.items()}
    assert verdict == {"tie": "holds: the same answer F1 on every question", "mixed": "not shown: inside the noise",
                       "better": "holds: routed answers better", "worse": "refuted: the forced strategy answers better"}


@pytest.fixture()
def models_report(tmp_path):
    """A report of the models section alone (no index, seconds) and a README with the markers."""
    out, readme = tmp_path / "rep", tmp_path / "README.md"
    assert main(["report", "--out", str(out), "--sections", "models"]) == 0
    readme.write_text(f"# x\n{QUALITY_START}\nold\n{QUALITY_END}\n")
    return out, readme


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(sections=["models", "nosuch"]), "'sections' names 'nosuch', not a section"),
    (lambda r: r.pop("machine"), "no 'machine' key"),
    (lambda r: r.update(bootstrap=[]), "'bootstrap' must be an object"),
    (lambda r: r["models"].pop("gates"), "no key 'gates'"),  # inside a section: found while recomputing
])
def test_from_an_edited_report_json_names_the_key_and_the_fix(models_report, capsys, edit, words) -> None:
    """report --from on an edited report.json was a traceback (KeyError: 'nosuch' / 'machine')."""
    out, readme = models_report
    data = json.loads((out / "report.json").read_text())
    edit(data)
    (out / "report.json").write_text(json.dumps(data))
    before = {p: p.read_bytes() for p in (out / "report.json", out / "report.md", readme)}
    assert main(["report", "--from", str(out), "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert f"{out / 'report.json'}" in err and words in err, err
    assert "Re-run the report (searchsmith report --out" in err and "rather than edit report.json" in err
    assert {p: p.read_bytes() for p in before} == before  # nothing rewritten


def test_readme_is_checked_before_the_report_runs(tmp_path, models_report, capsys, monkeypatch) -> None:
    """A wrong --readme failed only after the whole report (about 1,400 s at the full size)."""
    import searchsmith.serving.report as report_mod

    def must_not_run(*args, **kwargs):
        raise AssertionError("the report ran before --readme was checked")

    monkeypatch.setattr(report_mod, "write_report", must_not_run)
    monkeypatch.setattr(report_mod, "refresh_report", must_not_run)
    folder = tmp_path / "folder.md"
    folder.mkdir()
    cases = {"nope.md": (None, "no such file"), "folder.md": (None, "not a file"),
             "plain.md": ("# no markers\n", f"holds 0 {QUALITY_START} and 0 {QUALITY_END}"),
             "twice.md": (f"{QUALITY_START}\n{QUALITY_END}\n{QUALITY_START}\n{QUALITY_END}\n",
                          f"holds 2 {QUALITY_START} and 2 {QUALITY_END}"),
             "reversed.md": (f"{QUALITY_END}\n{QUALITY_START}\n", f"{QUALITY_END} before {QUALITY_START}")}
    rep, _ = models_report
    for name, (text, words) in cases.items():
        readme = tmp_path / name
        if text is not None:
            readme.write_text(text)
        for argv in (["--out", str(tmp_path / "r"), "--sections", "models"], ["--from", str(rep)]):
            assert main(["report", *argv, "--readme", str(readme)]) == 1, (name, argv)
            err = capsys.readouterr().err
            assert f"report --readme {readme}: " in err and words in err, (name, err)
        if text is not None:
            assert readme.read_text() == text
    assert not (tmp_path / "r").exists()
