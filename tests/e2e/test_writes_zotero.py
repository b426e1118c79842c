"""Writes reach Zotero through Zotero's own servers, exactly once, and undo through them too: a real
daemon against a stand-in written from Zotero 10.0.0's `server_localAPI.js` and `server_connector.js`
(tests/fake_zotero_api.py, pinned by tests/unit/test_fake_zotero_writes.py): its authorize dialog
answered each of the three ways, single-use and lasting keys, Zotero closed and reopened, an answer
lost after the write landed, a Zotero 9 that only has the connector."""

from __future__ import annotations

import json
import os
import stat
import time
from typing import Any

import pytest
from fake_zotero_api import FakeZoteroApi
from rawrpc import RawConn
from test_library import wait_ready
from zoterofixture import build_zotero_dir, sample_library

pytestmark = pytest.mark.e2e

# A hang guard: the applier looks again every few seconds while Zotero is closed.
APPLIED_WITHIN_S = 60.0
KEY_FILE = "zotero-local-api-key.json"



def daemon_for(daemon_factory: Any, api: FakeZoteroApi, *, mode: str = "ask") -> Any:
    d = daemon_factory()
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls, version=129)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(
        {"library": {"local_api": False}, "writes": {"mode": mode}}))
    d.env["ZOCRATES_LIBRARY__LOCAL_API_URL"] = api.base_url  # the test env points it at a closed port
    return d


def tags_of(api: FakeZoteroApi, key: str) -> list[str]:
    return sorted(t["tag"] for t in (api.item(key) or {}).get("tags", []))


def notes_on(api: FakeZoteroApi, parent: str) -> list[str]:
    return [i["key"] for i in api.items if i["data"].get("parentItem") == parent and i["data"]["itemType"] == "note"]


def writes_to(api: FakeZoteroApi) -> list[Any]:
    return [r for r in api.received if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.path.startswith("/api/users/")]


def wait_state(c: RawConn, write_id: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + APPLIED_WITHIN_S
    while True:
        w: dict[str, Any] = c.result("_zocrates/writes/get", {"writeId": write_id})
        if w["state"] == state or time.monotonic() > deadline:
            assert w["state"] == state, w
            return w
        time.sleep(0.2)


def test_tags_through_the_local_api_once_allowed_always_and_undo_takes_off_only_what_was_added(
    daemon_factory: Any, zotero10: FakeZoteroApi,
) -> None:
    d = daemon_for(daemon_factory, zotero10)
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        # LEWIS202 has "rag" already: only "review" is new to it.
        w = c.result("_zocrates/writes/tag", {"itemKeys": ["LEWIS202", "KARPDPR1"], "tags": ["review", "rag"]})
        assert w["state"] == "awaiting_consent" and writes_to(zotero10) == [] and zotero10.prompts == 0
        done = c.result("_zocrates/writes/confirm", {"writeId": w["id"]})
        assert done["state"] == "applied" and done["path"] == "local_api", done
        assert tags_of(zotero10, "LEWIS202") == ["nlp", "rag", "review"]
        assert tags_of(zotero10, "KARPDPR1") == ["rag", "review"]
        # One dialog, one request for both items, with the server's ID.
        assert zotero10.prompts == 1 and zotero10.prompt_app_names == ["Zocrates"]
        posts = writes_to(zotero10)
        assert len(posts) == 1 and posts[0].headers["zotero-server-id"] == zotero10.server_id
        # "Always Allow": the key is kept, private, and never written to the log.
        key_file = d.state_dir / KEY_FILE
        key = json.loads(key_file.read_text())[zotero10.server_id]
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        assert key not in (d.state_dir / "zocratesd.log").read_text()
        # A second write asks Zotero nothing more.
        second = c.result("_zocrates/writes/untag", {"itemKeys": ["LEWIS202"], "tags": ["nlp"], "confirm": True})
        assert second["state"] == "applied" and zotero10.prompts == 1 and tags_of(zotero10, "LEWIS202") == ["rag", "review"]
        # Undo the first: what it added comes off; "rag" stays on LEWIS202, which had it before.
        undone = c.result("_zocrates/writes/undo", {"writeId": w["id"]})
        assert undone["state"] == "applied" and undone["undoes"] == w["id"], undone
        assert tags_of(zotero10, "LEWIS202") == ["rag"] and tags_of(zotero10, "KARPDPR1") == []
        assert c.result("_zocrates/writes/get", {"writeId": w["id"]})["state"] == "undone"
        # Undo with no id: the newest applied write (the untag): "nlp" comes back.
        c.result("_zocrates/writes/undo", {})
        assert tags_of(zotero10, "LEWIS202") == ["nlp", "rag"]
    d.stop()


def test_a_note_and_a_collection_are_created_once_and_undone_into_zoteros_trash(
    daemon_factory: Any, zotero10: FakeZoteroApi,
) -> None:
    d = daemon_for(daemon_factory, zotero10, mode="allow")
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        markdown = "# Summary\n\nRAG pairs **retrieval** with generation. <script>alert(1)</script>"
        note = c.result("_zocrates/writes/save_note", {
            "markdown": markdown, "parentItem": "LEWIS202",
            "citations": [{"key": "KARPDPR1", "title": "Dense Passage Retrieval", "page": "3"}]})
        assert note["state"] == "applied", note  # writes.mode = allow: no consent asked, still recorded
        key = note["created"][0]
        made = zotero10.item(key)
        assert made is not None and made["itemType"] == "note" and made["parentItem"] == "LEWIS202"
        assert "<strong>retrieval</strong>" in made["note"] and "<script>" not in made["note"]
        assert "&lt;script&gt;" in made["note"]  # shown as text, never run
        assert 'href="zotero://select/library/items/KARPDPR1"' in made["note"] and "p. 3" in made["note"]
        coll = c.result("_zocrates/writes/create_collection", {"name": "Thesis", "parent": "Retrieval-augmented generation"})
        filed = c.result("_zocrates/writes/add_to_collection", {"itemKeys": ["KARPDPR1", "LEWIS202"], "collection": "Thesis"})
        assert coll["state"] == filed["state"] == "applied", (coll, filed)
        new_coll = coll["created"][0]
        assert zotero10.collection(new_coll)["parentCollection"] == "RAG0COLL"
        assert new_coll in zotero10.item("KARPDPR1")["collections"]
        # Zotero chose the key (its local API takes none of ours), and it names the collection at once,
        # before the library index has seen it.
        assert new_coll != coll["operation"]["new_key"]
        plan = c.result("_zocrates/writes/save_note", {"markdown": "Reading plan.", "collection": new_coll})
        assert plan["state"] == "applied" and zotero10.item(plan["created"][0])["collections"] == [new_coll], plan
        item = c.result("_zocrates/writes/add_item", {"csl": {
            "type": "article-journal", "title": "Attention Is All You Need", "DOI": "10.48550/arXiv.1706.03762",
            "author": [{"family": "Vaswani", "given": "Ashish"}], "issued": {"date-parts": [[2017, 6]]}},
            "collection": "Thesis"})
        added = zotero10.item(item["created"][0])
        assert added["title"] == "Attention Is All You Need" and added["DOI"] == "10.48550/arXiv.1706.03762"
        assert added["creators"] == [{"creatorType": "author", "firstName": "Ashish", "lastName": "Vaswani"}]
        assert added["date"] == "2017-06" and added["collections"] == [new_coll]
        # Undo, newest first: the item, the plan, the filing, the collection, the note; to the trash, never erased.
        for w in (item, plan, filed, coll, note):
            assert c.result("_zocrates/writes/undo", {"writeId": w["id"]})["state"] == "applied"
        assert zotero10.item(item["created"][0])["deleted"] in (1, True)
        assert new_coll not in zotero10.item("KARPDPR1")["collections"]
        assert zotero10.collection(new_coll)["deleted"] in (1, True)
        assert zotero10.item(key)["deleted"] in (1, True)
        assert not [r for r in zotero10.received if r.method == "DELETE"]
    d.stop()


def test_allow_asks_for_every_write_and_deny_writes_nothing(daemon_factory: Any, zotero10: FakeZoteroApi) -> None:
    d = daemon_for(daemon_factory, zotero10)
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        zotero10.dialog_answer = "allow"  # a key for one write only
        for n, tag in enumerate(("first", "second"), start=1):
            w = c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": [tag], "confirm": True})
            assert w["state"] == "applied" and zotero10.prompts == n
        assert not (d.state_dir / KEY_FILE).exists()
        zotero10.dialog_answer = "deny"
        denied = c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": ["third"], "confirm": True})
        assert denied["state"] == "failed" and "Deny" in denied["error"], denied
        assert tags_of(zotero10, "KARPDPR1") == ["first", "second"]
        # Refused for good: not tried again behind the user's back.
        time.sleep(4)
        assert zotero10.prompts == 3 and c.result("_zocrates/writes/list", {"pending": True})["writes"] == []
    d.stop()


def test_zotero_closed_the_write_waits_across_a_daemon_kill_and_lands_once_when_zotero_is_back(
    daemon_factory: Any, zotero10: FakeZoteroApi,
) -> None:
    d = daemon_for(daemon_factory, zotero10)
    zotero10.stop()
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        w = c.result("_zocrates/writes/save_note", {"markdown": "Bees survive winter in clusters.", "parentItem": "BEEKEEP1"})
        queued = c.result("_zocrates/writes/confirm", {"writeId": w["id"]})
        assert queued["state"] == "queued" and queued["error"] == "Zotero is not running", queued
    d.kill()  # SIGKILL: between the user's consent and the write
    d.start()
    zotero10.start()
    with RawConn(d.socket_path) as c:
        applied = wait_state(c, w["id"], "applied")
    notes = notes_on(zotero10, "BEEKEEP1")
    assert notes == applied["created"] and len(writes_to(zotero10)) == 1
    d.stop()


def test_an_answer_lost_after_the_write_landed_is_retried_without_a_second_note(
    daemon_factory: Any, zotero10: FakeZoteroApi,
) -> None:
    d = daemon_for(daemon_factory, zotero10, mode="allow")
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        zotero10.drop_after_next_write()  # Zotero saves it, then the connection ends without an answer
        w = c.result("_zocrates/writes/save_note", {"markdown": "Written once.", "parentItem": "KARPDPR1"})
        done = wait_state(c, w["id"], "applied")
    notes = notes_on(zotero10, "KARPDPR1")
    assert len(notes) == 1 and notes == done["created"]
    # Only the lost one: the retry found the note it had made among the objects changed since the plan.
    assert len(writes_to(zotero10)) == 1
    assert any(r.method == "GET" and "since=" in r.path for r in zotero10.received)
    d.stop()


def test_a_new_zotero_database_gets_a_new_key(daemon_factory: Any, zotero10: FakeZoteroApi) -> None:
    d = daemon_for(daemon_factory, zotero10, mode="allow")
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        assert c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": ["a"]})["state"] == "applied"
        zotero10.server_id = "NEWSERVER123"  # a reset profile: old keys and versions mean nothing
        zotero10.api_keys.clear()
        w = c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": ["b"]})
        assert wait_state(c, w["id"], "applied") and zotero10.prompts == 2
        assert list(json.loads((d.state_dir / KEY_FILE).read_text())) == ["NEWSERVER123"]
    d.stop()


def test_zotero_9_without_the_plugin_adds_items_through_the_connector_and_keeps_tags_waiting(
    daemon_factory: Any,
) -> None:
    api = FakeZoteroApi(*sample_library(), zotero_version=9)
    api.selected_collection = "MISCCOLL"
    try:
        d = daemon_for(daemon_factory, api, mode="allow")
        d.start()
        with RawConn(d.socket_path) as c:
            wait_ready(c)
            added = c.result("_zocrates/writes/add_item", {"itemType": "book", "title": "The Buzz About Bees",
                                                           "creators": [{"first_name": "Jürgen", "last_name": "Tautz"}],
                                                           "fields": {"date": "2008", "ISBN": "9783540787277"}})
            assert added["state"] == "applied" and added["path"] == "connector", added
            saved = [i["data"] for i in api.items if i["data"].get("title") == "The Buzz About Bees"]
            assert len(saved) == 1 and saved[0]["collections"] == ["MISCCOLL"]  # where Zotero's window is
            tag = c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": ["review"]})
            assert tag["state"] == "queued" and "plugin" in tag["error"], tag
            assert tags_of(api, "KARPDPR1") == []
            assert not [r for r in api.received if r.path.startswith("/api/") and r.method != "GET"]
        d.stop()
    finally:
        api.close()
