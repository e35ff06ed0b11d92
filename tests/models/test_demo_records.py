"""The demo source files: typed loading, and the errors a hand edit can cause."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from searchsmith.models.demo import generate as gen
from searchsmith.models.demo.records import SOURCE_DIR, SOURCE_FILES, load_source
from searchsmith.models.errors import ValidationError


@pytest.fixture
def source_copy(tmp_path: Path) -> Path:
    for name in SOURCE_FILES:
        shutil.copy(SOURCE_DIR / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_every_source_file_is_read_and_typed() -> None:
    src = load_source()
    assert sorted(p.name for p in SOURCE_DIR.glob("*.yaml")) == sorted(SOURCE_FILES)
    assert len(src.products) == 8 and len(src.planets) == 8
    assert src.product("Quarry").releases[0].version == "1.0"  # text, as written
    assert src.planet("Earth").au == "1.00"
    assert isinstance(src.product("Quarry").port, int)
    assert all(isinstance(u, float) for u in src.uptime_2024)


def test_an_unquoted_version_or_date_is_rejected_with_the_fix(source_copy: Path) -> None:
    _edit(source_copy / "products.yaml", "version: '1.0'\n        date: '2021-04-20'",
          "version: 1.0\n        date: 2021-04-20")
    with pytest.raises(ValidationError) as e:
        load_source(source_copy)
    msg = str(e.value)
    # Both problems at once, each with the file, the path to the field and the fix.
    assert "products.yaml: products[0].releases[0].version: expected text, got 1.0" in msg
    assert 'quote it: "1.0"' in msg
    assert "products[0].releases[0].date: expected text" in msg and 'quote it: "2021-04-20"' in msg


def test_unknown_and_missing_fields_are_named(source_copy: Path) -> None:
    _edit(source_copy / "recipes.yaml", "    tip: Keep the stock simmering",
          "    note: Keep the stock simmering")
    with pytest.raises(ValidationError, match=r"recipes\[0\]: Recipe has fields .*unknown \['note'\]; "
                                              r"missing \['tip'\]"):
        load_source(source_copy)


def test_a_missing_file_is_reported(source_copy: Path) -> None:
    (source_copy / "faq.yaml").unlink()
    with pytest.raises(ValidationError, match="faq.yaml"):
        load_source(source_copy)


def test_an_event_template_with_an_unknown_field_is_reported(source_copy: Path) -> None:
    _edit(source_copy / "news.yaml", "title: '{organiser} at {conference}'",
          "title: '{organizer} at {conference}'")
    with pytest.raises(ValidationError, match=r"events.conferences: cannot render row .*'organizer'"):
        gen.news_docs(random.Random(0), load_source(source_copy))
