"""The inputs an export checks parity on and calibrates int8 with: the demo data, or yours.

By default ``searchsmith export`` compares torch and ONNX on held-out demo inputs (the
project's own corpus and questions) and calibrates int8 SmoothQuant on other demo inputs.
The demo texts are general knowledge; a bundle meant for another domain can pass there and
drift on its own texts (the int8 embedder's min cosine over 1,024 texts: 0.995 on demo texts,
0.988 on SciFact titles, sentences and abstracts, under the 0.99 parity limit). ``--parity-data FILE`` runs both on the user's data instead:

- a ``.txt`` file: one text per line (blank lines skipped);
- a ``.jsonl`` file: one object per line, either ``{"text": str}`` or
  ``{"query": str, "passages": [str, ...]}`` (a reranking group).

The reranker needs groups; the other tasks need texts (the decomposer takes them as
questions) and also take a group's query and passages as texts. The first
``ParityThresholds.heldout_texts`` texts (a quarter as many groups) are the parity inputs,
the ones after them the calibration inputs, so the two never overlap.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ConfigError

#: The largest ``--parity-data`` file read (bytes): parity runs torch and ONNX on a few hundred inputs.
MAX_PARITY_DATA_BYTES = 64 * 1024 * 1024
_FLAG = "export --parity-data"

Group = tuple[str, list[str]]


@dataclass(frozen=True)
class ParityInputs:
    """Held-out inputs of one export.

    Attributes:
        source: where they come from (recorded in the parity report).
        texts: parity texts (embedder, image text tower, citation tagger and scorer).
        groups: parity (query, passages) groups (reranker).
        questions: parity questions (decomposer).
        calibration_texts: int8 calibration texts, none of them in ``texts``.
        calibration_groups: int8 calibration groups, none of their queries in ``groups``.
    """

    source: str
    texts: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    calibration_texts: list[str] = field(default_factory=list)
    calibration_groups: list[Group] = field(default_factory=list)


# ----------------------------------------------------------------------------- demo data


def _demo() -> tuple[list[dict[str, Any]], list[str]]:
    from searchsmith.models.demo import corpus_path, qa_path

    docs = [json.loads(x) for x in corpus_path().read_text(encoding="utf-8").splitlines() if x.strip()]
    queries = [json.loads(x)["query"] for x in qa_path().read_text(encoding="utf-8").splitlines() if x.strip()]
    return docs, queries


def heldout_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of mixed length (documents, sentences, titles, questions) from the demo data."""
    docs, queries = _demo()
    pool = [d["text"] for d in docs] + [d["title"] for d in docs if d.get("title")] + queries
    pool += [s.strip() + "." for d in docs for s in d["text"].split(". ")[:2] if s.strip()]
    return random.Random(seed).sample(pool, min(n, len(pool)))


def heldout_groups(n_queries: int, per_query: int = 12, seed: int = 0) -> list[Group]:
    """(question, candidate passages) groups: the supporting passage plus random others."""
    from searchsmith.models.demo import qa_path

    docs, _ = _demo()
    by_id = {d["id"]: d["text"] for d in docs}
    rng = random.Random(seed)
    items = [json.loads(x) for x in qa_path().read_text(encoding="utf-8").splitlines() if x.strip()]
    out = []
    for item in rng.sample(items, min(n_queries, len(items))):
        gold = [by_id[i] for i in item.get("supporting", []) if i in by_id][:1]
        others = rng.sample([d["text"] for d in docs if d["text"] not in gold], per_query - len(gold))
        out.append((item["query"], gold + others))
    return out


def demo_inputs(n: int, calibration: int = 128) -> ParityInputs:
    """The default: ``n`` demo texts and questions, ``max(2, n // 4)`` demo groups of 12 for
    parity; up to ``calibration`` other demo texts and pairs (groups of 4) for int8."""
    texts = heldout_texts(n)
    groups = heldout_groups(max(2, n // 4))
    _, queries = _demo()
    questions = random.Random(0).sample(queries, min(n, len(queries)))
    seen = set(texts)
    calib_texts = [t for t in heldout_texts(10 ** 6, seed=1) if t not in seen][:calibration]
    parity_queries = {q for q, _ in groups}
    calib_groups = [g for g in heldout_groups(10 ** 6, per_query=4, seed=1) if g[0] not in parity_queries]
    return ParityInputs("searchsmith.models.demo (corpus.jsonl, qa.jsonl)", texts, groups, questions,
                        calib_texts, calib_groups[: max(1, calibration // 4)])


# ----------------------------------------------------------------------------- user data


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise ConfigError(f"{_FLAG}: {str(path)!r} is not a file; pass a .txt (one text per line) or .jsonl file")
    size = path.stat().st_size
    if size > MAX_PARITY_DATA_BYTES:
        raise ConfigError(f"{_FLAG}: {str(path)!r} is {size} bytes, the limit is {MAX_PARITY_DATA_BYTES} "
                          "(MAX_PARITY_DATA_BYTES); parity uses a few hundred inputs: pass a sample")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{_FLAG}: {str(path)!r} is not UTF-8 text (byte {exc.start}); re-encode it as UTF-8") from exc


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{_FLAG}: {where}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise ConfigError(f"{_FLAG}: {where}: empty text; remove the line or fill it")
    return value


def read_parity_data(path: Path) -> tuple[list[str], list[Group]]:
    """Texts and (query, passages) groups of a ``.txt`` or ``.jsonl`` file, in file order.

    Raises:
        ConfigError: a missing, oversized, non-UTF-8 or empty file; a JSONL line that is not an
            object with ``text`` or with ``query`` and ``passages`` (the message names the line).
    """
    path = Path(path)
    lines = _read_lines(path)
    texts: list[str] = []
    groups: list[Group] = []
    if path.suffix != ".jsonl":
        texts = [ln for ln in lines if ln.strip()]
    else:
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path.name} line {no}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{_FLAG}: {where}: not JSON ({exc.msg}); each line is one object") from exc
            if not isinstance(obj, dict) or not ({"text"} <= obj.keys() or {"query", "passages"} <= obj.keys()):
                got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
                raise ConfigError(f"{_FLAG}: {where}: expected {{\"text\": str}} or {{\"query\": str, "
                                  f"\"passages\": [str, ...]}}, got {got}")
            if "text" in obj:
                texts.append(_text(obj["text"], f"{where} field 'text'"))
                continue
            passages = obj["passages"]
            if not isinstance(passages, list) or len(passages) < 2:
                raise ConfigError(f"{_FLAG}: {where} field 'passages': expected a list of at least 2 passages "
                                  f"(a ranking needs two), got {passages!r:.80}")
            groups.append((_text(obj["query"], f"{where} field 'query'"),
                           [_text(p, f"{where} field 'passages'[{i}]") for i, p in enumerate(passages)]))
    if not texts and not groups:
        raise ConfigError(f"{_FLAG}: {str(path)!r} holds no texts; add one text per line")
    return texts, groups


def file_inputs(path: Path, task: str, n: int, calibration: int = 128) -> ParityInputs:
    """``path``'s inputs for ``task``: the first ``n`` texts (``max(2, n // 4)`` groups) for parity,
    up to ``calibration`` after them for int8 calibration.

    Raises:
        ConfigError: unreadable file (see :func:`read_parity_data`), a reranker file without
            groups, or fewer inputs than parity needs.
    """
    path = Path(path)
    texts, groups = read_parity_data(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    source = f"{path.name} (sha256 {digest[:16]})"
    if task in ("rerank", "read"):
        want = max(2, n // 4)
        if len(groups) < want:
            raise ConfigError(f"{_FLAG}: the {'reranker' if task == 'rerank' else 'reader'}'s parity needs {want} (query, passages) groups, "
                              f"{path.name} has {len(groups)}; add lines {{\"query\": ..., \"passages\": [...]}} "
                              "or lower the parity inputs (--parity-inputs)")
        return ParityInputs(source, groups=groups[:want],
                            calibration_groups=groups[want:want + max(1, calibration // 4)])
    pool = texts + [t for q, ps in groups for t in (q, *ps)]
    need = min(n, 2)
    if len(pool) < need:
        raise ConfigError(f"{_FLAG}: parity needs at least {need} texts, {path.name} has {len(pool)}")
    parity = pool[:n]
    return ParityInputs(source, texts=parity, questions=parity, calibration_texts=pool[n:n + calibration])


def parity_inputs(task: str, n: int, calibration: int = 128, path: str | Path | None = None) -> ParityInputs:
    """The demo inputs, or ``path``'s (``--parity-data``)."""
    return demo_inputs(n, calibration) if path is None else file_inputs(Path(path), task, n, calibration)


__all__ = ["MAX_PARITY_DATA_BYTES", "ParityInputs", "demo_inputs", "file_inputs", "heldout_groups", "heldout_texts",
           "parity_inputs", "read_parity_data"]
