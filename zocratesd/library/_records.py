"""What a library source yields: items with their metadata and attachments, and collections.

Both sources (Zotero's local API and `zotero.sqlite`) produce these, so the index does not care
where they came from. Attachment text is not here: it is read on demand (`read_text`), and only
for items whose signature changed since the last refresh.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

# Zotero item and collection keys: 8 characters of [23456789A-Z] (we accept any A-Z0-9, as the
# prompt context does). A key names a folder under storage/, so anything else is refused.
KEY_RE = re.compile(r"^[A-Z0-9]{8}$")


_YEAR_RE = re.compile(r"(?<!\d)(\d{4})(?!\d)")


def valid_key(key: object) -> bool:
    return isinstance(key, str) and bool(KEY_RE.match(key))


def year_of(date: str | None) -> int | None:
    """The year of a Zotero date: stored multipart ('2017-00-00 2017') or as typed ('March 2017')."""
    if not date:
        return None
    m = _YEAR_RE.search(date)
    return int(m.group(1)) if m and m.group(1) != "0000" else None


@dataclass(frozen=True)
class AttachmentRecord:
    key: str
    content_type: str | None = None
    link_mode: int | None = None
    modified: str = ""  # dateModified/clientDateModified (or the local API's version)
    cache_stamp: str = ""  # size and mtime of .zotero-ft-cache, "" when there is none


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


def item_stamp(modified: str, client_modified: str, collections: list[str], attachments: list[AttachmentRecord]) -> str:
    """What tells a refresh that an item changed, computed without reading its metadata: Zotero's
    `dateModified` (user edits) and `clientDateModified` (every save, collection and tag changes
    included), its collections, and each attachment's stamps and cache file (Zotero rewrites the
    cache when it re-extracts text, without touching the item)."""
    parts = [modified, client_modified, ",".join(sorted(collections))]
    parts += [f"{a.key}:{a.modified}:{a.cache_stamp}" for a in sorted(attachments, key=lambda a: a.key)]
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class CollectionRecord:
    key: str
    name: str
    parent_key: str | None = None


@dataclass
class LibrarySnapshot:
    """One read of the library: every live item's stamp, and full records (no attachment text)
    for the items whose stamp differs from what the index already holds."""

    source: str  # "local_api" | "sqlite" | "snapshot"
    schema_version: int | None
    items: list[ItemRecord] = field(default_factory=list)
    stamps: dict[str, str] = field(default_factory=dict)  # every live item: key -> stamp
    collections: list[CollectionRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
