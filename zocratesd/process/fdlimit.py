"""The daemon's open-file limit, raised at start.

Desktop sessions start programs with a soft RLIMIT_NOFILE of 1,024 (for the sake of select(),
which cannot watch higher descriptors) under a much higher hard limit (systemd: 524,288), and leave
it to a program that needs more to raise its own soft limit. The daemon never uses select() (asyncio
uses epoll or kqueue), and every connection, to the Unix socket or the HTTP shim, takes a
descriptor: at 1,024, another local user's idle connections to the shim once took them all and the
Unix socket's clients could no longer connect. The shim's connection cap is computed
from the soft limit this leaves (zocratesd/shim/server.py, FD_RESERVE).
"""

from __future__ import annotations

import logging
import resource
from typing import Final

from zocratesd.process.logs import PROCESS_LOGGER

log = logging.getLogger(PROCESS_LOGGER)

# Far beyond what the daemon uses (the shim's cap plus the reserve is under a thousand), and low
# enough that no system refuses it for being absurd.
FD_LIMIT_WANTED: Final = 65536
# macOS refuses a soft limit above OPEN_MAX (10,240) even under an unlimited hard limit.
FD_LIMIT_FALLBACK: Final = 10240


def raise_fd_limit(wanted: int = FD_LIMIT_WANTED) -> int:
    """Raise the soft RLIMIT_NOFILE toward the hard limit (at most `wanted`); never lowers it.
    Returns the soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return soft
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    for target in (ceiling, min(ceiling, FD_LIMIT_FALLBACK)):
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        log.debug("open-file limit raised from %d to %d", soft, target)
        return target
    return soft
