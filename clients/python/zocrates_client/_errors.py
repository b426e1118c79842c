"""The exceptions of zocrates_client. Every one derives from `ZocratesClientError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ZocratesClientError(Exception):
    """Base class: catch this to handle every failure of the client library."""


class ConnectError(ZocratesClientError):
    """No connection could be opened (socket refused, daemon failed to start, unsafe runtime file)."""


class DaemonNotRunning(ConnectError):
    """No daemon serves the data dir (or listens on the socket), and starting one was not asked for.

    `data_dir` is the Zotero data dir that was looked up (None when an explicit socket was given);
    `socket_path` is the socket that was tried, when there was one.
    """

    def __init__(self, data_dir: Path | None, socket_path: str | None = None):
        self.data_dir = data_dir
        self.socket_path = socket_path
        if data_dir is not None:
            message = (
                f"zocratesd is not running for {data_dir}; "
                f"start it with `zocratesd serve --zotero-data-dir {data_dir}`"
            )
        else:
            message = f"no zocratesd is listening on {socket_path}; start it with `zocratesd serve --socket {socket_path}`"
        super().__init__(message)


class ConnectionLost(ZocratesClientError):
    """The connection ended (the daemon exited or closed it, or the client was closed) before an
    answer arrived. Raised by pending and later calls, and by an update subscription once its buffered
    updates are consumed."""


class MessageTooLarge(ZocratesClientError):
    """A message to send is over the protocol's frame cap; it was not sent and the connection is intact."""


class UpdatesOverflow(ZocratesClientError):
    """An update subscription's buffer filled up because it was not consumed fast enough.

    The subscription stopped receiving at that point: the updates it buffered are still delivered,
    then iteration raises this. Updates after the overflow are lost to it; subscribe again and
    resynchronise with `Client.load_session()`.
    """

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"more than {limit} session/update notifications were left unread; this subscription ended")


class RpcError(ZocratesClientError):
    """The daemon answered a request with a JSON-RPC error.

    `code` is the JSON-RPC code (-32002 unknown session, -32602 invalid params, 1001 session busy, ...;
    see protocol/README.md), `message` the short message, and `data` the error's data: for zocratesd
    an object with a stable `kind` and, usually, a human `message`. Raise it from a server-request
    handler to answer that request with this error.
    """

    def __init__(self, code: int, message: str, data: Any = None, *, method: str | None = None):
        self.code = code
        self.message = message
        self.data = data
        self.method = method
        super().__init__(self._describe())

    @property
    def kind(self) -> str | None:
        """`data.kind`, the stable machine-readable name of the error, when the daemon gave one."""
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
    def from_wire(cls, error: dict[str, Any], method: str | None = None) -> RpcError:
        """Build from a response's `error` object, tolerating a malformed one."""
        code = error.get("code")
        message = error.get("message")
        return cls(
            code if isinstance(code, int) and not isinstance(code, bool) else -32603,
            message if isinstance(message, str) else "Error",
            error.get("data"),
            method=method,
        )

    def _describe(self) -> str:
        head = f"{self.method}: " if self.method else ""
        detail = self.detail
        return f"{head}{self.message} ({self.code})" + (f": {detail}" if detail else "")
