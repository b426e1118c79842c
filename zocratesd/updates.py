"""A conversation as a stream of face-neutral updates; every face maps these to its own wire.

One update is a dict with a `kind`:
- `message`: `{role: "user"|"assistant", message_id, text}` (a chunk of a message's text);
- `thought`: `{message_id, text}` (a chunk of the model's reasoning);
- `tool_call`: `{call_id, name, args}`; `tool_result`: `{call_id, name, response, failed}`;
- `title`: `{title}`;
- live turns only: `tool_progress`: `{call_id, text, round}` (a search round, engine/research.py);
  `checkpoint`: `{invocation_id, interrupt_id, message, payload}` (the turn paused for the user);
  `checkpoint_answered`: `{invocation_id, interrupt_id, response}` (it resumes); `usage`.
Stored events (a replay) and live events (a turn; core/turn_updates.py) both come out this way, so the
editor that watches a turn and the one that loads it later see the same conversation. The rules of
what is shown are store/ui.py's `is_shown`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from zocratesd.store.ui import Json, is_shown

Update = Json


def event_updates(ev: Json, *, streamed: frozenset[str] = frozenset()) -> Iterator[Update]:
    """The updates of one stored (or final) event, in part order. `streamed` names the text kinds
    ("message", "thought") already sent as live chunks, which are not repeated."""
    if not is_shown(ev):
        return
    parts = (ev.get("content") or {}).get("parts") or []
    user = ev.get("author") == "user"
    message_id = ev.get("id")
    for part in parts:
        text = part.get("text")
        if text:
            kind = "thought" if part.get("thought") and not user else "message"
            if kind not in streamed:
                if kind == "thought":
                    yield {"kind": "thought", "message_id": message_id, "text": text}
                else:
                    yield {"kind": "message", "role": "user" if user else "assistant", "message_id": message_id, "text": text}
        fc = part.get("function_call")
        if fc and fc.get("id"):
            yield {"kind": "tool_call", "call_id": fc["id"], "name": fc.get("name") or "tool", "args": fc.get("args") or {}}
        fr = part.get("function_response")
        if fr and fr.get("id"):
            response = fr.get("response") or {}
            yield {
                "kind": "tool_result",
                "call_id": fr["id"],
                "name": fr.get("name") or "tool",
                "response": response,
                "failed": isinstance(response, dict) and "error" in response,
            }


def history_updates(live: Iterable[Json]) -> Iterator[Update]:
    for ev in live:
        yield from event_updates(ev)
