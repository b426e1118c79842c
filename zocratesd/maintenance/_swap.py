"""The VACUUM swap: a compacted copy of sessions.db put in place of the original, atomically.

`vacuum_swap()` is synchronous; it runs in a worker thread while the store is paused, so no
connection of this process is open on the file (research/zotero_ops.md section 5: a connection
left open across the swap, or another file's -wal, corrupts the new database). Steps:

1. `wal_checkpoint(TRUNCATE)` then `journal_mode=DELETE`: everything in the -wal is folded into the
   file and SQLite deletes -wal and -shm. SQLite refuses to leave WAL while any other connection
   is open, in this process or another, so this step is also the proof that we are alone ("busy"
   otherwise).
2. `locking_mode=EXCLUSIVE` and an empty write transaction: an exclusive lock on the file, kept
   until we close. Nobody can read, write or switch it back to WAL until the rename.
3. `VACUUM INTO '<db>.vacuum-tmp'` (same directory, so the rename is atomic); fsync it;
   `integrity_check` it and compare its session and event counts with the original's.
4. `rename(tmp, db)`, fsync the directory. Our lock connection (rollback mode, no journal file, no
   transaction) is closed after the rename: no file on disk is keyed to it.
5. `journal_mode=WAL` on the new file (`VACUUM INTO` writes rollback mode).

A crash (SIGKILL, power loss) at any point leaves at the path either the original, complete, or
the copy, complete (fsynced before the rename). The original may be left in rollback mode (the
store's connect hook sets WAL again) and a partial temp file may be left: `remove_temp()`, run at
the next start and before every swap, deletes it.

Test seam: the environment variable `ZOCRATES_FAULT_AT=<step>` (one of `FAULT_STEPS`) makes the
process SIGKILL itself at that step, so a test can prove the claim above on a real process. It is
read only by this package, costs one dict lookup per step, and is never set in production.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".vacuum-tmp"
# SQLite's companions of a database file; any of them may exist for a temp copy killed mid-write.
_COMPANIONS = ("", "-journal", "-wal", "-shm")

# How long the swap waits for another process's transaction before reporting "busy". Our own
# process has no connection open by then; anything left is a foreign reader (a user's sqlite3
# shell), and the pass can simply run again later instead of stalling the paused store.
ALONE_TIMEOUT_S = 2.0
# Busy timeout of the short connection that re-enables WAL on the new file.
REOPEN_TIMEOUT_S = 30.0

FAULT_ENV = "ZOCRATES_FAULT_AT"
FAULT_STEPS = (
    "paused",  # store paused, engine disposed, nothing done to the file yet
    "checkpointed",  # WAL checkpointed (TRUNCATE), still in WAL mode
    "locked",  # original switched to rollback mode and locked exclusively
    "vacuum_partial",  # in the middle of VACUUM INTO: a partial temp file
    "temp_written",  # VACUUM INTO done, not fsynced
    "temp_fsynced",
    "temp_checked",  # integrity_check and counts passed
    "renamed",  # the copy is at the path, directory not yet fsynced
    "dir_fsynced",
    "wal_reenabled",
    "reopened",  # store reopened, pass about to report
)

# SQLite's progress handler fires every N virtual-machine instructions; the vacuum_partial fault
# kills at the third call: the temp file exists and holds part of the copy (even for a tiny test
# database).
_PARTIAL_AFTER_CALLBACKS = 3
_PROGRESS_INSTRUCTIONS = 100


class SwapBusy(Exception):
    """Another connection holds the database: the swap was not attempted (original untouched)."""


class SwapCheckFailed(Exception):
    """The vacuumed copy failed its integrity check or lost rows; it was discarded."""


def fault_point(step: str) -> None:
    """Test seam: SIGKILL this process if ZOCRATES_FAULT_AT names `step` (see the module doc)."""
    if os.environ.get(FAULT_ENV) == step:
        log.critical("fault injection: SIGKILL at %s", step)
        os.kill(os.getpid(), signal.SIGKILL)


def temp_path(db: Path) -> Path:
    return db.with_name(db.name + TEMP_SUFFIX)


def remove_temp(db: Path) -> bool:
    """Delete a temp copy (and its companions) left by an interrupted swap; True if any existed."""
    tmp = temp_path(db)
    removed = False
    for suffix in _COMPANIONS:
        try:
            os.unlink(f"{tmp}{suffix}")
            removed = True
        except FileNotFoundError:
            pass
    return removed


def file_bytes(db: Path) -> tuple[int, int]:
    """(size of the database file, size of its -wal); 0 for a missing file."""
    sizes = []
    for p in (str(db), f"{db}-wal"):
        try:
            sizes.append(os.stat(p).st_size)
        except FileNotFoundError:
            sizes.append(0)
    return sizes[0], sizes[1]


def is_disk_full(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF == sqlite3.SQLITE_FULL:
        return True
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _is_locked(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)  # pragma: no cover - Python < 3.11


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _counts(conn: sqlite3.Connection) -> tuple[int, int]:
    sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    return int(sessions), int(events)


def _take_alone(conn: sqlite3.Connection, db: Path) -> None:
    """Steps 1-2: WAL folded in and gone, and an exclusive lock held; SwapBusy if not alone."""
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise SwapBusy("the WAL checkpoint was blocked by another connection")
        fault_point("checkpointed")
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        if mode != "delete":
            raise SwapBusy(f"cannot leave journal mode {mode!r}: another connection has the file open")
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("COMMIT")
        # Re-read under the lock: a foreign connection may have switched it back in between.
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if _is_locked(exc):
            raise SwapBusy(f"another connection holds the database ({exc})") from exc
        raise
    if mode != "delete":
        raise SwapBusy(f"the database went back to journal mode {mode!r} under us")
    # With the header in rollback mode and our exclusive lock held, no connection can be using a
    # -wal or -shm of this file. A non-empty -wal here is not ours to judge: refuse, keep it.
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    if wal.exists() and wal.stat().st_size > 0:
        raise SwapBusy(f"{wal} is not empty after a full checkpoint; leaving everything as it is")
    for stale in (wal, shm):
        try:
            stale.unlink()
        except FileNotFoundError:
            pass


def _check_copy(tmp: Path, expected: tuple[int, int]) -> None:
    conn = sqlite3.connect(f"{tmp.resolve().as_uri()}?mode=ro", uri=True, timeout=REOPEN_TIMEOUT_S)
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            raise SwapCheckFailed(f"integrity_check of the vacuumed copy: {'; '.join(map(str, result[:5]))}")
        got = _counts(conn)
    finally:
        conn.close()
    if got != expected:
        raise SwapCheckFailed(f"the vacuumed copy has {got} (sessions, events), the original {expected}")


def _arm_partial_fault(conn: sqlite3.Connection) -> None:
    if os.environ.get(FAULT_ENV) != "vacuum_partial":
        return
    calls = 0

    def progress() -> int:
        nonlocal calls
        calls += 1
        if calls >= _PARTIAL_AFTER_CALLBACKS:
            fault_point("vacuum_partial")
        return 0

    conn.set_progress_handler(progress, _PROGRESS_INSTRUCTIONS)


def enable_wal(db: Path) -> str:
    """Put the file at `db` in WAL mode; returns the resulting journal mode."""
    conn = sqlite3.connect(db, timeout=REOPEN_TIMEOUT_S)
    try:
        return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
    finally:
        conn.close()


def vacuum_swap(db: Path) -> None:
    """Replace `db` by a vacuumed copy (module doc). The caller guarantees that no connection of
    this process is open on `db`.

    Raises SwapBusy (another connection has the file; nothing changed), SwapCheckFailed (the copy
    was bad and is gone), or sqlite3.Error / OSError (disk full among them: `is_disk_full`). On any
    error before the rename the temp file is removed and the original is complete at its path;
    after the rename the copy is.
    """
    tmp = temp_path(db)
    if remove_temp(db):
        log.info("removed a temp copy left by an interrupted VACUUM: %s", tmp)
    conn = sqlite3.connect(db, isolation_level=None, timeout=ALONE_TIMEOUT_S, check_same_thread=False)
    renamed = False
    try:
        _take_alone(conn, db)
        fault_point("locked")
        counts = _counts(conn)
        _arm_partial_fault(conn)
        conn.execute("VACUUM INTO ?", (str(tmp),))
        conn.set_progress_handler(None, 0)
        fault_point("temp_written")
        _fsync(tmp)
        fault_point("temp_fsynced")
        _check_copy(tmp, counts)
        fault_point("temp_checked")
        os.replace(tmp, db)
        renamed = True
        fault_point("renamed")
        _fsync(db.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        fault_point("dir_fsynced")
    except BaseException:
        if not renamed:
            try:
                remove_temp(db)
            except OSError:  # pragma: no cover - the next start removes it
                log.warning("could not remove %s; the next start will", tmp, exc_info=True)
        raise
    finally:
        conn.close()
    mode = enable_wal(db)
    if mode != "wal":  # pragma: no cover - the store's connect hook tries again
        log.warning("%s is in journal mode %r after VACUUM, not WAL", db, mode)
    fault_point("wal_reenabled")
