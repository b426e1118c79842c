"""The process around the serving: what it does once started (warm-up, heap freeze), while it runs
(the systemd watchdog) and to decide when to stop (SIGTERM/SIGINT, idle exit)."""

from __future__ import annotations

import gc
import logging
import signal
import time
from collections.abc import AsyncIterator
from typing import Final

import anyio

from zocratesd.process.connections import Connections
from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.service_manager.notify import Notifier

log = logging.getLogger(PROCESS_LOGGER)

# The signals that stop the daemon cleanly: a service manager's stop, and Ctrl-C in a terminal.
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
# On SIGTERM, requests in flight get this long to finish before they are cancelled. systemd's
# default TimeoutStopSec is 90 s; 10 s keeps `zocratesd stop` snappy and still lets any write end.
SHUTDOWN_GRACE_S: Final = 10.0


async def stop_on_signal(signals: AsyncIterator[signal.Signals], scope: anyio.CancelScope) -> None:
    """Cancel `scope` on the first stop signal from `signals` (an open_signal_receiver)."""
    async for signum in signals:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        scope.cancel()
        return


async def stop_when_idle(conns: Connections, seconds: float, scope: anyio.CancelScope) -> None:
    """Cancel `scope` once no connection has been open for `seconds` (socket activation only:
    the service manager starts a daemon again on the next connection)."""
    await conns.wait_idle_for(seconds)
    scope.cancel()  # same step as the idle check: no accept can slip in between
    log.info("no connection for %g s; exiting (the service manager starts a daemon on the next one)", seconds)


async def watchdog(notifier: Notifier, interval_s: float) -> None:
    """WATCHDOG=1 from the event loop itself: if the loop hangs, the pings stop and systemd restarts us."""
    while True:
        notifier.watchdog()
        await anyio.sleep(interval_s)


async def warm_up() -> None:
    """Pay ADK's lazy imports now, in the background, not on the user's first turn."""
    from zocratesd.engine import warm_up as warm_up_engine

    started = time.monotonic()
    try:
        await warm_up_engine()
    except Exception:  # a failed warm-up only means a slower first turn
        log.debug("warm-up turn failed", exc_info=True)
    else:
        log.debug("warmed up in %.0f ms", (time.monotonic() - started) * 1000)


def freeze_startup_heap() -> None:
    """Move everything allocated so far (ADK, SQLAlchemy, pydantic: ~100 MiB of long-lived
    objects) out of the garbage collector's sight. Without it, the ~300k short-lived objects of
    showing one long session trigger full collections that rescan that whole heap: measured
    185 ms -> 122 ms for a 5000-event session (bench/bench_store.py)."""
    gc.collect()
    gc.freeze()
