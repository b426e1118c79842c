"""`zocratesd mcp`'s wire: MCP on stdin/stdout, one JSON message a line, to and from the SDK's server.

The SDK's server reads and writes `SessionMessage`s on memory streams; `serve` carries them over
the process's stdio. It is ours rather than the SDK's `stdio_server` for what a client would
otherwise wait on for ever or what could exhaust memory: a line that is not JSON, or that nests
deeper than MAX_JSON_DEPTH, gets a JSON-RPC error reply here (the SDK's server answers neither,
its parser gives up near 200 levels), and a line over MAX_FRAME_BYTES is dropped as it is read,
never held whole. stdout carries MCP frames only (`claim_stdio`); logs go to stderr.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import select
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
import orjson
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.shared.message import SessionMessage

log = logging.getLogger("zocratesd.mcp")

# A line longer than this is dropped (the daemon's wire has the same 16 MiB, rpc/framing.py): a
# tool call's arguments are at most a few KiB.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
# One read of stdin: a tool call is a few hundred bytes; a big one takes a few reads.
READ_CHUNK_BYTES: Final = 64 * 1024
# How deep a message may nest, counted from its outer object: a tool call's arguments sit three
# levels down and are a few levels deep.
MAX_JSON_DEPTH: Final = 64
# After stdin's EOF, requests already read are still answered (a script that writes its requests
# and closes stdin reads the answers), for at most this long: a whole turn (`ask`). A client that
# wants the server gone sooner sends SIGTERM, as MCP's stdio shutdown says.
ANSWERS_AFTER_EOF_S: Final = 600.0
# JSON-RPC's errors for a line that is not JSON, and for one nested deeper than MAX_JSON_DEPTH.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[int, int]]:
    """(the wire's input fd, its output fd): private duplicates of fd 0 and 1, while fd 0 reads
    /dev/null and fd 1 writes to stderr; restored after. stdout carries MCP frames only: a stray
    print or a child process never writes into the stream. Where fd 0 or 1 cannot be duplicated
    (a parent that closed one), they are used as they are."""
    try:
        wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError as exc:
        log.warning("serving on fds 0 and 1 themselves (%s)", exc)
        yield 0, 1
        return
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)
        # Not closed: the reader thread may still be blocked on wire_in (it is a daemon thread).


async def serve(
    server: Server[Any], wire_in: int, wire_out: int, *, before_initialize: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `server` on the wire's fds until the client closes its end (stdin's EOF) or stops
    reading (stdout's EPIPE). The client's `initialize` reaches the server once `before_initialize`
    has returned."""
    await _Wire(wire_in, wire_out, before_initialize).serve(server)


class _Wire:
    def __init__(self, wire_in: int, wire_out: int, before_initialize: Callable[[], Awaitable[None]] | None = None) -> None:
        self.wire_in, self.wire_out = wire_in, wire_out
        self.before_initialize = before_initialize
        self.outbox, self._frames = anyio.create_memory_object_stream[bytes](math.inf)
        # The requests the server was given and has not answered (nor had cancelled by the client).
        self._unanswered: set[types.RequestId] = set()
        self._all_answered = anyio.Event()

    async def serve(self, server: Server[Any]) -> None:
        to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        server_out, from_server = anyio.create_memory_object_stream[SessionMessage](0)

        async def run_server() -> None:
            async with server_in, server_out:
                await server.run(server_in, server_out, server.create_initialization_options())

        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write, tg)
            async with anyio.create_task_group() as serving:
                serving.start_soon(run_server)
                serving.start_soon(self._forward, from_server)
                async with to_server:  # the server ends when its input does, cancelling what it still runs
                    await self._read(to_server)
                    with anyio.move_on_after(ANSWERS_AFTER_EOF_S):
                        await self._answered()
            self.outbox.close()

    async def _answered(self) -> None:
        """Return once every request given to the server has been answered, or the client has
        closed its end of stdout too (nobody reads the answers)."""
        if not self._unanswered:
            return
        self._all_answered = anyio.Event()
        async with anyio.create_task_group() as tg:

            stop = threading.Event()

            async def reader_gone() -> None:
                await anyio.to_thread.run_sync(wait_for_hangup, self.wire_out, stop, abandon_on_cancel=True)
                tg.cancel_scope.cancel()

            tg.start_soon(reader_gone)
            try:
                await self._all_answered.wait()
            finally:
                stop.set()
                tg.cancel_scope.cancel()

    async def _read(self, to_server: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        """stdin's lines to the server, until EOF: read in a daemon thread of its own, one that a
        blocked read cannot keep the process alive for after the client has gone."""
        token = anyio.lowlevel.current_token()
        done = anyio.Event()

        def read_all() -> None:
            decoder = LineDecoder()
            try:
                while True:
                    try:
                        data = os.read(self.wire_in, READ_CHUNK_BYTES)
                    except OSError:
                        data = b""
                    dropped = decoder.dropped
                    for line in decoder.feed(data):
                        message = self._message(line)
                        if isinstance(message, bytes):
                            anyio.from_thread.run_sync(self.outbox.send_nowait, message, token=token)
                        else:
                            anyio.from_thread.run(self._deliver, to_server, message, token=token)
                    if decoder.dropped > dropped:
                        log.warning("dropped a line of more than %d bytes", MAX_FRAME_BYTES)
                    if not data:
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
                return  # the server or the loop has ended meanwhile
            finally:
                with contextlib.suppress(RuntimeError):
                    anyio.from_thread.run_sync(done.set, token=token)

        threading.Thread(target=read_all, name="zocratesd-mcp stdin", daemon=True).start()
        await done.wait()

    async def _deliver(self, to_server: MemoryObjectSendStream[SessionMessage | Exception],
                       message: SessionMessage | Exception) -> None:
        if (self.before_initialize is not None and isinstance(message, SessionMessage)
                and isinstance(message.message, types.JSONRPCRequest) and message.message.method == "initialize"):
            await self.before_initialize()
        if isinstance(message, SessionMessage):
            sent = message.message
            if isinstance(sent, types.JSONRPCRequest):
                self._unanswered.add(sent.id)
            elif isinstance(sent, types.JSONRPCNotification) and sent.method == "notifications/cancelled":
                # A cancelled request gets no answer (MCP's cancellation): not waited for.
                self._settle((sent.params or {}).get("requestId"))
        await to_server.send(message)

    def _settle(self, request_id: object) -> None:
        if request_id in self._unanswered:
            self._unanswered.discard(request_id)
            if not self._unanswered:
                self._all_answered.set()

    @staticmethod
    def _message(line: bytes) -> SessionMessage | Exception | bytes:
        """What the server reads of `line` (a message not JSON-RPC as the exception that says so,
        as the SDK's transport gives it), or the error frame to answer it with here."""
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError as exc:  # orjson's depth limit (1024) included
            return _error(None, PARSE_ERROR, "Parse error", f"not a JSON message: {exc}"[:200])
        if nested_deeper(line, parsed, MAX_JSON_DEPTH):
            rid = parsed.get("id") if isinstance(parsed, dict) else None
            rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
            return _error(rid, INVALID_REQUEST, "Invalid Request", f"nested deeper than {MAX_JSON_DEPTH} levels")
        try:  # from the line, not `parsed`: pydantic reads a large integer exactly, orjson as a float
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except Exception as exc:  # the server answers it, as from the SDK's own transport
            return exc

    async def _forward(self, from_server: MemoryObjectReceiveStream[SessionMessage]) -> None:
        async with from_server:
            async for message in from_server:
                self.outbox.send_nowait(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode())
                if isinstance(message.message, (types.JSONRPCResponse, types.JSONRPCError)):
                    self._settle(message.message.id)

    async def _write(self, tg: TaskGroup) -> None:
        """The one writer: every frame, in the order sent, to the wire's stdout."""
        try:
            async with self._frames:
                async for frame in self._frames:
                    frames = [frame]
                    # Whatever else is queued goes in the same write; the outbox closed behind
                    # the last frames (EndOfStream) still has them written.
                    with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                        while True:
                            frames.append(self._frames.receive_nowait())
                    await anyio.to_thread.run_sync(write_all, self.wire_out, b"".join(f + b"\n" for f in frames))
        except OSError as exc:  # the client has gone (EPIPE): nothing more to say to it
            log.info("stdout closed: %s", exc)
            tg.cancel_scope.cancel()


def _error(rid: Any, code: int, message: str, data: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}})


# How often `wait_for_hangup` looks whether it is still wanted.
HANGUP_POLL_MS: Final = 500


def wait_for_hangup(fd: int, stop: threading.Event) -> None:
    """Return once the reading end of `fd` (a pipe or socket we write to) is closed (poll(2)
    reports an error or a hang-up whatever events are asked for), or `stop` is set."""
    poller = select.poll()
    poller.register(fd, 0)
    while not stop.is_set() and not poller.poll(HANGUP_POLL_MS):
        pass


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def nested_deeper(line: bytes, message: Any, limit: int) -> bool:
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
