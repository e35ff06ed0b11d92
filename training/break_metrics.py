"""Break's QDMR evaluation as the benchmark's official scorer computes it (Wolfson et al., TACL
2020; allenai/Break ``evaluation/``), reimplemented without its dependencies (spaCy, pandas,
``edit-distance``), so that ``searchsmith eval decompose`` figures can be set beside the Break
leaderboard's (issue 17: SARI >= 0.75, GED <= 0.35, as CopyNet's 0.746 / 0.322).

A decomposition is a list of step strings where ``#k`` is the answer of step k (1-based, an
earlier step), optionally with extra 1-based dependencies per step; :func:`parse_break_string`
reads Break's own ``"return a ;return #1 b"`` form. Break's scorer first rewrites every step
(``format_qdmr``): the word ``return`` removed, ``#k`` written ``@@k@@``, white space collapsed;
the flat string (:func:`break_string`) joins the steps with ``" @@SEP@@ "``.

* :func:`break_sari`: SARI (tensor2tensor's, as Break's ``sari_hook``; n-grams 1..4, one target)
  with the question split on single spaces as the source and the flat strings split on single
  spaces as prediction and target. Case-sensitive, as Break's. 1.0 for an exact copy of the gold.
* :func:`break_exact_match`: the lower-cased flat strings are equal.
* :func:`break_ged`: the graph edit distance of the two step graphs (node per step, edge per
  reference) with node substitution ``1 - step_match_score`` (Break's ``SequenceMatchScorer``
  over lemmas), insertion / deletion 1, divided by ``max(nodes + edges)`` of the two graphs.
  Lower is better; 0.0 for identical graphs. Exact (networkx's branch and bound, as Break's
  ``optimize_graph_edit_distance`` run to the end), within ``timeout_s``.
* :func:`break_normalized_em`: equality of a normal form (an approximation of Break's; below).

Where this differs from the official scorer, on purpose or because its tools are not here:

* **Lemmas** (GED's node similarity, normalized EM): Break lemmatises with spaCy
  ``en_core_web_sm``; here :func:`lemma` is a rule set (lower-case; be / have / do forms and a few
  irregular plurals from a table; regular plural ``-s`` / ``-es`` / ``-ies`` removed from words of
  four letters or more, except ``-ss`` / ``-us`` / ``-is`` and a short exception list). Verb
  inflections other than be / have / do (``founded``, ``spoken``) are kept as written, so node
  substitution costs can be higher than Break's where one side inflects a verb differently.
  Tokens (:func:`step_tokens`): ``@@k@@`` references, numbers with ``,`` / ``.`` inside, ``'s``,
  words and single punctuation marks, which is close to spaCy's tokenizer on QDMR steps.
* **Alignment ratio**: ``2 * matches / (len(a) + len(b))`` where matches are counted along the
  lowest-cost edit alignment with ties resolved as the ``edit-distance`` package (1.0.x) does
  (substitute, then insert, then delete); both empty: 1.0 (:func:`match_ratio`). Same as Break's.
* **GED budget**: Break interrupts a GED with its ``exit_after`` timer (minutes) and leaves that
  example out of the mean; here the search stops after ``timeout_s`` (default
  :data:`GED_TIMEOUT_S`) and the cost of the best edit path found so far is kept (an upper
  bound, ``exact`` False; when none was found, the path that substitutes steps in order). So
  every item has a figure and paired intervals stay paired. On Break's open part, 2-4 step
  graphs finish in milliseconds; pairs of 8+ dissimilar steps can take minutes. Neither Break
  nor this clips the distance to [0, 1] (:func:`searchsmith.models.metrics.qdmr_ged` does).
* **References** are ``#k`` without a space, as Break's ``format_qdmr`` reads them (Break's data
  has titles such as ``Computer Geek # 1``; ``searchsmith eval decompose`` writes the references
  of its graphs as ``#k``). Break's graph builder then reads only one-digit references
  (``@@(\\d)@@``, so a step referring to step 10 or later has no edge there); here every reference
  is an edge, and so are extra dependencies given beside the text (a QDG's ``depends_on`` not
  named in the text). Break's data has neither, so on its gold the graphs are the same.
* **return**: Break deletes every ``return`` substring of a step (``returned`` becomes ``ed``);
  here only a leading ``return`` word is removed.
* **Normalized EM**: Break rewrites both graphs with spaCy-driven rules (determiners removed,
  lemmas, adjectives / prepositional phrases / compound nouns / filter conditions split out into
  their own steps, operator wrappers such as ``number of #1`` rewritten, chains of filters
  reordered, steps ordered by level then alphabetically with duplicates merged) and compares the
  normal forms' strings. Here (:func:`break_normal_form`): :func:`lemma` on every word, then
  :func:`searchsmith.models.metrics.qdmr_normal_form` (lower case, punctuation, articles and a
  leading ``return`` dropped, each reference replaced by what it refers to, the steps' expansions
  sorted). So this forgives case, punctuation, articles, regular plurals and the numbering of
  independent steps, and does not forgive what Break's step-splitting rules do (``red cubes``
  vs ``cubes ; #1 that are red``) nor a reordered chain of filters; it is stricter than Break's
  there and looser on punctuation (Break's normal form keeps it).
* **Bad input** raises :class:`~searchsmith.models.errors.ValidationError` naming the field
  (empty decomposition, empty step, a reference to the step itself, a later or a missing step);
  Break's scorer scores such strings (a reference to a missing step becomes an empty node).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from searchsmith.models.errors import ValidationError
from searchsmith.models.metrics import graph_edit_cost, qdmr_normal_form, sari

#: Break's step separator in the flat decomposition string
BREAK_SEP = "@@SEP@@"
#: Wall-clock budget of one exact graph edit distance (Break's: minutes, then the example is dropped)
GED_TIMEOUT_S = 5.0

_REF_RE = re.compile(r"#(\d+)")
_RETURN_RE = re.compile(r"^\s*return\b\s*", re.IGNORECASE)
_TOKEN_RE = re.compile(r"@@\d+@@|#\d+|\d+(?:[.,]\d+)*|'s\b|\w+|[^\w\s]")

# be / have / do and the irregular plurals frequent in QDMR steps (spaCy's lemmas)
_IRREGULAR = {
    "is": "be", "are": "be", "was": "be", "were": "be", "been": "be", "being": "be", "am": "be",
    "has": "have", "had": "have", "having": "have", "does": "do", "did": "do",
    "done": "do", "children": "child", "men": "man", "women": "woman", "people": "people",
    "feet": "foot", "teeth": "tooth", "mice": "mouse", "geese": "goose", "lives": "life",
    "wives": "wife", "knives": "knife", "leaves": "leaf", "halves": "half",
}
# words ending in s that are not plurals (or whose lemma keeps the s)
_KEEP_S = frozenset({
    "always", "perhaps", "news", "series", "species", "sometimes", "towards", "afterwards",
    "besides", "whereas", "various", "previous", "famous", "numerous", "mathematics", "physics",
    "politics", "economics", "athletics", "olympics", "less", "unless",
    "thus", "yes", "its", "this", "his", "hers", "ours", "yours", "theirs",
})


# --------------------------------------------------------------------------- input


def _steps_error(field: str, what: str, fix: str) -> ValidationError:
    return ValidationError(f"{field}: {what}; {fix}")


def validate_steps(steps: Sequence[str], field: str,
                   deps: Sequence[Sequence[int]] | None = None) -> list[str]:
    """The steps with white space collapsed and a leading ``return`` removed, after checking them.

    Args:
        steps: the QDMR steps; ``#k`` is the answer of step k (1-based).
        field: what to call the input in an error (``"gold"``, ``"--data line 3: nodes"``).
        deps: optional 1-based dependencies of each step, beside its ``#k`` references.

    Raises:
        ValidationError: naming ``field`` (and the step) when there are no steps, a step is not a
            string or is empty, or a reference or dependency is not an earlier step.
    """
    if isinstance(steps, str) or not isinstance(steps, Sequence):
        raise _steps_error(field, f"expected a list of step strings, got {type(steps).__name__}",
                           "pass the steps as a list, or parse Break's string with parse_break_string")
    if not steps:
        raise _steps_error(field, "empty decomposition (no steps)",
                           "give at least one step (the question itself is a one-step QDMR)")
    if deps is not None and len(deps) != len(steps):
        raise _steps_error(field, f"{len(deps)} dependency lists for {len(steps)} steps",
                           "give one list of 1-based step numbers per step")
    out = []
    for i, step in enumerate(steps, start=1):
        if not isinstance(step, str):
            raise _steps_error(f"{field} step {i}", f"expected a string, got {type(step).__name__}",
                               "write each step as text")
        text = _RETURN_RE.sub("", " ".join(step.split()))
        if not text:
            raise _steps_error(f"{field} step {i}", f"empty step ({step!r})",
                               "remove the empty step (two ';' in a row or a trailing ';' in Break's string)")
        refs = [int(k) for k in _REF_RE.findall(text)]
        refs += [int(k) for k in (deps[i - 1] if deps is not None else [])]
        for k in refs:
            if not 1 <= k < i:
                where = ("itself" if k == i else "a missing step" if not 1 <= k <= len(steps)
                         else "a later step")
                earlier = f"earlier steps #1..#{i - 1}" if i > 1 else "no step (it is the first)"
                raise _steps_error(f"{field} step {i}", f"reference #{k} ({step!r}) points to {where}",
                                   f"a step may refer only to {earlier}")
        out.append(text)
    return out


def parse_break_string(text: str, field: str = "decomposition") -> list[str]:
    """The steps of Break's decomposition string (``"return a ;return #1 b"``): split on ``;``,
    ``return`` and surrounding white space removed; checked by :func:`validate_steps`.

    Raises:
        ValidationError: naming ``field`` when the string is not text, is empty or malformed.
    """
    if not isinstance(text, str):
        raise _steps_error(field, f"expected Break's QDMR string, got {type(text).__name__}",
                           "write the steps as 'return a ;return #1 b'")
    if not text.strip():
        raise _steps_error(field, "empty decomposition (no steps)",
                           "write the steps as 'return a ;return #1 b'")
    return validate_steps(text.split(";"), field)


def break_string(steps: Sequence[str]) -> str:
    """Break's flat decomposition string (``format_qdmr`` then ``to_string``): steps without
    ``return``, ``#k`` as ``@@k@@``, joined by ``" @@SEP@@ "``; case kept."""
    parts = [_REF_RE.sub(r"@@\1@@", _RETURN_RE.sub("", " ".join(s.split()))) for s in steps]
    return f" {BREAK_SEP} ".join(p.strip() for p in parts)


def _references(step: str) -> list[int]:
    return [int(k) for k in dict.fromkeys(_REF_RE.findall(step))]


# --------------------------------------------------------------------------- SARI and EM


def break_sari(question: str, pred: Sequence[str], gold: Sequence[str]) -> float:
    """Break's SARI: source ``question.split(" ")``, prediction and target the flat strings
    (:func:`break_string`) split on single spaces; case-sensitive. In [0, 1]; 1.0 when ``pred``
    writes the same flat string as ``gold``. Steps are checked by :func:`validate_steps`."""
    p = break_string(validate_steps(pred, "pred")).split(" ")
    g = break_string(validate_steps(gold, "gold")).split(" ")
    return sari(question.split(" "), p, g)["sari"]


def break_exact_match(pred: Sequence[str], gold: Sequence[str]) -> float:
    """1.0 when the lower-cased flat strings (:func:`break_string`) are equal, else 0.0."""
    p, g = validate_steps(pred, "pred"), validate_steps(gold, "gold")
    return float(break_string(p).lower() == break_string(g).lower())


# --------------------------------------------------------------------------- node similarity


def lemma(token: str) -> str:
    """A rule-based stand-in for spaCy's lemma (see the module docstring): lower case, be / have /
    do and irregular plurals from a table, regular plurals of words of 4+ letters made singular."""
    t = token.lower()
    if t in _IRREGULAR:
        return _IRREGULAR[t]
    if len(t) < 4 or not t.isalpha() or t in _KEEP_S or not t.endswith("s"):
        return t
    if t.endswith(("ss", "us", "is")):
        return t
    if t.endswith("ies") and len(t) > 4:
        return t[:-3] + "y"
    if t.endswith(("sses", "xes", "zes", "ches", "shes")):
        return t[:-2]
    return t[:-1]


def step_tokens(step: str) -> list[str]:
    """The lemmas Break's ``SequenceMatchScorer`` compares: the step as written in the flat string
    (references ``@@k@@``), split into references, numbers, words and punctuation, lemmatised."""
    return [lemma(t) for t in _TOKEN_RE.findall(break_string([step]))]


def match_ratio(a: Sequence[str], b: Sequence[str]) -> float:
    """``2 * matches / (len(a) + len(b))`` with the matches of the lowest-cost edit alignment,
    ties resolved substitute > insert > delete per cell (the ``edit-distance`` package's
    ``SequenceMatcher.ratio``, which Break's scorer uses); 1.0 when both are empty."""
    if not a and not b:
        return 1.0
    if list(a) == list(b):
        return 1.0
    if not a or not b:
        return 0.0
    cost_prev, match_prev = list(range(len(b) + 1)), [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        cost_row, match_row = [i] + [0] * len(b), [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            differ = int(a[i - 1] != b[j - 1])
            sub, ins, dele = cost_prev[j - 1] + differ, cost_row[j - 1] + 1, cost_prev[j] + 1
            best = min(sub, ins, dele)
            if sub == best:
                cost_row[j], match_row[j] = sub, match_prev[j - 1] + (1 - differ)
            elif ins == best:
                cost_row[j], match_row[j] = ins, match_row[j - 1]
            else:
                cost_row[j], match_row[j] = dele, match_prev[j]
        cost_prev, match_prev = cost_row, match_row
    return 2.0 * match_prev[len(b)] / (len(a) + len(b))


def step_match_score(a: str, b: str) -> float:
    """Break's similarity of two steps: :func:`match_ratio` of their :func:`step_tokens`."""
    return match_ratio(step_tokens(a), step_tokens(b))


# --------------------------------------------------------------------------- GED


def _graph(steps: Sequence[str], deps: Sequence[Sequence[int]] | None) -> Any:
    import networkx as nx  # a dependency of torch; imported here so the module stays light

    g = nx.DiGraph()
    for i, step in enumerate(steps, start=1):
        g.add_node(i, label=step)
    for i, step in enumerate(steps, start=1):
        # Break's edge runs from a step to the step it refers to
        g.add_edges_from((i, k) for k in {*_references(step), *(deps[i - 1] if deps else [])})
    return g


def _in_order_cost(g1: Any, g2: Any) -> float:
    """The cost of the edit path that substitutes step i for step i (an upper bound on the GED)."""
    n = min(g1.number_of_nodes(), g2.number_of_nodes())
    cost = sum(1.0 - step_match_score(g1.nodes[i]["label"], g2.nodes[i]["label"]) for i in range(1, n + 1))
    cost += abs(g1.number_of_nodes() - g2.number_of_nodes())
    return cost + len(set(g1.edges) ^ set(g2.edges))


def break_ged(pred: Sequence[str], gold: Sequence[str],
              pred_deps: Sequence[Sequence[int]] | None = None,
              gold_deps: Sequence[Sequence[int]] | None = None,
              timeout_s: float = GED_TIMEOUT_S) -> tuple[float, bool]:
    """Break's normalized graph edit distance between two QDMRs; lower is better.

    Graphs: one node per step, labelled with its text as in the flat string; an edge from each
    step to each step it refers to (``#k`` or ``deps``). Costs as Break's ``GraphMatchScorer``:
    node substitution ``1 - step_match_score``, node and edge insertion / deletion 1; the edit
    cost divided by ``max(nodes + edges)`` of the two graphs.

    Returns:
        ``(distance, exact)``: ``exact`` is False when ``timeout_s`` cut the search and the
        distance is the best upper bound found (Break would drop the example instead).

    Raises:
        ValidationError: naming ``pred`` or ``gold`` when their steps are malformed.
    """
    p, g = validate_steps(pred, "pred", pred_deps), validate_steps(gold, "gold", gold_deps)
    g1, g2 = _graph(p, pred_deps), _graph(g, gold_deps)
    norm = max(g1.number_of_nodes() + g1.number_of_edges(), g2.number_of_nodes() + g2.number_of_edges())
    cost, exact = graph_edit_cost(g1, g2, step_match_score, timeout_s)
    if cost is None:  # no complete edit path within the budget
        cost = _in_order_cost(g1, g2)
    return float(cost) / norm, exact


# --------------------------------------------------------------------------- normalized EM


def break_normal_form(steps: Sequence[str],
                      deps: Sequence[Sequence[int]] | None = None) -> tuple[str, tuple[str, ...]]:
    """The normal form :func:`break_normalized_em` compares: every word replaced by its
    :func:`lemma`, then :func:`searchsmith.models.metrics.qdmr_normal_form` (see the module
    docstring for what it forgives and where Break's differs)."""
    # a "#" that is not a reference (a title's "# 1") is punctuation, which the normal form drops
    lemmatised = [" ".join(t if t.startswith("#") else lemma(t) for t in _TOKEN_RE.findall(s) if t != "#")
                  for s in steps]
    return qdmr_normal_form(lemmatised, deps)


def break_normalized_em(pred: Sequence[str], gold: Sequence[str],
                        pred_deps: Sequence[Sequence[int]] | None = None,
                        gold_deps: Sequence[Sequence[int]] | None = None) -> float:
    """1.0 when the two QDMRs have the same :func:`break_normal_form`, else 0.0 (an
    approximation of Break's normalized exact match; differences in the module docstring)."""
    p, g = validate_steps(pred, "pred", pred_deps), validate_steps(gold, "gold", gold_deps)
    return float(break_normal_form(p, pred_deps) == break_normal_form(g, gold_deps))


# --------------------------------------------------------------------------- all four


@dataclass(frozen=True)
class BreakScores:
    """Break's figures of one predicted QDMR against the gold one."""

    sari: float
    exact_match: float
    normalized_em: float
    ged: float
    ged_exact: bool

    def as_dict(self, prefix: str = "", suffix: str = "") -> dict[str, float]:
        """``{prefix + name + suffix: value}`` with ``ged_exact`` as 1.0 / 0.0."""
        return {f"{prefix}{k}{suffix}": float(v) for k, v in asdict(self).items()}


def break_scores(question: str, pred: Sequence[str], gold: Sequence[str],
                 pred_deps: Sequence[Sequence[int]] | None = None,
                 gold_deps: Sequence[Sequence[int]] | None = None,
                 field: str = "", timeout_s: float = GED_TIMEOUT_S) -> BreakScores:
    """All four of Break's metrics of ``pred`` against ``gold`` for ``question``.

    Args:
        field: prefixed to ``pred`` / ``gold`` in error messages (say, the record's id).

    Raises:
        ValidationError: naming ``field`` and ``pred`` or ``gold`` when either is malformed.
    """
    where = f"{field} " if field else ""
    validate_steps(pred, f"{where}pred", pred_deps)
    validate_steps(gold, f"{where}gold", gold_deps)
    ged, exact = break_ged(pred, gold, pred_deps, gold_deps, timeout_s)
    return BreakScores(sari=break_sari(question, pred, gold), exact_match=break_exact_match(pred, gold),
                       normalized_em=break_normalized_em(pred, gold, pred_deps, gold_deps),
                       ged=ged, ged_exact=exact)


__all__ = [
    "BREAK_SEP",
    "GED_TIMEOUT_S",
    "BreakScores",
    "break_exact_match",
    "break_ged",
    "break_normal_form",
    "break_normalized_em",
    "break_sari",
    "break_scores",
    "break_string",
    "lemma",
    "match_ratio",
    "parse_break_string",
    "step_match_score",
    "step_tokens",
    "validate_steps",
]
