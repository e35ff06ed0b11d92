"""Short answers that were wrong on the quickstart's demo, tried as a new user (2026-12-07,
the forty-fourth session's list): a question's subject that is itself the asked type, an
appositive's name, a short form only spelled out, a name no source of the answer mentions,
and a setting whose key says "max" or "min"."""

from __future__ import annotations

from one_node import extractively_answered
from searchsmith.models.text import setting_asked, subject_is_type, typed_span
from searchsmith.serving.pipeline.config import ExtractiveConfig
from searchsmith.serving.pipeline.state import Passage

_answered = extractively_answered


QUARRY = [Passage("q#0", "q", "product_docs", "Quarry is a vector database made by Northwind Labs. It stores "
                  "vectors in segments.", 0.9, title="Quarry overview"),
          Passage("g#0", "g", "product_docs", "Quarry is a vector database developed by Northwind Labs.", 0.8,
                  title="Quarry glossary")]
ACQUIRED = ("Harbor & Finch announced on 12 March 2024 that it has acquired Brightline Systems, the Austin "
            "company behind Lumen, the in-memory cache, for $310 million.")


def test_a_subject_that_is_itself_the_asked_type_answers_no_which_question_on_it():
    """Before: "Which database does Quarry use?" got "Northwind Labs": Quarry is the database."""
    q = "Which database does Quarry use?"
    assert subject_is_type(q, QUARRY[0].text) == "use"
    assert typed_span(q, [QUARRY[0].text]) == ""
    # a sentence stating the asked verb still answers
    own = "Harbor & Finch is a holding company that owns Brightline Systems."
    assert subject_is_type("Which company does Harbor & Finch own?", own) == ""
    assert typed_span("Which company does Harbor & Finch own?", [own]) == "Brightline Systems"
    # nor is a question whose subject is not said to be of the asked type touched
    assert subject_is_type("Which company makes Quarry?", QUARRY[0].text) == ""
    assert typed_span("Which company makes Quarry?", [QUARRY[0].text]) == "Northwind Labs"


def test_a_subject_of_the_asked_type_in_every_sentence_is_no_answer(embedder):
    st = _answered(embedder, "Which database does Quarry use?", QUARRY)
    assert not st.answer_found, (st.short_answer, st.answer)
    assert "'use'" in st.trace.stages["generation"].note
    st = _answered(embedder, "Which company makes Quarry?", QUARRY)
    assert st.short_answer == "Northwind Labs"


def test_an_appositive_of_the_asked_type_answers_with_the_name_it_is_of():
    """Before: "Which company does Harbor & Finch own?" got "Austin" ("the Austin company")."""
    assert typed_span("Which company does Harbor & Finch own?", [ACQUIRED]) == "Brightline Systems"
    assert typed_span("Which company makes Lumen?", [ACQUIRED]) == "Brightline Systems"  # "the company behind"
    assert typed_span("Which company acquired Brightline Systems?", [ACQUIRED]) == "Harbor & Finch"
    # a where-question still reads the place
    assert typed_span("In which city is Brightline Systems based?", ["Brightline Systems, the Austin company "
                                                                     "behind Lumen, is based in Austin."]) == "Austin"


def test_a_head_noun_spelled_the_british_way_shows_the_type():
    """Before: "What license does Lumen use?" got "Python" ("the Apache-2.0 licence")."""
    s = "Lumen is written in Python and published under the Apache-2.0 licence."
    assert typed_span("What license does Lumen use?", [s]) == "Apache-2.0"
    assert typed_span("Which licence is Lumen published under?", [s.replace("licence", "license")]) == "Apache-2.0"


CTO = [Passage("o#0", "o", "product_docs", "Tidewater is a job scheduler made by Harbor & Finch. Its glossary "
               "names the parts of a Harbor & Finch deployment.", 0.9, title="Tidewater glossary"),
       Passage("t#0", "t", "news", "Harbor & Finch appointed Tomasz Wilk as chief technology officer on 6 February "
               "2023.", 0.7, title="Harbor & Finch names Tomasz Wilk chief technology officer")]


def test_a_short_form_counts_as_a_sentence_word_where_the_sentence_spells_it_out(embedder):
    """Before: "Who is the CTO of Harbor & Finch?" got no answer: the sentence spelling "chief
    technology officer" out had no lexical share of "CTO" and ranked below the glossary's."""
    st = _answered(embedder, "Who is the CTO of Harbor & Finch?", CTO)
    assert st.short_answer == "Tomasz Wilk", (st.answer, st.trace.stages["generation"].note)


URANUS = [Passage("u#0", "u", "encyclopedia", "Uranus is the seventh planet from the Sun. Voyager 2 is the only "
                  "spacecraft to have visited Uranus, flying past it in January 1986.", 0.9, title="Uranus"),
          Passage("j#0", "j", "encyclopedia", "Jupiter is the fifth planet from the Sun and the largest.", 0.5,
                  title="Jupiter")]


def test_a_name_of_the_question_that_no_source_of_the_answer_mentions_is_no_answer(embedder):
    """Before: "When did Voyager 2 fly past Jupiter?" got Uranus's "January 1986"."""
    st = _answered(embedder, "When did Voyager 2 fly past Jupiter?", URANUS)
    assert not st.answer_found, st.answer
    assert "generation.no_answer_unnamed" in st.trace.stages["generation"].note
    assert _answered(embedder, "When did Voyager 2 fly past Uranus?", URANUS).short_answer == "January 1986"
    # the gate is a setting
    off = _answered(embedder, "When did Voyager 2 fly past Jupiter?", URANUS, no_answer_unnamed=False)
    assert off.short_answer == "January 1986"
    # a choice's options may be named one at a time ("the Nile is ... about 6,650 km long")
    nile = Passage("n#0", "n", "encyclopedia", "The Nile is a river in north-eastern Africa, about 6,650 km long "
                   "and usually counted as the longest river in the world.", 0.9, title="Nile")
    st = _answered(embedder, "Which is longer, the Nile or the Amazon?", [nile])
    assert "no_answer_unnamed" not in st.trace.stages["generation"].note


def test_a_setting_whose_key_says_max_or_min_is_named_by_maximum_or_minimum():
    """Before: "What is the maximum cache size of Atlasgrid?" got the zoom range's "22", and "What
    is the minimum TLS version Kestrel accepts?" the setting's sentence, not "1.2"."""
    titles = ["Configuring Atlasgrid: render.max_zoom", "Configuring Atlasgrid: cache.max_size_gb",
              "Configuring Kestrel: tls.min_version", "Configuring Tidewater: retry.max_attempts",
              "Configuring Lumen: snapshot.interval_s"]
    assert setting_asked("What is the maximum zoom in Atlasgrid?", titles) == "render.max_zoom"
    assert setting_asked("atlasgrid max zoom", titles) == "render.max_zoom"
    assert setting_asked("What is the maximum cache size of Atlasgrid?", titles) == "cache.max_size_gb"
    assert setting_asked("What is the minimum TLS version Kestrel accepts?", titles) == "tls.min_version"
    assert setting_asked("What is the maximum number of retry attempts in Tidewater?", titles) == "retry.max_attempts"
    # a bound of a setting that is no bound itself stays a bound (the range's end)
    assert setting_asked("What is the maximum snapshot interval in Lumen?", titles) == ""
    assert setting_asked("lumen snapshot interval", titles) == "snapshot.interval_s"


def test_a_max_setting_asked_by_its_bound_is_answered_with_its_default(embedder):
    page = Passage("z#0", "z", "product_docs", "The `render.max_zoom` setting controls the deepest zoom level "
                   "that is rendered. It belongs to the tile rendering part of Atlasgrid.\n\nDefault: `18`. "
                   "Allowed values: 0 to 22.", 0.9, title="Configuring Atlasgrid: render.max_zoom")
    assert _answered(embedder, "What is the maximum zoom in Atlasgrid?", [page]).short_answer == "18"


def test_a_figure_of_the_asked_noun_said_of_another_name_is_no_answer(embedder):
    """Before: "What is the population of Reykjavik?" got Iceland's "380,000"; with the figure
    left out, the sentence's other name ("North Atlantic") must not answer in its place."""
    s = ("Iceland is an island country in the North Atlantic with a population of about 380,000, most of whom "
         "live in and around the capital, Reykjavik.")
    assert typed_span("What is the population of Reykjavik?", [s]) == ""
    assert typed_span("What is the population of Iceland?", [s]) == "380,000"
    assert typed_span("What is the population of Reykjavik?",
                      ["Reykjavik, the capital of Iceland, has a population of about 140,000."]) == "140,000"
    assert typed_span("What is the population of Reykjavik?",
                      ["With a population of about 140,000, Reykjavik is the capital of Iceland."]) == "140,000"
    iceland = Passage("i#0", "i", "encyclopedia", s, 0.9, title="Iceland")
    st = _answered(embedder, "What is the population of Reykjavik?", [iceland])
    assert not st.answer_found and "the population of 'Reykjavik'" in st.trace.stages["generation"].note, st.answer
    assert _answered(embedder, "What is the population of Iceland?", [iceland]).short_answer == "380,000"


INSTALL = Passage("i#0", "i", "product_docs", "There are two supported ways to install Tidewater.\n\nWith a container:"
                  "\n\n    docker run -p 8088:8088 harborfinch/tidewater:2.5\n\nRequirements: a PostgreSQL 13 or newer "
                  "database for job state and 2 GB of RAM.", 0.9, title="Installing Tidewater")
TESTS = Passage("c#0", "c", "code_notes", "Clone https://git.example.com/harborfinch/tidewater and run `go test ./...` "
                "in the repository root to run Tidewater's unit tests.", 0.95, title="Tidewater source: tests")


def test_a_description_asked_by_a_noun_is_led_by_the_line_labelled_with_it(embedder):
    """Before: "What are the requirements for running Tidewater?" got the unit tests' and the
    install page's first sentences, not its "Requirements:" line."""
    from searchsmith.models.text import labelled_with_asked

    q = "What are the requirements for running Tidewater?"
    assert labelled_with_asked(q, "Requirements: a PostgreSQL 13 or newer database.")
    assert labelled_with_asked("What are the limits of Lumen?", "Hard limit: 5 per node.")
    assert not labelled_with_asked(q, "Default: `300`.")
    assert not labelled_with_asked("What are the limits of Lumen?", "Lumen enforces these hard limits: - Maximum")
    st = _answered(embedder, q, [TESTS, INSTALL])
    assert st.answer.startswith("Requirements: a PostgreSQL 13"), st.answer
    assert "labelled_lines" in st.trace.stages["generation"].note
    st = _answered(embedder, q, [TESTS, INSTALL], extractive=ExtractiveConfig(labelled_lines=False))
    assert not st.answer.startswith("Requirements:")


def test_a_when_will_question_takes_a_date_its_clause_says_is_to_come():
    """Before: "When will Halley's Comet come back?" got "1758" (the return Halley predicted)."""
    s = ("Edmond Halley predicted its return for 1758, and it was last seen near the Sun in 1986; it will be back "
         "in 2061.")
    assert typed_span("When will Halley's Comet come back?", [s]) == "2061"
    assert typed_span("When is the comet expected to return?", [s]) == "2061"
    assert typed_span("When did Halley predict its return for?", [s]) == "1758"


def test_a_tie_goes_to_the_candidate_whose_question_words_are_in_its_own_clause():
    """Before: "Which planet has the shortest day?" got "Sun": "day" was as near the Sun as
    Jupiter, but in the next clause."""
    s = ("One orbit of the Sun takes Jupiter 11.86 Earth years, and a day on Jupiter lasts about 9 hours and 56 "
         "minutes, the shortest of any planet.")
    assert typed_span("Which planet has the shortest day?", [s]) == "Jupiter"


JUPITER = Passage("j#0", "j", "encyclopedia", "One orbit of the Sun takes Jupiter 11.86 Earth years, and a day on "
                  "Jupiter lasts about 9 hours and 56 minutes, the shortest of any planet.", 0.9, title="Jupiter")


def test_an_answer_whose_sentences_and_titles_hold_no_word_of_the_question_is_no_answer(embedder):
    """Before: "How long do honeybees live?" got Jupiter's day, "about 9 hours and 56 minutes"."""
    # (no support threshold: this embedder scores the sentence low, the quickstart's above it)
    st = _answered(embedder, "How long do honeybees live?", [JUPITER], no_answer_threshold=None)
    assert not st.answer_found and "generation.no_answer_unrelated" in st.trace.stages["generation"].note, st.answer
    assert _answered(embedder, "How long do honeybees live?", [JUPITER], no_answer_threshold=None,
                     no_answer_unrelated=False).short_answer == "about 9 hours and 56 minutes"
    assert _answered(embedder, "How long does a Jupiter day last?", [JUPITER], no_answer_threshold=None).answer_found


def test_a_timetable_asked_for_is_a_description():
    from searchsmith.models.text import answer_kind, asks_description

    for q in ("What are your support hours?", "What are the opening hours of the museum?"):
        assert asks_description(q) and answer_kind(q) == "OTHER", q
    assert answer_kind("How many hours does support work?") == "NUM"


def test_a_possessive_names_the_owner_and_its_noun_is_asked():
    """Before: "What is Lumen's default port?" was asked as a name (the head stopped at the
    owner's words; "1024" on the demo), "What is Quarry's license?" had no head ("Rust"), and
    "Who is Calloway Data's CEO?" named one thing, "Calloway Data's CEO", that no passage does."""
    from searchsmith.models.text import answer_kind, asked_head, asked_measure

    assert answer_kind("What is Lumen's default port?") == "NUM" and "port" in asked_measure("What is Lumen's default port?")
    assert asked_head("What is Quarry's license?") == ["license"]
    assert answer_kind("What is Stackyard's support phone number?") == "NUM"
    s = "Quarry is written in Rust and published under the Apache-2.0 licence."
    assert typed_span("What is Quarry's license?", [s]) == "Apache-2.0"
    from one_node import one_node_state
    from searchsmith.serving.pipeline.generation import GenerationStage

    st = one_node_state("Who is Calloway Data's CEO?", [])
    assert GenerationStage.question_names(st) == ["Calloway Data", "CEO"]


def test_a_region_asked_for_is_a_cloud_region_id_or_the_word_naming_the_region():
    """Before: "Which region was hit by the Kestrel Cloud outage?" got "Harbor & Finch" ("the
    global region" and "eu-central" are no names)."""
    k = ("Harbor & Finch has published the post-mortem of the 47 minutes Kestrel Cloud outage that hit the global "
         "region on 2023-11-02: a failed certificate rotation job let the TLS certificates expire.")
    assert typed_span("Which region was hit by the Kestrel Cloud outage?", [k]) == "global"
    assert typed_span("Which region was hit by the Tidewater Cloud outage?",
                      ["On 17 March 2025, Tidewater Cloud customers in eu-central lost service for 40 minutes."]) \
        == "eu-central"
    # only for a region asked: a post-mortem is no region, and other questions read names as before
    assert typed_span("Which company published the post-mortem of the Kestrel Cloud outage?", [k]) == "Harbor & Finch"
