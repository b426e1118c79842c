"""The daemon's calls for the tools, over `DaemonLink`: tools.py's generators driven with anyio.

Here only the connection's failures are handled: a read lost with its connection is tried once
more on a fresh one (the daemon restarted meanwhile); a daemon that cannot be reached, or a
connection lost again, propagates (server.py makes it a tool error that says what to do).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

from zocrates_client import ConnectionLost, RpcError
from zocratesd.mcp import tools
from zocratesd.mcp.link import DaemonLink
from zocratesd.mcp.tools import DaemonCall

T = TypeVar("T")


class DaemonCalls:
    """The tools' calls over one `DaemonLink`; server.py's `ZocratesMcp` builds on it."""

    def __init__(self, link: DaemonLink) -> None:
        self.link = link

    async def drive(self, work: Generator[DaemonCall, Any, T]) -> T:
        """Run a tool generator to its end over the link: each call's result is sent in, an
        RpcError thrown in; ConnectionLost and LinkDown end it and propagate."""
        try:
            call = next(work)
            while True:
                try:
                    result = await self._call(call.method, call.params, retry=call.retry)
                except RpcError as exc:
                    call = work.throw(exc)
                else:
                    call = work.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            work.close()

    async def _call(self, method: str, params: dict[str, Any], *, retry: bool = True) -> Any:
        """One request to the daemon; a read is tried once more on a fresh connection when the
        first one was lost (the daemon restarted meanwhile)."""
        for attempt in (0, 1):
            client = await self.link.client()
            try:
                return await client.call(method, params)
            except ConnectionLost:
                self.link.lost()
                if not retry or attempt:
                    raise
        raise AssertionError("unreachable")

    async def _item(self, key: str, library: str | None, *, fulltext: bool = False, offset: int = 0) -> dict[str, Any]:
        return await self.drive(tools.item(key, library, fulltext=fulltext, offset=offset))

    async def _collection_key(self, wanted: str) -> str:
        return await self.drive(tools.collection_key(wanted))
