"""The core's writes into Zotero: proposed by a face (or the model, through a face), consented to by
the person, applied through a path into Zotero, recorded, undone on request.

One `Writes` per daemon. `propose` checks the operation against the library, writes its preview and
records it; under `writes.mode = ask` it then waits for `confirm` or `discard` from the face that
asked (or any of the user's own clients). `run` is the one applier: it takes consented writes in
the order they were consented, so a collection created before items are added to it exists by then,
and when no path is open (Zotero closed) it waits and tries again, the writes staying queued in the
journal across restarts.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, Literal, TypeVar

import anyio

from zocratesd.errors import InvalidInput, NotFound, WriteRefused
from zocratesd.logtext import escape_for_log
from zocratesd.writes import operations as ops
from zocratesd.writes.csl import item_from_csl
from zocratesd.writes.journal import OPEN_STATES, Journal, Proposer, WriteRecord
from zocratesd.writes.operations import Change, Operation
from zocratesd.writes.paths import NOT_RUNNING, NotNow, Refused, WritePath

log = logging.getLogger(__name__)

T = TypeVar("T")
WritesMode = Literal["ask", "allow", "off"]
# With no path open (Zotero closed), how often the applier looks again: one refused connection to
# 127.0.0.1 per path, so a write waits at most this long after Zotero is back.
RETRY_INTERVAL_S: Final = 3.0
# A transient failure (Zotero answered 5xx, or the connection dropped mid-request) backs off from
# the retry interval up to this.
MAX_BACKOFF_S: Final = 60.0
# How long `confirm` and `undo` wait for the write to be applied before answering "queued": long
# enough for Zotero's own consent dialog (Zotero 10's local API asks once per application).
SETTLE_WAIT_S: Final = 120.0
PREVIEW_NOTE_CHARS: Final = 2000
PREVIEW_ITEMS: Final = 12

# Titles of items (NotFound for keys the library does not hold) and names of collections.
Titles = Callable[[str, Sequence[str]], Awaitable[dict[str, str]]]
CollectionName = Callable[[str, str], Awaitable[str | None]]
# A collection's key from what a person calls it (its key, name or path); InvalidInput with the candidates.
FindCollection = Callable[[str], Awaitable[str]]
# A new item's fields from a DOI, looked up online (core/online.py `Online.item_for_doi`).
ItemForDoi = Callable[[str], Awaitable[ops.ItemFields]]


class Writes:
    def __init__(
        self, state_dir: Path, *, mode: Callable[[], WritesMode], paths: Callable[[], list[WritePath]],
        titles: Titles, collection_name: CollectionName, find_collection: FindCollection,
        retry_interval_s: float = RETRY_INTERVAL_S, item_for_doi: ItemForDoi | None = None,
    ):
        self._find_collection = find_collection
        self._item_for_doi = item_for_doi
        self._state_dir = state_dir
        self._journal: Journal | None = None
        self._opening = threading.Lock()
        self._mode = mode
        self._make_paths = paths
        self._paths: list[WritePath] | None = None
        self._titles = titles
        self._collection_name = collection_name
        self._retry_s = retry_interval_s
        self._wake = anyio.Event()
        self._settled: dict[str, anyio.Event] = {}
        self.waiting_for: str | None = None  # why the queue is stalled, in the user's terms
        self.applying: str | None = None  # the write being sent to Zotero right now

    @property
    def journal(self) -> Journal:
        """writes.db, opened by the first write or listing, not with the daemon."""
        with self._opening:  # worker threads may ask first
            if self._journal is None:
                self._journal = Journal(self._state_dir)
        return self._journal

    @property
    def paths(self) -> list[WritePath]:
        if self._paths is None:
            self._paths = self._make_paths()
        return self._paths

    async def aclose(self) -> None:
        for path in self._paths or ():
            closing = getattr(path, "aclose", None)
            if closing is not None:
                await closing()
        if self._journal is not None:
            self._journal.close()

    # --- faces' calls ------------------------------------------------------------------------------

    async def propose(
        self, op: Operation, *, session_id: str | None, face: str, proposer: Proposer = "user",
    ) -> WriteRecord:
        """Record `op` with its preview. Applied at once when `writes.mode` is `allow` or its kind
        was allowed always; else `awaiting_consent` until `confirm`/`discard`. WriteRefused when
        writes are off; NotFound for items the library does not hold."""
        mode = self._mode()
        if mode == "off":
            raise WriteRefused("writes into Zotero are off (writes.mode = off in the config); nothing was written")
        preview = await self.preview(op)
        kind = ops.kind_of(op)
        # `allow` lets the person's own requests through; what the model proposes is asked, unless the
        # person said "always" to its kind at such a question: library text can never write unasked.
        allowed = (mode == "allow" and proposer == "user") or kind in await anyio.to_thread.run_sync(
            self.journal.always_allowed)
        state: Literal["queued", "awaiting_consent"] = "queued" if allowed else "awaiting_consent"
        record = await anyio.to_thread.run_sync(
            lambda: self.journal.add(op, preview, state, session_id=session_id, face=face, proposer=proposer))
        log.info("write %s proposed by the %s in %s: %s (%s)", record.id, proposer, face, kind, state)
        if allowed:
            return await self._wait_applied(record.id)
        return record

    async def submit(
        self, op: Operation, *, session_id: str | None, face: str, consented: bool = False, proposer: Proposer = "user",
    ) -> WriteRecord:
        """`propose`, then `confirm` when the person already said yes to this exact write in the face
        that sends it (`consented`: a terminal's --yes, a card's button). A model's write is always
        proposed only: its consent is the person's, asked by the face."""
        record = await self.propose(op, session_id=session_id, face=face, proposer=proposer)
        if consented and proposer == "user" and record.state == "awaiting_consent":
            return await self.confirm(record.id)
        return record

    # --- the faces' requests, as operations ----------------------------------------------------------

    async def collection_key(self, ref: str, library: str = "user") -> str:
        """The key of the collection `ref` names (its key, name or path; or one a write is creating)."""
        pending = await anyio.to_thread.run_sync(self.journal.created_collection_key, ref)
        return pending or await self._find_collection(ref)

    async def save_note(
        self, markdown: str, *, parent: str | None = None, collection: str | None = None,
        citations: Sequence[ops.Citation] = (), library: str = "user",
    ) -> ops.SaveNote:
        key = await self.collection_key(collection, library) if collection else None
        return ops.save_note(markdown, parent=parent, collection=key, citations=tuple(citations), library=library)

    async def add_to_collection(self, items: Sequence[str], collection: str, *, library: str = "user") -> ops.AddToCollection:
        return ops.add_to_collection(list(items), await self.collection_key(collection, library), library=library)

    async def create_collection(self, name: str, *, parent: str | None = None, library: str = "user") -> ops.CreateCollection:
        key = await self.collection_key(parent, library) if parent else None
        return ops.create_collection(name, parent=key, library=library)

    async def add_item(
        self, *, item: ops.ItemFields | None = None, csl: dict[str, object] | None = None, doi: str | None = None,
        collection: str | None = None, library: str = "user",
    ) -> ops.AddItem:
        """A new item from its fields, its CSL-JSON, or its DOI (looked up at Crossref: the DOI is all
        that leaves the machine), one of the three."""
        if sum(x is not None for x in (item, csl, doi)) != 1:
            raise InvalidInput("give the new item as fields (item_type, title, ...), as CSL-JSON or as a DOI, one of the three")
        if doi is not None:
            if self._item_for_doi is None:
                raise InvalidInput("this daemon cannot look a DOI up: give the item's fields or CSL-JSON")
            fields = await self._item_for_doi(doi)
        else:
            fields = item if item is not None else item_from_csl(dict(csl or {}))
        key = await self.collection_key(collection, library) if collection else None
        return ops.add_item(fields, collection=key, library=library)

    async def confirm(self, write_id: str, *, always: bool = False) -> WriteRecord:
        """The person said yes: queue the write and wait (bounded) until it is applied. `always`
        also lets later writes of its kind through without asking."""
        record = await anyio.to_thread.run_sync(self.journal.get, write_id)
        if record.state != "awaiting_consent":
            return record if record.state != "queued" else await self._wait_applied(write_id)
        if always:
            await anyio.to_thread.run_sync(self.journal.allow_always, record.kind)
        moved = await anyio.to_thread.run_sync(
            lambda: self.journal.transition(write_id, ("awaiting_consent",), "queued"))
        if moved is None:  # another face answered meanwhile
            return await anyio.to_thread.run_sync(self.journal.get, write_id)
        return await self._wait_applied(write_id)

    async def discard(self, write_id: str) -> WriteRecord:
        """The person said no, or gave up on a write still waiting for Zotero: nothing is written."""
        if write_id == self.applying:
            raise InvalidInput(f"write {write_id} is being written into Zotero right now; undo it once it is")
        moved = await anyio.to_thread.run_sync(
            lambda: self.journal.transition(write_id, ("awaiting_consent", "queued"), "discarded"))
        if moved is None:
            record = await anyio.to_thread.run_sync(self.journal.get, write_id)
            raise InvalidInput(f"write {write_id} is {record.state.replace('_', ' ')}: only a write not yet applied "
                               "can be discarded" + ("; undo it instead" if record.state == "applied" else ""))
        self._settle(write_id)
        return moved

    async def undo(self, write_id: str | None = None, *, session_id: str | None = None, face: str) -> WriteRecord:
        """Revert an applied write (the newest of the session, or of all, when none is named) through
        the same path; the undo is a write of its own, recorded, applied at once (asking for it is
        the consent). InvalidInput when there is nothing to undo."""
        if write_id is None:
            target = await anyio.to_thread.run_sync(self.journal.last_undoable, session_id)
            if target is None:
                raise InvalidInput("there is no write to undo" + (" in this session" if session_id else ""))
        else:
            target = await anyio.to_thread.run_sync(self.journal.get, write_id)
        if target.state != "applied":
            raise InvalidInput(f"write {target.id} is {target.state.replace('_', ' ')}: only an applied write can be undone")
        if target.undoes:
            raise InvalidInput(f"write {target.id} is itself an undo; Zotero's trash restores what it trashed")
        inverse = ops.inverse(target.operation, target.change or Change())
        if inverse is None:
            await anyio.to_thread.run_sync(lambda: self.journal.mark_undone(target.id, "nothing-to-undo"))
            return await anyio.to_thread.run_sync(self.journal.get, target.id)
        preview = f"Undo {target.id}: " + await self.preview(inverse, strict=False)
        record = await anyio.to_thread.run_sync(lambda: self.journal.add(
            inverse, preview, "queued", session_id=session_id or target.session_id, face=face, proposer="user",
            undoes=target.id))
        return await self._wait_applied(record.id)

    async def get(self, write_id: str) -> WriteRecord:
        return await anyio.to_thread.run_sync(self.journal.get, write_id)

    async def list(self, *, limit: int = 50, pending: bool = False, session_id: str | None = None) -> list[WriteRecord]:
        states = OPEN_STATES if pending else None
        return await anyio.to_thread.run_sync(
            lambda: self.journal.recent(limit=limit, states=states, session_id=session_id))

    # --- the applier -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Apply queued writes, in order, for as long as the daemon runs."""
        backoff = self._retry_s
        while True:
            self._wake = anyio.Event()
            stalled = await self._apply_queued()
            if stalled is None:
                backoff = self._retry_s
                await self._wake.wait()
            else:
                with anyio.move_on_after(backoff if stalled == "retry" else self._retry_s):
                    await self._wake.wait()
                backoff = min(backoff * 2, MAX_BACKOFF_S) if stalled == "retry" else self._retry_s

    async def _apply_queued(self) -> Literal["waiting", "retry"] | None:
        queued = await anyio.to_thread.run_sync(self.journal.queued)
        for n, record in enumerate(queued):
            outcome = await self._apply(record)
            if outcome is not None:
                # The writes behind it keep their order and wait for the same thing: their callers
                # hear so now, not when their wait for a first attempt runs out.
                for later in queued[n + 1:]:
                    await self._call(self.journal.note_attempt, later.id, self.waiting_for or NOT_RUNNING)
                    self._settle(later.id)
                return outcome
        self.waiting_for = None
        return None

    async def _apply(self, record: WriteRecord) -> Literal["waiting", "retry"] | None:
        op, reasons = record.operation, []
        for path in self.paths:
            try:
                await path.ready(op)
            except NotNow as exc:
                reasons.append(str(exc))
                continue
            self.applying = record.id
            try:
                return await self._apply_through(path, record)
            finally:
                self.applying = None
                self._settle(record.id)
        # Zotero closed says it all; otherwise each path's reason (no plugin, a local API that is off, ...).
        why = NOT_RUNNING if NOT_RUNNING in reasons else "; ".join(dict.fromkeys(reasons)) or "no way into Zotero is configured"
        self.waiting_for = why
        await self._call(self.journal.note_attempt, record.id, why)
        self._settle(record.id)
        return "waiting"

    async def _apply_through(self, path: WritePath, record: WriteRecord) -> Literal["retry"] | None:
        # An object an earlier write created may have the key Zotero gave it, not the one it chose.
        op = ops.with_given_keys(record.operation, await self._call(self.journal.given_keys))
        try:
            # What Zotero held before the first attempt, whichever path made it: a retry must not
            # re-read a state its own earlier attempt already changed.
            change = record.change if record.change is not None else await path.plan(op)
            await self._call(self.journal.note_change, record.id, path.name, change)
            made = await path.apply(op, change)
            if made is not None:
                await self._call(self.journal.note_made, record.id, made)
        except NotNow as exc:
            self.waiting_for = str(exc)
            await self._call(self.journal.note_attempt, record.id, str(exc))
            return "retry"
        except Refused as exc:
            await self._call(functools.partial(self.journal.transition, error=str(exc)), record.id, ("queued",), "failed")
            log.info("write %s refused by Zotero: %s", record.id, escape_for_log(exc))
            return None
        await self._call(functools.partial(self.journal.transition, error=None), record.id, ("queued",), "applied")
        if record.undoes:
            await self._call(self.journal.mark_undone, record.undoes, record.id)
        log.info("write %s applied through %s", record.id, path.name)
        return None

    @staticmethod
    async def _call(func: Callable[..., T], *args: object) -> T:
        """A journal call, off the event loop (each is one small committed transaction)."""
        return await anyio.to_thread.run_sync(functools.partial(func, *args))

    def _settle(self, write_id: str) -> None:
        event = self._settled.pop(write_id, None)
        if event is not None:
            event.set()

    async def _wait_applied(self, write_id: str) -> WriteRecord:
        """Wake the applier and wait until it has tried this write once (bounded): the record as it
        then stands (`applied`, `failed`, or `queued` with what it waits for in `error`)."""
        event = self._settled.setdefault(write_id, anyio.Event())
        self._wake.set()
        with anyio.move_on_after(SETTLE_WAIT_S):
            await event.wait()
        return await anyio.to_thread.run_sync(self.journal.get, write_id)

    # --- previews ------------------------------------------------------------------------------------

    async def preview(self, op: Operation, *, strict: bool = True) -> str:
        """What the write does, in words a person can check before saying yes. `strict`: items the
        library index does not hold are an error (NotFound); an undo names them by key."""
        keys = ops.item_keys(op)
        library = op.library
        titles = await self._titles(library, keys) if keys and strict else {}

        def listing(items: Sequence[str]) -> str:
            lines = [f'- "{titles[k]}" ({k})' if titles.get(k) else f"- {k}" for k in items[:PREVIEW_ITEMS]]
            if len(items) > PREVIEW_ITEMS:
                lines.append(f"- … and {len(items) - PREVIEW_ITEMS} more")
            return "\n".join(lines)

        def quoted(tags: Sequence[str]) -> str:
            return ", ".join(f'"{t}"' for t in tags)

        def tags(names: Sequence[str]) -> str:
            return ("the tags " if len(names) > 1 else "the tag ") + quoted(names)

        def plural(n: int, word: str) -> str:
            return f"{n} {word}" + ("" if n == 1 else "s")

        async def collection(key: str) -> str:
            name = await self._collection_name(library, key) or await anyio.to_thread.run_sync(
                self.journal.created_collection_name, key)
            if name is None and strict:
                raise NotFound(f"no collection {key} in your library", collectionKey=key)
            return f'"{name}" ({key})' if name else key

        match op:
            case ops.SaveNote():
                where = (f'on "{titles.get(op.parent, op.parent)}" ({op.parent})' if op.parent
                         else f"in the collection {await collection(op.collection)}" if op.collection else "as a standalone note")
                text = op.markdown if len(op.markdown) <= PREVIEW_NOTE_CHARS else (
                    op.markdown[:PREVIEW_NOTE_CHARS] + f"… ({len(op.markdown) - PREVIEW_NOTE_CHARS} more characters)")
                cites = f"\n\nwith {plural(len(op.citations), 'source')} listed under it" if op.citations else ""
                return f'Save a note "{ops.note_title(op.markdown)}" {where}:\n\n{text}{cites}'
            case ops.TagItems():
                return f"Add {tags(op.tags)} to {plural(len(op.items), 'item')}:\n{listing(op.items)}"
            case ops.UntagItems():
                return f"Remove {tags(op.tags)} from {plural(len(op.items), 'item')}:\n{listing(op.items)}"
            case ops.AddToCollection():
                return f"Add {plural(len(op.items), 'item')} to the collection {await collection(op.collection)}:\n{listing(op.items)}"
            case ops.RemoveFromCollection():
                return f"Take {plural(len(op.items), 'item')} out of the collection {op.collection}:\n{listing(op.items)}"
            case ops.CreateCollection():
                under = f" under {await collection(op.parent)}" if op.parent else ""
                return f'Create the collection "{op.name}"{under}'
            case ops.AddItem():
                item = op.item
                who = ", ".join((c.last_name or c.name) for c in item.creators[:3]) + (" et al." if len(item.creators) > 3 else "")
                facts = [f"{name}: {value}" for name, value in item.fields.items() if name in ("date", "DOI", "url", "publicationTitle")]
                into = f"\ninto the collection {await collection(op.collection)}" if op.collection else ""
                return f'Add a new item ({item.item_type}) "{item.title}"' + (f" by {who}" if who else "") + (
                    "\n" + "\n".join(facts) if facts else "") + into
            case ops.Retag():
                parts = [f"{k}: put back {quoted(v)}" for k, v in op.add.items()] + [
                    f"{k}: take off {quoted(v)}" for k, v in op.remove.items()]
                return "Restore the tags as they were:\n" + "\n".join(f"- {p}" for p in parts[:PREVIEW_ITEMS])
            case ops.Trash():
                what = [f"item {k}" for k in op.items] + [f"collection {k}" for k in op.collections]
                return "Move to Zotero's trash (restorable there): " + ", ".join(what)
