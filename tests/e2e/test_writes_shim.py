"""Writes from the sidebar over the HTTP shim, and the plugin's write channel: a write proposed in
the sidebar is shown for consent, handed to the plugin inside Zotero once the person says yes,
recorded with what it changed, and undone the same way. Only the token's holder may write.

The plugin's side is played here by a client that polls the channel as the plugin does (Zotero
cannot run here; clients/zotero/plugin.test.mjs drives the plugin's own code)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from rawrpc import RawConn
from shimhttp import Shim, held_connections, wait_until
from test_library import wait_ready
from test_writes import writes_daemon

pytestmark = pytest.mark.e2e


class PluginInZotero:
    """Polls `GET /plugin/writes` and performs each request on `tags` (item key -> set of tags), as
    the plugin does with Zotero's API; counts the requests it was given."""

    def __init__(self, shim: Shim, plugin_token: str, tags: dict[str, set[str]]):
        self.client = httpx.Client(base_url=shim.base, timeout=60,
                                   headers={"Authorization": f"Bearer {shim.token}", "X-Zocrates-Plugin-Token": plugin_token,
                                            "X-Zocrates-Plugin": "0.1.0", "X-Zotero-Version": "9.0.6"})
        self.tags, self.calls, self.stop = tags, [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            got = self.client.get("/plugin/writes", params={"wait": 1}).json()["request"]
            if got is None:
                continue
            self.calls.append((got["call"], got["operation"]["type"]))
            self.client.post(f"/plugin/writes/{got['id']}", json={"result": {"change": self.perform(got)}})

    def perform(self, got: dict[str, Any]) -> dict[str, Any]:
        op = got["operation"]
        if op["type"] == "tag_items":
            added = {k: [t for t in op["tags"] if t not in self.tags.setdefault(k, set())] for k in op["items"]}
            if got["call"] == "apply":
                for k in op["items"]:
                    self.tags[k] |= set(op["tags"])
            return {"tags_added": {k: v for k, v in added.items() if v}}
        if op["type"] == "retag" and got["call"] == "apply":
            for k, gone in op["remove"].items():
                self.tags[k] -= set(gone)
        return {}

    def __enter__(self) -> PluginInZotero:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.client.close()


@pytest.fixture
def sidebar(daemon_factory: Any) -> Iterator[tuple[Any, Shim]]:
    d = writes_daemon(daemon_factory)
    d.args = ["--http-port", "0"]
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
    with Shim(d.info) as s:
        yield d, s


def test_the_sidebar_proposes_the_person_confirms_the_plugin_writes_and_undo_reverts(sidebar: Any) -> None:
    d, shim = sidebar
    tags = {"LEWIS202": {"rag", "nlp"}}
    with PluginInZotero(shim, d.info["plugin_token"], tags) as plugin:
        proposed = shim.ok("POST", "/writes/tag", json={"itemKeys": ["LEWIS202", "KARPDPR1"], "tags": ["cited"]})["write"]
        assert proposed["state"] == "awaiting_consent" and proposed["face"] == "zotero-sidebar"
        assert "Dense Passage Retrieval" in proposed["preview"] and plugin.calls == []  # nothing reaches Zotero yet
        applied = shim.ok("POST", f"/writes/{proposed['id']}/confirm", json={})["write"]
        assert applied["state"] == "applied" and applied["path"] == "plugin", applied
        assert tags == {"LEWIS202": {"rag", "nlp", "cited"}, "KARPDPR1": {"cited"}}
        assert plugin.calls == [("plan", "tag_items"), ("apply", "tag_items")]
        undone = shim.ok("POST", "/writes/undo", json={"writeId": proposed["id"]})["write"]
        assert undone["state"] == "applied" and tags == {"LEWIS202": {"rag", "nlp"}, "KARPDPR1": set()}
        listed = shim.ok("GET", "/writes")["writes"]
        assert [w["state"] for w in listed] == ["applied", "undone"]
        # The person's no: nothing is handed to the plugin.
        declined = shim.ok("POST", "/writes/tag", json={"itemKeys": ["LEWIS202"], "tags": ["x"]})["write"]
        assert shim.ok("POST", f"/writes/{declined['id']}/discard")["write"]["state"] == "discarded"
        assert len(plugin.calls) == 4 and "x" not in tags["LEWIS202"]
    d.stop()


def test_without_the_token_nothing_is_proposed_and_the_channel_is_closed(sidebar: Any) -> None:
    d, shim = sidebar
    with httpx.Client(base_url=shim.base, timeout=30) as stranger:
        assert stranger.post("/writes/tag", json={"itemKeys": ["LEWIS202"], "tags": ["x"]}).status_code == 401
        assert stranger.get("/plugin/writes", params={"wait": 0}).status_code == 401
        wrong = {"Authorization": "Bearer " + "0" * len(shim.token)}
        assert stranger.post("/writes/tag", json={"itemKeys": ["LEWIS202"], "tags": ["x"]}, headers=wrong).status_code == 401
    assert shim.ok("GET", "/writes")["writes"] == []
    bad = shim.request("POST", "/writes/tag", json={"itemKeys": ["lowercase"], "tags": ["x"]})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"
    assert shim.request("POST", "/writes/erase_everything", json={}).status_code == 404
    # The page's token is not the plugin's: the write channel refuses it (the page cannot take or answer writes).
    assert shim.request("GET", "/plugin/writes", params={"wait": 0}).status_code == 403
    assert shim.request("POST", "/plugin/writes/p-999", json={"result": {}}).status_code == 403
    plugin = {"X-Zocrates-Plugin-Token": d.info["plugin_token"]}
    assert shim.request("POST", "/plugin/writes/p-999", json={"result": {}}, headers=plugin).status_code == 404
    d.stop()


def test_a_plugin_gone_a_moment_ago_leaves_the_write_waiting_for_it_not_for_an_answer(sidebar: Any) -> None:
    """Zotero closed while its last poll was a moment ago: the write is not handed to a plugin that
    will never take it (and answered only at the answer timeout); it waits for Zotero, and is
    written once the plugin polls again."""
    d, shim = sidebar
    tags = {"LEWIS202": {"rag"}}
    with PluginInZotero(shim, d.info["plugin_token"], tags):
        pass  # its last poll ended just now: the plugin still counts as connected for a moment
    proposed = shim.ok("POST", "/writes/tag", json={"itemKeys": ["LEWIS202"], "tags": ["later"]})["write"]
    waiting = shim.ok("POST", f"/writes/{proposed['id']}/confirm", json={})["write"]
    assert waiting["state"] == "queued", waiting
    assert "not connected" in waiting["error"] and "did not answer" not in waiting["error"], waiting
    assert tags == {"LEWIS202": {"rag"}}
    with PluginInZotero(shim, d.info["plugin_token"], tags) as plugin:
        deadline = time.monotonic() + 60  # a hang guard: the applier looks again every few seconds
        while shim.ok("GET", f"/writes/{proposed['id']}")["write"]["state"] != "applied":
            assert time.monotonic() < deadline, "the write was not applied once the plugin was back"
            time.sleep(0.1)
        assert plugin.calls == [("plan", "tag_items"), ("apply", "tag_items")]
    assert tags == {"LEWIS202": {"rag", "later"}}
    d.stop()


def test_a_daemon_stopping_answers_the_plugins_open_poll_at_once(sidebar: Any) -> None:
    """Zotero open while the daemon stops (`zocratesd stop`, a service restart): the plugin's poll,
    open for up to 25 s, is answered with nothing and its connection closed, instead of holding the
    stop's drain until it is cut off with an error in the log."""
    d, shim = sidebar
    plugin = PluginInZotero(shim, d.info["plugin_token"], {})
    before = len(held_connections(shim.port))
    answered: dict[str, httpx.Response] = {}
    poll = threading.Thread(target=lambda: answered.setdefault("poll", plugin.client.get("/plugin/writes", params={"wait": 25})))
    poll.start()
    try:
        wait_until(lambda: len(held := held_connections(shim.port)) > before and not any(held),
                   "the daemon never read the plugin's poll")
        assert d.stop() == 0
        poll.join(30)
        r = answered["poll"]
        assert (r.status_code, r.json()["request"], r.headers["connection"]) == (200, None, "close")
        logged = d.stderr_text()
        assert "still busy" not in logged and "Exception in ASGI application" not in logged, logged[-3000:]
    finally:
        plugin.client.close()
