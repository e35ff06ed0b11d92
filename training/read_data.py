"""The reader recipe's data: questions with their paragraphs and short answers.

Each source gives :class:`ReadItem` records: a question, its paragraphs (``(title, text)``,
gold and distractors), the short answer (and aliases) and which paragraphs support it.

* ``hotpotqa``: the distractor setting (2 gold + 8 distractor paragraphs); comparison
  questions answered ``yes`` / ``no``.
* ``musique``: the question over its gold paragraphs plus ``data.max_distractors`` of its
  distractors; with ``data.musique_hops`` also every hop of the gold decomposition as a
  question of its own (``#k`` filled with the earlier hops' answers) over its support
  paragraph and distractors: single-hop questions with their intermediate answers.
* ``2wikimultihopqa``: 10 paragraphs, the titles of ``supporting_facts`` are gold.
* ``demo``: the project's demo questions (``models/demo/qa.jsonl``) over their supporting
  documents and distractors from the demo corpus.
* ``synthetic``: questions about made-up animal fact sheets (:func:`synthetic_facts`),
  for the tiny twin and the quickstart, which run without ``../shared``.

Two kinds of single-hop questions are made from the *training* questions only (after the
split, so nothing of a held-out question is read):

* ``data.wiki_relations``: every evidence triple of a 2WikiMultihopQA record (``[subject,
  relation, object]``, the gold reasoning chain) becomes "What is the <relation> of
  <subject>?" over the subject's paragraph and the record's others, when the object is in
  that paragraph (:func:`relation_items`);
* ``data.cloze_per_item``: cloze questions (Lewis et al. 2019, unsupervised QA) cut from the
  record's paragraphs: a sentence whose date, year or capitalised name is replaced by a
  wh-word, a leading pronoun replaced by the paragraph's title, a few words dropped
  (:func:`cloze_items`). They teach the span heads to find a phrase that the question's
  words point at, which 300 multi-hop questions alone teach too rarely.

Items are split into train and held-out by question id (seeded): a MuSiQue record's hops
follow their record, so no held-out question is seen in any form.

Every record is checked as it is read (``read_jsonl``'s ``check``): a field of the wrong type,
a support title or index that names no paragraph, or a hop that refers to a later hop is refused
at its ``FILE:LINE``, naming the field, never met as a KeyError mid-build or read as other data.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import (
    ID,
    STRING,
    TEXT,
    RecordCheck,
    field_check,
    list_of,
    object_with,
    read_jsonl,
    shown,
)
from searchsmith.models.text import normalize_answer, sentence_texts
from searchsmith.training.data import (
    SHARED_DATA,
    check_leave_out,
    resolve_data_path,
    split_leaving_out,
    synthetic_facts,
)
from searchsmith.training.dataset_shapes import HOTPOTQA, MUSIQUE

SOURCES = ("hotpotqa", "musique", "2wikimultihopqa", "demo", "synthetic")


@dataclass(frozen=True)
class ReaderData:
    """Attributes:
        sources: datasets to read, from :data:`SOURCES`.
        hotpotqa: HotpotQA JSONL, distractor setting (the open part in ``../shared/data``).
        musique: MuSiQue-Ans JSONL (the open part in ``../shared/data``).
        wikimultihop: 2WikiMultihopQA JSONL (the open part in ``../shared/data``).
        musique_hops: also train on MuSiQue's per-hop sub-questions.
        max_distractors: MuSiQue: distractor paragraphs read beside the gold ones.
        synthetic_questions: questions generated for ``synthetic``.
        eval_ratio: share of question ids held out.
        split_seed: seed of the split and of distractor sampling.
        negatives_per_positive: training windows without the answer kept per window with it
            (the rest are dropped: most windows of a 10-paragraph context are negatives).
        no_answer_ratio: this share of the training questions is also read over its
            non-gold paragraphs only, every window labelled ``none`` (SQuAD 2.0's unanswerable
            questions): the reader learns to say there is no answer.
        max_items: per source, at most this many records (0 = all); smoke runs.
        wiki_relations: also train on 2WikiMultihopQA's evidence triples as single-hop
            questions (training records only).
        cloze_per_item: cloze questions made from each training record's paragraphs (0 = none).
        cloze_drop: share of a cloze question's other words dropped (noise, so that the
            question is not a copy of its sentence).
        answer_occurrences: which windows a span answer labels. ``first``: the windows that
            hold its first occurrence (in a gold paragraph when one has it); every other window
            is a negative, even one that holds the answer again. ``all``: a window that holds
            another occurrence of the answer (the name repeated in the other hop's paragraph,
            or in a distractor) is a positive at that occurrence, not a negative.
        leave_out: sources of ``sources`` whose questions are all held out, never trained on:
            the recipe reports its figures on them as ``ood/...`` beside the sentence
            baseline's there (``baselines/ood_sentence_f1``), and the serving gate reads those
            (users' documents are not the recipe's).
    """

    sources: tuple[str, ...] = ("hotpotqa", "musique", "2wikimultihopqa")
    hotpotqa: str = f"{SHARED_DATA}/hotpotqa/hotpotqa_dev_distractor.jsonl"
    musique: str = f"{SHARED_DATA}/musique/musique_ans_200.jsonl"
    wikimultihop: str = f"{SHARED_DATA}/2wikimultihopqa/2wikimultihopqa_dev.jsonl"
    musique_hops: bool = True
    max_distractors: int = 4
    synthetic_questions: int = 120
    eval_ratio: float = 0.2
    split_seed: int = 13
    negatives_per_positive: float = 1.0
    no_answer_ratio: float = 0.3
    max_items: int = 0
    wiki_relations: bool = False
    cloze_per_item: int = 0
    cloze_drop: float = 0.15
    answer_occurrences: str = "first"
    leave_out: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [s for s in self.sources if s not in SOURCES]
        if unknown or not self.sources:
            raise ValueError(f"data.sources: {list(self.sources)} has unknown or no sources {unknown}; "
                             f"choose from {list(SOURCES)}")
        if not 0.0 < self.eval_ratio < 1.0:
            raise ValueError(f"data.eval_ratio must be in (0, 1), got {self.eval_ratio}")
        if not 0.0 <= self.no_answer_ratio <= 1.0:
            raise ValueError(f"data.no_answer_ratio must be in [0, 1], got {self.no_answer_ratio}")
        if not 0 <= self.negatives_per_positive < float("inf") or self.max_distractors < 0:  # nan fails too
            raise ValueError(f"data.negatives_per_positive must be a finite number >= 0 (got "
                             f"{self.negatives_per_positive}) and data.max_distractors >= 0 (got {self.max_distractors})")
        if self.max_items < 0:  # -1 dropped each source's last record (items[:-1])
            raise ValueError(f"data.max_items must be >= 0 (0 = all), got {self.max_items}")
        if self.answer_occurrences not in ("first", "all"):
            raise ValueError(f"data.answer_occurrences must be 'first' or 'all', got {self.answer_occurrences!r}")
        if self.cloze_per_item < 0:
            raise ValueError(f"data.cloze_per_item must be >= 0, got {self.cloze_per_item}")
        if not 0.0 <= self.cloze_drop < 1.0:
            raise ValueError(f"data.cloze_drop must be in [0, 1), got {self.cloze_drop}")
        check_leave_out(self.sources, self.leave_out)


@dataclass(frozen=True)
class ReadItem:
    """One question to read.

    Attributes:
        qid: the split key (a MuSiQue hop carries its record's id).
        uid: unique id of this item.
        answers: the answer first, then its aliases.
        support: indices of the gold paragraphs in ``paragraphs``.
    """

    qid: str
    uid: str
    source: str
    question: str
    paragraphs: list[tuple[str, str]]
    answers: list[str]
    support: list[int] = field(default_factory=list)
    hop: bool = False
    evidences: tuple[tuple[str, str, str], ...] = ()

    @property
    def kind(self) -> str:
        """``yes`` / ``no`` for yes-no answers, ``none`` without answers (the answer is not in
        the paragraphs), else ``span``."""
        if not self.answers:
            return "none"
        a = normalize_answer(self.answers[0])
        return a if a in ("yes", "no") else "span"


# ----------------------------------------------------------------------------- record checks
# What each source's records must hold (read_jsonl's check): a record that does not is refused at
# its FILE:LINE, naming the field, what it must be and what it is. Before, a wrong type was a
# KeyError / TypeError mid-build or other data ("answer_aliases": "abc" gave one alias per letter,
# a null paragraph became the text "None"), and a support title or index that named no paragraph
# was dropped without a word. The public sets' shapes are training/dataset_shapes.py's; the demo's
# (the project's own data) are here.

DEMO_DOCUMENT = field_check({"id": ID, "text": STRING}, {"title": STRING})
_TURN = object_with("a {role, content} turn object", {"role": STRING, "content": STRING})


def demo_question_check(doc_ids: set[Any]) -> RecordCheck:
    """The demo questions' check: each ``supporting`` id must be a document of the corpus."""
    def unknown(rec: dict[str, Any]) -> list[str]:
        return [f"field 'supporting[{k}]' is {shown(g)}, not the id of a document of the demo corpus"
                for k, g in enumerate(rec.get("supporting") or []) if g not in doc_ids]

    return field_check({"id": ID, "query": TEXT, "answer": TEXT},
                       {"supporting": list_of(ID, "a list of document ids"),
                        "history": list_of(_TURN, "a list of turn objects")}, then=unknown)


def _limit(items: list, n: int) -> list:
    return items[:n] if n else items


def _context_items(path_setting: str, field: str, prefix: str, source: str, max_items: int) -> list[ReadItem]:
    """HotpotQA-format records (``context`` = ``[title, sentences]``; gold titles from
    ``supporting_titles`` or ``supporting_facts``): HotpotQA and 2WikiMultihopQA."""
    path = resolve_data_path(path_setting, field)
    out = []
    for r in _limit(HOTPOTQA.read(path, field, ("_id", "question", "answer", "context"),
                                  ("supporting_titles", "supporting_facts", "evidences")), max_items):
        gold = set(r.get("supporting_titles") or [t for t, _ in r.get("supporting_facts") or []])
        paras = [(t, " ".join(s) if isinstance(s, list) else s) for t, s in r["context"]]
        evidences = tuple(tuple(e) for e in r.get("evidences") or [])
        out.append(ReadItem(f"{prefix}-{r['_id']}", f"{prefix}-{r['_id']}", source, r["question"], paras,
                            [r["answer"]], [i for i, (t, _) in enumerate(paras) if t in gold],
                            evidences=evidences))
    return out


def hotpotqa_items(data: ReaderData) -> list[ReadItem]:
    return _context_items(data.hotpotqa, "data.hotpotqa", "hotpotqa", "hotpotqa", data.max_items)


def wikimultihop_items(data: ReaderData) -> list[ReadItem]:
    return _context_items(data.wikimultihop, "data.wikimultihop", "2wiki", "2wikimultihopqa", data.max_items)


def _musique_context(rng: random.Random, paras: list[dict], gold: Sequence[int], k: int) -> tuple[list[tuple[str, str]], list[int]]:
    others = [i for i in range(len(paras)) if i not in gold]
    pick = list(gold) + rng.sample(others, min(k, len(others)))
    rng.shuffle(pick)
    chosen = [(paras[i]["title"], paras[i]["paragraph_text"]) for i in pick]
    return chosen, [j for j, i in enumerate(pick) if i in gold]


def musique_items(data: ReaderData) -> list[ReadItem]:
    path = resolve_data_path(data.musique, "data.musique")
    rng = random.Random(data.split_seed)
    out = []
    for r in _limit(MUSIQUE.read(path, "data.musique", ("id", "question", "answer", "paragraphs"),
                                 ("answer_aliases", "question_decomposition")), data.max_items):
        paras = r["paragraphs"]
        qid = f"musique-{r['id']}"
        gold = [i for i, p in enumerate(paras) if p["is_supporting"]]
        ctx, support = _musique_context(rng, paras, gold, data.max_distractors)
        answers = [r["answer"], *(r.get("answer_aliases") or [])]
        out.append(ReadItem(qid, qid, "musique", r["question"], ctx, answers, support))
        if not data.musique_hops:
            continue
        found: list[str] = []
        for h, step in enumerate(r.get("question_decomposition") or []):
            # the check made every #k name an earlier hop
            q = re.sub(r"#(\d+)", lambda m: found[int(m.group(1)) - 1], step["question"])
            found.append(step["answer"])
            idx = step.get("paragraph_support_idx")
            if ">>" in q or "#" in q or not found[-1] or idx is None:
                continue  # KB-style "subject >> relation" steps are not questions
            hop_ctx, hop_support = _musique_context(rng, paras, [idx], data.max_distractors)
            out.append(ReadItem(qid, f"{qid}-hop{h + 1}", "musique", q, hop_ctx, [found[-1]], hop_support, hop=True))
    return out


def demo_items(data: ReaderData) -> list[ReadItem]:
    from searchsmith.models.demo import corpus_path, qa_path

    docs = {d["id"]: d for d in read_jsonl(corpus_path(), required=("id", "text"), what="demo corpus",
                                          check=DEMO_DOCUMENT)}
    ids = sorted(docs, key=lambda i: (isinstance(i, str), i))  # ids may be strings or integers, not comparable
    rng = random.Random(data.split_seed)
    out = []
    for r in _limit(read_jsonl(qa_path(), required=("id", "query", "answer"), what="demo questions",
                               check=demo_question_check(set(docs))), data.max_items):
        gold = list(r.get("supporting") or [])  # every id is in docs (the check)
        if not gold:
            continue  # a question without supporting documents has nothing to read
        others = rng.sample([i for i in ids if i not in gold], min(data.max_distractors, len(ids) - len(gold)))
        pick = gold + others
        rng.shuffle(pick)
        # a follow-up reads with its conversation's user turns before it, as a rewrite gives it
        history = " ".join(t["content"] for t in r.get("history") or [] if t["role"] == "user")
        question = f"{history} {r['query']}".strip()
        out.append(ReadItem(f"demo-{r['id']}", f"demo-{r['id']}", "demo", question,
                            [(docs[i].get("title") or "", docs[i]["text"]) for i in pick], [r["answer"]],
                            [j for j, i in enumerate(pick) if i in gold]))
    return out


SYNTHETIC_QUESTIONS = {
    "habitat": ["Where does the {name} live?", "What habitat is the {name} found in?"],
    "food": ["What does the {name} eat?", "What is the main food of the {name}?"],
    "colour": ["What colour is the {name}?", "Which colour does the {name} have?"],
    "trait": ["What kind of animal is the {name} known as?"],
}


def synthetic_items(data: ReaderData) -> list[ReadItem]:
    """Questions about made-up fact sheets; a third of the sheets are asked yes/no."""
    rng = random.Random(data.split_seed + 1)
    facts = synthetic_facts(max(8, data.synthetic_questions // 2), seed=data.split_seed)

    def sheet(f: dict[str, str]) -> tuple[str, str]:
        return (f"The {f['name']}", f"The {f['name']} lives in {f['habitat']} and feeds mostly on {f['food']}. "
                f"It is a {f['trait']} animal with {f['colour']} fur.")

    out = []
    for i in range(data.synthetic_questions):
        f = facts[i % len(facts)]
        others = rng.sample([g for g in facts if g["name"] != f["name"]], min(3, len(facts) - 1))
        pick = [f, *others]
        rng.shuffle(pick)
        paras = [sheet(g) for g in pick]
        support = [pick.index(f)]
        if i % 3 == 2:
            other = rng.choice(others)
            asked = f["food"] if rng.random() < 0.5 else other["food"]
            q = f"Does the {f['name']} eat {asked}?"
            ans = "yes" if asked == f["food"] else "no"
        else:
            slot = rng.choice(sorted(SYNTHETIC_QUESTIONS))
            q = rng.choice(SYNTHETIC_QUESTIONS[slot]).format(name=f["name"])
            ans = f[slot]
        out.append(ReadItem(f"synthetic-{i}", f"synthetic-{i}", "synthetic", q, paras, [ans], support))
    return out


LOADERS = {"hotpotqa": hotpotqa_items, "musique": musique_items, "2wikimultihopqa": wikimultihop_items,
           "demo": demo_items, "synthetic": synthetic_items}


def load_items(data: ReaderData) -> list[ReadItem]:
    """Every item of ``data.sources``, in source order."""
    out: list[ReadItem] = []
    for s in data.sources:
        out.extend(LOADERS[s](data))
    if not out:
        raise ValidationError(f"data.sources {list(data.sources)}: no questions were read; check the paths")
    return out


def split_items(items: Sequence[ReadItem], data: ReaderData) -> tuple[set[str], set[str]]:
    """(train, held-out) question ids: ``data.eval_ratio`` of each kept source's ids held out
    (``data.split_seed``), and every id of a ``data.leave_out`` source."""
    source = {it.qid: it.source for it in items}
    keys = sorted(source)
    return split_leaving_out(keys, [source[k] for k in keys], data.leave_out, data.eval_ratio, data.split_seed)


# ----------------------------------------------------------------------------- single-hop questions

RELATION_QUESTIONS = {
    "director": "Who directed {s}?",
    "date of birth": "When was {s} born?",
    "date of death": "When did {s} die?",
    "publication date": "When was {s} released?",
    "place of birth": "Where was {s} born?",
    "place of death": "Where did {s} die?",
    "country of citizenship": "What is the nationality of {s}?",
    "spouse": "Who was the spouse of {s}?",
    "father": "Who was the father of {s}?",
    "mother": "Who was the mother of {s}?",
    "inception": "When was {s} founded?",
}


def relation_items(items: Sequence[ReadItem]) -> list[ReadItem]:
    """Single-hop questions from the evidence triples of ``items`` (2WikiMultihopQA): one per
    triple whose subject is a paragraph title and whose object that paragraph contains."""
    out = []
    for it in items:
        titles = {t.lower(): j for j, (t, _) in enumerate(it.paragraphs)}
        for n, (subj, rel, obj) in enumerate(it.evidences):
            j = titles.get(subj.lower())
            if j is None or not obj or obj.lower() not in it.paragraphs[j][1].lower():
                continue
            q = RELATION_QUESTIONS.get(rel, "What is the {r} of {s}?").format(s=subj, r=rel)
            out.append(ReadItem(it.qid, f"{it.uid}-rel{n + 1}", it.source, q, it.paragraphs, [obj], [j], hop=True))
    return out


_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTHS})(?: \d{{4}})?|(?:{_MONTHS}) \d{{1,2}}, \d{{4}}|(?:{_MONTHS}) \d{{4}}"
                   rf"|(?:1[0-9]|20)\d{{2}})\b")
_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+(?:(?:of|the|de|von|van|and|la|del)\s+)*[A-Z][\w'\-]*){0,4}")
_PRONOUN = re.compile(r"^(He|She|It|They|His|Her|Its|Their)\b")
_WHO_BEFORE = re.compile(r"\b(by|and|with|to|of|married|son of|daughter of)\s*$")


def cloze_question(sentence: str, title: str, rng: random.Random, drop: float) -> tuple[str, str] | None:
    """``(question, answer)`` cut from ``sentence``, or None when it has no usable answer.

    The answer is a date / year (asked "when") or a capitalised name that is not the title
    and not the sentence's first word (asked "who" after "by", "son of", ...; else "what").
    """
    cands = [(m.start(), m.end(), "when") for m in _DATE.finditer(sentence)]
    dates = list(cands)
    for m in _NAME.finditer(sentence):
        if (m.start() == 0 or m.group(0).lower() in title.lower()
                or any(a < m.end() and m.start() < b for a, b, _ in dates)):
            continue
        who = bool(_WHO_BEFORE.search(sentence[: m.start()]))
        cands.append((m.start(), m.end(), "who" if who else "what"))
    cands = [c for c in cands if 1 <= len(sentence[c[0]:c[1]].split()) <= 6]
    if not cands:
        return None
    a, b, wh = rng.choice(cands)
    answer = sentence[a:b]
    before, after = sentence[:a], sentence[b:]
    pron = _PRONOUN.match(before)
    if pron and title:
        owner = pron.group(1) in ("His", "Her", "Its", "Their")
        before = (title + ("'s" if owner else "")) + before[pron.end():]
    words = [w for w in f"{before} {wh.upper()} {after}".replace(".", " ").split() if w]
    keep = [w for w in words if w == wh.upper() or rng.random() >= drop]
    if len(keep) < 4:
        return None
    q = " ".join(keep).replace(wh.upper(), wh).rstrip(",;:") + "?"
    return q[0].upper() + q[1:], answer


def cloze_items(items: Sequence[ReadItem], per_item: int, drop: float, seed: int) -> list[ReadItem]:
    """``per_item`` cloze questions (:func:`cloze_question`) from each item's paragraphs, read
    over the item's paragraphs (the sentence's own and the others as distractors)."""
    rng = random.Random(seed)
    out = []
    for it in items:
        if it.source in ("synthetic", "demo") or not it.paragraphs:
            continue
        tries, made = 0, 0
        while made < per_item and tries < 6 * per_item:
            tries += 1
            j = rng.randrange(len(it.paragraphs))
            title, text = it.paragraphs[j]
            sents = [x for x in sentence_texts(text) if len(x.split()) >= 5]
            if not sents:
                continue
            got = cloze_question(rng.choice(sents), title, rng, drop)
            if got is None:
                continue
            made += 1
            out.append(ReadItem(it.qid, f"{it.uid}-cloze{made}", it.source, got[0], it.paragraphs, [got[1]], [j],
                                hop=True))
    return out


def find_answer(context: str, answers: Sequence[str], prefer: Sequence[tuple[int, int]] = ()) -> tuple[int, int] | None:
    """Character range of the first occurrence of an answer in ``context`` (case-insensitive,
    on word boundaries), preferring one inside a ``prefer`` range (the gold paragraphs)."""
    return preferred(find_answers(context, answers), prefer)


def preferred(hits: Sequence[tuple[int, int]], prefer: Sequence[tuple[int, int]] = ()) -> tuple[int, int] | None:
    """The first of ``hits`` (:func:`find_answers`) inside a ``prefer`` range, else the first."""
    for h in hits:
        if any(a <= h[0] and h[1] <= b for a, b in prefer):
            return h
    return hits[0] if hits else None


def find_answers(context: str, answers: Sequence[str]) -> list[tuple[int, int]]:
    """Character ranges of every occurrence in ``context`` of the first of ``answers`` that
    occurs (case-insensitive, on word boundaries), in order; yes / no are never spans."""
    hits: list[tuple[int, int]] = []
    low = context.lower()
    for a in answers:
        a = " ".join(str(a).split())
        if not a or normalize_answer(a) in ("yes", "no"):
            continue
        for m in re.finditer(r"(?<!\w)" + re.escape(a.lower()) + r"(?!\w)", low):
            hits.append((m.start(), m.end()))
        if hits:
            break
    return hits


__all__ = ["LOADERS", "SOURCES", "ReadItem", "ReaderData", "cloze_items", "cloze_question", "find_answer", "find_answers",
           "load_items", "preferred", "relation_items", "split_items"]
