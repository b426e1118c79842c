"""A log that cannot be flooded: repeated warnings and errors are rate-limited.

Another local user can make the daemon warn without a token (a malformed HTTP request, a refused
Unix connection), and an error storm repeats one traceback as fast as the loop turns: 5,000 bad
requests, or asyncio failing to accept, rotated the whole log history (25 MiB) away in seconds.
So a message at WARNING or above is logged at most `burst` times per `window_s`,
counted by its logger and its *template* (the format string before its arguments are filled in,
so "refused a connection from uid %s" is one message whatever the uid):

- the first message dropped in a window is logged once more, shortened to one line (no traceback)
  and marked, so the log says that similar lines are missing from here on;
- the first one logged after the window carries the count of those that were dropped;
- all templates together pass at most `total` per window, for code that formats its own messages
  (an f-string makes every message its own template).

INFO and DEBUG pass untouched: nothing from outside the user's account can make the daemon log them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

import msgspec

# At most this many of one message per window: a real problem shows itself in the first few.
LOG_BURST: Final = 10
LOG_WINDOW_S: Final = 60.0
# All WARNING+ messages together, per window: even a storm of distinct messages writes at most
# ~100 lines a minute, so the log's 25 MiB keep days of history, not seconds.
LOG_TOTAL: Final = 100
# Templates remembered (least recently seen forgotten first): bounded memory whatever is logged.
LOG_MAX_KEYS: Final = 1024

# Set on a record once decided: the same record passes every handler (stderr, the file) and must be
# counted and annotated once.
_DECIDED: Final = "_zocrates_rate_limited"

_Key = tuple[str, int, str]


class _Window(msgspec.Struct):
    ends: float
    passed: int = 0
    dropped: int = 0
    noticed: bool = False  # the line saying that what follows is dropped has been logged


class RateLimitFilter(logging.Filter):
    """Attach one instance to every handler (`install`): a handler-level filter sees every record,
    propagated ones included, which a logger's filter does not."""

    def __init__(
        self,
        *,
        burst: int = LOG_BURST,
        window_s: float = LOG_WINDOW_S,
        total: int = LOG_TOTAL,
        max_keys: int = LOG_MAX_KEYS,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.burst, self.window_s, self.total, self.max_keys, self.level = burst, window_s, total, max_keys, level
        self.clock = clock
        self._lock = threading.Lock()  # ADK and the store's threads log too
        self._windows: dict[_Key, _Window] = {}  # least recently seen first
        self._all = _Window(ends=0.0)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        decided = record.__dict__.get(_DECIDED)
        if decided is None:
            with self._lock:
                decided = self._decide(record, self.clock())
            record.__dict__[_DECIDED] = decided
        return bool(decided)

    def _decide(self, record: logging.LogRecord, now: float) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        window = self._windows.pop(key, None)
        if window is None or now >= window.ends:
            if window is not None and window.dropped:
                _append(record, f"{window.dropped} similar message(s) were not logged in the {self.window_s:g} s before")
            window = _Window(ends=now + self.window_s)
        self._windows[key] = window  # now the most recently seen
        if len(self._windows) > self.max_keys:
            del self._windows[next(iter(self._windows))]
        if now >= self._all.ends:
            self._all = _Window(ends=now + self.window_s)
        if self._all.passed >= self.total:
            if self._all.noticed:
                window.dropped += 1
                return False
            self._all.noticed = True
            _shorten(record, f"too many warnings: no more are logged for up to {self.window_s:g} s")
            return True
        if window.passed < self.burst:
            window.passed += 1
            self._all.passed += 1
            return True
        if window.noticed:
            window.dropped += 1
            return False
        window.noticed = True
        self._all.passed += 1
        _shorten(record, f"logged too often: similar messages are not logged for up to {self.window_s:g} s")
        return True


def _append(record: logging.LogRecord, note: str) -> None:
    # Appended to the template, so the record's arguments still fill it (the note holds no '%').
    record.msg = f"{record.msg} [{note}]"


def _shorten(record: logging.LogRecord, note: str) -> None:
    """The first record dropped becomes one line without its traceback, saying what follows."""
    record.exc_info = None
    record.exc_text = None
    record.stack_info = None
    _append(record, note)


def install(logger: logging.Logger | None = None) -> RateLimitFilter:
    """Rate-limit every handler of `logger` (the root logger by default) with one shared filter."""
    rate = RateLimitFilter()
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(rate)
    return rate
