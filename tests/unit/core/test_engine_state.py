"""The engine's start-up state (core/startup.py) as `Daemon.start` moves it, and the gate writes
wait at: a real Daemon over a real sessions.db; only the engine's import is replaced, by the
`importer` the process layer passes too."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.core.startup import EngineState
from zocratesd.library.retrieval import InMemoryRetriever, Passage

pytestmark = pytest.mark.anyio


def _daemon(tmp_path: Path) -> Daemon:
    retriever = InMemoryRetriever([Passage("ABCD1234", "RAG", "RAG text.")])
    return Daemon(tmp_path, ZocratesConfig(), retriever=retriever, load_engine=False)


async def test_the_state_goes_from_not_loaded_through_loading_to_ready(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    seen: list[EngineState] = []
    try:
        assert daemon.engine_state is EngineState.NOT_LOADED and not daemon.engine_loaded
        await daemon.start(importer=lambda: seen.append(daemon.engine_state))
        assert seen == [EngineState.LOADING]
        assert daemon.engine_state is EngineState.READY and daemon.engine_loaded
        assert (await daemon.create_session(title="after the start")).title == "after the start"
    finally:
        await daemon.aclose()


async def test_a_write_waits_at_the_gate_until_the_engine_is_ready(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    made: list[str] = []
    try:
        async with anyio.create_task_group() as tg:

            async def create() -> None:
                made.append((await daemon.create_session()).id)

            tg.start_soon(create)
            with anyio.fail_after(30):
                while not daemon.requests_wait_for_engine:
                    await anyio.sleep(0.01)
            assert made == [] and daemon.engine_state is EngineState.NOT_LOADED
            await daemon.start(importer=lambda: None)
        assert len(made) == 1 and not daemon.requests_wait_for_engine
        assert [r.id for r in await daemon.list_sessions()] == made
    finally:
        await daemon.aclose()


async def test_a_failed_start_says_so_and_opens_no_write(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)

    def importer() -> None:
        raise RuntimeError("the engine cannot be imported")

    try:
        with pytest.raises(RuntimeError, match="cannot be imported"):
            await daemon.start(importer=importer)
        assert daemon.engine_state is EngineState.FAILED and not daemon.engine_loaded
        # A write still waits: the process layer stops a daemon whose start failed.
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.create_session)
            with anyio.fail_after(30):
                while not daemon.requests_wait_for_engine:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert await daemon.list_sessions() == []
    finally:
        await daemon.aclose()
