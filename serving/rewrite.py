"""Conversation rewrite: turn a follow-up into a standalone question.

``Rewriter`` is the interface; ``HeuristicRewriter`` is the documented stand-in used until
a decomposer bundle (whose ``rewrite:`` task replaces it) is configured.

The heuristic: when there is history, append to the query the salient terms of the last
``history_turns`` turns that the query does not already contain. A term is salient when
it looks like a name (capitalised inside a sentence, or mixed case / digits / ``_`` / ``.``
like ``lumen/evict.py``) or is a content word of the latest user turn. User turns weigh
more than assistant turns, recent turns more than old ones. This is enough to carry the
referent of "Where can I find the code for it?" into the routed query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from searchsmith.models.errors import ValidationError
from searchsmith.models.roles import CHAT_ROLES
from searchsmith.models.text import QUERY_STOP_WORDS

ROLES = CHAT_ROLES

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./+#-]*[A-Za-z0-9+#]|[A-Za-z0-9]")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


# The most of a conversation a question is read with: its last turns, each cut to this many characters
HISTORY_MAX_TURNS = 50
HISTORY_MAX_CHARS = 20000


def parse_history(history: Any, *, max_turns: int = HISTORY_MAX_TURNS, max_chars: int = HISTORY_MAX_CHARS,
                  field: str = "history", cuts: list[str] | None = None) -> list[Turn]:
    """Validate a history list of ``{"role", "content"}`` objects (chat messages) into turns:
    the last ``max_turns``, each cut to ``max_chars`` characters; ``cuts`` (when given) gets a
    line saying what was left out, for the answer's trace. Every turn is checked, the ones
    left out too: a malformed turn is an error wherever it stands."""
    if history is None:
        return []
    if not isinstance(history, (list, tuple)):
        raise ValidationError(f"{field}: expected a list of {{role, content}} objects, got {type(history).__name__}")
    first = max(0, len(history) - max_turns)  # errors name the turn's place in what was sent
    out = []
    long = 0
    for i, t in enumerate(history):
        if isinstance(t, Turn):
            if i >= first:
                out.append(t)
            continue
        if not isinstance(t, dict) or "content" not in t:
            raise ValidationError(f"{field}[{i}]: expected an object with 'role' and 'content', got {t!r:.80}")
        role = t.get("role", "user")
        if role not in ROLES:
            raise ValidationError(f"{field}[{i}].role: expected one of {list(ROLES)}, got {role!r}")
        if not isinstance(t["content"], str):
            raise ValidationError(f"{field}[{i}].content: expected a string, got {type(t['content']).__name__}")
        if i >= first:
            long += len(t["content"]) > max_chars
            out.append(Turn(role, t["content"][:max_chars]))
    if first and cuts is not None:
        cuts.append(f"history: its first {first} of {len(history)} turns were left out (the last {max_turns} "
                    "are read)")
    if long and cuts is not None:
        cuts.append(f"history: {long} turn(s) cut to their first {max_chars} characters")
    return out


class Rewriter(Protocol):
    """Rewrites a follow-up query into a standalone one using the conversation history."""

    def rewrite(self, history: Sequence[Turn], query: str) -> str: ...


@dataclass(frozen=True)
class HeuristicRewriterConfig:
    history_turns: int = 4
    max_terms: int = 8
    user_weight: float = 2.0
    assistant_weight: float = 1.0
    decay: float = 0.7


class HeuristicRewriter:
    """Query + salient terms of recent turns (see the module docstring)."""

    def __init__(self, config: HeuristicRewriterConfig | None = None) -> None:
        self.config = config or HeuristicRewriterConfig()

    @staticmethod
    def _is_name(tok: str, sentence_start: bool) -> bool:
        if any(ch.isdigit() for ch in tok) or any(ch in "_./#+" for ch in tok):
            return True
        if tok[0].isupper() and not sentence_start:
            return True
        return tok[0].isupper() and tok.lower() not in QUERY_STOP_WORDS and len(tok) > 2

    def salient_terms(self, history: Sequence[Turn], query: str) -> list[str]:
        cfg = self.config
        have = {t.lower() for t in _TOKEN.findall(query)}
        scores: dict[str, float] = {}
        surface: dict[str, str] = {}
        recent = [t for t in history if t.role != "system"][-cfg.history_turns:]
        for age, turn in enumerate(reversed(recent)):
            weight = (cfg.user_weight if turn.role == "user" else cfg.assistant_weight) * cfg.decay ** age
            prev_end = True
            for m in _TOKEN.finditer(turn.content):
                tok = m.group(0)
                low = tok.lower()
                start = prev_end
                prev_end = turn.content[m.end(): m.end() + 1] in (".", "?", "!")
                if low in QUERY_STOP_WORDS or low in have or len(tok) < 2:
                    continue
                name = self._is_name(tok, start)
                if not name and turn.role != "user":
                    continue
                scores[low] = scores.get(low, 0.0) + weight * (3.0 if name else 1.0)
                surface.setdefault(low, tok)
        ranked = sorted(scores, key=lambda w: (-scores[w], w))[: cfg.max_terms]
        return [surface[w] for w in ranked]

    def rewrite(self, history: Sequence[Turn], query: str) -> str:
        if not history:
            return query
        terms = self.salient_terms(history, query)
        return f"{query} ({' '.join(terms)})" if terms else query


_APPENDED_TERMS = re.compile(r" \(([^()]+)\)")


def appended_terms(query: str, rewrite: str) -> tuple[str, str]:
    """``(question, suffix)``: a rewrite split into the question and the `` (history terms)``
    appended to it, by :class:`HeuristicRewriter` or a decomposer's term selection
    (:func:`searchsmith.models.rewrite_edit.with_terms`) (``suffix`` "" when nothing was
    appended: a parenthesis the query itself ends with stays in the question).

    The terms are context for retrieval, not part of the question: the decomposition stage
    decomposes the question and gives each step the suffix.
    """
    m = _APPENDED_TERMS.search(rewrite)
    while m is not None and m.end() != len(rewrite):
        m = _APPENDED_TERMS.search(rewrite, m.start() + 1)
    if m is None or m.start() == 0 or query.endswith(m.group(0)):
        return rewrite, ""
    return rewrite[:m.start()], rewrite[m.start():]
