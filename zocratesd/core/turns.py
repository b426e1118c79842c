"""Turns: prompt, resume, cancel, rewind and compaction on demand, and the loop that drives a
turn's events to the session's watchers.

A turn holds its session's lock from its refusal checks to its result; it waits at the engine
gate (core/startup.py) when asked for while the daemon starts, and says so to the watchers. The
engine itself is reached through `EngineSide` (core/engine_side.py), loaded by then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from zocrates_wire.ui_session import CitationCheck, PendingHitl
from zocratesd.core.context import PromptContext
from zocratesd.core.online import OFF_MESSAGE
from zocratesd.core.session_config import SessionConfig
from zocratesd.core.startup import EngineGate
from zocratesd.core.validation import (
    ResumeAnswer,
    check_interrupt_ids,
    check_invocation_id,
    check_prompt,
    check_resume_response,
    check_session_id,
    title_from_prompt,
)
from zocratesd.core.watchers import Watchers
from zocratesd.engine import SESSION_CONFIG_KEY
from zocratesd.errors import CheckpointNotPending, InvalidInput, NotFound, OnlineOff, SessionNotFound
from zocratesd.logtext import escape_for_log
from zocratesd.store import SessionLocks, SessionsDb
from zocratesd.store.ui import DEFAULT_TITLE, title_of
from zocratesd.updates import Checkpoint, CheckpointAnswered, Starting

if TYPE_CHECKING:
    from google.adk.events import Event

    from zocratesd.core.engine_side import EngineSide
    from zocratesd.core.online import AskOnline, Online
    from zocratesd.core.turn_updates import TurnUpdates
    from zocratesd.library.retrieval import PassageJson
    from zocratesd.quotes.verify import AnswerCheck

log = logging.getLogger(__name__)


class TurnResult(msgspec.Struct, frozen=True):
    stop_reason: str  # "end_turn" | "cancelled"
    invocation_id: str | None
    # The research checkpoint the turn stopped at, unanswered, as a UI session's `pending_hitl`
    # ({invocation_id, interrupt_id, message, payload}); it stays pending until `resume()` or a rewind.
    pending_hitl: PendingHitl | None = None
    # The answer's citations checked against their sources, by citation number (quotes/verify.py);
    # None when the turn gave no answer to check.
    citations: list[CitationCheck] | None = None


# Checks an answer's citations against the library (core/catalogue.py `check_answer`): the
# answer's text and the turn's last search result in, the checks out.
CheckAnswer = Callable[[str, list["PassageJson"]], Awaitable["AnswerCheck"]]

# How a face answers a research checkpoint while its turn waits: the checkpoint (as `pending_hitl`)
# in, the user's `{action, guidance?}` out (checked here: core/validation.py), or None to leave it
# pending (the client declined, went away, ...).
Ask = Callable[[PendingHitl], Awaitable[object]]


class RestoredPrompt(msgspec.Struct, frozen=True):
    """What a rewound turn was asked with, so a client can restore it for an inline edit."""

    mode: str
    active_context_items: Any
    collection: str | None
    snippets: list[Any]
    text: str


class Rewound(msgspec.Struct, frozen=True):
    session: Mapping[str, object]  # the UI session after the rewind (store/ui.py)
    restored: RestoredPrompt

    def to_json(self) -> dict[str, object]:
        return {"session": self.session, "restored": msgspec.structs.asdict(self.restored)}


class Compacted(msgspec.Struct, frozen=True):
    compacted: bool
    reason: str
    turns: int
    prompt_tokens: int

    def to_json(self) -> dict[str, object]:
        return {"compacted": self.compacted, "reason": self.reason, "turns": self.turns, "promptTokens": self.prompt_tokens}


class _Turn(msgspec.Struct):
    """One turn in flight: what `_drive` needs besides its events."""

    session_id: str
    stream: TurnUpdates
    abort: asyncio.Event
    ask: Ask | None
    ask_online: AskOnline | None  # how the face asks its person whether the turn may search online
    window: float | None  # where the session's load starts (`_window`)
    compaction: bool  # the session's setting, read under the lock at the turn's start


def _window(state: Mapping[str, object]) -> float | None:
    """Where a turn's session load starts: the end of the latest compaction, else everything."""
    window = state.get("compacted_until")
    return float(window) if isinstance(window, (int, float)) else None


def _asked(user_event: Mapping[str, Any]) -> RestoredPrompt:
    asked = ((user_event.get("actions") or {}).get("state_delta")) or {}
    parts = user_event["content"]["parts"]
    return RestoredPrompt(
        mode=asked.get("active_mode") or "library", active_context_items=asked.get("active_context_items"),
        collection=asked.get("active_collection"), snippets=asked.get("snippets") or [],
        text="".join(p.get("text") or "" for p in parts if not p.get("thought")),
    )


class Turns:
    def __init__(
        self, db: SessionsDb, locks: SessionLocks, watchers: Watchers, session_config: SessionConfig,
        gate: EngineGate, side: Callable[[], EngineSide], online: Online, check_answer: CheckAnswer | None = None,
    ) -> None:
        self.db = db
        self.reader = db.reader
        self.locks = locks
        self.watchers = watchers
        self.session_config = session_config
        self.gate = gate
        self._side = side  # the engine side, once the gate is open
        self.online = online
        self._aborts: dict[str, asyncio.Event] = {}
        self._check_answer = check_answer

    async def _wait_for_engine(self, session_id: str) -> None:
        if not self.gate.ready:
            await self.watchers.publish(session_id, Starting("the daemon is starting; the turn runs once its engine is loaded"))
        await self.gate.wait()

    async def prompt(
        self, session_id: str, text: str, context: PromptContext | None, ask: Ask | None,
        started: Callable[[], None] | None, ask_online: AskOnline | None = None,
    ) -> TurnResult:
        check_session_id(session_id)
        check_prompt(text)
        context = context or PromptContext()
        with self.locks.hold(session_id, "turn"):
            state = await self.reader.session_state(session_id)
            # The session's scope setting, unless the prompt chose its own (a refusal: before started()).
            context, remembered = self.session_config.turn_context(state, context)
            await self._wait_for_engine(session_id)
            if started is not None:
                started()
            delta = context.state_delta() | remembered
            if title_of(state) == DEFAULT_TITLE:
                delta["title"] = title_from_prompt(text)
            side = self._side()
            # Settings change only under the session lock, which the turn holds: read them now.
            turn = _Turn(session_id, side.updates(), asyncio.Event(), ask, ask_online, _window(state),
                         self.session_config.from_state(state).compaction)
            events = side.run_turn(session_id, text, state_delta=delta, window_start=turn.window, abort=turn.abort)
            return await self._drive(turn, events)

    async def resume(
        self, session_id: str, invocation_id: str, interrupt_id: str, response: Any, ask: Ask | None,
        started: Callable[[], None] | None, ask_online: AskOnline | None = None,
    ) -> TurnResult:
        check_session_id(session_id)
        check_interrupt_ids(invocation_id, interrupt_id)
        answer = check_resume_response(response)
        if answer.action == "search_online" and self.online.mode == "off":
            raise OnlineOff(OFF_MESSAGE)
        with self.locks.hold(session_id, "turn"):
            await self._check_pending(session_id, invocation_id, interrupt_id)
            state = await self.reader.session_state(session_id)
            await self._wait_for_engine(session_id)
            side = self._side()
            turn = _Turn(session_id, side.updates(), asyncio.Event(), ask, ask_online, _window(state),
                         self.session_config.from_state(state).compaction)
            turn.stream.invocation_id = invocation_id
            await self.watchers.publish(session_id, CheckpointAnswered(invocation_id, interrupt_id, answer.to_json()))
            # Called with nothing awaited before `_drive` registers the turn's abort: a client that
            # hears the turn has started can cancel it (`cancel()`), never in a gap.
            if started is not None:
                started()
            events = side.resume_turn(session_id, interrupt_id, answer, window_start=turn.window, abort=turn.abort)
            return await self._drive(turn, events)

    async def _check_pending(self, session_id: str, invocation_id: str, interrupt_id: str) -> None:
        """CheckpointNotPending unless (invocation_id, interrupt_id) is the session's pending one."""
        pending = (await self.reader.ui_session(session_id))["pending_hitl"]
        ids = {"sessionId": session_id, "invocationId": invocation_id, "interruptId": interrupt_id}
        if pending is None:
            raise CheckpointNotPending(
                "no research checkpoint is pending in this session (answered, rewound or superseded)", **ids
            )
        if (pending["invocation_id"], pending["interrupt_id"]) != (invocation_id, interrupt_id):
            raise CheckpointNotPending(
                "that is not the pending checkpoint of this session", **ids,
                pendingInvocationId=pending["invocation_id"], pendingInterruptId=pending["interrupt_id"],
            )

    async def _drive(self, turn: _Turn, events: AsyncIterator[Event]) -> TurnResult:
        """Run a turn's events to its end or its next checkpoint; while `ask` answers checkpoints,
        resume in place (the same turn, still under the session lock). Then post-turn compaction."""
        session_id, stream, abort = turn.session_id, turn.stream, turn.abort
        self._aborts[session_id] = abort
        try:
            with self.online.turn(session_id, turn.ask_online):
                while True:
                    async for ev in events:
                        for update in stream.feed(ev):
                            await self.watchers.publish(session_id, update)
                    checkpoint = stream.checkpoint
                    if checkpoint is None or abort.is_set() or turn.ask is None:
                        break
                    answer = await self._ask(turn, turn.ask, checkpoint)
                    if answer is None:
                        break
                    stream.checkpoint = None
                    await self.watchers.publish(
                        session_id, CheckpointAnswered(checkpoint.invocation_id, checkpoint.interrupt_id, answer.to_json())
                    )
                    events = self._side().resume_turn(
                        session_id, checkpoint.interrupt_id, answer, window_start=turn.window, abort=abort
                    )
        finally:
            self._aborts.pop(session_id, None)
        paused = stream.checkpoint
        citations = None if paused is not None or abort.is_set() else await self._verify(turn)
        # Post-turn compaction (spec section 4): after the answer streamed, before the result,
        # still under the lock. Never fails the turn; its cost goes out as a `usage` update. A
        # turn paused at a checkpoint is not complete: nothing is compacted until it is.
        usage = await self._side().compactor.after_turn(
            session_id, stream.usage, cancelled=abort.is_set(), paused=paused is not None, enabled=turn.compaction
        )
        if stream.usage:
            usage = msgspec.structs.replace(usage, model_tokens=stream.usage)
        await self.watchers.publish(session_id, usage)
        pending_hitl = paused.to_json() if paused is not None else None
        return TurnResult("cancelled" if abort.is_set() else "end_turn", stream.invocation_id, pending_hitl, citations)

    async def _verify(self, turn: _Turn) -> list[CitationCheck] | None:
        """The answer's citations checked against the library; what must be said about them goes
        out as the answer's last words (an event of the turn, so a rewind takes it with the turn).
        A check that fails leaves the answer as it is: it never fails the turn."""
        stream = turn.stream
        answer = "".join(stream.answer)
        if self._check_answer is None or not answer.strip() or stream.invocation_id is None:
            return None
        try:
            checked = await self._check_answer(answer, stream.passages)
            if not checked.citations:
                return None
            citations = checked.to_json()
            event = self._side().checks_event(stream.invocation_id, checked.note, citations)
            await self.db.append_event(turn.session_id, event)
        except Exception:
            log.exception("session %s: the answer's citations could not be checked", turn.session_id)
            return None
        for update in stream.feed(event):
            await self.watchers.publish(turn.session_id, update)
        return citations

    async def _ask(self, turn: _Turn, ask: Ask, checkpoint: Checkpoint) -> ResumeAnswer | None:
        """The prompting client's answer to a checkpoint; None when it declines, fails, goes away
        or the turn is cancelled meanwhile (the checkpoint then stays pending)."""
        asking = asyncio.ensure_future(ask(checkpoint.to_json()))
        aborted = asyncio.ensure_future(turn.abort.wait())
        try:
            await asyncio.wait({asking, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (asking, aborted):
                if not task.done():
                    task.cancel()
            await asyncio.gather(asking, aborted, return_exceptions=True)
        if not asking.done() or asking.cancelled():
            return None
        exc = asking.exception()
        if exc is not None:
            # The client's own error reply, perhaps: its text is escaped (logtext.py).
            log.info("session %s: checkpoint %s left pending (%s)", turn.session_id, checkpoint.interrupt_id,
                     escape_for_log(exc))
            return None
        answer = asking.result()
        if answer is None:
            return None
        try:
            return check_resume_response(answer)
        except InvalidInput as bad:
            log.warning("session %s: unusable checkpoint answer %s (%s); left pending", turn.session_id,
                        escape_for_log(repr(answer)), escape_for_log(bad.message))
            return None

    def cancel(self, session_id: str) -> bool:
        """Ask the session's running turn to stop; False when none runs."""
        abort = self._aborts.get(session_id)
        if abort is None:
            return False
        abort.set()
        return True

    async def cancel_turn(self, session_id: str) -> bool:
        if self.cancel(check_session_id(session_id)):
            return True
        if not await self.reader.exists(session_id):
            raise SessionNotFound(session_id)
        return False

    async def rewind(self, session_id: str, invocation_id: str) -> Rewound:
        check_session_id(session_id)
        check_invocation_id(invocation_id)
        await self.gate.wait()
        with self.locks.hold(session_id, "rewind"):
            live = await self.reader.live_session(session_id)
            user_event = next(
                (ev for ev in live.live if ev.get("invocation_id") == invocation_id and ev.get("author") == "user"
                 and (ev.get("content") or {}).get("parts")),
                None,
            )
            if user_event is None:
                raise NotFound(
                    f"no turn with invocation id {invocation_id!r} in this session",
                    sessionId=session_id, invocationId=invocation_id,
                )
            settings = live.state.get(SESSION_CONFIG_KEY)
            await self._side().engine.rewind(session_id, invocation_id)
            # A rewind replays state as it was before the turn; a title set by that turn (or a
            # rename after it) would revert. Titles are the user's, not the turn's: keep it; and
            # the session's settings (core/session_config.py) likewise.
            after = await self.reader.session_state(session_id)
            keep: dict[str, object] = {}
            if title_of(after) != live.title:
                keep["title"] = live.title
            if settings is not None and after.get(SESSION_CONFIG_KEY) != settings:
                keep[SESSION_CONFIG_KEY] = settings
            if keep:
                await self.db.append_state(session_id, keep)
            ui = await self.reader.ui_session(session_id)
        return Rewound(ui, _asked(user_event))

    async def compact_now(self, session_id: str) -> Compacted:
        check_session_id(session_id)
        await self.gate.wait()
        with self.locks.hold(session_id, "compaction"):
            await self.reader.session_state(session_id)  # SessionNotFound if gone
            res = await self._side().compactor.compact_now(session_id)
        return Compacted(res.compacted, res.reason, res.completed_turns, res.prompt_tokens)
