"""Autostart: socket activation done for real, sd_notify, idle exit, the clients' preference for an
activated daemon, the unit files against systemd's own tools, and `zocratesd service` end to end.

The test plays the service manager the way systemd does: it creates and owns the listening socket,
starts the daemon with the socket at fd 3 and LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES naming it (a tiny
launcher sets LISTEN_PID to its own pid, then execs the daemon, which keeps that pid), and listens
on a NOTIFY_SOCKET datagram socket for READY=1, WATCHDOG=1 and STOPPING=1.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rawrpc import RawConn

from zocratesd import locations

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 180.0  # a hang guard (see tests/daemonproc.py)
# Exec the daemon as systemd does: the listening socket at fd 3 and LISTEN_PID = the daemon's pid
# (execv keeps the pid, so the launcher names its own).
LAUNCHER = (
    "import os, sys\n"
    "fd = int(os.environ.pop('TEST_LISTEN_FD'))\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'zocratesd', *sys.argv[1:]])\n"
)
_MANAGER_ENV = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PIDFDID", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def clean_env(d: Any) -> dict[str, str]:
    """The daemon fixture's env without anything the test runner's own service manager set."""
    env = dict(d.env)
    for key in _MANAGER_ENV:
        env.pop(key, None)
    return env


class NotifyListener:
    """The manager's end of NOTIFY_SOCKET: collects every datagram in a background thread."""

    def __init__(self, address: str):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + address[1:].encode() if address.startswith("@") else address)
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._cond:
                self.messages.append(data.decode())
                self._cond.notify_all()

    def wait_for(self, line: str, timeout: float = READY_TIMEOUT_S, count: int = 1) -> list[str]:
        """Wait until `count` messages contain the line `line`; returns those messages."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for m in self.messages if line in m.splitlines()]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {line!r} (x{count}) on NOTIFY_SOCKET; got {self.messages}")
                self._cond.wait(remaining)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()


class Manager:
    """What systemd's socket unit does for one daemon: owns the socket, starts and stops the daemon."""

    def __init__(self, d: Any, socket_path: Path, notify_address: str):
        self.d = d
        self.socket_path = socket_path
        locations.ensure_private_dir(socket_path.parent)  # DirectoryMode=0700
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(socket_path))
        os.chmod(socket_path, 0o600)  # SocketMode=0600
        self.listener.listen(16)
        self.notify = NotifyListener(notify_address)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *serve_args: str, watchdog_usec: int | None = None) -> subprocess.Popen[bytes]:
        env = clean_env(self.d)
        env.update(
            TEST_LISTEN_FD=str(self.listener.fileno()),
            LISTEN_FDS="1",
            LISTEN_FDNAMES="zocratesd",
            NOTIFY_SOCKET=self.notify.address,
        )
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        with open(self.d.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCHER, "serve", "--zotero-data-dir", str(self.d.data_dir), *serve_args],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                pass_fds=(self.listener.fileno(),),
            )
        return self.proc

    def wait_ready(self) -> None:
        try:
            self.notify.wait_for("READY=1")
        except AssertionError:
            assert self.proc is not None
            raise AssertionError(f"exit {self.proc.poll()}; stderr:\n{self.d.stderr_path.read_text()[-3000:]}") from None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.notify.close()
        self.listener.close()


@pytest.fixture
def manager(daemon_factory: Any, short_tmp: Path) -> Iterator[Manager]:
    d = daemon_factory()
    m = Manager(d, short_tmp / "mgr" / "zocratesd.sock", str(short_tmp / "notify.sock"))
    try:
        yield m
    finally:
        m.close()


def test_activated_daemon_serves_the_passed_socket_and_talks_to_the_manager(manager: Manager) -> None:
    before = os.stat(manager.socket_path)
    proc = manager.start(watchdog_usec=300_000)  # pings every 0.15 s
    manager.wait_ready()
    info = manager.d.info
    assert info["pid"] == proc.pid
    assert info["socket"] == str(manager.socket_path) and info["activated_by"] == "systemd"
    with RawConn(str(manager.socket_path)) as c:
        assert c.result("initialize", {"protocolVersion": 1})["protocolVersion"] == 1
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert [s["sessionId"] for s in c.result("session/list", {})["sessions"]] == [sid]
    # It served on our socket: never unlinked and bound its own.
    after = os.stat(manager.socket_path)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    assert not list((manager.d.runtime_dir).glob("zocrates/*.sock"))
    manager.notify.wait_for("WATCHDOG=1", timeout=10, count=3)

    proc.send_signal(signal.SIGTERM)
    (stopping,) = manager.notify.wait_for("STOPPING=1", timeout=30)
    assert proc.wait(30) == 0
    ready_at = next(i for i, m in enumerate(manager.notify.messages) if "READY=1" in m.splitlines())
    assert manager.notify.messages.index(stopping) > ready_at
    # The manager's socket outlives the daemon (no connection-refused window): it is still there,
    # still listening, and a connection now waits in its backlog for the next daemon.
    assert stat.S_ISSOCK(os.stat(manager.socket_path).st_mode)
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(str(manager.socket_path))
    probe.close()
    assert not (manager.d.state_dir / "daemon.json").exists()


def test_abstract_notify_socket(daemon_factory: Any, short_tmp: Path) -> None:
    """NOTIFY_SOCKET=@name is an abstract-namespace address (no file), as systemd may pass it."""
    d = daemon_factory()
    m = Manager(d, short_tmp / "mgr" / "zocratesd.sock", f"@zocratesd-test-{uuid.uuid4().hex}")
    try:
        proc = m.start()
        m.wait_ready()
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        m.notify.wait_for("STOPPING=1", timeout=30)
        assert proc.wait(30) == 0
    finally:
        m.close()


def test_idle_exit_waits_for_open_connections_then_exits_cleanly(manager: Manager) -> None:
    proc = manager.start("--idle-exit-after", "1")
    conn = RawConn(str(manager.socket_path))  # connects while the daemon starts: waits in the backlog
    manager.wait_ready()
    conn.result("initialize", {"protocolVersion": 1})
    time.sleep(2.5)  # well past the idle limit, with the connection open
    assert proc.poll() is None, "exited while a connection was open"
    assert conn.result("session/list", {}) == {"sessions": []}
    conn.close()
    closed_at = time.monotonic()
    assert proc.wait(15) == 0
    idle_for = time.monotonic() - closed_at
    assert 0.8 <= idle_for < 10, idle_for
    assert "no connection for 1 s; exiting" in manager.d.stderr_text()
    assert not (manager.d.state_dir / "daemon.json").exists()
    assert stat.S_ISSOCK(os.stat(manager.socket_path).st_mode)  # the manager's, left in place


def test_idle_exit_is_ignored_without_socket_activation(daemon_factory: Any) -> None:
    """Nothing would start a self-bound daemon again, so it must not exit when idle."""
    d = daemon_factory(args=["--idle-exit-after", "0.5"])
    d.start()
    time.sleep(2)
    assert d.proc.poll() is None
    assert "--idle-exit-after ignored" in d.stderr_text()


def test_stdio_uses_the_socket_activated_daemon_before_it_ever_ran(
    daemon_factory: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No daemon.json yet, only the manager's socket: `zocratesd stdio` must connect there (which is
    what starts the daemon) and not start a daemon of its own."""
    d = daemon_factory()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d.runtime_dir))
    m = Manager(d, locations.default_socket_path(d.data_dir), str(short_tmp / "notify.sock"))
    try:
        pump_env = clean_env(d)
        # A daemon the pump started itself would die of this at once; the activated one never sees it.
        pump_env["ZOCRATES_MAX_SAVED_SESSIONS"] = "not-a-number"
        pump = subprocess.Popen(
            [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(d.data_dir)],
            env=pump_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            readable, _, _ = select.select([m.listener], [], [], 30)
            assert readable, f"the pump never connected to the manager's socket: {pump.stderr.read1(4096) if pump.poll() is not None else ''}"
            proc = m.start()  # the first connection starts the daemon, as systemd does
            assert pump.stdin is not None and pump.stdout is not None
            pump.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
            pump.stdin.flush()
            reply = json.loads(pump.stdout.readline())
            assert reply["id"] == 1 and reply["result"]["protocolVersion"] == 1
            pump.stdin.close()
            assert pump.wait(30) == 0, pump.stderr.read()
            assert d.info["pid"] == proc.pid and d.info["socket"] == str(m.socket_path)
        finally:
            if pump.poll() is None:
                pump.kill()
                pump.wait(10)
    finally:
        m.close()


@pytest.mark.anyio
async def test_python_client_uses_the_socket_activated_daemon(
    daemon_factory: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`zocrates_client.connect(start_daemon=True)` goes through the same discovery (pump.connect_to_daemon)."""
    import anyio

    import zocrates_client

    d = daemon_factory()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d.runtime_dir))
    m = Manager(d, locations.default_socket_path(d.data_dir), str(short_tmp / "notify.sock"))
    # A daemon the client started itself (it inherits this env) would die of this at once.
    monkeypatch.setenv("ZOCRATES_MAX_SAVED_SESSIONS", "not-a-number")
    try:

        async def activate_on_first_connection() -> None:
            readable = await anyio.to_thread.run_sync(lambda: select.select([m.listener], [], [], 30)[0])
            assert readable, "the client never connected to the manager's socket"
            m.start()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(activate_on_first_connection)
                async with zocrates_client.connect(data_dir=d.data_dir, start_daemon=True) as client:
                    assert await client.list_sessions() == []
        assert m.proc is not None and d.info["pid"] == m.proc.pid
    finally:
        m.close()


def test_manual_serve_never_unlinks_a_listening_manager_socket(
    daemon_factory: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = daemon_factory()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d.runtime_dir))
    m = Manager(d, locations.default_socket_path(d.data_dir), str(short_tmp / "notify.sock"))
    try:
        before = os.stat(m.socket_path)
        out = subprocess.run(
            [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir)],
            env=clean_env(d), capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 1
        assert "already listening" in out.stderr and "zocratesd.socket" in out.stderr
        after = os.stat(m.socket_path)
        assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    finally:
        m.close()


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate not installed")
def test_under_systemd_socket_activate(daemon_factory: Any, short_tmp: Path) -> None:
    """systemd's own launcher: it listens, and execs the daemon with LISTEN_* on the first connection."""
    d = daemon_factory()
    sock_path = short_tmp / "sa.sock"
    notify = NotifyListener(str(short_tmp / "notify.sock"))
    env = clean_env(d)
    env["NOTIFY_SOCKET"] = notify.address
    with open(d.stderr_path, "ab") as err:
        proc = subprocess.Popen(
            [
                "systemd-socket-activate", "-l", str(sock_path), "--fdname=zocratesd",
                "-E", "NOTIFY_SOCKET", "-E", "XDG_RUNTIME_DIR",
                sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir),
            ],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        deadline = time.monotonic() + 10
        while not sock_path.exists():
            assert time.monotonic() < deadline and proc.poll() is None, d.stderr_path.read_text()
            time.sleep(0.02)
        with RawConn(str(sock_path), timeout=READY_TIMEOUT_S) as c:
            assert c.result("initialize", {"protocolVersion": 1})["protocolVersion"] == 1
        notify.wait_for("READY=1", timeout=10)
        info = d.info
        assert info["pid"] == proc.pid and info["socket"] == str(sock_path) and info["activated_by"] == "systemd"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        notify.close()


# --- the unit files and the installer -------------------------------------------------------------


def service_env(tmp: Path) -> dict[str, str]:
    """A fresh HOME and runtime dir, and a systemctl that records its argv instead of acting."""
    home = tmp / "home"
    home.mkdir()
    run = tmp / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    fake = tmp / "systemctl"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "$*" >> "$FAKE_SYSTEMCTL_LOG"\n'
        'case "$2" in\n'
        '  is-enabled) echo "${FAKE_IS_ENABLED:-enabled}" ;;\n'
        '  is-active) echo "${FAKE_IS_ACTIVE:-active}" ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOCRATES", "XDG_CONFIG_HOME"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run), ZOCRATESD_SYSTEMCTL=str(fake), FAKE_SYSTEMCTL_LOG=str(tmp / "calls"))
    return env


def zservice(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zocratesd", "service", *args], env=env, capture_output=True, text=True, timeout=60
    )


def calls(tmp: Path) -> list[str]:
    log = tmp / "calls"
    return log.read_text().splitlines() if log.exists() else []


def expected_socket(env: dict[str, str], data_dir: Path) -> str:
    probe = "import sys; from pathlib import Path; from zocratesd import locations; print(locations.default_socket_path(Path(sys.argv[1])))"
    return subprocess.run(
        [sys.executable, "-c", probe, str(data_dir)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_service_install_dry_run_install_idempotence_and_uninstall(short_tmp: Path) -> None:
    env = service_env(short_tmp)
    data = short_tmp / "my zotero"
    data.mkdir()
    units = Path(env["HOME"]) / ".config" / "systemd" / "user"
    sock_unit, svc_unit = units / "zocratesd.socket", units / "zocratesd.service"

    dry = zservice(env, "install", "--zotero-data-dir", str(data), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not units.exists() and calls(short_tmp) == []  # nothing written, nothing run
    assert f"# would write {sock_unit} (new)" in dry.stdout and f"# would write {svc_unit} (new)" in dry.stdout
    assert f"# would run: {env['ZOCRATESD_SYSTEMCTL']} --user daemon-reload" in dry.stdout
    assert f"# would run: {env['ZOCRATESD_SYSTEMCTL']} --user enable --now zocratesd.socket" in dry.stdout

    done = zservice(env, "install", "--zotero-data-dir", str(data))
    assert done.returncode == 0, done.stderr
    assert calls(short_tmp) == ["--user daemon-reload", "--user enable --now zocratesd.socket"]
    sock_text, svc_text = sock_unit.read_text(), svc_unit.read_text()
    # The dry run printed exactly what was then written.
    assert sock_text in dry.stdout and svc_text in dry.stdout
    assert f"ListenStream={expected_socket(env, data)}\n" in sock_text
    assert "FileDescriptorName=zocratesd\n" in sock_text and "SocketMode=0600\n" in sock_text
    assert "Accept=no\n" in sock_text
    assert f'ExecStart={sys.executable} -m zocratesd serve --zotero-data-dir "{data}"\n' in svc_text
    assert "Type=notify\n" in svc_text
    assert stat.S_IMODE(sock_unit.stat().st_mode) == 0o644

    # Re-install: same content, already enabled and listening, so nothing is written or run.
    stamps = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (sock_unit, svc_unit)]
    again = zservice(env, "install", "--zotero-data-dir", str(data))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (sock_unit, svc_unit)] == stamps
    assert calls(short_tmp)[2:] == ["--user is-enabled zocratesd.socket", "--user is-active zocratesd.socket"]

    # A changed option rewrites the service and restarts the socket so it takes effect.
    changed = zservice(env, "install", "--zotero-data-dir", str(data), "--idle-exit-after", "600")
    assert changed.returncode == 0, changed.stderr
    assert "--idle-exit-after 600\n" in svc_unit.read_text()
    assert calls(short_tmp)[4:] == ["--user daemon-reload", "--user enable zocratesd.socket", "--user restart zocratesd.socket"]

    status = zservice(env, "status", "--zotero-data-dir", str(data))
    assert status.returncode == 0 and f"installed      {sock_unit}" in status.stdout

    removed = zservice(env, "uninstall", "--zotero-data-dir", str(data))
    assert removed.returncode == 0, removed.stderr
    assert not sock_unit.exists() and not svc_unit.exists()
    assert calls(short_tmp)[-2:] == ["--user disable --now zocratesd.socket zocratesd.service", "--user daemon-reload"]
    status = zservice(env, "status", "--zotero-data-dir", str(data))
    assert status.returncode == 3 and "not installed" in status.stdout


def test_service_install_refuses_to_overwrite_a_foreign_unit(short_tmp: Path) -> None:
    env = service_env(short_tmp)
    units = Path(env["HOME"]) / ".config" / "systemd" / "user"
    units.mkdir(parents=True)
    mine = "[Service]\nExecStart=/usr/bin/my-own-zocratesd\n"
    (units / "zocratesd.service").write_text(mine)
    out = zservice(env, "install", "--zotero-data-dir", str(short_tmp))
    assert out.returncode == 1
    assert "was not written by `zocratesd service install`" in out.stderr and "zocratesd.service" in out.stderr
    assert (units / "zocratesd.service").read_text() == mine
    assert not (units / "zocratesd.socket").exists()  # nothing at all was written
    assert calls(short_tmp) == []
    # Uninstall leaves it alone too.
    gone = zservice(env, "uninstall", "--zotero-data-dir", str(short_tmp))
    assert gone.returncode == 0 and (units / "zocratesd.service").read_text() == mine
    assert calls(short_tmp) == []


def test_service_install_reenables_a_disabled_socket(short_tmp: Path) -> None:
    env = service_env(short_tmp)
    assert zservice(env, "install", "--zotero-data-dir", str(short_tmp)).returncode == 0
    env["FAKE_IS_ENABLED"] = "disabled"
    out = zservice(env, "install", "--zotero-data-dir", str(short_tmp))
    assert out.returncode == 0
    assert calls(short_tmp)[-1] == "--user enable --now zocratesd.socket"


def test_service_install_without_systemctl_says_what_to_do(short_tmp: Path) -> None:
    env = service_env(short_tmp)
    env["ZOCRATESD_SYSTEMCTL"] = str(short_tmp / "no-such-systemctl")
    out = zservice(env, "install", "--zotero-data-dir", str(short_tmp))
    assert out.returncode == 1 and "not found" in out.stderr and "--dry-run" in out.stderr
    assert not (Path(env["HOME"]) / ".config" / "systemd").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_filled_units(short_tmp: Path) -> None:
    env = service_env(short_tmp)
    data = short_tmp / "Zotero 100%"  # a space and a specifier character, both escaped
    data.mkdir()
    assert zservice(env, "install", "--zotero-data-dir", str(data), "--idle-exit-after", "300").returncode == 0
    units = Path(env["HOME"]) / ".config" / "systemd" / "user"
    files = [str(units / "zocratesd.socket"), str(units / "zocratesd.service")]
    out = subprocess.run(["systemd-analyze", "--user", "verify", *files], env=env, capture_output=True, text=True, timeout=60)
    if "Failed to initialize manager" in out.stderr:  # no usable user runtime here: the system manager's checks
        out = subprocess.run(["systemd-analyze", "verify", *files], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Unknown keys and bad values are only warnings: any line about our units is a failure.
    assert "zocratesd." not in out.stdout + out.stderr, out.stdout + out.stderr
