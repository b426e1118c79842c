"""The one error hierarchy of the core: every error a face may turn into an answer derives from
`ZocratesError` and is defined here.

Each class has a stable `kind` string, on the wire as JSON-RPC `data.kind` and as the HTTP error
`code` (protocol/README.md, "Errors"; protocol/http.md). Each face maps these classes in ONE table
keyed by class (`rpc/errors.py`: JSON-RPC code; `shim/errors.py`: HTTP status), looked up along the
MRO so a subclass (SessionNotFound) answers as its base (NotFound); the core never speaks either.
tests/unit/test_error_mapping.py fails when a class is missing from either table or from the docs.

Exceptions that never reach a face stay beside the code that raises and handles them:
ConfigError, RuntimeFileError, AlreadyRunning, ActivationError and ServiceError end the process
or a CLI command at start-up; StoreBusy, SwapBusy and SwapCheckFailed become a VACUUM skip reason
in the maintenance report; ProbeError is logged and the compactor does not compact; IndexCorrupt,
ZoteroDbError and LocalApiError become the library's status (or a fallback to the database);
PumpError belongs to the rpc face's transport, HttpError to the shim; a call's ConnectionLost and
RpcError are the wire's (zocrates_wire/errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


class ZocratesError(Exception):
    """Base of the tree; raised bare, it is a bug in the daemon (`internal`)."""

    # Class-level and stable: clients branch on it (`data.kind`, the SSE error's `code`).
    kind: ClassVar[str] = "internal"

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


class WriteRefused(ZocratesError):
    """A write into Zotero that will not be made: writes are off in the config. Nothing was written."""

    kind = "write_refused"


class OnlineOff(ZocratesError):
    """A search beyond the library while `online.mode` is off: nothing left the machine."""

    kind = "online_off"


class OnlineFailed(ZocratesError):
    """A look-up beyond the library that the provider could not answer (unreachable, an error, an
    answer not understood); nothing was changed."""

    kind = "online_failed"


class InvalidInput(ZocratesError):
    """A value from a client failed validation (bad id, bad title, ...)."""

    kind = "invalid_input"


class ModelError(ZocratesError):
    """The model endpoint failed a turn: HTTP error, timeout, unreachable, or an unusable answer.
    `data` carries `status` and `endpoint` when known."""

    kind = "model_error"


def lookup(table: Mapping[type[ZocratesError], T], cls: type[ZocratesError]) -> T:
    """A face's entry for `cls`: that of the nearest class along its MRO the table names, so a
    subclass answers as its base. KeyError only for a table without `ZocratesError` itself."""
    for base in cls.__mro__:
        if issubclass(base, ZocratesError) and base in table:
            return table[base]
    raise KeyError(cls)
