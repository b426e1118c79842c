"""What serves the HTTP shim's port, built once its listener is bound (shim/server.py): the
routes, the guard in front of them, and the uvicorn server around both, embedded in the daemon's
event loop. The process imports this module in the background (process/startup.py, `SHIM`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio.abc
import uvicorn

from zocratesd.config import HttpConfig
from zocratesd.shim import writes
from zocratesd.shim.codes import OneTimeCodes
from zocratesd.shim.guard import Guard
from zocratesd.shim.openpage import OpenPages
from zocratesd.shim.protocol import ConnectionTable, LimitedH11Protocol, protocol_class
from zocratesd.shim.routes import build_app
from zocratesd.shim.webapp import WebApp

if TYPE_CHECKING:
    from zocratesd.core.daemon import Daemon


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGTERM/SIGINT and stops us."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True)
class Serving:
    server: uvicorn.Server
    connections: ConnectionTable
    pages: OpenPages
    protocol_class: type[LimitedH11Protocol]


def build(
    daemon: Daemon, config: HttpConfig, *, token: str, plugin_token: str, port: Callable[[], int],
    turn_group: Callable[[], anyio.abc.TaskGroup], opened: Callable[[], None], closed: Callable[[], None],
    grace_s: float, cap: int, keep_alive_s: int,
) -> Serving:
    connections = ConnectionTable(cap, head_timeout_s=config.head_timeout_s, idle_timeout_s=keep_alive_s)
    codes = OneTimeCodes()
    pages = OpenPages(codes.ttl_s)
    app = build_app(daemon, turn_group, opened=opened, closed=closed, web=WebApp(config.allowed_origins),
                    token=token, plugin_token=plugin_token, codes=codes, pages=pages, more_routes=writes.ROUTES)
    protocol = protocol_class(connections)
    guarded = Guard(app, port=port, token=token, allowed_origins=config.allowed_origins,
                    opened=opened, closed=closed, trusted=lambda scope: connections.trust(scope.get("client")),
                    body_timeout_s=config.body_timeout_s)
    server = EmbeddedServer(
        uvicorn.Config(
            guarded,
            http=protocol,
            ws="none",
            lifespan="off",
            log_config=None,  # uvicorn's loggers propagate to ours (stderr and the log file)
            access_log=False,
            server_header=False,
            proxy_headers=False,
            timeout_keep_alive=keep_alive_s,
            timeout_graceful_shutdown=math.ceil(grace_s),
        )
    )
    return Serving(server, connections, pages, protocol)
