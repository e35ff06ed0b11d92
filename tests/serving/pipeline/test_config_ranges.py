"""The pipeline config refuses out-of-range and non-finite settings, naming the dotted key.

Each of these was accepted and changed the answers silently (no citations, every question
"not found", the protocol router stuck on its first preset), or failed late without naming
the key. The values the project's ablations and sweeps use stay valid.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.runtime import load_bundle, max_threads
from searchsmith.serving.pipeline.config import (
    BundlesConfig,
    CitationConfig,
    CostConfig,
    GenerationConfig,
    ImagesConfig,
    OpenAIConfig,
    PipelineConfig,
    Preset,
    ProtocolConfig,
    TimelineConfig,
    load_pipeline_config,
)
from searchsmith.serving.pipeline.protocol import LinUCBRouter

NAN, INF = float("nan"), float("inf")


# -- 1. thresholds, counts and weights ------------------------------------------------------
@pytest.mark.parametrize(("override", "key"), [
    ("citation.cosine_threshold=2", "citation.cosine_threshold"),
    ("citation.cosine_threshold=-1.5", "citation.cosine_threshold"),
    ("citation.support_threshold=1.5", "citation.support_threshold"),
    ("citation.max_per_sentence=-1", "citation.max_per_sentence"),
    ("citation.max_per_sentence=0", "citation.max_per_sentence"),
    ("generation.no_answer_threshold=2", "generation.no_answer_threshold"),
    ("generation.max_context_chars=-1", "generation.max_context_chars"),
    ("generation.openai.max_tokens=0", "generation.openai.max_tokens"),
    ("generation.openai.temperature=-5", "generation.openai.temperature"),
    ("generation.hf.max_input_tokens=0", "generation.hf.max_input_tokens"),
    ("generation.extractive.lexical_weight=-1", "generation.extractive.lexical_weight"),
    ("presets.large.retrieve_k=0", "presets.<name>.retrieve_k"),
    # unbounded before: 10**11 took 10.7 s a question on the demo index (helper-44's audit)
    ("retrieval.retrieve_k=100000000000", "retrieval.retrieve_k"),
    ("retrieval.lexical_k=1001", "retrieval.lexical_k"),
    ("presets.large.retrieve_k=1001", "presets.<name>.retrieve_k"),
    ("presets.large.retrieve_k=-4", "presets.<name>.retrieve_k"),
    ("images.threshold=1.5", "images.threshold"),
    ("images.max_candidates=0", "images.max_candidates"),
    ("images.min_side_px=-1", "images.min_side_px"),
    ("images.image_paragraph_weight=0", "images.image_paragraph_weight"),
    ("images.caption_paragraph_weight=-0.3", "images.caption_paragraph_weight"),
    ("images.image_query_weight=-1", "images.image_query_weight"),
    ("timeline.merge_threshold=2", "timeline.merge_threshold"),
    ("cost.per_second=-1", "cost.per_second"),
    ("protocol.alpha=-1", "protocol.alpha"),
    ("protocol.ridge=0", "protocol.ridge"),
])
def test_out_of_range_setting_is_refused_naming_its_key(override, key):
    with pytest.raises(ConfigError, match=rf"{re.escape(key)} must be"):
        load_pipeline_config(None, [override])


def test_preset_retrieve_k_error_names_the_preset():
    with pytest.raises(ConfigError, match=r"presets\.large: presets\.<name>\.retrieve_k must be a whole number >= 1 "
                                          r"or null \(retrieval\.retrieve_k\), got -4"):
        load_pipeline_config(None, ["presets.large.retrieve_k=-4"])


def test_no_answer_threshold_range_follows_the_support_score():
    """support = cosine + extractive.lexical_weight x overlap: at most 1.5 by default, so 2
    answered every question "No answer found"; with a heavier lexical weight 2 is reachable."""
    with pytest.raises(ConfigError, match=r"generation\.no_answer_threshold must be a finite number in \[-1, 1\.5\]"):
        load_pipeline_config(None, ["generation.no_answer_threshold=2"])
    cfg = load_pipeline_config(None, ["generation.no_answer_threshold=2", "generation.extractive.lexical_weight=1.5"])
    assert cfg.generation.no_answer_threshold == 2.0
    assert load_pipeline_config(None, ["generation.no_answer_threshold=null"]).generation.no_answer_threshold is None


@pytest.mark.parametrize(("build", "key"), [
    (lambda v: CitationConfig(cosine_threshold=v), "citation.cosine_threshold"),
    (lambda v: CitationConfig(support_threshold=v), "citation.support_threshold"),
    (lambda v: GenerationConfig(no_answer_threshold=v), "generation.no_answer_threshold"),
    (lambda v: OpenAIConfig(temperature=v), "generation.openai.temperature"),
    (lambda v: OpenAIConfig(retry_backoff_s=v), "generation.openai.retry_backoff_s"),
    (lambda v: TimelineConfig(merge_threshold=v), "timeline.merge_threshold"),
    (lambda v: ImagesConfig(threshold=v), "images.threshold"),
    (lambda v: ImagesConfig(image_paragraph_weight=v), "images.image_paragraph_weight"),
    (lambda v: ImagesConfig(caption_paragraph_weight=v), "images.caption_paragraph_weight"),
    (lambda v: ImagesConfig(image_query_weight=v), "images.image_query_weight"),
    (lambda v: CostConfig(per_second=v), "cost.per_second"),
    (lambda v: CostConfig(per_1k_tokens=v), "cost.per_1k_tokens"),
    (lambda v: CostConfig(per_model_call=v), "cost.per_model_call"),
    (lambda v: ProtocolConfig(alpha=v), "protocol.alpha"),
    (lambda v: ProtocolConfig(ridge=v), "protocol.ridge"),
    (lambda v: ProtocolConfig(cost_lambda=v), "protocol.cost_lambda"),
])
@pytest.mark.parametrize("value", [NAN, INF])
def test_non_finite_float_is_refused_naming_its_key(build, key, value):
    """Built in code too (not only through the YAML loader): a NaN threshold compares False with
    every score (citations, refusals, merges silently off), a NaN alpha or ridge made every
    LinUCB score NaN (the first preset always chosen), an infinite cost_lambda a reward of -inf."""
    with pytest.raises(ValueError, match=rf"{re.escape(key)} must be a finite number"):
        build(value)


def test_the_ablations_and_sweeps_values_stay_valid():
    """1.01 switches the citation fallback and the timeline merge off, -1 keeps every image
    (serving/ablation.py); the report's sweeps try values around each default."""
    from searchsmith.serving.ablation import STAGES
    from searchsmith.serving.report import SWEEPS

    for stage in STAGES.values():
        stage.off(PipelineConfig())  # the dataclasses validate the switched-off value
    for key, (full, quick) in SWEEPS.items():
        if key.startswith("index."):
            continue
        for value in (*full, *(quick or ())):
            load_pipeline_config(None, [f"{key}={value}"])
    cfg = load_pipeline_config(None, ["citation.cosine_threshold=1.01", "timeline.merge_threshold=1.01",
                                      "images.threshold=-1.0", "images.min_side_px=0", "cost.per_second=0",
                                      "protocol.alpha=0", "protocol.cost_lambda=0", "citation.support_threshold=1",
                                      "generation.openai.temperature=0", "images.image_query_weight=0"])
    assert cfg.citation.cosine_threshold == 1.01 and cfg.images.threshold == -1.0


def test_preset_retrieve_k_none_means_the_retrieval_default():
    assert Preset().retrieve_k is None and Preset(retrieve_k=3).retrieve_k == 3
    with pytest.raises(ValueError, match="retrieve_k must be a whole number >= 1"):
        replace(Preset(), retrieve_k=0)


# -- 2. protocol.state_path -----------------------------------------------------------------
@pytest.mark.parametrize("content", [[1, 2], "a string", 3])
def test_state_file_not_an_object_is_a_clear_error(tmp_path, content):
    """A list or a string used to fail with AttributeError in load."""
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(content))
    with pytest.raises(BundleError, match=rf"protocol\.state_path .*mine\.json: holds a JSON {type(content).__name__}, "
                                          r"not a saved bandit state.*point protocol\.state_path at a new file"):
        LinUCBRouter(["a"], ProtocolConfig(state_path=str(path)))


def test_state_arms_not_an_object_is_a_clear_error(tmp_path):
    path = tmp_path / "bandit.json"
    router = LinUCBRouter(["a"], ProtocolConfig())
    state = router.state_dict()
    path.write_text(json.dumps({**state, "arms": ["a"]}))
    with pytest.raises(BundleError, match=r"bandit\.json: 'arms' is not an object"):
        LinUCBRouter(["a"], ProtocolConfig(state_path=str(path)))


def test_unreadable_state_says_to_use_a_new_file_not_to_delete_it(tmp_path):
    path = tmp_path / "bandit.json"
    path.write_text("{not json")
    with pytest.raises(BundleError, match="bandit.json: unreadable") as err:
        LinUCBRouter(["a"], ProtocolConfig(state_path=str(path)))
    assert "point protocol.state_path at a new file (or move this one away)" in str(err.value)
    assert "delete" not in str(err.value)


def test_state_path_folder_is_refused_before_any_feedback(tmp_path):
    """A folder used to fail only at the first feedback (IsADirectoryError), after the bandit's
    update was applied in memory."""
    with pytest.raises(ConfigError, match=r"protocol\.state_path '.*' is a folder; give the path of a JSON file"):
        load_pipeline_config(None, [f"protocol.state_path={tmp_path}"])
    later = tmp_path / "made-later"
    cfg = ProtocolConfig(state_path=str(later))
    later.mkdir()
    with pytest.raises(BundleError, match=r"protocol\.state_path .*made-later: is a folder"):
        LinUCBRouter(["a"], cfg)


# -- 3. bundles.threads ---------------------------------------------------------------------
@pytest.mark.parametrize("threads", [0, -2, 1_000_000])
def test_bundles_threads_out_of_range_is_refused_at_load(threads):
    with pytest.raises(ConfigError, match=r"bundles\.threads must be"):
        load_pipeline_config(None, [f"bundles.threads={threads}"])


def test_bundles_threads_cap_is_the_runtimes():
    cap = max_threads()
    assert BundlesConfig(threads=cap).threads == cap and BundlesConfig().threads is None
    with pytest.raises(ValueError, match=rf"bundles\.threads must be at most {cap}"):
        BundlesConfig(threads=cap + 1)
    # load_bundle checks the same cap before it reads the bundle
    with pytest.raises(ConfigError, match=rf"load_bundle: threads must be at most {cap}"):
        load_bundle("no-such-bundle", threads=cap + 1)



def test_an_empty_state_path_is_refused_not_memory_only() -> None:
    from searchsmith.serving.pipeline.config import ProtocolConfig

    with pytest.raises(ValueError, match="protocol.state_path is empty"):
        ProtocolConfig(state_path="  ")
    assert ProtocolConfig(state_path=None).state_path is None
