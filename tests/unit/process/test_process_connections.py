"""The process layer's connection bookkeeping: counting, idle exit, drain, the accept loop's retry."""

from __future__ import annotations

import errno
import json
from typing import Any

import anyio
import anyio.abc
import pytest
from memstream import pipe

from zocratesd.process import connections as connections_mod
from zocratesd.process.connections import Connections, accept_loop
from zocratesd.rpc.peer import MethodTable, Peer

pytestmark = pytest.mark.anyio


def table() -> MethodTable:
    async def echo(peer: Peer, /, **params: Any) -> Any:
        return params

    async def slow(peer: Peer, /, **params: Any) -> Any:
        await anyio.sleep(params["seconds"])
        return "done"

    return MethodTable({"echo": echo, "slow": slow})


def request(req_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}).encode() + b"\n"


async def read_answer(stream: Any) -> dict[str, Any]:
    buf = b""
    with anyio.fail_after(5):
        while b"\n" not in buf:
            buf += await stream.receive()
    answer: dict[str, Any] = json.loads(buf.partition(b"\n")[0])
    return answer


async def test_a_connection_counts_from_start_until_its_peer_is_done_then_on_close_runs() -> None:
    conns = Connections(table(), max_frame_bytes=1 << 20)
    ours, theirs = pipe()
    closed: list[str] = []
    async with anyio.create_task_group() as tg:
        conns.start(tg, ours, "test", on_close=lambda: closed.append("closed"))
        # Counted before its task has run at all: an idle check in between cannot miss it.
        assert conns.open == 1 and not conns.idle.is_set()
        await theirs.send(request(1, "echo", {"x": 1}))
        assert (await read_answer(theirs))["result"] == {"x": 1}
        assert conns.open == 1 and closed == []
        await theirs.send_eof()
    assert conns.open == 0 and conns.idle.is_set() and closed == ["closed"]


async def test_idle_exit_waits_for_the_whole_quiet_period_after_the_last_connection() -> None:
    conns = Connections(table(), max_frame_bytes=1 << 20)
    ours, theirs = pipe()
    async with anyio.create_task_group() as tg:
        conns.start(tg, ours, "test")
        started = anyio.current_time()

        async def close_later() -> None:
            await anyio.sleep(0.3)
            await theirs.send_eof()

        tg.start_soon(close_later)
        await conns.wait_idle_for(0.2)
        # Not 0.2 s after the start: 0.2 s after the connection closed at 0.3 s.
        assert anyio.current_time() - started >= 0.5
        assert conns.open == 0


async def test_drain_lets_a_request_in_flight_answer_and_takes_no_new_one() -> None:
    conns = Connections(table(), max_frame_bytes=1 << 20)
    ours, theirs = pipe()
    async with anyio.create_task_group() as tg:
        conns.start(tg, ours, "test")
        await theirs.send(request(1, "slow", {"seconds": 0.2}))
        await anyio.sleep(0.05)
        await conns.drain(5.0)
        assert conns.open == 0  # the peer ended once its one request was answered
    assert (await read_answer(theirs))["result"] == "done"


async def test_drain_gives_up_after_its_grace(caplog: pytest.LogCaptureFixture) -> None:
    conns = Connections(table(), max_frame_bytes=1 << 20)
    ours, theirs = pipe()
    async with anyio.create_task_group() as tg:
        conns.start(tg, ours, "test")
        await theirs.send(request(1, "slow", {"seconds": 60}))
        await anyio.sleep(0.05)
        await conns.drain(0.1)
        assert conns.open == 1
        tg.cancel_scope.cancel()
    assert "still busy after" in caplog.text


class FlakyListener:
    """accept() fails with the given errnos, one per call, then reports the listener closed."""

    def __init__(self, errnos: list[int]):
        self.errnos = errnos
        self.calls = 0

    async def accept(self) -> anyio.abc.SocketStream:
        self.calls += 1
        if self.errnos:
            code = self.errnos.pop(0)
            raise anyio.BrokenResourceError from OSError(code, "simulated")
        raise anyio.ClosedResourceError


async def test_accept_retries_when_out_of_descriptors_and_fails_on_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections_mod, "ACCEPT_RETRY_S", 0.01)
    conns = Connections(table(), max_frame_bytes=1 << 20)
    listener = FlakyListener([errno.EMFILE, errno.ENFILE])
    async with anyio.create_task_group() as tg:
        await accept_loop(listener, conns, tg)  # type: ignore[arg-type]
    assert listener.calls == 3  # two capacity errors retried, then the close ends the loop

    broken = FlakyListener([errno.ECONNABORTED])
    with pytest.raises(anyio.BrokenResourceError):
        await accept_loop(broken, conns, tg)  # type: ignore[arg-type]
    assert broken.calls == 1
