"""Parity of an exported bundle with its torch model, on held-out inputs.

:func:`parity_check` compares the torch reference, the fp32 graphs and the final graphs
(fp32, fp16 or int8) task by task: max absolute difference of logits and embeddings, row
cosines, ranking agreement (:func:`kendall_tau`), identical generations, tagger and scorer
agreement; :class:`ParityThresholds` says what counts as "the same model". The int8
calibration inputs (:func:`calibration_feeds`) come from the same held-out pool
(:mod:`~searchsmith.models.parity_inputs`), disjoint from the inputs parity runs on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from searchsmith.models.config import is_int
from searchsmith.models.errors import ConfigError
from searchsmith.models.parity_inputs import ParityInputs, parity_inputs
from searchsmith.models.runtime import Bundle

log = logging.getLogger(__name__)

Dtype = Literal["fp32", "fp16", "int8"]


@dataclass(frozen=True)
class ParityThresholds:
    """What the export accepts as "the same model".

    Attributes:
        fp32_max_abs: max |torch - ONNX| on logits and embeddings of the fp32 graphs.
        fp16_min_cosine: min per-row cosine of fp16 embeddings against torch fp32.
        int8_min_cosine: the same for int8.
        rerank_min_kendall_tau: a query's ranking passes when its top-10 is identical or its
            Kendall tau against torch is at least this.
        decompose_min_identical: share of held-out inputs whose generated text is identical.
        read_min_agreement: share of held-out questions whose reader answer (text and kind) is
            the torch model's (fp16/int8).
        cite_min_agreement: share of tagger labels and of scorer decisions (at the support
            threshold) that agree with torch (fp16/int8).
        heldout_texts: held-out texts (and decomposer inputs; rerank groups: a quarter as
            many) that parity runs on (``--parity-inputs``, 2..4096).
    """

    fp32_max_abs: float = 1e-4
    fp16_min_cosine: float = 0.999
    int8_min_cosine: float = 0.99
    rerank_min_kendall_tau: float = 0.95
    decompose_min_identical: float = 0.98
    cite_min_agreement: float = 0.98
    read_min_agreement: float = 0.95
    heldout_texts: int = 32

    def __post_init__(self) -> None:
        n = self.heldout_texts
        if not is_int(n, 2) or n > 4096:
            raise ConfigError(f"export --parity-inputs: expected an int in 2..4096, got {n!r} (32 is the default)")


# ----------------------------------------------------------------------------- held-out inputs


def calibration_feeds(task: str, bundle: Bundle, graph: str, n: int,
                      inputs: ParityInputs) -> list[dict[str, np.ndarray]] | None:
    """Feeds of ``graph`` for int8 calibration: ``n`` held-out inputs none of which parity uses
    (``inputs.calibration_texts`` / ``calibration_groups``: the demo data or ``--parity-data``).

    Texts for the embedder, the image model's text tower and the citation tagger; (question,
    passage) pairs for the reranker and (text, text) pairs for the citation scorer. ``None``
    for graphs that take no text (vision, the decomposer's) or when there are no inputs left.
    """
    names = {i["name"] for i in bundle.manifest["graphs"][graph]["inputs"]}
    if not names <= {"input_ids", "attention_mask", "token_type_ids"}:
        return None
    if task == "read":
        groups = inputs.calibration_groups[: max(1, n // 4)]
        return _read_feeds(bundle, groups) if groups else None
    if task == "rerank":
        pairs = [(q, p) for q, ps in inputs.calibration_groups for p in ps][:n]
        return _raw_feeds(bundle, graph, [q for q, _ in pairs], [p for _, p in pairs]) if pairs else None
    texts = inputs.calibration_texts[:n]
    if not texts:
        return None
    if task == "cite" and graph == "scorer":
        return _raw_feeds(bundle, graph, texts, texts[1:] + texts[:1])
    if task == "cite":
        return _raw_feeds(bundle, graph, texts, max_length=getattr(bundle, "tagger_max_length", None))
    return _raw_feeds(bundle, graph, texts)


# ----------------------------------------------------------------------------- parity


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall tau-b of two score vectors (1 = same order)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif da == db:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else 1.0


def _raw_feeds(bundle: Bundle, graph: str, texts: list[str], second: list[str] | None = None,
               max_length: int | None = None) -> list[dict[str, np.ndarray]]:
    names = {i["name"] for i in bundle.manifest["graphs"][graph]["inputs"]}
    return [{k: v for k, v in feeds.items() if k in names}
            for _, feeds in bundle._encode_text(texts, second, max_length)]


def _read_feeds(bundle: Bundle, groups: list[tuple[str, list[str]]]) -> list[dict[str, np.ndarray]]:
    """Padded window feeds of (question, passages) groups, as the reader runs them."""
    from searchsmith.models.reader import encode_windows, join_passages, pad_windows

    wins = encode_windows(bundle.tokenizer, [q for q, _ in groups],
                          [join_passages([("", p) for p in ps])[0] for _, ps in groups], bundle.settings)
    names = {i["name"] for i in bundle.manifest["graphs"]["model"]["inputs"]}
    pad = bundle.tokenizer.pad_token_id or 0
    return [{k: v for k, v in pad_windows(wins.windows[s:s + 8], pad).items() if k in names}
            for s in range(0, len(wins.windows), 8)]


def _max_abs(ref: Callable, got: Callable, feeds: list[dict[str, np.ndarray]]) -> float:
    worst = 0.0
    for f in feeds:
        worst = max(worst, float(np.abs(ref(f) - got(f)).max()))
    return worst


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def parity_check(task: str, ref: Bundle, fp32: Bundle, final: Bundle, dtype: Dtype, th: ParityThresholds,
                 reference_generate: Callable[[list[str]], list[str]] | None = None,
                 images: list[Any] | None = None, inputs: ParityInputs | None = None) -> dict[str, Any]:
    """Compare the ONNX bundles (fp32 and the final dtype) with the torch reference on the
    held-out ``inputs`` (default: the demo inputs, :func:`~searchsmith.models.parity_inputs.demo_inputs`).

    Returns:
        The parity report: figures, thresholds and ``passed`` (all checks) per check.
    """
    n = th.heldout_texts
    inputs = inputs or parity_inputs(task, n)
    texts = inputs.texts
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, value: float, limit: float, higher_is_better: bool) -> None:
        ok = value >= limit if higher_is_better else value <= limit
        checks[name] = {"value": float(value), "limit": float(limit), "passed": bool(ok)}

    if task == "embed" or task == "images":
        graph = "model" if task == "embed" else "text"
        check(f"{graph}_fp32_max_abs", _max_abs(ref.graphs[graph], fp32.graphs[graph],
                                                _raw_feeds(ref, graph, texts)), th.fp32_max_abs, False)
        encode = "encode" if task == "embed" else "encode_text"
        a, b = getattr(ref, encode)(texts), getattr(final, encode)(texts)
        if task == "images" and images:
            pix = ref.preprocess(images)
            check("vision_fp32_max_abs", float(np.abs(ref.graphs["vision"]({"pixel_values": pix})
                                                      - fp32.graphs["vision"]({"pixel_values": pix})).max()),
                  th.fp32_max_abs, False)
            a = np.concatenate([a, ref.encode_images(images)])
            b = np.concatenate([b, final.encode_images(images)])
        if dtype != "fp32":
            limit = th.fp16_min_cosine if dtype == "fp16" else th.int8_min_cosine
            check(f"{dtype}_min_cosine", float(_cosines(a, b).min()), limit, True)
    elif task == "rerank":
        groups = inputs.groups
        qs = [q for q, ps in groups for _ in ps]
        ps = [p for _, group in groups for p in group]
        check("logits_fp32_max_abs", _max_abs(ref.graphs["model"], fp32.graphs["model"],
                                              _raw_feeds(ref, "model", qs, ps)), th.fp32_max_abs, False)
        if dtype != "fp32":
            taus, top_same, passed = [], [], []
            for q, group in groups:
                a, b = ref.score(q, group), final.score(q, group)
                tau = kendall_tau(a, b)
                same = list(np.argsort(-a, kind="stable")[:10]) == list(np.argsort(-b, kind="stable")[:10])
                taus.append(tau)
                top_same.append(same)
                passed.append(same or tau >= th.rerank_min_kendall_tau)
            check(f"{dtype}_queries_passing", float(np.mean(passed)), 1.0, True)
            checks[f"{dtype}_queries_passing"].update(
                {"min_kendall_tau": float(min(taus)), "mean_kendall_tau": float(np.mean(taus)),
                 "top10_identical": float(np.mean(top_same)), "queries": len(groups)})
    elif task == "read":
        groups = inputs.groups
        check("logits_fp32_max_abs", _max_abs(ref.graphs["model"], fp32.graphs["model"], _read_feeds(ref, groups)),
              th.fp32_max_abs, False)
        if dtype != "fp32":
            a = ref.read_batch([q for q, _ in groups], [ps for _, ps in groups])
            b = final.read_batch([q for q, _ in groups], [ps for _, ps in groups])
            same = [(x.text, x.kind) == (y.text, y.kind) for x, y in zip(a, b, strict=True)]
            check(f"{dtype}_answer_agreement", float(np.mean(same)), th.read_min_agreement, True)
            checks[f"{dtype}_answer_agreement"]["differing"] = [
                {"question": q, "torch": x.text, "onnx": y.text}
                for (q, _), x, y, ok in zip(groups, a, b, same, strict=True) if not ok][:5]
    elif task == "cite":
        pairs_a = [t for t in texts]
        pairs_b = [texts[(i + 1) % len(texts)] for i in range(len(texts))]
        tag_feeds = _raw_feeds(ref, "tagger", texts, max_length=ref.tagger_max_length)
        check("tagger_fp32_max_abs", _max_abs(ref.graphs["tagger"], fp32.graphs["tagger"], tag_feeds),
              th.fp32_max_abs, False)
        check("scorer_fp32_max_abs", _max_abs(ref.graphs["scorer"], fp32.graphs["scorer"],
                                              _raw_feeds(ref, "scorer", pairs_a, pairs_b)), th.fp32_max_abs, False)
        if dtype != "fp32":
            agree, total = 0, 0
            for fa in tag_feeds:
                la, lb = ref.graphs["tagger"](fa).argmax(-1), final.graphs["tagger"](fa).argmax(-1)
                mask = fa["attention_mask"] == 1
                agree += int((la == lb)[mask].sum())
                total += int(mask.sum())
            check(f"{dtype}_tagger_label_agreement", agree / max(total, 1), th.cite_min_agreement, True)
            thr = ref.support_threshold
            # a residual scorer adds the pair's cosine: one plausible value for every pair
            cos = {"cosine": [0.5] * len(pairs_a)} if ref.cosine_residual is not None else {}
            pa = ref.attribute(list(zip(pairs_a, pairs_b, strict=True)), **cos)
            pb = final.attribute(list(zip(pairs_a, pairs_b, strict=True)), **cos)
            check(f"{dtype}_scorer_decision_agreement", float(np.mean((pa >= thr) == (pb >= thr))),
                  th.cite_min_agreement, True)
    elif task == "decompose":
        from searchsmith.models.decomposer import decompose_source, rewrite_source

        qs = inputs.questions
        sources = [decompose_source(q) for q in qs]
        # a quarter also as conversation rewrites, the previous question as the history
        sources += [rewrite_source([qs[i - 1]], q) for i, q in enumerate(qs[: max(1, n // 4)])]
        feeds = _raw_feeds(ref, "encoder", sources)
        check("encoder_fp32_max_abs", _max_abs(ref.graphs["encoder"], fp32.graphs["encoder"], feeds),
              th.fp32_max_abs, False)
        worst = 0.0
        for f in (feeds if "decoder" in ref.graphs else []):  # the tagger has no decoder
            hidden = ref.graphs["encoder"](f)
            b = len(hidden)
            dec = {"decoder_input_ids": np.full((b, 3), fp32.start_id, dtype=np.int64),
                   "encoder_hidden_states": hidden, "encoder_attention_mask": f["attention_mask"]}
            worst = max(worst, float(np.abs(ref.graphs["decoder"](dec) - fp32.graphs["decoder"](dec)).max()))
        if "decoder" in ref.graphs:
            check("decoder_fp32_max_abs", worst, th.fp32_max_abs, False)
        want = reference_generate(sources) if reference_generate else ref.generate(sources)
        got = final.generate(sources)
        same = [a == b for a, b in zip(want, got, strict=True)]
        check(f"{dtype}_identical_generations", float(np.mean(same)), th.decompose_min_identical, True)
        checks[f"{dtype}_identical_generations"]["differing"] = [
            {"source": s, "torch": a, "onnx": b} for s, a, b, ok in zip(sources, want, got, same, strict=True)
            if not ok][:5]
    passed = all(c["passed"] for c in checks.values())
    return {"task": task, "dtype": dtype, "passed": passed, "checks": checks,
            "thresholds": asdict(th), "heldout": inputs.source}


__all__ = ["Dtype", "ParityThresholds", "calibration_feeds", "kendall_tau", "parity_check"]
