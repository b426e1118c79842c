"""`zocratesd mcp`: the library and the assistant for MCP clients (Claude Desktop, Claude Code,
Cursor, ...), over stdio, with the official `mcp` SDK.

A face like `zocratesd stdio`: a thin process between an MCP client and the daemon. It reaches the
daemon of the Zotero data dir through its socket (starting one when none runs, as `zocratesd
stdio` does), or, with `--standalone`, a core it runs in this very process over a socket pair
(process/boot.py `serve_face_standalone`). Every tool is a JSON-RPC call (tools.py, server.py); MCP
sessions are not Zocrates sessions: an `ask` names its Zocrates session in its result. Read-only
towards Zotero, like every face.

The face owns stdin and stdout: it frames lines itself, and while the SDK is imported (in a
thread: most of a second) the early path (early.py) answers the handshake, `tools/list` and the
quick tools with the same tool code, and keeps everything else; then the SDK's low-level server
takes the connection on memory streams, fed the kept `initialize` first (its reply dropped: the
client has had it). One writer puts every frame on stdout. stdout carries MCP frames only: the
frames go to a private duplicate of fd 1, and fd 1 points at stderr (fd 0 at /dev/null) while the
face serves, so a stray print or a child process never writes into the stream; logs go to stderr.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import importlib
import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import orjson
from anyio.abc import TaskGroup

from zocratesd.mcp.calls import Tools
from zocratesd.mcp.early import CancelTool, EarlySession, Forward, LineDecoder, Reply, RunTool
from zocratesd.mcp.link import DaemonLink, standalone_pair
from zocratesd.process.give_way import GiveWay

__all__ = ["DaemonLink", "run", "serve_stdio", "standalone_pair"]

log = logging.getLogger("zocratesd.mcp")

# Test seam: when set, the SDK's import (in its thread) does not start until this file exists, so
# a test sees the early path answer with the SDK not loaded (tests/e2e/test_mcp.py). Only tests set it.
HOLD_SDK_ENV: Final = "ZOCRATES_TEST_MCP_HOLD_SDK_UNTIL"
_HOLD_POLL_S: Final = 0.02
# One read of stdin: a tool call is a few hundred bytes; a big one takes a few reads.
READ_CHUNK_BYTES: Final = 64 * 1024
# While the SDK loads, the GIL changes hands this often (Python's default is 5 ms), so an early
# answer does not wait behind the import thread's pydantic model building (as the daemon does
# while its engine loads, process/lifecycle.py LOADING_SWITCH_INTERVAL_S).
LOADING_SWITCH_INTERVAL_S: Final = 0.0005
# Serving first: the SDK's import thread waits before each module while the face has a request in
# hand and nothing waits for the SDK (process/give_way.py does the same for the daemon's engine:
# both are CPU-bound Python under one GIL, and an early answer would otherwise share the CPU with
# pydantic's model building; a first tool call that starts the daemon shares the machine with the
# daemon's start). One wait is cut off after MAX_WAIT_EACH_S (the loop's thread may be importing a
# module whose lock the import thread holds, say jsonschema for a bad argument), all of them after
# MAX_WAIT_TOTAL_S, about a cold daemon's start.
MAX_WAIT_EACH_S: Final = 0.1
MAX_WAIT_TOTAL_S: Final = 2.0
# JSON-RPC's "internal error": an early tool call that failed in a way tools.py does not expect.
INTERNAL_ERROR: Final = -32603

_EOF: Final = object()  # the reader's last word in the inbox
_SDK_READY: Final = object()  # the loader's: hand off now

T = TypeVar("T")


def _import_sdk(idle: threading.Event | None = None) -> Any:
    """The server module (and with it the SDK), after the test seam's hold if one is set;
    giving way to the face's requests when `idle` is given."""
    hold = os.environ.get(HOLD_SDK_ENV)
    if hold:
        log.warning("%s is set: the SDK's import waits for %s", HOLD_SDK_ENV, hold)
        while not os.path.exists(hold):
            time.sleep(_HOLD_POLL_S)
    if idle is None:
        return importlib.import_module("zocratesd.mcp.server")
    finder = GiveWay(idle, each_s=MAX_WAIT_EACH_S, total_s=MAX_WAIT_TOTAL_S)
    # Replaced, never changed in place: another thread may be iterating over it mid-import.
    sys.meta_path = [finder, *sys.meta_path]
    try:
        return importlib.import_module("zocratesd.mcp.server")
    finally:
        sys.meta_path = [f for f in sys.meta_path if f is not finder]


async def _in_daemon_thread(fn: Callable[[], T], name: str) -> T:
    """`fn()` in a daemon thread of its own: one that a blocked read or a held import cannot
    keep the process alive for after the client has gone (anyio's workers are joined at exit)."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    box: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed to the awaiting task
            box.append((False, exc))
        with contextlib.suppress(RuntimeError):  # the loop has ended meanwhile
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name=name, daemon=True).start()
    await done.wait()
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


@contextlib.contextmanager
def _claim_stdio() -> Iterator[tuple[int, int]]:
    """(the wire's input fd, its output fd): private duplicates of fd 0 and 1, while fd 0 reads
    /dev/null and fd 1 writes to stderr; restored after. Where fd 0 or 1 cannot be duplicated (a
    parent that closed one), they are used as they are."""
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
        # Not closed: a reader thread may still be blocked on wire_in (it is a daemon thread).


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Face:
    """One MCP connection on the wire's fds; see the module's docstring."""

    def __init__(self, link: DaemonLink, wire_in: int, wire_out: int, *, gc_off: bool = False) -> None:
        self.link = link
        self.gc_off = gc_off  # the collector is off for the start (cli.py): on once the SDK is loaded
        self.wire_in, self.wire_out = wire_in, wire_out
        self.session = EarlySession()
        self.tools = Tools(link)
        self.outbox, self._outbox_recv = anyio.create_memory_object_stream[bytes](math.inf)
        self.inbox, self._inbox_recv = anyio.create_memory_object_stream[Any](1)
        self.loaded = anyio.Event()
        self.sdk_in: Any = None  # the SDK server's read stream's sending end, once loaded
        self._sdk_done = anyio.Event()
        self._written = anyio.Event()
        self._drop_reply_to: Any = None  # the kept initialize's id: its SDK reply is not the client's
        self._early: dict[Any, anyio.CancelScope] = {}
        self._message_types: Any = None
        # Set while the face has nothing in hand (no line unread, no early call running, nothing
        # unwritten): the SDK's import goes on only then (_GiveWay).
        self._idle = threading.Event()
        self._idle.set()
        self._writing = False

    async def serve(self) -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.link.run)
            self.link.want()
            tg.start_soon(self._write, tg)
            tg.start_soon(self._read)
            tg.start_soon(self._load_sdk, tg)
            async with anyio.create_task_group() as calls:
                await self._dispatch(calls)
            if self.sdk_in is not None:
                await self.sdk_in.aclose()  # the SDK's server ends when its input does
                await self._sdk_done.wait()
            self.outbox.close()
            await self._written.wait()
            tg.cancel_scope.cancel()
        return 0

    # --- input --------------------------------------------------------------------------------------

    async def _read(self) -> None:
        """stdin's lines into the inbox, then _EOF. One thread reads; sending waits for room."""
        token = anyio.lowlevel.current_token()

        def read_all() -> None:
            decoder = LineDecoder()
            while True:
                try:
                    data = os.read(self.wire_in, READ_CHUNK_BYTES)
                except OSError:
                    data = b""
                dropped = decoder.dropped
                for line in decoder.feed(data):
                    anyio.from_thread.run(self.inbox.send, line, token=token)
                if decoder.dropped > dropped:
                    log.warning("dropped a line of more than %d bytes", decoder.max_bytes)
                self._idle.clear()
                if not data:
                    anyio.from_thread.run(self.inbox.send, _EOF, token=token)
                    return

        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
            await _in_daemon_thread(read_all, "zocratesd-mcp stdin")

    async def _dispatch(self, calls: TaskGroup) -> None:
        """Each line to the early path (or, once handed off, the SDK), in order, until EOF."""
        async with self._inbox_recv:
            async for line in self._inbox_recv:
                if line is _SDK_READY:
                    if not self.session.handed:
                        await self._hand_off()
                    continue
                if line is _EOF:
                    if not self.session.handed and self.session.has_queued:
                        await self.loaded.wait()  # requests are waiting for the SDK
                        await self._hand_off()
                    return
                for event in self.session.receive(line):
                    if isinstance(event, Reply):
                        self._send(event.message)
                    elif isinstance(event, RunTool):
                        scope = self._early[event.id] = anyio.CancelScope()
                        calls.start_soon(self._run_tool, event, scope)
                    elif isinstance(event, CancelTool):
                        self._early[event.id].cancel()
                    elif isinstance(event, Forward):
                        await self.sdk_in.send(self._to_sdk(event.line))
                if self.session.queue_full and not self.session.handed:
                    await self.loaded.wait()  # stop reading until the SDK takes the queue
                    await self._hand_off()
                self._settle()

    def _settle(self) -> None:
        """Let the SDK's import go on when a request waits for it, or nothing is in hand (a line,
        an early call, a frame)."""
        inbox = self._inbox_recv.statistics()
        if self.session.has_queued or (
                not inbox.current_buffer_used and not inbox.tasks_waiting_send and not self._early
                and not self._writing and not self._outbox_recv.statistics().current_buffer_used):
            self._idle.set()

    async def _run_tool(self, call: RunTool, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    result = await self.tools.call(call.name, call.arguments)
                    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": call.id, "result": result}
                except Exception as exc:  # a bug, not a bad call: the client gets an error, the face goes on
                    log.exception("tool %s failed", call.name)
                    reply = {"jsonrpc": "2.0", "id": call.id, "error": {"code": INTERNAL_ERROR, "message": str(exc)}}
                self._send(reply)
        finally:
            self.session.tool_done(call.id)
            del self._early[call.id]
            self._settle()

    # --- the SDK ------------------------------------------------------------------------------------

    async def _load_sdk(self, tg: TaskGroup) -> None:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, LOADING_SWITCH_INTERVAL_S))
        try:
            server_module = await _in_daemon_thread(lambda: _import_sdk(self._idle), "zocratesd-mcp sdk import")
        finally:
            sys.setswitchinterval(interval)
            self._idle.set()
        if self.gc_off:
            gc.freeze()  # the start's objects (the SDK's models) live as long as the process: never scanned
            gc.enable()
        message_types = importlib.import_module("mcp_types")
        session_message = importlib.import_module("mcp.shared.message").SessionMessage
        self._message_types = (message_types.jsonrpc_message_adapter, session_message)
        server = server_module.ZocratesMcp(self.link).server()
        self.sdk_in, sdk_read = anyio.create_memory_object_stream[Any](0)
        sdk_write, sdk_out = anyio.create_memory_object_stream[Any](0)

        async def run_server() -> None:
            async with sdk_write:
                await server.run(sdk_read, sdk_write, server.create_initialization_options())

        tg.start_soon(run_server)
        tg.start_soon(self._forward, sdk_out)
        self.loaded.set()
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.inbox.send(_SDK_READY)

    async def _hand_off(self) -> None:
        """The SDK takes the connection: the kept handshake, then the queue, in order."""
        self._drop_reply_to = self.session.initialize_id
        for line in self.session.hand_off():
            await self.sdk_in.send(self._to_sdk(line))

    def _to_sdk(self, line: bytes) -> Any:
        """A line as the SDK's stdio transport would give it to its server (a bad one as the error)."""
        adapter, session_message = self._message_types
        try:
            return session_message(adapter.validate_json(line, by_name=False))
        except Exception as exc:
            return exc

    async def _forward(self, sdk_out: Any) -> None:
        """The SDK's messages to the writer, but for its reply to the kept initialize."""
        async with sdk_out:
            async for message in sdk_out:
                msg = message.message
                if (self._drop_reply_to is not None and getattr(msg, "method", None) is None
                        and getattr(msg, "id", None) == self._drop_reply_to):
                    self._drop_reply_to = None
                    if getattr(msg, "error", None) is not None:
                        log.warning("the SDK refused the initialize the face had answered: %s", msg.error)
                    continue
                self.outbox.send_nowait(msg.model_dump_json(by_alias=True, exclude_unset=True).encode())
        self._sdk_done.set()

    # --- output -------------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        self.outbox.send_nowait(orjson.dumps(message))

    async def _write(self, tg: TaskGroup) -> None:
        """The one writer: every frame, in the order sent, to the wire's stdout."""
        try:
            async with self._outbox_recv:
                async for frame in self._outbox_recv:
                    frames = [frame]
                    with contextlib.suppress(anyio.WouldBlock):
                        while True:
                            frames.append(self._outbox_recv.receive_nowait())
                    self._writing = True
                    try:
                        await anyio.to_thread.run_sync(_write_all, self.wire_out, b"".join(f + b"\n" for f in frames))
                    finally:
                        self._writing = False
                    self._settle()
        except OSError as exc:  # the client has gone (EPIPE): nothing more to say to it
            log.info("stdout closed: %s", exc)
            tg.cancel_scope.cancel()
        finally:
            self._written.set()


async def serve_stdio(link: DaemonLink, *, gc_off: bool = False) -> int:
    """Serve MCP on stdin/stdout until the client closes stdin.

    The link connects at once, and the SDK is imported in a thread meanwhile; until it is
    loaded, the early path answers (early.py), so a client's first tool call waits neither for
    the import nor for the connection twice (bench/bench_mcp.py measures it)."""
    with _claim_stdio() as (wire_in, wire_out):
        return await _Face(link, wire_in, wire_out, gc_off=gc_off).serve()


def _logging(level: str) -> None:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("zocratesd mcp: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def run(data_dir: Path, *, serve_args: list[str] | None = None, log_level: str = "WARNING") -> int:
    """`zocratesd mcp` with a daemon (the running one, or one it starts)."""
    _logging(log_level)
    return anyio.run(functools.partial(serve_stdio, DaemonLink(data_dir, serve_args=serve_args), gc_off=not gc.isenabled()))


async def serve_standalone_face(data_dir: Path, sock: socket.socket) -> int:
    """The face of `zocratesd mcp --standalone`: MCP on stdio, the core at the other end of `sock`."""
    return await serve_stdio(DaemonLink(data_dir, standalone=sock))
