"""Maintenance through the real daemon: at start-up, on demand over the socket, and with a turn in flight."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn

from zocratesd.store.database import integrity_check

pytestmark = pytest.mark.e2e

DAY = 86_400.0


def sql_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1e6):06d}"


def age(db: Any, session_id: str, *, created_days: float, updated_days: float) -> None:
    now = time.time()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE sessions SET create_time = ?, update_time = ? WHERE id = ?",
            (sql_time(now - created_days * DAY), sql_time(now - updated_days * DAY), session_id),
        )
    conn.close()


def make_sessions(path: str, n: int, *, with_turn: bool) -> list[str]:
    out = []
    with RawConn(path) as c:
        for _ in range(n):
            sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
            if with_turn:
                assert c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "What is RAG?"}]})["result"]
            out.append(sid)
    return out


def test_startup_and_on_demand_maintenance(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.state_dir.mkdir(parents=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"session_retention_days": 30, "max_saved_sessions": 3}))
    d.start()
    empty_old, empty_young = make_sessions(d.socket_path, 2, with_turn=False)
    chats = make_sessions(d.socket_path, 5, with_turn=True)
    d.stop()
    age(d.db_path, empty_old, created_days=2, updated_days=2)
    age(d.db_path, empty_young, created_days=0.5, updated_days=0.5)
    age(d.db_path, chats[0], created_days=60, updated_days=45)  # past retention
    for i, sid in enumerate(chats[1:], start=1):
        age(d.db_path, sid, created_days=10 - i, updated_days=10 - i)

    d.start()  # startup maintenance runs before the first write (reads are served meanwhile)
    with RawConn(d.socket_path) as c:
        # A write waits for start-up maintenance; after it, an on-demand pass finds nothing to do.
        report = c.result("_zocrates/storage/maintenance", {})
        assert report["empty_deleted"] == 0 and report["retention_deleted"] == 0
        assert report["vacuum"]["ran"] is False and report["vacuum"]["skipped_reason"] == "not_needed"
        left = {s["sessionId"] for s in c.result("session/list", {})["sessions"]}
        # empty_old (> 24 h, no message) and chats[0] (45 days > 30) went at start-up; of the rest,
        # only the 3 most recently updated survive the cap: empty_young and chats 3, 4.
        assert left == {empty_young, chats[3], chats[4]}
        stats = c.result("_zocrates/storage/stats", {})
        assert stats["session_count"] == 3 and stats["db_path"] == str(d.db_path)
        assert stats["event_count"] > 0 and 0 <= stats["freelist_ratio"] <= 1
        # The survivors are whole.
        ui = c.result("_zocrates/session/get", {"sessionId": chats[4]})
        assert [m["role"] for m in ui["messages"]][0] == "user"
    assert "startup maintenance" in d.stderr_text()
    assert integrity_check(d.db_path) == "ok"


def test_a_session_in_flight_is_immune_and_vacuum_waits(daemon_factory: Any) -> None:
    # Three chunks 3 s apart: the turn runs ~9 s from its model call, time for a maintenance pass
    # on a loaded machine.
    fake = FakeOpenAI(Behaviour(chunk_delay_s=3.0, use_tools=False))
    try:
        d = daemon_factory()
        d.state_dir.mkdir(parents=True)
        d.env["ZQ_KEY"] = "k"
        (d.state_dir / "zocrates_config.json").write_text(json.dumps(
            {"session_retention_days": 1, "model": {"provider": "openai", "name": "m", "base_url": fake.base_url, "api_key_env": "ZQ_KEY"}}
        ))
        d.start()
        with RawConn(d.socket_path) as a, RawConn(d.socket_path) as b:
            sid = a.result("session/new", {"cwd": "/tmp"})["sessionId"]
            age(d.db_path, sid, created_days=9, updated_days=9)  # old enough to be deleted...
            a.send({"jsonrpc": "2.0", "id": "turn", "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "one two three four five six"}]}})
            deadline = time.monotonic() + 60
            while not fake.requests:  # the turn has reached the model: its session is held
                assert time.monotonic() < deadline, "the turn never called the model"
                time.sleep(0.01)
            report = b.result("_zocrates/storage/maintenance", {})
            assert report["retention_deleted"] == 0  # ...but its turn is in flight
            assert report["vacuum"]["skipped_reason"] == "chat_in_progress"
            assert a.recv_reply("turn")["result"]["stopReason"] == "end_turn"
            # A turn just updated it, so it is no longer old either.
            assert b.result("_zocrates/storage/maintenance", {})["retention_deleted"] == 0
            assert [s["sessionId"] for s in b.result("session/list", {})["sessions"]] == [sid]
    finally:
        fake.close()
