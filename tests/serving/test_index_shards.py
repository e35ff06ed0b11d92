"""Sharded sources and memory-mapped FAISS files (serving/index.py): the same top-k as one
index, stale shards never left behind, corrupt shards refused and repaired (``index --repair``),
and an mmap index that a fresh process searches without reading it into RAM."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from searchsmith.models.errors import BundleError
from searchsmith.serving.corpus import read_corpus
from searchsmith.serving.index import CentroidConfig, Index, IndexConfig, add_documents, build_index

QUERIES = ["How long should I knead bread dough?", "What is the largest planet?", "How do I fix a merge conflict?",
           "Which oven temperature for rye?"]


def _build(tmp_path, embedder, write_corpus, name: str, **cfg):
    corpus = write_corpus(tmp_path / f"{name}.jsonl")
    out = tmp_path / name
    build_index(read_corpus(corpus), out, IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3), **cfg),
                embedder=embedder)
    return out


def _topk(index: Index, embedder, k: int = 5):
    hits = index.search(np.asarray(embedder.encode(QUERIES), dtype=np.float32), k=k)
    return [[(h.chunk.chunk_id, round(h.score, 5)) for h in row] for row in hits]


@pytest.mark.parametrize("index_type", ["flat", "ivf"])
def test_a_sharded_source_returns_the_same_top_k_as_one_index(tmp_path, embedder, write_corpus, index_type) -> None:
    one = _build(tmp_path, embedder, write_corpus, "one", index_type=index_type)
    many = _build(tmp_path, embedder, write_corpus, "many", index_type=index_type, shard_max_vectors=2)
    manifest = json.loads((many / "manifest.json").read_text())
    sharded = {label: info["shards"] for label, info in manifest["sources"].items() if info.get("shards")}
    assert sharded and all(n >= 2 for n in sharded.values())
    for label, n in sharded.items():
        stem = manifest["sources"][label]["file"]
        assert [f"faiss/{stem}.{k}.faiss" for k in range(n)] == sorted(
            f for f in manifest["files"] if f.startswith(f"faiss/{stem}."))
    a, b = Index.load(one, embedder=embedder), Index.load(many, embedder=embedder)
    try:
        assert _topk(a, embedder) == _topk(b, embedder)
        assert _topk(a, embedder, k=50) == _topk(b, embedder, k=50)  # k past one shard's size
    finally:
        a.close()
        b.close()


def test_adding_documents_reshards_without_stale_files(tmp_path, embedder, write_corpus) -> None:
    many = _build(tmp_path, embedder, write_corpus, "many", shard_max_vectors=3)
    before = json.loads((many / "manifest.json").read_text())
    extra = [{"id": f"extra-{i}", "source": "cooking", "text": f"Sourdough note {i}: feed the starter with flour "
              f"and water every {i + 2} hours, and keep it warm."} for i in range(7)]
    add_documents(many, extra, embedder)
    after = json.loads((many / "manifest.json").read_text())
    label = next(lbl for lbl, info in after["sources"].items() if info["file"] == "cooking")
    stem = after["sources"][label]["file"]
    assert after["sources"][label]["shards"] > before["sources"][label].get("shards", 1)
    on_disk = sorted(str(p.relative_to(many)) for p in (many / "faiss").glob(f"{stem}*.faiss"))
    assert on_disk == sorted(f for f in after["files"] if f.startswith(f"faiss/{stem}"))
    index = Index.load(many, embedder=embedder)
    try:
        hits = index.search(np.asarray(embedder.encode(["How often do I feed a sourdough starter?"]), np.float32), k=3)
        assert hits[0][0].chunk.doc_id.startswith("extra-")
    finally:
        index.close()


def test_a_corrupt_shard_is_refused(tmp_path, embedder, write_corpus) -> None:
    many = _build(tmp_path, embedder, write_corpus, "many", shard_max_vectors=2)
    shard = next((many / "faiss").glob("*.1.faiss"))
    shard.write_bytes(shard.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(BundleError, match=rf"{shard.name} is corrupt \(sha256 mismatch\)"):
        Index.load(many, embedder=embedder)


def test_mmap_loads_answer_as_the_in_memory_index(tmp_path, embedder, write_corpus) -> None:
    for index_type in ("flat", "ivf", "hnsw"):
        d = _build(tmp_path, embedder, write_corpus, f"m-{index_type}", index_type=index_type, shard_max_vectors=4)
        ram, mapped = Index.load(d, embedder=embedder), Index.load(d, embedder=embedder, mmap=True)
        try:
            assert mapped.config.mmap and not ram.config.mmap
            assert _topk(ram, embedder) == _topk(mapped, embedder)
        finally:
            ram.close()
            mapped.close()


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="shard_max_vectors"):
        IndexConfig(shard_max_vectors=-1)
    with pytest.raises(ValueError, match="mmap"):
        IndexConfig(mmap="yes")
    assert IndexConfig(shard_max_vectors=10).shards_for(25) == 3 and IndexConfig().shards_for(10**9) == 1


RSS_PROBE = textwrap.dedent("""
    import sys, faiss, numpy as np
    from pathlib import Path
    from searchsmith.serving.index import read_faiss

    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    before = rss_mb()
    index = read_faiss(Path(sys.argv[1]), "ivf", mmap=sys.argv[2] == "mmap")
    loaded = rss_mb() - before
    q = np.load(sys.argv[3])
    _, ids = index.search(q, 5)
    print(loaded, " ".join(map(str, ids[0])))
""")


def test_an_mmap_ivf_index_is_searched_without_reading_it_into_ram(tmp_path) -> None:
    """A fresh process maps a 60k x 384 IVF file (about 90 MB): its memory grows by a few MB."""
    import faiss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((60_000, 384)).astype(np.float32)
    faiss.normalize_L2(x)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(384), 384, 64, faiss.METRIC_INNER_PRODUCT)
    ivf.train(x[:10_000])
    ivf.nprobe = 4
    index = faiss.IndexIDMap2(ivf)
    index.add_with_ids(x, np.arange(len(x), dtype=np.int64))
    path = tmp_path / "big.faiss"
    faiss.write_index(index, str(path))
    np.save(tmp_path / "q.npy", x[:2])
    runs = {}
    for mode in ("mmap", "ram"):
        out = subprocess.run([sys.executable, "-c", RSS_PROBE, str(path), mode, str(tmp_path / "q.npy")],
                             capture_output=True, text=True, check=True).stdout.split()
        runs[mode] = (float(out[0]), out[1:])
    size_mb = path.stat().st_size / 2**20
    assert runs["ram"][0] > 0.8 * size_mb  # read into memory
    assert runs["mmap"][0] < 0.1 * size_mb, runs  # only mapped
    assert runs["mmap"][1] == runs["ram"][1] and runs["mmap"][1][0] == "0"  # same answers; finds itself


def _damage(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_shard_is_refused_then_repaired_from_the_saved_vectors(tmp_path, embedder, write_corpus) -> None:
    from searchsmith.serving.index_repair import repair_index

    many = _build(tmp_path, embedder, write_corpus, "many", shard_max_vectors=2)
    index = Index.load(many, embedder=embedder)
    before = _topk(index, embedder)
    index.close()
    manifest = json.loads((many / "manifest.json").read_text())
    shard = next(f for f in manifest["files"] if f.endswith(".1.faiss"))
    _damage(many / shard)
    (many / "centroids.npy").unlink()
    with pytest.raises(BundleError, match=r"repair it with 'searchsmith index --repair"):
        Index.load(many, embedder=embedder)
    lines: list[str] = []
    out = repair_index(many, embedder=embedder, report=lines.append)
    assert out["damaged"] == sorted([shard, "centroids.npy"]) and out["rebuilt"] == out["damaged"]
    assert out["reembedded_sources"] == []  # the saved vectors were enough
    index = Index.load(many, embedder=embedder)
    try:
        assert _topk(index, embedder) == before
    finally:
        index.close()
    assert repair_index(many, embedder=embedder)["damaged"] == []  # nothing left to repair


def test_damaged_vectors_are_embedded_again_from_the_chunk_store(tmp_path, embedder, write_corpus, capsys) -> None:
    from searchsmith.serving.main import main

    one = _build(tmp_path, embedder, write_corpus, "one")
    index = Index.load(one, embedder=embedder)
    before = _topk(index, embedder)
    index.close()
    manifest = json.loads((one / "manifest.json").read_text())
    label = sorted(manifest["sources"])[0]
    stem = manifest["sources"][label]["file"]
    _damage(one / "vectors" / f"{stem}.npy")
    (one / "vectors" / f"{stem}.ids.npy").unlink()
    (one / "faiss" / f"{stem}.faiss").unlink()
    assert main(["index", "--repair", "--out", str(one)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["reembedded_sources"] == [label] and len(summary["rebuilt"]) == 3
    index = Index.load(one, embedder=embedder)
    try:
        got = _topk(index, embedder)
    finally:
        index.close()
    assert [[c for c, _ in row] for row in got] == [[c for c, _ in row] for row in before]
    assert np.allclose([[s for _, s in row] for row in got], [[s for _, s in row] for row in before], atol=1e-4)


def test_a_corrupt_chunk_store_cannot_be_repaired_without_the_corpus(tmp_path, embedder, write_corpus,
                                                                     capsys) -> None:
    from searchsmith.serving.index_repair import repair_index
    from searchsmith.serving.main import main

    one = _build(tmp_path, embedder, write_corpus, "one")
    _damage(one / "chunks.sqlite")
    with pytest.raises(BundleError, match=r"chunk store .* rebuild from the corpus: searchsmith index CORPUS"):
        repair_index(one, embedder=embedder)
    assert main(["index", "corpus.jsonl", "--repair", "--out", str(one)]) != 0
    assert "drop the corpus" in capsys.readouterr().err
    assert main(["index", "--out", str(one)]) != 0
    assert "give the corpus" in capsys.readouterr().err
