"""Another local user, without the token, against the shim's memory and connection slots, while its
owner keeps working (shim/guard.py, shim/protocol.py).

The attacker runs as uid 65534 (root only; skipped otherwise) against a real daemon with a cap of
`CAP` connections: bodies of 16 MiB declared or chunked to `POST /auth/exchange`, and bodies that
trickle and stop one byte short, each connection opened again as soon as the daemon closes it.
The daemon's peak resident memory (VmHWM in /proc/<pid>/status) may grow by `RSS_GROWTH_BOUND`
at most, and the owner's requests with the token must be answered all along (each within
`PROBE_BOUND_S`, their median within `PROBE_MEDIAN_BOUND_S`).
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from daemonproc import DaemonProc
from otheruser import as_nobody, needs_root, reaped

pytestmark = [
    pytest.mark.e2e,
    needs_root,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the daemon's memory from /proc"),
]

CAP = 48
ATTACK_S = 8.0
RSS_GROWTH_BOUND = 48 * 1024 * 1024
# Each of the owner's requests; the median must be well below (the test machine may be loaded).
PROBE_BOUND_S = 5.0
PROBE_MEDIAN_BOUND_S = 1.0
PROBE_EVERY_S = 0.3

# The attacker (as uid 65534, tests/otheruser.py): one JSON line at the end. Everything goes to
# 127.0.0.1 only, and every loop is bounded in time.
ATTACK = r"""
port, attack_s = int(sys.argv[1]), float(sys.argv[2])
kinds = [k for spec in sys.argv[3:] for k in [spec.split("=")[0]] * int(spec.split("=")[1])]
BIG = 16 * 1024 * 1024
HEAD = f"POST /auth/exchange HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
HEADS = {
    "declared": (HEAD + f"Content-Length: {BIG}\r\n\r\n").encode(),  # then BIG - 1 bytes: one short
    "chunked": (HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode(),  # then 64 KiB chunks, never the last
    "trickle": (HEAD + "Content-Length: 100\r\n\r\n").encode(),  # then a byte every 0.5 s, 99 at most
}
CHUNK = b"10000\r\n" + b" " * 65536 + b"\r\n"

class Conn:
    def __init__(self, kind):
        self.kind, self.sent, self.next_at = kind, 0, 0.0
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(HEADS[kind])
        self.sock.setblocking(False)

    def push(self, now):
        # False once the daemon has closed or refused it.
        try:
            if self.sock.recv(65536) == b"":
                return False
        except BlockingIOError:
            pass
        try:
            if self.kind == "declared" and self.sent < BIG - 1:
                self.sent += self.sock.send(b" " * min(1 << 20, BIG - 1 - self.sent))
            elif self.kind == "chunked":
                self.sent += self.sock.send(CHUNK)
            elif self.kind == "trickle" and self.sent < 99 and now >= self.next_at:
                self.sent += self.sock.send(b" ")
                self.next_at = now + 0.5
        except BlockingIOError:
            pass
        return True

opened = closed = sent = 0
flooding = False
conns = [None] * len(kinds)
reopen_at = [0.0] * len(kinds)  # a closed slot is opened again 0.5 s later: a flood, not a CPU burner
started = time.monotonic()
while time.monotonic() - started < attack_s:
    now = time.monotonic()
    for i, kind in enumerate(kinds):
        if conns[i] is None:
            if now >= reopen_at[i]:
                try:
                    conns[i] = Conn(kind)
                    opened += 1
                except OSError:
                    reopen_at[i] = now + 0.5
            continue
        try:
            alive = conns[i].push(now)
        except OSError:
            alive = False
        if not alive:
            closed += 1
            sent += conns[i].sent
            conns[i].sock.close()
            conns[i] = None
            reopen_at[i] = now + 0.5
    if not flooding and all(c is not None for c in conns):
        flooding = True
        print("flooding", flush=True)
    time.sleep(0.01)
sent += sum(c.sent for c in conns if c is not None)
print(json.dumps({"opened": opened, "closed_by_daemon": closed, "body_bytes_sent": sent}), flush=True)
"""


@pytest.fixture
def d(daemon_factory: Any) -> DaemonProc:
    daemon: DaemonProc = daemon_factory(args=["--http-port", "0"])
    daemon.state_dir.mkdir(parents=True)
    (daemon.state_dir / "zocrates_config.json").write_text(json.dumps({"http": {"max_connections": CAP}}))
    daemon.start()
    daemon.wait_until_started()  # the engine's imports done: its memory is not the attack's
    return daemon


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def owner_request(port: int, token: str, conn: http.client.HTTPConnection | None = None) -> float:
    """GET /sessions with the token (on `conn`, else a fresh connection); its seconds."""
    started = time.monotonic()
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_BOUND_S)
    try:
        c.request("GET", "/sessions", headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        body = r.read()
        assert r.status == 200 and b"sessions" in body, (r.status, body[:200])
    finally:
        if conn is None:
            c.close()
    return time.monotonic() - started


def attack_while_probing(d: DaemonProc, *kinds: str, kept: http.client.HTTPConnection | None = None) -> tuple[dict, list[float]]:
    """Run the attacker (`kind=count` each) while the owner probes; its report and the owner's latencies."""
    info = d.info
    port, token = info["http"]["port"], info["token"]
    latencies: list[float] = []
    with reaped(as_nobody(ATTACK, str(port), str(ATTACK_S), *kinds)) as attacker:
        assert attacker.stdout is not None and attacker.stdout.readline().strip() == "flooding", attacker.stderr
        while attacker.poll() is None:
            latencies.append(owner_request(port, token))
            if kept is not None:
                latencies.append(owner_request(port, token, kept))
            time.sleep(PROBE_EVERY_S)
            assert len(latencies) < 400, "the attack did not end"
        out, err = attacker.communicate(timeout=30)
    assert attacker.returncode == 0, err
    return json.loads(out), latencies


def test_tokenless_bodies_big_or_trickling_do_not_grow_the_daemon(d: DaemonProc) -> None:
    assert d.proc is not None
    info = d.info
    owner_request(info["http"]["port"], info["token"])
    before = peak_rss(d.proc.pid)
    report, latencies = attack_while_probing(d, "declared=12", "chunked=6", "trickle=6")
    grown = peak_rss(d.proc.pid) - before
    print(f"attack {report}; peak RSS grew {grown / 2**20:.1f} MiB; owner slowest {max(latencies):.3f} s")
    assert report["opened"] >= 24 and report["body_bytes_sent"] > 0, report
    assert grown < RSS_GROWTH_BOUND, f"the daemon's peak memory grew {grown / 2**20:.0f} MiB under {report}"
    assert len(latencies) >= 5 and statistics.median(latencies) < PROBE_MEDIAN_BOUND_S, latencies
    assert d.running()


def test_trickling_tokenless_bodies_beyond_the_cap_lock_out_none_of_the_owners_requests(d: DaemonProc) -> None:
    info = d.info
    port, token = info["http"]["port"], info["token"]
    # The owner's kept-alive connection, known as the owner's by its first request, is not
    # closed to make room for the flood either.
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_BOUND_S)
    try:
        owner_request(port, token, kept)
        report, latencies = attack_while_probing(d, f"trickle={CAP + 16}", kept=kept)
        sock = kept.sock
        owner_request(port, token, kept)
        assert kept.sock is sock, "the owner's kept-alive connection was closed"
    finally:
        kept.close()
    print(f"attack {report}; owner probes {len(latencies)}, slowest {max(latencies):.3f} s")
    assert report["opened"] >= CAP + 16, report  # the flood did fill the table
    assert len(latencies) >= 10 and statistics.median(latencies) < PROBE_MEDIAN_BOUND_S, latencies
    assert "HTTP shim at its cap" in (d.state_dir / "zocratesd.log").read_text()
