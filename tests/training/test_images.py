"""Image relevance: placement on crafted matrices, loss and recall on known values, the
eval file reader's rejections, and the tiny twin end to end (train, save, reload, resume)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.image_relevance import (
    ImageRelevanceModel,
    PlacementConfig,
    assign_images,
    combined_scores,
)
from searchsmith.training.config import load_recipe_config
from searchsmith.training.evaluate_images import (
    eval_images,
    placement_metrics,
    read_placement_file,
    retrieval_recall,
)
from searchsmith.training.image_data import render, synthetic_records
from searchsmith.training.images import images, infonce_loss, load_records

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "images" / "tiny" / "bert-tiny_cnn.yaml"


# ------------------------------------------------------------------ placement


def test_assign_images_finds_the_hungarian_optimum() -> None:
    # Greedy would give image 0 to paragraph 0 (0.9) and leave image 1 with 0.1 (total 1.0);
    # the optimum swaps them: 0.8 + 0.85 = 1.65.
    scores = np.array([[0.9, 0.85],
                       [0.8, 0.1]])
    assert assign_images(scores, threshold=-1.0) == [1, 0]


def test_assign_images_drops_pairs_under_the_threshold() -> None:
    scores = np.array([[0.9, 0.2],
                       [0.1, 0.25]])
    assert assign_images(scores, threshold=0.3) == [0, None]
    assert assign_images(scores, threshold=0.2) == [0, 1]


def test_assign_images_with_more_images_than_paragraphs() -> None:
    scores = np.array([[0.5, 0.9, 0.4],
                       [0.6, 0.7, 0.95]])
    out = assign_images(scores, threshold=0.3)
    assert out == [None, 0, 1]  # each paragraph takes at most one image
    assert assign_images(np.zeros((0, 2)), 0.3) == [None, None]


def test_a_weak_pair_does_not_block_a_better_placement() -> None:
    weak = np.array([[0.9, 0.35],
                     [0.7, 0.29]])
    # Raw Hungarian: 0.9 + 0.29 = 1.19 beats 0.35 + 0.7 = 1.05, then drops (p1, i1) at 0.29:
    # one image placed. Counting a pair under 0.3 as unplaced (worth 0): 0.9 + 0 < 1.05, so
    # both images are placed.
    assert assign_images(weak, threshold=0.3) == [1, 0]


def test_assign_images_rejects_a_non_matrix() -> None:
    with pytest.raises(ValidationError, match=r"scores: expected a 2-D \(paragraphs, images\) matrix"):
        assign_images(np.zeros(3), 0.3)


def test_combined_scores_weights_and_missing_captions() -> None:
    cfg = PlacementConfig(image_paragraph_weight=0.5, caption_paragraph_weight=0.3, image_query_weight=0.2)
    ip = np.array([[0.4, 0.2]])
    cp = np.array([[0.8, np.nan]])  # image 1 has no caption
    iq = np.array([0.1, 0.5])
    out = combined_scores(ip, cp, iq, cfg)
    assert out[0, 0] == pytest.approx((0.5 * 0.4 + 0.3 * 0.8 + 0.2 * 0.1) / 1.0)
    assert out[0, 1] == pytest.approx((0.5 * 0.2 + 0.2 * 0.5) / 0.7)
    assert combined_scores(ip, config=cfg) == pytest.approx(ip)
    assert PlacementConfig().threshold == 0.3


# ------------------------------------------------------------------ loss and metrics


def test_infonce_known_values() -> None:
    e = torch.eye(4)
    # Scale 0: uniform logits, each direction costs log(B).
    assert float(infonce_loss(e, e, torch.tensor(0.0))) == pytest.approx(math.log(4), rel=1e-6)
    # Aligned pairs and a large scale: close to 0; swapped pairs: large.
    assert float(infonce_loss(e, e, torch.tensor(50.0))) < 1e-6
    assert float(infonce_loss(e, e.flip(0), torch.tensor(50.0))) > 10
    # Two images with the same caption: the duplicate is a positive, not a negative.
    targets = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    same = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert float(infonce_loss(same, same, torch.tensor(10.0), targets)) == pytest.approx(math.log(2), rel=1e-5)


def test_retrieval_recall_and_chance() -> None:
    img = np.eye(3, dtype=np.float32)
    txt = np.eye(3, dtype=np.float32)[[1, 0, 2]]  # text 0 looks like image 1
    rel = np.eye(3, dtype=bool)
    out = retrieval_recall(img, txt, rel, ks=(1, 2))
    assert out["i2t_recall@1"] == pytest.approx(1 / 3)
    assert out["t2i_recall@1"] == pytest.approx(1 / 3)
    assert out["chance/i2t_recall@1"] == pytest.approx(1 / 3)
    assert out["chance/i2t_recall@2"] == pytest.approx(2 / 3)


# ------------------------------------------------------------------ data


def test_synthetic_records_are_deterministic_and_varied() -> None:
    a, b = synthetic_records(200, 5), synthetic_records(200, 5)
    assert [r.captions for r in a] == [r.captions for r in b]
    assert len({r.spec["kind"] for r in a}) == 6
    assert len({r.captions[0] for r in a}) > 150
    im = render(a[0].spec, 48)
    assert im.size == (48, 48) and im.mode == "RGB"


def test_missing_coco_folder_names_field_and_fix(tmp_path: Path) -> None:
    cfg = load_recipe_config(TINY, ["data.sources=[coco_captions]", f"data.coco_dir={tmp_path / 'nope'}"])
    with pytest.raises(ConfigError, match=r"data.coco_dir: COCO folder .*nope' not found.*data.sources=\[synthetic_images\]"):
        load_records(cfg.data)


def test_empty_synthetic_dataset_is_rejected() -> None:
    cfg = load_recipe_config(TINY, ["data.synthetic_images=0"])
    with pytest.raises(ConfigError, match="data.synthetic_images must be >= 1, got 0"):
        load_records(cfg.data)


def test_unknown_recipe_key_suggests() -> None:
    with pytest.raises(ConfigError, match=r"model.vision.chanels: unknown key; did you mean 'channels'"):
        load_recipe_config(TINY, ["model.vision.chanels=[8]"])


# kind: clip (the hub-CLIP recipe and its tiny twin): tests/models/test_clip_vision.py


# ------------------------------------------------------------------ eval file


def _write_eval(tmp: Path, record: dict | None = None) -> Path:
    (tmp / "imgs").mkdir(exist_ok=True)
    recs = synthetic_records(3, 21)
    for r in recs:
        render(r.spec, 64).save(tmp / "imgs" / f"{r.id}.png")
    rec = record or {
        "id": "doc1",
        "paragraphs": [r.captions[0] for r in recs[:2]] + ["an unrelated paragraph about taxes"],
        "images": [{"id": r.id, "path": f"imgs/{r.id}.png"} for r in recs],
        "gold": {recs[0].id: 0, recs[1].id: 1, recs[2].id: None},
    }
    path = tmp / "eval.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    return path


class FakeScorer:
    """Text i and image i share a direction; 'taxes' points elsewhere."""

    def __init__(self, items_text: list[str]) -> None:
        self.dirs = {t: i for i, t in enumerate(items_text)}

    def encode_text(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for j, t in enumerate(texts):
            out[j, self.dirs.get(t, 7)] = 1.0
        return out

    def encode_images(self, imgs: list) -> np.ndarray:
        return np.eye(8, dtype=np.float32)[: len(imgs)]


def test_placement_metrics_on_known_scores(tmp_path: Path) -> None:
    items = read_placement_file(_write_eval(tmp_path))
    scorer = FakeScorer(items[0].paragraphs[:2])
    out, per_item = placement_metrics(scorer, items, PlacementConfig())
    # Images 0, 1 go to paragraphs 0, 1 (cosine 1); image 2 scores 0 everywhere: dropped.
    assert per_item[0]["predicted"] == {items[0].image_ids[0]: 0, items[0].image_ids[1]: 1,
                                        items[0].image_ids[2]: None}
    assert out["placement_accuracy"] == 1.0
    assert out["placement_precision"] == 1.0 and out["placement_recall"] == 1.0
    assert out["recall@1"] == 1.0 and out["chance/recall@1"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.update(paragraph=r.pop("paragraphs")), r"unknown key 'paragraph'; did you mean 'paragraphs'"),
    (lambda r: r["gold"].update({next(iter(r["gold"])): 3}), r"is out of range; expected an integer in \[0, 2\]"),
    (lambda r: r["images"][0].update(pth="x"), r"images\[0\]: unknown key 'pth'; did you mean 'path'"),
    (lambda r: r["gold"].pop(next(iter(r["gold"]))), r"gold has no entry for image"),
])
def test_bad_eval_records_are_rejected(tmp_path: Path, mutate, message) -> None:
    path = _write_eval(tmp_path)
    rec = json.loads(path.read_text())
    mutate(rec)
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValidationError, match=message):
        read_placement_file(path)


def test_corrupt_image_file_is_rejected(tmp_path: Path) -> None:
    path = _write_eval(tmp_path)
    rec = json.loads(path.read_text())
    (tmp_path / rec["images"][1]["path"]).write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(ValidationError, match=r"images\[1\]: .* is not a readable image"):
        read_placement_file(path)


def test_empty_eval_file_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    with pytest.raises(ValidationError, match="no records"):
        read_placement_file(p)


def test_missing_eval_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--data: .*nope.jsonl' does not exist"):
        read_placement_file(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------ tiny twin end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("images_tiny")
    cfg = load_recipe_config(TINY, [f"output_dir={run}"])
    final = images(cfg, run)
    return run, final


def test_tiny_recipe_trains_and_saves_the_contract_layout(tiny_run) -> None:
    run, final = tiny_run
    for name in ("metrics.json", "run.json", "split.json", "training_curve.png",
                 "model/image_relevance.json", "model/vision.pt", "model/text/config.json"):
        assert (run / name).is_file(), name
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 6
    assert set(metrics["baselines"]) >= {"chance", "untrained", "data"}
    assert 0 < metrics["baselines"]["chance"]["i2t_recall@5"] < 1
    assert {"i2t_recall@1", "i2t_recall@5", "t2i_recall@1", "t2i_recall@5"} <= set(final)
    split = json.loads((run / "split.json").read_text())
    assert not set(split["train"]) & set(split["eval"])
    assert json.loads((run / "run.json").read_text())["task"] == "images"


def test_tiny_model_reloads_and_modules_match(tiny_run) -> None:
    run, _ = tiny_run
    m = ImageRelevanceModel.load(run)
    assert m.image_size == 32 and m.max_length == 32
    recs = synthetic_records(3, 99)
    pics = [render(r.spec, 64) for r in recs]
    t = m.encode_text([r.captions[0] for r in recs])
    v = m.encode_images(pics)
    assert t.shape == (3, 16) and v.shape == (3, 16) and t.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    with torch.no_grad():
        enc = m.tokenize([r.captions[0] for r in recs])
        np.testing.assert_allclose(m.text_module()(enc["input_ids"], enc["attention_mask"]).numpy(), t, atol=1e-6)
        px = torch.from_numpy(m.preprocess(pics))
        assert px.shape == (3, 3, 32, 32)
        np.testing.assert_allclose(m.vision_module()(px).numpy(), v, atol=1e-6)


def test_load_refuses_untrained_and_mismatched(tiny_run, tmp_path: Path) -> None:
    run, _ = tiny_run
    m = ImageRelevanceModel.load(run)
    m.save(tmp_path / "untrained", trained_steps=0)
    with pytest.raises(BundleError, match="was never trained"):
        ImageRelevanceModel.load(tmp_path / "untrained")
    bad = tmp_path / "bad"
    shutil.copytree(run / "model", bad)
    meta = json.loads((bad / "image_relevance.json").read_text())
    meta["architecture"]["vision"]["channels"] = [8, 32]
    (bad / "image_relevance.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="vision.pt does not match the architecture"):
        ImageRelevanceModel.load(bad)


def test_tiny_run_resumes_from_a_checkpoint(tiny_run, tmp_path: Path) -> None:
    run, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "checkpoints" / "step-6")  # as if killed after step 4
    shutil.rmtree(copy / "model")
    cfg = load_recipe_config(TINY, [f"output_dir={copy}"])
    images(cfg, copy)
    metrics = json.loads((copy / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 6
    a = torch.load(run / "model" / "vision.pt")["vision"]
    b = torch.load(copy / "model" / "vision.pt")["vision"]
    for k in a:  # the resumed run reproduces the uninterrupted one
        torch.testing.assert_close(a[k], b[k])
    changed = load_recipe_config(TINY, [f"output_dir={copy}", "optim.lr=1.0e-2"])
    with pytest.raises(ConfigError, match="refusing to resume"):
        images(changed, copy)


def test_eval_images_cli_function_with_the_tiny_checkpoint(tiny_run, tmp_path: Path) -> None:
    run, _ = tiny_run
    data = _write_eval(tmp_path)
    per = tmp_path / "per.jsonl"
    args = argparse.Namespace(data=str(data), checkpoint=str(run), bundle=None, limit=0, per_item=str(per))
    out = eval_images(args)
    assert out["task"] == "images" and out["items"] == 1 and out["images"] == 3
    assert 0.0 <= out["placement_accuracy"] <= 1.0 and out["threshold"] == 0.3
    assert out["recall@5"] == 1.0  # 3 paragraphs: the gold one is always in the top 5
    assert len(per.read_text().splitlines()) == 1
    with pytest.raises(ConfigError, match="give --checkpoint RUN_DIR"):
        eval_images(argparse.Namespace(data=str(data), checkpoint=None, bundle=None, limit=0, per_item=None))


def test_placement_figures_score_as_the_pipeline_does_with_and_without_a_model() -> None:
    """Issue 23: the images gate compares the model's held-out placement with caption-cosine
    placement (the pipeline's fallback), both on the same held-out documents."""
    from searchsmith.training.evaluate_images import placement_figures
    from searchsmith.training.image_data import ImageRecord, placement_docs

    recs = [ImageRecord(f"r{i}", "synthetic", (f"para {i}", f"cap {i}")) for i in range(22)]
    docs = placement_docs(recs, seed=3, paragraphs_per_doc=10, images_per_doc=4, distractors=1)
    assert len(docs) == 2 and all(len(d.images) == 5 and d.gold[-1] is None for d in docs)
    assert all(d.paragraphs[g] == f"para {d.images[j]}" and d.captions[j] == f"cap {d.images[j]}"
               for d in docs for j, g in enumerate(d.gold) if g is not None)
    n = len(recs)

    def onehot(texts: list[str]) -> np.ndarray:  # a text's vector: its record's axis
        return np.eye(n)[[int(t.split()[1]) for t in texts]]

    placement = PlacementConfig(threshold=0.3)
    # cosine placement with exact caption vectors: every shown image placed, the distractor not
    assert placement_figures(docs, onehot, None, placement) == {
        "placement_accuracy": 1.0, "placement_precision": 1.0, "placement_recall": 1.0, "placement_net": 0.8}
    # image vectors of zero: the caption term alone, 0.3 * 1 / (0.5 + 0.3) = 0.375 >= 0.3, still
    # places the shown images; anti-aligned pictures, (0.5 * -1 + 0.3) / 0.8 < 0.3, place none
    assert placement_figures(docs, onehot, np.zeros((n, n)), placement)["placement_recall"] == 1.0
    assert placement_figures(docs, onehot, -np.eye(n), placement)["placement_recall"] == 0.0
    # without captions the fallback cannot place anything
    bare = [ImageRecord(f"r{i}", "synthetic", (f"para {i}",)) for i in range(22)]
    nodocs = placement_docs(bare, seed=3)
    assert placement_figures(nodocs, onehot, None, placement)["placement_recall"] == 0.0
