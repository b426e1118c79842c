"""The core: a plain async API over the session store (and, as they land, the engine, compaction
and maintenance). Every face (the ACP/JSON-RPC peer, the HTTP shim) is a thin adapter over this
class; it knows nothing about JSON-RPC or HTTP, and reports problems as `zocratesd.errors`.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from pathlib import Path
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig

from zocratesd import __version__
from zocratesd.config import ZocratesConfig
from zocratesd.errors import InvalidInput, SessionNotFound
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
from zocratesd.store.service import db_path
from zocratesd.store.ui import DEFAULT_TITLE

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


def clean_title(title: Any) -> str:
    """A title as the user meant it: control characters become spaces, ends trimmed, 1-200 chars."""
    if not isinstance(title, str):
        raise InvalidInput("a title must be a string")
    cleaned = _CONTROL_RE.sub(" ", title).strip()
    if not cleaned:
        raise InvalidInput("a title cannot be empty")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise InvalidInput(f"a title has at most {MAX_TITLE_CHARS} characters", length=len(cleaned))
    return cleaned


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

    def __init__(self, data_dir: Path, config: ZocratesConfig):
        self.data_dir = data_dir
        self.config = config
        self.locks = SessionLocks()
        self._service = get_session_service(data_dir)
        self.reader = SessionReader(db_path(data_dir))

    async def start(self) -> None:
        """Prepare the store before the first request (so no request pays for it)."""
        await self._service.prepare_tables()

    async def aclose(self) -> None:
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
            created = session.state.get("created_at")
            return SessionRow(
                id=session_id,
                title=title,
                created_at=float(created) if isinstance(created, (int, float)) else session.last_update_time,
                updated_at=session.last_update_time,
                cwd=session.state.get("cwd"),
                updated_iso=epoch_to_iso(session.last_update_time),
            )
