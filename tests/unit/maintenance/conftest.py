"""The `world` fixture: a started daemon core with its Maintenance, on a fresh sessions.db."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from maintworld import World, make_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """Spec defaults (180 days, 100 sessions)."""
    w = make_world(tmp_path)
    await w.daemon.start()
    try:
        yield w
    finally:
        await w.maintenance.aclose()
        await w.daemon.aclose()
