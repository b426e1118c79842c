"""The MCP face's one connection to the daemon, kept up across the daemon's restarts.

`DaemonLink.run` owns the connection (a `zocrates_client` connection, in a task of its own, as
structured concurrency wants: the client's task group is entered and left in one task). Tools ask
`await link.client()` for the connected client; the first ask connects (starting a daemon when
none runs, as `zocratesd stdio` does: `zocrates_client` reuses the pump's discovery and start).
When the connection is lost (the daemon was stopped, crashed or killed), the next ask connects
again, starting a new daemon if needed: sessions live in sessions.db, so a conversation continues
by its id. `--standalone` hands in the socket of a core running in this process instead; then a
lost connection is final (the core is gone with it).

The daemon is told at `initialize` that this client answers `elicitation/create` in form mode, so
a research checkpoint comes here as that request; `on_elicit` (the server's) decides whether the
MCP client is asked or the checkpoint is left pending for the `resume` tool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

import zocrates_client
from zocrates_client import Client, ConnectError, ConnectionLost
from zocratesd import locations
from zocratesd.mcp import tools

log = logging.getLogger("zocratesd.mcp")

# How often the keeper looks whether its connection has ended without a caller noticing (the
# daemon closed it between two tool calls): the next call then connects at once.
CLOSED_POLL_S: Final = 0.5
# Pauses before connecting again when a daemon closed a new connection before answering its
# `initialize` (it was exiting: killed or stopped a moment before); then the attempt fails.
RECONNECT_PAUSES_S: Final = (0.2, 0.5, 1.0)
# What we answer: form-mode elicitation instead of session/request_permission (rpc/acp.py
# ask_checkpoint), so a checkpoint can be put to the MCP client as an elicitation of its own.
# ... and asks its own client about the writes a turn proposed (server.py `_ask`), so the daemon does not.
CLIENT_CAPABILITIES: Final = {**tools.DAEMON_CLIENT_CAPABILITIES, "elicitation": {"form": {}},
                              "_meta": {"zocrates": {"asksAboutWrites": {}}}}

Elicit = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class LinkDown(Exception):
    """No daemon could be reached; the message says why and what to do."""


class _EndedBeforeInitialize(Exception):
    """A connection the daemon closed before it answered `initialize` (`lost` says how)."""

    def __init__(self, lost: ConnectionLost) -> None:
        super().__init__(str(lost))
        self.lost = lost


class DaemonLink:
    def __init__(
        self, data_dir: Path, *, serve_args: list[str] | None = None, on_elicit: Elicit | None = None,
        standalone: socket.socket | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.serve_args = serve_args or []
        self.on_elicit = on_elicit
        self._standalone = standalone
        self._client: Client | None = None
        self._error: str | None = None
        self._wanted = anyio.Event()  # someone needs a connection
        self._changed = anyio.Event()  # a connection came up, or an attempt failed
        self._lost = anyio.Event()  # a caller saw the connection end
        self.connects = 0  # how many connections were made (tests: a reconnect happened)

    async def client(self) -> Client:
        """The connected client; connects first when there is none. Raises LinkDown."""
        while True:
            current = self._client
            if current is not None and not current.closed:
                return current
            if self._client is not None:
                self.lost()
            changed = self._changed
            self._error = None
            self._wanted.set()
            await changed.wait()
            if self._client is None and self._error is not None:
                raise LinkDown(self._error)

    async def settled(self, timeout_s: float) -> None:
        """Until a connection is up, or an attempt to make one has failed; at most `timeout_s`."""
        with anyio.move_on_after(timeout_s), contextlib.suppress(LinkDown):
            await self.client()

    def lost(self) -> None:
        """A caller saw ConnectionLost: drop the connection (the next `client()` reconnects)."""
        self._lost.set()

    def want(self) -> None:
        """Connect now, before anyone asks (a cold start overlaps with the MCP handshake)."""
        self._wanted.set()

    async def run(self) -> None:
        """Keep a connection whenever one is wanted; runs until cancelled."""
        while True:
            await self._wanted.wait()
            try:
                await self._serve_one()
            except (ConnectError, OSError, LinkDown) as exc:
                self._error = str(exc)
                log.warning("zocratesd mcp: %s", exc)
            except ConnectionLost as exc:
                self._error = f"the connection to zocratesd ended: {exc}"
            finally:
                self._client = None
                self._wanted = anyio.Event()
                self._lost = anyio.Event()
                changed, self._changed = self._changed, anyio.Event()
                changed.set()

    async def _serve_one(self) -> None:
        """One connection, kept until it ends. One that ends before `initialize` is answered is
        tried again after a pause: a daemon killed a moment ago still looks alive (its pid, its
        lock) while it exits, and takes the connection with it; the next try starts its successor."""
        for pause in (*RECONNECT_PAUSES_S, None):
            try:
                await self._serve_connection()
                return
            except _EndedBeforeInitialize as ended:
                if pause is None or self._standalone is not None:
                    raise ended.lost from None
                log.info("zocratesd mcp: %s; connecting again", ended.lost)
                await anyio.sleep(pause)

    async def _serve_connection(self) -> None:
        if self._standalone is not None:
            if self.connects:
                raise LinkDown("the in-process core has stopped (--standalone); restart `zocratesd mcp`")
            stream = await anyio.abc.UNIXSocketStream.from_socket(self._standalone)
            opened = zocrates_client.connect(self.data_dir, stream=stream, on_request=self._on_request)
        else:
            opened = zocrates_client.connect(
                self.data_dir, start_daemon=True, on_request=self._on_request, serve_args=self.serve_args,
                on_daemon_start=self._announce,
            )
        async with opened as client:
            try:
                await client.call("initialize", {
                    "protocolVersion": locations.PROTOCOL_VERSION, "clientCapabilities": CLIENT_CAPABILITIES,
                    "clientInfo": tools.DAEMON_CLIENT_INFO,
                })
            except ConnectionLost as exc:
                raise _EndedBeforeInitialize(exc) from None
            self.connects += 1
            self._client = client
            changed, self._changed = self._changed, anyio.Event()
            changed.set()
            while not client.closed and not self._lost.is_set():
                with anyio.move_on_after(CLOSED_POLL_S):
                    await self._lost.wait()

    def _announce(self, pid: int, log_file: Path) -> None:
        # stderr: the MCP client shows it in its server log; stdout is the protocol's.
        print(
            f"zocratesd mcp: started zocratesd (pid {pid}) for {self.data_dir}; it keeps running in the background "
            f"(log: {log_file}; stop it with `zocratesd stop --zotero-data-dir {self.data_dir}`)",
            file=sys.stderr, flush=True,
        )

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        """Requests the daemon sends us: a research checkpoint (elicitation/create, or
        session/request_permission from an older daemon)."""
        if method == "elicitation/create" and self.on_elicit is not None:
            return await self.on_elicit(params)
        if method == "elicitation/create":
            return {"action": "decline"}
        if method == "session/request_permission":
            return {"outcome": {"outcome": "cancelled"}}
        raise zocrates_client.RpcError(-32601, f"zocratesd mcp does not handle {method}", None)


def standalone_pair() -> tuple[socket.socket, socket.socket]:
    """(the core's end, the face's end) of a connected pair of Unix sockets, both non-inheritable."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for s in (a, b):
        os.set_inheritable(s.fileno(), False)
    return a, b
