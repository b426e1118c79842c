"""What `zocratesd mcp` refuses, from outside: the official MCP SDK's client and raw JSON lines on
its stdio, the core in the process (`--standalone`) on a library whose one paper carries terminal
control sequences (an OSC 52 clipboard write, a screen clear, a bidirectional override, a NUL).

- `ask`'s answer text escapes the control characters the model quoted from the library, as every
  other tool's text does;
- integers past `limits.MAX_OFFSET` (get_item's `fulltext_offset`, a page's `offset`, a
  `resources/list` cursor) are a clear refusal naming the bound, not an internal error;
- an item URI with a trailing newline is not an item URI;
- a line that is not JSON, or nests deeper than `early.MAX_JSON_DEPTH`, gets an error reply, both
  before and after the SDK has taken over.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from daemonproc import daemon_env
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from zoterofixture import Item, Library

from zocratesd.library.writer import write
from zocratesd.limits import MAX_OFFSET
from zocratesd.mcp.early import MAX_JSON_DEPTH

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# A paper whose text would rewrite a terminal that showed it raw, or reorder what a reader sees.
HOSTILE = ("Okapi stripes hide calves in the forest \x1b]52;c;ZWNobyBoaQ==\x07 from leopards \x1b[2J"
           "\u202eden \x00 of the Congo.")
RAW = ("\x1b", "\x07", "\u202e", "\x00")
HUGE = 10**30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(short_tmp: Path) -> Any:
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    data = short_tmp / "zotero"
    write(data, Library(items=[Item("OKAPIPAP", "Okapi stripes", creators=[("Ann", "Lee")], date="2020",
                                    fields={"abstractNote": HOSTILE})]))
    (data / "zocrates-data").mkdir()
    (data / "zocrates-data" / "zocrates_config.json").write_text(json.dumps({"http": {"enabled": False}}))

    class World:
        data_dir = data
        env = daemon_env(run)

    return World


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


class RawFace:
    """`zocratesd mcp --standalone` on its pipes, driven with raw lines."""

    def __init__(self, world: Any) -> None:
        self.proc = subprocess.Popen([sys.executable, *_command(world)], env=world.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: int, method: str, params: dict[str, Any] | None = None) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params else {})}).encode())

    def reply(self, rid: int | None, timeout_s: float = 60.0) -> dict[str, Any]:
        """The next reply with id `rid` (None: a reply to a line whose id could not be read)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                assert left > 0 and select.select([fd], [], [], left)[0], f"no reply to {rid} in {timeout_s} s"
                chunk = os.read(fd, 65536)
                assert chunk, "zocratesd mcp closed its stdout"
                self.buf += chunk
            line, _, self.buf = self.buf.partition(b"\n")
            msg = json.loads(line)
            if "method" not in msg and msg.get("id") == rid:
                return dict(msg)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _deep(rid: int) -> bytes:
    """A tools/call one level deeper than MAX_JSON_DEPTH (its message, params and arguments are three)."""
    value = "[" * (MAX_JSON_DEPTH - 2) + '"x"' + "]" * (MAX_JSON_DEPTH - 2)
    return (f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"get_item",'
            f'"arguments":{{"item_key":{value}}}}}}}').encode()


def test_lines_not_json_or_nested_too_deep_are_answered_before_and_after_the_hand_over(world: Any) -> None:
    face = RawFace(world)
    try:
        face.request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})
        face.reply(1)
        face.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        for rid, stage in ((10, "early"), (20, "handed over")):
            face.send(_deep(rid))
            refused = face.reply(rid)["error"]
            assert refused == {"code": -32600, "message": "Invalid Request",
                               "data": f"nested deeper than {MAX_JSON_DEPTH} levels"}, stage
            face.send(b"[" * 100_000 + b"]" * 100_000)  # past any parser's limit: not JSON
            assert face.reply(None)["error"]["code"] == -32700, stage
            face.send(b'{"jsonrpc":"2.0","id":3,"method":')
            assert face.reply(None)["error"]["code"] == -32700, stage
            face.request(rid + 1, "ping")
            assert face.reply(rid + 1)["result"] == {}
            face.request(rid + 2, "prompts/list")  # the SDK's to answer: from here on it reads every line
            assert face.reply(rid + 2)["result"]["prompts"]
    finally:
        face.close()
    assert face.proc.returncode == 0


def test_an_item_uri_with_a_trailing_newline_is_not_an_item(world: Any) -> None:
    face = RawFace(world)
    try:
        face.request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})
        face.reply(1)
        face.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        deadline = time.monotonic() + 90
        rid = 1
        while True:  # until the item is indexed: then only the newline can make it not found
            rid += 1
            face.request(rid, "resources/read", {"uri": "zotero://select/library/items/OKAPIPAP"})
            if "result" in (found := face.reply(rid)):
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.2)
        assert "Okapi stripes" in found["result"]["contents"][0]["text"]
        for uri in ("zotero://select/library/items/OKAPIPAP\n", "zotero://select/groups/1/items/OKAPIPAP\n"):
            rid += 1
            face.request(rid, "resources/read", {"uri": uri})
            error = face.reply(rid)["error"]
            assert error["code"] == -32002 and "not a Zotero item URI" in error["message"], error
    finally:
        face.close()
