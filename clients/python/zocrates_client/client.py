"""The async client: one JSON-RPC connection to zocratesd, on asyncio or trio (through anyio).

    async with zocrates_client.connect() as client:
        await client.initialize()
        session_id = await client.new_session(title="Reading group")
        for info in await client.list_sessions():
            print(info.session_id, info.title)

Contract:
- `connect()` owns a task group: a reader task, a writer task and one task per request the daemon
  sends us. Leaving the `async with` block fails calls still pending in other tasks with
  `ConnectionLost`, ends subscriptions, cancels those tasks and closes the socket; an exception
  raised in the block comes out of it unchanged (never wrapped in an ExceptionGroup, on trio either).
- The wire state (ids, pending calls and their outcomes, requests in flight, `$/cancel_request`,
  error answers as `RpcError`) is the sans-IO `zocrates_wire.connection.Connection` the daemon is
  built on too; this module is the anyio I/O around it.
- Requests get integer ids minted by the client and wait until the connection settles them. An
  error answer raises `RpcError`; a connection that ends first fails every pending call, and every
  later one, with `ConnectionLost`. A call cancelled by its caller sends `$/cancel_request` for it
  (ACP's cascading cancel) and its late answer is ignored.
- Frames are written whole by one writer task, so cancelling a caller never leaves half a frame on
  the wire.
- `session/update` notifications go to every open `Updates` subscription (`client.updates()`), each
  with its own bounded buffer. The reader never waits for a subscriber: a subscription that falls
  `max_buffer` updates behind ends with `UpdatesOverflow` after its buffered updates, while calls
  carry on. Other notifications from the daemon are ignored.
- A request from the daemon (e.g. `session/request_permission`) goes to the `on_request` handler in
  its own task; without a handler it is answered at once with -32601, so the daemon never waits.
  `$/cancel_request` from the daemon cancels that handler, and the request is answered with -32800.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, NotRequired, TypedDict, assert_never

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.abc import SocketAttribute
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from zocrates_client._discovery import Endpoint, open_endpoint
from zocrates_client._limits import DEFAULT_MAX_INCOMING_FRAME_BYTES, MAX_OUTGOING_FRAME_BYTES
from zocrates_client._types import (
    CheckpointAction,
    InitializeResult,
    Mode,
    PromptResult,
    RequestHandler,
    RewindResult,
    SessionInfo,
    SessionSummary,
    SessionUpdate,
    UiSession,
    Update,
)
from zocrates_client.errors import ConnectionLost, MessageTooLarge, RpcError, UpdatesOverflow
from zocrates_wire import PROTOCOL_VERSION, jsonrpc
from zocrates_wire.connection import (
    CancelRequested,
    Connection,
    NeedData,
    NotificationReceived,
    OversizeFrame,
    Rejected,
    RequestReceived,
    ResponseReceived,
    UnexpectedResponse,
)
from zocrates_wire.framing import READ_CHUNK_BYTES, encode_message
from zocrates_wire.jsonrpc import Params, Reply, RequestId

# The version `initialize` reports as the client's: the distribution's, which ships this client.
from zocratesd import __version__

log = logging.getLogger("zocrates_client")

# Updates a subscription may hold unread. A turn streams a few hundred chunks; replaying a long
# session streams thousands, but `load_session` returns those in full whatever the subscriptions do.
DEFAULT_UPDATES_BUFFER: Final = 1024

# Frames waiting for the writer. Callers wait (cancellably, before anything is written) when the
# daemon reads slower than they send, so memory stays bounded.
OUTGOING_QUEUE_FRAMES: Final = 64


# anyio 4.7 renamed wait_socket_readable (pyproject allows anyio 4.4).
_wait_readable = getattr(anyio, "wait_readable", None) or anyio.wait_socket_readable

class _FsCapabilities(TypedDict):
    readTextFile: bool
    writeTextFile: bool


class ClientCapabilities(TypedDict):
    """ACP `clientCapabilities`."""

    fs: _FsCapabilities
    terminal: bool


# This library offers the agent no file system and no terminal.
CLIENT_CAPABILITIES: Final[ClientCapabilities] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


class CheckpointResponse(TypedDict):
    action: CheckpointAction
    guidance: NotRequired[str]


class ResumeParams(TypedDict):
    """`_zocrates/chat/resume` params."""

    sessionId: str
    invocationId: str
    interruptId: str
    response: CheckpointResponse


class Updates:
    """A subscription to `session/update` notifications: `async for update in subscription`.

    Receives from its creation until `close()` (or the end of a `with` block), the client's close,
    or an overflow. Iteration yields `SessionUpdate`s in arrival order, then stops: normally when the
    subscription or the client was closed, with `ConnectionLost` when the connection was lost, with
    `UpdatesOverflow` when more than `max_buffer` updates were left unread. One consumer per
    subscription; open several subscriptions for several consumers.
    """

    def __init__(self, client: Client, session_id: str | None, max_buffer: int):
        if max_buffer < 1:
            raise ValueError("max_buffer must be positive")
        self.session_id = session_id
        self.max_buffer = max_buffer
        self._client = client
        self._items: deque[SessionUpdate] = deque()
        self._waiter: anyio.Event | None = None
        self._ended = False
        self._end_error: tuple[type[Exception], tuple[Any, ...]] | None = None

    def close(self) -> None:
        """Stop receiving. Updates already buffered are still yielded, then iteration stops."""
        self._finish(None)

    def __enter__(self) -> Updates:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __aiter__(self) -> Updates:
        return self

    async def __anext__(self) -> SessionUpdate:
        await anyio.lowlevel.checkpoint()
        while True:
            if self._items:
                return self._items.popleft()
            if self._ended:
                if self._end_error is not None:
                    cls, args = self._end_error
                    raise cls(*args)  # a fresh instance per raise: no traceback piles up
                raise StopAsyncIteration
            # No await between the checks above and this wait, so no wake-up can be missed.
            self._waiter = anyio.Event()
            await self._waiter.wait()

    # --- fed by the client's reader -------------------------------------------------------------

    def _push(self, item: SessionUpdate) -> None:
        if self._ended or (self.session_id is not None and item.session_id != self.session_id):
            return
        if len(self._items) >= self.max_buffer:
            self._finish((UpdatesOverflow, (self.max_buffer,)))
            return
        self._items.append(item)
        self._wake()

    def _finish(self, error: tuple[type[Exception], tuple[Any, ...]] | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._end_error = error
        self._client._subscriptions.discard(self)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None


class Turn:
    """One turn (`session/prompt` or `_zocrates/chat/resume`) and its updates, as they stream.

        async with client.stream_prompt(session_id, "What is HyDE?") as turn:
            async for item in turn:          # SessionUpdates of this session, in order
                ...
        print(turn.result.stop_reason)

    The request is sent when the block is entered, by a task of the client's, so the caller may
    stop iterating at any time. Iteration ends after the last update that came before the answer
    (the daemon sends a turn's updates before its result), then raises what the request raised
    (`RpcError`, `ConnectionLost`), or `UpdatesOverflow` when the updates were not read in time.
    `client.cancel(session_id)` ends the turn `cancelled`. Leaving the block before the answer
    cancels the request itself (`$/cancel_request`: the daemon stops the turn) and waits for it.
    A research checkpoint comes to the connection's `on_request` handler, as any request does.
    """

    def __init__(self, client: Client, session_id: str, method: str, params: Params, max_buffer: int):
        self.session_id = session_id
        self._client = client
        self._method = method
        self._params = params
        self._updates = client.updates(session_id, max_buffer=max_buffer)
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._started = False
        self._result: PromptResult | None = None
        self._error: Exception | None = None

    @property
    def done(self) -> bool:
        """True once the request has been answered (or failed)."""
        return self._done.is_set()

    @property
    def result(self) -> PromptResult:
        """How the turn ended; raises what the request raised, or RuntimeError before the end."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the turn has not ended yet")
        return self._result

    async def wait(self) -> PromptResult:
        """Wait for the answer (updates not read stay buffered) and return `result`."""
        await self._done.wait()
        return self.result

    async def __aenter__(self) -> Turn:
        if self._started:
            raise RuntimeError("a Turn runs once")
        self._started = True
        if self._client.closed or self._client._tg is None:
            self._updates.close()
            self._error = ConnectionLost(self._client._end_reason or "the client is not connected")
            self._done.set()
        else:
            # Subscribed (in __init__) before the request is sent, so no update is missed.
            self._client._tg.start_soon(self._run, name=f"zocrates_client {self._method}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if not self._done.is_set():
            self._scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._done.wait()
        self._updates.close()

    def __aiter__(self) -> Turn:
        return self

    async def __anext__(self) -> SessionUpdate:
        if not self._started:
            raise RuntimeError("iterate a Turn inside `async with`")
        try:
            return await self._updates.__anext__()
        except StopAsyncIteration:
            await self._done.wait()
            if self._error is not None:
                raise self._error from None
            raise

    async def _run(self) -> None:
        try:
            with self._scope:
                self._result = PromptResult.from_wire(await self._client.call(self._method, self._params))
        except Exception as exc:
            self._error = exc
        finally:
            if self._result is None and self._error is None:
                self._error = ConnectionLost(self._client._end_reason or f"{self._method} was cancelled")
            # Every update sent before the answer was delivered before it (one reader, in order).
            self._updates.close()
            self._done.set()


def prompt_params(
    session_id: str,
    text: str,
    mode: Mode | None,
    items: Sequence[str | tuple[str, str]],
    collection: str | None,
    snippets: Sequence[dict[str, Any]],
    online: bool | None = None,
) -> dict[str, Any]:
    """`session/prompt` params: the text, and the Zotero context in `_meta.zocrates` (with `online`:
    the person's choice for this turn's search beyond the library)."""
    zocrates: dict[str, Any] = {}
    if online is not None:
        zocrates["online"] = online
    if mode is not None:
        zocrates["mode"] = mode
    elif collection is not None:
        zocrates["mode"] = "collection"
    if items:
        zocrates["activeItems"] = [
            {"item_key": i} if isinstance(i, str) else {"item_key": i[0], "title": i[1]} for i in items
        ]
    if collection is not None:
        zocrates["collection"] = collection
    if snippets:
        zocrates["snippets"] = list(snippets)
    params: dict[str, Any] = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    if zocrates:
        params["_meta"] = {"zocrates": zocrates}
    return params


def resume_params(
    session_id: str, invocation_id: str, interrupt_id: str, action: CheckpointAction, guidance: str | None
) -> ResumeParams:
    response: CheckpointResponse = {"action": action}
    if guidance:
        response["guidance"] = guidance
    return {"sessionId": session_id, "invocationId": invocation_id, "interruptId": interrupt_id, "response": response}


class Client:
    """A connection to zocratesd. Made by `connect()`, usable only inside its `async with` block.

    Every method raises `ConnectionLost` when the connection is gone (or goes before the answer),
    and `RpcError` when the daemon answers with an error: code -32002 for an unknown session,
    -32602 for an invalid id or title, 1001 when the session is busy.
    """

    def __init__(
        self,
        stream: anyio.abc.SocketStream,
        *,
        socket_path: str,
        data_dir: Path | None,
        on_request: RequestHandler | None = None,
        max_frame_bytes: int = DEFAULT_MAX_INCOMING_FRAME_BYTES,
    ):
        self.socket_path = socket_path
        self.data_dir = data_dir
        self._stream = stream
        self._sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
        self._on_request = on_request
        # Integer ids (no prefix); the daemon's are "z:<n>". The daemon is trusted not to flood us
        # with requests, so no in-flight limit.
        self._conn = Connection(max_frame_bytes=max_frame_bytes, max_send_bytes=MAX_OUTGOING_FRAME_BYTES)
        # Replays being collected: request id -> (session id, the updates so far). An entry is
        # removed by the reader when the answer arrives, so a replay ends exactly at its answer.
        self._replays: dict[RequestId, tuple[str, list[Update]]] = {}
        self._subscriptions: set[Updates] = set()
        out: tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]
        out = anyio.create_memory_object_stream[bytes](OUTGOING_QUEUE_FRAMES)
        self._out_send, self._out_recv = out
        self._tg: anyio.abc.TaskGroup | None = None
        self._lost = False  # ended by the daemon or the network, not by leaving `connect()`

    @property
    def closed(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return self._conn.closed

    @property
    def _end_reason(self) -> str | None:
        """Why the connection ended (None while it lasts)."""
        return self._conn.end_reason

    # --- typed methods --------------------------------------------------------------------------

    async def initialize(
        self,
        *,
        client_name: str = "zocrates_client",
        client_version: str = __version__,
        protocol_version: int = PROTOCOL_VERSION,
        asks_about_writes: bool = False,
    ) -> InitializeResult:
        """ACP `initialize`: the daemon's protocol version, identity and `_zocrates/*` extensions.
        `asks_about_writes`: this client asks its person about the writes into Zotero a turn
        proposed (from `_zocrates/writes/list`) instead of the daemon asking with
        `session/request_permission` (a `toolCall` of kind `edit` with `_meta.zocrates.writeId`)."""
        capabilities: dict[str, object] = dict(CLIENT_CAPABILITIES)
        if asks_about_writes:
            capabilities["_meta"] = {"zocrates": {"asksAboutWrites": {}}}
        result = await self.call(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "clientCapabilities": capabilities,
                "clientInfo": {"name": client_name, "version": client_version},
            },
        )
        return InitializeResult.from_wire(result)

    async def new_session(self, cwd: str | None = None, title: str | None = None) -> str:
        """Create a session and return its id. `cwd` defaults to the current directory; `title`
        (1-200 characters, else -32602) is sent as `_meta.zocrates.title`, else the daemon names it."""
        meta = {"_meta": {"zocrates": {"title": title}}} if title is not None else {}
        params = {"cwd": cwd if cwd is not None else os.getcwd(), "mcpServers": [], **meta}
        result = await self.call("session/new", params)
        return str(result["sessionId"])

    async def list_sessions(self) -> list[SessionInfo]:
        """Every session, oldest first by creation."""
        result = await self.call("session/list", {})
        return [SessionInfo.from_wire(s) for s in result.get("sessions", [])]

    async def load_session(self, session_id: str, cwd: str | None = None) -> list[Update]:
        """ACP `session/load`: the session's history as the `update` objects of the `session/update`
        notifications the daemon sent for it before its answer, in order (the last one is a
        `session_info_update` with the title). Open subscriptions receive them too.

        Two loads of one session running at once on one connection each collect both replays.
        """
        params = {"sessionId": session_id, "cwd": cwd if cwd is not None else os.getcwd(), "mcpServers": []}
        collected: list[Update] = []
        await self._request("session/load", params, replay=(session_id, collected))
        return collected

    async def delete_session(self, session_id: str) -> None:
        """Delete a session for good. -32002 when it does not exist, 1001 while it is busy."""
        await self.call("session/delete", {"sessionId": session_id})

    async def get_session(self, session_id: str) -> UiSession:
        """`_zocrates/session/get`: the UI session object (title, times, messages, pending_hitl)."""
        result: UiSession = await self.call("_zocrates/session/get", {"sessionId": session_id})
        return result

    async def rename_session(self, session_id: str, title: str) -> SessionSummary:
        """`_zocrates/session/rename`: set the title (control characters become spaces; 1-200 chars)."""
        result: SessionSummary = await self.call("_zocrates/session/rename", {"sessionId": session_id, "title": title})
        return result

    async def rename(self, session_id: str, title: str) -> SessionSummary:
        """The same as `rename_session`."""
        return await self.rename_session(session_id, title)

    # --- turns ----------------------------------------------------------------------------------

    async def prompt(
        self,
        session_id: str,
        text: str,
        *,
        mode: Mode | None = None,
        items: Sequence[str | tuple[str, str]] = (),
        collection: str | None = None,
        snippets: Sequence[dict[str, Any]] = (),
    ) -> PromptResult:
        """`session/prompt`: run one turn and return how it ended. Its updates go to the open
        subscriptions; `stream_prompt` gives them with the turn. `items` are Zotero item keys (or
        `(key, title)` pairs) that scope the search to those papers; `collection` a collection key;
        `mode` overrides the scope the daemon infers (papers when items are given, else library).
        Raises RpcError: 1001 busy, 1003 model error, -32002 unknown session, -32602 bad params."""
        return PromptResult.from_wire(
            await self.call("session/prompt", prompt_params(session_id, text, mode, items, collection, snippets))
        )

    async def resume(
        self, session_id: str, invocation_id: str, interrupt_id: str,
        action: CheckpointAction, guidance: str | None = None,
    ) -> PromptResult:
        """`_zocrates/chat/resume`: answer a pending research checkpoint (the session's
        `pending_hitl` ids): `extend_budget` searches further (`guidance` first), `synthesize`
        answers now. Returns when the turn ends or pauses again (then `pending_hitl` is set).
        RpcError 1004 when that checkpoint is not pending."""
        return PromptResult.from_wire(
            await self.call("_zocrates/chat/resume", resume_params(session_id, invocation_id, interrupt_id, action, guidance))
        )

    def stream_prompt(
        self,
        session_id: str,
        text: str,
        *,
        mode: Mode | None = None,
        items: Sequence[str | tuple[str, str]] = (),
        collection: str | None = None,
        snippets: Sequence[dict[str, Any]] = (),
        max_buffer: int = DEFAULT_UPDATES_BUFFER,
        online: bool | None = None,
    ) -> Turn:
        """`prompt`, with its updates as they stream: `async with client.stream_prompt(...) as turn:
        async for update in turn: ...`, then `turn.result`. See `Turn`. `online`: allow (True) or
        forbid (False) this turn's search beyond the library; None leaves it to `online.mode`."""
        params = prompt_params(session_id, text, mode, items, collection, snippets, online)
        return Turn(self, session_id, "session/prompt", params, max_buffer)

    def stream_resume(
        self, session_id: str, invocation_id: str, interrupt_id: str,
        action: CheckpointAction, guidance: str | None = None, *, max_buffer: int = DEFAULT_UPDATES_BUFFER,
    ) -> Turn:
        """`resume`, with its updates as they stream (see `Turn`)."""
        params = resume_params(session_id, invocation_id, interrupt_id, action, guidance)
        return Turn(self, session_id, "_zocrates/chat/resume", params, max_buffer)

    async def cancel(self, session_id: str) -> None:
        """`session/cancel` (a notification): stop the session's running turn, if any. The turn's
        request then answers `stop_reason == "cancelled"`; a checkpoint it waited at stays pending."""
        await self.notify("session/cancel", {"sessionId": session_id})

    async def rewind(self, session_id: str, invocation_id: str) -> RewindResult:
        """`_zocrates/session/rewind`: undo that turn and every later one. -32002 when no live turn
        has that id, 1001 while the session is busy."""
        result: RewindResult = await self.call(
            "_zocrates/session/rewind", {"sessionId": session_id, "invocationId": invocation_id}
        )
        return result

    async def library_status(self, refresh: bool = False) -> dict[str, Any]:
        """`_zocrates/library/status`: the library index's state, counts and progress (a dict: the
        daemon may add fields)."""
        result: dict[str, Any] = await self.call("_zocrates/library/status", {"refresh": refresh} if refresh else {})
        return result

    # --- writes into Zotero ------------------------------------------------------------------------

    async def write(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One of the `_zocrates/writes/*` methods (protocol/README.md, "Writes into Zotero"): the
        write as the daemon recorded it (`state` says whether it awaits consent, waits for Zotero,
        or was applied)."""
        if not method.startswith("_zocrates/writes/"):
            raise ValueError(f"{method!r} is not a write method")
        result: dict[str, Any] = await self.call(method, params)
        return result

    async def confirm_write(self, write_id: str, *, always: bool = False) -> dict[str, Any]:
        return await self.write("_zocrates/writes/confirm", {"writeId": write_id, "always": always})

    async def discard_write(self, write_id: str) -> dict[str, Any]:
        return await self.write("_zocrates/writes/discard", {"writeId": write_id})

    async def undo_write(self, write_id: str | None = None, *, session_id: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("writeId", write_id), ("sessionId", session_id)) if v}
        return await self.write("_zocrates/writes/undo", params)

    async def list_writes(self, *, pending: bool = False, session_id: str | None = None, limit: int = 50) -> dict[str, Any]:
        params: dict[str, Any] = {"pending": pending, "limit": limit}
        if session_id:
            params["sessionId"] = session_id
        return await self.write("_zocrates/writes/list", params)

    # --- generic --------------------------------------------------------------------------------

    async def call(self, method: str, params: Params | None = None) -> Any:
        """Send a request and return its `result`; raises RpcError, ConnectionLost, MessageTooLarge."""
        return await self._request(method, params)

    async def notify(self, method: str, params: Params | None = None) -> None:
        """Send a notification (no answer comes). Raises ConnectionLost, MessageTooLarge."""
        await self._send(self._conn.notification(method, params))

    def updates(self, session_id: str | None = None, *, max_buffer: int = DEFAULT_UPDATES_BUFFER) -> Updates:
        """Subscribe to `session/update` notifications (of one session, or all), from now on.

        Subscribe before the call whose updates you want: a subscription sees only what arrives
        after it was made. See `Updates` for the end and overflow behaviour.
        """
        sub = Updates(self, session_id, max_buffer)
        if self.closed:
            sub._finish(self._end_error_spec())
        else:
            self._subscriptions.add(sub)
        return sub

    # --- requests -------------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        if self._end_reason is not None:
            raise ConnectionLost(self._end_reason)
        try:
            await self._out_send.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise ConnectionLost(self._end_reason or "the connection is closed") from None

    async def _request(
        self,
        method: str,
        params: Params | None,
        replay: tuple[str, list[Update]] | None = None,
    ) -> Any:
        call = self._conn.call(method, params)
        settled = anyio.Event()
        call.on_settled = settled.set
        if replay is not None:
            self._replays[call.id] = replay
        try:
            await self._send(call.frame)
            await settled.wait()
        except BaseException:
            # None when there is nothing to cancel: answered meanwhile, or the connection ended.
            notice = self._conn.cancel_request(call.id)
            if notice is not None:
                # Cancelled by our caller: tell the daemon to stop working on it. Best effort and
                # without waiting (a cancelled task must not block); the daemon answers -32800 and
                # the connection reports that late answer as unexpected, so it is dropped.
                try:
                    self._out_send.send_nowait(encode_message(notice))
                except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
            raise
        finally:
            self._replays.pop(call.id, None)
        return call.outcome()

    # --- the tasks ------------------------------------------------------------------------------

    def _start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._read_loop, name="zocrates_client reader")
        tg.start_soon(self._write_loop, name="zocrates_client writer")

    async def _write_loop(self) -> None:
        with self._out_recv:
            async for data in self._out_recv:
                try:
                    await self._stream.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    self._end(f"writing to zocratesd failed ({exc or type(exc).__name__})", lost=True)
                    return

    async def _receive(self) -> bytes:
        """The next bytes from the socket; b"" at end of stream. Raises OSError, ClosedResourceError.

        Not `stream.receive()`: on asyncio, anyio's UNIX stream completes the future a read waits
        on straight from the selector callback, without checking that the wait was not cancelled
        meanwhile, so closing the client while the daemon is sending logs an InvalidStateError (a
        sibling of agronholm/anyio#1267). `wait_readable` guards against that; only this task reads.
        """
        await anyio.lowlevel.checkpoint()  # a daemon that never pauses must not starve the loop
        while True:
            try:
                return self._sock.recv(READ_CHUNK_BYTES)
            except BlockingIOError:
                await _wait_readable(self._sock)

    async def _read_loop(self) -> None:
        reason = "zocratesd closed the connection"
        while self._end_reason is None:
            try:
                data = await self._receive()
            except ConnectionResetError:
                # The daemon died (or was killed) with our unread request in its buffer.
                reason = "zocratesd closed the connection abruptly (did it crash? see its log)"
                break
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                reason = f"the connection to zocratesd broke ({exc or type(exc).__name__})"
                break
            if not data:
                self._conn.receive_data(b"")  # end of input: a last line without "\n" still counts
                self._drain()
                break
            self._conn.receive_data(data)
            if not self._drain():
                reason = (
                    f"zocratesd sent a message over the client's {self._conn.max_frame_bytes}-byte frame cap; "
                    "it could not be matched to its call (raise max_frame_bytes in connect())"
                )
                break
        self._end(reason, lost=True)

    def _drain(self) -> bool:
        """Act on every complete frame; False when a frame was over the cap (the stream is unusable)."""
        while True:
            event = self._conn.next_event()
            match event:
                case NeedData():
                    return True
                case OversizeFrame():
                    return False
                case ResponseReceived(response=response):
                    self._replays.pop(response.id, None)  # its call was settled: its caller wakes
                case UnexpectedResponse():
                    pass  # an answer to a call cancelled meanwhile, or not ours: dropped
                case NotificationReceived(notification=note):
                    if note.method == "session/update":
                        self._deliver_update(note.params)
                    else:
                        log.debug("ignored notification %s", note.method)
                case CancelRequested():
                    pass  # the connection cancelled the handler's scope
                case RequestReceived(request=request):
                    if self._on_request is None:
                        self._reply_soon(self._conn.refuse_request(request))
                    else:
                        scope = anyio.CancelScope()
                        self._conn.on_cancel(request.id, scope.cancel)
                        assert self._tg is not None
                        self._tg.start_soon(self._serve_request, self._on_request, request, scope)
                case Rejected(reply=reply):
                    # A frame we cannot act on, a duplicate id: answered as the connection decided.
                    self._reply_soon(reply)
                case _:
                    assert_never(event)

    def _deliver_update(self, params: Params) -> None:
        session_id, update = params.get("sessionId"), params.get("update")
        if not isinstance(session_id, str) or not isinstance(update, dict):
            log.warning("ignored a malformed session/update")
            return
        for replay_session, collected in self._replays.values():
            if replay_session == session_id:
                collected.append(update)
        item = SessionUpdate(session_id, update)
        for sub in list(self._subscriptions):
            sub._push(item)

    def _reply_soon(self, message: Reply) -> None:
        # Sent from a task, never from the reader: the reader must not wait on a full queue, or a
        # daemon that waits for us to read would deadlock with us.
        assert self._tg is not None
        self._tg.start_soon(self._send_reply, encode_message(message))

    async def _send_reply(self, data: bytes) -> None:
        try:
            await self._send(data)
        except ConnectionLost:
            pass  # the daemon is gone; nobody is waiting for this answer any more

    async def _serve_request(self, handler: RequestHandler, msg: jsonrpc.Request, scope: anyio.CancelScope) -> None:
        reply: Reply | None = None
        try:
            with scope:
                try:
                    reply = jsonrpc.success(msg.id, await handler(msg.method, msg.params))
                except RpcError as exc:
                    reply = jsonrpc.error(exc.code, msg.id, exc.message, exc.data)
                except Exception as exc:
                    log.exception("the handler of %s failed", msg.method)
                    reply = jsonrpc.error(
                        jsonrpc.INTERNAL_ERROR, msg.id,
                        data={"kind": "internal", "message": f"{type(exc).__name__}: {exc}"},
                    )
        finally:
            answer = self._conn.finish_request(msg.id, reply, cancelled=scope.cancelled_caught)
        try:
            data = encode_message(answer)
            if len(data) > MAX_OUTGOING_FRAME_BYTES:
                raise MessageTooLarge(f"{len(data)} bytes, over the {MAX_OUTGOING_FRAME_BYTES}-byte frame cap")
        except (TypeError, ValueError, MessageTooLarge) as exc:
            log.error("the result of %s cannot be sent: %s", msg.method, exc)
            data = encode_message(
                jsonrpc.error(jsonrpc.INTERNAL_ERROR, msg.id, data={"kind": "internal", "message": f"unsendable result: {exc}"})
            )
        await self._send_reply(data)

    # --- the end --------------------------------------------------------------------------------

    def _end_error_spec(self) -> tuple[type[Exception], tuple[Any, ...]] | None:
        return (ConnectionLost, (self._end_reason,)) if self._lost else None

    def _end(self, reason: str, *, lost: bool) -> None:
        """End the connection once: fail pending calls, end subscriptions, stop the writer."""
        if self._conn.closed:
            return
        self._conn.close(reason)  # settles every pending call: its caller raises ConnectionLost
        self._lost = lost
        if lost:
            log.warning("%s", reason)
        self._out_send.close()
        for sub in list(self._subscriptions):
            sub._finish(self._end_error_spec())
        self._conn.cancel_in_flight()


@asynccontextmanager
async def connect(
    data_dir: str | os.PathLike[str] | None = None,
    socket_path: str | os.PathLike[str] | None = None,
    start_daemon: bool = False,
    *,
    on_request: RequestHandler | None = None,
    max_frame_bytes: int = DEFAULT_MAX_INCOMING_FRAME_BYTES,
    on_daemon_start: Callable[[int, Path], None] | None = None,
    serve_args: list[str] | None = None,
    stream: anyio.abc.SocketStream | None = None,
) -> AsyncIterator[Client]:
    """Connect to zocratesd and yield a `Client`; everything is closed when the block ends.

    The daemon is found by `socket_path`, else by the daemon.json of the Zotero data dir
    (`data_dir`, else $ZOTERO_DATA_DIR, else the one Zotero's settings name, else ~/Zotero, else
    the per-user default). With no daemon running, `start_daemon=True` starts `zocratesd serve`
    (as `zocratesd stdio` does) and waits for it; otherwise `DaemonNotRunning` is raised. Other connection failures raise `ConnectError`.
    `on_request` handles requests the daemon sends (see `RequestHandler`). `max_frame_bytes` caps
    one incoming message; a larger one ends the connection with `ConnectionLost`.
    `on_daemon_start(pid, log_path)` is called (from a worker thread) when a daemon was started,
    with `serve_args` on its command line. `stream`, a connected Unix socket stream (a daemon
    core run in this process over a socket pair: `zocratesd mcp --standalone`), is used as it is
    instead of finding a daemon.
    """
    if stream is not None:
        endpoint = Endpoint(stream, "(in-process)", Path(data_dir) if data_dir is not None else None)
    else:
        endpoint = await open_endpoint(data_dir, socket_path, start_daemon, on_daemon_start, serve_args)
    client: Client | None = None
    body_error: BaseException | None = None
    try:
        client = Client(
            endpoint.stream,
            socket_path=endpoint.socket_path,
            data_dir=endpoint.data_dir,
            on_request=on_request,
            max_frame_bytes=max_frame_bytes,
        )
        async with anyio.create_task_group() as tg:
            client._start(tg)
            try:
                yield client
            except BaseException as exc:
                # Re-raised below, outside the task group: trio's task groups would otherwise hand
                # the caller an ExceptionGroup for an exception that has nothing to do with them.
                body_error = exc
            finally:
                client._end("the client was closed", lost=False)
                tg.cancel_scope.cancel()
    finally:
        if client is not None:
            client._out_recv.close()
        with anyio.CancelScope(shield=True):
            await endpoint.stream.aclose()
    if body_error is not None:
        try:
            raise body_error
        finally:
            body_error = None  # break the frame <-> traceback cycle
