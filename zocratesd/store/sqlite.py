"""sessions.db at the SQLite level: the keys ADK files every row under, the settings every
connection gets, and the gate every request passes.

A leaf of the store: `SessionsDb` (store/database.py) builds the reader, the writer and ADK's
service from these parts, and nothing here opens a file by itself.

ADK's DatabaseSessionService sets neither WAL nor a busy timeout (research/adk.md section 1). Every
connection this process opens on the file (SQLAlchemy's pooled ones, the writer's, the reader's,
maintenance's) runs `PRAGMAS` before its first query:

- WAL, so the read path (and a user's `sqlite3` shell) never blocks a turn's writes;
- a 30 s busy timeout instead of sqlite3's 5 s, so a long checkpoint or VACUUM delays a writer
  instead of failing its turn with "database is locked";
- foreign keys on (ADK's schema cascades a session's events through them);
- synchronous=FULL (SQLite's default, restated on purpose): a committed event survives power
  loss; users were promised that their history never gets lost.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

APP_NAME = "zocrates"
# zocratesd is a per-user daemon: every session belongs to the one local user.
USER_ID = "local"

BUSY_TIMEOUT_S = 30.0

PRAGMAS: tuple[str, ...] = (
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=FULL",
)


# SQLAlchemy's storage format for DATETIME on SQLite (sqlalchemy/dialects/sqlite/base.py, DATETIME).
_SQLITE_DATETIME = "{:04d}-{:02d}-{:02d} {:02d}:{:02d}:{:02d}.{:06d}"


def sqlite_datetime(epoch: float) -> str:
    """A time as ADK stores it on SQLite: naive UTC, in SQLAlchemy's DATETIME format."""
    dt = datetime.fromtimestamp(epoch, UTC)
    return _SQLITE_DATETIME.format(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond)


def apply_pragmas(dbapi_conn: Any) -> None:
    """Run `PRAGMAS` on a DB-API connection: a `sqlite3.Connection`, or the aiosqlite adapter
    SQLAlchemy hands its connect listener (hence a cursor, which both have)."""
    cur = dbapi_conn.cursor()
    try:
        for pragma in PRAGMAS:
            cur.execute(pragma)
    finally:
        cur.close()


def connect(path: Path, *, query_only: bool = False) -> sqlite3.Connection:
    """A plain sqlite3 connection with `PRAGMAS` applied, for use from worker threads.

    Autocommit (`isolation_level=None`): every transaction is an explicit BEGIN ... COMMIT, so
    none is left open by accident (an open one would keep a snapshot and block the VACUUM swap's
    checkpoint). `query_only` refuses writes (the read path)."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        apply_pragmas(conn)
        if query_only:
            conn.execute("PRAGMA query_only=ON")
    except BaseException:
        conn.close()
        raise
    return conn


class StoreBusy(Exception):
    """The store could not be paused: requests in flight did not finish in time."""


class StoreGate:
    """Admission of requests to one database file, and a pause for swapping the file.

    `request()` is entered around every unit of database work; it waits while the gate is paused.
    `paused()` closes the gate to new requests, waits until those in flight have left, holds the
    gate closed for its body and opens it again on the way out, whatever happened. One pause at a
    time; a second `paused()` raises RuntimeError. Event-loop only (no thread safety needed: the
    count changes only between awaits).
    """

    def __init__(self) -> None:
        self._inflight = 0
        self._resumed: anyio.Event | None = None  # set while paused
        self._drained: anyio.Event | None = None

    @property
    def is_paused(self) -> bool:
        return self._resumed is not None

    @asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        while self._resumed is not None:
            await self._resumed.wait()
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0 and self._drained is not None:
                self._drained.set()

    @asynccontextmanager
    async def paused(self, drain_timeout_s: float) -> AsyncIterator[None]:
        """Raises StoreBusy (gate open again) if requests in flight outlast `drain_timeout_s`."""
        if self._resumed is not None:
            raise RuntimeError("the store is already paused")
        self._resumed = anyio.Event()
        try:
            if self._inflight:
                self._drained = anyio.Event()
                with anyio.move_on_after(drain_timeout_s):
                    await self._drained.wait()
                if self._inflight:
                    raise StoreBusy(f"{self._inflight} store request(s) still in flight after {drain_timeout_s} s")
            yield
        finally:
            self._drained = None
            resumed, self._resumed = self._resumed, None
            resumed.set()
