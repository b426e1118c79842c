from __future__ import annotations

import json
import os
import socket
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
    # Zotero's own settings name another data dir: it wins over ~/Zotero, not over the flag or the env.
    root = home / ".zotero" / "zotero"
    (root / "ab12.default").mkdir(parents=True)
    (root / "profiles.ini").write_text("[Profile0]\nName=default\nIsRelative=1\nPath=ab12.default\nDefault=1\n")
    prefs = root / "ab12.default" / "prefs.js"
    custom = tmp_path / "papers on another disk"
    prefs.write_text(f'user_pref("extensions.zotero.dataDir", {json.dumps(str(custom))});\n'
                     'user_pref("extensions.zotero.useDataDir", true);\n')
    assert locations.resolve_data_dir(None, env={}) == custom
    assert locations.resolve_data_dir(None, env={"ZOTERO_DATA_DIR": str(tmp_path / "env")}) == tmp_path / "env"
    assert locations.resolve_data_dir(str(tmp_path / "flag"), env={}) == tmp_path / "flag"
    # Zotero ignores dataDir unless useDataDir is set.
    prefs.write_text(f'user_pref("extensions.zotero.dataDir", {json.dumps(str(custom))});\n')
    assert locations.resolve_data_dir(None, env={}) == (home / "Zotero").resolve()


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


# --- issue 16: a runtime dir too deep for a socket, hostile directories ----------------------------

NOBODY = 65534  # the conventional unprivileged uid
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another uid (chown) needs root")


def deep_dir(base: Path, total_bytes: int = 150) -> Path:
    """A directory of ours whose path is `total_bytes` long: too deep for any socket path in it."""
    d = base / ("r" * (total_bytes - len(str(base)) - 1))
    d.mkdir(mode=0o700)
    assert len(os.fsencode(d)) == total_bytes
    return d


def test_a_runtime_dir_too_deep_for_a_socket_puts_it_in_the_short_private_dir(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep_dir(short_tmp)))
    path = locations.default_socket_path(Path("/z"))
    assert path.parent == locations.short_socket_dir() == Path(f"/tmp/zocrates-{os.geteuid()}")
    assert locations.socket_path_fits(path)
    locations.check_socket_path(path)
    # The same name as in the runtime dir: only the directory changes, and only when it must.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    os.chmod(short_tmp, 0o700)
    short = locations.default_socket_path(Path("/z"))
    assert short.parent == locations.runtime_dir() and short.name == path.name


def test_a_directory_in_the_way_is_a_one_line_error_not_an_oserror(short_tmp: Path) -> None:
    (short_tmp / "file").write_text("")
    with pytest.raises(locations.RuntimeFileError, match="is not a directory"):
        locations.ensure_private_dir(short_tmp / "file")
    with pytest.raises(locations.RuntimeFileError, match="cannot create"):
        locations.ensure_private_dir(short_tmp / "file" / "below")
    (short_tmp / "link").symlink_to(short_tmp)
    with pytest.raises(locations.RuntimeFileError, match="symbolic link"):
        locations.ensure_socket_dir(short_tmp / "link", ours=True)


def test_missing_directories_are_all_created_private(short_tmp: Path) -> None:
    old = os.umask(0o022)  # what a client runs with; the daemon's 0077 would hide the bug
    try:
        locations.ensure_private_dir(short_tmp / "a" / "b" / "c")
    finally:
        os.umask(old)
    for d in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE((short_tmp / d).stat().st_mode) == 0o700, d


def test_a_socket_parent_of_the_user_is_created_private_and_never_changed(short_tmp: Path) -> None:
    new = short_tmp / "new" / "run"
    locations.ensure_socket_dir(new, ours=False)
    assert stat.S_IMODE(new.stat().st_mode) == stat.S_IMODE(new.parent.stat().st_mode) == 0o700
    for mode in (0o755, 0o1777, 0o3777):  # a shared dir of ours; a /tmp-like sticky one
        d = short_tmp / f"m{mode:o}"
        d.mkdir()
        os.chmod(d, mode)
        locations.ensure_socket_dir(d, ours=False)
        assert stat.S_IMODE(d.stat().st_mode) == mode
    open_dir = short_tmp / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(locations.RuntimeFileError, match="writable by other users"):
        locations.ensure_socket_dir(open_dir, ours=False)
    assert stat.S_IMODE(open_dir.stat().st_mode) == 0o777  # refused, not "fixed"


def test_our_socket_dir_must_sit_where_nobody_else_can_replace_it(short_tmp: Path) -> None:
    parent = short_tmp / "p"
    parent.mkdir()
    os.chmod(parent, 0o777)  # anyone could rename our directory away and put theirs there
    with pytest.raises(locations.RuntimeFileError, match="another user could replace"):
        locations.ensure_socket_dir(parent / "zocrates", ours=True)
    os.chmod(parent, 0o1777)  # sticky, like /tmp: fine
    locations.ensure_socket_dir(parent / "zocrates", ours=True)
    assert stat.S_IMODE((parent / "zocrates").stat().st_mode) == 0o700


@needs_root
def test_directories_of_another_uid_are_refused(short_tmp: Path) -> None:
    theirs = short_tmp / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(locations.RuntimeFileError, match=f"belongs to uid {NOBODY}"):
        locations.ensure_socket_dir(theirs, ours=False)  # --socket theirs/x.sock
    with pytest.raises(locations.RuntimeFileError, match=f"belongs to uid {NOBODY}"):
        locations.ensure_socket_dir(theirs / "zocrates", ours=True)  # $XDG_RUNTIME_DIR of someone else
    with pytest.raises(locations.RuntimeFileError, match=f"belongs to uid {NOBODY}"):
        locations.ensure_private_dir(theirs)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755 and theirs.stat().st_uid == NOBODY


@needs_root
def test_a_squatted_short_socket_dir_is_neither_used_nor_trusted(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = short_tmp / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    monkeypatch.setattr(locations, "SHORT_SOCKET_PARENT", tmp)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep_dir(short_tmp)))
    data_dir = Path("/z")
    path = locations.default_socket_path(data_dir)
    assert path.parent == tmp / f"zocrates-{os.geteuid()}"
    # Another user made the directory first, with a listening socket of theirs at our name.
    path.parent.mkdir(mode=0o755)
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(str(path))
    squatter.listen(1)
    os.chown(path, NOBODY, NOBODY)
    os.chown(path.parent, NOBODY, NOBODY)
    try:
        assert locations.activation_socket(data_dir) is None  # a client never connects to it
        with pytest.raises(locations.RuntimeFileError, match=f"belongs to uid {NOBODY}"):
            locations.ensure_socket_dir(path.parent, ours=True)
        assert locations.socket_dir_problem(path.parent) is not None  # `service install` refuses it too
    finally:
        squatter.close()


def test_activation_socket_is_only_a_socket_of_ours(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    os.chmod(short_tmp, 0o700)
    path = locations.default_socket_path(Path("/z"))
    assert locations.activation_socket(Path("/z")) is None
    locations.ensure_socket_dir(path.parent, ours=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        assert locations.activation_socket(Path("/z")) == path
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
            assert locations.activation_socket(Path("/z")) is None


def test_a_lock_file_is_never_opened_through_a_symlink(short_tmp: Path) -> None:
    target = short_tmp / "target"
    target.write_text("keep")
    link = short_tmp / "x.sock.lock"
    link.symlink_to(target)
    with pytest.raises(locations.RuntimeFileError, match="symbolic link"):
        locations.InstanceLock(link, remove_on_release=True).acquire()
    assert target.read_text() == "keep"


def test_a_removable_lock_goes_with_its_release_and_can_be_taken_again(short_tmp: Path) -> None:
    path = short_tmp / "x.sock.lock"
    first = locations.InstanceLock(path, what="the socket x", remove_on_release=True)
    first.acquire()
    with pytest.raises(locations.AlreadyRunning, match=f"pid {os.getpid()}.*the socket x"):
        locations.InstanceLock(path, what="the socket x", remove_on_release=True).acquire()
    first.release()
    assert not path.exists()
    again = locations.InstanceLock(path, remove_on_release=True)
    again.acquire()
    assert locations.read_lock_pid(path) == os.getpid()
    again.release()


def test_a_lock_on_a_file_removed_meanwhile_is_not_a_lock(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that opened `<socket>.lock` just before its holder removed it must not count that
    file's flock as the lock: it locks the file now at the path instead."""
    path = short_tmp / "x.sock.lock"
    lock = locations.InstanceLock(path, remove_on_release=True)
    real_open = lock._open
    replaced: list[bool] = []

    def open_then_lose_the_race() -> int:
        fd = real_open()
        if not replaced:  # the holder removes the file after our open(), before our flock()
            os.unlink(path)
            replaced.append(True)
        return fd

    monkeypatch.setattr(lock, "_open", open_then_lose_the_race)
    lock.acquire()
    assert replaced and path.exists() and locations.read_lock_pid(path) == os.getpid()
    lock.release()
