"""The HTTP face's listener: the port, the uvicorn server inside the daemon's loop, its shutdown.

We accept connections ourselves and hand each to uvicorn (`loop.connect_accepted_socket`) instead
of letting asyncio's server accept them: its accept loop, out of descriptors, logs one traceback per
queued connection and schedules a retry for each (CPython 3.11/3.12 `_accept_connection`), an error
storm that rotated the whole log away in seconds. Ours waits and retries once, like the Unix
socket's (process/connections.py). How many connections may be open, and for how long each may
wait, is protocol.py's business.

Binding is cheap and comes first (daemon.json names the port before the daemon is ready); what
serves the port (uvicorn, Starlette, the routes: shim/app.py) is built by `run()`, once the
process has loaded it in the background (process/startup.py, `SHIM`) and says so. A client that
connects meanwhile waits in the listen queue a moment; it is never refused.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import resource
import secrets
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from zocratesd import deferred
from zocratesd.config import HttpConfig

if TYPE_CHECKING:
    import uvicorn

    from zocratesd.core.daemon import Daemon
    from zocratesd.shim.app import Serving
    from zocratesd.shim.openpage import OpenPages
    from zocratesd.shim.protocol import ConnectionTable, LimitedH11Protocol

log = logging.getLogger(__name__)

# What serves the port, loaded by `run()` unless the process did already.
SERVING_MODULE = "zocratesd.shim.app"

LOOPBACK = "127.0.0.1"
# Two Zotero profiles get two stable ports: base_port + sha256(data dir) mod this span.
PORT_OFFSET_SPAN = 1000
# Ports tried upward from the preferred one before giving up (another program may hold a few).
PORT_PROBE_LIMIT = 50
# Connections the kernel queues before we accept them (clamped to net.core.somaxconn). Another
# user's flood can outpace the accept loop for a moment; a full queue drops a real client's SYN,
# which then waits a 1 s retransmission: measured, 1,100 connects in 6 s with 128, 0.07 s with 1,024.
LISTEN_BACKLOG = 1024
# A client idle this long on a keep-alive connection is closed; the sidebar reconnects freely.
KEEP_ALIVE_S = 30
# Descriptors the shim always leaves to the rest of the daemon, whatever happens on its port: the
# Unix socket's clients (an editor opens one per chat panel), the stores, the library, the model's
# connections. The shim's cap is `http.max_connections` (512), or the soft fd limit minus this when
# that is lower: a desktop's 1,024 leaves 768; the daemon raises it toward the hard limit first
# (process/fdlimit.py), but a hard limit of 1,024 is not unheard of.
FD_RESERVE = 256
# accept() failing for lack of descriptors or memory is transient: wait and retry (as the Unix socket does).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1


def connection_cap(max_connections: int, fd_limit: int | None = None) -> int:
    """The shim's connection cap: `max_connections`, or fewer when the soft fd limit (this
    process's, by default) leaves less than that beside `FD_RESERVE`."""
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, fd_limit - FD_RESERVE))


def preferred_port(data_dir: Path, base_port: int) -> int:
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).digest()
    return base_port + int.from_bytes(digest[:8], "big") % PORT_OFFSET_SPAN


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR lets a restarted daemon take its port back from TIME_WAIT; on Linux and macOS
        # it never lets two listeners share a port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bind_loopback(config: HttpConfig, data_dir: Path) -> socket.socket:
    """A listening socket on 127.0.0.1: `http.port` exactly when set (0: any free port), else the
    data dir's preferred port, probing upward when it is taken."""
    if config.port is not None:
        return _bind(config.port)
    if config.base_port == 0:
        return _bind(0)
    first = preferred_port(data_dir, config.base_port)
    last_error: OSError | None = None
    for port in range(first, min(first + PORT_PROBE_LIMIT, 65536)):
        try:
            return _bind(port)
        except OSError as exc:
            last_error = exc
    raise OSError(f"no free port in {first}-{first + PORT_PROBE_LIMIT - 1} on {LOOPBACK}: {last_error}")


class HttpFace:
    """The shim of one daemon: bind first (so daemon.json can name the port), then `run()` in the
    daemon's task group until `stop()`. What serves the port is built by `run()` (module doc)."""

    def __init__(
        self,
        daemon: Daemon,
        config: HttpConfig,
        *,
        opened: Callable[[], None] = lambda: None,
        closed: Callable[[], None] = lambda: None,
        grace_s: float = 10.0,
    ):
        self.daemon = daemon
        self.config = config
        self.token = secrets.token_urlsafe(32)
        # The write channel's second credential: only daemon.json holds it, never the web page (which
        # has `token`), so a page cannot take or answer the writes meant for the plugin inside Zotero.
        self.plugin_token = secrets.token_urlsafe(32)
        self._sock: socket.socket | None = None
        self._turns: anyio.abc.TaskGroup | None = None
        self._accepting: anyio.CancelScope | None = None
        self._opened, self._closed, self._grace_s = opened, closed, grace_s
        self._server: uvicorn.Server | None = None  # built by run(), with `connections` and `_pages`
        self._protocol_class: type[LimitedH11Protocol] | None = None
        self._pages: OpenPages | None = None
        self.connections: ConnectionTable | None = None
        self._stopped = False
        self.port = 0

    def _build(self) -> None:
        """The app, its guard and the uvicorn server around them (shim/app.py)."""
        app = deferred.load(SERVING_MODULE)
        serving: Serving = app.build(
            self.daemon, self.config, token=self.token, plugin_token=self.plugin_token, port=lambda: self.port,
            turn_group=self._turn_group,
            opened=self._opened, closed=self._closed, grace_s=self._grace_s,
            cap=connection_cap(self.config.max_connections), keep_alive_s=KEEP_ALIVE_S,
        )
        self.connections, self._pages = serving.connections, serving.pages
        self._server, self._protocol_class = serving.server, serving.protocol_class

    def _turn_group(self) -> anyio.abc.TaskGroup:
        assert self._turns is not None, "the HTTP face is not running"
        return self._turns

    @property
    def info(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def bind(self, data_dir: Path) -> None:
        self._sock = bind_loopback(self.config, data_dir)
        self.port = self._sock.getsockname()[1]

    async def run(self, imported: Callable[[], Awaitable[object]] | None = None) -> None:
        """Serve until `stop()`; then wait for turns still running (the daemon's drain bounds it).
        `imported`, when given, returns once `SERVING_MODULE` is imported (in another thread: the
        event loop answers the Unix socket meanwhile); without it, it is imported here."""
        assert self._sock is not None, "bind() first"
        try:
            if imported is not None:
                await imported()
            if self._stopped:  # stopped while the modules loaded
                return
            self._build()
            assert self._server is not None
            logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # no per-start chatter
            async with anyio.create_task_group() as tg:
                self._turns = tg
                tg.start_soon(self._accept, self._sock)
                await self._server.serve(sockets=[])  # no listener of its own: _accept hands it connections
                self.stop()
        finally:
            self._sock.close()
            if self._pages is not None:
                self._pages.close()  # the codes die with the daemon, and so do their pages

    async def _accept(self, listener: socket.socket) -> None:
        """Hand each accepted connection to uvicorn (its protocol counts it in or closes it) until stop()."""
        loop = asyncio.get_running_loop()
        server = self._server
        protocol = self._protocol_class
        assert server is not None and protocol is not None
        state = server.server_state

        def factory() -> asyncio.Protocol:
            # What uvicorn's own server would make; app_state is the lifespan's, and lifespan is off.
            return protocol(config=server.config, server_state=state, app_state={})

        with anyio.CancelScope() as self._accepting:
            while not server.should_exit:
                try:
                    conn, _ = await loop.sock_accept(listener)
                except ConnectionAbortedError:  # the client gave up while it was queued
                    continue
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.warning("HTTP shim: accept failed (%s); retrying in %.1f s", exc.strerror, ACCEPT_RETRY_S)
                    await anyio.sleep(ACCEPT_RETRY_S)
                    continue
                try:
                    # uvicorn writes a response in two pieces (head, body): with Nagle's algorithm
                    # the second waits for the client's delayed ACK of the first on every request
                    # after the first on a kept-alive connection (bench/PROFILE.md section 15). asyncio's transport sets
                    # TCP_NODELAY only on a socket made with proto IPPROTO_TCP, and ours says 0.
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await loop.connect_accepted_socket(factory, conn)
                except OSError:  # reset before we got to it
                    conn.close()

    def stop(self) -> None:
        """Stop accepting; requests in flight (an SSE stream: its turn) may finish, and the plugin's
        open poll, which would only wait, is answered at once."""
        self._stopped = True
        self.daemon.plugin.release_polls()
        if self._server is not None:
            self._server.should_exit = True
        if self._accepting is not None:
            self._accepting.cancel()
