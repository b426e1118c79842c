"""The background indexer: keeps library.db in step with the Zotero library, off the event loop.

One thread owns the index's write connection. After the daemon starts it refreshes once, then
polls for changes every `poll_interval_s` (the database's and `-wal`'s size and mtime, and, while
the database cannot be read, the local API's `Last-Modified-Version`) and refreshes when something
changed or a refresh was asked for. A refresh reads the library's metadata, re-indexes the items
whose signature changed, in batches, and removes the ones that are gone. Progress is logged and
kept in `status()`.

Where the metadata comes from: `zotero.sqlite` whenever it can be read (read-only, or a snapshot
while Zotero holds it); Zotero's local API only when it cannot, and only when the listener on its
port is the user's own (local_api.py). The API never removes an item the last database read had:
another local user can answer on that port, and "your library is now one item" is the one thing
a squatter could otherwise make us believe; such items stay until the database confirms.

Failures never leave the thread: a corrupt index is removed and rebuilt, a library that cannot be
read is reported in the status (`state: "unavailable"` or `"error"`, with a message saying what
to do) and retried at the next poll.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from zocratesd.library import dense
from zocratesd.library._records import USER_LIBRARY, ItemRecord, LibrarySnapshot
from zocratesd.library.bbt import bbt_stamp, read_bbt
from zocratesd.library.embedproc import EmbedChild, EmbedFailed
from zocratesd.library.fulltext import read_cache
from zocratesd.library.index import BATCH_ITEMS, IndexCorrupt, IndexReader, IndexWriter, is_corruption, open_index, remove_index
from zocratesd.library.local_api import ListenerChanged, LocalApi, LocalApiError
from zocratesd.library.pdflabels import LabelsUnreadable, page_labels
from zocratesd.library.status import IndexCounts, IndexStatus, starting_status
from zocratesd.library.zotero_db import (
    ZOTERO_DB,
    ZoteroDbError,
    change_stamp,
    open_zotero,
    read_library,
    remove_stale_snapshots,
)
from zocratesd.limits import DEFAULT_POLL_INTERVAL_S
from zocratesd.logtext import escape_for_log

log = logging.getLogger(__name__)

# The generated citation keys (citations/keys.py), kept beside the index so a rebuild gives them again.
KEYS_MEMORY = "citation-keys.json"
State = Literal["starting", "indexing", "ready", "unavailable", "error", "stopped"]
# Progress goes to the log at most this often during a long build (and at its start and end).
PROGRESS_LOG_INTERVAL_S = 5.0
# A refresh that fails (library locked and uncopiable, local API gone mid-read) is retried after
# this long even when nothing seems to have changed.
RETRY_AFTER_S = 60.0
# While Zotero is in use its database changes at almost every poll, and looking at it through a
# snapshot copies and checks the whole file (seconds for a large 7-9 database with its word
# index). Waiting this many times the last look's duration before the next one keeps that under
# ~1/20 of a core. The look is what a refresh costs whatever changed (the snapshot, the read of
# every item's stamp, the plan); indexing what changed is not counted, so a long first build (or
# a large edit) does not hold back the next look. An explicit refresh request is never held back.
REFRESH_DUTY = 20
# ...but never longer than this: an edit is searchable within ~10 s (a poll, this hold, the read
# and the indexing), at the price of a larger share of a core while Zotero writes continuously to
# a library whose look is slow (bench/PROFILE.md, section 17).
MAX_LOOK_HOLD_S = 5.0
# The GIL's switch interval while an indexer runs (see Indexer.start).
SWITCH_INTERVAL_S = 0.001
# After the embedding child failed (library/embedproc.py), passes index words alone for this long
# before another child is tried; the vectors missing meanwhile are computed then (fill_vectors).
EMBED_RETRY_S = 3600.0
WHAT_TO_DO = (
    "Start zocratesd with --zotero-data-dir pointing at your Zotero data directory (Zotero: Settings > Advanced > "
    "Files and Folders > Data Directory Location) or set ZOTERO_DATA_DIR; `zocratesd demo` writes a demo library"
)
HOW_TO_ENABLE_API = (
    "enable it in Zotero: Settings > Advanced > Allow other applications on this computer to communicate with Zotero"
)


@dataclass
class IndexerOptions:
    data_dir: Path
    work_dir: Path  # zocrates-data/: library.db and, briefly, snapshots
    local_api_url: str | None  # None: do not use the local API
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    # False (config `library.include_group_libraries`): group libraries are not read, and their
    # items already indexed leave the index at the next pass (the local API reads only My Library).
    include_groups: bool = True


class Indexer:
    def __init__(self, opts: IndexerOptions, reader: IndexReader):
        self.opts = opts
        self.reader = reader
        self.index_path = reader.path
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._rebuild = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Replaced whole under `_lock` (`_update`), never changed in place: `status()` hands it out.
        self._status = starting_status(opts.data_dir, self.index_path)
        self._announced: str | None = None  # the last summary logged (logged again only when it changes)
        self._forced = False
        self._last_stamp: object = None
        self._last_attempt = 0.0
        self._next_allowed = 0.0
        # False while zotero.sqlite cannot be read: then the polls also watch the local API.
        self._db_readable = True
        self._api_refusal: str | None = None  # the last reason the local API was not used (logged once)
        # The child process embedding this pass's chunks (embedproc.py), while one runs; after it
        # failed, no other starts before `_embed_retry_at` (a broken install would fail each pass).
        self._child: EmbedChild | None = None
        self._embed_retry_at = 0.0
        self._wrote = False  # the pass changed the index (its memory is then given back: refresh)
        self._look_s = 0.0  # the last pass's look at the library, before indexing (REFRESH_DUTY)
        # Hooks for tests: called in the thread after each committed batch.
        self.on_batch: Callable[[int, int], None] | None = None

    # --- owner side (event loop) ---------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            # The event loop answers while this thread computes (chunking, page furniture: Python
            # that holds the GIL). A request takes the GIL back many times, and with Python's
            # default 5 ms switch interval each time could wait that long (bench/PROFILE.md,
            # section 17). It is the whole process's setting.
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._thread = threading.Thread(target=self._run, name="zocrates-library-indexer", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to stop (it stops between batches) and wait for it."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            child = self._child
        if child is not None:
            child.kill()  # a batch waiting for its vectors ends now (they are computed at the next start)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("library: the indexer did not stop within %.0f s", timeout)
        self._update(state="stopped")

    def request_refresh(self, rebuild: bool = False) -> None:
        """Refresh now (and from scratch if `rebuild`), whatever the poll and duty limits say."""
        with self._lock:
            self._rebuild = self._rebuild or rebuild
            self._forced = True
        self._wake.set()

    def status(self) -> IndexStatus:
        with self._lock:
            return self._status

    # --- the thread -----------------------------------------------------------------------------

    def _update(
        self, *, state: str | None = None, message: str | None = None, index: IndexCounts | None = None, **values: Any
    ) -> None:
        """A new status: `state` (and `message`, None clearing it when a state is given), the
        index's counts, and any other field by name."""
        with self._lock:
            current = self._status
            if state is not None:
                values.update(state=state, message=message)
            if index is not None:
                values["index"] = index
            self._status = replace(current, **values)

    def _announce(self, summary: str, level: int = logging.INFO) -> None:
        """Put `summary` in the status and log it when it differs from the last one logged: the log
        says where the library comes from and its state at start and whenever that changes."""
        self._update(summary=summary)
        if summary != self._announced:
            self._announced = summary
            log.log(level, "library: %s", escape_for_log(summary))

    def _run(self) -> None:
        remove_stale_snapshots(self.opts.work_dir)
        api = LocalApi(self.opts.local_api_url, self.opts.data_dir) if self.opts.local_api_url else None
        try:
            while not self._stop.is_set():
                try:
                    self._maybe_refresh(api)
                except Exception as exc:  # the thread must survive anything; say what happened
                    log.exception("library: refresh failed")
                    self._update(state="error", message=f"indexing failed: {escape_for_log(exc)}")
                self._wake.wait(self.opts.poll_interval_s)
                self._wake.clear()
        finally:
            if api is not None:
                api.close()

    def _maybe_refresh(self, api: LocalApi | None) -> None:
        with self._lock:
            rebuild, self._rebuild = self._rebuild, False
            forced, self._forced = self._forced, False
        stamp: object = (change_stamp(self.opts.data_dir), self._api_stamp(api))
        stale = time.monotonic() - self._last_attempt > RETRY_AFTER_S and self.status().state in ("error", "unavailable")
        held = stamp != self._last_stamp and time.monotonic() < self._next_allowed
        wait = self._next_allowed - time.monotonic()
        self._update(last_look=_utc_now(), change_read_at=_utc_now(wait) if held and not (forced or rebuild) else None)
        if not (forced or rebuild or stale) and (stamp == self._last_stamp or held):
            return  # unchanged, or too soon after a long look (the change is read at a later poll)
        self._last_attempt = time.monotonic()
        if rebuild:
            self.reader.invalidate()
            remove_index(self.index_path)
        t0 = time.monotonic()
        self.refresh(api)
        # A pass that ended before its look did (the library unreadable, an error) counts whole.
        self._next_allowed = time.monotonic() + min(MAX_LOOK_HOLD_S, REFRESH_DUTY * (self._look_s or time.monotonic() - t0))
        self._last_stamp = stamp

    def _api_stamp(self, api: LocalApi | None) -> object:
        """What a poll compares for the local API: nothing while the database can be read (it is
        not used then); else who listens on its port and, if that may be used, its version."""
        if api is None or self._db_readable:
            return None
        owner = api.owner()
        usable = owner.verdict in ("mine", "unknown")
        return owner, api.library_version() if usable else None

    def _api_usable(self, api: LocalApi) -> str | None:
        """None when the local API may be read (the database cannot); else why not."""
        owner = api.owner()
        why: str | None = None
        if owner.verdict == "foreign":
            uids = ", ".join(str(u) for u in owner.uids)
            why = (f"the program listening on Zotero's local API port ({api.endpoint}) belongs to another user "
                   f"(uid {uids}), not to you; it is not Zotero's and is not used")
            if why != self._api_refusal:
                log.warning("library: %s", why)
        elif owner.verdict == "none" or not api.probe():
            why = f"Zotero's local API is not answering ({HOW_TO_ENABLE_API})"
        self._api_refusal = why
        return why

    def refresh(self, api: LocalApi | None) -> None:
        """One refresh pass (in the indexer thread, or directly in tests and the benchmark). `api`:
        Zotero's local API, used only when the database cannot be read."""
        t0 = time.perf_counter()
        api_checked = False
        self._wrote = False
        self._look_s = 0.0
        if not (self.opts.data_dir / ZOTERO_DB).exists():
            self._db_readable = False
            why = "Zotero's local API is off (library.local_api)" if api is None else self._api_usable(api)
            if why is not None:  # nothing to read: say so without creating an index
                msg = (f"no Zotero library found in {self.opts.data_dir}: it has no {ZOTERO_DB}, and {why}. "
                       f"{WHAT_TO_DO}")
                self._update(state="unavailable", message=msg, source=None)
                self._announce(msg, logging.WARNING)
                return
            api_checked = True
        try:
            conn = open_index(self.index_path)
        except IndexCorrupt as exc:
            log.warning("library: the index was unusable and is rebuilt from scratch (%s)", exc)
            self.reader.invalidate()
            conn = open_index(self.index_path)
        writer = IndexWriter(conn, self._vectorizer)
        try:
            try:
                self._refresh_with(writer, api, t0, api_checked)
            except sqlite3.DatabaseError as exc:
                if not is_corruption(exc):
                    raise
                log.warning("library: the index is corrupt (%s); rebuilding it", exc)
                writer.close()
                conn.close()
                self.reader.invalidate()
                remove_index(self.index_path)
                conn = open_index(self.index_path)
                writer = IndexWriter(conn, self._vectorizer)
                self._refresh_with(writer, api, t0, api_checked)
        finally:
            writer.close()
            conn.close()
            self._end_child()
            if self._wrote:  # a pass over many items leaves a heap of freed rows and texts (PROFILE section 11)
                dense.trim_heap()

    def _vectorizer(self) -> dense.Vectorizer | None:
        """What this pass embeds chunks with, asked for at its first chunk: the model a search
        has loaded in this process already, else a child process (embedproc.py: the daemon never
        loads the model to index; it leaves with the pass). None while a failed child's retry waits."""
        if (loaded := dense.loaded()) is not None:
            return loaded
        if time.monotonic() < self._embed_retry_at or self._stop.is_set():
            return None
        child = _WatchedChild(self)
        with self._lock:
            self._child = child
        try:
            child.start()
        except EmbedFailed as exc:
            self._end_child()
            self._embed_retry_at = time.monotonic() + EMBED_RETRY_S
            if not exc.stopped:
                log.error("library: the process that computes the passages' vectors failed to start (%s); this pass "
                          "indexes words alone (BM25), vectors are computed by a pass after %.0f min",
                          escape_for_log(str(exc)), EMBED_RETRY_S / 60)
            return None
        return child

    def _end_child(self) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.close()

    def _read(
        self, api: LocalApi | None, known: dict[str, str], reading: contextlib.ExitStack, api_checked: bool = False
    ) -> tuple[LibrarySnapshot, Callable[[str], str | None]]:
        """The database when it can be read, kept open by `reading` while the pass reads its
        items' records; else the local API, when it is the user's own (`api_checked`: refresh()
        found no database and has already checked the API)."""
        if api is not None and api_checked:
            db_error = f"no {ZOTERO_DB} in {self.opts.data_dir}"
        else:
            try:
                with contextlib.ExitStack() as attempt:
                    zconn, how = attempt.enter_context(open_zotero(self.opts.data_dir, self.opts.work_dir))
                    snap = read_library(zconn, self.opts.data_dir, how, known, groups=self.opts.include_groups)
                    reading.enter_context(attempt.pop_all())
                self._db_readable = True
                return snap, lambda key: read_cache(self.opts.data_dir, key)
            except ZoteroDbError as exc:
                self._db_readable = False
                if api is None:
                    raise
                db_error = str(exc)
            why = self._api_usable(api)
            if why is not None:
                raise ZoteroDbError(f"{db_error}; {why}")
        try:
            snap = api.read(known)
        except LocalApiError as exc:
            raise type(exc)(f"{db_error}; Zotero's local API failed: {exc}") from None
        snap.warnings = [*snap.warnings, f"read through Zotero's local API: {db_error}"]
        return snap, api.read_text

    def _citation_keys(self, writer: IndexWriter, snap: LibrarySnapshot) -> None:
        """Better BibTeX's keys when its database changed (it changes keys without touching items),
        then every item's citation key (citations/keys.py), from the items as written."""
        if (bbt := bbt_stamp(self.opts.data_dir)) != (writer.meta("bbt_stamp") or ""):
            writer.write_bbt_keys(read_bbt(self.opts.data_dir, self.opts.work_dir, snap.library_ids), bbt)
        memory = self.opts.work_dir / KEYS_MEMORY
        remembered = _read_keys(memory)
        changed, generated = writer.assign_keys(remembered)
        if changed:
            log.info("library: %d citation keys assigned", changed)
        if generated != remembered:
            _write_keys(memory, generated)

    def _refresh_with(self, writer: IndexWriter, api: LocalApi | None, t0: float, api_checked: bool = False) -> None:
        have = writer.signatures()
        with contextlib.ExitStack() as reading:
            try:
                snap, read_text = self._read(api, have, reading, api_checked)
            except (ZoteroDbError, LocalApiError) as exc:
                msg = str(exc)  # our words, local paths, and the server's text escaped where it was quoted
                self._update(state="error", message=msg, index=_counts(writer))
                self._announce(f"the library in {self.opts.data_dir} cannot be read: {msg}", logging.WARNING)
                return
            self._index(writer, api, snap, read_text, have, t0)

    def _index(self, writer: IndexWriter, api: LocalApi | None, snap: LibrarySnapshot, read_text: Callable[[str], str | None],
               have: dict[str, str], t0: float) -> None:
        """Writes what `snap` (read against `have`) changed into the index."""
        changed, removed = writer.plan(snap, have)
        if snap.source == "local_api":
            confirmed = writer.db_item_keys()
            kept = [k for k in removed if k in confirmed]
            if kept:
                removed = [k for k in removed if k not in confirmed]
                snap.warnings = [*snap.warnings, f"{len(kept)} items Zotero's local API does not list are kept until "
                                 f"{ZOTERO_DB} can be read and confirms they are gone"]
                log.info("library: %s", snap.warnings[-1])
        else:
            writer.set_db_item_keys(snap.stamps)
        total = len(changed)
        self._update(
            state="indexing" if total or removed else "ready", source=snap.source,
            zotero_schema_version=snap.schema_version, items_total=len(snap.stamps), counts=snap.counts, items_to_index=total,
            items_done=0, percent=0.0 if total else 100.0, warnings=list(snap.warnings),
        )
        origin = _origin(snap.source, self.opts.data_dir)
        if total:
            self._announce(f"indexing {total:,} of {len(snap.stamps):,} items from {origin}"
                           + (f" ({len(removed):,} removed)" if removed else ""))
        self._wrote = bool(total or removed)
        self._look_s = time.perf_counter() - t0
        writer.write_collections(snap.collections, snap.libraries or {USER_LIBRARY: "My Library"})
        if removed:
            writer.remove(removed)
        done = 0
        last_log = time.monotonic()
        unlabelled: list[str] = []  # PDFs whose page labels could not be read: said once, at the pass's end
        for start in range(0, total, BATCH_ITEMS):
            if self._stop.is_set():
                _log_unlabelled(unlabelled)
                log.info("library: indexing stopped at %d/%d items; it continues at the next start", done, total)
                return
            try:
                records = changed[start : start + BATCH_ITEMS]
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise  # a failure, not a pause: the thread reports it and tries again later
                # Zotero started, and holds its database now.
                _log_unlabelled(unlabelled)
                log.info("library: indexing paused at %d/%d items: %s; it continues at the next look", done, total,
                         escape_for_log(str(exc)))
                self.request_refresh()
                return
            batch, labels = self._read_batch(records, read_text, unlabelled)
            try:
                if snap.source == "local_api" and api is not None:
                    api.confirm_owner()  # full texts came over HTTP: still from the user's own listener?
            except ListenerChanged as exc:  # the batches written before came from the listener we checked
                msg = str(exc)
                log.warning("library: indexing stopped at %d/%d items: %s", done, total, msg)
                self._update(state="error", message=msg, index=_counts(writer))
                return
            writer.write_items(batch, labels)
            done += len(batch)
            # A batch's texts and rows are megabytes of strings freed together: given back now,
            # they do not add up in the heap over a long build (bench/PROFILE.md, section 17).
            del batch, labels, records
            dense.trim_heap()
            pct = round(100.0 * done / total, 1)
            self._update(items_done=done, percent=pct)
            if self.on_batch is not None:
                self.on_batch(done, total)
            if time.monotonic() - last_log >= PROGRESS_LOG_INTERVAL_S:
                self._announce(f"indexing {done:,} of {total:,} items from {origin} ({pct:.0f}%)")
                last_log = time.monotonic()
        writer.finish_vectors()
        if total or removed:
            writer.update_term_stats()
        _log_unlabelled(unlabelled)
        self._citation_keys(writer, snap)
        if writer.fill_vectors():
            log.info("library: the passages' vectors missing since an earlier failure are computed")
        self._end_child()  # before "ready": a pass over, its child is gone
        if total or removed:
            writer.checkpoint()
        ms = round((time.perf_counter() - t0) * 1000.0, 1)
        writer.set_meta({"last_refresh": time.time(), "source": snap.source, "zotero_schema_version": snap.schema_version})
        counts = _counts(writer)
        with self._lock:
            refreshes = self._status.refreshes + 1
        self._update(
            state="ready", percent=100.0, last_refresh=datetime.now(UTC).isoformat(timespec="seconds"),
            last_refresh_ms=ms, refreshes=refreshes, index=counts,
        )
        kinds = counts.kinds
        extra = "".join(f", {kinds[k]:,} {k}" for k in ("notes", "annotations") if kinds[k])
        groups = sum(1 for lib in counts.libraries if lib["library"] != USER_LIBRARY)
        where = f" in {1 + groups} libraries" if groups else ""
        # Stable while nothing changes, so it is logged once, and again only when the library changes.
        self._announce(f"library ready: {kinds['items']:,} items, {kinds['texts']:,} full texts{extra}{where} (from {origin})")
        if total or removed:
            log.info("library: %d items re-indexed in %.1f s; %d passages in the index", total, ms / 1000, counts.chunks_indexed)

    def _read_batch(self, items: Sequence[ItemRecord], read_text: Callable[[str], str | None],
                    unlabelled: list[str]) -> tuple[list[tuple[ItemRecord, dict[str, str]]], dict[str, list[str]]]:
        """The items with their attachments' texts, and the page labels of their stored PDFs
        (pdflabels.py); a PDF whose labels cannot be read is added to `unlabelled`."""
        batch: list[tuple[ItemRecord, dict[str, str]]] = []
        labels: dict[str, list[str]] = {}
        for item in items:
            texts = {}
            for att in item.attachments:
                text = read_text(att.key)
                if text:
                    texts[att.key] = text
                    if att.content_type == "application/pdf":
                        try:
                            if found := page_labels(self.opts.data_dir, att.key):
                                labels[att.key] = found
                        except LabelsUnreadable as exc:
                            unlabelled.append(f"storage/{att.key} ({exc})")
            batch.append((item, texts))
        return batch, labels


class _WatchedChild(EmbedChild):
    """The indexer's child: a failure while embedding holds back the next child (`EMBED_RETRY_S`)."""

    def __init__(self, indexer: Indexer):
        super().__init__()
        self._indexer = indexer

    def pack_many(self, texts: Sequence[str]) -> list[bytes | None]:
        try:
            return super().pack_many(texts)
        except EmbedFailed:
            self._indexer._embed_retry_at = time.monotonic() + EMBED_RETRY_S
            raise


# A pass's per-file problems are logged as one line: a count and the first few files.
NAMED_PROBLEM_FILES = 5


def _read_keys(path: Path) -> dict[str, str]:
    """The generated citation keys an earlier index gave ({} when none, or the file is not ours)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def _write_keys(path: Path, keys: dict[str, str]) -> None:
    """Write the generated keys beside the index (a temp file renamed over it: never half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(keys, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        log.warning("library: the citation keys could not be saved in %s (%s); a rebuilt index may letter them anew",
                    path, exc.strerror)


def _log_unlabelled(files: list[str]) -> None:
    if not files:
        return
    shown = ", ".join(files[:NAMED_PROBLEM_FILES]) + (f" and {len(files) - NAMED_PROBLEM_FILES:,} more"
                                                     if len(files) > NAMED_PROBLEM_FILES else "")
    log.info("library: the page labels of %s PDF%s could not be read (%s); their pages are cited by number",
             f"{len(files):,}", "" if len(files) == 1 else "s", shown)


def _counts(writer: IndexWriter) -> IndexCounts:
    c = writer.counts()
    libraries = list((c.libraries or {}).values())
    kinds = {k: sum(int(lib[k]) for lib in libraries) for k in ("items", "notes", "annotations", "texts")}
    return IndexCounts(
        items_indexed=c.items, chunks_indexed=c.chunks, attachments_with_text=c.attachments_with_text,
        collections=c.collections, notes_indexed=c.notes, annotations_indexed=c.annotations, libraries=libraries,
        kinds=kinds,
    )


def _utc_now(ahead_s: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + ahead_s, UTC).isoformat(timespec="seconds")


def _origin(source: str, data_dir: Path) -> str:
    """Where the library was read from, in words."""
    if source == "local_api":
        return "Zotero's local API"
    how = {"sqlite": "read-only", "snapshot": "through a private copy: Zotero has it open, or it is in WAL mode"}
    return f"{data_dir / ZOTERO_DB} ({how.get(source, source)})"
