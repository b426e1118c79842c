"""A small HTTP client of the daemon's shim for tests (httpx, sync), an SSE reader, and what the
daemon's side of its TCP connections shows (/proc/net/tcp)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

# The states of a connection the daemon holds (accepted or about to be): ESTABLISHED, SYN_RECV,
# CLOSE_WAIT (the client closed, the daemon has not yet). Linux's /proc/net/tcp numbering.
_HELD_STATES = {"01", "03", "08"}


def held_connections(port: int) -> list[int]:
    """The daemon's side of each TCP connection to `port` it holds, as the bytes it has not read yet."""
    unread = []
    with open("/proc/net/tcp", encoding="ascii") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if int(local.split(":")[1], 16) == port and state in _HELD_STATES:
                unread.append(int(queues.split(":")[1], 16))
    return unread


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """A hang guard around an event the test polls for."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


class Shim:
    def __init__(self, info: dict[str, Any], timeout: float = 120.0):  # a hang guard, as RawConn's
        self.port = info["http"]["port"]
        self.token = info["token"]
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.base, timeout=timeout, headers={"Authorization": f"Bearer {self.token}"})

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Shim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, path, **kw)

    def ok(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        r = self.client.request(method, path, **kw)
        assert r.status_code == 200, (r.status_code, r.text)
        body = r.json()
        assert body["status"] == "success", body
        return body

    def chat(self, session_id: str, prompt: str, **fields: Any) -> list[dict[str, Any]]:
        body = {"prompt": prompt, "session_id": session_id, "active_items": [], "mode": "library", **fields}
        return self.sse("/chat", body)

    def resume(self, session_id: str, invocation_id: str, interrupt_id: str, **response: Any) -> list[dict[str, Any]]:
        """`POST /chat/resume` with `response` = {action, guidance?}; the SSE events."""
        body = {"session_id": session_id, "invocation_id": invocation_id, "interrupt_id": interrupt_id, "response": response}
        return self.sse("/chat/resume", body)

    def sse(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        with self.client.stream("POST", path, json=body) as r:
            assert r.status_code == 200, (r.status_code, r.read())
            assert r.headers["content-type"].startswith("text/event-stream")
            return list(sse_events(r.iter_lines()))


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[len("data: "):])
        else:
            assert line == "", f"unexpected SSE line {line!r}"
