"""The library index's status as `_zocrates/library/status` reports it (protocol/README.md): its
shape, and the statuses a daemon gives before its indexer has one of its own.

Standard library only: the daemon answers the status from the moment its socket listens, before
the index's modules (the indexer, the PDF reader, the embedding child's client) are loaded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zocratesd.library._records import library_counts


@dataclass
class IndexCounts:
    """What the index holds (IndexWriter.counts), as the status reports it."""

    items_indexed: int = 0
    chunks_indexed: int = 0
    attachments_with_text: int = 0
    collections: int = 0
    notes_indexed: int = 0
    annotations_indexed: int = 0
    libraries: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=lambda: {"items": 0, "notes": 0, "annotations": 0, "texts": 0})


@dataclass
class IndexStatus:
    """The indexer's progress: `state` is "starting", "indexing", "ready", "unavailable", "error",
    "stopped", or "disabled" (a daemon with no library index)."""

    data_dir: str | None  # None: a daemon with no library index (`disabled_status`)
    index_path: str | None
    summary: str
    state: str = "starting"
    source: str | None = None
    zotero_schema_version: int | None = None
    items_total: int = 0
    items_to_index: int = 0
    items_done: int = 0
    percent: float = 0.0
    counts: dict[str, int] = field(default_factory=library_counts)
    last_refresh: str | None = None
    last_refresh_ms: float | None = None
    # When the indexer last looked for changes (UTC), and, when a change it saw waits for the
    # duty limit (indexer.py, REFRESH_DUTY), when it is read.
    last_look: str | None = None
    change_read_at: str | None = None
    refreshes: int = 0
    message: str | None = None
    warnings: list[str] = field(default_factory=list)
    index: IndexCounts = field(default_factory=IndexCounts)

    def as_dict(self) -> dict[str, Any]:
        """The wire's flat shape: the index's counts beside the rest."""
        out = asdict(self)
        out.update(out.pop("index"))
        return out


def starting_status(data_dir: Path, index_path: Path) -> IndexStatus:
    """Before the library's first look: the indexer's until then, and the daemon's before its
    indexer exists."""
    return IndexStatus(data_dir=str(data_dir), index_path=str(index_path),
                       summary=f"starting: the library in {data_dir} is read shortly")


def disabled_status(message: str) -> dict[str, Any]:
    """The status of a daemon that has no library index (library.enabled false, or the interim
    passages file)."""
    return IndexStatus(data_dir=None, index_path=None, summary=message, state="disabled", message=message).as_dict()
