"""The MCP face's write tools, from the official MCP SDK client: with elicitation the user is asked
the exact change in the call itself (accept writes, decline writes nothing); without it the result
is a pending write that confirm_write applies; undo reverts. Zotero is the Zotero 10 stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from daemonproc import daemon_env
from fake_openai import Behaviour, FakeOpenAI
from fake_zotero_api import FakeZoteroApi
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from test_writes_consent import INJECTED, QUESTION
from test_writes_zotero import notes_on, tags_of
from zoterofixture import build_zotero_dir, sample_library

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the MCP SDK's stdio client


class World:
    def __init__(self, tmp: Path, api: FakeZoteroApi, model: FakeOpenAI | None = None):
        run = tmp / "run"
        run.mkdir(mode=0o700)
        self.data_dir = tmp / "zotero"
        items, colls = sample_library()
        build_zotero_dir(self.data_dir, [*items, INJECTED], colls, version=129)
        (self.data_dir / "zocrates-data").mkdir()
        config: dict[str, Any] = {"library": {"local_api": False}, "http": {"enabled": False}}
        if model is not None:
            config["model"] = {"provider": "openai", "name": "fake/model", "base_url": model.base_url, "api_key_env": "ZQ_KEY"}
        (self.data_dir / "zocrates-data" / "zocrates_config.json").write_text(json.dumps(config))
        self.env = {**daemon_env(run), "ZOCRATES_LIBRARY__LOCAL_API_URL": api.base_url, "ZQ_KEY": "sk-e2e"}



@pytest.fixture
def world(short_tmp: Path, zotero10: FakeZoteroApi) -> Iterator[World]:
    w = World(short_tmp, zotero10)
    yield w
    subprocess.run([sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(w.data_dir)], env=w.env,
                   timeout=60, capture_output=True, check=False)


@asynccontextmanager
async def mcp(world: World, **session_kw: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir)],
                                   env=world.env)
    async with stdio_client(params) as (read, write_), ClientSession(read, write_, **session_kw) as session:
        await session.initialize()
        with anyio.fail_after(60):  # until the library is indexed: previews name the items
            while not (await session.call_tool("search_library", {"query": "honeybee"})).structured_content["passages"]:
                await anyio.sleep(0.2)
        yield session


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(120):
        result = await session.call_tool(name, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return {**result.structured_content, "_text": result.content[0].text}


async def test_with_elicitation_the_user_is_asked_the_exact_change(world: World, zotero10: FakeZoteroApi) -> None:
    asked: list[types.ElicitRequestParams] = []
    answers = iter(["accept", "decline"])

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action=next(answers), content={"always": False})

    async with mcp(world, elicitation_callback=on_elicit) as s:
        written = await call(s, "tag_items", {"item_keys": ["BEEKEEP1"], "tags": ["apiculture"]})
        assert written["state"] == "applied" and tags_of(zotero10, "BEEKEEP1") == ["apiculture"]
        assert 'Add the tag "apiculture"' in asked[0].message and "Honeybee Colony Collapse" in asked[0].message
        declined = await call(s, "save_note", {"markdown": "Mites matter.", "parent_item": "BEEKEEP1"})
        assert declined["state"] == "discarded" and notes_on(zotero10, "BEEKEEP1") == []
        assert "Nothing changed in Zotero" in declined["_text"]
        undone = await call(s, "undo", {})
        assert undone["state"] == "applied" and tags_of(zotero10, "BEEKEEP1") == []


async def test_without_elicitation_the_write_waits_for_confirm_write(world: World, zotero10: FakeZoteroApi) -> None:
    async with mcp(world) as s:
        listed = {t.name: t for t in (await s.list_tools()).tools}
        assert listed["untag_items"].annotations.destructive_hint and listed["tag_items"].annotations.idempotent_hint
        assert not listed["save_note"].annotations.idempotent_hint and not listed["tag_items"].annotations.read_only_hint
        pending = await call(s, "add_to_collection", {"item_keys": ["KARPDPR1"], "collection": "Miscellany"})
        assert pending["state"] == "awaiting_consent" and "confirm_write" in pending["_text"]
        listed = await call(s, "list_writes", {})
        assert [w["id"] for w in listed["writes"]] == [pending["id"]] and "Miscellany" in listed["_text"]
        assert "MISCCOLL" not in zotero10.item("KARPDPR1")["collections"]
        done = await call(s, "confirm_write", {"write_id": pending["id"], "decision": "write"})
        assert done["state"] == "applied" and "MISCCOLL" in zotero10.item("KARPDPR1")["collections"]
        item = await call(s, "add_item", {"csl": {"type": "article-journal", "title": "Winter Bee Clusters", "DOI": "10.1/bees"}})
        dropped = await call(s, "confirm_write", {"write_id": item["id"], "decision": "discard"})
        assert dropped["state"] == "discarded"
        assert not [i for i in zotero10.items if i["data"].get("title") == "Winter Bee Clusters"]


async def test_ask_puts_the_assistants_proposal_to_the_user_and_decline_writes_nothing(
    short_tmp: Path, zotero10: FakeZoteroApi,
) -> None:
    model = FakeOpenAI(behaviour=Behaviour(obey_library=True))
    w = World(short_tmp, zotero10, model)
    asked: list[str] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    try:
        async with mcp(w, elicitation_callback=on_elicit) as s:
            answered = await call(s, "ask", {"question": QUESTION})
        assert answered["status"] == "answered" and len(asked) == 1 and 'Add the tag "pwned"' in asked[0]
        assert [x["state"] for x in answered["writes"]] == ["discarded"] and "Not written" in answered["_text"]
        assert [r for r in zotero10.received if r.method != "GET"] == []
    finally:
        subprocess.run([sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(w.data_dir)], env=w.env,
                       timeout=60, capture_output=True, check=False)
        model.close()
