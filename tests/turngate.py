"""A turn held in flight: the in-process Daemon's library search waits until the test opens it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from zocratesd.core import Daemon
from zocratesd.library.retrieval import Hit, Scope


class Gate:
    """Holds the library search of a running turn until opened: a turn that stays in flight."""

    def __init__(self, daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()
        search = daemon.engine.retriever.search

        async def held(query: str, scope: Scope, top_k: int = 6) -> list[Hit]:
            self.entered.set()
            await self.opened.wait()
            return await search(query, scope, top_k)

        monkeypatch.setattr(daemon.engine.retriever, "search", held)

    async def wait_entered(self) -> None:
        await asyncio.wait_for(self.entered.wait(), 10)

    async def running(self, turn: Awaitable[Any]) -> asyncio.Future[Any]:
        """Start `turn` and return its task once the turn is inside its search."""
        task = asyncio.ensure_future(turn)
        await self.wait_entered()
        return task
