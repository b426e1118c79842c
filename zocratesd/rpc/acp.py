"""ACP v1 methods and the `_zocrates/*` extensions, as adapters over the core `Daemon`.

Each handler validates its params with the pydantic model of `rpc/models.py`, calls the core, and
shapes the result. Core errors become JSON-RPC errors here and only here:

| core error      | code   | message            |
|-----------------|--------|--------------------|
| NotFound        | -32002 | Resource not found |
| SessionBusy     | 1001   | Session busy       |
| InvalidInput    | -32602 | Invalid params     |
| ModelError      | 1003   | Model error        |
| CheckpointNotPending | 1004 | Checkpoint not pending |

Every error's `data` has a stable `kind` string (protocol/README.md, "Errors").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from jsonrpcserver import JsonRpcError, Success
from pydantic import BaseModel, ValidationError

from zocratesd.core.daemon import Daemon
from zocratesd.errors import CheckpointNotPending, InvalidInput, NotFound, SessionBusy, ZocratesError
from zocratesd.rpc import jsonrpc, models
from zocratesd.rpc.peer import MethodTable, Peer, PeerClosed, RemoteError
from zocratesd.locations import PROTOCOL_VERSION
from zocratesd.store.reader import gc_paused
from zocratesd.core.context import PromptContext
from zocratesd.updates import Update, history_updates
from zocratesd.store.ui import pending_checkpoint
from zocratesd.rpc.updates import checkpoint_call_id, session_info, session_info_update, to_acp

log = logging.getLogger(__name__)

def _invalid_params(exc: ValidationError) -> JsonRpcError:
    errors = [
        {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
    ]
    return JsonRpcError(jsonrpc.INVALID_PARAMS, "Invalid params", {"kind": "invalid_params", "errors": errors})


def to_rpc_error(exc: ZocratesError) -> JsonRpcError:
    data = {"kind": exc.kind, "message": exc.message, **exc.data}
    if isinstance(exc, NotFound):
        return JsonRpcError(jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", data)
    if isinstance(exc, SessionBusy):
        return JsonRpcError(jsonrpc.SESSION_BUSY, "Session busy", data)
    if isinstance(exc, InvalidInput):
        return JsonRpcError(jsonrpc.INVALID_PARAMS, "Invalid params", data)
    if exc.kind == "model_error":
        return JsonRpcError(jsonrpc.MODEL_ERROR, "Model error", data)
    if isinstance(exc, CheckpointNotPending):
        return JsonRpcError(jsonrpc.CHECKPOINT_NOT_PENDING, "Checkpoint not pending", data)
    return JsonRpcError(jsonrpc.INTERNAL_ERROR, "Internal error", data)


Handler = Callable[..., Awaitable[Any]]

# A connection that has not taken a session/update off its socket for this long is cut off (it can
# resync with session/load): one stuck editor must not stall a turn that others are watching.
SLOW_CLIENT_TIMEOUT_S = 30.0
ZOTERO_ITEM_URI = re.compile(r"^zotero://select/(?:library|groups/\d+)/items/([A-Z0-9]{8})$")


def attach(peer: Peer, daemon: Daemon, session_id: str) -> None:
    """Send this session's updates to this connection from now on (once per session)."""
    watching: dict[str, Callable[[], None]] = peer.state.setdefault("watching", {})
    if session_id in watching:
        return

    async def listener(update: Update) -> None:
        if update["kind"] == "message" and update.get("role") == "user" and session_id in peer.state.get("prompting", ()):
            return  # the prompting editor already shows its own message
        acp = to_acp(update)
        if acp is None or peer.closed:
            return
        with anyio.move_on_after(SLOW_CLIENT_TIMEOUT_S) as scope:
            await peer.notify("session/update", {"sessionId": session_id, "update": acp})
        if scope.cancelled_caught:
            log.warning("%s: not reading its session/update for %.0f s; disconnecting it", peer.name, SLOW_CLIENT_TIMEOUT_S)
            peer.abort()

    watching[session_id] = daemon.watchers.watch(session_id, listener)
    if len(watching) == 1:
        peer.on_close.append(lambda: [unwatch() for unwatch in watching.values()])


# ACP permission options for a research checkpoint: "extend" searches further, "synthesize"
# answers now. A client may add `_meta.zocrates.guidance` (text) to its answer.
EXTEND_OPTION = "extend"
SYNTHESIZE_OPTION = "synthesize"
PERMISSION_OPTIONS = [
    {"optionId": EXTEND_OPTION, "name": "Search further", "kind": "allow_once"},
    {"optionId": SYNTHESIZE_OPTION, "name": "Answer with what was found", "kind": "reject_once"},
]
# How long a turn waits on the editor's answer to a checkpoint. The session is held meanwhile
# (other clients get "busy"), so a dialog left open does not lock it for good: after this the
# checkpoint stays pending, and any client can resume it.
CHECKPOINT_ANSWER_TIMEOUT_S = 600.0


async def ask_permission(peer: Peer, session_id: str, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """Put a checkpoint to the prompting editor as `session/request_permission`; its answer as
    `{action, guidance?}`, or None (declined, cancelled, no answer in time, or the request failed)."""
    if peer.closed:
        return None
    params = {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": checkpoint_call_id(checkpoint),
            "title": checkpoint.get("message") or "Research checkpoint",
            "kind": "think",
            "status": "pending",
            "rawInput": checkpoint.get("payload"),
        },
        "options": PERMISSION_OPTIONS,
    }
    with anyio.move_on_after(CHECKPOINT_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request("session/request_permission", params)
        except (RemoteError, PeerClosed) as exc:
            log.info("%s: session/request_permission failed (%s); the checkpoint stays pending", peer.name, exc)
            return None
        outcome = (result or {}).get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            return None
        if outcome.get("optionId") == SYNTHESIZE_OPTION:
            return {"action": "synthesize"}
        if outcome.get("optionId") == EXTEND_OPTION:
            ours = ((result.get("_meta") or {}).get("zocrates") or {}) if isinstance(result.get("_meta"), dict) else {}
            guidance = ours.get("guidance") if isinstance(ours, dict) else None
            return {"action": "extend_budget", **({"guidance": guidance} if isinstance(guidance, str) else {})}
        return None
    log.info("%s: no answer to a checkpoint in %.0f s; it stays pending", peer.name, CHECKPOINT_ANSWER_TIMEOUT_S)
    return None


def prompt_input(blocks: list[dict[str, Any]], meta: dict[str, Any] | None) -> tuple[str, PromptContext]:
    """ACP prompt blocks -> the prompt text and its Zotero context.

    `text` blocks are the question. A `resource_link` to a Zotero item adds it to the selection
    (papers mode, unless `_meta.zocrates.mode` says otherwise); any other link is kept in the text.
    Images, audio and embedded resources are refused: initialize advertises none of them.
    """
    texts: list[str] = []
    linked: list[dict[str, str]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            m = ZOTERO_ITEM_URI.match(block["uri"])
            name = str(block.get("title") or block.get("name") or "")
            if m:
                linked.append({"item_key": m.group(1), "title": name})
            else:
                texts.append(f"[{name or block['uri']}]({block['uri']})")
        else:
            raise InvalidInput(
                f"prompt blocks of type {kind!r} are not supported; send text and resource_link blocks",
                blockType=str(kind)[:40],
            )
    ours = (meta or {}).get("zocrates")
    if ours is not None and not isinstance(ours, dict):
        raise InvalidInput('"_meta.zocrates" must be an object')
    wire = dict(ours or {})
    if linked:
        known = {i.get("item_key") for i in wire.get("activeItems") or [] if isinstance(i, dict)}
        wire["activeItems"] = list(wire.get("activeItems") or []) + [i for i in linked if i["item_key"] not in known]
        wire.setdefault("mode", "papers")
    return "\n".join(texts), PromptContext.from_wire(wire)


def adapter(params_model: type[BaseModel]) -> Callable[[Callable[..., Awaitable[Any]]], Handler]:
    """Wrap `fn(peer, params)` as a jsonrpcserver method `(peer, /, **raw)`: validate, map errors."""

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Handler:
        async def method(peer: Peer, /, **raw: Any) -> Any:
            try:
                params = params_model.model_validate(raw)
            except ValidationError as exc:
                raise _invalid_params(exc) from None
            try:
                return Success(await fn(peer, params))
            except ZocratesError as exc:
                raise to_rpc_error(exc) from None

        # Not functools.wraps: it sets __wrapped__, and jsonrpcserver's arity check would then
        # bind the params against fn's signature instead of this one's **raw.
        method.__name__, method.__doc__ = fn.__name__, fn.__doc__
        return method

    return wrap


def build_methods(daemon: Daemon) -> MethodTable:
    """The method table of one daemon; every face that speaks JSON-RPC serves this table."""
    # Sessions made without a cwd (by the Zotero plugin) are listed with the Zotero data dir: the
    # place they really belong to.
    default_cwd = str(daemon.data_dir)

    @adapter(models.InitializeParams)
    async def initialize(peer: Peer, p: models.InitializeParams) -> dict[str, Any]:
        peer.state["client_capabilities"] = p.client_capabilities or {}
        peer.state["client_info"] = p.client_info or {}
        return {
            # We speak v1 only; a client asking for another version gets ours and decides.
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {"list": {}, "delete": {}},
                "_meta": {
                    "zocrates": {
                        "version": daemon.version,
                        "protocolVersion": PROTOCOL_VERSION,
                        "extensions": extensions,
                        "maxFrameBytes": daemon.config.rpc.max_frame_bytes,
                    }
                },
            },
            "agentInfo": {"name": "zocratesd", "title": "Zocrates", "version": daemon.version},
            "authMethods": [],
        }

    @adapter(models.PromptParams)
    async def session_prompt(peer: Peer, p: models.PromptParams) -> dict[str, Any]:
        text, context = prompt_input(p.prompt, p.meta)
        attach(peer, daemon, p.session_id)
        prompting: set[str] = peer.state.setdefault("prompting", set())
        prompting.add(p.session_id)
        asked: list[bool] = []

        async def ask(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
            asked.append(True)
            return await ask_permission(peer, p.session_id, checkpoint)

        try:
            result = await daemon.prompt(p.session_id, text, context, ask=ask)
        finally:
            prompting.discard(p.session_id)
        # A checkpoint the editor declined (or could not show) ends the turn as cancelled, with
        # the checkpoint still pending for any client to resume.
        stop = "cancelled" if result.pending_hitl is not None and asked else result.stop_reason
        meta = {"invocationId": result.invocation_id, "pendingHitl": result.pending_hitl}
        return {"stopReason": stop, "_meta": {"zocrates": meta}}

    @adapter(models.ChatResumeParams)
    async def zocrates_chat_resume(peer: Peer, p: models.ChatResumeParams) -> dict[str, Any]:
        attach(peer, daemon, p.session_id)
        result = await daemon.resume(
            p.session_id, p.invocation_id, p.interrupt_id, p.response.model_dump(exclude_none=True)
        )
        return {"stopReason": result.stop_reason, "invocationId": result.invocation_id, "pendingHitl": result.pending_hitl}

    @adapter(models.CancelParams)
    async def session_cancel(peer: Peer, p: models.CancelParams) -> dict[str, Any]:
        daemon.cancel(p.session_id)
        return {}  # dropped when sent as a notification (as ACP does); `{}` when sent as a request

    @adapter(models.RewindParams)
    async def zocrates_session_rewind(peer: Peer, p: models.RewindParams) -> dict[str, Any]:
        return await daemon.rewind(p.session_id, p.invocation_id)

    @adapter(models.NoParams)
    async def zocrates_storage_stats(peer: Peer, p: models.NoParams) -> Any:
        return await daemon.storage_stats()

    @adapter(models.NoParams)
    async def zocrates_storage_maintenance(peer: Peer, p: models.NoParams) -> Any:
        return await daemon.run_maintenance()

    @adapter(models.NewSessionParams)
    async def session_new(peer: Peer, p: models.NewSessionParams) -> dict[str, Any]:
        ours = (p.meta or {}).get("zocrates")
        if ours is not None and not isinstance(ours, dict):
            raise InvalidInput('"_meta.zocrates" must be an object')
        row = await daemon.create_session(title=(ours or {}).get("title"), cwd=p.cwd or None)
        attach(peer, daemon, row.id)
        return {"sessionId": row.id}

    @adapter(models.ListSessionsParams)
    async def session_list(peer: Peer, p: models.ListSessionsParams) -> dict[str, Any]:
        if p.cursor:
            raise InvalidInput("unknown cursor: session/list answers in one page", cursor=p.cursor)
        rows = await daemon.list_sessions()
        return {"sessions": [session_info(r, default_cwd) for r in rows]}

    @adapter(models.LoadSessionParams)
    async def session_load(peer: Peer, p: models.LoadSessionParams) -> dict[str, Any]:
        live = await daemon.live_session(p.session_id)
        attach(peer, daemon, p.session_id)
        with gc_paused():
            updates = [*(a for a in map(to_acp, history_updates(live.live)) if a)]
            pending = pending_checkpoint(live.live)
            if pending is not None:  # show it, so the editor knows the last turn waits on the user
                updates.append(to_acp({"kind": "checkpoint", **pending}))
            updates.append(session_info_update(live.title))
        await peer.send_messages(
            jsonrpc.notification("session/update", {"sessionId": p.session_id, "update": u}) for u in updates
        )
        return {}

    @adapter(models.DeleteSessionParams)
    async def session_delete(peer: Peer, p: models.DeleteSessionParams) -> dict[str, Any]:
        await daemon.delete_session(p.session_id)
        return {}

    @adapter(models.GetSessionParams)
    async def zocrates_session_get(peer: Peer, p: models.GetSessionParams) -> dict[str, Any]:
        return await daemon.get_session(p.session_id)

    @adapter(models.RenameSessionParams)
    async def zocrates_session_rename(peer: Peer, p: models.RenameSessionParams) -> dict[str, Any]:
        row = await daemon.rename_session(p.session_id, p.title)
        return {"id": row.id, "title": row.title, "created_at": row.created_at, "updated_at": row.updated_at}

    @adapter(models.LibraryStatusParams)
    async def zocrates_library_status(peer: Peer, p: models.LibraryStatusParams) -> dict[str, Any]:
        return daemon.library_status(refresh=p.refresh)

    table: dict[str, Handler] = {
        "initialize": initialize,
        "session/new": session_new,
        "session/list": session_list,
        "session/load": session_load,
        "session/delete": session_delete,
        "_zocrates/session/get": zocrates_session_get,
        "_zocrates/session/rename": zocrates_session_rename,
        "session/prompt": session_prompt,
        "session/cancel": session_cancel,
        "_zocrates/session/rewind": zocrates_session_rewind,
        "_zocrates/chat/resume": zocrates_chat_resume,
        "_zocrates/storage/stats": zocrates_storage_stats,
        "_zocrates/storage/maintenance": zocrates_storage_maintenance,
        "_zocrates/library/status": zocrates_library_status,
    }
    extensions = sorted(name for name in table if name.startswith("_zocrates/"))
    return MethodTable(table, notifications=("session/cancel",))
