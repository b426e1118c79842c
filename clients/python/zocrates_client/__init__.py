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
    Checkpoint,
    CheckpointAction,
    InitializeResult,
    Mode,
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
    "Checkpoint",
    "CheckpointAction",
    "Client",
    "ConnectError",
    "ConnectionLost",
    "DaemonNotRunning",
    "InitializeResult",
    "MessageTooLarge",
    "Mode",
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
