"""The fast read path: sessions and events straight from ADK's tables, without pydantic.

ADK's `get_session` turns every row into a pydantic Event (~0.15 ms each); showing a session needs
only the stored JSON. The SQL here mirrors ADK 2.13's own queries (`database_session_service.py`):
events ordered by (timestamp, id), the same order ADK gives after reversing its DESC scan, and
`update_time` read as naive UTC exactly as `StorageSession.get_update_timestamp` does, so the
result equals formatting ADK's Session (tests/unit/store/test_read_equivalence.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from google.adk.sessions import DatabaseSessionService

from zocratesd.errors import SessionNotFound
from zocratesd.store.service import APP_NAME, USER_ID
from zocratesd.store.ui import DEFAULT_TITLE, Json, apply_rewinds, ui_view

_SESSIONS_SQL = (
    "SELECT id, json_extract(state, '$.title'), json_extract(state, '$.created_at'),"
    " json_extract(state, '$.cwd'), create_time, update_time"
    " FROM sessions WHERE app_name = ? AND user_id = ?"
)
_SESSION_SQL = "SELECT state, update_time FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?"
_EVENTS_SQL = (
    "SELECT event_data FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
    " ORDER BY timestamp ASC, id ASC"
)
_EXISTS_SQL = "SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?"


def sql_time_to_epoch(value: Any) -> float:
    """A `DATETIME` column as ADK reads it: naive means UTC."""
    dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One line of the session list."""

    id: str
    title: str
    created_at: float
    updated_at: float
    cwd: str | None


@dataclass(frozen=True, slots=True)
class LiveSession:
    """A session's state and its live events (rewinds applied), ready to format or replay."""

    id: str
    state: Json
    updated_at: float
    live: list[Json]
    first_timestamp: float | None

    def ui(self) -> Json:
        return ui_view(self.id, self.state, self.updated_at, self.live, self.first_timestamp)


class SessionReader:
    def __init__(self, service: DatabaseSessionService):
        self._engine = service.db_engine

    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        async with self._engine.connect() as conn:
            result = await conn.exec_driver_sql(sql, params)
            return list(result.all())

    async def list_sessions(self) -> list[SessionRow]:
        """Every session, oldest first by creation (the spec's order for `GET /sessions`)."""
        rows = await self._fetch(_SESSIONS_SQL, (APP_NAME, USER_ID))
        out = []
        for sid, title, created, cwd, create_time, update_time in rows:
            out.append(
                SessionRow(
                    id=sid,
                    title=title if isinstance(title, str) and title else DEFAULT_TITLE,
                    created_at=float(created) if isinstance(created, (int, float)) else sql_time_to_epoch(create_time),
                    updated_at=sql_time_to_epoch(update_time),
                    cwd=cwd if isinstance(cwd, str) else None,
                )
            )
        out.sort(key=lambda r: (r.created_at, r.id))
        return out

    async def exists(self, session_id: str) -> bool:
        return bool(await self._fetch(_EXISTS_SQL, (APP_NAME, USER_ID, session_id)))

    async def live_session(self, session_id: str) -> LiveSession:
        """State and live events of one session; raises SessionNotFound."""
        async with self._engine.connect() as conn:
            head = (await conn.exec_driver_sql(_SESSION_SQL, (APP_NAME, USER_ID, session_id))).first()
            if head is None:
                raise SessionNotFound(session_id)
            rows = (await conn.exec_driver_sql(_EVENTS_SQL, (APP_NAME, USER_ID, session_id))).all()
        loads = json.loads
        events = [loads(r[0]) for r in rows if r[0] is not None]
        return LiveSession(
            id=session_id,
            state=loads(head[0]) if head[0] else {},
            updated_at=sql_time_to_epoch(head[1]),
            live=apply_rewinds(events),
            first_timestamp=events[0].get("timestamp") if events else None,
        )

    async def ui_session(self, session_id: str) -> Json:
        return (await self.live_session(session_id)).ui()
