"""The fast read path: sessions and events straight from ADK's tables, without pydantic.

ADK's `get_session` turns every row into a pydantic Event; showing a session needs
only the stored JSON. The SQL here mirrors ADK 2.13's own queries (`database_session_service.py`):
events ordered by (timestamp, id), the same order ADK gives after reversing its DESC scan, and
`update_time` read as naive UTC exactly as `StorageSession.get_update_timestamp` does, so the
result equals formatting ADK's Session (tests/unit/store/test_read_equivalence.py).
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
import orjson

from zocratesd.errors import SessionNotFound
from zocratesd.store import slim
from zocratesd.store.sqlite import APP_NAME, USER_ID, StoreGate, sqlite_datetime
from zocratesd.store.thread import ConnectionThread
from zocratesd.store.ui import UiSession, apply_rewinds, title_of, ui_view
from zocratesd.updates import Json, StoredEvent

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
_WINDOW_SQL = (
    "SELECT event_data FROM events WHERE app_name = ? AND user_id = ? AND session_id = ? AND timestamp >= ?"
    " ORDER BY timestamp ASC, id ASC"
)
_EXISTS_SQL = "SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?"

T = TypeVar("T")


def sql_time_to_epoch(value: Any) -> float:
    """A `DATETIME` column as ADK reads it: naive means UTC."""
    dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def epoch_to_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


def sql_time_to_iso(value: Any) -> str:
    """The same instant as ISO 8601 UTC ("...Z"). SQLAlchemy stores naive UTC as
    'YYYY-MM-DD HH:MM:SS.ffffff', so this is a string edit, not two datetime round trips."""
    text = str(value)
    if len(text) == 26 and text[10] == " ":
        return f"{text[:10]}T{text[11:]}Z"
    return epoch_to_iso(sql_time_to_epoch(value))


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection for the duration of a synchronous block.

    Parsing and formatting a long session allocates ~300k short-lived, acyclic objects (the stored
    JSON), which trips generation-0 thresholds hundreds of times; refcounting frees them anyway.
    The block must not await: other tasks keep the collector's normal schedule.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class SessionRow(msgspec.Struct, frozen=True):
    """One line of the session list."""

    id: str
    title: str
    created_at: float
    updated_at: float
    cwd: str | None
    updated_iso: str


class LiveSession(msgspec.Struct, frozen=True):
    """A session's state and its live events (rewinds applied), ready to format or replay."""

    id: str
    state: Json
    updated_at: float
    live: list[StoredEvent]
    first_timestamp: float | None

    @property
    def title(self) -> str:
        return title_of(self.state)

    def ui(self) -> UiSession:
        return ui_view(self.id, self.state, self.updated_at, self.live, self.first_timestamp)


class SessionReader:
    """Reads over a connection of its own: plain sqlite3 in a thread of its own (store/thread.py),
    `query_only`.

    SQLAlchemy's async adapter costs about twice a plain fetch (bench/PROFILE.md). In WAL mode
    this reader never blocks the writer and is never blocked by it. Queries run one at a time, in
    order; each is a few milliseconds.
    Every read passes the file's `StoreGate`, so it waits while maintenance has the store paused.
    Made by `SessionsDb`: `connect` opens the connection (lazily, again after `aclose()`);
    `tables` says whether ADK's tables exist (asked until they do): a store the engine has not made
    yet (a new data dir, before the engine loaded) has no session, and is answered as such.
    """

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], gate: StoreGate,
        tables: Callable[[], Awaitable[bool]] | None = None,
    ):
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._thread = ConnectionThread("zocratesd-store-reader")
        self._gate = gate
        self._tables = tables

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """`fn` on the connection, in the reader's thread; `empty` when there is no store yet."""
        if self._tables is not None:
            if not await self._tables():
                return empty
            self._tables = None
        async with self._gate.request():
            return await self._thread.run(self._serve, fn)

    def _serve(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return fn(self._connection())

    async def aclose(self) -> None:
        """Close the connection (reopened on the next read); waits for a read in progress. Not
        gated: `SessionsDb.paused()` calls it with the gate closed."""

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._thread.run(close)
        self._thread.close()

    async def list_sessions(self) -> list[SessionRow]:
        """Every session, oldest first by creation (the spec's order for `GET /sessions`)."""
        no_rows: list[Any] = []
        rows = await self._run(lambda c: c.execute(_SESSIONS_SQL, (APP_NAME, USER_ID)).fetchall(), no_rows)
        out = []
        for sid, title, created, cwd, create_time, update_time in rows:
            out.append(
                SessionRow(
                    id=sid,
                    title=title_of({"title": title}),
                    created_at=float(created) if isinstance(created, (int, float)) else sql_time_to_epoch(create_time),
                    updated_at=sql_time_to_epoch(update_time),
                    cwd=cwd if isinstance(cwd, str) else None,
                    updated_iso=sql_time_to_iso(update_time),
                )
            )
        out.sort(key=lambda r: (r.created_at, r.id))
        return out

    async def exists(self, session_id: str) -> bool:
        params = (APP_NAME, USER_ID, session_id)
        return await self._run(lambda c: c.execute(_EXISTS_SQL, params).fetchone() is not None, False)

    async def session_state(self, session_id: str) -> Json:
        """A session's stored state (one row); raises SessionNotFound."""
        params = (APP_NAME, USER_ID, session_id)
        head = await self._run(lambda c: c.execute(_SESSION_SQL, params).fetchone(), None)
        if head is None:
            raise SessionNotFound(session_id)
        return orjson.loads(head[0]) if head[0] else {}

    async def _rows(self, session_id: str) -> tuple[Any, list[Any]]:
        params = (APP_NAME, USER_ID, session_id)

        def read(c: sqlite3.Connection) -> tuple[Any, list[Any]]:
            # One read transaction for both queries: the events match the state they come with.
            c.execute("BEGIN")
            try:
                head = c.execute(_SESSION_SQL, params).fetchone()
                rows = c.execute(_EVENTS_SQL, params).fetchall() if head is not None else []
            finally:
                c.execute("COMMIT")
            return head, rows

        no_rows: list[Any] = []
        head, rows = await self._run(read, (None, no_rows))
        if head is None:
            raise SessionNotFound(session_id)
        return head, rows

    @staticmethod
    def _parse(session_id: str, head: Any, rows: list[Any]) -> LiveSession:
        loads = orjson.loads
        events = [loads(r[0]) for r in rows if r[0] is not None]
        return LiveSession(
            id=session_id,
            state=loads(head[0]) if head[0] else {},
            updated_at=sql_time_to_epoch(head[1]),
            live=apply_rewinds(events),
            first_timestamp=events[0].get("timestamp") if events else None,
        )

    async def live_session(self, session_id: str) -> LiveSession:
        """State and live events of one session; raises SessionNotFound."""
        head, rows = await self._rows(session_id)
        with gc_paused():
            return self._parse(session_id, head, rows)

    async def window(self, session_id: str, after_timestamp: float) -> list[StoredEvent]:
        """The live events at or after `after_timestamp` (rewinds applied): what a turn loads after
        a compaction (ADK's `GetSessionConfig(after_timestamp=...)`, the same filter on the same
        column). Raises SessionNotFound."""
        params = (APP_NAME, USER_ID, session_id)
        after = sqlite_datetime(after_timestamp)

        def read(c: sqlite3.Connection) -> tuple[Any, list[Any]]:
            c.execute("BEGIN")
            try:
                head = c.execute(_SESSION_SQL, params).fetchone()
                rows = c.execute(_WINDOW_SQL, (*params, after)).fetchall() if head is not None else []
            finally:
                c.execute("COMMIT")
            return head, rows

        no_rows: list[Any] = []
        head, rows = await self._run(read, (None, no_rows))
        if head is None:
            raise SessionNotFound(session_id)
        with gc_paused():
            return apply_rewinds([orjson.loads(r[0]) for r in rows if r[0] is not None])

    async def ui_session(self, session_id: str) -> UiSession:
        """The UI view (spec 2.2) of one session; raises SessionNotFound. The view reads a dozen
        keys per event, so the events are decoded only that far (store/slim.py; bench/PROFILE.md has
        the measurements); the result equals `live_session(...).ui()` byte for byte."""
        head, rows = await self._rows(session_id)
        with gc_paused():
            return self._view(session_id, head, rows)

    @staticmethod
    def _view(session_id: str, head: Any, rows: list[Any]) -> UiSession:
        try:
            events = slim.decode_events(rows)
        except (slim.DecodeError, TypeError):  # not events as ADK writes them: whole, as before
            return SessionReader._parse(session_id, head, rows).ui()
        state = orjson.loads(head[0]) if head[0] else {}
        first = events[0].get("timestamp") if events else None
        view = ui_view(session_id, state, sql_time_to_epoch(head[1]), apply_rewinds(events), first)
        if view["pending_hitl"] is not None and slim.has_wide_int(view["pending_hitl"]):
            return SessionReader._parse(session_id, head, rows).ui()  # orjson's floats for those
        return view
