"""`zocratesd mcp`: the library and the assistant for MCP clients (Claude Desktop, Claude Code,
Cursor, ...), over stdio, with the official `mcp` SDK.

A face like `zocratesd stdio`: a thin process between an MCP client and the daemon. It reaches the
daemon of the Zotero data dir through its socket (starting one when none runs, as `zocratesd
stdio` does), or, with `--standalone`, a core it runs in this very process over a socket pair
(process/boot.py `serve_face_standalone`). Every tool is a JSON-RPC call (server.py); MCP sessions
are not Zocrates sessions: an `ask` names its Zocrates session in its result. Read-only towards
Zotero, like every face. stdout carries MCP frames only: the SDK's stdio transport points fd 1 at
stderr while it serves, and logs go to stderr.
"""

from __future__ import annotations

import importlib
import logging
import socket
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from zocratesd.mcp.link import DaemonLink, standalone_pair

__all__ = ["DaemonLink", "run", "serve_stdio", "standalone_pair"]


def _import_sdk() -> tuple[Any, Any]:
    """The server module (and with it the SDK) and the SDK's stdio transport."""
    return importlib.import_module("zocratesd.mcp.server"), importlib.import_module("mcp.server.stdio")


async def serve_stdio(link: DaemonLink) -> int:
    """Serve MCP on stdin/stdout until the client closes stdin.

    The link connects first, and the SDK is imported in a worker thread meanwhile: importing it
    (its protocol types are pydantic models of two protocol eras) takes longer than reaching a
    running daemon, or most of a cold daemon's start, so the two overlap and the first tool call
    finds the connection made (bench/bench_mcp.py measures it)."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)
        link.want()
        server_module, stdio = await anyio.to_thread.run_sync(_import_sdk)
        server = server_module.ZocratesMcp(link).server()
        async with stdio.stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()
    return 0


def _logging(level: str) -> None:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("zocratesd mcp: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def run(data_dir: Path, *, serve_args: list[str] | None = None, log_level: str = "WARNING") -> int:
    """`zocratesd mcp` with a daemon (the running one, or one it starts)."""
    _logging(log_level)
    return anyio.run(serve_stdio, DaemonLink(data_dir, serve_args=serve_args))


async def serve_standalone_face(data_dir: Path, sock: socket.socket) -> int:
    """The face of `zocratesd mcp --standalone`: MCP on stdio, the core at the other end of `sock`."""
    return await serve_stdio(DaemonLink(data_dir, standalone=sock))
