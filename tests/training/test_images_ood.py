"""Issue 17, item 6: the image model judged on photos it has not seen (the figures behind
the pipeline's two images gates), and datasets left out of its training."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.placement import PlacementConfig
from searchsmith.training.config import load_recipe_config
from searchsmith.training.evaluate_images import (
    no_placement_figures,
    no_placement_outcomes,
    ood_docs,
    ood_placement_figures,
    placement_figures,
    placement_outcomes,
    placement_vs,
)
from searchsmith.training.image_data import (
    ImageRecord,
    placement_docs,
    sampled_placement_docs,
    split_records,
)
from searchsmith.training.images import images

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "images" / "tiny" / "bert-tiny_cnn.yaml"


def _recs(n: int, source: str, start: int = 0) -> list[ImageRecord]:
    return [ImageRecord(f"{source}{i}", source, (f"para {i}", f"cap {i}")) for i in range(start, start + n)]


def test_sampled_docs_draw_distinct_records_of_the_rows_only() -> None:
    recs = _recs(30, "synthetic_images") + _recs(14, "coco_captions", start=30)
    docs = ood_docs(recs, "coco_captions", n_docs=7, seed=5)
    assert len(docs) == 7
    for d in docs:
        assert len(d.images) == 5 and len(set(d.images)) == 5
        rows = d.images + [int(p.split()[1]) for p in d.paragraphs]
        assert all(recs[r].source == "coco_captions" for r in rows)
        assert len({int(p.split()[1]) for p in d.paragraphs} | set(d.images)) == 11  # 11 distinct pictures
        assert d.gold[-1] is None and all(d.paragraphs[g] == f"para {d.images[j]}"
                                          for j, g in enumerate(d.gold) if g is not None)
    assert ood_docs(recs, "coco_captions", 7, seed=5) == docs  # seeded
    assert ood_docs(recs, "coco_captions", 7, seed=6) != docs
    assert ood_docs(recs, "none", 7, seed=5) == [] and ood_docs(recs, "wit", 7, seed=5) == []
    assert sampled_placement_docs(recs, list(range(30, 40)), 3, seed=1) == []  # 10 < 11 pictures


def test_placement_docs_are_unchanged_by_the_shared_builder() -> None:
    """The pooled documents keep their grouping (figures of earlier runs stay comparable)."""
    recs = _recs(22, "synthetic_images")
    docs = placement_docs(recs, seed=3)
    assert [d.images for d in docs] == [[5, 16, 19, 6, 8], [20, 21, 0, 11, 7]]  # as before the change


def _photo_docs() -> tuple[list, int, Any, PlacementConfig]:
    """10 documents over 40 photos, a text encoder that gives each picture's texts its own one-hot
    vector (a picture matching its paragraph scores 1, any other 0), and the placement rule."""
    recs = _recs(40, "coco_captions")
    n = len(recs)

    def onehot(texts: list[str]) -> np.ndarray:
        return np.eye(n)[[int(t.split()[1]) for t in texts]]

    return ood_docs(recs, "coco_captions", n_docs=10, seed=2), n, onehot, PlacementConfig(threshold=0.3)


def test_ood_figures_hide_captions_for_the_vision_gate() -> None:
    docs, n, onehot, cfg = _photo_docs()
    # pictures that match their own paragraph: captions or not, every shown image is placed
    good = ood_placement_figures(docs, onehot, np.eye(n), cfg)
    assert good["ood/docs"] == 10.0
    assert good["ood/placement_accuracy"] == 1.0 and good["ood/vision_placement_accuracy"] == 1.0
    assert good["ood/vision_placement_net"] == pytest.approx(0.8)  # 4 of 5 placed right, none wrong
    # pictures pointing nowhere: the captions still place them, the vision tower alone cannot
    blind = ood_placement_figures(docs, onehot, np.zeros((n, n)), cfg)
    assert blind["ood/placement_accuracy"] == 1.0
    assert blind["ood/vision_placement_accuracy"] == pytest.approx(no_placement_figures(docs)["placement_accuracy"])
    assert no_placement_figures(docs) == {"placement_accuracy": 0.2, "placement_net": 0.0}
    assert blind["ood/vision_placement_net"] == 0.0  # placed nothing: ties with leaving them out
    # the fallback (no model) has no vision figures
    assert set(ood_placement_figures(docs, onehot, None, cfg)) == {
        "ood/docs", "ood/placement_accuracy", "ood/placement_precision", "ood/placement_recall", "ood/placement_net"}
    assert ood_placement_figures([], onehot, None, cfg) == {}
    # a wrong place counts against the vision tower: pictures shifted by one paragraph
    shifted = np.roll(np.eye(n), 1, axis=1)
    bare = [replace(d, captions=[None] * 5) for d in docs]
    wrong = placement_figures(bare, onehot, shifted, cfg)
    assert wrong["placement_accuracy"] < 0.2 and wrong["placement_net"] < 0


def test_paired_placement_tests_resample_whole_documents() -> None:
    """The images gates' paired tests (beyond the noise, as every other gate's)."""
    docs, n, onehot, cfg = _photo_docs()
    bare = [replace(d, captions=[None] * 5) for d in docs]
    sees = placement_outcomes(bare, onehot, np.eye(n), cfg)
    blind = placement_outcomes(bare, onehot, np.zeros((n, n)), cfg)
    assert sees.clusters == tuple(tuple(range(5 * i, 5 * i + 5)) for i in range(10))
    assert sees.figures() == placement_figures(bare, onehot, np.eye(n), cfg)
    assert blind.figures()["placement_accuracy"] == no_placement_outcomes(docs).figures()["placement_accuracy"]
    # a document's images are resampled together: one resample unit per document
    vs = placement_vs("k", "placement_accuracy", blind, sees)
    assert vs["k_n"] == 10.0 and vs["k_diff"] == pytest.approx(0.8) and vs["k_direction"] == 1.0
    assert vs["k_lo"] > 0 and vs["k_p"] < 0.05
    assert placement_vs("k", "placement_accuracy", sees, blind)["k_direction"] == -1.0
    same = placement_vs("k", "placement_net", sees, sees)
    assert same["k_diff"] == 0.0 and same["k_direction"] == 0.0
    # a lead on one document of ten is inside the noise
    one = replace(blind, right=blind.right.copy())
    one.right[:5] = True
    small = placement_vs("k", "placement_accuracy", blind, one)
    assert small["k_diff"] == pytest.approx(0.08) and small["k_direction"] == 0.0
    with pytest.raises(ValidationError, match="different documents"):
        placement_vs("k", "placement_accuracy", blind, placement_outcomes(bare[:3], onehot, np.eye(n), cfg))
    # ood_placement_figures records the vision tower's test against placing nothing always, and
    # the mix's against caption-cosine placement when given its outcomes on the same documents
    figs = ood_placement_figures(docs, onehot, np.eye(n), cfg)
    assert figs["ood/vision_placement_net_vs_none_direction"] == 1.0
    assert not any(k.startswith("ood/placement_accuracy_vs_cosine") for k in figs)
    cosine = placement_outcomes(docs, onehot, None, cfg)
    figs = ood_placement_figures(docs, onehot, np.eye(n), cfg, cosine)
    assert figs["ood/placement_accuracy_vs_cosine_diff"] == 0.0  # both place every captioned image right
    assert figs["ood/placement_accuracy_vs_cosine_direction"] == 0.0
    assert figs["ood/placement_accuracy_vs_cosine_n"] == 10.0


def test_leave_out_holds_a_whole_source_out_of_training() -> None:
    by_source = {"synthetic_images": _recs(40, "synthetic_images"), "coco_captions": _recs(20, "coco_captions", 40)}
    train, held = split_records(by_source, 0.25, 13, leave_out=["coco_captions"])
    assert not any(r.source == "coco_captions" for r in train)
    assert sum(r.source == "coco_captions" for r in held) == 20
    assert 0 < sum(r.source == "synthetic_images" for r in held) < 40
    _, pooled = split_records(by_source, 0.25, 13)
    assert sum(r.source == "coco_captions" for r in pooled) < 20


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.leave_out=[coco_captions]", "data.sources=[synthetic_images]"], "not in data.sources"),
    (["data.leave_out=[synthetic_images]", "data.sources=[synthetic_images]"], "leaves no source to train on"),
    (["data.ood_docs=0"], "data.ood_docs must be in"),
])
def test_bad_leave_out_and_ood_settings_are_config_errors(overrides, message) -> None:
    with pytest.raises((ConfigError, ValidationError, ValueError), match=message):
        load_recipe_config(TINY, overrides)


@pytest.fixture(scope="module")
def ood_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The tiny twin with its generated pictures standing in for the photos (the only source
    it has), so that the recipe records the figures the images gates read."""
    run = tmp_path_factory.mktemp("images_ood")
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "data.ood_source=synthetic_images", "data.ood_docs=6"])
    return run, images(cfg, run)


def test_the_recipe_records_the_gates_figures_and_baselines(ood_run) -> None:
    run, final = ood_run
    assert {"ood/placement_accuracy", "ood/vision_placement_net", "ood/docs"} <= set(final)
    assert final["ood/docs"] == 6.0
    base = json.loads((run / "metrics.json").read_text())["baselines"]
    assert base["ood_no_placement_accuracy"] == pytest.approx(0.2) and base["ood_no_placement_net"] == 0.0
    assert 0.0 <= base["ood_cosine_placement_accuracy"] <= 1.0
    assert base["data"]["ood_source"] == "synthetic_images" and base["data"]["ood_docs"] == 6
    assert "ood/placement_accuracy" in base["untrained"]
    # the paired tests the gates read, one resample unit per photo document
    for key in ("ood/placement_accuracy_vs_cosine", "ood/vision_placement_net_vs_none"):
        assert final[f"{key}_n"] == 6.0 and final[f"{key}_direction"] in (-1.0, 0.0, 1.0)
        assert final[f"{key}_lo"] <= final[f"{key}_diff"] <= final[f"{key}_hi"]
    assert final["ood/vision_placement_net_vs_none_diff"] == pytest.approx(final["ood/vision_placement_net"])
    assert final["ood/placement_accuracy_vs_cosine_diff"] == pytest.approx(
        final["ood/placement_accuracy"] - base["ood_cosine_placement_accuracy"])


def test_the_export_rescoring_records_the_ood_figures(ood_run) -> None:
    """What the export writes into the manifest, which the gates read."""
    from searchsmith.models.image_relevance import ImageRelevanceModel
    from searchsmith.serving.pipeline.config import BundlesConfig
    from searchsmith.serving.pipeline.gates import decide
    from searchsmith.training.evaluate import heldout_figures

    run, final = ood_run
    figs, where = heldout_figures("images", run, ImageRelevanceModel.load(run))
    assert "held-out split" in where
    assert figs["ood/placement_accuracy"] == pytest.approx(final["ood/placement_accuracy"], abs=1e-6)
    assert figs["ood/vision_placement_net"] == pytest.approx(final["ood/vision_placement_net"], abs=1e-6)
    for key in ("ood/placement_accuracy_vs_cosine", "ood/vision_placement_net_vs_none"):
        for part in ("diff", "direction", "n"):  # the export measures the caption-cosine placement again
            assert figs[f"{key}_{part}"] == pytest.approx(final[f"{key}_{part}"], abs=1e-6)
    decisions = decide({"images": {"heldout_metrics": figs}}, BundlesConfig())
    assert set(decisions) == {"images", "vision"}
    for d in decisions.values():  # each decided from the recorded figures, never "not recorded"
        assert d.figures[0].value is not None and d.figures[0].baseline is not None


def test_a_run_without_photos_records_no_ood_figure_and_the_gate_says_how(tmp_path) -> None:
    from searchsmith.serving.pipeline.config import BundlesConfig
    from searchsmith.serving.pipeline.gates import decide

    figs = {"placement_accuracy": 0.9, "baselines/cosine_placement_accuracy": 0.5}
    decisions = decide({"images": {"heldout_metrics": figs}}, BundlesConfig())
    assert not decisions["images"].used and not decisions["vision"].used
    assert "coco_captions" in decisions["images"].reason and "ood/placement_accuracy" in decisions["images"].reason
