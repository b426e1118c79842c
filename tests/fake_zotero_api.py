"""A real HTTP server on 127.0.0.1 that answers as Zotero's local API does (research/zotero_ops.md
section 2), for tests: HTTP/1.0 responses, `GET /api/` with `Zotero-API-Version` and
`Zotero-Schema-Version`, Web API v3 JSON for `users/0/collections` and `users/0/items` (children
included, trashed objects left out, `limit`/`start` paging with `Total-Results`,
`Last-Modified-Version`), `items/<key>/fulltext` (Zotero 8+), and 403 "Local API is not enabled"
when switched off. Built from the same fixture items as `zoterofixture.build_zotero_dir`.

`huge_page_bytes` makes `users/0/items` answer a JSON page that big instead, generated as it is
sent (with or without Content-Length: `huge_page_length`), so the test process never holds it;
`bytes_sent` counts what the handler managed to write before the client hung up.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from zoterofixture import FixtureCollection, FixtureItem


def _item_json(item: FixtureItem, version: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": item.key, "version": version, "itemType": item.item_type,
        "caseName" if item.item_type == "case" else "title": item.title,
        "creators": [
            {"creatorType": "author", "name": c} if isinstance(c, str) else {"creatorType": "author", "firstName": c[0], "lastName": c[1]}
            for c in item.creators
        ],
        "abstractNote": item.abstract or "", "date": item.date or "", "DOI": item.doi or "", "url": item.url or "",
        "collections": list(item.collections), "tags": [{"tag": t} for t in item.tags], "relations": {},
        "dateAdded": "2023-06-01T10:00:00Z", "dateModified": item.date_modified.replace(" ", "T") + "Z",
    }
    if item.trashed:
        data["deleted"] = 1
    return {"key": item.key, "version": version, "library": {"type": "user", "id": 0}, "meta": {}, "data": data}


def _attachment_json(parent: FixtureItem, att: Any, version: int) -> dict[str, Any]:
    data = {
        "key": att.key, "version": version, "itemType": "attachment", "parentItem": parent.key, "linkMode": "imported_file",
        "title": "Full Text PDF", "contentType": att.content_type, "filename": att.filename, "tags": [], "relations": {},
        "dateModified": parent.date_modified.replace(" ", "T") + "Z",
    }
    if att.trashed or parent.trashed:
        data["deleted"] = 1
    return {"key": att.key, "version": version, "library": {"type": "user", "id": 0}, "meta": {}, "data": data}


class FakeZoteroApi:
    """Start with `FakeZoteroApi(items, collections)`; `base_url` to point the daemon at; `close()`."""

    def __init__(self, items: list[FixtureItem], collections: list[FixtureCollection], *, schema_version: int = 31,
                 fulltext: bool = True, enabled: bool = True):
        self.enabled = enabled
        self.fulltext = fulltext
        self.library_version = 100
        self.requests: list[str] = []
        self.huge_page_bytes = 0
        self.huge_page_length = True
        self.bytes_sent = 0
        self._versions: dict[str, tuple[str, int]] = {}  # key -> (object JSON, its version)
        self.set_library(items, collections)
        self.schema_version = schema_version
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # as Zotero's server answers

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                server.requests.append(self.path)
                url = urlsplit(self.path)
                if server.huge_page_bytes and url.path == "/api/users/0/items" and "format=keys" not in url.query:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Zotero-API-Version", "3")
                    self.send_header("Total-Results", "1")
                    if server.huge_page_length:
                        self.send_header("Content-Length", str(server.huge_page_bytes))
                    self.end_headers()
                    try:
                        for chunk in server.huge_page(server.huge_page_bytes):
                            self.wfile.write(chunk)
                            server.bytes_sent += len(chunk)
                    except OSError:
                        pass  # the client hung up: what the test wants
                    return
                status, headers, body = server.answer(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def set_library(self, items: list[FixtureItem], collections: list[FixtureCollection]) -> None:
        self.library_version += 1
        v = self.library_version
        self.items = []
        self.texts: dict[str, str] = {}
        for it in items:
            self.items.append(_item_json(it, v))
            for att in it.attachments:
                self.items.append(_attachment_json(it, att, v))
                if att.text is not None:
                    self.texts[att.key] = att.text
        for obj in self.items:  # an object keeps its version until it changes, as in Zotero
            data = obj["data"]
            body = json.dumps({k: v for k, v in data.items() if k != "version"}, sort_keys=True)
            old = self._versions.get(obj["key"])
            version = old[1] if old and old[0] == body else v
            self._versions[obj["key"]] = (body, version)
            obj["version"] = data["version"] = version
        self.collections = []
        for c in collections:
            data: dict[str, Any] = {"key": c.key, "version": v, "name": c.name, "parentCollection": c.parent or False, "relations": {}}
            if c.trashed:
                data["deleted"] = True
            self.collections.append({"key": c.key, "version": v, "data": data, "meta": {}})

    @staticmethod
    def huge_page(size: int) -> Iterator[bytes]:
        """A JSON list of item objects, exactly `size` bytes (padded with spaces), in 64 KiB pieces."""
        one = json.dumps({"key": "HUGEITEM", "version": 1, "data": {"key": "HUGEITEM", "itemType": "book", "title": "x" * 900}})
        body_items = (size - 2) // (len(one) + 1)
        yield b"["
        sent = 1
        chunk = ",".join([one] * 64).encode()
        n = 0
        while n + 64 <= body_items:
            yield (b"," if n else b"") + chunk
            sent += len(chunk) + (1 if n else 0)
            n += 64
        yield b" " * (size - sent - 1) + b"]"

    def answer(self, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(raw_path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path
        base = {"Zotero-API-Version": "3", "Zotero-Schema-Version": str(self.schema_version)}
        if path == "/connector/ping":
            return 200, {"Content-Type": "text/plain"}, b"Zotero is running"
        if not path.startswith("/api/"):
            return 404, {"Content-Type": "text/plain"}, b"No endpoint found"
        if not self.enabled:
            return 403, {"Content-Type": "text/plain"}, b"Local API is not enabled"
        if path == "/api/":
            return 200, {**base, "Content-Type": "text/plain"}, b"Nothing to see here."
        if path == "/api/users/0/collections":
            objs = [c for c in self.collections if not c["data"].get("deleted")]
        elif path == "/api/users/0/items":
            objs = [i for i in self.items if not i["data"].get("deleted")]
        elif path.startswith("/api/users/0/items/") and path.endswith("/fulltext"):
            key = path.split("/")[5]
            if not self.fulltext:
                return 404, {"Content-Type": "text/plain"}, b"No endpoint found"
            if key not in self.texts:
                return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
            text = self.texts[key]
            pages = text.count("\f") + 1
            body = {"content": text, "indexedPages": pages, "totalPages": pages}
            return 200, {**base, "Content-Type": "application/json"}, json.dumps(body).encode()
        else:
            return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
        total = len(objs)
        start = int(q.get("start", 0))
        limit = int(q.get("limit", 25))
        page = objs[start : start + limit]
        headers = {**base, "Content-Type": "application/json", "Total-Results": str(total),
                   "Last-Modified-Version": str(self.library_version)}
        if q.get("format") == "keys":
            return 200, {**headers, "Content-Type": "text/plain"}, "\n".join(o["key"] for o in page).encode()
        return 200, headers, json.dumps(page).encode()
