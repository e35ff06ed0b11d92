"""Bounds ("the maximum ..."), short forms spelled out and list items as sentences (models.text)."""

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
