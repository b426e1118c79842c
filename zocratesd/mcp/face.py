"""The anyio MCP face: serves until the SDK is loaded (the early path), then the SDK's server.

It takes the connection from the cold face (cold.py) once the SDK is loaded, or when the cold
face cannot serve (no daemon ran at start, the daemon's connection was lost: `DaemonLink`
connects again, starting a daemon when none runs), and `--standalone` starts here. It is given
the cold face's `EarlySession` (what was answered, what is kept for the SDK, in order), its line
decoder (a partial line) and the SDK's loader, whose import goes on; from then on as before:
while the SDK loads, the early path (early.py) answers the handshake, `tools/list` and the quick
tools with the same tool code (calls.py over tools.py), and keeps everything else; then the SDK's
low-level server takes the connection on memory streams, fed the kept `initialize` first (its
reply dropped: the client has had it). One writer puts every frame on stdout.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import math
import os
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import orjson
from anyio.abc import TaskGroup

from zocratesd.mcp.calls import Tools
from zocratesd.mcp.early import INTERNAL_ERROR, READ_CHUNK_BYTES, CancelTool, EarlySession, Forward, LineDecoder, Reply, RunTool
from zocratesd.mcp.link import DaemonLink
from zocratesd.mcp.loader import SdkLoader
from zocratesd.mcp.stdio import claim_stdio, write_all

log = logging.getLogger("zocratesd.mcp")


_EOF: Final = object()  # the reader's last word in the inbox
_SDK_READY: Final = object()  # the loader's: hand off now

T = TypeVar("T")


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


class _Face:
    """One MCP connection on the wire's fds; see the module's docstring."""

    def __init__(
        self, link: DaemonLink, wire_in: int, wire_out: int, loader: SdkLoader, *, session: EarlySession | None = None,
        decoder: LineDecoder | None = None, gc_off: bool = False,
    ) -> None:
        self.link = link
        self.gc_off = gc_off  # the collector is off for the start (cli.py): on once the SDK is loaded
        self.wire_in, self.wire_out = wire_in, wire_out
        self.loader = loader
        self.session = session if session is not None else EarlySession()
        self.decoder = decoder if decoder is not None else LineDecoder()
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
        # unwritten): the SDK's import goes on only then (loader.py).
        self._idle = loader.idle
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
            decoder = self.decoder
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
        self.loader.start()
        if not self.loader.done.is_set():
            await _in_daemon_thread(self.loader.done.wait, "zocratesd-mcp sdk wait")
        server_module = self.loader.result()
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
                        await anyio.to_thread.run_sync(write_all, self.wire_out, b"".join(f + b"\n" for f in frames))
                    finally:
                        self._writing = False
                    self._settle()
        except OSError as exc:  # the client has gone (EPIPE): nothing more to say to it
            log.info("stdout closed: %s", exc)
            tg.cancel_scope.cancel()
        finally:
            self._written.set()


async def serve_stdio(
    link: DaemonLink, *, gc_off: bool = False, loader: SdkLoader | None = None, session: EarlySession | None = None,
    decoder: LineDecoder | None = None, wire: tuple[int, int] | None = None,
) -> int:
    """Serve MCP on stdin/stdout (or `wire`: the fds the cold face claimed) until the client
    closes stdin, taking over `session`, `decoder` and `loader` from the cold face when given.

    The link connects at once, and the SDK is imported in a thread meanwhile (unless the cold
    face started that already); until it is loaded, the early path answers (early.py), so a
    client's first tool call waits neither for the import nor for the connection twice."""
    if loader is None:
        loader = SdkLoader()
    if wire is not None:
        return await _Face(link, *wire, loader, session=session, decoder=decoder, gc_off=gc_off).serve()
    with claim_stdio() as (wire_in, wire_out):
        return await _Face(link, wire_in, wire_out, loader, session=session, decoder=decoder, gc_off=gc_off).serve()
