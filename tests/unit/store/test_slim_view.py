"""The UI view from slim events (store/slim.py) equals the view from whole events, byte for byte.

Sessions are written by the daemon's own writer (`SessionsDb.service`, the fast append) and
rewound by ADK's Runner on it, never by hand, except the rows that test the fallback. The
reference is the computation `ui_session` used before (`live_session(...).ui()`: every row parsed
whole by orjson), which turns, compaction and replay still use.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import struct
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from adkevents import answer, append_all, call, text
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.genai import types

from zocratesd.compaction import compaction_event
from zocratesd.store import APP_NAME, USER_ID, SessionsDb, slim
from zocratesd.store.reader import _EVENTS_SQL
from zocratesd.store.ui import REQUEST_INPUT_CALL, apply_rewinds, pending_checkpoint, ui_view

pytestmark = pytest.mark.anyio

ODD = 'Révision — 検索 🔍 "quoted" \\ back\nslash\ttab \u2028 \x07 \ud7ff \U0001f9ea'


@pytest.fixture
async def world(tmp_path: Path) -> Any:
    async with SessionsDb.open(tmp_path) as db:
        await db.prepare_tables()
        runner = Runner(app=App(name=APP_NAME, root_agent=LlmAgent(name="coordinator", model="gemini-2.0-flash")),
                        session_service=db.service)
        yield db, runner


async def same_view(db: SessionsDb, sid: str) -> dict[str, Any]:
    """The new view and the old computation, serialised as the faces do; also each stored row's
    slim decoding against its whole parse."""
    new = orjson.dumps(await db.reader.ui_session(sid))
    old = orjson.dumps((await db.reader.live_session(sid)).ui())
    assert new == old
    for raw in stored_rows(db, sid):
        assert slim.decode_events([(raw,)]) == [projected(orjson.loads(raw))]
    return orjson.loads(new)  # type: ignore[no-any-return]


def stored_rows(db: SessionsDb, sid: str) -> list[str]:
    conn = sqlite3.connect(db.path)
    try:
        return [r[0] for r in conn.execute(_EVENTS_SQL, (APP_NAME, USER_ID, sid)) if r[0] is not None]
    finally:
        conn.close()


def declared(tp: Any) -> dict[str, Any] | None:
    """The keys a slim TypedDict keeps, with their types; None where a value is kept whole."""
    for arg in typing.get_args(tp) or (tp,):  # X | None, Annotated[...]
        if typing.is_typeddict(arg):
            return typing.get_type_hints(arg, include_extras=True)
    return None


def project(value: Any, tp: Any) -> Any:
    keys = declared(tp)
    if keys is not None and isinstance(value, dict):
        return {k: project(v, keys[k]) for k, v in value.items() if k in keys}
    inner = [a for a in typing.get_args(tp) if typing.get_origin(a) is list]
    if inner and isinstance(value, list):
        (item,) = typing.get_args(inner[0])
        return [project(v, item) for v in value]
    return value


def projected(whole: dict[str, Any]) -> Any:
    """What slim decoding must give for a row: its whole parse, reduced to the declared keys."""
    return project(whole, slim.SlimEvent)


def checkpoint(inv: str, interrupt: str, message: str, payload: Any, author: str = "search_pipeline") -> Event:
    return Event(
        author=author, invocation_id=inv,
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            id=interrupt, name=REQUEST_INPUT_CALL, args={"interruptId": interrupt, "message": message, "payload": payload}))]),
        long_running_tool_ids={interrupt},
        actions=EventActions(state_delta={"hitl_snapshot": {"evidence": [{"text": ODD, "score": 0.1 + 0.2}]}}),
    )


def odd_events(inv: str) -> list[Event]:
    """Shapes the view must skip or read with care."""
    return [
        text("user", inv, ODD),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[
            types.Part(text="only a thought " + ODD, thought=True)])),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[
            types.Part(text=""), types.Part(text="after an empty part"), types.Part(text="think", thought=True),
            types.Part(function_call=types.FunctionCall(id="fc-odd", name="search_library", args={"query": ODD, "k": 2**62}))])),
        answer(inv, "fc-odd", "search_library", {"passages": [{"text": ODD * 20, "page": 3, "score": -0.0, "n": None}],
                                                 "content": {"parts": [{"text": "nested, not a part"}]}}),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model")),  # content, no parts
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[])),
        Event(author="coordinator", invocation_id=inv, actions=EventActions(state_delta={"note": ODD})),  # no content
        text("search_library", inv, "on a branch", branch="search_library@fc-odd"),
        text("search_pipeline", inv, "scoped", isolation_scope="search_library_pipeline:fc-odd"),
        Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=[types.Part(text="with metadata")]),
              custom_metadata={"zocrates_round": {"n": 1, "text": "x"}},
              usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=10, total_token_count=12)),
    ]


async def test_every_shape_through_checkpoints_compaction_and_rewinds(world: Any) -> None:
    db, runner = world
    sid = "s-all"
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    assert (await same_view(db, sid))["messages"] == []  # no event at all
    await db.append_state(sid, {"title": ODD, "created_at": 1.25})
    await same_view(db, sid)

    await append_all(db.service, sid, [
        text("user", "inv-1", "What is RAG?"),
        call("inv-1", "fc-1", "search_library", {"query": "RAG"}, with_text="Let me search."),
        answer("inv-1", "fc-1", "search_library", {"result": [{"text": "passage", "year": 2020}]}),
        text("coordinator", "inv-1", "RAG grounds answers [1].", thought="Define it."),
        *odd_events("inv-2"),
    ])
    ui = await same_view(db, sid)
    assert ODD in [m["text"] for m in ui["messages"]] and ui["title"] == ODD

    # A checkpoint (payload: any JSON), its answer alone, then the turn going on: pending until then.
    payload = {"aspects": [ODD, "b"], "budget": 3, "ratio": 1 / 3, "big": 2**63 - 1, "none": None, "nested": {"t": [1.5e-300]}}
    await append_all(db.service, sid, [text("user", "inv-3", "deep research please"),
                                       call("inv-3", "fc-3", "search_library", {"query": "deep"}),
                                       checkpoint("inv-3", "interrupt_ext_1", ODD, payload)])
    ui = await same_view(db, sid)
    assert ui["pending_hitl"]["payload"] == payload and ui["pending_hitl"]["message"] == ODD
    await append_all(db.service, sid, [answer("inv-3", "interrupt_ext_1", REQUEST_INPUT_CALL, {"action": "go"}, author="user")])
    assert (await same_view(db, sid))["pending_hitl"]["interrupt_id"] == "interrupt_ext_1"
    await append_all(db.service, sid, [answer("inv-3", "fc-3", "search_library", {"passages": []}),
                                       text("coordinator", "inv-3", "Found nothing.")])
    assert (await same_view(db, sid))["pending_hitl"] is None
    # Another one left open, then superseded by a new prompt.
    await append_all(db.service, sid, [text("user", "inv-4", "more"), checkpoint("inv-4", "interrupt_ext_2", "more?", [1, "x"])])
    assert (await same_view(db, sid))["pending_hitl"]["interrupt_id"] == "interrupt_ext_2"
    await append_all(db.service, sid, [text("user", "inv-5", "never mind"), text("coordinator", "inv-5", "OK.")])
    assert (await same_view(db, sid))["pending_hitl"] is None

    # A compaction (the daemon's own event), then turns after it.
    rows = stored_rows(db, sid)
    first, last = orjson.loads(rows[1])["timestamp"], orjson.loads(rows[-1])["timestamp"]
    await append_all(db.service, sid, [compaction_event(first, last, "SUMMARY " + ODD, covered=5),
                                       text("user", "inv-6", "after compaction"), text("coordinator", "inv-6", "yes")])
    ui = await same_view(db, sid)
    assert "SUMMARY" not in str(ui["messages"])

    # Rewinds: back before inv-6, a new turn, a rewind of that one, and a marker whose target is unknown.
    await runner.rewind_async(user_id=USER_ID, session_id=sid, rewind_before_invocation_id="inv-6")
    ui = await same_view(db, sid)
    assert ui["messages"][-1]["text"] == "OK."
    await append_all(db.service, sid, [text("user", "inv-7", "turn seven"), text("coordinator", "inv-7", "reply seven")])
    await runner.rewind_async(user_id=USER_ID, session_id=sid, rewind_before_invocation_id="inv-7")
    await append_all(db.service, sid, [Event(author="user", invocation_id="inv-8",
                                             actions=EventActions(rewind_before_invocation_id="no-such-invocation")),
                                       text("user", "inv-9", "turn nine")])
    ui = await same_view(db, sid)
    assert ui["messages"][-1]["text"] == "turn nine" and "turn seven" not in str(ui["messages"])
    # A rewind back into the checkpoint's turn: pending again.
    await runner.rewind_async(user_id=USER_ID, session_id=sid, rewind_before_invocation_id="inv-5")
    assert (await same_view(db, sid))["pending_hitl"]["interrupt_id"] == "interrupt_ext_2"


async def test_equal_timestamps_and_many_events(world: Any) -> None:
    db, _ = world
    sid = "s-many"
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    events = []
    for i in range(150):
        inv = f"inv-{i}"
        events += [text("user", inv, f"q{i} {ODD}", timestamp=1_700_000_000.0 + i // 4),  # ties broken by id
                   call(inv, f"fc-{i}", "search_library", {"query": str(i)}, with_text="Looking."),
                   answer(inv, f"fc-{i}", "search_library", {"passages": [{"text": f"p{i}"}] * 3}),
                   text("coordinator", inv, f"a{i}", thought="t" if i % 3 else None)]
    await append_all(db.service, sid, events)
    assert len((await same_view(db, sid))["messages"]) == 150 * 3


async def test_rows_that_do_not_fit_are_parsed_whole(world: Any) -> None:
    """Rows no writer of ours makes (edited here with SQLite itself): the view falls back to the
    whole parse, so it is what it was, errors included."""
    db, _ = world
    sid = "s-odd"
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    await append_all(db.service, sid, [text("user", "inv-1", "one"), text("coordinator", "inv-1", "two"),
                                       text("user", "inv-2", "three")])
    conn = sqlite3.connect(db.path)
    where = "WHERE session_id = ? AND invocation_id = 'inv-2'"
    (original,) = conn.execute(f"SELECT event_data FROM events {where}", (sid,)).fetchone()

    def edit(path: str, value: str) -> None:  # one change to the original row
        conn.execute(f"UPDATE events SET event_data = json_set(?, ?, {value}) {where}", (original, path, sid))
        conn.commit()

    try:
        for path, value, refused in [
            ("$.author", "7", True),  # not a string
            ("$.timestamp", "json('123456789012345678901234567890')", True),  # beyond int64: orjson gives a float
            ("$.timestamp", "1700000000", False),  # an integer: an int either way
            ("$.content.parts[0].thought", "'yes'", True),
        ]:
            edit(path, value)
            if not refused:
                await same_view(db, sid)
                continue
            with pytest.raises(slim.DecodeError):
                slim.decode_events([(stored_rows(db, sid)[-1],)])
            assert orjson.dumps(await db.reader.ui_session(sid)) == orjson.dumps((await db.reader.live_session(sid)).ui())
        edit("$.content", "'not an object'")
        with pytest.raises(AttributeError):  # the whole parse's own failure, as before
            await db.reader.ui_session(sid)
        # The one difference: a number beyond a double's range in a part the view skips (no JSON
        # encoder writes one; json.dumps writes Infinity, which both refuse) no longer fails the view.
        edit("$.usage_metadata", "json('[1e400]')")
        with pytest.raises(orjson.JSONDecodeError):
            await db.reader.live_session(sid)
        assert [m["text"] for m in (await db.reader.ui_session(sid))["messages"]] == ["one", "two", "three"]
    finally:
        conn.close()


async def test_a_checkpoint_with_integers_orjson_makes_floats(world: Any) -> None:
    """msgspec keeps 2**70 an int where orjson gives a float: the view finds it in the checkpoint
    it shows and parses the session whole, so the payload is what it was."""
    db, _ = world
    sid = "s-wide"
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    await append_all(db.service, sid, [text("user", "inv-1", "go"),
                                       checkpoint("inv-1", "interrupt_ext_1", "?", {"n": [2**70, -(2**63) - 1, 2**64 - 1]}),
                                       call("inv-1", "fc-2", "search_library", {"query": "q", "seed": 2**80})])
    ui = await db.reader.ui_session(sid)
    assert ui["pending_hitl"]["payload"] == {"n": [float(2**70), float(-(2**63) - 1), 2**64 - 1]}
    assert orjson.dumps(ui) == orjson.dumps((await db.reader.live_session(sid)).ui())
    assert slim.has_wide_int(slim.decode_events([(stored_rows(db, sid)[-1],)])[0])  # a call's args, not shown


class Recorder(dict[str, Any]):
    """A stored event as a dict that notes every key the view reads, with its path."""

    def __init__(self, value: dict[str, Any], path: tuple[str, ...], seen: set[tuple[str, ...]]):
        super().__init__({k: wrap(v, (*path, k), seen) for k, v in value.items()})
        self.path, self.seen = path, seen

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.seen.add((*self.path, key))
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.seen.add((*self.path, key))
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.seen.add((*self.path, str(key)))
        return super().__contains__(key)


def wrap(value: Any, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> Any:
    if isinstance(value, dict):
        return Recorder(value, path, seen)
    if isinstance(value, list):
        return [wrap(v, (*path, "[]"), seen) for v in value]
    return value


def kept(path: tuple[str, ...]) -> bool:
    """Whether slim decoding keeps the value at `path` (a key under a value kept whole counts)."""
    tp: Any = slim.SlimEvent
    for key in path:
        if key == "[]":
            (tp,) = typing.get_args(next(a for a in typing.get_args(tp) if typing.get_origin(a) is list))
            continue
        keys = declared(tp)
        if keys is None:
            return True
        if key not in keys:
            return False
        tp = keys[key]
    return True


async def test_the_view_reads_only_what_slim_decoding_keeps(world: Any) -> None:
    db, runner = world
    sid = "s-keys"
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    await append_all(db.service, sid, [*odd_events("inv-1"), text("user", "inv-2", "go"),
                                       checkpoint("inv-2", "interrupt_ext_1", "?", {"a": 1}),
                                       answer("inv-2", "interrupt_ext_1", REQUEST_INPUT_CALL, {"action": "go"}, author="user"),
                                       text("user", "inv-3", "and"), compaction_event(1.0, 2.0, "S", covered=1)])
    await runner.rewind_async(user_id=USER_ID, session_id=sid, rewind_before_invocation_id="inv-3")
    seen: set[tuple[str, ...]] = set()
    events = [wrap(orjson.loads(raw), (), seen) for raw in stored_rows(db, sid)]
    live = apply_rewinds(events)
    ui_view(sid, {}, 0.0, live, events[0].get("timestamp"))
    pending_checkpoint(live)
    assert {p[0] for p in seen} >= {"author", "content", "actions", "invocation_id", "timestamp", "id", "branch"}
    assert not [p for p in seen if not kept(p)], "the view reads keys store/slim.py does not keep"


def floats() -> Iterator[str]:
    rng = random.Random(20261203)
    for _ in range(40_000):
        yield json.dumps(rng.uniform(1.6e9, 1.9e9))  # timestamps as ADK writes them
        x = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if math.isfinite(x):
            yield json.dumps(x)  # any double, shortest form
        digits, value = rng.randint(0, 25), rng.uniform(-1, 1) * 10 ** rng.randint(-320, 308)
        yield f"{value:.{digits}e}"  # long forms, not the shortest
    yield from ("0.0", "-0.0", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1700000000")


def test_timestamps_decode_to_the_same_number_as_orjson() -> None:
    decode = msgspec.json.Decoder(slim.SlimEvent).decode
    for lit in floats():
        ours, theirs = decode(f'{{"timestamp": {lit}}}')["timestamp"], orjson.loads(lit)
        assert type(ours) is type(theirs) and struct.pack("d", ours) == struct.pack("d", theirs), lit
