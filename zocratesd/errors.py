"""Errors of the core API. Each has a stable `kind`; the faces map kinds to their own codes
(JSON-RPC error codes in `rpc/`, HTTP statuses in `shim/`), so the core never speaks either."""

from __future__ import annotations

from typing import Any


class ZocratesError(Exception):
    kind = "internal"

    def __init__(self, message: str, **data: Any):
        super().__init__(message)
        self.message = message
        self.data = data


class NotFound(ZocratesError):
    """The session (or invocation, interrupt, ...) named by the client does not exist."""

    kind = "not_found"


class SessionNotFound(NotFound):
    def __init__(self, session_id: str):
        super().__init__(f"no session with id {session_id!r}", sessionId=session_id)


class SessionBusy(ZocratesError):
    """Another turn, rewind, compaction or delete holds the session; refused at once, never queued."""

    kind = "session_busy"

    def __init__(self, session_id: str, activity: str):
        super().__init__(
            f"session {session_id!r} is busy ({activity} in progress); try again when it ends",
            sessionId=session_id,
            activity=activity,
        )


class CheckpointNotPending(ZocratesError):
    """An answer to a research checkpoint that is not waiting: already answered, rewound,
    superseded by a newer prompt, or never raised. Nothing changes."""

    kind = "checkpoint_not_pending"


class InvalidInput(ZocratesError):
    """A value from a client failed validation (bad id, bad title, ...)."""

    kind = "invalid_input"
