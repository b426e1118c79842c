"""The `connector` path: new items through the endpoint Zotero's browser connector uses
(`POST /connector/saveItems`, Zotero 7-10's `server_connector.js`), for a Zotero without the plugin
and without a local API that writes. It adds items only, and Zotero decides where:

- the item goes into the library and collection selected in Zotero's window (the caller cannot
  choose), and its tags become automatic tags;
- Zotero chooses the new item's key and answers 201 with an empty body, so the write cannot say
  which item it made, and its undo is the person's, in Zotero;
- a `sessionID` Zotero has seen since it started answers 409: the write's id is the session's, so a
  retry after a lost answer is not saved twice while Zotero runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import httpx

from zocratesd.library._listeners import PROC_NET, listener_owner
from zocratesd.library.local_api import check_loopback
from zocratesd.writes import operations as ops
from zocratesd.writes.operations import Change, Operation
from zocratesd.writes.paths import NOT_RUNNING, NotNow, Refused

PROBE_TIMEOUT_S: Final = 3.0
SAVE_TIMEOUT_S: Final = 60.0


class ZoteroConnector:
    name = "connector"

    def __init__(self, base_url: str, *, proc_net: Path | None = None, uid: int | None = None):
        self.base_url = check_loopback(base_url)
        url = httpx.URL(self.base_url)
        self.host, self.port = url.host, url.port or 80
        self._proc_net = proc_net or PROC_NET
        self._uid = uid
        self._client = httpx.AsyncClient(base_url=self.base_url, trust_env=False, follow_redirects=False,
                                         headers={"User-Agent": "zocratesd", "X-Zotero-Connector-API-Version": "3"})

    async def aclose(self) -> None:
        await self._client.aclose()

    async def ready(self, op: Operation) -> None:
        if not isinstance(op, ops.AddItem):
            raise NotNow("this Zotero writes notes, tags and collections through the Zocrates plugin (or, in Zotero 10, "
                         "its local API)")
        owner = listener_owner(self.host, self.port, proc_net=self._proc_net, uid=self._uid)
        if owner.verdict != "mine" and owner.verdict != "unknown":
            raise NotNow(NOT_RUNNING)
        try:
            r = await self._client.get("/connector/ping", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            raise NotNow(NOT_RUNNING) from None
        if r.status_code != 200:
            raise NotNow(NOT_RUNNING)

    async def plan(self, op: Operation) -> Change:
        return Change()  # Zotero does not say which key it gave the item

    async def apply(self, op: Operation, change: Change) -> None:
        assert isinstance(op, ops.AddItem)
        body = {"items": [translator_json(op)], "sessionID": f"zocrates-{op.new_key}", "uri": op.item.fields.get("url", "")}
        try:
            r = await self._client.post("/connector/saveItems", json=body, timeout=SAVE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise NotNow(f"Zotero did not answer ({type(exc).__name__}); it is tried again") from None
        if r.status_code in (200, 201):
            return
        if r.status_code == 409:  # SESSION_EXISTS: an earlier attempt's save, whose answer was lost
            return
        if r.status_code == 500 and "libraryEditable" in r.text:
            raise Refused("the library selected in Zotero is read-only: select your library and try again")
        raise NotNow(f"Zotero could not save the item ({r.status_code}); it is tried again")


def translator_json(op: ops.AddItem) -> dict[str, object]:
    """The item as a Zotero translator returns it (what the connector sends)."""
    item = op.item
    creators = [
        {"creatorType": c.creator_type, "lastName": c.name, "fieldMode": 1} if c.name and not c.last_name
        else {"creatorType": c.creator_type, "firstName": c.first_name, "lastName": c.last_name}
        for c in item.creators
    ]
    return {"itemType": item.item_type, "title": item.title, "creators": creators, **item.fields}
