"""Another local user in tests: a Python script run as uid 65534 (nobody), which only root can start.

The script's modules are imported before the switch of uid: the interpreter's own files may be
unreadable as nobody (a Python under /root), and socket's getaddrinfo loads the idna codec lazily.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another user (uid 65534) needs root to switch to")


def as_nobody(script: str, *args: str, before: str = "", **popen: Any) -> subprocess.Popen[str]:
    """`script` (with `sys.argv[1:]` = `args`) in a new interpreter as uid 65534, text pipes on stdout
    and stderr; `before` runs as root first (e.g. raising a limit)."""
    prelude = (
        "import encodings.idna, json, os, resource, socket, sys, threading, time\n"
        + before
        + f"\nos.setgroups([])\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n"
    )
    return subprocess.Popen([sys.executable, "-c", prelude + script, *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


@contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`proc`, killed (by its pid) and waited for if it still runs when the block ends."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
