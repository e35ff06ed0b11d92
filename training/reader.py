"""Reader recipe: extractive question answering (short answer spans, yes / no / no answer).

The model (:class:`~searchsmith.models.reader.SpanReader`) reads ``[CLS] question [SEP]
context [SEP]`` windows of a question's paragraphs joined into one context
(:func:`~searchsmith.models.reader.join_passages`), so a multi-hop question sees both hops
when they fit one window. Training windows are labelled:

* ``span`` with the answer's start and end tokens when the window holds the whole answer
  (the occurrence inside a gold paragraph preferred);
* ``yes`` / ``no`` for a yes-no question's windows that overlap a gold paragraph;
* ``none`` otherwise; ``data.negatives_per_positive`` of them are kept per positive window.

Loss: cross-entropy of the start and end tokens (context tokens only; span windows only)
plus cross-entropy of the answer kind.

Held-out evaluation (question ids never trained on, in any form): SQuAD EM and token F1
(best over the answer's aliases) per source, reading every paragraph of the item; no-answer
accuracy on the same questions over their distractor paragraphs only (the answer is
"none" when the reader's score is below ``no_answer_threshold``). Baselines: the pipeline's
no-model answers, the context sentence closest to the question by the bi-encoder's cosine
(``sentence_f1``) and the pipeline's extractive answer over the item's paragraphs, its short
answer (the span its sentences hold of the kind the question asks for,
``models.text.typed_span``) or its sentences when it has none (``short_f1``): the answer the
reader replaces. The serving gate uses the reader only where it beats both. The sources
of ``data.leave_out`` are held out whole and also scored apart (``ood/f1`` against
``baselines/ood_sentence_f1`` and ``baselines/ood_short_f1``): where they are recorded, the gate
reads those. Beside the reader's own figures, ``served/f1`` and ``served/<source>/f1`` score the
answers as the pipeline serves them with the reader: a question that compares named things ("A or
B?", "Were A and B from the same country?") is answered by ``models.choice`` first.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from searchsmith.models.choice import compared
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import from_settings, model_display_name, resolve_model
from searchsmith.models.reader import (
    ANSWER_KINDS,
    META_FILE,
    ReaderSettings,
    encode_windows,
    join_passages,
)
from searchsmith.models.reader_model import SpanReader, TorchReader
from searchsmith.models.text import exact_match, sentence_texts, token_f1
from searchsmith.training.config import EncoderRecipeConfig
from searchsmith.training.data import CachedEmbedder
from searchsmith.training.read_data import (
    ReaderData,
    ReadItem,
    cloze_items,
    find_answers,
    load_items,
    preferred,
    relation_items,
    split_items,
)
from searchsmith.training.registry import register_recipe
from searchsmith.training.trainer import (
    freeze_lower,
    is_main_process,
    seed_everything,
    train,
    write_json_atomic,
)

IGNORE = -100
OOD_PREFIX = "ood/"  # the figures on data.leave_out's questions (serving/pipeline/gates.py reads them)
#: the paired test of the reader's answer F1 against the closest sentence's, question by
#: question (``<PAIRED_KEY>_diff``, ``_lo``, ``_hi``, ``_p``, ``_n``, ``_direction``; also under
#: ``ood/`` for the left-out sources): the reader gate needs ``_direction`` +1
PAIRED_KEY = "f1_vs_sentence"
#: the same against the pipeline's extractive short answer (:func:`sentence_rows`), with the
#: reader's answers as served (``served_f1``: both answer comparisons by ``models.choice``)
SHORT_PAIRED_KEY = "f1_vs_short"


@dataclass(frozen=True)
class ReaderModel:
    """Attributes:
        config: a transformers config dict (needs ``model_type``) building a random-init
            encoder (the tiny twin) instead of loading ``base_model``.
        tokenizer: ``default`` (the base model's own, or the bundled MiniLM one) or a folder.
        freeze_embeddings: keep the encoder's input embeddings fixed (on MiniLM about half of
            its 22.7 M weights).
        freeze_layers: keep the lowest N transformer layers fixed too (0: train them all);
            a step costs less, and on little data the reader generalises better (the quick
            recipe freezes the embeddings and 2 of MiniLM's 6 layers: RESULTS.md).
    """

    config: dict[str, Any] | None = None
    tokenizer: str = "default"
    freeze_embeddings: bool = False
    freeze_layers: int = 0


@dataclass(frozen=True)
class ReaderRecipe(EncoderRecipeConfig):
    """The reader recipe (YAML key = field name = override path).

    Attributes:
        recipe: ``reader``.
        output_dir: the run folder (``model/`` with ``reader.json``, ``metrics.json``, ...).
        base_model: the encoder to start from: ``default`` (bundled all-MiniLM-L6-v2), a
            folder or a hub id (e.g. a SQuAD-trained reader for the GPU variant).
        max_length: tokens per (question, passage) window; a longer passage is read in
            overlapping windows (:class:`~searchsmith.models.reader.ReaderSettings`, saved
            for serving, as the three below).
        stride: tokens shared by neighbouring windows of one passage.
        max_question_tokens: a longer question is cut to this many tokens (and says so).
        max_answer_tokens: the longest answer span decoded, in tokens.
        no_answer_threshold: the reader's score below which the answer is "none" (held-out
            no-answer accuracy; the pipeline's ``generation.reader.min_score`` default).
        eval_batch_size: windows per forward pass at evaluation.
        mine_with: the bi-encoder of the sentence baseline (``none`` skips it).
        shared_norm: train with shared normalisation (Clark & Gardner 2018): a question's
            windows are batched together and its start / end scores are normalised over all
            of them, so that scores compare across windows; the reader then picks its answer
            as the best span over all windows (``select: span`` in ``reader.json``) instead of
            in the window its answer-kind head finds most answerable. The answer-kind loss
            weighs a question's windows without the answer together as much as those with it.
    """

    eval_batch_size: int = 32
    max_length: int = 256
    stride: int = 96
    max_question_tokens: int = 64
    max_answer_tokens: int = 24
    no_answer_threshold: float = 0.5
    mine_with: str = "default"
    shared_norm: bool = False
    data: ReaderData = field(default_factory=ReaderData)
    model: ReaderModel = field(default_factory=ReaderModel)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.settings()  # checks the lengths
        if not 0.0 < self.no_answer_threshold < 1.0:
            raise ValueError(f"no_answer_threshold must be in (0, 1), got {self.no_answer_threshold}")

    def settings(self) -> ReaderSettings:
        return ReaderSettings(self.max_length, self.stride, self.max_question_tokens, self.max_answer_tokens,
                              select="span" if self.shared_norm else "answerable")


def build_model(cfg: ReaderRecipe) -> tuple[SpanReader, Any]:
    """The reader (encoder + fresh heads) and its fast tokenizer."""
    from transformers import AutoModel, AutoTokenizer

    if cfg.lora.enabled:
        raise ConfigError("lora.enabled: the reader is fine-tuned fully (its heads are new); set lora.enabled: false")
    tok_path = resolve_model(cfg.model.tokenizer, field="model.tokenizer")
    if cfg.model.config is not None:
        encoder = from_settings(cfg.model.config, "model.config",
                                lambda config: AutoModel.from_config(config(), add_pooling_layer=False))
    else:
        path = resolve_model(cfg.base_model)
        encoder = AutoModel.from_pretrained(path, add_pooling_layer=False)
        if cfg.model.tokenizer == "default" and cfg.base_model != "default":
            tok_path = path
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"model.tokenizer: {tok_path!r} is not a fast tokenizer; the reader needs offset "
                          "mappings (use a model with a tokenizer.json)")
    if encoder.config.vocab_size < len(tokenizer):
        raise ConfigError(f"model: vocab_size {encoder.config.vocab_size} is smaller than the tokenizer's "
                          f"{len(tokenizer)} tokens; raise model.config.vocab_size")
    limit = int(getattr(encoder.config, "max_position_embeddings", 512))
    if cfg.max_length > limit:
        raise ConfigError(f"max_length {cfg.max_length} is over the encoder's {limit} positions; lower it "
                          "(long contexts are read in windows anyway)")
    freeze_lower(encoder, cfg.model.freeze_embeddings, cfg.model.freeze_layers)
    return SpanReader(encoder), tokenizer


# ----------------------------------------------------------------------------- windows


@dataclass
class TrainWindow:
    """One labelled training window."""

    input_ids: list[int]
    token_type_ids: list[int] | None
    context: list[int]  # 1 for context tokens
    start: int
    end: int
    kind: int
    group: int = 0  # the question it belongs to (shared normalisation batches a question's windows together)
    weight: float = 1.0  # of its answer-kind loss


def label_windows(items: Sequence[ReadItem], tokenizer: Any, settings: ReaderSettings,
                  negatives_per_positive: float, seed: int,
                  occurrences: str = "first") -> tuple[list[TrainWindow], dict[str, int]]:
    """Labelled windows of ``items``; items whose answer is nowhere in their context are skipped.
    ``occurrences``: ``all`` labels a window without the chosen occurrence of a span answer
    at another occurrence it holds instead of making it a negative (``data.answer_occurrences``)."""
    rng = random.Random(seed)
    contexts = [join_passages(it.paragraphs) for it in items]
    wins = encode_windows(tokenizer, [it.question for it in items], [c for c, _ in contexts], settings)
    by_item: dict[int, list[Any]] = {}
    for w in wins.windows:
        by_item.setdefault(w.item, []).append(w)
    out: list[TrainWindow] = []
    counts = {"items": len(items), "skipped_no_answer_in_context": 0, "positive": 0, "negative": 0,
              "positive_other_occurrence": 0}
    for i, it in enumerate(items):
        ctx, ranges = contexts[i]
        gold = [ranges[j] for j in it.support if 0 <= j < len(ranges)]
        kind = it.kind
        if kind == "none":  # an unanswerable variant: a few of its windows, all "none"
            wins_i = by_item.get(i, [])
            picked = rng.sample(wins_i, min(len(wins_i), max(1, int(round(negatives_per_positive)))))
            for w in picked:
                out.append(TrainWindow(w.input_ids, w.token_type_ids, [int(o is not None) for o in w.offsets],
                                       IGNORE, IGNORE, ANSWER_KINDS.index("none"), i, 1.0 / len(picked)))
                counts["negative"] += 1
            continue
        hits = find_answers(ctx, it.answers) if kind == "span" else []  # the context scanned once
        span = preferred(hits, gold)
        if kind == "span" and span is None:
            counts["skipped_no_answer_in_context"] += 1
            continue
        others = [h for h in hits if h != span] if occurrences == "all" else []
        pos, neg = [], []
        for w in by_item.get(i, []):
            ctxmask = [int(o is not None) for o in w.offsets]
            lo = min((o[0] for o in w.offsets if o is not None), default=0)
            hi = max((o[1] for o in w.offsets if o is not None), default=0)
            tw = TrainWindow(w.input_ids, w.token_type_ids, ctxmask, IGNORE, IGNORE, ANSWER_KINDS.index("none"), i)
            if kind == "span":
                assert span is not None
                at = next((h for h in (span, *others) if lo <= h[0] and h[1] <= hi), None)
                if at is not None:
                    s = next(t for t, o in enumerate(w.offsets) if o is not None and o[1] > at[0])
                    e = max(t for t, o in enumerate(w.offsets) if o is not None and o[0] < at[1])
                    tw.start, tw.end, tw.kind = s, e, ANSWER_KINDS.index("span")
                    counts["positive_other_occurrence"] += at != span
            elif any(a < hi and lo < b for a, b in gold):
                tw.kind = ANSWER_KINDS.index(kind)
            (neg if tw.kind == ANSWER_KINDS.index("none") else pos).append(tw)
        keep = min(len(neg), int(round(negatives_per_positive * max(1, len(pos)))))
        out.extend(pos)
        for tw in rng.sample(neg, keep):
            # together, a question's negatives weigh as much as its positives in the kind loss
            tw.weight = max(1, len(pos)) / keep
            out.append(tw)
        counts["positive"] += len(pos)
        counts["negative"] += keep
    return out, counts


def batch_stream(windows: Sequence[TrainWindow], pad_id: int, batch_size: int, seed: int,
                 grouped: bool = False) -> Any:
    """``epoch -> micro-batches`` of shuffled windows (the ragged tail dropped).

    ``grouped``: whole questions (all their labelled windows) in a shuffled question order,
    a batch being the questions that reach ``batch_size`` windows (shared normalisation).
    """

    def collate(chunk: list[TrainWindow]) -> dict[str, Any]:
        width = max(len(w.input_ids) for w in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        types = torch.zeros((len(chunk), width), dtype=torch.long)
        ctx = torch.zeros((len(chunk), width), dtype=torch.bool)
        for r, w in enumerate(chunk):
            n = len(w.input_ids)
            ids[r, :n] = torch.tensor(w.input_ids)
            mask[r, :n] = 1
            if w.token_type_ids is not None:
                types[r, :n] = torch.tensor(w.token_type_ids)
            ctx[r, :n] = torch.tensor(w.context, dtype=torch.bool)
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "context": ctx,
                 "start": torch.tensor([w.start for w in chunk]), "end": torch.tensor([w.end for w in chunk]),
                 "kind": torch.tensor([w.kind for w in chunk])}
        if grouped:
            batch["group"] = torch.tensor([w.group for w in chunk])
            batch["weight"] = torch.tensor([w.weight for w in chunk], dtype=torch.float32)
        return batch

    groups: dict[int, list[TrainWindow]] = {}
    for w in windows:
        groups.setdefault(w.group, []).append(w)
    keys = sorted(groups)

    def stream(epoch: int) -> Iterator[dict[str, Any]]:
        rng = random.Random(seed * 100_003 + epoch)
        if grouped:
            order = list(keys)
            rng.shuffle(order)
            chunk: list[TrainWindow] = []
            for g in order:
                chunk.extend(groups[g])
                if len(chunk) >= batch_size:
                    yield collate(chunk)
                    chunk = []
            return
        order = list(range(len(windows)))
        rng.shuffle(order)
        for b in range(0, len(order) - batch_size + 1, batch_size):
            yield collate([windows[i] for i in order[b:b + batch_size]])

    return stream


def reader_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Start/end cross-entropy over context tokens (span windows) + answer-kind cross-entropy.

    With ``group`` in the batch (shared normalisation): the start and end distributions of a
    question span all its windows' context tokens, the gold being every window's answer
    position (their probabilities summed), and the kind loss is weighted (``weight``).
    """
    start, end, kind = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    neg = torch.finfo(torch.float32).min / 2
    start = start.float().masked_fill(~batch["context"], neg)
    end = end.float().masked_fill(~batch["context"], neg)
    if "group" not in batch:
        loss = F.cross_entropy(kind.float(), batch["kind"])
        if bool((batch["start"] != IGNORE).any()):
            loss = loss + 0.5 * (F.cross_entropy(start, batch["start"], ignore_index=IGNORE)
                                 + F.cross_entropy(end, batch["end"], ignore_index=IGNORE))
        return loss
    weight = batch["weight"]
    loss = (F.cross_entropy(kind.float(), batch["kind"], reduction="none") * weight).sum() / weight.sum()
    span_losses = []
    for g in torch.unique(batch["group"]):
        rows = batch["group"] == g
        gold = rows & (batch["start"] != IGNORE)
        if not bool(gold.any()):
            continue
        for logits, target in ((start, batch["start"]), (end, batch["end"])):
            total = torch.logsumexp(logits[rows].reshape(-1), dim=0)
            picked = logits[gold].gather(1, target[gold].unsqueeze(1)).squeeze(1)
            span_losses.append(total - torch.logsumexp(picked, dim=0))
    if span_losses:
        loss = loss + 0.5 * torch.stack(span_losses).sum() / (len(span_losses) / 2)
    return loss


# ----------------------------------------------------------------------------- evaluation


def best_f1(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) of ``prediction`` against the best of ``answers`` (SQuAD normalisation)."""
    return (max(exact_match(prediction, a) for a in answers), max(token_f1(prediction, a) for a in answers))


def no_answer_items(items: Sequence[ReadItem], keep_answers: bool = True) -> list[ReadItem]:
    """The items over their non-gold paragraphs only (the answer is not there); with
    ``keep_answers=False`` their answers are dropped (training: every window is ``none``)."""
    out = []
    for it in items:
        rest = [p for j, p in enumerate(it.paragraphs) if j not in it.support]
        if rest and it.support and not it.hop:
            out.append(ReadItem(it.qid, it.uid + "-noans", it.source, it.question, rest,
                                it.answers if keep_answers else []))
    return out


def score_items(model: Any, items: Sequence[ReadItem], threshold: float, ood_sources: Sequence[str] = (),
                sentence_f1: Mapping[str, float] | None = None,
                short_f1: Mapping[str, float] | None = None) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """EM / F1 per source and overall, answered rate and no-answer accuracy.

    Args:
        model: a reader with ``read_batch(questions, passages)`` (a ``read`` bundle or
            :class:`~searchsmith.models.reader.TorchReader`).
        threshold: an answer scoring below it is no answer.
        ood_sources: the sources left out of training (``data.leave_out``): their questions'
            figures also under ``ood/`` (``ood/f1``, ``ood/em``, ``ood/n``, ``ood/answered_rate``).
        sentence_f1: the closest sentence's F1 per item id (:func:`sentence_rows`): adds the
            paired test of the reader against it (:data:`PAIRED_KEY`).
        short_f1: the pipeline's extractive short answer's F1 per item id (:func:`sentence_rows`):
            the paired test against it (:data:`SHORT_PAIRED_KEY`).

    The reader's own answers give ``f1``, ``em`` and the per-source figures; ``served/f1``,
    ``served/em`` and ``served/<source>/f1`` are the answers as the pipeline serves them with
    the reader, where a question comparing named things is answered by ``models.choice``
    when its paragraphs decide it (the rows' ``served``, ``served_f1``).
    """
    answers = model.read_batch([it.question for it in items], [it.paragraphs for it in items]) if items else []
    rows = []
    for it, a in zip(items, answers, strict=True):
        em, f1 = best_f1(a.text, it.answers)
        # as the pipeline serves it: a question comparing named things is answered by the rule
        # (models.choice), before the reader
        picked = compared(it.question, it.paragraphs)
        served = picked.option if picked is not None else a.text
        served_em, served_f1 = best_f1(served, it.answers) if picked is not None else (em, f1)
        rows.append({"id": it.uid, "source": it.source, "question": it.question, "gold": it.answers[0],
                     "prediction": a.text, "kind": a.kind, "score": round(float(a.score), 4), "em": em, "f1": f1,
                     "answered": float(a.score >= threshold), "served": served, "served_em": served_em,
                     "served_f1": served_f1})
    out = _means(rows, "")
    out.update(_means(rows, "served/", "served_"))
    for source in sorted({r["source"] for r in rows}):
        out.update(_means([r for r in rows if r["source"] == source], f"{source}/"))
        out.update({k: v for k, v in _means([r for r in rows if r["source"] == source], f"served/{source}/",
                                             "served_").items() if not k.endswith("/n")})
    out["answered_rate"] = float(np.mean([r["answered"] for r in rows])) if rows else 0.0
    ood = [r for r in rows if r["source"] in set(ood_sources)]
    if ood:
        out.update(_means(ood, OOD_PREFIX))
        out[f"{OOD_PREFIX}answered_rate"] = float(np.mean([r["answered"] for r in ood]))
    for base, key in ((sentence_f1, PAIRED_KEY), (short_f1, SHORT_PAIRED_KEY)):
        if base:
            col = "served_f1" if key == SHORT_PAIRED_KEY else "f1"
            out.update(_paired(rows, base, "", key, col))
            out.update(_paired(ood, base, OOD_PREFIX, key, col))
    none = no_answer_items(items)
    if none:
        got = model.read_batch([it.question for it in none], [it.paragraphs for it in none])
        out["no_answer_accuracy"] = float(np.mean([a.score < threshold for a in got]))
    return out, rows


def _paired(rows: Sequence[dict[str, Any]], baseline_f1: Mapping[str, float], prefix: str,
            key: str = PAIRED_KEY, col: str = "f1") -> dict[str, float]:
    from searchsmith.models.stats import paired_figures

    both = [(baseline_f1[r["id"]], r[col]) for r in rows if r["id"] in baseline_f1]
    return paired_figures(prefix + key, [b for b, _ in both], [m for _, m in both])


def _means(rows: Sequence[dict[str, Any]], prefix: str, col: str = "") -> dict[str, float]:
    """Mean EM and F1 of ``rows`` (their ``{col}em`` / ``{col}f1``) as ``{prefix}em``,
    ``{prefix}f1``, with ``{prefix}n``."""
    if not rows:
        return {}
    return {f"{prefix}em": float(np.mean([r[f"{col}em"] for r in rows])),
            f"{prefix}f1": float(np.mean([r[f"{col}f1"] for r in rows])), f"{prefix}n": float(len(rows))}


def sentence_rows(items: Sequence[ReadItem], encode: Any) -> list[dict[str, Any]]:
    """The no-model answers per item, with their EM and F1
    (``{"id", "source", "em", "f1", "short", "short_em", "short_f1"}``):

    * the context sentence closest to the question (bi-encoder cosine): ``em``, ``f1``;
    * the pipeline's extractive answer over the item's paragraphs, which the reader replaces:
      its short answer (``ExtractiveGenerator``: the sentences best supported by cosine and the
      question's words, and in them the span the question asks for, ``typed_span``, or in the
      passage of a bridge they name, ``hop``), or its sentences when it has none: ``short``,
      ``short_em``, ``short_f1``.
    """
    from searchsmith.serving.pipeline.config import ExtractiveConfig
    from searchsmith.serving.pipeline.generation import ExtractiveGenerator
    from searchsmith.serving.pipeline.state import Passage, PipelineState

    class Vectors:  # the extractive generator's embedder: the same encode (and its cache)
        def encode(self, texts: Sequence[str], return_meta: bool = False) -> np.ndarray:
            return encode(list(texts))

    # every sentence of the item's paragraphs is a candidate (the pipeline's passages are few)
    extractive = ExtractiveGenerator(Vectors(), ExtractiveConfig(max_sentences=100_000))
    rows = []
    for it in items:
        sents = [s for _, text in it.paragraphs for s in sentence_texts(text) if len(s) > 3]
        if not sents:
            rows.append({"id": it.uid, "source": it.source, "em": 0.0, "f1": 0.0, "short": "",
                         "short_em": 0.0, "short_f1": 0.0})
            continue
        vec = encode([it.question, *sents])
        pick = sents[int(np.argmax(vec[1:] @ vec[0]))]
        em, f1 = best_f1(pick, it.answers)
        state = PipelineState(query=it.question, rewrite=it.question)
        state.embeddings.update(zip([it.question, *sents], vec, strict=True))  # computed above
        passages = [Passage(f"{it.uid}#{i}", f"{it.uid}-{i}", it.source, text, 0.0, title=title)
                    for i, (title, text) in enumerate(it.paragraphs)]
        ranked = extractive.support(it.question, passages, state)
        # as the generation stage answers: a comparison by models.choice first, else the span
        picked = extractive.compare(it.question, passages)
        if picked is not None:
            short = picked[0].option
        else:
            hops = [extractive.hop(it.question, ranked, passages, state)]
            short = (extractive.short_answer(it.question, [it.question], [ranked], hops)[0]
                     or " ".join(c.text for c in extractive.cut(ranked)))
        short_em, short_f1 = best_f1(short, it.answers)
        rows.append({"id": it.uid, "source": it.source, "em": em, "f1": f1, "short": short,
                     "short_em": short_em, "short_f1": short_f1})
    return rows


def sentence_baseline(items: Sequence[ReadItem], encode: Any, ood_sources: Sequence[str] = (),
                      rows: Sequence[dict[str, Any]] | None = None) -> dict[str, float]:
    """The means of :func:`sentence_rows` (given, or computed with ``encode``) overall and per
    source; on the ``ood_sources`` questions also as ``ood_sentence_*`` (the gate's
    out-of-domain baseline)."""
    if rows is None:
        rows = sentence_rows(items, encode)
    out: dict[str, float] = {}
    ood = [r for r in rows if r["source"] in set(ood_sources)]
    for name, col in (("sentence", ""), ("short", "short_")):
        out.update({f"{name}_{k}": v for k, v in _means(rows, "", col).items() if k != "n"})
        for source in sorted({r["source"] for r in rows}):
            out.update({f"{name}_{source}/{k}": v for k, v in
                        _means([r for r in rows if r["source"] == source], "", col).items() if k != "n"})
        out.update({f"{OOD_PREFIX[:-1]}_{name}_{k}": v for k, v in _means(ood, "", col).items() if k != "n"})
    return out


# ----------------------------------------------------------------------------- recipe


@register_recipe("reader", ReaderRecipe)
def reader(cfg: ReaderRecipe, run_dir: Path, force: bool = False) -> dict[str, Any]:
    """Train the reader; return the held-out metrics (also in ``metrics.json``)."""
    run_dir = Path(run_dir)
    settings = cfg.settings()
    seed_everything(cfg.train.seed)  # the new heads' initial weights: the same every run
    model, tokenizer = build_model(cfg)

    items = load_items(cfg.data)
    train_ids, eval_ids = split_items(items, cfg.data)
    train_items = [it for it in items if it.qid in train_ids]
    eval_items = [it for it in items if it.qid in eval_ids and not it.hop]
    if not train_items or not eval_items:
        raise ValidationError(f"data: {len(items)} questions cannot be split into train and held-out "
                              f"(data.eval_ratio={cfg.data.eval_ratio}); add data")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "split.json", {"seed": cfg.data.split_seed, "train": sorted(train_ids),
                                               "eval": sorted(eval_ids), "leave_out": list(cfg.data.leave_out)})
    unanswerable = no_answer_items(train_items, keep_answers=False)
    random.Random(cfg.data.split_seed).shuffle(unanswerable)
    unanswerable = unanswerable[: int(round(cfg.data.no_answer_ratio * len(train_items)))]
    records = [it for it in train_items if not it.hop]
    single = (relation_items(records) if cfg.data.wiki_relations else []) + cloze_items(
        records, cfg.data.cloze_per_item, cfg.data.cloze_drop, cfg.data.split_seed)
    windows, counts = label_windows([*train_items, *single, *unanswerable], tokenizer, settings,
                                    cfg.data.negatives_per_positive, cfg.data.split_seed,
                                    cfg.data.answer_occurrences)
    counts["single_hop_made"] = len(single)
    if len(windows) < cfg.optim.batch_size:
        raise ValidationError(f"data: {len(windows)} training windows, fewer than optim.batch_size="
                              f"{cfg.optim.batch_size}; add data or lower it")
    baselines: dict[str, Any] = {"data": {**counts, "train_questions": len(train_items),
                                          "eval_questions": len(eval_items), "train_windows": len(windows)}}
    sentence_f1: dict[str, float] = {}
    short_f1: dict[str, float] = {}
    if cfg.mine_with != "none":
        embedder = CachedEmbedder(cfg.mine_with, run_dir / "cache")
        rows = sentence_rows(eval_items, embedder.encode)
        baselines.update(sentence_baseline(eval_items, embedder.encode, cfg.data.leave_out, rows))
        sentence_f1 = {r["id"]: r["f1"] for r in rows}
        short_f1 = {r["id"]: r["short_f1"] for r in rows}
        del embedder

    def eval_fn(m: Any) -> dict[str, float]:
        reader = TorchReader(m, tokenizer, settings, cfg.no_answer_threshold, cfg.eval_batch_size)
        return score_items(reader, eval_items, cfg.no_answer_threshold, cfg.data.leave_out, sentence_f1,
                           short_f1)[0]

    result = train(
        model, reader_loss, batch_stream(windows, tokenizer.pad_token_id or 0, cfg.optim.batch_size,
                                         cfg.train.seed, grouped=cfg.shared_norm),
        cfg, run_dir, eval_fn, tokenizer=tokenizer, baselines=baselines, force=force,
        run_info={"task": "read", "recipe": cfg.recipe,
                  "base_model": "random-init (model.config)" if cfg.model.config is not None
                  else model_display_name(cfg.base_model), "max_length": cfg.max_length},
    )
    if not is_main_process():  # the main process writes the run (accelerate launch)
        return result.final_metrics
    write_json_atomic(run_dir / "model" / META_FILE, {
        **settings.to_json(), "trained_steps": result.step, "no_answer_threshold": cfg.no_answer_threshold,
        "kinds": list(ANSWER_KINDS)})
    return result.final_metrics


__all__ = [
    "SHORT_PAIRED_KEY",
    "ReaderModel",
    "ReaderRecipe",
    "TrainWindow",
    "batch_stream",
    "best_f1",
    "build_model",
    "label_windows",
    "no_answer_items",
    "reader",
    "reader_loss",
    "score_items",
    "sentence_baseline",
    "sentence_rows",
]
