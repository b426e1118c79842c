"""A blocking JSON-RPC client on the daemon's Unix socket, made to time the daemon.

It speaks through the project's own wire code: each request is `jsonrpc.request` framed by
`framing.encode_message`, and the bytes that come back are cut into frames by
`framing.FrameDecoder`, as the client library and the daemon do. What stays here is the little a
timer needs: one thread, no event loop, a clock read around each frame.

Every frame is parsed as it arrives, as a real client must, and with orjson (a dependency of the
project) rather than `jsonrpc.parse_frame`'s standard library: that would add ~10 ms to a 2.3 MB
reply, a cost of the client's parser, not of the daemon, and the peers' replies (bench_shim,
bench_peers) are parsed with orjson too.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from _report import timer

from zocrates_wire import jsonrpc
from zocrates_wire.framing import NEED_DATA, FrameDecoder, FrameTooLarge, encode_message

INITIALIZE_PARAMS: dict[str, Any] = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
    "clientInfo": {"name": "zocrates-bench", "version": "0"},
}

RECV_BYTES = 1 << 20
# The daemon's 16 MiB frame cap is on what it reads. What it sends is as large as the session it
# serves (5000 events: 2.3 MB); a benchmark of a bigger one should measure it, not fail on it.
MAX_REPLY_BYTES = 1 << 30

# One notification with the seconds from sending the request to having it parsed.
TimedNotification = tuple[float, dict[str, Any]]


class RpcError(Exception):
    """The daemon answered a request with an error."""

    def __init__(self, method: str, error: Any):
        super().__init__(f"{method}: {error}")
        self.method = method
        self.error = error


class RpcClient:
    """One connection; one request at a time, read until its reply."""

    def __init__(self, path: str | Path, timeout: float = 120.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._ids = itertools.count(1)
        self._decoder = FrameDecoder(MAX_REPLY_BYTES)
        self._first_byte: float | None = None
        # Where the last call's time went, in seconds from sending the request: the first byte of
        # an answer (notifications included), the reply's frame complete, the reply parsed.
        self.last_timing: dict[str, float] = {}

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, params: dict[str, Any] | None = None, *, keep_notifications: bool = False) -> tuple[Any, Any]:
        """Send one request, read until its reply. Returns (result, notifications): the list of
        notification messages if keep_notifications, else their count."""
        result, notes, count = self._exchange(method, params, keep=keep_notifications)
        return result, ([n for _, n in notes] if keep_notifications else count)

    def call_streaming(self, method: str, params: dict[str, Any] | None = None) -> tuple[Any, list[TimedNotification], float]:
        """Like `call`, but keeps every notification with its arrival time: returns (result,
        [(seconds from sending the request, notification)], seconds until the reply was parsed)."""
        result, notes, _ = self._exchange(method, params, keep=True)
        return result, notes, self.last_timing["total"]

    def _exchange(self, method: str, params: dict[str, Any] | None, *, keep: bool) -> tuple[Any, list[TimedNotification], int]:
        msg_id = next(self._ids)
        data = encode_message(jsonrpc.request(msg_id, method, params))
        notes: list[TimedNotification] = []
        count = 0
        self._first_byte = None
        t0 = timer()
        self.sock.sendall(data)
        for frame in self._frames():
            t_frame = timer()
            msg = orjson.loads(frame)
            t_parsed = timer()
            if "method" not in msg:
                if msg.get("id") != msg_id:
                    continue  # a reply to nothing we are waiting for
                self.last_timing = {
                    "first_byte": (self._first_byte or t_frame) - t0,
                    "reply_received": t_frame - t0,
                    "reply_parse": t_parsed - t_frame,
                    "total": t_parsed - t0,
                }
                if "error" in msg:
                    raise RpcError(method, msg["error"])
                return msg.get("result"), notes, count
            if "id" not in msg:
                count += 1
                if keep:
                    notes.append((t_parsed - t0, msg))
            # else: a request from the daemon (permission, fs); no benchmark's turn makes one
        raise AssertionError("unreachable: _frames() ends only by raising")

    def _frames(self) -> Iterator[bytes]:
        """Complete frames as they arrive; the first received byte's time goes to `_first_byte`."""
        decoder = self._decoder
        while True:
            event = decoder.next_event()
            if event is NEED_DATA:
                chunk = self.sock.recv(RECV_BYTES)
                if not chunk:
                    raise EOFError("the daemon closed the connection")
                if self._first_byte is None:
                    self._first_byte = timer()
                decoder.feed(chunk)
            elif isinstance(event, FrameTooLarge):
                raise RpcError("(reading)", f"a reply longer than {event.limit} bytes")
            else:
                assert isinstance(event, bytes)
                yield event
