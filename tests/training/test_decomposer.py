"""Decomposer: data loaders, recipe config, metrics, the tiny recipe (train, reload, resume,
eval) and a Decomposer that never raises on nonsense generations."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from searchsmith.models.decomposer import (
    Decomposer,
    build_tiny,
    fitted_rewrite_source,
    last_reply,
    rewrite_source,
)
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.qdg import QDG, QDGNode, parse_linear, terminal, validate
from searchsmith.training.config import load_recipe_config
from searchsmith.training.decompose_data import (
    conversation,
    export_eval_sets,
    load_break,
    load_hotpotqa,
    load_musique,
    load_real,
    load_strategyqa,
    load_trec_cast,
    read_decomposition_eval,
    split_examples,
    synthetic,
    to_rewrite_record,
)
from searchsmith.training.decomposer import (
    decompose_metrics,
    node_f1,
    rewrite_metrics,
)
from searchsmith.training.evaluate import eval_decompose, eval_rewrite

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "decomposer" / "tiny" / "bert-tiny_bert2bert.yaml"
Q = "When was the founder of Lumen born?"

# ----------------------------------------------------------------------------- loaders

BREAK_ROW = {"question_id": "HOTPOT_dev_x", "source_dataset": "HOTPOT",
             "question_text": "Which is older, Lumen or Varok?",
             "steps": ["when was Lumen founded", "when was Varok founded",
                       "which is older of #1 and #2"],
             "step_dependencies": [[], [], [1, 2]]}
MUSIQUE_ROW = {"id": "2hop__1_2", "question": "Who is the sibling of the actress in Lumen?",
               "question_decomposition": [{"id": 1, "question": "who acted in Lumen"},
                                          {"id": 2, "question": "#1 >> sibling"}]}
SQA_ROW = {"qid": "q1", "question": "Is Lumen older than Varok?",
           "decomposition": ["How old is Lumen?", "How old is Varok?", "Is #1 more than #2?"]}
HOTPOT_ROWS = [{"_id": "a", "question": "Who founded the band Lumen?", "qdmr_high_level": {
    "steps": ["the band Lumen", "who founded #1"], "step_dependencies": [[], [1]]}},
    {"_id": "b", "question": "No QDMR here", "qdmr_high_level": None}]
CAST_ROWS = [
    {"id": "c_1_1", "year": 2019, "topic_id": "1", "raw_utterance": "What is throat cancer?",
     "manual_rewritten_utterance": "What is throat cancer?", "history_utterances": []},
    {"id": "c_1_2", "year": 2019, "topic_id": "1", "raw_utterance": "Is it treatable?",
     "manual_rewritten_utterance": "Is throat cancer treatable?",
     "history_utterances": ["What is throat cancer?"]},
]


def test_break_loader_maps_steps_to_graph() -> None:
    (ex,) = load_break([BREAK_ROW])
    assert ex["task"] == "decompose"
    assert ex["source"] == "decompose: Which is older, Lumen or Varok?"
    assert ex["target"] == ("split || 1 : when was Lumen founded || 2 : when was Varok founded "
                            "|| 3 : which is older of # 1 and # 2")
    assert ex["graph"]["nodes"][2]["depends_on"] == ["1", "2"]


def test_musique_strategyqa_hotpot_loaders() -> None:
    (m,) = load_musique([MUSIQUE_ROW])
    assert m["graph"]["type"] == "chain" and m["graph"]["nodes"][1]["text"] == "#1 >> sibling"
    (s,) = load_strategyqa([SQA_ROW])
    assert s["graph"]["type"] == "split"
    hot = load_hotpotqa(HOTPOT_ROWS)
    assert len(hot) == 1 and hot[0]["target"] == "chain || 1 : the band Lumen || 2 : who founded # 1"


def test_trec_cast_loader_formats_history() -> None:
    first, second = load_trec_cast(CAST_ROWS)
    assert first["source"] == "rewrite: What is throat cancer?"
    assert second["source"] == "rewrite: What is throat cancer? || Is it treatable?"
    assert second["target"] == "Is throat cancer treatable?"
    assert first["group"] == second["group"] == "cast:2019_1"


CAST_2022 = [
    {"id": "c_7_1", "year": 2022, "topic_id": "7", "raw_utterance": "Tell me about the types of rocket engines.",
     "manual_rewritten_utterance": "Tell me about the types of rocket engines.", "history_utterances": [],
     "history_turn_ids": [], "canonical_response": "There are  pressure-fed and\nopen cycle engines."},
    {"id": "c_7_2", "year": 2022, "topic_id": "7", "raw_utterance": "Are the last two the same?",
     "manual_rewritten_utterance": "Are pressure-fed and open cycle engines the same?",
     "history_utterances": ["Tell me about the types of rocket engines."], "history_turn_ids": ["c_7_1"],
     "canonical_response": None},
    {"id": "c_7_3", "year": 2022, "topic_id": "7", "raw_utterance": "Why?", "manual_rewritten_utterance": "Why?",
     "history_utterances": ["Tell me about the types of rocket engines.", "Are the last two the same?"],
     "history_turn_ids": ["c_7_1", "c_7_2"], "canonical_response": "x"},
]


def test_trec_cast_loader_attaches_the_answer_to_the_last_turn() -> None:
    first, second, third = load_trec_cast(CAST_2022)
    # the answer to turn 1 is turn 2's reply (whitespace collapsed) and turn 1's own passage
    assert "reply" not in first and first["passage"] == "There are pressure-fed and open cycle engines."
    assert second["reply"] == "There are pressure-fed and open cycle engines."
    assert "reply" not in third  # turn 2 has no answer of its own
    assert conversation(second) == [
        {"role": "user", "content": "Tell me about the types of rocket engines."},
        {"role": "assistant", "content": "There are pressure-fed and open cycle engines."}]
    assert to_rewrite_record(second)["history"] == conversation(second)  # eval rewrite sees the answer too
    assert conversation(third) == [{"role": "user", "content": t} for t in third["history"]]
    assert conversation({"history": [], "reply": "orphan"}) == []  # no user turn: no conversation


def test_rewrite_source_carries_the_start_of_the_last_answer_before_the_query() -> None:
    turns = ["t1", "t2"]
    assert rewrite_source(turns, "q", 3, "a b c d", 0) == "rewrite: t1 || t2 || q"
    assert rewrite_source(turns, "q", 3, "a b  c d", 2) == "rewrite: t1 || t2 || a b || q"
    assert rewrite_source(turns, "q", 3, "a b", 9) == "rewrite: t1 || t2 || a b || q"
    assert rewrite_source([], "q", 3, "a b", 9) == "rewrite: q"  # an answer alone is no conversation
    assert rewrite_source(turns, "q", 3, "  ", 9) == "rewrite: t1 || t2 || q"


def test_fitted_rewrite_source_shortens_the_answer_never_the_query() -> None:
    def count(text: str) -> int:  # one token per word, two special tokens
        return len(text.split()) + 2

    query = "what makes them hard to build"
    full = fitted_rewrite_source(count, ["t1"], query, 3, "w " * 50, 40, 1000)
    assert full == rewrite_source(["t1"], query, 3, "w " * 50, 40)
    fitted = fitted_rewrite_source(count, ["t1"], query, 3, "w " * 50, 40, 20)
    assert fitted.endswith("|| " + query) and count(fitted) <= 20 and "|| w" in fitted
    # room for the query and one turn: the answer goes, then the oldest turns, the query stays whole
    assert fitted_rewrite_source(count, ["t1"], query, 3, "w " * 50, 40, 11) == rewrite_source(["t1"], query, 3)
    long_turns = ["first turn words here", "t2", "t3 and more", "t4 last"]
    assert fitted_rewrite_source(count, long_turns, query, 3, "", 0, 100) == rewrite_source(long_turns, query, 3)
    assert fitted_rewrite_source(count, long_turns, query, 3, "", 0, 17) == rewrite_source(["t3 and more", "t4 last"], query, 3)
    assert fitted_rewrite_source(count, long_turns, query, 3, "", 0, 12) == rewrite_source(["t4 last"], query, 3)
    # a long last turn loses its first words: its end is nearest the query
    long_last = ["t1", "one two three four five six seven eight"]
    fitted = fitted_rewrite_source(count, long_last, query, 3, "", 0, 14)
    assert fitted == rewrite_source(["five six seven eight"], query, 3) and count(fitted) == 14
    # a query longer than the window keeps one word of the last turn and is cut by the tokenizer
    assert fitted_rewrite_source(count, long_turns, query, 3, "w", 5, 4) == rewrite_source(["last"], query, 3)


def test_last_reply_is_the_last_turn_when_the_system_said_it() -> None:
    from searchsmith.serving.rewrite import Turn

    assert last_reply([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "b"
    assert last_reply([{"role": "assistant", "content": "b"}, {"role": "user", "content": "a"}]) == ""
    assert last_reply([Turn("user", "a"), Turn("assistant", "b")]) == "b"
    assert last_reply(["a", "b"]) == "" and last_reply([]) == ""
    assert last_reply([{"role": "assistant", "content": None}]) == ""


def test_rewrite_source_keeps_first_and_last_turns() -> None:
    turns = ["t1", "t2", "t3", "t4", "t5"]
    assert rewrite_source(turns, "q", max_history_turns=3) == "rewrite: t1 || t4 || t5 || q"
    assert rewrite_source(turns, "q", max_history_turns=0) == "rewrite: q"


def test_split_is_seeded_by_group_and_disjoint() -> None:
    ex = synthetic(200, 100, seed=3)
    train, held = split_examples(ex, seed=0, heldout_ratio=0.2)
    assert {e["group"] for e in train}.isdisjoint({e["group"] for e in held})
    assert 0.1 < len(held) / (len(train) + len(held)) < 0.3
    again, held2 = split_examples(ex, seed=0, heldout_ratio=0.2)
    assert [e["source"] for e in held2] == [e["source"] for e in held]


def test_split_holds_out_more_rewrites_at_their_own_ratio() -> None:
    """data.rewrite_heldout_ratio: rewrites held out at their own share, the decompositions at
    heldout_ratio, and every conversation held out at the smaller share is still held out."""
    ex = synthetic(300, 300, seed=3)
    _, held = split_examples(ex, seed=0, heldout_ratio=0.1)
    _, more = split_examples(ex, seed=0, heldout_ratio=0.1, task_ratios={"rewrite": 0.5})
    rw, rw_more = ([e["group"] for e in h if e["task"] == "rewrite"] for h in (held, more))
    assert sum(e["task"] == "rewrite" for e in more) > 2 * sum(e["task"] == "rewrite" for e in held)
    assert set(rw) <= set(rw_more)
    assert [e["source"] for e in held if e["task"] == "decompose"] == \
        [e["source"] for e in more if e["task"] == "decompose"]
    with pytest.raises(ConfigError, match=r"data.rewrite_heldout_ratio must be in \(0, 1\)"):
        load_recipe_config(TINY, ["data.rewrite_heldout_ratio=1.5"])
    assert load_recipe_config(TINY, []).data.rewrite_heldout_ratio is None


def test_synthetic_covers_every_type_and_both_tasks() -> None:
    ex = synthetic(60, 20, seed=0)
    types = {e["graph"]["type"] for e in ex if e["task"] == "decompose"}
    assert types == {"terminal", "chain", "split"}
    assert sum(e["task"] == "rewrite" for e in ex) == 20
    for e in ex:
        if e["task"] == "decompose":
            assert parse_linear(e["target"], e["query"]) == (QDG.from_json(e["graph"]), True)


def test_export_writes_design_formats(tmp_path: Path) -> None:
    counts = export_eval_sets(load_break([BREAK_ROW]) + load_trec_cast(CAST_ROWS), tmp_path)
    assert counts == {"decompose.jsonl": 1, "rewrite.jsonl": 2}
    rec = json.loads((tmp_path / "decompose.jsonl").read_text())
    assert rec["query"] == BREAK_ROW["question_text"] and rec["type"] == "split"
    rw = [json.loads(x) for x in (tmp_path / "rewrite.jsonl").read_text().splitlines()]
    assert rw[1] == {"history": [{"role": "user", "content": "What is throat cancer?"}],
                     "query": "Is it treatable?", "rewrite": "Is throat cancer treatable?"}
    assert len(read_decomposition_eval(tmp_path / "decompose.jsonl")) == 1


def test_missing_data_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.sources break_qdmr: file .* does not exist"):
        load_real("break_qdmr", tmp_path)


def test_unknown_source_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown source 'brake'"):
        load_real("brake", tmp_path)


def test_bad_eval_record_names_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "d.jsonl"
    bad.write_text(json.dumps({"query": "q", "type": "chain", "nodes": [
        {"id": "1", "text": "a", "depends_on": ["2"]}, {"id": "2", "text": "b", "depends_on": ["1"]}]}) + "\n")
    with pytest.raises(ConfigError, match=r"d.jsonl:1: qdg: .*cycle"):
        read_decomposition_eval(bad)


@pytest.mark.shared_data
def test_real_loaders_on_shared_data(shared_data: Path) -> None:
    counts = {name: load_real(name, shared_data) for name in
              ("break_qdmr", "musique", "strategyqa", "hotpotqa", "trec_cast")}
    assert len(counts["break_qdmr"]) == 2445 and len(counts["trec_cast"]) == 680
    for name, exs in counts.items():
        assert exs, name
        for e in exs:
            if e["task"] == "decompose":
                assert validate(QDG.from_json(e["graph"])) == []


# ----------------------------------------------------------------------------- config, metrics


def test_recipe_config_rejects_unknown_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.sources: unknown \['wiki'\]"):
        load_recipe_config(TINY, ["data.sources=[wiki]"])


def test_recipe_config_rejects_a_drop_cap_outside_a_share() -> None:
    for value in ("0", "1.5", "-0.2"):
        with pytest.raises(ConfigError, match=r"model.rewrite_max_drop must be in \(0, 1\]"):
            load_recipe_config(TINY, [f"model.rewrite_max_drop={value}"])
    assert load_recipe_config(TINY, ["model.rewrite_max_drop=1"]).model.rewrite_max_drop == 1.0


def test_recipe_config_rejects_string_lr() -> None:
    with pytest.raises(ConfigError, match="write 2.0e-5"):
        load_recipe_config(TINY, ["optim.lr='2e-5'"])


def test_metrics_values() -> None:
    gold = QDG("chain", (QDGNode("1", "who founded lumen"), QDGNode("2", "when was #1 born", ("1",))))
    half = QDG("terminal", (QDGNode("1", "who founded lumen"),))
    assert node_f1(gold, gold) == 1.0
    assert node_f1(half, gold) == 0.5
    m = decompose_metrics([(gold, True), (half, False)], [gold, gold])
    assert m["decompose_validity"] == 0.5 and m["decompose_type_acc"] == 0.5
    assert m["decompose_node_count_acc"] == 0.5 and m["decompose_node_f1"] == 0.75
    r = rewrite_metrics(["Is throat cancer treatable?", "Is it treatable?"],
                        ["is throat cancer treatable", "Is throat cancer treatable?"])
    assert r["rewrite_em"] == 0.5 and 0.5 < r["rewrite_f1"] < 1.0


# ----------------------------------------------------------------------------- Decomposer


class _Nonsense:
    """A tokenizer/model pair stand-in: generate returns whatever we planted."""


@pytest.fixture(scope="module")
def tiny() -> Decomposer:
    model, tok = build_tiny()
    return Decomposer(model, tok, max_source_tokens=32, max_target_tokens=12, batch_size=4)


@pytest.mark.parametrize("generated", [
    "", "[SEP] [SEP]", "{ \" type \" : \" chain", "chain || 1 : a # 1 || 2 : b # 7 # 2",
    "split", "|| || :: ## 9999999999999999999", "terminal || 1 :",
])
def test_decompose_never_raises_on_nonsense(tiny: Decomposer, monkeypatch: pytest.MonkeyPatch,
                                            generated: str) -> None:
    monkeypatch.setattr(tiny, "generate", lambda sources, *a, **k: [generated] * len(sources))
    graph = tiny.decompose(Q)
    assert validate(graph) == []
    assert graph.nodes  # terminal(Q) at worst


def test_decompose_falls_back_when_generation_fails(tiny: Decomposer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(sources: list[str], *a: object, **k: object) -> list[str]:
        raise RuntimeError("CUDA error")

    monkeypatch.setattr(tiny, "generate", boom)
    assert tiny.decompose(Q) == terminal(Q)
    assert tiny.rewrite([{"role": "user", "content": "Tell me about Lumen"}], "who founded it?") \
        == "who founded it?"


def test_rewrite_empty_generation_keeps_query(tiny: Decomposer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny, "generate", lambda sources, *a, **k: ["   "] * len(sources))
    assert tiny.rewrite([{"role": "user", "content": "Lumen"}], "who founded it?") == "who founded it?"


def test_random_tiny_model_output_is_still_a_graph(tiny: Decomposer) -> None:
    # Real generation from a random model: noise, never an exception.
    graphs = tiny.decompose_batch([Q, "x"])
    assert all(validate(g) == [] for g, _, _ in graphs)


def test_load_refuses_untrained(tiny: Decomposer, tmp_path: Path) -> None:
    tiny.save(tmp_path / "m", trained_steps=0)
    with pytest.raises(BundleError, match="never fine-tuned"):
        Decomposer.load(tmp_path / "m")


def test_load_refuses_folder_without_marker(tiny: Decomposer, tmp_path: Path) -> None:
    tiny.model.save_pretrained(tmp_path / "plain")
    with pytest.raises(BundleError, match="has no decomposer.json"):
        Decomposer.load(tmp_path / "plain")


def test_load_refuses_missing_weights(tiny: Decomposer, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    out = tiny.save(tmp_path / "m", trained_steps=5)
    weights = load_file(out / "model.safetensors")
    dropped = [k for k in weights if "crossattention" in k]
    save_file({k: v for k, v in weights.items() if k not in dropped}, out / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(BundleError, match="MISSING weights"):
        Decomposer.load(out)


# ----------------------------------------------------------------------------- the tiny recipe


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from searchsmith.training.registry import get_recipe

    run_dir = tmp_path_factory.mktemp("decomposer_tiny")
    cfg = load_recipe_config(TINY, ["optim.max_steps=2", "train.eval_every_steps=0",
                                    "train.save_every_steps=1", f"output_dir={run_dir}"])
    final = get_recipe("decomposer").fn(cfg, run_dir=run_dir)
    return run_dir, final


def test_tiny_recipe_trains_and_writes_metrics(tiny_run: tuple[Path, dict]) -> None:
    run_dir, final = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 2
    for key in ("decompose_validity", "decompose_type_acc", "decompose_node_count_acc",
                "decompose_node_f1", "rewrite_em", "rewrite_f1"):
        assert 0.0 <= metrics["final"][key] <= 1.0 and key in final
    for key in ("decompose_type_acc_majority", "rewrite_f1_copy_query"):
        assert 0.0 <= metrics["baselines"][key] <= 1.0
    # the paired test the decompose gate reads, against the baseline the recipe records
    test = {k.rsplit("_", 1)[1]: v for k, v in final.items() if k.startswith("decompose_node_f1_vs_terminal_")}
    assert set(test) == {"diff", "lo", "hi", "p", "n", "direction"}
    assert test["diff"] == pytest.approx(final["decompose_node_f1"]
                                         - metrics["baselines"]["decompose_node_f1_question_as_terminal"])
    assert test["n"] == final["decompose_items"] and test["direction"] in (-1, 0, 1)
    assert (run_dir / "training_curve.png").stat().st_size > 0


def test_tiny_recipe_reloads_and_decomposes(tiny_run: tuple[Path, dict],
                                            caplog: pytest.LogCaptureFixture) -> None:
    run_dir, _ = tiny_run
    dec = Decomposer.load(run_dir)
    meta = json.loads((run_dir / "model" / "decomposer.json").read_text())
    assert meta["trained_steps"] == 2 and meta["rewrite_target"] == "edit"
    assert dec.rewrite_target == "edit" and dec.type_head is not None  # both travel with the model
    assert meta["type_head"]["types"] == ["terminal", "chain", "split"]
    assert meta["rewrite_head"]["tags"] == ["O", "REF", "TGT"] and dec.rewrite_head is not None
    assert meta["rewrite_head"]["threshold"] == 0.3 and meta["rewrite_head"]["extend"] == 0.15
    assert meta["rewrite_head"]["max_drop"] == 0.25 and meta["rewrite_head"]["references_only"] is True  # the recipe's
    assert dec.rewrite_head["references_only"] is True
    with caplog.at_level("WARNING"):
        graphs = dec.decompose_batch([Q, "Which is taller, the Eiffel Tower or Big Ben?"])
    assert "generation failed" not in caplog.text  # the head path generates, not the fallback
    types = dec.predict_types(*_encoded(dec, [Q, "Which is taller, the Eiffel Tower or Big Ben?"]))
    assert [g.type for g, _, _ in graphs] == types  # the graph type is the head's choice
    assert validate(dec.decompose(Q)) == []
    assert isinstance(dec.rewrite([{"role": "user", "content": "Lumen"}], "who founded it?"), str)


def test_rewrite_head_needs_history_and_checks_its_shape(tiny: Decomposer) -> None:
    from searchsmith.models.decomposer import check_rewrite_head
    from searchsmith.models.errors import ValidationError

    with pytest.raises(ValidationError, match="no item has user history"):
        tiny.fit_rewrite_head([([], "who founded it?", "who founded Lumen?")])
    head = tiny.fit_rewrite_head([(["Tell me about Lumen"], "who founded it?", "who founded Lumen?"),
                                  (["Tell me about Quarry"], "where is it?", "where is Quarry?")], l2=1e-4)
    assert head["weight"].shape == (3, 32)
    out = tiny.rewrite([{"role": "user", "content": "Tell me about Lumen"}], "who founded it?")
    assert isinstance(out, str) and out
    with pytest.raises(BundleError, match="rewrite_head"):
        check_rewrite_head({"tags": ["O", "REF"], "weight": [[0.0]], "bias": [0.0], "threshold": 0.3,
                            "extend": 0.1})
    ok = {"tags": ["O", "REF", "TGT"], "weight": [[0.0]] * 3, "bias": [0.0] * 3, "threshold": 0.3, "extend": 0.1}
    assert check_rewrite_head(ok)["expand"] == "none"  # a head saved before term expansion
    assert check_rewrite_head({**ok, "expand": "fused", "term_threshold": 0.2})["max_terms"] == 8
    assert check_rewrite_head(ok)["max_drop"] == 1.0  # a head saved before the cap drops as it did
    assert check_rewrite_head({**ok, "max_drop": 0.25})["max_drop"] == 0.25
    assert check_rewrite_head(ok)["references_only"] is False  # saved before: any run may be replaced
    assert check_rewrite_head({**ok, "references_only": True})["references_only"] is True
    for bad, field in (({"expand": "all"}, "rewrite_head.expand"), ({"term_threshold": 1.5}, "term_threshold"),
                       ({"max_terms": 0}, "max_terms"), ({"max_drop": 0}, "max_drop"),
                       ({"max_drop": "all"}, "max_drop"), ({"max_drop": True}, "max_drop"),
                       ({"references_only": "yes"}, "references_only")):
        with pytest.raises(BundleError, match=field):
            check_rewrite_head({**ok, **bad})
    assert head["expand"] == "none"  # fit_rewrite_head without an expansion keeps the edit alone
    head = tiny.fit_rewrite_head([(["Tell me about Lumen"], "who founded it?", "who founded Lumen?"),
                                  (["Tell me about Quarry"], "where is it?", "where is Quarry?")], l2=1e-4,
                                 expansion={"expand": "terms", "term_threshold": 1e-9, "max_terms": 2})
    # the random tiny model scores every word low: at a negligible threshold the one content
    # word of the history is appended (the prefix, the separators and function words never are)
    out = tiny.rewrite([{"role": "user", "content": "Tell me about Lumen"}], "who founded it?")
    assert out == "who founded it? (Lumen)"
    tiny.rewrite_head = None


def _encoded(dec: Decomposer, questions: list[str]) -> tuple:
    import torch
    from searchsmith.models.decomposer import decompose_source

    enc = dec.tokenizer([decompose_source(q) for q in questions], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = dec.model.get_encoder()(input_ids=enc["input_ids"],
                                         attention_mask=enc["attention_mask"]).last_hidden_state
    return hidden.numpy(), enc["attention_mask"].numpy()


def test_tiny_recipe_resumes_and_refuses_changed_config(tiny_run: tuple[Path, dict]) -> None:
    from searchsmith.training.registry import get_recipe

    run_dir, _ = tiny_run
    base = ["optim.max_steps=2", "train.eval_every_steps=0", "train.save_every_steps=1",
            f"output_dir={run_dir}"]
    get_recipe("decomposer").fn(load_recipe_config(TINY, base), run_dir=run_dir)
    assert json.loads((run_dir / "metrics.json").read_text())["resumed_from_step"] == 2
    with pytest.raises(ConfigError, match="refusing to resume"):
        get_recipe("decomposer").fn(load_recipe_config(TINY, [*base, "optim.lr=5.0e-4"]),
                                    run_dir=run_dir)


def test_eval_commands_on_exported_sets(tiny_run: tuple[Path, dict], tmp_path: Path) -> None:
    run_dir, _ = tiny_run
    export_eval_sets(load_break([BREAK_ROW]) + load_trec_cast(CAST_ROWS), tmp_path)
    per_item = tmp_path / "items.jsonl"
    args = argparse.Namespace(data=str(tmp_path / "decompose.jsonl"), checkpoint=str(run_dir),
                              bundle=None, per_item=str(per_item), limit=0, json=True, corpus=None)
    m = eval_decompose(args)
    assert m["decompose_items"] == 1.0 and 0.0 <= m["decompose_node_f1"] <= 1.0
    assert json.loads(per_item.read_text().splitlines()[0])["gold"]["type"] == "split"
    args.data = str(tmp_path / "rewrite.jsonl")
    r = eval_rewrite(args)
    assert r["rewrite_items"] == 2.0 and r["rewrite_em_copy_query"] == 0.5


def test_eval_without_model_names_the_flags(tmp_path: Path) -> None:
    export_eval_sets(load_break([BREAK_ROW]), tmp_path)
    args = argparse.Namespace(data=str(tmp_path / "decompose.jsonl"), checkpoint=None,
                              bundle=None, per_item=None, limit=0, json=True)
    with pytest.raises(ConfigError, match="give --checkpoint RUN_DIR"):
        eval_decompose(args)


def test_searchsmith_eval_decompose_cli(tiny_run: tuple[Path, dict], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from searchsmith.serving.main import main

    run_dir, _ = tiny_run
    export_eval_sets(load_break([BREAK_ROW]), tmp_path)
    rc = main(["eval", "decompose", "--data", str(tmp_path / "decompose.jsonl"),
               "--checkpoint", str(run_dir), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["decompose_items"] == 1.0 and set(out) >= {"decompose_validity", "decompose_type_acc"}


def test_rewrite_reads_user_turns_from_dicts_strings_and_objects(
        tiny: Decomposer, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(tiny, "generate", lambda sources, constraint=None: seen.extend(sources) or ["x"] * len(sources))
    turns = [argparse.Namespace(role="user", content="Lumen"), {"role": "assistant", "content": "no"},
             {"role": "user", "content": "Varok"}]
    assert tiny.rewrite(turns, "who founded it?") == "x"
    assert seen == ["rewrite: Lumen || Varok || who founded it?"]
    assert tiny.rewrite([{"role": "assistant", "content": "hi"}], "who?") == "who?"  # no user turn
