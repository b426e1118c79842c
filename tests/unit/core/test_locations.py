from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from zocratesd import locations


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert locations.resolve_data_dir(None, env={}) == (tmp_path / "xdg" / "zocrates").resolve()
    (home / "Zotero").mkdir()
    assert locations.resolve_data_dir(None, env={}) == (home / "Zotero").resolve()
    assert locations.resolve_data_dir(None, env={"ZOTERO_DATA_DIR": str(tmp_path / "env")}) == tmp_path / "env"
    assert locations.resolve_data_dir(str(tmp_path / "flag"), env={"ZOTERO_DATA_DIR": "/x"}) == tmp_path / "flag"


def test_socket_path_is_per_data_dir_and_checked(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    os.chmod(short_tmp, 0o700)
    a, b = locations.default_socket_path(Path("/a")), locations.default_socket_path(Path("/b"))
    assert a != b and a.parent == b.parent
    locations.check_socket_path(a)
    with pytest.raises(locations.RuntimeFileError, match="shorter --socket"):
        locations.check_socket_path(Path("/tmp/" + "x" * 120))


def test_private_dir_is_tightened_and_symlinks_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir(mode=0o755)
    locations.ensure_private_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(locations.RuntimeFileError):
        locations.ensure_private_dir(link)


def test_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "zocratesd.lock"
    # Another process holds the lock (flock is per open file, so a second process is the real test).
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from zocratesd.locations import InstanceLock; from pathlib import Path;"
         "l=InstanceLock(Path(sys.argv[1])); l.acquire(); print('held', flush=True); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert locations.lock_is_held(path)
        with pytest.raises(locations.AlreadyRunning) as info:
            locations.InstanceLock(path).acquire()
        assert info.value.pid == holder.pid and f"pid {holder.pid}" in str(info.value)
    finally:
        holder.kill()
        holder.wait()
    assert not locations.lock_is_held(path)  # the kernel released it with the process
    lock = locations.InstanceLock(path)
    lock.acquire()
    assert locations.read_lock_pid(path) == os.getpid()
    lock.release()


def test_daemon_info_is_private_atomic_and_stale_when_dead(tmp_path: Path) -> None:
    state = locations.state_dir(tmp_path)
    state.mkdir()
    info_path = state / locations.INFO_NAME
    payload = {"pid": os.getpid(), "socket": "/s", "protocol_version": 1, "version": "0.1.0"}
    locations.write_private_json(info_path, payload)
    assert stat.S_IMODE(info_path.stat().st_mode) == 0o600
    assert json.loads(info_path.read_text()) == payload
    assert [p.name for p in state.iterdir()] == [locations.INFO_NAME]  # no temp file left behind
    assert locations.read_daemon_info(tmp_path).pid == os.getpid()
    # Alive pid but nobody holds the lock: a crashed daemon's file whose pid was reused.
    assert locations.live_daemon(tmp_path) is None
    info_path.write_text("{not json")
    assert locations.read_daemon_info(tmp_path) is None
