"""Writes through Zotero 10's local API (`http://127.0.0.1:23119/api/`), as Zotero 10.0.0's
`server_localAPI.js` defines it:

- every response carries `Zotero-Server-ID` (it follows Zotero's database); every write must send it
  back (428 without it, 412 when it names another database), `POST /api/local/authorize` included;
- a write needs a key from `POST /api/local/authorize {"appName"}`: Zotero shows its own dialog and
  the request stays open until the person answers. Allow gives a key consumed by its first write,
  Always Allow one that lasts (kept here, 0600, per server ID, never logged), Deny a 403. At most 5
  prompts a minute (429 with Retry-After). A key Zotero no longer knows is a 401;
- objects are written in batches of at most 50 with `POST .../items` (or `collections`): an object
  whose key exists is updated (its `version` must match). A new one must be sent without a key:
  Zotero 10.0.0 cannot make an object under a key the client chose (it sets the key on an object
  whose data is not loaded yet, and then fails it with "'primaryData' not loaded"), so Zotero gives
  the key, and the write records it. A retried creation first looks among the objects changed since
  the write was planned (`since=<library version>`) for the one an earlier attempt made;
- an array sent (tags, collections) replaces the object's array: tags are added or removed by sending
  the union or the difference with what Zotero holds, read just before;
- `deleted: 1` moves an item (or a collection) to Zotero's trash; DELETE would erase it, so undo
  never uses DELETE.

Zotero 7-9 answer writes with 400/501 and send no `Zotero-Server-ID`: this path then says it cannot
write and the next one is tried. Like the reader (library/local_api.py), it talks only to a listener
that belongs to this user, checked before each request that sends anything.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TypedDict

import httpx
import msgspec

from zocratesd import locations
from zocratesd.library._listeners import PROC_NET, listener_owner
from zocratesd.library.local_api import check_loopback
from zocratesd.limits import MAX_WRITE_ITEMS
from zocratesd.writes import operations as ops
from zocratesd.writes.notes import note_html
from zocratesd.writes.operations import Change, Operation
from zocratesd.writes.paths import NOT_RUNNING, NotNow, Refused

log = logging.getLogger(__name__)

APP_NAME: Final = "Zocrates"
API_VERSION: Final = "3"
KEY_FILE: Final = "zotero-local-api-key.json"
# Zotero answers a write of 50 objects in well under a second; a probe must fail fast when it is closed.
PROBE_TIMEOUT_S: Final = 3.0
WRITE_TIMEOUT_S: Final = 60.0
# Zotero's dialog keeps the authorize request open until the person answers: a person away from the
# desk is not an error. Past this the write waits and asks again.
AUTHORIZE_TIMEOUT_S: Final = 600.0
MAX_RESPONSE_BYTES: Final = 8 * 1024 * 1024
OFF_HINT: Final = ("Zotero's local API is off: in Zotero, Settings → Advanced → \"Allow other applications on this "
                   "computer to communicate with Zotero\"")


class Tag(TypedDict, total=False):
    tag: str
    type: int  # 1: automatic; absent: a tag a person gave


class ItemData(TypedDict, total=False):
    """The part of an item's JSON `data` a write reads (Zotero sends all its fields)."""

    key: str
    version: int
    tags: list[Tag]
    collections: list[str]


# An object as sent to Zotero's API: its fields are those of its item type, so their names vary.
Sent = dict[str, object]


def _prefix(library: str) -> str:
    return "/api/users/0" if library == "user" else f"/api/{library}"


class KeyStore:
    """The lasting key Zotero gave (Always Allow), per Zotero database (its server ID)."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / KEY_FILE

    def get(self, server_id: str) -> str | None:
        try:
            stored = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        key = stored.get(server_id) if isinstance(stored, dict) else None
        return key if isinstance(key, str) else None

    def put(self, server_id: str, key: str) -> None:
        locations.write_private_json(self.path, {server_id: key})

    def forget(self, server_id: str) -> None:
        if self.get(server_id) is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


class ZoteroLocalApi:
    """The `local_api` path (writes/paths.py)."""

    name = "local_api"

    def __init__(self, base_url: str, state_dir: Path, *, proc_net: Path | None = None, uid: int | None = None):
        self.base_url = check_loopback(base_url)
        url = httpx.URL(self.base_url)
        self.host, self.port = url.host, url.port or 80
        self.keys = KeyStore(state_dir)
        self.server_id: str | None = None
        self._proc_net = proc_net or PROC_NET
        self._uid = uid
        self._client = httpx.AsyncClient(
            base_url=self.base_url, trust_env=False, follow_redirects=False,
            headers={"Zotero-API-Version": API_VERSION, "Accept-Encoding": "identity", "User-Agent": "zocratesd"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    # --- the path's three calls ------------------------------------------------------------------

    async def ready(self, op: Operation) -> None:
        self._check_owner()
        try:
            r = await self._client.get("/api/", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            raise NotNow(NOT_RUNNING) from None
        if r.status_code == 403:
            raise NotNow(OFF_HINT)
        server_id = r.headers.get("Zotero-Server-ID")
        if r.status_code != 200 or not server_id:
            raise NotNow("this Zotero's local API cannot write (Zotero 10 can; in Zotero 7-9 the Zocrates plugin writes)")
        if self.server_id not in (None, server_id):
            log.info("Zotero's database changed (a new server ID): its old write key is forgotten")
            self.keys.forget(self.server_id or "")
        self.server_id = server_id

    async def plan(self, op: Operation) -> Change:
        match op:
            case ops.TagItems():
                current = await self._items(op.library, op.items)
                return Change(tags_added=_tag_delta(current, op.items, op.tags, adding=True))
            case ops.UntagItems():
                current = await self._items(op.library, op.items)
                return Change(tags_removed=_tag_delta(current, op.items, op.tags, adding=False))
            case ops.AddToCollection():
                current = await self._items(op.library, op.items)
                return Change(collection_added=tuple(k for k in op.items if op.collection not in current[k].get("collections", [])))
            case ops.SaveNote() | ops.AddItem() | ops.CreateCollection():
                return Change(library_version=await self._library_version(op.library))
            case ops.Retag() | ops.RemoveFromCollection() | ops.Trash():
                return Change()

    async def apply(self, op: Operation, change: Change) -> Change | None:
        match op:
            case ops.TagItems() | ops.UntagItems() | ops.Retag():
                add, remove = _retag_sets(op)
                current = await self._items(op.library, tuple({*add, *remove}))
                updates = []
                for key, data in current.items():
                    have = [t["tag"] for t in data.get("tags", [])]
                    want = [t for t in have if t not in remove.get(key, ())] + [t for t in add.get(key, ()) if t not in have]
                    if want != have:
                        kept = {t["tag"]: t for t in data.get("tags", [])}
                        updates.append({"key": key, "version": data["version"],
                                        "tags": [kept.get(t, {"tag": t}) for t in want]})
                await self._post(op.library, "items", updates)
            case ops.AddToCollection() | ops.RemoveFromCollection():
                current = await self._items(op.library, op.items)
                updates = []
                for key, data in current.items():
                    have = list(data.get("collections", []))
                    if isinstance(op, ops.AddToCollection) and op.collection not in have:
                        updates.append({"key": key, "version": data["version"], "collections": [*have, op.collection]})
                    elif isinstance(op, ops.RemoveFromCollection) and op.collection in have:
                        updates.append({"key": key, "version": data["version"],
                                        "collections": [c for c in have if c != op.collection]})
                await self._post(op.library, "items", updates)
            case ops.SaveNote() | ops.AddItem() | ops.CreateCollection():
                return await self._create(op, change)
            case ops.Trash():
                if op.items:
                    current = await self._items(op.library, op.items, missing_ok=True)
                    await self._post(op.library, "items",
                                     [{"key": k, "version": d["version"], "deleted": 1} for k, d in current.items()])
                if op.collections:
                    found = await self._collections(op.library, op.collections)
                    await self._post(op.library, "collections",
                                     [{"key": k, "version": d["version"], "deleted": True} for k, d in found.items()])
        return None

    async def _create(self, op: ops.SaveNote | ops.AddItem | ops.CreateCollection, change: Change) -> Change | None:
        """Make the object (Zotero gives its key): the change with that key. An earlier attempt's
        object, found by its content among what changed since the plan, is not made again."""
        kind, sent = _new_object(op)
        made = change.created_collections if kind == "collections" else change.created_items
        if made:  # recorded by an attempt that crashed before the write was marked applied
            return None
        if change.library_version is not None:
            earlier = await self._made_since(op.library, kind, sent, change.library_version)
            if earlier is not None:
                return _with_created(change, kind, earlier)
        result = await self._post(op.library, kind, [sent])
        key = result.get("successful", {}).get("0", {}).get("key")
        if not isinstance(key, str):
            raise NotNow("Zotero's answer to the write named no new object; it is tried again")
        return _with_created(change, kind, key)

    async def _library_version(self, library: str) -> int:
        try:
            r = await self._client.get(f"{_prefix(library)}/collections", params={"limit": "1", "format": "keys"},
                                       timeout=WRITE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise NotNow(f"Zotero did not answer ({type(exc).__name__})") from None
        version = r.headers.get("Last-Modified-Version", "")
        if r.status_code != 200 or not version.isdigit():
            raise NotNow(f"Zotero answered {r.status_code} to a read")
        return int(version)

    async def _made_since(self, library: str, kind: str, sent: Sent, version: int) -> str | None:
        """The key of an object changed after `version` that is the one `sent` describes."""
        found = await self._get_json(f"{_prefix(library)}/{kind}", {"since": str(version), "format": "json",
                                                                    "includeTrashed": "1", "limit": "100"})
        for obj in found if isinstance(found, list) else []:
            data = obj.get("data") if isinstance(obj, dict) else None
            if isinstance(data, dict) and all(_same_value(data.get(k), v) for k, v in sent.items()):
                return str(obj.get("key"))
        return None

    # --- reads ------------------------------------------------------------------------------------

    async def _get_json(self, path: str, params: dict[str, str]) -> Any:
        try:
            r = await self._client.get(path, params=params, timeout=WRITE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise NotNow(f"Zotero did not answer ({type(exc).__name__})") from None
        if r.status_code != 200 or len(r.content) > MAX_RESPONSE_BYTES:
            raise NotNow(f"Zotero answered {r.status_code} to a read")
        try:
            return r.json()
        except ValueError:
            raise NotNow("Zotero's answer to a read was not JSON") from None

    async def _items(self, library: str, keys: Sequence[str], *, missing_ok: bool = False) -> dict[str, ItemData]:
        """The items' current JSON `data` (with its version), trashed ones included."""
        if not keys:
            return {}
        found = await self._get_json(f"{_prefix(library)}/items",
                                     {"itemKey": ",".join(keys), "includeTrashed": "1", "format": "json"})
        if not isinstance(found, list):
            raise NotNow("Zotero's answer to a read was not a list of items")
        data: dict[str, ItemData] = {o["key"]: o["data"] for o in found
                                     if isinstance(o, dict) and o.get("key") in keys and isinstance(o.get("data"), dict)}
        missing = [k for k in keys if k not in data]
        if missing and not missing_ok:
            raise Refused(f"no item {', '.join(missing)} in your Zotero library any more; nothing was written")
        return data

    async def _collections(self, library: str, keys: Sequence[str]) -> dict[str, ItemData]:
        found = {}
        for key in keys:
            try:
                r = await self._client.get(f"{_prefix(library)}/collections/{key}", timeout=WRITE_TIMEOUT_S)
            except httpx.HTTPError as exc:
                raise NotNow(f"Zotero did not answer ({type(exc).__name__})") from None
            if r.status_code == 200:
                found[key] = r.json()["data"]
        return found

    # --- writes -----------------------------------------------------------------------------------

    async def _post(self, library: str, kind: str, objects: list[Sent]) -> dict[str, Any]:
        """One batch write (≤ 50 objects); Zotero's answer. A version that moved meanwhile (the person
        edited the item) is tried again with what Zotero then holds."""
        if not objects:
            return {}
        assert len(objects) <= MAX_WRITE_ITEMS
        key = await self._write_key()
        self._check_owner()
        headers = {"Zotero-API-Key": key, "Zotero-Server-ID": self.server_id or "", "Content-Type": "application/json"}
        try:
            r = await self._client.post(f"{_prefix(library)}/{kind}", content=json.dumps(objects), headers=headers,
                                        timeout=WRITE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise NotNow(f"Zotero did not answer the write ({type(exc).__name__}); it is tried again") from None
        if r.status_code == 401:
            self.keys.forget(self.server_id or "")
            raise NotNow("Zotero no longer accepts Zocrates's write key (its write authorizations were cleared); "
                         "Zotero will ask again")
        if r.status_code in (412, 428) and "Server-ID" in r.text:
            self.server_id = None
            raise NotNow("Zotero's database changed while writing; it is tried again")
        if r.status_code >= 500:
            raise NotNow(f"Zotero failed the write ({r.status_code}); it is tried again")
        if r.status_code != 200:
            raise Refused(f"Zotero refused the write: {r.status_code} {r.text[:200].strip()}")
        try:
            result = r.json()
        except ValueError:
            raise NotNow("Zotero's answer to the write was not JSON; it is tried again") from None
        failed = result.get("failed") if isinstance(result, dict) else None
        for index, failure in (failed if isinstance(failed, dict) else {}).items():
            if not (isinstance(failure, dict) and str(index).isdigit() and int(index) < len(objects)):
                raise NotNow("Zotero's answer to the write was not understood; it is tried again")
            code, message = failure.get("code"), str(failure.get("message", ""))[:200]
            sent = objects[int(index)]
            if code == 412:
                raise NotNow(f"{sent['key']} changed in Zotero while writing; it is tried again")
            raise Refused(f"Zotero refused {sent.get('key', 'the new object')}: {message}")
        return result if isinstance(result, dict) else {}

    async def _write_key(self) -> str:
        """A key for one write: the lasting one, else one from Zotero's dialog (the person answers in Zotero)."""
        assert self.server_id is not None, "ready() runs first"
        lasting = self.keys.get(self.server_id)
        if lasting:
            return lasting
        self._check_owner()
        try:
            r = await self._client.post("/api/local/authorize", json={"appName": APP_NAME},
                                        headers={"Zotero-Server-ID": self.server_id}, timeout=AUTHORIZE_TIMEOUT_S)
        except httpx.TimeoutException:
            raise NotNow("waiting for your answer in Zotero's dialog (Allow / Always Allow / Deny)") from None
        except httpx.HTTPError as exc:
            raise NotNow(f"Zotero did not answer ({type(exc).__name__})") from None
        if r.status_code == 403 and "denied" in r.text:
            raise Refused("you chose Deny in Zotero's dialog: nothing was written")
        if r.status_code == 429:
            raise NotNow(f"Zotero allows 5 permission prompts a minute; asking again in {r.headers.get('Retry-After', '60')} s")
        if r.status_code == 403:
            raise NotNow(OFF_HINT)
        if r.status_code in (412, 428):
            self.server_id = None
            raise NotNow("Zotero's database changed; it is tried again")
        try:
            answer = r.json()
            key = answer["key"]
        except (ValueError, KeyError, TypeError):
            raise NotNow(f"Zotero's answer to the permission request was not understood ({r.status_code})") from None
        if not isinstance(key, str) or not key.isalnum():
            raise NotNow("Zotero's answer to the permission request was not understood")
        if answer.get("remember"):
            self.keys.put(self.server_id, key)
        return key

    def _check_owner(self) -> None:
        owner = listener_owner(self.host, self.port, proc_net=self._proc_net, uid=self._uid)
        if owner.verdict == "foreign":
            raise NotNow(f"another user's program (uid {', '.join(map(str, owner.uids))}) listens on Zotero's port "
                         f"{self.port}: nothing is sent to it")
        if owner.verdict == "none":
            raise NotNow(NOT_RUNNING)


def _retag_sets(op: ops.TagItems | ops.UntagItems | ops.Retag) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    match op:
        case ops.TagItems():
            return {k: op.tags for k in op.items}, {}
        case ops.UntagItems():
            return {}, {k: op.tags for k in op.items}
        case ops.Retag():
            return dict(op.add), dict(op.remove)


def _tag_delta(
    current: dict[str, ItemData], items: Sequence[str], tags: Sequence[str], *, adding: bool,
) -> dict[str, tuple[str, ...]]:
    """Per item, the tags the write will really add (not there yet) or remove (there now)."""
    delta = {}
    for key in items:
        have = {t.get("tag") for t in current[key].get("tags", [])}
        changed = tuple(t for t in tags if (t not in have) == adding)
        if changed:
            delta[key] = changed
    return delta


def item_json(op: ops.AddItem) -> Sent:
    """A new item as Zotero's API writes it (without a key: Zotero gives it)."""
    item = op.item
    creators = [
        {"creatorType": c.creator_type, "name": c.name} if c.name and not c.last_name
        else {"creatorType": c.creator_type, "firstName": c.first_name, "lastName": c.last_name}
        for c in item.creators
    ]
    data: Sent = {"itemType": item.item_type, "title": item.title, "creators": creators, **item.fields}
    if op.collection:
        data["collections"] = [op.collection]
    return data


def _new_object(op: ops.SaveNote | ops.AddItem | ops.CreateCollection) -> tuple[str, Sent]:
    """Where a new object is written (`items` or `collections`) and what is sent."""
    match op:
        case ops.SaveNote():
            note: Sent = {"itemType": "note", "note": note_html(op.markdown, op.citations)}
            if op.parent:
                note["parentItem"] = op.parent
            if op.collection:
                note["collections"] = [op.collection]
            return "items", note
        case ops.AddItem():
            return "items", item_json(op)
        case ops.CreateCollection():
            return "collections", {"name": op.name, "parentCollection": op.parent or False}


def _with_created(change: Change, kind: str, key: str) -> Change:
    field = "created_collections" if kind == "collections" else "created_items"
    return msgspec.structs.replace(change, **{field: (key,)})


def _same_value(have: object, sent: object) -> bool:
    """Whether Zotero's stored value is the one sent (creators compared by their names and roles)."""
    if isinstance(sent, list) and isinstance(have, list):
        return len(sent) == len(have) and all(_same_value(h, x) for h, x in zip(have, sent, strict=True))
    if isinstance(sent, dict) and isinstance(have, dict):
        return all(_same_value(have.get(k), v) for k, v in sent.items())
    if sent is False or sent == "":
        return have in (False, None, "")
    return have == sent
