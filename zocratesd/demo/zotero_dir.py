"""Writes a Zotero data directory shaped exactly as Zotero makes it: for the demo library and the
tests' fixtures; it never opens a user's library (it refuses a directory that already has a
`zotero.sqlite`).

What "exactly" means here, each checked against Zotero's own sources (zotero/zotero at the tags
7.0.32, 9.0.6 and 10.0.0; zotero/pdf-worker):

- Item types, fields and creator types get the ids a new database gets, from the facts of
  `schema.json` in `zotero_schema.py`.
- Tables and columns per `userdata` schema version (123 = Zotero 7/8, 125 = 9, 129 = 10), the
  `*Combined` tables as real tables (Zotero fills them from the base tables; they are not views),
  the triggers a reader relies on (no empty creators or tags, child items never in collections,
  collections and their items in one library), and the `version` rows of a real release
  (`system` 32, `triggers` 18, `compatibility`, `globalSchema`).
- Dates as Zotero stores them (`2017-03-00 March 2017`), notes as the note editor writes them
  (`<div data-schema-version="…">`), annotations with their JSON position and sort index.
- `storage/<attachmentKey>/.zotero-ft-cache` as the PDF worker writes it (each page's text
  followed by a blank line, a form feed between pages, the whole trimmed and NFC-normalised), or
  `.zotero-ft-unprocessed` (the JSON Zotero keeps for full text that arrived by sync and is not
  processed yet, with `fulltextItems.synced = 2`).

The description is plain data (`Library` of `Item`, `Note`, `Attachment`, `Annotation`,
`Collection`, `Group`, `Feed`); `write(data_dir, library, version=...)` writes it in one
transaction, checks foreign keys, and leaves a Zotero 10 database in WAL mode, checkpointed, as a
Zotero that quit cleanly leaves it.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape, unescape
from pathlib import Path
from typing import Final

from zocratesd.limits import ITEM_KEY_RE
from zocratesd.zotero_schema import (
    BASE_FIELDS,
    BASE_OF,
    CREATOR_TYPE_IDS,
    FIELD_IDS,
    ITEM_TYPE_IDS,
    NON_REGULAR_TYPES,
    TYPE_CREATOR_TYPES,
    TYPE_FIELDS,
)

ZOTERO_DB = "zotero.sqlite"
CACHE_NAME = ".zotero-ft-cache"
UNPROCESSED_NAME = ".zotero-ft-unprocessed"
# `userdata` schema versions of the releases we write (zotero_ops.md 1.2).
ZOTERO_7: Final = 123
ZOTERO_9: Final = 125
ZOTERO_10: Final = 129
VERSIONS: Final = (ZOTERO_7, ZOTERO_9, ZOTERO_10)
# The other `version` rows a new database of that release has: system.sql and triggers.sql carry
# 32 and 18 in all three; `compatibility` is schema.js's _maxCompatibility; `globalSchema` is the
# bundled schema.json's version.
SYSTEM_SCHEMA: Final = 32
TRIGGERS_SCHEMA: Final = 18
COMPATIBILITY: Final = {ZOTERO_7: 7, ZOTERO_9: 7, ZOTERO_10: 9}
GLOBAL_SCHEMA: Final = {ZOTERO_7: 40, ZOTERO_9: 41, ZOTERO_10: 41}
# Custom item types and fields are numbered from here in the *Combined tables (cachedTypes.js).
CUSTOM_ID_OFFSET: Final = 10000
USER_LIBRARY_ID: Final = 1
# itemAttachments.linkMode and itemAnnotations.type, as Zotero numbers them.
LINK_MODES: Final = {"imported_file": 0, "imported_url": 1, "linked_file": 2, "linked_url": 3, "embedded_image": 4}
ANNOTATION_TYPES: Final = {"highlight": 1, "note": 2, "image": 3, "ink": 4, "underline": 5, "text": 6}
# fulltextItems.synced (fulltext.js SYNC_STATE_*): 0 unsynced, 1 in sync, 2 to process (an
# `.zotero-ft-unprocessed` file waits), 3 to download, 4 missing.
FT_UNSYNCED: Final = 0
FT_TO_PROCESS: Final = 2
# The note editor's schema version in the `data-schema-version` attribute of a note's outer div.
NOTE_SCHEMA_VERSION: Final = 9
DEFAULT_DATE: Final = "2024-01-01 00:00:00"


class WriterError(ValueError):
    """The description is not a library Zotero could have (an unknown field, a duplicate key...)."""


# --- the description -------------------------------------------------------------------------


@dataclass(frozen=True)
class Creator:
    """A name as Zotero keeps it: two fields, or one (`single_field`: an institution, whose whole
    name is in `last`; fieldMode 1)."""

    last: str
    first: str = ""
    creator_type: str = "author"
    single_field: bool = False

    @classmethod
    def of(cls, value: Creator | str | tuple[str, str]) -> Creator:
        """A Creator from "Single Field Name" or (first, last)."""
        if isinstance(value, Creator):
            return value
        if isinstance(value, str):
            return cls(last=value, single_field=True)
        return cls(last=value[1], first=value[0])


@dataclass
class Annotation:
    """A PDF annotation (`itemAnnotations`): a highlight's or underline's `text`, the user's
    `comment`, the page the reader shows (`page_label`) and where it is (`page_index`, 0-based)."""

    key: str
    type: str = "highlight"
    text: str = ""
    comment: str = ""
    color: str = "#ffd400"
    page_label: str | None = None
    page_index: int = 0
    rects: Sequence[Sequence[float]] = ((72.0, 600.0, 520.0, 614.0),)
    tags: Sequence[str] = ()
    author_name: str | None = None
    date_modified: str = DEFAULT_DATE


@dataclass(kw_only=True)
class _ChildOrStandalone:
    """What a note and an attachment both have, each either a regular item's child or standalone:
    its tags, collections (standalone ones only: Zotero's trigger refuses a child's), the trash."""

    tags: Sequence[str] = ()
    collections: Sequence[str] = ()
    trashed: bool = False
    date_modified: str = DEFAULT_DATE


@dataclass
class Note(_ChildOrStandalone):
    """A note (`itemNotes`). `html` is stored as given when it is already the note editor's
    `<div data-schema-version=...>`; other text is wrapped in one (paragraphs at blank lines)."""

    key: str
    html: str


@dataclass
class Attachment(_ChildOrStandalone):
    """A file or link (`itemAttachments`) with, optionally, the text Zotero extracted from it.

    Text comes in one of three ways: `pages` (a PDF's, written as the PDF worker writes it),
    `text` (an HTML snapshot's or EPUB's, written as is), or `cache_bytes` (exact bytes, for
    malformed-input tests). `unprocessed` writes it to `.zotero-ft-unprocessed` instead, as a
    full-text sync leaves it before Zotero processes it."""

    key: str
    title: str = "Full Text PDF"
    content_type: str = "application/pdf"
    link_mode: str = "imported_file"
    filename: str = "paper.pdf"
    path: str | None = None  # linked files: the absolute or `attachments:` path (else storage:filename)
    url: str | None = None  # imported_url / linked_url
    pages: Sequence[str] | None = None
    text: str | None = None
    cache_bytes: bytes | None = None
    unprocessed: bool = False
    annotations: Sequence[Annotation] = ()
    # The file itself, written to storage/<key>/<filename> for a stored file (`pdf_file` makes a
    # PDF with page labels); None: no file, as after a sync that skipped files.
    file_bytes: bytes | None = None
    # The PDF's pages as Zotero counted them (fulltextItems.totalPages) when more than `pages`:
    # Zotero extracts the first fulltext.pdfMaxPages (100) only. None: all of them.
    total_pages: int | None = None


@dataclass
class Item:
    """A regular item. `title` and `date` go to the type's own fields when it maps them (a case's
    `caseName`, `dateDecided`); `fields` holds any other field of the type by its schema name
    (`abstractNote`, `DOI`, `url`, `publicationTitle`, ...). `date` is as typed ("March 2017")."""

    key: str
    title: str
    item_type: str = "journalArticle"
    creators: Sequence[Creator | str | tuple[str, str]] = ()
    date: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    tags: Sequence[str] = ()
    collections: Sequence[str] = ()
    attachments: Sequence[Attachment] = ()
    notes: Sequence[Note] = ()
    trashed: bool = False
    date_added: str = "2023-06-01 10:00:00"
    date_modified: str = DEFAULT_DATE
    client_date_modified: str | None = None  # defaults to date_modified


@dataclass
class Collection:
    key: str
    name: str
    parent: str | None = None
    trashed: bool = False


@dataclass
class Group:
    """A group library (`libraries.type = 'group'` and a `groups` row)."""

    group_id: int
    name: str
    items: Sequence[Item] = ()
    collections: Sequence[Collection] = ()
    notes: Sequence[Note] = ()
    attachments: Sequence[Attachment] = ()
    description: str = ""


@dataclass
class Feed:
    """A feed (`libraries.type = 'feed'`): its items are the feed's, never the user's."""

    name: str
    url: str
    items: Sequence[Item] = ()


@dataclass
class Library:
    """Everything in one data directory: the user library (items, collections, standalone notes
    and attachments), group libraries, and feeds."""

    items: Sequence[Item] = ()
    collections: Sequence[Collection] = ()
    notes: Sequence[Note] = ()
    attachments: Sequence[Attachment] = ()
    groups: Sequence[Group] = ()
    feeds: Sequence[Feed] = ()


# --- how Zotero stores values ----------------------------------------------------------------

_MONTHS = {m: n for n, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_ISO_RE = re.compile(r"^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?\b")
_YEAR_RE = re.compile(r"(?<!\d)(\d{4})(?!\d)")
_DAY_RE = re.compile(r"(?<![\d:])(\d{1,2})(?:st|nd|rd|th)?(?![\d:])")


def multipart_date(date: str) -> str:
    """Zotero's stored form of a date as typed: 'YYYY-MM-DD original', unknown parts 00
    (Zotero.Date.strToDate + multipartToSQL: "March 2017" -> "2017-03-00 March 2017")."""
    m = _ISO_RE.match(date)
    if m:
        y, mo, d = m.group(1), int(m.group(2) or 0), int(m.group(3) or 0)
        return f"{y}-{mo:02d}-{d:02d} {date}"
    y_m = _YEAR_RE.search(date)
    year = y_m.group(1) if y_m else "0000"
    month = 0
    for word in re.findall(r"[A-Za-z]+", date):
        month = _MONTHS.get(word[:3].lower(), 0)
        if month:
            break
    day = 0
    if month:
        rest = date.replace(year, " ") if y_m else date
        d_m = _DAY_RE.search(rest)
        day = int(d_m.group(1)) if d_m and 1 <= int(d_m.group(1)) <= 31 else 0
    return f"{year}-{month:02d}-{day:02d} {date}"


def normalized(text: str) -> str:
    """Zotero 10's `*Normalized` columns: case and diacritics folded, for accent-blind search."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def pdf_worker_text(pages: Sequence[str]) -> str:
    """A PDF's full text as Zotero's PDF worker returns it and Zotero writes to the cache: each
    page's text followed by a blank line, a form feed between pages, trimmed, NFC."""
    out: list[str] = []
    for n, page in enumerate(pages):
        out.append(page)
        out.append("\n\n")
        if n != len(pages) - 1:
            out.append("\f")
    return unicodedata.normalize("NFC", "".join(out).strip())


_TAG_RE = re.compile(r"<[^>]+>")


def note_html(text: str) -> str:
    """The note editor's HTML for `text` (kept as is if it already is)."""
    if text.lstrip().startswith("<div data-schema-version"):
        return text
    if text.lstrip().startswith("<"):
        body = text
    else:
        body = "".join(f"<p>{escape(p.strip())}</p>" for p in re.split(r"\n\s*\n", text) if p.strip())
    return f'<div data-schema-version="{NOTE_SCHEMA_VERSION}">{body}</div>'


def note_title(html: str) -> str:
    """A note's title as Zotero derives it: the text of its first line (noteToTitle)."""
    text = re.sub(r"</(p|h[1-6]|li|div|blockquote|pre)>|<br\s*/?>", "\n", html)
    text = unescape(_TAG_RE.sub("", text))
    for line in text.split("\n"):
        if line.strip():
            return line.strip()[:120]
    return ""


def sort_index(page_index: int, offset: int, top: float) -> str:
    """A PDF annotation's sortIndex: page index, character offset and distance from the top."""
    return f"{page_index:05d}|{offset:06d}|{int(top):05d}"


# --- tables (userdata.sql, system.sql, triggers.sql of each release, in our own words) ---------


def _ddl(version: int) -> list[str]:
    """CREATE statements for a database of `version`: every table a new database has (with the
    columns of that release), the indexes the reader's queries touch, and the triggers."""
    v9, v10 = version >= ZOTERO_9, version >= ZOTERO_10
    cv = "clientVersion INT NOT NULL DEFAULT 0, " if v10 else ""
    fk_lib = "FOREIGN KEY (libraryID) REFERENCES libraries(libraryID) ON DELETE CASCADE"
    fk_item = "FOREIGN KEY (itemID) REFERENCES items(itemID) ON DELETE CASCADE"
    t = [
        # system.sql
        "CREATE TABLE fieldFormats (fieldFormatID INTEGER PRIMARY KEY, regex TEXT, isInteger INT)",
        "CREATE TABLE charsets (charsetID INTEGER PRIMARY KEY, charset TEXT UNIQUE)",
        "CREATE INDEX charsets_charset ON charsets(charset)",
        "CREATE TABLE fileTypes (fileTypeID INTEGER PRIMARY KEY, fileType TEXT UNIQUE)",
        "CREATE INDEX fileTypes_fileType ON fileTypes(fileType)",
        "CREATE TABLE fileTypeMimeTypes (fileTypeID INT, mimeType TEXT, PRIMARY KEY (fileTypeID, mimeType), "
        "FOREIGN KEY (fileTypeID) REFERENCES fileTypes(fileTypeID))",
        "CREATE INDEX fileTypeMimeTypes_mimeType ON fileTypeMimeTypes(mimeType)",
        "CREATE TABLE syncObjectTypes (syncObjectTypeID INTEGER PRIMARY KEY, name TEXT)",
        "CREATE INDEX syncObjectTypes_name ON syncObjectTypes(name)",
        # userdata.sql: the type system, base and combined
        "CREATE TABLE itemTypes (itemTypeID INTEGER PRIMARY KEY, typeName TEXT, templateItemTypeID INT, display INT DEFAULT 1)",
        "CREATE TABLE itemTypesCombined (itemTypeID INT NOT NULL, typeName TEXT NOT NULL, display INT DEFAULT 1 NOT NULL, "
        "custom INT NOT NULL, PRIMARY KEY (itemTypeID))",
        "CREATE TABLE fields (fieldID INTEGER PRIMARY KEY, fieldName TEXT, fieldFormatID INT, "
        "FOREIGN KEY (fieldFormatID) REFERENCES fieldFormats(fieldFormatID))",
        "CREATE TABLE fieldsCombined (fieldID INT NOT NULL, fieldName TEXT NOT NULL, label TEXT, fieldFormatID INT, "
        "custom INT NOT NULL, PRIMARY KEY (fieldID))",
        "CREATE TABLE itemTypeFields (itemTypeID INT, fieldID INT, hide INT, orderIndex INT, PRIMARY KEY (itemTypeID, orderIndex), "
        "UNIQUE (itemTypeID, fieldID), FOREIGN KEY (itemTypeID) REFERENCES itemTypes(itemTypeID), "
        "FOREIGN KEY (fieldID) REFERENCES fields(fieldID))",
        "CREATE INDEX itemTypeFields_fieldID ON itemTypeFields(fieldID)",
        "CREATE TABLE itemTypeFieldsCombined (itemTypeID INT NOT NULL, fieldID INT NOT NULL, hide INT, orderIndex INT NOT NULL, "
        "PRIMARY KEY (itemTypeID, orderIndex), UNIQUE (itemTypeID, fieldID))",
        "CREATE INDEX itemTypeFieldsCombined_fieldID ON itemTypeFieldsCombined(fieldID)",
        "CREATE TABLE baseFieldMappings (itemTypeID INT, baseFieldID INT, fieldID INT, PRIMARY KEY (itemTypeID, baseFieldID, fieldID), "
        "FOREIGN KEY (itemTypeID) REFERENCES itemTypes(itemTypeID), FOREIGN KEY (baseFieldID) REFERENCES fields(fieldID), "
        "FOREIGN KEY (fieldID) REFERENCES fields(fieldID))",
        "CREATE INDEX baseFieldMappings_baseFieldID ON baseFieldMappings(baseFieldID)",
        "CREATE INDEX baseFieldMappings_fieldID ON baseFieldMappings(fieldID)",
        "CREATE TABLE baseFieldMappingsCombined (itemTypeID INT, baseFieldID INT, fieldID INT, "
        "PRIMARY KEY (itemTypeID, baseFieldID, fieldID))",
        "CREATE INDEX baseFieldMappingsCombined_baseFieldID ON baseFieldMappingsCombined(baseFieldID)",
        "CREATE INDEX baseFieldMappingsCombined_fieldID ON baseFieldMappingsCombined(fieldID)",
        "CREATE TABLE creatorTypes (creatorTypeID INTEGER PRIMARY KEY, creatorType TEXT)",
        "CREATE TABLE itemTypeCreatorTypes (itemTypeID INT, creatorTypeID INT, primaryField INT, PRIMARY KEY (itemTypeID, creatorTypeID), "
        "FOREIGN KEY (itemTypeID) REFERENCES itemTypes(itemTypeID), FOREIGN KEY (creatorTypeID) REFERENCES creatorTypes(creatorTypeID))",
        "CREATE INDEX itemTypeCreatorTypes_creatorTypeID ON itemTypeCreatorTypes(creatorTypeID)",
        # userdata.sql: the data
        "CREATE TABLE version (schema TEXT PRIMARY KEY, version INT NOT NULL)",
        "CREATE INDEX schema ON version(schema)",
        "CREATE TABLE settings (setting TEXT, key TEXT, value, PRIMARY KEY (setting, key))",
        f"CREATE TABLE syncedSettings (setting TEXT NOT NULL, libraryID INT NOT NULL, value NOT NULL, version INT NOT NULL DEFAULT 0, "
        f"synced INT NOT NULL DEFAULT 0, PRIMARY KEY (setting, libraryID), {fk_lib})",
        "CREATE TABLE items (itemID INTEGER PRIMARY KEY, itemTypeID INT NOT NULL, dateAdded TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        "dateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, clientDateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        f"libraryID INT NOT NULL, key TEXT NOT NULL, version INT NOT NULL DEFAULT 0, {cv}synced INT NOT NULL DEFAULT 0, "
        f"UNIQUE (libraryID, key), {fk_lib})",
        "CREATE INDEX items_synced ON items(synced)",
        "CREATE TABLE itemDataValues (valueID INTEGER PRIMARY KEY, value UNIQUE" + (", valueNormalized TEXT" if v10 else "") + ")",
        f"CREATE TABLE itemData (itemID INT, fieldID INT, valueID, PRIMARY KEY (itemID, fieldID), {fk_item}, "
        "FOREIGN KEY (fieldID) REFERENCES fieldsCombined(fieldID), FOREIGN KEY (valueID) REFERENCES itemDataValues(valueID))",
        "CREATE INDEX itemData_fieldID ON itemData(fieldID)",
        *(["CREATE INDEX itemData_valueID ON itemData(valueID)"] if v10 else []),
        f"CREATE TABLE itemNotes (itemID INTEGER PRIMARY KEY, parentItemID INT, note TEXT, title TEXT, {fk_item}, "
        "FOREIGN KEY (parentItemID) REFERENCES items(itemID) ON DELETE CASCADE)",
        "CREATE INDEX itemNotes_parentItemID ON itemNotes(parentItemID)",
        "CREATE TABLE itemAttachments (itemID INTEGER PRIMARY KEY, parentItemID INT, linkMode INT, contentType TEXT, charsetID INT, "
        "path TEXT, syncState INT DEFAULT 0, storageModTime INT, storageHash TEXT, lastProcessedModificationTime INT, "
        + ("lastRead INT, " if v9 else "")
        + f"{fk_item}, FOREIGN KEY (parentItemID) REFERENCES items(itemID) ON DELETE CASCADE, "
        "FOREIGN KEY (charsetID) REFERENCES charsets(charsetID) ON DELETE SET NULL)",
        "CREATE INDEX itemAttachments_parentItemID ON itemAttachments(parentItemID)",
        "CREATE INDEX itemAttachments_charsetID ON itemAttachments(charsetID)",
        "CREATE INDEX itemAttachments_contentType ON itemAttachments(contentType)",
        "CREATE INDEX itemAttachments_syncState ON itemAttachments(syncState)",
        "CREATE INDEX itemAttachments_lastProcessedModificationTime ON itemAttachments(lastProcessedModificationTime)",
        *(["CREATE INDEX itemAttachments_lastRead ON itemAttachments(lastRead)"] if v9 else []),
        "CREATE TABLE itemAnnotations (itemID INTEGER PRIMARY KEY, parentItemID INT NOT NULL, type INTEGER NOT NULL, authorName TEXT, "
        + ("text TEXT, textNormalized TEXT, comment TEXT, commentNormalized TEXT, " if v10 else "text TEXT, comment TEXT, ")
        + f"color TEXT, pageLabel TEXT, sortIndex TEXT NOT NULL, position TEXT NOT NULL, isExternal INT NOT NULL, {fk_item}, "
        "FOREIGN KEY (parentItemID) REFERENCES itemAttachments(itemID))",
        "CREATE INDEX itemAnnotations_parentItemID ON itemAnnotations(parentItemID)",
        "CREATE TABLE tags (tagID INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE" + (", nameNormalized TEXT" if v10 else "") + ")",
        "CREATE TABLE relationPredicates (predicateID INTEGER PRIMARY KEY, predicate TEXT UNIQUE)",
        f"CREATE TABLE itemRelations (itemID INT NOT NULL, predicateID INT NOT NULL, object TEXT NOT NULL, "
        f"PRIMARY KEY (itemID, predicateID, object), {fk_item}, "
        "FOREIGN KEY (predicateID) REFERENCES relationPredicates(predicateID) ON DELETE CASCADE)",
        "CREATE INDEX itemRelations_predicateID ON itemRelations(predicateID)",
        "CREATE INDEX itemRelations_object ON itemRelations(object)",
        f"CREATE TABLE itemTags (itemID INT NOT NULL, tagID INT NOT NULL, type INT NOT NULL, PRIMARY KEY (itemID, tagID), {fk_item}, "
        "FOREIGN KEY (tagID) REFERENCES tags(tagID) ON DELETE CASCADE)",
        "CREATE INDEX itemTags_tagID ON itemTags(tagID)",
        "CREATE TABLE creators (creatorID INTEGER PRIMARY KEY, firstName TEXT, lastName TEXT, fieldMode INT, "
        + ("firstNameNormalized TEXT, lastNameNormalized TEXT, " if v10 else "") + "UNIQUE (lastName, firstName, fieldMode))",
        "CREATE TABLE itemCreators (itemID INT NOT NULL, creatorID INT NOT NULL, creatorTypeID INT NOT NULL DEFAULT 1, "
        "orderIndex INT NOT NULL DEFAULT 0, PRIMARY KEY (itemID, creatorID, creatorTypeID, orderIndex), UNIQUE (itemID, orderIndex), "
        f"{fk_item}, FOREIGN KEY (creatorID) REFERENCES creators(creatorID) ON DELETE CASCADE, "
        "FOREIGN KEY (creatorTypeID) REFERENCES creatorTypes(creatorTypeID))",
        "CREATE INDEX itemCreators_creatorTypeID ON itemCreators(creatorTypeID)",
        "CREATE TABLE collections (collectionID INTEGER PRIMARY KEY, collectionName TEXT NOT NULL, parentCollectionID INT DEFAULT NULL, "
        "clientDateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, libraryID INT NOT NULL, key TEXT NOT NULL, "
        f"version INT NOT NULL DEFAULT 0, {cv}synced INT NOT NULL DEFAULT 0, UNIQUE (libraryID, key), {fk_lib}, "
        "FOREIGN KEY (parentCollectionID) REFERENCES collections(collectionID) ON DELETE CASCADE)",
        "CREATE INDEX collections_synced ON collections(synced)",
        "CREATE TABLE collectionItems (collectionID INT NOT NULL, itemID INT NOT NULL, orderIndex INT NOT NULL DEFAULT 0, "
        "PRIMARY KEY (collectionID, itemID), FOREIGN KEY (collectionID) REFERENCES collections(collectionID) ON DELETE CASCADE, "
        f"{fk_item})",
        "CREATE INDEX collectionItems_itemID ON collectionItems(itemID)",
        "CREATE TABLE collectionRelations (collectionID INT NOT NULL, predicateID INT NOT NULL, object TEXT NOT NULL, "
        "PRIMARY KEY (collectionID, predicateID, object), "
        "FOREIGN KEY (collectionID) REFERENCES collections(collectionID) ON DELETE CASCADE, "
        "FOREIGN KEY (predicateID) REFERENCES relationPredicates(predicateID) ON DELETE CASCADE)",
        "CREATE INDEX collectionRelations_predicateID ON collectionRelations(predicateID)",
        "CREATE INDEX collectionRelations_object ON collectionRelations(object)",
        "CREATE TABLE feeds (libraryID INTEGER PRIMARY KEY, name TEXT NOT NULL, url TEXT NOT NULL UNIQUE, lastUpdate TIMESTAMP, "
        "lastCheck TIMESTAMP, lastCheckError TEXT, cleanupReadAfter INT, cleanupUnreadAfter INT, refreshInterval INT, "
        f"{fk_lib})",
        "CREATE TABLE feedItems (itemID INTEGER PRIMARY KEY, guid TEXT NOT NULL UNIQUE, readTime TIMESTAMP, translatedTime TIMESTAMP, "
        f"{fk_item})",
        "CREATE TABLE savedSearches (savedSearchID INTEGER PRIMARY KEY, savedSearchName TEXT NOT NULL, "
        "clientDateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, libraryID INT NOT NULL, key TEXT NOT NULL, "
        f"version INT NOT NULL DEFAULT 0, {cv}synced INT NOT NULL DEFAULT 0, UNIQUE (libraryID, key), {fk_lib})",
        "CREATE INDEX savedSearches_synced ON savedSearches(synced)",
        "CREATE TABLE savedSearchConditions (savedSearchID INT NOT NULL, searchConditionID INT NOT NULL, condition TEXT NOT NULL, "
        "operator TEXT, value TEXT, " + ("" if v10 else "required NONE, ")
        + "PRIMARY KEY (savedSearchID, searchConditionID), "
        "FOREIGN KEY (savedSearchID) REFERENCES savedSearches(savedSearchID) ON DELETE CASCADE)",
        "CREATE TABLE deletedCollections (collectionID INTEGER PRIMARY KEY, dateDeleted DEFAULT CURRENT_TIMESTAMP NOT NULL, "
        "FOREIGN KEY (collectionID) REFERENCES collections(collectionID) ON DELETE CASCADE)",
        "CREATE INDEX deletedCollections_dateDeleted ON deletedCollections(dateDeleted)",
        f"CREATE TABLE deletedItems (itemID INTEGER PRIMARY KEY, dateDeleted DEFAULT CURRENT_TIMESTAMP NOT NULL, {fk_item})",
        "CREATE INDEX deletedItems_dateDeleted ON deletedItems(dateDeleted)",
        "CREATE TABLE deletedSearches (savedSearchID INTEGER PRIMARY KEY, dateDeleted DEFAULT CURRENT_TIMESTAMP NOT NULL, "
        "FOREIGN KEY (savedSearchID) REFERENCES savedSearches(savedSearchID) ON DELETE CASCADE)",
        "CREATE TABLE libraries (libraryID INTEGER PRIMARY KEY, type TEXT NOT NULL, editable INT NOT NULL, filesEditable INT NOT NULL, "
        f"version INT NOT NULL DEFAULT 0, {cv}storageVersion INT NOT NULL DEFAULT 0, lastSync INT NOT NULL DEFAULT 0, "
        "archived INT NOT NULL DEFAULT 0" + (", isAdmin INT NOT NULL DEFAULT 0" if v9 else "") + ")",
        "CREATE TABLE users (userID INTEGER PRIMARY KEY, name TEXT NOT NULL)",
        "CREATE TABLE groups (groupID INTEGER PRIMARY KEY, libraryID INT NOT NULL UNIQUE, name TEXT NOT NULL, description TEXT NOT NULL, "
        f"version INT NOT NULL, {fk_lib})",
        f"CREATE TABLE groupItems (itemID INTEGER PRIMARY KEY, createdByUserID INT, lastModifiedByUserID INT, {fk_item}, "
        "FOREIGN KEY (createdByUserID) REFERENCES users(userID) ON DELETE SET NULL, "
        "FOREIGN KEY (lastModifiedByUserID) REFERENCES users(userID) ON DELETE SET NULL)",
        "CREATE TABLE publicationsItems (itemID INTEGER PRIMARY KEY)",
        f"CREATE TABLE retractedItems (itemID INTEGER PRIMARY KEY, data TEXT, flag INT DEFAULT 0, {fk_item})",
        "CREATE TABLE fulltextItems (itemID INTEGER PRIMARY KEY, indexedPages INT, totalPages INT, indexedChars INT, totalChars INT, "
        f"version INT NOT NULL DEFAULT 0, synced INT NOT NULL DEFAULT 0, {fk_item})",
        "CREATE INDEX fulltextItems_synced ON fulltextItems(synced)",
        "CREATE INDEX fulltextItems_version ON fulltextItems(version)",
    ]
    if not v10:  # Zotero 10 moved the word index to fulltext.sqlite (FTS5)
        t += [
            "CREATE TABLE fulltextWords (wordID INTEGER PRIMARY KEY, word TEXT UNIQUE)",
            "CREATE TABLE fulltextItemWords (wordID INT, itemID INT, PRIMARY KEY (wordID, itemID), "
            f"FOREIGN KEY (wordID) REFERENCES fulltextWords(wordID), {fk_item})",
            "CREATE INDEX fulltextItemWords_itemID ON fulltextItemWords(itemID)",
        ]
    t += [
        "CREATE TABLE syncCache (libraryID INT NOT NULL, key TEXT NOT NULL, syncObjectTypeID INT NOT NULL, version INT NOT NULL, "
        f"data TEXT, PRIMARY KEY (libraryID, key, syncObjectTypeID, version), {fk_lib}, "
        "FOREIGN KEY (syncObjectTypeID) REFERENCES syncObjectTypes(syncObjectTypeID))",
        "CREATE TABLE syncDeleteLog (syncObjectTypeID INT NOT NULL, libraryID INT NOT NULL, key TEXT NOT NULL, "
        "dateDeleted TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, UNIQUE (syncObjectTypeID, libraryID, key), "
        f"FOREIGN KEY (syncObjectTypeID) REFERENCES syncObjectTypes(syncObjectTypeID), {fk_lib})",
        "CREATE TABLE syncQueue (libraryID INT NOT NULL, key TEXT NOT NULL, syncObjectTypeID INT NOT NULL, lastCheck TIMESTAMP, tries INT, "
        f"PRIMARY KEY (libraryID, key, syncObjectTypeID), {fk_lib}, "
        "FOREIGN KEY (syncObjectTypeID) REFERENCES syncObjectTypes(syncObjectTypeID) ON DELETE CASCADE)",
        "CREATE TABLE storageDeleteLog (libraryID INT NOT NULL, key TEXT NOT NULL, dateDeleted TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        f"PRIMARY KEY (libraryID, key), {fk_lib})",
        "CREATE TABLE proxies (proxyID INTEGER PRIMARY KEY, multiHost INT, autoAssociate INT, scheme TEXT)",
        "CREATE TABLE proxyHosts (hostID INTEGER PRIMARY KEY, proxyID INTEGER, hostname TEXT, "
        "FOREIGN KEY (proxyID) REFERENCES proxies(proxyID))",
        "CREATE INDEX proxyHosts_proxyID ON proxyHosts(proxyID)",
        "CREATE TABLE customItemTypes (customItemTypeID INTEGER PRIMARY KEY, typeName TEXT, label TEXT, display INT DEFAULT 1, icon TEXT)",
        "CREATE TABLE customFields (customFieldID INTEGER PRIMARY KEY, fieldName TEXT, label TEXT)",
        "CREATE TABLE customItemTypeFields (customItemTypeID INT NOT NULL, fieldID INT, customFieldID INT, hide INT NOT NULL, "
        "orderIndex INT NOT NULL, PRIMARY KEY (customItemTypeID, orderIndex), "
        "FOREIGN KEY (customItemTypeID) REFERENCES customItemTypes(customItemTypeID), FOREIGN KEY (fieldID) REFERENCES fields(fieldID), "
        "FOREIGN KEY (customFieldID) REFERENCES customFields(customFieldID))",
        "CREATE TABLE customBaseFieldMappings (customItemTypeID INT, baseFieldID INT, customFieldID INT, "
        "PRIMARY KEY (customItemTypeID, baseFieldID, customFieldID), "
        "FOREIGN KEY (customItemTypeID) REFERENCES customItemTypes(customItemTypeID), "
        "FOREIGN KEY (baseFieldID) REFERENCES fields(fieldID), FOREIGN KEY (customFieldID) REFERENCES customFields(customFieldID))",
        "CREATE TABLE translatorCache (fileName TEXT PRIMARY KEY, metadataJSON TEXT, lastModifiedTime INT)",
        "CREATE TABLE dbDebug1 (a INTEGER PRIMARY KEY)",
    ]
    return t + _TRIGGERS


def _raise_if(table: str, name: str, when: str, op: str = "INSERT") -> str:
    verb = op.split()[0].lower()
    return (f"CREATE TRIGGER {name} BEFORE {op} ON {table} FOR EACH ROW BEGIN "
            f"SELECT RAISE(ABORT, '{verb} on table \"{table}\" violates foreign key constraint \"{name}\"') WHERE {when}; END")


_CHILD_ITEMS = ("SELECT itemID FROM itemAttachments WHERE parentItemID IS NOT NULL "
                "UNION SELECT itemID FROM itemNotes WHERE parentItemID IS NOT NULL")
_SAME_LIBRARY_PARENT = ("NEW.parentCollectionID IS NOT NULL AND "
                        "NEW.libraryID != (SELECT libraryID FROM collections WHERE collectionID = NEW.parentCollectionID)")
_SAME_LIBRARY_ITEM = ("(SELECT libraryID FROM collections WHERE collectionID = NEW.collectionID) != "
                      "(SELECT libraryID FROM items WHERE itemID = NEW.itemID)")
# triggers.sql (version 18): the rules Zotero's database enforces itself.
_TRIGGERS = [
    "CREATE TRIGGER insert_creators BEFORE INSERT ON creators FOR EACH ROW WHEN NEW.firstName='' AND NEW.lastName='' "
    "BEGIN SELECT RAISE (ABORT, 'Creator names cannot be empty'); END",
    "CREATE TRIGGER update_creators BEFORE UPDATE ON creators FOR EACH ROW WHEN NEW.firstName='' AND NEW.lastName='' "
    "BEGIN SELECT RAISE (ABORT, 'Creator names cannot be empty'); END",
    _raise_if("collections", "fki_collections_parentCollectionID_libraryID", _SAME_LIBRARY_PARENT),
    _raise_if("collections", "fku_collections_parentCollectionID_libraryID", _SAME_LIBRARY_PARENT, "UPDATE"),
    _raise_if("collectionItems", "fki_collectionItems_libraryID", _SAME_LIBRARY_ITEM),
    _raise_if("collectionItems", "fku_collectionItems_libraryID", _SAME_LIBRARY_ITEM, "UPDATE"),
    _raise_if("collectionItems", "fki_collectionItems_itemID_parentItemID", f"NEW.itemID IN ({_CHILD_ITEMS})"),
    _raise_if("collectionItems", "fku_collectionItems_itemID_parentItemID", f"NEW.itemID IN ({_CHILD_ITEMS})", "UPDATE OF itemID"),
    "CREATE TRIGGER fku_itemAttachments_parentItemID_collectionItems_itemID BEFORE UPDATE OF parentItemID ON itemAttachments "
    "FOR EACH ROW WHEN OLD.parentItemID IS NULL AND NEW.parentItemID IS NOT NULL "
    "BEGIN DELETE FROM collectionItems WHERE itemID = NEW.itemID; END",
    "CREATE TRIGGER fku_itemNotes_parentItemID_collectionItems_itemID BEFORE UPDATE OF parentItemID ON itemNotes "
    "FOR EACH ROW WHEN OLD.parentItemID IS NULL AND NEW.parentItemID IS NOT NULL "
    "BEGIN DELETE FROM collectionItems WHERE itemID = NEW.itemID; END",
    "CREATE TRIGGER fki_tags BEFORE INSERT ON tags FOR EACH ROW BEGIN SELECT RAISE(ABORT, 'Tag cannot be blank') "
    "WHERE TRIM(NEW.name)=''; END",
    "CREATE TRIGGER fku_tags BEFORE UPDATE OF name ON tags FOR EACH ROW BEGIN SELECT RAISE(ABORT, 'Tag cannot be blank') "
    "WHERE TRIM(NEW.name)=''; END",
]


# --- writing ---------------------------------------------------------------------------------

# Rows are inserted table by table in this order (parents before the rows that point at them).
_TABLE_ORDER = (
    "libraries", "groups", "feeds", "collections", "deletedCollections", "items", "groupItems", "feedItems",
    "itemDataValues", "itemData", "creators", "itemCreators", "tags", "itemTags", "itemAttachments",
    "itemNotes", "itemAnnotations", "collectionItems", "deletedItems", "fulltextItems",
)
# Zotero makes keys from KEY_ALPHABET (no 0, 1 or O); we accept any 8 of A-Z0-9, as the reader and
# the protocol do, so fixtures can carry readable keys ("LEWIS202").
KEY_ALPHABET: Final = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"


def new_key(rng: random.Random) -> str:
    """A key as Zotero makes one (Zotero.DataObjectUtilities.generateKey)."""
    return "".join(rng.choice(KEY_ALPHABET) for _ in range(8))


def write(data_dir: Path, library: Library, *, version: int = ZOTERO_7) -> Path:
    """Write `data_dir/zotero.sqlite` and `data_dir/storage/` for `library`; returns the database's
    path. Refuses a directory that already holds a Zotero database (this never touches one)."""
    if version not in VERSIONS:
        raise WriterError(f"userdata schema version {version} is not one we write ({', '.join(map(str, VERSIONS))})")
    data_dir.mkdir(parents=True, exist_ok=True)
    db_path = data_dir / ZOTERO_DB
    if db_path.exists():
        raise FileExistsError(f"{db_path} exists: the writer never opens an existing Zotero database")
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA encoding = 'UTF-8'")
        if version >= ZOTERO_10:
            conn.execute("PRAGMA journal_mode = WAL")
        else:
            conn.execute("PRAGMA auto_vacuum = 1")
        conn.execute("BEGIN")
        for stmt in _ddl(version):
            conn.execute(stmt)
        _write_type_system(conn)
        conn.executemany("INSERT INTO version VALUES (?, ?)", [
            ("globalSchema", GLOBAL_SCHEMA[version]), ("system", SYSTEM_SCHEMA), ("userdata", version),
            ("triggers", TRIGGERS_SCHEMA), ("compatibility", COMPATIBILITY[version]),
        ])
        conn.executemany("INSERT INTO syncObjectTypes VALUES (?, ?)", list(enumerate(
            ("collection", "creator", "item", "search", "tag", "relation", "setting"), start=1)))
        conn.execute("INSERT INTO charsets VALUES (1, 'utf-8')")
        w = _Writer(conn, data_dir, version)
        w.library(USER_LIBRARY_ID, "user", library.items, library.collections, library.notes, library.attachments)
        next_id = USER_LIBRARY_ID + 1
        for group in library.groups:
            w.add("groups", (group.group_id, next_id, group.name, group.description, 0))
            w.library(next_id, "group", group.items, group.collections, group.notes, group.attachments)
            next_id += 1
        for feed in library.feeds:
            w.add("feeds", (next_id, feed.name, feed.url, None, None, None, None, None, None))
            w.library(next_id, "feed", feed.items, (), (), ())
            next_id += 1
        w.flush()
        bad = conn.execute("PRAGMA foreign_key_check").fetchall()
        if bad:
            raise WriterError(f"the description breaks foreign keys: {bad[:5]}")
        conn.execute("COMMIT")
        if version >= ZOTERO_10:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        raise
    conn.close()
    return db_path


def _write_type_system(conn: sqlite3.Connection) -> None:
    """itemTypes, fields, creatorTypes and their mappings with a new database's ids, and the
    *Combined tables filled from them as Zotero fills them (no custom types)."""
    conn.executemany("INSERT INTO itemTypes VALUES (?, ?, NULL, 1)", [(i, n) for n, i in ITEM_TYPE_IDS.items()])
    conn.executemany("INSERT INTO fields VALUES (?, ?, NULL)", [(i, n) for n, i in FIELD_IDS.items()])
    conn.executemany("INSERT INTO creatorTypes VALUES (?, ?)", [(i, n) for n, i in CREATOR_TYPE_IDS.items()])
    type_fields, mappings, type_creators = [], [], []
    for item_type, names in TYPE_FIELDS.items():
        tid = ITEM_TYPE_IDS[item_type]
        for order, name in enumerate(names):
            type_fields.append((tid, FIELD_IDS[name], 0, order))
            base = BASE_OF.get((item_type, name))
            if base:
                mappings.append((tid, FIELD_IDS[base], FIELD_IDS[name]))
        for n, ct in enumerate(TYPE_CREATOR_TYPES[item_type]):
            type_creators.append((tid, CREATOR_TYPE_IDS[ct], 1 if n == 0 else 0))
    conn.executemany("INSERT INTO itemTypeFields VALUES (?, ?, ?, ?)", type_fields)
    conn.executemany("INSERT INTO baseFieldMappings VALUES (?, ?, ?)", mappings)
    conn.executemany("INSERT INTO itemTypeCreatorTypes VALUES (?, ?, ?)", type_creators)
    off = CUSTOM_ID_OFFSET
    conn.execute("INSERT INTO itemTypesCombined SELECT itemTypeID, typeName, display, 0 FROM itemTypes UNION "
                 f"SELECT customItemTypeID + {off}, typeName, display, 1 FROM customItemTypes")
    conn.execute("INSERT INTO fieldsCombined SELECT fieldID, fieldName, NULL, fieldFormatID, 0 FROM fields UNION "
                 f"SELECT customFieldID + {off}, fieldName, label, NULL, 1 FROM customFields")
    conn.execute("INSERT INTO itemTypeFieldsCombined SELECT itemTypeID, fieldID, hide, orderIndex FROM itemTypeFields")
    conn.execute("INSERT INTO baseFieldMappingsCombined SELECT itemTypeID, baseFieldID, fieldID FROM baseFieldMappings")


@dataclass
class _Writer:
    conn: sqlite3.Connection
    data_dir: Path
    version: int
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)
    value_ids: dict[str, int] = field(default_factory=dict)
    creator_ids: dict[tuple[str, str, int], int] = field(default_factory=dict)
    tag_ids: dict[str, int] = field(default_factory=dict)
    next_item_id: int = 1
    next_collection_id: int = 1
    keys: set[tuple[int, str]] = field(default_factory=set)
    # Rows buffered before a flush; big libraries are written in slices to bound memory.
    FLUSH_ROWS = 50_000

    @property
    def v10(self) -> bool:
        return self.version >= ZOTERO_10

    def add(self, table: str, row: tuple[object, ...]) -> None:
        rows = self.rows.setdefault(table, [])
        rows.append(row)
        if len(rows) >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        for table in _TABLE_ORDER:
            rows = self.rows.get(table)
            if rows:
                marks = ",".join("?" * len(rows[0]))
                self.conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        self.rows.clear()

    def _key(self, lib: int, key: str) -> None:
        if not ITEM_KEY_RE.match(key):
            raise WriterError(f"{key!r} is not a Zotero key (8 characters, A-Z and 0-9)")
        if (lib, key) in self.keys:
            raise WriterError(f"key {key} is used twice in library {lib}")
        self.keys.add((lib, key))

    # --- libraries and collections

    def library(self, lib: int, kind: str, items: Sequence[Item], collections: Sequence[Collection],
                notes: Sequence[Note], attachments: Sequence[Attachment]) -> None:
        self.add("libraries", (lib, kind, 1, 1, 0, *((0,) if self.v10 else ()), 0, 0, 0, *((0,) if self.version >= ZOTERO_9 else ())))
        coll_ids = self.collections(lib, collections)
        for item in items:
            self.item(lib, kind, item, coll_ids)
        for note in notes:
            self.note(lib, kind, note, None, coll_ids)
        for att in attachments:
            self.attachment(lib, kind, att, None, coll_ids)

    def collections(self, lib: int, collections: Sequence[Collection]) -> dict[str, int]:
        ids: dict[str, int] = {}
        pending = list(collections)
        while pending:  # parents first, whatever order they came in
            ready = [c for c in pending if c.parent is None or c.parent in ids]
            if not ready:
                raise WriterError(f"collections with unknown parents: {[c.key for c in pending]}")
            for c in ready:
                self._key(lib, c.key)  # collections and items have separate key spaces in Zotero; one set is stricter
                cid = ids[c.key] = self.next_collection_id
                self.next_collection_id += 1
                row: tuple[object, ...] = (cid, c.name, ids[c.parent] if c.parent else None, DEFAULT_DATE, lib, c.key, 0)
                self.add("collections", row + ((0,) if self.v10 else ()) + (0,))
                if c.trashed:
                    self.add("deletedCollections", (cid, DEFAULT_DATE))
                pending.remove(c)
        return ids

    def _in_collections(self, item_id: int, keys: Sequence[str], coll_ids: Mapping[str, int]) -> None:
        for order, key in enumerate(keys):
            if key not in coll_ids:
                raise WriterError(f"unknown collection {key}")
            self.add("collectionItems", (coll_ids[key], item_id, order))

    # --- items

    def _item_row(self, lib: int, kind: str, type_name: str, key: str, added: str, modified: str, client_modified: str) -> int:
        self._key(lib, key)
        iid = self.next_item_id
        self.next_item_id += 1
        row: tuple[object, ...] = (iid, ITEM_TYPE_IDS[type_name], added, modified, client_modified, lib, key, 0)
        self.add("items", row + ((0,) if self.v10 else ()) + (0,))
        if kind == "group":
            self.add("groupItems", (iid, None, None))
        elif kind == "feed":
            self.add("feedItems", (iid, f"urn:zocrates:{key}", None, None))
        return iid

    def _value(self, value: str) -> int:
        vid = self.value_ids.get(value)
        if vid is None:
            vid = self.value_ids[value] = len(self.value_ids) + 1
            self.add("itemDataValues", (vid, value, normalized(value)) if self.v10 else (vid, value))
        return vid

    def _field(self, item_id: int, item_type: str, name: str, value: str) -> None:
        """Set field `name` (a base field name is stored in the type's own field when it maps one)."""
        own = TYPE_FIELDS[item_type]
        if name not in own:
            mapped = [f for t, f in BASE_FIELDS.get(name, ()) if t == item_type]
            if not mapped:
                raise WriterError(f"an item of type {item_type} has no field {name!r}")
            name = mapped[0]
        self.add("itemData", (item_id, FIELD_IDS[name], self._value(value)))

    def _tags(self, item_id: int, tags: Sequence[str]) -> None:
        for name in tags:
            tid = self.tag_ids.get(name)
            if tid is None:
                tid = self.tag_ids[name] = len(self.tag_ids) + 1
                self.add("tags", (tid, name, normalized(name)) if self.v10 else (tid, name))
            self.add("itemTags", (item_id, tid, 0))

    def _filed(self, item_id: int, it: Item | _ChildOrStandalone, coll_ids: Mapping[str, int]) -> None:
        """Where the item sits: its tags, its collections, the trash."""
        self._tags(item_id, it.tags)
        self._in_collections(item_id, it.collections, coll_ids)
        if it.trashed:
            self.add("deletedItems", (item_id, DEFAULT_DATE))

    def _creator(self, c: Creator) -> int:
        mode = 1 if c.single_field else 0
        first = "" if c.single_field else c.first
        k = (first, c.last, mode)
        cid = self.creator_ids.get(k)
        if cid is None:
            cid = self.creator_ids[k] = len(self.creator_ids) + 1
            row: tuple[object, ...] = (cid, first, c.last, mode)
            if self.v10:
                row += (normalized(first), normalized(c.last))
            self.add("creators", row)
        return cid

    def item(self, lib: int, kind: str, item: Item, coll_ids: Mapping[str, int]) -> None:
        if item.item_type not in TYPE_FIELDS or item.item_type in NON_REGULAR_TYPES:
            raise WriterError(f"{item.item_type!r} is not a regular Zotero item type")
        iid = self._item_row(lib, kind, item.item_type, item.key, item.date_added, item.date_modified,
                             item.client_date_modified or item.date_modified)
        self._field(iid, item.item_type, "title", item.title)
        if item.date:
            self._field(iid, item.item_type, "date", multipart_date(item.date))
        for name, value in item.fields.items():
            if value:
                self._field(iid, item.item_type, name, value)
        allowed = TYPE_CREATOR_TYPES[item.item_type]
        for order, raw in enumerate(item.creators):
            c = Creator.of(raw)
            if c.creator_type not in allowed:
                raise WriterError(f"an item of type {item.item_type} has no creator type {c.creator_type!r}")
            self.add("itemCreators", (iid, self._creator(c), CREATOR_TYPE_IDS[c.creator_type], order))
        self._filed(iid, item, coll_ids)
        for att in item.attachments:
            self.attachment(lib, kind, att, iid, {})
        for note in item.notes:
            self.note(lib, kind, note, iid, {})

    def note(self, lib: int, kind: str, note: Note, parent: int | None, coll_ids: Mapping[str, int]) -> None:
        if parent is not None and note.collections:
            raise WriterError(f"child note {note.key} cannot be in a collection (Zotero's trigger refuses it)")
        nid = self._item_row(lib, kind, "note", note.key, note.date_modified, note.date_modified, note.date_modified)
        html = note_html(note.html)
        self.add("itemNotes", (nid, parent, html, note_title(html)))
        self._filed(nid, note, coll_ids)

    def attachment(self, lib: int, kind: str, att: Attachment, parent: int | None, coll_ids: Mapping[str, int]) -> None:
        if att.link_mode not in LINK_MODES:
            raise WriterError(f"unknown link mode {att.link_mode!r} ({', '.join(LINK_MODES)})")
        if parent is not None and att.collections:
            raise WriterError(f"child attachment {att.key} cannot be in a collection (Zotero's trigger refuses it)")
        aid = self._item_row(lib, kind, "attachment", att.key, att.date_modified, att.date_modified, att.date_modified)
        if att.title:
            self._field(aid, "attachment", "title", att.title)
        if att.url:
            self._field(aid, "attachment", "url", att.url)
        mode = LINK_MODES[att.link_mode]
        path = att.path
        if path is None and mode in (0, 1, 4):
            path = f"storage:{att.filename}"
        row: tuple[object, ...] = (aid, parent, mode, att.content_type, None, path, 0, 1700000000000 if mode in (0, 1) else None,
                                   None, None)
        if self.version >= ZOTERO_9:
            row += (None,)
        self.add("itemAttachments", row)
        self._filed(aid, att, coll_ids)
        self._full_text(aid, att)
        for ann in att.annotations:
            self.annotation(lib, kind, ann, aid)

    def _full_text(self, aid: int, att: Attachment) -> None:
        if att.file_bytes is not None and LINK_MODES[att.link_mode] in (0, 1):
            folder = self.data_dir / "storage" / att.key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / att.filename).write_bytes(att.file_bytes)
        if att.cache_bytes is None and att.pages is None and att.text is None:
            return
        if att.cache_bytes is not None:
            data = att.cache_bytes
            text = data.decode("utf-8", errors="replace")
        else:
            text = pdf_worker_text(att.pages) if att.pages is not None else unicodedata.normalize("NFC", att.text or "")
            data = text.encode("utf-8")
        # A PDF's counts are in pages, other files' in characters (fulltext.js indexString).
        n_pages = text.count("\f") + 1 if att.pages is not None else None
        n_chars = None if att.pages is not None else len(text)
        folder = self.data_dir / "storage" / att.key
        folder.mkdir(parents=True, exist_ok=True)
        if att.unprocessed:
            payload = {"indexedChars": n_chars, "totalChars": n_chars, "indexedPages": n_pages, "totalPages": n_pages,
                       "version": 1, "text": text}
            (folder / UNPROCESSED_NAME).write_text(json.dumps(payload), encoding="utf-8")
            self.add("fulltextItems", (aid, None, None, None, None, 0, FT_TO_PROCESS))
        else:
            (folder / CACHE_NAME).write_bytes(data)
            total = att.total_pages if att.total_pages is not None else n_pages
            self.add("fulltextItems", (aid, n_pages, total, n_chars, n_chars, 0, FT_UNSYNCED))

    def annotation(self, lib: int, kind: str, ann: Annotation, attachment_id: int) -> None:
        if ann.type not in ANNOTATION_TYPES:
            raise WriterError(f"unknown annotation type {ann.type!r} ({', '.join(ANNOTATION_TYPES)})")
        nid = self._item_row(lib, kind, "annotation", ann.key, ann.date_modified, ann.date_modified, ann.date_modified)
        rects = [list(r) for r in ann.rects]
        position = json.dumps({"pageIndex": ann.page_index, "rects": rects}, separators=(",", ":"))
        top = rects[0][3] if rects and len(rects[0]) == 4 else 0
        text = ann.text if ann.type in ("highlight", "underline") else None
        comment = ann.comment or None
        row: tuple[object, ...] = (nid, attachment_id, ANNOTATION_TYPES[ann.type], ann.author_name)
        if self.v10:
            row += (text, normalized(text) if text else None, comment, normalized(comment) if comment else None)
        else:
            row += (text, comment)
        row += (ann.color, ann.page_label, sort_index(ann.page_index, 0, 800 - top), position, 0)
        self.add("itemAnnotations", row)
        self._tags(nid, ann.tags)


def pdf_file(pages: int, labels: Sequence[tuple[int, str | None, str, int]] = ()) -> bytes:
    """A valid PDF of `pages` blank pages; `labels` its page labels as the catalog's /PageLabels
    number tree (PDF 32000-1:2008, 12.4.2): (first page index, style "D" | "R" | "r" | "A" | "a" or
    None for a prefix alone, prefix, first number). E.g. ((0, "r", "", 1), (2, "D", "", 125)): i, ii,
    125, 126, ... A classic cross-reference table, as most producers write one."""
    nums = []
    for index, style, prefix, start in labels:
        entry = "/Type /PageLabel" + (f" /S /{style}" if style else "")
        if prefix:
            entry += " /P (" + prefix.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"
        if start != 1:
            entry += f" /St {start}"
        nums.append(f"{index} << {entry} >>")
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    page_labels = f" /PageLabels << /Nums [{' '.join(nums)}] >>" if labels else ""
    objects = [
        f"<< /Type /Catalog /Pages 2 0 R{page_labels} >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>",
        "<< /Producer (zocratesd writer) >>",
        *("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>" for _ in range(pages)),
    ]
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 3 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
