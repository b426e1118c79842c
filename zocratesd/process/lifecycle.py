"""The process around the serving: what it does once started (the engine brought up in the
background, heap freeze, warm-up), while it runs (the systemd watchdog) and to decide when to
stop (SIGTERM/SIGINT, idle exit)."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import signal
import time
from collections.abc import AsyncIterator
from typing import Final

import anyio

from zocratesd import deferred
from zocratesd.core.daemon import Daemon
from zocratesd.process.connections import Connections
from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.process.startup import Plan
from zocratesd.process.threads import in_daemon_thread
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


async def bring_up(daemon: Daemon, plan: Plan, scope: anyio.CancelScope, failed: list[BaseException]) -> None:
    """The daemon's engine, after the transports serve (process/boot.py): `Daemon.start` (the
    plan's stages loaded in a daemon thread, which a shutdown does not wait for; tables,
    start-up maintenance; writes wait for it), then the start-up heap frozen and a warm-up turn.
    A failure is logged, put in `failed`, and stops the daemon (cancels `scope`)."""
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        await daemon.start(
            importer=functools.partial(plan.load, loop.call_soon_threadsafe),
            in_thread=functools.partial(in_daemon_thread, name="zocratesd engine import"),
        )
    except Exception as exc:
        log.exception("could not start the engine; stopping")
        failed.append(exc)
        scope.cancel()
        return
    log.info("engine ready in %.0f ms (%s)", (time.monotonic() - started) * 1000, plan.describe() or "imported already")
    freeze_startup_heap()
    if daemon.requests_wait_for_engine:  # its own first run warms ADK up; a warm-up turn now would compete with it
        log.debug("no warm-up turn: a request is waiting for the engine")
        return
    await warm_up()


async def warm_up() -> None:
    """One throw-away turn in the background: what ADK does once, on its first run (beyond the
    imports and schemas the start-up plan preloads), is paid here rather than on the user's first
    turn; unless a request waits for the engine already (`bring_up`)."""
    started = time.monotonic()
    try:
        await deferred.load("zocratesd.engine.runner").warm_up()  # loaded by the plan's ENGINE stage
    except Exception:  # a failed warm-up only means a slower first turn
        log.debug("warm-up turn failed", exc_info=True)
    else:
        log.debug("warmed up in %.0f ms", (time.monotonic() - started) * 1000)


def freeze_startup_heap() -> None:
    """Move everything allocated so far (ADK, SQLAlchemy, pydantic: long-lived) out of the garbage
    collector's sight, and turn the collector on: `zocratesd serve` keeps it off from process
    start until here (cli.py). Without the freeze, the short-lived objects of showing one long
    session trigger full collections that rescan that whole heap; and the collector's passes over
    the start's objects while they are made find almost nothing, so nothing is collected before
    the freeze either (what the imports leave unreachable is small, frozen with the rest). With
    the collector on (a caller that did not turn it off) everything is collected first.
    Measured: bench/PROFILE.md, "Start-up"."""
    if gc.isenabled():
        gc.collect()
    gc.freeze()
    gc.enable()
