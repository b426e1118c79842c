"""The exceptions of zocrates_client. Every one derives from `ZocratesClientError`.

How a call fails on the wire (`RpcError`, `ConnectionLost`, `MessageTooLarge`) is the wire's own
(zocrates_wire.errors), shared with the daemon; finding the daemon and consuming its updates
(`ConnectError`, `DaemonNotRunning`, `UpdatesOverflow`) are this library's.
"""

from __future__ import annotations

from pathlib import Path

from zocrates_wire.errors import ConnectionLost, MessageTooLarge, RpcError, WireError

__all__ = [
    "ConnectError",
    "ConnectionLost",
    "DaemonNotRunning",
    "MessageTooLarge",
    "RpcError",
    "UpdatesOverflow",
    "ZocratesClientError",
]

#: Base class: catch this to handle every failure of the client library.
ZocratesClientError = WireError


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


class UpdatesOverflow(ZocratesClientError):
    """An update subscription's buffer filled up because it was not consumed fast enough.

    The subscription stopped receiving at that point: the updates it buffered are still delivered,
    then iteration raises this. Updates after the overflow are lost to it; subscribe again and
    resynchronise with `Client.load_session()`.
    """

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"more than {limit} session/update notifications were left unread; this subscription ended")
