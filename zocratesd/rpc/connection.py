"""One JSON-RPC connection's state, sans-IO: bytes and decisions in, events and replies out.

Both ends of the wire are built on this class, as every HTTP library is built on h11's
`Connection`: the daemon's `rpc.peer.Peer` (anyio, a task per inbound request) and the client
library's `zocrates_client.Client` (anyio on asyncio or trio). Neither decides anything about ids,
answers or cancels itself; each keeps only its I/O objects (events that wake a caller, cancel
scopes of handlers), keyed by the ids this class hands out and names in its events. Nothing here
reads, writes, sleeps or locks.

What it owns:

- **Ids of our requests.** Minted from 1; with `id_prefix` they are strings (`"z:1"`: the daemon's,
  which can never collide with a client's), without it integers (the client's).
- **Pending requests** (ours, waiting for the other side's answer). `start_request` registers one;
  a `Response` with its id comes out as `ResponseReceived` and ends it. A caller that gives up calls
  `cancel_request`, which hands back the `$/cancel_request` notification to send (ACP's cascading
  cancel; the I/O layer may withhold it where ACP ends the request another way) and remembers the
  id, so the late answer comes out as `UnexpectedResponse(late=True)`, never as the answer to a
  later call. `close_input()` and `close()` end every pending request and return their ids: the
  I/O layer fails those calls.
- **Requests in flight** (the other side's, being handled here). A `Request` comes out as
  `RequestReceived` once admitted, or is refused with a `Rejected` reply: its id is already in
  flight (answered with `id: null`, since the id's own answer is still to come and nobody may see
  two answers for one id), or `max_in_flight` requests are running (error 1002, "overloaded").
  `$/cancel_request {requestId}` naming one of them comes out as `CancelRequested`; naming anything
  else it is dropped. `finish_request` ends one and returns the reply to send: -32800 when it was
  cancelled (LSP/ACP rule: a cancelled request is still answered, so the caller never leaks).
- **Input state.** `input_closed` once nothing more will be read (end of stream, or the I/O layer
  stopped reading); `closed` once nothing can be sent either. A connection at end of input can
  never answer a request of ours: that is why closing the input fails the pending ones, and why
  `start_request` is refused from then on.

Bytes are split into frames by `framing.FrameDecoder` and classified by `jsonrpc.parse_frame`; a
frame the connection cannot act on comes out as `Rejected` (or `OversizeFrame`) with its reply.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import msgspec

from zocratesd.rpc import framing, jsonrpc
from zocratesd.rpc.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameTooLarge

RequestId = int | str

CANCEL_REQUEST: Final = "$/cancel_request"

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


# --- what to send -------------------------------------------------------------------------------


class OutboundRequest(msgspec.Struct, frozen=True):
    """A request of ours, registered as pending: send `message`; its answer will name `id`."""

    id: RequestId
    method: str
    message: dict[str, Any]


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
    """The answer to our pending request `response.id`, which is no longer pending."""

    response: jsonrpc.Response


class UnexpectedResponse(msgspec.Struct, frozen=True):
    """An answer that matches no pending request: `late` when it answers one we cancelled (the
    expected -32800, or a result that lost the race), else an id we never used or already settled.
    Either way it is dropped."""

    response: jsonrpc.Response
    late: bool


class Rejected(msgspec.Struct, frozen=True):
    """A frame the connection refused by itself (unreadable, not JSON-RPC, a duplicate id, over the
    in-flight limit): send `reply`."""

    reply: dict[str, Any]


class OversizeFrame(msgspec.Struct, frozen=True):
    """A frame over `max_frame_bytes` was dropped. Its id cannot be known: the daemon answers with
    `reply` (id null) and reads on; the client, which cannot match it to its call, gives up."""

    limit: int
    reply: dict[str, Any]


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
    """

    def __init__(
        self,
        *,
        id_prefix: str | None = None,
        max_in_flight: int | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be positive")
        self.id_prefix = id_prefix
        self.max_in_flight = max_in_flight
        self._decoder = FrameDecoder(max_frame_bytes)
        self._counter = itertools.count(1)
        self._pending: dict[RequestId, str] = {}  # id -> method
        self._cancelled: dict[RequestId, None] = {}  # insertion-ordered: the oldest is forgotten first
        self._in_flight: dict[RequestId, str] = {}  # id -> method
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
        """Our requests waiting for an answer: id -> method (a read-only view)."""
        return MappingProxyType(self._pending)

    @property
    def in_flight(self) -> Mapping[RequestId, str]:
        """The other side's requests being handled: id -> method (a read-only view)."""
        return MappingProxyType(self._in_flight)

    # --- our requests -------------------------------------------------------------------------

    def start_request(self, method: str, params: dict[str, Any] | None = None) -> OutboundRequest:
        """Mint an id and register the request as pending. The I/O layer sends `message`, then
        waits for `ResponseReceived`, or for the id among those `close_input()`/`close()` return.

        Refused (ConnectionStateError) once the input has closed: no answer could ever arrive, and
        a caller that waited would wait for nothing (a research checkpoint held its session for
        the full answer timeout). The I/O layer checks `input_closed` first and fails the call.
        """
        if self._input_closed:
            state = "closed" if self._closed else "input-closed"
            raise ConnectionStateError(f"start_request() on a {state} connection")
        n = next(self._counter)
        request_id: RequestId = n if self.id_prefix is None else f"{self.id_prefix}{n}"
        self._pending[request_id] = method
        return OutboundRequest(request_id, method, jsonrpc.request(request_id, method, params))

    def cancel_request(self, request_id: RequestId) -> dict[str, Any] | None:
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
            if self._pending.pop(msg.id, None) is not None:
                return ResponseReceived(msg)
            late = msg.id in self._cancelled
            if late:
                del self._cancelled[msg.id]
            return UnexpectedResponse(msg, late)
        if isinstance(msg, jsonrpc.Notification):
            if msg.method != CANCEL_REQUEST:
                return NotificationReceived(msg)
            target = msg.params.get("requestId")
            # Anything but a valid id names no request (and may not even be hashable).
            if jsonrpc.valid_id(target) and target in self._in_flight:
                return CancelRequested(target)
            return None
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
        self._in_flight[request.id] = request.method
        return RequestReceived(request)

    def finish_request(
        self, request_id: RequestId, reply: dict[str, Any] | None, *, cancelled: bool = False
    ) -> dict[str, Any]:
        """A request in flight is done: the reply to send. `reply` is the handler's answer (None
        when it has none); a cancelled request is answered -32800 whatever its handler returned."""
        if self._in_flight.pop(request_id, None) is None:
            raise ConnectionStateError(f"finish_request({request_id!r}): not a request in flight")
        if cancelled or reply is None:
            return jsonrpc.error(jsonrpc.REQUEST_CANCELLED, request_id)
        return jsonrpc.normalise_error(reply)

    # --- the end ------------------------------------------------------------------------------

    def close_input(self) -> list[RequestId]:
        """Nothing more will be read (end of stream, or reading stopped). Returns the ids of our
        pending requests, now failed: their answers can never arrive; `start_request` is refused
        from now on. Requests in flight go on and are still answered. Idempotent."""
        self._input_closed = True
        failed = list(self._pending)
        self._pending.clear()
        self._cancelled.clear()
        return failed

    def close(self) -> list[RequestId]:
        """The connection is over (nothing can be sent): as `close_input()`. Requests in flight
        still finish (their replies go nowhere)."""
        self._closed = True
        return self.close_input()
