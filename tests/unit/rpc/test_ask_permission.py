"""`ask_permission`: a research checkpoint put to the prompting client (issue 16, items 1 and 6).

Over an in-memory connection: what the client is sent, when the daemon tells it it gave up
(`$/cancel_request`), that a client whose input has ended is never asked, and that the client's own
error text reaches the log escaped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from memstream import MemoryByteStream, pipe

from zocratesd.rpc import agent
from zocratesd.rpc.models import RequestPermissionParams
from zocratesd.rpc.peer import MethodTable, Peer

pytestmark = pytest.mark.anyio

CHECKPOINT = {
    "invocation_id": "e-1",
    "interrupt_id": "interrupt_ext_1",
    "message": "Search further?",
    "payload": {"unaddressed_aspects": ["b?"]},
}


class Editor:
    def __init__(self, stream: MemoryByteStream) -> None:
        self.stream, self.buf = stream, b""

    async def recv(self) -> dict[str, Any]:
        with anyio.fail_after(5):
            while b"\n" not in self.buf:
                self.buf += await self.stream.receive()
        line, _, self.buf = self.buf.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send(json.dumps(message).encode() + b"\n")


@pytest.fixture
async def connected() -> AsyncIterator[tuple[Peer, Editor, MemoryByteStream]]:
    server_end, client_end = pipe()
    peer = Peer(server_end, MethodTable({}), name="editor")
    async with anyio.create_task_group() as tg:
        tg.start_soon(peer.run)
        yield peer, Editor(client_end), client_end
        await client_end.send_eof()


async def test_the_question_and_the_answers(connected: Any) -> None:
    peer, editor, _ = connected
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(await agent.ask_permission(peer, "s-1", CHECKPOINT))

    for result, expected in [
        ({"outcome": {"outcome": "selected", "optionId": "extend"}, "_meta": {"zocrates": {"guidance": "limits"}}},
         {"action": "extend_budget", "guidance": "limits"}),
        ({"outcome": {"outcome": "selected", "optionId": "synthesize"}}, {"action": "synthesize"}),
        ({"outcome": {"outcome": "cancelled"}}, None),
    ]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            question = await editor.recv()
            assert question["method"] == "session/request_permission" and question["id"].startswith("z:")
            params = RequestPermissionParams.model_validate(question["params"])
            assert params.toolCall.toolCallId == "interrupt_ext_1@e-1"
            await editor.send({"jsonrpc": "2.0", "id": question["id"], "result": result})
        assert answers.pop() == expected


async def test_an_error_reply_is_logged_escaped(connected: Any, caplog: pytest.LogCaptureFixture) -> None:
    peer, editor, _ = connected
    forged = "no\nERROR zocratesd: the daemon was hacked \x1b[2J\x1b[31mred\r"
    caplog.set_level(logging.INFO, logger=agent.log.name)
    async with anyio.create_task_group() as tg:
        answers: list[Any] = []

        async def ask() -> None:
            answers.append(await agent.ask_permission(peer, "s-1", CHECKPOINT))

        tg.start_soon(ask)
        question = await editor.recv()
        await editor.send({"jsonrpc": "2.0", "id": question["id"], "error": {"code": -32000, "message": forged}})
    assert answers == [None]
    [record] = [r for r in caplog.records if "session/request_permission failed" in r.getMessage()]
    logged = record.getMessage()
    assert "\n" not in logged and "\x1b" not in logged and "\r" not in logged
    assert "\\nERROR zocratesd: the daemon was hacked \\x1b[2J" in logged


async def test_a_client_whose_input_has_ended_is_not_asked(connected: Any) -> None:
    peer, editor, client_end = connected
    await client_end.send_eof()
    with anyio.fail_after(5):
        while not peer.input_closed:
            await anyio.sleep(0.01)
    with anyio.fail_after(10):
        assert await agent.ask_permission(peer, "s-1", CHECKPOINT) is None
    with pytest.raises(anyio.EndOfStream):  # nothing was sent, and the connection is over
        await editor.recv()


async def test_cancel_request_is_sent_where_the_client_cannot_know(
    connected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No answer in time: the daemon withdraws its question with `$/cancel_request`."""
    peer, editor, _ = connected
    monkeypatch.setattr(agent, "CHECKPOINT_ANSWER_TIMEOUT_S", 0.2)
    async with anyio.create_task_group() as tg:
        answers: list[Any] = []

        async def ask() -> None:
            answers.append(await agent.ask_permission(peer, "s-1", CHECKPOINT))

        tg.start_soon(ask)
        question = await editor.recv()
        notice = await editor.recv()
    assert answers == [None]
    assert notice == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": question["id"]}}


async def test_no_cancel_request_after_the_clients_own_session_cancel(connected: Any) -> None:
    """ACP prompt turn: after `session/cancel` the client answers `cancelled` itself."""
    peer, editor, _ = connected
    agent.connection(peer).prompting["s-1"] = 1
    with anyio.CancelScope() as turn:  # the turn that asks, as core/daemon.py cancels it
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                await agent.ask_permission(peer, "s-1", CHECKPOINT)

            tg.start_soon(ask)
            question = await editor.recv()
            agent.connection(peer).note_cancel("s-1")  # what session/cancel does
            turn.cancel()
    await editor.send({"jsonrpc": "2.0", "id": question["id"], "result": {"outcome": {"outcome": "cancelled"}}})
    with anyio.move_on_after(0.3):
        unexpected = await editor.recv()
        pytest.fail(f"the daemon sent {unexpected}")
