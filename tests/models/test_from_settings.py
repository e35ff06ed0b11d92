"""models.hub.from_settings: the one way a recipe's ``config:`` mapping becomes a random-init model
(reranker, reader, citation and the images text tower used four copies of it)."""

from __future__ import annotations

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.models.hub import from_settings

TINY = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 37, "vocab_size": 99}


def test_builds_the_config_with_the_callers_extras() -> None:
    a, b = from_settings(TINY, "model.config", lambda config: (config(num_labels=3), config(num_labels=1)))
    assert (a.model_type, a.hidden_size, a.num_labels, b.num_labels) == ("bert", 32, 3, 1)


def test_no_model_type_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"^text.config: needs 'model_type'"):
        from_settings({"hidden_size": 32}, "text.config", lambda config: config())


def test_a_setting_transformers_refuses_is_a_config_error_even_while_building_the_model() -> None:
    from transformers import AutoModel

    with pytest.raises(ConfigError, match=r"^model.config: .*"):  # 30 is not a multiple of 4 heads
        from_settings({**TINY, "hidden_size": 30, "num_attention_heads": 4}, "model.config",
                      lambda config: AutoModel.from_config(config()))
    with pytest.raises(ConfigError, match=r"^model.config: "):
        from_settings({"model_type": "no-such-model"}, "model.config", lambda config: config())


def test_a_key_both_in_the_settings_and_the_extras_is_said_not_overridden() -> None:
    with pytest.raises(ConfigError, match="num_labels"):
        from_settings({**TINY, "num_labels": 5}, "model.config", lambda config: config(num_labels=1))
