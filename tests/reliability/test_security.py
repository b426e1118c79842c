"""Security of a running daemon: file modes, another user, and the shim's refusals, all at once.

The other-user checks need to switch uid (root only) and are skipped otherwise; the rest runs
everywhere. Every refused write is checked to have changed nothing in the store.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from rawrpc import RawConn
from relkit import reliability_daemon, store_digest

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

NOBODY = 65534  # the conventional unprivileged uid/gid


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def as_nobody(code: str, *args: str) -> str:
    """Run Python code as uid/gid 65534 and return what it printed. Modules are imported before
    the switch: the interpreter's own files may not be readable by that user."""
    prelude = f"import encodings.idna, os, socket, sys\nos.setgroups([])\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n"
    out = subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def d() -> Any:
    with reliability_daemon(prefix="zrs") as daemon:
        yield daemon


def test_socket_daemon_json_and_store_are_private(d: Any) -> None:
    info = d.info
    sock = Path(info["socket"])
    assert stat.S_ISSOCK(sock.stat().st_mode) and mode(sock) == 0o600
    assert mode(sock.parent) == 0o700
    assert mode(d.state_dir / "daemon.json") == 0o600
    assert mode(d.state_dir) == 0o700
    for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm", "zocratesd.log", "zocratesd.lock"):
        p = d.state_dir / name
        if p.exists():
            assert mode(p) & 0o077 == 0, (name, oct(mode(p)))


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_another_user_can_neither_read_the_token_nor_reach_the_socket(d: Any) -> None:
    info = d.info
    before = store_digest(d.db_path)
    probe = (
        "path, sock, port = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "try:\n    open(path).read(); print('TOKEN_READ')\nexcept PermissionError:\n    print('NO_TOKEN')\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sock); print('SOCKET_OPEN')\nexcept PermissionError:\n    print('NO_SOCKET')\n"
        "h = socket.socket(socket.AF_INET); h.settimeout(10); h.connect(('127.0.0.1', int(port)))\n"
        "h.sendall(f'POST /sessions HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nContent-Type: application/json\\r\\n'\n"
        "          f'Content-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{{}}'.encode())\n"
        "print('HTTP_' + h.recv(100).split(b' ')[1].decode())\n"
    )
    out = as_nobody(probe, str(d.state_dir / "daemon.json"), info["socket"], str(info["http"]["port"]))
    assert out.split() == ["NO_TOKEN", "NO_SOCKET", "HTTP_401"], out
    assert store_digest(d.db_path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_another_user_is_refused_by_the_peer_uid_check_even_with_open_permissions(d: Any) -> None:
    sock = Path(d.info["socket"])
    saved = [(p, mode(p)) for p in [sock, *sock.parents] if str(p).startswith(str(d.runtime_dir.parent))]
    try:
        for p, _ in saved:
            os.chmod(p, 0o777 if p == sock else 0o755)
        probe = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n"
            "try:\n"
            "    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/new\",\"params\":{\"cwd\":\"/tmp\"}}\\n')\n"
            "    data = s.recv(100)\n"
            "except OSError:\n    data = b''\n"
            "print('CLOSED' if data == b'' else 'ANSWERED')\n"
        )
        before = store_digest(d.db_path)
        assert as_nobody(probe, str(sock)) == "CLOSED"
        assert store_digest(d.db_path) == before
    finally:
        for p, m in saved:
            os.chmod(p, m)
    with RawConn(str(sock)) as c:  # the owner is still served
        assert "sessions" in c.result("session/list", {})


def test_shim_refusals_change_nothing(d: Any) -> None:
    info = d.info
    port, token = info["http"]["port"], info["token"]
    base = f"http://127.0.0.1:{port}"
    with RawConn(d.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
    before = store_digest(d.db_path)
    good = {"Authorization": f"Bearer {token}"}
    cases = [
        ({}, 401),  # no token
        ({"Authorization": f"Bearer {token[:-1]}{'A' if token[-1] != 'A' else 'B'}"}, 401),  # wrong token
        ({"Authorization": f"Basic {token}"}, 401),
        (good | {"Host": f"attacker.example:{port}"}, 403),  # DNS rebinding
        (good | {"Host": f"127.0.0.1:{port + 1}"}, 403),
        (good | {"Origin": "http://attacker.example"}, 403),  # a foreign page
        (good | {"Origin": "null"}, 403),
    ]
    with httpx.Client(base_url=base, timeout=30) as h:
        for headers, status in cases:
            for method, path, body in [("POST", "/sessions", {"title": "x"}), ("DELETE", f"/sessions/{sid}", None),
                                       ("POST", "/chat", {"prompt": "hi", "session_id": sid, "mode": "library"}),
                                       ("POST", "/sessions/maintenance", None), ("GET", f"/sessions/{sid}", None)]:
                r = h.request(method, path, json=body, headers=headers)
                assert r.status_code == status, (headers, method, path, r.status_code)
                assert not [k for k in r.headers if k.lower().startswith("access-control-")]
        assert h.get(f"/sessions/{sid}", headers=good).status_code == 200  # the right token still works
    assert store_digest(d.db_path) == before
