"""`zocratesd`, as its console script runs it, with the test hooks a daemon test asks for injected.

Production code reads no test variable: a test that must hold a stage of the daemon's start, or
its embedding child, starts the daemon through this module instead (`DaemonProc(...,
command=TEST_ENTRY)`, tests/daemonproc.py) and names what it wants in the daemon's environment:
- `HOLD_WIRE_ENV`, `HOLD_ENGINE_ENV`: that stage of the start-up plan (process/startup.py) does not
  load until the file named exists, so a test sees the daemon serve without it, or stops it mid-way;
- `EMBED_HOLD_ENV`: the embedding child sleeps this many seconds before each request;
- `EMBED_MEMORY_ENV`: the embedding child's address-space limit, bytes (a child that fails to load);
- `HOLD_INDEX_ENV`: the library's indexer stops after each batch of items it commits until the file
  named exists, so a test sees the library "indexing", part of it indexed, for as long as it wants.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Final

from zocratesd import cli
from zocratesd.library import embedproc, indexer
from zocratesd.process.logs import PROCESS_LOGGER
from zocratesd.process.startup import ENGINE, WIRE

HOLD_WIRE_ENV: Final = "ZOCRATES_TEST_HOLD_WIRE_UNTIL"
HOLD_ENGINE_ENV: Final = "ZOCRATES_TEST_HOLD_ENGINE_UNTIL"
EMBED_HOLD_ENV: Final = "ZOCRATES_TEST_EMBED_HOLD_S"
EMBED_MEMORY_ENV: Final = "ZOCRATES_TEST_EMBED_MEMORY"
HOLD_INDEX_ENV: Final = "ZOCRATES_TEST_HOLD_INDEX_UNTIL"
HOLD_POLL_S: Final = 0.02
_HOLDS: Final = {WIRE.name: HOLD_WIRE_ENV, ENGINE.name: HOLD_ENGINE_ENV}


def before_stage(name: str) -> None:
    """Hold the stage `name` while the file its variable names does not exist."""
    env = _HOLDS.get(name)
    hold = os.environ.get(env) if env else None
    if hold:
        # In the daemon's log, where a test reads it (DaemonProc.stderr_text).
        logging.getLogger(PROCESS_LOGGER).warning("%s is set: the %s waits for %s", env, name, hold)
        while not os.path.exists(hold):
            time.sleep(HOLD_POLL_S)


def hold_index(hold: str) -> None:
    """Every indexer made from here on waits after each committed batch while `hold` does not exist."""
    made = indexer.Indexer.__init__

    def init(self: indexer.Indexer, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)  # type: ignore[arg-type]

        def on_batch(done: int, total: int) -> None:
            if not os.path.exists(hold):
                logging.getLogger(PROCESS_LOGGER).warning("%s is set: indexing waits at %d/%d for %s",
                                                          HOLD_INDEX_ENV, done, total, hold)
            while not os.path.exists(hold):
                time.sleep(HOLD_POLL_S)

        self.on_batch = on_batch

    indexer.Indexer.__init__ = init  # type: ignore[method-assign]


def main() -> int:
    if hold := os.environ.get(HOLD_INDEX_ENV):
        hold_index(hold)
    memory, hold_s = os.environ.get(EMBED_MEMORY_ENV), os.environ.get(EMBED_HOLD_ENV)
    if memory or hold_s:
        embedproc.DEFAULT_SETTINGS = embedproc.ChildSettings(
            memory=int(memory) if memory else embedproc.MAX_CHILD_MEMORY, hold_s=float(hold_s or 0)
        )
    return cli.main(sys.argv[1:], before_stage=before_stage)


if __name__ == "__main__":
    sys.exit(main())
