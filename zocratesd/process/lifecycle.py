"""The process around the serving: what it does once started (the engine brought up in the
background, heap freeze, warm-up), while it runs (the systemd watchdog) and to decide when to
stop (SIGTERM/SIGINT, idle exit)."""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import anyio

from zocratesd.process.connections import Connections
from zocratesd.process.give_way import giving_way, watch_of
from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.process.threads import in_daemon_thread
from zocratesd.service_manager.notify import Notifier

if TYPE_CHECKING:
    from zocratesd.core.daemon import Daemon

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


# While the engine's modules are imported in their own thread, the event loop (answering the first
# requests) waits for the GIL up to Python's switch interval (5 ms) each time it wants it back
# after a system call; a reply takes a few of those. At 0.5 ms those waits shrink tenfold; the
# import thread only hands the GIL over more often. Restored once the engine is up.
LOADING_SWITCH_INTERVAL_S: Final = 0.0005

# Test seams: when set, the engine's import (in its thread) does not start until the named file
# exists, so a test can see the daemon serve while its engine is not loaded, and stop it in the
# middle of a slow import (tests/e2e/test_cold_start.py); the same for the wire stack (below)
# and with it everything after it. Only tests set them.
HOLD_ENGINE_ENV: Final = "ZOCRATES_TEST_HOLD_ENGINE_UNTIL"
HOLD_WIRE_ENV: Final = "ZOCRATES_TEST_HOLD_WIRE_UNTIL"
_HOLD_POLL_S: Final = 0.02

# The wire stack: pydantic, the wire models and the ACP methods (and pydantic's plugin loader,
# which its first validator imports: importlib.metadata). The socket serves before it is loaded:
# rpc/handshake.py answers the handshake meanwhile and holds the rest (~40% of the work before a cold
# start's first reply, bench/PROFILE.md §13).
WIRE_MODULES: Final = ("zocratesd.rpc.acp", "pydantic.plugin._loader")


@dataclass
class Preload:
    """Modules something needs before it can serve, imported in the engine's import thread before
    ADK, so the first reply on the Unix socket does not wait for them: the wire stack
    (`WIRE_MODULES`), the HTTP shim's uvicorn and Starlette (shim/server.py); `done` is set on the
    event loop once they are. One thread imports them all, one after the other: two threads
    importing the same packages (ADK imports Starlette too) could each find the other's module
    half-initialized."""

    name: str  # in the log's timings
    modules: tuple[str, ...]
    done: anyio.Event = field(default_factory=anyio.Event)  # made on the event loop
    hold_env: str | None = None  # a test seam: held until the file it names exists


def _import_engine(preloads: Sequence[Preload], loop: asyncio.AbstractEventLoop, timings: dict[str, float]) -> None:
    """The import thread's work: each of `preloads` in turn (its `done` set), then `import_engine`,
    first held while a test says so; each module only while the event loop is idle, within
    bounds (process/give_way.py). `timings` gets the parts' durations for the log."""
    with giving_way(watch_of(loop)) as finder:
        _import_all(preloads, loop, timings)
    if finder is not None:
        timings["waits for the loop"] = finder.waited_s


def _hold(env: str, what: str) -> None:
    hold = os.environ.get(env)
    if hold:
        log.warning("%s is set: the %s waits for %s", env, what, hold)
        while not os.path.exists(hold):
            time.sleep(_HOLD_POLL_S)


def _import_all(preloads: Sequence[Preload], loop: asyncio.AbstractEventLoop, timings: dict[str, float]) -> None:
    for preload in preloads:
        if preload.hold_env:
            _hold(preload.hold_env, preload.name)
        started = time.monotonic()
        for name in preload.modules:
            importlib.import_module(name)
        timings[preload.name] = time.monotonic() - started
        try:
            loop.call_soon_threadsafe(preload.done.set)
        except RuntimeError:  # the loop is closed: the daemon stopped meanwhile
            return
    from zocratesd.core.daemon import import_engine

    _hold(HOLD_ENGINE_ENV, "engine")
    started = time.monotonic()
    import_engine()
    timings["imports"] = time.monotonic() - started


async def bring_up(
    daemon: Daemon, scope: anyio.CancelScope, failed: list[BaseException], preloads: Sequence[Preload] = ()
) -> None:
    """The daemon's engine, after the transports serve (process/boot.py, step 5): `Daemon.start`
    (`preloads`' modules, then ADK, imported in a daemon thread, which a shutdown does not wait
    for; tables, start-up maintenance; writes wait for it), then the start-up heap frozen and a
    warm-up turn. A failure is logged, put in `failed`, and stops the daemon (cancels `scope`)."""
    started = time.monotonic()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, LOADING_SWITCH_INTERVAL_S))
    timings: dict[str, float] = {}
    try:
        await daemon.start(
            importer=functools.partial(_import_engine, preloads, asyncio.get_running_loop(), timings),
            in_thread=functools.partial(in_daemon_thread, name="zocratesd engine import"),
        )
    except Exception as exc:
        log.exception("could not start the engine; stopping")
        failed.append(exc)
        scope.cancel()
        return
    finally:
        sys.setswitchinterval(interval)
    parts = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in timings.items())
    log.info("engine ready in %.0f ms (%s)", (time.monotonic() - started) * 1000, parts or "imported already")
    freeze_startup_heap()
    if daemon.writes_waiting:  # its own first run warms ADK up; a warm-up turn now would compete with it
        log.debug("no warm-up turn: a request is waiting for the engine")
        return
    await warm_up()


async def warm_up() -> None:
    """One throw-away turn in the background: what ADK does once, on its first run (beyond the
    imports and schemas `Daemon.start` preloads: ~10-25 ms of a first turn), is paid here rather
    than on the user's first turn; unless a request waits for the engine already (`bring_up`)."""
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
    objects) out of the garbage collector's sight, and turn the collector on: `zocratesd serve`
    keeps it off from process start until here (cli.py). Without the freeze, the ~300k
    short-lived objects of showing one long session trigger full collections that rescan that
    whole heap: measured 185 ms -> 122 ms for a 5000-event session (bench/bench_store.py).

    Why off until here: the ~300k objects a start allocates all live as long as the daemon, and
    the collector's passes over them while they are made find almost nothing. Measured (CPU of
    one thread, min of 4 runs): the engine's imports 1,239 ms, then a collection before the freeze
    117 ms, with it; 923 ms and 0 without (RSS after: 122.7 vs 123.5 MiB). In instructions
    (callgrind, spawn to first turn) the collector was 0.43 G of 7.0 G; it costs more time than
    that share says, as its passes walk the whole heap through the caches. So nothing is
    collected before the freeze either: what the imports leave unreachable (~2,300 objects,
    under 1 MiB) is frozen with the rest. With the collector on (a caller that did not turn it
    off) everything is collected first, as before."""
    if gc.isenabled():
        gc.collect()
    gc.freeze()
    gc.enable()
