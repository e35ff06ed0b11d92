from __future__ import annotations

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.pipeline.config import PipelineConfig, load_pipeline_config


def test_paper_thresholds_are_config_defaults():
    cfg = PipelineConfig()
    assert cfg.retrieval.dedup_threshold == 0.8
    assert cfg.retrieval.keep_ratio == 0.7
    assert cfg.citation.cosine_threshold == 0.6
    assert cfg.timeline.merge_threshold == 0.9
    assert cfg.images.threshold == 0.3
    assert set(cfg.presets) == {"turbo", "small", "large"}
    assert not cfg.presets["turbo"].rewrite and not cfg.presets["turbo"].decompose


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("retrieval:\n  keep_ratio: 0.5\ngeneration:\n  backend: extractive\n")
    cfg = load_pipeline_config(p, ["citation.cosine_threshold=0.7"])
    assert cfg.retrieval.keep_ratio == 0.5 and cfg.citation.cosine_threshold == 0.7


def test_unknown_key_suggests_closest(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("retrieval:\n  keep_ratoi: 0.5\n")
    with pytest.raises(ConfigError, match="retrieval.keep_ratoi: unknown key; did you mean 'keep_ratio'"):
        load_pipeline_config(p)


def test_keep_ratio_out_of_range():
    with pytest.raises(ConfigError, match=r"keep_ratio must be in \(0, 1\]"):
        load_pipeline_config(None, ["retrieval.keep_ratio=1.5"])


def test_unknown_backend():
    with pytest.raises(ConfigError, match="generation.backend: expected one of"):
        load_pipeline_config(None, ["generation.backend=gpt"])


@pytest.mark.parametrize("key", ["generation.step_answers", "generation.reader.question", "generation.reader.read",
                                 "generation.extractive.node_answer"])
def test_multi_hop_answer_settings_name_their_choices(key):
    with pytest.raises(ConfigError, match=rf"{key}: expected one of"):
        load_pipeline_config(None, [f"{key}=maybe"])


def test_default_preset_must_exist():
    with pytest.raises(ConfigError, match="protocol.default_preset 'huge' is not a preset"):
        load_pipeline_config(None, ["protocol.default_preset=huge"])


def test_string_number_hint():
    with pytest.raises(ConfigError, match="write 2.0e-5"):
        load_pipeline_config(None, ["protocol.alpha='2e-5'"])


def test_unknown_stage(make_pipeline):
    with pytest.raises(ConfigError, match="unknown stage 'citations'; did you mean 'citation'"):
        make_pipeline(stages=["context", "routing", "retrieval", "generation", "citations"])


def test_stage_order_checked(make_pipeline):
    with pytest.raises(ConfigError, match=r"'citation' reads \['answer', 'answer_found', 'used_passages'\], "
                                          r"which no earlier stage writes"):
        make_pipeline(stages=["context", "routing", "decomposition", "retrieval", "citation", "generation"])


def test_required_stage(make_pipeline):
    with pytest.raises(ConfigError, match="'generation' is required"):
        make_pipeline(stages=["context", "routing", "decomposition", "retrieval"])


def test_unknown_bundle_role(make_pipeline):
    with pytest.raises(ConfigError, match="unknown bundle role"):
        make_pipeline(bundles={"rerankr": object()})


def test_no_index_is_a_clear_error():
    from searchsmith.serving.pipeline.pipeline import load_pipeline

    with pytest.raises(ConfigError, match="pass --index DIR"):
        load_pipeline(PipelineConfig())


def test_bundle_of_the_wrong_task(monkeypatch):
    import searchsmith.models.runtime as runtime
    from searchsmith.serving.pipeline.common import load_optional_bundle

    class Fake:
        task = "rerank"

    monkeypatch.setattr(runtime, "load_bundle", lambda path, **kw: Fake())
    assert load_optional_bundle(None, "cite", "auto", "auto", None) is None
    with pytest.raises(ConfigError, match="is a 'rerank' bundle, expected a 'cite' bundle"):
        load_optional_bundle("/b", "cite", "auto", "auto", None)
    Fake.task = "embed"
    with pytest.raises(ConfigError, match=r"^bundles.citation: /b is an 'embed' bundle"):
        load_optional_bundle("/b", "cite", "auto", "auto", None, key="bundles.citation")
    monkeypatch.undo()
    from searchsmith.models.errors import BundleError

    with pytest.raises(BundleError, match=r"^bundles.reranker: bundle: 'no/such' is not a folder"):
        load_optional_bundle("no/such", "rerank", "auto", "auto", None, key="bundles.reranker")


def test_an_override_of_one_preset_keeps_the_other_presets(tmp_path) -> None:
    from searchsmith.serving.pipeline.config import load_pipeline_config

    cfg = load_pipeline_config(None, ["presets.large.rerank=false"])
    assert set(cfg.presets) == {"turbo", "small", "large"}
    assert cfg.presets["large"].rerank is False and cfg.presets["small"].rerank is True
    assert cfg.presets["large"].decompose is True  # the rest of the preset keeps its defaults
    # a presets table the file writes itself is the file's: the override changes only its key
    path = tmp_path / "p.yaml"
    path.write_text("presets:\n  large: {}\nprotocol:\n  default_preset: large\n")
    cfg = load_pipeline_config(str(path), ["presets.large.images=false"])
    assert set(cfg.presets) == {"large"} and cfg.presets["large"].images is False
    # an override of a plain key still works, and an unknown key is still refused
    assert load_pipeline_config(None, ["retrieval.keep_ratio=0.5"]).retrieval.keep_ratio == 0.5
    import pytest
    from searchsmith.models.errors import ConfigError

    with pytest.raises(ConfigError):
        load_pipeline_config(None, ["presets.large.nonsense=1"])
