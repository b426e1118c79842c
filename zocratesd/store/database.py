"""`SessionsDb`: the one owner of a data dir's sessions.db.

It holds everything this process opens on the file: ADK's session service (with the fast sqlite3
writer of store/writer.py), the fast read path (store/reader.py), and the `StoreGate` every request
passes. Every connection gets the same pragmas (store/sqlite.py `PRAGMAS`): SQLAlchemy's pooled ones
through a connect listener, the writer's and the reader's through `sqlite.connect`.

Made once by the composition root (`Daemon`), explicitly: `SessionsDb.open(data_dir)`, closed with
`aclose()`. The reader needs nothing but sqlite3; the session service (store/writer.py, and with it
ADK) is built by `load_service()`, which the daemon calls once the process has loaded the engine
in the background (process/startup.py), after it has started serving reads
(`open(..., load_service=False)`); it builds ADK's own `DatabaseSessionService` (and loads
SQLAlchemy) only when something needs it (store/adk_service.py). There is no registry: maintenance
and compaction are handed the instance. A second owner of the same file in one process would have
its own gate; the VACUUM swap would then find its connections open and refuse (`_swap.SwapBusy`)
rather than corrupt anything, but nothing of zocratesd makes one.

`paused()` closes the gate, waits for the requests in flight, and closes every connection of this
owner, so maintenance can swap a vacuumed copy in (research/zotero_ops.md section 5: a connection
left open across the swap corrupts the new file).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio

from zocratesd import deferred, locations
from zocratesd.errors import SessionNotFound
from zocratesd.logtext import escape_for_log
from zocratesd.store.reader import SessionReader
from zocratesd.store.sqlite import (
    APP_NAME,
    BUSY_TIMEOUT_S,
    USER_ID,
    StoreBusy,
    StoreGate,
    connect,
)

if TYPE_CHECKING:  # ADK and SQLAlchemy are loaded with the engine (module doc)
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService, Session

    from zocratesd.store.writer import FastAppendSessionService

__all__ = [
    "APP_NAME",
    "BUSY_TIMEOUT_S",
    "USER_ID",
    "SessionsDb",
    "StoreBusy",
    "StoreGate",
    "StoreDamaged",
    "bookkeeping_event",
    "check_intact",
    "db_path",
    "integrity_check",
]

log = logging.getLogger(__name__)


def db_path(zotero_data_dir: Path) -> Path:
    return locations.state_dir(zotero_data_dir) / locations.DB_NAME


# The store's ADK side (the session service, the events it writes): a module on the first
# reply's path must not load it; the process loads it with the engine (process/startup.py).
WRITE_PATH: Final = "zocratesd.store.writer"
ADK_SERVICE: Final = "zocratesd.store.adk_service"


def _write_path() -> ModuleType:
    return deferred.load(WRITE_PATH)


def bookkeeping_event(state_delta: Mapping[str, Any]) -> Event:
    """A content-less event that only changes state (store/writer.py `bookkeeping_event`)."""
    event: Event = _write_path().bookkeeping_event(state_delta)
    return event


# The tables of ADK 2.13's schema that the read paths query.
_ADK_TABLES = frozenset({"sessions", "events", "app_states", "user_states"})


class _Closable(Protocol):
    def aclose(self) -> Awaitable[None]: ...


class SessionsDb:
    """The owner of one sessions.db (module doc).

    - `path`: the file;
    - `gate`: its `StoreGate` (maintenance's own reads pass it too);
    - `service`: ADK's session service for it (`FastAppendSessionService`: sqlite3 for a turn's
      work, ADK's `DatabaseSessionService` built when needed), what the engine's Runner writes through;
    - `reader`: the fast read path (`SessionReader`).

    Connections open lazily; `prepare_tables()` creates ADK's tables (call it at start, so the
    first request does not pay for it).
    """

    def __init__(self, path: Path, *, load_service: bool = True) -> None:
        self.path = path
        self.gate = StoreGate()
        self._service: FastAppendSessionService | None = None
        self._service_loaded = asyncio.Event()  # set by load_service (an asyncio.Event: settable off any loop)
        self._tables_ready = False  # known to exist (prepare_tables): reads need not check again
        self.reader = SessionReader(self._connect_query_only, self.gate, tables=self._tables_for_reads)
        if load_service:
            self.load_service()

    @classmethod
    def open(cls, zotero_data_dir: Path, *, load_service: bool = True) -> SessionsDb:
        """The store of a Zotero data dir (`<data dir>/zocrates-data/sessions.db`; the directory is
        made private if new). Opens no connection yet. `load_service=False` leaves ADK's service
        (and ADK's import) to a later `load_service()`."""
        path = db_path(Path(zotero_data_dir).resolve())
        locations.ensure_private_dir(path.parent)
        return cls(path, load_service=load_service)

    @property
    def service(self) -> FastAppendSessionService:
        """The session service for the file (RuntimeError before `load_service()`)."""
        if self._service is None:
            raise RuntimeError("sessions.db's session service is not loaded yet (SessionsDb.load_service)")
        return self._service

    @property
    def service_loaded(self) -> bool:
        return self._service is not None

    def load_service(self) -> None:
        """Build the session service for the file (loading ADK unless the process did already, in
        the background; SQLAlchemy only when ADK's own service is needed, store/writer.py).
        Idempotent. On the event loop's thread."""
        if self._service is not None:
            return
        self._service = _write_path().FastAppendSessionService(
            connect=self.connect, gate=self.gate, make_adk=self._make_adk
        )
        self._service_loaded.set()

    def _make_adk(self) -> DatabaseSessionService:
        """ADK's own service for the file, with the store's pragmas and gate (the writer builds it
        when something needs it, after loading its module: store/writer.py)."""
        svc: DatabaseSessionService = deferred.load(ADK_SERVICE).make(self.path, self.gate)
        return svc

    def connect(self) -> sqlite3.Connection:
        """A new sqlite3 connection on the file, with the store's pragmas (the caller closes it)."""
        return connect(self.path)

    def _connect_query_only(self) -> sqlite3.Connection:
        return connect(self.path, query_only=True)

    async def prepare_tables(self) -> None:
        """Make sure ADK's tables exist (ADK creates them, through its service). Before the service
        is loaded, reads need only know that they exist; on a new file they wait for the service
        (`Daemon.start` loads it in the background, and a new file has nothing to read anyway)."""
        if self._tables_ready:
            if self._service is not None:
                await self._service.prepare_tables()  # the service checks the file once (or ADK prepares it)
            return
        if self._service is None:
            if await anyio.to_thread.run_sync(self._has_tables):
                self._tables_ready = True
                return
            await self._service_loaded.wait()  # a new file: nothing to read until ADK made the tables
        await self.service.prepare_tables()
        self._tables_ready = True

    async def _tables_for_reads(self) -> bool:
        """Whether ADK's tables exist, for the reader: made by the service once loaded; before
        that, whether an earlier daemon made them (False: a new store, with no session yet)."""
        if self._service is not None:
            await self.prepare_tables()
            return True
        if not self._tables_ready and await anyio.to_thread.run_sync(self._has_tables):
            self._tables_ready = True
        return self._tables_ready

    def _has_tables(self) -> bool:
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error:
            return False  # no file yet
        try:
            found = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error:
            return False
        finally:
            conn.close()
        return _ADK_TABLES <= found

    # --- appends that are not a turn's --------------------------------------------------------

    async def append_event(self, session: str | Session, event: Event) -> Session:
        """Append `event` to a session outside a turn (the caller holds the session's lock).

        `session` is its id, or the `Session` ADK just returned (which saves a read); the session
        is returned with the event's state applied and its update time moved. Raises
        SessionNotFound."""
        if isinstance(session, str):
            session_id = session
            loaded = await self.service.get_session(
                app_name=APP_NAME, user_id=USER_ID, session_id=session_id, config=_write_path().NO_EVENTS
            )
            if loaded is None:
                raise SessionNotFound(session_id)
            session = loaded
        await self.service.append_event(session, event)
        return session

    async def append_state(self, session: str | Session, delta: Mapping[str, Any]) -> Session:
        """Set state keys with a content-less bookkeeping event (`bookkeeping_event`): a title, a
        new session's seed. As `append_event`."""
        return await self.append_event(session, bookkeeping_event(delta))

    # --- pause and close ----------------------------------------------------------------------

    async def _reopen_engine(self) -> str:
        """Open one connection now (ADK's pool if it was built: its connect listener re-applies WAL
        and the pragmas; else the writer's) and return the file's journal mode; the first request
        after a pause then pays nothing."""
        adk = self.service.adk_service
        if adk is None:
            return await anyio.to_thread.run_sync(self.service.journal_mode)
        mode: str = await deferred.load(ADK_SERVICE).journal_mode(adk)
        return mode

    async def _close_connections(self) -> None:
        adk = self.service.adk_service
        if adk is not None:
            await adk.db_engine.dispose()
        self.service.close_writer()
        await self.reader.aclose()

    @asynccontextmanager
    async def paused(self, *also_close: _Closable, drain_timeout_s: float) -> AsyncIterator[None]:
        """No connection of this owner (nor of `also_close`) is open on the file for the body's
        duration.

        Closes the gate (new requests wait, they are not refused), waits for the requests in
        flight (StoreBusy after `drain_timeout_s`, nothing closed), disposes ADK's engine, closes
        the writer and the reader, and calls `aclose()` on each of `also_close` (maintenance's own
        reader). On the way out, also after an error or a cancellation, the engine is reconnected
        eagerly (pragmas and WAL re-applied; a failure there is logged, the next request retries)
        and the gate opens; the other connections reopen lazily on their next use.
        """
        await self.service.prepare_tables()  # its first run bypasses the gate; make sure that is behind us
        async with self.gate.paused(drain_timeout_s):
            try:
                await self._close_connections()
                for c in also_close:
                    await c.aclose()
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        mode = await self._reopen_engine()
                        if mode != "wal":
                            log.warning("%s reopened in journal mode %r, not WAL", self.path, mode)
                    except Exception:
                        log.exception("reopening %s after a pause failed; the next request retries", self.path)

    async def aclose(self) -> None:
        """Close every connection (the reader's, the writer's, ADK's pool). Using the store again
        reopens them; the daemon calls this once, at shutdown."""
        with anyio.CancelScope(shield=True):
            await self.reader.aclose()
            if self._service is not None:
                await self._service.close()

    async def __aenter__(self) -> SessionsDb:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class StoreDamaged(Exception):
    """sessions.db is damaged; the message says where, what SQLite found, and what to do."""


# How many of SQLite's complaints a damaged store's message quotes.
_DAMAGE_LINES = 3


def check_intact(path: Path) -> None:
    """StoreDamaged when the store at `path` exists and SQLite finds it damaged (`quick_check`).

    On a read-only connection, before anything opens the file to write: the last read-write
    connection to close folds the -wal into the file, and a damaged file's -wal holds the latest
    committed writes, which a recovery needs as they are. A store that cannot be read at all (a
    lock held elsewhere, a permission) is not judged here: opening it says so."""
    if not path.exists():
        return
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            rows = [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({_DAMAGE_LINES})")]
            found = [line for row in rows for line in row.splitlines() if not line.startswith("*** in database")]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        found = [str(exc)]
    if found != ["ok"]:  # or nothing: its complaints were all headings
        wal = path.with_name(path.name + "-wal")
        raise StoreDamaged(
            f"the session store {path} is damaged (SQLite: {escape_for_log('; '.join(found), 300)}). It was left as it "
            f"is{f', with its {wal.name}' if wal.exists() else ''}. To recover what you can, copy {path.name} and its "
            f"-wal file elsewhere, run `sqlite3 <the copy> .recover | sqlite3 recovered.db` there and put "
            f"recovered.db in its place; or move {path.name} and its -wal and -shm files aside to start with no "
            "saved sessions."
        )


def integrity_check(path: Path) -> str:
    """`PRAGMA integrity_check` on a separate connection: 'ok' or SQLite's first complaint."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
