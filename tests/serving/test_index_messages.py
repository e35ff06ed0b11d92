"""What an index folder without its manifest is told: damaged when it holds index files, not an
index at all when it holds none (it was told to "rebuild the index", which the build refuses)."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.serving.index import read_manifest


def test_a_folder_of_other_files_is_not_an_index(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="not a searchsmith index .*into a new folder"):
        read_manifest(tmp_path)


def test_an_index_without_its_manifest_is_damaged(tmp_path) -> None:
    (tmp_path / "chunks.sqlite").write_bytes(b"")
    # a lone chunks.sqlite is too little to replace the folder on: a new folder is the fix
    with pytest.raises(BundleError, match="manifest.json is missing; the index's other files are missing too.*"
                                          "searchsmith index CORPUS.jsonl --out NEW_DIR"):
        read_manifest(tmp_path)
    (tmp_path / "faiss").mkdir()
    (tmp_path / "faiss" / "news.faiss").write_bytes(b"")
    with pytest.raises(BundleError, match=f"manifest.json is missing; rebuild it from its corpus .*"
                                          f"searchsmith index CORPUS.jsonl --out {tmp_path} --force"):
        read_manifest(tmp_path)


def _copy(small_index, tmp_path):
    import shutil

    out = tmp_path / "ix"
    shutil.copytree(small_index, out)
    return out


DOC = {"id": "new-1", "source": "extra", "title": "Added", "text": "A document added later about ferns."}


def test_add_refuses_an_index_with_a_missing_or_damaged_file(small_index, embedder, tmp_path) -> None:
    """--add onto an index without chunks.sqlite exited 0: the chunk texts were lost and their
    sha256s rewritten over the damage, so --repair saw nothing to repair."""
    from searchsmith.serving.index import add_documents

    ix = _copy(small_index, tmp_path)
    (ix / "chunks.sqlite").unlink()
    with pytest.raises(BundleError, match="chunks.sqlite is missing; repair it with 'searchsmith index --repair"):
        add_documents(ix, [DOC], embedder)
    ix2 = _copy(small_index, tmp_path / "b")
    vec = next((ix2 / "vectors").glob("*.npy"))
    vec.write_bytes(vec.read_bytes()[:100])  # truncated: numpy's "EOF: reading array header" before
    with pytest.raises(BundleError, match=f"{vec.name} is corrupt .*--repair"):
        add_documents(ix2, [DOC], embedder)


def test_a_second_writer_of_the_same_index_is_refused(small_index, embedder, tmp_path) -> None:
    """Two --add runs into one index both exited 0 and the first one's documents were lost; two
    builds into one --out shared their parts folder and one crashed."""
    from searchsmith.models.errors import ConfigError
    from searchsmith.models.io import exclusive
    from searchsmith.serving.index import add_documents, build_index
    from searchsmith.serving.index_repair import repair_index

    ix = _copy(small_index, tmp_path)
    with exclusive(ix, "test"):  # as another process's build holds it
        with pytest.raises(ConfigError, match="being written by another searchsmith process"):
            add_documents(ix, [DOC], embedder)
        with pytest.raises(ConfigError, match="being written by another searchsmith process"):
            build_index([DOC], ix, embedder=embedder, overwrite=True)
        with pytest.raises(ConfigError, match="index --repair: .*being written by another"):
            repair_index(ix, embedder)
    assert add_documents(ix, [DOC], embedder)["documents"] > 0  # released: it goes through


def test_the_lock_is_the_kernels_and_dies_with_its_process(tmp_path) -> None:
    import subprocess
    import sys

    from searchsmith.models.errors import ConfigError
    from searchsmith.models.io import exclusive

    target = tmp_path / "ix"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from searchsmith.models.io import exclusive\n"
        f"with exclusive({str(target)!r}, 'holder'):\n    print('held', flush=True); time.sleep(30)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="another searchsmith process"), exclusive(target, "second"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive(target, "after the holder died"):
        pass


def test_add_and_repair_refuse_a_folder_holding_the_users_files(small_index, embedder, tmp_path) -> None:
    """--add copied a file of the user's in the index folder into the new index and listed it in
    the manifest as the index's own; a later --force then deleted it (found by probing,
    2026-12-06). --add and --repair rebuild the folder, so they refuse it as --force does."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.index import add_documents, check_out_path
    from searchsmith.serving.index_repair import repair_index

    ix = _copy(small_index, tmp_path)
    (ix / "mynotes.txt").write_text("my thesis draft")
    before = read_manifest(ix)
    with pytest.raises(ValidationError, match=r"index --add .*holds 1 file\(s\) the index did not write \(mynotes.txt\)"):
        add_documents(ix, [DOC], embedder)
    assert read_manifest(ix) == before and (ix / "mynotes.txt").read_text() == "my thesis draft"
    vec = next((ix / "vectors").glob("*.npy"))
    vec.write_bytes(vec.read_bytes()[:100])  # something to repair
    with pytest.raises(ValidationError, match=r"index --repair .*mynotes.txt"):
        repair_index(ix, embedder)
    assert "mynotes.txt" not in read_manifest(ix)["files"]
    (ix / "mynotes.txt").unlink()  # moved out: both work again
    repair_index(ix, embedder)
    add_documents(ix, [DOC], embedder)
    with pytest.raises(ValidationError, match="did not write"):
        (ix / "faiss" / "extra.txt").write_text("mine too")
        check_out_path(ix, overwrite=True)


def test_search_takes_any_k_and_refuses_wrong_types(small_index, embedder) -> None:
    """k = 10**9 over a few hundred chunks took the process out of memory (faiss allocates k
    results per query); wrong types gave TypeErrors from faiss and numpy (probed 2026-12-06)."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.index import Index

    index = Index.load(small_index, embedder=embedder)
    q = embedder.encode(["how long should I knead bread dough"])
    every = index.search(q, k=10**9)[0]
    assert len(every) == read_manifest(small_index)["chunks"]  # every chunk, ranked
    assert [h.row for h in every[:3]] == [h.row for h in index.search(q, k=3)[0]]
    for bad, field in [(2.5, "k must be an int"), ("3", "k must be an int"), (None, "k must be an int"),
                       (True, "k must be an int")]:
        with pytest.raises(ValidationError, match=field):
            index.search(q, k=bad)
    with pytest.raises(ValidationError, match="sources must be a list of source names"):
        index.search(q, sources=index.sources[0])
    with pytest.raises(ValidationError, match="query vectors must be numbers"):
        index.search("hello")
    with pytest.raises(ValidationError, match="text must be a string"):
        index.lexical(None)
    with pytest.raises(ValidationError, match="name must be a string"):
        index.titled(5)


def test_an_out_path_through_a_file_is_a_clear_error(tmp_path, write_corpus, capsys) -> None:
    """``index --out notes.txt/x`` printed a FileExistsError traceback (probed 2026-12-06)."""
    from searchsmith.serving.main import main

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    corpus = tmp_path / "c.jsonl"
    write_corpus(corpus)
    assert main(["index", str(corpus), "--out", str(notes / "x")]) != 0
    err = capsys.readouterr().err
    assert "is a file, not a folder; nothing was written" in err and "Traceback" not in err
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("edit,message", [
    ({"format_version": "x"}, "format_version: expected an int >= 1"),
    ({"embedding_dim": "abc"}, "embedding_dim: expected an int >= 1"),
    ({"sources": []}, "sources: expected a non-empty"),
    ({"sources": {}}, "sources: expected a non-empty"),
    ({"files": []}, "files: expected"),
    ({"config": None}, "config: expected a mapping"),
])
def test_a_hand_edited_index_manifest_is_refused_naming_the_field(small_index, tmp_path, edit, message) -> None:
    """These reached Index.load as ValueError, AttributeError or KeyError (probed 2026-12-06)."""
    import json

    from searchsmith.serving.index import Index

    ix = _copy(small_index, tmp_path)
    m = json.loads((ix / "manifest.json").read_text())
    (ix / "manifest.json").write_text(json.dumps({**m, **edit}))
    with pytest.raises(BundleError, match=rf"manifest.json was edited or damaged \(.*{message}"):
        Index.load(ix)


def test_a_manifest_that_is_not_an_object_is_not_an_index_manifest(small_index, tmp_path) -> None:
    ix = _copy(small_index, tmp_path)
    (ix / "manifest.json").write_text("[1, 2]")
    with pytest.raises(BundleError, match="not a searchsmith index manifest"):
        read_manifest(ix)


def test_a_nan_query_vector_is_refused(small_index, embedder) -> None:
    """It returned no hits, silently (probed 2026-12-06)."""
    import numpy as np
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.index import Index

    q = embedder.encode(["bread"])
    q[0, 3] = np.nan
    with pytest.raises(ValidationError, match="NaN or infinite"):
        Index.load(small_index, embedder=embedder).search(q)


def test_query_vectors_are_scaled_to_unit_norm_and_a_zero_one_is_refused(small_index, embedder) -> None:
    """A scaled query scored 3x its cosines and a zero one scored every chunk 0 (an arbitrary
    order), without a word: scores are cosines whatever the query's norm."""
    import numpy as np
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.index import Index

    ix = Index.load(small_index, embedder=embedder)
    q = embedder.encode(["bread"])
    unit = ix.search(q, k=3)[0]
    scaled = ix.search(3.0 * q, k=3)[0]
    assert [h.row for h in scaled] == [h.row for h in unit]
    assert np.allclose([h.score for h in scaled], [h.score for h in unit], atol=1e-5)
    assert max(h.score for h in scaled) <= 1.0 + 1e-5
    with pytest.raises(ValidationError, match="query vector 1 is all zeros"):
        ix.search(np.vstack([q, np.zeros_like(q)]))


def test_a_refused_build_leaves_nothing_beside_the_users_folder(embedder, tmp_path) -> None:
    """'index --out user' refused the user's folder but left an empty '.user.lock' beside it
    (found by probing, 2026-12-06): a lock file the refused write created is removed again."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.serving.index import build_index

    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(ValidationError, match="not a searchsmith index"):
        build_index([DOC], user, embedder=embedder, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user"]
    assert (user / "notes.txt").read_text() == "mine"


def test_a_lock_file_removed_under_a_waiting_writer_is_locked_again(tmp_path) -> None:
    """Removing a refused writer's lock file must not let two writers hold two files: a writer
    that opened the old file locks the one now at the path."""
    import fcntl
    import os

    from searchsmith.models.errors import ConfigError
    from searchsmith.models.io import exclusive

    target = tmp_path / "ix"
    lock = tmp_path / ".ix.lock"
    with pytest.raises(RuntimeError), exclusive(target, "refused"):
        assert lock.exists()
        raise RuntimeError("refused after taking the lock")
    assert not lock.exists()
    lock.write_text("")  # a lock file that a writer opened, then lost to an unlink
    stale = os.open(lock, os.O_RDWR)
    lock.unlink()
    try:
        with exclusive(target, "first"):
            fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old inode: free, and not the lock
            with pytest.raises(ConfigError, match="another searchsmith process"), exclusive(target, "second"):
                pass
            assert lock.exists()
        assert not lock.exists()  # a write that went through leaves no lock file either (audit, 2026-12-07)
        assert sorted(p.name for p in tmp_path.iterdir()) == []
    finally:
        os.close(stale)


@pytest.mark.parametrize("name, damage, problem", [
    ("centroids.npy", lambda p: p.write_bytes(p.read_bytes()[:90]), "centroids.npy cannot be read"),
    ("centroids.npy", lambda p: __import__("numpy").save(p, __import__("numpy").zeros((2, 3), "float32")),
     r"shape \(2, 3\), not \(centroids, 384\)"),
    ("centroids.json", lambda p: p.write_text("{not json"), "centroids.json cannot be read"),
    ("centroids.json", lambda p: p.write_text('{"sources": ["nowhere"]}'), "'sources' must name one of"),
    ("centroids.json", lambda p: p.write_text('{"sources": [["a"]]}'), "'sources' must name one of"),
])
def test_damaged_centroids_read_unchecked_name_the_file(small_index, tmp_path, name, damage, problem) -> None:
    """Index.load(verify=False) skips the checksums; damaged centroids then raised numpy's
    ValueError or a JSONDecodeError (found by probing, 2026-12-06)."""
    from searchsmith.serving.index import Index

    ix = _copy(small_index, tmp_path)
    damage(ix / name)
    with pytest.raises(BundleError, match=problem + ".*index --repair"):
        Index.load(ix, verify=False)
    with pytest.raises(BundleError, match=f"{name} is corrupt"):
        Index.load(ix)


def test_saved_settings_this_version_refuses_say_to_rebuild(small_index, tmp_path) -> None:
    """An index whose saved settings this searchsmith refuses (a range tightened since it was
    built, or an edit) named the setting only, not what to do about the index."""
    import json

    from searchsmith.serving.index import Index

    ix = _copy(small_index, tmp_path)
    m = json.loads((ix / "manifest.json").read_text())
    (ix / "manifest.json").write_text(json.dumps({**m, "config": {**m["config"], "hnsw_m": 0}}))
    for read in (read_manifest, Index.load):
        with pytest.raises(BundleError, match=r"(?s)hnsw_m: expected an int in \[2, 1024\].*"
                                              rf"rebuild it: searchsmith index CORPUS.jsonl --out {ix} --force"):
            read(ix)


def test_search_takes_sources_once_and_numpy_k_and_says_when_closed(small_index) -> None:
    """A source named twice gave each of its hits twice; a generator of sources was used up by
    the type check ("no source to search"); k=np.int64(2) was a raw faiss TypeError; a search
    after close() was sqlite's "Cannot operate on a closed database" (helper-42's audit)."""
    import numpy as np
    from searchsmith.models.errors import NotReadyError
    from searchsmith.serving.index import Index

    ix = Index.load(small_index)
    source = ix.sources[0]
    q = np.zeros((1, ix.dim), np.float32)
    q[0, 0] = 1.0
    once = [h.row for h in ix.search(q, sources=[source], k=5)[0]]
    assert [h.row for h in ix.search(q, sources=[source] * 3, k=5)[0]] == once == sorted(set(once), key=once.index)
    assert [h.row for h in ix.search(q, sources=(s for s in [source]), k=5)[0]] == once
    assert [h.row for h in ix.search(q, sources=[source], k=np.int64(2))[0]] == once[:2]
    ix.close()
    with pytest.raises(NotReadyError, match="was closed; load it again"):
        ix.search(q)


def test_index_config_made_in_python_is_checked_as_a_yaml_one() -> None:
    """IndexConfig(index_type="foo") was accepted, and build_index wrote an index Index.load then
    refused."""
    from searchsmith.serving.index import IndexConfig

    with pytest.raises(ValueError, match=r"index_type: expected one of \['auto', 'flat', 'ivf', 'hnsw'\], got 'foo'"):
        IndexConfig(index_type="foo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"search_backend: expected one of \['auto', 'faiss', 'kernel'\]"):
        IndexConfig(search_backend="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="embedder: expected an instance of EmbedderConfig, got dict"):
        IndexConfig(embedder={"model": "default"})  # type: ignore[arg-type]


def test_build_index_names_a_wrong_out_dir_embedder_or_config(tmp_path) -> None:
    """A None or empty out_dir, a dict for the config and an embed bundle for the embedder were
    raw TypeError / ValueError / AttributeError, after the records were checked."""
    from searchsmith.serving.index import build_index

    recs = [{"id": "a", "source": "s", "text": "hello"}]
    for out in (None, "", 5):
        with pytest.raises(ValueError, match="out_dir must be the path of a new folder"):
            build_index(recs, out)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"config is a dict, expected an IndexConfig"):
        build_index(recs, tmp_path / "ix", {"index_type": "flat"})  # type: ignore[arg-type]

    class EmbedBundle:
        task = "embed"

    with pytest.raises(ValueError, match=r"embedder is a EmbedBundle, expected a searchsmith.serving.embedder"):
        build_index(recs, tmp_path / "ix", embedder=EmbedBundle())  # type: ignore[arg-type]
    assert not (tmp_path / "ix").exists()


def test_titled_refuses_a_string_of_sources_and_a_limit_out_of_range(small_index) -> None:
    """sources="news" was read a character at a time (no match, []); limit=10**30 was sqlite's
    OverflowError (helper-42's audit)."""
    from searchsmith.serving.index import Index

    with Index.load(small_index) as ix:
        with pytest.raises(ValueError, match="titled: sources must be a list"):
            ix.titled("x", sources=ix.sources[0])
        for bad in (0, 10**30, "3", True):
            with pytest.raises(ValueError, match=r"titled: limit must be an int in \[1, 10000\]"):
                ix.titled("x", limit=bad)
        assert ix.titled("no such title at all") == []


# -- a corrupt manifest.json: --force rebuilds the folder in place, a user's file in it is kept ---
def _corrupt_manifest_copy(small_index, tmp_path, name="c_man"):
    import shutil

    out = tmp_path / name
    shutil.copytree(small_index, out)
    (out / "manifest.json").write_text("{bad")
    return out


def test_a_corrupt_manifest_says_the_command_that_rebuilds(small_index, tmp_path) -> None:
    """Audit: 'manifest.json is corrupt ...; rebuild the index', and --force then refused the
    folder as 'not a searchsmith index' (its advice: a nested --out c_man/index)."""
    from searchsmith.serving.index import check_out_path
    from searchsmith.serving.index_repair import repair_index

    out = _corrupt_manifest_copy(small_index, tmp_path)
    fix = f"searchsmith index CORPUS.jsonl --out {out} --force"
    with pytest.raises(BundleError, match=f"manifest.json is corrupt .*--repair needs the manifest.*{fix}"):
        read_manifest(out)
    with pytest.raises(BundleError, match=f"manifest.json is corrupt .*{fix}"):
        repair_index(out)
    # the JSON error and where (an index keeps no record: a hand edit gone wrong looks the same)
    with pytest.raises(ValidationError, match=r"holds a searchsmith index whose manifest.json is not valid JSON "
                                              r"\(Expecting property name enclosed in double quotes: line 1 column 2 "
                                              r"\(char 1\)\) .*Repair the JSON where it says, or pass --force to "
                                              "rebuild it from the corpus"):
        check_out_path(out)
    (out / "manifest.json").rename(tmp_path / "manifest.json")
    with pytest.raises(ValidationError, match=r"whose manifest.json is missing \(neither .*nothing was replaced\. "
                                              "Pass --force to rebuild"):
        check_out_path(out)
    (tmp_path / "manifest.json").rename(out / "manifest.json")
    check_out_path(out, overwrite=True)  # accepted: every file in it is one a build writes
    (out / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(BundleError, match=f"not a searchsmith index manifest; rebuild .*{fix}"):
        read_manifest(out)
    # valid JSON that fails the index checks was 'corrupt or missing': what is wrong, named
    with pytest.raises(ValidationError, match=r"whose manifest.json is not a searchsmith index manifest \(its "
                                              r"\"format\" is 'something-else', expected 'searchsmith-index'\) "
                                              r".*nothing was replaced\. Restore what was changed, or pass --force"):
        check_out_path(out)
    good = json.loads((small_index / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**good, "chunks": "many"}))
    with pytest.raises(ValidationError, match=r"whose manifest.json was edited or damaged \(chunks: expected an int "
                                              r">= 0, got 'many'\) .*Restore what was changed, or pass --force"):
        check_out_path(out)
    check_out_path(out, overwrite=True)


def test_force_rebuilds_an_index_with_a_corrupt_manifest_in_place(small_index, embedder, tmp_path) -> None:
    from searchsmith.serving.index import Index, build_index

    out = _corrupt_manifest_copy(small_index, tmp_path)
    build_index([DOC], out, embedder=embedder, overwrite=True)
    assert read_manifest(out)["documents"] == 1
    assert Index.load(out, embedder=embedder) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c_man"]  # nothing left beside it


def test_force_keeps_refusing_a_damaged_index_holding_a_users_file(small_index, embedder, tmp_path) -> None:
    from searchsmith.serving.index import build_index, check_out_path

    out = _corrupt_manifest_copy(small_index, tmp_path)
    (out / "notes.txt").write_text("mine")
    (out / "faiss" / "keep.txt").write_text("mine too")
    with pytest.raises(ValidationError, match=r"holds 2 file\(s\) the index did not write \(faiss/keep.txt, "
                                              r"notes.txt\).*Move them out first"):
        build_index([DOC], out, embedder=embedder, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "manifest.json").read_text() == "{bad"
    # index names alone, without chunks.sqlite and a manifest or a faiss file, are no index
    user = tmp_path / "user"
    user.mkdir()
    (user / "manifest.json").write_text("{}")
    (user / "centroids.json").write_text("{}")
    with pytest.raises(ValidationError, match="is a folder that is not a searchsmith index"):
        check_out_path(user, overwrite=True)
