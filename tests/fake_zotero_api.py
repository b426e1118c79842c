"""A real HTTP server on 127.0.0.1 that answers as Zotero's own server does, for tests.

Reads (research/zotero_ops.md section 2): HTTP/1.0 responses, `GET /api/` with `Zotero-API-Version`
and `Zotero-Schema-Version`, Web API v3 JSON for `users/0/collections` and `users/0/items` (children
included, trashed objects left out unless `includeTrashed=1`, `limit`/`start` paging with
`Total-Results`, `Last-Modified-Version`), `items/top`, `items/trash`, `items/<key>`,
`items/<key>/children`, `collections/<key>`, `collections/<key>/items`, `items/<key>/fulltext`
(Zotero 8+), and 403 "Local API is not enabled" when switched off. Built from the same fixture
items as `zoterofixture.build_zotero_dir`.

Writes, written from Zotero's source (tag 10.0.0; the facts with file and line are in
/work/notes/zotero-write-facts.md, and tests/unit/test_fake_zotero_writes.py pins each one):
- `zotero_version` 7, 8, 9: the local API is read-only (POST -> 400 "Endpoint does not support
  method", PUT/PATCH/DELETE -> 501), no `/api/local/authorize`, no `Zotero-Server-ID`.
- `zotero_version` 10: `POST /api/local/authorize` with the dialog's answer set by the test
  (`dialog_answer`: "allow", "always", "deny", "dismiss" = Escape, which Zotero reads as Always
  Allow, or "hang": the request stays open until `answer_dialog()` or `stop()`), 5 prompts a minute
  then 429, single-use and remembered keys, `Zotero-Server-ID` (428 when a write lacks it, 412 when
  it differs), POST (<= 50 objects) / PUT / PATCH / DELETE of items and collections with local
  versions, `If-Unmodified-Since-Version`, `Zotero-Write-Token`, trash via `deleted`, `since` on
  listings. A new object sent with a key of the client's fails, as in Zotero 10.0 ("'primaryData'
  not loaded", seen in a real one): Zotero gives new objects their keys.
- every version: `/connector/ping` and `/connector/saveItems` (saved into `selected_collection`,
  keys chosen by Zotero, 201 with an empty body, 409 for a sessionID seen since Zotero started).

Reads show the writes: both work on `items` / `collections`, the objects as Zotero holds them.
`stop()` / `start()` close and reopen the same port like quitting and restarting Zotero: objects,
versions, keys and the server ID survive (database, localAPIKeys.json); write tokens, the prompt
rate limit and connector sessions do not (memory). `fail_next_write()` answers the next write
500 without applying it; `drop_after_next_write()` applies it and hangs up without an answer.
`received` records every request (method, path, headers, body).

`huge_page_bytes` makes `users/0/items` answer a JSON page that big instead, generated as it is
sent (with or without Content-Length: `huge_page_length`), so the test process never holds it;
`bytes_sent` counts what the handler managed to write before the client hung up.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import socket
import string
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from zoterofixture import FixtureCollection, FixtureItem

from zocratesd.demo.zotero_dir import Creator

# Zotero's limits and answers. "LAPI" is chrome/content/zotero/xpcom/server/server_localAPI.js,
# "SRV" server.js, "CONN" server_connector.js, at tag 10.0.0 (line numbers).
MAX_WRITE_OBJECTS = 50  # LAPI l.95
MAX_DELETE_OBJECTS = 50  # LAPI l.98
AUTHORIZE_RATE_LIMIT_MAX = 5  # LAPI l.130: prompts per window
AUTHORIZE_RATE_LIMIT_WINDOW_S = 60.0  # LAPI l.131
WRITE_TOKEN_TTL_S = 12 * 60 * 60  # LAPI l.104
CONNECTOR_API_VERSION = 3  # CONN l.25
OBJECT_KEY_CHARS = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"  # Zotero.Utilities.isValidObjectKey
OBJECT_KEY_RE = re.compile(f"^[{OBJECT_KEY_CHARS}]{{8}}$")
APP_VERSIONS = {7: "7.0.32", 8: "8.0.4", 9: "9.0.6", 10: "10.0.0"}  # X-Zotero-Version, one release of each
DIALOG_ANSWERS = ("allow", "always", "deny", "dismiss", "hang")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# SRV l.31-46: Zotero writes its own status line and has no phrase for 401/413/428/429 ("undefined")
REASONS = {200: "OK", 201: "Created", 204: "No Content", 300: "Multiple Choices", 304: "Not Modified", 400: "Bad Request",
           403: "Forbidden", 404: "Not Found", 409: "Conflict", 412: "Precondition Failed", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable", 504: "Gateway Timeout"}
ITEM_TYPES = frozenset(
    "annotation artwork attachment audioRecording bill blogPost book bookSection case computerProgram conferencePaper dataset "
    "dictionaryEntry document email encyclopediaArticle film forumPost gazette hearing instantMessage interview journalArticle "
    "letter magazineArticle manuscript map newspaperArticle note patent podcast preprint presentation radioBroadcast report "
    "standard statute thesis tvBroadcast videoRecording webpage".split())
# Item.fromJSON handles these apart from plain fields (item.js l.5683-5700)
_ITEM_SPECIAL = frozenset({"key", "version", "itemType", "note", "collections", "parentItem", "deleted", "inPublications", "tags",
                           "relations", "creators", "dateAdded", "dateModified", "md5", "mtime"})
# ItemSaver drops these from translator JSON (translate_item.js l.536-553); `key` is ignored by fromJSON
_CONNECTOR_STRIPPED = frozenset({"attachments", "notes", "dateAdded", "dateModified", "seeAlso", "version", "id", "itemID", "path", "key"})
_LIBRARY = {"type": "user", "id": 0, "name": "My Library"}

Reply = tuple[int, dict[str, str], bytes] | None  # None: close the connection without an answer


class _Fail(Exception):
    """What Zotero answers for a bad write. `plain` marks a plain JS Error (not HTTPError): code 400 in
    a multi-object result, an unhandled 500 in a single-object write (LAPI l.2216-2224, l.2694)."""

    def __init__(self, status: int, message: str, *, plain: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.plain = plain


@dataclass
class Received:
    """A request as the stand-in got it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Dialog:
    answer: str | None = None
    answered: threading.Event = field(default_factory=threading.Event)


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _random(n: int, chars: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(chars) for _ in range(n))


def _js_int(value: Any) -> int | None:
    """JavaScript's parseInt as Zotero applies it to a header or a `version`: None for NaN."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    m = re.match(r"\s*([+-]?\d+)", str(value))
    return int(m.group(1)) if m else None


def _creator_json(c: Creator | tuple[str, str] | str) -> dict[str, str]:
    if isinstance(c, str):
        return {"creatorType": "author", "name": c}
    if isinstance(c, tuple):
        return {"creatorType": "author", "firstName": c[0], "lastName": c[1]}
    if c.single_field:
        return {"creatorType": c.creator_type, "name": c.last}
    return {"creatorType": c.creator_type, "firstName": c.first, "lastName": c.last}


def _item_json(item: FixtureItem, version: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": item.key, "version": version, "itemType": item.item_type,
        "caseName" if item.item_type == "case" else "title": item.title,
        "creators": [_creator_json(c) for c in item.creators],
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


def _clean_tags(tags: Any, force_type: int | None = None) -> list[dict[str, Any]]:
    """Zotero.Tags.cleanData (tags.js l.908-923): `tag` required, type 0 or 1, type 0 left out."""
    if not isinstance(tags, list):
        raise _Fail(400, "'tags' property must be an array", plain=True)
    out: list[dict[str, Any]] = []
    for t in tags:
        t = {"tag": t} if isinstance(t, str) else t
        if not isinstance(t, dict) or t.get("tag") is None:
            raise _Fail(400, "Tag data must contain 'tag' property", plain=True)
        kind = force_type if force_type is not None else t.get("type", 0)
        if kind not in (0, 1, "0", "1", None):
            raise _Fail(400, "Tag 'type' must be 0 or 1", plain=True)
        tag = str(t["tag"]).strip()
        if force_type is not None and not tag:
            continue  # the connector's ItemSaver skips blank tags (translate_item.js l.1065)
        out.append({"tag": tag, "type": 1} if _js_int(kind) == 1 else {"tag": tag})
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    skip = ("version", "dateModified")
    return {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a dialog left hanging must not keep stop() waiting
    block_on_close = False

    def server_bind(self) -> None:
        # Shared with the placeholder that holds the port while Zotero is closed (`_hold_port`).
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def _hold_port(port: int) -> socket.socket:
    """Zotero closed: its port bound and never listening, so a connect is refused at once (as on a
    port nothing holds) and no other test's server can take the port before Zotero starts again."""
    s = socket.socket()
    # SO_REUSEPORT alone: Zotero's own server shares it (same user, both set); a server that sets
    # SO_REUSEADDR (as most do) is still refused, which it would not be if this set it too.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    return s


class FakeZoteroApi:
    """Start with `FakeZoteroApi(items, collections)`; `base_url` to point the daemon at; `close()`.

    Test handles: `items` / `collections` (Web API JSON objects: {key, version, library, meta, data}),
    `item(key)` / `collection(key)`, `library_version`, `received`, `requests` (GET paths, older tests),
    `server_id`, `dialog_answer`, `prompts`, `prompt_app_names`, `wait_for_prompts(n)`, `answer_dialog(a)`,
    `api_keys`, `selected_collection`, `automatic_tags`, `connector_sessions`, `fail_next_write()`,
    `drop_after_next_write()`, `stop()`, `start()`.
    """

    def __init__(self, items: list[FixtureItem], collections: list[FixtureCollection], *, schema_version: int = 31,
                 fulltext: bool = True, enabled: bool = True, zotero_version: int = 9, server_id: str | None = None,
                 port: int = 0):
        if zotero_version not in APP_VERSIONS:
            raise ValueError(f"zotero_version must be one of {sorted(APP_VERSIONS)}")
        self.zotero_version = zotero_version
        self.enabled = enabled
        self.fulltext = fulltext
        self.library_version = 100
        self.requests: list[str] = []
        self.received: list[Received] = []
        self.huge_page_bytes = 0
        self.huge_page_length = True
        self.bytes_sent = 0
        self._versions: dict[str, tuple[str, int]] = {}  # key -> (object JSON, its version)
        self.set_library(items, collections)
        self.schema_version = schema_version
        # Zotero 10: LAPI l.779-790, 12 characters kept in the database; a test changes it to play a reset profile
        self.server_id = server_id or _random(12)
        self.dialog_answer = "allow"
        self.prompts = 0
        self.prompt_app_names: list[str] = []
        self.api_keys: dict[str, dict[str, Any]] = {}  # localAPIKeys.json: key -> {appName, remember}
        self.selected_collection: str | None = None  # the collection selected in Zotero's pane: the connector saves there
        self.automatic_tags = True  # Zotero's "automaticTags" pref: off drops every tag the connector brings
        self.connector_sessions: set[str] = set()
        self._write_tokens: dict[str, float] = {}
        self._authorize_times: list[float] = []
        self._dialogs: list[_Dialog] = []
        self._injected: str | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._handler = self._make_handler()
        self._httpd: _Server | None = None
        self._held: socket.socket | None = None  # the port while Zotero is closed
        self.port = port
        self.start()

    # ---- process life -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def app_version(self) -> str:
        return APP_VERSIONS[self.zotero_version]

    def start(self) -> None:
        """Zotero starts (again) on the same port: what it kept in memory is gone."""
        if self._httpd is not None:
            return
        with self._lock:
            self._write_tokens.clear()
            self._authorize_times.clear()
            self.connector_sessions.clear()
        self._httpd = _Server(("127.0.0.1", self.port), self._handler)
        self.port = self._httpd.server_address[1]
        if self._held is not None:
            self._held.close()
            self._held = None
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Zotero quits: its port refuses connections, an open dialog's request is cut off unanswered."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._held = _hold_port(self.port)
        with self._lock:
            dialogs, self._dialogs = self._dialogs, []
        for d in dialogs:
            d.answer = None
            d.answered.set()
        httpd.shutdown()
        httpd.server_close()

    def close(self) -> None:
        self.stop()
        if self._held is not None:
            self._held.close()
            self._held = None

    # ---- test handles -------------------------------------------------------------------------

    def item(self, key: str) -> dict[str, Any] | None:
        """The item's `data` as Zotero holds it now, or None once erased."""
        obj = self._find("item", key)
        return obj["data"] if obj else None

    def collection(self, key: str) -> dict[str, Any] | None:
        obj = self._find("collection", key)
        return obj["data"] if obj else None

    def fail_next_write(self) -> None:
        """The next write (local API or saveItems) gets an empty 500 and changes nothing (a single-use key is spent)."""
        self._injected = "fail"

    def drop_after_next_write(self) -> None:
        """The next write is applied, then the connection closes without an answer."""
        self._injected = "drop"

    def wait_for_prompts(self, n: int, timeout: float = 30.0) -> bool:
        """Wait until Zotero has shown `n` authorization dialogs in all."""
        with self._changed:
            return self._changed.wait_for(lambda: self.prompts >= n, timeout)

    def answer_dialog(self, answer: str) -> int:
        """The user answers the dialogs left open ("hang"); returns how many were open."""
        if answer not in DIALOG_ANSWERS or answer == "hang":
            raise ValueError(answer)
        with self._lock:
            dialogs, self._dialogs = self._dialogs, []
        for d in dialogs:
            d.answer = answer
            d.answered.set()
        return len(dialogs)

    def set_library(self, items: list[FixtureItem], collections: list[FixtureCollection]) -> None:
        self.library_version += 1
        v = self.library_version
        self.items: list[dict[str, Any]] = []
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
        self.collections: list[dict[str, Any]] = []
        for c in collections:
            cdata: dict[str, Any] = {"key": c.key, "version": v, "name": c.name, "parentCollection": c.parent or False, "relations": {}}
            if c.trashed:
                cdata["deleted"] = True
            self.collections.append({"key": c.key, "version": v, "data": cdata, "meta": {}})

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

    # ---- HTTP -------------------------------------------------------------------------------

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # as Zotero's server answers

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                length = headers.get("content-length", "")
                body = self.rfile.read(int(length)) if length.isdigit() else b""
                with server._lock:
                    server.received.append(Received(method, self.path, headers, body))
                if method == "GET":
                    self._get(headers)
                    return
                reply = server.dispatch(method, self.path, headers, body)
                if reply is None:
                    self.close_connection = True  # hang up unanswered
                    return
                status, hdrs, out = reply
                # SRV l.273-302: Zotero's own status line; a body goes without Content-Length (HTTP/1.0, close)
                self.send_response_only(status, REASONS.get(status, "undefined"))
                for k, v in {"X-Zotero-Version": server.app_version, "X-Zotero-Connector-API-Version": str(CONNECTOR_API_VERSION),
                             **hdrs}.items():
                    self.send_header(k, v)
                if not out:
                    self.send_header("Content-Length", "0")
                self.end_headers()
                if out:
                    self.wfile.write(out)

            def _get(self, headers: dict[str, str]) -> None:
                url = urlsplit(self.path)
                early = server.check_get(url, headers)
                if early is False:
                    self.close_connection = True  # hang up unanswered
                    return
                server.requests.append(self.path)
                if early is not True:
                    status, hdrs, body = early
                elif server.huge_page_bytes and url.path == "/api/users/0/items" and "format=keys" not in url.query:
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
                else:
                    with server._lock:
                        status, hdrs, body = server.answer(self.path)
                    if server.zotero_version >= 10 and url.path.startswith("/api/") and "Zotero-API-Version" in hdrs:
                        hdrs = {**hdrs, "Zotero-Server-ID": server.server_id}  # LAPI l.594: on every local API answer
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        for method in ("GET", *WRITE_METHODS, "HEAD", "OPTIONS"):  # BaseHTTPRequestHandler calls do_<METHOD>
            setattr(Handler, f"do_{method}", lambda h, m=method: h._serve(m))
        return Handler

    def check_get(self, url: SplitResult, headers: dict[str, str]) -> bool | tuple[int, dict[str, str], bytes]:
        """What Zotero answers to a GET before its endpoint runs: False = hang up, True = go on."""
        if not self._host_ok(headers):
            return 400, {"Content-Type": "text/plain"}, b"Invalid Host header\n"
        if self._browser_blocked(url.path, headers):
            return False
        if self.zotero_version >= 10 and url.path.startswith("/api/") and self.enabled:
            sid = headers.get("zotero-server-id")
            if sid and sid != self.server_id:  # LAPI l.634-636: optional on reads, but it must match
                return self._api_reply(412, "Zotero-Server-ID does not match this server")
        return True

    @staticmethod
    def _host_ok(headers: dict[str, str]) -> bool:
        # SRV l.323-328: DNS-rebinding guard
        return bool(re.match(r"^(?:127\.0\.0\.1|\[::1\]|localhost)(?::[0-9]+)?$", headers.get("host", ""), re.I))

    @staticmethod
    def _browser_blocked(path: str, headers: dict[str, str]) -> bool:
        # SRV l.412-430: a browser's request without the connector's headers is cut off unanswered
        browser = headers.get("user-agent", "").startswith("Mozilla/") or "origin" in headers
        return (browser and "x-zotero-connector-api-version" not in headers and "zotero-allowed-request" not in headers
                and not (path == "/connector/ping" and headers.get("sec-fetch-mode") == "navigate"))

    def _routes(self) -> list[tuple[re.Pattern[str], str, tuple[str, ...]]]:
        """(path pattern, endpoint, supported methods) as Zotero registers them (LAPI l.974-1238, CONN)."""
        v10 = self.zotero_version >= 10
        lst = ("GET", "POST", "DELETE") if v10 else ("GET",)
        one = ("GET", "PUT", "PATCH", "DELETE") if v10 else ("GET",)
        u = r"^/api/users/(?P<uid>[^/]+)"
        routes: list[tuple[re.Pattern[str], str, tuple[str, ...]]] = [
            (re.compile(r"^/connector/ping$"), "ping", ("GET", "POST")),
            (re.compile(r"^/connector/saveItems$"), "saveItems", ("POST",)),
            (re.compile(r"^/api/$"), "root", ("GET",)),
            (re.compile(u + r"/items(?:/trash)?(?:/top)?(?:/tags)?$"), "items", lst),
            (re.compile(u + r"/items/(?P<key>[^/]+)/children$"), "items", lst),
            (re.compile(u + r"/items/(?P<key>[^/]+)/fulltext$"), "fulltext", ("GET", "PUT") if v10 else ("GET",)),
            (re.compile(u + r"/items/(?P<key>[^/]+)$"), "item", one),
            (re.compile(u + r"/collections(?:/top)?$"), "collections", lst),
            (re.compile(u + r"/collections/(?P<key>[^/]+)/collections$"), "collections", lst),
            (re.compile(u + r"/collections/(?P<key>[^/]+)/items(?:/top)?(?:/tags)?$"), "items", lst),
            (re.compile(u + r"/collections/(?P<key>[^/]+)$"), "collection", one),
        ]
        if v10:
            routes.insert(2, (re.compile(r"^/api/local/authorize$"), "authorize", ("POST",)))
        return routes

    def dispatch(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Every request but GET, in the order Zotero's server.js and server_localAPI.js check it."""
        url = urlsplit(raw_path)
        plain = {"Content-Type": "text/plain"}
        if not self._host_ok(headers):
            return 400, plain, b"Invalid Host header\n"
        route = next(((m, name, methods) for rx, name, methods in self._routes() if (m := rx.match(url.path))), None)
        if route is None:
            return 404, plain, b"No endpoint found\n"  # SRV l.362
        match, name, methods = route
        if method in ("HEAD", "OPTIONS"):
            return 200, {}, b""  # SRV l.367-369
        transport = ("POST", "PUT", "PATCH", "DELETE") if self.zotero_version >= 10 else ("POST",)
        if method not in transport:
            return 501, plain, b"Method not implemented\n"  # SRV l.392-394; 9.0.6 l.383
        if not headers.get("content-length", "").isdigit() and method != "DELETE":
            return 400, plain, b"Content-length not provided\n"  # SRV l.379-387
        if method not in methods:
            return 400, plain, b"Endpoint does not support method\n"  # SRV l.407-409
        if self._browser_blocked(url.path, headers):
            return None
        ctype = headers.get("content-type", "").split(";")[0].strip()
        accepted = {"authorize": ("application/json",), "saveItems": ("application/json",), "ping": ("application/json", "text/plain")}
        if ctype and name in accepted and ctype not in accepted[name]:
            return 400, plain, b"Endpoint does not support content-type\n"  # SRV l.436-440
        data: Any = None
        if ctype == "application/json":
            try:
                data = json.loads(body.decode())
            except ValueError:
                return 400, plain, b"Invalid JSON provided\n"  # SRV l.444-450
        elif ctype:
            data = body.decode()
        if name == "ping":
            return self._ping_post()
        if name == "saveItems":
            return self._save_items(headers, data)
        return self._api_write(method, url, name, match, headers, data)

    # ---- the local API (Zotero 10) -------------------------------------------------------------

    def _api_reply(self, status: int, ctype_or_headers: str | dict[str, str], body: str | bytes = b"") -> tuple[int, dict[str, str], bytes]:
        """LAPI makeResponse l.586-596: every local API answer names the API, schema and server."""
        hdrs = {"Content-Type": ctype_or_headers} if isinstance(ctype_or_headers, str) else dict(ctype_or_headers)
        if isinstance(body, str):
            body = body.encode()
        hdrs.update({"Zotero-API-Version": "3", "Zotero-Schema-Version": str(self.schema_version), "Zotero-Server-ID": self.server_id})
        return status, hdrs, body

    def _text(self, status: int, message: str) -> tuple[int, dict[str, str], bytes]:
        return self._api_reply(status, "text/plain", message)

    def _api_write(self, method: str, url: SplitResult, name: str, match: re.Match[str], headers: dict[str, str], data: Any) -> Reply:
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if not self.enabled:
            return self._text(403, "Local API is not enabled")  # LAPI l.249-251
        sid = headers.get("zotero-server-id")
        if not sid:
            return self._text(428, "Zotero-Server-ID not provided")  # LAPI l.627-631
        if sid != self.server_id:
            return self._text(412, "Zotero-Server-ID does not match this server")  # LAPI l.634-636
        if name == "authorize":
            return self._authorize(data)
        api_version = _js_int(headers.get("zotero-api-version") or query.get("v") or 3)
        if api_version != 3:
            return self._text(501, f"API version not implemented: {api_version}")  # LAPI l.271-279
        if match.group("uid") != "0":
            return self._text(400, "Only data for the logged-in user is available locally -- use userID 0")  # LAPI l.281-291
        denied = self._authenticate(headers, query)
        if denied is not None:
            return denied
        key = match.groupdict().get("key")
        with self._lock:
            if name in ("items", "collections"):
                kind = name[:-1]
                if key is not None or url.path.rstrip("/").endswith(("/top", "/trash", "/tags")):
                    return self._text(405, "Method not allowed for this path")  # LAPI l.1053-1064, l.978-990
                if method == "POST":
                    return self._write_many(kind, headers, data)
                return self._delete_many(kind, headers, query)
            if name in ("item", "collection") and key is not None:
                if method == "DELETE":
                    return self._delete_one(name, key, headers)
                return self._write_one(name, key, method == "PATCH", headers, data)
        return self._text(400, "Endpoint does not support method")  # fulltext writes are not modelled

    def _authorize(self, data: Any) -> Reply:
        """LAPI AuthorizeLocal l.823-868 and the dialog l.1661-1677."""
        if not isinstance(data, dict) or not isinstance(data.get("appName"), str) or not data["appName"].strip():
            return self._text(400, "appName is required")
        app_name = data["appName"].strip()
        with self._changed:
            now = time.monotonic()
            self._authorize_times = [t for t in self._authorize_times if now - t < AUTHORIZE_RATE_LIMIT_WINDOW_S]
            if len(self._authorize_times) >= AUTHORIZE_RATE_LIMIT_MAX:
                wait = AUTHORIZE_RATE_LIMIT_WINDOW_S - (now - self._authorize_times[0])
                return self._api_reply(429, {"Content-Type": "text/plain", "Retry-After": str(max(1, math.ceil(wait)))},
                                       "Too many authorization requests")
            self._authorize_times.append(now)
            self.prompts += 1
            self.prompt_app_names.append(app_name)
            answer: str | None = self.dialog_answer
            dialog = _Dialog()
            if answer == "hang":
                self._dialogs.append(dialog)
            self._changed.notify_all()
        if answer == "hang":
            dialog.answered.wait()
            answer = dialog.answer
            if answer is None:
                return None  # Zotero quit with the dialog open
        if answer == "deny":
            return self._api_reply(403, "application/json", json.dumps({"denied": True}, separators=(",", ":")))
        # button 1 is "Always Allow", and Gecko's dialog returns 1 when dismissed (Escape, close box)
        remember = answer in ("always", "dismiss")
        key = _random(32)  # LAPI l.173
        with self._lock:
            self.api_keys[key] = {"appName": app_name, "remember": remember, "createdAt": _now_iso()}
        return self._api_reply(200, "application/json", json.dumps({"key": key, "remember": remember}, separators=(",", ":")))

    def _authenticate(self, headers: dict[str, str], query: dict[str, str]) -> Reply | None:
        """LAPI _authenticateWriteRequest l.652-682. Its 401s skip makeResponse: no Zotero-* headers."""
        key = headers.get("zotero-api-key") or query.get("key") or ""
        if not key:
            m = re.match(r"^Bearer\s+([a-zA-Z0-9]+)$", headers.get("authorization", "").strip(), re.I)
            key = m.group(1) if m else ""
        if not key:
            return 401, {"Content-Type": "text/plain", "WWW-Authenticate": 'Zotero-API-Key realm="Zotero Local API"'}, \
                b"API key required -- POST /api/local/authorize to obtain one"
        with self._lock:
            entry = self.api_keys.get(key)
            if entry is None:
                return 401, {"Content-Type": "text/plain"}, b"Invalid or expired API key"
            if not entry["remember"]:
                del self.api_keys[key]  # consumed on validation, before the write runs (LAPI l.189-202)
        return None

    def _take_injected(self) -> str | None:
        injected, self._injected = self._injected, None
        return injected

    def _check_write_token(self, headers: dict[str, str]) -> str | None:
        # LAPI l.694-710
        token = headers.get("zotero-write-token")
        if not token:
            return None
        if not 5 <= len(token) <= 32:
            raise _Fail(400, "Write token must be 5-32 characters in length")
        now = time.monotonic()
        self._write_tokens = {t: exp for t, exp in self._write_tokens.items() if exp > now}
        if token in self._write_tokens:
            raise _Fail(412, "Write token already used")
        return token

    def _check_library_version(self, headers: dict[str, str], *, required: bool) -> bool:
        # LAPI l.721-738
        header = headers.get("if-unmodified-since-version")
        if header is None:
            if required:
                raise _Fail(428, "If-Unmodified-Since-Version not provided")
            return False
        value = _js_int(header)
        if value is None or value < 0:
            raise _Fail(400, "Invalid If-Unmodified-Since-Version value")
        if self.library_version > value:
            raise _Fail(412, f"Library has been modified since specified version (expected {value}, found {self.library_version})")
        return True

    @staticmethod
    def _check_object_version(kind: str, existing: dict[str, Any], headers: dict[str, str]) -> None:
        """If-Unmodified-Since-Version against the object's own version (LAPI l.2177-2192, l.2318-2333)."""
        header = headers.get("if-unmodified-since-version")
        if header is None:
            raise _Fail(428, "If-Unmodified-Since-Version not provided")
        expected = _js_int(header)
        if expected is None or expected < 0:
            raise _Fail(400, "Invalid If-Unmodified-Since-Version value")
        if existing["version"] > expected:
            raise _Fail(412, f"{kind} has been modified since specified version (expected {expected}, found {existing['version']})")

    @staticmethod
    def _parse_body(data: Any) -> Any:
        # LAPI l.744-761
        if data is None or data == "":
            raise _Fail(400, "Empty request body")
        if isinstance(data, str):
            try:
                return json.loads(data)
            except ValueError as e:
                raise _Fail(400, f"Invalid JSON: {e}") from None
        return data

    def _valid_key(self, key: Any) -> str:
        """LAPI validateObjectKey l.1881-1886. The fixtures' keys (LEWIS202) have letters Zotero never uses (0, 1, O):
        an object the stand-in holds passes, as every key in a real Zotero database would."""
        if not isinstance(key, str) or not (OBJECT_KEY_RE.match(key) or self._find("item", key) or self._find("collection", key)):
            raise _Fail(400, f"Invalid key: '{key}'")
        return key

    def _last_modified(self) -> dict[str, str]:
        return {"Last-Modified-Version": str(self.library_version)}

    def _write_many(self, kind: str, headers: dict[str, str], data: Any) -> Reply:
        """LAPI writeMultipleObjects l.2004-2121 and MultiWriteResults l.2669-2717."""
        try:
            token = self._check_write_token(headers)
            validated = self._check_library_version(headers, required=False)
            body = self._parse_body(data)
        except _Fail as e:
            return self._text(e.status, e.message)
        if not isinstance(body, list):
            return self._text(400, "Uploaded data must be a JSON array")
        if not body:
            return self._text(400, f"No {kind}s provided")
        if len(body) > MAX_WRITE_OBJECTS:
            return self._text(413, f"Cannot add more than {MAX_WRITE_OBJECTS} {kind}s at a time")
        injected = self._take_injected()
        if injected == "fail":
            return 500, {}, b""
        results: dict[str, dict[str, Any]] = {"successful": {}, "success": {}, "unchanged": {}, "failed": {}}
        for i, entry in enumerate(body):
            provided = ""
            try:
                if not isinstance(entry, dict):
                    raise _Fail(400, f"Invalid value for index {i} in uploaded data; expected JSON {kind} object")
                provided = entry["key"] if isinstance(entry.get("key"), str) else ""
                existing = None
                if provided:
                    self._valid_key(provided)
                    if not validated and entry.get("version") is None:
                        raise _Fail(428, "Either If-Unmodified-Since-Version or 'version' property must be provided for 'key'-based writes")
                    existing = self._find(kind, provided)
                    if existing is not None:
                        if entry.get("version") is not None:
                            expected = _js_int(entry["version"])
                            if expected is None:
                                raise _Fail(400, "Invalid version value")
                            if expected != existing["version"]:
                                raise _Fail(412, f"{kind} version mismatch: expected {expected}, found {existing['version']}")
                        entry = {**existing["data"], **entry}  # POST follows PATCH semantics
                    elif (_js_int(entry.get("version")) or 0) > 0:
                        raise _Fail(404, f"{kind} doesn't exist (expected version {_js_int(entry['version'])}; use 0 instead)")
                    else:
                        # LAPI l.2079-2081 (makeNewObject, then obj.key =): the key is set on an object whose
                        # primary data is not loaded, and fromJSON then fails; MultiWriteResults gives a
                        # plain Error code 400. Seen in a real Zotero 10.0 for items and collections.
                        raise _Fail(400, f"'primaryData' not loaded for {kind} (null/1/{provided})")
                saved = self._save(kind, provided or None, entry, existing)
                if saved is None:
                    results["unchanged"][str(i)] = provided
                else:
                    results["successful"][str(i)] = saved
                    results["success"][str(i)] = saved["key"]
            except _Fail as e:
                results["failed"][str(i)] = {"key": provided, "code": e.status, "message": e.message}
        if token:
            self._write_tokens[token] = time.monotonic() + WRITE_TOKEN_TTL_S
        if injected == "drop":
            return None
        return self._api_reply(200, {"Content-Type": "application/json", **self._last_modified()}, json.dumps(results, indent=4))

    def _write_one(self, kind: str, key: str, patch: bool, headers: dict[str, str], data: Any) -> Reply:
        """LAPI writeSingleObject l.2126-2235."""
        try:
            self._valid_key(key)
            body = self._parse_body(data)
        except _Fail as e:
            return self._text(e.status, e.message)
        if not isinstance(body, dict):
            return self._text(400, "Uploaded data must be a JSON object")
        existing = self._find(kind, key)
        if existing is not None:
            if body.get("version") is not None:
                expected = _js_int(body["version"])
                if expected is None:
                    return self._text(400, "Invalid version value")
                if expected != existing["version"]:
                    return self._text(412, f"{kind} version mismatch: expected {expected}, found {existing['version']}")
            else:
                try:
                    self._check_object_version(kind, existing, headers)
                except _Fail as e:
                    return self._text(e.status, e.message)
            if patch:
                body = {**existing["data"], **body}
        elif kind == "item" and not body.get("itemType"):
            return self._text(400, "itemType property not provided")
        else:
            return 500, {}, b""  # l.2206: a key set on a new object fails it (see _write_many), an unhandled Error
        injected = self._take_injected()
        if injected == "fail":
            return 500, {}, b""
        try:
            self._save(kind, key, body, existing)
        except _Fail as e:
            if e.plain:
                return 500, {}, b""  # an unhandled Error: SRV l.514-517 sends an empty 500
            return self._text(e.status, e.message)
        if injected == "drop":
            return None
        return self._api_reply(204, self._last_modified())

    def _delete_one(self, kind: str, key: str, headers: dict[str, str]) -> Reply:
        """LAPI deleteSingleObject l.2283-2342: erases (no trash), children with it."""
        try:
            self._valid_key(key)
        except _Fail as e:
            return self._text(e.status, e.message)
        existing = self._find(kind, key)
        if existing is None:
            return self._text(404, "Not found")
        try:
            self._check_object_version(kind, existing, headers)
        except _Fail as e:
            return self._text(e.status, e.message)
        injected = self._take_injected()
        if injected == "fail":
            return 500, {}, b""
        self._erase(kind, key)
        if injected == "drop":
            return None
        return self._api_reply(204, self._last_modified())

    def _delete_many(self, kind: str, headers: dict[str, str], query: dict[str, str]) -> Reply:
        """LAPI deleteMultipleObjects l.2242-2278 (`?itemKey=` / `?collectionKey=`)."""
        param = f"{kind}Key"
        try:
            self._check_library_version(headers, required=True)
            raw = query.get(param, "")
            keys = [k.strip() for k in raw.split(",") if k.strip()]
            if not keys:
                raise _Fail(400, f"'{param}' not provided")
            if len(keys) > MAX_DELETE_OBJECTS:
                raise _Fail(413, f"Cannot delete more than {MAX_DELETE_OBJECTS} objects at a time")
            for k in keys:
                self._valid_key(k)
        except _Fail as e:
            return self._text(e.status, e.message)
        injected = self._take_injected()
        if injected == "fail":
            return 500, {}, b""
        for k in keys:
            if self._find(kind, k) is not None:
                self._erase(kind, k)
        if injected == "drop":
            return None
        return self._api_reply(204, self._last_modified())

    # ---- the objects -----------------------------------------------------------------------

    def _find(self, kind: str, key: str) -> dict[str, Any] | None:
        objs = self.items if kind == "item" else self.collections
        return next((o for o in objs if o["key"] == key), None)

    def _bump(self) -> int:
        # dataObject.js l.1301-1306, library.js l.790-803: one library version per transaction
        self.library_version += 1
        return self.library_version

    def _build_item(self, key: str, j: dict[str, Any], existing: dict[str, Any] | None) -> dict[str, Any]:
        """Item.fromJSON (item.js l.5633-5979) as far as the JSON Zotero then returns."""
        old = existing["data"] if existing else {}
        item_type = j.get("itemType") or old.get("itemType")
        if not item_type:
            raise _Fail(400, "itemType property not provided")
        if item_type not in ITEM_TYPES:
            raise _Fail(400, f"Unknown item type '{item_type}'")
        data: dict[str, Any] = {"key": key, "version": old.get("version", 0), "itemType": item_type}
        child_kind = item_type in ("note", "attachment", "annotation")
        parent = str(j.get("parentItem") or "") if child_kind else ""
        if parent:
            parent_obj = self._find("item", parent)
            if parent_obj is None or parent_obj["data"]["itemType"] in ("note", "attachment", "annotation"):
                raise _Fail(400, f"Parent item {parent} not found", plain=True)  # the message is a guess
            data["parentItem"] = parent
        for k, v in j.items():
            if k not in _ITEM_SPECIAL:
                data[k] = v if isinstance(v, str) else str(v)
        if not child_kind:
            creators = j["creators"] if "creators" in j else old.get("creators", [])
            if not isinstance(creators, list):
                raise _Fail(400, "'creators' property must be an array", plain=True)
            data["creators"] = creators
        if child_kind and item_type != "annotation":
            note = j.get("note")
            data["note"] = note if isinstance(note, str) else ""
        data["tags"] = _clean_tags(j["tags"]) if "tags" in j else old.get("tags", [])
        collections = j.get("collections") or []
        if not isinstance(collections, list):
            raise _Fail(400, "'collections' property must be an array", plain=True)
        for c in collections:
            if self._find("collection", c) is None:
                raise _Fail(400, f"Collection {c} not found", plain=True)  # the message is a guess
        if parent:
            if collections:
                raise _Fail(400, "Child items cannot be assigned to collections", plain=True)  # the message is a guess
        else:
            data["collections"] = list(collections)  # a top-level item always lists them (item.js l.6090)
        data["relations"] = j["relations"] if "relations" in j else old.get("relations", {})
        if j.get("deleted"):
            data["deleted"] = True
        if j.get("inPublications"):
            data["inPublications"] = True
        if existing is None:
            data["dateAdded"] = data["dateModified"] = _now_iso()
        else:
            data.update({k: old[k] for k in ("dateAdded", "dateModified") if k in old})
        return data

    def _build_collection(self, key: str, j: dict[str, Any], existing: dict[str, Any] | None) -> dict[str, Any]:
        """Collection.fromJSON (collection.js l.793-824)."""
        if not j.get("name"):
            raise _Fail(400, "'name' property not provided for collection", plain=True)
        parent = str(j.get("parentCollection") or "")
        if parent and (parent == key or self._find("collection", parent) is None):
            raise _Fail(400, f"Parent collection {parent} not found", plain=True)  # the message is a guess
        data: dict[str, Any] = {"key": key, "version": existing["version"] if existing else 0, "name": str(j["name"]),
                                "parentCollection": parent or False, "relations": j.get("relations") or {}}
        if j.get("deleted"):
            data["deleted"] = True  # trash (collection.js l.821-823)
        return data

    def _save(self, kind: str, key: str | None, j: dict[str, Any], existing: dict[str, Any] | None, *,
              version: int | None = None) -> dict[str, Any] | None:
        """Validate and store one object; None when an existing one did not change. `version` set: part of a
        transaction that already has its version (the connector)."""
        if key is None:
            key = self._new_key()
        data = self._build_item(key, j, existing) if kind == "item" else self._build_collection(key, j, existing)
        if existing is not None and _same(existing["data"], data):
            return None
        v = self._bump() if version is None else version
        data["version"] = v
        data["dateModified"] = _now_iso()
        obj = {"key": key, "version": v, "library": dict(_LIBRARY), "meta": {}, "data": data}
        objs = self.items if kind == "item" else self.collections
        if existing is not None:
            objs[objs.index(existing)] = obj
        else:
            objs.append(obj)
        return obj

    def _new_key(self) -> str:
        while True:
            key = _random(8, OBJECT_KEY_CHARS)
            if self._find("item", key) is None and self._find("collection", key) is None:
                return key

    def _erase(self, kind: str, key: str) -> None:
        """Erase for good, as DELETE does: an item with its child notes and attachments (item.js l.5573-5583),
        a collection with its subcollections, its items staying in the library."""
        if kind == "item":
            gone = {key} | {o["key"] for o in self.items if o["data"].get("parentItem") == key}
            self.items = [o for o in self.items if o["key"] not in gone]
            for k in gone:
                self.texts.pop(k, None)
        else:
            gone = {key}
            while True:
                more = {c["key"] for c in self.collections if c["data"].get("parentCollection") in gone} - gone
                if not more:
                    break
                gone |= more
            self.collections = [c for c in self.collections if c["key"] not in gone]
            for o in self.items:
                if set(o["data"].get("collections", ())) & gone:
                    o["data"]["collections"] = [c for c in o["data"]["collections"] if c not in gone]
        self._bump()

    # ---- the connector (every version) -------------------------------------------------------

    def _ping_post(self) -> Reply:
        # CONN l.1100-1129
        prefs = {"automaticSnapshots": True, "downloadAssociatedFiles": True, "supportsAttachmentUpload": True,
                 "supportsTagsAutocomplete": True, "googleDocsAddNoteEnabled": True, "googleDocsAddAnnotationEnabled": True,
                 "canUserAddNote": True, "googleDocsCitationExplorerEnabled": False, "translatorsHash": "0", "sortedTranslatorHash": "0"}
        return 200, {"Content-Type": "application/json"}, json.dumps({"prefs": prefs}, separators=(",", ":")).encode()

    def _save_items(self, headers: dict[str, str], data: Any) -> Reply:
        """CONN SaveItems l.300-351, SESS create l.33-45 and saveItems l.75-99."""
        outdated = json.dumps({"error": "CONNECTOR_VERSION_OUTDATED"}, separators=(",", ":")).encode()
        sent = headers.get("x-zotero-connector-api-version")
        if sent is not None:
            try:
                if float(sent) < CONNECTOR_API_VERSION:
                    return 400, {"Content-Type": "application/json"}, outdated
            except ValueError:
                return 400, {"Content-Type": "application/json"}, outdated
        if not isinstance(data, dict):
            return 500, {}, b""  # data.sessionID on a non-object throws
        session = data.get("sessionID", None)
        if "sessionID" not in data:
            session = _random(10)
        with self._lock:
            sid = json.dumps(session)
            if sid in self.connector_sessions:
                return 409, {"Content-Type": "application/json"}, json.dumps({"error": "SESSION_EXISTS"}, separators=(",", ":")).encode()
            self.connector_sessions.add(sid)  # kept even when the save fails: SESS remove() misses the Map
            injected = self._take_injected()
            if injected == "fail":
                return 500, {}, b""
            try:
                self._connector_save(data.get("items"))
            except _Fail:
                return 500, {}, b""
        if injected == "drop":
            return None
        return 201, {"Content-Type": "application/json"}, b""  # l.343: no body, the new keys are not returned

    def _connector_save(self, items: Any) -> None:
        """ItemSaver.saveItems (translate_item.js l.94-196) in one transaction: all or nothing, one version.
        Before Zotero 10 the local API reports synced versions: 0 for what never synced, library unchanged."""
        if not isinstance(items, list):
            raise _Fail(500, "items is not an array")
        target = self.selected_collection if self.selected_collection and self._find("collection", self.selected_collection) else None
        in_target = [target] if target else []
        items_before, version_before = list(self.items), self.library_version
        version = self.library_version + 1 if self.zotero_version >= 10 else 0
        try:
            for j in items:
                if not isinstance(j, dict):
                    raise _Fail(500, "not an item")
                kind = j.get("itemType") or "webpage"
                if kind == "attachment":
                    continue  # ATTACHMENT_MODE_IGNORE: the connector sends files apart
                tags = _clean_tags(j.get("tags") or [], force_type=1) if self.automatic_tags else []
                if kind == "note":
                    self._save("item", None, {"itemType": "note", "note": j.get("note", ""), "tags": tags, "collections": in_target},
                               None, version=version)
                    continue
                fields = {k: v for k, v in j.items() if k not in _CONNECTOR_STRIPPED}
                fields["itemType"] = kind
                fields["tags"] = tags
                fields["collections"] = in_target
                fields["creators"] = [{"creatorType": "author", **c} if isinstance(c, dict) else c for c in j.get("creators") or []]
                if fields.get("accessDate") == "CURRENT_TIMESTAMP":
                    fields["accessDate"] = _now_iso()
                saved = self._save("item", None, fields, None, version=version)
                assert saved is not None
                for n in j.get("notes") or []:
                    note = n.get("note", "") if isinstance(n, dict) else n
                    note_tags = _clean_tags(n.get("tags") or [], force_type=1) if isinstance(n, dict) and self.automatic_tags else []
                    self._save("item", None, {"itemType": "note", "note": note, "parentItem": saved["key"], "tags": note_tags},
                               None, version=version)
        except _Fail:
            self.items, self.library_version = items_before, version_before  # the transaction rolls back
            raise
        self.library_version = max(self.library_version, version)

    # ---- reads -----------------------------------------------------------------------------

    def answer(self, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        """A GET: (status, headers, body)."""
        url = urlsplit(raw_path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path
        base = {"Zotero-API-Version": "3", "Zotero-Schema-Version": str(self.schema_version)}
        if path == "/connector/ping":
            return 200, {"Content-Type": "text/html"}, b"<!DOCTYPE html><html><body>Zotero is running</body></html>"
        if not path.startswith("/api/"):
            return 404, {"Content-Type": "text/plain"}, b"No endpoint found"
        if not self.enabled:
            return 403, {**base, "Content-Type": "text/plain"}, b"Local API is not enabled"
        if path == "/api/":
            return 200, {**base, "Content-Type": "text/plain"}, b"Nothing to see here."
        trashed = q.get("includeTrashed") == "1"
        parts = path.split("/")[3:]  # after /api/users
        if len(parts) < 2 or parts[0] != "0":
            return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
        rest = parts[1:]
        single: dict[str, Any] | None = None
        objs: list[dict[str, Any]]
        if rest in (["collections"], ["collections", "top"]):
            objs = [c for c in self.collections if not c["data"].get("deleted")]
            if rest[-1] == "top":
                objs = [c for c in objs if not c["data"].get("parentCollection")]
        elif len(rest) == 3 and rest[0] == "collections" and rest[2] == "collections":
            objs = [c for c in self.collections if c["data"].get("parentCollection") == rest[1] and not c["data"].get("deleted")]
        elif len(rest) == 2 and rest[0] == "collections":
            single = self._find("collection", rest[1])
            if single is None:
                return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
            objs = []
        elif rest in (["items"], ["items", "top"], ["items", "trash"]):
            if rest[-1] == "trash":
                objs = [i for i in self.items if i["data"].get("deleted")]
            else:
                objs = [i for i in self.items if trashed or not i["data"].get("deleted")]
            if rest[-1] == "top":
                objs = [i for i in objs if not i["data"].get("parentItem")]
            if "itemKey" in q:  # LAPI l.1117-1128: only these keys (of the listing the path names)
                wanted = set(q["itemKey"].split(","))
                objs = [i for i in objs if i["key"] in wanted]
        elif len(rest) == 3 and rest[0] == "collections" and rest[2] == "items":
            objs = [i for i in self.items if rest[1] in i["data"].get("collections", ()) and (trashed or not i["data"].get("deleted"))]
        elif len(rest) == 3 and rest[0] == "items" and rest[2] == "children":
            objs = [i for i in self.items if i["data"].get("parentItem") == rest[1] and (trashed or not i["data"].get("deleted"))]
        elif len(rest) == 3 and rest[0] == "items" and rest[2] == "fulltext":
            key = rest[1]
            if not self.fulltext:
                return 404, {"Content-Type": "text/plain"}, b"No endpoint found"
            if key not in self.texts:
                return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
            text = self.texts[key]
            pages = text.count("\f") + 1
            body = {"content": text, "indexedPages": pages, "totalPages": pages}
            return 200, {**base, "Content-Type": "application/json"}, json.dumps(body).encode()
        elif len(rest) == 2 and rest[0] == "items":
            single = self._find("item", rest[1])
            if single is None:
                return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
            objs = []
        else:
            return 404, {**base, "Content-Type": "text/plain"}, b"Not found"
        if single is not None:  # LAPI l.426-427: a single object's own version
            return 200, {**base, "Content-Type": "application/json", "Last-Modified-Version": str(single["version"])}, json.dumps(single).encode()
        if q.get("since", "0") != "0":  # LAPI l.332-339: objects whose version is newer
            since = int(q["since"])
            objs = [o for o in objs if o["version"] > since]
        total = len(objs)
        start = int(q.get("start", 0))
        limit = int(q.get("limit", 25))
        page = objs[start : start + limit]
        headers = {**base, "Content-Type": "application/json", "Total-Results": str(total),
                   "Last-Modified-Version": str(self.library_version)}
        if q.get("format") == "keys":
            return 200, {**headers, "Content-Type": "text/plain"}, "\n".join(o["key"] for o in page).encode()
        return 200, headers, json.dumps(page).encode()
