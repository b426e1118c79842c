"""The ADK session service for a data dir, with the SQLite settings ADK leaves out.

ADK's DatabaseSessionService sets neither WAL nor a busy timeout (research/adk.md section 1). We set
both on every pooled connection, plus foreign keys, before the first query runs:

- WAL, so the read path (and a user's `sqlite3` shell) never blocks a turn's writes;
- synchronous=FULL (SQLite's default, restated on purpose): a committed event survives power loss;
  users were promised that their history never gets lost;
- a 30 s busy timeout instead of sqlite3's 5 s, so a long checkpoint or VACUUM delays a writer
  instead of failing its turn with "database is locked".

Every request that touches the file passes a `StoreGate` (one per database path): ADK's service
through its single connection chokepoint, `SessionReader` through its worker. `paused_store()`
closes the gate, waits for the requests in flight, and closes every connection this process holds,
so maintenance can swap a vacuumed copy in (research/zotero_ops.md section 5: a connection left
open across the swap corrupts the new file).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
from sqlalchemy import event as sa_event
from sqlalchemy import text as sa_text

from google.adk.sessions import DatabaseSessionService

from zocratesd import locations
from zocratesd.store.writer import FastAppendSessionService

APP_NAME = "zocrates"
# zocratesd is a per-user daemon: every session belongs to the one local user.
USER_ID = "local"

BUSY_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)

_services: dict[Path, FastAppendSessionService] = {}
_gates: dict[Path, StoreGate] = {}


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


def store_gate(path: Path) -> StoreGate:
    """The gate of the database file at `path` (one per resolved path, made on first use)."""
    key = Path(path).resolve()
    gate = _gates.get(key)
    if gate is None:
        gate = _gates[key] = StoreGate()
    return gate


def _install_gate(svc: DatabaseSessionService, gate: StoreGate) -> None:
    """Route ADK's database work through `gate`.

    ADK 2.13 opens every ORM session through `_rollback_on_exception_session` (the only other
    connection use is `prepare_tables`' first run, which `paused_store` completes beforehand).
    Private, hence the pin on google-adk 2.13 (pyproject.toml).
    """
    inner = svc._rollback_on_exception_session

    @asynccontextmanager
    async def gated(*, read_only: bool = False) -> AsyncIterator[Any]:
        async with gate.request():
            async with inner(read_only=read_only) as sql_session:
                yield sql_session

    svc._rollback_on_exception_session = gated  # type: ignore[method-assign]


def db_path(zotero_data_dir: Path) -> Path:
    return locations.state_dir(zotero_data_dir) / locations.DB_NAME


def _configure_connection(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=FULL")
    finally:
        cur.close()


def get_session_service(zotero_data_dir: Path) -> FastAppendSessionService:
    """The one session service for this data dir (ADK's DatabaseSessionService, with the fast
    `append_event` of store/writer.py), created on first use (tables not yet made: await
    `prepare_tables()` at start so the first request does not pay for it)."""
    key = Path(zotero_data_dir).resolve()
    svc = _services.get(key)
    if svc is None:
        path = db_path(key)
        locations.ensure_private_dir(path.parent)
        svc = FastAppendSessionService(
            db_file=path,
            busy_timeout_s=BUSY_TIMEOUT_S,
            db_url=f"sqlite+aiosqlite:///{path}",
            connect_args={"timeout": BUSY_TIMEOUT_S},
        )
        sa_event.listen(svc.db_engine.sync_engine, "connect", _configure_connection)
        _install_gate(svc, store_gate(path))
        svc.gate = store_gate(path)
        _services[key] = svc
    return svc


class _Closable(Protocol):
    def aclose(self) -> Awaitable[None]: ...


async def reopen_engine(svc: DatabaseSessionService) -> str:
    """Open one pooled connection now (the connect listener re-applies WAL and the pragmas) and
    return the file's journal mode; the first request after a pause then pays nothing."""
    async with svc.db_engine.connect() as conn:
        return str((await conn.execute(sa_text("PRAGMA journal_mode"))).scalar())


@asynccontextmanager
async def paused_store(
    svc: DatabaseSessionService, db_file: Path, *closables: _Closable, drain_timeout_s: float
) -> AsyncIterator[None]:
    """No connection of this process is open on `db_file` for the body's duration.

    Closes the file's gate (new requests wait, they are not refused), waits for the requests in
    flight (StoreBusy after `drain_timeout_s`, nothing closed), disposes ADK's engine and calls
    `aclose()` on each of `closables` (the `SessionReader`, maintenance's own reader). On the way
    out, also after an error or a cancellation, the engine is reconnected eagerly (pragmas and WAL
    re-applied; a failure there is logged, the next request retries) and the gate opens; the
    closables reopen lazily on their next use.
    """
    await svc.prepare_tables()  # its first run bypasses the gate; make sure that is behind us
    async with store_gate(db_file).paused(drain_timeout_s):
        try:
            await svc.db_engine.dispose()
            if isinstance(svc, FastAppendSessionService):
                svc.close_writer()
            for c in closables:
                await c.aclose()
            yield
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    mode = await reopen_engine(svc)
                    if mode != "wal":
                        log.warning("%s reopened in journal mode %r, not WAL", db_file, mode)
                except Exception:
                    log.exception("reopening %s after a pause failed; the next request retries", db_file)


async def close_session_services(zotero_data_dir: Path | None = None) -> None:
    """Dispose the engine(s): all of them, or the one for `zotero_data_dir`."""
    keys = list(_services) if zotero_data_dir is None else [Path(zotero_data_dir).resolve()]
    for key in keys:
        svc = _services.pop(key, None)
        if svc is not None:
            await svc.close()


def integrity_check(path: Path) -> str:
    """`PRAGMA integrity_check` on a separate connection: 'ok' or SQLite's first complaint."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
