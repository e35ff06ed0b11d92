"""Data for the citation recipe: (sentence, passage, supports) pairs, weak entity labels and the
held-out eval file.

Pair sources (``data.sources``; the recipe registers each as the dataset ``citation/<name>``;
pairs are keyed by claim/question id):

* ``wice``: WiCE claims vs their cited page. Positive: a supporting-sentence set joined;
  negatives: as many page sentences outside every supporting set. ``supported`` claims
  only by default (``data.wice_partial``: a partially supported claim's set supports part).
* ``expertqa``: answer sentences (``[n]`` markers removed) vs their evidence passages,
  label from the expert's ``support`` (Complete = 1; Partial, Incomplete, Missing = 0;
  N/A skipped), plus ``data.expertqa_cross_negatives`` passages cited by another sentence
  of the same answer (different URL) as negatives.
* ``scifact``: SciFact claims vs their evidence abstracts: a SUPPORT rationale set joined
  (positive) vs as many non-rationale sentences of the same abstract (negative).
* ``synthetic``: from the demo corpus shipped in ``models/demo`` (no ../shared needed):
  a sentence vs a window of its own document containing it (positive), a window of
  another document of the same source and one of another source (negatives).

The split is seeded and by claim/question id (``split_by_key``), never by pair, so no
sentence of a held-out claim is trained on.

Entity labels: none of the open sets labels entities, so the tagger trains on **weak labels**,
the spans of the shared entity rule :func:`searchsmith.models.text.entity_spans` (the one the
serving pipeline's fallback uses), turned into BIO token labels by :func:`token_labels`.

``python -m searchsmith.training.cite_data --write-eval OUT.jsonl [--recipe R.yaml] [k=v ...]``
writes a recipe's held-out split (same sources, seed and ratio as training) in the "cite"
format of ``searchsmith eval --help``, for ``searchsmith eval cite --data OUT.jsonl``.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from searchsmith.models.citation import LABELS
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import read_jsonl
from searchsmith.models.text import BM25_STOP_WORDS, entity_spans, sentence_texts
from searchsmith.training.data import (
    SHARED_DATA,
    check_leave_out,
    resolve_data_path,
    split_by_key,
    split_leaving_out,
    write_jsonl_atomic,
)
from searchsmith.training.dataset_shapes import (
    EXPERTQA_ATTRIBUTION,
    SCIFACT_ABSTRACT,
    SCIFACT_CLAIM,
    WICE,
    scifact_outside_corpus,
)
from searchsmith.training.registry import get_dataset

DATASET_PREFIX = "citation/"


@dataclass(frozen=True)
class CitationData:
    """Where the (sentence, passage, supports) pairs come from and how they are split.

    Data paths resolve as given (relative to the current folder), else against the
    repository root; a path is read only when its source is in ``sources``.

    Attributes:
        sources: the pair builders (registered as ``citation/<name>``) to train and evaluate
            on: ``wice``, ``expertqa``, ``scifact`` (real sets in ../shared/data) and
            ``synthetic`` (windows of ``synthetic_corpus``; needs no ../shared).
        wice: WiCE claims JSONL (``label``, ``claim``, ``evidence`` sentences,
            ``supporting_sentences`` index sets).
        expertqa: ExpertQA attribution JSONL (``question``, ``claims`` with
            ``claim_string``, ``evidence`` passages and the expert's ``support``).
        scifact_claims: SciFact claims JSONL (``id``, ``claim``, ``evidence``: abstract id ->
            rationale sentence sets labelled SUPPORT or CONTRADICT).
        scifact_corpus: SciFact abstracts JSONL (``doc_id``, ``abstract`` sentences) the
            claims' evidence points into.
        synthetic_claims: sentences drawn from ``synthetic_corpus`` (documents taken in a
            shuffled round), each giving one supporting window and up to two
            non-supporting ones; at least 1 when ``synthetic`` is a source.
        synthetic_window: sentences per synthetic passage (a window of consecutive
            sentences; the positive one contains the claim sentence). Larger: longer
            passages in which the claim is a smaller part, more tokens per pair.
        expertqa_cross_negatives: per ExpertQA answer sentence, how many passages cited by
            other sentences of the same answer (other URLs) are added as negatives: on-topic
            passages that do not support it; 0 adds none.
        eval_ratio: share of the claims/questions (all sources together, by id) held out
            for evaluation and never trained on; a synthetic claim's id is its document, so
            one document's claims stay on one side. Both sides need both labels.
        leave_out: sources whose claims are all held out (never trained or calibrated on): a
            leave-one-dataset-out evaluation; their figures (``attribution/<source>/*``)
            are then out-of-domain. Each must be in ``sources``; empty: the usual split.
        calibration_ratio: share of the training claims kept out of the scorer's training
            to calibrate it (the residual's ``cross_weight`` and, with
            ``calibrate_threshold``, the support threshold); 0 keeps none (the recipe's
            settings are used as given). In [0, 0.5).
        split_seed: seed of the train/held-out split and of the random choices in building
            the pairs (sampled negatives, caps, synthetic windows).
    """

    sources: list[str] = field(default_factory=lambda: ["wice", "expertqa", "scifact", "synthetic"])
    wice: str = f"{SHARED_DATA}/wice/wice_claim_dev.jsonl"
    expertqa: str = f"{SHARED_DATA}/expertqa/expertqa_domain_test_attribution.jsonl"
    scifact_claims: str = f"{SHARED_DATA}/scifact/claims_dev.jsonl"
    scifact_corpus: str = f"{SHARED_DATA}/scifact/corpus_subset.jsonl"
    # The synthetic source's corpus (the corpus JSONL of searchsmith index); "demo" =
    # models/demo/corpus.jsonl.
    synthetic_corpus: str = "demo"
    synthetic_claims: int = 300
    synthetic_window: int = 3
    # A "negative" window holding this share of the claim's content words or more is dropped:
    # the demo reports some events twice, so another document may well support the claim.
    synthetic_max_negative_overlap: float = 0.8
    # WiCE partially_supported claims: their sets support only part of the claim.
    wice_partial: Literal["skip", "positive", "negative"] = "skip"
    # SciFact CONTRADICT rationales: on topic but refuting (an NLI problem, not attribution).
    scifact_contradict: Literal["skip", "negative"] = "skip"
    expertqa_cross_negatives: int = 1
    # Negatives drawn per positive passage (WiCE, SciFact).
    negatives_per_positive: int = 2
    # Caps per source, to keep a CPU run in minutes (0 = no cap); counted in claims.
    max_claims_per_source: int = 0
    eval_ratio: float = 0.2
    leave_out: list[str] = field(default_factory=list)
    calibration_ratio: float = 0.0
    split_seed: int = 13
    # Embedder whose cosine(sentence, passage) is the untuned baseline ("none": skip it).
    baseline_embedder: str = "default"
    # Cosine attribution as the pipeline runs it without a citation model (best cosine of the
    # sentence with a passage sentence, cut here; serving citation.cosine_threshold): the
    # baseline the pipeline's gate compares the scorer with (F1 at this cut, and ROC AUC).
    baseline_cosine_threshold: float = 0.6

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one, e.g. [synthetic]")
        for name in ("synthetic_claims", "expertqa_cross_negatives", "max_claims_per_source"):
            if getattr(self, name) < 0:
                raise ValueError(f"data.{name} must be >= 0, got {getattr(self, name)}")
        if self.synthetic_window < 1:
            raise ValueError(f"data.synthetic_window must be >= 1, got {self.synthetic_window}")
        if self.negatives_per_positive < 1:
            raise ValueError(f"data.negatives_per_positive must be >= 1, got {self.negatives_per_positive}")
        check_leave_out(self.sources, self.leave_out)
        if not 0 <= self.calibration_ratio < 0.5:
            raise ValueError(f"data.calibration_ratio must be in [0, 0.5), got {self.calibration_ratio}")
        if not 0 < self.synthetic_max_negative_overlap <= 1:
            raise ValueError("data.synthetic_max_negative_overlap must be in (0, 1], got "
                             f"{self.synthetic_max_negative_overlap}")


# ----------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class Pair:
    """One (sentence, passage) pair; ``key`` is the claim/question id the split uses."""

    key: str
    source: str
    sentence: str
    passage: str
    label: int


def _cap(items: list[Any], data: CitationData, seed: int) -> list[Any]:
    if data.max_claims_per_source and len(items) > data.max_claims_per_source:
        items = list(items)
        random.Random(seed).shuffle(items)
        return items[:data.max_claims_per_source]
    return items


def _set_vs_rest(key: str, source: str, claim: str, sentences: Sequence[str],
                 positive_sets: Sequence[Sequence[int]], n_neg: int,
                 rng: random.Random) -> list[Pair]:
    """Each supporting set joined (positive) and ``n_neg`` same-size samples of sentences
    outside every set (negatives), so that length does not give the label away."""
    used = {i for s in positive_sets for i in s}
    rest = [i for i in range(len(sentences)) if i not in used and sentences[i].strip()]
    out = []
    for sset in positive_sets:
        idx = sorted(i for i in sset if 0 <= i < len(sentences))
        if not idx:
            continue
        out.append(Pair(key, source, claim, " ".join(sentences[i] for i in idx), 1))
        for _ in range(n_neg):
            if len(rest) < len(idx):
                break
            neg = sorted(rng.sample(rest, len(idx)))
            out.append(Pair(key, source, claim, " ".join(sentences[i] for i in neg), 0))
    return out


def _wice_records(path: Path) -> list[dict[str, Any]]:
    """WiCE's records, each checked as it is read (as every source's, by its shape in
    training/dataset_shapes.py): a record without what the loaders read is refused at its
    FILE:LINE, naming the field, never met as a TypeError mid-build nor read as other data."""
    return WICE.read(path, "data.wice", ("label", "claim", "evidence", "supporting_sentences"), ("meta",))


def wice_pairs(data: CitationData) -> list[Pair]:
    """WiCE: claim vs its cited page's supporting-sentence sets and other sentences."""
    path = resolve_data_path(data.wice, "data.wice")
    rng = random.Random(data.split_seed)
    recs = _cap(_wice_records(path), data, data.split_seed)
    out: list[Pair] = []
    for n, r in enumerate(recs):
        key = f"wice-{(r.get('meta') or {}).get('id', n)}"
        sets = [s for s in r["supporting_sentences"] if s]
        label = r["label"]
        if label == "partially_supported" and data.wice_partial == "skip":
            continue
        if label == "not_supported" or (label == "partially_supported"
                                        and data.wice_partial == "negative"):
            # No set supports the claim: its first set (or a random sentence) is a negative.
            if not sets and r["evidence"]:
                sets = [[rng.randrange(len(r["evidence"]))]]
            # every index is of a sentence of evidence (the shape's wice_sets_past_evidence)
            out.extend(Pair(key, "wice", r["claim"], " ".join(r["evidence"][i] for i in s), 0)
                       for s in sets[:1])
            continue
        out.extend(_set_vs_rest(key, "wice", r["claim"], r["evidence"], sets[:1],
                                data.negatives_per_positive, rng))
    return [p for p in out if p.passage.strip()]


_MARKER_RE = re.compile(r"\s*\[\d+\]")
# The expert's support judgement as a label; N/A claims are skipped.
EXPERTQA_LABELS = {"Complete": 1, "Partial": 0, "Incomplete": 0, "Missing": 0}


def expertqa_pairs(data: CitationData) -> list[Pair]:
    """ExpertQA: answer sentence vs its evidence passages, labelled by the expert; plus
    passages cited by other sentences of the same answer as negatives."""
    path = resolve_data_path(data.expertqa, "data.expertqa")
    rng = random.Random(data.split_seed)
    recs = _cap(EXPERTQA_ATTRIBUTION.read(path, "data.expertqa", ("question", "claims")), data, data.split_seed)
    out: list[Pair] = []
    for n, r in enumerate(recs):
        key = f"expertqa-{n}"
        claims = []
        for c in r["claims"]:
            ev = [e for e in (c.get("evidence") or []) if e.get("text")]
            if ev:
                claims.append((_MARKER_RE.sub("", c.get("claim_string") or "").strip(), ev,
                               c.get("support")))
        for i, (sent, ev, support) in enumerate(claims):
            if not sent:
                continue
            if support in EXPERTQA_LABELS:
                out.append(Pair(key, "expertqa", sent, " ".join(e["text"] for e in ev),
                                EXPERTQA_LABELS[support]))
            urls = {e.get("url") for e in ev}
            others = [e for j, (_, ev2, _) in enumerate(claims) if j != i for e in ev2
                      if e.get("url") not in urls]
            rng.shuffle(others)
            out.extend(Pair(key, "expertqa", sent, e["text"], 0)
                       for e in others[:data.expertqa_cross_negatives])
    return out


def scifact_pairs(data: CitationData) -> list[Pair]:
    """SciFact: a claim vs a rationale set of its evidence abstract (joined) and as many
    other sentences of that abstract."""
    claims_path = resolve_data_path(data.scifact_claims, "data.scifact_claims")
    corpus_path = resolve_data_path(data.scifact_corpus, "data.scifact_corpus")
    docs = {str(d["doc_id"]): d["abstract"]
            for d in SCIFACT_ABSTRACT.read(corpus_path, "data.scifact_corpus", ("doc_id", "abstract"))}
    rng = random.Random(data.split_seed)
    claims = [c for c in SCIFACT_CLAIM.read(claims_path, "data.scifact_claims", ("id", "claim", "evidence"),
                                            then=scifact_outside_corpus(docs, f"{corpus_path} (data.scifact_corpus)"))
              if c["evidence"]]
    out: list[Pair] = []
    for c in _cap(claims, data, data.split_seed):
        key = f"scifact-{c['id']}"
        for doc_id, sets in sorted(c["evidence"].items()):
            sents = docs[doc_id]
            support = [s["sentences"] for s in sets if s["label"] == "SUPPORT"]
            contra = [s["sentences"] for s in sets if s["label"] == "CONTRADICT"]
            out.extend(_set_vs_rest(key, "scifact", c["claim"], sents, support,
                                    data.negatives_per_positive, rng))
            if data.scifact_contradict == "negative":
                out.extend(Pair(key, "scifact", c["claim"], " ".join(sents[i] for i in s), 0)
                           for s in contra if s)
    return out


_WORD_RE = re.compile(r"[a-z0-9]+")


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in BM25_STOP_WORDS}


def synthetic_pairs(data: CitationData) -> list[Pair]:
    """A sentence of a demo document vs a window of that document containing it (supports),
    a window of another document of the same source and one of another source (not)."""
    if data.synthetic_claims < 1:
        raise ConfigError("data.synthetic_claims must be >= 1 when 'synthetic' is a source")
    if data.synthetic_corpus == "demo":
        from searchsmith.models.demo import corpus_path

        path = corpus_path()
    else:
        path = resolve_data_path(data.synthetic_corpus, "data.synthetic_corpus")
    docs = []
    for d in read_jsonl(path, required=("id", "text")):
        sents = [s for s in sentence_texts(d["text"], "lines") if len(s.split()) >= 5]
        if len(sents) >= 2:
            docs.append((str(d["id"]), str(d.get("source", "")), sents))
    if len(docs) < 3:
        raise ValidationError(f"{path}: {len(docs)} documents with two or more sentences; the "
                              "synthetic source needs at least 3")
    rng = random.Random(data.split_seed)
    w = data.synthetic_window
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, (_, src, _) in enumerate(docs):
        by_source[src].append(i)

    def window(sents: list[str], around: int | None = None) -> str:
        if len(sents) <= w:
            return " ".join(sents)
        lo = rng.randint(max(0, around - w + 1), min(around, len(sents) - w)) if around is not None \
            else rng.randint(0, len(sents) - w)
        return " ".join(sents[lo:lo + w])

    out: list[Pair] = []
    order = list(range(len(docs)))
    for n in range(data.synthetic_claims):
        di = order[n % len(order)]
        if n % len(order) == 0:
            rng.shuffle(order)
            di = order[0]
        doc_id, src, sents = docs[di]
        si = rng.randrange(len(sents))
        claim = sents[si]
        key = f"synthetic-{doc_id}"
        out.append(Pair(key, "synthetic", claim, window(sents, si), 1))
        words = _content_words(claim)
        same = [j for j in by_source[src] if j != di] or [j for j in range(len(docs)) if j != di]
        other = [j for j in range(len(docs)) if docs[j][1] != src] or same
        for pool in (same, other):
            neg = window(docs[rng.choice(pool)][2])
            if words and len(words & _content_words(neg)) / len(words) >= \
                    data.synthetic_max_negative_overlap:
                continue
            out.append(Pair(key, "synthetic", claim, neg, 0))
    return out


def load_pairs(data: CitationData) -> list[Pair]:
    """Every pair of every source in ``data.sources``, validated."""
    pairs: list[Pair] = []
    for name in data.sources:
        got = get_dataset(DATASET_PREFIX + name, field="data.sources")(data)
        if not got:
            raise ValidationError(f"data.sources: {name!r} gave no (sentence, passage) pair "
                                  "(empty dataset); check its file")
        for p in got:
            if p.label not in (0, 1):
                raise ValidationError(f"data.sources[{name}]: pair of {p.key!r} has label "
                                      f"{p.label!r} out of range; expected 0 or 1")
            if not p.sentence.strip() or not p.passage.strip():
                raise ValidationError(f"data.sources[{name}]: pair of {p.key!r} has an empty "
                                      "sentence or passage")
        pairs.extend(got)
    return pairs


def eval_items(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Pairs grouped per sentence in the "cite" format of ``searchsmith eval --help`` (entities: the weak labels)."""
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        groups.setdefault((p.key, p.sentence), []).append(p)
    items = []
    for (key, sentence), ps in groups.items():
        docs = [{"id": f"{key}:{i}", "text": p.passage} for i, p in enumerate(ps)]
        items.append({"id": key, "source": ps[0].source, "sentence": sentence, "documents": docs,
                      "cited": [d["id"] for d, p in zip(docs, ps, strict=True) if p.label == 1],
                      "entities": [list(s) for s in entity_spans(sentence)]})
    return items


def split_pairs(pairs: Sequence[Pair], data: CitationData) -> tuple[list[Pair], list[Pair]]:
    """Train and held-out pairs, split by claim/question key; both classes held out."""
    train_keys, eval_keys = split_leaving_out([p.key for p in pairs], [p.source for p in pairs], data.leave_out,
                                              data.eval_ratio, data.split_seed)
    train_p = [p for p in pairs if p.key in train_keys]
    eval_p = [p for p in pairs if p.key in eval_keys]
    if not train_p or not eval_p or len({p.label for p in eval_p}) < 2 \
            or len({p.label for p in train_p}) < 2:
        raise ValidationError(f"data: {len(pairs)} pairs of {len({p.key for p in pairs})} claims "
                              "cannot be split into train and held-out sets that both hold "
                              f"supporting and non-supporting pairs (data.eval_ratio="
                              f"{data.eval_ratio}); add data (e.g. raise data.synthetic_claims)")
    return train_p, eval_p


def calibration_split(train_p: Sequence[Pair], data: CitationData) -> tuple[list[Pair], list[Pair]]:
    """(pairs the scorer trains on, calibration pairs): ``data.calibration_ratio`` of the
    training claims, by key, kept out of training; ``(train_p, [])`` when the ratio is 0.

    Raises:
        ValidationError: a side without both labels.
    """
    if not data.calibration_ratio:
        return list(train_p), []
    fit_keys, cal_keys = split_by_key([p.key for p in train_p], data.calibration_ratio, data.split_seed + 1)
    fit_p = [p for p in train_p if p.key in fit_keys]
    cal_p = [p for p in train_p if p.key in cal_keys]
    if len({p.label for p in fit_p}) < 2 or len({p.label for p in cal_p}) < 2:
        raise ValidationError(f"data.calibration_ratio={data.calibration_ratio}: the {len(cal_keys)} calibration "
                              f"claims or the {len(fit_keys)} others lack supporting or non-supporting pairs; "
                              "raise the ratio, add data, or set it to 0")
    return fit_p, cal_p


def wice_sentence_items(data: CitationData, trained_keys: set[str]) -> list[dict[str, Any]]:
    """WiCE's sentence-level task on the claims the scorer never saw, in the "cite" format.

    One item per WiCE claim with a supporting set (supported or partially supported) whose key
    is not in ``trained_keys``: the claim vs each sentence of its cited page as its own
    document, ``cited`` = the union of the supporting sets. Pooled over the pairs, attribution
    P/R/F1 of these items is sentence-level P/R/F1 against WiCE's sets.
    """
    path = resolve_data_path(data.wice, "data.wice")
    recs = _cap(_wice_records(path), data, data.split_seed)
    items = []
    for n, r in enumerate(recs):
        key = f"wice-{(r.get('meta') or {}).get('id', n)}"
        ev = r["evidence"]
        gold = sorted({i for st in r["supporting_sentences"] for i in st})  # each < len(ev): the shape's rule
        if key in trained_keys or r["label"] == "not_supported" or not gold:
            continue
        docs = [{"id": f"{key}:s{i}", "text": t} for i, t in enumerate(ev) if t.strip()]
        cited = [f"{key}:s{i}" for i in gold if ev[i].strip()]
        if cited:
            items.append({"id": key, "source": "wice_sentences", "label": r["label"], "sentence": r["claim"],
                          "documents": docs, "cited": cited})
    return items


# ----------------------------------------------------------------------------- weak entity labels


def token_labels(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]],
                 special: Sequence[bool]) -> list[int]:
    """BIO label ids for one tokenized sentence from character spans.

    Args:
        offsets: (T,) character ``(start, end)`` of each token.
        spans: ``(start, end, type)`` entity spans.
        special: (T,) True for special / padding tokens (label -100: ignored by the loss).
    """
    out = []
    for (a, b), sp in zip(offsets, special, strict=True):
        if sp or b <= a:
            out.append(-100)
            continue
        lab = 0
        for s, e, t in spans:
            if a >= s and b <= e:
                lab = LABELS.index(("B-" if a == s else "I-") + t)
                break
        out.append(lab)
    return out


# ----------------------------------------------------------------------------- eval file


def write_eval_file(out: str | Path, recipe: str | Path = "recipes/citation/minilm_full.yaml",
                    overrides: Sequence[str] = ()) -> Path:
    """Write the held-out split of ``recipe`` (same sources, seed, ratio) as citation JSONL."""
    from searchsmith.training.citation import CitationRecipe
    from searchsmith.training.config import load_recipe_config

    cfg = load_recipe_config(recipe, list(overrides))
    if not isinstance(cfg, CitationRecipe):
        raise ConfigError(f"--recipe: {recipe} is a {cfg.recipe!r} recipe, not 'citation'")
    _, eval_p = split_pairs(load_pairs(cfg.data), cfg.data)
    return write_jsonl_atomic(out, eval_items(eval_p))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, write the file, print where it is."""
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.cite_data",
                                description="write a citation recipe's held-out split as JSONL")
    p.add_argument("--write-eval", required=True, metavar="OUT.jsonl")
    p.add_argument("--recipe", default="recipes/citation/minilm_full.yaml")
    p.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="recipe overrides, e.g. data.sources=[synthetic]")
    a = p.parse_args(argv)
    out = write_eval_file(a.write_eval, a.recipe, a.overrides)
    print(f"wrote {out}")
    return 0


__all__ = [
    "DATASET_PREFIX",
    "CitationData",
    "Pair",
    "calibration_split",
    "eval_items",
    "expertqa_pairs",
    "load_pairs",
    "main",
    "scifact_pairs",
    "split_pairs",
    "synthetic_pairs",
    "token_labels",
    "wice_pairs",
    "wice_sentence_items",
    "write_eval_file",
]


if __name__ == "__main__":  # pragma: no cover
    # Run through the package module: this file as __main__ is a second copy of it, whose
    # classes would not be the ones the recipe (imported by the config loader) uses.
    from searchsmith.models.console import run_module_main
    from searchsmith.training.cite_data import main as _main

    raise SystemExit(run_module_main(_main, "python -m searchsmith.training.cite_data"))
