"""Text rules shared by serving and training: stop-words, sentence splitting, SQuAD answer
normalisation and token F1, the entity rule and the short-answer rules (the JSONL reader
is :mod:`searchsmith.models.jsonl`).

This module sits on the ground floor: it imports nothing from ``serving`` or ``training``.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import Literal

# --------------------------------------------------------------------------- stop-words
# Two lists, one per purpose; they differ on purpose and are not interchangeable:
# * BM25_STOP_WORDS: the short English list of the BM25 analyser (the one described in
#   shared/data/README.md's BM25 note); the training labellers' content-word overlap uses it
#   too. Adding words to it changes BM25 scores and the weak labels.
# * QUERY_STOP_WORDS: a long list of function words plus conversational filler ("tell",
#   "please", "thanks", "find", "show"...): a word in it is never a salient term of a
#   conversation (the query rewriter), a content word of an answer (the pipeline's overlap
#   checks) or the head of an entity ("The Quarry" -> "Quarry").
BM25_STOP_WORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was "
    "were which with".split()
)

QUERY_STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves tell please thanks thank also get got find know like
want need use using used one two much many way something anything does say said show give
""".split())

# Words by which a follow-up refers back to the conversation ("Is *it* treatable?", "What
# about *the second*?"): the rewrite tagger's edit replaces a run of the query only when the
# run holds one of them (models/rewrite_edit.py, tag_rewrite).
REFERENCE_WORDS = frozenset("""
it its they them their theirs this that these those he she him his her hers one ones there then
here such same former latter last first second third other others another both each either
neither
""".split())

# Words that make a phrase a relation to look up rather than a name: prepositions, relative and
# question words, auxiliaries, and common irregular past tenses ("the director *of* Titanic",
# "the team *that* plays at ...", "the company Apple *bought*"). A decomposition step with none
# of them (and no regular past tense, no inner article) only names its referent
# (models/qdg.py, names_itself).
RELATION_WORDS = frozenset("""
of in on at by for from with to into onto about after before during since until under over
between among through against within without near than as via per
who whom whose which that where when what why how if whether not
is are was were be been being am has have had do does did can could will would should may might
must shall
won bought made wrote sold built led ran sang took gave found held began became left lost met
paid said saw sent taught told thought went came got brought fought drew drove grew knew threw
flew rose fell kept spent struck shot born
""".split())

# --------------------------------------------------------------------------- sentences
# Two boundary rules are in use; both go through the one splitter below:
# * "text" (serving: chunker, pipeline, server): a sentence ends at . ! ? (optionally followed
#   by closing quotes or brackets) before whitespace, at a blank line, or at a line break before
#   a list item ("- ", "* ", "• ", "2) ": each item is a sentence); not before a
#   lower-case word or "(" ("Lush Ltd. is", "Jr. (born 1900)"), nor after a title or a place's
#   abbreviation ("St. Louis", "No. 1"). It does end at an initial's dot: "Michael J." "Fox
#   ..." (not ending one there was measured and not adopted, see serving/profiling/RESULTS.md,
#   "Second hops found by searching"). Chunk offsets in an index depend on it.
# * "lines" (training: the synthetic citation pairs): every line break ends a sentence, and
#   . ! ? end one only before whitespace and a capital, a digit, a quote or "(".
SentenceRule = Literal["text", "lines"]
# a title or a place's abbreviation ends no sentence ("Born in St. Louis", "Dr. Watson", "the
# world No. 1"): the word before the dot, whole, is one of these
_ABBREVIATIONS = ("St", "Mt", "Ft", "Dr", "Mr", "Mrs", "Ms", "Prof", "Rev", "Gen", "Col", "Lt", "Sgt", "Capt",
                  "Gov", "Sen", "Rep", "Hon", "No", "vs")
# nor does a name's initial ("Alfred P. Murrah", "Glenn L. Martin"): one capital other than "I"
# ("World War I."), not after a dot ("the U.S. The ...")
_NOT_AFTER = "".join(rf"(?<!(?<![\w.]){a}\.)" for a in _ABBREVIATIONS) + r"(?<!(?<![\w.])[A-HJ-Z]\.)"
_SENTENCE_GAPS: dict[str, re.Pattern[str]] = {
    "text": re.compile(rf"(?<=[.!?]){_NOT_AFTER}[\"')\]]*\s+(?![a-z(])|\n\s*\n|\n(?=[^\S\n]*(?:[-*•]|\d{{1,2}}[.)])\s)"),
    "lines": re.compile(r"\n|(?<=[.!?])[^\S\n]+(?=[A-Z0-9\"'(])"),
}


def split_sentences(text: str, rule: SentenceRule = "text") -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the non-blank sentences of ``text``, without the
    whitespace around them (``text[start:end]`` is the sentence).

    Args:
        rule: the boundary rule, ``"text"`` or ``"lines"`` (see the comment above).
    """
    if rule not in _SENTENCE_GAPS:
        raise ValueError(f"split_sentences: rule must be one of {sorted(_SENTENCE_GAPS)}, got {rule!r}")
    spans = []
    pos = 0
    for m in _SENTENCE_GAPS[rule].finditer(text):
        end = m.start() + len(m.group(0).rstrip())  # closing quotes/brackets stay in the sentence
        if text[pos:end].strip():
            spans.append((pos, end))
        pos = m.end()
    if text[pos:].strip():
        spans.append((pos, len(text)))
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        out.append((s, e))
    return out


def sentence_texts(text: str, rule: SentenceRule = "text") -> list[str]:
    """The sentences of ``text`` as strings (:func:`split_sentences`)."""
    return [text[s:e] for s, e in split_sentences(text, rule)]


# --------------------------------------------------------------------------- answers
_CITATION_MARKER = re.compile(r"\[\d+\]")
_NON_WORD = re.compile(r"[^\w\s]")
_ARTICLE = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str, *, generated: bool = False) -> str:
    """SQuAD normalisation: lower case, punctuation and articles removed, single spaces.

    Args:
        generated: the text is a generated answer (the pipeline's evaluation): ``[n]``
            citation markers are removed and every non-word character (Unicode included)
            separates words ("don't" -> "don t"). Without it, the official SQuAD rule:
            ASCII punctuation is deleted ("don't" -> "dont") and markers are plain text.
    """
    text = text.lower()
    if generated:
        text = _NON_WORD.sub(" ", _CITATION_MARKER.sub(" ", text))
    else:
        text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLE.sub(" ", text).split())


def answer_tokens(text: str, *, generated: bool = False) -> list[str]:
    """The words of :func:`normalize_answer`."""
    return normalize_answer(text, generated=generated).split()


def token_f1(prediction: str, reference: str, *, generated: bool = False) -> float:
    """SQuAD token F1 of ``prediction`` against ``reference`` after :func:`normalize_answer`
    (1.0 when both normalise to nothing, 0.0 when only one does)."""
    p, r = answer_tokens(prediction, generated=generated), answer_tokens(reference, generated=generated)
    same = sum((Counter(p) & Counter(r)).values())
    if not p or not r or same == 0:
        return float(p == r)
    precision, recall = same / len(p), same / len(r)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, reference: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


# --------------------------------------------------------------------------- entities
# One rule finds the entities of a sentence, for three readers: the citation stage's fallback
# (a passage must mention a sentence's entities to support it), the "not found" name check of
# generation, and the citation tagger's weak training labels. Each span has one of the
# tagger's types (models/citation.ENTITY_TYPES):
# * DATE: "12 March 2024", "March 12, 2024", "2024-03-12", "March 2024", "1986", "1960s";
# * ENT: a quoted or backticked span (its inside), an identifier with . _ or / ("quarry.yaml",
#   "config.max_tokens"), a run of capitalised words, joined by "&", "of" or "of the", with an
#   optional trailing number or version ("Northwind Labs", "Harbor & Finch", "Bank of America",
#   "Order of the Golden Fleece", "Voyager 2", "Quarry 3.0");
# * NUM: a number or amount with an optional unit ("60", "10,000", "3.5 %", "$10", "20 ms").
# Claimed in that order (quotes, dates, identifiers, names, numbers), a later span never
# overlapping an earlier one. Capitalisation says nothing at the start of a sentence, so a
# lone capitalised word there is no name, and leading function words (QUERY_STOP_WORDS) are
# cut from a run ("The Kingsmen" -> "Kingsmen", "In 1970" -> the date "1970"), and so is a
# run's closing possessive ("Keaton's actor" -> "Keaton"; one inside a run stays: "Ender's Game").
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December")
_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]{2,60})\"")
_DATES = (
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    re.compile(rf"\b\d{{1,2}}\s+(?:{_MONTHS})(?:,?\s+\d{{4}})?\b"),
    # a day of the month, not a figure after a month's name ("May 99.90%" in a table of uptimes)
    re.compile(rf"\b(?:{_MONTHS})\s+(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?(?:,\s*\d{{4}})?\b(?![.,]\d|\s?%)"),
    re.compile(rf"\b(?:{_MONTHS})\s+\d{{4}}\b"),
    re.compile(r"\b(?:1[5-9]|20)\d0s\b"),
    re.compile(r"(?<![\d.,$£€])\b(?:1[5-9]\d{2}|20\d{2})\b(?![.,]\d|\s?%)"),
)
_IDENTIFIER = re.compile(r"\b[A-Za-z0-9]+(?:[._/][A-Za-z0-9]+)+\b")
_ABBREVIATION = re.compile(r"[a-z](?:\.[a-z])+")  # "e.g", "i.e": no identifier
# a word, or an initial or a place's abbreviation before one ("J. M. Barrie", "St. Louis"); a word
# ending in a version keeps its dotted parts ("Apache-2.0")
_NAME_WORD = r"(?:(?:[A-Z]|St|Mt|Ft)\.(?=\s+[A-Z])|[A-Z][\w'’&-]*(?:(?<=\d)\.\d+)*)"  # "Apache-2.0" whole
_HONORIFICS = frozenset("Mr Mrs Ms Dr Prof Rev Sir".split())  # alone, no name ("Mr. Moynihan" names "Moynihan")
# a capitalised word starts a name ("D" of "3D", "Phone" of "iPhone", "S" of "U.S." do not)
# the particles inside a person's name ("Guido van Rossum", "Ludwig van Beethoven", "Leonardo da Vinci")
_PARTICLE = r"(?:van|von|de|der|den|da|di|du|del|della|bin|ibn)\s+(?:der\s+|den\s+)?"
_NAME = re.compile(rf"(?<![\w'’.]){_NAME_WORD}(?:\s+(?:&\s+|of\s+(?:the\s+)?|{_PARTICLE})?{_NAME_WORD})*")
_VERSION = re.compile(r"\s+\d+(?:\.\d+)*\b(?![.,]\d|\s?%)")  # "Voyager 2", "Quarry 3.0"; not "April 99.95%"
# a figure is a token of its own ("3D", "1080p", "100x" hold none) or an ordinal ("34th"),
# with an optional unit
_NUMBER = re.compile(r"(?<![\w.,])[$£€]?\d+(?:[.,]\d+)*(?:st|nd|rd|th)?"
                     r"(?:\s(?:thousand|million|billion|trillion)\b)?"  # "$310 million" is one figure
                     r"(?:\s?%|\s?(?:ms|s|GB|MB|KB|km|days?|hours?|minutes?|years?)\b)?(?!\w)")


# "Charlotte-based", "Boston - based": where something is, no part of its name
LOCATED_SUFFIXES = ("based", "born", "headquartered", "owned")
_LOCATED_PREFIX = re.compile(rf"[\w'’.]+-(?:{'|'.join(LOCATED_SUFFIXES)})")
_SPACED_PREFIX = re.compile(rf"\s+-\s+(?:{'|'.join(LOCATED_SUFFIXES)})\b")


# a figure as a token of its own, without unit or currency: "165", "3.0", "17,500"
_BARE_FIGURE = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w]|[.,]\d)")


def figures(text: str) -> set[str]:
    """The figures of ``text`` as tokens of their own ("165 Earth years" -> ``{"165"}``;
    "Quarry 3.0.2" -> ``{"3.0.2"}``, not ``"3.0"``; "3D" and "v2" hold none)."""
    return set(_BARE_FIGURE.findall(text))


def _name_span(sentence: str, m: re.Match[str], numbered: bool) -> tuple[int, int] | None:
    """The name a capitalised run ``m`` holds, without leading function words; None if none
    (``numbered``: a number or version follows the run, as in "Voyager 2")."""
    s, e = m.start(), m.end()
    words = list(re.finditer(r"\S+", sentence[s:e]))
    starts_sentence = not sentence[:s].strip()
    while words and words[0].group(0).lower() in QUERY_STOP_WORDS:
        words.pop(0)
    if not words:
        return None
    if starts_sentence and len(words) == 1 and words[0].start() == 0 and not numbered:
        return None  # a lone capitalised first word: capitalised anyway
    if len(words) == 1 and words[0].group(0) in _HONORIFICS:
        return None
    while words and _LOCATED_PREFIX.fullmatch(words[0].group(0)):
        words.pop(0)  # "Charlotte-based Bank of America" names "Bank of America"; "American-born" nothing
    if not words:
        return None
    return s + words[0].start(), e


def entity_spans(sentence: str) -> list[tuple[int, int, str]]:
    """The entities of ``sentence`` as ``[(start, end, type)]`` character spans, in order.

    ``type`` is ``ENT``, ``NUM`` or ``DATE``; the rule is described above this function.
    """
    taken: list[tuple[int, int, str]] = []
    used = bytearray(len(sentence))  # 1 where a taken span lies: a claim costs its own length

    def claim(s: int, e: int, label: str) -> bool:
        if e > s and not any(used[s:e]):
            used[s:e] = b"\x01" * (e - s)
            taken.append((s, e, label))
            return True
        return False

    for m in _QUOTED.finditer(sentence):
        g = 1 if m.group(1) is not None else 2
        inner = m.group(g)
        lead = len(inner) - len(inner.lstrip())
        claim(m.start(g) + lead, m.start(g) + len(inner.rstrip()), "ENT")
    for rx in _DATES:
        for m in rx.finditer(sentence):
            claim(m.start(), m.end(), "DATE")
    for m in _IDENTIFIER.finditer(sentence):
        text = m.group(0)
        if re.search(r"[A-Za-z]", text) and not _ABBREVIATION.fullmatch(text):
            claim(m.start(), m.end(), "ENT")
    for m in _NUMBER.finditer(sentence):
        if not _BARE_NUMBER.fullmatch(m.group(0)):
            claim(m.start(), m.end(), "NUM")  # a figure with its unit first: "20 GB" is no name "GB"
    for m in _NAME.finditer(sentence):
        version = _VERSION.match(sentence, m.end())
        span = _name_span(sentence, m, version is not None)
        if span is None:
            continue
        s, e = span
        if _SPACED_PREFIX.match(sentence, e):
            continue  # "Boston - based bank", as tokenised text writes "Boston-based"
        while e > s and sentence[e - 1] in "'’-":
            e -= 1
        if e - s > 3 and sentence[e - 2] in "'’" and sentence[e - 1] == "s":
            e -= 2  # a closing possessive: "Keaton's actor" names "Keaton"
        if not (version and claim(s, version.end(), "ENT")):
            claim(s, e, "ENT")
    for m in _NUMBER.finditer(sentence):
        claim(m.start(), m.end(), "NUM")
    return sorted(taken)


def pattern_entities(sentence: str) -> list[str]:
    """The texts of :func:`entity_spans` of ``sentence``, each once, in order."""
    out: list[str] = []
    for s, e, _ in entity_spans(sentence):
        if sentence[s:e] not in out:
            out.append(sentence[s:e])
    return out


def entity_names(sentence: str) -> list[str]:
    """The names of ``sentence`` (:func:`entity_spans` labelled ENT, once each, in order), not
    its dates, numbers or nationalities ("American", :func:`demonym`): what may be a title."""
    out: list[str] = []
    for s, e, label in entity_spans(sentence):
        name = sentence[s:e]
        if label == "ENT" and not _BARE_NUMBER.fullmatch(name) and not demonym(name) and name not in out:
            out.append(name)
    return out


def missing_entities(entities: Sequence[str], passage: str) -> list[str]:
    """The ``entities`` that ``passage`` does not mention as whole tokens (case-insensitive).

    "2" is not found in "Voyager 20" nor "2.5", "3.0" not in "3.0.1": a number or version
    must match exactly, or a near-miss passage would pass as support.
    """
    text = " ".join(passage.lower().split())
    out = []
    for ent in entities:
        e = " ".join(ent.lower().split())
        if not re.search(r"(?<![a-z0-9])" + re.escape(e) + r"(?![a-z0-9]|[.,]\d)", text):
            out.append(ent)
    return out



SHORT_FORM = re.compile(r"[A-Z]{3,6}")  # "CTO", "NASA": capitals alone (two letters spell too much out)
_SPELL_LINKS = frozenset("of and for the on in &".split())  # passed over: "Department of Energy" spells "DE"


def spelled_out(short: str, text: str) -> bool:
    """Whether ``text`` spells the short form ``short`` out: words whose initials are its
    letters in order ("chief technology officer" for "CTO", any case), with "of", "and",
    "for", "the", "on", "in" or "&" between them passed over ("National Aeronautics and
    Space Administration" for "NASA"). No spelled-out word is a stop word
    (:data:`QUERY_STOP_WORDS`)."""
    letters = short.lower()
    words = re.findall(r"[A-Za-z][\w'’-]*|&", text)
    for i, first in enumerate(words):
        if first[0].lower() != letters[0] or first.lower() in QUERY_STOP_WORDS:
            continue
        k, j = 1, i + 1
        while k < len(letters) and j < len(words):
            w = words[j].lower()
            if w[0] == letters[k] and w not in QUERY_STOP_WORDS:
                k += 1
            elif w not in _SPELL_LINKS:
                break
            j += 1
        if k == len(letters):
            return True
    return False


# --------------------------------------------------------------------------- countries
# Countries and the words that name them (nationality adjectives, short names), for "from the
# same country?" / "of the same nationality?" (models.choice) and for names that only say
# where someone is from (:data:`DEMONYMS`). Written for this project from common usage; a
# country not listed makes such a question unanswered, never wrongly answered.
_COUNTRY_LINES = """
united states: united states, u.s, american, US, usa, america
united kingdom: united kingdom, great britain, u.k, british, english, scottish, welsh, uk, britain, england, scotland, wales
ireland: irish, ireland
canada: canadian, canada
australia: australian, australia
new zealand: new zealand, zealander
france: french, france
germany: west german, east german, german, germany
italy: italian, italy
spain: spanish, spain
portugal: portuguese, portugal
netherlands: dutch, netherlands, holland
belgium: belgian, belgium
switzerland: swiss, switzerland
austria: austrian, austria
sweden: swedish, sweden
norway: norwegian, norway
denmark: danish, denmark
finland: finnish, finland
iceland: icelandic, iceland
poland: polish, poland
czech republic: czech republic, czech, czechia, czechoslovak, czechoslovakia
slovakia: slovak, slovakia
hungary: hungarian, hungary
romania: romanian, romania
bulgaria: bulgarian, bulgaria
greece: greek, greece
turkey: turkish, turkey
russia: soviet union, russian, russia, soviet, ussr
ukraine: ukrainian, ukraine
belarus: belarusian, belarus
serbia: serbian, serbia, yugoslav, yugoslavia
croatia: croatian, croatia
slovenia: slovenian, slovene, slovenia
bosnia: bosnian, bosnia
albania: albanian, albania
estonia: estonian, estonia
latvia: latvian, latvia
lithuania: lithuanian, lithuania
georgia: georgian
armenia: armenian, armenia
israel: israeli, israel
iran: iranian, persian, iran
iraq: iraqi, iraq
egypt: egyptian, egypt
morocco: moroccan, morocco
algeria: algerian, algeria
tunisia: tunisian, tunisia
nigeria: nigerian, nigeria
ghana: ghanaian, ghana
kenya: kenyan, kenya
ethiopia: ethiopian, ethiopia
south africa: south african, south africa
india: indian, india
pakistan: pakistani, pakistan
bangladesh: bangladeshi, bangladesh
sri lanka: sri lankan, sri lanka
nepal: nepali, nepalese, nepal
china: chinese, china
hong kong: hong kong
taiwan: taiwanese, taiwan
japan: japanese, japan
south korea: south korean, south korea, korean, korea
north korea: north korean, north korea
vietnam: vietnamese, vietnam
thailand: thai, thailand
philippines: filipino, philippine, philippines
indonesia: indonesian, indonesia
malaysia: malaysian, malaysia
singapore: singaporean, singapore
mexico: mexican, mexico
brazil: brazilian, brazil
argentina: argentine, argentinian, argentina
chile: chilean, chile
colombia: colombian, colombia
peru: peruvian, peru
venezuela: venezuelan, venezuela
cuba: cuban, cuba
jamaica: jamaican, jamaica
"""
#: a word or phrase that names a country -> the country
COUNTRIES: dict[str, str] = {
    name.strip(): country for country, names in (line.split(":") for line in _COUNTRY_LINES.strip().splitlines())
    for name in names.split(",")
}
_DEMONYM_ENDINGS = ("an", "ish", "sh", "ese", "ch", "ss", "ic", "i", "ek", "ino", "ine", "ak", "av", "er", "ene", "et")
#: the nationality adjectives of :data:`COUNTRIES` ("american", "west german", "thai")
DEMONYMS = frozenset(k for k, c in COUNTRIES.items() if k != c and k not in COUNTRIES.values()
                     and k.endswith(_DEMONYM_ENDINGS))
_DIRECTION_WORDS = frozenset("north northern south southern east eastern west western central".split())
# questions that ask for a nationality or language, which a demonym answers
_ASKS_DEMONYM = frozenset("""nationality nationalities language languages ethnic ethnicity citizenship
citizen descent origin demonym cuisine""".split())


def country_of(span: str) -> str:
    """The country a nationality names, title-cased ("American" -> "United States", "West German"
    -> "Germany"; a compound, its first: "Italian-American" -> "Italy"); ``span`` itself when none
    of its words names one."""
    words = [w for w in re.split(r"[\s\-]+", span.lower()) if w]
    for name in (" ".join(words), *(" ".join(words[k:k + 2]) for k in range(len(words) - 1)), *words):
        if name in COUNTRIES:
            return COUNTRIES[name].title()
    return span


def _country_named(span: str) -> str:
    """The country a name holds by the country's name ("National University of Singapore" ->
    "Singapore", "Bank of England" -> "England"), "" when it holds none; nationalities do not count."""
    words = span.split()
    for k in range(len(words)):
        for n in (3, 2, 1):
            phrase = " ".join(words[k:k + n]).strip(_EDGE)
            if k + n <= len(words) and phrase[:1].isupper() and (phrase == "US" or phrase.lower() in COUNTRIES) \
                    and phrase.lower() not in DEMONYMS:
                return phrase
    return ""


def demonym(span: str) -> bool:
    """Whether ``span`` only says where something is from ("American", "Northern Irish-Scottish",
    "American-West German"): every word a :data:`DEMONYMS` word or a compass word."""
    words = [w for w in re.split(r"[\s\-]+", span.lower()) if w]
    joined = " ".join(words)
    return bool(words) and (joined in DEMONYMS or (
        all(w in DEMONYMS or w in _DIRECTION_WORDS for w in words) and any(w in DEMONYMS for w in words)))


# --------------------------------------------------------------------------- short answers
# Without a reader the answer is the best-supported sentence; the question's kind says which of
# its entities answers it (the answer-type rule of rule-based QA): "When ...?" a date, "How many
# ...?" or "What port ...?" a number, "Who / Which / What / Where ...?" a name or identifier that
# the question does not already hold. Yes / no questions, questions that offer a choice ("A or
# B?") and why / how questions have no such span: their answer stays the sentence.
AnswerKind = Literal["DATE", "NUM", "ENT", "YESNO", "CHOICE", "OTHER"]

# Nouns after "what" / "which" that ask for a quantity ("What *port* ...", "At what
# *temperature* ...", "What is the default *value* of ...").
MEASURE_WORDS = frozenset("""
value port price cost fee fees temperature uptime percentage percent share number amount size
length duration population height weight age distance speed limit rate capacity salary budget
revenue income profit turnover funding valuation earnings
score timeout interval version maximum minimum max min
""".split())
_BOUND_WORDS = frozenset("maximum minimum max min".split())  # a quantity: the noun after one names its dimension
_TIME_WORDS = frozenset("year years date month day weekday decade century birthday".split())
HOW_MUCH_WORDS = frozenset("many much long old far big large tall high often fast heavy deep wide hot".split())
_WH = re.compile(r"\b(who|whom|whose|when|where|which|what|how|why)\b", re.I)
_AUXILIARY = re.compile(r"\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|"
                        r"may|might|must)\b", re.I)
_CHOICE = re.compile(r"\S\s+or\s+\S", re.I)
_ALSO_CALLED = re.compile(r",\s+or\s+[^,?]+,", re.I)  # "the Nimavar Bazaar, or bazar, is ..."
_KIND_LABELS: dict[str, tuple[str, ...]] = {"DATE": ("DATE", "NUM"), "NUM": ("NUM", "ENT"), "ENT": ("ENT", "NUM")}
#: the kinds of question a span answers (:func:`typed_span`)
SPAN_KINDS = frozenset(_KIND_LABELS)
_WHO = re.compile(r"\W*(?:who|whom)\b", re.I)


# "How do you fix ...?", "How can I configure ...?": a way of doing something is asked, its verb
_HOW_TO = re.compile(r"^\W*how\s+(?:do|does|can|could|should|would|did|to)\s+(?:(?:i|you|we|they|one|it|he|she)\s+)?"
                     r"([a-z]+)\b", re.I)


def how_to(question: str) -> tuple[str, str]:
    """``(verb, the question up to it)`` of a question asking how to do something ("fix", "How do
    you fix" of "How do you fix the error ...?"); ("", "") for other questions ("How many ...?",
    "How long ...?"). "How did he die?" asks for a manner, and is one too ("die")."""
    m = _HOW_TO.match(question)
    return (m.group(1).lower(), question[:m.end()].strip()) if m else ("", "")


# A description is asked, not a name: "What is Lumen?", "What is the Great Barrier Reef?", "What
# is a Turing machine?" (a name or an indefinite noun alone after the copula), "What does Kestrel
# do?", "What does KST-429 mean?", "What happened ...?", "What causes ...?". The answer is the sentence that gives it: a name
# read in it ("Brightline Systems" of "Lumen is an in-memory cache made by Brightline Systems")
# answers none of them, nor of "What are the requirements / steps / limits ... of X?" (a list or
# a sentence, not one of its names). "What is the capital of France?" and "What is the largest planet?" ask
# for a name.
_NAME_ALONE = r"(?:the\s+)?[A-Z0-9][\w'’&.+-]*(?:\s+(?:of\s+(?:the\s+)?|&\s+|and\s+)?[A-Z0-9][\w'’&.+-]*)*"
# the nouns a description is asked by ("What are the requirements of X?")
_DESCRIBED_NOUNS = (r"(?:is|are|was|were)\s+the\s+(?:main\s+)?(requirements?|prerequisites?|steps|limits|limitations|"
                    r"benefits|advantages|disadvantages|differences|features|options|ingredients|contents|components)\b")
_DESCRIBE = re.compile(r"^\W*[Ww]hat\s+(?:"
                       rf"(?:is|are|was|were|'s)\s+(?:{_NAME_ALONE}|an?\s+[^?]+?)"
                       r"|(?:does|do|did)\s+[^?]+?\s+(?:do|mean)"
                       rf"|{_DESCRIBED_NOUNS}[^?]*"
                       # "What are your support hours?": a timetable, not a name
                       r"|(?:is|are|was|were)\s+(?:the|your|its|their|our)\s+(?:[\w-]+\s+){0,2}?"
                       r"(?:hours|opening\s+times|timetable|schedule)\b[^?]*"
                       r"|happen(?:s|ed)?\b[^?]*"
                       r"|caus(?:es|ed|e)\b[^?]*"
                       r"|(?:is|are|was|were)\s+[^?]+?\s+used\s+for\b[^?]*"  # "What is Beacon used for?": its purpose
                       r"|(?:is|are|goes|go)\s+in(?:to)?\s+[^?]+"  # "What is in hummus?": what it holds
                       r"|(?:do|does)\s+[^?]+?\s+need\b[^?]*"  # "What do I need to run X?": its requirements
                       r")\s*\?*\s*$")


def asks_description(question: str) -> bool:
    """Whether ``question`` asks for a description, not a span (:data:`_DESCRIBE`)."""
    return bool(_DESCRIBE.match(question.strip()))


_DESCRIBED_NOUN = re.compile(rf"^\W*[Ww]hat\s+{_DESCRIBED_NOUNS}", re.I)
_LABEL = re.compile(r"^\W*([A-Za-z][\w-]*(?:\s+[\w-]+){0,2})\s*:\s+\S")  # "Requirements: a PostgreSQL 13 ...", three words at most


# "What is in hummus?", "What goes into a carbonara?": what it holds, on a line labelled so
_CONTENTS_ASKED = re.compile(r"^\W*what\s+(?:is|are|goes|go)\s+in(?:to)?\s+", re.I)
_CONTENT_NOUNS = ("ingredients", "contents", "components")
# "What do I need to run Tidewater?": its requirements, on a line labelled so
_NEEDS_ASKED = re.compile(r"^\W*what\s+(?:do|does)\s+[^?]+?\s+need\b", re.I)
_NEEDED_NOUNS = ("requirements", "prerequisites")


def labelled_with_asked(question: str, sentence: str) -> bool:
    """Whether ``sentence`` is a line labelled with the noun ``question`` asks a description by
    ("Requirements: a PostgreSQL 13 or newer database ..." for "What are the requirements for
    running Tidewater?"; :data:`_DESCRIBE`), in any inflection (:func:`fold`); what a thing holds
    ("What is in hummus?") by its ingredients, contents or components ("Ingredients: ..."), what
    one needs ("What do I need to run Tidewater?") by its requirements or prerequisites."""
    asked, label = _DESCRIBED_NOUN.match(question.strip()), _LABEL.match(sentence)
    nouns = [asked.group(1)] if asked is not None else _CONTENT_NOUNS if _CONTENTS_ASKED.match(question) \
        else _NEEDED_NOUNS if _NEEDS_ASKED.match(question) else []
    return bool(nouns) and label is not None and bool({fold(singular(n.lower())) for n in nouns} & {
        fold(singular(w.lower())) for w in re.findall(r"[A-Za-z]+", label.group(1))})


def asks_who(question: str) -> bool:
    """Whether ``question`` starts with "Who" / "Whom": it asks for a person."""
    return bool(_WHO.match(question))


_BARE_NUMBER = re.compile(r"[$£€]?\d+(?:[.,:-]\d+)*\s?%?")
NEAR_WORDS = 8  # how near a candidate the question's words count (typed_span)
_SPAN_WORD = re.compile(r"[\w][\w'’.\-/]*[\w]|[\w]")
_LIST_GAP = re.compile(r"\s*(?:,\s*(?:and\s+|or\s+)?|\s(?:and|or)\s+)", re.I)
_OBJECT_WORDS = frozenset("the a an it its this that these those his her their them him me us you our my "
                          "your".split())
_NOT_PLURAL = frozenset("does was has is this its his news series species analysis".split())
_EDGE = "`'\"’‘“”.,:;!?()[]{}"
_ASKS_PLACE = re.compile(r"^\W*where\b|[,;]\s*where\b|\bplace of\b|\bbirthplace\b|\bhometown\b|\b(?:what|which)\s+(?:city|town|village|country|"
                         r"state|county|province|region|location|place)\b", re.I)
_WHERE = re.compile(r"^\W*where\b", re.I)
# "In which city is Brightline Systems based?" asks where, as "Where ...?" does: a place's name
# shows no type, and a city asked with a verb of being somewhere is a place after in / at
_CITY_WHERE = re.compile(r"^\W*(?:(?:in|at|from|near)\s+)?(?:which|what)\s+(?:city|town|village|location|place)\b"
                         r".*\b(?:based|located|headquartered|born|situated|lives?|lived)\b", re.I)
_CALENDAR_WORDS = frozenset(_MONTHS.lower().split("|")) | frozenset(
    "monday tuesday wednesday thursday friday saturday sunday".split())
_ACRONYM = re.compile(r"[A-Z][A-Z&.]{1,7}")
_LOCATIVE = frozenset("in at near from".split())
# "Who founded ...?", "Which company acquired ...?": the question asks for the doer of its verb
# ("Which company is it owned by now?": asked in the passive)
_AGENT_ASKED = re.compile(r"^\W*(?:who|(?:which|what)\s+[a-z]+)\s+(?:([a-z]{3,}ed|wrote|made|built|bought|sold|won|led|"
                          r"owns|makes|runs|leads|writes)\b|(?:is|was|are|were)\s+[^?]*?\b([a-z]{3,}ed|made|built|"
                          r"bought|sold|won|led|written)\s+by\b)", re.I)
# a role asked of a name: "Who is the chief product officer of Calloway Data?" ("chief executive
# officer" is another role), "Who was the spouse of ...?"
_ROLE_ASKED = re.compile(r"^\W*(?i:who\s+(?:is|was|are|were)\s+(?:the\s+)?)((?:[a-z]+\s+){0,3}?[a-z]+)\s+(?:of|at|for)\b")
_ROLE_MODIFIERS = frozenset("main lead current former first last new original present late then federal "
                            "national official".split())
_NOT_AGENT_VERBS = frozenset("based named called located born known used aged".split())
AGENT_OBJECT_WORDS = 3  # the known name within this many words after the asked verb
_YEAR_ASKED = re.compile(r"\b(?:what|which)\s+year\b", re.I)
_CENTURY_ASKED = re.compile(r"\b(?:what|which)\s+century\b", re.I)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


YEAR_IN = re.compile(r"(?<!\d)(?:1[0-9]{3}|20\d{2})(?!\d)")  # a year, the project's one pattern of it


def is_year(span: str) -> bool:
    """Whether ``span`` is a year alone ("1865", "2024"): the one pattern of a year, :data:`YEAR_IN`."""
    return YEAR_IN.fullmatch(span.strip()) is not None
# The words a passage states a relation with, for the word a question asks it with: "Who is the
# spouse of X?" is answered in X's passage by "He married Y", "Where was X born?" by "born in Y".
# A candidate near these counts as near the question's word (typed_span).
RELATION_CUES: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "spouse": "married marry marriage wife husband wed wedded wedding spouse",
    "wife": "married marry marriage wife wed wedded wedding",
    "husband": "married marry marriage husband wed wedded wedding",
    "married": "married marry marriage wife husband wed wedded wedding",
    "father": "son daughter father born child",
    "mother": "son daughter mother born child",
    "parent": "son daughter father mother born child",
    "child": "son daughter children child father mother",
    "children": "son daughter children child father mother",
    "son": "son children child father mother",
    "daughter": "daughter children child father mother",
    "sibling": "brother sister sibling siblings",
    "brother": "brother sibling siblings",
    "sister": "sister sibling siblings",
    "birth": "born birth native",
    "birthday": "born birth",
    "birthplace": "born birth native",
    "hometown": "born native grew raised",
    "born": "born birth native",
    "death": "died death die",
    "die": "died death die",
    "died": "died death die",
    "far": "distance distant away",
    "buried": "buried burial interred",
    "burial": "buried burial interred",
    "educated": "educated studied graduated attended alumnus alumna",
    "university": "educated studied graduated attended university",
    "employer": "worked employed joined professor",
    "founded": "founded founder established",
    "founder": "founded founder established",
    # ("the Austin company behind Lumen" made it)
    "maker": "made makes maker developed develops developer built builds created behind",
    "developer": "made makes developed develops developer built builds created behind",
    "owned": "owned owns owner acquired acquires bought",
    "owner": "owned owns owner acquired acquires bought",
    "valid": "valid validity expire expires expired expiry lifetime ttl",
    # an amount of one kind is stated with its word (not a funding round's "$32 million" for revenue)
    "revenue": "revenue revenues sales turnover earned earns earnings income",
    "income": "income earned earns earnings revenue revenues",
    "profit": "profit profits earned earns earnings",
    "turnover": "turnover revenue revenues sales",
    "earnings": "earnings earned earns profit profits income",
    "salary": "salary salaries paid pays pay earned earns wage wages",
    "budget": "budget budgets budgeted",
    "funding": "funding funded raised raises round invested investment",
    "valuation": "valuation valued",
}.items()}
# the amounts a sentence must name by their word or a cue (RELATION_CUES) to answer
_STATED_AMOUNTS = frozenset("revenue income profit turnover earnings salary budget funding valuation".split())


KEYWORD_WORDS = 6  # a query this short without a question word or "?" is keywords ("lumen default port")


def _keywords(query: str) -> list[str]:
    """The lower-cased words of a keyword query ("lumen default port"); [] for a question (a
    question word, "?", an auxiliary first) or a text longer than :data:`KEYWORD_WORDS` words."""
    if "?" in query or _AUXILIARY.match(query) or _WH.search(query):
        return []
    words = [w.lower() for w in re.findall(r"[A-Za-z][\w.-]*", query)]
    return words if len(words) <= KEYWORD_WORDS else []


def _keyword_asks(query: str) -> list[str]:
    """The words a keyword query (:func:`_keywords`) asks a figure or date by
    (:data:`MEASURE_WORDS`, its units' words, :data:`_TIME_WORDS`): ["port"] of "lumen default
    port", ["release", "date"] -> ["date"] of "kestrel 2.0 release date"; [] for a question, a
    longer text or one asking neither."""
    return [w for w in _keywords(query) if w in MEASURE_WORDS or w in _MEASURED or w in _TIME_WORDS]


# what a question naming a setting by its words may say besides them: it asks for its value
_SETTING_ASKED = frozenset({"what", "which", "default", "value", "setting", "option", "current", "number"})
# a setting's short words, as a question spells them out ("maximum zoom": ``render.max_zoom``)
_KEY_SHORT = {"maximum": "max", "minimum": "min"}


def setting_asked(question: str, titles: Sequence[str]) -> str:
    """The setting (a dotted identifier, ``snapshot.interval_s``) of one of ``titles`` ("Configuring
    Lumen: snapshot.interval_s") whose value ``question`` asks for by the setting's words alone:
    "lumen snapshot interval", "What is the Lumen snapshot interval?", "ferrow default
    partitions" (``partitions.default``). Each part of the setting of two letters or more is one
    of the question's words (:func:`fold`: "snapshots" meets "snapshot"), and the question says
    nothing else but the title's words, stop words and "default" / "value"; it is a keyword
    query or a "What / Which ...?" question. "" otherwise: "What is the maximum snapshot
    interval?" asks for a limit, "How do I change the snapshot interval?" a way, and a question
    writing the identifier itself needs no setting named for it."""
    if _IDENTIFIER.search(question):
        return ""
    words = _keywords(question)
    if not words:
        kind, wh, _, _, _ = _question_parts(question)
        if kind is not None or wh not in ("what", "which"):
            return ""
        words = [w.lower() for w in re.findall(r"[A-Za-z][\w'’-]*", question)]
    folded = {fold(_KEY_SHORT.get(w.lower(), re.sub(r"['’]s?$", "", w))) for w in words if w not in QUERY_STOP_WORDS}
    # words a question may add: "value", a verb of taking ("the minimum TLS version Kestrel *accepts*")
    extra = {fold(w) for w in _SETTING_ASKED} | {w for w in folded if _TAKES.fullmatch(w)}
    for title in titles:
        for m in _IDENTIFIER.finditer(title):
            parts = {fold(x) for x in re.split(r"[._/-]", m.group(0).lower()) if len(x) > 1 and x.isalpha()}
            # the last part's words but a unit's two letters ("max_zoom", "max_size" of "max_size_gb")
            last = {fold(x) for x in re.split(r"[_-]", re.split(r"[./]", m.group(0).lower())[-1])
                    if (len(x) > 2 or x in _KEY_SHORT.values()) and x.isalpha()}
            other = {fold(w.lower()) for w in re.findall(r"[A-Za-z][\w'’-]*", title[:m.start()] + title[m.end():])}
            if ((len(parts) > 1 and parts <= folded) or (len(last) > 1 and last <= folded)) \
                    and folded <= parts | other | extra:
                return m.group(0)
    return ""


# A setting page's description ("The `replication.factor` setting controls how many brokers hold
# a copy of each partition."): a question asking a default in its words asks that setting's
_SETTING_DESCRIBED = re.compile(r"^The\s+`([\w.]+)`\s+setting\s+controls\s+(.+)$")
DESCRIBED_SHARE = 0.75  # of the question's content words (names and "default" aside) the description holds


def setting_described(question: str, sentences: Sequence[str]) -> str:
    """The setting whose description among ``sentences`` ("The `replication.factor` setting
    controls how many brokers hold a copy of each partition.") holds :data:`DESCRIBED_SHARE` of
    the content words of ``question``, a question asking for a default ("How many brokers keep
    a copy of each Ferrow partition by default?": brokers, copy, partition of brokers, keep,
    copy, partition), the question's names and "default" / "value" aside; the first such, ""
    when none or the question asks no default."""
    if not _DEFAULT.search(question) or _IDENTIFIER.search(question):
        return ""
    names = {w.lower() for n in entity_names(question) for w in n.split()}
    asked = {fold(w.lower()) for w in re.findall(r"[A-Za-z][\w'’-]*", question)
             if w.lower() not in QUERY_STOP_WORDS and w.lower() not in names and w.lower() not in _SETTING_ASKED
             and not _DEFAULT.fullmatch(w)}
    if len(asked) < 2:
        return ""
    for sentence in sentences:
        m = _SETTING_DESCRIBED.match(sentence.strip())
        if m is None:
            continue
        said = {fold(w.lower()) for w in re.findall(r"[A-Za-z][\w'’-]*", m.group(2))}
        if len(asked & said) >= DESCRIBED_SHARE * len(asked):
            return m.group(1)
    return ""


# after a question word: an auxiliary, a name and its possessive ("is Lumen's", "was Harbor & Finch's")
_POSSESSIVE_ASKED = re.compile(rf"\s+(is|was|are|were)\s+{_NAME_ALONE}['’]s\s+")


def _question_parts(question: str) -> tuple[AnswerKind | None, str, list[str], list[str], re.Match[str] | None]:
    """``(kind or None, wh, words after it, head, its match)`` of ``question``: a kind when it
    is decided before the head counts (YESNO, OTHER, CHOICE), the question word, the five words
    after it and the noun phrase after it up to its first relation word ("of", "does")."""
    m = _WH.search(question)
    keywords = _keyword_asks(question) if m is None else []
    if keywords:  # "lumen default port": what is its port
        return None, "what", keywords, keywords, None
    if m is None or (m.start() > 0 and _AUXILIARY.match(question)
                     and not re.search(r"[,;]\s*$", question[:m.start()])):
        return ("YESNO" if _AUXILIARY.match(question) else "OTHER"), "", [], [], m
    # ", or bazar," names the same thing again: no alternative to choose from
    plain = _ALSO_CALLED.sub(",", question)
    k = _WH.search(plain)
    if k is not None and (_CHOICE.search(plain[k.start():]) or _CHOICE.search(plain[:k.start()])):
        return "CHOICE", "", [], [], m
    wh = m.group(1).lower()
    # "What is Lumen's default port?": the noun phrase after the possessive name, as after "the"
    owned = _POSSESSIVE_ASKED.match(question, m.end())
    rest = question[m.end():] if owned is None else f"{owned.group(1)} {question[owned.end():]}"
    after = [w.lower() for w in re.findall(r"[A-Za-z]+", rest)][:5]
    head: list[str] = []
    for w in after:
        if w in RELATION_WORDS and w not in ("is", "was", "are", "were") or len(head) == 4:
            break
        head.append(w)
    return None, wh, after, head, m


def _measure_words(wh: str, after: Sequence[str], head: Sequence[str], question: str,
                   m: re.Match[str] | None) -> list[str]:
    """The words of a question that ask for a quantity: "how *long*", the :data:`MEASURE_WORDS`
    of a what / which head, or "... a *population* of what?"."""
    if wh == "how":
        return list(after[:1]) if after[:1] and after[0] in HOW_MUCH_WORDS else []
    if wh in ("what", "which"):
        # (a keyword query's, no question word: each word with units, "quarry latency")
        words = [w for w in head if w in MEASURE_WORDS or (m is None and w in _MEASURED)]
        if words:
            return words
    measured = re.search(r"\b([a-z]+)\s+of\s*$", question[:m.start()], re.I) if m is not None else None
    if wh == "what" and measured and measured.group(1).lower() in MEASURE_WORDS:
        return [measured.group(1).lower()]
    return []


def answer_kind(question: str) -> AnswerKind:
    """What kind of span answers ``question`` (see the rule above ``MEASURE_WORDS``).

    ``DATE``, ``NUM`` or ``ENT`` for a span; ``YESNO`` (it starts with an auxiliary and asks no
    wh-question), ``CHOICE`` (it offers alternatives joined by "or"), ``OTHER`` (why, how,
    or no question word).
    """
    kind, wh, after, head, m = _question_parts(question)
    if kind is not None:
        return kind
    if asks_description(question):
        return "OTHER"
    if wh == "when" or (wh in ("what", "which") and _TIME_WORDS & set(head)):
        return "DATE"
    if wh == "how":
        return "NUM" if _measure_words(wh, after, head, question, m) else "OTHER"
    if wh == "why":
        return "OTHER"
    if _measure_words(wh, after, head, question, m):
        return "NUM"  # "What port ...", "... an island with a population of what?"
    if wh in ("what", "which") and asked_bound(question):
        return "NUM"  # "What is the largest message Ferrow accepts?": a figure
    return "ENT"


# The dimension a measure word asks for, and the units that show it: "At what *temperature*
# ...?" is answered by "220 degrees Celsius", not by "serves 8"; "How *long* ...?" by "about 60
# minutes" or "6,650 km"; "Which *port* ...?" by the figure after "port" (or after a colon:
# "localhost:7420"); "Which *version* ...?" by "3.0.2", not by "2 hours". Measure words with no
# dimension here ("number", "population", "value", "how many") take any figure. A question
# about a *default* that asks for no dimension is answered by a value a sentence states as the
# default ("Default: `300`.", "Out of the box, `cron.timezone` is `UTC`"), not by a figure or
# file name of a sentence about something else.
_UNITS: dict[str, str] = {
    "temperature": r"(?:degrees?(?:\s+(?:Celsius|Fahrenheit|centigrade|[CF]\b))?|°\s?[CF]?|Celsius\b|Fahrenheit\b"
                   r"|kelvins?\b|K\b)",
    "duration": r"(?:milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|hours?|hrs?|h|days?|weeks?|months?|years?"
                r"|yrs?|decades?|centuries)\b",
    "length": r"(?:kilometres?|kilometers?|km|metres?|meters?|m|centimetres?|centimeters?|cm|millimetres?"
              r"|millimeters?|mm|miles?|mi|feet|foot|ft|inches|yards?|astronomical\s+units?|AU|light[- ]years?"
              r"|parsecs?)\b",
    "area": r"(?:square\s+[a-z]+|sq\.?\s?[a-z]+|km2|km²|m2|m²|acres?|hectares?|ha\b)",
    "size": r"(?:bytes?|[KMGTP]i?B|kilobytes?|megabytes?|gigabytes?|terabytes?)\b",
    "weight": r"(?:kilograms?|kg|grams?|g|tonnes?|tons?|pounds?|lbs?|ounces?|oz)\b",
    "percentage": r"(?:%|percent\b|per\s+cent\b)",
    "speed": r"(?:km/h|kph|mph|miles\s+per\s+hour|knots?\b|m/s)",
    "money": r"(?:(?:thousand|million|billion|bn|m)\s+)?(?:dollars?|euros?|pounds?|yen|rupees?|USD|EUR|GBP)\b",
}
_MEASURED: dict[str, tuple[str, ...]] = {w: dims for words, dims in (
    ("temperature hot", ("temperature",)),
    ("long", ("duration", "length")),
    ("duration interval timeout delay latency", ("duration",)),
    ("length distance far tall height high deep depth wide width elevation altitude", ("length",)),
    ("area", ("area",)),
    ("size big large", ("size", "area")),
    ("ram memory disk storage", ("size",)),  # "How much RAM does Quarry need?": "4 GB", not "64-bit"
    ("weight heavy mass", ("weight",)),
    ("percentage percent uptime", ("percentage",)),
    ("speed fast", ("speed",)),
    ("price cost fee fees salary budget revenue income profit turnover funding valuation earnings", ("money",)),
    ("port", ("port",)),
    ("version", ("version",)),
) for w in words.split()}
_FIGURE = re.compile(r"[$£€]?\d+(?:[.,]\d+)*(?:st|nd|rd|th)?")
_APPROXIMATELY = re.compile(r"(?:\b(?:about|around|approximately|roughly|nearly|almost|over|under|some|up to"
                            r"|at least|at most|more than|less than|fewer than)\s+)$", re.I)
# a port: the figure after "port", after a host and a colon ("localhost:7420", also inside a
# command: "`curl http://localhost:7420/health`") or after docker's "-p"
_PORT = re.compile(r"(?:\bports?\s*(?:number\s*)?(?:of\s+|is\s+|=\s*|:\s*)?|(?<=[A-Za-z\]]):|(?<!\w)-p\s+)"
                   r"(\d{2,5})(?!\d|[.,]\d)", re.I)
_DEFAULT = re.compile(r"\bdefault(?:s|ed)?\b|\bout of the box\b", re.I)
# what a value follows: "Default: `300`", "defaults to 20", or the key it is the value of:
# "`snapshot.interval_s` is `300`", "interval_s: 300", "health_interval_s = 10"
_DEFAULT_IS = re.compile(r"\bdefaults?(?:\s+value)?\s*(?:is|:|=|to)\s*[`'\"]?$", re.I)
_VALUE_AFTER = r"[`'\"]?\s*(?:[:=]|\bis\b|\bto\b)\s*[`'\"]?$"
_PAID = frozenset("cost costs price priced charge charged bill bills billed pay paid earn earned spend spent worth".split())
_VERSION_FIGURE = re.compile(r"v?\d+(?:\.\d+)+")


def _measure_spans(sentence: str, dims: Sequence[str], keys: Sequence[str]) -> list[tuple[int, int, str]]:
    """The entities of ``sentence`` (:func:`entity_spans`) and the figures of ``dims`` that a
    quoted command or configuration holds, where no entity is: its ports (:data:`_PORT`:
    "`docker run -p 7420:7420 ...`") and the values it gives ``keys`` ("`cron: timezone: UTC`")."""
    entities = _with_number_words(sentence, entity_spans(sentence))  # "valid for one hour"
    spans = {(s, e) for s, e, _ in entities}
    extra = [m.span(1) for m in _PORT.finditer(sentence)] if "port" in dims else []
    if "default" in dims:
        extra += [m.span(1) for k in keys for m in re.finditer(
            rf"(?<![\w.]){re.escape(k)}[`'\"]?\s*[:=]\s*[`'\"]?([\w][\w.\-/]*\w|\w)", sentence, re.I)]
    return sorted([*entities, *((s, e, "NUM" if _BARE_NUMBER.fullmatch(sentence[s:e]) else "ENT")
                                for s, e in dict.fromkeys(extra) if (s, e) not in spans)])


def asked_measure(question: str) -> tuple[str, ...]:
    """The dimensions a question asking for a quantity wants its figure in (:data:`_UNITS`, or
    ``port`` / ``version``): ("temperature",) for "At what temperature ...?", ("duration",
    "length") for "How long ...?"; ("default",) for a value asked as a setting's default
    ("What is the default value of cron.timezone?"); () for every other question."""
    kind, wh, after, head, m = _question_parts(question)
    if kind is not None:
        return ()
    words = _measure_words(wh, after, head, question, m) if wh in ("how", "what", "which") else []
    if set(words) & _BOUND_WORDS:  # "the maximum message size": the nouns after the bound say it
        after_bound = re.search(rf"\b(?:{'|'.join(_BOUND_WORDS)})\s+((?:[A-Za-z]+\s+){{0,2}}[A-Za-z]+)", question, re.I)
        words = [*words, *(w.lower() for w in after_bound.group(1).split())] if after_bound else words
    dims = tuple(dict.fromkeys(d for w in words for d in _MEASURED.get(w, ())))
    asked = {w.lower() for w in re.findall(r"[A-Za-z]+", question)} if words == ["much"] else set()
    if asked & _PAID:
        dims = ("money",)  # "How much does the Starter plan cost?"
    elif asked:  # "How much did Quarry 3.0 cut the p99 query *latency*?": the measured noun says it
        dims = tuple(dict.fromkeys(d for w in sorted(asked & _MEASURED.keys()) for d in _MEASURED[w]))
    if dims:
        return dims
    if _DEFAULT.search(question) and answer_kind(question) in ("NUM", "ENT"):
        return ("default",)
    return ()


@functools.lru_cache(maxsize=64)
def _unit_pattern(dims: tuple[str, ...]) -> re.Pattern[str] | None:
    """The units of ``dims`` (:data:`_UNITS`) as one pattern, compiled once; None without any."""
    units = [_UNITS[d] for d in dims if d in _UNITS]
    return re.compile(rf"\s?(?:{'|'.join(units)})") if units else None


_COMPOUND_NEXT = re.compile(r"\s+(?:and\s+)?\d+(?:[.,]\d+)?")  # "3 hours[ 20] minutes"
_COMPOUND_PREV = re.compile(r"\d+(?:[.,]\d+)?(?P<unit>\s?[A-Za-z]+)\s+(?:and\s+)?$")  # "[3 hours ]20 minutes"


def _measured(sentence: str, s: int, e: int, span: str, dims: Sequence[str],
              keys: Sequence[str] = ()) -> tuple[int, int] | None:
    """The bounds of the candidate ``sentence[s:e]`` (``span`` once trimmed) as a figure of one
    of ``dims`` (:func:`asked_measure`), its unit and an "about" before it included ("about 60
    minutes"); None when it is not one. A ``default`` is the value a sentence states as one, or
    the value given to one of ``keys`` (the question's identifiers and their last parts)."""
    if "default" in dims:
        before = sentence[max(0, s - 60):s]
        if _DEFAULT_IS.search(before) or any(re.search(re.escape(k) + _VALUE_AFTER, before, re.I) for k in keys):
            return s, e
        return None
    if "version" in dims and (_VERSION_FIGURE.fullmatch(span)
                              or re.search(r"\bversion\s*$", sentence[max(0, s - 12):s], re.I)):
        return s, e
    if "port" in dims and any(m.span(1) == (s, e) for m in _PORT.finditer(sentence)):
        return s, e
    figure = _FIGURE.match(sentence, s) or _NUMBER_WORD.match(sentence, s)  # "one hour", "eight weeks"
    if figure is None:
        return None
    units = _unit_pattern(tuple(dims))
    unit = units.match(sentence, figure.end()) if units is not None else None
    end = unit.end() if unit else figure.end()
    # a change or a span stated as a range answers with both ends: "cut p99 latency from 48 ms to
    # 21 ms", "bake from 50 to 60 minutes"
    start = re.search(r"\bfrom\s+$", sentence[max(0, s - 8):s])
    to = re.match(r"\s+to\s+", sentence[end:]) if start is not None and units is not None else None
    other = _FIGURE.match(sentence, end + to.end()) if to is not None else None
    other_unit = units.match(sentence, other.end()) if other is not None and units is not None else None
    if other_unit is not None:
        return s - len(start.group(0)), other_unit.end()
    if unit is None and not ("money" in dims and sentence[s] in "$£€"):
        return None
    if units is not None:
        # a compound figure is one ("3 hours 20 minutes", "5 feet 11 inches"): the next part joins,
        # and a part after another is read from the first
        while (more := _COMPOUND_NEXT.match(sentence, end)) and (u := units.match(sentence, more.end())):
            end = u.end()
        while (first := _COMPOUND_PREV.search(sentence[:s])) and units.fullmatch(first.group("unit")):
            s = first.start()
    about = _APPROXIMATELY.search(sentence[max(0, s - 20):s])
    return s - (len(about.group(0)) if about else 0), max(e, end)


# The asked type (the answer-type rule's finer half): "Which *river system* ...?" is answered by
# a name holding "River" ("Holston River"), "In what New York *county* ...?" by "Rensselaer
# County", "Which *country* ...?" by a country, "For which *film* ...?" by a quoted title or a
# name right after "film". A candidate of the asked type counts as this many more of the
# question's words near it (typed_span).
TYPE_FIT_WORDS = 5
# heads that say no type a name shows ("What *kind* of ...", "What *name* ...")
_GENERIC_HEADS = frozenset("kind kinds type types sort sorts name names part parts thing things one ones".split())
# heads that ask for a person: a country never answers "Which *footballer* ...?"
PERSON_HEADS = frozenset("""
actor actress person man woman singer rapper player footballer cricketer athlete author writer
novelist poet playwright director producer composer musician guitarist drummer artist painter
politician president king queen emperor leader founder wrestler boxer coach manager
""".split())
# heads that ask for a work, which a passage may quote ("the 1980 film "Coal Miner's Daughter"")
_WORK_HEADS = frozenset("""
film movie song single album novel book series show sitcom play opera musical episode game poem
painting magazine newspaper
""".split())
# "Which file ...?" is answered by a file's name or path ("tidewater/retry/backoff.go")
_FILE_HEADS = frozenset("file files module modules".split())
# what a path or address answers ("Which repository ...?"); a question asking for another type
# ("Which company ...?") is not answered by one
_ADDRESS_HEADS = _FILE_HEADS | frozenset("repository repo url link address site website page path directory "
                                         "folder".split())
# (a host and path, a scheme, or a path of three parts or more: not "McLaren MP4/13" nor "A41/A5117")
_ADDRESS = re.compile(r"\w+://\S+|[\w-]+(?:\.[\w-]+)+(?:/[\w.-]*)+|[\w.-]+(?:/[\w.-]+){2,}")
_FILE_NAME = re.compile(r"[\w./-]*\w\.[A-Za-z][A-Za-z0-9]{0,4}")
_COUNTRY_HEADS = frozenset("country countries nation nations".split())
_COUNTRY_NAMES = frozenset(k.lower() for k in COUNTRIES)


def singular(word: str) -> str:
    """A plural's singular, roughly, lower-cased: "documentaries" -> "documentary", "clubs" ->
    "club", "genuses" -> "genus", "churches" -> "church"; "species", "status", "class" stay."""
    w = word.lower()
    if w in _NOT_PLURAL:  # "species", "series"
        return w
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 5 and w.endswith(("sses", "shes", "ches", "xes", "uses")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


# "which / what" and the words after it: the phrase ends at an auxiliary, a preposition, a clause
# word or a relation word ("which clubs *won* ..."), and where a name follows a lower-case word
# ("what city Knox County": the name is what the question is about)
_WH_WORD = re.compile(r"\b(?:which|what)\s+", re.I)
_PHRASE_TOKEN = re.compile(r"[\w'’-]+|[^\w\s]")
_PHRASE_END = frozenset("""is was were are did does do has have had can could will would that who whom which whose
in of by for from with at to on as and or""".split()) | RELATION_WORDS
MAX_PHRASE_WORDS = 7
_OF_THE = re.compile(r"(?:(?:one|two|each|all)\s+)?(?:of\s+(?:the|these|those|his|her|their|its)\s+)?", re.I)


def _asked_phrase(question: str, first: bool = False) -> list[str]:
    """The words of the "which / what ..." phrase of ``question`` (:data:`_PHRASE_END`); with
    ``first``, only when "which" / "what" is its first question word (not "Who played the
    team which ..."), or its last in a question that does not start with one."""
    if first:
        m = _WH.search(question)
        if m is not None and m.group(1).lower() not in ("what", "which") and question[:m.start()].strip():
            # a statement that asks at its end ("The physicist who shared ... in *what country*?"):
            # its last "what / which" asks, not the relative "who" before
            m = [*_WH.finditer(question)][-1]
        if m is None or m.group(1).lower() not in ("what", "which"):
            return []
    else:
        m = _WH_WORD.search(question)
        if m is None:
            return []
    words: list[str] = []
    rest = question[m.end():].lstrip()
    rest = rest[len(_OF_THE.match(rest).group(0)):]  # "Which of the teams ...": the teams
    for token in _PHRASE_TOKEN.findall(rest)[:MAX_PHRASE_WORDS]:
        if not (token[0].isalnum() or token[0] == "_") or token.lower() in _PHRASE_END \
                or (words and words[-1].islower() and token[:1].isupper()) \
                or (len(words) == 1 and token.lower() in ("the", "a", "an")):
            # an article right after the noun starts the next phrase ("Which country *the director
            # of X* is from?"); after two words it is a verb's object ("which file contains the code")
            break
        words.append(token)
    return words


def asked_type(question: str) -> tuple[str, ...]:
    """The words that say what kind of thing ``question`` asks for: the lower-case content
    words of its "which / what ..." phrase ("what Mexican-American dog behaviorist with ..." ->
    ("dog", "behaviorist"), "what city Knox County" -> ("city",), "which clubs won ..." ->
    ("clubs",)); none for a question without one ("Who ...?", "What is ...?", "Where ...?")."""
    return tuple(w for w in _asked_phrase(question) if w.islower() and w not in QUERY_STOP_WORDS)


# "Where can I find the code for X?", "Where is X implemented?": a file is asked for (the question
# proper, before a rewrite's appended terms)
_WHERE_CODE = re.compile(r"^\W*where\b[^?]*\b(?:code|source\s+code|implemented|implementation|defined)\b", re.I)


# "What is the <noun> of ...?" asks for its noun ("the capital, Reykjavik"); not a figure's,
# a date's or a place's (asked_measure, answer_kind and "place of" say what answers those)
_THE_NOUN_OF = re.compile(r"^\W*(?i:what\s+(?:is|was|are|were)\s+the)\s+([a-z]+)\s+of\b")  # a noun, not a name
_NOT_NOUN_OF = MEASURE_WORDS | _TIME_WORDS | frozenset({"place", "default"})
# "What is Quarry's license?" asks for its noun, as "What is the license of Quarry?" does
_OWNED_NOUN = re.compile(rf"^\W*(?i:what\s+(?:is|was|are|were))\s+{_NAME_ALONE}['’]s\s+((?:[a-z][\w-]*\s*){{1,3}})\W*$")


def asked_head(question: str) -> list[str]:
    """The nouns a question whose first question word is "what" / "which" asks its answer to
    be, singular and lower-cased: :func:`asked_type`'s words and the phrase's last word ("which
    river system in ..." -> ["river", "system"], "what New York county ..." -> ["county"],
    "which Olympic Games held ..." -> ["game"], "What is the capital of Iceland?" -> ["capital"]);
    [] for other questions and generic heads ("What kind of ..."). "Where can I find the code for
    X?" asks for a file: ["file"]."""
    if _WHERE_CODE.search(question):
        return ["file"]  # "Where can I find the code for it?": a path answers ("lumen/evict.py")
    phrase = _asked_phrase(question, first=True)
    of = _THE_NOUN_OF.match(question) if not phrase else None
    if of is not None and of.group(1).lower() not in _NOT_NOUN_OF:
        phrase = [of.group(1)]  # "What is the capital of Iceland?": capital
    owned = _OWNED_NOUN.match(question) if not phrase and of is None else None
    if owned is not None:
        phrase = owned.group(1).split()  # "What is Quarry's license?": license
    # a word followed by an object is a verb ("which file *contains* the code"): the noun ends before it
    phrase = phrase[:next((k for k in range(len(phrase) - 1) if phrase[k + 1].lower() in _OBJECT_WORDS), len(phrase))]
    words = [*(w for w in phrase if w.islower()), *phrase[-1:]]
    return list(dict.fromkeys(singular(w) for w in words if not w.isdigit() and w.lower() not in QUERY_STOP_WORDS
                              and singular(w) not in _GENERIC_HEADS))


# heads whose names say their kind ("Presque Isle County", "Holston River"): such a name is of
# the asked type wherever it stands
_NAMED_HEADS = frozenset("county river lake university mountain island".split())
_MONTH_HEADS = frozenset({"month"})  # "Which month ...?": a month's name shows it
_MONTH_NAMES = frozenset(_MONTHS.lower().split("|"))
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
# "On which day of the week ...?", "What weekday ...?": a weekday's name ("Tuesdays") answers
_WEEKDAY_ASKED = re.compile(r"\bday\s+of\s+the\s+week\b|\b(?:which|what)\s+(?:week)?days?\b(?!\s+of\s+the\s+month)", re.I)


def asks_typed(question: str) -> bool:
    """Whether ``question`` asks for a type its short answer must show (``typed_span`` with
    ``typed``): a type a name shows by itself (:func:`asks_shown_type`) or a figure of a
    dimension (:func:`asked_measure`) or a bound (:func:`asks_bound`)."""
    return asks_shown_type(question) or bool(asked_measure(question)) or asks_bound(question)


def asks_shown_type(question: str) -> bool:
    """Whether ``question`` asks for a type a name shows by itself, wherever it stands: a country
    ("In what country ...?", "Which nation ...?"), or a thing whose name says its kind
    (:data:`_NAMED_HEADS`: "Which county ...?", "What river ...?"), a cloud region
    (:data:`_REGION_ID`: "eu-central")."""
    return bool((_COUNTRY_HEADS | _NAMED_HEADS | _MONTH_HEADS | _FILE_HEADS | _REGION_HEADS) & set(asked_head(question)))


# a head noun's British spelling, as the American one (a question and its sources may spell it either way)
_SPELLED = {"licence": "license", "colour": "color", "centre": "center", "theatre": "theater",
            "catalogue": "catalog", "programme": "program", "defence": "defense", "organisation": "organization",
            "metre": "meter", "litre": "liter", "neighbour": "neighbor", "harbour": "harbor"}


def _spelled(word: str) -> str:
    """``word``'s singular (:func:`singular`) in the American spelling (:data:`_SPELLED`)."""
    w = singular(word)
    return _SPELLED.get(w, w)


def _fits(sentence: str, s: int, e: int, span: str, head: Sequence[str]) -> bool:
    """Whether the candidate ``sentence[s:e]`` (``span`` once trimmed) is of the type ``head``
    asks for (:func:`asked_head`): one of its capitalised words is a head noun ("Holston
    *River*"), the word just before or after it is one ("the film "Titanic"", "the band Queen",
    "the Evictor class"), it is a file's name for "which file" ("lumen/evict.py"), a country for
    "which country", or it is quoted for a work ("which film")."""
    if not head:
        return False
    head = [_SPELLED.get(h, h) for h in head]  # "license" meets "the Apache-2.0 licence"
    words = {_spelled(w) for w in re.findall(r"[A-Z][\w'’-]*", sentence[s:e])}
    before = re.findall(r"[\w'’-]+", sentence[max(0, s - 30):s])
    after = re.match(r"[\s\"”'’]*([a-z][\w-]*)", sentence[e:e + 30])
    quoted = sentence[s - 1:s] in "\"“'‘" and s > 0
    return bool(words & set(head)) or (bool(before) and _spelled(before[-1]) in head) or (
        after is not None and _spelled(after.group(1)) in head) or (
        bool(_FILE_HEADS & set(head)) and bool(_FILE_NAME.fullmatch(span))) or (
        bool(_COUNTRY_HEADS & set(head)) and span.lower() in _COUNTRY_NAMES and not demonym(span)) or (
        bool(_MONTH_HEADS & set(head)) and span.lower() in _MONTH_NAMES) or (
        bool(_REGION_HEADS & set(head)) and bool(_REGION_ID.fullmatch(span))) or (
        quoted and bool(_WORK_HEADS & set(head)))


_APPOSITIVE_TAIL = re.compile(r",\s+(?:the|an?)\s+$")  # "Brightline Systems, the " before "Austin company"


def _appositive_of(sentence: str, s: int, entities: Sequence[tuple[int, int, str]]) -> tuple[int, int] | None:
    """``(start, end)`` of the name whose appositive the candidate at ``sentence[s:]`` stands in
    ("*Brightline Systems*, the Austin company behind Lumen"); None when it stands in none."""
    return next(((a, b) for a, b, lab in entities
                 if lab == "ENT" and b <= s and _APPOSITIVE_TAIL.fullmatch(sentence[b:s]) is not None), None)


def _describes_known(sentence: str, s: int, entities: Sequence[tuple[int, int, str]], question: str,
                     exclude: Sequence[str]) -> bool:
    """Whether the candidate at ``sentence[s:]`` stands in an appositive of a name the question
    or ``exclude`` names ("Brightline Systems, the Austin company behind Lumen"): the asked noun
    it shows is that name's, so it answers no question asking that type of another thing ("Which
    company acquired Brightline Systems?" is not answered "Austin"; "Where ...?" still may be)."""
    at = _appositive_of(sentence, s, entities)
    if at is None:
        return False
    name = sentence[at[0]:at[1]]
    return not missing_entities([name], question) or any(
        not missing_entities([name], x) or _same_name(name, x) for x in exclude)


_PREPOSITIONS = frozenset("in at on of from by for with to into near after before during under over".split())


def _after_preposition(words: Sequence[tuple[int, int, str]], at: int) -> bool:
    """Whether word ``at`` follows a preposition but "by", an article between ("under the
    Apache-2.0 licence"): not the doer of a verb ("written in Python")."""
    k = at - 1 - (at > 1 and words[at - 1][2] in ("the", "a", "an"))
    return k >= 0 and words[k][2] in _PREPOSITIONS and words[k][2] != "by"


def _does(sentence: str, words: Sequence[tuple[int, int, str]], at: Sequence[int], s: int,
          entities: Sequence[tuple[int, int, str]], verbs: set[str], objects: Sequence[str]) -> bool:
    """Whether the name at words ``at`` (``sentence[s:]``) is the subject of one of ``verbs``
    (folded) done to one of ``objects`` (lower-cased words of names): the last name before the
    verb (dates may come between), not one after a preposition ("In Austin, ..."), and the verb
    has an object within :data:`AGENT_OBJECT_WORDS` words ("Harbor & Finch announced on 12 March
    2024 that it has acquired Brightline Systems" for "Which company acquired Brightline Systems?").
    In the passive the name after "by" does it ("Kestrel is an API gateway made by Harbor &
    Finch"), and the name before the verb does not."""
    if at[0] > 1 and words[at[0] - 1][2] == "by" and words[at[0] - 2][2] in verbs:
        return True  # "made by Harbor & Finch"
    if at[0] > 0 and words[at[0] - 1][2] in _PREPOSITIONS:
        return False
    for k in range(at[-1] + 1, len(words)):
        if words[k][2] in verbs:
            if k + 1 < len(words) and words[k + 1][2] == "by":
                return False  # "an API gateway made by ...": done to it, not by it
            if any(lab == "ENT" and s < a and b <= words[k][0] for a, b, lab in entities):
                return False  # another name is nearer the verb
            after = sentence[words[k][1]:words[min(k + AGENT_OBJECT_WORDS, len(words) - 1)][1]].lower()
            return any(re.search(r"(?<![\w])" + re.escape(o) + r"(?![\w])", after) for o in objects)
    return False


def _states_doing(text: str, verbs: set[str], objects: Sequence[str]) -> bool:
    """Whether ``text`` (an appositive: "the Austin company behind Lumen") holds one of ``verbs``
    (folded) followed by one of ``objects`` (:func:`_does`'s)."""
    tokens = re.findall(r"[\w'’&.-]+", text.lower())
    at = next((k for k, w in enumerate(tokens) if fold(w) in verbs), None)
    after = " ".join(tokens[at + 1:]) if at is not None else ""
    return at is not None and any(re.search(r"(?<![\w])" + re.escape(o) + r"(?![\w])", after) for o in objects)


def of_asked_type(question: str, name: str) -> bool:
    """Whether ``name`` is of the type ``question`` asks for (:func:`asked_head`): one of its
    capitalised words is the asked noun ("Socialist Party of America" for "What political
    party ...?"), or it is a country for "Which country ...?"."""
    return _fits(name, 0, len(name), name, asked_head(question))


def _question_words(question: str) -> set[str]:
    """Lower-cased words of ``question``, possessives cut, dotted or slashed ones also in parts."""
    words = set()
    for w in re.findall(r"[\w][\w'’.\-/]*", question.lower()):
        w = re.sub(r"['’]s?$", "", w.rstrip("."))
        words.add(w)
        words.update(p for p in re.split(r"[./]", w) if p)
    return words


def _trim_known(text: str, known: set[str], head: Sequence[str] = ()) -> str:
    """``text`` without its leading and trailing words that are function words or in ``known``;
    a name holding one of the ``head`` nouns (:func:`asked_head`) is what was asked, whole but for
    its function words: "Rensselaer County" for "In what county ...?", "Socialist Party of
    America" for "What political party ...?"."""
    words = text.split()
    if head and {singular(w.strip(_EDGE)) for w in words if w[:1].isupper()} & set(head):
        known = set()

    def is_known(w: str) -> bool:
        core = re.sub(r"['’]s$", "", w.strip(_EDGE)).lower()
        return not core or core in QUERY_STOP_WORDS or core in known or (
            bool(re.search(r"[./]", core)) and all(p in known for p in re.split(r"[./]", core) if p))

    while words and is_known(words[0]):
        words.pop(0)
    while words and is_known(words[-1]):
        words.pop()
    return re.sub(r"['’]s$", "", " ".join(words).strip(_EDGE + " "))  # "Cesar Millan's" -> "Cesar Millan"


# a count written out ("eight legs", "five times"): "one" is too often no count ("one of the ..."),
# but for a unit of time it is ("valid for one hour")
_NUMBER_WORD = re.compile(r"\b(?:one(?=\s+(?:second|minute|hour|day|week|month|year|decade|century)\b)|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
                          r"|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy"
                          r"|eighty|ninety|hundred|dozen)\b", re.I)


def _with_number_words(sentence: str, entities: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``entities`` with the counts ``sentence`` writes out (:data:`_NUMBER_WORD`) as figures, in
    the sentence's order: "How many legs ...?" is answered "eight", not by a name."""
    words = [(m.start(), m.end(), "NUM") for m in _NUMBER_WORD.finditer(sentence)
             if not any(a <= m.start() < b for a, b, _ in entities)]
    return sorted([*entities, *words]) if words else entities


def _listed(sentence: str, found: Sequence[tuple[int, int, int, str, int, int]],
            best: tuple[int, int, int, str, int, int]) -> list[str]:
    """The candidates of ``sentence`` listed together with ``best`` ("A, B and C"): neighbours
    joined only by commas, "and" or "or"."""
    ordered = sorted(found, key=lambda f: f[4])
    k = ordered.index(best)
    lo = hi = k
    while lo > 0 and _LIST_GAP.fullmatch(sentence[ordered[lo - 1][5]:ordered[lo][4]]):
        lo -= 1
    while hi + 1 < len(ordered) and _LIST_GAP.fullmatch(sentence[ordered[hi][5]:ordered[hi + 1][4]]):
        hi += 1
    return list(dict.fromkeys(f[3] for f in ordered[lo:hi + 1]))


def plural_question(question: str) -> bool:
    """Whether ``question`` asks for several things: "What are ...", "Which parts ...", "Which
    capital cities ..." (a plural among the two words after the question word)."""
    m = _WH.search(question)
    if m is None:
        return False
    after = [w.lower() for w in re.findall(r"[A-Za-z]+(?:['’][A-Za-z]+)?", question[m.end():])][:3]
    if after[:1] and after[0] in ("are", "were"):
        return True
    # a plural noun is followed by its verb ("cities lie"), a verb's "-s" by its object
    # ("implements it", "contains the code")
    return any(re.fullmatch(r"[a-z]{3,}(?:[^su]s|ies)", w) and w not in _NOT_PLURAL
               and after[k + 1:k + 2] != [] and after[k + 1] not in _OBJECT_WORDS
               for k, w in enumerate(after[:2]))


def relation_cues(question: str) -> set[str]:
    """The words a passage may state ``question``'s relations with (:data:`RELATION_CUES`): "married",
    "wife", "husband" ... for "Who is the spouse of X?"; empty when it asks none."""
    return {cue for w in _question_words(question) for cue in RELATION_CUES.get(w, ())}


# a parenthesis that gives a name in other languages: "(Greek: χρυσόμαλλον δέρας)", "(Ukrainian:
# Кача ; Russian: Кача ; Crimean Tatar: Qaçı )"
_TRANSLATION = re.compile(r"\((?:[^()]*[;,]\s*)?[A-Z][a-z]+(?:\s[A-Z][a-z]+)?:[^()]*\)")


def _translations(sentence: str) -> list[tuple[int, int]]:
    """The character spans of ``sentence``'s parentheses that translate a name (:data:`_TRANSLATION`)."""
    return [m.span() for m in _TRANSLATION.finditer(sentence)] if ":" in sentence else []


_DATED = re.compile(r"\([^()]*\b(?:1[0-9]{3}|20\d{2})\b[^()]*\)")  # "(born October 9, 1959)", "(1909 – 1993)"


# words a person's name is written with or without ("Princess Elizabeth", "Queen Elizabeth II")
_TITLE_WORDS = frozenset("""mr mrs ms dr prof rev sir dame lord lady king queen prince princess duke duchess
emperor empress pope saint st president general i ii iii iv v vi vii viii""".split())


def _same_name(span: str, name: str) -> bool:
    """Whether ``span`` is ``name`` written otherwise: its words but titles and numerals
    (:data:`_TITLE_WORDS`) are some of ``name``'s ("Princess Elizabeth" for "Queen Elizabeth II");
    not a name holding all of ``name``'s and more: "Hans Albert Einstein" is Albert Einstein's son."""
    own = {w for w in re.findall(r"[\w'’]+", span.lower()) if w not in _TITLE_WORDS}
    return bool(own) and own < {w for w in re.findall(r"[\w'’]+", name.lower())} | _TITLE_WORDS \
        and any(w[:1].isupper() for w in span.split())


# a lifespan in parentheses: "(1505–1572)", "(c. 1514 – 24 November 1572)", "(born 1900 - died 1950)"
_LIFESPAN = re.compile(r"\((?:[^()]*?;\s*)?(?:c\.\s*|born\s+)?([^()–—;]*?\d{3,4})\s*(?:[–—]|\s-\s|-(?=\d))\s*"
                       r"(?:died\s+)?([^()–—;]*?\d{3,4})\s*\)")


_BORN = re.compile(r"\(born\s+([^()]*?\d{3,4})")  # "(born 10 May 1943)": a birth date


def states_life(question: str, sentence: str) -> bool:
    """Whether ``sentence`` gives a lifespan in parentheses ("John Knox (1505–1572)") and
    ``question`` asks when someone was born or died, or a birth date ("(born 10 May 1943)") and
    it asks when someone was born: it states the asked relation."""
    cues = relation_cues(question)
    return bool(("died" in cues and _LIFESPAN.search(sentence))
                or ("born" in cues and (_LIFESPAN.search(sentence) or _BORN.search(sentence))))


def _life_dates(sentence: str, death: bool, birth: bool) -> list[tuple[int, int]]:
    """The character spans of the dates ``sentence``'s lifespans give for a ``death`` or
    ``birth`` question: "John Knox (1505–1572)" the end for a death, the start (or "(born 10 May
    1943)") for a birth; [] for other questions."""
    if not (death or birth) or "(" not in sentence:
        return []
    return [m.span(2 if death else 1) for m in _LIFESPAN.finditer(sentence)] + (
        [m.span(1) for m in _BORN.finditer(sentence)] if birth else [])


def _outside_dates(sentence: str, words: Sequence[tuple[int, int, str]]) -> list[int]:
    """The indices of ``words`` (``(start, end, word)`` of ``sentence``) outside its dated
    parentheses (:data:`_DATED`)."""
    dated = [m.span() for m in _DATED.finditer(sentence)] if "(" in sentence else []
    return [j for j, (a, _, _) in enumerate(words) if not any(x < a < y for x, y in dated)]


def fold(word: str) -> str:
    """``word`` (lower-cased) without an inflection's ending, roughly ("fixed", "fixes" -> "fix",
    "listens", "listening" -> "listen", "released", "releases" -> "releas"): the project's one
    folding of inflections, by which a question's words meet a sentence's (the words counted near
    a candidate here, the lexical share of the extractive support in ``serving.pipeline.common``).
    A final "e" stays: "release" (a bug-fix release) does not meet "released"."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and word.isalpha():
            return word[: -len(suffix)]
    return word


STEM_CHARS = 5  # a folded word this long that begins another holds it ("discover" and "discovery")


def holds_word(word: str, words: set[str], roots: set[str]) -> bool:
    """Whether ``word`` is one of a sentence's ``words``, or, its inflection folded
    (:func:`fold`), one of their ``roots`` (the folded ``words``), or one of the two, at least
    :data:`STEM_CHARS` letters long, begins the other ("married" by "marriage")."""
    if word in words:
        return True
    if word.isdigit():
        return False
    root = fold(word)
    return root in roots or (len(root) >= STEM_CHARS and any(h.startswith(root) for h in words)) or any(
        word.startswith(r) for r in roots if len(r) >= STEM_CHARS)


# The relation a question asks about, which a sentence must state to answer it: the verb of one
# asking for its doer ("Who *founded* X?", :data:`_AGENT_ASKED`), the counted noun of "How many
# *employees* ...?", the final verb of "Where is X *headquartered*?" / "How long should dough be
# *kneaded*?" / "When was X *founded*?" (not answered by the date X was acquired). "Series C" of "Brightline Systems raised $40 million in a Series C round" answers
# no "Who founded Brightline Systems?"; "2 hours" of "... a wet dough and rise for 2 hours" no
# "How long should bread dough be kneaded?".
# the irregular forms of the doers' verbs _AGENT_ASKED names ("made by" states "Who makes X?")
_VERB_FORMS = [frozenset(f.split()) for f in (
    "make makes made making maker",
    # a work's author is stated by its kind as often as by the verb: "Alan Turing's 1936 paper"
    "write writes wrote written writing writer author paper book novel poem essay song play",
    "build builds built building builder", "buy buys bought buying buyer", "sell sells sold selling seller",
    "win wins won winning winner", "lead leads led leading leader", "run runs ran running",
    "own owns owned owning owner")]
_HOW_MANY = re.compile(r"\bhow\s+many\s+((?:[a-z][\w-]*\s+){0,2}[a-z][\w-]*)", re.I)
# the state a how-long question asks the time of ("How long is a reset link valid?"): a sentence
# on another duration of the thing ("lost service for 47 minutes") does not state it
_STATES = "valid|open|available|unavailable|active|alive|offline|online|down"
_FINAL_VERB = re.compile(rf"^\W*(?:where|when|how\s+(?:long|often|far|much))\b[^?]*\s([a-z]{{3,}}ed|{_STATES})\W*$", re.I)
_WORD = re.compile(r"[^\W_]+")
# the date of an announcement ("Harbor & Finch announced in September 2022 that ..."), which answers
# only a question about announcing when the sentence states another date after it, the event's
# (alone it is the event's too: "announced on 12 March 2024 that it has acquired ...")
_ANNOUNCE = re.compile(r"\bannounc\w*|\bunveil\w*", re.I)
_ANNOUNCED_AT = re.compile(r"\b(?:announc|unveil|said|reported|stated)\w*\s+(?:in|on)\s+$", re.I)
# a product's end asked ("When does Kestrel 1.x reach end of life?"): a release date says none of it
_LIFE_END = re.compile(r"\b(?:end[\s-]+of[\s-]+(?:life|support)|eol|retire[ds]?|discontinu\w*|deprecat\w*|sunset\w*)\b", re.I)
_LIFE_END_WORDS = frozenset({"end", "eol", "retire", "retired", "retires", "discontinued", "deprecated", "sunset"})
_GENERIC_VERBS = frozenset("have has had get gets got take takes took be is are was were".split())  # state nothing


def _verb_words(verb: str, form_cues: bool = False) -> frozenset[str]:
    """The words a passage states ``verb`` (lower case) with: itself, its forms
    (:data:`_VERB_FORMS`: "made" of "makes") and its :data:`RELATION_CUES`; with ``form_cues``
    the cues of each form too ("developed" and "behind" of "maker" for "makes")."""
    forms = {verb, *(w for f in _VERB_FORMS if verb in f for w in f)}
    return frozenset(forms | {c for w in (forms if form_cues else {verb}) for c in RELATION_CUES.get(w, ())})


# a versioned name: "Ferrow 1.5", "Kestrel 2.0", "v2" after a name ("Quarry v3")
_VERSIONED = re.compile(r"\b([A-Z][\w&'’-]*)\s+v?(\d+(?:\.\d+)*)\b(?![.,]\d|\s?%)")


def _versions(text: str) -> list[tuple[tuple[str, tuple[int, ...]], str]]:
    """``((name, version), as written)`` of ``text``'s versioned names, the name lower-cased and
    the version without trailing zeros ("Kestrel 2.0" and "Kestrel 2" are one version)."""
    out = []
    for m in _VERSIONED.finditer(text):
        parts = [int(x) for x in m.group(2).split(".")]
        while len(parts) > 1 and parts[-1] == 0:
            parts.pop()
        out.append(((m.group(1).lower(), tuple(parts)), m.group(0)))
    return out


def other_version(question: str, sentence: str) -> str:
    """The versioned name of ``question`` as it writes it ("Ferrow 1.5") when ``sentence`` names
    only other versions of it ("It follows Ferrow 1.0, released in March 2022."): it states
    nothing of the asked version. "" when the question names no version, or the sentence names
    the asked one or none of that name."""
    said = [key for key, _ in _versions(sentence)]
    for (name, version), written in _versions(question):
        others = [v for n, v in said if n == name]
        if others and version not in others:
            return written
    return ""


def names_asked_version(question: str, sentence: str) -> bool:
    """Whether ``sentence`` names a versioned name of ``question`` at its version ("Calloway
    Data released Ferrow 1.5 on ..." for "When was Ferrow 1.5 released?")."""
    said = {key for key, _ in _versions(sentence)}
    return any(key in said for key, _ in _versions(question))


def asked_relation(question: str) -> list[frozenset[str]]:
    """The relations ``question`` asks about (:data:`_HOW_MANY`, :data:`_FINAL_VERB`,
    :data:`_AGENT_ASKED`, each word of a role, :data:`_ROLE_ASKED`, a product's end of life
    :data:`_LIFE_END`, an amount of one kind :data:`_STATED_AMOUNTS`), each as the words a sentence may state it with (its word and its
    :data:`RELATION_CUES`); [] when it asks none of these. A sentence states it when it holds one
    word of each (:func:`states_relation`)."""
    out: list[frozenset[str]] = []
    agent = _AGENT_ASKED.match(question)
    final = _FINAL_VERB.match(question)
    # (a final "retired" asks an end of life, stated by any of its words: below)
    final_verb = final.group(1) if final and not _LIFE_END.fullmatch(final.group(1)) else None
    for verb in ((agent.group(1) or agent.group(2)) if agent else None, final_verb):
        if verb and verb.lower() not in _NOT_AGENT_VERBS:
            # and the words a passage states it with ("developed by" for "Who makes X?", by "maker")
            out.append(_verb_words(verb.lower(), form_cues=True))
    role = _ROLE_ASKED.match(question)
    words = [w for w in role.group(1).lower().split() if w not in QUERY_STOP_WORDS and w not in _ROLE_MODIFIERS] \
        if role else []
    # "Who is the chief product officer of X?": each word of the role but a modifier ("main"), or its
    # cue words ("married" for "spouse"), or its verb's forms ("novel" for "author"); a one-word role
    # only with such words (a band is "fronted by" its "vocal")
    said = [frozenset({w, *RELATION_CUES.get(w, ()), *(x for f in _VERB_FORMS if w in f for x in f)}) for w in words]
    out.extend(ws for ws in said if len(said) > 1 or len(ws) > 1)
    if _LIFE_END.search(question):  # "reaches its end of life on 1 March 2023", not "released Quarry 1.0 on ..."
        out.append(_LIFE_END_WORDS)
    # an amount of one kind: "What was Harbor & Finch's revenue?" is not answered by "is buying
    # Brightline Systems for $310 million"
    out.extend(frozenset({w, *RELATION_CUES[w]}) for w in dict.fromkeys(singular(x) for x in _WORD.findall(
        question.lower())) if w in _STATED_AMOUNTS)
    counted = _HOW_MANY.search(question)
    if counted and not _DEFAULT.search(question):
        # the counted noun, or the verb after it: "How many people does it serve?" by "Serves 8"
        # (a setting's default is not: "Default: `3`." states it on its own line)
        words = _WORD.findall(question[counted.start(1):])
        cut = next((k for k, w in enumerate(words) if _AUXILIARY.fullmatch(w)), min(len(words), 3))
        nouns = [w.lower() for w in words[:cut] if w.lower() not in QUERY_STOP_WORDS and w.lower() not in RELATION_WORDS]
        verbs = [w.lower() for w in words[cut + 1:] if w.islower() and w not in QUERY_STOP_WORDS
                 and w not in _GENERIC_VERBS][:1] if cut < len(words) and _AUXILIARY.fullmatch(words[cut]) else []
        if verbs and words[cut].lower() in ("is", "are", "was", "were") and not re.search(r"(?:ed|en)$", verbs[0]):
            verbs = []  # "How many calories are in the Greek salad?": "salad" is no verb ("are employed" has one)
        if nouns:
            out.append(frozenset(nouns + verbs))
    return list(dict.fromkeys(out))


TYPO_CHARS = 6  # a question's word this long is held by one a letter off ("relased" by "released")


def one_edit(a: str, b: str, kept: int = 2) -> bool:
    """Whether ``a`` and ``b`` differ by one letter left out, added, changed or two neighbours
    swapped, past their first ``kept`` letters ("relased" / "released"; with ``kept`` 2 not
    "founded" / "funded"; with ``kept`` 1 "qaurry" / "quarry")."""
    if a[:kept] != b[:kept] or abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k in range(len(short)) if short[k] != long_[k]), len(short))
    return short[i:] == long_[i + 1:]


# "Which database does Quarry use?": the name after "do / does / did" (its subject) and the verb after it
_SUBJECT_DOES = re.compile(rf"^\W*(?i:which|what)\s+[^?]*?\b(?i:do|does|did)\s+({_NAME_ALONE})\s+([a-z]{{2,}})\b")


def subject_is_type(question: str, sentence: str) -> str:
    """The verb of ``question`` that ``sentence`` leaves unsaid while saying that the question's
    subject ("Which database does *Quarry* use?") is itself of the type it asks for ("Quarry is
    a vector database made by Northwind Labs"): the thing of that type in it is the subject, so
    nothing else in it answers ("Northwind Labs" is no database Quarry uses); "" otherwise. A
    sentence that states the verb still may answer ("Harbor & Finch is a holding company that
    owns Brightline Systems" for "Which company does Harbor & Finch own?")."""
    m = _SUBJECT_DOES.match(question)
    head = asked_head(question)
    if m is None or not head:
        return ""
    name, verb = re.sub(r"^the\s+", "", m.group(1)), m.group(2).lower()
    heads = "|".join(re.escape(h) for h in head)
    said = re.search(rf"(?<![\w]){re.escape(name)}(?:['’]s)?(?:\s*,\s*|\s+(?:is|was|are|were)\s+)"
                     rf"(?:an?|the|one\s+of\s+the)\s+(?:[\w-]+\s+){{0,3}}?(?:{heads})(?:e?s)?\b", sentence, re.I)
    return verb if said is not None and not states_relation([_verb_words(verb)], sentence) else ""


def states_relation(relations: Sequence[frozenset[str]], sentence: str) -> bool:
    """Whether ``sentence`` holds a word (:func:`holds_word`) of each of ``relations``
    (:func:`asked_relation`); True when there are none. A relation word of :data:`TYPO_CHARS`
    letters or more is also held by a word one letter off (:func:`one_edit`: a question typed
    "When was Atlasgrid 2.2 relased?")."""
    if not relations:
        return True
    words = set(_WORD.findall(sentence.lower()))
    roots = {fold(w) for w in words if not w.isdigit()}
    return all(any(holds_word(w, words, roots) or (len(w) >= TYPO_CHARS and any(one_edit(w, h) for h in words))
                   for w in ws) for ws in relations)


# A question asking for a bound ("the *maximum* snapshot interval", "the *fewest* brokers") is not
# answered by the other end of a range a sentence gives ("Allowed values: 10 to 86400").
# Only words that make the asked figure a bound: "the population of the *largest* city" asks for
# no bound, "How many brokers can a cluster have *at most*?" does.
_UPPER_WORDS = frozenset("maximum max".split())
_LOWER_WORDS = frozenset("minimum min".split())
_UPPER_PHRASES, _LOWER_PHRASES = r"at\s+most|upper\s+(?:limit|bound)", r"at\s+least|lower\s+(?:limit|bound)"
_UPPER_PHRASE = re.compile(rf"\b(?:{_UPPER_PHRASES})\b", re.I)
_LOWER_PHRASE = re.compile(rf"\b(?:{_LOWER_PHRASES})\b", re.I)
# a superlative asks for a bound when what it qualifies is what a thing takes: "What is the
# *largest* message Ferrow *accepts*?" (not "the largest city")
_UPPER_MOST = frozenset("largest biggest longest highest greatest".split())
_LOWER_MOST = frozenset("smallest shortest lowest".split())
# where a question says its bound, and the three words after it: what it is the bound of
_BOUND_SAID = re.compile(rf"\b(?:{'|'.join(_UPPER_WORDS | _LOWER_WORDS | _UPPER_MOST | _LOWER_MOST)}|"
                         rf"{_UPPER_PHRASES}|{_LOWER_PHRASES})\b((?:\W+[A-Za-z0-9_.]+){{0,3}})",
                         re.I)
_TAKES = re.compile(r"\b(?:accept|accepts|allow|allows|allowed|support|supports|supported|handle|handles|take|takes|"
                    r"hold|holds|store|stores|permit|permits|permitted)\b\W*$", re.I)
_RANGE_NEXT = re.compile(r"\s*(?:to|–|—|\s-)\s*[$£€]?\d")  # "10 to 86400": 10 is the low end
_RANGE_PREV = re.compile(r"\d[\w.,%]*\s*(?:to|–|—|-\s)\s*[$£€]?$")  # "10 to 86400": 86400 is the high end
_BETWEEN = re.compile(r"\bbetween\s+[$£€]?$", re.I)
# a sentence stating a bound of that side ("Maximum message size: 8 MiB", "at most 64 shards")
_STATES_BOUND = {
    "upper": re.compile(r"\b(?:maximum|max|at\s+most|up\s+to|no\s+more\s+than|limits?|largest|biggest|highest|"
                        r"longest|greatest|upper|cap(?:ped)?)\b", re.I),
    "lower": re.compile(r"\b(?:minimum|min|at\s+least|no\s+less\s+than|no\s+fewer\s+than|smallest|lowest|"
                        r"shortest|fewest|lower|needs?|requires?|required|requirements?)\b", re.I),
}
BOUND_NOUN_WORDS = 3  # a stated bound is of the asked thing when one of its words is this near after it


def _bound_of_asked(sentence: str, bound: str, asked_after: set[str]) -> bool:
    """Whether ``sentence`` states a bound of side ``bound`` (:data:`_STATES_BOUND`) of the
    asked thing: one of ``asked_after`` (the folded words after the question's bound word) is
    among the :data:`BOUND_NOUN_WORDS` words after it ("Maximum key size: 512 bytes" for "the
    maximum key size", not "Maximum shards per cluster: 1,024" for "the maximum snapshot
    interval"); any such statement when the question names nothing after its bound word
    ("How many brokers can a cluster have at most?")."""
    for m in _STATES_BOUND[bound].finditer(sentence):
        after = re.findall(r"[a-z0-9]+", sentence[m.end():].lower())[:BOUND_NOUN_WORDS]
        if not asked_after or asked_after & {fold(w) for w in after}:
            return True
    return False


def asked_bound(question: str) -> str:
    """``"upper"`` when ``question`` asks for a maximum ("What is the maximum snapshot interval?",
    "... at most?", "What is the largest message Ferrow accepts?": a superlative of what a thing
    takes, the question ending in its verb), ``"lower"`` for a minimum, ``""`` for neither (or
    both)."""
    words = {w.strip(".") for w in re.findall(r"[\w.]+", question.lower())}  # "cache.max_size_gb" is no "max"
    takes = bool(_TAKES.search(question))
    up = bool(words & _UPPER_WORDS or _UPPER_PHRASE.search(question) or (takes and words & _UPPER_MOST))
    low = bool(words & _LOWER_WORDS or _LOWER_PHRASE.search(question) or (takes and words & _LOWER_MOST))
    return "upper" if up and not low else "lower" if low and not up else ""


def asks_bound(question: str) -> bool:
    """Whether ``question`` asks for a figure that is a bound (:func:`asked_bound`, and its
    answer kind is NUM): such a figure is of the asked type (``typed_span`` with ``typed``)."""
    return bool(asked_bound(question)) and answer_kind(question) == "NUM"


def range_end(sentence: str, s: int, e: int) -> str:
    """``"lower"`` when the figure at ``sentence[s:e]`` opens a range ("10 to 86400", "between 10
    and 20"), ``"upper"`` when it closes one, ``""`` otherwise."""
    before = sentence[:s]
    if _RANGE_NEXT.match(sentence, e) or (_BETWEEN.search(before) and re.match(r"\s+and\s+[$£€]?\d", sentence[e:])):
        return "lower"
    if _RANGE_PREV.search(before) or re.search(r"\bbetween\s+[$£€]?\d[\w.,%]*\s+and\s+[$£€]?$", before, re.I):
        return "upper"
    return ""


def _said_of_another(sentence: str, s: int, noun: str, entities: Sequence[tuple[int, int, str]],
                     question: str) -> bool:
    """Whether the figure at ``sentence[s:]`` is the asked ``noun`` of another name than the
    question's ("What is the population of Reykjavik?": "Iceland ... with a *population of*
    about 380,000, most of whom live in ... Reykjavik"): it follows "<noun> of", the last name
    before that is none of the question's, and no name of the question comes before it."""
    said = re.search(rf"\b{re.escape(noun)}\s+of\s+{_APPROXIMATELY.pattern[:-1]}?$", sentence[:s], re.I)
    if said is None:
        return False
    before = [sentence[a:b] for a, b, lab in entities if lab == "ENT" and b <= said.start()]
    return bool(before) and bool(missing_entities([before[-1]], question)) and all(
        missing_entities([n], sentence[:s]) for n in entity_names(question))


def figure_of_another(question: str, sentence: str) -> str:
    """The noun a "What is the <noun> of X?" ``question`` asks ("population") when ``sentence``
    states a figure of it only of another name (:func:`_said_of_another`: "Iceland ... with a
    population of about 380,000, most of whom live in ... Reykjavik"); "" otherwise."""
    noun_of = _THE_NOUN_OF.match(question)
    if noun_of is None:
        return ""
    entities = _with_number_words(sentence, entity_spans(sentence))
    said = [_said_of_another(sentence, s, noun_of.group(1), entities, question) for s, _, lab in entities if lab == "NUM"]
    return noun_of.group(1) if said and all(said) else ""


# an amount's rate after it: "$45 per month", "$0.05 per GB", "30 euros a month"
_RATE = re.compile(r"(?:\s+(?:per|each)\s+(?!\d)[\w-]+|\s+an?\s+(?:second|minute|hour|day|week|month|quarter|year)\b)+")
_MONEY_UNIT, _MONEY_UNIT_END = re.compile(r"\s+" + _UNITS["money"]), re.compile(r"\s" + _UNITS["money"] + "$")
# a question that says the rate itself: "How much does it cost per month?"
_RATE_ASKED = re.compile(r"\b(?:per|a|an|each)\s+(?:month|year|week|day|hour)|\b(?:monthly|yearly|annual|hourly|daily)\b",
                         re.I)


def _with_rate(sentence: str, s: int, e: int, question: str) -> int:
    """The end of the amount at ``sentence[s:e]`` with its rate, when ``question`` does not say
    it: "$45 per month", "$0.05 per GB", "30 euros a month" (not for "How much ... per month
    ...?"); ``e`` for a figure that is no amount or has no rate. A qualifier before a figure
    ("about 2,300") was measured and not kept (serving/profiling/RESULTS.md)."""
    unit = _MONEY_UNIT.match(sentence, e)
    rate = _RATE.match(sentence, unit.end() if unit else e)
    money = sentence[s:s + 1] in ("$", "£", "€") or sentence[:s].endswith("$") or unit \
        or _MONEY_UNIT_END.search(sentence[s:e])  # "30 euros", a measured span
    if rate and money and not _RATE_ASKED.search(question):
        return rate.end()
    return e


def _clause_of(sentence: str, s: int) -> tuple[int, int]:
    """``(start, end)`` of the clause of ``sentence`` holding offset ``s`` (between
    :data:`_CLAUSE_START` marks)."""
    cuts = [m.end() for m in _CLAUSE_START.finditer(sentence)]
    return max((c for c in cuts if c <= s), default=0), min((c for c in cuts if c > s), default=len(sentence))


# "When will Halley's Comet come back?" asks a date to come; a clause says one is with these words
_WHEN_WILL = re.compile(r"^\W*when\s+(?:will|is\s+\S+(?:\s+\S+)?\s+(?:expected|due|scheduled|set)\b)", re.I)
_FUTURE = re.compile(r"\b(?:will|shall|next|expected|due|scheduled|upcoming|planned)\b|'ll\b", re.I)
# a clause starts after one of these (not after a bare comma: lists, "(born October 9, 1959)")
_CLAUSE_START = re.compile(r"[;:.]\s|,\s+(?:and|but|while|whereas|so|yet)\s|\s[–—]\s")


# "Which region ...?": a cloud region's id is lower-case ("eu-central", "us-east-1"), no name
_REGION_HEADS = frozenset("region zone datacenter datacentre".split())
_REGION_ID = re.compile(r"(?<![\w.-])([a-z]{2}-(?:north|south|east|west|central)(?:east|west)?(?:-\d+)?)(?![\w.-])"
                        r"|\bthe\s+([a-z][a-z-]+)(?=\s+(?:region|zone)\b)")  # "... hit the global region"


def _with_region_ids(sentence: str, entities: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``entities`` with the cloud region ids of ``sentence`` as names (:data:`_REGION_ID`), in
    order: "customers in eu-central lost service" names "eu-central", "hit the global region"
    "global"."""
    ids = [(m.start(g), m.end(g), "ENT") for m in _REGION_ID.finditer(sentence) for g in [1 if m.group(1) else 2]
           if not any(a <= m.start(g) < b for a, b, _ in entities)]
    return sorted([*entities, *ids])


def typed_span(question: str, sentences: Sequence[str], kind: AnswerKind | None = None,
               near: int = NEAR_WORDS, exclude: Sequence[str] = (), fallback: bool = True,
               typed: bool = False, *, stated: bool = True) -> str:
    """The short answer to ``question`` in ``sentences`` (:func:`typed_span_at`'s span)."""
    return typed_span_at(question, sentences, kind, near, exclude, fallback, typed, stated=stated)[0]


def typed_span_at(question: str, sentences: Sequence[str], kind: AnswerKind | None = None,
                  near: int = NEAR_WORDS, exclude: Sequence[str] = (), fallback: bool = True,
                  typed: bool = False, *, stated: bool = True) -> tuple[str, int]:
    """``(span, i)``: the short answer to ``question`` and the index of the sentence it was read
    in, ``("", -1)`` when there is none; ``sentences`` come best first.

    The candidates are the entities (:func:`entity_spans`) of the kind ``answer_kind`` expects,
    with the question's own words cut from their ends ("Quarry 3.0.2" for "In which Quarry
    version ...?" is "3.0.2"); an entity the question already names is none. Of them, the one
    with the most of the question's words within ``near`` words of it answers (the first on a
    tie: sentences best first); only when no sentence holds one is the fallback kind tried (a
    date, else a number; a number, else a name; a name, else a number). The question's words
    count with the words a passage states their relation with (:func:`relation_cues`: "married"
    for "spouse"), and a question asking for a place (where, "place of", "which city")
    counts one more for a name after "in" / "at" / "near" / "from" ("headquartered in midtown
    Manhattan"); "In which year ...?" gets the year of the date it finds. An acronym in
    parentheses stands for the name before it ("Major League Soccer (MLS)"), and is no answer
    when the question names some of that name. A plural question
    (:func:`plural_question`) gets every candidate of that sentence, "A, B and C". Yes / no,
    choice and why / how questions get ("", -1).

    ``exclude``: names that are no answer either, as if the question named them (a bridge's
    passage is about its title, ``models.bridge``). ``fallback`` off: the kind asked for only.
    ``typed``: only a candidate of the type a what / which question asks for
    (:func:`asked_head`: "Singapore" for "... in what country?"). A nationality ("American",
    :func:`demonym`) answers only a question about nationality or language. A question asking
    for a figure of a dimension or a setting's default (:func:`asked_measure`) counts such a
    figure as of the asked type and gets it with its unit and an "about" before it ("about 60
    minutes"); ``typed`` then takes only such figures. The question's words count near a
    candidate in any inflection (:func:`fold`: "fixed" meets "fix"). A question asking for the
    doer of its verb ("Which company acquired ...?", "... is it owned by?") counts the subject of
    that verb done to a name it knows as of the asked type (:func:`_does`), and a name in an
    appositive of a known name is not of the type it shows there (:func:`_describes_known`:
    "Brightline Systems, the Austin company"). A sentence that does not state the relation the
    question asks about (:func:`asked_relation`: the doer's verb, the counted noun) answers
    nothing; ``stated`` off reads every sentence (a bridge's name in the sentence that names it,
    "Brightline Systems released Lumen 4.0" for "Which company acquired the maker of Lumen?").
    """
    kind = kind or answer_kind(question)
    labels = _KIND_LABELS.get(kind)
    if not labels:
        return "", -1
    # the question's names with initials, as (initials, other words): "Alexander D. Henderson Jr."
    # is "Alexander Dawson Henderson Jr." in its passage, and "Dawson" answers nothing
    initialled = [({w[0].lower() for w in n.split() if re.fullmatch(r"[A-Z]\.", w)},
                   [w.lower() for w in n.split() if not re.fullmatch(r"[A-Z]\.", w)])
                  for n in entity_names(question) if re.search(r"(?:^|\s)[A-Z]\.\s", n)]
    # a person is asked for: no number answers "Who ...?"; nor a place "Where ...?"
    where = stated and bool(_WHERE.match(question) or _CITY_WHERE.match(question)) and not _WHERE_CODE.search(question)
    labels = labels if fallback and not (kind == "ENT" and (asks_who(question) or where)) else labels[:1]
    if kind == "NUM" and (set(asked_measure(question)) & set(_UNITS) or _HOW_MANY.search(question)):
        labels = labels[:1]  # a count or a measure in units: no name answers "How long ...?" nor "How many ...?"
    known = _question_words(question)
    # the initials of the question's names, or of their first words ("PES" of "Pro Evolution
    # Soccer", "T&T" of "Tunnels and Trolls"), which name what the question does
    capitals = ["".join(w[0] for w in n.split() if w[:1].isupper()) for n in entity_names(question)]
    initials = {x[:k] for x in capitals for k in range(2, len(x) + 1)}  # "DSG" of "Dick's Sporting Goods Park"
    cues = relation_cues(question)
    name_words = {fold(w) for n in entity_names(question) for w in re.findall(r"[a-z0-9]+", n.lower())}
    # the question's words and cues, each word folded as a sentence's are ("fixed" meets "fix")
    asked = {fold(w) for w in ({w for w in known if w not in QUERY_STOP_WORDS and not w.isdigit()} | cues)}
    # "American" answers "What nationality ...?", not "Where was ... born?" nor "Who ...?"
    demonyms_answer = bool(known & _ASKS_DEMONYM)
    place = bool(_ASKS_PLACE.search(question))
    head = asked_head(question)
    person = bool(PERSON_HEADS & set(head))
    country_asked = bool(_COUNTRY_HEADS & set(head))
    asks_death, asks_birth = "died" in cues, "born" in cues and "died" not in cues
    dims = asked_measure(question)
    bound = asked_bound(question) if kind == "NUM" else ""
    # the words after the question's bound word: what it is the bound of ("maximum *key size*")
    bound_after = _BOUND_SAID.search(question) if bound else None
    asked_after = {fold(w) for w in re.findall(r"[a-z0-9]+", bound_after.group(1).lower())
                   if w not in QUERY_STOP_WORDS} if bound_after else set()
    if bound:
        labels = labels[:1]  # "the maximum ...": a figure or nothing
    announce_asked = bool(_ANNOUNCE.search(question))
    noun_of = _THE_NOUN_OF.match(question)  # "What is the population of Reykjavik?": "population"
    future_asked = bool(_WHEN_WILL.match(question))
    month_asked = bool(_MONTH_HEADS & set(head))
    weekday_asked = bool(_WEEKDAY_ASKED.search(question))
    # the asked verb of a question asking for its doer, and the names it is done to (the question's
    # own and ``exclude``): "Harbor & Finch announced ... that it has acquired Brightline Systems"
    verb = _AGENT_ASKED.match(question)
    verb_word = (verb.group(1) or verb.group(2)).lower() if verb else ""
    who = asks_who(question)
    # the verb and the words a passage states it with ("acquired" for "owned")
    doing = set() if not verb_word or verb_word in _NOT_AGENT_VERBS else {fold(w) for w in _verb_words(verb_word)}
    # and the words of its forms' cues, as asked_relation reads them ("behind" of "maker" for "makes")
    doing_said = {fold(w) for w in _verb_words(verb_word, form_cues=True)} if doing else set()
    # (each word of a name: a rewrite's appended terms run names together, "(Beacon Brightline Systems ...)")
    done_to = [w for n in [*entity_names(question), *exclude] for w in re.findall(r"[\w'’&.-]{3,}", n.lower())]
    # the keys a default is asked of, whole and by their last part ("snapshot.interval_s", "interval_s")
    keys = list(dict.fromkeys(x for m in _IDENTIFIER.finditer(question) if re.search(r"[A-Za-z]", m.group(0))
                              for x in (m.group(0), re.split(r"[./]", m.group(0))[-1]) if len(x) > 2))
    # each sentence's words, entities, translated and dated parentheses and the dates of a life
    # it states, read once for every label tried
    region_asked = bool(_REGION_HEADS & set(head))
    parsed = [(words, _measure_spans(sentence, dims, keys) if dims else
               _with_number_words(sentence, entity_spans(sentence)) if kind == "NUM" else
               _with_region_ids(sentence, entity_spans(sentence)) if region_asked else entity_spans(sentence),
               _translations(sentence), outside, set(outside),
               _life_dates(sentence, asks_death, asks_birth))
              for sentence in sentences
              for words in [[(m.start(), m.end(), fold(re.sub(r"['’]s$", "", m.group(0).lower())))
                             for m in _SPAN_WORD.finditer(sentence)]]
              for outside in [_outside_dates(sentence, words)]]
    # a sentence that does not state the asked relation answers nothing ("Who founded X?" is not
    # answered by a sentence on X's funding round)
    relations = asked_relation(question) if stated else []
    # nor does a sentence on another version of the asked thing ("Ferrow 1.0" for "Ferrow 1.5")
    # nor one saying the question's subject is itself the asked type ("Quarry is a vector database ...")
    stating = [states_relation(relations, sentence) and not (stated and other_version(question, sentence))
               and not (stated and subject_is_type(question, sentence)) for sentence in sentences]
    for label in labels:
        # (-nearby question words, order, sentence, span, start, end)
        found: list[tuple[int, int, int, str, int, int]] = []
        gaps: list[int] = []  # per candidate: words between it and the nearest question word near it
        named: list[int] = []  # per candidate: the words of the question's names near it
        name_gap: list[int] = []  # per candidate: words between it and the nearest of those
        clause: list[int] = []  # per candidate: the question's words near it outside its own clause
        another = False  # a figure of the asked noun was another name's (:func:`_said_of_another`)
        for i, (sentence, (words, entities, translated, outside, outside_at, lived)) in enumerate(
                zip(sentences, parsed, strict=True)):
            if not stating[i]:
                continue
            for s, e, lab in entities:
                # a written-out count is one word, kept whole ("one" of "one hour" is a stop word)
                counted = _NUMBER_WORD.match(sentence, s) if lab == "NUM" else None
                # (and a date whole: the "1" of "1 March 2023" is no word of "Kestrel 1.x")
                span = sentence[s:e] if (counted is not None and counted.end() == e) or lab == "DATE" \
                    else _trim_known(sentence[s:e], known, head)
                if lab == "ENT" and _BARE_NUMBER.fullmatch(span):
                    lab = "NUM"  # "Quarry 3.0.2" for "In which Quarry version ...": a number
                    k = sentence.find(span, s, e)  # the name's words are then near it: "Business 25 seats"
                    s, e = (k, k + len(span)) if k >= 0 else (s, e)
                elif lab == "ENT" and month_asked and span.lower() in _MONTH_NAMES:
                    lab = "DATE"  # "July" answers "Which month ...?"
                elif lab == "ENT" and weekday_asked and span.lower().rstrip("s") in _WEEKDAYS:
                    lab = "DATE"  # "Tuesdays" answers "On which day of the week ...?"
                if lab != label or not span or not missing_entities([span], question) or any(
                        not missing_entities([span], x) or _same_name(span, x) for x in exclude):
                    continue
                if lab == "DATE" and not announce_asked and _ANNOUNCED_AT.search(sentence[max(0, s - 24):s]) \
                        and any(x == "DATE" and a > s for a, _, x in entities):
                    continue  # "announced in September 2022 that Kestrel 1.x reaches its end of life on 1 March 2023"
                if bound and lab == "NUM" and range_end(sentence, s, e) != bound \
                        and (range_end(sentence, s, e) or not _bound_of_asked(sentence, bound, asked_after)):
                    continue  # a maximum is a range's high end or stated as one: not "10" of "10 to 86400",
                    # nor a default ("Default: `300`") or an example's value ("interval_s: 300")
                if lab == "NUM" and noun_of and _said_of_another(sentence, s, noun_of.group(1), entities, question):
                    another = True  # "Iceland ... with a population of about 380,000 ... Reykjavik": Iceland's,
                    continue  # and no name of the sentence is Reykjavik's population either
                if bound and lab == "NUM" and not dims and (unit := _unit_pattern(tuple(_UNITS)).match(sentence, e)):
                    e = unit.end()  # "8 MiB" for "the largest message Ferrow accepts" (no dimension asked)
                    span = sentence[s:e]
                if bound and lab == "NUM" and _unit_pattern(dims) is not None \
                        and _unit_pattern(tuple(_UNITS)).match(sentence, e) and not _unit_pattern(dims).match(sentence, e):
                    continue  # a figure in another dimension's unit: not "512 bytes" for "the maximum snapshot interval"
                if lab == "ENT" and head and not _ADDRESS_HEADS & set(head) and _ADDRESS.fullmatch(span):
                    continue  # "git.example.com/calloway/marlowe" is no company's name
                if lab == "ENT" and who and (_IDENTIFIER.fullmatch(span) or sentence[s - 1:s] == "`"):
                    continue  # a setting's key or a code span is nobody: "eviction.policy" for "Who wrote Lumen?"
                if lab == "ENT" and re.sub(r"[^A-Za-z]", "", span) in initials:
                    continue  # "PES" for the question's "Pro Evolution Soccer": the question's own name
                if lab == "ENT" and country_asked and demonym(span):
                    span = country_of(span)  # "an American diplomat" answers "Which country ...?": United States
                elif lab == "ENT" and country_asked and span.lower() not in _COUNTRY_NAMES:
                    # "the National University of Singapore" answers "In what country ...?": Singapore
                    span = _country_named(span) or span
                if lab == "ENT" and ((not demonyms_answer and demonym(span)) or span.lower() in _CALENDAR_WORDS
                                     or (person and span.lower() in _COUNTRY_NAMES)):
                    continue  # "American" answers no "who", "Monday" no "which season", "US" no "which footballer"
                if lab == "ENT" and any(all(w[0].lower() in ini for w in span.split()) and all(
                        x in sentence[s:e].lower().split() for x in rest) for ini, rest in initialled):
                    continue  # a question's name with its initial written out
                if any(a <= s and e <= b for a, b in translated):
                    continue  # "(French: Comité international olympique)": the name in another language
                if lab == "ENT" and _ACRONYM.fullmatch(span) and sentence[:s].rstrip().endswith("(") \
                        and sentence[e:].lstrip().startswith(")"):
                    # "Major League Soccer (MLS)": the name it abbreviates answers, or nothing when
                    # the question names some of it ("the American Pit Bull Terrier (APBT)")
                    cut = len(sentence[:s].rstrip()) - 1
                    full = next((sentence[a:b] for a, b, x in entities
                                 if x == "ENT" and b <= cut and not sentence[b:cut].strip()), "")
                    if full and (_trim_known(full, known) != full or any(
                            not missing_entities([full], x) for x in exclude)):
                        continue
                    span = full or span
                at = [j for j, (a, b, _) in enumerate(words) if a >= s and b <= e] or [0]
                # a candidate outside dated parentheses counts the words outside them: "Brian
                # Moynihan (born October 9, 1959) is ... the chairman" holds "chairman" near the name
                seen = outside if at[0] in outside_at else range(len(words))
                k0, k1 = bisect_left(seen, at[0]), bisect_right(seen, at[-1])
                window = seen[max(0, k0 - near):k1 + near]
                near_at = [j for j in window if (words[j][1] <= s or words[j][0] >= e) and words[j][2] in asked]
                # the question's words near it count in its own clause: "Edmond Halley predicted its
                # return for 1758, and it was last seen near the Sun in 1986" says 1986 was last seen
                a, b = _clause_of(sentence, s)
                nearby = {words[j][2] for j in near_at if a <= words[j][0] < b}
                # a place is what follows "in" / "at": "headquartered in midtown Manhattan"
                before = [w for _, b, w in words[max(0, at[0] - 2):at[0]] if b <= s]
                located = place and label == "ENT" and bool(before) and (
                    before[-1] in _LOCATIVE or (len(before) == 2 and before[0] in _LOCATIVE
                                                and sentence[words[at[0] - 1][0]].islower()
                                                and before[1] not in ("a", "an")))  # "in a Series C round"
                if where and lab == "ENT" and not located and span.lower() not in _COUNTRY_NAMES \
                        and not (demonyms_answer and demonym(span)) \
                        and not _describes_known(sentence, s, entities, question, exclude):
                    # "Where ...?" asks for a place: "worked with Charles Babbage" names none ("Brightline
                    # Systems, the Austin company" does)
                    continue
                if located:  # the asked verb states it: "headquartered in midtown Manhattan" counts one more
                    k = at[0] - (1 if before[-1] in _LOCATIVE else 2)
                    located += k > 0 and words[k - 1][1] <= s and words[k - 1][2] in asked
                # a figure of the asked dimension, with its unit ("220 degrees Celsius")
                measured = _measured(sentence, s, e, span, dims, keys) if dims and (
                    lab == "NUM" or "default" in dims) else None
                shown = lab == "ENT" and _fits(sentence, s, e, span, head)
                if shown and _describes_known(sentence, s, entities, question, exclude):
                    continue  # "Brightline Systems, the Austin company": the asked noun is a known name's
                if shown and not where and (owner := _appositive_of(sentence, s, entities)) is not None and (
                        not doing or _states_doing(sentence[s:].split(",")[0], doing_said, done_to)):
                    # "... acquired Brightline Systems, the Austin company behind Lumen" for "Which
                    # company does Harbor & Finch own?": the company is the name the appositive is of
                    # (for "Which company made Lumen?" when the appositive states it: "behind Lumen";
                    # not for "Which company acquired the maker of Lumen?")
                    s, e = owner
                    span = sentence[s:e]
                    at = [j for j, (a, b, _) in enumerate(words) if a >= s and b <= e] or [0]
                fits = TYPE_FIT_WORDS * ((lab == "ENT" and (shown
                                                            or (demonyms_answer and demonym(span))))
                                         or (lab == "DATE" and (any(a <= s and e <= b for a, b in lived)
                                                                or (month_asked and span.lower() in _MONTH_NAMES)
                                                                or (weekday_asked and span.lower().rstrip("s") in _WEEKDAYS)))
                                         or measured is not None or (bool(bound) and lab == "NUM"))
                if typed and not fits:
                    continue
                if measured is not None and measured != (s, e):
                    s, e = measured
                    span = sentence[s:e]
                if lab == "ENT" and doing and who and _after_preposition(words, at[0]):
                    continue  # "written in Python", "under the Apache-2.0 licence": not who did it
                agent = TYPE_FIT_WORDS * (lab == "ENT" and bool(doing) and _does(sentence, words, at, s, entities, doing, done_to))
                # "When will ...?": a date its clause says is to come ("it will be back in 2061", not
                # "predicted its return for 1758")
                ahead = TYPE_FIT_WORDS * (lab == "DATE" and future_asked
                                          and bool(_FUTURE.search(_CLAUSE_START.split(sentence[:s])[-1])))
                if lab == "NUM" and span == sentence[s:e]:
                    e = _with_rate(sentence, s, e, question)  # "$45 per month"
                    span = sentence[s:e]
                found.append((-len(nearby) - located - max(fits, agent, ahead), len(found), i, span, s, e))
                gaps.append(min((at[0] - j if j < at[0] else j - at[-1] for j in near_at), default=near + 1)
                            if measured is not None else 0)
                named.append(len(nearby & name_words) if lab != "ENT" else 0)  # (a name's neighbours are often the question's)
                # and how near the nearest of them is: "The Starter plan includes 3 seats, Business 25
                # seats ..." gives the Business plan 25
                name_gap.append(min((at[0] - j if j < at[0] else j - at[-1] for j in near_at
                                     if words[j][2] in name_words), default=near + 1) if lab != "ENT" else 0)
                # the question's words near it but in another clause ("One orbit of the Sun takes
                # Jupiter 11.86 Earth years, and a day on Jupiter lasts ..." : "day" is not the Sun's)
                clause.append(len({words[j][2] for j in near_at if not a <= words[j][0] < b}))
        if not found:
            if another:
                break  # no fallback kind: the asked figure is stated, of another thing
            continue
        # a tie between figures or dates in one sentence goes to the one near more words of the
        # question's names ("$45 per month on the Business plan" for "... cost on the Business
        # plan?", not "$15 per month on the Starter plan"); then, between figures of the asked dimension, to the one nearest a
        # question word ("at an average distance of 1.52 astronomical units" before "6,779 km
        # across" for "How far ...?"); between names, to the first (often the sentence's subject).
        # Before both, to the one with fewer of those words in another clause (:func:`_clause_of`).
        best = min(found, key=lambda f: (f[0], f[2], clause[f[1]], -named[f[1]], name_gap[f[1]], gaps[f[1]], f[1]))
        if not plural_question(question):
            year = label == "DATE" and YEAR_IN.search(best[3])
            if year and _CENTURY_ASKED.search(question):  # "1710" answers "What century ...?" as "18th century"
                return f"{_ordinal(int(year.group(0)) // 100 + 1)} century", best[2]
            if year and _YEAR_ASKED.search(question):
                return year.group(0), best[2]  # "1865" of "3 June 1865" for "In which year ...?"
            return best[3], best[2]
        listed = _listed(sentences[best[2]], [f for f in found if f[2] == best[2]], best)
        return listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}", best[2]
    return "", -1


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only whitespace, control and format characters (U+0000,
    zero-width spaces, a byte order mark), which ``str.strip`` keeps."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


__all__ = [
    "BM25_STOP_WORDS",
    "COUNTRIES",
    "DEMONYMS",
    "MEASURE_WORDS",
    "LOCATED_SUFFIXES",
    "QUERY_STOP_WORDS",
    "RELATION_WORDS",
    "SHORT_FORM",
    "AnswerKind",
    "SentenceRule",
    "answer_kind",
    "answer_tokens",
    "asks_who",
    "asks_shown_type",
    "figure_of_another",
    "one_edit",
    "labelled_with_asked",
    "asks_typed",
    "asked_bound",
    "asks_bound",
    "asked_measure",
    "demonym",
    "entity_names",
    "entity_spans",
    "exact_match",
    "fold",
    "is_blank",
    "missing_entities",
    "normalize_answer",
    "pattern_entities",
    "range_end",
    "plural_question",
    "sentence_texts",
    "setting_asked",
    "setting_described",
    "singular",
    "split_sentences",
    "spelled_out",
    "states_life",
    "token_f1",
    "typed_span",
    "typed_span_at",
]
