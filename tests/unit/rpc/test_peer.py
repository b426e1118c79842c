"""The connection peer, driven over an in-memory byte stream: no sockets, no daemon."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from memstream import MemoryByteStream, pipe

from zocrates_wire.errors import ConnectionLost, RpcError
from zocratesd.rpc import peer as peer_mod
from zocratesd.rpc.peer import MethodTable, Peer

pytestmark = pytest.mark.anyio


class Client:
    """The test's side: writes raw bytes, reads whole JSON lines."""

    def __init__(self, stream: MemoryByteStream):
        self.stream = stream
        self.buf = b""

    async def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n"
        await self.stream.send(data)

    async def recv(self) -> dict[str, Any]:
        with anyio.fail_after(5):
            while b"\n" not in self.buf:
                self.buf += await self.stream.receive()
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


def methods(log: list[str]) -> dict[str, Any]:
    async def echo(peer: Peer, /, **params: Any) -> Any:
        return params

    async def slow(peer: Peer, /, **params: Any) -> Any:
        try:
            await anyio.sleep(params.get("seconds", 10))
        except anyio.get_cancelled_exc_class():
            log.append("slow cancelled")
            raise
        return "slow done"

    async def boom(peer: Peer, /, **params: Any) -> Any:
        raise RuntimeError("kaboom")

    async def refuse(peer: Peer, /, **params: Any) -> Any:
        raise RpcError(-32002, "Resource not found", {"kind": "not_found", "sessionId": "x"})

    async def ask(peer: Peer, /, **params: Any) -> Any:
        try:
            answer = await peer.request("client/question", {"q": params.get("q")})
        except RpcError as exc:
            return {"remote_error": exc.code}
        except ConnectionLost:
            log.append("ask: peer closed")
            raise
        return {"answer": answer}

    async def note(peer: Peer, /, **params: Any) -> None:
        log.append(f"note {params}")
        return None

    return MethodTable(
        {"echo": echo, "slow": slow, "boom": boom, "refuse": refuse, "ask": ask, "note": note}, notifications={"note"}
    )


@pytest.fixture
async def conn() -> AsyncIterator[tuple[Client, list[str], Peer]]:
    server_end, client_end = pipe()
    log: list[str] = []
    p = Peer(server_end, methods(log), max_frame_bytes=1024, name="test")
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        yield Client(client_end), log, p
        await client_end.send_eof()
        with anyio.fail_after(5):
            while not p.closed:
                await anyio.sleep(0.01)


async def test_request_and_unknown_fields(conn: Any) -> None:
    c, _, _ = conn
    await c.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"a": 1, "_meta": {"x": 2}}})
    assert await c.recv() == {"jsonrpc": "2.0", "result": {"a": 1, "_meta": {"x": 2}}, "id": 1}


async def test_a_long_request_does_not_block_others_and_cancel_answers_minus_32800(conn: Any) -> None:
    c, log, _ = conn
    await c.send({"jsonrpc": "2.0", "id": "long", "method": "slow"})
    await c.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"n": 2}})
    assert (await c.recv())["id"] == 2
    await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "long"}})
    reply = await c.recv()
    assert reply["id"] == "long" and reply["error"]["code"] == -32800
    assert reply["error"]["data"]["kind"] == "cancelled"
    assert log == ["slow cancelled"]


async def test_errors_keep_the_connection(conn: Any) -> None:
    c, _, _ = conn
    await c.send({"jsonrpc": "2.0", "id": 1, "method": "boom"})
    r = await c.recv()
    assert r["error"]["code"] == -32603 and r["error"]["data"]["kind"] == "internal"
    await c.send({"jsonrpc": "2.0", "id": 2, "method": "missing"})
    r = await c.recv()
    assert r["error"]["code"] == -32601 and r["error"]["data"] == {"kind": "method_not_found", "detail": "missing"}
    await c.send({"jsonrpc": "2.0", "id": 3, "method": "refuse"})
    r = await c.recv()
    assert r["error"]["code"] == -32002 and r["error"]["data"]["sessionId"] == "x"
    await c.send(b"garbage\n")
    assert (await c.recv())["error"]["code"] == -32700
    await c.send(b"x" * 5000 + b"\n")
    r = await c.recv()
    assert r["error"]["code"] == -32600 and r["error"]["data"] == {"kind": "frame_too_large", "limit": 1024}
    await c.send({"jsonrpc": "2.0", "id": 4, "method": "echo"})
    assert (await c.recv())["result"] == {}


async def test_notifications_run_and_are_never_answered(conn: Any) -> None:
    c, log, _ = conn
    await c.send({"jsonrpc": "2.0", "method": "note", "params": {"k": 1}})
    await c.send({"jsonrpc": "2.0", "method": "unknown/notification"})
    await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "never-sent"}})
    # A request method sent without an id is not run: its caller could never see the outcome.
    await c.send({"jsonrpc": "2.0", "method": "slow", "params": {"seconds": 0}})
    await c.send({"jsonrpc": "2.0", "id": 9, "method": "echo"})
    assert (await c.recv())["id"] == 9  # nothing came before this reply
    assert log == ["note {'k': 1}"]


async def test_outbound_request_gets_its_response(conn: Any) -> None:
    c, _, _ = conn
    await c.send({"jsonrpc": "2.0", "id": 1, "method": "ask", "params": {"q": "extend?"}})
    req = await c.recv()
    assert req["method"] == "client/question" and req["params"] == {"q": "extend?"}
    assert str(req["id"]).startswith("z:")
    await c.send({"jsonrpc": "2.0", "id": "z:999", "result": "stray"})  # not ours: ignored
    await c.send({"jsonrpc": "2.0", "id": req["id"], "result": {"optionId": "extend"}})
    assert (await c.recv())["result"] == {"answer": {"optionId": "extend"}}

    await c.send({"jsonrpc": "2.0", "id": 2, "method": "ask", "params": {"q": "again"}})
    req = await c.recv()
    await c.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "no"}})
    assert (await c.recv())["result"] == {"remote_error": -32601}


async def test_cancelling_a_request_that_waits_on_the_client_cascades(conn: Any) -> None:
    c, _, _ = conn
    await c.send({"jsonrpc": "2.0", "id": 1, "method": "ask", "params": {"q": "?"}})
    req = await c.recv()
    await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})
    first, second = await c.recv(), await c.recv()
    assert first == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": req["id"]}}
    assert second["id"] == 1 and second["error"]["code"] == -32800


async def test_duplicate_in_flight_id_is_refused(conn: Any) -> None:
    c, _, _ = conn
    await c.send({"jsonrpc": "2.0", "id": 5, "method": "slow"})
    await c.send({"jsonrpc": "2.0", "id": 5, "method": "echo"})
    r = await c.recv()
    assert r["id"] is None and r["error"]["code"] == -32600 and r["error"]["data"]["kind"] == "duplicate_id"
    await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 5}})
    assert (await c.recv())["error"]["code"] == -32800


async def test_too_many_requests_in_flight_are_refused() -> None:
    assert peer_mod.MAX_INFLIGHT_REQUESTS == 256  # the limit protocol/README.md states
    server_end, client_end = pipe()
    p = Peer(server_end, methods([]), max_inflight_requests=3, name="t")
    c = Client(client_end)
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        for i in range(3):
            await c.send({"jsonrpc": "2.0", "id": i, "method": "slow"})
        await c.send({"jsonrpc": "2.0", "id": 99, "method": "echo"})
        r = await c.recv()
        assert r["id"] == 99 and r["error"]["code"] == 1002 and r["error"]["data"] == {"kind": "overloaded", "limit": 3}
        for i in range(3):
            await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": i}})
        assert sorted([(await c.recv())["id"] for _ in range(3)]) == [0, 1, 2]
        await c.send({"jsonrpc": "2.0", "id": 100, "method": "echo"})
        assert (await c.recv())["id"] == 100
        await client_end.send_eof()
    assert p.closed


async def test_half_close_still_delivers_answers_in_flight() -> None:
    server_end, client_end = pipe()
    p = Peer(server_end, methods([]), name="t")
    c = Client(client_end)
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        await c.send({"jsonrpc": "2.0", "id": 1, "method": "slow", "params": {"seconds": 0.2}})
        await c.send(b'{"jsonrpc":"2.0","id":2,"method":"echo"}')  # last line, no newline
        await client_end.send_eof()
        got = {(await c.recv())["id"], (await c.recv())["id"]}
        assert got == {1, 2}
    assert p.closed


async def test_disconnect_fails_pending_outbound_requests() -> None:
    server_end, client_end = pipe()
    log: list[str] = []
    p = Peer(server_end, methods(log), name="t")
    c = Client(client_end)
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        await c.send({"jsonrpc": "2.0", "id": 1, "method": "ask"})
        await c.recv()
        await client_end.aclose()
    assert log == ["ask: peer closed"]
    assert p.closed
    assert await p.notify("late", {}) is False  # sends after close are dropped, not raised


async def test_cancel_with_an_unusable_request_id_is_ignored(conn: Any) -> None:
    c, _, _ = conn
    for bad in ([1, 2], {"a": 1}, None, True, 1.5):
        await c.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": bad}})
    await c.send({"jsonrpc": "2.0", "id": 1, "method": "echo"})
    assert (await c.recv()) == {"jsonrpc": "2.0", "result": {}, "id": 1}


# --- a client whose input has ended (issue 16) ---------------------------------------------------


async def test_nothing_is_asked_of_a_client_whose_input_has_ended() -> None:
    """It can never answer: the request fails at once instead of waiting (a checkpoint once held
    its session for the whole answer timeout), and nothing is sent but the handler's answer."""
    server_end, client_end = pipe()

    async def ask_later(peer: Peer, /, **params: Any) -> Any:
        while not peer.input_closed:  # a turn reaching its checkpoint after the client's EOF
            await anyio.sleep(0.01)
        with anyio.fail_after(10):
            try:
                await peer.request("session/request_permission", {"sessionId": "s"})
            except ConnectionLost as exc:
                return {"refused": str(exc)}
        return "answered?"

    p = Peer(server_end, MethodTable({"ask_later": ask_later}), name="t")
    c = Client(client_end)
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        await c.send({"jsonrpc": "2.0", "id": 1, "method": "ask_later"})
        await client_end.send_eof()
        reply = await c.recv()  # the first thing sent: no session/request_permission before it
    assert reply["id"] == 1 and "cannot answer" in reply["result"]["refused"]
    assert p.closed
    with pytest.raises(anyio.EndOfStream):  # nothing was sent after the answer
        await client_end.receive()


async def test_the_connection_ends_once_every_request_is_answered_after_the_input_ends() -> None:
    """Nothing more can come: a task still streaming to the client (a session feed) is stopped by
    the close, and the other end sees the end of the stream right after its last answer."""
    server_end, client_end = pipe()
    stop = anyio.Event()
    streamed: list[int] = []

    async def watch(peer: Peer, /, **params: Any) -> Any:
        async def stream() -> None:
            n = 0
            while not stop.is_set():  # ends only when the connection closes
                await peer.notify("tick", {"n": n})
                streamed.append(n)
                n += 1
                await anyio.sleep(0.01)

        peer.on_close.append(stop.set)
        peer.start_soon(stream, name="ticks")
        return "watching"

    async def slow(peer: Peer, /, **params: Any) -> Any:
        await anyio.sleep(0.3)
        return "slow done"

    p = Peer(server_end, MethodTable({"watch": watch, "slow": slow}), name="t")
    c = Client(client_end)
    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        await c.send({"jsonrpc": "2.0", "id": 1, "method": "watch"})
        await c.send({"jsonrpc": "2.0", "id": 2, "method": "slow"})
        await client_end.send_eof()
        answers: list[Any] = []
        with anyio.fail_after(5):
            while len(answers) < 2:
                msg = await c.recv()
                if "id" in msg:
                    answers.append(msg["id"])
            while not p.closed:
                await anyio.sleep(0.01)
    assert answers == [1, 2]
    assert stop.is_set() and streamed  # it streamed until the last answer, then stopped


async def test_a_request_given_up_without_notice_has_its_late_answer_dropped(conn: Any) -> None:
    """`notify_cancel` False: the caller gives up without `$/cancel_request` (ACP: after
    session/cancel the client answers its own session/request_permission `cancelled`)."""
    c, _, p = conn
    outcome: list[str] = []

    async def ask() -> None:
        with anyio.move_on_after(0.2):
            await p.request("session/request_permission", {"q": 1}, notify_cancel=lambda: False)
        outcome.append("gave up")

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        req = await c.recv()
    assert outcome == ["gave up"]
    await c.send({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "cancelled"}}})
    await c.send({"jsonrpc": "2.0", "id": 7, "method": "echo"})
    assert await c.recv() == {"jsonrpc": "2.0", "result": {}, "id": 7}  # no $/cancel_request before it


# --- writing: one writer per connection ----------------------------------------------------------


async def test_what_is_sent_while_a_write_waits_goes_out_in_one_write_in_order() -> None:
    """Every write is one item of the pipe: the frames queued behind a write that waits for the
    client are joined into the next one, in the order they were sent, whole."""
    server_end, client_end = pipe(0)  # each write waits until the client takes it
    p = Peer(server_end, MethodTable({}), name="t")
    sent: list[int] = []

    async def tick(n: int) -> None:
        assert await p.notify("tick", {"n": n})
        sent.append(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        tg.start_soon(tick, 0)
        await anyio.wait_all_tasks_blocked()  # tick 0 is being written, to a client not reading
        for n in range(1, 5):
            tg.start_soon(tick, n)
        await anyio.wait_all_tasks_blocked()
        assert sent == []  # a sender returns once its frames are written, not before
        writes = [await client_end.receive(), await client_end.receive()]
        await client_end.send_eof()
    assert [[json.loads(line)["params"]["n"] for line in w.splitlines()] for w in writes] == [[0], [1, 2, 3, 4]]
    assert sorted(sent) == [0, 1, 2, 3, 4]


async def test_a_sender_that_gives_up_takes_its_frame_back_and_a_close_releases_the_rest() -> None:
    server_end, client_end = pipe(0)
    p = Peer(server_end, MethodTable({}), name="t")
    results: dict[str, bool] = {}

    async def send(name: str, timeout: float | None = None) -> None:
        with anyio.move_on_after(timeout if timeout is not None else 30):
            results[name] = await p.notify(name, {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        tg.start_soon(send, "first")
        await anyio.wait_all_tasks_blocked()  # being written: the client does not read
        tg.start_soon(send, "impatient", 0.05)
        tg.start_soon(send, "patient")
        await anyio.wait_all_tasks_blocked()
        assert len(p._sendq) == 2  # one push per waiting sender: the queue holds no more
        await anyio.sleep(0.1)  # the impatient one gives up: its frame never goes out
        assert len(p._sendq) == 1 and "impatient" not in results
        got = [json.loads(line)["method"] for _ in range(2) for line in (await client_end.receive()).splitlines()]
        assert got == ["first", "patient"]
        tg.start_soon(send, "stuck")
        await anyio.wait_all_tasks_blocked()
        p.abort()  # a client that stopped reading is cut off: every sender hears False at once
        await anyio.wait_all_tasks_blocked()
        assert results == {"first": True, "patient": True, "stuck": False}
        assert len(p._sendq) == 0


async def test_a_batch_whose_client_goes_away_midway_ends_false_and_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer_mod, "WRITE_BATCH_BYTES", 64)  # a few notifications per write
    server_end, client_end = pipe(0)
    p = Peer(server_end, MethodTable({}), name="t")
    outcome: list[bool] = []

    async def replay() -> None:
        outcome.append(await p.send_messages({"jsonrpc": "2.0", "method": "n", "params": {"k": k}} for k in range(20)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(p.run)
        tg.start_soon(replay)
        first = await client_end.receive()  # one write arrives, then the client goes away
        await client_end.aclose()
        with anyio.fail_after(5):
            while not outcome:
                await anyio.sleep(0.01)
    assert 1 < len(first.splitlines()) < 20  # batched, and cut short
    assert outcome == [False] and p.closed and len(p._sendq) == 0
    assert await p.send_messages([{"jsonrpc": "2.0", "method": "late"}]) is False
