"""The extractive answer says "No answer found in the sources." when the sources hold none,
and does not read a name into a description. Before (the demo, 2026-12-07):

* "Who founded Brightline Systems?" was answered "Series C", read in a sentence on its funding
  round; "How long should bread dough be kneaded?" "2 hours", read in "... a wet dough and rise
  for 2 hours"; "How many employees does Northwind Labs have?" "$120": a sentence that does
  not state the asked relation (the doer's verb, the counted noun, the final verb) answers none
  of these now (``models.text.asked_relation``);
* "What is the boiling point of water?" got two sentences on boiling miso: a question asking for
  a date, number or name whose passages hold none gets the no-answer text
  (``generation.extractive.no_span_no_answer``);
* "What is Lumen?" was answered "Brightline Systems" and "What does Kestrel do?" "API": a
  description is asked (``models.text.asks_description``), answered by its sentence.
"""

from __future__ import annotations

import pytest
from one_node import one_node_state
from searchsmith.models.text import (
    answer_kind,
    asked_relation,
    asks_description,
    states_relation,
    typed_span,
)
from searchsmith.serving.pipeline.config import ExtractiveConfig, GenerationConfig, Preset
from searchsmith.serving.pipeline.generation import ExtractiveGenerator, GenerationStage
from searchsmith.serving.pipeline.state import Passage, PipelineState

FUNDING = "Brightline Systems raised $40 million in a Series C round led by Longhorn Capital."
DOUGH = "Mix the flour, yeast, salt and water into a wet dough and rise for 2 hours."
MISO = "Tip: boiling miso dulls its aroma. Heat the dashi without boiling it."
LUMEN = "Lumen is an in-memory cache made by Brightline Systems."
KESTREL = "Kestrel is an API gateway made by Harbor & Finch."


def _ask(embedder, query: str, texts: list[str], **extractive) -> PipelineState:
    passages = [Passage(f"p{i}#0", f"p{i}", "docs", t, 0.9 - i / 10, title=f"P{i}") for i, t in enumerate(texts)]
    st = one_node_state(query, passages)
    GenerationStage(ExtractiveGenerator(embedder, ExtractiveConfig(**extractive)), None,
                    GenerationConfig(no_answer_missing_names=False)).run(st, Preset())
    return st


@pytest.mark.parametrize(("question", "text"), [
    ("Who founded Brightline Systems?", FUNDING),
    ("Where is Brightline Systems headquartered?", FUNDING),
    ("How long should bread dough be kneaded?", DOUGH),
    ("How many employees does Brightline Systems have?", FUNDING),
])
def test_a_sentence_that_does_not_state_the_asked_relation_answers_nothing(embedder, question, text) -> None:
    assert asked_relation(question) and not states_relation(asked_relation(question), text)
    assert typed_span(question, [text]) == ""
    st = _ask(embedder, question, [text])
    assert not st.answer_found and st.answer == "No answer found in the sources." and st.short_answer == ""
    assert "generation.extractive.no_span_no_answer" in st.trace.stages["generation"].note
    # off: the sentences, as before (no short answer: none is read in them)
    off = _ask(embedder, question, [text], no_span_no_answer=False)
    assert off.answer_found and off.answer == text and off.short_answer == ""


def test_a_sentence_stating_the_relation_still_answers(embedder) -> None:
    founded = "Brightline Systems was founded by Mara Quint in Austin in 2009."
    st = _ask(embedder, "Who founded Brightline Systems?", [FUNDING, founded])
    assert st.short_answer == "Mara Quint" and st.support[0] == founded
    assert _ask(embedder, "How many moons does Neptune have?", ["Neptune has 16 known moons."]).short_answer == "16"
    assert typed_span("How long should focaccia dough rise?", [DOUGH]) == "2 hours"  # no final "-ed" verb asked
    # inflections and the relation's cue words state it ("founder" for founded)
    assert states_relation(asked_relation("Who founded Brightline Systems?"), "Its founder, Mara Quint, ...")
    assert asked_relation("When did Kestrel 2 ship?") == []  # a date's verb is said many ways: no check


def test_a_bridges_name_is_read_in_the_sentence_that_names_it() -> None:
    """The sentence naming a bridge ("Brightline Systems released Lumen 4.0") states no
    acquisition: ``stated=False`` reads it (the pipeline's bridge search), the answer does not."""
    link = "Brightline Systems released Lumen 4.0 on 2024-05-28."
    q = "Which company acquired the maker of Lumen?"
    assert typed_span(q, [link], fallback=False) == ""
    assert typed_span(q, [link], fallback=False, stated=False) == "Brightline Systems"


def test_a_span_question_whose_passages_hold_no_span_gets_no_answer(embedder) -> None:
    st = _ask(embedder, "What is the boiling point of water?", [MISO])
    assert not st.answer_found and st.answer == "No answer found in the sources."
    assert "no answer: the question asks for a name" in st.trace.stages["generation"].note
    # a question asking no span keeps its sentences: how to do something, yes / no
    how = _ask(embedder, "How do you heat the dashi?", [MISO])
    assert how.answer_found and "dashi" in how.answer


@pytest.mark.parametrize(("question", "text"), [
    ("What is Lumen?", LUMEN),
    ("What does Kestrel do?", KESTREL),
    ("What is a Turing machine?", "A Turing machine is an abstract machine that reads and writes symbols on a tape."),
    ("What happened during the Quarry Cloud outage?",
     "A compaction bug rewrote sealed segments in place during the Quarry Cloud outage."),
])
def test_a_description_is_answered_by_its_sentence_not_a_name_in_it(embedder, question, text) -> None:
    assert asks_description(question) and answer_kind(question) == "OTHER"
    st = _ask(embedder, question, [text])
    assert st.answer_found and st.short_answer == "" and st.answer == text


@pytest.mark.parametrize("question", ["What is the capital of France?", "What is the largest planet?",
                                      "What is the default value of snapshot.interval_s in Lumen?",
                                      "What is Quarry written in?", "What is the Book of Healing referred to as?"])
def test_questions_asking_for_a_name_or_value_are_no_descriptions(question) -> None:
    assert not asks_description(question) and answer_kind(question) in ("ENT", "NUM")


def _answer(found: bool, text: str) -> dict:
    return {"answer_found": found, "answer_text": text, "short_answer": "", "references": [], "passages": [],
            "timeline": [], "images": [], "trace": {"model_calls": 1, "tokens_in": 10, "tokens_out": 0, "total_ms": 5.0}}


def test_eval_scores_a_question_the_sources_do_not_answer() -> None:
    """``"answer": null`` in pipeline data: no answer is the right answer (SQuAD 2.0's rule)."""
    from searchsmith.serving.evaluate import pipeline_item_metrics

    item = {"query": "Who founded Brightline Systems?", "answer": None, "supporting": []}
    said = pipeline_item_metrics(_answer(False, "No answer found in the sources."), item)
    assert said["no_answer"] == said["f1"] == said["text_f1"] == said["contains"] == 1.0
    assert "support_recall" not in said and "citation_precision" not in said and said["model_calls"] == 1.0
    wrong = pipeline_item_metrics(_answer(True, "Series C."), item)
    assert wrong["no_answer"] == wrong["f1"] == 0.0
    # an answerable question: whether it was answered at all
    gold = {"query": "Who discovered Uranus?", "answer": "William Herschel", "supporting": ["u"]}
    assert pipeline_item_metrics(_answer(True, "William Herschel discovered it."), gold)["answered"] == 1.0
    missed = pipeline_item_metrics(_answer(False, "No answer found in the sources."), gold)
    assert missed["answered"] == 0.0 and "no_answer" not in missed


def test_the_answer_says_whether_it_was_found(make_pipeline) -> None:
    pipe = make_pipeline()
    assert pipe.ask("Which planet is the largest?")["answer_found"] is True
    gone = pipe.ask("What is the capital of France?")
    assert gone["answer_found"] is False and gone["answer_text"] == "No answer found in the sources."


def test_eval_pipeline_reads_questions_without_an_answer(small_index, tmp_path) -> None:
    import argparse
    import json

    from searchsmith.serving.evaluate import eval_pipeline

    data = tmp_path / "qa.jsonl"
    rows = [{"id": "a", "query": "Which planet is the largest?", "answer": "Jupiter", "supporting": ["astronomy-0"]},
            {"id": "n", "query": "What is the capital of France?", "answer": None, "supporting": []}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = eval_pipeline(argparse.Namespace(data=str(data), index=str(small_index), config=None, limit=0,
                                           per_item=None))
    assert out["n"] == 2 and out["no_answer"] == 1.0 and out["answered"] == 1.0 and out["f1"] > 0.5
    assert out["support_recall"] == 1.0  # over the answerable question alone
    data.write_text(json.dumps({"id": "x", "query": "Q?", "answer": True, "supporting": []}) + "\n")
    with pytest.raises(Exception, match=r"'answer' must be a string \(the gold answer\), or null"):
        eval_pipeline(argparse.Namespace(data=str(data), index=str(small_index), config=None, limit=0, per_item=None))


def test_what_a_code_means_is_a_description_and_a_papers_author_wrote_it(embedder) -> None:
    assert answer_kind("What does KST-429 mean?") == "OTHER" and answer_kind("What does Lumen stand for?") == "ENT"
    turing = ("Alan Turing (1912 to 1954) was an English mathematician whose 1936 paper 'On Computable Numbers' "
              "described the abstract machine.")
    assert typed_span("Who wrote On Computable Numbers?", [turing]) == "Alan Turing"  # "paper" states authorship


def test_a_sentence_on_another_version_answers_nothing_of_the_asked_one(embedder) -> None:
    """"When was Ferrow 1.5 released?" was answered "March 2022" from "It follows Ferrow 1.0,
    released in March 2022."; "When was Beacon 3.0 released?" (no such release) "January 2021"
    (helper-53's audit)."""
    from searchsmith.models.text import names_asked_version, other_version

    older = "It follows Ferrow 1.0, released in March 2022."
    asked = "Calloway Data released Ferrow 1.5 on September 27, 2023."
    q = "When was Ferrow 1.5 released?"
    assert other_version(q, older) == "Ferrow 1.5" and not other_version(q, asked) and names_asked_version(q, asked)
    assert other_version("When did Kestrel 2 ship?", "Harbor & Finch released Kestrel 2.0 on 2021-12-07.") == ""
    assert typed_span(q, [older]) == "" and typed_span(q, [older, asked]) == "September 27, 2023"
    # in the pipeline: the asked version's sentence found below the selected ones, or no answer
    got = _ask(embedder, q, [f"{older} {asked}"], sentences_per_node=1)
    assert got.short_answer == "September 27, 2023" and got.support == [asked]
    none = _ask(embedder, "When was Beacon 3.0 released?", ["It follows Beacon 1.0, released in January 2021.",
                                                              "Harbor & Finch released Kestrel 3.0 on 2024-10-15."])
    assert not none.answer_found and "'Beacon 3.0'" in none.trace.stages["generation"].note


def test_a_doers_nouns_state_it_and_a_default_is_read_on_its_own_line() -> None:
    # "Who makes X?" is stated by "developed by" (the cue words of "maker")
    assert typed_span("Who makes Ferrow?", ["Ferrow is a message broker developed by Calloway Data."]) == "Calloway Data"
    q = "How many brokers keep a copy of each Ferrow partition by default?"
    assert asked_relation(q) == []  # "Default: `3`." names no broker
    assert typed_span(q, ["The `replication.factor` setting controls how many brokers hold a copy of each "
                          "partition.", "Default: `3`."]) == "3"


def _titled(embedder, query: str, docs: list[tuple[str, str]], **generation) -> PipelineState:
    passages = [Passage(f"p{i}#0", f"p{i}", "news", text, 0.9 - i / 10, title=title)
                for i, (title, text) in enumerate(docs)]
    st = one_node_state(query, passages)
    GenerationStage(ExtractiveGenerator(embedder), None, GenerationConfig(**generation)).run(st, Preset())
    return st


QUARRY_OUTAGE = ("Northwind Labs explains Quarry Cloud outage",
                 "Northwind Labs has published the post-mortem of the 2 hours Quarry Cloud outage that hit the "
                 "us-east region on 2025-01-09.")
ATLASGRID_PRICE = ("How much does Atlasgrid Cloud cost?",
                   "Atlasgrid Cloud costs $25 per month on the Starter plan.")


def test_an_answer_drawn_from_a_passage_about_another_thing_is_no_answer(embedder) -> None:
    """The demo, before: "How long did the Atlasgrid Cloud outage last?" was answered "2 hours",
    read in the Quarry Cloud post-mortem (no source tells of an Atlasgrid outage; a price page
    naming Atlasgrid Cloud was retrieved, so no name of the question was missing)."""
    q = "How long did the Atlasgrid Cloud outage last?"
    st = _titled(embedder, q, [QUARRY_OUTAGE, ATLASGRID_PRICE])
    assert not st.answer_found and st.answer == "No answer found in the sources." and st.short_answer == ""
    assert "generation.no_answer_off_subject" in st.trace.stages["generation"].note
    assert "'Atlasgrid Cloud'" in st.trace.stages["generation"].note
    off = _titled(embedder, q, [QUARRY_OUTAGE, ATLASGRID_PRICE], no_answer_off_subject=False)
    assert off.answer_found and off.short_answer == "2 hours"  # as before
    # the outage's own passage answers
    own = ("Atlasgrid Cloud outage in eu-west", "Atlasgrid Cloud customers in eu-west lost service for 3 hours.")
    st = _titled(embedder, q, [own, QUARRY_OUTAGE, ATLASGRID_PRICE])
    assert st.answer_found and st.short_answer == "3 hours"


def test_a_passage_whose_title_names_nothing_else_still_answers(embedder) -> None:
    """A help page does not repeat its product's name: "Do you offer phone support?" answers
    "Does Stackyard offer phone support?" (the audit set's question, answered before)."""
    faq = ("Do you offer phone support?", "Phone support is included with the Enterprise plan.")
    other = ("Stackyard overview", "Stackyard is a cloud platform for hosted databases.")
    st = _titled(embedder, "Does Stackyard offer phone support?", [faq, other])
    assert st.answer_found and "Phone support is included" in st.answer
    assert GenerationStage.off_subject(st, ["p0#0"]) == []


def test_a_short_form_beside_other_names_is_no_subject(embedder) -> None:
    """The audit set, before: "What is the minimum TLS version Lumen accepts?" quoted Kestrel's
    TLS page, which names "TLS" (a name of the question) and not Lumen."""
    kestrel = ("Configuring Kestrel: tls.min_version",
               "The `tls.min_version` setting controls the oldest TLS version accepted from clients.")
    lumen = ("Lumen overview", "Lumen is an in-memory cache made by Brightline Systems.")
    st = _titled(embedder, "What is the minimum TLS version Lumen accepts?", [kestrel, lumen])
    assert GenerationStage.off_subject(st, ["p0#0"]) == ["Lumen"]
    assert GenerationStage.off_subject(st, ["p1#0"]) == []
    # the short form alone is the subject still
    alone = _titled(embedder, "What does TLS stand for?", [kestrel, lumen])
    assert GenerationStage.off_subject(alone, ["p0#0"]) == []


def test_how_long_a_state_lasts_needs_a_sentence_stating_it() -> None:
    """The audit set, before: "How long is a password reset link valid?" was answered "10
    minutes" (another duration of the product), and the demo's "How long is a Kestrel access
    token valid?" "47 minutes" (an outage's): "valid" is the state asked about
    (``asked_relation``), and "one hour" is a duration ("one" counts before a unit of time)."""
    q = "How long is a Kestrel access token valid?"
    outage = "On 2 November 2023, Kestrel Cloud customers in global lost service for 47 minutes."
    assert asked_relation(q) and not states_relation(asked_relation(q), outage)
    assert typed_span(q, [outage]) == ""
    assert typed_span("How long is a password reset link valid?",
                      ["The reset link is valid for one hour.", "Exports finish within 10 minutes."]) == "one hour"
    assert typed_span("How long do access tokens stay valid?", ["Access tokens expire after 15 minutes."]) == "15 minutes"
    # "one" before no unit of time is no count
    assert typed_span("How many parliaments are older?", ["It is one of the oldest parliaments."]) == ""


def test_a_role_asked_of_a_name_must_be_stated() -> None:
    """The demo, before: "Who is the chief executive of Northwind Labs?" was answered
    "Atlasgrid", and the audit's "Who is the chief product officer of Calloway Data?" "Priya
    Raman-led", read in a sentence naming her chief executive officer: each word of the asked
    role (or its cue words: "married" for "spouse") must be stated."""
    ceo = "Calloway Data names Priya Raman chief executive officer."
    assert typed_span("Who is the chief product officer of Calloway Data?", [ceo]) == ""
    assert typed_span("Who is the chief executive officer of Calloway Data?", [ceo]) == "Priya Raman"
    # a one-word role is checked only with words it is stated by (a band is "fronted by" its "main vocal")
    assert asked_relation("Who was the main vocal of Snow Patrol?") == []
    assert typed_span("Who was the director of Titanic?", ["Titanic is a 1997 film directed by James Cameron."]) \
        == "James Cameron"
    assert typed_span("Who is the spouse of Ann Lee?", ["Ann Lee married Tom Pike in 1990."]) == "Tom Pike"
