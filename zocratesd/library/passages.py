"""`zocrates-data/library_passages.jsonl`: passages given as a file, for a daemon whose data dir has
no `zotero.sqlite` (tests, demos, benchmarks). One JSON object per line:
`{item_key, title, text, creators?, year?, page?, attachment_key?, collections?}`.

`PassagesFile` is the engine's `Retriever` over that file: it reloads the file when it changes
(size or mtime, checked at each search: one stat), logs each load with its count, and skips a bad
line saying which field is wrong. `creators` may be a list of names or one string (names
separated by ";").

One index, one path: the passages are written into the same FTS5 index a Zotero library gets
(library/index.py, in `library_passages.db` beside the file, rebuilt at each load) and searched
by the same `search`, so a passages file ranks as a library does (stemming, title weight, scope
in SQL). Each passage is indexed as an attachment's text under a key of its own, and a hit is
answered with the passage as the file gives it (its page, its attachment key or none), ranked
as well as a library is (bench/bench_retrieval.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import msgspec

from zocratesd.library import dense
from zocratesd.library._records import AttachmentRecord, CollectionRecord, ItemRecord, valid_key
from zocratesd.library.index import IndexCorrupt, IndexWriter, open_index, remove_index
from zocratesd.library.index import search as index_search
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, Passage, Scope
from zocratesd.logtext import escape_for_log

log = logging.getLogger(__name__)

# A passages file is read whole into memory; one this large is not a demo's and is refused.
MAX_PASSAGES_BYTES = 64 * 1024 * 1024


class PassageLineError(ValueError):
    """A line of the passages file is not a passage; the message names the field."""


def _text(d: dict[str, Any], name: str, required: bool = False) -> str | None:
    v = d.get(name)
    if v is None:
        if required:
            raise PassageLineError(f"field {name!r} is missing")
        return None
    if not isinstance(v, str) or (required and not v.strip()):
        raise PassageLineError(f"field {name!r} must be a non-empty string, not {type(v).__name__} {escape_for_log(v)[:40]}")
    return v


def _int(d: dict[str, Any], name: str) -> int | None:
    v = d.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and v.strip().isdigit():
            return int(v.strip())
        raise PassageLineError(f"field {name!r} must be an integer, not {escape_for_log(v)[:40]}")
    return v


def _names(d: dict[str, Any], name: str, sep: str | None) -> tuple[str, ...]:
    v = d.get(name)
    if v is None:
        return ()
    if isinstance(v, str):
        parts = v.split(sep) if sep else [v]
        return tuple(p.strip() for p in parts if p.strip())
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise PassageLineError(f"field {name!r} must be a list of strings" + (" or a string" if sep else ""))


def passage_from_line(line: str) -> Passage:
    """One line of the file as a Passage; PassageLineError naming the wrong field otherwise."""
    try:
        d = json.loads(line)
    except ValueError as exc:
        raise PassageLineError(f"not JSON ({exc})") from None
    if not isinstance(d, dict):
        raise PassageLineError("not a JSON object")
    return Passage(
        item_key=str(_text(d, "item_key", required=True)), title=str(_text(d, "title", required=True)),
        text=str(_text(d, "text", required=True)), creators=_names(d, "creators", ";"), year=_int(d, "year"),
        page=_int(d, "page"), attachment_key=_text(d, "attachment_key"), collections=_names(d, "collections", None),
    )


def load_passages(path: Path) -> list[Passage]:
    """Every good line of `path` ([] when it does not exist); bad lines are logged and skipped."""
    passages: list[Passage] = []
    try:
        size = path.stat().st_size
        if size > MAX_PASSAGES_BYTES:
            log.warning("library: %s is larger than %d bytes; not loaded", path, MAX_PASSAGES_BYTES)
            return passages
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return passages
    except OSError as exc:
        log.warning("library: cannot read %s: %s", path, exc)
        return passages
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            passages.append(passage_from_line(line))
        except PassageLineError as exc:
            log.warning("library: %s line %d skipped: %s", path, n, exc)
    return passages


class PassagesFile:
    """The Retriever over a passages file, reloaded when the file changes."""

    def __init__(self, path: Path):
        self.path = path
        self.index_path = path.with_suffix(".db")
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._passages: list[Passage] = []
        self._conn: sqlite3.Connection | None = None
        # The index's key of each passage -> the passage; item key -> its first passage.
        self._by_key: dict[str, Passage] = {}
        self._first: dict[str, Passage] = {}
        self.reload_if_changed()

    @property
    def passages(self) -> list[Passage]:
        return self._passages

    def _current_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def reload_if_changed(self) -> bool:
        """Load the file when its size or mtime changed since the last load; True if it did."""
        stamp = self._current_stamp()
        with self._lock:
            if stamp == self._stamp:
                return False
            first = self._stamp is None
            self._stamp = stamp
            passages = load_passages(self.path) if stamp is not None else []
            self._build(passages)
        dense.release()  # the model the build loaded to embed them, unless a search uses it
        items = len({p.item_key for p in passages})
        log.info("library: %s %d passages of %d items from %s", "loaded" if first else "reloaded", len(passages), items, self.path)
        return True

    def _build(self, passages: list[Passage]) -> None:
        """Index `passages` from scratch (under the lock). Items are grouped by key, in file order."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        remove_index(self.index_path)
        self._passages, self._by_key, self._first = passages, {}, {}
        if not passages:
            return
        try:
            conn = open_index(self.index_path)
        except IndexCorrupt:  # removed by open_index; a second try starts from nothing
            conn = open_index(self.index_path)
        grouped: dict[str, list[tuple[str, Passage]]] = {}
        for n, p in enumerate(passages):
            key = f"P{n:07d}"  # the index's key for this passage's text (8 of A-Z0-9, as Zotero keys)
            self._by_key[key] = p
            grouped.setdefault(p.item_key, []).append((key, p))
            self._first.setdefault(p.item_key, p)
        writer = IndexWriter(conn)
        colls = sorted({c for p in passages for c in p.collections if valid_key(c)})
        writer.write_collections([CollectionRecord(c, c) for c in colls], {"user": "My Library"})
        batch = []
        for item_key, parts in grouped.items():
            head = parts[0][1]
            item = ItemRecord(
                key=item_key, item_type="document", title=head.title, creators=head.creators, year=head.year,
                collections=tuple(c for c in head.collections if valid_key(c)),
                attachments=tuple(AttachmentRecord(key, content_type="text/plain") for key, _ in parts),
            )
            batch.append((item, {key: p.text for key, p in parts}))
        try:
            writer.write_items(batch)
            writer.finish_vectors()
        finally:
            writer.close()
        self._conn = conn

    def _search(self, query: str, scope: Scope, top_k: int) -> list[Hit]:
        self.reload_if_changed()
        with self._lock:
            if self._conn is None:
                return []
            hits = index_search(self._conn, query, scope, top_k)
        out = []
        for h in hits:
            given = self._by_key.get(h.passage.attachment_key or "") or self._first.get(h.passage.item_key)
            if given is None:
                continue
            # The passage as the file gives it; the text is the indexed chunk of it (a long passage is cut).
            text = h.passage.text if h.passage.kind == "fulltext" else given.text
            out.append(Hit(msgspec.structs.replace(given, text=text), h.score))
        return out

    async def search(self, query: str, scope: Scope, top_k: int = DEFAULT_TOP_K) -> list[Hit]:
        return await asyncio.to_thread(self._search, query, scope, top_k)
