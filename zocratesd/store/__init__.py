"""The session store: ADK's DatabaseSessionService on SQLite, and a fast read path beside it.

`SessionsDb` (store/database.py) owns the file: the service, the reader, the writer, the pragmas
and the maintenance gate. Writes go through ADK's service (whose `append_event` and
`get_session` store/writer.py does with plain sqlite3). Reads that only show a session (the UI
view, `session/load` replay, listing) read the event rows directly, because ADK's `get_session`
validates every event with pydantic (bench/PROFILE.md section 2); `tests/unit/store/test_read_equivalence.py`
proves both give the same result. The store imports nothing from the engine or the faces.
"""

from zocratesd.store.database import SessionsDb, bookkeeping_event
from zocratesd.store.locks import SessionLocks
from zocratesd.store.reader import SessionReader, SessionRow
from zocratesd.store.sqlite import APP_NAME, USER_ID

__all__ = [
    "APP_NAME",
    "USER_ID",
    "SessionLocks",
    "SessionReader",
    "SessionRow",
    "SessionsDb",
    "bookkeeping_event",
]
