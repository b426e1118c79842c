"""The MCP faces' hold on stdin and stdout (cold.py, then face.py: one claim for both)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
from collections.abc import Iterator

log = logging.getLogger("zocratesd.mcp")


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[int, int]]:
    """(the wire's input fd, its output fd): private duplicates of fd 0 and 1, while fd 0 reads
    /dev/null and fd 1 writes to stderr; restored after. stdout carries MCP frames only: a stray
    print or a child process never writes into the stream. Where fd 0 or 1 cannot be duplicated
    (a parent that closed one), they are used as they are."""
    try:
        wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError as exc:
        log.warning("serving on fds 0 and 1 themselves (%s)", exc)
        yield 0, 1
        return
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)
        # Not closed: a reader thread may still be blocked on wire_in (it is a daemon thread).


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
