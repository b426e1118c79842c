"""What a library source yields: items with their metadata and attachments, and collections.

Both sources (Zotero's local API and `zotero.sqlite`) produce these, so the index does not care
where they came from. Attachment text is not here: it is read on demand (`read_text`), and only
for items whose signature changed since the last refresh.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

from zocratesd.limits import ITEM_KEY_PATTERN, whole

KEY_RE = whole(ITEM_KEY_PATTERN)


_YEAR_RE = re.compile(r"(?<!\d)(\d{4})(?!\d)")


def valid_key(key: object) -> bool:
    return isinstance(key, str) and bool(KEY_RE.match(key))


def year_of(date: str | None) -> int | None:
    """The year of a Zotero date: stored multipart ('2017-00-00 2017') or as typed ('March 2017')."""
    if not date:
        return None
    m = _YEAR_RE.search(date)
    return int(m.group(1)) if m and m.group(1) != "0000" else None


USER_LIBRARY = "user"  # a record's `library`: "user", or "groups/<groupID>" (as in zotero:// links)


def library_path(library: str) -> str:
    """The library part of a zotero:// link: `library` or `groups/<groupID>`."""
    return "library" if library == USER_LIBRARY else library


def item_uid(library: str, key: str) -> str:
    """An item's identity across libraries (keys are unique per library only): the key in the
    user library, `groups/<id>/KEY` in a group."""
    return key if library == USER_LIBRARY else f"{library}/{key}"


@dataclass(frozen=True)
class AnnotationRecord:
    """A highlight, underline or comment on an attachment (`itemAnnotations`)."""

    key: str
    attachment_key: str
    type: str  # highlight | underline | note | text | image | ink
    text: str = ""
    comment: str = ""
    color: str | None = None
    page_label: str | None = None
    page_index: int | None = None  # 0-based, from the position JSON
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class NoteRecord:
    """A note as text (HTML converted), a child of its item or standalone."""

    key: str
    title: str
    text: str


@dataclass(frozen=True)
class AttachmentRecord:
    key: str
    content_type: str | None = None
    link_mode: int | None = None
    modified: str = ""  # dateModified/clientDateModified (or the local API's version)
    cache_stamp: str = ""  # size and mtime of .zotero-ft-cache (or -unprocessed), "" when there is none
    # A PDF's pages Zotero extracted text from, of how many (fulltextItems): Zotero stops at
    # fulltext.pdfMaxPages (100 by default), so a book's cache may hold its first pages only.
    indexed_pages: int | None = None
    total_pages: int | None = None


@dataclass(frozen=True)
class CreatorRecord:
    """A creator as Zotero keeps it: its role (`author`, `editor`, ... as schema.json names creator
    types) and a two-part name, or one field (`single`: an institution, whole in `last`)."""

    creator_type: str
    last: str
    first: str = ""
    single: bool = False

    def as_json(self) -> dict[str, object]:
        return {"type": self.creator_type, "last": self.last, "first": self.first, "single": self.single}


def display_name(c: CreatorRecord) -> str:
    """A creator's name as a citation shows it whole ("Patrick Lewis", "World Health Organization")."""
    return c.last if c.single else " ".join(p for p in (c.first, c.last) if p)


@dataclass(frozen=True)
class ItemRecord:
    key: str
    item_type: str
    title: str
    creators: tuple[str, ...] = ()
    year: int | None = None
    abstract: str = ""
    doi: str | None = None
    url: str | None = None
    collections: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    attachments: tuple[AttachmentRecord, ...] = ()
    date_modified: str = ""
    client_date_modified: str = ""
    stamp: str = ""  # see item_stamp()
    date_added: str = ""  # "YYYY-MM-DD hh:mm:ss" UTC as Zotero stores it (recent items); not in the stamp: it never changes
    library: str = USER_LIBRARY
    library_name: str = ""
    notes: tuple[NoteRecord, ...] = ()
    annotations: tuple[AnnotationRecord, ...] = ()
    # Every field with a value, by its base field's name where the type maps one (a case's
    # `caseName` is `title`), else its own (`reporter`): what a bibliography is made from.
    fields: Mapping[str, str] = field(default_factory=dict)
    names: tuple[CreatorRecord, ...] = ()  # the creators with their roles, in Zotero's order

    @property
    def uid(self) -> str:
        return item_uid(self.library, self.key)


def item_stamp(
    modified: str, client_modified: str, collections: list[str], attachments: list[AttachmentRecord],
    children: Sequence[str] = (),
) -> str:
    """What tells a refresh that an item changed, computed without reading its metadata: Zotero's
    `dateModified` (user edits) and `clientDateModified` (every save, collection and tag changes
    included), its collections, and each attachment's stamps and cache file (Zotero rewrites the
    cache when it re-extracts text, without touching the item)."""
    parts = [modified, client_modified, ",".join(sorted(collections))]
    parts += [f"{a.key}:{a.modified}:{a.cache_stamp}" for a in sorted(attachments, key=lambda a: a.key)]
    parts += sorted(children)  # notes' and annotations' "key:modified" (edited without touching the item)
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class CollectionRecord:
    key: str
    name: str
    parent_key: str | None = None
    library: str = USER_LIBRARY


def library_counts(items: int = 0, notes: int = 0, annotations: int = 0, attachments: int = 0) -> dict[str, int]:
    """A library's contents by Zotero's kinds, each counted once (trash and feeds excluded):
    `items` are regular items only (papers, books, web pages...: what Zotero lists that is not a
    note, an attachment or an annotation); `notes` child and standalone notes; `annotations` PDF
    annotations; `attachments` child and standalone attachments. A snapshot's `stamps`, and the
    status's `items_total`, count records instead: regular items plus standalone notes and
    standalone attachments, each indexed as an item of its own."""
    return {"items": items, "notes": notes, "annotations": annotations, "attachments": attachments}


# Records an ItemRecords reads per query while it is iterated.
RECORDS_PER_READ = 100


class ItemRecords(Sequence[ItemRecord]):
    """The full records of a read's changed items, in order, read from the source a slice at a
    time and only while it is open (the database connection of the read): the indexer needs a
    batch of them at a time, and a large library's records at once are a large share of the
    daemon's memory (bench/PROFILE.md, section 17)."""

    def __init__(self, ids: Sequence[int], read: Callable[[Sequence[int]], list[ItemRecord]]):
        self._ids = list(ids)
        self._read = read

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> ItemRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[ItemRecord]: ...
    def __getitem__(self, index: int | slice) -> ItemRecord | list[ItemRecord]:
        if isinstance(index, slice):
            return self._read(self._ids[index])
        return self._read([self._ids[index]])[0]

    def __iter__(self) -> Iterator[ItemRecord]:
        for start in range(0, len(self._ids), RECORDS_PER_READ):
            yield from self[start:start + RECORDS_PER_READ]


@dataclass
class LibrarySnapshot:
    """One read of the library: every live item's stamp, and full records (no attachment text)
    for the items whose stamp differs from what the index already holds (from the database:
    `ItemRecords`, read while its connection is open)."""

    source: str  # "local_api" | "sqlite" | "snapshot"
    schema_version: int | None
    items: Sequence[ItemRecord] = field(default_factory=list)
    stamps: dict[str, str] = field(default_factory=dict)  # every live item: uid -> stamp
    libraries: dict[str, str] = field(default_factory=dict)  # library -> its name ("My Library", a group's)
    collections: list[CollectionRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # What the read found, by Zotero's kinds (see `library_counts`); `stamps` counts records instead.
    counts: dict[str, int] = field(default_factory=lambda: library_counts())
    # Zotero's libraryID -> `library` ("user", "groups/<id>"): how Better BibTeX's database names
    # libraries. Empty when read through the local API (which reads My Library only).
    library_ids: dict[int, str] = field(default_factory=dict)
