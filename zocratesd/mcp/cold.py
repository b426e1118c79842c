"""The cold MCP face: the first requests of `zocratesd mcp` answered with no asyncio, anyio or SDK.

Why (issue 30's budget: a first tool result within 100 ms of the daemon's socket): an MCP client
starts its server and at once sends `initialize`, `notifications/initialized`, `tools/list` and,
often, a first `tools/call`. asyncio, anyio and the async client cost ~50 ms of a cold process
before the first byte could go to the daemon (and an event loop, threads, the daemon's
`initialize` answer awaited), and the SDK most of a second. `zocratesd stdio`
answers in ~100 ms because it is a plain pump; this face is the same kind of thing.

What: one thread, one `selectors` loop on stdin, the daemon's socket (a blocking client,
zocrates_client/blocking.py, connected and `initialize`d at once, without waiting for that
answer) and the SDK loader's wake-up pipe. Lines go to `EarlySession` (early.py: the contract
the anyio face keeps too): replies are written at once; a quick `tools/call` runs tools.py's
generator, each call it yields sent to the daemon and its answer sent back in when the socket is
readable; `notifications/cancelled` of a running call drops it (no reply, its daemon request
cancelled); everything else is kept for the SDK. Meanwhile loader.py imports the SDK, giving way
whenever a request is in hand.

The end: `serve()` returns why it stopped, with no call running, and `run` hands the connection
(the session, the line decoder's partial line, the loader) to the anyio face (face.py), which
serves exactly as it would have from the start:
- LOADED: the SDK is loaded (stdin is no longer read from then on; calls running finish first);
- LOST: the daemon's connection ended (the calls running got a tool error that says to call
  again); the anyio face's link connects again, starting a daemon when none runs;
- FULL: the kept queue is full: stdin waits for the SDK, as in the anyio face;
- EOF: stdin ended; the process ends unless requests wait for the SDK;
- GONE: stdout is closed (the client has gone): the process ends.
With no live daemon at start (or one that refuses), `--standalone`, or no way to claim stdio,
the anyio face serves from the start (a daemon's own start dwarfs the imports then).
"""

from __future__ import annotations

import enum
import logging
import os
import selectors
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from zocrates_client.blocking import Answer, BlockingClient
from zocrates_client.blocking import connect as connect_blocking
from zocrates_client.errors import ConnectError, ConnectionLost, MessageTooLarge, RpcError
from zocratesd import locations
from zocratesd.mcp import tools
from zocratesd.mcp.early import (
    INTERNAL_ERROR,
    JSONRPC,
    READ_CHUNK_BYTES,
    CancelTool,
    EarlySession,
    Forward,
    LineDecoder,
    Reply,
    RunTool,
)
from zocratesd.mcp.loader import SdkLoader
from zocratesd.mcp.stdio import write_all

log = logging.getLogger("zocratesd.mcp")


class Stop(enum.Enum):
    """Why the cold face stopped (see the module docstring)."""

    LOADED = "loaded"
    LOST = "lost"
    FULL = "full"
    EOF = "eof"
    GONE = "gone"  # stdout is closed: the client has gone, nothing more to say to it


@dataclass
class _Call:
    """A quick tool call in progress: its generator and the daemon request it waits for."""

    name: str
    work: tools.ToolRun
    waiting_for: Any = None


@dataclass
class ColdFace:
    """One MCP connection on the wire's fds, served without an event loop library."""

    client: BlockingClient
    wire_in: int
    wire_out: int
    loader: SdkLoader
    session: EarlySession = field(default_factory=EarlySession)
    decoder: LineDecoder = field(default_factory=LineDecoder)
    calls: dict[Any, _Call] = field(default_factory=dict)  # MCP request id -> its call
    _by_daemon_id: dict[Any, Any] = field(default_factory=dict)  # daemon request id -> MCP request id
    _gone: bool = False

    def serve(self) -> Stop:
        """Serve until one of the reasons to stop, with no call running."""
        selector = selectors.DefaultSelector()
        selector.register(self.wire_in, selectors.EVENT_READ, "stdin")
        selector.register(self.client, selectors.EVENT_READ, "daemon")
        selector.register(self.loader.wake_fd, selectors.EVENT_READ, "sdk")
        reading, stop = True, Stop.EOF
        try:
            while True:
                if reading and (why := self._why_stop_reading()) is not None:
                    selector.unregister(self.wire_in)
                    reading, stop = False, why
                if self._gone:
                    return Stop.GONE
                if not reading and not self.calls:
                    return stop
                for key, _ in selector.select():
                    if key.data == "daemon":
                        self._from_daemon(self.client.read())
                        if self.client.closed:
                            selector.unregister(self.client)
                    elif key.data == "sdk":
                        selector.unregister(self.loader.wake_fd)
                    elif reading and self._why_stop_reading() is None:  # not even a line more once it is
                        self.loader.idle.clear()  # a request in hand: the SDK's import waits
                        if not self._from_stdin():
                            selector.unregister(self.wire_in)
                            reading, stop = False, Stop.EOF
                self._settle()
        finally:
            selector.close()

    def _why_stop_reading(self) -> Stop | None:
        if self.client.closed:
            return Stop.LOST
        if self.loader.done.is_set():
            return Stop.LOADED
        if self.session.queue_full:
            return Stop.FULL
        return None

    def _settle(self) -> None:
        """The SDK's import goes on when a request waits for it, or nothing is in hand."""
        if self.session.has_queued or not self.calls:
            self.loader.idle.set()

    # --- stdin ------------------------------------------------------------------------------------

    def _from_stdin(self) -> bool:
        """Read once and act on every complete line; False at the end of stdin."""
        try:
            data = os.read(self.wire_in, READ_CHUNK_BYTES)
        except OSError:
            data = b""
        dropped = self.decoder.dropped
        for line in self.decoder.feed(data):
            for event in self.session.receive(line):
                if isinstance(event, Reply):
                    self._send(event.message)
                elif isinstance(event, RunTool):
                    self._start(event)
                elif isinstance(event, CancelTool):
                    self._cancel(event.id)
                elif isinstance(event, Forward):  # never before hand_off, which the anyio face does
                    raise AssertionError("the cold face forwarded a line")
        if self.decoder.dropped > dropped:
            log.warning("dropped a line of more than %d bytes", self.decoder.max_bytes)
        return bool(data)

    # --- the calls --------------------------------------------------------------------------------

    def _start(self, event: RunTool) -> None:
        call = self.calls[event.id] = _Call(event.name, tools.run(event.name, event.arguments))
        self._step(event.id, call, None)

    def _step(self, rid: Any, call: _Call, result: Any, error: RpcError | None = None) -> None:
        """Resume the call's generator with a daemon answer (its result, or the error thrown in);
        send the daemon request it yields next, or reply with what it returns."""
        try:
            wanted = call.work.throw(error) if error is not None else call.work.send(result)
        except StopIteration as done:
            self._finish(rid, done.value)
            return
        except Exception as exc:  # a bug, not a bad call: the client gets an error, the face goes on
            log.exception("tool %s failed", call.name)
            self._finish(rid, None, error={"code": INTERNAL_ERROR, "message": str(exc)})
            return
        try:
            call.waiting_for = self.client.start(wanted.method, wanted.params)
        except ConnectionLost as exc:
            self._finish(rid, tools.lost_result(exc))
        except MessageTooLarge as exc:
            self._finish(rid, tools.error_result(f"{call.name}: {exc}"))
        else:
            self._by_daemon_id[call.waiting_for] = rid

    def _from_daemon(self, answers: list[Answer]) -> None:
        for answer in answers:
            rid = self._by_daemon_id.pop(answer.id, None)
            call = self.calls.get(rid) if rid is not None else None
            if call is None:
                continue  # its call was cancelled meanwhile
            call.waiting_for = None
            error = answer.error
            if isinstance(error, RpcError):
                self._step(rid, call, None, error)
            elif error is not None:  # the connection ended: a read is not retried here (LOST hands over)
                self._finish(rid, tools.lost_result(error))
            else:
                self._step(rid, call, answer.result)

    def _cancel(self, rid: Any) -> None:
        """The client cancelled call `rid`: no reply (as the SDK does); its daemon request is cancelled."""
        call = self.calls.pop(rid, None)
        if call is None:
            return
        if call.waiting_for is not None:
            self._by_daemon_id.pop(call.waiting_for, None)
            self.client.cancel(call.waiting_for)
        call.work.close()
        self.session.tool_done(rid)

    def _finish(self, rid: Any, result: dict[str, Any] | None, *, error: dict[str, Any] | None = None) -> None:
        call = self.calls.pop(rid)
        call.work.close()
        self.session.tool_done(rid)
        self._send({"jsonrpc": JSONRPC, "id": rid, "error": error} if error is not None
                   else {"jsonrpc": JSONRPC, "id": rid, "result": result})

    # --- stdout -----------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if self._gone:
            return
        try:
            write_all(self.wire_out, orjson.dumps(message) + b"\n")
        except OSError as exc:  # EPIPE: the client has gone
            log.info("stdout closed: %s", exc)
            self._gone = True


def connect(data_dir: Path) -> BlockingClient | None:
    """A connection to the data dir's live daemon, its `initialize` sent (its answer is not
    waited for, and dropped: the first tool call goes right behind it; a daemon that refused the
    handshake refuses the call too, and says why there); None when no daemon is live."""
    if locations.live_daemon(data_dir) is None:
        return None
    try:
        client = connect_blocking(data_dir)
    except ConnectError as exc:
        log.info("the cold face cannot connect (%s): the anyio face serves", exc)
        return None
    try:
        client.start("initialize", {
            "protocolVersion": locations.PROTOCOL_VERSION, "clientCapabilities": tools.DAEMON_CLIENT_CAPABILITIES,
            "clientInfo": tools.DAEMON_CLIENT_INFO,
        })
    except ConnectionLost:
        return None
    return client
