"""The core's one entry point: `Daemon`, everything a client can ask of zocratesd for one Zotero
data dir, as a plain async API. Every face (the ACP/JSON-RPC peer, the HTTP shim, the MCP tools)
is a thin adapter over it; it knows nothing of JSON-RPC or HTTP and reports problems as
`zocratesd.errors`.

It delegates each concern to a service of its own:
- core/sessions.py: create, list, view, rename, delete, replay, watch;
- core/turns.py: prompt, resume, cancel, rewind, compaction on demand;
- core/catalogue.py: the library (its retriever, status, suggestions, search and browsing);
- core/session_config.py and core/settings.py: a session's settings and the daemon's;
- core/validation.py: the domain rules every argument is checked against;
- core/startup.py: where the engine's start stands; core/engine_side.py: what needs the engine;
- core/online.py: a person's search beyond the library (`daemon.online`);
- writes (its own package): writes into Zotero, consented, recorded, undoable (`daemon.writes`), and
  the plugin's channel they reach Zotero through (`daemon.plugin`).
Results are the core's typed structs, turned into the JSON shapes the faces send here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel

from zocratesd import __version__, deferred
from zocratesd.config import ZocratesConfig, config_path
from zocratesd.core.catalogue import LIBRARY_PASSAGES_FILE, Catalogue
from zocratesd.core.context import PromptContext
from zocratesd.core.online import AskOnline, Online
from zocratesd.core.session_config import SessionConfig
from zocratesd.core.sessions import Sessions, SessionView
from zocratesd.core.settings import Settings
from zocratesd.core.startup import EngineGate, EngineState
from zocratesd.core.turns import Ask, TurnResult, Turns
from zocratesd.core.validation import check_resume_response, check_session_id
from zocratesd.core.watchers import MAX_QUEUED_UPDATES, OnReady, Subscription, Watchers
from zocratesd.library.retrieval import DEFAULT_TOP_K, Retriever
from zocratesd.locations import state_dir
from zocratesd.maintenance import Maintenance, MaintenanceReport, StorageStats
from zocratesd.store import SessionLocks, SessionRow, SessionsDb
from zocratesd.store.reader import LiveSession
from zocratesd.updates import ConfigOption, Update
from zocratesd.writes import PluginChannel, Writes, zotero_paths

if TYPE_CHECKING:
    from zocratesd.compaction import Compactor
    from zocratesd.core.engine_side import EngineSide
    from zocratesd.engine.runner import Engine
    from zocratesd.library.service import Library

__all__ = [
    "LIBRARY_PASSAGES_FILE", "Daemon", "TurnResult", "check_resume_response", "check_session_id", "import_engine",
]

# The module of the core that imports ADK: loaded when the process decides (`Daemon.start`,
# `Daemon.load_engine`), never by importing this one (bench/PROFILE.md: a cold start's budget).
ENGINE_SIDE: Final = "zocratesd.core.engine_side"
# How long a stop waits for ADK's first-run table creation rather than cancel it half-way.
TABLES_SHIELD_S: Final = 10.0

# Runs a blocking function off the event loop and waits for it (the process layer's thread helper).
InThread = Callable[[Callable[[], None]], Awaitable[None]]

log = logging.getLogger(__name__)


def _engine_side() -> ModuleType:
    return deferred.load(ENGINE_SIDE)


def import_engine() -> None:
    """Import the engine side and what its first turn would import (blocking, CPU-bound: the
    process runs it in a thread while the event loop serves reads)."""
    _engine_side().preload()


class Daemon:
    """Its reads (sessions, a session's view and replay, storage stats, settings) need only sqlite3.
    The engine side (ADK's session service, the runner, the compactor) is built by `load_engine()`:
    at once by default; with `load_engine=False` (the daemon process) by `start()`, and every write
    waits until `start()` is done, a turn saying so to its watchers."""

    version = __version__

    def __init__(self, data_dir: Path, config: ZocratesConfig, *, retriever: Retriever | None = None, load_engine: bool = True):
        self.data_dir = data_dir
        self.config = config
        self.locks = SessionLocks()
        self._watchers = Watchers()
        self.db = SessionsDb.open(data_dir, load_service=False)  # the one owner of sessions.db
        self.reader = self.db.reader
        self.gate = EngineGate()
        self._side: EngineSide | None = None
        self.catalogue = Catalogue(data_dir, config, retriever, lambda name: self.session_config.find_collection(name))
        self.session_config = SessionConfig(
            self.db, self.locks, config, collections=self.catalogue.collections, publish=self._watchers.publish
        )
        self.sessions = Sessions(self.db, self.locks, self._watchers, self.session_config, self.gate)
        self.settings = Settings(config, config_path(data_dir))  # updates `config` in place
        # "Always" ("never") to a turn's question about online search is online.mode = on (off), in the config file.
        self.online = Online(config.online, state_dir(data_dir), self.catalogue.in_library,
                             remember=lambda mode: self.settings.update({"online": {"mode": mode}}))
        self.turns = Turns(self.db, self.locks, self._watchers, self.session_config, self.gate, self._engine, self.online,
                           self.catalogue.check_answer)
        self.maintenance = Maintenance(self.db, self.locks, config)
        self.startup_maintenance: MaintenanceReport | None = None
        self.plugin = PluginChannel()
        self.writes = Writes(
            state_dir(data_dir), mode=lambda: config.writes.mode,
            paths=lambda: zotero_paths(self.plugin, config.library.local_api_url, state_dir(data_dir)),
            titles=self.catalogue.titles, collection_name=self.catalogue.collection_name,
            find_collection=lambda ref: self.session_config.find_collection(ref),
            item_for_doi=lambda doi: self.online.item_for_doi(doi),
        )
        if load_engine:
            self.load_engine()
            self.gate.set(EngineState.READY)

    # --- the engine's start ---------------------------------------------------------------------

    def _engine(self) -> EngineSide:
        assert self._side is not None, "the engine gate opened before the engine was loaded"
        return self._side

    @property
    def engine_state(self) -> EngineState:
        return self.gate.state

    @property
    def engine_loaded(self) -> bool:
        return self._side is not None

    @property
    def engine(self) -> Engine:
        return self._engine().engine

    @engine.setter
    def engine(self, engine: Engine) -> None:  # a test's runner over a model of its own
        self._engine().engine = engine

    @property
    def compactor(self) -> Compactor:
        return self._engine().compactor

    @property
    def requests_wait_for_engine(self) -> bool:
        """Whether a write asked before `start()` finished still waits (process/lifecycle.py)."""
        return self.gate.waiting > 0

    def load_engine(self) -> None:
        """Build the engine side (idempotent; imports ADK unless `import_engine()` ran already)."""
        if self._side is None:
            self._side = _engine_side().load(self.db, self.config, self.catalogue.retriever, self.writes, self.online)

    async def start(self, *, importer: Callable[[], None] = import_engine, in_thread: InThread | None = None) -> None:
        """Load the engine if it was deferred (`importer` and the library source run by `in_thread`,
        the event loop serving reads meanwhile; else here), prepare the store, run start-up
        maintenance, then open the gate to writes and start the library index."""
        try:
            if self._side is None:
                self.gate.set(EngineState.LOADING)

                def load() -> None:
                    importer()
                    _ = self.catalogue.source  # a passages file is indexed when opened: not the loop's work

                if in_thread is not None:
                    await in_thread(load)
                else:
                    load()
                self.load_engine()
            # Shielded: ADK's first-run table creation cancelled half-way leaves a task behind that
            # asyncio.run() waits on forever at exit. It is short; a stop waits for it, bounded.
            with anyio.CancelScope(shield=True), anyio.move_on_after(TABLES_SHIELD_S):
                await self.db.prepare_tables()
            await anyio.lowlevel.checkpoint()  # a stop that came meanwhile takes effect here
            self.startup_maintenance = report = await self.maintenance.run(startup=True)
        except Exception:
            self.gate.set(EngineState.FAILED)
            raise
        if report["empty_deleted"] or report["retention_deleted"] or report["vacuum"]["ran"]:
            log.info("startup maintenance: %s", report)
        self.catalogue.start()
        self.gate.set(EngineState.READY)

    async def run_writes(self) -> None:
        """Apply consented writes into Zotero for as long as the daemon runs, from the engine's
        readiness on (writes.db and the HTTP client to Zotero are no part of the first reply)."""
        await self.gate.opened()
        await self.writes.run()

    async def aclose(self) -> None:
        await self.writes.aclose()
        await self.online.aclose()
        await self.catalogue.aclose()
        await self.maintenance.aclose()
        await self.db.aclose()

    # --- sessions ---------------------------------------------------------------------------------

    async def create_session(
        self, *, title: str | None = None, cwd: str | None = None, settings: Mapping[str, Any] | None = None) -> SessionRow:
        return await self.sessions.create(title=title, cwd=cwd, settings=settings)

    async def list_sessions(self) -> list[SessionRow]:
        return await self.sessions.list_all()

    async def get_session(self, session_id: str) -> SessionView:
        return await self.sessions.get(session_id)

    async def live_session(self, session_id: str) -> LiveSession:
        return await self.sessions.live(session_id)

    async def rename_session(self, session_id: str, title: str) -> SessionRow:
        return await self.sessions.rename(session_id, title)

    async def delete_session(self, session_id: str) -> None:
        await self.sessions.delete(session_id)

    def watch(self, session_id: str, *, limit: int = MAX_QUEUED_UPDATES, on_ready: OnReady | None = None) -> Subscription:
        """Hear the session's updates from now on (core/watchers.py); `close()` it to stop."""
        return self.sessions.watch(session_id, limit=limit, on_ready=on_ready)

    async def replay(self, session_id: str) -> list[Update]:
        return await self.sessions.replay(session_id)

    # --- turns ------------------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, text: str, context: PromptContext | None = None, *, ask: Ask | None = None,
        started: Callable[[], None] | None = None, ask_online: AskOnline | None = None,
    ) -> TurnResult:
        """Run one turn; its updates go to the session's watchers. SessionBusy at once while anything
        else holds the session. A checkpoint is put to `ask` (whether to search online, to `ask_online`);
        unanswered, the turn ends with it pending. `started` is called once the turn will run."""
        return await self.turns.prompt(session_id, text, context, ask, started, ask_online)

    async def resume(
        self, session_id: str, invocation_id: str, interrupt_id: str, response: Any, *, ask: Ask | None = None,
        started: Callable[[], None] | None = None, ask_online: AskOnline | None = None,
    ) -> TurnResult:
        """Answer the session's pending checkpoint and run the rest of its turn; CheckpointNotPending
        (nothing changes) unless (invocation_id, interrupt_id) is the one pending."""
        return await self.turns.resume(session_id, invocation_id, interrupt_id, response, ask, started, ask_online)

    def cancel(self, session_id: str) -> bool:
        return self.turns.cancel(session_id)

    async def cancel_turn(self, session_id: str) -> bool:
        """`cancel()`, SessionNotFound when nothing runs because the session does not exist."""
        return await self.turns.cancel_turn(session_id)

    async def rewind(self, session_id: str, invocation_id: str) -> dict[str, object]:
        """Undo a turn and everything after it; the UI session and what the turn was asked with."""
        return (await self.turns.rewind(session_id, invocation_id)).to_json()

    async def compact_now(self, session_id: str) -> dict[str, object]:
        return (await self.turns.compact_now(session_id)).to_json()

    # --- settings ---------------------------------------------------------------------------------

    async def config_options(self, session_id: str) -> tuple[ConfigOption, ...]:
        check_session_id(session_id)
        return await self.session_config.options(await self.session_config.settings(session_id))

    async def set_config_option(
        self, session_id: str, config_id: str, value: Any, *, origin: str | None = None
    ) -> tuple[ConfigOption, ...]:
        check_session_id(session_id)
        await self.gate.wait()
        return await self.session_config.set(session_id, config_id, value, origin=origin)

    # --- the library ------------------------------------------------------------------------------

    @property
    def library(self) -> Library | None:
        return self.catalogue.library

    def library_status(self, refresh: bool = False) -> dict[str, object]:
        return self.catalogue.status(refresh)

    async def library_suggestions(self, limit: int | None = None) -> dict[str, object]:
        return {"suggestions": [s.to_json() for s in await self.catalogue.suggestions(limit)]}

    async def search_library(
        self, query: str, *, top_k: int = DEFAULT_TOP_K, collection: str | None = None,
        item_keys: tuple[str, ...] = (), library: str | None = None,
    ) -> dict[str, object]:
        found = await self.catalogue.search(query, top_k=top_k, collection=collection, item_keys=item_keys, library=library)
        return found.to_json()

    async def library_item(
        self, key: str, *, library: str | None = None, fulltext: bool = False, fulltext_offset: int = 0
    ) -> dict[str, object]:
        return await self.catalogue.item(key, library=library, fulltext=fulltext, fulltext_offset=fulltext_offset)

    async def library_collections(self, library: str | None = None) -> list[dict[str, object]]:
        return await self.catalogue.collection_list(library)

    async def library_tags(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None, contains: str | None = None
    ) -> dict[str, object]:
        return await self.catalogue.tags(library, limit=limit, offset=offset, contains=contains)

    async def library_items(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None, order: str = "added"
    ) -> dict[str, object]:
        return await self.catalogue.items(library, limit=limit, offset=offset, order=order)

    async def export_citations(self, **request: Any) -> dict[str, object]:
        export = deferred.load("zocratesd.citations.export")  # loaded by the first export, not with the daemon
        result: dict[str, object] = (await export.export_cited(self.get_session, self.library, self.data_dir, **request)).as_json()
        return result

    # --- storage ----------------------------------------------------------------------------------

    async def storage_stats(self) -> StorageStats:
        return await self.maintenance.stats()

    async def run_maintenance(self) -> MaintenanceReport:
        """Retention and space reclamation on demand (VACUUM deferred while any turn runs)."""
        await self.gate.wait()
        return await self.maintenance.run(startup=False)
