"""The engine's start-up state, and the gate every write waits at until the engine is ready.

The process layer decides when the engine loads (process/lifecycle.py `bring_up` calls
`Daemon.start`); the core only records where that stands, so a write asked for meanwhile waits
rather than finding no engine, and never collides with start-up maintenance (spec 8.1).
"""

from __future__ import annotations

import asyncio
import enum


class EngineState(enum.Enum):
    NOT_LOADED = "not loaded"  # reads are served; writes wait
    LOADING = "loading"  # its modules are being imported (a thread), then tables and maintenance
    READY = "ready"  # writes run
    FAILED = "failed"  # the start failed: the process stops the daemon


class EngineGate:
    """Where the engine's start stands, and a wait for it to be ready."""

    def __init__(self) -> None:
        self.state = EngineState.NOT_LOADED
        self._ready = asyncio.Event()
        self.waiting = 0  # writes waiting for the engine right now

    @property
    def ready(self) -> bool:
        return self.state is EngineState.READY

    def set(self, state: EngineState) -> None:
        self.state = state
        if state is EngineState.READY:
            self._ready.set()

    async def opened(self) -> None:
        """Return once the engine is ready, without counting as a write that waits (for background
        work that should not compete with the start)."""
        await self._ready.wait()

    async def wait(self) -> None:
        """Return once the engine is ready (at once when it is)."""
        if self.ready:
            return
        self.waiting += 1
        try:
            await self._ready.wait()
        finally:
            self.waiting -= 1
