"""The quickstart never overwrites a config its user edited.

Re-running ``searchsmith quickstart`` used to rewrite ``serve.yaml`` and drop the
``server.api_keys`` a user had added, so the next ``serve`` ran without authentication.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from searchsmith.models.io import WRITTEN_RECORD, write_text_if_ours
from searchsmith.serving.quickstart import describe_written, own_or_new, write_configs
from searchsmith.serving.serve_config import load_serve_config


def _fake_bundle(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text("{}")
    return path


def _work(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    work = tmp_path / "searchsmith-work"
    index = _fake_bundle(work / "indexes" / "demo")
    bundles = {"reranker": _fake_bundle(work / "bundles" / "reranker"),
               "embedder": _fake_bundle(work / "bundles" / "embedder")}
    return work, index, bundles


def test_edited_serve_yaml_keeps_its_api_keys(tmp_path) -> None:
    work, index, bundles = _work(tmp_path)
    pipe_w, serve_w = write_configs(work, index, bundles)
    assert (pipe_w.path, serve_w.path) == (work / "pipeline.yaml", work / "serve.yaml")
    assert pipe_w.kept is None and serve_w.kept is None
    serve = work / "serve.yaml"
    data = yaml.safe_load(serve.read_text())
    data["server"] = {"api_keys": ["sk-secret"]}
    serve.write_text("# mine\n" + yaml.safe_dump(data))
    edited = serve.read_bytes()

    _, serve_w = write_configs(work, index, bundles)
    assert serve.read_bytes() == edited  # the old code rewrote it without api_keys
    assert load_serve_config(serve).server.api_keys == ["sk-secret"]
    assert serve_w.kept == serve and serve_w.path == work / "serve.yaml.new"
    assert load_serve_config(serve_w.path).server.api_keys != ["sk-secret"]
    assert "was edited" in describe_written(serve_w) and "serve.yaml.new" in describe_written(serve_w)


def test_edited_pipeline_yaml_is_kept(tmp_path) -> None:
    work, index, bundles = _work(tmp_path)
    write_configs(work, index, bundles)
    pipe = work / "pipeline.yaml"
    pipe.write_text(pipe.read_text() + "retrieval:\n  retrieve_k: 5\n")
    edited = pipe.read_bytes()
    pipe_w, serve_w = write_configs(work, index, bundles)
    assert pipe.read_bytes() == edited and pipe_w.kept == pipe and pipe_w.path == work / "pipeline.yaml.new"
    assert pipe_w.edited and own_or_new(pipe_w) == pipe  # the hints name the user's edit of ours
    assert serve_w.kept is None  # serve.yaml was not edited: rewritten in place, no .new
    assert not (work / "serve.yaml.new").exists()


def test_unedited_configs_are_updated_in_place(tmp_path) -> None:
    work, index, bundles = _work(tmp_path)
    write_configs(work, index, bundles)
    assert load_serve_config(work / "serve.yaml").bundles.citation is None
    bundles["citation"] = _fake_bundle(work / "bundles" / "citation")
    pipe_w, serve_w = write_configs(work, index, bundles)
    assert pipe_w.kept is None and serve_w.kept is None
    assert load_serve_config(work / "serve.yaml").bundles.citation == str(work / "bundles" / "citation")
    assert "citation" in yaml.safe_load((work / "pipeline.yaml").read_text())["bundles"]
    assert not list(work.glob("*.new"))
    record = json.loads((work / WRITTEN_RECORD).read_text())
    assert set(record) == {"pipeline.yaml", "serve.yaml"}


def test_a_config_the_quickstart_did_not_write_is_kept(tmp_path) -> None:
    # e.g. written by hand, or by a quickstart from before the record existed
    work, index, bundles = _work(tmp_path)
    work.mkdir(parents=True, exist_ok=True)
    (work / "serve.yaml").write_text("server:\n  api_keys: [k]\n")
    _, serve_w = write_configs(work, index, bundles)
    assert (work / "serve.yaml").read_text() == "server:\n  api_keys: [k]\n"
    assert serve_w.kept == work / "serve.yaml" and serve_w.path.name == "serve.yaml.new"
    # not ours: the hints name the config just written, not a file the quickstart never wrote
    assert not serve_w.edited and own_or_new(serve_w) == serve_w.path


def test_write_text_if_ours_never_overwrites_what_it_did_not_write(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    assert write_text_if_ours(p, "a: 1\n").path == p
    assert write_text_if_ours(p, "a: 2\n").path == p and p.read_text() == "a: 2\n"  # ours: updated
    p.write_text("a: 3  # edited\n")
    w = write_text_if_ours(p, "a: 4\n")
    assert (w.path.name, w.kept) == ("c.yaml.new", p) and p.read_text() == "a: 3  # edited\n"
    assert write_text_if_ours(p, "a: 5\n").path.name == "c.yaml.new"  # an unedited .new is ours to update
    w.path.write_text("edited .new too\n")
    w2 = write_text_if_ours(p, "a: 6\n")
    assert w2.path.name == "c.yaml.new.2" and w.path.read_text() == "edited .new too\n"
    # the user copies the new text over their file: it is the same text, so ours again
    shutil.copy(w2.path, p)
    assert write_text_if_ours(p, "a: 6\n").kept is None
    # a corrupt record makes nothing ours: the edit-safe answer
    (tmp_path / WRITTEN_RECORD).write_text("{broken")
    assert write_text_if_ours(p, "a: 7\n").kept == p and p.read_text() == "a: 6\n"
    # a folder where the file should be is never touched
    d = tmp_path / "d.yaml"
    d.mkdir()
    assert write_text_if_ours(d, "x: 1\n").path.name == "d.yaml.new" and d.is_dir()


def test_one_written_files_record_reads_both_layouts_and_tells_each_state(tmp_path) -> None:
    """The record behind write_text_if_ours (flat) and the make-*-set marker (under "files")."""
    import hashlib
    import json

    from searchsmith.models.io import WrittenFiles

    ours, edited, theirs = (tmp_path / n for n in ("ours.txt", "edited.txt", "theirs.txt"))
    for p in (ours, edited, theirs):
        p.write_text(p.name)
    digest = {p.name: hashlib.sha256(p.name.encode()).hexdigest() for p in (ours, edited)}
    edited.write_text("changed")
    (tmp_path / "flat.json").write_text(json.dumps(digest))
    (tmp_path / "nested.json").write_text(json.dumps({"written_by": "x", "files": digest}))
    for files in (WrittenFiles.read(tmp_path / "flat.json"),
                  WrittenFiles.read(tmp_path / "nested.json", header={"written_by": "x"})):
        assert [files.state(p) for p in (ours, edited, theirs, tmp_path / "none")] == \
            ["ours", "edited", "foreign", "absent"]
    # a link where a recorded file was is not ours, whatever it points to; its name is its own
    link = tmp_path / "link"
    link.symlink_to(ours)
    files = WrittenFiles.read(tmp_path / "flat.json")
    files.add(link, digest["ours.txt"])
    assert files.key(link) == "link" and files.state(link) == "edited"
    # the nested layout round-trips with its header; a record without checksums holds none
    nested = WrittenFiles.read(tmp_path / "nested.json", header={"written_by": "x"})
    nested.add(theirs, "0" * 64)
    nested.save()
    assert json.loads((tmp_path / "nested.json").read_text())["files"]["theirs.txt"] == "0" * 64
    (tmp_path / "old.json").write_text("written by an older searchsmith\n")
    assert WrittenFiles.read(tmp_path / "old.json").hashes is None
    assert WrittenFiles.read(tmp_path / "missing.json").hashes == {}


def test_quickstart_cli_rerun_keeps_an_edited_serve_yaml(tmp_path, monkeypatch, small_index, capsys,
                                                         minilm_embed_bundle) -> None:
    """Through ``searchsmith quickstart``: runs, index exist (the embedder export is a copy of one
    made once), so it rewrites the configs and asks (no training); an edit made between two runs
    survives the second."""
    from searchsmith.models import export
    from searchsmith.serving import quickstart
    from searchsmith.serving.main import main

    def fake_export(bundle, model, opts):  # prints as ONNX Runtime's optimizer does
        print("failed in shape inference <class 'AssertionError'>")
        shutil.copytree(minilm_embed_bundle, bundle)

    monkeypatch.setattr(quickstart, "MODELS", ())
    monkeypatch.setattr(export, "export_embedder", fake_export)
    monkeypatch.delenv("SEARCHSMITH_VERBOSE", raising=False)
    work = tmp_path / "w"
    shutil.copytree(small_index, work / "indexes" / "demo")
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "[1/4] export: embedder ->" in out and "1 bundle(s) exported" in out
    assert "failed in shape inference" not in out  # third-party prints are held back
    serve = work / "serve.yaml"
    serve.write_text(serve.read_text().replace("server: {}", "server:\n  api_keys: [sk-1]"))
    edited = serve.read_bytes()
    capsys.readouterr()
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert serve.read_bytes() == edited
    assert "serve.yaml.new" in out and "was edited" in out
    assert f"searchsmith serve --config {serve}\n" in out  # the hint keeps the user's api_keys


@pytest.mark.parametrize("name", ["pipeline.yaml", "serve.yaml"])
def test_record_is_per_file(tmp_path, name) -> None:
    work, index, bundles = _work(tmp_path)
    write_configs(work, index, bundles)
    (work / name).write_text("# edited\n")
    written = {w.path.name: w.kept for w in write_configs(work, index, bundles)}
    assert written[f"{name}.new"] == work / name
    assert len(written) == 2


def test_export_workers_one_per_two_cores_capped_by_the_bundles(monkeypatch) -> None:
    from searchsmith.serving import quickstart

    monkeypatch.setattr(quickstart.os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)
    assert quickstart.export_workers(6) == 2  # 2 cores: two single-threaded exports at once
    assert quickstart.export_workers(1) == 1
    assert quickstart.export_workers(6, asked=1) == 1 and quickstart.export_workers(3, asked=8) == 3
    monkeypatch.setattr(quickstart.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert quickstart.export_workers(6) == 4
    monkeypatch.setattr(quickstart.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert quickstart.export_workers(6) == 1


def test_export_all_in_worker_processes_raises_the_first_failure(tmp_path) -> None:
    from searchsmith.models.errors import SearchsmithError
    from searchsmith.serving.quickstart import export_all

    jobs = [(name, tmp_path / "runs" / name, tmp_path / "bundles" / name) for name in ("reranker", "reader")]
    with pytest.raises(SearchsmithError, match="runs/reranker|runs/reader"):
        export_all(jobs, workers=2)
    assert not (tmp_path / "bundles").exists() or not any((tmp_path / "bundles").rglob("manifest.json"))


def test_quickstart_refuses_a_bad_export_workers(capsys) -> None:
    from searchsmith.serving.main import main

    with pytest.raises(SystemExit):
        main(["quickstart", "--export-workers", "0"])
    err = capsys.readouterr().err
    assert "--export-workers" in err and "expected a whole number >= 1, got '0'" in err


def test_quickstart_rerun_redoes_its_own_damaged_bundle_and_index(tmp_path, monkeypatch, small_index, capsys,
                                                                  minilm_embed_bundle) -> None:
    """Audit: a truncated bundles/reranker/model.onnx (or indexes/demo/faiss/news.faiss) was
    'reused' by every rerun, which then failed at the ask with a sha256 mismatch, forever. The
    reuse check is the loaders' own (sha256 of every file); what fails it is exported again,
    repaired, or (its manifest missing) rebuilt from the demo corpus. An index manifest.json that
    is not valid JSON was rebuilt too, though nothing showed searchsmith wrote it so (an index
    keeps no record): a hand edit gone wrong was lost. It stops the quickstart before any work,
    named with its JSON error and the fix."""
    from searchsmith.serving.index import read_manifest
    from searchsmith.serving.main import main

    exports = _embedder_only_quickstart(monkeypatch, small_index, minilm_embed_bundle)
    work = tmp_path / "w"
    index = work / "indexes" / "demo"
    shutil.copytree(small_index, index)
    assert main(["quickstart", "--workdir", str(work)]) == 0
    assert len(exports) == 1
    capsys.readouterr()

    onnx = work / "bundles" / "embedder" / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:1000])
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "[1/4] export: embedder ->" in out and "embedder: exporting again: bundle" in out
    assert "'model.onnx' is corrupt or truncated" in out and len(exports) == 2
    assert onnx.read_bytes() == (minilm_embed_bundle / "model.onnx").read_bytes()

    faiss_file = next((index / "faiss").glob("*.faiss"))
    faiss_file.write_bytes(faiss_file.read_bytes()[:100])
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "[1/4] export: reusing 1 bundles" in out and len(exports) == 2
    assert f"[2/4] index: {index} is damaged, mending it: index {index}: file faiss/{faiss_file.name} is corrupt" in out
    assert f"index --repair: rebuilt faiss/{faiss_file.name}" in out

    (index / "manifest.json").write_text("{bad")
    assert main(["quickstart", "--workdir", str(work)]) == 1
    err = capsys.readouterr().err
    assert (f"quickstart: {index / 'manifest.json'} is not valid JSON (Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)); nothing shows that searchsmith wrote it so") in err
    assert ("stopped before training or exporting anything. Repair the JSON where it says, or rebuild the index "
            f"over it: searchsmith index {small_index.parent / 'corpus.jsonl'} --out {index} --force") in err
    assert (index / "manifest.json").read_text() == "{bad" and len(exports) == 2

    (index / "manifest.json").unlink()  # missing: nothing of the user's to lose, rebuilt
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "manifest.json is missing" in out and f"rebuilding {index} from the demo corpus" in out
    assert read_manifest(index)["documents"] == read_manifest(small_index)["documents"]

    assert main(["quickstart", "--workdir", str(work)]) == 0  # intact: everything reused
    out = capsys.readouterr().out
    assert "export: reusing 1 bundles" in out and f"index: reusing {index}" in out and len(exports) == 2


def test_quickstart_rerun_exports_again_its_bundle_whose_manifest_is_corrupt_or_missing(
        tmp_path, monkeypatch, small_index, capsys, minilm_embed_bundle) -> None:
    """A corrupt bundles/embedder/manifest.json was 'exporting again', then the export refused
    the folder as not a bundle and the quickstart stopped there on every rerun; a file of the
    user's in the folder still stops it, named. A corrupt manifest with no record of what the
    export wrote may be a hand edit gone wrong: it stops the quickstart before any work, named
    with its JSON error (line, column) and the fix; a missing one is exported again. (One that
    the record shows changed is an edit: kept, see
    test_quickstart_rerun_keeps_a_bundle_manifest_its_user_edited.)"""
    from searchsmith.models.io import WRITTEN_RECORD
    from searchsmith.serving.main import main

    exports = _embedder_only_quickstart(monkeypatch, small_index, minilm_embed_bundle)
    work = tmp_path / "w"
    shutil.copytree(small_index, work / "indexes" / "demo")
    shutil.copytree(minilm_embed_bundle, work / "bundles" / "embedder")
    manifest = work / "bundles" / "embedder" / "manifest.json"

    (work / "bundles" / "embedder" / WRITTEN_RECORD).unlink()  # an older export's bundle
    manifest.write_text("{bad\n")
    assert main(["quickstart", "--workdir", str(work)]) == 1
    err = capsys.readouterr().err
    assert (f"quickstart: {manifest} is not valid JSON (Expecting property name enclosed in double quotes: line 1 "
            f"column 2 (char 1)), and no {WRITTEN_RECORD} shows that the export wrote it so") in err
    assert ("stopped before training or exporting anything. Repair the JSON where it says, or move that "
            "manifest.json out of its bundle folder") in err
    assert manifest.read_text() == "{bad\n" and not exports

    manifest.unlink()  # the fix: the export writes a new one
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "embedder: exporting again: its manifest.json is missing" in out and len(exports) == 1
    assert json.loads(manifest.read_text())["task"] == "embed"

    manifest.unlink()
    (work / "bundles" / "embedder" / "notes.txt").write_text("keep")
    assert main(["quickstart", "--workdir", str(work)]) == 1
    assert "holds 1 file(s) the bundle did not write (notes.txt)" in capsys.readouterr().err
    assert len(exports) == 1 and (work / "bundles" / "embedder" / "notes.txt").read_text() == "keep"


def test_quickstart_rerun_keeps_a_bundle_manifest_its_user_edited(tmp_path, monkeypatch, small_index, capsys,
                                                                  minilm_embed_bundle) -> None:
    """A rerun that exported a bundle again replaced its manifest.json, thresholds or gates its
    user had tuned there included: the edited manifest is reused as edited, and a bundle that
    must be exported again (damaged, or its run trained again) stops the quickstart before any
    work, naming the file and the fix; its own unedited bundles are replaced as before."""
    from searchsmith.serving.main import main

    exports = _embedder_only_quickstart(monkeypatch, small_index, minilm_embed_bundle)
    work = tmp_path / "w"
    shutil.copytree(small_index, work / "indexes" / "demo")
    assert main(["quickstart", "--workdir", str(work)]) == 0 and len(exports) == 1
    bundle = work / "bundles" / "embedder"
    manifest = bundle / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "note": "tuned by hand"}, indent=2))
    edited = manifest.read_bytes()
    capsys.readouterr()

    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "export: reusing 1 bundles" in out and "embedder: reusing its manifest.json as you edited it" in out
    assert manifest.read_bytes() == edited and len(exports) == 1
    # the export's record deleted: the manifest's own check (manifest_sha256) still tells the edit
    record = (bundle / WRITTEN_RECORD).read_bytes()
    (bundle / WRITTEN_RECORD).unlink()
    assert main(["quickstart", "--workdir", str(work)]) == 0
    assert "embedder: reusing its manifest.json as you edited it" in capsys.readouterr().out
    assert manifest.read_bytes() == edited and len(exports) == 1
    (bundle / WRITTEN_RECORD).write_bytes(record)

    onnx = bundle / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:1000])  # damaged: the bundle must be exported again
    assert main(["quickstart", "--workdir", str(work)]) == 1
    err = capsys.readouterr().err
    assert f"{manifest} was edited since the export wrote it, and its bundle must be exported again" in err
    assert "'model.onnx' is corrupt or truncated" in err and "stopped before training or exporting anything" in err
    assert "Move that manifest.json out of its bundle folder" in err and "another --workdir" in err
    assert manifest.read_bytes() == edited and len(exports) == 1

    shutil.move(manifest, tmp_path / "my-manifest.json")  # the fix: the export writes a new one
    assert main(["quickstart", "--workdir", str(work)]) == 0
    assert "embedder: exporting again: its manifest.json is missing" in capsys.readouterr().out
    assert len(exports) == 2 and json.loads(manifest.read_text())["task"] == "embed"


def _embedder_only_quickstart(monkeypatch, small_index: Path, minilm_embed_bundle: Path) -> list[Path]:
    """The quickstart with no model to train, the embedder's export a copy of
    ``minilm_embed_bundle`` (refusing as the real export does) and ``small_index``'s corpus as
    the demo's: the bundle folders exported, in order."""
    from searchsmith.models import export
    from searchsmith.serving import quickstart

    exports: list[Path] = []
    # the tokenizer files the real export writes: those its save wrote into the bundle copied
    writes = {f"tokenizer/{p.name}" for p in (minilm_embed_bundle / "tokenizer").iterdir()}

    def fake_export(bundle, model, opts):
        export.check_bundle_out(bundle, writes)  # as the real export: a bundle of ours is replaced
        exports.append(bundle)
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.copytree(minilm_embed_bundle, bundle)

    monkeypatch.setattr(quickstart, "MODELS", ())
    monkeypatch.setattr(export, "export_embedder", fake_export)
    monkeypatch.setattr(quickstart, "demo_corpus", lambda: small_index.parent / "corpus.jsonl")
    return exports


def test_quickstart_rebuilds_an_index_manifest_only_where_it_wrote_it(tmp_path, monkeypatch, small_index, capsys,
                                                                      minilm_embed_bundle) -> None:
    """An index manifest.json that reads as JSON but fails the index checks (another "format",
    a field of the wrong type) was rebuilt from the demo corpus over it: a hand edit was lost,
    though an index keeps no record of the manifest it wrote. The quickstart now keeps the
    sha256 of each index manifest it writes in the work folder's record: one still as it wrote
    it (an older searchsmith's, say) is rebuilt as before; any other stops it before any work,
    naming the file, what is wrong and the fix, and so does a chunk store to rebuild beneath a
    manifest it did not write."""
    from searchsmith.models.io import WrittenFiles, sha256_file
    from searchsmith.serving.index import read_manifest
    from searchsmith.serving.main import main

    exports = _embedder_only_quickstart(monkeypatch, small_index, minilm_embed_bundle)
    work = tmp_path / "w"
    index = work / "indexes" / "demo"
    manifest = index / "manifest.json"
    shutil.copytree(small_index, index)  # an index of the quickstart's folder that it did not build
    assert main(["quickstart", "--workdir", str(work)]) == 0 and len(exports) == 1
    assert "indexes/demo/manifest.json" not in json.loads((work / WRITTEN_RECORD).read_text())
    capsys.readouterr()
    rebuild = f"searchsmith index {small_index.parent / 'corpus.jsonl'} --out {index} --force"
    good = manifest.read_text()

    for edit, what in ((lambda m: {**m, "format": "mine"}, "is not a searchsmith index manifest (its \"format\" is "
                                                           "'mine', expected 'searchsmith-index')"),
                       (lambda m: {**m, "documents": -1}, "was edited or damaged (documents: expected an int >= 0, "
                                                          "got -1)")):
        edited = json.dumps(edit(json.loads(good)), indent=1)
        manifest.write_text(edited)
        assert main(["quickstart", "--workdir", str(work)]) == 1
        err = capsys.readouterr().err
        assert (f"quickstart: {manifest} {what}; nothing shows that searchsmith wrote it so (the quickstart keeps "
                f"the sha256 of the index manifest it writes in {work / WRITTEN_RECORD})") in err
        assert (f"stopped before training or exporting anything. Restore what you changed, or rebuild the index "
                f"over it: {rebuild} (copy what you changed first), or use another --workdir") in err
        assert manifest.read_text() == edited and len(exports) == 1
    manifest.write_text(good)

    # the chunk store damaged: the repair cannot mend it, and the rebuild would replace the manifest
    store = index / "chunks.sqlite"
    store_bytes = store.read_bytes()
    store.write_bytes(store_bytes[:100])
    assert main(["quickstart", "--workdir", str(work)]) == 1
    err = capsys.readouterr().err
    assert (f"quickstart: {index} must be rebuilt from the demo corpus (index --repair {index}: the chunk store "
            "(chunks.sqlite) is missing or corrupt") in err
    assert (f"which would replace {manifest}, and nothing shows that searchsmith wrote it so (the quickstart keeps "
            f"the sha256 of the index manifest it writes in {work / WRITTEN_RECORD})") in err
    assert f"nothing was rebuilt. Rebuild the index over it: {rebuild} (copy what you changed first)" in err
    assert manifest.read_text() == good and store.read_bytes() == store_bytes[:100]

    manifest.unlink()  # missing: nothing of the user's to lose, rebuilt, and its sha256 kept
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "manifest.json is missing" in out and f"rebuilding {index} from the demo corpus" in out
    assert json.loads((work / WRITTEN_RECORD).read_text())["indexes/demo/manifest.json"] == sha256_file(manifest)

    # the quickstart's own: its chunk store damaged, rebuilt silently
    store.write_bytes(store.read_bytes()[:100])
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "the chunk store (chunks.sqlite) is missing or corrupt" in out and f"rebuilding {index}" in out
    assert read_manifest(index)["documents"] == read_manifest(small_index)["documents"]

    # the quickstart's own manifest that this searchsmith refuses (an older one's): rebuilt
    older = json.loads(manifest.read_text())
    del older["config"]
    manifest.write_text(json.dumps(older))
    record = WrittenFiles.read(work / WRITTEN_RECORD)
    record.add(manifest, sha256_file(manifest))
    record.save()
    assert main(["quickstart", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert "manifest.json was edited or damaged (config: missing)" in out and f"rebuilding {index}" in out
    assert "config" in read_manifest(index) and len(exports) == 1
    assert json.loads((work / WRITTEN_RECORD).read_text())["indexes/demo/manifest.json"] == sha256_file(manifest)

    assert main(["quickstart", "--workdir", str(work)]) == 0  # intact: reused
    assert f"index: reusing {index}" in capsys.readouterr().out
