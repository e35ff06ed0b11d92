"""Dates in running text and in a document's ``date`` field (models/dates.py)."""

from __future__ import annotations

import pytest
from searchsmith.models.dates import document_date, parse_dates


@pytest.mark.parametrize("value,want", [
    ("2024", ("2024", "year")),
    ("2024-03", ("2024-03", "month")),
    ("2024-03-12", ("2024-03-12", "day")),
    (" 2024-03-12 ", ("2024-03-12", "day")),
    ("2024-03-12T10:00:00Z", ("2024-03-12", "day")),
    ("2024-03-12T10:00", ("2024-03-12", "day")),
    ("2024-03-12 10:00:00+02:00", ("2024-03-12", "day")),
    ("2024-03-12T10:00:00.125-0500", ("2024-03-12", "day")),
    ("12 March 2024", ("2024-03-12", "day")),
    ("March 12, 2024.", ("2024-03-12", "day")),
    ("March 2024", ("2024-03", "month")),
    ("2024/3/12", ("2024-03-12", "day")),
])
def test_document_dates_it_reads(value, want) -> None:
    assert document_date(value) == want


@pytest.mark.parametrize("value", ["", "yesterday", "2024-13-01", "2024-02-30", "30 February 2024", "2024-00",
                                   "2024-03-12 and later", "12/03/2024", "24", "2024-3-12", "2024-03-12T25"])
def test_document_dates_it_refuses(value) -> None:
    assert document_date(value) is None


def test_running_text_still_needs_a_day_or_a_preposition() -> None:
    # in running text a bare number is not a year ("version 2024", "port 2024"): parse_dates is unchanged
    assert parse_dates("listens on port 2024") == []
    assert [(d, p) for d, p, _, _ in parse_dates("shipped in 2024, then on 2025-01-02")] == [
        ("2024", "year"), ("2025-01-02", "day")]
