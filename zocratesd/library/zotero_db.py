"""Reading `zotero.sqlite` without ever writing to it (research/zotero_ops.md sections 1.2-1.5).

How a database is opened, in order:

1. `file:…?mode=ro` on the user's file, when it is a rollback-journal database (Zotero 7-9) with no
   journal beside it. A running Zotero holds its EXCLUSIVE lock, so the first read fails with
   "database is locked" within `RO_BUSY_TIMEOUT_S`; then:
2. a snapshot: the database and its `-wal` (Zotero 10) or `-journal` are copied into a private
   temporary folder under `zocrates-data/`, opened there read-write so SQLite replays the WAL or
   rolls back the hot journal *in the copy*, validated with `PRAGMA quick_check` (a copy taken
   mid-write can be torn: we retry), then read through `immutable=1`. The folder is removed when
   the read ends, whatever happens, and leftovers of a crash are removed at the next start.

A WAL database (Zotero 10) always goes the snapshot way: `mode=ro` on a WAL file creates `-wal`
and `-shm` files next to the user's database [tested], which we must never do.

Schema: the `userdata` version is read first. 123 (Zotero 7/8), 125 (9) and 129 (10) are known;
versions between or after them are read with a warning (the columns we use have not changed since
7.0); anything older than Zotero 7, or a file that is not a Zotero database, is a clear error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from zocratesd.library._records import (
    USER_LIBRARY,
    AnnotationRecord,
    AttachmentRecord,
    CollectionRecord,
    CreatorRecord,
    ItemRecord,
    ItemRecords,
    LibrarySnapshot,
    NoteRecord,
    display_name,
    item_stamp,
    item_uid,
    library_counts,
    valid_key,
    year_of,
)
from zocratesd.library.fulltext import cache_stamp, html_to_text

log = logging.getLogger(__name__)

ZOTERO_DB = "zotero.sqlite"
SNAPSHOT_PREFIX = "library-snapshot-"
# userdata schema versions (zotero_ops.md 1.2): 123 = Zotero 7.0-8.0, 125 = 9.0, 129 = 10.0.
KNOWN_SCHEMAS = {123: "Zotero 7/8", 125: "Zotero 9", 129: "Zotero 10"}
OLDEST_SCHEMA = 123
NEWEST_KNOWN_SCHEMA = 129
# How long a read-only open waits for Zotero's lock before we take a snapshot instead: a running
# Zotero never releases it, so waiting longer only delays the fallback.
RO_BUSY_TIMEOUT_S = 0.25
# A copy can be torn by a concurrent write (sqlite.org/howtocorrupt.html, backups); Zotero writes
# in short bursts, so a few retries almost always get a clean copy.
SNAPSHOT_ATTEMPTS = 3
NON_REGULAR_TYPES = ("attachment", "note", "annotation")
# A note longer than this is indexed from its beginning (Zotero's own full-text limit is 500,000
# characters; a note that long is a pasted document, not the user's words).
MAX_NOTE_CHARS = 1_000_000
# Tables and columns the reader relies on; a database without them is refused with their names.
REQUIRED_COLUMNS = {
    "items": ("itemID", "itemTypeID", "libraryID", "key", "dateAdded", "dateModified", "clientDateModified"),
    "itemData": ("itemID", "fieldID", "valueID"),
    "itemDataValues": ("valueID", "value"),
    "creators": ("creatorID", "firstName", "lastName", "fieldMode"),
    "itemCreators": ("itemID", "creatorID", "orderIndex"),
    "collections": ("collectionID", "collectionName", "parentCollectionID", "libraryID", "key"),
    "collectionItems": ("collectionID", "itemID"),
    "deletedItems": ("itemID",),
    "itemAttachments": ("itemID", "parentItemID", "linkMode", "contentType"),
    "libraries": ("libraryID", "type"),
}


class ZoteroDbError(Exception):
    """The Zotero database cannot be read; the message says why and what to do."""


def db_uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(path))}" + (f"?{query}" if query else "")


def is_wal(path: Path) -> bool:
    """True when the file's header says WAL (bytes 18-19 are 2); raises ZoteroDbError if not SQLite."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise ZoteroDbError(f"cannot read {path}: {exc.strerror}") from None
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise ZoteroDbError(f"{path} is not an SQLite database")
    return header[18] == 2 or header[19] == 2


def remove_stale_snapshots(work_dir: Path) -> None:
    """Remove snapshot folders a crashed daemon left behind."""
    for d in work_dir.glob(SNAPSHOT_PREFIX + "*"):
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def open_zotero(data_dir: Path, work_dir: Path) -> Iterator[tuple[sqlite3.Connection, str]]:
    """A read-only connection to the library and how it was made ("sqlite" or "snapshot")."""
    db = data_dir / ZOTERO_DB
    if not db.is_file():
        raise ZoteroDbError(f"no {ZOTERO_DB} in {data_dir}: is this the Zotero data directory?")
    with open_readonly(db, work_dir) as opened:
        yield opened


@contextlib.contextmanager
def open_readonly(db: Path, work_dir: Path) -> Iterator[tuple[sqlite3.Connection, str]]:
    """A read-only connection to an SQLite file Zotero (or a Zotero plugin) keeps, made as the
    module docstring says, and how ("sqlite" or "snapshot"); ZoteroDbError when it cannot be read."""
    wal = is_wal(db)
    side_files = any(Path(f"{db}{s}").exists() for s in ("-wal", "-journal"))
    if not wal and not side_files:
        conn = sqlite3.connect(db_uri(db, mode="ro"), uri=True, timeout=RO_BUSY_TIMEOUT_S, check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            conn.close()
            log.info("library: %s is in use (%s); reading a snapshot", db, exc)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ZoteroDbError(f"{db} is not a readable SQLite database ({exc})") from None
        else:
            try:
                yield conn, "sqlite"
            finally:
                conn.close()
            return
    with snapshot(db, work_dir) as conn:
        yield conn, "snapshot"


@contextlib.contextmanager
def snapshot(db: Path, work_dir: Path) -> Iterator[sqlite3.Connection]:
    """A validated private copy of `db` (+ `-wal` or `-journal`), removed on exit."""
    work_dir.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for attempt in range(1, SNAPSHOT_ATTEMPTS + 1):
        folder = Path(tempfile.mkdtemp(prefix=SNAPSHOT_PREFIX, dir=work_dir))
        try:
            copy = folder / ZOTERO_DB
            before = _stamp(db)
            shutil.copyfile(db, copy)
            for suffix in ("-wal", "-journal"):
                side = Path(f"{db}{suffix}")
                with contextlib.suppress(FileNotFoundError):
                    shutil.copyfile(side, Path(f"{copy}{suffix}"))
            if _stamp(db) != before:
                last_error = "the database changed while it was copied"
                log.info("library: snapshot attempt %d of %s failed: %s", attempt, db, last_error)
                continue
            try:
                _recover(copy)
            except sqlite3.DatabaseError as exc:
                last_error = f"the copy is not consistent ({exc})"
                log.info("library: snapshot attempt %d of %s failed: %s", attempt, db, last_error)
                continue
            conn = sqlite3.connect(db_uri(copy, mode="ro", immutable="1"), uri=True, check_same_thread=False)
            try:
                yield conn
            finally:
                conn.close()
            return
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    raise ZoteroDbError(f"could not take a consistent snapshot of {db} after {SNAPSHOT_ATTEMPTS} attempts: {last_error}")


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _recover(copy: Path) -> None:
    """Replay the WAL / roll back a hot journal in the copy, fold everything into the main file,
    and check it. Only ever run on our own copy."""
    conn = sqlite3.connect(copy, isolation_level=None)
    try:
        (result,) = conn.execute("PRAGMA quick_check").fetchone()
        if result != "ok":
            raise sqlite3.DatabaseError(str(result))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()


def schema_version(conn: sqlite3.Connection) -> int:
    try:
        row = conn.execute("SELECT version FROM version WHERE schema = 'userdata'").fetchone()
    except sqlite3.OperationalError:
        raise ZoteroDbError("zotero.sqlite has no version table: not a Zotero database") from None
    if row is None or not isinstance(row[0], int):
        raise ZoteroDbError(f"zotero.sqlite has no usable userdata schema version ({row[0] if row else 'none'!r})")
    return int(row[0])


def check_schema(conn: sqlite3.Connection, version: int) -> list[str]:
    """Refuse what we cannot read; return warnings for versions we read on trust."""
    if version < OLDEST_SCHEMA:
        raise ZoteroDbError(
            f"zotero.sqlite has userdata schema {version}, older than Zotero 7 ({OLDEST_SCHEMA}); update Zotero to 7 or later"
        )
    for table, columns in REQUIRED_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in columns if c not in have]
        if missing:
            what = f"table {table}" if not have else f"{table}.{', '.join(missing)}"
            raise ZoteroDbError(f"zotero.sqlite (userdata schema {version}) lacks {what}; this zocratesd cannot read it")
    if version in KNOWN_SCHEMAS:
        return []
    newer = " (newer than this zocratesd knows)" if version > NEWEST_KNOWN_SCHEMA else ""
    msg = f"zotero.sqlite has userdata schema {version}{newer}; reading it as Zotero 10's ({NEWEST_KNOWN_SCHEMA})"
    log.warning("library: %s", msg)
    return [msg]


def read_library(
    conn: sqlite3.Connection, data_dir: Path, source: str, known: dict[str, str] | None = None, *, groups: bool = True
) -> LibrarySnapshot:
    """Every non-trashed item of every library in `libraries` (the user's and, unless `groups` is
    false, the groups'; feeds never): its stamp (`item_stamp`), and, for the items whose stamp
    differs from `known` (all when None; keyed by `ItemRecord.uid`), the full record with
    metadata, collections, tags, attachments (no text), notes and annotations. Phase 1 reads only
    ids, dates, collection membership and the item tree; phase 2 reads field values, creators,
    tags, notes and annotations for the changed items only, so a refresh of a 10,000-item library
    that changed in 10 places reads 10 items' metadata. Phase 2 runs as the snapshot's `items`
    are read (`ItemRecords`), a slice at a time, while `conn` is open."""
    version = schema_version(conn)
    warnings = check_schema(conn, version)
    libs = _libraries(conn, groups)
    if not any(lib == USER_LIBRARY for lib, _ in libs.values()):
        raise ZoteroDbError("zotero.sqlite has no user library")
    items = _items(conn, libs)
    collections: list[CollectionRecord] = []
    coll_keys: dict[int, str] = {}
    for lib_id, (lib, _) in libs.items():
        recs, keys = _collections(conn, lib_id, lib)
        collections += recs
        coll_keys.update(keys)
    member: dict[int, list[str]] = {}
    for coll_id, item_id in conn.execute("SELECT collectionID, itemID FROM collectionItems ORDER BY collectionID, orderIndex"):
        ck = coll_keys.get(coll_id)
        if ck and item_id in items:
            member.setdefault(item_id, []).append(ck)

    atts, att_owner, standalone = _attachments(conn, items, data_dir)

    # Notes (itemNotes also holds attachments' own notes: only items of type note count) and
    # annotations hang on the record of their parent item (an annotation's parent is its attachment).
    children: dict[int, list[int]] = {}
    n_notes = n_annotations = 0  # those the index holds: a trashed parent's are not
    for item_id, parent_id in conn.execute("SELECT itemID, parentItemID FROM itemNotes"):
        it = items.get(item_id)
        if it is None or it.type != "note":
            continue
        if parent_id is None:
            standalone.add(item_id)
            n_notes += 1
        elif parent_id in items and items[parent_id].type not in NON_REGULAR_TYPES:
            children.setdefault(parent_id, []).append(item_id)
            n_notes += 1
    with contextlib.suppress(sqlite3.OperationalError):  # a damaged or stripped database: no annotations
        for item_id, att_id in conn.execute("SELECT itemID, parentItemID FROM itemAnnotations"):
            if item_id in items and att_id in att_owner:
                children.setdefault(att_owner[att_id], []).append(item_id)
                n_annotations += 1
    counts = library_counts(
        items=sum(1 for it in items.values() if it.type not in NON_REGULAR_TYPES), notes=n_notes,
        annotations=n_annotations, attachments=len(att_owner),
    )

    stamps: dict[str, str] = {}
    changed: list[int] = []
    for item_id, it in items.items():
        if it.type in NON_REGULAR_TYPES and item_id not in standalone:
            continue
        kids = [f"{items[c].key}:{items[c].modified}|{items[c].client_modified}" for c in children.get(item_id, ())]
        stamp = item_stamp(it.modified, it.client_modified, member.get(item_id, []), atts.get(item_id, []), kids)
        uid = item_uid(it.library, it.key)
        stamps[uid] = stamp
        if known is None or known.get(uid) != stamp:
            changed.append(item_id)

    names = {lib: name for lib, name in libs.values()}

    def records(ids: Sequence[int]) -> list[ItemRecord]:
        meta = _metadata(conn, ids, items)
        notes, annotations = _children(conn, [c for i in ids for c in children.get(i, ())] + list(ids), items)
        return [
            _full_record(i, items[i], stamps[item_uid(items[i].library, items[i].key)], member, atts, meta,
                         [notes[c] for c in children.get(i, ()) if c in notes] + ([notes[i]] if i in notes else []),
                         [annotations[c] for c in children.get(i, ()) if c in annotations], names)
            for i in ids
        ]

    changed.sort(key=lambda i: item_uid(items[i].library, items[i].key))
    return LibrarySnapshot(
        source=source, schema_version=version, items=ItemRecords(changed, records), stamps=stamps, collections=collections,
        warnings=warnings,
        libraries=names, counts=counts, library_ids={lib_id: lib for lib_id, (lib, _) in libs.items()},
    )


def _items(conn: sqlite3.Connection, libs: dict[int, tuple[str, str]]) -> dict[int, _Row]:
    """Every item of `libs` that is not in the trash and has a valid key, by item id."""
    types = dict(conn.execute("SELECT itemTypeID, typeName FROM itemTypesCombined"))
    trashed = {r[0] for r in conn.execute("SELECT itemID FROM deletedItems")}
    items: dict[int, _Row] = {}
    for item_id, lib_id, key, type_id, added, modified, client_modified in conn.execute(
        "SELECT itemID, libraryID, key, itemTypeID, dateAdded, dateModified, clientDateModified FROM items"
    ):
        if item_id not in trashed and lib_id in libs and valid_key(key):
            items[item_id] = _Row(key, type_id, types.get(type_id, "unknown"), str(modified or ""), str(client_modified or ""),
                                  libs[lib_id][0], str(added or ""))
    return items


def _count(value: object) -> int | None:
    """A page count as Zotero stored it: a whole number, else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _attachments(
    conn: sqlite3.Connection, items: dict[int, _Row], data_dir: Path
) -> tuple[dict[int, list[AttachmentRecord]], dict[int, int], set[int]]:
    """The attachments of `items`, by the record that carries them (their parent, or a standalone
    attachment itself); each attachment's carrier; and the standalone ones."""
    atts: dict[int, list[AttachmentRecord]] = {}
    att_owner: dict[int, int] = {}  # attachment id -> the record that carries it (parent, or itself)
    standalone: set[int] = set()
    for item_id, parent_id, link_mode, content_type, indexed_pages, total_pages in conn.execute(
        "SELECT a.itemID, a.parentItemID, a.linkMode, a.contentType, f.indexedPages, f.totalPages "
        "FROM itemAttachments a LEFT JOIN fulltextItems f ON f.itemID = a.itemID"
    ):
        it = items.get(item_id)
        if it is None or it.type != "attachment":
            continue  # trashed, a feed's, or a bad key
        rec = AttachmentRecord(
            key=it.key, content_type=content_type, link_mode=link_mode,
            modified=f"{it.modified}|{it.client_modified}", cache_stamp=cache_stamp(data_dir, it.key),
            indexed_pages=_count(indexed_pages), total_pages=_count(total_pages),
        )
        if parent_id is None:
            standalone.add(item_id)
            atts[item_id] = [rec]
            att_owner[item_id] = item_id
        elif parent_id in items:
            atts.setdefault(parent_id, []).append(rec)
            att_owner[item_id] = parent_id
    return atts, att_owner, standalone


@dataclass(frozen=True)
class _Row:
    key: str
    type_id: int
    type: str
    modified: str
    client_modified: str
    library: str
    added: str = ""


def _libraries(conn: sqlite3.Connection, groups_too: bool = True) -> dict[int, tuple[str, str]]:
    """libraryID -> (library, name) for the user library and every group (none unless
    `groups_too`); feeds are left out (their items are the feed's, not the user's)."""
    groups: dict[int, tuple[int, str]] = {}
    with contextlib.suppress(sqlite3.OperationalError):
        groups = {lib_id: (gid, str(name or "")) for lib_id, gid, name in conn.execute("SELECT libraryID, groupID, name FROM groups")}
    out: dict[int, tuple[str, str]] = {}
    for lib_id, kind in conn.execute("SELECT libraryID, type FROM libraries ORDER BY libraryID"):
        if kind == "user" and not any(lib == USER_LIBRARY for lib, _ in out.values()):
            out[lib_id] = (USER_LIBRARY, "My Library")
        elif kind == "group" and groups_too and lib_id in groups:
            gid, name = groups[lib_id]
            out[lib_id] = (f"groups/{gid}", name or f"group {gid}")
    return out


def _children(
    conn: sqlite3.Connection, ids: Sequence[int], items: dict[int, _Row]
) -> tuple[dict[int, NoteRecord], dict[int, AnnotationRecord]]:
    """The notes and annotations among `ids`, as text."""
    if not ids:
        return {}, {}
    id_list = json.dumps(ids)
    notes: dict[int, NoteRecord] = {}
    for item_id, html, title in conn.execute(
        "SELECT itemID, note, title FROM itemNotes WHERE itemID IN (SELECT value FROM json_each(?))", (id_list,)
    ):
        it = items.get(item_id)
        if it is None or it.type != "note":
            continue
        text = html_to_text(str(html or "")[:MAX_NOTE_CHARS])
        if text:
            notes[item_id] = NoteRecord(key=it.key, title=str(title or "").strip() or text.split("\n", 1)[0][:120], text=text)
    anns: dict[int, AnnotationRecord] = {}
    tags: dict[int, list[str]] = {}
    with contextlib.suppress(sqlite3.OperationalError):
        for item_id, name in conn.execute(
            "SELECT it.itemID, t.name FROM itemTags it JOIN tags t ON t.tagID = it.tagID "
            "WHERE it.itemID IN (SELECT value FROM json_each(?))",
            (id_list,),
        ):
            tags.setdefault(item_id, []).append(str(name))
        for item_id, att_id, type_id, text, comment, color, label, position in conn.execute(
            "SELECT itemID, parentItemID, type, text, comment, color, pageLabel, position FROM itemAnnotations "
            "WHERE itemID IN (SELECT value FROM json_each(?))", (id_list,),
        ):
            it, att = items.get(item_id), items.get(att_id)
            if it is None or att is None:
                continue
            anns[item_id] = AnnotationRecord(
                key=it.key, attachment_key=att.key, type=ANNOTATION_TYPES.get(type_id, "highlight"),
                text=clean_line(text), comment=clean_line(comment), color=str(color) if color else None,
                page_label=clean_line(label)[:32] or None, page_index=_page_index(position),
                tags=tuple(tags.get(item_id, ())),
            )
    return notes, anns


# itemAnnotations.type (Zotero.Annotations.ANNOTATION_TYPE_*).
ANNOTATION_TYPES = {1: "highlight", 2: "note", 3: "image", 4: "ink", 5: "underline", 6: "text"}


def clean_line(value: object) -> str:
    """A database string with control characters removed (it is the user's, or a sync's)."""
    if not isinstance(value, str):
        return ""
    return " ".join("".join(c if c.isprintable() or c in "\n\t" else " " for c in value).split())


def _page_index(position: object) -> int | None:
    """pageIndex of an annotation's position JSON; None when it is not there."""
    try:
        doc = json.loads(position) if isinstance(position, str) else None
    except ValueError:
        return None
    idx = doc.get("pageIndex") if isinstance(doc, dict) else None
    return idx if isinstance(idx, int) and not isinstance(idx, bool) and 0 <= idx < 100_000 else None


_Meta = tuple[dict[int, dict[str, str]], dict[int, list[CreatorRecord]], dict[int, list[str]]]


def _metadata(conn: sqlite3.Connection, ids: Sequence[int], items: dict[int, _Row]) -> _Meta:
    """(field values by base name, creators, tags) of `ids`: every field with a value (a
    bibliography needs them all), named by its base field where the item's type maps one."""
    if not ids:
        return {}, {}, {}
    # Bound as one JSON array: no limit on the number of ids, and nothing spliced into SQL.
    id_list = json.dumps(ids)
    field_names = dict(conn.execute("SELECT fieldID, fieldName FROM fieldsCombined"))
    base_of: dict[tuple[int, int], str] = {}
    for type_id, base_id, field_id in conn.execute("SELECT itemTypeID, baseFieldID, fieldID FROM baseFieldMappingsCombined"):
        if base_id in field_names:
            base_of[(type_id, field_id)] = field_names[base_id]
    values: dict[int, dict[str, str]] = {}
    for item_id, field_id, value in conn.execute(
        "SELECT d.itemID, d.fieldID, v.value FROM itemData d JOIN itemDataValues v ON v.valueID = d.valueID "
        "WHERE d.itemID IN (SELECT value FROM json_each(?))",
        (id_list,),
    ):
        if value is None or str(value) == "":
            continue
        name = base_of.get((items[item_id].type_id, field_id)) or field_names.get(field_id)
        if name:
            values.setdefault(item_id, {})[name] = str(value)
    roles: dict[int, str] = {}
    with contextlib.suppress(sqlite3.OperationalError):  # a stripped database: every creator an author
        roles = dict(conn.execute("SELECT creatorTypeID, creatorType FROM creatorTypes"))
    creators: dict[int, list[CreatorRecord]] = {}
    for item_id, first, last, mode, role in conn.execute(
        "SELECT ic.itemID, c.firstName, c.lastName, c.fieldMode, ic.creatorTypeID FROM itemCreators ic "
        "JOIN creators c ON c.creatorID = ic.creatorID WHERE ic.itemID IN (SELECT value FROM json_each(?)) "
        "ORDER BY ic.itemID, ic.orderIndex",
        (id_list,),
    ):
        single = mode == 1
        rec = CreatorRecord(str(roles.get(role) or "author"), clean_line(last), "" if single else clean_line(first), single)
        if rec.last or rec.first:
            creators.setdefault(item_id, []).append(rec)
    tags: dict[int, list[str]] = {}
    with contextlib.suppress(sqlite3.OperationalError):  # tags are optional to us
        for item_id, name in conn.execute(
            "SELECT it.itemID, t.name FROM itemTags it JOIN tags t ON t.tagID = it.tagID "
            "WHERE it.itemID IN (SELECT value FROM json_each(?))",
            (id_list,),
        ):
            if name:
                tags.setdefault(item_id, []).append(str(name))
    return values, creators, tags


def _full_record(
    item_id: int,
    it: _Row,
    stamp: str,
    member: dict[int, list[str]],
    atts: dict[int, list[AttachmentRecord]],
    meta: _Meta,
    notes: list[NoteRecord],
    annotations: list[AnnotationRecord],
    names: dict[str, str],
) -> ItemRecord:
    values, creators, tags = meta
    v = values.get(item_id, {})
    people = tuple(creators.get(item_id, ()))
    # PDFs first: their text is the paper (zotero-mcp orders the same way).
    item_atts = sorted(atts.get(item_id, ()), key=lambda a: (a.content_type != "application/pdf", a.key))
    title = v.get("title") or (notes[0].title if it.type == "note" and notes else "") or "(untitled)"
    return ItemRecord(
        key=it.key, item_type=it.type, title=title, creators=tuple(display_name(c) for c in people),
        year=year_of(v.get("date")), abstract=v.get("abstractNote", ""), doi=v.get("DOI"), url=v.get("url"),
        collections=tuple(member.get(item_id, ())), tags=tuple(tags.get(item_id, ())), attachments=tuple(item_atts),
        date_modified=it.modified, client_date_modified=it.client_modified, stamp=stamp, date_added=it.added,
        library=it.library, library_name=names.get(it.library, ""), notes=tuple(notes),
        annotations=tuple(sorted(annotations, key=lambda a: (a.attachment_key, a.page_index or 0, a.key))),
        fields=v, names=people,
    )


def _collections(conn: sqlite3.Connection, lib: int, library: str) -> tuple[list[CollectionRecord], dict[int, str]]:
    """Non-trashed collections (a collection under a trashed one counts as trashed)."""
    rows = {
        cid: (key, name, parent)
        for cid, key, name, parent in conn.execute(
            "SELECT collectionID, key, collectionName, parentCollectionID FROM collections WHERE libraryID = ?", (lib,)
        )
        if valid_key(key)
    }
    deleted: set[int] = set()
    with contextlib.suppress(sqlite3.OperationalError):
        deleted = {r[0] for r in conn.execute("SELECT collectionID FROM deletedCollections")}

    def alive(cid: int) -> bool:
        seen: set[int] = set()
        while cid is not None:
            if cid in deleted or cid not in rows or cid in seen:  # seen: a parent cycle in a damaged db
                return False
            seen.add(cid)
            cid = rows[cid][2]
        return True

    keys = {cid: rows[cid][0] for cid in rows if alive(cid)}
    out = [
        CollectionRecord(key=keys[cid], name=str(rows[cid][1] or ""), parent_key=keys.get(rows[cid][2]) if rows[cid][2] else None,
                         library=library)
        for cid in keys
    ]
    return sorted(out, key=lambda c: c.key), keys


def change_stamp(data_dir: Path) -> tuple[object, ...] | None:
    """Cheap "has anything changed?" check: size and mtime of the database and its -wal."""
    out: list[object] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(f"{data_dir / ZOTERO_DB}{suffix}")
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out) if out[0] is not None else None
