"""`zocratesd mcp`: the library and the assistant for MCP clients (Claude Desktop, Claude Code,
Cursor, ...), over stdio, with the official `mcp` SDK.

A face like `zocratesd stdio`: a thin process between an MCP client and the daemon. It reaches the
daemon of the Zotero data dir through its socket (starting one when none runs, as `zocratesd
stdio` does), or, with `--standalone`, a core it runs in this very process over a socket pair
(process/boot.py `serve_face_standalone`). The SDK's low-level server (server.py) answers every
request; each tool is a JSON-RPC call to the daemon (tools.py, calls.py, link.py). MCP sessions
are not Zocrates sessions: an `ask` names its Zocrates session in its result. Read-only towards
Zotero, like every face. stdout carries MCP frames only (stdio.py); logs go to stderr.

Only `zocratesd mcp` imports this package (cli.py), so it imports the SDK at once.
"""

from __future__ import annotations

import functools
import gc
import logging
import socket
from pathlib import Path
from typing import Final

import anyio

from zocratesd.mcp import stdio
from zocratesd.mcp.link import DaemonLink, standalone_pair
from zocratesd.mcp.server import ZocratesMcp

__all__ = ["DaemonLink", "run", "serve_standalone_face", "standalone_pair"]

# The client's `initialize` is answered once the daemon's connection is up (the client's first
# tool call then waits for nothing but the call), or at the latest after this long: a daemon this
# process starts may take seconds on a loaded machine, and a client gives its handshake only so
# long (the MCP Inspector's CLI, 10 s); past it, the first tool call waits for the rest instead.
HANDSHAKE_WAITS_FOR_DAEMON_S: Final = 5.0


def _logging(level: str) -> None:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("zocratesd mcp: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def run(data_dir: Path, *, serve_args: list[str] | None = None, log_level: str = "WARNING") -> int:
    """`zocratesd mcp` with a daemon: the running one, or one it starts."""
    _logging(log_level)
    # What is loaded now (the SDK's protocol models, most of the heap) lives as long as the
    # process: frozen, the collections that serving triggers never scan it again.
    gc.freeze()
    return int(anyio.run(_serve, DaemonLink(data_dir, serve_args=serve_args)))


async def serve_standalone_face(data_dir: Path, sock: socket.socket) -> int:
    """The face of `zocratesd mcp --standalone`: MCP on stdio, the core at the other end of `sock`."""
    return await _serve(DaemonLink(data_dir, standalone=sock))


async def _serve(link: DaemonLink) -> int:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    server = ZocratesMcp(link).server()
    with stdio.claim_stdio() as (wire_in, wire_out):
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.run)
            link.want()  # connect (or start the daemon) now, as the client's handshake comes in
            ready = functools.partial(link.settled, HANDSHAKE_WAITS_FOR_DAEMON_S)
            await stdio.serve(server, wire_in, wire_out, before_initialize=ready)
            tg.cancel_scope.cancel()
    return 0
