"""Face-neutral updates (updates.py) as ACP `session/update` payloads.

Used for both `session/load` replays and live turns, so an editor sees the same conversation
either way. Text chunks carry the stored event's id as `messageId`.
"""

from __future__ import annotations

from typing import Any

from zocratesd.updates import Update
from zocratesd.store.ui import REQUEST_INPUT_CALL

Json = dict[str, Any]

# ACP tool kinds (read|edit|delete|move|search|execute|think|fetch|other), by our tool names.
TOOL_KINDS: dict[str, str] = {
    "search_library": "search",
    "search_online_literature": "fetch",
    REQUEST_INPUT_CALL: "think",
}


def _chunk(kind: str, text: str, message_id: str | None) -> Json:
    update: Json = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id:
        update["messageId"] = message_id
    return update


def to_acp(u: Update) -> Json | None:
    """The ACP `update` for one neutral update (None: nothing to say over ACP)."""
    kind = u["kind"]
    if kind == "message":
        return _chunk("user_message_chunk" if u["role"] == "user" else "agent_message_chunk", u["text"], u["message_id"])
    if kind == "thought":
        return _chunk("agent_thought_chunk", u["text"], u["message_id"])
    if kind == "tool_call":
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": u["call_id"],
            "title": u["name"],
            "kind": TOOL_KINDS.get(u["name"], "other"),
            "status": "in_progress",
            "rawInput": u["args"],
        }
    if kind == "tool_result":
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": u["call_id"],
            "status": "failed" if u["failed"] else "completed",
            "rawOutput": u["response"],
        }
    if kind == "tool_progress":
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": u["call_id"],
            "content": [{"type": "content", "content": {"type": "text", "text": u["text"]}}],
        }
    if kind == "checkpoint":
        # A research checkpoint: a `think` tool call waiting on the user (session/request_permission).
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": checkpoint_call_id(u),
            "title": u.get("message") or "Research checkpoint",
            "kind": "think",
            "status": "pending",
            "rawInput": u.get("payload"),
        }
    if kind == "checkpoint_answered":
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": checkpoint_call_id(u),
            "status": "completed",
            "rawOutput": u.get("response"),
        }
    if kind == "title":
        return session_info_update(u["title"])
    if kind == "usage":
        return {
            "sessionUpdate": "usage_update",
            "used": u["prompt_tokens"],
            "size": u["context_size"],
            "_meta": {"zocrates": {"compactionMs": u["compaction_ms"], "compacted": u["compacted"]}},
        }
    return None


def checkpoint_call_id(checkpoint: Json) -> str:
    """The tool-call id of a checkpoint: interrupt ids repeat across turns (`interrupt_ext_1`), ACP
    tool-call ids must not, so the invocation is part of it."""
    return f"{checkpoint['interrupt_id']}@{checkpoint['invocation_id']}"


def session_info_update(title: str) -> Json:
    return {"sessionUpdate": "session_info_update", "title": title}


def session_info(row: Any, default_cwd: str) -> Json:
    """A `SessionInfo` of `session/list` from a store SessionRow."""
    return {
        "sessionId": row.id,
        "cwd": row.cwd or default_cwd,
        "title": row.title,
        "updatedAt": row.updated_iso,
        "_meta": {"zocrates": {"createdAt": row.created_at}},
    }
