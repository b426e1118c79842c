"""A blocking NDJSON JSON-RPC connection for tests that need to send exact bytes (bad frames too)."""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any


class RawConn:
    def __init__(self, path: str, timeout: float = 120.0):  # a hang guard: the first write waits for the engine
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self._buf = b""
        self._ids = itertools.count(1)
        self.notifications: list[dict[str, Any]] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        """The next message, whatever it is. Raises EOFError when the daemon closed the connection."""
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("connection closed")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def recv_reply(self, id: Any = None) -> dict[str, Any]:
        """The next response (to `id`, if given), keeping notifications in `self.notifications`."""
        while True:
            msg = self.recv()
            if "method" in msg and "id" not in msg:
                self.notifications.append(msg)
                continue
            if id is None or msg.get("id") == id:
                return msg

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and return its whole reply ({"result": ...} or {"error": ...})."""
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.recv_reply(msg_id)

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = self.call(method, params)
        assert "error" not in reply, reply
        return reply["result"]
