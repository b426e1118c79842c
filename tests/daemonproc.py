"""A real `zocratesd serve` process, and the environment it runs in.

The tests' daemon, and the benchmarks' (bench/_procs.py imports it): one way to start, find and stop
a daemon. A benchmark times `start()` (cold start) and may put a profiler in `command`.
"""

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

# A hang guard, not a measure: a daemon's start imports ADK, tens of seconds on a 2-core machine
# that also runs other work (every process gets a fraction of a core).
READY_TIMEOUT_S = 180.0
# How often start() looks for the daemon: bench_store times a cold start with it, so the poll must
# not be what it measures (5 ms is below a start's spread; a poll is a file read and a connect).
POLL_S = 0.005
# What the daemon logs once its engine is up (process/lifecycle.py, bring_up).
ENGINE_READY = "engine ready in"
# `zocratesd` with the test hooks injected (tests/daemon_entry.py): the `command` of a test that
# holds a stage of the start or the embedding child; the console script's `-m zocratesd` otherwise.
TEST_ENTRY = [sys.executable, str(Path(__file__).with_name("daemon_entry.py"))]


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
    # A test daemon never searches the real OpenAlex, arXiv or Crossref, nor asks about it: tests of
    # online search drop this and point online.* at their stand-ins.
    env["ZOCRATES_ONLINE__MODE"] = "off"
    return env


@dataclass
class DaemonProc:
    """A running `zocratesd serve` and the paths a test needs to talk to it."""

    data_dir: Path
    runtime_dir: Path
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    # What runs zocratesd; `serve ...` follows. A benchmark puts a profiler here (bench/_procs.py).
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "zocratesd"])
    proc: subprocess.Popen[bytes] | None = None
    _engines_before: int = 0

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "zocrates-data"

    @property
    def info(self) -> dict[str, Any]:
        try:
            return json.loads((self.state_dir / "daemon.json").read_text())
        except FileNotFoundError:
            # The daemon removes it only as it exits: say how it ended, not just that a file is missing.
            ended = "still runs" if self.running() else f"exited {self.proc.returncode if self.proc else None}"
            raise AssertionError(f"no daemon.json: the daemon {ended}; its log ends:\n{self.stderr_text()[-3000:]}\n"
                                 f"its stderr ends:\n{self.stderr_tail(3000)}") from None

    @property
    def socket_path(self) -> str:
        return str(self.info["socket"])

    @property
    def db_path(self) -> Path:
        return self.state_dir / "sessions.db"

    @property
    def stderr_path(self) -> Path:
        return self.runtime_dir.parent / f"daemon-{self.data_dir.name}.stderr"

    def start(self) -> float:
        """Spawn the daemon and wait until it is ready: daemon.json names this pid and its socket
        accepts a connection. Returns the seconds that took, from spawn."""
        t0 = time.perf_counter()
        self._engines_before = self.stderr_text().count(ENGINE_READY)
        # stderr goes to a file, not a pipe nobody drains: a chatty daemon must never block on it.
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*self.command, "serve", "--zotero-data-dir", str(self.data_dir), *self.args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        info_path = self.state_dir / "daemon.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zocratesd exited {self.proc.returncode}: {self.stderr_tail(2000)}")
            try:
                info = json.loads(info_path.read_text())
                if info["pid"] == self.proc.pid:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(info["socket"])
                    return time.perf_counter() - t0
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(POLL_S)
        self.kill()
        raise RuntimeError(f"zocratesd did not become ready in {READY_TIMEOUT_S:.0f} s: {self.stderr_tail(2000)}")

    def wait_until_started(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the daemon started by `start()` has brought its engine up (its start-up
        maintenance included): `start()` returns as soon as it answers reads, before that."""
        deadline = time.monotonic() + timeout
        while self.stderr_text().count(ENGINE_READY) <= self._engines_before:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"zocratesd exited before its engine was up: {self.stderr_tail(2000)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"zocratesd's engine was not up in {timeout:.0f} s: {self.stderr_tail(2000)}")
            time.sleep(POLL_S * 4)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; returns the exit code (None: never started). A daemon that hangs dumps
        its stacks, then dies, and the caller fails with them."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.kill()
            raise AssertionError(f"zocratesd ignored SIGTERM for {timeout} s:\n{self.stderr_tail(6000)}") from None

    def kill(self) -> None:
        """SIGKILL: the daemon gets no chance to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr_tail(self, chars: int = 3000) -> str:
        """The end of what the daemon wrote to stderr (tracebacks that never reach its log)."""
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def stderr_text(self) -> str:
        log = self.state_dir / "zocratesd.log"
        return log.read_text() if log.exists() else ""


