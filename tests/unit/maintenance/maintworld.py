"""Helpers for the maintenance tests: a real daemon core on a real sessions.db, and ways to age its
sessions.

Sessions are made by `Daemon.create_session` and filled through ADK's `append_event`; ages are set
afterwards by writing old `create_time` / `update_time` values into the file, the way months of
use would have left them.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adkevents import append_all, text

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.maintenance import Maintenance
from zocratesd.store import SessionsDb

DAY = 86400.0
HOUR = 3600.0


def sql_time(epoch: float) -> str:
    """An instant as ADK stores it: naive UTC, microseconds."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass
class World:
    daemon: Daemon
    maintenance: Maintenance
    config: ZocratesConfig
    db: Path
    free_bytes: int | None = None  # what the disk seam reports; None = the real disk

    @property
    def store(self) -> SessionsDb:
        """The daemon's owner of `db`."""
        return self.daemon.db

    @property
    def service(self) -> Any:
        return self.daemon.db.service

    async def chat(self, title: str = "chat", *, chars: int = 200, turns: int = 1) -> str:
        """A session with `turns` user/model exchanges of about `chars` characters each."""
        row = await self.daemon.create_session(title=title)
        events = []
        for t in range(turns):
            events += [text("user", f"{row.id}-{t}", "q" * chars), text("coordinator", f"{row.id}-{t}", "a" * chars)]
        await append_all(self.service, row.id, events)
        return row.id

    async def empty(self, title: str = "empty") -> str:
        return (await self.daemon.create_session(title=title)).id

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            with conn:
                return conn.execute(query, params).fetchall()
        finally:
            conn.close()

    def age(self, sid: str, *, created_ago: float | None = None, updated_ago: float | None = None) -> None:
        """Move a session's SQL create_time / update_time that many seconds into the past."""
        now = time.time()
        if created_ago is not None:
            self.sql("UPDATE sessions SET create_time = ? WHERE id = ?", (sql_time(now - created_ago), sid))
        if updated_ago is not None:
            self.sql("UPDATE sessions SET update_time = ? WHERE id = ?", (sql_time(now - updated_ago), sid))

    def ids(self) -> set[str]:
        return {r[0] for r in self.sql("SELECT id FROM sessions")}

    def events_of(self, sid: str) -> int:
        return self.sql("SELECT count(*) FROM events WHERE session_id = ?", (sid,))[0][0]

    def snapshot(self) -> dict[str, tuple[Any, list[tuple[str, str]]]]:
        """Every session's state and every event (id, event_data): what must survive a VACUUM."""
        out: dict[str, tuple[Any, list[tuple[str, str]]]] = {}
        for sid, state in self.sql("SELECT id, state FROM sessions"):
            evs = self.sql("SELECT id, event_data FROM events WHERE session_id = ? ORDER BY id", (sid,))
            out[sid] = (state, evs)
        return out


class _Usage:
    def __init__(self, free: int):
        self.free = free


def make_world(tmp_path: Path, **config: Any) -> World:
    cfg = ZocratesConfig(**config)
    daemon = Daemon(tmp_path, cfg)
    world: World

    def disk_usage(path: Path) -> Any:
        import shutil

        return shutil.disk_usage(path) if world.free_bytes is None else _Usage(world.free_bytes)

    m = Maintenance(daemon.db, daemon.locks, cfg, disk_usage=disk_usage)
    # The daemon's own pass is replaced by this one (with its disk seam): one Maintenance per store,
    # as in the daemon; a second would hold its own connection and every VACUUM would be "busy".
    daemon.maintenance = m
    world = World(daemon=daemon, maintenance=m, config=cfg, db=daemon.db.path)
    return world
