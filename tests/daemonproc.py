"""A real `zocratesd serve` process for tests, and the environment it runs in."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 60.0


def daemon_env(runtime_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    env.pop("ZOTERO_DATA_DIR", None)
    for key in ("NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(key, None)  # a test run under a service manager must not hand its sockets on
    for key in list(env):
        if key.startswith("ZOCRATES_"):
            del env[key]
    # Zotero's local API on this machine is the developer's real library: a test daemon never
    # reads it (port 9, discard, has no listener; a test that wants a local API sets its own).
    env["ZOCRATES_LIBRARY__LOCAL_API_URL"] = "http://127.0.0.1:9"
    return env


@dataclass
class DaemonProc:
    """A running `zocratesd serve` and the paths a test needs to talk to it."""

    data_dir: Path
    runtime_dir: Path
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "zocrates-data"

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.state_dir / "daemon.json").read_text())

    @property
    def socket_path(self) -> str:
        return str(self.info["socket"])

    @property
    def db_path(self) -> Path:
        return self.state_dir / "sessions.db"

    @property
    def stderr_path(self) -> Path:
        return self.runtime_dir.parent / f"daemon-{self.data_dir.name}.stderr"

    def start(self) -> None:
        # stderr goes to a file, not a pipe nobody drains: a chatty daemon must never block on it.
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(self.data_dir), *self.args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        info_path = self.state_dir / "daemon.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zocratesd exited {self.proc.returncode}: {self.stderr_path.read_text()[-2000:]}")
            try:
                info = json.loads(info_path.read_text())
                if info["pid"] == self.proc.pid:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(info["socket"])
                    s.close()
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("zocratesd did not become ready")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code. A daemon that hangs dumps its stacks, then dies,
        and the test fails with them."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.kill()
            raise AssertionError(f"zocratesd ignored SIGTERM for {timeout} s:\n{self.stderr_path.read_text()[-6000:]}")

    def kill(self) -> None:
        """SIGKILL: the daemon gets no chance to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr_text(self) -> str:
        log = self.state_dir / "zocratesd.log"
        return log.read_text() if log.exists() else ""


