"""The decomposer: one seq2seq model, two prefixed tasks (``rewrite:`` and ``decompose:``).

* ``decompose(question) -> QDG``: the model writes the compact linearisation of
  :mod:`searchsmith.models.qdg`, which is parsed, validated and repaired; a bad generation
  becomes ``terminal`` with the original question, never an exception.
* ``rewrite(history, query) -> str``: a follow-up made standalone; an empty generation (or
  any failure) falls back to the query as it is. By default (``rewrite_target="edit"``) the
  model writes only the edit (``it => throat cancer``, :mod:`searchsmith.models.rewrite_edit`)
  and the rewrite is the query with it applied; ``"full"`` has it write the whole question.
* A **rewrite tagger** (optional, ``rewrite_head`` in ``decomposer.json``): softmax
  regression over the encoder's token states that marks the history words a follow-up
  refers to (REF) and the query words they replace (TGT); when present, rewrites come from it
  (:func:`searchsmith.models.rewrite_edit.tag_rewrite`) instead of the decoder, which in a
  CPU budget learns where to edit but not to copy the referent. Fit after training
  (:meth:`Decomposer.fit_rewrite_head`).
* A **type head** (optional, ``type_head`` in ``decomposer.json``): a softmax-regression layer
  over the mean-pooled encoder states that picks the graph type; under constrained decoding
  the first generated token is forced to it. The decoder learns the type slowly (a single
  token among ~30 per target), while a linear layer over the encoder's sentence states is
  fit in seconds after training (:meth:`Decomposer.fit_type_head`).

Architectures (``arch`` in ``decomposer.json`` beside the weights):

* ``encoder-decoder`` (default): a bert2bert ``EncoderDecoderModel`` warm-started from
  all-MiniLM-L6-v2 for both halves (cross-attention and LM-head transform start random).
  Its tokenizer is uncased WordPiece, hence the compact linearisation instead of JSON.
* ``seq2seq``: any ``AutoModelForSeq2SeqLM`` (e.g. google/flan-t5-base).
* ``causal``: any ``AutoModelForCausalLM``; the prompt is ``<source> => `` and the loss is
  taken on the continuation only.
* ``tagger`` (the CPU default): no decoder. A token-classification head over the encoder
  gives every word of the question its depth in a tree of nested spans
  (:mod:`searchsmith.models.qdg_spans`); the graph is read from the depths, so every step is
  copied from the question and every output is a valid graph. Rewrites come from the rewrite
  tagger only (without one the query is kept).

A model is only loadable for serving when a training run wrote ``decomposer.json`` with
``trained_steps > 0`` and no weight was MISSING at load: an untrained bert2bert generates
noise, and it must never be served as if it were fine-tuned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.config import is_int, is_number
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.io import give_plain_modes, replace_dir, temp_dir_beside
from searchsmith.models.pretrained import load_complete, read_model_meta
from searchsmith.models.qdg import DEFAULT_MAX_NODES, QDG, QDG_TYPES, parse_linear, terminal
from searchsmith.models.rewrite_edit import REWRITE_TARGETS, apply_edits, edit_target

log = logging.getLogger(__name__)

Arch = Literal["encoder-decoder", "seq2seq", "causal", "tagger"]
TAGGER = "tagger"
META_FILE = "decomposer.json"
CAUSAL_SEP = " => "
DECOMPOSE_PREFIX = "decompose: "
REWRITE_PREFIX = "rewrite: "
HISTORY_SEP = " || "


def decompose_source(question: str) -> str:
    """Model input for decomposition: ``decompose: <question>``."""
    return DECOMPOSE_PREFIX + " ".join(question.split())


def kept_turns(history: Sequence[str], max_history_turns: int) -> list[str]:
    """The turns a rewrite input keeps (whitespace collapsed, empty ones dropped): the first
    (it usually names the topic, as in TREC CAsT) and the last ``max_history_turns - 1``;
    none at 0."""
    turns = [" ".join(t.split()) for t in history if t and t.strip()]
    if max_history_turns <= 0:
        return []
    if len(turns) > max_history_turns:
        turns = turns[:1] + turns[len(turns) - (max_history_turns - 1):] if max_history_turns > 1 else turns[:1]
    return turns


def rewrite_source(history: Sequence[str], query: str, max_history_turns: int = 3, reply: str = "",
                   reply_words: int = 0) -> str:
    """Model input for rewriting: ``rewrite: <turns joined with ' || '> || [<reply> ||] <query>``.

    Only the first turn and the last ``max_history_turns - 1`` are kept (:func:`kept_turns`), so
    a long conversation does not push the query out of the encoder's window. With ``reply_words`` > 0 the first ``reply_words``
    words of ``reply`` (the system's answer to the last turn, :func:`last_reply`) come just
    before the query: a follow-up such as "Are the last two the same?" refers to what the
    answer listed, not to anything the user wrote.
    """
    turns = kept_turns(history, max_history_turns)
    said = reply.split()[:reply_words] if reply_words > 0 and turns else []
    if said:
        turns.append(" ".join(said))
    return REWRITE_PREFIX + HISTORY_SEP.join([*turns, " ".join(query.split())])


def fitted_rewrite_source(count_tokens: Callable[[str], int], history: Sequence[str], query: str,
                          max_history_turns: int, reply: str, reply_words: int, max_tokens: int) -> str:
    """:func:`rewrite_source` fitted to ``max_tokens`` (as ``count_tokens`` counts them, special
    tokens included) so that the query at the end is not truncated for the history's sake: the
    reply is cut shorter, word by word from its end, then the oldest kept turns go, then the
    last turn loses its first words (its end is nearest the query). Only a query that fills
    the window by itself is still cut. The torch model and the exported bundle build their
    inputs with this one function."""
    words = min(reply_words, len(reply.split())) if reply_words > 0 else 0
    turns = kept_turns(history, max_history_turns)
    while True:
        source = rewrite_source(turns, query, max_history_turns, reply, words)
        over = count_tokens(source) - max_tokens
        if over <= 0:
            return source
        if words > 0:
            words = max(0, min(words - 1, words - over // 2))  # a word is one or more tokens
        elif len(turns) > 1:
            turns = turns[1:]
        elif turns and len(turns[0].split()) > 1:
            last = turns[0].split()
            turns = [" ".join(last[max(1, min(len(last) - 1, over // 2)):])]
        else:
            return source


def last_reply(history: Sequence[Any]) -> str:
    """The system's answer to the last user turn: the content of the history's last turn when
    it is an ``assistant`` turn (a dict or an object with ``role``/``content``), else ``""``;
    a history of plain strings holds user turns only."""
    if not history:
        return ""
    turn = history[-1]
    if isinstance(turn, dict):
        role, content = turn.get("role", "user"), turn.get("content")
    else:
        role, content = getattr(turn, "role", "user"), getattr(turn, "content", None)
    return content if role == "assistant" and isinstance(content, str) else ""


def _set_special_tokens(model: Any, tokenizer: Any) -> None:
    """bert2bert needs these set by hand: generation starts at [CLS] and stops at [SEP]."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    eos = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    for cfg in (model.config, model.generation_config):
        cfg.decoder_start_token_id = start
        cfg.pad_token_id = tokenizer.pad_token_id
        cfg.eos_token_id = eos
    model.config.vocab_size = model.config.decoder.vocab_size


def build_bert2bert(base: str | None = "default", decoder_layers: int = 0,
                    init_cross_from_self: bool = False) -> tuple[Any, Any]:
    """A bert2bert model warm-started from ``base`` for encoder and decoder, and its tokenizer.

    Args:
        base: ``default`` (all-MiniLM-L6-v2, offline), a local BERT folder or a hub id.
        decoder_layers: keep only the first N decoder layers (0 = all). Fewer layers trade
            some quality for a faster step on CPU.
        init_cross_from_self: start each decoder layer's (new, random) cross-attention as a
            copy of its pretrained self-attention instead of random weights.
    """
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, EncoderDecoderModel

    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    kwargs = {"decoder_num_hidden_layers": decoder_layers} if decoder_layers > 0 else {}
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(path, path, **kwargs)
    if init_cross_from_self:
        for layer in model.decoder.bert.encoder.layer:
            missing, unexpected = layer.crossattention.load_state_dict(
                layer.attention.state_dict(), strict=False)
            if missing or unexpected:
                raise ConfigError(f"model.init_cross_from_self: {base!r} layers do not match "
                                  f"(missing {missing}, unexpected {unexpected}); set it false")
    _set_special_tokens(model, tokenizer)
    return model, tokenizer


def build_tiny(tokenizer_base: str | None = "default", hidden: int = 32, layers: int = 1) -> tuple[Any, Any]:
    """A random-init tiny bert2bert (seconds on CPU) with the MiniLM tokenizer: the tests' twin."""
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer_base))
    common = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=512)
    enc = BertConfig(**common)
    dec = BertConfig(**common, is_decoder=True, add_cross_attention=True)
    model = EncoderDecoderModel(EncoderDecoderConfig.from_encoder_decoder_configs(enc, dec))
    _set_special_tokens(model, tokenizer)
    return model, tokenizer


def build_tagger(base: str | None = "default", depth: int = 4, tiny_hidden: int = 0) -> tuple[Any, Any]:
    """The ``tagger`` decomposer: ``base``'s encoder with a new ``depth``-label token head.

    Args:
        base: ``default`` (all-MiniLM-L6-v2, offline), a local BERT-style folder or a hub id.
        depth: labels of the head (word depths 0..depth-1).
        tiny_hidden: > 0: a random-init one-layer encoder of this width with ``base``'s
            tokenizer instead (the tests' twin).
    """
    from searchsmith.models.hub import resolve_model
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        BertConfig,
        BertForTokenClassification,
    )

    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"model.arch tagger: {base!r} has no fast tokenizer (word alignment needs one); "
                          "use a model with a tokenizer.json")
    if tiny_hidden > 0:
        cfg = BertConfig(vocab_size=len(tokenizer), hidden_size=tiny_hidden, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=tiny_hidden * 2,
                         max_position_embeddings=512, num_labels=depth)
        return BertForTokenClassification(cfg), tokenizer
    return AutoModelForTokenClassification.from_pretrained(path, num_labels=depth), tokenizer


def tag_encode(tokenizer: Any, questions: Sequence[str], max_length: int, return_tensors: str = "pt",
               ) -> tuple[Any, list[list[int]]]:
    """Tokenize questions word by word (:func:`~searchsmith.models.qdg_spans.question_words`)
    for the tagger; also, per question, the position of each word's first token (words cut
    off by ``max_length`` have none and count as depth 0)."""
    from searchsmith.models.qdg_spans import question_words

    words = [[q[a:b] for a, b in question_words(q)] or ["?"] for q in questions]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length,
                    padding=True, return_tensors=return_tensors)
    firsts = []
    for i in range(len(words)):
        pos: dict[int, int] = {}
        for t, w in enumerate(enc.word_ids(i)):
            if w is not None and w not in pos:
                pos[w] = t
        firsts.append([pos.get(w, -1) for w in range(len(words[i]))])
    return enc, firsts


def tag_generate(sources: Sequence[str], tag_graphs: Callable[[list[str]], list[QDG]]) -> list[str]:
    """What a tagger "writes" for prefixed sources (it has no decoder): the compact form of
    its graph for ``decompose:`` sources, "" for the others. ``Decomposer.generate`` and
    ``DecomposeBundle.generate`` of a tagger, so that parity compares the same thing."""
    from searchsmith.models.qdg import linearize

    out = [""] * len(sources)
    todo = [i for i, s in enumerate(sources) if s.startswith(DECOMPOSE_PREFIX)]
    graphs = tag_graphs([sources[i][len(DECOMPOSE_PREFIX):] for i in todo]) if todo else []
    for i, g in zip(todo, graphs, strict=True):
        out[i] = linearize(g)
    return out


def depths_of(logits_row: Any, firsts: Sequence[int], switch_penalty: float = 0.0, levels: int = 0) -> list[int]:
    """Per-word label from the logits at each word's first token (label 0 where it has none).

    With ``switch_penalty`` 0: the argmax label of each word. Above 0: the label sequence of
    highest total log-probability (Viterbi) when every change of depth between neighbouring
    words costs ``switch_penalty`` nats, so that a step is not cut into one-word pieces by a
    single uncertain word. ``levels``: depth levels of labels with delete tags (the depth of
    label ``l`` is ``l % levels``; 0: the label is the depth).
    """
    import numpy as np

    if switch_penalty <= 0.0 or len(firsts) < 2:
        return [int(logits_row[t].argmax()) if t >= 0 else 0 for t in firsts]
    z = np.asarray(logits_row, dtype=np.float64)
    n_labels = z.shape[-1]
    emit = np.full((len(firsts), n_labels), -np.inf)
    for i, t in enumerate(firsts):
        if t >= 0:
            row = z[t] - z[t].max()
            emit[i] = row - np.log(np.exp(row).sum())
        else:
            emit[i, 0] = 0.0
    depth = np.arange(n_labels) % levels if levels > 0 else np.arange(n_labels)
    trans = -switch_penalty * (depth[:, None] != depth[None, :])
    score, back = emit[0], []
    for i in range(1, len(firsts)):
        cand = score[:, None] + trans
        back.append(cand.argmax(0))
        score = cand.max(0) + emit[i]
    out = [int(score.argmax())]
    for b in reversed(back):
        out.append(int(b[out[-1]]))
    return out[::-1]


def adds_of(add_logits_row: Any, firsts: Sequence[int], phrases: Sequence[str]) -> list[str]:
    """Per word, the phrase of its add tag (LaserTagger's add: written before the word in its
    step; :func:`~searchsmith.models.qdg_spans.graph_from_depths`), "" for none: the argmax of
    the add labels (0: none, ``k``: ``phrases[k - 1]``) at each word's first token."""
    out = []
    for t in firsts:
        k = int(add_logits_row[t].argmax()) if t >= 0 else 0
        out.append(phrases[k - 1] if 0 < k <= len(phrases) else "")
    return out


def build_hub(base: str, arch: Arch) -> tuple[Any, Any]:
    """Any hub seq2seq (``arch=seq2seq``) or causal LM (``arch=causal``) and its tokenizer."""
    from searchsmith.models.hub import resolve_model
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if arch == "seq2seq":
        return AutoModelForSeq2SeqLM.from_pretrained(path), tokenizer
    if arch == "causal":
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"  # generation continues from the right end
        return AutoModelForCausalLM.from_pretrained(path), tokenizer
    raise ConfigError(f"model.arch: expected 'seq2seq' or 'causal' for a hub model, got {arch!r}")


class Decomposer:
    """Batched rewrite + decomposition around a seq2seq (or causal) model.

    Args:
        model: a ``transformers`` model of kind ``arch``.
        tokenizer: its tokenizer.
        arch: ``encoder-decoder``, ``seq2seq`` or ``causal``.
        max_source_tokens: encoder input cut-off (tokens).
        max_target_tokens: generation cut-off (new tokens).
        max_nodes: cap on graph nodes (repair drops the rest).
        batch_size: sequences per ``generate`` call.
        num_beams: beam width (1 = greedy).
        max_history_turns: history turns kept by :func:`rewrite_source`.
        constrained: decode under :mod:`searchsmith.models.constrained` (the graph grammar for
            ``decompose:``, copy-from-the-conversation for ``rewrite:``); WordPiece models only.
        decompose_vocab: token ids node text may add to the question's own tokens.
        rewrite_vocab: token ids a rewrite may add to the conversation's tokens.
        rewrite_target: ``edit`` (the model writes ``old => new`` ops) or ``full`` (the whole
            standalone question).
        type_head: ``{"types", "weight" (T x H), "bias" (T)}`` from :meth:`fit_type_head`.
        rewrite_head: the rewrite tagger from :meth:`fit_rewrite_head`; when set, rewrites
            come from it instead of the decoder.
        tag_depth: ``tagger`` only: how many of the token head's labels are depths (default:
            all of them); with ``tag_drop``, depths and delete tags (``tag_depth // 2`` depth
            levels, each kept or dropped: :func:`~searchsmith.models.qdg_spans.edit_labels`).
        tag_drop: ``tagger`` only: its labels carry delete tags (words a step leaves out).
        switch_penalty: ``tagger`` only: cost of a change of depth between neighbouring words
            when the labels are decoded (:func:`depths_of`; 0: each word's argmax).
        add_phrases: ``tagger`` only: the phrases of its add tags; the head's last
            ``len(add_phrases) + 1`` labels are "no phrase" and these (:func:`adds_of`).
        reply_words: words of the system's last answer a rewrite input carries before the
            query (:func:`rewrite_source`; 0: user turns only, as models trained before it).
        choice_template: ``tagger`` only: a question that offers its answers ("..., A or B?")
            is decomposed by Break's comparison template instead of the tags
            (:func:`~searchsmith.models.qdg_spans.tagger_graph`; False: as models saved before it).
    """

    def __init__(self, model: Any, tokenizer: Any, arch: Arch = "encoder-decoder", *,
                 max_source_tokens: int = 128, max_target_tokens: int = 64,
                 max_nodes: int = DEFAULT_MAX_NODES, batch_size: int = 16, num_beams: int = 1,
                 max_history_turns: int = 3, constrained: bool = False,
                 decompose_vocab: Sequence[int] = (), rewrite_vocab: Sequence[int] = (),
                 rewrite_target: str = "full", type_head: dict[str, Any] | None = None,
                 rewrite_head: dict[str, Any] | None = None, tag_depth: int | None = None,
                 tag_drop: bool = False, switch_penalty: float = 0.0,
                 add_phrases: Sequence[str] = (), reply_words: int = 0, choice_template: bool = False) -> None:
        if rewrite_target not in REWRITE_TARGETS:
            raise ConfigError(f"rewrite_target: expected one of {list(REWRITE_TARGETS)}, got {rewrite_target!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.arch = arch
        self.max_source_tokens = max_source_tokens
        self.max_target_tokens = max_target_tokens
        self.max_nodes = max_nodes
        self.batch_size = batch_size
        self.num_beams = num_beams
        self.max_history_turns = max_history_turns
        self.reply_words = int(reply_words)
        if self.reply_words < 0:
            raise ConfigError(f"reply_words: expected a number of words >= 0, got {reply_words!r}")
        self.decompose_vocab = [int(t) for t in decompose_vocab]
        self.rewrite_vocab = [int(t) for t in rewrite_vocab]
        self.rewrite_target = rewrite_target
        self.type_head = check_type_head(type_head) if type_head else None
        self.rewrite_head = check_rewrite_head(rewrite_head) if rewrite_head else None
        # the tagger's depth labels: the first tag_depth of its head's labels (the next three,
        # when trained jointly, are the rewrite tags O/REF/TGT: rewrite_head_from_classifier)
        self.tag_depth = int(tag_depth or (model.config.num_labels if arch == TAGGER else 0))
        self.tag_drop = bool(tag_drop)
        self.switch_penalty = float(switch_penalty)
        if not isinstance(choice_template, bool):
            raise ConfigError(f"choice_template: expected true or false, got {choice_template!r}")
        self.choice_template = choice_template
        if not self.switch_penalty >= 0.0:
            raise ConfigError(f"switch_penalty: expected a number >= 0, got {switch_penalty!r}")
        if self.tag_drop and (self.tag_depth < 2 or self.tag_depth % 2):
            raise ConfigError(f"tag_drop: the tagger's {self.tag_depth} depth labels are not depth levels "
                              "times kept / dropped (an even number >= 2); re-train with model.tag_drop")
        self.add_phrases = [str(x) for x in add_phrases]
        if self.add_phrases and (arch != TAGGER or model.config.num_labels < self.tag_depth + self.add_labels):
            raise ConfigError(f"add_phrases: {len(self.add_phrases)} add phrases need a tagger whose token head has "
                              f"{self.tag_depth} depth labels plus {len(self.add_phrases) + 1} add labels; re-train "
                              "with model.tag_add_phrases")
        self.constrained = False
        self._grammar: Any = None
        self._copy: Any = None
        if constrained:
            self.set_constrained(True)

    def set_constrained(self, on: bool) -> None:
        """Switch constrained decoding on or off (ConfigError when the tokenizer cannot)."""
        if not on:
            self.constrained, self._grammar, self._copy = False, None, None
            return
        from searchsmith.models.constrained import CopyConstraint, EditConstraint, GraphGrammar

        if self.arch == "causal":
            raise ConfigError("model.constrained: not available for arch 'causal'; set it false")
        try:
            self._grammar = GraphGrammar(self.tokenizer, min(self.max_nodes, 9),
                                         self.decompose_vocab, DECOMPOSE_PREFIX.strip(),
                                         max_tokens=self.max_target_tokens)
            rewrite_cls = EditConstraint if self.rewrite_target == "edit" else CopyConstraint
            self._copy = rewrite_cls(self.tokenizer, self.rewrite_vocab, REWRITE_PREFIX.strip())
        except ValueError as exc:
            raise ConfigError(f"model.constrained: {exc}; set it false for this tokenizer") from None
        self.constrained = True

    # ----------------------------------------------------------------- training helpers

    def target_for(self, example: dict[str, Any]) -> str:
        """What the model is trained to write for a training example (``task``, ``query``,
        ``target``): the edit of the gold rewrite when ``rewrite_target`` is ``edit``."""
        if example["task"] == "rewrite" and self.rewrite_target == "edit":
            return edit_target(example["query"], example["target"])
        return example["target"]

    def prepare_batch(self, sources: Sequence[str], targets: Sequence[str]) -> dict[str, Any]:
        """Tensors for ``model(**batch).loss``: inputs padded to the longest, labels -100 on padding.

        Returns:
            ``input_ids``/``attention_mask`` (B, T_src) and ``labels`` (B, T_tgt); for
            ``causal`` all three are (B, T_src + T_tgt) with the prompt masked out of the labels.
        """
        import torch

        tok = self.tokenizer
        if self.arch == "causal":
            prompts = [s + CAUSAL_SEP for s in sources]
            full = [p + t + (tok.eos_token or "") for p, t in zip(prompts, targets, strict=True)]
            enc = tok(full, padding=True, truncation=True, return_tensors="pt",
                      max_length=self.max_source_tokens + self.max_target_tokens)
            labels = enc["input_ids"].clone()
            labels[enc["attention_mask"] == 0] = -100
            n_special = len(tok("")["input_ids"])  # a BOS some tokenizers prepend
            for i, p in enumerate(prompts):
                n_prompt = n_special + len(tok(p, add_special_tokens=False)["input_ids"])
                pad = int((enc["attention_mask"][i] == 0).sum()) if tok.padding_side == "left" else 0
                labels[i, : pad + n_prompt] = -100
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                    "labels": labels}
        enc = tok(list(sources), padding=True, truncation=True, max_length=self.max_source_tokens,
                  return_tensors="pt")
        tgt = tok(list(targets), padding=True, truncation=True,
                  max_length=self.max_target_tokens + 1, return_tensors="pt")
        labels = tgt["input_ids"]
        mask = tgt["attention_mask"]
        if self.arch == "encoder-decoder" and tok.cls_token_id is not None:
            # BERT wraps text in [CLS] ... [SEP]; [CLS] is the decoder start token, so the
            # labels are the rest (ending in [SEP] = eos).
            labels, mask = labels[:, 1:], mask[:, 1:]
        labels = labels.masked_fill(mask == 0, -100)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "labels": torch.as_tensor(labels)}

    @contextmanager
    def _eval_mode(self) -> Iterator[Any]:
        """The model in eval mode for a batched pass (its training mode restored after); yields
        its device."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield next(self.model.parameters()).device
        finally:
            self.model.train(was_training)

    def _encoder(self) -> Any:
        """The encoder whose token states the heads read (the tagger's is its base model)."""
        return self.model.base_model if self.arch == TAGGER else self.model.get_encoder()

    def prepare_tag_batch(self, questions: Sequence[str], depths: Sequence[Sequence[int]],
                          adds: Sequence[Sequence[str]] | None = None) -> dict[str, Any]:
        """Tensors for the tagger's ``model(**batch).loss``: each word's depth on its first
        token, -100 on the other tokens, special tokens and padding; with ``add_phrases`` and
        ``adds`` (per word a phrase, "" none) also ``add_labels``: 0 none, ``k`` the k-th
        phrase (a phrase outside ``add_phrases`` counts as none)."""
        import torch

        enc, firsts = tag_encode(self.tokenizer, questions, self.max_source_tokens)
        labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
        for i, (pos, ds) in enumerate(zip(firsts, depths, strict=True)):
            for t, d in zip(pos, ds, strict=False):
                if t >= 0:
                    labels[i, t] = int(d)
        out = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}
        if self.add_phrases and adds is not None:
            index = {x: k for k, x in enumerate(self.add_phrases, 1) if x}
            add_labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
            for i, (pos, xs) in enumerate(zip(firsts, adds, strict=True)):
                for t, x in zip(pos, xs, strict=False):
                    if t >= 0:
                        add_labels[i, t] = index.get(x, 0)
            out["add_labels"] = add_labels
        return out

    def prepare_rewrite_tag_batch(self, items: Sequence[tuple[Sequence[Any], str, str]]) -> dict[str, Any]:
        """Tensors for training the rewrite tags jointly with the depths: ``(history, query,
        gold rewrite)`` items, each token's tag (:func:`~searchsmith.models.rewrite_edit.tag_labels`)
        offset by ``tag_depth`` (labels ``tag_depth + 0/1/2`` = O/REF/TGT), -100 on padding."""
        import torch
        from searchsmith.models.rewrite_edit import tag_labels

        sources = [self.rewrite_input(h, q) for h, q, _ in items]
        enc = self.tokenizer(sources, padding=True, truncation=True, max_length=self.max_source_tokens,
                             return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping").tolist()
        labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
        for i, ((_h, q, gold), src) in enumerate(zip(items, sources, strict=True)):
            n = int(enc["attention_mask"][i].sum())
            tags = tag_labels(src, [tuple(o) for o in offsets[i][:n]], q, gold)
            labels[i, :n] = torch.tensor(tags, dtype=torch.long) + self.tag_depth
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}

    def rewrite_head_from_classifier(self, threshold: float, extend: float,
                                     expansion: dict[str, Any] | None = None) -> dict[str, Any]:
        """Set (and return) the rewrite tagger from the token head's rewrite labels (rows
        ``tag_depth`` .. ``tag_depth + 2``: O, REF, TGT), trained with the depths;
        ``expansion``: its ``expand``, ``term_threshold``, ``max_terms``, ``max_drop`` and
        ``references_only`` (:func:`~searchsmith.models.rewrite_edit.head_rewrite`; none: the
        edit alone)."""
        from searchsmith.models.rewrite_edit import TAGS

        layer = self.model.classifier
        lo, hi = self.tag_depth, self.tag_depth + len(TAGS)
        if layer.weight.shape[0] < hi:
            raise ConfigError(f"rewrite head: the token head has {layer.weight.shape[0]} labels, not the "
                              f"{hi} of {self.tag_depth} depths plus {list(TAGS)}; train with model.joint_rewrite")
        self.rewrite_head = check_rewrite_head({
            "tags": list(TAGS), "weight": layer.weight[lo:hi].detach().float().cpu().numpy(),
            "bias": layer.bias[lo:hi].detach().float().cpu().numpy(), "threshold": threshold, "extend": extend,
            **(expansion or {})})
        return self.rewrite_head

    @property
    def drop_levels(self) -> int:
        """Depth levels of labels with delete tags (``tag_depth // 2``), 0 without them."""
        return self.tag_depth // 2 if self.tag_drop else 0

    @property
    def add_labels(self) -> int:
        """How many of the token head's labels (its last ones) are add labels: none + one per
        phrase; 0 without ``add_phrases``."""
        return len(self.add_phrases) + 1 if self.add_phrases else 0

    def tag_depths(self, questions: Sequence[str]) -> list[list[int]]:
        """Per question, each word's predicted label (the tagger; batched, no grad): its depth,
        or with ``tag_drop`` its depth and delete tag (:func:`~searchsmith.models.qdg_spans.edit_labels`)."""
        return [labels for labels, _ in self.tag_labels(questions)]

    def tag_labels(self, questions: Sequence[str]) -> list[tuple[list[int], list[str]]]:
        """Per question, :meth:`tag_depths`' labels and each word's add phrase (:func:`adds_of`;
        all "" without ``add_phrases``)."""
        import torch

        out: list[tuple[list[int], list[str]]] = []
        n_add = self.add_labels
        with self._eval_mode() as device:
            for start in range(0, len(questions), self.batch_size):
                chunk = list(questions[start:start + self.batch_size])
                enc, firsts = tag_encode(self.tokenizer, chunk, self.max_source_tokens)
                feeds = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                with torch.no_grad():
                    logits = self.model(**feeds).logits.float().cpu().numpy()
                for i in range(len(chunk)):
                    labels = depths_of(logits[i, :, : self.tag_depth], firsts[i], self.switch_penalty,
                                       self.drop_levels)
                    adds = (adds_of(logits[i, :, -n_add:], firsts[i], self.add_phrases) if n_add
                            else [""] * len(firsts[i]))
                    out.append((labels, adds))
        return out

    def tag_graphs(self, questions: Sequence[str], max_nodes: int | None = None) -> list[QDG]:
        """The tagger's graph of each question (models/qdg_spans.py)."""
        from searchsmith.models.qdg_spans import tagger_graph

        cap = max_nodes or self.max_nodes
        return [tagger_graph(q, labels, cap, self.drop_levels, adds, self.choice_template)
                for q, (labels, adds) in zip(questions, self.tag_labels(questions), strict=True)]

    # ----------------------------------------------------------------- generation

    def generate(self, sources: Sequence[str], constraint: Any = None,
                 use_type_head: bool = False) -> list[str]:
        """Decoded generations for prefixed sources, in input order (batched).

        Args:
            sources: prefixed model inputs.
            constraint: a :mod:`searchsmith.models.constrained` object applied to every
                source (None: free decoding).
            use_type_head: force each row's first token to the type head's choice (needs
                the graph grammar as ``constraint`` and a fitted head).
        """
        import torch
        from transformers.modeling_outputs import BaseModelOutput

        if self.arch == TAGGER:
            return tag_generate(sources, self.tag_graphs)
        out: list[str] = []
        with self._eval_mode() as device:
            for start in range(0, len(sources), self.batch_size):
                chunk = list(sources[start:start + self.batch_size])
                if self.arch == "causal":
                    chunk = [s + CAUSAL_SEP for s in chunk]
                enc = self.tokenizer(chunk, padding=True, truncation=True,
                                     max_length=self.max_source_tokens, return_tensors="pt")
                enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                extra: dict[str, Any] = {}
                rows = [[int(t) for t, m in zip(r, a, strict=True) if m]
                        for r, a in zip(enc["input_ids"].tolist(),
                                        enc["attention_mask"].tolist(), strict=True)]
                types = None
                if use_type_head and self.type_head and constraint is not None and self.arch != "causal":
                    with torch.no_grad():
                        hidden = self.model.get_encoder()(**enc).last_hidden_state
                    types = self.predict_types(hidden.float().cpu().numpy(),
                                               enc["attention_mask"].cpu().numpy())
                    extra["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden)
                    enc = {"attention_mask": enc["attention_mask"]}
                if constraint is not None:
                    extra["prefix_allowed_tokens_fn"] = constraint.prefix_fn(rows, types)
                    extra["num_beams"] = 1  # the constraint's batch_id is the row
                with torch.no_grad():
                    ids = self.model.generate(**enc, max_new_tokens=self.max_target_tokens,
                                              num_beams=extra.pop("num_beams", self.num_beams),
                                              do_sample=False, **extra)
                if self.arch == "causal":
                    ids = ids[:, enc["attention_mask"].shape[1]:]
                out.extend(self.tokenizer.batch_decode(ids, skip_special_tokens=True,
                                                       clean_up_tokenization_spaces=True))
        return out

    # ----------------------------------------------------------------- type head

    def pooled_states(self, sources: Sequence[str]) -> Any:
        """(n, H) float32 mean-pooled encoder states of prefixed sources (batched, no grad)."""
        import numpy as np

        rows = [states.mean(0) for states, _ in self.token_states(sources)]
        width = self._encoder().config.hidden_size
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, width), np.float32)

    def fit_type_head(self, questions: Sequence[str], types: Sequence[str], l2: float = 1e-3,
                      max_iter: int = 200) -> dict[str, Any]:
        """Fit (and set) the type head on training questions and their gold graph types.

        Softmax regression on the standardised pooled encoder states, L2 penalty ``l2`` on
        the weights, solved with L-BFGS; the standardisation is folded into the saved
        weight and bias, so applying it is one affine map.
        """
        if len(questions) != len(types) or not questions:
            raise ValidationError(f"type head: need as many types as questions (>0), got "
                                  f"{len(questions)} questions and {len(types)} types")
        bad = sorted(set(types) - set(QDG_TYPES))
        if bad:
            raise ValidationError(f"type head: unknown graph types {bad}; expected {list(QDG_TYPES)}")
        x = self.pooled_states([decompose_source(q) for q in questions])
        wt, bias = fit_softmax(x, [QDG_TYPES.index(t) for t in types], len(QDG_TYPES), l2, max_iter)
        self.type_head = check_type_head({"types": list(QDG_TYPES), "weight": wt, "bias": bias})
        return self.type_head

    def token_states(self, sources: Sequence[str]) -> list[tuple[Any, list[tuple[int, int]]]]:
        """Per source: its (T, H) float32 encoder token states (padding cut off) and the
        tokens' character offsets."""
        import torch

        if self.arch == "causal":
            raise ConfigError("decomposer heads: arch 'causal' has no encoder")
        out = []
        with self._eval_mode() as device:
            for start in range(0, len(sources), self.batch_size):
                chunk = list(sources[start:start + self.batch_size])
                enc = self.tokenizer(chunk, padding=True, truncation=True, max_length=self.max_source_tokens,
                                     return_tensors="pt", return_offsets_mapping=True)
                offsets = enc.pop("offset_mapping").tolist()
                feeds = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                with torch.no_grad():
                    hidden = self._encoder()(**feeds).last_hidden_state.float().cpu().numpy()
                for i, n in enumerate(enc["attention_mask"].sum(1).tolist()):
                    out.append((hidden[i, :n], [tuple(o) for o in offsets[i][:n]]))
        return out

    def fit_rewrite_head(self, items: Sequence[tuple[Sequence[Any], str, str]], l2: float = 1e-3,
                         threshold: float = 0.3, extend: float = 0.15, max_iter: int = 200,
                         expansion: dict[str, Any] | None = None) -> dict[str, Any]:
        """Fit (and set) the rewrite tagger on ``(history, query, gold rewrite)`` items.

        Token labels come from :func:`searchsmith.models.rewrite_edit.tag_labels`; the head is
        softmax regression over the encoder's token states (as the type head over pooled
        ones). ``threshold`` and ``extend`` are :func:`tag_rewrite`'s; ``expansion`` as for
        :meth:`rewrite_head_from_classifier`.
        """
        import numpy as np
        from searchsmith.models.rewrite_edit import TAGS, tag_labels

        items = [it for it in items if _user_turns(it[0])]
        if not items:
            raise ValidationError("rewrite head: no item has user history to learn from")
        sources = [self.rewrite_input(h, q) for h, q, _ in items]
        xs, ys = [], []
        for (_h, q, gold), src, (states, offs) in zip(items, sources, self.token_states(sources), strict=True):
            xs.append(states)
            ys += tag_labels(src, offs, q, gold)
        wt, bias = fit_softmax(np.concatenate(xs), ys, len(TAGS), l2, max_iter)
        self.rewrite_head = check_rewrite_head({"tags": list(TAGS), "weight": wt, "bias": bias,
                                                "threshold": threshold, "extend": extend, **(expansion or {})})
        return self.rewrite_head

    def rewrite_input(self, history: Sequence[Any], query: str) -> str:
        """The model input for rewriting ``query`` after ``history``: its user turns and, with
        ``reply_words``, the start of the system's last answer (:func:`fitted_rewrite_source`)."""
        return fitted_rewrite_source(self._count_tokens, _user_turns(history), query, self.max_history_turns,
                                     last_reply(history), self.reply_words, self.max_source_tokens)

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, truncation=False)["input_ids"])

    def tag_rewrites(self, items: Sequence[tuple[Sequence[Any], str]]) -> list[str]:
        """Rewrites of ``(history, query)`` pairs by the rewrite tagger (the query when it has
        no user history)."""
        from searchsmith.models.rewrite_edit import head_rewrite

        out = [q for _, q in items]
        todo = [i for i, (h, _) in enumerate(items) if _user_turns(h)]
        sources = [self.rewrite_input(items[i][0], items[i][1]) for i in todo]
        for i, src, (states, offs) in zip(todo, sources, self.token_states(sources), strict=True):
            head = self.rewrite_head
            out[i] = head_rewrite(items[i][1], _conversation_texts(items[i][0]), src, offs,
                                  head_probs(head, states), head)
        return out

    def predict_types(self, hidden: Any, mask: Any) -> list[str]:
        """Graph type per row from (B, T, H) encoder states and their (B, T) mask."""
        return predict_types(self.type_head, hidden, mask)

    def decompose_batch(self, questions: Sequence[str],
                        max_nodes: int | None = None) -> list[tuple[QDG, bool, str]]:
        """(graph, well-formed as generated, raw generation) per question; never raises."""
        cap = max_nodes or self.max_nodes
        if self.arch == TAGGER:
            from searchsmith.models.qdg import linearize

            try:
                graphs = self.tag_graphs(list(questions), cap)
            except Exception as exc:  # noqa: BLE001 - serving must not die on a model failure
                log.warning("decomposer: tagging failed (%s); answering terminal graphs", exc)
                return [(terminal(q), False, "") for q in questions]
            return [(g, True, linearize(g)) for g in graphs]
        try:
            texts = self.generate([decompose_source(q) for q in questions], self._grammar,
                                  use_type_head=True)
        except Exception as exc:  # noqa: BLE001 - serving must not die on a model failure
            log.warning("decomposer: generation failed (%s); answering terminal graphs", exc)
            return [(terminal(q), False, "") for q in questions]
        out = []
        for q, text in zip(questions, texts, strict=True):
            graph, valid = parse_linear(text, q, max_nodes=cap)
            out.append((graph, valid, text))
        return out

    def decompose(self, question: str, max_nodes: int | None = None) -> QDG:
        """The QDG for ``question`` (``terminal`` with the question when the output is unusable)."""
        return self.decompose_batch([question], max_nodes)[0][0]

    def rewrite_batch(self, items: Sequence[tuple[Sequence[Any], str]]) -> list[str]:
        """Standalone rewrites of ``(history, query)`` pairs; the query itself on failure.

        A query without (user) history is returned as it is: there is nothing to resolve
        against, and the model can only make it worse.
        """
        out = [q for _, q in items]
        if self.rewrite_head:
            try:
                return self.tag_rewrites(items)
            except Exception as exc:  # noqa: BLE001 - serving must not die on a model failure
                log.warning("decomposer: rewrite tagging failed (%s); keeping the queries", exc)
                return out
        if self.arch == TAGGER:  # no decoder: without the rewrite tagger the query is kept
            return out
        todo = [i for i, (h, _) in enumerate(items) if _user_turns(h)]
        sources = [self.rewrite_input(items[i][0], items[i][1]) for i in todo]
        try:
            texts = self.generate(sources, self._copy) if sources else []
        except Exception as exc:  # noqa: BLE001 - serving must not die on a model failure
            log.warning("decomposer: rewrite failed (%s); keeping the queries", exc)
            return out
        for i, text in zip(todo, texts, strict=True):
            if self.rewrite_target == "edit":
                out[i] = apply_edits(items[i][1], text, _conversation_texts(items[i][0]))
            else:
                out[i] = " ".join(text.split()) or out[i]
        return out

    def rewrite(self, history: Sequence[Any], query: str) -> str:
        """``query`` made standalone given the conversation ``history`` (list of {role, content})."""
        return self.rewrite_batch([(history, query)])[0]

    # ----------------------------------------------------------------- save / load

    def save(self, path: str | Path, trained_steps: int, extra: dict[str, Any] | None = None) -> Path:
        """Write weights, tokenizer and ``decomposer.json`` atomically (temp folder, then rename)."""
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_dir_beside(dest)  # unique to this process: two saves never share one
        self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        meta = {"arch": self.arch, "trained_steps": int(trained_steps),
                "max_source_tokens": self.max_source_tokens,
                "max_target_tokens": self.max_target_tokens, "max_nodes": self.max_nodes,
                "num_beams": self.num_beams, "max_history_turns": self.max_history_turns,
                "reply_words": self.reply_words, "constrained": self.constrained, "decompose_vocab": self.decompose_vocab,
                "rewrite_vocab": self.rewrite_vocab, "rewrite_target": self.rewrite_target,
                "type_head": type_head_json(self.type_head),
                "rewrite_head": type_head_json(self.rewrite_head),
                **({"tag_depth": self.tag_depth, "tag_drop": self.tag_drop, "switch_penalty": self.switch_penalty,
                    "add_phrases": self.add_phrases, "choice_template": self.choice_template}
                   if self.arch == TAGGER else {}), **(extra or {})}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        give_plain_modes(tmp)  # safetensors writes its weights 0600 whatever the umask
        replace_dir(tmp, dest)
        return dest

    @classmethod
    def load(cls, path: str | Path, device: str | None = None, **overrides: Any) -> Decomposer:
        """Load a fine-tuned decomposer; refuse an untrained one or one with MISSING weights.

        Raises:
            BundleError: no ``decomposer.json``, ``trained_steps`` 0, or weights missing.
        """
        p, meta = read_model_meta(path, META_FILE, "decomposer", "it is not a trained decomposer (train one "
                                  "with: searchsmith train recipes/decomposer/minilm_bert2bert.yaml)")
        if int(meta.get("trained_steps", 0)) <= 0:
            raise BundleError(
                f"decomposer: {str(p)!r} was never fine-tuned (trained_steps=0 in {META_FILE}); "
                "an untrained model generates noise. Train it first")
        arch = meta.get("arch", "encoder-decoder")
        from transformers import (
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoModelForTokenClassification,
            AutoTokenizer,
            EncoderDecoderModel,
        )

        loaders = {"encoder-decoder": EncoderDecoderModel, "seq2seq": AutoModelForSeq2SeqLM,
                   "causal": AutoModelForCausalLM, TAGGER: AutoModelForTokenClassification}
        loader = loaders.get(arch)
        if loader is None:
            raise BundleError(f"decomposer: {META_FILE} arch {arch!r} is not one of {sorted(loaders)}")
        model = load_complete(loader, p, "decomposer",
                              "the checkpoint is incomplete. Re-save it from a training run")
        tokenizer = AutoTokenizer.from_pretrained(p)
        if arch == "causal":
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            tokenizer.padding_side = "left"
        if device:
            model.to(device)
        kwargs = {k: meta[k] for k in ("max_source_tokens", "max_target_tokens", "max_nodes",
                                       "num_beams", "max_history_turns", "reply_words", "constrained",
                                       "decompose_vocab", "rewrite_vocab", "rewrite_target",
                                       "type_head", "rewrite_head", "tag_depth", "tag_drop", "switch_penalty",
                                       "add_phrases", "choice_template")
                  if k in meta}
        kwargs.update(overrides)
        return cls(model, tokenizer, arch, **kwargs)


def _mean_pool(hidden: Any, mask: Any) -> Any:
    import numpy as np

    m = mask[..., None].astype(np.float32)
    return (hidden * m).sum(1) / np.maximum(m.sum(1), 1.0)


def type_head_json(head: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checked head (type or rewrite) as JSON-ready values (None stays None)."""
    if not head:
        return None
    out = {k: v for k, v in head.items() if k not in ("weight", "bias")}
    return {**out, "weight": [[float(v) for v in r] for r in head["weight"]],
            "bias": [float(v) for v in head["bias"]]}


def fit_softmax(x: Any, y: Sequence[int], n_classes: int, l2: float, max_iter: int = 200) -> tuple[Any, Any]:
    """Softmax regression on standardised ``x`` (L2 penalty ``l2``, L-BFGS); the weight and
    bias returned apply to raw ``x`` (the standardisation folded in)."""
    import numpy as np
    import torch

    x = np.asarray(x, dtype=np.float64)
    mean, std = x.mean(0), x.std(0) + 1e-6
    xs = torch.as_tensor((x - mean) / std)
    yt = torch.as_tensor(list(y))
    w = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xs @ w.T + b, yt) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    wt = w.detach().numpy() / std
    return wt, b.detach().numpy() - wt @ mean


def check_rewrite_head(head: Any) -> dict[str, Any]:
    """The rewrite tagger as saved in ``decomposer.json`` / a manifest, checked (BundleError)."""
    import numpy as np
    from searchsmith.models.rewrite_edit import REWRITE_EXPANSIONS, TAGS

    if not isinstance(head, dict) or not {"tags", "weight", "bias", "threshold", "extend"} <= set(head):
        raise BundleError("rewrite_head: expected an object with 'tags', 'weight', 'bias', 'threshold' "
                          "and 'extend'; re-save the model (or drop the key to rewrite with the decoder)")
    w, b = np.asarray(head["weight"], dtype=np.float32), np.asarray(head["bias"], dtype=np.float32)
    if list(head["tags"]) != list(TAGS) or w.ndim != 2 or w.shape[0] != len(TAGS) or b.shape != (len(TAGS),):
        raise BundleError(f"rewrite_head: tags must be {list(TAGS)} with weight (3 x hidden) and bias (3); "
                          f"got {head['tags']}, weight {w.shape}, bias {b.shape}")
    expand = head.get("expand", "none")  # heads saved before term expansion append nothing
    if expand not in REWRITE_EXPANSIONS:
        raise BundleError(f"rewrite_head.expand: expected one of {list(REWRITE_EXPANSIONS)}, got {expand!r}")
    term_threshold = float(head.get("term_threshold", head["threshold"]))
    max_terms = head.get("max_terms", 8)
    if not 0.0 < term_threshold < 1.0 or not is_int(max_terms, 1):
        raise BundleError(f"rewrite_head: term_threshold must be in (0, 1) and max_terms an integer >= 1, got "
                          f"{term_threshold} and {max_terms!r}; re-save the model")
    max_drop = head.get("max_drop", 1.0)  # heads saved before the cap let an edit drop any share
    if not is_number(max_drop) or not 0.0 < max_drop <= 1.0:
        raise BundleError(f"rewrite_head.max_drop: expected a share of the query's words in (0, 1], got "
                          f"{max_drop!r}; re-save the model")
    references_only = head.get("references_only", False)  # heads saved before: any run may be replaced
    if not isinstance(references_only, bool):
        raise BundleError(f"rewrite_head.references_only: expected true or false, got {references_only!r}; "
                          "re-save the model")
    return {"tags": list(TAGS), "weight": w, "bias": b, "threshold": float(head["threshold"]),
            "extend": float(head["extend"]), "expand": expand, "term_threshold": term_threshold,
            "max_terms": max_terms, "max_drop": float(max_drop), "references_only": references_only}


def head_probs(head: dict[str, Any], states: Any) -> Any:
    """Softmax of a checked head over (T, H) token states: (T, classes)."""
    import numpy as np

    states = np.asarray(states, dtype=np.float32)
    if states.shape[-1] != head["weight"].shape[1]:
        raise BundleError(f"head: weight has {head['weight'].shape[1]} inputs but the encoder states have "
                          f"{states.shape[-1]}; the head belongs to another model")
    z = states @ head["weight"].T + head["bias"]
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def depth_head_json(model: Any, depth: int) -> dict[str, Any]:
    """The tagger's depth labels of its token head (``classifier`` rows ``0 .. depth - 1``) as
    JSON lists: what an exported bundle applies to its encoder graph's states
    (``generation.depth_head``)."""
    layer = model.classifier
    return {"weight": layer.weight[:depth].detach().float().cpu().tolist(),
            "bias": layer.bias[:depth].detach().float().cpu().tolist()}


def add_head_json(model: Any, phrases: Sequence[str]) -> dict[str, Any]:
    """The tagger's add labels (the token head's last ``len(phrases) + 1`` rows: none, then
    each phrase) and the phrases, as JSON: ``generation.add_head`` of an exported bundle."""
    layer, n = model.classifier, len(phrases) + 1
    return {"weight": layer.weight[-n:].detach().float().cpu().tolist(),
            "bias": layer.bias[-n:].detach().float().cpu().tolist(), "phrases": [str(x) for x in phrases]}


def check_add_head(head: Any) -> dict[str, Any]:
    """An add head as saved by :func:`add_head_json`: a depth-head-like ``weight`` / ``bias``
    of ``len(phrases) + 1`` labels and ``phrases``, strings without ``#`` (a phrase is never a
    reference). Raises ValidationError naming what is wrong."""
    check_depth_head(head)
    phrases = head.get("phrases")
    if not isinstance(phrases, list) or not all(isinstance(x, str) and "#" not in x for x in phrases):
        raise ValidationError("add head: 'phrases' must be a list of strings without '#'")
    if len(head["bias"]) != len(phrases) + 1:
        raise ValidationError(f"add head: {len(head['bias'])} labels for {len(phrases)} phrases; expected "
                              f"{len(phrases) + 1} (none, then one per phrase)")
    return head


def check_depth_head(head: Any) -> dict[str, Any]:
    """A depth head as saved by :func:`depth_head_json`: ``weight`` (L x H) and ``bias`` (L),
    L >= 1. Raises ValidationError naming what is wrong."""
    import numpy as np

    if not isinstance(head, dict) or "weight" not in head or "bias" not in head:
        raise ValidationError("depth head: expected an object with 'weight' and 'bias'")
    try:
        weight = np.asarray(head["weight"], dtype=np.float32)
        bias = np.asarray(head["bias"], dtype=np.float32)
    except (TypeError, ValueError):
        raise ValidationError("depth head: 'weight' and 'bias' must be numbers") from None
    if weight.ndim != 2 or bias.shape != (weight.shape[0],) or weight.shape[0] < 1:
        raise ValidationError(f"depth head: weight {weight.shape} and bias {bias.shape} do not make an "
                              "L x H head with L >= 1 labels")
    if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
        raise ValidationError("depth head: weights are not all finite")
    return head


def check_type_head(head: Any) -> dict[str, Any]:
    """``head`` as saved in ``decomposer.json`` / a bundle manifest, checked (BundleError)."""
    import numpy as np

    if not isinstance(head, dict) or not {"types", "weight", "bias"} <= set(head):
        raise BundleError("type_head: expected an object with 'types', 'weight' and 'bias'; "
                          "re-save the model (or drop the key to decode without it)")
    types = list(head["types"])
    w, b = np.asarray(head["weight"], dtype=np.float32), np.asarray(head["bias"], dtype=np.float32)
    if set(types) - set(QDG_TYPES) or w.ndim != 2 or w.shape[0] != len(types) or b.shape != (len(types),):
        raise BundleError(f"type_head: types {types} must be among {list(QDG_TYPES)} with weight "
                          f"(types x hidden) and bias (types); got weight {w.shape}, bias {b.shape}")
    return {"types": types, "weight": w, "bias": b}


def predict_types(head: dict[str, Any], hidden: Any, mask: Any) -> list[str]:
    """Graph types from a checked head, (B, T, H) encoder states and the (B, T) mask."""
    import numpy as np

    pooled = _mean_pool(np.asarray(hidden, dtype=np.float32), np.asarray(mask))
    if pooled.shape[1] != head["weight"].shape[1]:
        raise BundleError(f"type_head: weight has {head['weight'].shape[1]} inputs but the encoder "
                          f"states have {pooled.shape[1]}; the head belongs to another model")
    scores = pooled @ head["weight"].T + head["bias"]
    return [head["types"][i] for i in scores.argmax(1)]


def _user_turns(history: Sequence[Any]) -> list[str]:
    """User turns' text from dicts, strings or objects with ``role``/``content`` (such as
    serving's ``Turn``); the system's answers are not among them (:func:`last_reply`)."""
    turns = []
    for h in history:
        if isinstance(h, str):
            turns.append(h)
        elif isinstance(h, dict):
            if h.get("role", "user") == "user" and isinstance(h.get("content"), str):
                turns.append(h["content"])
        elif getattr(h, "role", "user") == "user" and isinstance(getattr(h, "content", None), str):
            turns.append(h.content)  # serving.rewrite.Turn and the like
    return turns


def _conversation_texts(history: Sequence[Any]) -> list[str]:
    """The texts a rewrite may take words (and their casing) from: the user turns and the
    system's last answer."""
    reply = last_reply(history)
    return [*_user_turns(history), *([reply] if reply else [])]


__all__ = ["check_rewrite_head", "check_type_head", "fit_softmax", "head_probs", "predict_types", "type_head_json", "DECOMPOSE_PREFIX", "Decomposer", "HISTORY_SEP", "META_FILE", "REWRITE_PREFIX",
           "decompose_source", "fitted_rewrite_source", "last_reply", "rewrite_source", "build_bert2bert", "build_hub", "build_tiny"]
