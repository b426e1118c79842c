"""Session retention and space reclamation for sessions.db (spec section 8).

One public class, `Maintenance`: `run(startup=...)` is a pass (retention, then VACUUM when it
pays, as an atomic swap of a vacuumed copy that a crash cannot corrupt), `stats()` the live size
and counts. The answers are plain dicts of the shapes in `reports`.

Test seam: `ZOCRATES_FAULT_AT=<step>` (see `FAULT_STEPS`) makes the process SIGKILL itself at that
step of the swap; only fault-injection tests set it.
"""

from zocratesd.maintenance._swap import FAULT_ENV, FAULT_STEPS
from zocratesd.maintenance.reports import MaintenanceReport, SkipReason, StorageStats, VacuumReport
from zocratesd.maintenance.runner import (
    EMPTY_SESSION_MIN_AGE_S,
    VACUUM_DISK_FACTOR,
    VACUUM_MIN_FILE_BYTES,
    VACUUM_MIN_FREELIST_RATIO,
    Maintenance,
)

__all__ = [
    "EMPTY_SESSION_MIN_AGE_S",
    "FAULT_ENV",
    "FAULT_STEPS",
    "VACUUM_DISK_FACTOR",
    "VACUUM_MIN_FILE_BYTES",
    "VACUUM_MIN_FREELIST_RATIO",
    "Maintenance",
    "MaintenanceReport",
    "SkipReason",
    "StorageStats",
    "VacuumReport",
]
