"""An in-memory duplex byte pipe, to drive a Peer without sockets."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of an in-memory duplex byte pipe."""

    def __init__(self, send: Any, receive: Any):
        self._send, self._receive = send, receive

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise anyio.EndOfStream from None

    async def send(self, item: bytes) -> None:
        try:
            await self._send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise anyio.BrokenResourceError from None

    async def send_eof(self) -> None:
        await self._send.aclose()

    async def aclose(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


def pipe(buffer: int = 100) -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two connected ends: what one sends, the other receives."""
    a_send, b_recv = anyio.create_memory_object_stream[bytes](buffer)
    b_send, a_recv = anyio.create_memory_object_stream[bytes](buffer)
    return MemoryByteStream(a_send, a_recv), MemoryByteStream(b_send, b_recv)
