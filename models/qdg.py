"""The query-decomposition graph (QDG): data type, validation, repair and a compact text form.

A QDG is what the decomposer returns for a question (the "decompose" format of ``searchsmith eval --help``)::

    {"type": "chain", "nodes": [{"id": "1", "text": "who founded lumen", "depends_on": []},
                                {"id": "2", "text": "when was #1 born", "depends_on": ["1"]}]}

* ``terminal``: one node; the question is searched as it is (strategy ``direct``).
* ``split``: two or more nodes depend on nothing; they are retrieved in parallel and later
  nodes may combine them (strategy ``parallel``).
* ``chain``: one root followed by nodes that depend on earlier answers (strategy ``planning``).

The type is a function of the structure (:func:`infer_type`); a declared type that disagrees
with the structure is a validation problem. ``#k`` in a node's text stands for the answer of
node ``k`` (:func:`fill_references` substitutes it once that answer is known).

Serving imports this module, so it uses the standard library only, and :func:`repair` and
:func:`parse_linear` never raise: a model's output, however broken, becomes a graph (at worst
``terminal`` with the original question).

Compact linearisation
---------------------
The default decomposer is a MiniLM bert2bert model whose vocabulary is uncased WordPiece: case
is lost and punctuation comes back spaced (``{ " type " :``, ``# 1``), so it is trained on a
form made of tokens that survive a WordPiece round trip, not on JSON. Grammar::

    linear  := TYPE ( " || " node )+
    TYPE    := "terminal" | "chain" | "split"
    node    := ID " : " TEXT [ " [ " REF ( " , " REF )* " ] " ]
    ID      := digits, numbered 1..n in order
    REF     := "# " digits          (also accepted: "#digits")
    TEXT    := words; "# k" inside it refers to node k's answer and is a dependency

The optional trailing bracket lists dependencies that the text does not mention (rare:
QDMR/MuSiQue/StrategyQA steps name every parent as ``#k``), so a node depends on the union of
its in-text references and its bracket. Example::

    chain || 1 : who founded lumen || 2 : when was # 1 born

The parser tolerates spaced or doubled separators (``| |``, ``1:``), stray ``[CLS]``/``[SEP]``
text, and an unknown or missing type word (the type is recomputed from the structure).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from searchsmith.models.text import QUERY_STOP_WORDS, RELATION_WORDS

QDGType = Literal["terminal", "chain", "split"]
QDG_TYPES: tuple[str, ...] = ("terminal", "chain", "split")

# Default cap on nodes: Break QDMR has a long tail (13 steps); serving fans out one retrieval
# per node, so a runaway generation must not become dozens of searches.
DEFAULT_MAX_NODES = 8

# "#3", "# 3", "#  3": WordPiece decodes "#3" as "# 3".
_REF = re.compile(r"#\s*(\d+)")
_SEP = re.compile(r"\s*\|\s*\|\s*")
_NODE = re.compile(r"^\s*(\d+)\s*[:.]\s*(.*)$", re.S)
_BRACKET = re.compile(r"\[\s*((?:#\s*\d+\s*,?\s*)+)\]\s*$")
_SPECIAL = re.compile(r"\[(?:CLS|SEP|PAD|UNK|MASK)\]|</?s>|<pad>", re.I)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([?.,!;:)'\"%])")
_SPACE_AFTER_OPEN = re.compile(r"([(])\s+")


@dataclass(frozen=True)
class QDGNode:
    """One sub-question.

    Attributes:
        id: Unique within the graph ("1", "2", ...).
        text: The sub-question; ``#k`` marks the answer of node ``k``.
        depends_on: Ids of the nodes whose answers this node needs.
    """

    id: str
    text: str
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class QDG:
    """A query-decomposition graph: its type and nodes (parents before children)."""

    type: QDGType
    nodes: tuple[QDGNode, ...]

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``{"type", "nodes": [{"id","text","depends_on"}]}``."""
        return {
            "type": self.type,
            "nodes": [{"id": n.id, "text": n.text, "depends_on": list(n.depends_on)}
                      for n in self.nodes],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | str) -> QDG:
        """Strictly build a graph from its JSON object (or text); raise on any problem.

        Use :func:`repair` instead for model output, which must never raise.

        Raises:
            ValueError: (the project's ValidationError when searchsmith.models.errors is
                importable) naming the field and what was expected.
        """
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise _error(f"qdg: not valid JSON ({exc.msg} at char {exc.pos})") from None
        if not isinstance(obj, Mapping):
            raise _error(f"qdg: expected an object with 'type' and 'nodes', got {type(obj).__name__}")
        kind = obj.get("type")
        if kind not in QDG_TYPES:
            raise _error(f"qdg.type: expected one of {list(QDG_TYPES)}, got {kind!r}")
        raw_nodes = obj.get("nodes")
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise _error("qdg.nodes: expected a non-empty list of {id, text, depends_on}")
        nodes = []
        for i, raw in enumerate(raw_nodes):
            where = f"qdg.nodes[{i}]"
            if not isinstance(raw, Mapping):
                raise _error(f"{where}: expected an object, got {type(raw).__name__}")
            node_id, text, deps = raw.get("id"), raw.get("text"), raw.get("depends_on", [])
            if not isinstance(node_id, (str, int)) or isinstance(node_id, bool) or str(node_id) == "":
                raise _error(f"{where}.id: expected a non-empty string, got {node_id!r}")
            if not isinstance(text, str) or not text.strip():
                raise _error(f"{where}.text: expected a non-empty string, got {text!r}")
            if not isinstance(deps, list) or not all(isinstance(d, (str, int)) for d in deps):
                raise _error(f"{where}.depends_on: expected a list of node ids, got {deps!r}")
            nodes.append(QDGNode(str(node_id), text.strip(), tuple(str(d) for d in deps)))
        graph = cls(kind, tuple(nodes))
        problems = validate(graph)
        if problems:
            raise _error("qdg: " + "; ".join(problems))
        return graph


def _error(message: str) -> Exception:
    # The project's ValidationError when available (it subclasses ValueError); serving may
    # vendor this file alone, so fall back to ValueError rather than import-fail.
    try:
        from searchsmith.models.errors import ValidationError
    except ImportError:  # pragma: no cover
        return ValueError(message)
    return ValidationError(message)


def terminal(question: str) -> QDG:
    """The one-node graph that searches ``question`` as it is."""
    return QDG("terminal", (QDGNode("1", question.strip() or question, ()),))


def infer_type(nodes: tuple[QDGNode, ...] | list[QDGNode]) -> QDGType:
    """The type implied by the structure: terminal (1 node), split (>= 2 roots), else chain."""
    if len(nodes) <= 1:
        return "terminal"
    roots = sum(1 for n in nodes if not n.depends_on)
    return "split" if roots >= 2 else "chain"


def references(text: str) -> list[str]:
    """Ids referenced as ``#k`` (or WordPiece-spaced ``# k``) in ``text``, in order, unique."""
    seen: dict[str, None] = {}
    for m in _REF.finditer(text):
        seen.setdefault(str(int(m.group(1))), None)
    return list(seen)


def _has_cycle(nodes: tuple[QDGNode, ...]) -> bool:
    deps = {n.id: [d for d in n.depends_on] for n in nodes}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    for start in deps:
        if state.get(start):
            continue
        stack = [(start, iter(deps[start]))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif nxt in deps:
                if state.get(nxt) == 1:
                    return True
                if not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, iter(deps[nxt])))
    return False


def validate(graph: QDG, max_nodes: int | None = None) -> list[str]:
    """Every problem with ``graph`` (empty list when it is well formed).

    Checks: at least one node (at most ``max_nodes`` when given), non-empty texts, unique ids,
    dependencies that exist, are not the node itself and form no cycle, in-text ``#k``
    references that are declared dependencies, and a type that matches :func:`infer_type`.
    """
    problems: list[str] = []
    if graph.type not in QDG_TYPES:
        problems.append(f"type {graph.type!r} is not one of {list(QDG_TYPES)}")
    if not graph.nodes:
        return problems + ["graph has no nodes"]
    if max_nodes is not None and len(graph.nodes) > max_nodes:
        problems.append(f"{len(graph.nodes)} nodes, the limit is {max_nodes} (max_nodes)")
    ids = [n.id for n in graph.nodes]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        problems.append(f"duplicate node ids {dup}")
    known = set(ids)
    for n in graph.nodes:
        if not n.text.strip():
            problems.append(f"node {n.id!r} has empty text")
        for d in n.depends_on:
            if d == n.id:
                problems.append(f"node {n.id!r} depends on itself")
            elif d not in known:
                problems.append(f"node {n.id!r} depends on unknown node {d!r}")
        missing = [r for r in references(n.text) if r not in n.depends_on]
        if missing:
            problems.append(f"node {n.id!r} refers to #{', #'.join(missing)} without depending on it")
    if _has_cycle(graph.nodes):
        problems.append("dependencies form a cycle")
    if not problems and graph.type != infer_type(graph.nodes):
        problems.append(f"type {graph.type!r} does not match the structure "
                        f"({infer_type(graph.nodes)!r})")
    return problems


def _tidy(text: str) -> str:
    """Collapse whitespace, ``# 1`` -> ``#1``, and the spaces WordPiece puts before punctuation."""
    text = _SPECIAL.sub(" ", text)
    text = _REF.sub(lambda m: f"#{int(m.group(1))}", text)
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _SPACE_AFTER_OPEN.sub(r"\1", text).strip()


def _nodes_from_obj(obj: Any) -> list[tuple[str, str, list[str]]] | None:
    """(id, text, deps) triples from a JSON-like object, or None when it has no usable nodes."""
    if isinstance(obj, QDG):
        return [(n.id, n.text, list(n.depends_on)) for n in obj.nodes]
    if isinstance(obj, list):
        obj = {"nodes": obj}
    if not isinstance(obj, Mapping):
        return None
    raw_nodes = obj.get("nodes")
    if not isinstance(raw_nodes, list):
        return None
    out = []
    for i, raw in enumerate(raw_nodes):
        if isinstance(raw, str):
            out.append((str(i + 1), raw, []))
            continue
        if not isinstance(raw, Mapping):
            continue
        text = raw.get("text", raw.get("question"))
        if not isinstance(text, str):
            continue
        node_id = raw.get("id")
        node_id = str(node_id) if isinstance(node_id, (str, int)) and not isinstance(node_id, bool) else ""
        deps = raw.get("depends_on", [])
        if not isinstance(deps, (list, tuple)):
            deps = [deps]
        out.append((node_id, text, [str(d) for d in deps if isinstance(d, (str, int))]))
    return out


def _parse_linear_nodes(text: str) -> tuple[str | None, list[tuple[str, str, list[str]]], list[str]]:
    """Split a linearised graph into (declared type, node triples, format problems)."""
    problems: list[str] = []
    parts = [p for p in _SEP.split(_SPECIAL.sub(" ", text).strip()) if p.strip()]
    if not parts:
        return None, [], ["empty output"]
    head = parts[0].strip().lower()
    declared = head if head in QDG_TYPES else None
    if declared is None:
        problems.append(f"first field {head[:30]!r} is not a type")
        if _NODE.match(parts[0]) is None:
            parts = parts[1:]
    else:
        parts = parts[1:]
    nodes: list[tuple[str, str, list[str]]] = []
    for k, part in enumerate(parts):
        m = _NODE.match(part)
        if m is None:
            problems.append(f"field {k + 2} {part.strip()[:30]!r} has no 'ID :' prefix")
            node_id, body = "", part
        else:
            node_id, body = str(int(m.group(1))), m.group(2)
        deps: list[str] = []
        b = _BRACKET.search(body)
        if b is not None:
            deps = references(b.group(1))
            body = body[: b.start()]
        deps = references(body) + [d for d in deps if d not in references(body)]
        nodes.append((node_id, body, deps))
    return declared, nodes, problems


def repair(obj_or_text: Any, original_question: str, max_nodes: int = DEFAULT_MAX_NODES) -> QDG:
    """Turn anything (a QDG, a JSON object or text, a linearised graph, garbage) into a valid QDG.

    Never raises. Steps: read nodes; drop empty texts and exact duplicates (their dependants
    are redirected to the first copy); give missing or duplicate ids fresh ones; drop unknown
    and self dependencies; break cycles by dropping the dependencies that point forward in the
    given order; order parents first; keep at most ``max_nodes``; renumber 1..n (rewriting
    ``#k`` in texts); recompute the type from the structure. Falls back to
    ``terminal(original_question)`` when no node survives.

    Args:
        obj_or_text: Model output or any graph-like value.
        original_question: The question being decomposed (the fallback node).
        max_nodes: Cap on nodes (later nodes are dropped).
    """
    try:
        return _repair(obj_or_text, original_question, max(1, int(max_nodes)))
    except Exception:  # noqa: BLE001 - the contract is "never raises" (serving path)
        return terminal(str(original_question))


def _repair(obj: Any, question: str, max_nodes: int) -> QDG:
    triples: list[tuple[str, str, list[str]]] | None = None
    if isinstance(obj, (bytes, bytearray)):
        obj = obj.decode("utf-8", "replace")
    if isinstance(obj, str):
        stripped = obj.strip()
        if stripped.startswith(("{", "[")):
            # Undo WordPiece spacing inside JSON before trying to parse it.
            candidate = re.sub(r'"\s+([^"]*?)\s+"', lambda m: '"' + m.group(1) + '"', stripped)
            for attempt in (stripped, candidate):
                try:
                    triples = _nodes_from_obj(json.loads(attempt))
                except (json.JSONDecodeError, RecursionError):
                    continue
                if triples:
                    break
        if not triples:
            _, triples, _ = _parse_linear_nodes(stripped)
    else:
        triples = _nodes_from_obj(obj)
    if not triples:
        return terminal(question)

    # 1. Clean texts, drop empties; collapse duplicate texts onto their first copy.
    alias: dict[str, str] = {}  # old id -> kept old id
    kept: list[list[Any]] = []  # [old_id, text, deps]
    by_text: dict[str, str] = {}
    used_ids: set[str] = set()
    for old_id, text, deps in triples:
        clean = _tidy(str(text))
        if not clean:
            continue
        if not old_id or old_id in used_ids:
            old_id = f"_{len(kept) + 1}_{len(used_ids)}"
        used_ids.add(old_id)
        key = clean.lower()
        if key in by_text:
            alias[old_id] = by_text[key]
            continue
        by_text[key] = old_id
        alias[old_id] = old_id
        refs = references(clean)
        kept.append([old_id, clean, list(dict.fromkeys([*refs, *[str(d) for d in deps]]))])
    if not kept:
        return terminal(question)

    # 2. Resolve dependencies: unknown and self dropped; cycles broken by keeping only
    #    dependencies on nodes that come earlier in the given order when a cycle exists.
    position = {row[0]: i for i, row in enumerate(kept)}
    for row in kept:
        row[2] = list(dict.fromkeys(alias[d] for d in row[2] if d in alias))
        row[2] = [d for d in row[2] if d != row[0] and d in position]
    probe = tuple(QDGNode(r[0], r[1], tuple(r[2])) for r in kept)
    if _has_cycle(probe):
        for row in kept:
            row[2] = [d for d in row[2] if position[d] < position[row[0]]]

    # 3. Order parents first (stable topological sort), cap, renumber.
    order: list[list[Any]] = []
    placed: set[str] = set()
    pending = list(kept)
    while pending:
        ready = next((r for r in pending if all(d in placed for d in r[2])), None)
        if ready is None:  # cannot happen after cycle breaking; never loop forever anyway
            ready = pending[0]
            ready[2] = [d for d in ready[2] if d in placed]
        order.append(ready)
        placed.add(ready[0])
        pending.remove(ready)
    order = order[:max_nodes]
    new_id = {row[0]: str(i + 1) for i, row in enumerate(order)}

    def rewrite_refs(text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            old = alias.get(str(int(m.group(1))), str(int(m.group(1))))
            return f"#{new_id[old]}" if old in new_id else ""

        return " ".join(_REF.sub(sub, text).split())

    nodes = []
    for row in order:
        me = int(new_id[row[0]])
        text = rewrite_refs(row[1]) or row[1]
        # "#k" naming the node itself or a later one is not a reference (Break has titles like
        # "Computer Geek #1"): keep the number, drop the marker, so validate() stays clean.
        text = _REF.sub(lambda m, me=me: m.group(0) if int(m.group(1)) < me else m.group(1), text)
        deps = [new_id[d] for d in row[2] if d in new_id]
        deps = [d for d in dict.fromkeys([*references(text), *deps]) if int(d) < me]
        nodes.append(QDGNode(new_id[row[0]], text, tuple(deps)))
    nodes_t = tuple(nodes)
    return QDG(infer_type(nodes_t), nodes_t)


def from_qdmr(steps: list[str], step_dependencies: list[list[int]] | None = None,
              max_nodes: int | None = None) -> QDG:
    """A QDG from Break/QDMR steps, where ``#k`` (1-based) is the answer of step ``k``.

    ``step_dependencies`` (1-based step indices, as in ../shared/data) is merged with the
    references found in the text, so either alone is enough. Never raises; a step list that
    is empty gives an empty-question terminal graph.
    """
    nodes = []
    for i, step in enumerate(steps):
        deps = [str(d) for d in (step_dependencies[i] if step_dependencies and i < len(step_dependencies)
                                  else [])]
        nodes.append({"id": str(i + 1), "text": str(step), "depends_on": deps})
    cap = max_nodes if max_nodes is not None else max(1, len(nodes))
    return repair({"nodes": nodes}, " ".join(str(s) for s in steps[:1]), max_nodes=cap)


def linearize(graph: QDG) -> str:
    """The compact text form (grammar in the module docstring)."""
    fields = [graph.type]
    for n in graph.nodes:
        text = _REF.sub(lambda m: f"# {int(m.group(1))}", " ".join(n.text.split()))
        extra = [d for d in n.depends_on if d not in references(n.text)]
        if extra:
            text += " [ " + " , ".join(f"# {d}" for d in extra) + " ]"
        fields.append(f"{n.id} : {text}")
    return " || ".join(fields)


def parse_linear(text: str, original_question: str,
                 max_nodes: int = DEFAULT_MAX_NODES) -> tuple[QDG, bool]:
    """Parse a (possibly WordPiece-spaced) linearised graph; never raises.

    Returns:
        ``(graph, valid)``: ``valid`` is True when the text was well formed as it stood (a
        known type word that matches the structure, ids 1..n in order, dependencies on earlier
        nodes only, at most ``max_nodes`` nodes, no duplicates); otherwise the graph is the
        :func:`repair` of what could be read, falling back to ``terminal``.
    """
    try:
        declared, triples, problems = _parse_linear_nodes(str(text))
        if not triples:
            return terminal(original_question), False
        nodes = tuple(QDGNode(i, _tidy(t), tuple(d)) for i, t, d in triples)
        graph = QDG(declared or "terminal", nodes)  # type: ignore[arg-type]
        problems += validate(graph, max_nodes=max_nodes)
        if [n.id for n in nodes] != [str(i + 1) for i in range(len(nodes))]:
            problems.append("ids are not 1..n in order")
        if any(int(d) >= int(n.id) for n in nodes if n.id.isdigit() for d in n.depends_on
               if d.isdigit()):
            problems.append("a node depends on a later node")
        if not problems:
            return graph, True
        return repair(graph, original_question, max_nodes=max_nodes), False
    except Exception:  # noqa: BLE001 - never raises (serving path)
        return terminal(str(original_question)), False


def fill_references(text: str, answers: Mapping[str, str]) -> str:
    """Replace ``#k`` (or ``# k``) with ``answers["k"]``; unknown references are left as they are.

    Used by the planning (chain) strategy once a parent node has been answered.
    """
    def sub(m: re.Match[str]) -> str:
        key = str(int(m.group(1)))
        return str(answers[key]) if key in answers else m.group(0)

    return _REF.sub(sub, text)


_WORD = re.compile(r"[\w'’&.-]+")
_ARTICLES = frozenset(("a", "an", "the"))
_ASKED_BY = re.compile(r"^\s*(?:which|what|who|whom|whose)\s+", re.I)


def described(text: str) -> str:
    """A step's text as it stands in its children's place when they are filled with words,
    not answers: a phrase as it is ("the company that makes Beacon"), a question without its
    question word and mark ("Which class implements Lumen eviction?" -> "class implements Lumen
    eviction"), so that "Where are the tests of #1?" is searched as "Where are the tests of class
    implements Lumen eviction?"."""
    body = _ASKED_BY.sub("", text.strip()).rstrip(" ?")
    return body or text.strip()


def names_itself(text: str) -> bool:
    """Whether a step only names what it refers to: a noun phrase with no relation in it.

    Break's first steps are often a plain ``select`` of something the question names ("return
    the Lumen Cloud outage; return when did #1 happen"): ``#1`` is that outage, and an answer
    looked up for the phrase ("July 2024", the date its best sentence adds) is not. A step
    that looks something up holds a relation: a word of :data:`RELATION_WORDS` ("the director
    *of* Titanic", "the team *that* plays ..."), a possessive ("Australia's leader"), a regular
    past tense ("released a song"), a participle inside it ("province *containing* ..."), or an
    article after its first word ("Quarry 3.0 cut *the* latency"). Questions ("?") and steps that refer to other steps (``#k``) never only name.
    """
    if "?" in text or _REF.search(text):
        return False
    words = _WORD.findall(text)
    if not words:
        return False
    for i, word in enumerate(words):
        low = word.lower().strip(".-")
        if low in RELATION_WORDS or (i and low in _ARTICLES):
            return False
        if low.endswith(("'s", "’s", "'", "’")):
            return False
        if word.islower() and len(low) > 4 and low.endswith("ed") and not low.endswith("eed"):
            return False
        if word.islower() and 0 < i < len(words) - 1 and len(low) > 5 and low.endswith("ing"):
            return False  # "province containing Bandar-e Gaz County", not "flowering plants"
    return True


# The words of Break's operator steps that compare or count what their references return
# ("which is first of #1, #2", "which is true of #1, #2", "number of #1", "the difference of
# #1 and #2"): a step made of these and stop words asks nothing a search could find.
OPERATOR_WORDS = frozenset("""
true false number sum difference total count average ratio percent percentage same
first last earlier earliest later latest older oldest younger youngest newer newest
larger largest smaller smallest bigger biggest higher highest lower lowest longer longest
shorter shortest greater greatest less least fewer fewest further farther closer nearer
""".split())
_ASKS_NOTHING = QUERY_STOP_WORDS | OPERATOR_WORDS


def asks_nothing(text: str) -> bool:
    """Whether a step has no word of its own once its ``#k`` are taken out ("of #1",
    "Which #2", "Who #2?", "#2 and #3"): the decomposer lost the question's words, and the
    step, filled, asks for nothing but its parents' answers. So does a step that only
    compares or counts them (Break's operator steps, "which is first of #1, #2", "number of
    #1": :data:`OPERATOR_WORDS`)."""
    words = _WORD.findall(_REF.sub(" ", text))
    return not any(w.lower().strip(".-'’") not in _ASKS_NOTHING for w in words if w.strip(".-'’"))


__all__ = [
    "DEFAULT_MAX_NODES",
    "OPERATOR_WORDS",
    "QDG",
    "QDGNode",
    "QDG_TYPES",
    "asks_nothing",
    "described",
    "fill_references",
    "from_qdmr",
    "infer_type",
    "linearize",
    "names_itself",
    "parse_linear",
    "references",
    "repair",
    "terminal",
    "validate",
]
