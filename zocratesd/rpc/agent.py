"""The ACP agent: ACP v1 methods and the `_zocrates/*` extensions, as adapters over the core `Daemon`.

`Agent` has one async method per wire method, marked with `@acp_method(name)`; its `params`
annotation names the model of `rpc/models.py` that validates the request (rpc/acp.py builds the
method table from `ROUTES` and validates with those models). The routes, the extension list
`initialize` advertises (`EXTENSIONS`) and the methods a client may notify are read off the class,
so a method exists on the wire exactly when it is defined here. What one connection said and does
(capabilities, feeds, the turns it prompts) is its `Connection`.

This module does not import pydantic or the wire models, so the handshake can be answered before
they are loaded (rpc/handshake.py; why: bench/PROFILE.md, "Start-up").
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

from zocrates_wire import jsonrpc
from zocrates_wire.errors import ConnectionLost, RpcError
from zocrates_wire.ui_session import PendingHitl
from zocratesd.core import commands
from zocratesd.core.context import PromptContext
from zocratesd.core.daemon import Daemon
from zocratesd.core.online import OnlineAnswer
from zocratesd.core.session_config import CITATION_STYLE
from zocratesd.core.sessions import SessionView
from zocratesd.core.watchers import Subscription
from zocratesd.errors import InvalidInput, ZocratesError
from zocratesd.limits import CITATION_STYLES, ITEM_URI_RE, MAX_GUIDANCE_CHARS
from zocratesd.locations import PROTOCOL_VERSION
from zocratesd.logtext import escape_for_log
from zocratesd.rpc import online_consent
from zocratesd.rpc.peer import Peer
from zocratesd.rpc.updates import checkpoint_call_id, config_options, session_info, to_acp
from zocratesd.rpc.write_consent import ask_write, outcome_text
from zocratesd.updates import ConfigOptions, MessageChunk
from zocratesd.writes import WriteRecord, write_json

if TYPE_CHECKING:
    from zocratesd.rpc import models

log = logging.getLogger(__name__)

# A connection that has not taken a session/update off its socket for this long is cut off (it can
# resync with session/load): one stuck editor must not hold memory for a turn others are watching.
SLOW_CLIENT_TIMEOUT_S = 30.0
_origins = itertools.count(1)  # names connections as the origins of their setting changes
_messages = itertools.count(1)  # ids of the agent messages that answer slash commands
# A client's name as the journal records the face a write came from: what it said at `initialize`.
MAX_FACE_CHARS: Final = 60


def face_name(conn: Connection) -> str:
    """Who asked, for the record of writes: the client's own name (`clientInfo.name`), else "rpc"."""
    name = conn.client_info.get("name")
    text = " ".join(str(name).split())[:MAX_FACE_CHARS] if isinstance(name, str) else ""
    return escape_for_log(text) if text else "rpc"


def _advertised(capabilities: Mapping[str, object], *path: str) -> bool:
    """Whether the client advertised `clientCapabilities.<path>` (an object: ACP's `{}` = yes)."""
    node: object = capabilities
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return isinstance(node, Mapping)


@dataclass(frozen=True)
class ClientCapabilities:
    """What the daemon reads of the `clientCapabilities` a client advertised at `initialize`."""

    boolean_options: bool = False  # `session.configOptions.boolean`: config options of type boolean
    form_elicitation: bool = False  # `elicitation.form`: a checkpoint asked as a form
    # `_meta.zocrates.asksAboutWrites`: the client asks its person about the writes a turn proposed
    # (rpc/write_consent.py); the daemon does not.
    asks_about_writes: bool = False
    # `_meta.zocrates.citationStyle`: how answers cite in the sessions this client creates, until
    # it sets another (an editor of Markdown or LaTeX asks for "pandoc": `[@key]`).
    citation_style: str | None = None

    @classmethod
    def read(cls, advertised: Mapping[str, object]) -> ClientCapabilities:
        ours = _ours(advertised)
        style = ours.get("citationStyle")
        if style is not None and style not in CITATION_STYLES:
            raise InvalidInput(f"clientCapabilities._meta.zocrates.citationStyle is one of {', '.join(CITATION_STYLES)}",
                               citationStyle=str(style)[:40])
        return cls(
            boolean_options=_advertised(advertised, "session", "configOptions", "boolean"),
            form_elicitation=_advertised(advertised, "elicitation", "form"),
            asks_about_writes=_advertised(advertised, "_meta", "zocrates", "asksAboutWrites"),
            citation_style=style,
        )

    def session_settings(self) -> dict[str, object]:
        """The settings a session this client creates starts with (core/session_config.py)."""
        return {CITATION_STYLE: self.citation_style} if self.citation_style else {}


def _ours(advertised: Mapping[str, object]) -> Mapping[str, object]:
    meta = advertised.get("_meta")
    ours = meta.get("zocrates") if isinstance(meta, Mapping) else None
    return ours if isinstance(ours, Mapping) else {}


@dataclass(eq=False)
class Connection:
    """What the daemon keeps of one client connection, from its first request to its end."""

    peer: Peer
    capabilities: ClientCapabilities = field(default_factory=ClientCapabilities)
    client_info: Mapping[str, object] = field(default_factory=dict)  # as the client said it at `initialize`
    # This connection's name as the origin of the setting changes it makes: it hears those in its
    # answer, not again as a `config_option_update`.
    origin: str = ""
    feeds: dict[str, SessionFeed] = field(default_factory=dict)
    # Turns this connection is prompting, by session (a count: a second prompt refused as busy
    # must not end the first one's): its feeds leave out the user's own message.
    prompting: Counter[str] = field(default_factory=Counter)
    # The sessions whose turn this connection stopped with `session/cancel` while it prompted
    # them. ACP (prompt turn, "Cancellation") has the client answer its pending
    # `session/request_permission` with the `cancelled` outcome itself then, so the daemon
    # withdraws the question without `$/cancel_request`: redundant there, and a client that does
    # not implement that optional notification (the official Python SDK 0.12) logs it as an error.
    cancelled_by_client: set[str] = field(default_factory=set)

    def greet(self, capabilities: Mapping[str, object], info: Mapping[str, object]) -> None:
        """What the client said at `initialize`."""
        self.capabilities, self.client_info = ClientCapabilities.read(capabilities), info

    def __post_init__(self) -> None:
        self.origin = self.origin or f"{self.peer.name}#{next(_origins)}"
        self.peer.on_close.append(self.close_feeds)  # its end closes every feed (their writers end)

    def attach(self, daemon: Daemon, session_id: str) -> SessionFeed:
        """Send this session's updates to this connection from now on (one feed per session)."""
        feed = self.feeds.get(session_id)
        if feed is None:
            feed = self.feeds[session_id] = SessionFeed(self, daemon, session_id)
        return feed

    def detach(self, session_id: str) -> bool:
        """Stop sending this session's updates here (`session/close`); False if it was not attached."""
        feed = self.feeds.pop(session_id, None)
        if feed is None:
            return False
        feed.close()
        return True

    def close_feeds(self) -> None:
        for feed in self.feeds.values():
            feed.close()

    def withdraws_questions(self, session_id: str) -> bool:
        """Whether a question about this session's checkpoint is withdrawn with `$/cancel_request`
        when the turn stops: not when this client stopped it itself (it answers `cancelled`)."""
        return session_id not in self.cancelled_by_client

    def note_cancel(self, session_id: str) -> bool:
        """Note that this client stops the turn it prompts in `session_id`; False if it prompts none
        there. Noted before the turn can see the cancel."""
        if session_id not in self.prompting:
            return False
        self.cancelled_by_client.add(session_id)
        return True


# The one key of `Peer.state` the ACP face uses.
_CONNECTION: Final = "acp"


def connection(peer: Peer) -> Connection:
    """This peer's `Connection`, made at its first request."""
    conn = peer.state.get(_CONNECTION)
    if conn is None:
        conn = peer.state[_CONNECTION] = Connection(peer)
    assert isinstance(conn, Connection)
    return conn


class SessionFeed:
    """One session's updates to one connection, as `session/update` notifications (`Connection.attach`).

    They wait in a subscription of this connection's own (core/watchers.py), so a connection that
    does not read stalls neither the turn nor the session's other watchers. One writer task per
    feed, in the connection's task group, lives from `attach` until the feed is closed (`Connection.detach`,
    or the connection ends): it waits for updates and writes what is queued in one go (one task,
    not one per burst of updates: a turn has many bursts). The writer queues a batch on the
    connection (`Peer.queue_messages`) and waits until it is written before it takes the next, so
    updates pile up in the subscription, not in the connection, while the client reads slowly;
    `queued()` tells a request that its own answer goes out after them. Once the feed is closed
    nothing more is written: a write in progress is given up, what is still queued is dropped.
    The connection is aborted, and can resync with `session/load`, when one write takes longer than
    SLOW_CLIENT_TIMEOUT_S or its subscription overflows (MAX_QUEUED_UPDATES waiting): either way,
    it has stopped reading.
    """

    def __init__(self, conn: Connection, daemon: Daemon, session_id: str) -> None:
        self.conn = conn
        self.peer = peer = conn.peer
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
                prompting, booleans, origin = self.conn.prompting, self.conn.capabilities.boolean_options, self.conn.origin
                messages = [
                    jsonrpc.notification(
                        "session/update", {"sessionId": self.session_id, "update": to_acp(u, booleans=booleans)}
                    )
                    for u in batch
                    # The prompting editor already shows its own message; the editor that changed
                    # a setting has the options in its answer.
                    if not (isinstance(u, MessageChunk) and u.role == "user" and self.session_id in prompting)
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


# ACP permission options for a research checkpoint: "extend" searches further, "synthesize"
# answers now. A client may add `_meta.zocrates.guidance` (text) to its answer.
EXTEND_OPTION = "extend"
SYNTHESIZE_OPTION = "synthesize"
ONLINE_OPTION = "search_online"  # offered when the checkpoint's payload lists it (online.mode not off)
PERMISSION_OPTIONS = [
    {"optionId": EXTEND_OPTION, "name": "Search further", "kind": "allow_once"},
    {"optionId": SYNTHESIZE_OPTION, "name": "Answer with what was found", "kind": "reject_once"},
]
ONLINE_PERMISSION_OPTION: Final = {"optionId": ONLINE_OPTION, "name": "Search online, then answer", "kind": "allow_once"}


def checkpoint_options(checkpoint: PendingHitl) -> list[dict[str, str]]:
    """The checkpoint's answers: search further, answer now, and search online where offered."""
    actions = (checkpoint.get("payload") or {}).get("actions") or ()
    return [*PERMISSION_OPTIONS, *([ONLINE_PERMISSION_OPTION] if ONLINE_OPTION in actions else [])]
# How long a turn waits on the editor's answer to a checkpoint. The session is held meanwhile
# (other clients get "busy"), so a dialog left open does not lock it for good: after this the
# checkpoint stays pending, and any client can resume it. A client whose input has ended is not
# waited on at all: it cannot answer (Peer.request refuses at once).
CHECKPOINT_ANSWER_TIMEOUT_S = 600.0


def elicitation_schema(options: list[dict[str, str]] = PERMISSION_OPTIONS) -> dict[str, object]:
    """The form of a checkpoint: go on or answer now (or search online), and what to search next."""
    return {
        "type": "object",
        "title": "Research checkpoint",
        "properties": {
            "action": {
                "type": "string", "title": "Next step", "default": EXTEND_OPTION,
                "oneOf": [{"const": o["optionId"], "title": o["name"]} for o in options],
            },
            "guidance": {
                "type": "string", "title": "What to search next (optional)", "maxLength": MAX_GUIDANCE_CHARS,
            },
        },
        "required": ["action"],
    }


async def ask_checkpoint(peer: Peer, session_id: str, checkpoint: PendingHitl) -> dict[str, str] | None:
    """Put a checkpoint to the prompting editor: `elicitation/create` (a form, with room for
    guidance) when it advertised `elicitation.form`, else `session/request_permission`, which every
    client has. Its answer as `{action, guidance?}`, or None (as ask_permission)."""
    if connection(peer).capabilities.form_elicitation:
        return await ask_elicitation(peer, session_id, checkpoint)
    return await ask_permission(peer, session_id, checkpoint)


async def ask_elicitation(peer: Peer, session_id: str, checkpoint: PendingHitl) -> dict[str, str] | None:
    """`elicitation/create` in form mode, scoped to the session and the checkpoint's tool call.
    `accept` with an action answers; `decline`, `cancel` (or no answer in time) leave it pending."""
    params = {
        "sessionId": session_id,
        "toolCallId": checkpoint_call_id(checkpoint["interrupt_id"], checkpoint["invocation_id"]),
        "mode": "form",
        "message": checkpoint.get("message") or "Research checkpoint",
        "requestedSchema": elicitation_schema(checkpoint_options(checkpoint)),
    }
    with anyio.move_on_after(CHECKPOINT_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request(
                "elicitation/create", params,
                notify_cancel=lambda: connection(peer).withdraws_questions(session_id),
            )
        except (RpcError, ConnectionLost) as exc:
            log.info("%s: elicitation/create failed (%s); the checkpoint stays pending", peer.name, escape_for_log(exc))
            return None
        if not isinstance(result, dict) or result.get("action") != "accept":
            return None
        content: dict[str, Any] = result["content"] if isinstance(result.get("content"), dict) else {}
        action = content.get("action", EXTEND_OPTION)
        if action == SYNTHESIZE_OPTION:
            return {"action": "synthesize"}
        if action == ONLINE_OPTION:
            return {"action": "search_online"}
        if action == EXTEND_OPTION:
            guidance = content.get("guidance")
            return {"action": "extend_budget", **({"guidance": guidance} if isinstance(guidance, str) and guidance else {})}
        return None
    log.info("%s: no answer to a checkpoint in %.0f s; it stays pending", peer.name, CHECKPOINT_ANSWER_TIMEOUT_S)
    return None


async def ask_permission(peer: Peer, session_id: str, checkpoint: PendingHitl) -> dict[str, str] | None:
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
        "options": checkpoint_options(checkpoint),
    }
    with anyio.move_on_after(CHECKPOINT_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request(
                "session/request_permission", params,
                notify_cancel=lambda: connection(peer).withdraws_questions(session_id),
            )
        except (RpcError, ConnectionLost) as exc:
            # An RpcError carries the client's own text: escaped (logtext.py).
            log.info("%s: session/request_permission failed (%s); the checkpoint stays pending",
                     peer.name, escape_for_log(exc))
            return None
        outcome = (result or {}).get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            return None
        if outcome.get("optionId") == SYNTHESIZE_OPTION:
            return {"action": "synthesize"}
        if outcome.get("optionId") == ONLINE_OPTION:
            return {"action": "search_online"}
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
            m = ITEM_URI_RE.match(block["uri"])
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
        online=ours.get("online"),
        # Items linked from one group only (and nothing else selected): search that group, since a
        # key is unique per library only. `_meta.zocrates.library` says otherwise when given.
        library=ours.get("library") or (
            next(iter(linked_libraries)) if len(linked_libraries) == 1 and not ours.get("activeItems")
            and linked_libraries != {"user"} else None
        ),
    )
    return "\n".join(texts), context


P = TypeVar("P", bound="models.Params")
AgentMethod = Callable[["Agent", Connection, P], Awaitable[Any]]


@dataclass(frozen=True)
class Route:
    """One wire method of `Agent`: its name and the method that serves it (whose `params`
    annotation names the model of its params)."""

    method: str
    serve: AgentMethod[Any]
    notification: bool  # a client may send it without an id


def acp_method(name: str, *, notification: bool = False) -> Callable[[AgentMethod[P]], AgentMethod[P]]:
    """Serve the decorated `Agent` method as wire method `name` (`notification`: also without an id)."""

    def mark(fn: AgentMethod[P]) -> AgentMethod[P]:
        fn.__acp_method__ = (name, notification)  # type: ignore[attr-defined]
        return fn

    return mark


def routes_of(cls: type) -> dict[str, Route]:
    """The wire methods a class defines with `@acp_method`."""
    routes: dict[str, Route] = {}
    for fn in vars(cls).values():
        marked = getattr(fn, "__acp_method__", None)
        if marked is None:
            continue
        name, notification = marked
        if name in routes:
            raise TypeError(f"{cls.__name__}: {name} is served twice")
        routes[name] = Route(name, fn, notification)
    return routes


# ACP `available_commands_update`: the slash commands of core/commands.py, as a client lists them.
AVAILABLE_COMMANDS: Final = {
    "sessionUpdate": "available_commands_update",
    "availableCommands": [
        {"name": c.name, "description": c.description, **({"input": {"hint": c.hint}} if c.hint else {})}
        for c in commands.COMMANDS
    ],
}


class Agent:
    """The daemon's ACP agent: one method per wire method, over one core `Daemon`."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        # Sessions made without a cwd (by the Zotero plugin) are listed with the Zotero data dir:
        # the place they really belong to.
        self.default_cwd = str(daemon.data_dir)

    # --- ACP ------------------------------------------------------------------------------------

    @acp_method("initialize")
    async def initialize(self, conn: Connection, params: models.InitializeParams) -> dict[str, Any]:
        conn.greet(params.client_capabilities or {}, params.client_info or {})
        return initialize_result(self.daemon.version, self.daemon.config.rpc.max_frame_bytes)

    @acp_method("session/new")
    async def new_session(self, conn: Connection, params: models.NewSessionParams) -> dict[str, Any]:
        ours = (params.meta or {}).get("zocrates")
        if ours is not None and not isinstance(ours, dict):
            raise InvalidInput('"_meta.zocrates" must be an object')
        row = await self.daemon.create_session(title=(ours or {}).get("title"), cwd=params.cwd or None,
                                               settings=conn.capabilities.session_settings())
        conn.attach(self.daemon, row.id)
        options = await self.daemon.config_options(row.id)
        self._send_commands(conn, row.id)
        return {"sessionId": row.id, "configOptions": config_options(options, booleans=conn.capabilities.boolean_options)}

    @acp_method("session/list")
    async def list_sessions(self, conn: Connection, params: models.ListSessionsParams) -> dict[str, Any]:
        if params.cursor:
            raise InvalidInput("unknown cursor: session/list answers in one page", cursor=params.cursor)
        rows = await self.daemon.list_sessions()
        return {"sessions": [session_info(r, self.default_cwd) for r in rows]}

    @acp_method("session/load")
    async def load_session(self, conn: Connection, params: models.LoadSessionParams) -> dict[str, Any]:
        updates = await self.daemon.replay(params.session_id)
        options = await self.daemon.config_options(params.session_id)
        conn.attach(self.daemon, params.session_id)
        await conn.peer.send_messages(
            jsonrpc.notification("session/update", {"sessionId": params.session_id, "update": to_acp(u)})
            for u in updates
        )
        self._send_commands(conn, params.session_id)
        return {"configOptions": config_options(options, booleans=conn.capabilities.boolean_options)}

    @acp_method("session/resume")
    async def resume_session(self, conn: Connection, params: models.ResumeSessionParams) -> dict[str, Any]:
        options = await self.daemon.config_options(params.session_id)  # SessionNotFound if it is gone
        conn.attach(self.daemon, params.session_id)
        self._send_commands(conn, params.session_id)
        return {"configOptions": config_options(options, booleans=conn.capabilities.boolean_options)}

    @acp_method("session/close")
    async def close_session(self, conn: Connection, params: models.CloseSessionParams) -> dict[str, Any]:
        # ACP: as if session/cancel came first, for the work this connection started.
        if conn.note_cancel(params.session_id):
            self.daemon.cancel(params.session_id)
        if not conn.detach(params.session_id):
            await self.daemon.config_options(params.session_id)  # SessionNotFound for a session that does not exist
        return {}

    @acp_method("session/delete")
    async def delete_session(self, conn: Connection, params: models.DeleteSessionParams) -> dict[str, Any]:
        await self.daemon.delete_session(params.session_id)
        return {}

    @acp_method("session/set_config_option")
    async def set_config_option(self, conn: Connection, params: models.SetConfigOptionParams) -> dict[str, Any]:
        if (params.type == "boolean") != isinstance(params.value, bool):
            raise InvalidInput('a boolean value goes with "type": "boolean", and only a boolean', configId=params.config_id)
        options = await self.daemon.set_config_option(params.session_id, params.config_id, params.value, origin=conn.origin)
        return {"configOptions": config_options(options, booleans=conn.capabilities.boolean_options)}

    @acp_method("session/prompt")
    async def prompt(self, conn: Connection, params: models.PromptParams) -> dict[str, Any]:
        text, context = prompt_input(params.prompt, params.meta)
        command = commands.parse(text)
        if command is not None:
            return await self._run_command(conn, params.session_id, *command)
        session_id = params.session_id
        feed = conn.attach(self.daemon, session_id)
        conn.prompting[session_id] += 1
        asked: list[bool] = []

        async def ask(checkpoint: PendingHitl) -> dict[str, str] | None:
            asked.append(True)
            await feed.queued()  # the checkpoint's tool_call goes out before the question about it
            return await ask_checkpoint(conn.peer, session_id, checkpoint)

        async def ask_online(terms: str) -> OnlineAnswer | None:
            await feed.queued()  # what the turn said so far goes out before the question
            return await online_consent.ask_online(conn.peer, session_id, terms, form=conn.capabilities.form_elicitation)

        started = time.time()
        try:
            result = await self.daemon.prompt(session_id, text, context, ask=ask, ask_online=ask_online)
            if not conn.capabilities.asks_about_writes:
                await self._consent_to_writes(conn, session_id, started)
        finally:
            # The answer (or error) comes after every update of the turn.
            with anyio.CancelScope(shield=True):
                await feed.queued()
            conn.prompting[session_id] -= 1
            if not conn.prompting[session_id]:
                del conn.prompting[session_id]
                conn.cancelled_by_client.discard(session_id)
        # A checkpoint the editor declined (or could not show) ends the turn as cancelled, with
        # the checkpoint still pending for any client to resume.
        stop = "cancelled" if result.pending_hitl is not None and asked else result.stop_reason
        meta = {"invocationId": result.invocation_id, "pendingHitl": result.pending_hitl, "citations": result.citations,
                "citationKeys": await self._citation_keys(session_id, result.invocation_id)}
        return {"stopReason": stop, "_meta": {"zocrates": meta}}

    async def _citation_keys(self, session_id: str, invocation_id: str | None) -> dict[str, str]:
        """The citation key of each item the turn's answer cites (an editor inserts them as it likes);
        {} when it cites none, or the index cannot say."""
        if invocation_id is None:
            return {}
        try:
            done = await self.daemon.export_citations(session_id=session_id, invocation_id=invocation_id, format="csl-json")
        except ZocratesError:
            return {}
        sources = done["sources"] if isinstance(done["sources"], list) else []
        return {s["item_key"]: s["citation_key"] for s in sources}

    async def _consent_to_writes(
        self, conn: Connection, session_id: str, since: float, proposers: tuple[str, ...] = ("model",),
    ) -> None:
        """Put the writes proposed since `since` (by the model in a turn, or by a slash command) to
        the person, oldest first, and say what became of each in the conversation."""
        writes = self.daemon.writes
        proposed = [r for r in reversed(await writes.list(pending=True, session_id=session_id))
                    if r.state == "awaiting_consent" and r.proposer in proposers and r.created_at >= since]
        for record in proposed:
            answer = await ask_write(conn.peer, session_id, record)
            if answer in ("write", "write_always"):
                record = await writes.confirm(record.id, always=answer == "write_always")
            elif answer == "dont_write":
                record = await writes.discard(record.id)
            chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": outcome_text(record)},
                     "messageId": f"write-{record.id}"}
            await conn.peer.notify("session/update", {"sessionId": session_id, "update": chunk})

    @acp_method("session/cancel", notification=True)
    async def cancel(self, conn: Connection, params: models.CancelParams) -> dict[str, Any]:
        conn.note_cancel(params.session_id)
        self.daemon.cancel(params.session_id)
        return {}  # dropped when sent as a notification (as ACP does); `{}` when sent as a request

    # --- _zocrates/* extensions -----------------------------------------------------------------

    @acp_method("_zocrates/session/get")
    async def get_session(self, conn: Connection, params: models.GetSessionParams) -> SessionView:
        return await self.daemon.get_session(params.session_id)

    @acp_method("_zocrates/session/rename")
    async def rename_session(self, conn: Connection, params: models.RenameSessionParams) -> dict[str, Any]:
        row = await self.daemon.rename_session(params.session_id, params.title)
        return {"id": row.id, "title": row.title, "created_at": row.created_at, "updated_at": row.updated_at}

    @acp_method("_zocrates/session/rewind")
    async def rewind(self, conn: Connection, params: models.RewindParams) -> dict[str, Any]:
        return await self.daemon.rewind(params.session_id, params.invocation_id)

    @acp_method("_zocrates/chat/resume")
    async def chat_resume(self, conn: Connection, params: models.ChatResumeParams) -> dict[str, Any]:
        feed = conn.attach(self.daemon, params.session_id)
        try:
            result = await self.daemon.resume(
                params.session_id, params.invocation_id, params.interrupt_id, params.response.model_dump(exclude_none=True)
            )
        finally:
            with anyio.CancelScope(shield=True):  # the answer comes after every update of the turn
                await feed.queued()
        return {"stopReason": result.stop_reason, "invocationId": result.invocation_id, "pendingHitl": result.pending_hitl,
                "citations": result.citations}

    @acp_method("_zocrates/storage/stats")
    async def storage_stats(self, conn: Connection, params: models.NoParams) -> object:
        return await self.daemon.storage_stats()

    @acp_method("_zocrates/storage/maintenance")
    async def storage_maintenance(self, conn: Connection, params: models.NoParams) -> object:
        return await self.daemon.run_maintenance()

    @acp_method("_zocrates/library/status")
    async def library_status(self, conn: Connection, params: models.LibraryStatusParams) -> object:
        return self.daemon.library_status(refresh=params.refresh)

    @acp_method("_zocrates/library/suggestions")
    async def library_suggestions(self, conn: Connection, params: models.LibrarySuggestionsParams) -> object:
        return await self.daemon.library_suggestions(params.limit)

    @acp_method("_zocrates/library/search")
    async def library_search(self, conn: Connection, params: models.LibrarySearchParams) -> object:
        return await self.daemon.search_library(
            params.query, top_k=params.top_k, collection=params.collection,
            item_keys=tuple(params.item_keys or ()), library=params.library,
        )

    @acp_method("_zocrates/library/item")
    async def library_item(self, conn: Connection, params: models.LibraryItemParams) -> object:
        return await self.daemon.library_item(
            params.item_key, library=params.library, fulltext=params.fulltext, fulltext_offset=params.fulltext_offset
        )

    @acp_method("_zocrates/library/find_quote")
    async def library_find_quote(self, conn: Connection, params: models.FindQuoteParams) -> object:
        return await self.daemon.catalogue.find_quote(params.quote, library=params.library, limit=params.limit)

    @acp_method("_zocrates/library/collections")
    async def library_collections(self, conn: Connection, params: models.LibraryCollectionsParams) -> object:
        return {"collections": await self.daemon.library_collections(params.library)}

    @acp_method("_zocrates/library/tags")
    async def library_tags(self, conn: Connection, params: models.LibraryTagsParams) -> object:
        return await self.daemon.library_tags(params.library, limit=params.limit, offset=params.offset, contains=params.contains)

    @acp_method("_zocrates/citations/export")
    async def citations_export(self, conn: Connection, params: models.ExportCitationsParams) -> object:
        return await self.daemon.export_citations(
            session_id=params.session_id, invocation_id=params.invocation_id,
            items=[(i.library, i.item_key) for i in params.items], format=params.format, style=params.style,
        )

    @acp_method("_zocrates/library/items")
    async def library_items(self, conn: Connection, params: models.LibraryItemsParams) -> object:
        return await self.daemon.library_items(params.library, limit=params.limit, offset=params.offset, order=params.order)

    # --- _zocrates/writes/*: writes into Zotero ---------------------------------------------------

    async def _submit(self, conn: Connection, params: models.WriteParams) -> object:
        record = await self.daemon.writes.submit(
            await params.operation(self.daemon.writes), session_id=params.session_id, face=face_name(conn),
            consented=params.confirm)
        return self._write_json(record)

    def _write_json(self, record: WriteRecord) -> object:
        return write_json(record, self.daemon.writes.waiting_for)

    @acp_method("_zocrates/writes/save_note")
    async def write_note(self, conn: Connection, params: models.SaveNoteParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/tag")
    async def write_tags(self, conn: Connection, params: models.TagItemsParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/untag")
    async def write_untag(self, conn: Connection, params: models.UntagItemsParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/add_to_collection")
    async def write_collect(self, conn: Connection, params: models.CollectParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/create_collection")
    async def write_collection(self, conn: Connection, params: models.CreateCollectionParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/add_item")
    async def write_item(self, conn: Connection, params: models.AddItemParams) -> object:
        return await self._submit(conn, params)

    @acp_method("_zocrates/writes/confirm")
    async def write_confirm(self, conn: Connection, params: models.ConfirmWriteParams) -> object:
        return self._write_json(await self.daemon.writes.confirm(params.write_id, always=params.always))

    @acp_method("_zocrates/writes/discard")
    async def write_discard(self, conn: Connection, params: models.WriteIdParams) -> object:
        return self._write_json(await self.daemon.writes.discard(params.write_id))

    @acp_method("_zocrates/writes/undo")
    async def write_undo(self, conn: Connection, params: models.UndoWriteParams) -> object:
        return self._write_json(
            await self.daemon.writes.undo(params.write_id, session_id=params.session_id, face=face_name(conn)))

    @acp_method("_zocrates/writes/get")
    async def write_get(self, conn: Connection, params: models.WriteIdParams) -> object:
        return self._write_json(await self.daemon.writes.get(params.write_id))

    @acp_method("_zocrates/writes/list")
    async def write_list(self, conn: Connection, params: models.ListWritesParams) -> object:
        records = await self.daemon.writes.list(limit=params.limit, pending=params.pending, session_id=params.session_id)
        return {"writes": [self._write_json(r) for r in records], "waiting_for": self.daemon.writes.waiting_for}

    @acp_method("_zocrates/online/search")
    async def online_search(self, conn: Connection, params: models.OnlineSearchParams) -> object:
        return await self.daemon.online.search(
            params.query, limit=params.limit, year_from=params.year_from, year_to=params.year_to)

    # --- helpers --------------------------------------------------------------------------------

    def _send_commands(self, conn: Connection, session_id: str) -> None:
        """`available_commands_update` for a session the answer being written names (new, load,
        resume): after it, so the client knows the session by then."""
        update = {"sessionId": session_id, "update": AVAILABLE_COMMANDS}
        conn.peer.after_answer(lambda: conn.peer.notify("session/update", update))

    async def _run_command(self, conn: Connection, session_id: str, name: str, arg: str) -> dict[str, Any]:
        """A slash command: its reply as an agent message to this connection. A command the core
        refuses (bad argument, busy session) is answered in the message too: the user typed it."""
        outcome: dict[str, Any] = {"name": name, "ok": True}
        started = time.time()
        await self.daemon.config_options(session_id)  # no such session: an error, as for any prompt
        try:
            reply = await commands.run(self.daemon, session_id, name, arg)
        except ZocratesError as exc:
            outcome |= {"ok": False, "errorKind": exc.kind}
            reply = f"/{name}: {exc.message}"
        conn.attach(self.daemon, session_id)  # as a prompt does: it hears the session from now on
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply},
                 "messageId": f"command-{next(_messages)}"}
        await conn.peer.notify("session/update", {"sessionId": session_id, "update": chunk})
        if name in commands.WRITE_COMMANDS and outcome["ok"] and not conn.capabilities.asks_about_writes:
            await self._consent_to_writes(conn, session_id, started, proposers=("user",))
        return {"stopReason": "end_turn", "_meta": {"zocrates": {"command": outcome}}}


ROUTES: Final = routes_of(Agent)
# The `_zocrates/*` methods, advertised in `initialize` (DESIGN "Decisions").
EXTENSIONS: Final = tuple(sorted(name for name in ROUTES if name.startswith("_zocrates/")))
# The methods a client may send as notifications (the others are never run without an id).
NOTIFICATIONS: Final = tuple(name for name, route in ROUTES.items() if route.notification)


def initialize_result(version: str, max_frame_bytes: int) -> dict[str, Any]:
    """The answer to `initialize`."""
    return {
        # We speak v1 only; a client asking for another version gets ours and decides.
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": {"list": {}, "delete": {}, "resume": {}, "close": {}},
            "_meta": {
                "zocrates": {
                    "version": version,
                    "protocolVersion": PROTOCOL_VERSION,
                    "extensions": list(EXTENSIONS),
                    "maxFrameBytes": max_frame_bytes,
                }
            },
        },
        "agentInfo": {"name": "zocratesd", "title": "Zocrates", "version": version},
        "authMethods": [],
    }

