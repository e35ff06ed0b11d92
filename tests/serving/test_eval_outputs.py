"""What eval and profile write: never a user's file, never over their own inputs, refused
before any work (found by probing the CLI, 2026-12-06)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.main import check_eval_outputs, configure_eval, main


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_eval(parser)
    return parser.parse_args(argv)


def _data(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"id": "1", "query": "q", "answer": "a", "supporting": []}\n')
    return data


def test_per_item_never_replaces_the_commands_own_input(tmp_path, capsys) -> None:
    data = _data(tmp_path)
    before = data.read_bytes()
    argv = ["eval", "pipeline", "--data", str(data), "--index", str(tmp_path / "none"), "--per-item", str(data)]
    assert main(argv) == 1 and main([*argv, "--force"]) == 1
    assert "is this command's input" in capsys.readouterr().err and data.read_bytes() == before


def test_per_item_never_writes_inside_the_index_bundle_or_run_it_reads(tmp_path) -> None:
    """eval route --index IX --per-item IX/manifest.json --force replaced the index's manifest
    with per-item lines, and the index no longer loaded (helper-44's audit)."""
    data = _data(tmp_path)
    index = tmp_path / "ix"
    index.mkdir()
    (index / "manifest.json").write_text("{}")
    for flag in ("--index", "--bundle", "--checkpoint"):
        for target in (index / "manifest.json", index / "new.jsonl"):
            with pytest.raises(ConfigError, match=r"--per-item: .* is inside .*ix', an index, bundle or run folder"):
                check_eval_outputs(_args("route", "--data", str(data), flag, str(index), "--per-item", str(target),
                                         "--force"))
    # a folder holding a searchsmith manifest, even one the command was not given
    with pytest.raises(ConfigError, match="is inside"):
        check_eval_outputs(_args("route", "--data", str(data), "--plot", str(index / "p.png")))
    assert (index / "manifest.json").read_text() == "{}"
    check_eval_outputs(_args("route", "--data", str(data), "--index", str(index), "--per-item",
                             str(tmp_path / "items.jsonl")))


def test_an_existing_per_item_file_is_replaced_only_with_force(tmp_path) -> None:
    data, mine = _data(tmp_path), tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    with pytest.raises(ConfigError, match="mine.jsonl' exists; pass --force"):
        check_eval_outputs(_args("pipeline", "--data", str(data), "--per-item", str(mine)))
    check_eval_outputs(_args("pipeline", "--data", str(data), "--per-item", str(mine), "--force"))
    check_eval_outputs(_args("pipeline", "--data", str(data), "--per-item", str(tmp_path / "new.jsonl")))
    assert mine.read_text() == "my notes\n"  # checking writes nothing


def test_outputs_that_are_folders_or_not_png_and_bad_numbers_are_refused_first(tmp_path) -> None:
    data = _data(tmp_path)
    for argv, match in ((["--per-item", str(tmp_path)], "is a folder"), (["--plot", str(tmp_path)], "is a folder"),
                        (["--plot", str(tmp_path / "plot.txt")], "ending in .png"),
                        (["--limit", "-1"], "--limit: must be >= 0"), (["--k", "0"], "--k: the recall cut-off")):
        with pytest.raises(ConfigError, match=match):
            check_eval_outputs(_args("ablate", "--data", str(data), *argv))


def test_a_plot_replaces_only_a_plot_searchsmith_wrote(tmp_path) -> None:
    from searchsmith.serving.profiling.common import plot_info, save_plot

    data, png = _data(tmp_path), tmp_path / "p.png"
    save_plot(png, lambda fig, ax: ax.plot([0, 1], [0, 1]), "ours")
    check_eval_outputs(_args("ablate", "--data", str(data), "--plot", str(png)))  # ours: replaced freely
    save_plot(png, lambda fig, ax: ax.plot([0, 1], [1, 0]), "ours again")
    assert plot_info(png)["title"] == "ours again"
    theirs = tmp_path / "holiday.png"
    theirs.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ConfigError, match="holiday.png' exists and is not a plot searchsmith wrote"):
        check_eval_outputs(_args("ablate", "--data", str(data), "--plot", str(theirs)))
    with pytest.raises(ConfigError, match="not a plot searchsmith wrote"):
        save_plot(theirs, lambda fig, ax: ax.plot([0, 1]), "over theirs")
    assert theirs.read_bytes() == b"\x89PNG\r\n\x1a\n not really"
    check_eval_outputs(_args("ablate", "--data", str(data), "--plot", str(theirs), "--force"))
    save_plot(theirs, lambda fig, ax: ax.plot([0, 1]), "replaced on purpose", replace=True)
    assert plot_info(theirs)["title"] == "replaced on purpose"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holiday.png", "p.png", "qa.jsonl"]  # no temp file left


def test_profile_out_refuses_a_file_and_a_folder_of_other_files(tmp_path, capsys) -> None:
    from searchsmith.serving.profiling.cli import check_profile_out

    a_file, theirs, ours = tmp_path / "f", tmp_path / "theirs", tmp_path / "ours"
    a_file.write_text("x")
    theirs.mkdir()
    (theirs / "route_latency.png").write_bytes(b"my own picture")
    ours.mkdir()
    (ours / "results.jsonl").write_text('{"date": "2026-12-06", "suite": "machine"}\n')
    named_alike = tmp_path / "named_alike"
    named_alike.mkdir()
    (named_alike / "results.jsonl").write_text("my own data\n")  # a file of that name is not enough
    for out, match in ((a_file, "is a file"), (theirs, "holds files but no results.jsonl"),
                       (named_alike, "no results.jsonl a profile wrote")):
        with pytest.raises(ConfigError, match=match):
            check_profile_out(out)
    check_profile_out(ours)
    check_profile_out(tmp_path / "new")
    assert main(["profile", "route", "--quick", "--out", str(theirs)]) == 1
    assert "no results.jsonl" in capsys.readouterr().err
    assert (theirs / "route_latency.png").read_bytes() == b"my own picture"
    assert main(["profile", "route", "--suite", "embed", "--out", str(tmp_path / "two")]) == 1
    assert "two suites named" in capsys.readouterr().err
    assert main(["profile", "route", "--readme", "README.md", "--out", str(tmp_path / "r")]) == 1
    assert "pass --record DIR too" in capsys.readouterr().err


def test_eval_data_fields_of_the_wrong_type_are_named_at_their_line(tmp_path) -> None:
    """"sources": 42 crashed eval route, "supporting": 42 eval pipeline, and "supporting": "a string"
    scored silently as its characters."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.evaluate import PIPELINE_FIELDS, ROUTE_FIELDS, read_checked

    route = tmp_path / "route.jsonl"
    route.write_text('{"query": "q", "sources": ["news"]}\n{"query": "q", "sources": 42}\n'
                     '{"query": "", "sources": "news"}\n')
    with pytest.raises(ValidationError) as info:
        read_checked(route, ROUTE_FIELDS, ("query", "sources"), "routing data")
    msg = str(info.value)
    assert f"{route}:2: 'sources' must be a non-empty list of source names, got 42" in msg
    assert f"{route}:3: 'query' must be a non-empty string" in msg and f"{route}:3: 'sources'" in msg
    pipe = tmp_path / "pipe.jsonl"
    pipe.write_text('{"query": "q", "answer": "a", "supporting": "doc-1"}\n')
    with pytest.raises(ValidationError, match=r"pipe.jsonl:1: 'supporting' must be a list of corpus document ids"):
        read_checked(pipe, PIPELINE_FIELDS, ("query", "answer", "supporting"), "pipeline data")
    pipe.write_text('{"query": "q", "answer": "a", "supporting": ["doc-1"], "history": []}\n')
    assert read_checked(pipe, PIPELINE_FIELDS, ("query", "answer", "supporting"), "pipeline data")[0]["query"] == "q"


def test_profile_refuses_a_record_folder_it_cannot_write_before_measuring(tmp_path, capsys) -> None:
    log = tmp_path / "log"
    log.mkdir()
    (log / "RESULTS.md").write_text("my own notes, no markers\n")
    out = tmp_path / "p"
    assert main(["profile", "route", "--quick", "--out", str(out), "--record", str(log)]) == 1
    assert "no <!--" in capsys.readouterr().err and not out.exists()  # nothing measured, nothing written
    assert (log / "RESULTS.md").read_text() == "my own notes, no markers\n"


def test_an_output_folder_that_cannot_be_written_is_refused_before_the_work(tmp_path, monkeypatch) -> None:
    """A read-only folder ended eval --per-item, index --out, report --out ... in a raw
    OSError traceback, after the work (helper-44's audit). os.access says no for a read-only
    file system even to root; here it is made to say no for one folder."""
    import os

    from searchsmith.models.io import check_parents_are_folders

    locked = tmp_path / "ro"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != locked and real(p, mode, **kw))
    with pytest.raises(ConfigError, match=r"--per-item: cannot create .*ro/x.jsonl': no write permission in"):
        check_eval_outputs(_args("pipeline", "--data", str(_data(tmp_path)), "--per-item", str(locked / "x.jsonl")))
    with pytest.raises(ConfigError, match=r"--out: cannot write in .*ro'"):
        check_parents_are_folders(locked, "--out", ConfigError)
    check_parents_are_folders(tmp_path / "fine" / "x", "--out", ConfigError)


def test_an_os_error_is_one_line_naming_the_file_not_a_traceback(capsys, monkeypatch) -> None:

    import searchsmith.serving.main as cli

    def configure(parser: argparse.ArgumentParser) -> None:
        def run(args: argparse.Namespace) -> int:
            raise OSError(30, "Read-only file system", "/mnt/ro/.ix.lock")

        parser.set_defaults(func=run)

    monkeypatch.setitem(cli.COMMANDS, "index", cli.Command(configure, "index"))
    assert cli.main(["index"]) == 1
    err = capsys.readouterr().err
    assert "searchsmith index: error: cannot read or write '/mnt/ro/.ix.lock': Read-only file system (errno 30)" in err
    assert "Traceback" not in err
