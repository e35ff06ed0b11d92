"""The embedding of an index build, saved part by part so that a build that dies resumes.

``build_index`` embeds the chunks in parts of ``IndexConfig.build_part_chunks`` rows (in the
order the index stores them) and saves each finished part in a hidden folder beside the
output, ``.<out>.build/``: ``part-00000.npy``, ... and ``build.json``, which names the job
(a sha256 over the model, the chunker and every chunk text) and the sha256 of each part.

Run the same command again after a crash (of the process, of the machine, or of the Ray
driver) and the parts whose file still matches its sha256 are kept; a part that is missing
or corrupt is embedded again. A different corpus or model is a different job: its saved
parts are dropped. After the index is swapped in, the folder is removed. The folder is the
project's own: one that lacks a valid ``build.json`` is refused, never deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from searchsmith.models.errors import ValidationError
from searchsmith.models.io import read_json_object, sha256_file, temp_file_beside, write_json_atomic

BUILD_FORMAT = "searchsmith-index-build"
MARKER = "build.json"


def job_key(texts: Sequence[str], identity: dict[str, object]) -> str:
    """A sha256 naming one embedding job: what is embedded (``texts``, in order) and how
    (``identity``: model, dimension, window, pooling, chunker, part size)."""
    h = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode("utf-8"))
    for t in texts:
        h.update(len(t).to_bytes(8, "little"))
        h.update(t.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def build_dir_for(out: Path) -> Path:
    """Where the parts of a build of ``out`` are saved: ``.<name>.build`` beside it."""
    out = Path(out)
    return out.with_name(f".{out.name}.build")


class BuildParts:
    """The saved parts of one embedding job (see the module docstring).

    Args:
        out: the index folder being built.
        key: :func:`job_key` of the job.
        n_rows: the chunks to embed.
        part_rows: chunks per part.
        dim: the embedding width.
        report: called with one line per event (parts kept, dropped, corrupt).
    """

    def __init__(self, out: Path, key: str, n_rows: int, part_rows: int, dim: int,
                 report: Callable[[str], None] | None = None) -> None:
        if part_rows < 1:
            raise ValueError(f"build_part_chunks: expected an int >= 1, got {part_rows}")
        self.folder = build_dir_for(out)
        self.key, self.n_rows, self.part_rows, self.dim = key, n_rows, part_rows, dim
        self.n_parts = max(1, -(-n_rows // part_rows))
        self.say = report or (lambda line: None)
        self.done: dict[int, str] = {}
        self._open()

    # -- the folder ---------------------------------------------------------------------------
    def _state(self) -> dict[str, object]:
        return {"format": BUILD_FORMAT, "key": self.key, "rows": self.n_rows, "part_rows": self.part_rows,
                "dim": self.dim, "parts": {str(i): d for i, d in sorted(self.done.items())}}

    def _read_marker(self) -> dict[str, object]:
        """The folder's ``build.json``; a folder without a valid one is not ours: refused."""
        entries = sorted(p.name for p in self.folder.iterdir())
        marker = self.folder / MARKER
        data = None
        if marker.is_file():
            try:
                data = read_json_object(marker, "index", error=ValidationError)
            except ValidationError:
                data = None
        if not data or data.get("format") != BUILD_FORMAT:
            shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
            raise ValidationError(
                f"index: {self.folder} exists but is not a build folder searchsmith wrote (no valid {MARKER}; "
                f"it holds {shown or 'nothing'}); nothing was touched. Move or remove it, then run the command again")
        return data

    def _ours(self, data: dict[str, object]) -> list[Path]:
        parts = data.get("parts") if isinstance(data.get("parts"), dict) else {}
        return [self.folder / self.part_name(int(i)) for i in parts if str(i).isdigit()]

    def _open(self) -> None:
        if not self.folder.exists():
            self.folder.mkdir(parents=True)
            write_json_atomic(self.folder / MARKER, self._state())
            return
        data = self._read_marker()
        same = (data.get("key") == self.key and data.get("rows") == self.n_rows
                and data.get("part_rows") == self.part_rows and data.get("dim") == self.dim)
        if not same:
            listed = self._ours(data)
            for p in listed:
                p.unlink(missing_ok=True)
            if listed:
                self.say(f"index: {len(listed)} part(s) saved by an earlier build of another corpus or model "
                         "were dropped")
            write_json_atomic(self.folder / MARKER, self._state())
            return
        saved = data.get("parts") if isinstance(data.get("parts"), dict) else {}
        corrupt = []
        for i, digest in saved.items():
            p = self.folder / self.part_name(int(i))
            if p.is_file() and sha256_file(p) == digest:
                self.done[int(i)] = str(digest)
            else:
                corrupt.append(int(i))
                p.unlink(missing_ok=True)
        if corrupt:
            self.say(f"index: part(s) {', '.join(map(str, sorted(corrupt)))} of the earlier build are missing or "
                     "corrupt (sha256 mismatch): embedding them again")
        if self.done:
            self.say(f"index: resuming: {len(self.done)} of {self.n_parts} part(s) were embedded by an earlier "
                     f"run ({self.folder})")
        write_json_atomic(self.folder / MARKER, self._state())

    @staticmethod
    def part_name(i: int) -> str:
        return f"part-{i:05d}.npy"

    def bounds(self, i: int) -> tuple[int, int]:
        """The rows ``[start, stop)`` of part ``i``."""
        return i * self.part_rows, min(self.n_rows, (i + 1) * self.part_rows)

    def missing(self) -> list[int]:
        return [i for i in range(self.n_parts) if i not in self.done]

    def missing_rows(self) -> np.ndarray:
        """Every row of the parts still to embed, in order."""
        spans = [np.arange(*self.bounds(i)) for i in self.missing()]
        return np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)

    # -- writing and reading ------------------------------------------------------------------
    def save(self, i: int, vectors: np.ndarray) -> None:
        """Save part ``i`` atomically, then record its sha256."""
        start, stop = self.bounds(i)
        if vectors.shape != (stop - start, self.dim):
            raise ValueError(f"part {i}: expected vectors of shape {(stop - start, self.dim)}, got {vectors.shape}")
        path = self.folder / self.part_name(i)
        tmp = temp_file_beside(path, ".npy")
        with open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(vectors, dtype=np.float32))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        self.done[i] = sha256_file(path)
        write_json_atomic(self.folder / MARKER, self._state())

    def fill(self, pieces: Iterable[tuple[np.ndarray, np.ndarray]], rows: np.ndarray) -> None:
        """Save the parts as their vectors arrive.

        Args:
            pieces: ``(positions, vectors)`` in any order; a position indexes ``rows``.
            rows: the rows that were sent to be embedded (:meth:`missing_rows`).
        """
        buffers: dict[int, np.ndarray] = {}
        filled: dict[int, int] = {}
        for positions, vectors in pieces:
            positions = np.asarray(positions, dtype=np.int64)
            vectors = np.asarray(vectors, dtype=np.float32)
            if len(positions) != len(vectors) or (len(vectors) and vectors.shape[1] != self.dim):
                raise ValueError(f"index: the embedding job returned vectors of shape {vectors.shape} for "
                                 f"{len(positions)} chunks; expected width {self.dim} (is it the index's model?)")
            for pos, vec in zip(rows[positions], vectors, strict=True):
                i = int(pos) // self.part_rows
                start, stop = self.bounds(i)
                buf = buffers.setdefault(i, np.full((stop - start, self.dim), np.nan, dtype=np.float32))
                buf[int(pos) - start] = vec
                filled[i] = filled.get(i, 0) + 1
                if filled[i] == stop - start:
                    if np.isnan(buf).any():
                        raise RuntimeError(f"index: part {i} got a row twice and missed another")
                    self.save(i, buffers.pop(i))
        if self.missing():
            raise RuntimeError(f"index: the embedding job ended with part(s) {self.missing()[:5]} incomplete "
                               f"({len(self.missing())} of {self.n_parts}); run the command again to resume")

    def load(self) -> np.ndarray:
        """All vectors, ``(n_rows, dim)`` (each part's sha256 was checked when the build opened
        the folder, or taken when this run saved it)."""
        out = np.empty((self.n_rows, self.dim), dtype=np.float32)
        for i in range(self.n_parts):
            start, stop = self.bounds(i)
            out[start:stop] = np.load(self.folder / self.part_name(i))
        return out

    def remove(self) -> None:
        """The index is in place: this build's files go, and the folder when nothing else is left."""
        for p in self.folder.iterdir():
            if p.name == MARKER or re.fullmatch(r"\.?part-\d{5}\.npy(\.tmp-[\d-]+\.npy)?|\.build\.json\.tmp-[\d-]+", p.name):
                p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


__all__ = ["BUILD_FORMAT", "BuildParts", "build_dir_for", "job_key"]
