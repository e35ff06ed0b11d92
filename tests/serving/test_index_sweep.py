"""searchsmith eval sweep --param index.*: one index per value, the sweep's result format, the
temporary indexes removed, the --index and corpus untouched, clipped chunk sizes reported."""

from __future__ import annotations

import hashlib
import json
import tempfile

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.index_sweep import index_setting
from searchsmith.serving.main import main

# Paragraphs of several sentences each (~100 tokens), so that the chunk size sets the chunk count.
DOCS = {
    "bread": ("Knead the bread dough for ten minutes until it is smooth and elastic. Leave it to rise in a warm "
              "place for an hour, covered with a damp cloth. Knock it back, shape it into a loaf and let it "
              "prove again for half an hour. Slash the top with a sharp knife before it goes in the oven. "
              "Bake the bread for forty minutes at 220 degrees until it sounds hollow when tapped. "
              "Cool it on a rack before slicing, or the crumb turns gummy."),
    "jupiter": ("Jupiter is the largest planet of the solar system. It is a gas giant made mostly of hydrogen "
                "and helium. Its Great Red Spot is a storm larger than the Earth that has raged for centuries. "
                "Jupiter has dozens of moons, the four largest found by Galileo in 1610. Io is volcanic, "
                "Europa hides an ocean under its ice, and Ganymede is the largest moon of all. "
                "A day on Jupiter lasts under ten hours."),
    "evict": ("The Lumen cache eviction policy is implemented in lumen/evict.py by the Evictor class. "
              "It keeps a least-recently-used list per shard and a global byte budget. When the budget is "
              "exceeded the Evictor drops entries from the coldest shard first. Pinned entries are never "
              "evicted. The unit tests for the eviction code are in tests/test_evict.py and run in under a "
              "second. Metrics of every eviction are exported under lumen_evictions_total."),
}
QA = [{"id": "q1", "query": "How long do I bake the bread?", "answer": "forty minutes", "supporting": ["bread"]},
      {"id": "q2", "query": "Which moon of Jupiter hides an ocean?", "answer": "Europa", "supporting": ["jupiter"]},
      {"id": "q3", "query": "Where are the Lumen eviction tests?", "answer": "tests/test_evict.py",
       "supporting": ["evict"]}]


def _digest(folder) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def sweep_set(tmp_path_factory, embedder):
    """(corpus, qa, index built with chunks of 48 tokens, index built with the default size)."""
    from searchsmith.serving.chunker import ChunkerConfig
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("index-sweep")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "source": "notes", "text": v, "title": k}) + "\n"
                              for k, v in DOCS.items()))
    qa = d / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in QA))
    cents = CentroidConfig(chunks_per_centroid=3)
    build_index(read_corpus(corpus), d / "idx48", IndexConfig(chunker=ChunkerConfig(chunk_tokens=48),
                                                               centroids=cents), embedder=embedder)
    build_index(read_corpus(corpus), d / "idx", IndexConfig(centroids=cents), embedder=embedder)
    return corpus, qa, d / "idx48", d / "idx"


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The system temporary folder, redirected to an empty one the test can inspect."""
    root = tmp_path / "systmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _sweep(capsys, *args: str) -> dict:
    assert main(["eval", "sweep", *args, "--resamples", "200", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_chunk_size_sweep_builds_one_index_per_value_in_the_sweep_format(sweep_set, own_tmp, tmp_path,
                                                                         capsys) -> None:
    corpus, qa, index, _ = sweep_set
    before = (_digest(index), corpus.read_bytes())
    png, per = tmp_path / "chunks.png", tmp_path / "per.jsonl"
    out = _sweep(capsys, "--data", str(qa), "--index", str(index), "--corpus", str(corpus), "--limit", "2",
                 "--param", "index.chunker.chunk_tokens", "--values", "16,48", "--plot", str(png),
                 "--per-item", str(per))
    # the sweep's format, plus the index's own figures per point
    assert out["task"] == "sweep" and out["param"] == "index.chunker.chunk_tokens" and out["n"] == 2
    assert out["values"] == [16, 48] and out["default"] == 48 and out["default_point"] == 48
    assert out["corpus"] == str(corpus) and out["index"] == str(index) and out["warnings"] == []
    by_value = {p["value"]: p for p in out["points"]}
    assert by_value[16]["chunks"] > by_value[48]["chunks"] >= len(DOCS)
    assert 0 < by_value[16]["chunk_tokens_mean"] <= 16 < by_value[48]["chunk_tokens_mean"] <= 48
    for p in out["points"]:
        assert p["effective"] == p["value"] and p["clipped"] is False and p["build_s"] > 0
        for name in ("support_recall", "retrieval_recall", "citation_recall", "f1"):
            lo, hi = p["metrics"][f"{name}_ci95"]
            assert lo <= p["metrics"][name] <= hi
    verdict = out["verdicts"]["retrieval_recall"]
    assert set(verdict["vs_default"]) == {"16"} and verdict["default"] == by_value[48]["metrics"]["retrieval_recall"]
    assert png.stat().st_size > 1000 and out["plot"] == str(png)
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert sorted((r["id"], r["value"]) for r in rows) == [("q1", 16), ("q1", 48), ("q2", 16), ("q2", 48)]
    # the temporary indexes are gone; the user's index and corpus are as they were
    assert list(own_tmp.iterdir()) == []
    assert (_digest(index), corpus.read_bytes()) == before


def test_overlap_sweep_recognises_the_default(sweep_set, own_tmp, capsys) -> None:
    corpus, qa, index, _ = sweep_set
    out = _sweep(capsys, "--data", str(qa), "--index", str(index), "--corpus", str(corpus), "--limit", "2",
                 "--param", "index.chunker.overlap_ratio", "--values", "0,0.25")
    assert out["default"] == 0.25 and out["default_point"] == 0.25
    by_value = {p["value"]: p for p in out["points"]}
    assert by_value[0.25]["chunks"] > by_value[0]["chunks"]  # overlap repeats sentences in more chunks
    assert set(out["verdicts"]["f1"]["vs_default"]) == {"0"}
    assert list(own_tmp.iterdir()) == []


def test_a_chunk_size_above_the_model_window_is_reported_as_clipped(sweep_set, own_tmp, capsys) -> None:
    corpus, qa, _, index = sweep_set  # built with the default size: the model's window
    out = _sweep(capsys, "--data", str(qa), "--index", str(index), "--corpus", str(corpus), "--limit", "2",
                 "--param", "index.chunker.chunk_tokens", "--values", "48,400,300")
    window = out["default"]
    assert window == 254  # all-MiniLM-L6-v2: 256 tokens, [CLS] and [SEP] included
    p48, p400, p300 = out["points"]
    assert p48["clipped"] is False and p48["effective"] == 48
    assert p400["clipped"] is True and p400["effective"] == window and p300["effective"] == window
    # the same index is built once; the first value built as the --index was stands for the default
    assert p300["same_index_as"] == 400 and p300["build_s"] == 0.0 and p300["chunks"] == p400["chunks"]
    assert out["default_point"] == 400 and set(out["verdicts"]["f1"]["vs_default"]) == {"48", "300"}
    text = " ".join(out["warnings"])
    assert "400, 300" in text and "clipped" in text and "254" in text
    assert list(own_tmp.iterdir()) == []


def test_each_question_is_asked_under_every_value_in_turn_rotating(sweep_set, own_tmp, capsys, monkeypatch) -> None:
    """Audit: every question was asked on the first value's index, then every question on the
    next one's, so a change in the machine's load landed on one value's latency_ms; eval sweep
    interleaves its values question by question after a warm-up (serving/sweep.py)."""
    from searchsmith.serving.pipeline.pipeline import Pipeline

    asked: list[tuple[str, str]] = []
    real = Pipeline.ask

    def ask(self, query, *a, **k):
        asked.append((self.index.dir.name, query))
        return real(self, query, *a, **k)

    monkeypatch.setattr(Pipeline, "ask", ask)
    corpus, qa, index, _ = sweep_set
    out = _sweep(capsys, "--data", str(qa), "--index", str(index), "--corpus", str(corpus),
                 "--param", "index.chunker.chunk_tokens", "--values", "16,48")
    q1, q2, q3 = (it["query"] for it in QA)
    assert asked == [("value-0", q1), ("value-1", q1),  # one untimed answer on each index
                     ("value-0", q1), ("value-1", q1),  # then each question under every value,
                     ("value-1", q2), ("value-0", q2),  # the order rotating by one each question
                     ("value-0", q3), ("value-1", q3)]
    for p in out["points"]:  # every value's figures from its 3 timed answers
        assert p["metrics"]["latency_ms"] > 0 and p["metrics"]["retrieval_recall"] == 1.0
    assert list(own_tmp.iterdir()) == []


def test_the_models_are_loaded_once_however_many_values(sweep_set, minilm_embed_bundle, own_tmp, tmp_path,
                                                         capsys, monkeypatch) -> None:
    """Every value's pipeline is open at once (the interleaved timing asks each question under
    every value in turn), but each used to be a load_pipeline of its own: every configured model
    (here the embedder bundle, an ONNX session) loaded again per value, memory growing with the
    values. Now the indexes are per value and the models one copy, shared."""
    import searchsmith.serving.pipeline.pipeline as pipeline_module
    from searchsmith.serving.pipeline.pipeline import Pipeline

    loads: list[tuple[str, str]] = []  # (task, path) of every bundle loaded
    real_load = pipeline_module.load_optional_bundle

    def load_optional_bundle(path, task, *a, **k):
        if path:
            loads.append((task, str(path)))
        return real_load(path, task, *a, **k)

    monkeypatch.setattr(pipeline_module, "load_optional_bundle", load_optional_bundle)
    seen: dict[str, Pipeline] = {}  # index folder -> the pipeline that answered on it
    real_ask = Pipeline.ask

    def ask(self, query, *a, **k):
        seen.setdefault(self.index.dir.name, self)
        return real_ask(self, query, *a, **k)

    monkeypatch.setattr(Pipeline, "ask", ask)
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(json.dumps({"bundles": {"embedder": str(minilm_embed_bundle)}}))  # JSON is YAML
    corpus, qa, index, _ = sweep_set
    out = _sweep(capsys, "--config", str(cfg), "--data", str(qa), "--index", str(index), "--corpus", str(corpus),
                 "--limit", "2", "--param", "index.chunker.chunk_tokens", "--values", "16,32,48")
    assert loads == [("embed", str(minilm_embed_bundle))]  # once, not once per value
    assert sorted(seen) == ["value-0", "value-1", "value-2"]  # ... while each value answered on its own index
    first, *others = seen.values()
    assert type(first.embedder).__name__ == "BundleEmbedder"
    assert all(p.embedder is first.embedder and p.index is not first.index for p in others)
    for p in out["points"]:
        assert p["metrics"]["retrieval_recall"] == 1.0 and p["metrics"]["latency_ms"] > 0
    assert list(own_tmp.iterdir()) == []


def test_unknown_or_partial_index_keys_are_refused_with_the_closest_key() -> None:
    assert index_setting("index.chunker.chunk_tokens") == "chunker.chunk_tokens"
    with pytest.raises(ConfigError, match="did you mean 'index.chunker.chunk_tokens'"):
        index_setting("index.chunker.chunk_tokenz")
    with pytest.raises(ConfigError, match="did you mean 'index.chunker.chunk_tokens'"):
        index_setting("index.chunk_size")
    with pytest.raises(ConfigError, match="did you mean 'index.chunker.overlap_ratio'"):
        index_setting("index.chunk_overlap")
    with pytest.raises(ConfigError, match="is a section.*index.chunker.overlap_ratio"):
        index_setting("index.chunker")


def test_bad_keys_values_and_a_missing_corpus_fail_before_any_index_is_built(sweep_set, own_tmp, capsys) -> None:
    corpus, qa, index, _ = sweep_set
    base = ["eval", "sweep", "--data", str(qa), "--index", str(index)]
    assert main([*base, "--corpus", str(corpus), "--param", "index.chunker.chunk_tokenz", "--values", "16,48"]) == 1
    assert "did you mean 'index.chunker.chunk_tokens'" in capsys.readouterr().err
    assert main([*base, "--corpus", str(corpus), "--param", "index.chunker.chunk_tokens", "--values", "4,48"]) == 1
    assert ">= 8" in capsys.readouterr().err
    assert main([*base, "--param", "index.chunker.chunk_tokens", "--values", "16,48"]) == 1
    err = capsys.readouterr().err
    assert "does not record which corpus" in err and "--corpus CORPUS.jsonl" in err
    wrong = own_tmp.parent / "wrong.jsonl"
    wrong.write_text(json.dumps({"id": "other", "source": "notes", "text": "Nothing the questions need."}) + "\n")
    assert main([*base, "--corpus", str(wrong), "--param", "index.chunker.chunk_tokens", "--values", "16,48"]) == 1
    assert "holds none of the questions' supporting documents" in capsys.readouterr().err
    assert list(own_tmp.iterdir()) == []
