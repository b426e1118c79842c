"""The handshake before the wire stack has loaded: what the daemon serves from the moment its socket
listens until pydantic and the wire models (rpc/models.py, rpc/acp.py) are imported.

The first request of every client is `initialize`, whose answer needs nothing but the daemon's
version and limits, while the wire stack is a large part of a cold start (bench/PROFILE.md,
"Start-up"). So the socket listens first, the process loads the wire stack in the background
(process/), and meanwhile `StagedMethods` serves:

- `initialize` whose params are plainly valid (`plain_initialize`: exact JSON types, the fields
  the model names under their wire names): answered at once, by the agent's own answer
  (rpc/agent.py `initialize_result`);
- `_zocrates/library/status` whose params are plainly valid (`plain_library_status`): answered at
  once by the core (the library is not looked at yet, core/catalogue.py says "starting"), so a
  progress bar or `zocratesd status` polling a daemon that has just started is answered within
  its first moment too;
- everything else, a request the plain checks are unsure of included: held until the full
  table serves, then dispatched to it, so pydantic validates it exactly as it always does (its
  errors, its lax conversions). A held request is cancelled like any other.

The plain checks accept only what the models (`InitializeParams`, `LibraryStatusParams`) accept,
with the same values (tests/unit/rpc/test_handshake.py holds them to that), so where they answer,
pydantic would have answered the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import anyio

from zocratesd.limits import MAX_PROTOCOL_VERSION
from zocratesd.rpc.agent import NOTIFICATIONS, connection, initialize_result
from zocratesd.rpc.peer import Handler, MethodTable, Peer

# The wire names of InitializeParams' fields that hold an object or null, and their Python names:
# params that use a Python name (pydantic's populate_by_name) are left to pydantic.
_OBJECT_FIELDS: Final = ("clientCapabilities", "clientInfo", "_meta")
_PYTHON_NAMES: Final = frozenset({"protocol_version", "client_capabilities", "client_info", "meta"})
LIBRARY_STATUS: Final = "_zocrates/library/status"
_LIBRARY_STATUS_FIELDS: Final = frozenset({"refresh", "_meta"})

# The core's library status (`Daemon.library_status`): `refresh` asks for a look now.
LibraryStatus = Callable[[bool], object]


def plain_initialize(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """`(client capabilities, client info)` when `params` are plainly valid `initialize` params:
    `protocolVersion` an int in 0..65535 (not a bool, not a string), `clientCapabilities`,
    `clientInfo` and `_meta` absent, null or an object, no field under its Python name; any other
    member is an extra, which the model accepts. None: not sure, pydantic decides."""
    version = params.get("protocolVersion")
    if type(version) is not int or not 0 <= version <= MAX_PROTOCOL_VERSION:
        return None
    for name in _OBJECT_FIELDS:
        value = params.get(name)
        if value is not None and type(value) is not dict:
            return None
    if not _PYTHON_NAMES.isdisjoint(params):
        return None
    return params.get("clientCapabilities") or {}, params.get("clientInfo") or {}


def plain_library_status(params: Mapping[str, Any]) -> bool | None:
    """`refresh` when `params` are plainly valid `_zocrates/library/status` params: nothing but
    `refresh` (a bool, or absent) and `_meta` (absent, null or an object). None: not sure,
    pydantic decides."""
    if not _LIBRARY_STATUS_FIELDS.issuperset(params):
        return None
    refresh = params.get("refresh", False)
    meta = params.get("_meta")
    if type(refresh) is not bool or (meta is not None and type(meta) is not dict):
        return None
    return refresh


class StagedMethods(MethodTable):
    """The daemon's method table from the moment it listens: the plain handshake and library status
    at once, the rest once `serve(full)` has been called (rpc/dispatch.py asks `table_for` before
    each call)."""

    def __init__(self, version: str, max_frame_bytes: int, library_status: LibraryStatus):
        super().__init__({}, notifications=NOTIFICATIONS)
        self._version = version
        self._max_frame_bytes = max_frame_bytes
        self._library_status = library_status
        self._full: MethodTable | None = None
        self._served = anyio.Event()
        self._early: dict[str, Handler] = {"initialize": self._initialize, LIBRARY_STATUS: self._status}

    @property
    def full(self) -> MethodTable | None:
        return self._full

    def serve(self, full: MethodTable) -> None:
        """From now on every request goes to `full`, the held ones first."""
        if full.notifications != self.notifications:
            raise ValueError(f"the table's notifications {sorted(full.notifications)} are not {list(NOTIFICATIONS)}")
        self._full = full
        self._served.set()

    async def table_for(self, method: str, params: Mapping[str, Any]) -> Mapping[str, Handler]:
        """The table that serves this request: the full one, waited for unless this is a plain
        handshake that comes before it."""
        if self._full is None:
            if method == "initialize" and plain_initialize(params) is not None:
                return self._early
            if method == LIBRARY_STATUS and plain_library_status(params) is not None:
                return self._early
            await self._served.wait()
        assert self._full is not None
        return self._full

    async def _initialize(self, peer: Peer, /, **params: Any) -> dict[str, Any]:
        plain = plain_initialize(params)
        assert plain is not None  # table_for chose this table for it
        connection(peer).greet(*plain)
        return initialize_result(self._version, self._max_frame_bytes)

    async def _status(self, peer: Peer, /, **params: Any) -> object:
        refresh = plain_library_status(params)
        assert refresh is not None  # table_for chose this table for it
        return self._library_status(refresh)
