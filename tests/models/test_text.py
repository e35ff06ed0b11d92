"""The shared text rules of searchsmith.models.text: stop-words, sentences, token F1, entities,
JSONL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import iter_jsonl, read_jsonl
from searchsmith.models.text import (
    BM25_STOP_WORDS,
    QUERY_STOP_WORDS,
    answer_kind,
    answer_tokens,
    asked_head,
    asked_measure,
    asks_shown_type,
    asks_typed,
    country_of,
    demonym,
    entity_names,
    entity_spans,
    exact_match,
    figures,
    fold,
    how_to,
    missing_entities,
    normalize_answer,
    of_asked_type,
    pattern_entities,
    plural_question,
    relation_cues,
    sentence_texts,
    singular,
    split_sentences,
    states_life,
    token_f1,
    typed_span,
)


def test_stop_word_lists_one_per_purpose() -> None:
    assert BM25_STOP_WORDS < QUERY_STOP_WORDS  # the BM25 list is the short one
    assert {"the", "of", "which"} <= BM25_STOP_WORDS
    assert {"please", "tell", "show", "find"} <= QUERY_STOP_WORDS - BM25_STOP_WORDS


def test_squad_normalisation() -> None:
    assert normalize_answer("The  Cat's hat, an ANT!") == "cats hat ant"
    assert normalize_answer("don't") == "dont"  # official SQuAD: ASCII punctuation deleted
    assert normalize_answer("Paris [1].") == "paris 1"  # markers are plain text there
    # a generated answer: markers dropped, every non-word character splits words
    assert normalize_answer("Paris [1]. Don't—really", generated=True) == "paris don t really"
    assert answer_tokens("A theory of the atom", generated=True) == ["theory", "of", "atom"]
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert exact_match("Eiffel", "eiffel tower") == 0.0


def test_token_f1_known_values() -> None:
    # 2 of 3 prediction tokens right, 2 of 3 reference tokens found: F1 = 2/3
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    assert token_f1("cat sat on", "cat sat down") == pytest.approx(2 / 3)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("the", "an") == 1.0  # both normalise to nothing
    assert token_f1("", "cat") == 0.0
    # "the" dropped and [1] removed: 1 of 3 tokens right, recall 1 -> F1 = 0.5
    assert token_f1("The answer is Jupiter [1].", "Jupiter", generated=True) == pytest.approx(0.5)
    assert token_f1("The answer is Jupiter [1].", "Jupiter") == pytest.approx(0.4)  # "1" is a token


def test_sentence_spans_text_rule() -> None:
    text = 'First one. "Second!" he said.  Third?\n\nFourth line\nstill fourth.'
    spans = split_sentences(text)
    assert [text[a:b] for a, b in spans] == ["First one.", '"Second!" he said.', "Third?",
                                              "Fourth line\nstill fourth."]
    assert spans[0] == (0, 10) and spans[1] == (11, 29)
    assert sentence_texts(text) == [text[a:b] for a, b in spans]
    assert split_sentences("") == [] and split_sentences("  \n\n ") == []
    assert split_sentences("  no end  ") == [(2, 8)]


def test_a_title_or_places_abbreviation_ends_no_sentence() -> None:
    text = ("Born in St. Louis, Missouri, he met Dr. Watson. She became the world No. 1 in doubles. "
            "It was Smith vs. Jones. Then it ended at St.")
    assert sentence_texts(text) == ["Born in St. Louis, Missouri, he met Dr. Watson.",
                                    "She became the world No. 1 in doubles.", "It was Smith vs. Jones.",
                                    "Then it ended at St."]
    # a word that only ends like one still ends its sentence
    assert sentence_texts("He went to Gemst. Then home.") == ["He went to Gemst.", "Then home."]
    # a dot before a lower-case word or a parenthesis ends none ("Jr. (born 1900)", "Inc. is")
    assert sentence_texts("Alexander Henderson Jr. (born 1900) was a financier. Lush Ltd. is a retailer.") == \
        ["Alexander Henderson Jr. (born 1900) was a financier.", "Lush Ltd. is a retailer."]


def test_a_names_initial_ends_no_sentence() -> None:
    # "Alfred P" was a short answer: the sentence ended at the initial
    text = "A truck bomb in front of the Alfred P. Murrah Federal Building. J. R. R. Tolkien wrote it. Then."
    assert sentence_texts(text) == ["A truck bomb in front of the Alfred P. Murrah Federal Building.",
                                    "J. R. R. Tolkien wrote it.", "Then."]
    # "I" is a numeral as often ("World War I."), and a dotted abbreviation may end one ("the U.S.")
    assert sentence_texts("He fought in World War I. He died.") == ["He fought in World War I.", "He died."]
    assert sentence_texts("He moved to the U.S. The end.") == ["He moved to the U.S.", "The end."]


def test_sentence_lines_rule() -> None:
    text = "Version 2. it runs. Then 3 more.\nNext line\n\n(Aside.) \"Quote.\" End"
    # a line break always ends a sentence; ". " only before a capital, digit, quote or "(",
    # and not after a closing bracket or quote (the "text" rule splits there)
    assert sentence_texts(text, "lines") == ["Version 2. it runs.", "Then 3 more.", "Next line",
                                             '(Aside.) "Quote." End']
    assert sentence_texts(text)[-3:] == ["(Aside.)", '"Quote."', "End"]
    spans = split_sentences(text, "lines")
    assert all(text[a:b] == s for (a, b), s in zip(spans, sentence_texts(text, "lines")))
    with pytest.raises(ValueError, match="rule must be one of"):
        split_sentences(text, "words")  # type: ignore[arg-type]


def _typed(sentence: str) -> list[tuple[str, str]]:
    return [(sentence[s:e], t) for s, e, t in entity_spans(sentence)]


@pytest.mark.parametrize("sentence,expected", [
    ("On 12 March 2024, Northwind Labs sold 60 items for $10 each.",
     [("12 March 2024", "DATE"), ("Northwind Labs", "ENT"), ("60", "NUM"), ("$10", "NUM")]),
    # a leading function word is cut from a run; years and decades are dates
    ("The Kingsmen played in 1986 and in the 1960s.",
     [("Kingsmen", "ENT"), ("1986", "DATE"), ("1960s", "DATE")]),
    # a name keeps its trailing number or version; a date is claimed before a name
    ("Voyager 2 flew past Saturn in August 1981.",
     [("Voyager 2", "ENT"), ("Saturn", "ENT"), ("August 1981", "DATE")]),
    ("Quarry 3.0 cut latency, as seen In 1970.", [("Quarry 3.0", "ENT"), ("1970", "DATE")]),
    # identifiers, quoted and backticked spans (their inside), amounts with units
    ("Harbor & Finch set `max_tokens` in quarry.yaml to 20 ms for \"Hey Jude\", e.g. 3.5 % less.",
     [("Harbor & Finch", "ENT"), ("max_tokens", "ENT"), ("quarry.yaml", "ENT"), ("20 ms", "NUM"),
      ("Hey Jude", "ENT"), ("3.5 %", "NUM")]),
    ("Released on 2024-03-12 and March 5, 2025.",
     [("2024-03-12", "DATE"), ("March 5, 2025", "DATE")]),
    # a figure after a month's name is no day of it
    ("Uptime was: April 99.95%, May 99.90%.", [("April", "ENT"), ("99.95%", "NUM"), ("May", "ENT"), ("99.90%", "NUM")]),
    # an ordinal is one figure; a figure inside a word ("3D", "1080p", "100x") is none
    ("She played in Miracle on 34th Street, a 3D film at 1080p, 100x the 21st take.",
     [("Miracle", "ENT"), ("34th", "NUM"), ("Street", "ENT"), ("21st", "NUM")]),
    # a run's closing possessive is cut; one inside a run stays
    ("The girlfriend of Alex Keaton's actor starred in Ender's Game.",
     [("Alex Keaton", "ENT"), ("Ender's Game", "ENT")]),
    ("He met James’s wife and the actors' union.", [("James", "ENT")]),
    # "of" and "of the" join a name's words; a lower-case word between ends it
    ("In 2004, Bank of America bought it; he joined the Order of the Golden Fleece of Burgundy.",
     [("2004", "DATE"), ("Bank of America", "ENT"), ("Order of the Golden Fleece of Burgundy", "ENT")]),
    ("It is the capital of France, not of the Alps.", [("France", "ENT"), ("Alps", "ENT")]),
])
def test_entity_spans_types_and_offsets(sentence: str, expected: list[tuple[str, str]]) -> None:
    assert _typed(sentence) == expected


def test_entity_spans_skip_what_capitals_do_not_prove() -> None:
    # a lone capitalised first word, a capitalised function word, lower-case hyphenated words
    assert entity_spans("Saturn is far.") == []
    assert _typed("It was completed and In 1970 it opened.") == [("1970", "DATE")]
    assert entity_spans("a real-time, well-known system") == []
    spans = entity_spans("Harbor & Finch bought Brightline Systems on 12 March for $19.")
    assert all(end <= start for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False))  # ordered, disjoint


@given(st.lists(st.sampled_from(["Miracle", "on", "34th", "Street", "3D", "1080p", "100x", "Keaton's", "Ender's",
                                  "Game", "in", "1994", "$10", "3.5", "%", "20ms", "(", ")", ",", "the", "21st"]),
                min_size=1, max_size=12))
def test_a_sentence_holds_every_entity_found_in_it(words: list[str]) -> None:
    # the citation veto needs a passage to hold every entity of a sentence: the sentence's own
    # passage must, or the sentence it was quoted from could never be cited ("34" of "34th")
    sentence = "It was " + " ".join(words) + "."
    assert missing_entities(pattern_entities(sentence), sentence) == []


def test_pattern_entities_are_the_span_texts_once_in_order() -> None:
    s = "Voyager 2 met Voyager 2 near Saturn."
    assert pattern_entities(s) == ["Voyager 2", "Saturn"]
    assert pattern_entities("") == []


def test_missing_entities_keep_order_and_match_whole_tokens_only() -> None:
    # (the serving cases "Voyager 2" / "2.5" / "3.0.1" are in tests/serving/pipeline/test_answer_hygiene.py)
    passage = "Harbor &  Finch opened in 1981; config.yaml sets 12 workers."
    ents = ["harbor & finch", "1981", "config.yaml", "2", "Finch Labs", "12 workers"]
    assert missing_entities(ents, passage) == ["2", "Finch Labs"]
    assert missing_entities([], passage) == []


def test_read_jsonl_reports_every_bad_line_with_file_and_line(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"q": "a", "s": 1}\n\n{oops\n[1, 2]\n{"q": "b"}\n{"q": "c", "s": 2}\n', encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        read_jsonl(f, ("q", "s"), "routing data")
    msg = str(err.value)
    assert msg.startswith(f"routing data {f}: 3 problem(s)")
    assert "d.jsonl:3: not valid JSON" in msg and "each line must be one JSON object" in msg
    assert "d.jsonl:4: expected a JSON object, got list" in msg
    assert "d.jsonl:5: missing field(s) ['s']; required: ['q', 's']" in msg
    # one bad line: the message is that line
    f.write_text('{"q": "a"}\n{"q": "b", "s": 1}\n', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"^\S*d\.jsonl:1: missing field\(s\) \['s'\]"):
        read_jsonl(f, required=("q", "s"))
    assert read_jsonl(f, ("q",)) == [{"q": "a"}, {"q": "b", "s": 1}]


def test_read_jsonl_empty_and_missing_files(tmp_path) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"is empty: no records; .* with fields \['id'\]"):
        read_jsonl(empty, ("id",))
    assert read_jsonl(empty, allow_empty=True) == []
    with pytest.raises(ConfigError, match=r"--data: file '.*nope\.jsonl' does not exist \(check the path\)"):
        read_jsonl(tmp_path / "nope.jsonl", what="--data")
    with pytest.raises(ConfigError, match=r"does not exist \(set data\.dir\)"):
        list(iter_jsonl(tmp_path / "nope.jsonl", missing_hint="set data.dir"))


def test_iter_jsonl_yields_line_numbers_and_stops_at_the_first_bad_line(tmp_path) -> None:
    f = tmp_path / "i.jsonl"
    f.write_text('{"a": 1}\n\n{"a": 2}\n{bad\n{"a": 3}\n', encoding="utf-8")
    it = iter_jsonl(f, ("a",))
    assert next(it) == (1, {"a": 1}) and next(it) == (3, {"a": 2})
    with pytest.raises(ValidationError, match=r"i\.jsonl:4: not valid JSON"):
        next(it)


# -- short answers ---------------------------------------------------------------------------
@pytest.mark.parametrize("question, kind", [
    ("When was Quarry 3.0 released?", "DATE"),
    ("In what year did the war end?", "DATE"),
    ("What is the birthday of the man who played Lex Luthor?", "DATE"),
    ("How many vacuum tubes did ENIAC use?", "NUM"),
    ("About how many vacuum tubes did ENIAC use?", "NUM"),
    ("What is the default value of cron.timezone in Tidewater?", "NUM"),
    ("At what temperature is focaccia baked?", "NUM"),
    ("Which port does it listen on by default?", "NUM"),
    ("In which Quarry version was the outage fixed?", "NUM"),
    ("Who discovered Uranus?", "ENT"),
    ("Which file contains the code for Quarry's HNSW index?", "ENT"),
    ("What event caused the outage?", "ENT"),  # "event" asks for no quantity
    ("The actor known as Freddie won what award?", "ENT"),
    ("The museum is on an island with a population of what?", "NUM"),  # a measure, then "of what"
    ("The museum is on an island with a name of what?", "ENT"),
    ("Is Quarry written in Rust?", "YESNO"),
    ("Was the man who founded Quarry born in 1950?", "YESNO"),  # "who" only in a clause
    ("Are Aladdin and Song of the South produced by the same company?", "YESNO"),
    ("Who lived longer, Elia Kazan or Moustapha Akkad?", "CHOICE"),
    ("Which band has more members, DC Talk or Manchester Orchestra?", "CHOICE"),
    ("Which is older, Ann, or Bob?", "CHOICE"),
    # ", or bazar," names the same thing again: nothing to choose from
    ("The Nimavar school in the Nimavar Bazaar, or bazar, is located in which country?", "ENT"),
    ("How do you fix the error?", "OTHER"),
    ("Why did the outage happen?", "OTHER"),
    ("Tell me about Quarry.", "OTHER"),
])
def test_answer_kind(question: str, kind: str) -> None:
    assert answer_kind(question) == kind


@pytest.mark.parametrize("question, plural", [
    ("What are the names of the moons of Mars?", True),
    ("Which capital cities lie on the Danube?", True),
    ("Which parts is a Quarry deployment built from?", True),
    ("Which file implements it?", False),
    ("Who discovered Uranus?", False),
    ("What does Quarry do?", False),
    ("Which series won?", False),
    ("Quarry is fast.", False),
])
def test_plural_question(question: str, plural: bool) -> None:
    assert plural_question(question) is plural


@pytest.mark.parametrize("question, sentences, span", [
    # the kind asked for, not the first entity of the sentence
    ("When was Quarry 3.0 released?", ["Northwind Labs released Quarry 3.0 on 2024-09-10."], "2024-09-10"),
    # names the question holds are no answer; its words are cut from a candidate's ends
    ("Who discovered Uranus?", ["Uranus was discovered by William Herschel in 1781."], "William Herschel"),
    ("In which Quarry version was the outage fixed?", ["Northwind Labs fixed it in Quarry 3.0.2."], "3.0.2"),
    ("What is the default value of snapshot.interval_s in Lumen?",
     ["Set it in lumen.yaml: `snapshot: interval_s: 300`."], "300"),
    # a name question takes a name before a bare number ("Lumen 4.0.1" is no company)
    ("Which company released the newest Lumen?", ["Lumen 4.0.1 was released by Brightline Systems."],
     "Brightline Systems"),
    # the candidate with the most of the question's words near it, over every sentence
    ("Who sent the first message over ARPANET?",
     ["ARPANET was funded by the Advanced Research Projects Agency.",
      "The first message was sent by Charley Kline at UCLA in 1969."], "Charley Kline"),
    # the fallback kind only when no sentence holds the first: a date, else a number
    ("When was the dam completed?", ["The dam is 111 metres high.", "It was completed in 1970."], "1970"),
    # (its height answers no "when was it completed?": the sentence states no completion; it was "111")
    ("When was the dam completed?", ["The dam is 111 metres high."], ""),
    # a place question prefers the name after "in" / "at" (here over a tie in nearby words)
    ("Where is the magazine headquartered that Robert McElroy writes for?",
     ["McElroy was educated by the Jesuits and writes for America.",
      "America is a weekly magazine headquartered in midtown Manhattan."], "Manhattan"),
    ("What city is the star of Sous les pieds des femmes from?",
     ["Claudia Cardinale was born Claude Joséphine Rose Cardinale in La Goulette."], "La Goulette"),
    # not for a question that asks for no place
    ("Who educated the writer Robert McElroy?",
     ["McElroy was educated by the Jesuits in midtown Manhattan."], "Jesuits"),
    # an acronym in parentheses is the name before it: that name answers, or none when the
    # question names it
    ("What league does the team play for?", ["The team plays in Major League Soccer (MLS)."], "Major League Soccer"),
    ("What league does the team play for?", ["The team plays (MLS)."], "MLS"),  # no name before it
    ("Daddy was an American Pit Bull Terrier integral to the work of what trainer?",
     ["The American Pit Bull Terrier (APBT) is a breed of dog.",
      "Daddy was integral to the work of trainer Cesar Millan."], "Cesar Millan"),
    # a weekday or a month alone is no name
    ("Which season was the runner-up on?", ["The third season premiered on Monday, 19 January 2004."], ""),
    # "which year" asks for the year of a date, "when" for the date
    ("In which year was King George V born?", ["George V was born on 3 June 1865."], "1865"),
    ("When was King George V born?", ["George V was born on 3 June 1865."], "3 June 1865"),
    ("What year did the dam open?", ["The dam is 111 metres high."], "111"),
    # a plural question takes the list its best candidate stands in
    ("Which capital cities lie on the Danube?",
     ["The Danube flows through Vienna, Bratislava, Budapest and Belgrade, said Ada Lovelace."],
     "Vienna, Bratislava, Budapest and Belgrade"),
    ("Which city lies on the Danube?", ["The Danube flows through Vienna, Bratislava and Budapest."], "Vienna"),
    ("Who is the dog behaviorist?", ["Daddy was Cesar Millan's dog."], "Cesar Millan"),  # no possessive
    # no span for yes / no, choice or how questions, nor when no sentence has the kind
    ("Is Quarry written in Rust?", ["Quarry is written in Rust."], ""),
    ("Who lived longer, Elia Kazan or Moustapha Akkad?", ["Elia Kazan died in 2003 aged 94."], ""),
    ("How do you fix the error?", ["Raise snapshot.interval_s to 600."], ""),
    ("Who wrote Quarry?", ["Nobody remembers."], ""),
    ("Who wrote Quarry?", [], ""),
    # a nationality answers a question about nationality or language, not "where" nor "who"
    ("Where was Mark Steven Johnson born?",
     ["Mark Steven Johnson is an American film director, born in Hastings, Minnesota."], "Hastings"),
    ("Who was the main vocal of Snow Patrol?",
     ["Snow Patrol are a Northern Irish-Scottish rock band fronted by Gary Lightbody."], "Gary Lightbody"),
    ("What nationality is Mark Steven Johnson?", ["Mark Steven Johnson is an American film director."], "American"),
    ("Where did he die?", ["He was an American-West German actor."], ""),
])
def test_typed_span(question: str, sentences: list[str], span: str) -> None:
    assert typed_span(question, sentences) == span


def test_relation_cues_are_the_words_a_passage_states_a_relation_with():
    assert {"married", "wife", "husband"} <= relation_cues("Who is the spouse of Millard Webb?")
    assert "born" in relation_cues("What is the place of birth of Mark Steven Johnson?")
    assert {"son", "daughter"} <= relation_cues("Who is the father of Albert I?")
    assert relation_cues("Which film did Millard Webb direct?") == set()


def test_typed_span_counts_a_relation_cue_as_the_questions_word(monkeypatch):
    q = "Who is the spouse of Millard Webb?"
    sentences = ["The Sea Beast starred Dolores Costello.", "In 1929 he married Mary Eaton."]
    # "married" states what "spouse" asks: the name beside it answers
    assert typed_span(q, sentences) == "Mary Eaton"
    import searchsmith.models.text as text

    monkeypatch.setattr(text, "RELATION_CUES", {})
    assert typed_span(q, sentences) == "Sea Beast"  # no word of the question near any: the first name


def test_typed_span_without_fallback_takes_the_asked_kind_only():
    s = ["The company paid $47 billion for it."]
    assert typed_span("When did the company buy it?", s) == "$47 billion"  # a figure with its scale
    assert typed_span("When did the company buy it?", s, fallback=False) == ""


@pytest.mark.parametrize(("question", "head"), [
    ("Which river system in Chilhowie, Virginia was the starting place for most Longhunters?", ["river", "system"]),
    ("Politician Lyman Sherwood was born in what New York county?", ["county"]),
    ("Sara Symington competed in which Olympic Games held in Sydney?", ["game"]),  # its last word, capitalised too
    ("What political party was the socialist candidate part of?", ["political", "party"]),
    ("Which country Araya Selassie Yohannes's wife is from?", ["country"]),  # a name after the noun ends it
    ("Which country the director of film The White Countess is from?", ["country"]),  # so does an article
    ("Which award the director of film Jo Jeeta Wohi Sikandar received?", ["award"]),
    ("In which counties is it?", ["county"]),  # singular
    ("Which file contains the code for Tidewater's retries?", ["file"]),  # a verb with its object ends it
    ("What kind of unit was led by him?", []),  # a generic head
    ("Who played the team which won the cup?", []),  # "which" is not the question's word
    ("Which of the teams for which he was principal was sold?", ["team"]),  # "of the" skipped
    # a statement asking at its end: its last "what", not the relative "who" before it
    ("The physicist who shared the prize has a centre in what country?", ["country"]),
    ("When was it built?", []),
    ("", []),
])
def test_asked_head_is_the_noun_a_what_or_which_question_asks_for(question, head):
    assert asked_head(question) == head


@pytest.mark.parametrize(("question", "sentences", "span"), [
    # a name holding the asked noun answers, whole, before one nearer the question's words
    ("Politician Lyman Sherwood was born in what New York county?",
     ["Lyman Sherwood (August 5, 1802 Hoosick, Rensselaer County, New York) was a lawyer."], "Rensselaer County"),
    ("What political party was the socialist candidate part of?",
     ["He twice ran as candidate for Vice President of the United States on the Socialist Party of America ticket."],
     "Socialist Party of America"),
    ("Which river system in Chilhowie was the starting place for most long hunts?",
     ["Most long hunts started in Tennessee, in the Holston River Valley near Chilhowie."], "Holston River Valley"),
    # the noun right before a name ("the play Cymbeline"); a quoted title for a work
    ("He won the Laurence Olivier Award for his performance in which play?",
     ["He won the Laurence Olivier Award as Best Newcomer for his performance in the play Cymbeline."], "Cymbeline"),
    ("For which film did Sissy Spacek win an Academy Award?",
     ['Sissy Spacek won an Academy Award as Loretta Lynn in "Coal Miner\'s Daughter".'], "Coal Miner's Daughter"),
    # a country for "which country"; never for a person
    ("Kacha is part of a state bordered on the northwest by which country?",
     ["Ukraine is a state in Eastern Europe, bordered on the northwest by Belarus."], "Belarus"),
    ("Pro Evolution Soccer 2016 includes which footballer on the cover?",
     ["The US cover of Pro Evolution Soccer 2016 features Neymar."], "Neymar"),
    # a file's name or path for "which file", before an error code nearer the question's words
    ("Which file contains the code for Tidewater's retries?",
     ["Tidewater's error codes (TDW-301 and TDW-420) are defined in `tidewater/errors/codes.go`."],
     "tidewater/errors/codes.go"),
])
def test_typed_span_prefers_the_asked_type(question, sentences, span):
    assert typed_span(question, sentences) == span


def test_typed_span_reads_no_name_in_another_language_and_a_place_the_asked_verb_states():
    q = "Who is the president of the organization that Avery Brundage led?"
    s = ["The International Olympic Committee (IOC; French: Comité international olympique, CIO) is led by "
         "its president Thomas Bach."]
    assert typed_span(q, s) == "Thomas Bach"
    assert typed_span(q, ["Avery Brundage led the Committee (French: Comité international olympique)."]) == \
        "Committee"
    # "headquartered in" states where: that name over another as near the question's words
    q = "Where is the magazine headquartered that Robert W. McElroy writes for?"
    s = ["America is a weekly magazine published by the Jesuits of the United States and headquartered in "
         "midtown Manhattan."]
    assert typed_span(q, s) == "Manhattan"


def test_a_nationality_answers_which_country_as_its_country():
    assert [country_of(x) for x in ("American", "West German", "Italian-American", "Zzz")] == \
        ["United States", "Germany", "Italy", "Zzz"]
    s = ["Adlai Stevenson was an American politician who served as Vice President."]
    assert typed_span("Which country Letitia Stevenson's husband is from?", s) == "United States"
    assert typed_span("Who was Letitia Stevenson's husband?", s) not in ("United States", "American")  # not for "who"


def test_a_questions_name_with_its_initial_written_out_is_no_answer():
    q = "Where was the father of Alexander D. Henderson Jr. born?"
    assert typed_span(q, ["Alexander Dawson Henderson Jr. (born 1900) was born in Brooklyn."]) == "Brooklyn"
    assert typed_span(q, ["Alexander Dawson Henderson Jr. was a financier."]) == ""  # not "Dawson"
    assert typed_span("Where was Alexander Henderson born?", ["Daniel Dawson was born in Leeds."]) == "Leeds"


def test_the_asked_type_counts_as_type_fit_words_more_question_words(monkeypatch):
    import searchsmith.models.text as text

    q = "Politician Lyman Sherwood was born in what New York county?"
    s = ["Lyman Sherwood was born in Hoosick, Rensselaer County, New York."]
    assert typed_span(q, s) == "Rensselaer County"
    monkeypatch.setattr(text, "TYPE_FIT_WORDS", 0)
    assert typed_span(q, s) == "Hoosick"  # the first name after "born in", as before the rule


def test_a_name_holding_a_country_answers_which_country_as_that_country():
    q = "The physicist who shared the prize has a centre dedicated to graphene in what country?"
    s = ["The Graphene Research Centre (GRC), at the National University of Singapore (NUS), is dedicated "
         "to graphene research."]
    assert asks_shown_type(q) and asks_shown_type("Which county borders Lake County?")
    assert not asks_shown_type("Who shared the prize?") and not asks_shown_type("What city is it in?")
    assert typed_span(q, s) == "Singapore"
    assert typed_span("Who shared the prize for graphene research?", s) != "Singapore"  # only for a country
    # typed: only a candidate of the asked type, "" without one
    s2 = ["Andre Geim shared the prize for graphene with Konstantin Novoselov."]
    assert typed_span(q, s2) != "" and typed_span(q, s2, typed=True) == ""
    assert typed_span(q, [*s2, *s], typed=True) == "Singapore"


def test_a_place_prefix_is_no_part_of_a_name():
    s = "It was bought by Charlotte-based Bank of America and by Vietnamese-born Tran Anh Hung."
    assert entity_names(s) == ["Bank of America", "Tran Anh Hung"]
    assert entity_names("He was an American-born financier.") == []  # the prefix alone names nothing
    assert entity_names("It bought the Boston - based bank Fleet Ltd.") == ["Fleet Ltd"]  # as tokenised text writes it


def test_the_question_words_near_a_name_skip_its_dated_parentheses():
    # "chairman" is the 11th word after the name, the 8th without "(born October 9, 1959)"
    q = "Who is the chairman of the company that bought the bank?"
    s = ["Brian Thomas Moynihan (born October 9, 1959) is an American lawyer, businessman and the chairman "
         "and CEO of Bank of America."]
    assert typed_span(q, s, exclude=["Bank of America"]) == "Brian Thomas Moynihan"
    # words in parentheses without a year still count
    s2 = ["Brian Thomas Moynihan (a lawyer, a businessman, a father) is an American and the chairman and "
          "CEO of Bank of America."]
    assert typed_span(q, s2, exclude=["Bank of America"]) == "CEO of Bank of America"


def test_a_nationality_asked_for_counts_as_the_asked_type():
    s = ["Bimbos of the Death Sun is a novel by Sharyn McCrumb, an American writer."]
    assert typed_span("What citizen was the author of Bimbos of the Death Sun?", s) == "American"
    assert typed_span("Who was the author of Bimbos of the Death Sun?", s) == "Sharyn McCrumb"


def test_the_initials_of_a_questions_name_are_the_questions():
    q = 'What is the name for the adventure in "Tunnels and Trolls", a game designed by Ken St. Andre?'
    s = ["Arena of Khazan is an adventure for T&T, the role-playing game."]
    assert typed_span(q, s) == "Arena of Khazan"
    assert typed_span("What is the adventure for the game?", s) == "T&T"  # no name of the question's
    # the initials of a name's first words too: "DSG Park" is "Dick's Sporting Goods Park"
    s = ["Dick's Sporting Goods Park, also known as DSG, is home to the Colorado Rapids."]
    assert typed_span("What team uses Dick's Sporting Goods Park?", s) == "Colorado Rapids"


def test_no_number_answers_who():
    s = ["The grandfather of the countess was recorded in 1234 and in 12 charters."]
    assert typed_span("Who is the grandfather of the countess?", s) == ""
    assert typed_span("What is the grandfather of the countess recorded in?", s) == "1234"  # a name, else a number


def test_a_lifespan_gives_the_death_or_birth_date_asked_for():
    s = ["John Knox (1505–1572), a Scot who had studied under Calvin, led the Reformation in 1560."]
    assert typed_span("What year did the author of the pamphlet die?", s) == "1572"
    assert typed_span("When was the author of the pamphlet born?", s) == "1505"
    assert typed_span("When did the Reformation in Scotland happen?", s) == "1560"  # not asked: the nearest
    assert states_life("What year did he die?", s[0]) and not states_life("What year did he lead it?", s[0])
    assert not states_life("When did he die?", "He led the Reformation in 1560.")
    # "(born 10 May 1943)" is a birth date, for a birth question only
    s = ["Hans Michel Piech (born 10 May 1943) is an Austrian lawyer, married in 1988."]
    assert typed_span("When is Susanne Porsche's husband's birthday?", s) == "10 May 1943"
    assert states_life("When is his birthday?", s[0]) and not states_life("When did he die?", s[0])


def test_a_year_answers_what_century_as_its_century():
    s = ["A Treatise Concerning the Principles of Human Knowledge is a 1710 work by George Berkeley."]
    assert typed_span("What century did the author of the Treatise live in?", s) == "18th century"
    assert typed_span("What year was the Treatise published?", s) == "1710"
    assert typed_span("What century was it?", ["It was written in 1911 and revised in 2011."]) == "20th century"


def test_of_asked_type():
    assert of_asked_type("What political party was he part of?", "Socialist Party of America")
    assert of_asked_type("Which country borders Ukraine on the northwest?", "Belarus")
    assert not of_asked_type("Which country borders Ukraine on the northwest?", "Eastern Europe")
    assert not of_asked_type("Who is the spouse of the actress who plays Leslie Knope?", "Amy Poehler")


def test_typed_span_excludes_the_names_it_is_told():
    # the passage a chain's bridge led to is about its title: the title is no answer there
    s = ["Mark Steven Johnson married Ann Lee in 1990."]
    assert typed_span("Who did the director of film X marry?", s) == "Mark Steven Johnson"
    assert typed_span("Who did the director of film X marry?", s, exclude=["Mark Steven Johnson"]) == "Ann Lee"
    # the excluded name written otherwise, with another title, is excluded too
    s = ["The dress was worn by Princess Elizabeth at her wedding to Prince Philip in 1947."]
    q = "Who is the spouse of the longest reigning monarch?"
    assert typed_span(q, s) == "Princess Elizabeth"
    assert typed_span(q, s, exclude=["Queen Elizabeth II"]) == "Prince Philip"


def test_entity_names_are_the_names_not_dates_numbers_or_nationalities():
    s = "When in Rome is a 2010 American film directed by Mark Steven Johnson on 5 May 2010 in Quarry 3.0."
    assert entity_names(s) == ["Rome", "Mark Steven Johnson", "Quarry 3.0"]
    assert entity_names("") == [] and entity_names("Ada met Ada.") == ["Ada"]


@pytest.mark.parametrize(("span", "is_demonym"), [
    ("American", True), ("Northern Irish-Scottish", True), ("American-West German", True),
    ("Mexican-American", True), ("west german", True), ("Thai", True), ("Soviet", True),
    ("Sweden", False), ("United States", False), ("German Army", False), ("Northern", False), ("", False),
    ("Hastings, Minnesota", False),
])
def test_demonym(span: str, is_demonym: bool) -> None:
    assert demonym(span) is is_demonym


_PIECES = st.sampled_from(["in", "at", "the", "(", ")", "(MLS)", "Major", "League", "Soccer", "Monday", "May",
                           "3 June 1865", "born", "married", "Hastings", ",", "A", "B.", "St.", "'s", "1990", "and"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["Where was X born?", "In which year was X born?", "What league does X play in?",
                        "Who is the spouse of X?", "Who was born first out of A and B?", "What city is X from?"]),
       st.lists(st.lists(_PIECES, max_size=14).map(" ".join), max_size=3))
def test_typed_span_over_places_acronyms_and_cues_quotes_the_sentences(question: str, sentences: list[str]) -> None:
    span = typed_span(question, sentences)
    assert all(any(w in s for s in sentences) for w in span.replace(", ", " ").split())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.lists(st.text(max_size=120), max_size=3))
def test_typed_span_never_fails_and_quotes_the_sentences(question: str, sentences: list[str]) -> None:
    # any text, lone surrogates and control characters included: a span of the sentences or ""
    span = typed_span(question, sentences)
    words = " ".join(sentences).split()
    assert all(any(w in s for s in words) for w in span.split())
    assert answer_kind(question) in ("DATE", "NUM", "ENT", "YESNO", "CHOICE", "OTHER")


# ------------------------------------------------------------------------- figures of a dimension
@pytest.mark.parametrize(("question", "dims"), [
    ("At what temperature is rosemary focaccia baked?", ("temperature",)),
    ("How hot should the oven be?", ("temperature",)),
    ("How long does banana bread bake?", ("duration", "length")),
    ("What is the timeout of a request?", ("duration",)),
    ("How tall is the Eiffel Tower?", ("length",)),
    ("Which port does it listen on by default?", ("port",)),
    ("In which Quarry version was the outage fixed?", ("version",)),
    ("How much does Lumen Cloud cost per month?", ("money",)),
    ("What is the default value of cron.timezone in Tidewater?", ("default",)),
    ("What is the population of Paris?", ()),
    ("How many vacuum tubes did ENIAC use?", ()),
    ("How much did Quarry 3.0 cut the p99 latency?", ("duration",)),  # the measured noun says it
    ("How much of the land is forest?", ()),
    ("Who founded Quarry?", ()),
    ("Is the default port 7420?", ()),
])
def test_asked_measure(question, dims):
    assert asked_measure(question) == dims
    assert asks_typed(question) == bool(dims) or asks_shown_type(question)


def test_a_figure_of_the_asked_dimension_answers_with_its_unit():
    recipe = ["Rosemary focaccia (Italian), serves 8.",
              "Top with rosemary, oil and sea salt and bake at 220 degrees Celsius for 25 minutes."]
    q = "At what temperature is rosemary focaccia baked?"
    assert typed_span(q, recipe) == "220 degrees Celsius"  # not "serves 8", not "25 minutes"
    assert typed_span(q, recipe[:1]) == "8" and typed_span(q, recipe[:1], typed=True) == ""
    assert typed_span("At what temperature is it baked?", ["Bake it at 180°C."], typed=True) == "180°C"
    bread = ["Banana bread (American), serves 10.", "Bake for about 60 minutes, until a skewer comes out clean."]
    assert typed_span("How long does banana bread bake?", bread) == "about 60 minutes"
    assert typed_span("How long is the Nile?", ["The Nile is about 6,650 km long."]) == "about 6,650 km"
    q = "How much does Lumen Cloud cost per month on the Starter plan?"
    assert typed_span(q, ["It has 3 plans.", "The Starter plan costs $19 per month."], typed=True) == "$19"
    q = "In which Quarry version was the Quarry Cloud outage fixed?"
    assert typed_span(q, ["It took 2 hours.", "The fix shipped in Quarry 3.0.2."]) == "3.0.2"
    assert typed_span(q, ["It took 2 hours."], typed=True) == ""
    # without a dimension the rule is as before: any figure
    assert typed_span("How many people does it serve?", recipe[:1]) == "8"


def test_a_port_is_the_figure_after_port_a_host_or_docker_p():
    q = "Which port does the server listen on?"
    assert typed_span(q, ["Northwind Labs released Quarry 1.0 on 2021-04-20."], typed=True) == ""
    assert typed_span(q, ["By default the server listens on port 7420."], typed=True) == "7420"
    # inside a quoted command, which is one entity
    assert typed_span(q, ["`docker run -p 7420:7420 northwind/quarry:3.0`"], typed=True) == "7420"
    assert typed_span(q, ["`curl http://localhost:8088/health` should answer `ok`."], typed=True) == "8088"
    assert typed_span(q, ["At 10:30 the server restarted."], typed=True) == ""  # a time, no port


def test_a_default_is_a_value_stated_as_one_or_given_to_the_asked_key():
    q = "What is the default value of cron.timezone in Tidewater?"
    assert typed_span(q, ["By default the server listens on port 8088.", "Default: `UTC`."], typed=True) == "UTC"
    assert typed_span(q, ["`cron: timezone: UTC`"], typed=True) == "UTC"
    overview = ("Out of the box, `retry.max_attempts` is `5` (how many times a job is tried); "
                "`cron.timezone` is `Europe/Paris` (the time zone of cron expressions).")
    assert typed_span(q, [overview], typed=True) == "Europe/Paris"
    q = "What is the default value of cache.max_size_gb in Atlasgrid?"
    code = "The code for Atlasgrid's tile cache lives in `atlasgrid/cache/disk.py`."
    assert typed_span(q, [code]) == "atlasgrid/cache/disk.py" and typed_span(q, [code], typed=True) == ""
    assert typed_span(q, [code, "Default: `20`. Allowed values: 1 to 500."], typed=True) == "20"


def test_a_figure_with_a_capitalised_unit_is_no_name():
    s = "Atlasgrid needs Python 3.10 or newer and 20 GB of disk."
    assert (s.index("20 GB"), s.index("20 GB") + 5, "NUM") in entity_spans(s)
    assert "GB" not in entity_names(s)


def test_a_questions_words_count_near_a_candidate_in_any_inflection(monkeypatch):
    import searchsmith.models.text as text

    # "fixed" in the question meets "fix" in the sentence; a release note of another version
    # holds the product's name only
    q = "In which Quarry version was the Quarry Cloud outage fixed?"
    s = ["Quarry 3.0.1 is out (1 October 2024): a bug-fix release for the 3.0 line.",
         "The fix shipped in Quarry 3.0.2."]
    assert typed_span(q, s) == "3.0.2"
    monkeypatch.setattr(text, "fold", lambda w: w)
    assert typed_span(q, s) != "3.0.2"


@pytest.mark.parametrize(("plural", "one"), [
    ("clubs", "club"), ("documentaries", "documentary"), ("genuses", "genus"), ("churches", "church"),
    ("indexes", "index"), ("classes", "class"), ("Rivers", "river"), ("species", "species"),
    ("series", "series"), ("status", "status"), ("analysis", "analysis"), ("class", "class"), ("bus", "bus"),
])
def test_singular_is_the_one_rule_for_plurals(plural, one):
    # the asked type's head ("Which clubs ...?") and a choice's descriptive words ("both
    # genuses of ...") are read with the same rule
    assert singular(plural) == one


@pytest.mark.parametrize(("word", "folded"), [
    ("fixed", "fix"), ("fixes", "fix"), ("fix", "fix"), ("listens", "listen"), ("listening", "listen"),
    ("released", "releas"), ("release", "release"), ("releases", "releas"), ("bus", "bus"), ("4.0", "4.0"),
])
def test_fold_is_the_one_rule_for_inflections(word, folded):
    assert fold(word) == folded


def test_a_name_ending_in_a_version_keeps_its_dotted_parts():
    # "Apache-2.0" was the name "Apache-2", and ".0 licence" hid the asked type after it
    s = "Quarry is written in Rust and published under the Apache-2.0 licence."
    assert "Apache-2.0" in entity_names(s)
    assert typed_span("Under which licence is Quarry published?", [s]) == "Apache-2.0"


def test_astronomical_distances_are_lengths():
    s = "Mars orbits at an average distance of 1.52 astronomical units, about 227.9 million km."
    assert typed_span("How far from the Sun does Mars orbit on average?", [s], typed=True) in (
        "1.52 astronomical units", "about 227.9 million km")
    assert typed_span("How far away is Sirius?", ["Sirius is 8.6 light-years away."]) == "8.6 light-years"


def test_a_count_written_out_answers_how_many():
    # "Berlin" answered "How many legs ...?": a count in words was no candidate, and a name was
    s = "Karl Kraepelin worked in Berlin; scorpions have eight legs."
    assert typed_span("How many legs does the animal have?", [s]) == "eight"
    assert typed_span("When did he work in Berlin?", [s]) == ""  # a count is no date
    # "one" is no count; nor is a sentence not on legs any answer ("Berlin" was, as a fallback name)
    assert typed_span("How many legs does it have?", ["One of them lives in Berlin."]) == ""


def test_a_figure_of_the_asked_dimension_nearest_the_question_words_answers():
    # "How far" is asked as a distance; of two lengths in the sentence, the one next to it answers
    s = "It is 6,779 km across and orbits at an average distance of 1.52 astronomical units."
    assert typed_span("How far from the Sun does Mars orbit on average?", [s]) == "1.52 astronomical units"
    # between names a tie still goes to the first, often the sentence's subject
    assert typed_span("Who is the chairman?", ["Brian Moynihan is the chairman of Bank of America."]) == \
        "Brian Moynihan"


def test_a_change_stated_as_a_range_answers_with_both_ends():
    s = "Version 3.0 brings tiered segment storage that cut p99 query latency from 48 ms to 21 ms."
    assert typed_span("How much did Quarry 3.0 cut the p99 query latency?", [s]) == "from 48 ms to 21 ms"
    assert typed_span("How long does the loaf bake?", ["Bake from 50 to 60 minutes."]) == "from 50 to 60 minutes"
    # "from" not before a range: the figure alone
    assert typed_span("How long does it bake?", ["Bake for about 60 minutes, from the oven to the table."]) == \
        "about 60 minutes"


ACQUIRED = ("Harbor & Finch announced on 12 March 2024 that it has acquired Brightline Systems, the Austin "
            "company behind Lumen, the in-memory cache and Beacon, the metrics and log collection agent.")


def test_a_name_in_an_appositive_of_a_known_name_is_not_the_asked_type_of_another():
    # "the Austin company" describes Brightline Systems: "Austin" answered "Which company acquired it?"
    q = "Which company acquired Brightline Systems?"
    assert typed_span(q, [ACQUIRED], exclude=["Brightline Systems"], typed=True) == ""
    assert typed_span(q, [ACQUIRED]) != "Austin"
    # the place still answers where the company is
    assert typed_span("Where is Brightline Systems based?", [ACQUIRED]) == "Austin"
    # an appositive of a name the question does not know still shows the type
    assert typed_span("Which company makes Lumen?", ["The app is made by Vale, the Austin company."],
                      typed=True) == "Austin"


def test_the_doer_of_the_asked_verb_answers_a_question_asking_for_it():
    # the sentence's subject does the asked verb to the known name, dates and a clause between
    assert typed_span("Which company acquired the maker of Lumen?", [ACQUIRED],
                      exclude=["Brightline Systems"]) == "Harbor & Finch"
    # asked in the passive, with a verb the passage states otherwise ("owned" by what "acquired" it),
    # and the known names run together in a rewrite's appended terms
    assert typed_span("Which company is it owned by now? (Beacon Brightline Systems agent logs ship)",
                      [ACQUIRED]) == "Harbor & Finch"
    # not the doer: the question asks for the verb's object, or the name is not the sentence's first
    assert typed_span("Which company did Harbor & Finch acquire?", [ACQUIRED]) != "Harbor & Finch"
    s = "In Austin, Vale said that Harbor & Finch acquired Brightline Systems."
    assert typed_span("Which company acquired Brightline Systems?", [s]) == "Harbor & Finch"


@pytest.mark.parametrize("question, verb, head", [
    ("How do you fix the error that clients saw?", "fix", "How do you fix"),
    ("how can I configure Lumen?", "configure", "how can I configure"),
    ("How to install it?", "install", "How to install"),
    ("How many legs does it have?", "", ""),
    ("How long is the Nile?", "", ""),
    ("How is it made?", "", ""),
])
def test_how_to(question, verb, head):
    assert how_to(question) == (verb, head)


def test_an_address_answers_only_a_question_asking_for_one():
    s = "The Marlowe repository is at https://git.example.com/calloway/marlowe, beside Calloway Data's site."
    assert typed_span("Which company hosts Marlowe?", [s]) == "Calloway Data"
    assert "git.example.com/calloway/marlowe" in typed_span("Which repository holds Marlowe?", [s])
    # a name with a slash is no address
    assert typed_span("Which car did McLaren race in 1998?", ["McLaren raced the MP4/13 in 1998."]) == "MP4/13"


def test_a_month_name_answers_which_month():
    # "July" was a name, and "Which month ...?" took the figure beside it
    q = "Which month of 2024 had the lowest Stackyard uptime?"
    s = "The lowest month was July, at 99.71%."
    assert typed_span(q, [s]) == "July" and typed_span(q, [s], typed=True) == "July"
    assert asks_typed(q)
    # a month alone still answers no "When ...?", and a month of another question is no answer to it
    assert typed_span("When did it happen?", ["It happened in July."]) == ""
    assert typed_span("Which company had the lowest uptime?", ["In July, Vale had the lowest uptime."]) == "Vale"


def test_where_the_code_is_asks_for_a_file():
    # the quickstart's follow-up was answered "lru" from the configuration's sentence
    q = "Where can I find the code for it? (Lumen lumen.eviction.policy lumen.yaml configure eviction policy)"
    config = "Set it in lumen.yaml: `eviction: policy: lru`"
    code = "Lumen's eviction is implemented in `lumen/evict.py`."
    assert asked_head(q) == ["file"] and asks_typed(q)
    assert typed_span(q, [config, code]) == "lumen/evict.py"
    assert typed_span(q, [config], typed=True) == ""  # no file there: the step's best sentences are read for one
    assert asked_head("Where is the source code of Lumen?") == ["file"]
    assert asked_head("Where was he born?") == [] and not asks_typed("Where was he born?")


@pytest.mark.parametrize("text, found", [
    ("the planet that takes 165 Earth years", {"165"}),
    ("When was Quarry 3.0 released?", {"3.0"}),
    ("Quarry 3.0.2 fixed it", {"3.0.2"}),  # a version is one figure, not "3.0"
    ("About 17,500 vacuum tubes, $19 a month, 99.95% uptime", {"17,500", "19", "99.95"}),
    ("Marlowe's BM25 scoring in 3D at 1080p", set()),  # inside a word: no figure of its own
    ("", set()),
])
def test_figures(text, found) -> None:
    assert figures(text) == found


def test_in_the_passive_the_name_after_by_does_the_asked_verb():
    """"Which company makes Kestrel?" was answered "API" from "Kestrel is an API gateway made by
    Harbor & Finch": the first name before the verb took the doer's bonus, and "made" was no
    form of "makes"."""
    s = ["Kestrel is an API gateway made by Harbor & Finch."]
    for q in ("Which company makes Kestrel?", "Who makes Kestrel?", "Which company made Kestrel?"):
        assert typed_span(q, s) == "Harbor & Finch", q
    assert typed_span("Who wrote Hamlet?", ["Hamlet is a tragedy written by William Shakespeare around 1600."]) \
        == "William Shakespeare"
    # the active voice is unchanged: the subject before the verb does it
    assert typed_span("Which company acquired Brightline Systems?",
                      ["Harbor & Finch announced that it has acquired Brightline Systems, the Austin company."]) \
        == "Harbor & Finch"


def test_a_names_particles_and_a_figures_scale_are_part_of_it():
    """"Who created Python?" was answered "Guido" (the name cut at "van"); "How much did Harbor &
    Finch pay ...?" "$310" of "$310 million" (helper-53's audit)."""
    assert typed_span("Who created Python?", ["Python was created by Guido van Rossum in 1991."]) == "Guido van Rossum"
    assert entity_names("Leonardo da Vinci painted the Mona Lisa.") == ["Leonardo da Vinci", "Mona Lisa"]
    assert typed_span("How much did Harbor & Finch pay for Brightline Systems?",
                      ["Harbor & Finch acquired Brightline Systems for $310 million."]) == "$310 million"
    assert entity_names("The Battle of Hastings was fought in 1066.") == ["Battle of Hastings"]


def test_what_is_billed_is_money():
    # "How much is outbound traffic billed at?" was answered "1" (of "above 1 TB"): "billed" asked no money
    q = "How much is outbound traffic billed at?"
    assert asked_measure(q) == ("money",)
    assert typed_span(q, ["Outbound traffic above 1 TB a month is billed at $0.05 per GB."]) == "$0.05 per GB"


def test_what_is_the_noun_of_asks_for_that_noun() -> None:
    """The audit set, before: "What is the capital of Iceland?" was answered "North Atlantic",
    the first name near a question word; "the capital, Reykjavik" shows the asked noun."""
    from searchsmith.models.text import asked_head

    iceland = ("Iceland is an island country in the North Atlantic with a population of about 380,000, most "
               "of whom live in and around the capital, Reykjavik.")
    assert asked_head("What is the capital of Iceland?") == ["capital"]
    assert typed_span("What is the capital of Iceland?", [iceland]) == "Reykjavik"
    # a name is no noun ("the Book of Healing"); a figure's, a date's or a place's noun is said elsewhere
    assert asked_head("What is the Book of Healing referred to as?") == []
    assert asked_head("What is the population of Iceland?") == []
    assert asked_head("What is the place of birth of Ole Selberg?") == []


def test_a_name_after_a_preposition_is_no_doer_of_the_asked_verb() -> None:
    """The demo, before: "Who wrote the Lumen documentation?" was answered "Python", read in
    "Lumen is written in Python" (the sentence states "written", so it was read)."""
    lumen = "Lumen is written in Python and published under the Apache-2.0 licence."
    assert typed_span("Who wrote the Lumen documentation?", [lumen]) == ""
    # the doer after "by" still answers, past a place after "in"
    assert typed_span("Who founded Brightline Systems?",
                      ["Brightline Systems was founded in Austin by Mara Quint."]) == "Mara Quint"
    # only a who-question asks for the doer: "in what" is asked otherwise
    assert typed_span("Which language was Lumen written in?", [lumen]) == "Python"


def test_a_keyword_query_asks_for_the_figure_or_date_it_names() -> None:
    """The audit set, before: "Lumen port" got the sentences and no short answer (no question
    word: OTHER); a short query without one asks for the figure or date its words name."""
    from searchsmith.models.text import KEYWORD_WORDS

    port = "By default the server listens on port 6410."
    assert answer_kind("Lumen port") == "NUM" and asked_measure("lumen default port") == ("port",)
    assert typed_span("lumen default port", ["Lumen needs Python 3.10.", port]) == "6410"
    assert answer_kind("kestrel 2.0 release date") == "DATE"
    assert asked_measure("quarry latency") == ("duration",)
    # words asking neither, a question, or a longer text: as before
    assert answer_kind("install lumen") == "OTHER"
    assert answer_kind("Does Lumen use a port?") == "YESNO"
    long_text = " ".join(["lumen"] * KEYWORD_WORDS + ["port"])
    assert answer_kind(long_text) == "OTHER"


def test_a_where_question_is_answered_by_a_place() -> None:
    """The audit set, before: "Where was Ada Lovelace born?" was answered "Charles Babbage" and
    "Where is Harbor & Finch based?" "Brightline Systems" (then "$310 million"): a where-question
    takes a name after "in" / "at" / "near" / "from" or a country, and no number."""
    assert typed_span("Where was Ada Lovelace born?",
                      ["Ada Lovelace worked with Charles Babbage on the Analytical Engine."]) == ""
    assert typed_span("Where is Harbor & Finch based?",
                      ["Harbor & Finch acquired Brightline Systems for $310 million."]) == ""
    assert typed_span("Where was Ada Lovelace born?", ["Ada Lovelace was born in London in 1815."]) == "London"
    assert typed_span("Where was MapCamp 2022 held?",
                      ["At MapCamp 2022 in Copenhagen on 2022-09-14, Northwind Labs presented."]) == "Copenhagen"
    # "in a Series C round" is no place
    assert typed_span("Where was the round announced?",
                      ["Brightline Systems raised $40 million in a Series C round, announced in 2022."]) == ""
    # "In which city is X based?" asks where too (the audit set, before: "Lumen 1.0"), and a place
    # describing a known name answers it; "Which city is the capital of ...?" keeps its old rule
    acquired = ("Harbor & Finch announced that it has acquired Brightline Systems, the Austin company behind "
                "Lumen, for $310 million.")
    released = "Brightline Systems released Lumen 1.0 on 2019-11-05."
    for q in ["In which city is Brightline Systems based?", "Which city is Brightline Systems based in?"]:
        assert typed_span(q, [released]) == "", q
        assert typed_span(q, [released, acquired]) == "Austin", q
    assert typed_span("In which city was Ada Lovelace born?", ["Ada Lovelace was born in London in 1815."]) == "London"
    assert typed_span("Which city hosts the Lumen team?", ["Brightline Systems hosts the Lumen team in Austin."]) == "Austin"
    # a bridge's name is read where no place is (``stated`` off)
    assert typed_span("Where was the director of When in Rome born?",
                      ["When in Rome is a film directed by Mark Steven Johnson."], stated=False) == "Mark Steven Johnson"


def test_a_setting_named_by_its_words_is_asked_for_its_value() -> None:
    """Tried as a new user, before: "lumen snapshot interval" got "3 hours" (an outage's) and
    "What is the lumen snapshot interval?" a file name: a question naming a setting of a page's
    title by its words alone asks for its value."""
    from searchsmith.models.text import setting_asked

    titles = ["Lumen Cloud outage in eu-west", "Lumen source: lumen/persist/snapshot.py",
              "Configuring Lumen: snapshot.interval_s", "Configuring Ferrow: partitions.default"]
    for q in ["lumen snapshot interval", "What is the Lumen snapshot interval?",
              "What is the snapshot interval of Lumen?", "What's the default snapshot interval?"]:
        assert setting_asked(q, titles) == "snapshot.interval_s", q
    assert setting_asked("ferrow default partitions", titles) == "partitions.default"
    # saying more (a limit, a way, the page's file), or writing the key itself: no setting asked
    for q in ["What is the maximum snapshot interval?", "How do I change the snapshot interval?",
              "Why is the snapshot interval 300?", "lumen snapshots",
              "What is the default value of snapshot.interval_s?", "Is the snapshot interval 300?"]:
        assert setting_asked(q, titles) == "", q
    assert setting_asked("lumen snapshot interval", ["Lumen Cloud outage in eu-west"]) == ""


def test_an_end_of_life_is_no_release_and_an_announcement_date_no_event_date() -> None:
    """Tried as a new user, before: "When did Quarry 1.0 reach end of life?" got Quarry 1.0's
    release date, and "When does Kestrel 1.x reach end of life?" the date the end was announced
    ("September 2022"), then "March 2023" (the "1" of "1 March 2023" read as the question's)."""
    eol = ("Harbor & Finch announced in September 2022 that Kestrel 1.x reaches its end of life on "
           "1 March 2023; after that date it receives no security fixes.")
    assert typed_span("When does Kestrel 1.x reach end of life?", [eol]) == "1 March 2023"
    assert typed_span("When was Kestrel 1.x retired?", [eol]) == "1 March 2023"
    # a question about the announcement takes its date
    assert typed_span("When did Harbor & Finch announce the end of life of Kestrel 1.x?", [eol]) == "September 2022"
    assert typed_span("When did Quarry 1.0 reach end of life?",
                      ["Northwind Labs released Quarry 1.0 on 2021-04-20."]) == ""
    assert typed_span("When was Quarry 1.0 released?", ["Northwind Labs released Quarry 1.0 on 2021-04-20."]) == "2021-04-20"
    # an announcement's date alone in its sentence is the announced event's
    assert typed_span("When was Brightline Systems acquired?",
                      ["Harbor & Finch announced on 12 March 2024 that it has acquired Brightline Systems."]) == "12 March 2024"


def test_a_figure_near_the_questions_named_qualifier_answers() -> None:
    """The audit set, before: "How much does Beacon Cloud cost on the Business plan?" got the
    Starter plan's "$15": a tie in one sentence goes to the candidate near the question's names."""
    prices = ("Beacon Cloud, the managed metrics and log collection agent on Stackyard, costs $15 per month on "
              "the Starter plan and $45 per month on the Business plan; Enterprise prices are agreed per contract.")
    assert typed_span("How much does Beacon Cloud cost on the Business plan?", [prices]) == "$45 per month"
    assert typed_span("How much does Beacon Cloud cost on the Starter plan?", [prices]) == "$15 per month"
    assert typed_span("How much does Beacon Cloud cost?", [prices]) == "$15 per month"
