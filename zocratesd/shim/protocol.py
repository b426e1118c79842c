"""The shim's HTTP/1.1 connections: uvicorn's h11 protocol under a cap and deadlines.

Another local user shares the loopback interface and needs no token to open connections. Left
alone, uvicorn arms its keep-alive timer only after a first response and disarms it on any byte,
so a connection that never completes a request head lives forever, and nothing caps how many there
are: 1,100 idle connections took every descriptor of a daemon with a 1,024 limit, and its Unix
socket with them. So every connection is, at any moment, in one of three phases:

- `HEAD`: a request head is arriving. The whole head must be in within `head_timeout_s` of the
  connection's opening (or of the first byte after an idle phase), however slowly it trickles:
  bytes never extend the deadline (slowloris). A real client writes a head at once.
- `SERVING`: a request is being answered, for as long as that takes (a turn's event stream); the
  guard bounds the time a body may take to arrive, the core bounds a turn.
- `IDLE`: the response is complete and the connection is kept alive for `idle_timeout_s`.

A connection is the owner's (`trusted`) once a request on it carried the token (the guard says
so, guard.py); until then anyone on this machine may have opened it.

At most `cap` connections are open. One more closes, to make room, the connection that has waited
longest among those never trusted, whatever their phase (a body trickling in, a public answer the
client does not read: another user's 512 such connections would otherwise hold every slot), then
among the owner's in `HEAD` or `IDLE` (nginx reuses its idle keep-alive connections the same way
when it runs out); it is itself closed at once only when every open connection is the owner's,
serving a request. A flood of connections therefore only ever closes waiting or untrusted
connections, the flood's own first; a real client's head arrives with its connection and is read
within a loop iteration or two, long before a flood could push it out.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

from zocratesd.shim.guard import SECURITY_HEADERS

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    HEAD = "head"
    SERVING = "serving"
    IDLE = "idle"


class ConnectionTable:
    """The shim's open connections: the cap, and the waiting ones, longest waiting first."""

    def __init__(self, cap: int, *, head_timeout_s: float, idle_timeout_s: float):
        self.cap = cap
        self.head_timeout_s = head_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.open: set[LimitedH11Protocol] = set()
        # The connections that may be closed to make room (HEAD or IDLE, or never trusted), in the
        # order they began to wait (a dict keeps insertion order).
        self.waiting: dict[LimitedH11Protocol, None] = {}
        # Open connections by their peer's (host, port), as uvicorn's scope names the client.
        self.by_peer: dict[tuple[str, int], LimitedH11Protocol] = {}
        # Since start, for the log.
        self.refused = 0
        self.evicted = 0
        self._full = False  # warned that the cap is reached, and not below it since

    def admit(self, conn: LimitedH11Protocol) -> bool:
        """Count `conn` in, making room if the cap is reached; False: close it at once."""
        if len(self.open) >= self.cap:
            victim = next((c for c in self.waiting if not c.trusted), None) or next(iter(self.waiting), None)
            self._warn_full()
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self._remove(victim)
            victim.close(abort=False)
        self.open.add(conn)
        if conn.peer is not None:
            self.by_peer[conn.peer] = conn
        return True

    def trust(self, peer: tuple[str, int] | None) -> None:
        """The connection from `peer` carried the owner's token (guard.py)."""
        conn = self.by_peer.get(peer) if peer is not None else None
        if conn is not None:
            conn.trust()

    def wait(self, conn: LimitedH11Protocol) -> None:
        self.waiting.pop(conn, None)
        self.waiting[conn] = None

    def serve(self, conn: LimitedH11Protocol) -> None:
        self.waiting.pop(conn, None)

    def _remove(self, conn: LimitedH11Protocol) -> None:
        self.waiting.pop(conn, None)
        self.open.discard(conn)
        if conn.peer is not None and self.by_peer.get(conn.peer) is conn:
            del self.by_peer[conn.peer]

    def forget(self, conn: LimitedH11Protocol) -> None:
        self._remove(conn)
        if self._full and len(self.open) < self.cap:
            self._full = False
            log.info(
                "HTTP shim below its cap of %d connections again (so far %d waiting connections closed to make "
                "room, %d refused)", self.cap, self.evicted, self.refused,
            )

    def _warn_full(self) -> None:
        if not self._full:
            self._full = True
            log.warning(
                "HTTP shim at its cap of %d connections: each new one closes the longest-waiting idle or "
                "untrusted one (or is refused when all are the owner's, busy); the Unix socket is not affected", self.cap,
            )


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, counted in `table` and held to its phase's deadline.

    It hooks only where uvicorn's protocol starts (connection_made), reads (data_received),
    finishes a response (on_response_complete) and ends (connection_lost); what a request is
    doing is read from uvicorn's `cycle` (None, or the last request's, `response_complete`
    once answered). Subclassed per server with its `table` (`protocol_class`).
    """

    table: ClassVar[ConnectionTable]
    # None until admitted, and forever for a connection refused at the cap.
    _phase: Phase | None = None
    _deadline: asyncio.TimerHandle | None = None
    # A request on it carried the token (module doc).
    trusted = False
    peer: tuple[str, int] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.peer = get_remote_addr(transport)
        if not self.table.admit(self):
            transport.abort()  # uvicorn never sees it: connection_lost below does nothing either
            return
        super().connection_made(transport)
        self._enter(Phase.HEAD)

    def data_received(self, data: bytes) -> None:
        if self._phase is Phase.IDLE:  # the next request's first byte: its head's deadline runs from now
            self._enter(Phase.HEAD)
        super().data_received(data)
        self._follow_cycle()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request's cycle
        self._follow_cycle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._phase is None:
            return
        self._forget()
        super().connection_lost(exc)

    def _should_upgrade(self) -> bool:
        # The shim serves no WebSocket: an Upgrade header is ignored, the request served as plain
        # HTTP (and refused by the guard or the router). An upgraded connection would leave the table.
        return False

    def send_400_response(self, msg: str) -> None:
        """The answer to bytes h11 cannot parse, which uvicorn writes itself (no app sees them):
        uvicorn's 400, with the headers every answer of the shim carries (guard.py)."""
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                   *((name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS)]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                      h11.Data(data=msg.encode("ascii")), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def close(self, *, abort: bool) -> None:
        """Close now: a deadline passed (abort: the client had its time), or room is needed (close:
        the end of a response already written still reaches a client that reads it)."""
        self._cancel_deadline()
        if abort:
            self.transport.abort()
        elif not self.transport.is_closing():
            self.transport.close()

    def _follow_cycle(self) -> None:
        if self._phase is None or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            if self._phase is not Phase.SERVING:
                self._enter(Phase.SERVING)
        elif self._phase is Phase.SERVING:
            self._enter(Phase.IDLE)

    def trust(self) -> None:
        self.trusted = True
        if self._phase is Phase.SERVING:
            self.table.serve(self)

    def _enter(self, phase: Phase) -> None:
        self._phase = phase
        self._cancel_deadline()
        if phase is Phase.SERVING:
            # The guard bounds how long a body may take and the core a turn; one of another user
            # stays closable (module doc).
            if self.trusted:
                self.table.serve(self)
            else:
                self.table.wait(self)
            return
        self.table.wait(self)
        timeout = self.table.head_timeout_s if phase is Phase.HEAD else self.table.idle_timeout_s
        self._deadline = self.loop.call_later(timeout, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        self._forget()
        self.close(abort=True)

    def _forget(self) -> None:
        self._cancel_deadline()
        self.table.forget(self)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def protocol_class(table: ConnectionTable) -> type[LimitedH11Protocol]:
    """`LimitedH11Protocol` bound to `table`: uvicorn makes its protocols from a class."""
    return type("ShimH11Protocol", (LimitedH11Protocol,), {"table": table})
