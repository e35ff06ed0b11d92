"""Choice questions ("Which came out first, A or B?") answered from passages (models/choice.py).

The passages here are written for these tests (made-up films, people and places)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from searchsmith.models.choice import (
    choice_options,
    choose,
    common_ground,
    compared,
    comparison,
    yes_no,
    yes_no_options,
)


@pytest.mark.parametrize("question, stem, options", [
    ("Which film came out first, Harbour Lights or The Glass Orchard?", "Which film came out first",
     ["Harbour Lights", "The Glass Orchard"]),
    # no comma before the options: the capitalised run before "or"
    ("who is younger Mara Telling or  Jonas Vell?", "who is younger", ["Mara Telling", "Jonas Vell"]),
    # a comma before "or", and three options
    ("Which band has the most members, Quiet Engines, or Paper Moons?", "Which band has the most members",
     ["Quiet Engines", "Paper Moons"]),
    ("Which came first, Alba, Brio, or Cato?", "Which came first", ["Alba", "Brio", "Cato"]),
    # options in the middle: the rest of the question is part of the stem
    ("Which novelist, R. T. Amble or Lise Varn, wrote of the war at sea?",
     "Which novelist wrote of the war at sea", ["R. T. Amble", "Lise Varn"]),
    # an appositive after the last option describes it, a disambiguator is cut
    ("Which film won a prize, Tall Grass (Film) or Iron Bay, the 1970 documentary?", "Which film won a prize",
     ["Tall Grass", "Iron Bay"]),
    # a comma inside the last option followed by a capital stays in it; a "?" inside is cut
    ("Which film came out earlier, Red Sails or That Devil, Tomas?", "Which film came out earlier",
     ["Red Sails", "That Devil, Tomas"]),
    ("Which film came out first, Who Is Calling? or North Pier?", "Which film came out first",
     ["Who Is Calling", "North Pier"]),
    # two names offered with "and" after a stem that compares them
    ("Which genus has more species, Bactris and Epigaea?", "Which genus has more species", ["Bactris", "Epigaea"]),
    ("Who was born first out of Heng Pov and Rajesh Bhola?", "Who was born first", ["Heng Pov", "Rajesh Bhola"]),
    ("Which is older between Tall Grass (Film) and Iron Bay?", "Which is older", ["Tall Grass", "Iron Bay"]),
])
def test_the_options_and_the_stem_of_a_choice_question(question, stem, options):
    assert choice_options(question) == (stem, options)


@pytest.mark.parametrize("question", [
    "Does Quarry support JSON or YAML?",  # a yes / no question: no question word before "or"
    "The old school in the Vesk Bazaar, or bazar, is located in which country?",  # "or" before the question word
    "Which port does Quarry listen on?",
    "Which is better, Quarry or quarry?",  # the same option twice
    # "and" without a comparison joins what the question is about
    "What profession did Alan Crosland and Kurt Voss both hold?",
    "What is the shared country of ancestry between Art Laboe and Scout Tufankjian?",
    "Who was born first, Ola Brandt and Ola Brandt?",  # the same name twice
    "",
])
def test_a_question_that_offers_no_choice_has_no_options(question):
    assert choice_options(question) == ("", [])


@pytest.mark.parametrize("stem, measure, sign, noun, relation", [
    ("Which film came out first", "date", -1, "", ""),
    ("Which documentary is the oldest", "date", -1, "", ""),
    ("Which board game was published most recently", "date", +1, "", ""),
    ("Who is younger", "date", +1, "", ""),
    ("Who was born later", "date", +1, "", ""),
    ("Who died earlier", "death", -1, "", ""),
    ("Which film has the director who died later", "death", +1, "", "director"),
    ("Which film whose director is younger", "date", +1, "", "director"),
    ("Which film director is younger", "date", +1, "", ""),  # the directors themselves
    ("Who lived longer", "lifespan", +1, "", ""),
    ("Who lived to an older age", "lifespan", +1, "", ""),
    ("Which band has released more albums with their original members", "count", +1, "albums", ""),
    ("Who has won more Grand Slam doubles titles", "count", +1, "titles", ""),
    ("Which has fewer species", "count", -1, "species", ""),
    ("Which peak stands higher", "count", +1, "", ""),
])
def test_what_a_stem_compares(stem, measure, sign, noun, relation):
    c = comparison(stem)
    assert c is not None and (c.measure, c.sign, c.noun, c.relation) == (measure, sign, noun, relation)


def test_a_stem_that_compares_nothing():
    assert comparison("Which is a comedy film") is None
    assert comparison("Who is the director of Night Tide") is None


FILMS = [
    ("Harbour Lights", "Harbour Lights is a 1952 drama film directed by Ola Brandt. It was shot in Bergen."),
    ("The Glass Orchard", "The Glass Orchard is a 1938 comedy film directed by Pia Sorel. It ran for 12 weeks."),
    ("Ola Brandt", "Ola Brandt (3 March 1901 – 9 May 1980) was a Norwegian film director."),
    ("Pia Sorel", "Pia Sorel (12 June 1910 – 1 January 1975) was a French film director and writer."),
    ("Bread", "Knead the bread dough for ten minutes until it is smooth."),
]


@pytest.mark.parametrize("question, option, evidence_title", [
    ("Which film came out first, Harbour Lights or The Glass Orchard?", "The Glass Orchard", "The Glass Orchard"),
    ("Which film was released more recently, Harbour Lights or The Glass Orchard?", "Harbour Lights",
     "Harbour Lights"),
    # through the relation: the directors' dates, not the films'
    ("Which film has the director who died later, Harbour Lights or The Glass Orchard?", "Harbour Lights",
     "Ola Brandt"),
    ("Which film whose director is younger, Harbour Lights or The Glass Orchard?", "The Glass Orchard",
     "Pia Sorel"),
    ("Who was born first, Ola Brandt or Pia Sorel?", "Ola Brandt", "Ola Brandt"),
    ("Who was born first out of Ola Brandt and Pia Sorel?", "Ola Brandt", "Ola Brandt"),
    ("Who lived longer, Ola Brandt or Pia Sorel?", "Ola Brandt", "Ola Brandt"),  # 79 years against 64
    ("Who died earlier, Ola Brandt or Pia Sorel?", "Pia Sorel", "Pia Sorel"),
    # no comparison: the option whose passages hold the question's words
    ("Which is a comedy film, Harbour Lights or The Glass Orchard?", "The Glass Orchard", "The Glass Orchard"),
    ("Which director was French, Ola Brandt or Pia Sorel?", "Pia Sorel", "Pia Sorel"),
])
def test_the_option_the_passages_favour(question, option, evidence_title):
    c = choose(question, FILMS)
    assert c is not None and c.option == option, c
    titles = [FILMS[i][0] for i, _ in c.evidence]
    assert titles[0] == evidence_title and len(c.evidence) == 2
    assert FILMS[c.evidence[0][0]][1].find(c.evidence[0][1]) >= 0  # a sentence of that passage


def test_a_lifespan_whose_dash_was_lost():
    # Wikipedia text with its dash dropped: "( ; 9 May 1860 19 June 1937)" is still a range
    docs = [("Ola Brandt", "Ola Brandt, 1st Baronet, ( ; 9 May 1860 19 June 1937) was a Scottish novelist."),
            ("Pia Sorel", "Pia Sorel (March 12, 1928 – September 16, 2016) was an American playwright.")]
    c = choose("Which playwright lived a longer life, Ola Brandt or Pia Sorel?", docs)
    assert c is not None and c.option == "Pia Sorel" and "77 years" in c.reason, c
    # one date in the parentheses, or words between two, is no range: not decided by the
    # lifespans, nor by the question's words (each holds "playwright")
    docs[0] = ("Ola Brandt", "Ola Brandt (born 9 May 1860, knighted 19 June 1913) was a Scottish playwright.")
    assert choose("Which playwright lived a longer life, Ola Brandt or Pia Sorel?", docs) is None


def test_most_numerous_counts_the_asked_noun_and_twice_is_two():
    docs = [("Podocarpus", "Podocarpus is a genus of conifers. There are approximately 97 to 107 species in the genus."),
            ("Osmunda", "Osmunda is a genus of ferns. Five to ten species have been listed for this genus.")]
    c = choose("Which species is the most numerous, Podocarpus or Osmunda?", docs)
    assert c.option == "Podocarpus" and "97" in c.reason and "5" in c.reason
    assert comparison("Which species is the most numerous").noun == "species"
    docs = [("Ann Vale", "Ann Vale twice won the Academy Award for Best Director."),
            ("Bo Lind", "Bo Lind won the Academy Award for Best Director three times, and once the award for a film.")]
    c = choose("Who won more academy awards, Ann Vale or Bo Lind?", docs)
    assert c is not None and "Ann Vale 2" in c.reason, c


def test_a_comparison_the_passages_do_not_state_falls_back_to_the_questions_words():
    # no count of acts for either: the option whose passages hold more of the stem's words
    docs = [("Parsifal", "Parsifal is an opera in acts by Richard Wagner."),
            ("Manon", "Manon is a work by Jules Massenet.")]
    c = choose("Which opera has more acts, Parsifal or Manon?", docs)
    assert c is not None and c.option == "Parsifal" and "question's words" in c.reason, c
    # a stated count decides before the words do
    docs[1] = ("Manon", "Manon is a work in five acts by Jules Massenet.")
    docs[0] = ("Parsifal", "Parsifal is an opera in three acts by Richard Wagner.")
    assert choose("Which opera has more acts, Parsifal or Manon?", docs).option == "Manon"


def test_counts_and_heights():
    docs = [("Lumen Peak", "Lumen Peak is a mountain in the Vesk range. It rises to 7,120 metres above sea level."),
            ("Grey Horn", "Grey Horn is the range's highest summit at 24,000 ft."),
            ("Quiet Engines", "Quiet Engines is a rock band. They have released five studio albums since 2001."),
            ("Paper Moons", "Paper Moons is a pop band. Their 12 albums include a live record, released on "
                            "14 July 2009.")]
    # 24,000 ft is 7,315 m: heights compared in metres, whatever their unit
    assert choose("Which peak stands higher, Lumen Peak or Grey Horn?", docs).option == "Grey Horn"
    c = choose("Which band has released more albums, Quiet Engines or Paper Moons?", docs)
    assert c.option == "Paper Moons" and "12" in c.reason and "5" in c.reason
    assert choose("Which band has released fewer albums, Quiet Engines or Paper Moons?", docs).option == \
        "Quiet Engines"


def test_no_answer_when_the_passages_do_not_decide():
    # one option without a date, a tie, no passage about an option, no question words anywhere
    docs = [("Alba", "Alba is a film released in 1990."), ("Brio", "Brio is a film by Lena Ost."),
            ("Cato", "Cato is a film released in 1990.")]
    assert choose("Which film came out first, Alba or Brio?", docs) is None
    assert choose("Which film came out first, Alba or Cato?", docs) is None
    assert choose("Which film came out first, Alba or Dorn?", docs) is None
    assert choose("Which one won the Palme d'Or, Alba or Cato?", docs) is None
    # an opinion: one word of the stem found in a passage settles nothing
    assert choose("Which is better, Alba or Brio?", [("Alba", "Alba is better known as a film."),
                                                      ("Brio", "Brio is a film.")]) is None
    assert choose("Which port does Quarry listen on?", docs) is None
    assert choose("Which film came out first, Alba or Brio?", []) is None


def test_a_passage_titled_with_the_option_comes_before_one_that_contains_it():
    docs = [("The Kids of Tarn", "The Kids of Tarn is a board game for children. It was released in 2010."),
            ("Tarn", "Tarn is a board game published in 1995."),
            ("Ridge Cove", "Ridge Cove is a board game published in 2002.")]
    c = choose("Which board game was published most recently, Ridge Cove or Tarn?", docs)
    assert c.option == "Ridge Cove" and "Tarn 1995" in c.reason
    # without the option's own passage, a longer title that only contains a one-word option is
    # about something else: no value, no answer
    assert choose("Which board game was published most recently, Ridge Cove or Tarn?", [docs[0], docs[2]]) is None


@settings(max_examples=200, deadline=None)
@given(hst.text(max_size=120), hst.lists(hst.tuples(hst.text(max_size=20), hst.text(max_size=200)), max_size=4))
def test_any_text_gives_an_option_of_the_question_or_none(question, docs):
    c = choose(question, docs)
    if c is not None:
        assert c.option in choice_options(question)[1]
    choose(f"Which came first, {question} or B?", docs)  # never raises, lone surrogates included
    q = f"Who was born first out of {question} and Bo?"  # options offered with "and"
    c = choose(q, docs)
    assert c is None or c.option in choice_options(q)[1]


@pytest.mark.parametrize("question, before, options, after", [
    ("Were Ola Brandt and Pia Sorel from the same country?", "", ["Ola Brandt", "Pia Sorel"],
     "from the same country"),
    ("Are both Cynthia Vale and George Arno American?", "both", ["Cynthia Vale", "George Arno"], "American"),
    ("Are the flowering plants Ecbal and Elato in the same family?", "the flowering plants", ["Ecbal", "Elato"],
     "in the same family"),
    ("Do both films Levity (Film) and Song of the Bay have the directors from the same country?", "both films",
     ["Levity", "Song of the Bay"], "have the directors from the same country"),
    ("Is Quarry written in Rust?", "", [], ""),
    ("Does Quarry support JSON and YAML?", "", [], ""),  # one thing asked about, not two compared
    ("Which port does Quarry use?", "", [], ""),
])
def test_the_two_things_a_yes_no_question_compares(question, before, options, after):
    got = yes_no_options(question)
    assert (got if options else got[1]) == ((before, options, after) if options else [])


PEOPLE = [
    ("Ola Brandt", "Ola Brandt (3 March 1901 – 9 May 1980) was a Norwegian film director."),
    ("Pia Sorel", "Pia Sorel (12 June 1910 – 1 January 1975) was a French film director and writer."),
    ("Jean Morel", "Jean Morel (born 1950) is a French novelist."),
    ("Harbour Lights", "Harbour Lights is a 1952 drama film directed by Ola Brandt."),
    ("The Glass Orchard (film)", "The Glass Orchard is a 1938 comedy film directed by Vietnamese-born French "
                                 "director Pia Sorel."),
    ("Ecbal", "Ecbal is a genus of flowering plants in the family Cucurbitaceae."),
    ("Elato", "Elato is a genus of flowering plants in the family Urticaceae."),
    ("Lake Tarn", "Lake Tarn is a lake in Saskatchewan, Canada."),
    ("Mirror Lake (Quebec)", "Mirror Lake is a lake in the Kamouraska region of Quebec, Canada."),
    ("Waverley Hall", "Waverley Hall is a school in Sydney, New South Wales, Australia."),
]


@pytest.mark.parametrize("question, answer, why", [
    ("Were Ola Brandt and Pia Sorel from the same country?", "no", "Ola Brandt norway, Pia Sorel france"),
    ("Are Pia Sorel and Jean Morel of the same nationality?", "yes", "france"),
    # through the relation, past the nationality words before the director's name
    ("Do both films Harbour Lights and The Glass Orchard have the directors from the same country?", "no",
     "Ola Brandt norway, Pia Sorel france"),
    ("Are the flowering plants Ecbal and Elato in the same family?", "no", "Cucurbitaceae"),
    ("Are Lake Tarn and Mirror Lake located in the same country?", "yes", "canada"),
    # "New South Wales" is in Australia, not Wales
    ("Are Waverley Hall and Lake Tarn located in the same country?", "no", "Waverley Hall australia"),
    ("Are Ola Brandt and Pia Sorel both film directors?", "yes", "both film directors"),
    ("Are both Pia Sorel and Jean Morel French?", "yes", "both French"),
    ("Are Pia Sorel and Jean Morel both French writers?", "no", "Jean Morel no"),
])
def test_yes_or_no_from_what_the_passages_say(question, answer, why):
    c = yes_no(question, PEOPLE)
    assert c is not None and c.option == answer and why in c.reason, c
    assert all(i >= 0 for i, _ in c.evidence)


def test_no_yes_or_no_when_the_passages_do_not_decide():
    assert yes_no("Were Ola Brandt and Sam Kerr from the same country?", PEOPLE) is None  # no passage on Kerr
    assert yes_no("Were Harbour Lights and Ola Brandt both formed before 2010?", PEOPLE) is None
    assert yes_no("Is Ola Brandt Norwegian?", PEOPLE) is None
    assert yes_no("Were Ecbal and Lake Tarn from the same country?", PEOPLE) is None  # Ecbal names no country


def test_iso_dates_compare_by_month_and_day():
    docs = [("Kestrel 1.0 released", "Harbor & Finch released Kestrel 1.0 on 2019-09-10."),
            ("Lumen 1.0 released", "Brightline Systems released Lumen 1.0 on 2019-11-05.")]
    c = choose("Which was released first, Kestrel 1.0 or Lumen 1.0?", docs)
    assert c is not None and c.option == "Kestrel 1.0" and "2019-09-10" in c.reason


def test_what_two_things_have_in_common():
    docs = [("Ola Brandt", "Ola Brandt was a Norwegian stage actor and film director. He lived in Bergen."),
            ("Pia Sorel", "Pia Sorel was a French film director, producer and writer."),
            ("Ecbal", "Ecbal is a genus of tropical flowering plants in the family Cucurbitaceae."),
            ("Elato", "Elato is a genus of flowering plants in the nettle family."),
            ("Jean Morel", "Jean Morel is a French novelist.")]
    c = common_ground("What profession did Ola Brandt and Pia Sorel both hold?", docs)
    assert c is not None and c.option == "film director" and [i for i, _ in c.evidence] == [0, 1]
    # the longest shared run that the question does not already say ("genus" is asked)
    assert common_ground("Ecbal and Elato are both genuses of which type of plants?", docs).option == \
        "flowering plants"
    assert compared("To what group do both Ecbal and Elato belong?", docs).option == "flowering plants"
    # nothing shared but a nationality, no "is a ..." to read, or no second thing: no answer
    assert common_ground("What do Pia Sorel and Jean Morel have in common?", docs) is None
    assert common_ground("What do Ola Brandt and Sam Kerr have in common?", docs) is None
    assert common_ground("What profession did Ola Brandt hold?", docs) is None


def test_what_two_things_have_in_common_reads_their_whole_descriptions():
    docs = [("Kazu Fuji", "Kazu Fuji (born 1970) is a Japanese professional wrestler, mixed martial artist and a "
             "former amateur wrestler."),
            ("Gil Yvel", "Gil Yvel (born 1976) is a retired Dutch mixed martial artist associated with a gym."),
            ("Art Labo", "Art Labo is an Armenian American disc jockey, songwriter, and radio station owner."),
            ("Scout Tufan", "Scout Tufan is an Armenian-American photojournalist and author based in Brooklyn."),
            ("Nick Chris", "Nick Chris is an American novelist, poet and critic, the author of sixteen books."),
            ("Rob Ebbs", "Rob Ebbs was an American film critic and historian, journalist, and author.")]
    # a list after the first comma is part of the description
    assert common_ground("What profession do Kazu Fuji and Gil Yvel have in common?", docs).option == \
        "mixed martial artist"
    # where they come from is asked: the nationality answers ("Armenian-American" read as two words)
    assert common_ground("What is the shared country of ancestry between Art Labo and Scout Tufan?", docs).option \
        == "Armenian"
    # not asked: a nationality is cut, and the description ends before ", the author of ..."
    assert common_ground("What occupation did Nick Chris and Rob Ebbs share?", docs).option == "critic"
    assert common_ground("What occupation did Art Labo and Scout Tufan share?", docs) is None
    # nationalities are no two things to compare ("the province where Serbian and Croatian are both official")
    langs = [("Serbian", "Serbian is a South Slavic language."), ("Croatian", "Croatian is a South Slavic language.")]
    assert common_ground("In which country is the province where Serbian and Croatian are both official?", langs) \
        is None


def test_a_choice_offered_with_and_is_compared_as_one_offered_with_or():
    assert compared("Who was born first out of Ola Brandt and Pia Sorel?", FILMS).option == "Ola Brandt"
    assert compared("Which film came out first, Harbour Lights and The Glass Orchard?", FILMS).option == \
        "The Glass Orchard"
    # "and" joining what a question asks about is no choice: what they share
    assert compared("What profession did Ola Brandt and Pia Sorel both hold?", FILMS).option == "film director"


def test_lone_surrogates_and_function_word_options_are_no_evidence():
    docs = [("\ud800", "\ud800 is a 1990 film."), ("B", "B is a 2000 film.")]
    assert compared("Which came first, \ud800 or B?", docs) is None
    assert compared("Were \ud800X and B from the same country?", docs) is None
    # "A" names no passage: the article "a" in a sentence is not the option
    assert compared("Which came first, A or B?", docs) is None


# -- the comparison template of a decomposition -----------------------------------------------------


def _steps(question: str, max_nodes: int = 8) -> list[tuple[str, list[str]]] | None:
    from searchsmith.models.choice import choice_graph

    g = choice_graph(question, max_nodes)
    return None if g is None else [(n["text"], n["depends_on"]) for n in g.to_json()["nodes"]]


def test_choice_graph_writes_one_step_per_option_and_compares_them() -> None:
    from searchsmith.models.choice import choice_graph
    from searchsmith.models.qdg import validate

    assert _steps("Which film was released first, Laura's Star or Wonder Woman?") == [
        ("Laura's Star was released", []), ("Wonder Woman was released", []), ("which is first of #1, #2", ["1", "2"])]
    # "who" is the asked word; "and" options after a comparing stem
    assert _steps("Who was born first out of Ann Smith and Bob Jones?") == [
        ("Ann Smith was born", []), ("Bob Jones was born", []), ("which is first of #1, #2", ["1", "2"])]
    # no comparative in the stem: Break's "which is true of"
    assert _steps("Which canal was built between 1836 and 1847, Washington City Canal or Whitewater Canal?") == [
        ("Washington City Canal was built between 1836 and 1847", []),
        ("Whitewater Canal was built between 1836 and 1847", []), ("which is true of #1, #2", ["1", "2"])]
    # three options; a question word inside the stem, not first, and the asked type after it left out
    three = _steps("As of 2010, which city is larger, Austin, Dallas, or Houston?")
    assert three is not None and [t for t, _ in three] == [
        "Austin As of 2010, is", "Dallas As of 2010, is", "Houston As of 2010, is", "which is larger of #1, #2, #3"]
    g = choice_graph("Which film was released first, Laura's Star or Wonder Woman?")
    assert g is not None and g.type == "split" and validate(g) == []


def test_choice_graph_leaves_other_questions_to_the_tagger() -> None:
    assert _steps("Who directed Jaws?") is None
    assert _steps("What profession did Ann Smith and Bob Jones both hold?") is None  # "and" without a comparison
    assert _steps("") is None
    # more options than the graph may hold
    assert _steps("Which is oldest, Rome, Athens, or Cairo?", max_nodes=3) is None
    assert _steps("Which is oldest, Rome, Athens, or Cairo?", max_nodes=4) is not None
