"""The blocking client (zocrates_client/blocking.py) against a scripted fake daemon on a socket pair.

The fake is the other end of the pair, driven by the test in the same thread: it reads what the
client sent and writes exactly the bytes a test needs (garbage, a request to the client, a late
answer, an oversize frame, a hang-up). Nothing here needs an event loop.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zocrates_client.blocking import Answer, BlockingClient, connect
from zocrates_client.errors import ConnectionLost, DaemonNotRunning, MessageTooLarge, RpcError

STEP_TIMEOUT_S = 5.0


class FakeDaemon:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(STEP_TIMEOUT_S)
        self.buf = b""

    def received(self) -> dict[str, Any]:
        """The next message the client sent."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "the client closed the connection"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def send(self, *messages: dict[str, Any] | bytes) -> None:
        self.sock.sendall(b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n" for m in messages))


@pytest.fixture
def pair() -> Iterator[tuple[BlockingClient, FakeDaemon]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client = BlockingClient(ours, max_frame_bytes=4096)
    try:
        yield client, FakeDaemon(theirs)
    finally:
        client.close()
        theirs.close()


def answers_until(client: BlockingClient, rid: Any) -> list[Answer]:
    seen: list[Answer] = []
    while not any(a.id == rid for a in seen):
        seen += client.read()
    return seen


def test_a_call_and_its_answer(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    rid = client.start("_zocrates/library/tags", {"limit": 3})
    sent = daemon.received()
    assert sent == {"jsonrpc": "2.0", "id": rid, "method": "_zocrates/library/tags", "params": {"limit": 3}}
    daemon.send({"jsonrpc": "2.0", "id": rid, "result": {"tags": []}})
    assert client.read() == [Answer(rid, result={"tags": []})]
    assert not client.pending


def test_an_error_answer_is_an_rpc_error_naming_the_method(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    rid = client.start("_zocrates/library/item", {"itemKey": "NOPE0000"})
    daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32002, "message": "Not found",
                                                         "data": {"kind": "not_found", "message": "no item NOPE0000"}}})
    [answer] = client.read()
    assert isinstance(answer.error, RpcError)
    assert (answer.error.code, answer.error.detail, answer.error.method) == (-32002, "no item NOPE0000", "_zocrates/library/item")


def test_answers_out_of_order_and_in_one_read(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    a, b = client.start("a"), client.start("b")
    daemon.received(), daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": b, "result": 2}, {"jsonrpc": "2.0", "id": a, "result": 1})
    assert answers_until(client, a) == [Answer(b, result=2), Answer(a, result=1)]


def test_bad_frames_are_answered_and_the_call_goes_on(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    rid = client.start("x")
    daemon.received()
    daemon.send(b"this is not json\n", b"[1, 2]\n", {"jsonrpc": "2.0", "id": rid, "result": "fine"})
    assert answers_until(client, rid)[-1] == Answer(rid, result="fine")
    refusals = [daemon.received(), daemon.received()]
    assert [r["error"]["code"] for r in refusals] == [-32700, -32600]
    assert all(r["id"] is None for r in refusals)


def test_a_request_of_the_daemon_is_refused_and_notifications_dropped(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    rid = client.start("x")
    daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": "z:1", "method": "elicitation/create", "params": {}},
                {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}},
                {"jsonrpc": "2.0", "id": rid, "result": None})
    assert answers_until(client, rid) == [Answer(rid, result=None)]
    refused = daemon.received()
    assert refused["id"] == "z:1" and refused["error"]["code"] == -32601


def test_a_cancelled_call_is_cancelled_upstream_and_its_late_answer_dropped(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    first = client.start("slow")
    daemon.received()
    client.cancel(first)
    assert daemon.received() == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": first}}
    second = client.start("quick")
    daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": first, "error": {"code": -32800, "message": "cancelled"}},
                {"jsonrpc": "2.0", "id": second, "result": "ok"})
    assert answers_until(client, second) == [Answer(second, result="ok")]
    client.cancel(second)  # already answered: nothing to send
    client.start("after")
    assert daemon.received()["method"] == "after"


def test_end_of_stream_fails_every_pending_call(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    a, b = client.start("a"), client.start("b")
    daemon.received(), daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": a, "result": 1})
    daemon.sock.close()
    answers = answers_until(client, b)
    assert answers[0] == Answer(a, result=1)
    assert isinstance(answers[-1].error, ConnectionLost) and "closed the connection" in str(answers[-1].error)
    assert client.closed and client.read() == []
    with pytest.raises(ConnectionLost):
        client.start("c")
    with pytest.raises(ConnectionLost):
        client.call("d")


def test_a_frame_over_the_cap_ends_the_connection(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    rid = client.start("big")
    daemon.received()
    daemon.send({"jsonrpc": "2.0", "id": rid, "result": "x" * 5000})
    [answer] = answers_until(client, rid)
    assert isinstance(answer.error, ConnectionLost) and "4096-byte cap" in str(answer.error)
    assert client.closed


def test_a_message_over_the_outgoing_cap_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap is given to the client's connection when the client is made.
    monkeypatch.setattr(sys.modules["zocrates_client.blocking"], "MAX_OUTGOING_FRAME_BYTES", 100)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with BlockingClient(ours, max_frame_bytes=4096) as client, theirs:
        daemon = FakeDaemon(theirs)
        with pytest.raises(MessageTooLarge):
            client.start("x", {"text": "y" * 200})
        assert not client.pending and not client.closed
        rid = client.start("small")
        assert daemon.received()["id"] == rid


def test_call_blocks_until_its_answer(pair: tuple[BlockingClient, FakeDaemon]) -> None:
    client, daemon = pair
    daemon.send({"jsonrpc": "2.0", "id": 1, "error": {"code": 1001, "message": "busy"}})  # answers what comes next
    with pytest.raises(RpcError) as caught:
        client.call("session/prompt", {"sessionId": "s"})
    assert caught.value.code == 1001


def test_connect_to_nothing_is_daemon_not_running(tmp_path: Path) -> None:
    with pytest.raises(DaemonNotRunning):
        connect(socket_path=tmp_path / "none.sock")
    with pytest.raises(DaemonNotRunning):
        connect(tmp_path / "Zotero")  # a data dir with no live daemon, and no start asked for


def test_importing_it_loads_no_event_loop_library() -> None:
    import subprocess

    probe = "import sys, zocrates_client.blocking; print(sorted(m for m in ('anyio', 'asyncio', 'trio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
