"""How a call over the wire can fail. Every exception derives from `WireError`; the client
library's base class, `zocrates_client.ZocratesClientError`, is this class."""

from __future__ import annotations

from typing import Any

from zocrates_wire.jsonrpc import ERROR_CODES, INTERNAL_ERROR, UNKNOWN_CODE, ErrorObject, error_data


class WireError(Exception):
    """Base class of every failure of a call over the wire."""


class ConnectionLost(WireError):
    """The connection ended (the other side exited or closed it, or ours was closed) before an
    answer arrived. Raised by pending and later calls, and by an update subscription once its
    buffered updates are consumed."""


class MessageTooLarge(WireError):
    """A message to send is over the protocol's frame cap; it was not sent and the connection is intact."""


class RpcError(WireError):
    """An error answer to a request: the other side's (raised by the call), or ours (raised by a
    handler to answer its request with this error).

    `code` is the JSON-RPC code (-32002 unknown session, -32602 invalid params, 1001 session busy, ...;
    see protocol/README.md), `message` the short message (the code's standard one when not given),
    and `data` the error's data: for zocratesd an object with a stable `kind` and, usually, a human
    `message`. `method` names the call that failed, when known.
    """

    def __init__(self, code: int, message: str | None = None, data: Any = None, *, method: str | None = None):
        self.code = code
        self.message = message or ERROR_CODES.get(code, UNKNOWN_CODE).message
        self.data = data
        self.method = method
        super().__init__(self._describe())

    @property
    def kind(self) -> str | None:
        """`data.kind`, the stable machine-readable name of the error, when the sender gave one."""
        kind = self.data.get("kind") if isinstance(self.data, dict) else None
        return kind if isinstance(kind, str) else None

    @property
    def detail(self) -> str | None:
        """The human explanation in `data` (`message`, `detail`, or the validation `errors`), if any."""
        if not isinstance(self.data, dict):
            return None
        for key in ("message", "detail"):
            value = self.data.get(key)
            if isinstance(value, str) and value:
                return value
        errors = self.data.get("errors")
        if isinstance(errors, list):
            parts = [f"{e.get('loc')}: {e.get('msg')}" if e.get("loc") else str(e.get("msg")) for e in errors if isinstance(e, dict)]
            return "; ".join(parts) or None
        return None

    @classmethod
    def from_wire(cls, error: ErrorObject, method: str | None = None) -> RpcError:
        """Build from a response's `error` object, tolerating a malformed one."""
        code = error.get("code")
        message = error.get("message")
        return cls(
            code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            message if isinstance(message, str) else "Error",
            error.get("data"),
            method=method,
        )

    def to_wire(self) -> ErrorObject:
        """The `error` member of a reply answering with this error (`data` always has a `kind`)."""
        return {"code": self.code, "message": self.message, "data": error_data(self.code, self.data)}

    def _describe(self) -> str:
        head = f"{self.method}: " if self.method else ""
        detail = self.detail
        return f"{head}{self.message} ({self.code})" + (f": {detail}" if detail else "")
