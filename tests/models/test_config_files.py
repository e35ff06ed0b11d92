"""Reading a YAML config file (models.config.read_yaml): every bad file gets a clear error that
names it and says what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
from searchsmith.models.config import from_dict, read_yaml
from searchsmith.models.errors import ConfigError


def test_a_yaml_mapping_is_read(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("retrieval:\n  retrieve_k: 7\n", encoding="utf-8")
    assert read_yaml(path) == {"retrieval": {"retrieve_k": 7}}
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert read_yaml(empty) == {}


@pytest.mark.parametrize("path", ["", "   "])
def test_an_empty_path_is_refused_as_empty(path):
    # it used to say "config file '.' does not exist"
    with pytest.raises(ConfigError, match=r"config file path is empty: give the path of a YAML file"):
        read_yaml(path)


def test_a_folder_is_refused_as_a_folder(tmp_path):
    # it suggested pipeline.yaml whatever the folder held, a recipe's folder too
    with pytest.raises(ConfigError, match=r"is a folder, not a file: give the path of a YAML file$"):
        read_yaml(tmp_path)
    (tmp_path / "minilm_full.yaml").write_text("recipe: reranker\n")
    with pytest.raises(ConfigError, match=r"give the path of a YAML file \(it holds minilm_full\.yaml\)"):
        read_yaml(tmp_path)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' does not exist \(check the path\)"):
        read_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("content", "error"), [
    (b"retrieval: [1, 2\n", r"not valid YAML"),
    (b"\xff\xfe\x00bad", r"not UTF-8 text"),
    (b"- a\n- b\n", r"expected a mapping at the top level, got list"),
])
def test_a_bad_file_is_refused_naming_it(tmp_path, content, error):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"bad\.yaml: {error}"):
        read_yaml(path)


def _laughs(depth: int) -> str:
    lines = ["recipe: reranker", "l0: &l0 [aaaaaaaaaa, aaaaaaaaaa, aaaaaaaaaa, aaaaaaaaaa, aaaaaaaaaa]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


def test_yaml_aliases_that_expand_past_any_config_are_refused(tmp_path):
    """A 400-byte recipe of nested aliases gave a 68 MB error message (depth 6) or ran out of
    memory (depth 8), since each bad value was printed whole (found by probing, 2026-12-06)."""
    import time

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_laughs(8) + "optim:\n  lr: *l8\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"expands to over 1,000,000 values through its anchors and aliases"):
        read_yaml(bomb)
    assert time.perf_counter() - t0 < 10
    loop = tmp_path / "loop.yaml"
    loop.write_text("recipe: reranker\nk: &a [*a, *a]\n")
    with pytest.raises(ConfigError, match="refers to itself"):
        read_yaml(loop)
    shared = tmp_path / "shared.yaml"  # anchors used as they are meant to be: fine
    shared.write_text("a: &d {x: 1, y: [1, 2]}\nb: *d\nc: *d\n")
    assert read_yaml(shared)["c"] == {"x": 1, "y": [1, 2]}


def test_a_bad_value_is_shown_cut_short():
    @dataclass(frozen=True)
    class Optim:
        lr: float = 1.0

    big = [[list(range(1000))] * 1000] * 1000
    with pytest.raises(ConfigError) as err:
        from_dict(Optim, {"lr": big})
    assert len(str(err.value)) < 400 and "lr: expected a number, got list [[" in str(err.value)


def test_the_hints_fit_the_mistake():
    @dataclass(frozen=True)
    class Train:
        mixed_precision: Literal["no", "fp16", "bf16"] = "no"
        lr: float = 1.0

    with pytest.raises(ConfigError, match=r"got False \(YAML reads yes/no/on/off without quotes as true/false: "
                                          r"write the value in quotes"):
        from_dict(Train, {"mixed_precision": False})  # mixed_precision: no
    with pytest.raises(ConfigError, match=r"write 2\.0e-5"):
        from_dict(Train, {"lr": "2e-5"})
    with pytest.raises(ConfigError) as err:
        from_dict(Train, {"lr": "nan"})  # it was told PyYAML reads 2e-5 as a string
    assert "2.0e-5" not in str(err.value) and ".nan" in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_no_float_setting_takes_nan_or_inf(value):
    """optim.lr=.inf trained until 'loss is nan'; protocol.alpha=.nan made every LinUCB score NaN
    and citation thresholds at .nan compared false with everything (probing, 2026-12-06)."""

    @dataclass(frozen=True)
    class Section:
        threshold: float = 0.5
        maybe: float | None = None

    with pytest.raises(ConfigError, match=r"threshold: expected a finite number, got .*\n  maybe: expected a finite"):
        from_dict(Section, {"threshold": value, "maybe": value})


def test_an_override_into_a_value_that_is_not_a_mapping_names_where_it_is_set():
    from searchsmith.models.config import apply_overrides

    with pytest.raises(ConfigError, match=r"override 'optim.lr=1.0e-3': 'optim' is set to 5 \(in the config file or "
                                          r"an earlier override\), not a mapping of keys; fix optim there"):
        apply_overrides({"optim": 5}, ["optim.lr=1.0e-3"])
    with pytest.raises(ConfigError, match=r"'a.b' is set to 'x'"):
        apply_overrides({"a": {"b": "x"}}, ["a.b.c=1"])
    assert apply_overrides({"optim": 5}, ["optim={lr: 1.0e-3}"]) == {"optim": {"lr": 1.0e-3}}


@dataclass(frozen=True)
class _Queue:
    size: int = 32
    wait: float = 2.0


@dataclass(frozen=True)
class _Server:
    calls: _Queue = field(default_factory=lambda: _Queue(size=1, wait=0.0))
    batch: _Queue = field(default_factory=_Queue)


def test_a_partial_section_keeps_the_settings_its_default_is_built_with():
    cfg = from_dict(_Server, {"calls": {"wait": 5.0}, "batch": {"wait": 1.0}})
    assert cfg.calls == _Queue(size=1, wait=5.0) and cfg.batch == _Queue(size=32, wait=1.0)
    assert from_dict(_Server, {}).calls == _Queue(size=1, wait=0.0)


def test_a_bare_string_of_overrides_is_refused_not_read_a_character_at_a_time() -> None:
    from searchsmith.models.config import apply_overrides
    from searchsmith.serving.pipeline.config import load_pipeline_config

    with pytest.raises(ConfigError, match=r"overrides: expected a list of KEY=VALUE strings.*wrap it in a list"):
        load_pipeline_config(overrides="retrieval.keep_ratio=0.5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected a KEY=VALUE string, got int"):
        apply_overrides({}, [3])  # type: ignore[list-item]
    assert load_pipeline_config(overrides=["retrieval.keep_ratio=0.5"]).retrieval.keep_ratio == 0.5
