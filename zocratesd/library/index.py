"""`<zotero-data-dir>/zocrates-data/library.db`: our own index of the library (SQLite FTS5, BM25).

Tables:
- `items`: one row per item with the metadata a citation needs and the item's `signature` (see
  `ItemRecord.signature`); a refresh re-indexes exactly the items whose signature changed.
- `collections` (key, name, parent_key) and `item_collections`: scope filtering in SQL.
- `db_items`: the item keys of the last read of `zotero.sqlite`. A read through Zotero's local API
  never removes these (only a later database read can): the API is the weaker witness.
- `chunks` (id, item_key, attachment_key, page) and the FTS5 table `chunks_fts` (title, body) with
  the same rowid. Each item has one metadata chunk (title, creators, year, tags, abstract; no
  page) and one chunk per ~1,200 characters of each attachment's text, never across a page.
  Every chunk carries the item's title in its `title` column, weighted `TITLE_WEIGHT` times the
  body in BM25: a passage from a paper whose title matches ranks above an equal one that doesn't.
  Words are folded (case, diacritics) and Porter-stemmed, so "retrieved" finds "retrieval".

Scope (spec 2.3 `active_mode`) is a SQL condition on `chunks.item_key`: the selected keys, or the
members of a collection *and of all its subcollections* (a recursive CTE on `collections`), so
BM25 ranks within the scope and the LIMIT applies after filtering.

A file that is not a valid index (corrupt, another schema version, not SQLite) is deleted and
rebuilt; callers see `IndexCorrupt` and start over, never a crash.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zocratesd.engine.retrieval import Hit, Passage, Scope, tokens
from zocratesd.library._records import CollectionRecord, ItemRecord, LibrarySnapshot, valid_key
from zocratesd.library.fulltext import chunks as split_chunks
from zocratesd.library.zotero_db import db_uri

log = logging.getLogger(__name__)

INDEX_NAME = "library.db"
# Bumped whenever the tables change; an index of another version is rebuilt from scratch.
INDEX_SCHEMA_VERSION = 1
# BM25 column weights (title, body): a title term counts three times a body term, so a matching
# paper's passages come first without drowning a strong body match (FTS5's bm25() weights).
TITLE_WEIGHT = 3.0
BODY_WEIGHT = 1.0
# Items written per transaction while indexing: each commit makes progress durable and visible to
# searches; 100 items with ~40 chunks each keeps a commit under ~0.3 s on a 2-core machine.
BATCH_ITEMS = 100
# Query terms beyond this are dropped: a pasted paragraph as a question would otherwise make
# one MATCH with hundreds of ORs.
MAX_QUERY_TERMS = 24
# Rows fetched per wanted hit before the per-item cap, and that cap: six passages from six papers
# serve an answer better than six from one paper, unless the scope is one paper.
OVERFETCH = 5
MAX_HITS_PER_ITEM = 2
# A selection (papers mode) larger than this is still honoured; the number only bounds the JSON
# array bound into the query (limits.MAX_ACTIVE_ITEMS is 500).
MAX_SCOPE_KEYS = 1000

# Added after INDEX_SCHEMA_VERSION 1 shipped: created on open in an older index (no rebuild needed).
_DB_ITEMS = "CREATE TABLE IF NOT EXISTS db_items (item_key TEXT PRIMARY KEY) WITHOUT ROWID"

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (
    item_key TEXT PRIMARY KEY, item_type TEXT, title TEXT NOT NULL, creators TEXT NOT NULL, year INTEGER,
    abstract TEXT, doi TEXT, url TEXT, tags TEXT NOT NULL, collections TEXT NOT NULL,
    attachments INTEGER NOT NULL, text_attachments INTEGER NOT NULL, signature TEXT NOT NULL
);
CREATE TABLE collections (key TEXT PRIMARY KEY, name TEXT NOT NULL, parent_key TEXT);
CREATE INDEX collections_parent ON collections (parent_key);
CREATE TABLE item_collections (collection_key TEXT NOT NULL, item_key TEXT NOT NULL,
    PRIMARY KEY (collection_key, item_key)) WITHOUT ROWID;
CREATE INDEX item_collections_item ON item_collections (item_key);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, item_key TEXT NOT NULL, attachment_key TEXT, page INTEGER);
CREATE INDEX chunks_item ON chunks (item_key);
CREATE VIRTUAL TABLE chunks_fts USING fts5 (title, body, tokenize = 'porter unicode61 remove_diacritics 2');
{_DB_ITEMS};
INSERT INTO meta VALUES ('schema_version', '{INDEX_SCHEMA_VERSION}');
"""


class IndexCorrupt(Exception):
    """library.db is unusable; it has been removed and must be rebuilt."""


@dataclass
class IndexCounts:
    items: int
    chunks: int
    attachments_with_text: int
    collections: int


def remove_index(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL is durable enough for an index: a crash loses at most the last batch, which the next
    # refresh rewrites (its items' signatures were not committed either).
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def open_index(path: Path) -> sqlite3.Connection:
    """The writer's connection; creates the index, or raises IndexCorrupt after removing a bad one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = not path.exists()
    try:
        conn = _connect(path)
    except sqlite3.DatabaseError as exc:
        remove_index(path)
        raise IndexCorrupt(f"{path}: {exc}") from None
    try:
        if fresh:
            conn.executescript(_SCHEMA)
        else:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or row[0] != str(INDEX_SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"index schema {row[0] if row else None}, want {INDEX_SCHEMA_VERSION}")
            conn.execute("SELECT count(*) FROM items").fetchone()
            conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'zocrates' LIMIT 1").fetchall()
            conn.execute(_DB_ITEMS)
    except sqlite3.DatabaseError as exc:
        conn.close()
        remove_index(path)
        raise IndexCorrupt(f"{path}: {exc}") from None
    return conn


class IndexWriter:
    """Applies library snapshots to library.db (one thread: the indexer's)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, values: dict[str, Any]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, None if v is None else str(v)) for k, v in values.items()])

    def signatures(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT item_key, signature FROM items"))

    def db_item_keys(self) -> set[str]:
        """The keys the last database read had (see `db_items`)."""
        keys = {r[0] for r in self.conn.execute("SELECT item_key FROM db_items")}
        if not keys and self.meta("source") in ("sqlite", "snapshot"):
            return set(self.signatures())  # an index built before db_items existed: all from the database
        return keys

    def set_db_item_keys(self, keys: Iterable[str]) -> None:
        """Record a database read's keys (written only where they changed: this runs at every refresh)."""
        have = {r[0] for r in self.conn.execute("SELECT item_key FROM db_items")}
        new = set(keys)
        if new == have:
            return
        with self.transaction():
            self.conn.executemany("DELETE FROM db_items WHERE item_key = ?", [(k,) for k in have - new])
            self.conn.executemany("INSERT INTO db_items VALUES (?)", [(k,) for k in new - have])

    def counts(self) -> IndexCounts:
        c = self.conn
        return IndexCounts(
            items=c.execute("SELECT count(*) FROM items").fetchone()[0],
            chunks=c.execute("SELECT count(*) FROM chunks").fetchone()[0],
            attachments_with_text=c.execute("SELECT coalesce(sum(text_attachments), 0) FROM items").fetchone()[0],
            collections=c.execute("SELECT count(*) FROM collections").fetchone()[0],
        )

    def plan(self, snapshot: LibrarySnapshot, have: dict[str, str]) -> tuple[list[ItemRecord], list[str]]:
        """(items to (re)index, keys to remove), given the stamps the index had before the read."""
        changed = [it for it in snapshot.items if have.get(it.key) != it.stamp]
        return changed, sorted(set(have) - set(snapshot.stamps))

    def write_collections(self, collections: Sequence[CollectionRecord]) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM collections")
            self.conn.executemany(
                "INSERT INTO collections VALUES (?, ?, ?)", [(c.key, c.name, c.parent_key) for c in collections]
            )

    def remove(self, keys: Iterable[str]) -> None:
        with self.transaction():
            for key in keys:
                self._delete_item(key)

    def write_items(self, batch: Sequence[tuple[ItemRecord, dict[str, str]]]) -> None:
        """(item, {attachment key: text}) pairs, in one transaction."""
        with self.transaction():
            for item, texts in batch:
                self._delete_item(item.key)
                self._insert_item(item, texts)

    def _delete_item(self, key: str) -> None:
        c = self.conn
        c.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE item_key = ?)", (key,))
        c.execute("DELETE FROM chunks WHERE item_key = ?", (key,))
        c.execute("DELETE FROM item_collections WHERE item_key = ?", (key,))
        c.execute("DELETE FROM items WHERE item_key = ?", (key,))

    def _insert_item(self, item: ItemRecord, texts: dict[str, str]) -> None:
        c = self.conn
        c.execute(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.key, item.item_type, item.title, json.dumps(list(item.creators)), item.year, item.abstract,
                item.doi, item.url, json.dumps(list(item.tags)), json.dumps(list(item.collections)),
                len(item.attachments), sum(1 for a in item.attachments if texts.get(a.key)), item.stamp,
            ),
        )
        c.executemany("INSERT OR IGNORE INTO item_collections VALUES (?, ?)", [(k, item.key) for k in item.collections])
        meta_body = " ".join(
            p for p in ("; ".join(item.creators), str(item.year or ""), " ".join(item.tags), item.abstract) if p
        )
        rows: list[tuple[str | None, int | None, str]] = [(None, None, meta_body)]
        for att in item.attachments:
            text = texts.get(att.key)
            if text:
                rows += [(att.key, page, body) for page, body in split_chunks(text)]
        for att_key, page, body in rows:
            cur = c.execute("INSERT INTO chunks (item_key, attachment_key, page) VALUES (?, ?, ?)", (item.key, att_key, page))
            c.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (?, ?, ?)", (cur.lastrowid, item.title, body))

    def transaction(self) -> _Tx:
        return _Tx(self.conn)


class _Tx:
    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def match_expression(query: str) -> str | None:
    """An FTS5 query: the question's content words OR'ed, each quoted (so no word is FTS syntax)."""
    seen: list[str] = []
    for t in tokens(query):
        if t not in seen:
            seen.append(t)
        if len(seen) == MAX_QUERY_TERMS:
            break
    return " OR ".join(f'"{t}"' for t in seen) if seen else None


def scope_item_keys(conn: sqlite3.Connection, scope: Scope) -> list[str] | None:
    """The item keys a scoped search may return (None: the whole library). A collection includes
    its subcollections. Keys are resolved first, in their own query: as a correlated subquery
    inside the MATCH, the recursive CTE was re-run for every matching row (1.4 s per query)."""
    if scope.mode == "papers":
        return [k for k in scope.item_keys if valid_key(k)][:MAX_SCOPE_KEYS]
    if scope.mode == "collection":
        if not valid_key(scope.collection):
            return []
        rows = conn.execute(
            "WITH RECURSIVE sub(k) AS (SELECT key FROM collections WHERE key = ? "
            "UNION SELECT col.key FROM collections col JOIN sub ON col.parent_key = sub.k) "
            "SELECT DISTINCT item_key FROM item_collections WHERE collection_key IN (SELECT k FROM sub)",
            (scope.collection,),
        )
        return [r[0] for r in rows]
    return None


def search(conn: sqlite3.Connection, query: str, scope: Scope, top_k: int) -> list[Hit]:
    """Ranked chunks within `scope` (BM25; FTS5's bm25() is lower-is-better, Hit.score is its
    negation, higher-is-better). At most MAX_HITS_PER_ITEM per item unless fewer items match.

    Two steps: rank rowids alone (the scope as a rowid filter, applied before bm25() is computed,
    and no text read for rows that do not make the cut), then read the few winners' text."""
    expr = match_expression(query)
    if expr is None or top_k <= 0:
        return []
    # One read transaction: the indexer commits between our statements otherwise, and a chunk
    # ranked by the first could be gone by the second.
    conn.execute("BEGIN")
    try:
        return _search(conn, expr, scope, top_k)
    finally:
        conn.execute("ROLLBACK")


def _search(conn: sqlite3.Connection, expr: str, scope: Scope, top_k: int) -> list[Hit]:
    keys = scope_item_keys(conn, scope)
    if keys is not None and not keys:
        return []
    where, args = "", []
    if keys is not None:
        where = "AND +f.rowid IN (SELECT id FROM chunks WHERE item_key IN (SELECT value FROM json_each(?)))"
        args = [json.dumps(keys)]
    ranked = conn.execute(
        f"SELECT f.rowid, bm25(chunks_fts, {TITLE_WEIGHT}, {BODY_WEIGHT}) AS s FROM chunks_fts f "
        f"WHERE chunks_fts MATCH ? {where} ORDER BY s LIMIT ?",
        [expr, *args, top_k * OVERFETCH],
    ).fetchall()
    if not ranked:
        return []
    where_of = {rowid: (key, att, page) for rowid, key, att, page in conn.execute(
        "SELECT id, item_key, attachment_key, page FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([r[0] for r in ranked]),),
    )}
    chosen: list[tuple[int, float]] = []
    spill: list[tuple[int, float]] = []
    per_item: dict[str, int] = {}
    for rowid, score in ranked:
        if rowid not in where_of:  # an FTS row without its chunk row: skipped, never a crash
            continue
        key = where_of[rowid][0]
        n = per_item.get(key, 0)
        (chosen if n < MAX_HITS_PER_ITEM else spill).append((rowid, score))
        per_item[key] = n + 1
    chosen = sorted(chosen + spill[: max(0, top_k - len(chosen))], key=lambda r: r[1])[:top_k]
    bodies = dict(conn.execute(
        "SELECT rowid, body FROM chunks_fts WHERE rowid IN (SELECT value FROM json_each(?))",
        (json.dumps([r[0] for r in chosen]),),
    ))
    meta = _item_meta(conn, {where_of[r][0] for r, _ in chosen})
    hits = []
    for rowid, score in chosen:
        item_key, att_key, page = where_of[rowid]
        title, creators, year, collections = meta.get(item_key, ("(untitled)", (), None, ()))
        passage = Passage(
            item_key=item_key, title=title, text=bodies.get(rowid, ""), creators=creators, year=year,
            attachment_key=att_key, page=page, collections=collections,
        )
        hits.append(Hit(passage, -float(score)))
    return hits


def _item_meta(conn: sqlite3.Connection, keys: set[str]) -> dict[str, tuple[str, tuple[str, ...], int | None, tuple[str, ...]]]:
    if not keys:
        return {}
    out = {}
    for key, title, creators, year, colls in conn.execute(
        "SELECT item_key, title, creators, year, collections FROM items WHERE item_key IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(keys)),),
    ):
        out[key] = (title, tuple(json.loads(creators)), year, tuple(json.loads(colls)))
    return out


class IndexReader:
    """Read connections for searches, one per thread (sqlite3 connections are not shared across
    threads). `generation` changes when the index file is replaced; stale connections reopen."""

    def __init__(self, path: Path):
        self.path = path
        self.generation = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []

    def invalidate(self) -> None:
        with self._lock:
            self.generation += 1

    def connection(self) -> sqlite3.Connection | None:
        if not self.path.exists():
            return None
        held = getattr(self._local, "conn", None)
        if held is not None and held[0] == self.generation:
            current: sqlite3.Connection = held[1]
            return current
        if held is not None:
            held[1].close()
        conn = sqlite3.connect(db_uri(self.path, mode="ro"), uri=True, check_same_thread=False, timeout=5.0)
        self._local.conn = (self.generation, conn)
        with self._lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
            self.generation += 1
