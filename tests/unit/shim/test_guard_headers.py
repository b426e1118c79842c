"""What every answer of the guard says (shim/guard.py): nosniff and Cross-Origin-Resource-Policy,
and the one configured exception, `/health` for an allowed page on the loopback host. Every answer
of a real daemon is checked in tests/e2e/test_shim_security.py."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from starlette.types import Message

from zocratesd.shim.guard import Guard

pytestmark = pytest.mark.anyio

PORT = 4321


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _headers(allowed: list[str], path: str, *, token: str = "") -> dict[bytes, bytes]:
    guard = Guard(_app, port=lambda: PORT, token="t" * 43, allowed_origins=allowed)
    head = [(b"host", f"127.0.0.1:{PORT}".encode())] + ([(b"authorization", f"Bearer {token}".encode())] if token else [])
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    with anyio.fail_after(5):
        await guard({"type": "http", "method": "GET", "path": path, "headers": head}, receive, send)
    return dict(sent[0]["headers"])


async def test_every_answer_is_same_origin_by_default() -> None:
    for path, token in (("/health", ""), ("/sessions", ""), ("/sessions", "t" * 43)):
        h = await _headers([], path, token=token)
        assert h[b"cross-origin-resource-policy"] == b"same-origin" and h[b"x-content-type-options"] == b"nosniff"
    # An allowed origin of another site changes nothing.
    assert (await _headers(["http://trusted.example"], "/health"))[b"cross-origin-resource-policy"] == b"same-origin"


async def test_an_allowed_page_on_this_host_may_probe_health_only() -> None:
    allowed = ["http://127.0.0.1:5555"]
    assert (await _headers(allowed, "/health"))[b"cross-origin-resource-policy"] == b"same-site"
    for path, token in (("/sessions", ""), ("/sessions", "t" * 43), ("/ui/app.js", "")):
        assert (await _headers(allowed, path, token=token))[b"cross-origin-resource-policy"] == b"same-origin", path
    # Not a loopback origin, or not a plain one: no exception.
    for origin in ("https://127.0.0.1:5555", "http://127.0.0.1.attacker.example:80", "http://127.0.0.2:5555", "http://127.0.0.1"):
        assert (await _headers([origin], "/health"))[b"cross-origin-resource-policy"] == b"same-origin", origin
