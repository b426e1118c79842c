"""The MCP face's early path (zocratesd/mcp/early.py), sans-IO: what it answers, keeps, drops and
hands to the SDK, and its line framing. tests/e2e/test_mcp.py checks its answers against the SDK's."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import version as sdk_version

from zocratesd.mcp import tools
from zocratesd.mcp.early import MAX_JSON_DEPTH, MAX_QUEUED, CancelTool, EarlySession, Forward, LineDecoder, Reply, RunTool


def line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode()


def request(rid: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return line(msg)


INIT = request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}})
INITIALIZED = line({"jsonrpc": "2.0", "method": "notifications/initialized"})


def cancel(rid: Any) -> bytes:
    return line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})


def opened() -> EarlySession:
    s = EarlySession()
    [reply] = s.receive(INIT)
    assert isinstance(reply, Reply) and reply.message["result"]["protocolVersion"] == "2025-06-18"
    assert s.receive(INITIALIZED) == []
    return s


def test_the_handshake_versions_are_the_pinned_sdks() -> None:
    assert tools.HANDSHAKE_PROTOCOL_VERSIONS == sdk_version.HANDSHAKE_PROTOCOL_VERSIONS


def test_quick_requests_are_answered_and_the_rest_kept_in_order_for_the_sdk() -> None:
    s = opened()
    assert s.receive(request(1, "ping")) == [Reply({"jsonrpc": "2.0", "id": 1, "result": {}})]
    [listed] = s.receive(request(2, "tools/list"))
    assert isinstance(listed, Reply) and [t["name"] for t in listed.message["result"]["tools"]][0] == "search_library"
    assert s.receive(request(3, "tools/call", {"name": "search_library", "arguments": {"query": "q"}})) == [
        RunTool(3, "search_library", {"query": "q"})]
    assert s.receive(request(4, "tools/call", {"name": "nope"})) == [RunTool(4, "nope", {})]  # the tool error, early
    kept = [request(5, "tools/call", {"name": "ask", "arguments": {"question": "q"}}), request(6, "resources/list"),
            request(7, "logging/setLevel", {"level": "info"}), line({"jsonrpc": "2.0", "id": 99, "result": {}})]
    for k in kept:
        assert s.receive(k) == []
    assert s.running == {3, 4} and s.has_queued
    assert s.hand_off() == [INIT, INITIALIZED, *kept]
    assert s.handed and s.initialize_id == 0
    # Handed off: everything goes to the SDK, but a cancel of an early call that is still running.
    assert s.receive(request(8, "ping")) == [Forward(request(8, "ping"))]
    assert s.receive(cancel(3)) == [CancelTool(3)]
    s.tool_done(3)
    assert s.receive(cancel(3)) == [Forward(cancel(3))]


def test_a_cancelled_queued_request_is_dropped_with_its_cancel() -> None:
    s = opened()
    ask = request("a", "tools/call", {"name": "ask", "arguments": {"question": "q"}})
    other = request("b", "prompts/list")
    s.receive(ask)
    s.receive(other)
    assert s.receive(cancel("a")) == []
    assert s.receive(cancel("zzz")) == []  # a cancel of nothing known: the SDK's to ignore
    assert s.hand_off() == [INIT, INITIALIZED, other, cancel("zzz")]


def test_a_running_early_call_is_cancelled_and_its_id_is_not_reused_meanwhile() -> None:
    s = opened()
    call = request(1, "tools/call", {"name": "get_item", "arguments": {"item_key": "ABCD1234"}})
    assert s.receive(call) == [RunTool(1, "get_item", {"item_key": "ABCD1234"})]
    assert s.receive(call) == []  # a duplicate id while it runs: the SDK's to judge
    assert s.receive(cancel(1)) == [CancelTool(1)]


def test_no_plain_initialize_first_means_the_sdk_answers_everything() -> None:
    for first in (request(1, "ping"), request(1, "initialize", {"protocolVersion": 5}),
                  request(1, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}), b"[1, 2]"):
        s = EarlySession()
        assert s.receive(first) == [] and s.receive(INIT) == [] and s.receive(request(2, "ping")) == []
        assert s.hand_off() == [first, INIT, request(2, "ping")] and s.initialize_id is None


def nested(levels: int) -> Any:
    """A value nested `levels` deep: lists, and an object inside."""
    value: Any = {"x": 1}
    for _ in range(levels - 1):
        value = [value]
    return value


def test_a_line_not_json_or_nested_too_deep_is_answered_with_an_error_in_every_state() -> None:
    fresh, early, handed = EarlySession(), opened(), opened()
    handed.hand_off()
    # The message, its params and the arguments are three levels: one past the limit in all.
    deep = request(7, "tools/call", {"name": "get_item", "arguments": {"item_key": nested(MAX_JSON_DEPTH - 2)}})
    for s in (fresh, early, handed):
        [parse] = s.receive(b"not json")
        assert isinstance(parse, Reply) and parse.message["id"] is None and parse.message["error"]["code"] == -32700
        [bottomless] = s.receive(b"[" * 5000 + b"]" * 5000)  # past orjson's own limit: a parse error too
        assert isinstance(bottomless, Reply) and bottomless.message["error"]["code"] == -32700
        [too_deep] = s.receive(deep)
        assert isinstance(too_deep, Reply) and too_deep.message["id"] == 7
        assert too_deep.message["error"] == {"code": -32600, "message": "Invalid Request",
                                             "data": f"nested deeper than {MAX_JSON_DEPTH} levels"}
    # At the limit: the SDK's (or the early path's) to answer.
    just = request(8, "tools/call", {"name": "get_item", "arguments": {"item_key": nested(MAX_JSON_DEPTH - 3)}})
    assert early.receive(just) == [RunTool(8, "get_item", {"item_key": nested(MAX_JSON_DEPTH - 3)})]
    assert handed.receive(just) == [Forward(just)]
    assert fresh.receive(INIT)[0].message["result"]  # type: ignore[union-attr]  # a bad first line does not end the early path


def test_requests_with_odd_params_are_left_to_the_sdk() -> None:
    s = opened()
    for odd in (request(1, "tools/list", {"cursor": 3}), request(2, "tools/call", {"name": 7}),
                request(3, "tools/call", {"name": "get_item", "arguments": []}), request(None, "ping"),
                request(True, "ping"), line({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": [1]})):
        assert s.receive(odd) == [], odd


def test_the_queue_is_bounded() -> None:
    s = opened()
    for i in range(MAX_QUEUED - 1):
        s.receive(request(i, "resources/list"))
    assert not s.queue_full
    s.receive(request("last", "resources/list"))
    assert s.queue_full


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


def test_arguments_called_plainly_valid_are_valid_for_jsonschema() -> None:
    """`tools._surely_valid` spares the import of jsonschema for plainly right arguments; it must
    never pass what jsonschema refuses (then the tool error would be lost)."""
    import random

    import jsonschema  # type: ignore[import-untyped]

    rng = random.Random(30)
    values: list[Any] = ["", "x", "ABCD1234", "abcd1234", "user", "groups/42", "groups/0", "list", "show", "extend",
                         "synthesize", "session-1", "q" * 2001, "\u2028", 0, 1, -1, 3, 50, 51, 500, 501, 10_000, 1.0, 2.5,
                         True, False, None, [], ["ABCD1234"], ["ABCD1234", "nope"], ["ABCD1234"] * 501, {}, {"a": 1}]
    surely = 0
    for tool in tools.schemas.TOOLS:
        schema = tool["inputSchema"]
        validator = jsonschema.Draft202012Validator(schema)
        keys = [*schema["properties"], "unknown"]
        for _ in range(3000):
            args = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, min(4, len(keys))))}
            if tools._surely_valid(schema, args):
                surely += 1
                assert validator.is_valid(args), (tool["name"], args)
    assert surely > 200  # it does pass plain arguments
    assert tools._surely_valid(tools._INPUT_SCHEMAS["search_library"], {"query": "attention heads", "top_k": 10})
    assert not tools._surely_valid(tools._INPUT_SCHEMAS["search_library"], {"query": "q", "top_k": 10.0})  # not sure: jsonschema's
