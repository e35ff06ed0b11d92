"""A build that dies resumes: ``build_index`` saves its embeddings in parts (``index_parts``,
``.<out>.build/`` with a sha256 per part); run again, only the missing or corrupt parts are
embedded, and the index is the one a clean build writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from searchsmith.models.errors import ValidationError
from searchsmith.serving.corpus import read_corpus
from searchsmith.serving.index import CentroidConfig, Index, IndexConfig, build_index
from searchsmith.serving.index_parts import build_dir_for

QUERIES = ["How long should I knead bread dough?", "What is the largest planet?", "How do I fix a merge conflict?"]
CFG = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3), build_part_chunks=4)


class Died(RuntimeError):
    pass


def _job(embedder, calls: list[int], die_after: int | None = None):
    """An embedding job in pieces of 3 texts that records how many texts it was given and dies
    (raises) after ``die_after`` pieces."""

    def embed(texts):
        calls.append(len(texts))
        for n, i in enumerate(range(0, len(texts), 3)):
            if die_after is not None and n == die_after:
                raise Died("the embedding worker died")
            yield np.arange(i, min(i + 3, len(texts))), embedder.encode(list(texts[i: i + 3]), show_progress=False)

    return embed


def _topk(path, embedder):
    index = Index.load(path, embedder=embedder)
    try:
        hits = index.search(np.asarray(embedder.encode(QUERIES), np.float32), k=5)
        return [[h.chunk.chunk_id for h in row] for row in hits], np.array([[h.score for h in row] for row in hits])
    finally:
        index.close()


def _died(records, out, embedder, calls: list[int]) -> None:
    """A build of ``records`` into ``out`` whose embedding dies after 3 pieces (9 rows)."""
    with pytest.raises(Died):
        build_index(records, out, CFG, embedder=embedder, embed=_job(embedder, calls, die_after=3))


def _rebuilt(records, out, embedder, calls: list[int]) -> list[str]:
    """The same build run again to the end; its report lines."""
    lines: list[str] = []
    build_index(records, out, CFG, embedder=embedder, embed=_job(embedder, calls), report=lines.append)
    return lines


@pytest.fixture(scope="module")
def reference(tmp_path_factory, embedder, write_corpus):
    d = tmp_path_factory.mktemp("ref")
    records = read_corpus(write_corpus(d / "corpus.jsonl"))
    build_index(records, d / "index", CFG, embedder=embedder)
    assert not build_dir_for(d / "index").exists()  # a finished build leaves no parts behind
    return records, _topk(d / "index", embedder)


def test_a_build_that_died_embeds_only_what_is_missing(tmp_path, embedder, reference) -> None:
    records, (ids, scores) = reference
    out = tmp_path / "index"
    calls: list[int] = []
    _died(records, out, embedder, calls)
    assert not out.exists()  # no half index
    saved = json.loads((build_dir_for(out) / "build.json").read_text())["parts"]
    assert len(saved) == 2  # 9 rows came back: parts 0 (rows 0-3) and 1 (4-7) were complete
    total = calls[0]
    lines = _rebuilt(records, out, embedder, calls)
    assert calls[1] == total - 8  # the two saved parts were not embedded again
    assert any("resuming: 2 of" in line for line in lines), lines
    got_ids, got_scores = _topk(out, embedder)
    assert got_ids == ids and np.allclose(got_scores, scores, atol=1e-5)
    assert not build_dir_for(out).exists()


def test_a_corrupt_part_is_refused_and_embedded_again(tmp_path, embedder, reference) -> None:
    records, (ids, scores) = reference
    out = tmp_path / "index"
    calls: list[int] = []
    _died(records, out, embedder, calls)
    part = build_dir_for(out) / "part-00001.npy"
    data = bytearray(part.read_bytes())
    data[-8:] = b"\x7f" * 8  # a flipped tail: still a loadable array, wrong numbers
    part.write_bytes(bytes(data))
    lines = _rebuilt(records, out, embedder, calls)
    assert calls[1] == calls[0] - 4  # only part 0 was kept
    assert any("part(s) 1 of the earlier build are missing or corrupt" in line for line in lines), lines
    got_ids, got_scores = _topk(out, embedder)
    assert got_ids == ids and np.allclose(got_scores, scores, atol=1e-5)


def test_parts_of_another_corpus_are_dropped(tmp_path, embedder, reference) -> None:
    records, _ = reference
    out = tmp_path / "index"
    calls: list[int] = []
    _died(records, out, embedder, calls)
    changed = [dict(r, text=r["text"] + " Edited.") if i == 0 else r for i, r in enumerate(records)]
    lines = _rebuilt(changed, out, embedder, calls)
    assert calls[1] >= calls[0]  # everything embedded again
    assert any("earlier build of another corpus or model were dropped" in line for line in lines), lines


def test_a_folder_it_did_not_write_is_refused_untouched(tmp_path, embedder, reference) -> None:
    records, _ = reference
    out = tmp_path / "index"
    mine = build_dir_for(out)
    mine.mkdir()
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"not a build folder searchsmith wrote .*notes.txt.*nothing was touched"):
        build_index(records, out, CFG, embedder=embedder)
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "mine" and not out.exists()


def test_a_killed_process_resumes(tmp_path, write_corpus) -> None:
    """SIGKILL-like death (``os._exit``: no cleanup runs) after 3 pieces, then a rerun."""
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "index"
    script = textwrap.dedent(f"""
        import os, sys
        import numpy as np
        from searchsmith.serving.corpus import read_corpus
        from searchsmith.serving.embedder import Embedder, EmbedderConfig
        from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index
        emb = Embedder(EmbedderConfig(max_batch_tokens=2048))
        cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3), build_part_chunks=4)
        die = sys.argv[1] == "die"
        def embed(texts):
            print("todo", len(texts), flush=True)
            for n, i in enumerate(range(0, len(texts), 3)):
                if die and n == 3:
                    os._exit(137)
                yield np.arange(i, min(i + 3, len(texts))), emb.encode(list(texts[i:i + 3]), show_progress=False)
        build_index(read_corpus({str(corpus)!r}), {str(out)!r}, cfg, embedder=emb, embed=embed, report=print)
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    first = subprocess.run([sys.executable, "-c", script, "die"], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 137, first.stderr[-2000:]
    assert not out.exists() and (build_dir_for(out) / "part-00001.npy").is_file()
    second = subprocess.run([sys.executable, "-c", script, "run"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    todo = [int(line.split()[1]) for line in (first.stdout + second.stdout).splitlines() if line.startswith("todo ")]
    assert todo[1] == todo[0] - 8 and "resuming: 2 of" in second.stdout
    assert (out / "manifest.json").is_file() and not build_dir_for(out).exists()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_build_part_chunks_must_be_a_positive_int(bad) -> None:
    with pytest.raises(ValueError, match="build_part_chunks"):
        IndexConfig(build_part_chunks=bad)
