"""ADK's session service with a fast `append_event` and `get_session`: the same rows and the same
`Session` objects, a fraction of the cost.

A turn loads its session once and appends five or six events. ADK's `DatabaseSessionService`
spends an ORM unit of work, three SELECTs and about ten thread hand-offs through aiosqlite on each
append, and ORM work on each load before any event is validated (bench/PROFILE.md). This subclass
does both with plain `sqlite3`, in one transaction and one hop to the connection's own thread
(store/thread.py), and changes nothing else: sessions are
created, listed, deleted and rewound by ADK's own code, which reads back exactly what it would have
written (`tests/unit/store/test_fast_append.py` compares rows byte for byte and sessions field by
field).

What it must keep from ADK 2.13 (`database_session_service.py`, `append_event`):
- temp state applied in memory and trimmed before persisting; partial events never stored;
- the stale-writer check on the session row's update marker (`StaleSessionError`);
- the session state delta merged into `sessions.state` (JSON, as `DynamicJSON` writes it), and
  `sessions.update_time` set to the event's time (naive UTC, SQLAlchemy's SQLite format);
- the event row `StorageEvent.from_event` builds (`event_data` = `model_dump(exclude_none,
  mode="json")` as `json.dumps` writes it).
App (`app:`) and user (`user:`) state deltas, which Zocrates never writes, and session objects that
ADK did not load (no update marker) go through ADK's own path unchanged.

The connection's thread keeps the event loop free while SQLite waits on a lock (busy timeout), so a
write held up by another connection of this process can never deadlock it.

ADK's own service (and SQLAlchemy, aiosqlite and the dialects ADK's schema module imports: a
quarter of the engine's import, store/adk_service.py) is built only when something needs it (`adk()`): making
the tables of a new file, the first session of a new file, listing or deleting sessions, app or
user state. A daemon that starts on an existing store and answers a prompt never imports it: the
first turn after a cold start does not wait for it. The check that a file is as ADK 2.13 prepares it
(`ADK_TABLES`, `ADK_INDEXES`, `SCHEMA_VERSION`; pinned to ADK's schema by the tests) is three
sqlite3 queries; anything else (a new file, an older ADK's schema) goes to ADK's `prepare_tables`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.platform import time as platform_time
from google.adk.sessions import Session, State
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse

from zocratesd import deferred
from zocratesd.adkcompat import StaleSessionError, apply_rewinds, json_safe_state_delta, set_update_marker, update_marker
from zocratesd.store.sqlite import StoreGate, sqlite_datetime
from zocratesd.store.thread import ConnectionThread
from zocratesd.store.ui import UiSession, ui_view
from zocratesd.updates import StoredEvent

if TYPE_CHECKING:  # loaded by `adk()`, when first needed (module doc)
    from google.adk.sessions import DatabaseSessionService

# ADK's own service and SQLAlchemy (module doc): loaded by `adk()` when first needed.
ADK_SERVICE_MODULE: Final = "zocratesd.store.adk_service"
# A session loaded for its state alone (an append outside a turn).
NO_EVENTS: Final = GetSessionConfig(num_recent_events=0)

# How many appended events' JSON the writer keeps for `take_dump`. A turn takes each one right
# after its append (ADK yields an event once it is stored), so this only needs to cover the turns
# running at once; what nobody takes (bookkeeping, compaction) falls out, oldest first.
KEPT_DUMPS: Final = 128

# What ADK 2.13's `prepare_tables` leaves in a file it has prepared (its V1 schema, JSON events):
# its tables, its index, and the schema version row. tests/unit/store/test_fast_append.py pins
# these to ADK's own metadata. A file without all of them goes to ADK's `prepare_tables`.
ADK_TABLES: Final = frozenset({"adk_internal_metadata", "sessions", "events", "app_states", "user_states"})
ADK_INDEXES: Final = frozenset({"idx_events_app_user_session_ts_id"})
SCHEMA_VERSION: Final = ("schema_version", "1")  # (key, value) in adk_internal_metadata
# ADK's message for a stale append (database_session_service._STALE_SESSION_ERROR_MESSAGE, 2.13).
STALE_SESSION_MESSAGE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def merge_state(app_state: dict[str, Any], user_state: dict[str, Any], session_state: dict[str, Any]) -> dict[str, Any]:
    """A session's state as ADK 2.13 loads it (`_merge_state`): its own keys, then app and user
    state under their prefixes."""
    merged = copy.deepcopy(session_state)
    merged.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
    return merged


def _marker(stored: str) -> tuple[str, float]:
    """The update marker and timestamp ADK derives from a stored `update_time` (StorageSession)."""
    dt = datetime.fromisoformat(stored)
    return dt.isoformat(timespec="microseconds"), dt.replace(tzinfo=UTC).timestamp()


class FastAppendSessionService(BaseSessionService):
    """ADK's `DatabaseSessionService` for one file, with sqlite3 doing the work of a turn (see the
    module docstring).

    `connect` opens the sqlite3 connection (autocommit, the store's pragmas applied: SessionsDb's);
    `gate` is the file's StoreGate, which every request here passes; `make_adk` builds ADK's
    service for the file (SessionsDb's: pragmas and gate installed on it), called by `adk()` after
    its modules are imported in a worker thread. The rest goes to ADK.
    """

    def __init__(
        self, *, connect: Callable[[], sqlite3.Connection], gate: StoreGate, make_adk: Callable[[], DatabaseSessionService]
    ):
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()  # one writer thread on the connection at a time
        self._thread = ConnectionThread("zocratesd-store-writer")  # the connection's calls, in order
        self.gate = gate
        self._dumps: OrderedDict[str, StoredEvent] = OrderedDict()  # event id -> its stored JSON
        self._make_adk = make_adk
        self._adk: DatabaseSessionService | None = None
        self._adk_lock = asyncio.Lock()
        self._tables_ready = False
        # One lock per session for appends (as ADK's `_with_session_lock`); a lock lives while a
        # task holds or waits on it.
        self._session_locks: weakref.WeakValueDictionary[tuple[str, str, str], asyncio.Lock] = weakref.WeakValueDictionary()

    # --- ADK's own service, when needed -----------------------------------------------------------

    @property
    def adk_service(self) -> DatabaseSessionService | None:
        """ADK's service if it was built (SessionsDb closes and reopens its pool), else None."""
        return self._adk

    async def adk(self) -> DatabaseSessionService:
        """ADK's `DatabaseSessionService` for the file, built on first use: its modules (SQLAlchemy
        and the rest) are imported in a worker thread, so the event loop keeps serving."""
        if self._adk is None:
            async with self._adk_lock:
                if self._adk is None:
                    await anyio.to_thread.run_sync(deferred.load, ADK_SERVICE_MODULE)
                    self._adk = self._make_adk()
        return self._adk

    async def prepare_tables(self) -> None:
        """Make sure the file is as ADK 2.13 prepares it: checked with sqlite3 (once), else made
        by ADK's own `prepare_tables`."""
        if self._tables_ready:
            return
        async with self.gate.request():
            ready = await self._thread.run(self._prepared)
        if not ready:
            # Not under the gate: ADK's sessions pass it themselves (`adk_service`).
            await (await self.adk()).prepare_tables()
        self._tables_ready = True

    def _prepared(self) -> bool:
        with self._conn_lock:
            conn = self._connection()
            names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
            if not (ADK_TABLES <= names and ADK_INDEXES <= names):
                return False
            row = conn.execute("SELECT value FROM adk_internal_metadata WHERE key = ?", (SCHEMA_VERSION[0],)).fetchone()
            return row is not None and row[0] == SCHEMA_VERSION[1]

    @asynccontextmanager
    async def _session_lock(self, app_name: str, user_id: str, session_id: str) -> AsyncIterator[None]:
        key = (app_name, user_id, session_id)
        lock = self._session_locks.get(key)
        if lock is None:
            lock = self._session_locks[key] = asyncio.Lock()
        async with lock:
            yield

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await (await self.adk()).list_sessions(app_name=app_name, user_id=user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await (await self.adk()).delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await (await self.adk()).get_user_state(app_name=app_name, user_id=user_id)

    def take_dump(self, event_id: str) -> StoredEvent | None:
        """The JSON this writer stored for event `event_id` (its `model_dump(exclude_none=True,
        mode="json")`), once: a running turn's stream reads it instead of dumping the event again."""
        return self._dumps.pop(event_id, None)

    # --- the connection -----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def journal_mode(self) -> str:
        """The file's journal mode, through the writer's connection (opened if closed: after a
        pause this reconnects it, as SessionsDb wants)."""
        with self._conn_lock:
            return str(self._connection().execute("PRAGMA journal_mode").fetchone()[0])

    def close_writer(self) -> None:
        """Close the sqlite3 connection (maintenance swaps the file; the next append reopens)."""
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def close(self) -> None:
        self.close_writer()
        self._thread.close()
        if self._adk is not None:
            await self._adk.close()

    # --- create -------------------------------------------------------------------------------

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        """ADK's `create_session` (2.13) with sqlite3, for a session id given by the caller and no
        app or user state (what the daemon does); anything else, and the very first session of an
        app and user (whose state rows ADK creates), goes through ADK."""
        deltas = json_safe_state_delta(state or {})
        if session_id is None or deltas["app"] or deltas["user"]:
            return await (await self.adk()).create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)
        await self.prepare_tables()
        stored_now = sqlite_datetime(platform_time.get_time())
        async with self.gate.request():
            found = await self._thread.run(self._create, app_name, user_id, session_id, deltas["session"], stored_now)
        if found is None:  # no state rows yet: ADK makes them
            return await (await self.adk()).create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)
        app_json, user_json = found
        merged = merge_state(json.loads(app_json) if app_json else {}, json.loads(user_json) if user_json else {},
                              dict(deltas["session"]))
        marker, last_update = _marker(stored_now)
        session = Session(app_name=app_name, user_id=user_id, id=session_id, state=merged, events=[],
                          last_update_time=last_update)
        set_update_marker(session, marker)
        return session

    def _create(
        self, app_name: str, user_id: str, session_id: str, session_state: dict[str, Any], stored_now: str
    ) -> tuple[Any, Any] | None:
        with self._conn_lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                app = conn.execute("SELECT state FROM app_states WHERE app_name = ?", (app_name,)).fetchone()
                user = conn.execute(
                    "SELECT state FROM user_states WHERE app_name = ? AND user_id = ?", (app_name, user_id)
                ).fetchone()
                if app is None or user is None:
                    conn.execute("ROLLBACK")
                    return None
                try:
                    conn.execute(
                        "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?)",
                        (app_name, user_id, session_id, json.dumps(session_state), stored_now, stored_now),
                    )
                except sqlite3.IntegrityError:
                    raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return app[0], user[0]

    # --- get ----------------------------------------------------------------------------------

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        """ADK's `get_session` (2.13), read with sqlite3: the session row, its events (optionally
        only those at or after `after_timestamp`, or the latest `num_recent_events`), app and user
        state merged in with their prefixes."""
        await self.prepare_tables()
        after = sqlite_datetime(config.after_timestamp) if config and config.after_timestamp else None
        limit = config.num_recent_events if config else None
        async with self.gate.request():
            found = await self._thread.run(self._read, app_name, user_id, session_id, after, limit)
        if found is None:
            return None
        state_json, update_time, rows, app_json, user_json = found
        events = []
        for event_id, invocation_id, stored_time, data_json in reversed(rows):
            data = json.loads(data_json) if data_json else {}
            ts = data.get("timestamp")
            if ts is None:
                ts = datetime.fromisoformat(stored_time).replace(tzinfo=UTC).timestamp()
            events.append(Event.model_validate({**data, "id": event_id, "invocation_id": invocation_id, "timestamp": ts}))
        state = merge_state(
            json.loads(app_json) if app_json else {},
            json.loads(user_json) if user_json else {},
            json.loads(state_json) if state_json else {},
        )
        marker, last_update = _marker(update_time)
        session = Session(app_name=app_name, user_id=user_id, id=session_id, state=state, events=events,
                          last_update_time=last_update)
        set_update_marker(session, marker)
        return session

    def _read(
        self, app_name: str, user_id: str, session_id: str, after: str | None, limit: int | None
    ) -> tuple[Any, ...] | None:
        with self._conn_lock:
            conn = self._connection()
            conn.execute("BEGIN")  # one snapshot: the events match the session row
            try:
                head = conn.execute(
                    "SELECT state, update_time FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
                    (app_name, user_id, session_id),
                ).fetchone()
                if head is None:
                    return None
                rows: list[Any] = []
                if limit != 0:
                    sql = ("SELECT id, invocation_id, timestamp, event_data FROM events"
                           " WHERE app_name = ? AND session_id = ? AND user_id = ?")
                    args: list[Any] = [app_name, session_id, user_id]
                    if after is not None:
                        sql += " AND timestamp >= ?"
                        args.append(after)
                    sql += " ORDER BY timestamp DESC, id DESC"
                    if limit is not None:
                        sql += " LIMIT ?"
                        args.append(limit)
                    rows = conn.execute(sql, args).fetchall()
                app = conn.execute("SELECT state FROM app_states WHERE app_name = ?", (app_name,)).fetchone()
                user = conn.execute(
                    "SELECT state FROM user_states WHERE app_name = ? AND user_id = ?", (app_name, user_id)
                ).fetchone()
            finally:
                conn.execute("COMMIT")
        return head[0], head[1], rows, app[0] if app else None, user[0] if user else None

    # --- append -------------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        # Split as ADK splits it; `temp:` keys are in none of the three (they are never stored).
        deltas = json_safe_state_delta(delta) if delta else {"app": {}, "user": {}, "session": {}}
        if deltas["app"] or deltas["user"] or update_marker(session) is None:
            return await (await self.adk()).append_event(session, event)
        await self.prepare_tables()
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        session_delta = deltas["session"]
        stored_time = sqlite_datetime(event.timestamp)
        data = cast("StoredEvent", event.model_dump(exclude_none=True, mode="json"))
        row = (
            event.id, session.app_name, session.user_id, session.id, event.invocation_id, stored_time, json.dumps(data),
        )
        expected = update_marker(session)
        async with self._session_lock(session.app_name, session.user_id, session.id):
            async with self.gate.request():
                marker, timestamp = await self._thread.run(
                    self._write, session.app_name, session.user_id, session.id, expected, session_delta, stored_time, row,
                )
        session.last_update_time = timestamp
        set_update_marker(session, marker)
        dumps = self._dumps
        dumps[event.id] = data
        if len(dumps) > KEPT_DUMPS:
            dumps.popitem(last=False)
        return self._commit_event_to_session(session, event)

    def _write(
        self, app_name: str, user_id: str, session_id: str, expected_marker: str, session_delta: dict[str, Any],
        stored_time: str, row: tuple[Any, ...],
    ) -> tuple[str, float]:
        """One transaction: check the session is not stale, merge its state, store the event."""
        with self._conn_lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                found = conn.execute(
                    "SELECT state, update_time FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
                    (app_name, user_id, session_id),
                ).fetchone()
                if found is None:
                    raise SessionNotFoundError(f"Session {session_id} not found.")
                state_json, update_time = found
                if _marker(update_time)[0] != expected_marker:
                    raise StaleSessionError(STALE_SESSION_MESSAGE)
                if session_delta:
                    state = json.loads(state_json) if state_json else {}
                    state.update(session_delta)
                    conn.execute(
                        "UPDATE sessions SET state = ?, update_time = ? WHERE app_name = ? AND user_id = ? AND id = ?",
                        (json.dumps(state), stored_time, app_name, user_id, session_id),
                    )
                else:
                    conn.execute(
                        "UPDATE sessions SET update_time = ? WHERE app_name = ? AND user_id = ? AND id = ?",
                        (stored_time, app_name, user_id, session_id),
                    )
                conn.execute(
                    "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return _marker(stored_time)


def bookkeeping_event(state_delta: Mapping[str, Any]) -> Event:
    """A content-less event that only changes state (a title, the seed of a new session). It never
    reaches a prompt (no content) or the UI (no text), and it is not a message, so it does not make
    an empty session non-empty (maintenance/_select.py)."""
    return Event(
        author="user",
        invocation_id=f"zocrates-meta-{Event.new_id()}",
        actions=EventActions(state_delta=dict(state_delta)),
    )


def format_session_for_ui(session: Session) -> UiSession:
    """The spec's `format_session_for_ui(session)` on an ADK `Session`: the slow reference path
    the fast reader is checked against (tests/unit/store/test_read_equivalence.py)."""
    live = [cast("StoredEvent", ev.model_dump(exclude_none=True, mode="json")) for ev in apply_rewinds(session.events)]
    first = session.events[0].timestamp if session.events else None
    return ui_view(session.id, dict(session.state), session.last_update_time, live, first)
