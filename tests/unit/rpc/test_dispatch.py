"""The exact bytes of every reply the dispatch of a request can produce.

A client sees these byte for byte: key order, codes, messages, `data`. They were pinned against
jsonrpcserver's dispatch before rpc/dispatch.py replaced it (issue 22), and must not move. A
generic method table covers what the ACP table cannot reach (an arity error, an internal error);
the ACP table, over a real core `Daemon`, covers its own shapes (schema errors, core errors).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from memstream import MemoryByteStream, pipe

from zocrates_wire.errors import RpcError
from zocratesd.rpc.peer import MethodTable, Peer

pytestmark = pytest.mark.anyio


class RawClient:
    """Sends JSON lines, reads the daemon's lines as bytes (the reply exactly as written)."""

    def __init__(self, stream: MemoryByteStream) -> None:
        self.stream, self.buf = stream, b""

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send(json.dumps(message).encode() + b"\n")

    async def line(self) -> bytes:
        with anyio.fail_after(10):
            while b"\n" not in self.buf:
                self.buf += await self.stream.receive()
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    async def call(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> bytes:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.line()


def generic_table(log: list[str]) -> MethodTable:
    async def echo(peer: Peer, /, **params: Any) -> Any:
        return params

    async def nothing(peer: Peer, /, **params: Any) -> Any:
        return None

    async def two(peer: Peer, a: Any, b: Any) -> Any:
        return [a, b]

    async def refuse(peer: Peer, /, **params: Any) -> Any:
        kind, data = params["kind"], params.get("data")
        if kind == "no data":
            raise RpcError(-32002, "Resource not found")
        if kind == "unknown code":
            raise RpcError(4242, "Teapot")
        raise RpcError(-32002, "Resource not found", data)

    async def boom(peer: Peer, /, **params: Any) -> Any:
        raise RuntimeError(params.get("why", ""))

    async def note(peer: Peer, a: Any) -> None:
        log.append(f"note {a}")
        raise RuntimeError("a notification's error is never sent")

    return MethodTable(
        {"echo": echo, "nothing": nothing, "two": two, "refuse": refuse, "boom": boom, "note": note},
        notifications={"note"},
    )


@pytest.fixture
async def generic() -> AsyncIterator[tuple[RawClient, list[str]]]:
    server_end, client_end = pipe()
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(Peer(server_end, generic_table(log), name="dispatch-test").run)
        yield RawClient(client_end), log
        await client_end.send_eof()


async def test_results(generic: Any) -> None:
    c, _ = generic
    assert await c.call(1, "echo", {"a": 1, "_meta": {"x": "é"}}) == (
        '{"jsonrpc":"2.0","result":{"a":1,"_meta":{"x":"é"}},"id":1}\n'.encode()
    )
    assert await c.call("s-1", "echo") == b'{"jsonrpc":"2.0","result":{},"id":"s-1"}\n'
    assert await c.call(2, "nothing", {}) == b'{"jsonrpc":"2.0","result":null,"id":2}\n'
    assert await c.call(3, "two", {"b": 2, "a": 1}) == b'{"jsonrpc":"2.0","result":[1,2],"id":3}\n'


async def test_method_not_found(generic: Any) -> None:
    c, _ = generic
    assert await c.call(1, "no/such") == (
        b'{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found",'
        b'"data":{"kind":"method_not_found","detail":"no/such"}},"id":1}\n'
    )


async def test_arity_errors(generic: Any) -> None:
    c, _ = generic
    assert await c.call(1, "two", {"a": 1}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params",'
        b'"data":{"kind":"invalid_params","detail":"missing a required argument: \'b\'"}},"id":1}\n'
    )
    assert await c.call(2, "two", {"a": 1, "b": 2, "c": 3}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params",'
        b'"data":{"kind":"invalid_params","detail":"got an unexpected keyword argument \'c\'"}},"id":2}\n'
    )


async def test_errors_a_handler_raises(generic: Any) -> None:
    c, _ = generic
    head = b'{"jsonrpc":"2.0","error":{"code":-32002,"message":"Resource not found","data":'
    assert await c.call(1, "refuse", {"kind": "dict", "data": {"sessionId": "x"}}) == (
        head + b'{"kind":"not_found","sessionId":"x"}},"id":1}\n'
    )
    assert await c.call(2, "refuse", {"kind": "dict", "data": {"sessionId": "x", "kind": "gone"}}) == (
        head + b'{"sessionId":"x","kind":"gone"}},"id":2}\n'
    )
    assert await c.call(3, "refuse", {"kind": "bare", "data": "why"}) == head + b'{"kind":"not_found","detail":"why"}},"id":3}\n'
    assert await c.call(4, "refuse", {"kind": "bare", "data": None}) == head + b'{"kind":"not_found"}},"id":4}\n'
    assert await c.call(5, "refuse", {"kind": "no data"}) == head + b'{"kind":"not_found"}},"id":5}\n'
    assert await c.call(6, "refuse", {"kind": "unknown code"}) == (
        b'{"jsonrpc":"2.0","error":{"code":4242,"message":"Teapot","data":{"kind":"error"}},"id":6}\n'
    )


async def test_internal_errors(generic: Any) -> None:
    c, _ = generic
    assert await c.call(1, "boom", {"why": "kaboom"}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error",'
        b'"data":{"kind":"internal","detail":"kaboom"}},"id":1}\n'
    )
    assert await c.call(2, "boom") == (
        b'{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error","data":{"kind":"internal","detail":""}},"id":2}\n'
    )


async def test_a_notification_is_never_answered_even_when_it_fails(generic: Any) -> None:
    c, log = generic
    await c.send({"jsonrpc": "2.0", "method": "note", "params": {"a": 1}})  # runs, raises
    await c.send({"jsonrpc": "2.0", "method": "note", "params": {"b": 1}})  # wrong arity: not run
    await c.send({"jsonrpc": "2.0", "method": "note"})  # wrong arity: not run
    await c.send({"jsonrpc": "2.0", "method": "not/served"})
    assert await c.call(9, "nothing") == b'{"jsonrpc":"2.0","result":null,"id":9}\n'  # nothing came before it
    assert log == ["note 1"]


# --- the ACP table, over a real core Daemon --------------------------------------------------------


@pytest.fixture
async def acp(tmp_path: Path) -> AsyncIterator[tuple[RawClient, Any]]:
    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.rpc.acp import build_methods

    daemon = Daemon(tmp_path, ZocratesConfig())
    await daemon.start()
    server_end, client_end = pipe()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(Peer(server_end, build_methods(daemon), name="dispatch-acp").run)
            yield RawClient(client_end), daemon
            await client_end.send_eof()
    finally:
        await daemon.aclose()


async def test_acp_replies(acp: Any) -> None:
    c, daemon = acp
    v = daemon.version
    assert await c.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}) == (
        '{"jsonrpc":"2.0","result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true,'
        '"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false},'
        '"mcpCapabilities":{"http":false,"sse":false},'
        '"sessionCapabilities":{"list":{},"delete":{},"resume":{},"close":{}},'
        f'"_meta":{{"zocrates":{{"version":"{v}","protocolVersion":1,"extensions":["_zocrates/chat/resume","_zocrates/citations/export",'
        '"_zocrates/library/collections","_zocrates/library/find_quote","_zocrates/library/item","_zocrates/library/items","_zocrates/library/search",'
        '"_zocrates/library/status","_zocrates/library/suggestions","_zocrates/library/tags","_zocrates/online/search","_zocrates/session/get","_zocrates/session/rename","_zocrates/session/rewind",'
        '"_zocrates/storage/maintenance","_zocrates/storage/stats",'
        '"_zocrates/writes/add_item","_zocrates/writes/add_to_collection","_zocrates/writes/confirm","_zocrates/writes/create_collection","_zocrates/writes/discard","_zocrates/writes/get","_zocrates/writes/list","_zocrates/writes/save_note","_zocrates/writes/tag","_zocrates/writes/undo","_zocrates/writes/untag"'
        '],"maxFrameBytes":16777216}}},'
        f'"agentInfo":{{"name":"zocratesd","title":"Zocrates","version":"{v}"}},"authMethods":[]}},"id":1}}\n'
    ).encode()
    assert await c.call(2, "_zocrates/not/a/method", {}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found",'
        b'"data":{"kind":"method_not_found","detail":"_zocrates/not/a/method"}},"id":2}\n'
    )
    # The params' schema refuses (-32602, invalid_params, pydantic's errors)...
    assert await c.call(3, "_zocrates/session/get", {"_meta": {}}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params","data":{"kind":"invalid_params",'
        b'"errors":[{"loc":"sessionId","msg":"Field required","type":"missing"}]}},"id":3}\n'
    )
    # ...a core error answers with its class's code and message, its kind and its own data...
    assert await c.call(4, "_zocrates/session/get", {"sessionId": "nope"}) == (
        b'{"jsonrpc":"2.0","error":{"code":-32002,"message":"Resource not found",'
        b'"data":{"kind":"not_found","message":"no session with id \'nope\'","sessionId":"nope"}},"id":4}\n'
    )
    # ...and a notification, bad params or not, is never answered.
    await c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {}})
    await c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "nope"}})
    assert await c.call(5, "session/list", {"cwd": "/nowhere"}) == b'{"jsonrpc":"2.0","result":{"sessions":[]},"id":5}\n'


# --- what the ACP face costs before its first reply (issue 22) ------------------------------------


def test_the_acp_face_imports_no_jsonschema_and_builds_only_the_models_it_uses() -> None:
    """jsonrpcserver's package import brought jsonschema (and its referencing, rpds, attrs) and
    http.server: ~60 ms of a 300 ms cold start; and building every wire model's validator at
    import cost ~12 ms more. The first `initialize` builds the one model it validates."""
    probe = textwrap.dedent(
        """
        import sys
        import zocratesd.rpc.acp
        from pydantic import BaseModel
        from zocratesd.rpc import models

        wire = [v for v in vars(models).values() if isinstance(v, type) and issubclass(v, BaseModel)]
        built = lambda: sorted(m.__name__ for m in wire if m.__pydantic_complete__)
        heavy = ("jsonrpcserver", "jsonschema", "oslash", "referencing", "rpds")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m == "http.server"))
        print(built())
        models.InitializeParams.model_validate({"protocolVersion": 1})
        print(built())
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]", "['InitializeParams']"]
