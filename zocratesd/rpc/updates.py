"""Face-neutral updates (updates.py) as ACP `session/update` payloads.

Used for both `session/load` replays and live turns, so an editor sees the same conversation
either way. Text chunks carry the stored event's id as `messageId`.
"""

from __future__ import annotations

from typing import Any, assert_never

from zocratesd.store.ui import REQUEST_INPUT_CALL
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    ConfigOption,
    ConfigOptions,
    Json,
    MessageChunk,
    Starting,
    ThoughtChunk,
    Title,
    ToolCall,
    ToolProgress,
    ToolResult,
    Update,
    Usage,
)

# ACP tool kinds (read|edit|delete|move|search|execute|think|fetch|other), by our tool names.
TOOL_KINDS: dict[str, str] = {
    "search_library": "search",
    # Beyond the library: the editor shows it as a fetch from the web (and may ask about such calls).
    "search_online_literature": "fetch",
    REQUEST_INPUT_CALL: "think",
}


def _chunk(kind: str, text: str, message_id: str | None) -> Json:
    update: Json = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id:
        update["messageId"] = message_id
    return update


def to_acp(u: Update, *, booleans: bool = False) -> Json:
    """The ACP `update` (a `session/update`'s) for one neutral update; every kind has one.
    `booleans`: the client takes boolean config options (`session.configOptions.boolean`)."""
    # Class patterns without captures, then attributes: capturing keyword patterns are slower, and a
    # long session/load translates thousands of these (bench/PROFILE.md).
    match u:
        case MessageChunk():
            return _chunk("user_message_chunk" if u.role == "user" else "agent_message_chunk", u.text, u.message_id)
        case ThoughtChunk():
            return _chunk("agent_thought_chunk", u.text, u.message_id)
        case ToolCall():
            return {
                "sessionUpdate": "tool_call",
                "toolCallId": u.call_id,
                "title": u.name,
                "kind": TOOL_KINDS.get(u.name, "other"),
                "status": "in_progress",
                "rawInput": u.args,
            }
        case ToolResult():
            return {
                "sessionUpdate": "tool_call_update",
                "toolCallId": u.call_id,
                "status": "failed" if u.failed else "completed",
                "rawOutput": u.response,
            }
        case ToolProgress():
            return {
                "sessionUpdate": "tool_call_update",
                "toolCallId": u.call_id,
                "content": [{"type": "content", "content": {"type": "text", "text": u.text}}],
            }
        case Checkpoint():
            # A research checkpoint: a `think` tool call waiting on the user (session/request_permission).
            return {
                "sessionUpdate": "tool_call",
                "toolCallId": checkpoint_call_id(u.interrupt_id, u.invocation_id),
                "title": u.message or "Research checkpoint",
                "kind": "think",
                "status": "pending",
                "rawInput": u.payload,
            }
        case CheckpointAnswered():
            return {
                "sessionUpdate": "tool_call_update",
                "toolCallId": checkpoint_call_id(u.interrupt_id, u.invocation_id),
                "status": "completed",
                "rawOutput": u.response,
            }
        case Title():
            return session_info_update(u.title)
        case Usage():
            ours: Json = {
                "compactionMs": u.compaction_ms, "compacted": u.compacted, "reason": u.reason,
                "tokensEstimated": u.tokens_estimated,
            }
            if u.model_tokens is not None:
                ours["modelTokens"] = {
                    k: u.model_tokens[src] for k, src in
                    (("prompt", "prompt_token_count"), ("completion", "candidates_token_count"), ("total", "total_token_count"))
                    if isinstance(u.model_tokens.get(src), int)
                }
            return {"sessionUpdate": "usage_update", "used": u.prompt_tokens, "size": u.context_size, "_meta": {"zocrates": ours}}
        case ConfigOptions():
            return {"sessionUpdate": "config_option_update", "configOptions": config_options(u.options, booleans=booleans)}
        case Starting():
            # ACP has no progress update: a thought is what every editor shows while a turn works.
            return {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": u.text},
                    "_meta": {"zocrates": {"starting": True}}}
        case _:
            assert_never(u)


def config_options(options: tuple[ConfigOption, ...], *, booleans: bool) -> list[Json]:
    """ACP `SessionConfigOption`s. A boolean setting is a `boolean` option only for a client that
    advertised `session.configOptions.boolean`; for any other it is a select of "on" and "off"."""
    out: list[Json] = []
    for o in options:
        shown: Json = {"id": o.id, "name": o.name, "description": o.description, "category": o.category}
        if isinstance(o.current, bool):
            if booleans:
                shown |= {"type": "boolean", "currentValue": o.current}
            else:
                shown |= {"type": "select", "currentValue": "on" if o.current else "off",
                          "options": [{"value": "on", "name": "On"}, {"value": "off", "name": "Off"}]}
        else:
            shown |= {"type": "select", "currentValue": o.current, "options": [
                {"value": c.value, "name": c.name, **({"description": c.description} if c.description else {})}
                for c in o.choices
            ]}
        out.append(shown)
    return out


def checkpoint_call_id(interrupt_id: str, invocation_id: str) -> str:
    """The tool-call id of a checkpoint: interrupt ids repeat across turns (`interrupt_ext_1`), ACP
    tool-call ids must not, so the invocation is part of it."""
    return f"{interrupt_id}@{invocation_id}"


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
