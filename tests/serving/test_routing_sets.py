from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.main import main
from searchsmith.serving.routing_sets import cast_routing, expertqa_routing


def test_cast_routing_set(shared_data) -> None:
    corpus, queries = cast_routing(shared_data)
    sources = {d["source"] for d in corpus}
    assert len(sources) >= 20 and all(s.startswith("cast202") for s in sources)
    assert len({d["id"] for d in corpus}) == len(corpus)
    followups = [q for q in queries if q["history"]]
    assert len(followups) > len(queries) // 2
    assert all(q["sources"][0] in sources for q in queries)
    assert {t["role"] for q in followups for t in q["history"]} == {"user", "assistant"}


def test_expertqa_routing_set_keeps_queries_out_of_the_corpus(shared_data) -> None:
    corpus, queries = expertqa_routing(shared_data)
    texts = {d["text"] for d in corpus}
    assert not any(q["query"] in texts for q in queries)
    assert "other" not in {d["source"] for d in corpus}
    assert all(not q["history"] for q in queries)


def test_command_writes_both_files(shared_data, tmp_path, capsys) -> None:
    assert main(["make-routing-set", "cast", "--data-dir", str(shared_data), "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["documents"] == len((tmp_path / "corpus.jsonl").read_text().splitlines())


def test_missing_data_dir(tmp_path) -> None:
    with pytest.raises(ValidationError, match="not found; pass --data-dir"):
        cast_routing(tmp_path)
