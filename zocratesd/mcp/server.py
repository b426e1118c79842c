"""The MCP server (the SDK's low-level `Server`): tools, resources and prompts, each a thin
mapping onto the daemon's JSON-RPC.

Every tool is one or two `_zocrates/*` or ACP calls (protocol/README.md) through `DaemonLink`;
nothing here reads the library or the session store itself. The quick tools' work and results
are tools.py's, as plain JSON; `ask` and `resume` are here. One table, built from the tool list,
says which handler runs each tool. A bad argument, an unknown key, a daemon that cannot be
reached: a tool result with `isError` that says what to do, and the server carries on.

`ask` and `resume` run a whole Zocrates turn. Search rounds become progress notifications (when
the client asked for progress). A client's `notifications/cancelled` cancels the tool's task; the
turn's request is then cancelled (`$/cancel_request`) and the daemon stops the turn, keeping the
session usable. A research checkpoint comes from the daemon as `elicitation/create` and is put to
the MCP client as an elicitation of its own when it can take one; otherwise it is declined, the
checkpoint stays pending in the session, and the tool's result says how to `resume` it.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from zocrates_client import DEFAULT_UPDATES_BUFFER, CheckpointAction, ConnectionLost, RpcError, Turn, last_progress_line
from zocrates_client.client import prompt_params
from zocratesd import __version__
from zocratesd.limits import ITEM_URI_RE, MAX_OFFSET
from zocratesd.logtext import escape_for_log
from zocratesd.mcp import answers, schemas, tools
from zocratesd.mcp.answers import Checkpoint, TurnOutcome
from zocratesd.mcp.calls import DaemonCalls
from zocratesd.mcp.inputs import AskArgs, ConfirmWriteArgs, ResumeArgs, SearchLibraryArgs, UndoArgs
from zocratesd.mcp.link import DaemonLink, LinkDown
from zocratesd.mcp.schemas import WriteState
from zocratesd.mcp.tools import Made, ToolError, Work
from zocratesd.untrusted import fence

log = logging.getLogger("zocratesd.mcp")

# Resources listed per page (`resources/list` cursor): a client that lists everything pages on.
RESOURCES_PAGE: Final = 100
# A turn stopped by a cancelled tool call ends in the daemon a moment later (the model's stream
# closed, the turn's events written); a new turn of that session refused as busy within this
# long is retried every BUSY_RETRY_S rather than failed. A turn takes well under a second to stop.
CANCELLED_TURN_GRACE_S: Final = 10.0
BUSY_RETRY_S: Final = 0.05
SESSION_BUSY: Final = 1001  # the daemon's "session busy" code (protocol/README.md, Errors)
# JSON-RPC "resource not found" (the daemon's -32002; MCP servers use it for an unknown URI).
RESOURCE_NOT_FOUND: Final = -32002
# What an item resource's fence says it holds (untrusted.py).
ITEM_SOURCE: Final = "an item of the user's Zotero library"
# How often `search_library` looks at the library's progress while its search waits for an index
# still reading the library (the daemon waits a few seconds at most: core/catalogue.py
# INDEX_WAIT_S); each step forward is a progress notification.
INDEX_PROGRESS_POLL_S: Final = 0.25
# A search's progress line: `Round 2: searched "..." (3 passages)` (engine/tools.py).
_ROUND_RE: Final = re.compile(r"^Round (\d+):")
# `tools/list`'s tools: the same on every call.
_TOOL_LIST: Final = [spec.listing() for spec in schemas.TOOLS]
# The question a write tool puts to the user (MCP elicitation): the preview is its message; accepting
# writes it, and the box lets later writes of its kind through without asking.
CONSENT_SCHEMA: Final = {
    "type": "object",
    "properties": {"always": {"type": "boolean", "title": "Don't ask again for this kind of write", "default": False}},
}

# A tool's handler: its parsed arguments in, its structured result and text out.
Handler = Callable[[ServerRequestContext[Any], Any], Awaitable[Made]]


class ZocratesMcp(DaemonCalls):
    """The server's handlers, over one `DaemonLink`: the tools of tools.py wrapped in the SDK's
    types, `ask` and `resume`, the item resources and the prompts."""

    def __init__(self, link: DaemonLink) -> None:
        super().__init__(link)
        turns: dict[str, Handler] = {"ask": self._ask, "resume": self._resume, "search_library": self._search,
                                     "confirm_write": self._confirm_write, "undo": self._undo}
        turns |= {name: functools.partial(self._write, name) for name in tools.WRITE_METHODS}
        # Every listed tool has a handler (a KeyError here names one that has none).
        self._handlers: dict[str, Handler] = {
            spec.name: turns[spec.name] if spec.name in turns else self._quick(tools.QUICK[spec.name])
            for spec in schemas.TOOLS
        }
        link.on_elicit = self._elicit
        # The MCP request running each session's turn: where its checkpoint is asked.
        self._asking: dict[str, ServerRequestContext[Any]] = {}
        # When a cancelled tool call last stopped each session's turn (monotonic seconds).
        self._cancelled: dict[str, float] = {}

    def server(self) -> Server[Any]:
        return Server(
            tools.SERVER_NAME, version=__version__, title=tools.SERVER_TITLE, instructions=tools.INSTRUCTIONS,
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
            on_list_resources=self.list_resources, on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource, on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt,
        )

    # --- tools ------------------------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult.model_validate({"tools": _TOOL_LIST}, by_name=False)

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await self.call(params.name, dict(params.arguments or {}), ctx)

    async def call(self, name: str, args: dict[str, Any], ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        """Run tool `name`. Never raises for a bad call or a daemon out of reach: that is a tool error."""
        try:
            parsed = tools.arguments(name, args)
            made = await self._handlers[name](ctx, parsed)
        except (ToolError, RpcError) as exc:
            return tools.failure_result(name, exc)
        except LinkDown as exc:
            return tools.unreachable_result(exc)
        except ConnectionLost as exc:
            self.link.lost()
            return tools.lost_result(exc)
        return tools.tool_result(made)

    def _quick(self, work: Callable[[Any], Work]) -> Handler:
        async def run(ctx: ServerRequestContext[Any], args: Any) -> Made:
            return await self.drive(work(args))

        return run

    async def _search(self, ctx: ServerRequestContext[Any], a: SearchLibraryArgs) -> Made:
        """search_library; while the daemon's search waits for a library still being read, the
        client that asked for progress hears how far the index is."""
        progress = Progress(ctx)
        if not progress.wanted:
            return await self.drive(tools.search_library(a))
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._index_progress, progress)
            made = await self.drive(tools.search_library(a))
            tg.cancel_scope.cancel()
        return made

    async def _index_progress(self, progress: Progress) -> None:
        """Report the index's progress until it has read the library (or the caller cancels this)."""
        while True:
            try:
                reading = tools.library_reading(await self._call("_zocrates/library/status", {}))
            except (RpcError, LinkDown, ConnectionLost):  # the search itself says what went wrong
                return
            if reading is None:
                return
            done, todo = reading["items_done"], reading["items_to_index"]
            await progress.at(done, todo or None, f"waiting for the library index: {done:,} of {todo:,} items read"
                              if todo else "waiting for the library index: listing the library's items")
            await anyio.sleep(INDEX_PROGRESS_POLL_S)

    async def _ask(self, ctx: ServerRequestContext[Any], a: AskArgs) -> Made:
        client = await self.link.client()
        collection = await self._collection_key(a.collection) if a.collection else None
        sid = a.session_id
        if sid is None:
            sid = await client.new_session(cwd=str(self.link.data_dir), title=None)
        if a.citation_style is not None:  # a session setting (core/session_config.py), kept for its later turns
            await client.call("session/set_config_option", {"sessionId": sid, "configId": "citation_style",
                                                             "value": a.citation_style})
        params = prompt_params(sid, a.question, None, tuple(a.item_keys or ()), collection, (), a.online)
        if a.library:
            params.setdefault("_meta", {}).setdefault("zocrates", {})["library"] = a.library
        since = time.time()
        outcome = await self._turn(ctx, sid, lambda: Turn(client, sid, "session/prompt", params, DEFAULT_UPDATES_BUFFER))
        return await self._with_proposed_writes(ctx, sid, since, Made(outcome.structured(), outcome.text()))

    async def _resume(self, ctx: ServerRequestContext[Any], a: ResumeArgs) -> Made:
        client = await self.link.client()
        sid = a.session_id
        session = await client.get_session(sid)
        hitl = session.get("pending_hitl")
        if not hitl:
            raise ToolError(f"session {sid} has no research checkpoint waiting; ask a new question instead")
        action: CheckpointAction = "extend_budget" if a.action == "extend" else a.action
        outcome = await self._turn(
            ctx, sid, lambda: client.stream_resume(sid, hitl["invocation_id"], hitl["interrupt_id"], action, a.guidance)
        )
        return Made(outcome.structured(), outcome.text())

    async def _turn(self, ctx: ServerRequestContext[Any], sid: str, make: Callable[[], Turn]) -> TurnOutcome:
        """Run a turn to its end (`make` builds its request); see `_run_turn`. A turn of this
        session that a cancelled tool call stopped may still be ending in the daemon (the cancel
        is sent, not awaited): a new turn refused as busy then is tried again for a moment."""
        while True:
            try:
                return await self._run_turn(ctx, sid, make())
            except RpcError as exc:
                stopped = self._cancelled.get(sid)
                if exc.code != SESSION_BUSY or stopped is None or time.monotonic() - stopped > CANCELLED_TURN_GRACE_S:
                    raise
            await anyio.sleep(BUSY_RETRY_S)

    async def _run_turn(self, ctx: ServerRequestContext[Any], sid: str, turn: Turn) -> TurnOutcome:
        """Run a turn to its end: its answer, sources, and how it ended; search rounds reported
        as progress. Cancelled with the tool (the daemon stops the turn)."""
        answer: list[str] = []
        found: dict[str, answers.Found] = {}
        rounds = 0
        progress = Progress(ctx)
        self._asking[sid] = ctx
        try:
            async with turn:
                async for item in turn:
                    update = item.update
                    kind = update.get("sessionUpdate")
                    if kind == "agent_message_chunk":
                        text = (update.get("content") or {}).get("text")
                        if isinstance(text, str):
                            answer.append(text)
                    elif kind == "tool_call" and update.get("kind") == "search":
                        rounds += 1
                        query = (update.get("rawInput") or {}).get("query") if isinstance(update.get("rawInput"), dict) else None
                        await progress.step(f"search round {rounds}" + (f": {query}" if query else ""))
                    elif kind == "tool_call_update":
                        line = last_progress_line(update.get("content"))
                        if line:
                            # A checkpoint's extension goes on in the same call: its rounds come as lines.
                            m = _ROUND_RE.match(line)
                            rounds = max(rounds, int(m.group(1))) if m else rounds
                            await progress.step(line)
                        answers.collect(found, update.get("rawOutput"))
            result = turn.result
        except ConnectionLost:
            self.link.lost()
            raise
        except anyio.get_cancelled_exc_class():
            self._cancelled[sid] = time.monotonic()  # the daemon is stopping the turn (Turn sent the cancel)
            raise
        finally:
            if self._asking.get(sid) is ctx:
                del self._asking[sid]
        text = "".join(answer)
        hitl = result.pending_hitl
        return TurnOutcome(
            sid, "checkpoint" if hitl else "cancelled" if result.stop_reason == "cancelled" else "answered", text,
            answers.sources(text, found, result.citations), rounds, result.invocation_id,
            Checkpoint(hitl.get("message"), hitl["invocation_id"], hitl["interrupt_id"]) if hitl else None,
        )

    # --- writes into Zotero ----------------------------------------------------------------------

    async def _write(self, name: str, ctx: ServerRequestContext[Any], args: Any) -> Made:
        """A write tool: proposed to the daemon, then put to the user (elicitation) before it is made."""
        record: WriteState = await self._call(tools.WRITE_METHODS[name], tools.write_params(args))
        if record.get("state") == "awaiting_consent":
            record = await self._consent(ctx, record)
        return Made(dict(record), schemas.write_text(record))

    async def _with_proposed_writes(self, ctx: ServerRequestContext[Any], sid: str, since: float, made: Made) -> Made:
        """A turn's result, after asking the user about the writes the assistant proposed in it
        (oldest first); each one's fate in `writes` and in the text."""
        listing = await self._call("_zocrates/writes/list", {"pending": True, "sessionId": sid})
        proposed = [w for w in reversed(listing.get("writes", [])) if w.get("state") == "awaiting_consent"
                    and w.get("proposed_by") == "model" and tools.written_since(w, since)]
        if not proposed:
            return made
        fates = [await self._consent(ctx, record) for record in proposed]
        text = made.text + "".join(f"\n\n{schemas.write_text(f)}" for f in fates)
        return Made({**made.structured, "writes": [dict(f) for f in fates]}, text)

    async def _consent(self, ctx: ServerRequestContext[Any], record: WriteState) -> WriteState:
        """Ask the user, through the client, to agree to the write's exact change. Without elicitation
        the write stays waiting, and the result says to confirm it with confirm_write."""
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None or not ctx.session.can_send_request:
            return record
        try:
            answer = await ctx.session.elicit_form(
                f"Zocrates asks to write into your Zotero library:\n\n{record['preview']}", CONSENT_SCHEMA,
                related_request_id=ctx.request_id,
            )
        except Exception as exc:  # the client failed the request: the write stays waiting, as without elicitation
            log.info("zocratesd mcp: elicitation failed (%s); the write waits for confirm_write", escape_for_log(exc))
            return record
        if answer.action != "accept":
            discarded: WriteState = await self._call("_zocrates/writes/discard", {"writeId": record["id"]})
            return discarded
        always = bool((answer.content or {}).get("always"))
        confirmed: WriteState = await self._call("_zocrates/writes/confirm", {"writeId": record["id"], "always": always})
        return confirmed

    async def _confirm_write(self, ctx: ServerRequestContext[Any], a: ConfirmWriteArgs) -> Made:
        method = "_zocrates/writes/confirm" if a.decision == "write" else "_zocrates/writes/discard"
        record = await self._call(method, {"writeId": a.write_id})
        return Made(dict(record), schemas.write_text(record))

    async def _undo(self, ctx: ServerRequestContext[Any], a: UndoArgs) -> Made:
        record = await self._call("_zocrates/writes/undo", {"writeId": a.write_id} if a.write_id else {})
        return Made(dict(record), schemas.write_text(record))

    async def _elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint of a running `ask`: asked through the MCP client's elicitation when it
        offers it (and this request may send one), else declined (the checkpoint stays pending)."""
        ctx = self._asking.get(str(params.get("sessionId")))
        if ctx is None:
            return {"action": "decline"}
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None or not ctx.session.can_send_request:
            return {"action": "decline"}
        try:
            answer = await ctx.session.elicit_form(
                str(params.get("message") or "Research checkpoint"), dict(params.get("requestedSchema") or {}),
                related_request_id=ctx.request_id,
            )
        except Exception as exc:  # the client failed or refused it: as a decline
            log.info("zocratesd mcp: elicitation failed (%s); the checkpoint stays pending", escape_for_log(exc))
            return {"action": "decline"}
        reply: dict[str, Any] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return reply

    # --- resources: the library's items -----------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        # Our cursors are the next page's offset, as digits.
        text = cursor or "0"
        if not (text.isascii() and text.isdigit() and len(text) <= 20 and int(text) <= MAX_OFFSET):
            raise MCPError(types.INVALID_PARAMS, f"bad cursor {escape_for_log(cursor)[:40]}: "
                           "pass the nextCursor of the previous resources/list")
        offset = int(text)
        try:
            page = await self._call("_zocrates/library/items", {"limit": RESOURCES_PAGE, "offset": offset})
        except (LinkDown, ConnectionLost, RpcError) as exc:
            raise MCPError(types.INTERNAL_ERROR, f"cannot list the library: {exc}") from None
        resources = [
            # Names a host shows (and hands its model) are library text: escaped as every tool's text is.
            types.Resource(uri=i["link"], name=schemas.escape_text(i["title"][:200] or i["item_key"]),
                           title=schemas.escape_text(i["title"][:200]) or None,
                           description=schemas.escape_text(" ".join(
                               p for p in (schemas.byline(i), str(i.get("item_type") or "")) if p)) or None,
                           mime_type="text/markdown")
            for i in page.get("items", [])
        ]
        nxt = page.get("next_offset")
        return types.ListResourcesResult(resources=resources, next_cursor=str(nxt) if nxt is not None else None)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template="zotero://select/library/items/{item_key}", name="zotero-item",
                                   title="An item of My Library", mime_type="text/markdown"),
            types.ResourceTemplate(uri_template="zotero://select/groups/{group_id}/items/{item_key}", name="zotero-group-item",
                                   title="An item of a group library", mime_type="text/markdown"),
        ])

    async def read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        m = ITEM_URI_RE.match(uri)
        if m is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"not a Zotero item URI: {escape_for_log(uri)[:120]} "
                           "(zotero://select/library/items/KEY or zotero://select/groups/ID/items/KEY)")
        library = "user" if m.group(1) == "library" else m.group(1)
        try:
            item = await self._item(m.group(2), library)
        except RpcError as exc:
            raise MCPError(RESOURCE_NOT_FOUND if exc.code == RESOURCE_NOT_FOUND else types.INTERNAL_ERROR,
                           exc.detail or exc.message) from None
        except (LinkDown, ConnectionLost) as exc:
            raise MCPError(types.INTERNAL_ERROR, f"cannot reach zocratesd: {exc}") from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type="text/markdown", text=fence(schemas.item_text(item), ITEM_SOURCE))
        ])

    # --- prompts -----------------------------------------------------------------------------------

    async def list_prompts(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[
            types.Prompt(name=p.name, title=p.title, description=p.description, arguments=list(p.arguments))
            for p in PROMPTS.values()
        ])

    async def get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        prompt = PROMPTS.get(params.name)
        if prompt is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {escape_for_log(params.name)[:80]!r}; "
                           "the prompts are: " + ", ".join(PROMPTS))
        args = dict(params.arguments or {})
        for arg in prompt.arguments:
            if arg.required and not str(args.get(arg.name) or "").strip():
                raise MCPError(types.INVALID_PARAMS, f"prompt {params.name} needs the argument {arg.name}")
        text = prompt.render(args)
        return types.GetPromptResult(description=prompt.description, messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        ])


class Progress:
    """One tool call's progress notifications, sent when its client asked for them (a
    `progressToken`): each one's value above the one before, as MCP requires."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.last: float | None = None

    @property
    def wanted(self) -> bool:
        return bool(self.ctx.meta and self.ctx.meta.get("progress_token") is not None)

    async def step(self, message: str) -> None:
        """The next step: one above the last value sent."""
        await self.at((self.last or 0.0) + 1.0, None, message)

    async def at(self, value: float, total: float | None, message: str) -> None:
        """`value` (of `total`), when it is above the last value sent; else nothing is sent."""
        if self.last is not None and value <= self.last:
            return
        self.last = float(value)
        try:  # a client gone meanwhile is not an error
            await self.ctx.session.report_progress(float(value), total, message[:300])
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, MCPError):
            pass


# --- prompts ----------------------------------------------------------------------------------------


def _review(args: dict[str, str]) -> str:
    focus = str(args.get("focus") or "").strip()
    return (
        f"Write a literature review of the Zotero collection {args['collection']!r}"
        + (f", focused on {focus}" if focus else "") + ".\n"
        "1. Call list_collections to find it, then recent_items or search_library with collection set to it to see "
        "what it holds; read the key papers with get_item (their abstracts, notes and annotations).\n"
        "2. Call ask with the collection set, one question per theme you found, following up with the session_id "
        "it returns.\n"
        "3. Write the review: themes, agreements and disagreements, methods, gaps. Cite every claim with the "
        "zotero:// links the tools gave; say plainly where the collection has nothing."
    )


def _compare(args: dict[str, str]) -> str:
    keys = [k for k in re.split(r"[\s,;]+", str(args["item_keys"])) if k]
    aspect = str(args.get("aspect") or "").strip()
    return (
        f"Compare these papers of the user's Zotero library: {', '.join(keys)}"
        + (f", on {aspect}" if aspect else "") + ".\n"
        "1. Read each with get_item (abstract, notes, annotations; fulltext=true where the abstract is not enough).\n"
        f"2. Call ask with item_keys={keys} and the question \"How do these papers compare"
        + (f" on {aspect}" if aspect else "") + "?\" for Zocrates' cited side-by-side answer.\n"
        "3. Present a table (question, method, data, findings, limits) and a short verdict, citing the zotero:// links."
    )


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[types.PromptArgument, ...]
    render: Callable[[dict[str, str]], str]


PROMPTS: Final = {p.name: p for p in (
    Prompt("literature_review", "Literature review of a collection",
           "A cited literature review of one Zotero collection, from its papers, notes and annotations.",
           (types.PromptArgument(name="collection", description="The collection's name, path or key.", required=True),
            types.PromptArgument(name="focus", description="A theme or question to focus on (optional).", required=False)),
           _review),
    Prompt("compare_papers", "Compare these papers", "A side-by-side comparison of some Zotero items, cited.",
           (types.PromptArgument(name="item_keys", description="Zotero item keys, separated by commas or spaces.", required=True),
            types.PromptArgument(name="aspect", description="What to compare them on (optional).", required=False)),
           _compare),
)}
