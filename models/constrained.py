"""Constrained decoding for the decomposer: outputs that are well formed by construction.

A small seq2seq model trained for minutes learns *what* to say long before it learns the
*format*; these constraints take the format off its hands. Both work on token ids only, so
the same object drives ``transformers`` ``generate`` (``prefix_allowed_tokens_fn``) and the
ONNX Runtime greedy loop of the exported bundle, which therefore decode identically.

* :class:`GraphGrammar` (the ``decompose:`` task) admits exactly the compact linearisation of
  :mod:`searchsmith.models.qdg`: ``TYPE || 1 : text || 2 : text # 1 ...``, with node ids
  numbered in order, ``# k`` only to earlier nodes, at most ``max_nodes`` nodes, and an end
  token only where the structure agrees with the declared type (``terminal``: one node;
  ``chain``: one root, every later node refers to an earlier one; ``split``: two or more
  roots). Node text is drawn from the question's own tokens plus an output vocabulary
  learnt from the training targets (QDMR adds words such as "return", "number", "of").
* :class:`EditConstraint` (the ``rewrite:`` task, edit targets of
  :mod:`searchsmith.models.rewrite_edit`) admits ``old => new ; ...`` where ``old`` is made
  of the query's tokens and ``new`` of the conversation's tokens plus an output vocabulary;
  an immediate end token means "keep the query".
* :class:`CopyConstraint` (the ``rewrite:`` task, full-rewrite targets) admits the tokens of
  the history and the query plus the same kind of output vocabulary: a standalone rewrite
  resolves references with words that are already in the conversation.

Both need only the tokenizer's vocabulary; they import neither torch nor transformers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from searchsmith.models.qdg import QDG_TYPES

# Tokens the grammar itself places; never part of node text.
_STRUCTURAL = ("|", "#", "[", "]")


def _ids(tokenizer: Any, words: Iterable[str]) -> list[int]:
    out = []
    for w in words:
        pieces = tokenizer.tokenize(w)
        if len(pieces) != 1:
            raise ValueError(f"constrained decoding: {w!r} is not one token of this tokenizer "
                             f"({pieces}); the compact graph form needs a WordPiece-style vocabulary")
        out.append(tokenizer.convert_tokens_to_ids(pieces[0]))
    return out


def learn_output_vocab(tokenizer: Any, targets: Iterable[str], sources: Iterable[str],
                       size: int) -> list[int]:
    """The ``size`` token ids most often generated but *not* copied from the source.

    Args:
        tokenizer: the decomposer's tokenizer.
        targets: training targets (linearised graphs or rewrites).
        sources: the matching model inputs, in the same order.
        size: how many ids to keep (0 = none).

    Returns:
        Token ids, most frequent first: the words a target adds to its source.
    """
    counts: Counter[int] = Counter()
    for tgt, src in zip(targets, sources, strict=True):
        have = set(tokenizer(src, add_special_tokens=False)["input_ids"])
        counts.update(t for t in tokenizer(tgt, add_special_tokens=False)["input_ids"]
                      if t not in have)
    banned = set(_ids(tokenizer, _STRUCTURAL)) | set(tokenizer.all_special_ids)
    return [t for t, _ in counts.most_common() if t not in banned][:size]


class _Base:
    def __init__(self, tokenizer: Any, output_vocab: Sequence[int] = ()) -> None:
        self.eos = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if self.eos is None:
            raise ValueError("constrained decoding: the tokenizer has no [SEP]/eos token")
        self.special = set(tokenizer.all_special_ids)
        self.structural = set(_ids(tokenizer, _STRUCTURAL))
        self.output_vocab = [int(t) for t in output_vocab]
        self.tokenizer = tokenizer

    def _text_vocab(self, source_ids: Sequence[int], skip: int) -> list[int]:
        """Source tokens (after a ``skip``-token task prefix) plus the output vocabulary."""
        keep = dict.fromkeys(int(t) for t in list(source_ids)[skip:])
        keep.update(dict.fromkeys(self.output_vocab))
        return [t for t in keep if t not in self.special and t not in self.structural]

    def prefix_fn(self, sources_ids: Sequence[Sequence[int]], graph_types: Sequence[str] | None = None,
                  start_tokens: int = 1) -> Callable[[int, Any], list[int]]:
        """A ``prefix_allowed_tokens_fn`` for ``generate`` (greedy: batch_id = row).

        ``graph_types`` (one per row, or None) fixes each row's graph type where the
        constraint has one (:class:`GraphGrammar`); others ignore it.
        """
        cache: dict[int, Any] = {}

        def fn(batch_id: int, input_ids: Any) -> list[int]:
            if batch_id not in cache:
                kind = graph_types[batch_id] if graph_types is not None else None
                cache[batch_id] = self.state_for(sources_ids[batch_id], kind)
            generated = [int(t) for t in input_ids.tolist()[start_tokens:]]
            return self.allowed(cache[batch_id], generated)

        return fn

    def state_for(self, source_ids: Sequence[int], graph_type: str | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def allowed(self, state: Any, generated: Sequence[int]) -> list[int]:  # pragma: no cover
        raise NotImplementedError


class CopyConstraint(_Base):
    """Rewrite outputs made of the conversation's tokens plus an output vocabulary.

    Args:
        tokenizer: the decomposer's tokenizer.
        output_vocab: ids the rewrite may add (see :func:`learn_output_vocab`).
        prefix: the task prefix of the source (its tokens are not copied).
    """

    def __init__(self, tokenizer: Any, output_vocab: Sequence[int] = (), prefix: str = "rewrite:") -> None:
        super().__init__(tokenizer, output_vocab)
        self.skip = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])

    def state_for(self, source_ids: Sequence[int], graph_type: str | None = None) -> list[int]:
        # source_ids come with [CLS] first when tokenized with special tokens.
        body = [t for t in source_ids if t not in self.special]
        return [*self._text_vocab(body, self.skip), self.eos]

    def allowed(self, state: list[int], generated: Sequence[int]) -> list[int]:
        return state if generated else state[:-1] or state


class EditConstraint(_Base):
    """Edit outputs ``old => new ; old => new`` (see :mod:`searchsmith.models.rewrite_edit`).

    ``old`` draws on the query's tokens (the source's last ``||`` segment), ``new`` on the
    conversation's tokens plus ``output_vocab``; ``=``, ``>`` and ``;`` are structure only.

    Args:
        tokenizer: the decomposer's tokenizer (``=``, ``>``, ``;`` and ``|`` one token each).
        output_vocab: ids ``new`` may add (see :func:`learn_output_vocab`).
        prefix: the task prefix of the source (its tokens are not copied).
    """

    def __init__(self, tokenizer: Any, output_vocab: Sequence[int] = (), prefix: str = "rewrite:") -> None:
        super().__init__(tokenizer, output_vocab)
        self.skip = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
        self.eq, self.gt, self.semi, self.bar = _ids(tokenizer, ["=", ">", ";", "|"])
        self.marks = {self.eq, self.gt, self.semi}
        # WordPiece continuations ("##s") may not start a span
        self.cont = {i for t, i in tokenizer.get_vocab().items() if t.startswith("##")}

    def state_for(self, source_ids: Sequence[int],
                  graph_type: str | None = None) -> tuple[list[int], list[int]]:
        """(the query's token ids in order, conversation token ids + output vocabulary)."""
        body = [t for t in source_ids if t not in self.special][self.skip:]
        cut = 0  # the query is what follows the last "| |" (HISTORY_SEP)
        for i in range(len(body) - 1):
            if body[i] == self.bar and body[i + 1] == self.bar:
                cut = i + 2
        query = [t for t in body[cut:] if t not in self.structural and t not in self.marks]
        new = [t for t in self._text_vocab(body, 0) if t not in self.marks]
        return query, new

    def allowed(self, state: tuple[list[int], list[int]], generated: Sequence[int]) -> list[int]:
        """``old``: a contiguous run of the query starting at a word; ``new``: conversation
        words (not starting with a continuation piece, no token twice in a row)."""
        query, new = state
        last = next((i for i in range(len(generated) - 1, -1, -1)
                     if generated[i] in self.marks), -1)
        mark = generated[last] if last >= 0 else None
        run = list(generated[last + 1:])  # tokens since the last mark
        if mark is None or mark == self.semi:  # in ``old``
            if not run:
                starts = list(dict.fromkeys(t for t in query if t not in self.cont))
                if not starts:
                    return [self.eos]
                return starts + ([self.eos] if mark is None else [])
            k = len(run)
            nxt = [query[i + k] for i in range(len(query) - k) if query[i:i + k] == run]
            return [*dict.fromkeys(nxt), self.eq]
        if mark == self.eq:
            return [self.gt]
        # in ``new`` (possibly empty: a deletion)
        words = [t for t in new if t != (run[-1] if run else None)
                 and (run or t not in self.cont)]
        return [*words, self.semi, self.eos]


@dataclass(frozen=True)
class _GraphState:
    vocab: list[int]
    graph_type: str | None = None


class GraphGrammar(_Base):
    """The compact QDG linearisation as a token-level state machine.

    Args:
        tokenizer: the decomposer's tokenizer (WordPiece: ``||`` is two ``|`` tokens).
        max_nodes: most nodes a graph may have.
        output_vocab: ids node text may use besides the question's own tokens.
        prefix: the task prefix of the source (``decompose:``).
    """

    def __init__(self, tokenizer: Any, max_nodes: int, output_vocab: Sequence[int] = (),
                 prefix: str = "decompose:", max_tokens: int | None = None) -> None:
        super().__init__(tokenizer, output_vocab)
        # Generation budget: near it the grammar steers to the shortest well-formed ending, so
        # a model that would ramble past the cut-off still closes its graph.
        self.max_tokens = max_tokens
        if not 1 <= max_nodes <= 9:
            raise ValueError(f"constrained decoding: max_nodes must be in 1..9 (one digit token "
                             f"per id), got {max_nodes}")
        self.max_nodes = max_nodes
        self.skip = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
        self.types = dict(zip(_ids(tokenizer, QDG_TYPES), QDG_TYPES, strict=True))
        self.bar, self.hash, self.colon = _ids(tokenizer, ["|", "#", ":"])
        self.digit = _ids(tokenizer, [str(i) for i in range(1, max_nodes + 1)])
        self.digit_value = {t: i + 1 for i, t in enumerate(self.digit)}

    def state_for(self, source_ids: Sequence[int], graph_type: str | None = None) -> _GraphState:
        """The node-text vocabulary of a source, and the graph type to force (None: free)."""
        if graph_type is not None and graph_type not in self.types.values():
            raise ValueError(f"constrained decoding: graph type {graph_type!r} is not one of {list(QDG_TYPES)}")
        body = [t for t in source_ids if t not in self.special]
        return _GraphState(self._text_vocab(body, self.skip), graph_type)

    def allowed(self, state: _GraphState | list[int], generated: Sequence[int]) -> list[int]:
        """Token ids that may come next after ``generated`` (decoder start token excluded)."""
        forced = None
        if isinstance(state, _GraphState):
            state, forced = state.vocab, state.graph_type
        if not generated:
            if forced is not None and (forced == "terminal" or self.max_nodes >= 2):
                return [t for t, k in self.types.items() if k == forced]
            if self.max_tokens is None:
                return list(self.types)
            # shortest well-formed graphs, end token included: terminal 7, split 12, chain 13
            shortest = {"terminal": 7, "split": 12, "chain": 13}
            return [t for t, k in self.types.items() if shortest[k] <= self.max_tokens
                    and (k == "terminal" or self.max_nodes >= 2)] or [
                t for t, k in self.types.items() if k == "terminal"]
        kind = self.types.get(generated[0])
        if kind is None:  # cannot happen under the grammar; end the sequence
            return [self.eos]
        # Replay the rest: ("||" id ":" text)+ with "# d" references inside text.
        n = 0  # nodes opened
        phase = "bar1"
        text_len, has_ref, roots = 0, False, 0
        for tok in generated[1:]:
            if phase == "bar1":
                phase = "bar2"
            elif phase == "bar2":
                phase = "id"
            elif phase == "id":
                n += 1
                phase = "colon"
            elif phase == "colon":
                phase, text_len, has_ref = "text", 0, False
            elif phase == "ref":
                phase, text_len, has_ref = "text", text_len + 1, True
            elif tok == self.bar:  # phase text: the node ends
                roots += 0 if has_ref else 1
                phase = "bar2"
            elif tok == self.hash:
                phase = "ref"
            else:
                text_len += 1
        if phase == "bar1" or phase == "bar2":
            return [self.bar]
        if phase == "id":
            return [self.digit[n]]
        if phase == "colon":
            return [self.colon]
        if phase == "ref":
            return self.digit[: n - 1]
        # phase == "text"
        out = list(state)
        if n > 1:
            out.append(self.hash)
        if text_len >= 1:
            node_ok = not (kind == "chain" and n >= 2 and not has_ref)
            if node_ok and kind != "terminal" and n < self.max_nodes:
                out.append(self.bar)
            roots_now = roots + (0 if has_ref else 1)
            end_ok = ((kind == "terminal" and n == 1)
                      or (kind == "chain" and n >= 2 and node_ok and roots_now == 1)
                      or (kind == "split" and n >= 2 and roots_now >= 2))
            if end_ok:
                out.append(self.eos)
        if self.max_tokens is not None:
            out = self._within_budget(out, kind, n, text_len, has_ref, roots, len(generated))
        return out or [self.eos]

    def _cost(self, kind: str, n: int, text_len: int, has_ref: bool, roots: int) -> float:
        """Fewest tokens (end token included) that finish a graph from inside node ``n``'s text."""
        need_text = 0 if text_len >= 1 else 1
        if kind == "terminal":
            return need_text + 1
        if kind == "chain":
            if n >= 2:
                return 1 if has_ref else 3          # "# k" end
            return need_text + 7                    # "|| 2 : # 1" end
        roots_now = roots + (0 if has_ref else 1)
        if roots_now >= 2:
            return need_text + 1
        return need_text + 6 if n < self.max_nodes else float("inf")  # "|| k : word" end

    def _within_budget(self, out: list[int], kind: str, n: int, text_len: int, has_ref: bool,
                       roots: int, used: int) -> list[int]:
        """Keep the options after which a well-formed ending still fits in ``max_tokens``."""
        left = self.max_tokens - used  # tokens that may still be generated, end included
        root_inc = 0 if has_ref else 1
        fits_text = 1 + self._cost(kind, n, text_len + 1, has_ref, roots) <= left
        keep = []
        for t in out:
            if t == self.eos:
                ok = True
            elif t == self.hash:
                ok = 2 + self._cost(kind, n, text_len + 1, True, roots) <= left
            elif t == self.bar:
                ok = 4 + self._cost(kind, n + 1, 0, False, roots + root_inc) <= left
            else:
                ok = fits_text
            if ok:
                keep.append(t)
        return keep


__all__ = ["CopyConstraint", "EditConstraint", "GraphGrammar", "learn_output_vocab"]
