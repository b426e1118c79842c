"""The instance's files: what a new daemon may remove from its socket path, and what it removes on exit."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd import locations
from zocratesd.process.instance import Instance


@pytest.fixture
def instance(short_tmp: Path) -> Iterator[Instance]:
    inst = Instance(short_tmp / "zotero")
    inst.acquire()
    yield inst
    inst.lock.release()


def bound(path: Path, *, listen: bool) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    if listen:
        sock.listen(1)
    return sock


def test_a_file_that_is_not_a_socket_is_refused_and_kept(instance: Instance, short_tmp: Path) -> None:
    victim = short_tmp / "precious.txt"
    victim.write_text("user data")
    with pytest.raises(locations.RuntimeFileError, match="not a socket"):
        instance.claim_socket(victim)
    assert victim.read_text() == "user data"


def test_a_dead_daemons_socket_is_removed(instance: Instance, short_tmp: Path) -> None:
    path = short_tmp / "d.sock"
    bound(path, listen=False).close()  # the file stays, nobody listens: what SIGKILL leaves
    instance.claim_socket(path)
    assert not path.exists() and instance.socket_path == path
    assert not instance.owns_socket  # ours to remove only once we bound it
    with instance.bind():
        assert instance.owns_socket


def test_a_socket_something_listens_on_is_refused_and_kept(instance: Instance, short_tmp: Path) -> None:
    path = short_tmp / "m.sock"
    with bound(path, listen=True):
        with pytest.raises(locations.RuntimeFileError, match="already listening"):
            instance.claim_socket(path)
        assert path.exists()


def test_close_removes_our_files_and_releases_the_lock(short_tmp: Path) -> None:
    inst = Instance(short_tmp / "zotero")
    inst.acquire()
    path = short_tmp / "own.sock"
    inst.claim_socket(path)
    inst.bind().close()
    assert (short_tmp / "own.sock.lock").exists()
    inst.write_info(http=None, token=None)
    info = locations.read_daemon_info(inst.data_dir)
    assert info is not None and info.pid == os.getpid() and info.socket == str(path)
    inst.close()
    assert not inst.info_path.exists() and not path.exists()
    assert not (short_tmp / "own.sock.lock").exists()  # the socket's lock goes with the socket
    assert not locations.lock_is_held(inst.state / locations.LOCK_NAME)


def test_an_adopted_socket_is_the_managers_and_stays(short_tmp: Path) -> None:
    inst = Instance(short_tmp / "zotero")
    inst.acquire()
    path = short_tmp / "mgr.sock"
    with bound(path, listen=True) as sock:
        inst.adopt_socket(sock, "systemd")
        inst.write_info()
        assert locations.read_daemon_info(inst.data_dir).raw["activated_by"] == "systemd"  # type: ignore[union-attr]
        inst.close()
        assert path.exists() and not inst.info_path.exists()


# --- issue 16: one daemon per socket path, --socket's directory, a runtime dir too deep ------------

NOBODY = 65534


def test_a_daemon_of_another_data_dir_cannot_take_a_claimed_socket(short_tmp: Path) -> None:
    """Both pass their own data dir's lock; the socket's lock stops the second, even in the window
    between the first's claim and its bind, and the second's exit leaves the first's socket alone."""
    path = short_tmp / "shared.sock"
    first, second = Instance(short_tmp / "one"), Instance(short_tmp / "two")
    first.acquire()
    second.acquire()
    try:
        first.claim_socket(path)
        with pytest.raises(locations.RuntimeFileError, match=f"already serves the socket {path}"):
            second.claim_socket(path)
        with first.bind():
            second.close()
            assert path.exists()
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(path))  # still the first daemon's, still listening
    finally:
        first.close()
    assert not path.exists()
    third = Instance(short_tmp / "three")  # free again once the first is gone
    third.acquire()
    third.claim_socket(path)
    third.close()


def test_bind_never_removes_a_socket_that_appeared_after_the_claim(instance: Instance, short_tmp: Path) -> None:
    path = short_tmp / "late.sock"
    instance.claim_socket(path)
    with bound(path, listen=True):  # not a zocratesd: it took no lock
        with pytest.raises(locations.RuntimeFileError, match="cannot listen"):
            instance.bind()
        instance.close()
        assert path.exists() and not instance.owns_socket


def test_socket_flag_never_changes_an_existing_directory(instance: Instance, short_tmp: Path) -> None:
    shared = short_tmp / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    instance.claim_socket(shared / "z.sock")
    instance.bind().close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "z.sock").stat().st_mode) == 0o600


def test_socket_flag_in_a_missing_directory_creates_it_private(instance: Instance, short_tmp: Path) -> None:
    instance.claim_socket(short_tmp / "new" / "z.sock")
    assert stat.S_IMODE((short_tmp / "new").stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another uid (chown) needs root")
def test_another_users_socket_or_lock_in_a_shared_dir_is_refused_and_kept(instance: Instance, short_tmp: Path) -> None:
    shared = short_tmp / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    theirs = shared / "theirs.sock"
    bound(theirs, listen=False).close()  # nobody listens: today's check alone would remove it
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(locations.RuntimeFileError, match=f"uid {NOBODY}"):
        instance.claim_socket(theirs)
    assert theirs.exists()
    lock = shared / "other.sock.lock"
    lock.write_text("")
    os.chown(lock, NOBODY, NOBODY)
    with pytest.raises(locations.RuntimeFileError, match=f"belongs to uid {NOBODY}"):
        instance.claim_socket(shared / "other.sock")
    assert lock.exists()


def test_the_default_socket_works_with_a_runtime_dir_too_deep_for_it(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = short_tmp / ("r" * (150 - len(str(short_tmp)) - 1))
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    monkeypatch.setattr(locations, "SHORT_SOCKET_PARENT", short_tmp)  # not the machine's /tmp
    inst = Instance(short_tmp / "zotero")
    inst.acquire()
    try:
        inst.claim_socket(locations.default_socket_path(inst.data_dir), private_dir=True)
        assert inst.socket_path is not None and inst.socket_path.parent == short_tmp / f"zocrates-{os.geteuid()}"
        with inst.bind(), socket.socket(socket.AF_UNIX) as client:
            client.connect(str(inst.socket_path))
        assert stat.S_IMODE(inst.socket_path.parent.stat().st_mode) == 0o700
    finally:
        inst.close()
