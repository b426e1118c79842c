"""A client that finds the instance lock held by a daemon that is still exiting (killed a moment
ago: its lock is released only when its process is gone) starts a new daemon once the lock is
free, instead of waiting out its start timeout for a daemon nobody starts (rpc/pump.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from daemonproc import daemon_env

from zocratesd import locations
from zocratesd.rpc import pump

pytestmark = pytest.mark.e2e

# A hang guard: the old behaviour waited its whole start timeout (60 s) and then failed.
START_WITHIN_S = 45.0

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # the lock goes with the process, as a killed daemon's does
"""


def test_a_lock_released_after_the_first_look_is_followed_by_a_start(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = short_tmp / "zotero"
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    state = locations.state_dir(data_dir)
    locations.ensure_private_dir(state)
    for key, value in daemon_env(run).items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("ZOCRATES_")]:
        if key not in daemon_env(run):
            monkeypatch.delenv(key)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(state / locations.LOCK_NAME)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        looked = threading.Event()
        real = locations.lock_is_held

        def lock_is_held(path: Path) -> bool:
            held = real(path)
            looked.set()
            return held

        monkeypatch.setattr(locations, "lock_is_held", lock_is_held)
        outcome: dict[str, Any] = {}

        def connect() -> None:
            try:
                outcome["socket"] = pump.connect_to_daemon(data_dir, on_start=lambda pid, log: started.append(pid))
            except Exception as exc:  # noqa: BLE001 - the thread's outcome, checked below
                outcome["error"] = exc

        t = threading.Thread(target=connect, daemon=True)
        t.start()
        assert looked.wait(START_WITHIN_S), "the client never looked at the lock"
        assert holder.stdin is not None
        holder.stdin.close()  # the exiting daemon is gone: its lock with it
        holder.wait(10)
        t.join(START_WITHIN_S)
        assert not t.is_alive(), f"no daemon {START_WITHIN_S:.0f} s after the lock was free"
        assert "socket" in outcome, outcome
        outcome["socket"].close()
        assert started, "the client did not start the daemon"
    finally:
        if holder.poll() is None:
            holder.kill()
        for pid in started:  # only the daemon this test's client started
            os.kill(pid, signal.SIGTERM)
            assert _reaped(pid), f"the daemon {pid} did not stop"


def _reaped(pid: int, timeout_s: float = 30.0) -> bool:
    """Waits for our child `pid` to exit, and reaps it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:  # reaped already (by the Popen the client dropped)
            return True
        time.sleep(0.05)
    return False
