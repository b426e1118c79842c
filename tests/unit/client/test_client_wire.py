"""The client's own wire behaviour, against a scripted fake daemon on a Unix socket.

The fake sends exactly what a test needs (answers out of order, requests to the client,
`$/cancel_request`, garbage, oversize frames, a hang-up) - things the real daemon cannot be made
to do on demand. Every test runs on asyncio and on trio.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import zocrates_client
from zocrates_client import (
    ConnectionLost,
    DaemonNotRunning,
    RpcError,
    UpdatesOverflow,
    connect,
)
from zocrates_wire.framing import NEED_DATA, FrameDecoder, encode_message

pytestmark = pytest.mark.anyio

# Every step of a fake exchange is local and instant; a test that waits longer than this hangs.
STEP_TIMEOUT_S = 5.0
RACE_ROUNDS = 50


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class FakeConn:
    """The daemon's end of one connection: send messages, receive what the client sent."""

    def __init__(self, stream: anyio.abc.ByteStream):
        self.stream = stream
        self.decoder = FrameDecoder()

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send(encode_message(message))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def recv(self) -> dict[str, Any]:
        with anyio.fail_after(STEP_TIMEOUT_S):
            while True:
                event = self.decoder.next_event()
                if isinstance(event, bytes):
                    return json.loads(event)  # type: ignore[no-any-return]
                assert event is NEED_DATA
                self.decoder.feed(await self.stream.receive())

    async def update(self, session_id: str, text: str) -> None:
        await self.send(update_message(session_id, text))


def update_message(session_id: str, text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}


@asynccontextmanager
async def fake_daemon(path: Path, **connect_kw: Any) -> AsyncIterator[tuple[zocrates_client.Client, FakeConn]]:
    """A client connected to a fake daemon; the fake's end stays open until the client has exited."""
    async with await anyio.create_unix_listener(path) as listener:
        accepted: list[anyio.abc.ByteStream] = []
        try:
            async with connect(socket_path=path, **connect_kw) as client:
                with anyio.fail_after(STEP_TIMEOUT_S):
                    accepted.append(await listener.accept())
                yield client, FakeConn(accepted[0])
        finally:
            for stream in accepted:
                await stream.aclose()


def texts(updates: list[Any]) -> list[str]:
    return [u["content"]["text"] for u in updates]


async def test_answers_are_matched_to_calls_by_id_even_out_of_order(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            results[name] = await client.call(name, {"n": name})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "first")
            first = await fake.recv()
            tg.start_soon(call, "second")
            second = await fake.recv()
            assert first["jsonrpc"] == "2.0" and first["method"] == "first" and first["params"] == {"n": "first"}
            assert isinstance(first["id"], int) and first["id"] != second["id"]
            await fake.send({"jsonrpc": "2.0", "id": second["id"], "result": "answer-2"})
            await fake.send({"jsonrpc": "2.0", "id": first["id"], "result": "answer-1"})
        assert results == {"first": "answer-1", "second": "answer-2"}


async def test_an_error_answer_raises_rpc_error_with_code_message_and_data(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                req = await fake.recv()
                data = {"kind": "session_busy", "message": "session 's1' is busy (delete in progress)"}
                await fake.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": 1001, "message": "Session busy", "data": data}})

            tg.start_soon(answer)
            with pytest.raises(RpcError) as info:
                await client.delete_session("s1")
        err = info.value
        assert (err.code, err.message, err.kind, err.method) == (1001, "Session busy", "session_busy", "session/delete")
        assert err.data["message"] == "session 's1' is busy (delete in progress)"
        assert "busy" in str(err)


async def test_a_request_from_the_daemon_goes_to_the_handler_and_its_result_goes_back(short_tmp: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def handler(method: str, params: dict[str, Any]) -> Any:
        seen.append((method, params))
        return {"outcome": {"outcome": "selected", "optionId": "extend"}}

    params = {"sessionId": "s1", "toolCall": {"toolCallId": "t1"}, "options": [{"optionId": "extend", "kind": "allow_once"}]}
    async with fake_daemon(short_tmp / "d.sock", on_request=handler) as (client, fake):
        await fake.send({"jsonrpc": "2.0", "id": "z:1", "method": "session/request_permission", "params": params})
        reply = await fake.recv()
    assert seen == [("session/request_permission", params)]
    assert reply == {"jsonrpc": "2.0", "id": "z:1", "result": {"outcome": {"outcome": "selected", "optionId": "extend"}}}


async def test_without_a_handler_a_daemon_request_is_answered_method_not_found(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        await fake.send({"jsonrpc": "2.0", "id": "z:7", "method": "session/request_permission", "params": {}})
        reply = await fake.recv()
        assert reply["id"] == "z:7"
        assert reply["error"]["code"] == -32601
        assert "session/request_permission" in reply["error"]["data"]["message"]


async def test_handler_failures_become_error_answers_and_the_connection_lives_on(short_tmp: Path) -> None:
    async def handler(method: str, params: dict[str, Any]) -> Any:
        if method == "refuse":
            raise RpcError(-32002, "Resource not found", {"kind": "not_found", "what": "x"})
        if method == "unsendable":
            return object()
        raise ValueError("boom")

    async with fake_daemon(short_tmp / "d.sock", on_request=handler) as (client, fake):
        replies = {}
        for n, method in enumerate(["refuse", "crash", "unsendable"]):
            await fake.send({"jsonrpc": "2.0", "id": n, "method": method, "params": {}})
            reply = await fake.recv()
            replies[reply["id"]] = reply["error"]
        assert replies[0] == {"code": -32002, "message": "Resource not found", "data": {"kind": "not_found", "what": "x"}}
        assert replies[1]["code"] == -32603 and "ValueError: boom" in replies[1]["data"]["message"]
        assert replies[2]["code"] == -32603
        # Still usable both ways.
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "ping")
            req = await fake.recv()
            await fake.send({"jsonrpc": "2.0", "id": req["id"], "result": None})


async def test_cancel_request_from_the_daemon_cancels_the_handler_and_answers_cancelled(short_tmp: Path) -> None:
    started, cancelled = anyio.Event(), anyio.Event()

    async def handler(method: str, params: dict[str, Any]) -> Any:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with fake_daemon(short_tmp / "d.sock", on_request=handler) as (client, fake):
        await fake.send({"jsonrpc": "2.0", "id": "z:3", "method": "session/request_permission", "params": {}})
        with anyio.fail_after(STEP_TIMEOUT_S):
            await started.wait()
        await fake.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "z:3"}})
        reply = await fake.recv()
        assert cancelled.is_set()
        assert reply["id"] == "z:3" and reply["error"]["code"] == -32800


async def test_a_cancelled_call_sends_cancel_request_and_its_late_answer_is_ignored(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        with anyio.move_on_after(STEP_TIMEOUT_S) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call, "slow")
                req = await fake.recv()
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        cancel = await fake.recv()
        assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": req["id"]}}
        await fake.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        # The next call gets its own answer, not the stale one.
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def call() -> None:
                result.append(await client.call("next"))

            tg.start_soon(call)
            nxt = await fake.recv()
            await fake.send({"jsonrpc": "2.0", "id": nxt["id"], "result": "fresh"})
        assert result == ["fresh"]


async def test_load_session_returns_exactly_the_updates_of_its_session_before_its_answer(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        everything = client.updates()
        replay: list[Any] = []

        async def load() -> None:
            replay.extend(await client.load_session("s1"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(load)
            req = await fake.recv()
            assert req["method"] == "session/load" and req["params"]["sessionId"] == "s1"
            assert req["params"]["mcpServers"] == [] and req["params"]["cwd"]
            await fake.update("s1", "one")
            await fake.update("other", "not mine")
            await fake.update("s1", "two")
            # The answer and the next update in one write: the reader handles both before the
            # caller wakes, so only an end taken at the answer itself keeps the update out.
            answer = {"jsonrpc": "2.0", "id": req["id"], "result": {}}
            await fake.send_raw(encode_message(answer) + encode_message(update_message("s1", "after the answer")))
        assert texts(replay) == ["one", "two"]
        got = []
        with anyio.fail_after(STEP_TIMEOUT_S):
            for _ in range(4):
                got.append(await everything.__anext__())
        assert [(u.session_id, u.update["content"]["text"]) for u in got] == [
            ("s1", "one"), ("other", "not mine"), ("s1", "two"), ("s1", "after the answer"),
        ]
        assert got[0].kind == "agent_message_chunk"


async def test_subscriptions_filter_by_session_and_end_when_closed(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        with client.updates("s2") as only_s2:
            await fake.update("s1", "a")
            await fake.update("s2", "b")
            with anyio.fail_after(STEP_TIMEOUT_S):
                first = await only_s2.__anext__()
            assert (first.session_id, first.update["content"]["text"]) == ("s2", "b")
        await fake.update("s2", "after close")
        with anyio.fail_after(STEP_TIMEOUT_S):
            assert [u async for u in only_s2] == []


async def test_an_unread_subscription_overflows_without_blocking_calls(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        slow = client.updates(max_buffer=3)
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def call() -> None:
                result.append(await client.list_sessions())

            tg.start_soon(call)
            req = await fake.recv()
            for n in range(5):
                await fake.update("s1", str(n))
            await fake.send({"jsonrpc": "2.0", "id": req["id"], "result": {"sessions": []}})
        assert result == [[]]  # the answer came through although nobody read the updates
        got = []
        with anyio.fail_after(STEP_TIMEOUT_S), pytest.raises(UpdatesOverflow) as info:
            async for u in slow:
                got.append(u.update["content"]["text"])
        assert got == ["0", "1", "2"] and info.value.limit == 3


async def test_losing_the_connection_fails_pending_calls_subscriptions_and_later_calls(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        updates = client.updates()
        await fake.update("s1", "buffered")
        with anyio.fail_after(STEP_TIMEOUT_S):
            async with anyio.create_task_group() as tg:

                async def pending() -> None:
                    with pytest.raises(ConnectionLost, match="closed the connection before session/list"):
                        await client.list_sessions()

                tg.start_soon(pending)
                await fake.recv()
                await fake.stream.aclose()
        assert client.closed
        with pytest.raises(ConnectionLost):
            await client.get_session("s1")
        with pytest.raises(ConnectionLost):
            await client.notify("anything")
        # Buffered updates are still delivered, then the loss is reported.
        with anyio.fail_after(STEP_TIMEOUT_S):
            assert (await updates.__anext__()).update["content"]["text"] == "buffered"
            with pytest.raises(ConnectionLost):
                await updates.__anext__()
        with pytest.raises(ConnectionLost):
            await client.updates().__anext__()


async def test_an_oversize_frame_from_the_daemon_ends_the_connection_with_a_clear_error(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock", max_frame_bytes=1024) as (client, fake):
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                with pytest.raises(ConnectionLost, match="1024-byte frame cap"):
                    await client.call("session/list")

            tg.start_soon(call)
            req = await fake.recv()
            await fake.send({"jsonrpc": "2.0", "id": req["id"], "result": "x" * 2000})


async def test_bad_frames_from_the_daemon_get_error_answers_and_do_not_break_the_connection(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        await fake.send_raw(b"this is not json\n")
        assert (await fake.recv())["error"]["code"] == -32700
        await fake.send_raw(b'{"jsonrpc":"2.0","id":4,"method":"x","params":[1]}\n')
        assert (await fake.recv()) ["error"]["code"] == -32602
        await fake.send_raw(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":[1]}}\n')
        await fake.send_raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":1}}\n')
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def call() -> None:
                result.append(await client.call("ping"))

            tg.start_soon(call)
            req = await fake.recv()
            await fake.send({"jsonrpc": "2.0", "id": req["id"], "result": "pong"})
        assert result == ["pong"]


async def test_an_exception_in_the_block_comes_out_unwrapped_and_closes_the_client(short_tmp: Path) -> None:
    with pytest.raises(KeyError) as info:
        async with fake_daemon(short_tmp / "d.sock") as (client, fake):
            raise KeyError("mine")
    assert type(info.value) is KeyError  # not an ExceptionGroup, on trio either
    assert client.closed
    with pytest.raises(ConnectionLost, match="client was closed"):
        await client.list_sessions()


async def test_closing_the_client_while_the_daemon_sends_is_clean(short_tmp: Path) -> None:
    # Data arriving in the very loop iteration that cancels the reader: with anyio's own
    # UNIXSocketStream.receive() this logs "InvalidStateError" on asyncio every time, which the anyio
    # pytest runner turns into a failure. Repeated, because it is a race.
    for n in range(RACE_ROUNDS):
        path = short_tmp / f"{n}.sock"
        async with await anyio.create_unix_listener(path) as listener:
            async with connect(socket_path=path) as client:
                with anyio.fail_after(STEP_TIMEOUT_S):
                    stream = await listener.accept()
                async with stream:
                    await stream.send(encode_message(update_message("s1", "late")))
        assert client.closed


async def test_a_message_over_the_frame_cap_is_refused_before_sending(short_tmp: Path) -> None:
    async with fake_daemon(short_tmp / "d.sock") as (client, fake):
        with pytest.raises(zocrates_client.MessageTooLarge):
            await client.rename_session("s1", "x" * (17 * 1024 * 1024))
        # Nothing was written: the next frame the fake sees is the next call.
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.notify, "ping")
            assert (await fake.recv())["method"] == "ping"


async def test_a_missing_socket_is_daemon_not_running(short_tmp: Path) -> None:
    path = short_tmp / "nobody.sock"
    with pytest.raises(DaemonNotRunning) as info:
        async with connect(socket_path=path):
            pass  # pragma: no cover
    assert str(path) in str(info.value) and "zocratesd serve" in str(info.value)
    with pytest.raises(ValueError, match="start_daemon"):
        async with connect(socket_path=path, start_daemon=True):
            pass  # pragma: no cover


def test_importing_the_client_stays_light() -> None:
    code = (
        "import sys, zocrates_client, zocrates_client.cli\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('google', 'pydantic', 'jsonrpcserver', 'trio')"
        " or m.startswith(('zocratesd.core.daemon', 'zocratesd.store', 'zocratesd.process'))]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
