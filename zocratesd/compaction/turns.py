"""A live session (stored JSON, rewinds applied) cut into turns, and its token estimate.

A turn starts at a user event with text on the root branch (a prompt) and owns every later event
of the same invocation, so a range that ends on a turn's last event never splits a tool call from
its response. Compaction events and our bookkeeping events belong to no turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from zocratesd.engine.models.offline import estimate_tokens
from zocratesd.updates import StoredCompaction, StoredEvent


def is_root(ev: StoredEvent) -> bool:
    """On the coordinator's branch: raw retrieval (a branch or an isolation scope) is not."""
    return not ev.get("branch") and not ev.get("isolation_scope")


def compaction_of(ev: StoredEvent) -> StoredCompaction | None:
    comp = (ev.get("actions") or {}).get("compaction")
    return comp if isinstance(comp, dict) and is_root(ev) else None


def text_of(ev: StoredEvent, *, thoughts: bool = False) -> str:
    parts = (ev.get("content") or {}).get("parts") or []
    return "".join(p.get("text") or "" for p in parts if p.get("text") and (thoughts or not p.get("thought")))


def is_prompt(ev: StoredEvent) -> bool:
    return ev.get("author") == "user" and is_root(ev) and compaction_of(ev) is None and bool(text_of(ev).strip())


@dataclass
class Turn:
    """One completed turn: the user's question and the root events of its invocation."""

    index: int  # 1-based, in the live session
    invocation_id: str
    question: str
    events: list[StoredEvent] = field(default_factory=list)  # root events only (what a summary may read)
    start: float = 0.0
    end: float = 0.0  # the last event of the invocation, any branch: the turn boundary


def split_turns(live: list[StoredEvent], *, first_index: int = 1) -> list[Turn]:
    """The turns of `live`, numbered from `first_index` (a window after a compaction starts after
    the turns it covers)."""
    turns: list[Turn] = []
    by_invocation: dict[str, Turn] = {}
    for ev in live:
        ts = float(ev.get("timestamp") or 0.0)
        inv = ev.get("invocation_id") or ""
        if is_prompt(ev) and inv not in by_invocation:
            started = Turn(index=len(turns) + first_index, invocation_id=inv, question=text_of(ev).strip(), start=ts, end=ts)
            turns.append(started)
            by_invocation[inv] = started
        turn = by_invocation.get(inv)
        if turn is None or compaction_of(ev) is not None:
            continue
        turn.end = max(turn.end, ts)
        if is_root(ev):
            turn.events.append(ev)
    return turns


def latest_compaction(live: list[StoredEvent]) -> StoredCompaction | None:
    """The compaction the next prompt is built on: ours always consolidate, so the latest one
    contains every earlier one (ADK's containment rule keeps only it)."""
    for ev in reversed(live):
        comp = compaction_of(ev)
        if comp is not None:
            return comp
    return None


def summary_text(comp: StoredCompaction) -> str:
    parts = (comp.get("compacted_content") or {}).get("parts") or []
    return "".join(p.get("text") or "" for p in parts)


def estimate_prompt_tokens(live: list[StoredEvent]) -> int:
    """Tokens of the coordinator's next prompt when the model reported none: ~4 characters per
    token (engine/models/offline.py `estimate_tokens`) over the latest summary plus every root
    event's content after it (text, tool calls and tool results as their JSON)."""
    comp = latest_compaction(live)
    after = float(comp["end_timestamp"]) if comp else float("-inf")
    chars = len(summary_text(comp)) if comp else 0
    for ev in live:
        if not is_root(ev) or compaction_of(ev) is not None or float(ev.get("timestamp") or 0) <= after:
            continue
        content = ev.get("content")
        if content:
            chars += len(orjson.dumps(content))
    return estimate_tokens("x" * chars) if chars else 0
