"""The session store: ADK's DatabaseSessionService on SQLite, and a fast read path beside it.

Writes go through ADK only. Reads that only show a session (the UI view, `session/load` replay,
listing) read the event rows directly, because ADK's `get_session` validates every event with
pydantic (~1 s at 5000 events); `tests/unit/store/test_read_equivalence.py` proves both give the
same result. The store imports nothing from the engine or the faces.
"""

from zocratesd.store.locks import SessionLocks
from zocratesd.store.reader import SessionReader, SessionRow
from zocratesd.store.database import APP_NAME, USER_ID, close_session_services, get_session_service
from zocratesd.store.ui import format_session_for_ui

__all__ = [
    "APP_NAME",
    "USER_ID",
    "SessionLocks",
    "SessionReader",
    "SessionRow",
    "close_session_services",
    "format_session_for_ui",
    "get_session_service",
]
