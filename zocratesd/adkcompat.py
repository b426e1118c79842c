"""Every use of ADK's private names, in one place, checked against ADK's version at import.

The store's fast path writes the rows ADK's `DatabaseSessionService` writes and sets the update
marker its stale-writer check reads; the store routes ADK's ORM sessions through its gate; the
reference view rewinds as ADK rewinds; the models declare ADK's capabilities. None of that is
public API, so the pin (pyproject.toml: google-adk 2.13) is checked here, and a different ADK
fails the engine's start with a clear message instead of misbehaving later.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import google.adk
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.events import Event
from google.adk.events._rewind_events import _apply_rewinds
from google.adk.models._capabilities import LlmCapabilities
from google.adk.sessions import Session, _session_util

if TYPE_CHECKING:  # its module imports SQLAlchemy: built only when needed (store/writer.py)
    from google.adk.sessions import DatabaseSessionService

__all__ = [
    "LlmCapabilities", "StaleSessionError", "apply_rewinds", "gate_orm_sessions", "json_safe_state_delta",
    "set_update_marker", "update_marker",
]

# The ADK release whose private names below were read (major, minor).
SUPPORTED: Final = (2, 13)


def _release(version: str) -> tuple[int, int]:
    major, minor, *_ = version.split(".")
    return int(major), int(minor)


if _release(google.adk.__version__) != SUPPORTED:
    raise ImportError(
        f"zocratesd needs google-adk {SUPPORTED[0]}.{SUPPORTED[1]}.x (it uses private parts of it, "
        f"zocratesd/adkcompat.py); found {google.adk.__version__}"
    )


def apply_rewinds(events: list[Event]) -> list[Event]:
    """The events a session shows after its rewinds, as ADK computes them."""
    return list(_apply_rewinds(events))


def json_safe_state_delta(delta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An event's state delta split into its "app", "user" and "session" parts, as ADK stores it."""
    return _session_util.extract_json_safe_state_delta(delta)


def update_marker(session: Session) -> str | None:
    """The session row's update marker ADK's stale-writer check compares (None: ADK did not load it)."""
    return session._storage_update_marker


def set_update_marker(session: Session, marker: str) -> None:
    session._storage_update_marker = marker


def gate_orm_sessions(
    svc: DatabaseSessionService, wrap: Callable[[], AbstractAsyncContextManager[None]]
) -> None:
    """Run every ORM session of ADK's service inside `wrap()` (the store's gate). ADK opens each
    through `_rollback_on_exception_session`; its only other connection use is `prepare_tables`'
    first run."""
    inner = svc._rollback_on_exception_session

    @asynccontextmanager
    async def gated(*, read_only: bool = False) -> AsyncIterator[Any]:
        async with wrap():
            async with inner(read_only=read_only) as sql_session:
                yield sql_session

    svc._rollback_on_exception_session = gated  # type: ignore[method-assign]
