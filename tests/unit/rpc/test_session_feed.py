"""The ACP face's session feeds (rpc/agent.py `SessionFeed`): a connection that stops reading holds up
neither the turn nor the other connections; it is cut off; answers still follow their updates; one
writer task per feed, from attach to close or disconnect."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from memstream import MemoryByteStream, pipe

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.library.retrieval import InMemoryRetriever, Passage
from zocratesd.rpc import agent
from zocratesd.rpc.acp import build_methods
from zocratesd.rpc.peer import MethodTable, Peer

# Online search off: these tests are about other things, and no face here asks about it.
OFFLINE = {"mode": "off"}

pytestmark = pytest.mark.anyio

PASSAGES = [Passage("GAOHYDE1", "HyDE", "HyDE writes a hypothetical document and embeds it.", ("Luyu Gao",), 2022)]


class Client:
    def __init__(self, stream: MemoryByteStream):
        self.stream, self.buf, self.ids = stream, b"", 0
        self.read_delay = 0.0  # a slow reader: seconds before each read

    async def call(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Send one request; its answer and the messages that came before it."""
        self.ids += 1
        await self.stream.send(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}).encode() + b"\n")
        before: list[dict[str, Any]] = []
        while True:
            while b"\n" not in self.buf:
                if self.read_delay:
                    await anyio.sleep(self.read_delay)
                self.buf += await self.stream.receive()
            line, _, self.buf = self.buf.partition(b"\n")
            msg = json.loads(line)
            if msg.get("id") == self.ids and "method" not in msg:
                return msg, before
            before.append(msg)


class World:
    def __init__(self, daemon: Daemon, methods: MethodTable, tg: anyio.abc.TaskGroup):
        self.daemon, self.methods, self.tg = daemon, methods, tg

    def connect(self, name: str, buffer: int = 100) -> tuple[Client, Peer, MemoryByteStream]:
        """A connection; `buffer` is how many writes the pipe holds before the daemon's write waits."""
        server_end, client_end = pipe(buffer)
        peer = Peer(server_end, self.methods, name=name)
        self.tg.start_soon(peer.run)
        return Client(client_end), peer, client_end


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    daemon = Daemon(tmp_path, ZocratesConfig(online=OFFLINE), retriever=InMemoryRetriever(PASSAGES))
    await daemon.start()
    try:
        async with anyio.create_task_group() as tg:
            yield World(daemon, build_methods(daemon), tg)
            tg.cancel_scope.cancel()
    finally:
        await daemon.aclose()


def updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


async def test_the_answer_follows_every_update_of_the_turn_and_the_own_message_is_left_out(world: World) -> None:
    a, _, _ = world.connect("a")
    with anyio.fail_after(30):
        new, _ = await a.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = new["result"]["sessionId"]
        answer, before = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "What is HyDE?"}]})
    assert answer["result"]["stopReason"] == "end_turn"
    kinds = [u["sessionUpdate"] for u in updates(before)]
    assert "user_message_chunk" not in kinds  # the prompting editor shows its own message
    assert "agent_message_chunk" in kinds and kinds[-1] == "usage_update"  # usage: the turn's last update


async def test_a_connection_that_stops_reading_holds_up_no_turn_and_no_other_connection(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far beyond the test's deadline: only the per-listener queues can keep the turn going.
    monkeypatch.setattr(agent, "SLOW_CLIENT_TIMEOUT_S", 600.0)
    a, _, _ = world.connect("a")
    b, b_peer, b_end = world.connect("b", buffer=0)  # every write waits for b to read
    c, _, _ = world.connect("c")
    with anyio.fail_after(30):
        sid = (await a.call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["result"]["sessionId"]
        await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        await c.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        # b reads no more from here on.
        for text in ("What is HyDE?", "And again?"):
            answer, _ = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
            assert answer["result"]["stopReason"] == "end_turn"
        _, heard = await c.call("session/list", {})  # a round trip: c has read what was sent before
        users = [u["content"]["text"] for u in updates(heard) if u["sessionUpdate"] == "user_message_chunk"]
        assert users == ["What is HyDE?", "And again?"]
        assert not b_peer.closed  # stuck, not yet cut off
        await b_end.aclose()  # the stuck editor goes away: its connection ends
        while not b_peer.closed:
            await anyio.sleep(0.01)


async def test_a_connection_whose_queue_overflows_is_cut_off(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "SLOW_CLIENT_TIMEOUT_S", 600.0)
    monkeypatch.setattr(world.daemon, "watch", functools.partial(Daemon.watch, world.daemon, limit=3))
    a, _, _ = world.connect("a")
    b, b_peer, b_end = world.connect("b", buffer=0)
    with anyio.fail_after(30):
        sid = (await a.call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["result"]["sessionId"]
        await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        answer, _ = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "What is HyDE?"}]})
        assert answer["result"]["stopReason"] == "end_turn"
        while not b_peer.closed:  # more than 3 updates waited for b: it is aborted at once
            await anyio.sleep(0.01)
        # Its stuck write was given up and its connection closed: what b reads ends.
        with pytest.raises(anyio.EndOfStream):
            while True:
                await b_end.receive()
    assert world.daemon._watchers.watching(sid) == 1  # only a's feed is left


def writers(peer: Peer, session_id: str) -> int:
    """How many writer tasks of this connection's feed of the session are running."""
    return sum(1 for t in anyio.get_running_tasks() if t.name == f"{peer.name}: updates of {session_id}")


async def test_one_writer_per_feed_carries_every_update_of_many_turns_complete_and_in_order(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, a_peer, _ = world.connect("a", buffer=0)
    a.read_delay = 0.005  # a slow reader: its writer is still busy when the turn's last update comes
    b, b_peer, _ = world.connect("b")
    started: list[str] = []  # the tasks each connection starts

    def counted(peer: Peer, fn: Any, *, name: str) -> bool:
        started.append(name)
        return Peer.start_soon(peer, fn, name=name)

    for peer in (a_peer, b_peer):
        monkeypatch.setattr(peer, "start_soon", functools.partial(counted, peer))
    prompts = [f"What is HyDE, question {n}?" for n in range(6)]
    with anyio.fail_after(60):
        sid = (await a.call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["result"]["sessionId"]
        await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        for n, text in enumerate(prompts):
            answer, before = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
            assert answer["result"]["stopReason"] == "end_turn"
            assert updates(before)[-1]["sessionUpdate"] == "usage_update"  # the answer after the turn's last update
            for k in range(5):  # updates between turns too, each heard by both
                await world.daemon.rename_session(sid, f"T{n}.{k}")
        _, heard = await b.call("session/list", {})  # a round trip: b has read what was sent before
        assert writers(a_peer, sid) == writers(b_peer, sid) == 1
    # b heard each turn whole (its user message first, its usage last), then the renames, in order.
    marks = [
        (u["sessionUpdate"], u["content"]["text"] if u["sessionUpdate"] == "user_message_chunk" else u.get("title"))
        for u in updates(heard)
        if u["sessionUpdate"] in ("user_message_chunk", "usage_update")
        or (u["sessionUpdate"] == "session_info_update" and u["title"].startswith("T"))
    ]
    assert marks == [
        m for n, text in enumerate(prompts)
        for m in [("user_message_chunk", text), ("usage_update", None), *(("session_info_update", f"T{n}.{k}") for k in range(5))]
    ]
    # One writer for each connection's feed, for the whole life of the feed (no task per burst).
    assert sorted(n for n in started if "updates of" in n) == [f"a: updates of {sid}", f"b: updates of {sid}"]


async def test_a_connection_that_stops_reading_is_cut_off_after_the_write_timeout(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "SLOW_CLIENT_TIMEOUT_S", 0.3)
    a, _, _ = world.connect("a")
    b, b_peer, b_end = world.connect("b", buffer=0)
    with anyio.fail_after(30):
        sid = (await a.call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["result"]["sessionId"]
        await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        # b reads no more: its first session/update write waits, then is given up, and b is cut off.
        answer, before = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "What is HyDE?"}]})
        assert answer["result"]["stopReason"] == "end_turn" and updates(before)[-1]["sessionUpdate"] == "usage_update"
        while not b_peer.closed:
            await anyio.sleep(0.01)
        with pytest.raises(anyio.EndOfStream):
            while True:
                await b_end.receive()
        while writers(b_peer, sid):  # its writer ends with it
            await anyio.sleep(0.01)
    assert world.daemon._watchers.watching(sid) == 1  # only a's feed is left
    again, _ = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "And again?"}]})
    assert again["result"]["stopReason"] == "end_turn"


async def test_close_and_disconnect_end_the_writer_and_a_turn_whose_client_left_is_stored(tmp_path: Path) -> None:
    passages = [*PASSAGES, Passage("LEWIS202", "Retrieval-Augmented Generation", "RAG combines parametric and non-parametric memory.", (), 2020)]
    daemon = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 1}, online=OFFLINE), retriever=InMemoryRetriever(passages))
    await daemon.start()
    try:
        async with anyio.create_task_group() as tg:
            world = World(daemon, build_methods(daemon), tg)
            a, a_peer, a_end = world.connect("a")
            b, b_peer, _ = world.connect("b")
            with anyio.fail_after(60):
                sid = (await a.call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["result"]["sessionId"]
                await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
                assert writers(b_peer, sid) == 1
                await b.call("session/close", {"sessionId": sid})  # detached: its writer ends
                while writers(b_peer, sid):
                    await anyio.sleep(0.01)
                await b.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})  # a new feed
                # a prompts a turn that stops at a research checkpoint, and goes away while it waits.
                a.ids += 1
                await a_end.send(json.dumps({"jsonrpc": "2.0", "id": a.ids, "method": "session/prompt", "params": {
                    "sessionId": sid, "prompt": [{"type": "text", "text": "What does RAG combine? How does HyDE retrieve?"}]}}).encode() + b"\n")
                while b"session/request_permission" not in a.buf:
                    a.buf += await a_end.receive()
                await a_end.aclose()
                while not a_peer.closed or writers(a_peer, sid):
                    await anyio.sleep(0.01)
                # The turn ran to its end without its client (the checkpoint left pending); b heard it all.
                _, heard = await b.call("session/list", {})
                while "usage_update" not in [u["sessionUpdate"] for u in updates(heard)]:
                    _, more = await b.call("session/list", {})
                    heard += more
            kinds = [u["sessionUpdate"] for u in updates(heard)]
            assert kinds[-1] == "usage_update" and "tool_call" in kinds
            ui = await daemon.get_session(sid)
            assert ui["pending_hitl"] is not None
            assert [m["text"] for m in ui["messages"] if m["role"] == "user"] == ["What does RAG combine? How does HyDE retrieve?"]
            assert daemon._watchers.watching(sid) == 1  # b's feed only
            assert writers(b_peer, sid) == 1
            tg.cancel_scope.cancel()
    finally:
        await daemon.aclose()
