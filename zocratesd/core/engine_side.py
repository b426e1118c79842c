"""The core's side that needs the engine: ADK's session service, the runner (model, tools) and
the compactor, built by `load`, and a turn's ADK messages and events.

Imported only once the process has decided to load the engine (`Daemon.start`, in its import
thread; `Daemon.load_engine` at once): ADK and SQLAlchemy are most of a cold start's work, and a
daemon serves its reads without them. Importing this module also imports what a first turn would
otherwise import on the event loop (`preload`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from google.adk.events import Event
from google.genai import types

# Imported here, in the import thread, rather than by their first use on the event loop: a
# passages file's index (the library source is made in the same thread) and the store's
# ADK-facing writer and slim events.
import zocratesd.library.passages
import zocratesd.store.slim
import zocratesd.store.writer  # noqa: F401
from zocrates_wire.ui_session import CitationCheck
from zocratesd.compaction import Compactor
from zocratesd.config import ZocratesConfig
from zocratesd.core.online import Online
from zocratesd.core.turn_updates import TurnUpdates
from zocratesd.core.validation import ResumeAnswer
from zocratesd.engine.agent import COORDINATOR
from zocratesd.engine.models import build_model
from zocratesd.engine.online_tool import build_online_tool
from zocratesd.engine.runner import Engine, preload_lazy_imports
from zocratesd.engine.write_tools import build_write_tools
from zocratesd.library.retrieval import Retriever
from zocratesd.store import SessionsDb
from zocratesd.store.ui import CHECKS_METADATA_KEY
from zocratesd.writes import Writes


class EngineSide:
    def __init__(self, db: SessionsDb, config: ZocratesConfig, retriever: Retriever, writes: Writes, online: Online) -> None:
        db.load_service()
        self.db = db
        # The model proposes writes into Zotero; the person's face asks them (writes/service.py).
        write_tools = build_write_tools(
            propose=lambda op, session_id: writes.propose(op, session_id=session_id, face="assistant", proposer="model"),
            collect=lambda keys, collection: writes.add_to_collection(keys, collection),
        )
        # Beyond the library: offered unless online.mode is off; each turn may go online only as the
        # mode and the person's choice for the turn allow (engine/online_tool.py `allowed`).
        if config.online.mode != "off":
            write_tools.append(build_online_tool(online))
        # The research loop searches online what the library leaves unanswered, as the mode and the person allow.
        self.engine = Engine(db.service, build_model(config.model), retriever, config.research, config.model,
                             more_tools=write_tools, online=online)
        self.compactor = Compactor.from_config(db, config, self.engine.model)

    def updates(self) -> TurnUpdates:
        """A fresh reader of one turn's events (it reuses the JSON the store wrote for each)."""
        return TurnUpdates(self.db.service.take_dump)

    def checks_event(self, invocation_id: str, note: str, citations: list[CitationCheck]) -> Event:
        """The answer's citation checks (store/ui.py `CHECKS_METADATA_KEY`), with what the answer
        must say about them (its last words, when there is something to say)."""
        content = types.Content(role="model", parts=[types.Part(text=f"\n\n{note}")]) if note else None
        return Event(author=COORDINATOR, invocation_id=invocation_id, content=content,
                     custom_metadata={CHECKS_METADATA_KEY: citations})

    def run_turn(
        self, session_id: str, text: str, *, state_delta: dict[str, object], window_start: float | None,
        abort: asyncio.Event,
    ) -> AsyncIterator[Event]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return self.engine.run_turn(session_id, message, state_delta=state_delta, window_start=window_start, abort=abort)

    def resume_turn(
        self, session_id: str, interrupt_id: str, answer: ResumeAnswer, *, window_start: float | None,
        abort: asyncio.Event,
    ) -> AsyncIterator[Event]:
        return self.engine.resume_turn(session_id, interrupt_id, answer.to_json(), window_start=window_start, abort=abort)


def preload() -> None:
    """What ADK imports and builds lazily on a first run, now (blocking: the import thread's work)."""
    preload_lazy_imports()


def load(db: SessionsDb, config: ZocratesConfig, retriever: Retriever, writes: Writes, online: Online) -> EngineSide:
    return EngineSide(db, config, retriever, writes, online)
