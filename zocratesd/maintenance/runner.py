"""The maintenance pass (spec section 8): retention, then VACUUM when it pays.

Order of a pass, as the spec draws it:

1. delete empty sessions created more than 24 h ago;
2. delete sessions not updated for `session_retention_days`, then the least recently updated
   beyond `max_saved_sessions` (0 or None disables either);
3. with any session busy (turn, rewind, compaction or delete in flight), defer VACUUM;
4. VACUUM when the freelist is >= 25% of the pages and something was deleted or the file is
   >= 30 MB, and the disk has 1.5x the file free: an atomic swap of a vacuumed copy (`_swap.py`)
   with the store paused.

Busy sessions are never deleted. Every deletion goes through ADK's `delete_session` (events go
with the session) holding the session's lock, after re-checking under that lock that the session
still qualifies, so a turn can neither start on a session being deleted nor lose one it just
finished. A pass never raises for a storage problem: a failed step is logged and the pass goes on;
a failed VACUUM leaves the original file in place and the store serving.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

import anyio
import anyio.to_thread

from zocratesd.errors import SessionBusy
from zocratesd.maintenance import _select, _swap
from zocratesd.maintenance.reports import MaintenanceReport, SkipReason, StorageStats, VacuumReport
from zocratesd.store.database import SessionsDb
from zocratesd.store.locks import SessionLocks
from zocratesd.store.sqlite import APP_NAME, USER_ID, StoreBusy

log = logging.getLogger(__name__)

# Spec 8.1 (2): a chat opened and not yet used survives a restart and a night; only after a full
# day without a single message is it considered abandoned.
EMPTY_SESSION_MIN_AGE_S = 24 * 3600.0
# Spec section 8, step 4. Below a quarter of free pages a VACUUM wins little for a full rewrite of
# the file (Zotero 10 uses 10%, but runs only every 14 days; we may run at every start).
VACUUM_MIN_FREELIST_RATIO = 0.25
# ... and only when this pass deleted something, or the file is big enough that reclaiming a
# quarter of it is worth a few seconds.
VACUUM_MIN_FILE_BYTES = 30 * 1024 * 1024
# Spec 8.1 (8): the copy needs up to the file's size, plus headroom for the WAL and other writers.
VACUUM_DISK_FACTOR = 1.5
# How long a pause waits for store requests already in flight (each takes milliseconds; one
# still running after this is stuck, and we would rather skip the VACUUM than hold every new
# request behind it).
PAUSE_DRAIN_TIMEOUT_S = 5.0
# What `SessionLocks.activity()` shows while maintenance deletes a session.
LOCK_ACTIVITY = "maintenance"


class DiskUsage(Protocol):
    @property
    def free(self) -> int: ...


class RetentionConfig(Protocol):
    """What maintenance reads from the config (`ZocratesConfig` has both)."""

    @property
    def session_retention_days(self) -> int | None: ...

    @property
    def max_saved_sessions(self) -> int | None: ...


class _Policy(NamedTuple):
    retention_days: int | None
    max_sessions: int | None

    @classmethod
    def of(cls, config: RetentionConfig) -> _Policy:
        days, cap = config.session_retention_days, config.max_saved_sessions
        return cls(days or None, cap or None)  # 0 and None both disable the pass


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class Maintenance:
    """Retention and space reclamation for one sessions.db.

    - `db`: the daemon's `SessionsDb` (sessions are deleted through its ADK service; a swap pauses
      it, closing every connection it holds);
    - `locks`: the daemon's `SessionLocks`;
    - `config`: the daemon's `ZocratesConfig` (`session_retention_days`, `max_saved_sessions`,
      read at every pass; 0 or None disables that pass);
    - `disk_usage`, `clock`: seams for tests (`shutil.disk_usage`, `time.time`).

    Passes are serialised: a second `run()` waits for the first. Call `aclose()` at shutdown.
    """

    def __init__(
        self,
        db: SessionsDb,
        locks: SessionLocks,
        config: RetentionConfig,
        *,
        disk_usage: Callable[[Path], DiskUsage] = shutil.disk_usage,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.db_path = db.path
        self._locks = locks
        self._config = config
        self._disk_usage = disk_usage
        self._clock = clock
        self._probe = _select.Probe(db)
        self._pass_lock: anyio.Lock | None = None

    async def aclose(self) -> None:
        """Close maintenance's own read connection (reopened if used again)."""
        await self._probe.aclose()

    # --- the pass ---------------------------------------------------------------------------------

    async def run(self, *, startup: bool) -> MaintenanceReport:
        """One maintenance pass (module doc). `startup=True` at daemon start, before any turn is
        accepted: it also removes a temp file left by a VACUUM that was killed. Never raises for a
        storage problem (logged instead); cancellation propagates, but never in the middle of a
        swap (the worker thread finishes or fails cleanly first)."""
        if self._pass_lock is None:
            self._pass_lock = anyio.Lock()
        async with self._pass_lock:
            return await self._run(startup)

    async def _run(self, startup: bool) -> MaintenanceReport:
        t0 = time.perf_counter()
        if startup:
            try:
                if await anyio.to_thread.run_sync(_swap.remove_temp, self.db_path):
                    log.warning("removed %s left by an interrupted VACUUM", _swap.temp_path(self.db_path))
            except OSError:
                log.exception("could not remove the temp file of an interrupted VACUUM")
        await self._db.prepare_tables()
        policy = _Policy.of(self._config)
        now = self._clock()
        empty_cut = _select.julian_day(now - EMPTY_SESSION_MIN_AGE_S)
        stale_cut = _select.julian_day(now - policy.retention_days * 86400.0) if policy.retention_days else None

        empty_deleted = retention_deleted = 0
        pages: _select.Pages | None = None
        try:
            found = await self._probe.run(lambda c: _select.survey(c, empty_cut, stale_cut))
            pages = found.pages
            empty_deleted = await self._delete(found.empty)
            stale, total = found.stale, found.total
            if empty_deleted:
                stale = await self._probe.run(lambda c: _select.stale_candidates(c, stale_cut))
                total = await self._probe.run(_select.session_total)
            retention_deleted = await self._delete(stale)
            total -= retention_deleted
            if policy.max_sessions is not None and total > policy.max_sessions:
                excess, busy = total - policy.max_sessions, self._locks.busy_sessions()
                oldest = await self._probe.run(lambda c: _select.oldest_candidates(c, excess, busy))
                retention_deleted += await self._delete(oldest)
        except Exception:
            log.exception("maintenance: selecting sessions to delete failed; VACUUM is still considered")
        deleted = empty_deleted + retention_deleted
        if deleted:
            pages = None  # the freelist moved

        vacuum = await self._vacuum_step(deleted, pages)
        report: MaintenanceReport = {
            "empty_deleted": empty_deleted,
            "retention_deleted": retention_deleted,
            "vacuum": vacuum,
            "duration_ms": _ms(time.perf_counter() - t0),
        }
        if deleted or vacuum["ran"] or vacuum["skipped_reason"] not in ("not_needed", "chat_in_progress"):
            log.info("maintenance%s: %s", " at startup" if startup else "", report)
        return report

    async def _delete(self, candidates: list[_select.Candidate]) -> int:
        """Delete each candidate that is not busy and still qualifies under its lock; the count."""
        n = 0
        for cand in candidates:
            try:
                with self._locks.hold(cand.id, LOCK_ACTIVITY):
                    if not await self._probe.run(functools.partial(_select.still_qualifies, cand=cand)):
                        continue
                    await self._db.service.delete_session(app_name=APP_NAME, user_id=USER_ID, session_id=cand.id)
            except SessionBusy:
                continue
            n += 1
            log.info("maintenance deleted session %s (%s)", cand.id, cand.kind)
        return n

    # --- VACUUM -------------------------------------------------------------------------------------

    async def _vacuum_step(self, deleted: int, pages: _select.Pages | None) -> VacuumReport:
        db_bytes, wal_bytes = _swap.file_bytes(self.db_path)
        before = db_bytes + wal_bytes

        def skipped(reason: SkipReason) -> VacuumReport:
            return {"ran": False, "skipped_reason": reason, "bytes_before": before, "bytes_after": before, "duration_ms": 0.0}

        if self._locks.busy_sessions():
            return skipped("chat_in_progress")
        try:
            if pages is None:
                pages = await self._probe.run(_select.pages)
        except Exception:
            log.exception("maintenance: reading the page counts failed")
            return skipped("error")
        # The database's own size (page_count x page_size): right after a write the main file may
        # still be small while the pages sit in the -wal.
        db_size = pages.page_count * pages.page_size
        if pages.freelist_ratio < VACUUM_MIN_FREELIST_RATIO or not (deleted or db_size >= VACUUM_MIN_FILE_BYTES):
            return skipped("not_needed")
        try:
            free = self._disk_usage(self.db_path.parent).free
        except OSError:
            log.exception("maintenance: cannot read the free disk space; VACUUM skipped")
            return skipped("error")
        need = int(before * VACUUM_DISK_FACTOR)
        if free < need:
            log.warning("VACUUM skipped: %d bytes free next to %s, it needs %d", free, self.db_path, need)
            return skipped("insufficient_disk")

        t0 = time.perf_counter()
        reason = await self._swap()
        if reason is not None:
            return skipped(reason)
        db_bytes, wal_bytes = _swap.file_bytes(self.db_path)
        after = db_bytes + wal_bytes
        took = time.perf_counter() - t0
        log.info("VACUUM of %s: %d -> %d bytes in %.0f ms", self.db_path, before, after, took * 1000)
        return {"ran": True, "skipped_reason": None, "bytes_before": before, "bytes_after": after, "duration_ms": _ms(took)}

    async def _swap(self) -> SkipReason | None:
        """Pause the store and swap in a vacuumed copy; None when done, else why not."""
        try:
            async with self._db.paused(self._probe, drain_timeout_s=PAUSE_DRAIN_TIMEOUT_S):
                _swap.fault_point("paused")
                if self._locks.busy_sessions():  # a turn started while we waited for the store
                    return "chat_in_progress"
                await anyio.to_thread.run_sync(_swap.vacuum_swap, self.db_path)
            _swap.fault_point("reopened")
            return None
        except (StoreBusy, _swap.SwapBusy) as exc:
            log.warning("VACUUM skipped, the database is busy: %s", exc)
            return "busy"
        except Exception as exc:
            if _swap.is_disk_full(exc):
                log.warning("VACUUM abandoned, the disk is full: %s; the original database is intact", exc)
                return "insufficient_disk"
            log.exception("VACUUM failed; the original database is intact")
            return "error"

    # --- stats --------------------------------------------------------------------------------------

    async def stats(self) -> StorageStats:
        """Live size and counts of the database (waits while a swap has the store paused).
        Raises the underlying sqlite3.Error if the file cannot be read."""
        await self._db.prepare_tables()
        pages, sessions, events = await self._probe.run(_select.storage_counts)
        db_bytes, wal_bytes = _swap.file_bytes(self.db_path)
        return {
            "db_path": str(self.db_path),
            "db_size_bytes": db_bytes,
            "wal_size_bytes": wal_bytes,
            "page_size": pages.page_size,
            "page_count": pages.page_count,
            "freelist_count": pages.freelist_count,
            "freelist_ratio": round(pages.freelist_ratio, 6),
            "session_count": sessions,
            "event_count": events,
        }
