"""Who listens on Zotero's port: the /proc/net/tcp parser on sample tables (pure), and the verdict."""
# ruff: noqa: E501  (the sample tables' lines are as long as the kernel's)

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

from zocratesd.library._listeners import (
    Listener,
    Ownership,
    listener_owner,
    loopback_targets,
    parse_listeners,
    receivers,
)

# Lines as Linux prints them (x86-64, little-endian): 127.0.0.1:23119 by uid 1000, 0.0.0.0:2024 by
# root, an established connection from 127.0.0.1:23119 (not a listener), then the same port on
# 127.0.0.2 by uid 65534 (a different address: it cannot take a connection to 127.0.0.1).
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:5A4F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 54649 1 000000009c0d9440 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 124 1 00000000e79fbcc3 100 0 0 10 0
   2: 0100007F:5A4F 0100007F:86A2 01 00000000:00000000 00:00000000 00000000 65534        0 0 3 00000000f4e9d468
   3: 0200007F:5A4F 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 54650 1 000000009c0d9441 100 0 0 10 0
"""
# `::` port 23120 (dual-stack) by uid 65534, `::1` port 23119 by uid 1000.
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:5A50 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 54651 1 00000000bf635173 100 0 0 10 0
   1: 00000000000000000000000001000000:5A4F 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 54650 1 000000004935802b 100 0 0 10 0
"""
V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


def test_parses_listen_sockets_only() -> None:
    got = parse_listeners(TCP.splitlines(), byteorder="little")
    assert got == [Listener(V4("127.0.0.1"), 23119, 1000), Listener(V4("0.0.0.0"), 2024, 0), Listener(V4("127.0.0.2"), 23119, 65534)]
    assert parse_listeners(TCP6.splitlines(), byteorder="little") == [Listener(V6("::"), 23120, 65534), Listener(V6("::1"), 23119, 1000)]


def test_big_endian_tables_read_the_same() -> None:
    line = "   0: 7F000001:5A4F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 1 1 0 100 0 0 10 0"
    assert parse_listeners([line], byteorder="big") == [Listener(V4("127.0.0.1"), 23119, 1000)]
    line6 = "   0: 00000000000000000000000000000001:5A4F " + "0" * 32 + ":0000 0A 00000000:00000000 00:00000000 00000000  7 0 1"
    assert parse_listeners([line6], byteorder="big") == [Listener(V6("::1"), 23119, 7)]


@pytest.mark.parametrize("line", [
    "", "garbage", "   0: 0100007F 00000000:0000 0A 0 0 0 1000", "   0: XYZ:5A4F 00000000:0000 0A 0 0 0 1000",
    "   0: 0100007F:5A4F 00000000:0000 0A 0 0 0 notauid", "   0: 0100:5A4F 00000000:0000 0A 0 0 0 1000",
    "   0: 0100007F:5A4F 00000000:0000 0A " + "x" * 600,
])
def test_malformed_lines_are_skipped(line: str) -> None:
    assert parse_listeners([line], byteorder="little") == []


def test_receivers_are_the_listeners_a_connection_can_reach() -> None:
    table = parse_listeners(TCP.splitlines(), byteorder="little") + parse_listeners(TCP6.splitlines(), byteorder="little")
    v4 = loopback_targets("127.0.0.1")
    assert receivers(table, v4, 23119) == [Listener(V4("127.0.0.1"), 23119, 1000)]  # not 127.0.0.2's
    assert receivers(table, v4, 2024) == [Listener(V4("0.0.0.0"), 2024, 0)]  # the wildcard
    assert receivers(table, v4, 23120) == [Listener(V6("::"), 23120, 65534)]  # dual-stack `::` takes IPv4 too
    assert receivers(table, loopback_targets("[::1]"), 23119) == [Listener(V6("::1"), 23119, 1000)]
    assert len(receivers(table, loopback_targets("localhost"), 23119)) == 2
    mapped = [Listener(V6("::ffff:127.0.0.1"), 23119, 5)]
    assert receivers(mapped, v4, 23119) == mapped and receivers(mapped, loopback_targets("::1"), 23119) == []


def write_proc(tmp_path: Path, tcp: str | None, tcp6: str | None = None) -> Path:
    for name, text in (("tcp", tcp), ("tcp6", tcp6)):
        if text is not None:
            (tmp_path / name).write_text(text)
    return tmp_path


def test_verdicts(tmp_path: Path) -> None:
    proc = write_proc(tmp_path, TCP, TCP6)
    assert listener_owner("127.0.0.1", 23119, proc_net=proc, uid=1000) == Ownership("mine", (1000,))
    assert listener_owner("127.0.0.1", 23119, proc_net=proc, uid=1001) == Ownership("foreign", (1000,))
    assert listener_owner("127.0.0.1", 23120, proc_net=proc, uid=1000) == Ownership("foreign", (65534,))
    assert listener_owner("127.0.0.1", 9999, proc_net=proc, uid=1000) == Ownership("none")
    # localhost reaches both 127.0.0.1 and ::1: one foreign listener among them is enough to refuse
    mixed = TCP6.replace(" 1000  ", " 4242  ")
    assert listener_owner("localhost", 23119, proc_net=write_proc(tmp_path, TCP, mixed), uid=1000) == Ownership("foreign", (4242,))
    assert listener_owner("127.0.0.1", 23119, proc_net=tmp_path / "nothing-here", uid=1000) == Ownership("unknown")
    only4 = tmp_path / "only4"
    only4.mkdir()
    assert listener_owner("127.0.0.1", 23119, proc_net=write_proc(only4, TCP), uid=1000).verdict == "mine"  # IPv6 off


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
def test_a_real_listener_of_ours_is_mine() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert listener_owner("127.0.0.1", port) == Ownership("mine", (os.getuid(),))
        assert listener_owner("127.0.0.1", port, uid=os.getuid() + 1).verdict == "foreign"
    assert listener_owner("127.0.0.1", port).verdict == "none"
