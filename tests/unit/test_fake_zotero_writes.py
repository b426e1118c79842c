"""Pins the Zotero stand-in's write behaviour (tests/fake_zotero_api.py) to what Zotero's source says,
so a test that passes against it can be trusted to pass against Zotero. Each assertion names where
the fact comes from, at tag 10.0.0 unless said: LAPI = chrome/content/zotero/xpcom/server/server_localAPI.js,
SRV = server.js, CONN = server_connector.js, SESS = saveSession.js (details: /work/notes/zotero-write-facts.md)."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_zotero_api import FakeZoteroApi
from zoterofixture import sample_library

from zocratesd.library._listeners import listener_owner

PAPER = "LEWIS202"  # a journal article of sample_library()
COLL = "MISCCOLL"


@pytest.fixture
def zot() -> Iterator[FakeZoteroApi]:
    api = FakeZoteroApi(*sample_library(), zotero_version=10)
    yield api
    api.close()


@pytest.fixture
def http(zot: FakeZoteroApi) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=zot.base_url, timeout=30) as c:
        yield c


def authorize(zot: FakeZoteroApi, http: httpx.Client, answer: str = "always", app: str = "Zocrates") -> httpx.Response:
    zot.dialog_answer = answer
    return http.post("/api/local/authorize", json={"appName": app}, headers={"Zotero-Server-ID": zot.server_id})


def write_headers(zot: FakeZoteroApi, http: httpx.Client, answer: str = "always") -> dict[str, str]:
    key = authorize(zot, http, answer).json()["key"]
    return {"Zotero-Server-ID": zot.server_id, "Zotero-API-Key": key}


def post_items(http: httpx.Client, headers: dict[str, str], objs: list[dict[str, Any]], **extra: str) -> httpx.Response:
    return http.post("/api/users/0/items", json=objs, headers={**headers, **extra})


# ---- Zotero-Server-ID -------------------------------------------------------------------------

def test_every_local_api_answer_names_the_server(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.get("/api/")
    assert len(r.headers["Zotero-Server-ID"]) == 12  # LAPI l.594 (makeResponse), l.783 randomString(12)


def test_a_read_may_omit_the_server_id_but_not_send_another(zot: FakeZoteroApi, http: httpx.Client) -> None:
    assert http.get("/api/users/0/items").status_code == 200  # LAPI l.627-633: optional on GET
    assert http.get("/api/users/0/items", headers={"Zotero-Server-ID": "otherserver1"}).status_code == 412  # l.634-636


def test_a_write_without_the_server_id_is_428(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    del h["Zotero-Server-ID"]
    r = post_items(http, h, [{"itemType": "book"}])
    assert (r.status_code, r.text) == (428, "Zotero-Server-ID not provided")  # LAPI l.628-631


def test_a_write_after_a_database_reset_is_412(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    zot.server_id = "NEWPROFILE12"  # LAPI l.779-790: the ID lives in the database
    r = post_items(http, h, [{"itemType": "book"}])
    assert (r.status_code, r.text) == (412, "Zotero-Server-ID does not match this server")  # LAPI l.634-636


def test_authorize_is_a_write_and_needs_the_server_id(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.post("/api/local/authorize", json={"appName": "Zocrates"})
    assert r.status_code == 428 and zot.prompts == 0  # base init l.254 runs before AuthorizeLocal l.828


# ---- POST /api/local/authorize ------------------------------------------------------------------

def test_allow_gives_a_single_use_key(zot: FakeZoteroApi, http: httpx.Client) -> None:
    body = authorize(zot, http, "allow").json()
    assert len(body["key"]) == 32 and body["remember"] is False  # LAPI l.860-865, l.173


def test_always_allow_gives_a_remembered_key(zot: FakeZoteroApi, http: httpx.Client) -> None:
    assert authorize(zot, http, "always").json()["remember"] is True  # LAPI l.1676: remember = index 1


def test_deny_is_403_denied(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = authorize(zot, http, "deny")
    assert (r.status_code, r.json()) == (403, {"denied": True})  # LAPI l.852-858


def test_dismissing_the_dialog_is_always_allow(zot: FakeZoteroApi, http: httpx.Client) -> None:
    # l.1668-1676 with Gecko's common dialog, which answers button 1 ("Always Allow") on Escape / close
    assert authorize(zot, http, "dismiss").json()["remember"] is True


def test_authorize_needs_an_app_name_and_that_costs_no_prompt(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.post("/api/local/authorize", json={"appName": "  "}, headers={"Zotero-Server-ID": zot.server_id})
    assert (r.status_code, r.text, zot.prompts) == (400, "appName is required", 0)  # LAPI l.830-836, before l.839


def test_a_sixth_prompt_within_a_minute_is_429(zot: FakeZoteroApi, http: httpx.Client) -> None:
    for _ in range(5):
        authorize(zot, http, "deny")
    r = authorize(zot, http, "allow")
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60 and zot.prompts == 5  # LAPI l.130-131, 211-221, 839-849


def test_an_unanswered_dialog_keeps_the_request_open_until_answered(zot: FakeZoteroApi, http: httpx.Client) -> None:
    got: list[httpx.Response] = []
    t = threading.Thread(target=lambda: got.append(authorize(zot, http, "hang")))
    t.start()
    assert zot.wait_for_prompts(1)
    assert not got  # LAPI l.851 awaits the modal prompt
    assert zot.answer_dialog("allow") == 1
    t.join(30)
    assert got[0].status_code == 200


def test_zotero_quitting_with_the_dialog_open_cuts_the_request(zot: FakeZoteroApi, http: httpx.Client) -> None:
    errors: list[Exception] = []

    def ask() -> None:
        try:
            authorize(zot, http, "hang")
        except httpx.HTTPError as e:
            errors.append(e)

    t = threading.Thread(target=ask)
    t.start()
    assert zot.wait_for_prompts(1)
    zot.stop()
    t.join(30)
    assert isinstance(errors[0], httpx.RemoteProtocolError)


# ---- keys -----------------------------------------------------------------------------------

def test_a_write_without_a_key_is_401_with_a_challenge(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, {"Zotero-Server-ID": zot.server_id}, [{"itemType": "book"}])
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == 'Zotero-API-Key realm="Zotero Local API"'  # LAPI l.666-675


def test_an_unknown_key_is_401_without_the_local_api_headers(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, {"Zotero-Server-ID": zot.server_id, "Zotero-API-Key": "x" * 32}, [{"itemType": "book"}])
    # LAPI l.676-679 returns the raw array, not makeResponse: no Zotero-Server-ID
    assert (r.status_code, r.text, "Zotero-Server-ID" in r.headers) == (401, "Invalid or expired API key", False)


def test_a_key_also_goes_as_bearer_or_query(zot: FakeZoteroApi, http: httpx.Client) -> None:
    key = authorize(zot, http).json()["key"]
    sid = {"Zotero-Server-ID": zot.server_id}
    assert post_items(http, {**sid, "Authorization": f"Bearer {key}"}, [{"itemType": "book"}]).status_code == 200  # LAPI l.656-665
    assert http.post(f"/api/users/0/items?key={key}", json=[{"itemType": "book"}], headers=sid).status_code == 200  # l.654


def test_a_single_use_key_is_spent_even_by_a_write_that_fails(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http, "allow")
    assert post_items(http, h, [{"itemType": "book"}] * 51).status_code == 413
    # LAPI l.189-202: consumed when validated (l.676), before the endpoint runs
    assert post_items(http, h, [{"itemType": "book"}]).status_code == 401


def test_a_single_use_key_survives_a_write_refused_for_its_server_id(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http, "allow")
    assert post_items(http, {**h, "Zotero-Server-ID": "otherserver1"}, [{"itemType": "book"}]).status_code == 412
    assert post_items(http, h, [{"itemType": "book"}]).status_code == 200  # LAPI l.254 runs before l.313


def test_a_remembered_key_is_reused(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http, "always")
    codes = [post_items(http, h, [{"itemType": "book"}]).status_code for _ in range(2)]
    assert codes == [200, 200]  # LAPI l.195-197


def test_an_unsupported_api_version_is_501(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"itemType": "book"}], **{"Zotero-API-Version": "2"})
    assert r.status_code == 501  # LAPI l.271-279


# ---- POST items -------------------------------------------------------------------------------

def test_post_creates_and_answers_the_four_result_maps(zot: FakeZoteroApi, http: httpx.Client) -> None:
    before = zot.library_version
    r = post_items(http, write_headers(zot, http), [{"itemType": "book", "title": "New"}])
    body = r.json()
    key = body["success"]["0"]
    # LAPI l.2116-2120, MultiWriteResults l.2669-2717; each save bumps the library version (dataObject.js l.1301)
    assert (set(body), body["successful"]["0"]["data"]["title"], body["successful"]["0"]["version"]) == (
        {"successful", "success", "unchanged", "failed"}, "New", before + 1)
    assert r.headers["Last-Modified-Version"] == str(before + 1)
    assert http.get(f"/api/users/0/items/{key}").json()["data"]["title"] == "New"  # reads show the write


def test_more_than_50_objects_is_413_and_writes_nothing(zot: FakeZoteroApi, http: httpx.Client) -> None:
    n = len(zot.items)
    r = post_items(http, write_headers(zot, http), [{"itemType": "book"}] * 51)
    assert (r.status_code, r.text, len(zot.items)) == (413, "Cannot add more than 50 items at a time", n)  # LAPI l.95, l.2028-2034


def test_exactly_50_objects_are_written(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"itemType": "book"}] * 50)
    assert len(r.json()["success"]) == 50  # LAPI l.2028: > 50 only


def test_a_client_key_for_a_new_object_fails_it_as_zotero_10_0_does(zot: FakeZoteroApi, http: httpx.Client) -> None:
    # LAPI l.2079-2081: makeNewObject, then obj.key = the client's key on an object whose primary data is not
    # loaded; fromJSON then fails, a plain Error (code 400, MultiWriteResults l.2694-2696). A real Zotero 10.0
    # answered so for a note, an item and a collection (clients/zotero/real/zotero10-local-api.mjs).
    h = write_headers(zot, http)
    note = post_items(http, h, [{"key": "NEWNQTE2", "version": 0, "itemType": "note", "note": "<p>x</p>", "parentItem": PAPER}])
    assert note.json()["failed"]["0"] == {"key": "NEWNQTE2", "code": 400, "message": "'primaryData' not loaded for item (null/1/NEWNQTE2)"}
    coll = http.post("/api/users/0/collections", json=[{"key": "NEWCQLL2", "version": 0, "name": "Thesis"}], headers=h)
    assert coll.json()["failed"]["0"]["message"] == "'primaryData' not loaded for collection (null/1/NEWCQLL2)"
    assert zot.item("NEWNQTE2") is None and zot.collection("NEWCQLL2") is None


def test_since_lists_only_what_changed_after_a_library_version(zot: FakeZoteroApi, http: httpx.Client) -> None:
    version = int(http.get("/api/users/0/collections", params={"limit": "1"}).headers["Last-Modified-Version"])
    key = post_items(http, write_headers(zot, http), [{"itemType": "note", "note": "<p>new</p>", "parentItem": PAPER}]).json()["success"]["0"]
    listed = http.get("/api/users/0/items", params={"since": str(version), "format": "json"}).json()
    assert [o["key"] for o in listed] == [key]  # LAPI l.332-339: clientVersion > since


def test_a_new_key_must_be_a_zotero_key(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"key": "BADKEY01", "version": 0, "itemType": "note"}])
    assert r.json()["failed"]["0"] == {"key": "BADKEY01", "code": 400, "message": "Invalid key: 'BADKEY01'"}  # LAPI l.1881-1886


def test_a_keyed_write_needs_a_version_or_the_header(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"key": "NEWNQTE3", "itemType": "note"}])
    assert r.json()["failed"]["0"]["code"] == 428  # LAPI l.2053-2057


def test_a_keyed_write_of_a_missing_object_with_a_version_is_404(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"key": "NEWNQTE4", "version": 5, "itemType": "note"}])
    assert r.json()["failed"]["0"]["code"] == 404  # LAPI l.2075-2079


def test_post_to_an_existing_key_patches_it_or_reports_unchanged(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    v = zot.item(PAPER)["version"]  # type: ignore[index]
    r = post_items(http, h, [{"key": PAPER, "version": v, "extra": "seen"}])
    assert r.json()["success"] == {"0": PAPER} and zot.item(PAPER)["title"]  # type: ignore[index]  # l.2070-2072: merged
    v2 = zot.item(PAPER)["version"]  # type: ignore[index]
    assert post_items(http, h, [{"key": PAPER, "version": v2, "extra": "seen"}]).json()["unchanged"] == {"0": PAPER}  # l.2095-2096


def test_a_stale_library_version_on_post_is_412(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"itemType": "book"}], **{"If-Unmodified-Since-Version": "1"})
    assert r.status_code == 412  # LAPI l.733-736


def test_a_write_token_is_refused_the_second_time(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = {**write_headers(zot, http), "Zotero-Write-Token": "zocrates-op-1"}
    codes = [post_items(http, h, [{"itemType": "book"}]).status_code for _ in range(2)]
    assert codes == [200, 412]  # LAPI l.694-710, recorded l.2114


def test_a_tag_type_other_than_0_or_1_fails_that_object(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = post_items(http, write_headers(zot, http), [{"itemType": "book", "tags": [{"tag": "x", "type": 2}]}])
    assert r.json()["failed"]["0"]["code"] == 400  # tags.js l.913-915, a plain Error -> 400 (LAPI l.2694-2696)


# ---- PUT / PATCH / DELETE ---------------------------------------------------------------------

def test_patch_replaces_the_whole_tag_list(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    v = zot.item(PAPER)["version"]  # type: ignore[index]
    r = http.patch(f"/api/users/0/items/{PAPER}", json={"tags": [{"tag": "review"}]}, headers={**h, "If-Unmodified-Since-Version": str(v)})
    assert r.status_code == 204 and r.headers["Last-Modified-Version"] == str(zot.library_version)  # LAPI l.2230-2234
    assert zot.item(PAPER)["tags"] == [{"tag": "review"}]  # type: ignore[index]  # mergePatchJSON l.1993-1999


def test_patch_without_a_version_is_428(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.patch(f"/api/users/0/items/{PAPER}", json={"extra": "x"}, headers=write_headers(zot, http))
    assert r.status_code == 428  # LAPI l.2177-2180


def test_patch_of_an_object_changed_since_is_412(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    v = zot.item(PAPER)["version"]  # type: ignore[index]
    http.patch(f"/api/users/0/items/{PAPER}", json={"extra": "a"}, headers={**h, "If-Unmodified-Since-Version": str(v)})
    r = http.patch(f"/api/users/0/items/{PAPER}", json={"extra": "b"}, headers={**h, "If-Unmodified-Since-Version": str(v)})
    assert r.status_code == 412  # LAPI l.2185-2191: against the object's own version


def test_patch_deleted_moves_to_the_trash_and_reads_follow(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    v = zot.item(PAPER)["version"]  # type: ignore[index]
    http.patch(f"/api/users/0/items/{PAPER}", json={"deleted": 1}, headers={**h, "If-Unmodified-Since-Version": str(v)})
    listed = {o["key"] for o in http.get("/api/users/0/items?limit=100").json()}
    trash = {o["key"] for o in http.get("/api/users/0/items/trash?limit=100").json()}
    # item.js l.5966-5970; LAPI l.1099-1108 (trash listed apart, left out of items)
    assert PAPER not in listed and PAPER in trash and http.get(f"/api/users/0/items/{PAPER}").json()["data"]["deleted"] is True


def test_delete_erases_the_item_and_its_children(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    note = post_items(http, h, [{"itemType": "note", "note": "<p>n</p>", "parentItem": PAPER}]).json()["success"]["0"]
    r = http.delete(f"/api/users/0/items/{PAPER}", headers={**h, "If-Unmodified-Since-Version": str(zot.library_version)})
    # LAPI l.2335 eraseTx (no trash); item.js l.5573-5583 erases child notes and attachments
    assert r.status_code == 204 and zot.item(PAPER) is None and zot.item(note) is None


def test_delete_needs_the_header_and_404s_a_missing_key(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    assert http.delete(f"/api/users/0/items/{PAPER}", headers=h).status_code == 428  # LAPI l.2319-2321
    assert http.delete("/api/users/0/items/ZZZZZZZZ", headers=h).status_code == 404  # l.2310-2313, before the header


def test_a_child_note_is_listed_under_its_parent(zot: FakeZoteroApi, http: httpx.Client) -> None:
    key = post_items(http, write_headers(zot, http), [{"itemType": "note", "note": "<p>c</p>", "parentItem": PAPER}]).json()["success"]["0"]
    children = http.get(f"/api/users/0/items/{PAPER}/children").json()
    assert key in [c["key"] for c in children]  # item.js l.5954-5957; LAPI l.1213


# ---- collections ------------------------------------------------------------------------------

def test_a_collection_is_created_under_a_parent_and_items_join_it(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    r = http.post("/api/users/0/collections", json=[{"name": "Thesis", "parentCollection": COLL}], headers=h)
    key = r.json()["success"]["0"]  # LAPI l.979-984
    v = zot.item(PAPER)["version"]  # type: ignore[index]
    http.patch(f"/api/users/0/items/{PAPER}", json={"collections": [*zot.item(PAPER)["collections"], key]},  # type: ignore[index]
               headers={**h, "If-Unmodified-Since-Version": str(v)})
    assert zot.collection(key)["parentCollection"] == COLL  # type: ignore[index]
    assert [o["key"] for o in http.get(f"/api/users/0/collections/{key}/items").json()] == [PAPER]  # item.js l.5942-5944


def test_a_trashed_collection_leaves_the_listing(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    v = zot.collection(COLL)["version"]  # type: ignore[index]
    r = http.patch(f"/api/users/0/collections/{COLL}", json={"deleted": True}, headers={**h, "If-Unmodified-Since-Version": str(v)})
    keys = [c["key"] for c in http.get("/api/users/0/collections?limit=100").json()]
    assert r.status_code == 204 and COLL not in keys  # collection.js l.821-823; collections.js getByLibrary(includeTrashed=false)


def test_a_collection_without_a_name_fails_that_object(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.post("/api/users/0/collections", json=[{"parentCollection": COLL}], headers=write_headers(zot, http))
    assert r.json()["failed"]["0"]["code"] == 400  # collection.js l.813-815


# ---- Zotero 7-9 -------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [7, 8, 9])
def test_before_zotero_10_the_local_api_refuses_writes(version: int) -> None:
    api = FakeZoteroApi(*sample_library(), zotero_version=version)
    try:
        with httpx.Client(base_url=api.base_url, timeout=30) as c:
            post = c.post("/api/users/0/items", json=[{"itemType": "book"}])
            assert (post.status_code, post.text) == (400, "Endpoint does not support method\n")  # 9.0.6 SRV l.398, LAPI GET only
            assert c.patch(f"/api/users/0/items/{PAPER}", json={}).status_code == 501  # 9.0.6 SRV l.383
            assert c.post("/api/local/authorize", json={"appName": "x"}).status_code == 404  # no such endpoint before 10
            assert "Zotero-Server-ID" not in c.get("/api/").headers
    finally:
        api.close()


# ---- the connector ----------------------------------------------------------------------------

def test_ping_answers_html_to_get_and_prefs_to_post(zot: FakeZoteroApi, http: httpx.Client) -> None:
    assert "Zotero is running" in http.get("/connector/ping").text  # CONN l.1096-1099
    assert "prefs" in http.post("/connector/ping", json={}).json()  # l.1109-1129


def test_save_items_lands_in_the_selected_collection_with_automatic_tags(zot: FakeZoteroApi, http: httpx.Client) -> None:
    zot.selected_collection = COLL
    before = {o["key"] for o in zot.items}
    item = {"itemType": "journalArticle", "title": "From DOI", "key": "MYKEY234", "tags": ["t"], "notes": [{"note": "<p>n</p>"}],
            "attachments": [{"title": "PDF", "url": "http://127.0.0.1:9/x.pdf", "mimeType": "application/pdf"}]}
    r = http.post("/connector/saveItems", json={"items": [item], "sessionID": "s1", "uri": "https://doi.org/10.1/x"})
    assert (r.status_code, r.content) == (201, b"")  # CONN l.343: no body, no keys
    new = [o["data"] for o in zot.items if o["key"] not in before]
    top = next(d for d in new if d["itemType"] == "journalArticle")
    assert top["key"] != "MYKEY234" and top["collections"] == [COLL]  # item.js l.5683 ignores key; SESS l.81-83 target
    assert top["tags"] == [{"tag": "t", "type": 1}]  # SESS l.86 forceTagType 1
    assert sorted(d["itemType"] for d in new) == ["journalArticle", "note"]  # TI l.256-261 notes; l.85 attachments ignored


def test_a_repeated_session_id_is_409_until_zotero_restarts(zot: FakeZoteroApi, http: httpx.Client) -> None:
    body = {"items": [{"itemType": "book", "title": "B"}], "sessionID": "s2", "uri": "x"}
    assert http.post("/connector/saveItems", json=body).status_code == 201
    r = http.post("/connector/saveItems", json=body)
    assert (r.status_code, r.json()) == (409, {"error": "SESSION_EXISTS"})  # CONN l.322-332, SESS l.37-39
    zot.stop()
    zot.start()
    with httpx.Client(base_url=zot.base_url, timeout=30) as c:
        assert c.post("/connector/saveItems", json=body).status_code == 201  # sessions live in memory (SESS l.27)
    assert [o["data"].get("title") for o in zot.items].count("B") == 2


def test_an_outdated_connector_api_version_is_refused(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.post("/connector/saveItems", json={"items": []}, headers={"X-Zotero-Connector-API-Version": "2"})
    assert (r.status_code, r.json()) == (400, {"error": "CONNECTOR_VERSION_OUTDATED"})  # CONN l.312-315, l.186


def test_before_zotero_10_a_connector_save_reads_back_with_version_0() -> None:
    api = FakeZoteroApi(*sample_library(), zotero_version=9)
    try:
        lmv = api.library_version
        with httpx.Client(base_url=api.base_url, timeout=30) as c:
            c.post("/connector/saveItems", json={"items": [{"itemType": "book", "title": "Nine"}], "sessionID": "n"})
        saved = next(o for o in api.items if o["data"].get("title") == "Nine")
        assert (saved["version"], api.library_version) == (0, lmv)  # local_api.md: synced versions before 10, 0 if never synced
    finally:
        api.close()


# ---- transport, restarts and failures ------------------------------------------------------------

def test_a_browser_request_is_cut_off_unanswered(zot: FakeZoteroApi, http: httpx.Client) -> None:
    with pytest.raises(httpx.RemoteProtocolError):  # SRV l.412-430, _cancelResponse l.559-571
        http.post("/connector/saveItems", json={"items": []}, headers={"User-Agent": "Mozilla/5.0"})
    r = http.post("/connector/ping", json={}, headers={"User-Agent": "Mozilla/5.0", "Zotero-Allowed-Request": "1"})
    assert r.status_code == 200


def test_stop_refuses_on_the_port_and_start_reopens_it_with_the_library_and_keys(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http, "always")
    key = post_items(http, h, [{"itemType": "book", "title": "Kept"}]).json()["success"]["0"]
    zot.stop()
    with pytest.raises(httpx.ConnectError):
        http.get("/api/")
    assert listener_owner("127.0.0.1", zot.port).verdict == "none"  # what the daemon sees: nothing listens
    with socket.socket() as other, pytest.raises(OSError) as taken:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as most servers do
        other.bind(("127.0.0.1", zot.port))  # another test's server cannot take Zotero's port meanwhile
    assert taken.value.errno == errno.EADDRINUSE
    zot.start()
    with httpx.Client(base_url=zot.base_url, timeout=30) as c:
        assert c.get(f"/api/users/0/items/{key}").json()["data"]["title"] == "Kept"  # the database survives
        assert post_items(c, h, [{"itemType": "book"}]).status_code == 200  # localAPIKeys.json survives (LAPI l.135-163)


def test_an_injected_500_writes_nothing(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    n = len(zot.items)
    zot.fail_next_write()
    r = post_items(http, h, [{"itemType": "book"}])
    assert (r.status_code, r.content, len(zot.items)) == (500, b"", n)  # SRV l.516: Zotero's 500 has an empty body


def test_a_dropped_answer_still_applied_the_write(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    n = len(zot.items)
    zot.drop_after_next_write()
    with pytest.raises(httpx.RemoteProtocolError):
        post_items(http, h, [{"itemType": "note", "note": "<p>r</p>", "parentItem": PAPER}])
    assert len(zot.items) == n + 1 and zot.items[-1]["data"]["note"] == "<p>r</p>"


def test_requests_are_recorded_with_headers_and_body(zot: FakeZoteroApi, http: httpx.Client) -> None:
    h = write_headers(zot, http)
    post_items(http, h, [{"itemType": "book", "title": "Rec"}])
    last = zot.received[-1]
    assert (last.method, last.path, last.headers["zotero-api-key"], last.json()[0]["title"]) == (
        "POST", "/api/users/0/items", h["Zotero-API-Key"], "Rec")


def test_item_key_narrows_a_listing_to_those_items(zot: FakeZoteroApi, http: httpx.Client) -> None:
    r = http.get("/api/users/0/items", params={"itemKey": f"{PAPER},KARPDPR1", "includeTrashed": "1"})
    assert sorted(o["key"] for o in r.json()) == ["KARPDPR1", PAPER]  # LAPI l.1117-1128
