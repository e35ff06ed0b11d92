"""Parse a server-sent-events body into ``(event, data)`` pairs (the tests of /v1/search streams)."""

from __future__ import annotations

import json


def sse_events(text: str) -> list[tuple[str, object]]:
    """``(event name, data)`` per SSE block; data is JSON, or the string ``[DONE]``."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = lines["data"]
        out.append((lines.get("event", "message"), data if data == "[DONE]" else json.loads(data)))
    return out
