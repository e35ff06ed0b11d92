"""searchsmith export: tiny random models exported to ONNX, parity checked against torch."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from export_fixtures import LABELS, bundle, decompose_run, rerank_run
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.export import (
    MANIFEST_DIGEST,
    ExportOptions,
    ParityThresholds,
    export_run,
    kendall_tau,
)
from searchsmith.models.io import WRITTEN_RECORD, sha256_file


def _manifest(path):
    return json.loads((path / "manifest.json").read_text())


def test_embedder_fp32_and_int8_pass_parity() -> None:
    for dtype in ("fp32", "int8"):
        path = bundle("embed", dtype)
        m = _manifest(path)
        assert m["task"] == "embed" and m["dtype"] == dtype and m["trained"] is True
        assert m["parity"]["passed"] and not m["allow_drift"]
        assert m["parity"]["checks"]["model_fp32_max_abs"] <= 1e-4
        assert m["graphs"]["model"]["outputs"] == [{"name": "embeddings", "dtype": "float32",
                                                    "shape": ["batch", 32]}]
        report = json.loads((path / "parity_report.json").read_text())
        assert report["thresholds"]["fp32_max_abs"] == 1e-4 and report["passed"]
    assert _manifest(bundle("embed", "int8"))["parity"]["checks"]["int8_min_cosine"] >= 0.99
    # int8: the weight matrix products became integer products (the tiny model's size is its
    # embedding table, which stays fp32, so the file size says little here)
    import onnx

    ops = [n.op_type for n in onnx.load(str(bundle("embed", "int8") / "model.onnx")).graph.node]
    # 6 weight products in the 1-layer model (Q, K, V, the output, up and down), each one per-token
    # int8 product (the embedder's default; Q, K and V quantise their shared input once); the
    # attention itself stays fp32 (Softmax)
    assert ops.count("MatMulIntegerToFloat") == 6 and ops.count("QuantizeLinear") == 4 and "Softmax" in ops
    assert "QAttention" not in ops and "DynamicQuantizeLinear" not in ops and "MatMulIntegerToFloat" not in [
        n.op_type for n in onnx.load(str(bundle("embed", "fp32") / "model.onnx")).graph.node]
    m = _manifest(bundle("embed", "int8"))
    assert m["int8"]["activations"] == "token" and m["int8"]["fuse_attention"] is False
    assert m["graphs"]["model"]["int8"] == {"fused_attention": 0, "smoothed_products": 0, "fp32_products": 0,
                                            "fp32_block_products": 0, "down_projections": "int8", "activations": "token",
                                            "per_token_products": 6}


def test_embedder_fp16_passes_parity() -> None:
    # fp16 is meant for GPUs; ONNX Runtime's CPU provider runs it too, so parity is checked here
    m = _manifest(bundle("embed", "fp16"))
    assert m["dtype"] == "fp16" and m["parity"]["passed"]
    assert m["parity"]["checks"]["fp16_min_cosine"] >= 0.999
    assert m["graphs"]["model"]["inputs"][0]["dtype"] == "int64"  # fp32/int64 I/O kept


def test_manifest_lists_every_file_with_its_sha256() -> None:
    path = bundle("rerank")
    m = _manifest(path)
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*")
                   if p.is_file() and p.name not in ("manifest.json", WRITTEN_RECORD))
    assert sorted(m["files"]) == files
    # the record of what the export wrote: the same files and the manifest itself
    record = json.loads((path / WRITTEN_RECORD).read_text())
    assert record == {**m["files"], "manifest.json": sha256_file(path / "manifest.json")}
    assert "model.onnx" in files and "parity_report.json" in files and "tokenizer/tokenizer.json" in files
    for rel, digest in m["files"].items():
        assert sha256_file(path / rel) == digest
    assert m["format_version"] == 1 and m["opset"] == 18 and m["max_length"] == 48
    assert m["base_model"] == "tiny-bert" and m["trained_steps"] == 3
    inputs = {i["name"]: i for i in m["graphs"]["model"]["inputs"]}
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert inputs["input_ids"] == {"name": "input_ids", "dtype": "int64", "shape": ["batch", "seq"]}
    assert m["parity"]["checks"]["logits_fp32_max_abs"] <= 1e-4


def test_cite_exports_tagger_and_scorer() -> None:
    path = bundle("cite")
    m = _manifest(path)
    assert sorted(m["graphs"]) == ["scorer", "tagger"]
    assert m["labels"] == LABELS and m["thresholds"]["support_threshold"] == 0.5 and m["max_length"] == 40
    assert m["tagger_max_length"] == 24 and m["trained_steps"] == 2
    assert m["graphs"]["tagger"]["outputs"][0]["shape"] == ["batch", "seq", 3]
    assert m["parity"]["checks"]["tagger_fp32_max_abs"] <= 1e-4
    assert m["parity"]["checks"]["scorer_fp32_max_abs"] <= 1e-4


def test_images_exports_text_and_vision_towers() -> None:
    m = _manifest(bundle("images"))
    assert sorted(m["graphs"]) == ["text", "vision"] and m["embedding_dim"] == 16
    assert m["graphs"]["vision"]["inputs"] == [{"name": "pixel_values", "dtype": "float32",
                                                "shape": ["batch", 3, 16, 16]}]
    pre = m["preprocess"]
    assert pre["image_size"] == 16 and pre["resample"] == "BILINEAR"
    np.testing.assert_allclose(pre["mean"], [0.5] * 3, atol=1e-6)
    np.testing.assert_allclose(pre["std"], [0.5] * 3, atol=1e-6)
    assert m["parity"]["checks"]["text_fp32_max_abs"] <= 1e-4
    assert m["parity"]["checks"]["vision_fp32_max_abs"] <= 1e-4


def test_decomposer_onnx_greedy_loop_matches_torch_generate() -> None:
    m = _manifest(bundle("decompose"))
    assert sorted(m["graphs"]) == ["decoder", "encoder"]
    checks = m["parity"]["checks"]
    assert checks["fp32_identical_generations"] == 1.0
    assert checks["encoder_fp32_max_abs"] <= 1e-4 and checks["decoder_fp32_max_abs"] <= 1e-4
    assert m["generation"]["max_target_tokens"] == 10 and m["generation"]["search"] == "greedy"


def test_failed_parity_raises_and_keeps_the_old_bundle(tmp_path) -> None:
    # A random tiny decoder has near-flat next-token distributions: int8 changes its greedy path.
    out = tmp_path / "b"
    shutil.copytree(bundle("decompose"), out)
    with pytest.raises(BundleError, match=r"parity failed .*int8_identical_generations = 0(\.\d+)? "
                                          r"\(limit 0\.98\).*--allow-drift"):
        export_run(decompose_run(), out, ExportOptions(dtype="int8"))
    assert _manifest(out)["dtype"] == "fp32"  # untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_allow_drift_is_recorded(tmp_path) -> None:
    m = export_run(decompose_run(), tmp_path / "b", ExportOptions(dtype="int8", allow_drift=True))
    assert m["allow_drift"] is True and m["parity"]["passed"] is False
    report = json.loads((tmp_path / "b" / "parity_report.json").read_text())
    assert report["checks"]["int8_identical_generations"]["differing"]
    assert report["checks"]["int8_identical_generations"]["value"] < 0.98


def test_thresholds_are_settings(tmp_path) -> None:
    lenient = ParityThresholds(decompose_min_identical=0.0)
    m = export_run(decompose_run(), tmp_path / "b", ExportOptions(dtype="int8", thresholds=lenient))
    assert m["parity"]["passed"] is True and m["allow_drift"] is False


def test_untrained_run_is_refused(tmp_path) -> None:
    with pytest.raises(BundleError, match="records 0 training steps"):
        export_run(rerank_run(steps=0), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_missing_head_weights_are_refused(tmp_path) -> None:
    from transformers import AutoModel

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    # an encoder without a classifier: loading it as a cross-encoder reports MISSING weights
    AutoModel.from_pretrained(run / "model").save_pretrained(run / "model")
    with pytest.raises(BundleError, match="MISSING weights"):
        export_run(run, tmp_path / "b")


def test_a_run_whose_tokenizer_lost_its_vocabulary_is_refused(tmp_path) -> None:
    """Without tokenizer.json transformers built a 5-token tokenizer from tokenizer_config.json;
    the export passed parity (both sides read every word as [UNK]) and wrote a bundle that
    looked valid (helper-43's audit)."""
    from searchsmith.training.evaluate import TorchReranker

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    for name in ("tokenizer.json", "vocab.txt"):
        (run / "model" / name).unlink(missing_ok=True)
    with pytest.raises(BundleError, match=r"export rerank: the tokenizer in .* knows \d+ tokens, the model \d+"):
        export_run(run, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    with pytest.raises(BundleError, match="--checkpoint: the tokenizer .* vocabulary file"):
        TorchReranker.load(run)
    assert TorchReranker.load(rerank_run()).tokenizer is not None  # a whole run loads


def test_cli_exports_a_folder_of_runs(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(rerank_run(), runs / "reranker")
    (runs / "notes").mkdir()  # not a run: skipped
    assert main(["export", str(runs), "--out", str(tmp_path / "bundles")]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["task"] == "rerank" and line["parity_passed"] and line["bundle"].endswith("reranker")
    assert _manifest(tmp_path / "bundles" / "reranker")["task"] == "rerank"


def test_a_folder_of_runs_exports_every_sound_run_and_names_the_damaged_one(tmp_path, capsys) -> None:
    """The export stopped at the first damaged run: the runs after it were never tried, and
    nothing said the ones before were written (helper-43's audit)."""
    from searchsmith.serving.main import main

    runs = tmp_path / "runs"
    for name in ("a_good", "b_bad", "c_good"):
        shutil.copytree(rerank_run(), runs / name)
    (runs / "b_bad" / "model" / "config.json").write_text("{broken")
    assert main(["export", str(runs), "--out", str(tmp_path / "bundles")]) == 1
    err = capsys.readouterr().err
    assert "failed:" in err and "1 of 3 bundle(s) failed" in err and "b_bad" in err and "the other 2 were written" in err
    assert sorted(p.name for p in (tmp_path / "bundles").iterdir()) == ["a_good", "c_good"]


def test_a_run_being_trained_is_not_exported(tmp_path, capsys) -> None:
    """export read a run while a rerun of train rewrote it (helper-43's audit): a run whose
    folder lock a trainer holds is refused; the check only reads (no lock file is made)."""
    from searchsmith.models.io import being_written, exclusive
    from searchsmith.serving.main import main

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    assert not being_written(run)
    with exclusive(run, "train"):
        assert being_written(run)
        assert main(["export", str(run), "--out", str(tmp_path / "b")]) == 1
        assert main(["export", str(tmp_path), "--out", str(tmp_path / "b")]) == 1  # a folder of runs holding it
    assert capsys.readouterr().err.count("is being trained now") == 2
    assert not being_written(run) and not (tmp_path / "b").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no lock file left


def test_an_unfinished_run_says_so_and_how_to_resume(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    (run / "run.json").unlink()
    (run / ".searchsmith-run").write_text('{"recipe": "reranker"}')
    assert main(["export", str(run), "--out", str(tmp_path / "b")]) == 1
    assert "is a training run that has not finished" in capsys.readouterr().err


def test_cli_rejects_a_folder_without_runs(tmp_path, capsys) -> None:
    from searchsmith.serving.main import main

    assert main(["export", str(tmp_path), "--out", str(tmp_path / "b")]) == 1
    assert "holds no run.json and no run folders" in capsys.readouterr().err


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="--dtype: 'bf16'"):
        ExportOptions(dtype="bf16")
    with pytest.raises(ConfigError, match="--opset: 9 is outside 14..23"):
        ExportOptions(opset=9)


def test_kendall_tau() -> None:
    a = np.array([3.0, 2.0, 1.0, 0.0])
    assert kendall_tau(a, a) == 1.0
    assert kendall_tau(a, -a) == -1.0
    assert kendall_tau(a, np.array([3.0, 1.0, 2.0, 0.0])) == pytest.approx(4 / 6)


def test_a_multi_model_run_counts_its_least_trained_model(tmp_path) -> None:
    """The citation recipe records steps per model ({"tagger": n, "scorer": m}) in run.json
    and citation.json; export reads both without tripping on the dict."""
    from export_fixtures import cite_run
    from searchsmith.models.export import run_source

    run = tmp_path / "cite"
    shutil.copytree(cite_run(), run)

    def steps(tagger: int, scorer: int) -> None:
        for path, key in ((run / "run.json", "steps"), (run / "model" / "citation.json", "trained_steps")):
            data = json.loads(path.read_text())
            data[key] = {"tagger": tagger, "scorer": scorer}
            path.write_text(json.dumps(data))

    steps(16, 20)
    assert run_source(run).trained_steps == 16
    steps(0, 20)
    with pytest.raises(BundleError, match="0 training steps"):
        run_source(run)


def test_heldout_metrics_are_flattened_for_the_manifest(tmp_path) -> None:
    from searchsmith.models.export import heldout_metrics

    (tmp_path / "metrics.json").write_text(json.dumps({
        "final": {"rewrite_f1": 0.2, "note": "x", "ok": True},
        "baselines": {"rewrite_f1_copy_query": 0.7, "bi_encoder": {"ndcg@10": 0.5, "scifact": {"ndcg@10": 0.4}},
                      "data": {"eval_queries": 12}}}))
    # nested baseline groups (the reranker's bi_encoder, the citation's bi_encoder_cosine) are kept,
    # joined with "/"; the "data" group of counts is not a figure
    assert heldout_metrics(tmp_path) == {"rewrite_f1": 0.2, "baselines/rewrite_f1_copy_query": 0.7,
                                         "baselines/bi_encoder/ndcg@10": 0.5,
                                         "baselines/bi_encoder/scifact/ndcg@10": 0.4}
    (tmp_path / "metrics.json").write_text("{oops")  # the bundle would go out without its figures
    with pytest.raises(BundleError, match="metrics.json: not valid JSON"):
        heldout_metrics(tmp_path)
    assert heldout_metrics(tmp_path / "none") == {}  # an untrained run has none


def _rerank_run_with_split(tmp_path):
    """The tiny reranker laid out as a run of the tiny recipe (its config in run.json, so the
    held-out split can be rebuilt), with a metrics.json whose figures are not the model's."""
    from pathlib import Path

    from searchsmith.models.config import to_dict
    from searchsmith.training.config import load_recipe_config

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "reranker" / "tiny" / "bert-tiny_full.yaml"
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "config": to_dict(load_recipe_config(recipe))}))
    (run / "metrics.json").write_text(json.dumps({
        "final": {"ndcg@10": 0.123, "mrr@10": 0.1},
        "baselines": {"bm25": {"ndcg@10": 0.9}, "data": {"eval_queries": 10}}}))
    return run


def test_manifest_records_the_bundles_own_heldout_figures(tmp_path) -> None:
    from searchsmith.training.evaluate import TorchReranker, heldout_figures

    run = _rerank_run_with_split(tmp_path)
    torch_figures, where = heldout_figures("rerank", run, TorchReranker.load(run))
    assert where == "the run's held-out split (all 10 queries)"
    m = _manifest(_written(export_run(run, tmp_path / "fp32", ExportOptions(heldout_scorer=heldout_figures)),
                           tmp_path / "fp32"))
    got = m["heldout_metrics"]
    assert m["heldout_source"] == "bundle:fp32 on the run's held-out split (all 10 queries)"
    # the exported model's own figures (fp32: the torch model's), not the run's metrics.json
    assert got["ndcg@10"] == pytest.approx(torch_figures["ndcg@10"], abs=1e-6) and got["ndcg@10"] != 0.123
    assert got["queries"] == 10 and got["baselines/bm25/ndcg@10"] == 0.9
    # the paired test the reranker gate reads, with BM25 measured again query by query (the tiny
    # recipe has no bi-encoder: mine_with none)
    assert got["ndcg@10_vs_bm25_n"] == 10 and got["ndcg@10_vs_bm25_direction"] in (-1.0, 0.0, 1.0)
    assert got["ndcg@10_vs_bm25_diff"] == pytest.approx(torch_figures["ndcg@10_vs_bm25_diff"], abs=1e-6)
    assert not any(k.startswith("ndcg@10_vs_bi_encoder") for k in got)
    assert not any(k.startswith("baselines/data") for k in got)

    int8 = _manifest(_written(export_run(run, tmp_path / "int8", ExportOptions(dtype="int8", allow_drift=True,
                                                                            heldout_scorer=heldout_figures)),
                           tmp_path / "int8"))
    assert int8["heldout_source"].startswith("bundle:int8 on the run's held-out split")
    assert 0.0 <= int8["heldout_metrics"]["ndcg@10"] <= 1.0

    capped = _manifest(_written(export_run(run, tmp_path / "cap", ExportOptions(heldout_limit=4,
                                                                                heldout_scorer=heldout_figures)),
                                    tmp_path / "cap"))
    assert capped["heldout_source"] == "bundle:fp32 on the run's held-out split (first 4 of 10 queries)"
    assert capped["heldout_metrics"]["queries"] == 4 and capped["heldout_metrics"]["ndcg@10_vs_bm25_n"] == 4

    skipped = _manifest(_written(export_run(run, tmp_path / "skip", ExportOptions(heldout_limit=0)), tmp_path / "skip"))
    assert skipped["heldout_metrics"] == {"ndcg@10": 0.123, "mrr@10": 0.1, "baselines/bm25/ndcg@10": 0.9}
    assert "--heldout-limit 0 skipped" in skipped["heldout_source"]
    # models/ does not import training/: without a scorer the export records the run's figures
    plain = _manifest(_written(export_run(run, tmp_path / "plain", ExportOptions()), tmp_path / "plain"))
    assert plain["heldout_metrics"] == skipped["heldout_metrics"]
    assert "no held-out scorer was given" in plain["heldout_source"]
    with pytest.raises(ConfigError, match="--heldout-limit: expected an int >= 0"):
        ExportOptions(heldout_limit=-1)


def _written(manifest, out):
    """The bundle folder ``out`` after checking the returned manifest is the one written."""
    assert manifest == _manifest(out)
    return out


def test_a_run_whose_split_cannot_be_rebuilt_is_scored_on_the_demo_data() -> None:
    # the fixture run has no recipe config: the reranker bundle is scored on the demo questions,
    # with BM25 and the bi-encoder measured on the same questions
    m = _manifest(bundle("rerank"))
    assert m["heldout_source"].startswith("bundle:fp32 on the demo held-out data")
    assert "could not be rebuilt" in m["heldout_source"]
    # the recipe's flat names too: the pipeline's reranker gate reads baselines/bi_encoder_ndcg@10
    for key in ("ndcg@10", "baselines/bm25/ndcg@10", "baselines/bi_encoder/ndcg@10", "baselines/bi_encoder_ndcg@10",
                "baselines/bm25_ndcg@10"):
        assert 0.0 <= m["heldout_metrics"][key] <= 1.0, key
    assert m["heldout_metrics"]["ndcg@10_vs_bm25_n"] == m["heldout_metrics"]["ndcg@10_vs_bi_encoder_n"] >= 1
    # no demo set for the citation model: the run's own figures (none here), and why
    c = _manifest(bundle("cite"))
    assert c["heldout_source"].startswith("run metrics.json (the torch run's figures; the bundle's could not be "
                                          "measured")
    assert c["heldout_metrics"] == {}


def _block_graph(blocks: int):
    """embeddings LN, then per block: W-MatMul, LN, W-MatMul, activation MatMul, LN."""
    from onnx import TensorProto, helper

    nodes, inits, x = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["h0"], name="ln_emb")], [], "h0"
    for k in range(blocks):
        for j, kind in enumerate(("w", "ln", "w", "act", "ln")):
            out = f"h{k}_{j}"
            if kind == "w":
                inits.append(helper.make_tensor(f"W{k}_{j}", TensorProto.FLOAT, [4, 4], [0.1] * 16))
                nodes.append(helper.make_node("MatMul", [x, f"W{k}_{j}"], [out], name=f"mm{k}_{j}"))
            elif kind == "act":
                nodes.append(helper.make_node("MatMul", [x, x], [out], name=f"act{k}_{j}"))
            else:
                nodes.append(helper.make_node("LayerNormalization", [x, "g", "b"], [out], name=f"ln{k}_{j}"))
            x = out
    inits += [helper.make_tensor("g", TensorProto.FLOAT, [4], [1.0] * 4),
              helper.make_tensor("b", TensorProto.FLOAT, [4], [0.0] * 4)]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                             [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 4])], inits)


def test_first_blocks_kept_fp32_are_the_first_blocks_weight_products() -> None:
    from searchsmith.models.onnx_quant import first_blocks_matmuls

    g = _block_graph(3)
    assert first_blocks_matmuls(g, 1) == ["mm0_0", "mm0_2"]  # weights only, not act0_3
    assert first_blocks_matmuls(g, 2) == ["mm0_0", "mm0_2", "mm1_0", "mm1_2"]
    assert first_blocks_matmuls(g, 3) == [] and first_blocks_matmuls(g, 0) == []  # never all blocks
    assert first_blocks_matmuls(_block_graph(1), 1) == []
    with pytest.raises(ConfigError, match="int8-fp32-blocks"):
        ExportOptions(dtype="int8", int8_fp32_blocks=-1)


def test_export_never_replaces_what_it_did_not_write(tmp_path) -> None:
    """--out may be new, empty or a bundle (replaced); a file, a user folder or a bundle beside a
    user's file is refused before any work, and left as it was."""
    from searchsmith.models.errors import ValidationError

    run = rerank_run()
    afile = tmp_path / "notes.txt"
    afile.write_text("keep")
    with pytest.raises(ValidationError, match="is a file; nothing was replaced"):
        export_run(run, afile, ExportOptions(heldout_limit=0))
    assert afile.read_text() == "keep"
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep")
    with pytest.raises(ValidationError, match=r"is a folder that is not a searchsmith bundle .*notes.txt"):
        export_run(run, user, ExportOptions(heldout_limit=0))
    assert [p.name for p in user.iterdir()] == ["notes.txt"]
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    export_run(run, out, ExportOptions(heldout_limit=0))  # a bundle is replaced: exporting again
    (out / "my-notes.md").write_text("keep")
    with pytest.raises(ValidationError, match=r"holds 1 file\(s\) the bundle did not write \(my-notes.md\)"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert (out / "my-notes.md").read_text() == "keep" and (out / "manifest.json").is_file()


def test_a_bundle_whose_manifest_is_corrupt_or_missing_is_exported_again(tmp_path) -> None:
    """A bundle whose manifest.json is corrupt said 're-export the bundle' on load, and the export
    refused it as 'not a searchsmith bundle' (so did the quickstart's re-export): a folder of only
    the files an export writes is replaced, manifest or none (a corrupt one only with --force:
    test_an_unreadable_manifest_without_the_record_is_kept_without_force); a file of another name
    is refused."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import bundle_layout_files, check_bundle_out, torch_files

    run = rerank_run()
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    (out / WRITTEN_RECORD).unlink()  # an older bundle's: its files known by their names alone
    (out / "manifest.json").write_text("{bad")
    export_run(run, out, ExportOptions(heldout_limit=0, force=True))
    assert _manifest(out)["task"] == "rerank" and not list(tmp_path.glob(".b.tmp-*"))
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != WRITTEN_RECORD}
    tokenizer_files = {f for f in written if f.startswith("tokenizer/")}
    # every file an export writes is known by its name (an older bundle: no record of its files)
    assert bundle_layout_files(out, tokenizer_files) == written

    (out / WRITTEN_RECORD).unlink()
    (out / "manifest.json").unlink()
    shutil.copytree(run / "model", out / "torch")  # --torch-weights' copy of the run's model/
    check_bundle_out(out, tokenizer_files | {f"torch/{f}" for f in torch_files(run / "model")})
    (out / "manifest.json").write_text("{bad")
    (out / "notes.txt").write_text("keep")
    (out / "torch" / "README.txt").write_text("keep")
    with pytest.raises(ValidationError, match=r"holds 2 file\(s\) the bundle did not write "
                                              r"\(notes.txt, torch/README.txt\)"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert (out / "notes.txt").read_text() == "keep" and (out / "manifest.json").read_text() == "{bad"

    mine = tmp_path / "mine"  # a manifest.json and no graph: not a bundle by its files
    mine.mkdir()
    (mine / "manifest.json").write_text("{bad")
    (mine / "tokenizer.json").write_text("{}")
    assert bundle_layout_files(mine) is None
    with pytest.raises(ValidationError, match="is a folder that is not a searchsmith bundle"):
        check_bundle_out(mine)


def test_an_unreadable_manifest_without_the_record_is_kept_without_force(tmp_path, monkeypatch, capsys) -> None:
    """Without the export's record, a manifest.json that was not valid JSON counted as damage and
    the next export replaced it, though nothing showed the export wrote it so: a hand edit gone
    wrong (a comma lost after a tuned threshold) was lost. Refused before any work, naming the
    file, the JSON error's line and column, and the fix; --force rebuilds it. With the record, an
    unreadable manifest is an edit (its JSON error named too), and a missing one is rebuilt."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import check_bundle_out, edited_manifest, unreadable_manifest
    from searchsmith.serving.main import main
    from searchsmith.training import export_cli

    run = rerank_run()
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    manifest = out / "manifest.json"
    (out / WRITTEN_RECORD).unlink()
    broken = '{\n "task": "rerank",\n "thresholds": {"min_score": 0.25}\n "dtype": "fp32"\n}\n'
    manifest.write_text(broken)
    where = "Expecting ',' delimiter: line 4 column 2 (char 57)"
    assert unreadable_manifest(out) == f"is not valid JSON ({where})" and edited_manifest(out) is None
    refusal = (rf"export --out {out}: {manifest} is not valid JSON \({re.escape(where)}\), and no "
               rf"{re.escape(WRITTEN_RECORD)} shows that the export wrote it so: .*nothing was exported\. Repair "
               r"the JSON where it says, or add --force to rebuild the bundle .*or give another --out")
    with pytest.raises(ValidationError, match=refusal):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert manifest.read_text() == broken and not list(tmp_path.glob(".b.tmp-*"))
    (out / WRITTEN_RECORD).write_text("{broken")  # an unreadable record shows nothing either
    assert unreadable_manifest(out) == f"is not valid JSON ({where})"
    (out / WRITTEN_RECORD).unlink()
    manifest.write_text("[]")  # JSON, but no manifest
    with pytest.raises(ValidationError, match=rf"{manifest} holds a JSON list, not an object, and no"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    manifest.write_text(broken)

    # the command line refuses before any export
    monkeypatch.setattr(export_cli, "export_run", lambda *a, **k: pytest.fail("exported"))
    assert main(["export", str(run), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{manifest} is not valid JSON ({where})" in err and "add --force to rebuild the bundle" in err
    monkeypatch.undo()
    assert manifest.read_text() == broken

    export_run(run, out, ExportOptions(heldout_limit=0, force=True))
    assert _manifest(out)["task"] == "rerank" and unreadable_manifest(out) is None
    assert json.loads((out / WRITTEN_RECORD).read_text())["manifest.json"] == sha256_file(manifest)

    # with the record: the manifest's sha256 tells an edit, an unreadable one names where it broke
    manifest.write_text(broken)
    assert unreadable_manifest(out) is None and edited_manifest(out) == manifest
    with pytest.raises(ValidationError, match=rf"{manifest} was edited since the export wrote it \(its sha256 is "
                                              rf"not the one .*; it is not valid JSON \({re.escape(where)}\)\)"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    manifest.unlink()  # missing, the record says the export wrote it: replaced without --force
    assert unreadable_manifest(out) is None and edited_manifest(out) is None
    check_bundle_out(out)


def test_a_bundles_own_files_are_exactly_those_its_export_wrote(tmp_path) -> None:
    """Any *.json (.safetensors, .bin, ...) in a bundle's tokenizer/ or torch/ counted as the
    export's own where the manifest could not be read, so a user's JSON put there was deleted by
    the next export: the export's own files are those it wrote (its record; in an older bundle
    without one, what its tokenizer's save writes and what --torch-weights copies), and anything
    else is refused, named, and left where it was."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import torch_files

    run = rerank_run()
    out = tmp_path / "b"
    export_run(run, out, ExportOptions(heldout_limit=0, torch_weights=True))
    torch_copy = {str(p.relative_to(out)) for p in (out / "torch").rglob("*") if p.is_file()}
    assert torch_copy == {f"torch/{f}" for f in torch_files(run / "model")}  # what the export copies
    assert "torch/model.safetensors" in torch_copy and "torch/config.json" in torch_copy
    assert set(json.loads((out / WRITTEN_RECORD).read_text())) >= torch_copy | {"tokenizer/tokenizer.json"}
    (out / "manifest.json").unlink()  # its list of files gone: the record still knows them
    for mine in ("tokenizer/my_vocab_notes.json", "torch/my_eval.json"):
        (out / mine).write_text('{"keep": true}')
    with pytest.raises(ValidationError, match=r"holds 2 file\(s\) the bundle did not write "
                                              r"\(tokenizer/my_vocab_notes.json, torch/my_eval.json\)"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    (out / WRITTEN_RECORD).unlink()  # an older bundle, no record: its files by exact name
    with pytest.raises(ValidationError, match=r"holds 2 file\(s\) the bundle did not write "
                                              r"\(tokenizer/my_vocab_notes.json, torch/my_eval.json\)"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert (out / "tokenizer" / "my_vocab_notes.json").read_text() == '{"keep": true}'
    assert (out / "torch" / "my_eval.json").read_text() == '{"keep": true}' and not (out / "manifest.json").exists()
    (out / "tokenizer" / "my_vocab_notes.json").unlink()
    (out / "torch" / "my_eval.json").unlink()
    export_run(run, out, ExportOptions(heldout_limit=0))  # the export's own files alone: replaced
    assert _manifest(out)["task"] == "rerank" and not (out / "torch").exists()


def test_an_unreadable_written_record_is_named_as_such(tmp_path, monkeypatch, capsys) -> None:
    """A bundle whose .searchsmith-written.json could not be read was refused as 'holds 1 file(s)
    the bundle did not write (.searchsmith-written.json)': safe (nothing tells which files the
    export wrote) but it named the export's own record as a file of the user's. The refusal now
    says the record is unreadable, its JSON error, and the fix; the command line says it before
    any export, and the export runs once the record is gone."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import check_bundle_out, unreadable_record
    from searchsmith.serving.main import main
    from searchsmith.training import export_cli

    run = rerank_run()
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    record = out / WRITTEN_RECORD
    assert unreadable_record(out) is None
    for text, what in (('{"manifest.json": "ab"\n', r"is not valid JSON \(Expecting ',' delimiter: line 2 column 1 "
                                                      r"\(char 23\)\)"),
                       ('["manifest.json"]', r"holds a JSON list, not an object"),
                       ('{"manifest.json": 1}', r"does not map each file to its sha256"),
                       ("{}", r"names no file")):
        record.write_text(text)
        assert unreadable_record(out) is not None
        refusal = (rf"export --out {out}: {record}, the export's record of the files it wrote there, {what}: nothing "
                   r"tells which files in the folder the export wrote, so nothing was replaced\. Delete that record "
                   r"\(the bundle's files are then known by its manifest.json, as an older export's\) and export "
                   r"again, or give another --out")
        for force in (False, True):  # --force replaces an edited manifest, never an unknown file
            with pytest.raises(ValidationError, match=refusal):
                check_bundle_out(out, force=force)
        assert record.read_text() == text
    with pytest.raises(ValidationError, match=r"record of the files it wrote there, names no file"):
        export_run(run, out, ExportOptions(heldout_limit=0))

    monkeypatch.setattr(export_cli, "export_run", lambda *a, **k: pytest.fail("exported"))
    assert main(["export", str(run), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{record}, the export's record of the files it wrote there, names no file" in err
    assert "did not write" not in err and record.read_text() == "{}"
    monkeypatch.undo()

    record.unlink()  # the fix
    export_run(run, out, ExportOptions(heldout_limit=0))
    assert _manifest(out)["task"] == "rerank" and unreadable_record(out) is None
    assert json.loads(record.read_text())["manifest.json"] == sha256_file(out / "manifest.json")


def test_a_manifest_edited_since_the_export_is_kept_without_force(tmp_path, monkeypatch, capsys) -> None:
    """Exporting again into a bundle replaced its manifest.json even when its user had edited it
    since (hand-tuned thresholds or gates): refused before any work, naming the file and the fix,
    unless --force; an older bundle without the export's record is replaced as before."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import edited_manifest
    from searchsmith.serving.main import main
    from searchsmith.training import export_cli

    run = rerank_run()
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    manifest = out / "manifest.json"
    original = _manifest(out)["thresholds"]
    manifest.write_text(json.dumps({**_manifest(out), "thresholds": {**original, "min_score": 0.25}}, indent=2))
    edited = manifest.read_bytes()
    refusal = (rf"export --out {out}: {manifest} was edited since the export wrote it .*nothing was exported\. "
               r"Add --force to replace it .*or give another --out")
    with pytest.raises(ValidationError, match=refusal):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert manifest.read_bytes() == edited and not list(tmp_path.glob(".b.tmp-*"))

    # the command line refuses before any export, also for one bundle of a folder of runs
    monkeypatch.setattr(export_cli, "export_run", lambda *a, **k: pytest.fail("exported"))
    assert main(["export", str(run), "--out", str(out)]) == 1
    assert f"{manifest} was edited since the export wrote it" in capsys.readouterr().err
    runs, bundles = tmp_path / "runs", tmp_path / "bundles"
    for name in ("a", "z"):
        shutil.copytree(run, runs / name)
        shutil.copytree(bundle("rerank"), bundles / name)
    (bundles / "z" / "manifest.json").write_text(edited.decode())
    assert main(["export", str(runs), "--out", str(bundles)]) == 1
    assert f"{bundles / 'z' / 'manifest.json'} was edited since" in capsys.readouterr().err
    monkeypatch.undo()

    manifest.write_text("{bad")  # a hand edit gone wrong, or damage: changed since the export all the same
    with pytest.raises(ValidationError, match="manifest.json was edited since the export wrote it"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    (out / "tokenizer" / "mine.json").write_text("{}")  # --force replaces the manifest, never a user's file
    with pytest.raises(ValidationError, match=r"did not write \(tokenizer/mine.json\)"):
        export_run(run, out, ExportOptions(heldout_limit=0, force=True))
    (out / "tokenizer" / "mine.json").unlink()
    manifest.write_bytes(edited)
    assert main(["export", str(run), "--out", str(out), "--force", "--heldout-limit", "0"]) == 0
    assert _manifest(out)["thresholds"] == original and json.loads((out / WRITTEN_RECORD).read_text())[
        "manifest.json"] == sha256_file(manifest)

    # an older bundle, without the record nor the manifest's own check (manifest_sha256, newer than
    # both): its manifest is the export's own
    manifest.write_text(json.dumps({k: v for k, v in json.loads(edited).items() if k != MANIFEST_DIGEST}))
    (out / WRITTEN_RECORD).unlink()
    assert edited_manifest(out) is None
    export_run(run, out, ExportOptions(heldout_limit=0))
    assert _manifest(out)["thresholds"] == original and MANIFEST_DIGEST in _manifest(out)


def test_a_manifest_edited_after_its_record_was_deleted_is_still_kept(tmp_path, monkeypatch, capsys) -> None:
    """Deleting a bundle's .searchsmith-written.json made it an older export again, whose edited
    manifest.json the next export silently replaced: the manifest carries the sha256 of the rest
    of it (manifest_sha256), so without the record an edit is still refused (--force replaces
    it), an untouched manifest is replaced, and one without the field (an export older than it)
    is replaced as before."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.export import edited_manifest, manifest_digest
    from searchsmith.serving.main import main
    from searchsmith.training import export_cli

    run = rerank_run()
    out = tmp_path / "b"
    shutil.copytree(bundle("rerank"), out)
    manifest = out / "manifest.json"
    written = _manifest(out)
    assert written[MANIFEST_DIGEST] == manifest_digest(written) and len(written[MANIFEST_DIGEST]) == 64
    (out / WRITTEN_RECORD).unlink()
    assert edited_manifest(out) is None
    manifest.write_text(json.dumps(dict(reversed(written.items())), indent=4))  # the same content, laid out anew
    assert edited_manifest(out) is None

    original = written["thresholds"]
    manifest.write_text(json.dumps({**written, "thresholds": {**original, "min_score": 0.25}}, indent=2))
    edited = manifest.read_bytes()
    assert edited_manifest(out) == manifest
    with pytest.raises(ValidationError, match=rf"export --out {out}: {manifest} was edited since the export wrote "
                                              rf"it \(its content no longer matches the {MANIFEST_DIGEST} the "
                                              r"export wrote in it\); .*Add --force to replace it"):
        export_run(run, out, ExportOptions(heldout_limit=0))
    assert manifest.read_bytes() == edited and not (out / WRITTEN_RECORD).exists()
    monkeypatch.setattr(export_cli, "export_run", lambda *a, **k: pytest.fail("exported"))
    assert main(["export", str(run), "--out", str(out)]) == 1
    assert f"{manifest} was edited since the export wrote it" in capsys.readouterr().err
    monkeypatch.undo()
    export_run(run, out, ExportOptions(heldout_limit=0, force=True))
    assert _manifest(out)["thresholds"] == original and (out / WRITTEN_RECORD).is_file()

    (out / WRITTEN_RECORD).unlink()  # untouched: replaced, its record written again
    export_run(run, out, ExportOptions(heldout_limit=0))
    assert (out / WRITTEN_RECORD).is_file() and edited_manifest(out) is None
    # an export older than the field: test_a_manifest_edited_since_the_export_is_kept_without_force


def test_a_nested_manifest_json_is_one_of_the_bundles_files(tmp_path) -> None:
    """The manifest's sha256 list left out every file named manifest.json at any depth, so a model
    folder's own manifest.json copied by --torch-weights (torch/manifest.json) was neither checked
    nor recorded as the export's: exporting into the bundle again refused it as a file the bundle
    did not write. Only the top-level manifest.json is left out of the list."""
    from searchsmith.models.runtime import read_manifest, verify_files

    run = tmp_path / "run"
    shutil.copytree(rerank_run(), run)
    (run / "model" / "manifest.json").write_text('{"from": "the model folder"}')
    out = tmp_path / "b"
    m = export_run(run, out, ExportOptions(heldout_limit=0, torch_weights=True))
    assert m["files"]["torch/manifest.json"] == sha256_file(out / "torch" / "manifest.json")
    assert "manifest.json" not in m["files"]
    assert json.loads((out / WRITTEN_RECORD).read_text())["torch/manifest.json"] == m["files"]["torch/manifest.json"]
    verify_files(out, read_manifest(out))
    export_run(run, out, ExportOptions(heldout_limit=0, torch_weights=True))  # all its own: replaced
    (out / WRITTEN_RECORD).unlink()  # an older bundle: its own files are those its manifest lists
    export_run(run, out, ExportOptions(heldout_limit=0, torch_weights=True))
    assert (out / "torch" / "manifest.json").read_text() == '{"from": "the model folder"}'


def test_bundle_graphs_are_the_graphs_an_export_traces() -> None:
    """bundle_layout_files knows a bundle's graphs by name: the keys every *_graphs builder gives."""
    import inspect

    import export_fixtures as fx
    from searchsmith.models import onnx_graphs as og
    from searchsmith.models.export import BUNDLE_GRAPHS
    from searchsmith.models.runs import embedder_source, run_source
    from searchsmith.models.tokenizer import load_run_tokenizer

    def tok(src):
        return load_run_tokenizer(src.tokenizer_dir, src.model_dir, what="test")

    emb = embedder_source(str(fx.embedder_dir()))
    rerank, cite, read, dec, img = (run_source(r()) for r in (fx.rerank_run, fx.cite_run, fx.read_run,
                                                              fx.decompose_run, fx.images_run))
    graphs = {"embedder_graphs": og.embedder_graphs(emb.model_dir, tok(emb)),
              "rerank_graphs": og.rerank_graphs(rerank.model_dir, tok(rerank)),
              "cite_graphs": og.cite_graphs(cite.model_dir, tok(cite)),
              "read_graphs": og.read_graphs(read.model_dir, tok(read)),
              "decompose_graphs": og.decompose_graphs(dec.model_dir, tok(dec),
                                                      og.load_decomposer_model(dec.model_dir)[0]),
              "image_graphs": og.image_graphs(img.model_dir)[0]}
    builders = {name for name, _ in inspect.getmembers(og, inspect.isfunction) if name.endswith("_graphs")}
    assert set(graphs) == builders  # a new builder: add it here
    assert {name for specs in graphs.values() for name in specs} == set(BUNDLE_GRAPHS)


def test_the_current_folder_as_out_is_refused_and_dot_has_a_lock_beside_it(tmp_path, monkeypatch) -> None:
    """export --out . was pathlib's "PosixPath('.') has an empty name" (a lock beside '.'); a
    folder swapped in by rename must not be the one the user is in (helper-43's audit)."""
    from searchsmith.models.errors import ValidationError
    from searchsmith.models.io import exclusive, temp_dir_beside

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(ValidationError, match=r"--out \.: is the current folder, or holds it"):
        export_run(rerank_run(), ".", ExportOptions(heldout_limit=0))
    with pytest.raises(ValidationError, match="is the current folder, or holds it"):
        export_run(rerank_run(), str(tmp_path), ExportOptions(heldout_limit=0))
    assert list(here.iterdir()) == []
    with exclusive(".", "train"):  # a run into the current folder locks it from beside it
        assert (tmp_path / ".here.lock").is_file()
    tmp = temp_dir_beside(Path("."))
    assert tmp.parent == tmp_path and tmp.name.startswith(".here.tmp-")


def test_a_killed_writers_temporary_folders_are_removed_by_the_next_write(tmp_path) -> None:
    """A SIGKILLed export left .bundle.tmp-PID-NS beside --out and its work folder in /tmp for
    good (helper-43's audit): the next write beside the same path removes those of dead
    processes, never a live one's."""
    import os
    import subprocess
    import sys

    from searchsmith.models.io import remove_dead_temps, temp_dir_beside

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = int(gone.stdout)
    stale = tmp_path / f".bundle.tmp-{dead}-123"
    stale.mkdir()
    (stale / "tokenizer.json").write_text("{}")
    live = tmp_path / ".bundle.tmp-1-456"  # pid 1 lives as long as the machine
    live.mkdir()
    mine = tmp_path / f".bundle.tmp-{os.getpid()}-789"
    mine.mkdir()
    other = tmp_path / f".other.tmp-{dead}-1"  # another path's: not this write's to judge
    other.mkdir()
    fresh = temp_dir_beside(tmp_path / "bundle")
    assert not stale.exists() and live.is_dir() and mine.is_dir() and other.is_dir() and fresh.is_dir()
    work = tmp_path / f"searchsmith-export-pid{dead}-abc"
    work.mkdir()
    assert remove_dead_temps(tmp_path, "searchsmith-export-pid*", marker="searchsmith-export-pid") == [work]
