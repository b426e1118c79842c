"""Who owns the TCP listener on a loopback port (Linux): Zotero's local API is trusted only when it is
the user's own process, never another local user's squatting the port while Zotero is closed.

`/proc/net/tcp` and `/proc/net/tcp6` list every socket of this network namespace with the uid that
created it (proc(5); net/ipv4/tcp_ipv4.c `get_tcp4_sock`, which prints `sock_i_uid`). The parser
(`parse_listeners`, `receivers`) is pure: text in, listeners out, tested on sample tables.
`listener_owner` reads the tables; where they do not exist (macOS, Windows, BSD) it says "unknown"
and the caller decides what that is worth.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PROC_NET = Path("/proc/net")
# st column of a socket in LISTEN state (include/net/tcp_states.h: TCP_LISTEN = 10).
TCP_LISTEN = 0x0A
# The tables are read line by line; one this long is not the kernel's format and is skipped.
MAX_LINE_CHARS = 512

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Verdict = Literal["mine", "foreign", "none", "unknown"]


@dataclass(frozen=True)
class Listener:
    address: IPAddress
    port: int
    uid: int


@dataclass(frozen=True)
class Ownership:
    """`mine`: every listener that could take a connection to the port is the user's; `foreign`:
    at least one belongs to another uid (`uids`); `none`: nothing listens there; `unknown`: this
    system has no /proc/net tables (or they could not be read)."""

    verdict: Verdict
    uids: tuple[int, ...] = ()


def _address(hex_addr: str, byteorder: Literal["little", "big"]) -> IPAddress:
    # The kernel prints each 32-bit word of the address as a host-order integer (%08X), so on a
    # little-endian machine 127.0.0.1 reads 0100007F: convert word by word back to network order.
    if len(hex_addr) not in (8, 32):
        raise ValueError(hex_addr)
    raw = b"".join(int(hex_addr[i : i + 8], 16).to_bytes(4, byteorder) for i in range(0, len(hex_addr), 8))
    return ipaddress.IPv4Address(raw) if len(raw) == 4 else ipaddress.IPv6Address(raw)


def parse_listeners(lines: Iterable[str], *, byteorder: Literal["little", "big"] | None = None) -> list[Listener]:
    """The LISTEN sockets of a `/proc/net/tcp` or `/proc/net/tcp6` table (header and malformed
    lines skipped). `byteorder` is the kernel's (this machine's unless a test says otherwise)."""
    order: Literal["little", "big"] = byteorder or ("little" if sys.byteorder == "little" else "big")
    out: list[Listener] = []
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            continue
        fields = line.split()
        # sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
        if len(fields) < 8 or not fields[0].endswith(":"):
            continue
        try:
            if int(fields[3], 16) != TCP_LISTEN:
                continue
            hex_addr, hex_port = fields[1].split(":")
            out.append(Listener(_address(hex_addr, order), int(hex_port, 16), int(fields[7])))
        except ValueError:
            continue
    return out


def receivers(listeners: Iterable[Listener], targets: Sequence[IPAddress], port: int) -> list[Listener]:
    """The listeners a connection to one of `targets` on `port` could reach: bound to that address,
    to the wildcard of its family, or (for IPv4) to IPv6's `::` (dual-stack unless IPV6_V6ONLY,
    which the table does not show: counted, to be safe) or the v4-mapped address."""
    out = []
    for lst in listeners:
        if lst.port != port:
            continue
        for t in targets:
            if lst.address.version == t.version and (lst.address == t or lst.address.is_unspecified):
                out.append(lst)
                break
            if t.version == 4 and isinstance(lst.address, ipaddress.IPv6Address) and (
                lst.address.is_unspecified or lst.address.ipv4_mapped == t
            ):
                out.append(lst)
                break
    return out


def loopback_targets(host: str) -> list[IPAddress]:
    """The addresses a client connecting to `host` (a loopback name or literal) may reach."""
    host = host.strip("[]")
    if host == "localhost":
        return [ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1")]
    return [ipaddress.ip_address(host)]


def listener_owner(host: str, port: int, *, proc_net: Path = PROC_NET, uid: int | None = None) -> Ownership:
    """Whose process listens on `host:port` (see `Ownership`); `uid` defaults to ours."""
    me = os.getuid() if uid is None else uid
    targets = loopback_targets(host)
    found: list[Listener] = []
    tables = 0
    for name in ("tcp", "tcp6"):
        try:
            with open(proc_net / name, encoding="ascii", errors="replace") as f:
                found += receivers(parse_listeners(f), targets, port)
            tables += 1
        except FileNotFoundError:
            continue  # no /proc, or IPv6 disabled (tcp6 absent)
        except OSError:
            return Ownership("unknown")
    if not tables:
        return Ownership("unknown")
    if not found:
        return Ownership("none")
    foreign = tuple(sorted({lst.uid for lst in found if lst.uid != me}))
    return Ownership("foreign", foreign) if foreign else Ownership("mine", (me,))
