"""``searchsmith index --repair DIR``: rebuild the files of an index that fail their sha256.

Every file of an index is listed in its manifest with its sha256, and ``Index.load`` refuses
one that does not match. Most of an index can be rebuilt from the rest without the corpus:

- a FAISS file (or shard) or the routing centroids: from the source's saved vectors
  (``vectors/<source>.npy``);
- a source's vectors or ids: its chunks are read back from the chunk store and embedded
  again with the index's model (ids: the store's rows of that source, in order);
- the chunk store itself cannot be rebuilt from the index: that needs the corpus
  (``searchsmith index CORPUS --out DIR --force``).

The repair is atomic like a build: a copy is repaired, then swapped in.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.errors import BundleError
from searchsmith.models.io import (
    files_sha256,
    replace_dir,
    sha256_file,
    temp_dir_beside,
    write_json_atomic,
)
from searchsmith.serving.embedder import Embedder


def damaged_files(manifest: dict[str, Any], index_dir: Path) -> list[str]:
    """The manifest's files that are missing or fail their sha256."""
    return [rel for rel, digest in sorted(manifest["files"].items())
            if not (index_dir / rel).is_file() or sha256_file(index_dir / rel) != digest]


def repair_index(index_dir: str | Path, embedder: Embedder | None = None,
                 report: Any = None) -> dict[str, Any]:
    """Rebuild the damaged files of the index at ``index_dir`` (see the module docstring).

    Returns:
        ``{"damaged": [...], "rebuilt": [...], "reembedded_sources": [...]}`` (empty lists
        when every file matched).

    Raises:
        BundleError: no index there, or the chunk store (or manifest) is the damaged part.
    """
    from searchsmith.models.io import exclusive

    index_dir = Path(index_dir)
    with exclusive(index_dir, "index --repair"):  # not while a build or --add writes it
        return _repair(index_dir, embedder, report)


def _repair(index_dir: Path, embedder: Embedder | None, report: Any) -> dict[str, Any]:
    """The body of :func:`repair_index`, under the index's lock."""
    from searchsmith.models.config import from_dict
    from searchsmith.serving.index import (
        ChunkStore,
        IndexConfig,
        _write_centroids,
        _write_source,
        check_model,
        check_out_path,
        chunk_text,
        read_manifest,
    )

    say = report or (lambda line: None)
    manifest = read_manifest(index_dir)
    damaged = damaged_files(manifest, index_dir)
    if not damaged:
        say(f"index --repair: every file of {index_dir} matches its sha256; nothing to repair")
        return {"damaged": [], "rebuilt": [], "reembedded_sources": []}
    say(f"index --repair: {len(damaged)} damaged file(s): {', '.join(damaged)}")
    if "chunks.sqlite" in damaged:
        raise BundleError(f"index --repair {index_dir}: the chunk store (chunks.sqlite) is missing or corrupt, and "
                          "the chunk texts are only there; rebuild from the corpus: searchsmith index CORPUS "
                          f"--out {index_dir} --force")
    check_out_path(index_dir, overwrite=True, label="index --repair")  # it rebuilds and swaps the folder
    cfg = from_dict(IndexConfig, manifest["config"], source=f"{index_dir}/manifest.json:config")
    sources = {name: dict(info) for name, info in manifest["sources"].items()}
    tmp = temp_dir_beside(index_dir)
    try:
        shutil.copytree(index_dir, tmp, dirs_exist_ok=True)
        reembedded: list[str] = []
        for name, info in sorted(sources.items()):
            stem = info.get("file", name)
            vec_rel, ids_rel = f"vectors/{stem}.npy", f"vectors/{stem}.ids.npy"
            mine = [rel for rel in damaged if rel in (vec_rel, ids_rel)
                    or re.fullmatch(rf"faiss/{re.escape(stem)}(\.\d+)?\.faiss", rel)]
            if not mine:
                continue
            store = ChunkStore(tmp / "chunks.sqlite", readonly=True)
            try:
                ids = (np.asarray(store.rows_of_source(name), dtype=np.int64) if ids_rel in damaged
                       else np.load(tmp / ids_rel))
                got = store.get(ids.tolist()) if vec_rel in damaged else {}
            finally:
                store.close()
            if vec_rel in damaged:
                if embedder is None:
                    say(f"index --repair: loading the embedding model to embed source {name!r} again")
                    embedder = Embedder(cfg.embedder)
                check_model(manifest, embedder, index_dir)
                vectors = np.asarray(embedder.encode([chunk_text(got[int(r)]) for r in ids]), dtype=np.float32)
                reembedded.append(name)
            else:
                vectors = np.load(tmp / vec_rel)
            if len(vectors) != len(ids):
                raise BundleError(f"index --repair {index_dir}: source {name!r} has {len(vectors)} vectors for "
                                  f"{len(ids)} chunks; rebuild from the corpus (--force)")
            kept = {k: v for k, v in info.items() if k in ("documents", "centroids")}
            sources[name] = {**_write_source(tmp, cfg, stem, vectors, ids), **kept}
        if reembedded or any(rel.startswith("centroids") for rel in damaged):
            _write_centroids(tmp, cfg, sources)
        files = files_sha256(tmp)  # the manifest's files, as a build lists them
        rebuilt = sorted(rel for rel in damaged if files.get(rel) is not None)
        write_json_atomic(tmp / "manifest.json", {
            **manifest, "sources": sources, "files": files,
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        replace_dir(tmp, index_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"index --repair: rebuilt {', '.join(rebuilt)}"
        + (f" (embedded again: {', '.join(reembedded)})" if reembedded else ""))
    return {"damaged": damaged, "rebuilt": rebuilt, "reembedded_sources": reembedded}


__all__ = ["damaged_files", "repair_index"]
