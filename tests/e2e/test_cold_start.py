"""A daemon serves before its engine is loaded, on a real `zocratesd serve`.

The engine is held back by a hook the tests' entry module injects (tests/daemon_entry.py,
`HOLD_ENGINE_ENV`: it starts loading once the named file exists), so what is answered meanwhile
is answered without it: were a read to need the engine, it would hang here and the test would
time out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from daemon_entry import HOLD_ENGINE_ENV, HOLD_WIRE_ENV
from daemonproc import TEST_ENTRY
from rawrpc import RawConn
from shimhttp import Shim

QUESTION = "What is retrieval augmented generation?"


def _prompt(sid: str, text: str = QUESTION) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def _pending(c: RawConn, wait_s: float) -> list[dict[str, Any]]:
    """What arrives within `wait_s` (the connection's timeout restored after)."""
    got: list[dict[str, Any]] = []
    c.sock.settimeout(wait_s)
    try:
        while True:
            got.append(c.recv())
    except TimeoutError:
        return got
    finally:
        c.sock.settimeout(60)


def test_reads_are_answered_and_a_prompt_waits_while_the_engine_loads(daemon_factory: Any, tmp_path: Path) -> None:
    d = daemon_factory()
    d.command = TEST_ENTRY
    d.start()
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        sid = c.result("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
        assert c.call("session/prompt", _prompt(sid))["result"]["stopReason"] == "end_turn"
    assert d.stop() == 0

    hold = tmp_path / "let-the-engine-load"
    d.env[HOLD_ENGINE_ENV] = str(hold)
    d.start()
    with RawConn(d.socket_path, timeout=30) as c:
        init = c.result("initialize", {"protocolVersion": 1})
        assert init["agentCapabilities"]["_meta"]["zocrates"]["version"] == d.info["version"]
        assert [s["sessionId"] for s in c.result("session/list", {})["sessions"]] == [sid]
        shown = c.result("_zocrates/session/get", {"sessionId": sid})["messages"]
        assert [m["role"] for m in shown][0] == "user" and shown[-1]["role"] == "assistant"
        loaded = c.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        assert "result" in loaded, loaded
        replayed = [n["params"]["update"]["sessionUpdate"] for n in c.notifications if n["method"] == "session/update"]
        assert "user_message_chunk" in replayed and "agent_message_chunk" in replayed
        assert c.result("_zocrates/storage/stats", {})["session_count"] == 1
    with Shim(d.info) as http:
        assert [s["id"] for s in http.ok("GET", "/sessions")["sessions"]] == [sid]
        assert http.ok("GET", f"/sessions/{sid}")["session"]["messages"][0]["text"] == QUESTION
        assert http.ok("GET", "/sessions/storage_stats")["session_count"] == 1

    # A prompt waits for the engine, and says so; it is answered once the engine has loaded.
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        c.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": _prompt(sid, "And dense retrieval?")})
        early = _pending(c, 1.0)
        assert not [m for m in early if m.get("id") == "p"], early  # not answered, not refused
        starting = [m["params"]["update"] for m in early if m.get("method") == "session/update"
                    and (m["params"]["update"].get("_meta") or {}).get("zocrates", {}).get("starting")]
        assert starting and starting[0]["sessionUpdate"] == "agent_thought_chunk", early
        hold.touch()
        assert c.recv_reply("p")["result"]["stopReason"] == "end_turn"
        texts = [m["text"] for m in c.result("_zocrates/session/get", {"sessionId": sid})["messages"]]
        assert texts.count(QUESTION) == 1 and "And dense retrieval?" in texts
    assert d.stop() == 0


def test_sigterm_while_the_engine_imports_exits_promptly(daemon_factory: Any, tmp_path: Path) -> None:
    """A SIGTERM in the middle of the engine's import (seconds on a loaded machine; held here, in
    the import thread, for as long as the test likes) stops the daemon at once: the shutdown does
    not wait for the import thread (process/threads.py, `in_daemon_thread`)."""
    d = daemon_factory()
    d.command = TEST_ENTRY
    d.env[HOLD_ENGINE_ENV] = str(tmp_path / "never-created")
    d.start()
    deadline = time.monotonic() + 30
    while "the engine waits for" not in d.stderr_text():  # the import thread is running, held
        assert time.monotonic() < deadline, d.stderr_tail(2000)
        time.sleep(0.02)
    t0 = time.monotonic()
    assert d.stop(timeout=30) == 0
    took = time.monotonic() - t0
    # A shutdown that waited for the import would hang until stop() kills it; one that waited out
    # the 10 s grace for requests would take that long. A loaded machine's stop takes a few seconds.
    assert took < 9.0, f"stopping took {took:.1f} s"
    assert not d.state_dir.joinpath("daemon.json").exists()  # a clean shutdown, not a kill


def _maps_pydantic(pid: int) -> bool:
    """Whether the process has pydantic's compiled core loaded (mapped), read from outside."""
    return "_pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


def test_the_handshake_is_answered_before_the_wire_stack_loads(daemon_factory: Any, tmp_path: Path) -> None:
    """The socket serves before pydantic and the wire models are imported (rpc/handshake.py): a plain
    `initialize` and the library's status are answered at once; everything else, a handshake the plain check leaves to
    pydantic included, waits for them and then gets pydantic's answer. The wire stack is held back
    with its test seam, and the daemon is looked at from outside (its memory maps)."""
    hold = tmp_path / "let-the-wire-stack-load"
    d = daemon_factory()
    d.command = TEST_ENTRY
    d.env[HOLD_WIRE_ENV] = str(hold)
    d.start()
    pid = d.info["pid"]
    with RawConn(d.socket_path, timeout=30) as c:
        init = c.result("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {}}})
        assert init["agentCapabilities"]["_meta"]["zocrates"]["version"] == d.info["version"]
        # The library's status too (a progress bar polling a daemon that has just started).
        status = c.result("_zocrates/library/status", {})
        assert status["state"] == "starting" and status["data_dir"] == str(d.data_dir), status
        assert not _maps_pydantic(pid)
        c.send({"jsonrpc": "2.0", "id": "list", "method": "session/list", "params": {}})
        c.send({"jsonrpc": "2.0", "id": "lax", "method": "initialize", "params": {"protocolVersion": "1"}})
        c.send({"jsonrpc": "2.0", "id": "bad", "method": "initialize", "params": {"protocolVersion": 70000}})
        assert _pending(c, 1.0) == []  # held, not refused
        with RawConn(d.socket_path, timeout=30) as other:  # another client's handshake is not held
            assert other.result("initialize", {"protocolVersion": 1}) == init
        assert not _maps_pydantic(pid)
        hold.touch()
        replies = {r["id"]: r for r in (c.recv_reply() for _ in range(3))}
        assert replies["list"]["result"]["sessions"] == []
        assert replies["lax"]["result"] == init
        bad = replies["bad"]["error"]
        assert bad["code"] == -32602 and bad["data"]["errors"][0]["loc"] == "protocolVersion", bad
        assert _maps_pydantic(pid)
    assert d.stop() == 0
