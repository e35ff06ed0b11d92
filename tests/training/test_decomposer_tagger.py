"""The copy-based decomposer (``model.arch: tagger``): training on aligned depths, reload,
ONNX export with parity, the bundle's graphs equal to torch's, and failures that degrade."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from searchsmith.models.decomposer import (
    TAGGER,
    Decomposer,
    build_tagger,
    check_depth_head,
    tag_encode,
)
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.models.qdg import validate
from searchsmith.models.qdg_spans import question_words
from searchsmith.training.config import load_recipe_config
from searchsmith.training.decomposer import tag_examples, tagger_loss

REPO = Path(__file__).resolve().parents[2]
TINY_TAGGER = REPO / "recipes" / "decomposer" / "tiny" / "bert-tiny_tagger.yaml"
QUESTIONS = ["When was the founder of Lumen born?", "Which is taller, the Eiffel Tower or Big Ben?",
             "who sang Computer Geek #1 first", "?", "é" * 3 + " café au lait " * 40]


@pytest.fixture(scope="module")
def tagger_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from searchsmith.training.registry import get_recipe

    run_dir = tmp_path_factory.mktemp("decomposer_tagger_tiny")
    cfg = load_recipe_config(TINY_TAGGER, ["optim.max_steps=3", "train.eval_every_steps=0",
                                           "train.save_every_steps=3", f"output_dir={run_dir}"])
    final = get_recipe("decomposer").fn(cfg, run_dir=run_dir)
    return run_dir, final


@pytest.fixture(scope="module")
def tagger_bundle(tagger_run: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from searchsmith.models.export import ExportOptions, export_run

    out = tmp_path_factory.mktemp("tagger_bundle") / "b"
    export_run(tagger_run[0], out, ExportOptions(dtype="fp32"))
    return out


def test_prepare_tag_batch_labels_each_words_first_token_only() -> None:
    model, tok = build_tagger("default", depth=4, tiny_hidden=16)
    dec = Decomposer(model, tok, TAGGER, max_source_tokens=32)
    q = "When was the founder of Lumenexpress born?"
    n = len(question_words(q))
    depths = [0, 0, 1, 1, 1, 2, 0, 0][:n]
    batch = dec.prepare_tag_batch([q], [depths])
    enc, firsts = tag_encode(tok, [q], 32)
    labels = batch["labels"][0].tolist()
    assert [labels[t] for t in firsts[0]] == depths
    assert sum(v != -100 for v in labels) == n  # sub-word pieces, [CLS], [SEP]: ignored
    assert len(enc["input_ids"][0]) > n + 2  # "Lumenexpress" is split, so some tokens are not firsts


def test_words_past_the_token_limit_count_as_depth_zero() -> None:
    model, tok = build_tagger("default", depth=4, tiny_hidden=16)
    _, firsts = tag_encode(tok, ["word " * 50], 16)
    assert firsts[0][:14] == list(range(1, 15)) and set(firsts[0][14:]) == {-1}
    dec = Decomposer(model, tok, TAGGER, max_source_tokens=16)
    assert len(dec.tag_depths(["word " * 50])[0]) == 50


def test_tag_examples_aligns_decompositions_and_leaves_rewrites() -> None:
    from searchsmith.training.decompose_data import synthetic

    examples = synthetic(20, 5, seed=0)
    tagged, aligned = tag_examples(examples, 4)
    assert len(tagged) == len(examples) and aligned >= 15
    for e in tagged:
        if e["task"] == "decompose" and e["depths"] is not None:
            assert len(e["depths"]) == len(question_words(e["query"]))
        assert (e["task"] == "rewrite") == ("depths" not in e)


def test_tiny_tagger_trains_reloads_and_always_gives_valid_graphs(tagger_run: tuple[Path, dict]) -> None:
    run_dir, final = tagger_run
    meta = json.loads((run_dir / "model" / "decomposer.json").read_text())
    assert meta["arch"] == "tagger" and meta["tag_depth"] == 4 and meta["trained_steps"] == 3
    assert meta["rewrite_head"]["tags"] == ["O", "REF", "TGT"]
    assert final["decompose_validity"] == 1.0
    dec = Decomposer.load(run_dir)
    # 4 depths + the rewrite tags O/REF/TGT trained with them (model.joint_rewrite)
    assert dec.arch == TAGGER and dec.model.config.num_labels == 7 and dec.tag_depth == 4
    head = dec.model.classifier
    np.testing.assert_allclose(dec.rewrite_head["weight"], head.weight[4:7].detach().numpy(), rtol=0, atol=1e-6)
    for g, valid, raw in dec.decompose_batch(QUESTIONS):
        assert valid and validate(g) == [] and raw.startswith(g.type)
    assert isinstance(dec.rewrite([{"role": "user", "content": "Lumen"}], "who founded it?"), str)
    assert dec.rewrite([], "who founded it?") == "who founded it?"


def test_tagger_failure_degrades_to_one_node(tagger_run: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    dec = Decomposer.load(tagger_run[0])

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(dec, "tag_labels", broken)
    with caplog.at_level("WARNING"):
        out = dec.decompose_batch(["When was the founder of Lumen born?"])
    assert out[0][0].type == "terminal" and not out[0][1] and "tagging failed" in caplog.text


def test_tagger_without_rewrite_head_keeps_the_query(tagger_run: tuple[Path, dict]) -> None:
    dec = Decomposer.load(tagger_run[0], rewrite_head=None)
    assert dec.rewrite([{"role": "user", "content": "Lumen"}], "who founded it?") == "who founded it?"


def test_tagger_bundle_has_one_graph_passes_parity_and_matches_torch(tagger_run: tuple[Path, dict],
                                                                    tagger_bundle: Path) -> None:
    from searchsmith.models.runtime import load_bundle

    m = json.loads((tagger_bundle / "manifest.json").read_text())
    assert sorted(m["graphs"]) == ["encoder"]
    assert m["generation"]["arch"] == "tagger" and len(m["generation"]["depth_head"]["weight"]) == 4
    assert len(m["generation"]["rewrite_head"]["weight"]) == 3
    checks = m["parity"]["checks"]
    assert checks["fp32_identical_generations"] == 1.0 and "decoder_fp32_max_abs" not in checks
    dec = Decomposer.load(tagger_run[0])
    b = load_bundle(tagger_bundle)
    torch_graphs = [g.to_json() for g, _, _ in dec.decompose_batch(QUESTIONS)]
    assert [b.decompose(q).to_json() for q in QUESTIONS] == torch_graphs
    assert [g.to_json() for g in b.tag_graphs(QUESTIONS)] == torch_graphs
    history = [{"role": "user", "content": "Lumen"}]
    assert b.rewrite(history, "who founded it?") == dec.rewrite(history, "who founded it?")
    with pytest.raises(ValidationError, match="empty"):
        b.decompose("  ")


def test_the_rewrite_reads_the_last_answer_in_torch_and_in_the_bundle(tagger_run: tuple[Path, dict],
                                                                       tagger_bundle: Path) -> None:
    from searchsmith.models.runtime import load_bundle

    meta = json.loads((tagger_run[0] / "model" / "decomposer.json").read_text())
    m = json.loads((tagger_bundle / "manifest.json").read_text())
    assert meta["reply_words"] == 16 == m["generation"]["reply_words"]  # the tiny twin's setting travels
    dec, b = Decomposer.load(tagger_run[0]), load_bundle(tagger_bundle)
    long_answer = "Lumen was founded by Varok Pell in Austin, and " + "it grew quickly " * 40
    history = [{"role": "user", "content": "Tell me about Lumen"}, {"role": "assistant", "content": long_answer}]
    source = dec.rewrite_input(history, "who founded it?")
    # the answer's first words come before the query; the input fits the window, the query whole
    assert "|| Lumen was founded by" in source and source.endswith("|| who founded it?")
    assert len(dec.tokenizer(source)["input_ids"]) <= dec.max_source_tokens
    assert dec.rewrite_input(history[:1], "who founded it?") == "rewrite: Tell me about Lumen || who founded it?"
    for q in ["who founded it?", "Where is it based?", "What did they build?"]:
        assert b.rewrite(history, q) == dec.rewrite(history, q)
    # a model saved before the setting reads user turns only
    assert Decomposer.load(tagger_run[0], reply_words=0).rewrite_input(history, "q") == "rewrite: Tell me about Lumen || q"


def test_reply_words_need_a_tagger_and_a_count() -> None:
    with pytest.raises(ValueError, match="model.rewrite_reply_words needs model.arch tagger"):
        load_recipe_config(TINY_TAGGER, ["model.arch=tiny"])
    with pytest.raises(ValueError, match="model.rewrite_reply_words must be >= 0"):
        load_recipe_config(TINY_TAGGER, ["model.rewrite_reply_words=-1"])
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError, match="reply_words"):
        Decomposer(*build_tagger("default", depth=4, tiny_hidden=16), TAGGER, reply_words=-2)


def test_eval_decompose_scores_the_tagger_bundle_as_the_run(tagger_run: tuple[Path, dict], tagger_bundle: Path,
                                                            tmp_path: Path) -> None:
    from searchsmith.training.decompose_data import export_eval_sets, synthetic
    from searchsmith.training.evaluate import eval_decompose

    export_eval_sets(synthetic(12, 0, seed=3), tmp_path)
    common = {"data": str(tmp_path / "decompose.jsonl"), "limit": 0, "per_item": None, "json": True}
    by_bundle = eval_decompose(argparse.Namespace(**common, bundle=str(tagger_bundle), checkpoint=None))
    by_run = eval_decompose(argparse.Namespace(**common, bundle=None, checkpoint=str(tagger_run[0])))
    for key in ("decompose_node_f1", "decompose_validity", "decompose_break_sari", "decompose_break_ged"):
        assert by_bundle[key] == pytest.approx(by_run[key]), key


def test_a_bundle_with_a_broken_depth_head_is_refused(tagger_bundle: Path, tmp_path: Path) -> None:
    from searchsmith.models.runtime import load_bundle

    out = tmp_path / "b"
    shutil.copytree(tagger_bundle, out)
    path = out / "manifest.json"
    m = json.loads(path.read_text())
    m["generation"]["depth_head"]["bias"] = [0.0]
    path.write_text(json.dumps(m))
    with pytest.raises(BundleError, match="depth_head"):
        load_bundle(out)


@pytest.mark.parametrize(("head", "match"), [
    (None, "weight"), ({"weight": [[1.0]]}, "weight"), ({"weight": "x", "bias": [1]}, "numbers"),
    ({"weight": [[1.0, 2.0]], "bias": [0.0, 1.0]}, "L x H"), ({"weight": [[float("nan")]], "bias": [0.0]}, "finite")])
def test_check_depth_head_names_the_problem(head: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        check_depth_head(head)


def test_tagger_loss_takes_each_task_over_its_own_labels() -> None:
    logits = torch.tensor([[[2.0, 0.0, 0.0, 0.0, 9.0, 9.0, 9.0], [0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 0.0],
                            [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]]])
    labels = torch.tensor([[0, 5, -100]])
    # token 0: depth 0 over the 4 depth logits (the large rewrite logits do not count);
    # token 1: REF (5 - 4 = 1) over the 3 rewrite logits; token 2 ignored
    want = (torch.nn.functional.cross_entropy(logits[0, :1, :4], labels[0, :1], reduction="sum")
            + torch.nn.functional.cross_entropy(logits[0, 1:2, 4:], labels[0, 1:2] - 4, reduction="sum")) / 2
    assert tagger_loss(logits, labels, 4).item() == pytest.approx(want.item())
    assert tagger_loss(logits, torch.full((1, 3), -100), 4).item() == 0.0


def test_rewrite_tag_batch_offsets_the_tags_by_the_depths() -> None:
    model, tok = build_tagger("default", depth=7, tiny_hidden=16)
    dec = Decomposer(model, tok, TAGGER, max_source_tokens=48, tag_depth=4)
    batch = dec.prepare_rewrite_tag_batch([([{"role": "user", "content": "What is throat cancer?"}],
                                            "Is it treatable?", "Is throat cancer treatable?")])
    labels = [v for v in batch["labels"][0].tolist() if v != -100]
    assert set(labels) <= {4, 5, 6} and labels.count(5) == 2 and labels.count(6) == 1  # throat cancer / it
    with pytest.raises(Exception, match="joint_rewrite"):
        Decomposer(*build_tagger("default", depth=4, tiny_hidden=16), TAGGER).rewrite_head_from_classifier(0.3, 0.15)


@pytest.mark.parametrize("depth", [0, -1])
def test_a_recipe_with_fewer_than_one_depth_label_is_refused(depth: int) -> None:
    from searchsmith.training.decomposer import DecomposerModelConfig

    with pytest.raises(ValueError, match="model.tag_depth must be >= 1"):
        DecomposerModelConfig(arch="tagger", tag_depth=depth)


# ----------------------------------------------------------------------------- delete tags


def _tiny_run(factory: pytest.TempPathFactory, name: str, *overrides: str) -> Path:
    """A 3-step run of the tiny tagger with delete tags and ``overrides``, in a new folder."""
    from searchsmith.training.registry import get_recipe

    run_dir = factory.mktemp(name)
    cfg = load_recipe_config(TINY_TAGGER, ["optim.max_steps=3", "train.eval_every_steps=0", "model.tag_drop=true",
                                           "train.save_every_steps=3", *overrides, f"output_dir={run_dir}"])
    get_recipe("decomposer").fn(cfg, run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def drop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_run(tmp_path_factory, "decomposer_tagger_drop", "model.switch_penalties=[0.05]")


def test_tag_examples_with_delete_tags_label_depth_and_drop() -> None:
    from searchsmith.models.qdg_spans import depths_from_graph, drops_from_graph, split_edit_labels

    q = "How many yards did Brady pass to Moss?"
    ex = {"task": "decompose", "query": q, "graph": {"type": "chain", "nodes": [
        {"id": "1", "text": "yards Brady passed to Moss", "depends_on": []},
        {"id": "2", "text": "number of #1", "depends_on": ["1"]}]}}
    (tagged,), aligned = tag_examples([ex], 4, drop=True)
    assert aligned == 1
    depths, drops = split_edit_labels(tagged["depths"], 4)
    assert depths == depths_from_graph(q, ex["graph"], 4)
    assert drops == drops_from_graph(q, ex["graph"]) and any(drops)


def test_tagger_with_delete_tags_trains_exports_and_serves_the_same_graphs(drop_run: Path,
                                                                          tmp_path: Path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.qdg_spans import graph_from_depths, split_edit_labels
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.decompose_data import synthetic

    meta = json.loads((drop_run / "model" / "decomposer.json").read_text())
    assert meta["tag_drop"] is True and meta["tag_depth"] == 8  # 4 depths x kept / dropped
    assert meta["switch_penalty"] == 0.05  # the one candidate, no calibration
    dec = Decomposer.load(drop_run)
    assert dec.tag_drop and dec.model.config.num_labels == 11  # + O / REF / TGT
    assert dec.switch_penalty == 0.05
    np.testing.assert_allclose(dec.rewrite_head["weight"], dec.model.classifier.weight[8:11].detach().numpy(),
                               rtol=0, atol=1e-6)
    questions = QUESTIONS + [e["query"] for e in synthetic(30, 0, seed=5)]
    graphs = dec.tag_graphs(questions)
    assert all(validate(g) == [] for g in graphs)
    # the delete tags change some step's text and never the structure (the random tiny head drops words)
    plain = [graph_from_depths(q, split_edit_labels(d, 4)[0], dec.max_nodes)
             for q, d in zip(questions, dec.tag_depths(questions), strict=True)]
    assert [len(g.nodes) for g in graphs] == [len(g.nodes) for g in plain]
    assert any(g.to_json() != p.to_json() for g, p in zip(graphs, plain, strict=True))

    out = tmp_path / "b"
    export_run(drop_run, out, ExportOptions(dtype="fp32"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["generation"]["tag_drop"] is True and len(m["generation"]["depth_head"]["weight"]) == 8
    assert m["generation"]["switch_penalty"] == 0.05
    assert m["parity"]["checks"]["fp32_identical_generations"] == 1.0
    b = load_bundle(out)
    assert [g.to_json() for g in b.tag_graphs(questions)] == [g.to_json() for g in graphs]

    m["generation"]["switch_penalty"] = -1
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="switch_penalty"):
        load_bundle(out)
    m["generation"]["switch_penalty"] = 0.05
    m["generation"]["depth_head"]["weight"] = m["generation"]["depth_head"]["weight"][:7]
    m["generation"]["depth_head"]["bias"] = m["generation"]["depth_head"]["bias"][:7]
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="tag_drop"):
        load_bundle(out)


def test_a_decomposer_with_delete_tags_needs_an_even_number_of_depth_labels() -> None:
    from searchsmith.models.errors import ConfigError

    model, tok = build_tagger("default", depth=5, tiny_hidden=16)
    with pytest.raises(ConfigError, match="tag_drop"):
        Decomposer(model, tok, TAGGER, tag_depth=5, tag_drop=True)


def test_depths_of_with_a_switch_penalty_keeps_a_step_whole() -> None:
    from searchsmith.models.decomposer import depths_of

    # word 2 leans to depth 1 by a little inside a run of depth 0, word 4 by a lot
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.45, 0.55], [0.9, 0.1], [0.02, 0.98], [0.02, 0.98]])
    logits = np.log(p)
    firsts = [0, 1, 2, 3, 4, 5]
    assert depths_of(logits, firsts) == [0, 0, 1, 0, 1, 1]
    assert depths_of(logits, firsts, switch_penalty=0.0) == [0, 0, 1, 0, 1, 1]
    assert depths_of(logits, firsts, switch_penalty=0.5) == [0, 0, 0, 0, 1, 1]
    assert depths_of(logits, firsts, switch_penalty=50.0) == [1] * 6  # no change pays: the likelier single depth
    # a word without a token (past the limit) is label 0
    assert depths_of(logits, [0, 1, -1], switch_penalty=0.5) == [0, 0, 0]
    # with delete tags (2 levels: labels 0, 1 kept, 2, 3 dropped) a drop is no change of depth
    q = np.log(np.array([[0.6, 0.05, 0.3, 0.05], [0.3, 0.05, 0.6, 0.05], [0.6, 0.05, 0.3, 0.05]]))
    assert depths_of(q, [0, 1, 2], switch_penalty=5.0, levels=2) == [0, 2, 0]
    assert depths_of(q, [0, 1, 2], switch_penalty=5.0, levels=0) == [0, 0, 0]


def test_the_recipe_chooses_the_switch_penalty_on_calibration_graphs(tmp_path: Path) -> None:
    from searchsmith.training.registry import get_recipe

    cfg = load_recipe_config(TINY_TAGGER, ["optim.max_steps=3", "train.eval_every_steps=0",
                                           "model.switch_penalties=[0.0,0.5,8.0]", "data.calibration_ratio=0.3",
                                           "data.synthetic_decompose=40", f"output_dir={tmp_path}"])
    final = get_recipe("decomposer").fn(cfg, run_dir=tmp_path)
    scores = {float(k.split("@switch_")[1]): v for k, v in final.items() if k.startswith("calibration/node_f1@")}
    assert sorted(scores) == [0.0, 0.5, 8.0]
    best = max(scores, key=lambda c: (round(scores[c], 9), -c))
    assert final["switch_penalty"] == best
    meta = json.loads((tmp_path / "model" / "decomposer.json").read_text())
    assert meta["switch_penalty"] == best
    assert Decomposer.load(tmp_path).switch_penalty == best


def test_switch_penalties_without_calibration_graphs_are_refused() -> None:
    with pytest.raises(ValueError, match="calibration_ratio"):
        load_recipe_config(TINY_TAGGER, ["model.switch_penalties=[0.0,1.0]"])
    with pytest.raises(ValueError, match="switch_penalties"):
        load_recipe_config(TINY_TAGGER, ["model.switch_penalties=[-1.0]"])
    with pytest.raises(ValueError, match="calibration_ratio"):
        load_recipe_config(TINY_TAGGER, ["data.calibration_ratio=1.5"])


@pytest.fixture(scope="module")
def add_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_run(tmp_path_factory, "decomposer_tagger_add", "model.tag_add_phrases=6")


def test_add_vocabulary_takes_the_most_frequent_phrases_and_pads() -> None:
    from searchsmith.training.decomposer import add_vocabulary

    examples = [{"adds": ["", "that", "of"]}, {"adds": ["that", "", "number of"]}, {"adds": None},
                {"task": "rewrite"}, {"adds": ["of", "that"]}]
    assert add_vocabulary(examples, 2) == ["that", "of"]
    assert add_vocabulary(examples, 5) == ["that", "of", "number of", "", ""]
    q = "How many yards did Brady pass to Moss?"
    ex = {"task": "decompose", "query": q, "graph": {"type": "chain", "nodes": [
        {"id": "1", "text": "yards Brady passed to Moss", "depends_on": []},
        {"id": "2", "text": "number of #1", "depends_on": ["1"]}]}}
    (tagged,), _ = tag_examples([ex], 4, drop=True)
    assert [x for x in tagged["adds"] if x] == ["number of", "passed"]


def test_tagger_loss_trains_the_add_labels_on_their_own_slice() -> None:
    # 2 depth labels, 3 rewrite tags, 3 add labels (none + 2 phrases)
    logits = torch.zeros(1, 3, 8, requires_grad=True)
    labels = torch.tensor([[0, 1, -100]])
    adds = torch.tensor([[2, 0, -100]])
    loss = tagger_loss(logits, labels, 2, adds, 3)
    loss.backward()
    grad = logits.grad[0]
    assert grad[0, 5:].abs().sum() > 0 and grad[0, 2:5].abs().sum() == 0  # add slice, not the rewrite tags
    assert grad[2].abs().sum() == 0  # an unlabelled token
    # without add labels the same logits give the depth loss alone
    assert float(tagger_loss(logits, labels, 2, None, 3).detach()) < float(loss.detach())
    # rewrite tags (labels >= depth) are scored over the rewrite slice only
    rw = tagger_loss(torch.zeros(1, 1, 8), torch.tensor([[3]]), 2, None, 3)
    assert abs(float(rw) - float(np.log(3))) < 1e-5


def test_tagger_with_add_tags_trains_exports_and_serves_the_same_graphs(add_run: Path, tmp_path: Path) -> None:
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.decompose_data import synthetic

    meta = json.loads((add_run / "model" / "decomposer.json").read_text())
    assert len(meta["add_phrases"]) == 6 and meta["tag_drop"] is True
    dec = Decomposer.load(add_run)
    assert dec.add_phrases == meta["add_phrases"]
    assert dec.model.config.num_labels == 8 + 3 + 7  # depths x drop, O / REF / TGT, none + 6 phrases
    questions = QUESTIONS + [e["query"] for e in synthetic(30, 0, seed=5)]
    labelled = dec.tag_labels(questions)
    graphs = dec.tag_graphs(questions)
    assert all(validate(g) == [] for g in graphs)
    assert [len(a) for _, a in labelled] == [len(question_words(q)) for q in questions]
    assert all(x in dec.add_phrases for _, a in labelled for x in a if x)
    assert any(x for _, a in labelled for x in a)  # the random head writes phrases: parity means something

    out = tmp_path / "b"
    export_run(add_run, out, ExportOptions(dtype="fp32"))
    m = json.loads((out / "manifest.json").read_text())
    head = m["generation"]["add_head"]
    assert head["phrases"] == dec.add_phrases and len(head["weight"]) == 7
    assert m["parity"]["checks"]["fp32_identical_generations"] == 1.0
    b = load_bundle(out)
    assert b.tag_labels(questions) == labelled
    assert [g.to_json() for g in b.tag_graphs(questions)] == [g.to_json() for g in graphs]

    head["phrases"] = head["phrases"][:5]
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="add_head"):
        load_bundle(out)
    head["phrases"] = ["#1 of"] * 6
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="add_head"):
        load_bundle(out)


def test_add_tags_need_a_tagger_with_delete_tags() -> None:
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ValueError, match="tag_add_phrases"):
        load_recipe_config(TINY_TAGGER, ["model.tag_add_phrases=4"])
    with pytest.raises(ValueError, match="tag_add_phrases"):
        load_recipe_config(TINY_TAGGER, ["model.tag_drop=true", "model.tag_add_phrases=-1"])
    model, tok = build_tagger("default", depth=8, tiny_hidden=16)
    with pytest.raises(ConfigError, match="add_phrases"):
        Decomposer(model, tok, TAGGER, tag_depth=8, tag_drop=True, add_phrases=["that"])


CHOICE = "Which film was released first, Laura's Star or Wonder Woman?"


@pytest.fixture(scope="module")
def choice_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_run(tmp_path_factory, "decomposer_tagger_choice", "model.choice_template=true")


def test_the_choice_template_decomposes_choice_questions_in_torch_and_in_the_bundle(choice_run: Path,
                                                                                     tmp_path: Path) -> None:
    from searchsmith.models.choice import choice_graph
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.qdg_spans import graph_from_labels
    from searchsmith.models.runtime import load_bundle

    assert json.loads((choice_run / "model" / "decomposer.json").read_text())["choice_template"] is True
    dec = Decomposer.load(choice_run)
    assert dec.choice_template is True
    template = choice_graph(CHOICE).to_json()
    assert template["nodes"][-1] == {"id": "3", "text": "which is first of #1, #2", "depends_on": ["1", "2"]}
    questions = [CHOICE, *QUESTIONS]
    graphs = [g.to_json() for g in dec.tag_graphs(questions)]
    # "Which is taller, the Eiffel Tower or Big Ben?" offers its answers too
    assert graphs[0] == template and graphs[2] == choice_graph(QUESTIONS[1]).to_json()
    # every other question is read from its tags, as without the template
    labels = dec.tag_labels(questions)
    for q, g, (lab, adds) in zip(questions, graphs, labels, strict=True):
        if choice_graph(q) is None:
            assert g == graph_from_labels(q, lab, dec.max_nodes, dec.drop_levels, adds).to_json()
    assert dec.decompose_batch([CHOICE])[0][0].to_json() == template
    # off (as models saved before it): the tags' graph
    assert Decomposer.load(choice_run, choice_template=False).tag_graphs([CHOICE])[0].to_json() != template

    out = tmp_path / "b"
    export_run(choice_run, out, ExportOptions(dtype="fp32"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["generation"]["choice_template"] is True
    assert m["parity"]["checks"]["fp32_identical_generations"] == 1.0
    b = load_bundle(out)
    assert [g.to_json() for g in b.tag_graphs(questions)] == graphs
    assert b.decompose(CHOICE).to_json() == template
    m["generation"]["choice_template"] = "yes"
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="choice_template"):
        load_bundle(out)
    del m["generation"]["choice_template"]  # bundles exported before it: off
    (out / "manifest.json").write_text(json.dumps(m))
    assert load_bundle(out).tag_graphs([CHOICE])[0].to_json() != template


def test_the_choice_template_needs_a_tagger() -> None:
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ValueError, match="choice_template needs model.arch tagger"):
        load_recipe_config(REPO / "recipes" / "decomposer" / "tiny" / "bert-tiny_bert2bert.yaml",
                           ["model.choice_template=true", "output_dir=/tmp/unused"])
    model, tok = build_tagger("default", depth=4, tiny_hidden=16)
    with pytest.raises(ConfigError, match="choice_template"):
        Decomposer(model, tok, TAGGER, choice_template="yes")
