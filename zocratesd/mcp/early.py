"""The MCP face before the SDK is loaded, sans-IO: lines in, decisions out. No SDK, no I/O here.

Why: importing the pinned `mcp` SDK takes most of a second (its protocol types are pydantic
models of two protocol eras), while a cold `zocratesd stdio` answers in about a tenth of that.
An MCP client starts its server and at once sends `initialize`, `notifications/initialized`,
`tools/list` and, often, a first `tools/call`. The face answers those itself while the SDK loads
in a thread, with the same tool code as the SDK's server (tools.py), and hands the connection to
the SDK once it is loaded (`EarlySession.hand_off`).

Contract of `EarlySession.receive(line)` (one frame, without its `\\n`): in every state, a line
that is not JSON is answered with a parse error (id null), and one nested deeper than
`MAX_JSON_DEPTH` with an invalid-request error (the SDK would answer neither). Until `hand_off()`:
- the first message must be an `initialize` with plain params (a string `protocolVersion`, objects
  `capabilities` and `clientInfo` with string `name` and `version`); it is answered (`Reply`) and
  kept for the SDK. Anything else first (a modern-era request with no handshake, a bad initialize)
  makes the session pass everything to the SDK: `Queue` until it is loaded.
- then: `notifications/initialized` is kept for the SDK; `ping` and `tools/list` are answered;
  `tools/call` of a quick tool (or an unknown one: the same tool error the SDK gives) is `RunTool`;
  `notifications/cancelled` of a queued request drops both; of a running early call, `CancelTool`;
  anything else (ask, resume, resources, prompts, responses to nothing) is queued, in order.
- `hand_off()` returns the lines the SDK must read first, in order: the kept `initialize` (whose
  reply the caller drops: the client has had it) and `notifications/initialized`, then the queue.
  After it, `receive` says `Forward` for every line except a cancel of a running early call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import orjson

from zocratesd.mcp import schemas, tools

# A line longer than this is dropped (the SDK's stdio transport had no cap; the daemon's wire has
# the same 16 MiB, zocrates_wire/framing.py): a tool call's arguments are at most a few KiB.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
# Messages kept for the SDK while it loads: past this many, the face stops reading its input until
# the SDK takes them (a client does not send hundreds of requests in its first second).
MAX_QUEUED: Final = 256
JSONRPC: Final = "2.0"
# One read of stdin: a tool call is a few hundred bytes; a big one takes a few reads.
READ_CHUNK_BYTES: Final = 64 * 1024
# JSON-RPC's "internal error": an early tool call that failed in a way tools.py does not expect.
INTERNAL_ERROR: Final = -32603
# JSON-RPC's errors for a line that is not JSON, and for one nested deeper than MAX_JSON_DEPTH.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
# How deep a message may nest, counted from its outer object: a tool call's arguments sit three
# levels down and are a few levels deep. The SDK's parser (pydantic's) gives up near 200 levels,
# and then the client would get no reply at all, so a deeper line is answered here with an error.
MAX_JSON_DEPTH: Final = 64
# The tools only the SDK's server runs (a turn: progress, elicitation): queued until it is loaded.
_SDK_TOOLS: Final = frozenset(t["name"] for t in schemas.TOOLS) - tools.QUICK_TOOLS


@dataclass(frozen=True)
class Reply:
    """Write this message to the client."""

    message: dict[str, Any]


@dataclass(frozen=True)
class RunTool:
    """Run tool `name` (tools.py) for request `id`, then reply with its result."""

    id: Any
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CancelTool:
    """The client cancelled early request `id`: stop it, and send no reply (as the SDK does)."""

    id: Any


@dataclass(frozen=True)
class Forward:
    """Give this line to the SDK's server (after `hand_off`)."""

    line: bytes


Event = Reply | RunTool | CancelTool | Forward


class _State(enum.Enum):
    OPENING = "opening"  # nothing received yet
    EARLY = "early"  # initialize answered here
    QUEUEING = "queueing"  # the client did not open with a plain initialize: the SDK answers all
    HANDED = "handed"  # the SDK reads everything now


def _request_id(message: dict[str, Any]) -> Any:
    rid = message.get("id")
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _plain_initialize(params: Any) -> bool:
    if not isinstance(params, dict):
        return False
    info = params.get("clientInfo")
    return (isinstance(params.get("protocolVersion"), str) and isinstance(params.get("capabilities"), dict)
            and isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str))


class EarlySession:
    def __init__(self) -> None:
        self._state = _State.OPENING
        self._initialize: bytes | None = None
        self.initialize_id: Any = None  # the kept initialize's id: the SDK's reply to it is not the client's
        self._initialized: bytes | None = None
        self._queue: list[tuple[Any, bytes]] = []  # (request id or None, line)
        self._running: set[Any] = set()  # ids of early tool calls not yet done

    @property
    def handed(self) -> bool:
        return self._state is _State.HANDED

    @property
    def queue_full(self) -> bool:
        return len(self._queue) >= MAX_QUEUED

    @property
    def has_queued(self) -> bool:
        return bool(self._queue)

    @property
    def running(self) -> frozenset[Any]:
        return frozenset(self._running)

    def receive(self, line: bytes) -> list[Event]:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:  # orjson's depth limit (1024) included
            return [self._error(None, PARSE_ERROR, "Parse error", f"not a JSON message: {exc}"[:200])]
        if _nested_deeper(line, message, MAX_JSON_DEPTH):
            rid = _request_id(message) if isinstance(message, dict) else None
            return [self._error(rid, INVALID_REQUEST, "Invalid Request", f"nested deeper than {MAX_JSON_DEPTH} levels")]
        if self._state is _State.HANDED:
            cancelled = self._cancelled_id(message)
            if cancelled is not None and cancelled in self._running:
                return [CancelTool(cancelled)]
            return [Forward(line)]
        if not isinstance(message, dict) or message.get("jsonrpc") != JSONRPC:
            message = {}
        method = message.get("method")
        rid = _request_id(message)
        params = message.get("params")
        if self._state is _State.OPENING:
            if method == "initialize" and rid is not None and isinstance(params, dict) and _plain_initialize(params):
                self._state = _State.EARLY
                self._initialize, self.initialize_id = line, rid
                return [self._reply(rid, tools.initialize_result(params["protocolVersion"]))]
            self._state = _State.QUEUEING
        if self._state is _State.QUEUEING or not isinstance(method, str):
            return self._queued(rid, line)
        if "id" not in message:  # a notification
            return self._notification(method, message, line)
        if rid is None or (params is not None and not isinstance(params, dict)):
            return self._queued(rid, line)
        if method == "ping":
            return [self._reply(rid, {})]
        if method == "tools/list" and (params is None or isinstance(params.get("cursor", ""), str)):
            return [self._reply(rid, {"tools": tools.tool_list()})]
        if method == "tools/call" and params is not None and rid not in self._running:
            name, arguments = params.get("name"), params.get("arguments", {})
            if isinstance(name, str) and isinstance(arguments, dict) and name not in _SDK_TOOLS:
                self._running.add(rid)
                return [RunTool(rid, name, arguments)]
        return self._queued(rid, line)

    def tool_done(self, rid: Any) -> None:
        """An early tool call ended (answered, or cancelled)."""
        self._running.discard(rid)

    def hand_off(self) -> list[bytes]:
        """The lines the SDK reads first (see the module's docstring); `receive` forwards from now on."""
        first = [line for line in (self._initialize, self._initialized) if line is not None]
        lines = first + [line for _, line in self._queue]
        self._queue.clear()
        self._state = _State.HANDED
        return lines

    def _notification(self, method: str, message: dict[str, Any], line: bytes) -> list[Event]:
        if method == "notifications/initialized" and self._initialized is None:
            self._initialized = line
            return []
        cancelled = self._cancelled_id(message)
        if cancelled is not None:
            if cancelled in self._running:
                return [CancelTool(cancelled)]
            kept = [entry for entry in self._queue if entry[0] != cancelled]
            if len(kept) < len(self._queue):
                self._queue = kept  # the SDK never sees the request, so not its cancel either
                return []
        return self._queued(None, line)

    @staticmethod
    def _cancelled_id(message: Any) -> Any:
        if not isinstance(message, dict) or message.get("method") != "notifications/cancelled" or "id" in message:
            return None
        params = message.get("params")
        return _request_id({"id": params.get("requestId")}) if isinstance(params, dict) else None

    def _queued(self, rid: Any, line: bytes) -> list[Event]:
        self._queue.append((rid, line))
        return []

    @staticmethod
    def _reply(rid: Any, result: dict[str, Any]) -> Reply:
        return Reply({"jsonrpc": JSONRPC, "id": rid, "result": result})

    @staticmethod
    def _error(rid: Any, code: int, message: str, data: str) -> Reply:
        return Reply({"jsonrpc": JSONRPC, "id": rid, "error": {"code": code, "message": message, "data": data}})


def _nested_deeper(line: bytes, message: Any, limit: int) -> bool:
    """Whether `message` (parsed from `line`) nests arrays and objects more than `limit` deep."""
    if line.count(b"[") + line.count(b"{") <= limit:  # the common case, without a walk
        return False
    stack: list[tuple[Any, int]] = [(message, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


class LineDecoder:
    """Bytes in, lines out: split on `\\n` only (JSON strings may hold U+2028 and friends), one
    trailing `\\r` and blank lines dropped, a line over `max_bytes` dropped (counted in
    `dropped`), a last line without `\\n` given at EOF."""

    def __init__(self, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._skipping = False  # inside an oversize line: drop up to its end
        self.dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines `data` ends; `feed(b"")` is EOF (the rest, if any, as a line)."""
        if not data:
            rest, self._buf = bytes(self._buf), bytearray()
            skipping, self._skipping = self._skipping, False
            return [] if skipping else self._lines([rest])
        if b"\n" not in data:  # only the new bytes are searched: a long line costs linear time
            if not self._skipping:
                self._buf += data
                self._check_size()
            return []
        parts = data.split(b"\n")
        head = [] if self._skipping else [bytes(self._buf) + parts[0]]
        self._buf = bytearray(parts[-1])
        self._skipping = False
        self._check_size()
        return self._lines(head + parts[1:-1])

    def _check_size(self) -> None:
        if len(self._buf) > self.max_bytes:
            self._buf.clear()
            self._skipping = True
            self.dropped += 1

    def _lines(self, parts: list[bytes]) -> list[bytes]:
        out = []
        for part in parts:
            line = bytes(part[:-1] if part.endswith(b"\r") else part)
            if len(line) > self.max_bytes:
                self.dropped += 1
            elif line.strip():
                out.append(line)
        return out
