"""The daemon's light start (issue 22): what it imports before its engine, and what the engine's
background import leaves for the first turn.

The probes run in a fresh interpreter (a subprocess): this test process has ADK loaded already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.library.retrieval import InMemoryRetriever, Passage

HEAVY = ("google.adk", "google.genai", "sqlalchemy", "aiosqlite")


def _run(probe: str, *args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(probe), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.anyio
async def test_the_serving_side_reads_without_adk(tmp_path: Path) -> None:
    """What the daemon builds before it serves (the core without its engine, the ACP methods, the
    HTTP shim), the reads it then answers (list, view, replay, settings, storage stats) and a
    `session/new` waiting for the engine load neither ADK nor SQLAlchemy."""
    made = Daemon(tmp_path, ZocratesConfig(), retriever=InMemoryRetriever([Passage("ABCD1234", "RAG", "RAG text.")]))
    await made.start()
    sid = (await made.create_session()).id
    await made.prompt(sid, "What is RAG?")
    await made.aclose()
    probe = """
        import sys, anyio
        from pathlib import Path
        from zocratesd.config import ZocratesConfig
        from zocratesd.core.daemon import Daemon
        from zocratesd.process import boot, lifecycle, transports  # noqa: F401
        from zocratesd.rpc.acp import build_methods
        from zocratesd.shim import HttpFace  # noqa: F401

        async def reads():
            daemon = Daemon(Path(sys.argv[1]), ZocratesConfig(), load_engine=False)
            build_methods(daemon)
            sid = sys.argv[2]
            assert [r.id for r in await daemon.list_sessions()] == [sid]
            assert len((await daemon.get_session(sid))["messages"]) >= 2
            assert await daemon.replay(sid)
            assert (await daemon.storage_stats())["session_count"] == 1
            await daemon.config_options(sid)
            daemon.settings.view()
            # A session asked for meanwhile waits for the engine, and loads nothing of it on
            # the event loop (that would race the engine's import thread and stall every read).
            async with anyio.create_task_group() as tg:
                tg.start_soon(daemon.create_session)
                await anyio.sleep(0.2)
                assert daemon.requests_wait_for_engine
                tg.cancel_scope.cancel()
            assert not daemon.engine_loaded
            await daemon.aclose()
        anyio.run(reads)
        print("\\n".join(sorted(sys.modules)))
    """
    loaded = _run(probe, str(tmp_path), sid)
    assert "zocratesd.rpc.acp" in loaded and "zocratesd.shim.server" in loaded
    heavy = [m for m in loaded if m.startswith(HEAVY)]
    assert not heavy, f"the serving side loads {heavy[:10]}"


def test_the_background_import_covers_a_first_turn() -> None:
    """After the start-up plan's engine stage (process/startup.py, loaded before `Daemon.start`
    builds the engine), a first turn imports no further ADK module (ADK's lazy imports are all in
    `runner.LAZY_ADK_MODULES`) and builds no pydantic schema (google.genai's unbuilt ones are in
    `runner.LAZY_GENAI_MODELS`)."""
    probe = """
        import asyncio, sys
        import pydantic
        from zocratesd.process.startup import ENGINE
        ENGINE.load()
        before = set(sys.modules)
        rebuild = pydantic.BaseModel.model_rebuild.__func__
        built = []

        def spy(cls, *args, **kwargs):
            built.append("rebuilt:" + cls.__module__ + "." + cls.__qualname__)
            return rebuild(cls, *args, **kwargs)

        pydantic.BaseModel.model_rebuild = classmethod(spy)
        from zocratesd.engine.runner import warm_up
        asyncio.run(warm_up())
        print("\\n".join(sorted(set(sys.modules) - before) + built))
    """
    out = _run(probe)
    late = [m for m in out if m.startswith(HEAVY)]
    assert not late, f"a first turn still imports {late}: add them to engine/runner.py LAZY_ADK_MODULES"
    built = [m.removeprefix("rebuilt:") for m in out if m.startswith("rebuilt:")]
    assert not built, f"a first turn still builds the schema of {built}: add them to engine/runner.py LAZY_GENAI_MODELS"
