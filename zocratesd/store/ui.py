"""The UI view of a session (spec 2.2): `{id, title, created_at, updated_at, messages, pending_hitl}`.

Both read paths end here. `format_session_for_ui(session)` (store/writer.py) formats ADK's own `Session`;
`SessionReader.ui_session` formats the stored rows. They differ only in how they obtain the live
events (ADK's `_apply_rewinds` over pydantic Events, or `apply_rewinds` below over the stored JSON)
and share everything after that, so the equivalence test pins exactly the part that could drift.

Events are handled as their stored JSON (`Event.model_dump(exclude_none=True, mode="json")`, the
shape ADK writes to `events.event_data`). What the UI never shows: partial events (never stored
anyway), rewind markers and everything they rewound, compaction events, events that carry an
isolation scope (raw retrieval inside a pipeline), and events with no text (tool-call plumbing,
the bookkeeping state deltas we write ourselves).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from zocrates_wire.ui_session import CitationCheck, PendingHitl, UiMessage, UiSession
from zocratesd.updates import Json, StoredEvent, is_shown

DEFAULT_TITLE = "New Chat"
REQUEST_INPUT_CALL = "adk_request_input"
# Where the event that ends a checked answer keeps its citations' checks (quotes/verify.py): the
# UI shows them as the answer's `citations`.
CHECKS_METADATA_KEY = "zocrates_citations"


def apply_rewinds(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The stored-JSON twin of ADK's `events._rewind_events._apply_rewinds` (2.13).

    Walks backwards; a rewind marker for invocation X drops itself and every event back to the
    first event of X. A marker whose target is unknown (or not earlier) drops only itself.
    """
    first_idx: dict[str, int] | None = None
    kept: list[StoredEvent] = []
    i = len(events) - 1
    while i >= 0:
        ev = events[i]
        target = (ev.get("actions") or {}).get("rewind_before_invocation_id")
        if target:
            if first_idx is None:
                first_idx = {}
                for idx, other in enumerate(events):
                    inv = other.get("invocation_id")
                    if inv and inv not in first_idx:
                        first_idx[inv] = idx
            first = first_idx.get(target)
            if first is not None and first < i:
                i = first
        else:
            kept.append(ev)
        i -= 1
    kept.reverse()
    return kept


def _scan(live: Iterable[StoredEvent], *, with_messages: bool = True) -> tuple[list[UiMessage], PendingHitl | None]:
    """Messages and the open checkpoint in one pass (the hot loop of showing a session: ~5000
    events in a few milliseconds, so it reads each event's fields once). Without messages (a
    replay only needs the checkpoint) it costs about a third less.

    A checkpoint is pending from its `adk_request_input` call until the user's answer *and* the
    turn going on after it (a root event of the same invocation: the search's result, the answer)
    or a newer prompt. An answer stored by a daemon that died before the turn went on leaves the
    checkpoint pending, so it can be answered again (ADK resumes from a repeated answer)."""
    messages: list[UiMessage] = []
    open_calls: dict[str, PendingHitl] = {}
    answered: dict[str, PendingHitl] = {}  # answered checkpoints whose turn has not gone on yet
    for ev in live:
        author = ev.get("author") or ""
        if answered and author != "user" and not ev.get("branch") and not ev.get("isolation_scope"):
            inv = ev.get("invocation_id")
            for key in [k for k, c in answered.items() if c["invocation_id"] == inv]:
                del answered[key]
        meta = ev.get("custom_metadata")
        checks = meta.get(CHECKS_METADATA_KEY) if isinstance(meta, dict) else None
        if isinstance(checks, list) and with_messages and _checked(messages, ev, checks):
            continue
        content = ev.get("content")
        parts = content.get("parts") if content else None
        if not parts:
            continue
        text: list[str] = []
        thought: list[str] = []
        for part in parts:
            t = part.get("text")
            if t:
                (thought if part.get("thought") else text).append(t)
                continue
            fc = part.get("function_call")
            if fc is not None:
                if fc.get("name") == REQUEST_INPUT_CALL and fc.get("id"):
                    args = fc.get("args") or {}
                    open_calls[fc["id"]] = {
                        "invocation_id": ev.get("invocation_id") or "",
                        "interrupt_id": fc["id"],
                        "message": args.get("message"),
                        "payload": args.get("payload"),
                    }
                continue
            fr = part.get("function_response")
            if fr is not None and author == "user" and fr.get("id"):
                call = open_calls.pop(fr["id"], None)
                if call is not None:
                    answered[fr["id"]] = call
        if text and author == "user" and (open_calls or answered) and is_shown(ev):
            open_calls.clear()  # a new prompt supersedes a checkpoint left unanswered before it
            answered.clear()
        if with_messages and (text or thought) and is_shown(ev):
            messages.append(
                {
                    "id": ev.get("id"),
                    "role": "user" if author == "user" else "assistant",
                    "text": "".join(text),
                    "thought": "".join(thought) or None,
                    "author": author,
                    "timestamp": ev.get("timestamp"),
                    "invocation_id": ev.get("invocation_id"),
                }
            )
    pending = list(open_calls.values())[-1] if open_calls else (list(answered.values())[-1] if answered else None)
    return messages, pending


def _checked(messages: list[UiMessage], ev: StoredEvent, checks: list[CitationCheck]) -> bool:
    """The checked answer (the turn's last message) gets its citations' checks, and what was said
    about them as its last words (streamed as a message of their own, shown as part of it); False
    when the turn has no message to take them."""
    for m in reversed(messages):
        if m["invocation_id"] == ev.get("invocation_id") and m["role"] == "assistant":
            m["citations"] = checks
            parts = (ev.get("content") or {}).get("parts") or []
            m["text"] += "".join(p.get("text") or "" for p in parts if not p.get("thought"))
            return True
    return False


def pending_checkpoint(live: Iterable[StoredEvent]) -> PendingHitl | None:
    """The research checkpoint still waiting for an answer in these live events, if any."""
    return _scan(live, with_messages=False)[1]


def title_of(state: Json) -> str:
    title = state.get("title")
    return title if isinstance(title, str) and title else DEFAULT_TITLE


def ui_view(
    session_id: str, state: Json, updated_at: float, live: Sequence[StoredEvent], created_fallback: float | None
) -> UiSession:
    """Assemble the UI session from already-live events (rewinds applied)."""
    messages, pending = _scan(live)
    created_at = state.get("created_at")
    if not isinstance(created_at, (int, float)):
        created_at = created_fallback if created_fallback is not None else updated_at
    return {
        "id": session_id,
        "title": title_of(state),
        "created_at": created_at,
        "updated_at": updated_at,
        "messages": messages,
        "pending_hitl": pending,
    }
