"""The core: a plain async API over the session store (and, as they land, the engine, compaction
and maintenance). Every face (the ACP/JSON-RPC peer, the HTTP shim) is a thin adapter over this
class; it knows nothing about JSON-RPC or HTTP, and reports problems as `zocratesd.errors`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from zocratesd import __version__, compaction
from zocratesd.config import ZocratesConfig
from zocratesd.engine import Engine
from zocratesd.core.context import PromptContext
from zocratesd.engine.research import MAX_GUIDANCE_CHARS
from zocratesd.engine.models import build_model
from zocratesd.engine.retrieval import InMemoryRetriever, Passage, Retriever
from zocratesd.core.turn_updates import TurnUpdates
from zocratesd.errors import CheckpointNotPending, InvalidInput, NotFound, SessionNotFound
from zocratesd.library import ZOTERO_DB, Library, disabled_status
from zocratesd.maintenance import Maintenance, MaintenanceReport, StorageStats
from zocratesd.rpc.models import MAX_TITLE_CHARS, SESSION_ID_PATTERN
from zocratesd.store import (
    APP_NAME,
    USER_ID,
    SessionLocks,
    SessionReader,
    SessionRow,
    close_session_services,
    get_session_service,
)
from zocratesd.store.reader import LiveSession, epoch_to_iso
from zocratesd.store.database import db_path
from zocratesd.updates import Update
from zocratesd.store.ui import DEFAULT_TITLE, title_of

log = logging.getLogger(__name__)

_SESSION_ID_RE = re.compile(SESSION_ID_PATTERN)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]+")


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not _SESSION_ID_RE.match(session_id):
        raise InvalidInput(
            "a session id is 1-128 characters of letters, digits, '_', '.', ':' or '-'",
            sessionId=session_id if isinstance(session_id, str) else None,
        )
    return session_id


def check_unicode(text: str, what: str) -> None:
    """Refuse lone surrogates (what a JSON `\\ud800` escape decodes to): SQLite would store text its
    readers cannot decode, and one such title broke `session/list` for every session."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode text (no lone surrogates)") from None


def clean_title(title: Any) -> str:
    """A title as the user meant it: control characters become spaces, ends trimmed, 1-200 chars."""
    if not isinstance(title, str):
        raise InvalidInput("a title must be a string")
    check_unicode(title, "a title")
    cleaned = _CONTROL_RE.sub(" ", title).strip()
    if not cleaned:
        raise InvalidInput("a title cannot be empty")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise InvalidInput(f"a title has at most {MAX_TITLE_CHARS} characters", length=len(cleaned))
    return cleaned


# A prompt longer than this is refused: ~25k tokens of question is a pasted paper, which belongs in
# Zotero (and comes in as snippets), not in one chat message.
MAX_PROMPT_CHARS = 100_000
# A title made from the first prompt keeps this many characters (a sidebar row).
TITLE_FROM_PROMPT_CHARS = 60
# Where a daemon without a Zotero library index reads passages from, one JSON object per line
# ({item_key, title, text, creators?, year?, page?, collections?}); tests and demos use it until
# the library reader lands.
LIBRARY_PASSAGES_FILE = "library_passages.jsonl"

Listener = Callable[[Update], Awaitable[None]]


def _window(state: dict[str, Any]) -> float | None:
    """Where a turn's session load starts: the end of the latest compaction, else everything."""
    window = state.get("compacted_until")
    return float(window) if isinstance(window, (int, float)) else None


def title_from_prompt(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TITLE_FROM_PROMPT_CHARS:
        return line
    cut = line[: TITLE_FROM_PROMPT_CHARS - 1].rsplit(" ", 1)[0]
    return (cut or line[: TITLE_FROM_PROMPT_CHARS - 1]) + "…"


@dataclass(frozen=True)
class TurnResult:
    stop_reason: str  # "end_turn" | "cancelled"
    invocation_id: str | None
    # The research checkpoint the turn stopped at, unanswered ({invocation_id, interrupt_id,
    # message, payload}); it stays pending until `resume()` or a rewind.
    pending_hitl: dict[str, Any] | None = None


# How a face answers a research checkpoint while its turn waits: the checkpoint in, the user's
# `{action, guidance?}` out, or None to leave it pending (the client declined, went away, ...).
Ask = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
RESUME_ACTIONS = ("extend_budget", "synthesize")
MAX_INTERRUPT_ID_CHARS = 256


def check_resume_response(response: Any) -> dict[str, Any]:
    """`{action: "extend_budget"|"synthesize", guidance?: str}`, cleaned; InvalidInput if not."""
    if not isinstance(response, dict):
        raise InvalidInput('a checkpoint answer is an object {"action": "extend_budget"|"synthesize", "guidance"?}')
    action = response.get("action")
    if action not in RESUME_ACTIONS:
        raise InvalidInput('a checkpoint answer\'s action is "extend_budget" or "synthesize"', action=str(action)[:40])
    guidance = response.get("guidance")
    if guidance is not None and not isinstance(guidance, str):
        raise InvalidInput("guidance must be a string")
    if guidance is not None and len(guidance) > MAX_GUIDANCE_CHARS:
        raise InvalidInput(f"guidance has at most {MAX_GUIDANCE_CHARS} characters", length=len(guidance))
    out: dict[str, Any] = {"action": action}
    if guidance and guidance.strip() and action == "extend_budget":
        out["guidance"] = guidance.strip()
    return out


class Watchers:
    """Who hears a session's updates: every connection attached to it (ACP), every open stream
    (HTTP). A listener that fails is dropped; it never fails the turn."""

    def __init__(self) -> None:
        self._by_session: dict[str, list[Listener]] = {}

    def watch(self, session_id: str, listener: Listener) -> Callable[[], None]:
        self._by_session.setdefault(session_id, []).append(listener)

        def unwatch() -> None:
            listeners = self._by_session.get(session_id)
            if listeners and listener in listeners:
                listeners.remove(listener)
                if not listeners:
                    del self._by_session[session_id]

        return unwatch

    async def publish(self, session_id: str, update: Update) -> None:
        for listener in list(self._by_session.get(session_id, ())):
            try:
                await listener(update)
            except Exception:
                log.exception("dropping a listener of %s that failed", session_id)
                listeners = self._by_session.get(session_id)
                if listeners and listener in listeners:
                    listeners.remove(listener)


def load_library_passages(path: Path) -> list[Passage]:
    passages = []
    if not path.exists():
        return passages
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            passages.append(
                Passage(
                    item_key=str(d["item_key"]), title=str(d["title"]), text=str(d["text"]),
                    creators=tuple(d.get("creators") or ()), year=d.get("year"), page=d.get("page"),
                    attachment_key=d.get("attachment_key"), collections=tuple(d.get("collections") or ()),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s line %d skipped: %s", path, n, exc)
    return passages


def _bookkeeping_event(state_delta: dict[str, Any]) -> Event:
    """A content-less event that only changes state. It never reaches a prompt (no content) or the
    UI (no text), and it is not a message, so it does not make an empty session non-empty."""
    return Event(
        author="user",
        invocation_id=f"zocrates-meta-{Event.new_id()}",
        actions=EventActions(state_delta=state_delta),
    )


class Daemon:
    """Everything a client can ask of zocratesd, for one Zotero data dir."""

    version = __version__

    def __init__(self, data_dir: Path, config: ZocratesConfig, *, retriever: Retriever | None = None):
        self.data_dir = data_dir
        self.config = config
        self.locks = SessionLocks()
        self.watchers = Watchers()
        self._service = get_session_service(data_dir)
        self.reader = SessionReader(db_path(data_dir))
        # The Zotero library (zocratesd/library), indexed in the background once the daemon runs.
        self.library: Library | None = None
        if retriever is None:
            retriever = self._library_retriever()
        self.engine = Engine(self._service, build_model(config.model), retriever, config.research)
        self.maintenance = Maintenance(
            db_path=db_path(data_dir), service=self._service, reader=self.reader, locks=self.locks, config=config
        )
        self.startup_maintenance: MaintenanceReport | None = None
        self._aborts: dict[str, asyncio.Event] = {}

    def _library_retriever(self) -> Retriever:
        """The library index; or, for a data dir with no zotero.sqlite but a library_passages.jsonl
        (demos, benchmarks), the interim in-memory passages."""
        from zocratesd import locations

        state = locations.state_dir(self.data_dir)
        passages = state / LIBRARY_PASSAGES_FILE
        if passages.exists() and not (self.data_dir / ZOTERO_DB).exists():
            return InMemoryRetriever(load_library_passages(passages))
        cfg = self.config.library
        if not cfg.enabled:
            return InMemoryRetriever([])
        self.library = Library(
            self.data_dir, state, local_api_url=cfg.local_api_url if cfg.local_api else None,
            poll_interval_s=cfg.poll_interval_s,
        )
        return self.library

    def library_status(self, refresh: bool = False) -> dict[str, Any]:
        """`_zocrates/library/status`: the index's state, counts and progress; `refresh` checks
        Zotero for changes now rather than at the next poll."""
        if self.library is None:
            return disabled_status("this daemon searches a fixed set of passages, not a Zotero library index")
        return self.library.status(refresh)

    async def start(self) -> None:
        """Prepare the store, then run startup maintenance (retention, VACUUM when it pays), all
        before the daemon accepts a request: no turn can collide with it (spec 8.1)."""
        await self._service.prepare_tables()
        self.startup_maintenance = await self.maintenance.run(startup=True)
        report = self.startup_maintenance
        if report["empty_deleted"] or report["retention_deleted"] or report["vacuum"]["ran"]:
            log.info("startup maintenance: %s", report)
        if self.library is not None:
            # A thread: the daemon is ready at once; `_zocrates/library/status` reports progress.
            self.library.start()

    async def storage_stats(self) -> StorageStats:
        """Size and counts of sessions.db (the Zotero preferences' storage panel)."""
        return await self.maintenance.stats()

    async def run_maintenance(self) -> MaintenanceReport:
        """Retention and space reclamation on demand; sessions in flight are left alone and VACUUM
        is deferred while any turn runs."""
        return await self.maintenance.run(startup=False)

    @property
    def active_chat_session_ids(self) -> frozenset[str]:
        """Sessions with a turn (or rewind, compaction, delete) in flight: maintenance leaves them be."""
        return self.locks.busy_sessions()

    async def aclose(self) -> None:
        if self.library is not None:
            await self.library.aclose()
        await self.maintenance.aclose()
        await self.reader.aclose()
        await close_session_services(self.data_dir)

    # --- sessions -----------------------------------------------------------------------------

    async def create_session(self, *, title: str | None = None, cwd: str | None = None) -> SessionRow:
        title = clean_title(title) if title is not None else DEFAULT_TITLE
        now = time.time()
        for _ in range(3):
            session_id = f"session-{int(now * 1000)}-{secrets.token_hex(3)}"
            try:
                session = await self._service.create_session(
                    app_name=APP_NAME, user_id=USER_ID, session_id=session_id
                )
                break
            except AlreadyExistsError:  # pragma: no cover - 24 random bits in the same millisecond
                continue
        else:  # pragma: no cover
            raise RuntimeError("could not mint a unique session id")
        # Seeded through an event, not create_session(state=...): a rewind replays event deltas
        # only, so create-time state would be wiped by the first rewind (research/adk.md section 3).
        seed: dict[str, Any] = {"title": title, "created_at": now}
        if cwd:
            seed["cwd"] = cwd
        await self._service.append_event(session, _bookkeeping_event(seed))
        updated = session.last_update_time
        return SessionRow(
            id=session_id, title=title, created_at=now, updated_at=updated, cwd=cwd, updated_iso=epoch_to_iso(updated)
        )

    async def list_sessions(self) -> list[SessionRow]:
        return await self.reader.list_sessions()

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The UI session (spec 2.2) with rewinds applied and `pending_hitl`."""
        return await self.reader.ui_session(check_session_id(session_id))

    async def live_session(self, session_id: str) -> LiveSession:
        """State and live events, for a face that replays the history in its own format."""
        return await self.reader.live_session(check_session_id(session_id))

    async def delete_session(self, session_id: str) -> None:
        check_session_id(session_id)
        with self.locks.hold(session_id, "delete"):
            if not await self.reader.exists(session_id):
                raise SessionNotFound(session_id)
            await self._service.delete_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
        log.info("deleted session %s", session_id)

    async def rename_session(self, session_id: str, title: str) -> SessionRow:
        check_session_id(session_id)
        title = clean_title(title)
        with self.locks.hold(session_id, "rename"):
            session = await self._service.get_session(
                app_name=APP_NAME,
                user_id=USER_ID,
                session_id=session_id,
                config=GetSessionConfig(num_recent_events=0),
            )
            if session is None:
                raise SessionNotFound(session_id)
            await self._service.append_event(session, _bookkeeping_event({"title": title}))
            await self.watchers.publish(session_id, {"kind": "title", "title": title})
            created = session.state.get("created_at")
            return SessionRow(
                id=session_id,
                title=title,
                created_at=float(created) if isinstance(created, (int, float)) else session.last_update_time,
                updated_at=session.last_update_time,
                cwd=session.state.get("cwd"),
                updated_iso=epoch_to_iso(session.last_update_time),
            )

    # --- turns --------------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, text: str, context: PromptContext | None = None, *, ask: Ask | None = None
    ) -> TurnResult:
        """Run one turn; its updates go to the session's watchers as they happen.

        Refused at once with SessionBusy while anything else holds the session. `cancel()` stops
        it through ADK's abort signal: open tool calls are sealed, and the result says "cancelled".
        A research checkpoint is put to `ask` (the prompting client) and the turn goes on with its
        answer; unanswered, the turn ends with the checkpoint pending (`TurnResult.pending_hitl`).
        """
        check_session_id(session_id)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("a prompt needs some text")
        if len(text) > MAX_PROMPT_CHARS:
            raise InvalidInput(f"a prompt has at most {MAX_PROMPT_CHARS} characters", length=len(text))
        check_unicode(text, "a prompt")
        context = context or PromptContext()
        with self.locks.hold(session_id, "turn"):
            state = await self.reader.session_state(session_id)
            delta = context.state_delta()
            if title_of(state) == DEFAULT_TITLE:
                delta["title"] = title_from_prompt(text)
            abort = asyncio.Event()
            stream = TurnUpdates()
            message = types.Content(role="user", parts=[types.Part(text=text)])
            window = _window(state)
            events = self.engine.run_turn(session_id, message, state_delta=delta, window_start=window, abort=abort)
            return await self._drive(session_id, stream, events, abort, ask, window)

    async def resume(
        self, session_id: str, invocation_id: str, interrupt_id: str, response: Any, *, ask: Ask | None = None
    ) -> TurnResult:
        """Answer the session's pending research checkpoint and run the rest of its turn (from any
        client, in any daemon process: the pipeline rehydrates from `hitl_snapshot`). The turn's
        updates go to the session's watchers; it may stop at a further checkpoint.

        CheckpointNotPending (nothing changes) unless (invocation_id, interrupt_id) is the one
        pending: an answered, rewound or superseded checkpoint cannot be answered again.
        """
        check_session_id(session_id)
        for name, value in (("invocationId", invocation_id), ("interruptId", interrupt_id)):
            if not isinstance(value, str) or not value or len(value) > MAX_INTERRUPT_ID_CHARS:
                raise InvalidInput(f"{name} must be a non-empty string of at most {MAX_INTERRUPT_ID_CHARS} characters")
        answer = check_resume_response(response)
        with self.locks.hold(session_id, "turn"):
            ui = await self.reader.ui_session(session_id)
            pending = ui["pending_hitl"]
            if pending is None:
                raise CheckpointNotPending(
                    "no research checkpoint is pending in this session (answered, rewound or superseded)",
                    sessionId=session_id, invocationId=invocation_id, interruptId=interrupt_id,
                )
            if (pending["invocation_id"], pending["interrupt_id"]) != (invocation_id, interrupt_id):
                raise CheckpointNotPending(
                    "that is not the pending checkpoint of this session",
                    sessionId=session_id, invocationId=invocation_id, interruptId=interrupt_id,
                    pendingInvocationId=pending["invocation_id"], pendingInterruptId=pending["interrupt_id"],
                )
            state = await self.reader.session_state(session_id)
            window = _window(state)
            abort = asyncio.Event()
            stream = TurnUpdates()
            stream.invocation_id = invocation_id
            await self.watchers.publish(
                session_id, {"kind": "checkpoint_answered", "invocation_id": invocation_id, "interrupt_id": interrupt_id, "response": answer}
            )
            events = self.engine.resume_turn(session_id, interrupt_id, answer, window_start=window, abort=abort)
            return await self._drive(session_id, stream, events, abort, ask, window)

    async def _drive(
        self, session_id: str, stream: TurnUpdates, events: AsyncIterator[Event], abort: asyncio.Event,
        ask: Ask | None, window: float | None,
    ) -> TurnResult:
        """Run a turn's events to its end or its next checkpoint; while `ask` answers checkpoints,
        resume in place (the same turn, still under the session lock). Then post-turn compaction."""
        self._aborts[session_id] = abort
        try:
            while True:
                async for ev in events:
                    for update in stream.feed(ev):
                        await self.watchers.publish(session_id, update)
                checkpoint = stream.checkpoint
                if checkpoint is None or abort.is_set() or ask is None:
                    break
                answer = await self._ask(session_id, ask, checkpoint, abort)
                if answer is None:
                    break
                stream.checkpoint = None
                await self.watchers.publish(
                    session_id, {"kind": "checkpoint_answered", "invocation_id": checkpoint["invocation_id"],
                                 "interrupt_id": checkpoint["interrupt_id"], "response": answer},
                )
                events = self.engine.resume_turn(
                    session_id, checkpoint["interrupt_id"], answer, window_start=window, abort=abort
                )
        finally:
            self._aborts.pop(session_id, None)
        # Post-turn compaction (spec section 4): after the answer streamed, before the result,
        # still under the lock. Never fails the turn; its cost goes out as a `usage` update. A
        # turn paused at a checkpoint is not complete: nothing is compacted until it is.
        paused = stream.checkpoint
        usage = await compaction.after_turn(
            self, session_id, stream.usage, cancelled=abort.is_set(), paused=paused is not None
        )
        await self.watchers.publish(session_id, usage)
        return TurnResult("cancelled" if abort.is_set() else "end_turn", stream.invocation_id, paused)

    async def _ask(self, session_id: str, ask: Ask, checkpoint: dict[str, Any], abort: asyncio.Event) -> dict[str, Any] | None:
        """The prompting client's answer to a checkpoint; None when it declines, fails, goes away
        or the turn is cancelled meanwhile (the checkpoint then stays pending)."""
        asking = asyncio.ensure_future(ask(checkpoint))
        aborted = asyncio.ensure_future(abort.wait())
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
            log.info("session %s: checkpoint %s left pending (%s)", session_id, checkpoint["interrupt_id"], exc)
            return None
        answer = asking.result()
        if answer is None:
            return None
        try:
            return check_resume_response(answer)
        except InvalidInput as exc:
            log.warning("session %s: unusable checkpoint answer %r (%s); left pending", session_id, answer, exc.message)
            return None

    def cancel(self, session_id: str) -> bool:
        """Ask the session's running turn to stop; False when none runs."""
        abort = self._aborts.get(session_id)
        if abort is None:
            return False
        abort.set()
        return True

    async def rewind(self, session_id: str, invocation_id: str) -> dict[str, Any]:
        """Undo a turn and everything after it (append-only: a marker hides them).

        Returns the UI session and what the rewound turn was asked with (`active_context_items`,
        `snippets`, `mode`), so a client can restore them for an inline edit. The title survives.
        """
        check_session_id(session_id)
        if not isinstance(invocation_id, str) or not invocation_id or len(invocation_id) > 256:
            raise InvalidInput("invocationId must be a non-empty string")
        with self.locks.hold(session_id, "rewind"):
            live = await self.reader.live_session(session_id)
            user_event = next(
                (ev for ev in live.live if ev.get("invocation_id") == invocation_id and ev.get("author") == "user"
                 and (ev.get("content") or {}).get("parts")),
                None,
            )
            if user_event is None:
                raise NotFound(f"no turn with invocation id {invocation_id!r} in this session", sessionId=session_id, invocationId=invocation_id)
            asked = ((user_event.get("actions") or {}).get("state_delta")) or {}
            title = live.title
            await self.engine.rewind(session_id, invocation_id)
            # A rewind replays state as it was before the turn; a title set by that turn (or a
            # rename after it) would revert. Titles are the user's, not the turn's: keep it.
            after = await self.reader.session_state(session_id)
            if title_of(after) != title:
                session = await self._service.get_session(
                    app_name=APP_NAME, user_id=USER_ID, session_id=session_id, config=GetSessionConfig(num_recent_events=0)
                )
                assert session is not None
                await self._service.append_event(session, _bookkeeping_event({"title": title}))
            ui = await self.reader.ui_session(session_id)
        return {
            "session": ui,
            "restored": {
                "mode": asked.get("active_mode") or "library",
                "active_context_items": asked.get("active_context_items"),
                "collection": asked.get("active_collection"),
                "snippets": asked.get("snippets") or [],
                "text": "".join(p.get("text") or "" for p in user_event["content"]["parts"] if not p.get("thought")),
            },
        }
