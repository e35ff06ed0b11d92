"""The README's "In Python" block runs as written (in a folder laid out as it assumes)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    {"id": "kestrel-2", "source": "news", "title": "Kestrel 2.0 released", "date": "2021-12-07",
     "text": "Harbor & Finch released Kestrel 2.0 on 2021-12-07. Kestrel 2.0 adds rate limiting."},
    {"id": "lumen-port", "source": "docs", "title": "Lumen networking",
     "text": "Lumen listens on port 7070 by default. Change it with server.port."},
    {"id": "quarry", "source": "news", "title": "Quarry 1.0", "date": "2021-04",
     "text": "Quarry 1.0, a columnar store, came out in April 2021."},
]


def python_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"\*\*In Python\.\*\*.*?```python\n(.*?)```", text, re.S)
    assert found, "README.md: the **In Python.** paragraph and its python block are gone"
    return found.group(1)


def test_the_readme_python_block_runs(tmp_path, monkeypatch, capsys) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from export_fixtures import bundle

    (tmp_path / "models" / "demo").mkdir(parents=True)
    (tmp_path / "models" / "demo" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    shutil.copytree(bundle("rerank"), tmp_path / "bundles" / "reranker")
    shutil.copytree(bundle("embed"), tmp_path / "bundles" / "embedder")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # what building the fixtures printed
    names: dict = {}
    exec(compile(python_block(), "README.md (In Python)", "exec"), names)  # noqa: S102 - our own README
    answer = names["answer"]
    assert answer["short_answer"] == "2021-12-07"
    assert [ref["doc_id"] for ref in answer["references"]][:1] == ["kestrel-2"]
    assert capsys.readouterr().out.startswith("2021-12-07 ['kestrel-2'")
    vectors = names["vectors"]
    assert vectors.shape[0] == 2 and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):  # the with block closed the pipeline
        names["pipe"].index.store._db.execute("select 1")
