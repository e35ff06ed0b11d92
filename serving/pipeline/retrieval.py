"""Stage ``retrieval``: run the strategy over the graph, retrieving per node.

Per node (Xinyu et al.): search the routed sources for the top ``retrieve_k`` chunks
(hybrid search: the dense top ``retrieve_k`` and the BM25 top ``lexical_k`` of the index's
full-text table, each scored ``cosine + lexical_weight * share``, the share of the query's BM25
ceiling it reaches); drop near-duplicates (cosine >= ``dedup_threshold``, the ``dedup_mask`` kernel); keep the
best ``keep_ratio`` of the rest; rerank with the reranker bundle (else keep the retrieval
order); order the context "lost in the middle": the strongest passages at both ends (``edge_order``).

Strategies (SRSA):

* ``direct``: the whole question, searched once;
* ``parallel``: every node at once, retrieved concurrently: a child's ``#k`` is filled with
  its parent's own words (``decomposition.parallel_fill: text``), so no step waits for another
  ("When was #1 acquired?" under "the company that makes Beacon" is searched as "When was the
  company that makes Beacon acquired?"); the parents are answered afterwards, for the sentences
  that lead the answer (``generation.chain_support``). With ``parallel_fill: both`` each child is
  then searched again with its parents' answers in place, those passages joining the context;
  with ``parallel_fill: answer`` the levels are retrieved in turn and filled as ``planning`` fills
  them, nothing filtered;
* ``planning``: the nodes one by one, parents first; a child's ``#k`` is filled with its
  parents' answers (:func:`searchsmith.models.qdg.fill_references`), or with the parent's own
  text when it only names what it refers to (``names_fill_with_text``); after each round the
  accumulated passages are filtered (the best ``keep_ratio`` by similarity to the question
  and the answers so far) and compressed (each to its ``compress_sentences`` best
  sentences).

Both are bounded by ``max_nodes`` (the decomposer's cap) and ``max_rounds`` (levels).
Retrieval from no source at all is an error, not a degradation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from searchsmith.models.errors import ValidationError
from searchsmith.models.metrics import fuse_lexical
from searchsmith.models.qdg import QDG, QDGNode, described, fill_references, names_itself, terminal
from searchsmith.models.roles import Embedder, Reranker
from searchsmith.serving.dedup import dedup_keep_mask
from searchsmith.serving.index import chunk_text
from searchsmith.serving.pipeline.common import embed, sentences
from searchsmith.serving.pipeline.config import DecompositionConfig, Preset, RetrievalConfig
from searchsmith.serving.pipeline.state import (
    NodeResult,
    Passage,
    PipelineState,
    counted_call,
    estimate_tokens,
)
from searchsmith.serving.rewrite import appended_terms

if TYPE_CHECKING:
    from searchsmith.serving.index import Hit, Index

log = logging.getLogger(__name__)

# (question, passages, state) -> the node's answer (used to fill its children's #k)
NodeAnswerer = Callable[[str, list[Passage], PipelineState], str]


def lost_in_the_middle(ranked: Sequence[Passage]) -> list[Passage]:
    """Best first, second best last, third second, ...: the weakest end up in the middle.

    ``[p1, p2, p3, p4, p5] -> [p1, p3, p5, p4, p2]`` (Liu et al.: models use the edges of
    a long context best).
    """
    front = list(ranked[0::2])
    back = list(ranked[1::2])
    return front + back[::-1]


def levels(graph: QDG) -> list[list[QDGNode]]:
    """The nodes grouped by dependency depth (parents always in an earlier level)."""
    depth: dict[str, int] = {}
    for n in graph.nodes:  # parents come first in a repaired graph
        depth[n.id] = 1 + max((depth.get(d, 0) for d in n.depends_on), default=-1)
    out: list[list[QDGNode]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in graph.nodes:
        out[depth[n.id]].append(n)
    return out


def _passage(h: Hit, node_id: str) -> Passage:
    """A passage of a retrieved (or looked-up) chunk."""
    return Passage(chunk_id=h.chunk.chunk_id, doc_id=h.chunk.doc_id, source=h.chunk.source, text=h.chunk.text,
                   score=float(h.score), node_id=node_id, title=h.chunk.title, date=h.chunk.date, url=h.chunk.url,
                   images=tuple(h.chunk.images), row=h.row)


class VectorLookup:
    """Chunk vectors by index row, read from the index's ``vectors/`` (memory-mapped).

    Dedup needs each candidate's vector; reading it back is free next to re-embedding
    ``retrieve_k`` chunks of up to 350 tokens per node.
    """

    def __init__(self, index: Index) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for s in index.sources:
            vec_path, ids_path = index.vector_files(s)  # file stems differ from free-text labels
            vecs = np.load(vec_path, mmap_mode="r")
            ids = np.load(ids_path)
            order = np.argsort(ids, kind="stable")
            self._parts.append((ids[order], order, vecs))

    def get(self, rows: Sequence[int]) -> np.ndarray | None:
        """(N, D) float32 vectors of ``rows``, or None when one is not found."""
        out = []
        for r in rows:
            for ids, order, vecs in self._parts:
                i = int(np.searchsorted(ids, r))
                if i < len(ids) and ids[i] == r:
                    out.append(np.asarray(vecs[order[i]], dtype=np.float32))
                    break
            else:
                return None
        return np.stack(out) if out else None


class Retriever:
    """Search, de-duplicate, select, rerank and order the passages of one sub-question."""

    def __init__(self, index: Index, embedder: Embedder, config: RetrievalConfig,
                 reranker: Reranker | None = None) -> None:
        self.index = index
        self.embedder = embedder
        self.config = config
        self.reranker = reranker
        try:
            self.vectors: VectorLookup | None = VectorLookup(index)
        except (OSError, ValueError) as exc:  # an index without vectors/: re-embed instead
            log.warning("retrieval: chunk vectors unreadable (%s); dedup re-embeds passages", exc)
            self.vectors = None

    def search(self, text: str, sources: Sequence[str], k: int, node_id: str,
               state: PipelineState) -> list[Passage]:
        """Top-``k`` chunks for ``text`` over ``sources``, best first: by cosine, plus the BM25
        share of ``retrieval.lexical_weight`` where the index has its full-text table."""
        if not sources:
            raise ValidationError("retrieval: no source to search (routing selected none and the "
                                  "index has none); check the index and routing.router.fallback_source")
        q = embed(state, self.embedder, [text])
        dense = self.index.search(q, list(sources), k=k)[0]
        w = self.config.lexical_weight
        if w <= 0:
            return [_passage(h, node_id) for h in dense]
        if not self.index.has_lexical:
            if not self._noted_no_lexical(state):
                state.trace.note("retrieval: the index has no full-text table (built before lexical search); "
                                 "dense search only. Rebuild it with `searchsmith index` for hybrid search, or "
                                 "set retrieval.lexical_weight: 0")
            return [_passage(h, node_id) for h in dense]
        return [_passage(h, node_id) for h in self._hybrid(text, q[0], dense, list(sources), k, state)]

    @staticmethod
    def _noted_no_lexical(state: PipelineState) -> bool:
        return any(n.startswith("retrieval: the index has no full-text table") for n in state.trace.notes)

    def _hybrid(self, text: str, q: np.ndarray, dense: list[Hit], sources: list[str], k: int,
                state: PipelineState) -> list[Hit]:
        """The dense and lexical candidates scored ``cosine + lexical_weight * share`` (the share
        of the query's BM25 ceiling a chunk reaches, ``Index.lexical``; nothing below
        ``lexical_min_cosine``), the best ``k``; a hit's score is that sum."""
        with state.trace.stage("retrieval.lexical"):  # timed, not a model call
            try:
                lexical = self.index.lexical(text, sources, k=self.config.lexical_k or self.config.retrieve_k)
            except Exception as exc:  # noqa: BLE001 - a damaged full-text table: the dense hits still answer
                state.trace.note(f"retrieval: lexical search failed ({type(exc).__name__}: {exc}); dense search "
                                 "only (rebuild the index, or set retrieval.lexical_weight: 0)")
                return dense
        if not lexical:
            return dense
        cosine = {h.row: h.score for h in dense}
        extra = [h for h in lexical if h.row not in cosine]
        if extra:
            vecs = self.vectors.get([h.row for h in extra]) if self.vectors else None
            if vecs is None:
                vecs = embed(state, self.embedder, [chunk_text(h.chunk) for h in extra])
            cosine.update(zip((h.row for h in extra), (vecs @ q).tolist()))
        score = fuse_lexical(cosine, {h.row: h.score for h in lexical}, self.config.lexical_weight,
                             self.config.lexical_min_cosine)
        fused = [replace(h, score=score[h.row]) for h in (*dense, *extra)]
        return sorted(fused, key=lambda h: (-h.score, h.row))[:k]

    def titled(self, name: str, state: PipelineState, node_id: str = "") -> list[Passage]:
        """The passages titled ``name`` in the routed sources (``Index.titled``: a lookup by
        name, at most ``retrieval.titled_k``), for a bridge the answer's sentences name
        (``generation.extractive.bridge_lookup``)."""
        return [_passage(h, node_id) for h in self.index.titled(name, self._routed(state), limit=self.config.titled_k)]

    def near(self, text: str, k: int, state: PipelineState, node_id: str = "") -> list[Passage]:
        """The ``k`` chunks closest to ``text`` in the routed sources, for a bridge no passage is
        titled with (``generation.extractive.bridge_search``)."""
        return self.search(text, self._routed(state), k, node_id, state)

    def everywhere(self, text: str, k: int, state: PipelineState, node_id: str = "") -> list[Passage]:
        """The ``k`` chunks closest to ``text`` in every source of the index, routed or not, for a
        relation the routed sources' passages do not state
        (``generation.extractive.relation_search``)."""
        return self.search(text, list(self.index.sources), k, node_id, state)

    def _routed(self, state: PipelineState) -> list[str]:
        """The sources routing chose for ``state``'s question, else every source of the index."""
        return list(state.sources or self.index.sources)

    def dedup(self, passages: list[Passage], state: PipelineState) -> list[Passage]:
        """Greedy near-duplicate removal in rank order (cosine >= ``dedup_threshold``)."""
        if len(passages) < 2:
            return passages
        vecs = self.vectors.get([p.row for p in passages]) if self.vectors else None
        if vecs is None:
            vecs = embed(state, self.embedder, [p.text for p in passages])
        keep = dedup_keep_mask(vecs, self.config.dedup_threshold)
        return [p for p, k in zip(passages, keep) if k]

    def select(self, passages: list[Passage]) -> list[Passage]:
        """The best ``keep_ratio`` (never fewer than ``min_keep``) by score."""
        n = len(passages)
        keep = min(n, max(self.config.min_keep, math.ceil(n * self.config.keep_ratio)))
        return sorted(passages, key=lambda p: -p.score)[:keep]

    def rerank(self, question: str, passages: list[Passage], state: PipelineState) -> list[Passage]:
        """Reorder by the reranker bundle's scores (the retrieval order without one); a bundle
        with a ``retrieval_mix`` is mixed with the passages' retrieval scores at its share (the
        trace notes a share measured at another ``retrieval.lexical_weight``)."""
        if self.reranker is None or len(passages) < 2:
            return passages
        mix = getattr(self.reranker, "retrieval_mix", None)
        try:
            texts = [p.text for p in passages]
            raw, tokens, _ = counted_call(self.reranker.score, question, texts,
                                          words=lambda: sum(estimate_tokens(question) + estimate_tokens(t) for t in texts))
            scores = np.asarray(raw, dtype=np.float32)
            if mix is not None and mix.cross_weight < 1:
                # the bundle's calibrated share against the retrieval score (models/rerank_mix.py)
                scores = mix.apply(scores, [p.score for p in passages]).astype(np.float32)
                if abs(mix.lexical_weight - self.config.lexical_weight) > 1e-9:
                    note = (f"rerank: the reranker's share {mix.cross_weight:g} was measured against cosine + "
                            f"{mix.lexical_weight:g} x BM25 share; this pipeline retrieves with "
                            f"retrieval.lexical_weight {self.config.lexical_weight:g}")
                    if note not in state.trace.notes:  # once per answer, not per node
                        state.trace.note(note)
        except Exception as exc:  # noqa: BLE001 - keep the retrieval order
            state.trace.note(f"retrieval: rerank failed ({type(exc).__name__}: {exc}); kept the retrieval order")
            return passages
        state.trace.count("rerank", 1, tokens)
        rescored = [replace(p, score=float(s)) for p, s in zip(passages, scores)]
        return sorted(rescored, key=lambda p: -p.score)

    def retrieve(self, text: str, sources: Sequence[str], node_id: str, state: PipelineState,
                 preset: Preset) -> list[Passage]:
        """Search -> dedup -> keep best ``keep_ratio`` -> rerank -> lost-in-the-middle order."""
        # None (not 0: Preset refuses it) means the retrieval section's
        k = self.config.retrieve_k if preset.retrieve_k is None else preset.retrieve_k
        with state.trace.stage("retrieval.search"):
            found = self.search(text, sources, k, node_id, state)
        with state.trace.stage("retrieval.select"):
            kept = self.select(self.dedup(found, state))
        with state.trace.stage("rerank") as st:
            if preset.rerank and self.reranker is not None:
                kept = self.rerank(text, kept, state)
            else:
                st.skipped = True
        return self.order(kept)

    def order(self, ranked: list[Passage]) -> list[Passage]:
        """Lost-in-the-middle order of best-first passages (``edge_order``), else best first."""
        return lost_in_the_middle(ranked) if self.config.edge_order else list(ranked)

    def compress(self, passages: list[Passage], anchors: Sequence[str], state: PipelineState) -> list[Passage]:
        """Planning, after a round: keep the passages and sentences closest to ``anchors``.

        Args:
            passages: accumulated so far.
            anchors: the question and the answers found so far.
        """
        if not passages:
            return passages
        anchor_vecs = embed(state, self.embedder, list(anchors))  # (A, D)
        scored = []
        for p in passages:
            sents = sentences(p.text) or [p.text]
            sims = embed(state, self.embedder, sents) @ anchor_vecs.T  # (S, A)
            best = sims.max(axis=1)  # (S,)
            top = sorted(np.argsort(-best)[: self.config.compress_sentences].tolist())
            text = " ".join(sents[i] for i in top)
            scored.append((float(best.max()), replace(p, text=text)))
        n = len(scored)
        keep = min(n, max(self.config.min_keep, math.ceil(n * self.config.keep_ratio)))
        scored.sort(key=lambda t: -t[0])
        return [p for _, p in scored[:keep]]


class RetrievalStage:
    """Reads the graph, strategy and sources; writes ``nodes``, ``passages``, ``node_answers``."""

    name = "retrieval"
    reads = ("query", "rewrite", "graph", "strategy", "sources")
    writes = ("nodes", "passages", "node_answers")

    def __init__(self, retriever: Retriever, config: DecompositionConfig,
                 answer_node: NodeAnswerer) -> None:
        self.retriever = retriever
        self.config = config
        self.answer_node = answer_node
        self._pool = ThreadPoolExecutor(max_workers=config.parallel_workers, thread_name_prefix="node")

    def _run_node(self, node: NodeResult, state: PipelineState, preset: Preset) -> NodeResult:
        node.passages = self.retriever.retrieve(node.text, state.sources, node.id, state, preset)
        return node

    @staticmethod
    def _own_words(nr: NodeResult, terms: str) -> str:
        """A searched step's text without the history terms every step carries."""
        return nr.text[: -len(terms)] if terms and nr.text.endswith(terms) else nr.text

    def _answers_parent(self, nr: NodeResult, last_round: int, has_children: set[str], terms: str) -> bool:
        """Whether a searched step is answered: it has children searched after it, and it does
        more than name what it refers to (``names_fill_with_text``)."""
        return nr.id in has_children and nr.round < last_round and not (
            self.config.names_fill_with_text and names_itself(self._own_words(nr, terms)))

    def _at_once(self, graph: QDG, rounds: list[list[QDGNode]], terms: str, state: PipelineState,
                 preset: Preset) -> tuple[list[NodeResult], list[Passage], dict[str, str], str]:
        """``parallel_fill: text`` / ``both``: every step's ``#k`` filled with its parent's words
        (:func:`~searchsmith.models.qdg.described`), all steps searched in one concurrent round,
        the parents answered afterwards; with ``both`` each child then searched again with its
        parents' answers, for the context. Returns ``(nodes, passages, answers, note)``."""
        fills: dict[str, str] = {}
        todo = []
        for r, level in enumerate(rounds):
            for n in level:
                nr = NodeResult(n.id, fill_references(n.text, fills), n.depends_on, round=r)
                fills[nr.id] = described(self._own_words(nr, terms))
                todo.append(nr)
        has_children = {d for n in graph.nodes for d in n.depends_on}
        answers: dict[str, str] = {}
        done = list(self._pool.map(lambda nr: self._run_node(nr, state, preset), todo))
        for nr in done:  # a parent's best sentence leads the answer (generation.chain_support)
            if self._answers_parent(nr, len(rounds) - 1, has_children, terms):
                nr.answer = answers[nr.id] = self.answer_node(nr.text, nr.passages, state)
        accumulated = [p for nr in done for p in nr.passages]
        note = ("steps searched at once, each #k filled with its parent step's words "
                f"(decomposition.parallel_fill: {self.config.parallel_fill})")
        if self.config.parallel_fill == "both":
            texts = {n.id: n.text for n in graph.nodes}
            again = [NodeResult(nr.id, fill_references(texts[nr.id], answers), nr.depends_on, nr.round)
                     for nr in done if any(d in answers for d in nr.depends_on)]
            for ar in self._pool.map(lambda nr: self._run_node(nr, state, preset), again):
                accumulated.extend(ar.passages)  # the context's, not the step's own reading
            if again:
                note += f"; step(s) {', '.join(ar.id for ar in again)} searched again with their parents' answers"
        return done, accumulated, answers, note

    def _by_levels(self, graph: QDG, rounds: list[list[QDGNode]], terms: str, state: PipelineState,
                   preset: Preset) -> tuple[list[NodeResult], list[Passage], dict[str, str], str]:
        """The levels in turn, each child's ``#k`` filled with its parent's answer (or its text,
        ``names_fill_with_text``); ``planning`` filters and compresses after each round.
        Returns ``(nodes, passages, answers, note)``."""
        question = state.question()
        has_children = {d for n in graph.nodes for d in n.depends_on}
        answers: dict[str, str] = {}
        fills: dict[str, str] = {}  # what replaces each #k: the step's answer, or its own text
        named: list[str] = []
        done: list[NodeResult] = []
        accumulated: list[Passage] = []
        for r, level in enumerate(rounds):
            todo = [NodeResult(n.id, fill_references(n.text, fills), n.depends_on, round=r) for n in level]
            if state.strategy == "parallel" and len(todo) > 1:
                results = list(self._pool.map(lambda nr: self._run_node(nr, state, preset), todo))
            else:
                results = [self._run_node(nr, state, preset) for nr in todo]
            for nr in results:
                if self._answers_parent(nr, len(rounds) - 1, has_children, terms):
                    nr.answer = answers[nr.id] = fills[nr.id] = self.answer_node(nr.text, nr.passages, state)
                elif nr.id in has_children and r + 1 < len(rounds):
                    fills[nr.id] = self._own_words(nr, terms)
                    named.append(nr.id)
                done.append(nr)
                accumulated.extend(nr.passages)
            if state.strategy == "planning":
                with state.trace.stage("retrieval.compress"):
                    accumulated = self.retriever.compress(accumulated, [question, *answers.values()], state)
        note = (f"step(s) {', '.join(named)} only name what they refer to: their text fills their children's #k "
                "(decomposition.names_fill_with_text)") if named else ""
        return done, accumulated, answers, note

    def run(self, state: PipelineState, preset: Preset) -> None:
        question = state.question()
        graph = state.graph if state.graph is not None else terminal(question)
        with state.trace.stage(self.name) as st:
            if state.strategy == "direct" or len(graph.nodes) == 1:
                rounds = [list(terminal(question).nodes)]
            else:
                rounds = levels(graph)
            if len(rounds) > self.config.max_rounds:
                dropped = sum(len(r) for r in rounds[self.config.max_rounds:])
                rounds = rounds[: self.config.max_rounds]
                st.note = f"max_rounds={self.config.max_rounds}: {dropped} deeper node(s) dropped"
                state.trace.note(f"retrieval: {st.note}")
            # the history terms every step carries (" (Lumen eviction)") are not a step's own words
            terms = appended_terms(state.query, question)[1]
            at_once = state.strategy == "parallel" and self.config.parallel_fill in ("text", "both")
            if at_once and len(rounds) > 1:
                done, accumulated, answers, note = self._at_once(graph, rounds, terms, state, preset)
            else:
                done, accumulated, answers, note = self._by_levels(graph, rounds, terms, state, preset)
            if note:
                st.note = f"{st.note}; {note}" if st.note else note
            state.nodes = done
            state.node_answers = answers
            state.passages = self.retriever.order(_merge(accumulated))
            if not state.passages:
                st.note = "no passage found"


def _merge(passages: list[Passage]) -> list[Passage]:
    """One passage per chunk (its best score), best first."""
    best: dict[str, Passage] = {}
    for p in passages:
        if p.chunk_id not in best or p.score > best[p.chunk_id].score:
            best[p.chunk_id] = p
    return sorted(best.values(), key=lambda p: -p.score)
