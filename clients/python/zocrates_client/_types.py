"""Results of the daemon's methods, typed.

Objects the daemon already shapes for display (`_zocrates/session/get`, `_zocrates/session/rename`)
stay plain dicts, typed as TypedDicts: they are what `zocrates --json` prints and what the Zotero
sidebar renders. ACP's camelCase records (`initialize`, `session/list`) become frozen dataclasses
with snake_case fields and the wire object in `raw`, so fields a later daemon adds are not lost.
Every time is epoch seconds (float), as in the UI session object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict

#: One `update` object of a `session/update` notification (`update["sessionUpdate"]` is its kind).
Update = dict[str, Any]

#: Handles a request the daemon sends to the client (e.g. `session/request_permission`):
#: `await handler(method, params)` returns the result, or raises `RpcError` to answer with that error.
RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]


class UiMessage(TypedDict):
    id: str
    role: Literal["user", "assistant"]
    text: str
    thought: str | None
    author: str
    timestamp: float
    invocation_id: str


class PendingHitl(TypedDict):
    invocation_id: str
    interrupt_id: str
    message: str | None
    payload: Any


class UiSession(TypedDict):
    """`_zocrates/session/get`: the UI session object (spec 2.2), rewinds applied."""

    id: str
    title: str
    created_at: float
    updated_at: float
    messages: list[UiMessage]
    pending_hitl: PendingHitl | None


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
