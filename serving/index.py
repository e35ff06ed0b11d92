"""Per-source FAISS indexes, a chunk store and routing centroids, in one folder.

Layout of an index folder (every file's sha256 is in the manifest)::

    manifest.json            model, dimension, counts, config, sha256 of every file
    chunks.sqlite            chunk text + metadata; row id = FAISS id; ``chunks_fts``, a full-text
                             (SQLite FTS5, words without stems) table over titles and texts for
                             lexical (BM25) search, kept in step with the chunks by triggers
    faiss/<stem>.faiss       IndexIDMap2 over flat IP (default), IVF or HNSW; a source of more
                             than ``shard_max_vectors`` vectors is several shards instead,
                             faiss/<stem>.<k>.faiss (IVF shards share one coarse quantizer)
    vectors/<stem>.npy       (n, D) float32 unit vectors, same order as ...
    vectors/<stem>.ids.npy   (n,) int64 chunk rows
    centroids.npy            (C, D) k-means centroids of every source's chunks
    centroids.json           the source (label) of each centroid row

A source's label is any text ("Healthcare / Medicine"); its files use a stem derived
from it (:func:`source_stem`), kept in the manifest as ``sources[label].file``. Indexes
written before the stems existed name their files by label and still load.

Writes are atomic: a new or updated index is built in a temporary folder next to the
target and swapped in by rename, so a crash leaves the old index intact. Nothing else is
replaced: ``--out`` must be new, an empty folder, or (with ``overwrite``) an index holding
only the files its manifest lists (:func:`check_out_path`).

A sharded source is searched as one (``faiss.IndexShards``: the shards in parallel threads,
their top-k merged), with the same results as one index over the same vectors. With ``mmap``
the FAISS files are memory-mapped read-only instead of read into RAM (IVF: only the probed
lists are touched; flat and HNSW: the codes are paged in as they are scanned), so an index
larger than RAM stays searchable, and a fresh process answers without loading it first.

Search runs on FAISS on the CPU (or faiss-gpu where it has GPUs); on a CUDA machine
without faiss-gpu, flat search runs through ``searchsmith.kernels.similarity_topk``
(Triton), which is also selectable on the CPU (torch twin) with ``search_backend: kernel``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from searchsmith.models import __version__
from searchsmith.models.config import from_dict, is_int, to_dict
from searchsmith.models.errors import BundleError, ConfigError, NotReadyError, ValidationError
from searchsmith.models.hub import model_display_name
from searchsmith.models.io import (
    check_replaceable,
    exclusive,
    files_matching,
    files_sha256,
    json_object_problem,
    replace_dir,
    sha256_file,
    temp_dir_beside,
    write_json_atomic,
)
from searchsmith.models.text import QUERY_STOP_WORDS, fold, one_edit
from searchsmith.serving.chunker import DEFAULT_CHUNK_TOKENS, Chunk, Chunker, ChunkerConfig
from searchsmith.serving.corpus import check_records, source_key
from searchsmith.serving.embedder import Embedder, EmbedderConfig
from searchsmith.serving.index_parts import BuildParts, job_key

log = logging.getLogger(__name__)

INDEX_FORMAT = "searchsmith-index"
# 2: some source files are named by a derived stem (``sources[label].file``), which
# version 1 readers would not find; an index whose stems are all its labels stays 1.
INDEX_FORMAT_VERSION = 2

Report = Callable[[str], None]
# an embedding job: the texts still to embed -> (positions, vectors) pieces, in any order
EmbedJob = Callable[[Sequence[str]], Iterable[tuple[np.ndarray, np.ndarray]]]


# Upper bounds of the settings faiss takes as a C int (a larger one was a SWIG OverflowError
# traceback) or sizes memory by (see IndexConfig).
INT32_MAX = 2**31 - 1
MAX_HNSW_M = 1024
MAX_HNSW_EF_SEARCH = 100_000
MAX_KMEANS_ITERS = 10_000


def _check_int(key: str, value: object, low: int, high: int | None = None, *, optional: str = "",
               note: str = "") -> None:
    """Raise ValueError naming ``key`` unless ``value`` is an int (not a bool) in ``[low, high]``
    (or None when ``optional`` says what None means): an ``__post_init__`` check, which the
    loader reports with the section's path."""
    if value is None and optional:
        return
    if is_int(value, low) and (high is None or value <= high):
        return
    where = f">= {low}" if high is None else f"in [{low}, {high}]"
    alt = f" or null ({optional})" if optional else ""
    raise ValueError(f"{key}: expected an int {where}{alt}{note}, got {value!r}")


@dataclass(frozen=True)
class CentroidConfig:
    """k-means routing centroids per source (KIMAs): k = chunks / chunks_per_centroid, clamped.

    Attributes:
        chunks_per_centroid: one centroid per this many chunks of a source (more centroids
            route finer, cost more per query); >= 1.
        min_centroids: at least this many centroids per source (never more than its chunks); >= 1.
        max_centroids: at most this many centroids per source; >= ``min_centroids``.
        kmeans_iters: k-means iterations (faiss) per source, 1 to 10000.
        seed: k-means seed, so a rebuild gives the same centroids; 0 to 2**31 - 1.
    """

    chunks_per_centroid: int = 40
    min_centroids: int = 1
    max_centroids: int = 16
    kmeans_iters: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("centroids.chunks_per_centroid", self.chunks_per_centroid, 1,
                   note=" (one centroid per this many chunks of a source)")
        _check_int("centroids.min_centroids", self.min_centroids, 1)
        if is_int(self.max_centroids) and self.max_centroids < self.min_centroids:
            raise ValueError(f"centroids.max_centroids: expected an int >= centroids.min_centroids "
                             f"({self.min_centroids}), got {self.max_centroids!r}; raise max_centroids or lower "
                             "min_centroids")
        _check_int("centroids.max_centroids", self.max_centroids, 1)
        _check_int("centroids.kmeans_iters", self.kmeans_iters, 1, MAX_KMEANS_ITERS,
                   note=" (k-means iterations per source; faiss's default is 25)")
        _check_int("centroids.seed", self.seed, 0, INT32_MAX, note=" (faiss takes a 32-bit seed)")

    def k_for(self, n_chunks: int) -> int:
        k = round(n_chunks / self.chunks_per_centroid)
        return max(1, min(n_chunks, max(self.min_centroids, min(self.max_centroids, k))))


IndexType = Literal["auto", "flat", "ivf", "hnsw"]
SearchBackend = Literal["auto", "faiss", "kernel"]


@dataclass(frozen=True)
class IndexConfig:
    """Settings of ``searchsmith index`` (YAML: ``--config FILE``; overrides ``key=value``).

    Attributes:
        index_type: ``auto`` = flat below ``ann_min_vectors`` vectors per source, IVF above.
        ann_min_vectors: a source with fewer vectors stays a flat (exact) index under ``auto``
            (>= 0; 0 = IVF for every source).
        ivf_nlist: IVF lists (>= 1, at most one per 39 vectors); None = 4 * sqrt(n).
        ivf_nprobe: IVF lists searched per query (recall against speed); >= 1, at most ``ivf_nlist``.
        hnsw_m: HNSW graph degree (``index_type: hnsw``), 2 to 1024 (faiss aborts below 2; each
            vector holds 2 x ``hnsw_m`` links at the base level).
        hnsw_ef_search: HNSW search breadth per query (recall against speed), 1 to 100000.
        search_backend: ``auto`` = faiss-gpu if it has GPUs, the Triton kernel on CUDA
            without it, faiss on the CPU.
        max_documents: refuse corpora above this (a guard against the wrong file); >= 1.
        shard_max_vectors: a source with more vectors is written as several FAISS shards of
            at most this many (searched in parallel, top-k merged); 0 = one file per source.
        mmap: memory-map the FAISS files read-only when the index is loaded, instead of
            reading them into RAM (``Index.load(mmap=...)`` overrides it per process).
        build_part_chunks: a build saves its embeddings in parts of this many chunks beside
            the output (``.<out>.build/``, each with its sha256); run a build that died again
            and it embeds only the parts that are missing or corrupt.
    """

    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    centroids: CentroidConfig = field(default_factory=CentroidConfig)
    index_type: IndexType = "auto"
    ann_min_vectors: int = 50_000
    ivf_nlist: int | None = None
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_search: int = 64
    search_backend: SearchBackend = "auto"
    max_documents: int = 10_000_000
    shard_max_vectors: int = 0
    mmap: bool = False
    build_part_chunks: int = 8192

    def __post_init__(self) -> None:
        # Checked here, before anything is written: faiss aborts the process on an HNSW degree
        # below 2 (an assertion in HNSW.cpp at 0, a crash at 1), and refuses a negative IVF list
        # count with a SWIG TypeError; a zero probe count or search breadth finds nothing.
        _check_int("ann_min_vectors", self.ann_min_vectors, 0,
                   note=" (0 = IVF for every source under index_type auto)")
        _check_int("ivf_nlist", self.ivf_nlist, 1, optional="4 x sqrt(vectors)")
        _check_int("ivf_nprobe", self.ivf_nprobe, 1, note=" (IVF lists searched per query, at most ivf_nlist)")
        _check_int("hnsw_m", self.hnsw_m, 2, MAX_HNSW_M,
                   note=" (HNSW links per vector; faiss needs at least 2, 16 to 64 is usual)")
        _check_int("hnsw_ef_search", self.hnsw_ef_search, 1, MAX_HNSW_EF_SEARCH,
                   note=" (HNSW candidates kept per query, a heap of that size per search)")
        _check_int("max_documents", self.max_documents, 1, note=" (a guard against the wrong file)")
        _check_int("shard_max_vectors", self.shard_max_vectors, 0, note=" (0 = no shards)")
        _check_int("build_part_chunks", self.build_part_chunks, 1)
        if not isinstance(self.mmap, bool):
            raise ValueError(f"mmap: expected true or false, got {self.mmap!r}")
        # a YAML config is checked against these by from_dict; IndexConfig(...) in Python was not,
        # and an index built with index_type="foo" could not be loaded
        for name, allowed in (("index_type", get_args(IndexType)), ("search_backend", get_args(SearchBackend))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {list(allowed)}, got {getattr(self, name)!r:.40}")
        for name, cls in (("embedder", EmbedderConfig), ("chunker", ChunkerConfig), ("centroids", CentroidConfig)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name}: expected an instance of {cls.__name__}, got {type(getattr(self, name)).__name__} "
                                 f"(from_dict(IndexConfig, {{...}}) reads nested mappings)")

    def shards_for(self, n: int) -> int:
        """How many FAISS shards a source of ``n`` vectors is written as."""
        if self.shard_max_vectors <= 0 or n <= self.shard_max_vectors:
            return 1
        return -(-n // self.shard_max_vectors)


@dataclass
class Hit:
    """One retrieved chunk."""

    score: float
    row: int
    chunk: Chunk

    def to_dict(self) -> dict[str, Any]:
        c = self.chunk
        return {"score": round(self.score, 6), "chunk_id": c.chunk_id, "doc_id": c.doc_id,
                "source": c.source, "title": c.title, "text": c.text, "date": c.date, "url": c.url}


# -- chunk store -----------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    row INTEGER PRIMARY KEY, chunk_id TEXT UNIQUE NOT NULL, doc_id TEXT NOT NULL,
    source TEXT NOT NULL, text TEXT NOT NULL, start INTEGER, end_ INTEGER, n_tokens INTEGER,
    title TEXT, date TEXT, url TEXT, images TEXT);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
CREATE INDEX IF NOT EXISTS chunks_title ON chunks(title COLLATE NOCASE);
"""
# Lexical search (Index.lexical): an external-content FTS5 table over the chunks' titles and
# texts (the chunk text is stored once) and the triggers that keep it in step with them. No
# stemmer: a term is a lower-case word without accents, as ``lexical_terms`` writes it, so the
# query's document frequencies can be read from the table's vocabulary (the dense search
# already matches other forms of a word; the lexical one is for exact names, versions, keys).
_LEXICAL_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    title, text, content='chunks', content_rowid='row', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS chunks_fts_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, title, text) VALUES (new.row, new.title, new.text); END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, text) VALUES ('delete', old.row, old.title, old.text); END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, text) VALUES ('delete', old.row, old.title, old.text);
    INSERT INTO chunks_fts(rowid, title, text) VALUES (new.row, new.title, new.text); END;
"""
# Terms of one lexical query at most (a pasted page is not a query; its first terms are kept).
LEXICAL_MAX_TERMS = 64
_WORD_RE = re.compile(r"[^\W_]+")
_POSSESSIVE_RE = re.compile(r"['’]s$", re.IGNORECASE)
# BM25's k1 in SQLite FTS5 (fts5_aux.c): one term adds at most idf x (k1 + 1)
_FTS5_K1 = 1.2


def _unaccented(word: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(ch))


def lexical_terms(text: str) -> list[str]:
    """The distinct terms of ``text`` as the full-text table holds them, in order, at most
    :data:`LEXICAL_MAX_TERMS`: each space-separated word in lower case without accents, a
    possessive "'s" dropped; a word the table splits ("2.4", "lumen/evict.py", "Spider-Man")
    is one phrase of its parts ("2 4"), so that "Beacon 2.4" does not match "Beacon 2.0";
    function and question words (``QUERY_STOP_WORDS``) left out:
    "What is Beacon 2.4?" -> ``["beacon", "2 4"]``."""
    out: dict[str, None] = {}
    for raw in text.split():
        parts = [_unaccented(w) for w in _WORD_RE.findall(_POSSESSIVE_RE.sub("", raw.strip(".,;:!?\"'()[]{}")))]
        parts = [p for p in parts if p]
        if not parts or (len(parts) == 1 and parts[0] in QUERY_STOP_WORDS):
            continue
        out.setdefault(" ".join(parts))
        if len(out) >= LEXICAL_MAX_TERMS:
            break
    return list(out)


class ChunkStore:
    """SQLite table of chunks; the row id is the FAISS id. Safe to share across threads."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        uri = f"file:{path}?mode=ro" if readonly else str(path)
        try:
            self._db = sqlite3.connect(uri, uri=readonly, check_same_thread=False)
            if not readonly:
                self._db.executescript(_SCHEMA)
                self._add_lexical()
            self._db.execute("SELECT count(*) FROM chunks").fetchone()
            self.has_lexical = self._has_lexical_table()
        except sqlite3.DatabaseError as exc:
            raise BundleError(f"chunk store {path} is not a valid SQLite file ({exc}); rebuild the index") from None
        self._lock = threading.Lock()
        self._rows: int | None = None  # chunks, counted at the first lexical search

    def _add_lexical(self) -> None:
        """Create the full-text table and its triggers; a store written before they existed
        (``index --add`` on an older index) has its chunks indexed once, here."""
        had = self._has_lexical_table()
        self._db.executescript(_LEXICAL_SCHEMA)
        if not had and self._db.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is not None:
            self._db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        self._db.commit()

    def _has_lexical_table(self) -> bool:
        return self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='chunks_fts'").fetchone() is not None

    def add(self, chunks: Sequence[Chunk], first_row: int) -> list[int]:
        rows = list(range(first_row, first_row + len(chunks)))
        with self._lock:
            self._db.executemany(
                "INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [(r, c.chunk_id, c.doc_id, c.source, c.text, c.start, c.end, c.n_tokens, c.title,
                  c.date, c.url, json.dumps(list(c.images)) if c.images else None)
                 for r, c in zip(rows, chunks)])
            self._db.commit()
            self._rows = None
        return rows

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def max_row(self) -> int:
        with self._lock:
            out = self._db.execute("SELECT max(row) FROM chunks").fetchone()[0]
        return -1 if out is None else int(out)

    def rows_of_source(self, source: str) -> list[int]:
        """The rows of one source, in order (the order of its vectors in the index)."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT row FROM chunks WHERE source=? ORDER BY row", (source,))]

    def doc_ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT DISTINCT doc_id FROM chunks")}

    def get(self, rows: Sequence[int]) -> dict[int, Chunk]:
        if not rows:
            return {}
        marks = ",".join("?" * len(rows))
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM chunks WHERE row IN ({marks})", [int(r) for r in rows])
            out = {}
            for r in cur.fetchall():
                out[r[0]] = Chunk(chunk_id=r[1], doc_id=r[2], source=r[3], text=r[4], start=r[5],
                                  end=r[6], n_tokens=r[7], title=r[8], date=r[9], url=r[10],
                                  images=tuple(json.loads(r[11])) if r[11] else ())
        return out

    def rows_titled(self, name: str, sources: Sequence[str], limit: int) -> list[int]:
        """The first ``limit`` rows of ``sources`` whose title is ``name`` (case-insensitive),
        alone or with a disambiguator ("Kiss and Tell" finds "Kiss and Tell (1945 film)"), in
        row order. Indexes built before the title index existed answer by a table scan."""
        if not name.strip() or not sources or limit < 1:
            return []
        pattern = re.sub(r"([\\%_])", r"\\\1", name) + " (%"
        marks = ",".join("?" * len(sources))
        with self._lock:
            return [r[0] for r in self._db.execute(
                f"SELECT row FROM chunks WHERE (title = ? COLLATE NOCASE OR title LIKE ? ESCAPE '\\') "
                f"AND source IN ({marks}) ORDER BY row LIMIT ?", (name, pattern, *sources, int(limit)))]

    def lexical(self, text: str, sources: Sequence[str] | None, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best ``(row, share)`` of ``sources`` for ``text``, best first: FTS5's
        BM25 (k1 1.2, b 0.75, over titles and texts; each of :func:`lexical_terms` a term or a
        phrase) divided by the most the query can score, ``(k1 + 1) x`` the sum of its terms'
        idf, so a share is in [0, 1) and a question whose words the corpus lacks ("the boiling
        point of ethanol" against a tip on boiling miso) reaches little of it. ``sources`` None
        searches every source. A term in more than half the chunks weighs nothing in FTS5's
        BM25 (its idf is floored at 1e-6) and is left out of the search, which it would only
        slow. Empty when the store has no full-text table, ``text`` has no term, or nothing
        matches."""
        terms = lexical_terms(text)
        if not self.has_lexical or not terms or (sources is not None and not sources) or limit < 1:
            return []
        words = [t for t in terms if " " not in t]
        with self._lock:
            n = self._vocabulary()
            df = dict(self._db.execute(
                f"SELECT term, doc FROM temp.chunks_vocab WHERE term IN ({','.join('?' * len(words))})", words)
                      ) if words else {}
            for t in terms:  # a phrase's chunks are counted (the vocabulary holds words)
                if " " in t:
                    df[t] = self._db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                             (f'"{t}"',)).fetchone()[0]
            # FTS5's idf: log((N - n + 0.5) / (n + 0.5)), at least 1e-6
            idf = {t: max(1e-6, math.log((n - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5))) for t in terms}
            searched = [t for t in terms if idf[t] > 1e-6]
            if not searched:
                return []
            query = " OR ".join(f'"{t}"' for t in searched)
            if sources is None:
                found = self._db.execute("SELECT rowid, -rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                                         "ORDER BY rank LIMIT ?", (query, int(limit))).fetchall()
            else:
                found = self._db.execute(
                    f"SELECT f.rowid, -bm25(chunks_fts) FROM chunks_fts AS f JOIN chunks AS c ON c.row = f.rowid "
                    f"WHERE chunks_fts MATCH ? AND c.source IN ({','.join('?' * len(sources))}) "
                    f"ORDER BY bm25(chunks_fts) LIMIT ?", (query, *sources, int(limit))).fetchall()
        ceiling = (_FTS5_K1 + 1) * sum(idf.values())
        return [(int(r), min(1.0, float(sc) / ceiling)) for r, sc in found]

    def _vocabulary(self) -> int:
        """The chunks' count; the first call per connection makes the full-text table's
        vocabulary view (``temp.chunks_vocab``: each term and the chunks holding it). Call it
        under the lock."""
        if self._rows is None:
            self._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab USING "
                             "fts5vocab(main, chunks_fts, row)")
            # per column: the words of the titles (ChunkStore.near_terms)
            self._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab_col USING "
                             "fts5vocab(main, chunks_fts, col)")
            self._rows = self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        return self._rows

    def near_terms(self, words: Sequence[str]) -> dict[str, str]:
        """For each of ``words`` (lower case, as :func:`lexical_terms` gives them) that no chunk
        holds, the word of the chunks' titles one edit away (``models.text.one_edit``: a letter
        left out, added, changed or two neighbours swapped, the first letter kept) that the
        most titles hold, the alphabetically first on a tie: "qaurry" -> "quarry". Titles name
        what a corpus is about; a word of its texts alone is no better a guess than the typed
        one ("owned" is not read "owner" for a text's "owner"). A word
        some chunk holds, in this or another inflection (``models.text.fold``: "travel" beside
        "travels"), or with no such term, is left out; {} without the full-text table."""
        if not self.has_lexical or not words:
            return {}
        out: dict[str, str] = {}
        with self._lock:
            self._vocabulary()
            held = {t for (t,) in self._db.execute(
                f"SELECT term FROM temp.chunks_vocab WHERE term IN ({','.join('?' * len(words))})", list(words))}
            for w in dict.fromkeys(words):
                if w in held or not w:
                    continue
                # the terms that begin with its letter, within one letter of its length
                near = self._db.execute("SELECT term, doc FROM temp.chunks_vocab_col WHERE col = 'title' AND "
                                        "term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
                                        (w[0], chr(ord(w[0]) + 1), len(w) - 1, len(w) + 1)).fetchall()
                near = [(t, doc) for t, doc in near if one_edit(w, t, kept=1)]
                if any(fold(t) == fold(w) for t, _ in near):
                    continue  # held in another inflection ("travel" beside "travels"): no misspelling
                best = min(((-doc, t) for t, doc in near), default=None)
                if best is not None:
                    out[w] = best[1]
        return out

    def chunks_of_doc(self, doc_id: str) -> list[Chunk]:
        with self._lock:
            rows = [r[0] for r in self._db.execute("SELECT row FROM chunks WHERE doc_id=? ORDER BY row", (doc_id,))]
        got = self.get(rows)
        return [got[r] for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


# -- FAISS helpers --------------------------------------------------------------------------
def _empty_faiss_index(cfg: IndexConfig, vectors: np.ndarray):
    """The source's FAISS index without vectors (an IVF one trained on all of them): ``(index, kind)``."""
    import faiss

    n, d = vectors.shape
    kind = cfg.index_type
    if kind == "auto":
        kind = "flat" if n < cfg.ann_min_vectors else "ivf"
    if kind == "ivf":
        nlist = cfg.ivf_nlist or max(1, int(4 * np.sqrt(n)))
        nlist = min(nlist, max(1, n // 39))  # faiss wants >= 39 points per list to train
        quantizer = faiss.IndexFlatIP(d)
        base = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        base.train(vectors)
        base.nprobe = min(cfg.ivf_nprobe, nlist)
    elif kind == "hnsw":
        base = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        base.hnsw.efSearch = cfg.hnsw_ef_search
    else:
        base = faiss.IndexFlatIP(d)
    return base, kind


def _filled(base: Any, vectors: np.ndarray, ids: np.ndarray) -> Any:
    """A copy of ``base`` (empty, trained) holding ``vectors`` under ``ids``."""
    import faiss

    index = faiss.IndexIDMap2(faiss.clone_index(base))
    index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids.astype(np.int64))
    return index


def shard_files(stem: str, shards: int) -> list[str]:
    """The FAISS files of a source, relative to the index folder."""
    if shards <= 1:
        return [f"faiss/{stem}.faiss"]
    return [f"faiss/{stem}.{k}.faiss" for k in range(shards)]


MMAP_FLAGS = {"ivf": "IO_FLAG_MMAP", "flat": "IO_FLAG_MMAP_IFC", "hnsw": "IO_FLAG_MMAP_IFC"}


def read_faiss(path: Path, kind: str, mmap: bool = False) -> Any:
    """Read one FAISS file, memory-mapped read-only with ``mmap`` (IVF: its inverted lists; flat
    and HNSW: their codes); RuntimeError as FAISS raises it."""
    import faiss

    if not mmap:
        return faiss.read_index(str(path))
    flag = getattr(faiss, MMAP_FLAGS.get(kind, "IO_FLAG_MMAP_IFC"))
    if kind == "ivf":
        flag |= faiss.IO_FLAG_READ_ONLY
    return faiss.read_index(str(path), flag)


def compute_centroids(vectors: np.ndarray, cfg: CentroidConfig) -> np.ndarray:
    """k-means centroids (``faiss.Kmeans``, spherical) of one source's chunk vectors -> (k, D)."""
    import faiss

    n, d = vectors.shape
    k = cfg.k_for(n)
    if k >= n:
        cents = vectors.copy()
    else:
        km = faiss.Kmeans(d, k, niter=cfg.kmeans_iters, seed=cfg.seed, spherical=True,
                          min_points_per_centroid=1, max_points_per_centroid=100_000)
        km.train(np.ascontiguousarray(vectors, dtype=np.float32))
        cents = km.centroids
    norms = np.linalg.norm(cents, axis=1, keepdims=True)
    return (cents / np.maximum(norms, 1e-12)).astype(np.float32)


# -- source labels and their file stems ------------------------------------------------------
_PLAIN_STEM = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Names Windows reserves whatever the extension: a label "con" must not become con.faiss.
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def source_stem(label: str) -> str:
    """The file stem of a source (``faiss/<stem>.faiss``, ``vectors/<stem>.npy``).

    A plain lower-case label ("cooking", "product_docs") is its own stem, as in indexes
    before labels were free text. Any other label gets an ASCII slug of its
    :func:`~searchsmith.serving.corpus.source_key` plus 10 hex digits of that key's sha256
    ("Healthcare / Medicine" -> ``healthcare-medicine-3f1c...``): safe on every file
    system, case-insensitive ones included, and stable across runs.
    """
    if _PLAIN_STEM.match(label) and label not in _RESERVED:
        return label
    import unicodedata

    key = source_key(label)
    ascii_key = unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_key).strip("-")[:40].strip("-") or "source"
    return f"{slug}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:10]}"


def assign_stems(labels: Sequence[str], existing: dict[str, str] | None = None) -> dict[str, str]:
    """Stems for ``labels`` beside the ``existing`` label -> stem of an index.

    Raises:
        ValidationError: two labels share a key (differ only in case, spacing or Unicode
            form) or, vanishingly rarely, a stem.
    """
    existing = dict(existing or {})
    by_key = {source_key(lab): lab for lab in existing}
    by_stem = {stem.casefold(): lab for lab, stem in existing.items()}
    out = dict(existing)
    for label in labels:
        if label in out:
            continue
        key, stem = source_key(label), source_stem(label)
        other = by_key.get(key) or by_stem.get(stem.casefold())
        if other is not None:
            raise ValidationError(
                f"index: source {label!r} collides with source {other!r}: labels that differ only in case, "
                "spacing or Unicode form name one source (and one set of files); spell the source "
                f"{other!r} in the corpus, or rename one of them")
        out[label] = stem
        by_key[key], by_stem[stem.casefold()] = label, label
    return out


def _stems_of(manifest: dict[str, Any]) -> dict[str, str]:
    """label -> file stem; manifests before stems existed named the files by label."""
    return {label: info.get("file", label) for label, info in manifest["sources"].items()}


# -- where an index may be written -----------------------------------------------------------
def _looks_like_corpus(path: Path) -> bool:
    """A JSONL file whose first non-blank line is an object with 'text' (or named *.jsonl)."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return True
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and "text" in rec
    except (OSError, ValueError):
        pass
    return False


def suggest_index_dir(path: Path) -> str:
    """Where an index of the corpus file ``path`` could go: ``indexes/<stem>``."""
    return str(Path("indexes") / (re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-.") or "index"))


# The files a build writes (_write_source, _write_centroids, _write_manifest, ChunkStore), by
# their path in the index folder: what tells an index whose manifest.json is unreadable.
_LAYOUT = re.compile(r"manifest\.json|chunks\.sqlite|centroids\.(npy|json)|faiss/[^/]+?(\.\d+)?\.faiss"
                     r"|vectors/[^/]+?(\.ids)?\.npy")


def index_layout_files(folder: Path) -> set[str] | None:
    """The files of ``folder`` that an index build writes, when the folder is an index by its
    layout alone (its manifest.json corrupt or missing): it holds ``chunks.sqlite`` and
    ``manifest.json`` or a ``faiss/*.faiss``. None when it is not; files of other names in it
    are left out of the set, so that :func:`~searchsmith.models.io.check_replaceable` refuses
    to replace them."""
    ours = files_matching(folder, _LAYOUT)
    if "chunks.sqlite" in ours and ("manifest.json" in ours or any(f.startswith("faiss/") for f in ours)):
        return {str(Path(f)) for f in ours}
    return None


def check_out_path(out: str | Path, *, overwrite: bool = False, label: str = "index --out") -> None:
    """Refuse an ``--out`` that would replace something searchsmith did not write.

    Accepted: a path that does not exist, an empty folder, and (only with ``overwrite``)
    a searchsmith index whose folder holds nothing but the files its manifest lists
    (:func:`searchsmith.models.io.check_replaceable`), or, when its manifest.json is corrupt or
    missing, nothing but files an index build writes (:func:`index_layout_files`): else no
    command could rebuild it in place. ``--add`` and ``--repair`` rebuild the
    folder and swap it in too, so they check it the same way (``overwrite``, their ``label``):
    a file of the user's in it would otherwise be copied into the new index and listed in its
    manifest as the index's own, and a later ``--force`` would delete it.

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """
    manifests: list[dict[str, Any]] = []
    unreadable: list[bool] = []

    def listed(folder: Path) -> set[str] | None:
        try:
            manifests.append(read_manifest(folder))
        except BundleError:
            # a manifest.json that cannot be read leaves the index's files as its only mark:
            # the folder is ours when they are (foreign files in it are refused all the same)
            layout = index_layout_files(folder)
            if layout is not None:
                unreadable.append(True)
            return layout
        return {str(Path(rel)) for rel in manifests[-1].get("files", {})} | {"manifest.json"}

    def holds() -> str:
        if unreadable:
            # an index keeps no record of the manifest it wrote: an unreadable one may be a hand
            # edit gone wrong, so only --force replaces it, and the message says where to repair it
            what = manifest_fault(out) or "cannot be read"
            rebuild = "pass --force to rebuild it from the corpus"
            if what == "is missing":
                fix = rebuild.capitalize()
            elif json_object_problem(Path(out) / "manifest.json") is not None:
                fix = f"Repair the JSON where it says, or {rebuild}"
            else:  # reads as JSON, fails the index checks: a hand edit, or a newer searchsmith's
                fix = f"Restore what was changed, or {rebuild}"
            return (f"holds a searchsmith index whose manifest.json {what} (neither --add nor --repair can work "
                    f"without it); nothing was replaced. {fix}")
        m = manifests[-1]
        return (f"already holds a searchsmith index ({m.get('documents')} documents, updated "
                f"{m.get('updated', '?')}); nothing was replaced. Pass --force to rebuild it, or --add to add "
                "the corpus's documents to it")

    def corpus_hint(path: Path) -> str:
        what = "a corpus file" if _looks_like_corpus(path) else "a file"
        return (f"is {what}, not an index folder; nothing was replaced. An index is a folder: use a new one, "
                f"e.g. --out {suggest_index_dir(path)}")

    check_replaceable(out, label=label, kind="index", listed=listed, replace=overwrite,
                      replace_hint=holds, file_hint=corpus_hint)


# -- building --------------------------------------------------------------------------------
EMBED_SLICE = 256  # chunks per embedding call: the progress bar moves every few seconds on 2 cores


def chunk_text(c: Chunk) -> str:
    """What is embedded for a chunk: its title, then its text."""
    return f"{c.title}. {c.text}" if c.title else c.text


def _embed_chunks(embedder: Embedder, chunks: Sequence[Chunk], bar: Any = None) -> np.ndarray:
    texts = [chunk_text(c) for c in chunks]
    if bar is None:
        return embedder.encode(texts)
    parts = []
    for i in range(0, len(texts), EMBED_SLICE):
        parts.append(embedder.encode(texts[i: i + EMBED_SLICE], show_progress=False))
        bar.update(len(parts[-1]))
    return np.concatenate(parts, axis=0)


def _effective_chunker(cfg: IndexConfig, embedder: Embedder) -> ChunkerConfig:
    """Chunks longer than the embedding window would be silently truncated: fit them to it.

    The default (``chunk_tokens`` unset) is 350 tokens or the window if shorter, said once
    at INFO; an explicit size above the window is clamped with a warning.
    """
    window = embedder.max_seq_length - 2  # [CLS] ... [SEP]
    asked = cfg.chunker.chunk_tokens
    if asked is None:
        fitted = cfg.chunker.fitted(window)
        if fitted.chunk_tokens < DEFAULT_CHUNK_TOKENS:
            log.info("index: chunks of %d tokens, the window of %s (%d tokens are used where a model allows them)",
                     fitted.chunk_tokens, embedder.model_name, DEFAULT_CHUNK_TOKENS)
        return fitted
    if asked > window:
        log.warning("index: chunker.chunk_tokens=%d exceeds the embedding model's window of %d "
                    "tokens; chunks are made %d tokens long (leave chunker.chunk_tokens unset to fit "
                    "the window)", asked, window, window)
        return ChunkerConfig(chunk_tokens=window, overlap_ratio=cfg.chunker.overlap_ratio)
    return cfg.chunker


def _write_source(tmp: Path, cfg: IndexConfig, stem: str, vectors: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    import faiss

    (tmp / "faiss").mkdir(exist_ok=True)
    (tmp / "vectors").mkdir(exist_ok=True)
    np.save(tmp / "vectors" / f"{stem}.npy", vectors.astype(np.float32))
    np.save(tmp / "vectors" / f"{stem}.ids.npy", ids.astype(np.int64))
    # an update rewrites the source: its earlier FAISS files (one, or shards) go first
    for old in (tmp / "faiss").iterdir():
        if re.fullmatch(re.escape(stem) + r"(\.\d+)?\.faiss", old.name):
            old.unlink()
    base, kind = _empty_faiss_index(cfg, vectors)
    shards = cfg.shards_for(len(ids))
    parts = np.array_split(np.arange(len(ids)), shards)
    for rel, part in zip(shard_files(stem, shards), parts, strict=True):
        faiss.write_index(_filled(base, vectors[part], ids[part]), str(tmp / rel))
    out = {"chunks": int(len(ids)), "index_type": kind, "file": stem}
    if shards > 1:
        out["shards"] = shards
    return out


def _write_centroids(tmp: Path, cfg: IndexConfig, sources: dict[str, Any]) -> None:
    cents, owners = [], []
    for name in sorted(sources):
        vecs = np.load(tmp / "vectors" / f"{sources[name].get('file', name)}.npy")
        c = compute_centroids(vecs, cfg.centroids)
        cents.append(c)
        owners.extend([name] * len(c))
        sources[name]["centroids"] = int(len(c))
    np.save(tmp / "centroids.npy", np.concatenate(cents, axis=0))
    write_json_atomic(tmp / "centroids.json", {"sources": owners})


def _write_manifest(tmp: Path, cfg: IndexConfig, embedder: Embedder, chunker_cfg: ChunkerConfig,
                    sources: dict[str, Any], n_docs: int, n_chunks: int, created: str | None = None) -> dict:
    # no build writes a file named manifest.json below the top (every other file has a name of
    # _LAYOUT's), and --add / --repair refuse a file the manifest does not list: files_sha256
    # leaves out the top-level manifest.json only all the same, as a bundle's listing does
    files = files_sha256(tmp)
    derived = any(info.get("file", label) != label for label, info in sources.items())
    manifest = {
        "format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION if derived else 1,
        "searchsmith_version": __version__,
        "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "embedding_model": embedder.model_name, "embedding_dim": embedder.dim,
        "max_seq_length": embedder.max_seq_length, "pooling": embedder.pooling, "normalized": True,
        "chunker": to_dict(chunker_cfg), "documents": n_docs, "chunks": n_chunks,
        "sources": sources, "config": to_dict(cfg), "files": files,
    }
    write_json_atomic(tmp / "manifest.json", manifest)
    return manifest


@contextlib.contextmanager
def _removed_on_error(tmp: Path) -> Iterator[None]:
    """Run a build in the staging folder ``tmp``; any error (or interrupt) removes it, then re-raises."""
    try:
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def _embed_progress(n_chunks: int, show: bool) -> Iterator[Any]:
    """A progress bar over ``n_chunks`` embedded chunks (None unless ``show``), closed on the way out."""
    if not show:
        yield None
        return
    from searchsmith.models.console import progress

    bar = progress(total=n_chunks, desc="embed", unit="chunk")
    try:
        yield bar
    finally:
        bar.close()


def _local_pieces(embedder: Embedder, texts: Sequence[str], bar: Any = None, step: int = EMBED_SLICE
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(positions, vectors)`` slices of ``step`` texts embedded in this process, in order
    (with a progress bar, slices of ``EMBED_SLICE`` so that it moves)."""
    step = EMBED_SLICE if bar is not None else max(1, step)
    for i in range(0, len(texts), step):
        vectors = embedder.encode(texts[i: i + step], show_progress=False)
        if bar is not None:
            bar.update(len(vectors))
        yield np.arange(i, i + len(vectors)), vectors


def _embedded_parts(out: Path, cfg: IndexConfig, embedder: Embedder, chunker_cfg: ChunkerConfig,
                    texts: list[str], embed: EmbedJob | None, say: Report, show_progress: bool) -> BuildParts:
    """Every chunk embedded, in saved parts (:mod:`index_parts`): the parts an earlier run of
    the same job finished are kept, the others embedded here or by ``embed``."""
    identity = {"model": embedder.model_name, "dim": embedder.dim, "max_seq_length": embedder.max_seq_length,
                "pooling": embedder.pooling, "chunker": to_dict(chunker_cfg), "part_rows": cfg.build_part_chunks}
    parts = BuildParts(out, job_key(texts, identity), len(texts), cfg.build_part_chunks, embedder.dim, say)
    rows = parts.missing_rows()
    if len(rows):
        todo = [texts[r] for r in rows]
        with _embed_progress(len(todo), show_progress and embed is None) as bar:
            pieces = (embed(todo) if embed is not None  # one slice per part: each is saved as it ends
                      else _local_pieces(embedder, todo, bar, step=cfg.build_part_chunks))
            parts.fill(pieces, rows)
    return parts


def _by_source(chunker: Chunker, records: Sequence[dict[str, Any]]) -> dict[str, list[Chunk]]:
    by_source: dict[str, list[Chunk]] = {}
    for c in chunker.chunk_all(records):
        by_source.setdefault(c.source, []).append(c)
    return by_source


def build_index(records: Sequence[dict[str, Any]], out_dir: str | Path, config: IndexConfig | None = None,
                embedder: Embedder | None = None, *, overwrite: bool = False, report: Report | None = None,
                show_progress: bool = False,
                embed: EmbedJob | None = None) -> dict[str, Any]:
    """Chunk, embed and index validated corpus records into ``out_dir`` (atomically).

    Args:
        overwrite: replace an existing index at ``out_dir`` (never anything else, see
            :func:`check_out_path`, checked before any work and again before the swap).
        report: called with one line per step (the CLI prints them).
        show_progress: a progress bar over the chunks embedded (on a terminal).
        embed: ``texts -> (positions, vectors)`` pieces in any order, for every chunk still to
            embed, in place of ``embedder.encode`` (``index_ray.ray_embed``: Ray Data
            actors); the embedder still chunks (its
            tokenizer) and names the model in the manifest, and must be the same model.

    A second build or ``--add`` into the same ``out_dir`` meanwhile is refused
    (:func:`~searchsmith.models.io.exclusive`). ``records`` get the corpus file's checks first
    (:func:`~searchsmith.serving.corpus.check_records`: a list built in Python is named
    ``records[i]`` in the errors), before any model loads.

    Returns:
        The manifest written.

    Raises:
        ValidationError: a bad record (every problem named), or ``out_dir`` is not ours to write.
    """
    records = check_records(records)
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir).strip():
        raise ValidationError(f"index: out_dir must be the path of a new folder (a str or pathlib.Path), got "
                              f"{out_dir!r:.60}")
    if embedder is not None and not isinstance(embedder, Embedder):
        raise ValidationError(f"index: embedder is a {type(embedder).__name__}, expected a "
                              "searchsmith.serving.embedder.Embedder (Embedder(EmbedderConfig(model=...))): an index "
                              "is embedded by the model itself; an exported embed bundle of it serves the queries "
                              "(bundles.embedder)")
    if config is not None and not isinstance(config, IndexConfig):
        raise ValidationError(f"index: config is a {type(config).__name__}, expected an IndexConfig "
                              "(from_dict(IndexConfig, {...}) reads a mapping)")
    with exclusive(Path(out_dir), "index"):
        return _build_index(records, out_dir, config, embedder, overwrite=overwrite, report=report,
                            show_progress=show_progress, embed=embed)


def _build_index(records: Sequence[dict[str, Any]], out_dir: str | Path, config: IndexConfig | None = None,
                 embedder: Embedder | None = None, *, overwrite: bool = False, report: Report | None = None,
                 show_progress: bool = False,
                 embed: EmbedJob | None = None) -> dict[str, Any]:
    """The body of :func:`build_index`, under its lock."""
    cfg = config or IndexConfig()
    if len(records) > cfg.max_documents:
        raise ValidationError(f"index: {len(records)} documents, the limit is {cfg.max_documents} (index.max_documents)")
    out = Path(out_dir)
    check_out_path(out, overwrite=overwrite)
    stems = assign_stems(sorted({str(r["source"]) for r in records}))
    say = report or (lambda line: None)
    if embedder is None:
        say(f"index: loading the embedding model {model_display_name(cfg.embedder.model)}")
        embedder = Embedder(cfg.embedder)
    chunker_cfg = _effective_chunker(cfg, embedder)
    chunker = Chunker(embedder.tokenizer, chunker_cfg)
    by_source = _by_source(chunker, records)
    n_chunks = sum(len(v) for v in by_source.values())
    say(f"index: {len(records)} documents -> {n_chunks} chunks of <= {chunker_cfg.chunk_tokens} tokens "
        f"in {len(by_source)} source(s); embedding with {embedder.model_name}")
    parts = _embedded_parts(out, cfg, embedder, chunker_cfg,
                            [chunk_text(c) for name in sorted(by_source) for c in by_source[name]],
                            embed, say, show_progress)
    every = parts.load()
    tmp = temp_dir_beside(out)
    with _removed_on_error(tmp):
        store = ChunkStore(tmp / "chunks.sqlite")
        sources: dict[str, Any] = {}
        row = 0
        for name in sorted(by_source):
            chunks = by_source[name]
            ids = np.asarray(store.add(chunks, row), dtype=np.int64)
            sources[name] = _write_source(tmp, cfg, stems[name], every[row: row + len(chunks)], ids)
            sources[name]["documents"] = len({c.doc_id for c in chunks})
            row += len(chunks)
        store.close()
        _write_centroids(tmp, cfg, sources)
        manifest = _write_manifest(tmp, cfg, embedder, chunker_cfg, sources, len(records), row)
        check_out_path(out, overwrite=overwrite)  # something may have appeared there meanwhile
        replace_dir(tmp, out)
    parts.remove()
    return manifest


def add_documents(index_dir: str | Path, records: Sequence[dict[str, Any]],
                  embedder: Embedder | None = None, *, report: Report | None = None,
                  show_progress: bool = False) -> dict[str, Any]:
    """Add documents to an existing index without rebuilding it (atomically).

    New chunks are embedded and appended to their sources' FAISS indexes (a new source gets
    a new index); the centroids of the touched sources are recomputed. ``records`` are checked
    as :func:`build_index` checks them.
    """
    records = check_records(records)
    index_dir = Path(index_dir)
    with exclusive(index_dir, "index --add"):
        return _add_documents(index_dir, records, embedder, report=report, show_progress=show_progress)


def _add_documents(index_dir: Path, records: Sequence[dict[str, Any]], embedder: Embedder | None, *,
                   report: Report | None, show_progress: bool) -> dict[str, Any]:
    """The body of :func:`add_documents`, under its lock: the index is checked whole first
    (a missing or damaged file would be carried into the new index, and its sha256 rewritten
    over the damage)."""
    manifest = read_manifest(index_dir)
    check_out_path(index_dir, overwrite=True, label="index --add")
    verify_files(manifest, index_dir)
    cfg = from_dict(IndexConfig, manifest["config"], source=f"{index_dir}/manifest.json:config")
    say = report or (lambda line: None)
    if embedder is None:
        say(f"index --add: loading the embedding model {model_display_name(cfg.embedder.model)}")
        embedder = Embedder(cfg.embedder)
    check_model(manifest, embedder, index_dir)
    if not records:
        raise ValidationError("index --add: no documents to add")
    stems = assign_stems(sorted({str(r["source"]) for r in records}), _stems_of(manifest))
    chunker_cfg = from_dict(ChunkerConfig, manifest["chunker"])
    tmp = temp_dir_beside(index_dir)
    shutil.copytree(index_dir, tmp, dirs_exist_ok=True)
    with _removed_on_error(tmp):
        store = ChunkStore(tmp / "chunks.sqlite")
        existing = store.doc_ids()
        dup = sorted({r["id"] for r in records} & existing)
        if dup:
            raise ValidationError(f"index --add: {len(dup)} document id(s) already in the index, e.g. {dup[:3]}; "
                                  "ids must be unique (remove them from the file or rebuild)")
        chunker = Chunker(embedder.tokenizer, chunker_cfg)
        by_source = _by_source(chunker, records)
        n_chunks = sum(len(v) for v in by_source.values())
        say(f"index --add: {len(records)} documents -> {n_chunks} chunks in {len(by_source)} source(s)")
        sources = {name: {**info, "file": stems[name]} for name, info in manifest["sources"].items()}
        row = store.max_row() + 1
        with _embed_progress(n_chunks, show_progress) as bar:
            for name in sorted(by_source):
                chunks = by_source[name]
                stem = stems[name]
                ids = np.asarray(store.add(chunks, row), dtype=np.int64)
                row += len(chunks)
                vecs = _embed_chunks(embedder, chunks, bar)
                vec_path = tmp / "vectors" / f"{stem}.npy"
                if vec_path.exists():
                    vecs = np.concatenate([np.load(vec_path), vecs])
                    ids = np.concatenate([np.load(tmp / "vectors" / f"{stem}.ids.npy"), ids])
                docs = sources.get(name, {}).get("documents", 0) + len({c.doc_id for c in chunks})
                sources[name] = _write_source(tmp, cfg, stem, vecs, ids)
                sources[name]["documents"] = docs
        store_count = store.count()
        store.close()
        _write_centroids(tmp, cfg, sources)
        out = _write_manifest(tmp, cfg, embedder, chunker_cfg, sources,
                              manifest["documents"] + len(records), store_count, manifest["created"])
        replace_dir(tmp, index_dir)
    return out


# -- loading and search ----------------------------------------------------------------------
def read_manifest(index_dir: str | Path) -> dict[str, Any]:
    d = Path(index_dir)
    path = d / "manifest.json"
    if d.is_file():
        if _looks_like_corpus(d):
            raise BundleError(
                f"index {str(d)!r} is a corpus file, not an index folder; index it first with "
                f"'searchsmith index {d} --out {suggest_index_dir(d)}', then pass --index {suggest_index_dir(d)}")
        raise BundleError(f"index {str(d)!r} is a file, not an index folder (one written by 'searchsmith index "
                          "CORPUS.jsonl --out DIR')")
    if not d.is_dir():
        # a missing path named like a corpus file is no place for an index either
        target = suggest_index_dir(d) if d.suffix.lower() in (".jsonl", ".ndjson", ".json") else str(d)
        raise BundleError(f"index {str(d)!r} does not exist; build it with "
                          f"'searchsmith index CORPUS.jsonl --out {target}'")

    def rebuild() -> str:
        # the index's settings and each file's sha256 are only in its manifest: without one, no
        # --repair; --force rebuilds the folder in place when check_out_path knows it by its files
        if index_layout_files(d) is not None:
            return f"rebuild it from its corpus (--repair needs the manifest): searchsmith index CORPUS.jsonl --out {d} --force"
        return ("the index's other files are missing too, so --force would not replace the folder; build the "
                "index into a new folder: searchsmith index CORPUS.jsonl --out NEW_DIR")

    if not path.is_file():
        if (d / "chunks.sqlite").exists() or any(d.glob("*.faiss")) or any(d.glob("faiss/*.faiss")):
            raise BundleError(f"index {d}: manifest.json is missing; {rebuild()}")
        raise BundleError(f"index {d}: not a searchsmith index (no manifest.json, no index files); build one with "
                          f"'searchsmith index CORPUS.jsonl --out DIR' into a new folder")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"index {d}: manifest.json is corrupt ({exc}); {rebuild()}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT:
        if index_layout_files(d) is not None:  # an index's files around it: its manifest is damaged
            raise BundleError(f"index {d}: manifest.json is not a searchsmith index manifest; {rebuild()}")
        raise BundleError(f"index {d}: manifest.json is not a searchsmith index manifest")
    problems = manifest_problems(manifest)
    if problems:
        raise BundleError(f"index {d}: manifest.json was edited or damaged ({'; '.join(problems[:3])}); restore it, "
                          "or rebuild the index from its corpus with 'searchsmith index CORPUS --out DIR --force'")
    if int(manifest.get("format_version", 0)) > INDEX_FORMAT_VERSION:
        raise BundleError(f"index {d}: format version {manifest['format_version']} is newer than this "
                          f"searchsmith ({INDEX_FORMAT_VERSION}); upgrade searchsmith")
    try:  # the saved settings, read as every reader of the index will read them
        from_dict(IndexConfig, manifest["config"], source=f"{d}/manifest.json:config")
    except ConfigError as exc:
        raise BundleError(f"{exc}\n  index {d} was built by searchsmith {manifest.get('searchsmith_version', '?')} "
                          f"with settings this searchsmith {__version__} refuses (or its manifest.json was edited); "
                          f"rebuild it: searchsmith index CORPUS.jsonl --out {d} --force") from None
    return manifest


def manifest_problems(manifest: dict[str, Any]) -> list[str]:
    """What is wrong with the shape of an index manifest (empty when nothing): the fields the
    loader reads, each of the type the build writes; a field an older build did not write may
    be absent."""
    out = []
    for key, low in (("format_version", 1), ("embedding_dim", 1), ("max_seq_length", 1), ("documents", 0),
                     ("chunks", 0)):
        if key in manifest and not is_int(manifest[key], low):
            out.append(f"{key}: expected an int >= {low}, got {manifest[key]!r:.40}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        out.append("files: expected {path: sha256}")
    sources = manifest.get("sources")
    if not isinstance(sources, dict) or not sources or not all(isinstance(v, dict) for v in sources.values()):
        out.append("sources: expected a non-empty {name: {...}}")
    else:
        for name, info in sources.items():
            if "shards" in info and not is_int(info["shards"], 1):
                out.append(f"sources.{name}.shards: expected an int >= 1, got {info['shards']!r:.40}")
            if "file" in info and not (isinstance(info["file"], str) and info["file"]):
                out.append(f"sources.{name}.file: expected a file stem, got {info['file']!r:.40}")
    for key in ("config", "chunker"):
        if key in manifest and not isinstance(manifest[key], dict):
            out.append(f"{key}: expected a mapping")
    if "config" not in manifest:
        out.append("config: missing")
    return out


def manifest_fault(index_dir: str | Path) -> str | None:
    """What keeps the manifest.json of ``index_dir`` from being read as an index's, to follow
    its path in a message: ``"is missing"``, ``"is not valid JSON (Expecting ',' delimiter: line
    3 column 5 (char 31))"``, ``"is not a searchsmith index manifest (its "format" is 'mine',
    ...)"``, ``"was edited or damaged (documents: expected an int >= 0, got -1)"``, a newer
    format version, or settings this searchsmith refuses; None when :func:`read_manifest` reads
    it. Unlike the loader's message, it carries no fix: the caller knows whose file it is."""
    path = Path(index_dir) / "manifest.json"
    if not path.is_file():
        return "is missing"
    problem = json_object_problem(path)
    if problem is not None:
        return problem
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != INDEX_FORMAT:
        return (f"is not a searchsmith index manifest (its \"format\" is {manifest.get('format')!r:.40}, expected "
                f"{INDEX_FORMAT!r})")
    problems = manifest_problems(manifest)
    if problems:
        return f"was edited or damaged ({'; '.join(problems[:3])})"
    if int(manifest.get("format_version", 0)) > INDEX_FORMAT_VERSION:
        return (f"is of format version {manifest['format_version']}, newer than this searchsmith reads "
                f"({INDEX_FORMAT_VERSION})")
    try:
        from_dict(IndexConfig, manifest["config"], source=f"{path}:config")
    except ConfigError as exc:
        return f"holds settings this searchsmith refuses ({exc})"
    return None


def verify_files(manifest: dict[str, Any], index_dir: Path, *, checksums: bool = True) -> None:
    """Every file of the manifest exists (and matches its sha256 when ``checksums``)."""
    for rel, digest in manifest["files"].items():
        p = index_dir / rel
        if not p.is_file():
            raise BundleError(f"index {index_dir}: file {rel} is missing; repair it with 'searchsmith index "
                              f"--repair --out {index_dir}', or rebuild the index")
        if checksums and sha256_file(p) != digest:
            raise BundleError(f"index {index_dir}: file {rel} is corrupt (sha256 mismatch); repair it with "
                              f"'searchsmith index --repair --out {index_dir}', or rebuild the index")


def check_model(manifest: dict[str, Any], embedder: Embedder, index_dir: Path) -> None:
    if manifest["embedding_dim"] != embedder.dim or manifest["embedding_model"] != embedder.model_name:
        raise BundleError(
            f"index {index_dir} was built with {manifest['embedding_model']} (dim {manifest['embedding_dim']}), "
            f"but the embedder is {embedder.model_name} (dim {embedder.dim}); use the same model "
            "(embedder.model) or rebuild the index with this one"
        )


def _read_centroids(index_dir: Path, dim: int, sources: list[str]) -> tuple[np.ndarray, list[str]]:
    """``centroids.npy`` and the source of each row (``centroids.json``), checked against each other
    and the manifest: a damaged pair (read unchecked with ``verify=False``) is a BundleError."""
    fix = f"repair it with 'searchsmith index --repair --out {index_dir}', or rebuild the index"
    try:
        cents = np.load(index_dir / "centroids.npy", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise BundleError(f"index {index_dir}: centroids.npy cannot be read ({exc}); {fix}") from None
    try:
        owners = json.loads((index_dir / "centroids.json").read_text(encoding="utf-8"))["sources"]
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise BundleError(f"index {index_dir}: centroids.json cannot be read ({type(exc).__name__}: {exc}); "
                          f"{fix}") from None
    if cents.ndim != 2 or cents.shape[1] != dim or not np.issubdtype(cents.dtype, np.floating):
        raise BundleError(f"index {index_dir}: centroids.npy holds a {cents.dtype} array of shape {cents.shape}, "
                          f"not (centroids, {dim}) floats; {fix}")
    if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners) \
            or len(owners) != len(cents) or not set(owners) <= set(sources):
        raise BundleError(f"index {index_dir}: centroids.json's 'sources' must name one of the index's sources "
                          f"for each of the {len(cents)} centroid rows; {fix}")
    return cents.astype(np.float32, copy=False), owners


MAX_TITLED = 10_000  # chunks one title lookup returns at most (sqlite takes no larger int either)


class Index:
    """A loaded index: per-source search, chunk lookup and the routing centroids."""

    def __init__(self, index_dir: Path, manifest: dict[str, Any], config: IndexConfig) -> None:
        import faiss

        self.dir = index_dir
        self.manifest = manifest
        self.config = config
        self.dim = int(manifest["embedding_dim"])
        self.sources = sorted(manifest["sources"])  # labels: what every user-facing output names
        self._stems = _stems_of(manifest)
        self.store = ChunkStore(index_dir / "chunks.sqlite", readonly=True)
        self.closed = False
        self._faiss = {}
        self._shards: dict[str, list[Any]] = {}  # a sharded source's parts (IndexShards does not own them)
        for s in self.sources:
            info = manifest["sources"][s]
            parts = []
            for rel in shard_files(self._stems[s], int(info.get("shards", 1))):
                try:
                    parts.append(read_faiss(index_dir / rel, info.get("index_type", "flat"), config.mmap))
                except RuntimeError as exc:
                    raise BundleError(f"index {index_dir}: {rel} (source {s!r}) cannot be read ({exc}); "
                                      "rebuild the index") from None
            if len(parts) == 1:
                self._faiss[s] = parts[0]
                continue
            shards = faiss.IndexShards(self.dim, True, False)  # threaded; ids are the chunk rows
            for part in parts:
                shards.add_shard(part)
            self._faiss[s], self._shards[s] = shards, parts
        self.centroids, self.centroid_sources = _read_centroids(index_dir, self.dim, self.sources)
        self.backend = self._pick_backend(config.search_backend)
        self._kernel_mats: dict[str, tuple[Any, np.ndarray]] = {}
        if self.backend == "kernel":
            self._load_kernel_mats()

    def vector_files(self, source: str) -> tuple[Path, Path]:
        """``(vectors.npy, ids.npy)`` of a source label: (n, D) float32 and (n,) int64 rows."""
        stem = self._stems[source]
        return self.dir / "vectors" / f"{stem}.npy", self.dir / "vectors" / f"{stem}.ids.npy"

    @classmethod
    def load(cls, index_dir: str | Path, *, embedder: Embedder | None = None, verify: bool = True,
             search_backend: str | None = None, mmap: bool | None = None) -> Index:
        """Open an index folder; validates the manifest, the files and (given one) the embedder.

        ``mmap`` (None: the index's own ``mmap`` setting) memory-maps the FAISS files.
        """
        d = Path(index_dir)
        manifest = read_manifest(d)
        verify_files(manifest, d, checksums=verify)
        cfg = from_dict(IndexConfig, manifest["config"], source=f"{d}/manifest.json:config")
        if search_backend or mmap is not None:
            over = {"search_backend": search_backend} if search_backend else {}
            if mmap is not None:
                over["mmap"] = mmap
            cfg = from_dict(IndexConfig, {**manifest["config"], **over})
        if embedder is not None:
            check_model(manifest, embedder, d)
        return cls(d, manifest, cfg)

    def _pick_backend(self, wanted: str) -> str:
        """faiss-gpu when it sees GPUs, else the similarity_topk kernel on CUDA, else faiss CPU."""
        if wanted != "auto":
            return wanted
        import faiss
        from searchsmith.kernels.host import host_only

        if host_only() and getattr(faiss, "get_num_gpus", lambda: 0)() == 0:
            return "faiss"  # no GPU to use: do not import torch to find that out (cold start)
        import torch

        if getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
            res = faiss.StandardGpuResources()
            self._faiss = {s: faiss.index_cpu_to_gpu(res, 0, ix) for s, ix in self._faiss.items()}
            return "faiss"
        if torch.cuda.is_available():
            return "kernel"
        return "faiss"

    def _load_kernel_mats(self) -> None:
        import torch

        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if dev.type == "cuda" else torch.float32
        for s in self.sources:
            vec_path, ids_path = self.vector_files(s)
            vecs = np.load(vec_path)
            ids = np.load(ids_path)
            self._kernel_mats[s] = (torch.from_numpy(vecs).to(dev, dtype), ids)

    def _search_one(self, source: str, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        # never more than the source holds: faiss allocates (B, k) results whatever its size
        # (k = 10**9 over 366 chunks took the process out of memory)
        held = int(self._kernel_mats[source][0].shape[0]) if self.backend == "kernel" else int(self._faiss[source].ntotal)
        k = max(1, min(k, held))
        if self.backend == "kernel":
            import torch
            from searchsmith.kernels import similarity_topk

            mat, ids = self._kernel_mats[source]
            scores, idx = similarity_topk(torch.from_numpy(q).to(mat.device, mat.dtype), mat, k)
            return scores.float().cpu().numpy(), ids[idx.cpu().numpy()]
        scores, rows = self._faiss[source].search(q, k)
        return scores, rows

    def search(self, query_vectors: np.ndarray, sources: Sequence[str] | None = None,
               k: int = 10) -> list[list[Hit]]:
        """Top-``k`` chunks per query over ``sources`` (all by default), merged by score.

        Args:
            query_vectors: (B, D) float32 from the index's embedder; rows are scaled to unit
                norm (scores are cosines), an all-zero row is an error.
            sources: source names; unknown names are an error.
            k: results per query (>= 1).
        """
        try:
            q = np.ascontiguousarray(np.asarray(query_vectors, dtype=np.float32))
        except (TypeError, ValueError):
            raise ValidationError(f"search: query vectors must be numbers, shape (B, {self.dim}), got "
                                  f"{type(query_vectors).__name__}; embed the text first (the index's embedder)") from None
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValidationError(f"search: query vectors have shape {tuple(q.shape)}, expected (B, {self.dim})")
        if not np.isfinite(q).all():
            raise ValidationError("search: query vectors hold NaN or infinite values (no hit would be found); "
                                  "check the embedder's output")
        norms = np.linalg.norm(q, axis=1)
        if (norms == 0).any():
            raise ValidationError(f"search: query vector {int(np.flatnonzero(norms == 0)[0])} is all zeros "
                                  "(it has no direction to search); check the embedder's output")
        if not np.allclose(norms, 1.0, atol=1e-3):  # scores are cosines: a query's scale changes none of its order
            q = np.ascontiguousarray(q / norms[:, None], dtype=np.float32)
        names, k = self._searched("search", sources, k)
        if not names:
            raise ValidationError("search: no source to search (the router selected none)")
        per_query: list[list[tuple[float, int]]] = [[] for _ in range(len(q))]
        for s in names:
            scores, rows = self._search_one(s, q, k)
            for b in range(len(q)):
                per_query[b].extend((float(sc), int(r)) for sc, r in zip(scores[b], rows[b]) if r >= 0)
        merged = [sorted(hits, key=lambda t: (-t[0], t[1]))[:k] for hits in per_query]
        chunks = self.store.get(sorted({r for hits in merged for _, r in hits}))
        return [[Hit(sc, r, chunks[r]) for sc, r in hits] for hits in merged]

    def _searched(self, what: str, sources: Iterable[str] | None, k: int) -> tuple[list[str], int]:
        """``(source names, k)`` of a search of ``k`` results: the sources named (all by default),
        each once, in order, and ``k`` a Python int; ValidationError for a ``k`` below 1 or a
        source the index lacks. A source named twice gave every hit of it twice."""
        if self.closed:
            raise NotReadyError(f"{what}: the index {self.dir} was closed; load it again (Index.load)")
        if not is_int(k, 1):
            raise ValidationError(f"{what}: k must be an int >= 1, got {k!r}")
        listed = None if sources is None or isinstance(sources, (str, bytes)) else list(sources)  # a generator once
        if sources is not None and (listed is None or not all(isinstance(n, str) for n in listed)):
            raise ValidationError(f"{what}: sources must be a list of source names (e.g. {list(self.sources)[:1]}) "
                                  f"or None for all, got {sources!r:.80}")
        names = list(dict.fromkeys(self.sources if listed is None else listed))
        unknown = [s for s in names if s not in self._faiss]
        if unknown:
            raise ValidationError(f"{what}: unknown source(s) {unknown}; this index has {self.sources}")
        return names, int(k)

    def titled(self, name: str, sources: Sequence[str] | None = None, limit: int = 3) -> list[Hit]:
        """The chunks of ``sources`` (all by default) titled ``name`` (``ChunkStore.rows_titled``),
        at most ``limit``, as hits of score 0: a lookup by name, not a search."""
        if not isinstance(name, str):
            raise ValidationError(f"titled: name must be a string, got {type(name).__name__}")
        if not is_int(limit, 1) or limit > MAX_TITLED:
            raise ValidationError(f"titled: limit must be an int in [1, {MAX_TITLED}], got {limit!r:.40}")
        if isinstance(sources, (str, bytes)):  # read a character at a time, it matched nothing
            raise ValidationError(f"titled: sources must be a list of source names or None, got {sources!r:.60}")
        names = [s for s in (self.sources if sources is None else sources) if s in self._faiss]
        rows = self.store.rows_titled(name, names, int(limit))
        chunks = self.store.get(rows)
        return [Hit(0.0, r, chunks[r]) for r in rows if r in chunks]

    @property
    def has_lexical(self) -> bool:
        """Whether the chunk store has its full-text table (indexes built before it have not:
        rebuild them for :meth:`lexical`)."""
        return self.store.has_lexical

    def spelled(self, text: str, min_chars: int = 5) -> tuple[str, dict[str, str]]:
        """``(text, corrections)``: ``text`` with each word of ``min_chars`` letters or more,
        typed in lower case, that no chunk holds replaced by the word of the chunks' titles one
        edit away that most titles hold (``ChunkStore.near_terms``: "wich port does qaurry use" -> "wich
        port does quarry use"), and ``{typed: replaced}``. A word with a capital is kept (a name
        the index lacks, "Redis", is not made one it has), and so are words with digits or
        other signs, stop words, and everything without the full-text table."""
        if not isinstance(text, str):
            raise ValidationError(f"spelling: text must be a string, got {type(text).__name__}")
        lower = {w for w in re.findall(r"[^\W\d_]+", text) if w.islower()}
        fixes = self.store.near_terms([t for t in lexical_terms(text) if t in lower and len(t) >= min_chars])
        if not fixes:
            return text, {}
        pattern = re.compile(r"(?<![\w'’.-])(?:" + "|".join(re.escape(w) for w in fixes) + r")(?![\w'’-]|\.\w)")
        return pattern.sub(lambda m: fixes[m.group(0)], text), fixes

    def lexical(self, text: str, sources: Sequence[str] | None = None, k: int = 10) -> list[Hit]:
        """Top-``k`` chunks of ``sources`` (all by default) for ``text`` by BM25 over their
        titles and texts, best first, as hits scored by the share of the most the query can
        score that they reach, in [0, 1) (``ChunkStore.lexical``); empty when the index has no
        full-text table or ``text`` no term.

        Raises:
            ValidationError: an unknown source or ``k`` < 1.
        """
        if not isinstance(text, str):
            raise ValidationError(f"lexical search: text must be a string, got {type(text).__name__}")
        names, k = self._searched("lexical search", sources, k)
        found = self.store.lexical(text, None if set(names) >= set(self.sources) else names, k)
        chunks = self.store.get([r for r, _ in found])
        return [Hit(sc, r, chunks[r]) for r, sc in found if r in chunks]

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the chunk store (the FAISS indexes need no closing); a search after it is an
        error that says so (it was sqlite's "Cannot operate on a closed database")."""
        self.closed = True
        self.store.close()
