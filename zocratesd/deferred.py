"""The two ways the daemon puts work off its first reply's path, used everywhere it does:

- `load(module)`: a module imported on first use, for the few places a module the first reply
  needs names one it must not load (the store names ADK's session service, the model factory a
  provider's client). The process imports those modules ahead of any use, in the background
  (process/startup.py), so by the time `load` runs it is a lookup in `sys.modules`;
- `in_daemon_thread(func, name)`: a blocking call in a daemon thread of its own, awaited.

Why the first reply must not wait for them, measured: bench/PROFILE.md, "Start-up".
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from types import ModuleType


def load(module: str) -> ModuleType:
    """`module`, imported now unless it was already (the start-up plan imports it ahead)."""
    return importlib.import_module(module)


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
