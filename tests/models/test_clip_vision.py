"""The CLIP vision tower of the image-relevance dual encoder (``model.vision.kind: clip``),
on tiny random CLIPs only (no hub): build and shapes, freezing, the pretrained-weights path
from a local CLIP folder, save -> load without the hub, the tiny recipe end to end through
``searchsmith train``, the ONNX bundle with its parity check, and the rejected configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.image_relevance import (
    ClipVision,
    ImageRelevanceConfig,
    ImageRelevanceModel,
    SmallCNN,
    VisionConfig,
)
from searchsmith.training.config import load_recipe_config

REPO = Path(__file__).resolve().parents[2]
TINY_CLIP = REPO / "recipes" / "images" / "tiny" / "bert-tiny_clip-tiny.yaml"
HUB_CLIP = REPO / "recipes" / "images" / "minilm_clip-vit-b32.yaml"
CLIP = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
        "patch_size": 8, "image_size": 32, "projection_dim": 16}
TEXT = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}


def _cfg(**vision) -> ImageRelevanceConfig:
    v = {"kind": "clip", "image_size": 32, "clip_config": CLIP, **vision}
    return ImageRelevanceConfig(embed_dim=16, max_length=16, vision=VisionConfig(**v))


def _build(**vision) -> ImageRelevanceModel:
    torch.manual_seed(0)
    return ImageRelevanceModel.build(_cfg(**vision), text_config=TEXT)


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to resolve or download a CLIP fails the test."""
    import searchsmith.models.hub as hub
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    def refuse(*args, **kwargs):
        raise AssertionError(f"hub access during load: {args}")

    real = hub.resolve_model
    monkeypatch.setattr(hub, "resolve_model",
                        lambda name, **kw: real(name, **kw) if kw.get("field") != "model.vision.clip_model"
                        else refuse(name))
    monkeypatch.setattr(CLIPVisionModelWithProjection, "from_pretrained", refuse)
    monkeypatch.setattr(CLIPVisionConfig, "from_pretrained", refuse)


# ------------------------------------------------------------------ build and forward


def test_tiny_clip_tower_shapes_and_unit_vectors() -> None:
    model = _build().eval()
    net = model.vision_tower.net
    assert isinstance(net, ClipVision) and model.vision_tower.cnn is net  # old name kept as an alias
    assert net.clip.config.hidden_size == 32 and net.proj.in_features == 16 and net.proj.out_features == 16
    px = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        raw = net(px)
        out = model.vision_module()(px)
    assert raw.shape == (3, 16) and out.shape == (3, 16)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(3))  # the network is not normalised...
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(3))  # ...the tower is
    torch.testing.assert_close(out, torch.nn.functional.normalize(raw, dim=-1))


def test_clip_config_keys_are_the_installed_clip_vision_config_fields() -> None:
    import dataclasses

    from searchsmith.models.image_relevance import CLIP_CONFIG_KEYS
    from transformers import CLIPVisionConfig, PreTrainedConfig

    own = {f.name for f in dataclasses.fields(CLIPVisionConfig)} - {f.name for f in dataclasses.fields(PreTrainedConfig)}
    assert set(CLIP_CONFIG_KEYS) == own


def test_freeze_trains_only_the_added_projection() -> None:
    frozen = _build(freeze=True)
    trainable = {n for n, p in frozen.vision_tower.named_parameters() if p.requires_grad}
    assert trainable == {"net.proj.weight", "net.proj.bias"}
    frozen.train()
    assert not frozen.vision_tower.net.clip.training  # no dropout in a frozen backbone
    full = _build(freeze=False).train()
    full.vision_module()(torch.randn(2, 3, 32, 32)).sum().backward()
    grads = [p.grad for n, p in full.vision_tower.named_parameters() if n.startswith("net.clip.")]
    assert grads and all(g is not None for g in grads)


def test_pretrained_clip_from_a_local_folder_then_reload_without_hub(tmp_path: Path, monkeypatch) -> None:
    """``clip_model`` loads a full CLIPModel checkpoint's vision half; the saved model stores
    the CLIP config, so it loads back with no hub and the same outputs."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(3)
    full = CLIPModel(CLIPConfig(vision_config=CLIP, projection_dim=16,
                                text_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                             "intermediate_size": 37, "projection_dim": 16}))
    full.save_pretrained(tmp_path / "clip")
    model = _build(clip_config=None, clip_model=str(tmp_path / "clip"), freeze=True).eval()
    clip = model.vision_tower.net.clip
    torch.testing.assert_close(clip.visual_projection.weight, full.visual_projection.weight)
    torch.testing.assert_close(clip.vision_model.encoder.layers[1].mlp.fc1.weight,
                               full.vision_model.encoder.layers[1].mlp.fc1.weight)
    model.save(tmp_path / "model", trained_steps=1)
    arch = json.loads((tmp_path / "model" / "image_relevance.json").read_text())["architecture"]["vision"]
    assert arch["clip_config"]["hidden_size"] == 32 and arch["clip_model"] == str(tmp_path / "clip")
    shutil.rmtree(tmp_path / "clip")  # the source checkpoint is gone: load must not need it
    import searchsmith.models.hub as hub
    from transformers import CLIPVisionModelWithProjection

    monkeypatch.setattr(CLIPVisionModelWithProjection, "from_pretrained",
                        lambda *a, **k: pytest.fail("load went to the hub / clip_model"))
    monkeypatch.setattr(hub, "snapshot_download", lambda *a, **k: pytest.fail("hub"), raising=False)
    back = ImageRelevanceModel.load(tmp_path / "model")
    px = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(back.vision_module()(px), model.vision_module()(px))


def test_save_load_roundtrip_of_a_random_clip_without_hub(tmp_path: Path, no_hub) -> None:
    model = _build().eval()
    with torch.no_grad():  # make the added projection differ from any fresh init
        model.vision_tower.net.proj.weight.mul_(3.0)
    model.save(tmp_path / "m", trained_steps=5)
    state = torch.load(tmp_path / "m" / "vision.pt", weights_only=True)["vision"]
    assert {k.split(".")[0] for k in state} == {"clip", "proj"}
    back = ImageRelevanceModel.load(tmp_path / "m")
    assert back.config.vision.kind == "clip" and int(back.trained_steps) == 5
    px = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(back.vision_module()(px), model.vision_module()(px))
    texts = ["a red circle", "two blue squares"]
    np.testing.assert_allclose(back.encode_text(texts), model.encode_text(texts), atol=1e-6)


def test_a_clip_model_without_its_config_is_refused_on_load(tmp_path: Path, no_hub) -> None:
    _build().save(tmp_path / "m", trained_steps=1)
    meta_path = tmp_path / "m" / "image_relevance.json"
    meta = json.loads(meta_path.read_text())
    meta["architecture"]["vision"]["clip_config"] = None
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="vision.kind clip without vision.clip_config"):
        ImageRelevanceModel.load(tmp_path / "m")


def test_cnn_checkpoints_from_before_clip_still_load() -> None:
    """Trainer checkpoints (model.pt) written before kind clip name the CNN ``vision_tower.cnn``."""
    cfg = ImageRelevanceConfig(embed_dim=16, max_length=16, vision=VisionConfig(image_size=16, channels=[4, 8]))
    torch.manual_seed(1)
    a = ImageRelevanceModel.build(cfg, text_config=TEXT)
    old = {k.replace("vision_tower.net.", "vision_tower.cnn."): v for k, v in a.state_dict().items()}
    assert any(k.startswith("vision_tower.cnn.") for k in old)
    torch.manual_seed(2)
    b = ImageRelevanceModel.build(cfg, text_config=TEXT)
    b.load_state_dict(old)  # strict
    assert isinstance(b.vision_tower.net, SmallCNN)
    px = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(b.eval().vision_module()(px), a.eval().vision_module()(px))


# ------------------------------------------------------------------ the tiny recipe, end to end


@pytest.fixture(scope="module")
def clip_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from searchsmith.serving.main import main

    run = tmp_path_factory.mktemp("images_clip_tiny") / "run"
    assert main(["train", str(TINY_CLIP), "--output-dir", str(run)]) == 0
    return run


def test_tiny_clip_recipe_trains_a_frozen_clip_and_saves_its_config(clip_run: Path) -> None:
    metrics = json.loads((clip_run / "metrics.json").read_text())
    assert metrics["steps"] == 6
    meta = json.loads((clip_run / "model" / "image_relevance.json").read_text())
    vision = meta["architecture"]["vision"]
    assert vision["kind"] == "clip" and vision["freeze"] is True
    assert {k: vision["clip_config"][k] for k in CLIP} == CLIP
    final = torch.load(clip_run / "model" / "vision.pt", weights_only=True)["vision"]
    earlier = torch.load(clip_run / "checkpoints" / "step-4" / "model.pt", weights_only=True)
    earlier = {k.removeprefix("vision_tower.net."): v for k, v in earlier.items() if k.startswith("vision_tower.net.")}
    assert set(earlier) == set(final)
    for k in final:  # the frozen backbone did not move; the added projection learned
        if k.startswith("clip."):
            torch.testing.assert_close(final[k], earlier[k])
    assert not torch.equal(final["proj.weight"], earlier["proj.weight"])


def test_tiny_clip_run_reloads_and_exports_a_bundle_that_passes_parity(clip_run: Path, tmp_path: Path,
                                                                     no_hub) -> None:
    from PIL import Image
    from searchsmith.models.demo import demo_dir
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.evaluate import heldout_figures

    model = ImageRelevanceModel.load(clip_run)
    assert isinstance(model.vision_tower.net, ClipVision)
    out = tmp_path / "bundle"
    manifest = export_run(clip_run, out, ExportOptions(dtype="fp32", heldout_scorer=heldout_figures))
    assert sorted(manifest["graphs"]) == ["text", "vision"] and manifest["embedding_dim"] == 16
    assert manifest["graphs"]["vision"]["inputs"] == [{"name": "pixel_values", "dtype": "float32",
                                                       "shape": ["batch", 3, 32, 32]}]
    checks = manifest["parity"]["checks"]
    assert checks["vision_fp32_max_abs"] <= 1e-4 and checks["text_fp32_max_abs"] <= 1e-4
    scorer = load_bundle(out, device="cpu", task="images")
    images = [Image.open(p) for p in sorted((demo_dir() / "images").glob("*.png"))[:3]]
    got = scorer.encode_images(images)
    assert got.shape == (3, 16)
    np.testing.assert_allclose(got, model.encode_images(images), atol=1e-4)


# ------------------------------------------------------------------ rejected configs


def test_image_size_must_match_the_clip_config() -> None:
    with pytest.raises(ConfigError, match=r"vision.image_size \(64\) must equal the CLIP config's image_size "
                                          r"\(32, from vision.clip_config\).*set model.vision.image_size=32"):
        load_recipe_config(TINY_CLIP, ["model.vision.image_size=64"])


def test_image_size_is_checked_against_a_pretrained_clip_before_any_weights(tmp_path: Path) -> None:
    from transformers import CLIPVisionConfig

    CLIPVisionConfig(**CLIP).save_pretrained(tmp_path / "clip")  # a config, no weights
    cfg = ImageRelevanceConfig(embed_dim=16, vision=VisionConfig(kind="clip", image_size=64,
                                                                 clip_model=str(tmp_path / "clip")))
    with pytest.raises(ConfigError, match=r"model.vision.image_size \(64\) must equal the CLIP config's "
                                          r"image_size \(32, from model.vision.clip_model .*model.vision.image_size=32"):
        ImageRelevanceModel.build(cfg, text_config=TEXT)


def test_unknown_clip_config_key_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError, match=r"vision.clip_config.hiden_size: unknown CLIPVisionConfig key; "
                                          r"did you mean 'hidden_size'"):
        load_recipe_config(TINY_CLIP, ["model.vision.clip_config.hiden_size=64"])


def test_an_impossible_clip_architecture_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"model.vision.clip_config: .*hidden size \(30\) is not a multiple "
                                          r"of the number of attention heads \(4\)"):
        _build(clip_config={**CLIP, "hidden_size": 30, "num_attention_heads": 4})


def test_freezing_the_from_scratch_cnn_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"vision.freeze: true freezes a pretrained CLIP backbone.*"
                                          r"set vision.freeze=false"):
        load_recipe_config(REPO / "recipes" / "images" / "tiny" / "bert-tiny_cnn.yaml", ["model.vision.freeze=true"])


def test_hub_clip_offline_names_the_field_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from searchsmith.training.images import images

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_recipe_config(HUB_CLIP, ["model.vision.clip_model=nobody/no-such-clip"])
    with pytest.raises(ConfigError, match=r"model.vision.clip_model: 'nobody/no-such-clip' is neither a local "
                                          r"folder nor in the Hugging Face cache.*set model.vision.clip_config"):
        images(cfg, Path("/nonexistent-run-dir"))
