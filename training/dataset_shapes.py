"""The record shapes of the public datasets in ``../shared/data``, each written once.

Every loader of one of these sets (the reranker's, the reader's, the decomposer's, the citation
and image recipes', ``eval``'s SciFact export, ``make-routing-set`` / ``make-pipeline-set``) reads
it through its :class:`RecordShape` here, so a malformed record is refused with the same
message whichever loader meets it: ``FILE:LINE: field 'paragraphs[3].is_supporting' must be true
or false, got "no"; correct the record or remove the line``.

A shape holds what each field must be (:class:`~searchsmith.models.jsonl.Want`) and the
problems across fields (an index past a list's end, a title that names no paragraph), the latter
as named functions below. A loader names the fields it needs and those it reads where present
(:meth:`RecordShape.check`, :meth:`RecordShape.read`); a cross-field rule sees only those, so it
applies wherever a loader reads the fields it is about, and never reads a field whose type was
not checked. Only the fields some loader reads are listed; the others of
``../shared/data/README.md`` pass unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import (
    BOOLEAN,
    ID,
    INDEX,
    INTEGER,
    STRING,
    STRINGS,
    TEXT,
    RecordCheck,
    Want,
    field_check,
    list_of,
    object_with,
    one_of,
    read_jsonl,
    shown,
)


@dataclass(frozen=True)
class RecordShape:
    """One dataset's record: what each field must be, and the problems across fields.

    Attributes:
        name: what one record is, for messages (``"MuSiQue record"``).
        fields: field name -> what it must be.
        rules: a record's problems across fields, each asked with only the fields a loader
            checked (a rule about fields the loader does not read finds nothing).
    """

    name: str
    fields: Mapping[str, Want]
    rules: tuple[RecordCheck, ...] = ()

    def check(self, required: Sequence[str], optional: Sequence[str] = (),
              then: RecordCheck | None = None) -> RecordCheck:
        """``read_jsonl``'s check for a loader that needs the ``required`` fields and reads the
        ``optional`` ones where present (not null): their types, then the shape's rules and
        ``then`` (a loader's own, e.g. against another file), asked of a record whose checked
        fields are all as wanted and shown only those fields.

        Raises:
            ValueError: a field name this shape does not know (a mistake in the loader).
        """
        checked = (*required, *optional)
        unknown = [name for name in checked if name not in self.fields]
        if unknown:
            raise ValueError(f"{self.name}: no field(s) {unknown}; the shape knows {list(self.fields)}")
        rules = (*self.rules, then) if then is not None else self.rules

        def across(rec: dict[str, Any]) -> list[str]:
            seen = {name: rec[name] for name in checked if name in rec}
            return [problem for rule in rules for problem in rule(seen)]

        return field_check({name: self.fields[name] for name in required},
                           {name: self.fields[name] for name in optional}, then=across)

    def read(self, path: str | Path, what: str, required: Sequence[str], optional: Sequence[str] = (), *,
             then: RecordCheck | None = None, missing_hint: str | None = None) -> list[dict[str, Any]]:
        """Every record of the JSONL file ``path``, each checked by :meth:`check`; every bad
        line reported at once, as ``read_jsonl`` does.

        A missing field is named with what it must be (``field 'paragraphs' is missing
        (expected a non-empty list of paragraph objects)``).

        Raises:
            ConfigError: the file is missing or a folder (``what`` and ``missing_hint`` say
                where it was set and how to fix it).
            ValidationError: bad lines, or no record.
        """
        rows = read_jsonl(path, what=what, missing_hint=missing_hint, allow_empty=True,
                          check=self.check(required, optional, then))
        if not rows:
            raise ValidationError(f"{what} {Path(path)} is empty: no records; expected one {self.name} per line "
                                  f"(a JSON object with fields {list(required)})")
        return rows


def _non_empty_list_of(item: Want, what: str) -> Want:
    return Want(what, lambda v: isinstance(v, list) and bool(v), items=item)


# ----------------------------------------------------------------------------- MuSiQue


def musique_support_past_paragraphs(rec: dict[str, Any]) -> list[str]:
    """A hop whose ``paragraph_support_idx`` is past the record's paragraphs."""
    if rec.get("paragraphs") is None:
        return []
    n = len(rec["paragraphs"])
    return [f"field 'question_decomposition[{h}].paragraph_support_idx' is {hop['paragraph_support_idx']}, past the "
            f"record's {n} paragraphs" for h, hop in enumerate(rec.get("question_decomposition") or [])
            if hop.get("paragraph_support_idx") is not None and hop["paragraph_support_idx"] >= n]


def musique_refs_not_earlier(rec: dict[str, Any]) -> list[str]:
    """A hop whose question refers to ``#k`` that is not an earlier hop (hop k's answer fills it)."""
    problems = []
    for h, hop in enumerate(rec.get("question_decomposition") or []):
        refs = [int(k) for k in re.findall(r"#(\d+)", hop["question"]) if not 1 <= int(k) <= h]
        if refs:
            earlier = f"#1..#{h}" if h else "none"
            problems.append(f"field 'question_decomposition[{h}].question' refers to #{refs[0]}, not an earlier "
                            f"hop (earlier hops: {earlier})")
    return problems


MUSIQUE_PARAGRAPH = object_with("a {title, paragraph_text, is_supporting} object",
                                {"title": STRING, "paragraph_text": STRING, "is_supporting": BOOLEAN})
# A hop's answer fills the later hops' #k; a null paragraph_support_idx (MuSiQue's unanswerable
# hops) is a hop without a paragraph.
MUSIQUE_HOP = object_with("a {question, answer, paragraph_support_idx} object",
                          {"question": TEXT, "answer": STRING}, {"paragraph_support_idx": INDEX})
MUSIQUE = RecordShape("MuSiQue record", {
    "id": ID,
    "question": TEXT,
    "answer": TEXT,
    "answer_aliases": STRINGS,
    "paragraphs": _non_empty_list_of(MUSIQUE_PARAGRAPH, "a non-empty list of paragraph objects"),
    "question_decomposition": _non_empty_list_of(MUSIQUE_HOP, "a non-empty list of hop objects"),
}, rules=(musique_support_past_paragraphs, musique_refs_not_earlier))


# ----------------------------------------------------------------------------- HotpotQA, 2WikiMultihopQA


def _is_context_paragraph(v: Any) -> bool:
    """A paragraph of ``context``: [title, sentences] (a list of strings, or one string)."""
    return (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
            and (isinstance(v[1], str) or isinstance(v[1], list) and all(isinstance(x, str) for x in v[1])))


def _sentences_by_title(context: list[list[Any]]) -> dict[str, int | None]:
    """Title -> sentences of its longest paragraph (2Wiki repeats a title now and then); None where
    a paragraph of that title is one string, whose sentences are not counted."""
    sentences: dict[str, int | None] = {}
    for t, s in context:
        n, before = (len(s) if isinstance(s, list) else None), sentences.get(t, 0)
        sentences[t] = None if n is None or before is None else max(n, before)
    return sentences


def titles_not_in_context(rec: dict[str, Any]) -> list[str]:
    """A ``supporting_titles`` entry that is the title of no ``context`` paragraph."""
    if rec.get("context") is None:
        return []
    titles = _sentences_by_title(rec["context"])
    return [f"field 'supporting_titles[{k}]' is {shown(t)}, not the title of any of the record's "
            f"{len(rec['context'])} 'context' paragraphs"
            for k, t in enumerate(rec.get("supporting_titles") or []) if t not in titles]


def facts_not_in_context(rec: dict[str, Any]) -> list[str]:
    """A ``supporting_facts`` entry that names no ``context`` paragraph, or a sentence past its end."""
    if rec.get("context") is None:
        return []
    sentences = _sentences_by_title(rec["context"])
    problems = []
    for k, (t, i) in enumerate(rec.get("supporting_facts") or []):
        if t not in sentences:
            problems.append(f"field 'supporting_facts[{k}]' names {shown(t)}, not the title of any of the record's "
                            f"{len(rec['context'])} 'context' paragraphs")
        elif sentences[t] is not None and i >= sentences[t]:  # a paragraph given as one string has no sentences
            problems.append(f"field 'supporting_facts[{k}]' is sentence {i} of {shown(t)}, past its "
                            f"{sentences[t]} sentences")
    return problems


STEPS = _non_empty_list_of(STRING, "a non-empty list of step strings")
STEP_DEPENDENCIES = list_of(list_of(INTEGER, "a list of step numbers"), "a list of step-number lists, one per step")
_FACT = Want("a [title, sentence index] pair", lambda v: isinstance(v, list) and len(v) == 2
             and isinstance(v[0], str) and INDEX.ok(v[1]))
_EVIDENCE = Want("a [subject, relation, object] triple of strings", lambda v: isinstance(v, list) and len(v) == 3
                 and all(isinstance(x, str) for x in v))
# HotpotQA's format; 2WikiMultihopQA keeps it (its gold titles in supporting_facts only) and adds
# evidences, the gold reasoning chain. qdmr_high_level: Break's decomposition, joined on _id.
HOTPOTQA = RecordShape("HotpotQA-format record", {
    "_id": ID,
    "question": TEXT,
    "answer": TEXT,
    "context": _non_empty_list_of(Want("a [title, sentences] pair (a string and a list of strings)",
                                       _is_context_paragraph), "a non-empty list of [title, sentences] pairs"),
    "supporting_titles": STRINGS,
    "supporting_facts": list_of(_FACT, "a list of [title, sentence index] pairs"),
    "evidences": list_of(_EVIDENCE, "a list of [subject, relation, object] triples"),
    "qdmr_high_level": object_with("a {steps, step_dependencies} object", {"steps": STEPS},
                                   {"step_dependencies": STEP_DEPENDENCIES}),
}, rules=(titles_not_in_context, facts_not_in_context))
WIKIMULTIHOPQA = HOTPOTQA


# ----------------------------------------------------------------------------- Break QDMR, StrategyQA

BREAK_QDMR = RecordShape("Break QDMR record", {"question_text": TEXT, "steps": STEPS,
                                               "step_dependencies": STEP_DEPENDENCIES, "source_dataset": STRING})
STRATEGYQA = RecordShape("StrategyQA record", {"question": TEXT, "decomposition": STEPS})


# ----------------------------------------------------------------------------- SciFact


def scifact_outside_corpus(abstracts: Mapping[str, Sequence[str]], corpus: str) -> RecordCheck:
    """A rule for SciFact claims against an abstract corpus: the first doc id of ``qrels``,
    ``bm25_top10`` or ``evidence`` that names no abstract, or else the first rationale sentence past
    the end of its abstract.

    Args:
        abstracts: doc id (as a string) -> the abstract's sentences.
        corpus: how messages name the corpus (``"corpus_subset.jsonl (data.scifact_corpus)"``).
    """
    def problems(rec: dict[str, Any]) -> list[str]:
        evidence = rec.get("evidence") or {}
        cited = [*(("qrels", d) for d in rec.get("qrels") or []),
                 *(("bm25_top10", d) for d, _ in rec.get("bm25_top10") or []), *(("evidence", d) for d in evidence)]
        for name, doc_id in cited:
            if str(doc_id) not in abstracts:
                return [f"field {name!r} cites doc {doc_id}, which is not in {corpus}"]
        for doc_id, rationales in evidence.items():
            n = len(abstracts[doc_id])
            for k, rationale in enumerate(rationales):
                past = [i for i in rationale["sentences"] if i >= n]
                if past:
                    return [f"field 'evidence.{doc_id}[{k}].sentences' names sentence {past[0]}, past the {n} "
                            f"sentences of doc {doc_id}'s abstract"]
        return []

    return problems


SENTENCE_SET = list_of(INDEX, "a list of sentence indices")
_RATIONALE = object_with("a {sentences, label} rationale object",
                         {"sentences": SENTENCE_SET, "label": one_of("SUPPORT", "CONTRADICT")})
_SCORED_ID = Want("a [doc id, score] pair", lambda v: isinstance(v, list) and len(v) == 2
                  and ID.ok(v[0]) and isinstance(v[1], (int, float)) and not isinstance(v[1], bool))
SCIFACT_CLAIM = RecordShape("SciFact claim", {
    "id": ID,
    "claim": TEXT,
    "evidence": object_with("an object of doc id -> rationales",
                            values=list_of(_RATIONALE, "a list of rationale objects")),
    "qrels": list_of(ID, "a list of doc ids"),
    "bm25_top10": list_of(_SCORED_ID, "a list of [doc id, score] pairs"),
})
SCIFACT_ABSTRACT = RecordShape("SciFact abstract", {"doc_id": ID, "title": STRING, "abstract": STRINGS})


# ----------------------------------------------------------------------------- WiCE, ExpertQA


def wice_sets_past_evidence(rec: dict[str, Any]) -> list[str]:
    """The first ``supporting_sentences`` index past the sentences of ``evidence``."""
    if rec.get("evidence") is None:
        return []
    n = len(rec["evidence"])
    return [f"field 'supporting_sentences[{k}]' names sentence {i}, past the {n} sentences of 'evidence'"
            for k, sset in enumerate(rec.get("supporting_sentences") or []) for i in sset if i >= n][:1]


WICE = RecordShape("WiCE record", {
    "label": one_of("supported", "partially_supported", "not_supported"),
    "claim": TEXT,
    "evidence": STRINGS,
    "supporting_sentences": list_of(SENTENCE_SET, "a list of sentence-index sets"),
    "meta": object_with("an object", optional={"id": ID}),
}, rules=(wice_sets_past_evidence,))

# The expert's judgement of an answer sentence's evidence.
EXPERTQA_SUPPORT = ("Complete", "Partial", "Incomplete", "Missing", "N/A")
_EXPERTQA_EVIDENCE = object_with("an evidence object", optional={"text": STRING, "url": STRING})
_EXPERTQA_CLAIM = object_with("a claim object", optional={
    "claim_string": STRING, "evidence": list_of(_EXPERTQA_EVIDENCE, "a list of evidence objects"),
    "support": one_of(*EXPERTQA_SUPPORT)})
EXPERTQA_ATTRIBUTION = RecordShape("ExpertQA attribution record", {
    "question": TEXT, "claims": list_of(_EXPERTQA_CLAIM, "a list of claim objects")})
EXPERTQA_QUESTION = RecordShape("ExpertQA question", {"qid": STRING, "question": TEXT, "field": STRING,
                                                      "specific_field": STRING})


# ----------------------------------------------------------------------------- TREC CAsT, COCO


def cast_history_lengths_differ(rec: dict[str, Any]) -> list[str]:
    """``history_turn_ids`` and ``history_utterances`` of different lengths: they pair one to one
    (the k-th id is the turn that asked the k-th utterance), and a loader that looks an earlier
    turn's answer up by its id would otherwise attach it to another utterance."""
    ids, utterances = rec.get("history_turn_ids"), rec.get("history_utterances")
    if ids is None or utterances is None or len(ids) == len(utterances):
        return []
    turn = f" of turn {shown(rec['id'])}" if rec.get("id") is not None else ""
    n_ids = f"{len(ids)} turn id" + ("" if len(ids) == 1 else "s")
    n_utterances = f"{len(utterances)} utterance" + ("" if len(utterances) == 1 else "s")
    return [f"field 'history_turn_ids'{turn} has {n_ids} but field 'history_utterances' has {n_utterances}; "
            "they pair one to one (the k-th id is the turn that asked the k-th utterance), so give every "
            "earlier utterance its turn's id"]


TREC_CAST = RecordShape("TREC CAsT turn", {
    "id": ID,
    "year": INTEGER,
    "topic_id": ID,
    "raw_utterance": TEXT,
    "manual_rewritten_utterance": TEXT,
    "history_utterances": STRINGS,
    "history_turn_ids": list_of(ID, "a list of turn ids"),
    "canonical_response": STRING,
}, rules=(cast_history_lengths_differ,))
# "captions" a list, never a string read letter by letter
COCO_CAPTIONS = RecordShape("COCO captions record", {"image_id": ID, "file_name": TEXT, "captions": STRINGS})


__all__ = [
    "BREAK_QDMR",
    "COCO_CAPTIONS",
    "EXPERTQA_ATTRIBUTION",
    "EXPERTQA_QUESTION",
    "EXPERTQA_SUPPORT",
    "HOTPOTQA",
    "MUSIQUE",
    "MUSIQUE_HOP",
    "MUSIQUE_PARAGRAPH",
    "SCIFACT_ABSTRACT",
    "SCIFACT_CLAIM",
    "SENTENCE_SET",
    "STEPS",
    "STEP_DEPENDENCIES",
    "STRATEGYQA",
    "TREC_CAST",
    "WICE",
    "WIKIMULTIHOPQA",
    "RecordShape",
    "cast_history_lengths_differ",
    "facts_not_in_context",
    "musique_refs_not_earlier",
    "musique_support_past_paragraphs",
    "scifact_outside_corpus",
    "titles_not_in_context",
    "wice_sets_past_evidence",
]
