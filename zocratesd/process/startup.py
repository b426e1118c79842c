"""What the daemon loads, and when: the one place that decides it (bench/PROFILE.md, "Start-up",
has the measurements behind each choice).

Before the socket listens, `zocratesd serve` imports only what the handshake and the process need:
the config, the process layer, the core (its reads are plain sqlite3). The first `initialize` is
answered then (rpc/handshake.py). Everything else is loaded in `STAGES` order by one background
thread (`load_stages`), while the socket serves:

1. `WIRE`: pydantic, the wire models, the ACP method table; once loaded, every request is served;
2. `SHIM`: what serves the HTTP shim's port (uvicorn, Starlette, the routes), bound already;
3. `ENGINE`: ADK, SQLAlchemy, the runner, compaction, the store's write path; once loaded,
   `Daemon.start` builds the engine and writes are served.

One thread imports them all, one after the other: two threads importing the same packages (ADK
imports Starlette too) could each find the other's module half-initialized.

Modules imported here are imported at the top of their own modules; where a module on the first
reply's path must name one of them, it goes through `zocratesd.deferred.load`.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio

from zocratesd import deferred
from zocratesd.process.logs import PROCESS_LOGGER

log = logging.getLogger(PROCESS_LOGGER)


@dataclass(frozen=True)
class Stage:
    """One step of the background load: `modules` imported in order, then `then` run (in the
    loading thread too)."""

    name: str  # in the log's timings, and what a test hook is told
    modules: tuple[str, ...]
    then: Callable[[], None] | None = None

    def load(self) -> None:
        """Import the stage's modules and run `then` (blocking: the loading thread's work)."""
        for name in self.modules:
            importlib.import_module(name)
        if self.then is not None:
            self.then()


def _prepare_engine() -> None:
    """What ADK imports and builds only on its first turn, done now (core/engine_side.py)."""
    deferred.load("zocratesd.core.engine_side").preload()


# pydantic's plugin loader (importlib.metadata) is imported by its first validator: here, not
# on the event loop beside this thread.
WIRE: Final = Stage("wire stack", ("zocratesd.rpc.acp", "pydantic.plugin._loader"))
# uvicorn's lifespan class too: its Config imports it by name on the event loop when serving starts.
SHIM: Final = Stage("HTTP shim", ("uvicorn", "uvicorn.lifespan.off", "zocratesd.shim.app"))
# The core's engine side (ADK, SQLAlchemy, the runner, compaction, the store's write path) and the
# library index with its indexer.
ENGINE: Final = Stage("engine", ("zocratesd.core.engine_side", "zocratesd.library.service"), then=_prepare_engine)

# Called with a stage's name just before it loads, in the loading thread. Production passes
# none; tests inject one that holds a stage back (tests/daemon_entry.py).
StageHook = Callable[[str], None]


@dataclass
class Loaded:
    """A stage as the event loop sees it: `done` is set once its modules are imported."""

    stage: Stage
    done: anyio.Event = field(default_factory=anyio.Event)  # made on the event loop


@dataclass
class Plan:
    """The stages of one daemon's start (`SHIM` only when it serves HTTP), their progress and
    timings."""

    stages: list[Loaded]
    before_stage: StageHook | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> Loaded | None:
        return next((s for s in self.stages if s.stage.name == name), None)

    def load(self, call_soon: Callable[[Callable[[], object]], object]) -> None:
        """The loading thread's work: each stage in turn, its `done` set on the event loop
        (through `call_soon`, the loop's `call_soon_threadsafe`)."""
        for loaded in self.stages:
            stage = loaded.stage
            if self.before_stage is not None:
                self.before_stage(stage.name)
            started = time.monotonic()
            stage.load()
            self.timings[stage.name] = time.monotonic() - started
            try:
                call_soon(loaded.done.set)
            except RuntimeError:  # the loop is closed: the daemon stopped meanwhile
                return

    def describe(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in self.timings.items())


def daemon_plan(*, http: bool, before_stage: StageHook | None = None) -> Plan:
    stages = (WIRE, SHIM, ENGINE) if http else (WIRE, ENGINE)
    return Plan([Loaded(s) for s in stages], before_stage=before_stage)
