"""The cold MCP face's loop (zocratesd/mcp/cold.py) on real pipes and a socket pair: why it stops,
and what it has done by then. The daemon is a scripted fake in a thread; the SDK's loader a stand-in
whose "import" the test ends."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from zocrates_client.blocking import BlockingClient
from zocratesd.mcp import cold

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


class StandInLoader:
    """What ColdFace uses of SdkLoader: `idle`, `done`, `wake_fd`."""

    def __init__(self) -> None:
        self.idle = threading.Event()
        self.idle.set()
        self.done = threading.Event()
        self.wake_fd, self._wake_w = os.pipe()

    def finish(self) -> None:
        self.done.set()
        os.write(self._wake_w, b"\0")


class Daemon:
    """Answers each request with `answer(message)` (None: never), in a thread."""

    def __init__(self, sock: socket.socket, answer: Callable[[dict[str, Any]], Any]) -> None:
        self.sock, self.answer = sock, answer
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for line in self.sock.makefile("rb"):
            msg = json.loads(line)
            self.seen.append(msg)
            result = self.answer(msg) if "id" in msg else None
            if result is not None:
                self.sock.sendall(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n")


class Wire:
    def __init__(self) -> None:
        self.face_in, self._client_out = os.pipe()
        self._client_in, self.face_out = os.pipe()

    def send(self, *messages: dict[str, Any]) -> None:
        os.write(self._client_out, b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    def close_input(self) -> None:
        os.close(self._client_out)

    def replies(self) -> list[dict[str, Any]]:
        os.set_blocking(self._client_in, False)
        try:
            data = os.read(self._client_in, 1 << 20)
        except BlockingIOError:
            data = b""
        return [json.loads(line) for line in data.splitlines()]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def tags(msg: dict[str, Any]) -> Any:
    return {"tags": [{"tag": "rag", "items": 1}], "total": 1} if msg["method"] == "_zocrates/library/tags" else {}


def tool(rid: int, name: str = "list_tags") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": {}}}


def test_eof_after_the_quick_calls_are_answered(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    Daemon(theirs, tags)
    wire, loader = Wire(), StandInLoader()
    wire.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, tool(2), tool(3))
    wire.close_input()
    face = cold.ColdFace(BlockingClient(ours), wire.face_in, wire.face_out, loader)
    assert face.serve() is cold.Stop.EOF
    replies = wire.replies()
    assert sorted(r["id"] for r in replies) == [1, 2, 3] and not face.session.has_queued
    assert loader.idle.is_set()  # nothing in hand: the SDK's import may go on


def test_a_request_for_the_sdk_is_kept_and_the_face_stops_once_it_is_loaded(pair: tuple[socket.socket, socket.socket]) -> None:
    """The loader ends while a call waits for the daemon: stdin is no longer read, the call is
    answered, then the face stops; the kept request goes to the anyio face with the session."""
    ours, theirs = pair
    release = threading.Event()

    def slow(msg: dict[str, Any]) -> Any:
        if msg["method"] == "_zocrates/library/tags":
            release.wait(5)
        return tags(msg)

    daemon = Daemon(theirs, slow)
    wire, loader = Wire(), StandInLoader()
    wire.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
              {"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}, tool(3))
    face = cold.ColdFace(BlockingClient(ours), wire.face_in, wire.face_out, loader)
    stopped: list[cold.Stop] = []
    thread = threading.Thread(target=lambda: stopped.append(face.serve()))
    thread.start()
    deadline = time.monotonic() + 5
    while not any(m.get("method") == "_zocrates/library/tags" for m in daemon.seen):  # the call is in flight
        assert time.monotonic() < deadline
        time.sleep(0.005)
    loader.finish()
    wire.send(tool(4))  # after the SDK is loaded: left on stdin for the anyio face
    release.set()
    thread.join(5)
    assert stopped == [cold.Stop.LOADED]
    assert sorted(r["id"] for r in wire.replies()) == [1, 3]
    assert face.session.has_queued  # prompts/list, for the SDK
    assert json.loads(os.read(wire.face_in, 1 << 16))["id"] == 4


def test_a_lost_daemon_is_a_tool_error_and_the_face_stops(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair

    def hang_up(msg: dict[str, Any]) -> Any:
        if msg["method"] == "_zocrates/library/tags":
            theirs.shutdown(socket.SHUT_RDWR)
        return None

    Daemon(theirs, hang_up)
    wire, loader = Wire(), StandInLoader()
    wire.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, tool(2))
    face = cold.ColdFace(BlockingClient(ours), wire.face_in, wire.face_out, loader)
    assert face.serve() is cold.Stop.LOST
    lost = {r["id"]: r for r in wire.replies()}[2]["result"]
    assert lost["isError"] and "connection to zocratesd was lost" in lost["content"][0]["text"]


def test_a_closed_stdout_ends_it_quietly(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    Daemon(theirs, tags)
    wire, loader = Wire(), StandInLoader()
    os.close(wire._client_in)  # the client has gone: writing is EPIPE
    wire.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    face = cold.ColdFace(BlockingClient(ours), wire.face_in, wire.face_out, loader)
    assert face.serve() is cold.Stop.GONE
