"""stdin/stdout as one anyio byte stream: how `zocratesd stdio --standalone` serves its editor."""

from __future__ import annotations

import os
import sys

import anyio
import anyio.abc
import anyio.to_thread


class FdStream(anyio.abc.ByteStream):
    """Two file descriptors as one anyio byte stream; blocking fd I/O runs in worker threads."""

    def __init__(self, rfd: int, wfd: int):
        self._rfd, self._wfd = rfd, wfd

    @classmethod
    def take_stdio(cls) -> FdStream:
        """fds 0/1 as the stream, and fd 1 for frames only: keep a private handle on it, and point
        fd 1 and sys.stdout at stderr, so a stray print() anywhere (ours or a library's) cannot
        corrupt the stream. Call it first, before anything can print."""
        out_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return cls(0, out_fd)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await anyio.to_thread.run_sync(os.read, self._rfd, max_bytes, abandon_on_cancel=True)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            n = await anyio.to_thread.run_sync(os.write, self._wfd, view)
            view = view[n:]

    async def send_eof(self) -> None:
        os.close(self._wfd)

    async def aclose(self) -> None:
        pass
