"""The attribution scorer as a correction of the bi-encoder cosine (issue 17, item 4): the
residual's arithmetic, its training (the untrained scorer *is* the cosine baseline), the
calibration of its share and of the threshold, WiCE's sentence-level task, and the residual
through the torch model, the exported bundle, ``eval cite`` and the pipeline's citation."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from searchsmith.models import metrics
from searchsmith.models.citation import CitationModel, CosineResidual, fit_cosine_logistic, sigmoid
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.training import citation as cit
from searchsmith.training import cite_data as cd
from searchsmith.training import evaluate_cite as ev
from searchsmith.training.config import load_recipe_config
from searchsmith.training.data import write_jsonl_atomic

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "citation" / "tiny" / "bert-tiny_full.yaml"
RESIDUAL = ["model.cosine_residual=true", "data.baseline_embedder=default", "data.calibration_ratio=0.2",
            "calibrate_threshold=true"]


# ----------------------------------------------------------------------------- arithmetic


def test_residual_logits_add_the_cosine_term() -> None:
    res = CosineResidual(scale=8.0, bias=-5.0, cross_weight=0.5)
    got = res.logits(np.array([2.0, -2.0]), [0.5, 1.0])
    assert got.tolist() == pytest.approx([0.5 * 2 + 8 * 0.5 - 5, 0.5 * -2 + 8 - 5])
    assert res.probs(np.zeros(1), [0.625]).tolist() == pytest.approx([0.5])  # 8 * 0.625 - 5 = 0
    with pytest.raises(ValidationError, match="pass cosine="):
        res.logits(np.zeros(2), None)
    with pytest.raises(ValidationError, match="needs 2 finite values"):
        res.logits(np.zeros(2), [0.1])
    with pytest.raises(ValidationError, match="NaN"):
        res.logits(np.zeros(1), [float("nan")])
    # a cosine of 5.0 made P(supports) 1.0; ["x"] was numpy's own ValueError (helper-42's audit)
    with pytest.raises(ValidationError, match=r"a cosine lies in \[-1, 1\], got values in \[5, 5\]"):
        res.logits(np.zeros(1), [5.0])
    with pytest.raises(ValidationError, match="cosine must be numbers"):
        res.logits(np.zeros(1), ["x"])
    assert res.logits(np.zeros(2), [-1.0, 1.0]).shape == (2,)


def test_residual_json_round_trip_and_malformed_entries() -> None:
    res = CosineResidual(3.0, -1.0, 0.25, "m")
    assert CosineResidual.from_json(res.to_json()) == res
    assert CosineResidual.from_json(None) is None
    with pytest.raises(BundleError, match="cosine_residual"):
        CosineResidual.from_json({"scale": 1.0})
    with pytest.raises(BundleError, match="cross_weight must be in"):
        CosineResidual.from_json({"scale": 1.0, "bias": 0.0, "cross_weight": 2.0})
    with pytest.raises(BundleError, match="finite number"):
        CosineResidual.from_json({"scale": "x", "bias": 0.0})


def test_sigmoid_is_stable_at_the_extremes() -> None:
    out = sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    assert out.tolist() == pytest.approx([0.0, 0.5, 1.0]) and np.isfinite(out).all()


def test_cosine_logistic_fit_orders_like_the_cosine() -> None:
    rng = np.random.default_rng(0)
    cos = np.r_[rng.normal(0.7, 0.1, 200), rng.normal(0.4, 0.1, 200)]
    y = [1] * 200 + [0] * 200
    scale, bias = fit_cosine_logistic(cos, y)
    assert scale > 5 and 0.5 < -bias / scale < 0.6  # the 50 % point between the two means
    with pytest.raises(ValidationError, match="both labels"):
        fit_cosine_logistic([0.1, 0.2], [1, 1])


def test_balanced_accuracy_best_f1_threshold_and_top1() -> None:
    assert metrics.balanced_accuracy([1, 1, 0, 0], [1, 0, 0, 0]) == 0.75
    assert metrics.balanced_accuracy([1, 1], [1, 0]) is None
    # scores 0.9 (pos), 0.8 (neg), 0.7 (pos), 0.1 (neg): cut 0.7 gives P 2/3 R 1 F1 0.8; cut 0.9: P 1 R 0.5 F1 0.667
    assert metrics.best_f1_threshold([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]) == pytest.approx((0.7, 0.8))
    # tied scores are cut together
    assert metrics.best_f1_threshold([1, 0, 0], [0.5, 0.5, 0.1]) == pytest.approx((0.5, 2 / 3))
    with pytest.raises(ValidationError, match="positive"):
        metrics.best_f1_threshold([0, 0], [0.1, 0.2])
    assert metrics.top1_per_group([2, 3], [0.1, 0.9, 0.5, 0.5, 0.2]) == [0, 1, 1, 0, 0]
    with pytest.raises(ValidationError, match="sum to"):
        metrics.top1_per_group([2], [0.1])


def test_a_calibration_that_keeps_no_correction_cuts_where_the_cosine_does() -> None:
    """Share 0 serves the cosine alone; its cut was still fitted on the calibration claims' sets,
    and with WiCE left out that cut (0.47) scored F1 0.605 on WiCE against the cosine's 0.729 at
    0.6. The scorer is then the baseline, decision included."""
    cfg = load_recipe_config(TINY, RESIDUAL + ["model.cross_weights=[0.0,1.0]", "data.baseline_cosine_threshold=0.6"])
    rng = np.random.default_rng(0)
    cos = np.r_[rng.normal(0.5, 0.05, 40), rng.normal(0.3, 0.05, 40)]  # calibration sets' cosines: lower
    labels = [1] * 40 + [0] * 40
    residual = CosineResidual(scale=12.0, bias=-7.0)
    noise = rng.normal(0.0, 1.0, 80)  # a correction that orders worse than the cosine
    kept, threshold, report = cit._calibrate(cfg, labels, noise, cos.tolist(), residual)
    assert kept.cross_weight == 0.0
    assert threshold == pytest.approx(float(sigmoid(np.array([12.0 * 0.6 - 7.0]))[0]))
    probs = kept.probs(noise, cos)
    assert ((probs >= threshold) == (cos >= 0.6)).all()  # the cosine baseline's decisions
    assert "baseline" in report["support_threshold_rule"]
    # a kept correction is cut where its calibration F1 is best, as before
    good = 4.0 * (np.array(labels) - 0.5) + rng.normal(0.0, 0.1, 80)
    kept, threshold, report = cit._calibrate(cfg, labels, good, cos.tolist(), residual)
    assert kept.cross_weight == 1.0 and "support_threshold_rule" not in report
    assert threshold == pytest.approx(metrics.best_f1_threshold(labels, kept.probs(good, cos).tolist())[0])


def test_config_refuses_calibration_without_claims_and_residual_without_embedder() -> None:
    with pytest.raises(ConfigError, match="data.calibration_ratio"):
        load_recipe_config(TINY, ["calibrate_threshold=true"])
    with pytest.raises(ConfigError, match="data.baseline_embedder"):
        load_recipe_config(TINY, ["model.cosine_residual=true"])  # the tiny twin has baseline_embedder: none
    with pytest.raises(ConfigError, match="cross_weights"):
        load_recipe_config(TINY, ["model.cross_weights=[1.5]"])
    with pytest.raises(ConfigError, match="calibration_ratio"):
        load_recipe_config(TINY, ["data.calibration_ratio=0.6"])


def test_calibration_split_keeps_claims_whole_and_out_of_training() -> None:
    cfg = load_recipe_config(TINY, ["data.calibration_ratio=0.25"])
    train_p, _ = cd.split_pairs(cd.load_pairs(cfg.data), cfg.data)
    fit_p, cal_p = cd.calibration_split(train_p, cfg.data)
    assert cal_p and fit_p and len(fit_p) + len(cal_p) == len(train_p)
    assert not {p.key for p in fit_p} & {p.key for p in cal_p}
    assert cd.calibration_split(train_p, load_recipe_config(TINY).data) == (list(train_p), [])


def test_wice_sentence_items_skip_trained_and_unsupported_claims(tmp_path: Path) -> None:
    recs = [{"label": "supported", "claim": "A is B.", "evidence": ["A is B.", "C.", ""],
             "supporting_sentences": [[0]], "meta": {"id": 1}},
            {"label": "partially_supported", "claim": "D.", "evidence": ["x", "D."],
             "supporting_sentences": [[1], [0, 1]], "meta": {"id": 2}},
            {"label": "not_supported", "claim": "E.", "evidence": ["y"], "supporting_sentences": [],
             "meta": {"id": 3}},
            {"label": "supported", "claim": "F.", "evidence": ["F."], "supporting_sentences": [[0]],
             "meta": {"id": 4}}]
    write_jsonl_atomic(tmp_path / "w.jsonl", recs)
    data = cd.CitationData(sources=["wice"], wice=str(tmp_path / "w.jsonl"))
    items = cd.wice_sentence_items(data, {"wice-4"})
    assert [i["id"] for i in items] == ["wice-1", "wice-2"]
    assert [d["id"] for d in items[0]["documents"]] == ["wice-1:s0", "wice-1:s1"]  # the empty sentence dropped
    assert items[0]["cited"] == ["wice-1:s0"] and items[1]["cited"] == ["wice-2:s0", "wice-2:s1"]


# ----------------------------------------------------------------------------- the recipe


@pytest.fixture(scope="module")
def residual_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("cite_residual")
    cit.citation(load_recipe_config(TINY, [f"output_dir={run}", *RESIDUAL]), run)
    return run


def test_untrained_residual_scorer_is_the_cosine_baseline(residual_run: Path) -> None:
    m = json.loads((residual_run / "metrics.json").read_text())
    base = m["baselines"]
    # The zeroed head: before training the scorer's order is the cosine attribution's.
    assert base["untrained_scorer"]["attribution/roc_auc"] == pytest.approx(base["cosine_attribution_roc_auc"])
    cal = m["calibration"]
    assert cal["pairs"] > 0 and cal["cross_weight"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    best = max(cal["roc_auc_by_cross_weight"].values())
    assert cal["roc_auc_by_cross_weight"][str(cal["cross_weight"])] == best
    meta = json.loads((residual_run / "model" / "citation.json").read_text())
    assert meta["support_threshold"] == cal["support_threshold"] == m["support_threshold"]
    assert meta["cosine_residual"]["cross_weight"] == cal["cross_weight"]
    assert meta["cosine_residual"]["scale"] > 0  # supporting passages are the closer ones
    split = json.loads((residual_run / "split.json").read_text())
    assert split["calibration"] and not set(split["calibration"]) & set(split["train"])
    for k in ("attribution/balanced_accuracy", "attribution/roc_auc", "attribution/f1"):
        assert 0.0 <= m["final"][k] <= 1.0
    # the final scorer's paired tests against cosine attribution, claim by claim (the gate reads them)
    claims = len({p for p in json.loads((residual_run / "split.json").read_text())["eval"]})
    for key in ("attribution/roc_auc_vs_cosine", "attribution/f1_vs_cosine"):
        assert m["final"][f"{key}_n"] == claims and m["final"][f"{key}_direction"] in (-1.0, 0.0, 1.0)
    assert m["final"]["attribution/f1_vs_cosine_diff"] == pytest.approx(
        m["final"]["attribution/f1"] - base["cosine_attribution_f1"], abs=1e-9)


def _args(**kw: object) -> argparse.Namespace:
    base = {"data": None, "checkpoint": None, "bundle": None, "limit": 0, "per_item": None}
    return argparse.Namespace(**{**base, **kw})


def test_residual_model_needs_and_uses_the_cosine(residual_run: Path) -> None:
    m = CitationModel.load(residual_run)
    pairs = [("Quarry is written in Rust.", "Quarry is a database written in Rust."),
             ("Quarry is written in Rust.", "Knead the dough.")]
    with pytest.raises(ValidationError, match="pass cosine="):
        m.attribute(pairs)
    cos = cit.best_sentence_cosines("default", pairs, None)
    probs = m.attribute(pairs, cosine=cos)
    res = m.cosine_residual
    assert res is not None and probs.shape == (2,)
    if res.cross_weight == 0.0:  # the cosine alone: P = sigmoid(scale * cos + bias)
        assert probs.tolist() == pytest.approx(sigmoid(res.scale * np.asarray(cos) + res.bias).tolist(), abs=1e-6)
    assert m.attribute(pairs, cosine=[1.0, 1.0])[1] > probs[1]  # a higher cosine, more support


def test_eval_cite_gives_the_residual_its_cosine(residual_run: Path) -> None:
    m = json.loads((residual_run / "metrics.json").read_text())
    out = ev.eval_cite(_args(data=str(residual_run / "heldout.cite.jsonl"), checkpoint=str(residual_run)))
    # the recipe's own held-out figures, reproduced by the CLI with the cosines it computes
    assert out["attribution/roc_auc"] == pytest.approx(m["final"]["attribution/roc_auc"], abs=1e-6)
    assert out["attribution/balanced_accuracy"] == pytest.approx(m["final"]["attribution/balanced_accuracy"])
    assert out["cosine_residual"]["cross_weight"] == m["cosine_residual"]["cross_weight"]
    assert "attribution/top1_f1" in out


def test_residual_bundle_matches_the_torch_model(residual_run: Path, tmp_path: Path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.evaluate import heldout_figures

    out = tmp_path / "bundle"
    export_run(residual_run, out, ExportOptions(dtype="fp32", heldout_scorer=heldout_figures))
    manifest = json.loads((out / "manifest.json").read_text())
    # the bundle re-scored on the run's held-out split, with the cosines, as the recipe scored it
    final = json.loads((residual_run / "metrics.json").read_text())["final"]
    assert manifest["heldout_source"].startswith("bundle:fp32"), manifest["heldout_source"]
    assert manifest["heldout_metrics"]["attribution/roc_auc"] == pytest.approx(final["attribution/roc_auc"], abs=1e-3)
    # the paired tests again, with cosine attribution measured again on the same pairs
    for key in ("attribution/roc_auc_vs_cosine_diff", "attribution/f1_vs_cosine_diff", "attribution/f1_vs_cosine_n"):
        assert manifest["heldout_metrics"][key] == pytest.approx(final[key], abs=1e-3), key
    assert manifest["cosine_residual"]["scale"] == pytest.approx(
        json.loads((residual_run / "model/citation.json").read_text())["cosine_residual"]["scale"])
    b = load_bundle(out, device="cpu")
    pairs = [("Quarry is written in Rust.", "Quarry is a database written in Rust."), ("a", "b")]
    with pytest.raises(ValidationError, match="pass cosine="):
        b.attribute(pairs)
    got = b.attribute(pairs, cosine=[0.9, 0.1])
    want = CitationModel.load(residual_run).attribute(pairs, cosine=[0.9, 0.1])
    assert np.allclose(got, want, atol=1e-4)


# ----------------------------------------------------------------------------- serving


class _ResidualCiter:
    """A citation bundle whose scorer is a residual: it records the cosines it is given."""

    support_threshold = 0.5
    cosine_residual = CosineResidual(scale=10.0, bias=-5.0, cross_weight=0.0)

    def __init__(self) -> None:
        self.cosines: list[list[float]] = []

    def entities(self, sentences: list[str], return_meta: bool = False) -> list[list]:
        return [[] for _ in sentences]

    def attribute(self, pairs: list, return_meta: bool = False, cosine: list | None = None) -> np.ndarray:
        self.cosines.append(list(cosine))
        return self.cosine_residual.probs(np.zeros(len(pairs)), cosine)


def test_pipeline_citation_gives_a_residual_bundle_the_best_sentence_cosine() -> None:
    from searchsmith.serving.pipeline.citation import cite_sentences
    from searchsmith.serving.pipeline.config import CitationConfig

    vecs = {"Quarry is fast.": [1.0, 0.0], "It is slow.": [0.0, 1.0],
            "Bread is good.": [0.6, 0.8]}

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray([vecs[t] for t in texts], dtype=np.float32)

    bundle = _ResidualCiter()
    cfg = CitationConfig(entity_veto=False)
    found = cite_sentences(["Quarry is fast."], [("d1", "It is slow. Quarry is fast."), ("d2", "Bread is good.")],
                           config=cfg, bundle=bundle, encode=encode)
    assert bundle.cosines == [[pytest.approx(1.0), pytest.approx(0.6)]]  # the best sentence of each passage
    # P = sigmoid(10 cos - 5): 0.993 for d1, 0.731 for d2; both pass 0.5, d1 first
    assert [j for j, _ in found[0].citations] == [0, 1]
    with pytest.raises(ValueError, match="encode function is needed"):
        cite_sentences(["Quarry is fast."], [("d1", "Quarry is fast.")], config=cfg, bundle=bundle, encode=None)


def test_head_lr_scale_gives_the_classification_head_its_own_rate() -> None:
    import torch
    from searchsmith.training.trainer import _param_groups

    model = torch.nn.ModuleDict({"encoder": torch.nn.Linear(4, 4), "classifier": torch.nn.Linear(4, 1)})
    groups = _param_groups(model, 0.01, 1e-3, head_lr_scale=50.0)
    by_lr: dict[float, int] = {}
    for g in groups:
        by_lr[g["lr"]] = by_lr.get(g["lr"], 0) + sum(p.numel() for p in g["params"])
    assert by_lr == {1e-3: 16 + 4, 5e-2: 4 + 1}
    assert all(g["weight_decay"] == (0.01 if g["params"][0].ndim >= 2 else 0.0) for g in groups)
    assert {g["lr"] for g in _param_groups(model, 0.01, 1e-3)} == {1e-3}
    with pytest.raises(ConfigError, match="head_lr_scale"):
        load_recipe_config(TINY, ["optim.head_lr_scale=0"])


def test_leave_out_holds_out_every_key_of_a_source() -> None:
    from searchsmith.training.data import split_leaving_out

    keys = [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(5)]
    srcs = ["a"] * 10 + ["b"] * 5
    train, held = split_leaving_out(keys, srcs, ["b"], 0.2, 13)
    assert {f"b{i}" for i in range(5)} <= held and not {k for k in train if k.startswith("b")}
    assert len(held - {f"b{i}" for i in range(5)}) == 2 and len(train) == 8  # the usual 20 % of a
    assert split_leaving_out(keys, srcs, [], 0.2, 13) == split_leaving_out(keys[:10] + keys[10:], srcs, [], 0.2, 13)
    with pytest.raises(ConfigError, match="leaves no source to train on"):
        split_leaving_out(keys, srcs, ["a", "b"], 0.2, 13)
    with pytest.raises(ConfigError, match=r"\['c'\] gave no data"):
        split_leaving_out(keys, srcs, ["c"], 0.2, 13)


def test_leave_out_must_name_configured_sources() -> None:
    with pytest.raises(ConfigError, match="data.leave_out"):
        load_recipe_config(TINY, ["data.leave_out=[wice]"])  # the tiny twin reads synthetic only
    from searchsmith.training.rerank_data import RerankerData

    with pytest.raises(ValueError, match="data.leave_out"):
        RerankerData(sources=["synthetic"], leave_out=["scifact"])


@pytest.mark.parametrize("data_class", ["cite_data.CitationData", "rerank_data.RerankerData",
                                        "read_data.ReaderData", "images.ImagesData"])
def test_every_recipe_checks_leave_out_by_the_same_rule(data_class: str) -> None:
    """``training.data.check_leave_out``: one rule, one message, in every recipe's data section."""
    import importlib

    module, name = data_class.split(".")
    make = getattr(importlib.import_module(f"searchsmith.training.{module}"), name)
    with pytest.raises(ValueError, match=r"^data.leave_out: \['x'\] not in data.sources \['synthetic'\]; name sources "
                       "to hold out$"):
        make(sources=["synthetic"], leave_out=["x"])
    with pytest.raises(ValueError, match=r"^data.leave_out: \['synthetic'\] leaves no source to train on; keep at "
                       "least one of data.sources in training$"):
        make(sources=["synthetic"], leave_out=["synthetic"])


def test_segment_cosine_scorer_trains_reloads_and_exports(tmp_path: Path) -> None:
    """``model.scorer_head: segment_cosine``: the scorer is the reranker's segment-cosine head,
    saved with its head file, reloaded by CitationModel and exported with parity."""
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.reranker import SegmentCosineReranker
    from searchsmith.models.runtime import load_bundle

    run = tmp_path / "run"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", *RESIDUAL, "model.scorer_head=segment_cosine",
                                    "model.segment_scale=3.0", "optim.head_lr_scale=10"])
    cit.citation(cfg, run)
    assert json.loads((run / "model" / "scorer" / "reranker_head.json").read_text())["head"] == "segment_cosine"
    m = CitationModel.load(run)
    assert isinstance(m.scorer, SegmentCosineReranker) and m.cosine_residual is not None
    pairs = [("Quarry is written in Rust.", "Quarry is a database written in Rust."), ("a", "b")]
    want = m.attribute(pairs, cosine=[0.8, 0.2])
    out = tmp_path / "bundle"
    export_run(run, out, ExportOptions(dtype="fp32"))  # raises BundleError when parity fails
    got = load_bundle(out, device="cpu").attribute(pairs, cosine=[0.8, 0.2])
    assert np.allclose(got, want, atol=1e-4)
    with pytest.raises(ConfigError, match="LoRA"):
        cit.build_models(load_recipe_config(TINY, ["model.scorer_head=segment_cosine", "lora.enabled=true"]))
