"""`POST /chat` and `POST /chat/resume` as Server-Sent Events, over the core's turns and watchers.

The turn runs in the shim's own task group, not in the request: a client that disconnects
mid-stream only stops hearing it, and the turn ends and is persisted as usual (the sidebar then
reloads it with `GET /sessions/{id}`). Every `data:` line is one JSON object with a `type`:
- `parts`: `{parts: [{text, thought}], author, invocation_id, partial}` (a chunk of the answer or
  of its reasoning);
- `request_input`: `{invocation_id, interrupt_id, message, payload}` (a research checkpoint: the
  turn is paused; answer it with `POST /chat/resume`);
- `done`: `{invocation_id, stop_reason, session}` (the UI session after the turn, with
  `pending_hitl` when it paused; always last);
- `error`: `{code, message}` (the turn failed after it started; also last).
A refusal before the turn starts (busy, unknown session, bad input) is a plain JSON error instead.

The stream reads the session's updates from a subscription of its own (`Daemon.watch`), so a
client that stops reading never holds the turn. When that subscription overflows (core/watchers.py,
`MAX_QUEUED_UPDATES`), the stream carries no further `parts`; `done` (or `error`) still comes last,
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
from zocratesd.core.watchers import Subscription
from zocratesd.errors import ZocratesError
from zocratesd.shim.errors import http_status_of
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    MessageChunk,
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

Json = dict[str, Any]


def to_sse(update: Update) -> Json | None:
    """The SSE event of one face-neutral update (None: not shown on this face)."""
    match update:
        case MessageChunk(role="assistant") | ThoughtChunk():
            return {"type": "parts", "parts": [{"text": update.text, "thought": isinstance(update, ThoughtChunk)}],
                    "author": AGENT_AUTHOR, "invocation_id": update.invocation_id, "partial": True}
        case Checkpoint():
            return {"type": "request_input", "invocation_id": update.invocation_id, "interrupt_id": update.interrupt_id,
                    "message": update.message, "payload": update.payload}
        case MessageChunk() | ToolCall() | ToolResult() | ToolProgress() | CheckpointAnswered() | Title() | Usage():
            return None  # the user's own message, tool traffic, title and usage: `done` carries the result
        case _:
            assert_never(update)


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
            final = {"type": "done", "invocation_id": result.invocation_id, "stop_reason": result.stop_reason,
                     "session": await daemon.get_session(session_id)}
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
