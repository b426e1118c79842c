"""The daemon's live connections: accepted, counted for idle exit, served by a JSON-RPC peer each,
and drained at shutdown."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Final

import anyio
import anyio.abc

from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.process.peercred import peer_uid
from zocratesd.rpc.peer import MethodTable, Peer

log = logging.getLogger(PROCESS_LOGGER)

# accept() failing for lack of descriptors or memory is transient: wait and retry instead of dying.
# 100 ms is Trio's choice in serve_listeners (ACCEPT_CAPACITY_ERRNOS, SLEEP_TIME).
ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S: Final = 0.1


class Connections:
    """The live connections of a daemon: served, counted for idle exit, drained at shutdown.

    A connection counts from the moment it is started (`start()`/`start_socket()` count it before
    its task exists) until its peer has answered or cancelled every request (`Peer.run` returns
    only then). So "no connection open" also means "no request in flight", and the idle check,
    which runs in the same event loop, can never see a connection that is accepted but not yet
    counted. The HTTP shim counts its requests and turns through `opened`/`closed` too.
    """

    def __init__(self, methods: MethodTable, *, max_frame_bytes: int):
        self.methods = methods
        self.max_frame_bytes = max_frame_bytes
        self.peers: set[Peer] = set()
        self.open = 0
        self.idle = anyio.Event()
        self.idle.set()
        self.idle_since = anyio.current_time()
        self.draining = False
        self._activity = anyio.Event()

    def opened(self) -> None:
        self.open += 1
        if self.idle.is_set():
            self.idle = anyio.Event()
        self._activity.set()

    def closed(self) -> None:
        self.open -= 1
        if self.open == 0:
            self.idle_since = anyio.current_time()
            self.idle.set()

    def start(
        self,
        tg: anyio.abc.TaskGroup,
        stream: anyio.abc.ByteStream,
        name: str,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        """Serve `stream` in `tg`, counted from now; `on_close` runs once its peer is done."""
        self.opened()
        tg.start_soon(self._serve, stream, name, on_close)

    def start_socket(self, tg: anyio.abc.TaskGroup, stream: anyio.abc.SocketStream) -> None:
        """Serve an accepted Unix socket connection in `tg`, counted from now; refused unless
        the process at the other end runs as our own user."""
        self.opened()
        tg.start_soon(self._serve_socket, stream)

    async def _serve_socket(self, stream: anyio.abc.SocketStream) -> None:
        try:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            uid = peer_uid(raw)
            if uid != os.getuid():
                log.warning("refused a connection from uid %s (this daemon serves uid %s)", uid, os.getuid())
                await stream.aclose()
                return
            await self._run_peer(stream, f"socket:{raw.fileno()}")
        finally:
            self.closed()

    async def _serve(self, stream: anyio.abc.ByteStream, name: str, on_close: Callable[[], None] | None) -> None:
        try:
            await self._run_peer(stream, name)
        finally:
            self.closed()
            if on_close is not None:
                on_close()

    async def _run_peer(self, stream: anyio.abc.ByteStream, name: str) -> None:
        if self.draining:  # accepted in the last instant before shutdown: nothing read yet, close it
            await stream.aclose()
            return
        peer = Peer(stream, self.methods, max_frame_bytes=self.max_frame_bytes, name=name)
        self.peers.add(peer)
        try:
            await peer.run()
        except Exception:  # one broken connection must never take the daemon down
            log.exception("%s: connection failed", name)
        finally:
            self.peers.discard(peer)

    async def wait_idle_for(self, seconds: float) -> None:
        """Return once no connection has been open for `seconds` in a row.

        It returns without awaiting after its last check, so a caller that stops accepting right
        away (same event-loop step) cannot lose a connection accepted in between.
        """
        while True:
            if self.open:
                await self.idle.wait()
                continue
            remaining = self.idle_since + seconds - anyio.current_time()
            if remaining <= 0:
                return
            self._activity = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._activity.wait()

    async def drain(self, grace_s: float) -> None:
        """Stop reading from every peer and give their requests in flight `grace_s` to finish."""
        self.draining = True
        for peer in list(self.peers):
            peer.stop_reading()
        with anyio.move_on_after(grace_s) as scope:
            await self.idle.wait()
        if scope.cancelled_caught:
            log.warning("%d connection(s) still busy after %.0f s; cancelling them", self.open, grace_s)


async def accept_loop(listener: anyio.abc.SocketListener, conns: Connections, tg: anyio.abc.TaskGroup) -> None:
    """Accept until cancelled or the listener is closed; each connection is counted before
    anything else can run, and served in `tg`."""
    while True:
        try:
            stream = await listener.accept()
        except anyio.ClosedResourceError:
            return
        except anyio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in ACCEPT_CAPACITY_ERRNOS:
                log.warning("accept failed (%s); retrying in %.1f s", cause.strerror, ACCEPT_RETRY_S)
                await anyio.sleep(ACCEPT_RETRY_S)
                continue
            raise
        conns.start_socket(tg, stream)
