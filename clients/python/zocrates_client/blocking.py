"""A small synchronous client of zocratesd: a socket and the sans-IO `Connection`, no anyio.

Why: the async client (client.py) costs anyio, asyncio and a thread or two to start: ~240 M
instructions of imports alone (callgrind; bench/PROFILE.md, "The cold MCP face"), ~50 ms of a
cold process. A face that must answer within a few tens of milliseconds of its own start
(the cold `zocratesd mcp`, zocratesd/mcp/cold.py) speaks to the daemon with this instead. It is
the same wire and the same `zocratesd.rpc.connection.Connection` the async client and the daemon
are built on: ids, pending requests, late answers and cancels are decided there, not here.

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

from zocrates_client._errors import (
    ConnectError,
    ConnectionLost,
    DaemonNotRunning,
    MessageTooLarge,
    RpcError,
    ZocratesClientError,
)
from zocrates_client._limits import DEFAULT_MAX_INCOMING_FRAME_BYTES, MAX_OUTGOING_FRAME_BYTES, READ_CHUNK_BYTES
from zocratesd import locations
from zocratesd.rpc import jsonrpc, pump
from zocratesd.rpc.connection import (
    NEED_DATA,
    CancelRequested,
    Connection,
    NotificationReceived,
    OversizeFrame,
    Rejected,
    RequestId,
    RequestReceived,
    ResponseReceived,
    UnexpectedResponse,
)
from zocratesd.rpc.framing import encode_message

__all__ = ["Answer", "BlockingClient", "connect"]

log = logging.getLogger("zocrates_client")


@dataclass(frozen=True, slots=True)
class Answer:
    """The end of request `id`: its `result`, or `error` (RpcError, or ConnectionLost when the
    connection ended before its answer)."""

    id: RequestId
    result: Any = None
    error: ZocratesClientError | None = None


class BlockingClient:
    """One connection to the daemon over a connected, blocking socket (see the module docstring)."""

    def __init__(self, sock: socket.socket, *, max_frame_bytes: int = DEFAULT_MAX_INCOMING_FRAME_BYTES) -> None:
        self._sock = sock
        self._conn = Connection(max_frame_bytes=max_frame_bytes)
        self._methods: dict[RequestId, str] = {}  # pending id -> method, for the error messages
        self._end_reason: str | None = None

    @property
    def closed(self) -> bool:
        """The connection has ended: every call now raises ConnectionLost."""
        return self._end_reason is not None

    @property
    def pending(self) -> frozenset[RequestId]:
        return frozenset(self._methods)

    def fileno(self) -> int:
        return self._sock.fileno()

    # --- requests -------------------------------------------------------------------------------

    def start(self, method: str, params: dict[str, Any] | None = None) -> RequestId:
        """Send a request; its `Answer` comes out of a later `read()`. Raises ConnectionLost (the
        connection has ended: nothing was sent) or MessageTooLarge (nothing was sent either)."""
        if self._end_reason is not None:
            raise ConnectionLost(self._end_reason)
        outbound = self._conn.start_request(method, params)
        data = encode_message(outbound.message)
        if len(data) > MAX_OUTGOING_FRAME_BYTES:
            self._conn.discard_request(outbound.id)
            raise MessageTooLarge(f"{method} is {len(data)} bytes, over the {MAX_OUTGOING_FRAME_BYTES}-byte frame cap")
        self._methods[outbound.id] = method
        if not self._send(data):
            raise ConnectionLost(self._end_reason or "the connection is closed")
        return outbound.id

    def cancel(self, request_id: RequestId) -> None:
        """Give up request `request_id`: the daemon is told (`$/cancel_request`), its late answer dropped."""
        self._methods.pop(request_id, None)
        note = self._conn.cancel_request(request_id)
        if note is not None and self._end_reason is None:
            self._send(encode_message(note))

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
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
        if self._end_reason is not None:
            return self._fail_pending()
        try:
            data = self._sock.recv(READ_CHUNK_BYTES)
        except OSError as exc:
            self._end(f"the connection to zocratesd failed: {exc.strerror or exc}")
            return self._fail_pending()
        self._conn.receive_data(data)
        answers = self._events()
        if not data and self._end_reason is None:
            self._end("zocratesd closed the connection")
        if self._end_reason is not None:
            answers += self._fail_pending()
        return answers

    def _events(self) -> list[Answer]:
        answers: list[Answer] = []
        while True:
            event = self._conn.next_event()
            if event is NEED_DATA:
                return answers
            match event:
                case ResponseReceived(response=response):
                    method = self._methods.pop(response.id, None)
                    if response.error is not None:
                        answers.append(Answer(response.id, error=RpcError.from_wire(response.error, method)))
                    else:
                        answers.append(Answer(response.id, result=response.result))
                case UnexpectedResponse():
                    pass  # an answer to a call cancelled meanwhile, or not ours: dropped
                case NotificationReceived():
                    pass  # session updates and the like: nobody here subscribes
                case RequestReceived(request=request):
                    reply = jsonrpc.error(
                        jsonrpc.METHOD_NOT_FOUND, request.id,
                        data={"kind": "method_not_found", "message": f"this client does not handle {request.method}"},
                    )
                    self._send(encode_message(self._conn.finish_request(request.id, reply)))
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
        self._methods.clear()

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
        if self._end_reason is None:
            self._end_reason = reason
            self._conn.close()
            self._sock.close()

    def _fail_pending(self) -> list[Answer]:
        reason = self._end_reason or "the connection is closed"
        failed = [Answer(rid, error=ConnectionLost(f"{method}: {reason}")) for rid, method in self._methods.items()]
        self._methods.clear()
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
    flag, $ZOTERO_DATA_DIR, ~/Zotero, ...; its live daemon.json names the socket). With no live
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
