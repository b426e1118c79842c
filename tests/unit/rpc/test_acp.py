"""The ACP face (rpc/acp.py) over a real core `Daemon`, through real Peers on in-memory streams.

The test plays the editor: it sends requests and notifications, reads `session/update`s, and
answers the daemon's own `session/request_permission`. The daemon runs the offline model on a small
passage library with a research budget of one round, so a question of two aspects reaches a
checkpoint. `prompt_input` (ACP prompt blocks -> text and Zotero context) is tested on its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from memstream import MemoryByteStream, pipe
from turngate import Gate

from zocratesd.config import ZocratesConfig
from zocratesd.core.context import PromptContext
from zocratesd.core.daemon import LIBRARY_PASSAGES_FILE, Daemon
from zocratesd.errors import InvalidInput
from zocratesd.locations import PROTOCOL_VERSION
from zocratesd.rpc import models
from zocratesd.rpc.acp import build_methods
from zocratesd.rpc.agent import ClientCapabilities, connection, prompt_input
from zocratesd.rpc.peer import MethodTable, Peer

# Online search off: these tests are about other things, and no face here asks about it.
OFFLINE = {"mode": "off"}

pytestmark = pytest.mark.anyio

Json = dict[str, Any]

PASSAGES = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation", "year": 2020, "collections": ["RAG0COLL"],
     "text": "RAG combines parametric and non-parametric memory."},
    {"item_key": "GAOHYDE1", "title": "HyDE", "year": 2022,
     "text": "HyDE writes a hypothetical document and embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval", "year": 2020,
     "text": "DPR encodes questions and passages with two BERT encoders."},
]
TWO = "What does RAG combine? How does HyDE retrieve?"  # two aspects, one round: a checkpoint
EXTENSIONS = [
    "_zocrates/chat/resume",
    "_zocrates/citations/export",
    "_zocrates/library/collections",
    "_zocrates/library/find_quote",
    "_zocrates/library/item",
    "_zocrates/library/items",
    "_zocrates/library/search",
    "_zocrates/library/status",
    "_zocrates/library/suggestions",
    "_zocrates/library/tags",
    "_zocrates/online/search",
    "_zocrates/session/get",
    "_zocrates/session/rename",
    "_zocrates/session/rewind",
    "_zocrates/storage/maintenance",
    "_zocrates/storage/stats",
    "_zocrates/writes/add_item",
    "_zocrates/writes/add_to_collection",
    "_zocrates/writes/confirm",
    "_zocrates/writes/create_collection",
    "_zocrates/writes/discard",
    "_zocrates/writes/get",
    "_zocrates/writes/list",
    "_zocrates/writes/save_note",
    "_zocrates/writes/tag",
    "_zocrates/writes/undo",
    "_zocrates/writes/untag",
]
EXTEND = {"outcome": {"outcome": "selected", "optionId": "extend"}}
SYNTHESIZE = {"outcome": {"outcome": "selected", "optionId": "synthesize"}}
CANCELLED = {"outcome": {"outcome": "cancelled"}}

# What the client does with a request from the daemon: the reply to send, or None for none.
OnRequest = Callable[[Json], Awaitable[Json | None]]


class Client:
    """An editor's end of one connection."""

    def __init__(self, stream: MemoryByteStream) -> None:
        self.stream, self.buf, self.ids = stream, b"", 0
        self.on_request: OnRequest | None = None
        self.pending: list[Json] = []  # read while waiting for something else

    async def send(self, message: Json) -> None:
        await self.stream.send(json.dumps(message).encode() + b"\n")

    async def recv(self) -> Json:
        if self.pending:
            return self.pending.pop(0)
        with anyio.fail_after(15):
            while b"\n" not in self.buf:
                self.buf += await self.stream.receive()
        line, _, self.buf = self.buf.partition(b"\n")
        message: Json = json.loads(line)
        return message

    async def request(self, method: str, params: Json) -> int:
        self.ids += 1
        await self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        return self.ids

    async def notify(self, method: str, params: Json) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def reply(self, request_id: int) -> tuple[Json, list[Json]]:
        """The answer to one of our requests, and every message that came before it (the daemon's
        requests included, answered by `on_request` as they come)."""
        before: list[Json] = []
        while True:
            msg = await self.recv()
            if "method" not in msg and msg.get("id") == request_id:
                return msg, before
            before.append(msg)
            if "method" in msg and "id" in msg:
                assert self.on_request is not None, f"unexpected request from the daemon: {msg}"
                answer = await self.on_request(msg)
                if answer is not None:
                    await self.send({"jsonrpc": "2.0", "id": msg["id"], **answer})

    async def call(self, method: str, params: Json) -> tuple[Json, list[Json]]:
        return await self.reply(await self.request(method, params))

    async def result(self, method: str, params: Json) -> Any:
        reply, _ = await self.call(method, params)
        assert "error" not in reply, reply
        return reply["result"]

    async def error(self, method: str, params: Json) -> Json:
        reply, _ = await self.call(method, params)
        assert "error" in reply, reply
        error: Json = reply["error"]
        return error

    async def commands(self, session_id: str) -> list[Json]:
        """The `available_commands_update` that follows a session/new, load or resume answer."""
        msg = await self.recv()
        assert msg.get("method") == "session/update" and msg["params"]["sessionId"] == session_id, msg
        update: Json = msg["params"]["update"]
        assert update["sessionUpdate"] == "available_commands_update", update
        return list(update["availableCommands"])

    async def load(self, session_id: str) -> tuple[Json, list[Json]]:
        """session/load: its answer and the replay before it (the commands after it are read)."""
        reply, before = await self.call("session/load", {"sessionId": session_id, "cwd": "/", "mcpServers": []})
        if "result" in reply:
            await self.commands(session_id)
        return reply, before

    async def until(self, kind: str) -> list[Json]:
        """The updates that arrive up to the first of `kind` (for a connection that only watches)."""
        seen: list[Json] = []
        while True:
            msg = await self.recv()
            if msg.get("method") == "session/update":
                seen.append(msg["params"]["update"])
                if seen[-1]["sessionUpdate"] == kind:
                    return seen


class World:
    def __init__(self, daemon: Daemon, methods: MethodTable, tg: anyio.abc.TaskGroup) -> None:
        self.daemon, self.methods, self.tg = daemon, methods, tg

    def connect(self, name: str = "editor") -> tuple[Client, Peer]:
        server_end, client_end = pipe()
        peer = Peer(server_end, self.methods, name=name)
        self.tg.start_soon(peer.run)
        return Client(client_end), peer

    async def session(self, client: Client, **meta: Any) -> str:
        params: Json = {"cwd": "/home/u/papers", "mcpServers": []}
        if meta:
            params["_meta"] = {"zocrates": meta}
        sid = str((await client.result("session/new", params))["sessionId"])
        await client.commands(sid)
        return sid


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    state = tmp_path / "zocrates-data"
    state.mkdir()
    (state / LIBRARY_PASSAGES_FILE).write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    daemon = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 1}, online=OFFLINE))
    await daemon.start()
    try:
        async with anyio.create_task_group() as tg:
            yield World(daemon, build_methods(daemon), tg)
            tg.cancel_scope.cancel()
    finally:
        await daemon.aclose()


def updates(messages: list[Json], session_id: str | None = None) -> list[Json]:
    found = [m["params"] for m in messages if m.get("method") == "session/update"]
    if session_id is not None:
        assert {p["sessionId"] for p in found} <= {session_id}
    return [p["update"] for p in found]


def kinds(ups: list[Json]) -> list[str]:
    """The update kinds in order, a run of one kind shown once."""
    out: list[str] = []
    for u in ups:
        if not out or out[-1] != u["sessionUpdate"]:
            out.append(u["sessionUpdate"])
    return out


def text(kind: str) -> Json:
    return {"type": "text", "text": kind}


def prompt(sid: str, *blocks: Json | str, meta: Any = None) -> Json:
    params: Json = {"sessionId": sid, "prompt": [text(b) if isinstance(b, str) else b for b in blocks]}
    if meta is not None:
        params["_meta"] = meta
    return params


# --- initialize -------------------------------------------------------------------------------------


async def test_initialize_advertises_what_is_served(world: World) -> None:
    a, peer = world.connect()
    info = {"name": "test-editor", "version": "0.0"}
    result = await a.result("initialize", {"protocolVersion": 99, "clientCapabilities": {"fs": {}}, "clientInfo": info})
    models.InitializeResult.model_validate(result)
    assert result["protocolVersion"] == PROTOCOL_VERSION  # ours, whatever the client asked for
    caps = result["agentCapabilities"]
    assert caps["loadSession"] is True
    assert caps["promptCapabilities"] == {"image": False, "audio": False, "embeddedContext": False}
    assert caps["mcpCapabilities"] == {"http": False, "sse": False}
    assert caps["sessionCapabilities"] == {"list": {}, "delete": {}, "resume": {}, "close": {}}
    ours = caps["_meta"]["zocrates"]
    assert ours["extensions"] == EXTENSIONS == sorted(n for n in world.methods if n.startswith("_zocrates/"))
    assert ours["version"] == result["agentInfo"]["version"] == world.daemon.version
    assert ours["protocolVersion"] == PROTOCOL_VERSION
    assert ours["maxFrameBytes"] == world.daemon.config.rpc.max_frame_bytes
    assert result["agentInfo"]["name"] == "zocratesd" and result["authMethods"] == []
    assert connection(peer).client_info == info and connection(peer).capabilities == ClientCapabilities()

    for name in ours["extensions"]:  # each is served (params or not, never "method not found")
        reply, _ = await a.call(name, {})
        assert reply.get("error", {}).get("code") != -32601, name
    assert (await a.error("_zocrates/not/a/method", {}))["code"] == -32601


# --- sessions and turns -----------------------------------------------------------------------------


async def test_a_prompt_streams_its_updates_before_its_answer(world: World) -> None:
    a, _ = world.connect()
    sid = await world.session(a, title="Bees")
    reply, before = await a.call("session/prompt", prompt(sid, "What is HyDE?"))
    result = reply["result"]
    models.PromptResult.model_validate(result)
    assert result["stopReason"] == "end_turn"
    meta = result["_meta"]["zocrates"]
    assert meta["pendingHitl"] is None and meta["invocationId"].startswith("e-")

    ups = updates(before, sid)
    assert all(m.get("method") == "session/update" for m in before)
    # The editor shows its own message; a titled session is not renamed by its first prompt.
    assert kinds(ups) == ["agent_thought_chunk", "tool_call", "tool_call_update", "agent_message_chunk", "usage_update"]
    call = next(u for u in ups if u["sessionUpdate"] == "tool_call")
    assert (call["title"], call["kind"], call["status"], call["rawInput"]) == (
        "search_library", "search", "in_progress", {"query": "What is HyDE?"}
    )
    done = [u for u in ups if u["sessionUpdate"] == "tool_call_update" and "status" in u]
    assert [u["status"] for u in done] == ["completed"] and done[0]["toolCallId"] == call["toolCallId"]
    assert done[0]["rawOutput"]["passages"][0]["item_key"] == "GAOHYDE1"
    chunks = [u for u in ups if u["sessionUpdate"] == "agent_message_chunk"]
    assert len({u["messageId"] for u in chunks}) == 1
    ui = await a.result("_zocrates/session/get", {"sessionId": sid})
    assert "".join(u["content"]["text"] for u in chunks) == ui["messages"][-1]["text"]
    assert ui["messages"][-1]["invocation_id"] == meta["invocationId"] and ui["title"] == "Bees"
    assert ups[-1]["used"] > 0 and ups[-1]["_meta"]["zocrates"]["compacted"] is False

    listed = (await a.result("session/list", {}))["sessions"]
    assert [(s["sessionId"], s["title"], s["cwd"]) for s in listed] == [(sid, "Bees", "/home/u/papers")]

    # An untitled session is named by its first prompt, and hears it at once.
    untitled = await world.session(a)
    _, before = await a.call("session/prompt", prompt(untitled, "How does DPR encode passages?"))
    assert updates(before, untitled)[0] == {"sessionUpdate": "session_info_update", "title": "How does DPR encode passages?"}


def test_prompt_input_text_and_zotero_items() -> None:
    assert prompt_input([text("Compare"), text("these two.")], None) == ("Compare\nthese two.", PromptContext())
    said, context = prompt_input(
        [
            text("Compare"),
            {"type": "resource_link", "uri": "zotero://select/library/items/GAOHYDE1", "name": "hyde.pdf", "title": "HyDE"},
            {"type": "resource_link", "uri": "zotero://select/groups/4711/items/KARPDPR1", "name": "DPR"},
        ],
        None,
    )
    assert said == "Compare"
    assert context.mode == "papers" and context.items == (("GAOHYDE1", "HyDE"), ("KARPDPR1", "DPR"))

    # Any other link stays in the question, as a markdown link.
    said, context = prompt_input(
        [
            text("See"),
            {"type": "resource_link", "uri": "https://arxiv.org/abs/2212.10496", "name": "HyDE on arXiv"},
            {"type": "resource_link", "uri": "zotero://select/library/items/gaohyde1"},  # not a Zotero key
            {"type": "resource_link", "uri": "zotero://select/library/collections/COLL0001", "name": "A collection"},
        ],
        None,
    )
    assert said.split("\n") == [
        "See",
        "[HyDE on arXiv](https://arxiv.org/abs/2212.10496)",
        "[zotero://select/library/items/gaohyde1](zotero://select/library/items/gaohyde1)",
        "[A collection](zotero://select/library/collections/COLL0001)",
    ]
    assert context == PromptContext()


def test_prompt_input_meta_zocrates() -> None:
    link = {"type": "resource_link", "uri": "zotero://select/library/items/GAOHYDE1", "name": "HyDE"}
    # A linked item already in activeItems is not added twice; _meta's mode wins over the default.
    _, context = prompt_input([text("Q"), link], {"zocrates": {"activeItems": [{"item_key": "GAOHYDE1", "title": "HyDE"}]}})
    assert context.items == (("GAOHYDE1", "HyDE"),)
    _, context = prompt_input([text("Q"), link], {"zocrates": {"mode": "library"}})
    assert context.mode == "library"
    _, context = prompt_input([text("Q")], {"zocrates": {"mode": "collection", "collection": "COLL0001"}})
    assert (context.mode, context.collection) == ("collection", "COLL0001")
    assert prompt_input([text("Q")], {"zocrates": None}) == ("Q", PromptContext())
    assert prompt_input([text("Q")], {"other": {"x": 1}}) == ("Q", PromptContext())
    for ours in ["papers", [], 3]:
        with pytest.raises(InvalidInput, match="must be an object"):
            prompt_input([text("Q")], {"zocrates": ours})
    with pytest.raises(InvalidInput, match="must be a list"):
        prompt_input([text("Q"), link], {"zocrates": {"activeItems": "GAOHYDE1"}})


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
        {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "embedded"}},
        {"type": "text", "text": 5},
        {"type": "resource_link"},
        {"no": "type"},
    ],
)
def test_prompt_input_refuses_what_initialize_does_not_offer(block: Json) -> None:
    with pytest.raises(InvalidInput, match="not supported") as info:
        prompt_input([text("Q"), block], None)
    assert info.value.data == {"blockType": str(block.get("type"))}


async def test_refused_prompts_are_invalid_params_and_store_nothing(world: World) -> None:
    a, _ = world.connect()
    sid = await world.session(a)
    image = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    err = await a.error("session/prompt", prompt(sid, "What is this?", image))
    assert err["code"] == -32602 and err["data"]["kind"] == "invalid_input" and err["data"]["blockType"] == "image"
    for meta in [{"zocrates": "papers"}, {"zocrates": [1]}]:
        err = await a.error("session/prompt", prompt(sid, "Q", meta=meta))
        assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input") and "_meta.zocrates" in err["data"]["message"]
    err = await a.error("session/new", {"cwd": "/", "mcpServers": [], "_meta": {"zocrates": "Bees"}})
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input")
    err = await a.error("session/prompt", prompt(sid, "   "))
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input")
    err = await a.error("session/prompt", prompt(sid, "Q", meta={"zocrates": {"activeItems": [{"item_key": "nope"}]}}))
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input")
    ui = await a.result("_zocrates/session/get", {"sessionId": sid})
    assert ui["messages"] == [] and ui["title"] == "New Chat"
    assert len((await a.result("session/list", {}))["sessions"]) == 1  # the refused session/new made none


async def test_errors_map_to_their_documented_codes(world: World) -> None:
    a, _ = world.connect()
    missing = "session-0-000000"
    for method, params in [
        ("session/prompt", prompt(missing, "Q")),
        ("session/load", {"sessionId": missing, "cwd": "/", "mcpServers": []}),
        ("session/delete", {"sessionId": missing}),
        ("_zocrates/session/get", {"sessionId": missing}),
        ("_zocrates/session/rename", {"sessionId": missing, "title": "T"}),
        ("_zocrates/chat/resume", {"sessionId": missing, "invocationId": "e-1", "interruptId": "i", "response": {"action": "synthesize"}}),
    ]:
        err = await a.error(method, params)
        assert (err["code"], err["message"]) == (-32002, "Resource not found"), method
        assert err["data"] == {"kind": "not_found", "message": f"no session with id {missing!r}", "sessionId": missing}

    sid = await world.session(a)
    # Refused by the params' schema (-32602, invalid_params) or by the core (-32602, invalid_input).
    err = await a.error("_zocrates/session/get", {"sessionId": "../etc"})
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_params")
    err = await a.error("_zocrates/session/rename", {"sessionId": sid, "title": "x" * 201})
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_params")
    # A lone surrogate (a JSON "\ud800" escape): refused by a string field's schema, and by the core
    # where the schema does not look (prompt blocks).
    err = await a.error("_zocrates/session/rename", {"sessionId": sid, "title": "lone \ud800 surrogate"})
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_params")
    err = await a.error("session/prompt", prompt(sid, "lone \ud800 surrogate"))
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input") and "surrogate" in err["data"]["message"]
    err = await a.error("session/list", {"cursor": "next"})
    assert (err["code"], err["data"]["kind"]) == (-32602, "invalid_input")

    err = await a.error("_zocrates/chat/resume", {"sessionId": sid, "invocationId": "e-1", "interruptId": "interrupt_ext_1",
                                                  "response": {"action": "synthesize"}})
    assert (err["code"], err["data"]["kind"]) == (1004, "checkpoint_not_pending")
    err = await a.error("_zocrates/session/rewind", {"sessionId": sid, "invocationId": "e-not-a-turn"})
    assert (err["code"], err["data"]["kind"]) == (-32002, "not_found") and err["data"]["invocationId"] == "e-not-a-turn"


async def test_busy_and_cancel_as_a_notification(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = world.connect("a")
    b, _ = world.connect("b")
    sid = await world.session(a)
    gate = Gate(world.daemon, monkeypatch)
    running = await a.request("session/prompt", prompt(sid, "What is HyDE?"))
    await gate.wait_entered()
    for client in (a, b):  # the prompting connection and any other
        err = await client.error("session/prompt", prompt(sid, "Another"))
        assert err["code"] == 1001 and err["data"] == {
            "kind": "session_busy", "message": err["data"]["message"], "sessionId": sid, "activity": "turn"
        }
    assert (await b.error("session/delete", {"sessionId": sid}))["code"] == 1001

    await a.notify("session/cancel", {"sessionId": sid})  # as ACP editors send it: a notification
    # The search stays held: only the cancel can end the turn. Answers come in any order (the
    # prompt's may come before or after the list's), and none answers the notification.
    listed, before = await a.call("session/list", {})
    assert "result" in listed
    replies = [m for m in before if "id" in m]
    if not replies:
        reply, before = await a.reply(running)
        replies = [reply, *(m for m in before if "id" in m)]
    assert [(m["id"], m.get("result", {}).get("stopReason")) for m in replies] == [(running, "cancelled")], replies
    gate.opened.set()

    assert await a.result("session/cancel", {"sessionId": sid}) == {}  # as a request: `{}`, nothing to cancel
    again = await a.result("session/prompt", prompt(sid, "Which encoders does DPR use?"))
    assert again["stopReason"] == "end_turn"


# --- checkpoints -------------------------------------------------------------------------------------


async def test_a_checkpoint_is_asked_and_the_answers_steer_the_turn(world: World) -> None:
    a, _ = world.connect()
    sid = await world.session(a)
    asked: list[Json] = []
    answers: list[Json] = [
        {"result": {**EXTEND, "_meta": {"zocrates": {"guidance": "hypothetical documents"}}}},
        {"result": SYNTHESIZE},
    ]

    async def answer(request: Json) -> Json:
        asked.append(request)
        return answers[len(asked) - 1]

    a.on_request = answer
    reply, before = await a.call("session/prompt", prompt(sid, TWO))
    assert reply["result"]["stopReason"] == "end_turn" and reply["result"]["_meta"]["zocrates"]["pendingHitl"] is None
    invocation = reply["result"]["_meta"]["zocrates"]["invocationId"]
    assert [r["method"] for r in asked] == ["session/request_permission"] * 2
    first = asked[0]["params"]
    models.DAEMON_REQUESTS["session/request_permission"][0].model_validate(first)
    assert first["sessionId"] == sid
    assert [(o["optionId"], o["kind"]) for o in first["options"]] == [("extend", "allow_once"), ("synthesize", "reject_once")]
    calls = [r["params"]["toolCall"]["toolCallId"] for r in asked]
    assert calls == [f"interrupt_ext_1@{invocation}", f"interrupt_ext_2@{invocation}"]

    # Each question comes after the checkpoint's `think` tool call it is about; each answer is shown.
    for call_id in calls:
        shown = next(i for i, m in enumerate(before) if m.get("method") == "session/update"
                     and m["params"]["update"].get("toolCallId") == call_id and m["params"]["update"]["sessionUpdate"] == "tool_call")
        question = next(i for i, m in enumerate(before) if m.get("method") == "session/request_permission"
                        and m["params"]["toolCall"]["toolCallId"] == call_id)
        assert shown < question
        assert before[shown]["params"]["update"]["kind"] == "think" and before[shown]["params"]["update"]["status"] == "pending"
    outputs = [u["rawOutput"] for u in updates(before) if u.get("toolCallId") in calls and u.get("status") == "completed"]
    assert outputs == [{"action": "extend_budget", "guidance": "hypothetical documents"}, {"action": "synthesize"}]
    assert not [m for m in before if m.get("method") == "$/cancel_request"]
    ui = await a.result("_zocrates/session/get", {"sessionId": sid})
    assert ui["pending_hitl"] is None and "GAOHYDE1" in ui["messages"][-1]["text"]  # found through the guidance


@pytest.mark.parametrize("how", ["cancelled", "error", "session/cancel"])
async def test_a_checkpoint_not_answered_stays_pending_for_any_client(world: World, how: str) -> None:
    a, _ = world.connect("a")
    b, _ = world.connect("b")
    sid = await world.session(a)

    async def decline(request: Json) -> Json:
        if how == "error":
            return {"error": {"code": -32000, "message": "the user closed the dialog"}}
        if how == "session/cancel":  # ACP: cancel the turn, then answer the question `cancelled`
            await a.notify("session/cancel", {"sessionId": sid})
        return {"result": CANCELLED}

    a.on_request = decline
    reply, before = await a.call("session/prompt", prompt(sid, TWO))
    result = reply["result"]
    hitl = result["_meta"]["zocrates"]["pendingHitl"]
    assert result["stopReason"] == "cancelled" and hitl is not None and hitl["interrupt_id"] == "interrupt_ext_1"
    models.PromptResult.model_validate(result)
    assert not [m for m in before if m.get("method") == "$/cancel_request"]  # nothing to withdraw: it was answered
    assert (await b.result("_zocrates/session/get", {"sessionId": sid}))["pending_hitl"] == hitl

    # Another connection loads the session: history, then the checkpoint, then the title.
    loaded, before = await b.load(sid)
    assert [o["id"] for o in loaded["result"]["configOptions"]] == ["scope", "model", "research_budget", "compaction", "citation_style"]
    ups = updates(before, sid)
    assert ups[0] == {"sessionUpdate": "user_message_chunk", "content": text(TWO), "messageId": ups[0]["messageId"]}
    assert ups[-2] == {
        "sessionUpdate": "tool_call", "toolCallId": f"interrupt_ext_1@{hitl['invocation_id']}", "title": hitl["message"],
        "kind": "think", "status": "pending", "rawInput": hitl["payload"],
    }
    assert ups[-1] == {"sessionUpdate": "session_info_update", "title": TWO}

    # It answers; the connection that loaded the session hears the rest of the turn.
    done = await b.result("_zocrates/chat/resume", {"sessionId": sid, "invocationId": hitl["invocation_id"],
                                                    "interruptId": "interrupt_ext_1", "response": {"action": "synthesize"}})
    assert done == {"stopReason": "end_turn", "invocationId": hitl["invocation_id"], "pendingHitl": None,
                    "citations": done["citations"]}
    assert done["citations"] and all(c["verified"] for c in done["citations"])  # the offline answer quotes verbatim
    heard = await a.until("usage_update")  # `a` is attached too (it prompted)
    assert heard[0] == {"sessionUpdate": "tool_call_update", "toolCallId": f"interrupt_ext_1@{hitl['invocation_id']}",
                        "status": "completed", "rawOutput": {"action": "synthesize"}}
    assert "agent_message_chunk" in kinds(heard)
    err = await b.error("_zocrates/chat/resume", {"sessionId": sid, "invocationId": hitl["invocation_id"],
                                                  "interruptId": "interrupt_ext_1", "response": {"action": "synthesize"}})
    assert (err["code"], err["data"]["kind"]) == (1004, "checkpoint_not_pending")


# --- attached connections ----------------------------------------------------------------------------


async def test_a_second_attached_connection_sees_the_same_updates(world: World) -> None:
    a, _ = world.connect("a")
    b, _ = world.connect("b")
    sid = await world.session(a)
    _, before = await b.load(sid)
    assert updates(before) == [{"sessionUpdate": "session_info_update", "title": "New Chat"}]  # nothing yet

    _, before = await a.call("session/prompt", prompt(sid, "What is HyDE?"))
    mine = updates(before, sid)
    theirs = await b.until("usage_update")
    # b did not prompt: it also sees the user's message, first; the rest is the same, in order.
    assert theirs[0]["sessionUpdate"] == "user_message_chunk" and theirs[0]["content"] == text("What is HyDE?")
    assert theirs[1:] == mine
    assert mine[0] == {"sessionUpdate": "session_info_update", "title": "What is HyDE?"}

    await a.result("_zocrates/session/rename", {"sessionId": sid, "title": "Renamed"})
    assert await b.until("session_info_update") == [{"sessionUpdate": "session_info_update", "title": "Renamed"}]
    await a.result("session/delete", {"sessionId": sid})
    err = await b.error("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
    assert err["code"] == -32002


# --- session settings, resume, close, slash commands, elicitation (issue 19) -------------------------

BOOLEANS = {"session": {"configOptions": {"boolean": {}}}}
OPTION_IDS = ["scope", "model", "research_budget", "compaction", "citation_style"]


def values(options: list[Json]) -> Json:
    return {o["id"]: o["currentValue"] for o in options}


async def initialized(world: World, name: str, caps: Json | None = None) -> Client:
    client, _ = world.connect(name)
    await client.result("initialize", {"protocolVersion": 1, "clientCapabilities": caps or {}})
    return client


async def test_settings_are_validated_stored_and_heard_by_the_other_connections(world: World) -> None:
    a = await initialized(world, "a", BOOLEANS)
    b = await initialized(world, "b")
    new = await a.result("session/new", {"cwd": "/", "mcpServers": []})
    sid = new["sessionId"]
    await a.commands(sid)
    models.NewSessionResult.model_validate(new)
    assert [o["id"] for o in new["configOptions"]] == OPTION_IDS
    assert values(new["configOptions"]) == {"scope": "library", "model": "offline", "research_budget": "1", "compaction": True,
                                                "citation_style": "numbered"}
    scope = new["configOptions"][0]
    assert [c["value"] for c in scope["options"]] == ["library", "papers", "collection:RAG0COLL"]
    resumed = await b.result("session/resume", {"sessionId": sid, "cwd": "/"})
    assert await b.commands(sid)
    compaction = resumed["configOptions"][3]
    assert (compaction["type"], compaction["currentValue"]) == ("select", "on")  # b takes no boolean options

    for config_id, value, shown_to_b in [
        ("scope", "collection:RAG0COLL", "collection:RAG0COLL"), ("model", "offline", "offline"),
        ("research_budget", "4", "4"), ("compaction", False, "off"),
    ]:
        params: Json = {"sessionId": sid, "configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        answer, before = await a.call("session/set_config_option", params)
        models.SetConfigOptionResult.model_validate(answer["result"])
        assert values(answer["result"]["configOptions"])[config_id] == value
        assert not updates(before), "the connection that set it is not told again"
        heard = (await b.until("config_option_update"))[-1]
        assert values(heard["configOptions"])[config_id] == shown_to_b
    # "on"/"off" for a client without boolean options.
    assert values((await b.result("session/set_config_option", {"sessionId": sid, "configId": "compaction", "value": "on"}))["configOptions"])["compaction"] == "on"
    assert values((await a.until("config_option_update"))[-1]["configOptions"])["compaction"] is True

    for params, what in [
        ({"configId": "research_budget", "value": "11"}, "1 to 10"),
        ({"configId": "research_budget", "value": "two"}, "1 to 10"),
        ({"configId": "model", "value": "gpt-9"}, "offline"),
        ({"configId": "scope", "value": "collection:NOPE0000"}, "no collection"),
        ({"configId": "scope", "value": "everything"}, "library"),
        ({"configId": "colour", "value": "red"}, "unknown setting"),
        ({"configId": "compaction", "value": True}, "boolean"),  # a boolean without "type": "boolean"
        ({"configId": "compaction", "type": "boolean", "value": "on"}, "boolean"),
    ]:
        err = await a.error("session/set_config_option", {"sessionId": sid, **params})
        assert err["code"] == -32602 and what in json.dumps(err), (params, err)
    missing = await a.error("session/set_config_option", {"sessionId": "session-0-000000", "configId": "model", "value": "offline"})
    assert missing["code"] == -32002
    stored = await world.daemon.reader.session_state(sid)
    assert stored["session_config"] == {"scope": "collection", "collection": "RAG0COLL", "model": "offline",
                                        "research_budget": 4, "compaction": True}


async def test_the_scope_setting_scopes_prompts_that_do_not_choose_their_own(world: World) -> None:
    a = await initialized(world, "a")
    sid = await world.session(a)

    async def searched(*blocks: Json | str, meta: Any = None) -> Json:
        reply, before = await a.call("session/prompt", prompt(sid, *blocks, meta=meta))
        assert reply["result"]["stopReason"] == "end_turn", reply
        [done] = [u for u in updates(before) if u["sessionUpdate"] == "tool_call_update" and "rawOutput" in u]
        return dict(done["rawOutput"])

    await a.result("session/set_config_option", {"sessionId": sid, "configId": "scope", "value": "papers"})
    err = await a.error("session/prompt", prompt(sid, "What is HyDE?"))
    assert err["code"] == -32602 and "no prompt of this session has linked" in err["data"]["message"]
    link = {"type": "resource_link", "uri": "zotero://select/library/items/KARPDPR1", "name": "DPR"}
    assert (await searched("What does it encode?", link))["scope"] == "papers"
    # The linked papers are remembered: the next prompt searches them without links.
    out = await searched("Which encoders encode the questions?")
    assert out["scope"] == "papers" and {p["item_key"] for p in out["passages"]} == {"KARPDPR1"}
    # `_meta.zocrates.mode` still wins for its turn.
    assert (await searched("What is HyDE?", meta={"zocrates": {"mode": "library"}}))["scope"] == "library"
    await a.result("session/set_config_option", {"sessionId": sid, "configId": "scope", "value": "collection:RAG0COLL"})
    out = await searched("What does RAG combine?")
    assert out["scope"] == "collection" and {p["item_key"] for p in out["passages"]} == {"LEWIS202"}


async def test_slash_commands_change_settings_and_answer_in_a_message(world: World) -> None:
    a = await initialized(world, "a")
    b = await initialized(world, "b")
    sid = str((await a.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"])
    commands = await a.commands(sid)
    assert [c["name"] for c in commands] == ["library", "collection", "papers", "research", "compact", "rewind", "status",
                                            "note", "tag", "undo", "writes", "bib", "cite"]
    assert {c["name"]: c.get("input") for c in commands}["collection"] == {"hint": "collection name"}
    await b.load(sid)

    async def command(text: str) -> tuple[Json, str]:
        reply, before = await a.call("session/prompt", prompt(sid, text))
        models.PromptResult.model_validate(reply["result"])
        assert reply["result"]["stopReason"] == "end_turn"
        chunks = [u for u in updates(before) if u["sessionUpdate"] == "agent_message_chunk"]
        assert chunks, f"no reply to {text}: {before}"  # written before the answer
        assert chunks[-1]["messageId"].startswith("command-")
        return reply["result"]["_meta"]["zocrates"]["command"], str(chunks[-1]["content"]["text"])

    assert await command("/research 2") == ({"name": "research", "ok": True}, "Research budget: 2 rounds per turn.")
    assert values((await b.until("config_option_update"))[-1]["configOptions"])["research_budget"] == "2"
    outcome, text = await command("  /collection rag0coll")
    assert outcome["ok"] and text == "Scope: the collection RAG0COLL and its subcollections."
    assert (await command("/collection Nothing Like It"))[0] == {"name": "collection", "ok": False, "errorKind": "invalid_input"}
    assert (await command("/research 0"))[0]["ok"] is False
    _, text = await command("/research")
    assert text.startswith("Research budget: 2 rounds")
    assert (await command("/rewind"))[0] == {"name": "rewind", "ok": False, "errorKind": "not_found"}
    _, text = await command("/status")
    assert "Storage: 1 sessions" in text and "research budget 2" in text
    assert (await command("/compact"))[1].startswith("Nothing to compact")
    await command("/library")

    # A real turn, then /rewind undoes it; the settings survive the rewind.
    reply, _ = await a.call("session/prompt", prompt(sid, "What is HyDE?"))
    assert reply["result"]["stopReason"] == "end_turn"
    outcome, text = await command("/rewind")
    assert outcome["ok"] and "What is HyDE?" in text
    ui = await a.result("_zocrates/session/get", {"sessionId": sid})
    assert ui["messages"] == []
    after = {o.id: o.current for o in await world.daemon.config_options(sid)}
    assert after["research_budget"] == "2"
    # Text that names no command is an ordinary prompt; an unknown session is an error.
    reply, before = await a.call("session/prompt", prompt(sid, "/usr/share is not a command"))
    assert "invocationId" in reply["result"]["_meta"]["zocrates"]
    assert (await a.error("session/prompt", prompt("session-0-000000", "/status")))["code"] == -32002


async def test_resume_replays_nothing_and_close_detaches(world: World) -> None:
    a = await initialized(world, "a")
    b = await initialized(world, "b")
    sid = await world.session(a)
    reply, _ = await a.call("session/prompt", prompt(sid, "What is HyDE?"))
    assert reply["result"]["stopReason"] == "end_turn"
    resumed, before = await b.call("session/resume", {"sessionId": sid, "cwd": "/"})
    models.ResumeSessionResult.model_validate(resumed["result"])
    assert updates(before) == []  # no replay
    await b.commands(sid)
    assert (await b.error("session/resume", {"sessionId": "session-0-000000", "cwd": "/"}))["code"] == -32002

    assert await b.result("session/close", {"sessionId": sid}) == {}
    await a.call("_zocrates/session/rename", {"sessionId": sid, "title": "Renamed"})
    _, before = await b.call("session/list", {})  # a round trip: anything sent to b before is read
    assert updates(before) == []  # b closed it: nothing more
    assert await b.result("session/close", {"sessionId": sid}) == {}  # not attached: still fine
    assert (await b.error("session/close", {"sessionId": "session-0-000000"}))["code"] == -32002
    assert [s["sessionId"] for s in (await b.result("session/list", {}))["sessions"]] == [sid]  # still stored


async def test_close_cancels_the_turn_this_connection_runs(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await initialized(world, "a")
    sid = await world.session(a)
    asked = anyio.Event()

    async def hold(request: Json) -> Json | None:  # the checkpoint waits while a closes the session
        asked.set()
        return None

    a.on_request = hold
    await a.request("session/prompt", prompt(sid, TWO))
    closer = await initialized(world, "closer")
    # Only the connection that prompts can close its turn: another's close leaves it running.
    assert await closer.result("session/close", {"sessionId": sid}) == {}
    with anyio.fail_after(15):
        while True:
            msg = await a.recv()
            if msg.get("method") == "session/request_permission":
                break
    close_id = await a.request("session/close", {"sessionId": sid})
    answers: dict[Any, Json] = {}
    with anyio.fail_after(15):
        while len(answers) < 2:
            msg = await a.recv()
            if "method" not in msg:
                answers[msg["id"]] = msg
    assert answers[close_id]["result"] == {}
    [turn] = [m for i, m in answers.items() if i != close_id]
    assert turn["result"]["stopReason"] == "cancelled"


async def test_a_checkpoint_is_asked_by_elicitation_where_the_client_offers_it(world: World) -> None:
    a = await initialized(world, "a", {"elicitation": {"form": {}}})
    sid = await world.session(a)
    asked: list[Json] = []

    async def elicit(request: Json) -> Json | None:
        assert request["method"] == "elicitation/create"
        models.ElicitationParams.model_validate(request["params"])
        asked.append(request["params"])
        return {"result": {"action": "accept", "content": {"action": "extend", "guidance": "dense passage"}}
                if len(asked) == 1 else {"action": "accept", "content": {"action": "synthesize"}}}

    a.on_request = elicit
    reply, before = await a.call("session/prompt", prompt(sid, TWO))
    assert reply["result"]["stopReason"] == "end_turn"
    assert [p["toolCallId"].split("@")[0] for p in asked] == ["interrupt_ext_1", "interrupt_ext_2"]
    assert asked[0]["mode"] == "form" and asked[0]["requestedSchema"]["required"] == ["action"]
    answered = [u["rawOutput"] for u in updates(before) if u["sessionUpdate"] == "tool_call_update"
                and u.get("toolCallId", "").startswith("interrupt_ext_")]
    assert answered == [{"action": "extend_budget", "guidance": "dense passage"}, {"action": "synthesize"}]

    # Declined: the checkpoint stays pending and the turn ends cancelled, as with permissions.
    async def decline(request: Json) -> Json | None:
        return {"result": {"action": "decline"}}

    a.on_request = decline
    reply, _ = await a.call("session/prompt", prompt(sid, TWO))
    assert reply["result"]["stopReason"] == "cancelled"
    assert reply["result"]["_meta"]["zocrates"]["pendingHitl"]["interrupt_id"] == "interrupt_ext_1"


async def test_usage_reports_what_the_compactor_saw_and_compaction_can_be_off(world: World) -> None:
    a = await initialized(world, "a")
    sid = await world.session(a)
    await a.result("session/set_config_option", {"sessionId": sid, "configId": "compaction", "value": "off"})
    _, before = await a.call("session/prompt", prompt(sid, "What is HyDE?"))
    usage = updates(before)[-1]
    assert usage["sessionUpdate"] == "usage_update" and usage["used"] > 0 and usage["size"] == 100_000
    assert usage["_meta"]["zocrates"]["reason"] == "off" and usage["_meta"]["zocrates"]["compacted"] is False
    chunks = [u for u in updates(before) if u["sessionUpdate"].endswith("_chunk")]
    assert chunks and all(u.get("messageId") for u in chunks)
