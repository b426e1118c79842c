"""Crash: SIGKILL the daemon at random points of turns, compactions, rewinds and maintenance.

Each chain (seeded, independent of the others so that xdist can run them side by side) restarts
one daemon on one data dir again and again. Every iteration starts the daemon, checks the store
against what the daemon had acknowledged before, runs some acknowledged set-up, then starts one
victim operation and SIGKILLs the daemon at a random point of it: after the k-th notification of a
turn (k random), some milliseconds into its post-turn compaction, a rewind or a maintenance pass.

After each restart:
- `PRAGMA integrity_check` is ok;
- every event that was stored when the daemon acknowledged an operation is still there;
- an acknowledged delete stayed deleted, an acknowledged rewind still hides its turns, and
  retention removed exactly the sessions its policy names (the oldest beyond the cap);
- a research checkpoint left pending by an acknowledged turn is still pending, the same one;
- every session takes the next operation (the next iteration's set-up asserts that).

Adding an operation is adding a function to OPS. The checkpoint victim kills the daemon while a
deep question waits at its research checkpoint (issue 5); the resume victim kills it in the middle
of answering one (`_zocrates/chat/resume`): the turn must still be answerable afterwards, at the
same checkpoint or the next.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from rawrpc import RawConn
from relkit import QUESTIONS, integrity, reliability_daemon, session_events, session_ids

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

SEED = 20261211
CHAINS = 3  # independent daemons and data dirs; xdist spreads them over its workers
ITERATIONS_PER_CHAIN = 8  # 3 x 8 = 24 SIGKILLs (issue 10: 20 or more)
MAX_SESSIONS = 5  # the retention cap (max_saved_sessions): maintenance then has something to delete
# Compaction after every turn from the third on (a decision threshold of 0: the probe always
# agrees), so every late turn ends in a compaction step that a kill can land in.
CONFIG = {
    "max_saved_sessions": MAX_SESSIONS,
    "session_retention_days": None,
    "compaction": {"min_turns": 3, "token_floor": 0, "decision_threshold": 0.0},
    # One search round before a research checkpoint: a question of several aspects stops at one.
    "research": {"initial_budget": 1, "max_extensions": 2},
}
# Three aspects: with initial_budget 1 the turn pauses at a checkpoint after the first round.
DEEP_QUESTION = ("What is retrieval-augmented generation? How does HyDE write hypothetical documents? "
                 "Which encoders does dense passage retrieval use?")
MAX_KILL_NOTIFICATION = 32  # a turn of the offline model streams ~30-45 notifications: most kills land inside it
REQUEST_TIMEOUT_S = 60.0


@dataclass
class Tracked:
    """One session, as far as the daemon acknowledged it."""

    sid: str
    acked_ids: set[str] = field(default_factory=set)  # event ids stored when an operation was acknowledged
    live: list[str] = field(default_factory=list)  # acknowledged live turns (invocation ids), in order
    hidden: set[str] = field(default_factory=set)  # turns an acknowledged rewind hid
    maybe_hidden: set[str] = field(default_factory=set)  # turns a rewind the kill cut short may have hid
    pending: dict[str, Any] | None = None  # the checkpoint an acknowledged turn left pending
    resumed: str | None = None  # a turn whose checkpoint answer the kill cut short (its invocation id)


@dataclass
class Chain:
    d: Any
    rng: random.Random
    sessions: dict[str, Tracked] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)  # acknowledged deletes
    retention: set[str] | None = None  # after a maintenance victim: the sessions its policy keeps
    log: list[str] = field(default_factory=list)

    def snapshot(self, sid: str) -> None:
        """After an acknowledged operation: what is stored now is acknowledged."""
        ids = {e["id"] for e in session_events(self.d.db_path, sid)}
        t = self.sessions[sid]
        assert t.acked_ids <= ids, f"{sid}: acknowledged events vanished while the daemon ran"
        t.acked_ids = ids


class Conn(RawConn):
    """RawConn that declines every request the daemon sends (a checkpoint's permission request):
    the turn then ends with its checkpoint pending instead of waiting for us."""

    def recv_reply(self, id: Any = None) -> dict[str, Any]:
        while True:
            msg = self.recv()
            if "method" in msg and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "declined"}})
                continue
            if "method" in msg:
                self.notifications.append(msg)
                continue
            if id is None or msg.get("id") == id:
                return msg


def prompt_params(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def question(rng: random.Random) -> str:
    # The tag goes inside the question: after its "?" it would be an aspect of its own, and with a
    # budget of one round the turn would stop at a checkpoint.
    return f"{rng.choice(QUESTIONS).rstrip('?')} (crash ref {rng.randrange(10**6)})?"


def acked_turn(ch: Chain, c: Conn, sid: str) -> None:
    """A turn that must succeed; its events are acknowledged."""
    reply = c.call("session/prompt", prompt_params(sid, question(ch.rng)))
    assert "result" in reply, reply
    result = reply["result"]
    assert result["stopReason"] == "end_turn", result
    meta = result["_meta"]["zocrates"]
    t = ch.sessions[sid]
    t.live.append(meta["invocationId"])
    t.pending = meta.get("pendingHitl")
    c.notifications.clear()
    ch.snapshot(sid)


def new_session(ch: Chain, c: Conn) -> str:
    sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
    ch.sessions[sid] = Tracked(sid)
    ch.snapshot(sid)
    return sid


def pick_session(ch: Chain, c: Conn, min_turns: int = 0) -> str:
    """A tracked session with at least `min_turns` live turns (made with acknowledged turns if needed)."""
    ready = [t.sid for t in ch.sessions.values() if len(t.live) >= min_turns]
    if ready and (len(ch.sessions) >= MAX_SESSIONS - 1 or ch.rng.random() < 0.7):
        return ch.rng.choice(sorted(ready))
    candidates = sorted(ch.sessions)
    sid = ch.rng.choice(candidates) if candidates and len(ch.sessions) >= MAX_SESSIONS - 1 else new_session(ch, c)
    while len(ch.sessions[sid].live) < min_turns:
        acked_turn(ch, c, sid)
    return sid


def kill_now(ch: Chain, extra_s: float = 0.0) -> None:
    if extra_s:
        time.sleep(extra_s)
    ch.d.kill()


def forget_checkpoint(ch: Chain, sid: str) -> None:
    """A victim on this session may supersede (a prompt) or hide (a rewind) its pending checkpoint
    before the kill: once it is sent, the checkpoint is no longer promised."""
    ch.sessions[sid].pending = None


def send_and_kill(ch: Chain, c: Conn, method: str, params: dict[str, Any], *, after_notes: int | None = None,
                  after_first: str | None = None, delay_s: float = 0.0) -> dict[str, Any] | None:
    """Send a request, then SIGKILL the daemon: after `after_notes` notifications, or `delay_s`
    after the first update of kind `after_first`, or `delay_s` after sending. Returns the reply if
    it arrived before the kill (the operation was acknowledged), else None."""
    if "sessionId" in params:
        forget_checkpoint(ch, params["sessionId"])
    c.send({"jsonrpc": "2.0", "id": "victim", "method": method, "params": params})
    if after_notes is None and after_first is None:
        kill_now(ch, delay_s)
        return None
    notes = 0
    c.sock.settimeout(REQUEST_TIMEOUT_S)
    while True:
        msg = c.recv()
        if "method" in msg and "id" in msg:
            c.send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "declined"}})
            continue
        if "method" in msg:
            notes += 1
            kind = msg["params"].get("update", {}).get("sessionUpdate")
            if after_notes is not None and notes >= after_notes:
                kill_now(ch, delay_s)
                return None
            if after_first is not None and kind == after_first:
                kill_now(ch, delay_s)
                return None
            continue
        if msg.get("id") == "victim":
            kill_now(ch)
            return msg


# --- the victims --------------------------------------------------------------------------------


def victim_turn(ch: Chain, c: Conn) -> str:
    sid = pick_session(ch, c)
    k = ch.rng.randint(1, MAX_KILL_NOTIFICATION)
    reply = send_and_kill(ch, c, "session/prompt", prompt_params(sid, question(ch.rng)), after_notes=k,
                          delay_s=ch.rng.uniform(0.0, 0.003))
    record_victim_turn(ch, sid, reply)
    return f"turn on {sid}, killed after notification {k}" + (" (answered first)" if reply else "")


def victim_compaction(ch: Chain, c: Conn) -> str:
    sid = pick_session(ch, c, min_turns=2)  # this turn is the third or later: it compacts
    delay = ch.rng.uniform(0.0, 0.03)
    reply = send_and_kill(ch, c, "session/prompt", prompt_params(sid, question(ch.rng)),
                          after_first="agent_message_chunk", delay_s=delay)
    record_victim_turn(ch, sid, reply)
    return f"compaction on {sid}, killed {delay * 1000:.1f} ms into the answer" + (" (answered first)" if reply else "")


def record_victim_turn(ch: Chain, sid: str, reply: dict[str, Any] | None) -> None:
    if reply is not None and "result" in reply:  # acknowledged before the kill: its events count
        ch.sessions[sid].live.append(reply["result"]["_meta"]["zocrates"]["invocationId"])
        ch.sessions[sid].pending = reply["result"]["_meta"]["zocrates"].get("pendingHitl")
        ch.snapshot(sid)


def victim_rewind(ch: Chain, c: Conn) -> str:
    sid = pick_session(ch, c, min_turns=2)
    t = ch.sessions[sid]
    target_i = ch.rng.randrange(len(t.live))
    delay = ch.rng.uniform(0.0, 0.02)
    forget_checkpoint(ch, sid)
    c.send({"jsonrpc": "2.0", "id": "victim", "method": "_zocrates/session/rewind",
            "params": {"sessionId": sid, "invocationId": t.live[target_i]}})
    time.sleep(delay)
    ch.d.kill()
    # Whatever arrived before the kill: an answer means the rewind was acknowledged.
    c.sock.settimeout(2.0)
    reply = None
    try:
        while (msg := c.recv()).get("id") != "victim":
            pass
        reply = msg
    except (EOFError, OSError):
        pass
    if reply is not None and "result" in reply:
        t.hidden.update(t.live[target_i:])
        t.live = t.live[:target_i]
        t.pending = None  # a rewind hides the checkpoint its turns left
        ch.snapshot(sid)
    else:  # it may or may not have happened: both are correct
        t.maybe_hidden.update(t.live[target_i:])
    return f"rewind of turn {target_i + 1}/{len(t.live) + len(t.hidden)} on {sid}, killed after {delay * 1000:.1f} ms" + (
        " (answered first)" if reply else "")


def victim_maintenance(ch: Chain, c: Conn) -> str:
    # Acknowledged set-up: free some pages (a delete) and go over the cap (retention has work).
    if len(ch.sessions) > 1:
        gone = ch.rng.choice(sorted(ch.sessions))
        assert "result" in c.call("session/delete", {"sessionId": gone})
        del ch.sessions[gone]
        ch.deleted.add(gone)
    while len(ch.sessions) <= MAX_SESSIONS:
        acked_turn(ch, c, new_session(ch, c))
    conn_rows = _update_order(ch)
    ch.retention = set(conn_rows[-MAX_SESSIONS:])
    delay = ch.rng.uniform(0.0, 0.06)
    send_and_kill(ch, c, "_zocrates/storage/maintenance", {}, delay_s=delay)
    return f"maintenance with {len(conn_rows)} sessions (cap {MAX_SESSIONS}), killed after {delay * 1000:.1f} ms"


def _update_order(ch: Chain) -> list[str]:
    """Session ids oldest first by last update, as retention orders them."""
    from relkit import ro_connect

    conn = ro_connect(ch.d.db_path)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY julianday(update_time), id")]
    finally:
        conn.close()


def victim_checkpoint(ch: Chain, c: Conn) -> str:
    """A deep question pauses at a research checkpoint and asks us (session/request_permission);
    the daemon is killed while it waits. Asking is the daemon saying the checkpoint is pending: it
    must still be pending, the same one, after the restart."""
    sid = pick_session(ch, c)
    forget_checkpoint(ch, sid)
    c.send({"jsonrpc": "2.0", "id": "victim", "method": "session/prompt", "params": prompt_params(sid, DEEP_QUESTION)})
    while True:
        msg = c.recv()
        if msg.get("method") == "session/request_permission":
            break
        if msg.get("id") == "victim":  # answered without a checkpoint
            kill_now(ch)
            record_victim_turn(ch, sid, msg)
            return f"deep question on {sid} ended without a checkpoint"
    delay = ch.rng.uniform(0.0, 0.003)
    kill_now(ch, delay)
    # The permission request's toolCallId is "<interrupt id>@<invocation id>".
    interrupt, _, invocation = str(msg["params"]["toolCall"].get("toolCallId")).partition("@")
    ch.sessions[sid].pending = {"invocation_id": invocation or None, "interrupt_id": interrupt}
    return f"checkpoint on {sid}, killed {delay * 1000:.1f} ms after it asked"


def victim_resume(ch: Chain, c: Conn) -> str:
    """A deep question pauses (we decline the permission request: an acknowledged pending
    checkpoint); then the daemon is killed while `_zocrates/chat/resume` extends it. Extending a
    three-part question with a budget of one round always stops at the next checkpoint, so after
    the restart the turn must be pending: still at the first checkpoint, or at the second."""
    sid = pick_session(ch, c)
    forget_checkpoint(ch, sid)
    reply = c.call("session/prompt", prompt_params(sid, DEEP_QUESTION))
    assert "result" in reply, reply
    meta = reply["result"]["_meta"]["zocrates"]
    t = ch.sessions[sid]
    t.live.append(meta["invocationId"])
    hitl = meta.get("pendingHitl")
    c.notifications.clear()
    ch.snapshot(sid)
    if hitl is None:  # answered without a checkpoint
        t.pending = None
        kill_now(ch)
        return f"deep question on {sid} ended without a checkpoint"
    k = ch.rng.randint(1, 4)
    params = {"sessionId": sid, "invocationId": hitl["invocation_id"], "interruptId": hitl["interrupt_id"],
              "response": {"action": "extend_budget"}}
    got = send_and_kill(ch, c, "_zocrates/chat/resume", params, after_notes=k, delay_s=ch.rng.uniform(0.0, 0.003))
    t.resumed = hitl["invocation_id"]
    return f"resume on {sid}, killed after notification {k}" + (" (answered first)" if got else "")


OPS: list[tuple[str, Callable[[Chain, Conn], str]]] = [
    ("turn", victim_turn),
    ("compaction", victim_compaction),
    ("rewind", victim_rewind),
    ("maintenance", victim_maintenance),
    ("checkpoint", victim_checkpoint),
    ("resume", victim_resume),
]


# --- after each restart ---------------------------------------------------------------------------


def check_after_restart(ch: Chain) -> None:
    d = ch.d
    assert integrity(d.db_path) == "ok"
    present = session_ids(d.db_path)
    assert not (ch.deleted & present), f"acknowledged deletes came back: {ch.deleted & present}"
    if ch.retention is not None:
        # The pass (or the start-up pass after the kill) keeps exactly the newest MAX_SESSIONS.
        tracked = set(ch.sessions)
        assert present & tracked <= ch.retention, f"retention removed the wrong sessions: kept {present & tracked}"
        for sid in tracked - present:
            assert sid not in ch.retention, f"{sid} is within the retention cap but gone"
            del ch.sessions[sid]
        ch.retention = None
    with Conn(d.socket_path, timeout=REQUEST_TIMEOUT_S) as c:
        for sid, t in ch.sessions.items():
            assert sid in present, f"{sid}: acknowledged, never deleted, gone after a crash"
            ids = {e["id"] for e in session_events(d.db_path, sid)}
            missing = t.acked_ids - ids
            assert not missing, f"{sid}: acknowledged events lost in a crash: {sorted(missing)}"
            ui = c.result("_zocrates/session/get", {"sessionId": sid})
            shown = {m.get("invocation_id") for m in ui["messages"]}
            assert not (shown & t.hidden), f"{sid}: rewound turns are back: {shown & t.hidden}"
            assert set(t.live) - t.maybe_hidden <= shown, f"{sid}: acknowledged turns not shown: {set(t.live) - shown}"
            if t.maybe_hidden & set(t.live) - shown:
                t.hidden |= t.maybe_hidden & set(t.live) - shown  # the cut-short rewind did happen
                t.pending = None
            t.maybe_hidden = set()
            if t.resumed is not None:
                got = ui["pending_hitl"]
                assert got is not None and got["invocation_id"] == t.resumed, f"{sid}: a cut-short resume left {got}"
                assert got["interrupt_id"] in ("interrupt_ext_1", "interrupt_ext_2"), got
                t.resumed = None
            if t.pending is not None:
                got = ui["pending_hitl"]
                assert got is not None, f"{sid}: checkpoint {t.pending} lost after a crash"
                for key in ("invocation_id", "interrupt_id"):
                    assert t.pending[key] in (None, got[key]), f"{sid}: checkpoint {t.pending} became {got}"
            # Turns the kill cut short are part of the history now: the live list follows the store.
            t.live = [m["invocation_id"] for m in ui["messages"] if m["role"] == "user"]
            t.pending = ui["pending_hitl"]
            t.acked_ids = ids


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chain", range(CHAINS))
def test_sigkill_at_random_points_loses_nothing_acknowledged(chain: int) -> None:
    rng = random.Random(SEED + chain)
    with reliability_daemon(http=False, config=CONFIG, prefix="zrc") as d:
        ch = Chain(d, rng)
        try:
            run_chain(ch, chain)
        except BaseException:
            print("\n".join(["iterations so far:", *ch.log]))
            raise


def run_chain(ch: Chain, chain: int) -> None:
    """The iterations of one chain: restart, check, set up, kill in the middle of a victim."""
    d, rng = ch.d, ch.rng
    for i in range(ITERATIONS_PER_CHAIN):
        if i:
            d.start()
            d.wait_until_started()  # start-up maintenance (retention, the VACUUM temp file) runs before the checks
            check_after_restart(ch)
        name, op = OPS[(i + chain) % len(OPS)] if i < len(OPS) else rng.choice(OPS)
        ch.log.append(f"{i}: {name}")
        with Conn(d.socket_path, timeout=REQUEST_TIMEOUT_S) as c:
            ch.log[-1] += f": {op(ch, c)}"
        assert d.proc.poll() is not None  # the victim's kill happened
    d.start()
    d.wait_until_started()
    check_after_restart(ch)
    assert "Traceback" not in d.stderr_text()
    print("\n" + "\n".join(ch.log))
