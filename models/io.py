"""Atomic file and folder writes, checksums: the one place checkpoints, indexes and
bundles are written through, so that a crash never leaves a half-written artifact."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.errors import ConfigError, ValidationError

_PROCESS_DIRS: list[Path] = []  # process_temp_dir's folders, deleted at exit


def process_temp_dir(prefix: str) -> Path:
    """A new temporary folder that lives as long as this process (a cache of traced graphs,
    models built once per process); :func:`release_process_temp_dirs` deletes it at exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _PROCESS_DIRS.append(path)
    return path


def release_process_temp_dirs() -> None:
    """Delete every :func:`process_temp_dir` folder of this process.

    Registered with atexit. A process that leaves through ``os._exit`` skips atexit and must
    call it first (the test suite does, tests/conftest.py: before, each run left the traced
    graphs of its exports in the temporary folder, megabytes each, and 22 GB had piled up).
    """
    while _PROCESS_DIRS:
        shutil.rmtree(_PROCESS_DIRS.pop(), ignore_errors=True)


atexit.register(release_process_temp_dirs)


def plain_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file in this process: ``0o666 & ~umask``.

    Read from ``/proc/self/status`` where the kernel says it (Linux 4.7+); elsewhere by setting
    the umask and putting it back, which another thread creating a file at that instant would see.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            umask = next((int(line.split()[1], 8) for line in fh if line.startswith("Umask:")), None)
    except OSError:
        umask = None
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def give_plain_modes(folder: str | os.PathLike) -> list[Path]:
    """Give every file under ``folder`` the mode a plain ``open()`` would (:func:`plain_file_mode`).

    For a folder this process has just written with a library that makes its own modes:
    safetensors writes ``model.safetensors`` as 0600 whatever the umask, so a run shared by a
    team had every file readable by the team but its weights. Call it on the temporary folder
    a save wrote into, before the folder is moved into place and before a user's own files
    are carried into it: only what the project wrote is changed. Links are left alone.

    Returns:
        The files whose mode changed.
    """
    mode = plain_file_mode()
    changed = []
    for p in sorted(Path(folder).rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        if p.stat().st_mode & 0o7777 != mode:
            os.chmod(p, mode)
            changed.append(p)
    return changed


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# The file at the top of a bundle's or an index's folder that lists the folder's other files
MANIFEST = "manifest.json"


def files_sha256(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder``, by its path in it, in sorted order: what a
    bundle's or an index's manifest lists as its ``files``. Only the top-level :data:`MANIFEST`
    is left out (it cannot hold its own sha256); a file of that name deeper down (a bundle's
    ``torch/manifest.json``) is one of the folder's files like any other."""
    return {str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p != folder / MANIFEST}


def json_object_problem(path: Path) -> str | None:
    """What keeps the file at ``path`` from being read as a JSON object, to follow its name in a
    message ("is not valid JSON (Expecting ',' delimiter: line 3 column 5 (char 31))"); None when
    it is one, or is absent. The decoder's message carries the line and column to repair."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        return f"is not valid JSON ({exc})"
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text ({exc})"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, not an object"
    return None


def read_json_object(path: Path, what: str, *, fix: str = "", error: type[Exception] = ConfigError
                     ) -> dict[str, Any]:
    """The JSON object in ``path`` (UTF-8).

    Args:
        what: the caller or setting, first in every message (``"bundle"``, ``"--checkpoint"``).
        fix: what to do about a damaged file, appended to the message.
        error: the exception class to raise (``BundleError`` for bundles, ``ConfigError`` for
            settings and run folders).

    Raises:
        ``error``: the file is not UTF-8, not valid JSON, or not a JSON object.
    """
    tail = f"; {fix}" if fix else ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what}: {path} is not valid JSON ({exc}){tail}") from None
    if not isinstance(data, dict):
        raise error(f"{what}: {path} must hold a JSON object, not {type(data).__name__}{tail}")
    return data


_TEMP_SERIAL = itertools.count()  # next() is atomic under the GIL: one name per call


def temp_file_beside(path: Path, suffix: str = "") -> Path:
    """A temporary name next to ``path``, unique to this call: ``.NAME.tmp-PID-N[SUFFIX]``.

    Two threads writing the same file at once (a server saving state from concurrent requests)
    each write their own temporary file, and the last ``os.replace`` wins whole.
    """
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{next(_TEMP_SERIAL)}{suffix}")


def write_jsonl_atomic(path: str | Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write records as JSON lines through a temporary file (a reader never sees half a file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_beside(p)
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    tmp = temp_file_beside(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and ``os.replace``."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def check_parents_are_folders(path: str | os.PathLike, what: str, error: type[Exception] = ValidationError) -> None:
    """Refuse, before any work, an output path that cannot be written: one inside a file
    ("notes.txt/index"), where making its folders would end in FileExistsError or
    NotADirectoryError, or one whose nearest existing folder (the path itself when it is a
    folder) this process may not write in (permissions, a read-only file system: an OSError
    after the work, before).

    Raises:
        ``error`` (ValidationError): naming the path, the folder and the fix.
    """
    path = Path(path)
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise error(f"{what}: cannot write in {str(path)!r} (no write permission, or a read-only file system); "
                    "nothing was written. Choose a folder you can write in")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise error(f"{what}: {str(path)!r} is inside {str(parent)!r}, which is a file, not a folder; "
                            "nothing was written. Choose a path whose folders are folders")
            if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
                raise error(f"{what}: cannot create {str(path)!r}: no write permission in {str(parent)!r}, or a "
                            "read-only file system; nothing was written. Choose a folder you can write in")
            return


def being_written(target: str | os.PathLike) -> bool:
    """Whether another process holds :func:`exclusive`'s lock of ``target`` now (a training run
    writing its folder). Reads only: a reader of ``target`` (an export of a run) asks this
    instead of taking the lock, which would need write access beside ``target``."""
    target = Path(target).absolute()
    lock = target.with_name(f".{target.name}.lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:  # no lock file: nobody writes it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a shared lock taken here
    return False


@contextlib.contextmanager
def exclusive(target: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold the lock of ``target`` (``.NAME.lock`` beside it) while writing it; a second
    process writing the same target is refused at once instead of mixing its files in.

    The lock is the kernel's (``flock``): a process that dies releases it (its empty lock file
    stays until the next write of the target removes it). The holder removes the lock file
    before it lets go, so nothing is left beside the user's path after a write, refused or not.
    Since a lock file can thus disappear, the file locked is checked to still be the one at
    its path (a waiter that locked a removed file tries again).

    Raises:
        ConfigError: another process holds it.
    """
    target = Path(target).absolute()  # "." has no name to put a lock file beside
    lock = target.with_name(f".{target.name}.lock")
    check_parents_are_folders(target, what)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"{what}: {str(target)!r} is being written by another searchsmith process; wait for "
                              "it to finish (or stop it), then run again") from None
        try:
            current = os.stat(lock)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            break
        os.close(fd)  # we locked a file its last holder removed: lock the one at the path now
    try:
        yield
    finally:
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                lock.unlink()  # while still held: a waiter on this file then sees it gone
        except FileNotFoundError:
            pass
        os.close(fd)  # releases the lock


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's counts: it may not be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_temps(folder: Path, pattern: str, marker: str = ".tmp-") -> list[Path]:
    """Remove the temporary files and folders ``folder/pattern`` of processes that are gone
    (killed while writing: SIGKILL runs no clean-up); a live process's are left alone.

    Args:
        pattern: a glob of the temporaries' names (``.bundle.tmp-*``).
        marker: the text the writer's PID follows in the name (the PID is the digits after
            its last occurrence).

    Returns:
        What was removed.
    """
    removed = []
    for p in Path(folder).glob(pattern) if Path(folder).is_dir() else ():
        digits = re.match(r"\d+", p.name.rsplit(marker, 1)[-1])
        if digits and int(digits.group()) != os.getpid() and not process_alive(int(digits.group())):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def temp_dir_beside(final: Path) -> Path:
    """A fresh hidden folder next to ``final`` (same file system, so a rename can swap it in);
    those a killed writer of ``final`` left are removed first."""
    final = Path(final).absolute()  # "." has no name to put a folder beside
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(final.parent, f".{glob.escape(final.name)}.tmp-*")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{time.time_ns()}")
    tmp.mkdir()
    return tmp


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final`` by renames; the old one is removed after.

    Between the two renames ``final`` is briefly absent, never half-written.
    """
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}-{time.time_ns()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def replace_dir_keeping(tmp: Path, final: Path) -> list[str]:
    """:func:`replace_dir` that deletes nothing it does not write again: the files of the old
    ``final`` that ``tmp`` does not hold (a user's notes put in a run's ``model/``) are moved
    into ``tmp`` first, so a rewrite replaces what it writes and keeps the rest.

    Returns:
        The relative paths carried over (for the caller to say so).

    Raises:
        ConfigError: a file of the old folder stands where ``tmp`` holds a file of the same
            path's folder (``notes`` a file in one, a folder in the other); nothing was moved
            or replaced.
    """
    tmp, final = Path(tmp), Path(final)
    carried: list[tuple[Path, Path]] = []
    if final.is_dir() and not final.is_symlink():
        for p in sorted(final.rglob("*")):
            if p.is_dir() and not p.is_symlink():
                continue
            rel = p.relative_to(final)
            dest = tmp / rel
            if dest.exists() or dest.is_symlink():
                continue  # written again: the new one replaces it
            blocked = next((q for q in dest.parents if q != tmp and q.exists() and not q.is_dir()), None)
            if blocked is not None:
                raise ConfigError(f"{final}: holds {rel}, which the new {final.name} cannot keep ({blocked.name} is "
                                  f"a file there); move {p} out, then run again")
            carried.append((p, dest))
    for src, dest in carried:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)  # tmp is beside final: the same file system
    replace_dir(tmp, final)
    return [str(dest.relative_to(tmp)) for _, dest in carried]


def remove_written(folder: Path, written: Iterable[str]) -> list[str]:
    """Delete the files ``written`` (relative paths) of ``folder``, and the folder when that
    empties it; anything else in it (a user's file) stays, with the folder.

    Returns:
        The relative paths of what was left (empty when the folder is gone).
    """
    folder = Path(folder)
    for name in written:
        (folder / name).unlink(missing_ok=True)
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())
    if not left:
        shutil.rmtree(folder, ignore_errors=True)  # empty sub-folders only
    return left


# -- folders a command replaces -----------------------------------------------------------------
def files_matching(folder: Path, pattern: re.Pattern[str]) -> set[str]:
    """The files (and links) under ``folder`` whose path in it, written with ``/``, ``pattern``
    matches whole: what tells a folder the project wrote by its layout alone when its
    manifest.json is unreadable (an index's, a bundle's; :func:`check_replaceable`'s ``listed``)."""
    files = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    return {f for f in files if pattern.fullmatch(f)}


def check_replaceable(out: str | os.PathLike, *, label: str, kind: str, listed: Callable[[Path], set[str] | None],
                      replace: bool, replace_hint: str | Callable[[], str],
                      file_hint: Callable[[Path], str] | None = None) -> None:
    """Refuse an output folder whose replacement would lose something searchsmith did not write.

    Accepted: a path that does not exist, an empty folder, and (only with ``replace``) a folder
    searchsmith wrote (``listed(out)`` gives the files its manifest lists) that holds nothing else.

    Args:
        out: the folder a command is about to build and swap in (:func:`replace_dir`).
        label: the command and flag, for messages (``"index --out"``).
        kind: what the folder holds when searchsmith wrote it (``"index"``, ``"bundle"``).
        listed: the relative paths of the files the folder's manifest lists (the manifest
            included), or None when it is not a valid searchsmith folder of this kind.
        replace: whether replacing a folder of this kind was asked for (or is the command's way).
        replace_hint: what is there and the fix when ``replace`` is False (a callable is
            called after ``listed``, so it may describe the manifest ``listed`` read).
        file_hint: what to say when ``out`` is a file (default: use a new folder).

    Raises:
        ValidationError: naming what is there and the fix; nothing is touched.
    """

    out = Path(out)
    check_parents_are_folders(out, label)
    if out.exists() and Path.cwd().resolve().is_relative_to(out.resolve()):
        raise ValidationError(f"{label} {out}: is the current folder, or holds it; the {kind} is built beside it "
                              f"and swapped in, which would move the folder you are in. Give a new folder, e.g. "
                              f"{label.split()[-1]} {kind}")
    if out.is_symlink():
        raise ValidationError(f"{label} {out}: is a symbolic link; nothing was replaced. Give the folder it "
                              f"points to ({out.resolve()}) or a new folder")
    if not out.exists():
        return
    if not out.is_dir():
        hint = file_hint(out) if file_hint else f"is a file; nothing was replaced. Give a new folder, e.g. {out}.d"
        raise ValidationError(f"{label} {out}: {hint}")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    ours = listed(out)
    if ours is None:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValidationError(
            f"{label} {out}: is a folder that is not a searchsmith {kind} (no valid manifest.json; it holds "
            f"{shown}); nothing was replaced. Use a new or empty folder, e.g. {label.split()[-1]} {out / kind}")
    if not replace:
        raise ValidationError(f"{label} {out}: {replace_hint() if callable(replace_hint) else replace_hint}")
    foreign = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                     if (p.is_file() or p.is_symlink()) and str(p.relative_to(out)) not in ours)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ValidationError(
            f"{label} {out}: holds {len(foreign)} file(s) the {kind} did not write ({shown}); replacing the "
            "whole folder would delete them, so nothing was replaced. Move them out first")


# -- files a user may have edited -------------------------------------------------------------
WRITTEN_RECORD = ".searchsmith-written.json"

FileState = Literal["absent", "ours", "edited", "foreign"]


class WrittenFiles:
    """The sha256 of each file searchsmith wrote in a folder, kept in one JSON file there: what
    tells a file still as searchsmith wrote it (``ours``: it may be replaced) from one its user
    edited since (``edited``) or wrote (``foreign``).

    The one record behind :func:`write_text_if_ours` (``.searchsmith-written.json``, a flat
    ``{file: sha256}``) and the make-*-set marker (``.searchsmith-set``, the same under
    ``files`` beside ``written_by``). Files are named relative to the record's folder.

    Attributes:
        record: the JSON file.
        hashes: file -> sha256; None when the record exists but holds no checksums (unreadable,
            or written by an older searchsmith): then no file counts as ours.
        header: the other keys written with ``files`` (None: the flat layout).
    """

    def __init__(self, record: Path, hashes: dict[str, str] | None, header: dict[str, str] | None = None) -> None:
        self.record = record
        self.hashes = hashes
        self.header = header

    @classmethod
    def read(cls, record: str | os.PathLike, header: dict[str, str] | None = None) -> WrittenFiles:
        """The record at ``record``: empty when absent; ``hashes`` None when unreadable or
        without checksums. ``header`` given: the ``{**header, "files": {...}}`` layout."""
        record = Path(record)
        if not record.exists():
            return cls(record, {}, header)
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return cls(record, None, header)
        files = (data.get("files") if header is not None else data) if isinstance(data, dict) else None
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            return cls(record, None, header)
        return cls(record, dict(files), header)

    def key(self, path: Path) -> str:
        """``path``'s name in the record: relative to the record's folder (its own link, if it
        is one, not followed), else absolute."""
        full = path.parent.resolve() / path.name
        try:
            return str(full.relative_to(self.record.parent.resolve()))
        except ValueError:
            return str(full)

    def state(self, path: Path) -> FileState:
        """``absent``; ``ours`` (a plain file whose sha256 the record holds); ``edited`` (the
        record names it, but it changed, or is now a link or a folder); ``foreign``."""
        if not path.exists() and not path.is_symlink():
            return "absent"
        want = (self.hashes or {}).get(self.key(path))
        if want is None:
            return "foreign"
        if path.is_symlink() or not path.is_file():
            return "edited"
        return "ours" if sha256_file(path) == want else "edited"

    def add(self, path: Path, digest: str) -> None:
        """Record ``path`` as written with content ``digest``."""
        self.hashes = {**(self.hashes or {}), self.key(path): digest}

    def keep_only_present(self) -> None:
        """Forget the files no longer there (a later write records the rest)."""
        folder = self.record.parent
        self.hashes = {k: v for k, v in (self.hashes or {}).items() if (folder / k).is_file()}

    def save(self) -> None:
        """Write the record (atomically)."""
        hashes = dict(sorted((self.hashes or {}).items()))
        if self.header is None:
            write_json_atomic(self.record, hashes)
        else:
            write_text_atomic(self.record, json.dumps({**self.header, "files": hashes}, indent=1, sort_keys=True)
                              + "\n")


@dataclass(frozen=True)
class Written:
    """Where :func:`write_text_if_ours` put the text.

    Attributes:
        path: the file that now holds the text.
        kept: the file left untouched because it was not ours (edited, or written by
            someone else); ``path`` is then a ``.new`` file beside it. None otherwise.
        edited: ``kept`` is a file we wrote that its user edited since (not someone else's).
    """

    path: Path
    kept: Path | None = None
    edited: bool = False


def write_text_if_ours(path: str | os.PathLike, text: str, *, record: str | os.PathLike | None = None) -> Written:
    """Write ``text`` to ``path`` only if what is there now is what we last wrote there.

    A file the project wrote may be edited by its user (a serve.yaml gains ``api_keys``);
    regenerating it must not silently undo that. The sha256 of every file written here is
    kept in ``record`` (default: ``WRITTEN_RECORD`` beside ``path``; :class:`WrittenFiles`).
    ``path`` is (re)written when it is absent, unchanged since we wrote it, or already holds
    ``text``; otherwise it is kept and the text goes to ``PATH.new`` (``PATH.new.2``, ... when
    a ``.new`` file is itself not ours).

    Returns:
        Where the text went, and the file kept if any.
    """
    path = Path(path)
    files = WrittenFiles.read(record if record is not None else path.parent / WRITTEN_RECORD)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()

    def writable(p: Path) -> bool:
        state = files.state(p)
        return state in ("absent", "ours") or (p.is_file() and not p.is_symlink() and sha256_file(p) == digest)

    target, kept, edited = path, None, False
    if not writable(path):
        kept = path
        edited = files.state(path) == "edited"
        candidates = [path.with_name(f"{path.name}.new")] + [path.with_name(f"{path.name}.new.{i}") for i in range(2, 100)]
        target = next((c for c in candidates if writable(c)), None)
        if target is None:
            raise ConfigError(f"{path}: it was edited, and {path.name}.new ... {path.name}.new.99 are all "
                              "files searchsmith did not write; remove some of them")
    if not target.is_file() or sha256_file(target) != digest:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, text)
    files.add(target, digest)
    files.save()
    return Written(target, kept, edited)
