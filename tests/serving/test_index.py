from __future__ import annotations

import json

import numpy as np
import pytest
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.serving.corpus import read_corpus
from searchsmith.serving.index import (
    Index,
    IndexConfig,
    add_documents,
    assign_stems,
    build_index,
    read_manifest,
    source_stem,
)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    from searchsmith.serving.main import main

    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_manifest_and_files(small_index) -> None:
    m = read_manifest(small_index)
    assert m["documents"] == 18 and m["chunks"] == 18
    assert set(m["sources"]) == {"cooking", "astronomy", "code"}
    assert m["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2" and m["embedding_dim"] == 384
    assert all(len(d) == 64 for d in m["files"].values())
    assert {"chunks.sqlite", "centroids.npy", "faiss/code.faiss"} <= set(m["files"])
    # the default chunk size fits the model window (256 - 2), not the paper's 350
    assert m["chunker"]["chunk_tokens"] == 254
    assert {v["file"] for v in m["sources"].values()} == {"cooking", "astronomy", "code"}
    assert m["format_version"] == 1  # plain labels: readable by searchsmith versions before labels
    assert m["sources"]["code"]["centroids"] == 2


def test_search_finds_the_right_chunk(small_index, embedder) -> None:
    idx = Index.load(small_index, embedder=embedder)
    q = embedder.encode(["where is the eviction code of the Lumen cache?"])
    hits = idx.search(q, k=3)[0]
    assert hits[0].chunk.doc_id == "code-0"
    assert hits[0].score >= hits[1].score >= hits[2].score
    only = idx.search(q, sources=["cooking"], k=2)[0]
    assert {h.chunk.source for h in only} == {"cooking"}


def test_kernel_backend_matches_faiss(small_index, embedder) -> None:
    q = embedder.encode(["planets and moons", "bread dough"])
    a = Index.load(small_index, search_backend="faiss").search(q, k=5)
    b = Index.load(small_index, search_backend="kernel").search(q, k=5)
    assert [[h.row for h in hs] for hs in a] == [[h.row for h in hs] for hs in b]
    np.testing.assert_allclose([h.score for h in a[0]], [h.score for h in b[0]], atol=1e-5)


def test_search_rejects_bad_input(small_index) -> None:
    idx = Index.load(small_index)
    with pytest.raises(ValidationError, match=r"expected \(B, 384\)"):
        idx.search(np.zeros((1, 12), dtype=np.float32))
    q = np.full((1, 384), 384 ** -0.5, dtype=np.float32)
    with pytest.raises(ValidationError, match="unknown source"):
        idx.search(q, sources=["nope"])
    with pytest.raises(ValidationError, match="no source"):
        idx.search(q, sources=[])


def test_add_documents_without_rebuild(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    new = [{"id": "geo-1", "source": "geography", "text": "The Danube flows through ten countries into the Black Sea."}]
    m = add_documents(d, new, embedder=embedder)
    assert m["documents"] == 19 and "geography" in m["sources"]
    idx = Index.load(d, embedder=embedder)
    assert idx.search(embedder.encode(["Which river flows into the Black Sea?"]), k=1)[0][0].chunk.doc_id == "geo-1"
    with pytest.raises(ValidationError, match="already in the index"):
        add_documents(d, new, embedder=embedder)


def test_only_the_top_level_manifest_is_left_out_of_the_files(tmp_path, small_index, embedder) -> None:
    """A build's (and --add's) file list and --repair's left out every file named manifest.json
    at any depth, as a bundle's did (models.export). No build writes one below the top, and
    --add / --repair refuse a file the manifest does not list, so only an index whose manifest
    lists one (written here by hand) tells: --add and --repair keep it listed with its sha256,
    and the folder stays one they may rebuild."""
    import shutil

    from searchsmith.models.io import files_sha256, sha256_file, write_json_atomic
    from searchsmith.serving.index import check_out_path
    from searchsmith.serving.index_repair import repair_index

    ix = tmp_path / "ix"
    shutil.copytree(small_index, ix)
    nested = ix / "faiss" / "manifest.json"
    nested.write_text('{"written": "by hand"}')
    # unlisted, it is a file the index did not write: refused, so no --add or --repair takes it in
    with pytest.raises(ValidationError, match=r"holds 1 file\(s\) the index did not write \(faiss/manifest.json\)"):
        check_out_path(ix, overwrite=True)

    listed = files_sha256(ix)
    assert listed["faiss/manifest.json"] == sha256_file(nested) and "manifest.json" not in listed
    write_json_atomic(ix / "manifest.json", {**read_manifest(ix), "files": listed})
    new = [{"id": "geo-1", "source": "geography", "text": "The Danube flows through ten countries into the Black Sea."}]
    add_documents(ix, new, embedder=embedder)
    assert read_manifest(ix)["files"]["faiss/manifest.json"] == sha256_file(nested)

    vec = ix / "vectors" / "geography.npy"
    vec.write_bytes(vec.read_bytes()[:100])
    assert repair_index(ix, embedder)["rebuilt"] == ["vectors/geography.npy"]
    files = read_manifest(ix)["files"]
    assert files["faiss/manifest.json"] == sha256_file(nested) and "manifest.json" not in files
    assert files == files_sha256(ix)
    check_out_path(ix, overwrite=True)  # every file listed: the next --add or --repair may rebuild it


def test_corrupt_and_missing_files(tmp_path, small_index) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    (d / "faiss" / "code.faiss").write_bytes(b"garbage")
    with pytest.raises(BundleError, match="faiss/code.faiss is corrupt"):
        Index.load(d)
    (d / "faiss" / "code.faiss").unlink()
    with pytest.raises(BundleError, match="faiss/code.faiss is missing"):
        Index.load(d)
    (d / "manifest.json").write_text("{broken")
    with pytest.raises(BundleError, match="manifest.json is corrupt"):
        Index.load(d)
    with pytest.raises(BundleError, match="does not exist"):
        Index.load(tmp_path / "nowhere")


def test_mismatched_model_or_dimension_is_refused(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    m = json.loads((d / "manifest.json").read_text())
    m["embedding_model"], m["embedding_dim"] = "other/model", 768
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="was built with other/model \\(dim 768\\)"):
        Index.load(d, embedder=embedder)


def test_failed_build_leaves_old_index(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    before = (d / "manifest.json").read_text()
    with pytest.raises(ValidationError):
        build_index([], d, IndexConfig(), embedder=embedder)
    assert (d / "manifest.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".index.tmp")]


def test_empty_corpus_file(tmp_path) -> None:
    (tmp_path / "c.jsonl").write_text("\n")
    with pytest.raises(ValidationError, match="empty"):
        read_corpus(tmp_path / "c.jsonl")


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_ann_index_types(tmp_path, embedder, write_corpus, kind) -> None:
    from searchsmith.serving.corpus import read_corpus

    recs = read_corpus(write_corpus(tmp_path / "c.jsonl"))
    m = build_index(recs, tmp_path / "ix", IndexConfig(index_type=kind), embedder=embedder)
    assert {v["index_type"] for v in m["sources"].values()} == {kind}
    idx = Index.load(tmp_path / "ix", embedder=embedder)
    assert idx.search(embedder.encode(["Saturn rings ice"]), k=1)[0][0].chunk.doc_id == "astronomy-4"


def test_auto_switches_to_ivf_above_the_threshold(tmp_path, embedder, write_corpus) -> None:
    from searchsmith.serving.corpus import read_corpus

    recs = read_corpus(write_corpus(tmp_path / "c.jsonl"))
    m = build_index(recs, tmp_path / "ix", IndexConfig(ann_min_vectors=5), embedder=embedder)
    assert {v["index_type"] for v in m["sources"].values()} == {"ivf"}


# -- never replace what searchsmith did not write ---------------------------
def test_out_refuses_a_file_and_keeps_it(tmp_path, capsys, write_corpus, embedder) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    before = corpus.read_bytes()
    rc, _, err = _run(capsys, "index", str(corpus), "--out", str(corpus))
    assert rc == 1 and "is a corpus file, not an index folder; nothing was replaced" in err
    assert "--out indexes/corpus" in err
    assert corpus.read_bytes() == before  # the old code turned the corpus into an index folder
    for force in (False, True):  # --force replaces indexes only
        with pytest.raises(ValidationError, match="nothing was replaced"):
            build_index(read_corpus(corpus), corpus, embedder=embedder, overwrite=force)
    assert corpus.read_bytes() == before


def test_out_refuses_a_user_folder_and_keeps_its_files(tmp_path, capsys, write_corpus, embedder) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("do not lose me")
    for extra in ([], ["--force"]):
        rc, _, err = _run(capsys, "index", str(corpus), "--out", str(folder), *extra)
        assert rc == 1 and "is a folder that is not a searchsmith index" in err and "notes.txt" in err
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "do not lose me"  # the old code deleted it
    with pytest.raises(ValidationError, match="not a searchsmith index"):
        build_index(read_corpus(corpus), folder, embedder=embedder, overwrite=True)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_existing_index_is_replaced_only_with_force(tmp_path, capsys, small_index, write_corpus, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    before = (d / "manifest.json").read_bytes()
    rc, _, err = _run(capsys, "index", str(corpus), "--out", str(d))
    assert rc == 1 and "already holds a searchsmith index (18 documents" in err
    assert "Pass --force to rebuild it, or --add" in err
    assert (d / "manifest.json").read_bytes() == before
    records = read_corpus(corpus)[:5]
    with pytest.raises(ValidationError, match="already holds a searchsmith index"):
        build_index(records, d, embedder=embedder)
    m = build_index(records, d, embedder=embedder, overwrite=True)
    assert m["documents"] == 5 and read_manifest(d)["documents"] == 5
    # no temp or old folder left, nor the lock file (models.io.exclusive removes it)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".index.")]
    # an index folder holding a file the index did not write is not replaced, even with --force
    (d / "faiss" / "my-notes.md").write_text("mine")
    with pytest.raises(ValidationError, match=r"holds 1 file\(s\) the index did not write \(faiss/my-notes.md\)"):
        build_index(records, d, embedder=embedder, overwrite=True)
    assert (d / "faiss" / "my-notes.md").read_text() == "mine"


def test_out_may_be_an_empty_folder(tmp_path, write_corpus, embedder) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    m = build_index(read_corpus(write_corpus(tmp_path / "c.jsonl"))[:3], d, embedder=embedder)
    assert m["documents"] == 3 and (d / "manifest.json").is_file()


def test_add_and_force_through_the_cli(tmp_path, capsys, small_index) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    extra = tmp_path / "more.jsonl"
    extra.write_text(json.dumps({"id": "geo-1", "source": "Geography / Rivers",
                                 "text": "The Danube flows through ten countries into the Black Sea."}) + "\n")
    rc, out, err = _run(capsys, "index", str(extra), "--out", str(d), "--add")
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["documents"] == 19 and summary["sources"]["Geography / Rivers"] == 1
    assert "index --add: 1 documents -> 1 chunks in 1 source(s)" in err and "Loading weights" not in err
    with pytest.raises(SystemExit):  # one or the other
        _run(capsys, "index", str(extra), "--out", str(d), "--add", "--force")


def test_ask_hint_never_suggests_writing_over_the_corpus(tmp_path, capsys, write_corpus) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    rc, _, err = _run(capsys, "ask", "what is Saturn made of?", "--index", str(corpus))
    assert rc == 1 and "is a corpus file, not an index folder" in err
    assert f"searchsmith index {corpus} --out indexes/corpus" in err
    assert f"--out {corpus}" not in err  # the old hint, which would have destroyed the corpus
    binary = tmp_path / "notes.bin"
    binary.write_bytes(b"\0\1")
    with pytest.raises(BundleError, match="is a file, not an index folder"):
        read_manifest(binary)
    with pytest.raises(BundleError, match="--out indexes/missing'"):
        read_manifest(tmp_path / "missing.jsonl")
    with pytest.raises(BundleError, match=f"--out {tmp_path / 'nowhere'}'"):
        read_manifest(tmp_path / "nowhere")


# -- default chunk size and noise -------------------------------------------
def test_default_chunk_size_fits_the_window_without_a_warning(tmp_path, write_corpus, embedder, caplog) -> None:
    import logging

    from searchsmith.serving.chunker import ChunkerConfig

    recs = read_corpus(write_corpus(tmp_path / "c.jsonl"))[:2]
    with caplog.at_level(logging.INFO, logger="searchsmith.serving.index"):
        m = build_index(recs, tmp_path / "a", embedder=embedder)
    assert m["chunker"]["chunk_tokens"] == 254
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # the old default warned every time
    assert any("chunks of 254 tokens" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="searchsmith.serving.index"):
        m = build_index(recs, tmp_path / "b", IndexConfig(chunker=ChunkerConfig(chunk_tokens=400)), embedder=embedder)
    assert m["chunker"]["chunk_tokens"] == 254  # an explicit size over the window is clamped, with a warning
    assert any("chunk_tokens=400 exceeds" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert ChunkerConfig().fitted(510).chunk_tokens == 350 and ChunkerConfig().fitted(100).chunk_tokens == 100
    assert ChunkerConfig(chunk_tokens=50).fitted(20).chunk_tokens == 50


def test_index_cli_is_quiet_and_says_each_step(tmp_path, capsys, write_corpus) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    rc, out, err = _run(capsys, "index", str(corpus), "--out", str(tmp_path / "ix"))
    assert rc == 0, err
    assert json.loads(out)["chunk_tokens"] == 254
    lines = err.strip().splitlines()
    assert lines[0] == f"index: reading {corpus}" and lines[-1].startswith(f"index: wrote {tmp_path / 'ix'} in ")
    assert any("18 documents -> 18 chunks of <= 254 tokens in 3 source(s)" in line for line in lines)
    assert "Loading weights" not in err and "WARNING" not in err and "exceeds" not in err


# -- free-text source labels ------------------------------------------------
def test_source_stems() -> None:
    assert source_stem("cooking") == "cooking" and source_stem("product_docs") == "product_docs"
    stem = source_stem("Healthcare / Medicine")
    assert stem.startswith("healthcare-medicine-") and len(stem) == len("healthcare-medicine-") + 10
    assert stem == source_stem("Healthcare / Medicine")  # stable
    assert source_stem("Code") != "Code" and source_stem("con") != "con"  # case-insensitive FS, Windows names
    assert source_stem("東京").startswith("source-") and source_stem("東京") != source_stem("大阪")
    assert len(source_stem("x" * 200)) <= 51
    with pytest.raises(ValidationError, match="'code' collides with source 'Code'"):
        assign_stems(["code"], {"Code": "Code"})
    with pytest.raises(ValidationError, match="collides"):
        assign_stems(["Climate Science", "climate science"])
    assert assign_stems(["A b", "cooking"], {"cooking": "cooking"})["cooking"] == "cooking"


def test_free_text_labels_are_stored_under_derived_names(labelled_index, embedder) -> None:
    from tests.serving.conftest import LABELS

    m = read_manifest(labelled_index)
    assert set(m["sources"]) == set(LABELS.values()) and m["format_version"] == 2
    for label, info in m["sources"].items():
        assert info["file"] == source_stem(label) and f"faiss/{info['file']}.faiss" in m["files"]
    assert all("/" not in rel.split("/", 1)[1] for rel in m["files"] if "/" in rel)  # no label-made folders
    idx = Index.load(labelled_index, embedder=embedder)
    assert idx.sources == sorted(LABELS.values())
    hits = idx.search(embedder.encode(["Saturn rings ice"]), sources=["Astronomie · Espace"], k=2)[0]
    assert {h.chunk.source for h in hits} == {"Astronomie · Espace"} and hits[0].to_dict()["source"] == "Astronomie · Espace"
    kernel = Index.load(labelled_index, search_backend="kernel")  # reads vectors/ through the stems
    assert [h.row for h in kernel.search(embedder.encode(["Saturn rings ice"]), k=3)[0]] == \
        [h.row for h in idx.search(embedder.encode(["Saturn rings ice"]), k=3)[0]]


def test_add_to_a_labelled_index_and_collisions(tmp_path, labelled_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(labelled_index, d)
    with pytest.raises(ValidationError, match="'code / repos' collides with source 'Code / Repos'"):
        add_documents(d, [{"id": "x", "source": "code / repos", "text": "The router lives in router.py."}],
                      embedder=embedder)
    m = add_documents(d, [{"id": "x", "source": "Code / Repos", "text": "The router lives in router.py."},
                          {"id": "y", "source": "Healthcare / Medicine", "text": "Aspirin thins the blood."}],
                      embedder=embedder)
    assert m["sources"]["Code / Repos"]["chunks"] == 7 and m["sources"]["Healthcare / Medicine"]["chunks"] == 1
    idx = Index.load(d, embedder=embedder)
    assert idx.search(embedder.encode(["blood thinner"]), k=1)[0][0].chunk.source == "Healthcare / Medicine"


def test_indexes_from_before_labels_still_load(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    m = json.loads((d / "manifest.json").read_text())
    for info in m["sources"].values():
        del info["file"]  # how every index was written before
    m["format_version"] = 1
    (d / "manifest.json").write_text(json.dumps(m))
    idx = Index.load(d, embedder=embedder)
    assert idx.search(embedder.encode(["bread dough"]), sources=["cooking"], k=1)[0][0].chunk.source == "cooking"
    assert idx.vector_files("code")[0] == d / "vectors" / "code.npy"
    m2 = add_documents(d, [{"id": "z", "source": "Space / Planets", "text": "Mars has two moons."}], embedder=embedder)
    assert m2["sources"]["cooking"]["file"] == "cooking" and m2["sources"]["Space / Planets"]["file"] != "Space / Planets"


def test_chunks_are_looked_up_by_title(tmp_path, embedder, write_corpus) -> None:
    extra = [
        {"id": "kt", "source": "astronomy", "title": "Kiss and Tell (1945 film)", "text": "Kiss and Tell is a film."},
        {"id": "kt2", "source": "code", "title": "Kiss and Tell", "text": "Kiss and Tell is a library."},
        {"id": "pct", "source": "code", "title": "100% Pure_Go", "text": "A Go library."},
        {"id": "near", "source": "code", "title": "100x PureXGo", "text": "Not the one asked for."},
    ]
    corpus = write_corpus(tmp_path / "corpus.jsonl", extra)
    build_index(read_corpus(corpus), tmp_path / "index", IndexConfig(), embedder=embedder)
    idx = Index.load(tmp_path / "index", embedder=embedder)
    try:
        # the title alone or with a disambiguator, any case, in row order; a source filter
        assert sorted(h.chunk.doc_id for h in idx.titled("kiss AND tell")) == ["kt", "kt2"]
        assert [h.chunk.doc_id for h in idx.titled("Kiss and Tell", ["code"])] == ["kt2"]
        assert len(idx.titled("Kiss and Tell", limit=1)) == 1
        # LIKE's wildcards in a name are letters, not patterns
        assert [h.chunk.doc_id for h in idx.titled("100% Pure_Go")] == ["pct"]
        # no such title, a part of one, an empty name, a source the index lacks: nothing
        assert idx.titled("Kiss") == [] and idx.titled("") == [] and idx.titled("Kiss and Tell", ["nope"]) == []
        assert all(h.score == 0.0 for h in idx.titled("Kiss and Tell"))
    finally:
        idx.close()


def test_lexical_search_ranks_chunks_by_bm25(small_index, embedder) -> None:
    idx = Index.load(small_index, embedder=embedder)
    try:
        assert idx.has_lexical
        hits = idx.lexical("Where is the Evictor class?", k=3)
        assert hits[0].chunk.text.startswith("The Lumen cache eviction policy")
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(0 < h.score <= 1 for h in hits)
        # the score is the share of the most the query can score: words no chunk holds lower it
        alone = idx.lexical("Evictor", k=1)[0]
        assert alone.row == hits[0].row and 0.3 < alone.score < 1
        assert idx.lexical("Evictor zyxwv qqqpp", k=1)[0].score < alone.score / 2
        # a file name is one phrase of its parts
        assert idx.lexical("Which file is lumen/evict.py?", k=1)[0].row == hits[0].row
        assert idx.lexical("lumen/retry.py") == []  # no chunk holds that phrase
        # words, not stems; accents and case folded; quotes and FTS5 operators in a question are words
        assert idx.lexical("kneading") == [] and idx.lexical("KNÉAD", k=1)[0].chunk.source == "cooking"
        assert idx.lexical('"dough" AND NEAR(OR', k=1)[0].chunk.source == "cooking"
        # a source filter, a question of stop words only, no match: nothing
        assert idx.lexical("Evictor", ["cooking"]) == [] and idx.lexical("Is it?") == []
        assert idx.lexical("zzqx") == []
        with pytest.raises(ValidationError, match="unknown source"):
            idx.lexical("dough", ["nope"])
        with pytest.raises(ValidationError, match="k must be"):
            idx.lexical("dough", k=0)
    finally:
        idx.close()


def test_lexical_terms_are_the_tables_words() -> None:
    from searchsmith.serving.index import LEXICAL_MAX_TERMS, lexical_terms

    assert lexical_terms("What is Beacon 2.4?") == ["beacon", "2 4"]
    assert lexical_terms("Café au lait, CAFÉ snake_case") == ["cafe", "au", "lait", "snake case"]
    assert lexical_terms("Who played Alex P. Keaton's girlfriend in lumen/evict.py?") == [
        "played", "alex", "p", "keaton", "girlfriend", "lumen evict py"]
    assert lexical_terms("Is it?") == [] and lexical_terms("") == []
    assert len(lexical_terms(" ".join(f"w{i}" for i in range(500)))) == LEXICAL_MAX_TERMS


def _drop_lexical_table(index_dir) -> None:
    """Make ``index_dir`` an index of before the full-text table (its chunks.sqlite only)."""
    import sqlite3

    db = sqlite3.connect(index_dir / "chunks.sqlite")
    db.executescript("DROP TRIGGER chunks_fts_ai; DROP TRIGGER chunks_fts_ad; DROP TRIGGER chunks_fts_au; "
                     "DROP TABLE chunks_fts; VACUUM;")
    db.commit()
    db.close()
    # an older index's manifest holds the sha256 of the file it wrote (--add verifies them)
    import json

    from searchsmith.models.io import sha256_file

    manifest = json.loads((index_dir / "manifest.json").read_text())
    manifest["files"]["chunks.sqlite"] = sha256_file(index_dir / "chunks.sqlite")
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


def test_lexical_table_follows_additions_and_older_indexes_gain_it(tmp_path, small_index, embedder) -> None:
    import shutil

    d = tmp_path / "index"
    shutil.copytree(small_index, d)
    _drop_lexical_table(d)
    old = Index.load(d, embedder=embedder, verify=False)
    assert not old.has_lexical and old.lexical("dough") == []  # dense search still answers
    old.close()
    add_documents(d, [{"id": "geo-1", "source": "geography", "text": "The Danube flows into the Black Sea."},
                      {"id": "b24", "source": "code", "text": "Beacon 2.4 shipped in February."},
                      {"id": "b20", "source": "code", "text": "Beacon 2.0 shipped in May 2024."}],
                  embedder=embedder)
    idx = Index.load(d, embedder=embedder)  # checksums re-written with the new table
    try:
        assert idx.has_lexical
        assert idx.lexical("Danube", k=1)[0].chunk.doc_id == "geo-1"  # the added chunk, by its trigger
        assert idx.lexical("knead", k=1)[0].chunk.source == "cooking"  # the older chunks, indexed once
        # "2.4" is a phrase: Beacon 2.0 (which holds a 2 and a 4) matches only "Beacon"
        b24, b20 = idx.lexical("When did Beacon 2.4 ship?", k=2)
        assert b24.chunk.doc_id == "b24" and b20.chunk.doc_id == "b20" and b20.score < b24.score / 2
    finally:
        idx.close()
