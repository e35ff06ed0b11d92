"""Decomposition as nested spans of the question: the copy-based form of a QDG.

Most sub-questions of the public decomposition sets are *spans of the question*, with the
span of an earlier step replaced by its reference (Break, HotpotQA's high-level QDMR)::

    Where was [the home of [the author of Leviathan]]?
    1: the author of Leviathan    2: the home of #1    3: Where was #2?

Such a graph is a tree of nested, non-crossing spans, and is written down by giving every
word of the question its **depth**: the number of step spans around it (0 = only the last
step, the question itself). The decomposer's ``tagger`` architecture predicts these depths
with one token-classification pass over the question (no decoder), and :func:`graph_from_depths`
reads the graph back:

* a maximal run of words deeper than ``d`` inside a step of depth ``d`` is a child step; the
  parent's text has ``#k`` (the child's id) in its place;
* steps are numbered children first, left to right, so references always point back;
* a step with no words of its own and one child is that child; one with several children
  and no words of its own joins them (``#1 and #2``);
* sibling children of the last step (a comparison of two things) make a ``split`` graph, a
  nest of steps a ``chain``, no step at all ``terminal``: the type follows the structure.

Every depth sequence gives a valid graph (:func:`searchsmith.models.qdg.validate`): the
tagger cannot produce a malformed decomposition. :func:`depths_from_graph` goes the other
way for training: it aligns a gold graph's steps to spans of the question (each step to the
span of highest token F1 that contains its children's spans) and returns ``None`` when the
steps cannot be nested spans (they cross, or a child is referenced twice); such examples
are left out of the tagger's training.

Standard library only (serving imports it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from searchsmith.models.qdg import QDG, QDGNode, infer_type, terminal
from searchsmith.models.text import token_f1

_WORD = re.compile(r"\w+|[^\w\s]")
_REF = re.compile(r"#\s*(\d+)")
_CONTENT = re.compile(r"\w")
# "#2 ?" -> "#2?": the space put between a reference and the punctuation that followed its span
_SPACE_AFTER_REF = re.compile(r"(#\d+) ([?.,!;:)%])")
# words of a step's own text that carry no content: a step made only of these is no step
_JOIN = " and "


def question_words(question: str) -> list[tuple[int, int]]:
    """Character spans of the question's words (runs of word characters, single punctuation)."""
    return [m.span() for m in _WORD.finditer(question)]


def _literal(text: str) -> str:
    # "#1" written in a question is a title ("Computer Geek #1"), not a reference
    return _REF.sub(lambda m: m.group(1), text)


def _joiner(question: str, words: Sequence[tuple[int, int]], i: int) -> bool:
    """Whether word ``i`` is punctuation inside a compound written without spaces: the ``.`` of
    ``snapshot.interval_s``, the ``/`` of ``lumen/evict.py``, the ``-`` of ``Spider-Man``."""
    (_, pe), (s, e), (ns, _) = words[i - 1], words[i], words[i + 1]
    return (pe == s and e == ns and not _CONTENT.search(question[s:e])
            and bool(_CONTENT.search(question[pe - 1])) and bool(_CONTENT.search(question[ns])))


def graph_from_depths(question: str, depths: Sequence[int], max_nodes: int = 8,
                      drops: Sequence[bool] | None = None, adds: Sequence[str] | None = None) -> QDG:
    """The QDG that per-word ``depths`` describe (module docstring); never raises.

    Args:
        question: the question.
        depths: one depth (>= 0) per word of :func:`question_words`; missing words (past a
            model's input limit) count as depth 0, extra values are ignored.
        max_nodes: largest graph; a deeper or wider tree keeps ``terminal``.
        drops: per word, True when the word is left out of its step's text (the tagger's
            delete tags: "How many", "did", a final "?"). The graph's structure is the same
            with or without them; a step whose words would all be dropped keeps them, and the
            punctuation inside a compound whose neighbours are kept stays ("snapshot.interval_s",
            never "snapshot interval_s": an identifier cut in two no longer finds its page).
        adds: per word, a phrase ("" none) written into its step's text just before the word
            (in its place when the word is dropped): the tagger's add tags, "number of" for
            a dropped "How many" (:func:`adds_from_graph`).
    """
    words = question_words(question)
    if not words:
        return terminal(question)
    d = [max(0, int(x)) for x in list(depths)[: len(words)]] + [0] * max(0, len(words) - len(depths))
    dropped = [bool(x) for x in list(drops or ())[: len(words)]] + [False] * max(0, len(words) - len(drops or ()))
    for i in range(1, len(words) - 1):  # "snapshot.interval_s": a kept compound keeps its joiners
        if dropped[i] and not dropped[i - 1] and not dropped[i + 1] and _joiner(question, words, i):
            dropped[i] = False
    drop = {words[i] for i, x in enumerate(dropped) if x}
    add = {words[i]: " ".join(x.split()) for i, x in enumerate(list(adds or ())[: len(words)]) if x and x.strip()}
    steps: list[tuple[str, list[int]]] = []

    def text_of(parts: list[tuple[int, int] | int], keep_all: bool = False) -> str:
        out, run = [], None
        for p in parts:
            if isinstance(p, tuple):
                if p in add:
                    if run:
                        out.append(_literal(question[run[0]:run[1]]))
                        run = None
                    out.append(add[p])
                if not keep_all and p in drop:
                    if run:
                        out.append(_literal(question[run[0]:run[1]]))
                        run = None
                    continue
                run = (run[0], p[1]) if run else p
                continue
            if run:
                out.append(_literal(question[run[0]:run[1]]))
                run = None
            out.append(f"#{p}")
        if run:
            out.append(_literal(question[run[0]:run[1]]))
        text = _SPACE_AFTER_REF.sub(r"\1\2", " ".join(" ".join(out).split()))
        if not keep_all and drop and not _CONTENT.search(_REF.sub("", text)):
            return text_of(parts, keep_all=True)  # every word of its own dropped: keep them
        return text

    def build(a: int, b: int, depth: int) -> int | None:
        parts: list[tuple[int, int] | int] = []
        children: list[int] = []
        own_content = False
        i = a
        while i < b:
            if d[i] <= depth:
                parts.append(words[i])
                own_content = own_content or bool(_CONTENT.search(question[words[i][0]:words[i][1]]))
                i += 1
                continue
            j = i
            while j < b and d[j] > depth:
                j += 1
            child = build(i, j, depth + 1)
            if child is not None:
                parts.append(child)
                children.append(child)
            i = j
        if not own_content:
            if not children:
                return None
            if len(children) == 1:
                return children[0]
            steps.append((_JOIN.join(f"#{c}" for c in children), children))
            return len(steps)
        steps.append((text_of(parts), children))
        return len(steps)

    build(0, len(words), 0)
    if len(steps) <= 1 or len(steps) > max_nodes:
        return terminal(_literal(question))
    nodes = tuple(QDGNode(str(k), text, tuple(str(c) for c in kids))
                  for k, (text, kids) in enumerate(steps, 1))
    return QDG(infer_type(nodes), nodes)


def _span_text(question: str, words: Sequence[tuple[int, int]], a: int, b: int,
               children: Sequence[tuple[int, int, str]]) -> str:
    out, i = [], a
    for ca, cb, cid in sorted(children):
        if ca > i:
            out.append(question[words[i][0]:words[ca - 1][1]])
        out.append(f"#{cid}")
        i = cb
    if b > i:
        out.append(question[words[i][0]:words[b - 1][1]])
    return " ".join(out)


def _raw_f1(a: str, b: str) -> float:
    ta, tb = _WORD.findall(a.lower()), _WORD.findall(b.lower())
    common = sum((Counter(ta) & Counter(tb)).values())
    return 0.0 if not common else 2 * common / (len(ta) + len(tb))


def _aligned_spans(question: str, g: QDG, max_words: int) -> dict[str, tuple[int, int]] | None:
    """Word span (a, b) of every step but the last, aligned as :func:`depths_from_graph`
    says, or None when the steps are not nested spans of the question."""
    words = question_words(question)
    n = len(words)
    if not n or n > max_words:
        return None
    spans: dict[str, tuple[int, int]] = {}
    used: set[str] = set()
    ids = [node.id for node in g.nodes]
    for node in g.nodes[:-1]:
        kids = [k for k in node.depends_on if k in spans]
        if any(k in used for k in kids):
            return None  # a step referenced twice is not a tree of spans
        used.update(kids)
        cs = sorted((spans[k][0], spans[k][1], k) for k in kids)
        if any(y[0] < x[1] for x, y in zip(cs, cs[1:], strict=False)):
            return None
        lo = min((c[0] for c in cs), default=None)
        hi = max((c[1] for c in cs), default=None)
        best: tuple[float, float, int, int, int] | None = None
        for a in range(0, (lo if lo is not None else n - 1) + 1):
            for b in range(max(a + 1, hi if hi is not None else a + 1), n + 1):
                text = _span_text(question, words, a, b, cs)
                # token F1 (SQuAD normalisation: articles and punctuation do not count), then
                # F1 of the raw words (keeps "the" the step has), then the shorter span, then the leftmost
                key = (round(token_f1(text, node.text), 9), round(_raw_f1(text, node.text), 9), a - b, -a, b)
                if best is None or key > best:
                    best = key
        if best is None or best[0] <= 0.0:
            return None
        spans[node.id] = (-best[3], best[4])
    if ids and ids[-1] in spans:
        return None
    inner = sorted(set(spans.values()))
    for i, (a, b) in enumerate(inner):
        for c, e in inner[i + 1:]:
            if not (b <= c or e <= a or (a <= c and e <= b) or (c <= a and b <= e)):
                return None  # crossing spans
    return spans


def depths_from_graph(question: str, graph: QDG | dict[str, Any], max_depth: int,
                      max_words: int = 64) -> list[int] | None:
    """Per-word depths of the nested spans that best match ``graph``'s steps, or None.

    Each step is aligned, in order, to the span of the question with the highest token F1
    against its text, among the spans that contain the spans of the steps it references
    (their ``#k`` replaced as in the step); the last step is the whole question. ``None``
    when the graph is not a tree of nested spans (crossing spans, a step referenced by two
    steps), when the question has no words or more than ``max_words`` (the search is
    quadratic in the words), or when a step has no span.

    Args:
        question: the question.
        graph: its gold decomposition.
        max_depth: the tagger's number of depth labels; deeper words get ``max_depth - 1``.
        max_words: longest question aligned.
    """
    g = graph if isinstance(graph, QDG) else QDG.from_json(graph)
    spans = _aligned_spans(question, g, max_words) if max_depth >= 1 else None
    if spans is None:
        return None
    inner = sorted(set(spans.values()))
    return [min(max_depth - 1, sum(a <= i < b for a, b in inner)) for i in range(len(question_words(question)))]


def drops_from_graph(question: str, graph: QDG | dict[str, Any], max_words: int = 64) -> list[bool] | None:
    """Per word, whether the gold step that owns it leaves it out (the tagger's delete tags),
    or None where :func:`depths_from_graph` is None.

    A word belongs to the innermost aligned step span around it (the last step when none);
    it is dropped when its lower-cased form is not among that step's words: the "How many"
    of "number of #1", the "did" of "yards of the passes of Brady", a "?" the step does not
    write. Case-insensitive, so a step's different capitalisation is no drop.
    """
    g = graph if isinstance(graph, QDG) else QDG.from_json(graph)
    spans = _aligned_spans(question, g, max_words)
    return None if spans is None else _drops(question, g, spans)


def _owners(g: QDG, spans: dict[str, tuple[int, int]], n: int) -> list[str]:
    """Per word, the id of the innermost aligned step span around it (the last step's when none)."""
    order = {node.id: i for i, node in enumerate(g.nodes)}
    out = []
    for i in range(n):
        owners = [k for k, (a, b) in spans.items() if a <= i < b]
        out.append(min(owners, key=lambda k: (spans[k][1] - spans[k][0], order[k])) if owners else g.nodes[-1].id)
    return out


def _drops(question: str, g: QDG, spans: dict[str, tuple[int, int]]) -> list[bool]:
    words = [question[a:b].lower() for a, b in question_words(question)]
    vocab = {node.id: set(_WORD.findall(_REF.sub(" ", node.text.lower()))) for node in g.nodes}
    return [w not in vocab[k] for w, k in zip(words, _owners(g, spans, len(words)), strict=True)]


_STEP_TOKEN = re.compile(r"#\s*\d+|\w+|[^\w\s]")


def _lcs_pairs(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (earliest matches first)."""
    n, m = len(a), len(b)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = best[i + 1][j + 1] + 1 if a[i] == b[j] else max(best[i + 1][j], best[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _adds(question: str, g: QDG, spans: dict[str, tuple[int, int]], drops: Sequence[bool]) -> list[str]:
    """Per word, the phrase the gold step that owns the word writes just before it and the
    question does not have ("" none): the step's own kept words and its children's references
    are matched to the gold step's words (longest common subsequence); each run of gold words
    left over is put on the first of the step's own words between the matched item before it
    and the one after (that one included). A run with a reference in it, or with no own word to
    carry it (between two children), is left out."""
    words = question_words(question)
    n = len(words)
    lw = [question[a:b].lower() for a, b in words]
    owner = _owners(g, spans, n)
    span_of = {**spans, g.nodes[-1].id: (0, n)}
    out = [""] * n
    for node in g.nodes:
        a, b = span_of[node.id]
        # the step as the depths read it: its own words and, in their place, its child steps
        parts: list[tuple[str, Any, int]] = []
        i = a
        while i < b:
            if owner[i] == node.id:
                parts.append(("word", lw[i], i))
                i += 1
                continue
            child = max((k for k, (c, e) in spans.items() if c <= i < e and a <= c and e <= b and k != node.id
                         and (c, e) != (a, b)), key=lambda k: spans[k][1] - spans[k][0], default=None)
            if child is None:  # a word of another step outside every child span: not a tree here
                i += 1
                continue
            parts.append(("ref", spans[child], i))
            i = spans[child][1]
        kept = [k for k, p in enumerate(parts) if p[0] == "ref" or not drops[p[2]]]
        gold = []
        for t in _STEP_TOKEN.findall(node.text):
            ref = _REF.fullmatch(t)
            gold.append(("ref", spans.get(ref.group(1))) if ref else ("word", t.lower()))
        pairs = _lcs_pairs([(parts[k][0], parts[k][1]) for k in kept], gold)
        # runs of unmatched gold words, each before the matched kept item that follows it
        bounds = [(-1, -1)] + pairs + [(len(kept), len(gold))]
        for (ki, gi), (kj, gj) in zip(bounds, bounds[1:], strict=False):
            run = gold[gi + 1:gj]
            if not run or any(t[0] == "ref" for t in run):
                continue
            lo = kept[ki] + 1 if ki >= 0 else 0
            hi = kept[kj] if kj < len(kept) else len(parts) - 1
            carrier = next((parts[k][2] for k in range(lo, hi + 1) if parts[k][0] == "word"), None)
            if carrier is not None and not out[carrier]:
                out[carrier] = " ".join(t[1] for t in run)
    return out


def adds_from_graph(question: str, graph: QDG | dict[str, Any], max_words: int = 64) -> list[str] | None:
    """Per word, the phrase its gold step writes before it that the question does not have
    (the tagger's add tags; :func:`_adds`), or None where :func:`depths_from_graph` is None."""
    g = graph if isinstance(graph, QDG) else QDG.from_json(graph)
    spans = _aligned_spans(question, g, max_words)
    return None if spans is None else _adds(question, g, spans, _drops(question, g, spans))


def gold_tags(question: str, graph: QDG | dict[str, Any], levels: int,
              max_words: int = 64) -> tuple[list[int], list[str]] | None:
    """(:func:`edit_labels`, :func:`adds_from_graph`) of the gold graph, aligned once; None
    where :func:`depths_from_graph` is None."""
    g = graph if isinstance(graph, QDG) else QDG.from_json(graph)
    spans = _aligned_spans(question, g, max_words) if levels >= 1 else None
    if spans is None:
        return None
    inner = sorted(set(spans.values()))
    depths = [sum(a <= i < b for a, b in inner) for i in range(len(question_words(question)))]
    drops = _drops(question, g, spans)
    return edit_labels(depths, drops, levels), _adds(question, g, spans, drops)


def edit_labels(depths: Sequence[int], drops: Sequence[bool], levels: int) -> list[int]:
    """One label per word for a tagger with delete tags: ``depth + levels * drop``
    (:func:`split_edit_labels` reads it back)."""
    return [min(int(d), levels - 1) + (levels if x else 0) for d, x in zip(depths, drops, strict=True)]


def split_edit_labels(labels: Sequence[int], levels: int) -> tuple[list[int], list[bool]]:
    """(depths, drops) of :func:`edit_labels`' labels."""
    return [int(x) % levels for x in labels], [int(x) >= levels for x in labels]


def graph_from_labels(question: str, labels: Sequence[int], max_nodes: int = 8, drop_levels: int = 0,
                      adds: Sequence[str] | None = None) -> QDG:
    """The graph of a tagger's per-word labels: depths, or with delete tags (``drop_levels``
    depth levels, :func:`edit_labels`) depths and drops; ``adds``: its add tags' phrases."""
    if drop_levels > 0:
        depths, drops = split_edit_labels(labels, drop_levels)
        return graph_from_depths(question, depths, max_nodes, drops, adds)
    return graph_from_depths(question, labels, max_nodes, adds=adds)


def tagger_graph(question: str, labels: Sequence[int], max_nodes: int = 8, drop_levels: int = 0,
                 adds: Sequence[str] | None = None, choice_template: bool = False) -> QDG:
    """The tagger's graph of ``question`` (:func:`graph_from_labels`), or with ``choice_template``
    the comparison template of a question that offers its answers
    (:func:`searchsmith.models.choice.choice_graph`), which the copy form cannot write. The torch
    model and the exported bundle both read their labels through here."""
    if choice_template:
        from searchsmith.models.choice import choice_graph

        graph = choice_graph(question, max_nodes)
        if graph is not None:
            return graph
    return graph_from_labels(question, labels, max_nodes, drop_levels, adds)


__all__ = ["adds_from_graph", "depths_from_graph", "drops_from_graph", "edit_labels",
           "gold_tags", "graph_from_depths", "graph_from_labels", "question_words", "split_edit_labels",
           "tagger_graph"]
