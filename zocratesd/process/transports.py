"""Where a daemon's connections come from. boot.py runs one sequence of steps around either:

- `SocketTransport` (`zocratesd serve`): the Unix socket, bound by us or handed over by a service
  manager (socket activation), plus the HTTP shim on a loopback port; daemon.json names both;
- `StdioTransport` (`zocratesd stdio --standalone`): exactly one connection, the editor on fds 0/1;
  no socket, no daemon.json (no other client could find this daemon), and the process ends when
  the editor closes stdin;
- `PairTransport` (`zocratesd mcp --standalone`): exactly one connection, a socket pair whose other
  end a face in this process holds; the same, but the face speaks to the outside world.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Protocol

import anyio
import anyio.abc

from zocratesd import locations
from zocratesd.core.daemon import Daemon
from zocratesd.process.connections import Connections, accept_loop
from zocratesd.process.fdstream import FdStream
from zocratesd.process.instance import Instance
from zocratesd.process.lifecycle import SHUTDOWN_GRACE_S
from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.process.startup import SHIM, Plan
from zocratesd.service_manager.activation import Activation, ActivationError, activated_sockets, check_unix_listener
from zocratesd.shim import HttpFace

log = logging.getLogger(PROCESS_LOGGER)


class Transport(Protocol):
    """The steps of boot.py that depend on where connections come from, in the order it calls them."""

    # Appended to "a zocratesd (pid N) already serves this data dir": what the user can do instead.
    already_running_hint: str
    @property
    def serves_http(self) -> bool:
        """Set by `open`: whether it serves the HTTP shim (the start-up plan then loads its stage)."""
        ...

    @property
    def restarts_on_demand(self) -> bool:
        """Whether something starts a daemon again on the next connection (so idle exit is safe)."""
        ...

    def prepare(self) -> None:
        """Before the instance lock: take what a service manager handed this process."""
        ...

    def claim(self, instance: Instance) -> None:
        """With the lock held, before the core is imported: check that we can serve (fail fast)."""
        ...

    async def open(self, instance: Instance, daemon: Daemon, conns: Connections) -> None:
        """With the core started: bind (or adopt) every listener, before anything is served."""
        ...

    def start(
        self, accepting: anyio.abc.TaskGroup, connections: anyio.abc.TaskGroup, conns: Connections, plan: Plan
    ) -> None:
        """Start serving (a listener whose modules are a stage of `plan` once that stage is
        loaded). Tasks that take new connections go in `accepting` (cancelled to stop accepting;
        a transport may cancel it to stop the daemon); connections go in `connections`."""
        ...

    def publish(self, instance: Instance) -> str:
        """Tell clients where we are (daemon.json), just before READY=1; returns it for the log."""
        ...

    async def close(self) -> None:
        """Stop accepting and close what `open` bound; idempotent (called again on the way out)."""
        ...


class SocketTransport:
    """The Unix socket (ours, or a service manager's) and the HTTP shim on a loopback port."""

    already_running_hint = "use `zocratesd status` or `zocratesd stop`"

    def __init__(self, socket_path: Path | None):
        self.socket_path = socket_path  # --socket; None: locations.default_socket_path
        self.activation: Activation | None = None
        self.listeners: list[anyio.abc.SocketListener] = []
        self.http_face: HttpFace | None = None

    @property
    def restarts_on_demand(self) -> bool:
        return self.activation is not None

    def prepare(self) -> None:
        # Taken before anything else runs: it also removes the variables that named the sockets.
        self.activation = activated_sockets()

    def claim(self, instance: Instance) -> None:
        if self.activation is None:
            if self.socket_path is not None:
                instance.claim_socket(self.socket_path)
            else:
                instance.claim_socket(locations.default_socket_path(instance.data_dir), private_dir=True)

    async def open(self, instance: Instance, daemon: Daemon, conns: Connections) -> None:
        self.listeners = await self._open_listeners(instance)
        self.http_face = self._open_http(daemon, conns)

    @property
    def serves_http(self) -> bool:
        return self.http_face is not None

    async def _open_listeners(self, instance: Instance) -> list[anyio.abc.SocketListener]:
        """The manager's sockets when activated, else our own socket at the path claimed earlier."""
        activation = self.activation
        if activation is None:
            return [await anyio.abc.SocketListener.from_socket(instance.bind())]
        socks = activation.take()
        activation.close_rest()
        if not socks:
            raise ActivationError(
                f"{activation.manager} passed no socket named zocratesd (FileDescriptorName=zocratesd)"
            )
        for sock in socks:
            check_unix_listener(sock, f"the socket {activation.manager} passed")
            sock.setblocking(False)  # anyio's listener accepts without blocking the event loop
        if self.socket_path is not None:
            log.warning("--socket %s ignored: serving on the socket %s passed", self.socket_path, activation.manager)
        instance.adopt_socket(socks[0], activation.manager)
        return [await anyio.abc.SocketListener.from_socket(sock) for sock in socks]

    @staticmethod
    def _open_http(daemon: Daemon, conns: Connections) -> HttpFace | None:
        """The HTTP shim for the Zotero plugin, bound now so daemon.json can name its port (None: off);
        it serves once its stage of the start-up plan is loaded, a connection queued until then.
        Its requests and turns count as open connections (idle exit, drain at shutdown)."""
        config = daemon.config.http
        if not config.enabled:
            return None
        face = HttpFace(daemon, config, opened=conns.opened, closed=conns.closed, grace_s=SHUTDOWN_GRACE_S)
        try:
            face.bind(daemon.data_dir)
        except OSError as exc:
            raise locations.RuntimeFileError(
                f"cannot serve HTTP on 127.0.0.1: {exc}; pass --http-port N or --no-http"
            ) from None
        log.info("HTTP shim on http://127.0.0.1:%d", face.port)
        return face

    def start(
        self, accepting: anyio.abc.TaskGroup, connections: anyio.abc.TaskGroup, conns: Connections, plan: Plan
    ) -> None:
        shim = plan.stage(SHIM.name)
        if self.http_face is not None:
            connections.start_soon(self.http_face.run, shim.done.wait if shim else None)
        for listener in self.listeners:
            accepting.start_soon(accept_loop, listener, conns, connections)

    def publish(self, instance: Instance) -> str:
        face = self.http_face
        instance.write_info(http=face.info if face else None, token=face.token if face else None,
                            plugin_token=face.plugin_token if face else None)
        how = f" (socket-activated by {instance.activated_by})" if instance.activated_by else ""
        return f"{instance.socket_path}{how}"

    async def close(self) -> None:
        # Closing our listener leaves a manager's copy listening: connections that arrive from
        # now on wait there for the next daemon instead of being refused.
        for listener in self.listeners:
            await listener.aclose()
        if self.http_face is not None:
            self.http_face.stop()  # stops accepting; its requests and turns are drained by the caller


class StdioTransport:
    """One connection on fds 0/1, the core in this process: an editor's own private daemon."""

    already_running_hint = "drop --standalone to talk to it"
    restarts_on_demand = False
    serves_http = False

    def __init__(self, stream: FdStream):
        self.stream = stream

    def prepare(self) -> None:
        pass  # no service manager starts this one

    def claim(self, instance: Instance) -> None:
        pass  # no socket to claim

    async def open(self, instance: Instance, daemon: Daemon, conns: Connections) -> None:
        pass  # the stream is open already (FdStream.take_stdio, before anything could print)

    def start(
        self, accepting: anyio.abc.TaskGroup, connections: anyio.abc.TaskGroup, conns: Connections, plan: Plan
    ) -> None:
        # The editor closing stdin ends the one connection, and with it the daemon.
        conns.start(connections, self.stream, "stdio", on_close=accepting.cancel_scope.cancel)

    def publish(self, instance: Instance) -> str:
        return "stdin/stdout (no socket, no daemon.json)"

    async def close(self) -> None:
        pass  # the peer closes its stream when it ends



class PairTransport:
    """One connection over a Unix socket pair, the core in this process, its face too (`zocratesd
    mcp --standalone`: the MCP face holds the other end). No socket path, no daemon.json; the core
    ends when the face closes its end."""

    already_running_hint = "drop --standalone to talk to it"
    restarts_on_demand = False
    serves_http = False

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._started = False

    def prepare(self) -> None:
        pass  # no service manager starts this one

    def claim(self, instance: Instance) -> None:
        pass  # no socket to claim

    async def open(self, instance: Instance, daemon: Daemon, conns: Connections) -> None:
        pass  # connected already

    def start(
        self, accepting: anyio.abc.TaskGroup, connections: anyio.abc.TaskGroup, conns: Connections, plan: Plan
    ) -> None:
        self._started = True
        accepting.start_soon(self._serve, connections, conns, accepting.cancel_scope)

    async def _serve(self, connections: anyio.abc.TaskGroup, conns: Connections, stop: anyio.CancelScope) -> None:
        stream = await anyio.abc.UNIXSocketStream.from_socket(self.sock)
        conns.start(connections, stream, "in-process", on_close=stop.cancel)

    def publish(self, instance: Instance) -> str:
        return "an in-process socket pair (no socket, no daemon.json)"

    async def close(self) -> None:
        if not self._started:  # never served: the face must see the end of its connection
            self.sock.close()
