"""A running turn's ADK events as face-neutral updates (zocratesd/updates.py declares them).

Streaming models send partial events (text chunks) and then one final event with the whole
message under the same event id: chunks go out as they come, and the final event contributes only
what was not streamed (its tool calls, or all of its text for a model that does not stream).
Partial function calls are skipped: their ids differ from the final call's (measured on ADK 2.13).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from google.adk.events import Event

from zocratesd.engine.tools import ROUND_METADATA_KEY, TOOL_NAME
from zocratesd.library.retrieval import PassageJson
from zocratesd.store.ui import REQUEST_INPUT_CALL, title_of
from zocratesd.updates import Checkpoint, MessageChunk, StoredEvent, ThoughtChunk, Title, ToolProgress, Update, event_updates


class TurnUpdates:
    """Feeds on one turn's events (`feed`) and keeps what the daemon needs after it: the turn's
    invocation id, the model's last usage counts, and the checkpoint the turn stopped at."""

    def __init__(self, stored_json: Callable[[str], StoredEvent | None] | None = None) -> None:
        # The JSON the store wrote for an event, by id (store/writer.py `take_dump`): ADK yields
        # an event once it is stored, so a final event is not dumped a second time here.
        self._stored_json = stored_json
        self.invocation_id: str | None = None
        self.usage: dict[str, Any] | None = None  # the model's usage_metadata, as JSON
        self.checkpoint: Checkpoint | None = None  # the checkpoint this run stopped at, if any
        self._streamed: dict[str, set[str]] = {}  # text kinds already sent as chunks, by event id
        self._progress: dict[str, list[str]] = {}  # search rounds so far, by tool call
        # The answer (the model's text since its last tool call) and the passages of the turn's
        # last search as the model saw them, numbered: what the answer is checked against.
        self.answer: list[str] = []
        self.passages: list[PassageJson] = []

    def feed(self, ev: Event) -> list[Update]:
        """The updates of one event; text chunks carry the turn's `invocation_id`."""
        if ev.author == "user" and self.invocation_id is None and not ev.partial:
            self.invocation_id = ev.invocation_id
        if ev.branch or ev.isolation_scope:
            return self._pipeline(ev)  # inside the search pipeline: not part of the conversation
        out: list[Update] = []
        if ev.partial:
            for part in (ev.content.parts or []) if ev.content else []:
                if part.text:
                    if part.thought:
                        self._streamed.setdefault(ev.id, set()).add("thought")
                        out.append(ThoughtChunk(ev.id, part.text, self.invocation_id))
                    else:
                        self._streamed.setdefault(ev.id, set()).add("message")
                        out.append(MessageChunk("assistant", ev.id, part.text, self.invocation_id))
            return out
        data = self._stored_json(ev.id) if self._stored_json is not None else None
        if data is None:
            data = cast("StoredEvent", ev.model_dump(exclude_none=True, mode="json"))
        if ev.usage_metadata is not None:
            self.usage = data.get("usage_metadata") or {}
        self._note_answer(ev)
        streamed = frozenset(self._streamed.pop(ev.id, ()))
        out.extend(event_updates(data, streamed=streamed, invocation_id=self.invocation_id))
        delta = ev.actions.state_delta if ev.actions else None
        if delta and "title" in delta:
            out.append(Title(title_of(delta)))
        return out

    def _note_answer(self, ev: Event) -> None:
        parts = (ev.content.parts or []) if ev.content else []
        for part in parts:
            if part.function_call is not None:
                self.answer = []  # text before a tool call is not the answer
            elif part.function_response is not None:
                self.answer = []
                if part.function_response.name == TOOL_NAME:
                    response = part.function_response.response or {}
                    found = response.get("passages") if isinstance(response, dict) else None
                    self.passages = [cast("PassageJson", p) for p in found if isinstance(p, dict)] if isinstance(found, list) else []
            elif part.text and not part.thought and ev.author != "user":
                self.answer.append(part.text)

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
            out.append(ToolProgress(call_id, "\n".join(done), meta))
        for fc in ev.get_function_calls():
            if fc.name == REQUEST_INPUT_CALL and fc.id:
                args = fc.args or {}
                self.checkpoint = Checkpoint(ev.invocation_id, fc.id, args.get("message"), args.get("payload"))
                out.append(self.checkpoint)
        return out
