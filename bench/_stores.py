"""Session stores for the benchmarks: `<data>/zocrates-data/sessions.db` files filled fast, with
the bytes the daemon would have written, and the turns read back from them.

- `build_store()`: many short sessions and one long research chat (bench_store, bench_shim).
- `build_chat_sessions()`: research chats of given lengths, optionally compacted (bench_turns,
  bench_compaction, bench_peers).
- `build_bulk_store()`: hundreds of MB of chats, some deleted (bench_maintenance).

The tables are always made by the daemon's own session service (WAL and all). Rows go in through
ADK's own ORM classes (`StorageSession`, `StorageEvent.from_event`) in one transaction, so the bytes
are what `create_session` + `append_event` would have stored, ~100x faster; `build_bulk_store`
writes the same bytes with plain `executemany`, which is faster still at its size.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _data import TextGen, research_chat, session_id_at
from _report import timer

if TYPE_CHECKING:
    from google.adk.events import Event


def _new_store(data_dir: Path) -> Path:
    """The tables of `data_dir`'s store, made by the daemon's own session service; returns the file."""
    from zocratesd.store import SessionsDb
    from zocratesd.store.database import db_path

    data_dir.mkdir(parents=True, exist_ok=True)

    async def make_tables() -> None:
        async with SessionsDb.open(data_dir) as db:
            await db.prepare_tables()

    asyncio.run(make_tables())
    return db_path(data_dir)


def _insert_rows(db: Path, rows: Sequence[Any]) -> None:
    """ADK ORM rows in one transaction, then the WAL folded into the file."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session as OrmSession

    engine = create_engine(f"sqlite:///{db}")
    try:
        with OrmSession(engine) as orm:
            orm.add_all(rows)
            orm.commit()
    finally:
        engine.dispose()
    checkpoint(db)


def _naive_utc(epoch: float) -> datetime:
    """A timestamp as ADK's schema stores it (naive UTC DATETIME)."""
    from google.adk.sessions.schemas import v1

    return v1.timestamp_to_utc_datetime(epoch)


def _seed_event(state: dict[str, Any], timestamp: float) -> Event:
    """The daemon's seed bookkeeping event of a new session (title, created_at, ...), at `timestamp`."""
    from zocratesd.store import bookkeeping_event

    return bookkeeping_event(state).model_copy(update={"timestamp": timestamp})


def checkpoint(db: Path) -> None:
    """Fold the WAL into the main file, so the .db alone holds everything (safe to copy)."""
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def copy_db(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite file (the backup API, so a WAL is folded in)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    d = sqlite3.connect(str(dst))
    try:
        s.backup(d)
    finally:
        d.close()
        s.close()


# --- many sessions and one long chat (bench_store, bench_shim) -----------------------------------


@dataclass
class StoreInfo:
    db_path: Path
    session_ids: list[str]  # every session, the big one included
    big_session_id: str
    big_events: int  # rows of the big session (its seed event included)
    total_events: int
    build_s: float
    db_bytes: int
    big_event_data_bytes: int

    def as_json(self) -> dict[str, Any]:
        return {
            "db_path": str(self.db_path),
            "sessions": len(self.session_ids),
            "big_session_id": self.big_session_id,
            "big_session_events": self.big_events,
            "total_events": self.total_events,
            "build_s": round(self.build_s, 3),
            "db_bytes": self.db_bytes,
            "big_session_event_data_bytes": self.big_event_data_bytes,
        }


def build_store(data_dir: Path, *, sessions: int, events: int, seed: int = 20260101) -> StoreInfo:
    """Fill `<data_dir>/zocrates-data/sessions.db`: `sessions` sessions in all, each opened with the
    daemon's seed bookkeeping event (title, created_at; a fifth of them with a cwd), one of which (the
    newest) is a research chat of `events` events in all (seed included)."""
    from google.adk.sessions import Session as AdkSession
    from google.adk.sessions.schemas import v1

    from zocratesd.store import APP_NAME, USER_ID

    if sessions < 1 or events < 1:
        raise ValueError("need at least one session and one event")
    t_start = timer()
    db = _new_store(data_dir)

    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    now = time.time()
    first_created = now - 90 * 86400.0
    # Creation times spread over 90 days; the big chat is the newest session and runs ~until now.
    created = sorted(first_created + rng.uniform(0, 80 * 86400.0) for _ in range(sessions - 1))
    created.append(now - 8 * 86400.0)

    rows: list[Any] = [
        v1.StorageAppState(app_name=APP_NAME, state={}, update_time=_naive_utc(first_created)),
        v1.StorageUserState(app_name=APP_NAME, user_id=USER_ID, state={}, update_time=_naive_utc(first_created)),
    ]
    session_ids: list[str] = []
    big_id = ""
    big_data_bytes = 0
    total_events = 0
    for n, c in enumerate(created):
        sid = session_id_at(c, rng)
        session_ids.append(sid)
        is_big = n == len(created) - 1
        title = "Literature review: retrieval-augmented generation" if is_big else gen.text(40).rstrip(".?")
        seed_state: dict[str, Any] = {"title": title, "created_at": c}
        if n % 5 == 0:
            seed_state["cwd"] = f"/home/user/notes/project-{n}"
        evs = [_seed_event(seed_state, c + rng.uniform(0.001, 0.01))]
        if is_big:
            big_id = sid
            evs += research_chat(gen, events - 1, evs[0].timestamp)
        else:
            # A short exchange: a session with no message would be "empty" and, being older than
            # 24 h, removed by the daemon's start-up maintenance.
            evs += research_chat(gen, 2, evs[0].timestamp)
        adk_session = AdkSession(id=sid, app_name=APP_NAME, user_id=USER_ID)
        storage_events = [v1.StorageEvent.from_event(adk_session, e) for e in evs]
        if is_big:
            big_data_bytes = sum(len(json.dumps(se.event_data)) for se in storage_events)
        total_events += len(storage_events)
        rows.append(
            v1.StorageSession(
                app_name=APP_NAME, user_id=USER_ID, id=sid, state=dict(seed_state),
                create_time=_naive_utc(c), update_time=_naive_utc(evs[-1].timestamp),
            )
        )
        rows.extend(storage_events)

    _insert_rows(db, rows)
    # Keep every session: the default policy (100 sessions, 180 days) would prune this store at the
    # daemon's start-up, and the benchmark is about a large library.
    (db.parent / "zocrates_config.json").write_text(json.dumps({"max_saved_sessions": None, "session_retention_days": None}))
    return StoreInfo(
        db_path=db,
        session_ids=session_ids,
        big_session_id=big_id,
        big_events=events,
        total_events=total_events,
        build_s=timer() - t_start,
        db_bytes=db.stat().st_size,
        big_event_data_bytes=big_data_bytes,
    )


# --- chat sessions of given lengths, and their turns (bench_turns, bench_compaction, bench_peers) --


@dataclass(frozen=True)
class TurnSpan:
    invocation_id: str
    start: float  # timestamp of its first event
    end: float  # timestamp of its last event


def turn_spans(rows: Sequence[tuple[str | None, float, bool]]) -> list[TurnSpan]:
    """Turns of a session from (invocation_id, timestamp, has_content) in timestamp order: each
    invocation that has content. Content-less events (the daemon's bookkeeping, compactions) are
    not turns; their invocation ids are their own."""
    spans: dict[str, list[float]] = {}
    for inv, ts, has_content in rows:
        if not inv:
            continue
        if inv in spans:
            spans[inv][1] = max(spans[inv][1], ts)
        elif has_content:
            spans[inv] = [ts, ts]
    return sorted((TurnSpan(inv, s, e) for inv, (s, e) in spans.items()), key=lambda t: t.start)


def session_turn_rows(db: Path, session_id: str) -> list[tuple[str | None, float, bool]]:
    """(invocation_id, timestamp, has_content) of a session's events in order, read with plain
    sqlite3 (read-only; fine while a daemon writes, the store is in WAL mode)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        rows = conn.execute(
            "SELECT invocation_id, timestamp, json_extract(event_data, '$.content') IS NOT NULL "
            "FROM events WHERE session_id = ? ORDER BY timestamp, id",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    out = []  # timestamps are naive-UTC DATETIME text, as ADK stores them
    for inv, ts, has in rows:
        t = datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp() if isinstance(ts, str) else float(ts)
        out.append((inv, t, bool(has)))
    return out


@dataclass
class ChatSession:
    name: str
    session_id: str
    events: int  # rows in all: seed, history, and the compaction if any
    turns: int
    compacted_until: float | None


def build_chat_sessions(
    data_dir: Path, specs: Sequence[tuple[str, int, bool]], *, keep_turns: int = 2, seed: int = 20260101
) -> tuple[dict[str, ChatSession], float]:
    """Sessions of research chat in `<data_dir>/zocrates-data/sessions.db`, one per (name,
    history_events, compacted) spec: the daemon's seed bookkeeping event, then `research_chat`
    cut back to the last whole turn so that seed + history <= history_events (no dangling tool
    call). A compacted session also gets the daemon's own compaction event (`compaction_event`)
    covering all but its last `keep_turns` turns, and its state_delta in the session's state, as
    `append_event` would leave them. A history of 0 or 1 is just the seed event.

    Returns the sessions by name and the build seconds.
    """
    from google.adk.sessions import Session as AdkSession
    from google.adk.sessions.schemas import v1

    from zocratesd.compaction import compaction_event
    from zocratesd.store import APP_NAME, USER_ID

    t_start = timer()
    db = _new_store(data_dir)
    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    now = time.time()

    rows: list[Any] = []
    conn = sqlite3.connect(str(db))
    try:
        have_app_state = bool(conn.execute("SELECT count(*) FROM app_states").fetchone()[0])
    finally:
        conn.close()
    if not have_app_state:
        rows += [
            v1.StorageAppState(app_name=APP_NAME, state={}, update_time=_naive_utc(now - 30 * 86400.0)),
            v1.StorageUserState(app_name=APP_NAME, user_id=USER_ID, state={}, update_time=_naive_utc(now - 30 * 86400.0)),
        ]
    out: dict[str, ChatSession] = {}
    for n, (name, history, compacted) in enumerate(specs):
        created = now - 20 * 86400.0 + n * 60.0
        sid = session_id_at(created, rng)
        state: dict[str, Any] = {"title": f"Research chat ({name})", "created_at": created}
        evs = [_seed_event(state, created + 0.005)]
        if history > 1:
            chat = research_chat(gen, history - 1 + 8, evs[0].timestamp)
            # Cut back to whole turns that fit (events of a turn are contiguous in research_chat).
            keep = 0
            for i, e in enumerate(chat[: history - 1]):
                if i + 1 == len(chat) or chat[i + 1].invocation_id != e.invocation_id:
                    keep = i + 1
            evs += chat[:keep]
        spans = turn_spans([(e.invocation_id, e.timestamp, e.content is not None) for e in evs])
        until: float | None = None
        if compacted and len(spans) > keep_turns:
            covered = spans[: len(spans) - keep_turns]
            until = covered[-1].end
            summary = "Summary of the conversation so far: " + gen.text(2500)
            comp = compaction_event(covered[0].start, until, summary, covered=len(covered))
            comp.timestamp = evs[-1].timestamp + 1.0  # just after the history, which ended days ago
            evs.append(comp)
            state.update(comp.actions.state_delta)
        adk_session = AdkSession(id=sid, app_name=APP_NAME, user_id=USER_ID)
        rows.append(
            v1.StorageSession(
                app_name=APP_NAME, user_id=USER_ID, id=sid, state=state,
                create_time=_naive_utc(created), update_time=_naive_utc(evs[-1].timestamp),
            )
        )
        rows.extend(v1.StorageEvent.from_event(adk_session, e) for e in evs)
        out[name] = ChatSession(name=name, session_id=sid, events=len(evs), turns=len(spans), compacted_until=until)

    _insert_rows(db, rows)
    return out, timer() - t_start


# --- a big store, fast (bench_maintenance) -------------------------------------------------------


@dataclass
class BulkStoreInfo:
    db_path: Path
    sessions: int  # sessions left in the file
    dropped: int  # sessions deleted after the build (their pages are on the freelist)
    events: int  # events left in the file
    build_s: float
    db_bytes: int
    page_count: int
    freelist_count: int

    @property
    def freelist_ratio(self) -> float:
        return self.freelist_count / self.page_count if self.page_count else 0.0


def build_bulk_store(
    data_dir: Path, *, sessions: int, events_per_session: int, drop_every: int = 0, seed: int = 20260101
) -> BulkStoreInfo:
    """Fill `<data_dir>/zocrates-data/sessions.db` with `sessions` research chats of
    `events_per_session` events each (the daemon's seed bookkeeping event first), created over the
    last 90 days; then, if `drop_every` > 1, delete every `drop_every`-th session with its events,
    leaving their pages free. ~200 MB in ~15 s on 2 cores.

    Rows are what `append_event` stores (`json.dumps` of `Event.model_dump(exclude_none=True,
    mode="json")`, naive-UTC DATETIME text), built from four template chats with fresh ids and
    timestamps per session, and inserted with `executemany` in one rollback-journal transaction
    (synchronous off: this is a build, not a store). The file is put back in WAL mode at the end,
    as the daemon keeps it.
    """
    from google.adk.events import Event

    from zocratesd.store import APP_NAME, USER_ID

    t_start = timer()
    db = _new_store(data_dir)

    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    templates = [
        [ev.model_dump(exclude_none=True, mode="json") for ev in research_chat(gen, events_per_session - 1, 0.0)]
        for _ in range(4)
    ]
    now = time.time()

    def sql_dt(epoch: float) -> str:
        return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.execute("INSERT OR REPLACE INTO app_states VALUES (?, '{}', ?)", (APP_NAME, sql_dt(now - 90 * 86400.0)))
        conn.execute(
            "INSERT OR REPLACE INTO user_states VALUES (?, ?, '{}', ?)", (APP_NAME, USER_ID, sql_dt(now - 90 * 86400.0))
        )
        ids: list[str] = []
        for n in range(sessions):
            created = now - rng.uniform(1.0, 90.0) * 86400.0
            sid = session_id_at(created, rng)
            ids.append(sid)
            state = {"title": gen.text(40).rstrip(".?"), "created_at": created}
            rows = [_seed_event(state, created + 0.005).model_dump(exclude_none=True, mode="json")]
            inv_map: dict[str, str] = {}
            for tpl in templates[n % len(templates)]:
                ev = dict(tpl)
                ev["id"] = Event.new_id()
                ev["timestamp"] = created + 1.0 + tpl["timestamp"]
                inv = inv_map.setdefault(tpl["invocation_id"], f"e-{uuid.uuid4()}")
                ev["invocation_id"] = inv
                rows.append(ev)
            conn.executemany(
                "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(ev["id"], APP_NAME, USER_ID, sid, ev["invocation_id"], sql_dt(ev["timestamp"]), json.dumps(ev))
                 for ev in rows],
            )
            conn.execute(
                "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?)",
                (APP_NAME, USER_ID, sid, json.dumps(state), sql_dt(created), sql_dt(rows[-1]["timestamp"])),
            )
        conn.execute("COMMIT")
        dropped = ids[::drop_every] if drop_every > 1 else []
        if dropped:
            conn.execute("BEGIN")
            conn.executemany("DELETE FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?",
                             [(APP_NAME, USER_ID, sid) for sid in dropped])
            conn.executemany("DELETE FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
                             [(APP_NAME, USER_ID, sid) for sid in dropped])
            conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
        page_count = conn.execute("PRAGMA page_count").fetchone()[0]
        freelist = conn.execute("PRAGMA freelist_count").fetchone()[0]
        n_events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        conn.close()
    return BulkStoreInfo(
        db_path=db,
        sessions=sessions - len(dropped),
        dropped=len(dropped),
        events=n_events,
        build_s=timer() - t_start,
        db_bytes=db.stat().st_size,
        page_count=page_count,
        freelist_count=freelist,
    )
