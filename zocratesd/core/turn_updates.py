"""A running turn's ADK events as face-neutral updates (updates.py describes them).

Streaming models send partial events (text chunks) and then one final event with the whole
message under the same event id: chunks go out as they come, and the final event contributes only
what was not streamed (its tool calls, or all of its text for a model that does not stream).
Partial function calls are skipped: their ids differ from the final call's (measured on ADK 2.13).
"""

from __future__ import annotations

from typing import Any

from google.adk.events import Event

from zocratesd.engine.tools import ROUND_METADATA_KEY
from zocratesd.updates import Update, event_updates
from zocratesd.store.ui import REQUEST_INPUT_CALL, title_of


class TurnUpdates:
    def __init__(self) -> None:
        self.invocation_id: str | None = None
        self.user_event_id: str | None = None
        self._streamed: dict[str, set[str]] = {}
        self.usage: dict[str, Any] | None = None
        self.checkpoint: dict[str, Any] | None = None  # the checkpoint this run stopped at, if any
        self._progress: dict[str, list[str]] = {}  # search rounds so far, by tool call

    def feed(self, ev: Event) -> list[Update]:
        """The updates of one event; text chunks carry the turn's `invocation_id`."""
        if ev.author == "user" and self.invocation_id is None and not ev.partial:
            self.invocation_id = ev.invocation_id
            self.user_event_id = ev.id
        updates = self._feed(ev)
        for u in updates:
            if u["kind"] in ("message", "thought"):
                u["invocation_id"] = self.invocation_id
        return updates

    def _feed(self, ev: Event) -> list[Update]:
        if ev.branch or ev.isolation_scope:
            return self._pipeline(ev)  # inside the search pipeline: not part of the conversation
        out: list[Update] = []
        if ev.partial:
            for part in (ev.content.parts or []) if ev.content else []:
                if part.text:
                    kind = "thought" if part.thought else "message"
                    self._streamed.setdefault(ev.id, set()).add(kind)
                    if kind == "thought":
                        out.append({"kind": "thought", "message_id": ev.id, "text": part.text})
                    else:
                        out.append({"kind": "message", "role": "assistant", "message_id": ev.id, "text": part.text})
            return out
        if ev.usage_metadata is not None:
            self.usage = ev.usage_metadata.model_dump(exclude_none=True, mode="json")
        data = ev.model_dump(exclude_none=True, mode="json")
        out.extend(event_updates(data, streamed=frozenset(self._streamed.pop(ev.id, ()))))
        delta = ev.actions.state_delta if ev.actions else None
        if delta and "title" in delta:
            out.append({"kind": "title", "title": title_of(delta)})
        return out

    def _pipeline(self, ev: Event) -> list[Update]:
        """What the search pipeline shows of itself: each round as progress of its tool call, and
        a checkpoint (an `adk_request_input` call) as a question to the user."""
        if ev.partial:
            return []
        if self.invocation_id is None:
            self.invocation_id = ev.invocation_id  # a resumed turn has no user text event
        out: list[Update] = []
        call_id = ev.branch.rsplit("@", 1)[-1] if ev.branch and "@" in ev.branch else None
        meta = (ev.custom_metadata or {}).get(ROUND_METADATA_KEY)
        if isinstance(meta, dict) and call_id:
            text = next((p.text for p in (ev.content.parts or []) if p.text), "") if ev.content else ""
            done = self._progress.setdefault(call_id, [])
            done.append(text)
            out.append({"kind": "tool_progress", "call_id": call_id, "text": "\n".join(done), "round": meta})
        for fc in ev.get_function_calls():
            if fc.name == REQUEST_INPUT_CALL and fc.id:
                args = fc.args or {}
                self.checkpoint = {
                    "invocation_id": ev.invocation_id,
                    "interrupt_id": fc.id,
                    "message": args.get("message"),
                    "payload": args.get("payload"),
                }
                out.append({"kind": "checkpoint", **self.checkpoint})
        return out
