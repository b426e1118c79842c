"""`POST /chat` and `POST /chat/resume` as Server-Sent Events, over the core's turns and watchers.

The turn runs in the shim's own task group, not in the request: a client that disconnects
mid-stream only stops hearing it, and the turn ends and is persisted as usual (the sidebar then
reloads it with `GET /sessions/{id}`). Every `data:` line is one JSON object with a `type`:
- `parts`: `{parts: [{text, thought}], author, invocation_id, partial}` (a chunk of the answer or
  of its reasoning);
- `progress`: `{kind, ...}`: a tool call, a research round, a tool's result (the passages the
  answer cites as [n]), a checkpoint answered (the start of a resumed turn);
- `request_input`: `{invocation_id, interrupt_id, message, payload}` (a research checkpoint: the
  turn is paused; answer it with `POST /chat/resume`);
- `done`: `{invocation_id, stop_reason, checkpoint, session}`: `stop_reason` "end_turn",
  "checkpoint" (paused: `checkpoint` is the one waiting) or "cancelled"; `session` is the UI
  session after the turn; always last;
- `error`: `{code, message}` (the turn failed after it started; also last).
A refusal before the turn starts (busy, unknown session, bad input) is a plain JSON error instead.

The stream reads the session's updates from a subscription of its own (`Daemon.watch`), so a
client that stops reading never holds the turn. When that subscription overflows (core/watchers.py,
`MAX_QUEUED_UPDATES`), the stream carries no further `parts` or `progress`; `done` (or `error`) still comes last,
with `dropped_events`: how many updates it left out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, assert_never

import anyio
import anyio.abc
import orjson

from zocratesd.core.daemon import Daemon, TurnResult
from zocratesd.core.sessions import SessionView
from zocratesd.core.watchers import Subscription
from zocratesd.errors import ZocratesError
from zocratesd.shim.errors import http_status_of
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
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

log = logging.getLogger(__name__)

AGENT_AUTHOR = "coordinator"
# What a `tool_result` event tells of each passage the answer may cite as [n]: enough for a link,
# a label and the item's citation key (shown with each source); the passage text stays in the
# session (it can be thousands of characters each).
PASSAGE_FIELDS = ("n", "item_key", "attachment_key", "title", "creators", "year", "page", "page_label", "citation",
                  "citation_key")
# A failed tool's error text is cut here (it is a message for a status line, not a document).
MAX_TOOL_ERROR_CHARS = 500



def _passages(response: Any) -> list[Json]:
    found = response.get("passages") if isinstance(response, dict) else None
    if not isinstance(found, list):
        return []
    return [{k: p.get(k) for k in PASSAGE_FIELDS} for p in found if isinstance(p, dict)]


def _tool_error(update: ToolResult) -> str | None:
    if not update.failed:
        return None
    error = update.response.get("error") if isinstance(update.response, dict) else update.response
    return str(error)[:MAX_TOOL_ERROR_CHARS]


def to_sse(update: Update) -> Json | None:
    """The SSE event of one face-neutral update (None: not shown on this face)."""
    match update:
        case MessageChunk(role="assistant") | ThoughtChunk():
            return {"type": "parts", "parts": [{"text": update.text, "thought": isinstance(update, ThoughtChunk)}],
                    "author": AGENT_AUTHOR, "invocation_id": update.invocation_id, "partial": True}
        case Checkpoint():
            return {"type": "request_input", "invocation_id": update.invocation_id, "interrupt_id": update.interrupt_id,
                    "message": update.message, "payload": update.payload}
        case ToolCall():
            return {"type": "progress", "kind": "tool_call", "call_id": update.call_id, "name": update.name, "args": update.args}
        case ToolProgress():
            return {"type": "progress", "kind": "round", "call_id": update.call_id, "round": update.round, "text": update.text}
        case ToolResult():
            return {"type": "progress", "kind": "tool_result", "call_id": update.call_id, "name": update.name,
                    "failed": update.failed, "passages": _passages(update.response), "error": _tool_error(update)}
        case CheckpointAnswered():
            return {"type": "progress", "kind": "checkpoint_answered", "invocation_id": update.invocation_id,
                    "interrupt_id": update.interrupt_id, "response": update.response}
        case Starting():
            return {"type": "progress", "kind": "starting", "text": update.text}
        case MessageChunk() | Title() | Usage() | ConfigOptions():
            # The user's own message, title, usage and settings: `done` carries the result; the
            # settings are read with the session.
            return None
        case _:
            assert_never(update)


def done_event(result: TurnResult, session: SessionView) -> Json:
    """The last event of a turn that ran. It says plainly when the turn paused at a checkpoint (the
    core's result says "end_turn" then, with the checkpoint in `pending_hitl`)."""
    stop_reason = result.stop_reason
    if stop_reason == "end_turn" and result.pending_hitl is not None:
        stop_reason = "checkpoint"
    return {"type": "done", "invocation_id": result.invocation_id, "stop_reason": stop_reason,
            "checkpoint": result.pending_hitl, "session": session}


def sse_line(event: Json) -> bytes:
    try:
        payload = orjson.dumps(event)  # compact: never a raw newline inside one `data:` line
    except TypeError:
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return b"data: " + payload + b"\n\n"


class SseTurn:
    """One turn started for one HTTP client: its updates as SSE events, then the final event."""

    def __init__(self, updates: Subscription) -> None:
        self.updates = updates  # ended by the turn's task when the turn is over
        self.refused: ZocratesError | None = None
        self.final: Json | None = None
        self.finished = anyio.Event()

    def close(self) -> None:
        """Stop hearing the turn (a refused turn, a client that went away); it goes on regardless."""
        self.updates.close()

    async def events(self) -> AsyncIterator[bytes]:
        try:
            async for update in self.updates:
                if (event := to_sse(update)) is not None:
                    yield sse_line(event)
            await self.finished.wait()
            assert self.final is not None
            final = self.final
            if self.updates.dropped:
                final = {**final, "dropped_events": self.updates.dropped}
            yield sse_line(final)
        finally:
            self.close()


async def start_turn(
    daemon: Daemon,
    tg: anyio.abc.TaskGroup,
    session_id: str,
    turn: Callable[[Callable[[], None]], Awaitable[TurnResult]],
    *,
    opened: Callable[[], None],
    closed: Callable[[], None],
) -> SseTurn:
    """Start the turn in `tg`; return once it holds the session (or was refused: `stream.refused`).

    `turn(started)` must call `started()` once it holds the session (Daemon.prompt's `started`): an
    update seen before then may be another turn's (a racing client), so updates cannot tell.
    """
    stream = SseTurn(daemon.watch(session_id))
    running = anyio.Event()

    async def run() -> None:
        final: Json = {"type": "error", "code": "cancelled", "message": "the daemon is shutting down"}
        try:
            result = await turn(running.set)
            final = done_event(result, await daemon.get_session(session_id))
        except ZocratesError as exc:
            if not running.is_set():  # refused before it held the session: a plain error answer
                stream.refused = exc
            final = {"type": "error", "code": http_status_of(type(exc)).code, "message": exc.message}
        except Exception as exc:
            log.exception("turn of %s failed", session_id)
            final = {"type": "error", "code": "internal", "message": f"the turn failed: {type(exc).__name__}"}
        finally:
            stream.final = final
            stream.updates.close()  # its reader gets what is queued, then `final`
            stream.finished.set()
            running.set()
            closed()

    opened()  # counted until the turn ends, whether or not anyone still listens
    tg.start_soon(run, name=f"http turn {session_id}")
    await running.wait()  # set once the turn runs, or (also) when it ended: refused or failed
    return stream
