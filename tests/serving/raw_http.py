"""A request sent over a plain socket (the tests of clients that leave, and of connection limits:
an HTTP client library would hide when the connection opens and closes)."""

from __future__ import annotations

import json
import socket


def post_raw(port: int, path: str, payload: dict) -> socket.socket:
    """POST ``payload`` as JSON to ``path`` on a new loopback connection; the open socket."""
    body = json.dumps(payload).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock
