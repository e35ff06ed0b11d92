"""What a profile run left on disk, for the profile output tests."""

from __future__ import annotations

import json
from pathlib import Path


def result_lines(out: Path) -> list[dict]:
    """The records of ``out/results.jsonl``."""
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def file_tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): a folder's state before and after."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
