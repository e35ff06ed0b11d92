"""Issue 17, item 6: caption-cosine placement is the default; the image model places
captioned images only when its ``images`` gate opens and uncaptioned ones only when its
``vision`` gate opens, each decided by its figures on held-out photos."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter
from searchsmith.serving.pipeline.answer import PlacedImage
from searchsmith.serving.pipeline.config import ImagesConfig, Preset
from searchsmith.serving.pipeline.images import ImagesStage, place_images
from searchsmith.serving.pipeline.state import Passage, PipelineState

UNITS = ["Quarry is a vector database written in Rust.", "Knead the bread dough for ten minutes."]


def _encode(texts):
    """The text embedder: a text about Quarry on axis 0, anything else on axis 1."""
    return np.array([[1.0, 0.0] if "Quarry" in t else [0.0, 1.0] for t in texts])


class WrongBundle:
    """An image model whose text tower agrees with the embedder but whose every picture looks
    like the bread paragraph: its mix outweighs the captions, so it places wrongly."""

    task = "images"

    def __init__(self, figures=None):
        self.manifest = {"task": "images", "heldout_metrics": dict(figures or {})}
        self.text_calls = self.image_calls = 0

    def encode_text(self, texts):
        self.text_calls += 1
        return _encode(texts)

    def encode_images(self, images):
        self.image_calls += 1
        return np.array([[0.0, 1.0]] * len(images))


def _pixels(n):
    from PIL import Image

    return [Image.new("RGB", (40, 40), (10, 200, 10)) for _ in range(n)]


def test_without_the_mix_captioned_images_are_placed_by_their_caption():
    bundle = WrongBundle()
    caps = ["Quarry architecture diagram", None]
    scores, where, method = place_images(UNITS, caps, _pixels(2), config=ImagesConfig(), bundle=bundle,
                                         encode=_encode, mix=False, vision=False)
    assert where == [0, None] and method == "captions"
    assert scores[0, 0] == pytest.approx(1.0) and (scores[:, 1] == -1.0).all()  # uncaptioned: unscored
    assert bundle.text_calls == bundle.image_calls == 0  # the gated model is never called


def test_the_open_mix_lets_the_model_place_captioned_images():
    bundle = WrongBundle()
    _, where, method = place_images(UNITS, ["Quarry architecture diagram"], _pixels(1), config=ImagesConfig(),
                                    bundle=bundle, encode=_encode, mix=True, vision=False)
    assert where == [1] and method == "captions"  # the (wrong) model decided: the switch works
    assert bundle.image_calls == 1


def test_the_open_vision_gate_places_only_the_uncaptioned_images_by_pixels():
    bundle = WrongBundle()
    caps = ["Quarry architecture diagram", None]
    _, where, method = place_images(UNITS, caps, _pixels(2), config=ImagesConfig(), bundle=bundle,
                                    encode=_encode, mix=False, vision=True)
    assert where == [0, 1] and method == "captions+vision"
    _, where, method = place_images(UNITS, caps, _pixels(2), config=ImagesConfig(), bundle=bundle,
                                    encode=_encode)  # the server's /v1/images/place: the model for all
    assert method == "bundle" and where[1] == 1


def test_captions_without_an_encoder_are_an_error_not_a_silent_drop():
    with pytest.raises(ValueError, match="encode function is needed"):
        place_images(UNITS, ["Quarry"], [None], config=ImagesConfig(), bundle=WrongBundle(), mix=False)


def _state(tmp_path):
    from PIL import Image

    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "a.png")
    Image.new("RGB", (64, 64), (30, 30, 200)).save(tmp_path / "b.png")
    st = PipelineState(query="What is Quarry?", rewrite="What is Quarry?")
    st.answer = "\n\n".join(UNITS)
    st.passages = [Passage("a#0", "a", "docs", "Quarry is a vector database.", 0.9,
                           images=({"id": "arch", "path": str(tmp_path / "a.png"), "caption": "Quarry architecture"},
                                   {"id": "photo", "path": str(tmp_path / "b.png")}))]
    return st


def test_the_stage_says_what_placed_each_image_and_what_it_left_out(tmp_path, embedder):
    st = _state(tmp_path)
    ImagesStage(embedder, ImagesConfig(), WrongBundle(), mix=False, vision=False).run(st, Preset())
    assert [(im["image_id"], im["paragraph"], im["placed_by"]) for im in st.images] == [("arch", 0, "caption")]
    assert "1 image(s) without a caption left out" in st.trace.stages["images"].note
    st = _state(tmp_path)
    ImagesStage(embedder, ImagesConfig(), WrongBundle(), mix=False, vision=True).run(st, Preset())
    assert {im["image_id"]: im["placed_by"] for im in st.images} == {"arch": "caption", "photo": "model"}
    # what /openapi.json documents for an answer's images (types strict, keys closed)
    TypeAdapter(list[PlacedImage]).validate_python(st.images, strict=True)


def _paired(key, direction):
    """The paired test a recipe records (``<key>_diff`` ... ``_direction``)."""
    return {f"{key}_{k}": v for k, v in {"diff": 0.1, "lo": 0.05 if direction else -0.05, "hi": 0.2,
                                          "p": 0.01 if direction else 0.4, "n": 40, "direction": direction}.items()}


OOD = {"ood/placement_accuracy": 0.5, "baselines/ood_cosine_placement_accuracy": 0.6,
       "ood/vision_placement_net": 0.3, "baselines/ood_no_placement_net": 0.0,
       **_paired("ood/placement_accuracy_vs_cosine", 1), **_paired("ood/vision_placement_net_vs_none", 1)}


@pytest.mark.parametrize(("figures", "mix", "vision"), [
    (OOD, False, True),  # the mix loses to captions on photos, the vision tower beats leaving out
    ({**OOD, "ood/vision_placement_net": 0.0}, False, False),  # a tie is not enough
    ({**OOD, "ood/placement_accuracy": 0.7}, True, True),
    # leads inside the noise of the photos' documents do not open either gate
    ({**OOD, "ood/placement_accuracy": 0.7, **_paired("ood/placement_accuracy_vs_cosine", 0),
      **_paired("ood/vision_placement_net_vs_none", 0)}, False, False),
    # a bundle exported before the paired tests records none: both gates closed
    ({k: v for k, v in {**OOD, "ood/placement_accuracy": 0.7}.items() if "_vs_" not in k}, False, False),
    ({"placement_accuracy": 0.9, "baselines/cosine_placement_accuracy": 0.3}, False, False),  # in-domain only
])
def test_the_pipeline_wires_each_gate_to_its_use(make_pipeline, figures, mix, vision):
    pipe = make_pipeline(bundles={"images": WrongBundle(figures)})
    stage = next(s for s in pipe.stages if isinstance(s, ImagesStage))
    assert (stage.mix, stage.vision) == (mix, vision)
    assert (pipe.gates["images"].used, pipe.gates["vision"].used) == (mix, vision)
    assert (stage.bundle is not None) == (mix or vision)
    ans = pipe.ask("What is Quarry?")
    assert set(ans["trace"]["gates"]) >= {"images", "vision"}
