"""Reader recipe: data loaders, window labels, the tiny twin end to end (resume, export, eval read)."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.hub import resolve_model
from searchsmith.models.reader import ANSWER_KINDS, ReaderSettings, join_passages
from searchsmith.training.config import load_recipe_config
from searchsmith.training.read_data import ReaderData, ReadItem, find_answer, load_items
from searchsmith.training.reader import best_f1, label_windows, no_answer_items

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "reader" / "tiny" / "bert-tiny_full.yaml"


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("default"))


def test_find_answer_prefers_the_gold_paragraph_and_word_boundaries() -> None:
    ctx = "Paris hosts the Louvre. Parisian cafes. The capital of France is Paris."
    assert find_answer(ctx, ["Paris"]) == (0, 5)
    gold = [(40, len(ctx))]
    assert find_answer(ctx, ["Paris"], gold) == (ctx.rindex("Paris"), len(ctx) - 1)
    assert find_answer(ctx, ["Lyon", "paris"]) == (0, 5)  # an alias, case-insensitive
    assert find_answer(ctx, ["yes"]) is None and find_answer(ctx, ["Rome"]) is None


def test_windows_are_labelled_with_the_answer_tokens_and_kinds(tok) -> None:
    settings = ReaderSettings(max_length=40, stride=8, max_question_tokens=12, max_answer_tokens=8)
    filler = [("Filler", "Nothing about rivers is said in this long paragraph of words " * 3)]
    span = ReadItem("a", "a", "t", "Which river flows through Cairo?",
                    [*filler, ("Nile", "The Nile flows through Cairo.")], ["The Nile"], [1])
    yes = ReadItem("b", "b", "t", "Is the Nile long?", [("Nile", "The Nile is very long.")], ["yes"], [0])
    none = ReadItem("c", "c", "t", "Which river?", filler, [], [])
    missing = ReadItem("d", "d", "t", "Which river?", filler, ["Danube"], [])
    wins, counts = label_windows([span, yes, none, missing], tok, settings, 1.0, 0)
    assert counts["skipped_no_answer_in_context"] == 1  # the Danube is nowhere in its context
    spans = [w for w in wins if w.kind == ANSWER_KINDS.index("span")]
    assert spans
    for w in spans:
        assert tok.decode(w.input_ids[w.start:w.end + 1]).lower() == "the nile"
        assert w.context[w.start] == 1 and w.context[w.end] == 1
    assert any(w.kind == ANSWER_KINDS.index("yes") and w.start == -100 for w in wins)
    assert sum(w.kind == ANSWER_KINDS.index("none") for w in wins) >= 2  # the negatives and the unanswerable


def test_a_window_that_holds_the_answer_again_is_no_negative_with_all_occurrences(tok) -> None:
    """data.answer_occurrences: with 'first' a window that holds the answer only where it is
    repeated is a negative; with 'all' it is a positive at that occurrence."""
    from searchsmith.training.read_data import find_answers

    settings = ReaderSettings(max_length=40, stride=8, max_question_tokens=12, max_answer_tokens=8)
    filler = "Nothing about rivers is said in this long paragraph of words " * 3
    item = ReadItem("a", "a", "t", "Which river flows through Cairo?",
                    [("Nile", "The Nile flows through Cairo."), ("Filler", filler),
                     ("Egypt", "Egypt lies on the Nile.")], ["the Nile"], [0])
    ctx = join_passages(item.paragraphs)[0]
    assert len(find_answers(ctx, ["the Nile"])) == 2 and find_answers(ctx, ["yes"]) == []
    kinds = {}
    for occ in ("first", "all"):
        wins, counts = label_windows([item], tok, settings, 100.0, 0, occ)
        spans = [w for w in wins if w.kind == ANSWER_KINDS.index("span")]
        for w in spans:
            assert tok.decode(w.input_ids[w.start:w.end + 1]).lower() == "the nile"
        kinds[occ] = (len(spans), counts["positive_other_occurrence"], len(wins))
    assert kinds["first"][1] == 0 and kinds["all"][1] >= 1
    assert kinds["all"][0] == kinds["first"][0] + kinds["all"][1]  # negatives turned positives
    assert kinds["all"][2] <= kinds["first"][2]
    with pytest.raises(ValueError, match="data.answer_occurrences"):
        ReaderData(answer_occurrences="some")


def test_no_answer_items_keep_only_the_distractors() -> None:
    it = ReadItem("q", "q", "t", "Q?", [("A", "a"), ("B", "b"), ("C", "c")], ["x"], [1])
    (na,) = no_answer_items([it])
    assert na.paragraphs == [("A", "a"), ("C", "c")] and na.answers == ["x"]
    assert no_answer_items([it], keep_answers=False)[0].kind == "none"
    assert best_f1("the Nile river", ["Nile", "Nile delta"]) == (0.0, pytest.approx(2 / 3))


def test_the_shared_sets_load_with_gold_answers_in_context(shared_data) -> None:
    data = ReaderData(hotpotqa=str(shared_data / "hotpotqa/hotpotqa_dev_distractor.jsonl"),
                      musique=str(shared_data / "musique/musique_ans_200.jsonl"),
                      wikimultihop=str(shared_data / "2wikimultihopqa/2wikimultihopqa_dev.jsonl"), max_items=20)
    items = load_items(data)
    sources = {it.source for it in items}
    assert sources == {"hotpotqa", "musique", "2wikimultihopqa"}
    hops = [it for it in items if it.hop]
    assert hops and all("#" not in it.question for it in hops)  # #k filled with earlier answers
    found = [find_answer(join_passages(it.paragraphs)[0], it.answers) is not None for it in items if it.kind == "span"]
    assert sum(found) / len(found) > 0.8


def test_a_bad_record_names_its_field(tmp_path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text(json.dumps({"_id": "1", "question": "Q?", "answer": "", "context": [["t", ["s"]]]}) + "\n")
    with pytest.raises(ValidationError, match="field 'answer'"):
        load_items(ReaderData(sources=("hotpotqa",), hotpotqa=str(p)))
    with pytest.raises(ValueError, match="data.sources"):
        ReaderData(sources=("squad",))


def test_eval_read_data_errors_name_line_and_field(tmp_path) -> None:
    from searchsmith.training.evaluate_read import read_items

    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"question": "Q?", "answers": ["a"], "passages": ["p"], "supporting": [3]}) + "\n")
    with pytest.raises(ValidationError, match=r"r.jsonl:1: 'supporting' must list passage indices in 0..0"):
        read_items(p)
    p.write_text(json.dumps({"question": "Q?", "answers": [], "passages": ["p"]}) + "\n")
    with pytest.raises(ValidationError, match="'answers' must be a non-empty list"):
        read_items(p)
    with pytest.raises(ConfigError, match="does not exist"):
        read_items(tmp_path / "none.jsonl")


def test_tiny_reader_trains_resumes_exports_and_evaluates(tmp_path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.training.evaluate import EVALUATORS, heldout_figures
    from searchsmith.training.evaluate_read import write_eval
    from searchsmith.training.registry import get_recipe

    run = tmp_path / "run"
    cfg = load_recipe_config(TINY, [f"output_dir={run}"])
    metrics = get_recipe("reader").fn(cfg, run_dir=run)
    assert {"f1", "em", "answered_rate", "synthetic/f1"} <= set(metrics)
    meta = json.loads((run / "model" / "reader.json").read_text())
    assert meta["trained_steps"] == cfg.optim.max_steps and meta["max_length"] == cfg.max_length
    # a rerun resumes the finished run instead of training again
    again = get_recipe("reader").fn(cfg, run_dir=run)
    assert again == metrics
    bundle = tmp_path / "bundle"
    manifest = export_run(run, bundle, ExportOptions(heldout_scorer=heldout_figures))
    assert manifest["heldout_source"].startswith("bundle:fp32 on the run's held-out split")
    assert manifest["heldout_metrics"]["f1"] == pytest.approx(metrics["f1"], abs=1e-6)
    data = tmp_path / "eval.jsonl"
    assert write_eval(data, TINY) == int(metrics["n"])
    out = EVALUATORS["read"](Namespace(data=str(data), bundle=str(bundle), checkpoint=None, device="cpu",
                                       limit=0, per_item=str(tmp_path / "items.jsonl")))
    assert out["f1"] == pytest.approx(metrics["f1"], abs=1e-6) and "f1_ci95" in out
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) == int(metrics["n"])


def test_two_runs_of_a_recipe_train_the_same_weights(tmp_path) -> None:
    """Seeds are set before the new heads are built: a run is reproducible, not a draw."""
    import torch
    from searchsmith.training.registry import get_recipe

    weights = []
    for name in ("a", "b"):
        run = tmp_path / name
        torch.manual_seed(1000 + len(weights))  # whatever the global state was before
        get_recipe("reader").fn(load_recipe_config(TINY, [f"output_dir={run}"]), run_dir=run)
        (path,) = (run / "model").glob("*.safetensors")
        from safetensors.torch import load_file

        weights.append(load_file(str(path)))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_shared_normalisation_spans_a_questions_windows() -> None:
    """The loss by hand: two questions, the first over two windows with its answer in one."""
    import torch
    from searchsmith.training.reader import reader_loss

    class Fixed(torch.nn.Module):
        def __init__(self, start, end, kind) -> None:
            super().__init__()
            self.out = (start, end, kind)

        def forward(self, *args):
            return self.out

    start = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 0.0], [0.0, 0.5, 0.0]])
    end = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.5]])
    kind = torch.zeros(3, 4)
    batch = {"input_ids": torch.zeros(3, 3, dtype=torch.long), "attention_mask": torch.ones(3, 3, dtype=torch.long),
             "token_type_ids": torch.zeros(3, 3, dtype=torch.long),
             "context": torch.tensor([[False, True, True]] * 3),
             "start": torch.tensor([-100, 1, 1]), "end": torch.tensor([-100, 2, 1]), "kind": torch.tensor([3, 0, 0]),
             "group": torch.tensor([0, 0, 1]), "weight": torch.tensor([1.0, 1.0, 1.0])}
    got = reader_loss(Fixed(start, end, kind), batch)
    lse = torch.logsumexp
    # question 0: start over the 4 context tokens of both windows, gold = window 1 token 1
    q0 = (lse(torch.tensor([1.0, 2.0, 3.0, 0.0]), 0) - 3.0) + (lse(torch.tensor([0.0, 1.0, 1.0, 1.0]), 0) - 1.0)
    q1 = (lse(torch.tensor([0.5, 0.0]), 0) - 0.5) + (lse(torch.tensor([0.0, 0.5]), 0) - 0.0)
    kind_ce = float(torch.log(torch.tensor(4.0)))  # uniform kind logits
    assert float(got) == pytest.approx(kind_ce + 0.5 * float(q0 + q1) / 2, rel=1e-6)


def test_grouped_batches_keep_a_questions_windows_together() -> None:
    from searchsmith.training.reader import TrainWindow, batch_stream

    wins = [TrainWindow([1, 2, 3], None, [0, 1, 1], 1, 1, 0, group=g) for g in (0, 0, 0, 1, 2, 2, 3)]
    batches = list(batch_stream(wins, 0, 3, seed=0, grouped=True)(0))
    seen = []
    for b in batches:
        groups = b["group"].tolist()
        assert len(groups) >= 3 and "weight" in b
        seen.extend(sorted(set(groups)))
    assert len(seen) == len(set(seen))  # no question is split across batches


def test_tiny_reader_with_shared_normalisation_selects_by_span(tmp_path) -> None:
    from searchsmith.training.registry import get_recipe

    run = tmp_path / "run"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "shared_norm=true"])
    metrics = get_recipe("reader").fn(cfg, run_dir=run)
    assert 0.0 <= metrics["f1"] <= 1.0
    assert json.loads((run / "model" / "reader.json").read_text())["select"] == "span"


def test_cloze_questions_hide_their_answer_and_resolve_pronouns() -> None:
    import random

    from searchsmith.training.read_data import cloze_question

    rng = random.Random(0)
    sentence = "He was born in Vienna on 3 May 1901 and was married to Clara Haskil."
    got = {cloze_question(sentence, "Otto Weber", random.Random(s), 0.0) for s in range(40)}
    got.discard(None)
    answers = {a for _, a in got}
    assert answers <= {"Vienna", "3 May 1901", "Clara Haskil"} and len(answers) >= 2
    for q, a in got:
        assert a not in q and q.startswith("Otto Weber was born") and q.endswith("?")
        wh = {"3 May 1901": "when", "Clara Haskil": "who", "Vienna": "what"}[a]
        assert f" {wh} " in f" {q[:-1]} "
    # a sentence without a date or a name (other than its first word) gives nothing
    assert cloze_question("It was small and very quiet in the morning.", "x", rng, 0.0) is None


def test_relation_and_cloze_items_stay_with_their_record() -> None:
    from searchsmith.training.read_data import cloze_items, relation_items

    paras = [("Payment on Demand", "Payment on Demand is a 1951 film directed by Curtis Bernhardt."),
             ("Curtis Bernhardt", "Curtis Bernhardt was a German film director. He died on 22 February 1981 in "
                                  "Pacific Palisades.")]
    it = ReadItem("2wiki-1", "2wiki-1", "2wikimultihopqa", "When did the director of Payment on Demand die?",
                  paras, ["22 February 1981"], [0, 1],
                  evidences=(("Payment on Demand", "director", "Curtis Bernhardt"),
                             ("Curtis Bernhardt", "date of death", "22 February 1981"),
                             ("Nobody", "director", "Someone")))
    rel = relation_items([it])
    assert [(r.question, r.answers, r.support) for r in rel] == [
        ("Who directed Payment on Demand?", ["Curtis Bernhardt"], [0]),
        ("When did Curtis Bernhardt die?", ["22 February 1981"], [1])]
    assert all(r.qid == it.qid and r.hop for r in rel)  # split with their record, never evaluated
    cz = cloze_items([it], 3, 0.0, seed=1)
    assert len(cz) == 3 and all(c.qid == it.qid and c.hop for c in cz)
    for c in cz:
        assert c.answers[0] in paras[c.support[0]][1] and c.answers[0] not in c.question
    with pytest.raises(ValueError, match="cloze_per_item"):
        ReaderData(cloze_per_item=-1)


def test_leave_out_must_name_a_source_and_leave_one_to_train_on() -> None:
    with pytest.raises(ValueError, match=r"data.leave_out: \['demo'\] not in data.sources"):
        ReaderData(sources=("synthetic",), leave_out=("demo",))
    with pytest.raises(ValueError, match="leaves no source to train on"):
        ReaderData(sources=("demo",), leave_out=("demo",))


def test_a_left_out_source_is_held_out_whole_and_scored_apart() -> None:
    from searchsmith.training.read_data import split_items
    from searchsmith.training.reader import score_items, sentence_baseline

    data = ReaderData(sources=("synthetic", "demo"), synthetic_questions=40, leave_out=("demo",), eval_ratio=0.25)
    items = load_items(data)
    train, held = split_items(items, data)
    demo = {it.qid for it in items if it.source == "demo"}
    assert demo and demo <= held and not demo & train  # every demo question held out
    synthetic = {it.qid for it in items if it.source == "synthetic"}
    assert synthetic & held and synthetic & train  # the others split as before

    class Echo:  # answers every question with its first paragraph's first word, score by source
        def read_batch(self, questions, passages):
            from types import SimpleNamespace

            return [SimpleNamespace(text=ps[0][1].split()[0], kind="span", score=0.9 if "Lumen" in q else 0.2)
                    for q, ps in zip(questions, passages, strict=True)]

    held_items = [it for it in items if it.qid in held and not it.hop]
    out, rows = score_items(Echo(), held_items, 0.5, ("demo",))
    ood = [r for r in rows if r["source"] == "demo"]
    assert out["ood/n"] == len(ood) == len([it for it in held_items if it.source == "demo"])
    assert out["ood/f1"] == pytest.approx(sum(r["f1"] for r in ood) / len(ood))
    assert out["ood/answered_rate"] == pytest.approx(sum(r["answered"] for r in ood) / len(ood))
    assert "ood/f1" not in score_items(Echo(), held_items, 0.5)[0]  # nothing left out: no ood figures

    def encode(texts):  # a bag-of-letters "embedding": deterministic, no model
        import numpy as np

        v = np.array([[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts], dtype=float)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)

    base = sentence_baseline(held_items, encode, ("demo",))
    assert base["ood_sentence_f1"] == pytest.approx(base["sentence_demo/f1"]) and "ood_sentence_n" not in base
    # beside the sentence, the extractive short answer (the typed span of its sentences): better here
    assert base["ood_short_f1"] == pytest.approx(base["short_demo/f1"])
    assert base["short_f1"] > base["sentence_f1"]


def test_the_extractive_baseline_answers_with_the_span_the_question_asks_for() -> None:
    from searchsmith.training.reader import score_items, sentence_rows

    item = ReadItem("q1", "q1", "demo", "When was Quarry 3.0 released?",
                    [("Quarry", "Northwind Labs released Quarry 3.0 on 2024-09-10. It is fast.")], ["2024-09-10"], [0])
    yes_no = ReadItem("q2", "q2", "demo", "Is Quarry fast?", [("Quarry", "Quarry is fast. It is written in Rust.")],
                      ["yes"], [0])

    def encode(texts):  # the question is closest to the first sentence of each item
        import numpy as np

        return np.array([[1.0, 0.0]] + [[1.0, 0.0] if i == 0 else [0.0, 1.0] for i in range(len(texts) - 1)])

    rows = sentence_rows([item, yes_no], encode)
    assert rows[0]["short"] == "2024-09-10" and rows[0]["short_f1"] == 1.0 and rows[0]["f1"] < 1.0
    assert rows[1]["short"] == "Quarry is fast." and rows[1]["short_f1"] == rows[1]["f1"]  # no span: the sentence

    class Fixed:
        def read_batch(self, questions, passages):
            from types import SimpleNamespace

            return [SimpleNamespace(text="2024-09-10", kind="span", score=0.9) for _ in questions]

    out, _ = score_items(Fixed(), [item, yes_no], 0.5, (), {r["id"]: r["f1"] for r in rows},
                         {r["id"]: r["short_f1"] for r in rows})
    assert out["f1_vs_short_n"] == 2 and out["f1_vs_short_diff"] == pytest.approx(0.0)  # the same answers
    assert out["f1_vs_sentence_diff"] > 0
    # an export re-measures both, and records the baselines a run made before the span's lacks
    from searchsmith.training.evaluate_read import read_report

    figs, _ = read_report(Fixed(), [item, yes_no], 0.5, ("demo",), rows)
    assert figs["baselines/short_f1"] == pytest.approx(0.5) and figs["baselines/ood_short_f1"] == pytest.approx(0.5)
    assert figs["baselines/sentence_f1"] == pytest.approx((rows[0]["f1"] + rows[1]["f1"]) / 2)
    assert {"f1_vs_short_direction", "ood/f1_vs_short_direction", "f1_vs_sentence_direction"} <= set(figs)


def test_the_reader_gate_reads_the_out_of_domain_figures_when_recorded() -> None:
    from searchsmith.serving.pipeline.gates import GATES, check_row

    def test(prefix, diff, direction):
        return {f"{prefix}f1_vs_sentence_{k}": v for k, v in
                {"diff": diff, "lo": diff - 0.05, "hi": diff + 0.05, "p": 0.01 if direction else 0.4, "n": 60,
                 "direction": direction}.items()}

    (row,) = [r for r in GATES if r.role == "reader"]
    pooled = {"f1": 0.185, "baselines/sentence_f1": 0.065, **test("", 0.12, 1)}
    assert check_row(row, pooled)[1] is None  # in-domain only: it leads, beyond the noise
    fig, why = check_row(row, {**pooled, "ood/f1": 0.102, "baselines/ood_sentence_f1": 0.148})
    assert why is not None and "answer F1 on datasets left out of training 0.102 is below" in why
    assert fig.baseline == pytest.approx(0.148)
    ood_lead = {**pooled, "ood/f1": 0.2, "baselines/ood_sentence_f1": 0.148}
    assert "records no paired test" in check_row(row, ood_lead)[1]  # the ood row reads the ood test
    assert check_row(row, {**ood_lead, **test("ood/", 0.052, 1)})[1] is None
    assert "only inside the noise" in check_row(row, {**ood_lead, **test("ood/", 0.052, 0)})[1]
    assert "only inside the noise" in check_row(row, {**pooled, **test("", 0.12, 0)})[1]
    # the extractive short answer, where recorded, is a baseline too, with its own paired test
    fig, why = check_row(row, {**pooled, "baselines/short_f1": 0.30})
    assert "0.185 is below the extractive short answer (0.300)" in why
    with_short = {**pooled, "baselines/short_f1": 0.15}
    assert "no paired test of its answer F1 against the extractive short answer" in check_row(row, with_short)[1]
    short_test = {k.replace("f1_vs_sentence", "f1_vs_short"): v for k, v in test("", 0.03, 0).items()}
    assert "leads the extractive short answer only inside the noise" in \
        check_row(row, {**with_short, **short_test})[1]
    short_test = {k.replace("f1_vs_sentence", "f1_vs_short"): v for k, v in test("", 0.03, 1).items()}
    assert check_row(row, {**with_short, **short_test})[1] is None


def test_the_recipe_records_the_paired_test_against_the_closest_sentence() -> None:
    from searchsmith.training.reader import score_items

    data = ReaderData(sources=("synthetic", "demo"), synthetic_questions=40, leave_out=("demo",))
    items = [it for it in load_items(data) if not it.hop]

    class Gold:  # reads every answer right
        def read_batch(self, questions, passages):
            from types import SimpleNamespace

            by_q = {it.question: it.answers[0] for it in items}
            return [SimpleNamespace(text=by_q[q], kind="span", score=0.9) for q in questions]

    sentence = {it.uid: 0.25 for it in items}
    out, _ = score_items(Gold(), items, 0.5, ("demo",), sentence)
    assert out["f1_vs_sentence_diff"] == pytest.approx(0.75) and out["f1_vs_sentence_direction"] == 1
    assert out["f1_vs_sentence_n"] == len(items)
    n_demo = sum(it.source == "demo" for it in items)
    assert out["ood/f1_vs_sentence_n"] == n_demo and out["ood/f1_vs_sentence_direction"] == 1
    assert not any(k.startswith("f1_vs") for k in score_items(Gold(), items, 0.5)[0])  # no baseline: no test


def test_tiny_reader_leaving_the_demo_out_records_ood_figures_in_its_bundle(tmp_path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.training.evaluate import heldout_figures
    from searchsmith.training.registry import get_recipe

    run = tmp_path / "run"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "data.sources=[synthetic,demo]", "data.leave_out=[demo]"])
    metrics = get_recipe("reader").fn(cfg, run_dir=run)
    n_demo = len([it for it in load_items(cfg.data) if it.source == "demo" and not it.hop])
    assert metrics["ood/n"] == n_demo == metrics["demo/n"] and "ood/f1" in metrics
    split = json.loads((run / "split.json").read_text())
    assert split["leave_out"] == ["demo"]
    manifest = export_run(run, tmp_path / "bundle", ExportOptions(heldout_scorer=heldout_figures))
    assert manifest["heldout_metrics"]["ood/f1"] == pytest.approx(metrics["ood/f1"], abs=1e-6)


def test_frozen_embeddings_and_lower_layers_stay_as_they_started(tmp_path) -> None:
    """model.freeze_embeddings / model.freeze_layers: the saved reader keeps the starting
    embeddings and lowest layers; the layers above and the heads are trained."""
    import torch
    from safetensors.torch import load_file
    from searchsmith.training.reader import build_model
    from searchsmith.training.registry import get_recipe
    from searchsmith.training.trainer import seed_everything

    run = tmp_path / "r"
    cfg = load_recipe_config(TINY, [f"output_dir={run}", "model.freeze_embeddings=true", "model.freeze_layers=1"])
    seed_everything(cfg.train.seed)
    start = {k: v.clone() for k, v in build_model(cfg)[0].state_dict().items()}
    assert not any(p.requires_grad for n, p in build_model(cfg)[0].named_parameters()
                   if ".embeddings." in n or ".layer.0." in n)
    get_recipe("reader").fn(cfg, run_dir=run)
    (path,) = (run / "model").glob("*.safetensors")
    saved = load_file(str(path))
    fixed = [k for k in saved if "embeddings." in k or "layer.0." in k]
    trained = [k for k in saved if "layer.1." in k and k.endswith("weight")]
    assert fixed and trained
    for k in fixed:  # the encoder is saved as a plain transformers model: its own names
        assert torch.equal(saved[k], start[f"encoder.{k}"]), k
    assert any(not torch.equal(saved[k], start[f"encoder.{k}"]) for k in trained)


@pytest.mark.parametrize("value", ["3", "-1", "true", "'two'"])
def test_a_bad_freeze_layers_is_refused_naming_the_key(tmp_path, value) -> None:
    from searchsmith.training.reader import build_model

    with pytest.raises((ConfigError, ValueError, TypeError), match="freeze_layers"):
        build_model(load_recipe_config(TINY, [f"output_dir={tmp_path}", f"model.freeze_layers={value}"]))


def test_the_served_figures_answer_a_comparison_by_the_rule_before_the_reader() -> None:
    from types import SimpleNamespace

    from searchsmith.training.reader import score_items

    films = [("Harbour Lights", "Harbour Lights is a 1952 drama film."),
             ("The Glass Orchard", "The Glass Orchard is a 1938 comedy film.")]
    choice = ReadItem("c", "c", "wiki", "Which film came out first, Harbour Lights or The Glass Orchard?", films,
                      ["The Glass Orchard"], [0, 1])
    plain = ReadItem("p", "p", "wiki", "What kind of film is Harbour Lights?", films, ["drama"], [0])

    class Reads:  # a reader that names a word of the passages, never an option
        def read_batch(self, questions, passages):
            return [SimpleNamespace(text="drama", kind="span", score=0.9) for _ in questions]

    out, rows = score_items(Reads(), [choice, plain], 0.5)
    assert out["f1"] == pytest.approx(0.5) and out["wiki/f1"] == pytest.approx(0.5)  # the reader's own
    assert out["served/f1"] == pytest.approx(1.0) and out["served/wiki/f1"] == pytest.approx(1.0)
    assert [r["served"] for r in rows] == ["The Glass Orchard", "drama"]
    # the paired test against the extractive answer (which answers comparisons by the rule too)
    # weighs the answers as served
    out, _ = score_items(Reads(), [choice, plain], 0.5, (), None, {"c": 1.0, "p": 1.0})
    assert out["f1_vs_short_diff"] == pytest.approx(0.0)
