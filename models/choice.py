"""Choice questions answered from the sources: "Which film came out first, A or B?".

A question that offers its answers ("..., A or B?") is answered by one of them, and which one
the sources say: the option whose passages hold the earlier date, the larger count, or the
question's own words. Without a reader the extractive answer used to quote a sentence about
one option, which answers nothing; a reader trained on 400 questions picks a name from the
passages that is often neither option.

The rule, in order (:func:`choose`):

1. :func:`choice_options` splits the question into its stem ("Which film came out first") and
   its options (two or more names joined by "or", after the question word).
2. :func:`comparison` reads what the stem compares: a date (first, earlier, oldest, born,
   released ... the smallest; later, recently, younger ... the largest), a death date ("died
   earlier"), a life span ("lived longer", "an older age") or a count ("more albums", "the most
   species", "higher"), and through whom: "the film whose *director* is younger" compares the
   directors (a relation noun of :data:`RELATION_VERBS`, followed to the name after "directed
   by" in the option's passage).
3. Each option's evidence is the passages about it (a title that names it) and then the other
   sentences that name it; its value is the first one of the compared kind there.
4. With a value for every option and one best, that option answers. A stem that compares
   nothing is a match: the option whose passages hold more of the stem's words ("Which is a
   *comedy film*, A or B?"), when exactly one holds the most. Anything else is no answer ("").

Yes / no questions that compare two named things are read the same way (:func:`yes_no`): "Were
A and B from the same country?" compares each one's country (its nationality or the country its
passage places it in, :data:`COUNTRIES`), "Are A and B in the same family?" the name after
"family", "produced by the same company?" the name after "produced by"; "Are A and B both
American writers?" asks whether each one's opening sentences hold every descriptive word. "What
profession did A and B both hold?" is answered by the longest run of words that both first
sentences describe them with (:func:`common_ground`). An option without the value gets no
answer, never a guess.

This module sits on the ground floor with :mod:`searchsmith.models.text`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from searchsmith.models.qdg import QDG, QDGNode
from searchsmith.models.text import (
    COUNTRIES,
    QUERY_STOP_WORDS,
    RELATION_WORDS,
    YEAR_IN,
    answer_kind,
    asked_head,
    demonym,
    entity_spans,
    is_year,
    sentence_texts,
    singular,
)

Measure = Literal["date", "death", "lifespan", "count"]
_V = TypeVar("_V")

_WH = re.compile(r"\b(?:who|whom|whose|which|what|where|when)\b", re.I)
_OR = re.compile(r",?\s+or\s+", re.I)
# comparative and superlative words, and the direction they prefer (+1 the largest value)
_DATE_WORDS = {
    **dict.fromkeys("first earlier earliest older oldest before sooner".split(), -1),
    **dict.fromkeys("later latest last recently recent newer newest younger youngest after".split(), +1),
}
_COUNT_WORDS = {
    **dict.fromkeys("more most higher highest taller tallest larger largest bigger biggest longer longest "
                    "greater greatest numerous heavier heaviest deeper deepest wider widest".split(), +1),
    **dict.fromkeys("fewer less least lower lowest shorter shortest smaller smallest lighter lightest".split(), -1),
}
_DEATH = re.compile(r"\b(?:died|dead|death|passed away)\b", re.I)
_LIFESPAN = re.compile(r"\blived\b|\blife\b|\bolder age\b|\byounger age\b", re.I)
_SHORT_LIFE = re.compile(r"\bshorter life\b|\byounger age\b|\blived (?:a )?shorter\b", re.I)
#: relation nouns a comparison may go through ("the film whose director ..."), with the words
#: that name the related person in the option's passage ("directed by NAME", "director NAME")
RELATION_VERBS: dict[str, tuple[str, ...]] = {
    "director": ("directed by", "director"),
    "producer": ("produced by", "producer"),
    "composer": ("composed by", "music by", "composer"),
    "author": ("written by", "by", "author"),
    "writer": ("written by", "writer"),
    "performer": ("performed by", "sung by", "recorded by", "by"),
    "creator": ("created by", "creator"),
    "founder": ("founded by", "founder"),
}
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {"once": 1, "twice": 2, "thrice": 3}
_COUNT_ADJECTIVES = frozenset(["numerous"])  # "the most numerous": compare the counts of the asked noun
_MULTIPLIERS = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9}
_MONTH_NUMBER = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
# lengths in metres: a height or length compared without a counted noun
_UNITS = {**dict.fromkeys(("m", "metres", "meters", "metre", "meter"), 1.0),
          **dict.fromkeys(("ft", "feet", "foot"), 0.3048),
          **dict.fromkeys(("km", "kilometres", "kilometers"), 1000.0),
          **dict.fromkeys(("mi", "miles", "mile"), 1609.344)}
# "(April 1, 1954 – August 5, 1992)", "(Cantonese: Lam Ling- tung, December 8, 1955 – ...)":
# a parenthesis (of at most 200 characters) split at the first dash after a figure
_PAREN = re.compile(r"\(([^()]{1,200})\)")
_DASH = re.compile(r"\s*(?:[–—]|\s-\s)\s*")
_NAME_RUN = re.compile(r"[A-Z][\w'’]*(?:\.(?=\s)|(?:-[\w'’]+)*-?)(?:\s+(?:[A-Z][\w'’.-]*|(?:de|da|van|von|di|del|la|le)\b)){0,4}")
_NAME_AFTER = re.compile(r"\s*(?:the\s+)?([A-Z][\w.'’-]*(?:\s+(?:[A-Z][\w.'’-]*|de|da|van|von|di|del|la|le)){0,4})")
_YEAR_DAYS = 13 * 32  # a date as one number: year, month (0 unknown) and day (0 unknown) in order
MIN_MATCH_WORDS = 2  # a stem that compares nothing needs this many words of its own to match
NEAR_COUNT = 6  # how near the counted noun a figure counts ("has 12 studio albums")


@dataclass(frozen=True)
class Choice:
    """The option a choice question's sources favour.

    Attributes:
        option: the option as the question spells it (a trailing "(Film)" cut).
        reason: why, for the trace ("1924 < 2015", "2 of the question's words vs 0").
        evidence: per option, the index of its passage and the sentence its value came from,
            the chosen option's first (``(-1, "")`` where an option had none).
    """

    option: str
    reason: str
    evidence: tuple[tuple[int, str], ...]


def choice_options(question: str) -> tuple[str, list[str]]:
    """``(stem, options)`` of a question that offers its answers, ``("", [])`` otherwise.

    The options are joined by "or" after the question word: "Which came out first, A or B?",
    "Which novelist, A or B, wrote ...?", "who is younger A or B" (no comma: the capitalised
    run before "or"). An option ends at a comma followed by a lower-case word (", the 1970
    documentary"); a trailing "(Film)" is cut. Two names joined by "and" at the end of a stem
    that compares them are options too (:func:`_and_options`).
    """
    q = " ".join(question.split()).rstrip()
    wh = _WH.search(q)
    ors = [m for m in _OR.finditer(q) if wh is not None and m.start() > wh.end()]
    if not ors:
        return _and_options(q)
    m = ors[-1]
    left, right = q[:m.start()], q[m.end():]
    right_opt = re.split(r",\s+(?=[a-z])|[?]\s*$", right, maxsplit=1)[0]
    tail = right[len(right_opt):]
    right_opt = right_opt.rstrip(" ?.!")
    # the options before: comma-separated pieces back to the stem ("A, B, or C")
    pieces = [p.strip() for p in left.split(",")]
    if len(pieces) > 1:
        lefts, stem_pieces = [pieces[-1]], pieces[:-1]
        while (len(stem_pieces) > 1 and not _WH.search(stem_pieces[-1]) and _capitalised(stem_pieces[-1])
               and len(stem_pieces[-1].split()) <= 6 and _WH.search(", ".join(stem_pieces[:-1]))):
            lefts.insert(0, stem_pieces.pop())
        stem = ", ".join(stem_pieces)
    else:
        run = re.search(r"((?:[A-Z\"“'][\w.'’\"”&:-]*\s+(?:(?:of|the|and|de|von|van|a|in|on|for)\s+)*)*"
                        r"[A-Z\"“'][\w.'’\"”&:-]*)$", left[-200:])  # an option is short
        if run is None or run.start() + max(0, len(left) - 200) == 0:
            return "", []
        lefts, stem = [run.group(1)], left[:run.start() + max(0, len(left) - 200)]
    if not _WH.search(stem):
        return "", []
    stem = stem.strip(" ,:")
    if tail.strip(" ?") and not re.match(r",\s+(?:the|a|an)\b", tail):
        # "Which novelist, A or B, wrote of ...": the rest of the question is stem too (", the
        # 1970 documentary" describes the option before it)
        stem = f"{stem} {tail.strip(' ,?')}"
    options = [_clean_option(o) for o in [*lefts, right_opt]]
    if any(not o or len(o.split()) > 12 for o in options) or len({o.lower() for o in options}) < len(options):
        return "", []
    return stem, options


# "..., A and B?", "... out of A and B?", "... between A and B?": two names offered with "and"
_AND_OPTIONS = re.compile(r"(?:,|\s+out\s+of|\s+between)\s+(?P<a>[A-Z\"“'][^,?]*?)\s+and\s+"
                          r"(?P<b>[A-Z\"“'][^,?]*?)\s*\??$")


def _and_options(q: str) -> tuple[str, list[str]]:
    """``(stem, [A, B])`` of a question offering two names with "and" after a stem that compares
    them ("Which genus has more species, Bactris and Epigaea?", "Who was born first out of A and
    B?"); ``("", [])`` otherwise: without a comparison "and" joins what the question is about
    ("What profession did A and B both hold?", "the ancestry shared between A and B")."""
    m = _AND_OPTIONS.search(q)
    if m is None:
        return "", []
    stem = q[:m.start()].strip(" ,:")
    options = [_clean_option(m.group("a")), _clean_option(m.group("b"))]
    if not _WH.search(stem) or comparison(stem) is None or not all(options) \
            or options[0].lower() == options[1].lower() or any(len(o.split()) > 12 for o in options):
        return "", []
    return stem, options


def _capitalised(text: str) -> bool:
    return bool(re.match(r"[\"“']?[A-Z0-9]", text.strip()))


def _clean_option(option: str) -> str:
    option = re.sub(r"\s*\((?:film|band|album|song|novel|play|magazine|tv series|[^()]{0,30} film)\)\s*$", "",
                    option.strip(), flags=re.I)
    return option.strip(" \"“”'’,?")


@dataclass(frozen=True)
class Comparison:
    """What a choice question's stem compares: ``measure`` (``date``, ``death``, ``lifespan``
    or ``count``), ``sign`` (+1: the largest value wins), ``noun`` (the counted thing, for a
    count: "albums") and ``relation`` (a relation noun of :data:`RELATION_VERBS` the values are
    read through, "" for the option itself)."""

    measure: Measure
    sign: int
    noun: str = ""
    relation: str = ""


def comparison(stem: str) -> Comparison | None:
    """What ``stem`` compares (see :class:`Comparison`), None when it compares nothing."""
    words = re.findall(r"[a-z]+", stem.lower())
    # "the film whose director ...", "the film has the director who ...": through the director;
    # "Which film director is younger?" compares the directors named
    relation = next((w for k, w in enumerate(words) if w in RELATION_VERBS and k and words[k - 1] in ("the", "whose")), "")
    if _LIFESPAN.search(stem) and not _DEATH.search(stem):
        return Comparison("lifespan", -1 if _SHORT_LIFE.search(stem) else +1, relation=relation)
    for k, w in enumerate(words):
        if w in _DATE_WORDS and not (w in ("older", "oldest", "younger", "youngest")
                                     and k + 1 < len(words) and words[k + 1] == "age"):
            # an older person or film: the earlier date (older -1, younger +1 above)
            return Comparison("death" if _DEATH.search(stem) else "date", _DATE_WORDS[w], relation=relation)
    for k, w in enumerate(words):
        if w in _COUNT_WORDS:
            # the counted noun: the last word of the run after the comparative ("more Grand Slam
            # doubles *titles*", "more *albums* with ...")
            run: list[str] = []
            for x in words[k + 1:]:
                if x in RELATION_WORDS or (x in QUERY_STOP_WORDS and run):
                    break
                if x not in QUERY_STOP_WORDS:
                    run.append(x)
            noun = run[-1] if run else ""
            if noun in _COUNT_ADJECTIVES:  # "Which species is the most numerous": species
                noun = next(iter(asked_head(stem)), "")
            return Comparison("count", _COUNT_WORDS[w], noun, relation)
    return None


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower().replace("’", "'").replace("'s", "s")))


def _names(title: str, option: str) -> int:
    """How surely a passage titled ``title`` is about ``option``: 3 the same words, 2 the same
    but for a disambiguator ("Freakonomics (film)"), 1 one holds
    the other (words whole: "Third Eye Blind (album)", "The Adventures of Priscilla, Queen of the
    Desert" for "Queen Of The Desert"), 0 not. A one- or two-word option inside a longer title
    is another thing ("The Kids of Catan"), unless the title adds one word at most."""
    t, o = _norm(title), _norm(option)
    if not t or not o:
        return 0
    if t == o:
        return 3
    if _norm(re.sub(r"\s*\([^()]*\)\s*$", "", title)) == o:  # "Freakonomics (film)"
        return 2
    tn, on = len(t.split()), len(o.split())
    if f" {o} " in f" {t} ":
        return 1 if on >= 3 or tn - on <= 1 else 0
    return 1 if f" {t} " in f" {o} " and tn * 2 >= on else 0


def _mentions(sentence: str, option: str) -> int:
    """Where ``sentence`` names ``option`` (its normalised words in a row), -1 if it does not."""
    s, o = f" {_norm(sentence)} ", f" {_norm(option)} "
    k = s.find(o)
    return k if k >= 0 else -1


def _date_value(text: str) -> tuple[int, int, int] | None:
    """``(year, month, day)`` of the first date in ``text`` (month and day 0 when not given)."""
    for s, e, label in entity_spans(text):
        span = text[s:e]
        year = YEAR_IN.search(span)
        if label != "DATE" or year is None:
            continue
        iso = re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", span)  # "2019-09-10"
        if iso:
            return int(iso.group(1)), int(iso.group(2)), int(iso.group(3))
        month = next((n for name, n in _MONTH_NUMBER.items() if re.search(rf"\b{name[:3]}", span, re.I)), 0)
        day = re.search(r"\b([12]\d|3[01]|0?[1-9])\b(?!\d)", span.replace(year.group(0), " "))
        return int(year.group(0)), month, int(day.group(1)) if day and month else 0
    return None


def _count_value(sentence: str, noun: str) -> float | None:
    """The count of ``noun`` that ``sentence`` states: a figure (digits or a number word, not part
    of a date) at most :data:`NEAR_COUNT` words before it ("11 Grand Slam titles", "an opera in
    three acts"), with nothing but words between. Without a ``noun`` ("Which peak stands
    higher?"): the first length with its unit, in metres. None without one."""
    dates = [(s, e) for s, e, label in entity_spans(sentence) if label == "DATE"]
    words = [w for w in re.finditer(r"[\w.,]*\w|[^\w\s]", sentence)
             if not any(s <= w.start() < e for s, e in dates)]
    stem = noun[:-1] if noun.endswith("s") and len(noun) > 3 else noun
    for k, w in enumerate(words):
        value = _figure(w.group(0))
        if value is None:
            continue
        nxt = words[k + 1].group(0).lower() if k + 1 < len(words) else ""
        if nxt in _MULTIPLIERS:
            value *= _MULTIPLIERS[nxt]
        if not noun:
            if nxt in _UNITS:
                return value * _UNITS[nxt]
            continue
        for after in words[k + 1:k + 1 + NEAR_COUNT]:
            text = after.group(0).lower()
            if not re.match(r"\w", text):
                break  # punctuation between: another clause
            if stem and text.startswith(stem):
                return value
    return None


def _figure(word: str) -> float | None:
    """The value of a figure word: "11", "8,163", "2.5", "three"; None for others and for years."""
    text = word.lower()
    if text in _NUMBER_WORDS:
        return float(_NUMBER_WORDS[text])
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?", text) and not is_year(text):
        return float(text.replace(",", ""))
    return None


def _value(sentence: str, cmp: Comparison) -> float | None:
    """The compared value ``sentence`` states (:func:`comparison`), None when it states none."""
    if cmp.measure == "count":
        return _count_value(sentence, cmp.noun)
    span = _range(sentence)
    ends = (_date_value(span[0]), _date_value(span[1])) if span else (None, None)
    if cmp.measure == "lifespan":
        if ends[0] is None or ends[1] is None:
            return None
        return _days(ends[1]) - _days(ends[0])
    if cmp.measure == "death":
        if ends[1] is not None:
            return _days(ends[1])
        died = _DEATH.search(sentence)
        found = _date_value(sentence[died.end():]) if died else None
        return _days(found) if found else None
    found = ends[0] if ends[0] is not None else _date_value(sentence)
    return _days(found) if found else None


def _range(sentence: str) -> tuple[str, str] | None:
    """The two ends of the first "(start – end)" of ``sentence`` whose start holds a figure, or
    of two dates with only spaces or punctuation between ("( ; 9 May 1860 19 June 1937)", where
    the page's dash was lost)."""
    for m in _PAREN.finditer(sentence):
        inner = m.group(1)
        for d in _DASH.finditer(inner):
            if re.search(r"\d{3,4}", inner[:d.start()]):
                return inner[:d.start()], inner[d.end():]
        dates = [(s, e) for s, e, label in entity_spans(inner) if label == "DATE" and YEAR_IN.search(inner[s:e])]
        if len(dates) >= 2 and not re.search(r"\w", inner[dates[0][1]:dates[1][0]]):
            return inner[dates[0][0]:dates[0][1]], inner[dates[1][0]:dates[1][1]]
    return None


def _days(date: tuple[int, int, int]) -> float:
    y, m, d = date
    return y * _YEAR_DAYS + m * 32 + d


def _evidence(option: str, documents: Sequence[tuple[str, str]]) -> list[tuple[int, str]]:
    """The sentences about ``option``: those of the passages titled with it (:func:`_names`, the
    surest first), in order, then the other sentences that name it."""
    titled: list[tuple[int, int, str]] = []  # (-sureness, passage, sentence)
    named = []
    # an option of function words alone ("A", "The Who" is not) is found by its title only: "a"
    # is in every other sentence
    by_name = any(w not in QUERY_STOP_WORDS for w in _norm(option).split())
    for i, (title, text) in enumerate(documents):
        about = _names(title or "", option)
        for s in sentence_texts(text):
            if about:
                titled.append((-about, i, s))
            elif by_name and _mentions(s, option) >= 0:
                named.append((i, s))
    return [(i, s) for _, i, s in sorted(titled, key=lambda x: x[:2])] + named


def _cue(cue: str) -> re.Pattern[str]:
    """A relation cue as a pattern: "directed by" also as "directed, produced, and written by"."""
    if cue.endswith(" by"):
        verb = re.escape(cue[:-3])
        return re.compile(rf"\b{verb}\b(?:[\w\s,]{{0,40}}?\s)?by\b", re.I)
    return re.compile(rf"\b{re.escape(cue)}\b", re.I)


def _name_after(sentence: str, pos: int) -> str:
    """The first name in ``sentence`` after ``pos`` and before the clause ends, skipping
    nationalities and prefixes ("directed by Vietnamese-born French director Tran Anh Hung")."""
    end = min((k for k in (sentence.find(c, pos) for c in ".;(") if k >= 0), default=len(sentence))
    for m in _NAME_RUN.finditer(sentence, pos, end + 1 if end < len(sentence) and sentence[end] == "." else end):
        words = m.group(0).rstrip(".,").split()
        while words and (words[0].lower() in COUNTRIES or words[0].endswith("-")
                         or re.fullmatch(r"[\w'’]+-(?:born|based)", words[0])):
            words.pop(0)  # "Vietnamese-born French": who, not their name
        if not words or sentence[m.end():m.end() + 1] == "-":
            continue
        return " ".join(words)
    return ""


def _related(option: str, relation: str, documents: Sequence[tuple[str, str]]) -> str:
    """The name ``option``'s passages give for ``relation`` ("directed by NAME"), "" if none."""
    for _, s in _evidence(option, documents):
        for cue in RELATION_VERBS[relation]:
            for m in _cue(cue).finditer(s):
                name = _name_after(s, m.end())
                if name and _norm(name) != _norm(option):
                    return name
    return ""


def _first(option: str, documents: Sequence[tuple[str, str]],
           read: Callable[[str], _V | None]) -> tuple[_V, tuple[int, str]] | None:
    """The first value ``read`` finds (not None, not "") in ``option``'s evidence
    (:func:`_evidence`), with its passage and sentence; None when no sentence has one."""
    for i, s in _evidence(option, documents):
        v = read(s)
        if v is not None and v != "":
            return v, (i, s)
    return None


def choose(question: str, documents: Sequence[tuple[str, str]]) -> Choice | None:
    """The option of a choice ``question`` that ``documents`` (``(title, text)`` passages)
    favour, by the rule in the module's docstring; None when the question offers no choice or
    the passages do not decide it."""
    stem, options = choice_options(question)
    if not options:
        return None
    cmp = comparison(stem)
    if cmp is not None:
        found = []
        for o in options:
            subject = _related(o, cmp.relation, documents) if cmp.relation else o
            found.append(_first(subject, documents, lambda x: _value(x, cmp)) if subject else None)
        # the passages do not state the compared values: the question's words decide, between
        # options that each have a passage about them
        about = all(any(_names(t or "", o) for t, _ in documents) for o in options)
        if any(f is None for f in found):
            return _match(stem, options, documents) if about else None
        values = [f[0] * cmp.sign for f in found]  # type: ignore[index]
        best = max(values)
        if values.count(best) > 1:
            return _match(stem, options, documents) if about else None
        k = values.index(best)
        evidence = [f[1] for f in found]  # type: ignore[index]
        shown = [_shown(f[0], cmp) for f in found]  # type: ignore[index]
        reason = f"{cmp.measure}{' of the ' + cmp.relation if cmp.relation else ''}: " + ", ".join(
            f"{o} {v}" for o, v in zip(options, shown, strict=True)) + f" ({'largest' if cmp.sign > 0 else 'smallest'})"
        return Choice(options[k], reason, tuple([evidence[k], *(e for j, e in enumerate(evidence) if j != k)]))
    return _match(stem, options, documents)


def _shown(value: float, cmp: Comparison) -> str:
    if cmp.measure == "count":
        return f"{value:g}"
    if cmp.measure == "lifespan":
        return f"{value / _YEAR_DAYS:.0f} years"
    y, rest = divmod(int(value), _YEAR_DAYS)
    m, d = divmod(rest, 32)
    return f"{y}" + (f"-{m:02d}" if m else "") + (f"-{d:02d}" if d else "")


def _match(stem: str, options: Sequence[str], documents: Sequence[tuple[str, str]]) -> Choice | None:
    """The option whose sentences hold the most of the stem's words (one alone with the most),
    when the stem has at least :data:`MIN_MATCH_WORDS` of them: "Which is better, A or B?" asks
    an opinion that one word found in a passage does not settle."""
    option_words = {w for o in options for w in _norm(o).split()}
    wanted = {w for w in _norm(stem).split() if w not in QUERY_STOP_WORDS and w not in option_words
              and not w.isdigit() and len(w) > 2}
    if len(wanted) < MIN_MATCH_WORDS:
        return None
    scored = []
    for o in options:
        sents = _evidence(o, documents)
        held = set()
        for _, s in sents:
            held |= wanted & set(_norm(s).split())
        best = max(sents, key=lambda x: len(wanted & set(_norm(x[1]).split())), default=(-1, ""))
        scored.append((len(held), best))
    counts = [c for c, _ in scored]
    top = max(counts)
    if top == 0 or counts.count(top) > 1:
        return None
    k = counts.index(top)
    reason = "the question's words: " + ", ".join(f"{o} {c} of {len(wanted)}" for o, c in zip(options, counts,
                                                                                              strict=True))
    return Choice(options[k], reason, tuple([scored[k][1], *(s for j, (_, s) in enumerate(scored) if j != k)]))


# --------------------------------------------------------------------------- yes / no
# names that hold a country's word but are elsewhere ("New South Wales", "New England")
_NOT_COUNTRIES = {"new south wales": "australia", "new england": "united states", "new mexico": "united states"}
_AUX = re.compile(r"\s*(?:are|were|is|was|do|did|does|have|has)\s+", re.I)
_CONNECTOR = frozenset("of the and de da di del la le van von by for in on a an at to".split())
_SAME = re.compile(r"\bsame\s+(?P<noun>[a-z]+)")
_BY_SAME = re.compile(r"\b(?P<verb>[a-z]+ed)\s+by\s+the\s+same\b")
_GENERIC = frozenset("based born".split())  # "US-based", "French-born": the country is the word


def _country(sentence: str, names_only: bool = False) -> str:
    """The first country ``sentence`` names, by a word or phrase of :data:`COUNTRIES` ("an
    American actor", "a lake in Saskatchewan, Canada", "a US-based magazine"), "" if none;
    ``names_only``: by a country's name, not a nationality ("located in ...")."""
    words = re.findall(r"[A-Za-z][A-Za-z.]*[A-Za-z]|[A-Za-z]", sentence.replace("-", " "))
    low = [w.lower() for w in words]
    for k, w in enumerate(words):
        for n in (3, 2, 1):
            phrase = " ".join(low[k:k + n]) if n > 1 else (w if w == "US" else low[k])  # "US", not "us"
            if n > 1 and k + n > len(words):
                continue
            if phrase in _NOT_COUNTRIES:
                return _NOT_COUNTRIES[phrase]
            country = COUNTRIES.get(phrase)
            if country and (not names_only or phrase == country or phrase in ("us", "US", "usa", "u.s", "uk",
                                                                                 "u.k", "america", "britain",
                                                                                 "great britain", "england",
                                                                                 "scotland", "wales", "holland")):
                return country
    return ""


def _capital_run(tokens: Sequence[str], start: int, step: int) -> int:
    """The end (exclusive, ``step`` +1) or first index (``step`` -1) of the capitalised run of
    ``tokens`` from ``start``: capitalised words, figures and the connectors between two of them."""
    k, last = start, start - step
    while 0 <= k < len(tokens):
        t = tokens[k]
        if re.match(r"[A-Z0-9(\"“'‘]", t):
            last = k
        elif t.lower() not in _CONNECTOR:
            break
        k += step
    return last if step < 0 else last + 1


def yes_no_options(question: str) -> tuple[str, list[str], str]:
    """``(before, [A, B], after)`` of a yes / no question about two named things ("Were A and B
    from the same country?", "Are both A and B American?"); ``("", [], "")`` otherwise."""
    q = " ".join(question.split()).rstrip(" ?")
    aux = _AUX.match(q)
    if aux is None:
        return "", [], ""
    tokens = q[aux.end():].split(" ")
    # the two things come first: only the first capitalised run is read, and its first "and"s
    first = next((k for k, t in enumerate(tokens) if re.match(r"[A-Z0-9]", t)), len(tokens))
    joins = [k for k in range(first, min(len(tokens), first + 40)) if tokens[k] == "and"][:3]
    for k in joins:
        a0 = _capital_run(tokens, k - 1, -1)
        b1 = _capital_run(tokens, k + 1, +1)
        while b1 > k + 2 and (tokens[b1 - 1] if tokens[b1 - 1] == "US" else tokens[b1 - 1].lower()) in COUNTRIES:
            b1 -= 1  # "Are both A and B American?": the nationality is asked about, not named
        if a0 < k and b1 > k + 1 and not any(re.match(r"[A-Z0-9]", t) for t in tokens[:a0]):
            # the two things come first ("Were A and B ...", "Are both the films A and B ..."):
            # "Does Quarry support JSON and YAML?" asks about Quarry
            before, after = " ".join(tokens[:a0]), " ".join(tokens[b1:])
            a, b = _clean_option(" ".join(tokens[a0:k])), _clean_option(" ".join(tokens[k + 1:b1]))
            if a and b and _norm(a) != _norm(b) and max(len(a.split()), len(b.split())) <= 8:
                return before, [a, b], after
    return "", [], ""


def _holds(lead_text: str, wanted: Sequence[str]) -> bool:
    """Whether ``lead_text`` holds every descriptive word of ``wanted`` (a nationality by its
    country: "American" is held by "a US-born ..." too)."""
    words = {singular(w) for w in re.findall(r"[a-z]+", lead_text.lower().replace("-", " "))}
    countries = {c for c in (_country(s) for s in [lead_text]) if c} | {
        COUNTRIES[w] for w in re.findall(r"[a-z]+", lead_text.lower()) if w in COUNTRIES}
    for w in wanted:
        for part in (w.split("-") if "-" in w else [w]):
            key = part if part == "US" else part.lower()
            if key in COUNTRIES:
                if COUNTRIES[key] not in countries:
                    return False
            elif part.lower() not in _GENERIC and singular(part.lower()) not in words:
                return False
    return True


def yes_no(question: str, documents: Sequence[tuple[str, str]]) -> Choice | None:
    """"yes" or "no" for a yes / no question comparing two named things (module docstring), with
    the sentences that decide it; None for other questions or when the passages do not decide."""
    before, options, after = yes_no_options(question)
    if not options:
        return None
    rest = f"{before} {after}".lower()
    # "the directors", "whose director", "directors of films": through them; "both opera
    # composers" describes the options themselves
    rw = re.findall(r"[a-z]+", rest)
    relation = next((w.rstrip("s") for k, w in enumerate(rw) if w.rstrip("s") in RELATION_VERBS
                     and ((k and rw[k - 1] in ("the", "whose", "their")) or rw[k + 1:k + 2] == ["of"])), "")
    subjects = [_related(o, relation, documents) for o in options] if relation else list(options)
    if not all(subjects):
        return None
    same, by = _SAME.search(after.lower()), _BY_SAME.search(after.lower())
    if same is not None:
        noun = same.group("noun")
        if by is not None:
            values = [_named_after(o, f"{by.group('verb')} by", documents) for o in subjects]
        elif noun in ("country", "nationality"):
            names_only = bool(re.search(r"\b(?:located|in)\b", after.lower()))
            values = [_first(o, documents, lambda x: _country(x, names_only)) for o in subjects]
        else:
            values = [_named_after(o, noun, documents) for o in subjects]
        if any(v is None for v in values):
            return None
        x, y = f" {_norm(values[0][0])} ", f" {_norm(values[1][0])} "
        answer = "yes" if x in y or y in x else "no"  # "Walt Disney" and "Walt Disney Pictures"
        reason = f"same {noun}: " + ", ".join(f"{o} {v[0]}" for o, v in zip(subjects, values, strict=True))
        return Choice(answer, reason, tuple(v[1] for v in values))
    both = re.match(r"(?:both\s+)?(?P<words>.+)$", after) if (after.lower().startswith("both ")
                                                                or before.lower().startswith("both")) else None
    if both is None:
        return None
    wanted = [w for w in re.findall(r"[A-Za-z][A-Za-z-]*", both.group("words"))
              if w.lower() not in QUERY_STOP_WORDS and w.lower() not in RELATION_WORDS]
    if not wanted or len(wanted) > 4 or any(w.lower().endswith("ed") and "-" not in w for w in wanted):
        return None  # "both formed before 2010": not a description to look up
    held, evidence = [], []
    for o in subjects:
        lead = _evidence(o, documents)[:2]
        if not lead:
            return None
        held.append(_holds(" ".join(x for _, x in lead), wanted))
        evidence.append(lead[0])
    answer = "yes" if all(held) else "no"
    reason = f"both {' '.join(wanted)}: " + ", ".join(f"{o} {'yes' if h else 'no'}" for o, h in zip(subjects, held,
                                                                                                     strict=True))
    return Choice(answer, reason, tuple(evidence))


def _named_after(option: str, cue: str, documents: Sequence[tuple[str, str]]) -> tuple[str, tuple[int, str]] | None:
    """The capitalised name after ``cue`` in ``option``'s evidence ("family Cucurbitaceae",
    "produced by Walt Disney Productions")."""
    def read(s: str) -> str:
        for m in re.finditer(rf"\b{re.escape(cue)}\b", s, re.I):
            name = _NAME_AFTER.match(s, m.end())
            if name:
                return name.group(1).rstrip(".,")
        return ""
    return _first(option, documents, read)


# --------------------------------------------------------------------------- what two share
_SHARED = re.compile(r"\b(?:both|in common|share|shared)\b", re.I)
_IS_A = re.compile(r"\b(?:is|was|are|were)\s+(?:an?|the)\s+(?P<d>[^.;:()]+)")
_DESCRIPTION_END = re.compile(r"\s(?:who|which|that|whose|best|known|from|in|at|with|by|based|born|for|on)\s"
                              r"|,\s+(?:the|an?|his|her|its|their)\s")
# what a question asks two things to share when it is where they come from ("the shared country
# of ancestry"): then a nationality is the answer, not a word to cut
_ASKS_ORIGIN = frozenset("country countries nationality ancestry descent origin ethnicity citizenship".split())


def _description(sentence: str) -> list[str]:
    """The words that describe what a passage's first sentence is about, a list of them whole:
    "X was an American film critic and historian, journalist, screenwriter, and author." ->
    ["American", "film", "critic", "and", "historian", "journalist", "screenwriter", "and",
    "author"] (commas dropped, "Armenian-American" two words); [] without "is a ..."."""
    m = _IS_A.search(sentence)
    if m is None:
        return []
    d = f" {m.group('d')} "
    end = _DESCRIPTION_END.search(d)
    kept = d[:end.start()] if end else d
    return [w for w in re.split(r"[\s,]+|(?<=[a-z])-(?=[A-Z])", kept) if w]


def common_ground(question: str, documents: Sequence[tuple[str, str]]) -> Choice | None:
    """What two named things have in common ("What profession did A and B both hold?", "What do A
    and B have in common?"): the longest run of words both of their passages' first sentences
    describe them with ("an American *film director*"), nationalities and the question's own
    words cut from its ends; None without two things, a description of each, or a run left."""
    if not _SHARED.search(question) or answer_kind(question) not in ("ENT", "OTHER"):
        return None
    q = " ".join(question.split()).rstrip(" ?")
    tokens = q.split(" ")
    things = []
    for k in [k for k, t in enumerate(tokens[:60]) if t == "and"][:3]:
        a0, b0 = _capital_run(tokens, k - 1, -1), k + 1
        while b0 < len(tokens) and tokens[b0].lower() in ("the", "a", "an"):
            b0 += 1
        b1 = _capital_run(tokens, b0, +1)
        if a0 < k and b1 > b0:
            things = [_clean_option(re.sub(r"^(?:Both|The)\s+", "", " ".join(tokens[a0:k]))),
                      _clean_option(" ".join(tokens[b0:b1]))]
            break
    # two named things: "where Serbian and Croatian are both official" names languages, not things
    if len(things) != 2 or not all(things) or _norm(things[0]) == _norm(things[1]) or any(map(demonym, things)):
        return None
    leads = [_evidence(t, documents)[:1] for t in things]
    if not all(leads):
        return None
    descriptions = [_description(lead[0][1]) for lead in leads]
    if not all(descriptions):
        return None
    asked = {singular(w) for w in _norm(q).split()}
    low = [[singular(w.lower().strip("'’")) for w in d] for d in descriptions]
    origin = bool(_ASKS_ORIGIN & set(_norm(q).split()))

    def cut(word: str) -> bool:  # function words, and nationalities unless they are asked for
        return word.lower() in QUERY_STOP_WORDS or (not origin and word.lower() in COUNTRIES)

    def trimmed(i: int, n: int) -> list[str]:
        words = descriptions[0][i:i + n]
        while words and cut(words[0]):
            words = words[1:]
        while words and cut(words[-1]):
            words = words[:-1]
        return words

    # every run of words both descriptions hold; the best has the most words the question lacks,
    # then the most words ("flowering plants" over "genus"), then the latest (a noun phrase's head)
    best: tuple[int, int, int] = (0, 0, 0)
    words: list[str] = []
    for i in range(len(low[0])):
        for j in range(len(low[1])):
            n = 0
            while i + n < len(low[0]) and j + n < len(low[1]) and low[0][i + n] == low[1][j + n]:
                n += 1
            run = trimmed(i, n) if n else []
            new = sum(singular(w.lower()) not in asked for w in run)
            if new and (new, len(run), i) > best:
                best, words = (new, len(run), i), run
    if not words:
        return None
    if origin:  # where they come from: the nationality alone ("Armenian" of "Armenian American")
        words = [w for w in words if w.lower() in COUNTRIES][:1] or words
    answer = " ".join(words)
    reason = f"in common: {things[0]} '{' '.join(descriptions[0])}', {things[1]} '{' '.join(descriptions[1])}'"
    return Choice(answer, reason, (leads[0][0], leads[1][0]))


def compared(question: str, documents: Sequence[tuple[str, str]]) -> Choice | None:
    """What ``documents`` answer to a question that compares named things: :func:`choose` for
    one that offers its answers, :func:`yes_no` for a yes / no question about two things,
    :func:`common_ground` for what two things share; None for other questions and when the
    passages do not decide."""
    kind = answer_kind(question)
    if kind == "CHOICE" or (kind == "ENT" and choice_options(question)[1]):  # "..., A and B?"
        return choose(question, documents)
    if kind == "YESNO":
        return yes_no(question, documents)
    return common_ground(question, documents)


# -- the decomposition of a question that offers its answers -------------------------------------

# the comparatives a template's last step names ("which is first of #1, #2")
_TEMPLATE_COMPARATIVES = {*_DATE_WORDS, *_COUNT_WORDS, "further", "farther", "closer", "nearer"}
# a word after "which" / "what" that is not the asked type ("Which was released first")
_NOT_A_TYPE = {"was", "is", "are", "were", "did", "does", "do", "has", "had", "have", "can", "could", "will",
               "would", "of", "in", "one", "among", "between"}


def choice_graph(question: str, max_nodes: int = 8) -> QDG | None:
    """The decomposition of a question that offers its answers, by Break's comparison template,
    or None for other questions.

    "Which film was released first, Laura's Star or Wonder Woman?" ->
    ``1: Laura's Star was released`` / ``2: Wonder Woman was released`` /
    ``3: which is first of #1, #2``: one step per option (the option, then the stem without its
    question word, the asked type after "which" / "what" and its comparatives), and a last
    step that compares them (``which is true of #1, #2`` when the stem names no comparative).
    A copy-based tagger cannot write this form (its steps are spans of the question, and two
    options side by side read as one span), and Break, HotpotQA and 2WikiMultihopQA annotate
    such questions this way. Options come from :func:`choice_options`; a question with more
    options than ``max_nodes - 1``, or an option that is not written in the question, gets None.
    """
    stem, options = choice_options(question)
    if len(options) < 2 or len(options) + 1 > max_nodes or any(o not in question for o in options):
        return None
    words = stem.split()
    wh = next((k for k, w in enumerate(words) if _WH.fullmatch(w.strip(",:;"))), None)
    if wh is not None:
        asked = words[wh].strip(",:;").lower()
        del words[wh]
        if asked in ("which", "what") and wh < len(words) and words[wh].lower() not in _NOT_A_TYPE:
            del words[wh]
    comparative = next((w.lower() for w in re.findall(r"[A-Za-z]+", stem) if w.lower() in _TEMPLATE_COMPARATIVES), "")
    body = " ".join(w for w in words if re.sub(r"\W", "", w).lower() not in _TEMPLATE_COMPARATIVES).strip(" ,:;")
    ids = tuple(str(k) for k in range(1, len(options) + 1))
    refs = ", ".join(f"#{i}" for i in ids)
    last = f"which is {comparative or 'true'} of {refs}"
    nodes = [*(QDGNode(i, f"{o} {body}".strip()) for i, o in zip(ids, options, strict=True)),
             QDGNode(str(len(options) + 1), last, ids)]
    return QDG("split", tuple(nodes))


__all__ = ["RELATION_VERBS", "Choice", "Comparison", "choice_graph", "choice_options", "choose", "common_ground", "compared",
           "comparison", "yes_no", "yes_no_options"]
