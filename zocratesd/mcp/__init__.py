"""`zocratesd mcp`: the library and the assistant for MCP clients (Claude Desktop, Claude Code,
Cursor, ...), over stdio, with the official `mcp` SDK.

A face like `zocratesd stdio`: a thin process between an MCP client and the daemon. It reaches the
daemon of the Zotero data dir through its socket (starting one when none runs, as `zocratesd
stdio` does), or, with `--standalone`, a core it runs in this very process over a socket pair
(process/boot.py `serve_face_standalone`). Every tool is a JSON-RPC call (tools.py, server.py); MCP
sessions are not Zocrates sessions: an `ask` names its Zocrates session in its result. Read-only
towards Zotero, like every face.

Three stages share one connection to the client, in order, each handing the next what it kept:
the cold face (cold.py: a selectors loop and a blocking client, answering the handshake and the
quick tools before asyncio is even imported), the anyio face (face.py: the same early answers,
while the SDK finishes loading), and the SDK's server (server.py). The SDK is imported in a thread
from the start (loader.py). stdout carries MCP frames only (stdio.py); logs go to stderr.

This module is the entry and stays light: what it names is imported on first use.
"""

from __future__ import annotations

import importlib
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from zocratesd.mcp.face import serve_stdio
    from zocratesd.mcp.link import DaemonLink, standalone_pair
    from zocratesd.mcp.loader import HOLD_SDK_ENV

__all__ = ["HOLD_SDK_ENV", "DaemonLink", "run", "serve_stdio", "serve_standalone_face", "standalone_pair"]

_WHERE = {
    "serve_stdio": "zocratesd.mcp.face", "DaemonLink": "zocratesd.mcp.link", "standalone_pair": "zocratesd.mcp.link",
    "HOLD_SDK_ENV": "zocratesd.mcp.loader",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'zocratesd.mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _import_sdk() -> ModuleType:
    """The server module (and with it the SDK): what `zocratesd mcp` imports before the SDK serves."""
    from zocratesd.mcp.loader import import_sdk

    return import_sdk()


def _logging(level: str) -> None:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("zocratesd mcp: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def run(data_dir: Path, *, serve_args: list[str] | None = None, log_level: str = "WARNING") -> int:
    """`zocratesd mcp` with a daemon (the running one, or one it starts): the cold face while a
    live daemon answers and the SDK loads, then the anyio face (see the module docstring)."""
    import gc

    from zocratesd.mcp import cold
    from zocratesd.mcp.loader import SdkLoader
    from zocratesd.mcp.stdio import claim_stdio

    _logging(log_level)
    gc_off = not gc.isenabled()
    loader = SdkLoader()
    client = cold.connect(data_dir)
    if client is None:
        # No live daemon: the anyio face starts one, serving early meanwhile. It starts the
        # loader too, once the daemon's start is under way: a loader started now would share the
        # GIL with anyio's import and put the daemon's start (the long pole, ~1 s) off by as much.
        return _serve_anyio(data_dir, serve_args, loader=loader, gc_off=gc_off)
    loader.start()
    with claim_stdio() as wire:
        face = cold.ColdFace(client, *wire, loader)
        stop = face.serve()
        client.close()
        if stop is cold.Stop.GONE or (stop is cold.Stop.EOF and not face.session.has_queued):
            return 0
        return _serve_anyio(data_dir, serve_args, loader=loader, gc_off=gc_off, session=face.session,
                            decoder=face.decoder, wire=wire)


def _serve_anyio(data_dir: Path, serve_args: list[str] | None, **handed: Any) -> int:
    import functools

    import anyio

    from zocratesd.mcp.link import DaemonLink

    link = DaemonLink(data_dir, serve_args=serve_args)
    # Looked up here, not imported: tests/unit/test_import_rules.py puts a probe in its place.
    serve = globals().get("serve_stdio") or __getattr__("serve_stdio")
    return int(anyio.run(functools.partial(serve, link, **handed)))


async def serve_standalone_face(data_dir: Path, sock: socket.socket) -> int:
    """The face of `zocratesd mcp --standalone`: MCP on stdio, the core at the other end of `sock`
    (the anyio face from the start: the core's own start dwarfs the imports)."""
    from zocratesd.mcp.face import serve_stdio
    from zocratesd.mcp.link import DaemonLink

    return await serve_stdio(DaemonLink(data_dir, standalone=sock))

