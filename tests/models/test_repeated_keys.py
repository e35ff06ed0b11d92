"""A key written twice in one object (JSON) or mapping (YAML) is refused with where it stands:
JSON and YAML readers keep the last value and lose the first without a word."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.config import RepeatedYamlKeyError, apply_overrides, load_yaml, read_yaml
from searchsmith.models.errors import ConfigError, ValidationError
from searchsmith.models.jsonl import RepeatedKeyError, find_lone_surrogate, loads_unique, read_jsonl


def test_loads_unique_reads_what_json_reads() -> None:
    text = '{"a": 1, "b": [{"x": 1}, {"y": [1, {"z": null}]}], "c": "\\u00e9"}'
    assert loads_unique(text) == json.loads(text)
    assert loads_unique(text.encode()) == json.loads(text)
    assert loads_unique("[1, 2]") == [1, 2]
    with pytest.raises(json.JSONDecodeError):
        loads_unique("{not json")


@pytest.mark.parametrize(("text", "loc", "key", "field"), [
    ('{"input": "a", "input": "b"}', (), "input", "input"),
    ('{"documents": [{"id": "1"}, {"id": "2", "text": "t", "id": "3"}]}', ("documents", 1), "id", "documents[1].id"),
    ('[{"q": {"z": 1, "z": 1}}]', (0, "q"), "z", "[0].q.z"),
])
def test_a_repeated_key_is_found_where_it_stands(text, loc, key, field) -> None:
    with pytest.raises(RepeatedKeyError) as err:
        loads_unique(text)
    assert (err.value.loc, err.value.key, err.value.field) == (loc, key, field)
    assert "written twice" in str(err.value) and field in str(err.value)


def test_the_first_repeated_key_in_document_order_is_named() -> None:
    with pytest.raises(RepeatedKeyError) as err:
        loads_unique('{"a": {"k": 1, "k": 2}, "b": {"j": 1, "j": 2}}')
    assert err.value.field == "a.k"


def test_the_surrogate_walk_is_unchanged_by_the_shared_walker() -> None:
    found = find_lone_surrogate({"a": ["ok", {"b": "x\ud800"}]})
    assert found is not None and found.field == "a[1].b" and found.index == 1


def test_a_jsonl_line_with_a_repeated_key_is_refused_at_its_line(tmp_path) -> None:
    p = tmp_path / "data.jsonl"
    p.write_text('{"query": "a"}\n{"query": "b", "answer": "c", "query": "d"}\n', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"data.jsonl:2: key 'query' is written twice"):
        read_jsonl(p, ("query",), "--data")


def test_a_yaml_config_with_a_section_written_twice_is_refused_with_both_lines(tmp_path) -> None:
    p = tmp_path / "serve.yaml"
    p.write_text("server:\n  port: 8001\nbundles:\n  embedder: a\nserver:\n  port: 9000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"key 'server' is written twice in one mapping \(lines 1 and 5\)"):
        read_yaml(p)


def test_a_yaml_key_written_twice_in_a_nested_mapping_is_refused() -> None:
    with pytest.raises(RepeatedYamlKeyError) as err:
        load_yaml("optim:\n  lr: 1.0e-4\n  batch_size: 8\n  lr: 3.0e-5\n")
    assert (err.value.key, err.value.first_line, err.value.line) == ("lr", 2, 4)


def test_yaml_merge_keys_may_still_be_overridden() -> None:
    data = load_yaml("base: &b {lr: 1, steps: 2}\nrun:\n  <<: *b\n  lr: 3\n")
    assert data["run"] == {"lr": 3, "steps": 2}


def test_an_override_value_with_a_repeated_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="written twice"):
        apply_overrides({}, ["data.weights={a: 1, a: 2}"])


def test_a_history_file_with_a_repeated_key_is_refused(tmp_path) -> None:
    from searchsmith.serving.cli import read_history_file

    whole = tmp_path / "h.json"
    whole.write_text('[{"role": "user", "content": "a", "content": "b"}]', encoding="utf-8")
    with pytest.raises(ValidationError, match=r"--history .*h.json: key 'content' is written twice .*\[0\].content"):
        read_history_file(str(whole))
    lines = tmp_path / "h.jsonl"
    lines.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "role": "user", "content": "b"}\n',
                     encoding="utf-8")
    with pytest.raises(ValidationError, match=r"h.jsonl:2: key 'role' is written twice"):
        read_history_file(str(lines))


def test_sweep_values_that_are_not_yaml_are_a_config_error() -> None:
    """They were a YAML traceback."""
    from searchsmith.serving.sweep import parse_values

    with pytest.raises(ConfigError, match=r"--values: '\{a' is not a YAML value"):
        parse_values("{a,b}", "citation.threshold")
    assert parse_values("0.4,0.6", "citation.threshold") == [0.4, 0.6]


def test_a_tab_indented_config_says_yaml_indents_with_spaces(tmp_path) -> None:
    p = tmp_path / "serve.yaml"
    p.write_text("server:\n\tport: 8001\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="YAML indents with spaces, not tabs"):
        read_yaml(p)
