"""Out-of-domain figures of the decomposer recipe (``data.leave_out``: a source, or one year of
CAsT conversations, held out whole) and the decompose / rewrite gates that read them instead of
the pooled held-out split's (issue 17, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from searchsmith.serving.pipeline.config import BundlesConfig
from searchsmith.serving.pipeline.gates import GATES, check_row, decide
from searchsmith.training.config import load_recipe_config
from searchsmith.training.decompose_data import left_out, split_examples

REPO = Path(__file__).resolve().parents[2]
TINY_TAGGER = REPO / "recipes" / "decomposer" / "tiny" / "bert-tiny_tagger.yaml"


def _ex(task: str, origin: str, group: str, n: int) -> dict:
    return {"task": task, "origin": origin, "group": group, "source": f"{origin} {group} {n}", "target": str(n)}


def test_left_out_names_sources_break_by_its_datasets_and_cast_years() -> None:
    assert left_out(_ex("decompose", "break:HOTPOT", "q:a", 0), ["break_qdmr"])
    assert not left_out(_ex("decompose", "hotpotqa", "q:a", 0), ["break_qdmr"])
    assert left_out(_ex("decompose", "hotpotqa", "q:a", 0), ["musique", "hotpotqa"])
    cast21, cast22 = _ex("rewrite", "trec_cast", "cast:2021_5", 0), _ex("rewrite", "trec_cast", "cast:2022_5", 0)
    assert left_out(cast22, ["trec_cast:2022"]) and not left_out(cast21, ["trec_cast:2022"])
    assert left_out(cast21, ["trec_cast"]) and not left_out(cast21, [])


def test_a_left_out_set_is_held_out_whole_with_its_questions_from_other_sources() -> None:
    examples = [_ex("decompose", "break:HOTPOT", f"q:{i}", i) for i in range(40)]
    examples += [_ex("decompose", "hotpotqa", f"q:{i}", 100 + i) for i in range(0, 40, 4)]  # also in Break
    examples += [_ex("rewrite", "trec_cast", f"cast:{2021 + i % 2}_{i}", 200 + i) for i in range(20)]
    train, held = split_examples(examples, seed=0, heldout_ratio=0.1, leave_out=["hotpotqa", "trec_cast:2022"])
    held_groups = {e["group"] for e in held}
    assert {e["group"] for e in examples if e["origin"] == "hotpotqa"} <= held_groups
    # Break's decomposition of a left-out HotpotQA question is not trained on either
    assert not any(e["group"] in {f"q:{i}" for i in range(0, 40, 4)} for e in train)
    assert not any(e["group"].startswith("cast:2022_") for e in train)
    assert any(e["group"].startswith("cast:2021_") for e in train)
    plain_train, _ = split_examples(examples, seed=0, heldout_ratio=0.1)
    assert len(plain_train) > len(train)


@pytest.mark.parametrize("names,match", [(["scifact"], "not a real source"), (["synthetic"], "not a real source"),
                                         (["break_qdmr:2022"], "trec_cast:YEAR"), (["trec_cast:later"], "trec_cast:YEAR")])
def test_leave_out_must_name_configured_real_sets(names: list[str], match: str) -> None:
    over = f"data.leave_out=[{','.join(names)}]"
    with pytest.raises(ValueError, match=match):
        load_recipe_config(TINY_TAGGER, ["data.sources=[break_qdmr,trec_cast,synthetic]", over])
    with pytest.raises(ValueError, match="data.leave_out"):
        load_recipe_config(TINY_TAGGER, ["data.leave_out=[break_qdmr]"])  # the tiny twin reads synthetic only


def _fake_shared(root: Path) -> Path:
    """A Break file and a CAsT file in the ../shared/data layout, small enough for the tiny twin."""
    (root / "break_qdmr").mkdir(parents=True)
    rows = []
    for i in range(24):
        a, b = f"Varok{i}", f"Lumen{i}"
        rows.append({"question_id": f"HOTPOT_{i}", "source_dataset": "HOTPOT" if i % 2 else "CWQ",
                     "question_text": f"Where was the founder of {a} born?",
                     "steps": [f"who founded {a}", "where was #1 born"], "step_dependencies": [[], [1]]})
        rows.append({"question_id": f"DROP_{i}", "source_dataset": "DROP", "question_text": f"Which is older, {a} or {b}?",
                     "steps": [f"when was {a} founded", f"when was {b} founded", "which is older of #1 and #2"],
                     "step_dependencies": [[], [], [1, 2]]})
    (root / "break_qdmr" / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "trec_cast").mkdir()
    turns = []
    for year in (2021, 2022):
        for t in range(6):
            name = f"Pelk{year}{t}"
            first = {"id": f"cast{year}_{t}_1", "year": year, "topic_id": str(t), "raw_utterance": f"What is {name}?",
                     "manual_rewritten_utterance": f"What is {name}?", "history_utterances": [], "history_turn_ids": [],
                     "canonical_response": f"{name} is a company that makes gears in Austin."}
            second = {"id": f"cast{year}_{t}_2", "year": year, "topic_id": str(t), "raw_utterance": "Who founded it?",
                      "manual_rewritten_utterance": f"Who founded {name}?", "history_utterances": [f"What is {name}?"],
                      "history_turn_ids": [f"cast{year}_{t}_1"],
                      "canonical_response": f"{name} was founded by Ada Varok in 1990."}
            turns += [first, second]
    (root / "trec_cast" / "cast_2019_2022_turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in turns))
    return root


def test_a_tiny_run_leaving_sets_out_records_ood_figures_and_baselines(tmp_path: Path) -> None:
    from searchsmith.training.decomposer import OOD_PREFIX
    from searchsmith.training.registry import get_recipe

    data = _fake_shared(tmp_path / "shared")
    run = tmp_path / "run"
    cfg = load_recipe_config(TINY_TAGGER, [f"output_dir={run}", "optim.max_steps=2", "train.eval_every_steps=0",
                                           f"data.data_dir={data}", "data.sources=[break_qdmr,trec_cast,synthetic]",
                                           "data.leave_out=[trec_cast:2022]", "data.synthetic_decompose=12",
                                           "data.synthetic_rewrite=6"])
    final = get_recipe("decomposer").fn(cfg, run_dir=run)
    base = json.loads((run / "metrics.json").read_text())["baselines"]
    # the 2022 follow-ups alone: their rewrites, their retrieval and the paired test there
    assert final[OOD_PREFIX + "rewrite_items"] == 12 and final["rewrite_items"] > 12  # 6 conversations of 2 turns
    assert OOD_PREFIX + "rewrite_retrieval_ndcg@10" in final
    assert final[OOD_PREFIX + "rewrite_retrieval_ndcg@10_vs_heuristic_n"] == 12  # each turn has its passage
    assert "ood_rewrite_retrieval_ndcg@10_heuristic" in base and "ood_rewrite_f1_copy_query" in base
    assert not any(k.startswith(OOD_PREFIX + "decompose") for k in final)  # no decomposition was left out
    # ... which the rewrite gate then reads
    figures = {**final, **{f"baselines/{k}": v for k, v in base.items() if isinstance(v, (int, float))}}
    fig, _ = check_row(next(r for r in GATES if r.use == "rewrite"), figures)
    assert fig.what.endswith("on datasets left out of training") and fig.value == final[OOD_PREFIX + "rewrite_retrieval_ndcg@10"]
    fig, _ = check_row(next(r for r in GATES if r.use == "decompose"), figures)
    assert fig.what == "node-text F1"  # pooled: nothing of the kind was left out


def test_the_decompose_gate_reads_the_out_of_domain_figures_when_recorded() -> None:
    row = next(r for r in GATES if r.use == "decompose")
    test = {f"decompose_node_f1_vs_terminal_{k}": v for k, v in
            {"diff": 0.2, "lo": 0.15, "hi": 0.25, "p": 0.001, "n": 200, "direction": 1}.items()}
    pooled = {"decompose_node_f1": 0.52, "baselines/decompose_node_f1_question_as_terminal": 0.26, **test}
    assert check_row(row, pooled)[1] is None
    # on Break left out the model leads inside the noise only: the gate closes
    ood = {"ood/decompose_node_f1": 0.30, "baselines/ood_decompose_node_f1_question_as_terminal": 0.28,
           **{f"ood/{k}": v for k, v in test.items()}, "ood/decompose_node_f1_vs_terminal_direction": 0,
           "ood/decompose_node_f1_vs_terminal_lo": -0.01}
    fig, why = check_row(row, {**pooled, **ood})
    assert fig.what == "node-text F1 on datasets left out of training" and why is not None
    assert not decide({"decomposer": {"heldout_metrics": {**pooled, **ood}}}, BundlesConfig())["decompose"].used
    assert decide({"decomposer": {"heldout_metrics": pooled}}, BundlesConfig())["decompose"].used


class _CountingDecomposer:
    """Graphs and rewrites from the text; counts what it was asked to generate."""

    def __init__(self) -> None:
        self.decomposed: list[str] = []
        self.rewritten: list[str] = []

    def decompose_batch(self, queries):
        self.decomposed.extend(queries)
        return [f"graph of {q}" for q in queries]

    def rewrite_batch(self, items):
        self.rewritten.extend(q for _, q in items)
        return [f"{q} ({len(h)} turns)" for h, q in items]


def test_left_out_items_are_generated_once_for_both_figures(monkeypatch) -> None:
    """evaluate_with_ood scores the left-out items again as ood/ figures; their graphs and
    rewrites come from the first pass, not a second generation."""
    import searchsmith.training.decomposer as dm

    items = [{**_ex("decompose", "hotpotqa", "g", 1), "query": "q1"},
             {**_ex("decompose", "musique", "g", 2), "query": "q2"},
             {**_ex("rewrite", "trec_cast", "cast:2022_1", 3), "query": "r1", "history": [{"role": "user",
                                                                                        "content": "a"}]},
             {**_ex("rewrite", "trec_cast", "cast:2021_1", 4), "query": "r2", "history": []}]
    seen: list[tuple[list, list]] = []

    def fake_evaluate(dec, heldout, limit=0, extra_docs=()):
        graphs = dec.decompose_batch([e["query"] for e in heldout if e["task"] == "decompose"])
        rewrites = dec.rewrite_batch([(e["history"], e["query"]) for e in heldout if e["task"] == "rewrite"])
        seen.append((graphs, rewrites))
        return {"n": float(len(heldout))}

    monkeypatch.setattr(dm, "evaluate", fake_evaluate)
    dec = _CountingDecomposer()
    out = dm.evaluate_with_ood(dec, items, ["musique", "trec_cast:2022"])
    assert out == {"n": 4.0, "ood/n": 2.0}
    assert dec.decomposed == ["q1", "q2"] and dec.rewritten == ["r1", "r2"]  # each once
    assert seen[1] == (["graph of q2"], ["r1 (1 turns)"])  # the second pass: the first pass's outputs
    # the same query with another history is another rewrite
    mem = dm._Remembered(dec)
    assert mem.rewrite_batch([([], "r1"), ([{"role": "user", "content": "a"}], "r1"), ([], "r1")]) == \
        ["r1 (0 turns)", "r1 (1 turns)", "r1 (0 turns)"]
    assert dec.rewritten[2:] == ["r1", "r1"]
    assert mem.decompose_batch(["x", "x", "y"]) == ["graph of x", "graph of x", "graph of y"]
    assert dec.decomposed[2:] == ["x", "y"]
    # nothing left out: the decomposer itself, one pass
    dec2 = _CountingDecomposer()
    assert dm.evaluate_with_ood(dec2, items, []) == {"n": 4.0} and dec2.decomposed == ["q1", "q2"]
