"""Short answers for a bound ("the maximum ..."), a short form spelled out in the sources ("CTO"),
a headline bridge, and the ways a how-to sentence announces: each was wrong on the quickstart's
demo, tried as a new user (2026-12-07)."""

from __future__ import annotations

from one_node import extractively_answered
from searchsmith.serving.pipeline.config import ExtractiveConfig
from searchsmith.serving.pipeline.generation import GenerationStage
from searchsmith.serving.pipeline.state import Passage

_answered = extractively_answered


SNAPSHOT = Passage("s#0", "s", "product_docs", "The `snapshot.interval_s` setting controls how often every shard "
                   "writes a snapshot to disk. It belongs to the snapshots part of Lumen.\n\nDefault: `300`. "
                   "Allowed values: 10 to 86400.\n\nSet it in lumen.yaml:\n\n    snapshot:\n      interval_s: 300",
                   0.9, title="Configuring Lumen: snapshot.interval_s")
LIMITS = Passage("l#0", "l", "product_docs", "Lumen enforces these hard limits:\n\n- Maximum key size: 512 bytes\n"
                 "- Maximum value size: 64 MiB\n- Maximum shards per cluster: 1,024\n\nRequests above a limit "
                 "are rejected.", 0.8, title="Limits of Lumen")


def test_a_maximum_or_minimum_is_a_range_end_or_a_stated_bound_of_the_asked_thing(embedder):
    """Before: "What is the maximum snapshot interval in Lumen?" got "LUM-310 snapshot write
    stalled", and with the bound alone "1,024" (shards) or "300" (the default)."""
    cases = {
        "What is the maximum snapshot interval in Lumen?": "86400",
        "What is the minimum value of snapshot.interval_s in Lumen?": "10",
        "What is the maximum key size in Lumen?": "512 bytes",
        "How many shards can a Lumen cluster have at most?": "1,024",
    }
    for q, want in cases.items():
        st = _answered(embedder, q, [SNAPSHOT, LIMITS])
        assert st.short_answer == want, (q, st.short_answer, st.support)
    # the default is still the default's answer
    assert _answered(embedder, "What is the default value of snapshot.interval_s in Lumen?",
                     [SNAPSHOT, LIMITS]).short_answer == "300"
    # no bound of the asked thing stated, nor a range: no figure (the shards' maximum is another thing's)
    st = _answered(embedder, "What is the maximum memory of a Lumen node?", [LIMITS])
    assert st.short_answer in ("", "64 MiB") and st.short_answer != "1,024"


def test_a_list_item_is_a_sentence_quoted_without_its_bullet(embedder):
    st = _answered(embedder, "What is the maximum value size in Lumen?", [LIMITS])
    assert st.short_answer == "64 MiB"
    assert st.support == ["Maximum value size: 64 MiB"]  # not the whole list, nor "- Maximum ..."


HARBOR = [
    Passage("y#0", "y", "news", "The stories of 2023, month by month.\n\nIn February 2023: Harbor & Finch names "
            "Tomasz Wilk chief technology officer.\nIn March 2023: Marlowe arrives on Stackyard.", 0.9,
            title="2023 in review"),
    Passage("t#0", "t", "news", "Harbor & Finch appointed Tomasz Wilk as chief technology officer on 6 February "
            "2023. Tomasz Wilk was previously head of infrastructure at a Warsaw bank.", 0.8,
            title="Harbor & Finch names Tomasz Wilk chief technology officer"),
]


def test_a_short_form_is_mentioned_spelled_out_and_a_headline_bridge_answers_with_its_names(embedder):
    """Before: "Who became CTO of Harbor & Finch in 2023?" got no answer (no passage mentions
    "CTO of Harbor & Finch"); spelled out it got "Warsaw": the year in review's line names the
    story's headline, a bridge whose names were all excluded from the answer."""
    assert GenerationStage.mentioned("CTO of Harbor & Finch", HARBOR[1].text)
    assert GenerationStage.mentioned("CTO", "the chief technology officer")
    assert not GenerationStage.mentioned("CTO of Harbor & Finch", "Harbor & Finch hired a chief executive officer")
    assert not GenerationStage.mentioned("CTO of Northwind Labs", HARBOR[1].text)
    for q in ["Who became CTO of Harbor & Finch in 2023?",
              "Who became chief technology officer of Harbor & Finch in 2023?"]:
        st = _answered(embedder, q, HARBOR)
        assert st.answer_found and st.short_answer == "Tomasz Wilk", (q, st.short_answer, st.trace.stages["generation"].note)


INSTALL = Passage("i#0", "i", "product_docs", "There are two supported ways to install Lumen.\n\nWith a container:"
                  "\n\n    docker run -p 6410:6410 brightline/lumen:4.0\n\nFrom a package:\n\n    pip install "
                  "lumen-cache\n\nRequirements: Python 3.10 or newer and 1 GB of free memory.", 0.9,
                  title="Installing Lumen")


def test_a_how_to_sentence_announcing_ways_is_followed_by_them(embedder):
    """Before: "How do I install Lumen?" was answered "There are two supported ways to install
    Lumen." and nothing more."""
    st = _answered(embedder, "How do I install Lumen?", [INSTALL])
    assert st.answer == ("There are two supported ways to install Lumen. With a container: `docker run -p "
                         "6410:6410 brightline/lumen:4.0` From a package: `pip install lumen-cache` Requirements: "
                         "Python 3.10 or newer and 1 GB of free memory.")
    assert st.used_passages == ["i#0"] and "generation.extractive.announced_steps 4" in \
        st.trace.stages["generation"].note
    one = _answered(embedder, "How do I install Lumen?", [INSTALL], ExtractiveConfig(announced_steps=1))
    assert one.answer.endswith("brightline/lumen:4.0`") and "pip install" not in one.answer
    off = _answered(embedder, "How do I install Lumen?", [INSTALL], ExtractiveConfig(announced_steps=0))
    assert off.answer == "There are two supported ways to install Lumen."
    # a question asking no way, or a sentence announcing none: as before
    what = _answered(embedder, "What ways to install Lumen are there?", [INSTALL])
    assert "generation.extractive.announced_steps" not in what.trace.stages["generation"].note


def test_announced_steps_is_checked_by_name():
    import pytest

    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="generation.extractive.announced_steps must be a whole number >= 0"):
            ExtractiveConfig(announced_steps=bad)


def test_a_default_asked_by_a_settings_description_is_read_on_its_page(embedder):
    """Before: "How many brokers keep a copy of each Ferrow partition by default?" got the
    partitions page's "Default: `6`.", ranked above replication.factor's own default."""
    factor = Passage("f#0", "f", "product_docs", "The `replication.factor` setting controls how many brokers hold a "
                     "copy of each partition. It belongs to the replication part of Ferrow.\n\nDefault: `3`. "
                     "Allowed values: 1 to 7.", 0.9, title="Configuring Ferrow: replication.factor")
    parts = Passage("p#0", "p", "product_docs", "The `partitions.default` setting controls the number of partitions "
                    "of a topic created without an explicit count. Every partition has brokers.\n\nDefault: `6`.",
                    0.8, title="Configuring Ferrow: partitions.default")
    q = "How many brokers keep a copy of each Ferrow partition by default?"
    st = _answered(embedder, q, [parts, factor])
    assert st.short_answer == "3" and st.support == ["Default: `3`."], (st.short_answer, st.support)
    off = _answered(embedder, q, [parts, factor], ExtractiveConfig(named_settings=False))
    assert off.short_answer == "6"  # named_settings off: the partitions page's default, as before
