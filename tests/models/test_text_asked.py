"""What a question asks, tried as a new user on the demo (models.text): bounds ("the maximum
..."), short forms spelled out, list items as sentences, a when-question's verb, compound
figures, lists asked for."""

from __future__ import annotations

from searchsmith.models.bridge import headline
from searchsmith.models.text import (
    answer_kind,
    asked_bound,
    asked_measure,
    asks_bound,
    range_end,
    sentence_texts,
    spelled_out,
    typed_span,
)


def test_a_short_form_is_spelled_out_by_the_initials_of_its_words():
    assert spelled_out("CTO", "appointed Tomasz Wilk as chief technology officer on 6 February")
    assert spelled_out("NASA", "the National Aeronautics and Space Administration")  # "and" passed over
    assert spelled_out("DOE", "the Department Of Energy") is False  # "of" never spells a letter
    assert not spelled_out("CTO", "the cat took off")  # "off" is a stop word
    assert not spelled_out("CEO", "the chief executive")
    assert not spelled_out("CTO", "")


def test_a_bound_is_asked_by_maximum_minimum_at_most_at_least_only():
    assert asked_bound("What is the maximum snapshot interval in Lumen?") == "upper"
    assert asked_bound("How many brokers can a cluster have at most?") == "upper"
    assert asked_bound("What is the minimum RAM for Quarry?") == "lower"
    assert asked_bound("How much memory does it need at least?") == "lower"
    # a superlative of something else, an identifier's part, or both sides: no bound
    assert asked_bound("What is the population of the largest city in Texas?") == ""
    assert asked_bound("What is the default value of cache.max_size_gb in Atlasgrid?") == ""
    assert asked_bound("What are the minimum and maximum values?") == ""
    assert asks_bound("What is the maximum key size?") and not asks_bound("Who set the maximum key size?")
    # the noun after the bound says the dimension ("maximum message size": a size)
    assert answer_kind("What is the maximum message size in Ferrow?") == "NUM"
    assert asked_measure("What is the maximum message size in Ferrow?") == ("size", "area")
    assert asked_measure("What is the maximum snapshot interval?") == ("duration",)


def test_a_range_has_a_lower_and_an_upper_end():
    x = "Allowed values: 10 to 86400."
    assert range_end(x, 16, 18) == "lower" and range_end(x, 22, 27) == "upper"
    y = "between 5 and 20 ms"
    assert range_end(y, 8, 9) == "lower" and range_end(y, 14, 16) == "upper"
    z = "Default: 300."
    assert range_end(z, 9, 12) == ""


def test_a_bound_is_read_from_a_range_or_a_statement_of_the_asked_things_bound():
    allowed, default = "Allowed values: 10 to 86400.", "Default: `300`."
    shards, key = "Maximum shards per cluster: 1,024", "Maximum key size: 512 bytes"
    assert typed_span("What is the maximum snapshot interval?", [default, shards, allowed]) == "86400"
    assert typed_span("What is the minimum snapshot interval?", [default, allowed]) == "10"
    assert typed_span("What is the maximum key size?", [shards, key]) == "512 bytes"
    # the maximum of another thing, a default or a size for a duration: none
    assert typed_span("What is the maximum snapshot interval?", [default, shards]) == ""
    assert typed_span("What is the maximum snapshot interval?", ["Maximum snapshot size: 512 bytes"]) == ""
    # without a bound asked, as before: the default
    assert typed_span("What is the default snapshot interval?", [default]) == "300"


def test_list_items_are_sentences():
    text = "Ferrow enforces these hard limits:\n\n- Maximum message size: 8 MiB\n- Maximum brokers: 256\n" \
           "* Starred: 1\n2) Numbered item\n\nRequests above a limit are rejected."
    assert sentence_texts(text) == ["Ferrow enforces these hard limits:", "- Maximum message size: 8 MiB",
                                    "- Maximum brokers: 256", "* Starred: 1", "2) Numbered item",
                                    "Requests above a limit are rejected."]
    # a line break inside a sentence, or a hyphen in running text, ends nothing
    assert sentence_texts("A line\nthat goes on - and on.") == ["A line\nthat goes on - and on."]


def test_a_headline_title_states_something():
    assert headline("Harbor & Finch names Tomasz Wilk chief technology officer")
    assert headline("Troubleshooting LUM-310: snapshot write stalled")
    assert not headline("Bank of America")
    assert not headline("Kestrel 2.0 released")
    assert not headline("The Lord of the Rings (film)")


def test_a_when_question_ending_in_a_verb_needs_a_sentence_stating_it():
    """Tried as a new user, before: "When was Harbor & Finch founded?" got the date it acquired
    Brightline Systems."""
    acquired = "Harbor & Finch announced on 12 March 2024 that it has acquired Brightline Systems."
    assert typed_span("When was Harbor & Finch founded?", [acquired]) == ""
    assert typed_span("When was Harbor & Finch founded?", ["Harbor & Finch was established in 2009."]) == "2009"
    assert typed_span("When was Lumen 1.0 released?", ["Brightline Systems released Lumen 1.0 on 2019-11-05."]) \
        == "2019-11-05"
    # a final "retired" asks an end of life, which "end of life" states
    assert typed_span("When was Kestrel 1.x retired?", ["Kestrel 1.x reaches its end of life on 1 March 2023."]) \
        == "1 March 2023"


def test_a_compound_figure_is_one_answer():
    """Tried as a new user, before: "How long did the Lumen Cloud outage last?" got "20 minutes"
    of "the 3 hours 20 minutes Lumen Cloud outage"."""
    outage = "Brightline Systems has published the post-mortem of the 3 hours 20 minutes Lumen Cloud outage."
    assert typed_span("How long did the Lumen Cloud outage last?", [outage]) == "3 hours 20 minutes"
    assert typed_span("How tall is he?", ["He is 5 feet 11 inches tall."]) == "5 feet 11 inches"
    assert typed_span("How long does it take?", ["It takes 2 hours and 30 minutes."]) == "2 hours and 30 minutes"
    # another dimension's unit or a bare number after it joins nothing
    assert typed_span("How long did it last?", ["It lasted 95 minutes, 3 servers down."]) == "95 minutes"


def test_requirements_steps_or_limits_ask_for_a_description():
    from searchsmith.models.text import asks_description

    for q in ["What are the requirements for running Tidewater?", "What are the limits of Quarry?",
              "What are the main steps of an upgrade?"]:
        assert asks_description(q), q
    assert answer_kind("What are the requirements for running Tidewater?") == "OTHER"
    assert answer_kind("What are the names of the Lumen parts?") == "ENT"


def test_a_relation_word_typed_a_letter_off_is_still_stated():
    """The audit set: "when was atlasgrid 2.2 relased" (the final verb mistyped) is asked of the
    release, which "released" states."""
    from searchsmith.models.text import asked_relation, states_relation

    rel = asked_relation("when was atlasgrid 2.2 relased")
    assert states_relation(rel, "Northwind Labs released Atlasgrid 2.2 on 21 January 2025.")
    assert not states_relation(rel, "Northwind Labs presented Atlasgrid 2.2 on 21 January 2025.")
    # two letters off, another start, or a short word: not the same word
    assert not states_relation(asked_relation("When was it reelaesed?"), "It was released in 2020.")
    assert not states_relation(asked_relation("Who founded Brightline Systems?"), "Polder Ventures funded Brightline Systems.")
    assert states_relation(asked_relation("When was it relaesed?"), "It was released in 2020.")  # two swapped


def test_a_superlative_of_what_a_thing_takes_asks_a_bound():
    """The audit set, before: "What is the largest message Ferrow accepts?" got "Calloway Data"."""
    limits = ["Ferrow is a message broker made by Calloway Data.", "Maximum message size: 8 MiB",
              "Maximum partitions per topic: 4,096"]
    q = "What is the largest message Ferrow accepts?"
    assert asked_bound(q) == "upper" and answer_kind(q) == "NUM"
    assert typed_span(q, limits) == "8 MiB"  # the unit joins, no dimension being asked
    assert asked_bound("What is the shortest timeout Kestrel allows?") == "lower"
    # a superlative of something else, or without a verb of taking: no bound
    assert asked_bound("What is the largest city in Texas?") == "" and answer_kind("What is the largest city in Texas?") == "ENT"
    assert asked_bound("Which is the largest company that makes a message broker?") == ""
    assert typed_span("Which is the largest file Lumen stores?", limits) == ""  # no bound of files stated


def test_a_weekday_answers_which_day_of_the_week():
    """The audit set, before: "On which day of the week is scheduled maintenance?" got "72 hours"."""
    window = ("Maintenance windows are on Tuesdays between 02:00 and 04:00 UTC and are announced on the status "
              "page at least 72 hours in advance.")
    for q in ["On which day of the week is scheduled maintenance?", "What day is scheduled maintenance?",
              "Which weekday is scheduled maintenance?"]:
        assert typed_span(q, [window]) == "Tuesdays", q
    # a weekday is no answer to another question ("Monday" answers no "which season")
    assert typed_span("Which team won on Monday?", ["The Monday match was won by the Rovers."]) != "Monday"


def test_a_how_many_question_with_be_counts_no_noun_after_it_as_a_verb():
    """The audit set, before: "How many calories are in the Greek salad?" got "4" of "Greek salad
    (Greek), serves 4.": "salad" was read as the counted noun's verb, which the sentence states."""
    from searchsmith.models.text import asked_relation, states_relation

    q = "How many calories are in the Greek salad?"
    assert asked_relation(q) == [frozenset({"calories"})]
    assert not states_relation(asked_relation(q), "Greek salad (Greek), serves 4.")
    assert typed_span(q, ["Greek salad (Greek), serves 4."]) == ""
    # a participle after "are" is the verb still, and a verb after "does"
    assert asked_relation("How many people are employed by Quarry?") == [frozenset({"people", "employed"})]
    assert asked_relation("How many people does it serve?") == [frozenset({"people", "serve"})]


def test_a_default_asked_in_a_settings_description_words_names_it():
    """The audit set, before: "How many brokers keep a copy of each Ferrow partition by default?"
    got partitions.default's "6"; replication.factor's page describes what it asks."""
    from searchsmith.models.text import setting_described

    pages = ["The `replication.factor` setting controls how many brokers hold a copy of each partition.",
             "The `partitions.default` setting controls the number of partitions of a topic created without "
             "an explicit count."]
    assert setting_described("How many brokers keep a copy of each Ferrow partition by default?", pages) \
        == "replication.factor"
    assert setting_described("How many partitions does a Ferrow topic get by default?", pages) == "partitions.default"
    # no default asked, too few of its words described, or the key written out: none
    assert setting_described("How many brokers keep a copy of each Ferrow partition?", pages) == ""
    assert setting_described("How many brokers does Ferrow need by default?", pages) == ""
    assert setting_described("What is the default value of replication.factor?", pages) == ""
