"""Which port the shim takes: stable per data dir, distinct across profiles, probing upward."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from zocratesd.config import HttpConfig
from zocratesd.shim.server import PORT_OFFSET_SPAN, bind_loopback, preferred_port


def test_each_data_dir_has_a_stable_port_of_its_own(tmp_path: Path) -> None:
    a, b = tmp_path / "profile-a", tmp_path / "profile-b"
    assert preferred_port(a, 8765) == preferred_port(a, 8765)
    assert preferred_port(a, 8765) != preferred_port(b, 8765)
    ports = {preferred_port(tmp_path / f"p{i}", 8765) for i in range(50)}
    assert all(8765 <= p < 8765 + PORT_OFFSET_SPAN for p in ports) and len(ports) > 40
    # The resolved path decides: a relative spelling of the same dir gets the same port.
    assert preferred_port(tmp_path / "x" / ".." / "profile-a", 8765) == preferred_port(a, 8765)


def test_a_taken_port_makes_it_probe_upward(tmp_path: Path) -> None:
    base = 20000
    first = preferred_port(tmp_path, base)
    blocker = socket.socket()
    try:
        blocker.bind(("127.0.0.1", first))
        blocker.listen(1)
    except OSError:
        pytest.skip("the preferred test port is in use")
    try:
        sock = bind_loopback(HttpConfig(base_port=base), tmp_path)
        try:
            host, port = sock.getsockname()
            assert host == "127.0.0.1" and first < port < first + 50
        finally:
            sock.close()
        # A fixed port (--http-port N) is taken as is, or not at all.
        with pytest.raises(OSError):
            bind_loopback(HttpConfig(port=first), tmp_path)
    finally:
        blocker.close()


def test_port_zero_takes_any_free_port(tmp_path: Path) -> None:
    sock = bind_loopback(HttpConfig(port=0), tmp_path)
    try:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
    finally:
        sock.close()
