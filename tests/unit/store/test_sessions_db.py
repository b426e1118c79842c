"""`SessionsDb`, the one owner of sessions.db: every connection it opens gets the same pragmas, a
state delta is appended as one bookkeeping event shape, and `aclose()` leaves nothing open."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from sqlalchemy import text as sa_text

from zocratesd.errors import SessionNotFound
from zocratesd.store import APP_NAME, USER_ID, SessionsDb
from zocratesd.store.sqlite import BUSY_TIMEOUT_S

pytestmark = pytest.mark.anyio

CHECKED = ("journal_mode", "busy_timeout", "foreign_keys", "synchronous", "query_only")
WRITABLE = {"journal_mode": "wal", "busy_timeout": int(BUSY_TIMEOUT_S * 1000), "foreign_keys": 1, "synchronous": 2,
            "query_only": 0}


def settings(conn: sqlite3.Connection) -> dict[str, Any]:
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in CHECKED}


@pytest.fixture
async def db(tmp_path: Path) -> Any:
    async with SessionsDb.open(tmp_path) as store:
        await store.prepare_tables()
        yield store


async def test_every_connection_gets_the_same_pragmas(db: SessionsDb) -> None:
    async with (await db.service.adk()).db_engine.connect() as conn:  # SQLAlchemy's pool: the connect listener
        pooled = {name: (await conn.execute(sa_text(f"PRAGMA {name}"))).scalar() for name in CHECKED}
    assert pooled == WRITABLE
    writer = await anyio.to_thread.run_sync(lambda: settings(db.service._connection()))
    assert writer == WRITABLE
    reader = await db.reader._run(settings, None)
    assert reader == {**WRITABLE, "query_only": 1}
    own = db.connect()  # what maintenance reads with
    try:
        assert settings(own) == WRITABLE and own.isolation_level is None
    finally:
        own.close()


async def test_append_state_is_one_content_less_event(db: SessionsDb) -> None:
    made = await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s2")
    seeded = await db.append_state("s2", {"title": "Seed", "created_at": 1.5})  # by id: loads the session
    assert seeded.state["title"] == "Seed"
    before = made.last_update_time
    same = await db.append_state(made, {"title": "Renamed"})  # the Session ADK gave: no read
    assert same is made and made.state["title"] == "Renamed" and made.last_update_time >= before
    back = await db.service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
    assert back is not None and back.state["title"] == "Renamed"
    [event] = back.events
    assert event.author == "user" and event.content is None
    assert event.invocation_id.startswith("zocrates-meta-")
    assert event.actions.state_delta == {"title": "Renamed"}
    live = await db.reader.live_session("s1")
    assert live.title == "Renamed" and live.ui()["messages"] == []
    with pytest.raises(SessionNotFound):
        await db.append_state("nope", {"title": "x"})


async def test_aclose_leaves_no_connection_and_a_new_owner_takes_over(tmp_path: Path) -> None:
    db = SessionsDb.open(tmp_path)
    await db.prepare_tables()
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s2")  # the fast path's writer
    await db.reader.list_sessions()
    await db.aclose()
    # SQLite leaves WAL only when no other connection has the file open.
    conn = sqlite3.connect(db.path, timeout=0.1)
    try:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()
    async with SessionsDb.open(tmp_path) as again:
        assert again.path == db.path and again.gate is not db.gate
        assert [r.id for r in await again.reader.list_sessions()] == ["s1", "s2"]
        async with (await again.service.adk()).db_engine.connect() as c:  # the connect listener sets WAL again
            assert (await c.execute(sa_text("PRAGMA journal_mode"))).scalar() == "wal"
