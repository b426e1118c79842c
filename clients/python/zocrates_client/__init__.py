"""zocrates_client: the Python client of zocratesd, on asyncio or trio, and the `zocrates` CLI.

    import zocrates_client

    async with zocrates_client.connect(start_daemon=True) as client:
        for info in await client.list_sessions():
            print(info.session_id, info.title)

        session_id = await client.new_session()
        async with client.stream_prompt(session_id, "What does HyDE do?") as turn:
            async for item in turn:
                if item.kind == "agent_message_chunk":
                    print(item.update["content"]["text"], end="")
        if turn.result.pending_hitl:  # a research checkpoint nobody answered (see `on_request`)
            hitl = turn.result.pending_hitl
            await client.resume(session_id, hitl["invocation_id"], hitl["interrupt_id"], "synthesize")

`prompt`, `resume`, `cancel`, `rewind`, `rename` are the turn and session methods; `stream_prompt`
and `stream_resume` give a turn's updates as they arrive (`Turn`); a research checkpoint reaches
the `on_request` handler of `connect()` as `session/request_permission` (`Checkpoint` parses it and
builds the answer). `zocrates_client.cli` is the `zocrates` command, built on these.

Importing it is light: the standard library, anyio, the wire package both ends share
(`zocrates_wire`: framing, JSON-RPC messages, the sans-IO connection, the errors), and, to find
and start the daemon, its stdlib-only `zocratesd.locations` and `zocratesd.rpc.pump` - never ADK,
pydantic or the daemon core. And lazy (PEP 562): each name is imported on first use, so
`zocrates_client.blocking` (a synchronous client, no anyio: the cold `zocratesd mcp` face's) does
not pay for the async client's imports. The exceptions are in `zocrates_client.errors` too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zocrates_client._types import (
        Checkpoint,
        CheckpointAction,
        InitializeResult,
        Mode,
        OnlineQuestion,
        PendingHitl,
        PromptResult,
        RequestHandler,
        RestoredPrompt,
        RewindResult,
        SessionInfo,
        SessionSummary,
        SessionUpdate,
        UiMessage,
        UiSession,
        Update,
        last_progress_line,
    )
    from zocrates_client.client import DEFAULT_UPDATES_BUFFER, Client, Turn, Updates, connect
    from zocrates_client.errors import (
        ConnectError,
        ConnectionLost,
        DaemonNotRunning,
        MessageTooLarge,
        RpcError,
        UpdatesOverflow,
        ZocratesClientError,
    )
    from zocrates_wire.jsonrpc import (
        INTERNAL_ERROR,
        INVALID_PARAMS,
        METHOD_NOT_FOUND,
        REQUEST_CANCELLED,
        RESOURCE_NOT_FOUND,
        SESSION_BUSY,
    )
    from zocratesd import __version__

# Where each public name lives (imported on first use).
_WHERE: dict[str, str] = {
    'ConnectError': 'zocrates_client.errors',
    'ConnectionLost': 'zocrates_client.errors',
    'DaemonNotRunning': 'zocrates_client.errors',
    'MessageTooLarge': 'zocrates_client.errors',
    'RpcError': 'zocrates_client.errors',
    'UpdatesOverflow': 'zocrates_client.errors',
    'ZocratesClientError': 'zocrates_client.errors',
    'Checkpoint': 'zocrates_client._types',
    'CheckpointAction': 'zocrates_client._types',
    'InitializeResult': 'zocrates_client._types',
    'Mode': 'zocrates_client._types',
    'OnlineQuestion': 'zocrates_client._types',
    'PendingHitl': 'zocrates_client._types',
    'PromptResult': 'zocrates_client._types',
    'RequestHandler': 'zocrates_client._types',
    'RestoredPrompt': 'zocrates_client._types',
    'RewindResult': 'zocrates_client._types',
    'SessionInfo': 'zocrates_client._types',
    'SessionSummary': 'zocrates_client._types',
    'SessionUpdate': 'zocrates_client._types',
    'UiMessage': 'zocrates_client._types',
    'UiSession': 'zocrates_client._types',
    'Update': 'zocrates_client._types',
    'last_progress_line': 'zocrates_client._types',
    'DEFAULT_UPDATES_BUFFER': 'zocrates_client.client',
    'Client': 'zocrates_client.client',
    'Turn': 'zocrates_client.client',
    'Updates': 'zocrates_client.client',
    'connect': 'zocrates_client.client',
    '__version__': 'zocratesd',
    'INTERNAL_ERROR': 'zocrates_wire.jsonrpc',
    'INVALID_PARAMS': 'zocrates_wire.jsonrpc',
    'METHOD_NOT_FOUND': 'zocrates_wire.jsonrpc',
    'REQUEST_CANCELLED': 'zocrates_wire.jsonrpc',
    'RESOURCE_NOT_FOUND': 'zocrates_wire.jsonrpc',
    'SESSION_BUSY': 'zocrates_wire.jsonrpc',
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'zocrates_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DEFAULT_UPDATES_BUFFER",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "METHOD_NOT_FOUND",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "SESSION_BUSY",
    "Checkpoint",
    "CheckpointAction",
    "Client",
    "ConnectError",
    "ConnectionLost",
    "DaemonNotRunning",
    "InitializeResult",
    "MessageTooLarge",
    "Mode",
    "OnlineQuestion",
    "PendingHitl",
    "PromptResult",
    "RequestHandler",
    "RestoredPrompt",
    "RewindResult",
    "RpcError",
    "SessionInfo",
    "SessionSummary",
    "SessionUpdate",
    "Turn",
    "UiMessage",
    "UiSession",
    "Update",
    "Updates",
    "UpdatesOverflow",
    "ZocratesClientError",
    "__version__",
    "connect",
    "last_progress_line",
]
