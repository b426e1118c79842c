"""One JSON-RPC connection, both ways: the daemon's I/O around `zocrates_wire.connection.Connection`.

`rpc.dispatch` runs the requests that come in (method lookup, arity, handler errors). The state
of the connection (our calls, their `"z:<n>"` ids and outcomes, the client's requests in flight,
duplicate ids, the in-flight limit, `$/cancel_request`, -32800) is the sans-IO `Connection`, which
the Python clients are built on too; this module performs what it decides, with anyio:

- each inbound request runs in its own task, so a `session/prompt` that lasts a whole turn never
  blocks the `session/cancel` behind it; `$/cancel_request` cancels that task's scope;
- our own requests to the client (`session/request_permission`) wait on an event until the
  connection settles them: answered, or failed because the input ended; once it has ended, none
  is sent (the other side could never answer it);
- one writer task per connection, the only one to write to its stream: senders queue whole frames
  (`framing.SendQueue`) and wait until theirs are written; the writer writes everything queued as
  one write, in order. What several tasks send while the writer is busy or before it runs (an
  answer and the notice that follows it, a turn's last update and its answer, two sessions'
  updates) costs one system call (on stdio, one worker thread's write). A sender waits for its
  frames, so it holds no more than it did when each wrote by itself, and a client that stops
  reading stops its senders; one that gives up takes back what no write has taken, so a cancelled
  sender never leaves half a frame on the wire. Once the connection is gone, sends are dropped
  silently (a turn whose client vanished still runs to the end and is persisted).

Concurrency is structured: `run()` owns a task group; every request task lives in it, and the
connection ends only when its requests have been answered or cancelled, and then at once: with the
input at its end and every request answered, nothing more can come. `stop_reading()` (daemon
shutdown) ends the read loop but lets the requests in flight finish: a request is never cancelled
halfway through a database write just because the daemon was asked to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextvars import ContextVar
from typing import Any, Final, assert_never

import anyio
import anyio.abc

from zocrates_wire import jsonrpc
from zocrates_wire.connection import (
    NEED_DATA,
    CancelRequested,
    Connection,
    Event,
    NotificationReceived,
    OversizeFrame,
    Rejected,
    RequestReceived,
    ResponseReceived,
    UnexpectedResponse,
)
from zocrates_wire.framing import DEFAULT_MAX_FRAME_BYTES, READ_CHUNK_BYTES, SendQueue, encode_message
from zocrates_wire.jsonrpc import Outgoing, Params, Reply
from zocratesd.logtext import escape_for_log
from zocratesd.rpc import dispatch

log = logging.getLogger(__name__)

# How many of one connection's requests may run at once. Each is a task; a client that floods
# requests gets "overloaded" errors beyond this instead of growing the daemon without bound.
# 256 is far above what an editor or the Zotero sidebar keeps in flight (a handful).
MAX_INFLIGHT_REQUESTS: Final = 256

# A replayed history is queued in chunks of about this size: large enough that a 5000-event
# replay takes a dozen writes, small enough not to hold one huge buffer per connection.
WRITE_BATCH_BYTES: Final = 256 * 1024

Handler = dispatch.Handler
# What the request being handled (in this task) sends once its answer is written (`after_answer`).
_AFTER_ANSWER: ContextVar[list[Callable[[], Awaitable[Any]]] | None] = ContextVar("_AFTER_ANSWER", default=None)


class MethodTable(dict[str, Handler]):
    """Handlers by method name, plus the names a client may send as notifications."""

    def __init__(self, handlers: dict[str, Handler], notifications: Iterable[str] = ()):
        super().__init__(handlers)
        self.notifications = frozenset(notifications)


# How `request()` fails, by the names the ACP face catches: the connection ended before the
# answer (or the input had ended: it could not answer), or the other side answered with an error.


class Peer:
    """A connection's JSON-RPC endpoint. Handlers are called as `handler(peer, **params)` and
    return their result, or raise `RpcError` (rpc/dispatch.py).

    Only the methods a `MethodTable` names as notifications (e.g. `session/cancel`) run when sent
    without an id; any other message without an id is ignored, as are unknown notifications.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        methods: dict[str, Handler],
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inflight_requests: int = MAX_INFLIGHT_REQUESTS,
        name: str = "peer",
    ):
        self.name = name
        self._stream = stream
        self._methods = methods
        self._notifications: frozenset[str] = getattr(methods, "notifications", frozenset())
        # Frames waiting for the writer task (`_write_out`): `_queued` wakes it, `_wrote` the
        # senders after each write.
        self._sendq = SendQueue()
        self._queued = anyio.Event()
        self._wrote = anyio.Event()
        self._writer = anyio.CancelScope()
        # A batch of several writes (a long replay) holds this so that no other frame lands inside it.
        self._batch_lock = anyio.Lock(fast_acquire=True)
        # "z:<n>": our ids can never collide with the client's.
        self._conn = Connection(id_prefix="z:", max_in_flight=max_inflight_requests, max_frame_bytes=max_frame_bytes)
        # The client's requests admitted but not yet answered on the wire, and an event set at each
        # answer: once the input has ended and this is 0, nothing more can come (see run()).
        self._unanswered = 0
        self._answered = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._reading = anyio.CancelScope()
        # Per-connection facts the handlers keep (e.g. initialize's client capabilities).
        self.state: dict[str, Any] = {}
        self.on_close: list[Callable[[], None]] = []

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def input_closed(self) -> bool:
        """Nothing more will be read from the other side: it can answer no request of ours."""
        return self._conn.input_closed

    def abort(self) -> None:
        """Drop the connection now (a client that stopped reading): no more writes, reading stops,
        requests in flight finish without an audience."""
        self._mark_closed()
        self._reading.cancel()

    def stop_reading(self) -> None:
        """Take no new messages (daemon shutdown); requests in flight still finish and answer."""
        self._reading.cancel()

    def start_soon(self, fn: Callable[[], Coroutine[Any, Any, Any]], *, name: str) -> bool:
        """Run `fn()` as a task of this connection (e.g. the ACP face's writer of session updates),
        in the task group its requests run in: the connection ends only once the task has, so it
        must end on its own. False, and nothing started, when the connection is not being served."""
        if self._tg is None or self.closed:
            return False
        self._tg.start_soon(fn, name=name)
        return True

    def after_answer(self, send: Callable[[], Awaitable[Any]]) -> None:
        """Run `send()` right after the answer to the request being handled is written: what the
        client can only place once it has that answer (ACP: `available_commands_update` for the
        session a `session/new` answer names). Outside a request it runs as a task now."""
        pending = _AFTER_ANSWER.get()
        if pending is not None:
            pending.append(send)
            return

        async def run() -> None:
            await send()

        self.start_soon(run, name=f"{self.name}: after answer")

    # --- sending ------------------------------------------------------------------------------

    async def send_message(self, message: Outgoing) -> bool:
        """Write one message; False when the connection is gone (the message is dropped)."""
        return await self._send_frames(encode_message(message))

    async def _send_frames(self, frames: bytes) -> bool:
        ticket = await self._queue_frames(frames)
        return ticket is not None and await self.written(ticket)

    async def notify(self, method: str, params: Params | None = None) -> bool:
        return await self.send_message(jsonrpc.notification(method, params))

    async def send_messages(self, messages: Iterable[Outgoing]) -> bool:
        """Write many messages (a history replay) in few writes, still one message per line.

        Frames are joined into writes of about WRITE_BATCH_BYTES: one syscall and one scheduler
        round trip per 6000 tiny notifications cost more than encoding them, and a write of the
        whole history would hold all of it twice. Nothing else is written between the writes of
        one batch.
        """
        if self._conn.closed:
            return False
        async with self._batch_lock:
            batch: list[bytes] = []
            size = 0
            for message in messages:
                frame = encode_message(message)
                batch.append(frame)
                size += len(frame)
                if size >= WRITE_BATCH_BYTES:
                    if not await self.written(self._push(b"".join(batch))):
                        return False
                    batch, size = [], 0
            return await self.written(self._push(b"".join(batch))) if batch else not self._conn.closed

    async def queue_messages(self, messages: Iterable[Outgoing]) -> int | None:
        """Queue messages for the writer, after everything queued before them (and after a
        `send_messages` batch being written, never inside it); their ticket for `written`, or None
        when the connection is gone. Anything queued after this returns is written after them."""
        if self._conn.closed:
            return None
        return await self._queue_frames(b"".join(encode_message(m) for m in messages))

    async def _queue_frames(self, frames: bytes) -> int | None:
        if self._conn.closed:
            return None
        if not frames:
            return 0  # nothing to write: written at once
        if not self._batch_lock.locked():
            return self._push(frames)
        async with self._batch_lock:
            return self._push(frames) if not self._conn.closed else None

    async def written(self, ticket: int) -> bool:
        """Wait until what `ticket` queued is written: True, or False when the connection is gone.
        A sender that gives up meanwhile takes its frames back unless a write has them already."""
        sendq = self._sendq
        try:
            while sendq.written < ticket:
                await self._wrote.wait()
        except BaseException:
            sendq.withdraw(ticket)
            raise
        return not self._conn.closed

    def _push(self, frames: bytes) -> int:
        if self._conn.closed:  # the writer is gone: dropped, and the ticket counts as settled
            return 0
        ticket = self._sendq.push(frames)
        self._queued.set()
        return ticket

    async def _write_out(self) -> None:
        """The connection's writer: everything queued, as one write, until the connection closes."""
        sendq = self._sendq
        with self._writer:
            while not self._conn.closed:
                if not sendq:
                    self._queued = anyio.Event()
                    await self._queued.wait()
                    continue
                data, upto = sendq.take()
                await self._write(data)
                sendq.wrote(upto)
                self._wake_senders()

    async def _write(self, data: bytes) -> None:
        try:
            await self._stream.send(data)  # waits until the other side reads
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._mark_closed()

    def _wake_senders(self) -> None:
        wrote, self._wrote = self._wrote, anyio.Event()
        wrote.set()

    async def request(
        self,
        method: str,
        params: Params | None = None,
        *,
        notify_cancel: Callable[[], bool] | None = None,
    ) -> Any:
        """Send a request to the other side and wait for its result.

        Raises RpcError for an error answer, and ConnectionLost at once
        when the other side's input has ended (it can never answer) or when the connection ends
        before the answer.

        A caller cancelled meanwhile gives the request up (its late answer is dropped) and tells
        the other side with `$/cancel_request`, ACP's cascading cancel, unless `notify_cancel()`
        (asked then) says False: where ACP ends a request by a mechanism of its own (after
        `session/cancel` the client answers its `session/request_permission` itself), the notice
        is redundant, and a client without the optional `$/cancel_request` may log it as an error.
        """
        call = self._conn.call(method, params)
        settled = anyio.Event()
        call.on_settled = settled.set
        try:
            # A send that fails closes the connection, which settles the call.
            await self._send_frames(call.frame)
            await settled.wait()
        except BaseException:
            # None when there is nothing to cancel: answered meanwhile, or failed by a close.
            notice = self._conn.cancel_request(call.id)
            if notice is not None and (notify_cancel is None or notify_cancel()):
                with anyio.CancelScope(shield=True):
                    await self.send_message(notice)
            raise
        return call.outcome()

    # --- receiving ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until the other side ends its input (or stop_reading()); then let
        the requests in flight end, and close it once each has been answered."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._write_out, name=f"{self.name}: writer")
                eof = False
                with self._reading:
                    while not self._conn.closed:
                        try:
                            data = await self._stream.receive(READ_CHUNK_BYTES)
                        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                            eof = True
                            break
                        if data:  # b"" would mean end of input to the connection
                            self._conn.receive_data(data)
                            await self._drain()
                if eof:
                    self._conn.receive_data(b"")
                    await self._drain()
                # End of input, or stop_reading(): no answer to a request of ours can come now,
                # and request() refuses to ask (a question nobody can answer must not hold a turn).
                self._conn.close_input(f"{self.name}: connection input ended; it cannot answer")
                # Nothing more can come once every request read has been answered: the client
                # can send no more, and its answers (with the updates each request produced,
                # written before it) are out. The connection is over then, even while a session
                # it is attached to goes on streaming: closing lets its other end (the stdio
                # pump, a script) finish instead of waiting on updates nobody asked for.
                while self._unanswered:
                    self._answered = anyio.Event()
                    await self._answered.wait()
                self._mark_closed()
        finally:
            self._mark_closed()
            with anyio.CancelScope(shield=True):
                try:
                    await self._stream.aclose()
                except Exception:  # pragma: no cover - closing a broken stream
                    pass

    async def _drain(self) -> None:
        while True:
            try:
                event = self._conn.next_event()
                if event is NEED_DATA:
                    return
                await self._handle_event(event)
            except Exception:
                # A bug in handling one message must cost that message, not the connection.
                log.exception("%s: failed to handle a message", self.name)
                await self.send_message(jsonrpc.error(jsonrpc.INTERNAL_ERROR, None))

    async def _handle_event(self, event: Event) -> None:
        match event:
            case RequestReceived(request=request):
                scope = anyio.CancelScope()
                self._conn.on_cancel(request.id, scope.cancel)
                self._unanswered += 1
                assert self._tg is not None
                self._tg.start_soon(self._dispatch_request, request, scope)
            case CancelRequested() | ResponseReceived():
                pass  # the connection cancelled the handler, or settled the call (its waiter woke)
            case UnexpectedResponse(response=response, late=late):
                log.debug("%s: dropped %s answer to %s", self.name, "a late" if late else "an unknown",
                          escape_for_log(repr(response.id), 100))
            case NotificationReceived(notification=note):
                if note.method in self._notifications:
                    assert self._tg is not None
                    self._tg.start_soon(self._dispatch_notification, note)
                else:
                    # A request method sent without an id, or an unknown notification: JSON-RPC
                    # would run the former silently; we never act on what the client cannot see
                    # the outcome of (a `session/delete` must not vanish a session without an answer).
                    log.debug("%s: ignored notification %s", self.name, escape_for_log(note.method, 100))
            case Rejected(reply=reply):
                await self.send_message(reply)
            case OversizeFrame(limit=limit, reply=reply):
                log.warning("%s: dropped a frame over %d bytes", self.name, limit)
                await self.send_message(reply)
            case _:
                assert_never(event)

    async def _dispatch_request(self, msg: jsonrpc.Request, scope: anyio.CancelScope) -> None:
        reply: Reply | None = None
        after: list[Callable[[], Awaitable[Any]]] = []
        token = _AFTER_ANSWER.set(after)
        try:
            try:
                with scope:
                    # In this task: a cancel reaches the handler, and its cleanup (the cascading
                    # `$/cancel_request`) ends before the request is answered.
                    reply = dispatch.reply(msg.id, await dispatch.call(self._methods, self, msg.method, msg.params))
            finally:
                _AFTER_ANSWER.reset(token)
                answer = self._conn.finish_request(msg.id, reply, cancelled=scope.cancelled_caught)
            # Queued, then what `after` sends joins it in one write; the request counts as unanswered
            # until its answer is written (MAX_INFLIGHT_REQUESTS bounds what a client that does not
            # read can make us hold, as before).
            ticket = await self.queue_messages((answer,))
            if ticket is not None:
                if "result" in answer:
                    for send in after:
                        await send()
                await self.written(ticket)
        finally:
            self._unanswered -= 1
            self._answered.set()

    async def _dispatch_notification(self, msg: jsonrpc.Notification) -> None:
        await dispatch.call(self._methods, self, msg.method, msg.params)  # its outcome is dropped, as JSON-RPC says

    def _mark_closed(self) -> None:
        if self._conn.closed:
            return
        self._conn.close(f"{self.name}: connection closed")  # settles our calls: request() raises
        # Nothing more is written: the writer stops (in a write to a client that stopped
        # reading, too), what is queued is dropped and its senders hear False.
        self._writer.cancel()
        self._sendq.clear()
        self._queued.set()
        self._wake_senders()
        for cb in self.on_close:
            try:
                cb()
            except Exception:  # pragma: no cover - a close hook must not break the others
                log.exception("%s: close hook failed", self.name)
