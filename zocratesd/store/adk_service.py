"""ADK's own `DatabaseSessionService` on sessions.db, with the store's pragmas and gate.

It brings SQLAlchemy, aiosqlite and the dialects ADK's schema module imports, so it is loaded only
when something needs ADK's own service (store/writer.py `adk()`, in a worker thread): a daemon
that starts on an existing store and answers a prompt never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.adk.sessions import DatabaseSessionService
from sqlalchemy import event as sa_event
from sqlalchemy import text as sa_text

from zocratesd.adkcompat import gate_orm_sessions
from zocratesd.store.sqlite import BUSY_TIMEOUT_S, StoreGate, apply_pragmas


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    apply_pragmas(dbapi_conn)


def make(path: Path, gate: StoreGate) -> DatabaseSessionService:
    """ADK's service for the file: every pooled connection with the store's pragmas, every ORM
    session through `gate`."""
    svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}", connect_args={"timeout": BUSY_TIMEOUT_S})
    sa_event.listen(svc.db_engine.sync_engine, "connect", _on_connect)
    gate_orm_sessions(svc, gate.request)
    return svc


async def journal_mode(svc: DatabaseSessionService) -> str:
    """Open one pooled connection now (its connect listener re-applies WAL and the pragmas) and
    return the file's journal mode."""
    async with svc.db_engine.connect() as conn:
        return str((await conn.execute(sa_text("PRAGMA journal_mode"))).scalar())
