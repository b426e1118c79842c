"""What maintenance reads: the candidates of each pass and the page counts.

Times are compared as numbers, never as strings: `julianday()` turns ADK's naive-UTC `DATETIME`
text ('2026-12-02 17:31:18.957204', or any ISO 8601 form someone wrote by hand) into a float, and
the cutoffs are POSIX seconds converted the same way. A value SQLite cannot parse gives NULL, and
NULL is never older than a cutoff: an unreadable row is kept, not deleted.

Empty (DESIGN.md): no event whose content has a part. Bookkeeping events (the title's state delta,
rewind markers) carry no content and do not count. An event whose JSON cannot be read counts as a
message, again so that doubt keeps a session.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeVar

import anyio
import anyio.to_thread
import msgspec

from zocratesd.store.sqlite import APP_NAME, USER_ID

if TYPE_CHECKING:
    from zocratesd.store.database import SessionsDb

T = TypeVar("T")

_UNIX_EPOCH_JULIAN_DAY = 2440587.5

_IS_MESSAGE = (
    "(e.event_data IS NULL OR NOT json_valid(e.event_data)"
    " OR coalesce(json_array_length(e.event_data, '$.content.parts'), 0) > 0)"
)
_IS_EMPTY = (
    "NOT EXISTS (SELECT 1 FROM events AS e WHERE e.app_name = s.app_name AND e.user_id = s.user_id"
    f" AND e.session_id = s.id AND {_IS_MESSAGE})"
)
_EMPTY_ONE_SQL = (
    "SELECT s.id, s.update_time FROM sessions AS s WHERE s.app_name = ? AND s.user_id = ? AND s.id = ?"
    f" AND julianday(s.create_time) < ? AND {_IS_EMPTY}"
)
# Scans of every session carry `+` on app_name and user_id: it keeps SQLite from walking the
# primary-key index and looking each row up in the table, a b-tree seek per session when every
# session matches anyway (measured: bench/PROFILE.md). Lookups of one id do not.
_KNOWN_USED = "temp.zocrates_known_used"
_OLD_UNKNOWN_SQL = (
    "SELECT s.id FROM sessions AS s WHERE +s.app_name = ? AND +s.user_id = ? AND julianday(s.create_time) < ?"
    f" AND s.id NOT IN (SELECT id FROM {_KNOWN_USED})"
)
_STALE_SQL = (
    "SELECT s.id, s.update_time FROM sessions AS s WHERE +s.app_name = ? AND +s.user_id = ?"
    " AND julianday(s.update_time) < ?"
)
_STALE_ONE_SQL = (
    "SELECT 1 FROM sessions AS s WHERE s.app_name = ? AND s.user_id = ? AND s.id = ?"
    " AND julianday(s.update_time) < ?"
)
_COUNT_SQL = "SELECT count(*) FROM sessions WHERE app_name = ? AND user_id = ?"
_OLDEST_SQL = (
    "SELECT id, update_time FROM sessions WHERE +app_name = ? AND +user_id = ?"
    " ORDER BY julianday(update_time) ASC, id ASC"
)
_UNCHANGED_SQL = "SELECT 1 FROM sessions AS s WHERE s.app_name = ? AND s.user_id = ? AND s.id = ? AND s.update_time = ?"

Kind = Literal["empty", "stale", "oldest"]


def julian_day(epoch: float) -> float:
    return epoch / 86400.0 + _UNIX_EPOCH_JULIAN_DAY


class Candidate(msgspec.Struct, frozen=True):
    """A session a pass would delete, with what made it one (re-checked under its lock)."""

    id: str
    update_time: str
    kind: Kind
    cutoff_jd: float | None  # the julian-day cutoff it was selected with (empty, stale)


class Pages(msgspec.Struct, frozen=True):
    page_size: int
    page_count: int
    freelist_count: int

    @property
    def freelist_ratio(self) -> float:
        return self.freelist_count / self.page_count if self.page_count else 0.0


class Survey(msgspec.Struct, frozen=True):
    empty: list[Candidate]
    stale: list[Candidate]
    total: int
    pages: Pages


def pages(c: sqlite3.Connection) -> Pages:
    return Pages(
        page_size=c.execute("PRAGMA page_size").fetchone()[0],
        page_count=c.execute("PRAGMA page_count").fetchone()[0],
        freelist_count=c.execute("PRAGMA freelist_count").fetchone()[0],
    )


def empty_candidates(c: sqlite3.Connection, cutoff_jd: float) -> list[Candidate]:
    """Sessions created before the cutoff with no message.

    Ids seen with a message go into a temp table of the probe's connection and are not looked
    at again. Having a message is forever (ADK never deletes or edits an event short of deleting
    its session; rewinds and compaction append), so that cache is never stale, and it makes an
    idle pass one scan of `sessions` in C instead of a look into every session's events. It
    lives as long as the connection (a swap closes it: the next pass rebuilds it).
    """
    old = [sid for (sid,) in c.execute(_OLD_UNKNOWN_SQL, (APP_NAME, USER_ID, cutoff_jd))]
    out: list[Candidate] = []
    for sid in old:
        row = c.execute(_EMPTY_ONE_SQL, (APP_NAME, USER_ID, sid, cutoff_jd)).fetchone()
        if row is None:  # old (same transaction as above), so it has a message
            c.execute(f"INSERT OR IGNORE INTO {_KNOWN_USED} (id) VALUES (?)", (sid,))
        else:
            out.append(Candidate(sid, str(row[1]), "empty", cutoff_jd))
    return out


def stale_candidates(c: sqlite3.Connection, cutoff_jd: float | None) -> list[Candidate]:
    if cutoff_jd is None:
        return []
    rows = c.execute(_STALE_SQL, (APP_NAME, USER_ID, cutoff_jd)).fetchall()
    return [Candidate(sid, str(ut), "stale", cutoff_jd) for sid, ut in rows]


def session_total(c: sqlite3.Connection) -> int:
    return int(c.execute(_COUNT_SQL, (APP_NAME, USER_ID)).fetchone()[0])


def survey(c: sqlite3.Connection, empty_cutoff_jd: float | None, stale_cutoff_jd: float | None) -> Survey:
    """Everything a pass needs to know, in one transaction (one thread hop when idle); it reads
    the database and writes only the connection's temp table."""
    c.execute("BEGIN")
    try:
        return Survey(
            empty=empty_candidates(c, empty_cutoff_jd) if empty_cutoff_jd is not None else [],
            stale=stale_candidates(c, stale_cutoff_jd),
            total=session_total(c),
            pages=pages(c),
        )
    finally:
        c.execute("COMMIT")


def oldest_candidates(c: sqlite3.Connection, excess: int, skip: frozenset[str]) -> list[Candidate]:
    """The `excess` least recently updated sessions, not counting those in `skip` (busy ones: they
    are about to become the most recent)."""
    out: list[Candidate] = []
    for sid, ut in c.execute(_OLDEST_SQL, (APP_NAME, USER_ID)):
        if len(out) >= excess:
            break
        if sid not in skip:
            out.append(Candidate(sid, str(ut), "oldest", None))
    return out


def still_qualifies(c: sqlite3.Connection, cand: Candidate) -> bool:
    """Re-check, under the session's lock, that nothing made the session worth keeping since it
    was selected (a turn that ended in between, a rename)."""
    params: tuple[object, ...]
    if cand.kind == "empty":
        sql, params = _EMPTY_ONE_SQL, (APP_NAME, USER_ID, cand.id, cand.cutoff_jd)
    elif cand.kind == "stale":
        sql, params = _STALE_ONE_SQL, (APP_NAME, USER_ID, cand.id, cand.cutoff_jd)
    else:
        sql, params = _UNCHANGED_SQL, (APP_NAME, USER_ID, cand.id, cand.update_time)
    return c.execute(sql, params).fetchone() is not None


def storage_counts(c: sqlite3.Connection) -> tuple[Pages, int, int]:
    c.execute("BEGIN")
    try:
        sessions = int(c.execute("SELECT count(*) FROM sessions").fetchone()[0])
        events = int(c.execute("SELECT count(*) FROM events").fetchone()[0])
        return pages(c), sessions, events
    finally:
        c.execute("COMMIT")


class Probe:
    """Maintenance's own read connection (plain sqlite3, one worker thread), cached between passes
    so an idle pass opens nothing. It never writes the database; it has a temp table (see
    `empty_candidates`), which is why it is not `query_only`. Its reads pass the store's gate like
    every other request; `aclose()` (also called by `SessionsDb.paused`) closes it, the next read
    reopens it."""

    def __init__(self, db: SessionsDb):
        self._db = db
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = self._db.connect()
            try:
                conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_KNOWN_USED.split('.')[1]} (id TEXT PRIMARY KEY) WITHOUT ROWID")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._db.gate.request():
            return await anyio.to_thread.run_sync(lambda: fn(self._connection()), limiter=self._limiter)

    async def aclose(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await anyio.to_thread.run_sync(close, limiter=self._limiter)
