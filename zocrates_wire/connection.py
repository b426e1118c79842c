"""One JSON-RPC connection's endpoint core, sans-IO: bytes and decisions in, events and replies out.

Every end of the wire is built on this class, as every HTTP library is built on h11's
`Connection`: the daemon's `zocratesd.rpc.peer.Peer` (anyio, a task per inbound request), the
async client `zocrates_client.Client` (anyio on asyncio or trio) and the blocking
`zocrates_client.blocking.BlockingClient` (a socket, no loop). None of them decides anything about
ids, answers, cancels or errors itself; each adds only its I/O: how to send bytes, how to wait for
a call's outcome, how to cancel a handler. Nothing here reads, writes, sleeps or locks.

What it owns:

- **Our calls.** `call(method, params)` mints the id (from 1; with `id_prefix` a string, `"z:1"`:
  the daemon's, which can never collide with a client's; without it an integer, the client's),
  encodes the frame (refusing one over `max_send_bytes` with `MessageTooLarge`) and registers a
  pending `Call`. The call is *settled* when a `Response` with its id comes in (`ResponseReceived`)
  or when the connection's input ends (`close_input()`/`close()`): then `Call.outcome()` returns
  the result or raises the typed error, `RpcError` for an error answer, `ConnectionLost` for an
  end before the answer, and the `on_settled` hook the I/O layer set (an event's `set`) is called.
  A caller that gives up calls `cancel_request`, which hands back the `$/cancel_request`
  notification to send (ACP's cascading cancel; the I/O layer may withhold it where ACP ends the
  request another way) and remembers the id, so the late answer comes out as
  `UnexpectedResponse(late=True)`, never as the answer to a later call.
- **The other side's requests in flight.** A `Request` comes out as `RequestReceived` once
  admitted, or is refused with a `Rejected` reply: its id is already in flight (answered with
  `id: null`, since the id's own answer is still to come and nobody may see two answers for one
  id), or `max_in_flight` requests are running (error 1002, "overloaded"). The I/O layer may hand
  a cancel hook (`on_cancel`); `$/cancel_request {requestId}` naming one of them calls it and comes
  out as `CancelRequested`; naming anything else it is dropped. `finish_request` ends one and
  returns the reply to send: -32800 when it was cancelled (LSP/ACP rule: a cancelled request is
  still answered, so the caller never leaks); `refuse_request` answers one nobody here handles.
- **Input state.** `input_closed` once nothing more will be read (end of stream, or the I/O layer
  stopped reading); `closed` once nothing can be sent either; `end_reason` says why, in the words
  the settled calls' `ConnectionLost` use. A connection at end of input can never answer a request
  of ours: that is why closing the input fails the pending calls, and why no call is started from
  then on.

Bytes are split into frames by `framing.FrameDecoder` and classified by `jsonrpc.parse_frame`; a
frame the connection cannot act on comes out as `Rejected` (or `OversizeFrame`) with its reply.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import msgspec

from zocrates_wire import framing, jsonrpc
from zocrates_wire.errors import ConnectionLost, MessageTooLarge, RpcError, WireError
from zocrates_wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameTooLarge, encode_message
from zocrates_wire.jsonrpc import Params, Reply, RequestId

CANCEL_REQUEST: Final = "$/cancel_request"
# Why a connection ended when its I/O layer gave no reason.
DEFAULT_END_REASON: Final = "the connection ended"

# Ids of our cancelled requests kept until their late answer (the other side should send -32800)
# arrives. An end that never answers a cancelled request must not grow this without bound; an id
# forgotten beyond this many comes out as an unknown answer instead of a late one, and is dropped
# all the same. Far above what a connection cancels while answers are on their way (a handful).
MAX_REMEMBERED_CANCELS: Final = 1024


class NeedData(enum.Enum):
    """`next_event()`'s answer when no complete frame is buffered: feed more bytes."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


class ConnectionStateError(RuntimeError):
    """The I/O layer used the connection wrongly (a bug there, never the other side's doing)."""


# --- our calls ----------------------------------------------------------------------------------


class Call:
    """A request of ours: send `frame` (`message`, encoded); its answer will name `id`.

    Settled once, by its answer or by the end of the connection; `outcome()` then gives the
    result or raises the error. The I/O layer sets `on_settled` to wake whoever waits for it.
    A call its caller gave up (`Connection.cancel_request`) is never settled.
    """

    __slots__ = ("_failure", "_result", "frame", "id", "message", "method", "on_settled", "settled")

    def __init__(self, request_id: RequestId, method: str, message: jsonrpc.RequestMessage, frame: bytes) -> None:
        self.id = request_id
        self.method = method
        self.message = message
        self.frame = frame
        self.on_settled: Callable[[], None] | None = None
        self.settled = False
        self._result: Any = None
        self._failure: WireError | None = None

    def error(self) -> WireError | None:
        """What `outcome()` raises: the error answer or the lost connection; None for a result."""
        if not self.settled:
            raise ConnectionStateError(f"{self.method} ({self.id!r}) is not settled")
        return self._failure

    def outcome(self) -> Any:
        """The result of the settled call; raises RpcError (an error answer) or ConnectionLost."""
        failure = self.error()
        if failure is not None:
            raise failure
        return self._result

    def _settle(self, result: Any = None, failure: WireError | None = None) -> None:
        self.settled = True
        self._result = result
        self._failure = failure
        if self.on_settled is not None:
            self.on_settled()


# --- events -------------------------------------------------------------------------------------


class RequestReceived(msgspec.Struct, frozen=True):
    """A request of the other side, admitted and now in flight: handle it, then `finish_request`."""

    request: jsonrpc.Request


class NotificationReceived(msgspec.Struct, frozen=True):
    """A notification other than `$/cancel_request` (which the connection handles itself)."""

    notification: jsonrpc.Notification


class CancelRequested(msgspec.Struct, frozen=True):
    """`$/cancel_request` named this request in flight: cancel its handler (it is then answered
    -32800 by `finish_request(..., cancelled=True)`)."""

    request_id: RequestId


class ResponseReceived(msgspec.Struct, frozen=True):
    """The answer to our pending request `response.id`: `call`, now settled with it."""

    response: jsonrpc.Response
    call: Call


class UnexpectedResponse(msgspec.Struct, frozen=True):
    """An answer that matches no pending request: `late` when it answers one we cancelled (the
    expected -32800, or a result that lost the race), else an id we never used or already settled.
    Either way it is dropped."""

    response: jsonrpc.Response
    late: bool


class Rejected(msgspec.Struct, frozen=True):
    """A frame the connection refused by itself (unreadable, not JSON-RPC, a duplicate id, over the
    in-flight limit): send `reply`."""

    reply: Reply


class OversizeFrame(msgspec.Struct, frozen=True):
    """A frame over `max_frame_bytes` was dropped. Its id cannot be known: the daemon answers with
    `reply` (id null) and reads on; the client, which cannot match it to its call, gives up."""

    limit: int
    reply: Reply


Event = (
    RequestReceived
    | NotificationReceived
    | CancelRequested
    | ResponseReceived
    | UnexpectedResponse
    | Rejected
    | OversizeFrame
)


class Connection:
    """The state of one JSON-RPC connection, both ways. See the module docstring.

    `id_prefix`: our request ids are `f"{id_prefix}{n}"`, or the integer n when None.
    `max_in_flight`: how many of the other side's requests may be in flight at once (None: no limit).
    `max_frame_bytes`: the largest frame accepted.
    `max_send_bytes`: the largest frame `call` sends (None: no limit); a larger one raises
    MessageTooLarge. A client caps what it sends at the daemon's frame cap: the daemon would answer
    a larger frame with an `id: null` error no pending call could be matched to.
    """

    def __init__(
        self,
        *,
        id_prefix: str | None = None,
        max_in_flight: int | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_send_bytes: int | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be positive")
        self.id_prefix = id_prefix
        self.max_in_flight = max_in_flight
        self.max_send_bytes = max_send_bytes
        self.end_reason: str | None = None  # why the input ended, once it has
        self._decoder = FrameDecoder(max_frame_bytes)
        self._counter = itertools.count(1)
        self._pending: dict[RequestId, Call] = {}
        self._cancelled: dict[RequestId, None] = {}  # insertion-ordered: the oldest is forgotten first
        self._in_flight: dict[RequestId, _InFlight] = {}
        self._input_closed = False
        self._closed = False

    # --- state --------------------------------------------------------------------------------

    @property
    def max_frame_bytes(self) -> int:
        return self._decoder.max_frame_bytes

    @property
    def input_closed(self) -> bool:
        """Nothing more will be read: no answer to a request of ours can arrive."""
        return self._input_closed

    @property
    def closed(self) -> bool:
        """The connection is over: nothing can be sent either."""
        return self._closed

    @property
    def pending(self) -> Mapping[RequestId, str]:
        """Our requests waiting for an answer: id -> method (a read-only copy)."""
        return MappingProxyType({request_id: call.method for request_id, call in self._pending.items()})

    @property
    def in_flight(self) -> Mapping[RequestId, str]:
        """The other side's requests being handled: id -> method (a read-only copy)."""
        return MappingProxyType({request_id: req.method for request_id, req in self._in_flight.items()})

    # --- our requests -------------------------------------------------------------------------

    def call(self, method: str, params: Params | None = None) -> Call:
        """A new pending call, for the I/O layer to send (`Call.frame`) and wait on (`on_settled`).

        Raises ConnectionLost once the input has ended: no answer could ever arrive, and a caller
        that waited would wait for nothing (a research checkpoint would hold its session for the
        full answer timeout). Raises MessageTooLarge over `max_send_bytes`, TypeError for params
        JSON cannot hold; either way nothing is registered.
        """
        if self._input_closed:
            raise ConnectionLost(f"{self.end_reason or DEFAULT_END_REASON} ({method} not sent)")
        return self.start_request(method, params)

    def start_request(self, method: str, params: Params | None = None) -> Call:
        """`call`, for a caller that has checked `input_closed`: refused with ConnectionStateError
        once the input has closed (asking then is the I/O layer's bug)."""
        if self._input_closed:
            state = "closed" if self._closed else "input-closed"
            raise ConnectionStateError(f"start_request() on a {state} connection")
        n = next(self._counter)
        request_id: RequestId = n if self.id_prefix is None else f"{self.id_prefix}{n}"
        message = jsonrpc.request(request_id, method, params)
        frame = encode_message(message)
        if self.max_send_bytes is not None and len(frame) > self.max_send_bytes:
            raise MessageTooLarge(f"{method} is {len(frame)} bytes, over the {self.max_send_bytes}-byte frame cap")
        call = self._pending[request_id] = Call(request_id, method, message, frame)
        return call

    def cancel_request(self, request_id: RequestId) -> jsonrpc.NotificationMessage | None:
        """Our caller gave up on a request: the `$/cancel_request` notification to send, or None
        when there is nothing to cancel (already answered, or failed by a close).

        Its late answer is then ignored (`UnexpectedResponse(late=True)`). A request that was never
        sent (it could not be encoded) is taken back with `discard_request` instead.
        """
        if self._pending.pop(request_id, None) is None:
            return None
        self._cancelled[request_id] = None
        if len(self._cancelled) > MAX_REMEMBERED_CANCELS:
            del self._cancelled[next(iter(self._cancelled))]
        return jsonrpc.notification(CANCEL_REQUEST, {"requestId": request_id})

    def discard_request(self, request_id: RequestId) -> None:
        """Forget a pending request that never reached the wire; no answer can come for it."""
        self._pending.pop(request_id, None)

    def notification(self, method: str, params: Params | None = None) -> bytes:
        """A notification's frame; MessageTooLarge over `max_send_bytes`."""
        frame = encode_message(jsonrpc.notification(method, params))
        if self.max_send_bytes is not None and len(frame) > self.max_send_bytes:
            raise MessageTooLarge(f"{method} is {len(frame)} bytes, over the {self.max_send_bytes}-byte frame cap")
        return frame

    # --- incoming -----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the other side; b"" at end of stream (as in h11). A last line without
        its newline still comes out of `next_event`. Call `close_input()` once done reading."""
        if data:
            self._decoder.feed(data)
        else:
            self._decoder.feed_eof()

    def next_event(self) -> Event | NeedData:
        """The next thing to act on, or NEED_DATA. Frames that need no action at all (an answer to
        nothing we could have asked, `$/cancel_request` naming no request in flight) are skipped."""
        while True:
            frame = self._decoder.next_event()
            if frame is framing.NEED_DATA:
                return NEED_DATA
            if isinstance(frame, FrameTooLarge):
                reply = jsonrpc.error(
                    jsonrpc.INVALID_REQUEST, None, data={"kind": "frame_too_large", "limit": frame.limit}
                )
                return OversizeFrame(frame.limit, reply)
            assert isinstance(frame, bytes)
            event = self.receive_message(jsonrpc.parse_frame(frame))
            if event is not None:
                return event

    def receive_message(self, msg: jsonrpc.Message) -> Event | None:
        """Classify one parsed message and update the tables; None when it needs no action."""
        if isinstance(msg, jsonrpc.Invalid):
            return None if msg.reply is None else Rejected(msg.reply)
        if isinstance(msg, jsonrpc.Response):
            call = self._pending.pop(msg.id, None)
            if call is not None:
                if msg.error is None:
                    call._settle(msg.result)
                else:
                    call._settle(failure=RpcError.from_wire(msg.error, call.method))
                return ResponseReceived(msg, call)
            late = msg.id in self._cancelled
            if late:
                del self._cancelled[msg.id]
            return UnexpectedResponse(msg, late)
        if isinstance(msg, jsonrpc.Notification):
            if msg.method != CANCEL_REQUEST:
                return NotificationReceived(msg)
            target = msg.params.get("requestId")
            # Anything but a valid id names no request (and may not even be hashable).
            if not jsonrpc.valid_id(target) or target not in self._in_flight:
                return None
            request = self._in_flight[target]
            if request.cancel is not None:
                request.cancel()
            return CancelRequested(target)
        return self._admit(msg)

    def _admit(self, request: jsonrpc.Request) -> RequestReceived | Rejected:
        if request.id in self._in_flight:
            return Rejected(
                jsonrpc.error(
                    jsonrpc.INVALID_REQUEST,
                    None,
                    data={
                        "kind": "duplicate_id",
                        "id": request.id,
                        "detail": "this id is already in use by a request in flight",
                    },
                )
            )
        if self.max_in_flight is not None and len(self._in_flight) >= self.max_in_flight:
            return Rejected(
                jsonrpc.error(
                    jsonrpc.OVERLOADED,
                    request.id,
                    "Overloaded",
                    data={"kind": "overloaded", "limit": self.max_in_flight},
                )
            )
        self._in_flight[request.id] = _InFlight(request.method)
        return RequestReceived(request)

    def on_cancel(self, request_id: RequestId, cancel: Callable[[], None]) -> None:
        """Call `cancel()` when the other side sends `$/cancel_request` for this request in flight
        (or when `cancel_in_flight()` is called)."""
        self._in_flight[request_id].cancel = cancel

    def cancel_in_flight(self) -> None:
        """Cancel every request in flight that has a cancel hook (a client that is going away)."""
        for request in list(self._in_flight.values()):
            if request.cancel is not None:
                request.cancel()

    def finish_request(self, request_id: RequestId, reply: Reply | None, *, cancelled: bool = False) -> Reply:
        """A request in flight is done: the reply to send. `reply` is the handler's answer (None
        when it has none); a cancelled request is answered -32800 whatever its handler returned."""
        if self._in_flight.pop(request_id, None) is None:
            raise ConnectionStateError(f"finish_request({request_id!r}): not a request in flight")
        if cancelled or reply is None:
            return jsonrpc.error(jsonrpc.REQUEST_CANCELLED, request_id)
        return jsonrpc.normalise_error(reply)

    def refuse_request(self, request: jsonrpc.Request) -> Reply:
        """Answer a request this end does not handle (-32601), and end it."""
        reply = jsonrpc.error(
            jsonrpc.METHOD_NOT_FOUND, request.id,
            data={"kind": "method_not_found", "message": f"this client does not handle {request.method}"},
        )
        return self.finish_request(request.id, reply)

    # --- the end ------------------------------------------------------------------------------

    def close_input(self, reason: str | None = None) -> list[RequestId]:
        """Nothing more will be read (end of stream, or reading stopped), for `reason` (the first
        one given is kept as `end_reason`). Our pending calls are settled with ConnectionLost, and
        their ids returned: their answers can never arrive; no call is started from now on.
        Requests in flight go on and are still answered. Idempotent."""
        self._input_closed = True
        if self.end_reason is None:
            self.end_reason = reason or DEFAULT_END_REASON
        failed = list(self._pending.values())
        self._pending.clear()
        self._cancelled.clear()
        for call in failed:
            call._settle(failure=ConnectionLost(f"{self.end_reason} before {call.method} was answered"))
        return [call.id for call in failed]

    def close(self, reason: str | None = None) -> list[RequestId]:
        """The connection is over (nothing can be sent): as `close_input()`. Requests in flight
        still finish (their replies go nowhere)."""
        self._closed = True
        return self.close_input(reason)


class _InFlight:
    """A request of the other side's being handled: its method, and how to cancel its handler."""

    __slots__ = ("cancel", "method")

    def __init__(self, method: str) -> None:
        self.method = method
        self.cancel: Callable[[], None] | None = None
