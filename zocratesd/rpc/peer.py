"""One JSON-RPC connection, both ways.

jsonrpcserver dispatches the requests that come in (method lookup, handler errors); it is
server-only, so this layer owns what it cannot do (research/protocol.md section 3):

- each inbound request runs in its own task, so a `session/prompt` that lasts a whole turn never
  blocks the `session/cancel` behind it;
- `$/cancel_request {requestId}` cancels that request's task, which is then answered with -32800
  (LSP/ACP rule: a cancelled request still gets an answer, so client futures never leak);
- our own requests to the client (`session/request_permission`) get ids `"z:<n>"`, which can never
  collide with a client's, and wait in a pending table for the response;
- one writer at a time, one frame per message; once the connection is gone, sends are dropped
  silently (a turn whose client vanished still runs to the end and is persisted).

Concurrency is structured: `run()` owns a task group; every request task lives in it, and the
connection ends only when its requests have been answered or cancelled. `stop_reading()` (daemon
shutdown) ends the read loop but lets the requests in flight finish: a request is never cancelled
halfway through a database write just because the daemon was asked to stop.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import anyio
import anyio.abc
from jsonrpcserver.async_dispatcher import dispatch_request
from jsonrpcserver.dispatcher import create_request, to_response
from jsonrpcserver.response import to_serializable_one

from zocratesd.rpc import jsonrpc
from zocratesd.rpc.framing import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameDecoder, FrameTooLarge, encode_message

log = logging.getLogger(__name__)

# How many of one connection's requests may run at once. Each is a task; a client that floods
# requests gets "overloaded" errors beyond this instead of growing the daemon without bound.
# 256 is far above what an editor or the Zotero sidebar keeps in flight (a handful).
MAX_INFLIGHT_REQUESTS: Final = 256

READ_CHUNK_BYTES: Final = 256 * 1024
# A replayed history is written in chunks of about this size: large enough that a 5000-event
# replay takes a dozen writes, small enough not to hold one huge buffer per connection.
WRITE_BATCH_BYTES: Final = 256 * 1024

Handler = Callable[..., Awaitable[Any]]


class MethodTable(dict[str, Handler]):
    """Handlers by method name, plus the names a client may send as notifications."""

    def __init__(self, handlers: dict[str, Handler], notifications: Iterable[str] = ()):
        super().__init__(handlers)
        self.notifications = frozenset(notifications)


class PeerClosed(Exception):
    """The connection ended before the other side answered our request."""


class RemoteError(Exception):
    """The other side answered our request with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]):
        self.code = error.get("code")
        self.error = error
        super().__init__(f"{error.get('code')}: {error.get('message')}")


class _Pending:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.response: jsonrpc.Response | None = None


class Peer:
    """A connection's JSON-RPC endpoint. Handlers are called as `handler(peer, **params)`.

    Only the methods a `MethodTable` names as notifications (e.g. `session/cancel`) run when sent
    without an id; any other message without an id is ignored, as are unknown notifications.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        methods: dict[str, Handler],
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        name: str = "peer",
    ):
        self.name = name
        self._stream = stream
        self._methods = methods
        self._notifications: frozenset[str] = getattr(methods, "notifications", frozenset())
        self._max_frame_bytes = max_frame_bytes
        self._write_lock = anyio.Lock()
        self._closed = False
        self._ids = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._inflight: dict[int | str, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._reading = anyio.CancelScope()
        # Per-connection facts the handlers keep (e.g. initialize's client capabilities).
        self.state: dict[str, Any] = {}
        self.on_close: list[Callable[[], None]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def abort(self) -> None:
        """Drop the connection now (a client that stopped reading): no more writes, reading stops,
        requests in flight finish without an audience."""
        self._mark_closed()
        self._reading.cancel()

    def stop_reading(self) -> None:
        """Take no new messages (daemon shutdown); requests in flight still finish and answer."""
        self._reading.cancel()

    # --- sending ------------------------------------------------------------------------------

    async def send_message(self, message: dict[str, Any]) -> bool:
        """Write one message; False when the connection is gone (the message is dropped)."""
        if self._closed:
            return False
        data = encode_message(message)
        async with self._write_lock:
            return await self._write_locked(data)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        return await self.send_message(jsonrpc.notification(method, params))

    async def send_messages(self, messages: Iterable[dict[str, Any]]) -> bool:
        """Write many messages (a history replay) in few writes, still one message per line.

        Frames are joined into writes of about WRITE_BATCH_BYTES: one syscall and one scheduler
        round trip per 6000 tiny notifications cost more than encoding them. The write lock is
        held for the whole batch, so nothing interleaves with it.
        """
        if self._closed:
            return False
        async with self._write_lock:
            batch: list[bytes] = []
            size = 0
            for message in messages:
                frame = encode_message(message)
                batch.append(frame)
                size += len(frame)
                if size >= WRITE_BATCH_BYTES:
                    if not await self._write_locked(b"".join(batch)):
                        return False
                    batch, size = [], 0
            return await self._write_locked(b"".join(batch)) if batch else True

    async def _write_locked(self, data: bytes) -> bool:
        if self._closed:
            return False
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._mark_closed()
            return False
        return True

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request to the other side and wait for its result.

        Raises RemoteError for an error answer, PeerClosed if the connection ends first. A caller
        that is cancelled meanwhile sends `$/cancel_request` for it, as ACP's cascading cancel asks.
        """
        req_id = f"z:{next(self._ids)}"
        slot = _Pending()
        self._pending[req_id] = slot
        try:
            if not await self.send_message(jsonrpc.request(req_id, method, params)):
                raise PeerClosed(f"{self.name}: connection closed")
            await slot.done.wait()
        except BaseException:
            if slot.response is None and not self._closed:
                with anyio.CancelScope(shield=True):
                    await self.notify("$/cancel_request", {"requestId": req_id})
            raise
        finally:
            self._pending.pop(req_id, None)
        if slot.response is None:
            raise PeerClosed(f"{self.name}: connection closed before {method} was answered")
        if slot.response.error is not None:
            raise RemoteError(slot.response.error)
        return slot.response.result

    # --- receiving ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until the other side closes it; then let in-flight requests end."""
        decoder = FrameDecoder(self._max_frame_bytes)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                eof = False
                with self._reading:
                    while not self._closed:
                        try:
                            data = await self._stream.receive(READ_CHUNK_BYTES)
                        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                            eof = True
                            break
                        decoder.feed(data)
                        await self._drain(decoder)
                if eof:
                    decoder.feed_eof()
                    await self._drain(decoder)
                self._fail_pending()
        finally:
            self._mark_closed()
            with anyio.CancelScope(shield=True):
                try:
                    await self._stream.aclose()
                except Exception:  # pragma: no cover - closing a broken stream
                    pass

    async def _drain(self, decoder: FrameDecoder) -> None:
        while True:
            event = decoder.next_event()
            if event is NEED_DATA:
                return
            if isinstance(event, FrameTooLarge):
                log.warning("%s: dropped a frame over %d bytes", self.name, event.limit)
                await self.send_message(
                    jsonrpc.error(
                        jsonrpc.INVALID_REQUEST,
                        None,
                        data={"kind": "frame_too_large", "limit": event.limit},
                    )
                )
                continue
            assert isinstance(event, bytes)
            try:
                await self._handle_message(jsonrpc.parse_frame(event))
            except Exception:
                # A bug in handling one message must cost that message, not the connection.
                log.exception("%s: failed to handle a message", self.name)
                await self.send_message(jsonrpc.error(jsonrpc.INTERNAL_ERROR, None))

    async def _handle_message(self, msg: jsonrpc.Message) -> None:
        if isinstance(msg, jsonrpc.Invalid):
            if msg.reply is not None:
                await self.send_message(msg.reply)
        elif isinstance(msg, jsonrpc.Response):
            slot = self._pending.get(str(msg.id))
            if slot is not None and slot.response is None:
                slot.response = msg
                slot.done.set()
        elif isinstance(msg, jsonrpc.Notification):
            if msg.method == "$/cancel_request":
                target = msg.params.get("requestId")
                if jsonrpc.valid_id(target):  # anything else names no request of ours: ignore it
                    scope = self._inflight.get(target)
                    if scope is not None:
                        scope.cancel()
            elif msg.method in self._notifications:
                assert self._tg is not None
                self._tg.start_soon(self._dispatch_notification, msg)
            else:
                # A request method sent without an id, or an unknown notification: JSON-RPC would
                # run the former silently; we never act on what the client cannot see the
                # outcome of (a `session/delete` must not vanish a session without an answer).
                log.debug("%s: ignored notification %s", self.name, msg.method[:100])
        else:
            if msg.id in self._inflight:
                # Answered with id null: the id's own answer is still to come, and a client must
                # never see two answers for one id.
                await self.send_message(
                    jsonrpc.error(
                        jsonrpc.INVALID_REQUEST, None,
                        data={"kind": "duplicate_id", "id": msg.id, "detail": "this id is already in use by a request in flight"},
                    )
                )
            elif len(self._inflight) >= MAX_INFLIGHT_REQUESTS:
                await self.send_message(
                    jsonrpc.error(
                        jsonrpc.OVERLOADED, msg.id, "Overloaded",
                        data={"kind": "overloaded", "limit": MAX_INFLIGHT_REQUESTS},
                    )
                )
            else:
                scope = anyio.CancelScope()
                self._inflight[msg.id] = scope
                assert self._tg is not None
                self._tg.start_soon(self._dispatch_request, msg, scope)

    async def _dispatch(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Run one handler through jsonrpcserver (lookup, arity check, error mapping).

        Its single-request `dispatch_request` is used rather than `dispatch`: the latter runs
        handlers in an `asyncio.gather` child task, which a cancel of ours would abandon
        mid-cleanup (the cascading `$/cancel_request` would be lost). Here the handler runs in
        this task, so cancellation reaches it directly and its cleanup finishes before we answer.
        """
        request, result = await dispatch_request(self._methods, self, create_request(payload))
        if "id" not in payload:
            return None  # a notification: its result or error is dropped, as JSON-RPC says
        return to_serializable_one(to_response(request, result))  # type: ignore[no-any-return]

    async def _dispatch_request(self, msg: jsonrpc.Request, scope: anyio.CancelScope) -> None:
        reply: dict[str, Any] | None = None
        try:
            with scope:
                reply = await self._dispatch(
                    {"jsonrpc": "2.0", "id": msg.id, "method": msg.method, "params": msg.params}
                )
        finally:
            self._inflight.pop(msg.id, None)
        if scope.cancelled_caught or reply is None:
            reply = jsonrpc.error(jsonrpc.REQUEST_CANCELLED, msg.id)
        await self.send_message(jsonrpc.normalise_error(reply))

    async def _dispatch_notification(self, msg: jsonrpc.Notification) -> None:
        await self._dispatch({"jsonrpc": "2.0", "method": msg.method, "params": msg.params})

    def _fail_pending(self) -> None:
        for slot in self._pending.values():
            slot.done.set()  # response stays None: request() raises PeerClosed

    def _mark_closed(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fail_pending()
        for cb in self.on_close:
            try:
                cb()
            except Exception:  # pragma: no cover - a close hook must not break the others
                log.exception("%s: close hook failed", self.name)
