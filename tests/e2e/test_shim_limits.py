"""The shim's connections under a cap and deadlines, against the real daemon (zocratesd/shim/protocol.py).

One daemon for the module, with a cap of 8 connections and 2 s deadlines so that each case takes
a few seconds; the defaults (512, 10 s, 30 s) only change the numbers. Every connection a test
opens is its own raw socket, and is closed before the test ends.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from daemonproc import DaemonProc, daemon_env
from rawrpc import RawConn
from shimhttp import held_connections, wait_until

pytestmark = pytest.mark.e2e

CAP = 8
HEAD_S = 2.0
BODY_S = 2.0
SLACK_S = 5.0  # a loaded test machine's lag, on top of a deadline (a missed deadline never comes)


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProc]:
    root = Path(tempfile.mkdtemp(prefix="zqlim", dir="/tmp"))
    run = root / "run"
    run.mkdir(mode=0o700)
    daemon = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run), args=["--http-port", "0"])
    daemon.state_dir.mkdir(parents=True)
    (daemon.state_dir / "zocrates_config.json").write_text(json.dumps(
        {"http": {"max_connections": CAP, "head_timeout_s": HEAD_S, "body_timeout_s": BODY_S}}))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop(60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def port(d: DaemonProc) -> int:
    p: int = d.info["http"]["port"]
    # What an earlier test left open has met its deadline and been closed: no place of the cap is taken.
    wait_until(lambda: not held_connections(p), f"the shim still holds connections on port {p}: {held_connections(p)}")
    return p


def sockets_of(d: DaemonProc) -> int:
    """How many sockets the daemon has open (its listeners and every connection it accepted)."""
    assert d.proc is not None
    fds = Path(f"/proc/{d.proc.pid}/fd")
    return sum(1 for fd in fds.iterdir() if _link(fd).startswith("socket:"))


def _link(fd: Path) -> str:
    try:
        return str(fd.readlink())
    except OSError:  # closed meanwhile
        return ""


def connect_accepted(d: DaemonProc, port: int, n: int, stack: ExitStack) -> list[socket.socket]:
    """`n` connections, returned once the daemon has accepted them all (a connect completes in the
    kernel before the daemon's accept loop runs)."""
    before = sockets_of(d)
    conns = [stack.enter_context(connect(port)) for _ in range(n)]
    deadline = time.monotonic() + 30
    while sockets_of(d) < before + n:
        assert time.monotonic() < deadline, f"the daemon accepted {sockets_of(d) - before} of {n} connections"
        time.sleep(0.02)
    return conns


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the daemon closes `s` within `seconds` (anything it sends first is read and dropped)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            if s.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def request(port: int, token: str | None = None, path: str = "/health") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n".encode()


def response(s: socket.socket) -> tuple[int, bytes]:
    """One whole response (Content-Length framed) on a kept-alive connection."""
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return int(head.split(b" ")[1]), body


def trickle_until_closed(s: socket.socket, data: bytes, every_s: float, limit_s: float) -> float | None:
    """Send `data` a byte at a time; the seconds until the daemon closed the connection (None: it did not)."""
    started = time.monotonic()
    for byte in data * 100:
        if time.monotonic() - started > limit_s:
            return None
        try:
            s.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        if closed_within(s, every_s):
            return time.monotonic() - started
    return None


# --- the deadline for a request head ------------------------------------------------------------------


def test_a_trickled_head_is_cut_at_its_deadline_however_busy_it_looks(port: int) -> None:
    # Slowloris: a byte every 0.2 s would reset any idle timer; the head's deadline holds anyway.
    with connect(port) as s:
        took = trickle_until_closed(s, b"GET /health HTTP/1.1\r\nX-A: " + b"a" * 200, every_s=0.2, limit_s=HEAD_S + SLACK_S + 2)
    assert took is not None and HEAD_S - 0.3 < took < HEAD_S + SLACK_S, took


def test_a_connection_that_never_sends_is_closed_at_the_head_deadline(port: int) -> None:
    with connect(port) as s:
        started = time.monotonic()
        assert closed_within(s, HEAD_S + SLACK_S)
        assert time.monotonic() - started > HEAD_S - 0.3


def test_after_a_response_the_connection_idles_but_the_next_head_has_the_same_deadline(d: DaemonProc, port: int) -> None:
    with connect(port) as s:
        s.sendall(request(port))
        assert response(s)[0] == 200
        time.sleep(HEAD_S + 0.5)  # idle between requests: the keep-alive time, not the head's deadline
        s.sendall(request(port))
        assert response(s)[0] == 200
        took = trickle_until_closed(s, b"GET /health HTTP/1.1\r\nX-A: " + b"a" * 200, every_s=0.2, limit_s=HEAD_S + SLACK_S + 2)
    assert took is not None and took < HEAD_S + SLACK_S, took


# --- the cap ------------------------------------------------------------------------------------------


def test_at_the_cap_a_new_connection_closes_the_longest_waiting_one(d: DaemonProc, port: int) -> None:
    with ExitStack() as stack:
        idle = connect_accepted(d, port, CAP, stack)
        s = stack.enter_context(connect(port))
        s.sendall(request(port))
        assert response(s)[0] == 200  # a real request is served at once
        assert closed_within(idle[0], SLACK_S)  # the oldest idle connection made room
        assert not closed_within(idle[1], 0.1)


def test_when_every_connection_is_busy_a_new_one_is_closed_at_once_and_the_unix_socket_still_answers(
    d: DaemonProc, port: int
) -> None:
    token = d.info["token"]
    head = (f"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"ti").encode()
    with ExitStack() as stack:
        busy = connect_accepted(d, port, CAP, stack)
        for s in busy:
            s.sendall(head)  # a whole head, a body that stalls: each is serving a request
        # The daemon has read each head (and the body's start): each connection serves a request now.
        wait_until(lambda: held_connections(port) == [0] * CAP, f"heads not read: {held_connections(port)}")
        read = time.monotonic()
        extra = stack.enter_context(connect(port))
        # Refused: queued, it would get a place when a stalled body's deadline (BODY_S) freed one,
        # and be closed at its own head's deadline (HEAD_S) after that.
        assert closed_within(extra, read + BODY_S + HEAD_S / 2 - time.monotonic()), \
            "a connection over the cap, none to close, was not refused at once"
        with RawConn(d.socket_path, timeout=5) as c:  # the Unix socket does not care
            assert c.result("initialize", {"protocolVersion": 1})["protocolVersion"] == 1
        # The stalled bodies meet the guard's deadline: 408, then the connection closes.
        for s in busy:
            status, body = response(s)
            assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
            assert closed_within(s, SLACK_S)


# --- the guard's deadline for an authenticated body ----------------------------------------------------


def test_a_trickled_body_is_cut_at_its_deadline(d: DaemonProc, port: int) -> None:
    token = d.info["token"]
    with connect(port) as s:
        s.sendall((f"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode())
        started = time.monotonic()
        for _ in range(int((BODY_S + SLACK_S) / 0.1)):
            try:
                s.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                break
            s.settimeout(0.1)
            try:
                data = s.recv(65536)
                break
            except TimeoutError:
                continue
        else:
            pytest.fail("the body was still being read after its deadline")
        took = time.monotonic() - started
        s.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # a reset may cut what follows the answer
            while chunk := s.recv(65536):  # the rest of the answer, then the close
                data += chunk
        assert data.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in data, data
        assert BODY_S - 0.3 < took < BODY_S + SLACK_S, took


# --- the open-file limit --------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/limits").exists() or not shutil.which("prlimit"), reason="reads /proc/<pid>/limits; needs prlimit")
def test_the_daemon_raises_its_soft_open_file_limit(daemon_factory: Any) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("needs a hard open-file limit of 4096 or more")
    daemon = daemon_factory(args=["--no-http"])
    daemon.command = ["prlimit", "--nofile=1024:4096", sys.executable, "-m", "zocratesd"]
    daemon.start()
    limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
    soft, hard_now = next(line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files"))
    assert (int(soft), int(hard_now)) == (4096, 4096)


# --- kept-alive requests ----------------------------------------------------------------------------


def test_requests_on_a_kept_alive_connection_are_not_held_back_by_nagle(d: DaemonProc, port: int) -> None:
    # Without TCP_NODELAY on the daemon's side, each request after the first waits ~40 ms: the
    # response's two writes (head, body) meet Nagle's algorithm and the client's delayed ACK.
    token = d.info["token"]
    took = []
    with connect(port) as s:
        for _ in range(21):
            started = time.perf_counter()
            s.sendall(request(port, token))
            assert response(s)[0] == 200
            took.append(time.perf_counter() - started)
    took.sort()
    assert statistics.median(took[1:]) < 0.020, [round(t * 1000, 1) for t in took]
