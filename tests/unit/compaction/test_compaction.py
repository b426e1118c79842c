"""Post-turn compaction on a real Daemon (store, Runner, session lock) with a recording model."""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.models._capabilities import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr

from zocratesd.compaction import FixedProbe, ProbeError, ProbeInput
from zocratesd.compaction.summarise import SUMMARY_HEADER
from zocratesd.compaction.turns import latest_compaction, split_turns
from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.engine.runner import Engine
from zocratesd.library.retrieval import InMemoryRetriever, Passage
from zocratesd.rpc.updates import to_acp
from zocratesd.updates import Usage, history_updates

pytestmark = pytest.mark.anyio


class RecordingLlm(BaseLlm):
    """Calls search_library when asked to search, answers after its result; keeps every request."""

    model: str = "recording"
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=True)

    @property
    def requests(self) -> list[LlmRequest]:
        return self._requests

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(copy.deepcopy(llm_request))
        last = llm_request.contents[-1]
        if any(p.function_response for p in last.parts or []):
            part = types.Part(text="answered. More detail here.\n\n# Cited Sources\n[1] t (zotero://select/library/items/ABCD1234)")
        elif "search" in "".join(p.text or "" for p in last.parts or []):
            part = types.Part(function_call=types.FunctionCall(name="search_library", args={"query": "q"}))
        else:
            part = types.Part(text="reply")
        yield LlmResponse(content=types.Content(role="model", parts=[part]), partial=False, turn_complete=True,
                          finish_reason=types.FinishReason.STOP)


ANSWER = "answered. More detail here.\n\n# Cited Sources\n[1] t (zotero://select/library/items/ABCD1234)"


def texts(request: LlmRequest) -> list[str]:
    return ["".join(p.text or "" for p in c.parts or []) for c in request.contents]


def question(i: int) -> str:
    return f"question {i}" + (" search" if i % 2 else "")


def turn_texts(i: int) -> list[str]:
    return [question(i), "", "", ANSWER] if i % 2 else [question(i), "reply"]


async def make(tmp_path: Path, **compaction: Any) -> tuple[Daemon, RecordingLlm]:
    cfg = ZocratesConfig(compaction={"min_turns": 4, "token_floor": 0, **compaction})
    d = Daemon(tmp_path, cfg, retriever=InMemoryRetriever([Passage(item_key="ABCD1234", title="t", text="q text")]))
    model = RecordingLlm()
    d.engine = Engine(d.db.service, model, d.engine.retriever)
    await d.start()
    d.compactor.probe = FixedProbe(1.0)
    return d, model


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, RecordingLlm]]:
    d, model = await make(tmp_path)
    yield d, model
    await d.aclose()


async def compactions(d: Daemon, sid: str) -> list[dict[str, Any]]:
    live = (await d.live_session(sid)).live
    return [ev["actions"]["compaction"] for ev in live if (ev.get("actions") or {}).get("compaction")]


async def test_twelve_turns_compact_consolidate_and_rewind_resurrects(daemon: tuple[Daemon, RecordingLlm]) -> None:
    d, model = daemon
    row = await d.create_session()
    watching = d.watch(row.id)
    invocations = [(await d.prompt(row.id, question(i))).invocation_id for i in range(1, 13)]
    usages = [u for u in watching.take_nowait() if isinstance(u, Usage)]

    comps = await compactions(d, row.id)
    assert len(comps) >= 2
    assert [u.compacted for u in usages] == [False] * 3 + [True] * 9  # effective min 4 turns, probe says yes
    live = (await d.live_session(row.id)).live
    turns = split_turns(live)
    assert all(c["start_timestamp"] == turns[0].start for c in comps)  # rolling: every one starts at turn 1
    assert comps[-1]["end_timestamp"] == turns[9].end  # ends on turn N-K = 10
    assert turns[9].end < turns[10].start
    ends = [c["end_timestamp"] for c in comps]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)
    state = (await d.live_session(row.id)).state
    assert state["compacted_until"] == turns[9].end
    summary = latest_compaction(live)["compacted_content"]["parts"][0]["text"]  # type: ignore[index]
    assert summary.startswith(SUMMARY_HEADER)
    assert summary.count(SUMMARY_HEADER) == 1  # consolidated, not stacked
    for i in range(1, 11):
        assert f"Q{i}: {question(i)}\n" in summary
    assert "Q11:" not in summary
    assert "answered." in summary and "More detail here" not in summary  # the key claim: the first sentence
    assert "[1] t (zotero://select/library/items/ABCD1234)" in summary

    await d.prompt(row.id, "question 13")
    assert texts(model.requests[-1]) == [summary, *turn_texts(11), *turn_texts(12), "question 13"]
    assert model.requests[-1].contents[0].role == "model"

    ui = await d.get_session(row.id)
    users = [m["text"] for m in ui["messages"] if m["role"] == "user"]
    assert users == [*(question(i) for i in range(1, 13)), "question 13"]
    assert not any(SUMMARY_HEADER in m["text"] for m in ui["messages"])
    assert sum(1 for m in ui["messages"] if m["role"] == "assistant") == 13

    # Rewind to turn 3: every compaction came after it, so turns 1-2 come back verbatim.
    await d.rewind(row.id, invocations[2])  # type: ignore[arg-type]
    await d.prompt(row.id, "after rewind")
    assert texts(model.requests[-1]) == [*turn_texts(1), *turn_texts(2), "after rewind"]


async def test_compaction_events_never_reach_the_ui_or_a_replay(daemon: tuple[Daemon, RecordingLlm]) -> None:
    d, _ = daemon
    row = await d.create_session()
    for i in range(1, 7):
        await d.prompt(row.id, question(i))
    live = (await d.live_session(row.id)).live
    assert latest_compaction(live) is not None
    replay = [a for a in map(to_acp, history_updates(live)) if a]
    sent = [a["content"]["text"] for a in replay if a["sessionUpdate"] == "user_message_chunk"]
    assert sent == [question(i) for i in range(1, 7)]
    assert not any(SUMMARY_HEADER in (a.get("content") or {}).get("text", "") for a in replay)
    ui = await d.get_session(row.id)
    assert [m["text"] for m in ui["messages"] if m["role"] == "user"] == [question(i) for i in range(1, 7)]
    assert all(m["text"] for m in ui["messages"])  # no empty bubble from a content-less compaction


async def test_a_turn_after_compaction_loads_only_the_window(daemon: tuple[Daemon, RecordingLlm]) -> None:
    d, _ = daemon
    row = await d.create_session()
    for i in range(1, 9):
        await d.prompt(row.id, question(i))
    svc = d.db.service
    loads: list[Any] = []
    real_get = svc.get_session

    async def spy(**kw: Any) -> Any:
        session = await real_get(**kw)
        if kw.get("config") is None or kw["config"].num_recent_events != 0:
            loads.append((kw.get("config"), len(session.events) if session else None))
        return session

    svc.get_session = spy  # type: ignore[method-assign]
    state = (await d.live_session(row.id)).state
    assert state["compacted_turns"] == 6
    full_reads = 0
    real_live = d.reader.live_session

    async def count_live(sid: str) -> Any:
        nonlocal full_reads
        full_reads += 1
        return await real_live(sid)

    windows: list[tuple[float, int]] = []
    real_window = d.reader.window

    async def spy_window(sid: str, after: float) -> Any:
        events = await real_window(sid, after)
        windows.append((after, len(events)))
        return events

    d.reader.live_session = count_live  # type: ignore[method-assign]
    d.reader.window = spy_window  # type: ignore[method-assign]
    await d.prompt(row.id, "question 9")
    d.reader.live_session = real_live  # type: ignore[method-assign]
    d.reader.window = real_window  # type: ignore[method-assign]
    config, loaded = loads[0]
    assert config.after_timestamp == state["compacted_until"]
    total = len((await d.live_session(row.id)).live)
    assert loaded < 15 < total  # turns 7-8, the compaction(s) after them: not 8 turns' events
    # The compaction step read the same window (not the whole session) and compacted turn 7.
    assert full_reads == 0
    [(after, loaded)] = windows
    assert after == state["compacted_until"] and loaded < 15
    assert (await d.live_session(row.id)).state["compacted_turns"] == 7


async def test_the_gate_holds_below_min_turns_and_token_floor(tmp_path: Path) -> None:
    d, _ = await make(tmp_path, token_floor=30_000)
    try:
        row = await d.create_session()
        for i in range(1, 7):
            await d.prompt(row.id, question(i))
        assert await compactions(d, row.id) == []
    finally:
        await d.aclose()


async def test_a_prompt_below_the_token_floor_costs_no_read(tmp_path: Path) -> None:
    """With the model's reported prompt size under the floor, the gate fails whatever the turn
    count: the evaluation reads nothing (the common case, every turn of a short chat)."""
    d = Daemon(tmp_path, ZocratesConfig(compaction={"min_turns": 0, "token_floor": 30_000}),
               retriever=InMemoryRetriever([Passage(item_key="ABCD1234", title="t", text="q text")]))
    await d.start()
    reads: list[str] = []
    real_live, real_window = d.reader.live_session, d.reader.window

    async def live(sid: str) -> Any:
        reads.append("live")
        return await real_live(sid)

    async def window(sid: str, after: float) -> Any:
        reads.append("window")
        return await real_window(sid, after)

    try:
        row = await d.create_session()
        watching = d.watch(row.id)
        d.reader.live_session, d.reader.window = live, window  # type: ignore[method-assign]
        for i in range(1, 4):
            await d.prompt(row.id, question(i))
        assert reads == []
        usages = [u for u in watching.take_nowait() if isinstance(u, Usage)]
        assert [(u.reason, u.tokens_estimated) for u in usages] == [("gate", False)] * 3
        assert all(0 < u.prompt_tokens < 30_000 for u in usages)
    finally:
        d.reader.live_session, d.reader.window = real_live, real_window  # type: ignore[method-assign]
        await d.aclose()


async def test_effective_min_turns_is_clamped_above_k(tmp_path: Path) -> None:
    d, _ = await make(tmp_path, min_turns=1, keep_recent_turns=2)
    try:
        assert d.compactor.effective_min_turns == 3
        row = await d.create_session()
        await d.prompt(row.id, question(1))
        await d.prompt(row.id, question(2))
        assert await compactions(d, row.id) == []
        await d.prompt(row.id, question(3))
        comps = await compactions(d, row.id)
        assert len(comps) == 1
        turns = split_turns((await d.live_session(row.id)).live)
        assert (comps[0]["start_timestamp"], comps[0]["end_timestamp"]) == (turns[0].start, turns[0].end)
    finally:
        await d.aclose()


class FailingProbe:
    def __init__(self) -> None:
        self.calls = 0

    async def decide(self, probe: ProbeInput) -> float:
        self.calls += 1
        raise ProbeError("boom")


async def test_a_failing_or_unsure_probe_means_no_compaction_and_a_normal_turn(daemon: tuple[Daemon, RecordingLlm]) -> None:
    d, _ = daemon
    failing = FailingProbe()
    d.compactor.probe = failing
    row = await d.create_session()
    watching = d.watch(row.id)
    results = [await d.prompt(row.id, question(i)) for i in range(1, 6)]
    assert all(r.stop_reason == "end_turn" for r in results)
    assert failing.calls == 2  # asked after turns 4 and 5 only (the gate)
    assert [u.reason for u in watching.take_nowait() if isinstance(u, Usage)] == ["gate"] * 3 + ["probe_failed"] * 2
    d.compactor.probe = FixedProbe(0.74)  # just under tau = 0.75
    await d.prompt(row.id, question(6))
    assert [u.reason for u in watching.take_nowait() if isinstance(u, Usage)] == ["probe_no"]
    assert await compactions(d, row.id) == []


async def test_the_hard_backstop_compacts_without_asking(tmp_path: Path) -> None:
    d, _ = await make(tmp_path, hard_backstop_tokens=1)
    try:
        failing = FailingProbe()
        d.compactor.probe = failing
        row = await d.create_session()
        for i in range(1, 5):
            await d.prompt(row.id, question(i))
        assert failing.calls == 0
        assert len(await compactions(d, row.id)) == 1
    finally:
        await d.aclose()


async def test_usage_update_reaches_acp_with_the_compaction_cost(daemon: tuple[Daemon, RecordingLlm]) -> None:
    d, _ = daemon
    row = await d.create_session()
    with d.watch(row.id) as watching:
        for i in range(1, 5):
            await d.prompt(row.id, question(i))
        last = watching.take_nowait()[-1]
    assert isinstance(last, Usage) and last.compacted is True and last.compaction_ms > 0
    assert last.tokens_estimated is True and last.prompt_tokens > 0
    acp = to_acp(last)
    assert acp == {
        "sessionUpdate": "usage_update", "used": last.prompt_tokens, "size": 100_000,
        "_meta": {"zocrates": {"compactionMs": last.compaction_ms, "compacted": True, "reason": last.reason,
                               "tokensEstimated": True}},
    }
