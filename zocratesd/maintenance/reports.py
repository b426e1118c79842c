"""The JSON shapes maintenance answers with: plain dicts, ready to serialise.

These are the bodies the faces serve: `_zocrates/storage/maintenance` and the shim's
`MaintenanceResponse` (`MaintenanceReport`), `_zocrates/storage/stats` and `StorageStatsResponse`
(`StorageStats`). Field names are the protocol's (protocol/README.md); do not rename them.
"""

from __future__ import annotations

from typing import Literal, TypedDict

SkipReason = Literal["not_needed", "chat_in_progress", "insufficient_disk", "busy", "error"]
"""Why VACUUM did not run:

- `not_needed`: below the thresholds (freelist ratio, or nothing deleted and the file is small);
- `chat_in_progress`: a session had a turn, rewind, compaction or delete in flight (deferred);
- `insufficient_disk`: less free space than the swap needs, or the disk filled up during it;
- `busy`: the store could not be paused, or another connection (another process) holds the file;
- `error`: anything else went wrong (logged with its traceback); the original file is intact.
"""


class VacuumReport(TypedDict):
    ran: bool
    skipped_reason: SkipReason | None  # None exactly when `ran`
    bytes_before: int  # sessions.db plus its -wal, before
    bytes_after: int  # the same after (equal to bytes_before when VACUUM did not run)
    duration_ms: float  # of the VACUUM swap (pause included); 0.0 when it did not run


class MaintenanceReport(TypedDict):
    empty_deleted: int  # step 1: empty sessions older than 24 h
    retention_deleted: int  # step 2: older than session_retention_days, then beyond max_saved_sessions
    vacuum: VacuumReport
    duration_ms: float  # the whole pass


class StorageStats(TypedDict):
    db_path: str
    db_size_bytes: int
    wal_size_bytes: int
    page_size: int
    page_count: int
    freelist_count: int
    freelist_ratio: float  # freelist_count / page_count (0.0 for an empty file)
    session_count: int
    event_count: int
