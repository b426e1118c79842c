"""The daemon process: files, permissions, single instance, signals, crash recovery, status/stop."""

from __future__ import annotations

import json
import os
import re
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
    with RawConn(str(sock)) as c:
        assert c.result("initialize", {"protocolVersion": 1})["agentCapabilities"]["_meta"]["zocrates"]["version"] == info["version"]
    # sessions.db is made by the engine, which loads in the background after the first reply.
    deadline = time.monotonic() + 60
    while not daemon.db_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stat.S_IMODE(daemon.db_path.stat().st_mode) & 0o077 == 0


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
        c.result("session/new", {"cwd": "/tmp"})  # a write: answered once the engine (and sessions.db) is up
    assert len(sessions) <= 50
    assert daemon.proc.poll() is None
    assert integrity_check(daemon.db_path) == "ok"


def test_sigint_also_shuts_down_cleanly(daemon: Any) -> None:
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.proc.wait(30) == 0
    assert not (daemon.state_dir / "daemon.json").exists()


# --- issue 16: a runtime dir too deep for a socket, one daemon per socket, hostile directories -----

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another uid (chown) needs root")
# A line the daemon's logging wrote to stderr (`2026-01-01 12:00:00,000 INFO zocratesd: stopped`),
# as opposed to the one line it prints when it cannot start.
LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'


def zocratesd(env: dict[str, str], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "zocratesd", *args], env=env, input=stdin, capture_output=True, timeout=90
    )
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def assert_one_line_failure(out: subprocess.CompletedProcess[str], prefix: str, *needles: str) -> None:
    """Exit 1 and one line saying why (the daemon's own log records aside), no traceback."""
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr, out.stderr
    said = [line for line in out.stderr.splitlines() if not LOG_RECORD.match(line)]
    assert len(said) == 1 and said[0].startswith(prefix), out.stderr
    for needle in needles:
        assert needle in said[0], said[0]
    assert out.stdout == ""


def deep_runtime_dir(base: Path, total_bytes: int = 150) -> Path:
    """A runtime dir whose path alone is `total_bytes` long: no socket path in it can fit."""
    d = base / "run" / ("r" * (total_bytes - len(str(base / "run")) - 1))
    d.mkdir(mode=0o700, parents=True)
    assert len(os.fsencode(d)) == total_bytes
    return d


def test_a_runtime_dir_too_deep_for_a_socket_still_serves_and_stdio_finds_it(short_tmp: Path) -> None:
    from daemonproc import DaemonProc, daemon_env

    run = deep_runtime_dir(short_tmp)
    env = daemon_env(run)
    d = DaemonProc(data_dir=short_tmp / "zotero", runtime_dir=run, env=env, args=["--no-http", "--model", "offline"])
    d.data_dir.mkdir()
    d.start()
    try:
        sock = Path(d.socket_path)
        assert sock.parent == Path(f"/tmp/zocrates-{os.geteuid()}") and len(os.fsencode(sock)) <= 103
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert sock.parent.stat().st_uid == os.geteuid()
        with RawConn(str(sock)) as c:
            assert c.result("session/list", {}) == {"sessions": []}
        # `zocratesd stdio` reaches it through daemon.json...
        out = zocratesd(env, "stdio", "--zotero-data-dir", str(d.data_dir), stdin=INITIALIZE)
        assert out.returncode == 0 and '"protocolVersion":1' in out.stdout, out.stderr
    finally:
        assert d.stop() == 0
    assert not sock.exists() and not Path(f"{sock}.lock").exists()
    # ...and starts one of its own for another data dir, in the same short place.
    other = short_tmp / "other"
    other.mkdir()
    try:
        out = zocratesd(env, "stdio", "--zotero-data-dir", str(other), stdin=INITIALIZE)
        assert out.returncode == 0 and '"protocolVersion":1' in out.stdout, out.stderr
        started = json.loads((other / "zocrates-data" / "daemon.json").read_text())
        assert Path(started["socket"]).parent == sock.parent
    finally:
        zocratesd(env, "stop", "--zotero-data-dir", str(other))


def test_two_daemons_of_different_data_dirs_started_at_once_on_one_socket(short_tmp: Path) -> None:
    """Each holds its own data dir's lock; the socket's lock lets one serve and stops the other,
    which must leave the winner's socket in place."""
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    path = short_tmp / "shared.sock"
    procs = []
    for name in ("one", "two"):
        (short_tmp / name).mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(short_tmp / name),
             "--socket", str(path), "--no-http", "--model", "offline"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        ))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.05)
        (loser,) = [p for p in procs if p.poll() is not None]
        (winner,) = [p for p in procs if p is not loser]
        assert loser.returncode == 1
        assert f"already serves the socket {path}" in loser.communicate(timeout=10)[1]
        name = "one" if winner is procs[0] else "two"
        info_path = short_tmp / name / "zocrates-data" / "daemon.json"
        while time.monotonic() < deadline and not info_path.exists():
            time.sleep(0.05)
        assert json.loads(info_path.read_text())["socket"] == str(path)
        with RawConn(str(path)) as c:  # the winner's socket survived the loser's exit
            assert c.result("session/list", {}) == {"sessions": []}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)


def test_socket_flag_never_changes_an_existing_directory(daemon_factory: Any, short_tmp: Path) -> None:
    shared = short_tmp / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: anyone may create, only an entry's owner may remove
    d = daemon_factory(args=["--socket", str(shared / "z.sock"), "--no-http", "--model", "offline"])
    d.start()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "z.sock").stat().st_mode) == 0o600
    assert d.stop() == 0
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and list(shared.iterdir()) == []

    open_dir = short_tmp / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # no sticky bit: another user could swap our socket for theirs
    out = zocratesd(d.env, "serve", "--zotero-data-dir", str(d.data_dir), "--socket", str(open_dir / "z.sock"))
    assert_one_line_failure(out, "zocratesd: ", str(open_dir), "writable by other users")
    assert stat.S_IMODE(open_dir.stat().st_mode) == 0o777

    too_long = short_tmp / ("s" * 120) / "z.sock"
    out = zocratesd(d.env, "serve", "--zotero-data-dir", str(d.data_dir), "--socket", str(too_long))
    assert_one_line_failure(out, "zocratesd: ", "pass a shorter --socket")


def hostile_setups(short_tmp: Path) -> list[tuple[str, dict[str, str], list[str]]]:
    """(name, env, what the one line must say) for each directory zocratesd must refuse."""
    from daemonproc import daemon_env

    cases = []
    run = short_tmp / "run-file"
    run.mkdir(mode=0o700)
    (run / "zocrates").write_text("")  # a file where the runtime dir's own directory goes
    cases.append(("runtime dir is a file", daemon_env(run), [f"{run / 'zocrates'} is not a directory"]))
    run = short_tmp / "run-link"
    run.mkdir(mode=0o700)
    (short_tmp / "elsewhere").mkdir(mode=0o700)
    (run / "zocrates").symlink_to(short_tmp / "elsewhere")
    cases.append(("runtime dir is a symlink", daemon_env(run), [f"{run / 'zocrates'} is a symbolic link"]))
    return cases


@pytest.mark.parametrize("mode", ["serve", "stdio"])
def test_a_hostile_runtime_dir_is_one_line_and_exit_1(short_tmp: Path, mode: str) -> None:
    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    for name, env, needles in hostile_setups(short_tmp):
        if mode == "serve":
            out = zocratesd(env, "serve", "--zotero-data-dir", str(data_dir), "--no-http", "--model", "offline")
            assert_one_line_failure(out, "zocratesd: ", *needles)
        else:
            out = zocratesd(env, "stdio", "--zotero-data-dir", str(data_dir), stdin=INITIALIZE)
            assert_one_line_failure(out, "zocratesd stdio: ", *needles)
        assert not (data_dir / "zocrates-data" / "daemon.json").exists(), name
    assert list((short_tmp / "elsewhere").iterdir()) == []  # nothing was put through the symlink


@pytest.mark.parametrize("args", [["serve", "--no-http"], ["stdio"], ["stdio", "--standalone"]])
def test_a_symlinked_state_dir_is_one_line_and_exit_1(short_tmp: Path, args: list[str]) -> None:
    from daemonproc import daemon_env

    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    target = short_tmp / "target"
    target.mkdir(mode=0o700)
    (data_dir / "zocrates-data").symlink_to(target)
    out = zocratesd(daemon_env(run), *args, "--zotero-data-dir", str(data_dir), "--model", "offline", stdin=INITIALIZE)
    prefix = "zocratesd stdio: " if args == ["stdio"] else "zocratesd: "
    assert_one_line_failure(out, prefix, f"{data_dir / 'zocrates-data'} is a symbolic link")
    assert list(target.iterdir()) == []  # no log, lock or store was written through it


@needs_root
@pytest.mark.parametrize("mode", ["serve", "stdio"])
def test_a_runtime_dir_of_another_uid_is_one_line_and_exit_1(short_tmp: Path, mode: str) -> None:
    """The runtime dir's `zocrates` made first by uid 65534; and, without $XDG_RUNTIME_DIR,
    platformdirs' fallback `$TMPDIR/runtime-<uid>` made first by uid 65534."""
    from daemonproc import daemon_env

    data_dir = short_tmp / "zotero"
    data_dir.mkdir()
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    (run / "zocrates").mkdir(mode=0o700)
    os.chown(run / "zocrates", NOBODY, NOBODY)
    cases = [(daemon_env(run), [f"{run / 'zocrates'} belongs to uid {NOBODY}"])]
    tmp = short_tmp / "tmp"
    tmp.mkdir(mode=0o700)
    (tmp / f"runtime-{os.geteuid()}").mkdir(mode=0o700)
    os.chown(tmp / f"runtime-{os.geteuid()}", NOBODY, NOBODY)
    env = daemon_env(run)
    del env["XDG_RUNTIME_DIR"]
    env["TMPDIR"] = str(tmp)
    if not os.path.exists(f"/run/user/{os.geteuid()}"):  # else platformdirs uses that one
        cases.append((env, [f"runtime-{os.geteuid()}", str(NOBODY)]))
    for env, needles in cases:
        if mode == "serve":
            out = zocratesd(env, "serve", "--zotero-data-dir", str(data_dir), "--no-http", "--model", "offline")
            assert_one_line_failure(out, "zocratesd: ", *needles)
        else:
            out = zocratesd(env, "stdio", "--zotero-data-dir", str(data_dir), stdin=INITIALIZE)
            assert_one_line_failure(out, "zocratesd stdio: ", *needles)
