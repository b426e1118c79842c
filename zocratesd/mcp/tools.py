"""The MCP tools' work and results as plain JSON, sans-IO: no `mcp` SDK, no anyio, no socket here.

A quick tool (one or two daemon calls, no progress, no elicitation) is a generator: it yields the
JSON-RPC calls it needs (`DaemonCall`) and is sent their results (an `RpcError` is thrown into
it), and returns its `CallToolResult`. Whoever holds a connection drives it: the cold face
(cold.py, a blocking client in a selectors loop, answering before asyncio or the SDK is loaded)
and the async `Tools` (calls.py, the anyio face's early path and the SDK's server), so a
`tools/call` answers the same whichever of them takes it. A result is the wire form of MCP's
`CallToolResult`: text (for the model) plus `structuredContent` matching the tool's
`outputSchema` (schemas.py), or `isError` with a text that says what to do, and the server
carries on. `tools/list` and `initialize`'s result are built here too, the same way.

`ask` and `resume` run a whole turn with the SDK's progress and elicitation, so they are server.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from zocrates_client.errors import RpcError
from zocratesd import __version__
from zocratesd.limits import ITEM_KEY_PATTERN, whole
from zocratesd.logtext import escape_for_log
from zocratesd.mcp import schemas
from zocratesd.untrusted import NOTE, RULE, UNTRUSTED_KEY, fence

if TYPE_CHECKING:
    import jsonschema  # type: ignore[import-untyped]  # the mcp SDK's own dependency; no stubs


SERVER_NAME: Final = "zocrates"
SERVER_TITLE: Final = "Zocrates"
INSTRUCTIONS: Final = (
    "Zocrates reads the user's Zotero library (read-only). search_library finds passages with zotero:// links; "
    "get_item reads one item (fulltext=true pages through its text); list_collections, list_tags and recent_items "
    "browse. ask runs Zocrates' own cited research answer in a persistent session (pass session_id to follow up); "
    "resume continues one paused at a research checkpoint; sessions lists, shows, renames and deletes them. "
    f"Tool results and item resources carry library text, fenced. {RULE} Their structuredContent says so in its "
    f"`{UNTRUSTED_KEY}` field."
)
# What the server offers at `initialize` (tools, the item resources, prompts; no list-changed
# notifications, no resource subscriptions): what the SDK derives from server.py's handlers.
CAPABILITIES: Final = {
    "prompts": {"listChanged": False}, "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}
# The protocol versions of the `initialize` handshake, as the pinned SDK (mcp_types.version,
# HANDSHAKE_PROTOCOL_VERSIONS) negotiates them: the client's when it is one of these, else the
# newest. tests/unit/mcp/test_early.py checks them against the SDK's.
HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_PROTOCOL_VERSIONS[-1]

# What the faces tell the daemon they are (its `initialize`), and what they answer: no file
# system, no terminal (link.py adds elicitation for the SDK's server, which answers it).
DAEMON_CLIENT_INFO: Final = {"name": "zocratesd-mcp", "title": "Zocrates MCP server", "version": __version__}
DAEMON_CLIENT_CAPABILITIES: Final = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}

_KEY_RE: Final = whole(ITEM_KEY_PATTERN)
_INPUT_SCHEMAS: Final = {t["name"]: t["inputSchema"] for t in schemas.TOOLS}
# The keywords `_surely_valid` knows; a schema with any other (but these annotations) goes to jsonschema.
_CHECKED: Final = frozenset({"type", "properties", "required", "additionalProperties", "minLength", "maxLength",
                             "pattern", "minimum", "maximum", "enum", "items", "minItems", "maxItems"})
_ANNOTATIONS: Final = frozenset({"description", "default", "title"})
_TYPES: Final[dict[str, type | tuple[type, ...]]] = {"object": dict, "array": list, "string": str, "integer": int,
                                                     "boolean": bool, "number": (int, float)}


class ToolError(Exception):
    """A tool call that cannot be done; the message is the tool result's text."""


@dataclass(frozen=True, slots=True)
class DaemonCall:
    """A JSON-RPC request a tool needs; the driver sends the tool its result. `retry`: a read,
    which a driver may send again on a fresh connection when the first one was lost."""

    method: str
    params: dict[str, Any]
    retry: bool = True


# A tool's work: yields its calls, is sent their results, returns what it made.
Work = Generator[DaemonCall, Any, tuple[dict[str, Any], str]]
# A whole `tools/call`: returns the CallToolResult (errors included).
ToolRun = Generator[DaemonCall, Any, dict[str, Any]]


def initialize_result(requested: str) -> dict[str, Any]:
    """`initialize`'s result for a client asking for protocol version `requested`."""
    return {
        "protocolVersion": requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION,
        "capabilities": CAPABILITIES,
        "serverInfo": {"name": SERVER_NAME, "title": SERVER_TITLE, "version": __version__},
        "instructions": INSTRUCTIONS,
    }


def tool_list() -> list[dict[str, Any]]:
    """`tools/list`'s tools: schemas and annotations (read-only ones say so)."""
    return [
        {
            "name": t["name"], "title": t["title"], "description": t["description"], "inputSchema": t["inputSchema"],
            "outputSchema": t["outputSchema"],
            "annotations": {
                "title": t["title"], "readOnlyHint": t["name"] in schemas.READ_ONLY,
                "destructiveHint": t["name"] == "sessions", "idempotentHint": t["name"] in schemas.READ_ONLY,
                "openWorldHint": False,
            },
        }
        for t in schemas.TOOLS
    ]


def error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


# What a tool result's fence says it holds (untrusted.py).
RESULT_SOURCE: Final = "this tool's result, from the user's Zotero library (quoted, or an answer quoting it)"


def tool_result(structured: dict[str, Any], text: str) -> dict[str, Any]:
    """A tool's result: its text fenced as untrusted library text, its structured content as the
    daemon gave it, with a field saying the same."""
    return {"content": [{"type": "text", "text": fence(text, RESULT_SOURCE)}],
            "structuredContent": {**structured, UNTRUSTED_KEY: NOTE}, "isError": False}


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    """jsonschema's validator of a tool's arguments, made when first needed: importing jsonschema
    (~75 ms: referencing, attrs, its meta-schemas) is most of what a cold face's first tool call
    would wait for, and `_surely_valid` spares it for arguments that are plainly right."""
    import jsonschema

    def pattern(validator: Any, wanted: str, instance: Any, schema: dict[str, Any]) -> Any:
        # JSON Schema's `$` is the end of the input; jsonschema's `re.search` lets a final newline through.
        if isinstance(instance, str) and whole(wanted).search(instance) is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {wanted!r}")

    checker = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": pattern})
    return checker(_INPUT_SCHEMAS[name])


def _surely_valid(schema: dict[str, Any], value: Any) -> bool:
    """True only when `value` is valid against `schema` (a subset of JSON Schema 2020-12: the
    keywords of schemas.py's inputs); False when invalid or not sure, and jsonschema judges (and
    words the error). Conservative: a float where an integer is asked, a keyword it does not know."""
    if not _CHECKED.issuperset(schema.keys() - _ANNOTATIONS):
        return False
    kind = schema.get("type")
    if kind is not None:
        wanted = _TYPES.get(kind)
        if wanted is None or not isinstance(value, wanted) or (isinstance(value, bool) and kind != "boolean"):
            return False
    if "enum" in schema and not any(type(value) is type(v) and value == v for v in schema["enum"]):
        return False
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return False
        if "pattern" in schema and whole(schema["pattern"]).search(value) is None:
            return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            return False
        items = schema.get("items")
        if items is not None and not all(_surely_valid(items, v) for v in value):
            return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", ())):
            return False
        if schema.get("additionalProperties", True) is not True and any(k not in props for k in value):
            return False
        if not all(_surely_valid(props[k], v) for k, v in value.items() if k in props):
            return False
    return True


def _argument_error(name: str, error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "arguments"
    return f"invalid arguments for {name}: {where}: {escape_for_log(error.message)[:300]}"


def check_arguments(name: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """The error result for an unknown tool or bad arguments, or None when they are fine."""
    schema = _INPUT_SCHEMAS.get(name)
    if schema is None:
        return error_result(f"unknown tool {escape_for_log(name)[:80]!r}; the tools are: "
                            + ", ".join(t["name"] for t in schemas.TOOLS))
    if not _surely_valid(schema, args):
        errors = _validator(name).iter_errors(args)
        error = next(iter(sorted(errors, key=lambda e: list(e.absolute_path))), None)
        if error is not None:
            return error_result(_argument_error(name, error))
    return None


def lost_result(exc: Exception) -> dict[str, Any]:
    """The tool error for a call whose connection to the daemon was lost."""
    return error_result(f"the connection to zocratesd was lost ({exc}); call the tool again "
                        "(a conversation continues by its session_id)")


def unreachable_result(exc: Exception) -> dict[str, Any]:
    """The tool error for a call that found no daemon to talk to."""
    return error_result(f"cannot reach zocratesd: {exc}")


def failure_result(name: str, exc: ToolError | RpcError) -> dict[str, Any]:
    """The tool error for a call that could not be done (the daemon's refusal, or the tool's own)."""
    if isinstance(exc, RpcError):
        return error_result(f"{name}: {exc.detail or exc.message}")
    return error_result(str(exc))


def run(name: str, args: dict[str, Any]) -> ToolRun:
    """`tools/call` of a quick tool (or of an unknown one, or with bad arguments: a tool error).
    The driver handles only the connection's failures (lost, cannot connect)."""
    bad = check_arguments(name, args)
    if bad is not None:
        return bad
    work = QUICK.get(name)
    if work is None:  # ask, resume: not a quick tool (early.py never sends them here)
        return error_result(f"{name} is not a quick tool")
    try:
        structured, text = yield from work(args)
    except (ToolError, RpcError) as exc:
        return failure_result(name, exc)
    return tool_result(structured, text)


# --- the quick tools ----------------------------------------------------------------------------


def search_library(a: dict[str, Any]) -> Work:
    params: dict[str, Any] = {"query": a["query"], "topK": a.get("top_k", 10)}
    for ours, theirs in (("collection", "collection"), ("item_keys", "itemKeys"), ("library", "library")):
        if a.get(ours) is not None:
            params[theirs] = a[ours]
    result = yield DaemonCall("_zocrates/library/search", params)
    return result, schemas.search_text(result)


def get_item(a: dict[str, Any]) -> Work:
    found = yield from item(a["item_key"], a.get("library"), fulltext=a.get("fulltext", False),
                            offset=a.get("fulltext_offset", 0))
    return found, schemas.item_text(found)


def item(key: str, library: str | None, *, fulltext: bool = False,
         offset: int = 0) -> Generator[DaemonCall, Any, dict[str, Any]]:
    params: dict[str, Any] = {"itemKey": key, "fulltext": fulltext, "fulltextOffset": offset}
    if library is not None:
        params["library"] = library
    result: dict[str, Any] = yield DaemonCall("_zocrates/library/item", params)
    return result


def list_collections(a: dict[str, Any]) -> Work:
    result = yield DaemonCall("_zocrates/library/collections", {k: v for k, v in a.items() if k == "library"})
    return result, schemas.collections_text(result)


def list_tags(a: dict[str, Any]) -> Work:
    result = yield DaemonCall("_zocrates/library/tags", {"limit": 20, **a})
    return result, schemas.tags_text(result)


def recent_items(a: dict[str, Any]) -> Work:
    result = yield DaemonCall("_zocrates/library/items", {"limit": 20, **a})
    return result, schemas.items_text(result)


def sessions(a: dict[str, Any]) -> Work:
    action, sid = a["action"], a.get("session_id")
    out: dict[str, Any] = {"action": action}
    if action == "list":
        out["sessions"] = (yield DaemonCall("session/list", {})).get("sessions", [])
    else:
        if sid is None:
            raise ToolError(f"sessions {action} needs a session_id (sessions action=list shows them)")
        if action == "show":
            out["session"] = yield DaemonCall("_zocrates/session/get", {"sessionId": sid})
        elif action == "rename":
            if not a.get("title"):
                raise ToolError("sessions rename needs a title")
            out["session"] = yield DaemonCall("_zocrates/session/rename", {"sessionId": sid, "title": a["title"]},
                                              retry=False)
        else:
            yield DaemonCall("session/delete", {"sessionId": sid}, retry=False)
            out["deleted"] = sid
    return out, schemas.sessions_text(out)


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


QUICK: Final[dict[str, Callable[[dict[str, Any]], Work]]] = {
    "search_library": search_library, "get_item": get_item, "list_collections": list_collections,
    "list_tags": list_tags, "recent_items": recent_items, "sessions": sessions,
}
# The tools the early path may run before the SDK is loaded: no progress, no elicitation, no turn.
QUICK_TOOLS: Final = frozenset(QUICK)
