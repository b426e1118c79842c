"""`Library`, the retriever `search_library` uses over the user's Zotero library (package
docstring: zocratesd/library/__init__.py).

`Library` is the one public surface: `start()` starts the background indexer (never delaying the
daemon's readiness), `search()` is the engine's `Retriever`, `status()` answers
`_zocrates/library/status`, `suggestions()` questions drawn from the library (suggestions.py),
`aclose()` stops the indexer. Until the first build finishes, search
answers from what is already indexed (batches commit as they go), so early questions find less,
never fail.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from zocratesd.library.index import INDEX_NAME, IndexReader, is_corruption, search
from zocratesd.library.indexer import Indexer, IndexerOptions
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, Scope
from zocratesd.library.suggestions import DEFAULT_SUGGESTIONS, Suggestion, suggest
from zocratesd.limits import DEFAULT_POLL_INTERVAL_S

log = logging.getLogger(__name__)

T = TypeVar("T")
D = TypeVar("D")


class Library:
    def __init__(self, data_dir: Path, work_dir: Path, *, local_api_url: str | None, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
                 include_groups: bool = True):
        self.reader = IndexReader(work_dir / INDEX_NAME)
        self.indexer = Indexer(
            IndexerOptions(data_dir=data_dir, work_dir=work_dir, local_api_url=local_api_url, poll_interval_s=poll_interval_s,
                           include_groups=include_groups),
            self.reader,
        )

    def start(self) -> None:
        self.indexer.start()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.indexer.stop)
        self.reader.close()

    def status(self, refresh: bool = False) -> dict[str, Any]:
        if refresh:
            self.indexer.request_refresh()
        return self.indexer.status().as_dict()

    async def collections(self) -> list[tuple[str, str, str | None]]:
        """The library's collections as indexed, `(key, name, parent_key)`; [] before the first
        build (or when the index cannot be read: see `_on_index`)."""
        return await asyncio.to_thread(self._on_index, _collections, [], "reading collections")

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        """`fn(connection)` on the index in one snapshot, in a thread (library/catalog.py's reads);
        None before the first build, or when the index cannot be read."""
        return await asyncio.to_thread(self._on_index, lambda conn: _in_snapshot(conn, fn), None, "reading the index")

    async def suggestions(self, limit: int = DEFAULT_SUGGESTIONS) -> list[Suggestion]:
        """Questions drawn from what is indexed so far (suggestions.py); [] before the first batch."""
        return await asyncio.to_thread(self._on_index, lambda conn: suggest(conn, limit), [], "reading suggestions")

    async def search(self, query: str, scope: Scope, top_k: int = DEFAULT_TOP_K) -> list[Hit]:
        """The Retriever interface: best chunks within `scope`; [] while nothing is indexed."""
        return await asyncio.to_thread(self._search, query, scope, top_k)

    def _search(self, query: str, scope: Scope, top_k: int) -> list[Hit]:
        return self._on_index(lambda conn: search(conn, query, scope, top_k), [], "searching")

    def _on_index(self, fn: Callable[[sqlite3.Connection], T], default: D, what: str) -> T | D:
        """`fn` on the reader's connection; `default` before the first build, or when the index
        cannot be read. A damaged index must not fail a turn either: it is rebuilt. Any other
        failure (busy on a loaded machine, a connection closed under us at shutdown) is tried once
        more on a fresh connection, then answers `default` and leaves the index as it is:
        rebuilding a large library for it would cost minutes, and a transient miss answered as
        "no such collection" would be a wrong answer."""
        for attempt in (1, 2):
            try:
                conn = self.reader.connection()
                return default if conn is None else fn(conn)
            except sqlite3.DatabaseError as exc:
                if is_corruption(exc):
                    log.warning("library: %s failed (%s); rebuilding the index", what, exc)
                    self.reader.invalidate()
                    self.indexer.request_refresh(rebuild=True)
                    return default
                failure: sqlite3.Error = exc
            except sqlite3.Error as exc:
                failure = exc
            log.warning("library: %s failed (%s)%s", what, failure, "; trying again" if attempt == 1 else "")
            self.reader.drop_thread_connection()
        return default


def _collections(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    return [(str(k), str(n), p) for k, n, p in conn.execute("SELECT key, name, parent_key FROM collections")]


def _in_snapshot(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN")  # one snapshot: the indexer commits between statements otherwise
    try:
        return fn(conn)
    finally:
        conn.execute("ROLLBACK")
