"""NDJSON framing, sans-IO: bytes in, frames out; messages in, bytes out. No sockets here.

The wire (protocol/README.md, "Framing"): one compact JSON value per line, UTF-8, terminated by
the byte `\\n`. The same bytes travel on stdio and on the Unix socket, which is what lets
`zocratesd stdio` be a plain byte pump.

Contract of `FrameDecoder`:
- `feed(data)` appends bytes; `next_event()` returns the next complete frame (bytes, without the
  `\\n` and without one trailing `\\r`), a `FrameTooLarge` event, or `NEED_DATA`.
- Frames are split on the byte `\\n` only. `str.splitlines()` would also split on U+2028, `\\x1c`
  and friends, which are legal inside JSON strings.
- Empty lines are skipped, so a client may send `\\r\\n` or blank keep-alive lines.
- A line longer than `max_frame_bytes` yields one `FrameTooLarge`; the decoder then drops bytes up
  to the next `\\n` and carries on, so one oversize message costs the client an error, not its
  connection. Memory use stays bounded by `max_frame_bytes` plus one read.
- `feed_eof()` turns a final line without `\\n` into a frame (a peer that closes after its last
  message without a newline still gets an answer on a half-closed socket).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import orjson

# 16 MiB, as in DESIGN.md. Precedents: asyncio's default 64 KiB StreamReader limit crashed ACP
# peers on large prompts (python-sdk #27, #62; kimi-cli #831), the ACP Python SDK moved to 50 MiB,
# and rust-sdk #342 argues the cap must be finite and configurable. 16 MiB holds a prompt with
# hundreds of pasted snippets; `rpc.max_frame_bytes` in the config changes it.
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024

# One read of a socket or pipe: a few frames of a turn's stream, or a slice of a large one.
READ_CHUNK_BYTES: Final = 256 * 1024

NEED_DATA: Final = object()


class FrameTooLarge(msgspec.Struct, frozen=True):
    """A line exceeded the cap; `limit` is the cap in bytes. The line itself was dropped."""

    limit: int


class FrameDecoder:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no b"\n"
        self._discarding = False  # inside an oversize line, dropping until its end
        self._eof = False

    def feed(self, data: bytes) -> None:
        if self._eof:
            raise RuntimeError("feed() after feed_eof()")
        self._buf += data

    def feed_eof(self) -> None:
        self._eof = True

    def next_event(self) -> bytes | FrameTooLarge | object:
        while True:
            nl = self._buf.find(b"\n", self._scanned)
            if nl < 0:
                if self._discarding:
                    self._buf.clear()
                    self._scanned = 0
                    return NEED_DATA
                # +1: the line's `\r` may be in the buffer while its `\n` is still to come.
                if len(self._buf) > self.max_frame_bytes + 1:
                    self._buf.clear()
                    self._scanned = 0
                    self._discarding = True
                    return FrameTooLarge(self.max_frame_bytes)
                self._scanned = len(self._buf)
                if self._eof and self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    self._scanned = 0
                    line = line[:-1] if line.endswith(b"\r") else line
                    if line.strip():
                        return line
                return NEED_DATA
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            self._scanned = 0
            if self._discarding:
                self._discarding = False
                continue
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self.max_frame_bytes:
                return FrameTooLarge(self.max_frame_bytes)
            if not line.strip():
                continue
            return line


class SendQueue:
    """Bytes waiting for the wire, sans-IO: senders `push` whole frames (one or a batch), one
    writer `take`s everything queued as one write and reports it `wrote`. Frames leave in the
    order they were pushed, never interleaved (each push is whole frames).

    A push returns a ticket; its bytes are on the wire once `written` has reached the ticket. A
    sender waits for that, so the queue holds at most one push per waiting sender, as much as each
    held when it wrote by itself, and nothing once the connection is closed (`clear`). `withdraw`
    takes back a push no write has taken yet (its sender gave up).
    """

    __slots__ = ("_items", "_pushed", "_taken", "written")

    def __init__(self) -> None:
        self._items: list[tuple[int, bytes]] = []  # (ticket, frames)
        self._pushed = 0
        self._taken = 0  # the last ticket a write has taken
        self.written = 0  # the last ticket whose write ended (completed, or the connection closed)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def busy(self) -> bool:
        """Something is queued, or a write that took it has not ended yet."""
        return bool(self._items) or self._taken > self.written

    def push(self, frames: bytes) -> int:
        self._pushed += 1
        self._items.append((self._pushed, frames))
        return self._pushed

    def take(self) -> tuple[bytes, int]:
        """Everything queued as one write, and the ticket it reaches (call `wrote` with it once
        written). Only when something is queued."""
        items = self._items
        data = items[0][1] if len(items) == 1 else b"".join(frames for _, frames in items)
        self._taken = items[-1][0]
        items.clear()
        return data, self._taken

    def wrote(self, ticket: int) -> None:
        self.written = max(self.written, ticket)

    def withdraw(self, ticket: int) -> bool:
        """Drop the push of `ticket` if no write has taken it yet; whether it was dropped."""
        if ticket <= self._taken:
            return False
        for i, (t, _) in enumerate(self._items):
            if t == ticket:
                del self._items[i]
                return True
        return False

    def clear(self) -> None:
        """The connection is gone: everything queued is dropped, and every ticket is settled."""
        self._items.clear()
        self._taken = self.written = self._pushed


def encode_message(message: Mapping[str, Any]) -> bytes:
    """One message as one line: compact JSON, UTF-8, `\\n`. Compact JSON never holds a raw newline
    (control characters inside strings are always escaped)."""
    try:
        return orjson.dumps(message) + b"\n"
    except TypeError:
        # What orjson refuses and the standard library takes: a lone surrogate that came in from a
        # client (legal as a JSON escape, not in UTF-8; escaped here rather than not answering),
        # integers beyond 64 bits, non-string keys.
        return json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode("ascii") + b"\n"
