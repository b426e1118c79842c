"""The fast `append_event` (store/writer.py) writes exactly the rows ADK's own path writes."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from zocratesd.store import APP_NAME, USER_ID, SessionsDb
from zocratesd.store.database import db_path
from zocratesd.store.writer import FastAppendSessionService

pytestmark = pytest.mark.anyio


def events_for(session_id: str) -> list[Event]:
    """Every shape a turn appends: text, thoughts, calls and responses, state deltas (session,
    temp, nested, non-ASCII, a None), a branch event with custom metadata, usage."""
    inv = "e-inv-1"
    return [
        Event(author="user", invocation_id=inv, content=types.Content(role="user", parts=[types.Part(text="Qu'est-ce que RAG? ✓")]),
              actions=EventActions(state_delta={"active_mode": "library", "snippets": [{"item_key": "ABCD1234", "page": 3}],
                                                "temp:scratch": "gone", "title": "Qu'est-ce que RAG?"})),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[
            types.Part(text="Plan", thought=True),
            types.Part(function_call=types.FunctionCall(id="fc-1", name="search_library", args={"query": "RAG"}))])),
        Event(author="search_library", invocation_id=inv, branch="search_library@fc-1",
              content=types.Content(role="model", parts=[types.Part(text="Round 1")]), custom_metadata={"zocrates_round": {"n": 1}}),
        Event(author="search_library", invocation_id=inv, branch="search_library@fc-1",
              actions=EventActions(state_delta={"hitl_snapshot": {"evidence": [1.5, None, "é"]}})),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="user", parts=[
            types.Part(function_response=types.FunctionResponse(id="fc-1", name="search_library", response={"passages": []}))])),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[types.Part(text="Answer [1]")]),
              usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=10, total_token_count=12),
              actions=EventActions(state_delta={"hitl_snapshot": None})),
    ]


def dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = sqlite3.connect(db)
    try:
        return {
            # s2 is left alone: its update_time is its create time, which differs between the stores.
            "sessions": con.execute("SELECT app_name, user_id, id, state, update_time FROM sessions WHERE id != 's2'").fetchall(),
            "events": con.execute("SELECT * FROM events ORDER BY timestamp, id").fetchall(),
        }
    finally:
        con.close()


async def test_rows_are_byte_identical_to_adks_own_append(tmp_path: Path) -> None:
    db = SessionsDb.open(tmp_path / "fast")
    fast = db.service
    assert isinstance(fast, FastAppendSessionService)
    plain_db = tmp_path / "plain.db"
    plain = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{plain_db}")
    try:
        results = []
        events = events_for("s1")
        for svc in (fast, plain):
            session = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
            await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s2")
            for ev in events:  # the same events (ids, times) through both
                await svc.append_event(session, ev.model_copy(deep=True))
            results.append(session)
        # Same in-memory session afterwards: state, events, revision marker.
        a, b = results
        assert a.state == b.state and a.state["hitl_snapshot"] is None and "temp:scratch" in a.state
        assert [e.model_dump() for e in a.events] == [e.model_dump() for e in b.events]
        assert a._storage_update_marker == b._storage_update_marker and a.last_update_time == b.last_update_time
        # Same rows on disk (create times aside: each create_session sets its own).
        assert dump(db_path(tmp_path / "fast")) == dump(plain_db)
        # And ADK reads the fast rows back as it reads its own.
        again = await fast.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
        assert again is not None and again.state == {k: v for k, v in a.state.items() if not k.startswith("temp:")}
        assert [e.model_dump() for e in again.events] == [e.model_dump() for e in a.events]
        # ... and ADK's own append continues from a fast one without a stale error.
        await (await fast.adk()).append_event(again, Event(author="user", invocation_id="e-2"))
        await fast.append_event(again, Event(author="user", invocation_id="e-3"))
    finally:
        await plain.close()
        await db.aclose()


async def test_a_stale_writer_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    db = SessionsDb.open(tmp_path)
    svc = db.service
    try:
        one = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
        two = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
        assert two is not None
        await svc.append_event(one, Event(author="user", invocation_id="e-1"))
        before = dump(db_path(tmp_path))
        with pytest.raises(StaleSessionError):
            await svc.append_event(two, Event(author="user", invocation_id="e-2", actions=EventActions(state_delta={"x": 1})))
        assert dump(db_path(tmp_path)) == before
    finally:
        await db.aclose()


async def test_appends_to_many_sessions_at_once_all_land(tmp_path: Path) -> None:
    db = SessionsDb.open(tmp_path)
    svc = db.service
    try:
        sessions = [await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=f"s{i}") for i in range(16)]

        async def turn(s: Any) -> None:
            for n in range(10):
                await svc.append_event(s, Event(author="user", invocation_id=f"e-{n}", actions=EventActions(state_delta={"n": n})))

        await asyncio.gather(*(turn(s) for s in sessions))
        rows = dump(db_path(tmp_path))
        assert len(rows["events"]) == 160
        for s in sessions:
            back = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=s.id)
            assert back is not None and back.state["n"] == 9 and len(back.events) == 10
    finally:
        await db.aclose()


async def test_get_session_equals_adks_for_every_config(tmp_path: Path) -> None:
    from google.adk.sessions.base_session_service import GetSessionConfig

    db = SessionsDb.open(tmp_path)
    fast = db.service
    plain = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db_path(tmp_path)}")
    try:
        session = await fast.create_session(
            app_name=APP_NAME, user_id=USER_ID, session_id="s1", state={"app:theme": "dark", "user:lang": "fr"}
        )
        for ev in events_for("s1"):
            await fast.append_event(session, ev)
        middle = session.events[2].timestamp
        configs = [None, GetSessionConfig(), GetSessionConfig(num_recent_events=0), GetSessionConfig(num_recent_events=2),
                   GetSessionConfig(after_timestamp=middle), GetSessionConfig(after_timestamp=middle, num_recent_events=1),
                   GetSessionConfig(after_timestamp=session.events[-1].timestamp + 10)]
        for config in configs:
            ours = await fast.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1", config=config)
            theirs = await plain.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1", config=config)
            assert ours is not None and theirs is not None
            assert ours.model_dump() == theirs.model_dump(), config
            assert ours._storage_update_marker == theirs._storage_update_marker
            assert ours.state["app:theme"] == "dark" and ours.state["user:lang"] == "fr"
        assert await fast.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="nope") is None
        # The reader's window (compaction reads it) is ADK's windowed load, as stored JSON.
        for after in (session.events[0].timestamp, middle, session.events[-1].timestamp + 10):
            theirs = await plain.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1",
                                             config=GetSessionConfig(after_timestamp=after))
            assert theirs is not None
            assert await db.reader.window("s1", after) == [e.model_dump(exclude_none=True, mode="json") for e in theirs.events]
    finally:
        await plain.close()
        await db.aclose()


async def test_create_session_equals_adks(tmp_path: Path) -> None:
    from google.adk.errors.already_exists_error import AlreadyExistsError

    db = SessionsDb.open(tmp_path / "fast")
    fast = db.service
    plain_db = tmp_path / "plain.db"
    plain = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{plain_db}")
    try:
        made = {}
        for name, svc in (("fast", fast), ("plain", plain)):
            first = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s0")  # makes the state rows
            second = await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1",
                                              state={"title": "Thèse", "temp:x": 1, "n": [1, None]})
            with pytest.raises(AlreadyExistsError):
                await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
            made[name] = (first, second)
            # It is a session ADK can load and append to.
            await svc.append_event(second, Event(author="user", invocation_id="e-1", actions=EventActions(state_delta={"k": 2})))
            back = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
            assert back is not None and back.state["title"] == "Thèse" and back.state["k"] == 2 and "temp:x" not in back.state
        f, p = made["fast"][1], made["plain"][1]
        assert (f.id, f.app_name, f.user_id, f.state, len(f.events)) == (p.id, p.app_name, p.user_id, p.state, len(p.events))
        con_f, con_p = sqlite3.connect(db_path(tmp_path / "fast")), sqlite3.connect(plain_db)
        try:
            q = "SELECT app_name, user_id, id, state, length(create_time), create_time = update_time FROM sessions WHERE id = 's1'"
            row_f = con_f.execute(q).fetchone()
            assert row_f == con_p.execute(q).fetchone()
            assert row_f is not None
        finally:
            con_f.close()
            con_p.close()
    finally:
        await plain.close()
        await db.aclose()
