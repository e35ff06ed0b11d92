"""Constrained decoding: every sequence the graph grammar admits parses as a valid graph."""

from __future__ import annotations

import random

import pytest
from searchsmith.models.constrained import CopyConstraint, GraphGrammar, learn_output_vocab
from searchsmith.models.qdg import parse_linear


@pytest.fixture(scope="module")
def tokenizer():
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("default"))


def _walk(grammar, state, rng, eos_bias, limit=80):
    out = []
    for _ in range(limit):
        allowed = grammar.allowed(state, out)
        assert allowed, f"nothing allowed after {out}"
        if grammar.eos in allowed and rng.random() < eos_bias:
            return out, True
        tok = rng.choice([t for t in allowed if t != grammar.eos] or allowed)
        if tok == grammar.eos:
            return out, True
        out.append(tok)
    return out, False


def test_every_finished_walk_is_a_valid_graph(tokenizer):
    grammar = GraphGrammar(tokenizer, max_nodes=5, output_vocab=learn_output_vocab(
        tokenizer, ["chain || 1 : return the number of # 1"], ["decompose: cars"], 10))
    question = "which city hosted the olympics the year the author of dune was born"
    src = tokenizer("decompose: " + question)["input_ids"]
    state = grammar.state_for(src)
    rng = random.Random(0)
    finished = {"terminal": 0, "chain": 0, "split": 0}
    for i in range(400):
        toks, done = _walk(grammar, state, rng, eos_bias=0.3 + 0.5 * (i % 2))
        if not done:
            continue
        graph, valid = parse_linear(tokenizer.decode(toks), question, max_nodes=5)
        assert valid, tokenizer.decode(toks)
        finished[graph.type] += 1
    assert all(v > 5 for v in finished.values()), finished


def test_text_comes_from_the_question_or_the_output_vocab(tokenizer):
    vocab = tokenizer.convert_tokens_to_ids(["return"])
    grammar = GraphGrammar(tokenizer, max_nodes=3, output_vocab=vocab)
    state = grammar.state_for(tokenizer("decompose: who wrote dune")["input_ids"])
    words = set(tokenizer.convert_ids_to_tokens(state.vocab))
    assert words == {"who", "wrote", "dune", "return"}
    # first token: a type word; after "terminal || 1 : who", "||" is not allowed (one node)
    first = grammar.allowed(state, [])
    assert sorted(tokenizer.convert_ids_to_tokens(first)) == ["chain", "split", "terminal"]
    prefix = tokenizer("terminal || 1 : who", add_special_tokens=False)["input_ids"]
    nxt = grammar.allowed(state, prefix)
    assert grammar.bar not in nxt and grammar.eos in nxt
    # in a chain, node 2 cannot end before it refers to node 1
    prefix = tokenizer("chain || 1 : who wrote dune || 2 : who", add_special_tokens=False)["input_ids"]
    nxt = grammar.allowed(state, prefix)
    assert grammar.eos not in nxt and grammar.bar not in nxt and grammar.hash in nxt
    # "#" is followed only by ids of earlier nodes
    assert grammar.allowed(state, prefix + [grammar.hash]) == [grammar.digit[0]]


def test_copy_constraint_admits_conversation_tokens_only(tokenizer):
    cc = CopyConstraint(tokenizer, output_vocab=tokenizer.convert_tokens_to_ids(["the"]))
    state = cc.state_for(tokenizer("rewrite: tell me about mars || how far is it")["input_ids"])
    words = set(tokenizer.convert_ids_to_tokens(state))
    assert {"mars", "far", "the", "[SEP]"} <= words
    assert "rewrite" not in words and "|" not in words and "venus" not in words
    assert cc.eos not in cc.allowed(state, [])  # no empty rewrite


def test_grammar_rejects_a_tokenizer_without_single_token_separators(tokenizer):
    with pytest.raises(ValueError, match="max_nodes"):
        GraphGrammar(tokenizer, max_nodes=12)


def test_decomposer_generates_valid_graphs_under_the_grammar():
    from searchsmith.models.decomposer import Decomposer, build_tiny

    model, tok = build_tiny()
    dec = Decomposer(model, tok, max_target_tokens=40, constrained=True)
    out = dec.decompose_batch(["who wrote dune", "when was the eiffel tower built"])
    for graph, _valid, raw in out:
        assert raw.split()[0] in ("terminal", "chain", "split")
        assert graph.nodes
    assert dec.rewrite([{"role": "user", "content": "tell me about mars"}], "how far is it")


@pytest.mark.parametrize("budget", [12, 20, 40])
def test_a_rambling_model_still_closes_a_valid_graph_within_the_budget(tokenizer, budget):
    """A walk that never ends by itself (eos only when forced) is steered to a well-formed
    ending inside ``max_tokens``: what a barely trained model needs."""
    grammar = GraphGrammar(tokenizer, max_nodes=4, max_tokens=budget)
    question = "who directed the film that won the award the year the tower opened"
    state = grammar.state_for(tokenizer("decompose: " + question)["input_ids"])
    rng = random.Random(budget)
    kinds = set()
    for _ in range(120):
        toks = []
        while True:
            allowed = grammar.allowed(state, toks)
            choice = [t for t in allowed if t != grammar.eos]
            if not choice:  # only the end is left
                break
            toks.append(rng.choice(choice))
            assert len(toks) < budget, tokenizer.decode(toks)
        graph, valid = parse_linear(tokenizer.decode(toks), question, max_nodes=4)
        assert valid, tokenizer.decode(toks)
        kinds.add(graph.type)
    assert kinds == ({"terminal", "split"} if budget < 13 else {"terminal", "chain", "split"})


def test_a_forced_graph_type_is_the_only_first_token(tokenizer):
    grammar = GraphGrammar(tokenizer, max_nodes=3, max_tokens=40)
    src = tokenizer("decompose: who wrote dune")["input_ids"]
    for kind in ("terminal", "chain", "split"):
        first = grammar.allowed(grammar.state_for(src, kind), [])
        assert tokenizer.convert_ids_to_tokens(first) == [kind]
    # one node allowed: only terminal can be forced (a chain could never close)
    one = GraphGrammar(tokenizer, max_nodes=1)
    assert tokenizer.convert_ids_to_tokens(one.allowed(one.state_for(src, "chain"), [])) == \
        ["terminal", "chain", "split"]
    with pytest.raises(ValueError, match="graph type 'tree'"):
        grammar.state_for(src, "tree")


def test_type_head_fits_and_rejects_bad_input():
    from searchsmith.models.decomposer import Decomposer, build_tiny, check_type_head
    from searchsmith.models.errors import BundleError, ValidationError

    model, tok = build_tiny()
    dec = Decomposer(model, tok, max_target_tokens=40, constrained=True)
    qs = ["who wrote dune", "who wrote emma", "which is older, mars or venus?",
          "which is larger, paris or rome?"]
    head = dec.fit_type_head(qs, ["terminal", "terminal", "split", "split"], l2=1e-4)
    assert head["weight"].shape == (3, 32)
    graphs = dec.decompose_batch(qs)
    assert [g.type for g, _, _ in graphs] == ["terminal", "terminal", "split", "split"]  # fits its data
    with pytest.raises(ValidationError, match="unknown graph types"):
        dec.fit_type_head(qs, ["terminal", "tree", "split", "split"])
    with pytest.raises(ValidationError, match="as many types as questions"):
        dec.fit_type_head(qs, ["terminal"])
    with pytest.raises(BundleError, match="type_head"):
        check_type_head({"types": ["chain"], "weight": [[1.0, 2.0]], "bias": [0.0, 1.0]})
