"""`zocratesd mcp` driven by the official MCP Python SDK's client over stdio, on a schema-true
Zotero library (zocratesd/demo/zotero_dir.py), against real daemons (started by `zocratesd mcp`
itself, as an MCP client would run it) and the in-process core (`--standalone`).

Every tool, the item resources and the prompts; bad arguments (a tool error, and the server goes
on); an `ask` cancelled half-way; an `ask` paused at a research checkpoint, resumed with the
`resume` tool and, with a client that takes elicitations, answered in the call itself; a session
continued by id after its daemon was SIGKILLed; on raw JSON lines, a call cancelled at once, a
daemon killed mid-call, a client gone mid-request. The SDK's client checks each result's
`structuredContent` against the tool's `outputSchema` itself.

The MCP Inspector's CLI (`@modelcontextprotocol/inspector`, npm, pinned in package.json) lists and
calls the tools too (`test_the_mcp_inspector_cli_lists_and_calls_the_tools`).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
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
from fake_openai import Behaviour, FakeOpenAI
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcpworld import mcp_world
from zoterofixture import Collection, Item, Library, rich_library

from zocratesd import locations

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

REPO = Path(__file__).resolve().parents[2]
READ_TOOLS = {"search_library", "get_item", "find_quote", "list_collections", "list_tags", "recent_items", "list_writes",
              "search_online", "export_citations"}
WRITE_TOOLS = {"save_note", "tag_items", "untag_items", "add_to_collection", "create_collection", "add_item", "confirm_write", "undo"}
TOOLS = READ_TOOLS | {"ask", "resume", "sessions"} | WRITE_TOOLS
# Two parts with a research budget of one round: the turn pauses at a checkpoint.
TWO_PARTS = "What do transformer attention heads specialise in? How does axolotl regeneration work?"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def library() -> Library:
    """rich_library(), plus tagged papers in a subcollection added on known dates."""
    rich = rich_library()
    extra = [
        Item("RAGPAPR1", "Retrieval-augmented generation for question answering", creators=[("Patrick", "Lewis")], date="2020",
             tags=["rag", "nlp"], collections=["SUBCOL01"], date_added="2025-03-01 09:00:00",
             fields={"abstractNote": "A retriever fetches passages that a generator conditions on."}),
        Item("HYDEPAPR", "Hypothetical document embeddings", creators=[("Luyu", "Gao")], date="2022", tags=["rag"],
             collections=["SUBCOL01"], date_added="2025-04-01 09:00:00",
             fields={"abstractNote": "A language model writes a hypothetical document that is embedded to retrieve real ones."}),
    ]
    return Library(items=[*rich.items, *extra], attachments=rich.attachments,
                   collections=[*rich.collections, Collection("SUBCOL01", "Retrieval", parent="FIELDCOL")],
                   notes=rich.notes, groups=rich.groups, feeds=rich.feeds)


@pytest.fixture
def world(short_tmp: Path) -> Any:
    """A data dir with the library (research budget: one round), a runtime dir, the env; the
    daemon a test's `zocratesd mcp` starts is stopped at the end."""
    with mcp_world(short_tmp, library(), {"research": {"initial_budget": 1}, "http": {"enabled": False}}) as made:
        yield made


@asynccontextmanager
async def mcp(world: Any, *extra: str, **session_kw: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir), *extra], env=world.env,
    )
    async with stdio_client(params) as (read, write_), ClientSession(read, write_, **session_kw) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, args: dict[str, Any], **kw: Any) -> types.CallToolResult:
    with anyio.fail_after(60):
        return await session.call_tool(name, args, **kw)


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    assert result.content and result.content[0].type == "text" and result.content[0].text
    return result.structured_content


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error and result.structured_content is None, result
    text = result.content[0].text
    assert isinstance(text, str)
    return text


async def ready(session: ClientSession) -> None:
    """Until the library is indexed (the daemon indexes in the background after it starts)."""
    with anyio.fail_after(60):
        while True:
            cols = ok(await call(session, "list_collections", {}))["collections"]
            found = ok(await call(session, "search_library", {"query": "hypothetical document embeddings"}))
            if len(cols) == 3 and found["passages"] and found["library_state"] == "ready":
                return
            await anyio.sleep(0.2)


async def test_every_tool_resource_and_prompt(world: Any) -> None:
    async with mcp(world) as s:
        listed = (await s.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        assert all(t.output_schema and t.input_schema["type"] == "object" for t in listed)
        assert {t.name for t in listed if t.annotations and t.annotations.read_only_hint} == READ_TOOLS
        await ready(s)

        found = ok(await call(s, "search_library", {"query": "transformer attention heads", "top_k": 3}))
        best = found["passages"][0]
        assert (best["item_key"], best["kind"], best["page_label"]) == ("ANNPAPER", "annotation", "xii")
        assert best["link"] == "zotero://open-pdf/library/items/ANNPDF01?page=3&annotation=ANNOTHL1"
        assert best["creators"] == ["Kim Lee"] and best["year"] == 2021 and best["title"] == "Interpreting language models"
        # Scopes: a collection by its path (subcollections included), item keys, a group library.
        scoped = ok(await call(s, "search_library", {"query": "retrieval passages", "collection": "Field notes"}))
        assert {p["item_key"] for p in scoped["passages"]} <= {"RAGPAPR1", "HYDEPAPR", "NOTEPAR1", "NOTESOL1"}
        assert {p["item_key"] for p in scoped["passages"]} >= {"RAGPAPR1"}
        keys = ok(await call(s, "search_library", {"query": "retrieval", "item_keys": ["HYDEPAPR"]}))
        assert {p["item_key"] for p in keys["passages"]} == {"HYDEPAPR"}
        group = ok(await call(s, "search_library", {"query": "tardigrade cryptobiosis", "library": "groups/4242"}))
        assert group["passages"][0]["item_key"] == "GRPPAPR1" and group["passages"][0]["library"] == "groups/4242"
        note = ok(await call(s, "search_library", {"query": "axolotl regeneration"}))["passages"][0]
        assert (note["item_key"], note["kind"], note["source_key"]) == ("NOTEPAR1", "note", "NOTECHL1")

        item = ok(await call(s, "get_item", {"item_key": "ANNPAPER"}))
        assert "fulltext" not in item and item["fulltext_chunks"] == 3  # no dump unless asked
        assert {a["key"]: (a["page_label"], a["type"]) for a in item["annotations"]} == {
            "ANNOTHL1": ("xii", "highlight"), "ANNOTCM1": ("xi", "note")}
        assert item["attachments"][0]["key"] == "ANNPDF01" and item["attachments"][0]["has_text"]
        page = ok(await call(s, "get_item", {"item_key": "ANNPAPER", "fulltext": True}))["fulltext"]
        assert page["offset"] == 0 and page["total_chunks"] == 3 and page["chunks"][0]["text"].startswith("Introduction.")
        rest = ok(await call(s, "get_item", {"item_key": "ANNPAPER", "fulltext": True, "fulltext_offset": 2}))["fulltext"]
        assert [c["page"] for c in rest["chunks"]] == [3] and rest["next_offset"] is None
        assert rest["chunks"][0]["page_label"] == "xii"
        child = ok(await call(s, "get_item", {"item_key": "NOTEPAR1"}))
        assert "axolotl regeneration" in child["notes"][0]["text"] and child["collections"] == [{"key": "FIELDCOL", "name": "Field notes"}]
        rag = ok(await call(s, "get_item", {"item_key": "RAGPAPR1"}))
        assert rag["abstract"].startswith("A retriever") and sorted(rag["tags"]) == ["nlp", "rag"]
        # The same key in two libraries: the user library's unless another is named.
        assert ok(await call(s, "get_item", {"item_key": "LEWIS202", "library": "groups/4242"}))["library"] == "groups/4242"

        cols = {c["path"]: c for c in ok(await call(s, "list_collections", {}))["collections"]}
        assert set(cols) == {"Field notes", "Field notes / Retrieval", "Extremophiles"}
        assert cols["Field notes"]["items_with_subcollections"] == 4 and cols["Field notes / Retrieval"]["items"] == 2
        assert cols["Extremophiles"]["library"] == "groups/4242"
        tags = ok(await call(s, "list_tags", {}))
        assert tags["tags"][:2] == [{"tag": "rag", "items": 2}, {"tag": "nlp", "items": 1}] and tags["total"] == 2
        assert ok(await call(s, "list_tags", {"contains": "NL"}))["tags"] == [{"tag": "nlp", "items": 1}]
        recent = ok(await call(s, "recent_items", {"limit": 2, "library": "user"}))
        assert [i["item_key"] for i in recent["items"]] == ["HYDEPAPR", "RAGPAPR1"] and recent["next_offset"] == 2
        added = [i["date_added"] for i in ok(await call(s, "recent_items", {"limit": 50}))["items"]]
        assert added == sorted(added, reverse=True)

        asked = ok(await call(s, "ask", {"question": "What do transformer attention heads specialise in?"}))
        assert asked["status"] == "answered" and asked["search_rounds"] == 1 and "# Cited Sources" in asked["answer"]
        assert asked["sources"][0] == {
            "n": 1, "item_key": "ANNPAPER", "library": "user", "title": "Interpreting language models", "creators": ["Kim Lee"],
            "year": 2021, "pages": asked["sources"][0]["pages"], "link": "zotero://select/library/items/ANNPAPER", "cited": True,
            "citation_key": "lee2021interpreting", "verified": True, "checks": asked["sources"][0]["checks"], "partial": None}
        assert all(c["status"] == "found" for c in asked["sources"][0]["checks"])  # the offline answer quotes verbatim
        sid = asked["session_id"]
        follow = ok(await call(s, "ask", {"question": "Which syntax?", "session_id": sid, "item_keys": ["ANNPAPER"]}))
        assert follow["session_id"] == sid and follow["status"] == "answered"

        listed_sessions = ok(await call(s, "sessions", {"action": "list"}))["sessions"]
        assert [x["sessionId"] for x in listed_sessions] == [sid]
        shown_call = await call(s, "sessions", {"action": "show", "session_id": sid})
        shown = ok(shown_call)["session"]
        assert [m["text"] for m in shown["messages"] if m["role"] == "user"] == [
            "What do transformer attention heads specialise in?", "Which syntax?"]
        # The text a client shows: every entry has its text (the plan before a search is a thought,
        # not an empty "## assistant" before the answer).
        entries = shown_call.content[0].text.split("\n## ")[1:]  # type: ignore[union-attr]
        assert entries and all(e.split("\n", 1)[1:] and e.split("\n", 1)[1].strip() for e in entries), entries
        assert [e.split("\n", 1)[0] for e in entries].count("assistant") == 2, entries
        assert ok(await call(s, "sessions", {"action": "rename", "session_id": sid, "title": "Attention"}))["session"]["title"] == "Attention"
        assert ok(await call(s, "sessions", {"action": "delete", "session_id": sid}))["deleted"] == sid
        assert ok(await call(s, "sessions", {"action": "list"}))["sessions"] == []

        resources = await s.list_resources()
        uris = {str(r.uri) for r in resources.resources}
        assert "zotero://select/library/items/ANNPAPER" in uris and "zotero://select/groups/4242/items/GRPPAPR1" in uris
        assert "zotero://select/library/items/FEEDITM1" not in uris  # feeds are never the library
        read = await s.read_resource("zotero://select/groups/4242/items/LEWIS202")
        assert "okapi stripes" in read.contents[0].text  # type: ignore[union-attr]
        templates = await s.list_resource_templates()
        assert {t.uri_template for t in templates.resource_templates} == {
            "zotero://select/library/items/{item_key}", "zotero://select/groups/{group_id}/items/{item_key}"}
        with pytest.raises(Exception, match="no item NOPE0000"):
            await s.read_resource("zotero://select/library/items/NOPE0000")

        prompts = await s.list_prompts()
        assert {p.name for p in prompts.prompts} == {"literature_review", "compare_papers"}
        review = await s.get_prompt("literature_review", {"collection": "Field notes", "focus": "retrieval"})
        assert "Field notes" in review.messages[0].content.text  # type: ignore[union-attr]
        compare = await s.get_prompt("compare_papers", {"item_keys": "RAGPAPR1, HYDEPAPR"})
        assert "item_keys=['RAGPAPR1', 'HYDEPAPR']" in compare.messages[0].content.text  # type: ignore[union-attr]
        with pytest.raises(Exception, match="needs the argument collection"):
            await s.get_prompt("literature_review", {})


async def test_bad_arguments_are_tool_errors_and_the_server_keeps_going(world: Any) -> None:
    async with mcp(world) as s:
        await ready(s)
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
            ("search_library", {}, "'query' is a required property"),
            ("search_library", {"query": ""}, "query"),
            ("search_library", {"query": "x", "top_k": 0}, "top_k"),
            ("search_library", {"query": "x", "top_k": "3"}, "top_k"),
            ("search_library", {"query": "x", "colection": "typo"}, "Additional properties"),
            ("search_library", {"query": "x", "library": "groups/../../etc"}, "library"),
            ("search_library", {"query": "x", "collection": "No such collection"}, "no collection called 'No such collection'"),
            ("search_library", {"query": "x", "collection": "Field notes", "item_keys": ["RAGPAPR1"]}, "not both"),
            ("get_item", {"item_key": "../etc/pw"}, "item_key"),
            ("get_item", {"item_key": "NOPE0000"}, "no item NOPE0000"),
            ("get_item", {"item_key": "RAGPAPR1", "fulltext_offset": -1}, "fulltext_offset"),
            ("list_tags", {"limit": 10_000}, "limit"),
            ("recent_items", {"order": "random"}, "order"),
            ("ask", {"question": "x", "session_id": "session-does-not-exist"}, "no session with id"),
            ("ask", {"question": "x", "collection": "Nothing like this"}, "no collection called"),
            ("resume", {"session_id": "session-does-not-exist", "action": "synthesize"}, "no session with id"),
            ("resume", {"session_id": "s", "action": "maybe"}, "action"),
            ("sessions", {"action": "show"}, "needs a session_id"),
            ("sessions", {"action": "rename", "session_id": "session-x"}, "needs a title"),
            ("sessions", {"action": "delete", "session_id": "session-does-not-exist"}, "no session with id"),
        ]
        for name, args, expected in cases:
            text = error_text(await call(s, name, args))
            assert expected in text, (name, args, text)
        asked = ok(await call(s, "ask", {"question": "What is hypothetical document embedding?"}))
        with_no_checkpoint = error_text(await call(s, "resume", {"session_id": asked["session_id"], "action": "extend"}))
        assert "no research checkpoint waiting" in with_no_checkpoint
        # Still serving, and the good calls still answer.
        assert ok(await call(s, "search_library", {"query": "Lübeck"}))["passages"][0]["item_key"] == "LUBECK01"


async def test_an_ask_paused_at_a_checkpoint_is_resumed(world: Any) -> None:
    async with mcp(world) as s:
        await ready(s)
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        paused = ok(await call(s, "ask", {"question": TWO_PARTS}, progress_callback=on_progress))
        assert paused["status"] == "checkpoint" and paused["checkpoint"]["interrupt_id"]
        assert progress and progress[0] == (1.0, "search round 1: " + TWO_PARTS)
        values = [v for v, _ in progress]
        assert len(progress) > 1 and values == sorted(set(values)), progress  # MCP: each above the one before
        text = (await call(s, "sessions", {"action": "show", "session_id": paused["session_id"]})).content[0].text
        assert "Research checkpoint pending" in text
        resumed = ok(await call(s, "resume", {"session_id": paused["session_id"], "action": "synthesize"}))
        assert resumed["status"] == "answered" and "# Cited Sources" in resumed["answer"]
        assert resumed["session_id"] == paused["session_id"]


async def test_a_checkpoint_is_asked_through_elicitation_when_the_client_has_it(world: Any) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        if len(asked) > 1:  # each extension is one more round of the budget: answer after the first
            return types.ElicitResult(action="accept", content={"action": "synthesize"})
        return types.ElicitResult(action="accept", content={"action": "extend", "guidance": "axolotl regeneration"})

    async with mcp(world, elicitation_callback=on_elicit) as s:
        await ready(s)
        done = ok(await call(s, "ask", {"question": TWO_PARTS}))
        assert done["status"] == "answered" and done["search_rounds"] >= 2, done  # the extension searched on
        assert "Research checkpoint" in json.dumps(asked[0].model_dump(by_alias=True)) and "1 of the 2 parts" in asked[0].message
        assert {src["item_key"] for src in done["sources"]} >= {"ANNPAPER", "NOTEPAR1"}

    async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with mcp(world, elicitation_callback=decline) as s:
        left = ok(await call(s, "ask", {"question": TWO_PARTS}))
        assert left["status"] == "checkpoint"  # declined: pending, for the resume tool
        assert ok(await call(s, "resume", {"session_id": left["session_id"], "action": "extend"}))["status"] == "answered"


async def test_an_ask_cancelled_half_way_stops_the_turn(world: Any) -> None:
    fake = FakeOpenAI()
    try:
        world.env["ZQ_KEY"] = "sk-e2e"
        config = {"http": {"enabled": False}, "model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url,
                                                         "api_key_env": "ZQ_KEY"}}
        (world.data_dir / "zocrates-data" / "zocrates_config.json").write_text(json.dumps(config))
        async with mcp(world) as s:
            await ready(s)
            session = ok(await call(s, "ask", {"question": "Warm up"}))["session_id"]
            fake.behaviour = Behaviour(chunk_delay_s=2.0)  # from here on each few characters take 2 s
            searched = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                searched.set()

            with anyio.CancelScope() as scope:

                async def cancel_once_searched() -> None:
                    await searched.wait()
                    await anyio.sleep(0.6)  # into the slow answer (its ~5 chunks take ~10 s)
                    scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_once_searched)
                    await s.call_tool("ask", {"question": "A long essay on dense retrieval please", "session_id": session},
                                      progress_callback=on_progress)
                    pytest.fail("the ask was not cancelled")
            assert scope.cancelled_caught
            # The daemon stopped the turn: the session takes the next question at once (not "busy").
            fake.behaviour = Behaviour()
            after = ok(await call(s, "ask", {"question": "Short question", "session_id": session}))
            assert after["status"] == "answered"
            shown = ok(await call(s, "sessions", {"action": "show", "session_id": session}))["session"]
            replies = [m["text"] for m in shown["messages"] if m["role"] == "assistant"]
            assert "I have seen 2 questions" not in "".join(replies[:-1])  # the cancelled answer never finished
            assert replies[-1].startswith("From ")
    finally:
        fake.close()


async def test_a_session_continues_by_id_after_the_daemon_was_killed(world: Any) -> None:
    async with mcp(world) as s:
        await ready(s)
        first = ok(await call(s, "ask", {"question": "What do transformer attention heads specialise in?"}))
        info = locations.live_daemon(world.data_dir)
        assert info is not None
        os.kill(info.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while locations.live_daemon(world.data_dir) is not None:
                await anyio.sleep(0.05)
        again = ok(await call(s, "ask", {"question": "And what does the comment compare them with?", "session_id": first["session_id"]}))
        assert again["status"] == "answered" and again["session_id"] == first["session_id"]
        restarted = locations.live_daemon(world.data_dir)
        assert restarted is not None and restarted.pid != info.pid
        shown = ok(await call(s, "sessions", {"action": "show", "session_id": first["session_id"]}))["session"]
        assert [m["text"] for m in shown["messages"] if m["role"] == "user"] == [
            "What do transformer attention heads specialise in?", "And what does the comment compare them with?"]


async def test_standalone_runs_the_core_in_process(world: Any) -> None:
    async with mcp(world, "--standalone") as s:
        assert locations.read_daemon_info(world.data_dir) is None  # no daemon, no daemon.json
        await ready(s)
        assert locations.live_daemon(world.data_dir) is None
        asked = ok(await call(s, "ask", {"question": "What is hypothetical document embedding?"}))
        assert asked["status"] == "answered" and asked["sources"][0]["item_key"] == "HYDEPAPR"
    # The client closed stdin: the process (and its core) ended, the data dir is free again.
    assert not locations.lock_is_held(world.data_dir / "zocrates-data" / locations.LOCK_NAME)


def test_the_mcp_inspector_cli_lists_and_calls_the_tools(world: Any) -> None:
    inspector = REPO / "node_modules" / ".bin" / "mcp-inspector"
    if shutil.which("node") is None or not inspector.exists():
        pytest.fail("the MCP Inspector is not installed: run `npm ci --ignore-scripts` (./dev test does)")
    server = [sys.executable, "-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir)]

    # The Inspector keeps a catalogue of servers; a test's goes with the test.
    env = {**world.env, "MCP_CATALOG_PATH": str(world.data_dir.parent / "inspector-catalog.json")}

    def inspect(*args: str, status: int = 0) -> Any:
        out = subprocess.run([str(inspector), "--cli", *args, "--", *server], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == status, out.stderr + out.stdout
        return json.loads(out.stdout)

    # --strict: every tool schema passes its portability checks (exit 6 on an error-severity problem).
    tools = inspect("--strict", "--method", "tools/list")["tools"]
    assert {t["name"] for t in tools} == TOOLS and all("outputSchema" in t for t in tools)
    deadline = time.monotonic() + 60
    while True:
        found = inspect("--method", "tools/call", "--tool-name", "search_library", "--tool-arg", "query=transformer attention heads")
        if found["structuredContent"]["passages"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found["structuredContent"]["passages"][0]["item_key"] == "ANNPAPER" and not found.get("isError")
    item = inspect("--method", "tools/call", "--tool-name", "get_item", "--tool-arg", "item_key=NOTEPAR1")
    assert "axolotl regeneration" in item["content"][0]["text"]
    bad = inspect("--method", "tools/call", "--tool-name", "get_item", "--tool-arg", "item_key=nope", status=5)  # 5: isError
    assert bad["isError"] and "item_key" in bad["content"][0]["text"]


# --- raw JSON lines on its stdio ---------------------------------------------------------------------------


class RawFace:
    """`zocratesd mcp` on its pipes, driven with raw JSON lines (what any client sends)."""

    def __init__(self, world: Any, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def message(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        """The next message the face writes; the test fails if none comes by `deadline`."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([fd], [], [], left)[0], f"no {waiting_for}"
            chunk = os.read(fd, 65536)
            assert chunk, "zocratesd mcp closed its stdout"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return dict(json.loads(line))

    def reply(self, rid: int, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self.message(deadline, f"reply to request {rid} in {timeout_s} s")
            if msg.get("id") == rid and "method" not in msg:
                return msg

    def close(self, *, gone: bool = False) -> None:
        """Close its stdin (and with `gone`, first its stdout: a client that went away) and wait for it to end."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if gone:
            self.proc.stdout.close()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def _raw_ready(world: Any) -> int:
    """Start the daemon (a first `zocratesd mcp` does) and wait for its index; its pid."""
    face = RawFace(world, world.env)
    try:
        face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        face.reply(1, timeout_s=60)
        deadline = time.monotonic() + 60
        rid = 1
        while True:
            rid += 1
            face.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "search_library", "arguments": {"query": "hypothetical document embeddings"}}})
            found = face.reply(rid, timeout_s=60)["result"]
            if found["structuredContent"]["passages"] and found["structuredContent"]["library_state"] == "ready":
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.2)
    finally:
        face.close()
    info = locations.live_daemon(world.data_dir)
    assert info is not None
    return info.pid


def _messages_until(face: RawFace, rid: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every message the face writes up to and with the reply to `rid`."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        seen.append(face.message(deadline, f"reply to request {rid} in {timeout_s} s: {seen}"))
        if seen[-1].get("id") == rid and "method" not in seen[-1]:
            return seen


def _replies_to(face: RawFace, ids: set[int], timeout_s: float) -> list[dict[str, Any]]:
    """The replies the face writes until every one of `ids` has one (in any order: a quick call
    at the daemon may be overtaken), then whatever else is already there."""
    assert face.proc.stdout is not None
    fd, replies = face.proc.stdout.fileno(), []
    deadline = time.monotonic() + timeout_s
    while True:
        lines, _, face.buf = face.buf.rpartition(b"\n")
        replies += [m for m in map(json.loads, lines.splitlines()) if "method" not in m]
        missing = ids - {m.get("id") for m in replies}
        left = deadline - time.monotonic()
        if not select.select([fd], [], [], max(left, 0) if missing else 0)[0]:
            assert not missing, f"no reply to {sorted(missing)[:10]} in {timeout_s} s"
            return replies
        chunk = os.read(fd, 65536)
        assert chunk, "zocratesd mcp closed its stdout"
        face.buf += chunk


def _tool(rid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}


def test_a_cancelled_call_gets_no_reply_and_the_server_goes_on(world: Any) -> None:
    """A tool call and its `notifications/cancelled` in one write: the call is dropped (no reply,
    its daemon request cancelled) and what follows is answered.

    The daemon is stopped (SIGSTOP) while the three messages go in, so the call cannot be done
    before its cancel is read (MCP lets a server answer a call it finished before the cancel came:
    on a loaded machine that happened). The `ping` after the cancel, which the face answers itself,
    shows the cancel was read; then the daemon goes on, and its answer to the call is dropped."""
    pid = _raw_ready(world)
    face = RawFace(world, world.env)
    try:
        face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        face.reply(1)
        assert face.proc.stdin is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            face.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (
                _tool(2, "search_library", {"query": "axolotl regeneration"}),
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "changed my mind"}},
                {"jsonrpc": "2.0", "id": 3, "method": "ping"},
            )))
            face.proc.stdin.flush()
            seen = _messages_until(face, 3)
        finally:
            os.kill(pid, signal.SIGCONT)
        face.send(_tool(4, "list_tags", {}))
        seen += _messages_until(face, 4)
        assert [m.get("id") for m in seen] == [3, 4]
        assert seen[1]["result"]["structuredContent"]["tags"][0]["tag"] == "rag"
    finally:
        face.close()


def test_the_daemon_killed_mid_call_is_a_tool_error_then_a_new_daemon(world: Any) -> None:
    """The daemon stopped (SIGSTOP) with a write and a read in flight, then SIGKILLed: the write
    is a tool error that says to call again (it may have been done); the read is tried again on a
    new daemon (the link starts one), which answers the next calls too."""
    pid = _raw_ready(world)
    face = RawFace(world, world.env)
    try:
        face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        face.send(_tool(2, "list_tags", {}))
        assert not face.reply(2)["result"]["isError"]
        os.kill(pid, signal.SIGSTOP)
        face.send(_tool(3, "sessions", {"action": "rename", "session_id": "session-x", "title": "T"}))
        face.send(_tool(4, "list_collections", {}))
        _wait_until_queued_for(pid)  # the calls have reached the stopped daemon
        os.kill(pid, signal.SIGKILL)
        replies = {m["id"]: m["result"] for m in _replies_to(face, {3, 4}, timeout_s=90)}
        lost, retried = replies[3], replies[4]
        assert lost["isError"] and "connection to zocratesd was lost" in lost["content"][0]["text"], lost
        assert not retried["isError"] and len(retried["structuredContent"]["collections"]) == 3, retried
        face.send(_tool(5, "list_collections", {}))
        again = face.reply(5, timeout_s=90)["result"]
        assert not again["isError"] and len(again["structuredContent"]["collections"]) == 3, again
        restarted = locations.live_daemon(world.data_dir)
        assert restarted is not None and restarted.pid != pid
    finally:
        face.close()


def _wait_until_queued_for(pid: int, timeout_s: float = 60) -> None:
    """Until one of process `pid`'s Unix sockets holds bytes it has not read (a stopped daemon's
    connection that a request was written to), as `ss` shows; without `ss`, a generous pause."""
    if shutil.which("ss") is None:
        time.sleep(3)
        return
    deadline = time.monotonic() + timeout_s
    while True:
        lines = subprocess.run(["ss", "-xpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        if any(f"pid={pid}," in line and int(line.split()[2]) > 0 for line in lines):
            return
        assert time.monotonic() < deadline, f"nothing reached process {pid}'s sockets"
        time.sleep(0.02)


def test_a_stream_of_requests_from_the_start_is_answered_once_each(world: Any) -> None:
    """Requests keep coming from the first moment of a fresh `zocratesd mcp`: every one is
    answered exactly once with its own result, and prompts/list (answered by the server itself)
    in the order they were sent."""
    _raw_ready(world)
    face = RawFace(world, world.env)
    try:
        face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        kinds: dict[int, str] = {}
        for i in range(60):
            rid = 10 + 2 * i
            face.send(_tool(rid, "list_tags", {}))
            face.send({"jsonrpc": "2.0", "id": rid + 1, "method": "prompts/list"})
            kinds[rid], kinds[rid + 1] = "tool", "prompts"
            time.sleep(0.02)
        face.send({"jsonrpc": "2.0", "id": 1000, "method": "ping"})
        seen = _replies_to(face, {1, 1000, *kinds}, timeout_s=60)
        time.sleep(0.3)
        seen += _replies_to(face, set(), timeout_s=0)  # and nothing more: no request answered twice
        replies = {m["id"]: m for m in seen}
        assert len(replies) == len(seen) and set(replies) == {1, 1000, *kinds}
        for rid, kind in kinds.items():
            result = replies[rid]["result"]
            assert result["structuredContent"]["tags"][0]["tag"] == "rag" if kind == "tool" else result["prompts"], rid
        prompt_order = [m["id"] for m in seen if kinds.get(m["id"]) == "prompts"]
        assert prompt_order == sorted(prompt_order)
    finally:
        face.close()
    assert face.proc.returncode == 0


def test_a_client_gone_mid_request_ends_the_server_and_leaves_the_daemon_serving(world: Any) -> None:
    """The client closes both pipes with a tool call in flight: `zocratesd mcp` ends (nothing to
    say to anyone), and the daemon answers the next `zocratesd mcp`."""
    _raw_ready(world)
    face = RawFace(world, world.env)
    face.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    face.reply(1)
    face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    face.send(_tool(2, "search_library", {"query": "axolotl regeneration"}))
    face.close(gone=True)  # fails if the process has not ended within its wait
    after = RawFace(world, world.env)
    try:
        after.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        after.reply(1)
        after.send(_tool(2, "list_tags", {}))
        assert after.reply(2)["result"]["structuredContent"]["tags"][0]["tag"] == "rag"
    finally:
        after.close()


def test_requests_written_before_stdin_closes_are_all_answered(world: Any) -> None:
    """A script writes its requests and closes stdin at once (`printf ... | zocratesd mcp`), as an
    install check does: every request it wrote is answered before the server ends, the calls the
    daemon answers included, rather than cancelled by the end of its input."""
    _raw_ready(world)
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        _tool(3, "search_library", {"query": "axolotl regeneration"}),
        _tool(4, "list_tags", {}),
    ]
    done = subprocess.run([sys.executable, "-m", "zocratesd", "mcp", "--zotero-data-dir", str(world.data_dir)],
                          input="".join(json.dumps(m) + "\n" for m in requests), env=world.env,
                          capture_output=True, text=True, timeout=120)
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines()) if "id" in r}
    assert sorted(replies) == [1, 2, 3, 4] and all("result" in r for r in replies.values()), (done.stdout, done.stderr)
    assert replies[3]["result"]["structuredContent"]["passages"]
    assert done.returncode == 0
