"""`zocrates-data/writes.db`: every write zocratesd was asked to make into Zotero, from the moment it
is proposed, and what became of it. The journal is the file's one owner (as sessions.db's writer is
its own), and every change to a row is one committed transaction, so a daemon killed at any point
restarts knowing exactly which writes are waiting, which were applied, and what each changed.

A write's life: `awaiting_consent` (a person has to say yes in the face that asked) → `queued`
(consented; applied as soon as a path into Zotero is open) → `applied`; or `discarded` (the person
said no, or gave up on a queued write), `failed` (Zotero refused it: the reason is kept), `undone`
(a later write reverted it). Rows are never deleted: the journal is the record undo reads.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Literal, TypeAlias

import msgspec

from zocratesd.errors import InvalidInput, NotFound
from zocratesd.limits import WRITE_ID_RE
from zocratesd.locations import ensure_private_dir
from zocratesd.writes.operations import Change, CreateCollection, Operation, decode, encode, kind_of

JOURNAL_NAME = "writes.db"
SCHEMA_VERSION = 1
State: TypeAlias = Literal["awaiting_consent", "queued", "applied", "failed", "discarded", "undone"]
OPEN_STATES: tuple[State, ...] = ("awaiting_consent", "queued")
Proposer: TypeAlias = Literal["user", "model"]

_SCHEMA = f"""
PRAGMA user_version = {SCHEMA_VERSION};
CREATE TABLE IF NOT EXISTS writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    operation BLOB NOT NULL,
    preview TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    session_id TEXT,
    face TEXT NOT NULL,
    proposer TEXT NOT NULL,
    undoes TEXT,
    undone_by TEXT,
    path TEXT,
    change BLOB,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE INDEX IF NOT EXISTS writes_state ON writes(state);
CREATE TABLE IF NOT EXISTS always_allowed (
    kind TEXT PRIMARY KEY,
    since REAL NOT NULL
);
"""

_COLUMNS = ("seq, id, kind, operation, preview, state, created_at, updated_at, session_id, face, proposer, "
            "undoes, undone_by, path, change, attempts, error")


class WriteRecord(msgspec.Struct, frozen=True):
    seq: int
    id: str
    kind: str
    operation: Operation
    preview: str
    state: State
    created_at: float
    updated_at: float
    session_id: str | None
    face: str
    proposer: Proposer
    undoes: str | None = None
    undone_by: str | None = None
    path: str | None = None  # how it reached Zotero: plugin, local_api, connector
    change: Change | None = None
    attempts: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        """The shape every face shows (protocol/README.md, `_zocrates/writes/*`)."""
        out: dict[str, object] = {
            "id": self.id, "kind": self.kind, "state": self.state, "preview": self.preview,
            "created_at": _iso(self.created_at), "updated_at": _iso(self.updated_at),
            "session_id": self.session_id, "face": self.face, "proposed_by": self.proposer,
            "operation": msgspec.to_builtins(self.operation),
        }
        if self.undoes:
            out["undoes"] = self.undoes
        if self.undone_by:
            out["undone_by"] = self.undone_by
        if self.path:
            out["path"] = self.path
        if self.change is not None:
            out["created"] = [*self.change.created_items, *self.change.created_collections]
        if self.error:
            out["error"] = self.error
        return out


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


_change_decoder = msgspec.json.Decoder(Change)


def _record(row: tuple[Any, ...]) -> WriteRecord:
    (seq, wid, kind, op, preview, state, created, updated, session_id, face, proposer,
     undoes, undone_by, path, change, attempts, error) = row
    return WriteRecord(
        seq=seq, id=wid, kind=kind, operation=decode(op), preview=preview, state=state, created_at=created,
        updated_at=updated, session_id=session_id, face=face, proposer=proposer, undoes=undoes, undone_by=undone_by,
        path=path, change=_change_decoder.decode(change) if change else None, attempts=attempts, error=error,
    )


class Journal:
    """The one owner of writes.db. Blocking and quick (one small transaction per call); the service
    calls it from a worker thread. A lock serialises this process's use of the one connection."""

    def __init__(self, state_dir: Path):
        ensure_private_dir(state_dir)
        self.path = state_dir / JOURNAL_NAME
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")  # a recorded consent or change survives power loss
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _one(self, where: str, args: tuple[object, ...]) -> WriteRecord | None:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM writes WHERE {where}", args).fetchone()
        return _record(row) if row else None

    def add(
        self, op: Operation, preview: str, state: State, *, session_id: str | None, face: str, proposer: Proposer,
        undoes: str | None = None,
    ) -> WriteRecord:
        now = time.time()
        wid = "w-" + secrets.token_hex(6)
        with self._lock:
            self._conn.execute(
                "INSERT INTO writes (id, kind, operation, preview, state, created_at, updated_at, session_id, face,"
                " proposer, undoes) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (wid, kind_of(op), encode(op), preview, state, now, now, session_id, face, proposer, undoes),
            )
            found = self._one("id = ?", (wid,))
        assert found is not None
        return found

    def get(self, wid: str) -> WriteRecord:
        if not isinstance(wid, str) or not WRITE_ID_RE.match(wid):
            raise InvalidInput(f"{str(wid)[:40]!r} is not a write id (they look like w-1a2b3c4d5e6f)")
        with self._lock:
            found = self._one("id = ?", (wid,))
        if found is None:
            raise NotFound(f"no write {wid}", writeId=wid)
        return found

    def transition(self, wid: str, expected: tuple[State, ...], state: State, **fields: object) -> WriteRecord | None:
        """Move a write from one of `expected` to `state` (and set `fields`), atomically; None when it
        was no longer in `expected` (another face answered first)."""
        sets = ["state = ?", "updated_at = ?"] + [f"{name} = ?" for name in fields]
        values: list[object] = [state, time.time()]
        for value in fields.values():
            values.append(msgspec.json.encode(value) if isinstance(value, Change) else value)
        marks = ",".join("?" * len(expected))
        with self._lock:
            cur = self._conn.execute(
                f"UPDATE writes SET {', '.join(sets)} WHERE id = ? AND state IN ({marks})", (*values, wid, *expected))
            return self._one("id = ?", (wid,)) if cur.rowcount else None

    def note_change(self, wid: str, path: str, change: Change) -> None:
        """Record what a write is about to change, before it is sent: a retry after a crash reuses it."""
        with self._lock:
            self._conn.execute("UPDATE writes SET path = ?, change = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                               (path, msgspec.json.encode(change), time.time(), wid))

    def note_made(self, wid: str, change: Change) -> None:
        """Record what a write changed once Zotero said more than the plan knew (the keys it gave)."""
        with self._lock:
            self._conn.execute("UPDATE writes SET change = ?, updated_at = ? WHERE id = ?",
                               (msgspec.json.encode(change), time.time(), wid))

    def note_attempt(self, wid: str, error: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE writes SET error = ?, updated_at = ? WHERE id = ?", (error, time.time(), wid))

    def mark_undone(self, wid: str, by: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE writes SET state = 'undone', undone_by = ?, updated_at = ? WHERE id = ? AND state = 'applied'",
                               (by, time.time(), wid))

    def queued(self) -> list[WriteRecord]:
        with self._lock:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM writes WHERE state = 'queued' ORDER BY seq").fetchall()
        return [_record(r) for r in rows]

    def recent(self, *, limit: int, states: tuple[State, ...] | None = None, session_id: str | None = None) -> list[WriteRecord]:
        where, args = ["1"], list[object]()
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if session_id:
            where.append("session_id = ?")
            args.append(session_id)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM writes WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?", (*args, limit)
            ).fetchall()
        return [_record(r) for r in rows]

    def last_undoable(self, session_id: str | None) -> WriteRecord | None:
        """The newest applied write that is not itself an undo (of this session, when named)."""
        where = "state = 'applied' AND undoes IS NULL" + (" AND session_id = ?" if session_id else "")
        with self._lock:
            return self._one(where + " ORDER BY seq DESC LIMIT 1", (session_id,) if session_id else ())

    def created_collection_key(self, ref: str) -> str | None:
        """The key of a collection a write made or will make, named by its key (the one the write
        chose, or the one Zotero gave it) or its name."""
        for op, given in self._created_collections():
            if ref in (op.new_key, given, op.name):
                return op.new_key
        return None

    def _created_collections(self) -> list[tuple[CreateCollection, str | None]]:
        """The collections writes made or will make (proposed, not refused), each with the key
        Zotero gave it once made."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT operation, change FROM writes WHERE kind = 'create_collection' AND state IN "
                "('awaiting_consent', 'queued', 'applied') ORDER BY seq DESC LIMIT 200").fetchall()
        made = []
        for raw, raw_change in rows:
            if isinstance(op := decode(raw), CreateCollection):
                created = _change_decoder.decode(raw_change).created_collections if raw_change else ()
                made.append((op, created[0] if created else None))
        return made

    def given_keys(self) -> dict[str, str]:
        """For objects writes created under a key Zotero did not take (it chose its own), the key
        the write chose → the key Zotero gave."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT operation, change FROM writes WHERE kind IN ('save_note', 'add_item', 'create_collection') "
                "AND change IS NOT NULL AND state IN ('applied', 'undone') ORDER BY seq DESC LIMIT 500").fetchall()
        given = {}
        for raw_op, raw_change in rows:
            op, change = decode(raw_op), _change_decoder.decode(raw_change)
            made = (*change.created_items, *change.created_collections)
            new_key = getattr(op, "new_key", None)
            if made and new_key and made[0] != new_key:
                given[new_key] = made[0]
        return given

    def created_collection_name(self, key: str) -> str | None:
        """The name of a collection a write made or will make, by either of its keys."""
        return next((op.name for op, given in self._created_collections() if key in (op.new_key, given)), None)

    def always_allowed(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._conn.execute("SELECT kind FROM always_allowed")}

    def allow_always(self, kind: str) -> None:
        with self._lock:
            self._conn.execute("INSERT OR IGNORE INTO always_allowed (kind, since) VALUES (?, ?)", (kind, time.time()))
