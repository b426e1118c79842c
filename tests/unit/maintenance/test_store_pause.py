"""The store pause the swap relies on (store/database.py): the gate, and that a paused store has no
connection open on the file (proved by SQLite itself, which refuses to leave WAL otherwise)."""

from __future__ import annotations

import sqlite3
from typing import Any

import anyio
import pytest
from maintworld import World

from zocratesd.store import APP_NAME, USER_ID
from zocratesd.store.database import StoreBusy, StoreGate

pytestmark = pytest.mark.anyio


async def test_requests_wait_while_paused_and_the_pause_waits_for_requests() -> None:
    gate = StoreGate()
    log: list[str] = []

    async def request(name: str, hold: float) -> None:
        async with gate.request():
            log.append(f"{name} in")
            await anyio.sleep(hold)
            log.append(f"{name} out")

    async def pause() -> None:
        async with gate.paused(drain_timeout_s=5):
            log.append("paused")
            await anyio.sleep(0.1)
            log.append("resuming")

    async with anyio.create_task_group() as tg:
        tg.start_soon(request, "early", 0.1)
        await anyio.sleep(0.01)
        tg.start_soon(pause)
        await anyio.sleep(0.01)
        tg.start_soon(request, "late", 0)
    assert log == ["early in", "early out", "paused", "resuming", "late in", "late out"]
    assert not gate.is_paused


async def test_a_pause_that_cannot_drain_raises_store_busy_and_reopens() -> None:
    gate = StoreGate()
    release = anyio.Event()
    entered: list[str] = []

    async def stuck() -> None:
        async with gate.request():
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stuck)
        await anyio.sleep(0.01)
        with pytest.raises(StoreBusy):
            async with gate.paused(drain_timeout_s=0.05):
                entered.append("body")  # pragma: no cover - must not run
        assert entered == [] and not gate.is_paused
        async with gate.request():  # open again
            pass
        release.set()


async def test_one_pause_at_a_time() -> None:
    gate = StoreGate()
    async with gate.paused(drain_timeout_s=1):
        with pytest.raises(RuntimeError):
            async with gate.paused(drain_timeout_s=1):
                pass  # pragma: no cover
    assert not gate.is_paused


async def test_a_paused_store_has_no_connection_open_and_reopens_in_wal(world: World) -> None:
    sid = await world.chat("before")
    # The daemon's start-up pass left maintenance's own connection open; the real swap manages it
    # itself. This test pauses by hand, so it closes that one and checks everything else.
    await world.maintenance.aclose()
    await world.daemon.get_session(sid)  # the reader's connection is open now
    adk = world.service.adk_service  # built when the new file's tables were made
    assert adk is not None
    engine = adk.db_engine
    assert engine.pool.checkedin() >= 1
    probe = _Closable()
    async with world.store.paused(probe, drain_timeout_s=1):
        assert world.store.gate.is_paused
        assert probe.closed
        # SQLite leaves WAL only when no other connection (of any process) has the file open.
        conn = sqlite3.connect(world.db, timeout=0.1)
        try:
            assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
        finally:
            conn.close()
    assert not world.store.gate.is_paused
    assert engine.pool.checkedin() == 1  # reopened eagerly, with the connect hook's WAL
    assert world.sql("PRAGMA journal_mode")[0][0] == "wal"
    assert (await world.daemon.get_session(sid))["title"] == "before"
    await world.chat("after")


async def test_the_store_reopens_after_an_error_in_the_pause(world: World) -> None:
    sid = await world.chat()
    with pytest.raises(ZeroDivisionError):
        async with world.store.paused(drain_timeout_s=1):
            raise ZeroDivisionError
    assert not world.store.gate.is_paused
    assert (await world.daemon.get_session(sid))["messages"]


async def test_every_request_of_the_owner_passes_its_one_gate(world: World) -> None:
    """The reader, the fast writer, ADK's own ORM path and maintenance's reads all wait while the
    gate is paused: nothing of this process can reach the file behind maintenance's back."""
    sid = await world.chat("gated")
    store, svc = world.store, world.service
    session = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    assert session is not None
    requests: dict[str, Any] = {
        "reader": lambda: world.daemon.get_session(sid),
        "fast get": lambda: svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid),
        "fast append": lambda: store.append_state(session, {"cwd": "/x"}),
        "fast create": lambda: svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="made-while-paused"),
        "adk list": lambda: svc.list_sessions(app_name=APP_NAME, user_id=USER_ID),
        "maintenance": world.maintenance.stats,
    }
    done: list[str] = []

    async def request(name: str) -> None:
        await requests[name]()
        done.append(name)

    async with anyio.create_task_group() as tg:
        async with store.gate.paused(drain_timeout_s=1):
            for name in requests:
                tg.start_soon(request, name)
            await anyio.sleep(0.2)
            assert done == []
    assert sorted(done) == sorted(requests)
    assert (await world.daemon.live_session(sid)).state["cwd"] == "/x"


class _Closable:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> Any:
        self.closed = True
