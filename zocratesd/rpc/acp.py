"""ACP v1 methods and the `_zocrates/*` extensions, as adapters over the core `Daemon`.

Each handler validates its params with the pydantic model of `rpc/models.py`, calls the core, and
shapes the result. Core errors become JSON-RPC errors in `adapter`, by the one table of this face
(`rpc/errors.py`); every error's `data` has a stable `kind` string (protocol/README.md, "Errors").
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from zocrates_wire import jsonrpc
from zocrates_wire.errors import RpcError as JsonRpcError
from zocratesd.core import commands
from zocratesd.core.context import PromptContext
from zocratesd.core.daemon import Daemon
from zocratesd.core.watchers import Subscription
from zocratesd.errors import InvalidInput, ZocratesError
from zocratesd.limits import ITEM_URI_PATTERN, MAX_GUIDANCE_CHARS, whole
from zocratesd.logtext import escape_for_log
from zocratesd.rpc import early, models
from zocratesd.rpc.early import CLIENT_CAPABILITIES
from zocratesd.rpc.errors import to_rpc_error
from zocratesd.rpc.peer import MethodTable, Peer, PeerClosed, RemoteError
from zocratesd.rpc.updates import checkpoint_call_id, config_options, session_info, to_acp
from zocratesd.updates import ConfigOption, ConfigOptions, MessageChunk

log = logging.getLogger(__name__)

def _invalid_params(exc: ValidationError) -> JsonRpcError:
    errors = [
        {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
    ]
    code = jsonrpc.ERROR_CODES[jsonrpc.INVALID_PARAMS]
    return JsonRpcError(code.code, code.message, {"kind": code.kind, "errors": errors})


Handler = Callable[..., Awaitable[Any]]

# A connection that has not taken a session/update off its socket for this long is cut off (it can
# resync with session/load): one stuck editor must not hold memory for a turn others are watching.
SLOW_CLIENT_TIMEOUT_S = 30.0
ZOTERO_ITEM_URI = whole(ITEM_URI_PATTERN)

# `peer.state` key: this connection's name as the origin of the setting changes it makes (it
# hears those in its answer, not again). What the client said at `initialize`: rpc/early.py.
ORIGIN = "origin"
_origins = itertools.count(1)


def _capability(peer: Peer, *path: str) -> bool:
    """Whether the client advertised `clientCapabilities.<path>` (an object: ACP's `{}` = yes)."""
    node: Any = peer.state.get(CLIENT_CAPABILITIES) or {}
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return isinstance(node, dict)


def takes_booleans(peer: Peer) -> bool:
    return _capability(peer, "session", "configOptions", "boolean")


def origin_of(peer: Peer) -> str:
    origin: str = peer.state.setdefault(ORIGIN, f"{peer.name}#{next(_origins)}")
    return origin


class SessionFeed:
    """One session's updates to one connection, as `session/update` notifications (`attach`).

    They wait in a subscription of this connection's own (core/watchers.py), so a connection that
    does not read stalls neither the turn nor the session's other watchers. One writer task per
    feed, in the connection's task group, lives from `attach` until the feed is closed (`detach`,
    or the connection ends): it waits for updates and writes what is queued in one go. (A task
    started per burst of updates cost some 8 spawns a turn.) The writer queues a batch on the
    connection (`Peer.queue_messages`) and waits until it is written before it takes the next, so
    updates pile up in the subscription, not in the connection, while the client reads slowly;
    `queued()` tells a request that its own answer goes out after them. Once the feed is closed
    nothing more is written: a write in progress is given up, what is still queued is dropped.
    The connection is aborted, and can resync with `session/load`, when one write takes longer than
    SLOW_CLIENT_TIMEOUT_S or its subscription overflows (MAX_QUEUED_UPDATES waiting): either way,
    it has stopped reading.
    """

    def __init__(self, peer: Peer, daemon: Daemon, session_id: str) -> None:
        self.peer = peer
        self.session_id = session_id
        self._write_scope: anyio.CancelScope | None = None  # the write in progress
        self.updates: Subscription = daemon.watch(session_id, on_ready=self._ready)
        if not peer.start_soon(self._write, name=f"{peer.name}: updates of {session_id}"):
            self.updates.close()  # gone while the request ran: nothing will write or close this feed

    def close(self) -> None:
        """Stop: the writer gives up a write in progress, drops what is queued and ends."""
        self.updates.close()
        if self._write_scope is not None:
            self._write_scope.cancel()

    async def queued(self) -> None:
        """Return once every update published so far is queued on the connection (or dropped
        because the feed closed): whatever is sent after this is written after them, often in the
        same write (a turn's last update and its answer). Bounded: a write that stalls aborts the
        connection, which ends the feed. (The writer calls a batch handled once it is queued.)"""
        await self.updates.drained()

    def _ready(self) -> None:
        # The subscription's hook: updates for an idle writer (it is waiting for them already),
        # or the end by overflow, while the writer may be stuck in a write: abort at once.
        if self.updates.overflowed:
            log.warning("%s: %d session/update waiting unread; disconnecting it", self.peer.name, self.updates.limit)
            self.peer.abort()  # closes this feed too (on_close)

    async def _write(self) -> None:
        try:
            while batch := await self.updates.take():
                if self.updates.closed or self.peer.closed:
                    continue  # dropped: the feed was closed (detached, or the connection is gone)
                prompting = self.peer.state.get("prompting") or {}
                booleans, origin = takes_booleans(self.peer), self.peer.state.get(ORIGIN)
                messages = [
                    jsonrpc.notification(
                        "session/update", {"sessionId": self.session_id, "update": to_acp(u, booleans=booleans)}
                    )
                    for u in batch
                    # The prompting editor already shows its own message; the editor that changed
                    # a setting has the options in its answer.
                    if not (isinstance(u, MessageChunk) and u.role == "user" and prompting.get(self.session_id))
                    and not (isinstance(u, ConfigOptions) and u.origin is not None and u.origin == origin)
                ]
                if not messages:
                    continue
                # One scope: cancelled by close(), or by its deadline (a client that stopped reading).
                with anyio.CancelScope(deadline=anyio.current_time() + SLOW_CLIENT_TIMEOUT_S) as scope:
                    self._write_scope = scope
                    try:
                        ticket = await self.peer.queue_messages(messages)
                    finally:
                        self.updates.handled()  # queued: what is sent after it goes out after it
                    if ticket is not None:
                        await self.peer.written(ticket)
                self._write_scope = None
                if scope.cancelled_caught and not self.updates.closed:
                    log.warning("%s: not reading its session/update for %.0f s; disconnecting it",
                                self.peer.name, SLOW_CLIENT_TIMEOUT_S)
                    self.peer.abort()
        finally:  # closed, cancelled with the connection, or a bug: no one writes the rest
            self._write_scope = None
            self.updates.close()
            while self.updates.take_nowait():
                pass


def detach(peer: Peer, session_id: str) -> bool:
    """Stop sending this session's updates to this connection (`session/close`); False if it
    was not attached."""
    feed = (peer.state.get("feeds") or {}).pop(session_id, None)
    if feed is None:
        return False
    feed.close()
    return True


def attach(peer: Peer, daemon: Daemon, session_id: str) -> SessionFeed:
    """Send this session's updates to this connection from now on (one feed per session)."""
    feeds: dict[str, SessionFeed] | None = peer.state.get("feeds")
    if feeds is None:  # the connection's first: its end closes every feed (their writers end)
        feeds = peer.state["feeds"] = {}

        def close_all() -> None:
            for f in feeds.values():
                f.close()

        peer.on_close.append(close_all)
    feed = feeds.get(session_id)
    if feed is None:
        feed = feeds[session_id] = SessionFeed(peer, daemon, session_id)
    return feed


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
# checkpoint stays pending, and any client can resume it. A client whose input has ended is not
# waited on at all: it cannot answer (Peer.request refuses at once).
CHECKPOINT_ANSWER_TIMEOUT_S = 600.0
# `peer.state` key: the sessions whose turn this connection stopped with `session/cancel` while it
# prompted them. ACP (prompt turn, "Cancellation") has the client answer its pending
# `session/request_permission` with the `cancelled` outcome itself then, so the daemon withdraws
# the question without `$/cancel_request`: redundant there, and a client that does not implement
# that optional notification (the official Python SDK 0.12) logs it as an error.
CANCELLED_BY_CLIENT = "cancelled_by_client"


def elicitation_schema() -> dict[str, Any]:
    """The form of a checkpoint: go on or answer now, and what to search next."""
    return {
        "type": "object",
        "title": "Research checkpoint",
        "properties": {
            "action": {
                "type": "string", "title": "Next step", "default": EXTEND_OPTION,
                "oneOf": [{"const": o["optionId"], "title": o["name"]} for o in PERMISSION_OPTIONS],
            },
            "guidance": {
                "type": "string", "title": "What to search next (optional)", "maxLength": MAX_GUIDANCE_CHARS,
            },
        },
        "required": ["action"],
    }


async def ask_checkpoint(peer: Peer, session_id: str, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """Put a checkpoint to the prompting editor: `elicitation/create` (a form, with room for
    guidance) when it advertised `elicitation.form`, else `session/request_permission`, which every
    client has. Its answer as `{action, guidance?}`, or None (as ask_permission)."""
    if _capability(peer, "elicitation", "form"):
        return await ask_elicitation(peer, session_id, checkpoint)
    return await ask_permission(peer, session_id, checkpoint)


async def ask_elicitation(peer: Peer, session_id: str, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """`elicitation/create` in form mode, scoped to the session and the checkpoint's tool call.
    `accept` with an action answers; `decline`, `cancel` (or no answer in time) leave it pending."""
    params = {
        "sessionId": session_id,
        "toolCallId": checkpoint_call_id(checkpoint["interrupt_id"], checkpoint["invocation_id"]),
        "mode": "form",
        "message": checkpoint.get("message") or "Research checkpoint",
        "requestedSchema": elicitation_schema(),
    }
    with anyio.move_on_after(CHECKPOINT_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request(
                "elicitation/create", params,
                notify_cancel=lambda: session_id not in peer.state.get(CANCELLED_BY_CLIENT, ()),
            )
        except (RemoteError, PeerClosed) as exc:
            log.info("%s: elicitation/create failed (%s); the checkpoint stays pending", peer.name, escape_for_log(exc))
            return None
        if not isinstance(result, dict) or result.get("action") != "accept":
            return None
        content: dict[str, Any] = result["content"] if isinstance(result.get("content"), dict) else {}
        action = content.get("action", EXTEND_OPTION)
        if action == SYNTHESIZE_OPTION:
            return {"action": "synthesize"}
        if action == EXTEND_OPTION:
            guidance = content.get("guidance")
            return {"action": "extend_budget", **({"guidance": guidance} if isinstance(guidance, str) and guidance else {})}
        return None
    log.info("%s: no answer to a checkpoint in %.0f s; it stays pending", peer.name, CHECKPOINT_ANSWER_TIMEOUT_S)
    return None


async def ask_permission(peer: Peer, session_id: str, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """Put a checkpoint to the prompting editor as `session/request_permission`; its answer as
    `{action, guidance?}`, or None (declined, cancelled, no answer in time, the client's input has
    ended, or the request failed)."""
    params = {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": checkpoint_call_id(checkpoint["interrupt_id"], checkpoint["invocation_id"]),
            "title": checkpoint.get("message") or "Research checkpoint",
            "kind": "think",
            "status": "pending",
            "rawInput": checkpoint.get("payload"),
        },
        "options": PERMISSION_OPTIONS,
    }
    with anyio.move_on_after(CHECKPOINT_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request(
                "session/request_permission", params,
                notify_cancel=lambda: session_id not in peer.state.get(CANCELLED_BY_CLIENT, ()),
            )
        except (RemoteError, PeerClosed) as exc:
            # A RemoteError carries the client's own text: escaped (logtext.py).
            log.info("%s: session/request_permission failed (%s); the checkpoint stays pending",
                     peer.name, escape_for_log(exc))
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
    linked_libraries: set[str] = set()  # "user" or "groups/<id>" of the linked items
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            m = ZOTERO_ITEM_URI.match(block["uri"])
            name = str(block.get("title") or block.get("name") or "")
            if m:
                linked.append({"item_key": m.group(2), "title": name})
                linked_libraries.add("user" if m.group(1) == "library" else m.group(1))
            else:
                texts.append(f"[{name or block['uri']}]({block['uri']})")
        else:
            raise InvalidInput(
                f"prompt blocks of type {kind!r} are not supported; send text and resource_link blocks",
                blockType=str(kind)[:40],
            )
    # `_meta.zocrates` (protocol/README.md, session/prompt): mode, activeItems, collection, snippets, library.
    ours = (meta or {}).get("zocrates")
    if ours is None:
        ours = {}
    elif not isinstance(ours, dict):
        raise InvalidInput('"_meta.zocrates" must be an object')
    items = ours.get("activeItems")
    if linked and (items is None or isinstance(items, list)):  # anything else: build() says what is wrong
        known = {i.get("item_key") for i in items or () if isinstance(i, dict)}
        items = [*(items or ()), *(i for i in linked if i["item_key"] not in known)]
    context = PromptContext.build(
        mode=ours.get("mode"), items=items, collection=ours.get("collection"), snippets=ours.get("snippets"),
        # Items linked from one group only (and nothing else selected): search that group, since a
        # key is unique per library only. `_meta.zocrates.library` says otherwise when given.
        library=ours.get("library") or (
            next(iter(linked_libraries)) if len(linked_libraries) == 1 and not ours.get("activeItems")
            and linked_libraries != {"user"} else None
        ),
    )
    return "\n".join(texts), context


def adapter(params_model: type[BaseModel]) -> Callable[[Callable[..., Awaitable[Any]]], Handler]:
    """Wrap `fn(peer, params)` as a method `(peer, /, **raw)` (rpc/dispatch.py): validate, map errors."""

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Handler:
        async def method(peer: Peer, /, **raw: Any) -> Any:
            try:
                params = params_model.model_validate(raw)
            except ValidationError as exc:
                raise _invalid_params(exc) from None
            try:
                return await fn(peer, params)
            except ZocratesError as exc:
                raise to_rpc_error(exc) from None

        # Not functools.wraps: it sets __wrapped__, and the dispatcher's arity check would then
        # bind the params against fn's signature instead of this one's **raw.
        method.__name__, method.__doc__ = fn.__name__, fn.__doc__
        return method

    return wrap


def build_methods(daemon: Daemon) -> MethodTable:
    """The method table of one daemon; every face that speaks JSON-RPC serves this table."""
    # Sessions made without a cwd (by the Zotero plugin) are listed with the Zotero data dir: the
    # place they really belong to.
    default_cwd = str(daemon.data_dir)

    def options_json(peer: Peer, options: tuple[ConfigOption, ...]) -> list[dict[str, Any]]:
        return config_options(options, booleans=takes_booleans(peer))

    def send_commands(peer: Peer, session_id: str) -> None:
        """`available_commands_update` for a session the answer being written names (new, load,
        resume): after it, so the client knows the session by then."""
        update = {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": c.name, "description": c.description, **({"input": {"hint": c.hint}} if c.hint else {})}
                for c in commands.COMMANDS
            ],
        }
        peer.after_answer(lambda: peer.notify("session/update", {"sessionId": session_id, "update": update}))

    @adapter(models.InitializeParams)
    async def initialize(peer: Peer, p: models.InitializeParams) -> dict[str, Any]:
        # Before this table serves, rpc/early.py answers plainly valid handshakes the same way.
        return early.greet(peer, p.client_capabilities or {}, p.client_info or {},
                           daemon.version, daemon.config.rpc.max_frame_bytes)

    async def run_command(peer: Peer, session_id: str, name: str, arg: str) -> dict[str, Any]:
        """A slash command: its reply as an agent message to this connection. A command the core
        refuses (bad argument, busy session) is answered in the message too: the user typed it."""
        outcome: dict[str, Any] = {"name": name, "ok": True}
        await daemon.config_options(session_id)  # no such session: an error, as for any prompt
        try:
            reply = await commands.run(daemon, session_id, name, arg)
        except ZocratesError as exc:
            outcome |= {"ok": False, "errorKind": exc.kind}
            reply = f"/{name}: {exc.message}"
        attach(peer, daemon, session_id)  # as a prompt does: it hears the session from now on
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply},
                 "messageId": f"command-{next(_origins)}"}
        await peer.notify("session/update", {"sessionId": session_id, "update": chunk})
        return {"stopReason": "end_turn", "_meta": {"zocrates": {"command": outcome}}}

    @adapter(models.PromptParams)
    async def session_prompt(peer: Peer, p: models.PromptParams) -> dict[str, Any]:
        text, context = prompt_input(p.prompt, p.meta)
        command = commands.parse(text)
        if command is not None:
            return await run_command(peer, p.session_id, *command)
        feed = attach(peer, daemon, p.session_id)
        # Turns this connection is prompting, by session (a count: a second prompt refused as busy
        # must not end the first one's): its feed leaves out the user's own message.
        prompting: dict[str, int] = peer.state.setdefault("prompting", {})
        prompting[p.session_id] = prompting.get(p.session_id, 0) + 1
        asked: list[bool] = []

        async def ask(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
            asked.append(True)
            await feed.queued()  # the checkpoint's tool_call goes out before the question about it
            return await ask_checkpoint(peer, p.session_id, checkpoint)

        try:
            result = await daemon.prompt(p.session_id, text, context, ask=ask)
        finally:
            # The answer (or error) comes after every update of the turn.
            with anyio.CancelScope(shield=True):
                await feed.queued()
            prompting[p.session_id] -= 1
            if not prompting[p.session_id]:
                del prompting[p.session_id]
                peer.state.get(CANCELLED_BY_CLIENT, set()).discard(p.session_id)
        # A checkpoint the editor declined (or could not show) ends the turn as cancelled, with
        # the checkpoint still pending for any client to resume.
        stop = "cancelled" if result.pending_hitl is not None and asked else result.stop_reason
        meta = {"invocationId": result.invocation_id, "pendingHitl": result.pending_hitl}
        return {"stopReason": stop, "_meta": {"zocrates": meta}}

    @adapter(models.ChatResumeParams)
    async def zocrates_chat_resume(peer: Peer, p: models.ChatResumeParams) -> dict[str, Any]:
        feed = attach(peer, daemon, p.session_id)
        try:
            result = await daemon.resume(
                p.session_id, p.invocation_id, p.interrupt_id, p.response.model_dump(exclude_none=True)
            )
        finally:
            with anyio.CancelScope(shield=True):  # the answer comes after every update of the turn
                await feed.queued()
        return {"stopReason": result.stop_reason, "invocationId": result.invocation_id, "pendingHitl": result.pending_hitl}

    @adapter(models.CancelParams)
    async def session_cancel(peer: Peer, p: models.CancelParams) -> dict[str, Any]:
        if p.session_id in peer.state.get("prompting", {}):  # noted before the turn can see the cancel
            peer.state.setdefault(CANCELLED_BY_CLIENT, set()).add(p.session_id)
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
        options = await daemon.config_options(row.id)
        send_commands(peer, row.id)
        return {"sessionId": row.id, "configOptions": options_json(peer, options)}

    @adapter(models.ListSessionsParams)
    async def session_list(peer: Peer, p: models.ListSessionsParams) -> dict[str, Any]:
        if p.cursor:
            raise InvalidInput("unknown cursor: session/list answers in one page", cursor=p.cursor)
        rows = await daemon.list_sessions()
        return {"sessions": [session_info(r, default_cwd) for r in rows]}

    @adapter(models.LoadSessionParams)
    async def session_load(peer: Peer, p: models.LoadSessionParams) -> dict[str, Any]:
        updates = await daemon.replay(p.session_id)
        options = await daemon.config_options(p.session_id)
        attach(peer, daemon, p.session_id)
        await peer.send_messages(
            jsonrpc.notification("session/update", {"sessionId": p.session_id, "update": to_acp(u)}) for u in updates
        )
        send_commands(peer, p.session_id)
        return {"configOptions": options_json(peer, options)}

    @adapter(models.ResumeSessionParams)
    async def session_resume(peer: Peer, p: models.ResumeSessionParams) -> dict[str, Any]:
        options = await daemon.config_options(p.session_id)  # SessionNotFound if it is gone
        attach(peer, daemon, p.session_id)
        send_commands(peer, p.session_id)
        return {"configOptions": options_json(peer, options)}

    @adapter(models.CloseSessionParams)
    async def session_close(peer: Peer, p: models.CloseSessionParams) -> dict[str, Any]:
        # ACP: as if session/cancel came first, for the work this connection started.
        if p.session_id in peer.state.get("prompting", {}):
            peer.state.setdefault(CANCELLED_BY_CLIENT, set()).add(p.session_id)
            daemon.cancel(p.session_id)
        if not detach(peer, p.session_id):
            await daemon.config_options(p.session_id)  # SessionNotFound for a session that does not exist
        return {}

    @adapter(models.SetConfigOptionParams)
    async def session_set_config_option(peer: Peer, p: models.SetConfigOptionParams) -> dict[str, Any]:
        if (p.type == "boolean") != isinstance(p.value, bool):
            raise InvalidInput('a boolean value goes with "type": "boolean", and only a boolean', configId=p.config_id)
        options = await daemon.set_config_option(p.session_id, p.config_id, p.value, origin=origin_of(peer))
        return {"configOptions": options_json(peer, options)}

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

    @adapter(models.LibrarySuggestionsParams)
    async def zocrates_library_suggestions(peer: Peer, p: models.LibrarySuggestionsParams) -> dict[str, Any]:
        return await daemon.library_suggestions(p.limit)

    @adapter(models.LibrarySearchParams)
    async def zocrates_library_search(peer: Peer, p: models.LibrarySearchParams) -> dict[str, Any]:
        return await daemon.search_library(
            p.query, top_k=p.top_k, collection=p.collection, item_keys=tuple(p.item_keys or ()), library=p.library
        )

    @adapter(models.LibraryItemParams)
    async def zocrates_library_item(peer: Peer, p: models.LibraryItemParams) -> dict[str, Any]:
        return await daemon.library_item(p.item_key, library=p.library, fulltext=p.fulltext, fulltext_offset=p.fulltext_offset)

    @adapter(models.LibraryCollectionsParams)
    async def zocrates_library_collections(peer: Peer, p: models.LibraryCollectionsParams) -> dict[str, Any]:
        return {"collections": await daemon.library_collections(p.library)}

    @adapter(models.LibraryTagsParams)
    async def zocrates_library_tags(peer: Peer, p: models.LibraryTagsParams) -> dict[str, Any]:
        return await daemon.library_tags(p.library, limit=p.limit, offset=p.offset, contains=p.contains)

    @adapter(models.LibraryItemsParams)
    async def zocrates_library_items(peer: Peer, p: models.LibraryItemsParams) -> dict[str, Any]:
        return await daemon.library_items(p.library, limit=p.limit, offset=p.offset, order=p.order)

    table: dict[str, Handler] = {
        "initialize": initialize,
        "session/new": session_new,
        "session/list": session_list,
        "session/load": session_load,
        "session/delete": session_delete,
        "session/resume": session_resume,
        "session/close": session_close,
        "session/set_config_option": session_set_config_option,
        "_zocrates/session/get": zocrates_session_get,
        "_zocrates/session/rename": zocrates_session_rename,
        "session/prompt": session_prompt,
        "session/cancel": session_cancel,
        "_zocrates/session/rewind": zocrates_session_rewind,
        "_zocrates/chat/resume": zocrates_chat_resume,
        "_zocrates/storage/stats": zocrates_storage_stats,
        "_zocrates/storage/maintenance": zocrates_storage_maintenance,
        "_zocrates/library/status": zocrates_library_status,
        "_zocrates/library/suggestions": zocrates_library_suggestions,
        "_zocrates/library/search": zocrates_library_search,
        "_zocrates/library/item": zocrates_library_item,
        "_zocrates/library/collections": zocrates_library_collections,
        "_zocrates/library/tags": zocrates_library_tags,
        "_zocrates/library/items": zocrates_library_items,
    }
    extensions = tuple(sorted(name for name in table if name.startswith("_zocrates/")))
    if extensions != early.EXTENSIONS:  # `initialize` advertises early.EXTENSIONS, whichever table answers
        raise RuntimeError(f"the table's extensions {extensions} are not rpc/early.py's EXTENSIONS")
    return MethodTable(table, notifications=early.NOTIFICATIONS)
