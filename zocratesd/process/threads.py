"""A blocking call in a daemon thread of its own, awaited: how the daemon imports its engine off
the event loop (process/lifecycle.py) without a shutdown waiting for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


async def in_daemon_thread(func: Callable[[], None], name: str) -> None:
    """Run the blocking `func` in a daemon thread of its own and wait for it (its exception raised
    here). Unlike a worker thread of anyio's (`to_thread.run_sync`), a cancelled wait returns at
    once, and the process does not wait for the thread at exit: a SIGTERM during the engine's
    import (seconds on a loaded machine) stops the daemon promptly; the import is left behind."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def report(exc: BaseException | None) -> None:
        if done.done():  # the wait was cancelled: nobody is listening
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def run() -> None:
        failure: BaseException | None = None
        try:
            func()
        except BaseException as exc:  # handed to the waiting task, which raises it
            failure = exc
        try:
            loop.call_soon_threadsafe(report, failure)
        except RuntimeError:  # the loop is closed: the daemon stopped while we ran
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    await done
