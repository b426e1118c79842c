"""The core: a plain async API over the session store (and, as they land, the engine, compaction
and maintenance). Every face (the ACP/JSON-RPC peer, the HTTP shim) is a thin adapter over this
class; it knows nothing about JSON-RPC or HTTP, and reports problems as `zocratesd.errors`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import msgspec

from zocratesd import __version__
from zocratesd.config import ZocratesConfig, config_path
from zocratesd.core.context import PromptContext
from zocratesd.core.session_config import SessionConfig
from zocratesd.core.settings import Settings
from zocratesd.core.watchers import MAX_QUEUED_UPDATES, OnReady, Subscription, Watchers
from zocratesd.engine import SESSION_CONFIG_KEY
from zocratesd.engine.models import build_model
from zocratesd.errors import CheckpointNotPending, InvalidInput, NotFound, SessionNotFound
from zocratesd.library.retrieval import DEFAULT_TOP_K, InMemoryRetriever, Passage, Retriever, Scope
from zocratesd.limits import (
    ITEM_KEY_PATTERN,
    LIBRARY_PATTERN,
    MAX_ACTIVE_ITEMS,
    MAX_GUIDANCE_CHARS,
    MAX_INTERRUPT_ID_CHARS,
    MAX_OFFSET,
    MAX_PROMPT_CHARS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_TOP_K,
    MAX_TITLE_CHARS,
    SESSION_ID_PATTERN,
    whole,
)
from zocratesd.logtext import escape_for_log
from zocratesd.maintenance import Maintenance, MaintenanceReport, StorageStats
from zocratesd.store import (
    APP_NAME,
    USER_ID,
    SessionLocks,
    SessionRow,
    SessionsDb,
)
from zocratesd.store.reader import LiveSession, epoch_to_iso, gc_paused
from zocratesd.store.ui import DEFAULT_TITLE, pending_checkpoint, title_of
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    ConfigOption,
    Starting,
    Title,
    Update,
    history_updates,
)

if TYPE_CHECKING:  # the engine side imports ADK (~1.3 s): `Daemon.load_engine`, not this module
    from google.adk.events import Event

    from zocratesd.compaction import Compactor
    from zocratesd.core.turn_updates import TurnUpdates
    from zocratesd.engine.runner import Engine
    from zocratesd.library.service import Library


# How long a stop waits for ADK's first-run table creation rather than cancel it half-way
# (Daemon.start): it takes well under a second; a stuck disk must not hold the exit forever.
TABLES_SHIELD_S = 10.0

log = logging.getLogger(__name__)

_SESSION_ID_RE = whole(SESSION_ID_PATTERN)
_ITEM_KEY_RE = whole(ITEM_KEY_PATTERN)  # Zotero item and collection keys
_LIBRARY_RE = whole(LIBRARY_PATTERN)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]+")


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not _SESSION_ID_RE.match(session_id):
        raise InvalidInput(
            "a session id is 1-128 characters of letters, digits, '_', '.', ':' or '-'",
            sessionId=session_id if isinstance(session_id, str) else None,
        )
    return session_id


def _library_arg(library: Any) -> str | None:
    """A library filter: "user" or "groups/<groupID>", or None for every library."""
    if library is None or library == "":
        return None
    if not isinstance(library, str) or not _LIBRARY_RE.match(library):
        raise InvalidInput('library is "user" or "groups/<groupID>"', library=str(library)[:40])
    return library


def _check_page(limit: Any, offset: Any) -> None:
    for name, value, low, high in (("limit", limit, 1, None), ("offset", offset, 0, MAX_OFFSET)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low
                                  or (high is not None and value > high)):
            within = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise InvalidInput(f"{name} is a whole number {within}", **{name: str(value)[:20]})


def check_unicode(text: str, what: str) -> None:
    """Refuse lone surrogates (what a JSON `\\ud800` escape decodes to): SQLite would store text its
    readers cannot decode, and one such title broke `session/list` for every session."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode text (no lone surrogates)") from None


def clean_title(title: Any) -> str:
    """A title as the user meant it: control characters become spaces, ends trimmed, 1-200 chars."""
    if not isinstance(title, str):
        raise InvalidInput("a title must be a string")
    check_unicode(title, "a title")
    cleaned = _CONTROL_RE.sub(" ", title).strip()
    if not cleaned:
        raise InvalidInput("a title cannot be empty")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise InvalidInput(f"a title has at most {MAX_TITLE_CHARS} characters", length=len(cleaned))
    return cleaned


# A title made from the first prompt keeps this many characters (a sidebar row).
TITLE_FROM_PROMPT_CHARS = 60
# Where a daemon without a Zotero library index reads passages from, one JSON object per line
# ({item_key, title, text, creators?, year?, page?, collections?}), when its data dir has no
# zotero.sqlite to index: tests, demos and benchmarks use it.
LIBRARY_PASSAGES_FILE = "library_passages.jsonl"


def _window(state: dict[str, Any]) -> float | None:
    """Where a turn's session load starts: the end of the latest compaction, else everything."""
    window = state.get("compacted_until")
    return float(window) if isinstance(window, (int, float)) else None


def title_from_prompt(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TITLE_FROM_PROMPT_CHARS:
        return line
    cut = line[: TITLE_FROM_PROMPT_CHARS - 1].rsplit(" ", 1)[0]
    return (cut or line[: TITLE_FROM_PROMPT_CHARS - 1]) + "…"


class TurnResult(msgspec.Struct, frozen=True):
    stop_reason: str  # "end_turn" | "cancelled"
    invocation_id: str | None
    # The research checkpoint the turn stopped at, unanswered ({invocation_id, interrupt_id,
    # message, payload}); it stays pending until `resume()` or a rewind.
    pending_hitl: dict[str, Any] | None = None


# How a face answers a research checkpoint while its turn waits: the checkpoint in, the user's
# `{action, guidance?}` out, or None to leave it pending (the client declined, went away, ...).
Ask = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
RESUME_ACTIONS = ("extend_budget", "synthesize")


def check_resume_response(response: Any) -> dict[str, Any]:
    """`{action: "extend_budget"|"synthesize", guidance?: str}`, cleaned; InvalidInput if not."""
    if not isinstance(response, dict):
        raise InvalidInput('a checkpoint answer is an object {"action": "extend_budget"|"synthesize", "guidance"?}')
    action = response.get("action")
    if action not in RESUME_ACTIONS:
        raise InvalidInput('a checkpoint answer\'s action is "extend_budget" or "synthesize"', action=str(action)[:40])
    guidance = response.get("guidance")
    if guidance is not None and not isinstance(guidance, str):
        raise InvalidInput("guidance must be a string")
    if guidance is not None and len(guidance) > MAX_GUIDANCE_CHARS:
        raise InvalidInput(f"guidance has at most {MAX_GUIDANCE_CHARS} characters", length=len(guidance))
    out: dict[str, Any] = {"action": action}
    if guidance and guidance.strip() and action == "extend_budget":
        out["guidance"] = guidance.strip()
    return out


def load_library_passages(path: Path) -> list[Passage]:
    """The passages of a `library_passages.jsonl` (library/passages.py: bad lines logged with the field)."""
    from zocratesd.library.passages import load_passages

    return load_passages(path)


async def in_daemon_thread(func: Callable[[], None], name: str) -> None:
    """Run the blocking `func` in a daemon thread of its own and wait for it (its exception raised
    here). Unlike a worker thread of anyio's (`to_thread.run_sync`), a cancelled wait returns at
    once, and the process does not wait for the thread at exit: a SIGTERM during the engine's
    import (seconds on a loaded machine) stops the daemon promptly; the import is left behind."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def report(exc: BaseException | None) -> None:
        if done.done():  # the wait was cancelled: nobody is listening
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def run() -> None:
        failure: BaseException | None = None
        try:
            func()
        except BaseException as exc:  # handed to the waiting task, which raises it
            failure = exc
        try:
            loop.call_soon_threadsafe(report, failure)
        except RuntimeError:  # the loop is closed: the daemon stopped while we ran
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    await done


def import_engine() -> None:
    """Import what `Daemon.load_engine` builds from (ADK, SQLAlchemy, the runner, compaction): the
    ~1.3 s of a cold start that the first reply must not wait for. Blocking and CPU-bound: the
    daemon runs it in a worker thread while the event loop serves reads."""
    import zocratesd.compaction
    import zocratesd.core.turn_updates
    import zocratesd.engine.runner
    import zocratesd.library.passages
    import zocratesd.store.slim
    import zocratesd.store.writer  # noqa: F401
    from zocratesd.engine.runner import preload_lazy_imports

    preload_lazy_imports()


class Daemon:
    """Everything a client can ask of zocratesd, for one Zotero data dir.

    Its reads (sessions, a session's view and replay, storage stats, settings) need only sqlite3.
    The engine side (ADK's session service, the runner, the compactor) is built by `load_engine()`:
    at once by default; with `load_engine=False` (the daemon process) by `start()`, in the
    background, and every write (a new session, a turn, a rename, ...) waits until `start()` is
    done, a turn saying so to its watchers (`Starting`).
    """

    version = __version__
    # The engine side, from load_engine().
    engine: Engine
    compactor: Compactor

    def __init__(
        self, data_dir: Path, config: ZocratesConfig, *, retriever: Retriever | None = None, load_engine: bool = True
    ):
        self.data_dir = data_dir
        self.config = config
        self.locks = SessionLocks()
        self._watchers = Watchers()  # faces subscribe with watch()
        # The one owner of sessions.db; `reader` is its fast read path, what every view reads.
        self.db = SessionsDb.open(data_dir, load_service=False)
        self.reader = self.db.reader
        # What `search_library` searches: `retriever`, else the Zotero library (zocratesd/library),
        # made on first use (`_library_source`), its modules not the first reply's to load.
        self._library_lock = threading.Lock()
        self._library_made: tuple[Retriever, Library | None] | None = (retriever, None) if retriever is not None else None
        # Each session's settings (scope, model, research budget, compaction): core/session_config.py.
        self.session_config = SessionConfig(
            self.db, self.locks, config, collections=self._collections, publish=self._watchers.publish
        )
        self.maintenance = Maintenance(self.db, self.locks, config)
        self.startup_maintenance: MaintenanceReport | None = None
        self._aborts: dict[str, asyncio.Event] = {}
        # The settings the sidebar may change live (core/settings.py); it updates `config` in place.
        self.settings = Settings(config, config_path(data_dir))
        # Set once start() is done (load_engine=False only): writes wait for it (`_started`).
        self._started_event: asyncio.Event | None = None
        self._waiting_writes = 0  # writes waiting for start() right now
        if load_engine:
            self.load_engine()
        else:
            self._started_event = asyncio.Event()

    @property
    def engine_loaded(self) -> bool:
        return "engine" in self.__dict__

    def load_engine(self) -> None:
        """Build the engine side: ADK's session service, the runner (model, tools) and the
        compactor. Idempotent; imports ADK unless `import_engine()` ran already."""
        if self.engine_loaded:
            return
        from zocratesd.compaction import Compactor
        from zocratesd.engine.runner import Engine

        self.db.load_service()
        config = self.config
        self.engine = Engine(self.db.service, build_model(config.model), self._retriever, config.research, config.model)
        self.compactor = Compactor.from_config(self.db, config, self.engine.model)

    async def _started(self, session_id: str | None = None) -> None:
        """Return once `start()` is done (at once unless the engine was deferred): what every
        write awaits, so none collides with start-up maintenance (spec 8.1) or finds no engine.
        A turn (`session_id`) that has to wait says so to the session's watchers."""
        started = self._started_event
        if started is None or started.is_set():
            return
        if session_id is not None:
            await self._watchers.publish(session_id, Starting("the daemon is starting; the turn runs once its engine is loaded"))
        self._waiting_writes += 1
        try:
            await started.wait()
        finally:
            self._waiting_writes -= 1

    @property
    def writes_waiting(self) -> bool:
        """Whether a write asked before `start()` finished is still waiting to run (a warm-up turn
        then would only compete with it: process/lifecycle.py)."""
        return self._waiting_writes > 0

    @property
    def _library_source(self) -> tuple[Retriever, Library | None]:
        """The retriever, and the Library when it is the library index (indexed in the background
        once the daemon runs); or, for a data dir with no zotero.sqlite but a
        library_passages.jsonl (demos, benchmarks), the interim passages. Made once, on first use:
        `start()` makes it in its import thread (a passages file is indexed when it is opened,
        which may load the dense model: not the event loop's work); a read that needs it earlier
        (library status, a session's collections) makes it, or waits for that thread to."""
        made = self._library_made
        if made is None:
            with self._library_lock:
                if self._library_made is None:
                    self._library_made = self._make_library_source()
                made = self._library_made
        return made

    def _make_library_source(self) -> tuple[Retriever, Library | None]:
        from zocratesd import locations
        from zocratesd.library import dense
        from zocratesd.library.passages import PassagesFile
        from zocratesd.library.service import Library
        from zocratesd.library.zotero_db import ZOTERO_DB

        dense.set_enabled(self.config.library.dense)

        state = locations.state_dir(self.data_dir)
        passages = state / LIBRARY_PASSAGES_FILE
        if passages.exists() and not (self.data_dir / ZOTERO_DB).exists():
            return PassagesFile(passages), None  # reloaded when it changes
        cfg = self.config.library
        if not cfg.enabled:
            return InMemoryRetriever([]), None
        library = Library(
            self.data_dir, state, local_api_url=cfg.local_api_url if cfg.local_api else None,
            poll_interval_s=cfg.poll_interval_s, include_groups=cfg.include_group_libraries,
        )
        return library, library

    @property
    def _retriever(self) -> Retriever:
        return self._library_source[0]

    @property
    def library(self) -> Library | None:
        """The Zotero library index; None when the daemon searches something else."""
        return self._library_source[1]

    async def _collections(self) -> list[tuple[str, str, str | None]]:
        """The library's collections `(key, name, parent_key)`: the index's, else (a passages
        file) the keys its passages name."""
        if self.library is not None:
            return await self.library.collections()
        passages = getattr(self._retriever, "passages", None) or ()
        keys = sorted({c for p in passages for c in p.collections})
        return [(k, k, None) for k in keys]

    async def config_options(self, session_id: str) -> tuple[ConfigOption, ...]:
        """The session's settings with their choices (ACP `configOptions`); SessionNotFound if gone."""
        check_session_id(session_id)
        return await self.session_config.options(await self.session_config.settings(session_id))

    async def set_config_option(
        self, session_id: str, config_id: str, value: Any, *, origin: str | None = None
    ) -> tuple[ConfigOption, ...]:
        """Change one setting (validated, stored, announced to the session's watchers but `origin`)."""
        check_session_id(session_id)
        await self._started()
        return await self.session_config.set(session_id, config_id, value, origin=origin)

    async def compact_now(self, session_id: str) -> dict[str, Any]:
        """Compact the session now (`/compact`), whatever the gate says; SessionBusy during a turn."""
        check_session_id(session_id)
        await self._started()
        with self.locks.hold(session_id, "compaction"):
            await self.reader.session_state(session_id)  # SessionNotFound if gone
            res = await self.compactor.compact_now(session_id)
        return {"compacted": res.compacted, "reason": res.reason, "turns": res.completed_turns,
                "promptTokens": res.prompt_tokens}

    def library_status(self, refresh: bool = False) -> dict[str, Any]:
        """`_zocrates/library/status`: the index's state, counts and progress; `refresh` checks
        Zotero for changes now rather than at the next poll."""
        if self.library is None:
            from zocratesd.library.service import disabled_status

            return disabled_status("this daemon searches a fixed set of passages, not a Zotero library index")
        return self.library.status(refresh)

    async def library_suggestions(self, limit: int | None = None) -> dict[str, Any]:
        """`_zocrates/library/suggestions`: a few questions drawn from the library's titles,
        collections and tags, each with the scope to ask it in (library/suggestions.py); none
        without a Zotero library index, or before anything is indexed."""
        from zocratesd.library.suggestions import DEFAULT_SUGGESTIONS, MAX_SUGGESTIONS

        if limit is None:
            limit = DEFAULT_SUGGESTIONS
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SUGGESTIONS:
            raise InvalidInput(f"limit is a whole number from 1 to {MAX_SUGGESTIONS}", field="limit")
        if self.library is None:
            return {"suggestions": []}
        return {"suggestions": [s.to_json() for s in await self.library.suggestions(limit)]}

    # --- the library as a catalogue (library/catalog.py; the MCP face's tools) ----------------

    async def search_library(
        self, query: str, *, top_k: int = DEFAULT_TOP_K, collection: str | None = None,
        item_keys: tuple[str, ...] = (), library: str | None = None,
    ) -> dict[str, Any]:
        """The passages a turn's `search_library` would find, without a turn: best first, each
        with its item, kind, page label and `zotero://` link. `collection` is a key or a name
        (with its subcollections), `item_keys` some papers, `library` one library; at most one of
        the first two. InvalidInput for a bad query, scope or count."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidInput(f"query is longer than {MAX_QUERY_CHARS} characters", length=len(query))
        check_unicode(query, "query")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_SEARCH_TOP_K:
            raise InvalidInput(f"top_k is a number from 1 to {MAX_SEARCH_TOP_K}", top_k=str(top_k)[:20])
        lib = _library_arg(library)
        if collection is not None and item_keys:
            raise InvalidInput("give a collection or item keys, not both")
        if collection is not None:
            key = await self.session_config.find_collection(str(collection))
            scope = Scope(mode="collection", collection=key, library=lib)
        elif item_keys:
            if len(item_keys) > MAX_ACTIVE_ITEMS or not all(isinstance(k, str) and _ITEM_KEY_RE.match(k) for k in item_keys):
                raise InvalidInput(f"item_keys are 1 to {MAX_ACTIVE_ITEMS} Zotero keys (8 characters A-Z, 0-9)")
            scope = Scope(mode="papers", item_keys=tuple(item_keys), library=lib)
        else:
            scope = Scope(library=lib)
        hits = await self._retriever.search(query, scope, top_k)
        status = self.library_status()
        return {
            "query": query,
            "scope": {"mode": scope.mode, "collection": scope.collection, "item_keys": list(scope.item_keys), "library": lib},
            "passages": [h.as_json() for h in hits],
            "library_state": status.get("state"),
            "library_message": status.get("message"),
        }

    async def library_item(
        self, key: str, *, library: str | None = None, fulltext: bool = False, fulltext_offset: int = 0
    ) -> dict[str, Any]:
        """One item of the library index with its children (and a page of its full text when
        asked); NotFound when the index has no such item."""
        from zocratesd.library import catalog

        if not isinstance(key, str) or not _ITEM_KEY_RE.match(key):
            raise InvalidInput("an item key is 8 characters A-Z, 0-9", key=str(key)[:40])
        if isinstance(fulltext_offset, bool) or not isinstance(fulltext_offset, int) or not 0 <= fulltext_offset <= MAX_OFFSET:
            raise InvalidInput(f"fulltext_offset is a chunk number from 0 to {MAX_OFFSET}")
        lib = _library_arg(library)
        found = None
        if self.library is not None:
            def read(conn: Any) -> dict[str, Any] | None:
                uid = catalog.find_uid(conn, key, lib)
                return None if uid is None else catalog.get_item(conn, uid, fulltext=fulltext, fulltext_offset=fulltext_offset)

            found = await self.library.read(read)
        if found is None:
            where = f" in {lib}" if lib else ""
            raise NotFound(f"no item {key}{where} in the library index" + self._no_index_hint(), itemKey=key)
        return found

    async def library_collections(self, library: str | None = None) -> list[dict[str, Any]]:
        """Every collection with its path, parent and item counts ([] without an index)."""
        from zocratesd.library import catalog

        lib = _library_arg(library)
        if self.library is None:
            return [{"key": k, "name": n, "path": n, "parent_key": p, "library": "user", "library_name": "user",
                     "items": 0, "items_with_subcollections": 0} for k, n, p in await self._collections()]
        return await self.library.read(lambda conn: catalog.collections(conn, lib)) or []

    async def library_tags(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None, contains: str | None = None
    ) -> dict[str, Any]:
        """Tags by use, paged (`limit`, `offset`), optionally those containing `contains`."""
        from zocratesd.library import catalog

        lib = _library_arg(library)
        _check_page(limit, offset)
        empty: dict[str, Any] = {"tags": [], "total": 0, "offset": offset or 0, "next_offset": None}
        if self.library is None:
            return empty
        found = await self.library.read(lambda conn: catalog.tags(conn, lib, limit=limit, offset=offset, contains=contains))
        return found if found is not None else empty

    async def library_items(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None, order: str = "added"
    ) -> dict[str, Any]:
        """Item summaries, newest first by `order` ("added" or "modified"), paged."""
        from zocratesd.library import catalog

        lib = _library_arg(library)
        _check_page(limit, offset)
        if order not in ("added", "modified"):
            raise InvalidInput('order is "added" or "modified"', order=str(order)[:20])
        empty: dict[str, Any] = {"items": [], "total": 0, "offset": offset or 0, "next_offset": None}
        if self.library is None:
            return empty
        found = await self.library.read(lambda conn: catalog.items(conn, lib, limit=limit, offset=offset, order=order))
        return found if found is not None else empty

    def _no_index_hint(self) -> str:
        status = self.library_status()
        state, message = status.get("state"), status.get("message")
        if state == "ready":
            return ""
        return f" (library {state}" + (f": {message}" if message else "") + ")"

    async def start(self, *, importer: Callable[[], None] = import_engine) -> None:
        """Load the engine if it was deferred (ADK imported by `importer` in a daemon thread, the
        event loop serving reads meanwhile; cancelling the start does not wait for the import),
        prepare the store, then run startup maintenance (retention, VACUUM when it pays) before
        any write: writes wait for this (`_started`), so no turn can collide with it (spec 8.1).
        Then the library index starts (a thread of its own)."""
        if not self.engine_loaded:

            def load() -> None:
                importer()
                _ = self._library_source  # made here, off the event loop

            await in_daemon_thread(load, "zocratesd engine import")
            self.load_engine()
        # Shielded: ADK's first-run table creation (SQLAlchemy over aiosqlite) cancelled half-way
        # leaves a task of its own behind that never finishes, and asyncio.run() then waits on it
        # forever at exit (a SIGTERM right after sessions.db appeared hung 9 of 30 starts). It
        # takes well under a second; a stop waits for it, bounded.
        with anyio.CancelScope(shield=True), anyio.move_on_after(TABLES_SHIELD_S):
            await self.db.prepare_tables()
        await anyio.lowlevel.checkpoint()  # a stop that came meanwhile takes effect here
        self.startup_maintenance = await self.maintenance.run(startup=True)
        report = self.startup_maintenance
        if report["empty_deleted"] or report["retention_deleted"] or report["vacuum"]["ran"]:
            log.info("startup maintenance: %s", report)
        if self.library is not None:
            # A thread: the daemon is ready at once; `_zocrates/library/status` reports progress.
            self.library.start()
        if self._started_event is not None:
            self._started_event.set()

    async def storage_stats(self) -> StorageStats:
        """Size and counts of sessions.db (the Zotero preferences' storage panel)."""
        return await self.maintenance.stats()

    async def run_maintenance(self) -> MaintenanceReport:
        """Retention and space reclamation on demand; sessions in flight are left alone and VACUUM
        is deferred while any turn runs."""
        await self._started()
        return await self.maintenance.run(startup=False)

    async def aclose(self) -> None:
        made = self._library_made  # not made (or being made, left behind by a stop): nothing to close
        if made is not None and made[1] is not None:
            await made[1].aclose()
        await self.maintenance.aclose()
        await self.db.aclose()

    # --- sessions -----------------------------------------------------------------------------

    async def create_session(self, *, title: str | None = None, cwd: str | None = None) -> SessionRow:
        title = clean_title(title) if title is not None else DEFAULT_TITLE
        await self._started()
        # Only now: asked at a cold start, this import would load ADK on the event loop, in a
        # race with the engine's import thread, and stall every read until it finished.
        from google.adk.errors.already_exists_error import AlreadyExistsError

        now = time.time()
        for _ in range(3):
            session_id = f"session-{int(now * 1000)}-{secrets.token_hex(3)}"
            try:
                session = await self.db.service.create_session(
                    app_name=APP_NAME, user_id=USER_ID, session_id=session_id
                )
                break
            except AlreadyExistsError:  # pragma: no cover - 24 random bits in the same millisecond
                continue
        else:  # pragma: no cover
            raise RuntimeError("could not mint a unique session id")
        # Seeded through an event, not create_session(state=...): a rewind replays event deltas
        # only, so create-time state would be wiped by the first rewind (research/adk.md section 3).
        seed: dict[str, Any] = {"title": title, "created_at": now}
        if cwd:
            seed["cwd"] = cwd
        await self.db.append_state(session, seed)
        updated = session.last_update_time
        return SessionRow(
            id=session_id, title=title, created_at=now, updated_at=updated, cwd=cwd, updated_iso=epoch_to_iso(updated)
        )

    async def list_sessions(self) -> list[SessionRow]:
        return await self.reader.list_sessions()

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The UI session (spec 2.2) with rewinds applied and `pending_hitl`, and the session's
        settings (core/session_config.py), so every face shows the same."""
        ui = await self.reader.ui_session(check_session_id(session_id))
        ui["settings"] = self.session_config.view(await self.session_config.settings(session_id))
        return ui

    async def live_session(self, session_id: str) -> LiveSession:
        """State and live events (rewinds applied), as stored."""
        return await self.reader.live_session(check_session_id(session_id))

    def watch(
        self, session_id: str, *, limit: int = MAX_QUEUED_UPDATES, on_ready: OnReady | None = None
    ) -> Subscription:
        """Hear the session's updates from now on, in a queue of the caller's own (core/watchers.py:
        a listener that does not read never stalls the turn; on overflow it hears no more).
        `close()` the subscription (or use it as a context manager) to stop."""
        return self._watchers.watch(session_id, limit=limit, on_ready=on_ready)

    async def replay(self, session_id: str) -> list[Update]:
        """The session as updates, for a client that loads it (ACP `session/load`): its history,
        then the checkpoint it waits on, if any, then its title. SessionNotFound if it is gone."""
        live = await self.reader.live_session(check_session_id(session_id))
        with gc_paused():  # thousands of short-lived, acyclic objects for a long session
            updates = history_updates(live.live)
            pending = pending_checkpoint(live.live)
            if pending is not None:  # shown, so the client knows the last turn waits on the user
                updates.append(Checkpoint.from_json(pending))
            updates.append(Title(live.title))
        return updates

    async def delete_session(self, session_id: str) -> None:
        check_session_id(session_id)
        await self._started()
        with self.locks.hold(session_id, "delete"):
            if not await self.reader.exists(session_id):
                raise SessionNotFound(session_id)
            await self.db.service.delete_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
        log.info("deleted session %s", session_id)

    async def rename_session(self, session_id: str, title: str) -> SessionRow:
        check_session_id(session_id)
        title = clean_title(title)
        await self._started()
        with self.locks.hold(session_id, "rename"):
            session = await self.db.append_state(session_id, {"title": title})  # SessionNotFound if gone
            await self._watchers.publish(session_id, Title(title))
            created = session.state.get("created_at")
            return SessionRow(
                id=session_id,
                title=title,
                created_at=float(created) if isinstance(created, (int, float)) else session.last_update_time,
                updated_at=session.last_update_time,
                cwd=session.state.get("cwd"),
                updated_iso=epoch_to_iso(session.last_update_time),
            )

    # --- turns --------------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, text: str, context: PromptContext | None = None, *, ask: Ask | None = None,
        started: Callable[[], None] | None = None,
    ) -> TurnResult:
        """Run one turn; its updates go to the session's watchers as they happen.

        Refused at once with SessionBusy while anything else holds the session. `cancel()` stops
        it through ADK's abort signal: open tool calls are sealed, and the result says "cancelled".
        A research checkpoint is put to `ask` (the prompting client) and the turn goes on with its
        answer; unanswered, the turn ends with the checkpoint pending (`TurnResult.pending_hitl`).
        `started` is called once the turn holds the session and will run: an error raised before
        that is a refusal (busy, unknown session, bad input), one raised after it a failed turn.
        Watchers cannot tell the two apart, since other turns' updates reach them too.
        """
        check_session_id(session_id)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("a prompt needs some text")
        if len(text) > MAX_PROMPT_CHARS:
            raise InvalidInput(f"a prompt has at most {MAX_PROMPT_CHARS} characters", length=len(text))
        check_unicode(text, "a prompt")
        context = context or PromptContext()
        with self.locks.hold(session_id, "turn"):
            state = await self.reader.session_state(session_id)
            # The session's scope setting, unless the prompt chose its own (a refusal: before started()).
            context, remembered = self.session_config.turn_context(state, context)
            await self._started(session_id)  # a turn asked for while the daemon starts waits here
            if started is not None:
                started()
            from google.genai import types

            from zocratesd.core.turn_updates import TurnUpdates

            delta = context.state_delta() | remembered
            if title_of(state) == DEFAULT_TITLE:
                delta["title"] = title_from_prompt(text)
            abort = asyncio.Event()
            stream = TurnUpdates(self.db.service.take_dump)
            message = types.Content(role="user", parts=[types.Part(text=text)])
            window = _window(state)
            events = self.engine.run_turn(session_id, message, state_delta=delta, window_start=window, abort=abort)
            # Settings change only under the session lock, which the turn holds: read them now.
            compaction = self.session_config.from_state(state).compaction
            return await self._drive(session_id, stream, events, abort, ask, window, compaction)

    async def resume(
        self, session_id: str, invocation_id: str, interrupt_id: str, response: Any, *, ask: Ask | None = None,
        started: Callable[[], None] | None = None,
    ) -> TurnResult:
        """Answer the session's pending research checkpoint and run the rest of its turn (from any
        client, in any daemon process: the pipeline rehydrates from `hitl_snapshot`). The turn's
        updates go to the session's watchers; it may stop at a further checkpoint.

        CheckpointNotPending (nothing changes) unless (invocation_id, interrupt_id) is the one
        pending: an answered, rewound or superseded checkpoint cannot be answered again.
        `started` as for `prompt()`.
        """
        check_session_id(session_id)
        for name, value in (("an invocation id", invocation_id), ("an interrupt id", interrupt_id)):
            if not isinstance(value, str) or not value or len(value) > MAX_INTERRUPT_ID_CHARS:
                raise InvalidInput(f"{name} must be a non-empty string of at most {MAX_INTERRUPT_ID_CHARS} characters")
        answer = check_resume_response(response)
        with self.locks.hold(session_id, "turn"):
            ui = await self.reader.ui_session(session_id)
            pending = ui["pending_hitl"]
            if pending is None:
                raise CheckpointNotPending(
                    "no research checkpoint is pending in this session (answered, rewound or superseded)",
                    sessionId=session_id, invocationId=invocation_id, interruptId=interrupt_id,
                )
            if (pending["invocation_id"], pending["interrupt_id"]) != (invocation_id, interrupt_id):
                raise CheckpointNotPending(
                    "that is not the pending checkpoint of this session",
                    sessionId=session_id, invocationId=invocation_id, interruptId=interrupt_id,
                    pendingInvocationId=pending["invocation_id"], pendingInterruptId=pending["interrupt_id"],
                )
            state = await self.reader.session_state(session_id)
            window = _window(state)
            await self._started(session_id)
            from zocratesd.core.turn_updates import TurnUpdates

            abort = asyncio.Event()
            stream = TurnUpdates(self.db.service.take_dump)
            stream.invocation_id = invocation_id
            await self._watchers.publish(session_id, CheckpointAnswered(invocation_id, interrupt_id, answer))
            # Called with nothing awaited before `_drive` registers the turn's abort: a client that
            # hears the turn has started can cancel it (`cancel()`), never in a gap.
            if started is not None:
                started()
            events = self.engine.resume_turn(session_id, interrupt_id, answer, window_start=window, abort=abort)
            compaction = self.session_config.from_state(state).compaction  # as in prompt()
            return await self._drive(session_id, stream, events, abort, ask, window, compaction)

    async def _drive(
        self, session_id: str, stream: TurnUpdates, events: AsyncIterator[Event], abort: asyncio.Event,
        ask: Ask | None, window: float | None, compaction: bool,
    ) -> TurnResult:
        """Run a turn's events to its end or its next checkpoint; while `ask` answers checkpoints,
        resume in place (the same turn, still under the session lock). Then post-turn compaction."""
        self._aborts[session_id] = abort
        try:
            while True:
                async for ev in events:
                    for update in stream.feed(ev):
                        await self._watchers.publish(session_id, update)
                checkpoint = stream.checkpoint
                if checkpoint is None or abort.is_set() or ask is None:
                    break
                answer = await self._ask(session_id, ask, checkpoint.to_json(), abort)
                if answer is None:
                    break
                stream.checkpoint = None
                await self._watchers.publish(
                    session_id, CheckpointAnswered(checkpoint.invocation_id, checkpoint.interrupt_id, answer)
                )
                events = self.engine.resume_turn(
                    session_id, checkpoint.interrupt_id, answer, window_start=window, abort=abort
                )
        finally:
            self._aborts.pop(session_id, None)
        # Post-turn compaction (spec section 4): after the answer streamed, before the result,
        # still under the lock. Never fails the turn; its cost goes out as a `usage` update. A
        # turn paused at a checkpoint is not complete: nothing is compacted until it is.
        paused = stream.checkpoint
        usage = await self.compactor.after_turn(
            session_id, stream.usage, cancelled=abort.is_set(), paused=paused is not None, enabled=compaction
        )
        if stream.usage:
            usage = msgspec.structs.replace(usage, model_tokens=stream.usage)
        await self._watchers.publish(session_id, usage)
        pending_hitl = paused.to_json() if paused is not None else None
        return TurnResult("cancelled" if abort.is_set() else "end_turn", stream.invocation_id, pending_hitl)

    async def _ask(self, session_id: str, ask: Ask, checkpoint: dict[str, Any], abort: asyncio.Event) -> dict[str, Any] | None:
        """The prompting client's answer to a checkpoint; None when it declines, fails, goes away
        or the turn is cancelled meanwhile (the checkpoint then stays pending)."""
        asking = asyncio.ensure_future(ask(checkpoint))
        aborted = asyncio.ensure_future(abort.wait())
        try:
            await asyncio.wait({asking, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (asking, aborted):
                if not task.done():
                    task.cancel()
            await asyncio.gather(asking, aborted, return_exceptions=True)
        if not asking.done() or asking.cancelled():
            return None
        exc = asking.exception()
        if exc is not None:
            # The client's own error reply, perhaps: its text is escaped (logtext.py).
            log.info("session %s: checkpoint %s left pending (%s)", session_id, checkpoint["interrupt_id"], escape_for_log(exc))
            return None
        answer = asking.result()
        if answer is None:
            return None
        try:
            return check_resume_response(answer)
        except InvalidInput as bad:
            log.warning("session %s: unusable checkpoint answer %s (%s); left pending", session_id,
                        escape_for_log(repr(answer)), escape_for_log(bad.message))
            return None

    def cancel(self, session_id: str) -> bool:
        """Ask the session's running turn to stop; False when none runs."""
        abort = self._aborts.get(session_id)
        if abort is None:
            return False
        abort.set()
        return True

    async def cancel_turn(self, session_id: str) -> bool:
        """`cancel()` for a client that names a session it may not know: SessionNotFound when
        nothing runs there because the session does not exist."""
        if self.cancel(check_session_id(session_id)):
            return True
        if not await self.reader.exists(session_id):
            raise SessionNotFound(session_id)
        return False

    # --- settings -----------------------------------------------------------------------------

    def get_settings(self) -> dict[str, Any]:
        """The settings a user may change here, where each applies, and the config file's path."""
        return self.settings.view()

    async def update_settings(self, patch: Any) -> dict[str, Any]:
        """Change settings (a part of `get_settings()["settings"]`): validated, written to
        zocrates_config.json, applied now where the code reads them live. InvalidInput names the key."""
        return await self.settings.update(patch)

    async def rewind(self, session_id: str, invocation_id: str) -> dict[str, Any]:
        """Undo a turn and everything after it (append-only: a marker hides them).

        Returns the UI session and what the rewound turn was asked with (`active_context_items`,
        `snippets`, `mode`), so a client can restore them for an inline edit. The title survives.
        """
        check_session_id(session_id)
        if not isinstance(invocation_id, str) or not invocation_id or len(invocation_id) > 256:
            raise InvalidInput("an invocation id must be a non-empty string")
        await self._started()
        with self.locks.hold(session_id, "rewind"):
            live = await self.reader.live_session(session_id)
            user_event = next(
                (ev for ev in live.live if ev.get("invocation_id") == invocation_id and ev.get("author") == "user"
                 and (ev.get("content") or {}).get("parts")),
                None,
            )
            if user_event is None:
                raise NotFound(
                    f"no turn with invocation id {invocation_id!r} in this session",
                    sessionId=session_id, invocationId=invocation_id,
                )
            asked = ((user_event.get("actions") or {}).get("state_delta")) or {}
            title = live.title
            settings = live.state.get(SESSION_CONFIG_KEY)
            await self.engine.rewind(session_id, invocation_id)
            # A rewind replays state as it was before the turn; a title set by that turn (or a
            # rename after it) would revert. Titles are the user's, not the turn's: keep it; and
            # the session's settings (core/session_config.py) likewise.
            after = await self.reader.session_state(session_id)
            keep: dict[str, Any] = {}
            if title_of(after) != title:
                keep["title"] = title
            if settings is not None and after.get(SESSION_CONFIG_KEY) != settings:
                keep[SESSION_CONFIG_KEY] = settings
            if keep:
                await self.db.append_state(session_id, keep)
            ui = await self.reader.ui_session(session_id)
        return {
            "session": ui,
            "restored": {
                "mode": asked.get("active_mode") or "library",
                "active_context_items": asked.get("active_context_items"),
                "collection": asked.get("active_collection"),
                "snippets": asked.get("snippets") or [],
                "text": "".join(p.get("text") or "" for p in user_event["content"]["parts"] if not p.get("thought")),
            },
        }
