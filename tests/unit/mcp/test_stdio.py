"""`zocratesd mcp`'s wire (zocratesd/mcp/stdio.py), sans-IO parts: its line framing, the depth check,
and what a line becomes for the SDK's server or as an error reply. tests/e2e/test_mcp_refusals.py
checks the replies from outside."""

from __future__ import annotations

import json
from typing import Any

import orjson
from mcp.shared.message import SessionMessage

from zocratesd.mcp.stdio import MAX_JSON_DEPTH, LineDecoder, _Wire, nested_deeper


def request(rid: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode()


def nested(levels: int) -> Any:
    """A value nested `levels` deep: lists, and an object inside."""
    value: Any = {"x": 1}
    for _ in range(levels - 1):
        value = [value]
    return value


def test_a_line_not_json_or_nested_too_deep_is_answered_with_an_error() -> None:
    for bad in (b"not json", b"[" * 5000 + b"]" * 5000):  # past orjson's own limit: a parse error too
        reply = orjson.loads(_Wire._message(bad))  # type: ignore[arg-type]
        assert reply["id"] is None and reply["error"]["code"] == -32700
    # The message, its params and the arguments are three levels: one past the limit.
    deep = request(7, "tools/call", {"name": "get_item", "arguments": {"item_key": nested(MAX_JSON_DEPTH - 2)}})
    too_deep = orjson.loads(_Wire._message(deep))  # type: ignore[arg-type]
    assert too_deep == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "Invalid Request",
                                                             "data": f"nested deeper than {MAX_JSON_DEPTH} levels"}}
    # At the limit: the server's to answer.
    just = request(8, "tools/call", {"name": "get_item", "arguments": {"item_key": nested(MAX_JSON_DEPTH - 3)}})
    assert isinstance(_Wire._message(just), SessionMessage)
    assert not nested_deeper(just, json.loads(just), MAX_JSON_DEPTH) and nested_deeper(deep, json.loads(deep), MAX_JSON_DEPTH)


def test_a_large_integer_reaches_the_server_exactly() -> None:
    message = _Wire._message(request(9, "tools/call", {"name": "list_tags", "arguments": {"offset": 10**30}}))
    assert isinstance(message, SessionMessage)
    assert message.message.params["arguments"]["offset"] == 10**30  # type: ignore[union-attr]


def test_json_that_is_not_json_rpc_goes_to_the_server_as_its_error() -> None:
    assert isinstance(_Wire._message(b'{"jsonrpc": "2.0", "id": 1}'), Exception)


def test_lines() -> None:
    d = LineDecoder(max_bytes=10)
    assert d.feed(b'{"a":1}\r\n\n  \n{"b"') == [b'{"a":1}']
    assert d.feed(b":2}\n") == [b'{"b":2}']
    assert d.feed("\u2028x\n".encode()) == ["\u2028x".encode()]  # only \n ends a line
    # Oversize: dropped whole, however it arrives, and counted; the next line is fine.
    assert d.feed(b"0123456789abc") == [] and d.dropped == 1
    assert d.feed(b"more\nok\n") == [b"ok"]
    assert d.feed(b"0123456789abcdef\nfine\n") == [b"fine"] and d.dropped == 2
    assert d.feed(b"last") == [] and d.feed(b"") == [b"last"]  # EOF gives a last line without \n
