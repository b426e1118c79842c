"""The daemon process: files, permissions, single instance, signals, crash recovery, status/stop."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rawrpc import RawConn

from zocratesd.store.database import integrity_check

pytestmark = pytest.mark.e2e


def cli(d: Any, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zocratesd", *args, "--zotero-data-dir", str(d.data_dir)],
        env=d.env, capture_output=True, text=True, timeout=timeout,
    )


def test_ready_files_and_permissions(daemon: Any) -> None:
    info = daemon.info
    assert info["pid"] == daemon.proc.pid
    assert info["protocol_version"] == 1 and info["version"] == "0.1.0"
    # The HTTP shim is on by default: loopback, a port, a token (tests/e2e/test_shim*.py test it).
    assert info["http"]["host"] == "127.0.0.1" and info["http"]["port"] > 0 and len(info["token"]) >= 40
    assert "T" in info["started_at"]
    info_path = daemon.state_dir / "daemon.json"
    assert stat.S_IMODE(info_path.stat().st_mode) == 0o600
    sock = Path(info["socket"])
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert str(sock.parent).startswith(str(daemon.runtime_dir))
    assert stat.S_IMODE(daemon.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(daemon.db_path.stat().st_mode) & 0o077 == 0
    with RawConn(str(sock)) as c:
        assert c.result("initialize", {"protocolVersion": 1})["agentCapabilities"]["_meta"]["zocrates"]["version"] == info["version"]


def test_second_daemon_on_the_same_data_dir_refuses_naming_the_pid(daemon: Any, daemon_factory: Any) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(daemon.data_dir)],
        env=daemon.env, capture_output=True, text=True, timeout=60,
    )
    assert second.returncode != 0
    assert f"pid {daemon.proc.pid}" in second.stderr
    assert daemon.info["pid"] == daemon.proc.pid  # the running daemon's files are untouched
    with RawConn(daemon.socket_path) as c:
        assert c.result("session/list", {})["sessions"] == []


def test_sigterm_is_a_clean_exit_that_removes_the_runtime_files(daemon: Any) -> None:
    sock = daemon.socket_path
    with RawConn(sock) as c:
        c.result("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert daemon.stop() == 0
    assert not (daemon.state_dir / "daemon.json").exists()
    assert not os.path.exists(sock)
    assert daemon.db_path.exists()
    assert "stopped" in daemon.stderr_text()


def test_sigkill_leaves_stale_files_that_the_next_daemon_replaces(daemon: Any) -> None:
    with RawConn(daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        c.result("_zocrates/session/rename", {"sessionId": sid, "title": "survives a crash"})
    old_pid = daemon.proc.pid
    daemon.kill()
    assert (daemon.state_dir / "daemon.json").exists()  # stale: its pid is dead
    status = cli(daemon, "status")
    assert status.returncode == 3 and "not running" in status.stdout
    daemon.start()
    assert daemon.info["pid"] != old_pid
    with RawConn(daemon.socket_path) as c:
        (session,) = c.result("session/list", {})["sessions"]
        assert session["sessionId"] == sid and session["title"] == "survives a crash"
    assert integrity_check(daemon.db_path) == "ok"


def test_a_non_socket_at_the_socket_path_is_never_removed(daemon_factory: Any, short_tmp: Path) -> None:
    victim = short_tmp / "precious.txt"
    victim.write_text("user data")
    d = daemon_factory(args=["--socket", str(victim)])
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir), "--socket", str(victim)],
        env=d.env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0 and "not a socket" in proc.stderr
    assert victim.read_text() == "user data"


def test_invalid_config_stops_the_start_with_the_key_named(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.state_dir.mkdir(parents=True)
    (d.state_dir / "zocrates_config.json").write_text('{"max_saved_sessions": "lots"}')
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir)],
        env=d.env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "max_saved_sessions" in proc.stderr and "zocrates_config.json" in proc.stderr
    assert not (d.state_dir / "daemon.json").exists()


def test_bad_model_flag_is_a_clear_error(daemon_factory: Any) -> None:
    d = daemon_factory()
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir), "--model", "skynet"],
        env=d.env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and "model.provider" in proc.stderr


def test_status_and_stop(daemon: Any) -> None:
    status = cli(daemon, "status")
    assert status.returncode == 0 and f"pid        {daemon.proc.pid}" in status.stdout
    as_json = cli(daemon, "status", "--json")
    assert '"running": true' in as_json.stdout
    stop = cli(daemon, "stop")
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert daemon.proc.wait(10) == 0
    again = cli(daemon, "stop")
    assert again.returncode == 0 and "not running" in again.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_a_connection_from_another_uid_is_refused(daemon: Any) -> None:
    # Open the directories and socket to everyone, so only the daemon's own peer-uid check stands.
    sock = Path(daemon.socket_path)
    for parent in [sock.parent, *sock.parent.parents]:
        if str(parent).startswith(str(daemon.runtime_dir.parent)):
            os.chmod(parent, 0o755)
    os.chmod(sock, 0o777)
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(10)\n"
        "try:\n"
        "    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\"}\\n')\n"
        "    data = s.recv(100)\n"
        "except OSError:\n    data = b''\n"
        "print('CLOSED' if data == b'' else 'ANSWERED')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(sock)], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "CLOSED", out.stderr
    assert "refused a connection from uid 65534" in daemon.stderr_text()
    with RawConn(str(sock)) as c:  # our own uid is still served
        assert c.result("session/list", {}) == {"sessions": []}


def test_abrupt_disconnects_do_not_hurt_the_daemon(daemon: Any) -> None:
    for _ in range(50):
        s = socket.socket(socket.AF_UNIX)
        s.connect(daemon.socket_path)
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp"}}\n{"jsonrpc":"2.0","id":2,"me')
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        s.close()
    time.sleep(0.5)
    with RawConn(daemon.socket_path) as c:
        sessions = c.result("session/list", {})["sessions"]
    assert len(sessions) <= 50
    assert daemon.proc.poll() is None
    assert integrity_check(daemon.db_path) == "ok"


def test_sigint_also_shuts_down_cleanly(daemon: Any) -> None:
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.proc.wait(30) == 0
    assert not (daemon.state_dir / "daemon.json").exists()
