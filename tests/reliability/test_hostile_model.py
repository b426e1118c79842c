"""A hostile model endpoint against one long-lived daemon: every attack in turn, memory and log audited.

One `zocratesd serve` (socket only) uses an OpenAI-compatible endpoint that this test runs on
127.0.0.1 (tests/fake_openai.py) and switches between its hostile modes: a 1 GiB SSE line, keep-alive
comments forever, a huge answer, calls of a tool that does not exist on every answer, and malformed
or forged lines. Each turn must end with a `model_error` (JSON-RPC 1003) the client sees, in bounded
time, in the same session; then a normal turn must work there. Afterwards: the daemon's peak memory
stayed bounded (/proc/<pid>/status VmHWM), sessions.db barely grew, nothing of the model's forged text
or escape sequences reached zocratesd.log raw, and the log is not flooded.

tests/e2e/test_hostile_model.py checks single attacks on fresh daemons (log forging, credentials);
tests/unit/engine/test_openai_model.py each limit in-process. This is all of them on one daemon.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonproc import DaemonProc
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn
from relkit import integrity, reliability_daemon, ro_connect

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.reliability,
    pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="peak memory is read from /proc/<pid>/status"),
]

MiB = 1024 * 1024
GiB = 1024 * MiB
MAX_TURN_S = 2.0  # model.max_turn_s: the keep-alive attack ends here
MAX_CALLS = 4  # model.max_calls_per_turn: the unknown-tool attack ends here
TURN_BOUND_S = 15.0  # any one failed turn, from prompt to error
TOTAL_BOUND_S = 60.0
PEAK_RSS_BOUND = 400 * MiB
DB_GROWTH_BOUND = 4 * MiB
LOG_BOUND = 1 * MiB

FORGED = "2099-01-01 00:00:00,000 ERROR zocratesd: the daemon was compromised"
EVIL = "boom\n" + FORGED + "\x1b[2J\x1b]0;owned\x07"
# A log record's first line (process/logs.py LOG_FORMAT), or a continuation line (indented).
RECORD_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: |    )")


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode()


def tool_call(**call: Any) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})


# Malformed answers, one per turn, each with a part of what model_error's message must say.
MALFORMED: list[tuple[bytes, str]] = [
    (b"data: 1", "should be an object"),
    (b"data: {this is not json", "not JSON"),
    (b"data: " + b"[" * 100_000, "not JSON"),
    (tool_call(index="abc", function={"name": "search_library", "arguments": "{}"}), "index should be an integer"),
    (tool_call(index=10**9, function={"name": "search_library", "arguments": "{}"}), "outside 0..63"),
    (sse({"choices": [{"index": 0, "delta": {"content": 5}}]}), "content should be a string"),
    # Text meant for the log: a forged record and terminal escapes, in an error and in a tool name.
    (sse({"error": {"message": EVIL}}), "boom\\n2099-01-01"),
    (tool_call(index=0, function={"name": "search\n" + FORGED + "\x1b[31m", "arguments": "{}"}), "cannot name a tool"),
]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def d(fake: FakeOpenAI) -> Iterator[DaemonProc]:
    config = {"model": {"provider": "openai", "name": "fake/hostile", "base_url": fake.base_url, "api_key_env": "ZR_MODEL_KEY",
                        "max_turn_s": MAX_TURN_S, "max_calls_per_turn": MAX_CALLS}}
    with reliability_daemon(http=False, config=config, env={"ZR_MODEL_KEY": "sk-reliability"}, prefix="zrh") as daemon:
        yield daemon


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def db_bytes(d: DaemonProc) -> int:
    return sum(p.stat().st_size for p in d.state_dir.glob("sessions.db*"))


def stored_bytes(d: DaemonProc, sid: str) -> int:
    conn = ro_connect(d.db_path)
    try:
        row = conn.execute("SELECT COALESCE(SUM(LENGTH(event_data)), 0) FROM events WHERE session_id = ?", (sid,)).fetchone()
    except sqlite3.Error as exc:  # pragma: no cover - the daemon owns the file; a read must work
        raise AssertionError(exc) from None
    finally:
        conn.close()
    return int(row[0])


def prompt(c: RawConn, sid: str, text: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    return reply, time.monotonic() - started


def test_every_attack_on_one_daemon_is_a_model_error_and_leaves_it_healthy(d: DaemonProc, fake: FakeOpenAI) -> None:
    t0 = time.monotonic()
    assert d.proc is not None
    pid = d.proc.pid
    log_path = d.state_dir / "zocratesd.log"
    with RawConn(d.socket_path, timeout=TURN_BOUND_S + 15) as c:
        sid = c.result("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
        # Warm: what a day's use costs. A first turn on a loaded machine may outlast model.max_turn_s
        # (2 s here, for the keep-alive attack below): that is the machine, not an attack; it is tried again.
        for _ in range(3):
            reply, _ = prompt(c, sid, "What is retrieval-augmented generation?")
            if "result" in reply or "max_turn_s" not in json.dumps(reply):
                break
        assert "result" in reply and reply["result"]["stopReason"] == "end_turn", reply
        base_rss, base_db, base_stored = status_kib(pid, "VmHWM") * 1024, db_bytes(d), stored_bytes(d, sid)
        requests_before = len(fake.requests)

        def attack(behaviour: Behaviour, question: str, expected: str) -> float:
            fake.behaviour = behaviour
            reply, took = prompt(c, sid, question)
            assert "error" in reply, f"{behaviour}: {reply}"
            err = reply["error"]
            assert (err["code"], err["data"]["kind"]) == (1003, "model_error"), err
            assert expected in err["data"]["message"], err
            # The endpoint when the model call failed; a turn's own deadline (engine/) names none.
            assert err["data"].get("endpoint", fake.base_url) == fake.base_url
            assert took < TURN_BOUND_S, f"{behaviour} took {took:.1f} s"
            assert c.result("_zocrates/session/get", {"sessionId": sid})["pending_hitl"] is None  # and not busy:
            return took

        # 1. One endless line: cut at model.max_line_bytes (8 MiB); the endpoint sees the daemon stop reading.
        sent = fake.sent_bytes
        attack(Behaviour(line_bytes=GiB), "What does the line say?", "model.max_line_bytes")
        line_sent = fake.sent_bytes - sent
        line_rss = status_kib(pid, "VmHWM") * 1024
        assert line_sent < 64 * MiB, f"the daemon read {line_sent / MiB:.0f} MiB of one line"
        assert line_rss < PEAK_RSS_BOUND, f"peak RSS {line_rss / MiB:.0f} MiB after a 1 GiB line"

        # 2. Keep-alive comments forever: the turn ends at model.max_turn_s, not at the read timeout.
        took = attack(Behaviour(keepalive_forever=True, keepalive_interval_s=0.05), "Still there?", "model.max_turn_s")
        assert took >= MAX_TURN_S * 0.9

        # 3. A huge answer: cut at model.max_answer_chars, nothing of it stored.
        attack(Behaviour(answer_chars=256 * MiB), "Tell me everything.", "model.max_answer_chars")

        # 4. A tool that does not exist, called on every answer: model.max_calls_per_turn calls, no more.
        calls = len(fake.requests)
        attack(Behaviour(unknown_tool="summon_daemon"), "Summon it.", "model.max_calls_per_turn")
        assert len(fake.requests) - calls == MAX_CALLS

        # 5. Malformed and forged lines.
        for line, expected in MALFORMED:
            attack(Behaviour(raw_lines=[line]), "Say something odd.", expected)

        # The endpoint behaves again: the same session answers normally, and remembers the first turn.
        fake.behaviour = Behaviour()
        reply, took = prompt(c, sid, "How does HyDE retrieve documents?")
        assert reply.get("result", {}).get("stopReason") == "end_turn", reply
        answer = [n["params"]["update"]["content"]["text"] for n in c.notifications
                  if n.get("method") == "session/update" and n["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
        assert "How does HyDE retrieve documents?" in "".join(answer[-20:])
        last = fake.requests[-1]["body"]["messages"]
        assert any("retrieval-augmented generation" in str(m.get("content")) for m in last)  # the history survived
        assert max(len(json.dumps(r["body"])) for r in fake.requests[requests_before:]) < 256 * 1024  # and no junk in it

    # Memory, store and log after everything.
    peak = status_kib(pid, "VmHWM") * 1024
    db_growth = db_bytes(d) - base_db
    stored_growth = stored_bytes(d, sid) - base_stored
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    print(f"peak RSS {base_rss / MiB:.0f} MiB before the attacks, {line_rss / MiB:.0f} MiB after the 1 GiB line "
          f"(the endpoint got {line_sent / MiB:.1f} MiB out), {peak / MiB:.0f} MiB at the end; sessions.db +{db_growth / 1024:.0f} KiB "
          f"(events +{stored_growth / 1024:.0f} KiB); log {len(log_text) / 1024:.0f} KiB; {time.monotonic() - t0:.1f} s")
    assert peak < PEAK_RSS_BOUND, f"peak RSS {peak / MiB:.0f} MiB"
    assert db_growth < DB_GROWTH_BOUND, f"sessions.db grew by {db_growth / MiB:.1f} MiB"
    assert stored_growth < 512 * 1024, f"the session's events grew by {stored_growth / 1024:.0f} KiB"
    assert integrity(d.db_path) == "ok"

    assert "boom\\n2099-01-01" in log_text  # the model's error text reached the log (through ADK), escaped
    assert "\x1b" not in log_text and "\x07" not in log_text
    forged = [line for line in log_text.splitlines() if not RECORD_LINE.match(line) or line.startswith("2099")]
    assert not forged, f"lines that are no record of the daemon's: {forged[:3]}"
    assert len(log_text.encode()) < LOG_BOUND, f"the log holds {len(log_text) / 1024:.0f} KiB"
    assert "x" * 4096 not in log_text and "y" * 4096 not in log_text  # no piece of the line or the answer
    stderr = d.stderr_tail(10 * MiB)
    assert "\x1b" not in stderr and not any(line.startswith("2099") for line in stderr.splitlines())

    assert d.running()
    assert d.stop(30) == 0
    assert time.monotonic() - t0 < TOTAL_BOUND_S
