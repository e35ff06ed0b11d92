from __future__ import annotations

import json
from pathlib import Path

import pytest

TOPICS = {
    "cooking": [
        "Knead the bread dough for ten minutes until it is smooth and elastic.",
        "Simmer the tomato sauce with garlic, basil and olive oil for half an hour.",
        "Whisk eggs and sugar until pale before folding in the flour for a sponge cake.",
        "Roast the vegetables at 220 degrees with salt, pepper and rosemary.",
        "A sourdough starter needs flour and water fed daily to stay active.",
        "Caramelise onions slowly over low heat for a sweet, deep flavour.",
    ],
    "astronomy": [
        "Jupiter is the largest planet of the solar system and has dozens of moons.",
        "A light-year is the distance light travels in one year, about 9.46 trillion kilometres.",
        "Neutron stars are the collapsed cores of massive stars after a supernova.",
        "The Andromeda galaxy will collide with the Milky Way in about four billion years.",
        "Saturn's rings are made of ice particles and rocky debris.",
        "Telescopes on mountains avoid much of the atmosphere's turbulence.",
    ],
    "code": [
        "The Lumen cache eviction policy is implemented in lumen/evict.py by the Evictor class.",
        "Call quarry.connect(url, timeout_s=5) to open a connection pool to the Quarry database.",
        "The scheduler's retry loop lives in tidewater/retry.py and uses exponential backoff.",
        "def chunk(text: str, size: int) -> list[str] splits text into pieces of size tokens.",
        "Unit tests for the Lumen eviction code are in tests/test_evict.py.",
        "The HTTP handlers of the Quarry server are defined in quarry/http/routes.py.",
    ],
}


def write_corpus(path: Path, extra: list[dict] | None = None) -> Path:
    rows = []
    for source, texts in TOPICS.items():
        for i, text in enumerate(texts):
            rows.append({"id": f"{source}-{i}", "source": source, "text": text, "title": f"{source} {i}"})
    rows.extend(extra or [])
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def embedder():
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    return Embedder(EmbedderConfig(max_batch_tokens=2048))


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, embedder):
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("idx")
    corpus = write_corpus(d / "corpus.jsonl")
    cfg = IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(read_corpus(corpus), d / "index", cfg, embedder=embedder)
    return d / "index"
