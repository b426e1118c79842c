"""zocrates_client against the real daemon (`zocratesd serve` as a subprocess), on asyncio and trio.

Most tests share one daemon per module (a daemon takes about a second to start, and these tests
only add sessions of their own); the ones that kill or start a daemon get their own. The client's
wire behaviour that the daemon cannot be made to show on demand (requests to the client, overflow,
oversize frames) is tested against a fake daemon in tests/unit/client/test_client_wire.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from adkevents import append_to_db, research_chat
from daemonproc import DaemonProc, daemon_env
from rawrpc import RawConn

import zocrates_client
from zocrates_client import ConnectionLost, DaemonNotRunning, RpcError, connect
from zocratesd import locations

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CHAT_TITLE = "RAG reading group"
# Everything here is local; a call slower than this is a hang (the first write waits for the
# engine's import: tens of seconds on a loaded machine).
CALL_TIMEOUT_S = 60.0
# How soon a killed daemon must turn a pending call into ConnectionLost.
LOSS_DETECTION_S = 2.0
STOP_TIMEOUT_S = 15.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProc]:
    """One daemon for the module's read-mostly tests."""
    root = Path(tempfile.mkdtemp(prefix="zc", dir="/tmp"))  # short: socket paths are capped
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run))
    d.data_dir.mkdir()
    d.start()
    try:
        yield d
    finally:
        d.stop(STOP_TIMEOUT_S)
        shutil.rmtree(root, ignore_errors=True)


def seed_history(d: DaemonProc, session_id: str) -> None:
    """Write research_chat() into the session through ADK, as a turn would (own loop, own thread)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, append_to_db(d.db_path, session_id, research_chat())).result()


@pytest.fixture(scope="module")
def chat(shared: DaemonProc) -> str:
    """A session with a two-turn conversation in it (tool call, thought). Tests must not change it."""
    with RawConn(shared.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/home/u/notes", "_meta": {"zocrates": {"title": CHAT_TITLE}}})["sessionId"]
    seed_history(shared, sid)
    return str(sid)


def stop_by_pid(data_dir: Path) -> None:
    """Stop a daemon this test started through the client (its pid is in daemon.json)."""
    info = locations.read_daemon_info(data_dir)
    if info is None or not locations.pid_alive(info.pid):
        return
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while locations.lock_is_held(locations.state_dir(data_dir) / locations.LOCK_NAME) and time.monotonic() < deadline:
        time.sleep(0.05)


# --- discovery --------------------------------------------------------------------------------


async def test_finds_the_daemon_through_the_data_dir_and_initializes(shared: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            assert client.socket_path == shared.info["socket"]
            assert client.data_dir == shared.data_dir.resolve()
            init = await client.initialize()
        assert init.protocol_version == locations.PROTOCOL_VERSION
        assert init.agent_name == "zocratesd" and init.zocrates_version == shared.info["version"]
        assert {"_zocrates/session/get", "_zocrates/session/rename"} <= set(init.extensions)
        assert init.capabilities["loadSession"] is True

        # No argument: $ZOTERO_DATA_DIR names the data dir, as for zocratesd itself.
        monkeypatch.setenv("ZOTERO_DATA_DIR", str(shared.data_dir))
        async with connect() as client:
            assert client.socket_path == shared.info["socket"]


async def test_connects_to_an_explicit_socket(shared: DaemonProc) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(socket_path=shared.socket_path) as client:
            assert client.data_dir is None
            assert isinstance(await client.list_sessions(), list)


async def test_no_daemon_is_daemon_not_running_naming_the_data_dir(short_tmp: Path) -> None:
    data_dir = short_tmp / "zotero"
    state = locations.state_dir(data_dir)
    state.mkdir(parents=True)
    for stale in (False, True):
        if stale:
            # A daemon.json left behind by a dead daemon is not trusted.
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
            info = {"pid": int(dead.stdout), "socket": str(short_tmp / "gone.sock"), "protocol_version": 1, "version": "0.1.0"}
            (state / locations.INFO_NAME).write_text(json.dumps(info))
        with pytest.raises(DaemonNotRunning) as caught:
            async with connect(data_dir=data_dir):
                pass  # pragma: no cover
        message = str(caught.value)
        assert str(data_dir.resolve()) in message and "zocratesd serve" in message
        assert caught.value.data_dir == data_dir.resolve()


async def test_start_daemon_starts_one_and_connects(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    for key, value in daemon_env(run).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)  # the daemon we start inherits our environment
    for key in [k for k in os.environ if k.startswith("ZOCRATES_") or k == "ZOTERO_DATA_DIR"]:
        monkeypatch.delenv(key)
    data_dir = short_tmp / "zotero"
    try:
        with anyio.fail_after(60):
            async with connect(data_dir=data_dir, start_daemon=True) as client:
                assert await client.list_sessions() == []
        info = locations.live_daemon(data_dir.resolve())
        assert info is not None and info.socket == client.socket_path
        assert info.socket.startswith(str(run))
    finally:
        stop_by_pid(data_dir.resolve())


# --- every method -------------------------------------------------------------------------------


async def test_session_lifecycle_new_list_get_rename_delete(shared: DaemonProc) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            before = time.time()
            sid = await client.new_session(cwd="/home/u/thesis", title="  Thesis\tchapter 2 ")
            listed = {s.session_id: s for s in await client.list_sessions()}
            info = listed[sid]
            assert (info.title, info.cwd) == ("Thesis chapter 2", "/home/u/thesis")
            assert info.created_at is not None and info.updated_at is not None
            assert before - 1 <= info.created_at <= info.updated_at <= time.time() + 1

            ui = await client.get_session(sid)
            assert (ui["id"], ui["title"], ui["messages"], ui["pending_hitl"]) == (sid, "Thesis chapter 2", [], None)

            summary = await client.rename_session(sid, "Chapter 2, revised")
            assert summary["id"] == sid and summary["title"] == "Chapter 2, revised"
            assert (await client.get_session(sid))["title"] == "Chapter 2, revised"

            await client.delete_session(sid)
            assert sid not in {s.session_id for s in await client.list_sessions()}
            with pytest.raises(RpcError) as caught:
                await client.get_session(sid)
            assert caught.value.code == zocrates_client.RESOURCE_NOT_FOUND


async def test_new_session_defaults_to_the_current_directory_and_the_default_title(
    shared: DaemonProc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            sid = await client.new_session()
            info = {s.session_id: s for s in await client.list_sessions()}[sid]
    assert info.cwd == str(tmp_path) and info.title == "New Chat"


async def test_unknown_sessions_are_resource_not_found_everywhere(shared: DaemonProc) -> None:
    missing = "session-0-000000"
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            for call in (
                client.get_session(missing),
                client.load_session(missing),
                client.delete_session(missing),
                client.rename_session(missing, "x"),
            ):
                with pytest.raises(RpcError) as caught:
                    await call
                assert caught.value.code == -32002 and caught.value.kind == "not_found"
                assert missing in str(caught.value)


async def test_invalid_ids_and_titles_are_invalid_params(shared: DaemonProc) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            for bad in ("../../etc/passwd", "", "a b"):
                for call in (
                    client.get_session(bad),
                    client.load_session(bad),
                    client.delete_session(bad),
                    client.rename_session(bad, "x"),
                ):
                    with pytest.raises(RpcError) as caught:
                        await call
                    assert caught.value.code == -32602 and caught.value.kind == "invalid_params"
            sid = await client.new_session(title="valid")
            with pytest.raises(RpcError) as caught:
                await client.rename_session(sid, "")
            assert caught.value.code == -32602 and "title" in str(caught.value)


async def test_load_session_returns_the_replayed_history_in_order(shared: DaemonProc, chat: str) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            replay = await client.load_session(chat)
            ui = await client.get_session(chat)
    kinds = [u["sessionUpdate"] for u in replay]
    assert kinds == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_thought_chunk",
        "agent_message_chunk",
        "user_message_chunk",
        "agent_message_chunk",
        "session_info_update",
    ]
    assert replay[-1]["title"] == CHAT_TITLE
    said = [u["content"]["text"] for u in replay if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")]
    assert said == [m["text"] for m in ui["messages"]]
    assert replay[2]["title"] == "search_library" and replay[3]["status"] == "completed"


async def _without_commands(updates: Any, n: int) -> Any:
    """The next `n` updates of a subscription that are not `available_commands_update`."""
    while n:
        u = await updates.__anext__()
        if u.update.get("sessionUpdate") != "available_commands_update":
            n -= 1
            yield u


async def test_a_subscription_receives_the_updates_of_a_load(shared: DaemonProc, chat: str) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            other = await client.new_session(title="other")
            with client.updates() as everything, client.updates(session_id=other) as only_other:
                replay = await client.load_session(chat)
                # The slash commands that follow each new/load answer are not part of a replay.
                received = [u async for u in _without_commands(everything, len(replay))]
                await client.load_session(other)
                first_other = [u async for u in _without_commands(only_other, 1)][0]
    assert [(u.session_id, u.update) for u in received] == [(chat, u) for u in replay]
    # The filtered subscription skipped the whole replay of `chat`.
    assert first_other.session_id == other and first_other.update == {"sessionUpdate": "session_info_update", "title": "other"}


async def test_generic_call_and_notify(shared: DaemonProc, chat: str) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:
            raw = await client.call("_zocrates/session/get", {"sessionId": chat})
            assert raw["title"] == CHAT_TITLE and len(raw["messages"]) == 5
            with pytest.raises(RpcError) as caught:
                await client.call("session/frobnicate", {})
            assert caught.value.code == zocrates_client.METHOD_NOT_FOUND
            await client.notify("$/cancel_request", {"requestId": 12345})
            await client.notify("session/frobnicate")
            assert chat in {s.session_id for s in await client.list_sessions()}  # the connection is intact


async def test_concurrent_calls_on_one_connection_each_get_their_own_answer(shared: DaemonProc) -> None:
    titles = [f"parallel {n}" for n in range(20)]
    got: dict[str, str] = {}
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with connect(data_dir=shared.data_dir) as client:

            async def make(title: str) -> None:
                sid = await client.new_session(title=title)
                got[title] = (await client.get_session(sid))["title"]

            async with anyio.create_task_group() as tg:
                for title in titles:
                    tg.start_soon(make, title)
    assert got == {t: t for t in titles}


# --- connection loss ----------------------------------------------------------------------------


async def test_killing_the_daemon_fails_a_pending_call_promptly(daemon: DaemonProc) -> None:
    assert daemon.proc is not None
    async with connect(data_dir=daemon.data_dir) as client:
        sid = await client.new_session(title="doomed")
        updates = client.updates()
        outcome: list[tuple[BaseException, float]] = []

        async def pending_call() -> None:
            try:
                await client.get_session(sid)
            except ConnectionLost as exc:
                outcome.append((exc, time.monotonic()))

        os.kill(daemon.proc.pid, signal.SIGSTOP)  # frozen: the request goes out, no answer comes
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pending_call)
                with anyio.fail_after(CALL_TIMEOUT_S):
                    while not client._conn.pending:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.1)
                assert not outcome  # still waiting for the frozen daemon
                await anyio.to_thread.run_sync(daemon.kill)
                killed_at = time.monotonic()
                with anyio.fail_after(LOSS_DETECTION_S):
                    with pytest.raises(ConnectionLost, match="zocratesd closed the connection"):
                        await updates.__anext__()
        finally:
            daemon.kill()  # also SIGKILLs a daemon left frozen by a failed assertion
        assert len(outcome) == 1
        error, failed_at = outcome[0]
        assert str(error).startswith("zocratesd closed the connection")
        assert str(error).endswith("before _zocrates/session/get was answered")
        assert failed_at - killed_at < LOSS_DETECTION_S
        with pytest.raises(ConnectionLost):
            await client.list_sessions()
