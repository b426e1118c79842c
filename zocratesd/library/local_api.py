"""Zotero's local API (research/zotero_ops.md section 2): the library's view when `zotero.sqlite`
cannot be read (the indexer reads the database first, read-only or through a snapshot), and only
when it is the user's own (Settings > Advanced > "Allow other applications on this computer to
communicate with Zotero").

Anyone on this machine can listen on Zotero's port while Zotero is closed, and answer like it. So:
on Linux the listener must belong to our uid (`/proc/net/tcp*`, `_listeners.py`), checked before
the first request and again before anything it sent is used (`confirm_owner`: at the end of a
listing, before each batch of full texts is written); every answer is read as a stream and refused past
`ApiLimits.max_response_bytes`, and one read lists at most `ApiLimits.max_items` objects. Whatever
it answered, the indexer never lets it remove what the database last had (indexer.py).

Read-only: `GET /api/` to probe (a real local API answers with `Zotero-API-Version`; a disabled one
with 403), then `users/0/collections` and `users/0/items` (Web API v3 JSON; children included, the
trash left out). Attachment text comes from the cache file on disk (same machine), else from
`items/<key>/fulltext` (Zotero 8 and later). The server is serial and speaks HTTP/1.0, so one
blocking client, one request at a time, from the indexer's thread.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from zocratesd.library import _listeners
from zocratesd.library._listeners import Ownership, listener_owner
from zocratesd.library._records import (
    AttachmentRecord,
    CollectionRecord,
    CreatorRecord,
    ItemRecord,
    LibrarySnapshot,
    display_name,
    item_stamp,
    library_counts,
    valid_key,
    year_of,
)
from zocratesd.library.fulltext import MAX_CACHE_BYTES, cache_stamp, clean_text, read_cache
from zocratesd.library.zotero_db import clean_line
from zocratesd.logtext import escape_for_log
from zocratesd.zotero_schema import BASE_OF

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:23119"
API_VERSION = "3"
# The probe must fail fast when nothing listens (the usual case: Zotero closed or the API off);
# a library read may take a while (Zotero answers a 10k-item page set in seconds).
PROBE_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 60.0
# A server that trickles bytes (each under READ_TIMEOUT_S apart) must still end: one answer gets
# this long in all. Zotero sends a page of 100 objects in well under a second.
RESPONSE_DEADLINE_S = 120.0
# Web API v3's largest page; the local API may ignore `limit` and send everything at once.
PAGE_LIMIT = 100
# An answer is read in pieces of this size, and counted as it comes.
CHUNK_BYTES = 64 * 1024
# Type-specific fields that stand for `title` in API JSON (base-field mappings, schema.json).
TITLE_FIELDS = ("title", "caseName", "nameOfAct", "subject")
DATE_FIELDS = ("date", "dateDecided", "dateEnacted", "issueDate")
# What we keep of an item's JSON until the read ends (notes and annotations are dropped at once).
# Keys of an item's JSON that are not its fields.
NOT_FIELDS = frozenset({"key", "version", "itemType", "parentItem", "contentType", "dateAdded", "dateModified"})
KEPT_FIELDS = (*TITLE_FIELDS, *DATE_FIELDS, "key", "itemType", "parentItem", "contentType", "dateAdded", "dateModified", "version",
               "creators", "abstractNote", "DOI", "url", "collections", "tags")
# Strings in an item's JSON that are not bibliographic fields (a note's HTML, an annotation's text).
DROPPED_FIELDS = frozenset({"note", "annotationText", "annotationComment", "annotationPosition", "md5", "mtime",
                            "filename", "path", "charset", "linkMode", "relations"})
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# Text from the server that goes into a log line or a status message (escaped, logtext.py): at most
# this many characters.
QUOTE_CHARS = 200


@dataclass(frozen=True)
class ApiLimits:
    # One answer's body, read as a stream and refused past this (a 400 MiB page once took the
    # daemon from 135 MB to 1.56 GB). A page of 100 objects with long abstracts is under 1 MiB;
    # a full text at Zotero's 500,000-character limit about 2 MiB of JSON: 16 MiB is ample.
    max_response_bytes: int = 16 * 1024 * 1024
    # json.loads builds one Python object per value, tens of bytes even for `{}` or `1.5`, which
    # cost two or four bytes of text: a body is refused when it could hold more than this many
    # values (counted from the bytes that open or separate them: { [ ,), which bounds the parse to
    # ~100 MB. A real page has a few thousand; even 16 MiB of comma-rich prose a few hundred thousand.
    max_json_values: int = 1_000_000
    # Objects (items, attachments, notes, annotations) one read may list: far more than a personal
    # library holds with all its children, and a server that pages forever stops here.
    max_items: int = 500_000


class LocalApiError(Exception):
    """The local API answered something we cannot use (or too much of it); nothing is indexed from it.
    Its message is safe to log and to show: any text the server sent in it is escaped already."""


class ListenerChanged(LocalApiError):
    """The port's listener is no longer the user's: stop reading from it at once."""


def check_loopback(base_url: str) -> str:
    """The base URL without a trailing slash; ValueError unless it is http on a loopback host."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or (parts.hostname or "") not in LOOPBACK_HOSTS:
        raise ValueError(f"the local API must be http://127.0.0.1:PORT (loopback only), not {base_url!r}")
    return base_url.rstrip("/")


@dataclass
class _Answer:
    status: int
    headers: httpx.Headers
    body: bytes

    def text(self) -> str:
        return escape_for_log(self.body[: QUOTE_CHARS * 4].decode("utf-8", errors="replace"), QUOTE_CHARS)


class LocalApi:
    def __init__(self, base_url: str, data_dir: Path, *, limits: ApiLimits | None = None,
                 proc_net: Path | None = None, uid: int | None = None):
        self.base_url = check_loopback(base_url)
        parts = urlsplit(self.base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.data_dir = data_dir
        self.limits = limits or ApiLimits()
        # Where the listener's owner is looked up, and whose it must be (tests point these elsewhere).
        self._proc_net = proc_net if proc_net is not None else _listeners.PROC_NET
        self._uid = uid
        self.schema_version: int | None = None
        self._fulltext_endpoint = True
        self._client = httpx.Client(
            base_url=self.base_url, timeout=READ_TIMEOUT_S,
            # identity: the limits count the bytes we hold; a compressed body could inflate past them.
            headers={"Zotero-API-Version": API_VERSION, "Accept-Encoding": "identity"},
            trust_env=False, follow_redirects=False,
        )

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._client.close()

    def owner(self) -> Ownership:
        """Whose process listens on the API's port (`unknown` where the system cannot tell)."""
        return listener_owner(self.host, self.port, proc_net=self._proc_net, uid=self._uid)

    def confirm_owner(self) -> None:
        """Raise ListenerChanged unless the port's listener is (still) the user's, or the system
        cannot tell. Called before what the server sent is used: a squatter could take the port
        between two requests (only once Zotero has let it go: Linux lets no other uid share it)."""
        owner = self.owner()
        if owner.verdict in ("foreign", "none"):
            who = f"uid {', '.join(map(str, owner.uids))}" if owner.uids else "nobody listens"
            raise ListenerChanged(f"the listener on Zotero's local API port ({self.endpoint}) changed while we read it "
                                  f"({who}); what it sent is not used")

    def _get(self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> _Answer:
        """One GET, its body read as a stream and refused past the limit (never buffered whole)."""
        limit = self.limits.max_response_bytes
        deadline = time.monotonic() + RESPONSE_DEADLINE_S
        try:
            with self._client.stream("GET", path, params=params, timeout=timeout or READ_TIMEOUT_S) as r:
                encoding = r.headers.get("Content-Encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise LocalApiError(f"GET {path} answered with Content-Encoding {escape_for_log(encoding, 40)!r}")
                declared = _int(r.headers.get("Content-Length"))
                if declared is not None and declared > limit:
                    raise LocalApiError(f"GET {path} announced {declared} bytes, more than the {limit} bytes allowed")
                body = bytearray()
                for chunk in r.iter_raw(CHUNK_BYTES):
                    body += chunk
                    if len(body) > limit:
                        raise LocalApiError(f"GET {path} answered more than the {limit} bytes allowed")
                    if time.monotonic() > deadline:
                        raise LocalApiError(f"GET {path} took more than {RESPONSE_DEADLINE_S:.0f} s")
                answer = _Answer(r.status_code, r.headers, bytes(body))
        except httpx.HTTPError as exc:
            raise LocalApiError(f"GET {path} failed: {escape_for_log(exc, QUOTE_CHARS)}") from None
        return answer

    def probe(self) -> bool:
        """True when a local API answers; False when nothing listens or it is disabled."""
        try:
            r = self._get("/api/", timeout=PROBE_TIMEOUT_S)
        except LocalApiError as exc:
            log.debug("library: no local API at %s: %s", self.endpoint, exc)
            return False
        if r.status != 200 or "Zotero-API-Version" not in r.headers:
            if r.status == 403:
                log.debug("library: Zotero's local API is disabled (%s)", escape_for_log(r.text()))
            return False
        try:
            self.schema_version = int(r.headers.get("Zotero-Schema-Version", ""))
        except ValueError:
            self.schema_version = None
        return True

    def library_version(self) -> str | None:
        """`Last-Modified-Version` of the items: changes with every edit (cheap change check)."""
        try:
            r = self._get("/api/users/0/items", params={"limit": 1, "format": "keys"}, timeout=PROBE_TIMEOUT_S)
        except LocalApiError:
            return None
        version = r.headers.get("Last-Modified-Version")
        return escape_for_log(version, 40) if r.status == 200 and version is not None else None

    def _json(self, path: str, r: _Answer) -> Any:
        values = r.body.count(b"{") + r.body.count(b"[") + r.body.count(b",")
        if values > self.limits.max_json_values:
            raise LocalApiError(f"GET {path} answered JSON of more than {self.limits.max_json_values} values")
        try:
            return json.loads(r.body)
        except ValueError:
            raise LocalApiError(f"GET {path} did not answer JSON") from None

    def _objects(self, path: str) -> Iterator[dict[str, Any]]:
        """Every object of a listing, page by page (one page in memory at a time)."""
        start = 0
        while True:
            r = self._get(path, params={"format": "json", "limit": PAGE_LIMIT, "start": start})
            if r.status != 200:
                raise LocalApiError(f"GET {path} answered {r.status}: {r.text()}")
            page = self._json(path, r)
            if not isinstance(page, list):
                raise LocalApiError(f"GET {path} answered {type(page).__name__}, not a list")
            start += len(page)
            if start > self.limits.max_items:
                raise LocalApiError(f"GET {path} lists more than {self.limits.max_items} objects")
            yield from (o for o in page if isinstance(o, dict))
            total = _int(r.headers.get("Total-Results"))
            if len(page) != PAGE_LIMIT or (total is not None and start >= total):
                return  # the last page, or a server that ignores paging and sent everything

    def read(self, known: dict[str, str] | None = None) -> LibrarySnapshot:
        """Everything (the local API has no cheaper listing); full records only for items whose
        stamp differs from `known`."""
        colls: dict[str, CollectionRecord] = {}
        for c in self._objects("/api/users/0/collections"):
            raw = c.get("data")
            d: dict[str, Any] = raw if isinstance(raw, dict) else c
            key = d.get("key")
            if not isinstance(key, str) or not valid_key(key) or d.get("deleted"):
                continue
            parent = d.get("parentCollection")
            colls[key] = CollectionRecord(key=key, name=str(d.get("name") or ""), parent_key=parent if valid_key(parent) else None)
        # Drop collections under a missing (trashed) parent, as the database reader does.
        alive = {k for k in colls if _reaches_root(k, colls)}
        colls = {k: c for k, c in colls.items() if k in alive}

        live: list[dict[str, Any]] = []
        children: dict[str, list[AttachmentRecord]] = {}
        kinds: dict[str, int] = {}
        for o in self._objects("/api/users/0/items"):
            data = o.get("data")
            if not isinstance(data, dict) or not valid_key(data.get("key")) or data.get("deleted"):
                continue
            kind = data.get("itemType")
            if kind in ("note", "annotation"):  # counted; not indexed from this view
                kinds[kind] = kinds.get(kind, 0) + 1
                continue
            if kind == "attachment" and data.get("parentItem"):
                if valid_key(data.get("parentItem")):
                    children.setdefault(data["parentItem"], []).append(self._attachment(data))
                continue
            # Every field the item's type has (a bibliography needs them), not its children's text.
            live.append({k: v for k, v in data.items() if k in KEPT_FIELDS or isinstance(v, str) and k not in DROPPED_FIELDS})
        out: list[ItemRecord] = []
        stamps: dict[str, str] = {}
        for d in live:
            kind = d.get("itemType")
            atts = [self._attachment(d)] if kind == "attachment" else children.get(d["key"], [])
            atts.sort(key=lambda a: (a.content_type != "application/pdf", a.key))
            in_colls = [k for k in _list(d.get("collections")) if isinstance(k, str) and k in colls]
            stamp = item_stamp(str(d.get("dateModified") or ""), str(d.get("version") or ""), in_colls, atts)
            stamps[d["key"]] = stamp
            if known is not None and known.get(d["key"]) == stamp:
                continue
            names = [
                CreatorRecord(str(c.get("creatorType") or "author"), clean_line(c["name"]), "", True) if c.get("name")
                else CreatorRecord(str(c.get("creatorType") or "author"), clean_line(c.get("lastName")), clean_line(c.get("firstName")))
                for c in _list(d.get("creators")) if isinstance(c, dict)
            ]
            names = [c for c in names if c.last or c.first]
            fields = {BASE_OF.get((str(kind), k), k): v for k, v in d.items()
                      if isinstance(v, str) and v and k not in NOT_FIELDS}
            out.append(
                ItemRecord(
                    key=d["key"], item_type=str(kind or "unknown"),
                    title=str(next((d[f] for f in TITLE_FIELDS if d.get(f)), "(untitled)")),
                    creators=tuple(display_name(c) for c in names), fields=fields, names=tuple(names),
                    year=year_of(str(next((d[f] for f in DATE_FIELDS if d.get(f)), ""))),
                    abstract=str(d.get("abstractNote") or ""), doi=_str_or_none(d.get("DOI")), url=_str_or_none(d.get("url")),
                    collections=tuple(in_colls),
                    tags=tuple(str(t["tag"]) for t in _list(d.get("tags")) if isinstance(t, dict) and t.get("tag")),
                    attachments=tuple(atts), date_modified=str(d.get("dateModified") or ""),
                    client_date_modified=str(d.get("version") or ""), stamp=stamp,
                    date_added=_sql_date(d.get("dateAdded")),
                )
            )
        out.sort(key=lambda r: r.key)
        self.confirm_owner()
        standalone = sum(1 for d in live if d.get("itemType") == "attachment")
        counts = library_counts(
            items=len(live) - standalone, notes=kinds.get("note", 0), annotations=kinds.get("annotation", 0),
            attachments=standalone + sum(len(v) for k, v in children.items() if k in stamps),
        )
        return LibrarySnapshot(
            source="local_api", schema_version=self.schema_version, items=out, stamps=stamps,
            collections=sorted(colls.values(), key=lambda c: c.key), counts=counts,
        )

    def _attachment(self, d: dict[str, Any]) -> AttachmentRecord:
        content_type = d.get("contentType")
        return AttachmentRecord(
            key=d["key"], content_type=content_type if isinstance(content_type, str) else None, link_mode=None,
            modified=f"{d.get('dateModified') or ''}|{d.get('version') or ''}", cache_stamp=cache_stamp(self.data_dir, d["key"]),
        )

    def read_text(self, attachment_key: str) -> str | None:
        """The cache file when it is on this disk, else `/fulltext` (Zotero 8+; 404 on 7)."""
        text = read_cache(self.data_dir, attachment_key)
        if text is not None or not self._fulltext_endpoint or not valid_key(attachment_key):
            return text
        path = f"/api/users/0/items/{attachment_key}/fulltext"
        try:
            r = self._get(path)
        except LocalApiError as exc:
            log.info("library: full text of %s: %s", attachment_key, exc)
            return None
        if r.status == 501 or (r.status == 404 and b"endpoint" in r.body[:QUOTE_CHARS].lower()):
            self._fulltext_endpoint = False  # Zotero 7 has no such endpoint: stop asking
            return None
        if r.status != 200:
            return None
        try:
            body = self._json(path, r)
        except LocalApiError as exc:
            log.info("library: full text of %s: %s", attachment_key, exc)
            return None
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            return None
        # The same bound as a cache file on disk: one odd answer must not fill the index.
        return clean_text(content[:MAX_CACHE_BYTES], source=f"fulltext of {attachment_key}")


def _reaches_root(key: str, colls: dict[str, CollectionRecord]) -> bool:
    seen: set[str] = set()
    k: str | None = key
    while k is not None:
        if k not in colls or k in seen:
            return False
        seen.add(k)
        k = colls[k].parent_key
    return True


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _str_or_none(v: object) -> str | None:
    return str(v) if v else None


def _sql_date(v: object) -> str:
    """The API's ISO 8601 time ("2023-06-01T10:00:00Z") as zotero.sqlite stores it ("2023-06-01 10:00:00"),
    so items from either source sort together; anything else is kept out ("")."""
    text = str(v or "")
    return text[:19].replace("T", " ") if len(text) >= 19 and text[4] == "-" and text[10] in "T " else ""


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
