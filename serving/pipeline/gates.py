"""Measured gates: a model bundle is used only when it beat the pipeline's own fallback.

Every trained model has an untrained stand-in the pipeline runs without it: the retrieval
order instead of a reranker, cosine attribution instead of a citation scorer, caption-cosine
placement instead of an image model, the heuristic rewrite and the question as one node
instead of the decomposer. A model whose recorded held-out figure does not beat the same
figure of that stand-in (measured on the same held-out split by its training run) makes
answers no better, often worse, and slower; the gate leaves it out and says why.

The figures are the bundle manifest's ``heldout_metrics`` (:func:`heldout_figures`; the
export writes the run's ``metrics.json`` "final" under their own names and its "baselines"
under ``baselines/<name>``). A bundle that records no figure is left out too: nothing shows
that it helps (``bundles.gate_<use>: false`` uses it anyway).

:data:`GATES` is the table: one row per (use, metric); a use with several rows (citation:
ROC AUC and F1) must pass every row. A row names its baselines; the first must be recorded,
the others count when recorded, and the model must beat the best of them (a tie fails).

The image model has two uses, each gated by figures on held-out photos (the kind of image
users' documents carry; its training pictures are mostly generated): ``images``, its mix for
images that carry a caption, against caption-cosine placement, and ``vision``, its vision
tower alone for images without one, against leaving them out (a wrong place counts as
much against it as a right one for it: a misplaced photo misleads). Caption-cosine placement is
the default wherever the model has not shown it does better.

A figure measured on few held-out items can lead its baseline by chance: the rewrite's is the
retrieval of 28 CAsT turns, where a decomposer that led the heuristic rewrite by 0.005 garbled
the quickstart's follow-up ("Where can I find the code the?"), and the quick decomposer's
node-text F1 led keeping the question whole by 0.007 on 22 templates. So every row
(``beyond_noise``) also needs the recipe's paired test of the model against its baseline (the
reranker: against each of BM25 and the bi-encoder; the citation scorer's ROC AUC and F1, pooled
over pairs: a bootstrap over claims; the image model's placements, pooled over images: a
bootstrap over documents), item by item, to put the model above it beyond the noise.

A reranker, a citation scorer, a reader or a decomposer trained with ``data.leave_out`` records
its figures on the left-out datasets (the reranker: ``ood/ndcg@10`` beside BM25's and the
bi-encoder's there; the citation scorer: ``ood/attribution/roc_auc`` and ``ood/attribution/f1``
beside the cosine attribution's; the reader: ``ood/f1`` beside the closest sentence's; the
decomposer: ``ood/decompose_node_f1`` beside one node's and, with a CAsT year left out,
``ood/rewrite_retrieval_ndcg@10`` beside the heuristic rewrite's), and its gate reads those
instead of the pooled split's: users' documents are not the recipe's, and a pooled split of the
training distribution measures fit (a reranker trained on all four sets beat both baselines
pooled, and one trained without SciFact fell below both on SciFact; the Wikipedia-trained reader
led the closest sentence on its Wikipedia questions, 0.185 against 0.065, and trailed it on the
demo's, 0.102 against 0.148).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GateRow:
    """One measured comparison.

    Attributes:
        role: the bundle role (``bundles.<role>``).
        use: what the pipeline uses the bundle for (a decomposer has two uses).
        metric: key of the model's figure in ``heldout_metrics``.
        what: the figure's name in messages.
        baselines: ``(key, name)`` of the stand-ins' figures; the first is required.
        fallback: what the pipeline does instead.
        setting: the ``bundles.*`` switch that turns the gate off.
        how: how to get the figure recorded, said when it is missing.
        ood: the recipe can record the same figures on datasets left out of training
            (``ood/<metric>`` and ``baselines/ood_<name>``, from ``data.leave_out``): when the
            bundle has them, the row reads those instead (:func:`resolve_row`).
        beyond_noise: for figures measured on few held-out items: per baseline (in
            ``baselines`` order; "" or missing: none), the key of the recorded paired
            comparison of the model with it, item by item (``<key>_direction``, with
            ``_diff``, ``_lo``, ``_hi``, ``_p`` and ``_n``;
            :func:`searchsmith.models.stats.direction`). The row then also needs each
            recorded baseline's ``_direction`` +1: a lead inside the noise does not open the gate.
    """

    role: str
    use: str
    metric: str
    what: str
    baselines: tuple[tuple[str, str], ...]
    fallback: str
    setting: str
    how: str = ""
    ood: bool = False
    beyond_noise: tuple[str, ...] = ()


OOD_PREFIX = "ood/"


def resolve_row(row: GateRow, figures: Mapping[str, float]) -> GateRow:
    """The row an ``ood`` row is judged by: its out-of-domain twin when the bundle records
    ``ood/<metric>`` (the model on datasets it never trained on, against the baselines there),
    else the row itself (the pooled held-out split, in-domain)."""
    from dataclasses import replace

    if not row.ood:
        return row
    if OOD_PREFIX + row.metric in figures:
        return replace(row, metric=OOD_PREFIX + row.metric, what=f"{row.what} on datasets left out of training",
                       baselines=tuple((k.replace("baselines/", f"baselines/{OOD_PREFIX[:-1]}_", 1), n)
                                       for k, n in row.baselines),
                       beyond_noise=tuple(OOD_PREFIX + k if k else "" for k in row.beyond_noise))
    return row


GATES: tuple[GateRow, ...] = (
    GateRow("decomposer", "rewrite", "rewrite_retrieval_ndcg@10", "retrieval nDCG@10 of its rewrites",
            (("baselines/rewrite_retrieval_ndcg@10_heuristic", "the heuristic rewrite's"),
             ("baselines/rewrite_retrieval_ndcg@10_copy_query", "the raw query's")),
            "the heuristic rewrite", "gate_rewrite",
            "train with data.sources including trec_cast (its 2021/2022 turns carry their answer passages)",
            ood=True, beyond_noise=("rewrite_retrieval_ndcg@10_vs_heuristic",)),
    GateRow("decomposer", "decompose", "decompose_node_f1", "node-text F1",
            (("baselines/decompose_node_f1_question_as_terminal", "keeping the question as one node"),),
            "the question as one node", "gate_decompose", ood=True, beyond_noise=("decompose_node_f1_vs_terminal",)),
    GateRow("reranker", "rerank", "ndcg@10", "nDCG@10",
            (("baselines/bi_encoder_ndcg@10", "the bi-encoder order"), ("baselines/bm25_ndcg@10", "BM25"),
             ("baselines/hybrid_ndcg@10", "the hybrid order")),
            "the retrieval order", "gate_rerank", ood=True,
            beyond_noise=("ndcg@10_vs_bi_encoder", "ndcg@10_vs_bm25", "ndcg@10_vs_hybrid")),
    GateRow("citation", "cite", "attribution/roc_auc", "attribution ROC AUC",
            (("baselines/cosine_attribution_roc_auc", "cosine attribution"),),
            "cosine attribution", "gate_cite", ood=True, beyond_noise=("attribution/roc_auc_vs_cosine",)),
    GateRow("citation", "cite", "attribution/f1", "attribution F1",
            (("baselines/cosine_attribution_f1", "cosine attribution at its threshold"),),
            "cosine attribution", "gate_cite", ood=True, beyond_noise=("attribution/f1_vs_cosine",)),
    GateRow("reader", "read", "f1", "answer F1",
            (("baselines/sentence_f1", "the context sentence closest to the question"),
             ("baselines/short_f1", "the extractive short answer")),
            "the extractive answer", "gate_read", ood=True, beyond_noise=("f1_vs_sentence", "f1_vs_short")),
    GateRow("images", "images", "ood/placement_accuracy", "placement accuracy on unseen photos",
            (("baselines/ood_cosine_placement_accuracy", "caption-cosine placement"),),
            "caption-cosine placement", "gate_images",
            "train with data.sources including coco_captions (photos); pictures of the training kind say nothing "
            "about users' photos", beyond_noise=("ood/placement_accuracy_vs_cosine",)),
    GateRow("images", "vision", "ood/vision_placement_net",
            "right minus wrong placements per uncaptioned unseen photo",
            (("baselines/ood_no_placement_net", "leaving images without a caption out"),),
            "no placement for images without a caption", "gate_vision",
            "train with data.sources including coco_captions (photos)",
            beyond_noise=("ood/vision_placement_net_vs_none",)),
)
USES: tuple[str, ...] = tuple(dict.fromkeys(r.use for r in GATES))


@dataclass(frozen=True)
class Figure:
    """One row's comparison: the model's figure against the best recorded baseline."""

    what: str
    value: float | None
    baseline: float | None
    baseline_name: str
    others: tuple[tuple[str, float], ...] = ()  # further recorded baselines (name, value)
    noise: str = ""  # the paired test of a beyond_noise row, when it was read
    beyond: bool | None = None  # whether that test put the model above every baseline (None: not read)

    def text(self) -> str:
        got = "not recorded" if self.value is None else f"{self.value:.3f}"
        base = "not recorded" if self.baseline is None else f"{self.baseline:.3f}"
        more = "".join(f", {n} {v:.3f}" for n, v in self.others)
        noise = f" ({self.noise})" if self.noise else ""
        return f"{self.what} {got} vs {self.baseline_name} {base}{more}{noise}"


@dataclass(frozen=True)
class GateDecision:
    """Whether the pipeline uses a bundle for one use, and why not when it does not.

    Attributes:
        used: the pipeline calls the model for this use.
        reason: why it does not (None when used).
        gated: False when ``bundles.<setting>`` switched the gate off.
    """

    role: str
    use: str
    setting: str
    used: bool
    reason: str | None
    figures: tuple[Figure, ...] = ()
    gated: bool = True
    fallback: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "used": self.used}
        if self.reason:
            out["reason"] = self.reason
        if not self.gated:
            out["gate"] = f"off (bundles.{self.setting}: false)"
        out["figures"] = [{"metric": f.what, "value": f.value, "baseline": f.baseline_name,
                           "baseline_value": f.baseline, **({"paired_test": f.noise} if f.noise else {}),
                           **({"beyond_noise": f.beyond} if f.beyond is not None else {})}
                          for f in self.figures]
        return out


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)


def heldout_figures(bundle: Any) -> dict[str, float]:
    """The held-out figures a bundle records, flat (``{"ndcg@10": .., "baselines/..": ..}``).

    ``bundle``: a loaded bundle (its ``manifest``), a manifest dict, or a bundle folder. The
    manifest's ``heldout_metrics`` holds either the training run's figures or, once the
    export measures them, the bundle's own, under the same names; nested dicts are read as
    ``a/b`` keys, and ``baselines/<group>/<metric>`` also as ``baselines/<group>_<metric>``.
    {} when nothing is recorded.
    """
    if isinstance(bundle, (str, Path)):
        manifest = read_bundle_manifest(Path(bundle)) or {}
    elif isinstance(bundle, Mapping):
        manifest = bundle
    else:
        manifest = getattr(bundle, "manifest", None) or {}
    out: dict[str, float] = {}
    _flatten("", manifest.get("heldout_metrics") or {}, out)
    # A nested baseline group ("baselines/bi_encoder/ndcg@10", as an export that keeps the
    # groups writes it) also answers to the flat name the recipes record ("baselines/bi_encoder_ndcg@10").
    for key, value in list(out.items()):
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "baselines":
            out.setdefault(f"baselines/{parts[1]}_{parts[2]}", value)
    return out


def read_bundle_manifest(folder: Path) -> dict[str, Any] | None:
    """A bundle folder's ``manifest.json`` as a dict, or None when it is missing or unreadable
    (loading the bundle then reports the problem)."""
    import json

    try:
        data = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _model_name(role: str) -> str:
    return {"decomposer": "decomposer", "reranker": "reranker", "citation": "citation model",
            "images": "image model"}.get(role, role)


def check_row(row: GateRow, figures: Mapping[str, float]) -> tuple[Figure, str | None]:
    """Compare one row's figures; the reason the model fails it, or None when it passes."""
    row = resolve_row(row, figures)
    got = figures.get(row.metric)
    recorded = [(name, figures[key]) for key, name in row.baselines if key in figures]
    required_key, required_name = row.baselines[0]
    best = max(recorded, key=lambda nv: nv[1]) if recorded else None
    fig = Figure(row.what, got, best[1] if best else None, best[0] if best else required_name,
                 tuple(nv for nv in recorded if best is not None and nv[0] != best[0]))
    if got is None or required_key not in figures:
        missing = [k for k in (row.metric, required_key) if k not in figures]
        return fig, (f"the {_model_name(row.role)}'s bundle has no held-out figure recorded "
                     f"({', '.join(missing)} missing from its manifest's heldout_metrics); {row.fallback} "
                     f"is used (no held-out figure recorded{'; ' + row.how if row.how else ''}; set "
                     f"bundles.{row.setting}: false to use it)")
    assert best is not None
    if got <= best[1]:
        relation = "is below" if got < best[1] else "only ties with"
        return fig, (f"the {_model_name(row.role)}'s held-out {row.what} {got:.3f} {relation} {best[0]} "
                     f"({best[1]:.3f}); {row.fallback} is used (bundles.{row.setting}: false to use the "
                     "model anyway)")
    if row.beyond_noise:
        return _beyond_noise(row, figures, fig)
    return fig, None


def _beyond_noise(row: GateRow, figures: Mapping[str, float], fig: Figure) -> tuple[Figure, str | None]:
    """A row with ``beyond_noise`` whose point figure leads: the paired tests decide, one per
    recorded baseline that has one."""
    from dataclasses import replace

    tests = []
    for key, (base_key, name) in zip(row.beyond_noise, row.baselines, strict=False):
        if not key or base_key not in figures:
            continue
        parts = {p: figures.get(f"{key}_{p}") for p in ("direction", "diff", "lo", "hi", "p", "n")}
        if any(v is None for v in parts.values()):
            return fig, (f"the {_model_name(row.role)}'s bundle records no paired test of its {row.what} against "
                         f"{name} ({key}_direction missing from its manifest's heldout_metrics; re-export the "
                         f"run with this version); {row.fallback} is used (bundles.{row.setting}: false to use it)")
        text = (f"paired difference {parts['diff']:+.3f} [{parts['lo']:+.3f}, {parts['hi']:+.3f}], "
                f"p {parts['p']:.2f}, {int(parts['n'])} items")
        tests.append((name, text, parts["direction"] == 1))
    if not tests:
        return fig, None
    several = len(tests) > 1
    fig = replace(fig, noise="; ".join(f"vs {name}: {text}" if several else text for name, text, _ in tests),
                  beyond=all(beyond for _, _, beyond in tests))
    for name, text, beyond in tests:
        if not beyond:
            return fig, (f"the {_model_name(row.role)}'s held-out {row.what} leads {name} only inside the noise "
                         f"({text}); {row.fallback} is used (bundles.{row.setting}: false to use the model "
                         "anyway)")
    return fig, None


def decide(bundles: Mapping[str, Any], config: Any) -> dict[str, GateDecision]:
    """Gate every use of the configured bundles.

    Args:
        bundles: role -> bundle (a loaded bundle, a manifest dict or anything with a
            ``manifest``); roles without a bundle (None or missing) are left out.
        config: the pipeline's ``BundlesConfig`` (its ``gate_<use>`` switches).

    Returns:
        use -> :class:`GateDecision`, in :data:`USES` order.
    """
    out: dict[str, GateDecision] = {}
    for use in USES:
        rows = [r for r in GATES if r.use == use]
        role, setting = rows[0].role, rows[0].setting
        bundle = bundles.get(role)
        if bundle is None:
            continue
        figures = heldout_figures(bundle)
        checked = [check_row(r, figures) for r in rows]
        reasons = [why for _, why in checked if why]
        enabled = bool(getattr(config, setting, True))
        out[use] = GateDecision(role, use, setting, used=not (enabled and reasons),
                                reason=reasons[0] if enabled and reasons else None,
                                figures=tuple(f for f, _ in checked), gated=enabled,
                                fallback=rows[0].fallback)
    return out


def gate_report(decisions: Mapping[str, GateDecision]) -> list[str]:
    """A header, then one line per use of a configured bundle: its held-out figure beside
    the baseline's, and whether the pipeline uses it::

        models (held-out figure vs the untrained baseline it must beat):
        reranker   rerank   : nDCG@10 0.843 vs the bi-encoder order 0.810, BM25 0.702 -> used
    """
    if not decisions:
        return []
    lines = ["models (held-out figure vs the untrained baseline it must beat):"]
    for use, d in decisions.items():
        figures = "; ".join(f.text() for f in d.figures)
        if d.used:
            verdict = "used" if d.gated else f"used (gate off: bundles.{d.setting}: false)"
        else:
            verdict = f"not used: {d.fallback} instead (bundles.{d.setting}: false to use it)"
        lines.append(f"{d.role:<10} {use:<9}: {figures} -> {verdict}")
    return lines


__all__ = ["GATES", "USES", "Figure", "GateDecision", "GateRow", "check_row", "decide", "gate_report",
           "heldout_figures", "read_bundle_manifest"]
