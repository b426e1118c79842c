"""sd_notify over real datagram sockets: path and abstract addresses, watchdog settings, failures."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd.service_manager import notify
from zocratesd.service_manager.notify import Notifier


@pytest.fixture
def receiver(short_tmp: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(short_tmp / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield path, sock
    sock.close()


def test_ready_and_stopping_reach_a_path_socket_and_the_variables_are_removed(receiver: tuple[str, socket.socket]) -> None:
    path, sock = receiver
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000", "OTHER": "kept"}
    n = Notifier.from_environ(env, pid=os.getpid())
    assert env == {"OTHER": "kept"}  # children must not inherit our manager
    assert n.enabled and n.watchdog_interval_s == 1.0
    assert n.ready("serving /data\nwith a newline")
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving /data with a newline"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    n.close()


def test_abstract_namespace_address() -> None:
    name = f"zocratesd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        n = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert n.address == b"\0" + name.encode()
        assert n.ready()
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()


def test_without_a_manager_everything_is_a_quiet_no_op() -> None:
    n = Notifier.from_environ({})
    assert not n.enabled and n.watchdog_interval_s is None
    assert n.ready() is False and n.stopping() is False and n.watchdog() is False


@pytest.mark.parametrize("value", ["vsock:2:1234", "relative/path", "@"])
def test_unsupported_addresses_disable_notification(value: str) -> None:
    env = {"NOTIFY_SOCKET": value, "WATCHDOG_USEC": "1000000"}
    n = Notifier.from_environ(env)
    assert not n.enabled and n.watchdog_interval_s is None and env == {}


def test_a_manager_that_went_away_never_raises(short_tmp: Path) -> None:
    n = Notifier(str(short_tmp / "gone.sock"))
    assert n.ready() is False
    assert n.watchdog() is False


def test_a_full_queue_drops_pings_instead_of_blocking(receiver: tuple[str, socket.socket]) -> None:
    path, _sock = receiver  # never read: its queue fills up
    n = Notifier(path)
    started = time.monotonic()
    results = [n.watchdog() for _ in range(5000)]
    assert time.monotonic() - started < 30  # a blocking send would never return: the queue is never read
    assert results[0] is True and results[-1] is False


@pytest.mark.parametrize(
    ("env", "pid", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 7, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 7, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"}, 7, None),  # another process's watchdog
        ({"WATCHDOG_USEC": "1"}, 7, notify.MIN_WATCHDOG_PING_S),  # never a busy loop
        ({"WATCHDOG_USEC": "0"}, 7, None),
        ({"WATCHDOG_USEC": "soon"}, 7, None),
        ({}, 7, None),
    ],
)
def test_watchdog_ping_interval(env: dict[str, str], pid: int, expected: float | None) -> None:
    assert notify.watchdog_ping_interval(env, pid) == expected
