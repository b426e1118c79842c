"""The shim's limits, in process: the connection cap against the fd limit (shim/server.py), and the
guard's deadlines and sizes for bodies with and without the token, and its budget (shim/guard.py). The connections themselves (cap,
eviction, head deadlines) are tested against a real daemon in tests/e2e/test_shim_limits.py."""

from __future__ import annotations

import json
import resource
import time
from typing import Any

import anyio
import pytest
from starlette.types import Message

from zocratesd.shim.guard import PUBLIC_MAX_BODY_BYTES, BodyLimits, Guard
from zocratesd.shim.server import FD_RESERVE, connection_cap

pytestmark = pytest.mark.anyio

TOKEN = "t" * 43
PORT = 4321


def test_the_cap_leaves_a_reserve_of_descriptors() -> None:
    assert connection_cap(512, 65536) == 512
    assert connection_cap(512, 1024) == 512  # a desktop's default leaves room for the default cap
    assert connection_cap(2000, 1024) == 1024 - FD_RESERVE
    assert connection_cap(512, FD_RESERVE + 10) == 10
    assert connection_cap(512, FD_RESERVE) == 1  # absurdly low limits still serve one
    assert connection_cap(512, resource.RLIM_INFINITY) == 512


async def _app(scope: Any, receive: Any, send: Any) -> None:
    body = (await receive())["body"]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps({"got": len(body)}).encode()})


def _scope(length: int) -> dict[str, Any]:
    return {
        "type": "http", "method": "POST", "path": "/sessions", "headers": [
            (b"host", f"127.0.0.1:{PORT}".encode()), (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"), (b"content-length", str(length).encode())],
    }


async def _call(guard: Guard, scope: dict[str, Any], messages: list[Message], then_hang: bool) -> list[Message]:
    """Run the guard with a client that sends `messages`, then waits forever (a stalled body) or disconnects."""
    sent: list[Message] = []
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then_hang:
            await anyio.sleep_forever()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    with anyio.fail_after(10):
        await guard(scope, receive, send)
    return sent


def _guard(body_timeout_s: float) -> Guard:
    return Guard(_app, port=lambda: PORT, token=TOKEN, allowed_origins=[], body_timeout_s=body_timeout_s)


async def test_a_stalled_body_is_answered_408_at_its_deadline() -> None:
    started = time.monotonic()
    sent = await _call(_guard(0.3), _scope(10), [{"type": "http.request", "body": b'{"ti', "more_body": True}], then_hang=True)
    elapsed = time.monotonic() - started
    assert 0.25 < elapsed < 5, elapsed  # at the deadline, not at once; the upper bound only for a loaded machine
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_timeout"


async def test_a_body_trickling_in_is_cut_at_the_deadline_not_reset_by_each_chunk() -> None:
    guard = _guard(0.5)
    chunks = 0
    sent: list[Message] = []

    async def receive() -> Message:  # a byte every 0.1 s, never the end
        nonlocal chunks
        await anyio.sleep(0.1)
        chunks += 1
        return {"type": "http.request", "body": b" ", "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    started = time.monotonic()
    with anyio.fail_after(10):
        await guard(_scope(1000), receive, send)
    # A deadline reset by each chunk would never come (fail_after stops that at 10 s).
    assert time.monotonic() - started < 5
    assert sent[0]["status"] == 408 and chunks >= 1


async def test_a_body_in_time_is_served_as_before() -> None:
    body = b'{"title": "x"}'
    sent = await _call(_guard(0.3), _scope(len(body)), [{"type": "http.request", "body": body, "more_body": False}], then_hang=True)
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"]) == {"got": len(body)}


def _exchange_scope(length: int) -> dict[str, Any]:
    return {
        "type": "http", "method": "POST", "path": "/auth/exchange", "headers": [
            (b"host", f"127.0.0.1:{PORT}".encode()), (b"content-type", b"application/json"),
            (b"content-length", str(length).encode())],
    }


async def test_a_tokenless_body_beyond_a_few_hundred_bytes_is_refused_before_it_is_read() -> None:
    read = 0

    async def receive() -> Message:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b" " * 600, "more_body": False}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await _guard(30)(_exchange_scope(PUBLIC_MAX_BODY_BYTES + 1), receive, send)
    assert sent[0]["status"] == 413 and read == 0
    assert "without the token" in json.loads(sent[1]["body"])["error"]["message"]
    # The same length with the token is read and served.
    served = await _call(_guard(30), _scope(PUBLIC_MAX_BODY_BYTES + 1), [
        {"type": "http.request", "body": b" " * (PUBLIC_MAX_BODY_BYTES + 1), "more_body": False}], then_hang=False)
    assert served[0]["status"] == 200


async def test_a_tokenless_body_has_seconds_not_the_owners_deadline() -> None:
    guard = Guard(_app, port=lambda: PORT, token=TOKEN, allowed_origins=[], body_timeout_s=30,
                  public_body=BodyLimits(PUBLIC_MAX_BODY_BYTES, 0.3))
    started = time.monotonic()
    sent = await _call(guard, _exchange_scope(100), [{"type": "http.request", "body": b"{", "more_body": True}], then_hang=True)
    assert sent[0]["status"] == 408 and time.monotonic() - started < 2


async def test_bodies_held_at_once_stay_within_the_budget() -> None:
    guard = Guard(_app, port=lambda: PORT, token=TOKEN, allowed_origins=[], body_budget_bytes=1000)
    first_in = anyio.Event()
    results: list[list[Message]] = []

    async def stalled() -> None:  # holds 800 bytes, declared, while its body trickles
        sent: list[Message] = []

        async def receive() -> Message:
            first_in.set()
            await anyio.sleep(0.5)
            return {"type": "http.request", "body": b" " * 800, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await guard(_scope(800), receive, send)
        results.append(sent)

    async with anyio.create_task_group() as tg:
        tg.start_soon(stalled)
        await first_in.wait()
        assert guard.buffered == 800
        refused = await _call(guard, _scope(300), [], then_hang=True)
        assert refused[0]["status"] == 503 and json.loads(refused[1]["body"])["error"]["code"] == "busy"
        assert (b"connection", b"close") in refused[0]["headers"]
        # A chunked body (no Content-Length) is counted as it arrives.
        chunked = {**_scope(0), "headers": [h for h in _scope(0)["headers"] if h[0] != b"content-length"]
                   + [(b"transfer-encoding", b"chunked")]}
        refused = await _call(guard, chunked, [{"type": "http.request", "body": b" " * 150, "more_body": True},
                                               {"type": "http.request", "body": b" " * 150, "more_body": True}], then_hang=True)
        assert refused[0]["status"] == 503
    assert results[0][0]["status"] == 200 and guard.buffered == 0
    ok = await _call(guard, _scope(900), [{"type": "http.request", "body": b" " * 900, "more_body": False}], then_hang=True)
    assert ok[0]["status"] == 200 and guard.buffered == 0
