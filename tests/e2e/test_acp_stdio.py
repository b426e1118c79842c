"""Editors' path: the official ACP Python SDK client drives `zocratesd stdio` (pump and standalone)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, spawn_agent_process
from adkevents import append_to_db, research_chat

from zocratesd import locations

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


class EditorClient:
    """What an editor implements: it records every session/update it is sent."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used yet
        raise RequestError.method_not_found("session/request_permission")


def stop_daemon(data_dir: Path, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(data_dir)], env=env, timeout=60, check=False
    )


async def exercise(args: list[str], env: dict[str, str], data_dir: Path) -> None:
    """The editor flow: initialize, new, list, load (replay), ext get/rename, delete, errors."""
    editor = EditorClient()
    async with spawn_agent_process(editor, sys.executable, "-m", "zocratesd", "stdio", *args, env=env) as (conn, proc):
        init = await conn.initialize(protocol_version=1)
        assert init.protocol_version == 1
        assert init.agent_capabilities.load_session is True
        caps = init.agent_capabilities.model_dump(by_alias=True, exclude_none=True)
        assert caps["sessionCapabilities"] == {"list": {}, "delete": {}, "resume": {}, "close": {}}
        meta = caps["_meta"]["zocrates"]
        assert "_zocrates/session/get" in meta["extensions"] and "_zocrates/session/rename" in meta["extensions"]

        sid = (await conn.new_session(cwd="/home/u/project")).session_id
        listed = await conn.list_sessions()
        assert [(s.session_id, s.cwd, s.title) for s in listed.sessions] == [(sid, "/home/u/project", "New Chat")]

        # History written by ADK itself (as a turn would), then replayed to the editor.
        await append_to_db(locations.state_dir(data_dir) / "sessions.db", sid, research_chat())
        loaded = await conn.load_session(cwd="/home/u/project", session_id=sid)
        assert [getattr(o, "root", o).id for o in loaded.config_options or []] == [
            "scope", "model", "research_budget", "compaction", "citation_style"
        ]
        # The session's slash commands come after each new/load answer (not part of the replay).
        replay = [u.model_dump(by_alias=True, exclude_none=True) for s, u in editor.updates if s == sid]
        replay = [u for u in replay if u["sessionUpdate"] != "available_commands_update"]
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
        assert replay[0]["content"]["text"] == "What is retrieval-augmented generation?"
        assert replay[2]["kind"] == "search" and replay[2]["rawInput"] == {"query": "RAG"}
        assert replay[3]["status"] == "completed"
        assert replay[-2]["content"]["text"] == "HyDE embeds a hypothetical answer [2]."
        assert all(u.get("messageId") for u in replay if u["sessionUpdate"].endswith("_chunk"))

        ui = await conn.ext_method("zocrates/session/get", {"sessionId": sid})
        assert [m["role"] for m in ui["messages"]] == ["user", "assistant", "assistant", "user", "assistant"]
        renamed = await conn.ext_method("zocrates/session/rename", {"sessionId": sid, "title": "RAG vs HyDE"})
        assert renamed["title"] == "RAG vs HyDE"

        with pytest.raises(RequestError) as info:
            await conn.load_session(cwd="/x", session_id="session-does-not-exist")
        assert info.value.code == -32002
        with pytest.raises(RequestError) as info:
            await conn.ext_method("zocrates/nope", {})
        assert info.value.code == -32601

        assert await conn._conn.send_request("session/delete", {"sessionId": sid}) == {}
        assert (await conn.list_sessions()).sessions == []
        with pytest.raises(RequestError) as info:
            await conn._conn.send_request("session/delete", {"sessionId": sid})
        assert info.value.code == -32002
        assert info.value.data["sessionId"] == sid


async def test_stdio_starts_the_daemon_and_speaks_acp(short_tmp: Path) -> None:
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    try:
        assert locations.live_daemon(data_dir) is None
        await exercise(["--zotero-data-dir", str(data_dir)], env, data_dir)
        # The daemon the pump started outlives the editor, and the next editor reuses it.
        first = locations.live_daemon(data_dir)
        assert first is not None
        await exercise(["--zotero-data-dir", str(data_dir)], env, data_dir)
        assert locations.live_daemon(data_dir).pid == first.pid  # type: ignore[union-attr]
    finally:
        stop_daemon(data_dir, env)


async def test_stdio_standalone_runs_the_core_in_process(short_tmp: Path) -> None:
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    await exercise(["--standalone", "--zotero-data-dir", str(data_dir)], env, data_dir)
    assert locations.live_daemon(data_dir) is None  # no daemon was started


def test_pump_exits_0_on_stdin_eof_after_forwarding_the_answers(daemon: Any) -> None:
    requests = b"".join(
        b'{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":"/tmp"}}\n' % i for i in range(20)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(daemon.data_dir)],
        input=requests, env=daemon.env, capture_output=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # Nothing but frames on stdout: each answer, and the session's slash commands after it.
    assert len(lines) == 40 and all(b'"sessionId"' in line for line in lines)
    assert sum(b'"available_commands_update"' in line for line in lines) == 20


def test_pump_reports_a_daemon_that_goes_away(daemon: Any) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(daemon.data_dir)],
        env=daemon.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"session/list"}\n')
    proc.stdin.flush()
    assert b'"sessions"' in proc.stdout.readline()
    daemon.kill()
    assert proc.wait(30) == 1
    assert b"daemon closed the connection" in proc.stderr.read()  # type: ignore[union-attr]


def test_two_editors_starting_at_once_share_one_daemon(short_tmp: Path) -> None:
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    cmd = [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(data_dir)]
    msg = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    try:
        procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
        outs = [p.communicate(msg, timeout=90) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
        assert all(b'"protocolVersion":1' in o[0] for o in outs)
        info = locations.live_daemon(data_dir)
        assert info is not None
        # A pump that started a daemon says so on stderr, once, naming the one that runs (issue 17).
        said = [o[1].decode() for o in outs if b"started zocratesd" in o[1]]
        assert said and all(s.count("started zocratesd") == 1 and f"(pid {info.pid})" in s for s in said), outs
        # Exactly one daemon survived; the losers of the lock race exit (each in its own time).
        deadline = time.monotonic() + 30
        while True:
            ps = subprocess.run(["pgrep", "-f", f"zocratesd serve --zotero-data-dir {data_dir}"], capture_output=True, text=True)
            if ps.stdout.split() == [str(info.pid)] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert ps.stdout.split() == [str(info.pid)]
    finally:
        stop_daemon(data_dir, env)


async def test_three_turns_over_stdio_survive_a_sigkill(short_tmp: Path) -> None:
    import json as _json
    import signal

    from acp import text_block
    from daemonproc import daemon_env
    from test_turns import write_library

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    data_dir = short_tmp / "zotero"
    write_library(data_dir)
    questions = ["What is retrieval-augmented generation?", "How does HyDE retrieve?", "Which one uses BERT encoders?"]
    try:
        editor = EditorClient()
        args = ("-m", "zocratesd", "stdio", "--zotero-data-dir", str(data_dir))
        async with spawn_agent_process(editor, sys.executable, *args, env=env) as (conn, _):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(short_tmp))).session_id
            for q in questions:
                reply = await conn.prompt(session_id=sid, prompt=[text_block(q)])
                assert reply.stop_reason == "end_turn"
            live = [u.model_dump(by_alias=True, exclude_none=True) for s, u in editor.updates if s == sid]
        answers: list[str] = []
        for u in live:
            if u["sessionUpdate"] == "agent_message_chunk":
                if not answers or answers[-1][0] != u["messageId"]:
                    answers.append((u["messageId"], ""))
                answers[-1] = (u["messageId"], answers[-1][1] + u["content"]["text"])
        assert len(answers) == 3 and all("# Cited Sources" in a for _, a in answers)

        pid = _json.loads((data_dir / "zocrates-data" / "daemon.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)

        editor = EditorClient()
        async with spawn_agent_process(editor, sys.executable, *args, env=env) as (conn, _):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(short_tmp), session_id=sid)
            replay = [u.model_dump(by_alias=True, exclude_none=True) for s, u in editor.updates if s == sid]
        assert [u["content"]["text"] for u in replay if u["sessionUpdate"] == "user_message_chunk"] == questions
        replayed = "".join(u["content"]["text"] for u in replay if u["sessionUpdate"] == "agent_message_chunk")
        assert replayed == "".join(a for _, a in answers)
        assert locations.live_daemon(data_dir).pid != pid  # type: ignore[union-attr]
    finally:
        stop_daemon(data_dir, env)


def test_a_daemon_that_cannot_start_is_reported_with_its_reason(short_tmp: Path) -> None:
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    data_dir = short_tmp / "zotero"
    (data_dir / "zocrates-data").mkdir(parents=True)
    (data_dir / "zocrates-data" / "zocrates_config.json").write_text('{"max_saved_sessions": "lots"}')
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(data_dir)],
        input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n',
        env=daemon_env(run), capture_output=True, timeout=60,
    )
    assert proc.returncode == 1 and time.monotonic() - started < 30
    log = data_dir / "zocrates-data" / "zocratesd.log"
    assert str(log).encode() in proc.stderr
    assert "max_saved_sessions" in log.read_text()  # the reason is in the file the message names
    assert proc.stdout == b""
