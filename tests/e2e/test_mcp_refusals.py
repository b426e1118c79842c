"""What `zocratesd mcp` refuses, from outside: the official MCP SDK's client (the core in the
process, `--standalone`) and raw JSON lines on its stdio (test_mcp.py's `RawFace`, with a daemon it
starts), on a library whose one paper carries terminal control sequences (an OSC 52 clipboard
write, a screen clear, a bidirectional override, a NUL).

- `ask`'s answer text escapes the control characters the model quoted from the library, as every
  other tool's text does;
- integers past `limits.MAX_OFFSET` (get_item's `fulltext_offset`, a page's `offset`, a
  `resources/list` cursor) are a clear refusal naming the bound, not an internal error;
- an item URI with a trailing newline is not an item URI;
- a line that is not JSON, or nests deeper than `stdio.MAX_JSON_DEPTH`, gets an error reply, and
  the server goes on, whether it started the daemon or found it running.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcpworld import mcp_world
from test_mcp import RawFace
from zoterofixture import Item, Library

from zocratesd.limits import MAX_OFFSET
from zocratesd.mcp.stdio import MAX_JSON_DEPTH

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# A paper whose text would rewrite a terminal that showed it raw, or reorder what a reader sees.
HOSTILE = ("Okapi stripes hide calves in the forest \x1b]52;c;ZWNobyBoaQ==\x07 from leopards \x1b[2J"
           "\u202eden \x00 of the Congo.")
# Its title, as resources/list names it, would do the same.
TITLE = "Okapi stripes\x1b[2J\u202e"
RAW = ("\x1b", "\x07", "\u202e", "\x00")
HUGE = 10**30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(short_tmp: Path) -> Any:
    library = Library(items=[Item("OKAPIPAP", TITLE, creators=[("Ann", "Lee")], date="2020", fields={"abstractNote": HOSTILE})])
    with mcp_world(short_tmp, library, {"http": {"enabled": False}}) as made:
        yield made


def _command(world: Any) -> list[str]:
    return ["-m", "zocratesd", "mcp", "--standalone", "--zotero-data-dir", str(world.data_dir)]


@asynccontextmanager
async def mcp(world: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=_command(world), env=world.env)
    async with stdio_client(params) as (read, write_), ClientSession(read, write_) as session:
        await session.initialize()
        yield session


async def _indexed(s: ClientSession) -> None:
    with anyio.fail_after(90):
        while not (await s.call_tool("search_library", {"query": "okapi stripes"})).structured_content["passages"]:  # type: ignore[index]
            await anyio.sleep(0.2)


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_the_ask_answer_escapes_control_characters_from_the_library(world: Any) -> None:
    async with mcp(world) as s:
        await _indexed(s)
        with anyio.fail_after(90):
            asked = await s.call_tool("ask", {"question": "How do okapi stripes hide calves from leopards?"})
            searched = await s.call_tool("search_library", {"query": "okapi stripes"})
    assert not asked.is_error and asked.structured_content is not None
    assert "\x1b]52;c;" in asked.structured_content["answer"]  # the model did quote the passage
    for text in (_text(asked), _text(searched)):  # the same escaping as search_library's
        assert not any(c in text for c in RAW), repr(text)
        assert "\\x1b]52;c;ZWNobyBoaQ==\\x07 from leopards \\x1b[2J" in text and "\\x00 of the Congo" in text


async def test_resource_names_escape_control_characters_from_the_library(world: Any) -> None:
    async with mcp(world) as s:
        await _indexed(s)
        with anyio.fail_after(60):
            listed = (await s.list_resources()).resources
    assert [r.uri for r in listed] == ["zotero://select/library/items/OKAPIPAP"]
    shown = [listed[0].name, listed[0].title or "", listed[0].description or ""]
    assert not any(c in text for text in shown for c in RAW), shown
    assert listed[0].name == "Okapi stripes\\x1b[2J\\x202e"


async def test_integers_past_the_bound_are_refused_clearly(world: Any) -> None:
    async with mcp(world) as s:
        await _indexed(s)
        await s.list_prompts()  # answered by the SDK's server: what follows is its to answer (pydantic reads 10**30 exactly)
        with anyio.fail_after(60):
            for name, args in (("get_item", {"item_key": "OKAPIPAP", "fulltext": True, "fulltext_offset": HUGE}),
                               ("list_tags", {"offset": HUGE}), ("recent_items", {"offset": HUGE})):
                refused = await s.call_tool(name, args)
                assert refused.is_error and f"is greater than the maximum of {MAX_OFFSET}" in _text(refused), refused
            at_bound = await s.call_tool("get_item", {"item_key": "OKAPIPAP", "fulltext": True, "fulltext_offset": MAX_OFFSET})
            assert not at_bound.is_error and at_bound.structured_content["fulltext"]["chunks"] == []  # type: ignore[index]
            for cursor in (str(HUGE), str(MAX_OFFSET + 1), "-1", "1e3"):
                with pytest.raises(MCPError) as info:
                    await s.list_resources(params=types.PaginatedRequestParams(cursor=cursor))
                assert info.value.error.code == types.INVALID_PARAMS and "bad cursor" in info.value.error.message
            assert (await s.list_resources(params=types.PaginatedRequestParams(cursor=str(MAX_OFFSET)))).resources == []
            assert (await s.list_tools()).tools  # and the server goes on


def _opened(world: Any) -> RawFace:
    """`zocratesd mcp` on raw pipes (the daemon it starts is stopped with the world), past its handshake."""
    face = RawFace(world, world.env)
    face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    face.reply(1, timeout_s=60)
    face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return face


def _send_line(face: RawFace, line: bytes) -> None:
    assert face.proc.stdin is not None
    face.proc.stdin.write(line + b"\n")
    face.proc.stdin.flush()


def _deep(rid: int) -> bytes:
    """A tools/call one level deeper than MAX_JSON_DEPTH (its message, params and arguments are three)."""
    value = "[" * (MAX_JSON_DEPTH - 2) + '"x"' + "]" * (MAX_JSON_DEPTH - 2)
    return (f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"get_item",'
            f'"arguments":{{"item_key":{value}}}}}}}').encode()


def test_lines_not_json_or_nested_too_deep_are_answered_and_the_server_goes_on(world: Any) -> None:
    # The first face finds no daemon (and starts one); the second finds it running.
    for face_kind in ("starting the daemon", "with the daemon running"):
        face = _opened(world)
        try:
            for rid, stage in ((10, "first"), (20, "again")):
                where = f"{face_kind}, {stage}"
                _send_line(face, _deep(rid))
                refused = face.reply(rid)["error"]
                assert refused == {"code": -32600, "message": "Invalid Request",
                                   "data": f"nested deeper than {MAX_JSON_DEPTH} levels"}, where
                _send_line(face, b"[" * 100_000 + b"]" * 100_000)  # past any parser's limit: not JSON
                assert face.reply(None)["error"]["code"] == -32700, where
                _send_line(face, b'{"jsonrpc":"2.0","id":3,"method":')
                assert face.reply(None)["error"]["code"] == -32700, where
                face.send({"jsonrpc": "2.0", "id": rid + 1, "method": "ping"})
                assert face.reply(rid + 1)["result"] == {}
                face.send({"jsonrpc": "2.0", "id": rid + 2, "method": "prompts/list"})  # the server reads every line after
                assert face.reply(rid + 2)["result"]["prompts"]
        finally:
            face.close()
        assert face.proc.returncode == 0


def test_an_item_uri_with_a_trailing_newline_is_not_an_item(world: Any) -> None:
    face = _opened(world)
    try:
        deadline = time.monotonic() + 90
        rid = 1
        while True:  # until the item is indexed: then only the newline can make it not found
            rid += 1
            face.send({"jsonrpc": "2.0", "id": rid, "method": "resources/read", "params": {"uri": "zotero://select/library/items/OKAPIPAP"}})
            if "result" in (found := face.reply(rid)):
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.2)
        assert "Okapi stripes" in found["result"]["contents"][0]["text"]
        for uri in ("zotero://select/library/items/OKAPIPAP\n", "zotero://select/groups/1/items/OKAPIPAP\n"):
            rid += 1
            face.send({"jsonrpc": "2.0", "id": rid, "method": "resources/read", "params": {"uri": uri}})
            error = face.reply(rid)["error"]
            assert error["code"] == -32002 and "not a Zotero item URI" in error["message"], error
    finally:
        face.close()
