"""Inference for the citation models trained by the ``citation`` recipe.

A trained model folder (``RUN_DIR/model``)::

    tagger/          HF AutoModelForTokenClassification + tokenizer, id2label = BIO labels
    scorer/          HF AutoModelForSequenceClassification (1 logit = supports)
    citation.json    {"labels", "max_length", "tagger_max_length", "support_threshold",
                      "trained_steps": {"tagger": n, "scorer": m},
                      "cosine_residual": {...} or absent, ...}

With ``cosine_residual`` (:class:`CosineResidual`) the scorer's logit is a correction added to
a logistic fit of the bi-encoder cosine, so that the trained scorer starts from, and can be
shrunk back to, the pipeline's untrained cosine attribution: callers pass each pair's cosine
(the best cosine between the sentence and one sentence of the passage, by the embedder the
residual names) to ``attribute(pairs, cosine=...)``.

Example::

    m = CitationModel.load("runs/citation_minilm/model")
    m.entities(["Quarry 2.0 shipped on 12 March 2024."])  # [[(0, 6, 'ENT'), (7, 10, 'NUM'), ...]]
    m.attribute([("Quarry is written in Rust.", "Quarry is a vector database written in Rust.")])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.models.io import read_json_object
from searchsmith.models.tokenizer import encode_pairs, input_meta

# BIO labels of the entity tagger (training/citation.py documents what each type covers).
LABELS: tuple[str, ...] = ("O", "B-ENT", "I-ENT", "B-NUM", "I-NUM", "B-DATE", "I-DATE")
ENTITY_TYPES: tuple[str, ...] = ("ENT", "NUM", "DATE")


def decode_spans(offsets: Sequence[tuple[int, int]], label_ids: Sequence[int],
                 labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """Character spans from per-token BIO predictions (an I- without its B- starts a span)."""
    spans: list[tuple[int, int, str]] = []
    cur: list[Any] | None = None
    for (a, b), li in zip(offsets, label_ids, strict=True):
        if b <= a:
            continue
        lab = labels[li]
        if lab == "O":
            cur = None
            continue
        kind, typ = lab.split("-", 1)
        if kind == "I" and cur is not None and cur[2] == typ:
            cur[1] = b
            spans[-1] = (cur[0], cur[1], typ)
            continue
        cur = [a, b, typ]
        spans.append((a, b, typ))
    return spans


@dataclass(frozen=True)
class CosineResidual:
    """How the scorer's logit combines with the bi-encoder cosine of the pair.

    ``logit = cross_weight * scorer_logit + scale * cosine + bias``; P(supports) = sigmoid.
    ``scale`` and ``bias`` are a logistic regression of the cosine on the training pairs
    (the untrained baseline as a probability), ``cross_weight`` in [0, 1] is how much of the
    trained scorer's correction is kept (chosen on the calibration claims: 0 serves the
    cosine alone).

    Attributes:
        scale: weight of the cosine.
        bias: intercept.
        cross_weight: weight of the cross-encoder's logit.
        embedder: the bi-encoder whose cosine was fitted (a display name; the pipeline's
            embedder should be the same model).
    """

    scale: float
    bias: float
    cross_weight: float = 1.0
    embedder: str = "all-MiniLM-L6-v2"

    def __post_init__(self) -> None:
        for name in ("scale", "bias", "cross_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise BundleError(f"cosine_residual.{name}: expected a finite number, got {v!r}")
        if not 0.0 <= self.cross_weight <= 1.0:
            raise BundleError(f"cosine_residual.cross_weight must be in [0, 1], got {self.cross_weight}")

    @classmethod
    def from_json(cls, raw: Any) -> CosineResidual | None:
        """None for an absent (null) entry; :class:`BundleError` for a malformed one."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or not {"scale", "bias"} <= set(raw):
            raise BundleError(f"cosine_residual: expected {{'scale', 'bias', 'cross_weight', 'embedder'}}, "
                              f"got {str(raw)[:120]}; re-export the bundle or retrain the citation model")
        return cls(scale=raw["scale"], bias=raw["bias"], cross_weight=raw.get("cross_weight", 1.0),
                   embedder=str(raw.get("embedder", "all-MiniLM-L6-v2")))

    def to_json(self) -> dict[str, Any]:
        return {"scale": self.scale, "bias": self.bias, "cross_weight": self.cross_weight,
                "embedder": self.embedder, "feature": "best cosine of the sentence with one passage sentence"}

    def logits(self, cross_logits: np.ndarray, cosine: Any) -> np.ndarray:
        """(N,) combined logits from the scorer's (N,) logits and the (N,) cosines.

        Raises:
            ValidationError: ``cosine`` is missing, of another length, or not finite.
        """
        n = len(cross_logits)
        if cosine is None:
            raise ValidationError(f"attribute: this scorer adds the bi-encoder cosine ({self.embedder}); pass "
                                  "cosine=[the best cosine of each sentence with one sentence of its passage]")
        try:
            cos = np.asarray(cosine, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):  # ["x"] was numpy's "could not convert string to float"
            raise ValidationError(f"attribute: cosine must be numbers, one per pair, got {cosine!r:.60}") from None
        if len(cos) != n or not np.all(np.isfinite(cos)):
            raise ValidationError(f"attribute: cosine needs {n} finite values (one per pair), got "
                                  f"{len(cos)}{'' if np.all(np.isfinite(cos)) else ' with NaN or inf'}")
        if len(cos) and (cos.min() < -1.0 - 1e-4 or cos.max() > 1.0 + 1e-4):  # 5.0 made P(supports) 1.0
            raise ValidationError(f"attribute: a cosine lies in [-1, 1], got values in [{cos.min():.4g}, "
                                  f"{cos.max():.4g}]; pass the bi-encoder cosine of each pair")
        return self.cross_weight * np.asarray(cross_logits, np.float64) + self.scale * cos + self.bias

    def probs(self, cross_logits: np.ndarray, cosine: Any) -> np.ndarray:
        """(N,) float32 P(supports)."""
        return sigmoid(self.logits(cross_logits, cosine)).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def fit_cosine_logistic(cosine: Sequence[float], labels: Sequence[int], l2: float = 1e-3,
                        steps: int = 50) -> tuple[float, float]:
    """``(scale, bias)`` of a logistic regression of ``labels`` on ``cosine`` (Newton's method).

    Raises:
        ValidationError: fewer than two pairs, or a single class.
    """
    x = np.asarray(cosine, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    if len(x) != len(y) or len(x) < 2 or len(set(y.tolist())) < 2:
        raise ValidationError(f"fit_cosine_logistic: needs pairs of both labels, got {len(x)} cosines "
                              f"and {len(y)} labels with classes {sorted(set(y.tolist()))}")
    X = np.stack([x, np.ones_like(x)], 1)  # (N, 2)
    w = np.zeros(2)
    reg = np.diag([l2, 0.0]) * len(x)
    for _ in range(steps):
        p = sigmoid(X @ w)
        grad = X.T @ (p - y) + reg @ w
        hess = (X * (p * (1 - p))[:, None]).T @ X + reg + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(w[0]), float(w[1])


def score_pairs(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int,
                batch_size: int = 64, return_logits: bool = False) -> np.ndarray:
    """P(supports) = sigmoid(logit) of (sentence, passage) pairs, (N,) float32, input order
    (the raw logits with ``return_logits``)."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        probs = np.zeros(len(pairs), dtype=np.float32)
        # Sorted by length so batches pad little; written back by index.
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            enc = encode_pairs(tokenizer, [pairs[i][0] for i in idx], [pairs[i][1] for i in idx], max_length,
                               padding=True, return_tensors="pt")
            logits = model(**enc.to(device)).logits.view(-1).float()  # (B,)
            probs[idx] = (logits if return_logits else torch.sigmoid(logits)).cpu().numpy()
    if was_training:
        model.train()
    return probs


def tag_sentences(model: Any, tokenizer: Any, sentences: Sequence[str], max_length: int,
                  labels: Sequence[str] = LABELS, batch_size: int = 64
                  ) -> list[list[tuple[int, int, str]]]:
    """Predicted entity spans ``(start, end, type)`` in character offsets, per sentence."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        out: list[list[tuple[int, int, str]]] = []
        for s in range(0, len(sentences), batch_size):
            batch = list(sentences[s:s + batch_size])
            enc = tokenizer(batch, padding=True, truncation=True, max_length=max_length,
                            return_offsets_mapping=True, return_special_tokens_mask=True,
                            return_tensors="pt")
            offsets = enc.pop("offset_mapping").tolist()
            special = enc.pop("special_tokens_mask").tolist()
            pred = model(**enc.to(device)).logits.argmax(-1).cpu().tolist()  # (B, T)
            for off, sp, pr in zip(offsets, special, pred, strict=True):
                keep = [(tuple(o), p) for o, m, p in zip(off, sp, pr, strict=True) if not m]
                out.append(decode_spans([k[0] for k in keep], [k[1] for k in keep], labels))
    if was_training:
        model.train()
    return out


def _check_texts(texts: Any, what: str) -> list[str]:
    if not isinstance(texts, (list, tuple)):
        raise ValidationError(f"{what}: expected a list of strings, got {type(texts).__name__}")
    if not texts:
        raise ValidationError(f"{what}: the list is empty; pass at least one")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValidationError(f"{what}[{i}]: expected a string, got {type(t).__name__}")
    return list(texts)


class CitationModel:
    """Entity tagger and attribution scorer loaded from a trained citation model folder.

    Attributes:
        tagger: the token-classification model (eval mode).
        scorer: the sequence-classification model, one logit (eval mode).
        tokenizer: the shared (fast) tokenizer.
        labels: BIO labels, index = class id of the tagger.
        max_length: token limit of a (sentence, passage) pair.
        tagger_max_length: token limit of a tagged sentence.
        support_threshold: P(supports) at or above which a passage counts as supporting.
        cosine_residual: how the scorer adds to the bi-encoder cosine, or None (the scorer
            alone).
    """

    def __init__(self, tagger: Any, scorer: Any, tokenizer: Any, meta: dict[str, Any],
                 device: str) -> None:
        self.tagger, self.scorer, self.tokenizer = tagger, scorer, tokenizer
        self.meta = meta
        self.labels: list[str] = list(meta["labels"])
        self.max_length = int(meta["max_length"])
        self.tagger_max_length = int(meta.get("tagger_max_length", self.max_length))
        self.support_threshold = float(meta["support_threshold"])
        self.cosine_residual = CosineResidual.from_json(meta.get("cosine_residual"))
        self.device = device

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None) -> CitationModel:
        """Load ``model_dir`` (``RUN_DIR/model``; a run folder ``RUN_DIR`` also works).

        Raises:
            BundleError: missing files, a folder whose models were never trained, or a tagger
                whose labels differ from ``citation.json``.
        """
        import torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        root = Path(model_dir)
        if (root / "model" / "citation.json").is_file():
            root = root / "model"
        meta_path = root / "citation.json"
        if not meta_path.is_file():
            raise BundleError(f"{root}: no citation.json; expected a citation model folder "
                              "(RUN_DIR/model written by 'searchsmith train recipes/citation/...')")
        meta = read_json_object(meta_path, "citation model", fix="retrain or re-save the model", error=BundleError)
        missing = [k for k in ("labels", "max_length", "support_threshold") if k not in meta]
        if missing:
            raise BundleError(f"{meta_path}: missing keys {missing}")
        steps = meta.get("trained_steps") or {}
        untrained = [n for n in ("tagger", "scorer") if int(steps.get(n, 0) or 0) < 1]
        if untrained:
            raise BundleError(f"{root}: the {' and '.join(untrained)} model(s) were never trained "
                              f"(citation.json trained_steps={steps}); train with "
                              "'searchsmith train recipes/citation/minilm_full.yaml' and load its "
                              "RUN_DIR/model")
        for sub in ("tagger", "scorer"):
            if not (root / sub / "config.json").is_file():
                raise BundleError(f"{root / sub}: missing config.json; the folder is incomplete "
                                  "(rerun the training command to rewrite it)")
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            tokenizer = AutoTokenizer.from_pretrained(root / "tagger")
        except (OSError, ValueError) as exc:
            raise BundleError(f"{root / 'tagger'}: cannot load the tokenizer ({exc})") from None
        from searchsmith.models.reranker import load_reranker

        tagger = AutoModelForTokenClassification.from_pretrained(root / "tagger").to(dev).eval()
        # a [CLS] cross-encoder (exactly one logit, else BundleError) or the segment-cosine head
        scorer = load_reranker(root / "scorer", "citation scorer").to(dev).eval()
        id2label = [tagger.config.id2label[i] for i in range(tagger.config.num_labels)]
        if id2label != list(meta["labels"]):
            raise BundleError(f"{root / 'tagger'}: its labels {id2label} differ from "
                              f"citation.json {meta['labels']}; the tagger was not trained by "
                              "the citation recipe")
        return cls(tagger, scorer, tokenizer, meta, dev)

    def entities(self, sentences: Sequence[str], return_meta: bool = False
                 ) -> list[list[tuple[int, int, str]]] | tuple[list[list[tuple[int, int, str]]], dict]:
        """Entity spans ``(start, end, type)`` in character offsets of each sentence.

        Args:
            sentences: (N,) strings.
            return_meta: also return ``{"truncated": [indices cut to max_length], "max_length"}``.
        """
        texts = _check_texts(sentences, "entities")
        spans = tag_sentences(self.tagger, self.tokenizer, texts, self.tagger_max_length,
                              self.labels)
        if not return_meta:
            return spans
        lengths = [len(ids) for ids in self.tokenizer(texts)["input_ids"]]
        return spans, input_meta(lengths, self.tagger_max_length)

    def attribute(self, pairs: Sequence[tuple[str, str]], return_meta: bool = False,
                  cosine: Sequence[float] | None = None) -> np.ndarray | tuple[np.ndarray, dict]:
        """P(the passage supports the sentence) for each ``(sentence, passage)`` pair.

        Args:
            pairs: (N,) ``(sentence, passage)`` string pairs.
            return_meta: also return ``{"truncated", "max_length"}``.
            cosine: (N,) the bi-encoder cosine of each pair; required when the model has a
                ``cosine_residual``, ignored otherwise.

        Returns:
            (N,) float32 probabilities (and the meta dict when ``return_meta``).
        """
        if not isinstance(pairs, (list, tuple)) or not pairs:
            raise ValidationError("attribute: expected a non-empty list of (sentence, passage) pairs")
        for i, p in enumerate(pairs):
            if (not isinstance(p, (list, tuple)) or len(p) != 2
                    or not all(isinstance(x, str) for x in p)):
                raise ValidationError(f"attribute[{i}]: expected a (sentence, passage) pair of "
                                      f"strings, got {str(p)[:80]}")
        res = self.cosine_residual
        if res is not None:
            res.logits(np.zeros(len(pairs)), cosine)  # checks the cosines before the model runs
        probs = score_pairs(self.scorer, self.tokenizer, [tuple(p) for p in pairs],
                            self.max_length, return_logits=res is not None)
        if res is not None:
            probs = res.probs(probs, cosine)
        if not return_meta:
            return probs
        enc = self.tokenizer([p[0] for p in pairs], [p[1] for p in pairs])["input_ids"]
        return probs, input_meta([len(ids) for ids in enc], self.max_length)


__all__ = ["ENTITY_TYPES", "LABELS", "CitationModel", "CosineResidual", "decode_spans", "fit_cosine_logistic",
           "score_pairs", "sigmoid", "tag_sentences"]
