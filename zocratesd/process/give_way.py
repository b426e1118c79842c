"""Serving first: while the engine's modules load in their own thread, that thread gives way
whenever the daemon is serving, so the first requests of a cold start get the CPU to themselves.

Why: the import thread and the event loop are both CPU-bound Python under one GIL. Left alone they
share it, and the reads a client sends right after start (`initialize`, then `session/list` of
1,000 sessions: ~13 ms of work) took 40-100 ms, while the import thread ran uvicorn's, Starlette's
and then ADK's module bodies in between (issue 22: cold start to first session list <= 350 ms).
A read needs none of those modules; only a write does, and a write that waits for the engine
leaves the loop idle, so the import then runs at full speed.

How: the loop runs on a `LoopWatch`, a selector that reports to `zocratesd.foreground` when the
loop waits for I/O (the store's reader reports its queries there too). The import thread installs
`GiveWay`, a finder first in `sys.meta_path` that finds nothing: before each module it imports, it
waits until nothing is served. Bounded: one wait at most MAX_WAIT_EACH_S, all of them together
at most MAX_WAIT_TOTAL_S, so a flood of reads delays the engine (and a first turn) by no more than
that, and none while the loop's thread is itself importing (it may need a module lock the
import thread holds). A module already being executed is not interrupted: the switch interval
(process/lifecycle.py) still applies inside one module's body.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import selectors
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Final

from zocratesd.foreground import FOREGROUND, Foreground

if TYPE_CHECKING:
    # asyncio (~15 ms) only where a loop is made: `zocratesd mcp`'s cold face uses GiveWay with none.
    import asyncio

# One wait is cut off here: a read that keeps the daemon busy this long (GET of a 5,000-event
# session is ~50 ms) gets no more priority than that over the engine.
MAX_WAIT_EACH_S: Final = 0.1
# All waits of one start together: the most a cold start's first turn can lose to reads. A start
# with nothing to serve loses nothing.
MAX_WAIT_TOTAL_S: Final = 0.5
# While it waits, how often the import thread looks whether the loop's thread is importing.
LOOP_IMPORT_CHECK_S: Final = 0.005


class LoopWatch(selectors.DefaultSelector):
    """The event loop's selector, which also reports when the loop waits for I/O.

    Only while `foreground.watched` is set (the engine loading) does `select()` do more than its
    base. A `select(0)` (callbacks are ready to run) is no wait, so it is not reported."""

    def __init__(self, foreground: Foreground = FOREGROUND) -> None:
        super().__init__()
        self.foreground = foreground
        self.thread = threading.get_ident()  # the loop's: asyncio makes its selector in the loop's thread

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        foreground = self.foreground
        if not foreground.watched or timeout == 0:
            return super().select(timeout)
        foreground.loop_waiting(True)
        try:
            return super().select(timeout)
        finally:
            foreground.loop_waiting(False)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch] = weakref.WeakKeyDictionary()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An asyncio loop on a `LoopWatch` (the daemon's, cli.py); `watch_of` finds its watch."""
    import asyncio

    watch = LoopWatch()
    loop = asyncio.SelectorEventLoop(watch)
    _watches[loop] = watch
    return loop


def watch_of(loop: asyncio.AbstractEventLoop) -> LoopWatch | None:
    """The watch of a loop made by `new_event_loop`; None for any other loop (nothing gives way)."""
    return _watches.get(loop)


class GiveWay(importlib.abc.MetaPathFinder):
    """A finder that finds nothing: in its own thread, it first waits until `idle` is set (nothing
    is served), and never while `loop_thread()` is itself importing. The daemon's engine import
    uses it (`giving_way`), and so does `zocratesd mcp`'s import of the SDK (mcp/__init__.py)."""

    def __init__(
        self, idle: threading.Event, *, loop_thread: Callable[[], int | None] = lambda: None,
        each_s: float = MAX_WAIT_EACH_S, total_s: float = MAX_WAIT_TOTAL_S,
    ):
        self._idle = idle
        self._loop_thread = loop_thread
        self._thread = threading.get_ident()
        self._each_s = each_s
        self._total_s = total_s
        self.left_s = total_s  # what is left of the total

    @property
    def waited_s(self) -> float:
        """How long it has waited so far, all waits together (the log reports it)."""
        return self._total_s - self.left_s

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if self.left_s > 0 and threading.get_ident() == self._thread and not self._idle.is_set():
            started = time.monotonic()
            until = started + min(self._each_s, self.left_s)
            # Never while the loop's thread is importing: it may be waiting for a module this
            # thread holds the lock of (uvicorn imports its lifespan class on the loop, say), and
            # would wait for us as we wait for it, until the cut-off.
            while not self._idle.wait(LOOP_IMPORT_CHECK_S) and time.monotonic() < until:
                if _importing(self._loop_thread()):
                    break
            self.left_s -= time.monotonic() - started
        return None


def _importing(thread: int | None) -> bool:
    """Whether `thread` is inside an import (any frame of importlib's own on its stack)."""
    frame = sys._current_frames().get(thread) if thread is not None else None
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def giving_way(watch: LoopWatch | None, *, total_s: float = MAX_WAIT_TOTAL_S) -> Iterator[GiveWay | None]:
    """In the calling thread, import while nothing is served (the module docstring); nothing
    changes if `watch` is None. `sys.meta_path` is replaced, never changed in place: another
    thread may be iterating over it in the middle of an import."""
    if watch is None:
        yield None
        return
    foreground = watch.foreground
    # Known before the loop first waits: a loop busy from the start (its first request importing
    # what the first model build needs) is never seen waiting, and the import thread would wait
    # for it while it waited for the import lock the import thread held (~0.5 s: issue 31).
    foreground.loop_thread = watch.thread
    finder = GiveWay(foreground.idle, loop_thread=lambda: foreground.loop_thread, total_s=total_s)
    foreground.watch(True)
    sys.meta_path = [finder, *sys.meta_path]
    try:
        yield finder
    finally:
        sys.meta_path = [f for f in sys.meta_path if f is not finder]
        foreground.watch(False)
