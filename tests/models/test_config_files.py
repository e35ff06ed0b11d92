"""Reading a YAML config file (models.config.read_yaml): every bad file gets a clear error that
names it and says what to do."""

from __future__ import annotations

import pytest
from searchsmith.models.config import read_yaml
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
    with pytest.raises(ConfigError, match=r"is a folder, not a file: give the path of a YAML file in it "
                                          r"\(e\.g\. '.*pipeline\.yaml'\)"):
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
