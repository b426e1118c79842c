"""Zotero's local API (research/zotero_ops.md section 2): the one live, consistent view of a
library while Zotero runs, when the user enabled it (Settings > Advanced > "Allow other
applications on this computer to communicate with Zotero").

Read-only: `GET /api/` to probe (a real local API answers with `Zotero-API-Version`; a disabled one
with 403), then `users/0/collections` and `users/0/items` (Web API v3 JSON; children included, the
trash left out). Attachment text comes from the cache file on disk (same machine), else from
`items/<key>/fulltext` (Zotero 8 and later). The server is serial and speaks HTTP/1.0, so one
blocking client, one request at a time, from the indexer's thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from zocratesd.library._records import (
    AttachmentRecord,
    CollectionRecord,
    ItemRecord,
    LibrarySnapshot,
    item_stamp,
    valid_key,
    year_of,
)
from zocratesd.library.fulltext import MAX_CACHE_BYTES, cache_stamp, clean_text, read_cache

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:23119"
API_VERSION = "3"
# The probe must fail fast when nothing listens (the usual case: Zotero closed or the API off);
# a library read may take a while (Zotero answers a 10k-item page set in seconds).
PROBE_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 60.0
# Web API v3's largest page; the local API may ignore `limit` and send everything at once.
PAGE_LIMIT = 100
# A runaway server must not make us page forever: 1,000 pages of 100 is a 100k-item library.
MAX_PAGES = 1000
# Type-specific fields that stand for `title` in API JSON (base-field mappings, schema.json).
TITLE_FIELDS = ("title", "caseName", "nameOfAct", "subject")
DATE_FIELDS = ("date", "dateDecided", "dateEnacted", "issueDate")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class LocalApiError(Exception):
    """The local API answered something we cannot use; we fall back to the database."""


def check_loopback(base_url: str) -> str:
    """The base URL without a trailing slash; ValueError unless it is http on a loopback host."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or (parts.hostname or "") not in LOOPBACK_HOSTS:
        raise ValueError(f"the local API must be http://127.0.0.1:PORT (loopback only), not {base_url!r}")
    return base_url.rstrip("/")


class LocalApi:
    def __init__(self, base_url: str, data_dir: Path):
        self.base_url = check_loopback(base_url)
        self.data_dir = data_dir
        self.schema_version: int | None = None
        self._fulltext_endpoint = True
        self._client = httpx.Client(
            base_url=self.base_url, timeout=READ_TIMEOUT_S, headers={"Zotero-API-Version": API_VERSION},
            trust_env=False, follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def probe(self) -> bool:
        """True when a local API answers; False when nothing listens or it is disabled."""
        try:
            r = self._client.get("/api/", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        if r.status_code != 200 or "Zotero-API-Version" not in r.headers:
            if r.status_code == 403:
                log.debug("library: Zotero's local API is disabled (%s)", r.text[:80])
            return False
        try:
            self.schema_version = int(r.headers.get("Zotero-Schema-Version", ""))
        except ValueError:
            self.schema_version = None
        return True

    def library_version(self) -> str | None:
        """`Last-Modified-Version` of the items: changes with every edit (cheap change check)."""
        try:
            r = self._client.get("/api/users/0/items", params={"limit": 1, "format": "keys"}, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        return r.headers.get("Last-Modified-Version") if r.status_code == 200 else None

    def _all(self, path: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start = 0
        for _ in range(MAX_PAGES):
            try:
                r = self._client.get(path, params={"format": "json", "limit": PAGE_LIMIT, "start": start})
            except httpx.HTTPError as exc:
                raise LocalApiError(f"GET {path} failed: {exc}") from None
            if r.status_code != 200:
                raise LocalApiError(f"GET {path} answered {r.status_code}: {r.text[:200]}")
            try:
                page = r.json()
            except ValueError:
                raise LocalApiError(f"GET {path} did not answer JSON") from None
            if not isinstance(page, list):
                raise LocalApiError(f"GET {path} answered {type(page).__name__}, not a list")
            out += [o for o in page if isinstance(o, dict)]
            total = _int(r.headers.get("Total-Results"))
            start += len(page)
            if len(page) < PAGE_LIMIT or len(page) > PAGE_LIMIT or (total is not None and start >= total):
                return out  # the last page, or a server that ignores paging and sent everything
        raise LocalApiError(f"GET {path}: more than {MAX_PAGES} pages")

    def read(self, known: dict[str, str] | None = None) -> LibrarySnapshot:
        """Everything (the local API has no cheaper listing); full records only for items whose
        stamp differs from `known`."""
        collections_raw = self._all("/api/users/0/collections")
        items_raw = self._all("/api/users/0/items")
        colls: dict[str, CollectionRecord] = {}
        for c in collections_raw:
            d = c.get("data") if isinstance(c.get("data"), dict) else c
            key = d.get("key")
            if not valid_key(key) or d.get("deleted"):
                continue
            parent = d.get("parentCollection")
            colls[key] = CollectionRecord(key=key, name=str(d.get("name") or ""), parent_key=parent if valid_key(parent) else None)
        # Drop collections under a missing (trashed) parent, as the database reader does.
        alive = {k for k in colls if _reaches_root(k, colls)}
        colls = {k: c for k, c in colls.items() if k in alive}

        data = [o["data"] for o in items_raw if isinstance(o.get("data"), dict)]
        live = [d for d in data if valid_key(d.get("key")) and not d.get("deleted")]
        children: dict[str, list[AttachmentRecord]] = {}
        for d in live:
            if d.get("itemType") == "attachment" and valid_key(d.get("parentItem")):
                children.setdefault(d["parentItem"], []).append(self._attachment(d))
        out: list[ItemRecord] = []
        stamps: dict[str, str] = {}
        for d in live:
            kind = d.get("itemType")
            if kind in ("note", "annotation") or (kind == "attachment" and d.get("parentItem")):
                continue
            atts = [self._attachment(d)] if kind == "attachment" else children.get(d["key"], [])
            atts.sort(key=lambda a: (a.content_type != "application/pdf", a.key))
            in_colls = [k for k in (d.get("collections") or []) if k in colls]
            stamp = item_stamp(str(d.get("dateModified") or ""), str(d.get("version") or ""), in_colls, atts)
            stamps[d["key"]] = stamp
            if known is not None and known.get(d["key"]) == stamp:
                continue
            creators = []
            for c in d.get("creators") or []:
                if isinstance(c, dict):
                    name = c.get("name") or " ".join(str(p) for p in (c.get("firstName"), c.get("lastName")) if p)
                    if str(name).strip():
                        creators.append(str(name).strip())
            out.append(
                ItemRecord(
                    key=d["key"], item_type=str(kind or "unknown"),
                    title=str(next((d[f] for f in TITLE_FIELDS if d.get(f)), "(untitled)")),
                    creators=tuple(creators), year=year_of(str(next((d[f] for f in DATE_FIELDS if d.get(f)), ""))),
                    abstract=str(d.get("abstractNote") or ""), doi=d.get("DOI") or None, url=d.get("url") or None,
                    collections=tuple(in_colls),
                    tags=tuple(str(t["tag"]) for t in (d.get("tags") or []) if isinstance(t, dict) and t.get("tag")),
                    attachments=tuple(atts), date_modified=str(d.get("dateModified") or ""),
                    client_date_modified=str(d.get("version") or ""), stamp=stamp,
                )
            )
        out.sort(key=lambda r: r.key)
        return LibrarySnapshot(
            source="local_api", schema_version=self.schema_version, items=out, stamps=stamps,
            collections=sorted(colls.values(), key=lambda c: c.key),
        )

    def _attachment(self, d: dict[str, Any]) -> AttachmentRecord:
        return AttachmentRecord(
            key=d["key"], content_type=d.get("contentType"), link_mode=None,
            modified=f"{d.get('dateModified') or ''}|{d.get('version') or ''}", cache_stamp=cache_stamp(self.data_dir, d["key"]),
        )

    def read_text(self, attachment_key: str) -> str | None:
        """The cache file when it is on this disk, else `/fulltext` (Zotero 8+; 404 on 7)."""
        text = read_cache(self.data_dir, attachment_key)
        if text is not None or not self._fulltext_endpoint or not valid_key(attachment_key):
            return text
        try:
            r = self._client.get(f"/api/users/0/items/{attachment_key}/fulltext")
        except httpx.HTTPError as exc:
            log.info("library: full text of %s: %s", attachment_key, exc)
            return None
        if r.status_code == 501 or (r.status_code == 404 and "endpoint" in r.text.lower()):
            self._fulltext_endpoint = False  # Zotero 7 has no such endpoint: stop asking
            return None
        if r.status_code != 200:
            return None
        try:
            content = r.json().get("content")
        except (ValueError, AttributeError):
            return None
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


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
