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
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import orjson
from anyio.streams.memory import MemoryObjectSendStream

from zocratesd.core.daemon import Daemon, TurnResult
from zocratesd.errors import ZocratesError
from zocratesd.updates import Update

log = logging.getLogger(__name__)

# Events a stream may hold for a client that reads slowly. Beyond it further `parts` are dropped
# (the final `done` still arrives, with the whole session): a stuck client never holds the turn.
MAX_QUEUED_EVENTS = 4096
AGENT_AUTHOR = "coordinator"

Json = dict[str, Any]


def to_sse(update: Update) -> Json | None:
    """The SSE event of one face-neutral update (None: not shown on this face)."""
    kind = update["kind"]
    if kind == "message" and update.get("role") == "assistant":
        return {"type": "parts", "parts": [{"text": update["text"], "thought": False}], "author": AGENT_AUTHOR,
                "invocation_id": update.get("invocation_id"), "partial": True}
    if kind == "thought":
        return {"type": "parts", "parts": [{"text": update["text"], "thought": True}], "author": AGENT_AUTHOR,
                "invocation_id": update.get("invocation_id"), "partial": True}
    if kind == "checkpoint":
        return {"type": "request_input", "invocation_id": update["invocation_id"], "interrupt_id": update["interrupt_id"],
                "message": update.get("message"), "payload": update.get("payload")}
    return None  # the user's own message, tool traffic, title and usage: `done` carries the result


def sse_line(event: Json) -> bytes:
    try:
        payload = orjson.dumps(event)  # compact: never a raw newline inside one `data:` line
    except TypeError:
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return b"data: " + payload + b"\n\n"


class SseTurn:
    """One turn started for one HTTP client."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[Json](MAX_QUEUED_EVENTS + 1)
        self.started = anyio.Event()
        self.refused: ZocratesError | None = None
        self.dropped = 0

    def offer(self, event: Json) -> None:
        """Queue an event for the client; never blocks the turn."""
        if self.send.statistics().current_buffer_used >= MAX_QUEUED_EVENTS:
            self.dropped += 1
            return
        _send_quietly(self.send, event)

    async def events(self) -> AsyncIterator[bytes]:
        with self.receive:
            async for event in self.receive:
                yield sse_line(event)


def _send_quietly(send: MemoryObjectSendStream[Json], event: Json) -> None:
    try:
        send.send_nowait(event)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.WouldBlock):
        pass  # the client has gone: the turn goes on without it


async def start_turn(
    daemon: Daemon,
    tg: anyio.abc.TaskGroup,
    session_id: str,
    turn: Callable[[], Awaitable[TurnResult]],
    *,
    opened: Callable[[], None],
    closed: Callable[[], None],
) -> SseTurn:
    """Start the turn in `tg`; return once it streams (or was refused: `stream.refused`)."""
    stream = SseTurn()

    async def listener(update: Update) -> None:
        stream.started.set()
        event = to_sse(update)
        if event is not None:
            stream.offer(event)
            # Let the stream's task write it now: a model that yields chunks without awaiting
            # anything would otherwise hold them all until the turn's next real I/O.
            await anyio.lowlevel.checkpoint()

    async def run() -> None:
        unwatch = daemon.watchers.watch(session_id, listener)
        final: Json = {"type": "error", "code": "cancelled", "message": "the daemon is shutting down"}
        try:
            result = await turn()
            final = {"type": "done", "invocation_id": result.invocation_id, "stop_reason": result.stop_reason,
                     "session": await daemon.get_session(session_id)}
        except ZocratesError as exc:
            if not stream.started.is_set():
                stream.refused = exc
            final = {"type": "error", "code": exc.kind, "message": exc.message}
        except Exception as exc:
            log.exception("turn of %s failed", session_id)
            final = {"type": "error", "code": "internal", "message": f"the turn failed: {type(exc).__name__}"}
        finally:
            unwatch()
            if stream.dropped:
                final["dropped_events"] = stream.dropped
            stream.started.set()
            _send_quietly(stream.send, final)  # room was kept for it
            stream.send.close()
            closed()

    opened()  # counted until the turn ends, whether or not anyone still listens
    tg.start_soon(run, name=f"http turn {session_id}")
    await stream.started.wait()
    return stream
