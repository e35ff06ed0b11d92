"""models.bridge: which passage a sentence leads to, and whether its subject is the answer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from searchsmith.models.bridge import (
    asked_type,
    base_title,
    named_title,
    states_kin_of,
    title_answers,
    unanswered_words,
)


@pytest.mark.parametrize(("title", "base"), [
    ("Kiss and Tell (1945 film)", "Kiss and Tell"), ("Rockland, Maine", "Rockland, Maine"),
    ("Mark Steven Johnson", "Mark Steven Johnson"), ("(film)", ""), ("", ""), ("A (b) (c)", "A (b)"),
])
def test_base_title_cuts_a_trailing_disambiguator(title, base):
    assert base_title(title) == base


TITLES = ["When in Rome (2010 film)", "Mark Steven Johnson", "America", "Bank of America", "Go"]


def test_the_named_title_is_a_whole_word_title_the_question_does_not_name():
    q = "What is the place of birth of the director of film When In Rome (2010 Film)?"
    s = "When in Rome is a 2010 American film directed by Mark Steven Johnson."
    # the film is the question's own subject (and the sentence's own passage): the director is the bridge
    assert named_title(s, TITLES, q, own=["When in Rome (2010 film)"]) == 1
    assert named_title(s, TITLES, q) == 1  # the question names the film itself
    # no title named, or only as part of a word: none ("Johnsons" is not "Johnson")
    assert named_title("It was shot by the Johnsons in Rome.", ["Johnson"], q) is None
    # the longest title wins over one it contains; a title shorter than MIN_TITLE_CHARS is none
    assert named_title("He worked at the Bank of America. Go!", TITLES, "Who?") == 3
    assert named_title("Go there.", ["Go"], "Who?") is None
    # a title the sentence's own passage has is not a bridge
    assert named_title("Mark Steven Johnson is a director.", TITLES, "Who?", own=["Mark Steven Johnson"]) is None
    assert named_title("anything", [], "Who?") is None
    # a title named only as where something is names no bridge, however the hyphen is written
    for s in ("It bought the Boston-based bank Fleet.", "It bought the Boston - based bank Fleet."):
        assert named_title(s, ["Boston"], "Who is the chairman?") is None
    assert named_title("It moved to Boston in 2004.", ["Boston"], "Who is the chairman?") == 0


@pytest.mark.parametrize(("question", "kind"), [
    ("Daddy was integral to the work of what Mexican-American dog behaviorist with over 20 years?",
     ("dog", "behaviorist")),
    ("Fiske O'Hara was born in what city Knox County, Maine, that had a population of 2,297?", ("city",)),
    ("Which river system in Chilhowie was the starting place for most Longhunters?", ("river", "system")),
    ("McLaren MP4/11 was driven by what Finnish former professional racing driver",
     ("former", "professional", "racing", "driver")),
    ("Which Danish football clubs won three championships?", ("football", "clubs")),  # a relation word ends it
    ("What country Araya Selassie Yohannes's wife is from?", ("country",)),  # a name after the noun ends it
    ("What is the place of birth of the director of film X?", ()),
    ("Who was the main vocal of X?", ()),
    ("Where was the director of film X born?", ()),
    ("When did the mother of Joseph die?", ()),
    ("", ()),
])
def test_asked_type_is_the_lower_case_words_of_the_wh_phrase(question, kind):
    assert asked_type(question) == kind


def test_the_bridge_answers_when_its_first_sentence_says_it_is_the_asked_type():
    rockland = "Rockland is a city in Knox County, Maine, United States. It is the county seat."
    assert title_answers("Fiske O'Hara was born in what city Knox County, Maine?", rockland)
    # plural asked, singular said; and the other way round
    assert title_answers("Which clubs have won the cup?", "Odense Boldklub is a Danish football club.")
    # the head of the type, not any of its words: a dog breed is no "dog behaviorist"
    q = "Daddy was integral to the work of what Mexican-American dog behaviorist?"
    assert not title_answers(q, "The American Pit Bull Terrier is a dog breed.")
    assert title_answers(q, "Cesar Millan is a Mexican-American dog behaviorist.")
    assert title_answers("Which club has won the cup?", "The Clubs is a band.")
    # the type only in a later sentence, no type asked, or a date asked: the answer is inside the passage
    assert not title_answers("In what city was she born?", "Mary Eaton was an actress. She was born in a city.")
    assert not title_answers("Where was she born?", rockland)
    assert not title_answers("In what year was the city founded?", rockland)
    assert not title_answers("What city?", "")


@given(st.text(max_size=300), st.lists(st.text(max_size=40), max_size=6), st.text(max_size=120))
def test_the_bridge_functions_take_any_text(sentence, titles, question):
    k = named_title(sentence, titles, question)
    assert k is None or 0 <= k < len(titles)
    assert all(w.islower() for w in asked_type(question))
    assert isinstance(title_answers(question, sentence), bool)


@pytest.mark.parametrize(("question", "sentence", "left"), [
    # the best sentence holds every word of the question: it answers it, no bridge is needed
    ("Who discovered Uranus?", "Uranus was discovered by William Herschel in 1781.", set()),
    ("What are the names of the moons of Mars?", "Mars has two small moons, Phobos and Deimos.", set()),
    # the sentence names the director, not where he was born: that is left to the bridge
    ("Where was the director of film X born?", "X is a 2010 film directed by Mark Steven Johnson.", {"born"}),
    # numbers compare whole
    ("What happened in 1781?", "It was 17810 km away.", {"happened", "1781"}),
    ("", "anything", set()),
    # held in another inflection or a derivation ...
    ("Who married the publisher of The North Star?", "His marriage to the publisher of The North Star ...", set()),
    ("When was the discovery of Uranus?", "Uranus was discovered in 1781.", set()),
    # ... but not by a word that only begins alike: the film's title is no answer to "which country"
    ("Which country the director of film The White Countess is from?",
     "The White Countess is a 2005 drama film directed by James Ivory.", {"country"}),
])
def test_unanswered_words(question, sentence, left):
    assert unanswered_words(question, sentence) == left


def test_a_sentence_stating_the_asked_kin_of_the_questions_person():
    q = "What is the place of birth of Henrik Selberg's father?"
    assert states_kin_of(q, "He was married to Anna Skeie, and the father of Sigmund, Arne, Henrik and Atle Selberg.")
    assert states_kin_of("Where was the spouse of Mary Eaton born?", "She was the wife of Millard Webb and of Mary Eaton.")
    # the kin of another person, another kin, or no kin asked
    assert not states_kin_of(q, "He was the father of Tom Brandt.")
    assert not states_kin_of(q, "He was the brother of Henrik Selberg.")
    assert not states_kin_of("Where was Henrik Selberg born?", "He was the father of Henrik Selberg.")


def test_a_sibling_code_or_version_is_no_bridge() -> None:
    """The demo, before: "How do I fix FRW-118?" was answered with FRW-402's fix, through the
    sentence "Ferrow's error codes (FRW-118 and FRW-402) are defined in ..."."""
    from searchsmith.models.bridge import sibling_of_asked

    q = "How do I fix FRW-118?"
    assert sibling_of_asked("FRW-402", q) == "FRW-402"
    assert sibling_of_asked("Troubleshooting FRW-402: consumer group rebalancing", q) == "FRW-402"
    assert sibling_of_asked("FRW-118", q) == ""  # the asked one
    assert sibling_of_asked("KST-502", q) == ""  # another family: a bridge may lead there
    assert sibling_of_asked("Ferrow 1.0 released", "When was Ferrow 1.5 released?") == "Ferrow 1.5"  # the asked one
    assert sibling_of_asked("Calloway Data", "When was Ferrow 1.5 released?") == ""
