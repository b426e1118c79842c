"""One writer per session: a turn, rewind, compaction or delete holds the session alone.

Two writers on one ADK session raise `StaleSessionError` (research/adk.md section 1), and a user
who sends a second prompt while the first still runs should be told so at once rather than wait
behind a queue they cannot see. So this is not a waiting lock: `hold()` either takes the session
or raises `SessionBusy` naming what holds it. Everything runs on one event loop, and the check and
the take happen without an await between them, so no further synchronisation is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from zocratesd.errors import SessionBusy


class SessionLocks:
    def __init__(self) -> None:
        self._held: dict[str, str] = {}

    @contextmanager
    def hold(self, session_id: str, activity: str) -> Iterator[None]:
        current = self._held.get(session_id)
        if current is not None:
            raise SessionBusy(session_id, current)
        self._held[session_id] = activity
        try:
            yield
        finally:
            del self._held[session_id]

    def activity(self, session_id: str) -> str | None:
        """What holds the session now, or None when it is free."""
        return self._held.get(session_id)

    def busy_sessions(self) -> frozenset[str]:
        """Sessions with something in flight: maintenance leaves these alone."""
        return frozenset(self._held)
