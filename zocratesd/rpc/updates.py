"""Stored events as ACP `session/update` payloads (the `update` object of the notification).

Used by `session/load` to replay a history. It follows the UI's rules (store/ui.py `is_shown`:
no rewound, compaction, partial or isolation-scoped events) and adds the tool calls the UI
leaves out, so an editor shows the same conversation the Zotero sidebar shows, plus its tools.
Every chunk carries the stored event's id as `messageId`, so a client can tie chunks to messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from zocratesd.store.ui import REQUEST_INPUT_CALL, Json, is_shown

# ACP tool kinds (read|edit|delete|move|search|execute|think|fetch|other), by our tool names.
TOOL_KINDS: dict[str, str] = {
    "search_library": "search",
    "search_online_literature": "fetch",
    REQUEST_INPUT_CALL: "think",
}


def _text_chunk(kind: str, text: str, message_id: str | None) -> Json:
    update: Json = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id:
        update["messageId"] = message_id
    return update


def event_updates(ev: Json) -> Iterator[Json]:
    """The updates one stored event contributes, in part order."""
    if not is_shown(ev):
        return
    parts = (ev.get("content") or {}).get("parts") or []
    user = ev.get("author") == "user"
    message_id = ev.get("id")
    for part in parts:
        text = part.get("text")
        if text:
            if user:
                yield _text_chunk("user_message_chunk", text, message_id)
            elif part.get("thought"):
                yield _text_chunk("agent_thought_chunk", text, message_id)
            else:
                yield _text_chunk("agent_message_chunk", text, message_id)
        fc = part.get("function_call")
        if fc and fc.get("id"):
            name = fc.get("name") or "tool"
            yield {
                "sessionUpdate": "tool_call",
                "toolCallId": fc["id"],
                "title": name,
                "kind": TOOL_KINDS.get(name, "other"),
                "status": "in_progress",
                "rawInput": fc.get("args") or {},
            }
        fr = part.get("function_response")
        if fr and fr.get("id"):
            response = fr.get("response") or {}
            failed = isinstance(response, dict) and "error" in response
            yield {
                "sessionUpdate": "tool_call_update",
                "toolCallId": fr["id"],
                "status": "failed" if failed else "completed",
                "rawOutput": response,
            }


def history_updates(live: Iterable[Json]) -> Iterator[Json]:
    for ev in live:
        yield from event_updates(ev)


def session_info_update(title: str, updated_at_iso: str | None = None) -> Json:
    update: Json = {"sessionUpdate": "session_info_update", "title": title}
    if updated_at_iso:
        update["updatedAt"] = updated_at_iso
    return update


def session_info(row: Any, default_cwd: str) -> Json:
    """A `SessionInfo` of `session/list` from a store SessionRow."""
    return {
        "sessionId": row.id,
        "cwd": row.cwd or default_cwd,
        "title": row.title,
        "updatedAt": row.updated_iso,
        "_meta": {"zocrates": {"createdAt": row.created_at}},
    }
