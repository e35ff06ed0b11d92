"""Rewrites as edits: targets derived from human rewrites apply back exactly, generated edits
are applied robustly (never an exception, unknown spans skipped), and the edit constraint
admits only edits whose ``old`` span is in the query."""

from __future__ import annotations

import random

import pytest
from searchsmith.models.constrained import EditConstraint
from searchsmith.models.rewrite_edit import apply_edits, edit_target, parse_edits
from searchsmith.models.text import exact_match

PAIRS = [
    # (history, query, human rewrite)
    (["What is throat cancer?"], "Is it treatable?", "Is throat cancer treatable?"),
    (["Tell me about the Neverending Story film."], "What are the main themes?",
     "What are the main themes of the Neverending Story film?"),
    (["Tell me about lung cancer."], "What are its symptoms?", "What are lung cancer's symptoms?"),
    (["Why is the drinking age 21?"], "What causes it?", "What causes it?"),
    (["Tell me about Netflix."], "Describe the 321 method.", "Describe the 321 method of cooking pork ribs"),
    (["Tell me about DNA-based testing."], "How could Co-Extra improve it?",
     "How could Co-Extra improve DNA-based testing?"),
    (["Vegan diets"], "What about its health effects versus being vegetarian?",
     "What about the health effects of being vegan versus being vegetarian?"),
    (["the cat and the hat"], "is the hat the same as the cap?", "is the hat the same as the red cap?"),
]


@pytest.mark.parametrize("history,query,rewrite", PAIRS)
def test_edit_target_applies_back_to_the_rewrite(history, query, rewrite):
    edit = edit_target(query, rewrite)
    assert exact_match(apply_edits(query, edit, history), rewrite) == 1.0, edit
    if query == rewrite:
        assert edit == ""


def test_casing_and_spacing_come_from_the_conversation():
    history = ["Tell me about the Neverending Story film."]
    out = apply_edits("What is it about?", "it = > the neverending story film", history)
    assert out == "What is the Neverending Story film about?"
    assert apply_edits("Is it treatable?", "it => dna - based testing", []) == "Is dna-based testing treatable?"
    assert apply_edits("Describe it.", "it => netflix ' s growth", ["Netflix"]) == "Describe Netflix's growth."


@pytest.mark.parametrize("edit", [
    "", "   ", "=>", "= >", "nothing here", "mars => ; => venus", "it", ";;;;", "it => ", "[SEP] => x",
    "it => a ; it => b ; it => c", "# 1 => ( ) ; ) => (", "x" * 5000,
])
def test_any_generation_applies_without_raising(edit):
    out = apply_edits("How far is it?", edit, ["Tell me about Mars"])
    assert isinstance(out, str) and out.strip()


def test_unknown_old_span_is_skipped_and_deletion_works():
    assert apply_edits("How far is it?", "venus => mars", []) == "How far is it?"
    assert apply_edits("How far is it really?", "really =>", []) == "How far is it?"
    assert parse_edits("a b => c ; junk ; d =>") == [(["a", "b"], "c"), (["d"], "")]


def test_edit_target_fuzz_round_trips():
    rng = random.Random(0)
    words = "the a it of cat hat mars far how is what red big".split()
    for _ in range(300):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        r = " ".join(rng.choice(words) for _ in range(rng.randint(1, 10)))
        assert exact_match(apply_edits(q, edit_target(q, r)), r) == 1.0, (q, r, edit_target(q, r))


@pytest.fixture(scope="module")
def tokenizer():
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("default"))


def test_edit_constraint_walks_only_to_applicable_edits(tokenizer):
    cons = EditConstraint(tokenizer, output_vocab=tokenizer.convert_tokens_to_ids(["of", "the"]))
    source = tokenizer("rewrite: tell me about esophageal cancer || is it the same as throat cancer")["input_ids"]
    state = cons.state_for(source)
    query_words = set(tokenizer.convert_ids_to_tokens(state[0]))
    assert "is" in query_words and "esophageal" not in query_words  # old: the query only
    assert cons.eos in cons.allowed(state, [])  # an empty edit: keep the query
    assert not any(tokenizer.convert_ids_to_tokens(t).startswith("##") for t in cons.allowed(state, []))
    rng = random.Random(0)
    applied = 0
    for _ in range(200):
        toks: list[int] = []
        while len(toks) < 30:
            allowed = cons.allowed(state, toks)
            assert allowed
            tok = rng.choice(allowed)
            if tok == cons.eos:
                break
            toks.append(tok)
            prev = toks[-2] if len(toks) > 1 else None
            assert not (tok == prev and tok not in cons.marks)  # no token twice in a row
        text = tokenizer.decode(toks)
        query = "is it the same as throat cancer"
        for old, _new in parse_edits(text):
            assert " ".join(old) in " ".join(tokenizer.tokenize(query)).replace(" ##", ""), text
        out = apply_edits(query, text, ["tell me about esophageal cancer"])
        applied += out != query
    assert applied > 50  # walks do reach edits that change the query


# ----------------------------------------------------------------------------- the rewrite tagger


def _tokens(tokenizer, source):
    enc = tokenizer(source, return_offsets_mapping=True)
    return [tuple(o) for o in enc["offset_mapping"]]


def test_tag_labels_mark_the_referent_and_the_reference(tokenizer):
    from searchsmith.models.rewrite_edit import tag_labels

    source = "rewrite: tell me about throat cancer || is it treatable?"
    offs = _tokens(tokenizer, source)
    labels = tag_labels(source, offs, "Is it treatable?", "Is throat cancer treatable?")
    words = {source[a:b]: y for (a, b), y in zip(offs, labels, strict=True) if a != b}
    assert words["throat"] == 1 and words["cancer"] == 1 and words["it"] == 2
    assert words["tell"] == 0 and words["about"] == 0 and words["is"] == 0
    assert set(tag_labels(source, offs, "Is it treatable?", "Is it treatable?")) == {0}  # nothing to do



def test_tag_labels_tag_every_piece_of_a_split_word(tokenizer):
    """A name the tokenizer splits (Varokpel -> var ##ok ##pel) is a referent like any word:
    each of its pieces is REF, and a split query word it drops is TGT piece by piece (the
    labels used to compare a piece's text with the rewrite's words, so names were never REF)."""
    from searchsmith.models.rewrite_edit import tag_labels

    source = "rewrite: I want to learn about Varokpel. || Who founded it?"
    offs = _tokens(tokenizer, source)
    labels = tag_labels(source, offs, "Who founded it?", "Who founded Varokpel?")
    lo = source.index("Varokpel")
    name = [y for (a, b), y in zip(offs, labels, strict=True) if a != b and lo <= a and b <= lo + len("Varokpel")]
    assert len(name) > 1 and name == [1] * len(name)  # split, and every piece tagged
    words = {source[a:b]: y for (a, b), y in zip(offs, labels, strict=True) if a != b}
    assert words["it"] == 2 and words["learn"] == 0 and words["Who"] == 0
    source = "rewrite: tell me about throat cancer || is it untreatable?"
    offs = _tokens(tokenizer, source)
    labels = tag_labels(source, offs, "Is it untreatable?", "Is throat cancer treatable by surgery?")
    tail = [y for (a, b), y in zip(offs, labels, strict=True) if a >= source.index("untreatable") and b <= source.index("?")]
    assert len(tail) > 1 and set(tail) == {2}

def test_tag_rewrite_replaces_the_reference_with_the_referent(tokenizer):
    from searchsmith.models.rewrite_edit import tag_rewrite

    source = "rewrite: Tell me about Throat Cancer. || Is it treatable?"
    offs = _tokens(tokenizer, source)

    def probs(ref=(), tgt=(), level=0.9):
        out = []
        for a, b in offs:
            w = source[a:b]
            p = [1.0, 0.0, 0.0]
            if w in ref:
                p = [1 - level, level, 0.0]
            if w in tgt and a > source.index("||"):
                p = [1 - level, 0.0, level]
            out.append(p)
        return out

    q, hist = "Is it treatable?", ["Tell me about Throat Cancer."]
    assert tag_rewrite(q, hist, source, offs, probs(("Throat", "Cancer", "."), ("it",)), 0.3, 0.15) \
        == "Is Throat Cancer treatable?"  # casing from the conversation, no trailing "."
    assert tag_rewrite(q, hist, source, offs, probs(("Cancer",)), 0.3, 0.15) == "Is it treatable Cancer?"
    assert tag_rewrite(q, hist, source, offs, probs(("Cancer",), level=0.2), 0.3, 0.15) == q  # unsure
    assert tag_rewrite(q, [], source, offs, probs(), 0.3, 0.15) == q


def test_tag_rewrite_refuses_rewrites_that_add_nothing_or_drop_the_question(tokenizer):
    """A referent the query already holds is no rewrite; an edit whose TGT run swallows more
    than ``max_drop`` of the query's words is refused (one word may always go)."""
    from searchsmith.models.rewrite_edit import tag_rewrite

    def tagging(source, ref, tgt):  # REF on the history's words in ref (every piece), TGT on the query's in tgt
        import re

        offs, cut = _tokens(tokenizer, source), source.index("||")
        word = {m.start(): m.group(0) for m in re.finditer(r"\w+", source)}
        starts = sorted(word)

        def word_of(a):
            return word[max(x for x in starts if x <= a)]
        return offs, [[0.1, 0.9, 0.0] if a != b and a < cut and word_of(a) in ref else
                      [0.1, 0.0, 0.9] if a != b and a > cut and word_of(a) in tgt else [1.0, 0.0, 0.0]
                      for a, b in offs]

    source = "rewrite: Tell me about Chattanooga. || What is there to do in downtown Chattanooga?"
    offs, p = tagging(source, ("Chattanooga",), ())
    q = "What is there to do in downtown Chattanooga?"
    assert tag_rewrite(q, ["Tell me about Chattanooga."], source, offs, p, 0.3, 0.15) == q  # not "... Chattanooga Chattanooga?"

    source = "rewrite: Tell me about the Watergate scandal. || What happened next?"
    hist, q = ["Tell me about the Watergate scandal."], "What happened next?"
    offs, p = tagging(source, ("Watergate", "scandal"), ("What", "happened", "next"))
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15, max_drop=1.0) == "Watergate scandal?"  # the question gone
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15, max_drop=0.34) == q
    offs, p = tagging(source, ("Watergate", "scandal"), ("next",))  # one word may always go
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15, max_drop=0.01) == "What happened Watergate scandal?"


def test_tag_rewrite_replaces_only_references_when_asked(tokenizer):
    """``references_only``: the query run an edit replaces must hold a word that refers back;
    "knowing multiple languages" -> "knowing multiple Norse" is refused, "it" is replaced."""
    from searchsmith.models.rewrite_edit import tag_rewrite

    def probs(source, offs, ref, tgt):
        cut = source.index("||")
        return [[0.1, 0.9, 0.0] if a != b and a < cut and source[a:b] in ref else
                [0.1, 0.0, 0.9] if a != b and a > cut and source[a:b] in tgt else [1.0, 0.0, 0.0]
                for a, b in offs]

    hist = ["How is Norwegian related to Old Norse?"]
    q = "Are there advantages of knowing multiple languages?"
    source = f"rewrite: {hist[0]} || {q}"
    offs = _tokens(tokenizer, source)
    p = probs(source, offs, ("Norse",), ("languages",))
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15) == "Are there advantages of knowing multiple Norse?"
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15, references_only=True) == q
    q = "Is it hard to learn?"
    source = f"rewrite: {hist[0]} || {q}"
    offs = _tokens(tokenizer, source)
    p = probs(source, offs, ("Norwegian",), ("it",))
    assert tag_rewrite(q, hist, source, offs, p, 0.3, 0.15, references_only=True) == "Is Norwegian hard to learn?"


def test_tag_rewrite_takes_whole_compounds(tokenizer):
    """A referent run that ends inside a compound written without spaces ("Spider-Man",
    "lumen/evict.py") grows to the whole compound (it gave "... Man?"); a possessive's "'s"
    and a sentence's full stop are not parts of it."""
    from searchsmith.models.rewrite_edit import tag_rewrite

    def probs(source, offs, ref, tgt=(), level=0.9):
        cut = source.index("||")
        return [[1 - level, level, 0.0] if a != b and a < cut and source[a:b] in ref else
                [1 - level, 0.0, level] if a != b and a > cut and source[a:b] in tgt else [1.0, 0.0, 0.0]
                for a, b in offs]

    source = "rewrite: Tell me about Spider-Man. || Is he strong?"
    offs = _tokens(tokenizer, source)
    hist, q = ["Tell me about Spider-Man."], "Is he strong?"
    assert tag_rewrite(q, hist, source, offs, probs(source, offs, ("Man",), ("he",)), 0.3, 0.15) == "Is Spider-Man strong?"
    assert tag_rewrite(q, hist, source, offs, probs(source, offs, ("Spider",), ("he",)), 0.3, 0.15) == "Is Spider-Man strong?"
    source = "rewrite: Where is lumen/evict.py kept? || Who wrote it?"
    offs = _tokens(tokenizer, source)
    assert tag_rewrite("Who wrote it?", ["Where is lumen/evict.py kept?"], source, offs,
                       probs(source, offs, ("ev",), ("it",)), 0.3, 0.15) == "Who wrote lumen/evict.py?"
    source = "rewrite: Tell me about Norway's fjords. || Are they deep?"
    offs = _tokens(tokenizer, source)
    hist, q = ["Tell me about Norway's fjords."], "Are they deep?"
    assert tag_rewrite(q, hist, source, offs, probs(source, offs, ("Norway",), ("they",)), 0.3, 0.15) == "Are Norway deep?"
    assert tag_rewrite(q, hist, source, offs, probs(source, offs, ("fjord",), ("they",)), 0.3, 0.15) \
        == "Are fjords deep?"  # not "fjords." with the full stop


def _ref_probs(source, offs, scores):
    """(tokens, 3) probabilities with REF = ``scores`` of the word a token lies in (the words
    found in ``source`` as whole words), else 0."""
    import re

    spans = [(m.start(), m.end(), p) for w, p in scores.items() for m in re.finditer(rf"\b{re.escape(w)}\b", source)]
    out = []
    for a, b in offs:
        p = max((q for x, y, q in spans if a != b and x <= a and b <= y), default=0.0)
        out.append([1 - p, p, 0.0])
    return out


def test_tag_terms_selects_history_words_best_first(tokenizer):
    """QuReTeC-style term selection: whole history words at the threshold or above, best
    first, without function words, words of the excluded texts, or anything from the query."""
    from searchsmith.models.rewrite_edit import tag_terms

    source = "rewrite: Tell me about the lumen/evict.py module || and the Throat cancer? || Is it treatable?"
    offs = _tokens(tokenizer, source)
    scores = {"Throat": 0.6, "cancer": 0.9, "the": 0.95, "evict": 0.4, "lumen": 0.1, "Tell": 0.05,
              "Is": 0.99, "treatable": 0.99}
    probs = _ref_probs(source, offs, scores)
    assert tag_terms(source, offs, probs, 0.3) == ["cancer", "Throat", "lumen/evict.py"]
    assert tag_terms(source, offs, probs, 0.3, max_terms=2) == ["cancer", "Throat"]
    assert tag_terms(source, offs, probs, 0.5, exclude=["Is throat cancer treatable?"]) == []
    assert tag_terms(source, offs, probs, 0.99) == []  # the query's own words are never terms
    assert tag_terms(source, offs, _ref_probs(source, offs, {}), 0.1) == []


def test_head_rewrite_appends_terms_by_the_heads_expansion(tokenizer):
    from searchsmith.models.rewrite_edit import head_rewrite, with_terms
    from searchsmith.serving.rewrite import appended_terms

    source = "rewrite: Tell me about Throat Cancer and its Treatment. || Is it treatable?"
    offs = _tokens(tokenizer, source)
    probs = _ref_probs(source, offs, {"Throat": 0.9, "Cancer": 0.9, "Treatment": 0.2})
    for a, b in offs:  # "it" is the reference the edit replaces
        if source[a:b] == "it" and a > source.index("||"):
            probs[offs.index((a, b))] = [0.1, 0.0, 0.9]
    q, hist = "Is it treatable?", ["Tell me about Throat Cancer and its Treatment."]
    head = {"threshold": 0.3, "extend": 0.15, "term_threshold": 0.15, "max_terms": 8}
    assert head_rewrite(q, hist, source, offs, probs, {**head, "expand": "none"}) == "Is Throat Cancer treatable?"
    assert head_rewrite(q, hist, source, offs, probs, head) == "Is Throat Cancer treatable?"  # no key: none
    terms = head_rewrite(q, hist, source, offs, probs, {**head, "expand": "terms"})
    assert terms == "Is it treatable? (Throat Cancer Treatment)"
    fused = head_rewrite(q, hist, source, offs, probs, {**head, "expand": "fused"})
    assert fused == "Is Throat Cancer treatable? (Treatment)"  # only what the edit does not hold
    # the decomposition stage splits either form into the question and its terms
    assert appended_terms(q, terms) == (q, " (Throat Cancer Treatment)")
    assert appended_terms(q, fused) == ("Is Throat Cancer treatable?", " (Treatment)")
    assert with_terms("q", []) == "q"
