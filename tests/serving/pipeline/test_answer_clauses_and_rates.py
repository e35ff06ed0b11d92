"""Short answers that were wrong on the quickstart's demo, tried as a new user (2026-12-07,
the forty-fifth session's list): question words near a candidate count in its own clause, an
amount keeps its rate ("$45 per month"), and when the best sentence is about another thing, the
sentences of passages naming the question's subject answer."""

from __future__ import annotations

from one_node import extractively_answered as _answered
from searchsmith.models.text import answer_kind, typed_span
from searchsmith.serving.pipeline.state import Passage

HALLEY = ("Edmond Halley predicted its return for 1758, and it was last seen near the Sun in 1986; it will be back "
          "in 2061.")


def test_question_words_near_a_candidate_count_in_its_own_clause():
    """Before: "When was Halley's Comet last seen?" got "1758": "last seen" was within eight
    words of it, across ", and"; "Halley" is as near but in 1758's own clause."""
    assert typed_span("When was Halley's Comet last seen?", [HALLEY]) == "1986"
    assert typed_span("When did Halley predict its return for?", [HALLEY]) == "1758"
    assert typed_span("When will Halley's Comet come back?", [HALLEY]) == "2061"
    # one clause: every word near it counts as before
    assert typed_span("When was the comet last seen near the Sun?",
                      ["The comet was last seen near the Sun in 1986 by observers in Chile."]) == "1986"


def test_an_amount_keeps_its_rate_unless_the_question_says_it():
    """Before: "How much does Beacon Cloud cost on the Business plan?" got "$45" for "$45 per
    month", and "How much is outbound traffic billed at?" "$0.05" for "$0.05 per GB"."""
    plan = "Beacon Cloud's Business plan costs $45 per month and includes phone support."
    assert typed_span("How much does Beacon Cloud cost on the Business plan?", [plan]) == "$45 per month"
    assert typed_span("How much does Beacon Cloud cost per month on the Business plan?", [plan]) == "$45"
    assert typed_span("What is the monthly price of the Business plan?", [plan]) == "$45"
    assert typed_span("How much is outbound traffic billed at?",
                      ["Outbound traffic is billed at $0.05 per GB above 1 TB a month."]) == "$0.05 per GB"
    assert typed_span("How much does the licence cost?", ["The licence costs 30 euros a month."]) \
        == "30 euros a month"
    # an amount with no rate, and a figure that is no amount, are as they were
    assert typed_span("How much did Harbor & Finch pay?", ["Harbor & Finch paid $310 million in cash."]) \
        == "$310 million"
    assert typed_span("How many requests may Kestrel serve?",
                      ["Kestrel serves 100 requests per second per API key."]) == "100"


QUARRY_OUTAGE = Passage("q#0", "q", "news", "Northwind Labs has published the post-mortem of the 2 hours Quarry Cloud "
                        "outage that hit the us-east region on 2025-01-09.", 0.9,
                        title="Northwind Labs explains Quarry Cloud outage")
TIDEWATER_OUTAGE = Passage("t#0", "t", "news", "On 17 March 2025, Tidewater Cloud customers in eu-central lost service "
                           "for 40 minutes. The fix shipped in Tidewater 2.5.1.", 0.8,
                           title="Tidewater Cloud outage in eu-central")
ATLASGRID_PRICE = Passage("a#0", "a", "faq", "Atlasgrid Cloud costs $25 per month on the Starter plan.", 0.7,
                          title="How much does Atlasgrid Cloud cost?")


def test_when_the_best_sentence_is_off_the_subject_the_sentences_naming_it_answer(embedder):
    """Before: "Which region was hit by the Tidewater Cloud outage?" got no answer: Quarry
    Cloud's outage sentence scored best, and its passage names no Tidewater Cloud."""
    q = "Which region was hit by the Tidewater Cloud outage?"
    st = _answered(embedder, q, [QUARRY_OUTAGE, TIDEWATER_OUTAGE])
    assert st.answer_found and st.short_answer == "eu-central", st.trace.stages["generation"].note
    assert "generation.on_subject" in st.trace.stages["generation"].note
    off = _answered(embedder, q, [QUARRY_OUTAGE, TIDEWATER_OUTAGE], on_subject=False)
    assert not off.answer_found and "generation.no_answer_off_subject" in off.trace.stages["generation"].note
    # a passage naming the subject but on another topic answers nothing (no word of the
    # question besides its names: a price for an outage)
    st = _answered(embedder, "How long did the Atlasgrid Cloud outage last?", [QUARRY_OUTAGE, ATLASGRID_PRICE])
    assert not st.answer_found and "generation.on_subject" not in st.trace.stages["generation"].note


def test_a_cloud_region_id_is_of_the_region_type():
    s = "On 17 March 2025, Tidewater Cloud customers in eu-central lost service for 40 minutes."
    assert typed_span("Which region was hit by the Tidewater Cloud outage?", [s], typed=True) == "eu-central"
    assert typed_span("Which company was hit by the Tidewater Cloud outage?", [s], typed=True) == ""


def test_an_amount_of_one_kind_is_answered_by_a_sentence_stating_it():
    """Before: "What was Harbor & Finch's revenue?" got "Brightline Systems" (no measure word),
    and "How much revenue does Calloway Data make?" a funding round's "$32 million"."""
    deal = "Harbor & Finch is buying Brightline Systems for $310 million, the two companies said on March 12, 2024."
    round_ = "Calloway Data raised $32 million in a Series B round led by Maple Street Partners."
    assert answer_kind("What was Harbor & Finch's revenue?") == "NUM"
    assert typed_span("What was Harbor & Finch's revenue?", [deal]) == ""
    assert typed_span("How much revenue does Calloway Data make?", [round_]) == ""
    assert typed_span("How much funding did Calloway Data raise?", [round_]) == "$32 million"
    assert typed_span("What was Calloway Data's revenue in 2023?",
                      ["Calloway Data reported revenue of $18 million for 2023."]) == "$18 million"
    assert typed_span("What was Calloway Data's revenue in 2023?",
                      ["In 2023 Calloway Data had sales of $18 million."]) == "$18 million"
    # an amount asked by no such word reads as before
    assert typed_span("How much did Harbor & Finch pay for Brightline Systems?", [deal]) == "$310 million"


def test_what_a_thing_holds_is_a_description_led_by_its_ingredients_line():
    """Before: "What is in hummus?" got "Levantine" (of "Hummus (Levantine), serves 6.")."""
    from searchsmith.models.text import asks_description, labelled_with_asked

    ingredients = "Ingredients:\n- 400 g cooked chickpeas\n- 3 tablespoons tahini"
    for q in ("What is in hummus?", "What goes into ratatouille?", "What are the ingredients of hummus?"):
        assert asks_description(q), q
        assert labelled_with_asked(q, ingredients), q
    assert not labelled_with_asked("What is in hummus?", "Method:\n1. Blend the chickpeas.")
    assert not labelled_with_asked("What is hummus?", ingredients)
    assert typed_span("What is in hummus?", ["Hummus (Levantine), serves 6."]) == ""


def test_what_one_needs_is_a_description_led_by_its_requirements_line():
    """Before: "What do I need before upgrading Lumen to 4.0?" got "3.0", and "What does
    Atlasgrid need?" its maker's name."""
    from searchsmith.models.text import asks_description, labelled_with_asked

    for q in ("What do I need to run Tidewater?", "What does Atlasgrid need?",
              "What do I need before upgrading Lumen to 4.0?"):
        assert asks_description(q), q
        assert labelled_with_asked(q, "Requirements: Python 3.10 or newer and 20 GB of disk."), q
    assert not labelled_with_asked("What do I need to run Tidewater?", "Ingredients:\n- 1 onion")


def test_no_name_answers_a_count_or_a_measure_in_units():
    """Before: "How long does Ferrow keep messages by default?" got "Calloway Data", and "How
    many events can Beacon buffer?" an error code's name."""
    made = "Ferrow is a message broker made by Calloway Data."
    assert typed_span("How long does Ferrow keep messages by default?", [made]) == ""
    assert typed_span("How many events can Beacon buffer?",
                      ["Beacon reports `BCN-101 buffer full, dropping events` when the endpoint is slow."]) == ""
    assert typed_span("How many moons does Mars have?", ["Mars has two small moons, Phobos and Deimos."]) == "two"
    # a default may be a name ("UTC"), and a what-question falls back to one as before
    assert typed_span("What is the default value of cron.timezone in Tidewater?", ["`cron: timezone: UTC`"]) == "UTC"


CODES = Passage("c#0", "c", "code_notes", "Kestrel's error codes (KST-429 and KST-502) are defined in "
                "`kestrel/errors/codes.go`; every code maps to one error type, and new codes must be added there "
                "with a test.", 0.9, title="Kestrel error codes in the source")
KST_429 = Passage("k#0", "k", "product_docs", "Kestrel reports `KST-429 rate limit exceeded` when the API key sent "
                  "more requests than rate_limit.requests_per_s plus the burst allows. To fix it, slow the client "
                  "down or raise the limit for that key.", 0.8, title="Troubleshooting KST-429: rate limit exceeded")


def test_a_description_of_a_named_thing_is_led_by_its_own_page(embedder):
    """Before: "What does KST-429 mean?" was answered by the source notes' sentence on where
    the codes are defined; the troubleshooting page titled with the code says what it means."""
    from searchsmith.serving.pipeline.config import ExtractiveConfig

    q = "What does KST-429 mean?"
    off = _answered(embedder, q, [CODES, KST_429], extractive=ExtractiveConfig(own_description=False))
    assert off.answer.startswith("Kestrel's error codes"), off.answer  # the cosine's order
    st = _answered(embedder, q, [CODES, KST_429])
    assert st.answer.startswith("Kestrel reports `KST-429 rate limit exceeded`"), st.answer
    assert st.short_answer == ""


def test_a_figure_after_the_questions_name_in_a_list_of_pairs_is_its_own():
    """Before: "How many seats does the Business plan include?" got the Starter plan's "3" of
    "The Starter plan includes 3 seats, Business 25 seats ...": "Business 25" was read as one
    name, and the name's word was then no word near its figure."""
    s = "The Starter plan includes 3 seats, Business 25 seats and Enterprise an unlimited number."
    assert typed_span("How many seats does the Business plan include?", [s]) == "25"
    assert typed_span("How many seats does the Starter plan include?", [s]) == "3"


def test_no_setting_key_or_code_span_answers_who():
    """Before: "Who wrote Lumen?" got "eviction.policy" ("... none rejects writes instead")."""
    s = ("The `eviction.policy` setting controls which keys are removed first when memory is full; none rejects "
         "writes instead.")
    assert typed_span("Who wrote Lumen?", [s]) == ""
    assert typed_span("Who wrote Lumen?", ["Lumen was written by Ada Park in 2019."]) == "Ada Park"


def test_memory_asked_by_how_much_is_a_size_and_what_for_a_description():
    """Before: "How much RAM does Quarry need?" got "64" (of "64-bit"), and "What is Beacon
    used for?" the file its service discovery is implemented in."""
    from searchsmith.models.text import asked_measure, asks_description

    s = "Quarry needs 4 GB of RAM, a 64-bit Linux host (x86_64 with AVX2, or arm64)."
    assert asked_measure("How much RAM does Quarry need?") == ("size",)
    assert typed_span("How much RAM does Quarry need?", [s]) == "4 GB"
    assert asks_description("What is Beacon used for?")
    assert asks_description("What are Marlowe's segments used for?")
    assert not asks_description("Which port is Beacon using?")
