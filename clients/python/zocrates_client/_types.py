"""Results of the daemon's methods, typed.

Objects the daemon already shapes for display (`_zocrates/session/get`, `_zocrates/session/rename`)
stay plain dicts, typed as TypedDicts: they are what `zocrates --json` prints and what the Zotero
sidebar renders. ACP's camelCase records (`initialize`, `session/list`) become frozen dataclasses
with snake_case fields and the wire object in `raw`, so fields a later daemon adds are not lost.
Every time is epoch seconds (float), as in the UI session object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

from zocrates_wire.ui_session import CitationCheck, PendingHitl, UiMessage, UiSession

#: One `update` object of a `session/update` notification (`update["sessionUpdate"]` is its kind).
Update = dict[str, Any]

#: Handles a request the daemon sends to the client (e.g. `session/request_permission`):
#: `await handler(method, params)` returns the result, or raises `RpcError` to answer with that error.
RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]

__all__ = ["PendingHitl", "UiMessage", "UiSession"]  # the wire's shapes, re-exported by the package


class SessionSummary(TypedDict):
    """A session without its messages (the answer of `_zocrates/session/rename`)."""

    id: str
    title: str
    created_at: float
    updated_at: float


def _epoch(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One entry of `session/list` (ACP `SessionInfo`)."""

    session_id: str
    title: str | None
    cwd: str
    created_at: float | None
    updated_at: float | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> SessionInfo:
        meta = (obj.get("_meta") or {}).get("zocrates") or {}
        title = obj.get("title")
        return cls(
            session_id=str(obj.get("sessionId")),
            title=title if isinstance(title, str) else None,
            cwd=str(obj.get("cwd") or ""),
            created_at=_epoch(meta.get("createdAt")),
            updated_at=_epoch(obj.get("updatedAt")),
            raw=obj,
        )


@dataclass(frozen=True, slots=True)
class InitializeResult:
    """The `initialize` answer: the daemon's protocol version, identity and capabilities."""

    protocol_version: int
    agent_name: str
    agent_version: str
    capabilities: dict[str, Any]
    zocrates_version: str | None
    extensions: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> InitializeResult:
        caps = obj.get("agentCapabilities") or {}
        zocrates = (caps.get("_meta") or {}).get("zocrates") or {}
        info = obj.get("agentInfo") or {}
        return cls(
            protocol_version=int(obj.get("protocolVersion", 0)),
            agent_name=str(info.get("name", "")),
            agent_version=str(info.get("version", "")),
            capabilities=caps,
            zocrates_version=zocrates.get("version"),
            extensions=tuple(zocrates.get("extensions") or ()),
            raw=obj,
        )


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """One `session/update` notification: which session, and the `update` object."""

    session_id: str
    update: Update

    @property
    def kind(self) -> str | None:
        """`update.sessionUpdate`: `agent_message_chunk`, `tool_call`, `session_info_update`, ..."""
        kind = self.update.get("sessionUpdate")
        return kind if isinstance(kind, str) else None


class RestoredPrompt(TypedDict):
    """What a rewound turn was asked with (its text, scope, selection, snippets)."""

    mode: str
    active_context_items: list[dict[str, str]] | None
    collection: str | None
    snippets: list[dict[str, Any]]
    text: str


class RewindResult(TypedDict):
    """`_zocrates/session/rewind`: the UI session after the rewind, and what the turn was asked with."""

    session: UiSession
    restored: RestoredPrompt


#: The scope of a question: the whole library, one collection (with its subcollections), or papers.
Mode = Literal["library", "collection", "papers"]

#: How a research checkpoint is answered: search further, or answer now from what was found.
CheckpointAction = Literal["extend_budget", "synthesize", "search_online"]


@dataclass(frozen=True, slots=True)
class PromptResult:
    """How a turn (`session/prompt`, `_zocrates/chat/resume`) ended.

    `stop_reason` is `"end_turn"`, or `"cancelled"` (a `session/cancel`, or a checkpoint nobody
    answered: then `pending_hitl` is the checkpoint that waits, for `Client.resume`).
    """

    stop_reason: str
    invocation_id: str | None
    pending_hitl: PendingHitl | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # The answer's citations checked against their sources, by number: `{n, item_key, library,
    # citation_key, label, verified, partial, title, checks}` (protocol/README.md); None when nothing was checked.
    citations: list[CitationCheck] | None = None
    # The citation key of each item the answer cites (`{item_key: citation_key}`), for LaTeX and
    # Markdown writers; {} when it cites none or the daemon cannot say.
    citation_keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> PromptResult:
        # session/prompt keeps Zocrates' fields in _meta.zocrates; chat/resume has them at the top.
        meta = (obj.get("_meta") or {}).get("zocrates") or {}
        invocation = obj.get("invocationId", meta.get("invocationId"))
        pending = obj.get("pendingHitl", meta.get("pendingHitl"))
        citations = obj.get("citations", meta.get("citations"))
        keys = obj.get("citationKeys", meta.get("citationKeys"))
        return cls(
            stop_reason=str(obj.get("stopReason", "")),
            invocation_id=invocation if isinstance(invocation, str) else None,
            pending_hitl=cast(PendingHitl, pending) if isinstance(pending, dict) else None,
            raw=obj,
            citations=[cast(CitationCheck, c) for c in citations if isinstance(c, dict)] if isinstance(citations, list) else None,
            citation_keys={k: v for k, v in keys.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(keys, dict) else {},
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A research checkpoint the daemon asks about (`session/request_permission`).

    `question` is the text to show; `invocation_id` and `interrupt_id` are what `Client.resume`
    takes if it is left pending; `payload` has the aspects searched and not yet searched.
    """

    session_id: str
    tool_call_id: str
    question: str
    invocation_id: str
    interrupt_id: str
    payload: dict[str, Any]

    @classmethod
    def from_request(cls, params: dict[str, Any]) -> Checkpoint:
        call = params.get("toolCall") or {}
        tool_call_id = str(call.get("toolCallId", ""))
        interrupt_id, _, invocation_id = tool_call_id.partition("@")
        payload = call.get("rawInput")
        return cls(
            session_id=str(params.get("sessionId", "")),
            tool_call_id=tool_call_id,
            question=str(call.get("title") or ""),
            invocation_id=invocation_id,
            interrupt_id=interrupt_id,
            payload=payload if isinstance(payload, dict) else {},
        )

    @staticmethod
    def answer(action: CheckpointAction | None, guidance: str | None = None) -> dict[str, Any]:
        """The result to return from the request handler: `extend_budget` (with optional guidance),
        `synthesize`, `search_online` (when the checkpoint's payload offers it), or None to leave the
        checkpoint pending (the turn then ends `cancelled`)."""
        if action is None:
            return {"outcome": {"outcome": "cancelled"}}
        option = "extend" if action == "extend_budget" else action
        result: dict[str, Any] = {"outcome": {"outcome": "selected", "optionId": option}}
        if guidance:
            result["_meta"] = {"zocrates": {"guidance": guidance}}
        return result


@dataclass(frozen=True, slots=True)
class OnlineQuestion:
    """The daemon asks whether a turn may search beyond the library (`session/request_permission`
    with `_meta.zocrates.online`; online.mode `ask`). `terms` are what would leave the machine."""

    session_id: str
    terms: str
    question: str

    @classmethod
    def from_request(cls, params: Mapping[str, Any]) -> OnlineQuestion | None:
        """The question, or None when the request is about something else (a checkpoint)."""
        meta = params.get("_meta")
        ours = meta.get("zocrates") if isinstance(meta, dict) else None
        online = ours.get("online") if isinstance(ours, dict) else None
        if not isinstance(online, dict):
            return None
        call = params.get("toolCall") or {}
        text = next((str(c.get("content", {}).get("text") or "") for c in call.get("content") or () if isinstance(c, dict)), "")
        return cls(str(params.get("sessionId", "")), str(online.get("terms") or ""), text or str(call.get("title") or ""))

    @staticmethod
    def answer(choice: str | None) -> dict[str, object]:
        """`once` (this turn), `always` (online.mode becomes on), `no`, `never` (online.mode becomes
        off); None: no answer (as no)."""
        if choice not in ("once", "always", "no", "never"):
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": choice}}


def last_progress_line(content: Any) -> str | None:
    """The newest line of a `search_library` call's progress content (a `tool_call_update`'s
    `content`: `Round 2: searched "..." (3 passages)`), or None when it has no text."""
    if not isinstance(content, list):
        return None
    for block in reversed(content):
        inner = block.get("content") if isinstance(block, dict) else None
        text = inner.get("text") if isinstance(inner, dict) else None
        if isinstance(text, str) and text.strip():
            return text.strip().splitlines()[-1]
    return None
