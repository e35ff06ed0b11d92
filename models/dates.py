"""Dates: read in running text (:func:`parse_dates`, for timelines and short answers) and in a
corpus document's ``date`` field (:func:`document_date`).

Running text gives its dates in several formats: ``2024-03-12``, ``2024/03/12``, ``12 March 2024``,
``March 12, 2024``, ``Mar. 12 2024``, ``March 2024`` and a year after a preposition (``in 1970``,
``since 2019``). A document's ``date`` field holds one date: ISO 8601 (``2024``, ``2024-03``,
``2024-03-12``, or a date and time such as ``2024-03-12T10:00:00Z``) or one of the written forms.
"""

from __future__ import annotations

import datetime as dt
import re

MONTHS = {m: i + 1 for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"])}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
_MON = r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"

# (pattern, how to read its groups) in priority order: longer, more precise formats first.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), "ymd"),
    (re.compile(r"\b(\d{4})/(\d{1,2})/(\d{1,2})\b"), "ymd"),
    (re.compile(r"\b(\d{1,2})\s+" + _MON + r",?\s+(\d{4})\b", re.I), "dmy"),
    (re.compile(r"\b" + _MON + r"\s+(\d{1,2}),?\s+(\d{4})\b", re.I), "mdy"),
    (re.compile(r"\b" + _MON + r"\s+(\d{4})\b", re.I), "my"),
    (re.compile(r"\b(?:in|since|by|from|until|during|of)\s+(1[0-9]{3}|20[0-9]{2})\b(?![-/])", re.I), "y"),
]


def _month(name: str) -> int:
    return MONTHS[name.lower().rstrip(".")[:3]]


def parse_dates(text: str) -> list[tuple[str, str, int, int]]:
    """Dates in ``text`` as ``(iso, precision, start, end)``, non-overlapping, in text order.

    ``iso`` is ``YYYY-MM-DD``, ``YYYY-MM`` or ``YYYY``; ``precision`` is day, month or year.
    Impossible dates (month 13, day 32) are ignored.
    """
    taken: list[tuple[int, int]] = []
    found = []
    for pattern, kind in _PATTERNS:
        for m in pattern.finditer(text):
            s, e = m.span()
            if any(s < te and ts < e for ts, te in taken):
                continue
            g = m.groups()
            try:
                if kind == "ymd":
                    y, mo, d = int(g[0]), int(g[1]), int(g[2])
                elif kind == "dmy":
                    d, mo, y = int(g[0]), _month(g[1]), int(g[2])
                elif kind == "mdy":
                    mo, d, y = _month(g[0]), int(g[1]), int(g[2])
                elif kind == "my":
                    mo, d, y = _month(g[0]), 0, int(g[1])
                else:
                    mo, d, y = 0, 0, int(g[0])
            except (KeyError, ValueError):
                continue
            if not (1 <= mo <= 12 or mo == 0) or not (0 <= d <= 31) or (mo == 0 and d):
                continue
            if d and mo:
                iso, prec = f"{y:04d}-{mo:02d}-{d:02d}", "day"
            elif mo:
                iso, prec = f"{y:04d}-{mo:02d}", "month"
            else:
                iso, prec = f"{y:04d}", "year"
            taken.append((s, e))
            found.append((iso, prec, s, e))
    return sorted(found, key=lambda t: t[2])


_ISO = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                  r"(?:Z|[+-]\d{2}(?::?\d{2})?)?)?)?)?")


def document_date(value: str) -> tuple[str, str] | None:
    """A document's ``date`` field as ``(iso, precision)`` (``YYYY-MM-DD`` day, ``YYYY-MM``
    month, ``YYYY`` year); None when the whole value is not one date this reads.

    ISO 8601 (``2024``, ``2024-03``, ``2024-03-12``, ``2024-03-12T10:00:00Z``, ``2024-03-12
    10:00+02:00``; the time is dropped: events are dated to the day) or one written date that
    :func:`parse_dates` reads (``12 March 2024``, ``March 2024``). Impossible dates
    (``2024-02-30``) and values with anything else around the date are None.
    """
    text = value.strip()
    m = _ISO.fullmatch(text)
    if m:
        year, month, day = m.groups()
        iso = "-".join(x for x in (year, month, day) if x)
        precision = "day" if day else "month" if month else "year"
    else:
        found = parse_dates(text)
        if len(found) != 1 or found[0][2] != 0 or found[0][3] != len(text.rstrip(".")):
            return None
        iso, precision = found[0][0], found[0][1]
    return (iso, precision) if _on_the_calendar(iso) else None


def _on_the_calendar(iso: str) -> bool:
    """Whether ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` names a real date (not month 0 or 13, the
    30th of February, year 0)."""
    parts = [int(x) for x in iso.split("-")]
    try:
        dt.date(parts[0], *(parts[1:] + [1, 1])[:2])
    except ValueError:
        return False
    return True


__all__ = ["MONTHS", "document_date", "parse_dates"]
