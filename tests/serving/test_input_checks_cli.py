"""Bad input on the command line answered with a clear error naming the option, never a
traceback, a silent default or a run without end (found by a CLI audit)."""

from __future__ import annotations

import argparse
import json
import logging

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.serving.main import EVAL_TASKS, configure_eval, main


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def pair(tmp_path) -> list[str]:
    """Two --per-item files of the same items, for eval compare."""
    a = [{"id": str(i), "f1": 0.5} for i in range(20)]
    return [_write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", [{**r, "f1": 0.75} for r in a])]


def _eval_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_eval(parser)
    return parser.parse_args(argv)


# -- finding 3: seeds, resamples -----------------------------------------------------------------
@pytest.mark.parametrize("argv,match", [
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--resamples", "100000000"], "--resamples: expected a whole number >= 100 and at most 100000"),
    (["--resamples", "0"], "--resamples: expected a whole number >= 100"),
])
def test_compare_seed_and_resamples_are_checked(pair, capsys, argv, match) -> None:
    assert main(["eval", "compare", *pair, *argv]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


@pytest.mark.parametrize("seeds,match", [("100000000", "at most 1000"), ("0", ">= 1"), ("-3", ">= 1")])
def test_bandit_seeds_have_a_documented_range(tmp_path, capsys, seeds, match) -> None:
    assert main(["eval", "bandit", "--data", str(tmp_path / "qa.jsonl"), "--index", str(tmp_path),
                 "--seeds", seeds]) == 1
    err = capsys.readouterr().err
    assert "--seeds" in err and match in err


def test_bandit_options_checked_when_called_directly() -> None:
    from searchsmith.serving.bandit_eval import MAX_RESAMPLES, MAX_SEEDS, eval_bandit

    base = {"data": "missing.jsonl", "index": "missing", "config": None, "lambdas": None, "seeds": 5,
            "quality": "f1", "limit": 0, "plot": None, "per_item": None, "resamples": 2000, "seed": 0,
            "bundle": None, "checkpoint": None}
    for kw, match in (({"seeds": MAX_SEEDS + 1}, "--seeds"), ({"resamples": MAX_RESAMPLES + 1}, "--resamples"),
                      ({"seed": -1}, "--seed"), ({"quality": ""}, "--quality is empty")):
        with pytest.raises(ConfigError, match=match):
            eval_bandit(argparse.Namespace(**{**base, **kw}))


def test_the_limits_are_in_the_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "at most 1000" in out and "at most 100000" in out


# -- finding 4: empty strings are refused, not read as "the default" -----------------------------
@pytest.mark.parametrize("argv,option", [
    (["--key", ""], "--key"), (["--key", " , "], "--key"), (["--per-item", ""], "--per-item"),
    (["--metric", ""], "--metric"), (["--plot", ""], "--plot"),
])
def test_empty_eval_compare_options_are_refused(pair, capsys, argv, option) -> None:
    assert main(["eval", "compare", *pair, *argv]) == 1
    err = capsys.readouterr().err
    assert f"{option} is empty" in err or f"{option}: names no field" in err


@pytest.mark.parametrize("task,option", [("ablate", "--stages"), ("bandit", "--quality"), ("sweep", "--param"),
                                         ("sweep", "--values"), ("pipeline", "--index"), ("pipeline", "--data"),
                                         ("pipeline", "--bundle"), ("sweep", "--corpus"), ("bandit", "--lambdas")])
def test_empty_eval_options_are_refused_before_any_work(tmp_path, capsys, task, option) -> None:
    argv = {"--data": str(tmp_path / "qa.jsonl"), "--index": str(tmp_path / "index"), option: ""}
    assert main(["eval", task, *(x for kv in argv.items() for x in kv)]) == 1
    err = capsys.readouterr().err
    assert f"{option} is empty" in err, err


def test_empty_stages_and_quality_are_refused_by_the_functions_too() -> None:
    from searchsmith.serving.ablation import STAGES, parse_stages

    assert parse_stages(None) == list(STAGES)
    with pytest.raises(ConfigError, match="--stages is empty"):
        parse_stages("")
    with pytest.raises(ConfigError, match="--stages is empty"):
        parse_stages(" , ")


def test_serve_config_empty_is_refused_like_the_other_commands(tmp_path, monkeypatch) -> None:
    from searchsmith.serving.serve_cli import load_config

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="config file path is empty"):
        load_config(argparse.Namespace(config="", overrides=[], index=None))
    with pytest.raises(ConfigError, match="config file path is empty"):
        load_config(argparse.Namespace(config="  ", overrides=[], index=None))


def test_report_empty_options_are_refused(tmp_path, capsys, monkeypatch) -> None:
    from searchsmith.serving import report

    def ran(*a, **kw):
        raise AssertionError("the report ran")

    monkeypatch.setattr(report, "write_report", ran)
    with pytest.raises(ConfigError, match="--sections is empty"):
        report._pick_sections("")
    assert report._pick_sections(None) is None
    out = str(tmp_path / "r")
    for option in ("--sections", "--data-dir", "--config", "--index", "--readme"):
        assert main(["report", "--out", out, option, ""]) == 1
        assert f"report {option} is empty" in capsys.readouterr().err
    assert main(["report", "--from", "", "--readme", "README.md"]) == 1
    assert "report --from is empty" in capsys.readouterr().err


def _refused_export(tmp_path, monkeypatch, argv: list[str]) -> int:
    """``export ARGV --out tmp/bundle`` with the exports themselves replaced by a failure: a refusal
    must come before any export runs. ``RUNS`` / ``RUN`` in ARGV stand for a folder of runs / a run."""
    from searchsmith.training import export_cli

    def ran(*a, **kw):
        raise AssertionError("the export ran")

    monkeypatch.setattr(export_cli, "export_embedder", ran)
    monkeypatch.setattr(export_cli, "export_run", ran)
    if argv[0] in ("RUNS", "RUN"):
        (tmp_path / argv[0]).mkdir()
        if argv[0] == "RUN":
            (tmp_path / "RUN" / "run.json").write_text("{}")
        argv = [str(tmp_path / argv[0]), *argv[1:]]
    return main(["export", *argv, "--out", str(tmp_path / "bundle")])


@pytest.mark.parametrize("argv,option", [
    (["embedder", "--model", ""], "--model"), (["embedder", "--model", " "], "--model"),
    (["RUNS", "--embedder", ""], "--embedder"), (["embedder", "--parity-data", ""], "--parity-data"),
])
def test_export_empty_options_are_refused(tmp_path, capsys, monkeypatch, argv, option) -> None:
    assert _refused_export(tmp_path, monkeypatch, argv) == 1
    assert f"export {option} is empty" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["embedder", "--int8-fp32-blocks", "2"], "export --int8-fp32-blocks: set(s) the int8 export, and this export "
                                              "is --dtype fp32"),
    (["embedder", "--dtype", "fp16", "--int8-smooth-alpha", "0.5", "--int8-attention", "fused"],
     "export --int8-attention, --int8-smooth-alpha: set(s) the int8 export"),
    (["RUN", "--model", "x"], "export --model: names the embedder of 'export embedder"),
])
def test_export_options_that_do_not_apply_are_refused(tmp_path, capsys, monkeypatch, argv, said) -> None:
    """Audit 2026-12-07: --int8-* with an fp32 export, and --model with a run, were ignored."""
    assert _refused_export(tmp_path, monkeypatch, argv) == 1
    assert said in capsys.readouterr().err


# -- finding 5: no command --------------------------------------------------------------------
def test_no_command_is_a_usage_error_on_stderr(capsys) -> None:
    assert main([]) == 2
    got = capsys.readouterr()
    assert got.out == "" and "usage: searchsmith COMMAND" in got.err
    assert main(["--help"]) == 0
    assert "usage: searchsmith COMMAND" in capsys.readouterr().out


# -- finding 6: values that look like negative numbers -----------------------------------------
def test_sweep_values_may_start_with_a_minus(tmp_path, capsys, monkeypatch) -> None:
    seen = {}

    def fake_sweep(args):
        seen["values"], seen["limit"] = args.values, args.limit
        return {"task": "sweep"}

    monkeypatch.setitem(EVAL_TASKS, "sweep", fake_sweep)
    data = _write(tmp_path / "qa.jsonl", [{"id": "1", "query": "q", "answer": "a", "supporting": []}])
    assert main(["eval", "sweep", "--data", data, "--param", "retrieval.lexical_weight", "--values", "-1,0"]) == 0
    assert seen == {"values": "-1,0", "limit": 0}
    assert main(["eval", "sweep", "--data", data, "--param", "x", "--values", "-0.5,1e-3"]) == 0
    assert seen["values"] == "-0.5,1e-3"
    assert main(["eval", "sweep", "--data", data, "--param", "x", "--values=-2"]) == 0 and seen["values"] == "-2"


# -- finding 7: pipeline data ids and gold documents -------------------------------------------
def test_duplicate_question_ids_are_refused_with_both_lines(tmp_path) -> None:
    from searchsmith.serving.evaluate import pipeline_items

    data = tmp_path / "qa.jsonl"
    data.write_text("\n".join(json.dumps({"id": i, "query": "q", "answer": "a", "supporting": []})
                              for i in ("q1", "q2", "q1")) + "\n")
    with pytest.raises(ValidationError, match=r"qa.jsonl:1 and .*qa.jsonl:3: both have id 'q1'"):
        pipeline_items(argparse.Namespace(data=str(data), limit=0))
    data.write_text(json.dumps({"query": "q", "answer": "a", "supporting": []}) + "\n")  # no id: fine
    assert len(pipeline_items(argparse.Namespace(data=str(data), limit=0))) == 1


def test_gold_documents_missing_from_the_index(caplog) -> None:
    from searchsmith.serving.evaluate import check_supporting

    items = [{"id": "1", "supporting": ["a", "b"]}, {"id": "2", "supporting": ["c", "x1"]}, {"id": "3", "supporting": []}]
    with pytest.raises(ValidationError, match=r"none of the questions' 4 supporting documents .* \(e\.g\. \['a'"):
        check_supporting(items, {"other"}, "qa.jsonl", "idx")
    with caplog.at_level(logging.WARNING):
        warnings = check_supporting(items, {"a", "b", "other"}, "qa.jsonl", "idx")
    assert warnings == ["the index idx lacks 2 of the 4 supporting documents of the questions (e.g. ['c', 'x1']): "
                        "those questions score 0 on them whatever the pipeline does"]
    assert "lacks 2 of the 4" in caplog.text
    assert check_supporting(items, {"a", "b", "c", "x1"}, "qa.jsonl", "idx") == []


def test_eval_pipeline_refuses_an_index_without_the_gold_documents(tmp_path, small_index, capsys) -> None:
    data = _write(tmp_path / "qa.jsonl", [{"id": "1", "query": "How do I bake bread?", "answer": "oven",
                                           "supporting": ["not-in-the-index"]}])
    assert main(["eval", "pipeline", "--data", data, "--index", str(small_index)]) == 1
    err = capsys.readouterr().err
    assert "none of the questions' 1 supporting documents" in err and "not-in-the-index" in err


# -- finding 8: the help tells the truth about --corpus -----------------------------------------
def test_corpus_help_does_not_promise_a_default_the_index_cannot_give(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the corpus the --index was built from" not in out
    assert "required: the index does not record its corpus" in out


def test_a_reader_that_leaves_the_pipe_is_not_a_traceback(tmp_path, monkeypatch) -> None:
    """Audit 2026-12-07: ``searchsmith route ... --json | head -c 200`` printed a BrokenPipeError
    traceback. The command stops quietly with the shell's SIGPIPE status."""
    import io
    import os
    import sys

    from searchsmith.serving.main import main

    sink = open(tmp_path / "out", "w")  # noqa: SIM115 - its descriptor stands in for the pipe

    class ClosedPipe(io.TextIOBase):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return sink.fileno()

    saved = os.dup(sink.fileno())
    try:
        monkeypatch.setattr(sys, "stdout", ClosedPipe())
        assert main(["config", "pipeline"]) == 141
    finally:
        os.dup2(saved, sink.fileno())
        os.close(saved)
        sink.close()


def test_eval_sweep_refuses_an_index_without_the_gold_documents(tmp_path, small_index, capsys) -> None:
    """eval pipeline checked its gold documents against the index; the sweep of a pipeline key did
    not (it asked every question for every value, each scoring 0)."""
    data = _write(tmp_path / "qa.jsonl", [{"id": "1", "query": "How do I bake bread?", "answer": "oven",
                                           "supporting": ["not-in-the-index"]}])
    assert main(["eval", "sweep", "--data", data, "--index", str(small_index), "--param",
                 "citation.cosine_threshold", "--values", "0.5,0.6"]) == 1
    err = capsys.readouterr().err
    assert "none of the questions' 1 supporting documents" in err and "not-in-the-index" in err
