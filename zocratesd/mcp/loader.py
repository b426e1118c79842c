"""The SDK's import, in a thread of its own, giving way to the face that serves meanwhile.

Importing the pinned `mcp` SDK (and anyio, and server.py) takes most of a second: its protocol
types are pydantic models of two protocol eras. The faces (cold.py, then face.py) serve the
client's first requests while it runs; `SdkLoader` is shared by both, so the import started by
the cold face goes on, uninterrupted, under the anyio face that takes over from it.

Serving first: the import thread waits before each module while the face has a request in hand
(`idle` clear) and nothing waits for the SDK (process/give_way.py does the same for the daemon's
engine: both are CPU-bound Python under one GIL, and an early answer would otherwise share the
CPU with pydantic's model building; a first tool call that starts the daemon shares the machine
with the daemon's start). One wait is cut off after MAX_WAIT_EACH_S (the face's thread may be
importing a module whose lock the import thread holds, say jsonschema for a bad argument), all
of them after MAX_WAIT_TOTAL_S, about a cold daemon's start.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from types import ModuleType
from typing import Final

log = logging.getLogger("zocratesd.mcp")

# Test seam: when set, the SDK's import (in its thread) does not start until this file exists, so
# a test sees the early faces answer with the SDK not loaded (tests/e2e/test_mcp.py). Only tests set it.
HOLD_SDK_ENV: Final = "ZOCRATES_TEST_MCP_HOLD_SDK_UNTIL"
_HOLD_POLL_S: Final = 0.02
MAX_WAIT_EACH_S: Final = 0.1
MAX_WAIT_TOTAL_S: Final = 2.0
# While the SDK loads, the GIL changes hands this often (Python's default is 5 ms), so an early
# answer does not wait behind the import thread's pydantic model building (as the daemon does
# while its engine loads, process/lifecycle.py LOADING_SWITCH_INTERVAL_S).
LOADING_SWITCH_INTERVAL_S: Final = 0.0005
SERVER_MODULE: Final = "zocratesd.mcp.server"


def import_sdk(idle: threading.Event | None = None) -> ModuleType:
    """The server module (and with it anyio and the SDK), after the test seam's hold if one is
    set; giving way to the face's requests when `idle` is given."""
    hold = os.environ.get(HOLD_SDK_ENV)
    if hold:
        log.warning("%s is set: the SDK's import waits for %s", HOLD_SDK_ENV, hold)
        while not os.path.exists(hold):
            time.sleep(_HOLD_POLL_S)
    return importlib.import_module(SERVER_MODULE)


class SdkLoader:
    """`import_sdk` in a daemon thread (one that a held import cannot keep the process alive
    for after the client has gone). The face clears `idle` while it has a request in hand and
    sets it when not; `done` is set, and a byte written to `wake_fd` (for a selector), when the
    import has ended, well or not."""

    def __init__(self) -> None:
        self.idle = threading.Event()
        self.idle.set()
        self.done = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._module: ModuleType | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def wake_fd(self) -> int:
        """Readable once the import has ended."""
        return self._wake_r

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="zocratesd-mcp sdk import", daemon=True)
            self._thread.start()

    def result(self) -> ModuleType:
        """The server module once `done`; raises what the import raised."""
        if self._error is not None:
            raise self._error
        assert self._module is not None, "result() before the import ended"
        return self._module

    def _run(self) -> None:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, LOADING_SWITCH_INTERVAL_S))
        try:
            self._module = import_sdk(self.idle)
        except BaseException as exc:  # given to the face, which fails with it
            self._error = exc
        finally:
            sys.setswitchinterval(interval)
            self.idle.set()
            self.done.set()
            os.write(self._wake_w, b"\0")
