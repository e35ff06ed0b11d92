"""Recipe ``decomposer``: one model for ``rewrite:`` and ``decompose:``.

``model.arch: tagger`` (the CPU default) fine-tunes an encoder to tag each word of the
question with its depth in a tree of nested spans (:mod:`searchsmith.models.qdg_spans`): the
gold graphs are aligned to such spans first (``depths_from_graph``), those that are not
nested spans are left out of training (they stay in the held-out scoring), and rewrites come
from the rewrite tagger fitted after training. The other archs are seq2seq models trained
on the linearised graph and on the rewrite.

Data contract: ``data.sources`` names real sets under ``data.data_dir`` (../shared/data
layout: break_qdmr, musique, strategyqa, hotpotqa, trec_cast) and/or ``synthetic``; see
:mod:`searchsmith.training.decompose_data`. Examples are split by source question
(conversation for rewrites) with ``data.split_seed``; the held-out side is never trained on.

Metrics on the held-out split (``metrics.json`` -> ``final``), beside ``baselines``:

* ``decompose_validity``: share of generations that parse as a well-formed graph as written
  (no repair needed);
* ``decompose_type_acc`` (baseline: majority type of the training split),
  ``decompose_node_count_acc`` (baseline: majority node count);
* ``decompose_node_f1``: SQuAD token F1 of node texts aligned by position, averaged over
  ``max(#predicted, #gold)`` nodes per question (missing or extra nodes score 0); baseline:
  the ``terminal`` graph holding the question itself;
* ``rewrite_em`` / ``rewrite_f1`` against the human rewrite; baselines: copy the query, and
  the heuristic rewrite (what the pipeline does without the model);
* ``rewrite_retrieval_ndcg@10`` (and MRR, agreement): the retrieval each rewrite drives, for the
  held-out turns that carry their answer passage (CAsT 2021/2022), over those passages
  (:func:`retrieval_of_rewrites`); baselines: the raw query, the heuristic rewrite and, as the
  ceiling, the human rewrite. The pipeline's rewrite gate reads this figure against the
  heuristic's: rewrites are judged by the retrieval they drive.

With ``data.leave_out`` (sources, or ``trec_cast:YEAR``) those sets are held out whole and their
items scored again by themselves: ``ood/<metric>`` beside ``baselines/ood_<name>``, which the
decompose and rewrite gates read in place of the pooled figures when a bundle records them.

When real sources are present, only their held-out items are scored (synthetic ones would
flatter the figures); the same items are exported by ``python -m
searchsmith.training.decompose_data --out DIR`` for ``searchsmith eval decompose|rewrite``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.decomposer import (
    TAGGER,
    Decomposer,
    build_bert2bert,
    build_hub,
    build_tagger,
    build_tiny,
    type_head_json,
)
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.qdg import DEFAULT_MAX_NODES, QDG, terminal
from searchsmith.models.text import exact_match, token_f1
from searchsmith.training.config import RecipeConfig
from searchsmith.training.data import SHARED_DATA
from searchsmith.training.decompose_data import (
    REAL_SOURCES,
    conversation,
    is_heldout,
    left_out,
    load_real,
    split_examples,
    synthetic,
)
from searchsmith.training.registry import register_recipe

ALL_SOURCES = (*REAL_SOURCES, "synthetic")


@dataclass(frozen=True)
class DecomposerModelConfig:
    """Which model: ``arch`` encoder-decoder (bert2bert from ``base_model``), tiny (random,
    tests), seq2seq (any hub seq2seq, e.g. google/flan-t5-base) or causal (any causal LM).

    The limits saved in ``model/decomposer.json`` (``max_source_tokens``,
    ``max_target_tokens``, ``max_nodes``, ``num_beams``) are the served model's too.

    Attributes:
        base_model: the checkpoint the model starts from: for ``encoder-decoder`` a BERT-style
            encoder that warm-starts both the encoder and the decoder (``default``: the
            bundled all-MiniLM-L6-v2); for ``tiny`` only its tokenizer is used; for
            ``seq2seq`` / ``causal`` a local folder or hub id of such a model.
        arch: ``tagger`` (``base_model``'s encoder tags each question word with its depth in
            a tree of nested spans: every step is copied from the question; no decoder),
            ``tiny-tagger`` (its random-init one-layer twin for the tests),
            ``encoder-decoder`` (bert2bert), ``tiny`` (a random-init one-layer bert2bert
            that trains in seconds: the tests' twin), ``seq2seq`` (AutoModelForSeq2SeqLM) or
            ``causal`` (AutoModelForCausalLM). Constrained decoding and the type head need
            ``encoder-decoder`` or ``tiny``; the rewrite head any but ``causal``.
        joint_rewrite: ``tagger`` only: train the rewrite tags (O / REF / TGT, three more
            labels of the token head, on ``rewrite:`` inputs) together with the depths, and take
            the rewrite tagger from those labels; false: fit it on the trained encoder's frozen
            states afterwards (``rewrite_head_l2``), as for the seq2seq archs.
        tag_depth: ``tagger`` only: depth labels of the head (a word inside more nested
            steps than ``tag_depth - 1`` gets the deepest label); 4 covers 3 nested steps
            inside the question: 2,467 of the 2,470 aligned training graphs of the CPU default.
        tag_drop: ``tagger`` only: delete tags too: every depth label comes twice, the word
            kept in its step's text or left out of it (LaserTagger's keep / delete, learnt
            from the gold steps: "How many" of "number of #1", a "did", a "?";
            :func:`~searchsmith.models.qdg_spans.drops_from_graph`). The structure is the same;
            the steps' texts come closer to how the sets write them (Break's SARI, GED).
        tag_add_phrases: ``tagger`` with ``tag_drop`` only: add tags too (LaserTagger's add):
            each word may have a phrase written before it in its step ("number of" in place of
            a dropped "How many", "that", "when was"), one of the this many phrases the gold
            steps add most often in training (:func:`~searchsmith.models.qdg_spans.adds_from_graph`),
            predicted by this many + 1 more labels of the token head. 0: copy only.
        switch_penalties: ``tagger`` only: candidate costs (nats) of a change of depth between
            neighbouring words when the labels are decoded (Viterbi,
            :func:`~searchsmith.models.decomposer.depths_of`; 0: each word's argmax, which can
            cut a step into one-word pieces). With more than one candidate, the one of best
            node-text F1 on the calibration graphs (``data.calibration_ratio``, never trained
            on) is kept (ties: the smaller), saved as ``switch_penalty`` and used for the
            held-out figures and in serving.
        choice_template: ``tagger`` only: a question that offers its answers ("Which came
            first, A or B?") is decomposed by Break's comparison template (one step per
            option, then ``which is first of #1, #2``;
            :func:`~searchsmith.models.choice.choice_graph`) instead of its tags: the copy form
            cannot write it, and two options side by side read as one span. Used for the
            held-out figures and in serving (saved as ``choice_template``).
        decoder_layers: bert2bert only: keep the first N decoder layers (0 = as many as the
            base has, 6 for MiniLM); fewer make a faster step at some quality.
        init_cross_from_self: bert2bert only: start each decoder layer's new cross-attention
            as a copy of its pretrained self-attention instead of random weights.
        freeze_encoder: keep the encoder's weights fixed and train the rest; a cheaper step
            at some quality. No effect on a model without an encoder (``causal``).
        tiny_hidden: hidden size of the ``tiny`` and ``tiny-tagger`` models (ignored by the
            other archs).
        max_source_tokens: token limit of the model input (the prefixed question, or the
            prefixed conversation and query); longer inputs are truncated.
        max_target_tokens: token limit of a training target (longer ones are truncated) and
            of a generation (new tokens).
        max_nodes: largest graph: decompositions with more nodes are dropped from the
            training and held-out data, and generated graphs are cut to it (the graph
            grammar of constrained decoding allows at most 9).
        num_beams: beam width of generation (1 = greedy). Constrained decoding always
            decodes greedily, so it only applies when decoding unconstrained.
        eval_batch_size: sequences per ``generate`` call (and per encoder pass when the
            heads are fitted) in the held-out evaluation; speed and memory only.
        type_head_l2: L2 penalty of the type head's softmax regression (see ``type_head``).
        rewrite_head_l2: L2 penalty of the rewrite tagger's softmax regression (see
            ``rewrite_head``).
        rewrite_threshold: least REF probability of the best history token for the rewrite
            tagger to rewrite at all (else the query is kept as it is), and least TGT
            probability of the best query token for that span to replace query words (else
            it is added at the query's end). Higher: fewer, safer rewrites. In (0, 1); saved
            with the head.
        rewrite_extend: least probability of the neighbouring tokens a REF or TGT run grows
            over; lower copies longer spans. In (0, 1); saved with the head.
        rewrite_expand: what the rewrite tagger appends (QuReTeC-style term selection from the
            same REF probabilities, :func:`~searchsmith.models.rewrite_edit.head_rewrite`):
            ``terms`` (the query with the history words scored REF at
            ``rewrite_term_threshold`` or more appended in parentheses, as the heuristic
            rewrite appends its salient terms), ``fused`` (the edit rewrite with those words
            appended) or ``none`` (the edit alone). BM25 retrieval needs the words, not the
            sentence (serving/profiling/RESULTS.md, "Term selection for rewrites"). Saved with
            the head.
        rewrite_term_threshold: least REF probability of an appended history word, in (0, 1).
        rewrite_max_terms: most history words appended (best first).
        rewrite_max_drop: the largest share of a query's words the tagger's edit may drop
            (at least one always may); an edit that drops more is refused and the query
            kept: an edit replaces a reference, not the question. In (0, 1]; saved with the
            head.
        rewrite_references_only: the tagger's edit replaces only a query run that holds a
            word referring back (``it``, ``their``, ``the second``:
            :data:`~searchsmith.models.text.REFERENCE_WORDS`); an edit of other words is
            refused and the query kept. Saved with the head.
        rewrite_reply_words: words of the system's answer to the last turn that a rewrite
            input carries before the query (TREC CAsT 2021 / 2022's canonical responses in
            training; the pipeline's own last answer in serving), so that "Are the last two
            the same?" can take its referent from what the answer listed. 0: user turns only.
            The input is cut to ``max_source_tokens`` by shortening the answer, never the
            query. Tagger archs only; saved in ``decomposer.json``.
    """

    base_model: str = "default"
    arch: Literal["tagger", "tiny-tagger", "encoder-decoder", "tiny", "seq2seq", "causal"] = "encoder-decoder"
    tag_depth: int = 4
    tag_drop: bool = False
    tag_add_phrases: int = 0
    switch_penalties: list[float] = field(default_factory=lambda: [0.0])
    choice_template: bool = False
    joint_rewrite: bool = True
    decoder_layers: int = 0  # bert2bert: keep the first N decoder layers (0 = all 6)
    init_cross_from_self: bool = False  # bert2bert: cross-attention starts as a self-attention copy
    freeze_encoder: bool = False
    tiny_hidden: int = 32
    max_source_tokens: int = 96
    max_target_tokens: int = 64
    max_nodes: int = DEFAULT_MAX_NODES
    num_beams: int = 1
    eval_batch_size: int = 32
    # Decode under the graph grammar / copy constraint of searchsmith.models.constrained
    # (WordPiece tokenizers: the bert2bert default and the tiny twin).
    constrained: bool = True
    # Words a target may add to its source: the most frequent such tokens of the training
    # targets, per task (0 = copy only).
    output_vocab_size: int = 300
    # What the model writes for rewrite:, "edit" (only the changed words: "it => mars", see
    # searchsmith.models.rewrite_edit) or "full" (the whole standalone question).
    rewrite_target: Literal["edit", "full"] = "edit"
    # Fit a softmax-regression type head on the encoder's pooled states at each evaluation
    # and force the decoded graph type to it (constrained decoding only); its L2 penalty
    # (chosen on a split of the training questions: 1e-2 0.790, 1e-3 0.776, 1e-4 0.759).
    type_head: bool = True
    type_head_l2: float = 1.0e-2
    # Rewrite with a token tagger over the encoder's states (REF words of the history replace
    # TGT words of the query; searchsmith.models.rewrite_edit.tag_rewrite) instead of the
    # decoder; fit at each evaluation like the type head. Its run thresholds: the least
    # REF/TGT probability of a run's best token, and of the tokens a run grows over.
    rewrite_head: bool = True
    rewrite_head_l2: float = 1.0e-3
    rewrite_threshold: float = 0.3
    rewrite_extend: float = 0.15
    rewrite_expand: Literal["none", "terms", "fused"] = "terms"
    rewrite_term_threshold: float = 0.1
    rewrite_max_terms: int = 8
    rewrite_max_drop: float = 0.25
    rewrite_references_only: bool = True
    rewrite_reply_words: int = 0

    def __post_init__(self) -> None:
        if self.type_head_l2 < 0 or self.rewrite_head_l2 < 0:
            raise ValueError(f"model.type_head_l2 and model.rewrite_head_l2 must be >= 0, got "
                             f"{self.type_head_l2} and {self.rewrite_head_l2}")
        for name in ("rewrite_threshold", "rewrite_extend", "rewrite_term_threshold"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"model.{name} must be in (0, 1), got {getattr(self, name)}")
        if not 0.0 < self.rewrite_max_drop <= 1.0:
            raise ValueError(f"model.rewrite_max_drop must be in (0, 1] (a share of the query's words), got "
                             f"{self.rewrite_max_drop}")
        if self.rewrite_max_terms < 1:
            raise ValueError(f"model.rewrite_max_terms must be >= 1, got {self.rewrite_max_terms}")
        if self.output_vocab_size < 0:
            raise ValueError(f"model.output_vocab_size must be >= 0, got {self.output_vocab_size}")
        for name in ("max_source_tokens", "max_target_tokens", "max_nodes", "num_beams",
                     "eval_batch_size", "tiny_hidden", "tag_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.rewrite_reply_words < 0:
            raise ValueError(f"model.rewrite_reply_words must be >= 0 (0 = user turns only), got "
                             f"{self.rewrite_reply_words}")
        if self.rewrite_reply_words and self.arch not in ("tagger", "tiny-tagger"):
            raise ValueError(f"model.rewrite_reply_words needs model.arch tagger (or tiny-tagger), got {self.arch!r}: "
                             "set it to 0")
        if self.tag_add_phrases < 0:
            raise ValueError(f"model.tag_add_phrases must be >= 0 (0 = no add tags), got {self.tag_add_phrases}")
        if self.tag_add_phrases and not (self.tag_drop and self.arch in ("tagger", "tiny-tagger")):
            raise ValueError("model.tag_add_phrases needs model.arch tagger (or tiny-tagger) with model.tag_drop: true "
                             f"(got arch {self.arch!r}, tag_drop {self.tag_drop})")
        if self.choice_template and self.arch not in ("tagger", "tiny-tagger"):
            raise ValueError(f"model.choice_template needs model.arch tagger (or tiny-tagger), got {self.arch!r}: "
                             "set it to false")
        if self.decoder_layers < 0:
            raise ValueError(f"model.decoder_layers must be >= 0 (0 = all), got {self.decoder_layers}")
        if not self.switch_penalties or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in self.switch_penalties):
            raise ValueError("model.switch_penalties must list one or more numbers >= 0 (0 = argmax decoding), "
                             f"got {self.switch_penalties!r}")


@dataclass(frozen=True)
class DecomposerDataConfig:
    """Where examples come from and how they are split.

    Attributes:
        data_dir: folder of the real sets in the ../shared/data layout
            (``break_qdmr/dev.jsonl``, ``musique/``, ``strategyqa/``, ``hotpotqa/``,
            ``trec_cast/``); as given, else against the repository root; read only when a
            real source is named.
        sources: the sets to train and evaluate on: ``break_qdmr``, ``musique``,
            ``strategyqa``, ``hotpotqa`` (decompositions), ``trec_cast`` (conversational
            rewrites) and ``synthetic`` (template examples over invented entities; no files).
        synthetic_decompose: generated decomposition examples (terminal, chain and split
            graphs) when ``synthetic`` is a source.
        synthetic_rewrite: generated rewrite examples (a pronoun follow-up resolved against
            the first turn) when ``synthetic`` is a source.
        heldout_ratio: expected share of examples held out, decided per source question
            (per conversation for rewrites) by a seeded hash, so the held-out side is never
            trained on; in (0, 1).
        rewrite_heldout_ratio: the share of conversations held out for rewrites, when it
            differs from ``heldout_ratio`` (None: the same). The rewrite gate reads the
            retrieval of the held-out CAsT turns that carry an answer passage, a few dozen at
            0.1: a larger share buys the paired test its power at the cost of training
            conversations. The hash is the same, so the conversations held out at 0.1 are held
            out at any larger share too; in (0, 1).
        split_seed: seed of the split hash and of the synthetic examples; another value
            gives another split.
        max_history_turns: conversation turns kept in a rewrite input: the first and the
            last N - 1 (0: none), so a long conversation does not push the query out of
            ``model.max_source_tokens``; saved in ``decomposer.json`` for serving.
        calibration_ratio: share of the training decompositions (by source question, seeded
            hash) kept out of training to choose ``model.switch_penalties`` on; in [0, 1).
            0: none (then ``model.switch_penalties`` must have one value).
        leave_out: sets held out whole, never trained or calibrated on: sources of
            ``sources`` (``break_qdmr``, ``hotpotqa`` ...) or ``trec_cast:YEAR`` (one year's
            CAsT conversations). Their held-out items are also scored apart, as ``ood/...``
            beside the baselines on them (``baselines/ood_...``), and the decompose and rewrite
            gates read those: how the model does on questions of a kind it never saw.
    """

    data_dir: str = SHARED_DATA
    sources: list[str] = field(default_factory=lambda: list(ALL_SOURCES))
    synthetic_decompose: int = 300
    synthetic_rewrite: int = 150
    heldout_ratio: float = 0.1
    rewrite_heldout_ratio: float | None = None
    split_seed: int = 0
    max_history_turns: int = 3
    # Rewrite pairs are ~700 against ~2,800 decompositions: repeat them so both tasks are seen.
    rewrite_repeat: int = 2
    # Held-out items generated at each intermediate eval (0 = all); the final eval uses all.
    eval_limit: int = 64
    calibration_ratio: float = 0.0
    leave_out: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.leave_out:
            source, colon, year = str(name).partition(":")
            if source not in self.sources or source == "synthetic" or (
                    colon and not (source == "trec_cast" and year.isdigit())):
                raise ValueError(f"data.leave_out: {name!r} is not a real source of data.sources {self.sources} "
                                 "(or trec_cast:YEAR, one year of CAsT conversations); name sets to hold out")
        if not self.sources:
            raise ValueError(f"data.sources must name at least one of {list(ALL_SOURCES)}")
        bad = [s for s in self.sources if s not in ALL_SOURCES]
        if bad:
            raise ValueError(f"data.sources: unknown {bad}; expected some of {list(ALL_SOURCES)}")
        if not 0 < self.heldout_ratio < 1:
            raise ValueError(f"data.heldout_ratio must be in (0, 1), got {self.heldout_ratio}")
        if self.rewrite_heldout_ratio is not None and not 0 < self.rewrite_heldout_ratio < 1:
            raise ValueError(f"data.rewrite_heldout_ratio must be in (0, 1) (or null: data.heldout_ratio), "
                             f"got {self.rewrite_heldout_ratio}")
        for name in ("synthetic_decompose", "synthetic_rewrite", "eval_limit", "max_history_turns"):
            if getattr(self, name) < 0:
                raise ValueError(f"data.{name} must be >= 0, got {getattr(self, name)}")
        if self.rewrite_repeat < 1:
            raise ValueError(f"data.rewrite_repeat must be >= 1, got {self.rewrite_repeat}")
        if not 0 <= self.calibration_ratio < 1:
            raise ValueError(f"data.calibration_ratio must be in [0, 1), got {self.calibration_ratio}")


@dataclass(frozen=True)
class DecomposerRecipe(RecipeConfig):
    """The ``decomposer`` recipe config (YAML key = field name = override path).

    Attributes:
        recipe: the registered recipe name; must be ``decomposer``.
        output_dir: the run folder (relative to the current folder): ``checkpoints/``,
            ``model/`` (with ``decomposer.json``), ``metrics.json``, ``run.json``. Rerunning
            with the same config resumes from its newest checkpoint. ``--output-dir``
            overrides it; it is left out of the config hash.
    """

    recipe: str = "decomposer"
    output_dir: str = "runs/decomposer"
    model: DecomposerModelConfig = field(default_factory=DecomposerModelConfig)
    data: DecomposerDataConfig = field(default_factory=DecomposerDataConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.model.switch_penalties) > 1 and not self.data.calibration_ratio:
            raise ValueError(f"model.switch_penalties lists {len(self.model.switch_penalties)} candidates but "
                             "data.calibration_ratio is 0: set it (0.1) to choose on graphs never trained on, "
                             "or give one value")


# --------------------------------------------------------------------------- data


def load_examples(data: DecomposerDataConfig, seed: int = 0) -> list[dict[str, Any]]:
    """All examples of ``data.sources`` (real ones read from ``data.data_dir``)."""
    from searchsmith.training.data import resolve_data_path

    out: list[dict[str, Any]] = []
    real = [s for s in data.sources if s != "synthetic"]
    if real:
        root = resolve_data_path(data.data_dir, "data.data_dir", folder=True)
        for name in real:
            out += load_real(name, root, data.max_history_turns)
    if "synthetic" in data.sources:
        out += synthetic(data.synthetic_decompose, data.synthetic_rewrite, seed=seed,
                         max_history_turns=data.max_history_turns)
    return out


def calibration_split(train: Sequence[dict[str, Any]], seed: int,
                      ratio: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, calibration): the decompositions of a ``ratio`` share of the training source
    questions (seeded hash by group, another seed than the held-out split's) set apart; rewrites
    stay in training. ``ratio`` 0: nothing set apart."""
    if ratio <= 0:
        return list(train), []
    keep, calib = [], []
    for e in train:
        apart = e["task"] == "decompose" and is_heldout(f"calibration:{e['group']}", seed, ratio)
        (calib if apart else keep).append(e)
    return keep, calib


def choose_switch_penalty(dec: Decomposer, items: Sequence[dict[str, Any]],
                          candidates: Sequence[float]) -> tuple[float, dict[str, float]]:
    """The candidate of best node-text F1 on ``items`` (ties: the smaller), and each one's F1
    (``dec.switch_penalty`` is left as it was)."""
    golds = [QDG.from_json(e["graph"]) for e in items]
    before, scores = dec.switch_penalty, {}
    try:
        for c in sorted(set(float(x) for x in candidates)):
            dec.switch_penalty = c
            preds = dec.decompose_batch([e["query"] for e in items])
            scores[c] = decompose_metrics([(g, v) for g, v, _ in preds], golds)["decompose_node_f1"]
    finally:
        dec.switch_penalty = before
    best = max(scores, key=lambda c: (round(scores[c], 9), -c))
    return best, {f"{c:g}": f for c, f in scores.items()}


def make_splits(cfg: DecomposerRecipe) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(train, held-out, dropped): graphs over ``model.max_nodes`` nodes are dropped from both."""
    examples = load_examples(cfg.data, seed=cfg.data.split_seed)
    keep = [e for e in examples if e["task"] != "decompose"
            or len(e["graph"]["nodes"]) <= cfg.model.max_nodes]
    ratios = {} if cfg.data.rewrite_heldout_ratio is None else {"rewrite": cfg.data.rewrite_heldout_ratio}
    train, heldout = split_examples(keep, cfg.data.split_seed, cfg.data.heldout_ratio, ratios, cfg.data.leave_out)
    if not train:
        raise ValidationError(
            f"decomposer: no training examples from data.sources={cfg.data.sources} (check "
            "data.data_dir, or add 'synthetic' to data.sources)")
    if not heldout:
        raise ValidationError(
            f"decomposer: the held-out split is empty ({len(train)} training examples, "
            f"data.heldout_ratio={cfg.data.heldout_ratio}); raise the ratio or add data")
    return train, heldout, len(examples) - len(keep)


def _bucketed(pool: list[dict[str, Any]], batch_size: int, rng: random.Random,
              key: Callable[[dict[str, Any]], Any], by_task: bool = False) -> list[list[dict[str, Any]]]:
    """``pool`` shuffled, sorted by ``key`` within windows of 32 batches, cut into batches of
    ``batch_size`` (with ``by_task``, a batch of two tasks is split in two), and the batches
    shuffled."""
    rng.shuffle(pool)
    window = batch_size * 32
    chunks = []
    for start in range(0, len(pool), window):
        block = sorted(pool[start:start + window], key=key)
        for i in range(0, len(block), batch_size):
            chunk = block[i:i + batch_size]
            tasks = dict.fromkeys(e["task"] for e in chunk) if by_task else [None]
            chunks += [[e for e in chunk if t is None or e["task"] == t] for t in tasks]
    rng.shuffle(chunks)
    return chunks


def batches(examples: Sequence[dict[str, Any]], dec: Decomposer, batch_size: int, seed: int,
            epoch: int, rewrite_repeat: int = 1) -> Iterator[dict[str, Any]]:
    """Seeded micro-batches for one epoch: shuffled, then length-bucketed to cut padding.

    Same ``(seed, epoch)`` -> same batches, which resuming relies on. The tagger trains on the
    decompositions that :func:`tag_examples` aligned (their ``depths``) only.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    if dec.arch == TAGGER:
        # depths on the aligned decompositions; with joint rewrite tags (a head of more labels
        # than depths) also the rewrites that have history, in batches of their own
        tagged = [e for e in examples if e.get("depths") is not None]
        if dec.model.config.num_labels > dec.tag_depth + dec.add_labels:
            tagged += [e for e in examples for _ in range(rewrite_repeat)
                       if e["task"] == "rewrite" and e["history"]]
        for group in _bucketed(tagged, batch_size, rng, lambda e: (e["task"], len(e["source"])), by_task=True):
            if group[0]["task"] == "decompose":
                yield dec.prepare_tag_batch([e["query"] for e in group], [e["depths"] for e in group],
                                            [e.get("adds") or [] for e in group] if dec.add_phrases else None)
            else:
                yield dec.prepare_rewrite_tag_batch([(conversation(e), e["query"], e["target"]) for e in group])
        return
    pool = [e for e in examples for _ in range(rewrite_repeat if e["task"] == "rewrite" else 1)]
    pool = [{**e, "target": dec.target_for(e)} for e in pool]
    for chunk in _bucketed(pool, batch_size, rng, lambda e: len(e["source"]) + len(e["target"])):
        yield dec.prepare_batch([e["source"] for e in chunk], [e["target"] for e in chunk])


# --------------------------------------------------------------------------- metrics


def node_f1(pred: QDG, gold: QDG) -> float:
    """Position-aligned token F1 of node texts over ``max(len(pred), len(gold))`` nodes."""
    n = max(len(pred.nodes), len(gold.nodes))
    total = sum(token_f1(p.text, g.text) for p, g in zip(pred.nodes, gold.nodes, strict=False))
    return total / n if n else 0.0


def decompose_metrics(preds: Sequence[tuple[QDG, bool]], golds: Sequence[QDG]) -> dict[str, float]:
    """validity, type accuracy, node-count accuracy and node F1 of predictions vs gold graphs."""
    if not golds:
        return {}
    n = len(golds)
    return {
        "decompose_validity": sum(v for _, v in preds) / n,
        "decompose_type_acc": sum(p.type == g.type for (p, _), g in zip(preds, golds, strict=True)) / n,
        "decompose_node_count_acc": sum(len(p.nodes) == len(g.nodes)
                                        for (p, _), g in zip(preds, golds, strict=True)) / n,
        "decompose_node_f1": sum(node_f1(p, g) for (p, _), g in zip(preds, golds, strict=True)) / n,
        "decompose_items": float(n),
    }


def rewrite_metrics(preds: Sequence[str], golds: Sequence[str]) -> dict[str, float]:
    """Exact match and token F1 of rewrites against the human rewrites."""
    if not golds:
        return {}
    n = len(golds)
    return {
        "rewrite_em": sum(exact_match(p, g) for p, g in zip(preds, golds, strict=True)) / n,
        "rewrite_f1": sum(token_f1(p, g) for p, g in zip(preds, golds, strict=True)) / n,
        "rewrite_items": float(n),
    }


def _retrieval_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": e.get("id", n), "query": e["query"], "rewrite": e["target"], "passage": e.get("passage")}
            for n, e in enumerate(items)]


def rewrite_passages(examples: Sequence[dict[str, Any]]) -> list[str]:
    """The distinct answer passages of the rewrite examples (CAsT 2021/2022 turns carry one)."""
    return list(dict.fromkeys(e["passage"] for e in examples if e.get("task") == "rewrite" and e.get("passage")))


def retrieval_of_rewrites(items: Sequence[dict[str, Any]], rewrites: Sequence[str],
                          extra_docs: Sequence[str] = ()) -> dict[str, float]:
    """The retrieval figures of ``rewrites`` (one per held-out rewrite item) by
    :func:`searchsmith.training.evaluate.rewrite_retrieval`, over the items' own answer
    passages (the earlier turns of a topic are the hard distractors) plus ``extra_docs`` (the
    recipe passes the training split's passages: documents, not labels); {} when no item has
    a passage."""
    from searchsmith.training.evaluate import rewrite_retrieval

    metrics, _ = rewrite_retrieval(_retrieval_rows(items), list(rewrites), extra_docs)
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


COUNTS = ("_turns", "_documents")  # retrieval keys that count, the same for every rewrite

#: the paired comparison of a model's rewrites with the heuristic rewrite's, per held-out turn
#: (``<GAIN_KEY>_diff``, ``_lo``, ``_hi``, ``_p``, ``_n`` and ``_direction``): the rewrite gate
#: needs ``_direction`` +1, above the heuristic beyond the noise (a few dozen turns)
GAIN_KEY = "rewrite_retrieval_ndcg@10_vs_heuristic"
#: the same for decompositions: node-text F1 against keeping the question as one node, per
#: held-out question (the decompose gate needs ``_direction`` +1)
NODE_GAIN_KEY = "decompose_node_f1_vs_terminal"
#: the figures of the held-out items of the sets left out of training (``data.leave_out``)
OOD_PREFIX = "ood/"


def _user_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"history": conversation(e), "query": e["query"]} for e in items]


def gain_of_rows(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The paired comparison, turn by turn, of the model's retrieval nDCG@10 with the heuristic
    rewrite's in per-turn rows of :func:`~searchsmith.training.evaluate.rewrite_retrieval` run
    with ``others={"heuristic": ...}``: the mean difference, its bootstrap interval, sign-flip
    p-value and direction (:func:`searchsmith.models.stats.direction`: +1 above beyond the
    noise, -1 below, 0 inside it), named ``<GAIN_KEY>_*``; {} without rows."""
    from searchsmith.models.stats import paired_figures

    return paired_figures(GAIN_KEY, [r["rewrite_retrieval_ndcg@10_heuristic"] for r in rows],
                          [r["rewrite_retrieval_ndcg@10"] for r in rows])


def _retrieval_with_heuristic(items: Sequence[dict[str, Any]], rewrites: Sequence[str],
                              extra_docs: Sequence[str] = ()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """:func:`~searchsmith.training.evaluate.rewrite_retrieval` of ``rewrites`` beside the
    heuristic rewrite of the same items, in one ranking pass."""
    from searchsmith.training.evaluate import heuristic_rewrites, rewrite_retrieval

    return rewrite_retrieval(_retrieval_rows(items), list(rewrites), extra_docs,
                             others={"heuristic": heuristic_rewrites(_user_rows(items))})


def rewrite_gain(items: Sequence[dict[str, Any]], rewrites: Sequence[str],
                 extra_docs: Sequence[str] = ()) -> dict[str, float]:
    """``rewrites`` against the heuristic rewrite of the same held-out items, turn by turn
    (:func:`gain_of_rows` over :func:`retrieval_of_rewrites`' protocol); {} when no item has a
    passage."""
    return gain_of_rows(_retrieval_with_heuristic(items, rewrites, extra_docs)[1])


def heuristic_rewrite_figures(items: Sequence[dict[str, Any]], extra_docs: Sequence[str] = ()) -> dict[str, float]:
    """Token F1 and retrieval of the pipeline's no-model rewrite (the fallback the rewrite gate
    compares against), named ``*_heuristic``; the raw query's and the human rewrite's
    retrieval come with it (``*_copy_query``, ``*_manual``)."""
    from searchsmith.training.evaluate import heuristic_rewrites

    heur = heuristic_rewrites(_user_rows(items))
    out = {"rewrite_f1_heuristic": rewrite_metrics(heur, [e["target"] for e in items])["rewrite_f1"]}
    for key, value in retrieval_of_rewrites(items, heur, extra_docs).items():
        if key.endswith(("_copy_query", "_manual", *COUNTS)):
            out[key] = value
        else:
            out[f"{key}_heuristic"] = value
    return out


def baselines(train: Sequence[dict[str, Any]], heldout: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Untrained references on the held-out split (see the module docstring)."""
    out: dict[str, float] = {}
    dec_train = [e for e in train if e["task"] == "decompose"]
    dec_held = [e for e in heldout if e["task"] == "decompose"]
    if dec_train and dec_held:
        major_type = Counter(e["graph"]["type"] for e in dec_train).most_common(1)[0][0]
        major_n = Counter(len(e["graph"]["nodes"]) for e in dec_train).most_common(1)[0][0]
        golds = [QDG.from_json(e["graph"]) for e in dec_held]
        out["decompose_type_acc_majority"] = sum(g.type == major_type for g in golds) / len(golds)
        out["decompose_node_count_acc_majority"] = sum(len(g.nodes) == major_n for g in golds) / len(golds)
        out["decompose_node_f1_question_as_terminal"] = sum(
            node_f1(terminal(e["query"]), g) for e, g in zip(dec_held, golds, strict=True)) / len(golds)
    rw_held = [e for e in heldout if e["task"] == "rewrite"]
    if rw_held:
        copy = rewrite_metrics([e["query"] for e in rw_held], [e["target"] for e in rw_held])
        out["rewrite_em_copy_query"] = copy["rewrite_em"]
        out["rewrite_f1_copy_query"] = copy["rewrite_f1"]
        out.update(heuristic_rewrite_figures(rw_held, rewrite_passages(train)))
    return out


def ood_baselines(train: Sequence[dict[str, Any]], heldout: Sequence[dict[str, Any]],
                  leave_out: Sequence[str]) -> dict[str, float]:
    """:func:`baselines` on the held-out items of the sets left out of training, as
    ``ood_<name>`` ({} when none is)."""
    ood = [e for e in heldout if left_out(e, leave_out)] if leave_out else []
    return {f"ood_{k}": v for k, v in baselines(train, ood).items()} if ood else {}


def evaluate_with_ood(dec: Decomposer, heldout: Sequence[dict[str, Any]], leave_out: Sequence[str],
                      limit: int = 0, extra_docs: Sequence[str] = ()) -> dict[str, float]:
    """:func:`evaluate` of ``heldout`` and, with ``leave_out`` sets, of their items alone as
    ``ood/<metric>`` (the figures the gates read when a run left sets out); ``limit`` applies
    to each."""
    ood = [e for e in heldout if left_out(e, leave_out)] if leave_out else []
    if ood:
        dec = _Remembered(dec)  # the left-out items are generated once, for both figures
    out = evaluate(dec, heldout, limit=limit, extra_docs=extra_docs)
    if ood:
        out.update({OOD_PREFIX + k: v for k, v in evaluate(dec, ood, limit=limit, extra_docs=extra_docs).items()})
    return out


class _Remembered:
    """A decomposer whose ``decompose_batch`` and ``rewrite_batch`` remember their outputs per
    input (generation is deterministic), so a second :func:`evaluate` over some of the same
    items generates only the ones it has not seen; every other attribute is the decomposer's."""

    def __init__(self, dec: Any) -> None:
        self._dec = dec
        self._graphs: dict[str, Any] = {}
        self._rewrites: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dec, name)

    def decompose_batch(self, queries: Sequence[str]) -> list[Any]:
        new = list(dict.fromkeys(q for q in queries if q not in self._graphs))
        if new:
            self._graphs.update(zip(new, self._dec.decompose_batch(new), strict=True))
        return [self._graphs[q] for q in queries]

    def rewrite_batch(self, items: Sequence[tuple[Any, str]]) -> list[str]:
        keys = [json.dumps([history, query], sort_keys=True, default=str) for history, query in items]
        new = {k: item for k, item in zip(keys, items, strict=True) if k not in self._rewrites}
        if new:
            self._rewrites.update(zip(new, self._dec.rewrite_batch(list(new.values())), strict=True))
        return [self._rewrites[k] for k in keys]


def _item_figures(metrics: dict[str, float]) -> dict[str, float]:
    """The figures of a single item (its ``*_items`` count dropped)."""
    return {k: v for k, v in metrics.items() if not k.endswith("_items")}


def evaluate(dec: Decomposer, heldout: Sequence[dict[str, Any]], limit: int = 0,
             per_item: list[dict[str, Any]] | None = None, extra_docs: Sequence[str] = (),
             retrieval: bool = True) -> dict[str, float]:
    """Generate for held-out examples (the first ``limit`` of each task when > 0) and score them;
    ``extra_docs``: more documents for the rewrites' retrieval (:func:`retrieval_of_rewrites`);
    ``retrieval=False`` leaves it to the caller (``eval rewrite`` measures it per turn)."""
    dec_items = [e for e in heldout if e["task"] == "decompose"]
    rw_items = [e for e in heldout if e["task"] == "rewrite"]
    if limit > 0:
        dec_items, rw_items = dec_items[:limit], rw_items[:limit]
    preds = dec.decompose_batch([e["query"] for e in dec_items])
    golds = [QDG.from_json(e["graph"]) for e in dec_items]
    rewrites = dec.rewrite_batch([(conversation(e), e["query"]) for e in rw_items])
    if per_item is not None:  # the figures of each item, under the names of the means they make
        for n, (e, (g, valid, raw), gold) in enumerate(zip(dec_items, preds, golds, strict=True)):
            per_item.append({"id": e.get("id", n), "task": "decompose", "query": e["query"], "raw": raw,
                             "pred": g.to_json(), "gold": gold.to_json(),
                             **_item_figures(decompose_metrics([(g, valid)], [gold]))})
        for n, (e, r) in enumerate(zip(rw_items, rewrites, strict=True)):
            per_item.append({"id": e.get("id", n), "task": "rewrite", "query": e["query"], "pred": r,
                             "gold": e["target"], **_item_figures(rewrite_metrics([r], [e["target"]]))})
    found: dict[str, float] = {}
    if retrieval:  # the model's figures and its paired test against the heuristic, one ranking pass
        metrics, rows = _retrieval_with_heuristic(rw_items, rewrites, extra_docs)
        found = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))
                 and not k.endswith(("_copy_query", "_manual", "_heuristic"))}  # those are baselines
        found.update(gain_of_rows(rows))
    return {**decompose_metrics([(g, v) for g, v, _ in preds], golds), **node_gain(dec_items, preds, golds),
            **rewrite_metrics(rewrites, [e["target"] for e in rw_items]), **found}


def node_gain(items: Sequence[dict[str, Any]], preds: Sequence[tuple[QDG, bool, Any]],
              golds: Sequence[QDG]) -> dict[str, float]:
    """The paired comparison, question by question, of the predictions' node-text F1 with
    keeping each question as one node (``<NODE_GAIN_KEY>_*``, as :func:`gain_of_rows`)."""
    from searchsmith.models.stats import paired_figures

    return paired_figures(NODE_GAIN_KEY, [node_f1(terminal(e["query"]), g) for e, g in zip(items, golds, strict=True)],
                          [node_f1(p[0], g) for p, g in zip(preds, golds, strict=True)])


# --------------------------------------------------------------------------- recipe


def tag_examples(examples: Sequence[dict[str, Any]], depth: int,
                 drop: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The examples, each decomposition with its gold graph's per-word ``depths`` (None when
    the graph is not a tree of nested spans of the question), and how many were aligned.
    With ``drop`` the ``depths`` are the tagger's labels with delete tags
    (:func:`~searchsmith.models.qdg_spans.edit_labels`, ``depth`` levels) and ``adds`` each
    word's gold add phrase (:func:`~searchsmith.models.qdg_spans.adds_from_graph`)."""
    from searchsmith.models.qdg_spans import depths_from_graph, gold_tags

    out, aligned = [], 0
    for e in examples:
        if e["task"] == "decompose":
            if drop:
                tags = gold_tags(e["query"], e["graph"], depth)
                e = {**e, "depths": tags[0] if tags else None, "adds": tags[1] if tags else None}
            else:
                e = {**e, "depths": depths_from_graph(e["query"], e["graph"], depth)}
            aligned += e["depths"] is not None
        out.append(e)
    return out, aligned


def add_vocabulary(examples: Sequence[dict[str, Any]], size: int) -> list[str]:
    """The ``size`` phrases the aligned training steps add most often (:func:`tag_examples`'
    ``adds``; ties: alphabetical), padded with "" (a label never trained as a phrase)."""
    counts = Counter(x for e in examples for x in (e.get("adds") or []) if x)
    top = [x for x, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
    return top + [""] * (size - len(top))


def build_decomposer(m: DecomposerModelConfig) -> Decomposer:
    """The untrained model of ``m`` wrapped in a :class:`Decomposer`."""
    if m.arch in ("tagger", "tiny-tagger"):
        from searchsmith.models.rewrite_edit import TAGS

        depth_labels = m.tag_depth * (2 if m.tag_drop else 1)
        labels = depth_labels + (len(TAGS) if m.joint_rewrite else 0)
        labels += m.tag_add_phrases + 1 if m.tag_add_phrases else 0  # none + one per phrase, last
        model, tok = build_tagger(m.base_model, labels,
                                  tiny_hidden=m.tiny_hidden if m.arch == "tiny-tagger" else 0)
        # the phrases are chosen from the training data (add_vocabulary) once it is read
        return Decomposer(model, tok, TAGGER, max_source_tokens=m.max_source_tokens, max_nodes=m.max_nodes,
                          batch_size=m.eval_batch_size, tag_depth=depth_labels, tag_drop=m.tag_drop,
                          add_phrases=[""] * m.tag_add_phrases, reply_words=m.rewrite_reply_words,
                          choice_template=m.choice_template)
    elif m.arch == "tiny":
        model, tok = build_tiny(m.base_model, hidden=m.tiny_hidden)
        arch = "encoder-decoder"
    elif m.arch == "encoder-decoder":
        model, tok = build_bert2bert(m.base_model, decoder_layers=m.decoder_layers,
                                     init_cross_from_self=m.init_cross_from_self)
        arch = "encoder-decoder"
    else:
        model, tok = build_hub(m.base_model, m.arch)
        arch = m.arch
    if m.freeze_encoder and hasattr(model, "get_encoder"):
        for p in model.get_encoder().parameters():
            p.requires_grad_(False)
    return Decomposer(model, tok, arch, max_source_tokens=m.max_source_tokens,
                      max_target_tokens=m.max_target_tokens, max_nodes=m.max_nodes,
                      batch_size=m.eval_batch_size, num_beams=m.num_beams,
                      rewrite_target=m.rewrite_target)


def output_vocabs(dec: Decomposer, train_ex: Sequence[dict[str, Any]], size: int) -> dict[str, list[int]]:
    """Per task, the ``size`` token ids targets add most often to their sources."""
    from searchsmith.models.constrained import learn_output_vocab

    out = {}
    for task in ("decompose", "rewrite"):
        items = [e for e in train_ex if e["task"] == task]
        out[task] = learn_output_vocab(dec.tokenizer, [dec.target_for(e) for e in items],
                                       [e["source"] for e in items], size) if size else []
    return out


@register_recipe("decomposer", DecomposerRecipe)
def decomposer(cfg: DecomposerRecipe, run_dir: Path, force: bool = False) -> dict[str, float]:
    """Train the decomposer; write ``run_dir/model`` (with ``decomposer.json``) and metrics.json."""
    from searchsmith.training.trainer import (
        apply_lora,
        is_main_process,
        seed_everything,
        train,
        write_json_atomic,
    )

    if cfg.recipe != "decomposer":
        raise ConfigError(f"recipe: expected 'decomposer', got {cfg.recipe!r}")
    run_dir = Path(run_dir)

    # 1. Model (seeded first: new weights start the same every run)
    seed_everything(cfg.train.seed)
    dec = build_decomposer(cfg.model)
    task_type = {"causal": "CAUSAL_LM", TAGGER: "TOKEN_CLS"}.get(dec.arch, "SEQ_2_SEQ_LM")
    model = apply_lora(dec.model, cfg.lora, task_type)

    # 2. Data
    train_ex, heldout, dropped = make_splits(cfg)
    counts = Counter(e["task"] for e in train_ex)
    print(f"decomposer: {counts['decompose']} decompose + {counts['rewrite']} rewrite training "
          f"examples, {len(heldout)} held out, {dropped} graphs over model.max_nodes dropped",
          flush=True)
    calib_ex: list[dict[str, Any]] = []
    if dec.arch == TAGGER:
        train_ex, aligned = tag_examples(train_ex, cfg.model.tag_depth, cfg.model.tag_drop)
        print(f"decomposer: {aligned} of {counts['decompose']} training graphs are nested spans of their "
              "question (the tagger trains on those; rewrites come from the rewrite tagger)", flush=True)
        dec.switch_penalty = float(cfg.model.switch_penalties[0])
        if len(cfg.model.switch_penalties) > 1:
            train_ex, calib_ex = calibration_split(train_ex, cfg.data.split_seed, cfg.data.calibration_ratio)
            print(f"decomposer: {len(calib_ex)} training graphs set apart to choose the switch penalty "
                  f"among {cfg.model.switch_penalties}", flush=True)
            aligned = sum(e.get("depths") is not None for e in train_ex)
        if cfg.model.tag_add_phrases:
            dec.add_phrases = add_vocabulary(train_ex, cfg.model.tag_add_phrases)
            covered = Counter(x for e in train_ex for x in (e.get("adds") or []) if x)
            print(f"decomposer: add tags: {len([x for x in dec.add_phrases if x])} phrases cover "
                  f"{sum(covered[x] for x in dec.add_phrases if x)} of {sum(covered.values())} phrases the "
                  "training steps add", flush=True)
        if not aligned:
            raise ValidationError("decomposer: no training decomposition aligns to nested spans of its question; "
                                  "check data.sources (the tagger needs graphs whose steps copy the question)")

    # Scored on the real held-out items when there are any: synthetic templates are there so
    # the recipe runs without ../shared, and scoring them would flatter the figures.
    eval_items = [e for e in heldout if e["origin"] != "synthetic"] or heldout
    vocabs = (output_vocabs(dec, train_ex, cfg.model.output_vocab_size) if dec.arch != TAGGER
              else {"decompose": [], "rewrite": []})  # the tagger generates no text
    constrained = cfg.model.constrained and dec.arch == "encoder-decoder"  # WordPiece grammar
    use_head = cfg.model.type_head and constrained and any(e["task"] == "decompose" for e in train_ex)
    use_tagger = (cfg.model.rewrite_head and dec.arch != "causal"
                  and any(e["task"] == "rewrite" and e["history"] for e in train_ex))

    def train_batches(epoch: int) -> Iterator[dict[str, Any]]:
        return batches(train_ex, dec, cfg.optim.batch_size, cfg.train.seed, epoch,
                       cfg.data.rewrite_repeat)

    # 3. Loss: token cross-entropy of the target (the model's own loss; padding is -100). The
    # tagger's depths and rewrite tags are two softmaxes over their own labels of one head.
    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        if dec.arch != TAGGER:
            return m(**batch).loss
        return tagger_loss(m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                           batch["labels"], dec.tag_depth, batch.get("add_labels"), dec.add_labels)

    # 4. Train (evaluating on the held-out split; the last eval covers all of it)
    # eval_fn must know whether it is the final eval (all held-out items) or an intermediate
    # one (data.eval_limit items); a resumed run starts counting at its checkpoint's step.
    from searchsmith.training.trainer import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    progress = {"step": int(ckpt.name.split("-")[1]) if ckpt is not None else 0}

    def on_step(step: int, _m: Any) -> None:
        progress["step"] = step

    def view_of(m: Any) -> Decomposer:
        if dec.arch == TAGGER:
            return Decomposer(m, dec.tokenizer, TAGGER, max_source_tokens=dec.max_source_tokens,
                              max_nodes=dec.max_nodes, batch_size=dec.batch_size,
                              max_history_turns=cfg.data.max_history_turns, tag_depth=dec.tag_depth,
                              tag_drop=dec.tag_drop, switch_penalty=heads.get("switch", dec.switch_penalty),
                              add_phrases=dec.add_phrases, reply_words=dec.reply_words,
                              choice_template=dec.choice_template)
        return Decomposer(m, dec.tokenizer, dec.arch, max_source_tokens=dec.max_source_tokens,
                          max_target_tokens=dec.max_target_tokens, max_nodes=dec.max_nodes,
                          batch_size=dec.batch_size, num_beams=dec.num_beams,
                          max_history_turns=cfg.data.max_history_turns, constrained=constrained,
                          decompose_vocab=vocabs["decompose"], rewrite_vocab=vocabs["rewrite"],
                          rewrite_target=dec.rewrite_target)

    heads: dict[str, Any] = {}

    def eval_fn(m: Any) -> dict[str, float]:
        final = progress["step"] >= cfg.optim.max_steps
        view = view_of(m)
        chosen: dict[str, float] = {}
        if calib_ex:  # the switch penalty of best node-text F1 on graphs never trained on
            heads["switch"], scores = choose_switch_penalty(view, calib_ex, cfg.model.switch_penalties)
            view.switch_penalty = heads["switch"]
            chosen = {"switch_penalty": heads["switch"],
                      **{f"calibration/node_f1@switch_{c}": f for c, f in scores.items()}}
        if use_head:
            heads["last"] = fit_type_head(view, train_ex, cfg.model.type_head_l2)
        if use_tagger:
            heads["rewrite"] = fit_rewrite_head(view, train_ex, cfg.model)
        return {**evaluate_with_ood(view, eval_items, cfg.data.leave_out, limit=0 if final else cfg.data.eval_limit,
                                    extra_docs=rewrite_passages(train_ex)), **chosen}

    result = train(model, loss_fn, train_batches, cfg, run_dir, eval_fn, tokenizer=dec.tokenizer,
                   run_info={"task": "decompose+rewrite", "recipe": "decomposer",
                             "base_model": cfg.model.base_model, "arch": cfg.model.arch},
                   baselines={**baselines(train_ex, eval_items),
                              **ood_baselines(train_ex, eval_items, cfg.data.leave_out)},
                   force=force, on_step=on_step)

    # 5. Save: the trainer wrote run_dir/model; mark it trained so Decomposer.load accepts it.
    if not is_main_process():  # the main process writes the run (accelerate launch)
        return result.final_metrics
    head = heads.get("last")  # the final eval (always run, also on a finished run) fit it
    if use_head and head is None:
        head = fit_type_head(view_of(result.model), train_ex, cfg.model.type_head_l2)
    tagger = heads.get("rewrite")
    if use_tagger and tagger is None:
        tagger = fit_rewrite_head(view_of(result.model), train_ex, cfg.model)
    write_json_atomic(run_dir / "model" / "decomposer.json", {
        "arch": dec.arch, "trained_steps": result.step,
        "max_source_tokens": dec.max_source_tokens, "max_target_tokens": dec.max_target_tokens,
        "max_nodes": dec.max_nodes, "num_beams": dec.num_beams,
        "max_history_turns": cfg.data.max_history_turns, "reply_words": dec.reply_words,
        "base_model": cfg.model.base_model,
        "constrained": constrained, "decompose_vocab": vocabs["decompose"],
        "rewrite_vocab": vocabs["rewrite"], "rewrite_target": dec.rewrite_target,
        "type_head": type_head_json(head) if use_head else None,
        "rewrite_head": type_head_json(tagger) if use_tagger else None,
        **({"tag_depth": dec.tag_depth, "tag_drop": dec.tag_drop, "add_phrases": dec.add_phrases,
            "switch_penalty": float(heads.get("switch", dec.switch_penalty)),
            "choice_template": dec.choice_template} if dec.arch == TAGGER else {}),
    })
    return result.final_metrics


def tagger_loss(logits: Any, labels: Any, depth: int, add_labels: Any = None, n_add: int = 0) -> Any:
    """Cross-entropy of the tagger: labels below ``depth`` over the depth logits, the others
    (rewrite tags, offset by ``depth``) over the labels after them but before the last
    ``n_add`` (the add labels, whose targets ``add_labels`` has on the same tokens as the
    depths); -100 ignored; averaged over the labelled tokens (an add label counts with its word)."""
    import torch.nn.functional as F

    width = logits.shape[-1]
    flat, y = logits.reshape(-1, width), labels.reshape(-1)
    parts = []
    is_depth, is_tag = (y >= 0) & (y < depth), y >= depth
    if is_depth.any():
        parts.append(F.cross_entropy(flat[is_depth][:, :depth], y[is_depth], reduction="sum"))
    if is_tag.any():
        parts.append(F.cross_entropy(flat[is_tag][:, depth:width - n_add], y[is_tag] - depth, reduction="sum"))
    if n_add and add_labels is not None:
        a = add_labels.reshape(-1)
        if (a >= 0).any():
            parts.append(F.cross_entropy(flat[a >= 0][:, width - n_add:], a[a >= 0], reduction="sum"))
    return sum(parts) / max(int((y >= 0).sum()), 1) if parts else flat.sum() * 0.0


def fit_rewrite_head(dec: Decomposer, train_ex: Sequence[dict[str, Any]], m: DecomposerModelConfig) -> dict[str, Any]:
    """Fit ``dec``'s rewrite tagger on the training rewrites (history, query -> gold rewrite);
    a tagger trained with joint rewrite tags takes it from its token head instead."""
    expansion = {"expand": m.rewrite_expand, "term_threshold": m.rewrite_term_threshold,
                 "max_terms": m.rewrite_max_terms, "max_drop": m.rewrite_max_drop,
                 "references_only": m.rewrite_references_only}
    if dec.arch == TAGGER and m.joint_rewrite:
        return dec.rewrite_head_from_classifier(m.rewrite_threshold, m.rewrite_extend, expansion)
    items = [(conversation(e), e["query"], e["target"]) for e in train_ex if e["task"] == "rewrite"]
    return dec.fit_rewrite_head(items, l2=m.rewrite_head_l2, threshold=m.rewrite_threshold,
                                extend=m.rewrite_extend, expansion=expansion)


def fit_type_head(dec: Decomposer, train_ex: Sequence[dict[str, Any]], l2: float) -> dict[str, Any]:
    """Fit ``dec``'s type head on the training decompositions (question -> gold type)."""
    items = [e for e in train_ex if e["task"] == "decompose"]
    return dec.fit_type_head([e["query"] for e in items], [e["graph"]["type"] for e in items], l2=l2)


__all__ = [
    "DecomposerDataConfig",
    "DecomposerModelConfig",
    "DecomposerRecipe",
    "baselines",
    "batches",
    "build_decomposer",
    "decompose_metrics",
    "decomposer",
    "evaluate",
    "evaluate_with_ood",
    "load_examples",
    "make_splits",
    "node_f1",
    "ood_baselines",
    "rewrite_metrics",
]
