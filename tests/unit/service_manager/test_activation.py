"""Socket activation parsing: systemd's LISTEN_* protocol on real fds, and launchd's ctypes seam.

The launchd path cannot run on Linux for real, so it is driven through its seam: a "libc" whose
`launch_activate_socket` is a ctypes callback with the real C signature, which fills the out
parameters with memory from the real malloc, so the pointer handling and the free() are exercised.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from zocratesd.service_manager import activation
from zocratesd.service_manager.activation import Activation, ActivationError

# Far above anything pytest has open, so the tests need not take over fd 3.
FIRST_FD = 300


def listener(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(4)
    return s


@pytest.fixture
def passed_fds() -> Iterator[Any]:
    """Place sockets at FIRST_FD.. as a manager would; closes them afterwards."""
    placed: list[int] = []

    def place(*socks: socket.socket) -> None:
        for i, s in enumerate(socks):
            os.dup2(s.fileno(), FIRST_FD + i)
            placed.append(FIRST_FD + i)

    yield place
    for fd in placed:
        try:
            os.close(fd)
        except OSError:
            pass


def env_for(count: int, names: str | None = "zocratesd", pid: int | None = None) -> dict[str, str]:
    env = {"LISTEN_PID": str(pid or os.getpid()), "LISTEN_FDS": str(count), "KEEP": "1"}
    if names is not None:
        env["LISTEN_FDNAMES"] = names
    return env


def test_systemd_sockets_are_wrapped_by_name_with_cloexec_and_the_variables_removed(
    short_tmp: Path, passed_fds: Any
) -> None:
    ours, other = listener(short_tmp / "a.sock"), listener(short_tmp / "b.sock")
    passed_fds(ours, other)
    env = env_for(2, "zocratesd:http")
    env["LISTEN_PIDFDID"] = "123"
    found = activation.from_systemd(env, first_fd=FIRST_FD)
    assert env == {"KEEP": "1"}
    assert found is not None and found.manager == "systemd"
    (sock,) = found.take()
    assert sock.fileno() == FIRST_FD
    assert sock.getsockname() == str(short_tmp / "a.sock")
    assert fcntl.fcntl(FIRST_FD, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    activation.check_unix_listener(sock, "test")  # a listening Unix stream socket passes
    assert list(found.sockets) == ["http"]
    found.close_rest()
    assert found.sockets == {}
    with pytest.raises(OSError):
        os.fstat(FIRST_FD + 1)  # the unused one was closed (the manager keeps its own copy)
    ours.close()
    other.close()


def test_unnamed_fds_are_ours(short_tmp: Path, passed_fds: Any) -> None:
    s = listener(short_tmp / "a.sock")
    passed_fds(s)
    found = activation.from_systemd(env_for(1, names=None), first_fd=FIRST_FD)
    assert found is not None and [x.fileno() for x in found.take()] == [FIRST_FD]
    s.close()


def test_variables_for_another_pid_are_ignored_and_removed() -> None:
    env = env_for(1, pid=os.getpid() + 1)
    assert activation.from_systemd(env, first_fd=FIRST_FD) is None
    assert env == {"KEEP": "1"}


def test_no_variables_no_activation() -> None:
    assert activation.from_systemd({}) is None
    assert activation.from_systemd({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (env_for(2, "zocratesd"), "names 1 fds"),
        ({"LISTEN_PID": "me", "LISTEN_FDS": "1"}, "not numbers"),
        (env_for(activation.MAX_LISTEN_FDS + 1, None), "more than"),
    ],
)
def test_inconsistent_variables_are_an_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ActivationError, match=message):
        activation.from_systemd(env, first_fd=FIRST_FD)


def test_a_passed_fd_that_is_not_a_socket_is_an_error(passed_fds: Any) -> None:
    r, w = os.pipe()
    try:
        os.dup2(r, FIRST_FD)
        with pytest.raises(ActivationError, match="not a usable socket"):
            activation.from_systemd(env_for(1), first_fd=FIRST_FD)
    finally:
        for fd in (r, w, FIRST_FD):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.mark.parametrize(
    "make",
    [
        lambda p: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),  # not listening
        lambda p: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
        lambda p: socket.create_server(("127.0.0.1", 0)),  # TCP: no peer-uid check possible
    ],
)
def test_only_listening_unix_stream_sockets_are_served(short_tmp: Path, make: Any) -> None:
    s = make(short_tmp)
    try:
        with pytest.raises(ActivationError, match="not a listening Unix stream socket"):
            activation.check_unix_listener(s, "the socket systemd passed")
    finally:
        s.close()


def test_take_collects_every_socket_of_the_name() -> None:
    a, b = socket.socketpair()
    act = Activation("launchd", {"zocratesd": [a], "unknown": [b]})
    assert act.take() == [a, b] and act.sockets == {}
    a.close()
    b.close()


# --- launchd, through its seam ----------------------------------------------------------------------

ACTIVATE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)
)
real_libc = ctypes.CDLL(None)
real_libc.malloc.restype = ctypes.c_void_p
real_libc.malloc.argtypes = [ctypes.c_size_t]


FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
real_libc.free.argtypes = [ctypes.c_void_p]


def fake_libc(rc: int, fds: list[int] | None = None, seen: list[bytes] | None = None) -> SimpleNamespace:
    """launch_activate_socket with the real signature: fills `*fds` from malloc, as launchd does.
    `free` records what it is given (then really frees it): `allocated` must equal `freed`."""
    allocated: list[int] = []
    freed: list[int] = []

    def activate(name: bytes, out_fds: Any, out_count: Any) -> int:
        if seen is not None:
            seen.append(name)
        if rc == 0 and fds:
            buf = real_libc.malloc(ctypes.sizeof(ctypes.c_int) * len(fds))
            allocated.append(buf)
            array = ctypes.cast(buf, ctypes.POINTER(ctypes.c_int))
            for i, fd in enumerate(fds):
                array[i] = fd
            out_fds[0] = array
            out_count[0] = len(fds)
        return rc

    def free(addr: int) -> None:
        freed.append(addr)
        real_libc.free(addr)

    callbacks = (ACTIVATE(activate), FREE(free))
    return SimpleNamespace(
        launch_activate_socket=callbacks[0], free=callbacks[1], allocated=allocated, freed=freed, _keep=callbacks
    )


def test_launchd_sockets_are_taken_and_the_array_freed(short_tmp: Path) -> None:
    a, b = listener(short_tmp / "a.sock"), listener(short_tmp / "b.sock")
    fa, fb = os.dup(a.fileno()), os.dup(b.fileno())
    seen: list[bytes] = []
    libc = fake_libc(0, [fa, fb], seen)
    found = activation.from_launchd("zocratesd", libc=libc)
    assert seen == [b"zocratesd"]
    assert libc.freed == libc.allocated and len(libc.freed) == 1
    assert found is not None and found.manager == "launchd"
    socks = found.take()
    assert [s.fileno() for s in socks] == [fa, fb]
    assert [s.getsockname() for s in socks] == [str(short_tmp / "a.sock"), str(short_tmp / "b.sock")]
    for s in (*socks, a, b):
        s.close()


@pytest.mark.parametrize("rc", [errno.ESRCH, errno.ENOENT])
def test_launchd_not_started_by_launchd_means_bind_our_own(rc: int) -> None:
    assert activation.from_launchd(libc=fake_libc(rc)) is None


def test_launchd_other_errors_are_reported() -> None:
    with pytest.raises(ActivationError, match="launch_activate_socket"):
        activation.from_launchd(libc=fake_libc(errno.EALREADY))


def test_launchd_with_no_sockets_is_not_activated() -> None:
    assert activation.from_launchd(libc=fake_libc(0, [])) is None


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS has launch_activate_socket")
def test_launchd_symbol_missing_fails_cleanly() -> None:
    # The real C library of this (Linux) machine has no launch_activate_socket.
    assert not hasattr(activation.load_libc(), "launch_activate_socket")
    assert activation.from_launchd() is None
    assert activation.from_launchd(libc=SimpleNamespace(free=FREE(lambda addr: None))) is None


def test_not_activated_here(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        monkeypatch.delenv(key, raising=False)
    assert activation.activated_sockets() is None
