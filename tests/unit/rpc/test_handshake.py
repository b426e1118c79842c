"""The handshake before the wire stack has loaded (rpc/handshake.py), against the wire model and the ACP
table it stands in for: through real Peers on in-memory streams, with a real core `Daemon`."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from memstream import MemoryByteStream, pipe
from pydantic import ValidationError

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.rpc import handshake, models
from zocratesd.rpc.acp import build_methods
from zocratesd.rpc.agent import connection
from zocratesd.rpc.peer import MethodTable, Peer

pytestmark = pytest.mark.anyio

Json = dict[str, Any]
MISSING = object()

# What real clients send (the ACP SDKs' examples, Zed, our own faces): all of it must be answered early.
CLIENT_PARAMS: list[Json] = [
    {"protocolVersion": 1},
    {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True},
     "clientInfo": {"name": "zed", "title": "Zed", "version": "0.210.4"}},
    {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False,
                                                  "_meta": {"zocrates": {"ui": True}}}, "_meta": {"traceId": "x"}},
    {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": None, "_meta": None},
    {"protocolVersion": 0, "somethingNewer": {"a": 1}},
]
# Field values to combine: JSON of every type, in and out of the model's bounds.
VALUES: list[Any] = [MISSING, None, 0, 1, 65535, 65536, -1, True, False, 1.0, 1.5, "1", "", "x", [], [1],
                     {}, {"fs": {}}, {"a": [1, {"b": None}]}]
FIELDS = ("protocolVersion", "clientCapabilities", "clientInfo", "_meta")
OTHER_KEYS: list[Json] = [{}, {"extra": 1}, {"protocol_version": 1}, {"client_info": {}}, {"meta": None}]
# Valid values, so that random params are often valid as a whole.
GOOD: dict[str, list[Any]] = {"protocolVersion": [0, 1, 65535]} | {
    k: [MISSING, None, {}, {"fs": {}}, {"a": [1, {"b": None}]}] for k in FIELDS[1:]}


def candidates() -> list[Json]:
    """Every combination of a few values, then random ones of them all, with and without odd keys."""
    out: list[Json] = []
    for combo in itertools.product([MISSING, None, 1, "1", True, {}, [], 1.0], repeat=len(FIELDS)):
        out.append({k: v for k, v in zip(FIELDS, combo, strict=True) if v is not MISSING})
    rng = random.Random(31)
    for _ in range(3000):
        p = {k: v for k in FIELDS if (v := rng.choice(VALUES if rng.random() < 0.25 else GOOD[k])) is not MISSING}
        out.append(p | rng.choice(OTHER_KEYS))
    return out


def test_the_plain_check_accepts_only_what_the_model_accepts_with_the_same_values() -> None:
    accepted = refused_but_valid = 0
    for params in [*CLIENT_PARAMS, *candidates()]:
        plain = handshake.plain_initialize(params)
        try:
            model = models.InitializeParams.model_validate(params)
        except ValidationError:
            assert plain is None, params  # the model refuses it: never answered early
            continue
        if plain is None:
            refused_but_valid += 1  # pydantic decides these (its lax conversions): answered later
            continue
        accepted += 1
        assert plain == (model.client_capabilities or {}, model.client_info or {}), params
    assert accepted > 200 and refused_but_valid > 200  # both kinds were seen


def test_what_clients_send_is_plain() -> None:
    for params in CLIENT_PARAMS:
        assert handshake.plain_initialize(params) is not None, params


STATUS_VALUES: list[Any] = [MISSING, None, True, False, 0, 1, "true", "false", "", [], {}, {"a": 1}, 1.0]


def status_candidates() -> list[Json]:
    out: list[Json] = []
    for refresh, meta in itertools.product(STATUS_VALUES, repeat=2):
        base = {k: v for k, v in (("refresh", refresh), ("_meta", meta)) if v is not MISSING}
        out.extend(base | extra for extra in ({}, {"extra": 1}, {"meta": None}))
    return out


def test_the_plain_library_status_check_accepts_only_what_the_model_accepts_with_the_same_values() -> None:
    accepted = refused_but_valid = 0
    for params in status_candidates():
        plain = handshake.plain_library_status(params)
        try:
            model = models.LibraryStatusParams.model_validate(params)
        except ValidationError:
            assert plain is None, params
            continue
        if plain is None:
            refused_but_valid += 1  # pydantic's lax conversions, extras: answered by the full table
            continue
        accepted += 1
        assert plain == model.refresh, params
    assert accepted >= 8 and refused_but_valid > 20
    assert handshake.plain_library_status({}) is False and handshake.plain_library_status({"refresh": True}) is True


class Conn:
    """A client's end of one connection: requests out, messages in by id."""

    def __init__(self, stream: MemoryByteStream) -> None:
        self.stream, self.buf, self.ids = stream, b"", itertools.count(1)
        self.got: dict[Any, Json] = {}

    async def send(self, method: str, params: Json, request_id: Any = None) -> Any:
        request_id = next(self.ids) if request_id is None else request_id
        await self.stream.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode() + b"\n")
        return request_id

    async def notify(self, method: str, params: Json) -> None:
        await self.stream.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode() + b"\n")

    async def reply(self, request_id: Any, within: float = 10.0) -> Json | None:
        """The answer to `request_id`, or None when none came within `within` seconds."""
        with anyio.move_on_after(within):
            while request_id not in self.got:
                while b"\n" not in self.buf:
                    self.buf += await self.stream.receive()
                line, _, self.buf = self.buf.partition(b"\n")
                msg = json.loads(line)
                self.got[msg.get("id")] = msg
        return self.got.get(request_id)

    async def call(self, method: str, params: Json) -> Json:
        reply = await self.reply(await self.send(method, params))
        assert reply is not None, method
        return reply


class Setup:
    def __init__(self, daemon: Daemon, tg: anyio.abc.TaskGroup) -> None:
        self.daemon, self.tg = daemon, tg
        self.full = build_methods(daemon)
        self.staged = handshake.StagedMethods(daemon.version, daemon.config.rpc.max_frame_bytes, daemon.library_status)

    def connect(self, methods: MethodTable) -> tuple[Conn, Peer]:
        server_end, client_end = pipe()
        peer = Peer(server_end, methods, name="t")
        self.tg.start_soon(peer.run)
        return Conn(client_end), peer


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    daemon = Daemon(tmp_path, ZocratesConfig(), load_engine=False)  # as boot makes it: reads only
    try:
        async with anyio.create_task_group() as tg:
            yield Setup(daemon, tg)
            tg.cancel_scope.cancel()
    finally:
        await daemon.aclose()


async def test_the_early_handshake_answers_as_the_full_table_does(setup: Setup) -> None:
    for params in CLIENT_PARAMS:
        (e, e_peer), (f, f_peer) = setup.connect(setup.staged), setup.connect(setup.full)
        got, want = await e.call("initialize", params), await f.call("initialize", params)
        assert got == want and "result" in got
        e_conn, f_conn = connection(e_peer), connection(f_peer)
        assert (e_conn.capabilities, e_conn.client_info) == (f_conn.capabilities, f_conn.client_info)
        assert e_conn.client_info == (params.get("clientInfo") or {})
    assert setup.staged.full is None  # all of it answered before the full table served
    ours = want["result"]["agentCapabilities"]["_meta"]["zocrates"]
    assert ours["extensions"] == sorted(n for n in setup.full if n.startswith("_zocrates/"))


async def test_the_library_status_is_answered_early_as_the_full_table_answers_it(setup: Setup) -> None:
    """Before the daemon has made its library source (its index's modules not loaded yet), the
    status says the library is starting, early and from the full table alike."""
    for params in ({}, {"refresh": False}, {"refresh": True, "_meta": {"traceId": "x"}}):
        (e, _), (f, _) = setup.connect(setup.staged), setup.connect(setup.full)
        got, want = await e.call("_zocrates/library/status", params), await f.call("_zocrates/library/status", params)
        assert got == want and got["result"]["state"] == "starting", got
        assert got["result"]["data_dir"] == str(setup.daemon.data_dir)
    assert setup.staged.full is None
    assert setup.daemon.catalogue.made is None  # answered without making the source


async def test_the_rest_waits_for_the_full_table_and_gets_its_answers(setup: Setup) -> None:
    c, _ = setup.connect(setup.staged)
    f, _ = setup.connect(setup.full)
    held = {
        "list": ("session/list", {}),
        "lax": ("initialize", {"protocolVersion": "1"}),  # pydantic converts it; the plain check does not
        "bad": ("initialize", {"protocolVersion": -1, "clientInfo": []}),
        "unknown": ("_zocrates/not/a/method", {}),
        "arity": ("session/load", {}),
        "lax status": ("_zocrates/library/status", {"refresh": "true"}),
    }
    for request_id, (method, params) in held.items():
        await c.send(method, params, request_id)
    first = await c.call("initialize", {"protocolVersion": 1})  # sent after them, answered before them
    assert "result" in first
    for request_id in held:
        assert await c.reply(request_id, within=0.3) is None, request_id
    setup.staged.serve(setup.full)
    for request_id, (method, params) in held.items():
        got, want = await c.reply(request_id), await f.call(method, params)
        assert got is not None and want is not None
        assert {k: v for k, v in got.items() if k != "id"} == {k: v for k, v in want.items() if k != "id"}, request_id
    assert (await c.reply("bad") or {})["error"]["code"] == -32602
    assert (await c.reply("unknown") or {})["error"]["code"] == -32601
    assert (await c.reply("lax") or {})["result"] == first["result"]


async def test_a_held_request_can_be_cancelled(setup: Setup) -> None:
    c, _ = setup.connect(setup.staged)
    await c.send("session/list", {}, "held")
    assert await c.reply("held", within=0.2) is None
    await c.notify("$/cancel_request", {"requestId": "held"})
    reply = await c.reply("held")
    assert reply is not None and reply["error"]["code"] == -32800
    setup.staged.serve(setup.full)
    assert "result" in await c.call("session/list", {})


async def test_a_table_that_differs_is_refused(setup: Setup) -> None:
    with pytest.raises(ValueError, match="notifications"):
        setup.staged.serve(MethodTable(dict(setup.full), notifications=()))
