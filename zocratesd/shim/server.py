"""The HTTP face's listener: the port, the uvicorn server inside the daemon's loop, its shutdown."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import uvicorn

from zocratesd.config import HttpConfig
from zocratesd.core.daemon import Daemon
from zocratesd.shim.guard import Guard
from zocratesd.shim.routes import build_app

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# Two Zotero profiles get two stable ports: base_port + sha256(data dir) mod this span.
PORT_OFFSET_SPAN = 1000
# Ports tried upward from the preferred one before giving up (another program may hold a few).
PORT_PROBE_LIMIT = 50
LISTEN_BACKLOG = 128
# A client idle this long on a keep-alive connection is closed; the sidebar reconnects freely.
KEEP_ALIVE_S = 30


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


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGTERM/SIGINT and stops us."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpFace:
    """The shim of one daemon: bind first (so daemon.json can name the port), then `run()` in the
    daemon's task group until `stop()`."""

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
        self._sock: socket.socket | None = None
        self._turns: anyio.abc.TaskGroup | None = None
        self.port = 0
        app = build_app(daemon, self._turn_group, opened=opened, closed=closed)
        guarded = Guard(app, port=lambda: self.port, token=self.token, allowed_origins=config.allowed_origins,
                        opened=opened, closed=closed)
        self._server = _EmbeddedServer(
            uvicorn.Config(
                guarded,
                lifespan="off",
                log_config=None,  # uvicorn's loggers propagate to ours (stderr and the log file)
                access_log=False,
                server_header=False,
                proxy_headers=False,
                timeout_keep_alive=KEEP_ALIVE_S,
                timeout_graceful_shutdown=grace_s,
            )
        )

    def _turn_group(self) -> anyio.abc.TaskGroup:
        assert self._turns is not None, "the HTTP face is not running"
        return self._turns

    @property
    def info(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def bind(self, data_dir: Path) -> None:
        self._sock = bind_loopback(self.config, data_dir)
        self.port = self._sock.getsockname()[1]

    async def run(self) -> None:
        """Serve until `stop()`; then wait for turns still running (the daemon's drain bounds it)."""
        assert self._sock is not None, "bind() first"
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # no per-start chatter
        try:
            async with anyio.create_task_group() as tg:
                self._turns = tg
                await self._server.serve(sockets=[self._sock])
        finally:
            self._sock.close()

    def stop(self) -> None:
        """Stop accepting; requests in flight (an SSE stream: its turn) may finish."""
        self._server.should_exit = True
