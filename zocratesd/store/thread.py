"""One thread per SQLite connection: the calls made on it run there, one at a time, in order.

The reader and the writer each own one connection and used anyio's `to_thread.run_sync` with a
capacity limiter of 1 to keep its calls off the event loop and one at a time. Through anyio's
shared pool such a call cost about twice the CPU (a checkpoint, the limiter, a context copy, the
pool's bookkeeping) of a call through a thread of the connection's own, fed by a
`queue.SimpleQueue` and answering with `call_soon_threadsafe` (bench/PROFILE.md section 9). A turn
makes 11 such calls.

What the callers keep from `to_thread.run_sync`: a caller already cancelled does not start its
call; once started (queued) the caller waits for its end even when cancelled, so a write it began
is finished and its outcome settled before the cancellation goes on. What differs: a queued call
waits behind the calls before it instead of behind a limiter, so a caller cancelled while queued
still waits for its own call (each is milliseconds).

The thread starts with the first call and ends when idle for IDLE_EXIT_S, or at `close()` once the
calls made before it are done: a store that was closed or dropped holds no thread for long.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

T = TypeVar("T")

# An idle thread ends after this long; the next call starts another (cheap, once).
IDLE_EXIT_S = 10.0

_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class ConnectionThread:
    """Runs a connection's calls in a thread of its own (see the module docstring)."""

    def __init__(self, name: str):
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _thread; puts happen under it
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the thread, after every call made before it."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._jobs.put((fn, args, loop, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
        with anyio.CancelScope(shield=True):  # started: its end is awaited, as said above
            result = await future
        return result

    def close(self) -> None:
        """Let the thread end once the calls made so far are done (a later call starts another)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)

    @property
    def alive(self) -> bool:
        with self._lock:
            return self._thread is not None

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            try:
                job = jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                job = None
            if job is None:  # idle, or closed: end unless a call came in meanwhile
                with self._lock:
                    if jobs.empty():
                        self._thread = None
                        return
                continue
            fn, args, loop, future = job
            try:
                result, exc = fn(*args), None
            except BaseException as raised:  # handed to the caller, as anyio's worker does
                result, exc = None, raised
            del job, fn, args  # nothing of a call is kept while the thread waits for the next
            try:
                loop.call_soon_threadsafe(_settle, future, result, exc)
            except RuntimeError:  # the caller's loop is closed: nobody waits for this answer
                pass
            del future, result, exc
