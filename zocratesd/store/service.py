"""The ADK session service for a data dir, with the SQLite settings ADK leaves out.

ADK's DatabaseSessionService sets neither WAL nor a busy timeout (research/adk.md section 1). We set
both on every pooled connection, plus foreign keys, before the first query runs:

- WAL, so the read path (and a user's `sqlite3` shell) never blocks a turn's writes;
- synchronous=FULL (SQLite's default, restated on purpose): a committed event survives power loss;
  users were promised that their history never gets lost;
- a 30 s busy timeout instead of sqlite3's 5 s, so a long checkpoint or VACUUM delays a writer
  instead of failing its turn with "database is locked".
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import event as sa_event

from google.adk.sessions import DatabaseSessionService

from zocratesd import runtime

APP_NAME = "zocrates"
# zocratesd is a per-user daemon: every session belongs to the one local user.
USER_ID = "local"

BUSY_TIMEOUT_S = 30.0

_services: dict[Path, DatabaseSessionService] = {}


def db_path(zotero_data_dir: Path) -> Path:
    return runtime.state_dir(zotero_data_dir) / runtime.DB_NAME


def _configure_connection(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=FULL")
    finally:
        cur.close()


def get_session_service(zotero_data_dir: Path) -> DatabaseSessionService:
    """The one DatabaseSessionService for this data dir, created on first use (tables not yet made:
    await `prepare_tables()` at start so the first request does not pay for it)."""
    key = Path(zotero_data_dir).resolve()
    svc = _services.get(key)
    if svc is None:
        path = db_path(key)
        runtime.ensure_private_dir(path.parent)
        svc = DatabaseSessionService(
            db_url=f"sqlite+aiosqlite:///{path}",
            connect_args={"timeout": BUSY_TIMEOUT_S},
        )
        sa_event.listen(svc.db_engine.sync_engine, "connect", _configure_connection)
        _services[key] = svc
    return svc


async def close_session_services(zotero_data_dir: Path | None = None) -> None:
    """Dispose the engine(s): all of them, or the one for `zotero_data_dir`."""
    keys = list(_services) if zotero_data_dir is None else [Path(zotero_data_dir).resolve()]
    for key in keys:
        svc = _services.pop(key, None)
        if svc is not None:
            await svc.close()


def integrity_check(path: Path) -> str:
    """`PRAGMA integrity_check` on a separate connection: 'ok' or SQLite's first complaint."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
