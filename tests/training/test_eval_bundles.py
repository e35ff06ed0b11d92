"""``searchsmith eval TASK --bundle DIR`` scores what is served.

Every model task is evaluated from an exported bundle (fp32 and int8 ONNX) and from its
training run (torch) through the same code; on fp32 the two give the same figures. The tiny
random models and their bundles come from tests/models/export_fixtures.py (built once per
session and shared with the export tests).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pytest
from searchsmith.models.errors import BundleError, ConfigError, ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import export_fixtures as fx  # noqa: E402

DOCS = {
    "d0": "Quarry is a vector database written in Rust by Northwind Labs.",
    "d1": "Lumen caches query results in memory and evicts them by age.",
    "d2": "Jupiter is the largest planet of the solar system.",
    "d3": "Knead the bread dough for ten minutes until it is smooth.",
    "d4": "The Great Red Spot is a storm on Jupiter larger than the Earth.",
    "d5": "Tidewater schedules jobs with cron expressions in UTC.",
}
QUERIES = {"q0": ("Which language is Quarry written in?", "d0"), "q1": ("What does Lumen cache?", "d1"),
           "q2": ("Which planet has the Great Red Spot?", "d4"), "q3": ("How long to knead dough?", "d3")}


def _args(**kw: object) -> argparse.Namespace:
    base = {"data": None, "checkpoint": None, "bundle": None, "limit": 0, "per_item": None, "k": 3, "run": None,
            "first_stage": "bm25", "index": None, "config": None, "device": "cpu", "json": True}
    return argparse.Namespace(**{**base, **kw})


def _beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                                               for i, t in DOCS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                for q, (t, _) in QUERIES.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, (_, d) in QUERIES.items()))
    return root


def _rewrite_file(path: Path) -> Path:
    rows = [{"history": [{"role": "user", "content": "Tell me about Quarry"}], "query": "who wrote it?",
             "rewrite": "who wrote Quarry?"},
            {"history": [{"role": "user", "content": "Tell me about Lumen"}], "query": "where is it based?",
             "rewrite": "where is Lumen based?"},
            {"history": [], "query": "What is Tidewater?", "rewrite": "What is Tidewater?"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _decompose_file(path: Path) -> Path:
    rows = [{"query": "Who founded Northwind Labs?", "type": "terminal",
             "nodes": [{"id": 1, "text": "Who founded Northwind Labs?", "depends_on": []}]},
            {"query": "When was the founder of Lumen born?", "type": "chain",
             "nodes": [{"id": 1, "text": "Who founded Lumen?", "depends_on": []},
                       {"id": 2, "text": "When was #1 born?", "depends_on": [1]}]},
            {"query": "Which is older, Quarry or Lumen?", "type": "split",
             "nodes": [{"id": 1, "text": "When was Quarry released?", "depends_on": []},
                       {"id": 2, "text": "When was Lumen released?", "depends_on": []}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cite_file(path: Path) -> Path:
    docs = [{"id": i, "text": t} for i, t in list(DOCS.items())[:4]]
    rows = [{"sentence": "Quarry is written in Rust.", "documents": docs, "cited": ["d0"], "entities": [[0, 6, "ENT"]]},
            {"sentence": "Jupiter is a large planet.", "documents": docs, "cited": ["d2"]},
            {"sentence": "Knead the dough for ten minutes.", "documents": docs, "cited": ["d3"],
             "entities": [[0, 5, "ENT"]]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _images_file(root: Path) -> Path:
    from searchsmith.training.image_data import render, synthetic_records

    (root / "imgs").mkdir(parents=True)
    recs = synthetic_records(4, 21)
    for r in recs:
        render(r.spec, 48).save(root / "imgs" / f"{r.id}.png")
    row = {"id": "doc1", "paragraphs": [r.captions[0] for r in recs[:3]] + ["a paragraph about taxes"],
           "images": [{"id": r.id, "path": f"imgs/{r.id}.png"} for r in recs],
           "gold": {recs[0].id: 0, recs[1].id: 1, recs[2].id: 2, recs[3].id: None}}
    path = root / "eval.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


# eval task -> (model task of its bundle, its run or model folder, data writer)
CASES = {
    "rerank": ("rerank", lambda: fx.rerank_run(), _beir),
    "retrieve": ("embed", lambda: fx.embedder_dir(), _beir),
    "rewrite": ("decompose", lambda: fx.decompose_run(), lambda p: _rewrite_file(p.with_suffix(".jsonl"))),
    "decompose": ("decompose", lambda: fx.decompose_run(), lambda p: _decompose_file(p.with_suffix(".jsonl"))),
    "cite": ("cite", lambda: fx.cite_run(), lambda p: _cite_file(p.with_suffix(".jsonl"))),
    "images": ("images", lambda: fx.images_run(), _images_file),
}


def _eval(task: str, **kw: object) -> dict:
    from searchsmith.serving.main import EVAL_TASKS

    return EVAL_TASKS[task](_args(task=task, **kw))


def _figures(out: dict) -> dict[str, float]:
    return {k: v for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


@pytest.mark.parametrize("task", sorted(CASES))
def test_fp32_bundle_and_checkpoint_give_the_same_figures(task: str, tmp_path: Path) -> None:
    model_task, run, write = CASES[task]
    data = write(tmp_path / "data")
    per_item = tmp_path / "items.jsonl"
    from_run = _eval(task, data=str(data), checkpoint=str(run()))
    from_bundle = _eval(task, data=str(data), bundle=str(fx.bundle(model_task)), per_item=str(per_item))
    assert from_run["model"] == f"checkpoint:{run()}"
    assert from_bundle["model"] == f"bundle:fp32:{fx.bundle(model_task)}"
    figures = _figures(from_run)
    assert figures and figures.keys() == _figures(from_bundle).keys()
    for key, value in figures.items():
        assert from_bundle[key] == pytest.approx(value, abs=1e-5), key
    assert per_item.read_text().strip()  # the bundle run wrote its per-item lines too


@pytest.mark.parametrize("task", ["rerank", "cite", "retrieve", "images"])
def test_int8_bundles_are_evaluated(task: str, tmp_path: Path) -> None:
    from searchsmith.models.export import ExportOptions, export_embedder, export_run

    model_task, run, write = CASES[task]
    out = tmp_path / "int8"
    opts = ExportOptions(dtype="int8", allow_drift=True)  # random tiny weights: parity is not the point here
    if model_task == "embed":
        export_embedder(out, str(run()), opts)
    else:
        export_run(run(), out, opts)
    data = write(tmp_path / "data")
    got = _eval(task, data=str(data), bundle=str(out))
    assert got["model"] == f"bundle:int8:{out}"
    key = {"rerank": "ndcg@10", "retrieve": "ndcg@10", "cite": "attribution/roc_auc", "images": "recall@1"}[task]
    assert 0.0 <= got[key] <= 1.0


def test_fp16_bundles_are_evaluated(tmp_path: Path) -> None:
    data = _beir(tmp_path / "beir")
    fp32 = _eval("retrieve", data=str(data), bundle=str(fx.bundle("embed")))
    fp16 = _eval("retrieve", data=str(data), bundle=str(fx.bundle("embed", "fp16")))
    assert fp16["model"] == f"bundle:fp16:{fx.bundle('embed', 'fp16')}"
    # parity checked the fp16 embeddings at cosine >= 0.999: the rankings of 6 documents agree
    assert fp16["ndcg@10"] == pytest.approx(fp32["ndcg@10"], abs=1e-6)


def test_route_embeds_queries_with_a_bundle_or_a_model_folder(tmp_path: Path, write_corpus) -> None:
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.embedder import EmbedderConfig
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    cfg = IndexConfig(embedder=EmbedderConfig(model=str(fx.embedder_dir())),
                      centroids=CentroidConfig(chunks_per_centroid=3))
    build_index(read_corpus(write_corpus(tmp_path / "corpus.jsonl")), tmp_path / "index", cfg)
    data = tmp_path / "routing.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"history": [], "query": "How long should bread dough be kneaded?", "sources": ["cooking"]},
        {"history": [{"role": "user", "content": "Tell me about Jupiter"}], "query": "how many moons?",
         "sources": ["astronomy"]},
        {"history": [], "query": "Where is the Lumen eviction code?", "sources": ["code"]}]))
    index = str(tmp_path / "index")
    ckpt = _eval("route", data=str(data), index=index, checkpoint=str(fx.embedder_dir()))
    onnx = _eval("route", data=str(data), index=index, bundle=str(fx.bundle("embed")))
    assert onnx["model"] == f"queries embedded by bundle:fp32:{fx.bundle('embed')}"
    for mode in ("parallel", "serial"):
        assert onnx["modes"][mode]["all"]["mrr"] == pytest.approx(ckpt["modes"][mode]["all"]["mrr"], abs=1e-6)
    with pytest.raises(ConfigError, match="is a 'rerank' bundle; eval route needs an 'embed' or a 'decompose' bundle"):
        _eval("route", data=str(data), index=index, bundle=str(fx.bundle("rerank")))


# ----------------------------------------------------------------------------- held-out figures

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TINY_RECIPE = {"rerank": "reranker/tiny/bert-tiny_full.yaml", "decompose": "decomposer/tiny/bert-tiny_bert2bert.yaml",
               "images": "images/tiny/bert-tiny_cnn.yaml"}


def _run_with_split(task: str, tmp_path: Path) -> Path:
    """The fixture run of ``task`` as a run of the tiny recipe, whose held-out split the export
    rebuilds (the citation run: its heldout.cite.jsonl)."""
    from searchsmith.models.config import to_dict
    from searchsmith.training.config import load_recipe_config

    src = {"rerank": fx.rerank_run, "decompose": fx.decompose_run, "cite": fx.cite_run, "images": fx.images_run}[task]()
    run = tmp_path / "run"
    shutil.copytree(src, run)
    if task == "cite":
        rows = [{**json.loads(x), "source": "demo"} for x in _cite_file(tmp_path / "c.jsonl").read_text().splitlines()]
        (run / "heldout.cite.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        info = json.loads((run / "run.json").read_text())
        config = to_dict(load_recipe_config(RECIPES / TINY_RECIPE[task]))
        (run / "run.json").write_text(json.dumps({**info, "config": config}))
    return run


@pytest.mark.parametrize("task", ["rerank", "decompose", "cite", "images"])
def test_heldout_figures_of_the_fp32_bundle_are_the_torch_models(task: str, tmp_path: Path) -> None:
    """What export records in manifest["heldout_metrics"], on the bundle and on the torch run."""
    from searchsmith.models.runtime import load_bundle
    from searchsmith.training.evaluate import heldout_figures, load_eval_model

    run = _run_with_split(task, tmp_path)
    torch_model = load_eval_model(task, _args(checkpoint=str(run))).model
    want, where = heldout_figures(task, run, torch_model)
    got, where_b = heldout_figures(task, run, load_bundle(fx.bundle(task), device="cpu"))
    assert where == where_b and where.startswith("the run's held-out split")
    assert want.keys() == got.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-5), key
    expected = {"rerank": "ndcg@10", "decompose": "rewrite_f1", "cite": "attribution/demo/roc_auc",
                "images": "placement_accuracy"}[task]
    assert expected in got  # the figure the pipeline's gate reads (images: placement, as the recipe)


# ----------------------------------------------------------------------------- errors


def test_a_bundle_of_another_task_is_named(tmp_path: Path) -> None:
    data = _cite_file(tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match=r"--bundle .* is a 'rerank' bundle; eval cite needs a 'cite' bundle"):
        _eval("cite", data=str(data), bundle=str(fx.bundle("rerank")))
    with pytest.raises(ConfigError, match=r"--checkpoint .* is a 'rerank' run; eval cite needs a 'cite' run"):
        _eval("cite", data=str(data), checkpoint=str(fx.rerank_run()))


def test_runs_and_bundles_swapped_are_named_with_the_fix(tmp_path: Path) -> None:
    data = _decompose_file(tmp_path / "d.jsonl")
    with pytest.raises(ConfigError, match="has no manifest.json: it is a training run.*pass it as --checkpoint"):
        _eval("decompose", data=str(data), bundle=str(fx.decompose_run()))
    with pytest.raises(ConfigError, match="is an exported bundle.*pass it as --bundle"):
        _eval("decompose", data=str(data), checkpoint=str(fx.bundle("decompose")))
    with pytest.raises(ConfigError, match="not both"):
        _eval("decompose", data=str(data), checkpoint=str(fx.decompose_run()), bundle=str(fx.bundle("decompose")))
    with pytest.raises(ConfigError, match="give --checkpoint RUN_DIR .* or --bundle DIR"):
        _eval("decompose", data=str(data))


def test_missing_corrupt_and_tampered_bundles_are_refused(tmp_path: Path) -> None:
    data = _beir(tmp_path / "beir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="has no manifest.json; it is not a searchsmith bundle"):
        _eval("rerank", data=str(data), bundle=str(tmp_path / "empty"))
    with pytest.raises(BundleError, match="is not a folder"):
        _eval("rerank", data=str(data), bundle=str(tmp_path / "nowhere"))
    bad = tmp_path / "bad"
    shutil.copytree(fx.bundle("rerank"), bad)
    (bad / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="manifest.json is not valid JSON"):
        _eval("rerank", data=str(data), bundle=str(bad))
    tampered = tmp_path / "tampered"
    shutil.copytree(fx.bundle("rerank"), tampered)
    with open(tampered / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(BundleError, match="'model.onnx' is corrupt or truncated"):
        _eval("rerank", data=str(data), bundle=str(tampered))


def test_pipeline_takes_a_folder_of_bundles_and_refuses_a_checkpoint(tmp_path: Path) -> None:
    from searchsmith.serving.evaluate import with_eval_bundles
    from searchsmith.serving.pipeline.config import load_pipeline_config

    folder = tmp_path / "bundles"
    folder.mkdir()
    for task in ("rerank", "cite", "embed"):
        (folder / task).symlink_to(fx.bundle(task), target_is_directory=True)
    cfg = with_eval_bundles(load_pipeline_config(None), _args(bundle=str(folder)))
    assert (cfg.bundles.reranker, cfg.bundles.citation) == (str(folder / "rerank"), str(folder / "cite"))
    assert cfg.bundles.decomposer is None  # not in the folder: the config's (none) stays
    one = with_eval_bundles(load_pipeline_config(None), _args(bundle=str(fx.bundle("decompose"))))
    assert one.bundles.decomposer == str(fx.bundle("decompose"))
    with pytest.raises(ConfigError, match="--checkpoint is not supported.*searchsmith export"):
        with_eval_bundles(load_pipeline_config(None), _args(checkpoint=str(fx.rerank_run())))
    with pytest.raises(ConfigError, match="neither a bundle nor a folder of bundles"):
        with_eval_bundles(load_pipeline_config(None), _args(bundle=str(tmp_path)))


# ----------------------------------------------------------------------------- CLI


def test_cli_eval_rerank_bundle_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from searchsmith.serving.main import main

    data = _beir(tmp_path / "beir")
    assert main(["eval", "rerank", "--data", str(data), "--bundle", str(fx.bundle("rerank")), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "rerank" and out["model"].startswith("bundle:fp32:") and out["queries"] == 4
    assert main(["eval", "cite", "--data", str(data), "--bundle", str(fx.bundle("rerank"))]) == 1
    assert "is a 'rerank' bundle; eval cite needs a 'cite' bundle" in capsys.readouterr().err


def test_eval_help_describes_the_formats_without_pointing_at_missing_files(
        capsys: pytest.CaptureFixture[str]) -> None:
    from searchsmith.serving.main import main

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = capsys.readouterr().out
    assert "DESIGN.md" not in text
    for needle in ("qrels/test.tsv", '"supporting"', '"cited"', '"gold"', "--bundle DIR", "--checkpoint RUN_DIR",
                   "int8"):
        assert needle in text, needle


def test_progress_bar_moves_with_the_chunks() -> None:
    import numpy as np
    from searchsmith.training.evaluate import Chunked

    class Model:
        calls: list[int] = []

        def score_pairs(self, pairs):
            self.calls.append(len(pairs))
            return np.arange(len(pairs), dtype=np.float32)

    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

    bar, model = Bar(), Model()
    out = Chunked(model, bar, chunk=4).score_pairs([("q", "p")] * 10)
    assert model.calls == [4, 4, 2] and bar.n == 10
    assert out.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


def test_retrieve_reports_hybrid_search_beside_dense_and_bm25(tmp_path: Path) -> None:
    data = _beir(tmp_path / "data")
    dense = _eval("retrieve", data=str(data), lexical_weight=0.0, per_item=str(tmp_path / "a.jsonl"))
    # at weight 0 the hybrid row is the dense one, query by query
    assert dense["lexical_weight"] == 0.0
    assert all(dense[f"hybrid/{m}"] == dense[m] for m in ("ndcg@10", "mrr@10", "recall@3"))
    # the default weight is the pipeline's; a BM25 share that dwarfs the cosine follows BM25's order
    from searchsmith.serving.pipeline.config import RetrievalConfig

    assert _eval("retrieve", data=str(data))["lexical_weight"] == RetrievalConfig().lexical_weight
    heavy = _eval("retrieve", data=str(data), lexical_weight=10.0)
    assert heavy["hybrid/ndcg@10"] == pytest.approx(heavy["bm25/ndcg@10"], abs=0.05)
    with pytest.raises(ValidationError, match="lexical-weight"):
        _eval("retrieve", data=str(data), lexical_weight=-1.0)


# eval task -> (the field that identifies a per-item line, figures that must have an interval,
# figures every per-item line carries under the summary's name)
INTERVALS = {
    "rerank": ("qid", ["ndcg@10", "mrr@10", "recall@3", "first_stage/ndcg@10", "first_stage/recall@3"],
               ["ndcg@10", "mrr@10", "recall@3", "first_stage/mrr@10"]),
    "retrieve": ("qid", ["ndcg@10", "mrr@10", "recall@3", "bm25/ndcg@10", "bm25/recall@3", "hybrid/ndcg@10",
                         "hybrid/recall@3"],
                 ["ndcg@10", "recall@3", "bm25/mrr@10", "hybrid/ndcg@10"]),
    "decompose": ("id", ["decompose_validity", "decompose_type_acc", "decompose_node_count_acc",
                         "decompose_node_f1"],
                  ["decompose_validity", "decompose_type_acc", "decompose_node_count_acc", "decompose_node_f1"]),
    "rewrite": ("id", ["rewrite_em", "rewrite_f1", "rewrite_em_copy_query", "rewrite_f1_copy_query"],
                ["rewrite_em", "rewrite_f1", "rewrite_em_copy_query", "rewrite_f1_copy_query"]),
    "cite": ("id", ["attribution/precision", "attribution/recall", "attribution/f1", "attribution/roc_auc",
                    "entity/precision", "entity/recall", "entity/f1"],
             ["attribution/precision", "attribution/recall", "attribution/f1"]),
    "images": ("id", ["placement_accuracy", "placement_precision", "placement_recall", "recall@1", "recall@5",
                      "chance/recall@1", "chance/recall@5"],
               ["placement_accuracy", "placement_recall", "recall@1", "recall@5"]),
}
# figures that are counts or settings, not measured on the items
NOT_FIGURES = {"queries", "documents", "rerank_depth", "items", "pairs", "positive_pairs", "support_threshold",
               "entity_items", "images", "threshold", "placed", "decompose_items", "rewrite_items", "cross_weight", "mix_lexical_weight",
               "lexical_weight"}
PAIRED_TESTS = ("decompose_node_f1_vs_terminal", "rewrite_retrieval_ndcg@10_vs_heuristic")


@pytest.mark.parametrize("task", sorted(CASES))
def test_every_figure_has_a_bootstrap_interval_and_a_per_item_value(task: str, tmp_path: Path,
                                                                    intervals_hold) -> None:
    _, run, write = CASES[task]
    ident, figures, per_item_figures = INTERVALS[task]
    per_item = tmp_path / "items.jsonl"
    out = _eval(task, data=str(write(tmp_path / "data")), checkpoint=str(run()), per_item=str(per_item))
    assert out["bootstrap"]["resamples"] >= 1000 and out["bootstrap"]["seed"] == 0
    paired = tuple(f"{key}_" for key in PAIRED_TESTS)  # a paired test is its own interval and p-value
    unreported = [k for k, v in _figures(out).items()
                  if k not in NOT_FIGURES and not k.startswith(paired) and f"{k}_ci95" not in out]
    assert not unreported, f"figures without an interval: {unreported}"
    assert all(f"{k}_ci95" in out for k in figures)
    assert intervals_hold(out) >= len(figures)
    rows = [json.loads(line) for line in per_item.read_text().splitlines()]
    assert rows and len({str(r[ident]) for r in rows}) == len(rows)  # one line per item, keyed
    for name in per_item_figures:
        assert all(isinstance(r[name], float) for r in rows), name
    # seeded: the same run gives the same intervals
    again = _eval(task, data=str(write(tmp_path / "again")), checkpoint=str(run()))
    assert all(again[f"{k}_ci95"] == out[f"{k}_ci95"] for k in figures)
