"""Writes into Zotero through a real daemon: consent before anything is written, a clear refusal
when writes are off or the item is not the user's, a write that waits (persisted) while Zotero is
closed. The paths into Zotero themselves are tested against stand-ins written from Zotero's source
(tests/e2e/test_writes_zotero.py)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from rawrpc import RawConn
from test_library import wait_ready
from zoterofixture import build_zotero_dir, sample_library

from zocratesd.writes.service import SETTLE_WAIT_S

pytestmark = pytest.mark.e2e


# Zotero closed: a loopback port bound for this test process's life and never listening, so a
# connect is refused at once. A port merely free when picked could be taken meanwhile by another
# test's server (a stand-in Zotero, a daemon's shim), which the daemon would then write to.
_ZOTERO_CLOSED = socket.socket()
_ZOTERO_CLOSED.bind(("127.0.0.1", 0))


def closed_port() -> int:
    """A loopback port nothing listens on, and nothing else can take (Zotero closed)."""
    return int(_ZOTERO_CLOSED.getsockname()[1])


def writes_daemon(daemon_factory: Any, *, mode: str = "ask", port: int | None = None) -> Any:
    d = daemon_factory()
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls, version=129)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    config = {"library": {"local_api": False, "local_api_url": f"http://127.0.0.1:{port or closed_port()}"},
              "writes": {"mode": mode}}
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(config))
    return d


def test_a_write_waits_for_consent_then_for_zotero_and_is_kept_across_a_restart(daemon_factory: Any) -> None:
    d = writes_daemon(daemon_factory)
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        w = c.result("_zocrates/writes/tag", {"itemKeys": ["LEWIS202", "KARPDPR1"], "tags": ["review"]})
        assert w["state"] == "awaiting_consent" and w["proposed_by"] == "user"
        # The preview names the items as a person knows them, before anything is written.
        assert 'Add the tag "review" to 2 items' in w["preview"]
        assert "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks" in w["preview"]
        assert "Dense Passage Retrieval" in w["preview"]
        confirmed = c.result("_zocrates/writes/confirm", {"writeId": w["id"]})
        assert confirmed["state"] == "queued" and "Zotero is not running" in confirmed["error"], confirmed
        pending = c.result("_zocrates/writes/list", {"pending": True})
        assert [x["id"] for x in pending["writes"]] == [w["id"]] and "Zotero is not running" in pending["waiting_for"]
    d.stop()
    d.start()
    with RawConn(d.socket_path) as c:
        kept = c.result("_zocrates/writes/get", {"writeId": w["id"]})
        assert kept["state"] == "queued" and kept["operation"]["tags"] == ["review"]
        dropped = c.result("_zocrates/writes/discard", {"writeId": w["id"]})
        assert dropped["state"] == "discarded"
        assert c.result("_zocrates/writes/list", {"pending": True})["writes"] == []
        # A discarded write cannot be confirmed back into the queue.
        assert c.result("_zocrates/writes/confirm", {"writeId": w["id"]})["state"] == "discarded"
    d.stop()


def test_with_zotero_closed_every_queued_write_is_answered_at_once_and_keeps_its_order(daemon_factory: Any) -> None:
    """Writes queued behind one that waits for Zotero wait too: each confirm says so when it is
    given, not once its wait for a first attempt has run out."""
    d = writes_daemon(daemon_factory)
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        first = c.result("_zocrates/writes/tag", {"itemKeys": ["LEWIS202"], "tags": ["one"]})
        second = c.result("_zocrates/writes/tag", {"itemKeys": ["KARPDPR1"], "tags": ["two"]})
        for w in (first, second):
            asked = time.monotonic()
            confirmed = c.result("_zocrates/writes/confirm", {"writeId": w["id"]})
            # The bound is the behaviour under test: far inside the wait for a first attempt.
            assert time.monotonic() - asked < SETTLE_WAIT_S / 2
            assert confirmed["state"] == "queued" and "Zotero is not running" in (confirmed.get("error") or ""), confirmed
        pending = c.result("_zocrates/writes/list", {"pending": True})["writes"]
        assert sorted(x["id"] for x in pending) == sorted([first["id"], second["id"]])
    d.stop()


def test_writes_off_refuse_and_an_unknown_item_is_an_error_with_nothing_recorded(daemon_factory: Any) -> None:
    d = writes_daemon(daemon_factory, mode="off")
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        off = c.call("_zocrates/writes/save_note", {"markdown": "# Notes\n\nDense retrieval wins.", "parentItem": "KARPDPR1"})
        assert off["error"]["code"] == 1005 and off["error"]["data"]["kind"] == "write_refused", off
    d.stop()
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}, "writes": {"mode": "ask"}}))
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
        unknown = c.call("_zocrates/writes/tag", {"itemKeys": ["NOSUCH99"], "tags": ["x"]})
        assert unknown["error"]["data"]["kind"] == "not_found" and "NOSUCH99" in unknown["error"]["data"]["message"], unknown
        bad = c.call("_zocrates/writes/tag", {"itemKeys": ["LEWIS202"], "tags": ["   "]})
        assert bad["error"]["data"]["kind"] == "invalid_input", bad
        too_many = c.call("_zocrates/writes/tag", {"itemKeys": [f"ITEM{i:04d}" for i in range(51)], "tags": ["x"]})
        assert too_many["error"]["code"] == -32602, too_many
        assert c.result("_zocrates/writes/list", {})["writes"] == []
    d.stop()
