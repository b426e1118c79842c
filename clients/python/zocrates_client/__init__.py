"""zocrates_client: the Python client of zocratesd, on asyncio or trio, and the `zocrates` CLI.

    import zocrates_client

    async with zocrates_client.connect(start_daemon=True) as client:
        for info in await client.list_sessions():
            print(info.session_id, info.title)

Importing it is light: the standard library, anyio, and the daemon's sans-IO wire code
(`zocratesd.locations`, `zocratesd.rpc.framing`, `zocratesd.rpc.jsonrpc`, `zocratesd.rpc.connection`,
`zocratesd.rpc.pump`) - never ADK, pydantic or the daemon core.
"""

from zocrates_client._errors import (
    ConnectError,
    ConnectionLost,
    DaemonNotRunning,
    MessageTooLarge,
    RpcError,
    UpdatesOverflow,
    ZocratesClientError,
)
from zocrates_client._types import (
    InitializeResult,
    PendingHitl,
    RequestHandler,
    SessionInfo,
    SessionSummary,
    SessionUpdate,
    UiMessage,
    UiSession,
    Update,
)
from zocrates_client.client import DEFAULT_UPDATES_BUFFER, Client, Updates, connect
from zocratesd import __version__
from zocratesd.rpc.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    SESSION_BUSY,
)

__all__ = [
    "DEFAULT_UPDATES_BUFFER",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "METHOD_NOT_FOUND",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "SESSION_BUSY",
    "Client",
    "ConnectError",
    "ConnectionLost",
    "DaemonNotRunning",
    "InitializeResult",
    "MessageTooLarge",
    "PendingHitl",
    "RequestHandler",
    "RpcError",
    "SessionInfo",
    "SessionSummary",
    "SessionUpdate",
    "UiMessage",
    "UiSession",
    "Update",
    "Updates",
    "UpdatesOverflow",
    "ZocratesClientError",
    "__version__",
    "connect",
]
