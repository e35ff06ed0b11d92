"""A cold ``searchsmith ask`` with an embed bundle: no torch, no transformers model registry,
the same answer as the index's torch embedder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from searchsmith.models.errors import ConfigError
from searchsmith.serving.pipeline.config import load_pipeline_config
from searchsmith.serving.pipeline.pipeline import load_pipeline

QUESTION = "Where is the Lumen cache eviction policy implemented?"
# Run the CLI in a fresh interpreter and report which heavy modules it imported.
PROBE = ("import json, sys; from searchsmith.serving.main import main; rc = main(sys.argv[1:]); "
         "print(json.dumps({'rc': rc, 'heavy': sorted(m for m in ('torch', 'transformers.models.auto', "
         "'sentence_transformers') if m in sys.modules)}))")


def _config(tmp_path, index, bundle) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"index": str(index), "bundles": {"embedder": str(bundle)}}))
    return str(path)


def test_cold_ask_imports_no_torch_and_answers_as_the_torch_embedder(tmp_path, small_index, minilm_embed_bundle,
                                                                      embedder):
    cfg = _config(tmp_path, small_index, minilm_embed_bundle)
    proc = subprocess.run([sys.executable, "-c", PROBE, "ask", QUESTION, "--config", cfg, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    answer_line, probe_line = proc.stdout.strip().splitlines()[-2:]
    assert json.loads(probe_line) == {"rc": 0, "heavy": []}
    cold = json.loads(answer_line)

    pipe = load_pipeline(load_pipeline_config(None, []), str(small_index), embedder=embedder)
    try:
        warm = pipe.ask(QUESTION)
    finally:
        pipe.close()
    assert cold["answer"] == warm["answer"] and "lumen/evict.py" in cold["answer"]
    assert [r["doc_id"] for r in cold["references"]] == [r["doc_id"] for r in warm["references"]]
    assert cold["trace"]["sources"] == warm["trace"]["sources"]


def _copy_with_manifest(bundle, folder, **changes):
    """A copy of ``bundle`` whose manifest has ``changes`` (the files stay as they are)."""
    shutil.copytree(bundle, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, **changes}))
    return folder


def test_an_embed_bundle_of_another_model_is_refused(tmp_path, small_index, minilm_embed_bundle):
    other = _copy_with_manifest(minilm_embed_bundle, tmp_path / "other", base_model="someone/another-model")
    cfg = load_pipeline_config(_config(tmp_path, small_index, other), [])
    with pytest.raises(ConfigError, match=r"bundles.embedder: .* was exported from someone/another-model .* "
                                          r"but the index was built with"):
        load_pipeline(cfg)


def test_a_bundle_of_another_task_under_embedder_is_refused(tmp_path, small_index, minilm_embed_bundle):
    other = _copy_with_manifest(minilm_embed_bundle, tmp_path / "rerank-like", task="rerank")
    with pytest.raises(ConfigError, match="is a 'rerank' bundle, expected a 'embed' bundle"):
        load_pipeline(load_pipeline_config(_config(tmp_path, small_index, other), []))
