"""`zocratesd mcp` on a library the daemon is still reading, on long queries, on unknown items and
libraries, and the log a daemon started by it writes; driven by the official MCP SDK client over
stdio against a real daemon on a library written with Zotero's schema.

The daemon that is still reading its library is started through tests/daemon_entry.py with its
indexer held after its first batch of 100 items (of 150) until the test lets it go on; the paper a
search looks for is the last one, so it is indexed only once the test lets the indexer go on.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from daemon_entry import HOLD_INDEX_ENV
from daemonproc import TEST_ENTRY, DaemonProc
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcpworld import mcp_world
from rawrpc import RawConn
from zoterofixture import KEY_CHARS, Collection, Item, Library

from zocratesd import locations
from zocratesd.limits import MAX_QUERY_CHARS

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

FILLERS = 149
TARGET = "MTORXCT9"
TARGET_ABSTRACT = (
    "Cystine uptake through the xCT antiporter sustains glutathione synthesis in glioblastoma cells. We show that "
    "mTORC2 phosphorylates xCT at serine 26, inhibiting its transport activity, and that blocking mTORC2 raises "
    "cystine uptake, glutamate release and resistance to ferroptosis."
)
# A pasted abstract of 2,100 characters and more: the target's, with the body of a paper around it.
LONG_QUERY = (
    TARGET_ABSTRACT + " "
    + "Glioblastoma cells depend on cystine imported by the xCT antiporter, and mTORC2 signalling controls that import. "
    * 17
)[:2150]
HELD_AT = "indexing waits at 100/150"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def library() -> Library:
    """150 papers: 149 on soil nematodes (tagged, in a collection), then the one a search looks for."""
    fillers = [
        Item("FL" + "".join(KEY_CHARS[(i // len(KEY_CHARS) ** n) % len(KEY_CHARS)] for n in range(6)),
             f"Soil nematode survey {i}", creators=[("Ada", "Field")], date="2019", tags=["nematodes"],
             collections=["SOILCOL2"], fields={"abstractNote": f"Counts of soil nematodes at site {i} across seasons."})
        for i in range(FILLERS)
    ]
    target = Item(TARGET, "mTORC2 regulates the cystine-glutamate antiporter xCT", creators=[("Yuki", "Gu")], date="2017",
                  tags=["ferroptosis"], fields={"abstractNote": TARGET_ABSTRACT})
    return Library(items=[*fillers, target], collections=[Collection("SOILCOL2", "Soil")])


@pytest.fixture
def world(short_tmp: Path) -> Iterator[Any]:
    with mcp_world(short_tmp, library(), {"http": {"enabled": False}}) as made:
        yield made


@asynccontextmanager
async def held_daemon(world: Any, tmp: Path) -> AsyncIterator[Path]:
    """The world's daemon, its indexer held after its first 100 items until the yielded path exists."""
    release = tmp / "release-index"
    env = {**world.env, HOLD_INDEX_ENV: str(release)}
    daemon = DaemonProc(world.data_dir, tmp / "run", env, command=TEST_ENTRY)
    daemon.start()
    try:
        with anyio.fail_after(120):
            while HELD_AT not in daemon.stderr_text():
                await anyio.sleep(0.05)
        yield release
    finally:
        release.touch()
        daemon.stop()


@asynccontextmanager
async def mcp(world: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir)], env=world.env,
    )
    async with stdio_client(params) as (read, write_), ClientSession(read, write_) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, args: dict[str, Any], **kw: Any) -> types.CallToolResult:
    with anyio.fail_after(90):
        return await session.call_tool(name, args, **kw)


def ok(result: types.CallToolResult) -> tuple[dict[str, Any], str]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    text = result.content[0].text
    assert isinstance(text, str)
    return result.structured_content, text


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    text = result.content[0].text
    assert isinstance(text, str)
    return text


async def test_browse_tools_say_the_library_is_still_being_read_and_a_first_search_waits_for_it(
    world: Any, short_tmp: Path
) -> None:
    async with held_daemon(world, short_tmp) as release, mcp(world) as s:
        for tool, empty in (("list_collections", "No collections."), ("recent_items", "No items."), ("list_tags", "0 tags")):
            structured, text = ok(await call(s, tool, {}))
            assert "still being read" in text and "100 of 150 items" in text, (tool, text)
            assert text.split("\n")[0] != empty
            reading = structured["library_status"]
            assert (reading["state"], reading["items_done"], reading["items_to_index"]) == ("indexing", 100, 150), tool

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))
            release.touch()  # the search is waiting for the index: let the indexer go on

        found, text = ok(await call(s, "search_library", {"query": "mTORC2 xCT cystine"}, progress_callback=on_progress))
        assert found["passages"] and found["passages"][0]["item_key"] == TARGET, text
        assert found["library_state"] == "ready" and "still being read" not in text
        assert progress[0][:2] == (100.0, 150.0) and "100 of 150" in str(progress[0][2])
        values = [v for v, _, _ in progress]
        assert values == sorted(set(values)), values  # each above the one before


async def test_a_search_on_a_library_still_read_says_what_is_missing_and_unknown_scopes_are_errors(
    world: Any, short_tmp: Path
) -> None:
    async with held_daemon(world, short_tmp), mcp(world) as s:
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        found, text = ok(await call(s, "search_library", {"query": "mTORC2 xCT cystine"}, progress_callback=on_progress))
        # The wait ran out (the indexer never goes on): what is there, and what is not yet.
        assert not any(p["item_key"] == TARGET for p in found["passages"])
        assert found["library_state"] == "indexing" and found["library_status"]["items_done"] == 100
        assert "still being read" in text and "100 of 150 items" in text, text
        assert progress == [100.0]

        unknown_key = error_text(await call(s, "search_library", {"query": "nematodes", "item_keys": ["ZZZZZZZZ"]}))
        assert "ZZZZZZZZ" in unknown_key and "No passage matches" not in unknown_key, unknown_key
        unknown_lib = error_text(await call(s, "search_library", {"query": "nematodes", "library": "groups/999"}))
        assert "groups/999" in unknown_lib and "No passage matches" not in unknown_lib, unknown_lib


async def test_a_pasted_abstract_is_searched_by_its_key_terms_and_the_log_has_each_line_once(world: Any) -> None:
    async with mcp(world) as s:  # the daemon is the one `zocratesd mcp` starts, as users run it
        with anyio.fail_after(120):
            while True:
                structured, _ = ok(await call(s, "recent_items", {"limit": 1}))
                if "library_status" not in structured and structured["total"] == 150:
                    break
                await anyio.sleep(0.2)
        assert len(LONG_QUERY) > 2100
        found, text = ok(await call(s, "search_library", {"query": LONG_QUERY}))
        assert found["passages"][0]["item_key"] == TARGET, text
        assert len(found["query"].split()) <= 24 and "xct" in found["query"].split(), found["query"]
        assert "searched for its key terms" in text
        too_long = error_text(await call(s, "search_library", {"query": "x" * (MAX_QUERY_CHARS + 1)}))
        assert "too long" in too_long

        known = ok(await call(s, "search_library", {"query": "cystine", "item_keys": [TARGET]}))[0]
        assert {p["item_key"] for p in known["passages"]} == {TARGET}
        unknown = error_text(await call(s, "search_library", {"query": "cystine", "item_keys": [TARGET, "ZZZZZZZZ"]}))
        assert "no item ZZZZZZZZ in" in unknown, unknown
        assert "groups/77" in error_text(await call(s, "search_library", {"query": "cystine", "library": "groups/77"}))

    # The same over the daemon's socket: the core does it, for every face.
    info = locations.live_daemon(world.data_dir)
    assert info is not None
    with RawConn(info.socket) as c:
        found = c.result("_zocrates/library/search", {"query": LONG_QUERY})
        assert found["passages"][0]["item_key"] == TARGET and len(found["query"].split()) <= 24
        refused = c.call("_zocrates/library/search", {"query": "cystine", "itemKeys": ["ZZZZZZZZ"]})["error"]
        assert refused["code"] == -32002 and "no item ZZZZZZZZ" in refused["data"]["message"], refused

    log = (world.data_dir / "zocrates-data" / locations.LOG_NAME).read_text().splitlines()
    assert any("library ready" in line for line in log), log
    twice = [line for line in set(log) if log.count(line) > 1]
    assert not twice, twice
