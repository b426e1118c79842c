"""Sessions: create, list, view, rename, delete, replay and watch.

Reads need only sqlite3 (the store's reader) and are served while the engine loads; a write waits
at the engine gate (core/startup.py), since ADK's session service writes every session.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from typing import Any, Final

from zocratesd.core.session_config import SessionConfig
from zocratesd.core.startup import EngineGate
from zocratesd.core.validation import check_session_id, clean_title
from zocratesd.core.watchers import MAX_QUEUED_UPDATES, OnReady, Subscription, Watchers
from zocratesd.engine import SESSION_CONFIG_KEY
from zocratesd.errors import SessionNotFound
from zocratesd.store import APP_NAME, USER_ID, SessionLocks, SessionRow, SessionsDb
from zocratesd.store.reader import LiveSession, epoch_to_iso, gc_paused
from zocratesd.store.ui import DEFAULT_TITLE, UiSession, pending_checkpoint
from zocratesd.updates import Checkpoint, Title, Update, history_updates

log = logging.getLogger(__name__)

# A new session's id is minted from the clock and random bits; a clash (the same millisecond and
# the same 24 bits) is tried again this many times.
MINT_ATTEMPTS: Final = 3


def _row(session_id: str, title: str, created: Any, updated: float, cwd: str | None) -> SessionRow:
    return SessionRow(
        id=session_id, title=title, created_at=float(created) if isinstance(created, (int, float)) else updated,
        updated_at=updated, cwd=cwd, updated_iso=epoch_to_iso(updated),
    )


class SessionView(UiSession):
    """A UI session with the session's settings (core/session_config.py `view`)."""

    settings: dict[str, object]


class Sessions:
    def __init__(
        self, db: SessionsDb, locks: SessionLocks, watchers: Watchers, session_config: SessionConfig, gate: EngineGate
    ) -> None:
        self.db = db
        self.reader = db.reader  # the store's fast read path, what every view reads
        self.locks = locks
        self.watchers = watchers
        self.session_config = session_config
        self.gate = gate

    async def create(
        self, *, title: str | None = None, cwd: str | None = None, settings: Mapping[str, Any] | None = None,
    ) -> SessionRow:
        """A new session; `settings` (`{config_id: value}`) are those it starts with instead of the
        defaults (an editor's citation style), checked before anything is written."""
        title = clean_title(title) if title is not None else DEFAULT_TITLE
        initial = await self.session_config.initial(settings) if settings else None
        await self.gate.wait()
        now = time.time()
        for _ in range(MINT_ATTEMPTS):
            session_id = f"session-{int(now * 1000)}-{secrets.token_hex(3)}"
            try:
                session = await self.db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
                break
            except Exception:  # pragma: no cover - ADK's AlreadyExistsError: 24 random bits in the same millisecond
                if not await self.reader.exists(session_id):
                    raise
        else:  # pragma: no cover
            raise RuntimeError("could not mint a unique session id")
        # Seeded through an event, not create_session(state=...): a rewind replays event deltas
        # only, so create-time state would be wiped by the first rewind (research/adk.md section 3).
        seed: dict[str, object] = {"title": title, "created_at": now}
        if cwd:
            seed["cwd"] = cwd
        if initial:
            seed[SESSION_CONFIG_KEY] = initial
        await self.db.append_state(session, seed)
        return _row(session_id, title, now, session.last_update_time, cwd)

    async def list_all(self) -> list[SessionRow]:
        return await self.reader.list_sessions()

    async def get(self, session_id: str) -> SessionView:
        """The UI session (spec 2.2) with rewinds applied and `pending_hitl`, and the session's
        settings (core/session_config.py), so every face shows the same."""
        ui = await self.reader.ui_session(check_session_id(session_id))
        return {**ui, "settings": self.session_config.view(await self.session_config.settings(session_id))}

    async def live(self, session_id: str) -> LiveSession:
        return await self.reader.live_session(check_session_id(session_id))

    async def rename(self, session_id: str, title: str) -> SessionRow:
        check_session_id(session_id)
        title = clean_title(title)
        await self.gate.wait()
        with self.locks.hold(session_id, "rename"):
            session = await self.db.append_state(session_id, {"title": title})  # SessionNotFound if gone
            await self.watchers.publish(session_id, Title(title))
            state = session.state
            return _row(session_id, title, state.get("created_at"), session.last_update_time, state.get("cwd"))

    async def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        await self.gate.wait()
        with self.locks.hold(session_id, "delete"):
            if not await self.reader.exists(session_id):
                raise SessionNotFound(session_id)
            await self.db.service.delete_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
        log.info("deleted session %s", session_id)

    def watch(self, session_id: str, *, limit: int = MAX_QUEUED_UPDATES, on_ready: OnReady | None = None) -> Subscription:
        return self.watchers.watch(session_id, limit=limit, on_ready=on_ready)

    async def replay(self, session_id: str) -> list[Update]:
        """The session as updates, for a client that loads it (ACP `session/load`): its history,
        then the checkpoint it waits on, if any, then its title. SessionNotFound if it is gone."""
        live = await self.reader.live_session(check_session_id(session_id))
        with gc_paused():  # thousands of short-lived, acyclic objects for a long session
            updates = history_updates(live.live)
            pending = pending_checkpoint(live.live)
            if pending is not None:  # shown, so the client knows the last turn waits on the user
                updates.append(Checkpoint.from_json(pending))
            updates.append(Title(live.title))
        return updates
