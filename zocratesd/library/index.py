"""`<zotero-data-dir>/zocrates-data/library.db`: our own index of the library (SQLite FTS5, BM25).

Tables:
- `items`: one row per item record (regular items, standalone notes and attachments) of every
  library, keyed by `uid` (the key in the user library, `groups/<id>/KEY` in a group: keys are
  unique per library only), with the metadata a citation needs and the item's `signature`; a
  refresh re-indexes exactly the items whose signature changed. `date_added`, `date_modified` and
  `children` (its attachments, notes and annotations as JSON) are what library/catalog.py shows.
- `collections` (library, key, name, parent_key) and `item_collections`: scope filtering in SQL.
- `db_items`: the item uids of the last read of `zotero.sqlite`. A read through Zotero's local
  API never removes these (only a later database read can): the API is the weaker witness.
- `chunks` (id, uid, item_key, library, kind, source_key, attachment_key, page, page_label) and
  the FTS5 table `chunks_fts` (title, body) with the same rowid. Kinds: `metadata` chunks of an
  item (creators, with a German name's other spelling, "Ströhle" and "Stroehle", year and tags,
  then `METADATA_BREAK` and the abstract, which is cut into ~1,200 characters as any text is;
  later parts have no header), `fulltext` chunks of ~1,200 characters of each attachment's text
  (never across a page; a heading line kept apart; a PDF's page furniture, its running headers,
  footers and page numbers, left out and its line-break hyphens joined: library/furniture.py),
  `note` chunks (HTML as text), one `annotation` chunk per highlight or comment (its text, comment and tags). Every chunk carries the item's
  title in its `title` column, weighted `TITLE_WEIGHT` times the body in BM25 (except a metadata
  chunk with no abstract when the item has other chunks: it would win on its shortness; with no
  creators, year or tags either it has no words and is not written). Words are folded
  (case, diacritics: Lübeck finds Lubeck) and Porter-stemmed, so "retrieved" finds "retrieval".
- `chunk_vectors` (id, v): each chunk's vector for the dense stage (library/dense.py, in the
  default install; `library.dense = false` turns it off: wordllama's static embeddings, int8,
  256 bytes), written with the chunk
  (computed by the indexer's child process, library/embedproc.py; the zero vector for a chunk
  without words); `meta.dense_model` names the model ("" when the stage is off), and an index
  made with another (or none) is rebuilt, so all chunks have vectors of one kind or none do. A
  chunk whose vector could not be computed (the child failed) has no row until a later pass
  computes it (`meta.vectors_missing`); meanwhile a search scores it as the zero vector.
- `chunks_cjk` (title, body): the same chunks' Chinese, Japanese and Korean text as character
  bigrams (FTS5's word tokenizer sees a run of CJK characters as one word; Zotero 10 indexes CJK
  with bigrams too; zocratesd/textnorm.py makes them, for the answerer too). Only chunks that
  have such text get a row; a query with CJK characters is routed there (and to the word index
  for its other words, the two rankings fused by rank).
- `term_stats` (term, chunks): how many chunks each common word is in (stemmed as chunks_fts
  stores it; words in fewer than COMMON_SHARE_FLOOR of the chunks are left out), counted on large
  indexes only, for the ranking below; `meta.term_stats_chunks` is the chunk count it was made at.

Pages: a chunk of a PDF's text has its page number from the cache's form feeds, and the page
label a reader sees: the PDF's own (/PageLabels, library/pdflabels.py), else the one an annotation
on that page recorded; an annotation has its own label.
Each passage links to where it is (`zotero://open-pdf/.../items/<attachmentKey>?page=N`, or
`zotero://select/...` for notes and metadata).

Ranking: BM25 over the chunks (title weighted), then, with the dense stage on, the best
DENSE_POOL candidates re-scored as BM25 / the query's best BM25 + DENSE_WEIGHT x cosine(query,
chunk) (a query with CJK text keeps BM25 and the rank fusion). Only chunks the words found can
rank: one vector read per candidate, no scan of the library. BEIR SciFact test nDCG@10
(bench/bench_retrieval.py; weights tuned on train): 0.685 -> 0.716 in each layout (abstract field,
PDF full text, passages file; train 0.704 -> 0.724), Recall@100 0.924 -> 0.943, for a little more
CPU per search (bench/PROFILE.md). Pools of 100 or 50 rank the top 10 as well (train), if that
time is ever needed. On an index of MIN_CHUNKS_FOR_SHARES chunks or more, only the chunks that
hold one of a question's rarest words are scored (CANDIDATE_CHUNKS), and its most common words
leave the ranking (RANKING_SHARE): the cost of a search is FTS5 scoring every chunk a word of
its expression is in.

Scope (spec 2.3 `active_mode`, and optionally one library) is a set of chunk ids, from the
selected keys or the members of a collection *and of all its subcollections* (a recursive CTE
on `collections`): a temporary table each read connection keeps while the index is unchanged,
and a rowid filter on FTS5's rows, so BM25 ranks within the scope and the LIMIT applies after
filtering.

A file that is not a valid index (corrupt, another schema version, not SQLite) is deleted and
rebuilt; callers see `IndexCorrupt` and start over, never a crash.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from zocratesd.citations.keys import assign_in_index, explicit_key
from zocratesd.library import dense
from zocratesd.library._records import CollectionRecord, ItemRecord, LibrarySnapshot, library_path, valid_key
from zocratesd.library.catalog import children_json
from zocratesd.library.embedproc import EmbedFailed
from zocratesd.library.fulltext import PAGE_BREAK
from zocratesd.library.fulltext import chunks as split_chunks
from zocratesd.library.furniture import strip_furniture
from zocratesd.library.retrieval import METADATA_BREAK, Hit, Passage, Scope, tokens
from zocratesd.library.zotero_db import db_uri
from zocratesd.locations import INDEX_NAME as INDEX_NAME
from zocratesd.logtext import escape_for_log
from zocratesd.textnorm import cjk_bigrams, cjk_run_re, name_variants

log = logging.getLogger(__name__)

# Bumped whenever the tables change; an index of another version is rebuilt from scratch
# (2: libraries, notes, annotations, page labels, the CJK bigram index; 3: `chunk_vectors`, the
# dense stage's vectors, and the `dense_model` they were made with; 4: abstracts chunked, no
# chunk without words; 5: German names' other spellings in the metadata header, heading lines kept
# apart in text chunks, page labels from the PDFs themselves; 6: items' `date_added`,
# `date_modified` and `children`, for library/catalog.py; 7: an annotation's highlight and comment
# as paragraphs of its chunk; 8: a PDF's text without its running headers, footers and page
# numbers, words hyphenated at a line break joined, library/furniture.py; 9: every field of an
# item, its creators with their roles, and its citation key, for bibliographies: citations/).
INDEX_SCHEMA_VERSION = 9
# BM25 column weights (title, body): a title term counts twice a body term, so a matching paper's
# passages come first without drowning a strong body match (FTS5's bm25() weights). FTS5 fixes
# k1 = 1.2, but it applies the weights to the term counts before saturation, so their scale acts
# as 1/k1: 1.5 is BM25 with k1 = 0.8. Tuned on SciFact's train queries, best mean nDCG@10 over
# the abstract and full-text layouts (bench/bench_retrieval.py: 0.7026 against 0.7012 for 3, 1).
TITLE_WEIGHT = 3.0
BODY_WEIGHT = 1.5
# Items written per transaction while indexing: each commit makes progress durable and visible to
# searches; 100 items of a few dozen chunks each keep a commit short on a 2-core machine.
BATCH_ITEMS = 100
# Chunks whose missing vectors are computed per transaction by `IndexWriter.fill_vectors` (~a batch's worth).
FILL_CHUNKS = 2000
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

# A highlight or comment is the user's own pointer into a paper: its BM25 score is multiplied by
# this among the candidates, so it ranks above the same words elsewhere in the paper.
ANNOTATION_BOOST = 1.5
# Reciprocal-rank fusion constant (Cormack et al. 2009) for a query split between the word and
# the CJK index.
RRF_K = 60
# The dense stage (library/dense.py, on unless `library.dense = false`) re-ranks the word
# index's best DENSE_POOL chunks (more when the caller wants more): score = BM25 / the best BM25
# of the query + DENSE_WEIGHT x cosine(query, chunk). Only a chunk the words found can rank, so
# the stage costs one vector read per candidate, never a scan of the library. Tuned on SciFact's
# train queries (bench/bench_retrieval.py); see the module docstring for what it gains.
DENSE_POOL = 200
# A search costs FTS5 scoring every chunk a word of its expression is in, and counting the chunks
# each word is in (for its IDF): a question's common words ("cell", "patients", "study") are each
# in a fifth to a half of a large library's chunks. So, on a large index (bench/bench_heavy_library.py
# measures the time, bench/bench_retrieval.py the ranking, SciFact):
# - a word in more than RANKING_SHARE of the chunks is left out of the ranking (its IDF is small:
#   log(1/share) at most, BM25's own is ~0 past half the chunks), while MIN_RANKING_TERMS remain;
# - the candidates are the chunks holding one of the question's rarest words, taken rarest first
#   while together they are in at most CANDIDATE_CHUNKS chunks (the rarest that is in any chunk
#   always): a chunk with none of them is rarely among the best;
# - the candidates are scored by BM25 over those words and the MAX_COMMON_WORDS rarest of the
#   others: a long question's commonest words add little to the ranking and much to its cost;
# - when fewer candidates than the hits wanted are found (in a collection, or after one very rare
#   word), CANDIDATE_WIDENING times as many are taken, then every chunk a ranking word is in.
# Only on an index this large: below it, ranking every matching chunk takes a few milliseconds,
# and a small library's shares say little (a topic in 3 of 10 papers is not a common word).
RANKING_SHARE = 0.2
MIN_RANKING_TERMS = 2
CANDIDATE_CHUNKS = 1000
CANDIDATE_WIDENING = 10
MAX_COMMON_WORDS = 8
MIN_CHUNKS_FOR_SHARES = 50_000
# term_stats keeps words in at least this share of the chunks (the others are rare by any measure),
# and is recomputed when the number of chunks has moved by TERM_STATS_DRIFT since it was.
COMMON_SHARE_FLOOR = 0.005
TERM_STATS_DRIFT = 0.1
DENSE_WEIGHT = 1.0
_LIBRARY_RE = re.compile(r"(user|groups/\d{1,12})\Z")
_WORD_RE = re.compile(r"\w")
_NAME_RE = re.compile(r"[^\W\d_]+")

# Added after INDEX_SCHEMA_VERSION 1 shipped: created on open in an older index (no rebuild needed).
_DB_ITEMS = "CREATE TABLE IF NOT EXISTS db_items (item_key TEXT PRIMARY KEY) WITHOUT ROWID"
# The word index's tokenizer (porter stems, accents folded), and the query and scope tables' too.
_WORD_TOKENIZER = "porter unicode61 remove_diacritics 2"
# How many chunks each common word (stemmed, as chunks_fts stores it) is in: only words in at
# least COMMON_SHARE_FLOOR of the chunks are kept (a few thousand rows); an absent word is rare.
_TERM_STATS = "CREATE TABLE IF NOT EXISTS term_stats (term TEXT PRIMARY KEY, chunks INTEGER NOT NULL) WITHOUT ROWID"

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (
    uid TEXT PRIMARY KEY, item_key TEXT NOT NULL, library TEXT NOT NULL, item_type TEXT, title TEXT NOT NULL,
    creators TEXT NOT NULL, year INTEGER, abstract TEXT, doi TEXT, url TEXT, tags TEXT NOT NULL, collections TEXT NOT NULL,
    attachments INTEGER NOT NULL, text_attachments INTEGER NOT NULL, notes INTEGER NOT NULL, annotations INTEGER NOT NULL,
    signature TEXT NOT NULL, date_added TEXT, date_modified TEXT, children TEXT NOT NULL,
    fields TEXT NOT NULL, names TEXT NOT NULL, explicit_key TEXT, explicit_source TEXT, citation_key TEXT, key_source TEXT
);
CREATE INDEX items_citation_key ON items (citation_key);
CREATE TABLE bbt_keys (library TEXT NOT NULL, item_key TEXT NOT NULL, citation_key TEXT NOT NULL,
    PRIMARY KEY (library, item_key)) WITHOUT ROWID;
CREATE INDEX items_added ON items (date_added);
CREATE INDEX items_key ON items (item_key);
CREATE INDEX items_library ON items (library);
CREATE TABLE libraries (library TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE collections (library TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, parent_key TEXT,
    PRIMARY KEY (library, key));
CREATE INDEX collections_parent ON collections (parent_key);
CREATE TABLE item_collections (library TEXT NOT NULL, collection_key TEXT NOT NULL, uid TEXT NOT NULL,
    PRIMARY KEY (library, collection_key, uid)) WITHOUT ROWID;
CREATE INDEX item_collections_item ON item_collections (uid);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, uid TEXT NOT NULL, item_key TEXT NOT NULL, library TEXT NOT NULL,
    kind TEXT NOT NULL, source_key TEXT, attachment_key TEXT, page INTEGER, page_label TEXT);
CREATE INDEX chunks_uid ON chunks (uid);
CREATE INDEX chunks_library ON chunks (library);
CREATE VIRTUAL TABLE chunks_fts USING fts5 (title, body, tokenize = '{_WORD_TOKENIZER}');
CREATE VIRTUAL TABLE chunks_cjk USING fts5 (title, body, tokenize = 'unicode61 remove_diacritics 2');
CREATE TABLE chunk_vectors (id INTEGER PRIMARY KEY, v BLOB NOT NULL);
{_DB_ITEMS};
{_TERM_STATS};
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
    notes: int = 0
    annotations: int = 0
    # library -> {name, items, notes, annotations, texts}
    libraries: dict[str, dict[str, Any]] | None = None


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


def _create_index(path: Path) -> None:
    """A new, empty index at `path`, made beside it and moved into place whole: a reader that
    finds the file finds its tables too (a file without them reads as a damaged index)."""
    made = path.with_name(path.name + ".new")
    remove_index(made)
    conn = _connect(made)
    try:
        conn.executescript(_SCHEMA)
        conn.execute("INSERT INTO meta VALUES ('dense_model', ?)", (dense.model_name(),))
    finally:
        conn.close()  # its only connection: the -wal is folded into the file and removed
    os.replace(made, path)


def open_index(path: Path) -> sqlite3.Connection:
    """The writer's connection; creates the index, or raises IndexCorrupt after removing a bad one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create_index(path)
    try:
        conn = _connect(path)
    except sqlite3.DatabaseError as exc:
        remove_index(path)
        raise IndexCorrupt(f"{path}: {exc}") from None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or row[0] != str(INDEX_SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"index schema {row[0] if row else None}, want {INDEX_SCHEMA_VERSION}")
        # Every chunk has a vector of the model this process re-ranks with, or none has one:
        # an index built with another model, or with the stage off (or on, when it is off
        # now), is rebuilt.
        row = conn.execute("SELECT value FROM meta WHERE key = 'dense_model'").fetchone()
        if row is None or row[0] != dense.model_name():
            have, want = (row[0] if row else None) or "none", dense.model_name() or "none"
            raise sqlite3.DatabaseError(f"index vectors from {have}, want {want}")
        conn.execute("SELECT count(*) FROM items").fetchone()
        conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'zocrates' LIMIT 1").fetchall()
        conn.execute(_DB_ITEMS)
        conn.execute(_TERM_STATS)
    except sqlite3.DatabaseError as exc:
        conn.close()
        remove_index(path)
        raise IndexCorrupt(f"{path}: {exc}") from None
    return conn


class IndexWriter:
    """Applies library snapshots to library.db (one thread: the indexer's)."""

    def __init__(self, conn: sqlite3.Connection, vectorizer: Callable[[], dense.Vectorizer | None] = dense.embedder):
        self.conn = conn
        # Vectors are written when the index was made for them (open_index checked the model); the
        # vectorizer (the model in this process, or the indexer's child process: embedproc.py) is
        # asked for by the first chunk written, not before (a refresh with no change needs none).
        self._dense = bool(self.meta("dense_model"))
        self._vectorizer = vectorizer
        self._embedder: dense.Vectorizer | None = None
        self._pending: list[tuple[int, str]] = []  # (chunk id, text) to embed
        # A batch's vectors are computed (by the child process, on the other core) while the next
        # batch is read and written: its future and chunk ids, written with the next batch.
        self._inflight: tuple[Future[list[bytes | None]], list[int]] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._missing_before = self.meta("vectors_missing") == "1"
        self._flagged = False  # this writer set vectors_missing while vectors were on their way

    @property
    def embedder(self) -> dense.Vectorizer | None:
        if self._dense and self._embedder is None:
            self._embedder = self._vectorizer()
            if self._embedder is None:  # the index wants vectors this pass cannot make (logged where it failed)
                self._dense = False
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('vectors_missing', '1')")
        return self._embedder

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, values: dict[str, Any]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, None if v is None else str(v)) for k, v in values.items()])

    def signatures(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT uid, signature FROM items"))

    def db_item_keys(self) -> set[str]:
        """The uids the last database read had (see `db_items`)."""
        keys = {r[0] for r in self.conn.execute("SELECT item_key FROM db_items")}
        if not keys and self.meta("source") in ("sqlite", "snapshot"):
            return set(self.signatures())  # an index built before db_items existed: all from the database
        return keys

    def set_db_item_keys(self, keys: Iterable[str]) -> None:
        """Record a database read's uids (written only where they changed: this runs at every refresh)."""
        have = {r[0] for r in self.conn.execute("SELECT item_key FROM db_items")}
        new = set(keys)
        if new == have:
            return
        with self.transaction():
            self.conn.executemany("DELETE FROM db_items WHERE item_key = ?", [(k,) for k in have - new])
            self.conn.executemany("INSERT INTO db_items VALUES (?)", [(k,) for k in new - have])

    def counts(self) -> IndexCounts:
        c = self.conn
        libraries: dict[str, dict[str, Any]] = {
            lib: {"library": lib, "name": name, "items": 0, "notes": 0, "annotations": 0, "texts": 0}
            for lib, name in c.execute("SELECT library, name FROM libraries ORDER BY library != 'user', library")
        }
        totals = {"items": 0, "notes": 0, "annotations": 0, "texts": 0}
        for lib, n_items, n_notes, n_anns, n_texts in c.execute(
            "SELECT library, sum(item_type != 'note'), coalesce(sum(notes), 0), coalesce(sum(annotations), 0), "
            "coalesce(sum(text_attachments), 0) FROM items GROUP BY library"
        ):
            row = libraries.setdefault(lib, {"library": lib, "name": lib, "items": 0, "notes": 0, "annotations": 0, "texts": 0})
            row.update(items=n_items, notes=n_notes, annotations=n_anns, texts=n_texts)
            for k, v in (("items", n_items), ("notes", n_notes), ("annotations", n_anns), ("texts", n_texts)):
                totals[k] += v
        return IndexCounts(
            items=c.execute("SELECT count(*) FROM items").fetchone()[0],
            chunks=c.execute("SELECT count(*) FROM chunks").fetchone()[0],
            attachments_with_text=totals["texts"],
            collections=c.execute("SELECT count(*) FROM collections").fetchone()[0],
            notes=totals["notes"], annotations=totals["annotations"], libraries=libraries,
        )

    def plan(self, snapshot: LibrarySnapshot, have: dict[str, str]) -> tuple[Sequence[ItemRecord], list[str]]:
        """(items to (re)index, uids to remove), for a snapshot read against `have`, the stamps
        the index had before the read (its `items` are the ones whose stamp differs)."""
        return snapshot.items, sorted(set(have) - set(snapshot.stamps))

    def write_collections(self, collections: Sequence[CollectionRecord], libraries: dict[str, str] | None = None) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM collections")
            self.conn.executemany(
                "INSERT OR IGNORE INTO collections VALUES (?, ?, ?, ?)",
                [(c.library, c.key, c.name, c.parent_key) for c in collections],
            )
            if libraries is not None:
                self.conn.execute("DELETE FROM libraries")
                self.conn.executemany("INSERT INTO libraries VALUES (?, ?)", sorted(libraries.items()))

    def write_bbt_keys(self, keys: dict[tuple[str, str], str], stamp: str) -> None:
        """Better BibTeX's keys as its database has them now (citations/keys.py), and the file's stamp."""
        with self.transaction():
            self.conn.execute("DELETE FROM bbt_keys")
            self.conn.executemany("INSERT INTO bbt_keys VALUES (?, ?, ?)", [(lib, k, ck) for (lib, k), ck in keys.items()])
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('bbt_stamp', ?)", (stamp,))

    def assign_keys(self, remembered: Mapping[str, str]) -> tuple[int, dict[str, str]]:
        """Every item's citation key (citations/keys.py): how many changed, and the generated ones."""
        return assign_in_index(self.conn, remembered)

    def remove(self, uids: Iterable[str]) -> None:
        with self.transaction():
            for uid in uids:
                self._delete_item(uid)

    def write_items(self, batch: Sequence[tuple[ItemRecord, dict[str, str]]], labels: dict[str, list[str]] | None = None) -> None:
        """(item, {attachment key: text}) pairs, in one transaction; `labels`: {attachment key: the
        labels of its PDF's pages} where the PDF has them (library/pdflabels.py)."""
        with self.transaction():
            # Every delete first: FTS5 keeps pending inserts only while rowids rise, and deleting
            # an older item's rows between inserts writes them out: a small segment per item.
            for item, _ in batch:
                self._delete_item(item.uid)
            for item, texts in batch:
                self._insert_item(item, texts, labels or {})
            self._write_vectors()

    def _write_vectors(self) -> None:
        """Write the previous batch's vectors (in this batch's transaction) and send this batch's
        chunks to be embedded while the indexer reads the next one. A chunk with no words gets
        the zero vector (as a search scores a chunk without one), so a chunk without a row is one
        whose vector is not computed yet, or could not be: `meta.vectors_missing`, set while
        vectors are on their way, asks a later pass to fill them in (`fill_vectors`) if this one
        ends first, and a failure leaves the chunks searchable by their words (BM25)."""
        self._collect()
        pending, self._pending = self._pending, []
        if not pending or self.embedder is None:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zocrates-embed")
        self._inflight = (self._pool.submit(self.embedder.pack_many, [text for _, text in pending]), [i for i, _ in pending])
        if not self._flagged:
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('vectors_missing', '1')")
            self._flagged = True

    def _collect(self) -> None:
        """The vectors on their way, waited for and written (in the caller's transaction)."""
        if self._inflight is None:
            return
        future, ids = self._inflight
        self._inflight = None
        try:
            vecs = future.result()
        except EmbedFailed as exc:
            self._vector_failure(exc, len(ids))
            return
        zero = bytes(dense.DIM)
        self.conn.executemany("INSERT INTO chunk_vectors VALUES (?, ?)", [(i, v or zero) for i, v in zip(ids, vecs, strict=True)])

    def finish_vectors(self) -> None:
        """The last batch's vectors, written in a transaction of their own; the flag set while
        they were on their way is cleared unless a failure (now or before this pass) needs it."""
        if self._inflight is None and not self._flagged:
            return
        with self.transaction():
            self._collect()
            if self._dense and not self._missing_before:
                self.conn.execute("DELETE FROM meta WHERE key = 'vectors_missing'")
        self._flagged = False

    def close(self) -> None:
        """Wait for the embedding thread, if any (a stopping daemon has killed the child already,
        so it ends at once): it never outlives the pass that started it."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._inflight = None

    def _vector_failure(self, exc: EmbedFailed, n: int) -> None:
        self._dense = False  # this writer writes no more vectors; words are still indexed
        self._embedder = None
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('vectors_missing', '1')")
        if exc.stopped:
            log.info("library: embedding stopped (%s); the passages' vectors are computed at the next start",
                     escape_for_log(str(exc)))
        else:
            log.error("library: the passages' vectors could not be computed (%s); %d passages of this pass are searched "
                      "by their words alone (BM25) until a later pass computes them", escape_for_log(str(exc)), n)

    def fill_vectors(self) -> int:
        """Compute the vectors an earlier pass could not (see `_write_vectors`), in batches; the
        number written. Only when `meta.vectors_missing` says some are missing (no scan otherwise)."""
        if not self._dense or self.meta("vectors_missing") != "1":
            return 0
        done = 0
        while True:
            rows = self.conn.execute(
                "SELECT c.id, f.title, f.body FROM chunks c JOIN chunks_fts f ON f.rowid = c.id "
                "WHERE NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.id = c.id) LIMIT ?", (FILL_CHUNKS,)
            ).fetchall()
            with self.transaction():
                if not rows:
                    self.conn.execute("DELETE FROM meta WHERE key = 'vectors_missing'")
                    return done
                self._pending = [(i, f"{title}\n{body}") for i, title, body in rows]
                self._write_vectors()
                self._collect()
                if not self._dense:  # failed again: logged, still missing
                    return done
            done += len(rows)

    def update_term_stats(self) -> bool:
        """Recount the common words (`term_stats`) when the chunks have grown or shrunk by
        TERM_STATS_DRIFT since the last count (a first build, a large import); True if it did.
        One pass over FTS5's vocabulary: seconds on a library of 100,000 pages, so not per edit
        (a count a little stale only moves which words rank)."""
        (chunks,) = self.conn.execute("SELECT count(*) FROM chunks").fetchone()
        counted = self.meta("term_stats_chunks")
        if counted is not None and abs(chunks - int(counted)) <= TERM_STATS_DRIFT * int(counted):
            return False
        if chunks < MIN_CHUNKS_FOR_SHARES and counted is None:
            return False  # not used on a library this small (MIN_CHUNKS_FOR_SHARES)
        self.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab USING fts5vocab(main, 'chunks_fts', 'row')")
        with self.transaction():
            self.conn.execute("DELETE FROM term_stats")
            self.conn.execute("INSERT INTO term_stats SELECT term, doc FROM temp.chunks_vocab WHERE doc >= ?",
                              (max(1, int(COMMON_SHARE_FLOOR * chunks)),))
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('term_stats_chunks', ?)", (str(chunks),))
        return True

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the file and empty it after a pass that wrote: a first
        build otherwise leaves a log of hundreds of MB beside the index until the next start. A
        reader in the middle of a search makes it a partial one; the next pass tries again."""
        with contextlib.suppress(sqlite3.OperationalError):
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _delete_item(self, uid: str) -> None:
        c = self.conn
        # Only an item that has chunks is deleted from the FTS5 tables: six statements per item,
        # most of them finding nothing, were a sixth of a first build (bench/PROFILE.md, 17).
        ids = [(i,) for (i,) in c.execute("SELECT id FROM chunks WHERE uid = ?", (uid,))]
        if ids:
            c.executemany("DELETE FROM chunks_fts WHERE rowid = ?", ids)
            c.executemany("DELETE FROM chunks_cjk WHERE rowid = ?", ids)
            c.executemany("DELETE FROM chunk_vectors WHERE id = ?", ids)
            c.execute("DELETE FROM chunks WHERE uid = ?", (uid,))
        c.execute("DELETE FROM item_collections WHERE uid = ?", (uid,))
        c.execute("DELETE FROM items WHERE uid = ?", (uid,))

    def _insert_item(self, item: ItemRecord, texts: dict[str, str], pdf_labels: dict[str, list[str]]) -> None:
        c = self.conn
        explicit, explicit_source = explicit_key(item.fields) or (None, None)
        c.execute(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.uid, item.key, item.library, item.item_type, item.title, json.dumps(list(item.creators)), item.year,
                item.abstract, item.doi, item.url, json.dumps(list(item.tags)), json.dumps(list(item.collections)),
                len(item.attachments), sum(1 for a in item.attachments if texts.get(a.key)), len(item.notes),
                len(item.annotations), item.stamp, item.date_added or None, item.date_modified or None,
                json.dumps(children_json(item, texts), ensure_ascii=False),
                json.dumps(dict(item.fields), ensure_ascii=False), json.dumps([n.as_json() for n in item.names], ensure_ascii=False),
                explicit, explicit_source, None, None,  # the key itself: assign_keys, once the pass wrote every item
            ),
        )
        c.executemany(
            "INSERT OR IGNORE INTO item_collections VALUES (?, ?, ?)", [(item.library, k, item.uid) for k in item.collections]
        )
        # (kind, source key, attachment key, page, page label, body)
        rows: list[tuple[str, str | None, str | None, int | None, str | None, str]] = []
        if item.item_type != "note":
            # The header (creators, year, tags: searchable, never quoted), METADATA_BREAK, the abstract,
            # cut as any text is: one row the length of two ranked below ~1,200-character chunks
            # (SciFact, abstract field: 0.706 -> 0.716 test nDCG@10, train 0.721 -> 0.724).
            # A German name is searchable as it is typed either way ("Ströhle", "Stroehle": textnorm).
            variants = " ".join(dict.fromkeys(v for c in item.creators for w in _NAME_RE.findall(c) for v in name_variants(w)))
            header = " ".join(" ".join(p for p in ("; ".join(item.creators), variants, str(item.year or ""), " ".join(item.tags))
                                       if p).split())
            parts = [part for _, part in split_chunks((item.abstract or "").replace("\f", " "))] or [""]
            rows += [("metadata", None, None, None, None, f"{header if i == 0 else ''}{METADATA_BREAK}{part}")
                     for i, part in enumerate(parts)]
        # A page's label: the PDF's own (/PageLabels), else one an annotation on that page recorded.
        labels: dict[tuple[str, int], str] = {
            (att_key, n): label for att_key, found in pdf_labels.items() for n, label in enumerate(found, start=1) if label
        }
        for ann in item.annotations:
            if ann.page_index is not None and ann.page_label:
                labels.setdefault((ann.attachment_key, ann.page_index + 1), ann.page_label)
        for att in item.attachments:
            text = texts.get(att.key)
            if text:
                # A PDF's text without a form feed is one page (Zotero's PDF worker puts "\f" only
                # between pages); other files (HTML, EPUB) have no pages.
                one_page = 1 if att.content_type == "application/pdf" else None
                if one_page or PAGE_BREAK in text:  # printed pages: their headers, footers, numbers go
                    text = strip_furniture(text)
                rows += [("fulltext", att.key, att.key, page or one_page, labels.get((att.key, page or one_page or 0)), body)
                         for page, body in split_chunks(text)]
        for note in item.notes:
            body = note.text if note.text.startswith(note.title) else f"{note.title}\n{note.text}"
            rows += [("note", note.key, None, None, None, part) for _, part in split_chunks(body.replace("\f", " "))]
        for ann in item.annotations:
            # The highlight and the user's comment as paragraphs: a highlight rarely ends its
            # sentence, and glued to the comment it would be one sentence the full text never has
            # (the answerer quotes a highlight once, not again from the text: engine/answer/compose.py).
            body = "\n\n".join(p for p in (ann.text, " ".join(p for p in (ann.comment, " ".join(ann.tags)) if p)) if p)
            if body:
                page = ann.page_index + 1 if ann.page_index is not None else None
                rows.append(("annotation", ann.key, ann.attachment_key, page, ann.page_label or (str(page) if page else None), body))
        # A metadata chunk without an abstract is the title and a few names (~13 words against ~100
        # in a text chunk): with the title weighted, BM25's length normalisation made it the top hit
        # for any title word, above the text that answers, and it has nothing to quote (SciFact:
        # top passage for 75 of 300 queries; bench/bench_retrieval.py). The item's other chunks
        # carry its title, so this one gets none; with no other chunk it keeps it.
        bare_metadata = not (item.abstract or "").strip() and len(rows) > 1
        for kind, source, att_key, page, label, body in rows:
            title = "" if kind == "metadata" and bare_metadata else item.title
            if not title and not _WORD_RE.search(body):
                # Nothing to find (a bare metadata chunk of an item with no creators, year or
                # tags): as an FTS5 row it would only pull down the average length BM25
                # normalises by (SciFact's full-text layout: half the rows, -0.008 nDCG@10).
                continue
            cur = c.execute(
                "INSERT INTO chunks (uid, item_key, library, kind, source_key, attachment_key, page, page_label) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (item.uid, item.key, item.library, kind, source, att_key, page, label),
            )
            c.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (?, ?, ?)", (cur.lastrowid, title, body))
            cjk_body = cjk_bigrams(body)
            cjk_title = cjk_bigrams(title)
            if cjk_body or cjk_title:
                c.execute("INSERT INTO chunks_cjk (rowid, title, body) VALUES (?, ?, ?)", (cur.lastrowid, cjk_title, cjk_body))
            if self._dense and cur.lastrowid is not None:
                self._pending.append((cur.lastrowid, f"{title}\n{body}"))

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
    """An FTS5 query: the question's content words OR'ed, each quoted (so no word is FTS syntax).
    Runs of CJK characters are left to `cjk_expression`."""
    seen: list[str] = []
    for t in tokens(cjk_run_re().sub(" ", query)):
        if t not in seen:
            seen.append(t)
        if len(seen) == MAX_QUERY_TERMS:
            break
    return " OR ".join(f'"{t}"' for t in seen) if seen else None


def cjk_expression(query: str) -> str | None:
    """An FTS5 query on `chunks_cjk`: the query's CJK bigrams OR'ed (a lone character matches
    any bigram that starts with it)."""
    seen: list[str] = []
    for gram in cjk_bigrams(query).split():
        term = f'"{gram}"' + ("*" if len(gram) == 1 else "")
        if term not in seen:
            seen.append(term)
        if len(seen) == MAX_QUERY_TERMS:
            break
    return " OR ".join(seen) if seen else None


def _library(scope: Scope) -> str | None:
    lib = scope.library
    return lib if isinstance(lib, str) and _LIBRARY_RE.match(lib) else None


def scope_item_keys(conn: sqlite3.Connection, scope: Scope) -> list[str] | None:
    """The item uids a scoped search may return (None: no filter on items). A collection includes
    its subcollections. Uids are resolved first, in their own query: as a correlated subquery
    inside the MATCH, the recursive CTE was re-run for every matching row (1.4 s per query)."""
    lib = _library(scope)
    if scope.mode == "papers":
        keys = [k for k in scope.item_keys if valid_key(k)][:MAX_SCOPE_KEYS]
        sql = "SELECT uid FROM items WHERE item_key IN (SELECT value FROM json_each(?))"
        args: list[object] = [json.dumps(keys)]
        if lib is not None:
            sql += " AND library = ?"
            args.append(lib)
        return [r[0] for r in conn.execute(sql, args)]
    if scope.mode == "collection":
        if not valid_key(scope.collection):
            return []
        rows = conn.execute(
            "WITH RECURSIVE sub(lib, k) AS (SELECT library, key FROM collections WHERE key = ? AND (? IS NULL OR library = ?) "
            "UNION SELECT col.library, col.key FROM collections col JOIN sub ON col.parent_key = sub.k AND col.library = sub.lib) "
            "SELECT DISTINCT ic.uid FROM item_collections ic JOIN sub ON ic.library = sub.lib AND ic.collection_key = sub.k",
            (scope.collection, lib, lib),
        )
        return [r[0] for r in rows]
    return None


def search(conn: sqlite3.Connection, query: str, scope: Scope, top_k: int) -> list[Hit]:
    """Ranked chunks within `scope` (BM25; FTS5's bm25() is lower-is-better, Hit.score is its
    negation, higher-is-better; a query with CJK text fuses the word and the CJK rankings by
    rank). At most MAX_HITS_PER_ITEM per item unless fewer items match.

    Two steps: rank rowids alone (the scope as a rowid filter, applied before bm25() is computed,
    and no text read for rows that do not make the cut), then read the few winners' text."""
    expr = match_expression(query)
    cjk = cjk_expression(query)
    if (expr is None and cjk is None) or top_k <= 0:
        return []
    if expr is not None:
        _query_stemmer(conn)
    # One read transaction: the indexer commits between our statements otherwise, and a chunk
    # ranked by the first could be gone by the second. It writes only this connection's temporary
    # tables (the scope's chunks, kept for the next search; the question's words).
    conn.execute("BEGIN")
    try:
        scoped = _scope_chunks(conn, scope)
        if scoped is not None and scoped.chunks == 0:
            hits: list[Hit] = []
        else:
            small = scoped is not None and scoped.words is not None  # ranked within itself
            words = _word_ranking(conn, expr) if expr is not None and not small else None
            hits = _search(conn, query, expr, cjk, scoped, top_k, words)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return hits


# The chunks a scoped search may return, kept by each read connection while the index does not
# change (`PRAGMA data_version`): a collection of a thousand papers is tens of thousands of chunks,
# and gathering them for every statement would cost more than the ranking. Each connection keeps
# the SCOPE_SLOTS scopes it searched last (one table of chunk ids each, `scope_chunks_<slot>`),
# so a chat in a collection and a question about the selected papers do not evict each other.
SCOPE_SLOTS = 4
_SCOPE_OF = ("CREATE TEMP TABLE IF NOT EXISTS scope_of (slot INTEGER PRIMARY KEY, scope BLOB NOT NULL UNIQUE, "
             "data_version INTEGER NOT NULL, chunks INTEGER NOT NULL, used INTEGER NOT NULL)")
# A scope of at most this many chunks (a few selected papers) is ranked within itself: its chunks
# are copied into a temporary FTS5 table (`scope_words_<slot>`) when its ids are gathered. On a
# large library, ranking them in the whole index walks every chunk a question's words are in,
# for a handful of rows in the scope; the copy holds only those rows (bench/PROFILE.md, section
# 17). BM25's statistics are then the scope's own: within a few papers, a word they all share
# does not tell their passages apart, whatever its rarity in the library.
SMALL_SCOPE_CHUNKS = 500


@dataclass(frozen=True)
class _Scoped:
    """A scope's chunks as this connection holds them: `slot`'s tables, and how many."""

    slot: int
    chunks: int

    @property
    def filter(self) -> str:
        """The rowid filter on FTS5's rows: the unary plus keeps it out of FTS5's own plan, so it
        filters the rows before bm25() is computed for them."""
        return f"AND +f.rowid IN temp.scope_chunks_{self.slot}"

    @property
    def words(self) -> str | None:
        """The FTS5 table of a small scope's own chunks (None: a large scope)."""
        return f"scope_words_{self.slot}" if self.chunks <= SMALL_SCOPE_CHUNKS else None


def _scope_chunks(conn: sqlite3.Connection, scope: Scope) -> _Scoped | None:
    """Where the chunks `scope` may return are held, gathered unless this connection holds them
    for this state of the index already; None: every chunk (no filter). Called inside the
    search's read transaction."""
    lib = _library(scope)
    if scope.mode == "library" and (lib is None or _only_library(conn, lib)):
        return None
    conn.execute(_SCOPE_OF)
    key = msgspec.json.encode(scope)
    version = conn.execute("PRAGMA data_version").fetchone()[0]
    used = conn.execute("SELECT coalesce(max(used), 0) + 1 FROM scope_of").fetchone()[0]
    held = conn.execute("SELECT slot, data_version, chunks FROM scope_of WHERE scope = ?", (key,)).fetchone()
    if held is not None and held[1] == version:
        conn.execute("UPDATE scope_of SET used = ? WHERE slot = ?", (used, held[0]))
        return _Scoped(int(held[0]), int(held[2]))
    taken = dict(conn.execute("SELECT slot, used FROM scope_of"))
    free = [n for n in range(SCOPE_SLOTS) if n not in taken]
    slot = held[0] if held is not None else free[0] if free else min(taken, key=taken.__getitem__)
    conn.execute("DELETE FROM scope_of WHERE slot = ?", (slot,))
    conn.execute(f"DROP TABLE IF EXISTS temp.scope_chunks_{slot}")
    conn.execute(f"CREATE TEMP TABLE scope_chunks_{slot} (id INTEGER PRIMARY KEY)")
    if scope.mode == "library":
        conn.execute(f"INSERT INTO scope_chunks_{slot} SELECT id FROM chunks WHERE library = ?", (lib,))
    else:
        conn.execute(f"INSERT INTO scope_chunks_{slot} SELECT id FROM chunks WHERE uid IN (SELECT value FROM json_each(?))",
                     (json.dumps(scope_item_keys(conn, scope)),))
    scoped = _Scoped(slot, conn.execute(f"SELECT count(*) FROM scope_chunks_{slot}").fetchone()[0])
    conn.execute(f"DROP TABLE IF EXISTS temp.scope_words_{slot}")
    if scoped.words is not None:
        conn.execute(f"CREATE VIRTUAL TABLE temp.{scoped.words} USING fts5 (title, body, tokenize = '{_WORD_TOKENIZER}')")
        conn.execute(f"INSERT INTO {scoped.words} (rowid, title, body) "
                     f"SELECT f.rowid, f.title, f.body FROM chunks_fts f WHERE f.rowid IN temp.scope_chunks_{slot}")
    conn.execute("INSERT INTO scope_of VALUES (?, ?, ?, ?, ?)", (slot, key, version, scoped.chunks, used))
    return scoped


def _only_library(conn: sqlite3.Connection, lib: str) -> bool:
    """Whether every chunk is in `lib` (two index seeks)."""
    low = conn.execute("SELECT min(library) FROM chunks").fetchone()[0]
    high = conn.execute("SELECT max(library) FROM chunks").fetchone()[0]
    return low in (lib, None) and high in (lib, None)


def _query_stemmer(conn: sqlite3.Connection) -> None:
    """This connection's tokenizer for queries: a temporary FTS5 table with chunks_fts's own
    tokenizer, whose vocabulary gives a query word's stem exactly as the index stored it; and
    chunks_fts's vocabulary by word, for the chunk counts term_stats leaves out."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words USING fts5 (word, tokenize = '{_WORD_TOKENIZER}')")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_stems USING fts5vocab(temp, 'query_words', 'instance')")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunk_words USING fts5vocab(main, 'chunks_fts', 'row')")


@dataclass(frozen=True)
class WordRanking:
    """A question's words that rank on a large index (see CANDIDATE_CHUNKS), rarest first, with
    the number of chunks each is in."""

    words: tuple[str, ...]
    chunks: tuple[int, ...]

    def split(self, budget: int) -> Candidates:
        """The rare words, taken rarest first while together they are in at most `budget` chunks
        (words in no chunk cost nothing; the rarest in some chunk is always taken), and up to
        MAX_COMMON_WORDS of the others."""
        n = held = 0
        while n < len(self.words) and (not held or held + self.chunks[n] <= budget):
            held += self.chunks[n]
            n += 1
        common = self.words[n:n + MAX_COMMON_WORDS]
        return Candidates(_any_of(self.words[:n]), _any_of(common) if common else None, held > budget)


@dataclass(frozen=True)
class Candidates:
    """FTS5 expressions: the rare words, whose chunks are the candidates, and the common words
    that rank them too (None: none). `over_budget`: the rarest word alone is in more chunks
    than the budget."""

    rare: str
    common: str | None
    over_budget: bool


def _any_of(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def _word_ranking(conn: sqlite3.Connection, expr: str) -> WordRanking | None:
    """How `expr` (match_expression's) ranks on this index; None: as it is (a small index, a
    one-word question, or no word counts yet: a first build)."""
    words = [w[1:-1] for w in expr.split(" OR ")]
    if len(words) == 1:
        return None
    # Set by the writer that filled term_stats (an index without the table has no such row).
    counted = conn.execute("SELECT value FROM meta WHERE key = 'term_stats_chunks'").fetchone()
    if counted is None or int(counted[0]) < MIN_CHUNKS_FOR_SHARES:
        return None
    total = int(counted[0])
    # A word term_stats leaves out is counted from the vocabulary (a rare word's doclist is
    # short); a quoted word of several tokens is in at most as many chunks as its rarest token.
    conn.execute("DELETE FROM temp.query_words")
    conn.executemany("INSERT INTO temp.query_words (rowid, word) VALUES (?, ?)", list(enumerate(words)))
    chunks = dict.fromkeys(range(len(words)), 0)
    seen: set[int] = set()
    for n, count in conn.execute(
        "SELECT q.doc, coalesce(t.chunks, (SELECT v.doc FROM temp.chunk_words v WHERE v.term = q.term), 0) "
        "FROM temp.query_stems q LEFT JOIN term_stats t ON t.term = q.term"
    ):
        chunks[n] = count if n not in seen else min(chunks[n], count)
        seen.add(n)
    order = sorted(range(len(words)), key=lambda n: chunks[n])
    ranking = [n for n in order if chunks[n] <= RANKING_SHARE * total]
    if len(ranking) < MIN_RANKING_TERMS:
        ranking = order[:MIN_RANKING_TERMS]
    return WordRanking(tuple(words[n] for n in ranking), tuple(chunks[n] for n in ranking))


def _rank(conn: sqlite3.Connection, table: str, expr: str, where: str, limit: int) -> list[tuple[int, float]]:
    return [(int(r), float(sc)) for r, sc in conn.execute(
        f"SELECT f.rowid, bm25({table}, {TITLE_WEIGHT}, {BODY_WEIGHT}) AS s FROM {table} f "
        f"WHERE {table} MATCH ? {where} ORDER BY s LIMIT ?",
        [expr, limit],
    )]


def _rank_words(conn: sqlite3.Connection, words: WordRanking, where: str, wanted: int, enough: int) -> list[tuple[int, float]]:
    """The `wanted` best chunks for `words`: the candidates of CANDIDATE_CHUNKS, then, when fewer
    than `enough` of them are in the scope, of CANDIDATE_WIDENING times as many, then every
    chunk any word is in."""
    tried: set[Candidates] = set()
    for budget in (CANDIDATE_CHUNKS, CANDIDATE_CHUNKS * CANDIDATE_WIDENING):
        candidates = words.split(budget)
        if candidates in tried:
            continue
        tried.add(candidates)
        ranked = _rank_candidates(conn, candidates, where, wanted, enough)
        if len(ranked) >= enough or candidates.common is None:
            return ranked
    return _rank(conn, "chunks_fts", _any_of(words.words), where, wanted)


def _rank_candidates(conn: sqlite3.Connection, candidates: Candidates, where: str, limit: int, enough: int) -> list[tuple[int, float]]:
    """The chunks holding a rare word, by BM25 over the rare and the common words. FTS5 scores
    the phrases of its expression, so the common words cannot simply join the candidates' OR
    (they would make every chunk they are in a candidate): the candidates that also hold a
    common word are scored over `(rare) AND (common)`, which FTS5 finds by seeking the rare
    words' doclists, and the others over the rare words alone. When the rarest word alone is
    in more chunks than the budget, its chunks without a common word are scored only if the
    others are not `enough`: they are rarely among the best, and scoring them is most of the
    cost."""
    sql = f"SELECT f.rowid, bm25(chunks_fts, {TITLE_WEIGHT}, {BODY_WEIGHT}) FROM chunks_fts f WHERE chunks_fts MATCH ? {where}"
    rare, common = candidates.rare, candidates.common
    scores: dict[int, float] = {}
    if common is not None:
        scores = dict(conn.execute(sql, [f"({rare}) AND ({common})"]).fetchall())
    if common is None or not candidates.over_budget or len(scores) < enough:
        scores = dict(conn.execute(sql, [rare]).fetchall()) | scores
    return heapq.nsmallest(limit, scores.items(), key=lambda r: r[1])


def _dense_embedder(conn: sqlite3.Connection) -> dense.Embedder | None:
    """The embedder, when this index has vectors from it (else None: BM25 alone)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'dense_model'").fetchone()
    if not row or not row[0] or row[0] != dense.model_name():
        return None
    return dense.embedder(search=True)


def _rerank(conn: sqlite3.Connection, emb: dense.Embedder, query: str, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """`ranked` (rowid, BM25 as FTS5 gives it: negative, lower is better) re-scored by the dense
    stage, in the same convention: -(BM25 / the best BM25 + DENSE_WEIGHT x cosine)."""
    qv = emb.embed(query)
    if qv is None or not ranked:
        return ranked
    vecs = dict(conn.execute(
        "SELECT id, v FROM chunk_vectors WHERE id IN (SELECT value FROM json_each(?))", (json.dumps([r for r, _ in ranked]),)
    ))
    zero = bytes(dense.DIM)
    cos = emb.scores(qv, [vecs.get(r) or zero for r, _ in ranked])
    best = min(sc for _, sc in ranked) or -1.0
    return sorted(((r, -(sc / best + DENSE_WEIGHT * float(c))) for (r, sc), c in zip(ranked, cos, strict=True)), key=lambda r: r[1])


def _search(conn: sqlite3.Connection, query: str, expr: str | None, cjk: str | None, scoped: _Scoped | None, top_k: int,
            words: WordRanking | None = None) -> list[Hit]:
    where = scoped.filter if scoped is not None else ""
    limit = top_k * OVERFETCH
    # A query with CJK text keeps the rank fusion of its two indexes (no vectors for bigrams).
    emb = _dense_embedder(conn) if cjk is None else None
    lists = []
    if expr is not None:
        wanted = max(limit, DENSE_POOL) if emb is not None else limit
        if scoped is not None and scoped.words is not None:
            ranked_words = _rank(conn, scoped.words, expr, "", wanted)
        elif words is None:
            ranked_words = _rank(conn, "chunks_fts", expr, where, wanted)
        else:
            ranked_words = _rank_words(conn, words, where, wanted, limit)
        lists.append(ranked_words)
    if cjk is not None:
        lists.append(_rank(conn, "chunks_cjk", cjk, where, limit))
    if len(lists) == 1:
        ranked = lists[0]
    else:  # reciprocal-rank fusion; scores stay "higher is better" once negated below
        fused: dict[int, float] = {}
        for lst in lists:
            for rank, (rowid, _) in enumerate(lst):
                fused[rowid] = fused.get(rowid, 0.0) - 1.0 / (RRF_K + rank + 1)
        ranked = sorted(fused.items(), key=lambda r: r[1])[:limit]
    if not ranked:
        return []
    where_of = {row[0]: row[1:] for row in conn.execute(
        "SELECT id, uid, item_key, library, kind, source_key, attachment_key, page, page_label FROM chunks "
        "WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([r[0] for r in ranked]),),
    )}
    # The user's highlights and comments rank above the same words elsewhere in the paper.
    ranked = sorted(
        ((rowid, sc * (ANNOTATION_BOOST if rowid in where_of and where_of[rowid][3] == "annotation" else 1.0)) for rowid, sc in ranked),
        key=lambda r: r[1],
    )
    if emb is not None:
        ranked = _rerank(conn, emb, query, [r for r in ranked if r[0] in where_of])
    chosen: list[tuple[int, float]] = []
    spill: list[tuple[int, float]] = []
    per_item: dict[str, int] = {}
    for rowid, score in ranked:
        if rowid not in where_of:  # an FTS row without its chunk row: skipped, never a crash
            continue
        uid = where_of[rowid][0]
        n = per_item.get(uid, 0)
        (chosen if n < MAX_HITS_PER_ITEM else spill).append((rowid, score))
        per_item[uid] = n + 1
    chosen = sorted(chosen + spill[: max(0, top_k - len(chosen))], key=lambda r: r[1])[:top_k]
    bodies = dict(conn.execute(
        "SELECT rowid, body FROM chunks_fts WHERE rowid IN (SELECT value FROM json_each(?))",
        (json.dumps([r[0] for r in chosen]),),
    ))
    chosen = _with_text(conn, chosen, where_of, bodies)
    meta = _item_meta(conn, {where_of[r][0] for r, _ in chosen})
    hits = []
    for rowid, score in chosen:
        uid, item_key, library, kind, source, att_key, page, label = where_of[rowid]
        title, creators, year, collections, citation_key = meta.get(uid, ("(untitled)", (), None, (), None))
        passage = Passage(
            item_key=item_key, title=title, text=bodies.get(rowid, ""), creators=creators, year=year,
            attachment_key=att_key, page=page, collections=collections, kind=kind, source_key=source,
            page_label=label or (str(page) if page else None), library=library,
            link=_link(library, kind, item_key, source, att_key, page), citation_key=citation_key,
        )
        hits.append(Hit(passage, -float(score)))
    return hits


def _with_text(conn: sqlite3.Connection, chosen: list[tuple[int, float]], where_of: dict[int, tuple[Any, ...]],
               bodies: dict[int, str]) -> list[tuple[int, float]]:
    """A hit on an item's header alone (creators, year, tags; no abstract: "What did Zetsche
    find?" matches only there) has nothing to read or quote: it stands for the item's first text
    chunk instead, at the same score, unless that chunk is a hit already. `where_of` and `bodies`
    get the new rows."""
    bare = [r for r, _ in chosen if where_of[r][3] == "metadata" and not bodies.get(r, "").partition(METADATA_BREAK)[2].strip()]
    if not bare:
        return chosen
    have = {r for r, _ in chosen}
    first: dict[str, int] = {}
    for row in conn.execute(
        "SELECT id, uid, item_key, library, kind, source_key, attachment_key, page, page_label FROM chunks "
        "WHERE uid IN (SELECT value FROM json_each(?)) AND kind IN ('fulltext', 'note') ORDER BY kind = 'note', id",
        (json.dumps(sorted({where_of[r][0] for r in bare})),),
    ):
        if row[1] not in first:
            first[row[1]] = row[0]
            where_of[row[0]] = row[1:]
    swap = {r: first[where_of[r][0]] for r in bare if where_of[r][0] in first and first[where_of[r][0]] not in have}
    if not swap:
        return chosen
    bodies.update(conn.execute(
        "SELECT rowid, body FROM chunks_fts WHERE rowid IN (SELECT value FROM json_each(?))", (json.dumps(list(swap.values())),)
    ))
    return [(swap.get(r, r), sc) for r, sc in chosen]


def _link(library: str, kind: str, item_key: str, source: str | None, att_key: str | None, page: int | None) -> str:
    """Where a passage opens in Zotero: the PDF at its page (and annotation), else the item or note."""
    lib = library_path(library)
    if att_key and page:
        extra = f"&annotation={source}" if kind == "annotation" and source else ""
        return f"zotero://open-pdf/{lib}/items/{att_key}?page={page}{extra}"
    if att_key:
        return f"zotero://open-pdf/{lib}/items/{att_key}"
    return f"zotero://select/{lib}/items/{source if kind == 'note' and source else item_key}"


_ItemMeta = tuple[str, tuple[str, ...], int | None, tuple[str, ...], str | None]


def _item_meta(conn: sqlite3.Connection, uids: set[str]) -> dict[str, _ItemMeta]:
    if not uids:
        return {}
    out = {}
    for uid, title, creators, year, colls, citation_key in conn.execute(
        "SELECT uid, title, creators, year, collections, citation_key FROM items WHERE uid IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(uids)),),
    ):
        out[uid] = (title, tuple(json.loads(creators)), year, tuple(json.loads(colls)), citation_key)
    return out


# How long a read waits for the index while a write holds it (a WAL reader is rarely held: a
# checkpoint, recovery); past it the read gives up and answers as before the first build.
READ_BUSY_TIMEOUT_S = 5.0


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Whether a failed read or write means the index file is damaged (or not ours), so that only a
    rebuild helps; a busy or locked database, or a closed connection, is not."""
    msg = str(exc).lower()
    return any(s in msg for s in ("malformed", "not a database", "corrupt", "no such table", "no such column", "fts5"))


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
        conn = sqlite3.connect(db_uri(self.path, mode="ro"), uri=True, check_same_thread=False, timeout=READ_BUSY_TIMEOUT_S)
        self._local.conn = (self.generation, conn)
        with self._lock:
            self._all.append(conn)
        return conn

    def drop_thread_connection(self) -> None:
        """Closes this thread's connection; its next `connection()` opens a fresh one."""
        held = getattr(self._local, "conn", None)
        if held is None:
            return
        self._local.conn = None
        with self._lock:
            if held[1] in self._all:
                self._all.remove(held[1])
        with contextlib.suppress(sqlite3.Error):
            held[1].close()

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
            self.generation += 1
