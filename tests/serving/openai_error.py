"""Check an OpenAI-shaped error body (``{"error": {"message", "type", "param", "code"}}``, the
shape every HTTP error of the server has: serving/http.py) in the HTTP tests."""

from __future__ import annotations


def error_message(resp, status: int, kind: str) -> str:
    """The message of an OpenAI-shaped error body, after checking its status and type."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["type"] == kind, body
    return body["error"]["message"]
