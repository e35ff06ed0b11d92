"""A question's misspelt words read as the index's words one edit away (``Index.spelled``,
``retrieval.spelling``): "wich port does qaurry use" was answered with Beacon's port."""

from __future__ import annotations

import pytest
from searchsmith.models.text import one_edit
from searchsmith.serving.pipeline.config import PipelineConfig, RetrievalConfig

DOCS = [
    {"id": "quarry", "source": "docs", "title": "Quarry overview",
     "text": "Quarry is a vector database. By default Quarry listens on port 7420."},
    {"id": "beacon", "source": "docs", "title": "Beacon overview",
     "text": "Beacon is a metrics agent. By default the server listens on port 9464."},
    {"id": "atlas", "source": "news", "title": "Atlasgrid 2.2 released",
     "text": "Northwind Labs released Atlasgrid 2.2 on 21 January 2025."},
    {"id": "quarry2", "source": "news", "title": "Quarry 3.0",
     "text": "Quarry 3.0 was released with faster compaction."},
]


@pytest.fixture(scope="module")
def spelling_index(tmp_path_factory, embedder):
    import json

    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("spell")
    (d / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in DOCS), encoding="utf-8")
    build_index(read_corpus(d / "corpus.jsonl"), d / "index", IndexConfig(centroids=CentroidConfig(chunks_per_centroid=2)),
                embedder=embedder)
    return d / "index"


@pytest.fixture(scope="module")
def index(spelling_index, embedder):
    from searchsmith.serving.index import Index

    ix = Index.load(spelling_index, embedder=embedder)
    yield ix
    ix.close()


def test_one_edit_keeps_the_first_letters_it_is_told_to():
    assert one_edit("qaurry", "quarry", kept=1) and not one_edit("qaurry", "quarry")  # a swap at the 2nd letter
    assert one_edit("relased", "released") and one_edit("lumne", "lumen", kept=1)
    assert not one_edit("founded", "funded") and not one_edit("quarry", "quarry", kept=1)
    assert not one_edit("quarry", "query", kept=1)  # two edits


def test_a_lower_case_word_no_chunk_holds_is_read_as_the_nearest_held_word(index):
    assert index.spelled("wich port does qaurry use") == ("wich port does quarry use", {"qaurry": "quarry"})
    assert index.spelled("when was atlasgrid 2.2 relased?") == ("when was atlasgrid 2.2 released?",
                                                                {"relased": "released"})
    # held words, short words, words with a capital (a name the index lacks), digits: kept
    # ... and a word held in another inflection ("listen" beside "listens")
    for text in ("quarry default port", "what is qry", "What is the port of Qaurry?", "What port does Redis use?",
                 "port 74200", "which port does quarry listen on"):
        assert index.spelled(text) == (text, {}), text
    assert index.spelled("wich port does qaurry use", min_chars=7) == ("wich port does qaurry use", {})
    with pytest.raises(Exception, match="spelling: text must be a string"):
        index.spelled(None)  # type: ignore[arg-type]


def test_the_pipeline_reads_the_corrected_question_and_says_so(index, embedder):
    from searchsmith.serving.pipeline.pipeline import Pipeline

    pipe = Pipeline(PipelineConfig(), index, embedder)
    a = pipe.ask("wich port does qaurry use")
    assert a["query"] == "wich port does qaurry use"  # as typed
    assert a["rewrite"] == "wich port does quarry use"
    assert "'qaurry' read as 'quarry' (retrieval.spelling)" in " ".join(a["trace"]["notes"])
    assert a["short_answer"] == "7420", a["answer_text"]
    off = Pipeline(PipelineConfig(retrieval=RetrievalConfig(spelling=False)), index, embedder)
    b = off.ask("wich port does qaurry use")
    assert b["rewrite"] == "wich port does qaurry use"
    assert not any("retrieval.spelling" in n for n in b["trace"]["notes"])


@pytest.mark.parametrize("bad", [{"spelling": "yes"}, {"spelling_min_chars": 2}, {"spelling_min_chars": 4.5},
                                 {"spelling_min_chars": 41}])
def test_bad_spelling_settings_are_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"retrieval.{next(iter(bad))}"):
        RetrievalConfig(**bad)


def test_only_the_words_of_titles_are_guessed(index):
    """A word of the texts alone is no better a guess than the typed one: "owned" was read
    "owner" on the demo (a text's "owner"), which broke "Which company is it owned by now?"."""
    assert index.spelled("who is the metrics agnet") == ("who is the metrics agnet", {})  # "agent": texts only
    assert index.spelled("who relased atlasgrid") == ("who released atlasgrid", {"relased": "released"})  # a title's
