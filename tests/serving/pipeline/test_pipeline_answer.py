"""Generation backends, citation, timeline and images."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from one_node import one_node_state
from searchsmith.models.dates import parse_dates
from searchsmith.serving.pipeline.citation import CitationStage, pattern_entities
from searchsmith.serving.pipeline.config import (
    CitationConfig,
    ExtractiveConfig,
    GenerationConfig,
    HFConfig,
    ImagesConfig,
    OpenAIConfig,
    Preset,
    TimelineConfig,
)
from searchsmith.serving.pipeline.generation import (
    ExtractiveGenerator,
    GenerationStage,
    HFGenerator,
    OpenAIGenerator,
    Support,
    load_prompt,
)
from searchsmith.serving.pipeline.images import ImagesStage
from searchsmith.serving.pipeline.state import NodeResult, Passage, PipelineState
from searchsmith.serving.pipeline.timeline import TimelineStage

PASSAGES = [
    Passage("a#0", "a", "docs", "Quarry is a vector database. By default the server listens on port 7420. "
            "It is written in Rust.", 0.9, title="Quarry overview"),
    Passage("b#0", "b", "recipes", "Knead the bread dough for ten minutes until it is smooth.", 0.5,
            title="Bread"),
]


def _state(answer="", query="Which port does Quarry listen on?"):
    return one_node_state(query, PASSAGES, answer)


# -- generation -------------------------------------------------------------------------------
def test_extractive_selects_the_supported_sentence(embedder):
    gen = ExtractiveGenerator(embedder, ExtractiveConfig(sentences_per_node=1))
    assert gen.answer(_state().nodes, _state()) == "By default the server listens on port 7420."


def test_prompts_are_files_with_both_sections():
    system, user = load_prompt("answer.txt")
    assert "passages" in system.lower() and "{question}" in user and "{context}" in user


def test_missing_prompt_is_a_config_error():
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError, match="generation.prompt: 'nope.txt' is neither a file nor one of"):
        load_prompt("nope.txt")


class _FakeOpenAI(BaseHTTPRequestHandler):
    requests: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": "down"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ["Quarry listens ", "on port 7420 [9]."]:
            chunk = {"choices": [{"delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"choices": [], "usage": {"prompt_tokens": 123, "completion_tokens": 7}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_openai():
    _FakeOpenAI.requests, _FakeOpenAI.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_openai_backend_streams(fake_openai, embedder):
    llm = OpenAIGenerator(OpenAIConfig(base_url=fake_openai, model="m"))
    stage = GenerationStage(ExtractiveGenerator(embedder), llm, GenerationConfig(backend="openai"))
    st = _state()
    stage.run(st, Preset())
    assert st.answer == "Quarry listens on port 7420."  # the invented [9] marker is stripped
    req = _FakeOpenAI.requests[0]
    assert req["stream"] is True and req["model"] == "m"
    assert "Which port does Quarry listen on?" in req["messages"][1]["content"]
    assert "[1] Quarry overview:" in req["messages"][1]["content"]
    g = st.trace.stages["generation"]
    assert (g.model_calls, g.tokens_in, g.tokens_out) == (1, 123, 7)


def test_openai_failure_falls_back_to_extractive(fake_openai, embedder):
    _FakeOpenAI.status = 500
    llm = OpenAIGenerator(OpenAIConfig(base_url=fake_openai))
    stage = GenerationStage(ExtractiveGenerator(embedder), llm, GenerationConfig(backend="openai"))
    st = _state()
    stage.run(st, Preset())
    assert "7420" in st.answer
    assert any("openai failed (RunnerError" in n and "answered 500" in n for n in st.trace.notes)


def test_hf_backend_with_a_tiny_random_gpt2(tmp_path, embedder):
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_embd=16, n_layer=1, n_head=2, n_positions=512))
    model.save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    gen = HFGenerator(HFConfig(model=str(tmp_path / "lm"), max_new_tokens=5, max_input_tokens=256, device="cpu"))
    stage = GenerationStage(ExtractiveGenerator(embedder), gen, GenerationConfig(backend="hf"))
    st = _state()
    stage.run(st, Preset())
    g = st.trace.stages["generation"]
    assert g.model_calls == 1 and 0 < g.tokens_in <= 256 and g.tokens_out == 5
    assert isinstance(st.answer, str)


def test_hf_backend_needs_a_model():
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError, match="generation.hf.model: empty"):
        HFGenerator(HFConfig())


# -- citation ---------------------------------------------------------------------------------
def _markers(text):
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


def test_citation_markers_match_the_references(embedder):
    st = _state("By default the server listens on port 7420 [5]. Knead the bread dough for ten minutes. "
                "The moon is made of cheese.")
    CitationStage(embedder, CitationConfig()).run(st, Preset())
    marks = _markers(st.cited_answer)
    assert sorted(set(marks)) == [r["n"] for r in st.references] == [1, 2]
    assert [r["doc_id"] for r in st.references] == ["a", "b"]
    assert st.cited_answer.startswith("By default the server listens on port 7420 [1].")
    assert st.sentences[2]["citations"] == []  # no citation rather than a wrong one
    assert "7420" in st.sentences[0]["entities"]


def test_citation_bundle_and_threshold(embedder):
    class FakeCite:
        task = "cite"
        support_threshold = 0.5

        def entities(self, sents):
            return [[(0, 5, "ENT")] for _ in sents]

        def attribute(self, pairs):
            return np.array([0.9 if "7420" in p and "7420" in s else 0.2 for s, p in pairs], dtype=np.float32)

    st = _state("By default it listens on port 7420. Knead the dough.")
    CitationStage(embedder, CitationConfig(), FakeCite()).run(st, Preset())
    assert st.cited_answer == "By default it listens on port 7420 [1]. Knead the dough."
    assert st.sentences[0]["entities"] == ["By de"]
    assert st.trace.stages["citation"].model_calls == 3  # entities once + one attribute per sentence


def test_pattern_entities():
    ents = pattern_entities("Harbor & Finch bought Brightline Systems on 12 March for $19 via quarry.yaml.")
    assert "Harbor & Finch" in ents and "Brightline Systems" in ents and "quarry.yaml" in ents and "$19" in ents


# -- timeline ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text,iso,prec", [
    ("released on 2024-03-12.", "2024-03-12", "day"),
    ("released on 2024/3/12.", "2024-03-12", "day"),
    ("released on 12 March 2024.", "2024-03-12", "day"),
    ("released on March 12, 2024.", "2024-03-12", "day"),
    ("released on Sept. 9 2023.", "2023-09-09", "day"),
    ("released in March 2024.", "2024-03", "month"),
    ("completed in 1970.", "1970", "year"),
])
def test_date_formats(text, iso, prec):
    assert [(d, p) for d, p, _, _ in parse_dates(text)] == [(iso, prec)]


def test_impossible_dates_are_ignored():
    assert parse_dates("build 2024-13-45 and version 3.0") == []


def test_timeline_merges_sorts_and_groups(embedder):
    st = PipelineState(query="q")
    st.passages = [
        Passage("n1", "n1", "news", "Lumen Cloud was down for three hours on 18 July 2024.", 1.0),
        Passage("n2", "n2", "news", "Lumen Cloud was down for three hours on July 18, 2024.", 0.9),
        Passage("n3", "n3", "news", "Quarry 1.0 was released on 2021-04-20.", 0.8),
        Passage("n4", "n4", "news", "A text without any date.", 0.7, title="Dated doc", date="2022-01-05"),
    ]
    TimelineStage(embedder, TimelineConfig()).run(st, Preset())
    assert [g["year"] for g in st.timeline] == ["2021", "2022", "2024"]
    lumen = st.timeline[2]["events"]
    assert len(lumen) == 1 and lumen[0]["sources"] == ["n1", "n2"] and lumen[0]["date"] == "2024-07-18"
    assert st.timeline[1]["events"][0]["text"] == "Dated doc"


def test_timeline_reads_iso_document_dates_of_every_precision(embedder):
    """A document dated "2022-01", "2021" or "2023-05-02T09:30:00Z" once gave no event: the
    document date went through the running-text reader, which wants a day (and a word boundary
    after it) or a preposition before a year."""
    st = PipelineState(query="q")
    st.passages = [
        Passage("a", "a", "news", "Nothing dated here.", 1.0, title="Month doc", date="2022-01"),
        Passage("b", "b", "news", "Nor here.", 0.9, title="Year doc", date="2021"),
        Passage("c", "c", "news", "Nor in this one.", 0.8, title="Stamped doc", date="2023-05-02T09:30:00Z"),
    ]
    TimelineStage(embedder, TimelineConfig()).run(st, Preset())
    got = {e["text"]: (e["date"], e["precision"]) for g in st.timeline for e in g["events"]}
    assert got == {"Month doc": ("2022-01", "month"), "Year doc": ("2021", "year"),
                   "Stamped doc": ("2023-05-02", "day")}


def test_timeline_keeps_distinct_events_apart(embedder):
    st = PipelineState(query="q")
    st.passages = [Passage("n1", "n1", "news", "Lumen Cloud was down on 18 July 2024.", 1.0),
                   Passage("n2", "n2", "news", "Brightline was acquired on 18 July 2024.", 0.9)]
    TimelineStage(embedder, TimelineConfig()).run(st, Preset())
    assert len(st.timeline[0]["events"]) == 2


def test_content_words_meet_an_identifiers_parts():
    from searchsmith.serving.pipeline.common import content_words

    asked = content_words("What is the default value of scrape.interval_s in Beacon?")
    assert {"scrape.interval_s", "scrape", "interval_s"} <= asked
    # the YAML block that sets the key shares its parts; a version is not split into digits
    assert content_words("`scrape: interval_s: 15`") & asked == {"scrape", "interval_s"}
    assert content_words("Lumen 4.0 released") & content_words("Lumen 4.0.1 is out") == {"lumen"}


def test_timeline_takes_a_digest_pages_lines_about_the_question(embedder):
    digest = ("In January 2024: Northwind Labs names a chief product officer.\n"
              "In March 2024: Harbor & Finch acquires Brightline Systems.\n"
              "In July 2024: Lumen Cloud outage in eu-west.\n"
              "In September 2024: Quarry 3.0 released.\n"
              "In November 2024: Northwind Labs raises $120 million.")
    st = PipelineState(query="When did the Lumen Cloud outage happen?")
    st.passages = [Passage("r#0", "review", "news", digest, 1.0, title="2024 in review"),
                   Passage("a#0", "a", "news", "On 18 July 2024, Lumen Cloud customers in eu-west lost service.", 0.9)]
    TimelineStage(embedder, TimelineConfig()).run(st, Preset())
    events = [(e["date"], e["sources"]) for g in st.timeline for e in g["events"]]
    # the digest gives its outage line only; the article's own dated sentence always stays
    assert ("2024-07", ["review"]) in events and ("2024-07-18", ["a"]) in events and len(events) == 2
    assert "4 of 6 dated sentences left out" in st.trace.get("timeline").note
    # 0 keeps every dated line (the old behaviour)
    TimelineStage(embedder, TimelineConfig(relevance_ratio=0.0)).run(st, Preset())
    assert len([e for g in st.timeline for e in g["events"]]) == 6
    with pytest.raises(ValueError, match="timeline.relevance_ratio"):
        TimelineConfig(relevance_ratio=1.5)


# -- images -----------------------------------------------------------------------------------
def _png(path, size=64):
    from PIL import Image

    Image.new("RGB", (size, size), (200, 30, 30)).save(path)
    return str(path)


def test_images_placed_by_caption_cosine(tmp_path, embedder):
    st = _state("Quarry is a vector database written in Rust.\n\nKnead the bread dough for ten minutes.")
    st.passages = [
        Passage("a#0", "a", "docs", "Quarry is a vector database.", 0.9,
                images=({"id": "arch", "path": _png(tmp_path / "a.png"), "caption": "Quarry vector database architecture"},
                        {"id": "gone", "path": str(tmp_path / "missing.png"), "caption": "Quarry"},
                        {"id": "icon", "path": _png(tmp_path / "i.png", 8), "caption": "Quarry icon"})),
        Passage("b#0", "b", "recipes", "Knead the dough.", 0.5,
                images=({"id": "moon", "path": _png(tmp_path / "m.png"), "caption": "A map of lunar craters"},)),
    ]
    ImagesStage(embedder, ImagesConfig()).run(st, Preset())
    assert [(im["image_id"], im["paragraph"]) for im in st.images] == [("arch", 0)]
    assert st.images[0]["score"] >= 0.3
    assert any("missing.png is missing or unreadable" in n for n in st.trace.notes)


def test_images_bundle_uses_three_way_scores(tmp_path, embedder):
    class FakeImages:
        task = "images"

        def encode_text(self, texts):
            return np.array([[1.0, 0.0] if "Quarry" in t else [0.0, 1.0] for t in texts], dtype=np.float32)

        def encode_images(self, images):
            return np.array([[1.0, 0.0]] * len(images), dtype=np.float32)

    st = _state("Quarry is a vector database.\n\nKnead the dough.")
    st.passages[0] = Passage("a#0", "a", "docs", "Quarry.", 0.9,
                             images=({"id": "arch", "path": _png(tmp_path / "a.png"), "caption": "Quarry diagram"},))
    ImagesStage(embedder, ImagesConfig(), FakeImages()).run(st, Preset())
    assert [(im["image_id"], im["paragraph"], im["score"]) for im in st.images] == [("arch", 0, 1.0)]
    assert st.trace.stages["images"].model_calls == 2


@pytest.mark.parametrize("chain_support", [True, False])
def test_a_chain_answer_leads_with_the_sentence_of_each_earlier_step(embedder, chain_support):
    # step 1 answered (its answer filled step 2), step 2 final: the answer quotes step 1's
    # sentence first, so the first hop's passage is cited too
    q = "How long should the dough of the bread baked by Quarry's team be kneaded?"
    st = PipelineState(query=q, rewrite=q)
    st.passages = list(PASSAGES)
    first = NodeResult("1", "Which port does Quarry listen on?", passages=[PASSAGES[0]],
                       answer="By default the server listens on port 7420.")
    second = NodeResult("2", "How long should bread dough be kneaded?", ("1",), passages=[PASSAGES[1]], round=1)
    st.nodes, st.node_answers = [first, second], {"1": first.answer}
    config = GenerationConfig(no_answer_missing_names=False, chain_support=chain_support)
    GenerationStage(ExtractiveGenerator(embedder), None, config).run(st, Preset())
    bread = "Knead the bread dough for ten minutes until it is smooth."
    assert st.short_answer == "ten minutes"  # a written-out count with its unit is a duration
    if chain_support:
        assert st.answer == f"ten minutes. By default the server listens on port 7420. {bread}"
        assert st.used_passages == ["a#0", "b#0"]
    else:
        assert st.answer == f"ten minutes. {bread}" and st.used_passages == ["b#0"]


def test_a_bridge_is_the_sentence_holding_a_short_answer(embedder):
    gen = ExtractiveGenerator(embedder)
    node = NodeResult("1", "Which port does Quarry listen on?", passages=list(PASSAGES), answer="Rust")
    st = PipelineState(query="q", rewrite="q")
    assert gen.bridge(node, st).text == "It is written in Rust."  # not the best-supported sentence
    node.answer = "an answer no passage has"
    assert gen.bridge(node, st).text == "By default the server listens on port 7420."
    assert gen.bridge(NodeResult("1", "x", passages=[]), st) is None


def test_a_sub_questions_extractive_answer_is_the_span_it_asks_for(embedder):
    st = PipelineState(query="q", rewrite="q")
    gen = ExtractiveGenerator(embedder, ExtractiveConfig(node_answer="span"))
    p = [Passage("c#0", "c", "docs", "Live at Shelly's Manne-Hole is an album by pianist Les McCann recorded on "
                 "New Year's Eve 1965.", 0.9)]
    # a phrase step asks for what it describes ("Which pianist ...?"); the names rule took both names
    assert gen.node_answer("the pianist who recorded Live at Shelly's Manne-Hole", p, st) == "Les McCann"
    names = ExtractiveGenerator(embedder, ExtractiveConfig(node_answer="names"))
    assert names.node_answer("the pianist who recorded Live at Shelly's Manne-Hole", p, st) == \
        "Les McCann New Year's Eve 1965"
    # a sentence without a span of the asked kind: its names
    assert gen.node_answer("When did Quarry ship?", PASSAGES, st) == names.node_answer("When did Quarry ship?",
                                                                                       PASSAGES, st)


def test_a_sub_questions_extractive_answer_is_the_names_its_sentence_adds(embedder):
    st = PipelineState(query="q", rewrite="q")
    gen = ExtractiveGenerator(embedder)  # node_answer: names
    # the best sentence names a port the question lacks: that fills the children's #k
    assert gen.node_answer("Which port does Quarry listen on?", PASSAGES, st) == "7420"
    # names the sub-question already has are not its answer; at most node_answer_names kept
    p = [Passage("c#0", "c", "docs", "Quarry was written by Ada Lovelace and Alan Turing in London in 1950.", 0.9)]
    assert gen.node_answer("Who wrote Quarry?", p, st) == "Ada Lovelace Alan Turing London"
    two = ExtractiveGenerator(embedder, ExtractiveConfig(node_answer="names", node_answer_names=2))
    assert two.node_answer("Who wrote Quarry?", p, st) == "Ada Lovelace Alan Turing"
    # a sentence with no new name answers whole; node_answer: sentence always does
    bread = [PASSAGES[1]]
    assert gen.node_answer("How long should dough be kneaded?", bread, st) == PASSAGES[1].text
    whole = ExtractiveGenerator(embedder, ExtractiveConfig(node_answer="sentence"))
    assert whole.node_answer("Which port does Quarry listen on?", PASSAGES, st) == \
        "By default the server listens on port 7420."
    assert gen.node_answer("anything", [], st) == ""


@pytest.mark.parametrize("bad", [{"node_answer": "spans"}, {"node_answer_names": 0}, {"node_answer_names": 1.5},
                                 {"node_answer_names": True}])
def test_bad_node_answer_settings_are_refused(bad):
    with pytest.raises(ValueError, match="generation.extractive.node_answer"):
        ExtractiveConfig(**bad)


def test_the_extractive_answer_leads_with_the_span_its_question_asks_for(embedder):
    st = _state()
    stage = GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(sentences_per_node=1)), None,
                            GenerationConfig(no_answer_missing_names=False))
    stage.run(st, Preset())
    sentence = "By default the server listens on port 7420."
    assert (st.short_answer, st.support) == ("7420", [sentence])
    assert st.answer == f"7420. {sentence}" and st.used_passages == ["a#0"]
    assert "short answer '7420' (generation.extractive.short_answer)" in st.trace.stages["generation"].note
    # off: the sentences alone, as before
    off = GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(sentences_per_node=1, short_answer=False)),
                          None, GenerationConfig(no_answer_missing_names=False))
    st = _state()
    off.run(st, Preset())
    assert (st.answer, st.short_answer, st.support) == (sentence, "", [])


def test_a_yes_no_question_keeps_the_extractive_sentences(embedder):
    st = _state(query="Is Quarry written in Rust?")
    GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(sentences_per_node=1)), None,
                    GenerationConfig(no_answer_missing_names=False)).run(st, Preset())
    assert st.answer == "It is written in Rust." and (st.short_answer, st.support) == ("", [])


FILM_PASSAGES = [
    Passage("h#0", "h", "films", "Harbour Lights is a 1952 drama film directed by Ola Brandt. It was shot in Bergen.",
            0.8, title="Harbour Lights"),
    Passage("g#0", "g", "films", "The Glass Orchard is a 1938 comedy film directed by Pia Sorel.", 0.7,
            title="The Glass Orchard"),
]


def _film_state(query):
    return one_node_state(query, FILM_PASSAGES)


def test_a_choice_question_is_answered_by_the_option_its_passages_favour(embedder):
    q = "Which film came out first, Harbour Lights or The Glass Orchard?"
    st = _film_state(q)
    GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False)).run(
        st, Preset())
    first, second = "The Glass Orchard is a 1938 comedy film directed by Pia Sorel.", \
        "Harbour Lights is a 1952 drama film directed by Ola Brandt."
    assert (st.short_answer, st.support) == ("The Glass Orchard", [first, second])
    assert st.answer == f"The Glass Orchard. {first} {second}" and st.used_passages == ["g#0", "h#0"]
    note = st.trace.stages["generation"].note
    assert "compared: 'The Glass Orchard', date: Harbour Lights 1952, The Glass Orchard 1938 (smallest)" in note
    # off: as any question that offers a choice before (the sentences alone, no short answer)
    off = GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(compare=False)), None,
                          GenerationConfig(no_answer_missing_names=False))
    st = _film_state(q)
    off.run(st, Preset())
    assert (st.short_answer, st.support) == ("", []) and "compared" not in st.trace.stages["generation"].note


def test_a_choice_the_passages_do_not_decide_keeps_the_sentences(embedder):
    # neither passage says who is older: no option is guessed
    st = _film_state("Who is older, Harbour Lights or The Glass Orchard?")
    st.passages = st.nodes[0].passages = [
        Passage("h#0", "h", "films", "Harbour Lights is a drama film.", 0.8, title="Harbour Lights"),
        Passage("g#0", "g", "films", "The Glass Orchard is a comedy film.", 0.7, title="The Glass Orchard")]
    GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False)).run(
        st, Preset())
    assert st.short_answer == "" and st.answer and "compared" not in st.trace.stages["generation"].note


def test_a_choice_offered_with_and_the_passages_do_not_decide_gets_no_short_answer(embedder):
    # "..., A and B?" offers a choice: not the span of another name ("Ericaceae")
    st = _film_state("Which film has more sequels, Harbour Lights and The Glass Orchard?")
    st.passages = st.nodes[0].passages = [
        Passage("h#0", "h", "films", "Harbour Lights is a drama film made in Ericaceae.", 0.8, title="Harbour Lights"),
        Passage("g#0", "g", "films", "The Glass Orchard is a drama film made in Ericaceae.", 0.7,
                title="The Glass Orchard")]
    GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False)).run(
        st, Preset())
    assert st.short_answer == "" and st.answer


def test_a_country_question_answered_by_no_country_takes_the_country_of_a_later_sentence(embedder):
    q = "The physicist who shared the Nobel Prize in 2010 founded a graphene centre in what country?"
    passages = [Passage("c#0", "c", "science", "The graphene centre was founded by the physicist Andre Geim, "
                        "who shared the Nobel Prize in 2010.", 0.9, title="Graphene centre"),
                Passage("n#0", "n", "science", "It lies at the National University of Singapore.", 0.5,
                        title="Graphene centre")]

    st = _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=1))
    assert st.short_answer == "Singapore"
    assert "It lies at the National University of Singapore." in st.support and "n#0" in st.used_passages
    assert _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=1, typed_sentences=1)).short_answer == "Andre Geim"  # only the best sentence read: no country



def test_a_figure_of_the_asked_dimension_is_sought_in_the_steps_best_sentences(embedder):
    # the setting's page: its first sentences say what it does; the default is a short sentence
    # that ranks low, and the code's file name is the only span the selected sentences hold
    q = "What is the default value of cache.max_size_gb in Atlasgrid?"
    passages = [Passage("d#0", "d", "docs", "The `cache.max_size_gb` setting controls the size of the tile cache "
                        "of Atlasgrid. The code for Atlasgrid's tile cache lives in `atlasgrid/cache/disk.py`. "
                        "Changes take effect after a restart. Default: `20`. Allowed values: 1 to 500.", 0.9,
                        title="Configuring Atlasgrid: cache.max_size_gb")]

    st = _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=2))
    assert st.short_answer == "20"
    assert st.support[0] == "Default: `20`." and not any("disk.py" in s for s in st.support)
    # with only the best sentence searched, the default is not found
    assert _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=2, measure_sentences=1)).short_answer != "20"
    # a temperature, where the selected sentence holds only "serves 8"
    q = "At what temperature is rosemary focaccia baked?"
    passages = [Passage("f#0", "f", "recipes", "Rosemary focaccia (Italian), serves 8. Mix the flour, yeast and "
                        "water. Top with rosemary and bake at 220 degrees Celsius for 25 minutes.", 0.9,
                        title="Rosemary focaccia")]
    assert _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=1)).short_answer == "220 degrees Celsius"



def test_a_month_or_year_answer_takes_a_finer_date_of_the_steps_best_sentences(embedder):
    # a year in review states the month first; the release note the day
    q = "When was Lumen 4.0 released?"
    passages = [Passage("y#0", "y", "news", "The stories of 2024, month by month. In May 2024: Lumen 4.0 released. "
                        "In June 2024: Lumen 4.0.1 released.", 0.9, title="2024 in review"),
                Passage("r#0", "r", "news", "Brightline Systems released Lumen 4.0 on 2024-05-28. It follows "
                        "Lumen 3.0, released in June 2022.", 0.8, title="Lumen 4.0 released")]
    st = _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=1))
    assert st.short_answer == "2024-05-28"
    assert st.support[0] == "Brightline Systems released Lumen 4.0 on 2024-05-28."
    gen = ExtractiveGenerator(embedder)
    ranked = [Support(1.0, s, ("x",)) for s in ["In May 2024: Lumen 4.0 released.", "Lumen 4.0.1 is out (18 June 2024).",
                                               "Brightline Systems released Lumen 4.0 on 28 May 2024."]]
    assert gen.finer_date(q, "May 2024", ranked) == ("28 May 2024", ranked[2])
    assert gen.finer_date(q, "May 2024", ranked[:2]) == ("May 2024", None)  # June is not within May
    assert gen.finer_date(q, "2024", ranked)[0] == "May 2024"  # a year takes the month
    assert gen.finer_date("In which year was Lumen 4.0 released?", "2024", ranked) == ("2024", None)
    assert gen.finer_date(q, "28 May 2024", ranked) == ("28 May 2024", None)


def test_the_sentence_a_short_answer_was_read_in_leads_its_support(embedder):
    # a decomposed question's short answer is read over all its passages, its support is the
    # final steps' sentences: the sentence it came from is returned to lead them
    gen = ExtractiveGenerator(embedder, ExtractiveConfig(sentences_per_node=2, min_relative_score=0.1))
    ranked = [Support(0.9, "Rosemary focaccia (Italian), serves 8.", ("f#0",)),
              Support(0.8, "Top with rosemary and bake at 220 degrees Celsius for 25 minutes.", ("f#0",))]
    q = "At what temperature is rosemary focaccia baked?"
    assert gen.short_answer(q, [q], [ranked]) == ("220 degrees Celsius", [ranked[1]])
    chosen, _ = gen.chosen([[Support(0.5, "Rosemary focaccia is a flat bread.", ("f#0",))]],
                           [ranked[1]], "220 degrees Celsius")
    assert chosen == [ranked[1].text]

def test_a_short_answer_is_held_by_a_sentence_as_a_whole_word(embedder):
    # "en" is in "implemented": that sentence does not hold the short answer "en"
    q = "What is the default value of analyzer.language in Marlowe?"
    passages = [Passage("m#0", "m", "docs", "Marlowe's text analysis is implemented in `marlowe/analysis/analyzer.py`. "
                        "Default: `en`.", 0.9, title="Configuring Marlowe: analyzer.language")]
    st = _answered(embedder, q, passages, ExtractiveConfig(sentences_per_node=2))
    assert st.short_answer == "en" and st.support == ["Default: `en`."]

def test_a_choice_question_is_answered_by_the_option_before_the_readers_span(embedder):
    from tests.serving.pipeline.test_pipeline_reader import FakeReader

    reader = FakeReader(["Bergen"])  # the reader would answer a name that is neither option
    stage = GenerationStage(ExtractiveGenerator(embedder), None,
                            GenerationConfig(no_answer_missing_names=False), reader=reader)
    st = _film_state("Which film was released more recently, Harbour Lights or The Glass Orchard?")
    stage.run(st, Preset())
    assert st.short_answer == "Harbour Lights" and reader.questions == []
    # any other question is the reader's
    st = _film_state("Where was Harbour Lights shot?")
    stage.run(st, Preset())
    assert st.short_answer == "Bergen" and reader.questions


def test_a_yes_no_question_comparing_two_named_things_is_answered_yes_or_no(embedder):
    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False))
    st = _film_state("Were Harbour Lights and The Glass Orchard directed by the same person?")
    stage.run(st, Preset())
    assert st.short_answer == "no" and st.answer.startswith("No. Harbour Lights is a 1952 drama film")
    assert st.used_passages == ["h#0", "g#0"]
    st = _film_state("Are Harbour Lights and The Glass Orchard both films?")
    stage.run(st, Preset())
    assert st.short_answer == "yes" and st.answer.startswith("Yes. ")
    # a yes / no question about one thing is not compared: its sentences, as before
    st = _film_state("Is Harbour Lights a drama?")
    stage.run(st, Preset())
    assert st.short_answer == "" and "compared" not in st.trace.stages["generation"].note


BRIDGE_PASSAGES = [
    Passage("w#0", "w", "films", "When in Rome is a 2010 American romantic comedy film directed by Mark Steven "
            "Johnson. It stars Kristen Bell.", 0.9, title="When in Rome (2010 film)"),
    Passage("m#0", "m", "people", "Mark Steven Johnson is an American film director and screenwriter. He was born "
            "in Hastings, Minnesota.", 0.6, title="Mark Steven Johnson"),
    Passage("k#0", "k", "people", "Kristen Bell is an actress from Huntington Woods.", 0.5, title="Kristen Bell"),
]


def _bridge_state(query, passages=BRIDGE_PASSAGES):
    return one_node_state(query, passages)


def test_a_question_through_a_bridge_is_answered_from_the_bridges_passage(embedder):
    q = "Where was the director of the film When in Rome born?"
    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False))
    st = _bridge_state(q)
    stage.run(st, Preset())
    link = ("When in Rome is a 2010 American romantic comedy film directed by Mark Steven Johnson.")
    held = "He was born in Hastings, Minnesota."
    # the span of the bridge's passage (the bridge's own name and the nationality are no answer)
    assert st.short_answer == "Hastings"
    assert st.support[:2] == [link, held] and st.used_passages[:2] == ["w#0", "m#0"]
    assert st.answer.startswith(f"Hastings. {link} {held}")
    assert "through 'Mark Steven Johnson' (generation.extractive.bridge)" in st.trace.stages["generation"].note
    # off: the span of the question's best sentences alone
    off = GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(bridge=False)), None,
                          GenerationConfig(no_answer_missing_names=False))
    st = _bridge_state(q)
    off.run(st, Preset())
    assert st.short_answer != "Hastings" and "bridge" not in st.trace.stages["generation"].note


def test_a_bridge_of_the_asked_type_is_the_answer(embedder):
    passages = [
        Passage("f#0", "f", "people", "Fiske O'Hara was an Irish-American singer and actor, born in Rockland, Maine.",
                0.9, title="Fiske O'Hara"),
        Passage("r#0", "r", "places", "Rockland is a city in Knox County, Maine, United States. Its population was "
                "7,297 in 2010.", 0.6, title="Rockland, Maine"),
    ]
    gen = ExtractiveGenerator(embedder)
    q = "Fiske O'Hara was born in what city that had a population of 7,297 in 2010?"
    st = _bridge_state(q, passages)
    ranked = gen.support(q, passages, st)
    hop = gen.hop(q, ranked, passages, st)
    assert hop is not None and hop.title == "Rockland, Maine" and [p.chunk_id for p in hop.passages] == ["r#0"]
    short, held = gen.short_answer(q, [q], [ranked], [hop])
    assert short == "Rockland, Maine" and held[0] is hop.link
    # no bridge for a yes / no question, a question naming the bridge itself, or with bridge_sentences too few
    assert gen.hop("Was Fiske O'Hara born in Maine?", ranked, passages, st) is None
    assert gen.hop("Which city in Knox County is Rockland, Maine?", ranked, passages, st) is None
    assert gen.hop(q, [], passages, st) is None



@pytest.mark.parametrize("key", ["bridge_sentences", "bridge_cued_sentences", "bridge_names", "bridge_search_k",
                                 "typed_sentences", "measure_sentences"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_bad_bridge_settings_are_refused(key, bad):
    with pytest.raises(ValueError, match=f"generation.extractive.{key}"):
        ExtractiveConfig(**{key: bad})


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_titled_k_is_refused(bad):
    from searchsmith.serving.pipeline.config import RetrievalConfig

    with pytest.raises(ValueError, match="retrieval.titled_k"):
        RetrievalConfig(titled_k=bad)


def test_a_bridge_no_passage_retrieved_is_looked_up_by_its_title(embedder):
    q = "Where was the director of the film When in Rome born?"
    retrieved = [BRIDGE_PASSAGES[0], BRIDGE_PASSAGES[2]]  # the director's passage was not retrieved
    asked = []

    def lookup(name, state):
        asked.append(name)
        return [BRIDGE_PASSAGES[1]] if name == "Mark Steven Johnson" else []

    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False),
                            lookup=lookup)
    st = _bridge_state(q, retrieved)
    stage.run(st, Preset())
    assert st.short_answer == "Hastings" and "Mark Steven Johnson" in asked
    # the passage found joins the answer's passages, so that the citation stage can cite it
    assert [p.chunk_id for p in st.passages] == ["w#0", "k#0", "m#0"] and "m#0" in st.used_passages
    assert "through 'Mark Steven Johnson' (generation.extractive.bridge; 1 passage(s) looked up by title)" in \
        st.trace.stages["generation"].note
    # bridge_lookup off: no lookup, the best sentences' span
    asked.clear()
    off = GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(bridge_lookup=False)), None,
                          GenerationConfig(no_answer_missing_names=False), lookup=lookup)
    st = _bridge_state(q, retrieved)
    off.run(st, Preset())
    assert asked == [] and st.short_answer != "Hastings" and len(st.passages) == 2


def test_a_sentences_fourth_name_is_looked_up_by_default(embedder):
    # the team is the sentence's fourth name, after the park's other name, the city and the state
    q = "What league does the team that uses Dick's Sporting Goods Park play for?"
    park = Passage("d#0", "d", "sport", "Dick's Sporting Goods Park, also known as DSG Park, is a stadium in "
                   "Commerce City, Colorado that is home to the Colorado Rapids soccer team.", 0.9, title="DSG Park")
    rapids = Passage("r#0", "r", "sport", "The Colorado Rapids are a soccer club. The Rapids compete in Major "
                     "League Soccer as a member of the Western Conference.", 0.5, title="Colorado Rapids")
    asked = []

    def lookup(name, state):
        asked.append(name)
        return [rapids] if name == "Colorado Rapids" else []

    st = _answered(embedder, q, [park], lookup=lookup, search=lambda text, k, state: [])
    assert st.short_answer == "Major League Soccer" and asked[-1] == "Colorado Rapids"
    asked.clear()
    st = _answered(embedder, q, [park], ExtractiveConfig(bridge_names=2), lookup=lookup,
                   search=lambda text, k, state: [])
    assert "Colorado Rapids" not in asked and st.short_answer != "Major League Soccer"


def test_who_is_answered_by_a_pronoun_subjects_passage_title(embedder):
    kalam = Passage("k#0", "k", "people", "He was a recipient of several awards, including the Bharat Ratna, "
                    "India's highest civilian honour.", 0.9, title="A. P. J. Abdul Kalam")
    ratna = Passage("b#0", "b", "awards", "The Bharat Ratna is the highest civilian award of the Republic of India.",
                    0.7, title="Bharat Ratna")
    st = _answered(embedder, "Who was given India's highest civilian honor before he became President?",
                   [kalam, ratna], lookup=lambda name, state: [], search=lambda text, k, state: [])
    assert st.short_answer == "A. P. J. Abdul Kalam" and "k#0" in st.used_passages
    assert "the best sentence's subject, its passage's title" in st.trace.stages["generation"].note
    # a sentence stating none of the asked relation is about the bridge, not the answer
    bettany = Passage("p#0", "p", "people", "He is known for his voice role as the Vision in the Marvel films.", 0.9,
                      title="Paul Bettany")
    st = _answered(embedder, "Who is the spouse of the actor that plays Vision in the Marvel films?", [bettany],
                   lookup=lambda name, state: [], search=lambda text, k, state: [])
    assert st.short_answer != "Paul Bettany"
    # bridge off: no subject answer either
    st = _answered(embedder, "Who was given India's highest civilian honor before he became President?",
                   [kalam, ratna], ExtractiveConfig(bridge=False))
    assert st.short_answer != "A. P. J. Abdul Kalam"


def test_a_failing_title_lookup_is_no_bridge_and_is_noted(embedder):
    def lookup(name, state):
        raise RuntimeError("chunk store unreadable")

    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False),
                            lookup=lookup)
    st = _bridge_state("Where was the director of the film When in Rome born?",
                       [BRIDGE_PASSAGES[0], BRIDGE_PASSAGES[2]])
    stage.run(st, Preset())
    assert st.answer_found and st.short_answer != "Hastings" and len(st.passages) == 2
    assert any("title lookup of 'Mark Steven Johnson' failed (RuntimeError: chunk store unreadable)" in n
               for n in st.trace.notes)


KNOPE_PASSAGES = [
    Passage("p#0", "p", "people", "Pamela Reed is an American actress. She has appeared as the mother of main "
            "character Leslie Knope (Amy Poehler) on Parks and Recreation.", 0.9, title="Pamela Reed"),
    Passage("r#0", "r", "places", "Ravenna Park is a public park in Seattle, run by the parks department.", 0.5,
            title="Ravenna Park"),
]
# what the index holds about the bridge: no passage is titled "Amy Poehler"
KNOPE_FOUND = [KNOPE_PASSAGES[0],
               Passage("w#0", "w", "people", "Jon Arnett married Amy Poehler in 2003. They have two sons.", 0.7,
                       title="Jon Arnett"),
               Passage("a#0", "a", "people", "Amy Adams starred in Arrival.", 0.6, title="Amy Adams")]
KNOPE_Q = "Who is the spouse of the actress who plays Leslie Knope on Parks and Recreation?"


def _answered(embedder, query, passages, extractive=None, **where):
    """The state after the generation stage (extractive, no refusal for missing or unnamed names)
    answered ``query`` over ``passages``; ``where``: its ``lookup`` / ``search``."""
    stage = GenerationStage(ExtractiveGenerator(embedder, extractive or ExtractiveConfig()), None,
                            GenerationConfig(no_answer_missing_names=False, no_answer_unnamed=False), **where)
    st = _bridge_state(query, list(passages))
    stage.run(st, Preset())
    return st


def test_a_bridge_no_passage_is_titled_with_is_searched_for(embedder):
    searched = []

    def search(text, k, state):
        searched.append((text, k))
        return KNOPE_FOUND[:k]

    st = _answered(embedder, KNOPE_Q, KNOPE_PASSAGES, lookup=lambda name, state: [], search=search)
    # the name the best sentence gives the question, with the words it leaves unanswered
    assert searched == [("Amy Poehler spouse actress plays", 3)]
    assert st.short_answer == "Jon Arnett"
    # the passage found (not the sentence's own, nor one that does not mention the name) joins, to be cited
    assert [p.chunk_id for p in st.passages] == ["p#0", "r#0", "w#0"] and "w#0" in st.used_passages
    assert "through 'Amy Poehler' (generation.extractive.bridge; 1 passage(s) found by searching for it)" in \
        st.trace.stages["generation"].note
    # bridge_search off: no search, the best sentence's span
    searched.clear()
    st = _answered(embedder, KNOPE_Q, KNOPE_PASSAGES, ExtractiveConfig(bridge_search=False), search=search)
    # (the sentence names her, not her spouse: the role asked is not stated, no answer; it was "Amy Poehler")
    assert searched == [] and st.short_answer == "" and not st.answer_found and len(st.passages) == 2


def test_a_searched_bridge_answers_only_from_sentences_stating_what_is_left(embedder):
    # the passage found mentions the bridge but states no marriage: no answer from it
    found = [Passage("w#0", "w", "people", "Jon Arnett starred beside Amy Poehler in Blades of Glory.", 0.7,
                     title="Jon Arnett")]
    st = _answered(embedder, KNOPE_Q, KNOPE_PASSAGES, search=lambda text, k, state: found)
    assert st.short_answer == "" and not st.answer_found and len(st.passages) == 2  # nor from the link (a spouse)


def test_a_bridge_is_searched_for_by_the_whole_name_its_span_was_cut_from(embedder):
    # the span "Ernst" (the question says "Mach") is part of the name "Ernst Mach": search that
    searched = []
    passages = [Passage("m#0", "m", "science", "The Mach number is named after Austrian physicist Ernst Mach.",
                        0.9, title="Mach number")]
    found = [Passage("v#0", "v", "science", "Vinko Dvorak worked as an assistant to professor Ernst Mach at "
                     "Charles University.", 0.7, title="Vinko Dvorak")]
    st = _answered(embedder, "Who is the employer of the physicist who Mach number is named after?", passages,
                   lookup=lambda name, state: [], search=lambda text, k, state: searched.append(text) or found)
    assert searched and searched[0].startswith("Ernst Mach ") and "v#0" in [p.chunk_id for p in st.passages]


def test_a_date_question_searches_the_name_its_sentence_gives_and_reads_a_lifespan(embedder):
    # "1558" answers nothing of "die": the name "Jon Knoxley" is the bridge, and "(1505–1572)" states it
    searched = []
    passages = [Passage("p#0", "p", "books", "The Quiet Pamphlet is a polemical work by the reformer Jon Knoxley, "
                        "published in 1558.", 0.9, title="The Quiet Pamphlet")]
    found = [Passage("k#0", "k", "people", "Jon Knoxley (1505–1572), a Scot who studied in Geneva, led the "
                     "Reformation in 1560.", 0.7, title="Reformation")]
    st = _answered(embedder, "What year did the author of The Quiet Pamphlet die?", passages,
                   lookup=lambda name, state: [], search=lambda text, k, state: searched.append(text) or found)
    assert searched and searched[0].startswith("Jon Knoxley ") and st.short_answer == "1572"
    # a number question does not search a name: the other settings' pages hold other numbers
    searched.clear()
    passages = [Passage("c#0", "c", "docs", "The cache size setting belongs to the Lumen Server component.", 0.9,
                        title="Lumen configuration")]
    _answered(embedder, "What is the default value of the cache size in Lumen?", passages,
              lookup=lambda name, state: [], search=lambda text, k, state: searched.append(text) or found)
    assert searched == []


def test_no_search_for_what_is_no_name_and_a_failing_search_is_noted(embedder):
    searched = []
    passages = [Passage("g#0", "g", "people", "Alfred Gell was a British social anthropologist.", 0.9,
                        title="Alfred Gell")]
    st = _answered(embedder, "What nationality were the anthropologists Alfred Gell and Edmund Leach?", passages,
                   search=lambda text, k, state: searched.append(text) or [])
    assert st.short_answer == "British" and searched == []  # a nationality is no bridge

    def broken(text, k, state):
        raise RuntimeError("index unreadable")

    st = _answered(embedder, KNOPE_Q, KNOPE_PASSAGES, search=broken)
    assert not st.answer_found and st.short_answer == "" and len(st.passages) == 2  # the link states no spouse
    assert any("bridge search for 'Amy Poehler' failed (RuntimeError: index unreadable)" in n for n in st.trace.notes)


def test_no_search_for_a_name_of_the_asked_type(embedder):
    # the name the sentence gives is what "what political party" asks for: it answers, no bridge
    searched = []
    passages = [Passage("d#0", "d", "people", "He twice ran unsuccessfully for Vice President of the United States "
                        "on the Socialist Party of America ticket.", 0.9, title="Eugene V. Debs")]
    st = _answered(embedder, "What political party was the socialist candidate part of who ran for president?",
                   passages, search=lambda text, k, state: searched.append(text) or KNOPE_FOUND[:k])
    assert searched == [] and st.short_answer == "Socialist Party of America"


SELBERG_PASSAGES = [
    Passage("h#0", "h", "people", "Henrik Selberg (1906 - 1993) was a Norwegian mathematician. He was born in "
            "Langesund.", 0.9, title="Henrik Selberg"),
    Passage("o#0", "o", "people", "Ole Selberg (1877 - 1950) was a Norwegian mathematician. He was born in Flora. "
            "He was the father of Sigmund, Arne, Henrik and Atle Selberg.", 0.8, title="Ole Selberg"),
    Passage("s#0", "s", "people", "Sigmund Selberg was a Norwegian engineer. He was born in Bergen.", 0.7,
            title="Sigmund Selberg"),
]


def test_a_sentence_stating_the_kin_asked_through_makes_its_own_passage_the_bridge(embedder):
    st = _answered(embedder, "What is the place of birth of Henrik Selberg's father?", SELBERG_PASSAGES,
                   ExtractiveConfig(bridge_sentences=3))
    # the father's passage says "father of ... Henrik ... Selberg": its birthplace, not a name the sentence gives
    assert st.short_answer == "Flora"
    assert "through 'Ole Selberg'" in st.trace.stages["generation"].note


WEBB_PASSAGES = [
    Passage("c#0", "c", "films", "The Golden Calf is a 1930 American comedy film directed by Millard Webb.", 0.9,
            title="The Golden Calf (1930 film)"),
    Passage("w#0", "w", "people", "Millard Webb was an American screenwriter and film director. He directed 20 "
            "films between 1920 and 1933. His best-known film is The Sea Beast, costarring Dolores Costello. "
            "In 1929 he married the dancer Mary Eaton.", 0.6, title="Millard Webb"),
]


def test_a_bridges_sentence_stating_the_asked_relation_is_read(embedder, monkeypatch):
    # "spouse": the director's passage says "married", in a sentence that its cosine ranks last
    q = "Who is the spouse of the director of film The Golden Calf?"
    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False))
    st = _bridge_state(q, WEBB_PASSAGES)
    stage.run(st, Preset())
    assert st.short_answer == "Mary Eaton"
    assert "In 1929 he married the dancer Mary Eaton." in st.support
    import searchsmith.models.text as text

    monkeypatch.setattr(text, "RELATION_CUES", {})  # without the cues: the bridge's best sentences alone
    st = _bridge_state(q, WEBB_PASSAGES)
    stage.run(st, Preset())
    assert st.short_answer != "Mary Eaton"


def test_a_short_answers_sentence_cites_the_sentence_it_was_read_from(embedder):
    passages = [
        Passage("w#0", "w", "people", "Millard Webb married the dancer Mary Eaton in 1929.", 0.9, title="Millard Webb"),
        Passage("e#0", "e", "people", "Mary Eaton was an American actress, singer and dancer.", 0.8,
                title="Mary Eaton"),
    ]
    st = one_node_state("Who did Millard Webb marry?", passages)
    st.answer, st.short_answer = "Mary Eaton. Millard Webb married the dancer Mary Eaton in 1929.", "Mary Eaton"
    st.support = ["Millard Webb married the dancer Mary Eaton in 1929."]
    CitationStage(embedder, CitationConfig()).run(st, Preset())
    lead, held = st.sentences
    # alone, the bare name is closest to the passage about Mary Eaton, which the answer was not read from
    assert [c["chunk_id"] for c in lead["citations"]] == [c["chunk_id"] for c in held["citations"]] == ["w#0"]
    assert st.cited_answer.startswith("Mary Eaton [1]. Millard Webb married")
    # a first sentence that is more than the short answer is looked back as any other
    st.answer = "Mary Eaton was a dancer. Millard Webb married the dancer Mary Eaton in 1929."
    CitationStage(embedder, CitationConfig()).run(st, Preset())
    assert st.sentences[0]["citations"][0]["chunk_id"] == "e#0"


def test_lead_cites_support_keeps_what_it_cannot_match():
    from searchsmith.serving.pipeline.citation import SentenceCitations, lead_cites_support

    found = [SentenceCitations("Mary Eaton.", [], [(1, 0.7)], quotes=("q1",)),
             SentenceCitations("He married Mary Eaton.", [], [(0, 0.9)], quotes=("q0",))]
    assert lead_cites_support(found, "Mary Eaton")[0].citations == [(0, 0.9)]
    assert lead_cites_support(found, "Mary Eaton")[0].quotes == ("q0",)
    assert lead_cites_support(found, "") == found  # no short answer
    assert lead_cites_support(found, "Dolores Costello") == found  # not the first sentence
    uncited = [found[0], SentenceCitations("He married Mary Eaton.", [], [])]
    assert lead_cites_support(uncited, "Mary Eaton") == uncited  # no cited sentence holds it
    assert lead_cites_support([], "Mary Eaton") == []


def test_short_support_holding_keeps_the_sentences_that_hold_the_short_answer(embedder):
    passages = [
        Passage("a#0", "a", "docs", "By default the Quarry server listens on port 7420.", 0.9, title="Quarry"),
        Passage("b#0", "b", "docs", "By default the Quarry server listens on every network interface.", 0.8,
                title="Quarry network"),
    ]
    q = "On which port does the Quarry server listen by default?"
    cfg = GenerationConfig(no_answer_missing_names=False)
    st = one_node_state(q, passages)
    GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(short_support="selected")), None, cfg).run(
        st, Preset())
    assert st.short_answer == "7420" and len(st.support) == 2  # selected: both sentences
    st = one_node_state(q, passages)
    GenerationStage(ExtractiveGenerator(embedder), None, cfg).run(st, Preset())  # holding, the default
    assert st.short_answer == "7420"
    assert st.support == ["By default the Quarry server listens on port 7420."] and st.used_passages == ["a#0"]
    assert st.answer == "7420. By default the Quarry server listens on port 7420."


@pytest.mark.parametrize("bad", ["all", "", None, 1])
def test_bad_short_support_is_refused(bad):
    with pytest.raises(ValueError, match="generation.extractive.short_support"):
        ExtractiveConfig(short_support=bad)


def test_a_question_its_best_sentence_answers_takes_no_bridge(embedder):
    # "Who directed When in Rome?": every word of the question is in the best sentence
    asked = []
    stage = GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(no_answer_missing_names=False),
                            lookup=lambda name, state: asked.append(name) or [])
    st = _bridge_state("Who directed the 2010 film When in Rome?")
    stage.run(st, Preset())
    assert st.short_answer == "Mark Steven Johnson" and asked == []
    assert "bridge" not in st.trace.stages["generation"].note


def test_the_pipeline_searches_a_bridge_in_the_routed_sources(make_pipeline):
    # the generation stage's search is the retriever's: the chunks closest to the text, in the
    # sources routing chose (every source of the index when it chose none)
    pipe = make_pipeline()
    search = pipe.generation.search
    routed = PipelineState(query="q", rewrite="q")
    routed.sources = ["astronomy"]
    text = "sourdough bread and its starter"
    found = search(text, 2, routed)  # a cooking text, but astronomy was routed to
    assert len(found) == 2 and {p.source for p in found} == {"astronomy"}
    everywhere = search(text, 3, PipelineState(query="q", rewrite="q"))
    assert len(everywhere) == 3 and "cooking" in {p.source for p in everywhere}
    # the search for an unstated relation (relation_search) reads every source, routed or not
    found = pipe.generation.search_all(text, 2, routed)
    assert len(found) == 2 and "cooking" in {p.source for p in found}


def test_a_sentence_is_read_in_its_passage_titled_with_what_it_is_about(embedder):
    # a sentence about each of two outages: the passage titled with the asked one answers
    q = "Which error did clients see during the Kestrel Cloud outage?"
    passages = [
        Passage("q#0", "q", "news", "During the outage clients saw `QRY-112` errors.", 0.9,
                title="Quarry Cloud outage in us-east"),
        Passage("k#0", "k", "news", "Clients saw `KST-502` errors until engineers intervened.", 0.8,
                title="Kestrel Cloud outage in global"),
    ]
    state = PipelineState(query=q, rewrite=q)
    best = ExtractiveGenerator(embedder).support(q, passages, state)[0]
    assert "KST-502" in best.text and best.chunk_ids == ("k#0",)
    untitled = ExtractiveGenerator(embedder, ExtractiveConfig(title_words=False))
    assert "QRY-112" in untitled.support(q, passages, PipelineState(query=q, rewrite=q))[0].text


NEPTUNE = [
    Passage("n#0", "n", "encyclopedia", "Neptune is the eighth planet from the Sun. Neptune was discovered by "
            "Johann Galle on 23 September 1846. One orbit of the Sun takes Neptune 165 Earth years.", 0.9,
            title="Neptune"),
    Passage("u#0", "u", "encyclopedia", "Uranus is the seventh planet. One orbit of the Sun takes Uranus 84 "
            "Earth years.", 0.5, title="Uranus"),
]


def test_the_best_sentences_own_passage_is_the_bridge_when_it_names_its_subject(embedder):
    # the best sentence names the planet the question describes; its own passage says who discovered it
    q = "Who discovered the planet that takes 165 Earth years to orbit the Sun?"
    st = _answered(embedder, q, NEPTUNE)
    assert st.short_answer == "Johann Galle"
    off = _answered(embedder, q, NEPTUNE, ExtractiveConfig(bridge_own=False))
    assert off.short_answer != "Johann Galle"
    # a question that names the passage's subject has no such bridge: its sentence answers it
    assert _answered(embedder, "How many Earth years does one orbit of the Sun take Neptune?",
                     NEPTUNE).short_answer == "165"


PLANETS = [
    Passage("m#0", "m", "encyclopedia", "Mars is the fourth planet from the Sun. It is 6,779 km across and orbits "
            "at an average distance of 1.52 astronomical units. One orbit of the Sun takes Mars 687 Earth days.",
            0.9, title="Mars"),
    Passage("e#0", "e", "encyclopedia", "Earth is the third planet from the Sun. It is 12,742 km across and orbits "
            "at an average distance of 1.00 astronomical units.", 0.5, title="Earth"),
]


def test_a_figure_of_the_asked_dimension_in_the_questions_own_passages_takes_no_bridge(embedder):
    # "687 Earth days" names the passage on Earth; the question's own passage states the distance
    st = _answered(embedder, "How far from the Sun does Mars orbit on average?", PLANETS)
    assert st.short_answer == "1.52 astronomical units"


OUTAGE = Passage("o#0", "o", "news", "On 18 July 2024, Lumen Cloud customers in eu-west lost service. Clients saw "
                 "`LUM-310` errors until engineers intervened.", 0.9, title="Lumen Cloud outage in eu-west")
# what the index holds on the bridge: the page about it, and news that mentions it and "the fix"
LUM_FOUND = [Passage("d#0", "d", "docs", "Lumen reports `LUM-310 snapshot write stalled` when the disk could not keep "
                     "up. To fix it, raise snapshot.interval_s or move the snapshot directory to a faster disk.", 0.8,
                     title="Troubleshooting LUM-310: snapshot write stalled"),
             Passage("n#0", "n", "news", "The Lumen Cloud outage ended with requests failing with `LUM-310`. Version "
                     "4.0.2 contains the fix, the company said.", 0.7, title="Brightline explains Lumen Cloud outage")]
HOW_Q = "How do you fix the error that clients saw during the Lumen Cloud outage?"


def test_how_to_do_something_to_a_described_thing_goes_through_its_bridge(embedder):
    searched = []
    st = _answered(embedder, HOW_Q, [OUTAGE], lookup=lambda name, state: [],
                   search=lambda text, k, state: searched.append(text) or [OUTAGE, *LUM_FOUND])
    # searched for as asked of the bridge; the page titled with its name says how, after the naming sentence
    assert searched == ["How do you fix LUM-310"]
    assert st.answer.startswith("Clients saw `LUM-310` errors until engineers intervened. To fix it, raise "
                                "snapshot.interval_s")
    assert st.short_answer == "" and "d#0" in st.used_passages
    assert "through 'LUM-310'" in st.trace.stages["generation"].note
    # bridge_how off: the question's own best sentences only, no search
    searched.clear()
    st = _answered(embedder, HOW_Q, [OUTAGE], ExtractiveConfig(bridge_how=False), lookup=lambda name, state: [],
                   search=lambda text, k, state: searched.append(text) or LUM_FOUND)
    assert searched == [] and "raise snapshot.interval_s" not in st.answer
    # a bridge whose passages state no such thing adds nothing
    seen = [dataclasses.replace(LUM_FOUND[1], text="The outage ended with requests failing with `LUM-310`.")]
    st = _answered(embedder, HOW_Q, [OUTAGE], lookup=lambda name, state: [], search=lambda text, k, state: seen)
    assert "ended with requests" not in st.answer and st.answer_found and "through" not in \
        st.trace.stages["generation"].note


def test_a_sentence_stating_the_asked_relation_names_the_bridge_below_the_best(embedder):
    # "developed by Calloway Data" states "the maker of Marlowe" but ranks below the repository's sentence
    passages = [Passage("m#0", "m", "docs", "The Marlowe repository is at https://git.example.com/calloway/marlowe. "
                        "Marlowe 2.6.1 is out. Marlowe is a full-text search engine developed by Calloway Data.", 0.9,
                        title="Marlowe overview")]
    found = [Passage("n#0", "n", "news", "Northwind Labs announced on 3 June 2025 that it has acquired Calloway Data, "
                     "the Toronto company behind Marlowe.", 0.7, title="Northwind Labs acquires Calloway Data")]
    q = "Which company acquired the maker of Marlowe?"
    gen = ExtractiveGenerator(embedder, ExtractiveConfig(bridge_sentences=1))
    st = _bridge_state(q, passages)
    ranked = gen.support(q, passages, st)
    assert "developed by" not in ranked[0].text  # below the best, which names no bridge
    searched = []

    def search(text, k, state):
        searched.append(text)
        return found if "Calloway" in text else []

    hop = gen.hop(q, ranked, passages, st, lookup=lambda name, state: [], search=search)
    assert hop is not None and hop.title == "Calloway Data" and "developed by" in hop.link.text
    assert gen.short_answer(q, [q], [ranked], [hop])[0] == "Northwind Labs"
    # sought no deeper than bridge_cued_sentences: the best sentence alone names none
    shallow = ExtractiveGenerator(embedder, ExtractiveConfig(bridge_sentences=1, bridge_cued_sentences=1))
    assert shallow.hop(q, ranked, passages, st, lookup=lambda name, state: [], search=search) is None
    # and the repository's address answers no "Which company ...?"
    assert "git.example.com" not in shallow.short_answer(q, [q], [ranked], [None])[0]


def test_a_sentence_leading_to_a_sibling_code_is_no_bridge(embedder):
    """The demo, before: "How do I fix FRW-118?" quoted FRW-402's fix ("wait for the rebalance
    to finish"), through "Ferrow's error codes (FRW-118 and FRW-402) are defined in ..."."""
    codes = Passage("c#0", "c", "code", "Ferrow's error codes (FRW-118 and FRW-402) are defined in "
                    "`ferrow/src/error.rs`.", 0.9, title="Ferrow error codes in the source")
    outage = Passage("n#0", "n", "news", "Clients saw `FRW-118` errors until engineers intervened.", 0.8,
                     title="Ferrow Cloud outage in ap-south")
    other = Passage("o#0", "o", "docs", "To fix it, wait for the rebalance to finish.", 0.7,
                    title="FRW-402")
    asked = []

    def lookup(name, state):
        asked.append(name)
        return [other] if name == "FRW-402" else []

    st = _answered(embedder, "How do I fix FRW-118?", [codes, outage], lookup=lookup)
    assert "FRW-402" in asked  # the sentence's name is looked up, and leads to a sibling
    assert "through" not in st.trace.stages["generation"].note  # was "through 'FRW-402'"
    assert "wait for the rebalance" not in st.answer


FRW_OUTAGE = "Clients saw `FRW-118` errors until engineers intervened."
FRW_NAMED = "Ferrow reports `FRW-118 not leader for partition` when the client sent a request to a stale broker."
FRW_FIX = "To fix it, let the client refresh its metadata; it retries on the new leader automatically."
FRW_PAGE = "Troubleshooting FRW-118: not leader for partition"


def test_how_to_do_something_to_a_named_thing_is_answered_from_its_own_page(embedder):
    """Tried as a new user, before: "How do I fix FRW-118?" quoted the news that clients saw the
    code and where it is defined; the page titled with the code says how to fix it."""
    gen = ExtractiveGenerator(embedder)
    ranked = [Support(0.8, FRW_OUTAGE, ("n#0",), "Ferrow Cloud outage in ap-south"),
              Support(0.7, "The fix shipped in Ferrow 1.5.3.", ("n#0",), "Ferrow Cloud outage in ap-south"),
              Support(0.66, FRW_NAMED, ("d#0",), FRW_PAGE), Support(0.65, FRW_FIX, ("d#0",), FRW_PAGE)]
    q = "How do I fix FRW-118?"
    assert gen.how_own(q, ranked) == [ranked[2], ranked[3]]
    assert gen.short_answer(q, [q], [ranked]) == ("", [ranked[2], ranked[3]])
    # another code's page, a question asking no way, or the page's sentence already first: nothing
    assert gen.how_own("How do I fix FRW-402?", ranked) == []
    # a description of it is led by its page's sentence naming it (extractive.own_description)
    assert gen.how_own("What is FRW-118?", ranked) == [ranked[2]]
    assert ExtractiveGenerator(embedder, ExtractiveConfig(own_description=False)).how_own("What is FRW-118?",
                                                                                         ranked) == []
    assert gen.how_own(q, [ranked[3], *ranked[:3]]) == []
    off = ExtractiveGenerator(embedder, ExtractiveConfig(how_own=False))
    assert off.short_answer(q, [q], [ranked]) == ("", [])


def test_a_setting_named_by_its_words_is_answered_by_its_default(embedder):
    passages = [Passage("o#0", "o", "news", "On 18 July 2024, Lumen Cloud customers in eu-west lost service for "
                        "3 hours 20 minutes.", 0.9, title="Lumen Cloud outage in eu-west"),
                Passage("s#0", "s", "docs", "The `snapshot.interval_s` setting controls how often every shard "
                        "writes a snapshot to disk. It belongs to the snapshots part of Lumen. Default: `300`. "
                        "Allowed values: 10 to 86400.", 0.8, title="Configuring Lumen: snapshot.interval_s")]
    for q in ["lumen snapshot interval", "What is the Lumen snapshot interval?"]:
        st = _answered(embedder, q, passages)
        assert st.short_answer == "300", (q, st.short_answer)
        assert st.answer.startswith("300.") and "Default: `300`." in st.support
        off = _answered(embedder, q, passages, ExtractiveConfig(named_settings=False))
        assert off.short_answer != "300", q


def test_a_relation_no_selected_sentence_states_is_searched_for_in_every_source(embedder):
    """The audit set, before: "Who makes Ferrow?" was routed away from the product docs, and its
    sentences (a repository, release notes) state no maker: "no answer"."""
    passages = [Passage("r#0", "r", "code_notes", "The Ferrow repository is at https://git.example.com/calloway/ferrow.",
                        0.9, title="Ferrow repository layout"),
                Passage("n#0", "n", "news", "It follows Ferrow 1.0, released in March 2022.", 0.8, title="Ferrow 1.5")]
    overview = Passage("o#0", "o", "product_docs", "Ferrow is a message broker developed by Calloway Data. "
                       "It stores streams of events.", 0.5, title="Ferrow overview")
    searched = []

    def search_all(text, k, state):
        searched.append(text)
        return [overview]

    st = _answered(embedder, "Who makes Ferrow?", passages, search_all=search_all)
    assert searched and searched[0].startswith("Ferrow ") and "made" in searched[0].split()
    assert st.short_answer == "Calloway Data" and st.support == ["Ferrow is a message broker developed by Calloway Data."]
    assert "o#0" in [p.chunk_id for p in st.passages] and st.used_passages == ["o#0"]
    assert "generation.extractive.relation_search" in st.trace.stages["generation"].note
    # off, or nothing found stating it: no answer, as before
    off = _answered(embedder, "Who makes Ferrow?", passages, ExtractiveConfig(relation_search=False), search_all=search_all)
    assert not off.answer_found
    none = _answered(embedder, "Who makes Ferrow?", passages, search_all=lambda text, k, state: passages[:1])
    assert not none.answer_found
    # a sentence stating the relation but not the question's other words answers nothing (the
    # noans set, before: "Who designed the Kestrel logo?" got "YAML")
    design = Passage("k#0", "k", "product_docs", "Kestrel is designed to run unattended, and its configuration is "
                     "a single YAML file.", 0.5, title="Kestrel overview")
    logo = _answered(embedder, "Who designed the Kestrel logo?", passages, search_all=lambda text, k, state: [design])
    assert not logo.answer_found
