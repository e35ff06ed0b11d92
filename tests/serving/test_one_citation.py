"""One citation and one image placement: /v1/cite and /v1/images/place answer as the pipeline's
citation and images stages do (all call ``pipeline.citation.cite_sentences`` and
``pipeline.images.place_images``). Each test runs the same inputs through a stage and through
its endpoint and compares what they cite or place; a second implementation that drifts fails here."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient
from searchsmith.models.citation import CosineResidual
from searchsmith.serving.http import create_app
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.pipeline.citation import CitationStage
from searchsmith.serving.pipeline.config import CitationConfig, ImagesConfig, PipelineConfig, Preset
from searchsmith.serving.pipeline.images import ImagesStage, answer_units
from searchsmith.serving.pipeline.state import Passage, PipelineState

SENTENCES = ["Voyager 2 flew past Saturn in August 1981.", "Kestrel listens on port 8080 by default.",
             "The moon is made of cheese."]
PASSAGES = [Passage("v1#0", "voyager-1", "space", "Voyager 1 flew past Saturn in November 1980.", 0.9),
            Passage("v2#0", "voyager-2", "space", "Voyager 2 flew past Saturn in August 1981. It went on to "
                    "Uranus.", 0.8),
            Passage("k#0", "kestrel", "code", "Kestrel listens on port 8080 by default. It serves HTTP.", 0.7)]


class CiterWithoutThreshold:
    """A citation bundle whose manifest has no support_threshold (nor the bundle itself):
    P(supports) = the share of the sentence's words that the passage contains."""

    task, manifest = "cite", {"task": "cite"}

    def entities(self, sentences):
        return [[(0, len(s.split()[0]), "ENT")] for s in sentences]

    def attribute(self, pairs):
        def words(t):
            return {w.strip(".,").lower() for w in t.split()}

        return np.array([len(words(s) & words(p)) / len(words(s)) for s, p in pairs], dtype=np.float32)


class ResidualCiter(CiterWithoutThreshold):
    """A bundle whose scorer corrects the bi-encoder cosine (``cosine_residual``): it needs
    each pair's cosine, which the stage and the endpoint compute from the served embedder."""

    support_threshold = 0.5
    cosine_residual = CosineResidual(scale=10.0, bias=-6.0, cross_weight=0.5)

    def attribute(self, pairs, cosine=None):
        share = super().attribute(pairs)
        return self.cosine_residual.probs(share, cosine)


def _cite_by_the_stage(embedder, config, bundle):
    st = PipelineState(query="q", rewrite="q", passages=list(PASSAGES), answer=" ".join(SENTENCES))
    CitationStage(embedder, config, bundle).run(st, Preset())
    doc = {r["n"]: r["doc_id"] for r in st.references}
    return [(s["text"], [(doc[c["n"]], c["score"]) for c in s["citations"]]) for s in st.sentences]


@pytest.mark.parametrize("bundle", [CiterWithoutThreshold(), ResidualCiter(), None],
                         ids=["bundle", "residual-bundle", "embedding"])
def test_cite_endpoint_cites_as_the_citation_stage(embedder, bundle) -> None:
    config = CitationConfig()
    by_stage = _cite_by_the_stage(embedder, config, bundle)
    app = create_app(ServerLimits(), embedder=embedder, citation=bundle,
                     pipeline_config=PipelineConfig(citation=config))
    with TestClient(app) as c:
        resp = c.post("/v1/cite", json={"sentences": SENTENCES, "documents": [
            {"id": p.doc_id, "text": p.text} for p in PASSAGES]})
    assert resp.status_code == 200, resp.text  # without a threshold the bundle falls back to 0.5
    body = resp.json()
    assert body["threshold"] == (0.5 if bundle is not None else config.cosine_threshold)
    by_endpoint = [(s["text"], [(c["id"], round(c["score"], 4)) for c in s["citations"]])
                   for s in body["sentences"]]
    assert by_endpoint == by_stage
    # the cases the comparison must cover: the veto (Voyager 1 lacks "2"), a citation, none
    assert [[d for d, _ in cited] for _, cited in by_stage] == [["voyager-2"], ["kestrel"], []]


def test_cite_endpoint_refuses_a_residual_bundle_without_an_embedder() -> None:
    app = create_app(ServerLimits(), citation=ResidualCiter(), pipeline_config=PipelineConfig())
    with TestClient(app) as c:
        resp = c.post("/v1/cite", json={"sentences": SENTENCES[:1], "documents": [{"id": "a", "text": "x"}]})
    assert resp.status_code == 404 and "bundles.embedder" in resp.text


class ColourImages:
    """Texts: one-hot of the keyword they mention; images: one-hot of their colour's keyword."""

    task = "images"
    KEYWORDS = ("cat", "dog", "car")
    COLOURS = {(255, 0, 0): "cat", (0, 255, 0): "dog", (0, 0, 255): "car"}

    def _onehot(self, word):
        return np.eye(3, dtype=np.float32)[self.KEYWORDS.index(word)] if word else np.zeros(3, np.float32)

    def encode_text(self, texts):
        return np.stack([self._onehot(next((k for k in self.KEYWORDS if k in t.lower()), "")) for t in texts])

    def encode_images(self, images):
        return np.stack([self._onehot(self.COLOURS.get(im.getpixel((0, 0)), "")) for im in images])


@pytest.mark.parametrize("bundle", [ColourImages(), None], ids=["bundle", "captions"])
def test_images_endpoint_places_as_the_images_stage(tmp_path, embedder, bundle) -> None:
    from PIL import Image

    images = []
    for name, colour, caption in (("red", (255, 0, 0), "a cat asleep on a sofa"),
                                  ("green", (0, 255, 0), "a dog running in the park"),
                                  ("blue", (0, 0, 255), None)):
        path = tmp_path / f"{name}.png"
        Image.new("RGB", (40, 40), colour).save(path)
        images.append({"id": name, "path": str(path), "caption": caption})
    st = PipelineState(query="pets at home", answer="A cat sleeps on the sofa.\n\nThe dog runs in the park.",
                       passages=[Passage("p#0", "p", "pets", "Cats and dogs.", 0.9, images=tuple(images))])
    config = ImagesConfig()
    ImagesStage(embedder, config, bundle).run(st, Preset())
    by_stage = [(im["image_id"], im["paragraph"], im["score"]) for im in st.images]

    app = create_app(ServerLimits(), embedder=embedder, images=bundle, pipeline_config=PipelineConfig(images=config))
    with TestClient(app) as c:
        resp = c.post("/v1/images/place", json={
            "paragraphs": answer_units(st.answer), "query": st.question(),
            "images": [{"id": im["id"], "data": base64.b64encode(open(im["path"], "rb").read()).decode(),
                        **({"caption": im["caption"]} if im["caption"] else {})} for im in images]})
    assert resp.status_code == 200, resp.text
    by_endpoint = [(p["id"], p["paragraph"], round(p["score"], 4)) for p in resp.json()["placements"]]
    assert by_endpoint == by_stage
    assert [(i, p) for i, p, _ in by_stage] == [("red", 0), ("green", 1)]
