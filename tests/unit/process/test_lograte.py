"""The daemon's log cannot be flooded: repeated warnings are rate-limited (zocratesd/process/lograte.py),
on every handler `setup_logging` installs (stderr and the rotating file)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd.process import logs
from zocratesd.process.lograte import LOG_BURST, LOG_TOTAL, RateLimitFilter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


Logged = tuple[logging.Logger, io.StringIO, io.StringIO]


@pytest.fixture
def logged(clock: Clock) -> Iterator[Logged]:
    """A logger with two handlers sharing one filter, as setup_logging installs it."""
    logger = logging.getLogger("zocratesd.test_lograte")
    logger.propagate = False
    rate = RateLimitFilter(burst=3, window_s=60, total=20, clock=clock)
    outs = (io.StringIO(), io.StringIO())
    handlers = [logging.StreamHandler(out) for out in outs]
    for h in handlers:
        h.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        h.addFilter(rate)
        logger.addHandler(h)
    try:
        yield logger, outs[0], outs[1]
    finally:
        for h in handlers:
            logger.removeHandler(h)
        logger.propagate = True


def lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.startswith(("WARNING", "ERROR", "INFO"))]


def test_a_repeated_warning_is_logged_a_few_times_then_once_said_to_be_suppressed(logged: Logged, clock: Clock) -> None:
    logger, first, second = logged
    for port in range(1000):
        logger.warning("refused a connection from port %d", port)
    got = lines(first)
    assert got[:3] == [f"WARNING refused a connection from port {p}" for p in range(3)]
    assert len(got) == 4 and "not logged for up to 60 s" in got[3] and got[3].startswith("WARNING refused a connection from port 3")
    assert lines(second) == got  # both handlers, one decision per record

    clock.now += 61  # a new window: the next one says how many were dropped
    logger.warning("refused a connection from port %d", 5000)
    last = lines(first)[-1]
    assert last.startswith("WARNING refused a connection from port 5000") and "996 similar message(s) were not logged" in last


def test_the_suppression_notice_drops_the_traceback(logged: Logged) -> None:
    logger, out, _ = logged
    for _ in range(50):
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            logger.exception("socket.accept() out of system resource")
    text = out.getvalue()
    assert text.count("Traceback (most recent call last)") == 3
    assert text.count("socket.accept() out of system resource") == 4


def test_distinct_messages_are_capped_together(logged: Logged) -> None:
    logger, out, _ = logged
    for i in range(500):
        logger.error(f"connection {i} failed")  # an f-string: every message its own template
    got = lines(out)
    assert len(got) == 21 and "too many warnings" in got[-1]


def test_info_and_debug_pass_untouched(logged: Logged) -> None:
    logger, out, _ = logged
    logger.setLevel(logging.DEBUG)
    for i in range(100):
        logger.info("turn %d done", i)
    assert len(lines(out)) == 100


def test_the_number_of_remembered_messages_is_bounded(clock: Clock) -> None:
    rate = RateLimitFilter(max_keys=50, total=10**9, clock=clock)
    for i in range(1000):
        rate.filter(logging.LogRecord("x", logging.WARNING, __file__, 1, f"message {i}", None, None))
    assert len(rate._windows) == 50


def test_setup_logging_keeps_the_log_file_small_under_a_flood(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        logs.setup_logging(tmp_path, "INFO")
        logging.getLogger("zocratesd.start").info("serving %s", "here")
        flood = logging.getLogger("uvicorn.error")
        for _ in range(20_000):
            flood.warning("Invalid HTTP request received.")
        for i in range(20_000):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logging.getLogger("asyncio").error(f"Fatal error on transport {i}", exc_info=True)
        for h in root.handlers:
            h.flush()
        log_file = tmp_path / "zocrates-data" / "zocratesd.log"
        text = log_file.read_text()
        assert "serving here" in text  # the history is still there: nothing rotated away
        assert not list(log_file.parent.glob("zocratesd.log.*"))
        assert log_file.stat().st_size < 64 * 1024
        assert text.count("Invalid HTTP request received.") == LOG_BURST + 1
        assert text.count("Fatal error on transport") <= LOG_TOTAL + 1
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        root.setLevel(saved[0])
        for h in saved[1]:
            root.addHandler(h)
        capsys.readouterr()
