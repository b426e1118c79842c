"""A small synchronous client of zocratesd: a socket around the sans-IO `Connection`, no anyio.

Why: the async client (client.py) costs anyio, asyncio and a thread or two to start
(bench/PROFILE.md, "The cold MCP face"); a script or a program without an event loop that makes a
few calls needs none of that. It is the same wire and the same `zocrates_wire.connection.Connection`
the async client and the daemon are built on: ids, pending calls and their outcomes, late answers,
cancels and error answers are decided there; this module only reads and writes the socket.

Two ways to use it:

- blocking: `client.call(method, params)` sends a request and reads until its answer;
- in a caller's own `selectors` loop: `start()` sends a request and returns its id, `cancel()`
  gives one up, and, when `fileno()` is readable, `read()` reads once and returns the `Answer`s
  that arrived. Nothing is read or written behind the caller's back.

Requests the daemon sends to us are refused (method not found): a quick call never gets one; a
client that answers them (a research checkpoint) is the async one. Notifications are dropped.
Errors are the library's: `RpcError` in an answer, `ConnectionLost` for every pending call when
the connection ends (end of stream, a reset, a frame over the cap), `ConnectError` /
`DaemonNotRunning` from `connect`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

from zocrates_client._limits import DEFAULT_MAX_INCOMING_FRAME_BYTES, MAX_OUTGOING_FRAME_BYTES
from zocrates_client.errors import ConnectError, ConnectionLost, DaemonNotRunning, ZocratesClientError
from zocrates_wire.connection import (
    NEED_DATA,
    Call,
    CancelRequested,
    Connection,
    NotificationReceived,
    OversizeFrame,
    Rejected,
    RequestReceived,
    ResponseReceived,
    UnexpectedResponse,
)
from zocrates_wire.framing import READ_CHUNK_BYTES, encode_message
from zocrates_wire.jsonrpc import Params, RequestId

# Finding and starting the daemon is the daemon's own logic (its runtime files and their trust
# rules, the detached `zocratesd serve`), shared with `zocratesd stdio`; both modules are stdlib-only.
from zocratesd import locations
from zocratesd.rpc import pump

__all__ = ["Answer", "BlockingClient", "connect"]

log = logging.getLogger("zocrates_client")


@dataclass(frozen=True, slots=True)
class Answer:
    """The end of request `id`: its `result`, or `error` (RpcError, or ConnectionLost when the
    connection ended before its answer)."""

    id: RequestId
    result: Any = None
    error: ZocratesClientError | None = None

    @classmethod
    def of(cls, call: Call) -> Answer:
        """The answer of a settled call."""
        error = call.error()
        return cls(call.id, error=error) if error is not None else cls(call.id, result=call.outcome())


class BlockingClient:
    """One connection to the daemon over a connected, blocking socket (see the module docstring)."""

    def __init__(self, sock: socket.socket, *, max_frame_bytes: int = DEFAULT_MAX_INCOMING_FRAME_BYTES) -> None:
        self._sock = sock
        self._conn = Connection(max_frame_bytes=max_frame_bytes, max_send_bytes=MAX_OUTGOING_FRAME_BYTES)
        self._calls: dict[RequestId, Call] = {}  # the calls whose Answer the caller still expects

    @property
    def closed(self) -> bool:
        """The connection has ended: every call now raises ConnectionLost."""
        return self._conn.closed

    @property
    def pending(self) -> frozenset[RequestId]:
        return frozenset(self._calls)

    def fileno(self) -> int:
        return self._sock.fileno()

    # --- requests -------------------------------------------------------------------------------

    def start(self, method: str, params: Params | None = None) -> RequestId:
        """Send a request; its `Answer` comes out of a later `read()`. Raises ConnectionLost (the
        connection has ended: nothing was sent) or MessageTooLarge (nothing was sent either)."""
        call = self._conn.call(method, params)
        self._calls[call.id] = call
        if not self._send(call.frame):
            raise ConnectionLost(self._conn.end_reason or "the connection is closed")
        return call.id

    def cancel(self, request_id: RequestId) -> None:
        """Give up request `request_id`: the daemon is told (`$/cancel_request`), its late answer dropped."""
        self._calls.pop(request_id, None)
        note = self._conn.cancel_request(request_id)
        if note is not None and not self._conn.closed:
            self._send(encode_message(note))

    def call(self, method: str, params: Params | None = None) -> Any:
        """Send a request and block until its answer: its result, or raises RpcError, ConnectionLost."""
        rid = self.start(method, params)
        while True:
            for answer in self.read():
                if answer.id == rid:
                    if answer.error is not None:
                        raise answer.error
                    return answer.result

    # --- input ----------------------------------------------------------------------------------

    def read(self) -> list[Answer]:
        """Read once (blocking, unless the caller's selector said the socket is readable) and return
        the answers that came; at the end of the connection, every pending call's ConnectionLost."""
        if self._conn.closed:
            return self._fail_pending()
        try:
            data = self._sock.recv(READ_CHUNK_BYTES)
        except OSError as exc:
            self._end(f"the connection to zocratesd failed: {exc.strerror or exc}")
            return self._fail_pending()
        self._conn.receive_data(data)
        answers = self._events()
        if not data:
            self._end("zocratesd closed the connection")
        if self._conn.closed:
            answers += self._fail_pending()
        return answers

    def _events(self) -> list[Answer]:
        answers: list[Answer] = []
        while True:
            event = self._conn.next_event()
            if event is NEED_DATA:
                return answers
            match event:
                case ResponseReceived(call=call):
                    if self._calls.pop(call.id, None) is not None:
                        answers.append(Answer.of(call))
                case UnexpectedResponse():
                    pass  # an answer to a call cancelled meanwhile, or not ours: dropped
                case NotificationReceived():
                    pass  # session updates and the like: nobody here subscribes
                case RequestReceived(request=request):
                    self._send(encode_message(self._conn.refuse_request(request)))
                case CancelRequested():
                    pass  # requests of the daemon are answered at once: nothing to cancel
                case Rejected(reply=reply):
                    self._send(encode_message(reply))  # a frame we cannot act on, answered as the connection decided
                case OversizeFrame(limit=limit):
                    # Its id cannot be known, so no pending call can be matched to it: give up.
                    self._end(f"zocratesd sent a frame over the {limit}-byte cap")
                    return answers
                case _:
                    assert_never(event)

    # --- the end --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; pending calls are abandoned."""
        self._end("the client was closed")
        self._calls.clear()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, data: bytes) -> bool:
        """Write a whole frame; False (the connection ended) when the socket fails."""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self._end(f"the connection to zocratesd failed: {exc.strerror or exc}")
            return False
        return True

    def _end(self, reason: str) -> None:
        """End the connection once: the connection settles every pending call with ConnectionLost."""
        if not self._conn.closed:
            self._conn.close(reason)
            self._sock.close()

    def _fail_pending(self) -> list[Answer]:
        failed = [Answer.of(call) for call in self._calls.values()]
        self._calls.clear()
        return failed


def connect(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    socket_path: str | os.PathLike[str] | None = None,
    start_daemon: bool = False,
    serve_args: list[str] | None = None,
    on_start: Callable[[int, Path], None] | None = None,
    max_frame_bytes: int = DEFAULT_MAX_INCOMING_FRAME_BYTES,
) -> BlockingClient:
    """A blocking client connected to the daemon: of `socket_path`, or of the data dir (the
    flag, $ZOTERO_DATA_DIR, Zotero's settings, ~/Zotero, ...; its live daemon.json names the socket). With no live
    daemon, `start_daemon` starts one and waits, as `zocratesd stdio` does (blocking: up to the
    pump's start timeout); else DaemonNotRunning. Raises ConnectError."""
    if socket_path is not None:
        path = os.fspath(socket_path)
        try:
            return BlockingClient(pump.connect_unix(path), max_frame_bytes=max_frame_bytes)
        except (FileNotFoundError, ConnectionRefusedError):
            raise DaemonNotRunning(None, path) from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to zocratesd at {path}: {exc.strerror or exc}") from None
    resolved = locations.resolve_data_dir(data_dir)
    if start_daemon:
        try:
            sock = pump.connect_to_daemon(resolved, start=True, serve_args=serve_args, on_start=on_start)
        except (pump.PumpError, locations.RuntimeFileError) as exc:
            raise ConnectError(f"could not start zocratesd for {resolved}: {exc}") from None
        return BlockingClient(sock, max_frame_bytes=max_frame_bytes)
    info = locations.live_daemon(resolved)
    if info is None:
        raise DaemonNotRunning(resolved)
    try:
        return BlockingClient(pump.connect_unix(info.socket), max_frame_bytes=max_frame_bytes)
    except OSError as exc:
        raise ConnectError(
            f"zocratesd (pid {info.pid}) serves {resolved} but refused a connection on {info.socket} "
            f"({exc.strerror or exc}); it may be starting or stopping, try again"
        ) from None
