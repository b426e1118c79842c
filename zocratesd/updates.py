"""A conversation as a stream of face-neutral updates; every face maps these to its own wire.

Each kind of update is a frozen `msgspec.Struct`, and `Update` is their union: a face translates them
with a `match` that ends in `assert_never`, so a new kind is a type error in every face that
does not handle it yet (rpc/updates.py for ACP, shim/turns.py for SSE).

Stored events (a replay, `event_updates`) and live events (a turn, core/turn_updates.py) both
come out as these, so the editor that watches a turn and the one that loads it later see the same
conversation. Some kinds only happen live: `ToolProgress`, `CheckpointAnswered`, `Usage`, `ConfigOptions` (and
`Checkpoint`, which a replay shows only while it is still pending: `Daemon.replay`), and `Starting`.

A leaf module: it imports nothing of zocratesd, so every layer may use it.

Why `msgspec.Struct`, here and for the other value classes the daemon defines before its first
reply: a Struct class is built in C, far faster than a dataclass, whose methods are generated
source run through `exec` (bench/PROFILE.md section 16 has the figures), and its instances are cheaper
to make (one per streamed chunk). Use `msgspec.structs.asdict/replace/fields`; never hand one to
orjson, which serializes dataclasses but not Structs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias, TypedDict

import msgspec

from zocrates_wire.ui_session import PendingHitl

# A JSON object as it crosses an edge (the wire, free-form tool arguments and session state); the one declaration.
Json = dict[str, Any]


# A stored event: ADK's `Event.model_dump(exclude_none=True, mode="json")`, the shape ADK writes to
# `events.event_data` and the store, the UI view, replays and compaction read back. Only the fields
# the daemon reads are named; every one may be absent (exclude_none), so the classes are not total.
class StoredFunctionCall(TypedDict, total=False):
    id: str
    name: str
    args: Json


class StoredFunctionResponse(TypedDict, total=False):
    id: str
    name: str
    response: Json


class StoredPart(TypedDict, total=False):
    text: str
    thought: bool
    function_call: StoredFunctionCall
    function_response: StoredFunctionResponse


class StoredContent(TypedDict, total=False):
    role: str
    parts: list[StoredPart]


class StoredCompaction(TypedDict, total=False):
    start_timestamp: float
    end_timestamp: float
    compacted_content: StoredContent


class StoredActions(TypedDict, total=False):
    compaction: StoredCompaction
    rewind_before_invocation_id: str


class StoredEvent(TypedDict, total=False):
    id: str
    invocation_id: str
    author: str
    timestamp: float
    branch: str
    isolation_scope: str
    partial: bool
    content: StoredContent
    actions: StoredActions
    usage_metadata: Json


class MessageChunk(msgspec.Struct, frozen=True):
    """A chunk of a message's text (in a replay, the whole text of one stored event)."""

    role: Literal["user", "assistant"]
    message_id: str | None  # the event's id: the chunks of one message share it
    text: str
    invocation_id: str | None = None  # live turns only: the turn's, for a client that rewinds it


class ThoughtChunk(msgspec.Struct, frozen=True):
    """A chunk of the model's reasoning."""

    message_id: str | None
    text: str
    invocation_id: str | None = None


class ToolCall(msgspec.Struct, frozen=True):
    call_id: str
    name: str
    args: Json


class ToolResult(msgspec.Struct, frozen=True):
    call_id: str
    name: str
    response: Any  # the tool's response as stored (an object; `{"error": ...}` when it failed)
    failed: bool


class Title(msgspec.Struct, frozen=True):
    title: str


class ToolProgress(msgspec.Struct, frozen=True):
    """A search round of a running tool call (engine/research.py): `text` is every round so far."""

    call_id: str
    text: str
    round: Json


class Checkpoint(msgspec.Struct, frozen=True):
    """The turn paused for the user (deep research hit its budget); answered with `resume()`."""

    invocation_id: str
    interrupt_id: str
    message: str | None
    payload: Any

    def to_json(self) -> PendingHitl:
        return {
            "invocation_id": self.invocation_id,
            "interrupt_id": self.interrupt_id,
            "message": self.message,
            "payload": self.payload,
        }

    @classmethod
    def from_json(cls, pending: PendingHitl) -> Checkpoint:
        return cls(pending["invocation_id"], pending["interrupt_id"], pending.get("message"), pending.get("payload"))


class CheckpointAnswered(msgspec.Struct, frozen=True):
    """A checkpoint got its answer (`{action, guidance?}`) and the turn goes on."""

    invocation_id: str
    interrupt_id: str
    response: Json


class Usage(msgspec.Struct, frozen=True):
    """The end of a turn: the prompt's size and what post-turn compaction did (compaction/)."""

    prompt_tokens: int
    tokens_estimated: bool  # no model count: the chars/4 estimate
    context_size: int
    compaction_ms: float
    compacted: bool
    reason: str  # why it did or did not compact ("gate", "probe_yes", "cancelled", ...)
    # The model's own counts for the turn's last call ({prompt_token_count, candidates_token_count,
    # total_token_count}), when the provider reported them; None for the offline model.
    model_tokens: Json | None = None


class ConfigChoice(msgspec.Struct, frozen=True):
    value: str
    name: str
    description: str | None = None


class ConfigOption(msgspec.Struct, frozen=True):
    """One of a session's settings (core/session_config.py), as every face shows it: a choice from
    a list (`choices`, `current` one of their values) or an on/off switch (`current` a bool)."""

    id: str
    name: str
    description: str
    category: str  # ACP's: "mode", "model", "model_config"; a face may ignore it
    current: str | bool
    choices: tuple[ConfigChoice, ...] = ()  # empty for a boolean


class ConfigOptions(msgspec.Struct, frozen=True):
    """The session's settings changed: all of them, as they are now. `origin` names the client
    that changed them when it already has them in its answer (it need not hear them again)."""

    options: tuple[ConfigOption, ...]
    origin: str | None = None


class Starting(msgspec.Struct, frozen=True):
    """A turn waits for the daemon to finish starting (its engine loads in the background after a
    cold start, process/boot.py): live only, never stored; the turn's own updates follow."""

    text: str


Update: TypeAlias = (
    MessageChunk | ThoughtChunk | ToolCall | ToolResult | Title | ToolProgress | Checkpoint | CheckpointAnswered | Usage
    | ConfigOptions | Starting
)


def is_shown(ev: StoredEvent) -> bool:
    """Whether a live event belongs to the conversation the user sees (before looking at its text).

    Events on a branch belong to a tool's own pipeline (the coordinator runs on the root branch),
    and events with an isolation scope to a scoped sub-task: neither is part of the conversation.
    """
    if ev.get("partial") or ev.get("isolation_scope") or ev.get("branch"):
        return False
    actions = ev.get("actions") or {}
    return not actions.get("compaction") and not actions.get("rewind_before_invocation_id")


_NOTHING_STREAMED: frozenset[str] = frozenset()


def event_updates(
    ev: StoredEvent, *, streamed: frozenset[str] = _NOTHING_STREAMED, invocation_id: str | None = None
) -> list[Update]:
    """The updates of one stored (or final) event, in part order. `streamed` names the text kinds
    ("message", "thought") already sent as live chunks, which are not repeated; `invocation_id`
    (a live turn's) goes on the text chunks."""
    out: list[Update] = []
    _add_event(ev, out, streamed, invocation_id)
    return out


def history_updates(live: Iterable[StoredEvent]) -> list[Update]:
    """The updates of a session's live events (rewinds applied), as a replay shows them."""
    out: list[Update] = []
    for ev in live:
        _add_event(ev, out, _NOTHING_STREAMED, None)
    return out


def _add_event(ev: StoredEvent, out: list[Update], streamed: frozenset[str], invocation_id: str | None) -> None:
    # One list for a whole replay rather than a generator per event: a 5000-event session/load
    # runs this ~5000 times.
    if not is_shown(ev):
        return
    content = ev.get("content")
    parts = content.get("parts") if content else None
    if not parts:
        return
    user = ev.get("author") == "user"
    message_id = ev.get("id")
    for part in parts:
        text = part.get("text")
        if text:
            if part.get("thought") and not user:
                if "thought" not in streamed:
                    out.append(ThoughtChunk(message_id, text, invocation_id))
            elif "message" not in streamed:
                out.append(MessageChunk("user" if user else "assistant", message_id, text, invocation_id))
        fc = part.get("function_call")
        if fc and fc.get("id"):
            out.append(ToolCall(fc["id"], fc.get("name") or "tool", fc.get("args") or {}))
        fr = part.get("function_response")
        if fr and fr.get("id"):
            response = fr.get("response") or {}
            out.append(ToolResult(fr["id"], fr.get("name") or "tool", response, isinstance(response, dict) and "error" in response))
