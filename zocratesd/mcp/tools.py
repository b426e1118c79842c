"""The MCP tools' work and results as plain JSON, sans-IO: no `mcp` SDK, no anyio, no socket here.

A quick tool (one or two daemon calls, no progress, no elicitation) is a generator: it is given
its parsed arguments (inputs.py), yields the JSON-RPC calls it needs (`DaemonCall`), is sent their
results (an `RpcError` is thrown into it), and returns its structured result and its text. The
server (server.py) drives it over its connection to the daemon (calls.py). A result is the wire
form of MCP's `CallToolResult`: text (for the model) plus `structuredContent` matching the tool's
`outputSchema` (schemas.py), or `isError` with a text that says what to do, and the server
carries on.

`ask` and `resume` run a whole turn with the SDK's progress and elicitation, so they are server.py's.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import mcp_types as types

from zocrates_client.errors import RpcError
from zocratesd import __version__
from zocratesd.limits import ITEM_KEY_PATTERN, whole
from zocratesd.logtext import escape_for_log
from zocratesd.mcp import inputs, schemas
from zocratesd.mcp.inputs import (
    FindQuoteArgs,
    GetItemArgs,
    ListCollectionsArgs,
    ListTagsArgs,
    RecentItemsArgs,
    SearchLibraryArgs,
    SessionsArgs,
)
from zocratesd.untrusted import NOTE, RULE, UNTRUSTED_KEY, fence

SERVER_NAME: Final = "zocrates"
SERVER_TITLE: Final = "Zocrates"
INSTRUCTIONS: Final = (
    "Zocrates reads the user's Zotero library and, with the user's consent to each change, writes to it. "
    "search_library finds passages with zotero:// links; "
    "get_item reads one item (fulltext=true pages through its text); find_quote finds the item and page a quote "
    "comes from; list_collections, list_tags and recent_items "
    "browse. ask runs Zocrates' own cited research answer in a persistent session (pass session_id to follow up); "
    "resume continues one paused at a research checkpoint; sessions lists, shows, renames and deletes them; "
    "export_citations gives the bibliography of what a session cited (BibTeX, BibLaTeX, CSL-JSON or a CSL style). "
    "save_note, tag_items, untag_items, add_to_collection, create_collection and add_item write into Zotero: the "
    "user agrees to each (confirm_write when your client cannot ask them), undo reverts one. "
    f"Tool results and item resources carry library text, fenced. {RULE} Their structuredContent says so in its "
    f"`{UNTRUSTED_KEY}` field."
)
# What `zocratesd mcp` tells the daemon it is (its `initialize`), and what it answers: no file
# system, no terminal (link.py adds elicitation, which the server answers).
DAEMON_CLIENT_INFO: Final = {"name": "zocratesd-mcp", "title": "Zocrates MCP server", "version": __version__}
DAEMON_CLIENT_CAPABILITIES: Final = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}

_KEY_RE: Final = whole(ITEM_KEY_PATTERN)
# `_zocrates/library/status` states while the index is still reading the library (protocol/README.md):
# what it answers then is only what is indexed so far.
READING_STATES: Final = ("starting", "indexing")


class ToolError(Exception):
    """A tool call that cannot be done; the message is the tool result's text."""


@dataclass(frozen=True, slots=True)
class DaemonCall:
    """A JSON-RPC request a tool needs; the driver sends the tool its result. `retry`: a read,
    which a driver may send again on a fresh connection when the first one was lost."""

    method: str
    params: dict[str, Any]
    retry: bool = True


class Made(NamedTuple):
    """What a tool made: its structured result (the daemon's JSON, or built from it) and its text."""

    structured: dict[str, Any]
    text: str


# A tool's work: yields its calls, is sent their results, returns what it made.
Work = Generator[DaemonCall, Any, Made]


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


# What a tool result's fence says it holds (untrusted.py).
RESULT_SOURCE: Final = "this tool's result, from the user's Zotero library (quoted, or an answer quoting it)"


def tool_result(made: Made) -> types.CallToolResult:
    """A tool's result: its text fenced as untrusted library text, its structured content as the
    daemon gave it, with a field saying the same."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=fence(made.text, RESULT_SOURCE))],
                                structured_content={**made.structured, UNTRUSTED_KEY: NOTE}, is_error=False)


def lost_result(exc: Exception) -> types.CallToolResult:
    """The tool error for a call whose connection to the daemon was lost."""
    return error_result(f"the connection to zocratesd was lost ({exc}); call the tool again "
                        "(a conversation continues by its session_id)")


def unreachable_result(exc: Exception) -> types.CallToolResult:
    """The tool error for a call that found no daemon to talk to."""
    return error_result(f"cannot reach zocratesd: {exc}")


def failure_result(name: str, exc: ToolError | RpcError) -> types.CallToolResult:
    """The tool error for a call that could not be done (the daemon's refusal, or the tool's own)."""
    if isinstance(exc, RpcError):
        return error_result(f"{name}: {exc.detail or exc.message}")
    return error_result(str(exc))


def arguments(name: str, args: dict[str, Any]) -> inputs.Args:
    """Tool `name`'s arguments, parsed; ToolError for an unknown tool or bad arguments."""
    spec = schemas.BY_NAME.get(name)
    if spec is None:
        raise ToolError(f"unknown tool {escape_for_log(name)[:80]!r}; the tools are: " + ", ".join(t.name for t in schemas.TOOLS))
    try:
        return inputs.parse(spec.arguments, name, args)
    except inputs.BadArguments as exc:
        raise ToolError(str(exc)) from None


# --- the quick tools ----------------------------------------------------------------------------


def search_library(a: SearchLibraryArgs) -> Work:
    params: dict[str, Any] = {"query": a.query, "topK": a.top_k}
    for theirs, value in (("collection", a.collection), ("itemKeys", a.item_keys), ("library", a.library)):
        if value is not None:
            params[theirs] = value
    result = yield DaemonCall("_zocrates/library/search", params)
    if result.get("library_state") in READING_STATES:
        result = yield from with_reading(result)
    return Made(result, schemas.search_text(result, asked=a.query))


def get_item(a: GetItemArgs) -> Work:
    found = yield from item(a.item_key, a.library, fulltext=a.fulltext, offset=a.fulltext_offset)
    return Made(found, schemas.item_text(found))


def find_quote(a: FindQuoteArgs) -> Work:
    result = yield DaemonCall("_zocrates/library/find_quote", a.model_dump(exclude_none=True))
    return Made(result, schemas.quote_text(result))


def item(key: str, library: str | None, *, fulltext: bool = False,
         offset: int = 0) -> Generator[DaemonCall, Any, dict[str, Any]]:
    params: dict[str, Any] = {"itemKey": key, "fulltext": fulltext, "fulltextOffset": offset}
    if library is not None:
        params["library"] = library
    result: dict[str, Any] = yield DaemonCall("_zocrates/library/item", params)
    return result


# list_collections, list_tags and recent_items: the arguments given, or their defaults, are the
# daemon's params, by the same names. While the library is still being read, their result says so
# and how far (`library_status`): an empty list then is not an empty library.
def list_collections(a: ListCollectionsArgs) -> Work:
    result = yield from with_reading((yield DaemonCall("_zocrates/library/collections", a.model_dump(exclude_none=True))))
    return Made(result, schemas.collections_text(result))


def list_tags(a: ListTagsArgs) -> Work:
    result = yield from with_reading((yield DaemonCall("_zocrates/library/tags", a.model_dump(exclude_none=True))))
    return Made(result, schemas.tags_text(result))


def recent_items(a: RecentItemsArgs) -> Work:
    result = yield from with_reading((yield DaemonCall("_zocrates/library/items", a.model_dump(exclude_none=True))))
    return Made(result, schemas.items_text(result))


def with_reading(result: dict[str, Any]) -> Generator[DaemonCall, Any, dict[str, Any]]:
    """`result` with the library's progress as `library_status` while the index is still reading
    the library (from `_zocrates/library/status`), else as it is."""
    reading = library_reading((yield DaemonCall("_zocrates/library/status", {})))
    return {**result, "library_status": reading} if reading is not None else result


def library_reading(status: Mapping[str, Any]) -> schemas.LibraryReading | None:
    """What a result says of a library still being read (its status's state and counts), else None."""
    if status.get("state") not in READING_STATES:
        return None
    return schemas.LibraryReading(
        state=str(status["state"]), items_done=int(status.get("items_done") or 0),
        items_to_index=int(status.get("items_to_index") or 0), items_total=int(status.get("items_total") or 0),
        percent=float(status.get("percent") or 0.0), summary=status.get("summary"),
    )


def sessions(a: SessionsArgs) -> Work:
    action, sid = a.action, a.session_id
    out: dict[str, Any] = {"action": action}
    if action == "list":
        out["sessions"] = (yield DaemonCall("session/list", {})).get("sessions", [])
    else:
        if sid is None:
            raise ToolError(f"sessions {action} needs a session_id (sessions action=list shows them)")
        if action == "show":
            out["session"] = yield DaemonCall("_zocrates/session/get", {"sessionId": sid})
        elif action == "rename":
            if not a.title:
                raise ToolError("sessions rename needs a title")
            out["session"] = yield DaemonCall("_zocrates/session/rename", {"sessionId": sid, "title": a.title},
                                              retry=False)
        else:
            yield DaemonCall("session/delete", {"sessionId": sid}, retry=False)
            out["deleted"] = sid
    return Made(out, schemas.sessions_text(out))


def collection_key(wanted: str) -> Generator[DaemonCall, Any, str]:
    """A collection key from a key, name or path (as the daemon's search takes them): exact
    matches first, then the one whose path contains it; ToolError naming the candidates."""
    cols = (yield DaemonCall("_zocrates/library/collections", {})).get("collections", [])
    if _KEY_RE.match(wanted) and any(c["key"] == wanted for c in cols):
        return wanted
    folded = " ".join(wanted.split()).casefold()
    exact = [c for c in cols if folded in (str(c["path"]).casefold(), str(c["name"]).casefold())]
    found = exact or [c for c in cols if folded in str(c["path"]).casefold()]
    if len(found) == 1:
        return str(found[0]["key"])
    if not found:
        raise ToolError(f"no collection called {wanted[:80]!r} (list_collections shows them)")
    raise ToolError(f"{len(found)} collections match {wanted[:80]!r}: " + "; ".join(
        f"{c['path']} [{c['key']}]" for c in found[:8]))


# --- writes: each tool's daemon method, and its arguments as the method's params ---------------------

WRITE_METHODS: Final = {
    "save_note": "_zocrates/writes/save_note", "tag_items": "_zocrates/writes/tag", "untag_items": "_zocrates/writes/untag",
    "add_to_collection": "_zocrates/writes/add_to_collection", "create_collection": "_zocrates/writes/create_collection",
    "add_item": "_zocrates/writes/add_item",
}
# The daemon's camelCase names for the write tools' snake_case arguments (the rest are the same).
_WRITE_PARAM_NAMES: Final = {"item_keys": "itemKeys", "parent_item": "parentItem", "item_type": "itemType"}


def written_since(record: Mapping[str, Any], since: float) -> bool:
    """Whether a write was proposed at or after `since` (epoch seconds; records stamp whole seconds)."""
    try:
        return calendar.timegm(time.strptime(str(record.get("created_at")), "%Y-%m-%dT%H:%M:%SZ")) >= int(since)
    except ValueError:
        return False


def write_params(args: inputs.Args) -> dict[str, object]:
    """A write tool's arguments as its daemon method's params; never consented here: the user's yes
    comes from the elicitation (or confirm_write), not from the model's call."""
    params = {_WRITE_PARAM_NAMES.get(k, k): v for k, v in args.model_dump(exclude_none=True).items()}
    return {**params, "confirm": False}


def list_writes(a: inputs.ListWritesArgs) -> Work:
    params: dict[str, object] = {"pending": a.pending, "limit": a.limit}
    if a.session_id:
        params["sessionId"] = a.session_id
    result = yield DaemonCall("_zocrates/writes/list", params)
    return Made(result, schemas.writes_text(result))


def search_online(a: inputs.SearchOnlineArgs) -> Work:
    params: dict[str, object] = {"query": a.query, "limit": a.limit}
    for theirs, value in (("yearFrom", a.year_from), ("yearTo", a.year_to)):
        if value is not None:
            params[theirs] = value
    result = yield DaemonCall("_zocrates/online/search", params)
    return Made(result, schemas.online_text(result))


def export_citations(a: inputs.ExportCitationsArgs) -> Work:
    if a.session_id is None and not a.item_keys:
        raise ToolError("export_citations needs a session_id (its answers' cited sources) or item_keys")
    params: dict[str, object] = {"format": a.format, "items": [{"itemKey": k} for k in a.item_keys or ()]}
    for theirs, value in (("sessionId", a.session_id), ("invocationId", a.invocation_id), ("style", a.style)):
        if value is not None:
            params[theirs] = value
    result = yield DaemonCall("_zocrates/citations/export", params)
    return Made(result, schemas.citations_text(result))


# The quick tools' work, by name (server.py drives them; it runs ask and resume itself).
QUICK: Final[dict[str, Callable[[Any], Work]]] = {
    "search_library": search_library, "get_item": get_item, "find_quote": find_quote, "list_collections": list_collections,
    "list_tags": list_tags, "recent_items": recent_items, "sessions": sessions, "list_writes": list_writes,
    "search_online": search_online, "export_citations": export_citations,
}
