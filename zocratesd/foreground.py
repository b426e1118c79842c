"""Whether the daemon is serving something right now: for a background thread that should give
way to it (the engine's import at a cold start, process/give_way.py).

Serving is the event loop working (not waiting in `select()`: process/give_way.py `LoopWatch`
reports that) or a read the loop handed to a worker thread (the store's reader marks its queries:
store/reader.py). The reads count because SQLite hands the GIL back at every row it steps: with
another thread running Python, each row then waits for that thread's switch interval. Measured:
the 1,009-row session list, 3.3 ms alone, took 108 ms beside one busy thread.

Nothing is tracked unless `watched` is set (only while the engine loads), so reads pay one
attribute check the rest of the time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final


class Foreground:
    def __init__(self) -> None:
        self.watched = False
        self.idle = threading.Event()  # set while nothing is served (only while watched)
        self._lock = threading.Lock()
        self._loop_waiting = False
        self._work = 0
        self.loop_thread: int | None = None  # the event loop's thread, once it has reported

    def _update(self) -> None:
        if self._loop_waiting and self._work == 0:
            self.idle.set()
        else:
            self.idle.clear()

    def loop_waiting(self, waiting: bool) -> None:
        """The event loop enters (True) or leaves (False) a wait for I/O."""
        with self._lock:
            self.loop_thread = threading.get_ident()
            self._loop_waiting = waiting
            self._update()

    @contextmanager
    def work(self) -> Iterator[None]:
        """Around work a worker thread does for a request (a store read)."""
        if not self.watched:
            yield
            return
        with self._lock:
            self._work += 1
            self._update()
        try:
            yield
        finally:
            with self._lock:
                self._work -= 1
                self._update()

    def watch(self, on: bool) -> None:
        """Start (True) or stop tracking; stopped, `idle` is left clear."""
        with self._lock:
            self.watched = on
            self._loop_waiting = False
            self.idle.clear()


# The process's one: there is one event loop per daemon process.
FOREGROUND: Final = Foreground()
