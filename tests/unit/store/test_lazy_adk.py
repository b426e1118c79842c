"""ADK's own DatabaseSessionService (and SQLAlchemy with it) is built only when something needs it
(store/writer.py): a daemon that starts on an existing store and runs a turn never imports it.
What the writer assumes of ADK's schema is pinned to ADK's own definitions here."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.adk.events import Event, EventActions
from google.adk.sessions import database_session_service as adk_dss
from google.adk.sessions.migration import _schema_check_utils
from google.adk.sessions.schemas.v1 import Base as BaseV1

from zocratesd.store import SessionsDb
from zocratesd.store.database import db_path
from zocratesd.store.sqlite import APP_NAME, USER_ID
from zocratesd.store.writer import ADK_INDEXES, ADK_TABLES, SCHEMA_VERSION, STALE_SESSION_MESSAGE, merge_state


def test_what_the_writer_checks_is_adks_schema() -> None:
    assert set(BaseV1.metadata.tables) == ADK_TABLES
    assert {ix.name for t in BaseV1.metadata.sorted_tables for ix in t.indexes} == ADK_INDEXES
    assert SCHEMA_VERSION == (_schema_check_utils.SCHEMA_VERSION_KEY, _schema_check_utils.LATEST_SCHEMA_VERSION)
    assert STALE_SESSION_MESSAGE == adk_dss._STALE_SESSION_ERROR_MESSAGE
    app, user, own = {"a": 1}, {"u": [2]}, {"k": {"n": 3}, "app:a": 0}
    assert merge_state(app, user, own) == adk_dss._merge_state(app, user, own)
    merged = merge_state(app, user, own)
    merged["k"]["n"] = 4  # a deep copy, as ADK's
    assert own["k"]["n"] == 3


async def _make_store(data_dir: Path) -> None:
    """A store as a previous daemon left it: ADK made the tables and the first session's state rows."""
    async with SessionsDb.open(data_dir) as db:
        await db.prepare_tables()
        assert db.service.adk_service is not None  # a new file: ADK prepared it
        s = await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s0")
        await db.service.append_event(s, Event(author="user", invocation_id="e-0"))


@pytest.mark.anyio
async def test_an_existing_store_is_served_without_adks_service(tmp_path: Path) -> None:
    await _make_store(tmp_path)
    async with SessionsDb.open(tmp_path) as db:
        await db.prepare_tables()
        svc = db.service
        s = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
        await svc.append_event(s, Event(author="user", invocation_id="e-1", actions=EventActions(state_delta={"x": 1})))
        got = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
        assert got is not None and got.state["x"] == 1 and len(got.events) == 1
        assert svc.adk_service is None
        # A pause with ADK's pool never built reopens through the writer, in WAL.
        async with db.paused(drain_timeout_s=1):
            conn = sqlite3.connect(db.path, timeout=0.1)
            try:
                assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
            finally:
                conn.close()
        assert sqlite3.connect(db.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # What only ADK does builds its service then, on the same file.
        listed = await svc.list_sessions(app_name=APP_NAME, user_id=USER_ID)
        assert sorted(x.id for x in listed.sessions) == ["s0", "s1"]
        assert svc.adk_service is not None
        await svc.delete_session(app_name=APP_NAME, user_id=USER_ID, session_id="s0")
        assert await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s0") is None


@pytest.mark.anyio
async def test_a_store_of_another_schema_goes_to_adks_prepare(tmp_path: Path) -> None:
    await _make_store(tmp_path)
    conn = sqlite3.connect(db_path(tmp_path))
    conn.execute("DROP INDEX idx_events_app_user_session_ts_id")  # as an older ADK left it
    conn.commit()
    conn.close()
    async with SessionsDb.open(tmp_path) as db:
        await db.service.prepare_tables()
        assert db.service.adk_service is not None
    names = {r[0] for r in sqlite3.connect(db_path(tmp_path)).execute("SELECT name FROM sqlite_master")}
    assert "idx_events_app_user_session_ts_id" in names  # ADK made it again


def test_a_turns_store_work_imports_no_sqlalchemy(tmp_path: Path) -> None:
    """In a fresh process, as a daemon started on an existing store: prepare, create, append,
    get. The child reports which modules it loaded."""
    import asyncio

    asyncio.run(_make_store(tmp_path))
    child = textwrap.dedent(f"""
        import asyncio, json, sys
        from pathlib import Path
        from google.adk.events import Event
        from zocratesd.store import SessionsDb
        from zocratesd.store.sqlite import APP_NAME, USER_ID

        async def main():
            async with SessionsDb.open(Path({str(tmp_path)!r})) as db:
                await db.prepare_tables()
                svc = db.service
                s = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s2")
                await svc.append_event(s, Event(author="user", invocation_id="e-2"))
                got = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s2")
                assert got is not None and len(got.events) == 1
                return svc.adk_service is None

        ok = asyncio.run(main())
        print(json.dumps({{"adk_unbuilt": ok, "loaded": sorted(m for m in sys.modules
                          if m.split(".")[0] in ("sqlalchemy", "aiosqlite") or m == "google.adk.sessions.database_session_service")}}))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"adk_unbuilt": True, "loaded": []}, report
