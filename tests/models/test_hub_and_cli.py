from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.models.hub import (
    DEFAULT_MODEL_NAME,
    default_model_dir,
    model_display_name,
    resolve_model,
)
from searchsmith.serving.main import main


def test_default_resolves_to_the_bundled_model() -> None:
    path = resolve_model("default")
    assert path == str(default_model_dir()) == resolve_model(None)
    assert (default_model_dir() / "config.json").is_file()
    assert model_display_name("default") == DEFAULT_MODEL_NAME


def test_local_path_and_errors(tmp_path, monkeypatch) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path / "m")) == str(tmp_path / "m")
    with pytest.raises(ConfigError, match="local model path .* does not exist"):
        resolve_model(str(tmp_path / "missing" / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        resolve_model(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ConfigError, match="hub is offline"):
        resolve_model("someone/not-cached-model", field="recipe.base_model")
    # the fix names the setting that was given, not always base_model
    with pytest.raises(ConfigError, match=r"^text\.tokenizer: .*Use text\.tokenizer: default "):
        resolve_model("someone/not-cached-model", field="text.tokenizer")
    with pytest.raises(ConfigError, match=r"Use --model default "):
        resolve_model("someone/not-cached-model", field="--model")


def test_index_and_route_commands(tmp_path, capsys, write_corpus) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    assert main(["index", str(corpus), "--out", str(tmp_path / "ix"), "centroids.chunks_per_centroid=3"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["documents"] == 18 and summary["sources"] == {"astronomy": 6, "code": 6, "cooking": 6}
    hist = tmp_path / "h.json"
    hist.write_text(json.dumps([{"role": "user", "content": "How do I configure the Lumen cache eviction?"}]))
    assert main(["route", "Where can I find the code for it?", "--index", str(tmp_path / "ix"),
                 "--history", str(hist), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "serial" and out["sources"][0]["source"] == "code"
    # bad input: an unknown config key names the closest one; empty query is a clean error
    assert main(["index", str(corpus), "--out", str(tmp_path / "ix2"), "chunker.chunk_tokns=100"]) == 1
    assert "did you mean 'chunk_tokens'" in capsys.readouterr().err
    assert main(["route", " ", "--index", str(tmp_path / "ix")]) == 1
    assert "query: is empty" in capsys.readouterr().err
    assert main(["route", "q", "--index", str(tmp_path / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_eval_route_command(tmp_path, capsys, write_corpus) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    assert main(["index", str(corpus), "--out", str(tmp_path / "ix"), "centroids.chunks_per_centroid=3"]) == 0
    capsys.readouterr()
    data = tmp_path / "r.jsonl"
    rows = [{"history": [], "query": "how to bake bread", "sources": ["cooking"]},
            {"history": [{"role": "user", "content": "Tell me about the Lumen cache eviction code."}],
             "query": "which file is it in?", "sources": ["code"]}]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    per_item = tmp_path / "items.jsonl"
    assert main(["eval", "route", "--data", str(data), "--index", str(tmp_path / "ix"), "--json",
                 "--per-item", str(per_item)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["modes"]) == {"parallel", "serial", "auto"}
    assert res["modes"]["serial"]["all"]["recall@1"] == 1.0
    assert res["modes"]["serial"]["followups"]["n"] == 1
    assert len(per_item.read_text().splitlines()) == 6
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "x", "sources": ["nope"]}))
    assert main(["eval", "route", "--data", str(bad), "--index", str(tmp_path / "ix")]) == 1
    assert "not in the index" in capsys.readouterr().err


def test_quickstart_trains_exports_indexes_asks_then_reuses(tmp_path, capsys, monkeypatch,
                                                           write_corpus) -> None:
    """The whole chain on the tiny recipes (the real ones take minutes): train, export,
    index, write configs, ask; a second run reuses every step."""
    import searchsmith.serving.quickstart as qs

    corpus = write_corpus(tmp_path / "c.jsonl")
    monkeypatch.setattr(qs, "demo_corpus", lambda: corpus)  # indexing the full demo corpus takes minutes
    tiny = tuple(qs.ModelStep(m.name, t, t, ()) for m, t in zip(qs.MODELS, (
        "reranker/tiny/bert-tiny_full.yaml", "decomposer/tiny/bert-tiny_tagger.yaml",
        "citation/tiny/bert-tiny_full.yaml", "images/tiny/bert-tiny_cnn.yaml", "reader/tiny/bert-tiny_full.yaml"),
        strict=True))
    monkeypatch.setattr(qs, "MODELS", tiny)
    work = tmp_path / "w"
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "18 documents" in out and "user: Where can I find the code for it?" in out
    for name in ("reranker", "decomposer", "citation", "images", "reader", "embedder"):
        assert (work / "bundles" / name / "manifest.json").is_file(), name
    assert (work / "indexes" / "demo" / "manifest.json").is_file()
    assert "bundles:" in (work / "pipeline.yaml").read_text()
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert out.count("reusing") >= 5 and "train reranker (quick)" not in out


def test_eval_and_history_files_reject_malformed_input(tmp_path, capsys) -> None:
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.jsonl import read_jsonl
    from searchsmith.serving.cli import read_history_file

    bad = tmp_path / "r.jsonl"
    bad.write_text('{"query": "q", "sources": ["a"]}\n{oops\n{"query": "only"}\n')
    with pytest.raises(ValidationError) as err:
        read_jsonl(bad, ("query", "sources"), "routing")
    msg = str(err.value)
    assert "r.jsonl:2: not valid JSON" in msg and "r.jsonl:3: missing field(s) ['sources']" in msg
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValidationError, match="is empty"):
        read_jsonl(tmp_path / "empty.jsonl", ("query",), "routing")
    hist = tmp_path / "h.json"
    hist.write_text("[{not json")
    with pytest.raises(ValidationError, match="not JSON or JSONL"):
        read_history_file(str(hist))
    with pytest.raises(ValidationError, match="does not exist"):
        read_history_file(str(tmp_path / "missing.json"))


def test_every_stated_default_in_the_help_is_the_codes() -> None:
    """A help text that states a default states the one argparse will use (written as
    %(default)s or generated from the code), in every command."""
    import argparse
    import re

    from searchsmith.serving.main import COMMANDS

    checked = 0
    for command, spec in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"searchsmith {command}")
        spec.configure(parser)
        for action in parser._actions:
            if not action.help or action.default in (None, argparse.SUPPRESS) or isinstance(action.default, bool):
                continue
            text = action.help % {**vars(action), "default": action.default, "prog": parser.prog}
            for stated in re.findall(r"\(default:? ([^;)\s]+)", text):
                assert stated.rstrip(",.") == str(action.default), (command, action.dest, stated, action.default)
                checked += 1
    assert checked >= 5  # the scan reads real help texts
