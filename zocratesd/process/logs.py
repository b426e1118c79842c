"""Where the daemon's logs go: stderr and a rotating file beside the store, never stdout (stdio
carries frames)."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Final

from zocratesd import locations
from zocratesd.logtext import EscapingFormatter
from zocratesd.process import lograte

# The process layer logs as "zocratesd" (`INFO zocratesd: zocratesd 0.1.0 serving ...`); the
# core's and the faces' modules log under their own dotted names.
PROCESS_LOGGER: Final = "zocratesd"
LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The log file beside the store: 5 files of 5 MiB keep weeks of a daemon's life in 25 MiB.
LOG_FILE_BYTES: Final = 5 * 1024 * 1024
LOG_FILE_COUNT: Final = 5

log = logging.getLogger(PROCESS_LOGGER)


def setup_logging(data_dir: Path, level: str) -> None:
    """Logs go to stderr and to `zocrates-data/zocratesd.log`; never to stdout (stdio carries frames)."""
    root = logging.getLogger()
    root.setLevel(level)
    # Text from outside (models, libraries, clients) can reach a record through a library's own
    # logging (ADK's tracebacks): escape control characters and indent continuation lines, so no
    # record can forge another line.
    fmt = EscapingFormatter(LOG_FORMAT)
    for h in list(root.handlers):
        root.removeHandler(h)
    path = locations.state_dir(data_dir) / locations.LOG_NAME
    handlers: list[logging.Handler] = []
    failure: OSError | None = None
    try:
        locations.ensure_private_dir(locations.state_dir(data_dir))
        handlers.append(logging.handlers.RotatingFileHandler(path, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_COUNT))
    except OSError as exc:  # a read-only data dir still gets a daemon, logging to stderr only
        failure = exc
    # A daemon started in the background (`zocratesd mcp`, `zocratesd stdio`, the client library:
    # rpc/pump.py) has its stderr appended to this very file, so that what it says before logging
    # is set up is kept there; a stderr handler as well would write every record into it twice.
    if not (handlers and _is_file(sys.stderr, path)):
        handlers.insert(0, logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)
    if failure is not None:
        log.warning("cannot write the log file: %s", failure)
    lograte.install(root)  # repeated warnings are rate-limited: nobody can flood the log (process/lograte.py)


def _is_file(stream: object, path: Path) -> bool:
    """Whether `stream` writes to the file at `path` (the same inode), as far as can be told."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        mine, theirs = os.fstat(fd), os.stat(path)
    except (AttributeError, OSError, ValueError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
