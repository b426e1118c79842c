"""`_zocrates/library/status` for people: one headline ("library ready: 30 items, 30 full texts,
2 notes (from …)"), and every other field, for `zocratesd status` and `zocrates library status`.

The headline is the daemon's own `summary` (the line it logs: where the library comes from, its
state, the counts per kind), so the terminal and the log say the same thing; a daemon without one
(older, or a status that only has a message) gets a headline built from the counts.

Standard library only (the `zocrates` client imports it, and `zocratesd status` must stay quick).
Fields are rendered generically, so what a later daemon adds to the status still shows. Every value
comes from the daemon, which read it from the user's library (a collection name, a path, an error
text), so everything is escaped before it reaches a terminal.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Final

from zocratesd.logtext import escape_for_log, escape_for_terminal

# `zocratesd status` asks a running daemon; a daemon that does not answer this fast is busy, and
# status must not hang on it.
FETCH_TIMEOUT_S: Final = 5.0
# Shown in the headline; not repeated below it.
_HEADLINE_FIELDS: Final = frozenset({"state", "items_done", "items_to_index", "percent", "items_indexed",
                                     "attachments_with_text", "message", "summary"})


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else escape_for_log(value)


def headline(status: dict[str, Any]) -> str:
    """One line: what the library is doing, in words (the daemon's summary when it has one)."""
    state = status.get("state")
    message = status.get("message")
    summary = status.get("summary")
    if isinstance(summary, str) and summary.strip() and summary != message:
        line = escape_for_log(" ".join(summary.split()))
        if isinstance(message, str) and message and message not in summary:
            line += f": {escape_for_log(message)}"
        return line
    if state == "indexing":
        line = (f"indexing {_n(status.get('items_done', 0))} of {_n(status.get('items_to_index', 0))} items "
                f"({float(status.get('percent') or 0):.0f}%)")
    elif state == "ready":
        line = (f"library ready: {_n(status.get('items_indexed', 0))} items, "
                f"{_n(status.get('attachments_with_text', 0))} full texts")
    elif state == "starting":
        line = "library: starting (not read yet)"
    else:
        line = f"library {escape_for_log(state)}"
    if isinstance(message, str) and message:
        line += f": {escape_for_log(message)}"
    return line


def describe(status: dict[str, Any]) -> list[str]:
    """The headline, then `key  value` for every other field that has a value (lists item by item)."""
    lines = [headline(status)]
    rest = {k: v for k, v in status.items() if k not in _HEADLINE_FIELDS and v not in (None, [], {}, "")}
    width = max((len(k) for k in rest), default=0)
    for key, value in rest.items():
        name = escape_for_log(key).ljust(width)
        if isinstance(value, list):
            lines.append(f"  {name}")
            lines += [f"    - {_value(v)}" for v in value]
        else:
            lines.append(f"  {name}  {_value(value)}")
    return lines


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{escape_for_log(k)}={_value(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return escape_for_terminal(value).replace("\n", " ")
    return _n(value) if isinstance(value, int) else escape_for_log(json.dumps(value))


def settled(status: dict[str, Any]) -> bool:
    """Whether the index is done changing for now (not starting, not indexing)."""
    return status.get("state") not in ("starting", "indexing")


def fetch(socket_path: str, timeout: float = FETCH_TIMEOUT_S) -> dict[str, Any]:
    """Ask a running daemon for its library status, blocking. Raises OSError (including a timeout)
    or ValueError (an answer that is not a status)."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "_zocrates/library/status", "params": {}}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        sock.sendall(json.dumps(request).encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)  # one request: the daemon answers it, then closes
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    for line in buf.splitlines():
        message = json.loads(line)
        if isinstance(message, dict) and message.get("id") == 1:
            result = message.get("result")
            if isinstance(result, dict):
                return result
            raise ValueError(f"the daemon answered with an error: {escape_for_log(message.get('error'))}")
    raise ValueError("the daemon closed the connection without answering")
